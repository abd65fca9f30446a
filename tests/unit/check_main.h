/* Shared runner for the Check unit-test programs: run @s, print Check's
 * summary ("NN%: Checks: N, Failures: F, Errors: E", which tests/run.sh
 * counts) and turn it into the process exit status. */
#ifndef STAGEHAND_CHECK_MAIN_H
#define STAGEHAND_CHECK_MAIN_H

#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "stagehand/log.h"

static inline int sh_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static inline void sh_check_drop_line(enum sh_log_level level, const char *line)
{
    (void)level;
    (void)line;
}

/* Check fixture: the code under test logs nothing, unless SH_TEST_VERBOSE=1
 * asks for every line (debug level). */
static inline void sh_check_quiet_logs(void)
{
    if (getenv("SH_TEST_VERBOSE") == NULL)
        sh_log_set_sink(sh_check_drop_line);
    else
        sh_log_set_level(SH_LOG_DEBUG);
}

/* Run the program in a network namespace of its own, with only its loopback
 * up, when it may (root: unshare(2) CLONE_NEWNET; netdevice(7) SIOCSIFFLAGS):
 * tests that listen on fixed 127.0.0.1 ports then cannot meet another test
 * program's agents (the two stacks' package builds run their unit tests at
 * the same time). Without the privilege, the host's loopback is used. Exits
 * the program when the namespace is made but its loopback cannot be set up. */
static inline void sh_check_private_net(void)
{
    struct ifreq ifr;
    int fd;

    if (unshare(CLONE_NEWNET) != 0)
        return;
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP);
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) == 0) {
            close(fd);
            return;
        }
    }
    perror("check: loopback in a new network namespace");
    exit(EXIT_FAILURE);
}

#endif
