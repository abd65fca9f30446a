/* The contract between the agent and the engine (stagehand-bcast) beyond the
 * engine's documented options (stagehand-bcast(1)): how SRC and DST reach
 * it, its exit codes, and its --json report. The engine writes what this
 * header states (core/engine/report.c); the agent reads it
 * (core/agent/outcome.c). */
#ifndef STAGEHAND_BCAST_H
#define STAGEHAND_BCAST_H

#include <stddef.h>

/* The engine takes SRC and DST from these variables when --source and
 * --dest are not given. The agent passes them so: a process's environment
 * is readable by its owner and root only, its command line by every user of
 * the node (proc(5)), and the paths may be private (issue 30). */
#define SH_BCAST_SOURCE_ENV "STAGEHAND_BCAST_SOURCE"
#define SH_BCAST_DEST_ENV   "STAGEHAND_BCAST_DEST"
/* The identity recorded for SRC in each copy's metadata instead of its
 * path: a registry image's reference pinned to its manifest digest
 * ("docker://REGISTRY/REPO@sha256:..."), while SRC is node 0's import of it
 * (issue 36). Only from the environment; unset for a file. */
#define SH_BCAST_SOURCE_NAME_ENV "STAGEHAND_BCAST_SOURCE_NAME"

/* Exit codes (stagehand-bcast --help). A node's own failure also carries
 * the code it maps to (SH_BCAST_KEY_EXIT_CLASS). */
#define SH_EXIT_OK 0
#define SH_EXIT_INTERNAL 1      /* MPI failure, out of memory, bug */
#define SH_EXIT_USAGE 2
#define SH_EXIT_SOURCE 3        /* user error: SRC missing/unreadable/changed */
#define SH_EXIT_DEST 4          /* a node could not stage DST */
#define SH_EXIT_TIMEOUT 5       /* --timeout reached */
/* a crash signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) sent by another
 * process of a non-root user, e.g. the job's user: not a crash, so never the
 * node's fault (core/engine/guard.c: sh_guard_sent_by_user) */
#define SH_EXIT_KILLED 6

/* The --json report: one JSON object (RFC 8259), newline-terminated, on the
 * reading rank's stdout. Keys are only ever added; SH_BCAST_REPORT_FORMAT
 * changes if one changes meaning. Top level: */
#define SH_BCAST_REPORT_FORMAT 1
#define SH_BCAST_KEY_FORMAT "format"                    /* integer */
#define SH_BCAST_KEY_STATUS "status"                    /* "ok" | "failed" */
#define SH_BCAST_KEY_EXIT_CODE "exit_code"              /* SH_EXIT_* */
#define SH_BCAST_KEY_SOURCE "source"
#define SH_BCAST_KEY_DEST "dest"
#define SH_BCAST_KEY_SIZE "size"                        /* bytes of SRC */
#define SH_BCAST_KEY_SOURCE_OK "source_ok"              /* boolean */
#define SH_BCAST_KEY_SOURCE_ERROR "source_error"        /* "" when none */
#define SH_BCAST_KEY_ALGORITHM "algorithm"
#define SH_BCAST_KEY_SEGMENT_SIZE "segment_size"        /* bytes */
#define SH_BCAST_KEY_PIPELINE_DEPTH "pipeline_depth"
#define SH_BCAST_KEY_READ_AHEAD "read_ahead"            /* of the writing rank */
#define SH_BCAST_KEY_CHECK "check"
#define SH_BCAST_KEY_VERIFY "verify"
#define SH_BCAST_KEY_HASH "hash"
#define SH_BCAST_KEY_DIGEST "digest"                    /* hex, "" when no transfer */
#define SH_BCAST_KEY_RANKS "ranks"
#define SH_BCAST_KEY_NODES "nodes"
#define SH_BCAST_KEY_NODES_COPIED "nodes_copied"
#define SH_BCAST_KEY_NODES_CURRENT "nodes_current"
#define SH_BCAST_KEY_NODES_FAILED "nodes_failed"
#define SH_BCAST_KEY_NODES_NOT_COPIED "nodes_not_copied"
#define SH_BCAST_KEY_BYTES_TRANSFERRED "bytes_transferred"
#define SH_BCAST_KEY_RATE "rate_bytes_per_s"
/* object: one number of seconds per phase (sh_phase_name) and "total" */
#define SH_BCAST_KEY_SECONDS "seconds"
#define SH_BCAST_KEY_TOTAL "total"
#define SH_BCAST_KEY_LOCK_WAIT "lock_wait_s"            /* waited for another run */
#define SH_BCAST_KEY_LOCK_OWNER "lock_owner"            /* that run, or "" */
#define SH_BCAST_KEY_NODE_RESULTS "node_results"        /* array, one per node: */
#define SH_BCAST_KEY_NODE "node"                        /* host name */
#define SH_BCAST_KEY_RANK "rank"                        /* engine rank */
#define SH_BCAST_KEY_NODE_STATUS "status"   /* "copied"|"current"|"failed"|"not-copied" */
#define SH_BCAST_KEY_BYTES_WRITTEN "bytes_written"
#define SH_BCAST_KEY_METADATA "metadata"                /* "xattr" | "sidecar" */
#define SH_BCAST_KEY_ERRNO "errno"                      /* of the failure, or 0 */
#define SH_BCAST_KEY_EXIT_CLASS "exit_class"            /* SH_EXIT_* it maps to */
#define SH_BCAST_KEY_PHASE "phase"                      /* where it failed, or "" */
#define SH_BCAST_KEY_ERROR "error"                      /* why, or "" */
/* in a node's "seconds": "transfer", "verify", "publish" and */
#define SH_BCAST_KEY_CPU "cpu"                          /* the whole rank */
#define SH_BCAST_KEY_CPU_WRITE "cpu_write"  /* of it, its writer thread: hashing
                                             * and writing DST's temp file */
#define SH_BCAST_KEY_CPU_READ "cpu_read"    /* of it, its reader threads:
                                             * reading SRC (reader rank) */

/* A node that did not copy only because another node failed: its "error"
 * starts with this. */
#define SH_BCAST_NOT_COPIED "not copied"

/* The largest report a reader need accept for @nodes nodes, in bytes: a
 * bound on every field's size (a node entry holds a host name of at most
 * 63 bytes and an error of at most 199, each at most 6 bytes a character
 * once escaped), not a measurement. */
static inline size_t sh_bcast_report_max(size_t nodes)
{
    return 16384 + nodes * 4096;
}

#endif
