/* Control plane (core/agent/ctl.h): trees of agents as separate processes on
 * 127.0.0.1: allgather, broadcast, gather, deadlines that name the missing
 * nodes (case F21), ports held by others, sentinels and their wake-ups. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stagehand/clock.h"
#include "core/agent/ctl.h"
#include "core/agent/handshake.h"
#include "stagehand/log.h"

#include "check_main.h"

/* ---- trees of processes on 127.0.0.1 ---------------------------------- */

#define MAXN 16

struct tree {
    uint32_t n, k;
    uint64_t jobid;
    uint16_t port_base;
    int absent;              /* index that never starts, -1 for none */
    int keyless;             /* index with a wrong key, -1 for none */
    uint32_t expect_missing; /* bitmask of non-OK nodes in the allgather */
    uint32_t expect_nojoin;  /* bitmask of nodes whose join must fail */
    const char *expect_msg;  /* sh_ctl_format_missing at every node */
    int64_t hs_timeout;      /* 0: 1 s */
    int64_t join_s;          /* join deadline in seconds; 0: 8 (loaded CI, ASan) */
    int64_t t0;              /* common start (CLOCK_MONOTONIC is system-wide) */
    int late;                /* index that starts late_ms after the others, -1 for none */
    int64_t late_ms;
    uint32_t sentinels;      /* bitmask of nodes that start as a sentinel: they bind
                                their port (sh_ctl_bind) and join only when a
                                connection wakes them (spank/sentinel.c) */
};

static const char *const names[MAXN] = {
    "h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7",
    "h8", "h9", "h10", "h11", "h12", "h13", "h14", "h15",
};
static const char *const addrs[MAXN] = {
    "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1",
    "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1",
    "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1",
};

