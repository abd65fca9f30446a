/* stagehand.so: one producer per cache entry and node (stagehand/cache.h
 * fill locks, doc/design.md §2 step 11), in the staging process (root),
 * before the staging's decision.
 *
 * For each cache image still without a link after the proof (a missing
 * entry), the staging takes the source's fill lock and holds it until its
 * copy is adopted (sh_cache_fill_release_all, at the staging's end): it is
 * the producer. A staging that finds the lock held waits for it, holding no
 * fill lock meanwhile (no hold-and-wait: two stagings of one node cannot
 * wait for each other), and then links the producer's entry; when the
 * producer ended without one (failed, cancelled, killed: its lock goes with
 * its process), the first waiter to get the lock takes over and copies.
 *
 * The wait is bounded. A job of one node waits up to the staging deadline
 * (timeout=) plus SH_STAGING_GRACE_S, the longest a producer's agent runs
 * (the producer it waits for ends by then, or a takeover has begun), then
 * fails naming the other job. A job of several nodes
 * waits only for a producer of one node or of a lower job id (so no two
 * jobs wait for each other across nodes: the waits between jobs of several
 * nodes go down in job id), at most join_timeout less a margin (its other
 * nodes wait that long for this node's agent), then copies on its own; the
 * adoption keeps one entry. Under on_node_fault=drain the job prolog
 * stages itself within slurm.conf's PrologEpilogTimeout, which a wait added
 * to the copy could pass (a timed-out prolog drains the node): there no job
 * waits, each copies on its own. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"
#include "staging.h"
#include "stagehand/cache.h"
#include "stagehand/clock.h"
#include "stagehand/publish.h"
#include "stagehand/spec.h"

/* The fill locks this staging holds (one staging per process). */
static struct held {
    int fd;
    char *src;
} held[SH_SPEC_MAX_IMAGES];
static size_t n_held;

/* The margin a job of several nodes keeps below join_timeout, and the
 * longest nap between two tries of a busy lock. */
#define FILL_JOIN_MARGIN_NS (5 * SH_NS_PER_S)
#define FILL_NAP_MAX_NS (100 * SH_NS_PER_MS)

static int held_index(const char *src)
{
    for (size_t k = 0; k < n_held; k++)
        if (strcmp(held[k].src, src) == 0)
            return (int)k;
    return -1;
}

static void release_at(const char *cache, size_t k)
{
    sh_cache_fill_release(cache, held[k].src, held[k].fd);
    free(held[k].src);
    held[k] = held[--n_held];
}

static void keep(int fd, const char *src)
{
    char *copy = strdup(src);

    if (copy == NULL || n_held == SH_SPEC_MAX_IMAGES) {
        free(copy);
        sh_publish_unlock(fd); /* a copy without the lock: no worse than before */
        return;
    }
    held[n_held].fd = fd;
    held[n_held++].src = copy;
}

void sh_cache_fill_release_all(const char *cache)
{
    while (n_held > 0)
        release_at(cache, n_held - 1);
}

/* Does image @i of @set still want a copy into the cache? A cache image of
 * the job form with no link yet, whose SRC is a path (a registry
 * reference's entry is found by the agents, and has no fill lock). */
static bool wants_copy(const char *cache, const struct sh_spec_set *set, size_t i)
{
    struct stat sb;

    return sh_cache_dst_kind(cache, sh_spec_set_dst(set, i), NULL) == SH_CACHE_DST_JOB &&
           sh_spec_set_src(set, i)[0] == '/' && lstat(sh_spec_set_dst(set, i), &sb) != 0 &&
           errno == ENOENT;
}

/* Let go of the locks of images now linked (the producer's entry came). */
static void release_linked(const char *cache, const struct sh_spec_set *set)
{
    for (size_t i = 0; i < sh_spec_set_count(set); i++) {
        int k = held_index(sh_spec_set_src(set, i));

        if (k >= 0 && !wants_copy(cache, set, i))
            release_at(cache, (size_t)k);
    }
}

