/* stagehand.so: the job's staging lock, /run/stagehand/<jobid>.lock, and the
 * record of the process that stages, /run/stagehand/<jobid>.agent.
 *
 * Runs in several processes, always as root: the job prolog (slurmd) and
 * the staging process it forks take the lock and write the record; a step
 * staging in slurmstepd takes the lock; each task, in slurmstepd before its
 * program starts (still root, task_init_privileged), and the job epilog wait
 * for it; the epilog reads the record. The staging process holds the lock
 * until it has written the job's status, so no task's program starts before
 * its node's staging is done (joblock.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "agent_io.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/clock.h"
#include "stagehand/io.h"
#include "stagehand/status.h"

/* The process name of a task waiting for its node's staging (prctl(2)). */
#define SH_WAIT_NAME "stagehand-wait"

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

void sh_job_record_process(uint32_t jobid, pid_t pid)
{
    char path[128], text[64];
    int fd, n;

    snprintf(path, sizeof(path), "%s/%u.agent", SH_RUNTIME_DIR, jobid);
    n = snprintf(text, sizeof(text), "%d %llu\n", (int)pid, proc_starttime(pid));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, text, (size_t)n) != n)
        slurm_error("stagehand: job %u: cannot write %s: %s (the epilog will not stop "
                    "agent %d)", jobid, path, strerror(errno), (int)pid);
    if (fd >= 0)
        close(fd);
}

void sh_job_forget_process(uint32_t jobid)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/%u.agent", SH_RUNTIME_DIR, jobid);
    (void)unlink(path);
}

void sh_job_lock_path(uint32_t jobid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%u.lock", SH_RUNTIME_DIR, jobid);
}

pid_t sh_job_recorded_process(int rfd, const char *name, char *comm, size_t len)
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

int sh_job_lock(uint32_t jobid, const char *status_path, bool *done)
{
    char path[64];
    int fd;

    *done = false;
    sh_job_lock_path(jobid, path, sizeof(path));
    /* Never on fd 0-2 (slurmd may run the prolog with them closed): the
     * sentinel the prolog forks under on_node_fault=drain keeps its stdio
     * while it waits, and would hold the lock, so the job's tasks would wait
     * for it (join_timeout). */
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || (fd = sh_above_stdio(fd)) < 0)
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

    sh_job_lock_path(jobid, path, sizeof(path));
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
