/* stagehand-agent --prolog, node 0 only, as the job user: registry images
 * (docker://, issue 36). The site's resolver names the manifest digest a
 * reference points to; where a node needs a copy, the site's importer writes
 * the image's Squashfs file once, in a private directory beside DST, under
 * the staging's deadline; the engine then reads that file as SRC and every
 * node records the pinned reference (REGISTRY/REPO@DIGEST) as the source's
 * identity (doc/design.md §2 step 4). No other node contacts the registry. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "import.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"
#include "stagehand/size.h"

#define NS_PER_MS 1000000LL
/* The leader keeps this much of the staging's deadline to tell every node
 * why a resolver or importer it had to stop failed (at most a quarter of
 * what is left). */
#define IMPORT_MARGIN_NS (5LL * 1000 * NS_PER_MS)
#define STDERR_TAIL 700

/* The seam for a node image cache (issue 34): where the image with the
 * manifest digest of @pinned lives on this node. Without a cache it is DST
 * itself, whose metadata record carries the pinned reference. */
const char *sh_image_home(const struct sh_ref *pinned, const char *dst)
{
    (void)pinned;
    return dst;
}

/* A stop (scancel, the epilog's SIGTERM, SIGHUP when the plugin's process
 * ends) while this agent runs a resolver or importer, or holds an import
 * directory. The child runs in its own process group, which the agent's
 * signals do not reach; so from before the directory is made until it is
 * removed (sh_import_release) the stop signals are caught here:
 * - while a child runs (run_bounded), they are blocked except inside its
 *   ppoll(2): the handler kills the child's group, and the agent removes
 *   the directory and then ends by the signal (guard_end);
 * - after a successful import the directory holds the image alone
 *   (import_prune) and the signals are unblocked: the handler removes both
 *   (unlink, rmdir: async-signal-safe) and passes the signal on to what the
 *   agent had before (its SIGHUP handler, or the default: the agent ends).
 * A signal the agent ignores stays ignored. A child the agent forks
 * meanwhile (its engine, before exec) only passes the signal on. */
static const int stops[3] = { SIGTERM, SIGINT, SIGHUP };
static struct sigaction guard_old[3];
static bool guard_set[3];
static sigset_t guard_mask;                 /* the stop signals */
static sigset_t guard_oldmask;              /* the agent's mask before the guard */
static char guard_dir[PATH_MAX], guard_image[PATH_MAX];
static volatile sig_atomic_t guard_files;   /* guard_dir/guard_image are the agent's */
static volatile sig_atomic_t child_group;   /* the running child's process group */
static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t guard_pid;     /* the agent that holds them */

static void on_stop(int sig)
{
    int e = errno;
    bool agent = getpid() == (pid_t)guard_pid;

    if (agent)
        stop_signal = sig;
    if (agent && child_group > 0) {
        (void)kill(-(pid_t)child_group, SIGKILL);
        errno = e;
        return; /* run_bounded returns ECANCELED; guard_end ends the agent */
    }
    if (agent && guard_files) {
        (void)unlink(guard_image);
        (void)rmdir(guard_dir);
        guard_files = 0;
    }
    for (int i = 0; i < 3; i++) {
        if (stops[i] != sig || !guard_set[i])
            continue;
        /* Pending (blocked in here) until this handler returns, then the
         * agent's own handler (on_plugin_gone) or the default: the end. */
        (void)sigaction(sig, &guard_old[i], NULL);
        (void)raise(sig);
    }
    errno = e;
}

/* Catch the stop signals (blocked) for a child to run or an import
 * directory @dir holding @image (both NULL for the resolver). One guard at
 * a time: guard_end (or sh_import_release) ends it. */
