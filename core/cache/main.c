/* stagehand-cache: the node image cache's command (stagehand-cache(8)), run
 * as root on a node.
 *
 *   stagehand-cache adopt    (internal) the staging process's adoption of a
 *                            job's new copy: inputs on stdin as key=value
 *                            lines (stagehand/kv.h) ending with "end", never
 *                            in argv (F19: argv is visible to every user);
 *                            the reason for a refusal on stdout, exit 1.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stagehand/cache.h"
#include "stagehand/kv.h"
#include "stagehand/local.h"
#include "stagehand/modes.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: stagehand-cache adopt   (the staging process's, inputs on stdin)\n");
}

/* adopt's inputs */
struct adopt_in {
    char cache[PATH_MAX], dst[PATH_MAX], src[PATH_MAX], hash[16], report[1024];
    uint64_t uid;
    bool have_uid, end;
};

static int read_adopt_inputs(struct adopt_in *in)
{
    char line[SH_KV_LINE_MAX];

    memset(in, 0, sizeof(*in));
    while (!in->end && fgets(line, sizeof(line), stdin) != NULL) {
        char *key, *value;
        char *out = NULL;
        size_t len = 0;

        if (sh_kv_split(line, &key, &value) != 0)
            return -1;
        if (strcmp(key, "cache") == 0)
            out = in->cache, len = sizeof(in->cache);
        else if (strcmp(key, "dst") == 0)
            out = in->dst, len = sizeof(in->dst);
        else if (strcmp(key, "src") == 0)
            out = in->src, len = sizeof(in->src);
        else if (strcmp(key, "hash") == 0)
            out = in->hash, len = sizeof(in->hash);
        else if (strcmp(key, "report") == 0)
            out = in->report, len = sizeof(in->report);
        else if (strcmp(key, "uid") == 0)
            in->have_uid = sh_parse_u64(value, &in->uid) == 0 && in->uid < UINT32_MAX;
        else if (strcmp(key, "end") == 0)
            in->end = true;
        if (out != NULL && (size_t)snprintf(out, len, "%s", value) >= len)
            return -1;
    }
    return in->end && in->have_uid && in->cache[0] == '/' && in->dst[0] == '/' &&
                   in->src[0] == '/' && in->report[0] != '\0'
               ? 0
               : -1;
}

/* The staging process's adoption of a job's new copy (sh_cache_adopt). */
static int cmd_adopt(void)
{
    struct adopt_in in;
    struct sh_src_id id;
    enum sh_hash_algo algo;
    char err[1024], key[SH_CACHE_KEY_MAX], digest[SH_HASH_HEX_LEN], *sp;
    size_t dlen;

    if (geteuid() != 0) {
        printf("stagehand-cache adopt: must run as root\n");
        return 1;
    }
    if (read_adopt_inputs(&in) != 0 || sh_hash_parse(in.hash, &algo) != 0) {
        printf("stagehand-cache adopt: incomplete or malformed inputs\n");
        return 1;
    }
    sp = strchr(in.report, ' ');
    dlen = sp != NULL ? (size_t)(sp - in.report) : 0;
    if (dlen == 0 || dlen >= sizeof(digest)) {
        printf("stagehand-cache adopt: malformed report\n");
        return 1;
    }
    memcpy(digest, in.report, dlen);
    digest[dlen] = '\0';
    if (sh_src_decode((const unsigned char *)sp + 1, (uint32_t)strlen(sp + 1), in.src, &id,
                      err, sizeof(err)) != 0) {
        printf("stagehand-cache adopt: the source's identity: %s\n", err);
        return 1;
    }
    if (sh_cache_adopt(in.cache, in.dst, (uid_t)in.uid, algo, digest, &id, key, err,
                       sizeof(err)) != 0) {
        printf("%s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "adopt") == 0 && argc == 2)
        return cmd_adopt();
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "stagehand-cache: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
