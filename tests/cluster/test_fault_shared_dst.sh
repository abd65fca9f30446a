#!/usr/bin/env bash
# case F02 (and F01): DST's directory is one directory that every node sees
# (here bind-mounted into each node, which statfs cannot tell from local
# storage). Staging must refuse before any data moves, with a message that
# names the shared directory and the fix, instead of several nodes writing
# one file; nothing is left in the directory; no node is drained.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-shdst.$$.bin
common=$MINICLUSTER_SHARED/t-shdst-dir.$$
out=$MINICLUSTER_SHARED/t-shdst.$$.out
cleanup() {
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c 'mountpoint -q /nvme/t-shdst && umount /nvme/t-shdst; rmdir /nvme/t-shdst' 2>/dev/null
    done
    rm -rf "$img" "$common" "$out"
}
trap cleanup EXIT
make_user_file "$img" 4
as_user mkdir -m 0700 "$common" || fail "mkdir $common"
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p /nvme/t-shdst && mount --bind '$common' /nvme/t-shdst" ||
        fail "$n: cannot bind-mount $common"
done
k=$(echo "$MINICLUSTER_NODES" | wc -w)

as_user srun -N"$k" --stage-image="$img:/nvme/t-shdst/img.bin" true >"$out" 2>&1 &&
    fail "staging into a shared directory succeeded: $(cat "$out")"
grep -q "stagehand: --stage-image failed: image /nvme/t-shdst/img.bin: .*/nvme/t-shdst is shared with node n[0-9]* (its marker file is visible here)" "$out" ||
    fail "message does not name the shared directory: $(cat "$out")"
grep -q "allow_shared_dst=yes" "$out" || fail "message does not say how to allow it: $(cat "$out")"
left=$(ls -A "$common")
[ -z "$left" ] || fail "left in the shared directory: $left"
as_user srun -N"$k" true || fail "the next job on these nodes failed"
wait_nodes_idle || fail "nodes not idle"
echo "ok: shared destination refused before any data moved"
