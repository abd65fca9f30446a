/* State shared by the files of stagehand.so, one file per process or SPANK
 * context (what runs it, as whom):
 *
 *   stagehand.c      slurm_spank_* entry points only; dispatch on
 *                    spank_context() (every process that loads the plugin)
 *   args.c           plugstack arguments (loaded once per process), option
 *                    registration and the option callbacks (every context)
 *   slurmconf.c      Slurm's own slurm.conf as this process read it (every
 *                    context)
 *   submit.c         sbatch/salloc (allocator) and srun (local), as the
 *                    submitting user: submit checks, hand the spec to the
 *                    prolog
 *   slurmd.c         slurmd at its start (slurmd context), root: versions,
 *                    root's directories, the administrator's warnings
 *   prolog.c         slurmd's job prolog (job-script context), root: read
 *                    the job, start its staging
 *   stage_process.c  the staging process the prolog forks, "stagehand-stage",
 *                    root: stage, write the status, unlock; end or stay as
 *                    the sentinel
 *   staging.c        the staging's steps (root): lock, local check or agent,
 *                    status file; in the staging process, the prolog under
 *                    on_node_fault=drain, or a step's slurmstepd
 *   agent_io.c       the staging's agent (root, in the same processes):
 *                    spawn, inputs, outputs, deadline, reaping
 *   localcheck.c     the local check: a node whose copy is current needs no
 *                    agent and does not wait for the others (a child forked
 *                    as the job user)
 *   sentinel.c       the sentinel of a current node, "sh-sentinel", root:
 *                    starts the agent only when another node needs it
 *   joblock.c        the job's staging lock and its wait, the record of the
 *                    staging's process (root: prolog, staging, tasks, epilog)
 *   step.c           slurmstepd before a step's tasks (remote context,
 *                    init_post_opt), root: stagings at step start
 *   task.c           slurmstepd's tasks (remote context): each task waits for
 *                    the node's staging (root), then fails or gets the
 *                    staged paths (the job user)
 *   epilog.c         slurmd's job epilog (job-script context), or the extern
 *                    step's exit under PrologFlags=RunInJob, root: stop what
 *                    staging left running, remove the job's runtime entries
 *
 * Private headers: internal.h (this), staging.h, agent_io.h, joblock.h.
 * Nothing here is exported from the .so (stagehand.map). */
#ifndef STAGEHAND_SPANK_INTERNAL_H
#define STAGEHAND_SPANK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include <slurm/spank.h>

#include "stagehand/config.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

#define SH_PLUGIN_ERR_MAX 1024

struct sh_plugin_state {
    /* plugstack arguments, see sh_plugin_load_config() */
    bool config_loaded;
    bool config_ok;
    struct sh_config config;
    char config_error[SH_PLUGIN_ERR_MAX];

    /* Every distinct --stage-image value seen by the option callback in this
     * process, in order (Slurm calls the callback again for the same value:
     * an identical value is stored once; case F27). All contexts. In the
     * remote context only the job's last value arrives (Slurm keeps one
     * optarg per option; read in Slurm 22.05's spank.c, not yet measured),
     * so remote code must not rebuild the job's image list from these: the
     * prolog's status file is authoritative there. sbatch/salloc also put
     * the whole spec into the job's environment as SLURM_SPANK_STAGEHAND_SPEC
     * (Slurm's _set_spank_env(); submit.c uses it for srun inside a job). */
    char *values[SH_SPEC_MAX_IMAGES];
    size_t n_values;

    /* --stage-verbose was given (all contexts). */
    bool verbose_opt;

    /* Allocator/local only: images of every value given to this command,
     * parsed and checked by submit.c (NULL until the first value). */
    struct sh_spec_set *specs;
    /* Local only: the images are new on an srun inside an existing job, so
     * they are staged at step start (SH_STEP_SPEC_ENV), not by the prolog. */
    bool step_staging;
    /* Local only: srun outside any allocation passed the spec to a new job's
     * prolog; kept (malloc'd) until slurm_spank_local_user_init, which turns
     * it into a step staging when the srun runs in an existing job given by
     * --jobid instead (case F28). NULL otherwise. */
    char *pending_spec;
    char pending_umask[16];
    /* A --stage-image value was refused (its reason already printed): the
     * submission fails in init_post_opt (args.c, opt_cb). */
    bool submit_refused;
};

extern struct sh_plugin_state sh_plugin;

/* Parse the plugstack arguments once per process. A bad configuration is
 * remembered (config_ok false, config_error set) and logged once; it is not
 * an error for the caller: only jobs that use --stage-image are refused
 * (doc/design.md §5). Returns &sh_plugin.config when the config is usable, else
 * NULL. */
const struct sh_config *sh_plugin_load_config(int ac, char **av);
/* Log an error for the admin when @cfg's control-plane port range reaches
 * ports unprivileged users can bind in this network namespace
 * (sh_ctl_range_unprivileged): at slurmd start and at each staging. */
