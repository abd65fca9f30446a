#!/usr/bin/env bash
# Security issue 30, "nothing a user can do may count as a node fault": the
# engine (stagehand-bcast) runs as the job user, so the user may send it a
# crash signal. With on_node_fault=drain in the plugstack, the victim's
# staging of a 256 MiB image (the signalled node's link at 200 Mbit/s, so
# that the copy outlasts the signal however fast the host is) is (A) sent
# SIGSEGV on a receiving node and (B)
# SIGABRT on the reader node, each by the job user (kill(1) as that user,
# inside the node), once the engine has moved data. Each time: the job fails
# naming the node, the signal and its sender (pid and uid), not as a crash;
# no node is drained, the engine is not started again, no engine is left,
# nothing partial under DST, no temp file, the runtime state is gone; and
# the next job stages everywhere. A real crash (a fault, abort() or root's
# kill) stays a node fault: test_fault_engine_startup.sh,
# test_engine_startup_death.sh.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
read -r reader receiver _ <<<"$MINICLUSTER_NODES"
uid=$(id -u "$MINICLUSTER_USER")
size=256
plugstack_save
cleanup() {
    local n
    fault_test_cleanup
    plugstack_restore
    for n in $MINICLUSTER_NODES; do scontrol update nodename="$n" state=resume 2>/dev/null; done
}
fault_test_files ssig sec-signal
trap cleanup EXIT

plugstack_add on_node_fault=drain

make_slow_source "$src" "$size" || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

# signal_engine NODE SIG IOFIELD: stage $src, and once the engine on NODE has
# moved 64 MiB (IOFIELD of /proc/PID/io), send it SIG as the job user.
signal_engine() {
    local node=$1 sig=$2 field=$3 id pid="" io=0 st pids
    rm -f "$out"
    shape_links --link 200mbit --node "$node" || fail "$sig: cannot shape $node's link"
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap 'echo script-ran') || fail "sbatch refused: $id"
    for _ in $(seq 1 600); do
        pid=$(engine_pids "$node" "$tok" | head -1)
        [ -n "$pid" ] && break
        sleep 0.05
    done
    [ -n "$pid" ] || fail "$sig: no engine appeared on $node (job $id: $(cat "$out" 2>/dev/null))"
    for _ in $(seq 1 600); do
        io=$(proc_io "$node" "$pid" "$field")
        [ "${io:-0}" -ge $((64 * 1048576)) ] && break
        sleep 0.02
    done
    on_node_as_user "$node" kill -s "$sig" "$pid" ||
        fail "$sig: the job user cannot signal the engine $pid on $node"
    echo "$sig: sent by the job user to the engine on $node (pid $pid) after $((io / 1048576)) MiB"
    st=$(wait_job_end "$id" 60)
    shape_clear
    [ "$st" = FAILED ] || fail "$sig: job $id ended $st, expected FAILED ($(sinfo -h -R); $(cat "$out" 2>/dev/null))"
    # the job's output file, written by its batch step on $reader, can come
    # a moment after the job's end
    for _ in $(seq 1 50); do
        grep -qE "stagehand: --stage-image failed: image $dst: .*$node: engine killed by signal SIG$sig sent by pid [0-9]+ of uid $uid, not a crash" "$out" 2>/dev/null &&
            break
        sleep 0.2
    done
    grep -qE "stagehand: --stage-image failed: image $dst: .*$node: engine killed by signal SIG$sig sent by pid [0-9]+ of uid $uid, not a crash" "$out" ||
        fail "$sig: the message does not name $node, the signal and its sender: $(cat "$out")"
    ! grep -q script-ran "$out" || fail "$sig: the batch script ran without its image"
    # one engine per node, started once: no restart after the signal
    pids=$(log_since "$node" "${off[$node]}" | grep -ac "starting it again" || true)
    [ "$pids" = 0 ] || fail "$sig: the engine was started again after the user's signal"
    assert_stopped_staging_clean "$id" "$want" "the job user's $sig"
    assert_no_drain
}

declare -A off
for n in $MINICLUSTER_NODES; do off[$n]=$(log_offset "$n"); done
signal_engine "$receiver" SEGV wchar
echo "ok: (A) SIGSEGV from the job user to the engine on $receiver: the job's error, no drain"

for n in $MINICLUSTER_NODES; do off[$n]=$(log_offset "$n"); done
signal_engine "$reader" ABRT rchar
echo "ok: (B) SIGABRT from the job user to the engine on $reader: the job's error, no drain"

id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
st=$(wait_job_end "$id" 120)
[ "$st" = COMPLETED ] || fail "the next job $id ended $st: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: wrong DST after the next job"
done
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "temp files left after the next job"
assert_no_drain
echo "ok: the job user's crash signals fail only their job; the next job stages on every node"
