/* Unit tests: plugstack.conf arguments and the DST path policy. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stagehand/config.h"
#include "stagehand/modes.h"

#include "check_main.h"

#define MAXARGS 8

static int parse(struct sh_config *cfg, char *err, size_t errlen,
                 const char *a0, const char *a1, const char *a2)
{
    const char *argv[MAXARGS];
    int argc = 0;

    if (a0 != NULL)
        argv[argc++] = a0;
    if (a1 != NULL)
        argv[argc++] = a1;
    if (a2 != NULL)
        argv[argc++] = a2;
    return sh_config_parse(cfg, argc, argv, err, errlen);
}

START_TEST(defaults)
{
    struct sh_config cfg;
    char err[512] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           NULL, NULL), 0);
    ck_assert_str_eq(err, "");
    ck_assert_uint_eq(cfg.n_allowed_dest, 1);
    ck_assert_str_eq(cfg.allowed_dest[0], "/nvme");
    ck_assert_str_eq(cfg.default_dest, "/nvme/stage/%u");
    ck_assert_str_eq(cfg.key_file, "/etc/slurm/stagehand.key");
    ck_assert_str_eq(cfg.agent, SH_AGENT_PATH);
    ck_assert_str_eq(cfg.engine, SH_ENGINE_PATH);
    ck_assert_str_eq(cfg.mpi_env, "");
    ck_assert_uint_eq(cfg.port_base, 300);
    ck_assert_uint_eq(cfg.port_range, 200);
    ck_assert_uint_eq(cfg.fanout, 32);
    ck_assert_uint_eq(cfg.segment_size, 1ULL << 19);
    ck_assert_uint_eq(cfg.pipeline_depth, 8);
    ck_assert_uint_eq(cfg.timeout_ns, 600ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.stall_timeout_ns, 60ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.join_timeout_ns, 60ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.read_ahead, 4);
    ck_assert_int_eq(cfg.check, SH_CHECK_META);
    ck_assert_int_eq(cfg.hash, SH_HASH_XXH3);
    ck_assert_int_eq(cfg.on_node_fault, SH_FAULT_FAIL);
    ck_assert(cfg.submit_check);
    ck_assert(!cfg.verbose);
    ck_assert(!cfg.allow_shared_dst);
    ck_assert_str_eq(sh_check_name(cfg.check), "meta");
    ck_assert_str_eq(sh_hash_name(cfg.hash), "xxh3");
    ck_assert_str_eq(sh_config_fault_name(cfg.on_node_fault), "fail");
    ck_assert_int_eq(cfg.pml, SH_PML_OB1);
    ck_assert_str_eq(sh_config_pml_name(cfg.pml), "ob1");
}
END_TEST

START_TEST(every_key)
{
    static const char *const argv[] = {
        "allowed_dest=/nvme:/scratch/local//:/mnt/./ssd",
        "default_dest=/scratch/local/%u/img%%",
        "key_file=/etc/stagehand/site.key",
        "agent=/opt/sh/libexec/stagehand-agent",
        "engine=/opt/sh/bin/stagehand-bcast",
        "port_base=20000",
        "port_range=45536",
        "fanout=4",
        "segment_size=64MiB",
        "pipeline_depth=8",
        "timeout=15m",
        "stall_timeout=10s",
        "join_timeout=45s",
        "read_ahead=6",
        "check=content",
        "hash=sha256",
        "mpi_env=/etc/stagehand/mpi.env",
        "on_node_fault=drain",
        "submit_check=no",
        "verbose=yes",
        "allow_shared_dst=yes",
        "dest_dir_mode=0755",
        "pml=ucx",
        "allowed_registries=Reg.Example:5000,localhost",
        "default_registry=reg.example:5000",
        "resolver=/usr/bin/skopeo,inspect,--format,{{.Digest}},docker://%r",
        "importer=/usr/bin/enroot,import,--output,%o,docker://%R#%p:%t",
    };
    struct sh_config cfg;
    char err[512] = "", dir[PATH_MAX];

    ck_assert_msg(sh_config_parse(&cfg, (int)(sizeof(argv) / sizeof(argv[0])),
                                  argv, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(cfg.n_allowed_dest, 3);
    ck_assert_str_eq(cfg.allowed_dest[0], "/nvme");
    ck_assert_str_eq(cfg.allowed_dest[1], "/scratch/local");
    ck_assert_str_eq(cfg.allowed_dest[2], "/mnt/ssd");
    ck_assert_str_eq(cfg.default_dest, "/scratch/local/%u/img%%");
    ck_assert_str_eq(cfg.key_file, "/etc/stagehand/site.key");
    ck_assert_str_eq(cfg.agent, "/opt/sh/libexec/stagehand-agent");
    ck_assert_str_eq(cfg.engine, "/opt/sh/bin/stagehand-bcast");
    ck_assert_uint_eq(cfg.port_base, 20000);
    ck_assert_uint_eq(cfg.port_range, 45536);
    ck_assert_uint_eq(cfg.fanout, 4);
    ck_assert_uint_eq(cfg.segment_size, 64ULL << 20);
    ck_assert_uint_eq(cfg.pipeline_depth, 8);
    ck_assert_uint_eq(cfg.timeout_ns, 900ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.stall_timeout_ns, 10ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.join_timeout_ns, 45ULL * 1000000000ULL);
    ck_assert_uint_eq(cfg.read_ahead, 6);
    ck_assert_int_eq(cfg.check, SH_CHECK_CONTENT);
    ck_assert_int_eq(cfg.hash, SH_HASH_SHA256);
    ck_assert_str_eq(cfg.mpi_env, "/etc/stagehand/mpi.env");
    ck_assert_int_eq(cfg.on_node_fault, SH_FAULT_DRAIN);
    ck_assert(!cfg.submit_check);
    ck_assert(cfg.verbose);
    ck_assert(cfg.allow_shared_dst);
    ck_assert_int_eq(cfg.pml, SH_PML_UCX);
    ck_assert_str_eq(cfg.allowed_registries, "reg.example:5000,localhost");
    ck_assert_str_eq(cfg.default_registry, "reg.example:5000");
    ck_assert_str_eq(cfg.resolver, "/usr/bin/skopeo,inspect,--format,{{.Digest}},docker://%r");
    ck_assert_str_eq(cfg.importer, "/usr/bin/enroot,import,--output,%o,docker://%R#%p:%t");
    ck_assert_int_eq(sh_config_check_registry(&cfg, "REG.example:5000", err, sizeof(err)), 0);
    ck_assert_int_eq(sh_config_check_registry(&cfg, "reg.example", err, sizeof(err)), -1);
    ck_assert_int_eq(errno, EACCES);
    ck_assert_msg(strstr(err, "registry 'reg.example' is not allowed on this cluster "
                              "(allowed: reg.example:5000,localhost)") != NULL, "%s", err);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "alice", dir, sizeof(dir)),
                     0);
    ck_assert_str_eq(dir, "/scratch/local/alice/img%");
}
END_TEST

START_TEST(check_words)
{
    static const char *const words[] = { "meta", "content", "size", "never" };
    struct sh_config cfg;
    char arg[64], err[512];

    for (int i = 0; i < 4; i++) {
        snprintf(arg, sizeof(arg), "check=%s", words[i]);
        ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                               arg, NULL), 0);
        ck_assert_int_eq((int)cfg.check, i);
        ck_assert_str_eq(sh_check_name(cfg.check), words[i]);
    }
}
END_TEST

struct bad_case {
    const char *arg;    /* added after allowed_dest=/nvme unless NULL */
    const char *first;  /* replaces allowed_dest=/nvme when set */
    int err;
    const char *msg;    /* substring; every message names key and value */
};

