/* Metadata record: encode/decode, xattr and sidecar storage, "is current"
 * (doc/design.md §2 step 4; cases F07, F29). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "stagehand/meta.h"

#include "check_main.h"

static void sample(struct sh_meta *m)
{
    memset(m, 0, sizeof(*m));
    m->version = SH_META_VERSION;
    strcpy(m->src.path, "/shared/images/py torch.sqsh");
    m->src.size = (1ULL << 32) + 1;
    m->src.mtime = (struct sh_ts){ 1700000000, 123456789 };
    m->src.ctime = (struct sh_ts){ 1700000001, 5 };
    m->algo = SH_HASH_XXH3;
    for (int i = 0; i < 16; i++)
        m->digest[i] = (uint8_t)(i * 17);
    m->dst_size = m->src.size;
    m->dst_mtime = (struct sh_ts){ 1700000100, 999999999 };
}

START_TEST(encode_decode_roundtrip)
{
    struct sh_meta a, b;
    char buf[SH_META_MAX_LEN];
    int n;

    sample(&a);
    n = sh_meta_encode(&a, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_nonnull(strstr(buf, "stagehand-meta 1\nsrc /shared/images/py torch.sqsh\n"));
    ck_assert_ptr_nonnull(strstr(buf, "src_mtime 1700000000.123456789\n"));
    ck_assert_ptr_nonnull(strstr(buf, "src_ctime 1700000001.000000005\n"));
    ck_assert_int_eq(sh_meta_decode(buf, (size_t)n, &b), 0);
    ck_assert_str_eq(b.src.path, a.src.path);
    ck_assert_uint_eq(b.src.size, a.src.size);
    ck_assert_int_eq(b.src.mtime.sec, a.src.mtime.sec);
    ck_assert_uint_eq(b.src.mtime.nsec, a.src.mtime.nsec);
    ck_assert_uint_eq(b.src.ctime.nsec, 5);
    ck_assert_int_eq(b.algo, SH_HASH_XXH3);
    ck_assert_mem_eq(b.digest, a.digest, 16);
    ck_assert_uint_eq(b.dst_size, a.dst_size);
    ck_assert_uint_eq(b.dst_mtime.nsec, 999999999);
    /* a trailing NUL (as some tools store it) is accepted */
    ck_assert_int_eq(sh_meta_decode(buf, (size_t)n + 1, &b), 0);

    a.algo = SH_HASH_SHA256;
    n = sh_meta_encode(&a, buf, sizeof(buf));
    ck_assert_int_eq(sh_meta_decode(buf, (size_t)n, &b), 0);
    ck_assert_int_eq(b.algo, SH_HASH_SHA256);
}
END_TEST

