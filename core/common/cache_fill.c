/* The node image cache's fill locks (stagehand/cache.h, doc/design.md §2
 * "cache mode", one producer per entry): the staging that copies a source
 * into the cache holds its lock until the copy is adopted; other stagings
 * of that source on the node wait for it and then link the entry. Library
 * code for the plugin's staging process (root). libc only. */
#include "config.h"
#include "stagehand/cache.h"

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
