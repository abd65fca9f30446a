/* Loop-until-done helpers over the I/O seam (case F11). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stagehand/io.h"

#include "check_main.h"

/* Fake file of fake_size bytes whose content is (offset & 0xff). */
static uint64_t fake_size;
static size_t fake_max;         /* largest count one call returns */
static unsigned fake_calls;
static unsigned fake_eintr_every;   /* every n-th call fails with EINTR */
static int fake_err;            /* errno of a hard failure, 0 = none */
static unsigned fake_err_at;    /* call number of the hard failure */
static int fake_touch;          /* fill / check the buffer */
static size_t fake_write_zero;  /* pwrite returns 0 */

static ssize_t fake_pread(int fd, void *buf, size_t len, off_t off)
{
    size_t n;

    (void)fd;
    fake_calls++;
    ck_assert_uint_le(len, SH_IO_MAX_CHUNK);
    if (fake_eintr_every != 0 && fake_calls % fake_eintr_every == 0) {
        errno = EINTR;
        return -1;
    }
    if (fake_err != 0 && fake_calls == fake_err_at) {
        errno = fake_err;
        return -1;
    }
    if ((uint64_t)off >= fake_size)
        return 0;
    n = len < fake_max ? len : fake_max;
    if (n > fake_size - (uint64_t)off)
        n = (size_t)(fake_size - (uint64_t)off);
    if (fake_touch) {
        for (size_t i = 0; i < n; i++)
            ((unsigned char *)buf)[i] = (unsigned char)((uint64_t)off + i);
    }
    return (ssize_t)n;
}

static unsigned char written[4096];

static ssize_t fake_pwrite(int fd, const void *buf, size_t len, off_t off)
{
    size_t n = len < fake_max ? len : fake_max;

    (void)fd;
    fake_calls++;
    ck_assert_uint_le(len, SH_IO_MAX_CHUNK);
    if (fake_eintr_every != 0 && fake_calls % fake_eintr_every == 0) {
        errno = EINTR;
        return -1;
    }
    if (fake_err != 0 && fake_calls == fake_err_at) {
        errno = fake_err;
        return -1;
    }
    if (fake_write_zero)
        return 0;
    if (fake_touch)
        memcpy(written + off, buf, n);
    return (ssize_t)n;
}

static int fsync_calls;

static int fake_fsync(int fd)
{
    (void)fd;
    return ++fsync_calls < 3 ? (errno = EINTR, -1) : 0;
}

static struct sh_io_ops fake;

static void setup(void)
{
    fake = *sh_io_default();
    fake.pread = fake_pread;
    fake.pwrite = fake_pwrite;
    fake.fsync = fake_fsync;
    fake_size = 0;
    fake_max = SH_IO_MAX_CHUNK;
    fake_calls = 0;
    fake_eintr_every = 0;
    fake_err = 0;
    fake_err_at = 0;
    fake_touch = 1;
    fake_write_zero = 0;
    fsync_calls = 0;
    memset(written, 0, sizeof(written));
}

/* case F11: 1-byte reads interleaved with EINTR still fill the buffer */
START_TEST(read_short_and_eintr)
{
    unsigned char buf[1000];

    fake_size = 5000;
    fake_max = 1;
    fake_eintr_every = 3;
    ck_assert_int_eq(sh_io_pread_full(&fake, 3, buf, sizeof(buf), 100), 1000);
    for (size_t i = 0; i < sizeof(buf); i++)
        ck_assert_uint_eq(buf[i], (unsigned char)(100 + i));
}
END_TEST

START_TEST(read_stops_at_eof)
{
    unsigned char buf[1000];

    fake_size = 1500;
    fake_max = 333;
    ck_assert_int_eq(sh_io_pread_full(&fake, 3, buf, sizeof(buf), 1000), 500);
    ck_assert_int_eq(sh_io_pread_full(&fake, 3, buf, sizeof(buf), 1500), 0);
}
END_TEST

START_TEST(read_error_is_error)
{
    unsigned char buf[1000];

    fake_size = 5000;
    fake_max = 100;
    fake_err = EIO;
    fake_err_at = 4;
    ck_assert_int_eq(sh_io_pread_full(&fake, 3, buf, sizeof(buf), 0), -1);
    ck_assert_int_eq(errno, EIO);
}
END_TEST

