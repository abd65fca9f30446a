/* Node-local side of a run: lock, pre-check, verify and publish of DST
 * (doc/design.md §4). Runs on each node's writer rank. */
#include "config.h"
#include "dest.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"
#include "stagehand/size.h"
#include "xfer.h"

#define TMPFS_MAGIC_NR 0x01021994
#define STALE_TEMP_AGE_S ((uint64_t)24 * 3600)

/* Whether the tmpfs holding @dirfd allocates huge pages: the super options of
 * its mount in /proc/self/mountinfo (proc(5)) carry huge= other than never.
 * Answers true when that cannot be told (no hint is better than a wrong one). */
static bool tmpfs_huge_pages(int dirfd)
{
    struct statx stx;
    char line[4096];
    bool huge = true;
    FILE *f;

    if (statx(dirfd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0 ||
        !(stx.stx_mask & STATX_MNT_ID))
        return true;
    f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return true;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long id;
        const char *super;

        if (sscanf(line, "%llu", &id) != 1 || id != stx.stx_mnt_id)
            continue;
        super = strstr(line, " - ");
        huge = super != NULL && strstr(super, "huge=") != NULL &&
               strstr(super, "huge=never") == NULL;
        break;
    }
    fclose(f);
    return huge;
}

void sh_vote_error(struct sh_node_vote *v, int err, const char *fmt, ...)
{
    va_list ap;

    v->vote = SH_VOTE_ERROR;
    v->err = err;
    va_start(ap, fmt);
    vsnprintf(v->reason, sizeof(v->reason), fmt, ap);
    va_end(ap);
}

/* Open (creating parents) DST's directory and take the per-DST lock, all
 * writers together (case F03). A lock is tried without waiting; if any node
 * found its lock busy (another run stages this DST there), every node
 * releases its lock, backs off a random 20-200 ms and tries again, so two
 * runs never hold half of each other's locks. Bounded by half the deadline. */
void sh_dest_lock_all(const struct sh_bcast_opts *o, struct sh_dest *d,
                      struct sh_node_vote *v, MPI_Comm leaders)
{
    uint64_t start = (uint64_t)sh_now_ns(), bound = start + o->timeout_ns / 2;
    unsigned seed = (unsigned)getpid() ^ (unsigned)sh_now_ns();
    int waited = 0;

    d->dirfd = d->lockfd = -1;
    d->have_temp = 0;
    d->lock_wait_s = 0;
    d->lock_owner[0] = '\0';
    if (sh_publish_open_dir(o->dest, (mode_t)o->dir_mode, &d->dirfd, d->name,
                            sizeof(d->name)) != 0)
        sh_vote_error(v, errno, "cannot create or open the directory of %s: %s",
                      o->dest, strerror(errno));
    for (;;) {
        int busy = 0, any_busy = 0, rc;
        MPI_Request req;

        if (v->vote != SH_VOTE_ERROR &&
            sh_publish_lock(d->dirfd, d->name, 0, &d->lockfd) != 0) {
            int e = errno;

            if (e == ETIMEDOUT) {
                busy = 1;
                /* whom we wait for: the run whose temp file is there */
                sh_publish_lock_owner(d->dirfd, d->name, d->lock_owner,
                                      sizeof(d->lock_owner));
            } else if (e == ELOOP) {
                char lname[NAME_MAX + 1] = "";

                sh_publish_lockname(d->name, lname, sizeof(lname));
                sh_vote_error(v, e, "the lock file %s next to %s is a symbolic "
                              "link; refusing to follow it (remove it)", lname,
                              o->dest);
            } else if ((e == EACCES || e == EPERM) &&
                       sh_publish_lock_foreign(d->dirfd, d->name, o->dest, e,
                                               v->reason, sizeof(v->reason)) == 0) {
                /* issue 30 item 4: another user's file under the lock's name */
                v->vote = SH_VOTE_ERROR;
                v->err = e;
            } else if (e == EACCES || e == EPERM || e == EROFS)
                sh_vote_error(v, e, "cannot write in the directory of %s "
                              "(its lock file goes there): %s", o->dest,
                              strerror(e));
            else
                sh_vote_error(v, e, "cannot open the lock file next to %s: %s",
                              o->dest, strerror(e));
        }
        rc = MPI_Iallreduce(&busy, &any_busy, 1, MPI_INT, MPI_MAX, leaders, &req);
        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal("pre-check", "MPI_Iallreduce", rc);
        sh_guard_wait(&req, "pre-check", "MPI_Iallreduce");
        if (!any_busy) {
            if (waited)
                d->lock_wait_s = (double)((uint64_t)sh_now_ns() - start) / 1e9;
            return;
        }
        waited = 1;
        sh_publish_unlock(d->lockfd);
        d->lockfd = -1;
        if ((uint64_t)sh_now_ns() >= bound) {
            char lname[NAME_MAX + 1] = "";

            sh_publish_lockname(d->name, lname, sizeof(lname));
            if (busy)
                sh_vote_error(v, ETIMEDOUT, "%s is being staged by another run: "
                              "lock %s still busy after %.0fs", o->dest, lname,
                              (double)o->timeout_ns / 2e9);
            else if (v->vote != SH_VOTE_ERROR)
                v->vote = SH_VOTE_COPY;     /* not checked: the run aborts */
            return;
        }
        {
            struct timespec ts = { 0, (long)(20 + rand_r(&seed) % 180) * 1000000L };

            nanosleep(&ts, NULL);
        }
    }
}

