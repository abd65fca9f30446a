/* Cleanup paths that never depend on MPI surviving (case F06), and MPI
 * waits that always honour the deadline (--timeout). */
#include "config.h"
#include "guard.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"
#include "xfer.h"

#define WATCHDOG_GRACE_NS (10ULL * 1000000000ULL)

struct sh_publish sh_guard_pub = { .fd = -1, .dirfd = -1 };
volatile sig_atomic_t sh_guard_done;
volatile sig_atomic_t sh_guard_exit_code;
uint64_t sh_guard_deadline_ns;
char sh_guard_host[64];
char sh_guard_jobid[64];

/* Where the run keeps DST's directory, lock and name (struct sh_dest). */
static const int *volatile guard_dirfd, *volatile guard_lockfd;
static const char *volatile guard_name;

void sh_guard_watch_lock(const int *dirfd, const int *lockfd, const char *name)
{
    guard_dirfd = dirfd;
    guard_lockfd = lockfd;
    guard_name = name;
}

/* The temp file, and the lock file when no DST is left (a run that ends
 * here without the regular release, sh_dest_release: a dead peer, the
 * deadline, a signal). Async-signal-safe. */
static void guard_cleanup(void)
{
    sh_publish_signal_cleanup(&sh_guard_pub);
    if (guard_dirfd != NULL && guard_lockfd != NULL && guard_name != NULL)
        sh_publish_signal_unlock_remove(*guard_dirfd, guard_name, *guard_lockfd);
}

static void on_signal(int sig)
{
    static const char msg[] = "stagehand-bcast: terminated by a signal; "
                              "temp file removed\n";
    bool had_temp = sh_guard_pub.tmp_live != 0;

    guard_cleanup();
    if (had_temp && write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
        /* nothing left to report to */
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Open MPI may end the process itself (exit() from its abort path when a
 * peer dies); the temp file must not outlive it. */
static void cleanup_at_exit(void)
{
    guard_cleanup();
}

/* A crash (in Open MPI when a peer vanished, or ours) must not leave the temp
 * file behind either: remove it, put back the handler that was installed
 * before ours (Open MPI's, which prints a backtrace, or the default) and
 * raise the signal again; it is delivered when this handler returns, so the
 * process still ends by that signal (core dump, the agent's crash check).
 * A crash signal another process of a user sent (kill -SEGV by the job's
 * user) is no crash: the engine leaves with SH_EXIT_KILLED instead, so that
 * the agent never counts it as this node's fault (security issue 30). */
static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
static struct sigaction crash_prev[sizeof(crash_signals) / sizeof(crash_signals[0])];

bool sh_guard_sent_by_user(const siginfo_t *info, pid_t self)
{
    if (info == NULL)
        return false;       /* nothing to go by: as before, a crash */
    if (info->si_code > 0)
        return false;       /* the kernel's: a fault (no process can send these) */
    /* Only kill(2) and tgkill(2) (SI_USER, SI_TKILL) carry a sender the
     * kernel filled in; sigqueue(2)'s (SI_QUEUE and other codes <= 0) are
     * whatever the sender wrote, so they never count as root's or ours. */
    if (info->si_code == SI_USER || info->si_code == SI_TKILL)
        return info->si_pid != self && info->si_uid != 0;
    return true;
}

static const char *crash_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a crash signal";
    }
}

/* Append @s, then the decimal @v when @s is NULL; async-signal-safe. */
static size_t put_str(char *buf, size_t len, size_t o, const char *s)
{
    while (*s != '\0' && o + 1 < len)
        buf[o++] = *s++;
    return o;
}

static size_t put_num(char *buf, size_t len, size_t o, long long v)
{
    char digits[24];
    size_t n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

    if (v < 0 && o + 1 < len)
        buf[o++] = '-';
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0 && n < sizeof(digits));
    while (n > 0 && o + 1 < len)
        buf[o++] = digits[--n];
    return o;
}

size_t sh_guard_killed_text(int sig, const siginfo_t *info, char *buf, size_t len)
{
    size_t o = 0;

    if (len == 0)
        return 0;
    o = put_str(buf, len, o, SH_GUARD_KILLED_TAG "killed by signal ");
    o = put_str(buf, len, o, crash_name(sig));
    if (info != NULL) {
        o = put_str(buf, len, o, " sent by pid ");
        o = put_num(buf, len, o, (long long)info->si_pid);
        o = put_str(buf, len, o, " of uid ");
        o = put_num(buf, len, o, (long long)info->si_uid);
        if (info->si_code != SI_USER && info->si_code != SI_TKILL)
            o = put_str(buf, len, o, " (as the sender wrote it: sigqueue)");
    }
    o = put_str(buf, len, o, ", not a crash; temp file removed, exiting\n");
    buf[o] = '\0';
    return o;
}

