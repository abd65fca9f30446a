/* The job's staging lock and the record of the process that stages, in the
 * root-owned runtime directory /run/stagehand (joblock.c). Used by the job
 * prolog and its staging process, the sentinel's starter, a step staging in
 * slurmstepd, each task before its program, and the epilog. */
#ifndef STAGEHAND_SPANK_JOBLOCK_H
#define STAGEHAND_SPANK_JOBLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

/* The job's staging lock: SH_RUNTIME_DIR/<jobid>.lock, into @buf (64 bytes
 * are enough). */
void sh_job_lock_path(uint32_t jobid, char *buf, size_t len);

/* The job's staging runs once on a node: in the job prolog, or at the start
 * of the first step when no prolog ran (sh_step_stage_run), and a second
 * step that starts meanwhile waits for it. Take the job's lock,
 * /run/stagehand/<jobid>.lock (flock(2), blocking: the holder is bounded by
 * its deadline), and set *@done when the job's status (@status_path) is
 * already written. Returns the lock's descriptor (never 0-2), or -1 (errno)
 * without a lock: the caller goes on, logged. */
int sh_job_lock(uint32_t jobid, const char *status_path, bool *done);

/* Remember the process @pid (a detached agent or sentinel, its own process
 * group, or the job prolog's staging process) of job @jobid in the
 * root-owned SH_RUNTIME_DIR/<jobid>.agent, with its start time, for the
 * epilog. Logs an error when it cannot. */
void sh_job_record_process(uint32_t jobid, pid_t pid);

/* Remove the record of job @jobid's process (sh_job_record_process). */
void sh_job_forget_process(uint32_t jobid);

/* The process recorded in @name under @rfd (sh_job_record_process) if that
 * very process still runs (pid and start time), with its name
 * (/proc/<pid>/comm, newline included) in @comm; 0 when there is none. */
pid_t sh_job_recorded_process(int rfd, const char *name, char *comm, size_t len);

/* Wait until no staging of job @jobid holds the job's lock on this node,
 * /run/stagehand/<jobid>.lock (flock(2) @op: LOCK_SH in a task, LOCK_EX in
 * the epilog): the job prolog's staging process holds it until it has
 * written the job's status (stage_process.c). No timeout: the holder is
 * bounded by its staging deadline. @stop (may be NULL): signals that end the
 * wait and the calling process (it dies of the signal, default action; a
 * task of a cancelled job: slurmstepd sends SIGTERM before SIGKILL, and a
 * task has them blocked until its program starts). Returns true when the
 * lock file exists, false when it does not or cannot be opened (errno from
 * open(2)). */
bool sh_wait_job_staging(uint32_t jobid, int op, const sigset_t *stop);

#endif
