/* stagehand-cache: the node image cache's command (stagehand-cache(8)), run
 * as root on a node.
 *
 *   stagehand-cache --cache DIR list [--json]
 *   stagehand-cache --cache DIR remove DIGEST|SRC
 *   stagehand-cache --cache DIR verify
 *   stagehand-cache --cache DIR prune [--to PERCENT]
 *   stagehand-cache adopt    (internal) the staging process's adoption of a
 *                            job's new copy: inputs on stdin as key=value
 *                            lines (stagehand/kv.h) ending with "end", never
 *                            in argv (F19: argv is visible to every user);
 *                            the reason for a refusal on stdout, exit 1.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <pwd.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "stagehand/cache.h"
#include "stagehand/hash.h"
#include "stagehand/io.h"
#include "stagehand/kv.h"
#include "stagehand/meta.h"
#include "stagehand/local.h"
#include "stagehand/modes.h"
#include "stagehand/ref.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: stagehand-cache --cache DIR list [--json]\n"
               "       stagehand-cache --cache DIR remove DIGEST|SRC\n"
               "       stagehand-cache --cache DIR verify\n"
               "       stagehand-cache --cache DIR prune [--to PERCENT]\n"
               "DIR is the plugstack's cache= (stagehand-cache(8)); run as root on a node.\n");
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
                   (in->src[0] == '/' || sh_ref_is_image(in->src)) && in->report[0] != '\0'
               ? 0
               : -1;
}

/* A registry image's source (@src, the job's "docker://REGISTRY/REPO:TAG"):
 * the agent's report @ident ends " <the reference pinned to its digest>"
 * (the image's identity, doc/design.md §2 step 10), which must name the
 * same repository with a digest. That reference replaces @src (the entry's
 * record names it) and is cut from @ident. Returns 0, or -1 with the
 * reason in @err. */
static int registry_source(char *src, size_t srclen, char *ident, char *err, size_t errlen)
{
    char *sp = strrchr(ident, ' ');
    struct sh_ref asked, pinned;

    if (sp == NULL) {
        snprintf(err, errlen, "%.600s: the agent reported no pinned reference", src);
        return -1;
    }
    if (sh_ref_parse_canonical(src, &asked, err, errlen) != 0 ||
        sh_ref_parse_canonical(sp + 1, &pinned, err, errlen) != 0)
        return -1;
    if (pinned.digest[0] == '\0' || strcmp(pinned.registry, asked.registry) != 0 ||
        strcmp(pinned.repo, asked.repo) != 0 ||
        (asked.digest[0] != '\0' && strcmp(asked.digest, pinned.digest) != 0)) {
        snprintf(err, errlen, "%.400s: the reported %.400s is not it pinned to a digest",
                 src, sp + 1);
        return -1;
    }
    *sp = '\0';
    if (sh_ref_format(&pinned, src, srclen) != 0) {
        snprintf(err, errlen, "%.600s: reference too long", src);
        return -1;
    }
    return 0;
}

/* The staging process's adoption of a job's new copy (sh_cache_adopt). */
static int cmd_adopt(void)
{
    struct adopt_in in;
    struct sh_src_id id;
    enum sh_hash_algo algo;
    char err[1024], key[SH_CACHE_KEY_MAX], digest[SH_HASH_HEX_LEN], *sp;
    struct rusage ru;
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
    if (sh_ref_is_image(in.src) &&
        registry_source(in.src, sizeof(in.src), sp + 1, err, sizeof(err)) != 0) {
        printf("stagehand-cache adopt: %s\n", err);
        return 1;
    }
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
    /* for the staging's debug line: where a cold staging's time goes */
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        printf("entry %s; this process's CPU: %.1f ms user, %.1f ms system\n", key,
               (double)ru.ru_utime.tv_sec * 1e3 + (double)ru.ru_utime.tv_usec / 1e3,
               (double)ru.ru_stime.tv_sec * 1e3 + (double)ru.ru_stime.tv_usec / 1e3);
    return 0;
}

