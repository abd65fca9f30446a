/* stagehand.so: the sentinel, "sh-sentinel", of a node whose copies are
 * current. Forked as root, with no exec, by the job prolog (slurmd's prolog
 * under on_node_fault=drain, or when the staging process could not be
 * forked), or become by the job prolog's staging process (stage_process.c).
 * It holds this node's control-plane port in a session of its own and starts
 * the agent (root) only when another node's agent connects; it ends after
 * join_timeout or in the epilog (epilog.c). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "agent_io.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/agentio.h"
#include "stagehand/cache.h"
#include "stagehand/clock.h"
#include "stagehand/ctlport.h"

/* The descriptor a woken sentinel hands the agent its listener on. */
#define SH_SENTINEL_LISTENER_FD 3

/* A woken sentinel's agent takes part in the copy for the others: on node 0
 * its engine reads SRC and, as every writer does, takes DST's lock beside
 * its DST first (the copy here is current: it writes nothing else). In the
 * node image cache that DST is in the job's directory, which this node's
 * staging sealed (0500, stagehand/cache.h) when it found its copies current:
 * open it again (0700, the job user's own directory, as a job step's
 * staging does), or that engine's pre-check fails and the copy with it. The
 * epilog removes the directory with the job. */
static void reopen_cache_dir(const struct sh_config *cfg, const struct sh_stage_job *job)
{
    char dir[PATH_MAX], err[256];
    struct stat sb;

    if (cfg->cache[0] == '\0' ||
        sh_cache_job_dir(cfg->cache, job->jobid, dir, sizeof(dir)) != 0 ||
        lstat(dir, &sb) != 0)
        return; /* no image of this job's in the cache */
    if (sh_cache_prepare(cfg->cache, job->jobid, job->uid, job->gid, err, sizeof(err)) != 0)
        slurm_error("stagehand: job %u: %s", job->jobid, err);
}

/* Sentinel (a child of the prolog's slurmstepd, never exec'd unless woken):
 * bind the job's control-plane port, tell the prolog through @ready, wait
 * for a connection for at most @wait_ms, then exec the agent on that
 * listener. Started by sh_sentinel_start or sh_sentinel_become; never
 * returns. */
static void __attribute__((noreturn)) sentinel(const struct sh_config *cfg,
                                               const struct sh_stage_job *job, int ac,
                                               char **av, int ready, int wait_ms)
{
    uint16_t port = 0;
    sigset_t none;
    int lfd, in, nul;
    char c = 1;

    /* Its own session: slurmd kills the prolog's process group when the
     * prolog ends (a deferred staging process already leads a process group
     * of its own, which the prolog gave it: there setsid fails, EPERM, and
     * changes nothing). No descriptor of slurmstepd's but @ready (< 0:
     * none): the job's staging lock (sh_job_lock) must not be held by
     * a process that outlives the staging. */
    if (getpgrp() != getpid())
        setsid();
    (void)prctl(PR_SET_NAME, SH_SENTINEL_NAME, 0, 0, 0);
    if (ready >= 0) {
        close_range(STDERR_FILENO + 1, (unsigned)ready - 1, 0);
        close_range((unsigned)ready + 1, ~0U, 0);
    } else {
        close_range(STDERR_FILENO + 1, ~0U, 0);
    }
    sh_release_stdio(ready);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    lfd = sh_ctl_bind(NULL, job->jobid, SH_AGENT_STEP_JOB, cfg->port_base, cfg->port_range,
                      sh_ctl_default_probe(cfg->port_range), 128, &port);
    if (ready >= 0) {
        (void)!write(ready, &c, 1);
        close(ready);
    }
    if (lfd >= 0) {
        struct pollfd pfd = { .fd = lfd, .events = POLLIN };
        int rc;

        while ((rc = poll(&pfd, 1, wait_ms)) < 0 && errno == EINTR)
            ;
        if (rc <= 0)
            _exit(0); /* nobody came: no other node needed this one */
        if (lfd != SH_SENTINEL_LISTENER_FD) {
            if (dup2(lfd, SH_SENTINEL_LISTENER_FD) < 0)
                _exit(1);
            close(lfd);
        }
        if (fcntl(SH_SENTINEL_LISTENER_FD, F_SETFD, 0) != 0) /* kept across exec */
            _exit(1);
    }
    /* Woken (or no port to hold: the agent binds its own, as before). */
    reopen_cache_dir(cfg, job);
    in = memfd_create("stagehand-agent-inputs", 0);
    if (in < 0 ||
        sh_agent_write_inputs(dup(in), job, true, lfd >= 0 ? SH_SENTINEL_LISTENER_FD : -1,
                              ac, av) != 0 ||
        lseek(in, 0, SEEK_SET) != 0 ||
        dup2(in, STDIN_FILENO) < 0)
        _exit(1);
    nul = open("/dev/null", O_WRONLY);
    if (nul < 0 || dup2(nul, STDOUT_FILENO) < 0)
        _exit(1);
    if (fcntl(STDERR_FILENO, F_GETFD) < 0)
        dup2(nul, STDERR_FILENO);
    close_range(SH_SENTINEL_LISTENER_FD + 1, ~0U, 0);
    if (lfd < 0)
        close(SH_SENTINEL_LISTENER_FD);
    execve(cfg->agent, sh_agent_argv, sh_agent_envp);
    _exit(127);
}