/* One agent; returns its exit code (0 = behaved as expected). */
static int node_main(const struct tree *t, uint32_t i)
{
    unsigned char kjob[SH_KEY_LEN];
    struct sh_ctl_cfg cfg = {
        .nnodes = t->n, .index = i, .fanout = t->k, .names = names, .addrs = addrs,
        .bind_addr = "127.0.0.1", .port_base = t->port_base, .port_range = 48,
        .port_probe = 48, .jobid = t->jobid, .stepid = 0, .kjob = kjob,
        .level_margin_ns = 200 * SH_NS_PER_MS,
        .hs_timeout_ns = t->hs_timeout != 0 ? t->hs_timeout : SH_NS_PER_S,
    };
    struct sh_ctl *ctl = NULL;
    struct sh_ctl_result res;
    unsigned char *data = NULL;
    uint32_t len = 0;
    char blob[32], msg[256];
    int rc;

    alarm(30);
    if ((int)i == t->late && t->late_ms > 0)
        usleep((useconds_t)(t->late_ms * 1000));
    memset(kjob, 0x77, sizeof(kjob));
    if ((int)i == t->keyless)
        kjob[0] ^= 1;
    /* Like the agents, all nodes share absolute deadlines: per-node "now + x"
     * would let a node that waited long for a missing child arrive after its
     * parent gave up on it. */
    int64_t d = t->t0 + (t->join_s != 0 ? t->join_s : 8) * SH_NS_PER_S;

    if (t->sentinels & (1u << i)) {
        uint16_t port = 0;
        struct pollfd pfd = { .events = POLLIN };

        pfd.fd = sh_ctl_bind("127.0.0.1", t->jobid, 0, t->port_base, 48, 48, 16, &port);
        if (pfd.fd < 0)
            return 30;
        if (poll(&pfd, 1, 6000) != 1)
            return 31; /* never woken */
        cfg.inherit_listener = true;
        cfg.listen_fd = pfd.fd;
        cfg.wait_wake = true; /* as the agent a sentinel starts */
    }
    rc = sh_ctl_join(&cfg, d, &ctl);
    if (t->expect_nojoin & (1u << i))
        return rc == -1 && errno == ETIMEDOUT ? 0 : 10;
    if (rc != 0)
        return 11;
    {
        /* the root has the earliest deadline here: everyone adopts it */
        int64_t mine = d + 3 * SH_NS_PER_S + (int64_t)i * SH_NS_PER_MS;
        int64_t root = d + 3 * SH_NS_PER_S;

        if (sh_ctl_sync_deadline(ctl, &mine) != 0 || mine > root + 100 * SH_NS_PER_MS ||
            mine < root - 500 * SH_NS_PER_MS)
            return 22;
    }
    snprintf(blob, sizeof(blob), "node-%u", i);
    d += 3 * SH_NS_PER_S;
    if (sh_ctl_allgather(ctl, i * 10, blob, (uint32_t)strlen(blob) + 1, d, &res) != 0)
        return 12;
    if (res.nnodes != t->n)
        return 13;
    for (uint32_t j = 0; j < t->n; j++) {
        if (t->expect_missing & (1u << j)) {
            if (res.entry[j].state == SH_CTL_OK)
                return 14;
            continue;
        }
        snprintf(blob, sizeof(blob), "node-%u", j);
        if (res.entry[j].state != SH_CTL_OK || res.entry[j].tag != j * 10 ||
            res.entry[j].len != strlen(blob) + 1 ||
            strcmp((char *)res.entry[j].data, blob) != 0) {
            sh_ctl_format_missing(ctl, &res, msg, sizeof(msg));
            fprintf(stderr, "node %u: entry %u wrong (state %u): %s\n", i, j,
                    res.entry[j].state, msg);
            return 15;
        }
    }
    sh_ctl_format_missing(ctl, &res, msg, sizeof(msg));
    if (t->expect_msg != NULL && strcmp(msg, t->expect_msg) != 0) {
        fprintf(stderr, "node %u: missing message '%s', expected '%s'\n", i, msg,
                t->expect_msg);
        return 16;
    }
    sh_ctl_result_free(&res);
    d += 3 * SH_NS_PER_S;
    if (sh_ctl_bcast(ctl, "plan:all", 9, &data, &len, d) != 0 ||
        len != 9 || strcmp((char *)data, "plan:all") != 0)
        return 17;
    free(data);
    /* a second round, to exercise sequence numbers and op ids */
    d += 3 * SH_NS_PER_S;
    if (sh_ctl_gather(ctl, 1, &i, sizeof(i), d, &res) != 0)
        return 18;
    if (i == 0) {
        for (uint32_t j = 0; j < t->n; j++) {
            uint32_t v;
            if (t->expect_missing & (1u << j))
                continue;
            memcpy(&v, res.entry[j].data, sizeof(v));
            if (res.entry[j].len != sizeof(v) || v != j)
                return 19;
        }
    } else if (res.nnodes != 0) {
        return 20;
    }
    sh_ctl_result_free(&res);
    d += 3 * SH_NS_PER_S;
    if (sh_ctl_allgather(ctl, 0, NULL, 0, d, &res) != 0 ||
        res.nmissing != (uint32_t)__builtin_popcount(t->expect_missing))
        return 21;
    sh_ctl_result_free(&res);
    sh_ctl_close(ctl);
    return 0;
}

