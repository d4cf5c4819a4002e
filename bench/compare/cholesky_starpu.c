/* Right-looking tiled Cholesky (A = L L^T, lower, double) with starpu_mpi_task_insert, the
 * tile kernels calling OpenBLAS (dpotrf_, cblas_dtrsm, cblas_dsyrk, cblas_dgemm); the same
 * algorithm, matrix, distribution, priorities and flushes as Starling's
 * examples/cholesky.rs:
 *
 *   A = H + n I (H the Hilbert matrix), tiles nb x nb column-major, lower tiles only,
 *   2-D block-cyclic over a P x Q grid, P the largest divisor of the ranks not above
 *   their square root (1 x 2 for 2 ranks): tile (m, k) on rank (m mod P) Q + k mod Q;
 *   for k: POTRF(kk), TRSM(mk) m > k, flush(kk), SYRK(nn) n > k, GEMM(mn) m > n > k,
 *   flush(mk); priorities 2NT-2k, 2NT-2k-m, 2NT-2k-2n, 2NT-2k-m-n.
 *
 *   mpirun -n 2 cholesky_starpu -n 4096 -nb 512 [-check]
 *
 * One factorization per launch, timed on rank 0 between two barriers (registration and
 * start-up excluded); GFlop/s = n^3/3 / time. -check gathers L on rank 0 and checks
 * ||A - L L^T||_F / ||A||_F < 1e-10 (slow for large n). */
#include <cblas.h>
#include <math.h>
#include <starpu_mpi.h>

#include "common.h"

extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);

static double element(int n, int i, int j)
{
	double h = 1.0 / (i + j + 1);
	return i == j ? h + n : h;
}

static void potrf_cpu(void *descr[], void *arg)
{
	(void)arg;
	double *a = (double *)STARPU_MATRIX_GET_PTR(descr[0]);
	int nb = (int)STARPU_MATRIX_GET_NX(descr[0]), ld = (int)STARPU_MATRIX_GET_LD(descr[0]), info = 0;
	dpotrf_("L", &nb, a, &ld, &info);
	if (info != 0) {
		fprintf(stderr, "cholesky_starpu: dpotrf info = %d\n", info);
		abort();
	}
}

/* b <- b L^-T */
static void trsm_cpu(void *descr[], void *arg)
{
	(void)arg;
	double *l = (double *)STARPU_MATRIX_GET_PTR(descr[0]);
	double *b = (double *)STARPU_MATRIX_GET_PTR(descr[1]);
	int nb = (int)STARPU_MATRIX_GET_NX(descr[0]);
	cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, nb, nb, 1.0, l,
		    (int)STARPU_MATRIX_GET_LD(descr[0]), b, (int)STARPU_MATRIX_GET_LD(descr[1]));
}

/* c <- c - a a^T (lower) */
static void syrk_cpu(void *descr[], void *arg)
{
	(void)arg;
	double *a = (double *)STARPU_MATRIX_GET_PTR(descr[0]);
	double *c = (double *)STARPU_MATRIX_GET_PTR(descr[1]);
	int nb = (int)STARPU_MATRIX_GET_NX(descr[0]);
	cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, nb, nb, -1.0, a, (int)STARPU_MATRIX_GET_LD(descr[0]),
		    1.0, c, (int)STARPU_MATRIX_GET_LD(descr[1]));
}

/* c <- c - a b^T */
static void gemm_cpu(void *descr[], void *arg)
{
	(void)arg;
	double *a = (double *)STARPU_MATRIX_GET_PTR(descr[0]);
	double *b = (double *)STARPU_MATRIX_GET_PTR(descr[1]);
	double *c = (double *)STARPU_MATRIX_GET_PTR(descr[2]);
	int nb = (int)STARPU_MATRIX_GET_NX(descr[0]);
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, nb, nb, nb, -1.0, a, (int)STARPU_MATRIX_GET_LD(descr[0]),
		    b, (int)STARPU_MATRIX_GET_LD(descr[1]), 1.0, c, (int)STARPU_MATRIX_GET_LD(descr[2]));
}

static struct starpu_codelet potrf_cl = {.cpu_funcs = {potrf_cpu}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "potrf"};
static struct starpu_codelet trsm_cl = {.cpu_funcs = {trsm_cpu}, .nbuffers = 2, .modes = {STARPU_R, STARPU_RW}, .name = "trsm"};
static struct starpu_codelet syrk_cl = {.cpu_funcs = {syrk_cpu}, .nbuffers = 2, .modes = {STARPU_R, STARPU_RW}, .name = "syrk"};
static struct starpu_codelet gemm_cl = {.cpu_funcs = {gemm_cpu}, .nbuffers = 3, .modes = {STARPU_R, STARPU_R, STARPU_RW}, .name = "gemm"};

