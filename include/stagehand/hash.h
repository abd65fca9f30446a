/* Content digests: XXH3-128 (libxxhash, streaming) by default, SHA-256
 * (OpenSSL EVP) on request. */
#ifndef STAGEHAND_HASH_H
#define STAGEHAND_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "stagehand/io.h"
#include "stagehand/modes.h"


#define SH_HASH_MAX_LEN 32      /* bytes of the longest digest (SHA-256) */
#define SH_HASH_HEX_LEN (2 * SH_HASH_MAX_LEN + 1)

struct sh_hash;                 /* opaque streaming state */

/* Digest length in bytes (16 for XXH3-128, 32 for SHA-256), 0 if unknown. */
size_t sh_hash_len(enum sh_hash_algo algo);

/* Allocate and start a streaming digest. Returns NULL with errno = EINVAL
 * (unknown algo) or ENOMEM. Free with sh_hash_free(). */
struct sh_hash *sh_hash_new(enum sh_hash_algo algo);
/* Feed @len bytes. Returns 0, or -1 with errno = EIO (library failure). */
int sh_hash_update(struct sh_hash *h, const void *data, size_t len);
/* Write the digest (sh_hash_len bytes, canonical big-endian form) to @out,
 * which holds at least SH_HASH_MAX_LEN bytes. The state cannot be fed after
 * this. Returns the digest length, or -1 with errno = EIO. */
int sh_hash_final(struct sh_hash *h, uint8_t *out);
void sh_hash_free(struct sh_hash *h);

/* The pread piece for hashing a whole file in a process of its own (the
 * cache's adoption and verify): small enough to stay in a core's L2 between
 * the kernel's copy and the hash, and to cost a fresh process few page
 * faults. 256 MiB from tmpfs took 59-69 ms of CPU with it against 84-91 ms
 * with 4 MiB pieces (doc/performance.md, node image cache). */
#define SH_HASH_FD_BUF (256u << 10)

/* Digest of bytes [0, @size) of @fd, read with pread in @bufsize pieces
 * (loop-until-done; a file shorter than @size is EIO). Returns the digest
 * length, or -1 with errno (ENOMEM, EIO, or pread's errno). */
int sh_hash_fd(const struct sh_io_ops *io, int fd, uint64_t size,
               enum sh_hash_algo algo, size_t bufsize, uint8_t *out);

/* Lower-case hex of @len bytes into @hex (2*len+1 bytes). Returns @hex. */
char *sh_hash_hex(const uint8_t *digest, size_t len, char *hex);
/* Parse lower/upper-case hex of exactly 2*@len characters. Returns 0 or -1
 * with errno = EINVAL. */
int sh_hash_unhex(const char *hex, uint8_t *digest, size_t len);

#endif
