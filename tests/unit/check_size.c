#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "stagehand/modes.h"
#include "stagehand/size.h"

#include "check_main.h"

START_TEST(size_units)
{
    uint64_t v = 0;

    ck_assert_int_eq(sh_parse_size("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(sh_parse_size("4096", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(sh_parse_size("8M", &v), 0);
    ck_assert_uint_eq(v, 8ULL << 20);
    ck_assert_int_eq(sh_parse_size("1GiB", &v), 0);
    ck_assert_uint_eq(v, 1ULL << 30);
    ck_assert_int_eq(sh_parse_size("4g", &v), 0);
    ck_assert_uint_eq(v, 4ULL << 30);
}
END_TEST

START_TEST(size_rejects)
{
    uint64_t v = 0;

    ck_assert_int_eq(sh_parse_size("", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_size("-1", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_size("12X", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_size(" 1M", &v), -1);
    ck_assert_int_eq(sh_parse_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sh_parse_size("17179869184T", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
}
END_TEST

/* case F09: one parse of the segment size for the plugstack and the engine. */
START_TEST(segment_size_bounds)
{
    uint64_t v = 7;

    ck_assert_int_eq(sh_parse_segment_size("512K", &v), 0);
    ck_assert_uint_eq(v, 512ULL << 10);
    ck_assert_int_eq(sh_parse_segment_size("1", &v), 0);
    ck_assert_uint_eq(v, 1);
    ck_assert_int_eq(sh_parse_segment_size("1G", &v), 0);
    ck_assert_uint_eq(v, SH_SEGMENT_MAX);
    v = 7;
    ck_assert_int_eq(sh_parse_segment_size("0", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sh_parse_segment_size("1025M", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sh_parse_segment_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sh_parse_segment_size("8X", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_segment_size("-1", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(duration_units)
{
    uint64_t ns = 0;

    ck_assert_int_eq(sh_parse_duration("600", &ns), 0);
    ck_assert_uint_eq(ns, 600ULL * 1000000000ULL);
    ck_assert_int_eq(sh_parse_duration("250ms", &ns), 0);
    ck_assert_uint_eq(ns, 250ULL * 1000000ULL);
    ck_assert_int_eq(sh_parse_duration("2m", &ns), 0);
    ck_assert_uint_eq(ns, 120ULL * 1000000000ULL);
    ck_assert_int_eq(sh_parse_duration("1d", &ns), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* Plain decimal integers (agent inputs, metadata and status fields). */
START_TEST(u64_plain_decimal)
{
    uint64_t v = 1;

    ck_assert_int_eq(sh_parse_u64("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(sh_parse_u64("18446744073709551615", &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    v = 7;
    ck_assert_int_eq(sh_parse_u64("18446744073709551616", &v), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_uint_eq(v, 7); /* untouched on failure */
    ck_assert_int_eq(sh_parse_u64("", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_u64("2x", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_u64(" 2", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_u64("+2", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_u64("-2", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_u64("2M", &v), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(octal_modes)
{
    unsigned m = 1;

    ck_assert_int_eq(sh_parse_mode("0700", &m), 0);
    ck_assert_uint_eq(m, 0700);
    ck_assert_int_eq(sh_parse_mode("755", &m), 0);
    ck_assert_uint_eq(m, 0755);
    ck_assert_int_eq(sh_parse_mode("077", &m), 0);
    ck_assert_uint_eq(m, 077);
    ck_assert_int_eq(sh_parse_mode("0", &m), 0);
    ck_assert_uint_eq(m, 0);
    m = 5;
    ck_assert_int_eq(sh_parse_mode("4755", &m), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sh_parse_mode("0800", &m), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_parse_mode("", &m), -1);
    ck_assert_int_eq(sh_parse_mode("00700", &m), -1);
    ck_assert_int_eq(sh_parse_mode("-1", &m), -1);
    ck_assert_int_eq(sh_parse_mode(" 700", &m), -1);
    ck_assert_uint_eq(m, 5); /* untouched on failure */
}
END_TEST

static Suite *size_suite(void)
{
    Suite *s = suite_create("size");
    TCase *tc = tcase_create("parse");

    tcase_add_test(tc, size_units);
    tcase_add_test(tc, size_rejects);
    tcase_add_test(tc, segment_size_bounds);
    tcase_add_test(tc, duration_units);
    tcase_add_test(tc, u64_plain_decimal);
    tcase_add_test(tc, octal_modes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(size_suite());
}
