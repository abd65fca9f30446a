/* Control-plane handshake (see handshake.h). */
#include "config.h"
#include "stagehand/bytes.h"
#include "handshake.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define HS_MAGIC      0x53484853u   /* "SHHS" */
#define HS_VERSION    1u
#define HS_HELLO      1u
#define HS_CHALLENGE  2u
#define HS_PROOF      3u
#define HS_WELCOME    0xfff0u       /* frame type of the server's first frame */
#define SH_HS_FINISH_NS (1 * SH_NS_PER_S) /* proof + welcome once challenged */

#define HELLO_LEN     (8u + 8u + 8u + 4u + 4u + SH_NONCE_LEN)
#define CHALLENGE_LEN (HELLO_LEN + SH_KEY_LEN)
#define PROOF_LEN     (8u + SH_KEY_LEN)

struct hs_msg {
    uint16_t type;
    uint64_t jobid, stepid;
    uint32_t from, to;
    unsigned char nonce[SH_NONCE_LEN];
    unsigned char proof[SH_KEY_LEN];
};

/* Header: magic(4) version(2) type(2). */
static void put_head(unsigned char *p, uint16_t type)
{
    sh_put_be32(p, HS_MAGIC);
    p[4] = (unsigned char)(HS_VERSION >> 8);
    p[5] = (unsigned char)HS_VERSION;
    p[6] = (unsigned char)(type >> 8);
    p[7] = (unsigned char)type;
}

static size_t encode(const struct hs_msg *m, unsigned char *buf)
{
    put_head(buf, m->type);
    if (m->type == HS_PROOF) {
        memcpy(buf + 8, m->proof, SH_KEY_LEN);
        return PROOF_LEN;
    }
    sh_put_be64(buf + 8, m->jobid);
    sh_put_be64(buf + 16, m->stepid);
    sh_put_be32(buf + 24, m->from);
    sh_put_be32(buf + 28, m->to);
    memcpy(buf + 32, m->nonce, SH_NONCE_LEN);
    if (m->type == HS_HELLO)
        return HELLO_LEN;
    memcpy(buf + HELLO_LEN, m->proof, SH_KEY_LEN);
    return CHALLENGE_LEN;
}

static size_t msg_len(uint16_t type)
{
    return type == HS_HELLO ? HELLO_LEN : type == HS_CHALLENGE ? CHALLENGE_LEN
                                                               : PROOF_LEN;
}

/* Decode the complete message of @type in @buf (header checked). */
static void decode(const unsigned char *buf, uint16_t type, struct hs_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    if (type == HS_PROOF) {
        memcpy(m->proof, buf + 8, SH_KEY_LEN);
        return;
    }
    m->jobid = sh_get_be64(buf + 8);
    m->stepid = sh_get_be64(buf + 16);
    m->from = sh_get_be32(buf + 24);
    m->to = sh_get_be32(buf + 28);
    memcpy(m->nonce, buf + 32, SH_NONCE_LEN);
    if (type == HS_CHALLENGE)
        memcpy(m->proof, buf + HELLO_LEN, SH_KEY_LEN);
}

/* Is the 8-byte header at @buf a stagehand handshake message of our version
 * and of @type? */
static bool head_ok(const unsigned char *buf, uint16_t type)
{
    return sh_get_be32(buf) == HS_MAGIC && buf[4] == (HS_VERSION >> 8) &&
           buf[5] == (HS_VERSION & 0xff) && buf[6] == (type >> 8) &&
           buf[7] == (type & 0xff);
}

