/* Cluster test helper: MPI hello plus a broadcast of @mib MiB from rank 0,
 * verified on every rank. Prints one line per rank and "bcast ok" on rank 0.
 * Usage: mpi_bcast_check [MiB]   (default 256) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank = 0, size = 0, bad = 0, total_bad = 0;
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256;
    size_t len = mib << 20;
    const size_t chunk = (size_t)1 << 26; /* MPI counts are int: 64 MiB pieces */
    char host[256];
    unsigned char *buf;
    double t0, t1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof(host));
    printf("hello from rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    buf = malloc(len > 0 ? len : 1);
    if (buf == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (size_t i = 0; i < len; i++)
        buf[i] = rank == 0 ? (unsigned char)(i * 131u + 7u) : 0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        MPI_Bcast(buf + off, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    t1 = MPI_Wtime();
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != (unsigned char)(i * 131u + 7u)) {
            bad = 1;
            break;
        }
    }
    MPI_Reduce(&bad, &total_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total_bad == 0)
            printf("bcast ok: %zu MiB to %d ranks in %.3f s\n", mib, size, t1 - t0);
        else
            printf("bcast CORRUPT on %d ranks\n", total_bad);
    }
    free(buf);
    MPI_Finalize();
    return total_bad == 0 ? 0 : 1;
}
