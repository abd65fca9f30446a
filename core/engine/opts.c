/* stagehand-bcast: its command line (opts.h). */
#include "config.h"
#include "opts.h"
#include "stagehand/ref.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "stagehand/bcast.h"
#include "segment.h"
#include "stagehand/size.h"

enum {
    OPT_CHECK = 256, OPT_VERIFY, OPT_HASH, OPT_SEGMENT, OPT_DEPTH,
    OPT_ALGORITHM, OPT_TIMEOUT, OPT_PROGRESS, OPT_JSON, OPT_SOURCE_RANK,
    OPT_EXPECT_RANKS, OPT_STALL_TIMEOUT, OPT_READ_AHEAD, OPT_DIR_MODE,
    OPT_UNTRACEABLE,
};

static const struct option long_opts[] = {
    { "source", required_argument, NULL, 's' },
    { "dest", required_argument, NULL, 'd' },
    { "check", required_argument, NULL, OPT_CHECK },
    { "verify", required_argument, NULL, OPT_VERIFY },
    { "hash", required_argument, NULL, OPT_HASH },
    { "segment-size", required_argument, NULL, OPT_SEGMENT },
    { "pipeline-depth", required_argument, NULL, OPT_DEPTH },
    { "algorithm", required_argument, NULL, OPT_ALGORITHM },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "source-rank", required_argument, NULL, OPT_SOURCE_RANK },
    { "expect-ranks", required_argument, NULL, OPT_EXPECT_RANKS },
    { "stall-timeout", required_argument, NULL, OPT_STALL_TIMEOUT },
    { "read-ahead", required_argument, NULL, OPT_READ_AHEAD },
    { "dir-mode", required_argument, NULL, OPT_DIR_MODE },
    { "untraceable", no_argument, NULL, OPT_UNTRACEABLE },
    { "progress", no_argument, NULL, OPT_PROGRESS },
    { "json", no_argument, NULL, OPT_JSON },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
};

const char *sh_algorithm_name(enum sh_algorithm a)
{
    return a == SH_ALG_BCAST ? "bcast" : "chain";
}

const char *sh_verify_name(enum sh_verify v)
{
    return v == SH_VERIFY_READBACK ? "readback" : "transfer";
}

void sh_bcast_usage(FILE *out)
{
    fputs(
"Usage: srun --mpi=pmix -N<nodes> --ntasks-per-node=1 stagehand-bcast \\\n"
"           --source SRC --dest DST [options]\n"
"\n"
"Copy SRC (read once, by one rank) to DST on the local storage of every node\n"
"of the MPI job, with a pipelined broadcast and a verified atomic publish.\n"
"\n"
"  -s, --source=PATH        absolute path of the file to stage (read by one rank)\n"
"  -d, --dest=PATH          absolute node-local destination path\n"
"      --check=MODE         skip nodes whose copy is current: meta (default:\n"
"                           metadata recorded after a verified publish),\n"
"                           content (meta + re-hash DST), size (same size only;\n"
"                           UNSAFE, for compatibility), never (always copy)\n"
"      --verify=MODE        transfer (default: end-to-end hash of the stream)\n"
"                           or readback (also re-read DST before publishing)\n"
"      --hash=ALGO          xxh3 (default, XXH3-128) or sha256\n"
"      --segment-size=SIZE  bytes per pipeline segment, K/M/G units, <= 1G\n"
"                           (default 512K)\n"
"      --pipeline-depth=N   buffers in flight per rank, 1..64 (default 8)\n"
"      --read-ahead=N       segments the reading rank reads from SRC at once,\n"
"                           1..pipeline depth (default 4, or the depth if\n"
"                           smaller); >1 keeps a network filesystem busy\n"
"      --algorithm=ALG      chain (default: pipelined point-to-point ring) or\n"
"                           bcast (one MPI_Ibcast per segment, for comparison)\n"
"      --timeout=DURATION   overall deadline, e.g. 600, 90s, 10m (default 600s);\n"
"                           on expiry temp files are removed and the job aborts\n"
"      --source-rank=N      MPI rank that reads SRC (default 0)\n"
"      --stall-timeout=DURATION  fail a transfer that moves no data for this\n"
"                           long (default 60s; 0: off), naming the segment\n"
"      --dir-mode=OCTAL     mode of the directories of DST's path created for\n"
"                           it, minus the umask (default 0700: private)\n"
"      --untraceable        no debugger may attach (prctl PR_SET_DUMPABLE 0; no\n"
"                           core dump either): the stagehand agent passes it\n"
"      --expect-ranks=N     refuse to run unless the MPI job has exactly N ranks\n"
"                           (a launcher that wired up another job is an error)\n"
"      --progress           show progress on stderr (a bar on a terminal)\n"
"      --json               print a machine-readable summary on stdout\n"
"  -v, --verbose            more log output (repeat for debug)\n"
"  -h, --help               this text\n"
"  -V, --version            print the version\n"
"\n"
"DST gets SRC's permission bits minus the umask (never setuid, setgid or\n"
"sticky); unless its group can be SRC's, its group gets the other bits.\n"
"\n"
"Exit status: 0 success (also when every copy was already current),\n"
"1 internal or MPI error, 2 usage error, 3 source error (missing, unreadable,\n"
"not a regular file, changed or failed while read), 4 destination error on at\n"
"least one node (no space, I/O error, lock wait, verification failure),\n"
"5 deadline (--timeout) reached, 6 killed by a crash signal (SIGSEGV, SIGBUS,\n"
"SIGFPE, SIGILL, SIGABRT) that another process of a non-root user sent.\n", out);
}

