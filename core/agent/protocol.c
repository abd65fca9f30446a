/* stagehand-agent --prolog: the per-image protocol, on every node of the
 * job's control tree (stage_image_run). In steps, each one round of the
 * tree:
 *   1. source: every node leaves its marker in DST's directory while the
 *      leader checks SRC as the user; one allgather gives everyone SRC's
 *      identity;
 *   2. votes: every node says whether its DST is current, needs a copy, is
 *      shared or cannot be written, and why;
 *   3. plan: the leader (node 0, the reader) names the participants, or
 *      says nothing needs copying, or why the image fails;
 *   4. engine: the participants run the engine (launch.c), check the
 *      digest of the new copy (dst.c), and report;
 *   5. outcome: the leader merges the reports with the engine's
 *      (outcome.c) and every node learns the image's outcome. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#include "image_run.h"
#include "import.h"
#include "outcome.h"
#include "staging.h"
#include "stagehand/bcast.h"
#include "stagehand/cache.h"
#include "stagehand/clock.h"
#include "stagehand/local.h"
#include "stagehand/log.h"
#include "stagehand/meta.h"
#include "stagehand/size.h"


static void marker_drop(const struct agent *a, struct image_run *r)
{
    if (r->made)
        marker_remove(a, r->img, r->mdir);
    r->made = false;
}

/* Is node @index in the comma-separated list @list? */
static bool in_index_list(const char *list, uint32_t index)
{
    for (const char *p = list; *p != '\0';) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);

        if (end == p)
            return false;
        if (v == index)
            return true;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',')
            break;
    }
    return false;
}

/* 1. every node leaves its marker in DST's directory (F02) while the
 * leader checks SRC as the user; one allgather then gives everyone SRC's
 * identity (the leader's entry) and proves every marker exists. One
 * round trip of the tree instead of a broadcast and an allgather: the
 * no-op path is on every job's start (issue 5). Returns 0, or -1 after
 * set_failure(). */
static int step_source(struct agent *a, struct image_run *r)
{
    struct sh_ctl_result first;
    char err[SH_STATUS_LINE_MAX];
    int bad;

    sh_nearest_dir(r->dst, r->mdir, sizeof(r->mdir));
    r->made = marker_create(a, r->img, r->mdir) == 0;
    if (a->index == 0 && r->image) {
        /* A registry image: its identity is the reference pinned to the
         * manifest digest the resolver names; only node 0 asks. */
        int ok = sh_import_resolve(&a->cfg, a->in.user, r->src, a->deadline, &r->ref, err,
                                   sizeof(err)) == 0;

        memset(&r->id, 0, sizeof(r->id));
        r->id.mode = 0644;
        r->id.gid = (uint32_t)-1;
        if (ok)
            sh_ref_format(&r->ref, r->id.path, sizeof(r->id.path));
        r->len = sh_src_encode(r->buf, sizeof(r->buf), ok, &r->id, err);
        if (ok && (size_t)r->len + strlen(r->id.path) + 2 < sizeof(r->buf))
            r->len += snprintf(r->buf + r->len, sizeof(r->buf) - (size_t)r->len, "\n%s",
                               r->id.path);
    } else if (a->index == 0) {
        int ok = sh_src_probe(r->src, &r->id, err, sizeof(err)) == 0;
        r->len = sh_src_encode(r->buf, sizeof(r->buf), ok, &r->id, err);
    } else {
        r->len = 0;
    }
    memset(&first, 0, sizeof(first));
    if (sh_ctl_allgather(a->ctl, TAG_SRC, r->buf, (uint32_t)r->len, a->deadline,
                         &first) != 0) {
        marker_drop(a, r);
        set_failure(a, false, "lost the control plane (source metadata): %s",
                    strerror(errno));
        return -1;
    }
    if (first.nnodes == 0 || first.entry[0].state != SH_CTL_OK) {
        snprintf(err, sizeof(err), "no source metadata from the leader node %s",
                 sh_ctl_name(a->ctl, 0));
        bad = 1;
    } else {
        char why[SH_STATUS_LINE_MAX / 2];

        /* The reader's finding, named by image and node as every node-side
         * failure is: "image /nvme/x: n1: source /x: No such file or
         * directory". */
        bad = sh_src_decode(first.entry[0].data, first.entry[0].len, r->src, &r->id, why,
                            sizeof(why)) != 0;
        if (!bad && r->image)
            bad = image_pinned_from(&first.entry[0], r, why, sizeof(why)) != 0;
        if (bad)
            snprintf(err, sizeof(err), "image %.1000s: %s: %s", r->dst, sh_ctl_name(a->ctl, 0),
                     why);
    }
    sh_ctl_result_free(&first);
    if (bad) {
        marker_drop(a, r);
        set_failure(a, false, "%s", err);
        return -1;
    }
    r->clen = sh_claim_text(r->dst, &r->id, r->claim, sizeof(r->claim));
    claim_write(a, r->img, r->dst, r->claim, r->clen);
    return 0;
}