static void run_tree(struct tree *t)
{
    pid_t pid[MAXN];
    int64_t limit = sh_now_ns() + 40 * SH_NS_PER_S;

    t->t0 = sh_now_ns();
    for (uint32_t i = 0; i < t->n; i++) {
        pid[i] = -1;
        if ((int)i == t->absent)
            continue;
        pid[i] = fork();
        ck_assert_int_ge(pid[i], 0);
        if (pid[i] == 0)
            _exit(node_main(t, i));
    }
    for (uint32_t i = 0; i < t->n; i++) {
        int status = 0;
        pid_t r;

        if (pid[i] < 0)
            continue;
        /* Bounded wait: every node has alarm(30); this is a second guard. */
        while ((r = waitpid(pid[i], &status, WNOHANG)) == 0 && sh_now_ns() < limit)
            usleep(20000);
        if (r == 0) {
            kill(pid[i], SIGKILL);
            waitpid(pid[i], &status, 0);
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "node %u: status 0x%x (exit %d)", i, status,
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
}

static uint16_t test_port(unsigned salt)
{
    return (uint16_t)(21000 + ((unsigned)getpid() * 7 + salt * 131) % 20000);
}

START_TEST(tree_full)
{
    struct tree t = { .n = 9, .k = 2, .jobid = (uint64_t)getpid() * 100 + 1,
                      .absent = -1, .keyless = -1 };

    t.port_base = test_port(1);
    run_tree(&t);
}
END_TEST

START_TEST(tree_star_and_single)
{
    struct tree t = { .n = 4, .k = 32, .jobid = (uint64_t)getpid() * 100 + 2,
                      .absent = -1, .keyless = -1 };
    struct tree one = { .n = 1, .k = 2, .jobid = (uint64_t)getpid() * 100 + 3,
                        .absent = -1, .keyless = -1 };

    t.port_base = test_port(2);
    run_tree(&t);
    one.port_base = test_port(3);
    run_tree(&one);
}
END_TEST

/* case F21: one node never starts; the error names it. */
START_TEST(tree_missing_leaf)
{
    struct tree t = { .n = 5, .k = 2, .jobid = (uint64_t)getpid() * 100 + 4,
                      .join_s = 4, .absent = 4, .keyless = -1, .expect_missing = 1u << 4,
                      .expect_msg = "h4 did not answer" };

    t.port_base = test_port(4);
    run_tree(&t);
}
END_TEST

/* case F21: an interior node never starts; the nodes behind it fail to join
 * and the root names them as unreachable. */
START_TEST(tree_missing_interior)
{
    struct tree t = { .n = 5, .k = 2, .jobid = (uint64_t)getpid() * 100 + 5,
                      .join_s = 4, .absent = 1, .keyless = -1,
                      .expect_missing = 1u << 1 | 1u << 3 | 1u << 4,
                      .expect_nojoin = 1u << 3 | 1u << 4,
                      .expect_msg = "h1 did not answer; h3, h4 unreachable behind them" };

    t.port_base = test_port(5);
    run_tree(&t);
}
END_TEST

/* A peer without the job key is rejected and counted missing. */
START_TEST(tree_keyless_peer)
{
    struct tree t = { .n = 4, .k = 3, .jobid = (uint64_t)getpid() * 100 + 6,
                      .join_s = 4, .absent = -1, .keyless = 2, .expect_missing = 1u << 2,
                      .expect_nojoin = 1u << 2, .expect_msg = "h2 did not answer" };

    t.port_base = test_port(6);
    run_tree(&t);
}
END_TEST

/* Hold the first three ports of job @t's probe sequence (range 48 from
 * @t->port_base) on 127.0.0.1 with listeners that accept (queue @backlog)
 * and never answer, run the tree, then let them go. */
static void run_tree_ports_held(struct tree *t, int backlog)
{
    uint16_t first = sh_ctl_derive_port(t->jobid, 0, t->port_base, 48);
    int fds[3];

    for (int x = 0; x < 3; x++) {
        struct sockaddr_in sa = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)(t->port_base +
                                      (first - t->port_base + x) % 48)) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[x] = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fds[x], 0);
        if (bind(fds[x], (struct sockaddr *)&sa, sizeof(sa)) == 0)
            ck_assert_int_eq(listen(fds[x], backlog), 0);
    }
    run_tree(t);
    for (int x = 0; x < 3; x++)
        close(fds[x]);
}

/* Ports taken by something that accepts connections and never answers:
 * agents probe upward past them (each costs one handshake timeout). */
START_TEST(tree_port_taken)
{
    struct tree t = { .n = 3, .k = 1, .jobid = (uint64_t)getpid() * 100 + 7,
                      .absent = -1, .keyless = -1,
                      .hs_timeout = 200 * SH_NS_PER_MS };
    t.port_base = test_port(7);
    run_tree_ports_held(&t, 4);
}
END_TEST

/* Issue 30 item 7: the wake-up is a handshake as the parent, so a poke walks
 * past ports that accept but are not the child's agent: listeners that never
 * answer (each costs SH_CTL_WAKE_TIMEOUT) and, all nodes being on 127.0.0.1
 * here, the other sentinel's agent, which refuses a wake-up meant for
 * another node. A chain 0 -> 1 -> 2 of which 1 and 2 are sentinels. (The
 * listeners' queues must not fill up: a connect that times out ends a poke's
 * walk, as for a host that is down.) */
START_TEST(tree_sentinels_port_taken)
{
    struct tree t = { .n = 3, .k = 1, .jobid = (uint64_t)getpid() * 100 + 14,
                      .absent = -1, .keyless = -1, .sentinels = 1u << 1 | 1u << 2,
                      .hs_timeout = 200 * SH_NS_PER_MS };
    t.port_base = test_port(14);
    run_tree_ports_held(&t, 128);
}
END_TEST

