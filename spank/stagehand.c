/* stagehand SPANK plugin: the slurm_spank_* entry points only. Each one
 * dispatches on spank_context() to the module of that process:
 *   sbatch/salloc (allocator), srun (local)  -> submit.c
 *   every context that parses options        -> args.c
 * See internal.h for the module map. */
#include "config.h"

#include <stdio.h>
#include <string.h>

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

/* case F26: say which Slurm we were built for and which one loaded us. */
static void log_versions(spank_t sp)
{
    char *running = NULL;
    char built[32];

    snprintf(built, sizeof(built), "%u.%02u.%u",
             (unsigned)(SH_SLURM_VERSION_NUMBER >> 16) & 0xffu,
             (unsigned)(SH_SLURM_VERSION_NUMBER >> 8) & 0xffu,
             (unsigned)SH_SLURM_VERSION_NUMBER & 0xffu);
    if (spank_get_item(sp, S_SLURM_VERSION, &running) != ESPANK_SUCCESS)
        running = NULL;
    slurm_info("stagehand %s: spec format v%d, built against Slurm %s, "
               "running in Slurm %s", SH_VERSION, SH_SPEC_FORMAT_VERSION,
               built, running != NULL ? running : "(unknown)");
    if (running != NULL && strncmp(running, built, 5) != 0)
        slurm_error("stagehand: built against Slurm %s but loaded by Slurm "
                    "%s: rebuild stagehand for this Slurm", built, running);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
        return sh_args_register(sp, ac, av);
    case S_CTX_SLURMD: {
        const struct sh_config *cfg;

        log_versions(sp);
        /* Log a bad plugstack.conf where admins look; never fail slurmd. */
        cfg = sh_plugin_load_config(ac, av);
        /* Root's directories before any user's job can race for them. */
        if (cfg != NULL)
            sh_slurmd_prepare(cfg);
        sh_plugin_check_ports(cfg);
        if (sh_slurm_prolog_in_job())
            slurm_error("stagehand: slurm.conf sets PrologFlags=RunInJob, under which "
                        "Slurm calls no SPANK job prolog or epilog: sbatch and salloc "
                        "--stage-image are refused, srun --stage-image stages at step "
                        "start; drop RunInJob to stage jobs in the prolog "
                        "(stagehand(8), VERSIONS)");
        return 0;
    }
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