/* 2. this node's vote; first, is DST's directory shared between nodes
 * (F01: a network filesystem; F02: another node's marker is visible)? The
 * reason into @why. */
static enum sh_vote local_vote(struct agent *a, const struct image_run *r, char *why,
                               size_t whylen)
{
    const char *dir = r->mdir, *dst = r->dst;
    struct statfs fs;
    char who[256], their[PATH_MAX];
    const char *fsname = NULL;
    struct stat dsb;
    enum sh_vote v;

    if (statfs(dir, &fs) == 0)
        fsname = sh_shared_fs_name((long)fs.f_type);
    who[0] = '\0';
    if (a->dflt_error[0] != '\0' && strncmp(dst, a->dflt, strlen(a->dflt)) == 0 &&
        dst[strlen(a->dflt)] == '/') {
        snprintf(why, whylen, "%.1500s", a->dflt_error);
        return SH_VOTE_ERROR; /* make_default_dir: a user's object */
    }
    /* The plugin's cache pre-check: this node's cache images cannot fit
     * (a user's failure); a cache image linked already is not refused. */
    if (a->in.refuse[0] != '\0' && a->cfg.cache[0] != '\0' &&
        sh_cache_dst_kind(a->cfg.cache, dst, NULL) == SH_CACHE_DST_JOB &&
        lstat(dst, &dsb) != 0) {
        snprintf(why, whylen, "%.1500s", a->in.refuse);
        return SH_VOTE_ERROR;
    }
    if (fsname != NULL || marker_foreign(a, r->img, dir, who, sizeof(who))) {
        if (fsname != NULL)
            snprintf(why, whylen, "%.180s is on a %s filesystem", dir, fsname);
        else
            snprintf(why, whylen, "%.150s is shared with node %.40s (its "
                     "marker file is visible here)", dir, who);
        return SH_VOTE_SHARED;
    }
    v = sh_dest_vote(&a->cfg, a->in.uid, dst, &r->id, (mode_t)a->in.umask_bits, why, whylen);
    /* The plugin found DST current for SRC as this node saw it and
     * the job runs on it: this node's copy is not replaced. SRC as
     * the leader saw it differs (it changed in between): fail the
     * image rather than give the nodes different content. */
    if (a->in.detached && v == SH_VOTE_NEED) {
        v = SH_VOTE_ERROR;
        snprintf(why, whylen, "%.400s changed while the job started: this "
                 "node's job runs on the copy that matched it before", r->src);
    }
    /* Also when DST is current: a job with another claim may be
     * about to replace it (both claims are written before either is
     * looked for, so at least one of two such jobs sees the other). */
    if ((v == SH_VOTE_NEED || v == SH_VOTE_CURRENT) && r->clen > 0 &&
        sh_claim_conflict(SH_RUNTIME_DIR, a->in.jobid, dst, r->claim, who,
                          sizeof(who), their, sizeof(their))) {
        v = SH_VOTE_ERROR;
        snprintf(why, whylen, "%.400s is in use by job %.32s, which staged "
                 "it from %.400s (another source, or the same one before it "
                 "changed): replacing it would change that job's image; stage to "
                 "another destination, or wait until job %.32s ends", dst, who,
                 their, who);
    }
    return v;
}