/* The retry delay grows with the time waited, between its bounds. */
START_TEST(retry_delay)
{
    int64_t prev = 0;

    ck_assert_int_eq(sh_ctl_retry_delay(0), SH_CTL_RETRY_MIN);
    ck_assert_int_eq(sh_ctl_retry_delay(-5), SH_CTL_RETRY_MIN);
    ck_assert_int_eq(sh_ctl_retry_delay(80 * SH_NS_PER_MS), 10 * SH_NS_PER_MS);
    ck_assert_int_eq(sh_ctl_retry_delay(3600 * SH_NS_PER_S), SH_CTL_RETRY_MAX);
    for (int64_t w = 0; w < 20 * SH_NS_PER_S; w += 7 * SH_NS_PER_MS) {
        int64_t d = sh_ctl_retry_delay(w);

        ck_assert_int_ge(d, prev);
        ck_assert_int_le(d, w / 8 > SH_CTL_RETRY_MIN ? w / 8 : SH_CTL_RETRY_MIN);
        prev = d;
    }
}
END_TEST

/* The root starts 700 ms after its children (prologs start skewed); every
 * child keeps retrying and the tree forms. */
/* Connect to 127.0.0.1:@port as fast as possible, holding every connection
 * idle, or (every second one) after an 8-byte handshake header that never
 * goes on, until killed. */
static void __attribute__((noreturn)) flood(uint16_t port)
{
    static const unsigned char head[8] = { 'S', 'H', 'H', 'S', 0, 1, 0, 1 };
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    unsigned held = 0;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    alarm(30);
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            if (fd >= 0)
                close(fd);
            usleep(1000);
            continue;
        }
        if (held++ % 2 == 1)
            (void)!write(fd, head, sizeof(head));
        if (held >= 900) /* below RLIMIT_NOFILE's usual 1024 */
            pause();
    }
}

/* Issue 30: anyone may connect to a job's control port. Hundreds of
 * connections that never complete a handshake, held open from the moment
 * the root listens, keep no child out: handshakes are served side by side,
 * each slot bounded by the handshake timeout. Served one at a time, as
 * before, 40 such connections cost 40 timeouts and the join failed. */
START_TEST(tree_flooded)
{
    struct tree t = { .n = 5, .k = 4, .jobid = (uint64_t)getpid() * 100 + 13,
                      .absent = -1, .keyless = -1, .late = 1, .late_ms = 1500,
                      .hs_timeout = 2 * SH_NS_PER_S };
    pid_t f;
    int status;

    t.port_base = test_port(13);
    f = fork();
    ck_assert_int_ge(f, 0);
    if (f == 0)
        flood(sh_ctl_derive_port(t.jobid, 0, t.port_base, 48));
    run_tree(&t);
    kill(f, SIGKILL);
    waitpid(f, &status, 0);
}
END_TEST

START_TEST(tree_late_root)
{
    struct tree t = { .n = 6, .k = 5, .jobid = (uint64_t)getpid() * 100 + 8,
                      .absent = -1, .keyless = -1, .late = 0, .late_ms = 700 };

    t.port_base = test_port(8);
    run_tree(&t);
}
END_TEST

/* The derived port is bound (not listening) by another process, so the root
 * listens on the next one and children are refused on the first: the quick
 * rounds end there, and the full rounds after SH_CTL_QUICK_PROBE_NS find the
 * root. */
START_TEST(tree_port_bound_not_listening)
{
    struct tree t = { .n = 3, .k = 2, .jobid = (uint64_t)getpid() * 100 + 9,
                      .absent = -1, .keyless = -1 };
    struct sockaddr_in sa = { .sin_family = AF_INET };
    uint16_t first;
    int fd;

    t.port_base = test_port(9);
    first = sh_ctl_derive_port(t.jobid, 0, t.port_base, 48);
    sa.sin_port = htons(first);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    run_tree(&t);
    close(fd);
}
END_TEST

/* Sentinels (every node but one leaf deep in the tree) hold their ports
 * and join only when woken: the leaf wakes its parent by connecting, and
 * every woken node wakes its parent and its children (sh_ctl_join pokes), so
 * the whole tree forms and the allgather has every node. */
