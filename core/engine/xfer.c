/* stagehand-bcast: the data path (xfer.h, doc/design.md §4): the main
 * thread's MPI progress loop, chain and per-segment broadcast, around the
 * ring of segment buffers and its reader and writer threads (ring.c). */
#include "config.h"
#include "xfer.h"
#include "ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "report.h"
#include "stagehand/log.h"
#include "stagehand/size.h"

/* Tags only have to keep the stream ordered; MPI guarantees MPI_TAG_UB is at
 * least 32767. */
#define SEG_TAG(k) ((int)((k) & 0x7fff))

/* Chain: a receiver posts receives for at most this many segments beyond
 * the last one that arrived. Under Open MPI's rendezvous protocol the bytes
 * of a large message move only once its receive is posted, so this bounds
 * what one hop holds in flight (socket buffers, switch queues) to about
 * CHAIN_WINDOW segments, whatever the ring depth. Without the bound a hop's
 * backlog only grows: a receiver that stalls for a moment lets data pile up
 * in front of it, and with every link at the same rate that backlog is never
 * worked off; each segment then waits behind it at every hop, and the last
 * one reaches the end of an N-node chain (N-1) x backlog / rate late. The
 * ring (pipeline depth) still absorbs the writer's and the reader's jitter.
 * Measured on the test cluster, 8 nodes, 1 GiB, 1 MiB segments, depth 8:
 * window 8 (the old behaviour, = depth) 19.2-19.7 s for the transfer, 2
 * 18.6-19.0 s, 1 20.8 s (the link idles during each hand-shake).
 *
 * Chain sends are synchronous (MPI_Issend): a segment up to the TCP eager
 * limit the engine sets (main.c tcp_eager_defaults) leaves at once, without
 * the rendezvous hand-shake, but its send still completes only when the
 * receiver has matched it. A plain eager send would complete as soon as Open
 * MPI copied it, and a sender faster than its downstream link (fast storage,
 * a slow hop) would queue without bound inside Open MPI; this way a hop
 * holds at most its ring (pipeline depth) of unmatched segments. */
#define CHAIN_WINDOW 2u

/* Back-off of the progress loop when idle (see nap()). */
#define NAP_MIN_US 16u
#define NAP_MAX_US 1000u

/* Progress line on the reader: a bar on a terminal, a line per 10 % else. */
struct progress {
    int on, tty;
    uint64_t start_ns, last_ns;
    unsigned last_decile;
};

static void progress_show(struct progress *p, const struct sh_sched *s,
                          uint64_t segs_done, int final)
{
    uint64_t now = (uint64_t)sh_now_ns();
    uint64_t bytes = segs_done >= s->nseg ? s->size : segs_done * s->segment;
    unsigned pct = s->size == 0 ? 100u : (unsigned)(bytes * 100 / s->size);
    double secs = (double)(now - p->start_ns) / 1e9;
    char done[32], total[32], rate[32];

    if (!p->on || (!final && now - p->last_ns < 250000000ULL))
        return;
    p->last_ns = now;
    sh_format_size(bytes, done, sizeof(done));
    sh_format_size(s->size, total, sizeof(total));
    sh_format_size(secs > 0 ? (uint64_t)((double)bytes / secs) : 0, rate,
                   sizeof(rate));
    if (p->tty) {
        char bar[41];
        unsigned fill = pct * 40 / 100;

        memset(bar, '#', fill);
        memset(bar + fill, ' ', 40 - fill);
        bar[40] = '\0';
        fprintf(stderr, "\r[%s] %3u%% %s / %s  %s/s ", bar, pct, done, total,
                rate);
        if (final)
            fputc('\n', stderr);
    } else if (pct / 10 > p->last_decile || final) {
        p->last_decile = pct / 10;
        fprintf(stderr, "stagehand-bcast: transfer %3u%% %s / %s %s/s\n", pct,
                done, total, rate);
    }
    fflush(stderr);
}

