/* This node's part of a staging decision (core/common/local.c): the source
 * probe and its wire form, DST's vote from its recorded metadata, the
 * runtime directory's name, and claims of other jobs on a DST (the new-user
 * trial's two versions of one image; the plugin's local check uses these). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stagehand/config.h"
#include "stagehand/io.h"
#include "stagehand/local.h"
#include "stagehand/meta.h"

#include "check_main.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof(root), "/tmp/check_local.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A config whose allowed destination root is @dir, with check mode @check. */
static void config_for(struct sh_config *cfg, const char *dir, const char *check)
{
    char allowed[PATH_MAX + 32], chk[64], err[256];
    const char *argv[] = { allowed, chk };

    snprintf(allowed, sizeof(allowed), "allowed_dest=%s", dir);
    snprintf(chk, sizeof(chk), "check=%s", check);
    ck_assert_msg(sh_config_parse(cfg, 2, argv, err, sizeof(err)) == 0, "%s", err);
}

/* Record @dst as a verified copy of @id (the sidecar form: the test's
 * filesystem may have no user xattrs), as the engine does after publish. */
static void record_copy(const char *dir, const char *name, const struct sh_src_id *id)
{
    struct sh_meta m;
    struct stat sb;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);

    ck_assert_int_ge(dfd, 0);
    ck_assert_int_eq(fstatat(dfd, name, &sb, 0), 0);
    memset(&m, 0, sizeof(m));
    m.version = SH_META_VERSION;
    m.src = *id;
    m.algo = SH_HASH_XXH3;
    m.dst_size = (uint64_t)sb.st_size;
    m.dst_mtime = sh_ts_from(&sb.st_mtim);
    ck_assert_int_eq(sh_meta_store_sidecar(sh_io_default(), dfd, name, "7", "n1", &m), 0);
    close(dfd);
}

