/* stagehand-agent --prolog, as root: the per-user default destination
 * directory (e.g. /nvme/stage/alice), made before the privilege drop with
 * root's directories above it; a user's object in its way is the job's
 * error, never a node fault (root.c decides which). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "staging.h"
#include "stagehand/local.h"

/* "name (uid N)" for @uid into @buf. */
static void owner_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *pwr = NULL;
    char pwbuf[4096];

    if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwr) == 0 && pwr != NULL)
        snprintf(buf, len, "%.64s (uid %u)", pw.pw_name, (unsigned)uid);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
}

/* Create the per-user default destination directory (e.g. /nvme/stage/alice)
 * as root: the directories above it root-owned 0755 (sh_root_dirs_make; the
 * plugin made the fixed part when slurmd started), the last the user's
 * (0700). Never follows a symlink, never changes another's object. Returns
 * 0, or -1 with the reason in @err; *@user_fault is set when the cause is an
 * object a user made where root's directory goes, or a per-user directory
 * that is not the job user's: a job error that names the path and owner,
 * never a node fault (security issue 30 item 3), and so is a full
 * filesystem or memory pressure (ENOSPC, EDQUOT, ENOMEM: a user can fill
 * it); otherwise (the allowed root missing, EROFS, EIO) the node is at
 * fault. */
int make_default_dir(const struct agent *a, const char *dir, char *err,
                            size_t errlen, bool *user_fault)
{
    const char *root = sh_config_allowed_root(&a->cfg, dir);
    struct sh_root_dir_problem bad;
    char parent[PATH_MAX], owner[128];
    const char *base;
    struct stat sb;
    char *slash;
    int fd, nfd, e;

    *user_fault = false;
    memset(&sb, 0, sizeof(sb));
    if (root == NULL) {
        snprintf(err, errlen, "default destination %s is not under an allowed root", dir);
        errno = EINVAL;
        return -1;
    }
    snprintf(parent, sizeof(parent), "%s", dir);
    slash = strrchr(parent, '/');
    if (slash == NULL || slash == parent) {
        snprintf(err, errlen, "default destination %s has no parent directory", dir);
        errno = EINVAL;
        return -1;
    }
    *slash = '\0';
    base = dir + (slash - parent) + 1;
    fd = sh_root_dirs_make(root, parent, 0755, &bad);
    if (fd < 0) {
        e = errno;
        if (e == EPERM || e == ENOTDIR || e == ELOOP) {
            *user_fault = true;
            owner_name(bad.uid, owner, sizeof(owner));
            snprintf(err, errlen, "%.512s, where stagehand keeps the default destinations, "
                     "is %s, owner %s: a user may have made it before root did; stagehand "
                     "does not use it: ask the administrator to remove it", bad.path,
                     bad.what != NULL ? bad.what : "not a root-owned directory", owner);
        } else {
            /* full or out of memory: the job's error (a user may fill it) */
            *user_fault = resource_errno(e);
            snprintf(err, errlen, "default destination %s: %s: %s%s", dir,
                     bad.path[0] != '\0' ? bad.path : root, strerror(e),
                     e == ENOMEM ? " (out of memory)" : resource_errno(e) ?
                     " (the filesystem is full)" : "");
        }
        errno = e;
        return -1;
    }
    nfd = sh_make_owned_dir(fd, base, a->in.uid, a->in.gid, 0700);
    e = errno;
    if (nfd < 0 && (e == EPERM || e == ENOTDIR || e == ELOOP || e == EEXIST)) {
        *user_fault = true;
        if (fstatat(fd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0)
            owner_name(sb.st_uid, owner, sizeof(owner));
        else
            snprintf(owner, sizeof(owner), "unknown");
        snprintf(err, errlen, "default destination %s is %s, owner %s, not a directory "
                 "of %s's own: ask the administrator to remove it", dir,
                 S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ?
                 "a directory" : "not a directory", owner, a->in.user);
    } else if (nfd < 0) {
        *user_fault = resource_errno(e);
        snprintf(err, errlen, "default destination %s: %s%s", dir, strerror(e),
                 e == ENOMEM ? " (out of memory)" : resource_errno(e) ?
                 " (the filesystem is full)" : "");
    }
    close(fd);
    if (nfd < 0) {
        errno = e;
        return -1;
    }
    close(nfd);
    return 0;
}
