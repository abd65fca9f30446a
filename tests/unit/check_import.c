/* The leader's import of a registry image (core/agent/import.c, issue 36):
 * the private import directory and what a stop signal (scancel, the
 * epilog's SIGTERM, SIGHUP when the plugin's process ends) leaves of it.
 * The importers are small shell scripts; each stop is sent to a forked
 * process that plays the agent. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/agent/import.h"
#include "stagehand/clock.h"

#include "check_main.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char root[64], workdir[PATH_MAX], image[PATH_MAX], importer[128];
static struct sh_config cfg;
static struct sh_ref ref;
static const char *user;

static void setup(void)
{
    char err[256];

    sh_check_quiet_logs();
    snprintf(root, sizeof(root), "/tmp/check_import.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    ck_assert_int_eq(sh_import_paths(root, "/nvme/img.sqsh", 7, 0, workdir, sizeof(workdir),
                                     image, sizeof(image)), 0);
    snprintf(importer, sizeof(importer), "%s/importer.sh", root);
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.importer, sizeof(cfg.importer), "%s,%%r,%%o", importer);
    ck_assert_int_eq(sh_ref_parse_canonical("docker://localhost:5000/test/img@" DIGEST, &ref,
                                            err, sizeof(err)), 0);
    user = getpwuid(getuid())->pw_name;
}

/* The test's directory goes as an import directory does (read-only
 * directories included). */
static void teardown(void)
{
    ck_assert_int_eq(sh_import_remove(root), 0);
}

/* The importer script: @body after "#!/bin/sh", run in the import
 * directory with $1 the reference and $2 the output file. */
static void write_importer(const char *body)
{
    FILE *f = fopen(importer, "w");

    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(importer, 0755), 0);
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

/* Entries of @dir other than "." and "..", or -1. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Wait up to 10 s for @path to exist. */
static bool wait_for(const char *path)
{
    for (int i = 0; i < 1000; i++) {
        if (exists(path))
            return true;
        usleep(10000);
    }
    return false;
}

/* Process @pid is gone or a zombie (its reaper is not this process), within 5 s. */
static bool ended(pid_t pid)
{
    char path[64], buf[256];

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        char *paren;

        if (f == NULL)
            return true;
        paren = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
        fclose(f);
        if (paren != NULL && paren[1] == ' ' && paren[2] == 'Z')
            return true;
        usleep(10000);
    }
    return false;
}

/* The forked "agent": the agent's own dispositions (Check's test process
 * catches SIGTERM, and its handler stops the whole process group); it ends
 * with the test process (a failed assertion leaves none waiting). */
static void agent_init(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    setpgid(0, 0);
}

static pid_t read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return (pid_t)pid;
}

START_TEST(test_paths)
{
    char w[PATH_MAX], i[PATH_MAX], dir[PATH_MAX];

    ck_assert_str_eq(workdir + strlen(root), "/.img.sqsh.import.7.0");
    ck_assert_str_eq(image + strlen(workdir), "/image.sqsh");
    /* A name that does not fit is refused, never cut (a cut one could name
     * another entry of the directory, or the directory itself). */
    memset(dir, 'd', sizeof(dir) - 15);
    dir[0] = '/';
    dir[sizeof(dir) - 15] = '\0';
    errno = 0;
    ck_assert_int_eq(sh_import_paths(dir, "/x/y.sqsh", 1, 2, w, sizeof(w), i, sizeof(i)), -1);
    ck_assert_int_eq(errno, ENAMETOOLONG);
    ck_assert_str_eq(w, "");
    ck_assert_str_eq(i, "");
}
END_TEST

/* A successful import leaves the image alone in the directory (what the
 * importer left beside it, read-only directories included, goes). */
