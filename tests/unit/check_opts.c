/* stagehand-bcast command line (issue 3; case F09). */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/opts.h"
#include "stagehand/bcast.h"

#include "check_main.h"

static struct sh_bcast_opts o;
static char err[512];

/* Parse a NULL-terminated array of arguments after the program name. */
static enum sh_opts_result parse_argv(const char *const *args)
{
    char *argv[32];
    int argc = 0;

    argv[argc++] = (char *)"stagehand-bcast";
    for (int i = 0; args[i] != NULL && argc < 31; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    return sh_bcast_opts_parse(argc, argv, &o, err, sizeof(err));
}

#define parse(...) parse_argv((const char *const[]){ __VA_ARGS__ })

START_TEST(defaults)
{
    ck_assert_int_eq(parse("--source", "/shared/a.sqsh", "--dest=/nvme/a.sqsh",
                           (const char *)0), SH_OPTS_RUN);
    ck_assert_str_eq(o.source, "/shared/a.sqsh");
    ck_assert_str_eq(o.dest, "/nvme/a.sqsh");
    ck_assert_int_eq(o.check, SH_CHECK_META);
    ck_assert_int_eq(o.verify, SH_VERIFY_TRANSFER);
    ck_assert_int_eq(o.hash, SH_HASH_XXH3);
    ck_assert_int_eq(o.algorithm, SH_ALG_CHAIN);
    ck_assert_uint_eq(o.segment, SH_BCAST_DEFAULT_SEGMENT);
    ck_assert_uint_eq(o.depth, SH_BCAST_DEFAULT_DEPTH);
    ck_assert_uint_eq(o.read_ahead, SH_BCAST_DEFAULT_READ_AHEAD);
    ck_assert_uint_eq(o.timeout_ns, SH_BCAST_DEFAULT_TIMEOUT_NS);
    ck_assert_int_eq(o.source_rank, 0);
    ck_assert_int_eq(o.expect_ranks, 0);
    ck_assert_int_eq(o.json + o.progress + o.verbose + o.untraceable, 0);
}
END_TEST

START_TEST(every_option)
{
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--check=content",
                           "--verify=readback", "--hash=sha256",
                           "--segment-size=1G", "--pipeline-depth", "64",
                           "--algorithm=bcast", "--timeout=90s",
                           "--source-rank=3", "--progress", "--json", "-v",
                           "--verbose", "--expect-ranks=8", "--untraceable",
                           (const char *)0), SH_OPTS_RUN);
    ck_assert_int_eq(o.expect_ranks, 8);
    ck_assert_int_eq(o.untraceable, 1);
    ck_assert_int_eq(o.check, SH_CHECK_CONTENT);
    ck_assert_int_eq(o.verify, SH_VERIFY_READBACK);
    ck_assert_int_eq(o.hash, SH_HASH_SHA256);
    ck_assert_uint_eq(o.segment, 1ULL << 30);
    ck_assert_uint_eq(o.depth, 64);
    ck_assert_int_eq(o.algorithm, SH_ALG_BCAST);
    ck_assert_uint_eq(o.timeout_ns, 90ULL * 1000000000ULL);
    ck_assert_int_eq(o.source_rank, 3);
    ck_assert_int_eq(o.progress, 1);
    ck_assert_int_eq(o.json, 1);
    ck_assert_int_eq(o.verbose, 2);
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--check=never",
                           "--segment-size=4096", (const char *)0), SH_OPTS_RUN);
    ck_assert_uint_eq(o.segment, 4096);
    /* read-ahead: explicit, or the default capped by a smaller depth */
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--read-ahead=8",
                           "--pipeline-depth=8", (const char *)0), SH_OPTS_RUN);
    ck_assert_uint_eq(o.read_ahead, 8);
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--pipeline-depth=2",
                           (const char *)0), SH_OPTS_RUN);
    ck_assert_uint_eq(o.read_ahead, 2);
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--read-ahead=1",
                           (const char *)0), SH_OPTS_RUN);
    ck_assert_uint_eq(o.read_ahead, 1);
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", "--check", "size", (const char *)0),
                     SH_OPTS_RUN);
    ck_assert_int_eq(o.check, SH_CHECK_SIZE);
}
END_TEST

START_TEST(help_version)
{
    ck_assert_int_eq(parse("--help", (const char *)0), SH_OPTS_HELP);
    ck_assert_int_eq(parse("--version", (const char *)0), SH_OPTS_VERSION);
    ck_assert_int_eq(parse("-s", "/s", "-V", (const char *)0), SH_OPTS_VERSION);
}
END_TEST

/* --help states the defaults the engine really uses (a new user found it
 * still saying 1M after the default became 512 KiB). */
START_TEST(help_states_defaults)
{
    char *text = NULL, want[64];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(f);
    sh_bcast_usage(f);
    ck_assert_int_eq(fclose(f), 0);
    snprintf(want, sizeof(want), "(default %lluK)",
             (unsigned long long)(SH_DEFAULT_SEGMENT_SIZE >> 10));
    ck_assert_msg(strstr(text, want) != NULL, "--help lacks \"%s\"", want);
    ck_assert_ptr_null(strstr(text, "(default 1M)"));
    free(text);
}
END_TEST

