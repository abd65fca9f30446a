/* Content digests (stagehand/hash.h). Library code: the agent and the engine. */
#include "config.h"
#include "stagehand/hash.h"
#include "stagehand/bytes.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct sh_hash {
    enum sh_hash_algo algo;
    XXH3_state_t *xxh;
    EVP_MD_CTX *md;
};


struct sh_hash *sh_hash_new(enum sh_hash_algo algo)
{
    struct sh_hash *h;

    if (sh_hash_len(algo) == 0) {
        errno = EINVAL;
        return NULL;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->algo = algo;
    if (algo == SH_HASH_XXH3) {
        h->xxh = XXH3_createState();
        if (h->xxh == NULL || XXH3_128bits_reset(h->xxh) != XXH_OK)
            goto fail;
    } else {
        h->md = EVP_MD_CTX_new();
        if (h->md == NULL || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1)
            goto fail;
    }
    return h;
fail:
    sh_hash_free(h);
    errno = ENOMEM;
    return NULL;
}

int sh_hash_update(struct sh_hash *h, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (h->algo == SH_HASH_XXH3) {
        if (XXH3_128bits_update(h->xxh, data, len) != XXH_OK)
            goto fail;
    } else if (EVP_DigestUpdate(h->md, data, len) != 1) {
        goto fail;
    }
    return 0;
fail:
    errno = EIO;
    return -1;
}

int sh_hash_final(struct sh_hash *h, uint8_t *out)
{
    if (h->algo == SH_HASH_XXH3) {
        XXH128_canonical_t c;

        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h->xxh));
        memcpy(out, c.digest, sizeof(c.digest));
        return (int)sizeof(c.digest);
    } else {
        unsigned int n = 0;

        if (EVP_DigestFinal_ex(h->md, out, &n) != 1 || n != 32) {
            errno = EIO;
            return -1;
        }
        return (int)n;
    }
}

void sh_hash_free(struct sh_hash *h)
{
    if (h == NULL)
        return;
    if (h->xxh != NULL)
        XXH3_freeState(h->xxh);
    if (h->md != NULL)
        EVP_MD_CTX_free(h->md);
    free(h);
}

int sh_hash_fd(const struct sh_io_ops *io, int fd, uint64_t size,
               enum sh_hash_algo algo, size_t bufsize, uint8_t *out)
{
    struct sh_hash *h;
    uint8_t *buf;
    uint64_t off = 0;
    int rc = -1;

    if (bufsize == 0) {
        errno = EINVAL;
        return -1;
    }
    h = sh_hash_new(algo);
    if (h == NULL)
        return -1;
    buf = malloc(bufsize);
    if (buf == NULL)
        goto out;
    while (off < size) {
        size_t want = size - off < bufsize ? (size_t)(size - off) : bufsize;
        ssize_t n = sh_io_pread_full(io, fd, buf, want, off);

        if (n < 0)
            goto out;
        if ((size_t)n != want) {
            errno = EIO;        /* file shorter than expected */
            goto out;
        }
        if (sh_hash_update(h, buf, want) != 0)
            goto out;
        off += want;
    }
    rc = sh_hash_final(h, out);
out:
    free(buf);
    {
        int saved = errno;

        sh_hash_free(h);
        errno = saved;
    }
    return rc;
}


