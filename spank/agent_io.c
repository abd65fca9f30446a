/* stagehand.so: a staging's agent (agent_io.h), between the staging's steps
 * (staging.c) and the agent process ("stagehand-agent --prolog",
 * core/agent): spawned as root with its own process group, its inputs
 * through a pipe (never argv or the environment: F19), its outcome read from
 * another pipe within the staging deadline, its process group killed on
 * expiry, then reaped. Runs as root in the processes that run staging.c: the
 * job prolog's staging process, the job prolog itself, or a job step's
 * slurmstepd. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "agent_io.h"
#include "internal.h"
#include "staging.h"
#include "stagehand/agentio.h"
#include "stagehand/clock.h"
#include "stagehand/kv.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

/* The agent's command line and whole environment (agent_io.h). */
static char agent_arg0[] = "stagehand-agent", agent_arg1[] = "--prolog";
static char agent_env_path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
char *const sh_agent_argv[] = { agent_arg0, agent_arg1, NULL };
char *const sh_agent_envp[] = { agent_env_path, NULL };

/* The length of @v as sh_kv_put writes it (escapes take 4 bytes). */
static size_t kv_len(const char *v)
{
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)v; *p != '\0'; p++)
        n += *p < 0x20 || *p == 0x7f || *p == '\\' ? 4 : 1;
    return n;
}

/* Do @job's values fit the agent's input lines and buffers (read_inputs in
 * core/agent/stage.c: 256 bytes for names, SH_KV_LINE_MAX for a line)? */
static bool inputs_fit(const struct sh_stage_job *job)
{
    return kv_len(job->spec) < SH_KV_LINE_MAX - 16 && kv_len(job->nodelist) < SH_KV_LINE_MAX - 16 &&
           strlen(job->nodelist) < 8192 && strlen(job->user) < 256 &&
           strlen(job->cluster) < 256 && strlen(job->nodename) < 256;
}

int sh_agent_write_inputs(int fd, const struct sh_stage_job *job, bool detached,
                          int listener, int ac, char **av)
{
    FILE *f = fdopen(fd, "w");
    int rc = 0;

    if (f == NULL)
        return -1;
    rc |= sh_kv_putf(f, SH_AGENT_IN_VERSION, "%d", SH_AGENT_PROTO_VERSION);
    rc |= sh_kv_putf(f, SH_AGENT_IN_JOBID, "%u", job->jobid);
    if (job->stepid >= 0)
        rc |= sh_kv_putf(f, SH_AGENT_IN_STEPID, "%ld", job->stepid);
    rc |= sh_kv_putf(f, SH_AGENT_IN_UID, "%u", (unsigned)job->uid);
    rc |= sh_kv_putf(f, SH_AGENT_IN_GID, "%u", (unsigned)job->gid);
    rc |= sh_kv_put(f, SH_AGENT_IN_USER, job->user);
    rc |= sh_kv_put(f, SH_AGENT_IN_NODELIST, job->nodelist);
    rc |= sh_kv_put(f, SH_AGENT_IN_NODENAME, job->nodename);
    rc |= sh_kv_put(f, SH_AGENT_IN_CLUSTER, job->cluster);
    rc |= sh_kv_put(f, SH_AGENT_IN_SPEC, job->spec);
    if (job->nnodes != 0)
        rc |= sh_kv_putf(f, SH_AGENT_IN_NNODES, "%u", job->nnodes);
    if (job->have_nodeid)
        rc |= sh_kv_putf(f, SH_AGENT_IN_NODEID, "%u", job->nodeid);
    rc |= sh_kv_putf(f, SH_AGENT_IN_UMASK, "%04o", job->umask_bits);
    for (int i = 0; i < ac; i++)
        rc |= sh_kv_put(f, SH_AGENT_IN_ARG, av[i]);
    if (detached)
        rc |= sh_kv_put(f, SH_AGENT_IN_LOCAL, "current");
    else if (sh_cache_refusal() != NULL)
        rc |= sh_kv_put(f, SH_AGENT_IN_REFUSE, sh_cache_refusal());
    if (listener >= 0)
        rc |= sh_kv_putf(f, SH_AGENT_IN_LISTENER, "%d", listener);
    rc |= fprintf(f, "%s\n", SH_AGENT_IN_END) < 0 ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc == 0 ? 0 : -1;
}

