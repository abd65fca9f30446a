/* stagehand SPANK plugin: the slurm_spank_* entry points only, called by
 * whichever Slurm process loaded the plugin. Each one dispatches on
 * spank_context() to the file of that process (and its user):
 *   sbatch/salloc (allocator), srun (local),
 *   srun once its job exists (local_user)    submit.c (the submitting user)
 *   every context that parses options         args.c
 *   slurmd, at its start (slurmd)             slurmd.c (root)
 *   slurmd's job prolog (job script)          prolog.c (root)
 *   slurmd's job epilog (job script); the
 *   extern step's exit under RunInJob         epilog.c (root)
 *   slurmstepd, before a step's tasks         step.c (root)
 *   each task, before its program (remote)    task.c (root, then the job user)
 * See internal.h for the module map. */
#include "config.h"

#include <slurm/slurm_errno.h>
#include <slurm/spank.h>

#include "internal.h"

SPANK_PLUGIN(stagehand, 1)

#if SH_SLURM_VERSION_NUMBER >= ((25u << 16) | (5u << 8))
/* Slurm 25.05 and later: a failed slurm_spank_init fails the job instead of
 * draining the node (spank(8), slurm_spank_init_failure_mode). The plugin's
 * init fails only on what a job brings (its --stage-image values, parsed by
 * the option callback in slurmstepd too), never on a fault of the node;
 * Slurm 24.11 and earlier have no such mode and drain the node. */
int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
        return sh_args_register(sp, ac, av);
    case S_CTX_SLURMD:
        return sh_slurmd_init(sp, ac, av);
    default:
        return 0;
    }
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
        return sh_submit_post_opt(sp);
    case S_CTX_REMOTE:
        return sh_step_stage_run(sp, ac, av);
    default:
        return 0;
    }
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_LOCAL)
        return 0;
    return sh_submit_local_user(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    if (spank_context() == S_CTX_REMOTE)
        (void)sh_extern_exit_run(sp, ac, av);
    sh_args_free();
    return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
    return sh_prolog_run(sp, ac, av);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    return sh_epilog_run(sp, ac, av);
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    return sh_remote_task_privileged(sp);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    return sh_remote_task_init(sp);
}
