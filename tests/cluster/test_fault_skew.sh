#!/usr/bin/env bash
# Case F21, the skew half: "prolog start times are skewed by 40 s across
# nodes". One node's agent starts 40 s after the others' (its program is
# wrapped in a 40 s sleep on that node only). With the default join_timeout
# the others wait for it: the staging completes, DST is whole on every node,
# the late node is not named as missing and nothing is drained. (The other
# half of F21, a node that never starts, is test_fault_join.sh.)
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r leader second late _ <<<"$MINICLUSTER_NODES"
[ -n "$late" ] || skip "needs 3 nodes"
agent="$STAGEHAND_PREFIX/libexec/stagehand-agent"
[ -x "$agent" ] || fail "$agent not installed"
skew=40
tok=fskew$$
tag=fault-skew.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
real=/tmp/$tok.agent
mark=/tmp/$tok.late
cleanup() {
    # the job first: a wrapper still in its sleep keeps the bind mount busy
    for j in $(jobs_named "$tag"); do
        scancel "$j" 2>/dev/null
        wait_job_end "$j" 60 >/dev/null
    done
    unwrap_on_node "$late" "$agent" || on_node "$late" umount -l "$agent" 2>/dev/null
    on_node "$late" rm -f "$real" "$mark"
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 4 || fail "cannot create $src"
want=$(sha256sum "$src" | cut -d' ' -f1)

# On $late only: the real agent, started $skew s late with the same inputs.
on_node "$late" sh -c "cp '$agent' '$real' && chmod 755 '$real'" ||
    fail "cannot copy the agent on $late"
wrap_on_node "$late" "$agent" "date +%s >'$mark'; sleep $skew; exec '$real' \"\$@\"" ||
    fail "cannot wrap the agent on $late"
declare -A off
for n in $leader $second $late; do off[$n]=$(log_offset "$n"); done

t0=$SECONDS
id=$(as_user sbatch --parsable -J "$tag" -N3 -w "$leader,$second,$late" -o "$out" \
         --stage-verbose --stage-image="$src:$dst" --wrap 'echo script-ran') ||
    fail "sbatch: $id"
st=$(wait_job_end "$id" 150)
took=$((SECONDS - t0))
unwrap_on_node "$late" "$agent" || fail "cannot restore the agent on $late"
[ "$st" = COMPLETED ] ||
    fail "job $id ended $st after $took s with $late's agent $skew s late: $(cat "$out" 2>/dev/null)"
on_node "$late" test -s "$mark" || fail "the wrapped agent did not run on $late"
[ "$took" -ge "$skew" ] || fail "job $id ended after $took s: $late's agent was not $skew s late"
grep -q script-ran "$out" || fail "the batch script did not run: $(cat "$out")"
grep -q "3 copied, 0 current of 3 nodes" "$out" ||
    fail "the job's summary does not say 3 nodes copied: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_sha "$n" "$dst")" = "$want" ] || fail "$n: $dst is not whole"
done
! grep -q "did not answer\|unreachable" "$out" || fail "the job's output names a node as missing: $(cat "$out")"
# this job's lines in node @1's slurmd log since the submission
job_log() { log_since "$1" "${off[$1]}" | grep -a "job=${id} \|job ${id}[ :]"; }
# the wording of the leader (did not connect, did not answer) and of the others
# (could not reach their parent) when a node is given up on
for n in $leader $second $late; do
    job_log "$n" | grep -aq "stagehand: job $id user" ||
        fail "$n's slurmd log has no stagehand line of job $id (the check below would be empty)"
    ! job_log "$n" | grep -aq "did not connect\|did not answer\|could not reach\|unreachable\|staging failed" ||
        fail "$n's slurmd log names a node as missing: $(job_log "$n" | tail -3)"
done
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "temp files left: $(temp_files_in "/nvme/$tok")"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: $late's agent started $skew s late: staging completed in $took s, DST whole on every node, no drain"