/* One entry as the admin sees it. */
struct row {
    struct sh_cache_entry e;
    struct stat sb;
    char jobs[512];      /* ids of the jobs that link it, "" when none */
    char users[512];     /* their users */
    struct sh_meta_sources more; /* its further sources (stagehand/meta.h) */
};

/* Does @r hold source @path (its record's or a further one)? */
static bool has_source(const struct row *r, const char *path)
{
    return strcmp(r->e.rec.src.path, path) == 0 || sh_meta_sources_find(&r->more, path) != NULL;
}

/* The jobs (and their users) whose directories link the inode of @sb. */
static void users_of(const char *cache, const struct stat *sb, struct row *r)
{
    char jobs[PATH_MAX];
    size_t oj = 0, ou = 0;
    DIR *d;
    struct dirent *de;

    r->jobs[0] = r->users[0] = '\0';
    if (sh_cache_submit_dir(cache, jobs, sizeof(jobs)) != 0 || (d = opendir(jobs)) == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        struct stat js;
        DIR *jd;
        struct dirent *f;

        if (de->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", jobs, de->d_name) >= sizeof(path) ||
            lstat(path, &js) != 0 || !S_ISDIR(js.st_mode) || (jd = opendir(path)) == NULL)
            continue;
        while ((f = readdir(jd)) != NULL) {
            struct stat fs;

            if (fstatat(dirfd(jd), f->d_name, &fs, AT_SYMLINK_NOFOLLOW) == 0 &&
                fs.st_ino == sb->st_ino && fs.st_dev == sb->st_dev) {
                struct passwd *pw = getpwuid(js.st_uid);
                char uname[64];

                if (pw != NULL)
                    snprintf(uname, sizeof(uname), "%s", pw->pw_name);
                else
                    snprintf(uname, sizeof(uname), "%u", (unsigned)js.st_uid);
                if (oj < sizeof(r->jobs))
                    oj += (size_t)snprintf(r->jobs + oj, sizeof(r->jobs) - oj, "%s%s",
                                           oj > 0 ? "," : "", de->d_name);
                if (ou < sizeof(r->users) && strstr(r->users, uname) == NULL)
                    ou += (size_t)snprintf(r->users + ou, sizeof(r->users) - ou, "%s%s",
                                           ou > 0 ? "," : "", uname);
                break;
            }
        }
        closedir(jd);
    }
    closedir(d);
}

/* Every entry of @cache, with @fn called on each; returns the count or -1. */
static int each_entry(const char *cache, int (*fn)(const char *cache, struct row *r, void *arg),
                      void *arg)
{
    char dir[PATH_MAX];
    DIR *d;
    struct dirent *de;
    int n = 0, rc = 0;

    if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", cache, SH_CACHE_ENTRIES) >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    d = opendir(dir);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        struct row r;
        char path[PATH_MAX];

        memset(&r, 0, sizeof(r));
        if (de->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
            strlen(de->d_name) >= sizeof(r.e.key) || lstat(path, &r.sb) != 0 ||
            !S_ISREG(r.sb.st_mode))
            continue;
        memcpy(r.e.key, de->d_name, strlen(de->d_name) + 1);
        {
            int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);

            if (fd >= 0) {
                if (sh_meta_load(-1, de->d_name, fd, &r.e.rec, NULL) != 0)
                    memset(&r.e.rec, 0, sizeof(r.e.rec));
                else if (sh_meta_sources_load(fd, &r.more) != 0)
                    r.more.n = 0;
                close(fd);
            }
        }
        r.e.size = (uint64_t)r.sb.st_size;
        r.e.links = r.sb.st_nlink;
        users_of(cache, &r.sb, &r);
        if (fn(cache, &r, arg) != 0)
            rc = -1;
        n++;
    }
    closedir(d);
    return rc != 0 ? -1 : n;
}

