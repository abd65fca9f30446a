/* Site key loading and key derivation (see key.h). */
#include "config.h"
#include "stagehand/bytes.h"
#include "key.h"
#include "stagehand/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

static EVP_MAC *hmac_algo;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac_algo = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

int sh_hmac_sha256(const unsigned char *key, size_t keylen,
                   const struct iovec *iov, int iovcnt,
                   unsigned char out[SH_KEY_LEN])
{
    static char digest[] = "SHA256";
    OSSL_PARAM params[2];
    EVP_MAC_CTX *ctx = NULL;
    size_t outlen = 0;
    int rc = -1;

    pthread_once(&hmac_once, hmac_fetch);
    if (hmac_algo == NULL)
        goto out;
    ctx = EVP_MAC_CTX_new(hmac_algo);
    if (ctx == NULL)
        goto out;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
    params[1] = OSSL_PARAM_construct_end();
    if (EVP_MAC_init(ctx, key, keylen, params) != 1)
        goto out;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0 &&
            EVP_MAC_update(ctx, iov[i].iov_base, iov[i].iov_len) != 1)
            goto out;
    }
    if (EVP_MAC_final(ctx, out, &outlen, SH_KEY_LEN) != 1 || outlen != SH_KEY_LEN)
        goto out;
    rc = 0;
out:
    EVP_MAC_CTX_free(ctx);
    if (rc != 0) {
        sh_error("crypto", "HMAC-SHA256 failed in OpenSSL");
        errno = EIO;
    }
    return rc;
}

int sh_random_bytes(void *buf, size_t len)
{
    if (len > INT32_MAX || RAND_bytes(buf, (int)len) != 1) {
        sh_error("crypto", "RAND_bytes failed");
        errno = EIO;
        return -1;
    }
    return 0;
}

void sh_key_wipe(void *buf, size_t len)
{
    OPENSSL_cleanse(buf, len);
}

int sh_key_load_site(const char *path, struct sh_site_key *key)
{
    struct stat st;
    size_t got = 0;
    int fd;
    int err;

    memset(key, 0, sizeof(*key));
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        err = errno;
        sh_error("key", "cannot open site key file %s: %s", path, strerror(err));
        errno = err;
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        err = errno;
        sh_error("key", "cannot stat site key file %s: %s", path, strerror(err));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        sh_error("key", "site key file %s is not a regular file", path);
        err = EINVAL;
        goto fail;
    }
    if (st.st_uid != 0) {
        sh_error("key", "site key file %s is owned by uid %u, must be owned by root",
                 path, (unsigned)st.st_uid);
        err = EPERM;
        goto fail;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        sh_error("key", "site key file %s has mode %04o: group/other access must be "
                 "removed (chmod 0600)", path, (unsigned)(st.st_mode & 07777));
        err = EPERM;
        goto fail;
    }
    if (st.st_size < (off_t)SH_SITE_KEY_MIN || st.st_size > (off_t)SH_SITE_KEY_MAX) {
        sh_error("key", "site key file %s has %lld bytes, need %u..%u random bytes",
                 path, (long long)st.st_size, SH_SITE_KEY_MIN, SH_SITE_KEY_MAX);
        err = EINVAL;
        goto fail;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, key->bytes + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? errno : EIO;
            sh_error("key", "cannot read site key file %s: %s", path,
                     n < 0 ? strerror(err) : "short read");
            goto fail;
        }
        got += (size_t)n;
    }
    key->len = got;
    close(fd);
    return 0;
fail:
    sh_key_wipe(key, sizeof(*key));
    close(fd);
    errno = err;
    return -1;
}

int sh_key_derive_job(const struct sh_site_key *site, const char *cluster,
                      uint64_t jobid, uint64_t stepid, uint32_t uid,
                      unsigned char out[SH_KEY_LEN])
{
    static const char label[] = "stagehand/job-key/v1";
    unsigned char len_label[4], len_cluster[4], len_8[4], len_4[4];
    unsigned char job[8], step[8], uidb[4];
    size_t clen = strlen(cluster);
    struct iovec iov[10];

    if (site->len < SH_SITE_KEY_MIN || site->len > SH_SITE_KEY_MAX ||
        clen > UINT32_MAX) {
        errno = EINVAL;
        return -1;
    }
    sh_put_be32(len_label, (uint32_t)(sizeof(label) - 1));
    sh_put_be32(len_cluster, (uint32_t)clen);
    sh_put_be32(len_8, 8);
    sh_put_be32(len_4, 4);
    sh_put_be64(job, jobid);
    sh_put_be64(step, stepid);
    sh_put_be32(uidb, uid);
    iov[0] = (struct iovec){ len_label, 4 };
    iov[1] = (struct iovec){ (void *)(uintptr_t)label, sizeof(label) - 1 };
    iov[2] = (struct iovec){ len_cluster, 4 };
    iov[3] = (struct iovec){ (void *)(uintptr_t)cluster, clen };
    iov[4] = (struct iovec){ len_8, 4 };
    iov[5] = (struct iovec){ job, 8 };
    iov[6] = (struct iovec){ len_8, 4 };
    iov[7] = (struct iovec){ step, 8 };
    iov[8] = (struct iovec){ len_4, 4 };
    iov[9] = (struct iovec){ uidb, 4 };
    return sh_hmac_sha256(site->bytes, site->len, iov, 10, out);
}

int sh_key_derive_session(const unsigned char kjob[SH_KEY_LEN],
                          const unsigned char nonce_client[SH_NONCE_LEN],
                          const unsigned char nonce_server[SH_NONCE_LEN],
                          unsigned char c2s[SH_KEY_LEN],
                          unsigned char s2c[SH_KEY_LEN])
{
    static const char label[] = "stagehand/session/v1";
    static const char dir_c2s[] = "c2s";
    static const char dir_s2c[] = "s2c";
    unsigned char len_label[4], len_dir[4], len_nonce[4];
    struct iovec iov[8];

    sh_put_be32(len_label, (uint32_t)(sizeof(label) - 1));
    sh_put_be32(len_dir, 3);
    sh_put_be32(len_nonce, SH_NONCE_LEN);
    iov[0] = (struct iovec){ len_label, 4 };
    iov[1] = (struct iovec){ (void *)(uintptr_t)label, sizeof(label) - 1 };
    iov[2] = (struct iovec){ len_dir, 4 };
    iov[3] = (struct iovec){ (void *)(uintptr_t)dir_c2s, 3 };
    iov[4] = (struct iovec){ len_nonce, 4 };
    iov[5] = (struct iovec){ (void *)(uintptr_t)nonce_client, SH_NONCE_LEN };
    iov[6] = (struct iovec){ len_nonce, 4 };
    iov[7] = (struct iovec){ (void *)(uintptr_t)nonce_server, SH_NONCE_LEN };
    if (sh_hmac_sha256(kjob, SH_KEY_LEN, iov, 8, c2s) != 0)
        return -1;
    iov[3] = (struct iovec){ (void *)(uintptr_t)dir_s2c, 3 };
    if (sh_hmac_sha256(kjob, SH_KEY_LEN, iov, 8, s2c) != 0) {
        sh_key_wipe(c2s, SH_KEY_LEN);
        return -1;
    }
    return 0;
}
