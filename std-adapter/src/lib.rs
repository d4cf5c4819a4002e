//! `starling-std`: Starling's adapters that need an operating system.
//!
//! Today it holds [`sim`]: a seeded, deterministic cluster of N protocol engines in one
//! thread, which drives [`starling_core::engine::Engine`] over a simulated network with
//! MPI's per-pair ordering. It is the harness of the delivery tests and runs the
//! examples with no MPI installed.
//!
//! The threaded runtime — tasks, data handles, workers, the progression thread and the
//! in-process multi-rank transport — is the next piece of work (the threaded-runtime
//! issue) and will live here too.
#![forbid(unsafe_code)]

pub mod data;
pub mod interfaces;
pub mod sim;
mod sync;
