/* Control plane (core/agent/ctl.h, handshake.h): the tree's shape, node list
 * expansion and the handshake (a keyless or foreign peer is rejected). The
 * trees of agents are in check_ctl_tree.c. */
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
#include "stagehand/ctlport.h"
#include "core/agent/ctl.h"
#include "core/agent/handshake.h"
#include "stagehand/log.h"

#include "check_main.h"

START_TEST(tree_shape_and_port)
{
    ck_assert_uint_eq(sh_ctl_parent_of(0, 2), 0);
    ck_assert_uint_eq(sh_ctl_parent_of(1, 2), 0);
    ck_assert_uint_eq(sh_ctl_parent_of(2, 2), 0);
    ck_assert_uint_eq(sh_ctl_parent_of(3, 2), 1);
    ck_assert_uint_eq(sh_ctl_parent_of(6, 2), 2);
    ck_assert_uint_eq(sh_ctl_parent_of(33, 32), 1);
    for (uint64_t job = 0; job < 2000; job++) {
        uint16_t p = sh_ctl_derive_port(job, 0, 7300, 1000);
        ck_assert_uint_ge(p, 7300);
        ck_assert_uint_lt(p, 8300);
    }
    ck_assert_uint_eq(sh_ctl_derive_port(5, 0, 60000, 1), 60000);
    ck_assert_uint_ne(sh_ctl_derive_port(5, 0, 7300, 1000),
                      sh_ctl_derive_port(5, 1, 7300, 1000));
}
END_TEST

/* Issue 35 item 3: every job step on a node gets a port while one of the
 * range is free (the default probe covers the whole range up to 1024 ports):
 * 200 jobs fill a range of 200, each on a port of its own, and the 201st
 * finds none (EADDRINUSE). A base where another process holds a port of the
 * range is skipped for the next one. */
START_TEST(probe_whole_range)
{
    enum { RANGE = 200 };
    int fds[RANGE + 1];
    bool done = false;

    ck_assert_uint_eq(sh_ctl_default_probe(RANGE), RANGE);
    ck_assert_uint_eq(sh_ctl_default_probe(1000), 1000);
    ck_assert_uint_eq(sh_ctl_default_probe(5000), SH_CTL_PROBE_MAX);
    for (unsigned attempt = 0; attempt < 8 && !done; attempt++) {
        uint16_t base = (uint16_t)(20000 + ((unsigned)getpid() * 7 + attempt * 997) % 150 * RANGE);
        uint8_t used[RANGE] = { 0 };
        int n = 0;

        for (; n < RANGE; n++) {
            uint16_t port = 0;

            fds[n] = sh_ctl_bind("127.0.0.1", 1000 + (uint64_t)n, 0, base, RANGE,
                                 sh_ctl_default_probe(RANGE), 4, &port);
            if (fds[n] < 0)
                break;
            ck_assert_uint_ge(port, base);
            ck_assert_uint_lt(port, base + RANGE);
            ck_assert(!used[port - base]);
            used[port - base] = 1;
        }
        if (n == RANGE) {
            uint16_t port = 0;

            fds[n] = sh_ctl_bind("127.0.0.1", 5000, 0, base, RANGE, sh_ctl_default_probe(RANGE),
                                 4, &port);
            ck_assert_int_lt(fds[n], 0);
            ck_assert_int_eq(errno, EADDRINUSE);
            done = true;
        } else {
            ck_assert_int_eq(errno, EADDRINUSE); /* another process holds one: next base */
        }
        while (n > 0)
            close(fds[--n]);
    }
    ck_assert_msg(done, "no free range of %d ports for the test", RANGE);
}
END_TEST