static const struct bad_case bad[] = {
    { "colour=blue", NULL, EINVAL, "unknown key 'colour' in 'colour=blue'" },
    { "allowed_dest", NULL, EINVAL, "'allowed_dest': expected key=value" },
    { "=x", NULL, EINVAL, "expected key=value" },
    { "fanout=", NULL, EINVAL, "fanout=: empty value" },
    { "allowed_dest=/scratch", NULL, EINVAL, "given more than once" },
    { "verbose=yes", "verbose=no", EINVAL, "verbose is given more than once" },
    { NULL, "verbose=yes", EINVAL, "allowed_dest is required" },
    { NULL, "allowed_dest=nvme", EINVAL,
      "allowed_dest=nvme: 'nvme' is not an absolute path" },
    { NULL, "allowed_dest=/nvme::/x", EINVAL, "empty directory" },
    { NULL, "allowed_dest=/nvme:", EINVAL, "empty directory" },
    { NULL, "allowed_dest=/nvme/../etc", EINVAL, "'..'" },
    { NULL, "allowed_dest=/", EINVAL, "would allow every path" },
    { NULL, "allowed_dest=//./", EINVAL, "would allow every path" },
    { NULL, "allowed_dest=/a:/b:/c:/d:/e:/f:/g:/h:/i:/j:/k:/l:/m:/n:/o:/p:/q",
      ERANGE, "more than 16" },
    /* case F09: segment size */
    { "segment_size=4G", NULL, ERANGE, "segment_size=4G: must be more than 0 "
      "and at most 1G" },
    { "segment_size=1025M", NULL, ERANGE, "segment_size=1025M" },
    { "segment_size=0", NULL, ERANGE, "segment_size=0" },
    { "segment_size=-1", NULL, EINVAL, "segment_size=-1: expected a size" },
    { "allowed_registries=a.b,,c", NULL, EINVAL, "allowed_registries=a.b,,c: empty registry" },
    { "allowed_registries=a_b", NULL, EINVAL, "registry 'a_b' is not a host name" },
    { "allowed_registries=a.b:0", NULL, EINVAL, "registry 'a.b:0' has a bad port" },
    { "default_registry=a b", NULL, EINVAL, "default_registry=a b: registry 'a b'" },
    { "importer=enroot,import,%o", NULL, EINVAL, "must start with an absolute path" },
    { "importer=/bin/imp,%r", NULL, EINVAL, "importer=/bin/imp,%r: no %o" },
    { "importer=/bin/imp,%x,%o", NULL, EINVAL, "unknown placeholder '%x'" },
    { "importer=/bin/imp,,%o", NULL, EINVAL, "empty argument" },
    { "resolver=/bin/res,%o", NULL, EINVAL, "resolver=/bin/res,%o: unknown placeholder '%o'" },
    { "resolver=/bin/res,", NULL, EINVAL, "empty argument" },
    { "segment_size=8X", NULL, EINVAL, "segment_size=8X" },
    { "segment_size=99999999999999999999", NULL, ERANGE, "segment_size=" },
    { "pipeline_depth=0", NULL, ERANGE, "pipeline_depth=0: must be between" },
    { "pipeline_depth=65", NULL, ERANGE, "pipeline_depth=65" },
    { "pipeline_depth=4k", NULL, EINVAL, "expected a decimal number" },
    { "fanout=0", NULL, ERANGE, "fanout=0" },
    { "fanout=1025", NULL, ERANGE, "fanout=1025" },
    { "fanout=99999999999999999999999", NULL, ERANGE, "fanout=" },
    { "port_base=0", NULL, ERANGE, "port_base=0: must be between 1" },
    { "port_base=65536", NULL, ERANGE, "port_base=65536" },
    { "port_range=0", NULL, ERANGE, "port_range=0" },
    { "port_base=65000", "port_range=1000", ERANGE,
      "port_base=65000 port_range=1000: ports beyond 65535" },
    { "timeout=0", NULL, ERANGE, "timeout=0: must be between 1s and 24h" },
    { "timeout=25h", NULL, ERANGE, "timeout=25h" },
    { "timeout=10y", NULL, EINVAL, "timeout=10y: expected a duration" },
    /* case F22 */
    { "stall_timeout=500ms", NULL, ERANGE, "stall_timeout=500ms: must be 0 (off) or between 1s and 1h" },
    { "stall_timeout=2h", NULL, ERANGE, "stall_timeout=2h" },
    { "join_timeout=0", NULL, ERANGE, "join_timeout=0: must be between 1s and 1h" },
    { "join_timeout=2h", NULL, ERANGE, "join_timeout=2h" },
    { "join_timeout=soon", NULL, EINVAL, "join_timeout=soon" },
    { "read_ahead=0", NULL, ERANGE, "read_ahead=0" },
    { "read_ahead=65", NULL, ERANGE, "read_ahead=65" },
    { "read_ahead=two", NULL, EINVAL, "read_ahead=two" },
    { "stall_timeout=x", NULL, EINVAL, "stall_timeout=x: expected a duration" },
    { "check=always", NULL, EINVAL, "check=always: expected meta, content" },
    { "hash=md5", NULL, EINVAL, "hash=md5: expected xxh3 or sha256" },
    { "on_node_fault=reboot", NULL, EINVAL, "on_node_fault=reboot" },
    { "submit_check=true", NULL, EINVAL, "submit_check=true: expected yes or "
      "no" },
    { "verbose=1", NULL, EINVAL, "verbose=1" },
    { "pml=cm", NULL, EINVAL, "pml=cm: expected ob1, ucx or auto" },
    { "pml=UCX", NULL, EINVAL, "pml=UCX: expected ob1, ucx or auto" },
    { "allow_shared_dst=Yes", NULL, EINVAL, "allow_shared_dst=Yes" },
    { "key_file=stagehand.key", NULL, EINVAL,
      "key_file=stagehand.key: 'stagehand.key' is not an absolute path" },
    { "agent=bin/agent", NULL, EINVAL, "agent=bin/agent" },
    { "engine=/opt/../bin/x", NULL, EINVAL, "engine=/opt/../bin/x" },
    { "mpi_env=mpi.env", NULL, EINVAL, "mpi_env=mpi.env" },
    { "default_dest=/scratch/%u", NULL, EINVAL,
      "default_dest=/scratch/%u: '/scratch/user' is not under allowed_dest" },
    { "default_dest=/nvme2/%u", NULL, EINVAL, "not under allowed_dest" },
    { "default_dest=/nvme", NULL, EINVAL, "not under allowed_dest" },
    { "default_dest=stage/%u", NULL, EINVAL, "default_dest=stage/%u: not an "
      "absolute path" },
    { "default_dest=/nvme/%x", NULL, EINVAL, "only %u (user name)" },
    { "default_dest=/nvme/%", NULL, EINVAL, "only %u" },
    { "default_dest=/nvme/../%u", NULL, EINVAL, "not a valid path" },
    { "key_file=/etc/\x1b[31m", NULL, EINVAL, "\\x1b[31m" },
};