static int mpi_check(int rc, struct sh_xfer_result *res, const char *what,
                     uint64_t k)
{
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return 0;
    MPI_Error_string(rc, err, &len);
    sh_msgf(res->msg, sizeof(res->msg), "MPI %s of segment %llu failed: %s",
             what, (unsigned long long)k, err);
    res->mpi_failed = 1;
    return -1;
}

static void nap(unsigned *idle)
{
    struct timespec ts = { 0, 0 };
    unsigned us;

    /* Open MPI progresses only inside MPI calls, so the loop polls; but each
     * wake-up costs CPU that the writer thread and the TCP stack need
     * (measured on the 2-core test cluster, 8 ranks: fixed 20-50 us naps
     * spent 7.1-7.7 CPU s per 256 MiB, this back-off 4.9 s). Re-poll a few
     * times, then sleep 16 us doubling up to NAP_MAX_US while nothing
     * completes; any progress resets it. Data keeps flowing meanwhile: the
     * kernel's socket buffers hold far more than NAP_MAX_US worth of a link,
     * and at high rates segments complete before the sleeps grow. */
    if (*idle < 4) {
        (*idle)++;
        return;
    }
    us = NAP_MIN_US << (*idle - 4 < 6 ? *idle - 4 : 6);
    if (us > NAP_MAX_US)
        us = NAP_MAX_US;
    (*idle)++;
    ts.tv_nsec = (long)us * 1000;
    nanosleep(&ts, NULL);
}

static int deadline_hit(const struct sh_xfer_cfg *cfg, struct sh_xfer_result *res,
                        uint64_t k, uint64_t nseg, uint64_t last_progress)
{
    uint64_t now = (uint64_t)sh_now_ns();

    /* case F22: a peer that died or a link that stalls shows as a transfer
     * that moves nothing; fail it long before the overall deadline. */
    if (cfg->stall_ns > 0 && now - last_progress >= cfg->stall_ns) {
        int up = -1, down = -1, rank = 0, size = 1;

        MPI_Comm_rank(cfg->comm, &rank);
        MPI_Comm_size(cfg->comm, &size);
        if (rank > 0)
            up = rank - 1;
        if (rank + 1 < size)
            down = rank + 1;
        sh_msgf(res->msg, sizeof(res->msg),
                 "no progress for %llu s at segment %llu of %llu (waiting on "
                 "rank %d upstream / rank %d downstream; -1: none)",
                 (unsigned long long)(cfg->stall_ns / 1000000000ULL),
                 (unsigned long long)k, (unsigned long long)nseg, up, down);
        res->timed_out = 1;
        res->stalled = 1;
        return 1;
    }
    if (now < cfg->deadline_ns)
        return 0;
    sh_msgf(res->msg, sizeof(res->msg),
             "transfer reached segment %llu of %llu",
             (unsigned long long)k, (unsigned long long)nseg);
    res->timed_out = 1;
    return 1;
}

/* Withdraw the receives posted for segments [@from, @to) (slots of @in,
 * a ring of @depth): the reader sends nothing after an error segment. */
static void cancel_receives(MPI_Request *in, unsigned depth, uint64_t from, uint64_t to)
{
    for (uint64_t k = from; k < to; k++) {
        unsigned sl = (unsigned)(k % depth);

        MPI_Cancel(&in[sl]);
        MPI_Wait(&in[sl], MPI_STATUS_IGNORE);
    }
}

/* Advance *@nd over the segments below @upto whose request in @reqs (the
 * ring's sends, or a non-reader's broadcasts) has finished; sets *@moved
 * when one did. Returns 0, or -1 on an MPI error (res says which). */
static int mpi_done(struct sh_ring *r, struct sh_xfer_result *res, MPI_Request *reqs,
                    uint64_t upto, uint64_t *nd, int *moved)
{
    int flag;

    while (*nd < upto) {
        MPI_Request *req = &reqs[*nd % r->depth];

        if (*req != MPI_REQUEST_NULL) {
            if (mpi_check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), res, "send", *nd))
                return -1;
            if (!flag)
                break;
        }
        (*nd)++;
        *moved = 1;
    }
    return 0;
}

