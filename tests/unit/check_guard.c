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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/engine/guard.h"
#include "../../core/engine/report.h"
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

/* A crash signal sent with sigqueue(2) (SI_QUEUE): its sender is what the
 * sender wrote, so it is never a real crash: the engine leaves with
 * SH_EXIT_KILLED, the earlier handler is not called. */
static void body_queued_segv(void)
{
    union sigval val = { .sival_int = 0 };

    start_publish();
    install_prev(SIGSEGV);
    sh_guard_install_signals();
    sigqueue(getpid(), SIGSEGV, val);
}

/* The same with a forged sender: root (uid 0) and this very process. */
static void body_forged_root(void)
{
    siginfo_t si;

    start_publish();
    install_prev(SIGBUS);
    sh_guard_install_signals();
    memset(&si, 0, sizeof(si));
    si.si_signo = SIGBUS;
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = 0;
    syscall(SYS_rt_sigqueueinfo, getpid(), SIGBUS, &si);
}

/* Sent while blocked (the engine blocks them until its handler exists):
 * pending until sh_guard_install_signals(), then told apart all the same. */
static void body_pending(void)
{
    union sigval val = { .sival_int = 0 };
    sigset_t set;

    sh_guard_block_crash_signals(&set);
    sigprocmask(SIG_BLOCK, &set, NULL);
    start_publish();
    sigqueue(getpid(), SIGABRT, val);
    install_prev(SIGABRT);
    sh_guard_install_signals();
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
    { "a SIGSEGV sent by sigqueue leaves with SH_EXIT_KILLED", body_queued_segv,
      SH_EXIT_KILLED, 0 },
    { "a SIGBUS whose sigqueue sender claims root leaves with SH_EXIT_KILLED",
      body_forged_root, SH_EXIT_KILLED, 0 },
    { "a SIGABRT sent while blocked leaves with SH_EXIT_KILLED once handled",
      body_pending, SH_EXIT_KILLED, 0 },
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

/* sh_guard_sent_by_user: which siginfo is a real crash (security issue 30). */
static const struct sender_case {
    const char *what;
    int code;
    int self;               /* si_pid is the process itself */
    uid_t uid;
    bool by_user;
} sender_cases[] = {
    { "a fault (SEGV_MAPERR) from the kernel", SEGV_MAPERR, 0, 1000, false },
    { "a bus error (BUS_ADRERR) from the kernel", BUS_ADRERR, 0, 0, false },
    { "SI_KERNEL", SI_KERNEL, 0, 1000, false },
    { "kill(2) by another process of a user", SI_USER, 0, 1000, true },
    { "kill(2) by root (a simulated crash)", SI_USER, 0, 0, false },
    { "kill(2) by the process itself", SI_USER, 1, 1000, false },
    { "tgkill(2) by the process itself (abort, raise)", SI_TKILL, 1, 1000, false },
    { "tgkill(2) by another process of a user", SI_TKILL, 0, 1000, true },
    { "tgkill(2) by root", SI_TKILL, 0, 0, false },
    { "sigqueue(2) claiming root", SI_QUEUE, 0, 0, true },
    { "sigqueue(2) claiming the process itself", SI_QUEUE, 1, 0, true },
    { "a timer (SI_TIMER) a user set up", SI_TIMER, 0, 1000, true },
};

START_TEST(test_sent_by_user)
{
    const struct sender_case *c = &sender_cases[_i];
    siginfo_t si;

    memset(&si, 0, sizeof(si));
    si.si_signo = SIGSEGV;
    si.si_code = c->code;
    si.si_pid = c->self ? 4242 : 4243;
    si.si_uid = c->uid;
    ck_assert_msg(sh_guard_sent_by_user(&si, 4242) == c->by_user, "%s", c->what);
}
END_TEST

START_TEST(test_sent_by_user_unknown)
{
    ck_assert(!sh_guard_sent_by_user(NULL, getpid()));
}
END_TEST

START_TEST(test_killed_text)
{
    siginfo_t si;
    char buf[256], small[24];
    size_t n;

    memset(&si, 0, sizeof(si));
    si.si_code = SI_USER;
    si.si_pid = 1234;
    si.si_uid = 1001;
    n = sh_guard_killed_text(SIGSEGV, &si, buf, sizeof(buf));
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_str_eq(buf, SH_GUARD_KILLED_TAG "killed by signal SIGSEGV sent by pid 1234 "
                     "of uid 1001, not a crash; temp file removed, exiting\n");
    si.si_code = SI_QUEUE;
    sh_guard_killed_text(SIGABRT, &si, buf, sizeof(buf));
    ck_assert_ptr_nonnull(strstr(buf, "SIGABRT sent by pid 1234 of uid 1001 (as the sender "
                                      "wrote it: sigqueue)"));
    n = sh_guard_killed_text(SIGBUS, &si, small, sizeof(small));
    ck_assert_uint_eq(n, sizeof(small) - 1);
    ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

static Suite *guard_suite(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("signals");
    TCase *tc2 = tcase_create("sender");

    tcase_add_loop_test(tc, test_signal_cleanup, 0,
                        (int)(sizeof(scenarios) / sizeof(scenarios[0])));
    suite_add_tcase(s, tc);
    tcase_add_loop_test(tc2, test_sent_by_user, 0,
                        (int)(sizeof(sender_cases) / sizeof(sender_cases[0])));
    tcase_add_test(tc2, test_sent_by_user_unknown);
    tcase_add_test(tc2, test_killed_text);
    suite_add_tcase(s, tc2);
    return s;
}

int main(void)
{
    return sh_check_run(guard_suite());
}