/* Each pml's engine environment: KEY=VALUE strings, the list the agent
 * passes where the site's mpi_env does not set the key. */
static bool env_has(const char *const *env, const char *want)
{
    for (size_t i = 0; env[i] != NULL; i++) {
        ck_assert_ptr_nonnull(strchr(env[i], '='));
        if (strcmp(env[i], want) == 0)
            return true;
    }
    return false;
}

START_TEST(pml_env)
{
    const char *const *ob1 = sh_config_pml_env(SH_PML_OB1);
    const char *const *ucx = sh_config_pml_env(SH_PML_UCX);
    size_t n = 0;

    ck_assert(env_has(ob1, "OMPI_MCA_pml=ob1"));
    ck_assert(env_has(ob1, "OMPI_MCA_btl=self,vader,tcp"));
    ck_assert(env_has(ucx, "OMPI_MCA_pml=ucx"));
    ck_assert(env_has(ucx, "OMPI_MCA_pml_ucx_tls=any"));
    ck_assert(env_has(ucx, "OMPI_MCA_pml_ucx_devices=any"));
    ck_assert(env_has(ucx, "UCX_TLS=tcp,self,sm"));
    ck_assert(env_has(ucx, "UCX_LOG_FILE=stderr"));
    ck_assert(!env_has(ucx, "OMPI_MCA_pml=ob1"));
    ck_assert_ptr_null(sh_config_pml_env(SH_PML_AUTO)[0]);
    ck_assert_ptr_null(sh_config_pml_env((enum sh_pml)7)[0]);
    while (ob1[n] != NULL)
        n++;
    ck_assert_uint_le(n, SH_CONFIG_PML_ENV_MAX);
    for (n = 0; ucx[n] != NULL; n++)
        ;
    ck_assert_uint_le(n, SH_CONFIG_PML_ENV_MAX);
    ck_assert_str_eq(sh_config_pml_name(SH_PML_AUTO), "auto");
    ck_assert_str_eq(sh_config_pml_name((enum sh_pml)7), "?");
}
END_TEST

