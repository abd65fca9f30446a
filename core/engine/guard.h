/* Process-wide safety nets of stagehand-bcast.
 *
 * Open MPI 4.1 cannot survive a dead rank, so cleanup never depends on MPI:
 * a SIGTERM/SIGINT/SIGHUP handler and a SIGALRM watchdog unlink the temp file
 * (case F06), and every MPI wait polls so the deadline (--timeout) always
 * fires (cases F21, F22). Only the main thread calls MPI. */
#ifndef STAGEHAND_ENGINE_GUARD_H
#define STAGEHAND_ENGINE_GUARD_H

#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/publish.h"

/* The temp file of this rank's DST; the handlers unlink it while
 * sh_guard_pub.tmp_live is set. */
extern struct sh_publish sh_guard_pub;
/* DST's lock, watched where the run keeps it (sh_guard_watch_lock): every
 * exit path above also removes the lock file when it leaves no DST. */
void sh_guard_watch_lock(const int *dirfd, const int *lockfd, const char *name);
extern volatile sig_atomic_t sh_guard_done;    /* set before MPI_Finalize */
extern volatile sig_atomic_t sh_guard_exit_code; /* valid once done is set */
extern uint64_t sh_guard_deadline_ns;          /* CLOCK_MONOTONIC, absolute */
/* From the transfer on, one MPI wait that lasts this long means a peer is
 * gone (case F22); 0: only the deadline applies (e.g. while ranks may wait
 * for another job's DST lock). */
extern uint64_t sh_guard_stall_ns;
/* Progress seen: re-arm the stall backstop (see guard.c). */
void sh_guard_touch(void);
extern char sh_guard_host[64];                 /* short host name */
extern char sh_guard_jobid[64];                /* SLURM_JOB_ID or "nojob" */

/* Install the signal handlers and an atexit hook that unlink a live temp
 * file: SIGTERM, SIGINT, SIGHUP (then re-raised with the default action) and
 * the crash signals SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (then handed to
 * the handler installed before, e.g. Open MPI's backtrace); SIGPIPE is
 * ignored (a write to a dead peer fails with EPIPE instead). A crash signal
 * that another process of a user sent (sh_guard_sent_by_user) is no crash:
 * the temp file is removed, a line starting with SH_GUARD_KILLED_TAG goes to
 * stderr and the process leaves with SH_EXIT_KILLED. Call after MPI_Init,
 * which installs Open MPI's handlers (signal(7), sigaction(2)); it then
 * unblocks the crash signals (see sh_guard_block_crash_signals). */
void sh_guard_install_signals(void);
/* The crash signals into @set (caller's), for sigprocmask(2): main() blocks
 * them before MPI_Init so that one sent before the handlers exist stays
 * pending until sh_guard_install_signals() can tell who sent it (a real
 * fault is delivered all the same: the kernel forces it). */
void sh_guard_block_crash_signals(sigset_t *set);
/* Is the crash signal described by @info (NULL: unknown) one that another
 * process of a non-root user sent, rather than a real crash? A real crash is
 * a fault the kernel raised (si_code > 0), or a signal this process @self
 * sent itself (abort(3)), or one root sent with kill(2)/tgkill(2) (an
 * administrator's or the test suite's simulated crash). The sender of any
 * other code <= 0 (SI_QUEUE ...) is as its sender wrote it, so never trusted
 * as root or @self. Async-signal-safe. */
bool sh_guard_sent_by_user(const siginfo_t *info, pid_t self);
/* The start of the engine's stderr line for such a signal; the agent reads
 * the rest of that line from the engine's log. */
#define SH_GUARD_KILLED_TAG "stagehand-bcast: [signal] "
/* That line for @sig and @info: "stagehand-bcast: [signal] killed by signal
 * SIGSEGV sent by pid P of uid U, not a crash; ...\n", into @buf of @len
 * bytes (truncated, terminated when @len > 0). Returns its length.
 * Async-signal-safe. */
size_t sh_guard_killed_text(int sig, const siginfo_t *info, char *buf, size_t len);
/* Arm the watchdog (alarm(2), SIGALRM): at deadline + 10 s, if the main
 * thread has not ended the run itself, unlink the temp file and
 * _exit(SH_EXIT_TIMEOUT). Call again once @rank is known (re-arms). */
void sh_guard_start_watchdog(int rank);
/* Bound MPI start-up: until the next sh_guard_start_watchdog(), SIGALRM
 * fires @limit_ns (ns; 0: no extra bound) + 2 s from now, or at the deadline
 * backstop if sooner, with a message saying MPI did not start in time (a rank
 * died or never started: without --kill-on-bad-exit srun leaves the others
 * waiting inside MPI_Init). */
void sh_guard_limit_startup(uint64_t limit_ns);

/* Unlink the temp file, log, leave with SH_EXIT_TIMEOUT (no MPI_Abort: under
 * Slurm it SIGKILLs the other ranks before they can clean up). */
void sh_guard_deadline_abort(const char *phase, const char *detail)
    __attribute__((noreturn));
/* The same for the stall limit (--stall-timeout): the error line says
 * "stall limit (--stall-timeout) passed: @detail", where @detail starts with
 * "no progress for N s" (the agent reads N and "at segment K" from it).
 * Also SH_EXIT_TIMEOUT: the exit status keeps its meaning, the line tells
 * the limits apart. */
void sh_guard_stall_abort(const char *phase, const char *detail)
    __attribute__((noreturn));
/* Unlink the temp file, log "@what failed: <MPI error of @rc>", leave with
 * SH_EXIT_INTERNAL. @rc may be MPI_SUCCESS for non-MPI failures. */
void sh_guard_mpi_fatal(const char *phase, const char *what, int rc)
    __attribute__((noreturn));

/* Complete @req by polling MPI_Test; aborts on error or deadline. */
void sh_guard_wait(MPI_Request *req, const char *phase, const char *what);
/* MPI_Ibcast + sh_guard_wait. */
void sh_guard_bcast(void *buf, int count, MPI_Datatype type, int root,
                    MPI_Comm comm, const char *phase);
/* MPI_Igather of @bytes bytes per rank to rank 0 + sh_guard_wait. */
void sh_guard_gather(const void *send, int bytes, void *recv, MPI_Comm comm,
                     const char *phase);

/* Seconds between two sh_now_ns() stamps. */
double sh_secs(uint64_t from, uint64_t to);

#endif
