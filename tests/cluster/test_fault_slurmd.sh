#!/usr/bin/env bash
# Issue 6 fault matrix: (a) slurmd restarted on a node while its job's
# staging runs; (b) one node's prolog starts seconds after the others' (its
# slurmd frozen at submit, thawed 6 s later: start-up skew, F21). Each time
# the outcome is clear: the staging completes with DST whole everywhere, or
# the job fails naming the node; never a partial file; no node drained; the
# next job works.
#
# Not here: a prolog that never starts. With the cluster's plugstack
# timeout=120s, a node frozen for the whole staging deadline is declared
# not responding by slurmctld first (SlurmdTimeout=60) and the batch job is
# requeued: Slurm's reaction, not ours, would be tested. The rendezvous
# deadline naming the missing node is covered by test_fault_join.sh,
# test_fault_link.sh (full run) and test_fault_agent_kill.sh; a prolog 40 s
# late (longer than this test's 6 s) by test_fault_skew.sh.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ victim late _ <<<"$MINICLUSTER_NODES"
[ -n "$late" ] || skip "needs 3 nodes"
k=3
tok=fslurmd$$
tag=fault-slurmd.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    "$MINICLUSTER" thaw "$late" 2>/dev/null
    shape_clear
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_slow_source "$src" 128 ||
    fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

submit() {
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran'
}
# outcome ID WHAT: completed with DST whole everywhere, or failed naming NODE
outcome() {
    local st n
    st=$(wait_job_end "$1" 90)
    case "$st" in
        COMPLETED)
            grep -q script-ran "$out" || fail "$2: script did not run: $(cat "$out")"
            for n in $MINICLUSTER_NODES; do
                [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$2: $n: DST not whole after success"
            done
            echo "ok: $2: staging completed, DST whole everywhere" ;;
        FAILED)
            grep -q "stagehand: --stage-image failed: image $dst: .*$3" "$out" ||
                fail "$2: failure does not name $3: $(cat "$out")"
            for n in $MINICLUSTER_NODES; do
                on_node "$n" test ! -e "$dst" || fail "$2: $n: DST exists after a failure"
            done
            echo "ok: $2: job failed naming $3: $(grep -m1 'stage-image failed' "$out")" ;;
        *) fail "$2: job $1 ended $st: $(cat "$out")" ;;
    esac
    [ -z "$(temp_files_in "/nvme/$tok")" ] || fail "$2: temp files left: $(temp_files_in "/nvme/$tok")"
    assert_runtime_gone "$1"
    assert_no_drain
}

# (a) slurmd restarted during the transfer. Every link at 100 Mbit/s: the
# copy lasts some 12 s however fast or loaded the host is (unshaped, the
# sparse image could be copied between two polls for its temp files).
shape_links --link 100mbit || fail "cannot shape the links"
id=$(submit) || fail "sbatch: $id"
for _ in $(seq 1 300); do
    [ -n "$(temp_files_in "/nvme/$tok")" ] && break
    sleep 0.02
done
[ -n "$(temp_files_in "/nvme/$tok")" ] || fail "(a) the transfer did not start: $(cat "$out")"
"$MINICLUSTER" restart-slurmd "$victim" >/dev/null || fail "cannot restart slurmd on $victim"
outcome "$id" "(a) slurmd restarted on $victim" "$victim"
shape_clear
for n in $MINICLUSTER_NODES; do on_node "$n" rm -f "$dst"; done

# (b) one node's prolog 6 s late
"$MINICLUSTER" freeze "$late" || fail "cannot freeze $late"
id=$(submit) || fail "sbatch: $id"
sleep 6
"$MINICLUSTER" thaw "$late" || fail "cannot thaw $late"
outcome "$id" "(b) $late's prolog 6 s late" "$late"

# the next job works
id=$(submit) || fail "sbatch: $id"
[ "$(wait_job_end "$id" 90)" = COMPLETED ] || fail "the next job failed: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: DST wrong after the next job"
done
assert_no_drain
echo "ok: the next job works"
