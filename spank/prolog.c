/* stagehand.so, job-script context (slurmd prolog and epilog, as root).
 *
 * The job prolog takes the job's staging lock and forks the process that
 * stages for this node (defer_staging), then ends; that process holds the
 * lock until it has written the job's status, and each task waits for the
 * lock before it reads the status (sh_wait_job_staging, remote.c), so no
 * task's program starts before its node's staging is done. The staging: a local check
 * (local.c; a current node stays on as a sentinel for the others), else
 * stagehand-agent, spawned as root with its own process group, its inputs
 * through a pipe (never argv or the environment: F19), its outcome read from
 * another pipe within the staging deadline, its process group killed on
 * expiry, the outcome recorded in a root-owned status file. Under
 * on_node_fault=drain the prolog stages itself and returns an error to
 * slurmd for a node fault: a required plugin's prolog error drains the node
 * and requeues+holds the job (measured), which is never right for a user's
 * mistake (doc/design.md §5). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "internal.h"
#include "stagehand/agentio.h"
#include "stagehand/clock.h"
#include "stagehand/ctlport.h"
#include "stagehand/io.h"
#include "stagehand/kv.h"
#include "stagehand/local.h"
#include "stagehand/rmtree.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

/* Seconds the agent gets beyond the staging deadline to report and clean up
 * before its process group is killed. */
#define PROLOG_GRACE_S 10

/* The process name of a node's staging process until it becomes the
 * sentinel (prctl(2)), for ps and the admin. */
#define SH_STAGING_NAME "stagehand-stage"
/* The process name of a task waiting for its node's staging (prctl(2)). */
#define SH_WAIT_NAME "stagehand-wait"

/* Set in a node's staging process when the epilog stops it: the job ended
 * on this node before its staging did (stop_running_staging). */
static volatile sig_atomic_t staging_stopped;
/* The agent that process runs (its own session, spawn_agent), or 0. */
static volatile pid_t staging_agent;

/* The descriptor a woken sentinel hands the agent its listener on. */
#define SH_SENTINEL_LISTENER_FD 3
/* A sentinel's process name (prctl(2) PR_SET_NAME), for ps and the epilog. */
#define SH_SENTINEL_NAME "sh-sentinel"

/* The agent's command line and whole environment (F19: nothing of the
 * job's), for posix_spawn(3) and a woken sentinel's execve(2). */
static char agent_arg0[] = "stagehand-agent", agent_arg1[] = "--prolog";
static char agent_env_path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
static char *const agent_argv[] = { agent_arg0, agent_arg1, NULL };
static char *const agent_envp[] = { agent_env_path, NULL };

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

static const char *env_or(const char *name, const char *alt)
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

/* The job's umask from the submitting side's @text (octal; NULL: not
 * sent), or SH_UMASK_DEFAULT: never looser than private (issue 30). */
static unsigned job_umask(const char *text)
{
    unsigned m;

    return text != NULL && sh_parse_mode(text, &m) == 0 ? m : SH_UMASK_DEFAULT;
}

/* Write the agent's inputs (stagehand/agentio.h) to @fd, which is closed;
 * @detached: the prolog ends without the agent (local=current); @listener
 * >= 0: the agent's descriptor of the control-plane listener a sentinel
 * bound (listener=). */
static int write_inputs(int fd, const struct sh_stage_job *job, bool detached,
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
    if (listener >= 0)
        rc |= sh_kv_putf(f, SH_AGENT_IN_LISTENER, "%d", listener);
    rc |= fprintf(f, "%s\n", SH_AGENT_IN_END) < 0 ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc == 0 ? 0 : -1;
}

struct agent_result {
    bool user_phase;     /* the agent said it runs as the job user now */
    bool have_result;
    bool ok;
    bool node_fault;
    char message[SH_STATUS_LINE_MAX];
    struct sh_status status;
};

static void parse_output_line(char *line, struct agent_result *res)
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
    } else if (strcmp(key, SH_AGENT_OUT_LOG) == 0) {
        slurm_info("%s", value);
    } else if (strcmp(key, SH_AGENT_OUT_DEBUG) == 0) {
        slurm_debug("%s", value);
    }
}

/* Read the agent's output until EOF or @deadline; returns 0 at EOF, -1 with
 * errno = ETIMEDOUT at the deadline. */
