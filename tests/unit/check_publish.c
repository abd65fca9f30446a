/* Atomic publish and sweep with failures injected through the I/O seam
 * (cases F06, F07, F11, F13, F14, F15, F17, F29). Runs on a real directory
 * under /tmp; the seam wraps the real syscalls. The lock: check_publish_lock.c. */
#include "config.h"

#include "publish_fixture.h"

START_TEST(publish_ok)
{
    struct sh_publish p;
    struct stat st;

    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img.sqsh", "42", "n1",
                                      5, 0644, (gid_t)-1), 0);
    {
        char expect[NAME_MAX + 1];

        snprintf(expect, sizeof(expect), ".img.sqsh.stage.42.n1.%ld.tmp",
                 (long)getpid());
        ck_assert_str_eq(p.tmpname, expect);
    }
    ck_assert_int_eq(fstatat(dirfd_, "img.sqsh", &st, 0), -1); /* not yet */
    ck_assert_int_eq(sh_publish_write(&p, "hello", 5, 0), 0);
    ck_assert_int_eq(sh_publish_sync(&p), 0);
    ck_assert_int_eq(sh_publish_commit(&p), 0);
    ck_assert_int_eq(p.fd, -1);
    assert_content("img.sqsh", "hello");
    ck_assert_int_eq(entries(NULL), 1);     /* no temp left */
}
END_TEST

/* case F07: fsync failure → temp removed, error returned, DST untouched */
START_TEST(fsync_failure_removes_temp)
{
    write_file("img", "old");
    inj.fsync_err = EIO;
    ck_assert_int_eq(publish_string("img", "new content"), -1);
    ck_assert_int_eq(errno, EIO);
    assert_content("img", "old");
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F14: ENOSPC from fallocate is an early error, nothing left behind */
START_TEST(fallocate_enospc_early)
{
    struct sh_publish p;

    inj.fallocate_err = ENOSPC;
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1",
                                      1 << 20, 0644, (gid_t)-1), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(entries(NULL), 0);
}
END_TEST

/* case F14: EOPNOTSUPP (NFS 3, FUSE): continue without preallocating */
START_TEST(fallocate_eopnotsupp_skipped)
{
    inj.fallocate_err = EOPNOTSUPP;
    ck_assert_int_eq(publish_string("img", "data"), 0);
    assert_content("img", "data");
    inj.fallocate_err = ENOSYS;
    ck_assert_int_eq(publish_string("img", "data2"), 0);
    assert_content("img", "data2");
}
END_TEST

/* case F11: 1-byte writes interleaved with EINTR give an identical file */
START_TEST(short_writes_and_eintr)
{
    static const char text[] = "The quick brown fox jumps over the lazy dog";

    inj.pwrite_max = 1;
    inj.eintr_every = 4;
    ck_assert_int_eq(publish_string("img", text), 0);
    assert_content("img", text);
}
END_TEST

/* case F15: ENOSPC / EIO during the copy remove the temp file */
START_TEST(write_error_removes_temp)
{
    struct sh_publish p;

    write_file("img", "old");
    inj.pwrite_max = 2;
    inj.pwrite_err = ENOSPC;
    inj.pwrite_err_at = 3;
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 10,
                                      0644, (gid_t)-1), 0);
    ck_assert_int_eq(sh_publish_write(&p, "0123456789", 10, 0), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(entries(NULL), 1);
    /* later steps fail cleanly too */
    ck_assert_int_eq(sh_publish_sync(&p), -1);
    ck_assert_int_eq(errno, EBADF);
    ck_assert_int_eq(sh_publish_commit(&p), -1);
    assert_content("img", "old");

    memset(&inj, 0, sizeof(inj));
    inj.pwrite_err = EIO;
    inj.pwrite_err_at = 1;
    ck_assert_int_eq(publish_string("img", "abc"), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F13: EXDEV (or any rename failure) → temp removed, DST untouched */
START_TEST(rename_exdev)
{
    write_file("img", "old");
    inj.rename_err = EXDEV;
    ck_assert_int_eq(publish_string("img", "new"), -1);
    ck_assert_int_eq(errno, EXDEV);
    assert_content("img", "old");
    ck_assert_int_eq(entries(NULL), 1);
}
END_TEST

/* case F29: an existing DST is replaced by rename, never truncated: a reader
 * holding the old file (a mount) keeps the old bytes */
START_TEST(existing_dst_not_truncated)
{
    char buf[8] = "";
    struct stat before, after;
    int old;

    write_file("img", "old-data");
    old = openat(dirfd_, "img", O_RDONLY);
    ck_assert_int_ge(old, 0);
    fstat(old, &before);
    ck_assert_int_eq(publish_string("img", "new"), 0);
    ck_assert_int_eq(pread(old, buf, 8, 0), 8);
    ck_assert_mem_eq(buf, "old-data", 8);
    fstatat(dirfd_, "img", &after, 0);
    ck_assert_uint_ne(before.st_ino, after.st_ino);
    assert_content("img", "new");
    close(old);
}
END_TEST

/* case F17b: a symlink planted at the temp name is never followed */
START_TEST(planted_symlink_refused)
{
    char tmp[NAME_MAX + 1];
    char target[PATH_MAX];
    struct sh_publish p;
    struct stat st;

    ck_assert_int_eq(sh_publish_tmpname("img", "42", "n1", getpid(), tmp,
                                        sizeof(tmp)), 0);
    snprintf(target, sizeof(target), "%s/victim", dir);
    write_file("victim", "precious");
    ck_assert_int_eq(symlinkat(target, dirfd_, tmp), 0);
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 4,
                                      0644, (gid_t)-1), -1);
    ck_assert(errno == EEXIST || errno == ELOOP);
    assert_content("victim", "precious");
    /* the planted link is not ours to remove */
    ck_assert_int_eq(fstatat(dirfd_, tmp, &st, AT_SYMLINK_NOFOLLOW), 0);
}
END_TEST