/* Read one handshake message of the expected @type. */
static int recv_msg(int fd, uint16_t type, const char *peer, enum sh_log_level rej,
                    int64_t deadline_ns, struct hs_msg *m)
{
    unsigned char buf[CHALLENGE_LEN];
    size_t len = msg_len(type);

    if (sh_io_read_full(fd, buf, 8, NULL, deadline_ns) != 0)
        return -1;
    if (!head_ok(buf, type)) {
        sh_log(rej, "ctl", "handshake with %s rejected: not a stagehand handshake "
               "message of the expected version and type", peer);
        errno = EPROTO;
        return -1;
    }
    if (sh_io_read_full(fd, buf + 8, len - 8, NULL, deadline_ns) != 0) {
        if (errno == ECONNRESET) {
            sh_log(rej, "ctl", "handshake with %s rejected: truncated message", peer);
            errno = EPROTO;
        }
        return -1;
    }
    decode(buf, type, m);
    return 0;
}

static int send_msg(int fd, const struct hs_msg *m, int64_t deadline_ns)
{
    unsigned char buf[CHALLENGE_LEN];
    size_t len = encode(m, buf);

    return sh_io_write_full(fd, buf, len, deadline_ns);
}

/* proof = HMAC(K_job, lp(label) | lp(role) | jobid | stepid | server | client
 *              | nonce_c | nonce_s); fixed-width fields after the prefixes. */
static int make_proof(const unsigned char kjob[SH_KEY_LEN], const char *role,
                      uint64_t jobid, uint64_t stepid, uint32_t server,
                      uint32_t client, const unsigned char *nonce_c,
                      const unsigned char *nonce_s, unsigned char out[SH_KEY_LEN])
{
    static const char label[] = "stagehand/handshake/v1";
    unsigned char len_label[4], len_role[4], ids[24];
    size_t rlen = strlen(role);
    struct iovec iov[7];

    sh_put_be32(len_label, (uint32_t)(sizeof(label) - 1));
    sh_put_be32(len_role, (uint32_t)rlen);
    sh_put_be64(ids, jobid);
    sh_put_be64(ids + 8, stepid);
    sh_put_be32(ids + 16, server);
    sh_put_be32(ids + 20, client);
    iov[0] = (struct iovec){ len_label, 4 };
    iov[1] = (struct iovec){ (void *)(uintptr_t)label, sizeof(label) - 1 };
    iov[2] = (struct iovec){ len_role, 4 };
    iov[3] = (struct iovec){ (void *)(uintptr_t)role, rlen };
    iov[4] = (struct iovec){ ids, sizeof(ids) };
    iov[5] = (struct iovec){ (void *)(uintptr_t)nonce_c, SH_NONCE_LEN };
    iov[6] = (struct iovec){ (void *)(uintptr_t)nonce_s, SH_NONCE_LEN };
    return sh_hmac_sha256(kjob, SH_KEY_LEN, iov, 7, out);
}

static void chan_init(struct sh_chan *out, int fd, const unsigned char *txkey,
                      const unsigned char *rxkey, uint32_t peer_index,
                      const char *peer)
{
    memset(out, 0, sizeof(*out));
    out->fd = fd;
    memcpy(out->tx.key, txkey, SH_KEY_LEN);
    memcpy(out->rx.key, rxkey, SH_KEY_LEN);
    out->peer_index = peer_index;
    snprintf(out->peer, sizeof(out->peer), "%s", peer);
}