/* Main-thread loop, both algorithms. Returns 0 or -1 (res says why). */
static int progress_loop(struct sh_ring *r, struct sh_xfer_result *res)
{
    const struct sh_xfer_cfg *cfg = r->cfg;
    const struct sh_sched *s = r->s;
    int rank, size;
    int chain = cfg->algorithm == SH_ALG_CHAIN;
    MPI_Request *in, *out;
    uint64_t posted = 0;    /* reader: sends/bcasts posted; else receives */
    uint64_t arrived = 0;   /* receivers: data complete for [0, arrived) */
    uint64_t nd = 0;        /* MPI finished for [0, nd) */
    struct progress prog = { 0 };
    unsigned idle = 0;
    uint64_t last_progress = (uint64_t)sh_now_ns(), last_written = 0, last_avail = 0;
    int down, up, rc = 0;

    MPI_Comm_rank(cfg->comm, &rank);
    MPI_Comm_size(cfg->comm, &size);
    down = rank + 1 < size ? rank + 1 : -1;
    up = rank - 1;
    /* MPI_Request is a handle, in Open MPI a pointer. r->depth >= 1 (opts.c
     * checks it); clang's analyzer loses that across pthread_create. */
    in = calloc(r->depth, sizeof(*in));   /* NOLINT(bugprone-sizeof-expression,clang-analyzer-optin.portability.UnixAPI) */
    out = calloc(r->depth, sizeof(*out)); /* NOLINT(bugprone-sizeof-expression,clang-analyzer-optin.portability.UnixAPI) */
    if (in == NULL || out == NULL) {
        sh_msgf(res->msg, sizeof(res->msg), "out of memory");
        res->mpi_failed = 1;
        free(in);
        free(out);
        return -1;
    }
    for (unsigned i = 0; i < r->depth; i++)
        in[i] = out[i] = MPI_REQUEST_NULL;
    prog.on = rank == 0 && cfg->progress;
    prog.tty = isatty(STDERR_FILENO);
    prog.start_ns = (uint64_t)sh_now_ns();

    for (;;) {
        uint64_t avail, limit, written;
        int moved = 0, flag;

        sh_ring_get(r, &avail, &limit, &written);
        if (rank == 0) {
            /* reader: ship every segment the reader thread finished */
            while (posted < avail) {
                unsigned slot = (unsigned)(posted % r->depth);

                if (chain && down >= 0)
                    rc = MPI_Issend(r->buf[slot], sh_sched_count(s, posted),
                                   MPI_BYTE, down, SEG_TAG(posted), cfg->comm,
                                   &out[slot]);
                else if (!chain)
                    rc = MPI_Ibcast(r->buf[slot], sh_sched_count(s, posted),
                                    MPI_BYTE, 0, cfg->comm, &out[slot]);
                if (mpi_check(rc, res, chain ? "send" : "broadcast", posted))
                    goto fail;
                posted++;
                moved = 1;
            }
            arrived = avail;
        } else {
            uint64_t lo = written < nd ? written : nd;

            /* chain: at most CHAIN_WINDOW receives ahead of the stream */
            uint64_t cap = chain ? arrived + CHAIN_WINDOW : UINT64_MAX;

            while (posted < limit && posted < lo + r->depth && posted < cap) {
                unsigned slot = (unsigned)(posted % r->depth);

                if (chain)
                    rc = MPI_Irecv(r->buf[slot], sh_sched_count(s, posted),
                                   MPI_BYTE, up, SEG_TAG(posted), cfg->comm,
                                   &in[slot]);
                else
                    rc = MPI_Ibcast(r->buf[slot], sh_sched_count(s, posted),
                                    MPI_BYTE, 0, cfg->comm, &in[slot]);
                if (mpi_check(rc, res, "receive", posted))
                    goto fail;
                posted++;
                moved = 1;
            }
            /* complete receives in stream order */
            while (arrived < posted) {
                unsigned slot = (unsigned)(arrived % r->depth);
                struct sh_seg_hdr hdr;
                int bad;

                rc = MPI_Test(&in[slot], &flag, MPI_STATUS_IGNORE);
                if (mpi_check(rc, res, "receive", arrived))
                    goto fail;
                if (!flag)
                    break;
                sh_seg_hdr_decode(r->buf[slot] + sh_sched_len(s, arrived), &hdr);
                bad = chain && hdr.status != SH_SEG_OK;
                if (chain && down >= 0) {
                    rc = MPI_Issend(r->buf[slot], sh_sched_count(s, arrived),
                                   MPI_BYTE, down, SEG_TAG(arrived), cfg->comm,
                                   &out[slot]);
                    if (mpi_check(rc, res, "forward", arrived))
                        goto fail;
                }
                arrived++;
                moved = 1;
                sh_ring_set_avail(r, arrived, bad);
                if (bad) {
                    /* the reader sends nothing after an error segment:
                     * withdraw the receives posted beyond it */
                    cancel_receives(in, r->depth, arrived, posted);
                    posted = arrived;
                    limit = arrived;
                    break;
                }
            }
        }
        /* MPI side of a slot is done when its send / collective finished */
        if (mpi_done(r, res, (!chain && rank != 0) ? in : out,
                     rank == 0 ? posted : arrived, &nd, &moved) != 0)
            goto fail;
        if (moved)
            sh_ring_set_net(r, nd);
        progress_show(&prog, s, written < nd ? written : nd, 0);
        sh_ring_get(r, &avail, &limit, &written);
        if (arrived >= limit && nd >= limit && written >= limit &&
            (rank != 0 || avail >= limit))
            break;
        if (moved || written != last_written || avail != last_avail) {
            last_progress = (uint64_t)sh_now_ns();
            last_written = written;
            last_avail = avail;
            sh_guard_touch();
        }
        if (deadline_hit(cfg, res, written < nd ? written : nd, s->nseg, last_progress))
            goto fail;
        if (moved)
            idle = 0;
        else
            nap(&idle);
    }
    progress_show(&prog, s, s->nseg, 1);
    free(in);
    free(out);
    return 0;
fail:
    free(in);
    free(out);
    return -1;
}