static void parse_output_line(char *line, struct sh_agent_result *res)
{
    char *key, *value;

    if (sh_kv_split(line, &key, &value) != 0)
        return;
    if (strcmp(key, SH_AGENT_OUT_RESULT) == 0) {
        res->have_result = true;
        res->ok = strcmp(value, "ok") == 0;
    } else if (strcmp(key, SH_AGENT_OUT_FAULT) == 0) {
        res->node_fault = strcmp(value, "node") == 0;
    } else if (strcmp(key, SH_AGENT_OUT_PHASE) == 0) {
        res->user_phase = strcmp(value, "user") == 0;
    } else if (strcmp(key, SH_AGENT_OUT_MESSAGE) == 0) {
        snprintf(res->message, sizeof(res->message), "%s", value);
    } else if (strcmp(key, SH_AGENT_OUT_SUMMARY) == 0) {
        sh_status_add_summary(&res->status, value);
    } else if (strcmp(key, SH_AGENT_OUT_CACHE) == 0) {
        char *sp = strchr(value, ' ');
        uint64_t img;

        if (sp != NULL) {
            *sp = '\0';
            if (sh_parse_u64(value, &img) == 0 && img < SH_SPEC_MAX_IMAGES &&
                res->cache_report[img] == NULL)
                res->cache_report[img] = strdup(sp + 1);
        }
    } else if (strcmp(key, SH_AGENT_OUT_LOG) == 0) {
        slurm_info("%s", value);
    } else if (strcmp(key, SH_AGENT_OUT_DEBUG) == 0) {
        slurm_debug("%s", value);
    }
}

/* How often a step's staging on the step's node 0 asks slurmctld whether
 * its job still runs (read_outputs): one question per step staging every
 * 2 s, not one per node. */
#define SH_STEP_WATCH_NS (2 * SH_NS_PER_S)

/* A step's staging cancels like a job's (issue 35 item 4): slurmstepd is
 * inside this plugin until the staging ends, so a scancel does not reach
 * it. The step's node 0 asks slurmctld every SH_STEP_WATCH_NS whether the
 * job still runs; once it has ended, this node's agent is stopped, as the
 * epilog stops a job's (sh_stage_process_stop), and the other nodes' agents
 * see it gone and stop their engines. */
static void step_watch(const struct sh_staging *s, pid_t agent, int64_t *next)
{
    if (agent <= 0 || sh_now_ns() < *next)
        return;
    *next = sh_now_ns() + SH_STEP_WATCH_NS;
    if (!sh_stage_process_stopped() && !sh_step_job_running(s->job->jobid)) {
        slurm_info("stagehand: job %u step %ld: the job has ended during this step's "
                   "staging: stopping it (agent %d)", s->job->jobid, s->job->stepid,
                   (int)agent);
        sh_stage_process_stop(agent);
    }
}

/* Read the agent's output until EOF or @deadline; returns 0 at EOF, -1 with
 * errno = ETIMEDOUT at the deadline. @watch > 0: the agent of a step's
 * staging on the step's node 0, stopped when the job ends (step_watch). */
