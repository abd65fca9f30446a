/* The skip check and hash algorithm vocabularies, shared by the engine's
 * command line, the metadata record and the plugstack configuration; and the
 * engine's phase names, shared by its JSON report and the agent. */
#ifndef STAGEHAND_MODES_H
#define STAGEHAND_MODES_H

#include <stdint.h>

/* Skip checks (--check, plugstack check=). */
enum sh_check {
    SH_CHECK_META = 0,  /* trust the record written after a verified publish (default) */
    SH_CHECK_CONTENT,   /* record, plus re-hash DST and compare with it */
    SH_CHECK_SIZE,      /* DST size == SRC size: unsafe, for compatibility */
    SH_CHECK_NEVER,     /* always copy */
};

/* Content digests (--hash, plugstack hash=). The values are stored in
 * metadata records: never renumber. */
enum sh_hash_algo { SH_HASH_XXH3 = 1, SH_HASH_SHA256 = 2 };

/* Data-path defaults shared by the engine's command line and the plugstack
 * configuration (measured: doc/performance.md). */
#define SH_DEFAULT_SEGMENT_SIZE (UINT64_C(1) << 19)   /* bytes: 512 KiB */
/* The largest segment: one segment and its status header travel as one MPI
 * message whose count is an int (case F09), so 1 GiB + header < INT_MAX. */
#define SH_SEGMENT_MAX (UINT64_C(1) << 30)            /* bytes: 1 GiB */
#define SH_DEFAULT_PIPELINE_DEPTH 8u                  /* segments per rank */
#define SH_MAX_PIPELINE_DEPTH 64u                     /* segments per rank */
#define SH_DEFAULT_TIMEOUT_NS (UINT64_C(600) * 1000000000u) /* ns: whole staging */
/* Mode of the directories of DST's path that stagehand creates (before the
 * job's umask); the owner always keeps rwx. */
#define SH_DEFAULT_DIR_MODE 0700u
/* Segments the reading rank reads from SRC at once: one read at a time left
 * an sshfs source idle for a round trip per segment (48 vs 59 MB/s on a
 * 60 MB/s link, bench/results/latest.md). */
#define SH_DEFAULT_READ_AHEAD 4u
/* Read-ahead when none is configured: SH_DEFAULT_READ_AHEAD, or @depth
 * (segments) if smaller, since every read in flight needs a ring buffer. */
static inline unsigned sh_default_read_ahead(unsigned depth)
{
    return SH_DEFAULT_READ_AHEAD < depth ? SH_DEFAULT_READ_AHEAD : depth;
}
#define SH_DEFAULT_STALL_NS (UINT64_C(60) * 1000000000u) /* ns, case F22 */
/* How long an agent waits for the job's other agents to start and form the
 * control tree, counted from its own start. On a quiet cluster prologs start
 * within a second of each other, but field reports show them 40 s apart on
 * busy ones (case F21): the bound must outlast that, or nodes that are only
 * late get named as missing. It must still end well before the staging
 * timeout: a job cancelled while its prologs start never runs the prolog on
 * some nodes, and the others must not hold their nodes for the whole staging
 * timeout (120 s on the test cluster, where a cancelled job's prolog was
 * measured holding its node that long; 600 s by default). */
#define SH_DEFAULT_JOIN_NS (UINT64_C(60) * 1000000000u) /* ns */

/* "meta", "content", "size", "never" <-> enum. Parse returns 0 or -1 with
 * errno = EINVAL; name returns NULL for an unknown value. */
int sh_check_parse(const char *text, enum sh_check *check);
const char *sh_check_name(enum sh_check check);

/* "xxh3", "sha256" <-> enum. Same conventions. */
int sh_hash_parse(const char *name, enum sh_hash_algo *algo);
const char *sh_hash_name(enum sh_hash_algo algo);

/* The engine's phases, in order. Their names are the keys of the "seconds"
 * object of its --json report, which the agent reads back. */
enum sh_phase {
    SH_PH_STARTUP = 0, SH_PH_METADATA, SH_PH_PRECHECK, SH_PH_TRANSFER,
    SH_PH_VERIFY, SH_PH_PUBLISH, SH_PH_COUNT,
};

/* "start-up", "metadata", "pre-check", "transfer", "verify", "publish";
 * "?" for a value outside the enum. Static storage, never freed. */
const char *sh_phase_name(enum sh_phase p);

#endif
