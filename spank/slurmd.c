/* stagehand.so in slurmd itself (slurmd context, slurm_spank_init), as root,
 * once when slurmd starts: say which Slurm the plugin was built for and which
 * loaded it, log a bad plugstack.conf, make root's directory for the default
 * destinations before any user's job can race for it, and warn the
 * administrator about settings under which staging cannot work as asked.
 * Never fails slurmd. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "internal.h"
#include "stagehand/config.h"
#include "stagehand/local.h"

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

/* Make the fixed part of default_dest (sh_config_default_fixed; e.g.
 * /nvme/stage), root-owned 0755, before any user can make it; log an error
 * for the administrator, naming the path and owner, when a user's object is
 * there already (it is left alone). */
static void slurmd_prepare(const struct sh_config *cfg)
{
    char fixed[PATH_MAX], pwbuf[4096], owner[128];
    struct sh_root_dir_problem bad;
    struct passwd pw, *pwr = NULL;
    const char *root;
    int fd;

    if (sh_config_default_fixed(cfg, fixed, sizeof(fixed)) != 0)
        return;
    root = sh_config_allowed_root(cfg, fixed);
    if (root == NULL)
        return; /* the fixed part is an allowed root itself: the site's */
    fd = sh_root_dirs_make(root, fixed, 0755, &bad);
    if (fd >= 0) {
        close(fd);
        slurm_debug("stagehand: %s: root's directory for the default destinations (%s)",
                    fixed, cfg->default_dest);
        return;
    }
    if (errno != EPERM) {
        slurm_error("stagehand: cannot make %s, root's directory for the default "
                    "destinations (default_dest=%s): %s: %s (jobs make it as they "
                    "need it)", fixed, cfg->default_dest,
                    bad.path[0] != '\0' ? bad.path : root, strerror(errno));
        return;
    }
    if (getpwuid_r(bad.uid, &pw, pwbuf, sizeof(pwbuf), &pwr) == 0 && pwr != NULL)
        snprintf(owner, sizeof(owner), "%.64s (uid %u)", pw.pw_name, (unsigned)bad.uid);
    else
        snprintf(owner, sizeof(owner), "uid %u", (unsigned)bad.uid);
    slurm_error("stagehand: %s is %s, owner %s, where root's directory for the default "
                "destinations goes (default_dest=%s): a user may have made it before "
                "root did. Jobs that stage to the default destination fail on this node "
                "until an administrator removes it (stagehand leaves it: it may hold "
                "that user's data); the next staging or slurmd start makes root's", bad.path,
                bad.what != NULL ? bad.what : "not a root-owned directory", owner,
                cfg->default_dest);
}

int sh_slurmd_init(spank_t sp, int ac, char **av)
{
    const struct sh_config *cfg;

    log_versions(sp);
    /* Log a bad plugstack.conf where admins look; never fail slurmd. */
    cfg = sh_plugin_load_config(ac, av);
    /* Root's directories before any user's job can race for them. */
    if (cfg != NULL)
        slurmd_prepare(cfg);
    sh_plugin_check_ports(cfg);
    if (sh_slurm_prolog_in_job())
        slurm_error("stagehand: slurm.conf sets PrologFlags=RunInJob, under which "
                    "Slurm calls no SPANK job prolog or epilog: sbatch and salloc "
                    "--stage-image are refused, srun --stage-image stages at step "
                    "start; drop RunInJob to stage jobs in the prolog "
                    "(stagehand(8), VERSIONS)");
    return 0;
}
