/* The node image cache's layout, names, job directories and entry lookup
 * (stagehand/cache.h). Library code: the plugin's staging process and
 * epilog (root), the agent and stagehand-cache run it. libc only. */
#include "config.h"
#include "stagehand/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "stagehand/local.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"

/* Is @s a decimal job id (no sign, no leading zero) that fits 64 bits? */
static int parse_jobid(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19 || (s[0] == '0' && len > 1))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

enum sh_cache_dst sh_cache_dst_kind(const char *cache, const char *dst, uint64_t *jobid)
{
    size_t clen = strlen(cache), jlen = strlen(SH_CACHE_JOBS);
    const char *rest, *slash;
    uint64_t id;

    if (clen == 0 || strncmp(dst, cache, clen) != 0 || dst[clen] != '/' ||
        strncmp(dst + clen + 1, SH_CACHE_JOBS, jlen) != 0 || dst[clen + 1 + jlen] != '/')
        return SH_CACHE_DST_NONE;
    rest = dst + clen + jlen + 2;
    if (rest[0] == '\0')
        return SH_CACHE_DST_NONE;
    slash = strchr(rest, '/');
    if (slash == NULL)
        return SH_CACHE_DST_SUBMIT;
    if (slash[1] == '\0' || strchr(slash + 1, '/') != NULL ||
        parse_jobid(rest, (size_t)(slash - rest), &id) != 0)
        return SH_CACHE_DST_NONE;
    if (jobid != NULL)
        *jobid = id;
    return SH_CACHE_DST_JOB;
}

