/* stagehand-bcast: the phases after start-up, in order (see main.c's
 * list): metadata, pre-check and its plan, transfer, verify and publish,
 * results and the report. */
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

/* ---- metadata phase (reader) ------------------------------------------ */

/* Open SRC as the running user and fill @md. Returns the fd or -1 with a
 * message in @err (case F17: regular files only, never a FIFO or device). */
static int open_source(const struct sh_bcast_opts *o, uint64_t *md,
                       char *err, size_t errlen)
{
    struct stat st;
    int fd;

    /* O_NONBLOCK: opening a FIFO must not hang before fstat rejects it */
    fd = open(o->source, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        sh_msgf(err, errlen, "cannot open source %s: %s", o->source,
                 strerror(errno));
        md[MD_ERRNO] = (uint64_t)errno;
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        sh_msgf(err, errlen, "cannot stat source %s: %s", o->source,
                strerror(errno));
        md[MD_ERRNO] = (uint64_t)errno;
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        sh_msgf(err, errlen, "source %s is not a regular file", o->source);
        md[MD_ERRNO] = EINVAL;
        close(fd);
        return -1;
    }
    if (fcntl(fd, F_SETFL, 0) != 0) {
        sh_msgf(err, errlen, "source %s: fcntl: %s", o->source, strerror(errno));
        md[MD_ERRNO] = (uint64_t)errno;
        close(fd);
        return -1;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    md[MD_SIZE] = (uint64_t)st.st_size;
    md[MD_MTIME_S] = (uint64_t)st.st_mtim.tv_sec;
    md[MD_MTIME_NS] = (uint64_t)st.st_mtim.tv_nsec;
    md[MD_CTIME_S] = (uint64_t)st.st_ctim.tv_sec;
    md[MD_CTIME_NS] = (uint64_t)st.st_ctim.tv_nsec;
    md[MD_MODE] = (uint64_t)(st.st_mode & 0777);
    md[MD_GID] = (uint64_t)st.st_gid;
    return fd;
}

/* Has SRC changed since the metadata phase? (size, mtime, ctime) */
static int source_changed(int fd, const struct sh_src_id *src)
{
    struct stat st;

    if (fstat(fd, &st) != 0)
        return 1;
    return (uint64_t)st.st_size != src->size ||
           st.st_mtim.tv_sec != src->mtime.sec ||
           (uint32_t)st.st_mtim.tv_nsec != src->mtime.nsec ||
           st.st_ctim.tv_sec != src->ctime.sec ||
           (uint32_t)st.st_ctim.tv_nsec != src->ctime.nsec;
}


enum { HOST_REC = 65 };     /* HOST_NAME_MAX + 1 */

static int host_rec_cmp(const void *a, const void *b)
{
    return strncmp(a, b, HOST_REC);
}

/* Is every rank on a host of its own? Rank 0 gathers the full host names
 * (gethostname(2), HOST_REC bytes each), sorts them so that equal names are
 * neighbours (O(N log N): 10,000 ranks sort in milliseconds) and broadcasts
 * the answer. Not an allgather: Open MPI's non-blocking allgather (libnbc)
 * is linear, every rank sending to every other, so each rank opened a TCP
 * connection to each of the N-1 others at start-up (N(N-1) connections; at
 * 32 nodes on the test cluster that filled the host's shared neighbour
 * table, doc/design.md §9), where the gather adds only the root's
 * connections, which the pre-check's gather of votes makes anyway, and the
 * broadcast a tree's. Every rank takes part whatever happens; a rank without
 * a name sends an empty record, and an empty record, like equal names, makes
 * the answer "no" on every rank alike. */
static int one_rank_per_host(struct run *r)
{
    char mine[HOST_REC + 1] = { 0 };
    char *all = NULL;
    int distinct = 1;

    if (gethostname(mine, sizeof(mine)) != 0 || mine[HOST_REC - 1] != '\0')
        memset(mine, 0, sizeof(mine));
    if (r->rank == 0) {
        all = calloc((size_t)r->wsize, HOST_REC);
        if (all == NULL)
            sh_guard_mpi_fatal("start-up", "memory for the host names", MPI_SUCCESS);
    }
    sh_guard_gather(mine, HOST_REC, all, MPI_COMM_WORLD, "start-up");
    if (r->rank == 0) {
        qsort(all, (size_t)r->wsize, HOST_REC, host_rec_cmp);
        distinct = all[0] != '\0';  /* sorted: an empty record comes first */
        for (int i = 1; i < r->wsize && distinct; i++)
            distinct = host_rec_cmp(all + (size_t)(i - 1) * HOST_REC,
                                    all + (size_t)i * HOST_REC) != 0;
        free(all);
    }
    sh_guard_bcast(&distinct, 1, MPI_INT, 0, MPI_COMM_WORLD, "start-up");
    return distinct;
}

/* start-up: one writer per node; the reader sorts first on its node, so it
 * is that node's writer. STAGEHAND_BCAST_RANK_AS_NODE=1 (tests only) makes
 * every rank its own "node", to exercise several writers on one host; each
 * then writes DST.r<rank>.
 *
 * Each new communicator costs Open MPI 4.1 a context-id agreement (rounds of
 * allreduce): measured 0.15-0.2 s per MPI_Comm_split at 8 nodes on the test
 * cluster, twice here. In the usual layout, one rank per node with the reader
 * as rank 0 (how the agent launches the engine, and srun
 * --ntasks-per-node=1), the writers in key order are MPI_COMM_WORLD itself:
 * one allgather of host names tells, and no communicator is created. */
void engine_phase_startup(struct run *r)
{
    const char *fake = getenv("STAGEHAND_BCAST_RANK_AS_NODE");
    int is_fake = fake != NULL && strcmp(fake, "1") == 0;
    int key = r->is_reader ? 0 : r->rank + 1;
    int node_rank, rc;

    if (r->o.source_rank == 0 && (is_fake || one_rank_per_host(r))) {
        r->is_writer = 1;
        r->leaders = MPI_COMM_WORLD;    /* not freed */
        r->lrank = r->rank;
        r->lsize = r->wsize;
        sh_debug("start-up", "one rank per host: the writers are MPI_COMM_WORLD");
    } else {
        sh_debug("start-up", "%s: grouping ranks by host",
                 r->o.source_rank != 0 ? "--source-rank is not 0"
                                       : "several ranks on one host");
        if (is_fake)
            rc = MPI_Comm_split(MPI_COMM_WORLD, r->rank, key, &r->node_comm);
        else
            rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, key,
                                     MPI_INFO_NULL, &r->node_comm);
        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal("start-up", "grouping ranks by node", rc);
        MPI_Comm_rank(r->node_comm, &node_rank);
        r->is_writer = node_rank == 0;
        rc = MPI_Comm_split(MPI_COMM_WORLD, r->is_writer ? 0 : MPI_UNDEFINED, key,
                            &r->leaders);
        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal("start-up", "building the writers' communicator", rc);
        if (r->leaders != MPI_COMM_NULL) {
            MPI_Comm_set_errhandler(r->leaders, MPI_ERRORS_RETURN);
            MPI_Comm_rank(r->leaders, &r->lrank);
            MPI_Comm_size(r->leaders, &r->lsize);
        }
    }
    if (is_fake && !r->is_reader) {
        size_t n = strlen(r->o.dest);

        sh_msgf(r->o.dest + n, sizeof(r->o.dest) - n, ".r%d", r->rank);
    }
}

