#!/usr/bin/env bash
# Issue 4, F27: several images in one job (a list and a repeated option);
# an identical repeated value is a no-op; every image is exported.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

a=$MINICLUSTER_SHARED/t-multi-a.$$.bin
b=$MINICLUSTER_SHARED/t-multi-b.$$.bin
cleanup() { rm -f "$a" "$b"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-multi; done; }
trap cleanup EXIT
make_user_file "$a" 3
make_user_file "$b" 5
k=$(echo "$MINICLUSTER_NODES" | wc -w)

out=$(as_user srun -N"$k" --stage-image="$a:/nvme/t-multi/a.bin,$b:/nvme/t-multi/b.bin" \
    --stage-image="$a:/nvme/t-multi/a.bin" \
    sh -c 'echo "n=$STAGEHAND_IMAGE_COUNT first=$STAGEHAND_IMAGE all=$STAGEHAND_IMAGES"' 2>&1) ||
    fail "srun failed: $out"
[ "$(printf '%s\n' "$out" | grep -c "^n=2 first=/nvme/t-multi/a.bin all=/nvme/t-multi/a.bin:/nvme/t-multi/b.bin$")" -eq "$k" ] ||
    fail "exported variables wrong: $out"
assert_staged_everywhere "$a" /nvme/t-multi/a.bin
assert_staged_everywhere "$b" /nvme/t-multi/b.bin
echo "ok: two images staged to $k nodes in one job"
