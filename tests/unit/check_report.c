/* Engine summary: JSON escaping, phase times adding up, failing nodes named
 * (issue 3: "the final report names each failing node and its reason"). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/report.h"
#include "core/engine/segment.h"

#include "check_main.h"

static char *capture(void (*fn)(const struct sh_report *, FILE *),
                     const struct sh_report *r)
{
    static char buf[8192];
    FILE *f = fmemopen(buf, sizeof(buf), "w");

    ck_assert_ptr_nonnull(f);
    fn(r, f);
    fclose(f);
    return buf;
}

static void json_wrap(const struct sh_report *r, FILE *f)
{
    (void)r;
    sh_json_string(f, "a\"b\\c\nd\te\x01");
}

START_TEST(json_escaping)
{
    struct sh_report r;

    memset(&r, 0, sizeof(r));
    ck_assert_str_eq(capture(json_wrap, &r), "\"a\\\"b\\\\c\\u000ad\\u0009e\\u0001\"");
}
END_TEST

static void sample(struct sh_report *r, struct sh_bcast_opts *o,
                   struct sh_node_result *res)
{
    memset(r, 0, sizeof(*r));
    memset(o, 0, sizeof(*o));
    memset(res, 0, 3 * sizeof(*res));
    strcpy(o->source, "/shared/img.sqsh");
    strcpy(o->dest, "/nvme/img.sqsh");
    o->segment = 8 << 20;
    o->depth = 4;
    o->hash = SH_HASH_XXH3;
    r->opts = o;
    r->size = 1 << 30;
    r->src_ok = 1;
    r->world_size = 3;
    r->nodes = 3;
    r->results = res;
    for (int p = 0; p < SH_PH_COUNT; p++)
        r->phase_s[p] = 0.25;
    r->total_s = 1.5;
    r->bytes_transferred = 1 << 30;
    strcpy(res[0].host, "n1");
    res[0].status = SH_NODE_COPIED;
    strcpy(res[1].host, "n2");
    res[1].world_rank = 1;
    res[1].status = SH_NODE_FAILED;
    res[1].err = 28;
    res[1].exit_class = SH_EXIT_DEST;
    strcpy(res[1].phase, "pre-check");
    strcpy(res[1].reason, "not enough space: needed 1.00 GiB, free 1.00 MiB");
    strcpy(res[2].host, "n3");
    res[2].world_rank = 2;
    res[2].status = SH_NODE_CURRENT;
    r->exit_code = SH_EXIT_DEST;
}

START_TEST(text_names_failures)
{
    struct sh_report r;
    struct sh_bcast_opts o;
    struct sh_node_result res[3];
    const char *out;

    sample(&r, &o, res);
    out = capture(sh_report_text, &r);
    ck_assert_ptr_nonnull(strstr(out, "/shared/img.sqsh -> /nvme/img.sqsh: FAILED"));
    ck_assert_ptr_nonnull(strstr(out, "1 copied, 1 already current, 1 failed"));
    ck_assert_ptr_nonnull(strstr(out, "FAILED on n2 (rank 1) in pre-check: not enough space"));
    ck_assert_ptr_nonnull(strstr(out, "= total 1.500s"));
    ck_assert_ptr_nonnull(strstr(out, "effective rate 682.67 MiB/s"));
}
END_TEST

/* The reader's failure names the segment where one was at fault; a change
 * found by the reader's fstat after the last segment names none (the
 * new-user trial saw "source changed ... at segment 0" for a change made
 * near 150 MiB). */
START_TEST(source_failure_text)
{
    char buf[200];

    sh_src_failure_text("/shared/a.sqsh", SH_SEG_READ_ERROR, EIO, 7, buf, sizeof(buf));
    ck_assert_str_eq(buf, "source /shared/a.sqsh: read error at segment 7: Input/output error");
    sh_src_failure_text("/shared/a.sqsh", SH_SEG_SHORT_SOURCE, 0, 108, buf, sizeof(buf));
    ck_assert_str_eq(buf, "source /shared/a.sqsh: source shorter than announced at segment 108");
    sh_src_failure_text("/shared/a.sqsh", SH_SRC_CHANGED, 0, 0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "source /shared/a.sqsh: source changed while it was copied (size or "
                          "times differ at its end)");
    ck_assert_ptr_null(strstr(buf, "segment"));
    /* truncated, terminated */
    sh_src_failure_text("/shared/a.sqsh", SH_SRC_CHANGED, 0, 0, buf, 16);
    ck_assert_uint_eq(strlen(buf), 15);
}
END_TEST

START_TEST(json_fields)
{
    struct sh_report r;
    struct sh_bcast_opts o;
    struct sh_node_result res[3];
    const char *out;

    sample(&r, &o, res);
    out = capture(sh_report_json, &r);
    ck_assert_ptr_nonnull(strstr(out, "{\"format\":1,\"status\":\"failed\",\"exit_code\":4,"));
    ck_assert_ptr_nonnull(strstr(out, "\"nodes_copied\":1,\"nodes_current\":1,\"nodes_failed\":1,"));
    ck_assert_ptr_nonnull(strstr(out, "\"pre-check\":0.250000"));
    ck_assert_ptr_nonnull(strstr(out, "\"total\":1.500000"));
    ck_assert_ptr_nonnull(strstr(out, "{\"node\":\"n2\",\"rank\":1,\"status\":\"failed\""));
    ck_assert_ptr_nonnull(strstr(out, "\"errno\":28,\"exit_class\":4,\"phase\":\"pre-check\""));
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
}
END_TEST

/* case F03: a run that first waited for another run's lock says so, and
 * whom it waited for; one that did not wait prints no such line. */
START_TEST(lock_wait_reported)
{
    struct sh_report r;
    struct sh_bcast_opts o;
    struct sh_node_result res[3];
    const char *out;

    sample(&r, &o, res);
    ck_assert_ptr_null(strstr(capture(sh_report_text, &r), "waited"));
    ck_assert_ptr_nonnull(strstr(capture(sh_report_json, &r),
                                 "\"lock_wait_s\":0.000000,\"lock_owner\":\"\""));
    r.lock_wait_s = 9.84;
    r.lock_owner = "job 57 on n1";
    out = capture(sh_report_text, &r);
    ck_assert_ptr_nonnull(strstr(out, "  waited 9.8s for another run staging "
                                      "/nvme/img.sqsh (job 57 on n1)\n"));
    out = capture(sh_report_json, &r);
    ck_assert_ptr_nonnull(strstr(out, "\"lock_wait_s\":9.840000,\"lock_owner\":\"job 57 on n1\""));
    r.lock_owner = "";
    ck_assert_ptr_nonnull(strstr(capture(sh_report_text, &r),
                                 "for another run staging /nvme/img.sqsh\n"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");

    tcase_add_test(tc, json_escaping);
    tcase_add_test(tc, text_names_failures);
    tcase_add_test(tc, source_failure_text);
    tcase_add_test(tc, json_fields);
    tcase_add_test(tc, lock_wait_reported);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
