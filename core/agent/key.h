/* Keys of the agent control plane (doc/design.md §3, §6).
 *
 * K_site is a root-only file of >= 32 random bytes. Every job derives
 *   K_job = HMAC-SHA256(K_site, "stagehand/job-key/v1" | cluster | jobid | stepid | uid)
 * where every field is length-prefixed (u32 big-endian length, then the bytes;
 * integers as fixed-width big-endian), so no two inputs share an encoding.
 * A user can read their own agent's K_job; it is useless for any other job,
 * step, user or cluster. Per connection, two session keys (one per direction)
 * are derived from K_job and both handshake nonces. All key material is wiped
 * with OPENSSL_cleanse. */
#ifndef STAGEHAND_KEY_H
#define STAGEHAND_KEY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SH_KEY_LEN          32u   /* K_job and session keys, bytes */
#define SH_NONCE_LEN        32u   /* handshake nonces, bytes */
#define SH_SITE_KEY_MIN     32u   /* shortest accepted site key file */
#define SH_SITE_KEY_MAX     4096u /* longest accepted site key file */

struct sh_site_key {
    size_t len;
    unsigned char bytes[SH_SITE_KEY_MAX];
};

/* Read the site key file at @path into @key. The file must be a regular file
 * (symlinks are not followed), owned by root, without any group or other
 * permission bits, and SH_SITE_KEY_MIN..SH_SITE_KEY_MAX bytes long. Logs the
 * reason on failure. Returns 0, or -1 with errno: ENOENT/EACCES/ELOOP (open),
 * EPERM (owner or mode), EINVAL (not a regular file, too short or too long),
 * EIO (short read). */
int sh_key_load_site(const char *path, struct sh_site_key *key)
    __attribute__((nonnull));

/* Derive K_job (SH_KEY_LEN bytes into @out) from the site key. @cluster may be
 * "" but not NULL. Returns 0 or -1 (errno EINVAL, or EIO on a crypto failure). */
int sh_key_derive_job(const struct sh_site_key *site, const char *cluster,
                      uint64_t jobid, uint64_t stepid, uint32_t uid,
                      unsigned char out[SH_KEY_LEN]) __attribute__((nonnull));

/* Session keys of one connection: @c2s protects client->server frames, @s2c
 * server->client frames. Both depend on K_job and both nonces. Returns 0/-1. */
int sh_key_derive_session(const unsigned char kjob[SH_KEY_LEN],
                          const unsigned char nonce_client[SH_NONCE_LEN],
                          const unsigned char nonce_server[SH_NONCE_LEN],
                          unsigned char c2s[SH_KEY_LEN],
                          unsigned char s2c[SH_KEY_LEN]) __attribute__((nonnull));

/* HMAC-SHA256 of the concatenation of @iov under @key. Returns 0, or -1 with
 * errno EIO when OpenSSL fails. */
int sh_hmac_sha256(const unsigned char *key, size_t keylen,
                   const struct iovec *iov, int iovcnt,
                   unsigned char out[SH_KEY_LEN]);

/* Fill @buf with @len cryptographically random bytes (RAND_bytes).
 * Returns 0 or -1 (errno EIO). */
int sh_random_bytes(void *buf, size_t len);

/* Overwrite key material so the compiler cannot elide it. */
void sh_key_wipe(void *buf, size_t len);

#endif
