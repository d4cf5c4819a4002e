//! The dense tile kernels of the Cholesky factorization on a device: cuBLAS's GEMM, SYRK
//! and TRSM, and cuSOLVER's POTRF, on square column-major tiles (`n × n`, leading
//! dimension `n`), with the semantics of the CPU kernels of `examples/cholesky.rs`.

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys as blas;
use cudarc::cusolver::DnHandle;
use cudarc::cusolver::sys as solver;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use crate::device::check_len;
use crate::probe::{self, Lib};
use crate::{Device, GpuError};

/// cuBLAS and cuSOLVER handles bound to one device's stream.
#[derive(Debug)]
pub struct Blas {
    device: Device,
    blas: CudaBlas,
    solver: DnHandle,
    /// POTRF's workspace, grown on demand.
    work: Option<CudaSlice<f64>>,
    /// POTRF's result code on the device.
    info: CudaSlice<i32>,
}

/// `n` as the `int` the libraries take.
fn dim(n: usize) -> Result<i32, GpuError> {
    i32::try_from(n).map_err(|_| GpuError::LengthMismatch {
        expected: i32::MAX as usize,
        got: n,
    })
}

/// Checks that every tile holds `n · n` elements.
fn square(n: usize, lens: &[usize]) -> Result<i32, GpuError> {
    let nn = n.checked_mul(n).ok_or(GpuError::LengthMismatch {
        expected: usize::MAX,
        got: n,
    })?;
    for &len in lens {
        check_len(nn, len)?;
    }
    dim(n)
}

impl Blas {
    /// Creates the handles on `device`'s stream.
    ///
    /// # Errors
    /// [`GpuError::MissingLibrary`] or [`GpuError::UntriedLibrary`] when cuBLAS or
    /// cuSOLVER cannot be loaded (checked first with [`probe::require`]: `cudarc` would
    /// panic); [`GpuError::Cublas`],
    /// [`GpuError::Cusolver`] or [`GpuError::Driver`] when a handle cannot be created.
    pub fn new(device: &Device) -> Result<Self, GpuError> {
        probe::require(&[Lib::Cublas, Lib::Cusolver])?;
        let stream = device.stream().clone();
        Ok(Self {
            device: device.clone(),
            blas: CudaBlas::new(stream.clone())?,
            solver: DnHandle::new(stream)?,
            work: None,
            info: device.alloc_zeros(1)?,
        })
    }

    /// GEMM: `c ← c − a·bᵀ`.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when a tile is not `n × n`; [`GpuError::Cublas`].
    pub fn gemm(
        &self,
        n: usize,
        a: &CudaSlice<f64>,
        b: &CudaSlice<f64>,
        c: &mut CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = square(n, &[a.len(), b.len(), c.len()])?;
        let stream = self.device.stream();
        let (alpha, beta) = (-1.0f64, 1.0f64);
        let (pa, _ga) = a.device_ptr(stream);
        let (pb, _gb) = b.device_ptr(stream);
        let (pc, _gc) = c.device_ptr_mut(stream);
        // SAFETY: the handle is bound to `stream`, on which the three tiles are ordered
        // (the guards record that use); each holds n*n doubles (checked), the scalars
        // are host values (the default pointer mode) that outlive the call.
        unsafe {
            blas::cublasDgemm_v2(
                *self.blas.handle(),
                blas::cublasOperation_t::CUBLAS_OP_N,
                blas::cublasOperation_t::CUBLAS_OP_T,
                n,
                n,
                n,
                &alpha,
                pa as *const f64,
                n,
                pb as *const f64,
                n,
                &beta,
                pc as *mut f64,
                n,
            )
        }
        .result()?;
        Ok(())
    }

    /// SYRK: `c ← c − a·aᵀ`, on the lower triangle of `c` only.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when a tile is not `n × n`; [`GpuError::Cublas`].
    pub fn syrk(
        &self,
        n: usize,
        a: &CudaSlice<f64>,
        c: &mut CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = square(n, &[a.len(), c.len()])?;
        let stream = self.device.stream();
        let (alpha, beta) = (-1.0f64, 1.0f64);
        let (pa, _ga) = a.device_ptr(stream);
        let (pc, _gc) = c.device_ptr_mut(stream);
        // SAFETY: as in `gemm`.
        unsafe {
            blas::cublasDsyrk_v2(
                *self.blas.handle(),
                blas::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                blas::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                &alpha,
                pa as *const f64,
                n,
                &beta,
                pc as *mut f64,
                n,
            )
        }
        .result()?;
        Ok(())
    }

