/* stagehand-bcast: votes and results between the writers, and the summary and --json report
 * (report.h, stagehand/bcast.h). */
#include "config.h"
#include "report.h"

#include <stdarg.h>
#include <string.h>

#include "segment.h"
#include "stagehand/size.h"

void sh_msgf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static const char *status_name(int32_t status)
{
    switch (status) {
    case SH_NODE_COPIED: return "copied";
    case SH_NODE_CURRENT:
    case SH_NODE_READER: return "current";
    case SH_NODE_FAILED: return "failed";
    case SH_NODE_ABORTED: return "not-copied";
    }
    return "?";
}

static void count(const struct sh_report *r, int *copied, int *current,
                  int *failed, int *aborted)
{
    *copied = *current = *failed = *aborted = 0;
    for (int i = 0; r->results != NULL && i < r->nodes; i++) {
        switch (r->results[i].status) {
        case SH_NODE_COPIED: (*copied)++; break;
        case SH_NODE_FAILED: (*failed)++; break;
        case SH_NODE_ABORTED: (*aborted)++; break;
        default: (*current)++; break;
        }
    }
}

static double rate(const struct sh_report *r)
{
    return r->total_s > 0 ? (double)r->bytes_transferred / r->total_s : 0.0;
}

void sh_report_text(const struct sh_report *r, FILE *out)
{
    char sz[32], rt[32], seg[32], hex[SH_HASH_HEX_LEN];
    int copied, current, failed, aborted;

    count(r, &copied, &current, &failed, &aborted);
    sh_format_size(r->size, sz, sizeof(sz));
    fprintf(out, "stagehand-bcast: %s -> %s: %s\n", r->opts->source,
            r->opts->dest, r->exit_code == 0 ? "ok" : "FAILED");
    if (!r->src_ok) {
        fprintf(out, "  source error: %s\n", r->src_error);
    } else {
        fprintf(out, "  %s to %d node(s): %d copied, %d already current, "
                "%d failed", sz, r->nodes, copied, current, failed);
        if (aborted > 0)
            fprintf(out, ", %d not copied because of those failures", aborted);
        fputc('\n', out);
    }
    fprintf(out, "  time:");
    for (int p = 0; p < SH_PH_COUNT; p++)
        fprintf(out, " %s %.3fs", sh_phase_name((enum sh_phase)p), r->phase_s[p]);
    fprintf(out, " = total %.3fs\n", r->total_s);
    if (r->lock_wait_s > 0) {
        fprintf(out, "  waited %.1fs for another run staging %s", r->lock_wait_s,
                r->opts->dest);
        if (r->lock_owner != NULL && r->lock_owner[0] != '\0')
            fprintf(out, " (%s)", r->lock_owner);
        fputc('\n', out);
    }
    sh_format_size((uint64_t)rate(r), rt, sizeof(rt));
    sh_format_size(r->opts->segment, seg, sizeof(seg));
    fprintf(out, "  effective rate %s/s (bytes transferred / wall time); "
            "algorithm %s, segment %s, depth %u, %s", rt,
            sh_algorithm_name(r->opts->algorithm), seg, r->opts->depth,
            sh_hash_name(r->opts->hash));
    if (r->digest_len > 0)
        fprintf(out, " %s", sh_hash_hex(r->digest, (size_t)r->digest_len, hex));
    fputc('\n', out);
    for (int i = 0; r->results != NULL && i < r->nodes; i++) {
        const struct sh_node_result *n = &r->results[i];

        if (n->status == SH_NODE_FAILED)
            fprintf(out, "  FAILED on %s (rank %d) in %s: %s\n", n->host,
                    n->world_rank, n->phase, n->reason);
    }
}