/* metadata: the reader opens SRC and broadcasts its identity and the
 * settings that shape the stream (case F10: they come from the reader only).
 * Returns 0, or -1 when the source is unusable (every rank). */
static int phase_metadata(struct run *r)
{
    uint64_t *md = r->md;

    if (r->is_reader) {
        r->src_fd = open_source(&r->o, md, r->src_error, sizeof(r->src_error));
        md[MD_STATUS] = r->src_fd < 0 ? 1u : 0u;
        md[MD_SEGMENT] = r->o.segment;
        md[MD_DEPTH] = r->o.depth;
        md[MD_HASH] = (uint64_t)r->o.hash;
        md[MD_CHECK] = (uint64_t)r->o.check;
        md[MD_ALGORITHM] = (uint64_t)r->o.algorithm;
        md[MD_VERIFY] = (uint64_t)r->o.verify;
        if (r->src_fd < 0)
            sh_error("metadata", "%s", r->src_error);
    }
    sh_guard_bcast(md, MD_WORDS, MPI_UINT64_T, r->o.source_rank, MPI_COMM_WORLD,
                   "metadata");
    if (md[MD_STATUS] != 0)
        return -1;
    r->o.segment = md[MD_SEGMENT];
    r->o.depth = (unsigned)md[MD_DEPTH];
    r->o.hash = (enum sh_hash_algo)md[MD_HASH];
    r->o.check = (enum sh_check)md[MD_CHECK];
    r->o.algorithm = (enum sh_algorithm)md[MD_ALGORITHM];
    r->o.verify = (enum sh_verify)md[MD_VERIFY];
    sh_msgf(r->src.path, sizeof(r->src.path), "%s",
            r->o.source_name[0] != '\0' ? r->o.source_name : r->o.source);
    r->src.size = md[MD_SIZE];
    r->src.mtime.sec = (int64_t)md[MD_MTIME_S];
    r->src.mtime.nsec = (uint32_t)md[MD_MTIME_NS];
    r->src.ctime.sec = (int64_t)md[MD_CTIME_S];
    r->src.ctime.nsec = (uint32_t)md[MD_CTIME_NS];
    r->src.mode = (uint32_t)md[MD_MODE] & 0777;
    r->src.gid = (uint32_t)md[MD_GID];
    if (sh_sched_init(&r->sched, r->src.size, r->o.segment) != 0)
        sh_guard_mpi_fatal("metadata", "segment schedule", MPI_SUCCESS);
    return 0;
}

