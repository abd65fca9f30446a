/* A real barrier after MPI_Init, through PMIx.
 *
 * Open MPI 4.1 leaves MPI_Init after two PMIx fences: the modex (with data)
 * and a closing barrier (no data). Under Slurm 22.05's mpi/pmix the closing
 * barrier is not a barrier across nodes: the plugin runs data-less fences
 * with its tree algorithm, and on the test cluster every node's slurmstepd
 * completed that fence with its own local contribution alone (slurmd debug
 * log: "COLL_FENCE_TREE ... child_cntr=0 ... local delivery" on every node,
 * every job), while the modex ran as a ring over all nodes. So a rank can
 * leave MPI_Init while a peer still waits for the modex's release, before
 * that peer's PML has registered its receive callbacks; the first MPI
 * message the fast rank sends then reaches the peer's TCP BTL, which calls a
 * NULL callback: SIGSEGV inside MPI_Init (cores from test_engine_race: the
 * fragment's tag 0x41, an ob1 MATCH header, sender of the same job; 8
 * crashes in 60 iterations of two concurrent runs on 3 nodes).
 *
 * The engine therefore waits for every rank before its first message, with
 * a fence that carries data, which Slurm (and any PMIx server) runs across
 * all nodes. A data-less PMIx_Fence, tried here once (commit ac0e9d8), goes
 * the same node-local way as MPI_Init's own, which is why it did not help;
 * with this one, 160 pairs of concurrent runs gave no crash, and
 * tests/cluster/test_engine_mpi_startup.sh fails without it. Under the
 * agent's own PMIx server the fence costs one more round over its control
 * tree; the agent's count of start-up fences (core/agent/launch.c, MPI_INIT_FENCES)
 * still marks "every rank finished MPI_Init". */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* libpmix's header has inline helpers that trip -Wconversion (as in
 * core/agent/pmix_host.c) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#include <pmix.h>
#pragma GCC diagnostic pop

#include "wireup.h"

int sh_wireup_init_barrier(char *err, size_t errlen)
{
    pmix_proc_t me;
    pmix_value_t val;
    pmix_info_t info;
    pmix_status_t rc;
    bool collect = true;

    /* Only join a client Open MPI already started: with no PMIx server
     * PMIx_Init would start a singleton of its own. */
    if (!PMIx_Initialized())
        return 0;
    rc = PMIx_Init(&me, NULL, 0);       /* reference-counted */
    if (rc != PMIX_SUCCESS) {
        snprintf(err, errlen, "PMIx_Init: %s", PMIx_Error_string(rc));
        return -1;
    }
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_UINT8;
    val.data.uint8 = 1;
    rc = PMIx_Put(PMIX_GLOBAL, "stagehand.engine.ready", &val);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
        snprintf(err, errlen, "PMIx_Put/PMIx_Commit: %s", PMIx_Error_string(rc));
    } else {
        PMIX_INFO_CONSTRUCT(&info);
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        rc = PMIx_Fence(NULL, 0, &info, 1);
        PMIX_INFO_DESTRUCT(&info);
        if (rc != PMIX_SUCCESS)
            snprintf(err, errlen, "PMIx_Fence: %s", PMIx_Error_string(rc));
    }
    /* Drop our reference at once: only Open MPI's keeps the client up, and
     * its MPI_Finalize ends it as before. */
    (void)PMIx_Finalize(NULL, 0);
    return rc == PMIX_SUCCESS ? 1 : -1;
}
