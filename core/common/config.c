/* plugstack.conf arguments; see include/stagehand/config.h. */
#include "config.h"
#include "stagehand/config.h"
#include "stagehand/cache.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stagehand/ctlport.h"
#include "stagehand/log.h"
#include "stagehand/ref.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"

#define NS_PER_S 1000000000ULL
#define SHOW_MAX 320

void sh_config_defaults(struct sh_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->n_allowed_dest = 0;
    cfg->default_dest[0] = '\0';
    snprintf(cfg->key_file, sizeof(cfg->key_file), "%s",
             "/etc/slurm/stagehand.key");
    snprintf(cfg->agent, sizeof(cfg->agent), "%s", SH_AGENT_PATH);
    snprintf(cfg->engine, sizeof(cfg->engine), "%s", SH_ENGINE_PATH);
    cfg->mpi_env[0] = '\0';
    cfg->port_base = SH_CTL_PORT_BASE_DEFAULT;
    cfg->port_range = SH_CTL_PORT_RANGE_DEFAULT;
    cfg->fanout = 32;
    /* measured: doc/performance.md (pipeline fill (N-1)*seg/B) */
    cfg->segment_size = SH_DEFAULT_SEGMENT_SIZE;
    cfg->pipeline_depth = SH_DEFAULT_PIPELINE_DEPTH;
    cfg->read_ahead = 0;
    cfg->timeout_ns = SH_DEFAULT_TIMEOUT_NS;
    cfg->stall_timeout_ns = SH_DEFAULT_STALL_NS;
    cfg->join_timeout_ns = SH_DEFAULT_JOIN_NS;
    cfg->check = SH_CHECK_META;
    cfg->hash = SH_HASH_XXH3;
    cfg->on_node_fault = SH_FAULT_FAIL;
    cfg->pml = SH_PML_OB1;
    cfg->submit_check = true;
    cfg->verbose = false;
    cfg->allow_shared_dst = false;
    cfg->dest_dir_mode = SH_DEFAULT_DIR_MODE;
    snprintf(cfg->resolver, sizeof(cfg->resolver), "%s,digest,%%r", SH_IMPORT_PATH);
    snprintf(cfg->importer, sizeof(cfg->importer), "%s,import,%%r,%%o", SH_IMPORT_PATH);
    cfg->cache_high = (struct sh_cache_mark){ true, 90 };
    cfg->cache_low = (struct sh_cache_mark){ true, 80 };
    cfg->cache_max = 0;
}

uint64_t sh_cache_mark_bytes(const struct sh_cache_mark *mark, uint64_t fs_bytes)
{
    if (!mark->percent)
        return mark->value;
    /* fs_bytes / 100 * p + remainder part: no overflow for any fs size. */
    return fs_bytes / 100 * mark->value + fs_bytes % 100 * mark->value / 100;
}

/* ---- value parsers: each gets the key and value for its messages ------ */

struct arg {
    const char *key;
    const char *val;
    char *err;
    size_t errlen;
};

static int bad(const struct arg *a, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Message "<key>=<value>: <reason>", errno = @errnum, returns -1. */
static int bad(const struct arg *a, int errnum, const char *fmt, ...)
{
    char show[SHOW_MAX];
    char reason[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    sh_errf(a->err, a->errlen, "%s=%s: %s", a->key,
           sh_spec_display(a->val, show, sizeof(show)), reason);
    errno = errnum;
    return -1;
}

static int parse_uint(const struct arg *a, unsigned long min,
                      unsigned long max, unsigned long *out)
{
    unsigned long v = 0;
    const char *p = a->val;

    if (*p == '\0')
        return bad(a, EINVAL, "expected a decimal number");
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return bad(a, EINVAL, "expected a decimal number");
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > max)
            break;
    }
    if (v < min || v > max)
        return bad(a, ERANGE, "must be between %lu and %lu", min, max);
    *out = v;
    return 0;
}

static int parse_path(const struct arg *a, char *out, size_t outlen)
{
    char why[SHOW_MAX + 200];

    if (sh_spec_path_normalize(a->val, out, outlen, why, sizeof(why)) != 0)
        return bad(a, errno == ENAMETOOLONG ? ERANGE : EINVAL, "%s", why);
    return 0;
}

