//! Kernels compiled at run time with NVRTC, or loaded from the PTX shipped with the crate
//! when NVRTC is not installed.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{self, Ptx};

use crate::probe::{self, Lib};
use crate::{Device, GpuError};

/// The CUDA C source of the stencil kernels (`stencil5_cell`, `stencil5_grid`).
pub const STENCIL5_SRC: &str = include_str!("../kernels/stencil5.cu");

/// [`STENCIL5_SRC`] compiled by NVRTC 12.6 (default options, `compute_52`): loaded when
/// NVRTC is missing, so a machine with only a driver still runs the kernels. The test
/// `shipped_ptx_is_the_compiled_source` checks that it is up to date.
pub const STENCIL5_PTX: &str = include_str!("../kernels/stencil5.ptx");

/// Compiles `src` with NVRTC.
///
/// # Errors
/// [`GpuError::MissingLibrary`] or [`GpuError::UntriedLibrary`] when `libnvrtc` cannot be
/// loaded (checked first with [`probe::require`]: `cudarc` would panic);
/// [`GpuError::Compile`] with the compiler's log.
pub fn compile(module: &'static str, src: &str) -> Result<Ptx, GpuError> {
    probe::require(&[Lib::Nvrtc])?;
    nvrtc::compile_ptx(src).map_err(|e| GpuError::Compile {
        module,
        log: match e {
            nvrtc::CompileError::CompileError { nvrtc, log, .. } => {
                format!("{nvrtc:?}: {}", log.to_string_lossy())
            }
            other => format!("{other:?}"),
        },
    })
}

/// The stencil kernels, loaded on one device.
#[derive(Clone, Debug)]
pub struct Stencil {
    device: Device,
    cell: CudaFunction,
    grid: CudaFunction,
    from_nvrtc: bool,
}

impl Stencil {
    /// Compiles [`STENCIL5_SRC`] with NVRTC (or, without NVRTC, takes [`STENCIL5_PTX`])
    /// and loads it on `device`.
    ///
    /// # Errors
    /// [`GpuError::Compile`]; [`GpuError::Driver`] when the module does not load.
    pub fn load(device: &Device) -> Result<Self, GpuError> {
        let (ptx, from_nvrtc) = match compile("stencil5", STENCIL5_SRC) {
            Ok(ptx) => (ptx, true),
            Err(e) if e.missing_library() == Some(Lib::Nvrtc) => {
                (Ptx::from_src(STENCIL5_PTX), false)
            }
            Err(e) => return Err(e),
        };
        let module = device.context().load_module(ptx)?;
        Ok(Self {
            device: device.clone(),
            cell: module.load_function("stencil5_cell")?,
            grid: module.load_function("stencil5_grid")?,
            from_nvrtc,
        })
    }

    /// Whether the kernels were compiled by NVRTC now (else: the shipped PTX).
    pub fn from_nvrtc(&self) -> bool {
        self.from_nvrtc
    }

    /// One cell of the handbook's stencil: `c ← (c + l + r + u + d) / 5`, each a
    /// one-element buffer. Queued on the device's stream.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when a buffer is empty; [`GpuError::Driver`].
    pub fn cell(
        &self,
        c: &mut CudaSlice<f64>,
        neighbours: [&CudaSlice<f64>; 4],
    ) -> Result<(), GpuError> {
        for len in [c.len()]
            .into_iter()
            .chain(neighbours.iter().map(|s| s.len()))
        {
            if len == 0 {
                return Err(GpuError::LengthMismatch {
                    expected: 1,
                    got: 0,
                });
            }
        }
        let [l, r, u, d] = neighbours;
        let stream: &Arc<_> = self.device.stream();
        let mut b = stream.launch_builder(&self.cell);
        b.arg(c).arg(l).arg(r).arg(u).arg(d);
        // SAFETY: the kernel reads one double from each of l, r, u, d and writes one to
        // c; every buffer holds at least one (checked above) and lives on this device.
        unsafe { b.launch(LaunchConfig::for_num_elems(1)) }?;
        Ok(())
    }

    /// One Jacobi sweep of the 5-point stencil over an `nx × ny` grid stored by rows:
    /// `output` gets `(c + left + right + up + down) / 5` for every inner cell and a copy
    /// of every border cell.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when a buffer does not hold `nx · ny` elements or the
    /// grid does not fit the kernel's `int` sizes; [`GpuError::Driver`].
    pub fn grid(
        &self,
        input: &CudaSlice<f64>,
        output: &mut CudaSlice<f64>,
        nx: usize,
        ny: usize,
    ) -> Result<(), GpuError> {
        let n = nx.checked_mul(ny).ok_or(GpuError::LengthMismatch {
            expected: usize::MAX,
            got: input.len(),
        })?;
        crate::device::check_len(n, input.len())?;
        crate::device::check_len(n, output.len())?;
        let too_big = || GpuError::LengthMismatch {
            expected: i32::MAX as usize,
            got: n,
        };
        let (nx32, ny32) = (
            i32::try_from(nx).map_err(|_| too_big())?,
            i32::try_from(ny).map_err(|_| too_big())?,
        );
        let blocks = u32::try_from(n.div_ceil(256)).map_err(|_| too_big())?;
        if n == 0 {
            return Ok(());
        }
        let mut b = self.device.stream().launch_builder(&self.grid);
        b.arg(input).arg(output).arg(&nx32).arg(&ny32);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel reads `in[0..nx*ny)` and writes `out[0..nx*ny)`, and both
        // buffers hold exactly nx*ny doubles (checked above); threads past the end return.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// The CPU reference of [`Stencil::grid`], for checks: one Jacobi sweep.
pub fn stencil5_grid_cpu(input: &[f64], nx: usize, ny: usize) -> Vec<f64> {
    let mut out = input.to_vec();
    for x in 1..nx.saturating_sub(1) {
        for y in 1..ny.saturating_sub(1) {
            let i = x * ny + y;
            out[i] = (input[i] + input[i - 1] + input[i + 1] + input[i - ny] + input[i + ny]) / 5.0;
        }
    }
    out
}
