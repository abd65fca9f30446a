/* stagehand.so, remote context (slurmstepd), the task side: in each task
 * before its program runs, as root (task_init_privileged), wait for this
 * node's staging of the job (the job prolog's staging process holds the
 * job's lock until it has written the outcome, stage_process.c), read
 * the outcome and either export the staged paths to the task or, as the
 * job user (task_init), fail it with the message on its stderr (for a batch
 * job that is the job's output file). A job that asked for staging but has no status on this node never
 * runs without its image. The wait is in the task, not in slurmstepd: a
 * task is in the step's process container, so a cancel of the job kills it
 * while it waits, and its program never starts. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include <slurm/spank.h>

#include "internal.h"
#include "joblock.h"
#include "stagehand/status.h"

#define SUMMARY_SHOWN_ENV "STAGEHAND_SUMMARY_SHOWN"

static struct {
    bool asked;           /* the job asked for staging */
    bool failed;          /* fail every task of this step */
    bool node_only;       /* the failure is this node's alone (no status
                           * here): said by its first task, not task 0 */
    bool show_summary;    /* print the per-image summary (task 0) */
    char message[SH_STATUS_LINE_MAX + 512];
    struct sh_status status;
} remote;

static bool job_asked(spank_t sp)
{
    char buf[16];

    if (sh_plugin.n_values > 0)
        return true;
    /* sbatch/salloc put the spec into the job's environment as well. */
    return spank_getenv(sp, "SLURM_SPANK_" SH_SPEC_ENV, buf, sizeof(buf)) !=
               ESPANK_ENV_NOEXIST;
}

static void export_images(spank_t sp, const struct sh_status *st)
{
    char name[64];
    size_t total = 1, used = 0;
    char *list;

    if (st->n_images == 0)
        return;
    spank_setenv(sp, "STAGEHAND_IMAGE", st->image[0], 1);
    for (size_t i = 0; i < st->n_images; i++) {
        snprintf(name, sizeof(name), "STAGEHAND_IMAGE_%zu", i);
        spank_setenv(sp, name, st->image[i], 1);
        total += strlen(st->image[i]) + 1;
    }
    snprintf(name, sizeof(name), "%zu", st->n_images);
    spank_setenv(sp, "STAGEHAND_IMAGE_COUNT", name, 1);
    /* ':'-separated like PATH; a DST with ':' in it is exact only in
     * STAGEHAND_IMAGE_<i> (stagehand(8)). */
    list = malloc(total);
    if (list == NULL)
        return;
    for (size_t i = 0; i < st->n_images; i++) {
        size_t len = strlen(st->image[i]);

        if (i > 0)
            list[used++] = ':';
        memcpy(list + used, st->image[i], len);
        used += len;
    }
    list[used] = '\0';
    spank_setenv(sp, "STAGEHAND_IMAGES", list, 1);
    free(list);
}

int sh_remote_task_privileged(spank_t sp)
{
    char path[512], shown[8];
    uint32_t jobid = 0, stepid = 0;
    bool step_staged, staged_here;
    sigset_t stop;
    int rc;

    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        return 0;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    staged_here = sh_wait_job_staging(jobid, LOCK_SH, &stop);
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
        stepid = 0;
    /* An srun inside the job that brought images of its own staged them at
     * its own start (sh_step_stage_run): its status is the step's. The
     * variable alone, without --stage-image on this srun, stages nothing. */
    step_staged = sh_plugin.n_values > 0 &&
                  spank_getenv(sp, SH_STEP_SPEC_ENV, shown, sizeof(shown)) !=
                      ESPANK_ENV_NOEXIST;
    if (sh_status_path(SH_RUNTIME_DIR, jobid, step_staged ? (long)stepid : -1,
                       path, sizeof(path)) != 0)
        return 0;
    rc = sh_status_read(path, &remote.status);
    if (rc != 0 && errno == ENOENT) {
        if (!step_staged && !job_asked(sp))
            return 0;
        remote.asked = remote.failed = remote.node_only = true;
        if (staged_here)
            snprintf(remote.message, sizeof(remote.message),
                     "--stage-image: job %u has no staging status on this node: "
                     "its staging process ended without writing one (killed?); "
                     "see the slurmd log", jobid);
        else if (sh_slurm_prolog_in_job())
            snprintf(remote.message, sizeof(remote.message),
                     "--stage-image: job %u has no staging status on this node: "
                     "slurm.conf sets PrologFlags=RunInJob, under which Slurm runs no "
                     "SPANK job prolog (stagehand(8), VERSIONS); drop RunInJob, or "
                     "stage with srun --stage-image", jobid);
        else
            snprintf(remote.message, sizeof(remote.message),
                     "--stage-image: job %u has no staging status on this node: the "
                     "job prolog did not run stagehand here. Is PrologFlags=Alloc "
                     "set in slurm.conf, and was slurmd restarted after stagehand "
                     "was installed?", jobid);
        return 0;
    }
    remote.asked = true;
    if (rc != 0) {
        remote.failed = remote.node_only = true;
        snprintf(remote.message, sizeof(remote.message),
                 "--stage-image: cannot read the staging status %s: %s", path,
                 strerror(errno));
        return 0;
    }
    if (!remote.status.ok) {
        remote.failed = true;
        snprintf(remote.message, sizeof(remote.message),
                 "--stage-image failed: %s", remote.status.message);
        return 0;
    }
    export_images(sp, &remote.status);
    /* The summary goes once into the job's output: in the batch step, in
     * the first step of a job without one (srun/salloc), or in the step
     * that staged images of its own. */
    if ((sh_plugin.verbose_opt || sh_plugin.config.verbose ||
         getenv("SPANK_" SH_VERBOSE_ENV) != NULL ||
         spank_getenv(sp, "SLURM_SPANK_" SH_VERBOSE_ENV, shown, sizeof(shown)) ==
             ESPANK_SUCCESS) &&
        (step_staged ||
         (spank_getenv(sp, SUMMARY_SHOWN_ENV, shown, sizeof(shown)) == ESPANK_ENV_NOEXIST &&
          (stepid == SH_BATCH_STEP || stepid == 0)))) {
        remote.show_summary = true;
        spank_setenv(sp, SUMMARY_SHOWN_ENV, "1", 1);
    }
    return 0;
}

int sh_remote_task_init(spank_t sp)
{
    uint32_t taskid = 0;

    if (!remote.asked)
        return 0;
    if (remote.failed) {
        /* Every task fails, but the message is said once: the staging
         * result is the same on every node of the step (the nodes agreed on
         * it), so global task 0 says it; a node without a status of its own
         * says so from its first task. */
        if (spank_get_item(sp, remote.node_only ? S_TASK_ID : S_TASK_GLOBAL_ID,
                           &taskid) != ESPANK_SUCCESS || taskid == 0) {
            fprintf(stderr, "stagehand: %s\n", remote.message);
            fflush(stderr);
        }
        return -1;
    }
    if (remote.show_summary &&
        spank_get_item(sp, S_TASK_GLOBAL_ID, &taskid) == ESPANK_SUCCESS &&
        taskid == 0) {
        for (size_t i = 0; i < remote.status.n_summaries; i++)
            fprintf(stderr, "stagehand: %s\n", remote.status.summary[i]);
        fflush(stderr);
    }
    return 0;
}
