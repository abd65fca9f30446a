/* Authenticated frames (core/agent/frame.h): forged, truncated, oversized and
 * replayed frames are rejected with a logged reason. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stagehand/clock.h"
#include "core/agent/frame.h"
#include "stagehand/log.h"

#include "check_main.h"

static char last_line[2048];

static void capture(enum sh_log_level level, const char *line)
{
    (void)level;
    snprintf(last_line, sizeof(last_line), "%s", line);
}

static void keys(struct sh_frame_key *tx, struct sh_frame_key *rx)
{
    memset(tx, 0, sizeof(*tx));
    memset(rx, 0, sizeof(*rx));
    for (unsigned i = 0; i < SH_KEY_LEN; i++)
        tx->key[i] = rx->key[i] = (unsigned char)(i + 3);
}

static void setup(void)
{
    sh_log_set_sink(capture);
    last_line[0] = '\0';
}

START_TEST(roundtrip)
{
    struct sh_frame_key tx, rx;
    unsigned char buf[256];
    const unsigned char *p;
    uint32_t len;
    uint16_t type;

    keys(&tx, &rx);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(sh_frame_seal(&tx, 7, "hello", 5, buf, sizeof(buf)), 0);
        ck_assert_int_eq(sh_frame_open(&rx, buf, sh_frame_size(5), 64, "t", &type, &p,
                                       &len), 0);
        ck_assert_uint_eq(type, 7);
        ck_assert_uint_eq(len, 5);
        ck_assert_mem_eq(p, "hello", 5);
    }
    ck_assert_uint_eq(tx.seq, 3);
    ck_assert_uint_eq(rx.seq, 3);
    /* empty payload */
    ck_assert_int_eq(sh_frame_seal(&tx, 1, NULL, 0, buf, sizeof(buf)), 0);
    ck_assert_int_eq(sh_frame_open(&rx, buf, sh_frame_size(0), 64, "t", &type, &p, &len), 0);
    ck_assert_uint_eq(len, 0);
    /* type 0 and a short output buffer are refused */
    ck_assert_int_eq(sh_frame_seal(&tx, 0, "x", 1, buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_frame_seal(&tx, 1, "x", 1, buf, sh_frame_size(1) - 1), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(forged)
{
    struct sh_frame_key tx, rx;
    unsigned char buf[256];
    const unsigned char *p;
    size_t n = sh_frame_size(5);
    uint32_t len;
    uint16_t type;

    keys(&tx, &rx);
    ck_assert_int_eq(sh_frame_seal(&tx, 7, "hello", 5, buf, sizeof(buf)), 0);
    /* a flipped payload bit */
    buf[SH_FRAME_HDR_LEN] ^= 1;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(last_line, "authentication tag"));
    buf[SH_FRAME_HDR_LEN] ^= 1;
    /* a changed type in the header */
    buf[7] ^= 2;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    buf[7] ^= 2;
    /* a flipped tag bit */
    buf[n - 1] ^= 0x80;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    buf[n - 1] ^= 0x80;
    /* the right frame under another key (a keyless sender) */
    rx.key[0] ^= 1;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    rx.key[0] ^= 1;
    /* none of the rejects advanced the sequence: the original still opens */
    ck_assert_uint_eq(rx.seq, 0);
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), 0);
}
END_TEST

