/* Atomic publish of a file under its final name (DESIGN.md §4).
 *
 * Sequence: unique temp name in DST's directory
 * (.<dstname>.stage.<jobid>.<host>.<pid>.tmp) created with
 * openat(O_CREAT|O_EXCL|O_NOFOLLOW) → fallocate (skipped on EOPNOTSUPP;
 * ENOSPC is an early error, case F14) → write → fsync → (caller verifies) →
 * renameat → fsync(dir) (case F07). An existing DST is never truncated or
 * rewritten: rename replaces it, so running mounts keep the old inode
 * (case F29). Every failing step removes the temp file before returning.
 *
 * Also: the per-DST lock (case F03) and the sweep of stale temp files left by
 * killed runs (case F06). */
#ifndef STAGEHAND_PUBLISH_H
#define STAGEHAND_PUBLISH_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/io.h"

struct sh_publish {
    const struct sh_io_ops *io;
    int dirfd;                      /* DST's directory (borrowed, not closed) */
    char name[NAME_MAX + 1];        /* DST basename */
    char tmpname[NAME_MAX + 1];     /* temp basename */
    int fd;                         /* temp file, O_RDWR; -1 when none */
    uint64_t size;                  /* bytes the caller will write */
    volatile sig_atomic_t tmp_live; /* temp may exist: signal handlers unlink */
};

/* Build the temp basename ".<name>.stage.<jobid>.<host>.<pid>.tmp" into @out
 * (@len bytes). '/' and '.' in @jobid and '/' in @host are replaced by '_'
 * so the fields stay parseable. Returns 0, or -1 with errno = ENAMETOOLONG
 * (result longer than NAME_MAX or @len) or EINVAL (empty field). */
int sh_publish_tmpname(const char *name, const char *jobid, const char *host,
                       pid_t pid, char *out, size_t len);

/* Split absolute path @dst into its directory and basename, create missing
 * parent directories (mode 0755 minus umask, as the calling user) when
 * @create_parents, and open the directory (O_RDONLY|O_DIRECTORY|O_CLOEXEC).
 * Stores the dirfd (caller closes) and the basename (@namelen bytes).
 * Returns 0, or -1 with errno: EINVAL (not absolute, ends in '/', "." or
 * ".."), ENAMETOOLONG, or the errno of mkdir(2)/open(2) (EACCES, EROFS, ENOTDIR,
 * ENOENT when !create_parents). */
int sh_publish_open_dir(const char *dst, int create_parents, int *dirfd,
                        char *name, size_t namelen);

/* Create the temp file for @name in @dirfd and preallocate @size bytes.
 * @io may be NULL (real syscalls). @mode is the creation mode (umask
 * applies). On success @p owns the temp file. Returns 0, or -1 with errno:
 * EEXIST/ELOOP (a file or symlink already has the temp name, case F17b),
 * ENOSPC/EDQUOT (fallocate: DST full, case F14), ENAMETOOLONG, or open(2)'s
 * errno; nothing is left behind on failure. */
int sh_publish_begin(struct sh_publish *p, const struct sh_io_ops *io,
                     int dirfd, const char *name, const char *jobid,
                     const char *host, uint64_t size, mode_t mode);

/* Write @len bytes at byte offset @off of the temp file (loop-until-done,
 * case F11). On failure the temp file is removed. Returns 0 or -1 with
 * pwrite(2)'s errno (ENOSPC, EIO, ...), or EBADF after a failed step. */
int sh_publish_write(struct sh_publish *p, const void *buf, size_t len,
                     uint64_t off);

/* fsync(2) the temp file. On failure the temp file is removed (case F07).
 * Returns 0 or -1 with fsync's errno. */
int sh_publish_sync(struct sh_publish *p);

/* renameat(2) the temp file over DST, then fsync(2) the directory. Call after
 * sh_publish_sync() and the caller's verification. On rename failure the temp
 * file is removed and DST is untouched; on directory fsync failure DST is in
 * place but may not survive a power loss, so -1 is returned too. Returns 0 or
 * -1 with errno (EXDEV, EACCES, EIO, ...). Closes the temp fd either way. */
int sh_publish_commit(struct sh_publish *p);

/* Close and unlink the temp file, if any. Idempotent; keeps errno. */
void sh_publish_abort(struct sh_publish *p);

/* Async-signal-safe: unlink the temp file (real unlinkat(2), no ops seam)
 * from a signal handler or watchdog (case F06). Does not close. */
void sh_publish_signal_cleanup(struct sh_publish *p);

/* Write @len bytes of @buf as file @name in @dirfd with the whole sequence
 * above (used for the metadata sidecar). Returns 0 or -1 with errno. */
int sh_publish_buffer(const struct sh_io_ops *io, int dirfd, const char *name,
                      const char *jobid, const char *host, const void *buf,
                      size_t len, mode_t mode);

/* Remove stale temp files of @name (".<name>.stage.*.tmp")
 * in @dirfd: those created on @host (the caller holds the
 * DST lock, so no live run of this host owns one, case F06) and those of any
 * host older than @max_age_s seconds. Stores the number removed in @removed
 * (may be NULL). Returns 0 or -1 with errno from dup(2)/fdopendir(3)/
 * readdir(3), the same directory walk as sh_publish_lock_owner. */
int sh_publish_sweep(const struct sh_io_ops *io, int dirfd, const char *name,
                     const char *host, uint64_t max_age_s, unsigned *removed);

/* Take the per-DST exclusive lock: flock(2) on ".<name>.lock" in @dirfd
 * (created mode 0600 if missing). Waits at most @timeout_ns nanoseconds
 * (case F03). A lock taken on a file that its previous holder removed
 * meanwhile (sh_publish_unlock_remove) is dropped and taken again on the
 * file that now has the name, so removing the lock file is safe. Stores the
 * lock fd. Returns 0, or -1 with errno = ETIMEDOUT (bound reached), or
 * open(2)'s / fstat(2)'s errno. */
int sh_publish_lock(int dirfd, const char *name, uint64_t timeout_ns,
                    int *lockfd);
/* Release a lock taken with sh_publish_lock (closes the fd; fd < 0 no-op). */
void sh_publish_unlock(int lockfd);
/* Release the lock of @name in @dirfd held on @lockfd and remove its lock
 * file first, for a run that leaves no DST behind (a failed staging): the
 * file goes only while it is still the one locked. @lockfd < 0 is a no-op.
 * Returns 0, or -1 with errno from unlinkat(2) (the lock is released
 * either way). */
int sh_publish_unlock_remove(int dirfd, const char *name, int lockfd);

/* Who holds the lock of @name in @dirfd, for a run that finds it busy: the
 * run whose temp file for @name (sh_publish_tmpname) is there, written to in
 * the last 60 s (older ones are dead runs'), the newest if several, as
 * "job <jobid> on <host>" into @out (@len bytes, truncated, NUL-terminated).
 * Nothing is written for this: a run that copies has its temp file beside
 * DST. Returns 0, or -1 with errno ENODATA (no temp file: the holder is still
 * deciding, or found its copy current), EINVAL (@len 0) or from dup(2)/
 * fdopendir(3)/readdir(3). Advisory: the holder may have changed by the time
 * the caller prints it. */
int sh_publish_lock_owner(int dirfd, const char *name, char *out, size_t len);

/* Name of the lock file for @name (".<name>.lock") into @out (@len bytes).
 * Returns 0 or -1 with errno = ENAMETOOLONG. */
int sh_publish_lockname(const char *name, char *out, size_t len);

#endif