int sh_hs_client(int fd, const unsigned char kjob[SH_KEY_LEN],
                 const struct sh_hs_ident *me, uint32_t server_index,
                 const char *peer, int64_t deadline_ns, struct sh_chan *out)
{
    struct hs_msg hello = { .type = HS_HELLO, .jobid = me->jobid,
                            .stepid = me->stepid, .from = me->index,
                            .to = server_index };
    struct hs_msg ch, proof = { .type = HS_PROOF };
    unsigned char want[SH_KEY_LEN], c2s[SH_KEY_LEN], s2c[SH_KEY_LEN];
    unsigned char *payload = NULL;
    enum sh_log_level rej = me->quiet ? SH_LOG_DEBUG : SH_LOG_WARN;
    uint32_t len;
    uint16_t type;
    int rc = -1;
    int err = 0;

    out->fd = -1;
    if (sh_random_bytes(hello.nonce, SH_NONCE_LEN) != 0 ||
        send_msg(fd, &hello, deadline_ns) != 0 ||
        recv_msg(fd, HS_CHALLENGE, peer, rej, deadline_ns, &ch) != 0) {
        err = errno;
        goto out;
    }
    /* A server that was busy may answer just before our deadline. It is
     * responsive now: give the rest of the exchange a short fresh budget, so
     * that we do not give up between our proof and its welcome (it would
     * count us as connected while we retry). */
    if (deadline_ns - sh_now_ns() < SH_HS_FINISH_NS)
        deadline_ns = sh_now_ns() + SH_HS_FINISH_NS;
    if (ch.jobid != me->jobid || ch.stepid != me->stepid || ch.from != server_index ||
        ch.to != me->index) {
        sh_debug("ctl", "%s is job %llu step %llu node %u, not the peer we look "
                 "for", peer, (unsigned long long)ch.jobid,
                 (unsigned long long)ch.stepid, ch.from);
        err = ENXIO;
        goto out;
    }
    if (make_proof(kjob, "server", me->jobid, me->stepid, server_index, me->index,
                   hello.nonce, ch.nonce, want) != 0) {
        err = errno;
        goto out;
    }
    if (CRYPTO_memcmp(want, ch.proof, SH_KEY_LEN) != 0) {
        sh_log(rej, "ctl", "handshake with %s rejected: it does not prove the job key",
               peer);
        err = EACCES;
        goto out;
    }
    if (make_proof(kjob, "client", me->jobid, me->stepid, server_index, me->index,
                   hello.nonce, ch.nonce, proof.proof) != 0 ||
        send_msg(fd, &proof, deadline_ns) != 0 ||
        sh_key_derive_session(kjob, hello.nonce, ch.nonce, c2s, s2c) != 0) {
        err = errno;
        goto out;
    }
    chan_init(out, fd, c2s, s2c, server_index, peer);
    if (sh_frame_recv(fd, &out->rx, 0, peer, &type, &payload, &len, deadline_ns) != 0
        || type != HS_WELCOME) {
        err = errno;
        if (err == ECONNRESET) {
            sh_log(rej, "ctl", "handshake with %s failed: the peer closed the "
                   "connection after our proof (it does not accept us)", peer);
            err = EACCES;
        } else if (err == 0 || type != HS_WELCOME) {
            err = EPROTO;
        }
        sh_key_wipe(out, sizeof(*out));
        out->fd = -1;   /* the caller still owns and closes @fd */
        goto out;
    }
    rc = 0;
out:
    free(payload);
    sh_key_wipe(want, sizeof(want));
    sh_key_wipe(c2s, sizeof(c2s));
    sh_key_wipe(s2c, sizeof(s2c));
    sh_key_wipe(&proof, sizeof(proof));
    if (rc != 0)
        errno = err != 0 ? err : EPROTO;
    return rc;
}

_Static_assert(CHALLENGE_LEN <= sizeof(((struct sh_hs_srv *)0)->buf),
               "a handshake message fits the server's buffer");

enum { SRV_HELLO = 1, SRV_PROOF = 2 };

void sh_hs_srv_begin(struct sh_hs_srv *s, int fd, const char *peer, int64_t deadline_ns)
{
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->deadline_ns = deadline_ns;
    s->started_ns = sh_now_ns();
    s->state = SRV_HELLO;
    snprintf(s->peer, sizeof(s->peer), "%s", peer);
}

bool sh_hs_srv_waiting_hello(const struct sh_hs_srv *s)
{
    return s->state == SRV_HELLO;
}

void sh_hs_srv_abort(struct sh_hs_srv *s)
{
    if (s->fd >= 0)
        close(s->fd);
    sh_key_wipe(s, sizeof(*s));
    s->fd = -1;
}

/* Fail @s with @err (its stream closed). */
static int srv_fail(struct sh_hs_srv *s, int err)
{
    sh_hs_srv_abort(s);
    errno = err != 0 ? err : EPROTO;
    return -1;
}


