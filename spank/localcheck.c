/* stagehand.so: the local check of the job's staging on this node, in the
 * job prolog's staging process (stage_process.c, root), or in the prolog
 * itself under on_node_fault=drain (prolog.c, root); the check itself runs
 * in a child forked as the job user.
 *
 * A node whose copy of every image is current has nothing to wait for: the
 * agents' collective decision (doc/design.md §2 steps 3-5) only matters to the
 * nodes that need a copy. Waiting for it made every node's prolog, and so
 * the job's start, wait for the last node's slurmstepd and agent (bench:
 * the no-op at N=8). Here a child forked as the job user checks, with the
 * agent's own functions (stagehand/local.h), that SRC as this node sees it
 * matches DST's recorded metadata, that DST's directory is not on a shared
 * filesystem, and records the job's claim on DST and looks for conflicting
 * claims. When every image passes, the node's status records success; a
 * sentinel stays for the other nodes' sake and starts the agent only if
 * one of them needs this node (sentinel.c). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "stagehand/ref.h"
#include "staging.h"
#include "stagehand/clock.h"
#include "stagehand/local.h"
#include "stagehand/status.h"

/* A check that takes longer (a hung network filesystem) is abandoned and the
 * agent decides as before. */
#define LOCAL_CHECK_TIMEOUT_MS 5000

