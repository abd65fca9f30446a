/* End-to-end test of the agent's control plane and PMIx host on ONE host.
 *
 * Starts N agent processes on 127.0.0.1, each a "node" with its own injected
 * node name (node0..nodeN-1), port, runtime dir and PMIx server. They form the
 * authenticated control tree, the root draws a fresh namespace and broadcasts
 * it, and every agent launches one rank of the engine under its own PMIx
 * server with the fences served by the control plane.
 *
 * Usage: pmix_launch_test [-n N] [-k FANOUT] [-t SECONDS] [-x EXPECTED_RC]
 *                         [-S BYTES] [-E VAR=VALUE]... ENGINE [ARG...]
 * ENGINE is an absolute path; in an ARG "%n" becomes the node's name and
 * "%t" the test's scratch directory, so the "nodes" can use different local
 * paths on one host. -S writes BYTES of random data to %t/src.img first and,
 * after a successful run, requires every %t/dst-<node>.img to equal it
 * (staging with the real engine). -E adds a variable to the engine's
 * otherwise minimal environment. -U NODE gives that node a job user other
 * than the process's identity (the host must refuse, doc/design.md §6). -R REPS
 * runs REPS engine phases in each agent process (one per image). Exit 0 when every agent's sh_pmix_run returned
 * EXPECTED_RC (0 by default; 1 = the run must fail on every node, with a
 * message naming the failed node). */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stagehand/clock.h"
#include "core/agent/ctl.h"
#include "stagehand/log.h"
#include "core/agent/pmix_host.h"

#define MAXN 16

#define MAXENV 8

static char names_buf[MAXN][16];
static const char *extra_env[MAXENV];
static int nextra;
static int wrong_uid_node = -1;   /* -U: this node claims another job user */
static int repeats = 1;           /* -R: engine phases per agent process */
static const char *names[MAXN];
static const char *addrs[MAXN];