static void guard_begin(const char *dir, const char *image)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&guard_mask);
    for (int i = 0; i < 3; i++)
        sigaddset(&guard_mask, stops[i]);
    sa.sa_mask = guard_mask;
    stop_signal = 0;
    child_group = 0;
    guard_files = 0;
    guard_pid = (sig_atomic_t)getpid();
    (void)sigprocmask(SIG_BLOCK, &guard_mask, &guard_oldmask);
    if (dir != NULL) {
        snprintf(guard_dir, sizeof(guard_dir), "%s", dir);
        snprintf(guard_image, sizeof(guard_image), "%s", image);
    }
    for (int i = 0; i < 3; i++) {
        guard_set[i] = sigaction(stops[i], NULL, &guard_old[i]) == 0 &&
                       guard_old[i].sa_handler != SIG_IGN &&
                       sigaction(stops[i], &sa, NULL) == 0;
    }
}

/* Put the agent's own handlers and mask back. After a stop (what the
 * guard held is gone by then) the signal is delivered to them now: the
 * agent ends by it, as it would have without the guard. */
static void guard_end(void)
{
    int sig = stop_signal;

    (void)sigprocmask(SIG_BLOCK, &guard_mask, NULL);
    guard_files = 0;
    for (int i = 0; i < 3; i++)
        if (guard_set[i])
            (void)sigaction(stops[i], &guard_old[i], NULL);
    memset(guard_set, 0, sizeof(guard_set));
    stop_signal = 0;
    if (sig != 0)
        (void)raise(sig); /* pending until the mask below */
    (void)sigprocmask(SIG_SETMASK, &guard_oldmask, NULL);
}

/* Deadline for a child of the leader: the staging's, less the margin. */
static int64_t child_deadline(int64_t deadline)
{
    int64_t now = sh_now_ns(), left = deadline - now;
    int64_t margin = left / 4 < IMPORT_MARGIN_NS ? left / 4 : IMPORT_MARGIN_NS;

    return deadline - (margin > 0 ? margin : 0);
}

/* Does the stream whose kept bytes end with @buf (@len) and go on with
 * @chunk (@n) say ENOSPC or EDQUOT (strerror's words, as Go's and C's tools
 * print them)? Returns which, or 0. The last bytes of @buf join the chunk: a phrase may straddle
 * two reads. An importer's stack trace after the error pushes it out of the
 * tail, so the whole stream is looked at as it passes. */
static int says_no_room(const char *buf, size_t len, const char *chunk, size_t n)
{
    char scan[64 + 4096 + 1];
    size_t keep = len < 64 ? len : 64;

    if (n > sizeof(scan) - 1 - keep)
        n = sizeof(scan) - 1 - keep;
    memcpy(scan, buf + len - keep, keep);
    memcpy(scan + keep, chunk, n);
    scan[keep + n] = '\0';
    for (size_t i = 0; i < keep + n; i++)
        if (scan[i] == '\0')
            scan[i] = ' ';
    if (strcasestr(scan, strerror(ENOSPC)) != NULL)
        return ENOSPC;
    return strcasestr(scan, strerror(EDQUOT)) != NULL ? EDQUOT : 0;
}

/* Append up to @n bytes read from @fd to @buf (@cap bytes, *@len used),
 * keeping the last bytes when it fills (a stderr tail). Returns the read(2)
 * result. */
static ssize_t drain(int fd, char *buf, size_t cap, size_t *len, bool tail, int *no_room)
{
    char chunk[4096];
    ssize_t got = read(fd, chunk, sizeof(chunk));

    if (got <= 0)
        return got;
    if (no_room != NULL && *no_room == 0)
        *no_room = says_no_room(buf, *len, chunk, (size_t)got);
    if (*len + (size_t)got >= cap) {
        size_t keep = cap - 1;

        if (!tail) {
            size_t room = cap - 1 - *len;

            memcpy(buf + *len, chunk, room);
            *len = keep;
            buf[*len] = '\0';
            return got;
        }
        /* keep the newest cap-1 bytes of what we had plus the chunk */
        if ((size_t)got >= keep) {
            memcpy(buf, chunk + (size_t)got - keep, keep);
        } else {
            size_t old = keep - (size_t)got;

            memmove(buf, buf + *len - old, old);
            memcpy(buf + old, chunk, (size_t)got);
        }
        *len = keep;
    } else {
        memcpy(buf + *len, chunk, (size_t)got);
        *len += (size_t)got;
    }
    buf[*len] = '\0';
    return got;
}

