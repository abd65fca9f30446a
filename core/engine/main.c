/* stagehand-bcast: pipelined MPI broadcast of one file to node-local storage
 * with a verified atomic publish (doc/design.md §4, issue 3).
 *
 * Phases (each rank keeps the same order; only the main thread calls MPI):
 *   start-up   MPI_Init, one writer per node (MPI_Comm_split_type)
 *   metadata   the reader opens SRC as the running user and broadcasts its
 *              identity and the schedule-relevant settings (case F10)
 *   pre-check  each writer locks DST, sweeps stale temps, decides "current",
 *              checks free space and creates + preallocates its temp file;
 *              votes are gathered by the reader, which broadcasts the plan
 *   transfer   participants only: reader thread, writer+hash thread, MPI loop
 *   verify     end-to-end digest against the reader's, optional read-back
 *   publish    metadata record, rename, fsync(dir); results gathered */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opts.h"
#include "report.h"
#include "stagehand/clock.h"
#include "stagehand/hash.h"
#include "stagehand/io.h"
#include "stagehand/log.h"
#include "stagehand/meta.h"
#include "stagehand/publish.h"
#include "segment.h"
#include "stagehand/size.h"
#include "dest.h"
#include "guard.h"
#include "wireup.h"
#include "run.h"
#include "xfer.h"

/* ---- main ------------------------------------------------------------- */

static int env_rank_zero(void)
{
    static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                        "SLURM_PROCID" };

    for (unsigned i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);

        if (v != NULL)
            return strcmp(v, "0") == 0;
    }
    return 1;
}

static void set_identity(int rank)
{
    const char *job = getenv("SLURM_JOB_ID");
    char *dot;

    if (gethostname(sh_guard_host, sizeof(sh_guard_host)) != 0 ||
        sh_guard_host[0] == '\0')
        sh_msgf(sh_guard_host, sizeof(sh_guard_host), "unknown");
    sh_guard_host[sizeof(sh_guard_host) - 1] = '\0';
    dot = strchr(sh_guard_host, '.');
    if (dot != NULL)
        *dot = '\0';
    sh_msgf(sh_guard_jobid, sizeof(sh_guard_jobid), "%s",
             job != NULL && job[0] != '\0' ? job : "nojob");
    sh_log_set_identity("bcast", job, sh_guard_host, rank);
}

/* Open MPI's TCP transport sends a message above its eager limit (64 KiB by
 * default) by rendezvous: the sender announces it, waits for the receiver's
 * answer, then sends the data. The answer is handled only when the receiving
 * rank next polls MPI, and the engine's progress loop naps up to NAP_MAX_US
 * between polls (xfer.c), so every segment left its link idle for about a
 * millisecond: 1 GiB in 1 MiB segments lost ~1 s of 23 at 48 MB/s, and 512
 * KiB segments twice that (measured on the bench cluster, 8 nodes,
 * doc/performance.md). With the limit above one default segment
 * plus its headers, a segment's bytes leave as soon as it is sent; the chain
 * sends in synchronous mode (MPI_Issend, xfer.c), so a send still completes
 * only once its receive is matched and a hop holds at most its ring. Larger
 * segments keep the rendezvous. A value the site or user set (environment,
 * or the launcher's MCA settings) is kept. The setting is a constant, not
 * derived from --segment-size, so every rank of a job uses the same one: a
 * receiver's fragment buffers must hold what a sender sends. */
#define SH_TCP_EAGER_LIMIT "1052672"    /* bytes: a segment up to 1 MiB (twice the
                                         * 512 KiB default) + 4 KiB headers */

static void tcp_eager_defaults(void)
{
    setenv("OMPI_MCA_btl_tcp_eager_limit", SH_TCP_EAGER_LIMIT, 0);
    setenv("OMPI_MCA_btl_tcp_max_send_size", SH_TCP_EAGER_LIMIT, 0);
}

