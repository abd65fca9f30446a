#!/usr/bin/env bash
# Issue 5 (the prolog hands the staging off) and cases F06/F21: each node's
# job prolog forks the node's staging process and ends; the job's tasks wait
# for it before their programs start. (a) While the nodes stage, the job is
# RUNNING (not CONFIGURING), its script has not started, and the batch task
# waits under the name stagehand-wait; the script starts once the staging is
# done and finds DST complete. (b) A node's staging process killed in the
# middle (with the agent it started) leaves that node without a status: the
# job fails with a message that says so instead of one about PrologFlags, no
# partial DST or temp file is left, no node is drained, and the job staged
# again works.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
fault_test_files twait stage-task-wait
make_slow_source "$src" 160 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)
# Every link at 100 Mbit/s: a copy lasts some 15 s however fast or loaded the
# host is, the window in which (a) looks at the job and (b) kills a staging
# process. Unshaped, the sparse image could be copied between two polls, and
# the staging process's record was gone (it ends once its status is written).
shape_links --link 100mbit || fail "cannot shape the links"

submit() {
    rm -f "$out"
    # shellcheck disable=SC2016  # expanded by the job's shell
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap 'echo "script-ran $(md5sum '"$dst"' | cut -d" " -f1)"'
}
staging_started() {
    for _ in $(seq 1 300); do
        [ -n "$(temp_files_in "/nvme/$tok")" ] && return 0
        sleep 0.02
    done
    return 1
}

# (a) the job runs, its task waits
id=$(submit) || fail "sbatch: $id"
staging_started || fail "the transfer did not start: $(cat "$out" 2>/dev/null)"
st=$(squeue -h -j "$id" -o %T)
[ "$st" = RUNNING ] || fail "job $id is $st while its nodes stage (want RUNNING: the prolog has ended)"
! grep -q script-ran "$out" 2>/dev/null || fail "the script started before the staging ended"
# this job's (scontrol listpids, from n1's slurmd): another job's task may
# wait on n1 too, and end before it is looked at
waiting=$(on_node n1 scontrol listpids "$id" 2>/dev/null | awk 'NR > 1 {print $1}' |
    grep -xF -f - <(named_pids n1 stagehand-wait) || true)
[ -n "$waiting" ] || fail "no task named stagehand-wait on n1 while it stages"
[ "$(on_node n1 stat -c %U "/proc/$(echo "$waiting" | head -1)")" = root ] ||
    fail "the waiting task is not root's (task_init_privileged runs as root)"
st=$(wait_job_end "$id" 120)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out")"
grep -q "^script-ran $want\$" "$out" || fail "the script did not see DST complete: $(cat "$out")"
assert_runtime_gone "$id"
echo "ok: job RUNNING while it staged, task waiting as stagehand-wait, script started on a complete DST"

# (b) n1's staging process and its agent killed in the middle
for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
id=$(submit) || fail "sbatch: $id"
staging_started || fail "the transfer did not start: $(cat "$out" 2>/dev/null)"
sp=$(on_node n1 cat "/run/stagehand/$id.agent" 2>/dev/null | cut -d' ' -f1)
[ -n "$sp" ] || fail "n1: no staging process recorded in /run/stagehand/$id.agent"
# The staging process first, then its agent: killed the other way round, the
# staging process could see its agent end (killed by signal 9) and write that
# as the node's status before its own kill, and the job would fail for the
# agent instead.
on_node n1 sh -c "a=\$(pgrep -P $sp -x stagehand-agent); kill -9 $sp || exit 1; kill -9 \$a 2>/dev/null; exit 0" ||
    fail "n1: cannot kill staging process $sp"
st=$(wait_job_end "$id" 120)
[ "$st" = FAILED ] || fail "job $id ended $st after its staging process was killed: $(cat "$out")"
grep -q "job $id has no staging status on this node: its staging process ended without writing one" "$out" ||
    fail "no message about the killed staging process: $(cat "$out")"
! grep -q "PrologFlags" "$out" || fail "the message blames PrologFlags: $(cat "$out")"
! grep -q script-ran "$out" || fail "the script ran without its image"
assert_stopped_staging_clean "$id" "$want" "the staging process was killed"
echo "ok: staging process killed: the job failed saying so, no partial DST, no temp file, no drain"

shape_clear
id=$(submit) || fail "sbatch: $id"
st=$(wait_job_end "$id" 120)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out")"
grep -q "^script-ran $want\$" "$out" || fail "the job staged again did not see DST: $(cat "$out")"
assert_no_drain
echo "ok: the job staged again works"
