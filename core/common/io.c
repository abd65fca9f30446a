/* I/O ops seam and loop-until-done helpers (stagehand/io.h). Library code: every program. */
#include "config.h"
#include "stagehand/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

static int real_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    return openat(dirfd, path, flags, mode);
}

static int real_fallocate(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

static int real_fstat(int fd, struct stat *st)
{
    return fstat(fd, st);
}

static const struct sh_io_ops real_ops = {
    .openat = real_openat,
    .close = close,
    .pread = pread,
    .pwrite = pwrite,
    .fsync = fsync,
    .fallocate = real_fallocate,
    .fstat = real_fstat,
    .renameat = renameat,
    .unlinkat = unlinkat,
    .fadvise = posix_fadvise,
};

const struct sh_io_ops *sh_io_default(void)
{
    return &real_ops;
}

static const struct sh_io_ops *ops_or_default(const struct sh_io_ops *io)
{
    return io != NULL ? io : &real_ops;
}

ssize_t sh_io_pread_full(const struct sh_io_ops *io, int fd, void *buf,
                         size_t len, uint64_t off)
{
    size_t done = 0;

    io = ops_or_default(io);
    if (len > (size_t)SSIZE_MAX || off > (uint64_t)INT64_MAX - len) {
        errno = EINVAL;
        return -1;
    }
    while (done < len) {
        size_t want = len - done;
        ssize_t n;

        if (want > SH_IO_MAX_CHUNK)
            want = SH_IO_MAX_CHUNK;
        n = io->pread(fd, (char *)buf + done, want, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            break;      /* end of file */
        done += (size_t)n;
    }
    return (ssize_t)done;
}

int sh_io_pwrite_full(const struct sh_io_ops *io, int fd, const void *buf,
                      size_t len, uint64_t off)
{
    size_t done = 0;

    io = ops_or_default(io);
    if (off > (uint64_t)INT64_MAX - len) {
        errno = EINVAL;
        return -1;
    }
    while (done < len) {
        size_t want = len - done;
        ssize_t n;

        if (want > SH_IO_MAX_CHUNK)
            want = SH_IO_MAX_CHUNK;
        n = io->pwrite(fd, (const char *)buf + done, want, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

int sh_io_fsync(const struct sh_io_ops *io, int fd)
{
    int rc;

    io = ops_or_default(io);
    do {
        rc = io->fsync(fd);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

int sh_io_close_keep_errno(const struct sh_io_ops *io, int fd)
{
    int saved = errno;
    int rc;

    if (fd < 0)
        return 0;
    rc = ops_or_default(io)->close(fd);
    errno = saved;
    return rc;
}

ssize_t sh_read_small_at(int dirfd, const char *name, char *buf, size_t len)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    do {
        n = read(fd, buf, len - 1);
    } while (n < 0 && errno == EINTR);
    sh_io_close_keep_errno(NULL, fd);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}