/* Leader: "fail <nodes: reasons>" into @r->buf when a node cannot take the
 * copy (sh_dest_vote: DST's place) or its DST is shared; returns whether. */
static bool plan_refusals(const struct agent *a, const struct sh_ctl_result *votes,
                          struct image_run *r)
{
    static struct reasons rs;
    bool shared = false;

    memset(&rs, 0, sizeof(rs));
    for (uint32_t i = 0; i < votes->nnodes; i++) {
        const struct sh_ctl_entry *e = &votes->entry[i];

        if (e->state == SH_CTL_OK && e->len > 2 &&
            (e->data[0] - '0' == SH_VOTE_ERROR ||
             (e->data[0] - '0' == SH_VOTE_SHARED && !a->cfg.allow_shared_dst)))
            reasons_add(&rs, sh_ctl_name(a->ctl, i), (const char *)e->data + 2, e->len - 2);
    }
    if (rs.n == 0)
        return false;
    for (uint32_t i = 0; i < votes->nnodes; i++)
        shared = shared || (votes->entry[i].state == SH_CTL_OK && votes->entry[i].len > 0 &&
                            votes->entry[i].data[0] - '0' == SH_VOTE_SHARED);
    memcpy(r->buf, "fail ", 5);
    r->len = (int)(5 + reasons_format(&rs, r->buf + 5, sizeof(r->buf) - 5));
    if (shared && (size_t)r->len < sizeof(r->buf) - 1)
        r->len += snprintf(r->buf + r->len, sizeof(r->buf) - (size_t)r->len,
                           " (a shared destination would be written by every node "
                           "at once: stage to node-local storage; the site can set "
                           "allow_shared_dst=yes)");
    if (r->len >= (int)sizeof(r->buf))
        r->len = (int)sizeof(r->buf) - 1;
    return true;
}

/* Leader: "plan i j ...": every participant's index (node 0 reads), into
 * *@planbuf (malloc'ed: the list grows with N), or "noop" into @r->buf when
 * no node needs a copy. With allow_shared_dst, a shared destination is node
 * 0's copy. */
static void plan_participants(const struct sh_ctl_result *votes, struct image_run *r,
                              char **planbuf)
{
    size_t cap = 16 + 11 * (size_t)votes->nnodes, o;
    uint32_t needs = 0;

    *planbuf = malloc(cap);
    if (*planbuf == NULL) {
        r->len = snprintf(r->buf, sizeof(r->buf), "fail out of memory on the leader");
        return;
    }
    o = (size_t)snprintf(*planbuf, cap, "plan");
    for (uint32_t i = 0; i < votes->nnodes; i++) {
        int vv = votes->entry[i].len > 0 ? votes->entry[i].data[0] - '0' : SH_VOTE_NEED;
        if (vv == SH_VOTE_NEED || (vv == SH_VOTE_SHARED && i == 0))
            needs++;
        if (i == 0 || vv == SH_VOTE_NEED)
            o += (size_t)snprintf(*planbuf + o, cap - o, " %u", i);
    }
    if (needs == 0) {
        free(*planbuf);
        *planbuf = NULL;
        r->len = snprintf(r->buf, sizeof(r->buf), "noop");
    } else {
        r->len = (int)o;
    }
}

/* The leader's failure text "fail NODES did not answer..." for the nodes
 * @missing names in @votes, with the likely cause: no other node of a job's
 * prolog ever came (the prolog runs on the batch node only: design.md §2
 * step 8), or a node whose agent did not join within join_timeout. Returns
 * snprintf's length. */
static int missing_text(const struct agent *a, const struct sh_ctl_result *votes,
                        const char *missing, char *buf, size_t len)
{
    if (a->in.stepid == STEP_JOB && a->nnodes > 1 && votes->nmissing == a->nnodes - 1)
        return snprintf(buf, len, "fail %s (is PrologFlags=Alloc set in slurm.conf? without "
                        "it the job prolog runs on the batch node only)", missing);
    if (strstr(missing, " did not answer") == NULL)
        return snprintf(buf, len, "fail %s", missing);
    return snprintf(buf, len, "fail %s (a node's agent that does not join within "
                    "join_timeout=%.0fs is left out: its prolog did not start stagehand "
                    "there, or the node is frozen or unreachable)", missing,
                    (double)a->cfg.join_timeout_ns / 1e9);
}

