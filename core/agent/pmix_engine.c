/* Embedded PMIx host: the engine process (start, reap, stop) and what the
 * nodes exchange about it (exit statuses, fence data, failures). */
#include "config.h"
#include "pmix_host.h"
#include "stagehand/clock.h"
#include "key.h"
#include "stagehand/log.h"
#include "pmix_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the engine process ---------------------------------------------- */

int host_spawn_engine(const struct sh_pmix_cfg *cfg, char **env, struct engine *e)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int errpipe[2];
    int child_errno = 0;
    ssize_t got;
    pid_t pid, parent = getpid();

    if (devnull < 0)
        return -1;
    /* exec failure is reported through a close-on-exec pipe, so "cannot
     * execute" is told apart from an engine that exits with status 127. */
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        close(devnull);
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        int err = errno;
        close(devnull);
        close(errpipe[0]);
        close(errpipe[1]);
        errno = err;
        return -1;
    }
    if (pid == 0) {
        /* Child of a threaded process: async-signal-safe calls only. The
         * engine stays in the agent's process group, so that the plugin's
         * kill of that group on its deadline reaches it too. */
        int err;

        /* The host process gone (its agent was killed): SIGTERM, which
         * the engine's guard turns into removing its temp and lock files. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        if (devnull != STDIN_FILENO)
            dup2(devnull, STDIN_FILENO);
        if (errpipe[1] > 3)
            dup2(errpipe[1], 3);
        fcntl(3, F_SETFD, FD_CLOEXEC);
        syscall(SYS_close_range, 4U, ~0U, 0U);
        execve(cfg->argv[0], (char *const *)(uintptr_t)cfg->argv, env);
        err = errno;
        if (write(3, &err, sizeof(err)) < 0)
            _exit(127);
        _exit(127);
    }
    close(devnull);
    close(errpipe[1]);
    do {
        got = read(errpipe[0], &child_errno, sizeof(child_errno));
    } while (got < 0 && errno == EINTR);
    close(errpipe[0]);
    e->pid = pid;
    e->pidfd = -1;
    if (got == (ssize_t)sizeof(child_errno)) {
        waitpid(pid, &e->status, 0);
        e->reaped = 1;
        e->status = -1;
        errno = child_errno;
        return -1;
    }
    e->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (e->pidfd < 0)
        sh_debug("pmix", "pidfd_open: %s; checking the engine twice a second",
                 strerror(errno));
    sh_info("pmix", "engine started: %s (pid %d)", cfg->argv[0], (int)pid);
    return 0;
}

void host_reap(struct engine *e)
{
    int status;

    if (e->pid < 0 || e->reaped)
        return;
    if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
        e->status = status;
        e->reaped = 1;
        if (e->pidfd >= 0)
            close(e->pidfd);
        e->pidfd = -1;
        if (WIFEXITED(status))
            sh_info("pmix", "engine exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
            sh_info("pmix", "engine killed by signal %d", WTERMSIG(status));
    }
}

/* Stop the engine: SIGTERM, SIGKILL after the grace period. Bounded:
 * returns once reaped or when the grace ends. */
void host_kill_engine(struct engine *e, int64_t grace_ns)
{
    int64_t until;

    host_reap(e);
    if (e->pid < 0 || e->reaped)
        return;
    if (e->term_at == 0) {
        e->term_at = sh_now_ns();
        kill(e->pid, SIGTERM);
    }
    until = e->term_at + grace_ns;
    while (!e->reaped && sh_now_ns() < until) {
        struct pollfd pfd = { .fd = e->pidfd, .events = POLLIN };
        int ms = sh_poll_ms_until(until);

        poll(&pfd, e->pidfd >= 0 ? 1 : 0, e->pidfd >= 0 ? ms : (ms < 50 ? ms : 50));
        host_reap(e);
    }
    if (!e->reaped) {
        kill(e->pid, SIGKILL);
        if (waitpid(e->pid, &e->status, 0) == e->pid)
            e->reaped = 1;
        if (e->pidfd >= 0)
            close(e->pidfd);
        e->pidfd = -1;
    }
}

/* The engine writes "stall limit (--stall-timeout) passed: no progress for
 * N s [at segment K of M ...]" or "deadline (--timeout) reached" in its
 * first error line (core/engine/guard.c); later lines are consequences. */
void host_timeout_cause(const char *path, struct engine *e)
{
    static const char stall[] = "stall limit (--stall-timeout) passed";
    static const char progress[] = "no progress for ";
    static const char segment[] = " at segment ";
    char line[512];
    FILE *f = fopen(path, "re");

    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *p;

        if (strstr(line, " error: ") == NULL)
            continue;
        if (strstr(line, stall) != NULL) {
            e->why |= DONE_STALLED;
            if ((p = strstr(line, progress)) != NULL)
                e->stall_s = (uint32_t)strtoul(p + sizeof(progress) - 1, NULL, 10);
            if ((p = strstr(line, segment)) != NULL)
                e->stall_seg = strtoull(p + sizeof(segment) - 1, NULL, 10);
        } else if (strstr(line, "(--timeout)") != NULL) {
            e->why |= DONE_TIMED_OUT;
        }
        break;
    }
    fclose(f);
}

