/* stagehand-bcast: the data path, reader threads, chain and per-segment broadcast (xfer.h,
 * doc/design.md §4). */
#include "config.h"
#include "xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "report.h"
#include "stagehand/io.h"
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

/* State shared by the three threads; every field below the mutex is guarded
 * by it. Segment k lives in slot k % depth; the slot is reusable once the
 * writer consumed k and the MPI side (forward send / collective) finished.
 *
 * Each kind of thread sleeps on a condition of its own and is woken only
 * when what it waits for changed: the reader threads when a slot frees
 * (cv_read), the writer when data arrived (cv_write); the main thread polls
 * and never sleeps on either. One shared condition woken by broadcast made
 * every segment wake all --read-ahead readers and the writer, most of them
 * only to sleep again, and a wake-up costs a context switch on each side
 * (bench/results/fabric-cpu-2026-12-06.md). */
struct ring {
    const struct sh_xfer_cfg *cfg;
    const struct sh_sched *s;
    unsigned depth;
    unsigned char **buf;

    pthread_mutex_t mu;
    pthread_cond_t cv_read;     /* readers: a slot may have freed, or stop */
    pthread_cond_t cv_write;    /* writer: avail or limit moved, or stop */
    uint64_t limit;         /* segments that will flow (chain: shrinks on error) */
    uint64_t avail;         /* data present for segments [0, avail) */
    uint64_t written;       /* writer consumed [0, written) */
    uint64_t net_done;      /* MPI finished with [0, net_done) */
    uint64_t next_read;     /* readers: next segment to claim */
    uint64_t *slot_seg;     /* readers: segment whose read completed in each
                             * slot (UINT64_MAX: none yet) */
    uint64_t dropped;       /* readers: SRC's pages of [0, dropped) were
                             * dropped from the page cache */
    int src_failed;         /* reader thread hit a source error */
    int abort;

    uint64_t read_cpu_ns;   /* readers: their CPU time, summed at exit */

    /* writer thread only (read by the main thread after join) */
    struct sh_hash *hash;
    int write_err;
    int hash_err;
    uint32_t src_status, src_err;
    uint64_t src_err_seg;
    uint64_t bytes_written;
    uint64_t write_cpu_ns;
};

/* CPU time of the calling thread (clock_gettime(2) CLOCK_THREAD_CPUTIME_ID),
 * ns; 0 if it cannot be read. Each thread of the data path reports its own,
 * so the report can tell writing DST from reading SRC and from the MPI side. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int slot_free(const struct ring *r, uint64_t k)
{
    uint64_t m = r->written < r->net_done ? r->written : r->net_done;

    return k < m + r->depth;
}

/* Drop SRC's pages of segments [lo, hi) from the reader's page cache
 * (posix_fadvise(2) DONTNEED; advisory, errors do not matter). The reader
 * never reads these bytes again; kept, staging S bytes would leave S of SRC
 * cached on the reader node next to the S of DST, and a FUSE source opened
 * without caching (sshfs -o cache=no) invalidates them all at the next open:
 * measured 0.15-0.6 s per GiB inside open(2) of the next run on the test
 * cluster. */
static void drop_behind(const struct ring *r, const struct sh_io_ops *io,
                        uint64_t lo, uint64_t hi)
{
    const struct sh_sched *s = r->s;
    uint64_t off, end;

    if (lo >= hi)
        return;
    off = sh_sched_offset(s, lo);
    end = sh_sched_offset(s, hi - 1) + sh_sched_len(s, hi - 1);
    (void)io->fadvise(r->cfg->src_fd, (off_t)off, (off_t)(end - off),
                      POSIX_FADV_DONTNEED);
}

/* Reader threads (rank 0): each claims the next segment, reads it into its
 * slot without the lock, and publishes it; avail advances over the segments
 * complete in order. Several reads in flight keep a network filesystem busy
 * while one read waits for its round trip (measured on the test cluster's
 * sshfs storage: one read at a time forwarded 48 MB/s, four 59 MB/s on a
 * 60 MB/s link; bench/results).
 *
 * Pages are dropped only behind avail, never for a segment read out of
 * order: a thread still reading an earlier segment makes the kernel read
 * ahead past its end (read_ahead_kb, 256 KiB on the test cluster's sshfs) into
 * the next segments, and pages dropped there before that happens are read
 * from the storage a second time. Dropping each segment as soon as its own
 * read ended did exactly that: 0.25-1.6 MB more storage traffic per staging,
 * in 256 KiB steps, at random (bench/results/run-2026-12-01T1339Z.csv).
 * Behind avail no read is in flight, and read-ahead only goes forward. */