static int agent(uint32_t n, uint32_t k, uint32_t i, uint64_t jobid, uint16_t port,
                 int64_t deadline, const char *base, char **engine_argv, int expect_fail)
{
    unsigned char kjob[SH_KEY_LEN];
    struct sh_ctl_cfg cfg = {
        .nnodes = n, .index = i, .fanout = k, .names = names, .addrs = addrs,
        .bind_addr = "127.0.0.1", .port_base = port, .port_range = 64,
        .jobid = jobid, .stepid = 0, .kjob = kjob,
    };
    struct sh_pmix_cfg pcfg = { 0 };
    struct sh_pmix_outcome out;
    struct sh_ctl *ctl = NULL;
    unsigned char *ns = NULL;
    uint32_t nslen = 0;
    char nspace[300], tmpdir[512], jobenv[64], nodelist[64], tmpenv[600];
    char jobidstr[32];
    const char *envp[16 + MAXENV];

    snprintf(jobidstr, sizeof(jobidstr), "%llu", (unsigned long long)jobid);
    sh_log_set_identity("agent", jobidstr, names[i], -1);
    if (getenv("SH_TEST_VERBOSE") != NULL)
        sh_log_set_level(SH_LOG_DEBUG);
    /* Every agent would derive this from the site key (sh_key_derive_job). */
    memset(kjob, 0x5c, sizeof(kjob));
    snprintf(tmpdir, sizeof(tmpdir), "%s/%s", base, names[i]);
    if (mkdir(tmpdir, 0700) != 0) {
        sh_error("test", "mkdir %s: %s", tmpdir, strerror(errno));
        return 2;
    }
    if (sh_ctl_join(&cfg, deadline, &ctl) != 0)
        return 3;
    for (char **a = engine_argv; *a != NULL; a++) {
        static const char *const keys[2] = { "%n", "%t" };
        const char *vals[2] = { names[i], base };

        for (int x = 0; x < 2; x++) {
            char *pct = strstr(*a, keys[x]);
            size_t len;
            char *sub;

            if (pct == NULL)
                continue;
            len = strlen(*a) + strlen(vals[x]);
            sub = malloc(len);
            if (sub == NULL)
                return 4;
            snprintf(sub, len, "%.*s%s%s", (int)(pct - *a), *a, vals[x], pct + 2);
            *a = sub;   /* this process only; freed at exit */
        }
    }

    /* A minimal environment built from scratch (F19): no PATH, no HOME. */
    snprintf(jobenv, sizeof(jobenv), "SLURM_JOBID=%s", jobidstr);
    snprintf(nodelist, sizeof(nodelist), "SLURM_NODELIST=node[0-%u]", n - 1);
    snprintf(tmpenv, sizeof(tmpenv), "TMPDIR=%s", tmpdir);
    envp[0] = jobenv;
    envp[1] = nodelist;
    envp[2] = "SLURM_STEP_ID=0";
    envp[3] = tmpenv;
    /* one host: the "nodes" talk over loopback (Open MPI excludes lo by default) */
    envp[4] = "OMPI_MCA_pml=ob1";
    envp[5] = "OMPI_MCA_btl=self,tcp";
    envp[6] = "OMPI_MCA_btl_tcp_if_include=lo";
    envp[7] = "OMPI_MCA_oob_tcp_if_include=lo";
    for (int x = 0; x < nextra; x++)
        envp[8 + x] = extra_env[x];
    envp[8 + nextra] = NULL;

    pcfg.ctl = ctl;
    pcfg.nspace = nspace;
    pcfg.hosts = names;
    pcfg.tmpdir = tmpdir;
    pcfg.uid = getuid() + ((int)i == wrong_uid_node ? 1 : 0);
    pcfg.gid = getgid();
    pcfg.argv = (const char *const *)engine_argv;
    pcfg.envp = envp;
    pcfg.deadline_ns = deadline;
    for (int rep = 0; rep < repeats; rep++) {
        /* A fresh namespace per run, drawn by the root. */
        if (i == 0 && sh_pmix_make_nspace(jobid, nspace, sizeof(nspace)) != 0)
            return 4;
        if (sh_ctl_bcast(ctl, nspace, i == 0 ? (uint32_t)strlen(nspace) + 1 : 0, &ns,
                         &nslen, deadline) != 0 || nslen == 0 || ns[nslen - 1] != '\0')
            return 5;
        snprintf(nspace, sizeof(nspace), "%s", (char *)ns);
        free(ns);
        ns = NULL;
        int rc = sh_pmix_run(&pcfg, &out);
        if (rc == 0)
            sh_info("test", "engine phase %d done: %u fences, every node succeeded",
                    rep + 1, out.fences);
        else
            sh_error("test", "engine phase %d failed (%s): %s", rep + 1, strerror(errno),
                     out.message);
        sh_pmix_outcome_free(&out);
        if (expect_fail ? rc == 0 || out.message[0] == '\0' : rc != 0) {
            sh_ctl_close(ctl);
            return expect_fail ? 6 : 7;
        }
    }
    sh_ctl_close(ctl);
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t n = 3, k = 2;
    long seconds = 60;
    int expect_fail = 0;
    char base[] = "/tmp/sh-pmix-test.XXXXXX";
    pid_t pid[MAXN];
    uint64_t jobid;
    uint16_t port;
    int64_t deadline;
    int opt, failed = 0;
    unsigned long long src_bytes = 0;
    char cmd[512];

    while ((opt = getopt(argc, argv, "+n:k:t:x:S:E:U:R:")) != -1) {
        switch (opt) {
        case 'R': repeats = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 'U': wrong_uid_node = atoi(optarg); break;
        case 'E':
            if (nextra == MAXENV || strchr(optarg, '=') == NULL)
                return 2;
            extra_env[nextra++] = optarg;
            break;
        case 'S': src_bytes = strtoull(optarg, NULL, 10); break;
        case 'n': n = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'k': k = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': seconds = strtol(optarg, NULL, 10); break;
        case 'x': expect_fail = atoi(optarg) != 0; break;
        default: return 2;
        }
    }
    if (optind >= argc || argv[optind][0] != '/' || n == 0 || n > MAXN || k == 0 ||
        seconds <= 0) {
        fprintf(stderr, "usage: %s [-n N<=%d] [-k FANOUT] [-t SECONDS] [-x 0|1] "
                "[-S BYTES] [-E VAR=VALUE] /abs/ENGINE [ARG...]\n", argv[0], MAXN);
        return 2;
    }
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    /* The job user reaches its per-node dirs (the test may run as root). */
    chmod(base, 0755);
    if (src_bytes > 0) {
        snprintf(cmd, sizeof(cmd), "head -c %llu /dev/urandom > '%s/src.img'",
                 src_bytes, base);
        if (system(cmd) != 0) {
            fprintf(stderr, "pmix_launch_test: cannot create the source\n");
            return 2;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        snprintf(names_buf[i], sizeof(names_buf[i]), "node%u", i);
        names[i] = names_buf[i];
        addrs[i] = "127.0.0.1";
    }
    jobid = 900000u + (uint64_t)getpid();
    port = (uint16_t)(42000 + (unsigned)getpid() % 16000);
    deadline = sh_now_ns() + seconds * SH_NS_PER_S;
    for (uint32_t i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] < 0) {
            perror("fork");
            return 2;
        }
        if (pid[i] == 0)
            _exit(agent(n, k, i, jobid, port, deadline, base, argv + optind,
                        expect_fail));
    }
    for (uint32_t i = 0; i < n; i++) {
        int status = 0;

        /* Each agent ends by the deadline (plus kill grace) on its own. */
        if (waitpid(pid[i], &status, 0) != pid[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "pmix_launch_test: agent %u failed (status 0x%x)\n", i,
                    status);
            failed = 1;
        }
    }
    for (uint32_t i = 0; src_bytes > 0 && !failed && !expect_fail && i < n; i++) {
        snprintf(cmd, sizeof(cmd), "cmp '%s/src.img' '%s/dst-%s.img'", base, base,
                 names[i]);
        if (system(cmd) != 0) {
            fprintf(stderr, "pmix_launch_test: %s's copy differs\n", names[i]);
            failed = 1;
        } else {
            printf("pmix_launch_test: %s's copy is identical (%llu bytes)\n",
                   names[i], src_bytes);
        }
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "pmix_launch_test: cannot remove %s\n", base);
    if (!failed)
        printf("pmix_launch_test: %u agents, all as expected\n", n);
    return failed;
}
