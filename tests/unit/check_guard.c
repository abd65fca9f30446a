/* The engine's signal cleanup (core/engine/guard.c, cases F06, F22): a rank
 * that is terminated or crashes leaves no temp file, and a crash still ends
 * the process by the crash signal, through the handler that was installed
 * before the engine's (Open MPI's backtrace printer in the engine). Each
 * scenario runs in a child process, on a real directory under /tmp. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/engine/guard.h"
#include "stagehand/publish.h"

#include "check_main.h"

#define PREV_HANDLER_EXIT 42

static char dir[64];
static int dirfd_ = -1;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/check_guard.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd_, 0);
}

/* A live temp file for "img", as the engine has during a transfer. */
static void start_publish(void)
{
    ck_assert_int_eq(sh_publish_begin(&sh_guard_pub, NULL, dirfd_, "img", "1", "n1",
                                      4096, 0644, (gid_t)-1), 0);
    ck_assert(sh_guard_pub.tmp_live);
    ck_assert_int_eq(faccessat(dirfd_, sh_guard_pub.tmpname, F_OK, 0), 0);
}

/* Stands for Open MPI's handler: proves it was called after the cleanup. */
static void prev_handler(int sig)
{
    (void)sig;
    _exit(faccessat(dirfd_, sh_guard_pub.tmpname, F_OK, 0) != 0 ? PREV_HANDLER_EXIT : 1);
}

static void install_prev(int sig)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = prev_handler;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(sig, &sa, NULL), 0);
}

/* Scenarios, each run in a child process that ends by a signal or by the
 * earlier handler's exit status. */
static void body_sent_segv(void)
{
    start_publish();
    install_prev(SIGSEGV);
    sh_guard_install_signals();
    raise(SIGSEGV);
}

/* A real fault (a write to a read-only page): the fault recurs after the
 * cleanup and the earlier handler gets the kernel's siginfo. */
static void body_fault(void)
{
    volatile char *page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (page == MAP_FAILED)
        _exit(2);
    start_publish();
    install_prev(SIGSEGV);
    sh_guard_install_signals();
    page[0] = 1;
}

static void body_abort(void)
{
    start_publish();
    sh_guard_install_signals();
    abort();
}

static void body_term(void)
{
    start_publish();
    sh_guard_install_signals();
    raise(SIGTERM);
}

#define SURVIVED_EPIPE 7

/* A write to a peer that went away (a closed pipe here, a closed TCP
 * connection in the engine) fails with EPIPE instead of killing the rank. */
static void body_pipe(void)
{
    int fds[2];

    start_publish();
    sh_guard_install_signals();
    if (pipe(fds) != 0)
        _exit(2);
    close(fds[0]);
    if (write(fds[1], "x", 1) == -1 && errno == EPIPE) {
        sh_publish_signal_cleanup(&sh_guard_pub);
        _exit(SURVIVED_EPIPE);
    }
    _exit(4);
}

static int run_child(void (*body)(void))
{
    int status = 0;
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        body();
        _exit(3);       /* survived the signal */
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* Entries of the test directory other than "." and "..". */
static int count_entries(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* What each scenario must end with: the earlier handler's exit status, or
 * death by the signal itself; in both cases no temp file is left. */
static const struct scenario {
    const char *what;
    void (*body)(void);
    int exit_status;        /* or -1 */
    int term_signal;        /* or 0 */
} scenarios[] = {
    { "a sent SIGSEGV chains to the earlier handler", body_sent_segv, PREV_HANDLER_EXIT, 0 },
    { "a real fault chains to the earlier handler", body_fault, PREV_HANDLER_EXIT, 0 },
    { "abort() with no earlier handler dies by SIGABRT", body_abort, -1, SIGABRT },
    { "SIGTERM (Slurm ending the step) dies by SIGTERM", body_term, -1, SIGTERM },
    { "a write to a closed pipe fails with EPIPE, no SIGPIPE", body_pipe, SURVIVED_EPIPE, 0 },
};

START_TEST(test_signal_cleanup)
{
    const struct scenario *sc = &scenarios[_i];
    int st;

    setup();
    st = run_child(sc->body);
    if (sc->term_signal == 0)
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == sc->exit_status,
                      "%s: status %#x", sc->what, st);
    else
        ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == sc->term_signal,
                      "%s: status %#x", sc->what, st);
    ck_assert_msg(count_entries() == 0, "%s: the temp file is left", sc->what);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *guard_suite(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("signals");

    tcase_add_loop_test(tc, test_signal_cleanup, 0,
                        (int)(sizeof(scenarios) / sizeof(scenarios[0])));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(guard_suite());
}