static int read_outputs(const struct sh_staging *s, int fd, int64_t deadline, pid_t watch)
{
    struct sh_agent_result *res = s->res;
    char buf[SH_KV_LINE_MAX * 2];
    size_t used = 0;
    int64_t next_watch = sh_now_ns() + SH_STEP_WATCH_NS;

    for (;;) {
        int ms = sh_poll_ms_until(deadline);
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;
        int pr;

        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (watch > 0) {
            int wms = sh_poll_ms_until(next_watch);

            step_watch(s, watch, &next_watch);
            if (wms < ms)
                ms = wms > 0 ? wms : 1;
        }
        pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        n = read(fd, buf + used, sizeof(buf) - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        used += (size_t)n;
        buf[used] = '\0';
        for (;;) {
            char *nl = memchr(buf, '\n', used);
            size_t len;

            if (nl == NULL) {
                if (used == sizeof(buf) - 1)
                    used = 0; /* an over-long line: drop it */
                break;
            }
            *nl = '\0';
            len = (size_t)(nl - buf) + 1;
            parse_output_line(buf, res);
            memmove(buf, buf + len, used - len);
            used -= len;
            buf[used] = '\0';
        }
    }
}

int sh_above_stdio(int fd)
{
    int nfd;

    if (fd > STDERR_FILENO)
        return fd;
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    return nfd;
}

/* Start @agent ("stagehand-agent --prolog") in a new session with @in_fd as
 * its stdin and @out_fd as its stdout (/dev/null when < 0: a detached agent),
 * stderr left to slurmd (or /dev/null when closed), no other descriptor,
 * SIGPIPE at its default and PATH as its whole environment. posix_spawn(3),
 * which glibc implements with clone(CLONE_VM|CLONE_VFORK): unlike fork(2) it
 * does not copy slurmstepd's page tables or make the next writes on both
 * sides copy-on-write faults (on the test VM, where every page fault is a
 * hypervisor exit, fork took 1.2-1.9 ms and vfork 0.3 ms). Returns 0 and sets *@pid, or an errno value
 * (an exec failure such as ENOENT comes back here, not as an exit status). */
static int spawn_agent(const char *agent, int in_fd, int out_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t dfl, none;
    int rc;

    if ((rc = posix_spawn_file_actions_init(&fa)) != 0)
        return rc;
    if ((rc = posix_spawnattr_init(&attr)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    /* dup2 clears close-on-exec on the copies; closefrom leaks no other
     * slurmd descriptor (the agent logs through its output pipe, "log="
     * lines; its stderr stays slurmd's for a crash). */
    rc = posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
    if (rc == 0 && out_fd >= 0)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    else if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (rc == 0 && fcntl(STDERR_FILENO, F_GETFD) < 0)
        rc = posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null",
                                              O_WRONLY, 0);
    if (rc == 0)
        rc = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
    if (rc == 0)
        rc = posix_spawnattr_setsigdefault(&attr, &dfl);
    /* No signal blocked: slurmstepd's thread that runs a step's staging has
     * SIGTERM blocked, and an agent that inherited that mask (and its
     * engines) ignored the stop of a cancelled step (issue 35 item 4). */
    sigemptyset(&none);
    if (rc == 0)
        rc = posix_spawnattr_setsigmask(&attr, &none);
    if (rc == 0)
        rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
                                                 POSIX_SPAWN_SETSIGMASK);
    if (rc == 0)
        rc = posix_spawn(pid, agent, &fa, &attr, sh_agent_argv, sh_agent_envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

static void close_pipe(int p[2])
{
    for (int i = 0; i < 2; i++) {
        if (p[i] >= 0)
            close(p[i]);
        p[i] = -1;
    }
}

/* The agent: start it on two pipes and pass it @s's inputs. Returns its pid
 * and its output's read end in *@out_fd, or -1 with the reason in @s's
 * outcome (a node fault). */
static pid_t agent_start(struct sh_staging *s, int ac, char **av, int *out_fd)
{
    struct sh_agent_result *res = s->res;
    int in_pipe[2] = { -1, -1 }, out_pipe[2] = { -1, -1 };
    pid_t pid;
    int rc;

    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
        (in_pipe[0] = sh_above_stdio(in_pipe[0])) < 0 ||
        (out_pipe[1] = sh_above_stdio(out_pipe[1])) < 0) {
        snprintf(res->message, sizeof(res->message), "pipe: %s", strerror(errno));
        res->node_fault = true;
        close_pipe(in_pipe);
        close_pipe(out_pipe);
        return -1;
    }
    rc = spawn_agent(s->cfg->agent, in_pipe[0], out_pipe[1], &pid);
    close(in_pipe[0]);
    close(out_pipe[1]);
    if (rc == 0 && s->deferred)
        sh_stage_process_set_agent(pid);
    if (rc != 0) {
        snprintf(res->message, sizeof(res->message), "cannot start the agent %.512s: %s",
                 s->cfg->agent, strerror(rc));
        res->node_fault = true;
        close(in_pipe[1]);
        close(out_pipe[0]);
        return -1;
    }
    /* SlurmdDebug=debug: with the agent's own "ready after" line, where a
     * staging's start-up time goes (bench/results: the no-op). */
    slurm_debug("stagehand: job %u: agent %d started %.1f ms after the plugin was called",
                s->job->jobid, (int)pid, (double)(sh_now_ns() - s->t_entry) / 1e6);
    signal(SIGPIPE, SIG_IGN);
    if (sh_agent_write_inputs(in_pipe[1], s->job, false, -1, ac, av) != 0)
        slurm_error("stagehand: job %u: cannot pass inputs to the agent: %s",
                    s->job->jobid, strerror(errno));
    *out_fd = out_pipe[0];
    return pid;
}

/* The agent @pid: read its outcome from @out_fd (closed) until it closes its
 * output or the staging deadline passes (its process group is then killed),
 * and reap it, bounded. Returns its wait status. */
static int agent_wait(struct sh_staging *s, pid_t pid, int out_fd)
{
    struct sh_agent_result *res = s->res;
    int64_t deadline;
    int wstatus = 0, rc;

    deadline = sh_now_ns() + (int64_t)s->cfg->timeout_ns + SH_STAGING_GRACE_S * 1000000000LL;
    if (read_outputs(s, out_fd, deadline,
                     s->job->stepid >= 0 && s->job->have_nodeid && s->job->nodeid == 0
                         ? pid : 0) != 0) {
        kill(-pid, SIGKILL);
        res->have_result = false;
        snprintf(res->message, sizeof(res->message),
                 "staging did not finish within the deadline (%llu s): agent killed",
                 (unsigned long long)(s->cfg->timeout_ns / 1000000000ULL));
    }
    close(out_fd);
    /* The agent closed its output: it is exiting. Reap it, bounded (5 s).
     * Poll every millisecond: when the agent is still exiting at the first
     * check, the whole step is added to the job's start (it was 50 ms). */
    for (int i = 0; i < 5000; i++) {
        rc = (int)waitpid(pid, &wstatus, WNOHANG);
        if (rc == pid || (rc < 0 && errno != EINTR))
            break;
        if (i == 4999) {
            kill(-pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            break;
        }
        usleep(1000);
    }
    return wstatus;
}

/* An agent that ended without a result (@wstatus): say why, and whose fault
 * it is. */
static void agent_no_result(struct sh_staging *s, int wstatus)
{
    struct sh_agent_result *res = s->res;

    if (sh_stage_process_stopped())
        snprintf(res->message, sizeof(res->message),
                 "the job ended on this node before its staging did: stopped");
    else if (WIFSIGNALED(wstatus))
        snprintf(res->message, sizeof(res->message),
                 "agent killed by signal %d", WTERMSIG(wstatus));
    else
        snprintf(res->message, sizeof(res->message),
                 "agent exited with status %d without a result",
                 WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
    /* Once the agent runs as the job user, the user can signal it: its
     * death is then the job's failure, not the node's (issue 30). */
    res->node_fault = !res->user_phase && !sh_stage_process_stopped();
}

void sh_agent_run(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;
    int out_fd = -1, wstatus;
    pid_t pid;

    /* The job's values must fit the agent's input lines: a longer spec (the
     * user's) would cut the agent's input short, a node fault. */
    if (!inputs_fit(job)) {
        snprintf(res->message, sizeof(res->message),
                 "the job's staging request is too long (%zu bytes; the spec, user and "
                 "cluster names and node list must each fit in %d bytes)",
                 strlen(job->spec), SH_KV_LINE_MAX - 16);
        return;
    }
    pid = agent_start(s, ac, av, &out_fd);
    if (pid < 0)
        return;
    wstatus = agent_wait(s, pid, out_fd);
    if (!res->have_result && res->message[0] == '\0')
        agent_no_result(s, wstatus);
    /* A step's staging runs in its slurmstepd before the step's tasks
     * exist, and a scancel meanwhile need not reach it: proctrack/cgroup on
     * cgroup v1 keeps slurmstepd and its children (this agent) out of the
     * step's container, so the staging went on and the cancelled step's
     * program then started until Slurm's kill caught up with it (measured,
     * PrologFlags=RunInJob, where srun's own job stages this way). One
     * question to slurmctld per node and staging: a job that has ended
     * fails its tasks instead. */
    if (s->job->stepid >= 0 && res->have_result && res->ok &&
        !sh_step_job_running(s->job->jobid)) {
        res->ok = false;
        snprintf(res->message, sizeof(res->message),
                 "the job ended during this step's staging: its tasks do not start");
    }
}