/* The phase names are the keys of the engine's JSON "seconds" object, read
 * back by the agent and by bench/run.sh: an interface, so spelled out here. */
START_TEST(phase_names)
{
    static const char *const want[] = { "start-up", "metadata", "pre-check",
                                        "transfer", "verify", "publish" };

    ck_assert_int_eq(SH_PH_COUNT, 6);
    for (int p = 0; p < SH_PH_COUNT; p++)
        ck_assert_str_eq(sh_phase_name((enum sh_phase)p), want[p]);
    ck_assert_str_eq(sh_phase_name(SH_PH_COUNT), "?");
    ck_assert_str_eq(sh_phase_name((enum sh_phase)-1), "?");
}
END_TEST

START_TEST(rejects)
{
    const struct bad_case *c = &bad[_i];
    struct sh_config cfg;
    char err[1024] = "";
    const char *first = c->first != NULL ? c->first : "allowed_dest=/nvme";
    int rc;

    /* Cases with .first set and .arg NULL run with first alone; the
     * port/verbose pairs pass both. */
    errno = 0;
    if (c->first != NULL && c->arg != NULL)
        rc = parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", c->arg,
                   first);
    else
        rc = parse(&cfg, err, sizeof(err), first, c->arg, NULL);
    ck_assert_msg(rc == -1, "'%s' accepted", c->arg ? c->arg : first);
    ck_assert_msg(errno == c->err, "'%s': errno %d want %d (%s)",
                  c->arg ? c->arg : first, errno, c->err, err);
    ck_assert_msg(strstr(err, c->msg) != NULL, "'%s' lacks '%s'", err,
                  c->msg);
}
END_TEST

