/* The per-DST lock of publish.c: a bounded wait, the holder named, a lock
 * file removed by its holder, planted symlinks and another user's file
 * (case F03, issue 30). Runs on a real directory under /tmp. */
#include "config.h"

#include "publish_fixture.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* case F03: the second stager of one DST waits a bounded time */
START_TEST(lock_bounded_wait)
{
    int a = -1, b = -1;
    double t0;

    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 1000000000ULL, &a), 0);
    t0 = now_s();
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 150000000ULL, &b), -1);
    ck_assert_int_eq(errno, ETIMEDOUT);
    ck_assert(now_s() - t0 >= 0.14);
    ck_assert(now_s() - t0 < 5.0);
    /* another DST is independent */
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img2", 0, &b), 0);
    sh_publish_unlock(b);
    sh_publish_unlock(a);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &b), 0);
    sh_publish_unlock(b);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
}
END_TEST

/* case F03: a run that finds the lock busy names the holder from the
 * holder's temp file beside DST; without one (or with only a dead run's,
 * untouched for over a minute) there is no name. */
START_TEST(lock_owner_from_temp)
{
    struct sh_publish p;
    struct timespec old[2] = { { 0, 0 }, { 0, 0 } };
    char owner[96];

    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    ck_assert_int_eq(sh_publish_begin(&p, NULL, dirfd_, "img", "57", "node-a", 4096, 0644, (gid_t)-1), 0);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), 0);
    ck_assert_str_eq(owner, "job 57 on node-a");
    /* another DST's temp is not this one's holder */
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "im", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    /* a short buffer gets a truncated, terminated name */
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, 7), 0);
    ck_assert_str_eq(owner, "job 57");
    /* a temp file nobody wrote to for 2 minutes is a dead run's */
    old[0].tv_sec = old[1].tv_sec = time(NULL) - 120;
    ck_assert_int_eq(utimensat(dirfd_, p.tmpname, old, 0), 0);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
    sh_publish_abort(&p);
    ck_assert_int_eq(sh_publish_lock_owner(dirfd_, "img", owner, sizeof(owner)), -1);
    ck_assert_int_eq(errno, ENODATA);
}
END_TEST

/* A failed run removes its lock file while it still holds it; a run that
 * was waiting on the removed file takes the lock again on the file that
 * now has the name, so two runs never both hold "the" lock. */
START_TEST(lock_file_removed_by_holder)
{
    int a = -1, b = -1, status = 0;
    struct stat held, named;
    pid_t pid;

    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* waits on the file A holds, then must end up on the new one */
        int c = -1;

        close(a); /* the inherited descriptor would hold A's lock too */
        if (sh_publish_lock(dirfd_, "img", 3000000000ULL, &c) != 0)
            _exit(10);
        if (fstat(c, &held) != 0 || fstatat(dirfd_, ".img.lock", &named, 0) != 0)
            _exit(11);
        _exit(held.st_ino == named.st_ino ? 0 : 12);
    }
    usleep(200 * 1000); /* the child is waiting on A's file */
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", a), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the waiting run did not take the lock on the current file (status %d)",
                  status);
    /* the child's lock died with it; the file it created is there */
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
    /* removal by a holder whose file was already replaced leaves the new one */
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), 0);
    ck_assert_int_eq(fstat(a, &held), 0);
    ck_assert_int_eq(unlinkat(dirfd_, ".img.lock", 0), 0);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &b), 0); /* a new file */
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", a), 0);
    ck_assert_int_eq(fstatat(dirfd_, ".img.lock", &named, 0), 0);
    ck_assert_uint_ne(named.st_ino, held.st_ino);
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", b), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", -1), 0);
}
END_TEST

/* The engine's exit paths (guard.c): the lock file goes only while there is
 * no DST and it is still the file held; the lock is not released. */