/* 2.-3. every node votes; the leader plans: node 0 reads, nodes that need a
 * copy receive; the plan reaches every node. Returns the plan's text
 * (malloc'ed), or NULL after set_failure(). */
static char *step_vote_plan(struct agent *a, struct image_run *r)
{
    struct sh_ctl_result votes;
    char why[1536], *planbuf = NULL, *text;
    unsigned char *plan = NULL;
    uint32_t plen = 0;
    enum sh_vote v = local_vote(a, r, why, sizeof(why));
    int rc_plan;

    r->len = snprintf(r->buf, sizeof(r->buf), "%d %s", (int)v, why);
    if (r->image && v == SH_VOTE_NEED && r->len > 0 && (size_t)r->len < sizeof(r->buf) - 24)
        r->len += snprintf(r->buf + r->len, sizeof(r->buf) - (size_t)r->len, "\n%llu",
                           (unsigned long long)image_dir_free_bytes(r->mdir));
    memset(&votes, 0, sizeof(votes));
    if (sh_ctl_gather(a->ctl, TAG_VOTE, r->buf, (uint32_t)r->len, a->deadline, &votes) != 0) {
        marker_drop(a, r);
        set_failure(a, false, "lost the control plane (votes): %s", strerror(errno));
        return NULL;
    }
    if (a->index == 0) {
        char missing[512];

        /* A node that cannot take the copy fails the image, naming the node
         * and the reason (plan_refusals). */
        if (!plan_refusals(a, &votes, r)) {
            if (sh_ctl_format_missing(a->ctl, &votes, missing, sizeof(missing)) > 0)
                r->len = missing_text(a, &votes, missing, r->buf, sizeof(r->buf));
            else
                plan_participants(&votes, r, &planbuf);
            if (planbuf != NULL && r->image && image_plan_import(a, r, &votes) != 0) {
                free(planbuf);
                planbuf = NULL;
            }
        }
        sh_ctl_result_free(&votes);
    } else {
        r->len = 0;
    }
    rc_plan = sh_ctl_bcast(a->ctl, planbuf != NULL ? planbuf : r->buf, (uint32_t)r->len,
                           &plan, &plen, a->deadline);
    free(planbuf);
    /* The root sends the plan only after every vote came in, so every node
     * has looked for markers by now. */
    marker_drop(a, r);
    if (rc_plan != 0) {
        set_failure(a, false, "lost the control plane (plan): %s", strerror(errno));
        return NULL;
    }
    text = malloc((size_t)plen + 1);
    if (text == NULL) {
        free(plan);
        set_failure(a, false, "out of memory on %s", a->in.nodename); /* not a node fault */
        return NULL;
    }
    memcpy(text, plan, plen);
    text[plen] = '\0';
    free(plan);
    return text;
}

/* Act on the plan @text: returns 1 when the image is done here (it failed,
 * or every node is current), 0 with the participants in @r, or -1 after
 * set_failure(). */
static int plan_apply(struct agent *a, struct image_run *r, char *text)
{
    if (strncmp(text, "fail ", 5) == 0) {
        set_failure(a, false, "image %s: %.900s", r->dst, text + 5);
        return 1;
    }
    if (strcmp(text, "noop") == 0) {
        snprintf(r->buf, sizeof(r->buf), "%s: all %u nodes current, nothing copied (%.3f s)",
                 r->dst, a->nnodes, (double)(sh_now_ns() - r->t0) / 1e9);
        sh_kv_put(a->out, SH_AGENT_OUT_SUMMARY, r->buf);
        sh_info("stage", "%s", r->buf);
        return 1;
    }
    r->part = calloc(a->nnodes, sizeof(*r->part));
    if (r->part == NULL) {
        set_failure(a, false, "out of memory on %s", a->in.nodename); /* not a node fault */
        return -1;
    }
    for (char *tok = strtok(text + 4, " "); tok != NULL; tok = strtok(NULL, " ")) {
        uint64_t x;
        if (sh_parse_u64(tok, &x) == 0 && x < a->nnodes && r->npart < a->nnodes) {
            if ((uint32_t)x == a->index)
                r->mypos = r->npart;
            r->part[r->npart++] = (uint32_t)x;
        }
    }
    return 0;
}