static int print_row(const char *cache, struct row *r, void *arg)
{
    json_object *arr = arg;
    char when[64];
    struct tm tm;
    time_t t = r->sb.st_atim.tv_sec;

    (void)cache;
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
    if (arr != NULL) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "key", json_object_new_string(r->e.key));
        json_object_object_add(o, "size", json_object_new_uint64(r->e.size));
        json_object *srcs = json_object_new_array();

        json_object_object_add(o, "source", json_object_new_string(r->e.rec.src.path));
        if (r->e.rec.src.path[0] != '\0')
            json_object_array_add(srcs, json_object_new_string(r->e.rec.src.path));
        for (size_t i = 0; i < r->more.n; i++)
            json_object_array_add(srcs, json_object_new_string(r->more.id[i].path));
        json_object_object_add(o, "sources", srcs);
        json_object_object_add(o, "last_use", json_object_new_string(when));
        json_object_object_add(o, "jobs_using", json_object_new_int((int)r->e.links - 1));
        json_object_object_add(o, "jobs", json_object_new_string(r->jobs));
        json_object_object_add(o, "users", json_object_new_string(r->users));
        json_object_array_add(arr, o);
    } else {
        printf("%-50s %12" PRIu64 " %s %3d %-20s %-20s %s", r->e.key, r->e.size, when,
               (int)r->e.links - 1, r->jobs[0] != '\0' ? r->jobs : "-",
               r->users[0] != '\0' ? r->users : "-",
               r->e.rec.src.path[0] != '\0' ? r->e.rec.src.path : "(no record)");
        for (size_t i = 0; i < r->more.n; i++)
            printf(",%s", r->more.id[i].path);
        printf("\n");
    }
    return 0;
}

/* Is @cache a node image cache (it has its entries directory)? Else says
 * so on stderr. */
static bool is_cache(const char *cache)
{
    char dir[PATH_MAX];
    struct stat sb;

    if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", cache, SH_CACHE_ENTRIES) < sizeof(dir) &&
        lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode))
        return true;
    fprintf(stderr, "stagehand-cache: %s is not a node image cache (no %s directory)\n", cache,
            SH_CACHE_ENTRIES);
    return false;
}

static int cmd_list(const char *cache, bool json)
{
    json_object *arr = json ? json_object_new_array() : NULL;
    int n;

    if (!json)
        printf("%-50s %12s %-19s %3s %-20s %-20s %s\n", "KEY", "BYTES", "LAST USE", "IN",
               "JOBS", "USERS", "SOURCES");
    n = each_entry(cache, print_row, arr);
    if (n < 0) {
        fprintf(stderr, "stagehand-cache: %s/%s: %s\n", cache, SH_CACHE_ENTRIES, strerror(errno));
        json_object_put(arr);
        return 1;
    }
    if (json) {
        printf("%s\n", json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY));
        json_object_put(arr);
    }
    return 0;
}

/* remove's target and outcome */
struct target {
    const char *what;
    int matched, removed;
};

static int remove_row(const char *cache, struct row *r, void *arg)
{
    struct target *t = arg;
    char path[PATH_MAX];

    if (strncmp(r->e.key, t->what, strlen(t->what)) != 0 && !has_source(r, t->what))
        return 0;
    t->matched++;
    if (r->e.links > 1) {
        printf("%s: in use by job%s %s: kept\n", r->e.key, r->e.links > 2 ? "s" : "", r->jobs);
        return 0;
    }
    snprintf(path, sizeof(path), "%s/%s", cache, SH_CACHE_ENTRIES);
    {
        int efd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int rc = efd < 0 ? -1 : sh_cache_evict_entry(efd, r->e.key);

        if (efd >= 0)
            close(efd);
        if (rc < 0) {
            fprintf(stderr, "stagehand-cache: %s/%s: %s\n", path, r->e.key, strerror(errno));
            return -1;
        }
        if (rc == 0) {
            printf("%s: taken by a job just now: kept\n", r->e.key);
            return 0;
        }
    }
    printf("%s: removed (%s)\n", r->e.key, r->e.rec.src.path);
    t->removed++;
    return 0;
}

