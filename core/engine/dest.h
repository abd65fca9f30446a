/* Node-local side of a run, on each node's writer rank: per-DST lock,
 * "current" decision and temp file (pre-check), verification and atomic
 * publish (doc/design.md §4). */
#ifndef STAGEHAND_ENGINE_DEST_H
#define STAGEHAND_ENGINE_DEST_H

#include <limits.h>
#include <mpi.h>
#include <stdint.h>

#include "opts.h"
#include "report.h"
#include "stagehand/meta.h"
#include "segment.h"
#include "xfer.h"

struct sh_dest {
    int dirfd;                      /* DST's directory */
    int lockfd;                     /* per-DST lock, -1 when not held */
    char name[NAME_MAX + 1];        /* DST basename */
    int have_temp;                  /* sh_guard_pub holds a temp file */
    double lock_wait_s;             /* seconds spent waiting for another run's
                                     * lock on DST (the same on every node) */
    char lock_owner[96];            /* who held it, from its temp file's
                                     * name ("job 57 on n1"), "" if unknown */
};

/* Reference broadcast by the reader after the transfer. */
struct sh_ref_msg {
    uint32_t status;        /* SH_SEG_* or SH_SRC_CHANGED */
    uint32_t err;
    uint64_t seg;           /* segment of the source error */
    int32_t digest_len;
    uint32_t pad;
    uint8_t digest[SH_HASH_MAX_LEN];    /* digest of what the reader read */
};

/* Record a pre-check failure in @v (vote SH_VOTE_ERROR). */
void sh_vote_error(struct sh_node_vote *v, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a node failure in @r and log it. */
void sh_node_fail(struct sh_node_result *r, const char *phase, int err,
                  int exit_class, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Collective over @leaders: open DST's directory (creating parents) and take
 * every node's DST lock without deadlock between concurrent runs (case F03).
 * Failures go into @v. */
void sh_dest_lock_all(const struct sh_bcast_opts *o, struct sh_dest *d,
                      struct sh_node_vote *v, MPI_Comm leaders);
/* With the lock: sweep stale temps (F06), decide "current", check free space
 * (F15), create and preallocate the temp file (F14). Fills @v. */
void sh_dest_precheck(const struct sh_bcast_opts *o, const struct sh_src_id *src,
                      const struct sh_sched *sched, struct sh_dest *d,
                      struct sh_node_vote *v);
/* Remove the temp file if any, release the lock, close the directory. When
 * DST does not exist (a failed or refused staging), its lock file is removed
 * too, if no other run holds it. */
void sh_dest_release(struct sh_dest *d);
/* After the transfer: source status, local write errors, digest against the
 * reader's, fsync, size (F05), optional read-back. Returns 0 or -1 (@r
 * filled). */
int sh_dest_verify(const struct sh_bcast_opts *o, const struct sh_sched *s,
                   const struct sh_ref_msg *ref, const struct sh_xfer_result *x,
                   struct sh_node_result *r);
/* Metadata record, rename over DST, fsync(dir), sidecar when there are no
 * user xattrs or @force_sidecar. Returns 0 or -1 (@r filled). */
int sh_dest_publish(const struct sh_bcast_opts *o, const struct sh_src_id *src,
                    const struct sh_ref_msg *ref, struct sh_dest *d,
                    struct sh_node_result *r, int force_sidecar);

#endif
