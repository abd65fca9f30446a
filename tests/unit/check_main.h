/* Shared runner for the Check unit-test programs: run @s, print Check's
 * summary ("NN%: Checks: N, Failures: F, Errors: E", which tests/run.sh
 * counts) and turn it into the process exit status. */
#ifndef STAGEHAND_CHECK_MAIN_H
#define STAGEHAND_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

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

#endif
