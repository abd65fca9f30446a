/* The fixture of the publish and lock unit tests (check_publish.c,
 * check_publish_lock.c): a real directory under /tmp and the I/O seam with
 * failures injected. One copy per test program; the helpers are static
 * inline because a program need not use each. */
#ifndef STAGEHAND_PUBLISH_FIXTURE_H
#define STAGEHAND_PUBLISH_FIXTURE_H


#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stagehand/clock.h"
#include "stagehand/io.h"
#include "stagehand/publish.h"

#include "check_main.h"

static char dir[64];
static int dirfd_;
static struct sh_io_ops ops;

static struct {
    int fsync_err;          /* errno for fsync of a file (not the dir) */
    int fallocate_err;
    int rename_err;
    int pwrite_err;         /* errno, on call pwrite_err_at */
    unsigned pwrite_err_at;
    size_t pwrite_max;      /* short writes */
    unsigned eintr_every;
    unsigned pwrite_calls;
} inj;

static inline int inj_fsync(int fd)
{
    if (inj.fsync_err != 0 && fd != dirfd_) {
        errno = inj.fsync_err;
        return -1;
    }
    return fsync(fd);
}

static inline int inj_fallocate(int fd, int mode, off_t off, off_t len)
{
    if (inj.fallocate_err != 0) {
        errno = inj.fallocate_err;
        return -1;
    }
    return sh_io_default()->fallocate(fd, mode, off, len);
}

static inline int inj_renameat(int a, const char *b, int c, const char *d)
{
    if (inj.rename_err != 0) {
        errno = inj.rename_err;
        return -1;
    }
    return renameat(a, b, c, d);
}

static inline ssize_t inj_pwrite(int fd, const void *buf, size_t len, off_t off)
{
    inj.pwrite_calls++;
    if (inj.eintr_every != 0 && inj.pwrite_calls % inj.eintr_every == 0) {
        errno = EINTR;
        return -1;
    }
    if (inj.pwrite_err != 0 && inj.pwrite_calls == inj.pwrite_err_at) {
        errno = inj.pwrite_err;
        return -1;
    }
    if (inj.pwrite_max != 0 && len > inj.pwrite_max)
        len = inj.pwrite_max;
    return pwrite(fd, buf, len, off);
}

static inline void setup(void)
{
    strcpy(dir, "/tmp/check_publish.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(dirfd_, 0);
    ops = *sh_io_default();
    ops.fsync = inj_fsync;
    ops.fallocate = inj_fallocate;
    ops.renameat = inj_renameat;
    ops.pwrite = inj_pwrite;
    memset(&inj, 0, sizeof(inj));
}

static inline void teardown(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            unlinkat(dirfd_, de->d_name, 0);
    }
    if (d != NULL)
        closedir(d);
    close(dirfd_);
    rmdir(dir);
}

/* Number of entries in the directory other than @except (may be NULL). */
static inline int entries(const char *except)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (except != NULL && strcmp(de->d_name, except) == 0)
            continue;
        n++;
    }
    closedir(d);
    return n;
}

static inline void write_file(const char *name, const char *content)
{
    int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, content, strlen(content)), (int)strlen(content));
    close(fd);
}

static inline void assert_content(const char *name, const char *content)
{
    char buf[256] = "";
    int fd = openat(dirfd_, name, O_RDONLY);
    ssize_t n;

    ck_assert_int_ge(fd, 0);
    n = read(fd, buf, sizeof(buf) - 1);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    close(fd);
    ck_assert_str_eq(buf, content);
}

static inline int publish_string(const char *name, const char *content)
{
    struct sh_publish p;
    size_t len = strlen(content);

    if (sh_publish_begin(&p, &ops, dirfd_, name, "42", "n1", len, 0644, (gid_t)-1) != 0)
        return -1;
    if (sh_publish_write(&p, content, len, 0) != 0 || sh_publish_sync(&p) != 0)
        return -1;
    return sh_publish_commit(&p);
}

#endif