START_TEST(lock_file_removed_at_exit)
{
    struct stat named;
    int a = -1, b = -1;

    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), 0);
    /* DST is there: the lock file stays */
    write_file("img", "copy");
    sh_publish_signal_unlock_remove(dirfd_, "img", a);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
    /* no DST: removed, the fd still open and locked */
    ck_assert_int_eq(unlinkat(dirfd_, "img", 0), 0);
    sh_publish_signal_unlock_remove(dirfd_, "img", a);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), -1);
    ck_assert_int_eq(fcntl(a, F_GETFD), FD_CLOEXEC);
    /* a lock file that is no longer the one held stays */
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &b), 0);
    sh_publish_signal_unlock_remove(dirfd_, "img", a);
    ck_assert_int_eq(fstatat(dirfd_, ".img.lock", &named, 0), 0);
    sh_publish_signal_unlock_remove(dirfd_, "img", -1);
    sh_publish_signal_unlock_remove(-1, "img", b);
    sh_publish_signal_unlock_remove(dirfd_, "", b);
    ck_assert_int_eq(faccessat(dirfd_, ".img.lock", F_OK, 0), 0);
    sh_publish_unlock(a);
    ck_assert_int_eq(sh_publish_unlock_remove(dirfd_, "img", b), 0);
}
END_TEST

/* A symbolic link planted where the lock file goes is never followed. */
START_TEST(lock_symlink_refused)
{
    int a = -1;

    ck_assert_int_eq(symlinkat("/etc/passwd", dirfd_, ".img.lock"), 0);
    ck_assert_int_eq(sh_publish_lock(dirfd_, "img", 0, &a), -1);
    ck_assert_int_eq(errno, ELOOP);
    ck_assert_int_eq(unlinkat(dirfd_, ".img.lock", 0), 0);
}
END_TEST

/* issue 30 item 4: another user's file under the lock's name */
START_TEST(lock_of_another_user_named)
{
    char msg[512];
    int fd;

    sh_publish_lock_foreign_text(msg, sizeof(msg), "/nvme/.vimg.lock", "shother", 1002,
                                 EACCES);
    ck_assert_str_eq(msg, "lock file /nvme/.vimg.lock belongs to shother (uid 1002), not "
                     "to you: Permission denied (its owner or an administrator must "
                     "remove it)");
    sh_publish_lock_foreign_text(msg, sizeof(msg), "/nvme/.x.lock", NULL, 4242, EPERM);
    ck_assert_ptr_nonnull(strstr(msg, "belongs to an unknown user (uid 4242)"));
    /* truncated, never overflowing */
    sh_publish_lock_foreign_text(msg, 20, "/nvme/.vimg.lock", "shother", 1002, EACCES);
    ck_assert_uint_eq(strlen(msg), 19);
    /* no lock file, or the caller's own: not that case */
    ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "none", "/x/none", EACCES, msg,
                                             sizeof(msg)), -1);
    fd = openat(dirfd_, ".mine.lock", O_RDWR | O_CREAT | O_EXCL, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "mine", "/x/mine", EACCES, msg,
                                             sizeof(msg)), -1);
    ck_assert_int_eq(errno, EPERM);
    if (getuid() == 0) {
        ck_assert_int_eq(fchownat(dirfd_, ".mine.lock", 4242, 4242, 0), 0);
        ck_assert_int_eq(sh_publish_lock_foreign(dirfd_, "mine", "/x/mine", EACCES, msg,
                                                 sizeof(msg)), 0);
        ck_assert_ptr_nonnull(strstr(msg, "lock file /x/.mine.lock belongs to "));
        ck_assert_ptr_nonnull(strstr(msg, "(uid 4242), not to you: Permission denied"));
        /* writable by all and held by its owner: refused at once, no wait */
        ck_assert_int_eq(fchmodat(dirfd_, ".mine.lock", 0666, 0), 0);
        fd = openat(dirfd_, ".mine.lock", O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(flock(fd, LOCK_EX), 0);
        {
            int lfd = -1;
            int64_t t0 = sh_now_ns();

            ck_assert_int_eq(sh_publish_lock(dirfd_, "mine", 5 * SH_NS_PER_S, &lfd), -1);
            ck_assert_int_eq(errno, EPERM);
            ck_assert_int_eq(lfd, -1);
            ck_assert(sh_now_ns() - t0 < 4 * SH_NS_PER_S); /* not the 5 s wait */
        }
        close(fd);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("publish_lock");
    TCase *tc = tcase_create("publish_lock");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, lock_bounded_wait);
    tcase_add_test(tc, lock_owner_from_temp);
    tcase_add_test(tc, lock_symlink_refused);
    tcase_add_test(tc, lock_file_removed_by_holder);
    tcase_add_test(tc, lock_file_removed_at_exit);
    tcase_add_test(tc, lock_of_another_user_named);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
