#!/usr/bin/env bash
# Engine start-up under srun --mpi=pmix: no rank sends before every rank has
# left MPI_Init. Slurm 22.05's mpi/pmix completes MPI_Init's closing fence on
# each node alone, so without the engine's own PMIx barrier
# (core/engine/wireup.c) a fast rank's first message reached a peer still in
# its modex fence and Open MPI 4.1.4 crashed that peer with SIGSEGV (about 1
# in 8 pairs of concurrent runs on 3 nodes; this test's 20 pairs found it
# with the barrier removed). Every run must exit 0 with every node copied,
# and no rank may die of a signal.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_mpistart.$$"
as_user sh -c "head -c 1000000 /dev/urandom > $src" || fail "cannot write $src"
pairs=${STARTUP_PAIRS:-20}
o1=$(mktemp)
o2=$(mktemp)
trap 'rm -f "$o1" "$o2"; engine_test_cleanup' EXIT

run() {
    PMIX_SRUN_TIMEOUT=60 pmix_srun --oversubscribe -N"$k" --ntasks-per-node=1 "$engine" \
        --source "$src" --dest "/nvme/$tag/$2/img" --json --timeout=30s >"$1" 2>&1
}
for i in $(seq 1 "$pairs"); do
    run "$o1" a &
    p1=$!
    run "$o2" b &
    p2=$!
    rc1=0 rc2=0
    wait "$p1" || rc1=$?
    wait "$p2" || rc2=$?
    for o in "$o1" "$o2"; do
        ! grep -Eq "Segmentation fault|Process received signal|task [0-9]+: (Killed|Aborted)" "$o" ||
            fail "pair $i: a rank died of a signal: $(cat "$o")"
    done
    { [ "$rc1" = 0 ] && [ "$rc2" = 0 ]; } || fail "pair $i: exit codes $rc1 and $rc2: $(cat "$o1" "$o2")"
    for o in "$o1" "$o2"; do
        grep -q "\"nodes_copied\":$k," "$o" || fail "pair $i: not every node copied: $(cat "$o")"
    done
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tag/a" "/nvme/$tag/b"; done
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: $pairs pairs of concurrent runs on $k nodes, every rank started and every node copied"
