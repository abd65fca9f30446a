/* Authenticated control-plane frames (see frame.h). */
#include "config.h"
#include "stagehand/bytes.h"
#include "frame.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/crypto.h>

static const char *peer_name(const char *peer)
{
    return peer != NULL ? peer : "peer";
}

static int frame_tag(const unsigned char key[SH_KEY_LEN], const unsigned char *hdr,
                     const unsigned char *payload, uint32_t len,
                     unsigned char tag[SH_FRAME_TAG_LEN])
{
    struct iovec iov[2] = {
        { (void *)(uintptr_t)hdr, SH_FRAME_HDR_LEN },
        { (void *)(uintptr_t)payload, len },
    };

    return sh_hmac_sha256(key, SH_KEY_LEN, iov, 2, tag);
}

int sh_frame_seal(struct sh_frame_key *tx, uint16_t type, const void *payload,
                  uint32_t len, unsigned char *out, size_t outlen)
{
    if (type == 0 || outlen < sh_frame_size(len) || (len > 0 && payload == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if (tx->seq == UINT64_MAX) {
        errno = EOVERFLOW;
        return -1;
    }
    sh_put_be32(out, SH_FRAME_MAGIC);
    sh_put_be16(out + 4, SH_FRAME_VERSION);
    sh_put_be16(out + 6, type);
    sh_put_be32(out + 8, (uint32_t)((tx->seq + 1) >> 32));
    sh_put_be32(out + 12, (uint32_t)(tx->seq + 1));
    sh_put_be32(out + 16, len);
    sh_put_be32(out + 20, 0);
    if (len > 0)
        memcpy(out + SH_FRAME_HDR_LEN, payload, len);
    if (frame_tag(tx->key, out, out + SH_FRAME_HDR_LEN, len,
                  out + SH_FRAME_HDR_LEN + len) != 0)
        return -1;
    tx->seq++;
    return 0;
}

int sh_frame_check_header(const unsigned char hdr[SH_FRAME_HDR_LEN],
                          uint32_t max_payload, const char *peer,
                          uint16_t *type, uint64_t *seq, uint32_t *len)
{
    uint32_t magic = sh_get_be32(hdr);
    uint16_t version = sh_get_be16(hdr + 4);

    if (magic != SH_FRAME_MAGIC) {
        sh_warn("ctl", "frame from %s rejected: bad magic 0x%08x", peer_name(peer),
                magic);
        errno = EBADMSG;
        return -1;
    }
    if (version != SH_FRAME_VERSION) {
        sh_warn("ctl", "frame from %s rejected: version %u, expected %u",
                peer_name(peer), version, SH_FRAME_VERSION);
        errno = EBADMSG;
        return -1;
    }
    if (sh_get_be32(hdr + 20) != 0 || sh_get_be16(hdr + 6) == 0) {
        sh_warn("ctl", "frame from %s rejected: malformed header", peer_name(peer));
        errno = EBADMSG;
        return -1;
    }
    *len = sh_get_be32(hdr + 16);
    if (*len > max_payload) {
        sh_warn("ctl", "frame from %s rejected: oversized payload of %u bytes "
                "(limit %u)", peer_name(peer), *len, max_payload);
        errno = EMSGSIZE;
        return -1;
    }
    *type = sh_get_be16(hdr + 6);
    *seq = sh_get_be64(hdr + 8);
    return 0;
}

/* Tag and sequence check of a frame whose header passed check_header. */
static int frame_verify(struct sh_frame_key *rx, const unsigned char *hdr,
                        const unsigned char *payload, uint32_t len,
                        const unsigned char *tag, uint64_t seq, const char *peer)
{
    unsigned char want[SH_FRAME_TAG_LEN];

    if (frame_tag(rx->key, hdr, payload, len, want) != 0)
        return -1;
    if (CRYPTO_memcmp(want, tag, SH_FRAME_TAG_LEN) != 0) {
        sh_warn("ctl", "frame from %s rejected: authentication tag does not verify "
                "(forged, corrupted or wrong key)", peer_name(peer));
        errno = EBADMSG;
        return -1;
    }
    /* Only authentic frames reach the sequence check, so a rejection here
     * is a replay (or a reordering), not noise. */
    if (rx->seq == UINT64_MAX || seq != rx->seq + 1) {
        sh_warn("ctl", "frame from %s rejected: sequence %llu, expected %llu "
                "(replayed or reordered)", peer_name(peer), (unsigned long long)seq,
                (unsigned long long)(rx->seq + 1));
        errno = EPROTO;
        return -1;
    }
    rx->seq = seq;
    return 0;
}

int sh_frame_open(struct sh_frame_key *rx, const unsigned char *frame,
                  size_t frame_len, uint32_t max_payload, const char *peer,
                  uint16_t *type, const unsigned char **payload, uint32_t *len)
{
    uint64_t seq;
    uint16_t t;
    uint32_t n;

    if (frame_len < SH_FRAME_HDR_LEN + SH_FRAME_TAG_LEN) {
        sh_warn("ctl", "frame from %s rejected: truncated (%zu bytes)",
                peer_name(peer), frame_len);
        errno = EBADMSG;
        return -1;
    }
    if (sh_frame_check_header(frame, max_payload, peer, &t, &seq, &n) != 0)
        return -1;
    if (frame_len != sh_frame_size(n)) {
        sh_warn("ctl", "frame from %s rejected: %s (%zu bytes for a %u-byte payload)",
                peer_name(peer), frame_len < sh_frame_size(n) ? "truncated"
                : "trailing bytes", frame_len, n);
        errno = EBADMSG;
        return -1;
    }
    if (frame_verify(rx, frame, frame + SH_FRAME_HDR_LEN, n,
                     frame + SH_FRAME_HDR_LEN + n, seq, peer) != 0)
        return -1;
    *type = t;
    *payload = frame + SH_FRAME_HDR_LEN;
    *len = n;
    return 0;
}

static int wait_fd(int fd, short events, int64_t deadline_ns)
{
    struct pollfd pfd = { .fd = fd, .events = events };

    for (;;) {
        int ms = sh_poll_ms_until(deadline_ns);
        int rc;

        if (ms == 0 && sh_now_ns() >= deadline_ns) {
            errno = ETIMEDOUT;
            return -1;
        }
        rc = poll(&pfd, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -1;
        if (rc > 0)
            return 0;
    }
}

int sh_io_read_full(int fd, void *buf, size_t len, size_t *got, int64_t deadline_ns)
{
    size_t done = 0;
    int rc = 0;

    while (done < len) {
        ssize_t n = recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);

        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = ECONNRESET;
            rc = -1;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = -1;
            break;
        }
        if (wait_fd(fd, POLLIN, deadline_ns) != 0) {
            rc = -1;
            break;
        }
    }
    if (got != NULL)
        *got = done;
    return rc;
}

int sh_io_write_full(int fd, const void *buf, size_t len, int64_t deadline_ns)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = send(fd, (const char *)buf + done, len - done,
                         MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n >= 0) {
            done += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (wait_fd(fd, POLLOUT, deadline_ns) != 0)
            return -1;
    }
    return 0;
}

