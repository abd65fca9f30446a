/* Unit tests for the node image cache (stagehand/cache.h): names, the job
 * form of a spec, the directories' owners and modes, adoption of a job's
 * copy (sealing, the lease, the digest), sharing one entry between jobs,
 * lookup by source, and a job directory's seal and removal. Adoption and
 * ownership need root; as another user those tests pass vacuously with a
 * note. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "stagehand/cache.h"
#include "stagehand/hash.h"
#include "stagehand/spec.h"

#define USER_UID 65534
#define USER_GID 65534

static char base[64], cache[128];

static void setup(void)
{
    snprintf(base, sizeof(base), "/tmp/sh_cache_test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
    ck_assert_int_eq(chmod(base, 0755), 0);
    snprintf(cache, sizeof(cache), "%s/cache", base);
}

static void teardown(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(dst_kinds)
{
    uint64_t id = 0;

    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job/a.sqsh", &id), SH_CACHE_DST_SUBMIT);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job/42/a.sqsh", &id), SH_CACHE_DST_JOB);
    ck_assert_uint_eq(id, 42);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/entries/k-1", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job/042/a", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job/x1/a", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/c/job/1/a/b", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("/c", "/cx/job/a", NULL), SH_CACHE_DST_NONE);
    ck_assert_int_eq(sh_cache_dst_kind("", "/job/a", NULL), SH_CACHE_DST_NONE);
}
END_TEST

START_TEST(spec_job_form)
{
    struct sh_spec_set *set = sh_spec_set_new(), *back;
    char err[256], *wire, *job;

    ck_assert_int_eq(sh_spec_add_value(set, "/shared/a.sqsh,/shared/b.sqsh:/nvme/b.sqsh",
                                       "/c/job", err, sizeof(err)), 0);
    wire = sh_spec_set_serialize(set);
    ck_assert_ptr_nonnull(wire);
    job = sh_cache_spec_for_job("/c", 77, wire, err, sizeof(err));
    ck_assert_msg(job != NULL, "%s", err);
    back = sh_spec_set_deserialize(job, err, sizeof(err));
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(sh_spec_set_count(back), 2);
    ck_assert_str_eq(sh_spec_set_dst(back, 0), "/c/job/77/a.sqsh");
    ck_assert_str_eq(sh_spec_set_src(back, 0), "/shared/a.sqsh");
    ck_assert_str_eq(sh_spec_set_dst(back, 1), "/nvme/b.sqsh");
    free(job);
    /* another job's place is refused */
    {
        char *w2 = sh_spec_set_serialize(back);

        job = sh_cache_spec_for_job("/c", 78, w2, err, sizeof(err));
        ck_assert_ptr_null(job);
        ck_assert_int_eq(errno, EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "another job"));
        free(w2);
    }
    sh_spec_set_free(back);
    sh_spec_set_free(set);
    free(wire);
}
END_TEST

START_TEST(keys)
{
    uint8_t d[SH_HASH_MAX_LEN];
    char key[SH_CACHE_KEY_MAX];

    memset(d, 0xab, sizeof(d));
    ck_assert_int_eq(sh_cache_key(SH_HASH_XXH3, d, 1234, key, sizeof(key)), 0);
    ck_assert_str_eq(key, "abababababababababababababababab-1234");
    ck_assert_int_eq(sh_cache_key(SH_HASH_SHA256, d, 0, key, sizeof(key)), 0);
    ck_assert_uint_eq(strlen(key), 66);
    ck_assert_int_eq(sh_cache_key(SH_HASH_XXH3, d, 1, key, 10), -1);
}
END_TEST

/* A job's copy as the engine leaves it: the user's file in the job's
 * directory. */
static void user_copy(uint64_t jobid, const char *name, const char *text, char *dst,
                      size_t len)
{
    char dir[256];
    int fd;

    ck_assert_int_eq(sh_cache_job_dir(cache, jobid, dir, sizeof(dir)), 0);
    snprintf(dst, len, "%s/%s", dir, name);
    fd = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    ck_assert_int_eq(fchown(fd, USER_UID, USER_GID), 0);
    close(fd);
}