START_TEST(rundir_names)
{
    char out[32];

    ck_assert_int_eq(sh_rundir_name(42, -1, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "42");
    ck_assert_int_eq(sh_rundir_name(42, 3, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "42.3");
    errno = 0;
    ck_assert_int_eq(sh_rundir_name(4242424242ULL, 7, out, 6), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
}
END_TEST

/* Issue 30: the runtime directory gets a small tmpfs of its own, so its
 * user cannot fill the node's /run. Root only, in a mount namespace of its
 * own (a child process), so nothing stays mounted. */
START_TEST(rundir_limited_to_a_small_tmpfs)
{
    char rt[128], path[128];
    pid_t pid;
    int status = 0;

    if (geteuid() != 0)
        return; /* mount(2) needs CAP_SYS_ADMIN; CI runs the unit tests as root */
    snprintf(rt, sizeof(rt), "%s/run", root);
    ck_assert_int_eq(mkdir(rt, 0755), 0);
    ck_assert_int_eq(sh_rundir_make(rt, 42, -1, 4242, 4343, path, sizeof(path)), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct statfs fs;
        struct stat sb, up;
        int dfd;

        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            _exit(2);
        if (sh_rundir_limit(path, 4242, 4343) != 0)
            _exit(3);
        if (statfs(path, &fs) != 0 || fs.f_type != TMPFS_MAGIC ||
            (uint64_t)fs.f_blocks * (uint64_t)fs.f_bsize != 64ull << 20 ||
            (fs.f_flags & (ST_NOSUID | ST_NODEV | ST_NOEXEC)) !=
                (ST_NOSUID | ST_NODEV | ST_NOEXEC))
            _exit(4);
        if (stat(path, &sb) != 0 || stat(rt, &up) != 0 || sb.st_dev == up.st_dev ||
            sb.st_uid != 4242 || sb.st_gid != 4343 || (sb.st_mode & 07777) != 0700)
            _exit(5);
        if (sh_rundir_limit(path, 4242, 4343) != 0) /* mounted already: kept */
            _exit(6);
        dfd = open(rt, O_RDONLY | O_DIRECTORY);
        if (dfd < 0 || sh_rundir_unlimit(dfd, "42") != 0)
            _exit(7);
        if (stat(path, &sb) != 0 || sb.st_dev != up.st_dev)
            _exit(8);
        /* not a mount point (any more), or missing: nothing to do */
        if (sh_rundir_unlimit(dfd, "42") != 0 || sh_rundir_unlimit(dfd, "none") != 0)
            _exit(9);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: exit %d",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
END_TEST

START_TEST(rundir_made_for_the_user)
{
    char path[128], rt[128];
    struct stat sb;

    snprintf(rt, sizeof(rt), "%s/run", root);
    ck_assert_int_eq(mkdir(rt, 0755), 0);
    ck_assert_int_eq(sh_rundir_make(rt, 42, -1, getuid(), getgid(), path, sizeof(path)), 0);
    ck_assert_int_eq(lstat(path, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_uint_eq(sb.st_mode & 07777, 0700);
    /* again: it exists and is kept */
    ck_assert_int_eq(sh_rundir_make(rt, 42, -1, getuid(), getgid(), path, sizeof(path)), 0);
    /* a step's directory; a symlink in its place is refused */
    ck_assert_int_eq(sh_rundir_make(rt, 42, 3, getuid(), getgid(), path, sizeof(path)), 0);
    ck_assert(strstr(path, "/run/42.3") != NULL);
    ck_assert_int_eq(symlink("/tmp", strcat(strcpy(path, rt), "/43")), 0);
    ck_assert_int_eq(sh_rundir_make(rt, 43, -1, getuid(), getgid(), path, sizeof(path)), -1);
    /* no runtime directory: ENOENT, and the path for the message */
    snprintf(rt, sizeof(rt), "%s/none", root);
    errno = 0;
    ck_assert_int_eq(sh_rundir_make(rt, 44, -1, getuid(), getgid(), path, sizeof(path)), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert(strstr(path, "/none/44") != NULL);
}
END_TEST

/* Root's directories above the per-user default directory (issue 30 item
 * 3): made root-owned with the mode asked for; an existing one that is not
 * a root-owned directory without group/other write is refused, EPERM,
 * naming it and its owner, and left as it was. Needs root (chown). */
START_TEST(root_dirs_refuse_users_objects)
{
    struct sh_root_dir_problem bad;
    char path[PATH_MAX + 16], top[PATH_MAX];
    struct stat sb;
    int fd;

    if (geteuid() != 0)
        return;
    snprintf(top, sizeof(top), "%s/a/b", root);
    fd = sh_root_dirs_make(root, top, 0755, &bad);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(stat(top, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0755);
    ck_assert_uint_eq(sb.st_uid, 0);
    /* again: kept */
    fd = sh_root_dirs_make(root, top, 0755, &bad);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* a user's directory in the way */
    ck_assert_int_eq(chown(top, 4242, 4242), 0);
    snprintf(path, sizeof(path), "%s/c", top);
    errno = 0;
    ck_assert_int_eq(sh_root_dirs_make(root, path, 0755, &bad), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_str_eq(bad.path, top);
    ck_assert_uint_eq(bad.uid, 4242);
    ck_assert_ptr_nonnull(strstr(bad.what, "not owned by root"));
    ck_assert_int_ne(stat(path, &sb), 0); /* nothing made under it */
    ck_assert_int_eq(stat(top, &sb), 0);
    ck_assert_uint_eq(sb.st_uid, 4242); /* left alone */
    /* root's but writable by others; a symlink; a file */
    ck_assert_int_eq(chown(top, 0, 0), 0);
    ck_assert_int_eq(chmod(top, 01777), 0);
    ck_assert_int_eq(sh_root_dirs_make(root, top, 0755, &bad), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_ptr_nonnull(strstr(bad.what, "writable"));
    snprintf(path, sizeof(path), "%s/link", root);
    ck_assert_int_eq(symlink(top, path), 0);
    ck_assert_int_eq(sh_root_dirs_make(root, path, 0755, &bad), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_ptr_nonnull(strstr(bad.what, "symbolic link"));
    snprintf(path, sizeof(path), "%s/file", root);
    write_file(path, "x");
    ck_assert_int_eq(sh_root_dirs_make(root, path, 0755, &bad), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_ptr_nonnull(strstr(bad.what, "not a directory"));
    /* not below the root */
    ck_assert_int_eq(sh_root_dirs_make(top, root, 0755, &bad), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(source_probe_and_wire_form)
{
    char src[PATH_MAX], err[512], buf[512];
    struct sh_src_id id, back;
    int n;

    snprintf(src, sizeof(src), "%s/missing.sqsh", root);
    ck_assert_int_eq(sh_src_probe(src, &id, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, src));
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
    ck_assert_int_eq(sh_src_probe(root, &id, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "is not a regular file"));

    snprintf(src, sizeof(src), "%s/image.sqsh", root);
    write_file(src, "0123456789");
    ck_assert_int_eq(sh_src_probe(src, &id, err, sizeof(err)), 0);
    ck_assert_uint_eq(id.size, 10);
    ck_assert_str_eq(id.path, src);

    n = sh_src_encode(buf, sizeof(buf), 1, &id, NULL);
    ck_assert_int_gt(n, 3);
    ck_assert_int_eq(sh_src_decode((const unsigned char *)buf, (uint32_t)n, src, &back, err,
                                   sizeof(err)), 0);
    ck_assert_uint_eq(back.size, id.size);
    ck_assert_int_eq(back.mtime.sec, id.mtime.sec);
    ck_assert_uint_eq(back.mtime.nsec, id.mtime.nsec);
    ck_assert_uint_eq(back.ctime.nsec, id.ctime.nsec);
    ck_assert_str_eq(back.path, src);
    /* SRC's mode and group travel too (issue 30) */
    ck_assert_int_eq(chmod(src, 0640), 0);
    ck_assert_int_eq(sh_src_probe(src, &id, err, sizeof(err)), 0);
    ck_assert_uint_eq(id.mode, 0640);
    n = sh_src_encode(buf, sizeof(buf), 1, &id, NULL);
    ck_assert_int_eq(sh_src_decode((const unsigned char *)buf, (uint32_t)n, src, &back, err,
                                   sizeof(err)), 0);
    ck_assert_uint_eq(back.mode, 0640);
    ck_assert_uint_eq(back.gid, getgid());
    /* a leader of an older version: private copies */
    ck_assert_int_eq(sh_src_decode((const unsigned char *)"ok 10 1 2 3 4", 13, src, &back,
                                   err, sizeof(err)), 0);
    ck_assert_uint_eq(back.size, 10);
    ck_assert_uint_eq(back.mode, 0600);
    ck_assert_uint_eq(back.gid, (uint32_t)-1);

    /* the leader's error travels as text and comes back as the error */
    n = sh_src_encode(buf, sizeof(buf), 0, NULL, "source /x: Permission denied");
    ck_assert_int_eq(sh_src_decode((const unsigned char *)buf, (uint32_t)n, src, &back, err,
                                   sizeof(err)), -1);
    ck_assert_str_eq(err, "source /x: Permission denied");
    ck_assert_int_eq(sh_src_decode((const unsigned char *)"ok 1 2", 6, src, &back, err,
                                   sizeof(err)), -1);
    ck_assert_str_eq(err, "malformed source record from the leader");
}
END_TEST

START_TEST(vote_from_recorded_metadata)
{
    char src[PATH_MAX], dst[PATH_MAX], why[1024], err[512];
    struct sh_config cfg;
    struct sh_src_id id, other;

    config_for(&cfg, root, "meta");
    snprintf(src, sizeof(src), "%s/src.sqsh", root);
    snprintf(dst, sizeof(dst), "%s/img.sqsh", root);
    write_file(src, "image-v1");
    ck_assert_int_eq(sh_src_probe(src, &id, err, sizeof(err)), 0);

    /* no DST yet */
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)), SH_VOTE_NEED);
    ck_assert_str_eq(why, "needs a copy");
    /* a DST without a record: not trusted */
    write_file(dst, "image-v1");
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)), SH_VOTE_NEED);
    /* a recorded copy of this very source */
    record_copy(root, "img.sqsh", &id);
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)),
                     SH_VOTE_CURRENT);
    ck_assert_str_eq(why, "current");
    /* issue 30: a current copy looser than SRC (0644 from an older version,
     * SRC now 0600) is made private, and stays current */
    {
        struct stat sb;
        struct sh_src_id priv = id;

        ck_assert_int_eq(chmod(dst, 0644), 0);
        priv.mode = 0600;
        ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &priv, 022, why, sizeof(why)),
                         SH_VOTE_CURRENT);
        ck_assert_int_eq(stat(dst, &sb), 0);
        ck_assert_uint_eq(sb.st_mode & 07777, 0600);
        /* SRC 0640, umask 077: 0600 as well; never loosened back */
        priv.mode = 0640;
        ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &priv, 077, why, sizeof(why)),
                         SH_VOTE_CURRENT);
        ck_assert_int_eq(stat(dst, &sb), 0);
        ck_assert_uint_eq(sb.st_mode & 07777, 0600);
    }
    /* the source changed since (another ctime): needs a copy */
    other = id;
    other.ctime.nsec = (other.ctime.nsec + 1) % 1000000000U;
    other.ctime.sec++;
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &other, 022, why, sizeof(why)),
                     SH_VOTE_NEED);
    /* DST owned by another user: never trusted (root is only allowed) */
    if (getuid() == 0) {
        ck_assert_int_eq(chown(dst, 4242, 4242), 0);
        ck_assert_int_eq(sh_dest_vote(&cfg, 0, dst, &id, 022, why, sizeof(why)), SH_VOTE_NEED);
        ck_assert_int_eq(chown(dst, 0, 0), 0);
    }
    /* check=content and check=never leave the decision to the engine */
    config_for(&cfg, root, "content");
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)), SH_VOTE_NEED);
    config_for(&cfg, root, "never");
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)), SH_VOTE_NEED);

    /* DST's place: a directory, or a path outside the allowed root */
    config_for(&cfg, root, "meta");
    snprintf(dst, sizeof(dst), "%s/adir", root);
    ck_assert_int_eq(mkdir(dst, 0700), 0);
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), dst, &id, 022, why, sizeof(why)), SH_VOTE_ERROR);
    ck_assert_ptr_nonnull(strstr(why, "is a directory"));
    ck_assert_int_eq(sh_dest_vote(&cfg, getuid(), "/etc/img.sqsh", &id, 022, why, sizeof(why)),
                     SH_VOTE_ERROR);
    ck_assert_ptr_nonnull(strstr(why, "is not under an allowed directory"));
}
END_TEST

