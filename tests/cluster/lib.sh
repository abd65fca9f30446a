# shellcheck shell=bash
# Helpers for cluster tests. Sourced by each tests/cluster/test_*.sh, which
# tests/run.sh runs with the minicluster up and `minicluster env` exported.
# A test script exits 0 (pass), 1 (fail) or 77 (skip) and prints why.

: "${SLURM_CONF:?run under tests/run.sh or after: eval \"\$(contrib/minicluster/minicluster env)\"}"
: "${MINICLUSTER_USER:?}"
: "${MINICLUSTER:?}"
: "${STAGEHAND_PREFIX:?}"

# Run a command as the unprivileged test user (login side, root namespaces),
# in a scratch directory the user owns.
as_user() {
    (cd /shared && runuser -u "$MINICLUSTER_USER" -- env SLURM_CONF="$SLURM_CONF" \
        PATH="$STAGEHAND_PREFIX/bin:/usr/local/bin:/usr/bin:/bin" \
        HOME="$(getent passwd "$MINICLUSTER_USER" | cut -d: -f6)" "$@")
}

# Run a command inside node $1's namespaces (as root unless wrapped).
on_node() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- "$@"
}

# Run a command inside node $1's namespaces as the test user.
on_node_as_user() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- runuser -u "$MINICLUSTER_USER" -- "$@"
}

# Wait until every node is idle again (after jobs end); fails on a drained node.
wait_nodes_idle() {
    local state
    for _ in $(seq 1 100); do
        state=$(sinfo -h -o '%T' | sort -u | tr '\n' ' ')
        case "$state" in
            *drain*|*DRAIN*) echo "node drained: $(sinfo -h -R)"; return 1 ;;
        esac
        [ "$state" = "idle " ] && return 0
        sleep 0.2
    done
    echo "nodes not idle: $state"
    return 1
}

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
