#!/usr/bin/env bash
# Issue 5 (the no-op at job start): when every node's copy is current, no
# agent starts anywhere. Each node's prolog hands its staging to a process
# of its own and ends; after the local check that process stays on as the
# sentinel (process name sh-sentinel, root, leading a process group of its
# own so that slurmd's kill of the prolog's group misses it; no exec) that
# holds the job's control-plane port
# and would start the agent if another node's agent connected. Here nothing
# connects: during the job every node still has its recorded sentinel, never
# exec'd, and no stagehand-agent; the epilog stops the sentinels, nothing is
# left, no node drained. (A node that needs a copy wakes them: see
# test_stage_sbatch, a stale leaf waking n1, which wakes the other leaf, and
# test_stage_detached, n2 and n3 waking n1.)
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
fault_test_files tsnt stage-sentinel
as_user sh -c "head -c 4194304 /dev/urandom > '$src'" || fail "cannot create $src"

as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
    --wrap true >/dev/null || fail "first staging: $(cat "$out")"

id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose --stage-image="$src:$dst" \
        --wrap 'echo started; sleep 4') || fail "sbatch"
for _ in $(seq 1 100); do grep -q started "$out" 2>/dev/null && break; sleep 0.1; done
grep -q started "$out" || fail "the job did not start: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    rec=$(on_node "$n" cat "/run/stagehand/$id.agent" 2>/dev/null | cut -d' ' -f1)
    [ -n "$rec" ] || fail "$n: no sentinel recorded in /run/stagehand/$id.agent"
    snt=$(named_pids "$n" sh-sentinel | tr '\n' ' ')
    [[ " $snt " == *" $rec "* ]] || fail "$n: the recorded process $rec is not a sentinel (sentinels: '$snt'; comm: $(on_node "$n" cat "/proc/$rec/comm" 2>&1))"
    [ "$(on_node "$n" stat -c %U "/proc/$rec")" = root ] || fail "$n: sentinel $rec is not root's"
    [ "$(on_node "$n" ps -o pgid= -p "$rec" | tr -d ' ')" = "$rec" ] ||
        fail "$n: sentinel $rec does not lead its own process group"
    agents=$(named_pids "$n" stagehand-agent | tr '\n' ' ')
    [ -z "$agents" ] || fail "$n: an agent runs although every node is current: $agents"
done
grep -q "^stagehand: $dst: current on n1, nothing copied" "$out" || fail "n1 was not current: $(cat "$out")"
st=$(wait_job_end "$id" 60)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out")"
assert_runtime_gone "$id"
left=$(procs_left named_pids sh-sentinel 10)
[ -z "$left" ] || fail "sentinels left after the job: $left"
assert_no_drain
echo "ok: every node current: no agent started on any of $k nodes, the epilog stopped the sentinels"