/* Exit statuses travel as 32-bit big-endian two's complement. */
void host_put_status(unsigned char p[4], int32_t status)
{
    uint32_t v = (uint32_t)status;

    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

int32_t host_get_status(const unsigned char p[4])
{
    uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];

    return (int32_t)v;
}

void host_release_data(void *cbdata)
{
    free(cbdata);
}

/* Concatenate the FENCE blobs in node order; PMIx owns it until release. */
char *host_concat(const struct sh_ctl_result *res, size_t *len)
{
    size_t total = 0, off = 0;
    char *buf;

    for (uint32_t i = 0; i < res->nnodes; i++)
        total += res->entry[i].len;
    buf = malloc(total > 0 ? total : 1);
    if (buf == NULL)
        return NULL;
    for (uint32_t i = 0; i < res->nnodes; i++) {
        if (res->entry[i].len > 0)
            memcpy(buf + off, res->entry[i].data, res->entry[i].len);
        off += res->entry[i].len;
    }
    *len = total;
    return buf;
}

/* The segment a DONE entry @e says its engine stalled at, or
 * DONE_NO_SEGMENT. */
static uint64_t done_segment(const struct sh_ctl_entry *e)
{
    if (e->state != SH_CTL_OK || e->tag != TAG_DONE || e->len != DONE_LEN ||
        !((uint32_t)host_get_status(e->data + 4) & DONE_STALLED))
        return DONE_NO_SEGMENT;
    return (uint64_t)(uint32_t)host_get_status(e->data + 16) << 32 |
           (uint32_t)host_get_status(e->data + 20);
}

/* Did node @e fail on its own (not answer, or its engine did not exit with
 * 0 and was not stopped by its agent after a failure elsewhere)? */
static bool done_failed(const struct sh_ctl_entry *e)
{
    if (e->state != SH_CTL_OK || e->tag != TAG_DONE || e->len != DONE_LEN)
        return true;
    return host_get_status(e->data) != 0 &&
           !((uint32_t)host_get_status(e->data + 4) & DONE_STOPPED);
}

/* Lead @msg with the stall, when engines saw one at a segment (they saw the
 * copy stop): "no progress for N s (stall_timeout) at segment K on n1, n2:
 * the copy stalled at n3", naming the failed nodes that did not see it
 * themselves (the one that stopped moving: frozen, gone, stuck). K is the
 * lowest segment seen; N the limit. Returns the length used. */
static size_t describe_stall(const struct sh_pmix_cfg *cfg, const struct sh_ctl_result *res,
                             char *msg, size_t len)
{
    uint64_t seg = DONE_NO_SEGMENT;
    uint32_t secs = 0;
    size_t used;
    int n, first = 1;

    for (uint32_t i = 0; i < res->nnodes; i++) {
        uint64_t s = done_segment(&res->entry[i]);

        if (s == DONE_NO_SEGMENT)
            continue;
        secs = (uint32_t)host_get_status(res->entry[i].data + 12);
        if (s < seg)
            seg = s;
    }
    if (seg == DONE_NO_SEGMENT)
        return 0;
    n = snprintf(msg, len, "no progress for %u s (stall_timeout) at segment %llu on", secs,
                 (unsigned long long)seg);
    used = n > 0 && (size_t)n < len ? (size_t)n : 0;
    for (uint32_t i = 0; i < res->nnodes && used + 1 < len; i++) {
        if (done_segment(&res->entry[i]) == DONE_NO_SEGMENT)
            continue;
        n = snprintf(msg + used, len - used, "%s %s", first ? "" : ",", sh_ctl_name(cfg->ctl, i));
        used = n > 0 && used + (size_t)n < len ? used + (size_t)n : len - 1;
        first = 0;
    }
    n = snprintf(msg + used, len - used, ": the copy stalled");
    used = n > 0 && used + (size_t)n < len ? used + (size_t)n : len - 1;
    first = 1;
    for (uint32_t i = 0; i < res->nnodes && used + 1 < len; i++) {
        if (done_segment(&res->entry[i]) != DONE_NO_SEGMENT || !done_failed(&res->entry[i]))
            continue;
        n = snprintf(msg + used, len - used, "%s %s", first ? " at" : ",",
                     sh_ctl_name(cfg->ctl, i));
        used = n > 0 && used + (size_t)n < len ? used + (size_t)n : len - 1;
        first = 0;
    }
    return used;
}

