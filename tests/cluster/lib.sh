# shellcheck shell=bash
# Helpers for cluster tests. Sourced by each tests/cluster/test_*.sh, which
# tests/run.sh runs with the minicluster up and `minicluster env` exported.
# A test script exits 0 (pass), 1 (fail) or 77 (skip) and prints why.

: "${SLURM_CONF:?run under tests/run.sh or after: eval \"\$(contrib/minicluster/minicluster env)\"}"
: "${MINICLUSTER_USER:?}"
: "${MINICLUSTER_OTHER_USER:=shother}"
: "${MINICLUSTER_THIRD_USER:=shthird}"
# The cluster's shared file system (login side and every node); one per
# instance, so that two clusters can be up at once.
: "${MINICLUSTER_SHARED:=/shared}"
: "${MINICLUSTER:?}"
: "${STAGEHAND_PREFIX:?}"

# Run a command as the unprivileged test user (login side, root namespaces),
# in a scratch directory the user owns.
as_user() { run_as "$MINICLUSTER_USER" "$@"; }

# The test users' home directories, looked up once (run_as runs for every
# sbatch and srun of a test, often in a command substitution, where a cache
# filled there would be lost).
declare -A user_home
while IFS=: read -r _u _ _ _ _ _h _; do
    user_home[$_u]=$_h
done < <(getent passwd "$MINICLUSTER_USER" "$MINICLUSTER_OTHER_USER" "$MINICLUSTER_THIRD_USER")
unset _u _h

# run_as USER CMD...: as_user for any user.
run_as() {
    local u=$1 home
    shift
    home=${user_home[$u]:-$(getent passwd "$u" | cut -d: -f6)}
    (cd "$MINICLUSTER_SHARED" && runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" \
        PATH="$STAGEHAND_PREFIX/bin:/usr/local/bin:/usr/bin:/bin" \
        HOME="$home" "$@")
}

# Run a command as the second unprivileged user (MINICLUSTER_OTHER_USER, the
# other party of the security tests), like as_user.
as_other() { run_as "$MINICLUSTER_OTHER_USER" "$@"; }
# ... and as the third (MINICLUSTER_THIRD_USER: the node image cache's tests).
as_third() { run_as "$MINICLUSTER_THIRD_USER" "$@"; }

# Run a command inside node $1's namespaces (as root unless wrapped).
on_node() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- "$@"
}

# Run a command as root on the login side, where sbatch, srun and as_user
# run: the host on bookworm, the cluster's login view on a root stack
# (minicluster's make_login_view), whose /tmp is its own.
on_login() {
    if [ "${MINICLUSTER_STACK:-bookworm}" = bookworm ]; then
        "$@"
    else
        nsenter --mount="$MINICLUSTER_STATE/ns/login.mnt" -- "$@"
    fi
}

# Run a command inside node $1's namespaces as the test user.
on_node_as_user() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- runuser -u "$MINICLUSTER_USER" -- "$@"
}

# Run a command inside node $1's namespaces as the second user.
on_node_as_other() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- runuser -u "$MINICLUSTER_OTHER_USER" -- "$@"
}

