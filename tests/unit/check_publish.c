/* Atomic publish, sweep and lock with failures injected through the I/O seam
 * (cases F03, F06, F07, F11, F13, F14, F15, F17, F29). Runs on a real
 * directory under /tmp; the seam wraps the real syscalls. */
#include "config.h"

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

static int inj_fsync(int fd)
{
    if (inj.fsync_err != 0 && fd != dirfd_) {
        errno = inj.fsync_err;
        return -1;
    }
    return fsync(fd);
}

static int inj_fallocate(int fd, int mode, off_t off, off_t len)
{
    if (inj.fallocate_err != 0) {
        errno = inj.fallocate_err;
        return -1;
    }
    return sh_io_default()->fallocate(fd, mode, off, len);
}

static int inj_renameat(int a, const char *b, int c, const char *d)
{
    if (inj.rename_err != 0) {
        errno = inj.rename_err;
        return -1;
    }
    return renameat(a, b, c, d);
}

static ssize_t inj_pwrite(int fd, const void *buf, size_t len, off_t off)
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

static void setup(void)
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

static void teardown(void)
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
static int entries(const char *except)
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

static void write_file(const char *name, const char *content)
{
    int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, content, strlen(content)), (int)strlen(content));
    close(fd);
}

static void assert_content(const char *name, const char *content)
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

static int publish_string(const char *name, const char *content)
{
    struct sh_publish p;
    size_t len = strlen(content);

    if (sh_publish_begin(&p, &ops, dirfd_, name, "42", "n1", len, 0644, (gid_t)-1) != 0)
        return -1;
    if (sh_publish_write(&p, content, len, 0) != 0 || sh_publish_sync(&p) != 0)
        return -1;
    return sh_publish_commit(&p);
}

START_TEST(publish_ok)
{
    struct sh_publish p;
    struct stat st;

    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img.sqsh", "42", "n1",
                                      5, 0644, (gid_t)-1), 0);
    {
        char expect[NAME_MAX + 1];

        snprintf(expect, sizeof(expect), ".img.sqsh.stage.42.n1.%ld.tmp",
                 (long)getpid());
        ck_assert_str_eq(p.tmpname, expect);
    }
    ck_assert_int_eq(fstatat(dirfd_, "img.sqsh", &st, 0), -1); /* not yet */
    ck_assert_int_eq(sh_publish_write(&p, "hello", 5, 0), 0);
    ck_assert_int_eq(sh_publish_sync(&p), 0);
    ck_assert_int_eq(sh_publish_commit(&p), 0);
    ck_assert_int_eq(p.fd, -1);
    assert_content("img.sqsh", "hello");
    ck_assert_int_eq(entries(NULL), 1);     /* no temp left */
}
END_TEST

/* case F07: fsync failure → temp removed, error returned, DST untouched */
START_TEST(fsync_failure_removes_temp)
{
    write_file("img", "old");
    inj.fsync_err = EIO;
    ck_assert_int_eq(publish_string("img", "new content"), -1);
    ck_assert_int_eq(errno, EIO);
    assert_content("img", "old");
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F14: ENOSPC from fallocate is an early error, nothing left behind */
START_TEST(fallocate_enospc_early)
{
    struct sh_publish p;

    inj.fallocate_err = ENOSPC;
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1",
                                      1 << 20, 0644, (gid_t)-1), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(entries(NULL), 0);
}
END_TEST

/* case F14: EOPNOTSUPP (NFS 3, FUSE): continue without preallocating */
START_TEST(fallocate_eopnotsupp_skipped)
{
    inj.fallocate_err = EOPNOTSUPP;
    ck_assert_int_eq(publish_string("img", "data"), 0);
    assert_content("img", "data");
    inj.fallocate_err = ENOSYS;
    ck_assert_int_eq(publish_string("img", "data2"), 0);
    assert_content("img", "data2");
}
END_TEST

/* case F11: 1-byte writes interleaved with EINTR give an identical file */
START_TEST(short_writes_and_eintr)
{
    static const char text[] = "The quick brown fox jumps over the lazy dog";

    inj.pwrite_max = 1;
    inj.eintr_every = 4;
    ck_assert_int_eq(publish_string("img", text), 0);
    assert_content("img", text);
}
END_TEST

