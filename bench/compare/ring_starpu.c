/* The handbook's token ring (StarPU-MPI chapter, "Simple Example"): in each loop every
 * rank receives the token from its left neighbour (starpu_mpi_irecv_detached), increments
 * it in a task, and sends it to its right neighbour (starpu_mpi_isend_detached).
 *
 *   mpirun -n N ring_starpu -niter L -reps R
 *
 * Time per hop = wall time from a barrier before the first hop to a barrier after
 * starpu_task_wait_for_all, / (L N); one sample per repetition after a warm-up one. */
#include <starpu_mpi.h>

#include "common.h"

static unsigned token;
static starpu_data_handle_t token_handle;

static void increment_cpu(void *descr[], void *arg)
{
	(void)arg;
	unsigned *t = (unsigned *)STARPU_VECTOR_GET_PTR(descr[0]);
	(*t)++;
}

static struct starpu_codelet increment_cl = {
	.cpu_funcs = {increment_cpu},
	.nbuffers = 1,
	.modes = {STARPU_RW},
	.name = "increment",
};

static void increment_token(void)
{
	struct starpu_task *task = starpu_task_create();
	task->cl = &increment_cl;
	task->handles[0] = token_handle;
	int ret = starpu_task_submit(task);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_task_submit");
}

int main(int argc, char **argv)
{
	int ret = starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, NULL);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_init_conf");
	int rank, size;
	starpu_mpi_comm_rank(MPI_COMM_WORLD, &rank);
	starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
	unsigned nloops = (unsigned)arg_long(argc, argv, "-niter", 1000);
	long reps = arg_long(argc, argv, "-reps", 3);
	starpu_vector_data_register(&token_handle, STARPU_MAIN_RAM, (uintptr_t)&token, 1, sizeof(unsigned));
	char param[64];
	snprintf(param, sizeof param, "niter=%u,ranks=%d", nloops, size);
	int failed = 0;
	for (long rep = 0; rep <= reps; rep++) {
		unsigned last_loop = nloops - 1, last_rank = size - 1;
		starpu_mpi_barrier(MPI_COMM_WORLD);
		double t0 = now_us();
		for (unsigned loop = 0; loop < nloops; loop++) {
			int tag = loop * size + rank;
			if (loop == 0 && rank == 0) {
				starpu_data_acquire(token_handle, STARPU_W);
				token = 0;
				starpu_data_release(token_handle);
			} else {
				starpu_mpi_irecv_detached(token_handle, (rank + size - 1) % size, tag, MPI_COMM_WORLD, NULL, NULL);
			}
			increment_token();
			if (!(loop == last_loop && rank == (int)last_rank))
				starpu_mpi_isend_detached(token_handle, (rank + 1) % size, tag + 1, MPI_COMM_WORLD, NULL, NULL);
		}
		starpu_task_wait_for_all();
		starpu_mpi_barrier(MPI_COMM_WORLD);
		double per_hop = (now_us() - t0) / ((double)nloops * size);
		if (rank == (int)last_rank) {
			starpu_data_acquire(token_handle, STARPU_R);
			if (token != nloops * size) {
				fprintf(stderr, "ring_starpu: token = %u, expected %u\n", token, nloops * size);
				failed = 1;
			}
			starpu_data_release(token_handle);
		}
		if (rank == 0 && rep > 0)
			sample("ring", "starpu", param, per_hop, "us");
	}
	starpu_data_unregister(token_handle);
	starpu_mpi_shutdown();
	return failed;
}
