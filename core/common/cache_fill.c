/* The node image cache's fill locks (stagehand/cache.h, doc/design.md §2
 * "cache mode", one producer per entry): the staging that copies a source
 * into the cache holds its lock until the copy is adopted; other stagings
 * of that source on the node wait for it and then link the entry. Library
 * code for the plugin's staging process (root). libc only. */
#include "config.h"
#include "stagehand/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stagehand/publish.h"

/* The lock's name for @src (sh_publish_lock adds "." and ".lock"): FNV-1a,
 * 64 bits, of the path. Two sources of one name only share a wait, never an
 * entry (entries are found by their records). */
static void fill_name(const char *src, char out[32])
{
    uint64_t h = 14695981039346656037ULL;

    for (const unsigned char *p = (const unsigned char *)src; *p != '\0'; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    snprintf(out, 32, "fill-%016" PRIx64, h);
}

static int open_entries_dir(const char *cache)
{
    char dir[PATH_MAX];

    if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", cache, SH_CACHE_ENTRIES) >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* The holder's record in lock file @lname of @efd, into @h (zeroed when it
 * cannot be read: a lock taken an instant ago has none yet). */
static void read_holder(int efd, const char *lname, struct sh_cache_filler *h)
{
    char text[64];
    unsigned long long jobid = 0;
    unsigned nnodes = 0;
    ssize_t n;
    int fd = openat(efd, lname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    h->jobid = 0;
    h->nnodes = 0;
    if (fd < 0)
        return;
    n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (n <= 0)
        return;
    text[n] = '\0';
    if (sscanf(text, "%llu %u", &jobid, &nnodes) == 2) {
        h->jobid = jobid;
        h->nnodes = nnodes;
    }
}

int sh_cache_fill_trylock(const char *cache, const char *src, const struct sh_cache_filler *me,
                          int *lockfd, struct sh_cache_filler *holder)
{
    char name[32], lname[64], text[64];
    int efd, rc, n;

    *lockfd = -1;
    holder->jobid = 0;
    holder->nnodes = 0;
    fill_name(src, name);
    efd = open_entries_dir(cache);
    if (efd < 0)
        return -1;
    if (sh_publish_lock(efd, name, 0, lockfd) == 0) {
        bool recorded;

        n = snprintf(text, sizeof(text), "%" PRIu64 " %u\n", me->jobid, me->nnodes);
        /* the record is for the waiters' messages and choice; a lock
         * without one is still the lock */
        recorded = ftruncate(*lockfd, 0) == 0 && pwrite(*lockfd, text, (size_t)n, 0) == n;
        (void)recorded;
        rc = 0;
    } else if (errno == ETIMEDOUT) {
        snprintf(lname, sizeof(lname), ".%s.lock", name);
        read_holder(efd, lname, holder);
        rc = 1;
    } else {
        rc = -1;
    }
    n = errno;
    close(efd);
    errno = n;
    return rc;
}

void sh_cache_fill_release(const char *cache, const char *src, int lockfd)
{
    char name[32];
    int efd;

    if (lockfd < 0)
        return;
    fill_name(src, name);
    efd = open_entries_dir(cache);
    if (efd < 0) {
        sh_publish_unlock(lockfd);
        return;
    }
    /* removed while still held: a waiter that opened it takes the lock,
     * finds it no longer named and takes the new file's (sh_publish_lock) */
    (void)sh_publish_unlock_remove(efd, name, lockfd);
    close(efd);
}

int sh_cache_fill_sweep(const char *cache)
{
    char names[64][32];
    size_t n = 0;
    int efd, dfd, removed = 0, e;
    DIR *d;
    struct dirent *de;

    efd = open_entries_dir(cache);
    if (efd < 0)
        return errno == ENOENT ? 0 : -1;
    dfd = dup(efd);
    d = dfd < 0 ? NULL : fdopendir(dfd);
    if (d == NULL) {
        e = errno;
        if (dfd >= 0)
            close(dfd);
        close(efd);
        errno = e;
        return -1;
    }
    /* ".fill-<16 hex digits>.lock", collected first (removing while
     * readdir(3) walks is unspecified); a sweep of a node with more locks
     * than that leaves the rest to the next one */
    while ((de = readdir(d)) != NULL && n < sizeof(names) / sizeof(names[0])) {
        size_t len = strlen(de->d_name);

        if (len == 1 + 5 + 16 + 5 && strncmp(de->d_name, ".fill-", 6) == 0 &&
            strcmp(de->d_name + len - 5, ".lock") == 0 &&
            strspn(de->d_name + 6, "0123456789abcdef") == 16) {
            memcpy(names[n], de->d_name + 1, len - 1 - 5); /* "fill-<hex>" */
            names[n++][len - 1 - 5] = '\0';
        }
    }
    closedir(d);
    /* The holders' own protocol (sh_publish_lock): a lock taken is free,
     * its holder gone (a live holder keeps its flock(2) until its release);
     * removed while held, so a staging that opened it meanwhile finds it no
     * longer named when it gets the lock and takes the new file's. */
    for (size_t i = 0; i < n; i++) {
        int fd = -1;

        if (sh_publish_lock(efd, names[i], 0, &fd) != 0)
            continue; /* held: a live producer's (ETIMEDOUT), or gone */
        if (sh_publish_unlock_remove(efd, names[i], fd) == 0)
            removed++;
    }
    close(efd);
    return removed;
}