/* Append one node's problem to @msg; @pass 0 lists causes (missing nodes,
 * engines that failed on their own), pass 1 the engines we stopped after a
 * failure elsewhere (killed by SIGTERM/SIGKILL), so a message leads with the
 * cause. */
static size_t describe_node(const struct sh_pmix_cfg *cfg, const struct sh_ctl_entry *e,
                            uint32_t i, int pass, char *msg, size_t len, size_t used)
{
    const char *sep = used > 0 ? "; " : "";
    const char *name = sh_ctl_name(cfg->ctl, i);
    int n = 0;

    if (e->state != SH_CTL_OK) {
        static const char *const what[] = {
            [SH_CTL_MISSING] = "did not answer",
            [SH_CTL_UNREACHABLE] = "unreachable",
            [SH_CTL_CLOSED] = "closed the control connection (agent ended or link broke)",
        };

        if (pass == 0 && e->state <= SH_CTL_CLOSED)
            n = snprintf(msg + used, len - used, "%s%s: %s", sep, name, what[e->state]);
    } else if (e->tag == TAG_DONE && e->len == DONE_LEN) {
        int32_t st = host_get_status(e->data);
        uint32_t flags = (uint32_t)host_get_status(e->data + 4);
        int stopped;

        stopped = (flags & DONE_STOPPED) != 0;
        if (pass != stopped)
            return used;
        if (flags & DONE_ABORTED)
            n = snprintf(msg + used, len - used, "%s%s: engine aborted (PMIx_Abort "
                         "status %d)", sep, name, host_get_status(e->data + 8));
        else if (flags & DONE_DEADLINE)
            n = snprintf(msg + used, len - used, "%s%s: engine stopped at the deadline",
                         sep, name);
        else if (flags & DONE_STALLED)
            n = snprintf(msg + used, len - used, "%s%s: no progress for %u s "
                         "(stall_timeout)", sep, name,
                         (uint32_t)host_get_status(e->data + 12));
        else if (flags & DONE_TIMED_OUT)
            n = snprintf(msg + used, len - used, "%s%s: the deadline (timeout) passed "
                         "while the engine ran", sep, name);
        else if (st == -1)
            n = snprintf(msg + used, len - used, "%s%s: engine did not start", sep, name);
        else if (WIFSIGNALED(st))
            n = snprintf(msg + used, len - used, "%s%s: engine %s by signal %d", sep,
                         name, stopped ? "stopped" : "killed", WTERMSIG(st));
        else if (WIFEXITED(st) && WEXITSTATUS(st) == SH_ENGINE_EXIT_KILLED)
            n = snprintf(msg + used, len - used, "%s%s: engine killed by a crash signal "
                         "a user's process sent (not a crash)", sep, name);
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            n = snprintf(msg + used, len - used, "%s%s: engine exited with status %d",
                         sep, name, WEXITSTATUS(st));
    }
    if (n < 0)
        return used;
    used += (size_t)n;
    return used < len ? used : len - 1;
}

void host_describe(const struct sh_pmix_cfg *cfg, const struct sh_ctl_result *res,
                   char *msg, size_t len)
{
    size_t used = 0;

    msg[0] = '\0';
    /* the stall first; then what else each node says (the nodes that saw
     * the stall at a segment are in that lead already) */
    used = describe_stall(cfg, res, msg, len);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < res->nnodes && used + 1 < len; i++) {
            if (done_segment(&res->entry[i]) == DONE_NO_SEGMENT)
                used = describe_node(cfg, &res->entry[i], i, pass, msg, len, used);
        }
    }
}
