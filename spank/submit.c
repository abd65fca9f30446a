/* stagehand.so in sbatch/salloc (allocator context) and srun (local
 * context), running as the submitting user: parse and check every
 * --stage-image value, then hand one canonical spec to the prolog.
 *
 * Every user error is printed as
 *     stagehand: --stage-image=<value>: <reason>
 * and makes the command exit non-zero before a job exists (doc/design.md §5). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "internal.h"
#include "stagehand/ref.h"
#include "stagehand/cache.h"

/* sbatch and salloc copy their job-control environment into the job's
 * environment with a "SLURM_SPANK_" prefix (Slurm 22.05 _set_spank_env()).
 * That holds the option's last value, under the option's env name, which an
 * srun inside the job turns into an option callback; and our whole spec. */
#define INHERITED_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_stage_image"
#define JOB_SPEC_ENV "SLURM_SPANK_" SH_SPEC_ENV

#define SHOW_MAX 320
#define REASON_MAX 2048

static void user_error(const char *value, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void user_error(const char *value, const char *fmt, ...)
{
    char show[SHOW_MAX];
    char reason[REASON_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    slurm_error("stagehand: --stage-image=%s: %s",
                sh_spec_display(value, show, sizeof(show)), reason);
}

/* srun inside an existing job (sbatch script, salloc shell). */
static bool inside_allocation(void)
{
    return spank_context() == S_CTX_LOCAL &&
           (getenv("SLURM_JOB_ID") != NULL || getenv("SLURM_JOBID") != NULL);
}

/* Hand a step staging's images (@wire, serialized) and the user's umask
 * @mask to the step: spank_setenv is remote-only, so srun's own
 * environment carries them, which srun copies into the step's, where
 * slurmstepd reads them with spank_getenv (spank/step.c). Returns 0, or
 * -1 with errno (setenv(3)). */
static int step_spec_setenv(const char *wire, const char *mask)
{
    if (setenv(SH_STEP_SPEC_ENV, wire, 1) != 0 || setenv(SH_STEP_VERSION_ENV, SH_VERSION, 1) != 0 ||
        setenv(SH_STEP_UMASK_ENV, mask, 1) != 0)
        return -1;
    return 0;
}

/* Is "--jobid" (or a prefix getopt_long takes for it, "--jobi") one of
 * srun's own arguments? Those are this process's command line
 * (/proc/self/cmdline, Linux) less the @cmd_argc words of the command srun
 * runs (S_JOB_ARGV), or all of it when @cmd_argc is unknown (-1). -1 when
 * the command line cannot be read (errno). srun takes its job from --jobid
 * or from SLURM_JOB_ID (inside_allocation); the plugin sees neither
 * directly, nor srun's option table. */
static int srun_given_jobid(int cmd_argc)
{
    static const char opt[] = "--jobid";
    char *buf = NULL;
    size_t len = 0, cap = 0, nwords = 0, own;
    bool found = false;
    FILE *f = fopen("/proc/self/cmdline", "re");

    if (f == NULL)
        return -1;
    for (;;) {
        size_t got;

        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap + 65536);

            if (nb == NULL) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
            cap += 65536;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\0')
            nwords++;
    own = cmd_argc >= 0 && (size_t)cmd_argc < nwords ? nwords - (size_t)cmd_argc : nwords;
    /* word 0 is srun itself */
    for (size_t i = 0, w = 0; i < len && w < own; i += strlen(buf + i) + 1, w++) {
        const char *a = buf + i;
        size_t n = strcspn(a, "=");

        if (w > 0 && strcmp(a, "--") == 0)
            break;
        if (w > 0 && n >= 6 && n <= sizeof(opt) - 1 && strncmp(a, opt, n) == 0)
            found = true;
    }
    free(buf);
    return found ? 1 : 0;
}

int sh_submit_local_user(spank_t sp)
{
    char **argv = NULL;
    int argc = -1, given;
    uint32_t jobid = 0;

    if (sh_plugin.pending_spec == NULL)
        return 0;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
        argc = -1;
    given = srun_given_jobid(argc);
    if (given == 0)
        return 0;
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        jobid = 0;
    if (given < 0) {
        slurm_error("stagehand: --stage-image: cannot tell whether srun runs in job %u, "
                    "which exists already, or made it: cannot read its command line: %s",
                    jobid, strerror(errno));
        return -1;
    }
    /* case F28: srun --jobid=N from outside the job is a step in job N, like
     * srun inside it: its images are new to the job, whose prolog ran long
     * ago (if at all), so they are staged at this step's start. */
    if (step_spec_setenv(sh_plugin.pending_spec, sh_plugin.pending_umask) != 0) {
        slurm_error("stagehand: --stage-image: cannot pass the spec to job %u's step: %s",
                    jobid, strerror(errno));
        return -1;
    }
    return 0;
}

static bool set_has(const struct sh_spec_set *set, const char *src,
                    const char *dst)
{
    for (size_t i = 0; i < sh_spec_set_count(set); i++)
        if (strcmp(sh_spec_set_src(set, i), src) == 0 &&
            strcmp(sh_spec_set_dst(set, i), dst) == 0)
            return true;
    return false;
}

/* Every image of @value is one the job's prolog staged already. */
static bool in_job_spec(const char *value, const char *default_dir)
{
    const char *text = getenv(JOB_SPEC_ENV);
    struct sh_spec_set *job, *mine;
    char err[REASON_MAX];
    bool all = false;

    if (text == NULL)
        return false;
    job = sh_spec_set_deserialize(text, err, sizeof(err));
    mine = sh_spec_set_new();
    if (job != NULL && mine != NULL &&
        sh_spec_set_default_registry(mine, sh_plugin.config.default_registry) == 0 &&
        sh_spec_add_value(mine, value, default_dir, err, sizeof(err)) == 0) {
        all = true;
        for (size_t i = 0; i < sh_spec_set_count(mine); i++)
            if (!set_has(job, sh_spec_set_src(mine, i),
                         sh_spec_set_dst(mine, i)))
                all = false;
    }
    sh_spec_set_free(mine);
    sh_spec_set_free(job);
    return all;
}

static int user_name(char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char pwbuf[4096];
    uid_t uid = getuid();
    int rc = getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &res);

    if (rc != 0 || res == NULL || strlen(pw.pw_name) >= len) {
        errno = rc != 0 ? rc : ENOENT;
        return -1;
    }
    memcpy(buf, pw.pw_name, strlen(pw.pw_name) + 1);
    return 0;
}

int sh_submit_option(const char *value)
{
    char user[256], dir[PATH_MAX], err[REASON_MAX];

    /* Issue 4: a value the step inherited from its job never re-stages;
     * the job's prolog staged it. */
    if (inside_allocation()) {
        const char *last = getenv(INHERITED_ENV);

        if (last != NULL && strcmp(last, value) == 0)
            return 0;
    }
    if (!sh_plugin.config_ok) {
        user_error(value, "stagehand is misconfigured on this cluster: %s",
                   sh_plugin.config_error);
        return -1;
    }
    if (user_name(user, sizeof(user)) != 0) {
        user_error(value, "cannot find the user name of uid %u: %s",
                   (unsigned)getuid(), strerror(errno));
        return -1;
    }
    if (sh_config_default_dir(&sh_plugin.config, user, dir,
                              sizeof(dir)) != 0) {
        user_error(value, "cannot form the default destination for user "
                   "'%s': %s", user, strerror(errno));
        return -1;
    }
    /* cache=: an image without DST goes to the node image cache (its job
     * form is made on the node, stagehand/cache.h) */
    if (sh_plugin.config.cache[0] != '\0' &&
        sh_cache_submit_dir(sh_plugin.config.cache, dir, sizeof(dir)) != 0) {
        user_error(value, "cache=%s: %s", sh_plugin.config.cache, strerror(errno));
        return -1;
    }
    if (inside_allocation()) {
        /* Given again on an srun, but staged by the job already. */
        if (in_job_spec(value, dir))
            return 0;
        /* case F28: a new image on an srun inside the job is staged at
         * step start on the step's nodes, before its tasks run. */
        sh_plugin.step_staging = true;
    } else if (sh_slurm_prolog_in_job()) {
        /* PrologFlags=RunInJob: Slurm runs no SPANK job prolog (internal.h).
         * An srun that makes its own job stages at its step's start, on the
         * job's every node; sbatch and salloc have no such step. */
        if (spank_context() != S_CTX_LOCAL) {
            user_error(value, "this cluster's slurm.conf sets PrologFlags=RunInJob, "
                       "under which Slurm runs no SPANK job prolog, so a job's images "
                       "cannot be staged; srun --stage-image (which stages at step "
                       "start) still can. Ask the administrators to drop RunInJob "
                       "(stagehand(8), VERSIONS)");
            return -1;
        }
        sh_plugin.step_staging = true;
    }
    if (sh_plugin.specs == NULL) {
        sh_plugin.specs = sh_spec_set_new();
        if (sh_plugin.specs == NULL ||
            sh_spec_set_default_registry(sh_plugin.specs,
                                         sh_plugin.config.default_registry) != 0) {
            user_error(value, "out of memory");
            return -1;
        }
    }
    if (sh_spec_add_value(sh_plugin.specs, value, dir, err,
                          sizeof(err)) != 0) {
        user_error(value, "%s", err);
        return -1;
    }
    return 0;
}

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

/* SRC must be a regular file this user can open for reading (doc/design.md §6;
 * case F17c: FIFOs and devices would hang or never end; case F18: typos and
 * permissions are caught here, before a job exists). */
static int check_source(const char *value, const char *src)
{
    char show[SHOW_MAX];
    struct stat st;
    int fd;

    sh_spec_display(src, show, sizeof(show));
    /* stat first: opening a device can have side effects. */
    if (stat(src, &st) == 0 && !S_ISREG(st.st_mode)) {
        user_error(value, "source '%s' is %s, not a regular file", show,
                   file_kind(st.st_mode));
        return -1;
    }
    fd = open(src, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;

        if (e == ENOENT)
            user_error(value, "source '%s' does not exist%s", show,
                       strchr(value, ',') != NULL
                           ? " (',' separates images; write a ',' that is "
                             "part of a path as '\\,')"
                           : "");
        else if (e == EACCES)
            user_error(value, "source '%s' is not readable by you: %s", show,
                       strerror(e));
        else
            user_error(value, "cannot open source '%s': %s", show,
                       strerror(e));
        return -1;
    }
    /* The file may have been replaced since stat(): decide on the fd. */
    if (fstat(fd, &st) != 0) {
        user_error(value, "cannot stat source '%s': %s", show,
                   strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    if (!S_ISREG(st.st_mode)) {
        user_error(value, "source '%s' is %s, not a regular file", show,
                   file_kind(st.st_mode));
        return -1;
    }
    return 0;
}

/* The staged paths in this command's own environment: salloc's shell (and
 * sbatch's exported environment) sees STAGEHAND_IMAGE like the job's tasks
 * do (task.c sets them there from the status file). */
static void export_planned(const struct sh_spec_set *set)
{
    size_t n = sh_spec_set_count(set), total = 1, used = 0;
    char name[64], *list;

    if (n == 0)
        return;
    setenv("STAGEHAND_IMAGE", sh_spec_set_dst(set, 0), 1);
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "STAGEHAND_IMAGE_%zu", i);
        setenv(name, sh_spec_set_dst(set, i), 1);
        total += strlen(sh_spec_set_dst(set, i)) + 1;
    }
    snprintf(name, sizeof(name), "%zu", n);
    setenv("STAGEHAND_IMAGE_COUNT", name, 1);
    list = malloc(total);
    if (list == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(sh_spec_set_dst(set, i));

        if (i > 0)
            list[used++] = ':';
        memcpy(list + used, sh_spec_set_dst(set, i), len);
        used += len;
    }
    list[used] = '\0';
    setenv("STAGEHAND_IMAGES", list, 1);
    free(list);
}

/* This process's umask, "0077" into @out: /proc/self/status (Linux 4.7),
 * which leaves it as it is; umask(2) twice where that is missing. */
static void own_umask(char *out, size_t len)
{
    char line[128];
    unsigned m = 0;
    bool found = false;
    FILE *f = fopen("/proc/self/status", "re");

    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "Umask: %o", &m) == 1;
    if (f != NULL)
        fclose(f);
    if (!found) {
        m = (unsigned)umask(077);
        umask((mode_t)m);
    }
    snprintf(out, len, "%04o", m & 0777);
}