/* case F15: ENOSPC / EIO during the copy remove the temp file */
START_TEST(write_error_removes_temp)
{
    struct sh_publish p;

    write_file("img", "old");
    inj.pwrite_max = 2;
    inj.pwrite_err = ENOSPC;
    inj.pwrite_err_at = 3;
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 10,
                                      0644, (gid_t)-1), 0);
    ck_assert_int_eq(sh_publish_write(&p, "0123456789", 10, 0), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(entries(NULL), 1);
    /* later steps fail cleanly too */
    ck_assert_int_eq(sh_publish_sync(&p), -1);
    ck_assert_int_eq(errno, EBADF);
    ck_assert_int_eq(sh_publish_commit(&p), -1);
    assert_content("img", "old");

    memset(&inj, 0, sizeof(inj));
    inj.pwrite_err = EIO;
    inj.pwrite_err_at = 1;
    ck_assert_int_eq(publish_string("img", "abc"), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F13: EXDEV (or any rename failure) → temp removed, DST untouched */
START_TEST(rename_exdev)
{
    write_file("img", "old");
    inj.rename_err = EXDEV;
    ck_assert_int_eq(publish_string("img", "new"), -1);
    ck_assert_int_eq(errno, EXDEV);
    assert_content("img", "old");
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F29: an existing DST is replaced by rename, never truncated: a reader
 * holding the old file (a mount) keeps the old bytes */
START_TEST(existing_dst_not_truncated)
{
    char buf[8] = "";
    struct stat before, after;
    int old;

    write_file("img", "old-data");
    old = openat(dirfd_, "img", O_RDONLY);
    ck_assert_int_ge(old, 0);
    fstat(old, &before);
    ck_assert_int_eq(publish_string("img", "new"), 0);
    ck_assert_int_eq(pread(old, buf, 8, 0), 8);
    ck_assert_mem_eq(buf, "old-data", 8);
    fstatat(dirfd_, "img", &after, 0);
    ck_assert_uint_ne(before.st_ino, after.st_ino);
    assert_content("img", "new");
    close(old);
}
END_TEST

/* case F17b: a symlink planted at the temp name is never followed */
START_TEST(planted_symlink_refused)
{
    char tmp[NAME_MAX + 1];
    char target[PATH_MAX];
    struct sh_publish p;
    struct stat st;

    ck_assert_int_eq(sh_publish_tmpname("img", "42", "n1", getpid(), tmp,
                                        sizeof(tmp)), 0);
    snprintf(target, sizeof(target), "%s/victim", dir);
    write_file("victim", "precious");
    ck_assert_int_eq(symlinkat(target, dirfd_, tmp), 0);
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 4,
                                      0644, (gid_t)-1), -1);
    ck_assert(errno == EEXIST || errno == ELOOP);
    assert_content("victim", "precious");
    /* the planted link is not ours to remove */
    ck_assert_int_eq(fstatat(dirfd_, tmp, &st, AT_SYMLINK_NOFOLLOW), 0);
}
END_TEST

START_TEST(tmpname_rules)
{
    char out[NAME_MAX + 1];
    char longname[300];

    ck_assert_int_eq(sh_publish_tmpname("a.b", "12.3/4", "host.dom", 99, out,
                                        sizeof(out)), 0);
    ck_assert_str_eq(out, ".a.b.stage.12_3_4.host.dom.99.tmp");
    memset(longname, 'x', 250);
    longname[250] = '\0';
    ck_assert_int_eq(sh_publish_tmpname(longname, "1", "h", 1, out,
                                        sizeof(out)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_int_eq(sh_publish_tmpname("a", "", "h", 1, out, sizeof(out)), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* case F06: temps of this host (dead runs: we hold the lock) and old ones of
 * any host are swept; a fresh one of another host is left alone */
START_TEST(sweep_stale)
{
    struct timespec old[2] = { { 1000000, 0 }, { 1000000, 0 } };
    unsigned removed = 0;

    write_file(".img.stage.7.n1.123.tmp", "x");         /* this host */
    write_file(".img.stage.8.n2.456.tmp", "x");         /* other, fresh */
    write_file(".img.stage.9.n3.789.tmp", "x");         /* other, old */
    utimensat(dirfd_, ".img.stage.9.n3.789.tmp", old, 0);
    write_file(".other.stage.7.n1.1.tmp", "x");         /* another DST */
    write_file(".img.stage.7.n1.notapid.tmp", "x");     /* not our pattern */
    write_file("img", "keep");
    ck_assert_int_eq(sh_publish_sweep(NULL, dirfd_, "img", "n1", 3600,
                                      &removed), 0);
    ck_assert_uint_eq(removed, 2);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.7.n1.123.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.9.n3.789.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.8.n2.456.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".other.stage.7.n1.1.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.7.n1.notapid.tmp", F_OK, 0), 0);
    assert_content("img", "keep");
}
END_TEST

/* case F06: the agent removes what its own killed engine left: the temp
 * files of this job on this node, whatever their pid or age; never another
 * job's or node's, another DST's, a name that is not a temp file, or a link's
 * target */
START_TEST(sweep_run_own)
{
    char name[NAME_MAX + 1], path[PATH_MAX];
    unsigned removed = 99;
    int fd;

    ck_assert_int_eq(sh_publish_tmpname("img", "57", "n1", 4242, name, sizeof(name)), 0);
    write_file(name, "x");                              /* this run, named by publish.c */
    write_file(".img.stage.57.n1.1.tmp", "x");          /* this run, another pid */
    write_file(".img.stage.58.n1.2.tmp", "x");          /* another job */
    write_file(".img.stage.57.n2.3.tmp", "x");          /* another node */
    write_file(".img.stage.570.n1.4.tmp", "x");         /* a job id that only starts so */
    write_file(".other.stage.57.n1.5.tmp", "x");        /* another DST */
    write_file(".img.stage.57.n1.notapid.tmp", "x");    /* not a temp name */
    write_file("img", "keep");
    snprintf(path, sizeof(path), "%s/target", dir);
    write_file("target", "keep");
    ck_assert_int_eq(symlinkat(path, dirfd_, ".img.stage.57.n1.6.tmp"), 0);
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "57", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 3);
    ck_assert_int_eq(faccessat(dirfd_, name, F_OK, AT_SYMLINK_NOFOLLOW), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.1.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.6.tmp", F_OK, AT_SYMLINK_NOFOLLOW),
                     -1);
    assert_content("target", "keep");           /* the link went, not its target */
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.58.n1.2.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n2.3.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.570.n1.4.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".other.stage.57.n1.5.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.notapid.tmp", F_OK, 0), 0);
    assert_content("img", "keep");

    /* a job id with '.' and '/' is matched as sh_publish_tmpname writes it */
    ck_assert_int_eq(sh_publish_tmpname("img", "9.1/x", "n1", 7, name, sizeof(name)), 0);
    write_file(name, "x");
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "9.1/x", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 1);
    ck_assert_int_eq(faccessat(dirfd_, name, F_OK, 0), -1);

    /* nothing to remove; bad fields */
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "57", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 0);
    errno = 0;
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "", "n1", NULL), -1);
    ck_assert_int_eq(errno, EINVAL);
    fd = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    errno = 0;
    ck_assert_int_eq(sh_publish_sweep_run(NULL, fd, "img", "57", "n1", NULL), -1);
    ck_assert_int_ne(errno, 0);
    close(fd);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* case F03: the second stager of one DST waits a bounded time */
