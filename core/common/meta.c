/* The metadata record and the one decision whether DST is current (stagehand/meta.h). Library
 * code: the plugin, the agent and the engine. */
#include "config.h"
#include "stagehand/meta.h"
#include "stagehand/ref.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "stagehand/publish.h"
#include "stagehand/size.h"

#define META_MAGIC "stagehand-meta"

struct sh_ts sh_ts_from(const struct timespec *ts)
{
    struct sh_ts t = { (int64_t)ts->tv_sec, (uint32_t)ts->tv_nsec };

    return t;
}

int sh_meta_encode(const struct sh_meta *m, char *buf, size_t len)
{
    char hex[SH_HASH_HEX_LEN];
    const char *algo = sh_hash_name(m->algo);
    int n;

    if (algo == NULL || strchr(m->src.path, '\n') != NULL ||
        m->src.path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    sh_hash_hex(m->digest, sh_hash_len(m->algo), hex);
    n = snprintf(buf, len,
                 META_MAGIC " %u\n"
                 "src %s\n"
                 "src_size %" PRIu64 "\n"
                 "src_mtime %" PRId64 ".%09" PRIu32 "\n"
                 "src_ctime %" PRId64 ".%09" PRIu32 "\n"
                 "hash %s %s\n"
                 "dst_size %" PRIu64 "\n"
                 "dst_mtime %" PRId64 ".%09" PRIu32 "\n",
                 (unsigned)SH_META_VERSION, m->src.path, m->src.size,
                 m->src.mtime.sec, m->src.mtime.nsec,
                 m->src.ctime.sec, m->src.ctime.nsec,
                 algo, hex, m->dst_size,
                 m->dst_mtime.sec, m->dst_mtime.nsec);
    if (n < 0 || (size_t)n >= len) {
        errno = ENOBUFS;
        return -1;
    }
    return n;
}

/* Line reader over a bounded buffer. */
struct cursor {
    const char *p;
    const char *end;
};

/* Return the next line (without '\n') in @out (@len bytes) after checking it
 * starts with "@key ", stripping the key. */
static int next_field(struct cursor *c, const char *key, char *out, size_t len)
{
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    size_t klen = strlen(key);
    size_t llen;

    if (nl == NULL)
        return -1;
    llen = (size_t)(nl - c->p);
    if (llen <= klen || strncmp(c->p, key, klen) != 0 || c->p[klen] != ' ' ||
        llen - klen - 1 >= len)
        return -1;
    memcpy(out, c->p + klen + 1, llen - klen - 1);
    out[llen - klen - 1] = '\0';
    if (memchr(out, '\0', llen - klen - 1) != NULL)
        return -1;
    c->p = nl + 1;
    return 0;
}

static int parse_ts(const char *s, struct sh_ts *t)
{
    char *end;
    long long sec;
    unsigned long long nsec;

    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '-'))
        return -1;
    errno = 0;
    sec = strtoll(s, &end, 10);
    if (errno != 0 || *end != '.' || strlen(end + 1) != 9 ||
        end[1] < '0' || end[1] > '9')
        return -1;
    nsec = strtoull(end + 1, &end, 10);
    if (errno != 0 || *end != '\0' || nsec > 999999999ULL)
        return -1;
    t->sec = (int64_t)sec;
    t->nsec = (uint32_t)nsec;
    return 0;
}

int sh_meta_decode(const char *buf, size_t len, struct sh_meta *m)
{
    struct cursor c = { buf, buf + len };
    char field[PATH_MAX + 64];
    char *sp;
    uint64_t version;
    size_t flen;

    memset(m, 0, sizeof(*m));
    if (next_field(&c, META_MAGIC, field, sizeof(field)) != 0 ||
        sh_parse_u64(field, &version) != 0)
        goto bad;
    if (version != SH_META_VERSION) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    m->version = (uint32_t)version;
    if (next_field(&c, "src", field, sizeof(field)) != 0 ||
        (flen = strlen(field)) >= sizeof(m->src.path) ||
        (field[0] != '/' && !sh_ref_is_image(field)))
        goto bad;
    memcpy(m->src.path, field, flen + 1);
    if (next_field(&c, "src_size", field, sizeof(field)) != 0 ||
        sh_parse_u64(field, &m->src.size) != 0 ||
        next_field(&c, "src_mtime", field, sizeof(field)) != 0 ||
        parse_ts(field, &m->src.mtime) != 0 ||
        next_field(&c, "src_ctime", field, sizeof(field)) != 0 ||
        parse_ts(field, &m->src.ctime) != 0 ||
        next_field(&c, "hash", field, sizeof(field)) != 0)
        goto bad;
    sp = strchr(field, ' ');
    if (sp == NULL)
        goto bad;
    *sp = '\0';
    if (sh_hash_parse(field, &m->algo) != 0 ||
        sh_hash_unhex(sp + 1, m->digest, sh_hash_len(m->algo)) != 0)
        goto bad;
    if (next_field(&c, "dst_size", field, sizeof(field)) != 0 ||
        sh_parse_u64(field, &m->dst_size) != 0 ||
        next_field(&c, "dst_mtime", field, sizeof(field)) != 0 ||
        parse_ts(field, &m->dst_mtime) != 0)
        goto bad;
    /* Nothing may follow but one optional NUL. */
    if (c.p != c.end && !(c.end - c.p == 1 && *c.p == '\0'))
        goto bad;
    return 0;
bad:
    errno = EINVAL;
    return -1;
}

