/* Raw MPI ping-pong between ranks 0 and 1: MPI_Send / MPI_Recv of `size` bytes.
 *
 *   mpirun -n 2 pingpong_raw -reps R -sizes S1,S2,... -iters I1,I2,...
 *
 * For each size, half round trip = time(I round trips) / (2 I), one sample per
 * repetition after one discarded warm-up repetition. */
#include <mpi.h>

#include "common.h"

static void pingpong(int rank, size_t size, long iters, long reps)
{
	char *buf = calloc(size ? size : 1, 1);
	char name[32];
	size_name(size, name, sizeof name);
	int other = 1 - rank;
	for (long rep = 0; rep <= reps; rep++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = now_us();
		for (long i = 0; i < iters; i++) {
			if (rank == 0) {
				MPI_Send(buf, (int)size, MPI_BYTE, other, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)size, MPI_BYTE, other, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)size, MPI_BYTE, other, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)size, MPI_BYTE, other, 2, MPI_COMM_WORLD);
			}
		}
		double half = (now_us() - t0) / (2.0 * iters);
		if (rank == 0 && rep > 0)
			sample("pingpong", "raw_mpi", name, half, "us");
	}
	free(buf);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	long reps = arg_long(argc, argv, "-reps", 5);
	long sizes[16], iters[16];
	int n = arg_list(argc, argv, "-sizes", sizes, 16);
	if (n == 0 || arg_list(argc, argv, "-iters", iters, 16) != n) {
		fprintf(stderr, "pingpong_raw: give as many -iters as -sizes\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int s = 0; s < n; s++)
		pingpong(rank, (size_t)sizes[s], iters[s], reps);
	MPI_Finalize();
	return 0;
}