/* Open MPI 5 answers the death of a rank (Slurm's or the agent's PMIx server
 * reports it) by aborting every other rank from its own event handler:
 * PMIx_Abort, after which Slurm 24.11's mpi/pmix SIGKILLs the step, or
 * _exit(14) (MPI_ERR_UNKNOWN). Neither runs the engine's cleanup, and each
 * survivor left its temp file (test_engine_kill on the trixie cluster).
 * With its fault tolerance on (ULFM, built into Debian's 5.0.7) a failed
 * peer is an error returned to the call (MPI_ERRORS_RETURN, as under 4.1),
 * which the engine's error paths handle: temp file removed, one error exit.
 * ULFM supports only the ob1 pml: with OMPI_MCA_pml=ucx, 5.0.7 crashed in
 * MPI_Init (SIGSEGV), so it stays off when the pml asked for is not ob1.
 * A value the site or user set is kept; 4.1 has no such setting. */
static void fault_defaults(void)
{
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5
    const char *pml = getenv("OMPI_MCA_pml");

    if (pml == NULL || strcmp(pml, "ob1") == 0)
        setenv("OMPI_MCA_mpi_ft_enable", "1", 0);
#endif
}

/* Parse the command line into r->o. Returns -1 to run, else the exit code
 * (help, version, a usage error: said by one rank). */
static int parse_command_line(struct run *r, int argc, char **argv)
{
    char err[512];

    switch (sh_bcast_opts_parse(argc, argv, &r->o, err, sizeof(err))) {
    case SH_OPTS_HELP:
        sh_bcast_usage(stdout);
        return SH_EXIT_OK;
    case SH_OPTS_VERSION:
        printf("stagehand-bcast %s\n", SH_VERSION);
        return SH_EXIT_OK;
    case SH_OPTS_ERROR:
        /* before MPI_Init: every rank got the same argv, one says it */
        if (env_rank_zero())
            fprintf(stderr, "stagehand-bcast: %s (see --help)\n", err);
        return SH_EXIT_USAGE;
    case SH_OPTS_RUN:
        /* Started by the agent, whose policy may count this engine's crash
         * as a node fault (on_node_fault=drain): its user must not be able
         * to attach a debugger and make it fault (security issue 30).
         * prctl(2) PR_SET_DUMPABLE; the window left is the dynamic
         * loader's, before main(). */
        if (r->o.untraceable && prctl(PR_SET_DUMPABLE, 0L, 0L, 0L, 0L) != 0) {
            fprintf(stderr, "stagehand-bcast: prctl(PR_SET_DUMPABLE): %s\n", strerror(errno));
            return SH_EXIT_USAGE;
        }
        break;
    }
    return -1;
}

/* Settle what the run needs before MPI_Init: umask, log level, the
 * deadline and the watchdog that enforces it. */
static void prepare_run(struct run *r)
{
    /* DST's mode and its new directories follow the umask (the agent sets
     * the job's); read while no other thread runs */
    r->o.umask_bits = (unsigned)umask(077);
    umask((mode_t)r->o.umask_bits);
    sh_log_set_level(r->o.verbose >= 2 ? SH_LOG_DEBUG :
                     r->o.verbose == 1 ? SH_LOG_INFO : SH_LOG_WARN);
    {
        const char *sidecar = getenv("STAGEHAND_META_SIDECAR");

        r->force_sidecar = sidecar != NULL && strcmp(sidecar, "1") == 0;
    }
    r->src_fd = -1;
    r->lrank = -1;
    r->node_comm = r->leaders = MPI_COMM_NULL;
    r->d.dirfd = r->d.lockfd = -1;
    sh_guard_watch_lock(&r->d.dirfd, &r->d.lockfd, r->d.name);
    r->res.status = -1;             /* set by every path of the run */
    sh_guard_deadline_ns = r->t0 + r->o.timeout_ns;
    set_identity(-1);           /* the rank is known after MPI_Init */
    sh_guard_start_watchdog(-1);
    /* A rank that dies in MPI_Init (Open MPI 4.1.4 does, now and then) leaves
     * the others inside it: bound that by the stall limit, not the deadline. */
    sh_guard_limit_startup(r->o.stall_ns);
}

/* Start MPI (start-up phase): MPI_Init, the PMIx barrier, the world's size
 * checked against the command line, crash signals handled, one writer per
 * node. Returns -1 to go on, else the exit code (MPI is finalized then). */