/* Reader: turn the votes into roles; roles[lsize] = 1 aborts the run. */
static void make_plan(struct run *r)
{
    const struct sh_node_vote *v0 = &r->votes[0];
    int failed = 0, any = 0;

    for (int i = 0; i < r->lsize; i++) {
        const struct sh_node_vote *v = &r->votes[i];

        if (v->vote == SH_VOTE_ERROR) {
            failed = 1;
            continue;
        }
        r->roles[i] = v->vote == SH_VOTE_COPY ? ROLE_RECEIVE : ROLE_SKIP;
        /* a "current" copy whose recorded digest disagrees with the reader's
         * own current copy is not current */
        if (i > 0 && r->roles[i] == ROLE_SKIP && v0->vote == SH_VOTE_CURRENT &&
            v0->digest_len > 0 && v->digest_len == v0->digest_len &&
            v->algo == v0->algo &&
            memcmp(v->digest, v0->digest, (size_t)v->digest_len) != 0)
            r->roles[i] = ROLE_RECEIVE;
        if (i > 0)
            any |= r->roles[i] != ROLE_SKIP;
    }
    r->roles[r->lsize] = failed;
    if (failed)
        return;
    if (r->roles[0] == ROLE_RECEIVE)
        r->roles[0] = ROLE_SOURCE_WRITE;
    else if (any)
        r->roles[0] = ROLE_SOURCE;
}

/* Reader: results of a run aborted in pre-check, from the votes (case F15:
 * the report names the failing nodes, nobody else is blamed). */
