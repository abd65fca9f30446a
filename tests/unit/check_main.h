/* Shared runner for the Check unit-test programs: run @s, print Check's
 * summary ("NN%: Checks: N, Failures: F, Errors: E", which tests/run.sh
 * counts) and turn it into the process exit status. */
#ifndef STAGEHAND_CHECK_MAIN_H
#define STAGEHAND_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static inline int sh_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
