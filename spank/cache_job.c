/* stagehand.so: a staging's steps for the node image cache (cache=,
 * stagehand/cache.h, doc/design.md §2 "cache mode" and §6), in the staging
 * process ("stagehand-stage") or a step's slurmstepd, as root:
 *
 *   before the local check: the job form of the spec, the cache's and the
 *     job's directories, and a link of each entry whose source the job user
 *     proved (a child as the user: sh_local_src_match) to be the entry's;
 *     for a missing entry, its fill lock or the wait for another job's
 *     (cache_fill.c);
 *   after the agent: each new copy adopted into the cache by stagehand-cache
 *     (it hashes; the plugin links no hash library), with the reader's
 *     digest and the source's identity the job's agent reported;
 *   at the end: the job's directory sealed (0500).
 *
 * Everything else (the broadcast, verify, atomic publish, the current-copy
 * check) is the staging path's own, on a DST "<cache>/job/<jobid>/<name>". */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "staging.h"
#include "stagehand/cache.h"
#include "stagehand/clock.h"
#include "stagehand/kv.h"
#include "stagehand/local.h"
#include "stagehand/spec.h"

/* The job-form spec sh_cache_stage_prepare made (one staging per process). */
static char *job_spec;

/* The pre-check's refusal of this staging ("" when the images fit). */
static char refusal[SH_STATUS_LINE_MAX];

const char *sh_cache_refusal(void)
{
    return refusal[0] != '\0' ? refusal : NULL;
}

void sh_cache_link_proven(const char *cache, const struct sh_stage_job *job,
                          const struct sh_spec_set *set)
{
    static struct sh_cache_entry found[SH_SPEC_MAX_IMAGES];
    static struct sh_src_id ids[SH_SPEC_MAX_IMAGES];
    const char *srcs[SH_SPEC_MAX_IMAGES];
    size_t idx[SH_SPEC_MAX_IMAGES], n = 0;
    bool match[SH_SPEC_MAX_IMAGES];

    for (size_t i = 0; i < sh_spec_set_count(set) && n < SH_SPEC_MAX_IMAGES; i++) {
        const char *dst = sh_spec_set_dst(set, i);
        struct stat sb;

        if (sh_cache_dst_kind(cache, dst, NULL) != SH_CACHE_DST_JOB ||
            lstat(dst, &sb) == 0 || errno != ENOENT ||
            sh_cache_find(cache, sh_spec_set_src(set, i), &found[n]) != 0)
            continue;
        srcs[n] = sh_spec_set_src(set, i);
        ids[n] = found[n].rec.src;
        idx[n++] = i;
    }
    if (n == 0 || sh_local_src_match(job, n, srcs, ids, match) != 0)
        return;
    for (size_t k = 0; k < n; k++) {
        const char *dst = sh_spec_set_dst(set, idx[k]);

        if (!match[k]) {
            slurm_debug("stagehand: job %u: %s: the cache's entry is not %s as %s sees it",
                        job->jobid, dst, srcs[k], job->user);
            continue;
        }
        if (sh_cache_link(cache, found[k].key, dst) != 0)
            slurm_info("stagehand: job %u: cannot link cache entry %s as %s: %s",
                       job->jobid, found[k].key, dst, strerror(errno));
    }
}

const char *sh_cache_job_spec(const struct sh_config *cfg, const struct sh_stage_job *job,
                              char *err, size_t errlen)
{
    if (cfg == NULL || cfg->cache[0] == '\0')
        return job->spec;
    free(job_spec);
    job_spec = sh_cache_spec_for_job(cfg->cache, job->jobid, job->spec, err, errlen);
    return job_spec;
}

/* Does @set have an image for the cache? */
static bool has_cache_image(const char *cache, const struct sh_spec_set *set)
{
    for (size_t i = 0; i < sh_spec_set_count(set); i++)
        if (sh_cache_dst_kind(cache, sh_spec_set_dst(set, i), NULL) == SH_CACHE_DST_JOB)
            return true;
    return false;
}

/* Is job @jobid still on this node (sh_job_on_node)? */
static bool job_here(uint64_t jobid, void *arg)
{
    (void)arg;
    return sh_job_on_node(SH_RUNTIME_DIR, jobid, -1);
}

static void log_evicted(const char *key, uint64_t size, void *arg)
{
    const struct sh_stage_job *job = arg;

    slurm_info("stagehand: job %u: evicted cache entry %s (%" PRIu64 " bytes, least "
               "recently used, no job holds it)", job->jobid, key, size);
}

/* Bytes of @set's cache images that have no link yet (a copy will come):
 * their sources' sizes as root sees them (0 for one root cannot stat; the
 * marks then count what is in the cache only), and their SRCs, ", "-joined,
 * into @what. */
