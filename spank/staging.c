/* stagehand.so: a node's staging of a job or job step, from the job's lock
 * to its status file (staging.h). Runs as root in one of three processes:
 * the job prolog's staging process ("stagehand-stage", forked from the
 * prolog's slurmstepd: stage_process.c), the job prolog itself (slurmd's
 * prolog under on_node_fault=drain, or when that fork fails), or a job
 * step's slurmstepd before the step's tasks (step.c).
 *
 * The steps: begin (runtime directory, status path, the job's lock), admit
 * (plugstack configuration, the submitting side's version), then in the job
 * prolog hand over to the staging process; decide (the local check:
 * localcheck.c; a current node leaves a sentinel for the others), else the
 * agent: spawned as root with its own process group, its inputs through a
 * pipe (never argv or the environment: F19), its outcome read from another
 * pipe within the staging deadline, its process group killed on expiry;
 * record the outcome in a root-owned status file; unlock. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "internal.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/agentio.h"
#include "stagehand/clock.h"
#include "stagehand/kv.h"
#include "stagehand/local.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"


/* The agent's command line and whole environment (staging.h). */
static char agent_arg0[] = "stagehand-agent", agent_arg1[] = "--prolog";
static char agent_env_path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
char *const sh_agent_argv[] = { agent_arg0, agent_arg1, NULL };
char *const sh_agent_envp[] = { agent_env_path, NULL };

/* Create the root-owned runtime directory /run/stagehand (0755), refusing a
 * symlink or a directory owned by anyone else. */
