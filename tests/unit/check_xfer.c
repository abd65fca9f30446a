/* The engine's reader (core/engine/xfer.c) drops SRC's pages from its page
 * cache only behind the segments read in order: a page dropped while a read
 * of an earlier segment is still in flight can be read ahead by the kernel a
 * second time, which costs the shared storage traffic (issue 5: stagehand
 * reads S exactly once). The transfer runs on MPI_COMM_SELF of a singleton
 * (one rank, no network), with the reader's pread(2) and posix_fadvise(2)
 * behind the sh_io_ops seam: the first segment's read is held back so that
 * later ones finish first, and every DONTNEED is checked against the reads
 * in flight when it is issued. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../core/engine/xfer.h"
#include "stagehand/hash.h"
#include "stagehand/io.h"

#include "check_main.h"

#define SEG (64u * 1024u)
#define NSEG 40u
#define MAX_INFLIGHT 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t off, end; int live; } inflight[MAX_INFLIGHT];
static unsigned drops_per_seg[NSEG];
static unsigned violations;
static uint64_t first_bad_drop = UINT64_MAX, bad_read_off;
static unsigned slow_segs_mask;     /* bit k: hold segment k's read back */
static unsigned seam_errors;        /* unexpected calls (checked by the test:
                                     * Check's asserts belong on its thread) */

static ssize_t held_pread(int fd, void *buf, size_t len, off_t off)
{
    unsigned slot = MAX_INFLIGHT;
    uint64_t k = (uint64_t)off / SEG;
    ssize_t n;

    pthread_mutex_lock(&mu);
    for (unsigned i = 0; i < MAX_INFLIGHT; i++) {
        if (!inflight[i].live) {
            inflight[i].off = (uint64_t)off;
            inflight[i].end = (uint64_t)off + len;
            inflight[i].live = 1;
            slot = i;
            break;
        }
    }
    if (slot == MAX_INFLIGHT)
        seam_errors++;
    pthread_mutex_unlock(&mu);
    if (k < 32 && (slow_segs_mask & (1u << k)) != 0) {
        struct timespec ts = { 0, 150 * 1000 * 1000 };

        nanosleep(&ts, NULL);
    }
    n = pread(fd, buf, len, off);
    pthread_mutex_lock(&mu);
    if (slot < MAX_INFLIGHT)
        inflight[slot].live = 0;
    pthread_mutex_unlock(&mu);
    return n;
}

/* A drop of [off, off+len) is safe only when no read in flight starts before
 * its end: read-ahead of such a read may reach into the dropped range. */
static int checked_fadvise(int fd, off_t off, off_t len, int advice)
{
    pthread_mutex_lock(&mu);
    if (advice != POSIX_FADV_DONTNEED || off % SEG != 0)
        seam_errors++;
    for (unsigned i = 0; i < MAX_INFLIGHT; i++) {
        if (inflight[i].live && inflight[i].off < (uint64_t)off + (uint64_t)len) {
            violations++;
            if (first_bad_drop == UINT64_MAX) {
                first_bad_drop = (uint64_t)off;
                bad_read_off = inflight[i].off;
            }
        }
    }
    for (uint64_t k = (uint64_t)off / SEG;
         k < NSEG && k * SEG < (uint64_t)off + (uint64_t)len; k++)
        drops_per_seg[k]++;
    pthread_mutex_unlock(&mu);
    return posix_fadvise(fd, off, len, advice);
}

static char dir[64];
static char src_path[96];
static int src_fd = -1;
static uint8_t want_digest[SH_HASH_MAX_LEN];
static int want_len;

static void setup(void)
{
    static unsigned char data[(size_t)NSEG * SEG];
    struct sh_hash *h;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 2654435761u >> 13);
    snprintf(dir, sizeof(dir), "/tmp/check_xfer.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(src_path, sizeof(src_path), "%s/src.img", dir);
    src_fd = open(src_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(src_fd, 0);
    ck_assert_int_eq(sh_io_pwrite_full(NULL, src_fd, data, sizeof(data), 0), 0);
    h = sh_hash_new(SH_HASH_XXH3);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(sh_hash_update(h, data, sizeof(data)), 0);
    want_len = sh_hash_final(h, want_digest);
    ck_assert_int_gt(want_len, 0);
    sh_hash_free(h);
    memset(inflight, 0, sizeof(inflight));
    memset(drops_per_seg, 0, sizeof(drops_per_seg));
    violations = 0;
    seam_errors = 0;
    first_bad_drop = UINT64_MAX;
}

static void teardown(void)
{
    close(src_fd);
    src_fd = -1;
    unlink(src_path);
    rmdir(dir);
}

static void run_reader(enum sh_algorithm alg, unsigned read_ahead, unsigned slow)
{
    struct sh_io_ops io = *sh_io_default();
    struct sh_xfer_cfg cfg;
    struct sh_xfer_result res;

    io.pread = held_pread;
    io.fadvise = checked_fadvise;
    slow_segs_mask = slow;
    memset(&cfg, 0, sizeof(cfg));
    cfg.comm = MPI_COMM_SELF;
    cfg.algorithm = alg;
    ck_assert_int_eq(sh_sched_init(&cfg.sched, (uint64_t)NSEG * SEG, SEG), 0);
    cfg.depth = 8;
    cfg.read_ahead = read_ahead;
    cfg.hash = SH_HASH_XXH3;
    cfg.src_fd = src_fd;
    cfg.io = &io;
    cfg.pub = NULL;
    cfg.deadline_ns = (uint64_t)sh_now_ns() + 60ULL * 1000000000ULL;

    ck_assert_msg(sh_xfer_run(&cfg, &res) == 0, "transfer failed: %s", res.msg);
    ck_assert_uint_eq(res.src_status, SH_SEG_OK);
    ck_assert_uint_eq(seam_errors, 0);
    ck_assert_int_eq(res.digest_len, want_len);
    ck_assert_mem_eq(res.digest, want_digest, (size_t)want_len);
    ck_assert_msg(violations == 0,
                  "%u page-cache drops while an earlier read was in flight "
                  "(first: drop from byte %llu while the read at byte %llu ran)",
                  violations, (unsigned long long)first_bad_drop,
                  (unsigned long long)bad_read_off);
    for (unsigned k = 0; k < NSEG; k++)
        ck_assert_msg(drops_per_seg[k] == 1, "segment %u dropped %u times", k,
                      drops_per_seg[k]);
}

/* Segment 0 is held back: segments 1..3 finish first and must stay cached
 * until 0 is done. */
START_TEST(test_chain_first_segment_slow)
{
    run_reader(SH_ALG_CHAIN, 4, 1u << 0);
}
END_TEST

/* Holes further on (segments 5 and 9), with the collective algorithm. */
START_TEST(test_bcast_later_segments_slow)
{
    run_reader(SH_ALG_BCAST, 4, (1u << 5) | (1u << 9));
}
END_TEST

/* One reader thread: every drop is in order anyway, and nothing is missed. */
START_TEST(test_single_reader)
{
    run_reader(SH_ALG_CHAIN, 1, 0);
}
END_TEST

static Suite *xfer_suite(void)
{
    Suite *s = suite_create("xfer");
    TCase *tc = tcase_create("drop_behind");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_chain_first_segment_slow);
    tcase_add_test(tc, test_bcast_later_segments_slow);
    tcase_add_test(tc, test_single_reader);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    int provided = 0, rc;

    /* MPI is initialised once, in this process: Check must not fork. */
    setenv("CK_FORK", "no", 1);
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return EXIT_FAILURE;
    rc = sh_check_run(xfer_suite());
    MPI_Finalize();
    return rc;
}