START_TEST(lock_bounded_wait)
{
    int a = -1, b = -1;
    double t0;

    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 1000000000ULL, &a), 0);
    t0 = now_s();
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 150000000ULL, &b), -1);
    ck_assert_int_eq(errno, ETIMEDOUT);
    ck_assert(now_s() - t0 >= 0.14);
    ck_assert(now_s() - t0 < 5.0);
    /* another DST is independent */
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img2", 0, &b), 0);
    sh_publish_unlock(b);
    sh_publish_unlock(a);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &b), 0);
    sh_publish_unlock(b);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
}
END_TEST

/* case F03: a run that finds the lock busy names the holder from the
 * holder's temp file beside DST; without one (or with only a dead run's,
 * untouched for over a minute) there is no name. */
START_TEST(lock_owner_from_temp)
{
    struct sh_publish p;
    struct timespec old[2] = { { 0, 0 }, { 0, 0 } };
    char owner[96];

    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    ck_assert_int_eq(sh_publish_begin(&p, NULL, dirfd_, "img", "57", "node-a", 4096, 0644, (gid_t)-1), 0);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), 0);
    ck_assert_str_eq(owner, "job 57 on node-a");
    /* another DST's temp is not this one's holder */
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "im", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    /* a short buffer gets a truncated, terminated name */
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, 7), 0);
    ck_assert_str_eq(owner, "job 57");
    /* a temp file nobody wrote to for 2 minutes is a dead run's */
    old[0].tv_sec = old[1].tv_sec = time(NULL) - 120;
    ck_assert_int_eq(utimensat(dirfd_, p.tmpname, old, 0), 0);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    sh_publish_abort(&p);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
}
END_TEST