/* 4. participants run the engine; then every node checks the digest of its
 * new copy. A failure travels as "fail <node>: <reason>", or as "failo
 * <outcome>" when it is only the engines' exit statuses (the same text on
 * every participant, naming every node): the leader then keeps the reader's
 * per-node causes from the engine's summary and drops those. Returns 0, or
 * -1 after set_failure(). */
static int step_engine(struct agent *a, struct image_run *r)
{
    char err[SH_STATUS_LINE_MAX] = "";
    int64_t engine_start = (int64_t)time(NULL) - 1;
    struct engine_repair rp;
    bool outcome = false;
    int rc = 0;

    memset(&rp, 0, sizeof(rp));
    if (r->image) {
        /* node 0 reads its import; every node records the pinned reference */
        snprintf(a->engine_src, sizeof(a->engine_src), "%s",
                 r->imported ? r->imgfile : r->dst);
        snprintf(a->engine_src_name, sizeof(a->engine_src_name), "%s", r->id.path);
    }
    if (r->mypos != UINT32_MAX)
        rc = run_engine(a, r->img, r->part, r->npart, r->mypos, &outcome, &rp, err,
                        sizeof(err));
    a->engine_src[0] = a->engine_src_name[0] = '\0';
    if (rp.repaired) {
        /* the second run's participants from here on (its report, faults) */
        free(r->part);
        r->part = rp.part;
        r->npart = rp.npart;
        r->mypos = rp.mypos;
    }
    /* rank 0 writes the report, so only node 0 (part[0]) has it */
    if (a->index == 0 && r->mypos != UINT32_MAX)
        r->have_rep = engine_report_load(a, r->img, r->npart, &r->rep) == 0;
    if (rc != 0) {
        char reason[SH_STATUS_LINE_MAX / 2];

        sweep_own_temps(a, r->dst);

        reason[0] = '\0';
        if (r->have_rep) {
            engine_failures(&r->rep, reason, sizeof(reason));
            engine_node_faults(&r->rep, r->part, r->npart, a->names, r->faulty,
                               sizeof(r->faulty));
        }
        if (rp.repaired && a->index == 0)
            /* the dead nodes first, then why the copy around them failed */
            r->len = snprintf(r->buf, sizeof(r->buf), "fail %s; then, copying again "
                              "without %s: %.900s", rp.lost,
                              strchr(rp.lost, ';') != NULL ? "them" : "it",
                              reason[0] != '\0' ? reason : err);
        else if (reason[0] != '\0')
            r->len = snprintf(r->buf, sizeof(r->buf), "fail %s", reason);
        else if (outcome)
            r->len = snprintf(r->buf, sizeof(r->buf), "failo %.400s", err);
        else
            r->len = snprintf(r->buf, sizeof(r->buf), "fail %s: %.400s", a->in.nodename, err);
        r->leader_cause = a->index == 0 && (reason[0] != '\0' || rp.repaired);
        /* The source changed, vanished or became unreadable after submit:
         * the user's error, not the node's (doc/design.md §5), even though the
         * engine found it. */
        r->source_fault = r->leader_cause && r->rep.exit_code == SH_EXIT_SOURCE;
    } else if (rp.repaired && a->index == 0) {
        /* The copy went on around the dead nodes: every other node has its
         * verified copy, and the image still fails, naming them (the
         * dead nodes' own "failo" results say the same and are dropped). */
        r->len = snprintf(r->buf, sizeof(r->buf), "fail %s; the copy went on without %s: "
                          "the other %u node%s of the copy verified and published %s",
                          rp.lost, strchr(rp.lost, ';') != NULL ? "them" : "it", r->npart,
                          r->npart == 1 ? "" : "s", r->npart == 1 ? "its copy"
                          : "their copies");
        r->leader_cause = true;
        r->copied = true;
    } else {
        r->len = snprintf(r->buf, sizeof(r->buf), "ok");
        r->copied = r->mypos != UINT32_MAX;
    }
    return verify_copy_digest(a, r->dst, r->have_rep ? r->rep.digest : NULL, r->copied,
                              engine_start, r->buf, sizeof(r->buf), &r->len, r->ref_digest);
}

