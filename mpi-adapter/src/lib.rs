//! `starling-mpi`: Starling's transport over MPI.
//!
//! The same SPMD program that [`starling_std::run_local`] runs as N ranks in one process
//! runs here as N processes under `mpirun -n N`: each process is one rank, with its own
//! [`Context`], workers and progression thread, and the ranks talk over MPI through
//! [`MpiTransport`], the runtime's [`Transport`](starling_std::Transport) implemented with
//! the `mpi` crate (rsmpi).
//!
//! ```no_run
//! use starling_std::interfaces::Variable;
//! use starling_core::{Rank, Tag};
//!
//! let rank = starling_mpi::init(starling_mpi::MpiConfig::from_env())?;
//! let ctx = rank.context();
//! let h = ctx.register(Variable::new(ctx.rank().0));
//! if ctx.rank().0 == 0 {
//!     ctx.send(&h, Rank(1), Tag(7))?;
//! } else if ctx.rank().0 == 1 {
//!     ctx.recv(&h, Rank(0), Tag(7))?;
//! }
//! rank.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What happens where
//!
//! * [`init`] starts the rank. Its progression thread initialises MPI (`MPI_Init_thread`
//!   asking for `MPI_THREAD_SERIALIZED`, or `MPI_THREAD_MULTIPLE` when
//!   [`MpiConfig::application_calls_mpi`]) — or adopts the MPI the application already
//!   initialised, after checking its thread level — duplicates `MPI_COMM_WORLD`, reads
//!   `MPI_TAG_UB`, and from then on makes every MPI call of Starling. Application threads
//!   and workers never call MPI.
//! * Starling's traffic runs on duplicates of the world communicator, never on the
//!   application's own (internals §12.11); see [`transport`] for the protocol's use of MPI.
//! * [`MpiRank::shutdown`] waits for the rank's tasks and requests (with a watchdog: a
//!   job whose requests can never complete reports them instead of hanging), meets the
//!   other ranks in a barrier, reports what was left behind (messages never received,
//!   requests never waited on), stops the threads and finalizes MPI if Starling
//!   initialised it.
//!
//! The facade's `starling::launch` picks this adapter when the program runs under
//! `mpirun`, and the in-process cluster otherwise.
//!
//! # Environment
//!
//! Besides what [`RankConfig::from_env`] reads (`STARLING_NCPU`, `STARLING_COMM_STATS`,
//! …): `STARLING_WATCHDOG_SECS` (default 60, 0 = wait forever),
//! `STARLING_MPI_THREAD_MULTIPLE=1`, `STARLING_MPI_COMMS` (default 8),
//! `STARLING_MPI_MAX_MESSAGE` (default `i32::MAX`; every rank must use the same) and
//! `STARLING_COMM_STATS_DIR` (each rank writes its statistics there at shutdown, for
//! the `comm-matrix` tool). With `STARLING_TRACE` (set on every rank: the ranks align
//! their trace clocks at start-up, collectively) each process writes its rank's timeline;
//! see [`starling_std::trace`].
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
mod lent;
pub mod transport;

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex, PoisonError};

pub use mpi::Threading;
use starling_core::Rank;
use starling_std::{Context, RankConfig, RankRunner, ShutdownError, StartError};

pub use transport::MpiTransport;

/// How an MPI rank is set up.
#[derive(Clone, Debug)]
pub struct MpiConfig {
    /// What every rank shares with the in-process cluster: workers, statistics, tags.
    pub rank: RankConfig,
    /// The application calls MPI itself while Starling runs: require
    /// `MPI_THREAD_MULTIPLE` instead of `MPI_THREAD_SERIALIZED`
    /// (`STARLING_MPI_THREAD_MULTIPLE=1`).
    pub application_calls_mpi: bool,
    /// How long [`MpiRank::shutdown`] waits while nothing progresses before it reports
    /// the pending requests instead of hanging (`STARLING_WATCHDOG_SECS`, default 60 s;
    /// zero waits forever). A running task counts as progress.
    pub watchdog: Duration,
    /// How many duplicates of the world communicator every rank creates at start-up
    /// (`STARLING_MPI_COMMS`, default 8, at least 1): `CommId(0)` and the first
    /// `communicators - 2` of [`Context::comm_dup`] get one each; all later communicators
    /// share the last. Matching stays per communicator either way (the envelope names
    /// it); a duplicate of their own keeps communicators apart inside MPI too (separate
    /// queues). See [`transport`].
    pub communicators: u16,
    /// Where shutdown also writes this rank's statistics, as `rank<N>.txt` (the
    /// directory is created), for the `comm-matrix` tool (`STARLING_COMM_STATS_DIR`);
    /// setting it turns statistics on.
    pub stats_dir: Option<std::path::PathBuf>,
    /// The longest single MPI message, in bytes: longer payloads travel in chunks of this
    /// size (`STARLING_MPI_MAX_MESSAGE`, default and at most `i32::MAX`, MPI's count
    /// type). Every rank must use the same value.
    pub max_message: usize,
}