int sh_cache_submit_dir(const char *cache, char *out, size_t len)
{
    if ((size_t)snprintf(out, len, "%s/%s", cache, SH_CACHE_JOBS) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int sh_cache_job_dir(const char *cache, uint64_t jobid, char *out, size_t len)
{
    if ((size_t)snprintf(out, len, "%s/%s/%" PRIu64, cache, SH_CACHE_JOBS, jobid) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* Add "@src:@dst" to @set, escaped as the option grammar wants. */
static int add_image(struct sh_spec_set *set, const char *src, const char *dst, char *err,
                     size_t errlen)
{
    char esrc[2 * PATH_MAX], edst[2 * PATH_MAX], value[4 * PATH_MAX + 2];

    if (sh_spec_escape_path(src, esrc, sizeof(esrc)) != 0 ||
        sh_spec_escape_path(dst, edst, sizeof(edst)) != 0 ||
        (size_t)snprintf(value, sizeof(value), "%s:%s", esrc, edst) >= sizeof(value)) {
        snprintf(err, errlen, "%s: path too long", src);
        errno = ENAMETOOLONG;
        return -1;
    }
    return sh_spec_add_value(set, value, NULL, err, errlen);
}

char *sh_cache_spec_for_job(const char *cache, uint64_t jobid, const char *spec, char *err,
                            size_t errlen)
{
    struct sh_spec_set *in = sh_spec_set_deserialize(spec, err, errlen), *out = NULL;
    char *text = NULL;
    int saved;

    if (in == NULL)
        return NULL;
    out = sh_spec_set_new();
    if (out == NULL)
        goto fail;
    for (size_t i = 0; i < sh_spec_set_count(in); i++) {
        const char *src = sh_spec_set_src(in, i), *dst = sh_spec_set_dst(in, i);
        char jdst[PATH_MAX], dir[PATH_MAX];
        uint64_t other = 0;

        switch (sh_cache_dst_kind(cache, dst, &other)) {
        case SH_CACHE_DST_SUBMIT:
            if (sh_cache_job_dir(cache, jobid, dir, sizeof(dir)) != 0 ||
                (size_t)snprintf(jdst, sizeof(jdst), "%s/%s", dir, strrchr(dst, '/') + 1) >=
                    sizeof(jdst)) {
                snprintf(err, errlen, "%s: the cache path is too long", dst);
                errno = ENAMETOOLONG;
                goto fail;
            }
            dst = jdst;
            break;
        case SH_CACHE_DST_JOB:
            if (other != jobid) {
                snprintf(err, errlen, "%s: another job's place in the cache", dst);
                errno = EINVAL;
                goto fail;
            }
            break;
        default:
            break;
        }
        if (add_image(out, src, dst, err, errlen) != 0)
            goto fail;
    }
    text = sh_spec_set_serialize(out);
fail:
    saved = errno;
    sh_spec_set_free(in);
    sh_spec_set_free(out);
    errno = saved;
    return text;
}

int sh_cache_key(enum sh_hash_algo algo, const uint8_t *digest, uint64_t size, char *out,
                 size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = sh_hash_len(algo), o = 0;

    if (n == 0 || len < 2 * n + 2) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        out[o++] = hex[digest[i] >> 4];
        out[o++] = hex[digest[i] & 15];
    }
    if ((size_t)snprintf(out + o, len - o, "-%" PRIu64, size) >= len - o) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* Make @name in @dirfd a root-owned directory of @mode, or verify the one
 * there: root's, a directory, not a symlink, given @mode (stagehand/local.h).
 * Returns an O_DIRECTORY descriptor, or -1 with errno (EPERM: wrong one). */
static int root_dir(int dirfd, const char *name, mode_t mode)
{
    return sh_make_owned_dir(dirfd, name, 0, 0, mode);
}

int sh_cache_prepare(const char *cache, uint64_t jobid, uid_t uid, gid_t gid, char *err,
                     size_t errlen)
{
    char parent[PATH_MAX], name[32];
    const char *base = strrchr(cache, '/');
    int pfd, cfd = -1, efd = -1, jfd = -1, ufd = -1, rc = -1, saved;
    struct stat sb;

    if (base == NULL || base[1] == '\0' || (size_t)(base - cache) >= sizeof(parent)) {
        snprintf(err, errlen, "cache=%s: not an absolute path", cache);
        errno = EINVAL;
        return -1;
    }
    snprintf(parent, sizeof(parent), "%.*s", base == cache ? 1 : (int)(base - cache), cache);
    pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
        snprintf(err, errlen, "cache=%s: %s: %s", cache, parent, strerror(errno));
        return -1;
    }
    cfd = root_dir(pfd, base + 1, 0711);
    if (cfd < 0) {
        snprintf(err, errlen, "cache=%s: %s", cache,
                 errno == EPERM ? "not a root-owned directory of mode 0711 or stricter"
                                : strerror(errno));
        goto out;
    }
    efd = root_dir(cfd, SH_CACHE_ENTRIES, 0700);
    jfd = efd < 0 ? -1 : root_dir(cfd, SH_CACHE_JOBS, 0711);
    if (efd < 0 || jfd < 0) {
        snprintf(err, errlen, "%s/%s: %s", cache, efd < 0 ? SH_CACHE_ENTRIES : SH_CACHE_JOBS,
                 errno == EPERM ? "not a root-owned directory of the expected mode"
                                : strerror(errno));
        goto out;
    }
    snprintf(name, sizeof(name), "%" PRIu64, jobid);
    if (mkdirat(jfd, name, 0700) == 0) {
        if (fchownat(jfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
            snprintf(err, errlen, "%s/%s/%s: chown: %s", cache, SH_CACHE_JOBS, name,
                     strerror(errno));
            goto out;
        }
    } else if (errno != EEXIST) {
        snprintf(err, errlen, "%s/%s/%s: %s", cache, SH_CACHE_JOBS, name, strerror(errno));
        goto out;
    }
    ufd = openat(jfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ufd < 0 || fstat(ufd, &sb) != 0 || sb.st_uid != uid || sb.st_gid != gid) {
        snprintf(err, errlen, "%s/%s/%s: not a directory of the job user", cache,
                 SH_CACHE_JOBS, name);
        errno = EPERM;
        goto out;
    }
    if (fchmod(ufd, 0700) != 0) {
        snprintf(err, errlen, "%s/%s/%s: chmod: %s", cache, SH_CACHE_JOBS, name,
                 strerror(errno));
        goto out;
    }
    rc = 0;
out:
    saved = errno;
    close(pfd);
    if (cfd >= 0)
        close(cfd);
    if (efd >= 0)
        close(efd);
    if (jfd >= 0)
        close(jfd);
    if (ufd >= 0)
        close(ufd);
    errno = saved;
    return rc;
}

/* Job @jobid's directory, opened without following a link, or -1. */
static int open_job_dir(const char *cache, uint64_t jobid)
{
    char dir[PATH_MAX];

    if (sh_cache_job_dir(cache, jobid, dir, sizeof(dir)) != 0)
        return -1;
    return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Remove what stands in @dirfd but the entries' links (regular files of
 * root, mode 0444) when @all is false; everything when @all. */
static int clean_dir(int dirfd, bool all)
{
    int fd = dup(dirfd), rc = 0;
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    struct dirent *de;

    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat sb;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!all && S_ISREG(sb.st_mode) && sb.st_uid == 0 && (sb.st_mode & 07777) == 0444)
            continue;
        if (unlinkat(dirfd, de->d_name, S_ISDIR(sb.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
            errno != ENOENT)
            rc = -1;
    }
    closedir(d);
    return rc;
}

int sh_cache_job_seal(const char *cache, uint64_t jobid)
{
    int fd = open_job_dir(cache, jobid), rc;

    if (fd < 0)
        return -1;
    rc = clean_dir(fd, false);
    if (fchmod(fd, 0500) != 0)
        rc = -1;
    close(fd);
    return rc;
}

int sh_cache_job_remove(const char *cache, uint64_t jobid)
{
    char jobs[PATH_MAX], name[32];
    int jfd, fd, rc = 0;

    if (sh_cache_submit_dir(cache, jobs, sizeof(jobs)) != 0)
        return -1;
    jfd = open(jobs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jfd < 0)
        return errno == ENOENT ? 0 : -1;
    snprintf(name, sizeof(name), "%" PRIu64, jobid);
    fd = openat(jfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? 0 : -1;
    } else {
        /* root may write in the user's 0500 directory (CAP_DAC_OVERRIDE) */
        rc = clean_dir(fd, true);
        close(fd);
        if (unlinkat(jfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
            rc = -1;
    }
    close(jfd);
    return rc;
}

int sh_cache_sweep_jobs(const char *cache, uint64_t self,
                        bool (*alive)(uint64_t jobid, void *arg), void *arg)
{
    char jobs[PATH_MAX];
    uint64_t dead[256];
    size_t n = 0;
    int jfd, dfd, removed = 0;
    DIR *d;
    struct dirent *de;

    if (sh_cache_submit_dir(cache, jobs, sizeof(jobs)) != 0)
        return -1;
    jfd = open(jobs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jfd < 0)
        return errno == ENOENT ? 0 : -1;
    dfd = dup(jfd);
    d = dfd < 0 ? NULL : fdopendir(dfd);
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        close(jfd);
        return -1;
    }
    /* collected first: removing while readdir(3) walks is unspecified */
    while ((de = readdir(d)) != NULL && n < sizeof(dead) / sizeof(dead[0])) {
        uint64_t id;

        if (parse_jobid(de->d_name, strlen(de->d_name), &id) == 0 && id != self &&
            !alive(id, arg))
            dead[n++] = id;
    }
    closedir(d);
    close(jfd);
    for (size_t i = 0; i < n; i++)
        if (sh_cache_job_remove(cache, dead[i]) == 0)
            removed++;
    return removed;
}

/* Is @name in @efd an entry: a root-owned regular file of mode 0444 whose
 * name is its key? Its stat into @sb. */
static bool is_entry(int efd, const char *name, struct stat *sb)
{
    if (name[0] == '.' || strchr(name, '-') == NULL)
        return false;
    if (fstatat(efd, name, sb, AT_SYMLINK_NOFOLLOW) != 0)
        return false;
    return S_ISREG(sb->st_mode) && sb->st_uid == 0 && (sb->st_mode & 07777) == 0444;
}

/* Open @cache's entries directory: its descriptor into *@efd and a stream
 * of it (a second descriptor) returned. Returns NULL with errno on error. */
static DIR *open_entries(const char *cache, int *efd)
{
    char dir[PATH_MAX];
    int dfd;
    DIR *d;

    if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", cache, SH_CACHE_ENTRIES) >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    *efd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*efd < 0)
        return NULL;
    dfd = dup(*efd);
    d = dfd < 0 ? NULL : fdopendir(dfd);
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        close(*efd);
        *efd = -1;
    }
    return d;
}

int sh_cache_find(const char *cache, const char *src, struct sh_cache_entry *e)
{
    struct sh_meta rec;
    struct sh_src_id id;
    int efd, found = -1;
    DIR *d;
    struct dirent *de;

    d = open_entries(cache, &efd);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        struct stat sb;
        int fd;

        if (!is_entry(efd, de->d_name, &sb) || strlen(de->d_name) >= sizeof(e->key))
            continue;
        fd = openat(efd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
        if (fd < 0)
            continue;
        /* the record is root's xattr, never a sidecar: no user wrote it. Of
         * several entries that held @src's path, the one of its newest
         * identity (latest ctime: no user can set it back) is the one it can
         * hold now. */
        if (fgetxattr(fd, SH_META_XATTR, NULL, 0) > 0 &&
            sh_meta_load(efd, de->d_name, fd, &rec, NULL) == 0 &&
            sh_meta_entry_source(fd, &rec, src, &id) &&
            (found != 0 || id.ctime.sec > e->rec.src.ctime.sec ||
             (id.ctime.sec == e->rec.src.ctime.sec && id.ctime.nsec > e->rec.src.ctime.nsec))) {
            snprintf(e->key, sizeof(e->key), "%s", de->d_name);
            e->rec = rec;
            e->rec.src = id; /* the identity of @src this entry was proven to hold */
            e->size = (uint64_t)sb.st_size;
            e->links = sb.st_nlink;
            e->atime = sh_ts_from(&sb.st_atim);
            found = 0;
        }
        close(fd);
    }
    closedir(d);
    close(efd);
    if (found != 0)
        errno = ENOENT;
    return found;
}

int sh_cache_link(const char *cache, const char *key, const char *dst)
{
    char entry[PATH_MAX];
    const struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, { .tv_nsec = UTIME_OMIT } };
    struct stat sb;
    uint64_t jobid;
    int efd, rc;

    if (sh_cache_dst_kind(cache, dst, &jobid) != SH_CACHE_DST_JOB || strchr(key, '/') != NULL) {
        errno = EINVAL;
        return -1;
    }
    if ((size_t)snprintf(entry, sizeof(entry), "%s/%s", cache, SH_CACHE_ENTRIES) >=
        sizeof(entry)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    efd = open(entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (efd < 0)
        return -1;
    if (!is_entry(efd, key, &sb)) {
        close(efd);
        errno = ENOENT;
        return -1;
    }
    {
        char dir[PATH_MAX];
        int jfd;

        if (sh_cache_job_dir(cache, jobid, dir, sizeof(dir)) != 0) {
            close(efd);
            return -1;
        }
        jfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (jfd < 0) {
            close(efd);
            return -1;
        }
        rc = linkat(efd, key, jfd, strrchr(dst, '/') + 1, 0);
        close(jfd);
    }
    if (rc == 0)
        (void)utimensat(efd, key, ts, AT_SYMLINK_NOFOLLOW); /* last use, for eviction */
    close(efd);
    return rc;
}

int sh_cache_evict_entry(int efd, const char *key)
{
    char hidden[SH_CACHE_KEY_MAX + 8];
    struct stat sb;

    if (strchr(key, '/') != NULL ||
        (size_t)snprintf(hidden, sizeof(hidden), ".evict-%s", key) >= sizeof(hidden)) {
        errno = EINVAL;
        return -1;
    }
    if (!is_entry(efd, key, &sb)) {
        errno = ENOENT;
        return -1;
    }
    if (sb.st_nlink > 1)
        return 0;
    if (renameat(efd, key, efd, hidden) != 0)
        return -1;
    if (fstatat(efd, hidden, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return -1;
    if (sb.st_nlink > 1) { /* a job linked it before the rename: keep it */
        if (linkat(efd, hidden, efd, key, 0) != 0 && errno != EEXIST)
            return -1;
        (void)unlinkat(efd, hidden, 0);
        return 0;
    }
    if (unlinkat(efd, hidden, 0) != 0)
        return -1;
    return 1;
}

struct lru {
    char key[SH_CACHE_KEY_MAX];
    uint64_t size;
    struct timespec used;
};

static int by_use(const void *a, const void *b)
{
    const struct lru *x = a, *y = b;

    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec)
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* sh_cache_evict; with @u not NULL also the bytes of the entries no job
 * holds and of those jobs hold added to @u (before any eviction). */
static int64_t evict(const char *cache, uint64_t bytes, struct sh_cache_usage *u,
                     void (*report)(const char *key, uint64_t size, void *arg), void *arg)
{
    struct lru *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t freed = 0;
    int efd;
    DIR *d;
    struct dirent *de;

    d = open_entries(cache, &efd);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        struct stat sb;

        if (!is_entry(efd, de->d_name, &sb))
            continue;
        if (u != NULL && sb.st_nlink > 1)
            u->held += (uint64_t)sb.st_size;
        else if (u != NULL)
            u->evictable += (uint64_t)sb.st_size;
        if (sb.st_nlink > 1 || strlen(de->d_name) >= SH_CACHE_KEY_MAX || bytes == 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct lru *nv = realloc(v, nc * sizeof(*v));

            if (nv == NULL)
                break; /* evict from what is listed so far */
            v = nv;
            cap = nc;
        }
        snprintf(v[n].key, sizeof(v[n].key), "%s", de->d_name);
        v[n].size = (uint64_t)sb.st_size;
        v[n].used = sb.st_atim;
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(v, n, sizeof(*v), by_use);
    for (size_t i = 0; i < n && freed < bytes; i++) {
        if (sh_cache_evict_entry(efd, v[i].key) != 1)
            continue; /* taken by a job meanwhile, or gone */
        freed += v[i].size;
        if (report != NULL)
            report(v[i].key, v[i].size, arg);
    }
    free(v);
    close(efd);
    return freed > INT64_MAX ? INT64_MAX : (int64_t)freed;
}

int64_t sh_cache_evict(const char *cache, uint64_t bytes,
                       void (*report)(const char *key, uint64_t size, void *arg), void *arg)
{
    return evict(cache, bytes, NULL, report, arg);
}

int64_t sh_cache_make_room(const char *cache, uint64_t incoming, uint64_t high_bytes,
                           uint64_t low_bytes, uint64_t max,
                           void (*report)(const char *key, uint64_t size, void *arg),
                           void *arg)
{
    struct statvfs fs;
    uint64_t used, need = 0;

    if (statvfs(cache, &fs) != 0)
        return -1;
    used = (uint64_t)(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
    if (used + incoming > high_bytes)
        need = used + incoming - (low_bytes < used + incoming ? low_bytes : used + incoming);
    if (max != 0) {
        struct sh_cache_usage u = { 0, 0, 0 };
        uint64_t in_entries;

        if (evict(cache, 0, &u, NULL, NULL) < 0)
            return -1;
        in_entries = u.evictable + u.held;
        if (in_entries + incoming > max && in_entries + incoming - max > need)
            need = in_entries + incoming - max;
    }
    return need == 0 ? 0 : sh_cache_evict(cache, need, report, arg);
}

int sh_cache_usage(const char *cache, struct sh_cache_usage *u)
{
    struct statvfs fs;

    *u = (struct sh_cache_usage){ 0, 0, 0 };
    if (statvfs(cache, &fs) != 0)
        return -1;
    u->fs_free = (uint64_t)fs.f_bavail * fs.f_frsize;
    return evict(cache, 0, u, NULL, NULL) < 0 ? -1 : 0;
}

bool sh_cache_fits(const char *cache, const struct sh_cache_usage *u, uint64_t incoming,
                   uint64_t max, const char *what, char *msg, size_t msglen)
{
    uint64_t room = u->fs_free + u->evictable;
    bool over_max = max != 0 && (u->held > max || incoming > max - u->held);
    char need[32], fr[32], ev[32], held[32], lim[32];

    if (incoming <= room && !over_max)
        return true;
    sh_format_size(incoming, need, sizeof(need));
    sh_format_size(u->fs_free, fr, sizeof(fr));
    sh_format_size(u->evictable, ev, sizeof(ev));
    sh_format_size(u->held, held, sizeof(held));
    if (over_max)
        snprintf(msg, msglen, "%.1200s: %s (%" PRIu64 " bytes) cannot fit in the node image "
                 "cache %.400s even after evicting every entry no running job uses: free %s "
                 "+ evictable %s, in use by running jobs %s, limit cache_max=%s (%" PRIu64
                 " bytes)", what, need, incoming, cache, fr, ev, held,
                 sh_format_size(max, lim, sizeof(lim)), max);
    else
        snprintf(msg, msglen, "%.1200s: %s (%" PRIu64 " bytes) cannot fit in the node image "
                 "cache %.400s even after evicting every entry no running job uses: free %s "
                 "+ evictable %s = %s (%" PRIu64 " bytes), in use by running jobs %s, limit "
                 "the filesystem's free space", what, need, incoming, cache, fr, ev,
                 sh_format_size(room, lim, sizeof(lim)), room, held);
    return false;
}
