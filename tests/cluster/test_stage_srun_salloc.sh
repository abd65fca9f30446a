#!/usr/bin/env bash
# Issue 4: srun and salloc --stage-image stage to every node before the
# first step; the tasks read the image at $STAGEHAND_IMAGE.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-srun.$$.bin
cleanup() { rm -f "$img"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-srun /nvme/t-salloc; done; }
trap cleanup EXIT
make_user_file "$img" 8
want=$(sha256sum "$img" | cut -d' ' -f1)
k=$(echo "$MINICLUSTER_NODES" | wc -w)

out=$(as_user srun -N"$k" --stage-image="$img:/nvme/t-srun/img.bin" \
    sh -c 'sha256sum "$STAGEHAND_IMAGE"' 2>&1) || fail "srun failed: $out"
[ "$(printf '%s\n' "$out" | grep -c "^$want  /nvme/t-srun/img.bin")" -eq "$k" ] ||
    fail "srun: tasks did not all see the image: $out"

out=$(as_user salloc -N"$k" --stage-image="$img:/nvme/t-salloc/img.bin" \
    srun -N"$k" sh -c 'sha256sum "$STAGEHAND_IMAGE"' 2>&1) || fail "salloc failed: $out"
[ "$(printf '%s\n' "$out" | grep -c "^$want  /nvme/t-salloc/img.bin")" -eq "$k" ] ||
    fail "salloc: steps did not all see the image: $out"
assert_staged_everywhere "$img" /nvme/t-salloc/img.bin
wait_nodes_idle || fail "nodes not idle"
echo "ok: srun and salloc staged to $k nodes"
