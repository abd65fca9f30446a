/* Atomic publish of a file under its final name (doc/design.md §4).
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
#include <sys/stat.h>
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
 * parent directories (mode @parent_mode minus the umask, as the calling
 * user) unless @parent_mode is 0, and open the directory (O_RDONLY|
 * O_DIRECTORY|O_CLOEXEC). Existing directories are left as they are.
 * Stores the dirfd (caller closes) and the basename (@namelen bytes).
 * Returns 0, or -1 with errno: EINVAL (not absolute, ends in '/', "." or
 * ".."), ENAMETOOLONG, or the errno of mkdir(2)/open(2) (EACCES, EROFS, ENOTDIR,
 * ENOENT when @parent_mode is 0). */
int sh_publish_open_dir(const char *dst, mode_t parent_mode, int *dirfd,
                        char *name, size_t namelen);

/* The permission bits of a copy of a file with mode @src_mode for a user
 * whose umask is @umask_bits: SRC's rwx bits (never setuid, setgid or
 * sticky) minus the umask; unless @same_group (the copy's group is SRC's),
 * the group bits are the other bits (0664 gives 0644: what everyone may, the
 * copy's group may). A copy is never readable by anyone SRC keeps out
 * (issue 30). Pure. */
mode_t sh_copy_mode(mode_t src_mode, mode_t umask_bits, int same_group);

/* An existing copy (open @fd, its fstat @st) whose permission bits allow more
 * than @want (sh_copy_mode) is chmod'ed to the bits of both. Returns 0 (no
 * change needed), 1 (tightened), or -1 with fchmod(2)'s errno (EPERM: not
 * the owner). */
int sh_publish_tighten(int fd, const struct stat *st, mode_t want);

/* Create the temp file for @name in @dirfd and preallocate @size bytes.
 * @io may be NULL (real syscalls). The file is created 0600 and gets
 * exactly the permission bits @mode (no umask applied: the caller's
 * sh_copy_mode) before any data; when @gid is not (gid_t)-1 it also gets
 * group @gid, or, if the user cannot give it that group, group bits equal
 * to the other bits.
 * On success @p owns the temp file. Returns 0, or -1 with errno:
 * EEXIST/ELOOP (a file or symlink already has the temp name, case F17b),
 * ENOSPC/EDQUOT (fallocate: DST full, case F14), ENAMETOOLONG, or open(2)'s
 * / fchmod(2)'s errno; nothing is left behind on failure. */
int sh_publish_begin(struct sh_publish *p, const struct sh_io_ops *io,
                     int dirfd, const char *name, const char *jobid,
                     const char *host, uint64_t size, mode_t mode, gid_t gid);

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

/* Async-signal-safe: for a process that leaves at once (a signal handler, a
 * watchdog, an exit path that never reaches sh_publish_unlock_remove): when
 * there is no DST @name in @dirfd (not even a link) and the lock file is still
 * the one held on @lockfd, unlink the lock file (stagehand(8): a staging that
 * leaves no DST removes it). Does not close @lockfd (the exit releases the
 * lock). @lockfd or @dirfd < 0, or @name empty: a no-op. */
void sh_publish_signal_unlock_remove(int dirfd, const char *name, int lockfd);

/* Write @len bytes of @buf as file @name in @dirfd with the whole sequence
 * above (used for the metadata sidecar), permission bits exactly @mode.
 * Returns 0 or -1 with errno. */
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

/* Remove the temp files of @name in @dirfd that run @jobid on @host left
 * (sh_publish_tmpname's names, with any pid): what a killed engine of this
 * node leaves (SIGKILL gives it no chance to), removed by the job's agent
 * once every engine of the run has ended. Never follows a link (unlinkat(2)
 * on names read from the directory). Stores the number removed in @removed
 * (may be NULL). Returns 0, or -1 with errno EINVAL/ENAMETOOLONG (a field
 * as for sh_publish_tmpname) or from dup(2)/fdopendir(3)/readdir(3). */
int sh_publish_sweep_run(const struct sh_io_ops *io, int dirfd, const char *name,
                         const char *jobid, const char *host, unsigned *removed);

/* Take the per-DST exclusive lock: flock(2) on ".<name>.lock" in @dirfd
 * (created mode 0600 if missing). Waits at most @timeout_ns nanoseconds
 * (case F03). A lock taken on a file that its previous holder removed
 * meanwhile (sh_publish_unlock_remove) is dropped and taken again on the
 * file that now has the name, so removing the lock file is safe. Stores the
 * lock fd. A lock file that belongs to another user is refused at once,
 * whatever its mode (a file writable by all and held by its owner would make
 * us wait). Returns 0, or -1 with errno = ETIMEDOUT (bound reached), EPERM
 * (another user's file), or open(2)'s / fstat(2)'s errno. */
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

/* The message for a lock file of another user that keeps the caller from
 * locking its DST (issue 30 item 4): "lock file LOCKPATH belongs to OWNER
 * (uid UID), not to you: strerror(@err) (its owner or an administrator must
 * remove it)" into @out (@len bytes, truncated). @owner may be NULL (no
 * user name for @uid). Pure. */
void sh_publish_lock_foreign_text(char *out, size_t len, const char *lockpath,
                                  const char *owner, uid_t uid, int err);

/* After sh_publish_lock() failed with @err for @name in @dirfd (DST's full
 * path @dst): when the lock file exists and belongs to another user, its
 * message (sh_publish_lock_foreign_text, the owner's name from the user
 * database) into @out and 0. Returns -1 otherwise (errno from fstatat(2),
 * or EPERM when the lock file is the caller's own). */
int sh_publish_lock_foreign(int dirfd, const char *name, const char *dst, int err,
                            char *out, size_t len);

#endif
