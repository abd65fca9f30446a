#!/usr/bin/env bash
# Engine: rank layouts. With one rank per node and the reader as rank 0 (how
# the agent launches it) the writers are MPI_COMM_WORLD itself; with several
# ranks on a node, or --source-rank other than 0, the engine groups ranks by
# host (MPI_Comm_split_type). Every layout must leave one byte-identical copy
# per node, written by one writer per node.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_layout.$$"
[ "$k" -ge 2 ] || skip "needs 2 nodes"
# 10 segments of 512 KiB (the default) and a partial one
as_user sh -c "head -c 5500000 /dev/urandom > $src" || fail "cannot write $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)

field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
check() { # label json ranks: every node copied, one writer per node
    local label=$1 out=$2 ranks=$3 n
    [ "$(field "$out" status)" = ok ] || fail "$label: status: $out"
    [ "$(field "$out" ranks)" = "$ranks" ] || fail "$label: ranks != $ranks: $out"
    [ "$(field "$out" nodes)" = "$k" ] || fail "$label: nodes != $k: $out"
    [ "$(field "$out" nodes_copied)" = "$k" ] || fail "$label: nodes_copied != $k: $out"
    for n in $MINICLUSTER_NODES; do
        [ "$(on_node "$n" sha256sum "$dst" | cut -d' ' -f1)" = "$want" ] ||
            fail "$label: $n content differs"
        on_node "$n" sh -c "ls -a /nvme/$tag" | grep -q '^\.img\.stage\..*\.tmp$' &&
            fail "$label: $n left a temp file: $(on_node "$n" ls -a "/nvme/$tag")"
        on_node "$n" rm -f "$dst"
    done
    return 0
}

# 1. one rank per node, reader rank 0: no communicator is built
out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" -vv --timeout=60s \
    --source "$src" --dest "$dst" --json 2>"$errf") || fail "1 rank/node failed: $out $(cat "$errf")"
check "1 rank/node" "$out" "$k"
grep -q 'one rank per host: the writers are MPI_COMM_WORLD' "$errf" ||
    fail "1 rank/node did not use MPI_COMM_WORLD: $(grep start-up "$errf")"

# 2. two ranks on every node: ranks grouped by host, one writer each
out=$(pmix_srun -N"$k" --ntasks-per-node=2 "$engine" -vv --timeout=60s \
    --source "$src" --dest "$dst" --json 2>"$errf") || fail "2 ranks/node failed: $out $(cat "$errf")"
check "2 ranks/node" "$out" $((2 * k))
grep -q 'several ranks on one host: grouping ranks by host' "$errf" ||
    fail "2 ranks/node did not group by host: $(grep start-up "$errf")"
[ "$(grep -c '\] writer;' "$errf")" = "$k" ] || fail "2 ranks/node: not one writer per node: $(grep start-up "$errf")"

# 3. the reader is rank 1 (on the second node)
out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" -vv --timeout=60s \
    --source-rank=1 --source "$src" --dest "$dst" --json 2>"$errf") ||
    fail "--source-rank=1 failed: $out $(cat "$errf")"
check "--source-rank=1" "$out" "$k"
grep -q -- '--source-rank is not 0: grouping ranks by host' "$errf" ||
    fail "--source-rank=1 did not group by host: $(grep start-up "$errf")"
wait_nodes_idle || fail "nodes not idle"
echo "ok: 1 rank/node (MPI_COMM_WORLD), 2 ranks/node and --source-rank=1 (grouped by host) each left $k identical copies"