static int read_outputs(int fd, int64_t deadline, struct agent_result *res)
{
    char buf[SH_KV_LINE_MAX * 2];
    size_t used = 0;

    for (;;) {
        int ms = sh_poll_ms_until(deadline);
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;
        int pr;

        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
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

/* Move @fd to a descriptor number >= 3 (close-on-exec), closing the old one:
 * slurmd may run the prolog with fd 0-2 closed, so a pipe end can be 0, 1
 * or 2 and would be clobbered by the dup2 onto stdin/stdout. Returns the new
 * descriptor, or -1 with errno from fcntl(2) (@fd is closed either way). */
static int above_stdio(int fd)
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
    sigset_t dfl;
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
    if (rc == 0)
        rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF);
    if (rc == 0)
        rc = posix_spawn(pid, agent, &fa, &attr, agent_argv, agent_envp);
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

/* The start time of process @pid in clock ticks since boot (proc(5),
 * /proc/<pid>/stat field 22), or 0 when it is gone or a zombie. With the pid
 * it names one process: a pid alone could be reused by the time the epilog
 * runs. */
static unsigned long long proc_starttime(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long start = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (sh_read_small_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
        return 0;
    p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    if (p == NULL || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0; /* an exited process that is not reaped yet is gone too */
    /* fields 3 (state) to 21, then starttime */
    for (int field = 3; field <= 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%llu", &start) != 1)
        return 0;
    return start;
}

/* Remember a detached agent (@pid, its own process group) of @job in the
 * root-owned SH_RUNTIME_DIR/<jobid>.agent, for the epilog. */
static void record_detached(const struct sh_stage_job *job, pid_t pid)
{
    char path[128], text[64];
    int fd, n;

    snprintf(path, sizeof(path), "%s/%u.agent", SH_RUNTIME_DIR, job->jobid);
    n = snprintf(text, sizeof(text), "%d %llu\n", (int)pid, proc_starttime(pid));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, text, (size_t)n) != n)
        slurm_error("stagehand: job %u: cannot write %s: %s (the epilog will not stop "
                    "agent %d)", job->jobid, path, strerror(errno), (int)pid);
    if (fd >= 0)
        close(fd);
}

/* Remove the record of job @jobid's detached process (record_detached). */
static void forget_detached(uint32_t jobid)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/%u.agent", SH_RUNTIME_DIR, jobid);
    (void)unlink(path);
}

/* The job's staging lock: SH_RUNTIME_DIR/<jobid>.lock, into @buf (64 bytes
 * are enough). */
static void job_lock_path(uint32_t jobid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%u.lock", SH_RUNTIME_DIR, jobid);
}

/* The process recorded in @name under @rfd (record_detached) if that very
 * process still runs (pid and start time), with its name (/proc/<pid>/comm,
 * newline included) in @comm; 0 when there is none. */
static pid_t recorded_process(int rfd, const char *name, char *comm, size_t len)
{
    char text[64], path[64];
    unsigned long long start = 0;
    int pid = 0;

    comm[0] = '\0';
    if (sh_read_small_at(rfd, name, text, sizeof(text)) <= 0)
        return 0;
    if (sscanf(text, "%d %llu", &pid, &start) != 2 || pid <= 1 || start == 0 ||
        proc_starttime((pid_t)pid) != start)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    if (sh_read_small_at(AT_FDCWD, path, comm, len) <= 0)
        comm[0] = '\0';
    return (pid_t)pid;
}

/* Epilog: stop the detached agent recorded in @name under @rfd, if that very
 * process still runs, with its process group. */
static void stop_detached(int rfd, uint32_t jobid, const char *name)
{
    char comm[32];
    pid_t pid = recorded_process(rfd, name, comm, sizeof(comm));

    if (pid == 0)
        return;
    if (strcmp(comm, SH_SENTINEL_NAME "\n") == 0)
        slurm_debug("stagehand: epilog: job %u: stopping sentinel %d: no other node "
                    "needed this one", jobid, (int)pid);
    else
        slurm_info("stagehand: epilog: job %u: stopping agent %d, still serving other "
                   "nodes", jobid, (int)pid);
    kill(-pid, SIGKILL);
}

/* Epilog: the job has ended on this node while its staging here still runs
 * (a job cancelled while its images were copied, or one whose other nodes
 * ended it): nothing of this job will use the copy. SIGTERM its process
 * group: the engine removes its temp file, the agent dies and the staging
 * process records why (on_staging_stop). Waiting for it instead would hold
 * the node in the epilog up to the staging deadline, and a node whose parent
 * in the control tree has already gone waits join_timeout for nothing. */
static void stop_running_staging(uint32_t jobid)
{
    char path[64], comm[32];
    pid_t pid;
    int rfd, fd;

    job_lock_path(jobid, path, sizeof(path));
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
        close(fd); /* no staging holds it */
        return;
    }
    close(fd);
    rfd = open(SH_RUNTIME_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return;
    snprintf(path, sizeof(path), "%u.agent", jobid);
    pid = recorded_process(rfd, path, comm, sizeof(comm));
    close(rfd);
    if (pid == 0 || strcmp(comm, SH_STAGING_NAME "\n") != 0)
        return; /* the prolog stages itself (on_node_fault=drain): it ends first */
    slurm_info("stagehand: epilog: job %u: stopping its staging on this node (process "
               "%d): the job has ended here", jobid, (int)pid);
    kill(-pid, SIGTERM);
}

/* A process that outlives the prolog (a sentinel, a deferred staging
 * process) lets go of the prolog's standard streams: /dev/null on stdin and
 * stdout, and on stderr when that is a pipe. Slurm 24.11's slurmd runs the
 * SPANK prolog under run_command, which reads the prolog's output until end
 * of file: a sentinel that kept the pipe held the job's prolog until
 * join_timeout (60 s on every node whose copies were current), and a
 * deferred staging process held it for the whole staging, so that the batch
 * step started only after it (its tasks never waited as stagehand-wait).
 * Under 22.05 stderr is slurmd's own (its log or the journal) and stays, for
 * a crash of the agent. @keep (< 0: none) is a descriptor among 0-2 to leave
 * alone. */
static void release_stdio(int keep)
{
    struct stat st;
    int nul = open("/dev/null", O_RDWR);

    if (nul < 0)
        return;
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
        if (fd == keep || fd == nul)
            continue;
        if (fd == STDERR_FILENO && fstat(fd, &st) == 0 && !S_ISFIFO(st.st_mode))
            continue;
        (void)dup2(nul, fd);
    }
    if (nul > STDERR_FILENO)
        close(nul);
}

/* Sentinel (a child of the prolog's slurmstepd, never exec'd unless woken):
 * bind the job's control-plane port, tell the prolog through @ready, wait
 * for a connection for at most @wait_ms, then exec the agent on that
 * listener. Started by start_detached; never returns. */
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
     * none): the job's staging lock (lock_job_staging) must not be held by
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
    release_stdio(ready);
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
    in = memfd_create("stagehand-agent-inputs", 0);
    if (in < 0 || write_inputs(dup(in), job, true, lfd >= 0 ? SH_SENTINEL_LISTENER_FD : -1,
                               ac, av) != 0 || lseek(in, 0, SEEK_SET) != 0 ||
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
    execve(cfg->agent, agent_argv, agent_envp);
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
static void start_detached(const struct sh_config *cfg, const struct sh_stage_job *job,
                           int ac, char **av)
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
    record_detached(job, pid);
}

