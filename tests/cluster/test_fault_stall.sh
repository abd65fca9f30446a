#!/usr/bin/env bash
# Case F22, a stalled transfer: with stall_timeout=10s (the test cluster's)
# and the links shaped
# to 20 Mbit/s (a copy of some 25 s), n3 is frozen (everything in its
# namespace) a few seconds into the transfer and thawed 30 s later. The job
# fails, and its message says the copy stalled: "no progress for 10 s
# (stall_timeout) at segment K on ...: the copy stalled at n3", not only
# "engine exited with status 5" (the status the deadline shares). Nothing
# partial under DST, no temp file, no runtime state, no PMIx file in /tmp,
# no drain.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ _ frozen _ <<<"$MINICLUSTER_NODES"
[ -n "$frozen" ] || skip "needs 3 nodes"
k=3
# the test cluster's stall limit (minicluster sets stall_timeout=10s)
stall_s=$(grep -oE 'stall_timeout=[0-9]+s' "$plugstack" | grep -oE '[0-9]+')
{ [ -n "$stall_s" ] && [ "$stall_s" -ge 2 ] && [ "$stall_s" -le 15 ]; } ||
    skip "needs stall_timeout= of 2s to 15s in $plugstack"
fault_test_files fstall fault-stall
make_slow_source "$src" 64 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)
shape_links --link 20mbit || fail "cannot shape the links"

id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch: $id"
for _ in $(seq 1 600); do
    grep -q "^$frozen:" <<<"$(temp_files_in "/nvme/$tok")" && break
    sleep 0.05
done
grep -q "^$frozen:" <<<"$(temp_files_in "/nvme/$tok")" || fail "the transfer did not reach $frozen"
sleep 3
# shellcheck disable=SC2034  # fault_test_cleanup thaws it
thaw_node=$frozen
"$MINICLUSTER" freeze "$frozen" || fail "cannot freeze $frozen"
sleep 30
"$MINICLUSTER" thaw "$frozen" || fail "cannot thaw $frozen"
thaw_node=""
st=$(wait_job_end "$id" 90)
[ "$st" = FAILED ] || fail "job $id ended $st: $(cat "$out" 2>/dev/null)"
! grep -q script-ran "$out" || fail "the batch script ran without its image"
msg=$(grep -m1 'stage-image failed' "$out")
echo "$msg"
grep -qE "image $dst: no progress for $stall_s s \(stall_timeout\) at segment [0-9]+ on [^:]+: the copy stalled at $frozen(;|$)" <<<"$msg" ||
    fail "the message does not say the copy stalled at $frozen: $msg"
shape_clear
assert_stopped_staging_clean "$id" "$want" "the stall"
echo "ok: stalled copy: the message names the stall limit, the segment and $frozen"
