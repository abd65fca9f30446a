/* stagehand.so: Slurm's own configuration as the process that loaded the
 * plugin read it (every context: slurmd and slurmstepd as root, sbatch,
 * salloc and srun as the user). */
#include "config.h"

#include <stdbool.h>

#include <slurm/slurm.h>

#include "internal.h"

#ifdef PROLOG_FLAG_RUN_IN_JOB
/* Slurm's configuration as this process loaded it (libslurmfull's, which
 * slurmd, slurmstepd and the client commands load and the plugin's other
 * Slurm calls resolve to: spank/meson.build). slurm.h declares its type,
 * not the variable; weak, so a host without it reads as "not set". The
 * plugin is built for the one Slurm release that loads it (F26), so the
 * layout is that release's. */
extern slurm_conf_t slurm_conf __attribute__((weak));
#endif

bool sh_slurm_prolog_in_job(void)
{
#ifdef PROLOG_FLAG_RUN_IN_JOB
    return &slurm_conf != NULL && (slurm_conf.prolog_flags & PROLOG_FLAG_RUN_IN_JOB) != 0;
#else
    return false;
#endif
}
