#!/usr/bin/env bash
# Issue 35 item 6: a cause for every failure. In the middle of a copy (a
# quarter of the image written on the last node), one of the three processes
# that stage on that node is killed (SIGKILL): its engine, its agent, or its
# staging process (stagehand-stage, the job prolog's process that started
# the agent and records the node's outcome). Each time the job fails
# promptly (within 45 s, not at the staging deadline), its batch script does
# not run, and its error output is a stagehand line naming the node and what
# ended (the engine; for the agent or the staging process, that the node
# closed the control connection mid-staging, not that it "did not answer");
# the node's slurmd log has a line naming the node
# and what ended (the engine, the agent, the staging process); no partial
# DST, no temp file, no process or runtime state of the job is left, no node
# is drained (the other nodes may have their whole copy: the copy goes on
# around a dead node, doc/design.md §5). Then the same job stages on every
# node. Cases F06, F21.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run on the node
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
victim=${MINICLUSTER_NODES##* }
fault_test_files fcause fault-cause
size=$((128 * 1048576))
make_slow_source "$src" 128 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)
# The victim's link at 50 Mbit/s (about 5.5 MiB/s): the chain runs at its
# pace, so a quarter of the image takes some 6 s on the victim however fast
# or loaded the host is (unshaped, a sparse 2 GiB image could be copied
# before the kill), and the repair around the killed victim runs over the
# others' unshaped links, fast.
shape_links --link 50mbit --node "$victim" || fail "cannot shape $victim's link"

# kill_one WHAT: stage, kill WHAT (engine, agent, stage) on $victim at a
# quarter of the image, check the outcome.
kill_one() {
    local what=$1 id pid agent stager target off left n got cause
    rm -f "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
    off=$(log_offset "$victim")
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap 'echo script-ran') || fail "$what: sbatch: $id"
    # (the job may wait for its nodes: slurmctld finds a node of a loaded
    # host not responding for a while after the previous job)
    pid=$(wait_engine_pid "$victim" "$tok" 90)
    [ -n "$pid" ] || fail "$what: job $id: no engine on $victim: $(cat "$out" 2>/dev/null)"
    # up from the engine: the agent's PMIx host (an agent process), the
    # agent, the staging process; in one walk inside the node (from the host,
    # each step is a namespace entry: seconds on a loaded host)
    read -r agent stager <<<"$(on_node "$victim" sh -c '
        p=$1 agent="" stager=""
        while [ -n "$p" ] && [ "$p" -gt 1 ]; do
            case "$(cat "/proc/$p/comm" 2>/dev/null)" in
                stagehand-stage) stager=$p; break ;;
                stagehand-agent) agent=$p ;;
            esac
            p=$(ps -o ppid= -p "$p" | tr -d " ")
        done
        echo "${agent:--} ${stager:--}"' sh "$pid")"
    [ "${agent:--}" != - ] || fail "$what: job $id: no agent above the engine $pid on $victim"
    [ "${stager:--}" != - ] ||
        fail "$what: job $id: no staging process above the agent $agent on $victim"
    case $what in
        engine) target=$pid cause="engine killed by signal 9" ;;
        agent) target=$agent cause="agent killed by signal 9" ;;
        stage) target=$stager cause="its staging process (stagehand-stage) ended without an outcome" ;;
    esac
    # wait for a quarter of the image in the engine's writes, then kill
    { wait_io "$victim" "$pid" wchar $((size / 4)) && on_node "$victim" kill -9 "$target"; } ||
        fail "$what: job $id: could not kill $target at a quarter of the image"
    assert_failed_after_kill "$id" 45 "$what killed on $victim"
    grep -q "^stagehand: --stage-image failed: .*$victim" "$out" ||
        fail "$what: job $id: the error output does not name $victim: $(cat "$out")"
    # the engine reports its own end; a killed agent (or one that stopped
    # itself because its staging process ended) closes its control
    # connection mid-staging, which its parent in the tree reports
    case $what in
        engine) said="$victim: $cause" ;;
        *) said="$victim:\\? closed the control connection (agent ended or link broke)" ;;
    esac
    grep -q "^stagehand: --stage-image failed: .*$said" "$out" ||
        fail "$what: job $id: the error output does not say '$said': $(cat "$out")"
    ! grep -q "$victim:\\? did not answer" "$out" ||
        fail "$what: job $id: the error output says $victim did not answer: $(cat "$out")"
    echo "  job's error output: $(grep '^stagehand:' "$out" | head -1)"
    # the victim's slurmd log names the node and what ended (the epilog's
    # line for the staging process comes at the job's end)
    wait_log_line "$victim" "$off" "job $id user $MINICLUSTER_USER: staging failed on $victim: .*$cause\|job $id: staging failed on $victim: $cause" ||
        true # (the line is looked for again below, for the message)
    got=$(log_since "$victim" "$off" | grep "job $id.*staging failed on $victim" | head -1)
    grep -q "$cause" <<<"$got" ||
        fail "$what: job $id: $victim's slurmd log does not say '$cause': $(log_since "$victim" "$off" | grep "job $id" | head -5)"
    echo "  $victim's slurmd log: ${got#*] }"
    # the three names in one pattern (pgrep -x takes a regular expression):
    # one pass over the nodes, not three
    left=$(procs_left named_pids 'stagehand-(stage|agent|bcast)' 30)
    [ -z "$left" ] ||
        fail "$what: job $id: stagehand-stage, -agent or -bcast still runs 30 s after the kill: $left"
    # (also: each node's DST absent or whole, no partial DST)
    assert_stopped_staging_clean "$id" "$want" "the $what's kill"
    echo "ok: $what killed on $victim: job $id failed with its cause named, nothing left, no drain"
}

for what in engine agent stage; do kill_one "$what"; done

rm -f "$out"
shape_clear
# a step on every node: after a repair (doc/design.md §5) only the victim
# stages, and a batch script alone would start on the current batch node
stage_job_ends COMPLETED 180 "$src:$dst" "srun -N$k -n$k true && echo script-ran"
grep -q script-ran "$out" || fail "the next job's script did not run: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_no_drain
echo "ok: the next job stages on every node"
