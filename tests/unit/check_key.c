/* Site key loading and key derivation (core/agent/key.h). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/agent/key.h"
#include "stagehand/log.h"

#include "check_main.h"

static char dir[64];

static void setup(void)
{
    sh_check_quiet_logs();
    snprintf(dir, sizeof(dir), "/tmp/check_key.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_key(const char *name, size_t len, mode_t mode, char *path, size_t plen)
{
    unsigned char buf[5000];
    int fd;

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7 + 1);
    snprintf(path, plen, "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    close(fd);
}

START_TEST(site_key_accepts_root_0600)
{
    struct sh_site_key key;
    char path[256];

    if (geteuid() != 0)
        return;   /* needs a root-owned file */
    write_key("k", 64, 0600, path, sizeof(path));
    ck_assert_int_eq(sh_key_load_site(path, &key), 0);
    ck_assert_uint_eq(key.len, 64);
    ck_assert_uint_eq(key.bytes[1], 8);
    write_key("k4", 32, 0400, path, sizeof(path));
    ck_assert_int_eq(sh_key_load_site(path, &key), 0);
    ck_assert_uint_eq(key.len, 32);
}
END_TEST

START_TEST(site_key_rejects)
{
    struct sh_site_key key;
    char path[256];

    write_key("group", 64, 0640, path, sizeof(path));
    ck_assert_int_eq(sh_key_load_site(path, &key), -1);
    ck_assert_int_eq(errno, EPERM);
    write_key("other", 64, 0604, path, sizeof(path));
    ck_assert_int_eq(sh_key_load_site(path, &key), -1);
    ck_assert_int_eq(errno, EPERM);
    if (geteuid() == 0) {
        char link[300];

        write_key("short", 31, 0600, path, sizeof(path));
        ck_assert_int_eq(sh_key_load_site(path, &key), -1);
        ck_assert_int_eq(errno, EINVAL);
        write_key("long", SH_SITE_KEY_MAX + 1, 0600, path, sizeof(path));
        ck_assert_int_eq(sh_key_load_site(path, &key), -1);
        ck_assert_int_eq(errno, EINVAL);
        write_key("user", 64, 0600, path, sizeof(path));
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        ck_assert_int_eq(sh_key_load_site(path, &key), -1);
        ck_assert_int_eq(errno, EPERM);
        write_key("target", 64, 0600, path, sizeof(path));
        snprintf(link, sizeof(link), "%s/link", dir);
        ck_assert_int_eq(symlink(path, link), 0);
        ck_assert_int_eq(sh_key_load_site(link, &key), -1);
        ck_assert_int_eq(errno, ELOOP);
        ck_assert_int_eq(sh_key_load_site(dir, &key), -1);
        ck_assert_int_eq(errno, EINVAL);
    }
    snprintf(path, sizeof(path), "%s/absent", dir);
    ck_assert_int_eq(sh_key_load_site(path, &key), -1);
    ck_assert_int_eq(errno, ENOENT);
}
END_TEST

static void test_site(struct sh_site_key *site)
{
    memset(site, 0, sizeof(*site));
    site->len = 32;
    for (unsigned i = 0; i < 32; i++)
        site->bytes[i] = (unsigned char)i;
}

/* Known answer: the documented encoding, computed independently. */
START_TEST(job_key_encoding)
{
    static const unsigned char msg[] = {
        0, 0, 0, 20, 's', 't', 'a', 'g', 'e', 'h', 'a', 'n', 'd', '/', 'j', 'o', 'b',
        '-', 'k', 'e', 'y', '/', 'v', '1',
        0, 0, 0, 4, 'c', 'l', 'u', 's',
        0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x30, 0x39,
        0, 0, 0, 8, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe,
        0, 0, 0, 4, 0, 0, 0x03, 0xe9,
    };
    struct sh_site_key site;
    unsigned char got[SH_KEY_LEN], want[SH_KEY_LEN];
    size_t wlen = 0;

    test_site(&site);
    ck_assert_int_eq(sh_key_derive_job(&site, "clus", 12345, 0xfffffffeULL, 1001, got), 0);
    ck_assert_ptr_nonnull(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, site.bytes, 32,
                                    msg, sizeof(msg), want, sizeof(want), &wlen));
    ck_assert_uint_eq(wlen, SH_KEY_LEN);
    ck_assert_mem_eq(got, want, SH_KEY_LEN);
}
END_TEST

START_TEST(job_key_separates_inputs)
{
    struct sh_site_key site;
    unsigned char base[SH_KEY_LEN], k[SH_KEY_LEN];

    test_site(&site);
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 0, 1000, base), 0);
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 0, 1000, k), 0);
    ck_assert_mem_eq(base, k, SH_KEY_LEN);
    ck_assert_int_eq(sh_key_derive_job(&site, "d", 7, 0, 1000, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 8, 0, 1000, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 1, 1000, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 0, 1001, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    /* a wrapped job id on another cluster name is still another key */
    ck_assert_int_eq(sh_key_derive_job(&site, "", 7, 0, 1000, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    site.bytes[31] ^= 1;
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 0, 1000, k), 0);
    ck_assert(memcmp(base, k, SH_KEY_LEN) != 0);
    site.len = 31;
    ck_assert_int_eq(sh_key_derive_job(&site, "c", 7, 0, 1000, k), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(session_keys)
{
    unsigned char kjob[SH_KEY_LEN], nc[SH_NONCE_LEN], ns[SH_NONCE_LEN];
    unsigned char c2s[SH_KEY_LEN], s2c[SH_KEY_LEN], a[SH_KEY_LEN], b[SH_KEY_LEN];

    ck_assert_int_eq(sh_random_bytes(kjob, sizeof(kjob)), 0);
    ck_assert_int_eq(sh_random_bytes(nc, sizeof(nc)), 0);
    ck_assert_int_eq(sh_random_bytes(ns, sizeof(ns)), 0);
    ck_assert(memcmp(nc, ns, SH_NONCE_LEN) != 0);
    ck_assert_int_eq(sh_key_derive_session(kjob, nc, ns, c2s, s2c), 0);
    ck_assert(memcmp(c2s, s2c, SH_KEY_LEN) != 0);
    ck_assert_int_eq(sh_key_derive_session(kjob, nc, ns, a, b), 0);
    ck_assert_mem_eq(a, c2s, SH_KEY_LEN);
    ck_assert_mem_eq(b, s2c, SH_KEY_LEN);
    /* roles are bound: swapping nonces gives other keys */
    ck_assert_int_eq(sh_key_derive_session(kjob, ns, nc, a, b), 0);
    ck_assert(memcmp(a, c2s, SH_KEY_LEN) != 0);
    ck_assert(memcmp(b, s2c, SH_KEY_LEN) != 0);
    nc[0] ^= 1;
    ck_assert_int_eq(sh_key_derive_session(kjob, nc, ns, a, b), 0);
    ck_assert(memcmp(a, c2s, SH_KEY_LEN) != 0);
    sh_key_wipe(a, sizeof(a));
    for (unsigned i = 0; i < SH_KEY_LEN; i++)
        ck_assert_uint_eq(a[i], 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("key");
    TCase *tc = tcase_create("key");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, site_key_accepts_root_0600);
    tcase_add_test(tc, site_key_rejects);
    tcase_add_test(tc, job_key_encoding);
    tcase_add_test(tc, job_key_separates_inputs);
    tcase_add_test(tc, session_keys);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
