/* Cleanup paths that never depend on MPI surviving (case F06), and MPI
 * waits that always honour the deadline (--timeout). */
#include "config.h"
#include "guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"
#include "stagehand/log.h"
#include "xfer.h"

#define WATCHDOG_GRACE_NS (10ULL * 1000000000ULL)

struct sh_publish sh_guard_pub = { .fd = -1, .dirfd = -1 };
volatile sig_atomic_t sh_guard_done;
uint64_t sh_guard_deadline_ns;
char sh_guard_host[64];
char sh_guard_jobid[64];

static void on_signal(int sig)
{
    static const char msg[] = "stagehand-bcast: terminated by a signal; "
                              "temp file removed\n";

    if (sh_guard_pub.tmp_live) {
        sh_publish_signal_cleanup(&sh_guard_pub);
        if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
            /* nothing left to report to */
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Open MPI may end the process itself (exit() from its abort path when a
 * peer dies); the temp file must not outlive it. */
static void cleanup_at_exit(void)
{
    sh_publish_signal_cleanup(&sh_guard_pub);
}

void sh_guard_install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    atexit(cleanup_at_exit);
}

/* Backstop when the main thread is stuck outside our polling loops (inside
 * MPI_Init, a blocking MPI call or a hung read): remove the temp file and
 * leave. The regular deadline path is sh_guard_deadline_abort(). */
static void *watchdog_main(void *arg)
{
    struct timespec ts;
    uint64_t when = sh_guard_deadline_ns + WATCHDOG_GRACE_NS;

    (void)arg;
    ts.tv_sec = (time_t)(when / 1000000000ULL);
    ts.tv_nsec = (long)(when % 1000000000ULL);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    if (sh_guard_done)
        return NULL;
    sh_publish_signal_cleanup(&sh_guard_pub);
    sh_error("timeout", "deadline (--timeout) passed and the engine is stuck; "
             "temp file removed, exiting");
    _exit(SH_EXIT_TIMEOUT);
}

void sh_guard_start_watchdog(void)
{
    pthread_attr_t attr;
    pthread_t tid;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&tid, &attr, watchdog_main, NULL) != 0)
        sh_warn("start-up", "cannot start the watchdog thread: %s",
                strerror(errno));
    pthread_attr_destroy(&attr);
}

void sh_guard_deadline_abort(const char *phase, const char *detail)
{
    sh_publish_signal_cleanup(&sh_guard_pub);
    sh_error(phase, "deadline (--timeout) reached%s%s; temp file removed, "
             "aborting the job", detail != NULL ? ": " : "",
             detail != NULL ? detail : "");
    MPI_Abort(MPI_COMM_WORLD, SH_EXIT_TIMEOUT);
    _exit(SH_EXIT_TIMEOUT);
}

void sh_guard_mpi_fatal(const char *phase, const char *what, int rc)
{
    char err[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, err, &len);
    sh_publish_signal_cleanup(&sh_guard_pub);
    sh_error(phase, "%s failed%s%s; temp file removed, aborting the job", what,
             len > 0 ? ": " : "", err);
    MPI_Abort(MPI_COMM_WORLD, SH_EXIT_INTERNAL);
    _exit(SH_EXIT_INTERNAL);
}

/* ---- MPI helpers: non-blocking + polling, so the deadline always fires -- */

void sh_guard_wait(MPI_Request *req, const char *phase, const char *what)
{
    unsigned idle = 0;

    for (;;) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);

        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal(phase, what, rc);
        if (flag)
            return;
        if (sh_now_ns() >= sh_guard_deadline_ns)
            sh_guard_deadline_abort(phase, what);
        if (++idle > 200) {
            struct timespec ts = { 0, 200000 };

            nanosleep(&ts, NULL);
        }
    }
}

void sh_guard_bcast(void *buf, int count, MPI_Datatype type, int root,
                    MPI_Comm comm, const char *phase)
{
    MPI_Request req;
    int rc = MPI_Ibcast(buf, count, type, root, comm, &req);

    if (rc != MPI_SUCCESS)
        sh_guard_mpi_fatal(phase, "MPI_Ibcast", rc);
    sh_guard_wait(&req, phase, "MPI_Ibcast");
}

void sh_guard_gather(const void *send, int bytes, void *recv, MPI_Comm comm,
                     const char *phase)
{
    MPI_Request req;
    int rc = MPI_Igather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, 0, comm,
                         &req);

    if (rc != MPI_SUCCESS)
        sh_guard_mpi_fatal(phase, "MPI_Igather", rc);
    sh_guard_wait(&req, phase, "MPI_Igather");
}

double sh_secs(uint64_t from, uint64_t to)
{
    return (double)(to - from) / 1e9;
}

