//! `starling-std`: Starling's threaded runtime.
//!
//! It gives the protocol core threads, and applications a StarPU-style task runtime:
//!
//! * [`Handle`]s over data [`Interface`]s ([`interfaces`]: variable, vector, matrix with
//!   a leading dimension, strided block, user-defined packed types), registered with a
//!   home buffer or lazily;
//! * tasks of [`Codelet`]s with access modes, priorities, callbacks and [`TaskTag`]s,
//!   ordered by implicit dependencies per handle (sequential consistency), run by a
//!   worker pool; `acquire`/`release`; `wait_for_all`;
//! * every point-to-point call of the reference on handles, as one builder per direction
//!   ([`p2p`]: `ctx.send(&h, dest, tag)` and `ctx.recv(..)`, the mode an option, ending in
//!   `.wait()`, `.start()` — a [`Request`] — or `.detach(callback)`; arrays through
//!   iterators) — plus barrier, communicators ([`Comm`]: the world, duplicates and
//!   splits, [`comm`]) and statistics;
//! * [`partition`]: a handle cut by a filter into children that are handles of their own
//!   (`starpu_data_partition` / `starpu_data_unpartition`), ordered like tasks;
//! * the [`Transport`] trait that a rank's progression thread drives the core's engine
//!   over, and [`InProcess`]: N ranks as threads of one process. [`run_local`] runs an SPMD
//!   closure on such a cluster with no MPI installed — the embedded default.
//!
//! [`serial`] carries the protocol over `std` byte streams (a socket pair, TCP): a
//! [`Transport`] over them, and — feature `embedded-hal` — the adapters that run the
//! core's embedded link in a thread, to talk to a board or play one.
//! Two tools check a distributed run: [`agreement`], the graph-agreement check (do all
//! ranks submit the same inserts? on a mismatch every rank gets the first divergent
//! insert), and [`hang`], the hang explainer (a watchdog merges the ranks' pending requests
//! into one explanation and fails them, so that a stuck job returns instead of hanging).
//! Two aids for long runs: [`trace`] writes a timeline of each rank's tasks, messages
//! and waits that Perfetto or `chrome://tracing` opens (`STARLING_TRACE`), and
//! `STARLING_PROGRESS=1` shows tasks done / submitted on stderr while a run goes.
//!
//! Which worker runs each ready task is the scheduler's choice ([`sched`]:
//! `STARLING_SCHED=prio`, the default, `ws` or `dmda`); `dmda` places tasks on CPU
//! workers and device layers from measured performance models ([`perfmodel`], saved per
//! machine under `STARLING_HOME`).
//!
//! [`sim`] is a different tool: a seeded, deterministic, single-threaded cluster of bare
//! engines, for protocol tests that replay from a seed.
//!
//! Concurrency goes through one private `sync` module so that `loom` can replace it.
#![forbid(unsafe_code)]

mod api;
mod buffer;
mod error;
mod flow;
mod id_hash;
mod io;
mod launch;
pub mod ms;
mod runtime;
pub mod sim;
mod sync;
pub mod tags;
mod tools;
pub mod trace;

pub use api::comm;
pub use api::p2p;
pub use flow::partition;
pub use io::in_process;
pub use io::serial;
pub use io::transport;
pub use launch::rank;
pub use runtime::codelet;
pub use runtime::data;
pub use runtime::device;
pub use runtime::interfaces;
pub use runtime::perfmodel;
pub use runtime::sched;
pub use tools::agreement;
pub use tools::hang;

pub use api::comm::Comm;
pub use api::context::{Acquired, AnyHandle, Context, Request, TaskBuilder, TaskHandle};
pub use api::p2p::{RecvAllBuilder, RecvBuilder, SendAllBuilder, SendBuilder};
pub use error::{CommError, Leftover, ShutdownError, TaskError, TransferDirection, TransferError};
pub use flow::distributed::{
    Built, BuiltTask, InsertBuilder, InsertError, Inserted, PostBuild, TagChoice,
};
pub use io::in_process::InProcess;
pub use io::transport::Transport;
pub use launch::cluster::{ClusterConfig, run_fake, run_local, run_local_with};
pub use launch::rank::{DriverMode, RankConfig, RankRunner, StartError, Tables};
pub use runtime::data::{DataError, DataMut, DataRef, Handle, Interface};
pub use runtime::data::{FilterError, PartitionError};
pub use runtime::device::{DeviceImpl, DeviceLayer, DeviceTask, HostRef};
pub use runtime::perfmodel::{Arch, Bus, Calibrate, ModelError, Models, PerfModel};
pub use runtime::sched::{SchedPolicy, SchedStats, WorkerStats};
pub use runtime::task::{Buffers, Codelet, Kernel, RuntimeConfig, TaskTag, WorkerStart};
pub use tools::agreement::Divergence;