START_TEST(encode_rejects)
{
    struct sh_meta a;
    char buf[SH_META_MAX_LEN];

    sample(&a);
    ck_assert_int_eq(sh_meta_encode(&a, buf, 40), -1);
    ck_assert_int_eq(errno, ENOBUFS);
    strcpy(a.src.path, "/a\nb");
    ck_assert_int_eq(sh_meta_encode(&a, buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, EINVAL);
    sample(&a);
    a.algo = (enum sh_hash_algo)9;
    ck_assert_int_eq(sh_meta_encode(&a, buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

static int decode_str(const char *s)
{
    struct sh_meta m;

    return sh_meta_decode(s, strlen(s), &m);
}

START_TEST(decode_rejects)
{
    struct sh_meta a;
    char good[SH_META_MAX_LEN], bad[SH_META_MAX_LEN + 64];
    int n;

    sample(&a);
    n = sh_meta_encode(&a, good, sizeof(good));
    /* every truncation of a valid record is rejected */
    for (int cut = 0; cut < n; cut++) {
        ck_assert_int_eq(sh_meta_decode(good, (size_t)cut, &a), -1);
        ck_assert_int_eq(errno, EINVAL);
    }
    snprintf(bad, sizeof(bad), "%sextra 1\n", good);
    ck_assert_int_eq(decode_str(bad), -1);
    ck_assert_int_eq(decode_str(""), -1);
    ck_assert_int_eq(decode_str("garbage\n"), -1);
    /* an unknown version is not "malformed": a newer stagehand wrote it */
    ck_assert_int_eq(decode_str("stagehand-meta 2\nsrc /x\n"), -1);
    ck_assert_int_eq(errno, EPROTONOSUPPORT);
    strcpy(bad, good);
    *strstr(bad, "xxh3 ") = 'y';
    ck_assert_int_eq(decode_str(bad), -1);
    strcpy(bad, good);
    memcpy(strstr(bad, "xxh3 ") + 5, "zz", 2);
    ck_assert_int_eq(decode_str(bad), -1);
    strcpy(bad, good);
    memcpy(strstr(bad, ".123456789"), ".12345678x", 10);
    ck_assert_int_eq(decode_str(bad), -1);
    strcpy(bad, good);
    memcpy(strstr(bad, "src /"), "src x", 5);       /* relative source path */
    ck_assert_int_eq(decode_str(bad), -1);
}
END_TEST

/* Build a stat of DST consistent with the sample record. */
static void dst_stat(struct stat *st, const struct sh_meta *m)
{
    memset(st, 0, sizeof(*st));
    st->st_mode = S_IFREG | 0644;
    st->st_uid = 1001;
    st->st_size = (off_t)m->dst_size;
    st->st_mtim.tv_sec = (time_t)m->dst_mtime.sec;
    st->st_mtim.tv_nsec = (long)m->dst_mtime.nsec;
}

START_TEST(is_current_matrix)
{
    struct sh_meta rec, other;
    struct sh_src_id src;
    struct stat st;
    const char *why;
    uint8_t dig[SH_HASH_MAX_LEN];

    sample(&rec);
    src = rec.src;
    dst_stat(&st, &rec);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 1);
    /* root-owned DST is trusted, another user's is not */
    st.st_uid = 0;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 1);
    st.st_uid = 1002;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_str_eq(why, "destination owned by another user");
    dst_stat(&st, &rec);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_NEVER, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, NULL, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, NULL,
                                        NULL, &why), 0);
    /* case F07: zero-length or wrong-size DST is re-staged, in every mode */
    st.st_size = 0;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_SIZE, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    dst_stat(&st, &rec);
    /* size mode needs no record (unsafe, compatibility only) */
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_SIZE, &src, &st, 1001, NULL,
                                        NULL, &why), 1);
    /* DST rewritten in place after publish: its mtime moved */
    st.st_mtim.tv_nsec = 0;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_str_eq(why, "destination modified after it was staged");
    dst_stat(&st, &rec);
    /* source rewritten: ctime moved even if mtime was reset */
    src.ctime.nsec++;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    ck_assert_str_eq(why, "source changed since the destination was staged");
    src = rec.src;
    strcpy(src.path, "/shared/other.sqsh");
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    src = rec.src;
    /* content: the digest computed now must match the record */
    memcpy(dig, rec.digest, sizeof(dig));
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_CONTENT, &src, &st, 1001, &rec,
                                        dig, &why), 1);
    dig[3] ^= 1;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_CONTENT, &src, &st, 1001, &rec,
                                        dig, &why), 0);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_CONTENT, &src, &st, 1001, &rec,
                                        NULL, &why), 0);
    other = rec;
    st.st_mode = S_IFLNK | 0777;    /* case F17b: a planted symlink */
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_SIZE, &src, &st, 1001, &other,
                                        NULL, &why), 0);
}
END_TEST

/* A registry image (issue 36): the record's source is the reference pinned
 * to its manifest digest; a copy is current when the digest is the same and
 * DST is as published, whatever the (unknown) source size and times. */
