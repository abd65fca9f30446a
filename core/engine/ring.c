/* stagehand-bcast: the ring of segment buffers and its reader and writer
 * threads (ring.h, doc/design.md §4). No MPI here: only the main thread
 * (xfer.c) calls MPI. */
#include "config.h"
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stagehand/io.h"
#include "stagehand/publish.h"

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

static int slot_free(const struct sh_ring *r, uint64_t k)
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
static void drop_behind(const struct sh_ring *r, const struct sh_io_ops *io,
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
    struct sh_ring *r = arg;
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
    struct sh_ring *r = arg;
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

int sh_ring_start(struct sh_ring *r, const struct sh_xfer_cfg *cfg, int rank)
{
    memset(r, 0, sizeof(*r));
    r->cfg = cfg;
    r->s = &cfg->sched;
    r->depth = cfg->depth;
    r->limit = cfg->sched.nseg;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv_read, NULL);
    pthread_cond_init(&r->cv_write, NULL);
    r->bufsize = sh_sched_len(&cfg->sched, 0) + SH_SEG_HDR_LEN;
    r->buf = calloc(r->depth, sizeof(*r->buf));
    r->slot_seg = malloc(r->depth * sizeof(*r->slot_seg));
    r->hash = sh_hash_new(cfg->hash);
    if (r->buf == NULL || r->slot_seg == NULL || r->hash == NULL)
        return -1;
    for (unsigned i = 0; i < r->depth; i++)
        r->slot_seg[i] = UINT64_MAX;
    for (unsigned i = 0; i < r->depth; i++) {
        void *p = NULL;

        if (posix_memalign(&p, 4096, r->bufsize) != 0)
            return -1;
        r->buf[i] = p;
    }
    if (pthread_create(&r->writer_tid, NULL, writer_main, r) != 0)
        return -1;
    r->have_writer = 1;
    if (rank == 0) {
        unsigned want = cfg->read_ahead == 0 ? 1 : cfg->read_ahead;

        if (want > r->depth)
            want = r->depth;
        for (; r->nreader < want; r->nreader++) {
            if (pthread_create(&r->reader_tid[r->nreader], NULL, reader_main, r) != 0)
                return -1;
        }
    }
    return 0;
}

void sh_ring_stop(struct sh_ring *r, int abort)
{
    pthread_mutex_lock(&r->mu);
    if (abort)
        r->abort = 1;
    pthread_cond_broadcast(&r->cv_read);
    pthread_cond_broadcast(&r->cv_write);
    pthread_mutex_unlock(&r->mu);
    for (unsigned i = 0; i < r->nreader; i++)
        pthread_join(r->reader_tid[i], NULL);
    if (r->have_writer)
        pthread_join(r->writer_tid, NULL);
}

void sh_ring_free(struct sh_ring *r)
{
    sh_hash_free(r->hash);
    if (r->buf != NULL) {
        for (unsigned i = 0; i < r->depth; i++)
            free(r->buf[i]);
        free(r->buf);
    }
    free(r->slot_seg);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_read);
    pthread_cond_destroy(&r->cv_write);
}

void sh_ring_get(struct sh_ring *r, uint64_t *avail, uint64_t *limit, uint64_t *written)
{
    pthread_mutex_lock(&r->mu);
    *avail = r->avail;
    *limit = r->limit;
    *written = r->written;
    pthread_mutex_unlock(&r->mu);
}

void sh_ring_set_net(struct sh_ring *r, uint64_t net_done)
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

void sh_ring_set_avail(struct sh_ring *r, uint64_t avail, int shrink)
{
    pthread_mutex_lock(&r->mu);
    r->avail = avail;
    if (shrink)
        r->limit = avail;
    pthread_cond_signal(&r->cv_write);
    pthread_mutex_unlock(&r->mu);
}