/* The client's HELLO in @s->buf: answer with our CHALLENGE. */
static int srv_hello(struct sh_hs_srv *s, const unsigned char kjob[SH_KEY_LEN],
                     const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                     enum sh_log_level rej)
{
    struct hs_msg hello, ch = { .type = HS_CHALLENGE, .jobid = me->jobid,
                                .stepid = me->stepid, .from = me->index };
    int rc = -1;

    decode(s->buf, HS_HELLO, &hello);
    snprintf(s->name, sizeof(s->name), "%.95s claiming node %u", s->peer, hello.from);
    if (hello.jobid != me->jobid || hello.stepid != me->stepid ||
        hello.to != me->index) {
        sh_debug("ctl", "%s wants job %llu step %llu node %u: not us", s->name,
                 (unsigned long long)hello.jobid, (unsigned long long)hello.stepid,
                 hello.to);
        return srv_fail(s, ENXIO);
    }
    if (accept != NULL && !accept(hello.from, arg)) {
        sh_log(rej, "ctl", "handshake with %s refused: not a node we accept here",
               s->name);
        return srv_fail(s, ENXIO);
    }
    s->client = hello.from;
    memcpy(s->nonce_c, hello.nonce, SH_NONCE_LEN);
    ch.to = hello.from;
    /* 96 bytes on a fresh connection: the socket buffer takes them at once,
     * so this write never waits for the peer. */
    if (sh_random_bytes(ch.nonce, SH_NONCE_LEN) == 0 &&
        make_proof(kjob, "server", me->jobid, me->stepid, me->index, hello.from,
                   hello.nonce, ch.nonce, ch.proof) == 0 &&
        send_msg(s->fd, &ch, s->deadline_ns) == 0) {
        memcpy(s->nonce_s, ch.nonce, SH_NONCE_LEN);
        s->state = SRV_PROOF;
        s->have = 0;
        rc = 0;
    }
    sh_key_wipe(&ch, sizeof(ch));
    return rc == 0 ? 0 : srv_fail(s, errno);
}

/* A wake-up refused (issue 35 item 5): while an agent a sentinel started
 * waits for a peer that proves K_job (@me->quiet), a client whose HELLO named
 * this job, step and node and then did not prove the key (a wrong proof, a
 * replayed one: the nonces are fresh; or no proof at all) is logged as a
 * warning whatever else is quiet, naming its address and what it claimed.
 * Returns @err. */
static int srv_refused(const struct sh_hs_srv *s, const struct sh_hs_ident *me,
                       enum sh_log_level rej, int err, const char *why)
{
    if (me->quiet && s->state == SRV_PROOF)
        sh_warn("ctl", "wake-up refused: %s %s: not woken (a forged or replayed "
                "wake-up, or a peer without the job key)", s->name, why);
    else if (err == EACCES)
        sh_log(rej, "ctl", "handshake with %s rejected: %s (keyless or foreign peer)",
               s->name, why);
    else if (err == EPROTO)
        sh_log(rej, "ctl", "handshake with %s rejected: %s", s->state == SRV_HELLO
               ? s->peer : s->name, why);
    else
        sh_debug("ctl", "%s %s", s->state == SRV_HELLO ? s->peer : s->name, why);
    return err;
}

/* The client's PROOF in @s->buf: check it, welcome the client. */
static int srv_proof(struct sh_hs_srv *s, const unsigned char kjob[SH_KEY_LEN],
                     const struct sh_hs_ident *me, enum sh_log_level rej,
                     struct sh_chan *out)
{
    unsigned char want[SH_KEY_LEN], c2s[SH_KEY_LEN], s2c[SH_KEY_LEN];
    struct hs_msg proof;
    int err = 0;