START_TEST(image_identity)
{
    static const char pinned[] = "docker://reg.x:5000/team/app@sha256:"
                                 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    struct sh_meta rec, back;
    struct sh_src_id src;
    struct stat st;
    char buf[SH_META_MAX_LEN];
    const char *why;
    int n;

    sample(&rec);
    snprintf(rec.src.path, sizeof(rec.src.path), "%s", pinned);
    n = sh_meta_encode(&rec, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(sh_meta_decode(buf, (size_t)n, &back), 0);
    ck_assert_str_eq(back.src.path, pinned);
    /* what the leader sends: the pinned reference, no size or times */
    memset(&src, 0, sizeof(src));
    snprintf(src.path, sizeof(src.path), "%s", pinned);
    src.mode = 0644;
    dst_stat(&st, &rec);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec, NULL, &why), 1);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_SIZE, &src, &st, 1001, &rec, NULL, &why), 1);
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_SIZE, &src, &st, 1001, NULL, NULL, &why), 0);
    /* the tag now names another digest */
    src.path[strlen(src.path) - 1] = 'e';
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec, NULL, &why), 0);
    ck_assert_str_eq(why, "destination holds another image or digest");
    /* DST changed after it was published */
    snprintf(src.path, sizeof(src.path), "%s", pinned);
    st.st_size++;
    ck_assert_int_eq(sh_meta_is_current(SH_CHECK_META, &src, &st, 1001, &rec, NULL, &why), 0);
    ck_assert_str_eq(why, "destination modified after it was staged");
    /* a relative or scheme-less source is still refused in a record */
    buf[strlen("stagehand-meta 1\nsrc ")] = 'x';
    ck_assert_int_eq(sh_meta_decode(buf, (size_t)n, &back), -1);
}
END_TEST

START_TEST(check_names)
{
    enum sh_check c;

    ck_assert_int_eq(sh_check_parse("content", &c), 0);
    ck_assert_int_eq(c, SH_CHECK_CONTENT);
    ck_assert_int_eq(sh_check_parse("Meta", &c), -1);
    ck_assert_str_eq(sh_check_name(SH_CHECK_NEVER), "never");
}
END_TEST

/* A node image cache entry's further sources (issue 34): the text, the
 * replacement of a path's identity, the oldest dropped when full or long. */
