#!/usr/bin/env bash
# Engine: DST in a directory the user cannot write (root-owned, 0755) on
# every node fails in the pre-check with exit 4 and a message that names DST
# and says the directory is not writable, before any data moves; nothing is
# left in that directory on any node. DST that is an existing directory is
# refused the same way (found by a new-user trial: the engine used to copy
# everything and then fail at the rename). A symbolic link planted as DST's
# lock file is refused without following it.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_dsterr.$$"
dst="/nvme/$tag/ro/img"
as_user sh -c "head -c 300000 /dev/urandom > $src" || fail "cannot write $src"
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p /nvme/$tag/ro && chmod 0755 /nvme/$tag /nvme/$tag/ro" ||
        fail "cannot prepare /nvme/$tag on $n"
done

# Run the engine with --dest @1 and assert that it is refused in the
# pre-check: exit 4, a message matching @2 (grep regex), and no data moved.
refused() {
    local d=$1 want=$2 out rc=0
    out=$(PMIX_SRUN_TIMEOUT=60 pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
        --timeout=30s --source "$src" --dest "$d" 2>"$errf") || rc=$?
    [ "$rc" -ne 124 ] || fail "engine hung (--dest $d)"
    [ "$rc" = 4 ] || fail "--dest $d: exit code $rc, expected 4 (destination error): $out $(cat "$errf")"
    printf '%s\n' "$out" | grep -q "$want" || fail "--dest $d: message does not match '$want': $out"
    { printf '%s\n' "$out" | grep -q "0 copied, 0 already current, $k failed" &&
        printf '%s\n' "$out" | grep -q " transfer 0.000s "; } ||
        fail "--dest $d: data moved before the refusal: $out"
}

refused "$dst" "pre-check: cannot write in the directory of $dst .*Permission denied"
for n in $MINICLUSTER_NODES; do
    left=$(on_node "$n" ls -A "/nvme/$tag/ro")
    [ -z "$left" ] || fail "files written on $n: $left"
done

# DST that is an existing directory (rename(2) cannot replace it): refused in
# the pre-check; the directory and its content stay as they were and no temp
# file is left beside it.
ddst="/nvme/$tag/adir"
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p $ddst && echo keep > $ddst/keep && chown -R $MINICLUSTER_USER /nvme/$tag" ||
        fail "cannot prepare $ddst on $n"
done
refused "$ddst" "in pre-check: $ddst is a directory"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" cat "$ddst/keep")" = keep ] || fail "$n: $ddst changed"
    left=$(on_node "$n" sh -c "ls -A /nvme/$tag | grep '\.tmp\$'" || true)
    [ -z "$left" ] || fail "temp file left on $n: $left"
done

# A symbolic link planted where DST's lock file goes is not followed: refused
# with a message that says so (new-user trial: it said only "Too many levels
# of symbolic links"); its target is untouched.
ldst="/nvme/$tag/adir2/img"
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p /nvme/$tag/adir2 && echo target > /nvme/$tag/target &&
        ln -s /nvme/$tag/target /nvme/$tag/adir2/.img.lock && chown -R $MINICLUSTER_USER /nvme/$tag" ||
        fail "cannot prepare $ldst on $n"
done
refused "$ldst" "the lock file .img.lock next to $ldst is a symbolic link; refusing to follow it"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" cat "/nvme/$tag/target")" = target ] || fail "$n: the link's target changed"
    on_node "$n" test ! -e "$ldst" || fail "$n: $ldst was written"
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: DST in an unwritable directory, an existing directory, or with a planted lock symlink: exit 4, message names DST, nothing written"