/* The job's staging runs once on a node: in the job prolog, or at the start
 * of the first step when no prolog ran (sh_step_stage_run), and a second
 * step that starts meanwhile waits for it. Take the job's lock,
 * /run/stagehand/<jobid>.lock (flock(2), blocking: the holder is bounded by
 * its deadline), and set *@done when the job's status is already written.
 * Returns the lock's descriptor, or -1 (errno) without a lock: the caller
 * goes on, logged. */
static int lock_job_staging(uint32_t jobid, const char *status_path, bool *done)
{
    char path[64];
    int fd;

    *done = false;
    job_lock_path(jobid, path, sizeof(path));
    /* Never on fd 0-2 (slurmd may run the prolog with them closed): the
     * sentinel the prolog forks under on_node_fault=drain keeps its stdio
     * while it waits, and would hold the lock, so the job's tasks would wait
     * for it (join_timeout). */
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || (fd = above_stdio(fd)) < 0)
        return -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;

            close(fd);
            errno = e;
            return -1;
        }
    }
    *done = access(status_path, F_OK) == 0;
    return fd;
}

bool sh_wait_job_staging(uint32_t jobid, int op, const sigset_t *stop)
{
    char path[64], name[17] = "";
    sigset_t old;
    int64_t t0 = sh_now_ns();
    bool renamed = false;
    int fd;

    job_lock_path(jobid, path, sizeof(path));
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (stop == NULL) {
        while (flock(fd, op) != 0 && errno == EINTR)
            ;
        close(fd);
        return true;
    }
    /* flock(2) cannot be polled together with signals: try, then wait for
     * one of @stop (blocked meanwhile, so none is lost) for an eighth of the
     * time waited so far, between 1 and 100 ms. While it waits the process
     * has a name of its own (prctl(2) PR_SET_NAME): Slurm's
     * proctrack/linuxproc signals no process of a step that still bears
     * slurmstepd's name (22.05 kill_tree.c), and a task before its exec does. */
    sigprocmask(SIG_BLOCK, stop, &old);
    while (flock(fd, op | LOCK_NB) != 0 && (errno == EWOULDBLOCK || errno == EINTR)) {
        int64_t wait_ns = (sh_now_ns() - t0) / 8;
        struct timespec ts;
        sigset_t one;
        int sig;

        if (!renamed && prctl(PR_GET_NAME, name, 0, 0, 0) == 0)
            renamed = prctl(PR_SET_NAME, SH_WAIT_NAME, 0, 0, 0) == 0;
        if (wait_ns < SH_NS_PER_MS)
            wait_ns = SH_NS_PER_MS;
        if (wait_ns > 100 * SH_NS_PER_MS)
            wait_ns = 100 * SH_NS_PER_MS;
        ts.tv_sec = (time_t)(wait_ns / 1000000000LL);
        ts.tv_nsec = (long)(wait_ns % 1000000000LL);
        sig = sigtimedwait(stop, NULL, &ts);
        if (sig <= 0)
            continue;
        /* Stopped while it waited: die of that signal, as the task would
         * have with its program running. */
        close(fd);
        signal(sig, SIG_DFL);
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        _exit(128 + sig);
    }
    if (renamed)
        (void)prctl(PR_SET_NAME, name, 0, 0, 0);
    close(fd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return true;
}

/* SIGTERM handler of a node's staging process (defer_staging): pass it to
 * the agent's session (kill(2) is async-signal-safe). */
static void on_staging_stop(int sig)
{
    pid_t agent = staging_agent;

    (void)sig;
    staging_stopped = 1;
    if (agent > 0)
        (void)kill(-agent, SIGTERM);
}

/* The job prolog, holding the job's staging lock: fork the process that
 * stages for this node and give it a process group of its own (slurmd kills
 * the prolog's when the prolog ends; set here, in the parent, so the prolog
 * need not wait until the child has run); the child records itself for the
 * epilog. The child holds the lock (the same open file description) until
 * it has written the job's status; a step's tasks wait
 * for it (sh_wait_job_staging), so no step starts before this node's staging
 * is done, as with a staging in the prolog itself. The prolog's end is what
 * slurmd waits for, and on a loaded node slurmd polls for it (Slurm 22.05:
 * 10, 30, 70, 150 ms after the start, doc/performance.md): a prolog
 * that waited for the local check missed the 70 ms poll. Returns 0 in the
 * child, the child's pid in the prolog, -1 (errno from fork(2)) when the
 * prolog must stage itself. */
static pid_t defer_staging(const struct sh_stage_job *job)
{
    pid_t pid = fork(), parent;
    int pfd;

    if (pid != 0) {
        if (pid > 0)
            (void)setpgid(pid, pid);
        return pid;
    }
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_NAME, SH_STAGING_NAME, 0, 0, 0);
    /* Slurm 24.11 waits for the prolog's output to end, not only for the
     * prolog: this process must not keep the job's batch step waiting. */
    release_stdio(-1);
    /* The epilog's SIGTERM to this process group stops the agent and its
     * engine (which removes its temp file); this process records why. A
     * handler, not SIG_IGN: the agent must not inherit it across exec. */
    signal(SIGTERM, on_staging_stop);
    /* Start once the prolog's slurmstepd has gone (bounded: 1 s): on a node
     * whose cores are all busy as its job starts, work done here before
     * would only make the prolog end later. */
    parent = getppid();
    pfd = parent > 1 ? (int)syscall(SYS_pidfd_open, parent, 0) : -1;
    if (pfd >= 0) {
        struct pollfd p = { .fd = pfd, .events = POLLIN };

        if (getppid() == parent)
            (void)poll(&p, 1, 1000);
        close(pfd);
    }
    /* Recorded for the epilog, which waits for the lock before it looks. */
    record_detached(job, getpid());
    return 0;
}

