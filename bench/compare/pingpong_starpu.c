/* StarPU-MPI ping-pong between ranks 0 and 1 on a registered vector of `size` bytes.
 *
 *   mpirun -n 2 pingpong_starpu -mode sync|detached -reps R -sizes S1,S2,... -iters I1,I2,...
 *
 * sync:     starpu_mpi_send / starpu_mpi_recv, blocking, alternating;
 * detached: every round trip submitted up front with starpu_mpi_isend_detached /
 *           starpu_mpi_irecv_detached (distinct tags, ordered by StarPU's implicit
 *           dependencies on the handle), then starpu_mpi_wait_for_all (inside the timing).
 *
 * For each size, half round trip = time(I round trips) / (2 I); one sample per
 * repetition after one discarded warm-up repetition. The workers are left running (they
 * spin in this Debian build), as in any application with tasks. */
#include <starpu_mpi.h>

#include "common.h"

static void pingpong(int rank, int detached, size_t size, long iters, long reps)
{
	char *buf = calloc(size ? size : 1, 1);
	starpu_data_handle_t h;
	starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, size, 1);
	char name[32];
	size_name(size, name, sizeof name);
	int other = 1 - rank;
	for (long rep = 0; rep <= reps; rep++) {
		starpu_mpi_barrier(MPI_COMM_WORLD);
		double t0 = now_us();
		for (long i = 0; i < iters; i++) {
			int ta = (int)(2 * i), tb = (int)(2 * i + 1);
			if (detached) {
				if (rank == 0) {
					starpu_mpi_isend_detached(h, other, ta, MPI_COMM_WORLD, NULL, NULL);
					starpu_mpi_irecv_detached(h, other, tb, MPI_COMM_WORLD, NULL, NULL);
				} else {
					starpu_mpi_irecv_detached(h, other, ta, MPI_COMM_WORLD, NULL, NULL);
					starpu_mpi_isend_detached(h, other, tb, MPI_COMM_WORLD, NULL, NULL);
				}
			} else {
				MPI_Status st;
				if (rank == 0) {
					starpu_mpi_send(h, other, ta, MPI_COMM_WORLD);
					starpu_mpi_recv(h, other, tb, MPI_COMM_WORLD, &st);
				} else {
					starpu_mpi_recv(h, other, ta, MPI_COMM_WORLD, &st);
					starpu_mpi_send(h, other, tb, MPI_COMM_WORLD);
				}
			}
		}
		if (detached)
			starpu_mpi_wait_for_all(MPI_COMM_WORLD);
		double half = (now_us() - t0) / (2.0 * iters);
		if (rank == 0 && rep > 0)
			sample("pingpong", detached ? "starpu_detached" : "starpu_sendrecv", name, half, "us");
	}
	starpu_data_unregister(h);
	free(buf);
}

int main(int argc, char **argv)
{
	int ret = starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, NULL);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_init_conf");
	int rank;
	starpu_mpi_comm_rank(MPI_COMM_WORLD, &rank);
	long reps = arg_long(argc, argv, "-reps", 5);
	int detached = strcmp(arg_str(argc, argv, "-mode", "sync"), "detached") == 0;
	long sizes[16], iters[16];
	int n = arg_list(argc, argv, "-sizes", sizes, 16);
	if (n == 0 || arg_list(argc, argv, "-iters", iters, 16) != n) {
		fprintf(stderr, "pingpong_starpu: give as many -iters as -sizes\n");
		return 2;
	}
	for (int s = 0; s < n; s++)
		pingpong(rank, detached, (size_t)sizes[s], iters[s], reps);
	starpu_mpi_shutdown();
	return 0;
}
