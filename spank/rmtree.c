/* The job epilog's removal of a job's runtime tree, as root (rmtree.h). */
#include "config.h"
#include "rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* The directories from @name down to the current one (level 0 is @name). */
struct path_ids {
    struct { dev_t dev; ino_t ino; } *id;
    size_t n, cap;
};

static int ids_push(struct path_ids *p, const struct stat *sb)
{
    if (p->n == p->cap) {
        size_t cap = p->cap != 0 ? p->cap * 2 : 64;
        void *id = realloc(p->id, cap * sizeof(*p->id));

        if (id == NULL) {
            errno = ENOMEM;
            return -1;
        }
        p->id = id;
        p->cap = cap;
    }
    p->id[p->n].dev = sb->st_dev;
    p->id[p->n].ino = sb->st_ino;
    p->n++;
    return 0;
}

static bool ids_is(const struct path_ids *p, size_t level, const struct stat *sb)
{
    return p->id[level].dev == sb->st_dev && p->id[level].ino == sb->st_ino;
}

/* Remove entry @e of the directory open as @fd when it is not a non-empty
 * directory. Returns 1 when removed (or gone), 0 when it is a non-empty
 * directory (descend), -1 with errno. */
static int remove_entry(int fd, const char *e)
{
    if (unlinkat(fd, e, 0) == 0 || errno == ENOENT)
        return 1;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    if (unlinkat(fd, e, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return 1;
    if (errno == ENOTEMPTY || errno == EEXIST)
        return 0;
    return -1;
}

/* Record the directory open as @fd, one level down: 0, or an errno value
 * (EXDEV: a mount point, not ours to empty). */
static int enter(struct path_ids *ids, int fd)
{
    struct stat sb;

    if (fstat(fd, &sb) != 0)
        return errno;
    if (sb.st_dev != ids->id[0].dev)
        return EXDEV;
    return ids_push(ids, &sb) != 0 ? errno : 0;
}

/* Walk down from the directory @d (level ids->n - 1), emptying it; returns
 * when the top directory (level 0) is empty. */
static int empty_tree(DIR *d, struct path_ids *ids)
{
    struct dirent *de;
    struct stat sb;
    int fd;

    for (;;) {
        bool descended = false;

        while ((de = readdir(d)) != NULL) {
            int r;

            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            r = remove_entry(dirfd(d), de->d_name);
            if (r < 0)
                goto fail;
            if (r == 1)
                continue;
            fd = openat(dirfd(d), de->d_name, DIR_FLAGS);
            if (fd < 0) {
                /* gone, or swapped for a symlink or a file: the next
                 * pass over this directory sees what is there now */
                if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)
                    continue;
                goto fail;
            }
            r = enter(ids, fd);
            if (r != 0) {
                close(fd);
                errno = r;
                goto fail;
            }
            closedir(d);
            d = fdopendir(fd);
            if (d == NULL) {
                close(fd);
                return -1;
            }
            descended = true;
            break;
        }
        if (descended)
            continue;
        /* This directory is empty (entries that raced in are found on the
         * parent's next pass, which tries to remove it again). */
        if (ids->n == 1) {
            closedir(d);
            return 0;
        }
        fd = openat(dirfd(d), "..", DIR_FLAGS);
        closedir(d);
        if (fd < 0)
            return -1;
        ids->n--;
        if (fstat(fd, &sb) != 0 || !ids_is(ids, ids->n - 1, &sb)) {
            close(fd);
            errno = ESTALE;
            return -1;
        }
        d = fdopendir(fd);
        if (d == NULL) {
            close(fd);
            return -1;
        }
    }
fail:
    {
        int saved = errno;

        closedir(d);
        errno = saved;
    }
    return -1;
}

int sh_rmtree_at(int dirfd, const char *name)
{
    struct path_ids ids = { NULL, 0, 0 };
    struct stat sb, now;
    DIR *d;
    int fd, rc, r, saved;

    r = remove_entry(dirfd, name);
    if (r != 0)
        return r < 0 ? -1 : 0;
    fd = openat(dirfd, name, DIR_FLAGS);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    if (fstat(fd, &sb) != 0 || ids_push(&ids, &sb) != 0) {
        saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    d = fdopendir(fd);
    if (d == NULL) {
        saved = errno;
        close(fd);
        free(ids.id);
        errno = saved;
        return -1;
    }
    rc = empty_tree(d, &ids);
    saved = errno;
    free(ids.id);
    if (rc != 0) {
        errno = saved;
        return -1;
    }
    /* The top itself, if it is still the directory emptied. */
    if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (now.st_dev != sb.st_dev || now.st_ino != sb.st_ino) {
        errno = ESTALE;
        return -1;
    }
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return -1;
    return 0;
}