/* Does slurmctld still know job @jobid as running, not ending? True when it
 * cannot say (the step's tasks then start as they would have). */
static bool job_still_running(uint32_t jobid)
{
    job_info_msg_t *resp = NULL;
    bool running = true;

    if (slurm_load_job(&resp, jobid, SHOW_ALL) != SLURM_SUCCESS || resp == NULL)
        return true;
    for (uint32_t i = 0; i < resp->record_count; i++) {
        const slurm_job_info_t *jr = &resp->job_array[i];

        if (jr->job_id == jobid)
            running = (jr->job_state & JOB_STATE_BASE) == JOB_RUNNING &&
                      (jr->job_state & JOB_COMPLETING) == 0;
    }
    slurm_free_job_info_msg(resp);
    return running;
}

/* Run the agent for @job and record its outcome in the status file. Returns
 * -1 only for a node fault under on_node_fault=drain (job prolog only). */
static int run_staging(const struct sh_stage_job *job, int ac, char **av)
{
    const struct sh_config *cfg;
    static struct agent_result res; /* ~0.6 MiB: not on the stack */
    char status_path[512];
    int in_pipe[2] = { -1, -1 }, out_pipe[2] = { -1, -1 };
    int64_t deadline, t_entry = sh_now_ns();
    pid_t pid;
    int wstatus = 0, rc, lock_fd = -1;
    bool done = false, prolog = job->stepid < 0 && !job->missed_prolog;
    bool deferred = false, local_current = false;

    /* Not memset: see sh_status_clear(). */
    res.have_result = res.ok = res.node_fault = res.user_phase = false;
    res.message[0] = '\0';
    sh_status_clear(&res.status);
    snprintf(res.status.node, sizeof(res.status.node), "%s", job->nodename);
    fill_images(&res.status, job->spec);
    if (ensure_runtime_dir() != 0) {
        slurm_error("stagehand: job %u: runtime directory %s: %s", job->jobid,
                    SH_RUNTIME_DIR, strerror(errno));
        return sh_plugin.config.on_node_fault == SH_FAULT_DRAIN && prolog ? -1 : 0;
    }
    if (sh_status_path(SH_RUNTIME_DIR, job->jobid, job->stepid, status_path,
                       sizeof(status_path)) != 0)
        return 0;
    if (job->stepid < 0) {
        lock_fd = lock_job_staging(job->jobid, status_path, &done);
        if (lock_fd < 0)
            slurm_error("stagehand: job %u: cannot lock %s/%u.lock: %s (staging goes on "
                        "unlocked)", job->jobid, SH_RUNTIME_DIR, job->jobid,
                        strerror(errno));
        if (done) {
            slurm_debug("stagehand: job %u: staged on this node already", job->jobid);
            close(lock_fd);
            return 0;
        }
    }

    cfg = sh_plugin_load_config(ac, av);
    if (cfg == NULL) {
        snprintf(res.message, sizeof(res.message),
                 "stagehand is misconfigured on this cluster: %.900s",
                 sh_plugin.config_error);
        goto record;
    }
    sh_plugin_check_ports(cfg);
    /* case F26: the submitting side and this node must run one version. */
    if (job->submit_version != NULL && job->submit_version[0] != '\0' &&
        strcmp(job->submit_version, SH_VERSION) != 0) {
        snprintf(res.message, sizeof(res.message),
                 "the job was submitted with stagehand %.64s but node %.200s runs "
                 "stagehand %s: install the same version on every node and the "
                 "login nodes, then restart slurmd", job->submit_version,
                 job->nodename, SH_VERSION);
        goto record;
    }
    /* The job prolog hands the staging to a process of its own and ends,
     * unless a node fault must fail the prolog (on_node_fault=drain). */
    if (prolog && lock_fd >= 0 && cfg->on_node_fault != SH_FAULT_DRAIN) {
        pid_t stager = defer_staging(job);

        if (stager > 0) {
            close(lock_fd);
            slurm_debug("stagehand: job %u: prolog done after %.1f ms, process %d stages",
                        job->jobid, (double)(sh_now_ns() - t_entry) / 1e6, (int)stager);
            return 0;
        }
        if (stager == 0)
            deferred = true;
        else
            slurm_error("stagehand: job %u: fork: %s (staging in the prolog)", job->jobid,
                        strerror(errno));
    }
    /* The job prolog on a node whose copies are current: done here. */
    if (prolog && sh_local_current(cfg, job, &res.status)) {
        if (!deferred)
            start_detached(cfg, job, ac, av);
        local_current = true;
        res.have_result = res.ok = true;
        goto record;
    }
    /* The job's values must fit the agent's input lines: a longer spec (the
     * user's) would cut the agent's input short, a node fault. */
    if (!inputs_fit(job)) {
        snprintf(res.message, sizeof(res.message),
                 "the job's staging request is too long (%zu bytes; the spec, user and "
                 "cluster names and node list must each fit in %d bytes)",
                 strlen(job->spec), SH_KV_LINE_MAX - 16);
        goto record;
    }
    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
        (in_pipe[0] = above_stdio(in_pipe[0])) < 0 ||
        (out_pipe[1] = above_stdio(out_pipe[1])) < 0) {
        snprintf(res.message, sizeof(res.message), "pipe: %s", strerror(errno));
        res.node_fault = true;
        close_pipe(in_pipe);
        close_pipe(out_pipe);
        goto record;
    }
    rc = spawn_agent(cfg->agent, in_pipe[0], out_pipe[1], &pid);
    close(in_pipe[0]);
    close(out_pipe[1]);
    if (rc == 0 && deferred) {
        staging_agent = pid;
        if (staging_stopped) /* stopped before the agent existed */
            (void)kill(-pid, SIGTERM);
    }
    if (rc != 0) {
        snprintf(res.message, sizeof(res.message), "cannot start the agent %.512s: %s",
                 cfg->agent, strerror(rc));
        res.node_fault = true;
        close(in_pipe[1]);
        close(out_pipe[0]);
        goto record;
    }
    /* SlurmdDebug=debug: with the agent's own "ready after" line, where a
     * staging's start-up time goes (bench/results: the no-op). */
    slurm_debug("stagehand: job %u: agent %d started %.1f ms after the plugin was called",
                job->jobid, (int)pid, (double)(sh_now_ns() - t_entry) / 1e6);
    signal(SIGPIPE, SIG_IGN);
    if (write_inputs(in_pipe[1], job, false, -1, ac, av) != 0)
        slurm_error("stagehand: job %u: cannot pass inputs to the agent: %s",
                    job->jobid, strerror(errno));

    deadline = sh_now_ns() + (int64_t)cfg->timeout_ns + PROLOG_GRACE_S * 1000000000LL;
    if (read_outputs(out_pipe[0], deadline, &res) != 0) {
        kill(-pid, SIGKILL);
        res.have_result = false;
        snprintf(res.message, sizeof(res.message),
                 "staging did not finish within the deadline (%llu s): agent killed",
                 (unsigned long long)(cfg->timeout_ns / 1000000000ULL));
    }
    close(out_pipe[0]);
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
    if (!res.have_result && res.message[0] == '\0') {
        if (staging_stopped)
            snprintf(res.message, sizeof(res.message),
                     "the job ended on this node before its staging did: stopped");
        else if (WIFSIGNALED(wstatus))
            snprintf(res.message, sizeof(res.message),
                     "agent killed by signal %d", WTERMSIG(wstatus));
        else
            snprintf(res.message, sizeof(res.message),
                     "agent exited with status %d without a result",
                     WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
        /* Once the agent runs as the job user, the user can signal it: its
         * death is then the job's failure, not the node's (issue 30). */
        res.node_fault = !res.user_phase && !staging_stopped;
    }
    /* A step's staging runs in its slurmstepd before the step's tasks
     * exist, and a scancel meanwhile need not reach it: proctrack/cgroup on
     * cgroup v1 keeps slurmstepd and its children (this agent) out of the
     * step's container, so the staging went on and the cancelled step's
     * program then started until Slurm's kill caught up with it (measured,
     * PrologFlags=RunInJob, where srun's own job stages this way). One
     * question to slurmctld per node and staging: a job that has ended
     * fails its tasks instead. */
    if (job->stepid >= 0 && res.have_result && res.ok && !job_still_running(job->jobid)) {
        res.ok = false;
        snprintf(res.message, sizeof(res.message),
                 "the job ended during this step's staging: its tasks do not start");
    }

record:
    res.status.ok = res.have_result && res.ok;
    snprintf(res.status.message, sizeof(res.status.message), "%s", res.message);
    if (sh_status_write(status_path, &res.status) != 0)
        slurm_error("stagehand: job %u: cannot write %s: %s", job->jobid,
                    status_path, strerror(errno));
    slurm_debug("stagehand: job %u: %s done after %.1f ms", job->jobid,
                prolog && !deferred ? "prolog" : "staging",
                (double)(sh_now_ns() - t_entry) / 1e6);
    if (res.status.ok) {
        for (size_t i = 0; i < res.status.n_summaries; i++)
            slurm_info("stagehand: job %u user %s: %s", job->jobid, job->user,
                       res.status.summary[i]);
    } else if (staging_stopped) {
        slurm_info("stagehand: job %u user %s: staging on %s: %s", job->jobid, job->user,
                   res.status.node, res.message);
    } else {
        slurm_error("stagehand: job %u user %s: staging failed on %s: %s", job->jobid,
                    job->user, res.status.node, res.message);
    }
    /* The lock last: the epilog waits for it and then stops the recorded
     * process, which must have logged its outcome by then. */
    if (deferred && !local_current)
        forget_detached(job->jobid); /* it ends here: nothing to stop */
    if (lock_fd >= 0)
        close(lock_fd);
    if (deferred) {
        /* The staging process: a node whose copies are current stays on as
         * this node's sentinel (start_detached); any other ends here. */
        if (local_current)
            sentinel(cfg, job, ac, av, -1, sentinel_wait_ms(cfg));
        _exit(0);
    }
    if (!res.status.ok && prolog && res.node_fault && cfg != NULL &&
        cfg->on_node_fault == SH_FAULT_DRAIN)
        return -1;
    return 0;
}

