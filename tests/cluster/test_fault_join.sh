#!/usr/bin/env bash
# The job's first node never starts its agent (as when the job is cancelled
# before slurmd there ran the prolog, which slurmd then skips): the other
# nodes' agents stop waiting for it, at the latest after join_timeout
# (default 60 s), not after the staging timeout (120 s on the test cluster),
# so their prologs end and the nodes are free again. Here the first node's
# failure ends the job at once, and the epilog then stops the second node's
# staging before its join_timeout. The job fails; no node is drained; the
# next job stages. Case F21 ("one node never starts its prolog ... nothing
# hangs"), seen as the 121 s prolog of a job cancelled 15 ms after its
# allocation in the soak test.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r leader second _ <<<"$MINICLUSTER_NODES"
[ -n "$second" ] || skip "needs 2 nodes"
agent="$STAGEHAND_PREFIX/libexec/stagehand-agent"
[ -x "$agent" ] || fail "$agent not installed"
tok=fjoin$$
tag=fault-join.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    unwrap_on_node "$leader" "$agent"
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 2 || fail "cannot create $src"

# On the leader only: the agent is a program that exits at once, so no agent
# of this job ever listens there.
wrap_on_node "$leader" "$agent" "exit 1" || fail "cannot replace the agent on $leader"
off=$(log_offset "$second")

t0=$SECONDS
id=$(as_user sbatch --parsable -J "$tag" -N2 -w "$leader,$second" -o "$out" \
         --stage-image="$src:$dst" --wrap 'echo script-ran') || fail "sbatch: $id"
st=$(wait_job_end "$id" 150)
took=$((SECONDS - t0))
unwrap_on_node "$leader" "$agent" || fail "cannot restore the agent on $leader"
[ "$st" = FAILED ] || fail "job $id ended $st after $took s: $(cat "$out" 2>/dev/null)"
echo "job failed $took s after submission"
# The first node's failure ends the job at once: its end, not the 60 s
# join_timeout (nor the 120 s staging timeout), ends the second node's wait.
[ "$took" -lt 60 ] || fail "job took $took s to fail: the second node waited for join_timeout or the staging timeout"
log_since "$second" "$off" | grep -q "job $id: stopping its staging on this node .*the job has ended here" ||
    fail "$second's slurmd log does not say that the epilog stopped its staging: $(log_since "$second" "$off" | grep stagehand | tail -3)"
# nothing of the job is left running on the second node
left=$(procs_left node_pids "stagehand-(agent|bcast)" 30)
[ -z "$left" ] || fail "processes of job $id left: $left"
! grep -q script-ran "$out" || fail "the batch script ran without its image"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test ! -e "$dst" || fail "$n: $dst exists"
done
assert_no_drain
echo "ok: the first node's agent never started: the job failed after $took s, $second's staging ended, no drain"

id=$(as_user sbatch --parsable -J "$tag" -N2 -w "$leader,$second" -o "$out" \
         --stage-image="$src:$dst" --wrap 'echo script-ran') || fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "the next job failed: $(cat "$out")"
assert_no_drain
echo "ok: the next job stages"