    /// TRSM: `b ← b·L⁻ᵀ` for the lower triangle `L` of `l`.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when a tile is not `n × n`; [`GpuError::Cublas`].
    pub fn trsm(
        &self,
        n: usize,
        l: &CudaSlice<f64>,
        b: &mut CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = square(n, &[l.len(), b.len()])?;
        let stream = self.device.stream();
        let alpha = 1.0f64;
        let (pl, _gl) = l.device_ptr(stream);
        let (pb, _gb) = b.device_ptr_mut(stream);
        // SAFETY: as in `gemm`.
        unsafe {
            blas::cublasDtrsm_v2(
                *self.blas.handle(),
                blas::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
                blas::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                blas::cublasOperation_t::CUBLAS_OP_T,
                blas::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
                n,
                n,
                &alpha,
                pl as *const f64,
                n,
                pb as *mut f64,
                n,
            )
        }
        .result()?;
        Ok(())
    }

    /// POTRF queued on the stream, not waited for: returns the device buffer that will
    /// hold cuSOLVER's result code (`info`, 0 when the tile was positive definite), for
    /// [`Kernels::defer_check`](crate::runtime::Kernels::defer_check).
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when the tile is not `n × n`; [`GpuError::Cusolver`];
    /// [`GpuError::Driver`].
    pub fn potrf_async(
        &mut self,
        n: usize,
        a: &mut CudaSlice<f64>,
    ) -> Result<CudaSlice<i32>, GpuError> {
        let mut info = self.device.alloc_zeros::<i32>(1)?;
        self.potrf_into(n, a, &mut info)?;
        Ok(info)
    }

    /// POTRF: the lower triangle of `a` becomes its Cholesky factor `L` (`a = L·Lᵀ`); the
    /// strict upper triangle is left as it was. Waits for the result code.
    ///
    /// # Errors
    /// [`GpuError::NotPositiveDefinite`]; [`GpuError::LengthMismatch`] when the tile is not
    /// `n × n`; [`GpuError::Cusolver`]; [`GpuError::Driver`].
    pub fn potrf(&mut self, n: usize, a: &mut CudaSlice<f64>) -> Result<(), GpuError> {
        let mut info = core::mem::replace(&mut self.info, self.device.alloc_zeros(1)?);
        self.potrf_into(n, a, &mut info)?;
        self.info = info;
        let info = self.device.download(&self.info)?;
        match info.first().copied().unwrap_or(0) {
            0 => Ok(()),
            i if i > 0 => Err(GpuError::NotPositiveDefinite(i)),
            i => Err(GpuError::Cusolver(format!(
                "potrf: argument {} is invalid",
                -i
            ))),
        }
    }

    /// Queues POTRF of `a`, its result code into `info`.
    fn potrf_into(
        &mut self,
        n: usize,
        a: &mut CudaSlice<f64>,
        info: &mut CudaSlice<i32>,
    ) -> Result<(), GpuError> {
        let n32 = square(n, &[a.len()])?;
        let stream = self.device.stream().clone();
        let lower = solver::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
        let mut lwork: i32 = 0;
        {
            let (pa, _ga) = a.device_ptr_mut(&stream);
            // SAFETY: the handle is bound to `stream`; the call only reads the sizes and
            // writes one int through a valid pointer.
            unsafe {
                solver::cusolverDnDpotrf_bufferSize(
                    self.solver.cu(),
                    lower,
                    n32,
                    pa as *mut f64,
                    n32,
                    &mut lwork,
                )
            }
            .result()?;
        }
        let lwork_len = usize::try_from(lwork).unwrap_or(0).max(1);
        if self.work.as_ref().is_none_or(|w| w.len() < lwork_len) {
            self.work = Some(self.device.alloc_zeros(lwork_len)?);
        }
        let Some(work) = self.work.as_mut() else {
            unreachable!("the workspace was just allocated");
        };
        {
            let (pa, _ga) = a.device_ptr_mut(&stream);
            let (pw, _gw) = work.device_ptr_mut(&stream);
            let (pi, _gi) = info.device_ptr_mut(&stream);
            // SAFETY: the tile holds n*n doubles (checked), the workspace at least lwork
            // doubles, `info` one int; all are ordered on the handle's stream.
            unsafe {
                solver::cusolverDnDpotrf(
                    self.solver.cu(),
                    lower,
                    n32,
                    pa as *mut f64,
                    n32,
                    pw as *mut f64,
                    lwork,
                    pi as *mut i32,
                )
            }
            .result()?;
        }
        Ok(())
    }
}