/* DST's digest for sh_meta_dst_current (check=content). */
static int dst_digest(int fd, uint64_t size, enum sh_hash_algo algo, uint8_t *out)
{
    return sh_hash_fd(NULL, fd, size, algo, 8u << 20, out);
}

/* With the lock held: decide whether this node's copy is current; if not,
 * prepare the temp file. Keeps the lock when a copy is needed. */
void sh_dest_precheck(const struct sh_bcast_opts *o, const struct sh_src_id *src,
                      const struct sh_sched *sched, struct sh_dest *d,
                      struct sh_node_vote *v)
{
    struct sh_dst_check c;
    struct stat st;
    struct statvfs vfs;
    struct statfs sfs;
    const char *why = "";
    int have_dst, current;
    unsigned swept = 0;
    int dfd = -1;

    if (v->vote == SH_VOTE_ERROR || d->lockfd < 0)
        return;
    /* case F06: temp files of killed runs of this node */
    if (sh_publish_sweep(NULL, d->dirfd, d->name, sh_guard_host, STALE_TEMP_AGE_S,
                         &swept) == 0 && swept > 0)
        sh_info("pre-check", "removed %u stale temp file(s) of %s", swept,
                o->dest);
    {
        char side[NAME_MAX + 1];

        if (sh_meta_sidecar_name(d->name, side, sizeof(side)) == 0)
            sh_publish_sweep(NULL, d->dirfd, side, sh_guard_host, STALE_TEMP_AGE_S,
                             NULL);
    }