/* @job's node count: Slurm's, else 1 for a node list of one name (the job
 * prolog is given no count), else 0 (not known: taken for several). */
static uint32_t job_nodes(const struct sh_stage_job *job)
{
    const char *l = job->nodelist;

    if (job->nnodes != 0)
        return job->nnodes;
    return l != NULL && l[0] != '\0' && strpbrk(l, ",[") == NULL ? 1 : 0;
}

/* May @job wait for a producer @h? See the top of this file. */
static bool may_wait(const struct sh_config *cfg, const struct sh_stage_job *job,
                     const struct sh_cache_filler *h)
{
    if (cfg->on_node_fault == SH_FAULT_DRAIN)
        return false;
    if (job_nodes(job) == 1)
        return true;
    if (h->jobid == 0)
        return true; /* not recorded yet: decided at the next try */
    return h->nnodes == 1 || h->jobid < job->jobid;
}

/* Why @job copies without waiting for a busy lock (trylock's @r < 0: its
 * errno @e), for the log. */
static const char *why_not_waited(const struct sh_config *cfg, int r, int e)
{
    if (r < 0)
        return strerror(e);
    if (cfg->on_node_fault == SH_FAULT_DRAIN)
        return "on_node_fault=drain: no job waits for another's copy";
    return "a job of several nodes of a higher job id";
}

enum fill_wait { FILL_GOT, FILL_NOT_WAITED, FILL_BOUND, FILL_STOPPED };

/* Wait for @src's fill lock, busy now, until @deadline (sh_now_ns) or a
 * stop. FILL_GOT: held, its descriptor kept; FILL_NOT_WAITED: @job may not
 * wait for the holder, or the lock cannot be taken (@h: the holder). */
static enum fill_wait wait_fill(const struct sh_config *cfg, const struct sh_stage_job *job,
                                const char *src, int64_t deadline,
                                struct sh_cache_filler *h)
{
    const struct sh_cache_filler me = { job->jobid, job_nodes(job) };
    int64_t t0 = sh_now_ns();

    for (;;) {
        int64_t now = sh_now_ns(), nap = (now - t0) / 8;
        struct timespec ts;
        int fd = -1, r;

        if (sh_stage_process_stopped())
            return FILL_STOPPED;
        r = sh_cache_fill_trylock(cfg->cache, src, &me, &fd, h);
        if (r == 0) {
            keep(fd, src);
            return FILL_GOT;
        }
        if (r < 0 || !may_wait(cfg, job, h))
            return FILL_NOT_WAITED;
        if (now >= deadline)
            return FILL_BOUND;
        if (nap < SH_NS_PER_MS)
            nap = SH_NS_PER_MS;
        if (nap > FILL_NAP_MAX_NS)
            nap = FILL_NAP_MAX_NS;
        if (nap > deadline - now)
            nap = deadline - now;
        ts.tv_sec = (time_t)(nap / SH_NS_PER_S);
        ts.tv_nsec = (long)(nap % SH_NS_PER_S);
        (void)nanosleep(&ts, NULL); /* a stop (SIGTERM) ends it early */
    }
}