int sh_meta_sidecar_name(const char *name, char *out, size_t len)
{
    int n = snprintf(out, len, ".%s.stagehand", name);

    if (n < 0 || (size_t)n >= len || n > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int sh_meta_store_fd(int fd, const struct sh_meta *m)
{
    char buf[SH_META_MAX_LEN];
    int n = sh_meta_encode(m, buf, sizeof(buf));

    if (n < 0)
        return -1;
    return fsetxattr(fd, SH_META_XATTR, buf, (size_t)n, 0);
}

int sh_meta_store_sidecar(const struct sh_io_ops *io, int dirfd,
                          const char *name, const char *jobid,
                          const char *host, const struct sh_meta *m)
{
    char side[NAME_MAX + 1];
    char buf[SH_META_MAX_LEN];
    int n;

    if (sh_meta_sidecar_name(name, side, sizeof(side)) != 0)
        return -1;
    n = sh_meta_encode(m, buf, sizeof(buf));
    if (n < 0)
        return -1;
    /* owner-only: the record names SRC and its digest (issue 30) */
    return sh_publish_buffer(io, dirfd, side, jobid, host, buf, (size_t)n, 0600);
}

int sh_meta_remove_sidecar(int dirfd, const char *name)
{
    char side[NAME_MAX + 1];

    if (sh_meta_sidecar_name(name, side, sizeof(side)) != 0)
        return -1;
    if (unlinkat(dirfd, side, 0) != 0 && errno != ENOENT)
        return -1;
    return 0;
}

static int load_sidecar(int dirfd, const char *name, struct sh_meta *m)
{
    char side[NAME_MAX + 1];
    char buf[SH_META_MAX_LEN];
    struct stat st;
    ssize_t n;
    int fd;

    if (sh_meta_sidecar_name(name, side, sizeof(side)) != 0)
        return -1;
    fd = openat(dirfd, side, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            errno = ENODATA;
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_uid != getuid() && st.st_uid != 0)) {
        close(fd);
        errno = EINVAL;     /* not a sidecar we wrote */
        return -1;
    }
    n = sh_io_pread_full(NULL, fd, buf, sizeof(buf), 0);
    sh_io_close_keep_errno(NULL, fd);
    if (n < 0)
        return -1;
    return sh_meta_decode(buf, (size_t)n, m);
}

int sh_meta_load(int dirfd, const char *name, int dstfd, struct sh_meta *m,
                 int *from_sidecar)
{
    char buf[SH_META_MAX_LEN];
    ssize_t n;

    if (from_sidecar != NULL)
        *from_sidecar = 0;
    n = fgetxattr(dstfd, SH_META_XATTR, buf, sizeof(buf));
    if (n >= 0)
        return sh_meta_decode(buf, (size_t)n, m);
    if (errno != ENODATA && errno != ENOTSUP) /* EOPNOTSUPP is ENOTSUP on Linux */
        return -1;
    if (from_sidecar != NULL)
        *from_sidecar = 1;
    return load_sidecar(dirfd, name, m);
}


#define SOURCES_MAGIC "stagehand-sources"

static int ts_eq(struct sh_ts a, struct sh_ts b)
{
    return a.sec == b.sec && a.nsec == b.nsec;
}

/* Drop the oldest source of @s. */
static void sources_drop_oldest(struct sh_meta_sources *s)
{
    memmove(&s->id[0], &s->id[1], (s->n - 1) * sizeof(s->id[0]));
    s->n--;
}

int sh_meta_sources_encode(struct sh_meta_sources *s, char *buf, size_t len)
{
    size_t limit = len < SH_META_SOURCES_MAX_LEN + 1 ? len : SH_META_SOURCES_MAX_LEN + 1;

    for (size_t i = 0; i < s->n; i++)
        if (s->id[i].path[0] == '\0' || strchr(s->id[i].path, '\n') != NULL) {
            errno = EINVAL;
            return -1;
        }
    for (;;) {
        int n = snprintf(buf, len, SOURCES_MAGIC " 1\n");
        size_t o = n > 0 ? (size_t)n : 0;

        for (size_t i = 0; i < s->n && o < limit; i++) {
            const struct sh_src_id *id = &s->id[i];

            n = snprintf(buf + o, len - o,
                         "src %" PRIu64 " %" PRId64 ".%09" PRIu32 " %" PRId64 ".%09" PRIu32
                         " %s\n",
                         id->size, id->mtime.sec, id->mtime.nsec, id->ctime.sec,
                         id->ctime.nsec, id->path);
            o += n > 0 ? (size_t)n : limit;
        }
        if (o < limit)
            return (int)o;
        if (s->n == 0) {
            errno = ENOBUFS;
            return -1;
        }
        if (s->n == 1) {
            errno = len <= SH_META_SOURCES_MAX_LEN ? ENOBUFS : EINVAL;
            return -1;
        }
        sources_drop_oldest(s);
    }
}

/* Parse "<u64> <ts> <ts> <path>" of a sources line into @id. */
static int parse_source(char *line, struct sh_src_id *id)
{
    char *f[3], *p = line;

    for (int k = 0; k < 3; k++) {
        char *sp = strchr(p, ' ');

        if (sp == NULL)
            return -1;
        *sp = '\0';
        f[k] = p;
        p = sp + 1;
    }
    memset(id, 0, sizeof(*id));
    if (sh_parse_u64(f[0], &id->size) != 0 || parse_ts(f[1], &id->mtime) != 0 ||
        parse_ts(f[2], &id->ctime) != 0 || p[0] == '\0' || strlen(p) >= sizeof(id->path) ||
        (p[0] != '/' && !sh_ref_is_image(p)))
        return -1;
    memcpy(id->path, p, strlen(p) + 1);
    return 0;
}

int sh_meta_sources_decode(const char *buf, size_t len, struct sh_meta_sources *s)
{
    struct cursor c = { buf, buf + len };
    char field[PATH_MAX + 128];
    uint64_t version;

    s->n = 0;
    if (next_field(&c, SOURCES_MAGIC, field, sizeof(field)) != 0 ||
        sh_parse_u64(field, &version) != 0)
        goto bad;
    if (version != 1) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    while (c.p < c.end && *c.p != '\0') {
        if (s->n == SH_META_SOURCES_MAX || next_field(&c, "src", field, sizeof(field)) != 0 ||
            parse_source(field, &s->id[s->n]) != 0)
            goto bad;
        s->n++;
    }
    if (c.p != c.end && !(c.end - c.p == 1 && *c.p == '\0'))
        goto bad;
    return 0;
bad:
    s->n = 0;
    errno = EINVAL;
    return -1;
}

void sh_meta_sources_add(struct sh_meta_sources *s, const struct sh_src_id *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->id[i].path, id->path) == 0) {
            /* the newest identity of a path goes last: dropped last */
            memmove(&s->id[i], &s->id[i + 1], (s->n - i - 1) * sizeof(s->id[0]));
            s->n--;
            break;
        }
    if (s->n == SH_META_SOURCES_MAX)
        sources_drop_oldest(s);
    s->id[s->n++] = *id;
}

