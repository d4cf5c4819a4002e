//! `starling`: a distributed task runtime in the spirit of StarPU-MPI.
//!
//! This facade assembles Starling from its crates:
//!
//! * [`core`] (`starling-core`): the `no_std`, allocation-free protocol core — envelope,
//!   tags, requests, lists, matcher, communication cache, node selection, the task-insert
//!   planner, the progression engine and statistics. It performs no I/O; adapters drive it.
//! * the threaded runtime (from `starling-std`): data [`Handle`]s over [`interfaces`],
//!   tasks of [`Codelet`]s with implicit dependencies, a worker pool, every
//!   point-to-point call on a [`Context`] ([`p2p`]: `ctx.send(&h, dest, tag)` and
//!   `ctx.recv(..)`, one builder per direction), and [`run_local`], which runs an SPMD
//!   closure on N ranks held in this process — the embedded default, no MPI needed;
//! * [`partition`]: a registered handle cut by a filter into children that are handles of
//!   their own (`starpu_data_partition` / `starpu_data_unpartition`);
//! * [`sched`] and [`perfmodel`]: the scheduling policies (`prio`, `ws`, `dmda`) and the
//!   performance models `dmda` places tasks on CPU workers and devices with;
//! * [`serial`]: the protocol over `std` byte streams (a socket pair, TCP) — a
//!   [`Transport`] for ranks, and the adapters that run the core's embedded link (the code
//!   a board runs, `core::link`) in a thread;
//! * [`sim`]: a seeded, deterministic cluster of bare protocol engines in one thread, with
//!   MPI's per-pair message order, for protocol tests that replay from a seed;
//! * [`comm_matrix`]: reads the ranks' communication statistics reports back into a
//!   rank × rank matrix (the `comm-matrix` binary, feature `comm-matrix`, draws it);
//! * [`trace`] and [`trace_merge`]: each rank's timeline of tasks, messages and waits
//!   (`STARLING_TRACE=<path>`), in the Chrome / Perfetto JSON format, and its merger into
//!   one timeline (the `trace-merge` binary).
//!
//! The features `mpi` and `cuda` (or `cuda-13`: the CUDA 13 API) add the MPI rank (`starling::mpi`: the
//! `starling-mpi` crate's transport, assembled into a rank here) and the
//! CUDA device (`starling::gpu`, the `starling-gpu` crate: codelets with CUDA
//! implementations run by one CUDA worker per device; see the README's status table). [`launch`] runs one
//! SPMD program either way: across the processes of an `mpirun` job when built with
//! `mpi`, on the in-process cluster otherwise.
#![forbid(unsafe_code)]

pub use starling_core as core;
pub use starling_std::{
    Acquired, AnyHandle, Buffers, Built, BuiltTask, ClusterConfig, Codelet, Comm, CommError,
    Context, DataError, DataMut, DataRef, DeviceLayer, DeviceTask, DriverMode, Handle, HostRef,
    InProcess, InsertBuilder, InsertError, Inserted, Interface, Leftover, PostBuild, RankConfig,
    RankRunner, RecvAllBuilder, RecvBuilder, Request, RuntimeConfig, SendAllBuilder, SendBuilder,
    ShutdownError, StartError, Tables, TagChoice, TaskBuilder, TaskError, TaskHandle, TaskTag,
    TransferDirection, TransferError, Transport, data, device, interfaces, p2p, rank, run_fake,
    run_local, run_local_with, serial, sim, trace, transport,
};
pub use starling_std::{
    Arch, Bus, Calibrate, ModelError, Models, PerfModel, SchedPolicy, SchedStats, WorkerStats,
    perfmodel, sched,
};
pub use starling_std::{Divergence, agreement, hang, ms};
pub use starling_std::{FilterError, PartitionError, partition};

/// What a custom node-selection policy ([`Context::register_policy`]) is written with: its
/// type, a `fn(Rank, u32, &[PolicyAccess]) -> Rank` — a plain function or a closure that
/// captures nothing — its registered id, and what it sees of each access (mode, owner,
/// tag, size, and whether the datum is known here).
pub use starling_core::insert::Access as PolicyAccess;
pub use starling_core::select::{PolicyFn, PolicyId};

pub mod comm_matrix;
pub mod trace_merge;

#[cfg(feature = "mpi")]
pub mod mpi;

/// What [`launch`] returns: the value of each rank that ran in this process, with its
/// rank, in rank order — every rank of the in-process cluster, or this process's rank
/// under `mpirun`. The same shape both ways, so one check runs on either:
/// `for (rank, value) in &launched { … }` checks every rank in-process and this rank
/// under MPI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched<T> {
    values: Vec<(core::Rank, T)>,
}

impl<T> Launched<T> {
    /// The values of `ranks` `0..n`, in rank order (the in-process cluster's).
    fn all(values: Vec<T>) -> Self {
        Self {
            values: (0..).map(core::Rank).zip(values).collect(),
        }
    }

