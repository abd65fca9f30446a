/* stagehand-agent: per-node staging agent started by the job prolog. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "stage.h"

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("stagehand-agent %s\n", SH_VERSION);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--prolog") == 0)
        return sh_agent_prolog_main();
    fprintf(stderr, "stagehand-agent: must be started by the stagehand SPANK plugin "
                    "(stagehand-agent --prolog, inputs on stdin)\n");
    return 2;
}