/* DST directly in a sticky directory that is not the job user's (such as
 * /nvme, 1777 root): an entry there that the user does not own cannot be
 * replaced (rename(2): EPERM), whoever owns it, root included, and whether
 * it is a file or a symbolic link; refused before any data moves. */
START_TEST(sticky_dir_entries_of_others)
{
    const uid_t user = 4242; /* the job user: owns neither the directory nor the entries */
    char dst[PATH_MAX], why[1024];
    struct sh_config cfg;

    config_for(&cfg, root, "meta");
    ck_assert_int_eq(chmod(root, 01777), 0);
    snprintf(dst, sizeof(dst), "%s/theirs.sqsh", root);
    write_file(dst, "someone else's");
    ck_assert_int_eq(sh_dest_check_path(&cfg, user, dst, why, sizeof(why)), -1);
    ck_assert_msg(strstr(why, "belongs to another user") != NULL &&
                      strstr(why, "its directory is sticky") != NULL, "%s", why);
    snprintf(dst, sizeof(dst), "%s/link.sqsh", root);
    ck_assert_int_eq(symlink("/etc/passwd", dst), 0);
    ck_assert_int_eq(sh_dest_check_path(&cfg, user, dst, why, sizeof(why)), -1);
    ck_assert_msg(strstr(why, "(a symbolic link) belongs to another user") != NULL, "%s", why);
    /* the user's own entry, a missing one, or the user's own directory: fine */
    snprintf(dst, sizeof(dst), "%s/missing.sqsh", root);
    ck_assert_int_eq(sh_dest_check_path(&cfg, user, dst, why, sizeof(why)), 0);
    snprintf(dst, sizeof(dst), "%s/theirs.sqsh", root);
    ck_assert_int_eq(sh_dest_check_path(&cfg, getuid(), dst, why, sizeof(why)), 0);
    if (getuid() == 0) {
        ck_assert_int_eq(chown(dst, user, user), 0);
        ck_assert_int_eq(sh_dest_check_path(&cfg, user, dst, why, sizeof(why)), 0);
    }
    /* not sticky: replacing is the directory's write permission's business */
    ck_assert_int_eq(chmod(root, 0755), 0);
    snprintf(dst, sizeof(dst), "%s/link.sqsh", root);
    ck_assert_int_eq(sh_dest_check_path(&cfg, user, dst, why, sizeof(why)), 0);
}
END_TEST

