#!/usr/bin/env bash
# Issue 6 fault matrix: a node's link goes down in the middle of the
# transfer (ip link set eth0 down inside n3's namespace).
# (a) Link back after 3 s: TCP recovers, the staging completes with DST
#     whole everywhere (or fails naming n3, never a partial file).
# (b) STAGEHAND_TEST_FULL=1 only (tests/run.sh --full; it lasts until
#     the others stop waiting for n3, join_timeout, default 60 s): n3's connections to
#     the staging's control ports are refused from the start (policy
#     routing, ip rule ... dport RANGE prohibit: this kernel has no iptables
#     and no tc drop action), so n3 never joins: the step (srun
#     --stage-image in an allocation; a batch job would be requeued by
#     slurmctld first, see test_fault_slurmd.sh) fails when the others
#     stop waiting for it, naming n3; no node is drained.
# Each time: no temp file, no runtime state, the next job works. Cases F21,
# F22.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ _ victim _ <<<"$MINICLUSTER_NODES"
[ -n "$victim" ] || skip "needs 3 nodes"
dev=$(on_node "$victim" sh -c "ip -o route get $(scontrol show node n1 | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2) 2>/dev/null | grep -oE 'dev [^ ]+' | cut -d' ' -f2")
dev=${dev:-eth0}
k=3
tok=flink$$
tag=fault-link.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    on_node "$victim" ip link set "$dev" up 2>/dev/null
    for r in "${rules[@]}"; do on_node "$victim" ip rule del ipproto tcp dport "$r" prohibit 2>/dev/null; done
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
rules=()
trap cleanup EXIT
make_slow_source "$src" 384 ||
    fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

# (a) link flap mid-transfer
rm -f "$out"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran') ||
    fail "sbatch: $id"
for _ in $(seq 1 300); do
    grep -q "^$victim:" <<<"$(temp_files_in "/nvme/$tok")" && break
    sleep 0.02
done
on_node "$victim" ip link set "$dev" down || fail "cannot take $victim's $dev down"
sleep 3
on_node "$victim" ip link set "$dev" up || fail "cannot bring $victim's $dev up"
st=$(wait_job_end "$id" 100)
case "$st" in
    COMPLETED)
        for n in $MINICLUSTER_NODES; do
            [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "(a) $n: DST not whole after success"
        done
        echo "ok: (a) link down 3 s on $victim: TCP recovered, staging completed" ;;
    FAILED)
        grep -q "stagehand: --stage-image failed: image $dst: .*$victim" "$out" ||
            fail "(a) failure does not name $victim: $(cat "$out")"
        # the victim has none; the others none, or a whole copy when theirs
        # went on around the victim (doc/design.md §5)
        for n in $MINICLUSTER_NODES; do
            if [ "$n" = "$victim" ]; then
                on_node "$n" test ! -e "$dst" || fail "(a) $n: DST after a failure"
            else
                got=$(node_md5 "$n" "$dst")
                [ -z "$got" ] || [ "$got" = "$want" ] || fail "(a) $n: a partial DST after a failure"
            fi
        done
        echo "ok: (a) link down 3 s on $victim: failure naming it" ;;
    *) fail "(a) job $id ended $st: $(cat "$out")" ;;
esac
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "(a) temp files left"
assert_runtime_gone "$id"
assert_no_drain

if [ "${STAGEHAND_TEST_FULL:-0}" = 1 ]; then
    plug=$(grep '^required .*stagehand.so' "$(dirname "$SLURM_CONF")/plugstack.conf")
    timeout_s=$(grep -oE 'timeout=[0-9]+s' <<<"$plug" | grep -oE '[0-9]+')
    { [ -n "$timeout_s" ] && [ "$timeout_s" -le 150 ]; } || skip "(b) needs the plugstack timeout at most 150s"
    case "$plug" in *port_base=* | *port_range=*) skip "(b) assumes the default ports 300+200" ;; esac
    command -v python3 >/dev/null || skip "(b) needs python3"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -f "$dst"; done
    # An allocation first, so that the staging's ports are known: the first
    # srun in it stages as step 0 (srun --stage-image inside an allocation),
    # its control port derived from (job, step 0). Only those 64 ports are
    # refused on the victim's way out: other jobs on the shared cluster are
    # not touched.
    alloc=$(as_user salloc -J "$tag" -N"$k" --no-shell 2>&1 | grep -oE 'Granted job allocation [0-9]+' | grep -oE '[0-9]+$')
    [ -n "$alloc" ] || fail "(b) no allocation"
    p0=$(python3 "$(dirname "$0")/ctl_attack.py" portstep "$alloc" 0 300 200)
    rules=("$p0-$((p0 + 63 > 499 ? 499 : p0 + 63))")
    [ $((p0 + 63)) -gt 499 ] && rules+=("300-$((300 + p0 + 63 - 500))")
    for r in "${rules[@]}"; do
        on_node "$victim" ip rule add ipproto tcp dport "$r" prohibit || fail "ip rule for $r"
    done
    t0=$SECONDS
    res=$(as_user env SLURM_JOB_ID="$alloc" SLURM_JOBID="$alloc" timeout $((timeout_s + 60)) \
              srun --jobid="$alloc" -N"$k" --stage-image="$src:$dst" echo task-ran 2>&1)
    echo "(b) srun ended after $((SECONDS - t0)) s"
    for r in "${rules[@]}"; do on_node "$victim" ip rule del ipproto tcp dport "$r" prohibit; done
    rules=()
    scancel "$alloc"
    ! grep -q task-ran <<<"$res" || fail "(b) tasks ran: $res"
    grep -q "stagehand: --stage-image failed: image $dst: .*$victim" <<<"$res" ||
        fail "(b) message does not name $victim: $res"
    echo "(b) $(grep -m1 'stage-image failed' <<<"$res")"
    [ -z "$(temp_files_in "/nvme/$tok")" ] || fail "(b) temp files left"
    assert_no_drain
    echo "ok: (b) $victim never joined: failure naming it"
fi

rm -f "$out"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran') ||
    fail "sbatch: $id"
[ "$(wait_job_end "$id" 90)" = COMPLETED ] || fail "the next job failed: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: DST wrong after the next job"
done
assert_no_drain
echo "ok: the next job works"