static uint64_t incoming_bytes(const char *cache, const struct sh_spec_set *set, char *what,
                               size_t whatlen)
{
    uint64_t sum = 0;
    size_t o = 0;

    what[0] = '\0';
    for (size_t i = 0; i < sh_spec_set_count(set); i++) {
        const char *dst = sh_spec_set_dst(set, i);
        struct stat sb;

        if (sh_cache_dst_kind(cache, dst, NULL) != SH_CACHE_DST_JOB || lstat(dst, &sb) == 0)
            continue;
        if (stat(sh_spec_set_src(set, i), &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        sum += (uint64_t)sb.st_size;
        if (o < whatlen)
            o += (size_t)snprintf(what + o, whatlen - o, "%s%s", o > 0 ? ", " : "",
                                  sh_spec_set_src(set, i));
    }
    return sum;
}

/* Evict by the marks before the copies of @set come (doc/design.md, cache
 * eviction), after the pre-check: when the images cannot fit even with
 * every unused entry evicted, nothing is evicted for them and the reason
 * goes to the agent (refusal: this node then votes that error, and every
 * node fails the job at once, a user's failure). When the cache cannot be
 * read, the engine's own free-space check decides. */
static void make_room(const struct sh_config *cfg, const struct sh_stage_job *job,
                      const struct sh_spec_set *set)
{
    struct statvfs fs;
    struct sh_cache_usage u = { 0, 0, 0 };
    char what[1024];
    uint64_t total, incoming = incoming_bytes(cfg->cache, set, what, sizeof(what));

    if (incoming == 0 && cfg->cache_max == 0)
        return;
    /* the warm path (nothing to copy) reads no entry for the pre-check */
    if (statvfs(cfg->cache, &fs) != 0 ||
        (incoming > 0 && sh_cache_usage(cfg->cache, &u) != 0)) {
        slurm_info("stagehand: job %u: cache eviction in %s: %s", job->jobid, cfg->cache,
                   strerror(errno));
        return;
    }
    if (incoming > 0 && !sh_cache_fits(cfg->cache, &u, incoming, cfg->cache_max, what,
                                       refusal, sizeof(refusal))) {
        slurm_info("stagehand: job %u: %s", job->jobid, refusal);
        return;
    }
    total = (uint64_t)fs.f_blocks * fs.f_frsize;
    if (sh_cache_make_room(cfg->cache, incoming, sh_cache_mark_bytes(&cfg->cache_high, total),
                           sh_cache_mark_bytes(&cfg->cache_low, total), cfg->cache_max,
                           log_evicted, (void *)job) < 0)
        slurm_info("stagehand: job %u: cache eviction in %s: %s", job->jobid, cfg->cache,
                   strerror(errno));
}

int sh_cache_stage_prepare(const struct sh_config *cfg, const struct sh_stage_job *job,
                           char *err, size_t errlen)
{
    struct sh_spec_set *set;
    int rc = 0;

    refusal[0] = '\0';
    if (cfg == NULL || cfg->cache[0] == '\0' || job_spec == NULL)
        return 0;
    set = sh_spec_set_deserialize(job_spec, err, errlen);
    if (set == NULL)
        return -1;
    if (has_cache_image(cfg->cache, set)) {
        rc = sh_cache_prepare(cfg->cache, job->jobid, job->uid, job->gid, err, errlen);
        if (rc == 0) {
            int gone = sh_cache_sweep_jobs(cfg->cache, job->jobid, job_here, NULL);

            if (gone > 0)
                slurm_info("stagehand: job %u: dropped the cache references of %d jobs no "
                           "longer on this node", job->jobid, gone);
            /* the proven links, or this node's one producer per entry */
            rc = sh_cache_fill_claim(cfg, job, set, err, errlen);
            if (rc == 0)
                make_room(cfg, job, set);
            else
                sh_cache_fill_release_all(cfg->cache);
        }
    }
    sh_spec_set_free(set);
    return rc;
}

/* Run stagehand-cache's adoption of @dst with the agent's report @rep
 * ("<digest> <source identity>"). Returns 0, or -1 with its message in @why. */
static int adopt_one(const struct sh_config *cfg, const struct sh_stage_job *job,
                     const char *src, const char *dst, const char *rep, char *why,
                     size_t whylen)
{
    char *const argv[] = { (char *)"stagehand-cache", (char *)"adopt", NULL };
    char *const envp[] = { NULL };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t sa;
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, rc, wstatus = 0;
    size_t got = 0;
    pid_t pid;
    FILE *f;

    why[0] = '\0';
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        goto fail;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDERR_FILENO);
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
    /* A process group of its own: the epilog's SIGTERM to the staging
     * process's group (a job that ended here first, e.g. one failed on
     * another node) stops the copy, not an adoption of a verified one,
     * which is bounded; the epilog waits for the staging's lock. */
    rc = posix_spawnattr_init(&sa);
    if (rc == 0) {
        rc = posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETPGROUP);
        if (rc == 0)
            rc = posix_spawnattr_setpgroup(&sa, 0);
        if (rc == 0)
            rc = posix_spawn(&pid, SH_CACHE_TOOL_PATH, &fa, &sa, argv, envp);
        posix_spawnattr_destroy(&sa);
    }
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    in[0] = out[1] = -1;
    if (rc != 0) {
        snprintf(why, whylen, "cannot start %s: %s", SH_CACHE_TOOL_PATH, strerror(rc));
        goto fail;
    }
    f = fdopen(in[1], "w");
    if (f != NULL) {
        in[1] = -1;
        sh_kv_put(f, "cache", cfg->cache);
        sh_kv_put(f, "dst", dst);
        sh_kv_put(f, "src", src);
        sh_kv_putf(f, "uid", "%u", (unsigned)job->uid);
        sh_kv_put(f, "hash", sh_hash_name(cfg->hash));
        sh_kv_put(f, "report", rep);
        sh_kv_put(f, "end", "");
        fclose(f);
    }
    for (;;) {
        ssize_t n = read(out[0], why + got, whylen - 1 - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == whylen - 1)
            break;
    }
    why[got] = '\0';
    while (got > 0 && why[got - 1] == '\n')
        why[--got] = '\0';
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        rc = 0;
    else
        rc = -1;
    if (rc != 0 && why[0] == '\0')
        snprintf(why, whylen, "stagehand-cache adopt ended with status %d", wstatus);
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    return rc;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    return -1;
}

