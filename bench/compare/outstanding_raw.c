/* Raw MPI's own cost per message with n messages outstanding at once between two ranks:
 * the baseline of `soak outstanding` (examples/soak.rs), which measures Starling's.
 *
 * Rank 0 sends n messages of 8 bytes to rank 1, each on its own tag (0 .. n-1), as the
 * soak's `Variable<u64>` handles do; all are outstanding at once:
 *   posted  every receive posted before the first send (a barrier between);
 *   early   every message sent (and completed) before the first receive is posted;
 *   mixed   both ranks post at once.
 * A round is timed from a barrier to the last completion and a second barrier, on both
 * ranks (rank 0 prints). Rounds alternate between the sizes; the median per size and the
 * ratio of the largest to the smallest are printed.
 *
 *   mpicc -O2 -o outstanding_raw bench/compare/outstanding_raw.c
 *   mpirun -n 2 ./outstanding_raw 1000,100000 5
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mode { POSTED, EARLY, MIXED };
static const char *names[] = {"posted", "early", "mixed"};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double round_once(int me, enum mode m, int n, unsigned long long *buf, MPI_Request *reqs) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int post_recvs = me == 1, post_sends = me == 0;
    if (m == POSTED) {
        if (me == 1) {
            for (int i = 0; i < n; i++)
                MPI_Irecv(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 0, i, MPI_COMM_WORLD, &reqs[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (me == 0) {
            for (int i = 0; i < n; i++)
                MPI_Isend(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 1, i, MPI_COMM_WORLD, &reqs[i]);
        }
    } else if (m == EARLY) {
        if (me == 0) {
            for (int i = 0; i < n; i++)
                MPI_Isend(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 1, i, MPI_COMM_WORLD, &reqs[i]);
            MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (me == 1) {
            for (int i = 0; i < n; i++)
                MPI_Irecv(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 0, i, MPI_COMM_WORLD, &reqs[i]);
        }
    } else {
        for (int i = 0; i < n; i++) {
            if (post_sends)
                MPI_Isend(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 1, i, MPI_COMM_WORLD, &reqs[i]);
            if (post_recvs)
                MPI_Irecv(&buf[i], 1, MPI_UNSIGNED_LONG_LONG, 0, i, MPI_COMM_WORLD, &reqs[i]);
        }
    }
    if (me <= 1 && (m != EARLY || me == 1))
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (me == 0) fprintf(stderr, "run with mpirun -n 2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int sizes[16], nsizes = 0, rounds = argc > 2 ? atoi(argv[2]) : 5;
    char list[256];
    snprintf(list, sizeof list, "%s", argc > 1 ? argv[1] : "1000,100000");
    for (char *s = strtok(list, ","); s && nsizes < 16; s = strtok(NULL, ",")) sizes[nsizes++] = atoi(s);
    int most = 0;
    for (int k = 0; k < nsizes; k++) most = sizes[k] > most ? sizes[k] : most;
    unsigned long long *buf = calloc((size_t)most, sizeof *buf);
    MPI_Request *reqs = malloc((size_t)most * sizeof *reqs);
    double *t = malloc(sizeof(double) * (size_t)rounds * (size_t)nsizes);
    for (int m = POSTED; m <= MIXED; m++) {
        for (int k = 0; k < nsizes; k++) round_once(me, m, sizes[k], buf, reqs); /* warm-up */
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < nsizes; k++)
                t[k * rounds + r] = round_once(me, m, sizes[k], buf, reqs) / sizes[k] * 1e9;
        if (me == 0) {
            printf("outstanding_raw %s:", names[m]);
            double first = 0;
            for (int k = 0; k < nsizes; k++) {
                qsort(&t[k * rounds], (size_t)rounds, sizeof(double), cmp);
                double med = t[k * rounds + rounds / 2];
                if (k == 0) first = med;
                printf(" %d: %.0f ns/msg", sizes[k], med);
                if (k > 0) printf(" (%.2fx)", med / first);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    free(t);
    free(reqs);
    free(buf);
    MPI_Finalize();
    return 0;
}
