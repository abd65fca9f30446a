/* The engine's one direct use of PMIx: a cross-node barrier right after
 * MPI_Init (see wireup.c for why MPI_Init's own closing barrier is not
 * enough under Slurm 22.05's mpi/pmix). */
#ifndef STAGEHAND_ENGINE_WIREUP_H
#define STAGEHAND_ENGINE_WIREUP_H

#include <stddef.h>

/* Wait until every rank of the job has returned from MPI_Init, through the
 * launcher's PMIx server: PMIx_Put of one small key, PMIx_Commit, then a
 * blocking PMIx_Fence over the whole namespace with PMIX_COLLECT_DATA
 * (PMIx Standard v4, §5.2 "PMIx_Fence"; the key makes the contribution
 * non-empty, so Slurm's mpi/pmix runs it as a collective across the nodes).
 * Call after MPI_Init and before the first MPI communication.
 * Returns 1 when it waited for every rank; 0 when the process has no PMIx
 * client to ask (PMIx_Initialized() false: a singleton, or a launch through
 * PMI-2 or another PMI whose own barrier is used); -1 when PMIx failed, with
 * the PMIx status string written to @err (@errlen bytes, caller's buffer).
 * Takes and drops its own reference on Open MPI's PMIx client (PMIx_Init
 * and PMIx_Finalize are reference-counted). Blocks with no timeout of its
 * own: the caller's start-up alarm bounds it (guard.h,
 * sh_guard_limit_startup). */
int sh_wireup_init_barrier(char *err, size_t errlen);

#endif