START_TEST(tmpname_rules)
{
    char out[NAME_MAX + 1];
    char longname[300];

    ck_assert_int_eq(sh_publish_tmpname("a.b", "12.3/4", "host.dom", 99, out,
                                        sizeof(out)), 0);
    ck_assert_str_eq(out, ".a.b.stage.12_3_4.host.dom.99.tmp");
    memset(longname, 'x', 250);
    longname[250] = '\0';
    ck_assert_int_eq(sh_publish_tmpname(longname, "1", "h", 1, out,
                                        sizeof(out)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_int_eq(sh_publish_tmpname("a", "", "h", 1, out, sizeof(out)), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* case F06: temps of this host (dead runs: we hold the lock) and old ones of
 * any host are swept; a fresh one of another host is left alone */
START_TEST(sweep_stale)
{
    struct timespec old[2] = { { 1000000, 0 }, { 1000000, 0 } };
    unsigned removed = 0;

    write_file(".img.stage.7.n1.123.tmp", "x");         /* this host */
    write_file(".img.stage.8.n2.456.tmp", "x");         /* other, fresh */
    write_file(".img.stage.9.n3.789.tmp", "x");         /* other, old */
    utimensat(dirfd_, ".img.stage.9.n3.789.tmp", old, 0);
    write_file(".other.stage.7.n1.1.tmp", "x");         /* another DST */
    write_file(".img.stage.7.n1.notapid.tmp", "x");     /* not our pattern */
    write_file("img", "keep");
    ck_assert_int_eq(sh_publish_sweep(NULL, dirfd_, "img", "n1", 3600,
                                      &removed), 0);
    ck_assert_uint_eq(removed, 2);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.7.n1.123.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.9.n3.789.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.8.n2.456.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".other.stage.7.n1.1.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.7.n1.notapid.tmp", F_OK, 0), 0);
    assert_content("img", "keep");
}
END_TEST

/* case F06: the agent removes what its own killed engine left: the temp
 * files of this job on this node, whatever their pid or age; never another
 * job's or node's, another DST's, a name that is not a temp file, or a link's
 * target */
START_TEST(sweep_run_own)
{
    char name[NAME_MAX + 1], path[PATH_MAX];
    unsigned removed = 99;
    int fd;

    ck_assert_int_eq(sh_publish_tmpname("img", "57", "n1", 4242, name, sizeof(name)), 0);
    write_file(name, "x");                              /* this run, named by publish.c */
    write_file(".img.stage.57.n1.1.tmp", "x");          /* this run, another pid */
    write_file(".img.stage.58.n1.2.tmp", "x");          /* another job */
    write_file(".img.stage.57.n2.3.tmp", "x");          /* another node */
    write_file(".img.stage.570.n1.4.tmp", "x");         /* a job id that only starts so */
    write_file(".other.stage.57.n1.5.tmp", "x");        /* another DST */
    write_file(".img.stage.57.n1.notapid.tmp", "x");    /* not a temp name */
    write_file("img", "keep");
    snprintf(path, sizeof(path), "%s/target", dir);
    write_file("target", "keep");
    ck_assert_int_eq(symlinkat(path, dirfd_, ".img.stage.57.n1.6.tmp"), 0);
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "57", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 3);
    ck_assert_int_eq(faccessat(dirfd_, name, F_OK, AT_SYMLINK_NOFOLLOW), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.1.tmp", F_OK, 0), -1);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.6.tmp", F_OK, AT_SYMLINK_NOFOLLOW),
                     -1);
    assert_content("target", "keep");           /* the link went, not its target */
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.58.n1.2.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n2.3.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.570.n1.4.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".other.stage.57.n1.5.tmp", F_OK, 0), 0);
    ck_assert_int_eq(faccessat(dirfd_, ".img.stage.57.n1.notapid.tmp", F_OK, 0), 0);
    assert_content("img", "keep");

    /* a job id with '.' and '/' is matched as sh_publish_tmpname writes it */
    ck_assert_int_eq(sh_publish_tmpname("img", "9.1/x", "n1", 7, name, sizeof(name)), 0);
    write_file(name, "x");
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "9.1/x", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 1);
    ck_assert_int_eq(faccessat(dirfd_, name, F_OK, 0), -1);

    /* nothing to remove; bad fields */
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "57", "n1", &removed), 0);
    ck_assert_uint_eq(removed, 0);
    errno = 0;
    ck_assert_int_eq(sh_publish_sweep_run(NULL, dirfd_, "img", "", "n1", NULL), -1);
    ck_assert_int_eq(errno, EINVAL);
    fd = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    errno = 0;
    ck_assert_int_eq(sh_publish_sweep_run(NULL, fd, "img", "57", "n1", NULL), -1);
    ck_assert_int_ne(errno, 0);
    close(fd);
}
END_TEST

