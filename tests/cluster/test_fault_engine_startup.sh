#!/usr/bin/env bash
# An engine that dies of SIGSEGV while MPI starts (Open MPI 4.1.4 does so in
# MPI_Init now and then under load: a peer's first TCP fragment before the
# receive callback exists; seen in ~4 % of 8-node benchmark runs) is started
# again, once, on every node: the staging succeeds, the slurmd log says why,
# every node holds the image, no temp file remains. A crash after MPI has
# started is not retried: that stays an error (test_fault_engine_kill).
# Cases F21, F22.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ victim _ <<<"$MINICLUSTER_NODES"
[ -n "$victim" ] || skip "needs 2 nodes"
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
tok=fstart$$
tag=fault-start.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    unwrap_on_node "$victim" "$engine"
    on_node "$victim" rm -f "/tmp/$tok.engine" "/tmp/$tok.once"
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 8 || fail "cannot create $src"

# On $victim only: the engine's first start dies of SIGSEGV before MPI_Init;
# later starts run a copy of the real engine.
on_node "$victim" sh -c "cp '$engine' /tmp/$tok.engine && chmod 755 /tmp/$tok.engine" ||
    fail "cannot copy the engine on $victim"
wrap_on_node "$victim" "$engine" "if [ ! -e /tmp/$tok.once ]; then : >/tmp/$tok.once; kill -SEGV \$\$; fi
exec /tmp/$tok.engine \"\$@\"" || fail "cannot wrap the engine on $victim"
off=$(log_offset "$victim")

id=$(as_user sbatch --parsable -J "$tag" -N"$(echo "$MINICLUSTER_NODES" | wc -w)" -o "$out" \
         --stage-image="$src:$dst" --wrap 'echo script-ran') || fail "sbatch: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out" 2>/dev/null)"
on_node "$victim" test -e "/tmp/$tok.once" || fail "the wrapper never ran on $victim: nothing was tested"
log_since "$victim" "$off" | grep -q "the engine on node $victim died of signal 11 while MPI started (before any data moved): starting it again on every node" ||
    fail "$victim's slurmd log does not record the retry: $(log_since "$victim" "$off" | grep stagehand | tail -3)"
grep -q script-ran "$out" || fail "the batch script did not run"
assert_staged_everywhere "$src" "$dst"
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "temp files left"
assert_no_drain
echo "ok: an engine that crashed while MPI started was started again; every node holds the image"