/* How long a sentinel waits for another node's agent (join_timeout), in ms. */
static int sentinel_wait_ms(const struct sh_config *cfg)
{
    int64_t wait_ms = (int64_t)cfg->join_timeout_ns / SH_NS_PER_MS;

    return wait_ms > INT32_MAX ? INT32_MAX : (int)wait_ms;
}

/* This node's copies are current (sh_local_current): leave the other nodes a
 * sentinel, and remember it for the epilog. The sentinel (a fork, no exec:
 * no library is loaded) holds this node's control-plane port in a session
 * of its own; only when a connection arrives, from another node's agent
 * (this node's children connect to it; its parent wakes it: sh_ctl_join),
 * does it start the agent on that port, detached: it votes, relays in the
 * control tree and, on node 0, reads SRC. When every node is current no
 * agent starts anywhere: the no-op at N=8 on the emulated cluster spent most
 * of its time in 8 agents starting at once (doc/performance.md). The
 * sentinel ends after join_timeout (no other node can still join) or in the
 * epilog. Without a free port it starts the agent at once, which then binds
 * its own. This node's outcome stays a success if neither starts: the other
 * nodes' agents report this node as missing. */
void sh_sentinel_start(const struct sh_config *cfg, const struct sh_stage_job *job, int ac,
                       char **av)
{
    int ready[2] = { -1, -1 };
    struct pollfd pfd;
    pid_t pid;
    char c;

    if (pipe2(ready, O_CLOEXEC) != 0) {
        slurm_error("stagehand: job %u: pipe: %s (the other nodes go without this "
                    "node's agent)", job->jobid, strerror(errno));
        return;
    }
    pid = fork();
    if (pid == 0) {
        close(ready[0]);
        sentinel(cfg, job, ac, av, ready[1], sentinel_wait_ms(cfg));
    }
    close(ready[1]);
    if (pid < 0) {
        slurm_error("stagehand: job %u: fork: %s (the other nodes go without this "
                    "node's agent)", job->jobid, strerror(errno));
        close(ready[0]);
        return;
    }
    /* Bounded wait until it has its own session and its port. */
    pfd = (struct pollfd){ .fd = ready[0], .events = POLLIN };
    if (poll(&pfd, 1, 1000) == 1)
        (void)!read(ready[0], &c, 1);
    close(ready[0]);
    sh_job_record_process(job->jobid, pid);
}

void sh_sentinel_become(const struct sh_config *cfg, const struct sh_stage_job *job, int ac,
                        char **av)
{
    sentinel(cfg, job, ac, av, -1, sentinel_wait_ms(cfg));
}
