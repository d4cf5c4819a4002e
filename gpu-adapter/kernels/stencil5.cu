// Starling's stencil kernels (compiled at run time by NVRTC; `stencil5.ptx` is the same
// source compiled by NVRTC 12.6 for compute_52, loaded when NVRTC is not installed).
// Each update adds in the order of the CPU code, (c + l + r + u + d) / 5, with no
// multiplication, so the results are bit for bit those of the CPU.

// One cell of the handbook's stencil5: c <- (c + l + r + u + d) / 5.
extern "C" __global__ void stencil5_cell(double *c, const double *l, const double *r,
                                         const double *u, const double *d) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        c[0] = (c[0] + l[0] + r[0] + u[0] + d[0]) / 5.0;
    }
}

// One Jacobi sweep over an nx x ny grid stored by rows (cell (x, y) at x * ny + y):
// every inner cell becomes (c + left + right + up + down) / 5; border cells are copied.
extern "C" __global__ void stencil5_grid(const double *in, double *out, int nx, int ny) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long n = (long long)nx * ny;
    if (i >= n) {
        return;
    }
    int x = (int)(i / ny);
    int y = (int)(i % ny);
    if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
        out[i] = in[i];
    } else {
        out[i] = (in[i] + in[i - 1] + in[i + 1] + in[i - ny] + in[i + ny]) / 5.0;
    }
}
