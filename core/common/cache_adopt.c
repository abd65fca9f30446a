/* The node image cache: adopting a job's new copy as a root-owned entry
 * (stagehand/cache.h, doc/design.md §6). Library code for stagehand-cache,
 * which the plugin's staging process runs as root after a job's agent
 * published a copy into the job's cache directory. Hashes: not in the
 * plugin's library. */
#include "config.h"
#include "stagehand/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagehand/hash.h"
#include "stagehand/io.h"
#include "stagehand/meta.h"

/* The job directory of job-form @dst and @dst's name in it. Returns the
 * directory's descriptor, or -1 with errno. */
static int open_job_dst_dir(const char *cache, const char *dst, const char **name)
{
    char dir[PATH_MAX];
    uint64_t jobid;

    if (sh_cache_dst_kind(cache, dst, &jobid) != SH_CACHE_DST_JOB) {
        errno = EINVAL;
        return -1;
    }
    *name = strrchr(dst, '/') + 1;
    if (sh_cache_job_dir(cache, jobid, dir, sizeof(dir)) != 0)
        return -1;
    return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Seal the copy @fd of user @uid: root's, 0444, one name, and no process
 * holds it open for writing (a read lease is refused then, fcntl(2)
 * F_SETLEASE; a writable mapping counts as an open for writing). From here
 * on only root can change its bytes. Returns 0, or -1 with the reason. */
static int seal(int fd, uid_t uid, struct stat *sb, char *err, size_t errlen)
{
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode) || sb->st_uid != uid) {
        snprintf(err, errlen, "not a regular file of the job user");
        errno = EPERM;
        return -1;
    }
    if (fchown(fd, 0, 0) != 0 || fchmod(fd, 0444) != 0) {
        snprintf(err, errlen, "cannot make it root's: %s", strerror(errno));
        return -1;
    }
    if (fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
        int e = errno;

        snprintf(err, errlen, e == EAGAIN ? "a process holds it open for writing"
                                          : "cannot lease it: %s", strerror(e));
        errno = e == EAGAIN ? EBUSY : e;
        return -1;
    }
    (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    /* links made before the chown; protected_hardlinks stops later ones */
    if (fstat(fd, sb) != 0 || sb->st_nlink != 1) {
        snprintf(err, errlen, "it has %lu names", (unsigned long)sb->st_nlink);
        errno = EMLINK;
        return -1;
    }
    return 0;
}

/* Add source @id to the existing entry @key of @efd (its record's, or one
 * more of its further sources) and mark it used now. Under flock(2) of the
 * entry: two adoptions into one entry add both. Best effort: a source not
 * recorded only costs a later job a copy. */
static void add_source(int efd, const char *key, const struct sh_src_id *id)
{
    const struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, { .tv_nsec = UTIME_OMIT } };
    struct sh_meta_sources *s = malloc(sizeof(*s));
    struct sh_meta rec;
    int fd = openat(efd, key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOATIME);

    (void)utimensat(efd, key, ts, AT_SYMLINK_NOFOLLOW); /* last use, for eviction */
    if (fd < 0 || s == NULL || flock(fd, LOCK_EX) != 0)
        goto out;
    if (sh_meta_load(efd, key, fd, &rec, NULL) != 0)
        goto out;
    if (strcmp(rec.src.path, id->path) == 0) {
        rec.src = *id; /* the path's newest identity */
        (void)sh_meta_store_fd(fd, &rec);
    } else if (sh_meta_sources_load(fd, s) == 0 || errno == EINVAL ||
               errno == EPROTONOSUPPORT) {
        /* (an unreadable list was emptied by the load: started anew) */
        sh_meta_sources_add(s, id);
        (void)sh_meta_sources_store(fd, s);
    }
out:
    free(s);
    if (fd >= 0)
        close(fd); /* lets go of the flock */
}

/* Give the sealed copy @name in @jfd (descriptor @fd) its entry name @key in
 * the entries directory @efd; an entry of that key already there (another
 * job's or another source's copy of the same content) stays, gets source @id
 * (add_source), and @name becomes a link of it: a link under a temporary
 * name renamed over @name, so an entry evicted meanwhile (ENOENT) is made
 * again from this copy rather than lost. */
