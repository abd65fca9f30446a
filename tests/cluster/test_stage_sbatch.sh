#!/usr/bin/env bash
# Issue 4: sbatch --stage-image stages to every node of the job before the
# first step (checked by checksum inside each node), the job sees
# STAGEHAND_IMAGE, the copies belong to the job user, a re-submit is a no-op,
# one stale node is the only one that receives, and nothing is left in
# /run/stagehand after the job. Field cases F03 (no rewrite of current
# copies), F20 (engine runs as the job user).
# shellcheck source=tests/cluster/lib.sh disable=SC2016
source "$(dirname "$0")/lib.sh"

img=/shared/t-sbatch.$$.bin
dst=/nvme/t-sbatch/img.$$.bin
out=/shared/t-sbatch.$$.out
cleanup() { rm -f "$img" "$out"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-sbatch; done; }
trap cleanup EXIT
make_user_file "$img" 24
k=$(echo "$MINICLUSTER_NODES" | wc -w)

jobs=()
submit() {
    local id
    rm -f "$out"
    # shellcheck disable=SC2016  # expanded by the job's shell
    id=$(as_user sbatch --parsable --wait -N"$k" -o "$out" --stage-verbose --stage-image="$img:$dst" \
        --wrap 'srun -N'"$k"' sh -c "echo \$(hostname) image=\$STAGEHAND_IMAGE"') ||
        fail "sbatch failed: $(cat "$out" 2>/dev/null)"
    jobs+=("$id")
}

submit
grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "first run summary: $(cat "$out")"
[ "$(grep -c "image=$dst" "$out")" -eq "$k" ] || fail "STAGEHAND_IMAGE not exported: $(cat "$out")"
assert_staged_everywhere "$img" "$dst"

submit
grep -q "$dst: all $k nodes current, nothing copied" "$out" || fail "re-submit was not a no-op: $(cat "$out")"

on_node n2 rm -f "$dst"
submit
grep -q "$dst: 1 copied, $((k - 1)) current of $k nodes" "$out" || fail "stale node run: $(cat "$out")"
assert_staged_everywhere "$img" "$dst"
assert_no_temp_files "$dst"
wait_nodes_idle || fail "nodes not idle"
for j in "${jobs[@]}"; do assert_no_runtime_state "$j"; done
echo "ok: staged to $k nodes, no-op re-submit, stale node only re-copied"