START_TEST(tree_sentinels_woken)
{
    struct tree t = { .n = 6, .k = 2, .jobid = (uint64_t)getpid() * 100 + 10,
                      .absent = -1, .keyless = -1,
                      .sentinels = 1u << 0 | 1u << 1 | 1u << 2 | 1u << 3 | 1u << 5 };

    t.port_base = test_port(10);
    run_tree(&t);
}
END_TEST

/* Issue 30 item 7: the agent a sentinel starts joins only after a proof of
 * K_job. Both leaves are sentinels and the root an agent: the root's
 * wake-ups (a handshake as their parent) are accepted, and the tree forms. */
START_TEST(wake_parent_accepted)
{
    struct tree t = { .n = 3, .k = 2, .jobid = (uint64_t)getpid() * 100 + 12,
                      .absent = -1, .keyless = -1, .sentinels = 1u << 1 | 1u << 2 };

    t.port_base = test_port(12);
    run_tree(&t);
}
END_TEST

/* Wake-ups refused and logged (issue 35 item 5), counted in the process of
 * the agent under test. */
static unsigned refused_logged;

static void count_refused(enum sh_log_level level, const char *line)
{
    if (level <= SH_LOG_WARN && strstr(line, "wake-up refused: ") != NULL)
        refused_logged++;
}

/* Fork node 1 of a 4-node job @job (fanout 2) as the agent a sentinel
 * starts on listener @lfd (closed here): it waits for a proof of @kjob and
 * must end with ENOTCONN at its 3 s deadline, having logged @refusals
 * refused wake-ups or more. The child closes @spy, the listener that stands
 * for its parent's and child's ports. Exit 0: as expected; 2: joined nobody
 * but logged fewer refusals; 1: otherwise. Returns the child's pid. */
static pid_t fork_waiting_agent(uint64_t job, uint16_t base, const unsigned char *kjob,
                                int lfd, int spy, unsigned refusals)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct sh_ctl_cfg cfg = {
            .nnodes = 4, .index = 1, .fanout = 2, .names = names, .addrs = addrs,
            .bind_addr = "127.0.0.1", .port_base = base, .port_range = 48,
            .port_probe = 48, .jobid = job, .kjob = kjob, .hs_timeout_ns = SH_NS_PER_S,
            .inherit_listener = true, .listen_fd = lfd, .wait_wake = true,
        };
        struct sh_ctl *ctl = NULL;
        int rc;

        alarm(20);
        close(spy);
        sh_log_set_sink(count_refused);
        rc = sh_ctl_join(&cfg, sh_now_ns() + 3 * SH_NS_PER_S, &ctl);
        _exit(rc == -1 && errno == ENOTCONN && ctl == NULL
                  ? (refused_logged >= refusals ? 0 : 2) : 1);
    }
    close(lfd);
    return pid;
}

/* Issue 30 item 7: an agent started by a sentinel for connections that prove
 * nothing (garbage; a HELLO claiming to be its parent, without the key) does
 * not join: it connects to nobody (neither its parent nor its child, whose
 * ports a spy listener holds) and ends with ENOTCONN at its deadline. */
