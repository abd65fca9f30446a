#!/usr/bin/env bash
# Engine: files of size 0, 1, segment-1, segment, segment+1 and a few MiB
# arrive byte-identical on every node (sha256sum inside each node), with both
# algorithms and with one to 16 concurrent reads of SRC; no temp files
# remain. Cases F09, F10 (size % segment in {0, 1, segment-1}), F11.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs at least 2 nodes"
tag="eng_sizes.$$"
src="$MINICLUSTER_SHARED/$tag"
dst="/nvme/$tag"
seg=65536
errf=$(mktemp)
cleanup() {
    rm -rf "$src" "$errf"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$dst"; done
}
trap cleanup EXIT
as_user mkdir -p "$src" || fail "cannot create $src"

# label file sha256: $dst/file has that content on every node, no temp file
same_everywhere() {
    local n got left
    for n in $MINICLUSTER_NODES; do
        got=$(on_node "$n" sha256sum "$dst/$2" | cut -d' ' -f1) ||
            fail "$1: $dst/$2 missing on $n"
        [ "$got" = "$3" ] || fail "$1: $n has different content"
        left=$(on_node "$n" ls -A "$dst" | grep -c '\.tmp$' || true)
        [ "$left" = 0 ] || fail "$1: temp files left on $n"
    done
}

# 3 MiB + 1 is not a multiple of the segment either
sizes="0 1 $((seg - 1)) $seg $((seg + 1)) $((3 * 1048576 + 1))"
for size in $sizes; do
    as_user sh -c "head -c $size /dev/urandom > $src/f$size" || fail "cannot write source"
done

for alg in chain bcast; do
    list=$sizes
    # the comparison algorithm shares the schedule: a few sizes suffice
    [ "$alg" = bcast ] && list="1 $((seg + 1)) $((3 * 1048576 + 1))"
    for size in $list; do
        f="f$size.$alg"
        out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
            --source "$src/f$size" --dest "$dst/$f" --segment-size=$seg \
            --pipeline-depth=2 --algorithm=$alg --timeout=60s --json 2>"$errf") ||
            fail "size $size ($alg): engine failed: $out $(cat "$errf")"
        copied=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes_copied"])') ||
            fail "size $size ($alg): no JSON summary: $out"
        [ "$copied" = "$k" ] || fail "size $size ($alg): $copied of $k nodes copied: $out"
        want=$(sha256sum <"$src/f$size" | cut -d' ' -f1)
        same_everywhere "size $size ($alg)" "$f" "$want"
    done
done
# Concurrent reads of SRC complete out of order; the stream must not: one
# read at a time, and 16 at once over 16 buffers (49 segments).
size=$((3 * 1048576 + 1))
want=$(sha256sum <"$src/f$size" | cut -d' ' -f1)
for ra in "1 2" "16 16"; do
    read -ra opts <<<"$ra"
    set -- "${opts[@]}"
    f="ra$1.f$size"
    out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
        --source "$src/f$size" --dest "$dst/$f" --segment-size=$seg \
        --read-ahead="$1" --pipeline-depth="$2" --timeout=60s --json 2>"$errf") ||
        fail "read-ahead $1: engine failed: $out $(cat "$errf")"
    same_everywhere "read-ahead $1" "$f" "$want"
done
# The default segment (512 KiB) is sent eagerly over Open MPI's TCP transport
# with synchronous-mode sends, a larger one by rendezvous: sizes around the
# default segment with the default options, and 2 MiB segments (case F10).
dseg=524288
for size in $((dseg - 1)) $dseg $((dseg + 1)) $((5 * dseg + 3)); do
    as_user sh -c "head -c $size /dev/urandom > $src/d$size" || fail "cannot write source"
    want=$(sha256sum <"$src/d$size" | cut -d' ' -f1)
    for segopt in "" "--segment-size=2M"; do
        f="d$size${segopt:+.2M}"
        out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
            --source "$src/d$size" --dest "$dst/$f" $segopt --timeout=60s --json 2>"$errf") ||
            fail "default path, size $size $segopt: engine failed: $out $(cat "$errf")"
        same_everywhere "default path, size $size $segopt" "$f" "$want"
    done
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: sizes $sizes identical on $k nodes (chain and bcast; read-ahead 1, 2 and 16); default 512 KiB and 2 MiB segments around the default segment"