/* A failed run removes its lock file while it still holds it; a run that
 * was waiting on the removed file takes the lock again on the file that
 * now has the name, so two runs never both hold "the" lock. */
START_TEST(lock_file_removed_by_holder)
{
    int a = -1, b = -1, status = 0;
    struct stat held, named;
    pid_t pid;

    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* waits on the file A holds, then must end up on the new one */
        int c = -1;

        close(a); /* the inherited descriptor would hold A's lock too */
        if (sh_publish_lock(dirfd_, "img", 3000000000ULL, &c) != 0)
            _exit(10);
        if (fstat(c, &held) != 0 || fstatat(dirfd_, ".img.lock", &named, 0) != 0)
            _exit(11);
        _exit(held.st_ino == named.st_ino ? 0 : 12);
    }
    usleep(200 * 1000); /* the child is waiting on A's file */
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", a), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the waiting run did not take the lock on the current file (status %d)",
                  status);
    /* the child's lock died with it; the file it created is there */
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
    /* removal by a holder whose file was already replaced leaves the new one */
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), 0);
    ck_assert_int_eq(fstat(a, &held), 0);
    ck_assert_int_eq(unlinkat(dirfd_, ".img.lock", 0), 0);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &b), 0); /* a new file */
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", a), 0);
    ck_assert_int_eq(fstatat(dirfd_, ".img.lock", &named, 0), 0);
    ck_assert_uint_ne(named.st_ino, held.st_ino);
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", b), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", -1), 0);
}
END_TEST

/* A symbolic link planted where the lock file goes is never followed. */
START_TEST(lock_symlink_refused)
{
    int a = -1;

    ck_assert_int_eq(symlinkat("/etc/passwd", dirfd_, ".img.lock"), 0);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), -1);
    ck_assert_int_eq(errno, ELOOP);
    ck_assert_int_eq(unlinkat(dirfd_, ".img.lock", 0), 0);
}
END_TEST

START_TEST(open_dir_creates_parents)
{
    char dst[PATH_MAX];
    char name[NAME_MAX + 1];
    int fd = -1;

    snprintf(dst, sizeof(dst), "%s/a/b/c/img.sqsh", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0, &fd, name, sizeof(name)), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), 0);
    ck_assert_str_eq(name, "img.sqsh");
    close(fd);
    ck_assert_int_eq(sh_publish_open_dir("relative/img", 0755, &fd, name,
                                         sizeof(name)), -1);
    ck_assert_int_eq(errno, EINVAL);
    snprintf(dst, sizeof(dst), "%s/a/", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* cleanup for teardown */
    snprintf(dst, sizeof(dst), "%s/a/b/c", dir);
    rmdir(dst);
    snprintf(dst, sizeof(dst), "%s/a/b", dir);
    rmdir(dst);
    snprintf(dst, sizeof(dst), "%s/a", dir);
    rmdir(dst);
}
END_TEST

START_TEST(signal_cleanup_unlinks)
{
    struct sh_publish p;

    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 4,
                                      0644, (gid_t)-1), 0);
    ck_assert_int_eq(entries(NULL), 1);
    sh_publish_signal_cleanup(&p);      /* case F06: SIGTERM handler path */
    ck_assert_int_eq(entries(NULL), 0);
    sh_publish_abort(&p);               /* closes; nothing else to remove */
    ck_assert_int_eq(p.fd, -1);
}
END_TEST