static void on_crash(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    guard_cleanup();
    if (sh_guard_sent_by_user(info, getpid())) {
        char msg[256];
        size_t n = sh_guard_killed_text(sig, info, msg, sizeof(msg));

        if (write(STDERR_FILENO, msg, n) < 0) {
            /* nothing left to report to */
        }
        _exit(SH_EXIT_KILLED);
    }
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++) {
        if (crash_signals[i] == sig) {
            sigaction(sig, &crash_prev[i], NULL);
            break;
        }
    }
    /* A fault (si_code > 0, from the kernel) recurs when the instruction runs
     * again, with its own siginfo for the next handler; a sent signal does not. */
    if (sig == SIGABRT || info == NULL || info->si_code <= 0)
        raise(sig);
}

void sh_guard_block_crash_signals(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++)
        sigaddset(set, crash_signals[i]);
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
    /* A peer that died closes its TCP connections: a rank still sending to
     * it must get EPIPE from the write (an MPI error, then the cleanup and
     * its message), not die of SIGPIPE with its temp file left behind (seen
     * in test_engine_kill: the reader "Broken pipe"). */
    signal(SIGPIPE, SIG_IGN);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO;
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++)
        sigaction(crash_signals[i], &sa, &crash_prev[i]);
    atexit(cleanup_at_exit);
    /* A crash signal sent while they were blocked (main() blocks them until
     * now) reaches on_crash here, with its sender. */
    {
        sigset_t set;

        sh_guard_block_crash_signals(&set);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
    }
}

/* Backstop when the main thread is stuck outside our polling loops (inside
 * MPI_Init, a blocking MPI call or a hung read): SIGALRM at deadline + grace
 * removes the temp file and leaves. A signal rather than a thread: nothing
 * runs beside Open MPI's start-up. The regular deadline path is
 * sh_guard_deadline_abort(). */
static char alarm_msg[256];
static size_t alarm_len;
/* The line when the alarm fires before the deadline backstop: then only the
 * stall limit (sh_guard_touch) can have set it; 0 during start-up. */
static char alarm_stall_msg[256];
static size_t alarm_stall_len;
static int watchdog_rank = -1;

static void on_alarm(int sig)
{
    const char *msg = alarm_msg;
    size_t len = alarm_len;

    (void)sig;
    if (sh_guard_done)
        _exit(sh_guard_exit_code);     /* stuck in MPI_Finalize: result known */
    guard_cleanup();
    if (alarm_stall_len > 0 && (uint64_t)sh_now_ns() < sh_guard_deadline_ns) {
        msg = alarm_stall_msg;
        len = alarm_stall_len;
    }
    if (write(STDERR_FILENO, msg, len) < 0) {
        /* nothing left to report to */
    }
    _exit(SH_EXIT_TIMEOUT);
}

/* Progress seen (or a guarded MPI wait begins): while a stall limit is set,
 * move the SIGALRM backstop to "now + stall + 2 s" (never past the deadline
 * backstop), so an engine stuck inside a blocking MPI call after a peer died
 * still removes its temp file and leaves (case F22). Called at most about
 * once a second. */
void sh_guard_touch(void)
{
    static uint64_t last;
    uint64_t now = (uint64_t)sh_now_ns(), dl, next;

    if (sh_guard_stall_ns == 0 || now - last < 1000000000ULL)
        return;
    last = now;
    if (alarm_stall_len == 0) {
        int n = snprintf(alarm_stall_msg, sizeof(alarm_stall_msg), "stagehand-bcast "
                         "job=%s node=%s rank=%d [timeout] error: stall limit "
                         "(--stall-timeout) passed: no progress for %llu s while the "
                         "engine was stuck in MPI; temp file removed, exiting\n",
                         sh_guard_jobid, sh_guard_host, watchdog_rank,
                         (unsigned long long)(sh_guard_stall_ns / 1000000000ULL));

        alarm_stall_len = n > 0 && (size_t)n < sizeof(alarm_stall_msg) ? (size_t)n : 0;
    }
    dl = sh_guard_deadline_ns + WATCHDOG_GRACE_NS;
    next = now + sh_guard_stall_ns + 2000000000ULL;
    if (next > dl)
        next = dl;
    alarm(next > now ? (unsigned)((next - now + 999999999ULL) / 1000000000ULL) : 1u);
}