/* Leader: every node's "fail ..." report once, and the nodes that never
 * reported, into @buf as "fail <text>"; returns its length. *@others: a node
 * other than the leader failed. */
static size_t results_failures(const struct agent *a, const struct sh_ctl_result *res,
                               const struct image_run *r, char *buf, size_t len,
                               bool *others)
{
    char missing[512];
    size_t o = 0;

    buf[0] = '\0';
    *others = false;
    for (uint32_t i = 0; i < res->nnodes; i++) {
        const struct sh_ctl_entry *e = &res->entry[i];
        size_t skip;
        bool dup = false;

        if (e->state != SH_CTL_OK || e->len < 5 || memcmp(e->data, "fail", 4) != 0 ||
            o >= len - 2)
            continue;
        if (e->data[4] == 'o' && r->leader_cause)
            continue;
        skip = e->data[4] == 'o' ? 6 : 5;
        if (e->len < skip)
            continue;
        /* the same text from several nodes once */
        for (uint32_t j = 0; j < i && !dup; j++)
            dup = res->entry[j].state == SH_CTL_OK && res->entry[j].len == e->len &&
                  memcmp(res->entry[j].data, e->data, e->len) == 0;
        if (dup)
            continue;
        *others = *others || i != 0;
        o += (size_t)snprintf(buf + o, len - o, "%s%.*s", o > 0 ? "; " : "fail ",
                              (int)(e->len - skip), (const char *)e->data + skip);
    }
    if (sh_ctl_format_missing(a->ctl, res, missing, sizeof(missing)) > 0 && o < len - 2) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", o > 0 ? "; " : "fail ", missing);
        *others = true;
    }
    return o;
}

/* Leader: the image's outcome from every node's result @res, into @r->buf:
 * "ok <summary>", "failu <text>" (only the source failed: a user error), or
 * "failx <nodes at fault> <text>" (every node learns whether it is one of
 * them: on_node_fault=drain drains only those). */
static void results_merge(const struct agent *a, const struct sh_ctl_result *res,
                          struct image_run *r)
{
    char *buf = r->buf;
    bool others = false;
    size_t o = results_failures(a, res, r, buf, sizeof(r->buf), &others);

    if (o > 4 && r->source_fault && !others && r->faulty[0] == '\0' &&
        o + 1 < sizeof(r->buf)) {
        memmove(buf + 5, buf + 4, o - 3);
        buf[4] = 'u';
        o++;
    }
    if (o > 5 && memcmp(buf, "fail ", 5) == 0) {
        char head[sizeof(r->faulty) + 8];
        size_t hn = (size_t)snprintf(head, sizeof(head), "failx %s ",
                                     r->faulty[0] != '\0' ? r->faulty : "-");
        size_t rest = strlen(buf + 5);

        if (hn + rest >= sizeof(r->buf))
            rest = sizeof(r->buf) - 1 - hn;
        memmove(buf + hn, buf + 5, rest);
        memcpy(buf, head, hn);
        buf[hn + rest] = '\0';
        o = hn + rest;
    }
    if (o == 0) {
        char summary[512];

        if (r->have_rep)
            engine_phases_debug(&r->rep);
        engine_summary(r->have_rep ? &r->rep : NULL, r->dst, a->nnodes,
                       (double)(sh_now_ns() - r->t0) / 1e9, summary, sizeof(summary));
        o = (size_t)snprintf(buf, sizeof(r->buf), "ok %s", summary);
    }
    r->len = (int)(o < sizeof(r->buf) ? o : sizeof(r->buf) - 1);
}

/* A new copy of this node's for the node image cache: the reader's digest
 * and the source's identity go to the plugin, whose stagehand-cache adopts
 * the copy only if its own digest of it is this one (stagehand/cache.h). */
