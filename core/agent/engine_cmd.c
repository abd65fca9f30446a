/* stagehand-agent --prolog: the engine's command (launch.c runs it): its
 * command line from the site's configuration, its environment (SRC and DST,
 * what Open MPI needs of Slurm's, the site's mpi_env settings and the pml=
 * defaults), and the reading of the site's mpi_env file, which root_setup
 * does as root before the privilege drop. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "staging.h"
#include "stagehand/bcast.h"
#include "stagehand/clock.h"
#include "stagehand/hash.h"
#include "stagehand/modes.h"

/* Read the site's mpi_env file (plugstack mpi_env=; F22: transport and
 * interface selection for the engine): "KEY=VALUE" lines, '#' comments and
 * blank lines. Only OMPI_MCA_*, UCX_* and PMIX_MCA_* keys are accepted, so
 * the file cannot change anything but the MPI stack. Read as root (an
 * admin's file). Returns 0, or -1 with the reason in @err. */
int load_mpi_env(struct agent *a, char *err, size_t errlen)
{
    static const char *const prefixes[] = { "OMPI_MCA_", "UCX_", "PMIX_MCA_" };
    char line[1024];
    int lineno = 0;
    FILE *f;

    if (a->cfg.mpi_env[0] == '\0')
        return 0;
    f = fopen(a->cfg.mpi_env, "re");
    if (f == NULL) {
        snprintf(err, errlen, "stagehand is misconfigured on this cluster: mpi_env=%.400s: %s",
                 a->cfg.mpi_env, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *p = line, *eq;
        size_t klen;
        bool known = false;

        lineno++;
        line[strcspn(line, "\n")] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        eq = strchr(p, '=');
        klen = eq != NULL ? (size_t)(eq - p) : 0;
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
            known = known || (klen > strlen(prefixes[i]) &&
                              strncmp(p, prefixes[i], strlen(prefixes[i])) == 0);
        for (size_t i = 0; known && i < klen; i++)
            known = (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') ||
                    (p[i] >= '0' && p[i] <= '9') || p[i] == '_';
        for (const char *v = eq != NULL ? eq + 1 : ""; known && *v != '\0'; v++)
            known = (unsigned char)*v >= 0x20 && *v != 0x7f;
        if (!known || a->n_mpi_env >= MAX_MPI_ENV) {
            snprintf(err, errlen, "stagehand is misconfigured on this cluster: mpi_env=%.400s "
                     "line %d: %s", a->cfg.mpi_env, lineno,
                     a->n_mpi_env >= MAX_MPI_ENV ? "more than 64 settings"
                     : "expected KEY=VALUE with an OMPI_MCA_, UCX_ or PMIX_MCA_ key");
            fclose(f);
            return -1;
        }
        a->mpi_env[a->n_mpi_env] = strdup(p);
        if (a->mpi_env[a->n_mpi_env] == NULL) {
            snprintf(err, errlen, "out of memory");
            fclose(f);
            return -1;
        }
        a->n_mpi_env++;
    }
    fclose(f);
    return 0;
}

/* Is the KEY of "KEY=VALUE" @setting set by the site's mpi_env? */
static bool mpi_env_has(const struct agent *a, const char *setting)
{
    size_t len = strcspn(setting, "=");

    for (int i = 0; i < a->n_mpi_env; i++)
        if (strncmp(a->mpi_env[i], setting, len) == 0 && a->mpi_env[i][len] == '=')
            return true;
    return false;
}

static void engine_argv(const struct agent *a, uint32_t npart, struct engine_cmd *e)
{
    uint64_t secs = (uint64_t)((a->deadline - sh_now_ns()) / 1000000000);
    size_t n = 0;

    if (secs < 1)
        secs = 1;
    snprintf(e->segsz, sizeof(e->segsz), "%" PRIu64, a->cfg.segment_size);
    snprintf(e->ranks, sizeof(e->ranks), "%u", npart);
    snprintf(e->stall, sizeof(e->stall), "%" PRIu64 "ms", a->cfg.stall_timeout_ns / 1000000);
    snprintf(e->depth, sizeof(e->depth), "%u", a->cfg.pipeline_depth);
    snprintf(e->rahead, sizeof(e->rahead), "%u", a->cfg.read_ahead);
    snprintf(e->dirmode, sizeof(e->dirmode), "%04o", a->cfg.dest_dir_mode);
    snprintf(e->tmo, sizeof(e->tmo), "%" PRIu64 "s", secs);
    e->argv[n++] = a->cfg.engine;
    e->argv[n++] = "--check";
    e->argv[n++] = sh_check_name(a->cfg.check);
    e->argv[n++] = "--hash";
    e->argv[n++] = sh_hash_name(a->cfg.hash);
    e->argv[n++] = "--segment-size";
    e->argv[n++] = e->segsz;
    e->argv[n++] = "--pipeline-depth";
    e->argv[n++] = e->depth;
    e->argv[n++] = "--read-ahead";
    e->argv[n++] = e->rahead;
    e->argv[n++] = "--timeout";
    e->argv[n++] = e->tmo;
    e->argv[n++] = "--json";
    e->argv[n++] = "--expect-ranks";
    e->argv[n++] = e->ranks;
    e->argv[n++] = "--stall-timeout";
    e->argv[n++] = e->stall;
    e->argv[n++] = "--dir-mode";
    e->argv[n++] = e->dirmode;
    e->argv[n++] = "--untraceable";
    e->argv[n] = NULL;
}

/* The engine's environment, into @e->envp: SRC and DST (stagehand/bcast.h),
 * what Open MPI needs of Slurm's, the runtime directory as TMPDIR, then the
 * site's mpi_env settings and the defaults it left unset. */
static void engine_env(const struct agent *a, size_t img, struct engine_cmd *e)
{
    /* Open MPI 4.1 needs SLURM_JOBID, SLURM_NODELIST and SLURM_STEP_ID
     * under a foreign PMIx server (doc/design.md §8); the site's
     * mpi_env settings come next, then the defaults of the plugstack's
     * pml= that the site did not set. */
    const char *const *pml_env = sh_config_pml_env(a->cfg.pml);
    size_t ne = 0;

    snprintf(e->env_jobid, sizeof(e->env_jobid), "SLURM_JOBID=%" PRIu64, a->in.jobid);
    snprintf(e->env_jobid2, sizeof(e->env_jobid2), "SLURM_JOB_ID=%" PRIu64, a->in.jobid);
    snprintf(e->env_nodelist, sizeof(e->env_nodelist), "SLURM_NODELIST=%s", a->in.nodelist);
    snprintf(e->env_step, sizeof(e->env_step), "SLURM_STEP_ID=%zu", img);
    snprintf(e->env_tmp, sizeof(e->env_tmp), "TMPDIR=%s", a->rundir);
    snprintf(e->env_src, sizeof(e->env_src), "%s=%s", SH_BCAST_SOURCE_ENV,
             a->engine_src[0] != '\0' ? a->engine_src : sh_spec_set_src(a->specs, img));
    snprintf(e->env_dst, sizeof(e->env_dst), "%s=%s", SH_BCAST_DEST_ENV,
             sh_spec_set_dst(a->specs, img));
    e->envp[ne++] = e->env_src;
    e->envp[ne++] = e->env_dst;
    e->envp[ne++] = e->env_jobid;
    e->envp[ne++] = e->env_jobid2;
    e->envp[ne++] = e->env_nodelist;
    e->envp[ne++] = e->env_step;
    e->envp[ne++] = e->env_tmp;
    if (a->engine_src_name[0] != '\0') {
        snprintf(e->env_srcname, sizeof(e->env_srcname), "%s=%s", SH_BCAST_SOURCE_NAME_ENV,
                 a->engine_src_name);
        e->envp[ne++] = e->env_srcname;
    }
    for (int i = 0; i < a->n_mpi_env; i++)
        e->envp[ne++] = a->mpi_env[i];
    for (size_t i = 0; i < SH_CONFIG_PML_ENV_MAX && pml_env[i] != NULL; i++)
        if (!mpi_env_has(a, pml_env[i]))
            e->envp[ne++] = pml_env[i];
    e->envp[ne] = NULL;
}

void engine_cmd_build(const struct agent *a, size_t img, uint32_t npart, struct engine_cmd *e)
{
    engine_argv(a, npart, e);
    engine_env(a, img, e);
}