START_TEST(claims_of_other_jobs)
{
    char rt[PATH_MAX], dir[PATH_MAX + 16], claim[2 * PATH_MAX + 128], mine[2 * PATH_MAX + 128];
    char who[32], their[PATH_MAX];
    struct sh_src_id v1, v2;
    int n;

    memset(&v1, 0, sizeof(v1));
    snprintf(v1.path, sizeof(v1.path), "/shared/app-v1.sqsh");
    v1.size = 100;
    v1.ctime.sec = 1000;
    v2 = v1;
    snprintf(v2.path, sizeof(v2.path), "/shared/app-v2.sqsh");

    snprintf(rt, sizeof(rt), "%s/run", root);
    ck_assert_int_eq(mkdir(rt, 0755), 0);
    /* job 10 holds /nvme/app.sqsh from v1 */
    snprintf(dir, sizeof(dir), "%s/10", rt);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    n = sh_claim_text("/nvme/app.sqsh", &v1, claim, sizeof(claim));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(sh_claim_write(dir, 0, claim, n), 0);
    ck_assert_int_eq(access(dir, F_OK), 0);

    /* job 11 with v2 to the same DST: conflict, naming job 10 and v1 */
    n = sh_claim_text("/nvme/app.sqsh", &v2, mine, sizeof(mine));
    ck_assert_int_gt(n, 0);
    ck_assert(sh_claim_conflict(rt, 11, "/nvme/app.sqsh", mine, who, sizeof(who), their,
                                sizeof(their)));
    ck_assert_str_eq(who, "10");
    ck_assert_str_eq(their, "/shared/app-v1.sqsh");
    /* the same content, another DST, or job 10 itself (its steps): none */
    ck_assert(!sh_claim_conflict(rt, 11, "/nvme/app.sqsh", claim, who, sizeof(who), their,
                                 sizeof(their)));
    n = sh_claim_text("/nvme/other.sqsh", &v2, mine, sizeof(mine));
    ck_assert(!sh_claim_conflict(rt, 11, "/nvme/other.sqsh", mine, who, sizeof(who), their,
                                 sizeof(their)));
    n = sh_claim_text("/nvme/app.sqsh", &v2, mine, sizeof(mine));
    ck_assert(!sh_claim_conflict(rt, 10, "/nvme/app.sqsh", mine, who, sizeof(who), their,
                                 sizeof(their)));
    /* a step's runtime directory "10.2" counts as job 10's */
    sh_claim_remove(dir, 0);
    snprintf(dir, sizeof(dir), "%s/10.2", rt);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(sh_claim_write(dir, 1, claim, (int)strlen(claim)), 0);
    ck_assert(sh_claim_conflict(rt, 11, "/nvme/app.sqsh", mine, who, sizeof(who), their,
                                sizeof(their)));
    ck_assert_str_eq(who, "10");
    /* once removed, nothing conflicts */
    sh_claim_remove(dir, 1);
    ck_assert(!sh_claim_conflict(rt, 11, "/nvme/app.sqsh", mine, who, sizeof(who), their,
                                 sizeof(their)));
    /* a claim cannot be written where there is no runtime directory */
    snprintf(dir, sizeof(dir), "%s/99", rt);
    ck_assert_int_eq(sh_claim_write(dir, 0, claim, (int)strlen(claim)), -1);
    ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(nearest_existing_dir)
{
    char dst[PATH_MAX], out[PATH_MAX];

    snprintf(dst, sizeof(dst), "%s/a/b/img.sqsh", root);
    sh_nearest_dir(dst, out, sizeof(out));
    ck_assert_str_eq(out, root);
    sh_nearest_dir("/img.sqsh", out, sizeof(out));
    ck_assert_str_eq(out, "/");
    ck_assert_ptr_nonnull(sh_shared_fs_name(0x6969));   /* NFS */
    ck_assert_ptr_null(sh_shared_fs_name(0x01021994));  /* tmpfs */
}
END_TEST

static Suite *local_suite(void)
{
    Suite *s = suite_create("local");
    TCase *tc = tcase_create("local");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, rundir_names);
    tcase_add_test(tc, rundir_made_for_the_user);
    tcase_add_test(tc, rundir_limited_to_a_small_tmpfs);
    tcase_add_test(tc, root_dirs_refuse_users_objects);
    tcase_add_test(tc, source_probe_and_wire_form);
    tcase_add_test(tc, vote_from_recorded_metadata);
    tcase_add_test(tc, sticky_dir_entries_of_others);
    tcase_add_test(tc, claims_of_other_jobs);
    tcase_add_test(tc, nearest_existing_dir);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(local_suite());
}
