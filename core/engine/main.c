/* stagehand-bcast: pipelined MPI broadcast of one file to node-local storage. */
#include "config.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("stagehand-bcast %s\n", SH_VERSION);
            return 0;
        }
    }
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 1;
    MPI_Finalize();
    return 0;
}
