/* The prolog's status file (stagehand/status.h): what the prolog writes is
 * what slurmstepd reads at step start, and a struct that held an earlier,
 * longer status (sh_status_clear resets counts, not the line arrays) reads
 * back exactly the new one. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagehand/status.h"

#include "check_main.h"

static char dir[] = "/tmp/check_status.XXXXXX";
static char path[PATH_MAX];

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/7.status", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
    memcpy(dir + strlen(dir) - 6, "XXXXXX", 6);
}

/* A heap status filled with garbage, as a reused static would be. */
static struct sh_status *dirty_status(void)
{
    struct sh_status *st = malloc(sizeof(*st));

    ck_assert_ptr_nonnull(st);
    memset(st, 0xa5, sizeof(*st));
    return st;
}

START_TEST(status_round_trip_over_garbage)
{
    struct sh_status *w = dirty_status(), *r = dirty_status();

    sh_status_clear(w);
    ck_assert(!w->ok);
    ck_assert_uint_eq(w->n_images, 0);
    ck_assert_uint_eq(w->n_summaries, 0);
    ck_assert_str_eq(w->node, "");
    ck_assert_str_eq(w->message, "");
    w->ok = true;
    snprintf(w->node, sizeof(w->node), "n3");
    sh_status_add_image(w, "/nvme/a.sqsh");
    sh_status_add_image(w, "/nvme/b.sqsh");
    sh_status_add_summary(w, "/nvme/a.sqsh: all 3 nodes current, nothing copied (0.004 s)");
    ck_assert_int_eq(sh_status_write(path, w), 0);
    {
        struct stat sb;

        /* readable by its owner only: it names the job's images (issue 30) */
        ck_assert_int_eq(stat(path, &sb), 0);
        ck_assert_uint_eq(sb.st_mode & 07777, 0600);
    }

    if (geteuid() != 0) {
        /* The reader trusts only root's files. */
        ck_assert_int_eq(sh_status_read(path, r), -1);
        ck_assert_int_eq(errno, EPERM);
    } else {
        ck_assert_int_eq(sh_status_read(path, r), 0);
        ck_assert(r->ok);
        ck_assert_str_eq(r->node, "n3");
        ck_assert_str_eq(r->message, "");
        ck_assert_uint_eq(r->n_images, 2);
        ck_assert_str_eq(r->image[0], "/nvme/a.sqsh");
        ck_assert_str_eq(r->image[1], "/nvme/b.sqsh");
        ck_assert_uint_eq(r->n_summaries, 1);
        ck_assert_str_eq(r->summary[0],
                         "/nvme/a.sqsh: all 3 nodes current, nothing copied (0.004 s)");

        /* A shorter, failed status read into the same struct. */
        sh_status_clear(w);
        snprintf(w->node, sizeof(w->node), "n1");
        snprintf(w->message, sizeof(w->message), "source /shared/x.sqsh does not exist");
        sh_status_add_image(w, "/nvme/x.sqsh");
        ck_assert_int_eq(sh_status_write(path, w), 0);
        ck_assert_int_eq(sh_status_read(path, r), 0);
        ck_assert(!r->ok);
        ck_assert_str_eq(r->node, "n1");
        ck_assert_str_eq(r->message, "source /shared/x.sqsh does not exist");
        ck_assert_uint_eq(r->n_images, 1);
        ck_assert_str_eq(r->image[0], "/nvme/x.sqsh");
        ck_assert_uint_eq(r->n_summaries, 0);
    }
    free(w);
    free(r);
}
END_TEST

START_TEST(status_read_missing_is_empty)
{
    struct sh_status *r = dirty_status();

    ck_assert_int_eq(sh_status_read(path, r), -1);
    ck_assert_int_eq(errno, ENOENT);
    /* Even a failed read leaves an empty status, never the garbage. */
    ck_assert(!r->ok);
    ck_assert_uint_eq(r->n_images, 0);
    ck_assert_uint_eq(r->n_summaries, 0);
    ck_assert_str_eq(r->message, "");
    free(r);
}
END_TEST

START_TEST(status_read_refuses_group_writable)
{
    struct sh_status *w = dirty_status(), *r = dirty_status();

    sh_status_clear(w);
    ck_assert_int_eq(sh_status_write(path, w), 0);
    ck_assert_int_eq(chmod(path, 0664), 0);
    ck_assert_int_eq(sh_status_read(path, r), -1);
    ck_assert_int_eq(errno, EPERM);
    free(w);
    free(r);
}
END_TEST

/* The version line must be the number alone: "1x" was read as 1 by atoi. */
START_TEST(status_read_refuses_malformed_version)
{
    static const char *const bad[] = { "version=1x\nresult=ok\n", "version=\nresult=ok\n",
                                       "version=-1\nresult=ok\n" };
    struct sh_status *r = dirty_status();

    if (geteuid() != 0) {
        free(r);
        return; /* the reader trusts only root's files */
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        FILE *f = fopen(path, "w");

        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs(bad[i], f), 0);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(chmod(path, 0600), 0);
        ck_assert_msg(sh_status_read(path, r) == -1 && errno == EPROTO, "accepted %s", bad[i]);
    }
    {
        FILE *f = fopen(path, "w");

        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs("version=1\nresult=ok\n", f), 0);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(sh_status_read(path, r), 0);
        ck_assert(r->ok);
    }
    free(r);
}
END_TEST

static Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("file");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, status_round_trip_over_garbage);
    tcase_add_test(tc, status_read_missing_is_empty);
    tcase_add_test(tc, status_read_refuses_group_writable);
    tcase_add_test(tc, status_read_refuses_malformed_version);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(status_suite());
}
