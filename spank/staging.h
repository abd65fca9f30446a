/* A node's staging of a job or job step, between the modules that run it:
 *   staging.c        the staging's steps, from the job's lock to its status
 *                    file: a local check, else the agent (root; in the job
 *                    prolog's staging process, in the prolog itself under
 *                    on_node_fault=drain, or in a step's slurmstepd)
 *   agent_io.c       the staging's agent: its start, inputs, outputs,
 *                    deadline and reaping (agent_io.h; in the same processes)
 *   stage_process.c  the staging process the job prolog forks
 *                    ("stagehand-stage", root)
 *   sentinel.c       the sentinel a current node leaves ("sh-sentinel", root)
 *   localcheck.c     the local check, in a child forked as the job user
 *   prolog.c, step.c fill in struct sh_stage_job and start a staging
 * Nothing here is exported from the .so (stagehand.map). */
#ifndef STAGEHAND_SPANK_STAGING_H
#define STAGEHAND_SPANK_STAGING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/config.h"
#include "stagehand/status.h"

/* The process name of a node's staging process until it becomes the
 * sentinel (prctl(2)), for ps and the admin. */
#define SH_STAGING_NAME "stagehand-stage"
/* A sentinel's process name (prctl(2) PR_SET_NAME), for ps and the epilog. */
#define SH_SENTINEL_NAME "sh-sentinel"

/* Seconds the agent gets beyond the staging deadline (timeout=) to report and
 * clean up before its process group is killed: the longest a staging's
 * agent runs is timeout= plus this. */
#define SH_STAGING_GRACE_S 10

/* One staging to run on this node: the job prolog's (stepid < 0) or a job
 * step's (prolog.c, step.c). The strings belong to the caller. */
struct sh_stage_job {
    uint32_t jobid;
    long stepid;
    uid_t uid;
    gid_t gid;
    const char *user;
    const char *nodelist;
    const char *nodename;
    const char *cluster;
    const char *spec;
    const char *submit_version;  /* stagehand version of sbatch/salloc/srun */
    uint32_t nnodes;             /* Slurm's node count of the job or step; 0: unknown */
    uint32_t nodeid;             /* this node's index in the step (have_nodeid) */
    bool have_nodeid;
    unsigned umask_bits;         /* the submitting command's umask (issue 30);
                                  * SH_UMASK_DEFAULT when it did not say */
    /* The job's staging (stepid < 0) run at a step's start because no job
     * prolog ran on this node (sh_step_stage_run): the step waits for the
     * agents' collective outcome; never detached, never drains. */
    bool missed_prolog;
};

/* ---- staging.c ------------------------------------------------------ */

/* Run the staging of @job on this node and record its outcome in the status
 * file. The job prolog hands it to a staging process of its own
 * (stage_process.c) and returns; a step's staging, and the prolog's under
 * on_node_fault=drain, run here. Returns -1 only for a node fault under
 * on_node_fault=drain (job prolog only), else 0. */
int sh_stage_run(const struct sh_stage_job *job, int ac, char **av);

/* One staging in progress (sh_stage_run): what the staging process
 * (stage_process.c) carries on with after the prolog's fork. */
struct sh_agent_result;
struct sh_staging {
    const struct sh_stage_job *job;
    const struct sh_config *cfg;   /* NULL until loaded, or misconfigured */
    struct sh_agent_result *res;   /* the outcome so far (agent_io.h) */
    char status_path[512];
    int lock_fd;                   /* the job's lock (joblock.h), or -1 */
    int64_t t_entry;               /* sh_now_ns() when the plugin was called */
    bool prolog;                   /* the job prolog's staging */
    bool deferred;                 /* run by the prolog's staging process */
    bool local_current;            /* this node's copies were current */
};

/* The staging's decision and work: the local check (job prolog only), else
 * the agent, its outcome in @s. */
void sh_staging_decide(struct sh_staging *s, int ac, char **av);
/* Write @s's outcome to the status file and log it. */
void sh_staging_record(struct sh_staging *s);
/* Let go of the job's lock (the epilog and the tasks wait for it). */
void sh_staging_unlock(struct sh_staging *s);

/* A value of the prolog's environment: @name, else @alt (may be NULL) when
 * @name is unset or empty, else "". */
const char *sh_job_env(const char *name, const char *alt);
/* The job's umask from the submitting side's @text (octal; NULL: not
 * sent), or SH_UMASK_DEFAULT: never looser than private (issue 30). */
unsigned sh_job_umask(const char *text);

/* ---- stage_process.c ------------------------------------------------ */

/* The job prolog, holding the job's staging lock: fork the process that
 * stages for this node, which carries on with @s and never returns. Returns
 * the child's pid, or -1 (errno from fork(2)) when the prolog must stage
 * itself. */
pid_t sh_stage_process_start(struct sh_staging *s, int ac, char **av);
/* In the staging process: the agent @pid it has started (the epilog's stop
 * is passed on to it). */
void sh_stage_process_set_agent(pid_t pid);
/* A step's staging whose job has ended (agent_io.c, issue 35 item 4): stop
 * it as the epilog stops the job prolog's, SIGTERM to the agent's session
 * @agent, and remember it (sh_stage_process_stopped). */
void sh_stage_process_stop(pid_t agent);
/* Has the epilog stopped this staging process, or a step's staging seen its
 * job end (sh_stage_process_stop)? */
