/* The agent's reader of the engine's --json report (core/agent/
 * engine_report.c): what the engine writes (core/engine/report.c) reads
 * back field for field; a malformed, oversize, truncated or incomplete
 * report is refused with an error that names the file and the reason. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/agent/engine_report.h"
#include "core/engine/report.h"
#include "stagehand/bcast.h"

#include "check_main.h"

static char path[PATH_MAX];
static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/check_engine_report.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/engine.0.json", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
}

static void put(const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A report the engine writes: 3 nodes, n2 failed in pre-check (ENOSPC). */
static void write_engine_report(const char *owner, double waited)
{
    static struct sh_bcast_opts o;
    struct sh_node_result res[3];
    struct sh_report r;
    FILE *f;

    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    memset(res, 0, sizeof(res));
    strcpy(o.source, "/shared/img \"x\".sqsh");
    strcpy(o.dest, "/nvme/img.sqsh");
    o.segment = 8 << 20;
    o.depth = 4;
    o.hash = SH_HASH_XXH3;
    r.opts = &o;
    r.size = 1 << 30;
    r.src_ok = 1;
    r.world_size = 3;
    r.nodes = 3;
    r.results = res;
    for (int p = 0; p < SH_PH_COUNT; p++)
        r.phase_s[p] = 0.25 * (p + 1);
    r.total_s = 7.5;
    r.bytes_transferred = 5000000000ULL;
    r.lock_wait_s = waited;
    r.lock_owner = owner;
    r.digest_len = 8;
    memset(r.digest, 0xab, 8);
    r.exit_code = SH_EXIT_DEST;
    for (int i = 0; i < 3; i++) {
        snprintf(res[i].host, sizeof(res[i].host), "n%d", i + 1);
        res[i].world_rank = i;
    }
    res[0].status = SH_NODE_READER;
    res[1].status = SH_NODE_FAILED;
    res[1].err = ENOSPC;
    res[1].exit_class = SH_EXIT_DEST;
    strcpy(res[1].phase, "pre-check");
    strcpy(res[1].reason, "not enough \"space\"\non /nvme");
    res[2].status = SH_NODE_ABORTED;
    strcpy(res[2].reason, SH_BCAST_NOT_COPIED ": another node failed");
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    sh_report_json(&r, f);
    fclose(f);
}

/* Expect a refusal with errno @e and @what in the message, which names the
 * file. */