/* Without allowed_registries= no registry image is allowed; the default
 * resolver and importer are the shipped script. */
START_TEST(registry_defaults)
{
    struct sh_config cfg;
    char err[512] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", NULL, NULL), 0);
    ck_assert_str_eq(cfg.allowed_registries, "");
    ck_assert_str_eq(cfg.default_registry, "");
    ck_assert_str_eq(cfg.importer, SH_IMPORT_PATH ",import,%r,%o");
    ck_assert_str_eq(cfg.resolver, SH_IMPORT_PATH ",digest,%r");
    ck_assert_int_eq(sh_config_check_registry(&cfg, "reg.example", err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "allows no registry images") != NULL, "%s", err);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "allowed_registries=*",
                           NULL), 0);
    ck_assert_int_eq(sh_config_check_registry(&cfg, "any.where:1", err, sizeof(err)), 0);
}
END_TEST

START_TEST(sizes_with_units)
{
    struct sh_config cfg;
    char err[512];

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "segment_size=1G", NULL), 0);
    ck_assert_uint_eq(cfg.segment_size, 1ULL << 30);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "segment_size=1", NULL), 0);
    ck_assert_uint_eq(cfg.segment_size, 1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "segment_size=512k", NULL), 0);
    ck_assert_uint_eq(cfg.segment_size, 512ULL << 10);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "timeout=250ms", NULL), -1); /* under 1s */
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "timeout=24h", NULL), 0);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "port_base=64536", "port_range=1000"), 0);
}
END_TEST

/* cache=: apart from every allowed root; its job directories are DSTs with
 * the cache as their root, its entries never are. */
START_TEST(cache_key)
{
    struct sh_config cfg;
    char err[1024] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme/stage", NULL, NULL), 0);
    ck_assert_str_eq(cfg.cache, "");
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme/stage",
                           "cache=/nvme//stagehand-cache/", NULL), 0);
    ck_assert_str_eq(cfg.cache, "/nvme/stagehand-cache");
    ck_assert_str_eq(sh_config_allowed_root(&cfg, "/nvme/stagehand-cache/job/7/a.sqsh"),
                     "/nvme/stagehand-cache");
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/stagehand-cache/job/a.sqsh", err,
                                          sizeof(err)), 0);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/stagehand-cache/entries/k-1", err,
                                          sizeof(err)), -1);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/stagehand-cache/x", err,
                                          sizeof(err)), -1);
    /* inside an allowed root: users' explicit DSTs stay out of it */
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/nvme/c",
                           NULL), 0);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/c/entries/k-1", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "node image cache"));
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/c/job/5/a", err, sizeof(err)), 0);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/other", err, sizeof(err)), 0);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/nvme",
                           NULL), -1);
    ck_assert_ptr_nonnull(strstr(err, "must not be or hold"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/nvme/stage",
                           NULL), -1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme/c/x", "cache=/nvme/c",
                           NULL), -1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/", NULL),
                     -1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=rel", NULL),
                     -1);
}
END_TEST

