/* The handbook's stencil5 (StarPU-MPI chapter, "MPI Insert Task Utility") as a measure of
 * submission cost: one process posing as rank 2 of 1024 (StarPU reads
 * STARPU_MPI_FAKE_RANK=2 STARPU_MPI_FAKE_SIZE=1024 itself), kernels off
 * (STARPU_DISABLE_KERNELS=1), every cell of the X x Y grid registered
 * (starpu_mpi_data_register with the handbook's my_distrib), `niter` sweeps of
 * starpu_mpi_task_insert(RW c, R left, R right, R up, R down).
 *
 *   mpirun -n 1 insert_starpu -x 256 -y 256 -niter 10 -prune 0|1 -reps R
 *
 * -prune 1 adds the handbook's pruning `if` (§ "Pruning MPI Task Insertion"). The sample
 * is the time of the insertion loops alone (starpu_task_wait_for_all follows, untimed) per
 * logical task, niter (X-2) (Y-2).
 *
 * Fake mode skips all communications, but StarPU-MPI 1.3.10 still invalidates its cached
 * copy of a remote neighbour after the owner writes it, and the next task of rank 2 that
 * reads it trips "Handle ... is not initialized" (an assertion). As in the anchor
 * benchmarks, the non-owned handles get an init codelet (starpu_data_set_reduction_methods):
 * its kernel is skipped under STARPU_DISABLE_KERNELS and the insertion path is unchanged. */
#include <math.h>
#include <starpu_mpi.h>

#include "common.h"

static void stencil5_cpu(void *descr[], void *arg)
{
	(void)arg;
	float *c = (float *)STARPU_VARIABLE_GET_PTR(descr[0]);
	float s = *c;
	for (int i = 1; i < 5; i++)
		s += *(float *)STARPU_VARIABLE_GET_PTR(descr[i]);
	*c = s / 5;
}

static struct starpu_codelet stencil5_cl = {
	.cpu_funcs = {stencil5_cpu},
	.nbuffers = 5,
	.modes = {STARPU_RW, STARPU_R, STARPU_R, STARPU_R, STARPU_R},
	.name = "stencil5",
};

static void init_cpu(void *descr[], void *arg)
{
	(void)arg;
	*(float *)STARPU_VARIABLE_GET_PTR(descr[0]) = 0;
}

static struct starpu_codelet init_cl = {
	.cpu_funcs = {init_cpu},
	.nbuffers = 1,
	.modes = {STARPU_W},
	.name = "init",
};

/* The handbook's distribution, verbatim. */
static int my_distrib(int x, int y, int nb_nodes)
{
	return ((int)(x / sqrt(nb_nodes) + (y / sqrt(nb_nodes)) * sqrt(nb_nodes))) % nb_nodes;
}

int main(int argc, char **argv)
{
	int ret = starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, NULL);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_init_conf");
	int me, size;
	starpu_mpi_comm_rank(MPI_COMM_WORLD, &me);
	starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
	int X = (int)arg_long(argc, argv, "-x", 256), Y = (int)arg_long(argc, argv, "-y", 256);
	int niter = (int)arg_long(argc, argv, "-niter", 10);
	int prune = (int)arg_long(argc, argv, "-prune", 0);
	long reps = arg_long(argc, argv, "-reps", 3);
	float *matrix = calloc((size_t)X * Y, sizeof(float));
	starpu_data_handle_t *h = calloc((size_t)X * Y, sizeof(*h));
	for (int x = 0; x < X; x++)
		for (int y = 0; y < Y; y++) {
			int owner = my_distrib(x, y, size);
			starpu_data_handle_t *hh = &h[x * Y + y];
			if (owner == me) {
				starpu_variable_data_register(hh, STARPU_MAIN_RAM, (uintptr_t)&matrix[x * Y + y], sizeof(float));
			} else {
				starpu_variable_data_register(hh, -1, (uintptr_t)NULL, sizeof(float));
				starpu_data_set_reduction_methods(*hh, NULL, &init_cl);
			}
			starpu_mpi_data_register(*hh, x * Y + y, owner);
		}
	char param[96];
	snprintf(param, sizeof param, "%s,grid=%dx%d,niter=%d,fake=%d/%d", prune ? "pruned" : "unpruned", X, Y, niter, me, size);
	double logical = (double)niter * (X - 2) * (Y - 2);
	for (long rep = 0; rep <= reps; rep++) {
		double t0 = now_us();
		for (int loop = 0; loop < niter; loop++)
			for (int x = 1; x < X - 1; x++)
				for (int y = 1; y < Y - 1; y++) {
					if (prune && !(my_distrib(x, y, size) == me || my_distrib(x - 1, y, size) == me
						       || my_distrib(x + 1, y, size) == me || my_distrib(x, y - 1, size) == me
						       || my_distrib(x, y + 1, size) == me))
						continue;
					starpu_mpi_task_insert(MPI_COMM_WORLD, &stencil5_cl,
							       STARPU_RW, h[x * Y + y], STARPU_R, h[(x - 1) * Y + y],
							       STARPU_R, h[(x + 1) * Y + y], STARPU_R, h[x * Y + y - 1],
							       STARPU_R, h[x * Y + y + 1], 0);
				}
		double t = now_us() - t0;
		starpu_task_wait_for_all();
		if (rep > 0)
			sample("insert", "starpu", param, t / logical, "us");
	}
	for (int i = 0; i < X * Y; i++)
		starpu_data_unregister(h[i]);
	free(h);
	free(matrix);
	starpu_mpi_shutdown();
	return 0;
}