static void *reader_main(void *arg)
{
    struct ring *r = arg;
    const struct sh_sched *s = r->s;
    const struct sh_io_ops *io = r->cfg->io != NULL ? r->cfg->io : sh_io_default();

    for (;;) {
        struct sh_seg_hdr hdr = { SH_SEG_OK, 0, 0 };
        unsigned char *b;
        uint64_t k, lo, hi, before;
        size_t len;
        int failed;

        pthread_mutex_lock(&r->mu);
        while (!r->abort && r->next_read < r->limit && !slot_free(r, r->next_read))
            pthread_cond_wait(&r->cv_read, &r->mu);
        if (r->abort || r->next_read >= r->limit) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        k = r->next_read++;
        failed = r->src_failed;
        pthread_mutex_unlock(&r->mu);

        hdr.index = k;
        b = r->buf[k % r->depth];
        len = sh_sched_len(s, k);
        if (failed) {
            /* bcast mode only: the collectives must still match, the payload
             * is marked bad and never read */
            hdr.status = SH_SEG_READ_ERROR;
        } else {
            ssize_t n = sh_io_pread_full(io, r->cfg->src_fd, b, len,
                                         sh_sched_offset(s, k));

            if (n < 0) {
                hdr.status = SH_SEG_READ_ERROR;     /* case F29 */
                hdr.err = (uint32_t)errno;
            } else if ((size_t)n != len) {
                hdr.status = SH_SEG_SHORT_SOURCE;
            }
        }
        sh_seg_hdr_encode(&hdr, b + len);

        pthread_mutex_lock(&r->mu);
        if (hdr.status != SH_SEG_OK) {
            r->src_failed = 1;
            /* chain: nothing after the first bad segment flows */
            if (r->cfg->algorithm == SH_ALG_CHAIN && k + 1 < r->limit) {
                r->limit = k + 1;
                pthread_cond_broadcast(&r->cv_read);
                pthread_cond_signal(&r->cv_write);
            }
        }
        r->slot_seg[k % r->depth] = k;
        before = r->avail;
        while (r->avail < r->limit && r->slot_seg[r->avail % r->depth] == r->avail)
            r->avail++;
        if (r->avail != before)
            pthread_cond_signal(&r->cv_write);
        lo = r->dropped;
        hi = r->src_failed ? lo : r->avail;
        r->dropped = hi;
        pthread_mutex_unlock(&r->mu);
        drop_behind(r, io, lo, hi);
    }
    pthread_mutex_lock(&r->mu);
    r->read_cpu_ns += thread_cpu_ns();
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void *writer_main(void *arg)
{
    struct ring *r = arg;
    const struct sh_sched *s = r->s;
    struct sh_publish *pub = r->cfg->pub;

    for (uint64_t k = 0; ; k++) {
        struct sh_seg_hdr hdr;
        unsigned char *b;
        size_t len;

        pthread_mutex_lock(&r->mu);
        while (!r->abort && k < r->limit && k >= r->avail)
            pthread_cond_wait(&r->cv_write, &r->mu);
        if (r->abort || k >= r->limit) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        pthread_mutex_unlock(&r->mu);

        b = r->buf[k % r->depth];
        len = sh_sched_len(s, k);
        sh_seg_hdr_decode(b + len, &hdr);
        if (hdr.status == SH_SEG_OK && hdr.index != k) {
            hdr.status = SH_SEG_READ_ERROR;     /* stream out of order */
            hdr.err = EPROTO;
        }
        if (hdr.status != SH_SEG_OK) {
            if (r->src_status == SH_SEG_OK) {
                r->src_status = hdr.status;
                r->src_err = hdr.err;
                r->src_err_seg = k;
            }
        } else if (r->src_status == SH_SEG_OK) {
            if (sh_hash_update(r->hash, b, len) != 0)
                r->hash_err = errno;
            if (pub != NULL && r->write_err == 0) {
                /* keep consuming after a local failure: the chain must
                 * go on forwarding to the other nodes */
                if (sh_publish_write(pub, b, len, sh_sched_offset(s, k)) != 0)
                    r->write_err = errno;
                else
                    r->bytes_written += len;
            }
        }

        pthread_mutex_lock(&r->mu);
        r->written = k + 1;
        /* frees at most the one slot of segment k: one reader can use it */
        if (r->written <= r->net_done)
            pthread_cond_signal(&r->cv_read);
        pthread_mutex_unlock(&r->mu);
    }
    r->write_cpu_ns = thread_cpu_ns();
    return NULL;
}

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

static void ring_get(struct ring *r, uint64_t *avail, uint64_t *limit,
                     uint64_t *written)
{
    pthread_mutex_lock(&r->mu);
    *avail = r->avail;
    *limit = r->limit;
    *written = r->written;
    pthread_mutex_unlock(&r->mu);
}

static void ring_set_net(struct ring *r, uint64_t net_done)
{
    uint64_t was, now;

    pthread_mutex_lock(&r->mu);
    /* slots reusable before and after: wake a reader per freed slot */
    was = r->written < r->net_done ? r->written : r->net_done;
    r->net_done = net_done;
    now = r->written < r->net_done ? r->written : r->net_done;
    if (now == was + 1)
        pthread_cond_signal(&r->cv_read);
    else if (now > was)
        pthread_cond_broadcast(&r->cv_read);
    pthread_mutex_unlock(&r->mu);
}

static void ring_set_avail(struct ring *r, uint64_t avail, int shrink)
{
    pthread_mutex_lock(&r->mu);
    r->avail = avail;
    if (shrink)
        r->limit = avail;
    pthread_cond_signal(&r->cv_write);
    pthread_mutex_unlock(&r->mu);
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
static int mpi_done(struct ring *r, struct sh_xfer_result *res, MPI_Request *reqs,
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
static int progress_loop(struct ring *r, struct sh_xfer_result *res)
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

        ring_get(r, &avail, &limit, &written);
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
                ring_set_avail(r, arrived, bad);
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
            ring_set_net(r, nd);
        progress_show(&prog, s, written < nd ? written : nd, 0);
        ring_get(r, &avail, &limit, &written);
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
    struct ring r;
    pthread_t reader_tid[SH_BCAST_MAX_DEPTH], writer_tid;
    unsigned nreader = 0;
    int have_writer = 0;
    int rank, rc = -1;
    size_t bufsize;

    memset(res, 0, sizeof(*res));
    memset(&r, 0, sizeof(r));
    MPI_Comm_rank(cfg->comm, &rank);
    r.cfg = cfg;
    r.s = &cfg->sched;
    r.depth = cfg->depth;
    r.limit = cfg->sched.nseg;
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv_read, NULL);
    pthread_cond_init(&r.cv_write, NULL);
    bufsize = sh_sched_len(&cfg->sched, 0) + SH_SEG_HDR_LEN;
    r.buf = calloc(r.depth, sizeof(*r.buf));
    r.slot_seg = malloc(r.depth * sizeof(*r.slot_seg));
    r.hash = sh_hash_new(cfg->hash);
    if (r.buf == NULL || r.slot_seg == NULL || r.hash == NULL)
        goto oom;
    for (unsigned i = 0; i < r.depth; i++)
        r.slot_seg[i] = UINT64_MAX;
    for (unsigned i = 0; i < r.depth; i++) {
        void *p = NULL;

        if (posix_memalign(&p, 4096, bufsize) != 0)
            goto oom;
        r.buf[i] = p;
    }
    if (pthread_create(&writer_tid, NULL, writer_main, &r) != 0)
        goto oom;
    have_writer = 1;
    if (rank == 0) {
        unsigned want = cfg->read_ahead == 0 ? 1 : cfg->read_ahead;

        if (want > r.depth)
            want = r.depth;
        for (; nreader < want; nreader++) {
            if (pthread_create(&reader_tid[nreader], NULL, reader_main, &r) != 0)
                goto oom;
        }
    }
    rc = progress_loop(&r, res);
    goto join;
oom:
    sh_msgf(res->msg, sizeof(res->msg), "cannot set up the transfer "
             "(%u buffers of %zu bytes): %s", r.depth, bufsize, strerror(errno));
    res->mpi_failed = 1;
join:
    pthread_mutex_lock(&r.mu);
    if (rc != 0)
        r.abort = 1;
    pthread_cond_broadcast(&r.cv_read);
    pthread_cond_broadcast(&r.cv_write);
    pthread_mutex_unlock(&r.mu);
    for (unsigned i = 0; i < nreader; i++)
        pthread_join(reader_tid[i], NULL);
    if (have_writer)
        pthread_join(writer_tid, NULL);
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
    sh_hash_free(r.hash);
    if (r.buf != NULL) {
        for (unsigned i = 0; i < r.depth; i++)
            free(r.buf[i]);
        free(r.buf);
    }
    free(r.slot_seg);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv_read);
    pthread_cond_destroy(&r.cv_write);
    return rc;
}
