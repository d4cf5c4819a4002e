//! CUDA implementations of the examples' codelets, for [`Gpu::codelet`](crate::Gpu::codelet):
//! the four tile kernels of the Cholesky factorization (with the semantics of the CPU
//! kernels of `examples/cholesky.rs`, on square dense tiles) and the stencil's cell update
//! (`examples/stencil5.rs`, bit for bit the CPU's).

use crate::GpuError;
use crate::runtime::{CudaBuffers, DeviceBuf, Shape};

/// The order `n` of a square dense tile (`n × n`, leading dimension `n`).
fn order(b: &DeviceBuf) -> Result<usize, GpuError> {
    match b.shape {
        Shape::Matrix { nx, ny, ld } if nx == ny && ld == nx => Ok(nx),
        _ => Err(GpuError::Unsupported(
            "a tile that is not a square dense Matrix<f64>",
        )),
    }
}

/// POTRF on access 0 (RW): its lower triangle becomes its Cholesky factor.
///
/// # Errors
/// [`GpuError::Unsupported`] for other accesses; the errors of
/// [`Blas::potrf`](crate::blas::Blas::potrf).
pub fn potrf(cb: &mut CudaBuffers<'_>) -> Result<(), GpuError> {
    let [a] = &mut *cb.data else {
        return Err(GpuError::Unsupported("potrf takes one tile"));
    };
    let n = order(a)?;
    let info = cb.kernels.blas()?.potrf_async(n, &mut a.data)?;
    cb.kernels.defer_check(info);
    Ok(())
}

/// TRSM: access 1 (RW) ← access 1 · L⁻ᵀ, `L` the lower triangle of access 0 (R).
///
/// # Errors
/// [`GpuError::Unsupported`] for other accesses; [`GpuError::Cublas`].
pub fn trsm(cb: &mut CudaBuffers<'_>) -> Result<(), GpuError> {
    let [l, b] = &mut *cb.data else {
        return Err(GpuError::Unsupported("trsm takes two tiles"));
    };
    let n = order(l)?;
    cb.kernels.blas()?.trsm(n, &l.data, &mut b.data)
}

/// SYRK: access 1 (RW) ← access 1 − a·aᵀ on its lower triangle, `a` access 0 (R).
///
/// # Errors
/// [`GpuError::Unsupported`] for other accesses; [`GpuError::Cublas`].
pub fn syrk(cb: &mut CudaBuffers<'_>) -> Result<(), GpuError> {
    let [a, c] = &mut *cb.data else {
        return Err(GpuError::Unsupported("syrk takes two tiles"));
    };
    let n = order(a)?;
    cb.kernels.blas()?.syrk(n, &a.data, &mut c.data)
}

/// GEMM: access 2 (RW) ← access 2 − a·bᵀ, `a` and `b` accesses 0 and 1 (R).
///
/// # Errors
/// [`GpuError::Unsupported`] for other accesses; [`GpuError::Cublas`].
pub fn gemm(cb: &mut CudaBuffers<'_>) -> Result<(), GpuError> {
    let [a, b, c] = &mut *cb.data else {
        return Err(GpuError::Unsupported("gemm takes three tiles"));
    };
    let n = order(a)?;
    cb.kernels.blas()?.gemm(n, &a.data, &b.data, &mut c.data)
}

/// The stencil's cell: access 0 (RW) ← (c + l + r + u + d) / 5 over accesses 0 to 4,
/// each a `Variable<f64>`.
///
/// # Errors
/// [`GpuError::Unsupported`] for other accesses; the stencil kernels' errors.
pub fn stencil5_cell(cb: &mut CudaBuffers<'_>) -> Result<(), GpuError> {
    let [c, l, r, u, d] = &mut *cb.data else {
        return Err(GpuError::Unsupported("stencil5 takes five cells"));
    };
    cb.kernels
        .stencil()?
        .cell(&mut c.data, [&l.data, &r.data, &u.data, &d.data])
}