START_TEST(test_success_prunes)
{
    char err[SH_IMPORT_ERR_MAX];

    write_importer("mkdir -p junk/ro/sub && echo x >junk/ro/sub/f && chmod 0500 junk/ro\n"
                   "echo leftover >\"$2.part\"\n"
                   "printf image >\"$2\"");
    ck_assert_msg(sh_import_run(&cfg, user, &ref, workdir, image, sh_now_ns() + 20000000000LL,
                                err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(entries(workdir), 1);
    ck_assert(exists(image));
    ck_assert_int_eq(sh_import_release(workdir), 0);
    ck_assert(!exists(workdir));
}
END_TEST

/* The importer starts with the mask the agent had (the guard blocks the
 * stop signals in the agent): here none blocked, so its grep of its own
 * mask succeeds (and it writes no image). */
START_TEST(test_importer_mask)
{
    char err[SH_IMPORT_ERR_MAX];
    sigset_t none;

    sigemptyset(&none);
    ck_assert_int_eq(sigprocmask(SIG_SETMASK, &none, NULL), 0);
    write_importer("exec grep -q '^SigBlk:[[:space:]]*0*$' /proc/self/status");
    ck_assert_int_eq(sh_import_run(&cfg, user, &ref, workdir, image,
                                   sh_now_ns() + 20000000000LL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "the importer succeeded but wrote no image") != NULL, "%s", err);
    ck_assert(!exists(workdir));
}
END_TEST

/* A failing importer: the message names the pinned reference and the
 * importer's stderr; the directory is gone. */
START_TEST(test_failure_removes)
{
    char err[SH_IMPORT_ERR_MAX];

    write_importer("mkdir -p a/b && chmod 0500 a\necho broken on purpose >&2\nexit 3");
    ck_assert_int_eq(sh_import_run(&cfg, user, &ref, workdir, image,
                                   sh_now_ns() + 20000000000LL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "docker://localhost:5000/test/img@" DIGEST) != NULL, "%s", err);
    ck_assert_msg(strstr(err, "the importer failed (exit 3): broken on purpose") != NULL, "%s",
                  err);
    ck_assert(!exists(workdir));
}
END_TEST

/* An importer that ran out of room (ENOSPC in its stderr): the message
 * says the image does not fit the first node and gives that filesystem's
 * free and total size before the importer's tail; the directory is gone. */
START_TEST(test_failure_no_room)
{
    char err[SH_IMPORT_ERR_MAX], want[PATH_MAX + 32];

    write_importer("printf partial >\"$2.part\"\n"
                   "echo 'writing blob: write oci/blob: no space left on device' >&2\nexit 1");
    ck_assert_int_eq(sh_import_run(&cfg, user, &ref, workdir, image,
                                   sh_now_ns() + 20000000000LL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "docker://localhost:5000/test/img@" DIGEST
                              ": the image does not fit the first node") != NULL, "%s", err);
    snprintf(want, sizeof(want), "%s's filesystem has ", root);
    ck_assert_msg(strstr(err, want) != NULL && strstr(err, " free of ") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "; the importer failed (exit 1): writing blob") != NULL, "%s", err);
    ck_assert(!exists(workdir));

    /* any other failure gets no such note */
    write_importer("echo 'manifest unknown' >&2\nexit 1");
    ck_assert_int_eq(sh_import_run(&cfg, user, &ref, workdir, image,
                                   sh_now_ns() + 20000000000LL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "does not fit") == NULL, "%s", err);
}
END_TEST

/* SIGTERM while the importer runs (its own process group, a partial file
 * and a background process in it): the agent kills that group, removes the
 * directory and ends by SIGTERM. */
START_TEST(test_stop_during_import)
{
    char body[1024], ready[128], sleeper[128];
    pid_t agent, bg;
    int st;

    snprintf(ready, sizeof(ready), "%s/ready", root);
    snprintf(sleeper, sizeof(sleeper), "%s/sleeper", root);
    snprintf(body, sizeof(body),
             "mkdir -p bundle/rootfs && chmod 0500 bundle\necho part >\"$2.part\"\n"
             "sleep 60 &\necho $! >%s\necho >%s\nwait", sleeper, ready);
    write_importer(body);
    agent = fork();
    ck_assert_int_ge(agent, 0);
    if (agent == 0) {
        char err[SH_IMPORT_ERR_MAX];

        agent_init();
        sh_import_run(&cfg, user, &ref, workdir, image, sh_now_ns() + 30000000000LL, err,
                      sizeof(err));
        _exit(0); /* not reached: the stop ends the agent */
    }
    ck_assert(wait_for(ready));
    bg = read_pid(sleeper);
    ck_assert(exists(workdir));
    ck_assert_int_eq(kill(agent, SIGTERM), 0);
    ck_assert_int_eq(waitpid(agent, &st, 0), agent);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "agent status %#x", st);
    ck_assert(!exists(workdir));
    ck_assert(ended(bg));
}
END_TEST