int sh_xfer_run(const struct sh_xfer_cfg *cfg, struct sh_xfer_result *res)
{
    struct sh_ring r;
    int rank, rc = -1;

    memset(res, 0, sizeof(*res));
    MPI_Comm_rank(cfg->comm, &rank);
    if (sh_ring_start(&r, cfg, rank) == 0) {
        rc = progress_loop(&r, res);
    } else {
        sh_msgf(res->msg, sizeof(res->msg), "cannot set up the transfer "
                 "(%u buffers of %zu bytes): %s", r.depth, r.bufsize, strerror(errno));
        res->mpi_failed = 1;
    }
    sh_ring_stop(&r, rc != 0);
    res->src_status = r.src_status;
    res->src_err = r.src_err;
    res->src_err_seg = r.src_err_seg;
    res->write_err = r.write_err;
    res->bytes_written = r.bytes_written;
    res->cpu_write_s = (double)r.write_cpu_ns / 1e9;
    res->cpu_read_s = (double)r.read_cpu_ns / 1e9;
    if (rc == 0 && r.src_status == SH_SEG_OK && r.hash_err == 0) {
        res->digest_len = sh_hash_final(r.hash, res->digest);
        if (res->digest_len < 0)
            res->write_err = EIO;
    } else if (rc == 0 && r.hash_err != 0) {
        res->write_err = r.hash_err;
    }
    sh_ring_free(&r);
    return rc;
}