static int start_mpi(struct run *r, int *argc, char ***argv)
{
    char err[512];
    int provided, rc;

    tcp_eager_defaults();
    fault_defaults();
    rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "stagehand-bcast: MPI_Init_thread failed\n");
        return SH_EXIT_INTERNAL;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->wsize);
    sh_log_set_identity("bcast", getenv("SLURM_JOB_ID"), sh_guard_host, r->rank);
    /* No rank sends before every rank is out of MPI_Init (wireup.c); the
     * start-up alarm still bounds the wait. */
    if (sh_wireup_init_barrier(err, sizeof(err)) < 0) {
        char what[600];

        snprintf(what, sizeof(what), "the PMIx barrier after MPI_Init (%s)", err);
        sh_guard_mpi_fatal("start-up", what, MPI_SUCCESS);
    }
    sh_guard_start_watchdog(r->rank);
    if (provided < MPI_THREAD_FUNNELED)
        sh_guard_mpi_fatal("start-up", "MPI_THREAD_FUNNELED support", MPI_SUCCESS);
    /* The agent plans N participants; a world of another size means the
     * launcher wired up something else (doc/design.md §2 step 5). */
    if (r->o.expect_ranks > 0 && r->wsize != r->o.expect_ranks) {
        if (r->rank == 0)
            fprintf(stderr, "stagehand-bcast: --expect-ranks=%d: the MPI job has "
                    "%d rank(s)\n", r->o.expect_ranks, r->wsize);
        MPI_Finalize();
        return SH_EXIT_USAGE;
    }
    if (r->o.source_rank >= r->wsize) {
        if (r->rank == 0)
            fprintf(stderr, "stagehand-bcast: --source-rank=%d: the job has "
                    "only %d rank(s), 0 to %d\n", r->o.source_rank, r->wsize,
                    r->wsize - 1);
        MPI_Finalize();
        return SH_EXIT_USAGE;
    }
    sh_guard_install_signals();
    r->is_reader = r->rank == r->o.source_rank;
    r->res.world_rank = r->rank;
    sh_msgf(r->res.host, sizeof(r->res.host), "%s", sh_guard_host);
    r->t[SH_PH_STARTUP] = r->t0;
    sh_debug("start-up", "MPI initialised after %.3fs, %d rank(s)",
             sh_secs(r->t0, (uint64_t)sh_now_ns()), r->wsize);
    engine_phase_startup(r);
    sh_debug("start-up", "%s; %d writer(s)", r->is_writer ? "writer" : "idle",
             r->lsize);
    return -1;
}

/* End the run: close the phase times, report (reader), agree on the exit
 * code, free and finalize. Returns the exit code. */
static int finish_run(struct run *r)
{
    int32_t code;

    /* phases that did not run take no time; the last one that ran lasts
     * until now, so the phases still add up to the total */
    {
        uint64_t now = (uint64_t)sh_now_ns();

        for (int p = SH_PH_METADATA; p < SH_PH_COUNT; p++) {
            if (r->t[p] == 0)
                r->t[p] = now;
        }
    }
    if (r->is_reader)
        engine_print_report(r);
    code = r->exit_code;
    sh_guard_bcast(&code, 1, MPI_INT32_T, r->o.source_rank, MPI_COMM_WORLD,
                   "publish");
    if (r->src_fd >= 0)
        close(r->src_fd);
    free(r->votes);
    free(r->results);
    free(r->roles);
    if (r->leaders != MPI_COMM_NULL && r->leaders != MPI_COMM_WORLD)
        MPI_Comm_free(&r->leaders);
    if (r->node_comm != MPI_COMM_NULL)
        MPI_Comm_free(&r->node_comm);
    sh_guard_exit_code = code;
    sh_guard_done = 1;
    MPI_Finalize();
    return code;
}

int main(int argc, char **argv)
{
    static struct run run;          /* large (paths): keep it off the stack */
    struct run *r = &run;
    sigset_t crash_set;
    int rc;

    /* Until our crash handler can tell a real crash from a crash signal the
     * job's user sent (security issue 30), such a signal waits: blocked here,
     * unblocked by sh_guard_install_signals() after MPI_Init. (One that comes
     * before main() ends the engine before MPI started: the agent's start-up
     * retry, never a node fault.) */
    sh_guard_block_crash_signals(&crash_set);
    sigprocmask(SIG_BLOCK, &crash_set, NULL);
    r->t0 = (uint64_t)sh_now_ns();
    rc = parse_command_line(r, argc, argv);
    if (rc >= 0)
        return rc;
    prepare_run(r);
    rc = start_mpi(r, &argc, &argv);
    if (rc >= 0)
        return rc;
    engine_run_phases(r);
    return finish_run(r);
}
