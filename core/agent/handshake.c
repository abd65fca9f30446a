/* Control-plane handshake (see stagehand/handshake.h). */
#include "config.h"
#include "stagehand/bytes.h"
#include "stagehand/handshake.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Read one handshake message of the expected @type. */
static int recv_msg(int fd, uint16_t type, const char *peer, enum sh_log_level rej,
                    int64_t deadline_ns, struct hs_msg *m)
{
    unsigned char buf[CHALLENGE_LEN];
    size_t len = msg_len(type);

    if (sh_io_read_full(fd, buf, 8, NULL, deadline_ns) != 0)
        return -1;
    if (sh_get_be32(buf) != HS_MAGIC || buf[4] != (HS_VERSION >> 8) ||
        buf[5] != (HS_VERSION & 0xff) || buf[6] != (type >> 8) ||
        buf[7] != (type & 0xff)) {
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
    memset(m, 0, sizeof(*m));
    m->type = type;
    if (type == HS_PROOF) {
        memcpy(m->proof, buf + 8, SH_KEY_LEN);
        return 0;
    }
    m->jobid = sh_get_be64(buf + 8);
    m->stepid = sh_get_be64(buf + 16);
    m->from = sh_get_be32(buf + 24);
    m->to = sh_get_be32(buf + 28);
    memcpy(m->nonce, buf + 32, SH_NONCE_LEN);
    if (type == HS_CHALLENGE)
        memcpy(m->proof, buf + HELLO_LEN, SH_KEY_LEN);
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

int sh_hs_server(int fd, const unsigned char kjob[SH_KEY_LEN],
                 const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                 const char *peer, int64_t deadline_ns, struct sh_chan *out)
{
    struct hs_msg hello, proof;
    struct hs_msg ch = { .type = HS_CHALLENGE, .jobid = me->jobid,
                         .stepid = me->stepid, .from = me->index };
    unsigned char want[SH_KEY_LEN], c2s[SH_KEY_LEN], s2c[SH_KEY_LEN];
    enum sh_log_level rej = me->quiet ? SH_LOG_DEBUG : SH_LOG_WARN;
    char name[96];
    int rc = -1;
    int err = 0;

    out->fd = -1;
    if (recv_msg(fd, HS_HELLO, peer, rej, deadline_ns, &hello) != 0) {
        err = errno;
        goto out;
    }
    snprintf(name, sizeof(name), "%s claiming node %u", peer, hello.from);
    if (hello.jobid != me->jobid || hello.stepid != me->stepid ||
        hello.to != me->index) {
        sh_debug("ctl", "%s wants job %llu step %llu node %u: not us", name,
                 (unsigned long long)hello.jobid, (unsigned long long)hello.stepid,
                 hello.to);
        err = ENXIO;
        goto out;
    }
    if (accept != NULL && !accept(hello.from, arg)) {
        sh_log(rej, "ctl", "handshake with %s refused: not a node we accept here",
               name);
        err = ENXIO;
        goto out;
    }
    ch.to = hello.from;
    if (sh_random_bytes(ch.nonce, SH_NONCE_LEN) != 0 ||
        make_proof(kjob, "server", me->jobid, me->stepid, me->index, hello.from,
                   hello.nonce, ch.nonce, ch.proof) != 0 ||
        send_msg(fd, &ch, deadline_ns) != 0 ||
        recv_msg(fd, HS_PROOF, name, rej, deadline_ns, &proof) != 0 ||
        make_proof(kjob, "client", me->jobid, me->stepid, me->index, hello.from,
                   hello.nonce, ch.nonce, want) != 0) {
        err = errno;
        if (err == ECONNRESET)
            sh_debug("ctl", "%s closed the connection during the handshake", name);
        goto out;
    }
    if (CRYPTO_memcmp(want, proof.proof, SH_KEY_LEN) != 0) {
        sh_log(rej, "ctl", "handshake with %s rejected: it does not prove the job key "
               "(keyless or foreign peer)", name);
        err = EACCES;
        goto out;
    }
    if (sh_key_derive_session(kjob, hello.nonce, ch.nonce, c2s, s2c) != 0) {
        err = errno;
        goto out;
    }
    chan_init(out, fd, s2c, c2s, hello.from, peer);
    if (sh_frame_send(fd, &out->tx, HS_WELCOME, NULL, 0, deadline_ns) != 0) {
        err = errno;
        sh_key_wipe(out, sizeof(*out));
        out->fd = -1;   /* the caller still owns and closes @fd */
        goto out;
    }
    rc = 0;
out:
    sh_key_wipe(want, sizeof(want));
    sh_key_wipe(c2s, sizeof(c2s));
    sh_key_wipe(s2c, sizeof(s2c));
    sh_key_wipe(&ch, sizeof(ch));
    if (rc != 0)
        errno = err != 0 ? err : EPROTO;
    return rc;
}

void sh_chan_close(struct sh_chan *chan)
{
    if (chan->fd >= 0)
        close(chan->fd);
    sh_key_wipe(chan, sizeof(*chan));
    chan->fd = -1;
}
