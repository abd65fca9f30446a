#include "config.h"
#include "stagehand/rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Recursive, bounded by @depth (ELOOP beyond it). */
int sh_rmtree_at(int dirfd, const char *name, unsigned depth) /* NOLINT(misc-no-recursion) */
{
    struct dirent *de;
    DIR *d;
    int fd, rc = 0, saved = 0;

    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    if (depth == 0) {
        errno = ELOOP;
        return -1;
    }
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    d = fdopendir(fd);
    if (d == NULL) {
        saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (sh_rmtree_at(fd, de->d_name, depth - 1) != 0 && rc == 0) {
            rc = -1;
            saved = errno;
        }
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0)
        errno = saved;
    return rc;
}
