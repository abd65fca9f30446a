/* Authenticated frames of the agent control plane (doc/design.md §3, §6).
 *
 * Wire format (all integers big-endian):
 *
 *   offset  size  field
 *        0     4  magic   "SHCF" (0x53484346)
 *        4     2  version SH_FRAME_VERSION
 *        6     2  type    (caller-defined, non-zero)
 *        8     8  seq     1, 2, 3, ... per direction of one connection
 *       16     4  length  payload bytes, <= the receiver's bound
 *       20     4  reserved, must be 0
 *       24     length  payload
 *   24+length  32  tag = HMAC-SHA256(session key of this direction, header | payload)
 *
 * A receiver accepts a frame only if the tag verifies (constant-time compare)
 * and seq is exactly one more than the last accepted seq: a replayed, dropped
 * or reordered frame is rejected. Rejections are logged with the reason and
 * the peer's name. */
#ifndef STAGEHAND_FRAME_H
#define STAGEHAND_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"

#define SH_FRAME_MAGIC        0x53484346u
#define SH_FRAME_VERSION      1u
#define SH_FRAME_HDR_LEN      24u
#define SH_FRAME_TAG_LEN      32u
/* Default bound on one frame's payload (bytes). Fence data of a few KiB per
 * node for thousands of nodes fits; a hostile length cannot make us allocate
 * more than this. */
#define SH_FRAME_MAX_PAYLOAD  (16u << 20)

/* One direction of a connection: its session key and the last sequence
 * number sent (tx) or accepted (rx). */
struct sh_frame_key {
    unsigned char key[SH_KEY_LEN];
    uint64_t seq;
};

/* Bytes needed for a frame with @payload_len payload bytes. */
static inline size_t sh_frame_size(uint32_t payload_len)
{
    return SH_FRAME_HDR_LEN + (size_t)payload_len + SH_FRAME_TAG_LEN;
}

/* Encode one frame into @out (at least sh_frame_size(len) bytes), taking the
 * next sequence number of @tx. Returns 0, or -1 with errno EINVAL (type 0,
 * out too small), EOVERFLOW (sequence exhausted) or EIO (crypto). */
int sh_frame_seal(struct sh_frame_key *tx, uint16_t type, const void *payload,
                  uint32_t len, unsigned char *out, size_t outlen);

/* Check a received header: magic, version, reserved field and
 * length <= @max_payload. Stores type, seq and length. Returns 0, or -1 with
 * errno EBADMSG (magic, version, reserved, type) or EMSGSIZE (too long).
 * Logs the reason, naming @peer (may be NULL). */
int sh_frame_check_header(const unsigned char hdr[SH_FRAME_HDR_LEN],
                          uint32_t max_payload, const char *peer,
                          uint16_t *type, uint64_t *seq, uint32_t *len);

/* Verify one complete frame of exactly @frame_len bytes. On success advances
 * @rx->seq and points *payload into @frame. Returns 0, or -1 with errno
 * EBADMSG (malformed, truncated or trailing bytes, forged tag), EMSGSIZE
 * (oversized) or EPROTO (replayed or out-of-order sequence). Logs why. */
int sh_frame_open(struct sh_frame_key *rx, const unsigned char *frame,
                  size_t frame_len, uint32_t max_payload, const char *peer,
                  uint16_t *type, const unsigned char **payload, uint32_t *len);

/* Write one frame to the stream @fd before @deadline_ns (CLOCK_MONOTONIC).
 * @fd may be blocking or not. Returns 0, or -1 with errno ETIMEDOUT, EPIPE,
 * ECONNRESET, ... */
int sh_frame_send(int fd, struct sh_frame_key *tx, uint16_t type,
                  const void *payload, uint32_t len, int64_t deadline_ns);

/* Read and verify one frame from @fd before @deadline_ns. On success *payload
 * is a malloc'd buffer of *len bytes (NULL when 0; caller frees). Returns 0,
 * or -1 with errno as sh_frame_open, ECONNRESET (peer closed before a frame
 * began), EBADMSG (peer closed inside a frame: truncated), ETIMEDOUT. */
int sh_frame_recv(int fd, struct sh_frame_key *rx, uint32_t max_payload,
                  const char *peer, uint16_t *type, unsigned char **payload,
                  uint32_t *len, int64_t deadline_ns);

/* Stream helpers for non-blocking (or blocking) sockets: move exactly @len
 * bytes before @deadline_ns, polling in between (no busy loop).
 * sh_io_read_full stores the bytes read in *got (may be NULL); on EOF it
 * returns -1 with errno ECONNRESET. Both return 0 or -1 with errno. */
int sh_io_read_full(int fd, void *buf, size_t len, size_t *got, int64_t deadline_ns);
int sh_io_write_full(int fd, const void *buf, size_t len, int64_t deadline_ns);

#endif
