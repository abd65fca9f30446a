/* Tiny MPI program for the PMIx host test: checks the world size, broadcasts
 * a pattern from rank 0 and verifies it on every rank.
 * Usage: mpi_hello EXPECTED_SIZE [FAIL_RANK]
 * FAIL_RANK exits with status 3 before MPI_Init (a node whose engine fails). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Open MPI 4.1 does not free everything at MPI_Finalize; in sanitizer builds
 * that is not this project's leak to report. (A LeakSanitizer hook: unused
 * in normal builds.) */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "detect_leaks=0";
}

int main(int argc, char **argv)
{
    enum { LEN = 4 << 20 };
    int rank = -1, size = -1, bad = 0, allbad = 0;
    int expect = argc > 1 ? atoi(argv[1]) : -1;
    const char *fail = getenv("PMIX_RANK");
    unsigned char *buf;

    if (argc > 2 && fail != NULL && atoi(argv[2]) == atoi(fail))
        return 3;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 4;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (expect > 0 && size != expect) {
        fprintf(stderr, "mpi_hello: rank %d: world size %d, expected %d\n", rank, size,
                expect);
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
    buf = malloc(LEN);
    if (buf == NULL)
        MPI_Abort(MPI_COMM_WORLD, 6);
    for (int i = 0; i < LEN; i++)
        buf[i] = rank == 0 ? (unsigned char)(i * 31 + 7) : 0;
    MPI_Bcast(buf, LEN, MPI_UNSIGNED_CHAR, 0, MPI_COMM_WORLD);
    for (int i = 0; i < LEN; i++)
        bad |= buf[i] != (unsigned char)(i * 31 + 7);
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi_hello: rank %d of %d: bcast %s\n", rank, size,
           allbad == 0 ? "verified" : "CORRUPT");
    fflush(stdout);
    free(buf);
    MPI_Finalize();
    return allbad == 0 ? 0 : 7;
}