static enum sh_opts_result fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum sh_opts_result fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return SH_OPTS_ERROR;
}

/* A plain decimal integer (sh_parse_u64) of at most @max. */
static int parse_uint(const char *text, unsigned long max, unsigned long *out)
{
    uint64_t v;

    if (sh_parse_u64(text, &v) != 0 || v > max)
        return -1;
    *out = (unsigned long)v;
    return 0;
}

static int copy_path(char *dst, const char *src)
{
    size_t len = strlen(src);

    if (src[0] != '/' || len >= PATH_MAX || strchr(src, '\n') != NULL)
        return -1;
    memcpy(dst, src, len + 1);
    return 0;
}

/* After the options: SRC and DST from the environment when not given, the
 * checks that involve several options, and the read-ahead default. */
static enum sh_opts_result complete(struct sh_bcast_opts *o, char *err, size_t errlen)
{
    const char *env;

    /* The paths from the environment when not given (stagehand/bcast.h). */
    if (o->source[0] == '\0' && (env = getenv(SH_BCAST_SOURCE_ENV)) != NULL &&
        copy_path(o->source, env) != 0)
        return fail(err, errlen, "%s=%s: must be an absolute path (shorter than %d "
                    "bytes, no newline)", SH_BCAST_SOURCE_ENV, env, PATH_MAX);
    if (o->dest[0] == '\0' && (env = getenv(SH_BCAST_DEST_ENV)) != NULL &&
        copy_path(o->dest, env) != 0)
        return fail(err, errlen, "%s=%s: must be an absolute path (shorter than %d "
                    "bytes, no newline)", SH_BCAST_DEST_ENV, env, PATH_MAX);
    if ((env = getenv(SH_BCAST_SOURCE_NAME_ENV)) != NULL) {
        struct sh_ref ref;
        char why[256];

        if (sh_ref_parse_canonical(env, &ref, why, sizeof(why)) != 0 || ref.digest[0] == '\0' ||
            strlen(env) >= sizeof(o->source_name))
            return fail(err, errlen, "%s=%s: must be a docker:// reference pinned to its "
                        "digest", SH_BCAST_SOURCE_NAME_ENV, env);
        memcpy(o->source_name, env, strlen(env) + 1);
    }
    if (o->source[0] == '\0')
        return fail(err, errlen, "--source is required");
    if (o->dest[0] == '\0')
        return fail(err, errlen, "--dest is required");
    if (o->dest[strlen(o->dest) - 1] == '/')
        return fail(err, errlen, "--dest=%s: must name a file, not a directory",
                    o->dest);
    if (o->read_ahead > o->depth)
        return fail(err, errlen, "--read-ahead=%u: must not exceed the pipeline "
                    "depth (%u): each segment read needs its own buffer",
                    o->read_ahead, o->depth);
    if (o->read_ahead == 0)
        o->read_ahead = sh_default_read_ahead(o->depth);
    return SH_OPTS_RUN;
}