static void cache_report(struct agent *a, const struct image_run *r)
{
    char id[SH_STATUS_LINE_MAX];

    if (!r->copied || r->ref_digest[0] == '\0' || a->cfg.cache[0] == '\0' ||
        sh_cache_dst_kind(a->cfg.cache, r->dst, NULL) != SH_CACHE_DST_JOB)
        return;
    sh_src_encode(id, sizeof(id), 1, &r->id, NULL);
    /* a registry image's source is the reference pinned to its digest (its
     * identity, r->id.path), after the identity: the entry's record names it */
    sh_kv_putf(a->out, SH_AGENT_OUT_CACHE, "%zu %s %s%s%s", r->img, r->ref_digest, id,
               r->image ? " " : "", r->image ? r->id.path : "");
}

/* This node's share of the image's outcome @text (the leader's). */
static void outcome_apply(struct agent *a, const struct image_run *r, char *text)
{
    if (strncmp(text, "ok ", 3) == 0) {
        sh_kv_put(a->out, SH_AGENT_OUT_SUMMARY, text + 3);
        sh_info("stage", "%s", text + 3);
        cache_report(a, r);
    } else if (strncmp(text, "failu ", 6) == 0) {
        set_failure(a, a->own_fault, "image %s: %s", r->dst, text + 6);
    } else if (strncmp(text, "failx ", 6) == 0) {
        char *list = text + 6, *sp = strchr(list, ' ');
        bool mine = a->own_fault;

        if (sp != NULL) {
            *sp = '\0';
            mine = mine || in_index_list(list, a->index);
        }
        set_failure(a, mine, "image %s: %s", r->dst, sp != NULL ? sp + 1 : list);
        /* a node not at fault whose copy was verified (the copy went on
         * around a dead node) keeps it: DST is published, and for the node
         * image cache it is reported for adoption like a success's */
        if (!mine)
            cache_report(a, r);
    } else {
        set_failure(a, a->own_fault, "image %s: %s", r->dst,
                    strncmp(text, "fail ", 5) == 0 ? text + 5 : text);
    }
}

/* 5. every node's result to the leader, which merges them; its outcome to
 * every node. */
static void step_outcome(struct agent *a, struct image_run *r)
{
    struct sh_ctl_result res;
    unsigned char *fin = NULL;
    uint32_t flen = 0;
    char text[SH_STATUS_LINE_MAX];
    size_t n;

    memset(&res, 0, sizeof(res));
    if (sh_ctl_gather(a->ctl, TAG_RESULT, r->buf, (uint32_t)r->len, a->deadline, &res) != 0) {
        set_failure(a, false, "lost the control plane (results): %s", strerror(errno));
        return;
    }
    if (a->index == 0) {
        results_merge(a, &res, r);
        sh_ctl_result_free(&res);
    } else {
        r->len = 0;
    }
    if (sh_ctl_bcast(a->ctl, r->buf, (uint32_t)r->len, &fin, &flen, a->deadline) != 0) {
        set_failure(a, false, "lost the control plane (outcome): %s", strerror(errno));
        return;
    }
    n = flen < sizeof(text) - 1 ? flen : sizeof(text) - 1;
    memcpy(text, fin, n);
    text[n] = '\0';
    free(fin);
    outcome_apply(a, r, text);
}

void stage_image_run(struct agent *a, size_t img)
{
    static struct image_run r;
    char *plan;
    int rc;

    memset(&r, 0, sizeof(r));
    r.img = img;
    r.src = sh_spec_set_src(a->specs, img);
    r.dst = sh_spec_set_dst(a->specs, img);
    r.mypos = UINT32_MAX;
    r.t0 = sh_now_ns();
    r.image = sh_ref_is_image(r.src);
    if (step_source(a, &r) != 0)
        return;
    plan = step_vote_plan(a, &r);
    if (plan == NULL)
        return;
    rc = plan_apply(a, &r, plan);
    free(plan);
    if (rc == 0 && step_engine(a, &r) == 0)
        step_outcome(a, &r);
    if (r.imported && sh_import_release(r.workdir) != 0)
        sh_warn("import", "cannot remove %s: %s", r.workdir, strerror(errno));
    free(r.part);
    if (r.have_rep)
        sh_engine_report_free(&r.rep);
}
