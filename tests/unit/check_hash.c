/* Digests: XXH3-128 and SHA-256 through one streaming interface. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "stagehand/hash.h"

#include "check_main.h"

START_TEST(sha256_vector)
{
    struct sh_hash *h = sh_hash_new(SH_HASH_SHA256);
    uint8_t d[SH_HASH_MAX_LEN];
    char hex[SH_HASH_HEX_LEN];

    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(sh_hash_update(h, "a", 1), 0);
    ck_assert_int_eq(sh_hash_update(h, "bc", 2), 0);
    ck_assert_int_eq(sh_hash_final(h, d), 32);
    sh_hash_free(h);
    ck_assert_str_eq(sh_hash_hex(d, 32, hex),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(xxh3_streaming_matches_oneshot)
{
    static unsigned char data[100000];
    struct sh_hash *h = sh_hash_new(SH_HASH_XXH3);
    uint8_t d[SH_HASH_MAX_LEN];
    XXH128_canonical_t c;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 31 + 7);
    ck_assert_ptr_nonnull(h);
    for (size_t off = 0; off < sizeof(data); off += 777) {
        size_t n = sizeof(data) - off < 777 ? sizeof(data) - off : 777;

        ck_assert_int_eq(sh_hash_update(h, data + off, n), 0);
    }
    ck_assert_int_eq(sh_hash_final(h, d), 16);
    sh_hash_free(h);
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, sizeof(data)));
    ck_assert_mem_eq(d, c.digest, 16);
}
END_TEST

START_TEST(names_and_hex)
{
    enum sh_hash_algo a;
    uint8_t d[4];

    ck_assert_int_eq(sh_hash_parse("xxh3", &a), 0);
    ck_assert_int_eq(a, SH_HASH_XXH3);
    ck_assert_int_eq(sh_hash_parse("sha256", &a), 0);
    ck_assert_int_eq(a, SH_HASH_SHA256);
    ck_assert_int_eq(sh_hash_parse("md5", &a), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_str_eq(sh_hash_name(SH_HASH_SHA256), "sha256");
    ck_assert_uint_eq(sh_hash_len(SH_HASH_XXH3), 16);
    ck_assert_int_eq(sh_hash_unhex("00ff7A10", d, 4), 0);
    ck_assert_uint_eq(d[1], 0xff);
    ck_assert_uint_eq(d[2], 0x7a);
    ck_assert_int_eq(sh_hash_unhex("00ff7", d, 4), -1);
    ck_assert_int_eq(sh_hash_unhex("00ff7g10", d, 4), -1);
}
END_TEST

START_TEST(hash_fd)
{
    char path[] = "/tmp/check_hash.XXXXXX";
    int fd = mkstemp(path);
    uint8_t a[SH_HASH_MAX_LEN], b[SH_HASH_MAX_LEN];
    struct sh_hash *h = sh_hash_new(SH_HASH_SHA256);
    char buf[10000];

    ck_assert_int_ge(fd, 0);
    unlink(path);
    memset(buf, 'x', sizeof(buf));
    ck_assert_int_eq(write(fd, buf, sizeof(buf)), (int)sizeof(buf));
    ck_assert_int_eq(sh_hash_fd(NULL, fd, sizeof(buf), SH_HASH_SHA256, 333, a), 32);
    sh_hash_update(h, buf, sizeof(buf));
    sh_hash_final(h, b);
    sh_hash_free(h);
    ck_assert_mem_eq(a, b, 32);
    /* the file is shorter than asked: EIO, not a digest of less */
    ck_assert_int_eq(sh_hash_fd(NULL, fd, sizeof(buf) + 1, SH_HASH_XXH3, 4096, a), -1);
    ck_assert_int_eq(errno, EIO);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("hash");

    tcase_add_test(tc, sha256_vector);
    tcase_add_test(tc, xxh3_streaming_matches_oneshot);
    tcase_add_test(tc, names_and_hex);
    tcase_add_test(tc, hash_fd);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