void sh_slurmd_prepare(const struct sh_config *cfg)
{
    char fixed[PATH_MAX], pwbuf[4096], owner[128];
    struct sh_root_dir_problem bad;
    struct passwd pw, *pwr = NULL;
    const char *root;
    int fd;

    if (sh_config_default_fixed(cfg, fixed, sizeof(fixed)) != 0)
        return;
    root = sh_config_allowed_root(cfg, fixed);
    if (root == NULL)
        return; /* the fixed part is an allowed root itself: the site's */
    fd = sh_root_dirs_make(root, fixed, 0755, &bad);
    if (fd >= 0) {
        close(fd);
        slurm_debug("stagehand: %s: root's directory for the default destinations (%s)",
                    fixed, cfg->default_dest);
        return;
    }
    if (errno != EPERM) {
        slurm_error("stagehand: cannot make %s, root's directory for the default "
                    "destinations (default_dest=%s): %s: %s (jobs make it as they "
                    "need it)", fixed, cfg->default_dest,
                    bad.path[0] != '\0' ? bad.path : root, strerror(errno));
        return;
    }
    if (getpwuid_r(bad.uid, &pw, pwbuf, sizeof(pwbuf), &pwr) == 0 && pwr != NULL)
        snprintf(owner, sizeof(owner), "%.64s (uid %u)", pw.pw_name, (unsigned)bad.uid);
    else
        snprintf(owner, sizeof(owner), "uid %u", (unsigned)bad.uid);
    slurm_error("stagehand: %s is %s, owner %s, where root's directory for the default "
                "destinations goes (default_dest=%s): a user may have made it before "
                "root did. Jobs that stage to the default destination fail on this node "
                "until an administrator removes it (stagehand leaves it: it may hold "
                "that user's data); the next staging or slurmd start makes root's", bad.path,
                bad.what != NULL ? bad.what : "not a root-owned directory", owner,
                cfg->default_dest);
}