int main(int argc, char **argv)
{
	int ret = starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, NULL);
	STARPU_CHECK_RETURN_VALUE(ret, "starpu_mpi_init_conf");
	int me, size;
	starpu_mpi_comm_rank(MPI_COMM_WORLD, &me);
	starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
	int n = (int)arg_long(argc, argv, "-n", 4096), nb = (int)arg_long(argc, argv, "-nb", 512);
	int check = arg_flag(argc, argv, "-check");
	if (n % nb != 0) {
		fprintf(stderr, "cholesky_starpu: n must be a multiple of nb\n");
		return 2;
	}
	int nt = n / nb, P = 1;
	for (int p = 1; p * p <= size; p++)
		if (size % p == 0)
			P = p;
	int Q = size / P;
	starpu_data_handle_t *h = calloc((size_t)nt * nt, sizeof(*h));
	double **mem = calloc((size_t)nt * nt, sizeof(*mem));
	for (int m = 0; m < nt; m++)
		for (int k = 0; k <= m; k++) {
			int owner = (m % P) * Q + k % Q;
			if (owner == me) {
				double *t = malloc((size_t)nb * nb * sizeof(double));
				for (int j = 0; j < nb; j++)
					for (int i = 0; i < nb; i++)
						t[i + j * nb] = element(n, m * nb + i, k * nb + j);
				mem[m * nt + k] = t;
				starpu_matrix_data_register(&h[m * nt + k], STARPU_MAIN_RAM, (uintptr_t)t, nb, nb, nb, sizeof(double));
			} else {
				starpu_matrix_data_register(&h[m * nt + k], -1, (uintptr_t)NULL, nb, nb, nb, sizeof(double));
			}
			starpu_mpi_data_register(h[m * nt + k], m * nt + k, owner);
		}
#define H(m, k) h[(m) * nt + (k)]
	starpu_mpi_barrier(MPI_COMM_WORLD);
	double t0 = now_us();
	for (int k = 0; k < nt; k++) {
		starpu_mpi_task_insert(MPI_COMM_WORLD, &potrf_cl, STARPU_RW, H(k, k), STARPU_PRIORITY, 2 * nt - 2 * k, 0);
		for (int m = k + 1; m < nt; m++)
			starpu_mpi_task_insert(MPI_COMM_WORLD, &trsm_cl, STARPU_R, H(k, k), STARPU_RW, H(m, k),
					       STARPU_PRIORITY, 2 * nt - 2 * k - m, 0);
		starpu_mpi_cache_flush(MPI_COMM_WORLD, H(k, k));
		for (int j = k + 1; j < nt; j++) {
			starpu_mpi_task_insert(MPI_COMM_WORLD, &syrk_cl, STARPU_R, H(j, k), STARPU_RW, H(j, j),
					       STARPU_PRIORITY, 2 * nt - 2 * k - 2 * j, 0);
			for (int m = j + 1; m < nt; m++)
				starpu_mpi_task_insert(MPI_COMM_WORLD, &gemm_cl, STARPU_R, H(m, k), STARPU_R, H(j, k),
						       STARPU_RW, H(m, j), STARPU_PRIORITY, 2 * nt - 2 * k - m - j, 0);
		}
		for (int m = k + 1; m < nt; m++)
			starpu_mpi_cache_flush(MPI_COMM_WORLD, H(m, k));
	}
	starpu_task_wait_for_all();
	starpu_mpi_barrier(MPI_COMM_WORLD);
	double secs = (now_us() - t0) * 1e-6;
	char param[64];
	snprintf(param, sizeof param, "N=%d,nb=%d", n, nb);
	double flops = (double)n * n * n / 3.0;
	if (me == 0) {
		sample("cholesky", "starpu_openblas", param, flops / secs / 1e9, "GFlop/s");
		printf("factorization: %.1f ms, %.2f GFlop/s\n", secs * 1e3, flops / secs / 1e9);
	}
	int failed = 0;
	if (check) {
		for (int m = 0; m < nt; m++)
			for (int k = 0; k <= m; k++)
				starpu_mpi_get_data_on_node(MPI_COMM_WORLD, H(m, k), 0);
		if (me == 0) {
			double *l = calloc((size_t)n * n, sizeof(double));
			for (int m = 0; m < nt; m++)
				for (int k = 0; k <= m; k++) {
					starpu_data_acquire(H(m, k), STARPU_R);
					double *t = (double *)starpu_data_get_local_ptr(H(m, k));
					for (int j = 0; j < nb; j++)
						for (int i = (m == k ? j : 0); i < nb; i++)
							l[(m * nb + i) + (size_t)(k * nb + j) * n] = t[i + j * nb];
					starpu_data_release(H(m, k));
				}
			double *r = malloc((size_t)n * n * sizeof(double));
			double an = 0, rn = 0;
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++)
					r[i + (size_t)j * n] = element(n, i, j);
			cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, n, n, n, -1.0, l, n, l, n, 1.0, r, n);
			for (size_t i = 0; i < (size_t)n * n; i++) {
				rn += r[i] * r[i];
			}
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++)
					an += element(n, i, j) * element(n, i, j);
			double res = sqrt(rn) / sqrt(an);
			printf("check: ||A - L L^T||_F / ||A||_F = %.3e\n", res);
			failed = !(res < 1e-10);
			free(r);
			free(l);
		}
	}
	for (int i = 0; i < nt * nt; i++)
		if (h[i])
			starpu_data_unregister(h[i]);
	for (int i = 0; i < nt * nt; i++)
		free(mem[i]);
	free(mem);
	free(h);
	starpu_mpi_shutdown();
	return failed;
}