START_TEST(sources_encode_decode)
{
    static struct sh_meta_sources a, b;
    struct sh_src_id id;
    char buf[SH_META_SOURCES_MAX_LEN + 1];
    int n;

    memset(&a, 0, sizeof(a));
    memset(&id, 0, sizeof(id));
    strcpy(id.path, "/shared/images/copy of rootfs.sqsh");
    id.size = 3000000;
    id.mtime = (struct sh_ts){ 1700000000, 1 };
    id.ctime = (struct sh_ts){ 1700000002, 999999999 };
    sh_meta_sources_add(&a, &id);
    n = sh_meta_sources_encode(&a, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_str_eq(buf, "stagehand-sources 1\nsrc 3000000 1700000000.000000001 "
                          "1700000002.999999999 /shared/images/copy of rootfs.sqsh\n");
    ck_assert_int_eq(sh_meta_sources_decode(buf, (size_t)n, &b), 0);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_str_eq(b.id[0].path, id.path);
    ck_assert_uint_eq(b.id[0].size, id.size);
    ck_assert_int_eq(b.id[0].ctime.nsec, 999999999);
    ck_assert_ptr_nonnull(sh_meta_sources_find(&b, id.path));
    ck_assert_ptr_null(sh_meta_sources_find(&b, "/shared/images/rootfs.sqsh"));

    /* the same path again: its newest identity replaces the old, last */
    strcpy(id.path, "/b.sqsh");
    sh_meta_sources_add(&a, &id);
    strcpy(id.path, "/shared/images/copy of rootfs.sqsh");
    id.size = 5;
    sh_meta_sources_add(&a, &id);
    ck_assert_uint_eq(a.n, 2);
    ck_assert_str_eq(a.id[0].path, "/b.sqsh");
    ck_assert_uint_eq(a.id[1].size, 5);

    /* full: the oldest goes */
    for (int i = 0; i < SH_META_SOURCES_MAX; i++) {
        snprintf(id.path, sizeof(id.path), "/s%d", i);
        sh_meta_sources_add(&a, &id);
    }
    ck_assert_uint_eq(a.n, SH_META_SOURCES_MAX);
    ck_assert_str_eq(a.id[0].path, "/s0");
    ck_assert_ptr_null(sh_meta_sources_find(&a, "/b.sqsh"));
    n = sh_meta_sources_encode(&a, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(sh_meta_sources_decode(buf, (size_t)n, &b), 0);
    ck_assert_uint_eq(b.n, SH_META_SOURCES_MAX);
    ck_assert_int_eq(sh_meta_sources_decode(buf, (size_t)n + 1, &b), 0); /* + NUL */

    /* too long together: the oldest go until it fits */
    a.n = 0;
    for (int i = 0; i < 3; i++) {
        memset(id.path, 'a' + i, 1000);
        id.path[0] = '/';
        id.path[1000] = '\0';
        sh_meta_sources_add(&a, &id);
    }
    n = sh_meta_sources_encode(&a, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_int_le(n, SH_META_SOURCES_MAX_LEN);
    ck_assert_uint_eq(a.n, 2);
    ck_assert_int_eq(a.id[0].path[1], 'b');

    /* rejects */
    strcpy(a.id[0].path, "/x\ny");
    ck_assert_int_eq(sh_meta_sources_encode(&a, buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, EINVAL);
#define DEC(s) sh_meta_sources_decode(s, strlen(s), &b)
    ck_assert_int_eq(DEC("stagehand-sources 1\n"), 0);
    ck_assert_uint_eq(b.n, 0);
    ck_assert_int_eq(DEC("stagehand-sources 2\nsrc 1 1.000000000 1.000000000 /x\n"), -1);
    ck_assert_int_eq(errno, EPROTONOSUPPORT);
    ck_assert_int_eq(DEC("stagehand-meta 1\n"), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(DEC("stagehand-sources 1\nsrc 1 1.000000000 1.000000000 rel\n"), -1);
    ck_assert_int_eq(DEC("stagehand-sources 1\nsrc 1 1.0 1.000000000 /x\n"), -1);
    ck_assert_int_eq(DEC("stagehand-sources 1\nsrc 1 1.000000000 /x\n"), -1);
    ck_assert_int_eq(DEC("stagehand-sources 1\nsrc 1 1.000000000 1.000000000 /x"), -1);
    ck_assert_int_eq(DEC("stagehand-sources 1\nsrc x 1.000000000 1.000000000 /x\n"), -1);
    ck_assert_uint_eq(b.n, 0);
#undef DEC
}
END_TEST

static char dir[64];
static int dirfd_;

static void setup(void)
{
    strcpy(dir, "/tmp/check_meta.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
}

static void teardown(void)
{
    unlinkat(dirfd_, "img", 0);
    unlinkat(dirfd_, ".img.stagehand", 0);
    close(dirfd_);
    rmdir(dir);
}

START_TEST(store_load_xattr_and_sidecar)
{
    struct sh_meta a, b;
    int fd = openat(dirfd_, "img", O_RDWR | O_CREAT, 0644);
    int side = -1;

    ck_assert_int_ge(fd, 0);
    sample(&a);
    ck_assert_int_eq(sh_meta_load(dirfd_, "img", fd, &b, &side), -1);
    ck_assert_int_eq(errno, ENODATA);
    if (sh_meta_store_fd(fd, &a) == 0) {
        ck_assert_int_eq(sh_meta_load(dirfd_, "img", fd, &b, &side), 0);
        ck_assert_int_eq(side, 0);
        ck_assert_str_eq(b.src.path, a.src.path);
        fremovexattr(fd, SH_META_XATTR);
    } else {
        ck_assert(errno == ENOTSUP || errno == EOPNOTSUPP);
    }
    /* forced sidecar (filesystems without user xattrs) */
    a.src.size = 77;
    ck_assert_int_eq(sh_meta_store_sidecar(NULL, dirfd_, "img", "1", "n1", &a), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stagehand", F_OK, 0), 0);
    ck_assert_int_eq(sh_meta_load(dirfd_, "img", fd, &b, &side), 0);
    ck_assert_int_eq(side, 1);
    ck_assert_uint_eq(b.src.size, 77);
    ck_assert_int_eq(sh_meta_remove_sidecar(dirfd_, "img"), 0);
    ck_assert_int_eq(sh_meta_remove_sidecar(dirfd_, "img"), 0);  /* absent: ok */
    ck_assert_int_eq(sh_meta_load(dirfd_, "img", fd, &b, &side), -1);
    ck_assert_int_eq(errno, ENODATA);
    /* a corrupt record is reported, not trusted */
    ck_assert_int_eq(fsetxattr(fd, SH_META_XATTR, "junk", 4, 0) == 0 ||
                     errno == ENOTSUP || errno == EOPNOTSUPP, 1);
    if (fgetxattr(fd, SH_META_XATTR, NULL, 0) == 4) {
        ck_assert_int_eq(sh_meta_load(dirfd_, "img", fd, &b, &side), -1);
        ck_assert_int_eq(errno, EINVAL);
    }
    close(fd);
}
END_TEST

static uint8_t want_digest[SH_HASH_MAX_LEN];

static int digest_same(int fd, uint64_t size, enum sh_hash_algo algo, uint8_t *out)
{
    (void)fd;
    (void)size;
    memcpy(out, want_digest, sh_hash_len(algo));
    return (int)sh_hash_len(algo);
}

static int digest_other(int fd, uint64_t size, enum sh_hash_algo algo, uint8_t *out)
{
    (void)fd;
    (void)size;
    memset(out, 0x5a, sh_hash_len(algo));
    return (int)sh_hash_len(algo);
}

/* The one decision whether DST is current (the agent's vote and the
 * engine's pre-check both call it): record, size, content through the
 * caller's hash, and a looser copy made as strict as a new one (issue 30). */
START_TEST(dst_current_decides)
{
    struct sh_dst_check c;
    struct sh_meta rec;
    struct sh_src_id src;
    struct stat st;
    int fd = openat(dirfd_, "img", O_RDWR | O_CREAT | O_TRUNC, 0644);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello", 5), 5);
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    sample(&rec);
    rec.src.size = 5;
    rec.dst_size = 5;
    rec.dst_mtime = sh_ts_from(&st.st_mtim);
    ck_assert_int_eq(sh_meta_store_sidecar(NULL, dirfd_, "img", "1", "n1", &rec), 0);
    src = rec.src;
    src.mode = 0600;
    src.gid = (uint32_t)st.st_gid;
    memcpy(want_digest, rec.digest, sizeof(want_digest));
    memset(&c, 0, sizeof(c));
    c.check = SH_CHECK_META;
    c.src = &src;
    c.uid = geteuid();
    c.umask_bits = 022;

    /* metadata match: current, record from the sidecar, 0644 made 0600 */
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    ck_assert_int_eq(c.have_rec, 1);
    ck_assert_int_eq(c.sidecar, 1);
    ck_assert_int_eq(c.tightened, 1);
    ck_assert_str_eq(c.why, "metadata match");
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    /* as strict already: nothing to change */
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    ck_assert_int_eq(c.tightened, 0);

    /* content: the caller's hash decides; without one, never current */
    c.check = SH_CHECK_CONTENT;
    c.digest = digest_same;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    c.digest = digest_other;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    ck_assert_str_eq(c.why, "destination content does not match its recorded digest");
    c.digest = NULL;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);

    /* the source changed since */
    c.check = SH_CHECK_META;
    src.mtime.sec++;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    ck_assert_str_eq(c.why, "source changed since the destination was staged");
    src.mtime.sec--;

    /* no record: check=size still decides by size, check=meta never */
    ck_assert_int_eq(sh_meta_remove_sidecar(dirfd_, "img"), 0);
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    ck_assert_int_eq(c.have_rec, 0);
    ck_assert_str_eq(c.why, "no stagehand metadata on destination");
    c.check = SH_CHECK_SIZE;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    ck_assert_int_eq(c.have_rec, 0);

    /* a looser copy that cannot be tightened (no fd here) is copied again */
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", -1, &st, &c), 0);
    ck_assert_str_eq(c.why, "destination is readable by more users than the source and "
                            "cannot be chmod'ed");

    /* missing DST, check=never */
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, NULL, &c), 0);
    ck_assert_str_eq(c.why, "destination missing");
    c.check = SH_CHECK_NEVER;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    close(fd);
}
END_TEST

/* An entry (root's record) of one source, and a further one added: the
 * current-copy check finds it current for either source as recorded, for no
 * other, and an entry written before (no further sources) keeps its one. */
START_TEST(entry_sources_decide)
{
    static struct sh_meta_sources more;
    struct sh_dst_check c;
    struct sh_meta rec;
    struct sh_src_id src, out;
    struct stat st;
    int fd = openat(dirfd_, "img", O_RDWR | O_CREAT | O_TRUNC, 0444);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello", 5), 5);
    ck_assert_int_eq(fstat(fd, &st), 0);
    if (st.st_uid != 0) {
        close(fd);
        return; /* entries are root's: only root's run checks this */
    }
    sample(&rec);
    rec.src.size = 5;
    rec.dst_size = 5;
    rec.dst_mtime = sh_ts_from(&st.st_mtim);
    if (sh_meta_store_fd(fd, &rec) != 0) {
        close(fd);
        return; /* no user xattrs here: entries need them */
    }
    ck_assert_int_eq(sh_meta_entry_source(fd, &rec, rec.src.path, &out), 1);
    ck_assert_int_eq(sh_meta_entry_source(fd, &rec, "/other.sqsh", &out), 0);
    memset(&more, 0, sizeof(more));
    src = rec.src;
    strcpy(src.path, "/other.sqsh");
    src.mtime.sec += 100;
    sh_meta_sources_add(&more, &src);
    ck_assert_int_eq(sh_meta_sources_store(fd, &more), 0);
    ck_assert_int_eq(sh_meta_entry_source(fd, &rec, "/other.sqsh", &out), 1);
    ck_assert_int_eq(out.mtime.sec, src.mtime.sec);

    memset(&c, 0, sizeof(c));
    c.check = SH_CHECK_META;
    c.src = &src;
    c.uid = 0;
    c.cache_entry = 1;
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    src.ctime.nsec++; /* the other source changed since */
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    ck_assert_str_eq(c.why, "source changed since the destination was staged");
    strcpy(src.path, "/third.sqsh");
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 0);
    ck_assert_str_eq(c.why, "destination was staged from another source path");
    src = rec.src; /* the record's own source */
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    more.n = 0; /* removed: as an entry written before */
    ck_assert_int_eq(sh_meta_sources_store(fd, &more), 0);
    ck_assert_int_eq(sh_meta_sources_store(fd, &more), 0);
    ck_assert_int_eq(sh_meta_sources_load(fd, &more), 0);
    ck_assert_uint_eq(more.n, 0);
    ck_assert_int_eq(sh_meta_dst_current(dirfd_, "img", fd, &st, &c), 1);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("meta");
    TCase *tc = tcase_create("record");
    TCase *tf = tcase_create("store");

    tcase_add_test(tc, encode_decode_roundtrip);
    tcase_add_test(tc, encode_rejects);
    tcase_add_test(tc, decode_rejects);
    tcase_add_test(tc, is_current_matrix);
    tcase_add_test(tc, check_names);
    tcase_add_test(tc, image_identity);
    tcase_add_test(tc, sources_encode_decode);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(tf, setup, teardown);
    tcase_add_test(tf, store_load_xattr_and_sidecar);
    tcase_add_test(tf, dst_current_decides);
    tcase_add_test(tf, entry_sources_decide);
    suite_add_tcase(s, tf);
    return sh_check_run(s);
}