int sh_prolog_run(spank_t sp, int ac, char **av)
{
    struct sh_stage_job job = { .stepid = -1, .uid = (uid_t)-1, .gid = (gid_t)-1 };

    job.spec = getenv(SH_SPEC_PROLOG_ENV);
    if (job.spec == NULL || job.spec[0] == '\0')
        return 0; /* the job did not ask for staging */
    if (spank_get_item(sp, S_JOB_ID, &job.jobid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &job.uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &job.gid) != ESPANK_SUCCESS) {
        slurm_error("stagehand: prolog: cannot get job id/uid/gid");
        return 0;
    }
    job.user = env_or("SLURM_JOB_USER", NULL);
    /* 22.05 names it SLURM_NODELIST in the prolog; SLURM_JOB_NODELIST from
     * 23.11 (doc/design.md §8, F26). */
    job.nodelist = env_or("SLURM_JOB_NODELIST", "SLURM_NODELIST");
    job.nodename = env_or("SLURMD_NODENAME", NULL);
    job.cluster = env_or("SLURM_CLUSTER_NAME", NULL);
    job.submit_version = getenv("SPANK_" SH_VERSION_ENV);
    job.umask_bits = job_umask(getenv("SPANK_" SH_UMASK_ENV));
    return run_staging(&job, ac, av);
}

/* A value from the job's environment, which its user controls, fit to go
 * into a log line or message: at most @max bytes of letters, digits and
 * ".-_+~" (a version string), else NULL. */
static const char *bounded_version(const char *v, size_t max)
{
    size_t n = 0;

    for (; v[n] != '\0'; n++) {
        char c = v[n];

        if (n >= max || !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || strchr(".-_+~", c) != NULL))
            return NULL;
    }
    return v;
}

/* Copy Slurm's @value into @buf (@len bytes); -1 when it is missing or does
 * not fit. */
static int copy_slurm(char *buf, size_t len, const char *value)
{
    if (value == NULL || value[0] == '\0' || strlen(value) >= len)
        return -1;
    memcpy(buf, value, strlen(value) + 1);
    return 0;
}

/* The node list and cluster name of job @jobid's step @stepid (@step) or of
 * the job's allocation, from slurmctld (libslurm, loaded by slurmstepd):
 * never from the job's environment, which its user controls (security issue
 * 30 item 5). *@nnodes gets the job's node count (the allocation only; a
 * step's comes from S_JOB_NNODES). Returns 0, or -1 (logged). */
static int slurm_nodes(uint32_t jobid, uint32_t stepid, bool step, char *nodes, size_t nlen,
                       char *cluster, size_t clen, uint32_t *nnodes)
{
    int rc = -1;

    cluster[0] = '\0';
    *nnodes = 0;
    if (step) {
        job_step_info_response_msg_t *resp = NULL;

        if (slurm_get_job_steps((time_t)0, jobid, stepid, &resp, SHOW_ALL) != SLURM_SUCCESS ||
            resp == NULL) {
            slurm_error("stagehand: job %u step %u: cannot get the step's nodes from "
                        "slurmctld: %s", jobid, stepid, slurm_strerror(errno));
            return -1;
        }
        for (uint32_t i = 0; i < resp->job_step_count; i++) {
            const job_step_info_t *st = &resp->job_steps[i];

            if (st->step_id.job_id != jobid || st->step_id.step_id != stepid)
                continue;
            rc = copy_slurm(nodes, nlen, st->nodes);
            if (rc == 0 && copy_slurm(cluster, clen, st->cluster) != 0)
                cluster[0] = '\0';
            break;
        }
        slurm_free_job_step_info_response_msg(resp);
    } else {
        job_info_msg_t *resp = NULL;

        if (slurm_load_job(&resp, jobid, SHOW_ALL) != SLURM_SUCCESS || resp == NULL) {
            slurm_error("stagehand: job %u: cannot get the job's nodes from slurmctld: %s",
                        jobid, slurm_strerror(errno));
            return -1;
        }
        for (uint32_t i = 0; i < resp->record_count; i++) {
            const slurm_job_info_t *jr = &resp->job_array[i];

            if (jr->job_id != jobid)
                continue;
            rc = copy_slurm(nodes, nlen, jr->nodes);
            if (rc == 0 && copy_slurm(cluster, clen, jr->cluster) != 0)
                cluster[0] = '\0';
            *nnodes = jr->num_nodes;
            break;
        }
        slurm_free_job_info_msg(resp);
    }
    if (rc != 0)
        slurm_error("stagehand: job %u%s: slurmctld has no node list of at most %zu bytes "
                    "for it", jobid, step ? " step" : "", nlen - 1);
    return rc;
}

/* Fill @job for a staging that runs in a step's slurmstepd: the job's user
 * (from its uid), this node's name (slurmstepd's own), the node list and
 * cluster of the step (@step) or of the job from slurmctld, the step's node
 * count and this node's index in it from slurmstepd, and the submitting
 * side's version named by @version_env (the job's environment: bounded) and
 * its umask named by @umask_env, into
 * static buffers (one slurmstepd runs one step). Returns -1 when one is
 * missing. */