int sh_frame_send(int fd, struct sh_frame_key *tx, uint16_t type,
                  const void *payload, uint32_t len, int64_t deadline_ns)
{
    size_t size = sh_frame_size(len);
    unsigned char *buf = malloc(size);
    int rc;
    int err;

    if (buf == NULL)
        return -1;
    rc = sh_frame_seal(tx, type, payload, len, buf, size);
    if (rc == 0)
        rc = sh_io_write_full(fd, buf, size, deadline_ns);
    err = errno;
    free(buf);
    errno = err;
    return rc;
}

int sh_frame_recv(int fd, struct sh_frame_key *rx, uint32_t max_payload,
                  const char *peer, uint16_t *type, unsigned char **payload,
                  uint32_t *len, int64_t deadline_ns)
{
    unsigned char hdr[SH_FRAME_HDR_LEN];
    unsigned char tag[SH_FRAME_TAG_LEN];
    unsigned char *body = NULL;
    size_t got = 0;
    uint64_t seq;
    uint32_t n;
    uint16_t t;
    int err;

    *payload = NULL;
    *len = 0;
    if (sh_io_read_full(fd, hdr, sizeof(hdr), &got, deadline_ns) != 0) {
        if (errno == ECONNRESET && got > 0)
            goto truncated;
        return -1;
    }
    if (sh_frame_check_header(hdr, max_payload, peer, &t, &seq, &n) != 0)
        return -1;
    if (n > 0) {
        body = malloc(n);
        if (body == NULL)
            return -1;
        if (sh_io_read_full(fd, body, n, NULL, deadline_ns) != 0)
            goto io_fail;
    }
    if (sh_io_read_full(fd, tag, sizeof(tag), NULL, deadline_ns) != 0)
        goto io_fail;
    if (frame_verify(rx, hdr, body, n, tag, seq, peer) != 0)
        goto fail;
    *type = t;
    *payload = body;
    *len = n;
    return 0;
io_fail:
    if (errno == ECONNRESET)
        goto truncated;
fail:
    err = errno;
    free(body);
    errno = err;
    return -1;
truncated:
    free(body);
    sh_warn("ctl", "frame from %s rejected: truncated (connection closed inside "
            "a frame)", peer_name(peer));
    errno = EBADMSG;
    return -1;
}