/* cache_high= / cache_low= / cache_max=: percent or size, validated at
 * plugin init (issue 34, eviction). */
START_TEST(cache_marks)
{
    struct sh_config cfg;
    char err[1024] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c", NULL), 0);
    ck_assert(cfg.cache_high.percent && cfg.cache_high.value == 90);
    ck_assert(cfg.cache_low.percent && cfg.cache_low.value == 80);
    ck_assert_uint_eq(cfg.cache_max, 0);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "cache=/c", "cache_high=200G",
                           "cache_low=100G"), -1); /* allowed_dest missing */
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_high=100%"), 0);
    ck_assert(cfg.cache_high.percent && cfg.cache_high.value == 100);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_high=2G"), 0);
    ck_assert(!cfg.cache_high.percent && cfg.cache_high.value == 2ULL << 30);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_max=256M"), 0);
    ck_assert_uint_eq(cfg.cache_max, 256ULL << 20);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_high=101%"), -1);
    ck_assert_ptr_nonnull(strstr(err, "cache_high"));
    ck_assert_ptr_nonnull(strstr(err, "at most 100%"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_low=5X"), -1);
    ck_assert_ptr_nonnull(strstr(err, "cache_low"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_low=%"), -1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_max=-1"), -1);
    ck_assert_ptr_nonnull(strstr(err, "cache_max"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "cache=/c",
                           "cache_low=95%"), -1); /* above the default high 90% */
    ck_assert_ptr_nonnull(strstr(err, "must not exceed cache_high"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "cache_max=1G", NULL), -1);
    ck_assert_ptr_nonnull(strstr(err, "cache= is not"));
    ck_assert_uint_eq(sh_cache_mark_bytes(&(struct sh_cache_mark){ true, 90 }, 1000), 900);
    ck_assert_uint_eq(sh_cache_mark_bytes(&(struct sh_cache_mark){ true, 100 }, UINT64_MAX),
                      UINT64_MAX);
    ck_assert_uint_eq(sh_cache_mark_bytes(&(struct sh_cache_mark){ false, 7 }, 1000), 7);
}
END_TEST

/* Component-wise policy: /nvme2 is not under /nvme. */
START_TEST(dest_policy)
{
    struct sh_config cfg;
    char err[1024] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err),
                           "allowed_dest=/nvme:/scratch/local", NULL, NULL),
                     0);
    ck_assert_str_eq(sh_config_allowed_root(&cfg, "/nvme/img.sqsh"), "/nvme");
    ck_assert_str_eq(sh_config_allowed_root(&cfg, "/scratch/local/u/i"),
                     "/scratch/local");
    ck_assert_ptr_null(sh_config_allowed_root(&cfg, "/nvme2/img.sqsh"));
    ck_assert_ptr_null(sh_config_allowed_root(&cfg, "/nvme"));
    ck_assert_ptr_null(sh_config_allowed_root(&cfg, "/scratch/localx/i"));
    ck_assert_ptr_null(sh_config_allowed_root(&cfg, "/scratch/i"));
    ck_assert_ptr_null(sh_config_allowed_root(&cfg, "/etc/passwd"));

    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/a", err, sizeof(err)),
                     0);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme2/a", err,
                                          sizeof(err)), -1);
    ck_assert_int_eq(errno, EACCES);
    ck_assert_ptr_nonnull(strstr(err, "destination '/nvme2/a' is not under a "
                                      "directory this cluster allows for "
                                      "staging (/nvme, /scratch/local)"));
    ck_assert_ptr_null(strstr(err, "/tmp"));
    /* the allowed directory itself is not a destination file */
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "is the allowed directory itself"));
    /* stagehand's own file names next to a DST are refused */
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/.x.stage.1.n1.1.tmp", err,
                                          sizeof(err)), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "stagehand's own temporary"));
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/.x.lock", err, sizeof(err)), -1);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/.x.stagehand", err, sizeof(err)), -1);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/.stagehand-marker.1.2.0.n1", err,
                                          sizeof(err)), -1);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/.hidden.sqsh", err, sizeof(err)), 0);
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/nvme/p/x.stage.tmp", err, sizeof(err)), 0);
    /* case F23: /tmp and /dev/shm may be per-job namespaces */
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/tmp/img.sqsh", err,
                                          sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "private to each job"));
    ck_assert_int_eq(sh_config_check_dest(&cfg, "/dev/shm/img.sqsh", err,
                                          sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "private to each job"));
}
END_TEST