static void results_from_votes(struct run *r)
{
    for (int i = 0; i < r->lsize; i++) {
        const struct sh_node_vote *v = &r->votes[i];
        struct sh_node_result *n = &r->results[i];

        n->world_rank = v->world_rank;
        sh_msgf(n->host, sizeof(n->host), "%s", v->host);
        if (v->vote == SH_VOTE_ERROR) {
            n->status = SH_NODE_FAILED;
            n->err = v->err;
            n->exit_class = SH_EXIT_DEST;
            sh_msgf(n->phase, sizeof(n->phase), "pre-check");
            sh_msgf(n->reason, sizeof(n->reason), "%s", v->reason);
        } else if (v->vote == SH_VOTE_CURRENT) {
            n->status = SH_NODE_CURRENT;
        } else {
            n->status = SH_NODE_ABORTED;
            sh_msgf(n->phase, sizeof(n->phase), "pre-check");
            sh_msgf(n->reason, sizeof(n->reason), "not copied: another node "
                    "failed its pre-check");
        }
    }
}

/* pre-check (writers): lock, decide, vote; the reader plans. Returns 0 to
 * go on, -1 when the run was aborted before any data moved. */
static int phase_precheck(struct run *r)
{
    struct sh_node_vote *v = &r->vote;

    v->world_rank = r->rank;
    sh_msgf(v->host, sizeof(v->host), "%s", sh_guard_host);
    sh_dest_lock_all(&r->o, &r->d, v, r->leaders);
    sh_dest_precheck(&r->o, &r->src, &r->sched, &r->d, v);
    if (v->vote == SH_VOTE_ERROR)
        sh_error("pre-check", "%s", v->reason);
    if (r->lrank == 0) {
        r->votes = calloc((size_t)r->lsize, sizeof(*r->votes));
        r->results = calloc((size_t)r->lsize, sizeof(*r->results));
        if (r->votes == NULL || r->results == NULL)
            sh_guard_mpi_fatal("pre-check", "memory for the votes", MPI_SUCCESS);
    }
    r->roles = calloc((size_t)r->lsize + 1, sizeof(*r->roles));
    if (r->roles == NULL)
        sh_guard_mpi_fatal("pre-check", "memory for the plan", MPI_SUCCESS);
    sh_guard_gather(v, (int)sizeof(*v), r->votes, r->leaders, "pre-check");
    if (r->lrank == 0)
        make_plan(r);
    sh_guard_bcast(r->roles, r->lsize + 1, MPI_INT, 0, r->leaders, "pre-check");
    if (r->roles[r->lsize]) {
        sh_dest_release(&r->d);
        if (r->lrank == 0) {
            results_from_votes(r);
            r->exit_code = SH_EXIT_DEST;
        }
        return -1;
    }
    if (r->roles[r->lrank] == ROLE_RECEIVE && !r->d.have_temp) {
        /* the reader overruled our "current" vote: lock again (released
         * after the vote) and prepare the temp now */
        if (sh_publish_lock(r->d.dirfd, r->d.name, r->o.timeout_ns / 2,
                            &r->d.lockfd) == 0 &&
            sh_publish_begin(&sh_guard_pub, NULL, r->d.dirfd, r->d.name,
                             sh_guard_jobid, sh_guard_host, r->sched.size,
                             sh_copy_mode(r->src.mode, r->o.umask_bits, 1),
                             (gid_t)r->src.gid) == 0)
            r->d.have_temp = 1;
        else
            sh_node_fail(&r->res, "pre-check", errno, SH_EXIT_DEST, "cannot "
                         "create a temp file next to %s: %s", r->o.dest,
                         strerror(errno));
    }
    return 0;
}

