/* Atomic publish under the final name, temp files and their sweep (stagehand/publish.h).
 * Library code: the engine, the agent and the plugin. */
#include "config.h"
#include "stagehand/publish.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stagehand/clock.h"

static const struct sh_io_ops *ops(const struct sh_io_ops *io)
{
    return io != NULL ? io : sh_io_default();
}

/* Copy @src into @dst (@len bytes), mapping characters that would break the
 * dot-separated temp name. Returns 0 or -1 (ENAMETOOLONG / EINVAL). */
static int sanitize(char *dst, size_t len, const char *src, int map_dot)
{
    size_t n = strlen(src);

    if (n == 0) {
        errno = EINVAL;
        return -1;
    }
    if (n >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (size_t i = 0; i <= n; i++) {
        char c = src[i];

        if (c == '/' || (map_dot && c == '.'))
            c = '_';
        dst[i] = c;
    }
    return 0;
}

int sh_publish_tmpname(const char *name, const char *jobid, const char *host,
                       pid_t pid, char *out, size_t len)
{
    char job[NAME_MAX + 1];
    char hst[NAME_MAX + 1];
    int n;

    if (name == NULL || name[0] == '\0' || jobid == NULL || host == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (sanitize(job, sizeof(job), jobid, 1) != 0 ||
        sanitize(hst, sizeof(hst), host, 0) != 0)
        return -1;
    n = snprintf(out, len, ".%s.stage.%s.%s.%ld.tmp", name, job, hst, (long)pid);
    if (n < 0 || (size_t)n >= len || n > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int sh_publish_lockname(const char *name, char *out, size_t len)
{
    int n = snprintf(out, len, ".%s.lock", name);

    if (n < 0 || (size_t)n >= len || n > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* mkdir -p of the directory part of @path (absolute, ends before basename),
 * new directories with @mode (the umask applies). */
static int make_parents(char *dir, mode_t mode)
{
    for (char *p = dir + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;

            *p = '\0';
            if (mkdir(dir, mode) != 0 && errno != EEXIST) {
                *p = saved;
                return -1;
            }
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    return 0;
}

int sh_publish_open_dir(const char *dst, mode_t parent_mode, int *dirfd,
                        char *name, size_t namelen)
{
    char dir[PATH_MAX];
    const char *slash;
    size_t dlen, blen;
    int fd;

    if (dst == NULL || dst[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    if (strlen(dst) >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    slash = strrchr(dst, '/');
    if (slash[1] == '\0' || strcmp(slash + 1, ".") == 0 ||
        strcmp(slash + 1, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    blen = strlen(slash + 1);
    if (blen >= namelen || blen > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    dlen = (size_t)(slash - dst);
    if (dlen == 0) {
        dir[0] = '/';
        dir[1] = '\0';
    } else {
        memcpy(dir, dst, dlen);
        dir[dlen] = '\0';
    }
    if (parent_mode != 0 && dlen > 0 && make_parents(dir, parent_mode) != 0)
        return -1;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    memcpy(name, slash + 1, blen + 1);
    *dirfd = fd;
    return 0;
}

static void reset(struct sh_publish *p)
{
    p->fd = -1;
    p->tmp_live = 0;
}

/* A copy whose group is not SRC's: its group may do what everyone may (the
 * "other" bits), never more; a group with fewer rights than everyone would
 * shut out exactly the members of the user's own group. */
static mode_t group_as_other(mode_t m)
{
    return (m & ~(mode_t)070) | ((m & 07) << 3);
}

mode_t sh_copy_mode(mode_t src_mode, mode_t umask_bits, int same_group)
{
    mode_t m = src_mode & 0777 & ~umask_bits;

    return same_group ? m : group_as_other(m);
}

int sh_publish_tighten(int fd, const struct stat *st, mode_t want)
{
    mode_t have = st->st_mode & 0777;

    if ((have & ~want) == 0)
        return 0;
    return fchmod(fd, have & want) == 0 ? 1 : -1;
}

/* The temp file @fd gets exactly @mode (permission bits) and, when @gid is
 * not (gid_t)-1 and differs from the group it was created with, group @gid;
 * when that group cannot be set, the group gets the other bits only. */
static int set_mode(int fd, mode_t mode, gid_t gid)
{
    struct stat st;

    if (gid != (gid_t)-1) {
        if (fstat(fd, &st) != 0)
            return -1;
        if (st.st_gid != gid && fchown(fd, (uid_t)-1, gid) != 0)
            mode = group_as_other(mode);
    }
    return fchmod(fd, mode & 0777);
}

int sh_publish_begin(struct sh_publish *p, const struct sh_io_ops *io,
                     int dirfd, const char *name, const char *jobid,
                     const char *host, uint64_t size, mode_t mode, gid_t gid)
{
    size_t nlen;

    memset(p, 0, sizeof(*p));
    reset(p);
    p->io = ops(io);
    p->dirfd = dirfd;
    p->size = size;
    nlen = strlen(name);
    if (nlen > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(p->name, name, nlen + 1);
    if (sh_publish_tmpname(name, jobid, host, getpid(), p->tmpname,
                           sizeof(p->tmpname)) != 0)
        return -1;
    if (size > (uint64_t)INT64_MAX) {
        errno = EFBIG;
        return -1;
    }
    /* Mark before creating: a signal between open and the flag must still
     * unlink; unlinking a name that does not exist yet is harmless. */
    p->tmp_live = 1;
    /* Owner-only until its mode is set, before any byte is written: the
     * copy is never readable by anyone SRC's mode keeps out (issue 30). */
    p->fd = p->io->openat(dirfd, p->tmpname,
                          O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          0600);
    if (p->fd < 0) {
        /* EEXIST: the name belongs to someone else; never unlink it. */
        p->tmp_live = 0;
        return -1;
    }
    if (set_mode(p->fd, mode, gid) != 0) {
        sh_publish_abort(p);
        return -1;
    }
    /* Plain fallocate, never posix_fallocate: glibc's fallback writes every
     * block, which is slow and hides EOPNOTSUPP (case F14). */
    if (size > 0 && p->io->fallocate(p->fd, 0, 0, (off_t)size) != 0) {
        if (errno != EOPNOTSUPP && errno != ENOSYS) {
            sh_publish_abort(p);
            return -1;
        }
    }
    return 0;
}

int sh_publish_write(struct sh_publish *p, const void *buf, size_t len,
                     uint64_t off)
{
    if (p->fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (sh_io_pwrite_full(p->io, p->fd, buf, len, off) != 0) {
        sh_publish_abort(p);
        return -1;
    }
    return 0;
}

int sh_publish_sync(struct sh_publish *p)
{
    if (p->fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (sh_io_fsync(p->io, p->fd) != 0) {
        sh_publish_abort(p);
        return -1;
    }
    return 0;
}

int sh_publish_commit(struct sh_publish *p)
{
    if (p->fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (p->io->renameat(p->dirfd, p->tmpname, p->dirfd, p->name) != 0) {
        sh_publish_abort(p);
        return -1;
    }
    p->tmp_live = 0;
    if (sh_io_close_keep_errno(p->io, p->fd) != 0) {
        p->fd = -1;
        return -1;
    }
    p->fd = -1;
    /* The rename is durable only once the directory is (fsync(2) NOTES). */
    return sh_io_fsync(p->io, p->dirfd);
}

void sh_publish_abort(struct sh_publish *p)
{
    int saved = errno;

    if (p->fd >= 0) {
        p->io->close(p->fd);
        p->fd = -1;
    }
    if (p->tmp_live) {
        p->io->unlinkat(p->dirfd, p->tmpname, 0);
        p->tmp_live = 0;
    }
    errno = saved;
}

void sh_publish_signal_cleanup(struct sh_publish *p)
{
    if (p->tmp_live) {
        unlinkat(p->dirfd, p->tmpname, 0);
        p->tmp_live = 0;
    }
}

int sh_publish_buffer(const struct sh_io_ops *io, int dirfd, const char *name,
                      const char *jobid, const char *host, const void *buf,
                      size_t len, mode_t mode)
{
    struct sh_publish p;

    if (sh_publish_begin(&p, io, dirfd, name, jobid, host, len, mode, (gid_t)-1) != 0)
        return -1;
    if (sh_publish_write(&p, buf, len, 0) != 0 || sh_publish_sync(&p) != 0)
        return -1;
    return sh_publish_commit(&p);
}

/* Does @d_name look like ".<name>.stage.<job>.<host>.<pid>.tmp"? Stores the
 * host field into @host (@len bytes) and the job field into @job (@jlen
 * bytes; @job may be NULL). */
static int parse_tmp(const char *d_name, const char *name, char *host,
                     size_t len, char *job, size_t jlen)
{
    size_t nlen = strlen(name);
    size_t dlen = strlen(d_name);
    const char *mid, *end, *first, *last;
    size_t hlen;

    if (dlen < nlen + 8 || d_name[0] != '.' ||
        strncmp(d_name + 1, name, nlen) != 0 ||
        strncmp(d_name + 1 + nlen, ".stage.", 7) != 0)
        return 0;
    mid = d_name + 1 + nlen + 7;
    if (dlen < 4 || strcmp(d_name + dlen - 4, ".tmp") != 0)
        return 0;
    end = d_name + dlen - 4;            /* points at ".tmp" */
    if (end <= mid)
        return 0;
    first = memchr(mid, '.', (size_t)(end - mid));
    last = end - 1;
    while (last > mid && *last != '.')
        last--;
    if (first == NULL || last <= first)
        return 0;
    for (const char *c = last + 1; c < end; c++) {
        if (*c < '0' || *c > '9')
            return 0;
    }
    if (last + 1 == end)
        return 0;
    hlen = (size_t)(last - first - 1);
    if (hlen == 0 || hlen >= len)
        return 0;
    memcpy(host, first + 1, hlen);
    host[hlen] = '\0';
    if (job != NULL) {
        size_t n = (size_t)(first - mid);

        if (n >= jlen)
            return 0;
        memcpy(job, mid, n);
        job[n] = '\0';
    }
    return 1;
}

/* One temp file of some run for a DST (its name parsed, its lstat). */
struct tmp_entry {
    const char *d_name;
    char host[NAME_MAX + 1];
    char job[NAME_MAX + 1];
    struct stat st;
};

/* Call @fn for every temp file of @name in @dirfd. Returns 0, or -1 with
 * errno from dup(2)/fdopendir(3)/readdir(3). */
static int each_tmp(int dirfd, const char *name,
                    void (*fn)(const struct tmp_entry *t, void *ctx), void *ctx)
{
    struct dirent *de;
    DIR *dir;
    int fd = dup(dirfd);

    if (fd < 0)
        return -1;
    dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return -1;
    }
    rewinddir(dir);
    errno = 0;
    while ((de = readdir(dir)) != NULL) {
        struct tmp_entry t;

        t.d_name = de->d_name;
        if (parse_tmp(de->d_name, name, t.host, sizeof(t.host), t.job, sizeof(t.job)) &&
            fstatat(dirfd, de->d_name, &t.st, AT_SYMLINK_NOFOLLOW) == 0)
            fn(&t, ctx);
        errno = 0;
    }
    if (errno != 0) {
        int saved = errno;

        closedir(dir);
        errno = saved;
        return -1;
    }
    closedir(dir);
    return 0;
}

struct sweep_ctx {
    const struct sh_io_ops *io;
    int dirfd;
    const char *myhost;
    uint64_t max_age_s;
    time_t now;
    unsigned count;
};

static void sweep_one(const struct tmp_entry *t, void *arg)
{
    struct sweep_ctx *c = arg;
    int stale = strcmp(t->host, c->myhost) == 0 ||
                (c->now > t->st.st_mtime &&
                 (uint64_t)(c->now - t->st.st_mtime) > c->max_age_s);

    if (stale && ops(c->io)->unlinkat(c->dirfd, t->d_name, 0) == 0)
        c->count++;
}

int sh_publish_sweep(const struct sh_io_ops *io, int dirfd, const char *name,
                     const char *host, uint64_t max_age_s, unsigned *removed)
{
    char myhost[NAME_MAX + 1];
    struct sweep_ctx c = { io, dirfd, myhost, max_age_s, time(NULL), 0 };

    if (removed != NULL)
        *removed = 0;
    if (sanitize(myhost, sizeof(myhost), host, 0) != 0)
        return -1;
    if (each_tmp(dirfd, name, sweep_one, &c) != 0)
        return -1;
    if (removed != NULL)
        *removed = c.count;
    return 0;
}

struct sweep_run_ctx {
    const struct sh_io_ops *io;
    int dirfd;
    const char *job, *host;
    unsigned count;
};

static void sweep_run_one(const struct tmp_entry *t, void *arg)
{
    struct sweep_run_ctx *c = arg;

    if (strcmp(t->job, c->job) == 0 && strcmp(t->host, c->host) == 0 &&
        ops(c->io)->unlinkat(c->dirfd, t->d_name, 0) == 0)
        c->count++;
}

int sh_publish_sweep_run(const struct sh_io_ops *io, int dirfd, const char *name,
                         const char *jobid, const char *host, unsigned *removed)
{
    char job[NAME_MAX + 1], hst[NAME_MAX + 1];
    struct sweep_run_ctx c = { io, dirfd, job, hst, 0 };

    if (removed != NULL)
        *removed = 0;
    if (sanitize(job, sizeof(job), jobid, 1) != 0 || sanitize(hst, sizeof(hst), host, 0) != 0)
        return -1;
    if (each_tmp(dirfd, name, sweep_run_one, &c) != 0)
        return -1;
    if (removed != NULL)
        *removed = c.count;
    return 0;
}

/* Is @fd still the file named @lname in @dirfd? 1 yes, 0 no (removed or
 * replaced), -1 error. */
static int still_named(int dirfd, const char *lname, int fd)
{
    struct stat a, b;

    if (fstat(fd, &a) != 0)
        return -1;
    if (fstatat(dirfd, lname, &b, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void sh_publish_signal_unlock_remove(int dirfd, const char *name, int lockfd)
{
    char lname[NAME_MAX + 1];
    struct stat st;
    size_t o = 0;

    if (dirfd < 0 || lockfd < 0 || name == NULL || name[0] == '\0')
        return;
    /* ".<name>.lock" (sh_publish_lockname) without snprintf(3), which is not
     * async-signal-safe */
    lname[o++] = '.';
    for (const char *p = name; *p != '\0'; p++) {
        if (o + sizeof(".lock") >= sizeof(lname))
            return;
        lname[o++] = *p;
    }
    memcpy(lname + o, ".lock", sizeof(".lock"));
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
        return;
    if (still_named(dirfd, lname, lockfd) == 1)
        unlinkat(dirfd, lname, 0);
}

int sh_publish_lock(int dirfd, const char *name, uint64_t timeout_ns,
                    int *lockfd)
{
    char lname[NAME_MAX + 1];
    uint64_t deadline = (uint64_t)sh_now_ns() + timeout_ns;
    unsigned reopened = 0;
    int fd;

    if (sh_publish_lockname(name, lname, sizeof(lname)) != 0)
        return -1;
reopen:
    fd = openat(dirfd, lname, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    {
        /* Another user's file under the lock's name (it may be writable by
         * all and held by its owner): never wait for it (issue 30). */
        struct stat st;

        if (fstat(fd, &st) != 0) {
            sh_io_close_keep_errno(NULL, fd);
            return -1;
        }
        if (st.st_uid != geteuid()) {
            close(fd);
            errno = EPERM;
            return -1;
        }
    }
    for (;;) {
        struct timespec nap = { 0, 20L * 1000 * 1000 };

        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            int named = still_named(dirfd, lname, fd);

            if (named == 1) {
                *lockfd = fd;
                return 0;
            }
            sh_io_close_keep_errno(NULL, fd);
            if (named < 0)
                return -1;
            /* The holder removed the file before letting go: the lock is
             * the new file's. A few immediate tries even with no wait. */
            if (++reopened <= 3 || (uint64_t)sh_now_ns() < deadline)
                goto reopen;
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) {
            sh_io_close_keep_errno(NULL, fd);
            return -1;
        }
        if ((uint64_t)sh_now_ns() >= deadline) {
            close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        nanosleep(&nap, NULL);
    }
}

void sh_publish_unlock(int lockfd)
{
    if (lockfd >= 0)
        close(lockfd);
}

int sh_publish_unlock_remove(int dirfd, const char *name, int lockfd)
{
    char lname[NAME_MAX + 1];
    int rc = 0;

    if (lockfd < 0)
        return 0;
    if (sh_publish_lockname(name, lname, sizeof(lname)) != 0 ||
        (still_named(dirfd, lname, lockfd) == 1 && unlinkat(dirfd, lname, 0) != 0))
        rc = -1;
    sh_io_close_keep_errno(NULL, lockfd);
    return rc;
}

/* A temp file not written for this long is a dead run's, not the holder's. */
#define OWNER_IDLE_S 60

struct owner_ctx {
    time_t now, newest;
    int found;
    char job[NAME_MAX + 1], host[NAME_MAX + 1];
};

static void owner_one(const struct tmp_entry *t, void *arg)
{
    struct owner_ctx *c = arg;

    if (t->st.st_mtime + OWNER_IDLE_S < c->now || (c->found && t->st.st_mtime < c->newest))
        return;
    memcpy(c->job, t->job, sizeof(c->job));
    memcpy(c->host, t->host, sizeof(c->host));
    c->newest = t->st.st_mtime;
    c->found = 1;
}

int sh_publish_lock_owner(int dirfd, const char *name, char *out, size_t len)
{
    struct owner_ctx c;

    if (len == 0) {
        errno = EINVAL;
        return -1;
    }
    memset(&c, 0, sizeof(c));
    c.now = time(NULL);
    if (each_tmp(dirfd, name, owner_one, &c) != 0)
        return -1;
    if (!c.found) {
        errno = ENODATA;
        return -1;
    }
    snprintf(out, len, "job %s on %s", c.job, c.host);
    return 0;
}

void sh_publish_lock_foreign_text(char *out, size_t len, const char *lockpath,
                                  const char *owner, uid_t uid, int err)
{
    snprintf(out, len, "lock file %s belongs to %s (uid %u), not to you: %s (its owner "
             "or an administrator must remove it)", lockpath,
             owner != NULL && owner[0] != '\0' ? owner : "an unknown user", (unsigned)uid,
             strerror(err));
}

int sh_publish_lock_foreign(int dirfd, const char *name, const char *dst, int err,
                            char *out, size_t len)
{
    char lname[NAME_MAX + 1], path[PATH_MAX + NAME_MAX + 2], pwbuf[4096];
    struct passwd pw, *pwr = NULL;
    const char *slash = strrchr(dst, '/');
    struct stat st;

    if (sh_publish_lockname(name, lname, sizeof(lname)) != 0 ||
        fstatat(dirfd, lname, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -1;
    if (st.st_uid == geteuid()) {
        errno = EPERM;
        return -1;
    }
    if (slash == NULL)
        slash = dst;
    snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - dst), dst, lname);
    if (getpwuid_r(st.st_uid, &pw, pwbuf, sizeof(pwbuf), &pwr) != 0)
        pwr = NULL;
    sh_publish_lock_foreign_text(out, len, path, pwr != NULL ? pw.pw_name : NULL,
                                 st.st_uid, err);
    return 0;
}
