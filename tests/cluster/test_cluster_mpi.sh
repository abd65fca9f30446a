#!/usr/bin/env bash
# Foundation: Open MPI over Slurm's PMIx: hello plus a 256 MiB MPI_Bcast
# across every node, verified on each rank; nodes idle (not drained) after.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
prog="$STAGEHAND_PREFIX/libexec/stagehand/tests/mpi_bcast_check"
[ -x "$prog" ] || fail "$prog not installed (meson -Dinstall_tests=true)"
out=$(as_user srun --mpi=pmix -N"$k" --ntasks-per-node=1 "$prog" 256 2>&1) ||
    fail "srun --mpi=pmix failed: $out"
hellos=$(printf '%s\n' "$out" | grep -c '^hello from rank')
[ "$hellos" -eq "$k" ] || fail "expected $k hellos: $out"
printf '%s\n' "$out" | grep -q "^bcast ok: 256 MiB to $k ranks" || fail "bcast not verified: $out"
wait_nodes_idle || fail "nodes not idle after the MPI job"
printf '%s\n' "$out" | grep '^bcast ok'
