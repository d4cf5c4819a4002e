/* Empty-task overhead of plain StarPU (no MPI): submit N tasks of an empty CPU codelet
 * with starpu_task_insert, then starpu_task_wait_for_all; time per task, submission and
 * execution together (STARPU_NCPU=1: one worker).
 *
 *   empty_task_starpu -ntasks N -reps R */
#include <starpu.h>

#include "common.h"

static void empty_cpu(void *descr[], void *arg)
{
	(void)descr;
	(void)arg;
}

static struct starpu_codelet empty_cl = {
	.cpu_funcs = {empty_cpu},
	.nbuffers = 0,
	.name = "empty",
};

int main(int argc, char **argv)
{
	int ret = starpu_init(NULL);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_init");
	long ntasks = arg_long(argc, argv, "-ntasks", 100000);
	long reps = arg_long(argc, argv, "-reps", 5);
	char param[64];
	snprintf(param, sizeof param, "ntasks=%ld", ntasks);
	for (long rep = 0; rep <= reps; rep++) {
		double t0 = now_us();
		for (long i = 0; i < ntasks; i++) {
			ret = starpu_task_insert(&empty_cl, 0);
			STARPU_CHECK_RETURN_VALUE(ret, "starpu_task_insert");
		}
		starpu_task_wait_for_all();
		double per_task = (now_us() - t0) / ntasks;
		if (rep > 0)
			sample("empty_task", "starpu", param, per_task, "us");
	}
	starpu_shutdown();
	return 0;
}
