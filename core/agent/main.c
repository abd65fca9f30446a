/* stagehand-agent: per-node staging agent started by the job prolog. */
#include "config.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("stagehand-agent %s\n", SH_VERSION);
            return 0;
        }
    }
    fprintf(stderr, "stagehand-agent: must be started by the stagehand SPANK plugin\n");
    return 2;
}
