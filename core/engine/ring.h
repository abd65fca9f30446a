/* The ring of segment buffers of stagehand-bcast's data path (xfer.h,
 * doc/design.md §4) and its threads: the reader threads on the reader rank
 * (--read-ahead of them) fill slots from SRC, the writer+hash thread on every
 * participant drains them into DST. The main thread (xfer.c's progress loop,
 * the only one that calls MPI: MPI_THREAD_FUNNELED) moves data between the
 * ring and the network and talks to the threads only through
 * sh_ring_get/sh_ring_set_net/sh_ring_set_avail. Nothing in ring.c calls
 * MPI. */
#ifndef STAGEHAND_ENGINE_RING_H
#define STAGEHAND_ENGINE_RING_H

#include <pthread.h>
#include <stdint.h>

#include "opts.h"
#include "segment.h"
#include "stagehand/hash.h"
#include "xfer.h"

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
struct sh_ring {
    const struct sh_xfer_cfg *cfg;
    const struct sh_sched *s;
    unsigned depth;
    unsigned char **buf;
    size_t bufsize;             /* bytes of each buffer: a segment and its header */

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

    /* the threads (sh_ring_start, sh_ring_stop) */
    pthread_t reader_tid[SH_BCAST_MAX_DEPTH], writer_tid;
    unsigned nreader;
    int have_writer;
};

/* Set up @r (the caller's, any content) for the transfer @cfg (which must
 * outlive @r) and start its threads: the writer, and on @rank 0 the
 * readers (cfg->read_ahead of them, 0 meaning 1, at most cfg->depth).
 * cfg->depth buffers of sh_sched_len(segment 0) + SH_SEG_HDR_LEN bytes,
 * 4 KiB-aligned. Returns 0, or -1 when a buffer or a thread could not be
 * had (errno as the failed call left it: ENOMEM from the allocations; a
 * failed pthread_create(3) or posix_memalign(3) sets none). Either way
 * call sh_ring_stop, then sh_ring_free. */
int sh_ring_start(struct sh_ring *r, const struct sh_xfer_cfg *cfg, int rank);
/* Wake @r's threads and join them; @abort: stop now (the transfer failed),
 * else they end once the segments up to the limit are through. */
void sh_ring_stop(struct sh_ring *r, int abort);
/* Free what sh_ring_start allocated (after sh_ring_stop). */
void sh_ring_free(struct sh_ring *r);

/* The main thread's view, under the lock: data present for [0, *@avail),
 * the segments that will flow [0, *@limit), written by the writer
 * [0, *@written). */
void sh_ring_get(struct sh_ring *r, uint64_t *avail, uint64_t *limit, uint64_t *written);
/* MPI has finished with segments [0, @net_done): their slots may be reused
 * once written (a reader is woken per freed slot). */
void sh_ring_set_net(struct sh_ring *r, uint64_t net_done);
/* A receiver: data present for [0, @avail) (the writer is woken); @shrink:
 * nothing flows beyond it (a chain's error segment). */
void sh_ring_set_avail(struct sh_ring *r, uint64_t avail, int shrink);

#endif