static int ensure_runtime_dir(void)
{
    struct stat sb;

    if (mkdir(SH_RUNTIME_DIR, 0755) != 0 && errno != EEXIST)
        return -1;
    if (lstat(SH_RUNTIME_DIR, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != 0 || (sb.st_mode & 022) != 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

const char *sh_job_env(const char *name, const char *alt)
{
    const char *v = getenv(name);

    if ((v == NULL || v[0] == '\0') && alt != NULL)
        v = getenv(alt);
    return v != NULL ? v : "";
}

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

unsigned sh_job_umask(const char *text)
{
    unsigned m;

    return text != NULL && sh_parse_mode(text, &m) == 0 ? m : SH_UMASK_DEFAULT;
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

struct sh_agent_result {
    bool user_phase;     /* the agent said it runs as the job user now */
    bool have_result;
    bool ok;
    bool node_fault;
    char message[SH_STATUS_LINE_MAX];
    struct sh_status status;
    /* "cache=<img> <digest> <identity>": image <img>'s new copy for the
     * node image cache (cache_job.c), NULL when none */
    char *cache_report[SH_SPEC_MAX_IMAGES];
};

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

static void fill_images(struct sh_status *st, const char *spec)
{
    char err[256];
    struct sh_spec_set *set = sh_spec_set_deserialize(spec, err, sizeof(err));

    if (set == NULL)
        return;
    for (size_t i = 0; i < sh_spec_set_count(set); i++)
        sh_status_add_image(st, sh_spec_set_dst(set, i));
    sh_spec_set_free(set);
}

static void staging_decide(struct sh_staging *s, int ac, char **av);

/* The outcome of this process's staging: ~0.6 MiB, not on the stack. */
static struct sh_agent_result agent_res;
/* This process's staging (one at a time: a prolog, a staging process or a
 * step's slurmstepd stages one job or step). */
static struct sh_staging staging;

/* Step 1, begin: an empty outcome for @job in @s, the runtime directory, the
 * status file's path and, for the job's staging (stepid < 0), the job's
 * lock. Returns 1 to go on; 0 when there is nothing to do (the job is staged
 * here already) or nothing to record in; -1 for a node fault under
 * on_node_fault=drain (job prolog only). */
static int staging_begin(struct sh_staging *s, const struct sh_stage_job *job)
{
    struct sh_agent_result *res = &agent_res;
    bool done = false;

    s->t_entry = sh_now_ns();
    s->job = job;
    s->cfg = NULL;
    s->res = res;
    s->lock_fd = -1;
    s->prolog = job->stepid < 0 && !job->missed_prolog;
    s->deferred = s->local_current = false;
    /* Not memset: see sh_status_clear(). */
    res->have_result = res->ok = res->node_fault = res->user_phase = false;
    res->message[0] = '\0';
    sh_status_clear(&res->status);
    snprintf(res->status.node, sizeof(res->status.node), "%s", job->nodename);
    fill_images(&res->status, job->spec);
    if (ensure_runtime_dir() != 0) {
        slurm_error("stagehand: job %u: runtime directory %s: %s", job->jobid,
                    SH_RUNTIME_DIR, strerror(errno));
        return sh_plugin.config.on_node_fault == SH_FAULT_DRAIN && s->prolog ? -1 : 0;
    }
    if (sh_status_path(SH_RUNTIME_DIR, job->jobid, job->stepid, s->status_path,
                       sizeof(s->status_path)) != 0)
        return 0;
    if (job->stepid < 0) {
        s->lock_fd = sh_job_lock(job->jobid, s->status_path, &done);
        if (s->lock_fd < 0)
            slurm_error("stagehand: job %u: cannot lock %s/%u.lock: %s (staging goes on "
                        "unlocked)", job->jobid, SH_RUNTIME_DIR, job->jobid,
                        strerror(errno));
        if (done) {
            slurm_debug("stagehand: job %u: staged on this node already", job->jobid);
            close(s->lock_fd);
            return 0;
        }
    }
    return 1;
}

/* Step 2, admit: may this node stage the job at all? Its plugstack
 * configuration is usable and the submitting side runs this version. False
 * with the reason in @s's outcome (a failure to record). */
static bool staging_admit(struct sh_staging *s, int ac, char **av)
{
    const struct sh_stage_job *job = s->job;

    s->cfg = sh_plugin_load_config(ac, av);
    if (s->cfg == NULL) {
        snprintf(s->res->message, sizeof(s->res->message),
                 "stagehand is misconfigured on this cluster: %.900s",
                 sh_plugin.config_error);
        return false;
    }
    sh_plugin_check_ports(s->cfg);
    /* case F26: the submitting side and this node must run one version. */
    if (job->submit_version != NULL && job->submit_version[0] != '\0' &&
        strcmp(job->submit_version, SH_VERSION) != 0) {
        snprintf(s->res->message, sizeof(s->res->message),
                 "the job was submitted with stagehand %.64s but node %.200s runs "
                 "stagehand %s: install the same version on every node and the "
                 "login nodes, then restart slurmd", job->submit_version,
                 job->nodename, SH_VERSION);
        return false;
    }
    return true;
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

/* The agents decide together: run this node's agent, its outcome in @s. */
static void staging_run_agent(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    int out_fd = -1, wstatus;
    pid_t pid = agent_start(s, ac, av, &out_fd);

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

/* The node image cache's part after the decision: adopt new copies (after
 * a failure too: a node that survived a dead one has its verified copy,
 * which the next job then finds current, doc/design.md §5), then seal the
 * job's directory. */
static void staging_cache_end(struct sh_staging *s)
{
    struct sh_agent_result *res = s->res;

    if (res->have_result && !s->local_current &&
        sh_cache_stage_adopt(s->cfg, s->job, res->cache_report, res->ok, res->message,
                             sizeof(res->message)) != 0)
        res->ok = false;
    sh_cache_stage_end(s->cfg, s->job);
    for (size_t i = 0; i < SH_SPEC_MAX_IMAGES; i++) {
        free(res->cache_report[i]);
        res->cache_report[i] = NULL;
    }
}

void sh_staging_decide(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    if (sh_cache_stage_prepare(s->cfg, job, res->message, sizeof(res->message)) != 0)
        return;
    staging_decide(s, ac, av);
    staging_cache_end(s);
}

/* The local check, else the agents. */
static void staging_decide(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    /* The job prolog on a node whose copies are current: done here. */
    if (s->prolog && sh_local_current(s->cfg, job, &res->status)) {
        if (!s->deferred)
            sh_sentinel_start(s->cfg, job, ac, av);
        s->local_current = true;
        res->have_result = res->ok = true;
        return;
    }
    /* The job's values must fit the agent's input lines: a longer spec (the
     * user's) would cut the agent's input short, a node fault. */
    if (!inputs_fit(job)) {
        snprintf(res->message, sizeof(res->message),
                 "the job's staging request is too long (%zu bytes; the spec, user and "
                 "cluster names and node list must each fit in %d bytes)",
                 strlen(job->spec), SH_KV_LINE_MAX - 16);
        return;
    }
    staging_run_agent(s, ac, av);
}

void sh_staging_record(struct sh_staging *s)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    res->status.ok = res->have_result && res->ok;
    snprintf(res->status.message, sizeof(res->status.message), "%s", res->message);
    if (sh_status_write(s->status_path, &res->status) != 0)
        slurm_error("stagehand: job %u: cannot write %s: %s", job->jobid,
                    s->status_path, strerror(errno));
    slurm_debug("stagehand: job %u: %s done after %.1f ms", job->jobid,
                s->prolog && !s->deferred ? "prolog" : "staging",
                (double)(sh_now_ns() - s->t_entry) / 1e6);
    if (res->status.ok) {
        for (size_t i = 0; i < res->status.n_summaries; i++)
            slurm_info("stagehand: job %u user %s: %s", job->jobid, job->user,
                       res->status.summary[i]);
    } else if (sh_stage_process_stopped()) {
        slurm_info("stagehand: job %u user %s: staging on %s: %s", job->jobid, job->user,
                   res->status.node, res->message);
    } else {
        slurm_error("stagehand: job %u user %s: staging failed on %s: %s", job->jobid,
                    job->user, res->status.node, res->message);
    }
}

void sh_staging_unlock(struct sh_staging *s)
{
    /* The lock last: the epilog waits for it and then stops the recorded
     * process, which must have logged its outcome by then. */
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    s->lock_fd = -1;
}

/* The job prolog has handed the staging to process @stager: it lets go of
 * the lock (the child holds the same open file description) and ends. */
static int staging_handed_over(struct sh_staging *s, pid_t stager)
{
    close(s->lock_fd);
    s->lock_fd = -1;
    slurm_debug("stagehand: job %u: prolog done after %.1f ms, process %d stages",
                s->job->jobid, (double)(sh_now_ns() - s->t_entry) / 1e6, (int)stager);
    return 0;
}

int sh_stage_run(const struct sh_stage_job *job_in, int ac, char **av)
{
    static struct sh_stage_job job_cache;
    struct sh_staging *s = &staging;
    const struct sh_stage_job *job = job_in;
    char err[512];
    const char *spec = sh_cache_job_spec(sh_plugin_load_config(ac, av), job_in, err,
                                         sizeof(err));
    int rc;

    /* cache=: the job's images for the cache in their job form, for the
     * staging and for the status (STAGEHAND_IMAGE) alike */
    if (spec != NULL && spec != job_in->spec) {
        job_cache = *job_in;
        job_cache.spec = spec;
        job = &job_cache;
    } else if (spec == NULL) {
        slurm_error("stagehand: job %u: the job's images for the cache: %s", job_in->jobid,
                    err);
    }
    rc = staging_begin(s, job);

    if (rc <= 0)
        return rc;
    if (staging_admit(s, ac, av)) {
        /* The job prolog hands the staging to a process of its own and ends,
         * unless a node fault must fail the prolog (on_node_fault=drain). The
         * staging process carries on with @s and never returns here. */
        if (s->prolog && s->lock_fd >= 0 && s->cfg->on_node_fault != SH_FAULT_DRAIN) {
            pid_t stager = sh_stage_process_start(s, ac, av);

            if (stager > 0)
                return staging_handed_over(s, stager);
            slurm_error("stagehand: job %u: fork: %s (staging in the prolog)", job->jobid,
                        strerror(errno));
        }
        sh_staging_decide(s, ac, av);
    }
    sh_staging_record(s);
    sh_staging_unlock(s);
    if (!s->res->status.ok && s->prolog && s->res->node_fault && s->cfg != NULL &&
        s->cfg->on_node_fault == SH_FAULT_DRAIN)
        return -1;
    return 0;
}
