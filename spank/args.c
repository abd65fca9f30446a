/* stagehand.so: plugstack arguments, option registration and callbacks, in
 * every process that loads the plugin: sbatch, salloc and srun (as the
 * submitting user), slurmd and slurmstepd (as root). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "internal.h"
#include "stagehand/ctlport.h"
#include "stagehand/log.h"

struct sh_plugin_state sh_plugin;

enum { OPT_STAGE_IMAGE = 1, OPT_STAGE_VERBOSE = 2 };

static int opt_cb(int val, const char *optarg, int remote);

/* struct spank_option holds non-const char pointers (spank.h). */
static char image_name[] = "stage-image";
static char image_arginfo[] = "SRC[:DST][,...]";
/* One line each: --help prints the usage from column 30 and wraps it at 80
 * columns, so keep each at most 50 bytes. The full grammar (escapes, repeats,
 * default destination) is in stagehand(8). */
static char image_usage[] =
    "Stage SRC to local DST at job start (stagehand(8))";
static char verbose_name[] = "stage-verbose";
static char verbose_usage[] =
    "Print one summary line per staged image";

static struct spank_option options[] = {
    { image_name, image_arginfo, image_usage, 1, OPT_STAGE_IMAGE, opt_cb },
    { verbose_name, NULL, verbose_usage, 0, OPT_STAGE_VERBOSE, opt_cb },
};

/* Core modules log through sh_log; inside Slurm processes route it to
 * Slurm's log functions. */
static void log_sink(enum sh_log_level level, const char *line)
{
    switch (level) {
    case SH_LOG_ERROR:
    case SH_LOG_WARN:
        slurm_error("%s", line);
        break;
    case SH_LOG_INFO:
        slurm_info("%s", line);
        break;
    case SH_LOG_DEBUG:
        slurm_debug("%s", line);
        break;
    }
}

const struct sh_config *sh_plugin_load_config(int ac, char **av)
{
    spank_context_t ctx;

    if (!sh_plugin.config_loaded) {
        sh_plugin.config_loaded = true;
        sh_log_set_sink(log_sink);
        sh_plugin.config_ok =
            sh_config_parse(&sh_plugin.config, ac, (const char *const *)av,
                            sh_plugin.config_error,
                            sizeof(sh_plugin.config_error)) == 0;
        ctx = spank_context();
        if (sh_plugin.config_ok) {
            /* nothing to say */
        } else if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL) {
            /* Users of other jobs should not see this on every submit;
             * jobs that use --stage-image get it as their error. */
            slurm_verbose("stagehand: plugstack.conf: %s (jobs that use "
                          "--stage-image are refused)",
                          sh_plugin.config_error);
        } else {
            slurm_error("stagehand: plugstack.conf: %s (jobs that use "
                        "--stage-image are refused; other jobs run)",
                        sh_plugin.config_error);
        }
    }
    return sh_plugin.config_ok ? &sh_plugin.config : NULL;
}

void sh_plugin_check_ports(const struct sh_config *cfg)
{
    int start = 0;

    if (cfg != NULL && sh_ctl_range_unprivileged(cfg->port_base, cfg->port_range, &start))
        slurm_error("stagehand: control-plane ports %u-%u reach ports unprivileged users "
                    "can bind (net.ipv4.ip_unprivileged_port_start = %d on this node): a "
                    "user's process can hold a job's port and fail its staging; move "
                    "port_base/port_range below %d in plugstack.conf (stagehand.8)",
                    cfg->port_base, cfg->port_base + cfg->port_range - 1, start, start);
}

int sh_args_register(spank_t sp, int ac, char **av)
{
    sh_plugin_load_config(ac, av);
    /* A static spank_options[] table is ignored by sbatch/salloc (measured):
     * register at init, in every context that processes options. */
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        spank_err_t rc = spank_option_register(sp, &options[i]);

        if (rc != ESPANK_SUCCESS) {
            slurm_error("stagehand: init: cannot register --%s: %s",
                        options[i].name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* Remember @value once (case F27: Slurm calls the callback again with the
 * same value, and users repeat themselves). Returns 0 for a new value, 1 for
 * one seen before, or -1. */
static int record_value(const char *value)
{
    char *copy;

    for (size_t i = 0; i < sh_plugin.n_values; i++)
        if (strcmp(sh_plugin.values[i], value) == 0)
            return 1;
    if (sh_plugin.n_values == SH_SPEC_MAX_IMAGES) {
        slurm_error("stagehand: --stage-image: given more than %d times",
                    SH_SPEC_MAX_IMAGES);
        return -1;
    }
    copy = strdup(value);
    if (copy == NULL) {
        slurm_error("stagehand: --stage-image: out of memory");
        return -1;
    }
    sh_plugin.values[sh_plugin.n_values++] = copy;
    return 0;
}

/* A refused value on the submitting side: its reason is printed already;
 * the submission fails in init_post_opt (submit.c). Not here: Slurm follows a
 * failed option callback with "Invalid --stage-image argument: <value>", the
 * value raw, control bytes and all (the stagehand line shows them escaped),
 * and exits 255, where every later check exits 1. Returns 0. */
static int refuse(void)
{
    sh_plugin.submit_refused = true;
    return 0;
}

static int opt_cb(int val, const char *optarg, int remote)
{
    spank_context_t ctx = spank_context();
    bool submit = ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL;
    int seen;

    (void)remote;
    if (val == OPT_STAGE_VERBOSE) {
        sh_plugin.verbose_opt = true;
        return 0;
    }
    if (val != OPT_STAGE_IMAGE)
        return 0;
    if (optarg == NULL) {
        /* slurmstepd must not fail a step over what the submit side
         * already accepted: task.c decides there. */
        if (!submit)
            return 0;
        slurm_error("stagehand: --stage-image: a value is required "
                    "(SRC[:DST])");
        return refuse();
    }
    seen = record_value(optarg);
    if (!submit || seen == 1)
        return 0; /* a value seen before was judged then */
    if (seen < 0 || sh_submit_option(optarg) != 0)
        return refuse();
    return 0;
}

void sh_args_free(void)
{
    for (size_t i = 0; i < sh_plugin.n_values; i++)
        free(sh_plugin.values[i]);
    sh_plugin.n_values = 0;
    sh_spec_set_free(sh_plugin.specs);
    sh_plugin.specs = NULL;
    free(sh_plugin.pending_spec);
    sh_plugin.pending_spec = NULL;
}
