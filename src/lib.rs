//! `starling`: a distributed task runtime in the spirit of StarPU-MPI.
//!
//! This facade assembles Starling from its crates:
//!
//! * [`core`] (`starling-core`): the `no_std`, allocation-free protocol core — envelope,
//!   tags, requests, lists, matcher, communication cache, node selection, the task-insert
//!   planner, the progression engine and statistics. It performs no I/O; adapters drive it.
//! * [`sim`] (from `starling-std`): a seeded, deterministic cluster of N engines in one
//!   process, with MPI's per-pair message order; what the examples and the delivery tests
//!   run on, with no MPI installed.
//!
//! The features `mpi` and `cuda` add the MPI transport and the CUDA device as they are
//! built (see the README's status table).
#![forbid(unsafe_code)]

pub use starling_core as core;
pub use starling_std::sim;

#[cfg(feature = "mpi")]
pub use starling_mpi as mpi;

#[cfg(feature = "cuda")]
pub use starling_gpu as gpu;

/// The user guide (`docs/guide.md`), included here so that its examples are compiled and
/// run as doctests.
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
