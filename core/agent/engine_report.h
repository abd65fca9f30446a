/* Reading the engine's --json report (stagehand/bcast.h) with json-c. */
#ifndef STAGEHAND_AGENT_ENGINE_REPORT_H
#define STAGEHAND_AGENT_ENGINE_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "stagehand/modes.h"

struct json_object;

/* One entry of "node_results". Strings point into the report. */
struct sh_engine_node {
    const char *node;       /* host name */
    const char *phase;      /* where it failed, or "" */
    const char *error;      /* why, or "" */
    long rank;              /* engine rank */
    int err;                /* errno, or 0 */
    int exit_class;         /* SH_EXIT_* its failure maps to */
};

struct sh_engine_report {
    int exit_code;                  /* SH_EXIT_* */
    long nodes_copied;
    uint64_t bytes_transferred;
    double lock_wait_s;
    const char *lock_owner;         /* "" when none */
    const char *digest;             /* hex, "" when no transfer */
    const char *source_error;       /* "" when none */
    double seconds[SH_PH_COUNT + 1];    /* per sh_phase, then total */
    size_t nnodes;
    struct sh_engine_node *nodes;
    struct json_object *root;       /* owns the strings above */
};

/* Read and check the report at @path, of at most @max_bytes bytes
 * (sh_bcast_report_max), into @r (free it with sh_engine_report_free). Every
 * key the agent uses must be there with its type. Returns 0, or -1 with
 * @r empty, a message naming @path and the reason in @err (@errlen bytes)
 * and errno: ENOENT (no report), ENODATA (an empty one: the engine ended
 * before it wrote it), EFBIG (larger than @max_bytes), EBADMSG
 * (not one JSON object), EPROTO (another format, or a key missing or of
 * another type), ENOMEM, or open(2)'s/read(2)'s errno. */
int sh_engine_report_read(const char *path, size_t max_bytes, struct sh_engine_report *r,
                          char *err, size_t errlen);

/* Release what sh_engine_report_read allocated; @r may be empty. */
void sh_engine_report_free(struct sh_engine_report *r);

#endif