static void digest_of(const char *text, char *hex)
{
    struct sh_hash *h = sh_hash_new(SH_HASH_XXH3);
    uint8_t d[SH_HASH_MAX_LEN];

    ck_assert_int_eq(sh_hash_update(h, text, strlen(text)), 0);
    ck_assert_int_ge(sh_hash_final(h, d), 0);
    sh_hash_free(h);
    sh_hash_hex(d, sh_hash_len(SH_HASH_XXH3), hex);
}

static struct sh_src_id src_id(const char *path)
{
    struct sh_src_id id;

    memset(&id, 0, sizeof(id));
    snprintf(id.path, sizeof(id.path), "%s", path);
    id.size = 5;
    id.mtime.sec = 1000;
    id.ctime.sec = 2000;
    id.mode = 0644;
    id.gid = (uint32_t)-1;
    return id;
}

START_TEST(prepare_dirs)
{
    char err[512], path[PATH_MAX];
    struct stat sb;

    if (geteuid() != 0)
        return;
    ck_assert_msg(sh_cache_prepare(cache, 5, USER_UID, USER_GID, err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_int_eq(stat(cache, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0711);
    snprintf(path, sizeof(path), "%s/entries", cache);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0700);
    snprintf(path, sizeof(path), "%s/job/5", cache);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_uid, USER_UID);
    ck_assert_uint_eq(sb.st_mode & 07777, 0700);
    /* a step's staging finds the sealed 0500 directory and opens it again */
    ck_assert_int_eq(sh_cache_job_seal(cache, 5), 0);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0500);
    ck_assert_int_eq(sh_cache_prepare(cache, 5, USER_UID, USER_GID, err, sizeof(err)), 0);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0700);
    /* a job directory of another user is refused */
    ck_assert_int_eq(sh_cache_prepare(cache, 5, 1234, 1234, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, EPERM);
    /* a user's cache directory, or a symlink as the cache, is refused */
    ck_assert_int_eq(chown(cache, USER_UID, USER_GID), 0);
    ck_assert_int_eq(sh_cache_prepare(cache, 6, USER_UID, USER_GID, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, EPERM);
    snprintf(path, sizeof(path), "%s/link", base);
    ck_assert_int_eq(symlink(cache, path), 0);
    ck_assert_int_eq(sh_cache_prepare(path, 6, USER_UID, USER_GID, err, sizeof(err)), -1);
}
END_TEST

START_TEST(adopt_share_find)
{
    char err[512], dst1[PATH_MAX], dst2[PATH_MAX], dst3[PATH_MAX], hex[SH_HASH_HEX_LEN];
    char key[SH_CACHE_KEY_MAX], key2[SH_CACHE_KEY_MAX], entry[PATH_MAX];
    struct sh_src_id id = src_id("/shared/a.sqsh");
    struct sh_cache_entry e;
    struct stat a, b;

    if (geteuid() != 0)
        return;
    for (uint64_t j = 1; j <= 3; j++)
        ck_assert_int_eq(sh_cache_prepare(cache, j, USER_UID, USER_GID, err, sizeof(err)),
                         0);
    digest_of("hello", hex);
    user_copy(1, "a.sqsh", "hello", dst1, sizeof(dst1));
    ck_assert_msg(sh_cache_adopt(cache, dst1, USER_UID, SH_HASH_XXH3, hex, &id, key, err,
                                 sizeof(err)) == 0, "%s", err);
    snprintf(entry, sizeof(entry), "%s/entries/%s", cache, key);
    ck_assert_int_eq(stat(entry, &a), 0);
    ck_assert_uint_eq(a.st_uid, 0);
    ck_assert_uint_eq(a.st_mode & 07777, 0444);
    ck_assert_uint_eq(a.st_nlink, 2);
    ck_assert_int_eq(stat(dst1, &b), 0);
    ck_assert_uint_eq(a.st_ino, b.st_ino);
    /* found by its source, with root's record */
    ck_assert_int_eq(sh_cache_find(cache, "/shared/a.sqsh", &e), 0);
    ck_assert_str_eq(e.key, key);
    ck_assert_int_eq(e.rec.src.ctime.sec, 2000);
    ck_assert_int_eq(sh_cache_find(cache, "/shared/other.sqsh", &e), -1);
    ck_assert_int_eq(errno, ENOENT);
    /* a second job's copy of the same content: one entry, one inode */
    user_copy(2, "a.sqsh", "hello", dst2, sizeof(dst2));
    ck_assert_int_eq(sh_cache_adopt(cache, dst2, USER_UID, SH_HASH_XXH3, hex, &id, key2, err,
                                    sizeof(err)), 0);
    ck_assert_str_eq(key, key2);
    ck_assert_int_eq(stat(dst2, &b), 0);
    ck_assert_uint_eq(a.st_ino, b.st_ino);
    /* a third job links the entry it proved current */
    snprintf(dst3, sizeof(dst3), "%s/job/3/a.sqsh", cache);
    ck_assert_int_eq(sh_cache_link(cache, key, dst3), 0);
    ck_assert_int_eq(stat(dst3, &b), 0);
    ck_assert_uint_eq(a.st_ino, b.st_ino);
    ck_assert_uint_eq(b.st_nlink, 4);
    ck_assert_int_eq(sh_cache_link(cache, key, dst3), -1);
    ck_assert_int_eq(errno, EEXIST);
    ck_assert_int_eq(sh_cache_link(cache, "nokey-1", dst3), -1);
    ck_assert_int_eq(sh_cache_link(cache, key, entry), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* the epilog's removal drops the job's reference */
    ck_assert_int_eq(sh_cache_job_remove(cache, 3), 0);
    ck_assert_int_eq(stat(entry, &a), 0);
    ck_assert_uint_eq(a.st_nlink, 3);
    ck_assert_int_eq(sh_cache_job_remove(cache, 3), 0);
}
END_TEST

START_TEST(adopt_refusals)
{
    char err[512], dst[PATH_MAX], hex[SH_HASH_HEX_LEN], key[SH_CACHE_KEY_MAX], other[PATH_MAX];
    struct sh_src_id id = src_id("/shared/a.sqsh");
    struct stat sb;
    int wfd;

    if (geteuid() != 0)
        return;
    ck_assert_int_eq(sh_cache_prepare(cache, 1, USER_UID, USER_GID, err, sizeof(err)), 0);
    digest_of("hello", hex);
    /* the digest is not the reader's: the user changed the copy */
    user_copy(1, "a.sqsh", "hellO", dst, sizeof(dst));
    ck_assert_int_eq(sh_cache_adopt(cache, dst, USER_UID, SH_HASH_XXH3, hex, &id, key, err,
                                    sizeof(err)), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(err, "not the reader's"));
    ck_assert_int_eq(stat(dst, &sb), -1);
    /* a process holds it open for writing: it could change it later */
    user_copy(1, "a.sqsh", "hello", dst, sizeof(dst));
    wfd = open(dst, O_WRONLY);
    ck_assert_int_ge(wfd, 0);
    ck_assert_int_eq(sh_cache_adopt(cache, dst, USER_UID, SH_HASH_XXH3, hex, &id, key, err,
                                    sizeof(err)), -1);
    ck_assert_int_eq(errno, EBUSY);
    ck_assert_ptr_nonnull(strstr(err, "open for writing"));
    close(wfd);
    ck_assert_int_eq(stat(dst, &sb), -1);
    /* a second name the user made */
    user_copy(1, "a.sqsh", "hello", dst, sizeof(dst));
    snprintf(other, sizeof(other), "%s/job/1/b", cache);
    ck_assert_int_eq(link(dst, other), 0);
    ck_assert_int_eq(sh_cache_adopt(cache, dst, USER_UID, SH_HASH_XXH3, hex, &id, key, err,
                                    sizeof(err)), -1);
    ck_assert_int_eq(errno, EMLINK);
    /* another user's file */
    unlink(other);
    user_copy(1, "a.sqsh", "hello", dst, sizeof(dst));
    ck_assert_int_eq(sh_cache_adopt(cache, dst, 1234, SH_HASH_XXH3, hex, &id, key, err,
                                    sizeof(err)), -1);
    ck_assert_int_eq(errno, EPERM);
    /* not a job-form DST */
    ck_assert_int_eq(sh_cache_adopt(cache, "/nvme/a", USER_UID, SH_HASH_XXH3, hex, &id, key,
                                    err, sizeof(err)), -1);
}
END_TEST

START_TEST(seal_cleans)
{
    char err[512], dst[PATH_MAX], hex[SH_HASH_HEX_LEN], key[SH_CACHE_KEY_MAX], lock[PATH_MAX];
    struct sh_src_id id = src_id("/shared/a.sqsh");
    struct stat sb;
    int fd;

    if (geteuid() != 0)
        return;
    ck_assert_int_eq(sh_cache_prepare(cache, 9, USER_UID, USER_GID, err, sizeof(err)), 0);
    digest_of("hello", hex);
    user_copy(9, "a.sqsh", "hello", dst, sizeof(dst));
    ck_assert_int_eq(sh_cache_adopt(cache, dst, USER_UID, SH_HASH_XXH3, hex, &id, key, err,
                                    sizeof(err)), 0);
    snprintf(lock, sizeof(lock), "%s/job/9/.a.sqsh.lock", cache);
    fd = open(lock, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(sh_cache_job_seal(cache, 9), 0);
    ck_assert_int_eq(stat(lock, &sb), -1);
    ck_assert_int_eq(stat(dst, &sb), 0);
    ck_assert_int_eq(sh_cache_job_remove(cache, 9), 0);
    ck_assert_int_eq(stat(dst, &sb), -1);
}
END_TEST

static bool odd_alive(uint64_t jobid, void *arg)
{
    (*(int *)arg)++;
    return (jobid & 1) != 0;
}

/* References of jobs that are gone are dropped; running jobs' and the
 * caller's own stay. */
START_TEST(sweep_dead_jobs)
{
    char err[512], path[256];
    struct stat sb;
    int asked = 0;

    if (geteuid() != 0)
        return;
    for (uint64_t j = 1; j <= 4; j++)
        ck_assert_int_eq(sh_cache_prepare(cache, j, USER_UID, USER_GID, err, sizeof(err)), 0);
    ck_assert_int_eq(sh_cache_job_seal(cache, 4), 0);
    ck_assert_int_eq(sh_cache_sweep_jobs(cache, 2, odd_alive, &asked), 1);
    ck_assert_int_eq(asked, 3);
    for (uint64_t j = 1; j <= 4; j++) {
        snprintf(path, sizeof(path), "%s/job/%u", cache, (unsigned)j);
        ck_assert_int_eq(stat(path, &sb) == 0, j != 4);
    }
}
END_TEST

static void count_evicted(const char *key, uint64_t size, void *arg)
{
    (void)key;
    *(uint64_t *)arg += size;
}

/* Eviction: least recently used first, never an entry a job holds, and the
 * race with a linker is settled by the link count after the rename. */
/* As root: job 9's directories and entries aa-100, bb-200 (, cc-300) of
 * those sizes, root's and 0444, least recently used first (atimes 1000 + i). */
static void make_entries(int n)
{
    static const char *const names[] = { "aa-100", "bb-200", "cc-300" };
    char err[512], path[256];

    ck_assert_int_eq(sh_cache_prepare(cache, 9, USER_UID, USER_GID, err, sizeof(err)), 0);
    for (int i = 0; i < n; i++) {
        const struct timespec ts[2] = { { .tv_sec = 1000 + i }, { .tv_nsec = UTIME_OMIT } };
        int fd;

        snprintf(path, sizeof(path), "%s/entries/%s", cache, names[i]);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0444);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)(100 * (i + 1))), 0);
        ck_assert_int_eq(fchmod(fd, 0444), 0);
        close(fd);
        ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
    }
}

