/* This node's part of a staging decision: stagehand/local.h. */
#include "config.h"
#include "stagehand/local.h"
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagehand/io.h"
#include "stagehand/publish.h"
#include "stagehand/status.h"

int sh_rundir_name(uint64_t jobid, long stepid, char *out, size_t len)
{
    int n;

    if (stepid < 0)
        n = snprintf(out, len, "%" PRIu64, jobid);
    else
        n = snprintf(out, len, "%" PRIu64 ".%ld", jobid, stepid);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

bool sh_job_on_node(const char *runtime_dir, uint64_t jobid, long stepid)
{
    static const char *const suffix[] = { ".lock", ".status", "" };
    char path[PATH_MAX], name[64];
    struct stat sb;

    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        if (snprintf(path, sizeof(path), "%s/%" PRIu64 "%s", runtime_dir, jobid, suffix[i]) <
                (int)sizeof(path) &&
            lstat(path, &sb) == 0)
            return true;
    }
    if (stepid < 0 || sh_rundir_name(jobid, stepid, name, sizeof(name)) != 0)
        return false;
    for (size_t i = 1; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        if (snprintf(path, sizeof(path), "%s/%s%s", runtime_dir, name, suffix[i]) <
                (int)sizeof(path) &&
            lstat(path, &sb) == 0)
            return true;
    }
    return false;
}

