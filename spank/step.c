/* stagehand.so: stagings that run in a job step's slurmstepd (remote
 * context, slurm_spank_init_post_opt), as root, before the step's tasks
 * exist: the images given on an srun inside an existing job, and the job's
 * own staging on a node where no job prolog ran before this step (Slurm
 * before 23.02.2). The step's nodes, cluster and user come from slurmctld
 * and slurmstepd, never from the job's environment; the staging itself is
 * staging.c's, run in this process. */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "internal.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

bool sh_step_job_running(uint32_t jobid)
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
    snprintf(nodename, sizeof(nodename), "%s", sh_job_env("SLURMD_NODENAME", NULL));
    if (nodename[0] == '\0' && gethostname(nodename, sizeof(nodename)) != 0)
        return -1;
    version[0] = '\0';
    if (spank_getenv(sp, version_env, version, sizeof(version)) == ESPANK_SUCCESS)
        job->submit_version = bounded_version(version, sizeof(version) - 1);
    if (job->submit_version == NULL && version[0] != '\0')
        job->submit_version = "(not a version)";
    job->umask_bits = sh_job_umask(
        spank_getenv(sp, umask_env, mask, sizeof(mask)) == ESPANK_SUCCESS ? mask : NULL);
    job->user = user;
    job->nodelist = nodelist;
    job->nodename = nodename;
    job->cluster = cluster;
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
     * reports a missing status as it would any other (task.c). */
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
    sh_job_lock_path(jobid, lock_path, sizeof(lock_path));
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
    (void)sh_stage_run(&job, ac, av);
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
    return sh_stage_run(&job, ac, av);
}