START_TEST(evict_lru)
{
    char path[256], dst[256];
    struct stat sb;
    uint64_t seen = 0;
    int efd;

    if (geteuid() != 0)
        return;
    make_entries(3);
    /* job 9 holds the oldest: it stays; bb goes first, then cc */
    snprintf(dst, sizeof(dst), "%s/job/9/a.sqsh", cache);
    ck_assert_int_eq(sh_cache_link(cache, "aa-100", dst), 0);
    snprintf(path, sizeof(path), "%s/entries/aa-100", cache);
    ck_assert_int_eq(utimensat(AT_FDCWD, path,
                               (const struct timespec[2]){ { .tv_sec = 1 }, { .tv_nsec = UTIME_OMIT } },
                               0), 0);
    ck_assert_int_eq(sh_cache_evict(cache, 150, count_evicted, &seen), 200);
    ck_assert_uint_eq(seen, 200);
    snprintf(path, sizeof(path), "%s/entries/bb-200", cache);
    ck_assert_int_eq(stat(path, &sb), -1);
    snprintf(path, sizeof(path), "%s/entries/cc-300", cache);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sh_cache_evict(cache, UINT64_MAX, NULL, NULL), 300);
    snprintf(path, sizeof(path), "%s/entries/aa-100", cache);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_nlink, 2);
    snprintf(path, sizeof(path), "%s/entries", cache);
    efd = open(path, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(efd, 0);
    ck_assert_int_eq(sh_cache_evict_entry(efd, "aa-100"), 0); /* held: kept */
    ck_assert_int_eq(sh_cache_evict_entry(efd, "zz-1"), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(sh_cache_job_remove(cache, 9), 0);
    ck_assert_int_eq(sh_cache_evict_entry(efd, "aa-100"), 1);
    close(efd);
}
END_TEST

/* cache_max: entries (100 + 200 bytes) plus 150 incoming above a 400-byte
 * limit evict the least recently used unused entry; marks far away evict
 * nothing. */
START_TEST(make_room_max)
{
    char path[256];
    struct stat sb;

    if (geteuid() != 0)
        return;
    make_entries(2);
    ck_assert_int_eq(sh_cache_make_room(cache, 50, UINT64_MAX, UINT64_MAX, 400, NULL, NULL), 0);
    ck_assert_int_eq(sh_cache_make_room(cache, 150, UINT64_MAX, UINT64_MAX, 400, NULL, NULL),
                     100);
    snprintf(path, sizeof(path), "%s/entries/aa-100", cache);
    ck_assert_int_eq(stat(path, &sb), -1);
    snprintf(path, sizeof(path), "%s/entries/bb-200", cache);
    ck_assert_int_eq(stat(path, &sb), 0);
}
END_TEST

/* The pre-check: the filesystem's free space plus the evictable entries,
 * and cache_max less the entries running jobs hold; the message names the
 * images, the bytes needed, free + evictable, held and the limit. */
START_TEST(fits_precheck)
{
    const struct sh_cache_usage u = { .fs_free = 600, .evictable = 300, .held = 200 };
    char msg[2048] = "";

    ck_assert(sh_cache_fits("/c", &u, 900, 0, "/s/a.sqsh", msg, sizeof(msg)));
    ck_assert(sh_cache_fits("/c", &u, 800, 1000, "/s/a.sqsh", msg, sizeof(msg)));
    ck_assert_str_eq(msg, "");
    /* free + evictable = 900 < 901 */
    ck_assert(!sh_cache_fits("/c", &u, 901, 0, "/s/a.sqsh", msg, sizeof(msg)));
    ck_assert_ptr_nonnull(strstr(msg, "/s/a.sqsh: 901 B (901 bytes) cannot fit in "
                                      "the node image cache /c even after evicting"));
    ck_assert_ptr_nonnull(strstr(msg, "free 600 B + evictable 300 B = 900 B (900 bytes)"));
    ck_assert_ptr_nonnull(strstr(msg, "in use by running jobs 200 B"));
    ck_assert_ptr_nonnull(strstr(msg, "limit the filesystem's free space"));
    /* held 200 + 801 > cache_max 1000, though the filesystem has room */
    ck_assert(!sh_cache_fits("/c", &u, 801, 1000, "/s/b.sqsh", msg, sizeof(msg)));
    ck_assert_ptr_nonnull(strstr(msg, "/s/b.sqsh: 801 B (801 bytes) cannot fit"));
    ck_assert_ptr_nonnull(strstr(msg, "free 600 B + evictable 300 B, in use by running jobs "
                                      "200 B, limit cache_max=1000 B (1000 bytes)"));
    /* held above the limit already: nothing fits */
    ck_assert(!sh_cache_fits("/c", &u, 1, 100, "/s/c.sqsh", msg, sizeof(msg)));
    ck_assert_ptr_nonnull(strstr(msg, "cache_max=100 B"));
}
END_TEST

/* sh_cache_usage: entries split by whether a job holds them. */
START_TEST(usage_held)
{
    char path[256], dst[256];
    struct sh_cache_usage u;

    if (geteuid() != 0)
        return;
    make_entries(2);
    snprintf(dst, sizeof(dst), "%s/job/9/b.sqsh", cache);
    ck_assert_int_eq(sh_cache_link(cache, "bb-200", dst), 0);
    ck_assert_int_eq(sh_cache_usage(cache, &u), 0);
    ck_assert_uint_eq(u.evictable, 100);
    ck_assert_uint_eq(u.held, 200);
    ck_assert_uint_gt(u.fs_free, 0);
    snprintf(path, sizeof(path), "%s/nowhere", cache);
    ck_assert_int_eq(sh_cache_usage(path, &u), -1);
}
END_TEST

/* Fill locks: one holder per source, its record read by the others, the
 * file gone at release, sources independent. */
START_TEST(fill_locks)
{
    const struct sh_cache_filler a = { 41, 1 }, b = { 42, 8 };
    struct sh_cache_filler h = { 0, 0 };
    char entries[PATH_MAX];
    int fa = -1, fb = -1, fc = -1;
    DIR *d;
    struct dirent *de;
    int files = 0;

    snprintf(entries, sizeof(entries), "%s/%s", cache, SH_CACHE_ENTRIES);
    /* no entries directory: an error, not a busy lock */
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &a, &fa, &h), -1);
    ck_assert_int_eq(mkdir(cache, 0711), 0);
    ck_assert_int_eq(mkdir(entries, 0700), 0);
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &a, &fa, &h), 0);
    ck_assert_int_ge(fa, 0);
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &b, &fb, &h), 1);
    ck_assert_int_eq(fb, -1);
    ck_assert_uint_eq(h.jobid, 41);
    ck_assert_uint_eq(h.nnodes, 1);
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/c", &b, &fc, &h), 0);
    d = opendir(entries);
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, ".fill-", 6) == 0)
            files++;
    closedir(d);
    ck_assert_int_eq(files, 2);
    sh_cache_fill_release(cache, "/src/a", fa);
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &b, &fb, &h), 0);
    sh_cache_fill_release(cache, "/src/a", fb);
    sh_cache_fill_release(cache, "/src/c", fc);
    sh_cache_fill_release(cache, "/src/c", -1); /* a no-op */
    files = 0;
    d = opendir(entries);
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL)
        files += de->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(files, 0);
    ck_assert_int_eq(rmdir(entries), 0); /* nothing left in it */
}
END_TEST

