/* I/O ops seam and loop-until-done helpers.
 *
 * Every syscall that a test needs to fail (read, write, fsync, fallocate,
 * rename, ...) goes through a struct sh_io_ops, so unit tests can inject EINTR,
 * short counts, ENOSPC, EIO or EXDEV. Production code
 * passes NULL or sh_io_default(), which maps straight to the syscalls. */
#ifndef STAGEHAND_IO_H
#define STAGEHAND_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* One function pointer per syscall, with the syscall's own signature and
 * errno convention (see the man page of the same name). */
struct sh_io_ops {
    int (*openat)(int dirfd, const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*pread)(int fd, void *buf, size_t len, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
    int (*fsync)(int fd);
    int (*fallocate)(int fd, int mode, off_t off, off_t len);
    int (*fstat)(int fd, struct stat *st);
    int (*renameat)(int olddirfd, const char *oldpath, int newdirfd,
                    const char *newpath);
    int (*unlinkat)(int dirfd, const char *path, int flags);
    /* posix_fadvise(2): returns 0 or an errno value (not -1) */
    int (*fadvise)(int fd, off_t off, off_t len, int advice);
};

/* The real syscalls. Never NULL; the struct is static and read-only. */
const struct sh_io_ops *sh_io_default(void);

/* Largest count passed to one read/write call: Linux transfers at most
 * 0x7ffff000 bytes per call (read(2) NOTES), larger requests just come back
 * short. */
#define SH_IO_MAX_CHUNK ((size_t)0x7ffff000)

/* Read up to @len bytes at byte offset @off into @buf with pread(2), looping
 * over short counts and EINTR (case F11). Returns the number of bytes read,
 * which is smaller than @len only at end of file, or -1 with errno from
 * pread(2) (EIO, EBADF, ...). @io may be NULL (real syscalls). */
ssize_t sh_io_pread_full(const struct sh_io_ops *io, int fd, void *buf,
                         size_t len, uint64_t off);

/* Write exactly @len bytes from @buf at byte offset @off with pwrite(2),
 * looping over short counts and EINTR (case F11). Returns 0, or -1 with errno
 * from pwrite(2) (ENOSPC, EIO, EDQUOT, ...); a call that writes 0 bytes for a
 * non-empty request is reported as EIO. @io may be NULL. */
int sh_io_pwrite_full(const struct sh_io_ops *io, int fd, const void *buf,
                      size_t len, uint64_t off);

/* fsync(2) retried on EINTR. Returns 0 or -1 with errno (EIO, ENOSPC, ...). */
int sh_io_fsync(const struct sh_io_ops *io, int fd);

/* Read a small text file @name under @dirfd (AT_FDCWD: a path) into @buf:
 * openat(2) with O_NOFOLLOW | O_NONBLOCK, one read(2) of at most @len - 1
 * bytes (@len > 0), NUL-terminated. For records of a few hundred bytes
 * (claims, /proc/<pid>/stat, the agent record). Returns the bytes read, or
 * -1 with errno from openat/read (ENOENT, ELOOP, EACCES, ...). */
ssize_t sh_read_small_at(int dirfd, const char *name, char *buf, size_t len);

/* close(2) that keeps errno of an earlier failure: returns close's result but
 * restores the caller's errno. Safe with fd < 0 (no-op, returns 0). */
int sh_io_close_keep_errno(const struct sh_io_ops *io, int fd);

#endif