static int enter(int jfd, const char *name, int efd, const char *key,
                 const struct sh_src_id *id, char *err, size_t errlen)
{
    char tmp[NAME_MAX + 1];
    struct stat a, b;

    if ((size_t)snprintf(tmp, sizeof(tmp), ".adopt-%s", key) >= sizeof(tmp)) {
        snprintf(err, errlen, "entry name %s too long", key);
        errno = ENAMETOOLONG;
        return -1;
    }
    for (int tries = 0;; tries++) {
        if (linkat(jfd, name, efd, key, 0) == 0)
            return 0;
        if (errno != EEXIST || tries == 3) {
            snprintf(err, errlen, "cannot enter it as %s: %s", key, strerror(errno));
            return -1;
        }
        if (fstatat(efd, key, &a, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                continue; /* evicted just now: enter this copy */
            snprintf(err, errlen, "entry %s: %s", key, strerror(errno));
            return -1;
        }
        if (!S_ISREG(a.st_mode) || a.st_uid != 0 ||
            fstatat(jfd, name, &b, AT_SYMLINK_NOFOLLOW) != 0) {
            snprintf(err, errlen, "entry %s: not an entry", key);
            errno = EEXIST;
            return -1;
        }
        if (a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return 0;
        (void)unlinkat(jfd, tmp, 0);
        if (linkat(efd, key, jfd, tmp, 0) != 0) {
            if (errno == ENOENT)
                continue; /* evicted just now: enter this copy */
            snprintf(err, errlen, "cannot link entry %s: %s", key, strerror(errno));
            return -1;
        }
        if (renameat(jfd, tmp, jfd, name) != 0) {
            snprintf(err, errlen, "cannot link entry %s: %s", key, strerror(errno));
            (void)unlinkat(jfd, tmp, 0);
            return -1;
        }
        add_source(efd, key, id);
        return 0;
    }
}

int sh_cache_adopt(const char *cache, const char *dst, uid_t uid, enum sh_hash_algo algo,
                   const char *ref_digest, const struct sh_src_id *id, char *key,
                   char *err, size_t errlen)
{
    char edir[PATH_MAX], hex[SH_HASH_HEX_LEN], why[512];
    const char *name = NULL;
    struct sh_meta m;
    struct stat sb;
    int jfd, fd = -1, efd = -1, rc = -1, saved;

    jfd = open_job_dst_dir(cache, dst, &name);
    if (jfd < 0) {
        snprintf(err, errlen, "%s: not this job's place in the cache: %s", dst,
                 strerror(errno));
        return -1;
    }
    snprintf(why, sizeof(why), "%s", "");
    fd = openat(jfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof(why), "%s", strerror(errno));
        goto out;
    }
    if (seal(fd, uid, &sb, why, sizeof(why)) != 0)
        goto out;
    memset(&m, 0, sizeof(m));
    if (sh_hash_fd(sh_io_default(), fd, (uint64_t)sb.st_size, algo, SH_HASH_FD_BUF,
                   m.digest) < 0) {
        snprintf(why, sizeof(why), "cannot hash it: %s", strerror(errno));
        goto out;
    }
    sh_hash_hex(m.digest, sh_hash_len(algo), hex);
    if (ref_digest == NULL || strcmp(hex, ref_digest) != 0) {
        snprintf(why, sizeof(why), "its digest %s is not the reader's %s", hex,
                 ref_digest != NULL ? ref_digest : "(none)");
        errno = EBADMSG;
        goto out;
    }
    m.version = SH_META_VERSION;
    m.src = *id;
    m.algo = algo;
    m.dst_size = (uint64_t)sb.st_size;
    m.dst_mtime = sh_ts_from(&sb.st_mtim);
    /* root's record replaces the one the job user could write */
    if (sh_meta_store_fd(fd, &m) != 0) {
        snprintf(why, sizeof(why), "cannot record its source: %s", strerror(errno));
        goto out;
    }
    (void)sh_meta_remove_sidecar(jfd, name);
    if (sh_cache_key(algo, m.digest, (uint64_t)sb.st_size, key, SH_CACHE_KEY_MAX) != 0 ||
        (size_t)snprintf(edir, sizeof(edir), "%s/%s", cache, SH_CACHE_ENTRIES) >=
            sizeof(edir)) {
        snprintf(why, sizeof(why), "name too long");
        goto out;
    }
    efd = open(edir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (efd < 0) {
        snprintf(why, sizeof(why), "%s: %s", SH_CACHE_ENTRIES, strerror(errno));
        goto out;
    }
    if (fsync(fd) != 0 || enter(jfd, name, efd, key, id, why, sizeof(why)) != 0)
        goto out;
    (void)fsync(efd);
    rc = 0;
out:
    saved = errno;
    if (rc != 0) {
        snprintf(err, errlen, "%s: not taken into the cache: %s", dst, why);
        (void)unlinkat(jfd, name, 0);
    }
    if (fd >= 0)
        close(fd);
    if (efd >= 0)
        close(efd);
    close(jfd);
    errno = saved;
    return rc;
}