int sh_cache_stage_adopt(const struct sh_config *cfg, const struct sh_stage_job *job,
                         char *const *reports, bool job_ok, char *msg, size_t msglen)
{
    struct sh_spec_set *set;
    char err[256];
    int rc = 0;

    if (cfg == NULL || cfg->cache[0] == '\0' || job_spec == NULL)
        return 0;
    set = sh_spec_set_deserialize(job_spec, err, sizeof(err));
    if (set == NULL)
        return 0;
    for (size_t i = 0; i < sh_spec_set_count(set) && rc == 0; i++) {
        const char *dst = sh_spec_set_dst(set, i);
        bool reported = i < SH_SPEC_MAX_IMAGES && reports[i] != NULL;
        char why[1024];
        struct stat sb;
        int one;

        if (sh_cache_dst_kind(cfg->cache, dst, NULL) != SH_CACHE_DST_JOB ||
            lstat(dst, &sb) != 0 || sb.st_uid == 0)
            continue; /* no image for the cache, or an entry linked already */
        /* A failed job's images: only the verified copies its agent
         * reported (a node that survived a dead one, doc/design.md §5); the
         * epilog removes the rest with the job's directory. */
        if (!job_ok && !reported)
            continue;
        if (!reported) {
            snprintf(why, sizeof(why), "the agent reported no digest for it");
            (void)unlink(dst);
            one = -1;
        } else {
            int64_t t0 = sh_now_ns();

            one = adopt_one(cfg, job, sh_spec_set_src(set, i), dst, reports[i], why,
                            sizeof(why));
            /* SlurmdDebug=debug: what a cold staging adds (doc/performance.md) */
            if (one == 0)
                slurm_debug("stagehand: job %u: %s adopted into the node image cache in "
                            "%.1f ms: %s", job->jobid, dst,
                            (double)(sh_now_ns() - t0) / 1e6, why);
        }
        if (one == 0)
            continue;
        if (!job_ok) {
            /* the job's own message stays the one the user sees */
            slurm_info("stagehand: job %u: image %s on %s not kept in the cache: %s",
                       job->jobid, dst, job->nodename, why);
            continue;
        }
        snprintf(msg, msglen, "image %.1500s on %.200s: %.1500s", dst, job->nodename, why);
        rc = -1;
    }
    sh_spec_set_free(set);
    return rc;
}

void sh_cache_stage_end(const struct sh_config *cfg, const struct sh_stage_job *job)
{
    if (cfg == NULL || cfg->cache[0] == '\0' || job_spec == NULL)
        return;
    /* the copies are adopted (or failed): waiters take the entries */
    sh_cache_fill_release_all(cfg->cache);
    if (sh_cache_job_seal(cfg->cache, job->jobid) != 0 && errno != ENOENT)
        slurm_error("stagehand: job %u: cannot seal its cache directory: %s", job->jobid,
                    strerror(errno));
}
