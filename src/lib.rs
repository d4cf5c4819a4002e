//! `starling`: a distributed task runtime in the spirit of StarPU-MPI.
//!
//! This facade assembles Starling from its crates:
//!
//! * [`core`] (`starling-core`): the `no_std`, allocation-free protocol core — envelope,
//!   tags, requests, lists, matcher, communication cache, node selection, the task-insert
//!   planner, the progression engine and statistics. It performs no I/O; adapters drive it.
//! * the threaded runtime (from `starling-std`): data [`Handle`]s over [`interfaces`],
//!   tasks of [`Codelet`]s with implicit dependencies, a worker pool, every
//!   point-to-point call on a [`Context`], and [`run_local`], which runs an SPMD closure on
//!   N ranks held in this process — the embedded default, no MPI needed;
//! * [`sim`]: a seeded, deterministic cluster of bare protocol engines in one thread, with
//!   MPI's per-pair message order, for protocol tests that replay from a seed;
//! * [`comm_matrix`]: reads the ranks' communication statistics reports back into a
//!   rank × rank matrix (the `comm-matrix` binary, feature `comm-matrix`, draws it).
//!
//! The features `mpi` and `cuda` add the MPI transport and the CUDA device as they are
//! built (see the README's status table).
#![forbid(unsafe_code)]

pub use starling_core as core;
pub use starling_std::{
    Acquired, AnyHandle, Buffers, Built, BuiltTask, ClusterConfig, Codelet, CommError, Context,
    DataError, DataMut, DataRef, Handle, InProcess, InsertBuilder, InsertError, Inserted,
    Interface, PostBuild, RankConfig, RankRunner, RecvOpts, Request, RuntimeConfig, SendOpts,
    ShutdownError, StartError, TaskBuilder, TaskTag, Transport, data, interfaces, rank, run_fake,
    run_local, run_local_with, sim, transport,
};

pub mod comm_matrix;

#[cfg(feature = "mpi")]
pub use starling_mpi as mpi;

#[cfg(feature = "cuda")]
pub use starling_gpu as gpu;

/// The user guide (`docs/guide.md`), included here so that its examples are compiled and
/// run as doctests.
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
