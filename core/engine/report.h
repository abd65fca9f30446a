/* Per-node votes and results exchanged between the writers, and the summary
 * printed by the reader (human text or --json). */
#ifndef STAGEHAND_ENGINE_REPORT_H
#define STAGEHAND_ENGINE_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "opts.h"
#include "stagehand/bcast.h"
#include "stagehand/hash.h"
#include "stagehand/modes.h"

/* Exit codes SH_EXIT_*: stagehand/bcast.h (the agent reads them too). */

enum sh_vote { SH_VOTE_CURRENT = 0, SH_VOTE_COPY = 1, SH_VOTE_ERROR = 2 };

/* Exchanged with MPI_BYTE between ranks of one binary (homogeneous). */
struct sh_node_vote {
    int32_t vote;               /* enum sh_vote */
    int32_t err;                /* errno when SH_VOTE_ERROR */
    int32_t world_rank;
    int32_t digest_len;         /* recorded digest of a current copy, or 0 */
    uint32_t algo;
    uint32_t pad;
    uint64_t free_bytes;        /* statvfs f_bavail * f_frsize of DST's fs */
    uint8_t digest[SH_HASH_MAX_LEN];
    char host[64];
    char reason[200];
};

enum sh_node_status {
    SH_NODE_COPIED = 0,         /* received, verified, published */
    SH_NODE_CURRENT = 1,        /* already current: not rewritten */
    SH_NODE_READER = 2,         /* reader only, its copy current */
    SH_NODE_FAILED = 3,
    SH_NODE_ABORTED = 4,        /* fine, but not copied: another node failed
                                 * its pre-check, so no data moved */
};

struct sh_node_result {
    int32_t status;             /* enum sh_node_status */
    int32_t err;                /* errno of the failure, or 0 */
    int32_t world_rank;
    int32_t exit_class;         /* SH_EXIT_* this node's failure maps to */
    int32_t meta_sidecar;       /* metadata went to the sidecar file */
    int32_t pad;
    uint64_t bytes_written;
    double transfer_s, verify_s, publish_s;
    double cpu_s;               /* user + system CPU of this rank so far */
    double cpu_write_s;         /* of it, the transfer's writer thread */
    double cpu_read_s;          /* of it, the transfer's reader threads */
    char host[64];
    char phase[16];             /* "pre-check", "transfer", "verify", "publish" */
    char reason[200];
};

struct sh_report {
    const struct sh_bcast_opts *opts;
    uint64_t size;                  /* bytes of SRC */
    int src_ok;
    char src_error[256];
    int world_size;
    int nodes;                      /* writers (one per node) */
    const struct sh_node_result *results;   /* one per node */
    double phase_s[SH_PH_COUNT];    /* consecutive: they add up to total */
    double total_s;
    uint64_t bytes_transferred;     /* SRC bytes that went through the pipeline */
    double lock_wait_s;             /* waited for another run's lock on DST */
    const char *lock_owner;         /* that run ("job 57 on n1"), "" or NULL */
    uint8_t digest[SH_HASH_MAX_LEN];
    int digest_len;
    int exit_code;
};

/* snprintf for messages, where truncating a long path is acceptable
 * (vsnprintf, so the compiler does not flag the intended truncation). */
void sh_msgf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Print the human summary to @out. */
void sh_report_text(const struct sh_report *r, FILE *out);
/* Print the JSON summary (one object, newline-terminated; its keys are
 * stagehand/bcast.h's SH_BCAST_KEY_*) to @out:
 *   format (1), status ("ok"|"failed"), exit_code, source, dest, size,
 *   source_ok, source_error, algorithm, segment_size, pipeline_depth,
 *   read_ahead (of the rank that wrote the summary), check,
 *   verify, hash, digest (hex, "" when no transfer), ranks, nodes,
 *   nodes_copied, nodes_current, nodes_failed, nodes_not_copied,
 *   bytes_transferred, rate_bytes_per_s,
 *   seconds {start-up, metadata, pre-check, transfer, verify, publish, total},
 *   node_results [{node, rank, status ("copied"|"current"|"failed"|
 *   "not-copied"), bytes_written, metadata ("xattr"|"sidecar"), errno,
 *   exit_class, phase, error, seconds {transfer, verify, publish, cpu,
 *   cpu_write, cpu_read}}].
 * Fields are only ever added; "format" changes if one changes meaning. */
void sh_report_json(const struct sh_report *r, FILE *out);
/* Write @s as a JSON string literal (with quotes) to @out. */
void sh_json_string(FILE *out, const char *s);

/* The reader's failure (@status SH_SEG_READ_ERROR, SH_SEG_SHORT_SOURCE or
 * SH_SRC_CHANGED, with errno @err or 0, at segment @seg) as a message naming
 * @source and, except for a change found only after the last segment, the
 * segment; into @buf of @len bytes (truncated, always terminated). */
void sh_src_failure_text(const char *source, uint32_t status, uint32_t err, uint64_t seg,
                         char *buf, size_t len);

#endif