static int cmd_remove(const char *cache, const char *what)
{
    struct target t = { .what = what };

    if (what[0] == '\0' || (what[0] != '/' && strspn(what, "0123456789abcdef") < 8)) {
        fprintf(stderr, "stagehand-cache remove: '%s' is neither a digest (8 or more hex "
                "digits, the start of a KEY of 'list') nor an absolute SRC path\n", what);
        return 2;
    }
    if (each_entry(cache, remove_row, &t) < 0)
        return 1;
    if (t.matched == 0) {
        fprintf(stderr, "stagehand-cache remove: no entry of %s matches '%s'\n", cache, what);
        return 1;
    }
    return t.removed == t.matched ? 0 : 1;
}

/* The algorithm of a key: its digest's length. */
static int key_algo(const char *key, enum sh_hash_algo *algo)
{
    size_t n = strcspn(key, "-");

    if (n == 2 * sh_hash_len(SH_HASH_XXH3))
        *algo = SH_HASH_XXH3;
    else if (n == 2 * sh_hash_len(SH_HASH_SHA256))
        *algo = SH_HASH_SHA256;
    else
        return -1;
    return 0;
}

static int verify_row(const char *cache, struct row *r, void *arg)
{
    int *bad = arg, fd;
    char path[PATH_MAX], key[SH_CACHE_KEY_MAX];
    uint8_t digest[SH_HASH_MAX_LEN];
    enum sh_hash_algo algo;

    snprintf(path, sizeof(path), "%s/%s/%s", cache, SH_CACHE_ENTRIES, r->e.key);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
    if (key_algo(r->e.key, &algo) != 0 || fd < 0 ||
        sh_hash_fd(sh_io_default(), fd, r->e.size, algo, SH_HASH_FD_BUF, digest) < 0 ||
        sh_cache_key(algo, digest, r->e.size, key, sizeof(key)) != 0 ||
        strcmp(key, r->e.key) != 0 || r->sb.st_uid != 0 || (r->sb.st_mode & 07777) != 0444) {
        if (fd >= 0)
            close(fd);
        if (unlink(path) != 0) {
            fprintf(stderr, "stagehand-cache: %s: corrupt, and cannot remove it: %s\n",
                    r->e.key, strerror(errno));
            return -1;
        }
        printf("%s: corrupt (its content is not its name%s): removed\n", r->e.key,
               r->e.links > 1 ? "; running jobs keep their links" : "");
        (*bad)++;
        return 0;
    }
    close(fd);
    printf("%s: ok\n", r->e.key);
    return 0;
}

static int cmd_verify(const char *cache)
{
    int bad = 0;

    if (each_entry(cache, verify_row, &bad) < 0)
        return 1;
    return bad > 0 ? 1 : 0;
}

static void print_evicted(const char *key, uint64_t size, void *arg)
{
    char h[32];

    (*(unsigned *)arg)++;
    printf("%s: removed (%s, least recently used and no job holds it)\n", key,
           sh_format_size(size, h, sizeof(h)));
}

/* prune: evict unused entries, least recently used first, until the cache's
 * filesystem is at most @pct percent full. */