START_TEST(publish_buffer_and_empty)
{
    ck_assert_int_eq(sh_publish_buffer(&ops, dirfd_, "meta", "1", "h", "abc", 3,
                                       0600), 0);
    assert_content("meta", "abc");
    ck_assert_int_eq(sh_publish_buffer(&ops, dirfd_, "empty", "1", "h", "", 0,
                                       0600), 0);
    assert_content("empty", "");
    ck_assert_int_eq(entries(NULL), 2);
}
END_TEST

/* issue 30: a copy's mode follows SRC's minus the umask, never looser */
START_TEST(copy_mode_follows_source)
{
    ck_assert_uint_eq(sh_copy_mode(0600, 077, 1), 0600);
    ck_assert_uint_eq(sh_copy_mode(0644, 077, 1), 0600);
    ck_assert_uint_eq(sh_copy_mode(0640, 022, 1), 0640);
    ck_assert_uint_eq(sh_copy_mode(0644, 022, 1), 0644);
    ck_assert_uint_eq(sh_copy_mode(0755, 027, 1), 0750);
    /* never setuid, setgid or sticky; the file type goes too */
    ck_assert_uint_eq(sh_copy_mode(S_IFREG | 04755, 022, 1), 0755);
    ck_assert_uint_eq(sh_copy_mode(07777, 0, 1), 0777);
    /* a copy whose group is not SRC's gets no group bits */
    ck_assert_uint_eq(sh_copy_mode(0640, 022, 0), 0600);
    ck_assert_uint_eq(sh_copy_mode(0664, 002, 0), 0604);
}
END_TEST

START_TEST(begin_sets_exact_mode)
{
    struct sh_publish p;
    struct stat st;
    mode_t old = umask(0);

    /* the umask neither loosens nor changes the requested bits */
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m1", "42", "n1", 4, 0640,
                                      (gid_t)-1), 0);
    ck_assert_int_eq(fstat(p.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    ck_assert_int_eq(sh_publish_write(&p, "abcd", 4, 0), 0);
    ck_assert_int_eq(sh_publish_sync(&p), 0);
    ck_assert_int_eq(sh_publish_commit(&p), 0);
    ck_assert_int_eq(fstatat(dirfd_, "m1", &st, 0), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    umask(077);
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m2", "42", "n1", 4, 0444,
                                      getgid()), 0);
    ck_assert_int_eq(fstat(p.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0444);
    /* still writable through its descriptor */
    ck_assert_int_eq(sh_publish_write(&p, "abcd", 4, 0), 0);
    sh_publish_abort(&p);
    /* a group the user cannot give it: no group bits */
    if (getuid() != 0) {
        ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m3", "42", "n1", 4, 0640,
                                          (gid_t)4242), 0);
        ck_assert_int_eq(fstat(p.fd, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0600);
        sh_publish_abort(&p);
    }
    umask(old);
}
END_TEST

START_TEST(tighten_existing_copy)
{
    struct stat st;
    int fd = openat(dirfd_, "old", O_RDWR | O_CREAT | O_EXCL, 0600);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    /* 0644 from an older version, SRC 0600: made 0600 */
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0600), 1);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    /* stricter than needed already: left alone, never loosened */
    ck_assert_int_eq(fchmod(fd, 0400), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0400);
    /* only the bits both allow */
    ck_assert_int_eq(fchmod(fd, 0664), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0640), 1);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    close(fd);
}
END_TEST

START_TEST(open_dir_parent_mode)
{
    char dst[PATH_MAX], sub[PATH_MAX], name[NAME_MAX + 1];
    struct stat st;
    mode_t old = umask(022);
    int fd;

    snprintf(dst, sizeof(dst), "%s/p1/p2/img", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0700, &fd, name, sizeof(name)), 0);
    close(fd);
    snprintf(sub, sizeof(sub), "%s/p1", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    snprintf(sub, sizeof(sub), "%s/p1/p2", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    ck_assert_int_eq(rmdir(sub), 0);
    snprintf(sub, sizeof(sub), "%s/p1", dir);
    ck_assert_int_eq(rmdir(sub), 0);
    /* a site's 0755 minus the job's umask */
    umask(027);
    snprintf(dst, sizeof(dst), "%s/q1/img", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), 0);
    close(fd);
    snprintf(sub, sizeof(sub), "%s/q1", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0750);
    ck_assert_int_eq(rmdir(sub), 0);
    umask(old);
}
END_TEST

