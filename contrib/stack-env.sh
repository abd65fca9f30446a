# shellcheck shell=bash
# The environment of one software stack's test set-up, shared by
# tests/run.sh, contrib/quickstart.sh and bench/run.sh: bookworm (the host's
# Debian 12) keeps the caller's settings or the defaults (/opt/stagehand,
# cluster "mc", 10.77.0, /shared); another stack has its own install prefix,
# cluster instance, subnet and shared directory, so that both can be up at
# once.
#
#   stack_env STACK      export STAGEHAND_PREFIX and, for a root stack,
#                        MINICLUSTER_NAME, MINICLUSTER_NET, MINICLUSTER_SHARED
stack_env() {
    case "$1" in
        bookworm) export STAGEHAND_PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand} ;;
        trixie)
            export STAGEHAND_PREFIX=/opt/stagehand-trixie MINICLUSTER_NAME=trixie \
                MINICLUSTER_NET=10.76.0 MINICLUSTER_SHARED=/shared-trixie
            ;;
        *) echo "stack_env: unknown stack '$1' (bookworm or trixie)" >&2; return 2 ;;
    esac
}