void sh_guard_start_watchdog(int rank)
{
    struct sigaction sa;
    uint64_t now = (uint64_t)sh_now_ns();
    uint64_t when = sh_guard_deadline_ns + WATCHDOG_GRACE_NS;
    uint64_t secs = when > now ? (when - now + 999999999ULL) / 1000000000ULL : 1;
    int n;

    n = snprintf(alarm_msg, sizeof(alarm_msg), "stagehand-bcast job=%s "
                 "node=%s rank=%d [timeout] error: deadline (--timeout) reached "
                 "while the engine was stuck in MPI; temp file removed, exiting\n",
                 sh_guard_jobid, sh_guard_host, rank);
    alarm_len = n > 0 && (size_t)n < sizeof(alarm_msg) ? (size_t)n : 0;
    alarm_stall_len = 0;        /* written by sh_guard_touch, which moves the alarm */
    watchdog_rank = rank;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    alarm(secs > 100000000 ? 100000000u : (unsigned)secs);
}

void sh_guard_limit_startup(uint64_t limit_ns)
{
    uint64_t now = (uint64_t)sh_now_ns();
    uint64_t dl = sh_guard_deadline_ns + WATCHDOG_GRACE_NS;
    uint64_t next = now + limit_ns + 2000000000ULL;
    int n;

    if (limit_ns == 0 || next >= dl)
        return;
    n = snprintf(alarm_msg, sizeof(alarm_msg), "stagehand-bcast job=%s node=%s "
                 "[start-up] error: MPI did not start within %llu s (--stall-timeout): "
                 "another rank died or never started; exiting\n", sh_guard_jobid,
                 sh_guard_host, (unsigned long long)((limit_ns + 2000000000ULL) / 1000000000ULL));
    alarm_len = n > 0 && (size_t)n < sizeof(alarm_msg) ? (size_t)n : 0;
    alarm_stall_len = 0;
    alarm((unsigned)((next - now + 999999999ULL) / 1000000000ULL));
}

/* Leave without MPI_Abort. Under Slurm an MPI_Abort ends the step with
 * SIGKILL (measured on the test cluster: a survivor's temp file stayed
 * behind), so the other ranks could not remove their temp files. Each rank
 * leaves on its own instead: every rank has the same deadline, and a rank
 * whose peer died sees an MPI error or reaches that deadline. Under mpirun a
 * rank leaving without MPI_Finalize makes mpirun SIGTERM the others, which
 * the handler above turns into the same cleanup. */
static void leave(int code) __attribute__((noreturn));

static void leave(int code)
{
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

void sh_guard_deadline_abort(const char *phase, const char *detail)
{
    guard_cleanup();
    sh_error(phase, "deadline (--timeout) reached%s%s; no file left under the "
             "destination's name, exiting", detail != NULL ? ": " : "",
             detail != NULL ? detail : "");
    leave(SH_EXIT_TIMEOUT);
}

void sh_guard_stall_abort(const char *phase, const char *detail)
{
    guard_cleanup();
    sh_error(phase, "stall limit (--stall-timeout) passed: %s; no file left under "
             "the destination's name, exiting", detail);
    leave(SH_EXIT_TIMEOUT);
}

void sh_guard_mpi_fatal(const char *phase, const char *what, int rc)
{
    char err[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, err, &len);
    guard_cleanup();
    sh_error(phase, "%s failed%s%s; no file left under the destination's "
             "name, exiting", what, len > 0 ? ": " : "", err);
    leave(SH_EXIT_INTERNAL);
}

/* ---- MPI helpers: non-blocking + polling, so the deadline always fires -- */

uint64_t sh_guard_stall_ns;

void sh_guard_wait(MPI_Request *req, const char *phase, const char *what)
{
    uint64_t start = (uint64_t)sh_now_ns();
    unsigned idle = 0;

    sh_guard_touch();
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);

        if (rc != MPI_SUCCESS)
            sh_guard_mpi_fatal(phase, what, rc);
        if (flag)
            return;
        if ((uint64_t)sh_now_ns() >= sh_guard_deadline_ns)
            sh_guard_deadline_abort(phase, what);
        if (sh_guard_stall_ns > 0 && (uint64_t)sh_now_ns() - start >= sh_guard_stall_ns) {
            char detail[160];

            snprintf(detail, sizeof(detail), "no progress for %llu s in %s: a peer "
                     "rank is gone or stalled",
                     (unsigned long long)(sh_guard_stall_ns / 1000000000ULL), what);
            sh_guard_stall_abort(phase, detail);
        }
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