/* Child: write why the check failed to @fd and exit 1. */
static void __attribute__((noreturn, format(printf, 2, 3))) child_fail(int fd, const char *fmt,
                                                                       ...)
{
    char why[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (n > 0)
        (void)!write(fd, why, (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
    _exit(1);
}

/* Child: become the job user (groups, gid, uid, verified) with no
 * descriptor but @fd and stdio, or exit 1 with the reason on @fd. */
static void become_user(const struct sh_stage_job *job, const gid_t *groups, int ngroups,
                        int fd)
{
    /* No descriptor but @fd and stdio: a check stuck on a hung filesystem
     * must not keep the job's staging lock (joblock.c) held. */
    if (fd > STDERR_FILENO + 1)
        close_range(STDERR_FILENO + 1, (unsigned)fd - 1, 0);
    close_range((unsigned)fd + 1, ~0U, 0);
    if (setgroups((size_t)ngroups, groups) != 0 || setgid(job->gid) != 0 ||
        setuid(job->uid) != 0)
        child_fail(fd, "cannot become %s (uid %u): %s", job->user, (unsigned)job->uid,
                   strerror(errno));
    if (getuid() != job->uid || geteuid() != job->uid || getegid() != job->gid ||
        (job->uid != 0 && setuid(0) == 0))
        child_fail(fd, "privilege drop to uid %u did not take", (unsigned)job->uid);
}

/* What a check child does once it is the job user: write its answer to @fd
 * and _exit(0), or child_fail. */
struct user_check {
    const struct sh_config *cfg;
    const struct sh_stage_job *job;
    const struct sh_spec_set *set;
    const char *rundir;
    /* sh_local_src_match: the images to probe and the identities to match */
    size_t n;
    const char *const *srcs;
    const struct sh_src_id *ids;
    void (*run)(const struct user_check *c, int fd); /* never returns */
};

/* Child, as the job user: every image current and claimed, or exit 1 with
 * the reason on @fd. */
static void __attribute__((noreturn)) check_current(const struct user_check *c, int fd)
{
    const struct sh_config *cfg = c->cfg;
    const struct sh_stage_job *job = c->job;
    const struct sh_spec_set *set = c->set;
    const char *rundir = c->rundir;

    for (size_t i = 0; i < sh_spec_set_count(set); i++) {
        const char *src = sh_spec_set_src(set, i), *dst = sh_spec_set_dst(set, i);
        char dir[PATH_MAX], why[1024], claim[2 * PATH_MAX + 128], who[32], their[PATH_MAX];
        struct sh_src_id id;
        struct statfs fs;
        const char *fsname;
        int n;

        /* A registry image: only node 0 may ask the registry which digest
         * its tag names now (issue 36), so the agents decide. */
        if (sh_ref_is_image(src))
            child_fail(fd, "%s: a registry image, resolved by the job's node 0", dst);
        sh_nearest_dir(dst, dir, sizeof(dir));
        if (statfs(dir, &fs) != 0)
            child_fail(fd, "%s: statfs %s: %s", dst, dir, strerror(errno));
        fsname = sh_shared_fs_name((long)fs.f_type);
        if (fsname != NULL)
            child_fail(fd, "%s: %s is on a %s filesystem", dst, dir, fsname);
        if (sh_src_probe(src, &id, why, sizeof(why)) != 0)
            child_fail(fd, "%s", why);
        if (sh_dest_vote(cfg, job->uid, dst, &id, job->umask_bits, why, sizeof(why)) !=
            SH_VOTE_CURRENT)
            child_fail(fd, "%s: %s", dst, why);
        n = sh_claim_text(dst, &id, claim, sizeof(claim));
        if (n < 0 || sh_claim_write(rundir, i, claim, n) != 0)
            child_fail(fd, "%s: cannot record its use in %s: %s", dst, rundir,
                       strerror(errno));
        if (sh_claim_conflict(SH_RUNTIME_DIR, job->jobid, dst, claim, who, sizeof(who), their,
                              sizeof(their)))
            child_fail(fd, "%s: in use by job %s with other content", dst, who);
    }
    _exit(0);
}

/* The job user's groups (getgrouplist(3), through NSS): looked up in the
 * parent, so the forked child only makes system calls to take them. Returns
 * a malloc'ed array and its length in *@n, or NULL. */
static gid_t *user_groups(const char *user, gid_t gid, int *n)
{
    int want = 64;

    for (int tries = 0; tries < 4; tries++) {
        gid_t *groups = malloc(sizeof(*groups) * (size_t)want);
        int got = want;

        if (groups == NULL)
            return NULL;
        if (getgrouplist(user, gid, groups, &got) >= 0) {
            *n = got;
            return groups;
        }
        free(groups);
        if (got <= want)
            return NULL;
        want = got;
    }
    return NULL;
}

/* Run @c's check in a child forked as the job user, bounded
 * (LOCAL_CHECK_TIMEOUT_MS): what it wrote into @out (@outlen bytes,
 * NUL-terminated). True when it exited 0. */
static bool user_check_run(const struct user_check *c, char *out, size_t outlen)
{
    const struct sh_stage_job *job = c->job;
    gid_t *groups = NULL;
    int ngroups = 0, p[2] = { -1, -1 }, wstatus = 0;
    int64_t deadline = sh_now_ns() + LOCAL_CHECK_TIMEOUT_MS * SH_NS_PER_MS;
    size_t got = 0;
    bool ok = false;
    pid_t pid;

    out[0] = '\0';
    groups = user_groups(job->user, job->gid, &ngroups);
    if (groups == NULL) {
        snprintf(out, outlen, "cannot list the groups of %s", job->user);
        return false;
    }
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(out, outlen, "pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(out, outlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(p[0]);
        become_user(job, groups, ngroups, p[1]);
        c->run(c, p[1]);
        _exit(1);
    }
    close(p[1]);
    p[1] = -1;
    /* The child's answer, until it exits (EOF) or the check times out. */
    for (;;) {
        int ms = sh_poll_ms_until(deadline);
        struct pollfd pfd = { .fd = p[0], .events = POLLIN };
        ssize_t n;

        if (ms == 0) {
            kill(pid, SIGKILL);
            snprintf(out, outlen, "no answer within %d ms", LOCAL_CHECK_TIMEOUT_MS);
            waitpid(pid, &wstatus, WNOHANG);
            goto out;
        }
        if (poll(&pfd, 1, ms) <= 0)
            continue;
        n = read(p[0], out + got, outlen - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == outlen - 1)
            break;
    }
    out[got] = '\0';
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (!ok && out[0] == '\0')
        snprintf(out, outlen, "the check ended with status %d", wstatus);
out:
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
    free(groups);
    return ok;
}

bool sh_local_current(const struct sh_config *cfg, const struct sh_stage_job *job,
                      struct sh_status *st)
{
    char rundir[128], why[1024], err[256];
    struct sh_spec_set *set;
    int64_t t0 = sh_now_ns();
    bool current = false;
    struct user_check c = { .cfg = cfg, .job = job, .rundir = rundir,
                            .run = check_current };

    /* The job prolog only: a job step's slurmstepd on a node whose tasks end
     * first would end the detached agent with the step, while other nodes
     * still need it. Content checks are the engine's. */
    if (job->stepid >= 0 || (cfg->check != SH_CHECK_META && cfg->check != SH_CHECK_SIZE))
        return false;
    set = sh_spec_set_deserialize(job->spec, err, sizeof(err));
    if (set == NULL)
        return false;
    c.set = set;
    why[0] = '\0';
    if (sh_rundir_make(SH_RUNTIME_DIR, job->jobid, job->stepid, job->uid, job->gid, rundir,
                       sizeof(rundir)) != 0) {
        snprintf(why, sizeof(why), "runtime directory: %s", strerror(errno));
        goto out;
    }
    if (sh_rundir_limit(rundir, job->uid, job->gid) != 0)
        slurm_error("stagehand: job %u: cannot mount a tmpfs on %s: %s (the job user can "
                    "fill the file system under it)", job->jobid, rundir, strerror(errno));
    current = user_check_run(&c, why, sizeof(why));
    if (current) {
        double secs = (double)(sh_now_ns() - t0) / 1e9;

        for (size_t i = 0; i < sh_spec_set_count(set); i++) {
            char line[SH_STATUS_LINE_MAX];

            /* the time last: bench/run.sh reads "(<s> s)" at the end */
            snprintf(line, sizeof(line), "%.3000s: current on %.200s, nothing copied there; a "
                     "node that needs a copy gets it before its first step (%.3f s)",
                     sh_spec_set_dst(set, i), job->nodename, secs);
            sh_status_add_summary(st, line);
        }
    }
out:
    if (!current)
        slurm_debug("stagehand: job %u: not current on this node, the agents decide: %s",
                    job->jobid, why);
    sh_spec_set_free(set);
    return current;
}

/* Child, as the job user: for each source, '1' when the user can read it
 * now and its identity (size, mtime, ctime: doc/design.md §2 step 4) is the
 * recorded one, else '0'. */
static void __attribute__((noreturn)) check_sources(const struct user_check *c, int fd)
{
    char answer[SH_SPEC_MAX_IMAGES];

    for (size_t i = 0; i < c->n && i < sizeof(answer); i++) {
        struct sh_src_id id;
        char why[1024];
        const struct sh_src_id *want = &c->ids[i];

        answer[i] = sh_src_probe(c->srcs[i], &id, why, sizeof(why)) == 0 &&
                            id.size == want->size && id.mtime.sec == want->mtime.sec &&
                            id.mtime.nsec == want->mtime.nsec &&
                            id.ctime.sec == want->ctime.sec &&
                            id.ctime.nsec == want->ctime.nsec
                        ? '1'
                        : '0';
    }
    if (write(fd, answer, c->n) != (ssize_t)c->n)
        _exit(1);
    _exit(0);
}

int sh_local_src_match(const struct sh_stage_job *job, size_t n, const char *const *srcs,
                       const struct sh_src_id *ids, bool *match)
{
    char out[SH_SPEC_MAX_IMAGES + 1024];
    struct user_check c = { .job = job, .n = n, .srcs = srcs, .ids = ids,
                            .run = check_sources };

    if (n > SH_SPEC_MAX_IMAGES)
        return -1;
    if (!user_check_run(&c, out, sizeof(out)) || strlen(out) != n) {
        slurm_debug("stagehand: job %u: the source check as %s: %s", job->jobid, job->user,
                    out);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        match[i] = out[i] == '1';
    return 0;
}