static int step_job_fill(spank_t sp, struct sh_stage_job *job, bool step, uint32_t stepid,
                         const char *version_env, const char *umask_env)
{
    static char nodelist[8192], cluster[256], user[256], nodename[256], version[64];
    char mask[16];
    struct passwd pw, *pwr = NULL;
    char pwbuf[4096];
    uint32_t nnodes = 0, nodeid = 0;

    if (spank_get_item(sp, S_JOB_ID, &job->jobid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &job->uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &job->gid) != ESPANK_SUCCESS) {
        slurm_error("stagehand: step: cannot get job id/uid/gid");
        return -1;
    }
    if (getpwuid_r(job->uid, &pw, pwbuf, sizeof(pwbuf), &pwr) != 0 || pwr == NULL)
        return -1;
    snprintf(user, sizeof(user), "%s", pw.pw_name);
    if (slurm_nodes(job->jobid, stepid, step, nodelist, sizeof(nodelist), cluster,
                    sizeof(cluster), &nnodes) != 0)
        return -1;
    if (step) {
        if (spank_get_item(sp, S_JOB_NNODES, &nnodes) != ESPANK_SUCCESS ||
            spank_get_item(sp, S_JOB_NODEID, &nodeid) != ESPANK_SUCCESS) {
            slurm_error("stagehand: step: cannot get the step's node count and id");
            return -1;
        }
        job->nodeid = nodeid;
        job->have_nodeid = true;
    }
    job->nnodes = nnodes;
    /* slurmstepd's node name: the one slurmd was started with. */
    snprintf(nodename, sizeof(nodename), "%s", env_or("SLURMD_NODENAME", NULL));
    if (nodename[0] == '\0' && gethostname(nodename, sizeof(nodename)) != 0)
        return -1;
    version[0] = '\0';
    if (spank_getenv(sp, version_env, version, sizeof(version)) == ESPANK_SUCCESS)
        job->submit_version = bounded_version(version, sizeof(version) - 1);
    if (job->submit_version == NULL && version[0] != '\0')
        job->submit_version = "(not a version)";
    job->umask_bits = job_umask(spank_getenv(sp, umask_env, mask, sizeof(mask)) ==
                                        ESPANK_SUCCESS
                                    ? mask
                                    : NULL);
    job->user = user;
    job->nodelist = nodelist;
    job->nodename = nodename;
    job->cluster = cluster;
    return 0;
}

#ifdef PROLOG_FLAG_RUN_IN_JOB
/* Slurm's configuration as this process loaded it (libslurmfull's, which
 * slurmd, slurmstepd and the client commands load and the plugin's other
 * Slurm calls resolve to: spank/meson.build). slurm.h declares its type,
 * not the variable; weak, so a host without it reads as "not set". The
 * plugin is built for the one Slurm release that loads it (F26), so the
 * layout is that release's. */
extern slurm_conf_t slurm_conf __attribute__((weak));
#endif

bool sh_slurm_prolog_in_job(void)
{
#ifdef PROLOG_FLAG_RUN_IN_JOB
    return &slurm_conf != NULL && (slurm_conf.prolog_flags & PROLOG_FLAG_RUN_IN_JOB) != 0;
#else
    return false;
#endif
}

int sh_extern_exit_run(spank_t sp, int ac, char **av)
{
    uint32_t stepid = 0;
    pid_t pid;
    int wstatus;

    if (!sh_slurm_prolog_in_job() || spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS ||
        stepid != SH_EXTERN_STEP)
        return 0;
    /* In a child, root in every respect: as Slurm 24.11's extern step
     * calls this, another of its threads runs its X11 shutdown (with or
     * without X11), which drops the whole process to the job user for a
     * moment (drop_privileges: seteuid(2), which glibc applies to every
     * thread); measured here, 1 job's clean-up in 3 failed with EACCES and
     * EPERM. A child's credentials are its own, and with the real and saved
     * user ids still root it can take root back (uid first: a non-zero
     * effective uid has no capability to set the groups). Slurm's log is
     * safe in a child (its pthread_atfork handlers). */
    pid = fork();
    if (pid == 0) {
        if (setresuid(0, 0, 0) != 0 || setresgid(0, 0, 0) != 0 || setgroups(0, NULL) != 0) {
            slurm_error("stagehand: extern step: cannot become root again for the job's "
                        "clean-up: %s", strerror(errno));
            _exit(1);
        }
        (void)sh_epilog_run(sp, ac, av);
        _exit(0);
    }
    if (pid < 0) {
        int e = errno;
        uint32_t jobid = 0;

        (void)spank_get_item(sp, S_JOB_ID, &jobid);
        slurm_error("stagehand: job %u: extern step: fork: %s (this node's %s entries of "
                    "the job stay)", jobid, strerror(e), SH_RUNTIME_DIR);
        return 0;
    }
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

/* Slurm 23.02.2 and later run the allocation's prolog before any step on a
 * node: there a step without a status never missed one. */
#define SH_SLURM_RUNS_PROLOG_FIRST (SH_SLURM_VERSION_NUMBER >= ((23u << 16) | (2u << 8) | 2u))

/* The job asked for staging (its spec is in the step's environment as
 * sbatch/salloc put it there) and this node has no status for it: no job
 * prolog ran here before this step (internal.h). Run the job's staging now,
 * as the prolog would have: the other nodes' agents wait for this node's
 * (join_timeout). The spec is the user's own request either way; the nodes
 * and cluster come from slurmctld. */
static int stage_missed_prolog(spank_t sp, int ac, char **av)
{
#if SH_SLURM_RUNS_PROLOG_FIRST
    /* The spec variable alone is anyone's to set (issue 30): with a prolog
     * that always runs first, a step never stages for the job. The task
     * reports a missing status as it would any other (remote.c). */
    (void)sp;
    (void)ac;
    (void)av;
    return 0;
#else
    static char spec[16384];
    struct sh_stage_job job = { .stepid = -1, .missed_prolog = true };
    char status_path[512], lock_path[64];
    char step[24] = "?";
    uint32_t jobid = 0, stepid = 0;

    /* A job prolog ran here when the job's lock exists: its staging
     * process may still be at work, and the tasks wait for it
     * (sh_wait_job_staging), where a cancel of the job can kill them. */
    if (spank_getenv(sp, "SLURM_SPANK_" SH_SPEC_ENV, spec, sizeof(spec)) != ESPANK_SUCCESS ||
        spec[0] == '\0' || spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
        sh_status_path(SH_RUNTIME_DIR, jobid, -1, status_path, sizeof(status_path)) != 0 ||
        access(status_path, F_OK) == 0 || errno != ENOENT)
        return 0;
    job_lock_path(jobid, lock_path, sizeof(lock_path));
    if (access(lock_path, F_OK) == 0 || errno != ENOENT)
        return 0;
    if (step_job_fill(sp, &job, false, 0, "SLURM_SPANK_" SH_VERSION_ENV,
                      "SLURM_SPANK_" SH_UMASK_ENV) != 0)
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) == ESPANK_SUCCESS) {
        if (stepid == SH_BATCH_STEP)
            snprintf(step, sizeof(step), "batch");
        else
            snprintf(step, sizeof(step), "%u", stepid);
    }
    job.spec = spec;
    slurm_info("stagehand: job %u: step %s started on %s before any job prolog ran here "
               "(Slurm before 23.02.2, bug 16093): staging the job's images for it now",
               jobid, step, job.nodename);
    (void)run_staging(&job, ac, av);
    return 0;
