#!/usr/bin/env bash
# Issue 6 fault matrix, plugin path: the engine is SIGKILLed at ~50% of the
# transfer (A) on a receiving node, with no earlier copy, and (B) on the
# reader node, with the complete previous version of DST on every node.
# Each time (doc/design.md §5 row 3, §4 fault tolerance): the job fails at step start
# with a message naming the node and the cause, promptly (the killed engine's
# agent knows at once; the other agents must not wait for the staging
# deadline); no partial file under DST's name anywhere (A: DST absent on the
# killed node, a whole copy on the others, whose copy went on around it;
# B: the reader, no repair: still the previous version, byte for byte); the survivors leave no temp
# file and the next run sweeps the killed rank's; no node is drained; the next
# job on those nodes stages correctly. Cases F06, F21, F22, F29 (old DST kept,
# replaced only by rename).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 3 ] || skip "needs 3 nodes"
read -r reader _ receiver _ <<<"$MINICLUSTER_NODES"
tok=fkill$$
tag=fault-kill.$$
dst=/nvme/$tok/img
srcA=$MINICLUSTER_SHARED/$tok.a
srcB=$MINICLUSTER_SHARED/$tok.b
out=$MINICLUSTER_SHARED/$tok.out
size=$((384 * 1048576))
# How long after the kill the outcome must be known. The staging deadline
# (plugstack timeout=120s here, 600s by default) is for nodes that never
# answer; a node whose engine died answers at once. After a receiver's
# death the others also make their copy again (doc/design.md §5): the
# stall limit (10 s here) and a whole copy more.
bound=40
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$srcA" "$srcB" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
# A: zeros (sparse, instant); B: the same with random blocks, so they differ.
as_user truncate -s "$size" "$srcA" || fail "cannot create $srcA"
as_user sh -c "cp --sparse=always '$srcA' '$srcB' &&
    head -c 1048576 /dev/urandom | dd of='$srcB' conv=notrunc status=none &&
    head -c 1048576 /dev/urandom | dd of='$srcB' bs=1M seek=383 conv=notrunc status=none" ||
    fail "cannot create $srcB"
shaA=$(md5sum "$srcA" | cut -d' ' -f1)
shaB=$(md5sum "$srcB" | cut -d' ' -f1)
errors=()
unblocked=0

# A step on every node: its tasks wait for their node's copy (after a
# receiver's death the batch node's copy is current, and a script alone
# would end the job before the killed node's new copy is done).
submit() { # SRC -> job id
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$1:$dst" \
        --wrap "srun -N$k -n$k true && echo script-ran"
}

# kill_at_half VICTIM SRC IOFIELD: stage SRC, SIGKILL VICTIM's engine once it
# has moved half of the file, then check the outcome. Prints nothing; appends
# to errors.
kill_at_half() {
    local victim=$1 src=$2 field=$3 id pid="" io t0 st
    id=$(submit "$src") || fail "sbatch refused: $id"
    for _ in $(seq 1 200); do
        pid=$(engine_pids "$victim" "$tok" | head -1)
        [ -n "$pid" ] && break
        sleep 0.05
    done
    [ -n "$pid" ] || fail "no engine appeared on $victim (job $id: $(cat "$out" 2>/dev/null))"
    io=$(kill_at_io "$victim" "$pid" "$field" $((size / 2))) ||
        fail "cannot kill engine $pid on $victim: it ended before half of the file (job $id)"
    echo "killed the engine on $victim (pid $pid) after $((io / 1048576)) MiB ($field)"
    t0=$SECONDS
    st=$(wait_job_end "$id" "$bound")
    if [ "$st" != FAILED ] && [ "$st" != COMPLETED ]; then
        errors+=("$victim: job $id still staging ${bound}s after the engine was killed: the other nodes' agents wait for the staging deadline instead of stopping their engines (core/agent/pmix_host.c host_run)")
        # Unblock: a cancelled job's prolog runs to its end (slurmd waits for
        # it) and its engines hold DST's lock until the deadline. Stop this
        # staging's remaining engines (recorded pids), then go on.
        scancel "$id"
        unblocked=1
        for n in $MINICLUSTER_NODES; do
            for p in $(engine_pids "$n" "$tok"); do on_node "$n" kill -9 "$p"; done
        done
        st=$(wait_job_end "$id" 30)
        echo "job $id cancelled, its engines stopped: $st"
        return
    fi
    echo "job $id ended $st $((SECONDS - t0)) s after the kill"
    [ "$st" = FAILED ] || { errors+=("$victim: job $id ended $st, expected FAILED"); return; }
    grep -q "stagehand: --stage-image failed: image $dst: .*${victim}[,:].*engine killed by signal 9" "$out" ||
        errors+=("$victim: message does not name the node and cause: $(cat "$out")")
    ! grep -q script-ran "$out" || errors+=("$victim: the batch script ran without its image")
}

# after_failure WANT_SHA VICTIM [SURVIVOR_SHA]: DST is WANT_SHA ("" =
# absent) on VICTIM, and on the others too unless SURVIVOR_SHA is given (a
# receiver's death: the others' copy went on around it, doc/design.md §5);
# no temp file on the survivors.
after_failure() {
    local n got victim=$2 expect
    for n in $MINICLUSTER_NODES; do
        got=$(node_md5 "$n" "$dst")
        expect=$1
        [ "$n" != "$victim" ] && [ -n "${3:-}" ] && expect=$3
        [ "$got" = "$expect" ] || errors+=("$n: DST is '${got:-absent}' after the failure, expected '${expect:-absent}'")
        [ "$n" = "$victim" ] || [ "$unblocked" = 1 ] && continue
        ! grep -q "^$n:" <<<"$(temp_files_in "/nvme/$tok")" || errors+=("$n: survivor left a temp file")
    done
}

# recover SRC SHA: the next job stages SRC everywhere and sweeps every temp
# file; no node drained.
recover() {
    local id st
    id=$(submit "$1") || fail "sbatch refused: $id"
    st=$(wait_job_end "$id" 60)
    [ "$st" = COMPLETED ] || fail "the next job $id ended $st: $(cat "$out")"
    grep -q script-ran "$out" || fail "the next job's script did not run: $(cat "$out")"
    for n in $MINICLUSTER_NODES; do
        [ "$(node_md5 "$n" "$dst")" = "$2" ] || fail "$n: wrong DST after the next job"
    done
    left=$(temp_files_in "/nvme/$tok")
    [ -z "$left" ] || fail "temp files left after the next run: $left"
    assert_runtime_gone "$id"
    assert_no_drain
}

# A: a receiving node's engine, fresh DST
unblocked=0
kill_at_half "$receiver" "$srcA" wchar
after_failure "" "$receiver" "$shaA"
assert_no_drain
recover "$srcA" "$shaA"
echo "ok: A: receiver $receiver killed; recovered, temp files swept"

# B: the reader's engine, previous version in place
unblocked=0
kill_at_half "$reader" "$srcB" rchar
after_failure "$shaA" "$reader"
assert_no_drain
recover "$srcB" "$shaB"
echo "ok: B: reader $reader killed; previous version kept, then replaced"

if [ ${#errors[@]} -gt 0 ]; then
    printf 'FAIL: %s\n' "${errors[@]}"
    exit 1
fi
echo "ok: engine killed on a receiver and on the reader: clear failure, no partial file, next job fine"