START_TEST(open_dir_creates_parents)
{
    char dst[PATH_MAX];
    char name[NAME_MAX + 1];
    int fd = -1;

    snprintf(dst, sizeof(dst), "%s/a/b/c/img.sqsh", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0, &fd, name, sizeof(name)), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), 0);
    ck_assert_str_eq(name, "img.sqsh");
    close(fd);
    ck_assert_int_eq(sh_publish_open_dir("relative/img", 0755, &fd, name,
                                         sizeof(name)), -1);
    ck_assert_int_eq(errno, EINVAL);
    snprintf(dst, sizeof(dst), "%s/a/", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* cleanup for teardown */
    snprintf(dst, sizeof(dst), "%s/a/b/c", dir);
    rmdir(dst);
    snprintf(dst, sizeof(dst), "%s/a/b", dir);
    rmdir(dst);
    snprintf(dst, sizeof(dst), "%s/a", dir);
    rmdir(dst);
}
END_TEST

START_TEST(signal_cleanup_unlinks)
{
    struct sh_publish p;

    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "img", "42", "n1", 4,
                                      0644, (gid_t)-1), 0);
    ck_assert_int_eq(entries(NULL), 1);
    sh_publish_signal_cleanup(&p);      /* case F06: SIGTERM handler path */
    ck_assert_int_eq(entries(NULL), 0);
    sh_publish_abort(&p);               /* closes; nothing else to remove */
    ck_assert_int_eq(p.fd, -1);
}
END_TEST

START_TEST(publish_buffer_and_empty)
{
    ck_assert_int_eq(sh_publish_buffer(&ops, dirfd_, "meta", "1", "h", "abc", 3,
                                       0600), 0);
    assert_content("meta", "abc");
    ck_assert_int_eq(sh_publish_buffer(&ops, dirfd_, "empty", "1", "h", "", 0,
                                       0600), 0);
    assert_content("empty", "");
    ck_assert_int_eq(entries(NULL), 2);
}
END_TEST

/* issue 30: a copy's mode follows SRC's minus the umask, never looser */
START_TEST(copy_mode_follows_source)
{
    ck_assert_uint_eq(sh_copy_mode(0600, 077, 1), 0600);
    ck_assert_uint_eq(sh_copy_mode(0644, 077, 1), 0600);
    ck_assert_uint_eq(sh_copy_mode(0640, 022, 1), 0640);
    ck_assert_uint_eq(sh_copy_mode(0644, 022, 1), 0644);
    ck_assert_uint_eq(sh_copy_mode(0755, 027, 1), 0750);
    /* never setuid, setgid or sticky; the file type goes too */
    ck_assert_uint_eq(sh_copy_mode(S_IFREG | 04755, 022, 1), 0755);
    ck_assert_uint_eq(sh_copy_mode(07777, 0, 1), 0777);
    /* a copy whose group is not SRC's: its group gets the other bits only,
     * never SRC's group bits, and never fewer than everyone has */
    ck_assert_uint_eq(sh_copy_mode(0640, 022, 0), 0600);
    ck_assert_uint_eq(sh_copy_mode(0664, 002, 0), 0644);
    ck_assert_uint_eq(sh_copy_mode(0644, 022, 0), 0644);
    ck_assert_uint_eq(sh_copy_mode(0674, 0, 0), 0644);
    ck_assert_uint_eq(sh_copy_mode(0605, 0, 0), 0655);
}
END_TEST