    have_dst = fstatat(d->dirfd, d->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!have_dst && errno != ENOENT) {
        sh_vote_error(v, errno, "cannot stat %s: %s", o->dest, strerror(errno));
        return;
    }
    /* rename(2) cannot replace a directory: refuse before any data moves */
    if (have_dst && S_ISDIR(st.st_mode)) {
        sh_vote_error(v, EISDIR, "%s is a directory; --dest names the file to "
                      "publish (e.g. %s/IMAGE.sqsh)", o->dest, o->dest);
        return;
    }
    if (have_dst && S_ISREG(st.st_mode) && o->check != SH_CHECK_NEVER)
        dfd = openat(d->dirfd, d->name,
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    /* The same decision as the agent's vote (sh_dest_vote), made again here
     * with DST's lock held: another run may have published DST since the
     * nodes voted (case F03: this run then finds it current and moves
     * nothing), and only the engine hashes DST (check=content). */
    c.check = o->check;
    c.src = src;
    c.uid = geteuid();
    c.umask_bits = o->umask_bits;
    c.digest = dst_digest;
    current = sh_meta_dst_current(d->dirfd, d->name, dfd, have_dst ? &st : NULL, &c);
    why = c.why;
    if (c.tightened)
        sh_info("pre-check", "%s: mode %04o made %04o, as strict as the source's", o->dest,
                (unsigned)(st.st_mode & 0777),
                (unsigned)(st.st_mode & sh_copy_mode(src->mode, o->umask_bits,
                                                     st.st_gid == src->gid)));
    if (current) {
        if (dfd >= 0)
            close(dfd);
        v->vote = SH_VOTE_CURRENT;
        sh_msgf(v->reason, sizeof(v->reason), "%s", why);
        if (c.have_rec) {
            v->algo = (uint32_t)c.rec.algo;
            v->digest_len = (int32_t)sh_hash_len(c.rec.algo);
            memcpy(v->digest, c.rec.digest, sizeof(v->digest));
        }
        sh_info("pre-check", "%s is current (%s%s)", o->dest, why,
                c.sidecar ? ", metadata from sidecar" : "");
        sh_publish_unlock(d->lockfd);
        d->lockfd = -1;
        return;
    }
    if (dfd >= 0)
        close(dfd);
    sh_info("pre-check", "%s needs a copy: %s", o->dest, why);

    /* case F15: free space before any data moves */
    if (fstatvfs(d->dirfd, &vfs) == 0) {
        v->free_bytes = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (v->free_bytes < sched->size) {
            char need[32], have[32];

            sh_vote_error(v, ENOSPC, "not enough space for %s: needed %s "
                          "(%llu bytes), free %s (%llu bytes): its filesystem is too "
                          "full", o->dest,
                          sh_format_size(sched->size, need, sizeof(need)),
                          (unsigned long long)sched->size,
                          sh_format_size(v->free_bytes, have, sizeof(have)),
                          (unsigned long long)v->free_bytes);
            return;
        }
    }
    if (fstatfs(d->dirfd, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC_NR) {
        if (tmpfs_huge_pages(d->dirfd))
            sh_info("pre-check", "%s is on tmpfs: the copy uses memory", o->dest);
        else
            sh_info("pre-check", "%s is on tmpfs: the copy uses memory, and preallocating "
                    "it allocates every 4 KiB page (about 0.2-0.3 s of CPU per GiB; a "
                    "tmpfs mounted with huge=within_size allocates 2 MiB pages)", o->dest);
    }
    if (sh_publish_begin(&sh_guard_pub, NULL, d->dirfd, d->name, sh_guard_jobid,
                         sh_guard_host, sched->size,
                         sh_copy_mode(src->mode, o->umask_bits, 1), (gid_t)src->gid) != 0) {
        char need[32];

        if (errno == ENOSPC || errno == EDQUOT)   /* case F14 */
            sh_vote_error(v, errno, "%s is full: cannot preallocate %s: %s",
                          o->dest, sh_format_size(sched->size, need, sizeof(need)),
                          strerror(errno));
        else
            sh_vote_error(v, errno, "cannot create a temp file next to %s: %s",
                          o->dest, strerror(errno));
        return;
    }
    d->have_temp = 1;
    v->vote = SH_VOTE_COPY;
    sh_msgf(v->reason, sizeof(v->reason), "%s", why);
}

/* Is there no DST (nothing under its name, not even a link) on this node? */
static bool dst_absent(const struct sh_dest *d)
{
    struct stat st;

    return fstatat(d->dirfd, d->name, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}

void sh_dest_release(struct sh_dest *d)
{
    if (d->have_temp)
        sh_publish_abort(&sh_guard_pub);
    d->have_temp = 0;
    /* No DST here (the staging failed or was refused): leave no lock file
     * beside the name either, unless another run holds it now. */
    if (d->dirfd >= 0 && dst_absent(d)) {
        if (d->lockfd < 0 && sh_publish_lock(d->dirfd, d->name, 0, &d->lockfd) != 0)
            d->lockfd = -1;
        if (d->lockfd >= 0 && dst_absent(d)) {
            sh_publish_unlock_remove(d->dirfd, d->name, d->lockfd);
            d->lockfd = -1;
        }
    }
    sh_publish_unlock(d->lockfd);
    d->lockfd = -1;
    if (d->dirfd >= 0)
        close(d->dirfd);
    d->dirfd = -1;
}

/* ---- verify + publish (every receiving writer) ------------------------ */

void sh_node_fail(struct sh_node_result *r, const char *phase, int err,
                  int exit_class, const char *fmt, ...)
{
    va_list ap;

    r->status = SH_NODE_FAILED;
    r->err = err;
    r->exit_class = exit_class;
    sh_msgf(r->phase, sizeof(r->phase), "%s", phase);
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
    va_end(ap);
    sh_error(phase, "%s", r->reason);
}

int sh_dest_verify(const struct sh_bcast_opts *o, const struct sh_sched *s,
                   const struct sh_ref_msg *ref, const struct sh_xfer_result *x,
                   struct sh_node_result *r)
{
    struct stat st;

    if (ref->status != SH_SEG_OK) {
        char why[sizeof(r->reason)];

        sh_src_failure_text(o->source, ref->status, ref->err, ref->seg, why, sizeof(why));
        sh_node_fail(r, "transfer", (int)ref->err, SH_EXIT_SOURCE, "%s", why);
        return -1;
    }
    if (x->write_err != 0) {
        sh_node_fail(r, "transfer", x->write_err, SH_EXIT_DEST,
                     "writing the temp file of %s failed: %s", o->dest,
                     strerror(x->write_err));
        return -1;
    }
    if (x->digest_len != ref->digest_len ||
        memcmp(x->digest, ref->digest, (size_t)ref->digest_len) != 0) {
        /* EBADMSG, not EIO: the stream arrived corrupted, which is not
         * this node's own I/O failing (the agent's on_node_fault) */
        sh_node_fail(r, "verify", EBADMSG, SH_EXIT_DEST,
                     "%s digest of the received data differs from the reader's",
                     sh_hash_name(o->hash));
        return -1;
    }
    if (sh_publish_sync(&sh_guard_pub) != 0) {     /* case F07 */
        sh_node_fail(r, "verify", errno, SH_EXIT_DEST, "fsync of the temp file of "
                     "%s failed: %s", o->dest, strerror(errno));
        return -1;
    }
    /* case F05: size always */
    if (fstat(sh_guard_pub.fd, &st) != 0 || (uint64_t)st.st_size != s->size) {
        sh_node_fail(r, "verify", EIO, SH_EXIT_DEST, "temp file of %s has %lld "
                     "bytes, expected %llu", o->dest, (long long)st.st_size,
                     (unsigned long long)s->size);
        return -1;
    }
    if (o->verify == SH_VERIFY_READBACK) {
        uint8_t dig[SH_HASH_MAX_LEN];

        /* drop the cached pages so the read-back comes from the device */
        posix_fadvise(sh_guard_pub.fd, 0, 0, POSIX_FADV_DONTNEED);
        if (sh_hash_fd(NULL, sh_guard_pub.fd, s->size, o->hash, 8u << 20, dig) !=
                ref->digest_len ||
            memcmp(dig, ref->digest, (size_t)ref->digest_len) != 0) {
            sh_node_fail(r, "verify", EIO, SH_EXIT_DEST, "read-back of the temp "
                         "file of %s does not match the source digest", o->dest);
            return -1;
        }
    }
    return 0;
}

int sh_dest_publish(const struct sh_bcast_opts *o, const struct sh_src_id *src,
                    const struct sh_ref_msg *ref, struct sh_dest *d,
                    struct sh_node_result *r, int force_sidecar)
{
    struct sh_meta m;
    struct stat st;
    int use_sidecar = force_sidecar;

    memset(&m, 0, sizeof(m));
    m.version = SH_META_VERSION;
    m.src = *src;
    m.algo = o->hash;
    memcpy(m.digest, ref->digest, sizeof(m.digest));
    if (fstat(sh_guard_pub.fd, &st) != 0) {
        sh_node_fail(r, "publish", errno, SH_EXIT_DEST, "fstat of the temp file "
                     "of %s: %s", o->dest, strerror(errno));
        sh_publish_abort(&sh_guard_pub);
        return -1;
    }
    m.dst_size = (uint64_t)st.st_size;
    m.dst_mtime = sh_ts_from(&st.st_mtim);
    /* the record goes on the temp file, so DST appears with it */
    if (!use_sidecar && sh_meta_store_fd(sh_guard_pub.fd, &m) != 0) {
        if (errno == ENOTSUP || errno == EOPNOTSUPP) {
            sh_info("publish", "no user xattrs on the filesystem of %s: "
                    "metadata goes to a sidecar file", o->dest);
            use_sidecar = 1;
        } else {
            sh_warn("publish", "cannot record metadata on %s (%s): the next "
                    "run will copy it again", o->dest, strerror(errno));
        }
    }
    if (!use_sidecar && sh_publish_sync(&sh_guard_pub) != 0) {
        sh_node_fail(r, "publish", errno, SH_EXIT_DEST, "fsync of the temp file "
                     "of %s failed: %s", o->dest, strerror(errno));
        return -1;
    }
    if (sh_publish_commit(&sh_guard_pub) != 0) {
        sh_node_fail(r, "publish", errno, SH_EXIT_DEST, "cannot rename the temp "
                     "file to %s: %s", o->dest, strerror(errno));
        return -1;
    }
    d->have_temp = 0;
    if (use_sidecar) {
        if (sh_meta_store_sidecar(NULL, d->dirfd, d->name, sh_guard_jobid, sh_guard_host,
                                  &m) != 0)
            sh_warn("publish", "cannot write the metadata sidecar of %s (%s): "
                    "the next run will copy it again", o->dest, strerror(errno));
        r->meta_sidecar = 1;
    } else if (sh_meta_remove_sidecar(d->dirfd, d->name) != 0) {
        sh_warn("publish", "cannot remove the stale metadata sidecar of %s: %s",
                o->dest, strerror(errno));
    }
    return 0;
}

