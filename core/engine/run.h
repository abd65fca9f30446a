/* What one rank of stagehand-bcast knows about its run, shared by main.c
 * (start-up, the end) and phases.c (metadata, pre-check, transfer, verify,
 * publish). Private to the engine. */
#ifndef STAGEHAND_ENGINE_RUN_H
#define STAGEHAND_ENGINE_RUN_H

#include <mpi.h>
#include <stdint.h>

#include "opts.h"
#include "report.h"
#include "stagehand/modes.h"
#include "segment.h"
#include "dest.h"
#include "guard.h"

/* Metadata broadcast by the reader (uint64 words, MPI_UINT64_T). */
enum {
    MD_STATUS, MD_ERRNO, MD_SIZE, MD_MTIME_S, MD_MTIME_NS, MD_CTIME_S,
    MD_CTIME_NS, MD_SEGMENT, MD_DEPTH, MD_HASH, MD_CHECK, MD_ALGORITHM,
    MD_VERIFY, MD_MODE, MD_GID, MD_WORDS,
};

/* Roles in the plan broadcast by the reader, one per writer. */
enum { ROLE_SKIP = 0, ROLE_RECEIVE = 1, ROLE_SOURCE = 2, ROLE_SOURCE_WRITE = 3 };


/* Everything one rank knows about the run; phases fill it in order. */
struct run {
    struct sh_bcast_opts o;
    uint64_t t0;
    uint64_t t[SH_PH_COUNT + 1];    /* start of each phase, then the end */
    int rank, wsize, is_reader, is_writer;
    int lrank, lsize;               /* among the writers (one per node) */
    MPI_Comm node_comm, leaders;    /* leaders may be MPI_COMM_WORLD */
    uint64_t md[MD_WORDS];
    struct sh_src_id src;
    struct sh_sched sched;
    char src_error[256];
    int src_fd;
    struct sh_dest d;
    struct sh_node_vote vote;
    struct sh_node_vote *votes;     /* reader only */
    struct sh_node_result res;
    struct sh_node_result *results; /* reader only */
    int *roles;                     /* lsize roles, then the abort flag */
    struct sh_ref_msg ref;
    uint64_t bytes_transferred;
    int force_sidecar;
    int exit_code;
};

/* Start-up after MPI_Init: one writer per node (node_comm, leaders). */
void engine_phase_startup(struct run *r);

/* Reader: print the run's report (text or --json) on stdout. */
void engine_print_report(struct run *r);

/* Metadata, pre-check, transfer, verify and publish, in order; sets
 * r->exit_code. */
void engine_run_phases(struct run *r);

#endif