    decode(s->buf, HS_PROOF, &proof);
    if (make_proof(kjob, "client", me->jobid, me->stepid, me->index, s->client,
                   s->nonce_c, s->nonce_s, want) != 0)
        err = errno != 0 ? errno : EIO;
    if (err == 0 && CRYPTO_memcmp(want, proof.proof, SH_KEY_LEN) != 0)
        err = srv_refused(s, me, rej, EACCES, "it does not prove the job key");
    if (err == 0 && sh_key_derive_session(kjob, s->nonce_c, s->nonce_s, c2s, s2c) != 0)
        err = errno != 0 ? errno : EIO;
    if (err == 0) {
        chan_init(out, s->fd, s2c, c2s, s->client, s->peer);
        if (sh_frame_send(s->fd, &out->tx, HS_WELCOME, NULL, 0, s->deadline_ns) != 0) {
            err = errno != 0 ? errno : EIO;
            sh_key_wipe(out, sizeof(*out));
            out->fd = -1;
        }
    }
    sh_key_wipe(want, sizeof(want));
    sh_key_wipe(c2s, sizeof(c2s));
    sh_key_wipe(s2c, sizeof(s2c));
    sh_key_wipe(&proof, sizeof(proof));
    if (err != 0)
        return srv_fail(s, err);
    s->fd = -1; /* the channel owns the stream */
    sh_hs_srv_abort(s);
    return 1;
}

int sh_hs_srv_step(struct sh_hs_srv *s, const unsigned char kjob[SH_KEY_LEN],
                   const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                   struct sh_chan *out)
{
    enum sh_log_level rej = me->quiet ? SH_LOG_DEBUG : SH_LOG_WARN;

    out->fd = -1;
    for (;;) {
        uint16_t type = s->state == SRV_HELLO ? HS_HELLO : HS_PROOF;
        const char *who = s->state == SRV_HELLO ? s->peer : s->name;
        size_t len = msg_len(type);
        ssize_t n = read(s->fd, s->buf + s->have, len - s->have);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0)
            return srv_fail(s, errno);
        if (n == 0) {
            if (s->have > 0)
                return srv_fail(s, srv_refused(s, me, rej, EPROTO, "truncated message"));
            return srv_fail(s, srv_refused(s, me, rej, ECONNRESET, "closed the "
                                           "connection during the handshake"));
        }
        s->have += (size_t)n;
        if (s->have >= 8 && s->have - (size_t)n < 8 && !head_ok(s->buf, type)) {
            sh_log(rej, "ctl", "handshake with %s rejected: not a stagehand handshake "
                   "message of the expected version and type", who);
            return srv_fail(s, EPROTO);
        }
        if (s->have < len)
            continue;
        if (type == HS_HELLO) {
            if (srv_hello(s, kjob, me, accept, arg, rej) != 0)
                return -1;
            continue; /* the PROOF may be here already */
        }
        return srv_proof(s, kjob, me, rej, out);
    }
}

int sh_hs_server(int fd, const unsigned char kjob[SH_KEY_LEN],
                 const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                 const char *peer, int64_t deadline_ns, struct sh_chan *out)
{
    struct sh_hs_srv s;
    int fl = fcntl(fd, F_GETFL), rc;

    out->fd = -1;
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    sh_hs_srv_begin(&s, fd, peer, deadline_ns);
    while ((rc = sh_hs_srv_step(&s, kjob, me, accept, arg, out)) == 0) {
        struct pollfd p = { .fd = s.fd, .events = POLLIN };
        int ms = sh_poll_ms_until(deadline_ns);

        if (ms == 0) {
            sh_hs_srv_abort(&s);
            errno = ETIMEDOUT;
            return -1;
        }
        (void)poll(&p, 1, ms);
    }
    if (rc < 0)
        return -1;
    (void)fcntl(fd, F_SETFL, fl); /* leave it as it came */
    return 0;
}

void sh_chan_close(struct sh_chan *chan)
{
    if (chan->fd >= 0)
        close(chan->fd);
    sh_key_wipe(chan, sizeof(*chan));
    chan->fd = -1;
}