const struct sh_src_id *sh_meta_sources_find(const struct sh_meta_sources *s, const char *path)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->id[i].path, path) == 0)
            return &s->id[i];
    return NULL;
}

int sh_meta_sources_load(int fd, struct sh_meta_sources *s)
{
    char buf[SH_META_SOURCES_MAX_LEN + 1];
    ssize_t n = fgetxattr(fd, SH_META_SOURCES_XATTR, buf, sizeof(buf));

    s->n = 0;
    if (n < 0)
        return errno == ENODATA ? 0 : -1;
    return sh_meta_sources_decode(buf, (size_t)n, s);
}

int sh_meta_sources_store(int fd, struct sh_meta_sources *s)
{
    char buf[SH_META_SOURCES_MAX_LEN + 1];
    int n;

    if (s->n == 0)
        return fremovexattr(fd, SH_META_SOURCES_XATTR) == 0 || errno == ENODATA ? 0 : -1;
    n = sh_meta_sources_encode(s, buf, sizeof(buf));
    if (n < 0)
        return -1;
    return fsetxattr(fd, SH_META_SOURCES_XATTR, buf, (size_t)n, 0);
}

int sh_meta_entry_source(int fd, const struct sh_meta *rec, const char *path,
                         struct sh_src_id *out)
{
    struct sh_meta_sources *s;
    const struct sh_src_id *id;
    int found = 0;