START_TEST(default_dir)
{
    struct sh_config cfg;
    char err[512], dir[PATH_MAX];

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           NULL, NULL), 0);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "alice", dir, sizeof(dir)),
                     0);
    ck_assert_str_eq(dir, "/nvme/stage/alice");
    ck_assert_int_eq(sh_config_default_dir(&cfg, "a/b", dir, sizeof(dir)),
                     -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "..", dir, sizeof(dir)), -1);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "", dir, sizeof(dir)), -1);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "a\nb", dir, sizeof(dir)),
                     -1);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "alice", dir, 8), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);

    /* the fixed part, made by root at slurmd start (issue 30 item 3) */
    ck_assert_int_eq(sh_config_default_fixed(&cfg, dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/nvme/stage");

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "default_dest=/nvme/%u/%u-cache", NULL), 0);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "bob", dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/nvme/bob/bob-cache");
    ck_assert_int_eq(sh_config_default_fixed(&cfg, dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/nvme");
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "default_dest=/nvme/a%%b/c/u-%u/x", NULL), 0);
    ck_assert_int_eq(sh_config_default_fixed(&cfg, dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/nvme/a%b/c");
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "default_dest=/nvme/shared", NULL), 0);
    ck_assert_int_eq(sh_config_default_dir(&cfg, "bob", dir, sizeof(dir)), 0);
    ck_assert_str_eq(dir, "/nvme/shared");
}
END_TEST

/* read_ahead: at most pipeline_depth; by default 4, or the depth if smaller. */
START_TEST(read_ahead_and_depth)
{
    const char *over[] = { "allowed_dest=/nvme", "pipeline_depth=4", "read_ahead=8" };
    const char *small[] = { "allowed_dest=/nvme", "pipeline_depth=2" };
    struct sh_config cfg;
    char err[512] = "";

    errno = 0;
    ck_assert_int_eq(sh_config_parse(&cfg, 3, over, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_msg(strstr(err, "read_ahead=8: must not exceed pipeline_depth (4)") != NULL,
                  "%s", err);
    ck_assert_int_eq(sh_config_parse(&cfg, 2, small, err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg.read_ahead, 2);
}
END_TEST

/* issue 30: the directories made for DST are private unless the site says */
START_TEST(dest_dir_mode_key)
{
    struct sh_config cfg;
    char err[512] = "";

    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", NULL, NULL), 0);
    ck_assert_uint_eq(cfg.dest_dir_mode, 0700);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "dest_dir_mode=750",
                           NULL), 0);
    ck_assert_uint_eq(cfg.dest_dir_mode, 0750);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "dest_dir_mode=0777", NULL), 0);
    ck_assert_uint_eq(cfg.dest_dir_mode, 0777);
    /* not octal, special bits, an owner without rwx */
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "dest_dir_mode=0789", NULL), -1);
    ck_assert_ptr_nonnull(strstr(err, "dest_dir_mode=0789: expected permission bits in "
                                      "octal"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "dest_dir_mode=1777", NULL), -1);
    ck_assert_ptr_nonnull(strstr(err, "no setuid, setgid or sticky bit"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "dest_dir_mode=0500", NULL), -1);
    ck_assert_ptr_nonnull(strstr(err, "the owner needs rwx"));
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme", "dest_dir_mode=",
                           NULL), -1);
    ck_assert_int_eq(parse(&cfg, err, sizeof(err), "allowed_dest=/nvme",
                           "dest_dir_mode=rwx", NULL), -1);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_add_test(tc, defaults);
    tcase_add_test(tc, every_key);
    tcase_add_test(tc, pml_env);
    tcase_add_test(tc, check_words);
    tcase_add_test(tc, phase_names);
    tcase_add_loop_test(tc, rejects, 0, (int)(sizeof(bad) / sizeof(bad[0])));
    tcase_add_test(tc, sizes_with_units);
    tcase_add_test(tc, registry_defaults);
    tcase_add_test(tc, dest_policy);
    tcase_add_test(tc, cache_key);
    tcase_add_test(tc, cache_marks);
    tcase_add_test(tc, default_dir);
    tcase_add_test(tc, read_ahead_and_depth);
    tcase_add_test(tc, dest_dir_mode_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(config_suite());
}
