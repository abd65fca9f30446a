/* Command line of stagehand-bcast (issue 3). Pure: no MPI, no I/O besides
 * the usage text, so it is unit tested (tests/unit/check_opts.c). */
#ifndef STAGEHAND_ENGINE_OPTS_H
#define STAGEHAND_ENGINE_OPTS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stagehand/hash.h"
#include "stagehand/meta.h"

enum sh_algorithm { SH_ALG_CHAIN = 0, SH_ALG_BCAST = 1 };
enum sh_verify { SH_VERIFY_TRANSFER = 0, SH_VERIFY_READBACK = 1 };

#define SH_BCAST_DEFAULT_SEGMENT SH_DEFAULT_SEGMENT_SIZE
#define SH_BCAST_DEFAULT_DEPTH SH_DEFAULT_PIPELINE_DEPTH
#define SH_BCAST_MAX_DEPTH SH_MAX_PIPELINE_DEPTH
#define SH_BCAST_DEFAULT_READ_AHEAD SH_DEFAULT_READ_AHEAD
#define SH_BCAST_DEFAULT_TIMEOUT_NS SH_DEFAULT_TIMEOUT_NS
/* case F22: a broadcast that moves no byte for this long is an error. */
#define SH_BCAST_DEFAULT_STALL_NS SH_DEFAULT_STALL_NS

struct sh_bcast_opts {
    char source[PATH_MAX];          /* absolute */
    char dest[PATH_MAX];            /* absolute */
    char source_name[PATH_MAX];     /* identity recorded for SRC, or "" (its
                                     * path): SH_BCAST_SOURCE_NAME_ENV */
    enum sh_check check;
    enum sh_verify verify;
    enum sh_hash_algo hash;
    uint64_t segment;               /* bytes, 1..SH_SEGMENT_MAX */
    unsigned depth;                 /* buffers in the ring, 1..SH_BCAST_MAX_DEPTH */
    unsigned read_ahead;            /* concurrent reads of SRC, 1..depth (0 while
                                     * parsing: not given) */
    enum sh_algorithm algorithm;
    uint64_t timeout_ns;            /* overall deadline, > 0 */
    uint64_t stall_ns;              /* transfer without progress this long fails, 0: off */
    int source_rank;                /* rank that reads SRC, >= 0 */
    int expect_ranks;               /* required world size, 0: any */
    int progress;
    int json;
    int verbose;                    /* count of --verbose */
    unsigned dir_mode;              /* DST's missing parents (umask applies) */
    int untraceable;                /* made non-dumpable at start (main.c) */
    unsigned umask_bits;            /* the process's umask, read at start-up:
                                     * DST gets SRC's bits minus these */
};

enum sh_opts_result {
    SH_OPTS_ERROR = -1,     /* message in err */
    SH_OPTS_RUN = 0,
    SH_OPTS_HELP = 1,
    SH_OPTS_VERSION = 2,
};

/* Parse @argv (getopt_long; resets getopt's state so it can be called more
 * than once); SRC and DST come from SH_BCAST_SOURCE_ENV and SH_BCAST_DEST_ENV
 * when the options are absent. On SH_OPTS_ERROR a one-line message naming the option and the
 * value is stored in @err (@errlen bytes). */
enum sh_opts_result sh_bcast_opts_parse(int argc, char **argv,
                                        struct sh_bcast_opts *o,
                                        char *err, size_t errlen);

/* Print the --help text to @out. */
void sh_bcast_usage(FILE *out);

const char *sh_algorithm_name(enum sh_algorithm a);
const char *sh_verify_name(enum sh_verify v);

#endif