int sh_submit_post_opt(spank_t sp)
{
    const struct sh_config *cfg = &sh_plugin.config;
    char err[REASON_MAX];
    size_t n;
    char *wire, mask[16];
    spank_err_t rc;
    int failed = 0;

    if (sh_plugin.submit_refused)
        return -1; /* reported by sh_submit_option() (args.c: refuse) */
    /* Images are only added by sh_submit_option(), which refuses every value
     * while the configuration is bad. */
    if (sh_plugin.specs == NULL || sh_spec_set_count(sh_plugin.specs) == 0)
        return 0;
    n = sh_spec_set_count(sh_plugin.specs);
    /* Report every bad image at once, not one per attempt. */
    for (size_t i = 0; i < n; i++) {
        const char *value = sh_spec_set_origin(sh_plugin.specs, i);
        const char *src = sh_spec_set_src(sh_plugin.specs, i);
        const char *dst = sh_spec_set_dst(sh_plugin.specs, i);

        if (sh_config_check_dest(cfg, dst, err, sizeof(err)) != 0) {
            user_error(value, "%s", err);
            failed = 1;
        }
        if (sh_ref_is_image(src)) {
            /* A registry image: the site must allow its registry; the
             * registry itself is asked only by the job's node 0. */
            struct sh_ref ref;

            if (sh_ref_parse_canonical(src, &ref, err, sizeof(err)) != 0 ||
                sh_config_check_registry(cfg, ref.registry, err, sizeof(err)) != 0) {
                user_error(value, "%s", err);
                failed = 1;
            }
        } else if (cfg->submit_check && check_source(value, src) != 0) {
            failed = 1;
        }
    }
    if (failed)
        return -1;
    wire = sh_spec_set_serialize(sh_plugin.specs);
    if (wire == NULL) {
        slurm_error("stagehand: --stage-image: cannot encode the spec: %s",
                    strerror(errno));
        return -1;
    }
    /* The copies' mode follows SRC's minus the user's umask (issue 30). */
    own_umask(mask, sizeof(mask));
    if (sh_plugin.step_staging) {
        rc = step_spec_setenv(wire, mask) == 0 ? ESPANK_SUCCESS : ESPANK_ERROR;
    } else {
        rc = spank_job_control_setenv(sp, SH_SPEC_ENV, wire, 1);
        if (rc == ESPANK_SUCCESS)
            rc = spank_job_control_setenv(sp, SH_VERSION_ENV, SH_VERSION, 1);
        if (rc == ESPANK_SUCCESS)
            rc = spank_job_control_setenv(sp, SH_UMASK_ENV, mask, 1);
    }
    if (rc == ESPANK_SUCCESS && spank_context() == S_CTX_LOCAL && !sh_plugin.step_staging) {
        /* srun outside an allocation: a new job's prolog stages these,
         * unless srun was given --jobid (sh_submit_local_user decides). */
        free(sh_plugin.pending_spec);
        sh_plugin.pending_spec = strdup(wire);
        snprintf(sh_plugin.pending_umask, sizeof(sh_plugin.pending_umask), "%s", mask);
        if (sh_plugin.pending_spec == NULL)
            rc = ESPANK_ERROR;
    }
    free(wire);
    if (rc != ESPANK_SUCCESS) {
        slurm_error("stagehand: --stage-image: cannot pass the spec to the "
                    "prolog: %s", spank_strerror(rc));
        return -1;
    }
    if (spank_context() == S_CTX_ALLOCATOR)
        export_planned(sh_plugin.specs);
    if (sh_plugin.verbose_opt) {
        rc = spank_job_control_setenv(sp, SH_VERBOSE_ENV, "1", 1);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("stagehand: --stage-verbose: cannot pass it to the "
                        "prolog: %s", spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}
