/* The data path of stagehand-bcast (doc/design.md §4): reader threads on the
 * reader rank (--read-ahead of them), one writer+hash thread on every
 * participant and the MPI progress loop on the main thread, around a bounded
 * ring of segment buffers.
 * Only the main thread calls MPI (MPI_THREAD_FUNNELED). */
#ifndef STAGEHAND_ENGINE_XFER_H
#define STAGEHAND_ENGINE_XFER_H

#include <mpi.h>
#include <stdint.h>

#include "opts.h"
#include "stagehand/clock.h"
#include "stagehand/hash.h"
#include "stagehand/io.h"
#include "stagehand/publish.h"
#include "segment.h"

struct sh_xfer_cfg {
    MPI_Comm comm;              /* participants only; rank 0 is the reader */
    enum sh_algorithm algorithm;
    struct sh_sched sched;      /* from the reader's (size, segment) */
    unsigned depth;             /* ring buffers */
    unsigned read_ahead;        /* reader: segments read from SRC at once,
                                 * 1..depth (0 means 1) */
    enum sh_hash_algo hash;
    int src_fd;                 /* reader: SRC, opened as the user; else -1 */
    const struct sh_io_ops *io; /* reader: pread(2) and posix_fadvise(2) of
                                 * SRC; NULL: the real calls (a unit-test
                                 * seam, tests/unit/check_xfer.c) */
    struct sh_publish *pub;     /* temp file to write, or NULL (reader whose
                                 * copy is current) */
    uint64_t deadline_ns;       /* CLOCK_MONOTONIC, absolute */
    uint64_t stall_ns;          /* no progress for this long fails; 0: off */
    int progress;               /* reader: report progress on stderr */
};

struct sh_xfer_result {
    uint32_t src_status;        /* SH_SEG_* of the first bad segment */
    uint32_t src_err;           /* its errno */
    uint64_t src_err_seg;
    int write_err;              /* errno of the first local write failure */
    int mpi_failed;             /* MPI error (message in msg) */
    int timed_out;              /* deadline reached (message in msg) */
    int stalled;                /* ... by the stall limit, not the deadline */
    char msg[256];
    uint8_t digest[SH_HASH_MAX_LEN];    /* digest of the stream, if complete */
    int digest_len;
    uint64_t bytes_written;
    double cpu_write_s;         /* CPU seconds of the writer thread */
    double cpu_read_s;          /* CPU seconds of the reader threads, summed */
};

/* Run the transfer. Returns 0 when the whole stream went through this rank
 * (check res->src_status and res->write_err), -1 on MPI failure or deadline
 * (res->mpi_failed / res->timed_out). */
int sh_xfer_run(const struct sh_xfer_cfg *cfg, struct sh_xfer_result *res);

#endif