/* transfer, verify and publish, on the participants' communicator. */
static void phase_transfer(struct run *r, MPI_Comm part)
{
    struct sh_xfer_cfg cfg;
    struct sh_xfer_result xr;
    struct sh_ref_msg *ref = &r->ref;
    MPI_Request req;
    int rc;

    MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
    memset(&cfg, 0, sizeof(cfg));
    cfg.comm = part;
    cfg.algorithm = r->o.algorithm;
    cfg.sched = r->sched;
    cfg.depth = r->o.depth;
    cfg.read_ahead = r->o.read_ahead;
    cfg.hash = r->o.hash;
    cfg.src_fd = r->is_reader ? r->src_fd : -1;
    cfg.pub = r->d.have_temp ? &sh_guard_pub : NULL;
    cfg.deadline_ns = sh_guard_deadline_ns;
    cfg.stall_ns = r->o.stall_ns;
    cfg.progress = r->o.progress;
    if (sh_xfer_run(&cfg, &xr) != 0) {
        if (xr.stalled)
            sh_guard_stall_abort("transfer", xr.msg);
        if (xr.timed_out)
            sh_guard_deadline_abort("transfer", xr.msg);
        sh_guard_mpi_fatal("transfer", xr.msg, MPI_SUCCESS);
    }
    r->res.bytes_written = xr.bytes_written;
    r->res.cpu_write_s = xr.cpu_write_s;
    r->res.cpu_read_s = xr.cpu_read_s;
    if (r->is_reader) {
        ref->status = xr.src_status;
        ref->err = xr.src_err;
        ref->seg = xr.src_err_seg;
        if (ref->status == SH_SEG_OK && source_changed(r->src_fd, &r->src))
            ref->status = SH_SRC_CHANGED;
        ref->digest_len = xr.digest_len;
        memcpy(ref->digest, xr.digest, sizeof(ref->digest));
    }

    r->t[SH_PH_VERIFY] = (uint64_t)sh_now_ns();
    sh_guard_bcast(ref, (int)sizeof(*ref), MPI_BYTE, 0, part, "verify");
    if (ref->status == SH_SEG_OK)
        r->bytes_transferred = r->sched.size;
    if (r->d.have_temp && r->res.status != SH_NODE_FAILED &&
        sh_dest_verify(&r->o, &r->sched, ref, &xr, &r->res) != 0) {
        sh_publish_abort(&sh_guard_pub);
        r->d.have_temp = 0;
    }
    /* the verify phase ends when every participant has verified, so the
     * reader's phase times describe the whole run */
    rc = MPI_Ibarrier(part, &req);
    if (rc != MPI_SUCCESS)
        sh_guard_mpi_fatal("verify", "MPI_Ibarrier", rc);
    sh_guard_wait(&req, "verify", "MPI_Ibarrier");

    r->t[SH_PH_PUBLISH] = (uint64_t)sh_now_ns();
    if (r->d.have_temp && r->res.status != SH_NODE_FAILED &&
        sh_dest_publish(&r->o, &r->src, ref, &r->d, &r->res,
                        r->force_sidecar) == 0)
        r->res.status = SH_NODE_COPIED;
    if (r->roles[r->lrank] == ROLE_SOURCE && r->res.status != SH_NODE_FAILED) {
        if (ref->status == SH_SEG_OK) {
            r->res.status = SH_NODE_READER;
        } else {
            char why[sizeof(r->res.reason)];

            sh_src_failure_text(r->o.source, ref->status, ref->err, ref->seg, why,
                                sizeof(why));
            sh_node_fail(&r->res, "transfer", (int)ref->err, SH_EXIT_SOURCE, "%s", why);
        }
    }
    r->res.transfer_s = sh_secs(r->t[SH_PH_TRANSFER], r->t[SH_PH_VERIFY]);
    r->res.verify_s = sh_secs(r->t[SH_PH_VERIFY], r->t[SH_PH_PUBLISH]);
    r->res.publish_s = sh_secs(r->t[SH_PH_PUBLISH], (uint64_t)sh_now_ns());
}

