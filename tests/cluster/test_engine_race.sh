#!/usr/bin/env bash
# Engine: two runs stage the same SRC to the same DST on the same nodes at the
# same time (case F03). Both exit 0, DST is complete on every node, no temp
# file remains; the per-DST lock serialises them and the second finds the
# copy current (or, if the scheduler ran them one after the other, simply
# skips).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
tag="eng_race.$$"
src="$MINICLUSTER_SHARED/$tag.src"
dst="/nvme/$tag/img"
o1=$(mktemp)
o2=$(mktemp)
cleanup() {
    rm -f "$src" "$o1" "$o2"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tag"; done
}
trap cleanup EXIT
as_user sh -c "head -c 50000000 /dev/urandom > $src" || fail "cannot write $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)

# pmix_srun (lib.sh): Slurm 22.05's PMIx munge race between two slurmstepds
# gets one more try, as in the other engine tests; any other failure stays.
run() {
    PMIX_SRUN_TIMEOUT=120 pmix_srun --oversubscribe -N"$k" --ntasks-per-node=1 "$engine" \
        --source "$src" --dest "$dst" --json --timeout=60s >"$1" 2>&1
}
run "$o1" &
p1=$!
run "$o2" &
p2=$!
wait "$p1" || fail "first run failed: $(cat "$o1")"
wait "$p2" || fail "second run failed: $(cat "$o2")"
c1=$(grep -o '"nodes_copied":[0-9]*' "$o1" | cut -d: -f2)
c2=$(grep -o '"nodes_copied":[0-9]*' "$o2" | cut -d: -f2)
copied=$((${c1:-0} + ${c2:-0}))
[ "$copied" = "$k" ] || fail "expected $k copies in total, got $copied: $(cat "$o1" "$o2")"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" sha256sum "$dst" | cut -d' ' -f1)" = "$want" ] || fail "$n content differs"
    left=$(on_node "$n" sh -c "ls -A /nvme/$tag | grep '\.tmp\$'" || true)
    [ -z "$left" ] || fail "temp file left on $n: $left"
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: two concurrent runs, $copied copies written in total, content identical"