/* Agent's own handler for SIGHUP (as on_plugin_gone): ends it with 42. */
static void agent_hup(int sig)
{
    (void)sig;
    _exit(42);
}

/* Fork an "agent" (its own SIGHUP handler and an ignored SIGINT when
 * @own_handlers) that imports with the current importer, then forks a
 * child of its own (an engine before exec: the agent's handlers) into
 * *@engine, and waits; returns its pid once the import has succeeded. */
static pid_t agent_after_import(bool own_handlers, pid_t *engine)
{
    int p[2];
    pid_t agent;

    ck_assert_int_eq(pipe(p), 0);
    agent = fork();
    ck_assert_int_ge(agent, 0);
    if (agent == 0) {
        char err[SH_IMPORT_ERR_MAX];

        agent_init();
        close(p[0]);
        if (own_handlers) {
            signal(SIGHUP, agent_hup);
            signal(SIGINT, SIG_IGN);
        }
        if (sh_import_run(&cfg, user, &ref, workdir, image, sh_now_ns() + 20000000000LL, err,
                          sizeof(err)) != 0)
            _exit(2);
        *engine = fork();
        if (*engine == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (;;)
                pause();
        }
        (void)!write(p[1], engine, sizeof(*engine));
        for (;;)
            pause();
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], engine, sizeof(*engine)), (ssize_t)sizeof(*engine));
    close(p[0]);
    ck_assert_int_gt(*engine, 0);
    return agent;
}

/* SIGTERM right after a successful import (the broadcast reads the image):
 * the image and the directory are removed in the handler, then the agent
 * ends by SIGTERM; the agent's child (an engine before exec) stopped alone
 * ends without touching them. */
START_TEST(test_stop_after_import)
{
    pid_t agent, engine;
    int st;

    write_importer("mkdir -p oci/blobs\nprintf image >\"$2\"");
    agent = agent_after_import(false, &engine);
    ck_assert(exists(image));
    ck_assert_int_eq(entries(workdir), 1);
    ck_assert_int_eq(kill(engine, SIGTERM), 0);
    ck_assert(ended(engine));
    ck_assert(exists(image));
    ck_assert_int_eq(kill(agent, SIGTERM), 0);
    ck_assert_int_eq(waitpid(agent, &st, 0), agent);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "agent status %#x", st);
    ck_assert(!exists(workdir));
}
END_TEST

/* The agent's own SIGHUP handler (on_plugin_gone) still runs after the
 * import directory is gone; a signal the agent ignores stays ignored. */
START_TEST(test_stop_passed_on)
{
    pid_t agent, engine;
    int st;

    write_importer("printf image >\"$2\"");
    agent = agent_after_import(true, &engine);
    ck_assert_int_eq(kill(agent, SIGINT), 0);
    usleep(100000);
    ck_assert_int_eq(waitpid(agent, &st, WNOHANG), 0);
    ck_assert(exists(image));
    ck_assert_int_eq(kill(agent, SIGHUP), 0);
    ck_assert_int_eq(waitpid(agent, &st, 0), agent);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 42, "agent status %#x", st);
    ck_assert(!exists(workdir));
}
END_TEST

/* An importer that closes its output and runs on is still stopped at the
 * deadline (less the margin). */
START_TEST(test_deadline_detached_output)
{
    char err[SH_IMPORT_ERR_MAX];
    int64_t t0 = sh_now_ns();

    write_importer("exec >/dev/null 2>&1\nsleep 60");
    ck_assert_int_eq(sh_import_run(&cfg, user, &ref, workdir, image, t0 + 2000000000LL, err,
                                   sizeof(err)), -1);
    ck_assert_msg(strstr(err, "did not finish within the staging deadline") != NULL, "%s", err);
    ck_assert_int_lt(sh_now_ns() - t0, 10000000000LL);
    ck_assert(!exists(workdir));
}
END_TEST

static Suite *import_suite(void)
{
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_paths);
    tcase_add_test(tc, test_success_prunes);
    tcase_add_test(tc, test_importer_mask);
    tcase_add_test(tc, test_failure_removes);
    tcase_add_test(tc, test_failure_no_room);
    tcase_add_test(tc, test_stop_during_import);
    tcase_add_test(tc, test_stop_after_import);
    tcase_add_test(tc, test_stop_passed_on);
    tcase_add_test(tc, test_deadline_detached_output);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sh_check_run(import_suite());
}
