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
        --wrap 'echo started; sleep 8') || fail "sbatch"
for _ in $(seq 1 100); do grep -q started "$out" 2>/dev/null && break; sleep 0.1; done
grep -q started "$out" || fail "the job did not start: $(cat "$out")"
# sentinel_state NODE: "" when NODE's recorded process is its sentinel as
# described above, else why not. The batch script runs on n1 only, so the
# other nodes' staging processes may still be between their local check and
# becoming the sentinel when it starts: each node gets a few seconds.
sentinel_state() {
    local n=$1 rec snt
    rec=$(on_node "$n" cat "/run/stagehand/$id.agent" 2>/dev/null | cut -d' ' -f1)
    [ -n "$rec" ] || { echo "no sentinel recorded in /run/stagehand/$id.agent"; return; }
    snt=$(named_pids "$n" sh-sentinel | tr '\n' ' ')
    [[ " $snt " == *" $rec "* ]] || {
        echo "the recorded process $rec is not a sentinel (sentinels: '$snt'; comm: $(on_node "$n" cat "/proc/$rec/comm" 2>&1))"
        return
    }
    [ "$(on_node "$n" stat -c %U "/proc/$rec")" = root ] || { echo "sentinel $rec is not root's"; return; }
    [ "$(on_node "$n" ps -o pgid= -p "$rec" | tr -d ' ')" = "$rec" ] ||
        echo "sentinel $rec does not lead its own process group"
}
for n in $MINICLUSTER_NODES; do
    why=unknown
    for _ in $(seq 1 25); do
        why=$(sentinel_state "$n")
        [ -z "$why" ] && break
        sleep 0.2
    done
    [ -z "$why" ] || fail "$n: $why"
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
