//! `starling-gpu`: Starling's CUDA device.
//!
//! **Not built yet** (tracked by the GPU adapter issue). This crate will give the
//! runtime CUDA workers through `cudarc` with dynamic loading: memory nodes and device
//! replicas whose validity is decided by the core's coherence state machine, kernels
//! compiled with NVRTC, cuBLAS for the dense examples, and device-to-host staging before
//! an MPI send. With no driver or device it will return typed errors; nothing else in
//! the workspace needs a GPU to build or to pass its tests.
//!
//! Today it holds no code, so that the workspace layout is final and the facade's `cuda`
//! feature already has its crate.
