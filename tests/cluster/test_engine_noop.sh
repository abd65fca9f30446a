#!/usr/bin/env bash
# Engine: a second run with every copy current moves no data and rewrites
# nothing (same inode on every node); the summary says so. doc/design.md §2 step 4.
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_noop.$$"
as_user sh -c "head -c 2000000 /dev/urandom > $src" || fail "cannot write $src"
run() {
    pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
        --timeout=60s --source "$src" --dest "$dst" --json 2>"$errf"
}
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

out=$(run) || fail "first run failed: $out $(cat "$errf")"
[ "$(printf '%s' "$out" | field nodes_copied)" = "$k" ] || fail "first run: $out"
declare -A ino
for n in $MINICLUSTER_NODES; do
    ino[$n]=$(on_node "$n" stat -c %i "$dst") || fail "$dst missing on $n"
    on_node "$n" getfattr -n user.stagehand --only-values "$dst" 2>/dev/null |
        grep -q '^stagehand-meta 1' || fail "$n: no user.stagehand metadata on $dst"
done

out=$(run) || fail "second run failed: $out $(cat "$errf")"
[ "$(printf '%s' "$out" | field nodes_current)" = "$k" ] || fail "second run not a no-op: $out"
[ "$(printf '%s' "$out" | field bytes_transferred)" = 0 ] || fail "second run moved data: $out"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" stat -c %i "$dst")" = "${ino[$n]}" ] || fail "$n: DST was rewritten"
done

# forced sidecar metadata (filesystems without user xattrs) is also trusted
out=$(as_user env STAGEHAND_META_SIDECAR=1 srun --mpi=pmix -N"$k" --ntasks-per-node=1 \
    "$engine" --timeout=60s --source "$src" --dest "$dst.side" --json 2>"$errf") ||
    fail "sidecar run failed: $out $(cat "$errf")"
printf '%s' "$out" | grep -q '"metadata":"sidecar"' || fail "sidecar not used: $out"
out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
    --timeout=60s --source "$src" --dest "$dst.side" --json 2>"$errf") || fail "sidecar rerun failed: $out $(cat "$errf")"
[ "$(printf '%s' "$out" | field nodes_current)" = "$k" ] || fail "sidecar copy not current: $out"
wait_nodes_idle || fail "nodes not idle"
echo "ok: second run is a no-op on $k nodes (xattr and sidecar metadata)"