START_TEST(begin_sets_exact_mode)
{
    struct sh_publish p;
    struct stat st;
    mode_t old = umask(0);

    /* the umask neither loosens nor changes the requested bits */
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m1", "42", "n1", 4, 0640,
                                      (gid_t)-1), 0);
    ck_assert_int_eq(fstat(p.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    ck_assert_int_eq(sh_publish_write(&p, "abcd", 4, 0), 0);
    ck_assert_int_eq(sh_publish_sync(&p), 0);
    ck_assert_int_eq(sh_publish_commit(&p), 0);
    ck_assert_int_eq(fstatat(dirfd_, "m1", &st, 0), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    umask(077);
    ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m2", "42", "n1", 4, 0444,
                                      getgid()), 0);
    ck_assert_int_eq(fstat(p.fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0444);
    /* still writable through its descriptor */
    ck_assert_int_eq(sh_publish_write(&p, "abcd", 4, 0), 0);
    sh_publish_abort(&p);
    /* a group the user cannot give it: the group gets the other bits only */
    if (getuid() != 0) {
        ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m3", "42", "n1", 4, 0640,
                                          (gid_t)4242), 0);
        ck_assert_int_eq(fstat(p.fd, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0600);
        sh_publish_abort(&p);
        ck_assert_int_eq(sh_publish_begin(&p, &ops, dirfd_, "m4", "42", "n1", 4, 0664,
                                          (gid_t)4242), 0);
        ck_assert_int_eq(fstat(p.fd, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0644);
        sh_publish_abort(&p);
    }
    umask(old);
}
END_TEST

START_TEST(tighten_existing_copy)
{
    struct stat st;
    int fd = openat(dirfd_, "old", O_RDWR | O_CREAT | O_EXCL, 0600);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    /* 0644 from an older version, SRC 0600: made 0600 */
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0600), 1);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    /* stricter than needed already: left alone, never loosened */
    ck_assert_int_eq(fchmod(fd, 0400), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0644), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0400);
    /* only the bits both allow */
    ck_assert_int_eq(fchmod(fd, 0664), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(sh_publish_tighten(fd, &st, 0640), 1);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0640);
    close(fd);
}
END_TEST

START_TEST(open_dir_parent_mode)
{
    char dst[PATH_MAX], sub[PATH_MAX], name[NAME_MAX + 1];
    struct stat st;
    mode_t old = umask(022);
    int fd;

    snprintf(dst, sizeof(dst), "%s/p1/p2/img", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0700, &fd, name, sizeof(name)), 0);
    close(fd);
    snprintf(sub, sizeof(sub), "%s/p1", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    snprintf(sub, sizeof(sub), "%s/p1/p2", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0700);
    ck_assert_int_eq(rmdir(sub), 0);
    snprintf(sub, sizeof(sub), "%s/p1", dir);
    ck_assert_int_eq(rmdir(sub), 0);
    /* a site's 0755 minus the job's umask */
    umask(027);
    snprintf(dst, sizeof(dst), "%s/q1/img", dir);
    ck_assert_int_eq(sh_publish_open_dir(dst, 0755, &fd, name, sizeof(name)), 0);
    close(fd);
    snprintf(sub, sizeof(sub), "%s/q1", dir);
    ck_assert_int_eq(stat(sub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0750);
    ck_assert_int_eq(rmdir(sub), 0);
    umask(old);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("publish");
    TCase *tc = tcase_create("publish");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, publish_ok);
    tcase_add_test(tc, fsync_failure_removes_temp);
    tcase_add_test(tc, fallocate_enospc_early);
    tcase_add_test(tc, fallocate_eopnotsupp_skipped);
    tcase_add_test(tc, short_writes_and_eintr);
    tcase_add_test(tc, write_error_removes_temp);
    tcase_add_test(tc, rename_exdev);
    tcase_add_test(tc, existing_dst_not_truncated);
    tcase_add_test(tc, planted_symlink_refused);
    tcase_add_test(tc, tmpname_rules);
    tcase_add_test(tc, sweep_stale);
    tcase_add_test(tc, sweep_run_own);
    tcase_add_test(tc, open_dir_creates_parents);
    tcase_add_test(tc, signal_cleanup_unlinks);
    tcase_add_test(tc, publish_buffer_and_empty);
    tcase_add_test(tc, copy_mode_follows_source);
    tcase_add_test(tc, begin_sets_exact_mode);
    tcase_add_test(tc, tighten_existing_copy);
    tcase_add_test(tc, open_dir_parent_mode);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
