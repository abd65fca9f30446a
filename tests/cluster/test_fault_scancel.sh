#!/usr/bin/env bash
# Issue 6 fault matrix, case F06: scancel in the middle of the broadcast,
# then the same job again. The cancelled job ends at once and its script
# never runs (its task, waiting for the node's staging, is killed); its
# staging, which the epilog stops, either completed (a whole, verified DST)
# or leaves nothing under DST's name; no engine or agent of it outlives the
# staging deadline's order of magnitude (here: 30 s), no temp file or runtime
# state is left, no node is drained, and the resubmitted job works.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=fcanc$$
tag=fault-cancel.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    shape_clear
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
# 256 MiB: the staging must outlast the look for its temp files and the
# 0.3 s after it, which the shaped links below make certain (unshaped, 384
# MiB staged in 1.3 s; a larger image only made the resubmitted job's copy
# and the md5s longer)
make_slow_source "$src" 256 ||
    fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

submit() {
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran'
}

# links at 100 Mbit/s for the cancelled job: its copy then takes some 20 s
# however fast or loaded the host is (unshaped, the sparse source could be
# copied before the scancel: the job COMPLETED)
shape_links --link 100mbit || fail "cannot shape the links"
id=$(submit) || fail "sbatch: $id"
for _ in $(seq 1 300); do
    [ -n "$(temp_files_in "/nvme/$tok")" ] && break
    sleep 0.02
done
[ -n "$(temp_files_in "/nvme/$tok")" ] || fail "the transfer did not start"
sleep 0.3
as_user scancel "$id" || fail "scancel failed"
t0=$SECONDS
st=$(wait_job_end "$id" 10)
[ "$st" = CANCELLED ] || fail "job $id ended $st after scancel"
echo "job $id cancelled after $((SECONDS - t0)) s"

# its staging processes end (they finish or fail; never linger)
assert_stopped_staging_clean "$id" "$want" scancel
! grep -q script-ran "$out" 2>/dev/null || fail "the cancelled job's script ran"
echo "ok: cancelled job: no partial DST, no temp file, no runtime state, no drain"
shape_clear

# the same job again
id=$(submit) || fail "sbatch: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "resubmitted job $id ended $st: $(cat "$out")"
grep -q script-ran "$out" || fail "resubmitted job: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: DST wrong after the resubmit"
done
assert_no_temp_files "$dst"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: resubmitted job staged and ran"