void sh_plugin_check_ports(const struct sh_config *cfg);

/* slurm_spank_init in allocator, local and remote context: load the config
 * and register --stage-image and --stage-verbose. Returns 0 or -1. */
int sh_args_register(spank_t sp, int ac, char **av);

/* Free what the option callbacks and submit.c allocated (slurm_spank_exit). */
void sh_args_free(void);

/* Allocator/local: parse one --stage-image value into sh_plugin.specs.
 * Called by the option callback; prints the user's error and returns -1 on a
 * bad value (the callback then marks the submission refused, and
 * init_post_opt makes the command exit non-zero). */
int sh_submit_option(const char *value);

/* Allocator/local slurm_spank_init_post_opt: submit-time checks of every
 * image and spank_job_control_setenv() of the canonical spec. Returns 0, or
 * -1 after printing "stagehand: --stage-image=<value>: <reason>". */
int sh_submit_post_opt(spank_t sp);

/* Local slurm_spank_local_user_init (srun, after its job and step exist,
 * before the step is launched): when srun was given --jobid (an existing
 * job, not one it made) and its images went to a job prolog that will never
 * run, hand them to the step instead (SH_STEP_SPEC_ENV in srun's
 * environment, which srun merges into the step's after this call). Returns
 * 0, or -1 (printed) when that cannot be done. */
int sh_submit_local_user(spank_t sp);

/* slurm.h's SLURM_BATCH_SCRIPT (the batch step's id); spank.h has no name. */
#define SH_BATCH_STEP 0xfffffffbU
/* slurm.h's SLURM_EXTERN_CONT (the extern step's id: PrologFlags=Contain). */
#define SH_EXTERN_STEP 0xfffffffcU

/* Does this process's Slurm run the job prolog and epilog inside the job's
 * extern step (PrologFlags=RunInJob, Slurm 24.05 and later)? There Slurm
 * calls no SPANK plugin's slurm_spank_job_prolog or slurm_spank_job_epilog:
 * slurmstepd loads the plugin stack in remote context, and only slurmd's
 * own load notes which plugins have a job prolog (Slurm 24.11 spank.c,
 * spank_has_prolog(); prep/script runs the SPANK prolog only when it is
 * true), so the job's staging never starts and nothing cleans up after the
 * job (epilog.c, stagehand(8) VERSIONS). Read from the slurm.conf this
 * process loaded (slurmd, slurmstepd, sbatch, salloc, srun): Slurm's own
 * slurm_conf, the same value slurmstepd decides by, no RPC. False before
 * Slurm 24.05 (no such flag) and where that variable is absent. */
bool sh_slurm_prolog_in_job(void);

/* Job-script context: job prolog (prolog.c) / epilog (epilog.c). The prolog
 * returns -1 only for a node fault under on_node_fault=drain. */
int sh_prolog_run(spank_t sp, int ac, char **av);
int sh_epilog_run(spank_t sp, int ac, char **av);

/* Remote context, slurm_spank_exit (root; epilog.c): in the extern step of a
 * job on a node whose Slurm runs the prolog in the job (sh_slurm_prolog_in_job), do
 * the job epilog's clean-up, which Slurm does not call there: stop what a
 * staging left running and remove the job's entries of /run/stagehand (a
 * step staging's runtime tmpfs and status). Slurm ends the extern step once
 * the job's other steps have ended (it waits up to KillWait for them),
 * before the node's epilog scripts. Returns 0. */
int sh_extern_exit_run(spank_t sp, int ac, char **av);

/* slurmd context, slurm_spank_init (root, when slurmd starts): log the
 * versions and a bad plugstack.conf, make the fixed part of default_dest
 * (sh_config_default_fixed; e.g. /nvme/stage), root-owned 0755, before any
 * user can make it, and log an error for the administrator, naming the path
 * and owner, when a user's object is there already (it is left alone).
 * Never fails slurmd: returns 0 (slurmd.c). */
int sh_slurmd_init(spank_t sp, int ac, char **av);

/* Remote context (task.c): task_init_privileged (each task, as root,
 * before its program) waits for the job's staging, reads the status file
 * and exports the staged paths; task_init fails each task of a failed
 * staging with the message on the task's stderr. */
int sh_remote_task_privileged(spank_t sp);

/* Remote context, init_post_opt (root, before the step's tasks): stage the
 * images given on an srun inside an existing job; or, for a job that asked
 * for staging and has no staging status on this node because no job prolog
 * ran here before this step (Slurm before 23.02.2 starts a step that reaches
 * slurmd before the allocation's prolog request without any prolog, bug
 * 16093), run the job's staging now (step.c). Returns 0: the outcome is in
 * the status file that each task reads (sh_remote_task_privileged). */
int sh_step_stage_run(spank_t sp, int ac, char **av);
int sh_remote_task_init(spank_t sp);

#endif
