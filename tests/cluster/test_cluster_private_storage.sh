#!/usr/bin/env bash
# Foundation: each node has its own /nvme, /tmp and /run (per-node state is
# really per node; /dev/shm too: Open MPI keeps shared-memory segments there),
# /shared is the same everywhere, and node names resolve.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

tag="private.$$"
for n in $MINICLUSTER_NODES; do
    on_node_as_user "$n" sh -c "echo $n >/nvme/$tag && echo $n >/tmp/$tag" ||
        fail "cannot write /nvme or /tmp on $n as the test user"
    on_node "$n" sh -c "echo $n >/run/$tag && echo $n >/dev/shm/$tag"
done
for n in $MINICLUSTER_NODES; do
    for d in /nvme /tmp /run /dev/shm; do
        got=$(on_node "$n" cat "$d/$tag") || fail "$n: $d/$tag missing"
        [ "$got" = "$n" ] || fail "$n sees another node's $d/$tag ($got)"
        count=$(on_node "$n" sh -c "ls $d | grep -c '^$tag\$'")
        [ "$count" = 1 ] || fail "$n: $d not private"
    done
    [ "$(on_node "$n" stat -c %a /nvme)" = 1777 ] || fail "$n: /nvme is not mode 1777"
    [ "$(on_node "$n" hostname)" = "$n" ] || fail "$n: wrong hostname"
    for m in $MINICLUSTER_NODES; do
        on_node "$n" getent hosts "$m" >/dev/null || fail "$n cannot resolve $m"
    done
    on_node "$n" rm -f "/nvme/$tag" "/tmp/$tag" "/run/$tag" "/dev/shm/$tag"
done
[ ! -e "/nvme/$tag" ] || fail "the login side sees a node's /nvme"

# /shared: one file, same content on the login side and every node.
as_user sh -c "echo shared-$$ >$MINICLUSTER_SHARED/$tag" || fail "cannot write $MINICLUSTER_SHARED as the test user"
for n in $MINICLUSTER_NODES; do
    got=$(on_node "$n" cat "$MINICLUSTER_SHARED/$tag") || fail "$n: $MINICLUSTER_SHARED/$tag missing"
    [ "$got" = "shared-$$" ] || fail "$n: $MINICLUSTER_SHARED content differs"
done
rm -f "$MINICLUSTER_SHARED/$tag"
echo "ok: private /nvme /tmp /run on $MINICLUSTER_NODES; $MINICLUSTER_SHARED common"