enum sh_opts_result sh_bcast_opts_parse(int argc, char **argv,
                                        struct sh_bcast_opts *o,
                                        char *err, size_t errlen)
{
    unsigned long v;
    int c;

    memset(o, 0, sizeof(*o));
    o->check = SH_CHECK_META;
    o->verify = SH_VERIFY_TRANSFER;
    o->hash = SH_HASH_XXH3;
    o->segment = SH_BCAST_DEFAULT_SEGMENT;
    o->depth = SH_BCAST_DEFAULT_DEPTH;
    o->read_ahead = 0;
    o->algorithm = SH_ALG_CHAIN;
    o->timeout_ns = SH_BCAST_DEFAULT_TIMEOUT_NS;
    o->stall_ns = SH_BCAST_DEFAULT_STALL_NS;
    o->source_rank = 0;
    o->dir_mode = SH_DEFAULT_DIR_MODE;
    err[0] = '\0';

    optind = 0;         /* glibc: full re-initialisation */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":s:d:vhV", long_opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (copy_path(o->source, optarg) != 0)
                return fail(err, errlen, "--source=%s: must be an absolute path "
                            "(shorter than %d bytes, no newline)", optarg, PATH_MAX);
            break;
        case 'd':
            if (copy_path(o->dest, optarg) != 0)
                return fail(err, errlen, "--dest=%s: must be an absolute path "
                            "(shorter than %d bytes, no newline)", optarg, PATH_MAX);
            break;
        case OPT_CHECK:
            if (sh_check_parse(optarg, &o->check) != 0)
                return fail(err, errlen, "--check=%s: expected meta, content, "
                            "size or never", optarg);
            break;
        case OPT_VERIFY:
            if (strcmp(optarg, "transfer") == 0)
                o->verify = SH_VERIFY_TRANSFER;
            else if (strcmp(optarg, "readback") == 0)
                o->verify = SH_VERIFY_READBACK;
            else
                return fail(err, errlen, "--verify=%s: expected transfer or "
                            "readback", optarg);
            break;
        case OPT_HASH:
            if (sh_hash_parse(optarg, &o->hash) != 0)
                return fail(err, errlen, "--hash=%s: expected xxh3 or sha256",
                            optarg);
            break;
        case OPT_SEGMENT:
            /* case F09: validated here, never clamped silently */
            if (sh_parse_segment_size(optarg, &o->segment) != 0)
                return fail(err, errlen, "--segment-size=%s: expected a size "
                            "from 1 byte to 1G (units K, M, G)", optarg);
            break;
        case OPT_DEPTH:
            if (parse_uint(optarg, SH_BCAST_MAX_DEPTH, &v) != 0 || v == 0)
                return fail(err, errlen, "--pipeline-depth=%s: expected an "
                            "integer from 1 to %u", optarg, SH_BCAST_MAX_DEPTH);
            o->depth = (unsigned)v;
            break;
        case OPT_ALGORITHM:
            if (strcmp(optarg, "chain") == 0)
                o->algorithm = SH_ALG_CHAIN;
            else if (strcmp(optarg, "bcast") == 0)
                o->algorithm = SH_ALG_BCAST;
            else
                return fail(err, errlen, "--algorithm=%s: expected chain or "
                            "bcast", optarg);
            break;
        case OPT_TIMEOUT:
            if (sh_parse_duration(optarg, &o->timeout_ns) != 0 ||
                o->timeout_ns == 0)
                return fail(err, errlen, "--timeout=%s: expected a positive "
                            "duration (e.g. 600, 90s, 10m, 1h)", optarg);
            break;
        case OPT_SOURCE_RANK:
            if (parse_uint(optarg, (unsigned long)INT_MAX, &v) != 0)
                return fail(err, errlen, "--source-rank=%s: expected a rank "
                            "from 0 to %d", optarg, INT_MAX);
            o->source_rank = (int)v;
            break;
        case OPT_READ_AHEAD:
            if (parse_uint(optarg, SH_BCAST_MAX_DEPTH, &v) != 0 || v == 0)
                return fail(err, errlen, "--read-ahead=%s: expected an "
                            "integer from 1 to %u", optarg, SH_BCAST_MAX_DEPTH);
            o->read_ahead = (unsigned)v;
            break;
        case OPT_STALL_TIMEOUT:
            if (sh_parse_duration(optarg, &o->stall_ns) != 0)
                return fail(err, errlen, "--stall-timeout=%s: expected a "
                            "duration (e.g. 60s; 0 turns the check off)", optarg);
            break;
        case OPT_UNTRACEABLE:
            o->untraceable = 1;
            break;
        case OPT_DIR_MODE:
            if (sh_parse_mode(optarg, &o->dir_mode) != 0 || (o->dir_mode & 0700) != 0700)
                return fail(err, errlen, "--dir-mode=%s: expected octal permission "
                            "bits from 0700 to 0777", optarg);
            break;
        case OPT_EXPECT_RANKS:
            if (parse_uint(optarg, (unsigned long)INT_MAX, &v) != 0 || v == 0)
                return fail(err, errlen, "--expect-ranks=%s: expected a "
                            "positive integer", optarg);
            o->expect_ranks = (int)v;
            break;
        case OPT_PROGRESS:
            o->progress = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case 'v':
            o->verbose++;
            break;
        case 'h':
            return SH_OPTS_HELP;
        case 'V':
            return SH_OPTS_VERSION;
        case ':':
            return fail(err, errlen, "%s: missing value", argv[optind - 1]);
        default:
            return fail(err, errlen, "%s: unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail(err, errlen, "%s: unexpected argument", argv[optind]);
    return complete(o, err, errlen);
}
