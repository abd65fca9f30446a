#!/usr/bin/env bash
# Issue 6 fault matrix, case F29: the source returns EIO at 40 % of the file
# (a FUSE filesystem, tests/cluster/errfs.py, mounted on the login side for
# the submit check and inside the reader node; the kernel here has no
# device-mapper for an error target). The job fails at step start naming the
# source and the error, never as EOF; the receivers drop their temp files;
# the previous version of DST stays on every node; no node is drained. Then
# DST is held open on one node (as a running job's loop or squashfuse mount
# would) while a good staging replaces it: the holder keeps reading the old
# bytes (rename, never an in-place rewrite), and every node has the new ones.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

[ -c /dev/fuse ] || skip "no /dev/fuse"
on_login /usr/bin/python3 -c 'import fusepy' 2>/dev/null ||
    skip "python3-fusepy (Debian package) is needed to inject a source read error"
read -r reader holder_node _ <<<"$MINICLUSTER_NODES"
[ -n "$holder_node" ] || skip "needs 2 nodes"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=feio$$
tag=fault-eio.$$
backing=$MINICLUSTER_SHARED/$tok.src
prev=$MINICLUSTER_SHARED/$tok.prev
fs=/tmp/$tok.fs
errfs=$MINICLUSTER_SHARED/$tok.errfs.py
dst=/nvme/$tok/img
out=$MINICLUSTER_SHARED/$tok.out
size=$((64 * 1048576))
login_fs_pid=""
holder=""
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    [ -n "$holder" ] && on_node "$holder_node" kill "$holder" 2>/dev/null
    on_node "$reader" umount -l "$fs" 2>/dev/null
    on_login umount -l "$fs" 2>/dev/null
    [ -n "$login_fs_pid" ] && kill "$login_fs_pid" 2>/dev/null
    on_login rmdir "$fs" 2>/dev/null
    on_node "$reader" rmdir "$fs" 2>/dev/null
    rm -f "$backing" "$prev" "$errfs" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
{ make_user_file "$backing" 64 && make_user_file "$prev" 1; } || fail "cannot create sources"
install -m 0755 "$(dirname "$0")/errfs.py" "$errfs"
at=$((size * 2 / 5))
{ on_login mkdir -p "$fs" && on_node "$reader" mkdir -p "$fs"; } || fail "mkdir $fs"
on_login /usr/bin/python3 "$errfs" "$backing" "$fs" "$at" >/dev/null 2>&1 &
login_fs_pid=$!
on_node "$reader" /usr/bin/python3 "$errfs" "$backing" "$fs" "$at" >/dev/null 2>&1 &
for _ in $(seq 1 50); do
    on_login mountpoint -q "$fs" && on_node "$reader" mountpoint -q "$fs" && break
    sleep 0.1
done
{ on_node "$reader" mountpoint -q "$fs" && on_login mountpoint -q "$fs"; } || fail "errfs did not mount"
bad="$fs/$(basename "$backing")"
as_user head -c 1024 "$bad" >/dev/null || fail "errfs: the start of the file is not readable"
! as_user dd if="$bad" of=/dev/null bs=1M skip=$((at / 1048576 + 1)) count=1 status=none 2>/dev/null ||
    fail "errfs: no error past $at"

submit() { # SRC
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$1:$dst" --wrap 'echo script-ran'
}

# the previous version everywhere
id=$(submit "$prev") || fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "first staging: $(cat "$out")"
old=$(md5sum "$prev" | cut -d' ' -f1)

# read error at 40 %
id=$(submit "$bad") || fail "sbatch: $id"
st=$(wait_job_end "$id" 60)
[ "$st" = FAILED ] || fail "job $id with a failing source ended $st: $(cat "$out")"
grep -qE "stagehand: --stage-image failed: image $dst: .*source $bad: read error at segment [0-9]+: Input/output error" "$out" ||
    fail "message: $(cat "$out")"
! grep -q script-ran "$out" || fail "the batch script ran without its image"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$old" ] || fail "$n: DST is not the previous version after the read error"
done
left=$(temp_files_in "/nvme/$tok")
[ -z "$left" ] || fail "temp files left after the read error: $left"
assert_no_drain
echo "ok: EIO at 40 % of the source: job failed naming the source and the error; previous version kept"

# F29: DST in use on one node (held open) while a good staging replaces it
on_node_as_user "$holder_node" sh -c 'exec 3<"$1"; exec sleep 117' sh "$dst" >/dev/null 2>&1 </dev/null &
for _ in $(seq 1 50); do
    holder=$(node_pids "$holder_node" "^sleep 117$" | head -1)
    [ -n "$holder" ] && break
    sleep 0.1
done
[ -n "$holder" ] || fail "could not hold $dst open on $holder_node"
id=$(submit "$backing") || fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "good staging: $(cat "$out")"
new=$(md5sum "$backing" | cut -d' ' -f1)
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$new" ] || fail "$n: DST is not the new version"
done
held=$(on_node "$holder_node" sh -c "md5sum /proc/$holder/fd/3 | cut -d' ' -f1")
[ "$held" = "$old" ] || fail "$holder_node: the open DST changed under its reader ($held)"
assert_no_temp_files "$dst"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: DST replaced by rename while held open on $holder_node: the holder still reads the old bytes"
