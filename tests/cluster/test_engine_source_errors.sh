#!/usr/bin/env bash
# Engine: a source the user cannot read (F17a: also through a symlink to
# /etc/shadow), a missing source (F18), a FIFO and a device (F17c) each end
# with exit 3 and a message naming the source, and nothing is written on any
# node: no DST, no temp file.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
tag="eng_srcerr.$$"
dir="$MINICLUSTER_SHARED/$tag"
dst="/nvme/$tag/img"
errf=$(mktemp)
cleanup() {
    rm -rf "$dir" "$errf"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tag"; done
}
trap cleanup EXIT
mkdir -p "$dir" && chmod 755 "$dir"
head -c 100000 /dev/urandom >"$dir/secret" && chmod 600 "$dir/secret"  # root's
ln -s /etc/shadow "$dir/link"
mkfifo "$dir/fifo" && chmod 666 "$dir/fifo"

try() { # source expected-text
    local out rc
    # pmix_srun: one more try on a known third-party start-up failure (CI saw
    # Slurm 22.05's PMIx munge flake here), so the message checked is ours
    out=$(PMIX_SRUN_TIMEOUT=60 pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
        --timeout=30s --source "$1" --dest "$dst" 2>"$errf")
    rc=$?
    [ "$rc" -ne 0 ] || fail "$1: engine succeeded"
    [ "$rc" -ne 124 ] || fail "$1: engine hung"
    printf '%s\n%s\n' "$out" "$(cat "$errf")" | grep -q "$2" ||
        fail "$1: message does not say '$2': $out $(cat "$errf")"
    printf '%s\n' "$out" | grep -q "source error: .*$1" ||
        fail "$1: summary does not name the source: $out"
    for n in $MINICLUSTER_NODES; do
        # nothing at all: no temp file and, with no DST, no lock file either
        left=$(on_node "$n" sh -c "ls -A /nvme/$tag 2>/dev/null" || true)
        [ -z "$left" ] || fail "$1: files written on $n: $left"
    done
}
try "$dir/secret" "Permission denied"
try "$dir/link" "Permission denied"
try "$dir/missing" "No such file or directory"
try "$dir/fifo" "not a regular file"
try /dev/zero "not a regular file"
# the exit code is the documented one for a source error
pmix_srun -N"$k" --ntasks-per-node=1 "$engine" --timeout=60s --source "$dir/secret" \
    --dest "$dst" >/dev/null 2>&1
rc=$?
[ "$rc" = 3 ] || fail "exit code $rc, expected 3"
wait_nodes_idle || fail "nodes not idle"
echo "ok: unreadable, missing, symlinked, FIFO and device sources rejected; nothing written"