static int parse_bool(const struct arg *a, bool *out)
{
    if (strcmp(a->val, "yes") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(a->val, "no") == 0) {
        *out = false;
        return 0;
    }
    return bad(a, EINVAL, "expected yes or no");
}

/* Look @val up in the NULL-terminated @names; its index in *out. */
static int parse_word(const struct arg *a, const char *const *names,
                      const char *expect, int *out)
{
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(a->val, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return bad(a, EINVAL, "expected %s", expect);
}

static const char *const fault_names[] = { "fail", "drain", NULL };

const char *sh_config_fault_name(enum sh_node_fault fault)
{
    return (unsigned)fault < 2 ? fault_names[fault] : "?";
}

static const char *const pml_names[] = { "ob1", "ucx", "auto", NULL };

const char *sh_config_pml_name(enum sh_pml pml)
{
    return (unsigned)pml < 3 ? pml_names[pml] : "?";
}

const char *const *sh_config_pml_env(enum sh_pml pml)
{
    static const char *const ob1[] = {
        "OMPI_MCA_pml=ob1",
        "OMPI_MCA_btl=self,vader,tcp",
        "OMPI_MCA_btl_base_warn_component_unused=0",
        NULL,
    };
    static const char *const ucx[] = {
        "OMPI_MCA_pml=ucx",
        "OMPI_MCA_pml_ucx_tls=any",
        "OMPI_MCA_pml_ucx_devices=any",
        "UCX_TLS=tcp,self,sm",
        "UCX_LOG_FILE=stderr",
        NULL,
    };
    static const char *const none[] = { NULL };

    switch (pml) {
    case SH_PML_OB1:
        return ob1;
    case SH_PML_UCX:
        return ucx;
    default:
        return none;
    }
}

static int set_allowed_dest(struct sh_config *cfg, const struct arg *a)
{
    const char *p = a->val;

    cfg->n_allowed_dest = 0;
    for (;;) {
        char raw[PATH_MAX], norm[PATH_MAX], why[SHOW_MAX + 200];
        size_t len = strcspn(p, ":");

        if (len == 0)
            return bad(a, EINVAL, "empty directory in the list (a stray "
                       "':'?)");
        if (len >= sizeof(raw))
            return bad(a, ERANGE, "a directory is too long");
        memcpy(raw, p, len);
        raw[len] = '\0';
        if (sh_spec_path_normalize(raw, norm, sizeof(norm), why,
                                   sizeof(why)) != 0)
            return bad(a, EINVAL, "%s", why);
        if (strcmp(norm, "/") == 0)
            return bad(a, EINVAL, "'/' would allow every path; name the "
                       "node-local directories");
        if (strlen(norm) >= SH_CONFIG_ROOT_MAX)
            return bad(a, ERANGE, "a directory is longer than %d bytes",
                       SH_CONFIG_ROOT_MAX - 1);
        if (cfg->n_allowed_dest == SH_CONFIG_MAX_ROOTS)
            return bad(a, ERANGE, "more than %d directories",
                       SH_CONFIG_MAX_ROOTS);
        memcpy(cfg->allowed_dest[cfg->n_allowed_dest], norm,
               strlen(norm) + 1);
        cfg->n_allowed_dest++;
        p += len;
        if (*p == '\0')
            break;
        p++;
    }
    return 0;
}

static int set_registries(struct sh_config *cfg, const struct arg *a)
{
    char one[SH_CONFIG_LIST_MAX], canon[256], why[SHOW_MAX];
    size_t o = 0;

    if (strlen(a->val) >= sizeof(cfg->allowed_registries))
        return bad(a, ERANGE, "longer than %d bytes", SH_CONFIG_LIST_MAX - 1);
    for (const char *p = a->val;;) {
        size_t len = strcspn(p, ",");

        if (len == 0)
            return bad(a, EINVAL, "empty registry in the list (a stray ',')");
        memcpy(one, p, len);
        one[len] = '\0';
        if (strcmp(one, "*") == 0)
            snprintf(canon, sizeof(canon), "*");
        else if (sh_ref_registry_check(one, canon, sizeof(canon), why, sizeof(why)) != 0)
            return bad(a, EINVAL, "%s", why);
        o += (size_t)snprintf(cfg->allowed_registries + o, sizeof(cfg->allowed_registries) - o,
                              "%s%s", o > 0 ? "," : "", canon);
        p += len;
        if (*p == '\0')
            break;
        p++;
    }
    return 0;
}

static int set_command(const struct arg *a, char *out, size_t outlen, const char *letters,
                       bool need_out)
{
    char why[SHOW_MAX];

    if (strlen(a->val) >= outlen)
        return bad(a, ERANGE, "longer than %zu bytes", outlen - 1);
    if (sh_ref_command_check(a->val, letters, why, sizeof(why)) != 0)
        return bad(a, EINVAL, "%s", why);
    if (need_out && strstr(a->val, "%o") == NULL)
        return bad(a, EINVAL, "no %%o: the importer must be told where to write the image");
    memcpy(out, a->val, strlen(a->val) + 1);
    return 0;
}

/* default_dest: absolute, only %u and %% as escapes; the expansion is
 * checked against allowed_dest once all keys are read. */
static int set_default_dest(struct sh_config *cfg, const struct arg *a)
{
    if (a->val[0] != '/')
        return bad(a, EINVAL, "not an absolute path");
    for (const char *p = a->val; *p != '\0'; p++) {
        if (*p != '%')
            continue;
        if (p[1] != 'u' && p[1] != '%')
            return bad(a, EINVAL, "only %%u (user name) and %%%% may follow "
                       "'%%'");
        p++;
    }
    if (strlen(a->val) >= sizeof(cfg->default_dest))
        return bad(a, ERANGE, "path is too long");
    memcpy(cfg->default_dest, a->val, strlen(a->val) + 1);
    return 0;
}

/* cache_high= / cache_low=: "N%" (0..100) or a size as sh_parse_size reads it. */
static int parse_mark(const struct arg *a, struct sh_cache_mark *out)
{
    size_t n = strlen(a->val);
    uint64_t v;

    if (n > 1 && a->val[n - 1] == '%') {
        char num[32];

        if (n - 1 >= sizeof(num))
            return bad(a, EINVAL, "expected a percentage such as 90%% or a size such as 200G");
        memcpy(num, a->val, n - 1);
        num[n - 1] = '\0';
        if (sh_parse_u64(num, &v) != 0)
            return bad(a, EINVAL, "expected a percentage such as 90%% or a size such as 200G");
        if (v > 100)
            return bad(a, ERANGE, "a percentage of the cache's filesystem is at most 100%%");
        *out = (struct sh_cache_mark){ true, v };
        return 0;
    }
    if (sh_parse_size(a->val, &v) != 0)
        return bad(a, errno, "expected a percentage such as 90%% or a size with unit "
                   "K, M, G or T such as 200G");
    *out = (struct sh_cache_mark){ false, v };
    return 0;
}

static int set_key(struct sh_config *cfg, const struct arg *a, int which)
{
    unsigned long v;
    uint64_t u;
    int w = 0;

    switch (which) {
    case 0:
        return set_allowed_dest(cfg, a);
    case 1:
        return set_default_dest(cfg, a);
    case 2:
        return parse_path(a, cfg->key_file, sizeof(cfg->key_file));
    case 3:
        return parse_path(a, cfg->agent, sizeof(cfg->agent));
    case 4:
        return parse_path(a, cfg->engine, sizeof(cfg->engine));
    case 5:
        if (parse_uint(a, 1, 65535, &v) != 0)
            return -1;
        cfg->port_base = (uint16_t)v;
        return 0;
    case 6:
        if (parse_uint(a, 1, 65535, &v) != 0)
            return -1;
        cfg->port_range = (uint16_t)v;
        return 0;
    case 7:
        if (parse_uint(a, 1, 1024, &v) != 0)
            return -1;
        cfg->fanout = (unsigned)v;
        return 0;
    case 8:
        if (sh_parse_segment_size(a->val, &u) != 0) { /* case F09 */
            if (errno == EINVAL)
                return bad(a, EINVAL, "expected a size such as 8M or 64MiB");
            return bad(a, ERANGE, "must be more than 0 and at most 1G "
                       "(every MPI count is an int)");
        }
        cfg->segment_size = u;
        return 0;
    case 9:
        if (parse_uint(a, 1, SH_MAX_PIPELINE_DEPTH, &v) != 0)
            return -1;
        cfg->pipeline_depth = (unsigned)v;
        return 0;
    case 10:
        if (sh_parse_duration(a->val, &u) != 0)
            return bad(a, errno, "expected a duration such as 600s or 10m");
        if (u < NS_PER_S || u > NS_PER_S * 24 * 3600)
            return bad(a, ERANGE, "must be between 1s and 24h");
        cfg->timeout_ns = u;
        return 0;
    case 11:
        if (sh_check_parse(a->val, &cfg->check) != 0)
            return bad(a, EINVAL, "expected meta, content, size or never");
        return 0;
    case 12:
        if (sh_hash_parse(a->val, &cfg->hash) != 0)
            return bad(a, EINVAL, "expected xxh3 or sha256");
        return 0;
    case 13:
        return parse_path(a, cfg->mpi_env, sizeof(cfg->mpi_env));
    case 14:
        if (parse_word(a, fault_names, "fail or drain", &w) != 0)
            return -1;
        cfg->on_node_fault = (enum sh_node_fault)w;
        return 0;
    case 15:
        return parse_bool(a, &cfg->submit_check);
    case 16:
        return parse_bool(a, &cfg->verbose);
    case 17:
        return parse_bool(a, &cfg->allow_shared_dst);
    case 18:
        if (sh_parse_duration(a->val, &u) != 0)
            return bad(a, errno, "expected a duration such as 60s (0: off)");
        if (u != 0 && (u < NS_PER_S || u > 3600 * NS_PER_S))
            return bad(a, ERANGE, "must be 0 (off) or between 1s and 1h");
        cfg->stall_timeout_ns = u;
        return 0;
    case 19:
        if (sh_parse_duration(a->val, &u) != 0)
            return bad(a, errno, "expected a duration such as 30s");
        if (u < NS_PER_S || u > 3600 * NS_PER_S)
            return bad(a, ERANGE, "must be between 1s and 1h");
        cfg->join_timeout_ns = u;
        return 0;
    case 20:
        if (parse_uint(a, 1, SH_MAX_PIPELINE_DEPTH, &v) != 0)
            return -1;
        cfg->read_ahead = (unsigned)v;
        return 0;
    case 21: {
        unsigned m;

        if (sh_parse_mode(a->val, &m) != 0)
            return bad(a, errno, "expected permission bits in octal such as 0700 or "
                       "0755 (at most 0777: no setuid, setgid or sticky bit)");
        if ((m & 0700) != 0700)
            return bad(a, EINVAL, "the owner needs rwx (07xx) to stage into the "
                       "directories stagehand creates");
        cfg->dest_dir_mode = m;
        return 0;
    }
    case 22:
        if (parse_word(a, pml_names, "ob1, ucx or auto", &w) != 0)
            return -1;
        cfg->pml = (enum sh_pml)w;
        return 0;
    case 23:
        return set_registries(cfg, a);
    case 24: {
        char why[SHOW_MAX];

        if (sh_ref_registry_check(a->val, cfg->default_registry,
                                  sizeof(cfg->default_registry), why, sizeof(why)) != 0)
            return bad(a, EINVAL, "%s", why);
        return 0;
    }
    case 25:
        return set_command(a, cfg->resolver, sizeof(cfg->resolver), "rRptd", false);
    case 26:
        return set_command(a, cfg->importer, sizeof(cfg->importer), "rRptdo", true);
    case 27:
        if (parse_path(a, cfg->cache, sizeof(cfg->cache)) != 0)
            return -1;
        if (strcmp(cfg->cache, "/") == 0)
            return bad(a, EINVAL, "'/' cannot be the cache: name a directory of its own "
                       "on the node's local disk, e.g. /nvme/stagehand-cache");
        return 0;
    case 28:
        return parse_mark(a, &cfg->cache_high);
    case 29:
        return parse_mark(a, &cfg->cache_low);
    case 30:
        if (sh_parse_size(a->val, &u) != 0)
            return bad(a, errno, "expected a size with unit K, M, G or T such as 500G "
                       "(0: no limit)");
        cfg->cache_max = u;
        return 0;
    default:
        return bad(a, EINVAL, "internal error: no parser");
    }
}

/* Order matches set_key(). */
static const char *const keys[] = {
    "allowed_dest", "default_dest", "key_file", "agent", "engine",
    "port_base", "port_range", "fanout", "segment_size", "pipeline_depth",
    "timeout", "check", "hash", "mpi_env", "on_node_fault", "submit_check",
    "verbose", "allow_shared_dst", "stall_timeout", "join_timeout", "read_ahead",
    "dest_dir_mode", "pml", "allowed_registries", "default_registry", "resolver",
    "importer", "cache", "cache_high", "cache_low", "cache_max",
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

/* cache= may lie under an allowed root (sh_config_check_dest keeps users'
 * explicit DSTs out of it) but must not be one or hold one: the cache's
 * root-owned entries must never be in a user's destination directory. */
static int check_cache(const struct sh_config *cfg, const bool *seen, char *err,
                       size_t errlen)
{
    struct arg a = { "cache", cfg->cache, err, errlen };

    if (cfg->cache[0] == '\0') {
        for (size_t k = 28; k <= 30; k++)
            if (seen[k]) {
                sh_errf(err, errlen, "%s is set but cache= is not: eviction marks only "
                        "apply to the node image cache", keys[k]);
                errno = EINVAL;
                return -1;
            }
        return 0;
    }
    if (cfg->cache_low.percent == cfg->cache_high.percent &&
        cfg->cache_low.value > cfg->cache_high.value) {
        const char *u = cfg->cache_low.percent ? "%" : " bytes";

        sh_errf(err, errlen, "cache_low (%llu%s) must not exceed cache_high (%llu%s): "
                "eviction runs from the high mark down to the low one",
                (unsigned long long)cfg->cache_low.value, u,
                (unsigned long long)cfg->cache_high.value, u);
        errno = ERANGE;
        return -1;
    }
    for (size_t i = 0; i < cfg->n_allowed_dest; i++) {
        const char *r = cfg->allowed_dest[i];

        if (strcmp(r, cfg->cache) == 0 || sh_spec_path_is_under(r, cfg->cache))
            return bad(&a, EINVAL, "the cache must not be or hold allowed_dest's %s (users "
                       "write there; the cache is root's): give it a directory of its own, "
                       "e.g. %s/stagehand-cache", r, r);
    }
    return 0;
}

/* Checks that involve several keys. */
static int check_whole(struct sh_config *cfg, const bool *seen, char *err,
                       size_t errlen)
{
    char dir[PATH_MAX];
    struct arg a = { "default_dest", cfg->default_dest, err, errlen };

    if (cfg->n_allowed_dest == 0) {
        sh_errf(err, errlen, "allowed_dest is required (e.g. "
               "allowed_dest=/nvme): the directories users may stage to");
        errno = EINVAL;
        return -1;
    }
    if (cfg->read_ahead > cfg->pipeline_depth) {
        sh_errf(err, errlen, "read_ahead=%u: must not exceed pipeline_depth (%u)",
                cfg->read_ahead, cfg->pipeline_depth);
        errno = ERANGE;
        return -1;
    }
    if (cfg->read_ahead == 0)
        cfg->read_ahead = sh_default_read_ahead(cfg->pipeline_depth);
    if ((unsigned)cfg->port_base + cfg->port_range - 1 > 65535) {
        sh_errf(err, errlen, "port_base=%u port_range=%u: ports beyond 65535",
               cfg->port_base, cfg->port_range);
        errno = ERANGE;
        return -1;
    }
    if (check_cache(cfg, seen, err, errlen) != 0)
        return -1;
    if (!seen[1] &&
        (size_t)snprintf(cfg->default_dest, sizeof(cfg->default_dest),
                         "%s/stage/%%u", cfg->allowed_dest[0]) >=
            sizeof(cfg->default_dest)) {
        sh_errf(err, errlen, "default_dest: derived path is too long");
        errno = ERANGE;
        return -1;
    }
    /* Any valid user name must land under an allowed root. */
    if (sh_config_default_dir(cfg, "user", dir, sizeof(dir)) != 0)
        return bad(&a, errno == ENAMETOOLONG ? ERANGE : EINVAL,
                   "not a valid path once %%u is expanded");
    if (cfg->cache[0] != '\0' && sh_spec_path_is_under(dir, cfg->cache))
        return bad(&a, EINVAL, "must not lie inside cache=%s", cfg->cache);
    if (sh_config_allowed_root(cfg, dir) == NULL) {
        char show[SHOW_MAX];

        return bad(&a, EINVAL, "'%s' is not under allowed_dest",
                   sh_spec_display(dir, show, sizeof(show)));
    }
    return 0;
}

int sh_config_parse(struct sh_config *cfg, int argc, const char *const *argv,
                    char *err, size_t errlen)
{
    bool seen[N_KEYS] = { false };
    char show[SHOW_MAX], key[64];

    sh_config_defaults(cfg);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        size_t klen = eq != NULL ? (size_t)(eq - argv[i]) : 0;
        struct arg a;
        size_t k;

        if (eq == NULL || klen == 0 || klen >= sizeof(key)) {
            sh_errf(err, errlen, "'%s': expected key=value",
                   sh_spec_display(argv[i], show, sizeof(show)));
            errno = EINVAL;
            return -1;
        }
        memcpy(key, argv[i], klen);
        key[klen] = '\0';
        for (k = 0; k < N_KEYS; k++)
            if (strcmp(key, keys[k]) == 0)
                break;
        if (k == N_KEYS) {
            sh_errf(err, errlen, "unknown key '%s' in '%s'",
                   sh_spec_display(key, show, sizeof(show)),
                   sh_spec_display(argv[i], show + 160, 160));
            errno = EINVAL;
            return -1;
        }
        a.key = keys[k];
        a.val = eq + 1;
        a.err = err;
        a.errlen = errlen;
        if (seen[k])
            return bad(&a, EINVAL, "%s is given more than once", keys[k]);
        if (a.val[0] == '\0')
            return bad(&a, EINVAL, "empty value");
        seen[k] = true;
        if (set_key(cfg, &a, (int)k) != 0)
            return -1;
    }
    return check_whole(cfg, seen, err, errlen);
}

int sh_config_default_dir(const struct sh_config *cfg, const char *user,
                          char *out, size_t outlen)
{
    char buf[PATH_MAX];
    size_t o = 0;

    if (user == NULL || user[0] == '\0' || strcmp(user, ".") == 0 ||
        strcmp(user, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    for (const unsigned char *u = (const unsigned char *)user; *u; u++) {
        if (*u == '/' || *u < 0x20 || *u == 0x7f) {
            errno = EINVAL;
            return -1;
        }
    }
    for (const char *p = cfg->default_dest; *p != '\0'; p++) {
        const char *piece = p;
        size_t len = 1;

        if (p[0] == '%' && p[1] == 'u') {
            piece = user;
            len = strlen(user);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            p++;
        }
        if (o + len >= sizeof(buf)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(buf + o, piece, len);
        o += len;
    }
    buf[o] = '\0';
    return sh_spec_path_normalize(buf, out, outlen, NULL, 0);
}

int sh_config_default_fixed(const struct sh_config *cfg, char *out, size_t outlen)
{
    char buf[PATH_MAX];
    size_t o = 0, last_slash = 0;

    /* The template up to its first %u, %% unescaped; without %u, all of
     * it (the directory above it is then the fixed part). */
    for (const char *p = cfg->default_dest; *p != '\0'; p++) {
        if (p[0] == '%' && p[1] == 'u')
            break;
        if (p[0] == '%' && p[1] == '%')
            p++;
        if (o + 1 >= sizeof(buf)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (*p == '/')
            last_slash = o;
        buf[o++] = *p;
    }
    buf[o] = '\0';
    if (o == 0 || buf[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    buf[last_slash == 0 ? 1 : last_slash] = '\0';
    return sh_spec_path_normalize(buf, out, outlen, NULL, 0);
}

const char *sh_config_allowed_root(const struct sh_config *cfg,
                                   const char *dst)
{
    if (cfg->cache[0] != '\0' && sh_cache_dst_kind(cfg->cache, dst, NULL) != SH_CACHE_DST_NONE)
        return cfg->cache;
    for (size_t i = 0; i < cfg->n_allowed_dest; i++)
        if (sh_spec_path_is_under(dst, cfg->allowed_dest[i]))
            return cfg->allowed_dest[i];
    return NULL;
}

int sh_config_check_dest(const struct sh_config *cfg, const char *dst,
                         char *err, size_t errlen)
{
    char roots[SH_CONFIG_MAX_ROOTS * (SH_CONFIG_ROOT_MAX + 2)];
    char show[SHOW_MAX];
    size_t o = 0;
    const char *why = "";
    const char *base = strrchr(dst, '/');
    size_t blen;

    /* Names stagehand itself uses next to a DST: a DST with one of them
     * would be swept, locked or overwritten by another staging. */
    base = base != NULL ? base + 1 : dst;
    blen = strlen(base);
    if (base[0] == '.' &&
        ((blen > 5 && strstr(base, ".stage.") != NULL &&
          strcmp(base + blen - 4, ".tmp") == 0) ||
         (blen > 10 && strcmp(base + blen - 10, ".stagehand") == 0) ||
         (blen > 5 && strcmp(base + blen - 5, ".lock") == 0) ||
         strncmp(base, ".stagehand-marker.", 18) == 0)) {
        sh_errf(err, errlen,
                "destination '%s': names of the form .NAME.stage.*.tmp, "
                ".NAME.lock, .NAME.stagehand and .stagehand-marker.* are "
                "stagehand's own temporary, lock and metadata files; choose "
                "another name", sh_spec_display(dst, show, sizeof(show)));
        errno = EINVAL;
        return -1;
    }
    if (cfg->cache[0] != '\0' && sh_spec_path_is_under(dst, cfg->cache) &&
        sh_cache_dst_kind(cfg->cache, dst, NULL) == SH_CACHE_DST_NONE) {
        sh_errf(err, errlen, "destination '%s' is inside the node image cache %s, which "
                "is stagehand's own: give the image without a destination to use the "
                "cache", sh_spec_display(dst, show, sizeof(show)), cfg->cache);
        errno = EACCES;
        return -1;
    }
    if (sh_config_allowed_root(cfg, dst) != NULL)
        return 0;
    /* "/nvme" itself: the root is a directory, DST must be a file in it */
    for (size_t i = 0; i < cfg->n_allowed_dest; i++) {
        if (strcmp(dst, cfg->allowed_dest[i]) == 0) {
            sh_errf(err, errlen, "destination '%s' is the allowed directory "
                    "itself: give a file name inside it, e.g. %s/image.sqsh",
                    sh_spec_display(dst, show, sizeof(show)), cfg->allowed_dest[i]);
            errno = EACCES;
            return -1;
        }
    }
    roots[0] = '\0';
    for (size_t i = 0; i < cfg->n_allowed_dest && o < sizeof(roots); i++)
        o += (size_t)snprintf(roots + o, sizeof(roots) - o, "%s%s",
                              i > 0 ? ", " : "", cfg->allowed_dest[i]);
    /* case F23: job_container/tmpfs and private-tmp plugins give each job
     * its own /tmp and /dev/shm; the prolog writes in the host's. */
    if (strcmp(dst, "/tmp") == 0 || sh_spec_path_is_under(dst, "/tmp") ||
        strcmp(dst, "/dev/shm") == 0 || sh_spec_path_is_under(dst, "/dev/shm"))
        why = "; /tmp and /dev/shm can be private to each job, so a file "
              "staged there before the job starts would not be visible to it";
    sh_errf(err, errlen,
           "destination '%s' is not under a directory this cluster allows "
           "for staging (%s)%s", sh_spec_display(dst, show, sizeof(show)),
           roots, why);
    errno = EACCES;
    return -1;
}

int sh_config_check_registry(const struct sh_config *cfg, const char *registry,
                             char *err, size_t errlen)
{
    char show[SHOW_MAX];

    if (sh_ref_registry_listed(cfg->allowed_registries, registry))
        return 0;
    if (cfg->allowed_registries[0] == '\0')
        sh_errf(err, errlen, "registry '%s' is not allowed: this cluster allows no "
                "registry images (the site's allowed_registries= is not set)",
                sh_spec_display(registry, show, sizeof(show)));
    else
        sh_errf(err, errlen, "registry '%s' is not allowed on this cluster (allowed: %s)",
                sh_spec_display(registry, show, sizeof(show)), cfg->allowed_registries);
    errno = EACCES;
    return -1;
}