# ... and as the third user.
on_node_as_third() {
    local node=$1
    shift
    "$MINICLUSTER" exec "$node" -- runuser -u "$MINICLUSTER_THIRD_USER" -- "$@"
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

# The words of @1 on one line, one space apart (what an unquoted
# $(echo $1) prints, without its globbing).
one_line() {
    local -a w
    read -rd '' -a w <<<"$1" || true
    echo "${w[*]}"
}

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# Make a random file of @2 MiB at @1 owned by the test user (mode 0644).
make_user_file() {
    as_user sh -c "head -c $(($2 * 1048576)) /dev/urandom >'$1' && chmod 0644 '$1'"
}

# sha256 of a file inside node @1's namespaces ("" when missing).
node_sha() {
    on_node "$1" sh -c "sha256sum '$2' 2>/dev/null | cut -d' ' -f1"
}

# Assert that every node holds a byte-identical copy of @1 at @2, owned by
# the test user.
assert_staged_everywhere() {
    local want n got owner
    want=$(sha256sum "$1" | cut -d' ' -f1)
    for n in $MINICLUSTER_NODES; do
        got=$(node_sha "$n" "$2")
        [ "$got" = "$want" ] || fail "$n: $2 differs from $1 (got '${got:-missing}')"
        owner=$(on_node "$n" stat -c %U "$2")
        [ "$owner" = "$MINICLUSTER_USER" ] || fail "$n: $2 owned by $owner, not the job user"
    done
}

# Assert that no entry of directory @1 matches the extended regex @2 on any
# node (@3: what they are, for the message).
assert_no_entries() {
    local n left
    for n in $MINICLUSTER_NODES; do
        left=$(on_node "$n" sh -c "ls -a '$1' 2>/dev/null | grep -E '$2' || true")
        [ -z "$left" ] || fail "$n: ${3:-entries} left in $1: $left"
    done
}

# Assert that no temp file of a staging is left next to @1 on any node.
assert_no_temp_files() {
    assert_no_entries "$(dirname "$1")" '\.stage\..*\.tmp$' "temp files"
}

# The slurmd log of node @1 from byte offset @2 on (see log_offset).
log_since() {
    tail -c +"$(($2 + 1))" "$MINICLUSTER_STATE/log/slurmd.$1.log" 2>/dev/null
}
log_offset() {
    stat -c %s "$MINICLUSTER_STATE/log/slurmd.$1.log" 2>/dev/null || echo 0
}

# Assert that job @1 left no runtime state in /run/stagehand on any node.
assert_no_runtime_state() {
    local n left
    for n in $MINICLUSTER_NODES; do
        left=$(on_node "$n" sh -c "ls /run/stagehand 2>/dev/null | grep -E '^$1(\$|\.)' || true")
        [ -z "$left" ] || fail "$n: /run/stagehand still holds $left for job $1"
    done
}

# Engine tests (test_engine_*): sets engine (the installed stagehand-bcast), k
# (the number of nodes), tag (@1), src=/shared/TAG.src, dst=/nvme/TAG/img and
# errf (a temp file for the engine's stderr); on exit removes src, errf and
# /nvme/TAG on every node.
# shellcheck disable=SC2034  # k and dst are the calling test's
engine_test_init() {
    engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
    [ -x "$engine" ] || fail "$engine not installed"
    k=$(echo "$MINICLUSTER_NODES" | wc -w)
    tag=$1
    src="$MINICLUSTER_SHARED/$tag.src"
    dst="/nvme/$tag/img"
    errf=$(mktemp)
    trap engine_test_cleanup EXIT
}
engine_test_cleanup() {
    local n
    rm -f "$src" "$errf"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tag"; done
}

# `srun --mpi=pmix ARGS` as the test user, run again once when Slurm 22.05's
# PMIx plugin rejected a direct connection between two slurmstepds ("Invalid
# authentication credential" after "Munge decode failed: Unauthorized
# credential"): a race inside slurmstepd, not stagehand's, after which the
# step's fence fails and a rank dies in MPI_Init (seen in about 1 of 100
# steps on this cluster). Any other failure, a crash included, is returned
# as it is. stdout and stderr come out when the step has ended.
pmix_srun() {
    local out err rc=0 tmo=()
    # PMIX_SRUN_TIMEOUT=SECONDS: each try runs under timeout(1) (exit 124)
    [ -n "${PMIX_SRUN_TIMEOUT:-}" ] && tmo=(timeout "$PMIX_SRUN_TIMEOUT")
    out=$(mktemp)
    err=$(mktemp)
    as_user "${tmo[@]}" srun --mpi=pmix "$@" >"$out" 2>"$err" || rc=$?
    # A known third-party start-up failure gets one more try, with a note.
    # (A rank's SIGSEGV inside MPI_Init used to be retried here too; its
    # cause was found and fixed in the engine, core/engine/wireup.c.)
    local why=""
    if [ "$rc" -ne 0 ] && grep -q "Invalid authentication credential" "$err"; then
        why="Slurm's PMIx direct connection failed its authentication"
    fi
    if [ -n "$why" ]; then
        echo "note: $why; step run again" >&2
        rc=0
        as_user "${tmo[@]}" srun --mpi=pmix "$@" >"$out" 2>"$err" || rc=$?
    fi
    cat "$out"
    cat "$err" >&2
    rm -f "$out" "$err"
    return "$rc"
}