static double cpu_seconds(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Results of every node to the reader; the exit code is the worst class,
 * a source (user) error first. */
static void gather_results(struct run *r)
{
    if (r->res.status < 0)
        sh_node_fail(&r->res, "publish", 0, SH_EXIT_INTERNAL,
                     "no outcome recorded");
    r->res.cpu_s = cpu_seconds();
    sh_guard_gather(&r->res, (int)sizeof(r->res), r->results, r->leaders,
                    "publish");
    if (r->lrank != 0)
        return;
    for (int i = 0; i < r->lsize; i++) {
        const struct sh_node_result *n = &r->results[i];

        if (n->status != SH_NODE_FAILED)
            continue;
        if (r->exit_code == SH_EXIT_OK || n->exit_class == SH_EXIT_SOURCE)
            r->exit_code = n->exit_class;
    }
}

void engine_print_report(struct run *r)
{
    struct sh_report rep;
    uint64_t tend = (uint64_t)sh_now_ns();

    memset(&rep, 0, sizeof(rep));
    rep.opts = &r->o;
    rep.size = r->src.size;
    rep.src_ok = r->md[MD_STATUS] == 0;
    sh_msgf(rep.src_error, sizeof(rep.src_error), "%s", r->src_error);
    rep.world_size = r->wsize;
    rep.nodes = r->results != NULL ? r->lsize : 0;
    rep.results = r->results;
    r->t[SH_PH_COUNT] = tend;
    for (int p = 0; p < SH_PH_COUNT; p++)
        rep.phase_s[p] = sh_secs(r->t[p], r->t[p + 1]);
    rep.total_s = sh_secs(r->t0, tend);
    rep.bytes_transferred = r->bytes_transferred;
    rep.lock_wait_s = r->d.lock_wait_s;
    rep.lock_owner = r->d.lock_owner;
    if (r->ref.status == SH_SEG_OK && r->ref.digest_len > 0) {
        rep.digest_len = r->ref.digest_len;
        memcpy(rep.digest, r->ref.digest, sizeof(rep.digest));
    }
    rep.exit_code = r->exit_code;
    if (r->o.json)
        sh_report_json(&rep, stdout);
    else
        sh_report_text(&rep, stdout);
    fflush(stdout);
}

/* Phases after start-up; returns when this rank is ready to finish. */
void engine_run_phases(struct run *r)
{
    MPI_Comm part = MPI_COMM_NULL;
    int rc, skips = 0;

    r->t[SH_PH_METADATA] = (uint64_t)sh_now_ns();
    if (phase_metadata(r) != 0) {
        r->exit_code = SH_EXIT_SOURCE;
        return;
    }
    r->t[SH_PH_PRECHECK] = (uint64_t)sh_now_ns();
    if (!r->is_writer)
        return;             /* idle rank: one writer per node */
    if (phase_precheck(r) != 0)
        return;
    r->t[SH_PH_TRANSFER] = (uint64_t)sh_now_ns();
    /* the participants; when every node takes part (the usual case: the
     * agent launches the engine only where a copy is needed) they are the
     * writers' communicator itself, in the same order, no new communicator */
    for (int i = 0; i < r->lsize; i++)
        skips += r->roles[i] == ROLE_SKIP;
    if (skips == 0) {
        part = r->leaders;
    } else {
        rc = MPI_Comm_split(r->leaders,
                            r->roles[r->lrank] != ROLE_SKIP ? 0 : MPI_UNDEFINED,
                            r->lrank, &part);
        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal("transfer", "building the participants' "
                               "communicator", rc);
    }
    if (part != MPI_COMM_NULL) {
        /* Among the participants, past the lock waits, an MPI wait that
         * long means a peer is gone. Ranks that skip the transfer wait for
         * the whole of it in the final gather: no stall limit for them. */
        sh_guard_stall_ns = r->o.stall_ns;
        phase_transfer(r, part);
        if (part != r->leaders)
            MPI_Comm_free(&part);
    } else {
        r->res.status = SH_NODE_CURRENT;
    }
    sh_dest_release(&r->d);
    gather_results(r);
}
