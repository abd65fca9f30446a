#!/usr/bin/env bash
# Issue 6 fault matrix: the source is (a) truncated and (b) modified in place
# while the engine reads it, after the submit-time checks passed. The job
# fails at step start with the cause (the source, not a node), never with a
# partial or mixed file under DST: the previous version stays byte for byte;
# no temp file, no node drained; the next job stages the new content.
# Cases F06, F18, F29 (the reader's status travels with the data).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=fsrc$$
tag=fault-src.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
size=$((384 * 1048576))
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT

submit() {
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap 'echo script-ran'
}
wait_transfer() { # until a temp file of the staging exists on some node
    for _ in $(seq 1 300); do
        [ -n "$(temp_files_in "/nvme/$tok")" ] && return 0
        sleep 0.02
    done
    fail "the transfer did not start: $(cat "$out" 2>/dev/null)"
}

# a previous version in place
make_user_file "$src" 1 || fail "cannot create $src"
id=$(submit) || fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "first staging failed: $(cat "$out")"
prev=$(md5sum "$src" | cut -d' ' -f1)

check_failed() { # ID WHAT PATTERN
    local st
    st=$(wait_job_end "$1" 60)
    [ "$st" = FAILED ] || fail "$2: job $1 ended $st: $(cat "$out")"
    grep -qE "stagehand: --stage-image failed: image $dst: .*source $src: $3" "$out" ||
        fail "$2: message: $(cat "$out")"
    ! grep -q script-ran "$out" || fail "$2: the batch script ran without its image"
    for n in $MINICLUSTER_NODES; do
        [ "$(node_md5 "$n" "$dst")" = "$prev" ] || fail "$2: $n: DST is not the previous version"
    done
    left=$(temp_files_in "/nvme/$tok")
    [ -z "$left" ] || fail "$2: temp files left: $left"
    assert_no_drain
}

# (a) truncated to a quarter while it is read
as_user sh -c "rm -f '$src' && truncate -s $size '$src'" || fail "new source"
id=$(submit) || fail "sbatch: $id"
wait_transfer
as_user truncate -s $((size / 4)) "$src"
check_failed "$id" "(a) truncated" "source shorter than announced"
echo "ok: (a) truncated source: job failed with the cause, previous version kept"

# (b) same size, content changed in place while it is read
as_user sh -c "rm -f '$src' && truncate -s $size '$src'" || fail "new source"
id=$(submit) || fail "sbatch: $id"
wait_transfer
as_user sh -c "head -c 1048576 /dev/urandom | dd of='$src' bs=1M seek=300 conv=notrunc status=none"
# found by the reader after the last segment: the message names no segment
check_failed "$id" "(b) modified" "source changed while it was copied \\(size or times differ at its end\\)"
echo "ok: (b) modified source: job failed with the cause, previous version kept"

# the source is stable again: the next job stages it
id=$(submit) || fail "sbatch: $id"
[ "$(wait_job_end "$id" 90)" = COMPLETED ] || fail "next job: $(cat "$out")"
want=$(md5sum "$src" | cut -d' ' -f1)
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: DST is not the new source"
done
assert_no_temp_files "$dst"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: the next job stages the new content"