    if (strcmp(rec->src.path, path) == 0) {
        *out = rec->src;
        return 1;
    }
    s = malloc(sizeof(*s)); /* 32 KiB: not on a check child's stack */
    if (s == NULL)
        return 0;
    if (sh_meta_sources_load(fd, s) == 0 && (id = sh_meta_sources_find(s, path)) != NULL) {
        *out = *id;
        found = 1;
    }
    free(s);
    return found;
}

int sh_meta_is_current(enum sh_check check, const struct sh_src_id *src,
                       const struct stat *dst, uid_t uid,
                       const struct sh_meta *rec, const uint8_t *dst_digest,
                       const char **why)
{
    bool image = sh_ref_is_image(src->path);

    if (check == SH_CHECK_NEVER) {
        *why = "check=never";
        return 0;
    }
    if (dst == NULL) {
        *why = "destination missing";
        return 0;
    }
    if (!S_ISREG(dst->st_mode)) {
        *why = "destination is not a regular file";
        return 0;
    }
    if (dst->st_uid != uid && dst->st_uid != 0) {
        *why = "destination owned by another user";
        return 0;
    }
    /* A registry image's identity is its pinned reference: neither its size
     * nor times are known before an import, so the record decides (and
     * check=size acts as meta). */
    if (image)
        goto record;
    if ((uint64_t)dst->st_size != src->size) {
        *why = "destination size differs from source";    /* case F07 */
        return 0;
    }
    if (check == SH_CHECK_SIZE) {
        *why = "same size (check=size)";
        return 1;
    }
record:
    if (rec == NULL) {
        *why = "no stagehand metadata on destination";
        return 0;
    }
    if (strcmp(rec->src.path, src->path) != 0) {
        *why = image ? "destination holds another image or digest"
                     : "destination was staged from another source path";
        return 0;
    }
    if (!image && (rec->src.size != src->size || !ts_eq(rec->src.mtime, src->mtime) ||
                   !ts_eq(rec->src.ctime, src->ctime))) {
        *why = "source changed since the destination was staged";
        return 0;
    }
    if (rec->dst_size != (uint64_t)dst->st_size ||
        !ts_eq(rec->dst_mtime, sh_ts_from(&dst->st_mtim))) {
        *why = "destination modified after it was staged";
        return 0;
    }
    if (check == SH_CHECK_CONTENT) {
        if (dst_digest == NULL ||
            memcmp(dst_digest, rec->digest, sh_hash_len(rec->algo)) != 0) {
            *why = "destination content does not match its recorded digest";
            return 0;
        }
        *why = "metadata and content match";
        return 1;
    }
    *why = "metadata match";
    return 1;
}

int sh_meta_dst_current(int dirfd, const char *name, int fd, const struct stat *st,
                        struct sh_dst_check *c)
{
    uint8_t digest[SH_HASH_MAX_LEN];
    const uint8_t *dig = NULL;
    /* a registry image's size is the record's (sh_meta_is_current) */
    bool image = sh_ref_is_image(c->src->path);
    uint64_t size;
    mode_t want;
    int rc;

    memset(&c->rec, 0, sizeof(c->rec));
    c->have_rec = c->sidecar = c->tightened = 0;
    c->why = "";
    if (fd >= 0 && st != NULL && S_ISREG(st->st_mode) && (c->check != SH_CHECK_SIZE || image) &&
        c->check != SH_CHECK_NEVER &&
        sh_meta_load(dirfd, name, fd, &c->rec, &c->sidecar) == 0)
        c->have_rec = 1;
    /* a cache entry (root's record, never a sidecar) holds each source root
     * proved it to hold: the one of SRC's path decides (issue 34) */
    if (c->have_rec && !c->sidecar && st->st_uid == 0 &&
        strcmp(c->rec.src.path, c->src->path) != 0) {
        struct sh_src_id other;

        if (sh_meta_entry_source(fd, &c->rec, c->src->path, &other))
            c->rec.src = other;
    }
    size = image ? c->rec.dst_size : c->src->size;
    if (c->have_rec && c->check == SH_CHECK_CONTENT && c->digest != NULL &&
        (uint64_t)st->st_size == size && c->digest(fd, size, c->rec.algo, digest) > 0)
        dig = digest;
    if (!sh_meta_is_current(c->check, c->src, st, c->uid, c->have_rec ? &c->rec : NULL, dig,
                            &c->why))
        return 0;
    if (c->cache_entry && st->st_uid == 0)
        return 1;
    want = sh_copy_mode(c->src->mode, c->umask_bits, st->st_gid == c->src->gid);
    rc = fd >= 0 ? sh_publish_tighten(fd, st, want) : -1;
    c->tightened = rc == 1;
    if (rc < 0 && ((st->st_mode & 0777) & ~want) != 0) {
        c->why = "destination is readable by more users than the source and cannot be "
                 "chmod'ed";
        return 0;
    }
    return 1;
}
