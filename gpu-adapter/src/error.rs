//! The adapter's errors: what is missing (driver, device, libraries) and what failed.

use cudarc::driver::{DriverError, sys::CUresult};
use starling_core::coherence::CoherenceError;

use crate::probe::{ApiLevel, Lib};

/// Why a GPU operation could not be done.
///
/// The variants up to [`NoCusolver`](Self::NoCusolver), with
/// [`MissingLibrary`](Self::MissingLibrary) and [`UntriedLibrary`](Self::UntriedLibrary),
/// say that something this machine lacks: [`probe`](crate::probe()) and
/// [`probe::require`](crate::probe::require) return them instead of letting `cudarc`
/// panic ([`missing_library`](Self::missing_library) tells them apart). The others report
/// a failure of a call that could be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The CUDA driver library (`libcuda.so`) could not be loaded: this machine has no
    /// NVIDIA driver (or it is not on the loader's path). Run on a machine with a GPU, or
    /// use the CPU implementations.
    #[error(
        "no CUDA driver: libcuda could not be loaded (no NVIDIA driver on this machine, or it is not on the library path)"
    )]
    NoDriver,
    /// The driver is loaded but reports no CUDA device (`CUDA_ERROR_NO_DEVICE`, or a
    /// count of 0): a driver without a GPU, or devices hidden by `CUDA_VISIBLE_DEVICES`.
    #[error("no CUDA device: the CUDA driver is loaded but reports no GPU")]
    NoDevice,
    /// The NVRTC library (`libnvrtc.so`) could not be loaded, so kernels cannot be compiled
    /// at run time. Install the toolkit's NVRTC (or the `nvidia-cuda-nvrtc-cu12` wheel)
    /// and put it on `LD_LIBRARY_PATH`.
    ///
    /// This crate now returns [`MissingLibrary`](Self::MissingLibrary) or
    /// [`UntriedLibrary`](Self::UntriedLibrary), which name what was tried; this variant
    /// and the next two stay for callers that still match on them.
    #[error(
        "no NVRTC: libnvrtc could not be loaded, so kernels cannot be compiled at run time (install CUDA's NVRTC and add it to LD_LIBRARY_PATH)"
    )]
    NoNvrtc,
    /// The cuBLAS library (`libcublas.so`) could not be loaded: the dense kernels (GEMM,
    /// SYRK, TRSM) are unavailable. Install CUDA's cuBLAS and add it to `LD_LIBRARY_PATH`.
    #[error(
        "no cuBLAS: libcublas could not be loaded (install CUDA's cuBLAS and add it to LD_LIBRARY_PATH)"
    )]
    NoCublas,
    /// The cuSOLVER library (`libcusolver.so`) could not be loaded: the Cholesky factor
    /// (POTRF) of a tile is unavailable on the device. Install CUDA's cuSOLVER and add it
    /// to `LD_LIBRARY_PATH`.
    #[error(
        "no cuSOLVER: libcusolver could not be loaded (install CUDA's cuSOLVER and add it to LD_LIBRARY_PATH)"
    )]
    NoCusolver,
    /// A CUDA library could not be loaded under any name this build tries, nor under a
    /// versioned name (`libX.so.13`, `.so.12`, `.so.11`): it is not installed, or not on
    /// the loader's path. Install it and add its directory to `LD_LIBRARY_PATH`.
    #[error(
        "{} ({lib}) not found: none of {} loads (install it and add its directory to LD_LIBRARY_PATH)",
        .lib.product(),
        .tried.join(", ")
    )]
    MissingLibrary {
        /// Which library.
        lib: Lib,
        /// Every name tried, in order.
        tried: Vec<String>,
    },
    /// A CUDA library is present only under a name this build's `cudarc` does not try
    /// (`libcublas.so.13` with the CUDA 12 build, which stops at `.so.12`). Build with the
    /// feature `needs` names (`cuda-13` for CUDA 13), or make an unversioned link
    /// (`libcublas.so`) to the file on `LD_LIBRARY_PATH`.
    #[error(
        "{} ({lib}) is only present as {found}, a name this build ({built}) does not load: build for the {needs} with {}, or put a link {lib}{} to it on LD_LIBRARY_PATH",
        .lib.product(),
        .needs.how_to_build(),
        std::env::consts::DLL_SUFFIX
    )]
    UntriedLibrary {
        /// Which library.
        lib: Lib,
        /// The name it loads under.
        found: String,
        /// This build's API level.
        built: ApiLevel,
        /// The API level whose names include `found`.
        needs: ApiLevel,
    },
    /// GPUs are switched off by configuration (`STARLING_NCUDA=0`).
    #[error("CUDA devices are disabled (STARLING_NCUDA=0)")]
    Disabled,
    /// A device number at or above the number of devices.
    #[error("CUDA device {device} does not exist: the driver reports {count} device(s)")]
    DeviceOutOfRange {
        /// The device asked for.
        device: usize,
        /// How many devices there are.
        count: usize,
    },
    /// A CUDA driver call failed (out of memory, a launch failure, ...): the driver's
    /// error name and description.
    #[error("CUDA driver error: {0}")]
    Driver(String),
    /// NVRTC could not compile a kernel source: the compiler's log.
    #[error("NVRTC could not compile the {module} kernels: {log}")]
    Compile {
        /// Which kernel module.
        module: &'static str,
        /// The compiler's message and log.
        log: String,
    },
    /// A cuBLAS call failed: its status.
    #[error("cuBLAS error: {0}")]
    Cublas(String),
    /// A cuSOLVER call failed: its status.
    #[error("cuSOLVER error: {0}")]
    Cusolver(String),
    /// POTRF found that the leading minor of this order (1-based) is not positive
    /// definite: the tile has no Cholesky factor.
    #[error("potrf: the leading minor of order {0} is not positive definite")]
    NotPositiveDefinite(i32),
    /// A copy between buffers of different lengths (in elements), or a tile whose shape
    /// does not fit the operation.
    #[error("buffer size mismatch: expected {expected} elements, got {got}")]
    LengthMismatch {
        /// Elements expected.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// The task cannot run on a device: a SCRATCH access, an interface other than
    /// `Variable`, `Vector`, `Matrix` or `Block` of `f64`, or one handle accessed twice.
    /// Its CPU implementation runs instead, when it has one.
    #[error("not supported on a CUDA device: {0}")]
    Unsupported(&'static str),
    /// The replica state machine refused an input (a bug in the caller's pairing of
    /// acquisitions and releases).
    #[error("replica coherence: {0}")]
    Coherence(#[from] CoherenceError),
}

impl GpuError {
    /// The library whose absence this error reports: `Some` for
    /// [`NoDriver`](Self::NoDriver), [`NoNvrtc`](Self::NoNvrtc),
    /// [`NoCublas`](Self::NoCublas), [`NoCusolver`](Self::NoCusolver),
    /// [`MissingLibrary`](Self::MissingLibrary) and
    /// [`UntriedLibrary`](Self::UntriedLibrary); `None` for every other error.
    pub fn missing_library(&self) -> Option<Lib> {
        match self {
            Self::NoDriver => Some(Lib::Driver),
            Self::NoNvrtc => Some(Lib::Nvrtc),
            Self::NoCublas => Some(Lib::Cublas),
            Self::NoCusolver => Some(Lib::Cusolver),
            Self::MissingLibrary { lib, .. } | Self::UntriedLibrary { lib, .. } => Some(*lib),
            _ => None,
        }
    }
}

impl From<DriverError> for GpuError {
    fn from(e: DriverError) -> Self {
        if e.0 == CUresult::CUDA_ERROR_NO_DEVICE {
            return Self::NoDevice;
        }
        match e.error_name() {
            Ok(name) => Self::Driver(format!(
                "{} ({})",
                name.to_string_lossy(),
                e.error_string()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )),
            Err(_) => Self::Driver(format!("{:?}", e.0)),
        }
    }
}

impl From<cudarc::cublas::result::CublasError> for GpuError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        Self::Cublas(format!("{:?}", e.0))
    }
}

impl From<cudarc::cusolver::result::CusolverError> for GpuError {
    fn from(e: cudarc::cusolver::result::CusolverError) -> Self {
        Self::Cusolver(format!("{:?}", e.0))
    }
}