/* Run @argv (in its own process group, in @cwd, environment @envp) until it
 * exits or @deadline (sh_now_ns) passes: then its process group is killed.
 * Its stdout into @out, the tail of its stderr into @err; *@no_room (may be
 * NULL) ENOSPC or EDQUOT when its stderr said so anywhere, else 0. Call between
 * guard_begin and guard_end (the stop signals blocked). Returns the wait
 * status, or -1 with errno (ETIMEDOUT at the deadline, ECANCELED when a
 * stop signal came meanwhile: see on_stop). */
static int run_bounded(char *const *argv, char *const *envp, const char *cwd, int64_t deadline,
                       char *out, size_t outlen, char *err, size_t errlen, int *no_room)
{
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status = 0;
    size_t olen = 0, elen = 0;
    bool oopen = true, eopen = true, late = false, exited = false;
    pid_t pid;

    out[0] = err[0] = '\0';
    if (no_room != NULL)
        *no_room = 0;
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        int e = errno;

        if (po[0] >= 0) {
            close(po[0]);
            close(po[1]);
        }
        errno = e;
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        int e = errno;

        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);

        /* The stop signals are still blocked here: default them, then give
         * the child the mask the agent had (it must not inherit a block). */
        for (int i = 0; i < 3; i++)
            if (guard_set[i])
                signal(stops[i], SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &guard_oldmask, NULL);
        setpgid(0, 0);
        if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0 ||
            dup2(po[1], STDOUT_FILENO) < 0 || dup2(pe[1], STDERR_FILENO) < 0 ||
            chdir(cwd) != 0)
            _exit(127);
        execve(argv[0], argv, envp);
        dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* either side may win the race: the group exists now */
    child_group = pid;
    close(po[1]);
    close(pe[1]);
    /* Until the child has exited and both pipes are closed (a child that
     * closes them and runs on is still bounded by the deadline). */
    while ((oopen || eopen || !exited) && stop_signal == 0) {
        struct pollfd p[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
        int64_t left = deadline - sh_now_ns(), wait_ns;
        struct timespec ts;
        siginfo_t si;

        if (!exited) {
            memset(&si, 0, sizeof(si));
            /* Not reaped yet: its group cannot be reused before the kill below. */
            exited = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                     si.si_pid == pid;
        }
        if (left <= 0) {
            late = !exited || oopen || eopen;
            break;
        }
        if (!oopen && !eopen && exited)
            break;
        wait_ns = oopen || eopen ? left : 20 * NS_PER_MS;
        if (wait_ns > left)
            wait_ns = left;
        ts.tv_sec = (time_t)(wait_ns / 1000000000LL);
        ts.tv_nsec = (long)(wait_ns % 1000000000LL);
        p[0].fd = oopen ? po[0] : -1;
        p[1].fd = eopen ? pe[0] : -1;
        /* The only place the stop signals are taken (guard_oldmask). */
        if (ppoll(p, 2, &ts, &guard_oldmask) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (oopen && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
            drain(po[0], out, outlen, &olen, false, NULL) <= 0)
            oopen = false;
        if (eopen && (p[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
            drain(pe[0], err, errlen, &elen, true, no_room) <= 0)
            eopen = false;
    }
    close(po[0]);
    close(pe[0]);
    /* At the deadline, after a stop, and what the child left running in its
     * group (skopeo's helpers): the leader is not reaped yet, so its group
     * id still names this group. */
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    child_group = 0;
    if (stop_signal != 0) {
        errno = ECANCELED;
        return -1;
    }
    if (late) {
        errno = ETIMEDOUT;
        return -1;
    }
    return status;
}

/* The environment of the resolver and the importer: the job user's own
 * (HOME: their registry credentials), a fixed PATH, TMPDIR. The importer's
 * XDG_DATA_HOME is its import directory (@data_home; NULL for the
 * resolver): containers/image keeps its blob-info cache there
 * ($XDG_DATA_HOME/containers/cache for a user other than root), not under
 * the user's home, outside the allowed roots and often on NFS. Credentials
 * are not looked for under it (XDG_RUNTIME_DIR, XDG_CONFIG_HOME or HOME). */
struct child_env {
    char home[PATH_MAX + 8], user[300], logname[300], tmpdir[PATH_MAX + 8];
    char data_home[PATH_MAX + 16];
    char *envp[9];
};

static void child_env_init(struct child_env *ce, const char *user, const char *tmpdir,
                           const char *data_home)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    size_t n = 0;

    if (getpwnam_r(user, &pw, buf, sizeof(buf), &res) == 0 && res != NULL)
        snprintf(ce->home, sizeof(ce->home), "HOME=%s", pw.pw_dir);
    else
        snprintf(ce->home, sizeof(ce->home), "HOME=/");
    snprintf(ce->user, sizeof(ce->user), "USER=%s", user);
    snprintf(ce->logname, sizeof(ce->logname), "LOGNAME=%s", user);
    snprintf(ce->tmpdir, sizeof(ce->tmpdir), "TMPDIR=%s", tmpdir);
    ce->envp[n++] = (char *)"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    ce->envp[n++] = ce->home;
    ce->envp[n++] = ce->user;
    ce->envp[n++] = ce->logname;
    ce->envp[n++] = ce->tmpdir;
    ce->envp[n++] = (char *)"LC_ALL=C";
    if (data_home != NULL) {
        snprintf(ce->data_home, sizeof(ce->data_home), "XDG_DATA_HOME=%s", data_home);
        ce->envp[n++] = ce->data_home;
    }
    ce->envp[n] = NULL;
}

/* One line of @s for a message: newlines become "; ", the end trimmed. */
static void one_line(char *s)
{
    size_t n = strlen(s);

    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
        s[--n] = '\0';
    for (char *p = s; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
}

/* Why @status (run_bounded's, with its errno) is a failure, with the
 * stderr tail @tail; nothing for a status of 0. */
static void describe(const char *what, int status, const char *cmd, char *tail, char *err,
                     size_t errlen)
{
    err[0] = '\0';
    if (status == 0)
        return;
    one_line(tail);
    if (status < 0 && errno == ETIMEDOUT)
        snprintf(err, errlen, "the %s did not finish within the staging deadline (timeout=); "
                 "stopped%s%s", what, tail[0] != '\0' ? ": " : "", tail);
    else if (status < 0 && errno == ECANCELED)
        snprintf(err, errlen, "the %s was stopped: the staging was stopped by signal %d",
                 what, (int)stop_signal);
    else if (status < 0)
        snprintf(err, errlen, "cannot run the %s %s: %s", what, cmd, strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(err, errlen, "the %s was killed by signal %d%s%s", what, WTERMSIG(status),
                 tail[0] != '\0' ? ": " : "", tail);
    else
        snprintf(err, errlen, "the %s failed (exit %d)%s%s", what, WEXITSTATUS(status),
                 tail[0] != '\0' ? ": " : "", tail);
}

int sh_import_resolve(const struct sh_config *cfg, const char *user, const char *src,
                      int64_t deadline, struct sh_ref *ref, char *err, size_t errlen)
{
    char out[512], tail[STDERR_TAIL], why[SH_IMPORT_ERR_MAX];
    struct child_env ce;
    char **argv;
    int status;
    size_t n;

    if (sh_ref_parse_canonical(src, ref, why, sizeof(why)) != 0 ||
        sh_config_check_registry(cfg, ref->registry, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "%s: %s", src, why);
        return -1;
    }
    if (ref->digest[0] != '\0')
        return 0; /* pinned by the user: nothing to ask */
    argv = sh_ref_command_expand(cfg->resolver, ref, NULL);
    if (argv == NULL) {
        snprintf(err, errlen, "%s: out of memory", src);
        return -1;
    }
    child_env_init(&ce, user, "/tmp", NULL);
    guard_begin(NULL, NULL);
    status = run_bounded(argv, ce.envp, "/", child_deadline(deadline), out, sizeof(out),
                         tail, sizeof(tail), NULL);
    describe("resolver", status, argv[0], tail, why, sizeof(why));
    guard_end(); /* after a stop the agent ends here */
    if (status != 0) {
        sh_ref_command_free(argv);
        snprintf(err, errlen, "%s: cannot resolve the image's digest: %s", src, why);
        return -1;
    }
    sh_ref_command_free(argv);
    n = strcspn(out, "\r\n");
    out[n] = '\0';
    {
        struct sh_ref check = *ref;

        if (n >= sizeof(check.digest) || strncmp(out, "sha256:", 7) != 0) {
            snprintf(err, errlen, "%s: the resolver printed no digest ('%.80s')", src, out);
            return -1;
        }
        /* The digest must be one the reference grammar accepts. */
        snprintf(why, sizeof(why), "%s/%s@%s", ref->registry, ref->repo, out);
        if (sh_ref_parse(why, strlen(why), NULL, &check, tail, sizeof(tail)) != 0) {
            snprintf(err, errlen, "%s: the resolver printed a bad digest: %s", src, tail);
            return -1;
        }
        memcpy(ref->digest, check.digest, sizeof(ref->digest));
    }
    return 0;
}

int sh_import_paths(const char *dir, const char *dst, uint64_t jobid, uint64_t stepid,
                    char *workdir, size_t wlen, char *image, size_t ilen)
{
    const char *slash = strrchr(dst, '/');
    const char *name = slash != NULL ? slash + 1 : dst;
    int n = snprintf(workdir, wlen, "%s/.%s.import.%" PRIu64 ".%" PRIu64, dir, name, jobid,
                     stepid);
    int m = n >= 0 && (size_t)n < wlen ? snprintf(image, ilen, "%s/image.sqsh", workdir) : -1;

    /* A cut name could name another entry (or @dir itself) to remove. */
    if (m < 0 || (size_t)m >= ilen || (size_t)m >= sizeof(guard_image)) {
        workdir[0] = image[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT ? -1 : 0;
}

static int own_dir(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if ((flag == FTW_D || flag == FTW_DNR) && (sb->st_mode & 0700) != 0700 && chmod(path, (sb->st_mode & 07777) | 0700) != 0)
        return -1;
    return 0;
}

int sh_import_remove(const char *workdir)
{
    struct stat st;

    if (lstat(workdir, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
        errno = EPERM;
        return -1;
    }
    /* umoci's rootless unpack keeps read-only directories: make each one
     * the owner's to empty first (before nftw reads it), then remove depth
     * first; never following links. Not FTW_MOUNT: on overlayfs a
     * directory and the files in it report different devices, so it left
     * every file (the removal runs as the job user: it can remove only
     * what the user may). */
    if (nftw(workdir, own_dir, 16, FTW_PHYS) != 0)
        return -1;
    return nftw(workdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* nftw: everything under the import directory but the image (guard_image). */
static int prune_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    if (ftw->level == 0 || strcmp(path, guard_image) == 0)
        return 0;
    return rm_entry(path, sb, flag, ftw);
}

/* Leave the image alone in @workdir (what an importer left beside it goes),
 * so that a stop needs only unlink and rmdir (on_stop). */
static int import_prune(const char *workdir)
{
    if (nftw(workdir, own_dir, 16, FTW_PHYS) != 0)
        return -1;
    return nftw(workdir, prune_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int sh_import_release(const char *workdir)
{
    int rc, e;

    (void)sigprocmask(SIG_BLOCK, &guard_mask, NULL);
    guard_files = 0;
    rc = sh_import_remove(workdir);
    e = errno;
    guard_end();
    errno = e;
    return rc;
}

/* The importer ran out of room (its stderr said ENOSPC or EDQUOT): what
 * the first node's filesystem of the import directory @workdir (gone by
 * now) has, and what an import needs there, into @note. Returns whether. */
static bool no_room_note(const char *workdir, char *note, size_t len)
{
    char dir[PATH_MAX], have[32], total[32];
    struct statvfs vfs;
    char *slash;

    snprintf(dir, sizeof(dir), "%s", workdir);
    slash = strrchr(dir, '/');
    if (slash == NULL)
        return false;
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    if (statvfs(dir, &vfs) != 0)
        return false;
    snprintf(note, len, "the image does not fit the first node: the import needs room beside "
             "DST for the image's layers, its unpacked files and its Squashfs file, and "
             "%.300s's filesystem has %s free of %s", dir,
             sh_format_size((uint64_t)vfs.f_bavail * vfs.f_frsize, have, sizeof(have)),
             sh_format_size((uint64_t)vfs.f_blocks * vfs.f_frsize, total, sizeof(total)));
    return true;
}

int sh_import_run(const struct sh_config *cfg, const char *user, const struct sh_ref *pinned,
                  const char *workdir, const char *image, int64_t deadline, char *err,
                  size_t errlen)
{
    char out[256], tail[STDERR_TAIL], why[SH_IMPORT_ERR_MAX], ref[SH_REF_TEXT_MAX];
    char note[512];
    struct child_env ce;
    struct stat st;
    bool described = false;
    int no_room = 0;
    char **argv;
    int status;

    sh_ref_format(pinned, ref, sizeof(ref));
    guard_begin(workdir, image);
    /* A directory of an earlier try of this job (killed agent) goes first. */
    if (sh_import_remove(workdir) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot remove %s: %s", ref, workdir, strerror(errno));
        guard_end();
        return -1;
    }
    if (mkdir(workdir, 0700) != 0) {
        snprintf(err, errlen, "%s: cannot make the import directory %s: %s", ref, workdir,
                 strerror(errno));
        guard_end();
        return -1;
    }
    guard_files = 1;
    argv = sh_ref_command_expand(cfg->importer, pinned, image);
    if (argv == NULL) {
        snprintf(err, errlen, "%s: out of memory", ref);
        sh_import_remove(workdir);
        guard_end();
        return -1;
    }
    child_env_init(&ce, user, workdir, workdir);
    status = run_bounded(argv, ce.envp, workdir, child_deadline(deadline), out, sizeof(out),
                         tail, sizeof(tail), &no_room);
    if (status != 0) {
        describe("importer", status, argv[0], tail, why, sizeof(why));
        snprintf(err, errlen, "%s: %s", ref, why);
        described = true;
    } else if (lstat(image, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        snprintf(err, errlen, "%s: the importer succeeded but wrote no image to %s", ref,
                 image);
        status = -1;
    } else if (import_prune(workdir) != 0) {
        snprintf(err, errlen, "%s: cannot empty the import directory %s: %s", ref, workdir,
                 strerror(errno));
        status = -1;
    }
    sh_ref_command_free(argv);
    if (status != 0) {
        if (sh_import_remove(workdir) != 0)
            sh_warn("import", "cannot remove %s: %s", workdir, strerror(errno));
        /* first, so that the importer's tail cannot push the sizes out; the
         * tail itself may be a stack trace printed after the error */
        if (described && no_room != 0 && no_room_note(workdir, note, sizeof(note)))
            snprintf(err, errlen, "%s: %s (the importer failed: %s); %s", ref, note,
                     no_room == ENOSPC ? "no space left on device" : "disk quota exceeded",
                     why);
        guard_end(); /* after a stop the agent ends here */
        return -1;
    }
    /* From here a stop removes the image and the directory (on_stop). */
    (void)sigprocmask(SIG_SETMASK, &guard_oldmask, NULL);
    sh_info("import", "%s imported into %s (%lld bytes)", ref, image, (long long)st.st_size);
    return 0;
}
