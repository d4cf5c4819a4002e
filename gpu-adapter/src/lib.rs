//! `starling-gpu`: Starling's CUDA device, through `cudarc`.
//!
//! `cudarc` is built with **dynamic loading**: `libcuda`, `libnvrtc`, `libcublas` and
//! `libcusolver` are opened at run time, so this crate builds with no CUDA toolkit, no
//! driver and no GPU, and nothing else in the workspace needs one. `cudarc` panics when a
//! library is missing; every entry point here checks first ([`probe::require`]) and
//! returns a typed [`GpuError`] instead: [`GpuError::NoDriver`], [`GpuError::NoDevice`],
//! [`GpuError::MissingLibrary`] (naming the library and every name tried) or
//! [`GpuError::UntriedLibrary`] (present only under a name this build does not load).
//!
//! # API level: `cuda-12` or `cuda-13`
//!
//! One of two exclusive features fixes the CUDA API `cudarc` is built for, and so the
//! oldest driver that works and the file names it tries ([`probe::ApiLevel`]):
//!
//! | feature | `cudarc` | driver | names tried |
//! | --- | --- | --- | --- |
//! | `cuda-12` (default; `starling`'s `cuda`) | `cuda-12060` | CUDA 12.6 or newer | `libX.so`, `libX.so.12`, `libX.so.11`, ... never `libX.so.13` |
//! | `cuda-13` (`starling`'s `cuda-13`) | `cuda-13000` | CUDA 13.0 or newer | `libX.so`, `libX.so.13`, `libX.so.12`, ... |
//!
//! A CUDA 13 installation without the unversioned links (the pip wheels, a runtime-only
//! install) has only `libcublas.so.13` and `libnvrtc.so.13`: build it with `cuda-13`
//! (`cargo build --no-default-features --features cuda-13`, or `starling`'s
//! `--features cuda-13`). The CUDA 12 build says so instead of calling the library
//! missing ([`GpuError::UntriedLibrary`]). cuSOLVER keeps major 12 in CUDA 13, which both
//! levels try. [`probe::report`] lists what was found: the name `cudarc` opens, the file,
//! the version of each library.
//!
//! # What it holds
//!
//! | item | what it does | needs |
//! | --- | --- | --- |
//! | [`probe()`], [`probe::report`], [`probe::require`], [`probe::libraries`], [`probe::device_count`] | what this machine has (devices; each library's name, file and version), never panicking | nothing |
//! | [`Device`] | a device's context and stream; [`upload`](Device::upload) / [`download`](Device::download) of `&[T]` | a device |
//! | [`kernels`] | the stencil kernels, compiled at run time by NVRTC, or the shipped PTX when NVRTC is missing | NVRTC to compile (no GPU); a device to run |
//! | [`blas::Blas`] | cuBLAS GEMM, SYRK, TRSM and cuSOLVER POTRF on square tiles | a device, cuBLAS, cuSOLVER |
//! | [`replicas`] | memory nodes (main memory = node 0, device `d` = node `d + 1`) and a datum's [`Replicated`](replicas::Replicated) copies, kept coherent by the core's [`coherence`](starling_core::coherence) state machine (the reference's MSI protocol) | nothing (any [`Backend`](replicas::Backend); [`Devices`](replicas::Devices) for CUDA) |
//! | [`runtime`] | CUDA implementations of codelets ([`Gpu::codelet`]), one CUDA worker per device, the CPU-or-device [`Policy`] | a device |
//! | [`tiles`] | the CUDA implementations of the examples' codelets (Cholesky tiles, the stencil cell) | a device |
//!
//! # Running codelets on a device
//!
//! ```no_run
//! # use std::sync::Arc;
//! use starling_gpu::{Gpu, GpuError, tiles};
//! use starling_std::interfaces::Matrix;
//! use starling_std::device::Codelet;
//!
//! // STARLING_NCUDA, STARLING_CUDA_POLICY, STARLING_CUDA_CACHE_MB.
//! let gpu = match Gpu::from_env() {
//!     Ok(gpu) => gpu,
//!     Err(e) => return eprintln!("no GPU: {e}"), // a typed error, never a panic
//! };
//! let cpu_potrf = |b: &mut starling_std::device::Buffers<'_>| {
//!     let _tile = b.w::<Matrix<f64>>(0); // ... the CPU factorization ...
//! };
//! let potrf: Codelet = gpu.codelet("potrf", cpu_potrf, tiles::potrf);
//! // ctx.task(&potrf).rw(&tile).submit(); as any codelet
//! # let _ = potrf;
//! ```
//!
//! The [module docs of `pipeline`](pipeline) say how device tasks run without holding a
//! CPU worker (a driver thread per device, an upload stream, compute streams, a window of
//! tasks in flight), how data stay on the device until the host needs them (the runtime
//! asks [`DeviceLayer::to_host`](starling_std::device::DeviceLayer::to_host) before every host
//! access), how device memory is a cache under a budget, and when host memory is pinned.
//! [`fake`] runs the same pipeline with host memory standing for a device, in CI.
//!
//! # Tests and benchmarks
//!
//! `cargo test -p starling-gpu` runs everywhere. Without a GPU, the probe and error tests
//! run, the replica layer is tested over a host-memory backend, and each test that needs a
//! device prints `skipped: no CUDA device (<reason>)`; the kernel-source tests run where
//! `libnvrtc` loads (no GPU needed: `pip install nvidia-cuda-nvrtc-cu12` and put its `lib`
//! directory on `LD_LIBRARY_PATH`). On a machine with a GPU the same command runs the
//! device tests (copies, the stencil kernels against the CPU bit for bit, the tile kernels
//! against their definitions, a tiled Cholesky through the runtime). Then:
//!
//! ```sh
//! bash tests/gpu/examples.sh                       # stencil5 and cholesky with --gpu
//! cargo bench --features cuda --bench gpu          # Cholesky GFlop/s vs cuSOLVER, staging GB/s
//! ```
//!
//! The driver must support the API level built for (CUDA 12.6 with `cuda-12`, 13.0 with
//! `cuda-13`), and the shipped PTX is ISA 8.5 (NVRTC 12.6), which needs a 12.6 driver to
//! load.

#[cfg(all(feature = "cuda-12", feature = "cuda-13"))]
compile_error!(
    "starling-gpu: the features `cuda-12` and `cuda-13` are exclusive (one CUDA API level per build): for CUDA 13 build with `--no-default-features --features cuda-13` (starling: `--features cuda-13` without `cuda`)"
);
#[cfg(not(any(feature = "cuda-12", feature = "cuda-13")))]
compile_error!(
    "starling-gpu: enable one CUDA API level, the feature `cuda-12` (the default) or `cuda-13` (starling: `--features cuda` or `--features cuda-13`)"
);

pub mod backend;
pub mod blas;
mod device;
mod error;
pub mod fake;
pub mod kernels;
pub mod pipeline;
pub mod probe;
pub mod replicas;
pub mod runtime;
pub mod tiles;

pub use device::Device;
pub use error::GpuError;
pub use pipeline::{GpuStats, Layer, PipelineConfig, Policy};
pub use probe::{DeviceInfo, probe};
pub use runtime::{CudaBuffers, DeviceBuf, Gpu, GpuConfig, Shape};
