//! `starling-mpi`: Starling's transport over MPI.
//!
//! [`MpiTransport`] is the runtime's [transport contract](starling_std::transport)
//! implemented with the `mpi` crate (rsmpi): the same SPMD program that
//! `starling_std::run_local` runs as N ranks in one process runs as N processes under
//! `mpirun -n N`, each process one rank whose progression thread drives this transport.
//! See [`transport`] for the protocol's use of MPI: communicators, envelopes, payloads in
//! chunks, barriers that flush, errors that return.
//!
//! # What this crate is, and is not
//!
//! An adapter that depends inward: it imports the core's ids and, of the runtime,
//! [`starling_std::transport`] alone (the [`Transport`](starling_std::transport::Transport)
//! trait, its completions and lent buffers). It does not start a rank, watch one or shut
//! one down: the facade does, with the `mpi` feature (`starling::mpi::init`,
//! `starling::mpi::MpiRank`, `starling::launch` under `mpirun`). `docs/architecture.md`
//! ("Which crate may import which, and why") gives the rule; `tests/layering.rs` checks
//! it.
//!
//! What it offers whoever assembles a rank:
//!
//! | item | what it does |
//! | --- | --- |
//! | [`MpiTransport::new`], [`transport::Settings`] | initialises MPI (or adopts the application's) on the calling thread and builds the transport |
//! | [`transport::AppComms`] | Starling's duplicates of a communicator the application made (`starpu_mpi_init_comm`) |
//! | [`transport::no_yield_when_idle`] | turns Open MPI's `mpi_yield_when_idle` off before MPI is initialised (Open MPI turns it on for an oversubscribed node), when that is sound |
//! | [`clock::offset_to_rank0`] | how far this process's clock is from rank 0's (the ranks' traces on one timeline) |
//! | [`bind`] | the cores the launcher gave the process, and workers pinned to them (`STARLING_WORKERS_GETBIND`) |
//! | [`under_mpirun`] | whether `mpirun`/`mpiexec` started this process |
//! | [`TransportError`] | why the transport could not start |
//! | [`mpi`], [`Threading`] | rsmpi itself, for the application's own communicators |
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bind;
pub mod clock;
mod lent;
pub mod transport;

/// rsmpi, the MPI bindings Starling is built on: the application makes its
/// communicators with it (for [`transport::AppComms`], `starling::mpi::init_comm`).
pub use mpi;
pub use mpi::Threading;

pub use bind::{Bindings, GetBind, WorkerBinding};
pub use transport::MpiTransport;

/// Whether this process was started by `mpirun`/`mpiexec` (Open MPI's
/// `OMPI_COMM_WORLD_SIZE`, or the `PMI_SIZE` of MPICH's Hydra and other PMI launchers).
pub fn under_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Why the MPI transport could not start ([`MpiTransport::new`], [`transport::AppComms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// MPI cannot give the thread level Starling needs: its progression thread calls MPI
    /// while the application's threads run. Use an MPI built with thread support (Open
    /// MPI's default build has it), or initialise MPI yourself with a higher level.
    #[error("MPI provides thread level {provided:?}, Starling needs {required:?}")]
    Threading {
        /// The level Starling asked for.
        required: Threading,
        /// The level MPI gave.
        provided: Threading,
    },
    /// MPI was already finalized in this process; it cannot be initialised again.
    #[error("MPI was already finalized in this process")]
    Finalized,
    /// `MPI_TAG_UB` is not set on `MPI_COMM_WORLD` (a broken MPI).
    #[error("MPI does not report MPI_TAG_UB")]
    TagUb,
    /// A rank was to start on a communicator of the application while MPI is not
    /// initialised (or was finalized): the application that made the communicator
    /// initialises MPI.
    #[error("init_comm needs MPI initialised by the application (it is not, or was finalized)")]
    NotInitialized,
}