    /// The value of `rank`, if it ran in this process.
    pub fn get(&self, rank: core::Rank) -> Option<&T> {
        self.values
            .iter()
            .find_map(|(r, v)| (*r == rank).then_some(v))
    }

    /// The ranks and their values, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = (core::Rank, &T)> {
        self.values.iter().map(|(r, v)| (*r, v))
    }

    /// The values, in rank order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.values.iter().map(|(_, v)| v)
    }

    /// The values, in rank order, without their ranks.
    pub fn into_values(self) -> Vec<T> {
        self.values.into_iter().map(|(_, v)| v).collect()
    }

    /// How many ranks ran in this process: all of them in-process, 1 under `mpirun`.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no rank ran here (never, for a value of [`launch`]).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl<T> IntoIterator for Launched<T> {
    type Item = (core::Rank, T);
    type IntoIter = std::vec::IntoIter<(core::Rank, T)>;

    fn into_iter(self) -> Self::IntoIter {
        self.values.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Launched<T> {
    type Item = (core::Rank, &'a T);
    type IntoIter = ::core::iter::Map<
        ::core::slice::Iter<'a, (core::Rank, T)>,
        fn(&'a (core::Rank, T)) -> (core::Rank, &'a T),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.values.iter().map(|(r, v)| (*r, v))
    }
}

/// Runs `f` as an SPMD program on every rank of a job, and returns each rank's value with
/// its rank ([`Launched`]).
///
/// * Built with the `mpi` feature and started by `mpirun`/`mpiexec` (the launcher's
///   `OMPI_COMM_WORLD_SIZE` or `PMI_SIZE` is set): this process is one rank of the MPI
///   job. `f` runs once, on this rank's [`Context`], with the configuration from the
///   environment (`mpi::MpiConfig::from_env`); the rank then shuts down
///   (`mpi::MpiRank::shutdown`). The result holds this rank's value only, and the job's
///   size is `mpirun -n`'s: `ranks` is not used.
/// * Otherwise: [`run_local`]`(ranks, f)`, `ranks` ranks held in this process; the
///   result holds every rank's value, in rank order.
///
/// So one program, and one check of its results, runs both ways:
///
/// ```
/// let values = starling::launch(2, |ctx| ctx.rank().0 * 10)?;
/// for (rank, value) in &values {
///     assert_eq!(*value, rank.0 * 10); // every rank in-process; this rank under mpirun
/// }
/// # Ok::<(), starling::ShutdownError>(())
/// ```
///
/// ```sh
/// cargo run --release --example ring -- 4 1000                  # 4 ranks in one process
/// cargo build --release --features mpi --example ring
/// mpirun -n 4 target/release/examples/ring 4 1000               # 4 MPI processes
/// ```
///
/// # Errors
/// [`ShutdownError`] listing what this rank (under MPI) or every rank (in-process) left
/// behind: messages never received, requests never completed or never waited on,
/// panicking tasks and callbacks; under MPI also a shutdown watchdog that fired.
///
/// # Panics
/// As [`run_local`]: when `ranks` is 0 (in-process), or when `f` panics. Under `mpirun`,
/// when MPI cannot start (the `mpi::MpiError` is in the message) — in particular on a
/// second call in one process: the first call's shutdown finalized MPI, which cannot be
/// initialised again, so a program calls `launch` once under `mpirun` (running several
/// phases inside `f`).
pub fn launch<R, F>(ranks: u32, f: F) -> Result<Launched<R>, ShutdownError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    #[cfg(feature = "mpi")]
    if mpi::under_mpirun() {
        return launch_mpi(mpi::MpiConfig::from_env(), f);
    }
    run_local(ranks, f).map(Launched::all)
}

/// [`launch`] with a configuration: the in-process cluster's [`ClusterConfig`], whose
/// [`ClusterConfig::rank_config`] (workers, statistics, tags, …) and
/// [`stats_dir`](ClusterConfig::stats_dir) every rank also gets under `mpirun` (the rest of
/// the MPI settings come from the environment, as `mpi::MpiConfig::from_env` reads them).
///
/// ```
/// let config = starling::ClusterConfig {
///     stats: true,
///     ..starling::ClusterConfig::from_env()
/// };
/// let sent = starling::launch_with(2, config, |ctx| ctx.comm_amounts().expect("stats are on"))?;
/// for (_rank, amounts) in &sent {
///     assert_eq!(amounts.len(), 2); // one entry per rank of the world
/// }
/// assert!(sent.len() == 2 || starling::under_mpirun()); // in-process: both ranks
/// # Ok::<(), starling::ShutdownError>(())
/// ```
///
/// # Errors
/// As [`launch`].
///
/// # Panics
/// As [`launch`]. In-process, it runs [`run_local_with`], which does not read the fake
/// rank variables that [`run_local`] honours.
pub fn launch_with<R, F>(
    ranks: u32,
    config: ClusterConfig,
    f: F,
) -> Result<Launched<R>, ShutdownError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    #[cfg(feature = "mpi")]
    if mpi::under_mpirun() {
        return launch_mpi(mpi_config(&config), f);
    }
    run_local_with(ranks, config, f).map(Launched::all)
}