int sh_make_owned_dir(int dirfd, const char *name, uid_t uid, gid_t gid, mode_t mode)
{
    struct stat sb;
    int fd;

    if (mkdirat(dirfd, name, mode) == 0) {
        if (fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
            return -1;
    } else if (errno != EEXIST) {
        return -1;
    }
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) != 0 || sb.st_uid != uid) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    if ((sb.st_mode & 07777) != mode && fchmod(fd, mode) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Is the directory @sb a safe place for root's directories: root-owned, no
 * write for group or others? Else the reason into @bad. */
static bool root_dir_ok(const struct stat *sb, struct sh_root_dir_problem *bad)
{
    bad->uid = sb->st_uid;
    if (S_ISLNK(sb->st_mode))
        bad->what = "a symbolic link";
    else if (!S_ISDIR(sb->st_mode))
        bad->what = "not a directory";
    else if (sb->st_uid != 0)
        bad->what = "a directory not owned by root";
    else if ((sb->st_mode & 022) != 0)
        bad->what = "a root-owned directory writable by group or others";
    else
        return true;
    return false;
}

int sh_root_dirs_make(const char *root, const char *path, mode_t mode,
                      struct sh_root_dir_problem *bad)
{
    char rel[PATH_MAX];
    char *save = NULL, *comp;
    size_t rlen = strlen(root);
    int fd;

    memset(bad, 0, sizeof(*bad));
    if (strncmp(path, root, rlen) != 0 || (path[rlen] != '/' && path[rlen] != '\0' &&
                                           strcmp(root, "/") != 0) ||
        (size_t)snprintf(rel, sizeof(rel), "%s", path + rlen) >= sizeof(rel)) {
        errno = EINVAL;
        return -1;
    }
    fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    snprintf(bad->path, sizeof(bad->path), "%s", strcmp(root, "/") == 0 ? "" : root);
    for (comp = strtok_r(rel, "/", &save); comp != NULL; comp = strtok_r(NULL, "/", &save)) {
        struct stat sb;
        size_t plen = strlen(bad->path);
        int nfd, saved;

        bool made;

        snprintf(bad->path + plen, sizeof(bad->path) - plen, "/%s", comp);
        made = mkdirat(fd, comp, mode) == 0;
        if (!made && errno != EEXIST)
            goto fail;
        nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        saved = errno;
        if (nfd < 0) {
            /* a symlink or not a directory: say what and whose */
            if (fstatat(fd, comp, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !root_dir_ok(&sb, bad))
                saved = EPERM;
        } else if (fstat(nfd, &sb) != 0) {
            saved = errno;
            close(nfd);
            nfd = -1;
        } else {
            /* mkdirat applied the umask: give the new one @mode */
            if (made && sb.st_uid == 0 && (sb.st_mode & 07777) != mode &&
                fchmod(nfd, mode) == 0)
                sb.st_mode = (sb.st_mode & ~(mode_t)07777) | mode;
            if (!root_dir_ok(&sb, bad)) {
                close(nfd);
                nfd = -1;
                saved = EPERM;
            }
        }
        close(fd);
        if (nfd < 0) {
            errno = saved;
            return -1;
        }
        fd = nfd;
    }
    bad->path[0] = '\0';
    return fd;
fail:
    {
        int saved = errno;

        close(fd);
        errno = saved;
    }
    return -1;
}

int sh_rundir_make(const char *runtime_dir, uint64_t jobid, long stepid, uid_t uid, gid_t gid,
                   char *path, size_t len)
{
    char name[64];
    int rfd, jfd, saved;

    if (sh_rundir_name(jobid, stepid, name, sizeof(name)) != 0)
        return -1;
    if (snprintf(path, len, "%s/%s", runtime_dir, name) >= (int)len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    rfd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return -1;
    jfd = sh_make_owned_dir(rfd, name, uid, gid, 0700);
    saved = errno;
    close(rfd);
    if (jfd < 0) {
        errno = saved;
        return -1;
    }
    close(jfd);
    return 0;
}

int sh_rundir_limit(const char *path, uid_t uid, gid_t gid)
{
    char opts[128], parent[PATH_MAX];
    struct stat dir, up;
    const char *slash = strrchr(path, '/');

    if (slash == NULL || slash == path || (size_t)(slash - path) >= sizeof(parent)) {
        errno = EINVAL;
        return -1;
    }
    memcpy(parent, path, (size_t)(slash - path));
    parent[slash - path] = '\0';
    if (lstat(path, &dir) != 0 || stat(parent, &up) != 0)
        return -1;
    if (!S_ISDIR(dir.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    if (dir.st_dev != up.st_dev)
        return 0; /* a mount point already: the prolog's check made it */
    snprintf(opts, sizeof(opts), SH_RUNDIR_TMPFS_OPTS ",mode=0700,uid=%u,gid=%u",
             (unsigned)uid, (unsigned)gid);
    return mount("stagehand", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts);
}

int sh_rundir_unlimit(int dirfd, const char *name)
{
    struct stat dir, up;

    if (fstatat(dirfd, name, &dir, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (fstat(dirfd, &up) != 0)
        return -1;
    if (!S_ISDIR(dir.st_mode) || dir.st_dev == up.st_dev)
        return 0;
    {
        char path[64];

        /* umount2 takes a path: the directory's through /proc/self/fd, the
         * name itself checked above not to be a link. */
        if (snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", dirfd, name) >=
            (int)sizeof(path)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        return umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
    }
}

int sh_src_probe(const char *src, struct sh_src_id *id, char *err, size_t errlen)
{
    struct stat sb;

    memset(id, 0, sizeof(*id));
    /* stat + access rather than open + fstat: on a network filesystem one
     * round trip or two instead of three (sshfs, idle: 0.7-1.4 against 7.6
     * ms), and every node's prolog does it at job start. access(2) checks
     * with the real ids, which are the job user's here. */
    if (stat(src, &sb) != 0) {
        snprintf(err, errlen, "source %s: %s", src, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "source %s is not a regular file", src);
        return -1;
    }
    if (access(src, R_OK) != 0) {
        snprintf(err, errlen, "source %s: %s", src, strerror(errno));
        return -1;
    }
    snprintf(id->path, sizeof(id->path), "%s", src);
    id->size = (uint64_t)sb.st_size;
    id->mtime = sh_ts_from(&sb.st_mtim);
    id->ctime = sh_ts_from(&sb.st_ctim);
    id->mode = (uint32_t)(sb.st_mode & 0777);
    id->gid = (uint32_t)sb.st_gid;
    return 0;
}

/* Check @dst's place on this node as the job user, before any data moves
 * (doc/design.md §6, cases F17b, F31). Below the allowed root every existing
 * directory of DST's path must be a real directory (a symbolic link could
 * take the copy out of the allowed root), belong to the user or root, and
 * not be writable by others unless sticky; DST itself must not be a
 * directory, nor an entry of anyone else (root included) that a sticky
 * directory keeps us from replacing. A symlink the user planted as DST
 * itself is fine: the engine replaces it with rename(2) and never follows
 * it. Missing directories are left to the engine, which creates them as the
 * user. Returns 0, or -1 with the user's error in @why. */
int sh_dest_check_path(const struct sh_config *cfg, uid_t uid, const char *dst, char *why,
                       size_t whylen)
{
    const char *root = sh_config_allowed_root(cfg, dst);
    char rest[PATH_MAX], sofar[PATH_MAX];
    char *save = NULL, *comp, *next;
    struct stat dsb, sb;
    int fd, rc = -1;

    if (root == NULL) {
        snprintf(why, whylen, "destination %s is not under an allowed directory", dst);
        return -1;
    }
    /* O_PATH: the walk needs search permission only (the node image cache's
     * directories are 0711: not listable, stagehand/cache.h) */
    fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "allowed directory %s: %s", root, strerror(errno));
        return -1;
    }
    if (fstat(fd, &dsb) != 0) {
        snprintf(why, whylen, "allowed directory %s: %s", root, strerror(errno));
        close(fd);
        return -1;
    }
    snprintf(rest, sizeof(rest), "%s", dst + strlen(root));
    snprintf(sofar, sizeof(sofar), "%s", root);
    comp = strtok_r(rest, "/", &save);
    while (comp != NULL) {
        size_t used = strlen(sofar);
        int nfd;

        next = strtok_r(NULL, "/", &save);
        snprintf(sofar + used, sizeof(sofar) - used, "/%s", comp);
        if (fstatat(fd, comp, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                rc = 0; /* the engine creates the rest as the user */
                break;
            }
            snprintf(why, whylen, "destination %s: %s: %s", dst, sofar, strerror(errno));
            break;
        }
        if (next == NULL) {
            /* DST itself */
            if (S_ISDIR(sb.st_mode)) {
                snprintf(why, whylen, "destination %s is a directory (DST names the "
                         "file to publish; end DST with '/' to stage into that "
                         "directory under SRC's file name)", dst);
                break;
            }
            /* rename(2), EPERM: in a sticky directory only the owner of
             * the entry or of the directory may replace it; a file or link
             * of root's is no exception (the new-user trial's
             * /nvme/rootfile failed only at publish, after the copy) */
            if (sb.st_uid != uid && (dsb.st_mode & S_ISVTX) != 0 && dsb.st_uid != uid) {
                snprintf(why, whylen, "destination %s%s belongs to another user (uid "
                         "%u) and its directory is sticky: it cannot be replaced",
                         dst, S_ISLNK(sb.st_mode) ? " (a symbolic link)" : "",
                         (unsigned)sb.st_uid);
                break;
            }
            rc = 0;
            break;
        }
        if (S_ISLNK(sb.st_mode)) {
            snprintf(why, whylen, "destination %s: %s is a symbolic link (staging never "
                     "follows links below the allowed directory %s)", dst, sofar, root);
            break;
        }
        if (!S_ISDIR(sb.st_mode)) {
            snprintf(why, whylen, "destination %s: %s is not a directory", dst, sofar);
            break;
        }
        if (sb.st_uid != uid && sb.st_uid != 0) {
            snprintf(why, whylen, "destination %s: directory %s belongs to another "
                     "user (uid %u)", dst, sofar, (unsigned)sb.st_uid);
            break;
        }
        if ((sb.st_mode & S_IWOTH) != 0 && (sb.st_mode & S_ISVTX) == 0) {
            snprintf(why, whylen, "destination %s: directory %s is writable by every "
                     "user (mode %04o): another user could replace the image", dst,
                     sofar, (unsigned)(sb.st_mode & 07777));
            break;
        }
        nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            snprintf(why, whylen, "destination %s: %s: %s", dst, sofar,
                     errno == ELOOP ? "is a symbolic link" : strerror(errno));
            break;
        }
        close(fd);
        fd = nfd;
        dsb = sb;
        comp = next;
    }
    close(fd);
    return rc;
}

/* Filesystems that are network or cluster filesystems: a DST there is the
 * same file on every node (F01). Magic numbers from statfs(2). */
const char *sh_shared_fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0x6969UL: return "NFS";
    case 0x517BUL: return "SMB";
    case 0xFF534D42UL: return "CIFS";
    case 0xFE534D42UL: return "SMB2";
    case 0x0BD00BD0UL: return "Lustre";
    case 0x47504653UL: return "GPFS";
    case 0x00C36400UL: return "CephFS";
    case 0x19830326UL: return "BeeGFS";
    case 0x01021997UL: return "9p";
    case 0x5346414FUL: return "AFS";
    case 0xAAD7AAEAUL: return "PanFS";
    case 0x65735546UL: return "FUSE (e.g. sshfs)";
    default: return NULL;
    }
}

/* The deepest existing directory on the way to @dst (its parent, or an
 * ancestor the engine will create the rest under), into @out. */
void sh_nearest_dir(const char *dst, char *out, size_t len)
{
    struct stat sb;
    char *slash;

    snprintf(out, len, "%s", dst);
    while ((slash = strrchr(out, '/')) != NULL) {
        if (slash == out) {
            out[1] = '\0';
            return;
        }
        *slash = '\0';
        if (lstat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
            return;
    }
}


/* This node's vote for @dst given the source @id: sh_meta_dst_current, the
 * decision the engine repeats under DST's lock. Content checks are left to
 * the engine (it hashes DST); here only the recorded metadata decides. */
enum sh_vote sh_dest_vote(const struct sh_config *cfg, uid_t uid, const char *dst,
                          const struct sh_src_id *id, mode_t umask_bits, char *why,
                          size_t whylen)
{
    enum sh_check check = cfg->check;
    struct sh_dst_check c = { .check = check, .src = id, .uid = uid,
                              .umask_bits = umask_bits, .digest = NULL };
    char dir[PATH_MAX], *slash;
    struct stat sb;
    int dirfd, fd, current;

    if (sh_dest_check_path(cfg, uid, dst, why, whylen) != 0)
        return SH_VOTE_ERROR;
    c.cache_entry = cfg->cache[0] != '\0' &&
                    sh_cache_dst_kind(cfg->cache, dst, NULL) == SH_CACHE_DST_JOB;
    snprintf(why, whylen, "needs a copy");
    if (check == SH_CHECK_NEVER || check == SH_CHECK_CONTENT)
        return SH_VOTE_NEED;
    snprintf(dir, sizeof(dir), "%s", dst);
    slash = strrchr(dir, '/');
    if (slash == NULL)
        return SH_VOTE_NEED;
    *slash = '\0';
    dirfd = open(dir[0] != '\0' ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return SH_VOTE_NEED; /* the engine creates parents and reports errors */
    if (fstatat(dirfd, slash + 1, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        close(dirfd);
        return SH_VOTE_NEED;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(dirfd);
        return SH_VOTE_NEED; /* the engine refuses to replace it, with a message */
    }
    fd = openat(dirfd, slash + 1, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        close(dirfd);
        return SH_VOTE_NEED;
    }
    /* A current copy readable by more users than SRC (an older version made
     * copies 0644) is made private, or copied again (issue 30). */
    current = sh_meta_dst_current(dirfd, slash + 1, fd, &sb, &c);
    close(fd);
    close(dirfd);
    if (current) {
        snprintf(why, whylen, "current");
        return SH_VOTE_CURRENT;
    }
    /* without a record, "needs a copy" says it all */
    if ((c.have_rec || check == SH_CHECK_SIZE) && c.why[0] != '\0')
        snprintf(why, whylen, "%s", c.why);
    return SH_VOTE_NEED;
}

int sh_src_encode(char *buf, size_t len, int ok, const struct sh_src_id *id, const char *err)
{
    int n;

    if (ok)
        n = snprintf(buf, len, "ok %" PRIu64 " %" PRId64 " %" PRIu32 " %" PRId64
                     " %" PRIu32 " %" PRIo32 " %" PRIu32, id->size, id->mtime.sec,
                     id->mtime.nsec, id->ctime.sec, id->ctime.nsec, id->mode, id->gid);
    else
        n = snprintf(buf, len, "err %s", err);
    return n < 0 ? 0 : (int)((size_t)n < len ? (size_t)n : len - 1);
}

int sh_src_decode(const unsigned char *data, uint32_t len, const char *src,
                  struct sh_src_id *id, char *err, size_t errlen)
{
    char buf[SH_STATUS_LINE_MAX];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    int got;

    memcpy(buf, data, n);
    buf[n] = '\0';
    memset(id, 0, sizeof(*id));
    if (strncmp(buf, "err ", 4) == 0) {
        snprintf(err, errlen, "%s", buf + 4);
        return -1;
    }
    snprintf(id->path, sizeof(id->path), "%s", src);
    /* A leader without SRC's mode (an older version): a private copy. */
    id->mode = 0600;
    id->gid = (uint32_t)-1;
    got = sscanf(buf, "ok %" SCNu64 " %" SCNd64 " %" SCNu32 " %" SCNd64 " %" SCNu32
                       " %" SCNo32 " %" SCNu32, &id->size, &id->mtime.sec, &id->mtime.nsec,
                       &id->ctime.sec, &id->ctime.nsec, &id->mode, &id->gid);
    if (got != 5 && got != 7) {
        snprintf(err, errlen, "malformed source record from the leader");
        return -1;
    }
    id->mode &= 0777;
    return 0;
}


int sh_claim_text(const char *dst, const struct sh_src_id *id, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s\n%s\n", dst, id->path), m;

    if (n <= 0 || (size_t)n >= len)
        goto toolong;
    /* SRC's identity as the leader sends it to every node (encode_src) */
    m = sh_src_encode(buf + n, len - (size_t)n, 1, id, NULL);
    if ((size_t)n + (size_t)m + 1 >= len)
        goto toolong;
    buf[n + m] = '\n';
    buf[n + m + 1] = '\0';
    return n + m + 1;
toolong:
    errno = ENAMETOOLONG;
    return -1;
}

int sh_claim_write(const char *rundir, size_t img, const char *text, int n)
{
    char tmp[64], name[32];
    int dfd, fd, saved;
    bool ok = false;

    if (n <= 0) {
        errno = EINVAL;
        return -1;
    }
    snprintf(name, sizeof(name), "claim.%zu", img);
    snprintf(tmp, sizeof(tmp), ".claim.%zu.tmp", img);
    dfd = open(rundir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ok = write(fd, text, (size_t)n) == n;
        ok = close(fd) == 0 && ok;
        ok = ok && renameat(dfd, tmp, dfd, name) == 0;
        if (!ok) {
            saved = errno;
            unlinkat(dfd, tmp, 0);
            errno = saved;
        }
    }
    saved = errno;
    close(dfd);
    errno = saved;
    return ok ? 0 : -1;
}

void sh_claim_remove(const char *rundir, size_t img)
{
    char path[PATH_MAX];

    if (snprintf(path, sizeof(path), "%s/claim.%zu", rundir, img) < (int)sizeof(path))
        unlink(path);
}

/* Does a claim in directory @jdir (a runtime directory under @rfd) name @dst
 * with other content than @mine (sh_claim_text without its first line)? Its
 * source into @their. */
static bool claims_differ(int rfd, const char *jdir, const char *dst, const char *mine,
                          char *their, size_t theirlen)
{
    struct dirent *de;
    bool found = false;
    DIR *d;
    int fd = openat(rfd, jdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return false; /* another user's job (0700), or gone meanwhile */
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return false;
    }
    while (!found && (de = readdir(d)) != NULL) {
        char text[2 * PATH_MAX + 128], *nl;
        ssize_t n;

        if (strncmp(de->d_name, "claim.", 6) != 0)
            continue;
        n = sh_read_small_at(dirfd(d), de->d_name, text, sizeof(text));
        if (n <= 0)
            continue;
        nl = strchr(text, '\n');
        if (nl == NULL)
            continue;
        *nl = '\0';
        if (strcmp(text, dst) != 0 || strcmp(nl + 1, mine) == 0)
            continue;
        found = true;
        nl = strchr(nl + 1, '\n');
        if (nl != NULL)
            *nl = '\0';
        snprintf(their, theirlen, "%s", text + strlen(text) + 1);
    }
    closedir(d);
    return found;
}

bool sh_claim_conflict(const char *runtime_dir, uint64_t self, const char *dst,
                       const char *claim, char *who, size_t wholen, char *their,
                       size_t theirlen)
{
    const char *mine = strchr(claim, '\n') + 1; /* SRC and its identity */
    struct dirent *de;
    bool found = false;
    DIR *d;
    int rfd;

    rfd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return false;
    d = fdopendir(rfd);
    if (d == NULL) {
        close(rfd);
        return false;
    }
    while (!found && (de = readdir(d)) != NULL) {
        char *end;
        unsigned long long jobid;

        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        errno = 0;
        jobid = strtoull(de->d_name, &end, 10);
        if (errno != 0 || (*end != '\0' && *end != '.') || jobid == self)
            continue;
        if (claims_differ(dirfd(d), de->d_name, dst, mine, their, theirlen)) {
            snprintf(who, wholen, "%llu", jobid);
            found = true;
        }
    }
    closedir(d);
    return found;
}

