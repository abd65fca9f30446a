/* Segment schedule and segment header (cases F09, F10). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/engine/segment.h"

#include "check_main.h"

/* Walk the schedule: contiguous, each len in [1, seg], every count an int,
 * the last segment ends at size. Huge schedules are checked at both ends. */
static void check_range(const struct sh_sched *s, uint64_t from, uint64_t to,
                        uint64_t *sum)
{
    uint64_t expect = sh_sched_offset(s, from);

    for (uint64_t k = from; k < to; k++) {
        size_t len = sh_sched_len(s, k);
        int count = sh_sched_count(s, k);

        ck_assert_uint_eq(sh_sched_offset(s, k), expect);
        ck_assert_uint_ge(len, 1);
        ck_assert_uint_le(len, s->segment);
        ck_assert_int_gt(count, 0);
        ck_assert_uint_eq((uint64_t)count, (uint64_t)len + SH_SEG_HDR_LEN);
        expect += len;
        *sum += len;
    }
}

static void check_schedule(uint64_t size, uint64_t seg)
{
    struct sh_sched s;
    uint64_t sum = 0;

    ck_assert_int_eq(sh_sched_init(&s, size, seg), 0);
    ck_assert_uint_eq(s.nseg, size / seg + (size % seg != 0));
    if (s.nseg <= 4096) {
        check_range(&s, 0, s.nseg, &sum);
        ck_assert_uint_eq(sum, size);
    } else {
        check_range(&s, 0, 2048, &sum);
        check_range(&s, s.nseg - 2048, s.nseg, &sum);
        ck_assert_uint_eq(sh_sched_offset(&s, s.nseg - 1) +
                          sh_sched_len(&s, s.nseg - 1), size);
    }
    /* past the end: nothing */
    ck_assert_uint_eq(sh_sched_len(&s, s.nseg), 0);
    ck_assert_int_eq(sh_sched_count(&s, s.nseg), SH_SEG_HDR_LEN);
}

/* case F09 / F10: sizes 0, 1, seg-1, seg, seg+1, 2^31-1, 2^31, 2^31+1,
 * 2^32+1, and size % seg in {0, 1, seg-1} */
START_TEST(sched_boundaries)
{
    static const uint64_t segs[] = { 1, 4096, 8ULL << 20, 1ULL << 30 };
    static const uint64_t big[] = {
        (1ULL << 31) - 1, 1ULL << 31, (1ULL << 31) + 1, (1ULL << 32) + 1,
        (16ULL << 30) + 12345,
    };

    for (unsigned i = 0; i < sizeof(segs) / sizeof(segs[0]); i++) {
        uint64_t seg = segs[i];

        check_schedule(0, seg);
        check_schedule(1, seg);
        if (seg > 1)
            check_schedule(seg - 1, seg);
        check_schedule(seg, seg);
        check_schedule(seg + 1, seg);
        check_schedule(3 * seg - 1, seg);
        for (unsigned j = 0; j < sizeof(big) / sizeof(big[0]); j++) {
            if (seg >= 4096)
                check_schedule(big[j], seg);
        }
    }
}
END_TEST

START_TEST(sched_exact_values)
{
    struct sh_sched s;

    ck_assert_int_eq(sh_sched_init(&s, 0, 4096), 0);
    ck_assert_uint_eq(s.nseg, 0);

    ck_assert_int_eq(sh_sched_init(&s, (1ULL << 32) + 1, 1ULL << 30), 0);
    ck_assert_uint_eq(s.nseg, 5);
    ck_assert_uint_eq(sh_sched_len(&s, 3), 1ULL << 30);
    ck_assert_uint_eq(sh_sched_offset(&s, 4), 1ULL << 32);
    ck_assert_uint_eq(sh_sched_len(&s, 4), 1);
    ck_assert_int_eq(sh_sched_count(&s, 0), (1 << 30) + SH_SEG_HDR_LEN);

    ck_assert_int_eq(sh_sched_init(&s, (1ULL << 31) + 1, 8ULL << 20), 0);
    ck_assert_uint_eq(s.nseg, 257);
    ck_assert_uint_eq(sh_sched_len(&s, 256), 1);

    /* largest size: no overflow in the ceiling */
    ck_assert_int_eq(sh_sched_init(&s, UINT64_MAX, 1ULL << 30), 0);
    ck_assert_uint_eq(s.nseg, (UINT64_MAX >> 30) + 1);
    ck_assert_uint_eq(sh_sched_len(&s, s.nseg - 1), (1ULL << 30) - 1);
}
END_TEST

/* case F09: a 4G segment is rejected, never clamped silently */
START_TEST(sched_rejects)
{
    struct sh_sched s;

    ck_assert_int_eq(sh_sched_init(&s, 10, 0), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_sched_init(&s, 10, (1ULL << 30) + 1), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(sh_sched_init(&s, 10, 4ULL << 30), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_le((int64_t)SH_SEGMENT_MAX + SH_SEG_HDR_LEN, INT_MAX);
}
END_TEST

/* case F29: the status travels with the segment */
START_TEST(seg_hdr_roundtrip)
{
    struct sh_seg_hdr in = { SH_SEG_READ_ERROR, EIO, (1ULL << 40) + 7 };
    struct sh_seg_hdr out;
    unsigned char wire[SH_SEG_HDR_LEN];

    sh_seg_hdr_encode(&in, wire);
    ck_assert_uint_eq(wire[0], SH_SEG_READ_ERROR);  /* little-endian */
    sh_seg_hdr_decode(wire, &out);
    ck_assert_uint_eq(out.status, in.status);
    ck_assert_uint_eq(out.err, in.err);
    ck_assert_uint_eq(out.index, in.index);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("sched");

    tcase_add_test(tc, sched_boundaries);
    tcase_add_test(tc, sched_exact_values);
    tcase_add_test(tc, sched_rejects);
    tcase_add_test(tc, seg_hdr_roundtrip);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