/* Every bad value is rejected with a message naming the option. */
static void rejects(const char *needle, const char *a1, const char *a2)
{
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", a1, a2, (const char *)0), SH_OPTS_ERROR);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' not in '%s'", needle, err);
}

START_TEST(bad_values)
{
    /* case F09: segment <= 1 GiB, > 0, never silently clamped */
    rejects("--segment-size=4G", "--segment-size=4G", (const char *)0);
    rejects("--segment-size=1073741825", "--segment-size=1073741825", (const char *)0);
    rejects("--segment-size=0", "--segment-size=0", (const char *)0);
    rejects("--segment-size=8X", "--segment-size=8X", (const char *)0);
    rejects("--segment-size=-1", "--segment-size=-1", (const char *)0);
    rejects("--pipeline-depth=0", "--pipeline-depth=0", (const char *)0);
    rejects("--pipeline-depth=65", "--pipeline-depth=65", (const char *)0);
    rejects("--pipeline-depth=2x", "--pipeline-depth=2x", (const char *)0);
    rejects("--dir-mode=0600", "--dir-mode=0600", (const char *)0);
    rejects("--dir-mode=2755", "--dir-mode=2755", (const char *)0);
    rejects("--dir-mode=x", "--dir-mode=x", (const char *)0);
    rejects("--read-ahead=0", "--read-ahead=0", (const char *)0);
    rejects("--read-ahead=65", "--read-ahead=65", (const char *)0);
    rejects("--read-ahead=3: must not exceed the pipeline depth (2)", "--read-ahead=3",
            "--pipeline-depth=2");
    rejects("--check=fast", "--check=fast", (const char *)0);
    rejects("--verify=none", "--verify=none", (const char *)0);
    rejects("--hash=md5", "--hash=md5", (const char *)0);
    rejects("--algorithm=tree", "--algorithm=tree", (const char *)0);
    rejects("--timeout=0", "--timeout=0", (const char *)0);
    rejects("--timeout=1d", "--timeout=1d", (const char *)0);
    rejects("--source-rank=-1", "--source-rank=-1", (const char *)0);
    rejects("--expect-ranks=0", "--expect-ranks=0", (const char *)0);
    rejects("--expect-ranks=x", "--expect-ranks=x", (const char *)0);
    rejects("--bogus", "--bogus", (const char *)0);
    rejects("stray", "stray", (const char *)0);
    rejects("--timeout", "--timeout", (const char *)0);    /* missing value */
}
END_TEST

START_TEST(paths)
{
    ck_assert_int_eq(parse("-d", "/d", (const char *)0), SH_OPTS_ERROR);
    ck_assert_str_eq(err, "--source is required");
    ck_assert_int_eq(parse("-s", "/s", (const char *)0), SH_OPTS_ERROR);
    ck_assert_str_eq(err, "--dest is required");
    ck_assert_int_eq(parse("-s", "img.sqsh", "-d", "/d", (const char *)0), SH_OPTS_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "--source=img.sqsh"));
    ck_assert_int_eq(parse("-s", "/s", "-d", "nvme/x", (const char *)0), SH_OPTS_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "--dest=nvme/x"));
    ck_assert_int_eq(parse("-s", "/s", "-d", "/nvme/", (const char *)0), SH_OPTS_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "--dest=/nvme/"));
    ck_assert_int_eq(parse("-s", "/a\nb", "-d", "/d", (const char *)0), SH_OPTS_ERROR);
}
END_TEST

/* SRC and DST from the environment when the options are absent (the agent
 * passes them so: others cannot read a process's environment). */
START_TEST(paths_from_environment)
{
    ck_assert_int_eq(setenv(SH_BCAST_SOURCE_ENV, "/shared/private.sqsh", 1), 0);
    ck_assert_int_eq(setenv(SH_BCAST_DEST_ENV, "/nvme/me/img", 1), 0);
    ck_assert_int_eq(parse((const char *)0), SH_OPTS_RUN);
    ck_assert_str_eq(o.source, "/shared/private.sqsh");
    ck_assert_str_eq(o.dest, "/nvme/me/img");
    /* the options win */
    ck_assert_int_eq(parse("-s", "/s", "-d", "/d", (const char *)0), SH_OPTS_RUN);
    ck_assert_str_eq(o.source, "/s");
    ck_assert_str_eq(o.dest, "/d");
    /* checked as the options are, naming the variable */
    ck_assert_int_eq(setenv(SH_BCAST_DEST_ENV, "nvme/x", 1), 0);
    ck_assert_int_eq(parse((const char *)0), SH_OPTS_ERROR);
    ck_assert_str_eq(err, SH_BCAST_DEST_ENV "=nvme/x: must be an absolute path (shorter "
                     "than 4096 bytes, no newline)");
    unsetenv(SH_BCAST_SOURCE_ENV);
    unsetenv(SH_BCAST_DEST_ENV);
    ck_assert_int_eq(parse((const char *)0), SH_OPTS_ERROR);
    ck_assert_str_eq(err, "--source is required");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("opts");
    TCase *tc = tcase_create("opts");

    tcase_add_test(tc, defaults);
    tcase_add_test(tc, every_option);
    tcase_add_test(tc, help_version);
    tcase_add_test(tc, help_states_defaults);
    tcase_add_test(tc, bad_values);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, paths_from_environment);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