void sh_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void sh_report_json(const struct sh_report *r, FILE *out)
{
    char hex[SH_HASH_HEX_LEN] = "";
    int copied, current, failed, aborted;

    count(r, &copied, &current, &failed, &aborted);
    if (r->digest_len > 0)
        sh_hash_hex(r->digest, (size_t)r->digest_len, hex);
    /* keys: stagehand/bcast.h */
#define K(k) "\"" k "\":"
    fprintf(out, "{" K(SH_BCAST_KEY_FORMAT) "%d," K(SH_BCAST_KEY_STATUS) "\"%s\","
            K(SH_BCAST_KEY_EXIT_CODE) "%d,", SH_BCAST_REPORT_FORMAT,
            r->exit_code == 0 ? "ok" : "failed", r->exit_code);
    fputs(K(SH_BCAST_KEY_SOURCE), out);
    sh_json_string(out, r->opts->source);
    fputs("," K(SH_BCAST_KEY_DEST), out);
    sh_json_string(out, r->opts->dest);
    fprintf(out, "," K(SH_BCAST_KEY_SIZE) "%llu," K(SH_BCAST_KEY_SOURCE_OK) "%s,"
            K(SH_BCAST_KEY_SOURCE_ERROR), (unsigned long long)r->size,
            r->src_ok ? "true" : "false");
    sh_json_string(out, r->src_error);
    fprintf(out, "," K(SH_BCAST_KEY_ALGORITHM) "\"%s\"," K(SH_BCAST_KEY_SEGMENT_SIZE) "%llu,"
            K(SH_BCAST_KEY_PIPELINE_DEPTH) "%u," K(SH_BCAST_KEY_READ_AHEAD) "%u,"
            K(SH_BCAST_KEY_CHECK) "\"%s\"," K(SH_BCAST_KEY_VERIFY) "\"%s\","
            K(SH_BCAST_KEY_HASH) "\"%s\"," K(SH_BCAST_KEY_DIGEST) "\"%s\",",
            sh_algorithm_name(r->opts->algorithm),
            (unsigned long long)r->opts->segment, r->opts->depth, r->opts->read_ahead,
            sh_check_name(r->opts->check), sh_verify_name(r->opts->verify),
            sh_hash_name(r->opts->hash), hex);
    fprintf(out, K(SH_BCAST_KEY_RANKS) "%d," K(SH_BCAST_KEY_NODES) "%d,"
            K(SH_BCAST_KEY_NODES_COPIED) "%d," K(SH_BCAST_KEY_NODES_CURRENT) "%d,"
            K(SH_BCAST_KEY_NODES_FAILED) "%d," K(SH_BCAST_KEY_NODES_NOT_COPIED) "%d,"
            K(SH_BCAST_KEY_BYTES_TRANSFERRED) "%llu," K(SH_BCAST_KEY_RATE) "%.0f,"
            K(SH_BCAST_KEY_SECONDS) "{",
            r->world_size, r->nodes, copied, current, failed, aborted,
            (unsigned long long)r->bytes_transferred, rate(r));
    for (int p = 0; p < SH_PH_COUNT; p++)
        fprintf(out, "\"%s\":%.6f,", sh_phase_name((enum sh_phase)p),
                r->phase_s[p]);
    fprintf(out, K(SH_BCAST_KEY_TOTAL) "%.6f}," K(SH_BCAST_KEY_LOCK_WAIT) "%.6f,"
            K(SH_BCAST_KEY_LOCK_OWNER), r->total_s, r->lock_wait_s);
    sh_json_string(out, r->lock_owner != NULL ? r->lock_owner : "");
    fputs("," K(SH_BCAST_KEY_NODE_RESULTS) "[", out);
    for (int i = 0; r->results != NULL && i < r->nodes; i++) {
        const struct sh_node_result *n = &r->results[i];

        fprintf(out, "%s{" K(SH_BCAST_KEY_NODE), i > 0 ? "," : "");
        sh_json_string(out, n->host);
        fprintf(out, "," K(SH_BCAST_KEY_RANK) "%d," K(SH_BCAST_KEY_NODE_STATUS) "\"%s\","
                K(SH_BCAST_KEY_BYTES_WRITTEN) "%llu," K(SH_BCAST_KEY_METADATA) "\"%s\","
                K(SH_BCAST_KEY_ERRNO) "%d," K(SH_BCAST_KEY_EXIT_CLASS) "%d,"
                K(SH_BCAST_KEY_PHASE),
                n->world_rank, status_name(n->status),
                (unsigned long long)n->bytes_written,
                n->meta_sidecar ? "sidecar" : "xattr", n->err, n->exit_class);
        sh_json_string(out, n->phase);
        fputs("," K(SH_BCAST_KEY_ERROR), out);
        sh_json_string(out, n->reason);
        fprintf(out, "," K(SH_BCAST_KEY_SECONDS) "{\"transfer\":%.6f,\"verify\":%.6f,"
                "\"publish\":%.6f," K(SH_BCAST_KEY_CPU) "%.6f," K(SH_BCAST_KEY_CPU_WRITE)
                "%.6f," K(SH_BCAST_KEY_CPU_READ) "%.6f}}", n->transfer_s, n->verify_s,
                n->publish_s, n->cpu_s, n->cpu_write_s, n->cpu_read_s);
    }
#undef K
    fputs("]}\n", out);
}

void sh_src_failure_text(const char *source, uint32_t status, uint32_t err, uint64_t seg,
                         char *buf, size_t len)
{
    const char *why = err != 0 ? strerror((int)err) : NULL;

    switch (status) {
    case SH_SRC_CHANGED:
        /* found by the reader's fstat after the last segment, not at one */
        sh_msgf(buf, len, "source %s: source changed while it was copied (size or "
                "times differ at its end)", source);
        return;
    case SH_SEG_READ_ERROR:
    case SH_SEG_SHORT_SOURCE:
        sh_msgf(buf, len, "source %s: %s at segment %llu%s%s", source,
                status == SH_SEG_READ_ERROR ? "read error" : "source shorter than announced",
                (unsigned long long)seg, why != NULL ? ": " : "", why != NULL ? why : "");
        return;
    }
    sh_msgf(buf, len, "source %s: error %u at segment %llu", source, (unsigned)status,
            (unsigned long long)seg);
}
