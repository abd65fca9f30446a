#!/usr/bin/env bash
# Issue 4, F18 and doc/design.md §5: the source removed after submit fails the
# job at step start with the message in the job's output; the nodes are not
# drained and the next job on them works; nothing is written under DST.
# shellcheck source=tests/cluster/lib.sh disable=SC2016
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-removed.$$.bin
out=$MINICLUSTER_SHARED/t-removed.$$.out
dst=/nvme/t-removed/img.bin
cleanup() { rm -f "$img" "$out"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-removed; done; }
trap cleanup EXIT
make_user_file "$img" 1
k=$(echo "$MINICLUSTER_NODES" | wc -w)

jobid=$(as_user sbatch --parsable -H -N"$k" -o "$out" --stage-image="$img:$dst" --wrap 'echo step-ran') ||
    fail "sbatch failed"
rm -f "$img"
as_user scontrol release "$jobid" || fail "cannot release job $jobid"
for _ in $(seq 1 150); do
    state=$(scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z]*' | cut -d= -f2)
    case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
    sleep 0.2
done
[ "$state" = FAILED ] || fail "job $jobid ended $state, expected FAILED"
grep -q "stagehand: --stage-image failed: .*source $img: No such file or directory" "$out" ||
    fail "message not in the job output: $(cat "$out")"
! grep -q step-ran "$out" || fail "the batch script ran without its image"
wait_nodes_idle || fail "nodes drained or busy after a user error"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test ! -e "$dst" || fail "$n: $dst exists"
done
as_user srun -N"$k" true || fail "the next job on these nodes failed"
echo "ok: job $jobid failed with the message, nodes idle"