/* case F11: a 3 GiB request goes in pieces of at most 0x7ffff000 bytes */
START_TEST(read_huge_request_clamped)
{
    size_t len = 3ULL << 30;
    void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    ck_assert_ptr_ne(buf, MAP_FAILED);
    fake_size = 4ULL << 30;
    fake_touch = 0;     /* the pages are never faulted in */
    ck_assert_int_eq(sh_io_pread_full(&fake, 3, buf, len, 0), (ssize_t)len);
    ck_assert_uint_eq(fake_calls, 2);   /* 0x7ffff000 + the rest */
    munmap(buf, len);
}
END_TEST

START_TEST(write_short_and_eintr)
{
    unsigned char buf[3000];

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7);
    fake_max = 1;
    fake_eintr_every = 2;
    ck_assert_int_eq(sh_io_pwrite_full(&fake, 3, buf, sizeof(buf), 10), 0);
    ck_assert_mem_eq(written + 10, buf, sizeof(buf));
}
END_TEST

START_TEST(write_errors)
{
    unsigned char buf[100] = { 0 };

    fake_max = 10;
    fake_err = ENOSPC;
    fake_err_at = 3;
    ck_assert_int_eq(sh_io_pwrite_full(&fake, 3, buf, sizeof(buf), 0), -1);
    ck_assert_int_eq(errno, ENOSPC);
    setup();
    fake_write_zero = 1;    /* no progress is an error, never a hang */
    ck_assert_int_eq(sh_io_pwrite_full(&fake, 3, buf, sizeof(buf), 0), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_int_eq(sh_io_pwrite_full(&fake, 3, buf, 0, 0), 0);
}
END_TEST

START_TEST(fsync_retries_eintr)
{
    ck_assert_int_eq(sh_io_fsync(&fake, 3), 0);
    ck_assert_int_eq(fsync_calls, 3);
}
END_TEST

START_TEST(real_ops_roundtrip)
{
    char path[] = "/tmp/check_io.XXXXXX";
    int fd = mkstemp(path);
    char out[6] = "";

    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(sh_io_pwrite_full(NULL, fd, "hello", 5, 0), 0);
    ck_assert_int_eq(sh_io_pread_full(NULL, fd, out, 5, 0), 5);
    ck_assert_str_eq(out, "hello");
    errno = EXDEV;
    ck_assert_int_eq(sh_io_close_keep_errno(NULL, fd), 0);
    ck_assert_int_eq(errno, EXDEV);
}
END_TEST

START_TEST(read_small_file)
{
    char dir[] = "/tmp/check_io.XXXXXX", buf[8];
    int dfd, fd;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    dfd = open(dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(dfd, 0);
    fd = openat(dfd, "rec", O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "1234 5678\n", 10), 10);
    close(fd);
    /* at most len - 1 bytes, always NUL-terminated */
    ck_assert_int_eq(sh_read_small_at(dfd, "rec", buf, sizeof(buf)), 7);
    ck_assert_str_eq(buf, "1234 56");
    /* a symbolic link is not followed; a missing file is ENOENT */
    ck_assert_int_eq(symlinkat("rec", dfd, "link"), 0);
    errno = 0;
    ck_assert_int_eq(sh_read_small_at(dfd, "link", buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, ELOOP);
    errno = 0;
    ck_assert_int_eq(sh_read_small_at(dfd, "none", buf, sizeof(buf)), -1);
    ck_assert_int_eq(errno, ENOENT);
    unlinkat(dfd, "link", 0);
    unlinkat(dfd, "rec", 0);
    close(dfd);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("io");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, read_short_and_eintr);
    tcase_add_test(tc, read_stops_at_eof);
    tcase_add_test(tc, read_error_is_error);
    tcase_add_test(tc, read_huge_request_clamped);
    tcase_add_test(tc, write_short_and_eintr);
    tcase_add_test(tc, write_errors);
    tcase_add_test(tc, fsync_retries_eintr);
    tcase_add_test(tc, real_ops_roundtrip);
    tcase_add_test(tc, read_small_file);
    suite_add_tcase(s, tc);
    return sh_check_run(s);
}
