/* sh_rmtree_at (spank/rmtree.c): the epilog's removal of a job's
 * runtime directory, which the job user owns (security issue 30 item 6):
 * any depth, never following a symlink, stopping when the tree is moved
 * under it. Linked with -Wl,--wrap=openat64 (tests/meson.build) so that a
 * test can move a directory at the moment the walk opens one. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spank/rmtree.h"

#include "check_main.h"

static char root[64];

/* --wrap=openat64 (openat here): when swap_at is set and the walk opens a directory of that
 * name, rename swap_from to swap_to first (once). */
int __real_openat64(int dirfd, const char *name, int flags, ...);
int __wrap_openat64(int dirfd, const char *name, int flags, ...);
static const char *swap_at;
static char swap_from[PATH_MAX], swap_to[PATH_MAX];

int __wrap_openat64(int dirfd, const char *name, int flags, ...)
{
    mode_t mode = 0;

    if ((flags & O_CREAT) != 0) {
        va_list ap;

        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (swap_at != NULL && strcmp(name, swap_at) == 0) {
        swap_at = NULL;
        ck_assert_int_eq(rename(swap_from, swap_to), 0);
    }
    return __real_openat64(dirfd, name, flags, mode);
}

static void setup(void)
{
    snprintf(root, sizeof(root), "/tmp/check_rmtree.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    swap_at = NULL;
}

static void teardown(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

static void touch_at(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
}

static bool exists(const char *path)
{
    struct stat sb;

    return lstat(path, &sb) == 0;
}

/* root/<name>: @levels nested directories "d", each with a file "f", made
 * with *at calls (the path is far longer than PATH_MAX). */
static void make_deep(const char *name, int levels)
{
    char top[PATH_MAX];
    int fd;

    snprintf(top, sizeof(top), "%s/%s", root, name);
    ck_assert_int_eq(mkdir(top, 0700), 0);
    fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    for (int i = 0; i < levels; i++) {
        int nfd;

        touch_at(fd, "f");
        ck_assert_int_eq(mkdirat(fd, "d", 0700), 0);
        nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(nfd, 0);
        close(fd);
        fd = nfd;
    }
    touch_at(fd, "last");
    close(fd);
}

START_TEST(test_missing_and_file)
{
    char path[PATH_MAX];
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    ck_assert_int_eq(sh_rmtree_at(rfd, "none"), 0);
    touch_at(rfd, "file");
    ck_assert_int_eq(sh_rmtree_at(rfd, "file"), 0);
    snprintf(path, sizeof(path), "%s/file", root);
    ck_assert(!exists(path));
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(sh_rmtree_at(rfd, "file"), 0); /* an empty directory */
    ck_assert(!exists(path));
    close(rfd);
}
END_TEST

/* The 12 levels and 2000 (beyond PATH_MAX, and beyond the old
 * limit of 8), with one descriptor at a time: a limit of 16 open files. */
START_TEST(test_deep)
{
    static const int depths[] = { 12, 2000 };
    struct rlimit rl, low;
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char path[PATH_MAX];

    ck_assert_int_ge(rfd, 0);
    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
        char name[16];

        snprintf(name, sizeof(name), "deep%d", depths[i]);
        make_deep(name, depths[i]);
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
        low = rl;
        low.rlim_cur = 16;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        ck_assert_int_eq(sh_rmtree_at(rfd, name), 0);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
        snprintf(path, sizeof(path), "%s/%s", root, name);
        ck_assert(!exists(path));
    }
    close(rfd);
}
END_TEST

/* Symlinks in the tree to a directory and a file outside it, at the top and
 * deep down, and the top's name itself a symlink: the links go, their
 * targets stay. */
START_TEST(test_symlinks)
{
    char outside[PATH_MAX], target[PATH_MAX], path[PATH_MAX];
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd;

    snprintf(outside, sizeof(outside), "%s/outside", root);
    ck_assert_int_eq(mkdir(outside, 0700), 0);
    snprintf(target, sizeof(target), "%s/outside/keep", root);
    ck_assert_int_eq(mkdir(target, 0700), 0);
    fd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    touch_at(fd, "precious");
    close(fd);
    make_deep("tree", 30);
    snprintf(path, sizeof(path), "%s/tree/to_dir", root);
    ck_assert_int_eq(symlink(target, path), 0);
    snprintf(path, sizeof(path), "%s/tree/to_file", root);
    ck_assert_int_eq(symlink("../outside/keep/precious", path), 0);
    snprintf(path, sizeof(path), "%s/tree/d/d/d/up", root);
    ck_assert_int_eq(symlink("../../../../outside", path), 0);
    snprintf(path, sizeof(path), "%s/link", root);
    ck_assert_int_eq(symlink(target, path), 0);

    ck_assert_int_eq(sh_rmtree_at(rfd, "tree"), 0);
    ck_assert_int_eq(sh_rmtree_at(rfd, "link"), 0);
    snprintf(path, sizeof(path), "%s/tree", root);
    ck_assert(!exists(path));
    snprintf(path, sizeof(path), "%s/link", root);
    ck_assert(!exists(path));
    snprintf(path, sizeof(path), "%s/outside/keep/precious", root);
    ck_assert(exists(path));
    close(rfd);
}
END_TEST

/* The user moves a directory of the tree elsewhere while the walk is in it:
 * root/tree/a/b goes to root/outside/b as the walk opens b/c. The walk must
 * not go on in root/outside (its ".." is no longer a): ESTALE, and
 * root/outside/keep survives. */
START_TEST(test_swapped)
{
    char path[PATH_MAX];
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd;

    snprintf(path, sizeof(path), "%s/outside", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    touch_at(fd, "keep");
    close(fd);
    snprintf(path, sizeof(path), "%s/tree", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/tree/a", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/tree/a/b", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/tree/a/b/c", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    touch_at(fd, "f");
    close(fd);

    snprintf(swap_from, sizeof(swap_from), "%s/tree/a/b", root);
    snprintf(swap_to, sizeof(swap_to), "%s/outside/b", root);
    swap_at = "c";
    errno = 0;
    ck_assert_int_eq(sh_rmtree_at(rfd, "tree"), -1);
    ck_assert_int_eq(errno, ESTALE);
    ck_assert_ptr_null(swap_at); /* the swap happened */
    snprintf(path, sizeof(path), "%s/outside/keep", root);
    ck_assert(exists(path));
    snprintf(path, sizeof(path), "%s/outside", root);
    ck_assert(exists(path));
    close(rfd);
}
END_TEST

static Suite *rmtree_suite(void)
{
    Suite *s = suite_create("rmtree");
    TCase *tc = tcase_create("rmtree");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_missing_and_file);
    tcase_add_test(tc, test_deep);
    tcase_add_test(tc, test_symlinks);
    tcase_add_test(tc, test_swapped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(rmtree_suite());
}
