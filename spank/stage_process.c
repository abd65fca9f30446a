/* stagehand.so: the job prolog's staging process, "stagehand-stage". The job
 * prolog (slurmd, as root) forks it from its slurmstepd while it holds the
 * job's staging lock and ends; this process, root, in a process group of its
 * own, runs the node's staging (staging.c), holds the lock until it has
 * written the job's status, and then either ends or, on a node whose copies
 * were current, becomes the node's sentinel (sentinel.c). The epilog stops
 * it with SIGTERM when the job ends on this node first (epilog.c). */
#include "config.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "joblock.h"
#include "staging.h"

/* Set in a node's staging process when the epilog stops it: the job ended
 * on this node before its staging did (stop_running_staging). */
static volatile sig_atomic_t staging_stopped;
/* The agent that process runs (its own session, spawn_agent), or 0. */
static volatile pid_t staging_agent;

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
void sh_release_stdio(int keep)
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

/* SIGTERM handler of a node's staging process (stage_process_main): pass it to
 * the agent's session (kill(2) is async-signal-safe). */
static void on_staging_stop(int sig)
{
    pid_t agent = staging_agent;

    (void)sig;
    staging_stopped = 1;
    if (agent > 0)
        (void)kill(-agent, SIGTERM);
}

void sh_stage_process_set_agent(pid_t pid)
{
    staging_agent = pid;
    if (staging_stopped) /* stopped before the agent existed */
        (void)kill(-pid, SIGTERM);
}

void sh_stage_process_stop(pid_t agent)
{
    staging_stopped = 1;
    if (agent > 0)
        (void)kill(-agent, SIGTERM);
}

bool sh_stage_process_stopped(void)
{
    return staging_stopped != 0;
}

/* The staging process, forked by the job prolog with @s begun and admitted
 * (staging.c): let go of the prolog, then stage, record, unlock, and end or
 * stay on as the sentinel. Never returns. */
static void __attribute__((noreturn)) stage_process_main(struct sh_staging *s, int ac,
                                                         char **av)
{
    pid_t parent;
    int pfd;

    (void)setpgid(0, 0);
    (void)prctl(PR_SET_NAME, SH_STAGING_NAME, 0, 0, 0);
    /* Slurm 24.11 waits for the prolog's output to end, not only for the
     * prolog: this process must not keep the job's batch step waiting. */
    sh_release_stdio(-1);
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
    sh_job_record_process(s->job->jobid, getpid());
    s->deferred = true;
    sh_staging_decide(s, ac, av);
    sh_staging_record(s);
    if (!s->local_current)
        sh_job_forget_process(s->job->jobid); /* it ends here: nothing to stop */
    sh_staging_unlock(s);
    /* A node whose copies are current stays on as this node's sentinel
     * (sentinel.c); any other ends here. */
    if (s->local_current)
        sh_sentinel_become(s->cfg, s->job, ac, av);
    _exit(0);
}

/* The job prolog, holding the job's staging lock, forks the process that
 * stages for this node and gives it a process group of its own (slurmd kills
 * the prolog's when the prolog ends; set here, in the parent, so the prolog
 * need not wait until the child has run); the child records itself for the
 * epilog. The child holds the lock (the same open file description) until
 * it has written the job's status; a step's tasks wait
 * for it (sh_wait_job_staging), so no step starts before this node's staging
 * is done, as with a staging in the prolog itself. The prolog's end is what
 * slurmd waits for, and on a loaded node slurmd polls for it (Slurm 22.05:
 * 10, 30, 70, 150 ms after the start, doc/performance.md): a prolog
 * that waited for the local check missed the 70 ms poll. Returns the child's
 * pid in the prolog, -1 (errno from fork(2)) when the prolog must stage
 * itself; the child never returns (stage_process_main). */
pid_t sh_stage_process_start(struct sh_staging *s, int ac, char **av)
{
    pid_t pid = fork();

    if (pid == 0)
        stage_process_main(s, ac, av);
    if (pid > 0)
        (void)setpgid(pid, pid);
    return pid;
}
