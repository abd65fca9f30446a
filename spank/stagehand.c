/* stagehand SPANK plugin: entry points only; each context is handled in its
 * own module (allocator/local side, slurmd prolog side, slurmstepd side). */
#include "config.h"

#include <stddef.h>

#include <slurm/spank.h>

#include "stagehand/log.h"

SPANK_PLUGIN(stagehand, 1)

static int opt_stage_image(int val, const char *optarg, int remote);

/* struct spank_option holds non-const char pointers (spank.h). */
static char opt_name[] = "stage-image";
static char opt_arginfo[] = "SRC[:DST]";
static char opt_usage[] =
    "Stage the file SRC (e.g. a Squashfs image) to DST on node-local storage "
    "of every allocated node before the first step starts";

static struct spank_option stage_image_option = {
    opt_name, opt_arginfo, opt_usage, 1, 0, opt_stage_image,
};

static int opt_stage_image(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    return optarg != NULL && optarg[0] != '\0' ? 0 : -1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    /* A static spank_options[] table is ignored by sbatch/salloc: register. */
    if (spank_option_register(sp, &stage_image_option) != ESPANK_SUCCESS) {
        slurm_error("stagehand: init: cannot register --stage-image");
        return -1;
    }
    return 0;
}
