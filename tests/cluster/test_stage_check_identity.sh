#!/usr/bin/env bash
# The prolog's local check (spank/localcheck.c) runs as the job user, not as
# root, although root's slurmstepd starts it (a child that drops to the
# user's ids and groups). Every node holds a current copy; then the directory holding
# SRC is closed to the user (root still reads it; SRC's own metadata, and so
# the recorded copy, does not change). A check that ran as root would find
# every copy current and start the job with an image the user may no longer
# read; as the user it must not: the job fails naming SRC and the reason, and
# the nodes are not drained (a user's error). The slurmd logs say why the
# check did not pass. Cases F17, F18.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
fault_test_files cid check-id
# SRC in a directory of its own, which the test closes to the user
dir=$MINICLUSTER_SHARED/$tok
src=$dir/img
trap 'rm -rf "$dir"; fault_test_cleanup' EXIT
{ mkdir -m 0777 "$dir" && chmod 0777 "$dir"; } || fail "cannot create $dir"
make_user_file "$src" 4 || fail "cannot create $src"
submit() {
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran'
}
id=$(submit) || fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "first staging failed: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
# still current for root: the same metadata
before=$(stat -c %s.%Y.%Z "$src")

# The user submits (SRC readable), then SRC's directory is closed to them
# before the job starts: hold the job, close, release.
id=$(as_user sbatch --parsable -H -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch: $id"
declare -A off
for n in $MINICLUSTER_NODES; do off[$n]=$(log_offset "$n"); done
chmod 0700 "$dir"
[ "$(stat -c %s.%Y.%Z "$src")" = "$before" ] || fail "closing the directory changed SRC's metadata"
! as_user test -r "$src" || fail "the user can still read $src"
scontrol release "$id" || fail "cannot release job $id"
st=$(wait_job_end "$id" 90)
[ "$st" = FAILED ] || fail "job $id ended $st with SRC closed to the user (a check as root?): $(cat "$out")"
! grep -q script-ran "$out" || fail "the batch script ran although the user cannot read SRC"
grep -q "stagehand: --stage-image failed: .*source $src: Permission denied" "$out" ||
    fail "the message does not name SRC and the reason: $(cat "$out")"
# no node found its copy current (a check as root would have)
for n in $MINICLUSTER_NODES; do
    log=$(log_since "$n" "${off[$n]}" | grep "stagehand: job $id ")
    ! grep -q "current on $n, nothing copied" <<<"$log" || fail "$n: its check found the copy current: $log"
    grep -q "staging failed" <<<"$log" || fail "$n: no failed staging logged: $log"
done
assert_no_drain
echo "ok: with SRC's directory closed to the user the current copies were not trusted: job $id failed naming SRC, no drain"