START_TEST(wake_forged_refused)
{
    unsigned char kjob[SH_KEY_LEN], bad[SH_KEY_LEN];
    uint64_t job = (uint64_t)getpid() * 100 + 13;
    uint16_t base = test_port(13), port = 0, spy_port = 0;
    struct sh_hs_ident forger = { job, 0, 0, false };
    struct sockaddr_in sa = { .sin_family = AF_INET };
    struct pollfd pfd;
    struct sh_chan chan;
    char buf[256];
    int status = 0, lfd, spy, fd;
    pid_t pid;

    memset(kjob, 0x77, sizeof(kjob));
    memset(bad, 0x66, sizeof(bad));
    lfd = sh_ctl_bind("127.0.0.1", job, 0, base, 48, 48, 16, &port);
    ck_assert_int_ge(lfd, 0);
    /* the next port of the sequence: where node 1 would look for its parent
     * (node 0) and poke its child (node 3), all on 127.0.0.1 */
    spy = sh_ctl_bind("127.0.0.1", job, 0, base, 48, 48, 16, &spy_port);
    ck_assert_int_ge(spy, 0);
    /* the forged HELLO's refusal is logged */
    pid = fork_waiting_agent(job, base, kjob, lfd, spy, 1);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    /* garbage: closed by the agent */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_gt(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 0);
    pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
    ck_assert_int_eq(poll(&pfd, 1, 2000), 1);
    ck_assert_int_le(read(fd, buf, sizeof(buf)), 0);
    close(fd);
    /* a forged wake-up: node 0's HELLO without the key. The agent proves
     * first; the forger cannot check that proof nor make its own. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(sh_hs_client(fd, bad, &forger, 1, "sentinel",
                                  sh_now_ns() + 2 * SH_NS_PER_S, &chan), -1);
    ck_assert_int_eq(errno, EACCES);
    close(fd);
    /* a connection that sends nothing and closes at once (the old wake-up) */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    /* nothing reaches the parent's or the child's port until it gave up */
    pfd = (struct pollfd){ .fd = spy, .events = POLLIN };
    ck_assert_int_eq(poll(&pfd, 1, 3500), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
    close(spy);
}
END_TEST

/* Relay one handshake between the client's stream @c and a server with K_job
 * run here on @srv (node 1 of job @job), recording what the client sent into
 * @rec (at most @cap bytes); returns the bytes recorded once the server has
 * accepted the client, or -1. */
static ssize_t record_wakeup(int c, int srv_here, int srv_there, uint64_t job,
                             const unsigned char kjob[SH_KEY_LEN], unsigned char *rec,
                             size_t cap)
{
    struct sh_hs_ident me = { job, 0, 1, false };
    struct sh_hs_srv hs;
    struct sh_chan chan;
    int64_t deadline = sh_now_ns() + 5 * SH_NS_PER_S;
    size_t have = 0;
    int done = 0;

    sh_hs_srv_begin(&hs, srv_there, "recorder", deadline);
    while (sh_now_ns() < deadline) {
        struct pollfd p[2] = { { .fd = c, .events = POLLIN },
                               { .fd = srv_here, .events = POLLIN } };
        unsigned char buf[512];
        ssize_t n;

        if (poll(p, 2, 100) < 0)
            return -1;
        if (p[0].revents & POLLIN) { /* client -> server, recorded */
            n = read(c, buf, sizeof(buf));
            if (n <= 0 || have + (size_t)n > cap)
                return done ? (ssize_t)have : -1;
            memcpy(rec + have, buf, (size_t)n);
            have += (size_t)n;
            if (write(srv_here, buf, (size_t)n) != n)
                return -1;
            if (!done) {
                int rc = sh_hs_srv_step(&hs, kjob, &me, NULL, NULL, &chan);

                if (rc < 0)
                    return -1;
                if (rc == 1) {
                    sh_chan_close(&chan);
                    done = 1;
                }
            }
        }
        if (p[1].revents & POLLIN) { /* server -> client */
            n = read(srv_here, buf, sizeof(buf));
            if (n > 0 && write(c, buf, (size_t)n) != n)
                return -1;
        }
        if (done && !(p[0].revents & POLLIN) && !(p[1].revents & POLLIN))
            return (ssize_t)have;
    }
    return -1;
}

/* Issue 35 item 5: a replayed wake-up is refused and logged. The bytes of a
 * real wake-up (node 0's handshake with K_job, as node 1's parent, recorded
 * on its way to another server of the job) are sent again to the agent a
 * sentinel started on node 1: its challenge has a fresh nonce, so the
 * recorded proof does not match; it does not join (nothing reaches its
 * parent's or child's port), ends with ENOTCONN at its deadline and has
 * logged the refusal. */
START_TEST(wake_replayed_refused)
{
    unsigned char kjob[SH_KEY_LEN], rec[1024], buf[256];
    uint64_t job = (uint64_t)getpid() * 100 + 15;
    uint16_t base = test_port(15), port = 0, spy_port = 0;
    struct sh_hs_ident parent = { job, 0, 0, false };
    struct sockaddr_in sa = { .sin_family = AF_INET };
    struct pollfd pfd;
    struct sh_chan chan;
    int status = 0, lfd, spy, fd, cs[2], ss[2];
    ssize_t len, got;
    pid_t pid, client;

    memset(kjob, 0x77, sizeof(kjob));
    /* a real wake-up, recorded */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, cs), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, ss), 0);
    client = fork();
    ck_assert_int_ge(client, 0);
    if (client == 0) {
        alarm(10);
        close(cs[1]);
        _exit(sh_hs_client(cs[0], kjob, &parent, 1, "recorder",
                           sh_now_ns() + 5 * SH_NS_PER_S, &chan) == 0 ? 0 : 1);
    }
    close(cs[0]);
    len = record_wakeup(cs[1], ss[0], ss[1], job, kjob, rec, sizeof(rec));
    ck_assert_int_eq(waitpid(client, &status, 0), client);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the real wake-up failed");
    ck_assert_int_gt(len, 0);
    close(cs[1]);
    close(ss[0]);

    lfd = sh_ctl_bind("127.0.0.1", job, 0, base, 48, 48, 16, &port);
    ck_assert_int_ge(lfd, 0);
    spy = sh_ctl_bind("127.0.0.1", job, 0, base, 48, 48, 16, &spy_port);
    ck_assert_int_ge(spy, 0);
    pid = fork_waiting_agent(job, base, kjob, lfd, spy, 2);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    /* replayed twice, all at once and after the challenge: the agent answers
     * with a challenge, then closes without a welcome */
    for (int k = 0; k < 2; k++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(write(fd, rec, (size_t)len), len);
        pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
        got = 0;
        for (;;) {
            ssize_t n;

            ck_assert_int_eq(poll(&pfd, 1, 3000), 1);
            n = read(fd, buf, sizeof(buf));
            if (n <= 0)
                break;
            got += n;
        }
        /* its challenge (HELLO's 64 bytes and its proof) and nothing more */
        ck_assert_int_eq(got, 64 + SH_KEY_LEN);
        close(fd);
    }
    pfd = (struct pollfd){ .fd = spy, .events = POLLIN };
    ck_assert_int_eq(poll(&pfd, 1, 3500), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "status 0x%x (exit 2: the refusals were not logged)", status);
    close(spy);
}
END_TEST

