//! `starling-gpu`: Starling's CUDA device, through `cudarc`.
#![allow(missing_docs)]

pub mod blas;
mod device;
mod error;
pub mod kernels;
pub mod probe;
pub mod replicas;
pub mod runtime;
pub mod tiles;

pub use device::Device;
pub use error::GpuError;
pub use probe::{DeviceInfo, probe};
pub use runtime::{CudaBuffers, DeviceBuf, Gpu, GpuConfig, GpuStats, Policy, Shape};