static void refused(size_t max, int e, const char *what)
{
    struct sh_engine_report r;
    char err[512] = "";

    errno = 0;
    ck_assert_int_eq(sh_engine_report_read(path, max, &r, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, e);
    ck_assert_msg(strstr(err, path) != NULL, "no file name in '%s'", err);
    ck_assert_msg(strstr(err, what) != NULL, "'%s' not in '%s'", what, err);
    ck_assert_ptr_null(r.root);
    ck_assert_ptr_null(r.nodes);
    ck_assert_uint_eq(r.nnodes, 0);
    sh_engine_report_free(&r);  /* harmless on an empty one */
}

START_TEST(engine_report_round_trip)
{
    struct sh_engine_report r;
    char err[512] = "";

    write_engine_report("job 57 on n1", 9.84);
    ck_assert_int_eq(sh_engine_report_read(path, sh_bcast_report_max(3), &r, err,
                                           sizeof(err)), 0);
    ck_assert_int_eq(r.exit_code, SH_EXIT_DEST);
    ck_assert_int_eq(r.nodes_copied, 0);
    ck_assert_uint_eq(r.bytes_transferred, 5000000000ULL);
    ck_assert_double_eq_tol(r.lock_wait_s, 9.84, 1e-6);
    ck_assert_str_eq(r.lock_owner, "job 57 on n1");
    ck_assert_str_eq(r.digest, "abababababababab");
    ck_assert_str_eq(r.source_error, "");
    for (int p = 0; p < SH_PH_COUNT; p++)
        ck_assert_double_eq_tol(r.seconds[p], 0.25 * (p + 1), 1e-6);
    ck_assert_double_eq_tol(r.seconds[SH_PH_COUNT], 7.5, 1e-6);
    ck_assert_uint_eq(r.nnodes, 3);
    ck_assert_str_eq(r.nodes[1].node, "n2");
    ck_assert_int_eq(r.nodes[1].rank, 1);
    ck_assert_int_eq(r.nodes[1].err, ENOSPC);
    ck_assert_int_eq(r.nodes[1].exit_class, SH_EXIT_DEST);
    ck_assert_str_eq(r.nodes[1].phase, "pre-check");
    ck_assert_str_eq(r.nodes[1].error, "not enough \"space\"\non /nvme");
    ck_assert_str_eq(r.nodes[0].error, "");
    ck_assert_int_eq(strncmp(r.nodes[2].error, SH_BCAST_NOT_COPIED,
                             strlen(SH_BCAST_NOT_COPIED)), 0);
    sh_engine_report_free(&r);
    ck_assert_ptr_null(r.root);
}
END_TEST

START_TEST(engine_report_no_file_or_empty)
{
    refused(4096, ENOENT, "No such file");
    put("");
    refused(4096, ENODATA, "empty");
}
END_TEST

START_TEST(engine_report_malformed)
{
    put("{\"format\":1,\"exit_code\":4,");           /* cut short */
    refused(4096, EBADMSG, "not one JSON object");
    put("not json at all\n");
    refused(4096, EBADMSG, "not one JSON object");
    put("[1,2,3]\n");                               /* not an object */
    refused(4096, EBADMSG, "not an object");
    put("{\"format\":1}\n{\"format\":1}\n");        /* two objects */
    refused(4096, EBADMSG, "text after the object");
}
END_TEST

START_TEST(engine_report_oversize)
{
    char *big = malloc(70000);

    ck_assert_ptr_nonnull(big);
    write_engine_report("", 0);
    /* a report one byte over the bound is refused before it is parsed */
    {
        FILE *f = fopen(path, "r");
        long n;

        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fclose(f);
        refused((size_t)n - 1, EFBIG, "too big");
    }
    memset(big, ' ', 69999);
    big[0] = '{';
    big[69997] = '}';
    big[69998] = '\n';
    big[69999] = '\0';
    put(big);
    ck_assert_uint_lt(sh_bcast_report_max(1), 69999);
    refused(sh_bcast_report_max(1), EFBIG, "too big");
    free(big);
}
END_TEST

START_TEST(engine_report_missing_keys)
{
    static const char *const base = "\"seconds\":{\"start-up\":0,\"metadata\":0,"
        "\"pre-check\":0,\"transfer\":0,\"verify\":0,\"publish\":0,\"total\":0},";
    char text[2048];

    /* every top-level key the agent uses */
    snprintf(text, sizeof(text), "{\"format\":1,\"nodes_copied\":1,\"bytes_transferred\":1,"
             "\"lock_wait_s\":0,\"lock_owner\":\"\",\"digest\":\"\",\"source_error\":\"\","
             "%s\"node_results\":[]}", base);
    put(text);
    refused(4096, EPROTO, "\"" SH_BCAST_KEY_EXIT_CODE "\" is missing");
    /* a key of another type */
    snprintf(text, sizeof(text), "{\"format\":1,\"exit_code\":\"4\",\"nodes_copied\":1,"
             "\"bytes_transferred\":1,\"lock_wait_s\":0,\"lock_owner\":\"\",\"digest\":\"\","
             "\"source_error\":\"\",%s\"node_results\":[]}", base);
    put(text);
    refused(4096, EPROTO, "\"exit_code\" has the wrong type");
    /* a phase missing from "seconds" */
    put("{\"format\":1,\"exit_code\":0,\"nodes_copied\":1,\"bytes_transferred\":1,"
        "\"lock_wait_s\":0,\"lock_owner\":\"\",\"digest\":\"\",\"source_error\":\"\","
        "\"seconds\":{\"total\":1},\"node_results\":[]}");
    refused(4096, EPROTO, "seconds' \"start-up\" is missing");
    /* a node result without its error */
    snprintf(text, sizeof(text), "{\"format\":1,\"exit_code\":4,\"nodes_copied\":1,"
             "\"bytes_transferred\":1,\"lock_wait_s\":0,\"lock_owner\":\"\",\"digest\":\"\","
             "\"source_error\":\"\",%s\"node_results\":[{\"node\":\"n1\",\"rank\":0,"
             "\"errno\":0,\"exit_class\":0,\"phase\":\"\"}]}", base);
    put(text);
    refused(4096, EPROTO, "a node result's \"error\" is missing");
    /* another format */
    put("{\"format\":2}");
    refused(4096, EPROTO, "format 2");
    /* complete: accepted, an integer where a number goes */
    snprintf(text, sizeof(text), "{\"format\":1,\"exit_code\":0,\"nodes_copied\":1,"
             "\"bytes_transferred\":1,\"lock_wait_s\":0,\"lock_owner\":\"\",\"digest\":\"\","
             "\"source_error\":\"\",%s\"node_results\":[],\"added_later\":true}\n", base);
    put(text);
    {
        struct sh_engine_report r;
        char err[512] = "";

        ck_assert_msg(sh_engine_report_read(path, 4096, &r, err, sizeof(err)) == 0, "%s",
                      err);
        ck_assert_uint_eq(r.nnodes, 0);
        sh_engine_report_free(&r);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_report");
    TCase *tc = tcase_create("read");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, engine_report_round_trip);
    tcase_add_test(tc, engine_report_no_file_or_empty);
    tcase_add_test(tc, engine_report_malformed);
    tcase_add_test(tc, engine_report_oversize);
    tcase_add_test(tc, engine_report_missing_keys);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(suite());
}