impl Default for MpiConfig {
    fn default() -> Self {
        Self {
            rank: RankConfig::default(),
            application_calls_mpi: false,
            watchdog: Duration::from_secs(60),
            communicators: 8,
            stats_dir: None,
            max_message: i32::MAX as usize,
        }
    }
}

impl MpiConfig {
    /// The defaults, overridden by the environment (see the [crate docs](crate)).
    pub fn from_env() -> Self {
        let mut c = Self {
            rank: RankConfig::from_env(),
            application_calls_mpi: std::env::var("STARLING_MPI_THREAD_MULTIPLE")
                .is_ok_and(|v| !v.is_empty() && v != "0"),
            ..Self::default()
        };
        if let Some(s) = env_number("STARLING_WATCHDOG_SECS") {
            c.watchdog = Duration::from_secs(s);
        }
        if let Some(n) = env_number("STARLING_MPI_COMMS") {
            c.communicators = u16::try_from(n).unwrap_or(u16::MAX);
        }
        if let Some(n) = env_number("STARLING_MPI_MAX_MESSAGE") {
            c.max_message = usize::try_from(n).unwrap_or(usize::MAX);
        }
        c.stats_dir = std::env::var_os("STARLING_COMM_STATS_DIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from);
        c
    }

    /// The thread level MPI must provide.
    pub fn threading(&self) -> Threading {
        if self.application_calls_mpi {
            Threading::Multiple
        } else {
            Threading::Serialized
        }
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Whether this process was started by `mpirun`/`mpiexec` (Open MPI's
/// `OMPI_COMM_WORLD_SIZE`, or the `PMI_SIZE` of MPICH's Hydra and other PMI launchers).
pub fn under_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Why [`init`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MpiError {
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
    /// A Starling rank already runs in this process: one per process.
    #[error("a Starling MPI rank already runs in this process")]
    AlreadyRunning,
    /// The rank could not start (e.g. `MPI_TAG_UB` leaves no room above the
    /// communication tag).
    #[error(transparent)]
    Start(#[from] StartError),
}

/// Whether a rank runs in this process.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts this process's rank over MPI.
///
/// The rank's progression thread initialises MPI — or adopts it when the application
/// already did (then the application must not finalize it before
/// [`MpiRank::shutdown`]) — and owns every MPI call of Starling from then on.
///
/// # Errors
/// [`MpiError::Threading`] when MPI does not provide the thread level
/// ([`MpiConfig::threading`]); [`MpiError::Finalized`] after MPI was finalized;
/// [`MpiError::AlreadyRunning`] when a rank already runs in this process;
/// [`MpiError::Start`] when the rank cannot start.
pub fn init(config: MpiConfig) -> Result<MpiRank, MpiError> {
    if RUNNING.swap(true, Ordering::SeqCst) {
        return Err(MpiError::AlreadyRunning);
    }
    let abandon = Arc::new(AtomicBool::new(false));
    let settings = transport::Settings {
        threading: config.threading(),
        communicators: config.communicators,
        max_message: config.max_message,
        abandon: Arc::clone(&abandon),
    };
    let failure: Arc<Mutex<Option<MpiError>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&failure);
    let tracing = config.rank.trace_file.is_some();
    let make = move || {
        let transport = MpiTransport::new(settings).map_err(|e| {
            let text = e.to_string();
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
            text
        })?;
        if tracing {
            clock::sync();
        }
        Ok::<_, String>(transport)
    };
    let mut rank_config = config.rank.clone();
    rank_config.stats |= config.stats_dir.is_some();
    match RankRunner::start(make, &rank_config) {
        Ok(runner) => Ok(MpiRank {
            runner: Some(runner),
            config,
            abandon,
        }),
        Err(e) => {
            RUNNING.store(false, Ordering::SeqCst);
            let typed = failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            Err(typed.unwrap_or(MpiError::Start(e)))
        }
    }
}

/// This process's rank of an MPI job ([`init`]).
///
/// Dropping it shuts it down like [`MpiRank::shutdown`] and prints what that reports;
/// dropped while a panic unwinds, it stops the rank's threads without finalizing MPI
/// (the process is failing; `mpirun` ends the job).
pub struct MpiRank {
    runner: Option<RankRunner>,
    config: MpiConfig,
    abandon: Arc<AtomicBool>,
}

impl core::fmt::Debug for MpiRank {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MpiRank")
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

impl MpiRank {
    fn runner(&self) -> &RankRunner {
        self.runner
            .as_ref()
            .expect("the rank runs until shutdown consumes it")
    }

    /// The rank's context: register data, submit tasks, send and receive.
    pub fn context(&self) -> &Context {
        self.runner().context()
    }

    /// This rank (`MPI_Comm_rank` of the world).
    pub fn rank(&self) -> Rank {
        self.context().rank()
    }

    /// The number of ranks (`MPI_Comm_size` of the world).
    pub fn size(&self) -> u32 {
        self.context().size()
    }

    /// Shuts the rank down (`starpu_mpi_shutdown`): waits for every task and request of
    /// this rank, meets the other ranks in a barrier, collects what was left behind,
    /// prints the communication statistics when they are enabled, stops the rank's
    /// threads, and finalizes MPI if [`init`] initialised it. Every rank must call it.
    ///
    /// # Errors
    /// [`ShutdownError`] listing, one line each with its rank, the messages that arrived
    /// here and were never received, requests never waited on, tasks and callbacks that
    /// panicked. When nothing progressed for [`MpiConfig::watchdog`] while requests were
    /// pending, it returns at once (without the barrier) with a first line saying so and
    /// the pending requests; MPI is then left unfinalized, so return an error from the
    /// process and `mpirun` ends the job.
    pub fn shutdown(mut self) -> Result<(), ShutdownError> {
        let runner = self
            .runner
            .take()
            .expect("the rank runs until shutdown consumes it");
        let result = shutdown_runner(runner, &self.config, &self.abandon);
        RUNNING.store(false, Ordering::SeqCst);
        result
    }
}

fn shutdown_runner(
    runner: RankRunner,
    config: &MpiConfig,
    abandon: &AtomicBool,
) -> Result<(), ShutdownError> {
    let rank = runner.context().rank();
    let finished = if config.watchdog.is_zero() {
        runner.context().wait_for_all();
        true
    } else {
        runner.wait_for_all_or_idle(config.watchdog)
    };
    if !finished {
        let mut leftovers = vec![format!(
            "rank {}: nothing progressed for {} s while tasks or requests were pending \
             (STARLING_WATCHDOG_SECS); giving up",
            rank.0,
            config.watchdog.as_secs_f64()
        )];
        leftovers.extend(runner.leftovers());
        abandon.store(true, Ordering::SeqCst);
        runner.stop();
        return Err(ShutdownError { leftovers });
    }
    runner.context().barrier();
    let leftovers = runner.leftovers();
    if config.rank.stats || config.stats_dir.is_some() {
        let report = runner.stats_report();
        eprint!("{report}");
        if let Some(dir) = &config.stats_dir {
            let path = dir.join(format!("rank{}.txt", rank.0));
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &report))
            {
                eprintln!(
                    "[starling-mpi] rank {}: cannot write {}: {e}",
                    rank.0,
                    path.display()
                );
            }
        }
    }
    runner.stop();
    if leftovers.is_empty() {
        Ok(())
    } else {
        Err(ShutdownError { leftovers })
    }
}

impl Drop for MpiRank {
    fn drop(&mut self) {
        let Some(runner) = self.runner.take() else {
            return;
        };
        if std::thread::panicking() {
            self.abandon.store(true, Ordering::SeqCst);
            drop(runner);
        } else if let Err(e) = shutdown_runner(runner, &self.config, &self.abandon) {
            eprintln!("[starling-mpi] {e}");
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}
