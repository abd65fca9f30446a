#!/usr/bin/env bash
# Issue 6 fault matrix: one node's DST filesystem (a small tmpfs mounted over
# a DST directory inside n2) (a) has less room than the image, (b) fills up
# while the image is being written (another writer races it), (c) is
# read-only. Each time: the job's outcome is clear and names the node and
# the cause (a, c: the job fails at step start; b: either the staging wins
# the space, it is preallocated, or the job fails naming n2), no partial
# file under DST anywhere, no temp file left, no node drained (the default
# on_node_fault=fail), and once the filesystem is fine again the next job
# stages. Cases F14, F15, F18, F31.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
victim=n2
tok=fnvme$$
tag=fault-nvme.$$
mnt=/nvme/$tok
dst=$mnt/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    on_node "$victim" sh -c "mountpoint -q $mnt && umount -l $mnt" 2>/dev/null
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$mnt"; done
}
trap cleanup EXIT
make_user_file "$src" 16 || fail "cannot create $src"
want=$(sha256sum "$src" | cut -d' ' -f1)
for n in $MINICLUSTER_NODES; do on_node_as_user "$n" mkdir -p "$mnt" || fail "$n: mkdir"; done

# run_job -> state; the job's output in $out
run_job() {
    local id
    rm -f "$out"
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap 'echo script-ran') || fail "sbatch refused: $id"
    wait_job_end "$id" 90
}

no_partial() { # DST absent everywhere, no temp files, no lock file
    local n
    for n in $MINICLUSTER_NODES; do
        on_node "$n" test ! -e "$dst" || fail "$n: $dst exists after a failed staging"
        on_node "$n" test ! -e "$(dirname "$dst")/.$(basename "$dst").lock" ||
            fail "$n: the lock file of $dst is left after a failed staging"
    done
    left=$(temp_files_in "$mnt")
    [ -z "$left" ] || fail "temp files left: $left"
}

# (a) 4 MiB of room for a 16 MiB image: refused before any data moves
on_node "$victim" mount -t tmpfs -o size=4m,mode=0755,uid="$(id -u "$MINICLUSTER_USER")" tmpfs "$mnt" ||
    fail "cannot mount a tmpfs on $victim:$mnt"
st=$(run_job)
[ "$st" = FAILED ] || fail "(a) job ended $st: $(cat "$out")"
grep -q "stagehand: --stage-image failed: image $dst: $victim: pre-check: not enough space for $dst: needed 16.00 MiB (16777216 bytes), free 4.00 MiB (4194304 bytes)" "$out" ||
    fail "(a) message: $(cat "$out")"
! grep -q script-ran "$out" || fail "(a) the batch script ran without its image"
no_partial
assert_no_drain
echo "ok: (a) full DST filesystem on $victim refused before the transfer, naming node and sizes"

# (b) room for the image, but another writer fills the filesystem as soon
# as the staging starts on the node
on_node "$victim" mount -o remount,size=24m "$mnt" || fail "remount"
rm -f "$out"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
for _ in $(seq 1 200); do
    [ -n "$(on_node "$victim" sh -c "ls -A $mnt | grep -E '\\.(lock|tmp)\$'")" ] && break
    sleep 0.02
done
on_node "$victim" sh -c "dd if=/dev/zero of=$mnt/filler bs=1M count=20 status=none 2>/dev/null; true"
st=$(wait_job_end "$id" 90)
case "$st" in
    COMPLETED)
        grep -q script-ran "$out" || fail "(b) script did not run: $(cat "$out")"
        for n in $MINICLUSTER_NODES; do
            [ "$(node_sha "$n" "$dst")" = "$want" ] || fail "(b) $n: DST differs after a success"
        done
        echo "ok: (b) the staging had preallocated its space; the other writer got ENOSPC" ;;
    FAILED)
        grep -qE "stagehand: --stage-image failed: image $dst: .*$victim: .*(not enough space|full|No space left)" "$out" ||
            fail "(b) message: $(cat "$out")"
        for n in $MINICLUSTER_NODES; do
            on_node "$n" test ! -e "$dst" || fail "(b) $n: $dst exists after a failed staging"
        done
        echo "ok: (b) the filler won the space: failure names $victim and ENOSPC" ;;
    *) fail "(b) job $id ended $st: $(cat "$out")" ;;
esac
[ -z "$(temp_files_in "$mnt")" ] || fail "(b) temp files left: $(temp_files_in "$mnt")"
# DST and its lock file go (a read-only filesystem below keeps what is there)
on_node "$victim" rm -f "$mnt/filler"
for n in $MINICLUSTER_NODES; do on_node "$n" rm -f "$dst" "$mnt/.img.lock"; done
assert_no_drain

# (c) read-only (EROFS after NVMe errors, F31): a node fault, named
on_node "$victim" mount -o remount,ro "$mnt" || fail "remount ro"
st=$(run_job)
[ "$st" = FAILED ] || fail "(c) job ended $st: $(cat "$out")"
grep -q "stagehand: --stage-image failed: image $dst: $victim: .*Read-only file system" "$out" ||
    fail "(c) message: $(cat "$out")"
no_partial
assert_no_drain
echo "ok: (c) read-only DST filesystem on $victim: failure names node and EROFS"

# the filesystem is fine again: the next job stages everywhere
on_node "$victim" umount "$mnt" || fail "umount"
st=$(run_job)
[ "$st" = COMPLETED ] || fail "next job ended $st: $(cat "$out")"
grep -q script-ran "$out" || fail "next job: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_no_temp_files "$dst"
assert_no_drain
echo "ok: the next job stages on every node"
