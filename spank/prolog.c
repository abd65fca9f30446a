/* stagehand.so, job-script context: slurmd's job prolog
 * (slurm_spank_job_prolog), as root, in the prolog's slurmstepd.
 *
 * The job prolog takes the job's staging lock and forks the process that
 * stages for this node (stage_process.c), then ends; that process holds the
 * lock until it has written the job's status, and each task waits for the
 * lock before it reads the status (sh_wait_job_staging, task.c), so no
 * task's program starts before its node's staging is done. The staging
 * (staging.c): a local check (localcheck.c; a current node stays on as a
 * sentinel for the others: sentinel.c), else stagehand-agent, spawned as
 * root with its own process group, its inputs through a pipe (never argv or
 * the environment: F19), its outcome read from another pipe within the
 * staging deadline, its process group killed on expiry, the outcome
 * recorded in a root-owned status file. Under on_node_fault=drain the
 * prolog stages itself and returns an error to slurmd for a node fault: a
 * required plugin's prolog error drains the node and requeues+holds the job
 * (measured), which is never right for a user's
 * mistake (doc/design.md §5). */
#include "config.h"

#include <stdlib.h>

#include <slurm/spank.h>

#include "internal.h"
#include "staging.h"
#include "stagehand/spec.h"

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
    job.user = sh_job_env("SLURM_JOB_USER", NULL);
    /* 22.05 names it SLURM_NODELIST in the prolog; SLURM_JOB_NODELIST from
     * 23.11 (doc/design.md §8, F26). */
    job.nodelist = sh_job_env("SLURM_JOB_NODELIST", "SLURM_NODELIST");
    job.nodename = sh_job_env("SLURMD_NODENAME", NULL);
    job.cluster = sh_job_env("SLURM_CLUSTER_NAME", NULL);
    job.submit_version = getenv("SPANK_" SH_VERSION_ENV);
    job.umask_bits = sh_job_umask(getenv("SPANK_" SH_UMASK_ENV));
    return sh_stage_run(&job, ac, av);
}
