#!/usr/bin/env bash
# Engine: one node's DST filesystem is too small (a 1 MiB tmpfs on n2). The
# run fails before any data moves with a message naming that node and the
# needed and free bytes; no partial file or temp file anywhere. Cases F14,
# F15.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs at least 2 nodes"
read -r _ small _ <<<"$MINICLUSTER_NODES"
tag="eng_enospc.$$"
src="$MINICLUSTER_SHARED/$tag.src"
mnt="/nvme/small.$$"
errf=$(mktemp)
mounted=0
cleanup() {
    rm -f "$src" "$errf"
    if [ "$mounted" = 1 ]; then on_node "$small" umount "$mnt"; fi
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$mnt"; done
}
trap cleanup EXIT
for n in $MINICLUSTER_NODES; do on_node "$n" mkdir -m 1777 "$mnt"; done
on_node "$small" mount -t tmpfs -o size=1M,mode=1777 tmpfs "$mnt" || fail "cannot mount tmpfs on $small"
mounted=1
as_user sh -c "head -c 4000000 /dev/urandom > $src" || fail "cannot write $src"

out=$(as_user timeout 60 srun --mpi=pmix -N"$k" --ntasks-per-node=1 "$engine" \
    --timeout=30s --source "$src" --dest "$mnt/img" 2>"$errf")
rc=$?
[ "$rc" = 4 ] || fail "exit code $rc, expected 4: $out $(cat "$errf")"
line=$(printf '%s\n' "$out" | grep "FAILED on $small") || fail "summary does not name $small: $out"
printf '%s\n' "$line" | grep -q "needed 3.81 MiB (4000000 bytes), free" ||
    fail "message lacks needed/free bytes: $line"
for n in $MINICLUSTER_NODES; do
    # nothing at all: no temp file and, with no DST, no lock file either
    left=$(on_node "$n" ls -A "$mnt" || true)
    [ -z "$left" ] || fail "files left on $n: $left"
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: $line"
