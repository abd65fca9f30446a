/* stagehand-agent --prolog: the engine's outcome. The leader (node 0, whose
 * engine rank 0 wrote the --json report) turns the report into the image's
 * summary line, its per-node failure reasons and the nodes at fault. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine_report.h"
#include "outcome.h"
#include "staging.h"
#include "stagehand/bcast.h"
#include "stagehand/log.h"
#include "stagehand/size.h"

int engine_report_load(const struct agent *a, size_t img, uint32_t npart,
                       struct sh_engine_report *r)
{
    char path[PATH_MAX], err[SH_STATUS_LINE_MAX];

    engine_report_path(a, img, path, sizeof(path));
    if (sh_engine_report_read(path, sh_bcast_report_max(npart), r, err, sizeof(err)) == 0)
        return 0;
    /* The engine ended before it wrote one (killed, or it failed to start):
     * its exit statuses tell the rest. Anything else is worth a line. */
    if (errno != ENOENT && errno != ENODATA)
        sh_error("stage", "%s", err);
    return -1;
}

/* One line per image from the engine's summary: "DST: 2 copied, 1 current of
 * 3 nodes; 1.00 GiB in 4.12 s (248.5 MiB/s)" (or, when every node turned out
 * current, "all 3 nodes current (staged by another run meanwhile), nothing
 * copied"), and, when the engine first waited for another run staging DST
 * (case F03), "; waited 9.8 s for job 57 on n1 staging it". @r NULL: no
 * report. */
void engine_summary(const struct sh_engine_report *r, const char *dst, uint32_t nnodes,
                    double secs, char *buf, size_t len)
{
    double copied, bytes;
    char size[32];
    int n;

    if (r == NULL) {
        snprintf(buf, len, "%s: staged on %u nodes in %.2f s", dst, nnodes, secs);
        return;
    }
    copied = (double)r->nodes_copied;
    bytes = (double)r->bytes_transferred;
    sh_format_size(r->bytes_transferred, size, sizeof(size));
    if (r->nodes_copied == 0)    /* another run staged it since the nodes voted */
        n = snprintf(buf, len, "%s: all %u nodes current (staged by another run "
                     "meanwhile), nothing copied (%.3f s)", dst, nnodes, secs);
    else
        n = snprintf(buf, len, "%s: %.0f copied, %.0f current of %u nodes; %s in %.2f s "
                     "(%.1f MiB/s)", dst, copied, (double)nnodes - copied, nnodes, size,
                     secs, secs > 0 ? bytes / secs / 1048576.0 : 0.0);
    if (r->lock_wait_s > 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; waited %.1f s for %.95s staging it",
                 r->lock_wait_s, r->lock_owner[0] != '\0' ? r->lock_owner : "another run");
}

/* Debug line with the engine's own phase clock (its "seconds"), so a site
 * at SlurmdDebug=debug sees where a staging's time went. */
void engine_phases_debug(const struct sh_engine_report *r)
{
    char line[256];
    size_t o = 0;

    for (int p = 0; p <= SH_PH_COUNT && o < sizeof(line); p++) {
        const char *name = p < SH_PH_COUNT ? sh_phase_name((enum sh_phase)p)
                                           : SH_BCAST_KEY_TOTAL;
        int n = snprintf(line + o, sizeof(line) - o, "%s%s %.3f", p ? ", " : "", name,
                         r->seconds[p]);

        if (n < 0)
            break;
        o += (size_t)n;
    }
    sh_debug("stage", "engine phases (s, reading rank): %s", line);
}

void reasons_add(struct reasons *r, const char *node, const char *text, size_t tlen)
{
    size_t i, used;

    for (i = 0; i < r->n; i++)
        if (strlen(r->text[i]) == tlen && strncmp(r->text[i], text, tlen) == 0)
            break;
    if (i == r->n) {
        if (r->n == REASONS_MAX) {
            r->more = true;
            return;
        }
        r->nodes[i][0] = '\0';
        snprintf(r->text[i], sizeof(r->text[i]), "%.*s", (int)tlen, text);
        r->n++;
    }
    used = strlen(r->nodes[i]);
    if (used + strlen(node) + 8 < sizeof(r->nodes[i]))
        snprintf(r->nodes[i] + used, sizeof(r->nodes[i]) - used, "%s%s",
                 used > 0 ? ", " : "", node);
    else if (used < 4 || strcmp(r->nodes[i] + used - 4, " ...") != 0)
        snprintf(r->nodes[i] + used, sizeof(r->nodes[i]) - used, " ...");
}