bool sh_stage_process_stopped(void);
/* A process that outlives the prolog lets go of the prolog's standard
 * streams; @keep (< 0: none) is a descriptor among 0-2 to leave alone. */
void sh_release_stdio(int keep);

/* ---- sentinel.c ----------------------------------------------------- */

/* The job prolog on a node whose copies are current (not deferred): fork
 * this node's sentinel and record it for the epilog. Never fails the job. */
void sh_sentinel_start(const struct sh_config *cfg, const struct sh_stage_job *job, int ac,
                       char **av);
/* The staging process on a node whose copies are current: become this
 * node's sentinel. Never returns. */
void sh_sentinel_become(const struct sh_config *cfg, const struct sh_stage_job *job, int ac,
                        char **av) __attribute__((noreturn));

/* ---- localcheck.c --------------------------------------------------- */

/* Job prolog (localcheck.c): is every image of @job current on this node, for
 * SRC as the job user sees it now, on a filesystem of this node only, with
 * the job's claim recorded and no other job's conflicting claim (stagehand/
 * local.h)? Checked by a child forked as the job user, bounded (5 s).
 * True: one summary line per image added to @st. False for a job step's
 * staging, check=content|never, or any doubt (logged at debug level): the
 * agents then decide together. */
bool sh_local_current(const struct sh_config *cfg, const struct sh_stage_job *job,
                      struct sh_status *st);

/* Job user's proof for the node image cache (stagehand/cache.h): a child
 * forked as @job's user probes each of the @n sources @srcs (sh_src_probe:
 * the user can read it now) and compares its identity with @ids[i], the
 * identity root's record of a cache entry holds; @match[i] says whether it
 * is the same. Bounded like the local check. Returns 0, or -1 when the
 * child gave no answer (nothing matches then). */
struct sh_src_id;
int sh_local_src_match(const struct sh_stage_job *job, size_t n, const char *const *srcs,
                       const struct sh_src_id *ids, bool *match);

/* ---- cache_job.c ---------------------------------------------------- */

/* @job's spec with its cache images in the job form (stagehand/cache.h), a
 * string of cache_job.c's that lives until the next call; @job->spec itself
 * without cache=; NULL with the reason in @err. No I/O. */
const char *sh_cache_job_spec(const struct sh_config *cfg, const struct sh_stage_job *job,
                              char *err, size_t errlen);
/* Before the staging's decision, as root: the cache's and the job's
 * directories, and links of the entries whose sources the job user proves
 * to be theirs. Returns 0, or -1 with the user's message in @err. */
int sh_cache_stage_prepare(const struct sh_config *cfg, const struct sh_stage_job *job,
                           char *err, size_t errlen);
/* The cache pre-check's refusal of this staging (sh_cache_stage_prepare):
 * the message for the agent's refuse= input, or NULL when it fits. */
const char *sh_cache_refusal(void);
/* After the agent: adopt each new copy with its report (@reports[i]:
 * "<digest> <identity>" from the agent, or NULL). @job_ok: the agent
 * succeeded; after a failure only the reported copies are adopted (the
 * verified copies of nodes that survived a dead one) and a copy that cannot
 * be is logged, never the user's message. Returns 0, or -1 (only with
 * @job_ok) with the message for the user in @msg (the copy is gone). */
int sh_cache_stage_adopt(const struct sh_config *cfg, const struct sh_stage_job *job,
                         char *const *reports, bool job_ok, char *msg, size_t msglen);
/* At the staging's end: let go of the fill locks (cache_fill.c), seal the
 * job's cache directory (0500). */
void sh_cache_stage_end(const struct sh_config *cfg, const struct sh_stage_job *job);
/* Link each image of @set (the job form) whose DST is missing and whose
 * source has an entry in @cache the job user proves current (as root; the
 * proof in a child as the user). Failures are logged: the image is copied. */
struct sh_spec_set;
void sh_cache_link_proven(const char *cache, const struct sh_stage_job *job,
                          const struct sh_spec_set *set);

/* ---- cache_fill.c --------------------------------------------------- */

/* As root, for @job's cache images (@set, the job form) before its
 * decision: link the proven entries (sh_cache_link_proven); take the fill
 * lock of each source still without an entry (this staging copies it), or
 * wait for the staging that holds it and link its entry, taking over when it
 * ended without one. Bounded: a job of one node waits up to timeout= plus
 * SH_STAGING_GRACE_S (the longest a producer's agent runs), then fails; a job of several nodes waits only for a producer of one node or of
 * a lower job id, at most join_timeout= less 5 s, then copies on its own.
 * Returns 0 (locks held until sh_cache_fill_release_all), or -1 with the
 * user's message in @err (the bound reached on a job of one node, or the
 * job stopped meanwhile). */
int sh_cache_fill_claim(const struct sh_config *cfg, const struct sh_stage_job *job,
                        const struct sh_spec_set *set, char *err, size_t errlen);
/* Let go of every fill lock this staging holds (and remove their files). */
void sh_cache_fill_release_all(const char *cache);

/* ---- step.c --------------------------------------------------------- */

/* Does slurmctld still know job @jobid as running, not ending? True when it
 * cannot say (the step's tasks then start as they would have). */
bool sh_step_job_running(uint32_t jobid);

#endif
