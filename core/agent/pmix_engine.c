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
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < res->nnodes && used + 1 < len; i++)
            used = describe_node(cfg, &res->entry[i], i, pass, msg, len, used);
    }
}