START_TEST(replayed_and_reordered)
{
    struct sh_frame_key tx, rx;
    unsigned char f1[64], f2[64];
    const unsigned char *p;
    uint32_t len;
    uint16_t type;

    keys(&tx, &rx);
    ck_assert_int_eq(sh_frame_seal(&tx, 1, "a", 1, f1, sizeof(f1)), 0);
    ck_assert_int_eq(sh_frame_seal(&tx, 1, "b", 1, f2, sizeof(f2)), 0);
    /* out of order: frame 2 before frame 1 */
    ck_assert_int_eq(sh_frame_open(&rx, f2, sh_frame_size(1), 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EPROTO);
    ck_assert_ptr_nonnull(strstr(last_line, "replayed"));
    ck_assert_int_eq(sh_frame_open(&rx, f1, sh_frame_size(1), 64, "t", &type, &p, &len), 0);
    /* replay of frame 1 */
    ck_assert_int_eq(sh_frame_open(&rx, f1, sh_frame_size(1), 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EPROTO);
    ck_assert_int_eq(sh_frame_open(&rx, f2, sh_frame_size(1), 64, "t", &type, &p, &len), 0);
    ck_assert_int_eq(sh_frame_open(&rx, f2, sh_frame_size(1), 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EPROTO);
}
END_TEST

START_TEST(truncated_oversized_malformed)
{
    struct sh_frame_key tx, rx;
    unsigned char buf[256];
    const unsigned char *p;
    size_t n = sh_frame_size(10);
    uint32_t len;
    uint16_t type;

    keys(&tx, &rx);
    ck_assert_int_eq(sh_frame_seal(&tx, 1, "0123456789", 10, buf, sizeof(buf)), 0);
    ck_assert_int_eq(sh_frame_open(&rx, buf, n - 1, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(last_line, "truncated"));
    ck_assert_int_eq(sh_frame_open(&rx, buf, 10, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_int_eq(sh_frame_open(&rx, buf, n + 1, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    /* bound of 9 bytes: a 10-byte payload is oversized */
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 9, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EMSGSIZE);
    ck_assert_ptr_nonnull(strstr(last_line, "oversized"));
    buf[0] ^= 1;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(last_line, "magic"));
    buf[0] ^= 1;
    buf[5] ^= 1;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(last_line, "version"));
    buf[5] ^= 1;
    ck_assert_int_eq(sh_frame_open(&rx, buf, n, 64, "t", &type, &p, &len), 0);
}
END_TEST

START_TEST(stream)
{
    struct sh_frame_key tx, rx;
    unsigned char *payload = NULL;
    unsigned char big[1000];
    uint32_t len = 0;
    uint16_t type = 0;
    int sv[2];
    int64_t deadline = sh_now_ns() + 5 * SH_NS_PER_S;

    keys(&tx, &rx);
    memset(big, 0x5a, sizeof(big));
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(sh_frame_send(sv[0], &tx, 9, big, sizeof(big), deadline), 0);
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   deadline), 0);
    ck_assert_uint_eq(type, 9);
    ck_assert_uint_eq(len, sizeof(big));
    ck_assert_mem_eq(payload, big, sizeof(big));
    free(payload);
    /* nothing sent: the deadline ends the wait */
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   sh_now_ns() + 50 * SH_NS_PER_MS), -1);
    ck_assert_int_eq(errno, ETIMEDOUT);
    /* oversized: rejected from the header, before reading (or allocating) */
    ck_assert_int_eq(sh_frame_send(sv[0], &tx, 9, big, sizeof(big), deadline), 0);
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 100, "t", &type, &payload, &len,
                                   deadline), -1);
    ck_assert_int_eq(errno, EMSGSIZE);
    ck_assert_ptr_null(payload);
    close(sv[0]);
    close(sv[1]);

    /* truncated: the peer closes inside a frame */
    keys(&tx, &rx);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    {
        unsigned char f[128];
        ck_assert_int_eq(sh_frame_seal(&tx, 3, "abcdef", 6, f, sizeof(f)), 0);
        ck_assert_int_eq(write(sv[0], f, sh_frame_size(6) - 5),
                         (ssize_t)sh_frame_size(6) - 5);
    }
    close(sv[0]);
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   deadline), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert_ptr_nonnull(strstr(last_line, "truncated"));
    /* a clean close between frames */
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   deadline), -1);
    ck_assert_int_eq(errno, ECONNRESET);
    close(sv[1]);
}
END_TEST

START_TEST(stream_replay)
{
    struct sh_frame_key tx, rx;
    unsigned char f[128];
    unsigned char *payload = NULL;
    uint32_t len = 0;
    uint16_t type = 0;
    int sv[2];
    int64_t deadline = sh_now_ns() + 5 * SH_NS_PER_S;

    keys(&tx, &rx);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(sh_frame_seal(&tx, 3, "abc", 3, f, sizeof(f)), 0);
    /* an attacker re-sends a captured frame */
    ck_assert_int_eq(write(sv[0], f, sh_frame_size(3)), (ssize_t)sh_frame_size(3));
    ck_assert_int_eq(write(sv[0], f, sh_frame_size(3)), (ssize_t)sh_frame_size(3));
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   deadline), 0);
    free(payload);
    ck_assert_int_eq(sh_frame_recv(sv[1], &rx, 4096, "t", &type, &payload, &len,
                                   deadline), -1);
    ck_assert_int_eq(errno, EPROTO);
    ck_assert_ptr_nonnull(strstr(last_line, "replayed"));
    close(sv[0]);
    close(sv[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("frame");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, roundtrip);
    tcase_add_test(tc, forged);
    tcase_add_test(tc, replayed_and_reordered);
    tcase_add_test(tc, truncated_oversized_malformed);
    tcase_add_test(tc, stream);
    tcase_add_test(tc, stream_replay);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
