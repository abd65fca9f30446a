/* stagehand.so: a node's staging of a job or job step, from the job's lock
 * to its status file (staging.h). Runs as root in one of three processes:
 * the job prolog's staging process ("stagehand-stage", forked from the
 * prolog's slurmstepd: stage_process.c), the job prolog itself (slurmd's
 * prolog under on_node_fault=drain, or when that fork fails), or a job
 * step's slurmstepd before the step's tasks (step.c).
 *
 * The steps: begin (runtime directory, status path, the job's lock), admit
 * (plugstack configuration, the submitting side's version), then in the job
 * prolog hand over to the staging process; decide (the local check:
 * localcheck.c; a current node leaves a sentinel for the others), else the
 * agent (agent_io.c); record the outcome in a root-owned status file;
 * unlock. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "agent_io.h"
#include "internal.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/clock.h"
#include "stagehand/local.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

/* Create the root-owned runtime directory /run/stagehand (0755), refusing a
 * symlink or a directory owned by anyone else. */
static int ensure_runtime_dir(void)
{
    struct stat sb;

    if (mkdir(SH_RUNTIME_DIR, 0755) != 0 && errno != EEXIST)
        return -1;
    if (lstat(SH_RUNTIME_DIR, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != 0 || (sb.st_mode & 022) != 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

const char *sh_job_env(const char *name, const char *alt)
{
    const char *v = getenv(name);

    if ((v == NULL || v[0] == '\0') && alt != NULL)
        v = getenv(alt);
    return v != NULL ? v : "";
}

unsigned sh_job_umask(const char *text)
{
    unsigned m;

    return text != NULL && sh_parse_mode(text, &m) == 0 ? m : SH_UMASK_DEFAULT;
}

static void fill_images(struct sh_status *st, const char *spec)
{
    char err[256];
    struct sh_spec_set *set = sh_spec_set_deserialize(spec, err, sizeof(err));

    if (set == NULL)
        return;
    for (size_t i = 0; i < sh_spec_set_count(set); i++)
        sh_status_add_image(st, sh_spec_set_dst(set, i));
    sh_spec_set_free(set);
}

static void staging_decide(struct sh_staging *s, int ac, char **av);

/* The outcome of this process's staging: ~0.6 MiB, not on the stack. */
static struct sh_agent_result agent_res;
/* This process's staging (one at a time: a prolog, a staging process or a
 * step's slurmstepd stages one job or step). */
static struct sh_staging staging;

/* Step 1, begin: an empty outcome for @job in @s, the runtime directory, the
 * status file's path and, for the job's staging (stepid < 0), the job's
 * lock. Returns 1 to go on; 0 when there is nothing to do (the job is staged
 * here already) or nothing to record in; -1 for a node fault under
 * on_node_fault=drain (job prolog only). */
static int staging_begin(struct sh_staging *s, const struct sh_stage_job *job)
{
    struct sh_agent_result *res = &agent_res;
    bool done = false;

    s->t_entry = sh_now_ns();
    s->job = job;
    s->cfg = NULL;
    s->res = res;
    s->lock_fd = -1;
    s->prolog = job->stepid < 0 && !job->missed_prolog;
    s->deferred = s->local_current = false;
    /* Not memset: see sh_status_clear(). */
    res->have_result = res->ok = res->node_fault = res->user_phase = false;
    res->message[0] = '\0';
    sh_status_clear(&res->status);
    snprintf(res->status.node, sizeof(res->status.node), "%s", job->nodename);
    fill_images(&res->status, job->spec);
    if (ensure_runtime_dir() != 0) {
        slurm_error("stagehand: job %u: runtime directory %s: %s", job->jobid,
                    SH_RUNTIME_DIR, strerror(errno));
        return sh_plugin.config.on_node_fault == SH_FAULT_DRAIN && s->prolog ? -1 : 0;
    }
    if (sh_status_path(SH_RUNTIME_DIR, job->jobid, job->stepid, s->status_path,
                       sizeof(s->status_path)) != 0)
        return 0;
    if (job->stepid < 0) {
        s->lock_fd = sh_job_lock(job->jobid, s->status_path, &done);
        if (s->lock_fd < 0)
            slurm_error("stagehand: job %u: cannot lock %s/%u.lock: %s (staging goes on "
                        "unlocked)", job->jobid, SH_RUNTIME_DIR, job->jobid,
                        strerror(errno));
        if (done) {
            slurm_debug("stagehand: job %u: staged on this node already", job->jobid);
            close(s->lock_fd);
            return 0;
        }
    }
    return 1;
}

/* Step 2, admit: may this node stage the job at all? Its plugstack
 * configuration is usable and the submitting side runs this version. False
 * with the reason in @s's outcome (a failure to record). */
static bool staging_admit(struct sh_staging *s, int ac, char **av)
{
    const struct sh_stage_job *job = s->job;

    s->cfg = sh_plugin_load_config(ac, av);
    if (s->cfg == NULL) {
        snprintf(s->res->message, sizeof(s->res->message),
                 "stagehand is misconfigured on this cluster: %.900s",
                 sh_plugin.config_error);
        return false;
    }
    sh_plugin_check_ports(s->cfg);
    /* case F26: the submitting side and this node must run one version. */
    if (job->submit_version != NULL && job->submit_version[0] != '\0' &&
        strcmp(job->submit_version, SH_VERSION) != 0) {
        snprintf(s->res->message, sizeof(s->res->message),
                 "the job was submitted with stagehand %.64s but node %.200s runs "
                 "stagehand %s: install the same version on every node and the "
                 "login nodes, then restart slurmd", job->submit_version,
                 job->nodename, SH_VERSION);
        return false;
    }
    return true;
}


/* The node image cache's part after the decision: adopt new copies (after
 * a failure too: a node that survived a dead one has its verified copy,
 * which the next job then finds current, doc/design.md §5), then seal the
 * job's directory. */
static void staging_cache_end(struct sh_staging *s)
{
    struct sh_agent_result *res = s->res;

    if (res->have_result && !s->local_current &&
        sh_cache_stage_adopt(s->cfg, s->job, res->cache_report, res->ok, res->message,
                             sizeof(res->message)) != 0)
        res->ok = false;
    sh_cache_stage_end(s->cfg, s->job);
    for (size_t i = 0; i < SH_SPEC_MAX_IMAGES; i++) {
        free(res->cache_report[i]);
        res->cache_report[i] = NULL;
    }
}

void sh_staging_decide(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    if (sh_cache_stage_prepare(s->cfg, job, res->message, sizeof(res->message)) != 0)
        return;
    staging_decide(s, ac, av);
    staging_cache_end(s);
}

/* The local check, else the agents. */
static void staging_decide(struct sh_staging *s, int ac, char **av)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    /* The job prolog on a node whose copies are current: done here. */
    if (s->prolog && sh_local_current(s->cfg, job, &res->status)) {
        if (!s->deferred)
            sh_sentinel_start(s->cfg, job, ac, av);
        s->local_current = true;
        res->have_result = res->ok = true;
        return;
    }
    sh_agent_run(s, ac, av);
}

void sh_staging_record(struct sh_staging *s)
{
    struct sh_agent_result *res = s->res;
    const struct sh_stage_job *job = s->job;

    res->status.ok = res->have_result && res->ok;
    snprintf(res->status.message, sizeof(res->status.message), "%s", res->message);
    if (sh_status_write(s->status_path, &res->status) != 0)
        slurm_error("stagehand: job %u: cannot write %s: %s", job->jobid,
                    s->status_path, strerror(errno));
    slurm_debug("stagehand: job %u: %s done after %.1f ms", job->jobid,
                s->prolog && !s->deferred ? "prolog" : "staging",
                (double)(sh_now_ns() - s->t_entry) / 1e6);
    if (res->status.ok) {
        for (size_t i = 0; i < res->status.n_summaries; i++)
            slurm_info("stagehand: job %u user %s: %s", job->jobid, job->user,
                       res->status.summary[i]);
    } else if (sh_stage_process_stopped()) {
        slurm_info("stagehand: job %u user %s: staging on %s: %s", job->jobid, job->user,
                   res->status.node, res->message);
    } else {
        slurm_error("stagehand: job %u user %s: staging failed on %s: %s", job->jobid,
                    job->user, res->status.node, res->message);
    }
}

void sh_staging_unlock(struct sh_staging *s)
{
    /* The lock last: the epilog waits for it and then stops the recorded
     * process, which must have logged its outcome by then. */
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    s->lock_fd = -1;
}

/* The job prolog has handed the staging to process @stager: it lets go of
 * the lock (the child holds the same open file description) and ends. */
static int staging_handed_over(struct sh_staging *s, pid_t stager)
{
    close(s->lock_fd);
    s->lock_fd = -1;
    slurm_debug("stagehand: job %u: prolog done after %.1f ms, process %d stages",
                s->job->jobid, (double)(sh_now_ns() - s->t_entry) / 1e6, (int)stager);
    return 0;
}

int sh_stage_run(const struct sh_stage_job *job_in, int ac, char **av)
{
    static struct sh_stage_job job_cache;
    struct sh_staging *s = &staging;
    const struct sh_stage_job *job = job_in;
    char err[512];
    const char *spec = sh_cache_job_spec(sh_plugin_load_config(ac, av), job_in, err,
                                         sizeof(err));
    int rc;

    /* cache=: the job's images for the cache in their job form, for the
     * staging and for the status (STAGEHAND_IMAGE) alike */
    if (spec != NULL && spec != job_in->spec) {
        job_cache = *job_in;
        job_cache.spec = spec;
        job = &job_cache;
    } else if (spec == NULL) {
        slurm_error("stagehand: job %u: the job's images for the cache: %s", job_in->jobid,
                    err);
    }
    rc = staging_begin(s, job);

    if (rc <= 0)
        return rc;
    if (staging_admit(s, ac, av)) {
        /* The job prolog hands the staging to a process of its own and ends,
         * unless a node fault must fail the prolog (on_node_fault=drain). The
         * staging process carries on with @s and never returns here. */
        if (s->prolog && s->lock_fd >= 0 && s->cfg->on_node_fault != SH_FAULT_DRAIN) {
            pid_t stager = sh_stage_process_start(s, ac, av);

            if (stager > 0)
                return staging_handed_over(s, stager);
            slurm_error("stagehand: job %u: fork: %s (staging in the prolog)", job->jobid,
                        strerror(errno));
        }
        sh_staging_decide(s, ac, av);
    }
    sh_staging_record(s);
    sh_staging_unlock(s);
    if (!s->res->status.ok && s->prolog && s->res->node_fault && s->cfg != NULL &&
        s->cfg->on_node_fault == SH_FAULT_DRAIN)
        return -1;
    return 0;
}