/* The order in which a staging takes its fill locks: by SRC. */
static size_t by_src(const struct sh_spec_set *set, size_t *order)
{
    size_t n = sh_spec_set_count(set);

    for (size_t i = 0; i < n; i++) {
        size_t j = i;

        while (j > 0 && strcmp(sh_spec_set_src(set, order[j - 1]), sh_spec_set_src(set, i)) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return n;
}

/* The wait's bound for @job (see the top of this file). */
static int64_t fill_bound(const struct sh_config *cfg, const struct sh_stage_job *job)
{
    int64_t bound = (int64_t)cfg->timeout_ns + SH_STAGING_GRACE_S * SH_NS_PER_S;

    if (job_nodes(job) != 1) {
        bound = (int64_t)cfg->timeout_ns;
        if ((int64_t)cfg->join_timeout_ns < bound)
            bound = (int64_t)cfg->join_timeout_ns;
        bound -= bound / 2 < FILL_JOIN_MARGIN_NS ? bound / 2 : FILL_JOIN_MARGIN_NS;
    }
    return bound;
}

int sh_cache_fill_claim(const struct sh_config *cfg, const struct sh_stage_job *job,
                        const struct sh_spec_set *set, char *err, size_t errlen)
{
    const struct sh_cache_filler me = { job->jobid, job_nodes(job) };
    bool own[SH_SPEC_MAX_IMAGES] = { false }; /* copied without the lock */
    size_t order[SH_SPEC_MAX_IMAGES], n = by_src(set, order);
    int64_t t0 = sh_now_ns(), bound = fill_bound(cfg, job), deadline = t0 + bound;

    for (;;) {
        struct sh_cache_filler h = { 0, 0 };
        const char *busy = NULL;
        size_t busy_i = 0;
        bool took = false;

        sh_cache_link_proven(cfg->cache, job, set);
        release_linked(cfg->cache, set);
        for (size_t o = 0; o < n && busy == NULL; o++) {
            size_t i = order[o];
            const char *src = sh_spec_set_src(set, i);
            int fd = -1, r;

            if (own[i] || !wants_copy(cfg->cache, set, i) || held_index(src) >= 0)
                continue;
            r = sh_cache_fill_trylock(cfg->cache, src, &me, &fd, &h);
            if (r == 0) {
                keep(fd, src);
                took = true;
            } else if (r < 0 || !may_wait(cfg, job, &h)) {
                own[i] = true;
                slurm_info("stagehand: job %u: %s: copied into the node image cache without "
                           "waiting for job %" PRIu64 "'s copy (%s)", job->jobid, src,
                           h.jobid, why_not_waited(cfg, r, errno));
            } else {
                busy = src;
                busy_i = i;
            }
        }
        if (busy == NULL) {
            /* a producer that ended between the proof and the lock */
            if (took) {
                sh_cache_link_proven(cfg->cache, job, set);
                release_linked(cfg->cache, set);
            }
            return 0;
        }
        /* never wait holding a fill lock */
        sh_cache_fill_release_all(cfg->cache);
        slurm_info("stagehand: job %u: %s: waiting for job %" PRIu64 "'s copy into the node "
                   "image cache (at most %.0f s more)", job->jobid, busy, h.jobid,
                   (double)(deadline - sh_now_ns()) / 1e9);
        switch (wait_fill(cfg, job, busy, deadline, &h)) {
        case FILL_GOT:
            slurm_info("stagehand: job %u: %s: the node image cache's fill is free after "
                       "%.1f s", job->jobid, busy, (double)(sh_now_ns() - t0) / 1e9);
            break;
        case FILL_NOT_WAITED:
            /* the loop's next proof links the entry if it came meanwhile */
            own[busy_i] = true;
            slurm_info("stagehand: job %u: %s: no longer waits for the node image cache's "
                       "fill, now job %" PRIu64 "'s (a job of several nodes of a higher job "
                       "id, or a lock that cannot be opened)", job->jobid, busy, h.jobid);
            break;
        case FILL_STOPPED:
            snprintf(err, errlen, "the job ended on this node before its staging did: "
                     "stopped while it waited for job %" PRIu64 "'s copy of %.1500s into the "
                     "node image cache", h.jobid, busy);
            return -1;
        case FILL_BOUND:
            if (job_nodes(job) != 1) {
                own[busy_i] = true;
                slurm_info("stagehand: job %u: %s: job %" PRIu64 " still copies it into the "
                           "node image cache after %.0f s: copied without it", job->jobid,
                           busy, h.jobid, (double)bound / 1e9);
                break;
            }
            snprintf(err, errlen, "%.1500s: job %" PRIu64 " was still copying it into the "
                     "node image cache of %.200s after this job waited %.0f s for it "
                     "(timeout= plus %d s): try again later", busy, h.jobid,
                     job->nodename, (double)bound / 1e9, SH_STAGING_GRACE_S);
            return -1;
        }
    }
}