/* "nodes: text; nodes: text" into @buf; returns the length. */
size_t reasons_format(const struct reasons *r, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < r->n && o + 1 < len; i++) {
        int n = snprintf(buf + o, len - o, "%s%s: %s", o > 0 ? "; " : "", r->nodes[i],
                         r->text[i]);
        if (n < 0)
            break;
        o = o + (size_t)n < len ? o + (size_t)n : len - 1;
    }
    if (r->more && o + 1 < len) {
        int n = snprintf(buf + o, len - o, "; and other errors (see the slurmd logs)");
        if (n > 0)
            o = o + (size_t)n < len ? o + (size_t)n : len - 1;
    }
    return o;
}

/* Did the node of @nd only stop because another failed? */
static bool only_not_copied(const struct sh_engine_node *nd)
{
    return strncmp(nd->error, SH_BCAST_NOT_COPIED, strlen(SH_BCAST_NOT_COPIED)) == 0;
}

/* "n2: publish: No space left on device; n3: ..." from the engine's per-node
 * results, into @buf (empty when no node reported an error). */
void engine_failures(const struct sh_engine_report *rep, char *buf, size_t len)
{
    static struct reasons r;

    memset(&r, 0, sizeof(r));
    buf[0] = '\0';
    /* Pass 0 leaves out nodes that only stopped because another failed ("not
     * copied: another node failed ..."); pass 1, only when no node said why,
     * names them too. */
    for (int pass = 0; pass < 2 && r.n == 0; pass++) {
        for (size_t i = 0; i < rep->nnodes; i++) {
            const struct sh_engine_node *nd = &rep->nodes[i];
            char text[640];
            int n;

            if (nd->error[0] == '\0' || (pass == 0 && only_not_copied(nd)))
                continue;
            n = snprintf(text, sizeof(text), "%.63s%s%.511s", nd->phase,
                         nd->phase[0] != '\0' ? ": " : "", nd->error);
            if (n > 0)
                reasons_add(&r, nd->node, text, strlen(text));
        }
    }
    if (reasons_format(&r, buf, len) == 0 && rep->source_error[0] != '\0')
        snprintf(buf, len, "%.511s", rep->source_error);
}

/* Leader: the participants whose own failure in the engine's summary is a
 * node fault (class DEST with a node-fault errno: a source error or a
 * corrupted stream is never the receiving node's, a full filesystem or
 * memory pressure neither), as node indices "i,j" in @buf ("" for none);
 * the latter are logged as errors naming the node (@names: every node's
 * name by index). Engine rank r is participant @part[r]. */
void engine_node_faults(const struct sh_engine_report *rep, const uint32_t *part,
                        uint32_t npart, char *const *names, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < rep->nnodes; i++) {
        const struct sh_engine_node *nd = &rep->nodes[i];
        bool ours = nd->rank >= 0 && (uint64_t)nd->rank < npart;

        if (nd->error[0] != '\0' && nd->exit_class == SH_EXIT_DEST &&
            resource_errno(nd->err) && ours)
            sh_error("stage", "node %s: %s: %.511s (the job's error, not a node fault: a "
                     "user's files may fill DST's filesystem, or its memory under tmpfs)",
                     names[part[nd->rank]], nd->err == ENOMEM ? "out of memory" :
                     "DST's filesystem is full", nd->error);
        if (nd->error[0] == '\0' || only_not_copied(nd) || nd->exit_class != SH_EXIT_DEST ||
            !node_fault_errno(nd->err) || !ours)
            continue;
        if (o + 12 >= len) {
            sh_warn("stage", "more nodes at fault than one message lists: only the "
                    "first ones are reported as node faults");
            break;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s%u", o > 0 ? "," : "", part[nd->rank]);
    }
}