/* The fill lock files in @entries: how many, and whether @name is one. */
static int fill_files(const char *entries)
{
    DIR *d = opendir(entries);
    struct dirent *de;
    int files = 0;

    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL)
        files += strncmp(de->d_name, ".fill-", 6) == 0;
    closedir(d);
    return files;
}

/* A staging killed while it holds @src's fill lock (SIGKILL: no release):
 * a child takes it and is killed. */
static void killed_holder(const char *src, uint64_t jobid)
{
    const struct sh_cache_filler me = { jobid, 1 };
    int p[2];
    char c = 0;
    pid_t pid;

    ck_assert_int_eq(pipe(p), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct sh_cache_filler h;
        int fd = -1;

        close(p[0]);
        c = sh_cache_fill_trylock(cache, src, &me, &fd, &h) == 0 ? 'y' : 'n';
        if (write(p[1], &c, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], &c, 1), 1);
    close(p[0]);
    ck_assert_int_eq(c, 'y');
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}

/* The sweep of fill locks: a killed holder's file goes, a live holder's
 * stays (held in this process: flock(2) locks of two opens conflict), and
 * nothing else in the entries directory is touched; the source can be
 * locked again afterwards. */
START_TEST(fill_sweep_stale)
{
    const struct sh_cache_filler a = { 41, 1 }, b = { 42, 1 };
    struct sh_cache_filler h = { 0, 0 };
    char entries[PATH_MAX], path[PATH_MAX];
    struct stat sb;
    int fa = -1, fb = -1, fd;

    snprintf(entries, sizeof(entries), "%s/%s", cache, SH_CACHE_ENTRIES);
    ck_assert_int_eq(sh_cache_fill_sweep(cache), 0); /* no cache yet */
    ck_assert_int_eq(mkdir(cache, 0711), 0);
    ck_assert_int_eq(mkdir(entries, 0700), 0);
    ck_assert_int_eq(sh_cache_fill_sweep(cache), 0);
    /* an entry and another dot name, which the sweep leaves alone */
    snprintf(path, sizeof(path), "%s/%s/aa-100", cache, SH_CACHE_ENTRIES);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0444);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/%s/.fill-notalock", cache, SH_CACHE_ENTRIES);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);

    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &a, &fa, &h), 0);
    killed_holder("/src/b", 7);
    killed_holder("/src/c", 8);
    ck_assert_int_eq(fill_files(entries), 4);
    /* the killed holders' locks are free: a trylock would take them */
    ck_assert_int_eq(sh_cache_fill_sweep(cache), 2);
    ck_assert_int_eq(fill_files(entries), 2); /* /src/a's and .fill-notalock */
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/a", &b, &fb, &h), 1);
    ck_assert_uint_eq(h.jobid, 41);
    snprintf(path, sizeof(path), "%s/%s/aa-100", cache, SH_CACHE_ENTRIES);
    ck_assert_int_eq(stat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/%s/.fill-notalock", cache, SH_CACHE_ENTRIES);
    ck_assert_int_eq(stat(path, &sb), 0);
    /* a swept source is locked anew */
    ck_assert_int_eq(sh_cache_fill_trylock(cache, "/src/b", &b, &fb, &h), 0);
    ck_assert_int_eq(sh_cache_fill_sweep(cache), 0); /* both held */
    sh_cache_fill_release(cache, "/src/b", fb);
    sh_cache_fill_release(cache, "/src/a", fa);
    ck_assert_int_eq(fill_files(entries), 1);
    ck_assert_int_eq(sh_cache_fill_sweep(cache), 0);
}
END_TEST

static Suite *cache_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("cache");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, dst_kinds);
    tcase_add_test(tc, spec_job_form);
    tcase_add_test(tc, keys);
    tcase_add_test(tc, prepare_dirs);
    tcase_add_test(tc, adopt_share_find);
    tcase_add_test(tc, adopt_refusals);
    tcase_add_test(tc, seal_cleans);
    tcase_add_test(tc, sweep_dead_jobs);
    tcase_add_test(tc, evict_lru);
    tcase_add_test(tc, make_room_max);
    tcase_add_test(tc, fits_precheck);
    tcase_add_test(tc, usage_held);
    tcase_add_test(tc, fill_locks);
    tcase_add_test(tc, fill_sweep_stale);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(cache_suite());
}