#endif
}

int sh_step_stage_run(spank_t sp, int ac, char **av)
{
    static char spec[16384];
    struct sh_stage_job job = { .uid = (uid_t)-1, .gid = (gid_t)-1 };
    uint32_t stepid = 0, jobid = 0;

    if (spank_getenv(sp, SH_STEP_SPEC_ENV, spec, sizeof(spec)) != ESPANK_SUCCESS ||
        spec[0] == '\0')
        return stage_missed_prolog(sp, ac, av);
    /* Only an srun that was given --stage-image stages at step start: the
     * variable alone is anyone's to set (issue 30 item 5). */
    if (sh_plugin.n_values == 0) {
        if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
            jobid = 0;
        slurm_debug("stagehand: job %u: %s is set but this step's srun had no "
                    "--stage-image: no step staging", jobid, SH_STEP_SPEC_ENV);
        return stage_missed_prolog(sp, ac, av);
    }
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS) {
        slurm_error("stagehand: step: cannot get the step id");
        return 0;
    }
    if (step_job_fill(sp, &job, true, stepid, SH_STEP_VERSION_ENV, SH_STEP_UMASK_ENV) != 0)
        return 0;
    job.stepid = (long)stepid;
    job.spec = spec;
    return run_staging(&job, ac, av);
}

/* Epilog: remove @name (a staging's runtime directory or state) under the
 * runtime directory @rfd, first unmounting its tmpfs (sh_rundir_limit). */
static void remove_runtime_entry(int rfd, uint32_t jobid, const char *name)
{
    if (sh_rundir_unlimit(rfd, name) != 0)
        slurm_error("stagehand: epilog: job %u: cannot unmount %s/%s: %s", jobid,
                    SH_RUNTIME_DIR, name, strerror(errno));
    if (sh_rmtree_at(rfd, name) != 0)
        slurm_error("stagehand: epilog: job %u: cannot remove %s/%s: %s", jobid,
                    SH_RUNTIME_DIR, name, strerror(errno));
}

/* Remove what staging left for @jobid besides its runtime directory:
 * "<jobid>.<step>" runtime directories, "<jobid>.<step>.status" files, and
 * "<jobid>.agent", the record of a detached agent, which is stopped first. */
static void remove_step_state(int rfd, uint32_t jobid)
{
    char prefix[32];
    struct dirent *de;
    DIR *d;
    int fd = dup(rfd);
    size_t plen;

    if (fd < 0)
        return;
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return;
    }
    snprintf(prefix, sizeof(prefix), "%u.", jobid);
    plen = strlen(prefix);
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        if (len > 6 && strcmp(de->d_name + len - 6, ".agent") == 0)
            stop_detached(rfd, jobid, de->d_name);
        remove_runtime_entry(rfd, jobid, de->d_name);
    }
    closedir(d);
}

int sh_epilog_run(spank_t sp, int ac, char **av)
{
    char path[512], name[32];
    uint32_t jobid = 0;
    int rfd;

    (void)ac;
    (void)av;
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        return 0;
    /* A staging of this job still running here is stopped, then waited
     * for (bounded by its deadline): it writes its outcome last. */
    stop_running_staging(jobid);
    (void)sh_wait_job_staging(jobid, LOCK_EX, NULL);
    if (sh_status_path(SH_RUNTIME_DIR, jobid, -1, path, sizeof(path)) == 0)
        unlink(path);
    /* The job's runtime directory belongs to the job user: remove it without
     * following anything the user may have planted in it. */
    rfd = open(SH_RUNTIME_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return 0;
    /* First the "<jobid>.*" entries: a detached agent is stopped before the
     * directory it works in goes. */
    remove_step_state(rfd, jobid);
    snprintf(name, sizeof(name), "%u", jobid);
    remove_runtime_entry(rfd, jobid, name);
    close(rfd);
    return 0;
}