/// The MPI settings of a rank launched with `config`: the environment's
/// (`mpi::MpiConfig::from_env`), with `config`'s rank settings and statistics directory.
#[cfg(feature = "mpi")]
fn mpi_config(config: &ClusterConfig) -> mpi::MpiConfig {
    let mut mpi_config = mpi::MpiConfig::from_env();
    mpi_config.rank = config.rank_config();
    if config.stats_dir.is_some() {
        mpi_config.stats_dir.clone_from(&config.stats_dir);
    }
    mpi_config
}

/// Starts this process's MPI rank, or panics saying why (MPI starts once per process).
#[cfg(feature = "mpi")]
fn init_mpi(config: mpi::MpiConfig) -> mpi::MpiRank {
    mpi::init(config).unwrap_or_else(|e| {
        panic!("Starling cannot start over MPI: {e} (launch runs once per MPI process)")
    })
}

/// This process's rank of an `mpirun` job: `f` on it, then its shutdown.
#[cfg(feature = "mpi")]
fn launch_mpi<R, F>(config: mpi::MpiConfig, f: F) -> Result<Launched<R>, ShutdownError>
where
    F: Fn(&Context) -> R,
{
    let rank = init_mpi(config);
    let me = rank.context().rank();
    let value = f(rank.context());
    rank.shutdown()?;
    Ok(Launched {
        values: vec![(me, value)],
    })
}

/// Runs a master-slave job ([`ms`]): the master rank ([`ms::MsConfig::master`]) runs the
/// ordinary task flow `f` on a one-rank [`Context`], every other rank runs its tasks.
/// Every rank calls it with the same `registry` (all ranks run the same binary).
///
/// * Under `mpirun` (feature `mpi`): this process is one rank of the job. The master's
///   process gets `Some` of `f`'s value, a slave's `None` once the master stopped it.
/// * Otherwise: [`ms::run_local`] with `ranks` ranks in this process; `Some` of the
///   value.
///
/// Slaves get [`ms::MsConfig::slave_threads`] workers (`STARLING_NMPIMSTHREADS`), the
/// rest of each rank's settings from `config`. The hang watchdog is off: master-slave mode
/// watches its slaves itself ([`ms::MsConfig::timeout`]).
///
/// ```
/// use starling::interfaces::Variable;
/// use starling::ms::{MsConfig, Registry};
/// use starling::{ClusterConfig, Codelet};
///
/// let double = Codelet::new("double", |b| {
///     let mut v = b.w::<Variable<u64>>(0);
///     let x = v.get();
///     v.set(2 * x);
/// });
/// let registry = Registry::new().codelet(&double);
/// let out = starling::launch_ms(3, MsConfig::from_env(), ClusterConfig::from_env(), registry, move |ctx| {
///     let h = ctx.register(Variable::new(1u64));
///     for _ in 0..10 {
///         ctx.task(&double).rw(&h).submit();
///     }
///     ctx.unregister(h).get()
/// })?;
/// assert!(out.is_none_or(|v| v == 1024)); // `None` on a slave's process under mpirun
/// # Ok::<(), starling::ms::MsError>(())
/// ```
///
/// # Errors
/// The first [`ms::MsError`] of the job (on the master's process).
///
/// # Panics
/// As [`launch`].
pub fn launch_ms<R, F>(
    ranks: u32,
    ms: ms::MsConfig,
    config: ClusterConfig,
    registry: ms::Registry,
    f: F,
) -> Result<Option<R>, ms::MsError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    #[cfg(feature = "mpi")]
    if mpi::under_mpirun() {
        let mut mpi_config = mpi_config(&config);
        if let Some(n) = ms.slave_threads {
            mpi_config.rank.runtime.workers = n;
        }
        mpi_config.watchdog = ::core::time::Duration::ZERO;
        let rank = init_mpi(mpi_config);
        let value = ms::serve(rank.context(), &ms, &registry, |app| f(app));
        let shutdown = rank.shutdown();
        let value = value?;
        shutdown.map_err(ms::MsError::Shutdown)?;
        return Ok(value);
    }
    ms::run_local(ranks, ms, config, registry, f).map(Some)
}

/// Whether [`launch`] runs this process as one rank of an `mpirun` job (built with the
/// `mpi` feature and started by `mpirun`/`mpiexec`): then `launch` returns this rank's
/// value only, and a program checks and prints what its own rank holds.
pub fn under_mpirun() -> bool {
    #[cfg(feature = "mpi")]
    {
        mpi::under_mpirun()
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

#[cfg(any(feature = "cuda", feature = "cuda-13"))]
pub use starling_gpu as gpu;

/// The user guide (`docs/guide.md`), included here so that its examples are compiled and
/// run as doctests.
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