static int cmd_prune(const char *cache, const char *to)
{
    struct statvfs fs;
    uint64_t pct = 80, total, used, target;
    unsigned n = 0;
    int64_t freed;
    char num[32], a[32], b[32];

    if (to != NULL) {
        size_t len = strlen(to);

        if (len > 0 && to[len - 1] == '%')
            len--;
        if (len == 0 || len >= sizeof(num)) {
            fprintf(stderr, "stagehand-cache prune: --to '%s': expected a percentage of the "
                    "cache's filesystem, 0 to 100 (e.g. --to 70)\n", to);
            return 2;
        }
        memcpy(num, to, len);
        num[len] = '\0';
        if (sh_parse_u64(num, &pct) != 0 || pct > 100) {
            fprintf(stderr, "stagehand-cache prune: --to '%s': expected a percentage of the "
                    "cache's filesystem, 0 to 100 (e.g. --to 70)\n", to);
            return 2;
        }
    }
    if (statvfs(cache, &fs) != 0) {
        fprintf(stderr, "stagehand-cache prune: %s: %s\n", cache, strerror(errno));
        return 1;
    }
    total = (uint64_t)fs.f_blocks * fs.f_frsize;
    used = (uint64_t)(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
    target = total / 100 * pct + total % 100 * pct / 100;
    if (used <= target) {
        printf("%s: %s of %s in use, at most %" PRIu64 "%%: nothing to remove\n", cache,
               sh_format_size(used, a, sizeof(a)), sh_format_size(total, b, sizeof(b)), pct);
        return 0;
    }
    freed = sh_cache_evict(cache, used - target, print_evicted, &n);
    if (freed < 0) {
        fprintf(stderr, "stagehand-cache prune: %s/%s: %s\n", cache, SH_CACHE_ENTRIES,
                strerror(errno));
        return 1;
    }
    printf("%s: removed %u entr%s, %s freed\n", cache, n, n == 1 ? "y" : "ies",
           sh_format_size((uint64_t)freed, a, sizeof(a)));
    if ((uint64_t)freed < used - target) {
        printf("%s: still above %" PRIu64 "%%: the rest is in use by running jobs or not "
               "the cache's\n", cache, pct);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = { { "cache", required_argument, NULL, 'c' },
                                          { "json", no_argument, NULL, 'j' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    char cache[PATH_MAX] = "", err[512];
    bool json = false;
    int c;

    if (argc == 2 && strcmp(argv[1], "adopt") == 0)
        return cmd_adopt();
    while ((c = getopt_long(argc, argv, "+c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (sh_spec_path_normalize(optarg, cache, sizeof(cache), err, sizeof(err)) != 0) {
                fprintf(stderr, "stagehand-cache: --cache %s: %s\n", optarg, err);
                return 2;
            }
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (cache[0] == '\0') {
        fprintf(stderr, "stagehand-cache: no cache directory: give --cache DIR (the "
                "plugstack's cache=)\n");
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "stagehand-cache: must run as root (the cache is root's)\n");
        return 2;
    }
    /* options may also follow the command */
    {
        const char *cmd = argv[optind++];
        const char *arg = NULL, *to = NULL;

        for (; optind < argc; optind++) {
            if (strcmp(argv[optind], "--json") == 0)
                json = true;
            else if (strcmp(cmd, "prune") == 0 && strcmp(argv[optind], "--to") == 0) {
                if (optind + 1 >= argc) {
                    fprintf(stderr, "stagehand-cache prune: --to needs a PERCENT\n");
                    return 2;
                }
                to = argv[++optind];
            } else if (strcmp(cmd, "prune") == 0 && strncmp(argv[optind], "--to=", 5) == 0)
                to = argv[optind] + 5;
            else if (arg == NULL)
                arg = argv[optind];
            else {
                fprintf(stderr, "stagehand-cache %s: unexpected argument '%s'\n", cmd,
                        argv[optind]);
                return 2;
            }
        }
        if ((strcmp(cmd, "list") == 0 || strcmp(cmd, "remove") == 0 ||
             strcmp(cmd, "verify") == 0 || strcmp(cmd, "prune") == 0) && !is_cache(cache))
            return 2;
        if (strcmp(cmd, "list") == 0 && arg == NULL)
            return cmd_list(cache, json);
        if (strcmp(cmd, "remove") == 0 && arg != NULL && !json)
            return cmd_remove(cache, arg);
        if (strcmp(cmd, "verify") == 0 && arg == NULL && !json)
            return cmd_verify(cache);
        if (strcmp(cmd, "prune") == 0 && arg == NULL && !json)
            return cmd_prune(cache, to);
        fprintf(stderr, "stagehand-cache: '%s%s%s' is not a command of this form\n", cmd,
                arg != NULL ? " " : "", arg != NULL ? arg : "");
        usage(stderr);
        return 2;
    }
}
