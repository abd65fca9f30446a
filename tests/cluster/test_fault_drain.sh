#!/usr/bin/env bash
# on_node_fault=drain (doc/design.md §5; cases F18, F31): with the site's policy
# set to drain, a node fault on one node (its DST filesystem read-only)
# drains that node and no other, with Slurm's prolog-error reason, and the
# batch job is requeued and held as Slurm does for a failed prolog; a user
# error (SRC removed after submit) drains nothing. The test sets the policy
# in the cluster's plugstack.conf for its own jobs and restores it, resumes
# the node and restarts the slurmds on exit.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
victim=n2
tok=fdrain$$
tag=fault-drain.$$
mnt=/nvme/$tok
dst=$mnt/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    scontrol update nodename="$victim" state=resume 2>/dev/null
    on_node "$victim" sh -c "mountpoint -q $mnt && umount -l $mnt" 2>/dev/null
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$mnt"; done
}
trap cleanup EXIT

plugstack_add on_node_fault=drain

make_user_file "$src" 4 || fail "cannot create $src"
for n in $MINICLUSTER_NODES; do on_node_as_user "$n" mkdir -p "$mnt" || fail "$n: mkdir"; done

# (a) a user error under the drain policy: SRC removed after submit
id=$(as_user sbatch --parsable -H -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
mv "$src" "$src.away"
as_user scontrol release "$id" || fail "cannot release job $id"
st=$(wait_job_end "$id" 90)
mv "$src.away" "$src"
[ "$st" = FAILED ] || fail "(a) job ended $st: $(cat "$out")"
grep -q "stagehand: --stage-image failed: .*source $src: No such file or directory" "$out" ||
    fail "(a) message: $(cat "$out")"
assert_no_drain
echo "ok: (a) SRC removed after submit under on_node_fault=drain: job failed, nothing drained"

# (b) a node fault on $victim: its DST filesystem is read-only
on_node "$victim" mount -t tmpfs -o size=16m,mode=0755,uid="$(id -u "$MINICLUSTER_USER")" tmpfs "$mnt" ||
    fail "cannot mount a tmpfs on $victim:$mnt"
on_node "$victim" mount -o remount,ro "$mnt" || fail "remount ro"
off=$(log_offset "$victim")
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
drained=$(wait_drained 300)
[ "$drained" = "$victim " ] || fail "(b) drained: '${drained}', expected only $victim ($(sinfo -h -R))"
reason=$(sinfo -h -R -n "$victim" -o '%E')
case "$reason" in *[Pp]rolog*) ;; *) fail "(b) $victim drained for '$reason', expected a prolog error" ;; esac
state=$(scontrol -o show job "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
! grep -q script-ran "$out" 2>/dev/null || fail "(b) the batch script ran without its image"
log_since "$victim" "$off" | grep -aq "stagehand: job $id user .*staging failed on $victim: .*Read-only file system" || fail "(b) no failure line naming $victim and EROFS in its slurmd log"
scancel "$id"
for n in $MINICLUSTER_NODES; do
    [ "$n" = "$victim" ] && continue
    on_node "$n" test ! -e "$dst" || fail "(b) $n: $dst exists after a failed staging"
done
echo "ok: (b) read-only DST on $victim under on_node_fault=drain: only $victim drained ($reason), job $state"

# the node is repaired and resumed: the next job stages everywhere
on_node "$victim" umount "$mnt" || fail "umount"
scontrol update nodename="$victim" state=resume || fail "cannot resume $victim"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "next job ended $st: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_no_drain
echo "ok: after resume the next job stages on every node"