START_TEST(nodelist)
{
    char **list = NULL;
    uint32_t n = 0, idx = 99;

    ck_assert_int_eq(sh_nodelist_expand("n[1-3],gpu7", 4, &list, &n), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(list[0], "n1");
    ck_assert_str_eq(list[2], "n3");
    ck_assert_str_eq(list[3], "gpu7");
    ck_assert_int_eq(sh_nodelist_index(list, n, "n3", &idx), 0);
    ck_assert_uint_eq(idx, 2);
    ck_assert_int_eq(sh_nodelist_index(list, n, "n4", &idx), -1);
    ck_assert_int_eq(errno, ENOENT);
    sh_nodelist_free(list, n);
    ck_assert_int_eq(sh_nodelist_expand("node[001-010]", 10, &list, &n), 0);
    ck_assert_uint_eq(n, 10);
    ck_assert_str_eq(list[9], "node010");
    sh_nodelist_free(list, n);
    ck_assert_int_eq(sh_nodelist_expand("", 10, &list, &n), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* More names than allowed (issue 30 item 5: a forged list of 1.2
     * million names): refused before any is made. */
    ck_assert_int_eq(sh_nodelist_expand("n[1-3],gpu7", 3, &list, &n), -1);
    ck_assert_int_eq(errno, E2BIG);
    ck_assert_ptr_null(list);
    ck_assert_int_eq(sh_nodelist_expand("n[1-40000]", 1000, &list, &n), -1);
    ck_assert_int_eq(errno, E2BIG);
}
END_TEST

/* ---- handshake over a socketpair, server in a thread ------------------ */

struct srv {
    int fd;
    unsigned char key[SH_KEY_LEN];
    struct sh_hs_ident me;
    int rc, err;
    struct sh_chan chan;
};

static int accept_one(uint32_t idx, void *arg)
{
    (void)arg;
    return idx == 1;
}

static void *server_thread(void *p)
{
    struct srv *s = p;

    s->rc = sh_hs_server(s->fd, s->key, &s->me, accept_one, NULL, "client",
                         sh_now_ns() + 3 * SH_NS_PER_S, &s->chan);
    s->err = errno;     /* on failure it closed the stream: the client sees EOF */
    return NULL;
}

/* Run one handshake; returns the client's rc and errno in *cerr. */
static int run_hs(unsigned char ckey_flip, uint64_t cjob, uint32_t cidx,
                  struct srv *s, struct sh_chan *cchan, int *cerr)
{
    struct sh_hs_ident cme = { 42, 0, cidx, false };
    unsigned char ckey[SH_KEY_LEN];
    pthread_t th;
    int sv[2];
    int rc;

    cme.jobid = cjob;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    memset(s, 0, sizeof(*s));
    memset(s->key, 0x11, SH_KEY_LEN);
    memcpy(ckey, s->key, SH_KEY_LEN);
    ckey[5] ^= ckey_flip;
    s->fd = sv[0];
    s->me = (struct sh_hs_ident){ 42, 0, 0, false };
    ck_assert_int_eq(pthread_create(&th, NULL, server_thread, s), 0);
    rc = sh_hs_client(sv[1], ckey, &cme, 0, "server", sh_now_ns() + 3 * SH_NS_PER_S,
                      cchan);
    *cerr = errno;
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    if (rc != 0)
        close(sv[1]);
    return rc;
}

START_TEST(handshake_ok_and_frames)
{
    struct srv s;
    struct sh_chan c;
    unsigned char *payload = NULL;
    uint32_t len = 0;
    uint16_t type = 0;
    int cerr = 0;

    ck_assert_int_eq(run_hs(0, 42, 1, &s, &c, &cerr), 0);
    ck_assert_int_eq(s.rc, 0);
    ck_assert_uint_eq(s.chan.peer_index, 1);
    ck_assert_uint_eq(c.peer_index, 0);
    ck_assert_mem_eq(c.tx.key, s.chan.rx.key, SH_KEY_LEN);
    ck_assert_mem_eq(c.rx.key, s.chan.tx.key, SH_KEY_LEN);
    ck_assert(memcmp(c.tx.key, c.rx.key, SH_KEY_LEN) != 0);
    ck_assert_int_eq(sh_frame_send(c.fd, &c.tx, 5, "vote", 4, sh_now_ns() + SH_NS_PER_S), 0);
    ck_assert_int_eq(sh_frame_recv(s.chan.fd, &s.chan.rx, 64, "c", &type, &payload, &len,
                                   sh_now_ns() + SH_NS_PER_S), 0);
    ck_assert_uint_eq(type, 5);
    ck_assert_mem_eq(payload, "vote", 4);
    free(payload);
    sh_chan_close(&c);
    sh_chan_close(&s.chan);
}
END_TEST

START_TEST(handshake_keyless_client)
{
    struct srv s;
    struct sh_chan c;
    int cerr = 0;

    /* The client has the wrong key: the server's proof does not verify for
     * it, so it gives up without proving anything. */
    ck_assert_int_eq(run_hs(0x40, 42, 1, &s, &c, &cerr), -1);
    ck_assert_int_eq(cerr, EACCES);
    ck_assert_int_eq(s.rc, -1);
}
END_TEST

/* A rogue client that ignores the server's proof and answers with a guess:
 * the server rejects it (and logs it). */
START_TEST(handshake_rogue_client)
{
    unsigned char hello[64] = { 'S', 'H', 'H', 'S', 0, 1, 0, 1 };
    unsigned char ch[96], proof[40] = { 'S', 'H', 'H', 'S', 0, 1, 0, 3 };
    struct srv s;
    pthread_t th;
    int sv[2];

    hello[15] = 42;          /* jobid 42, stepid 0 */
    hello[27] = 1;           /* from node 1, to node 0 */
    memset(hello + 32, 0xab, 32);
    memset(proof + 8, 0xcd, 32);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    memset(&s, 0, sizeof(s));
    memset(s.key, 0x11, SH_KEY_LEN);
    s.fd = sv[0];
    s.me = (struct sh_hs_ident){ 42, 0, 0, false };
    ck_assert_int_eq(pthread_create(&th, NULL, server_thread, &s), 0);
    ck_assert_int_eq(write(sv[1], hello, sizeof(hello)), (ssize_t)sizeof(hello));
    ck_assert_int_eq(sh_io_read_full(sv[1], ch, sizeof(ch), NULL,
                                     sh_now_ns() + 3 * SH_NS_PER_S), 0);
    ck_assert_int_eq(write(sv[1], proof, sizeof(proof)), (ssize_t)sizeof(proof));
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(s.rc, -1);
    ck_assert_int_eq(s.err, EACCES);
    close(sv[1]);
}
END_TEST

START_TEST(handshake_keyless_server)
{
    struct sh_hs_ident cme = { 42, 0, 1, false };
    unsigned char ckey[SH_KEY_LEN];
    struct sh_chan c;
    struct srv s;
    pthread_t th;
    int sv[2];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    memset(&s, 0, sizeof(s));
    memset(s.key, 0x22, SH_KEY_LEN);
    memset(ckey, 0x11, SH_KEY_LEN);
    s.fd = sv[0];
    s.me = (struct sh_hs_ident){ 42, 0, 0, false };
    ck_assert_int_eq(pthread_create(&th, NULL, server_thread, &s), 0);
    ck_assert_int_eq(sh_hs_client(sv[1], ckey, &cme, 0, "server",
                                  sh_now_ns() + 3 * SH_NS_PER_S, &c), -1);
    ck_assert_int_eq(errno, EACCES);
    close(sv[1]);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(s.rc, -1);
}
END_TEST

START_TEST(handshake_foreign)
{
    struct srv s;
    struct sh_chan c;
    int cerr = 0;

    /* another job (e.g. on a probed port): not for us */
    ck_assert_int_eq(run_hs(0, 43, 1, &s, &c, &cerr), -1);
    ck_assert_int_eq(s.err, ENXIO);
    /* a node that is not the server's child */
    ck_assert_int_eq(run_hs(0, 42, 2, &s, &c, &cerr), -1);
    ck_assert_int_eq(s.err, ENXIO);
}
END_TEST

START_TEST(handshake_garbage)
{
    struct srv s;
    pthread_t th;
    int sv[2];
    static const char junk[] = "GET / HTTP/1.0\r\n\r\n GET / HTTP/1.0\r\n\r\n GET / HTTP/1.0\r\n\r\n";

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    memset(&s, 0, sizeof(s));
    s.fd = sv[0];
    s.me = (struct sh_hs_ident){ 42, 0, 0, false };
    ck_assert_int_eq(pthread_create(&th, NULL, server_thread, &s), 0);
    ck_assert_int_eq(write(sv[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(s.rc, -1);
    ck_assert_int_eq(s.err, EPROTO);
    close(sv[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ctl");
    TCase *tc = tcase_create("ctl");

    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, sh_check_quiet_logs, NULL);
    tcase_add_test(tc, tree_shape_and_port);
    tcase_add_test(tc, probe_whole_range);
    tcase_add_test(tc, nodelist);
    tcase_add_test(tc, handshake_ok_and_frames);
    tcase_add_test(tc, handshake_keyless_client);
    tcase_add_test(tc, handshake_rogue_client);
    tcase_add_test(tc, handshake_keyless_server);
    tcase_add_test(tc, handshake_foreign);
    tcase_add_test(tc, handshake_garbage);
    suite_add_tcase(s, tc);
    sh_check_private_net();
    return sh_check_run(s);
}