/* A sentinel that nothing wakes stays a sentinel: its descriptor, handed to
 * sh_ctl_join after all, must be a listener on one of the step's ports. */
START_TEST(adopt_listener_checked)
{
    unsigned char kjob[SH_KEY_LEN] = { 0 };
    struct sh_ctl_cfg cfg = {
        .nnodes = 2, .index = 1, .fanout = 2, .names = names, .addrs = addrs,
        .bind_addr = "127.0.0.1", .port_base = test_port(11), .port_range = 48,
        .port_probe = 48, .jobid = 77, .kjob = kjob, .inherit_listener = true,
    };
    struct sh_ctl *ctl = NULL;
    uint16_t port = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    cfg.listen_fd = fd; /* not listening */
    ck_assert_int_eq(sh_ctl_join(&cfg, sh_now_ns() + SH_NS_PER_S, &ctl), -1);
    ck_assert_int_eq(errno, EINVAL);
    close(fd);
    /* listening, but on another job's port sequence */
    fd = sh_ctl_bind("127.0.0.1", 78, 0, (uint16_t)(cfg.port_base + 48), 48, 48, 4, &port);
    ck_assert_int_ge(fd, 0);
    cfg.listen_fd = fd;
    ck_assert_int_eq(sh_ctl_join(&cfg, sh_now_ns() + SH_NS_PER_S, &ctl), -1);
    ck_assert_int_eq(errno, EINVAL);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ctl_tree");
    TCase *tc = tcase_create("ctl_tree");

    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, sh_check_quiet_logs, NULL);
    tcase_add_test(tc, tree_full);
    tcase_add_test(tc, tree_star_and_single);
    tcase_add_test(tc, tree_missing_leaf);
    tcase_add_test(tc, tree_missing_interior);
    tcase_add_test(tc, tree_keyless_peer);
    tcase_add_test(tc, tree_port_taken);
    tcase_add_test(tc, retry_delay);
    tcase_add_test(tc, tree_late_root);
    tcase_add_test(tc, tree_flooded);
    tcase_add_test(tc, tree_port_bound_not_listening);
    tcase_add_test(tc, tree_sentinels_woken);
    tcase_add_test(tc, adopt_listener_checked);
    tcase_add_test(tc, wake_parent_accepted);
    tcase_add_test(tc, wake_forged_refused);
    tcase_add_test(tc, wake_replayed_refused);
    tcase_add_test(tc, tree_sentinels_port_taken);
    suite_add_tcase(s, tc);
    sh_check_private_net();
    return sh_check_run(s);
}