/* issue 30 item 4: another user's file under the lock's name */
START_TEST(lock_of_another_user_named)
{
    char msg[512];
    int fd;

    sh_publish_lock_foreign_text(msg, sizeof(msg), "/nvme/.vimg.lock", "shother", 1002,
                                 EACCES);
    ck_assert_str_eq(msg, "lock file /nvme/.vimg.lock belongs to shother (uid 1002), not "
                     "to you: Permission denied (its owner or an administrator must "
                     "remove it)");
    sh_publish_lock_foreign_text(msg, sizeof(msg), "/nvme/.x.lock", NULL, 4242, EPERM);
    ck_assert_ptr_nonnull(strstr(msg, "belongs to an unknown user (uid 4242)"));
    /* truncated, never overflowing */
    sh_publish_lock_foreign_text(msg, 20, "/nvme/.vimg.lock", "shother", 1002, EACCES);
    ck_assert_uint_eq(strlen(msg), 19);
    /* no lock file, or the caller's own: not that case */
    ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "none", "/x/none", EACCES, msg,
                                             sizeof(msg)), -1);
    fd = openat(dirfd_, ".mine.lock", O_RDWR | O_CREAT | O_EXCL, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "mine", "/x/mine", EACCES, msg,
                                             sizeof(msg)), -1);
    ck_assert_int_eq(errno, EPERM);
    if (getuid() == 0) {
        ck_assert_int_eq(fchownat(dirfd_, ".mine.lock", 4242, 4242, 0), 0);
        ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "mine", "/x/mine", EACCES, msg,
                                                 sizeof(msg)), 0);
        ck_assert_ptr_nonnull(strstr(msg, "lock file /x/.mine.lock belongs to "));
        ck_assert_ptr_nonnull(strstr(msg, "(uid 4242), not to you: Permission denied"));
        /* writable by all and held by its owner: refused at once, no wait */
        ck_assert_int_eq(fchmodat(dirfd_, ".mine.lock", 0666, 0), 0);
        fd = openat(dirfd_, ".mine.lock", O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(flock(fd, LOCK_EX), 0);
        {
            int lfd = -1;
            int64_t t0 = sh_now_ns();

            ck_assert_int_eq(sh_publish_lock(dirfd_, "mine", 5 * SH_NS_PER_S, &lfd), -1);
            ck_assert_int_eq(errno, EPERM);
            ck_assert_int_eq(lfd, -1);
            ck_assert(sh_now_ns() - t0 < 4 * SH_NS_PER_S); /* not the 5 s wait */
        }
        close(fd);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("publish");
    TCase *tc = tcase_create("publish");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, publish_ok);
    tcase_add_test(tc, fsync_failure_removes_temp);
    tcase_add_test(tc, fallocate_enospc_early);
    tcase_add_test(tc, fallocate_eopnotsupp_skipped);
    tcase_add_test(tc, short_writes_and_eintr);
    tcase_add_test(tc, write_error_removes_temp);
    tcase_add_test(tc, rename_exdev);
    tcase_add_test(tc, existing_dst_not_truncated);
    tcase_add_test(tc, planted_symlink_refused);
    tcase_add_test(tc, tmpname_rules);
    tcase_add_test(tc, sweep_stale);
    tcase_add_test(tc, sweep_run_own);
    tcase_add_test(tc, lock_bounded_wait);
    tcase_add_test(tc, lock_owner_from_temp);
    tcase_add_test(tc, lock_symlink_refused);
    tcase_add_test(tc, lock_file_removed_by_holder);
    tcase_add_test(tc, open_dir_creates_parents);
    tcase_add_test(tc, signal_cleanup_unlinks);
    tcase_add_test(tc, publish_buffer_and_empty);
    tcase_add_test(tc, copy_mode_follows_source);
    tcase_add_test(tc, begin_sets_exact_mode);
    tcase_add_test(tc, tighten_existing_copy);
    tcase_add_test(tc, open_dir_parent_mode);
    tcase_add_test(tc, lock_of_another_user_named);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
