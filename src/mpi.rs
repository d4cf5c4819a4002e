//! `starling::mpi` (feature `mpi`): one rank per process of an `mpirun` job.
//!
//! The same SPMD program that [`run_local`](crate::run_local) runs as N ranks in one process
//! runs here as N processes under `mpirun -n N`: each process is one rank, with its own
//! [`Context`], workers and progression thread, and the ranks talk over MPI through
//! [`MpiTransport`], the runtime's [`Transport`](crate::Transport) implemented with
//! the `mpi` crate (rsmpi) by the `starling-mpi` adapter.
//!
//! The adapter implements the transport contract and nothing else; this module
//! assembles a rank around it: it starts the rank ([`init`], [`init_comm`]), aligns the
//! trace clocks, binds the workers, watches the rank for hangs, and shuts it down
//! ([`MpiRank::shutdown`]). See `docs/architecture.md`, "Which crate may import which,
//! and why".
//!
//! ```no_run
//! use starling::core::{Rank, Tag};
//! use starling::interfaces::Variable;
//!
//! let rank = starling::mpi::init(starling::mpi::MpiConfig::from_env())?;
//! let ctx = rank.context();
//! let h = ctx.register(Variable::new(ctx.rank().0));
//! if ctx.rank().0 == 0 {
//!     ctx.send(&h, Rank(1), Tag(7)).wait()?;
//! } else if ctx.rank().0 == 1 {
//!     ctx.recv(&h, Rank(0), Tag(7)).wait()?;
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
//!   `MPI_TAG_UB`, and from then on drives Starling's MPI calls. An application thread
//!   blocked in a wait (`Request::wait`, a blocking `send`/`recv`, a barrier) drives them
//!   itself meanwhile, under the same lock, so a blocking call crosses no thread
//!   ([`RankConfig::caller_drives`], `STARLING_CALLER_DRIVES=0` turns it
//!   off); so does a thread that posts a send while the lock is free, for that send's
//!   transmission only ([`RankConfig::multiple_send`], the reference's
//!   multiple-send; `STARLING_MPI_THREAD_MULTIPLE_SEND=0` turns it off). MPI calls are
//!   never concurrent, as `MPI_THREAD_SERIALIZED` asks.
//! * Starling's traffic runs on duplicates of the world communicator — or of the
//!   communicator the application gave [`init_comm`] — never on the application's own
//!   (internals §12.11); see [`transport`] for the protocol's use of MPI.
//! * Small messages can take the fast path (`docs/protocol.md` §19), off by default:
//!   with `STARLING_MPI_FAST=on` (every rank must agree) a standard send of at most
//!   [`RankConfig::fast_limit`] bytes on a user tag that has a fast tag (`0..` about half
//!   of `MPI_TAG_UB`) is one `MPI_Isend` of its payload on a tag derived from the user
//!   tag, received by an `MPI_Irecv` posted for its receive (7–9 % off a small message,
//!   13 % onto a 64 KiB one).
//! * [`MpiRank::shutdown`] waits for the rank's tasks and requests (with a watchdog: a
//!   job whose requests can never complete reports them instead of hanging), meets the
//!   other ranks in a barrier, reports what was left behind (messages never received,
//!   requests never waited on), stops the threads and finalizes MPI if Starling
//!   initialised it.
//! * The hang explainer ([`hang`](crate::hang)): while the rank runs, a watchdog thread
//!   watches it; when nothing progressed for [`MpiConfig::watchdog`] while requests were
//!   pending, the rank writes its pending requests (peer, tag, handle, stage, age) into
//!   [`MpiConfig::hang_dir`], reads the other ranks' reports there, prints the merged
//!   explanation ("rank 0 waits for tag 17 from rank 1; rank 1 never sent it: …") and
//!   fails its pending requests with `CommError::Stalled`, so that blocking calls return;
//!   shutdown then returns the explanation. Files, not messages: a hung peer may not
//!   answer a collective. The job is hung only when no rank moves: each watched rank
//!   keeps a heartbeat file there, rewritten whenever it progresses, and a rank whose
//!   own requests stand still waits on while a peer's heartbeat moves (a rank waiting
//!   in a receive, or in the closing barrier, for a peer that computes).
//!
//! [`launch`](crate::launch) starts a rank here when the program runs under `mpirun`, and
//! runs the in-process cluster otherwise.
//!
//! # Environment
//!
//! Besides what [`RankConfig::from_env`] reads (`STARLING_NCPU`, `STARLING_COMM_STATS`,
//! …): `STARLING_WATCHDOG_SECS` (default 60, 0 = wait forever), `STARLING_HANG_DIR`
//! (where the ranks' hang reports go; by default a directory per job in the temporary
//! directory),
//! `STARLING_MPI_THREAD_MULTIPLE=1`, `STARLING_MPI_COMMS` (default 8),
//! `STARLING_MPI_MAX_MESSAGE` (default `i32::MAX`; every rank must use the same),
//! `STARLING_COMM_STATS_DIR` (each rank writes its statistics there at shutdown, for
//! the `comm-matrix` tool), `STARLING_WORKERS_GETBIND` and `STARLING_DISPLAY_BINDINGS`
//! (workers bound to the cores the launcher gave the process: see [`bind`]),
//! `STARLING_MPI_YIELD_WHEN_IDLE=1` (leave Open MPI's `mpi_yield_when_idle` as it would
//! be: on when the node is oversubscribed; by default [`init`] turns it off before it
//! initialises MPI, when `OMPI_MCA_mpi_yield_when_idle` is unset,
//! [`MpiConfig::mpi_yield_when_idle`]),
//! `STARLING_CROWDED` (whether the node has fewer cores than ranks; by default from the
//! launcher's count of the node's ranks — `OMPI_COMM_WORLD_LOCAL_SIZE`,
//! `MPI_LOCALNRANKS`, `PMIX_LOCAL_SIZE` or `SLURM_NTASKS_PER_NODE` — against the node's
//! online cores: see
//! [`RuntimeConfig::crowded`](starling_std::RuntimeConfig::crowded)). With
//! `STARLING_TRACE` (set on every rank: the ranks align their trace clocks at start-up,
//! collectively) each process writes its rank's timeline; see [`trace`](crate::trace).

#[cfg(all(test, target_os = "linux"))]
mod tests;
mod watchdog;

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex, PoisonError};

use starling_core::Rank;
use starling_mpi::mpi::topology::Communicator;
use starling_mpi::transport::{AppComms, Settings, YieldWhenIdle};
// The `starling-mpi` adapter's items: the transport, its settings and errors, the clock
// alignment, worker binding, and rsmpi itself.
pub use starling_mpi::{
    Bindings, GetBind, MpiTransport, Threading, TransportError, WorkerBinding, bind, clock, mpi,
    transport, under_mpirun,
};
use starling_std::hang::Watchdog;
use starling_std::trace::{clock_ns, set_clock_offset_ns};
use starling_std::{
    Context, Leftover, RankConfig, RankRunner, RuntimeConfig, ShutdownError, StartError,
    WorkerStart,
};

/// How an MPI rank is set up.
#[derive(Clone, Debug)]
pub struct MpiConfig {
    /// What every rank shares with the in-process cluster: workers, statistics, tags.
    pub rank: RankConfig,
    /// The application calls MPI itself while Starling runs: require
    /// `MPI_THREAD_MULTIPLE` instead of `MPI_THREAD_SERIALIZED`
    /// (`STARLING_MPI_THREAD_MULTIPLE=1`).
    pub application_calls_mpi: bool,
    /// How long the rank may go with nothing progressing while requests are pending
    /// before the watchdog gives up (`STARLING_WATCHDOG_SECS`, default 60 s; zero waits
    /// forever). A running task counts as progress, and so does a peer's: with a
    /// [`hang_dir`](Self::hang_dir), a rank gives up only when no peer's heartbeat moved
    /// during its stall either (each rank rewrites its file there four times per timeout
    /// at most, when it progressed). While the rank runs, the watchdog
    /// explains the hang (see [`MpiConfig::hang_dir`]) and fails the pending requests;
    /// in [`MpiRank::shutdown`] it reports them instead of hanging.
    pub watchdog: Duration,
    /// Where each rank writes its hang report (`rank<N>.txt`) when the watchdog fires,
    /// and reads the others' to merge them (`STARLING_HANG_DIR`). By default a directory
    /// per job under the temporary directory, named after the launcher's job id; a job
    /// spanning several nodes needs a shared directory. `None`: each rank explains with
    /// its own report only.
    pub hang_dir: Option<std::path::PathBuf>,
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
    /// Whether workers bind to the cores of the process's affinity mask, one core each
    /// (`STARLING_WORKERS_GETBIND`; default [`GetBind::Auto`]: when the launcher bound the
    /// process). See [`bind`].
    pub getbind: GetBind,
    /// Print this rank's cores and where each worker runs at start-up
    /// (`STARLING_DISPLAY_BINDINGS=1`).
    pub display_bindings: bool,
    /// Pose as rank `.0` of `.1` ranks that do not exist (`STARLING_MPI_FAKE_RANK` and
    /// `STARLING_MPI_FAKE_SIZE`, both set): inserts are planned as that rank would plan
    /// them and every communication is dropped, as in `starling::run_fake`. For measuring
    /// one rank's submission cost in a job of any size (usually `mpirun -n 1`).
    pub fake: Option<(Rank, u32)>,
    /// Leave Open MPI's `mpi_yield_when_idle` to Open MPI
    /// (`STARLING_MPI_YIELD_WHEN_IDLE=1`). By default [`init`] turns it off before it
    /// initialises MPI, unless the user or the launcher set it
    /// ([`transport::no_yield_when_idle`]): Open MPI turns it on on an oversubscribed
    /// node, and then every poll of MPI that finds nothing gives up the
    /// core, on top of the yields of Starling's own threads
    /// ([`RuntimeConfig::crowded`](starling_std::RuntimeConfig::crowded)).
    pub mpi_yield_when_idle: bool,
}

impl Default for MpiConfig {
    fn default() -> Self {
        Self {
            rank: RankConfig::default(),
            application_calls_mpi: false,
            watchdog: Duration::from_secs(60),
            hang_dir: None,
            communicators: 8,
            stats_dir: None,
            max_message: i32::MAX as usize,
            getbind: GetBind::Auto,
            display_bindings: false,
            fake: None,
            mpi_yield_when_idle: false,
        }
    }
}

impl MpiConfig {
    /// The defaults, overridden by the environment (see the [module docs](self)).
    pub fn from_env() -> Self {
        let mut c = Self {
            rank: RankConfig::from_env(),
            application_calls_mpi: env_flag("STARLING_MPI_THREAD_MULTIPLE"),
            getbind: GetBind::from_env(),
            display_bindings: env_flag("STARLING_DISPLAY_BINDINGS"),
            mpi_yield_when_idle: env_flag("STARLING_MPI_YIELD_WHEN_IDLE"),
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
        if let (Some(r), Some(s)) = (
            env_number("STARLING_MPI_FAKE_RANK"),
            env_number("STARLING_MPI_FAKE_SIZE"),
        ) {
            if let (Ok(r), Ok(s)) = (u32::try_from(r), u32::try_from(s)) {
                if r < s {
                    c.fake = Some((Rank(r), s));
                }
            }
        }
        c.stats_dir = std::env::var_os("STARLING_COMM_STATS_DIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from);
        c.hang_dir = std::env::var_os("STARLING_HANG_DIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(watchdog::default_dir);
        // Whether the ranks on this node crowd its cores (`RuntimeConfig::crowded`): all
        // its online cores, not this process's share (mpirun binds each rank to one).
        let cores = bind::online_cpus()
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let runtime = core::mem::take(&mut c.rank.runtime);
        c.rank.runtime = runtime.crowded_by(local_ranks(), cores);
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

/// The ranks of this job on this node, as the launcher says (Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's `MPI_LOCALNRANKS`, PMIx's `PMIX_LOCAL_SIZE`,
/// Slurm's `SLURM_NTASKS_PER_NODE` — its first count, as in `2(x3)`); 1 when none does.
fn local_ranks() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMIX_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|v| env_number(v))
    .or_else(|| {
        let v = std::env::var("SLURM_NTASKS_PER_NODE").ok()?;
        let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
    .and_then(|n| usize::try_from(n).ok())
    .unwrap_or(1)
    .max(1)
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Why [`init`] or [`init_comm`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MpiError {
    /// MPI cannot give the transport what it needs (see [`TransportError`]): the thread
    /// level ([`TransportError::Threading`]), an MPI not yet finalized
    /// ([`TransportError::Finalized`]), `MPI_TAG_UB`; or [`init_comm`] was given a
    /// communicator while MPI is not initialised ([`TransportError::NotInitialized`]).
    #[error(transparent)]
    Transport(#[from] TransportError),
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
/// [`MpiError::Transport`] with [`TransportError::Threading`] when MPI does not provide
/// the thread level ([`MpiConfig::threading`]), with [`TransportError::Finalized`] after
/// MPI was finalized; [`MpiError::AlreadyRunning`] when a rank already runs in this process;
/// [`MpiError::Start`] when the rank cannot start.
pub fn init(config: MpiConfig) -> Result<MpiRank, MpiError> {
    if RUNNING.swap(true, Ordering::SeqCst) {
        return Err(MpiError::AlreadyRunning);
    }
    // Before any of the rank's threads start (the progression thread initialises MPI).
    let yield_when_idle = (!config.mpi_yield_when_idle).then(transport::no_yield_when_idle);
    start(config, None, yield_when_idle)
}

/// Starts this process's rank over a communicator the application made
/// (`starpu_mpi_init_comm` with a communicator other than `MPI_COMM_WORLD`): the job's
/// ranks are the members of `comm`, numbered as in `comm`, and Starling's traffic runs
/// on duplicates of it. Two groups of processes of one `mpirun` job, each with a
/// communicator of its own (`MPI_Comm_split`), run two independent Starling worlds.
///
/// The application initialised MPI (it made `comm`), with at least
/// `MPI_THREAD_SERIALIZED` — `MPI_THREAD_MULTIPLE` when it calls MPI while Starling runs
/// ([`MpiConfig::application_calls_mpi`]) — and finalizes it after
/// [`MpiRank::shutdown`]. Every member of `comm` must call `init_comm` at the same point
/// of its program: the duplicates are made here, on the calling thread, collectively
/// over `comm` ([`MpiConfig::communicators`] of them). `comm` itself is not used again
/// and may be freed. The default [`MpiConfig::hang_dir`] gets a subdirectory per
/// communicator (`comm-<world rank of its rank 0>`), so that two worlds' reports do not
/// mix.
///
/// ```no_run
/// use starling::mpi::mpi::topology::{Color, Communicator};
///
/// let (universe, _) = starling::mpi::mpi::initialize_with_threading(starling::mpi::Threading::Serialized)
///     .expect("MPI initialises");
/// let world = universe.world();
/// // Even and odd processes: two Starling worlds in one job.
/// let half = world
///     .split_by_color(Color::with_value(world.rank() % 2))
///     .expect("every process has a colour");
/// let rank = starling::mpi::init_comm(starling::mpi::MpiConfig::from_env(), &half)?;
/// assert_eq!(rank.size(), half.size() as u32);
/// rank.shutdown()?;
/// drop(universe); // MPI_Finalize, by the application
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`MpiError::Transport`] with [`TransportError::NotInitialized`] when MPI is not
/// initialised (or was finalized), with [`TransportError::Threading`] when its thread
/// level is below [`MpiConfig::threading`]
/// (checked before any collective call); and as [`init`].
pub fn init_comm<C: Communicator>(mut config: MpiConfig, comm: &C) -> Result<MpiRank, MpiError> {
    let required = config.threading();
    AppComms::check(required)?;
    if RUNNING.swap(true, Ordering::SeqCst) {
        return Err(MpiError::AlreadyRunning);
    }
    let comms = match AppComms::duplicate(comm, config.communicators, required) {
        Ok(comms) => comms,
        Err(e) => {
            RUNNING.store(false, Ordering::SeqCst);
            return Err(e.into());
        }
    };
    if let Some(dir) = config.hang_dir.take() {
        config.hang_dir = Some(dir.join(format!("comm-{}", comms.leader())));
    }
    start(config, Some(comms), None)
}

/// Starts the rank ([`init`], [`init_comm`]); `RUNNING` is set. `yield_when_idle`: what
/// [`init`] did to Open MPI's `mpi_yield_when_idle`.
fn start(
    config: MpiConfig,
    comms: Option<AppComms>,
    yield_when_idle: Option<YieldWhenIdle>,
) -> Result<MpiRank, MpiError> {
    let abandon = Arc::new(AtomicBool::new(false));
    let settings = Settings {
        threading: config.threading(),
        communicators: config.communicators,
        max_message: config.max_message,
        abandon: Arc::clone(&abandon),
        comms,
    };
    let failure: Arc<Mutex<Option<TransportError>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&failure);
    let tracing = config.rank.trace_file.is_some();
    let make = move || {
        let transport = MpiTransport::new(settings).map_err(|e| {
            let text = e.to_string();
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
            text
        })?;
        if tracing {
            // Collective: every rank traces, or none (see `clock`).
            set_clock_offset_ns(clock::offset_to_rank0(clock_ns));
        }
        Ok::<_, String>(transport)
    };
    let mut rank_config = config.rank.clone();
    rank_config.stats |= config.stats_dir.is_some();
    let bindings = if rank_config.runtime.on_worker_start.is_none() {
        bind_workers(config.getbind, &mut rank_config.runtime)
    } else {
        None // the application binds its workers itself
    };
    match RankRunner::start(make, &rank_config) {
        Ok(mut runner) => {
            if let Some((rank, size)) = config.fake {
                runner.fake(rank, size);
            }
            let fired = Arc::new(Mutex::new(Vec::new()));
            let ctx = runner.context();
            if let Some(dir) = &config.hang_dir {
                // A report of an earlier job would be read as this one's.
                let _ = std::fs::remove_file(crate::hang::report_path(dir, ctx.rank()));
            }
            let watchdog = (!config.watchdog.is_zero()).then(|| {
                watchdog::start(
                    runner.probe(),
                    ctx.size(),
                    config.watchdog,
                    config.hang_dir.clone(),
                    Arc::clone(&fired),
                )
            });
            // Its peers' watchdogs read it (`watchdog::peer_moved`).
            let heartbeat = match (&watchdog, &config.hang_dir) {
                (Some(_), Some(dir)) => watchdog::Heartbeat::start(
                    runner.probe(),
                    dir.clone(),
                    watchdog::heartbeat_period(config.watchdog),
                ),
                _ => None,
            };
            let rank = MpiRank {
                runner: Some(runner),
                config,
                abandon,
                bindings,
                watchdog,
                heartbeat,
                fired,
                yield_when_idle,
            };
            if rank.config.display_bindings {
                rank.display_bindings(rank_config.runtime.workers);
            }
            Ok(rank)
        }
        Err(e) => {
            RUNNING.store(false, Ordering::SeqCst);
            let typed = failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            Err(typed.map_or(MpiError::Start(e), MpiError::Transport))
        }
    }
}

/// Applies the binding policy to `runtime`: with binding on, installs the hook that pins
/// each worker to a core of the process's mask (the worker count stays as configured).
/// Returns the bindings to report, or `None` when binding is off, or unsupported here.
fn bind_workers(policy: GetBind, runtime: &mut RuntimeConfig) -> Option<Bindings> {
    let bindings = Bindings::for_policy(policy)?;
    let pin = bindings.clone();
    runtime.on_worker_start = Some(WorkerStart::new(move |w| pin.pin_worker(w)));
    Some(bindings)
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
    bindings: Option<Bindings>,
    watchdog: Option<Watchdog>,
    /// The rank's heartbeat in the hang directory, while a watchdog watches it (its
    /// thread and file go when it drops).
    heartbeat: Option<watchdog::Heartbeat>,
    /// What the watchdog found while the rank ran, if it fired.
    fired: Arc<Mutex<Vec<String>>>,
    /// What [`init`] did to Open MPI's `mpi_yield_when_idle`.
    yield_when_idle: Option<YieldWhenIdle>,
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

    /// This rank (`MPI_Comm_rank` of the world, or of the communicator given to
    /// [`init_comm`]).
    pub fn rank(&self) -> Rank {
        self.context().rank()
    }

    /// The number of ranks (`MPI_Comm_size` of the world, or of the communicator given to
    /// [`init_comm`]).
    pub fn size(&self) -> u32 {
        self.context().size()
    }

    /// The cores of this process and where its workers run, when they are bound
    /// ([`MpiConfig::getbind`]); `None` when they are not.
    pub fn bindings(&self) -> Option<&Bindings> {
        self.bindings.as_ref()
    }

    /// What [`init`] did to Open MPI's `mpi_yield_when_idle` before it initialised MPI
    /// ([`transport::no_yield_when_idle`]); `None` when it was told to leave it
    /// ([`MpiConfig::mpi_yield_when_idle`]) or did not initialise MPI ([`init_comm`]).
    pub fn yield_when_idle(&self) -> Option<&YieldWhenIdle> {
        self.yield_when_idle.as_ref()
    }

    /// Prints one line: the rank's workers and cores (`STARLING_DISPLAY_BINDINGS`). Waits
    /// a little for the workers to bind themselves, as they do when they start.
    fn display_bindings(&self, workers: usize) {
        let rank = self.rank().0;
        say(&format!(
            "[starling-mpi] rank {rank}: Open MPI's mpi_yield_when_idle: {}",
            match &self.yield_when_idle {
                None => "left to Open MPI (STARLING_MPI_YIELD_WHEN_IDLE)".to_string(),
                Some(YieldWhenIdle::TurnedOff) => "turned off (it was unset)".to_string(),
                Some(YieldWhenIdle::Set(v)) => format!("left as set ({v})"),
                Some(YieldWhenIdle::TooLate) => "left: MPI was initialised already".to_string(),
                Some(YieldWhenIdle::OtherThreads) => {
                    "left unset: the process had other threads".to_string()
                }
                Some(_) => "left".to_string(),
            }
        ));
        let Some(b) = &self.bindings else {
            let cores = bind::process_cores()
                .map_or_else(|e| format!("unknown ({e})"), |c| format!("{c:?}"));
            say(&format!(
                "[starling-mpi] rank {rank}: {workers} worker(s), not bound; process cores {cores}"
            ));
            return;
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while b.workers().len() < workers && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let list: Vec<String> = b
            .workers()
            .iter()
            .map(|w| match &w.mask {
                Ok(mask) => format!("worker {} → core {} (mask {mask:?})", w.worker, w.core),
                Err(e) => format!("worker {} → core {}: {e}", w.worker, w.core),
            })
            .collect();
        say(&format!(
            "[starling-mpi] rank {rank}: {workers} worker(s) bound to process cores {:?}: {}",
            b.cores,
            list.join(", ")
        ));
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
    /// pending — now, or earlier while the rank ran — it returns at once (without the
    /// barrier) with a first line saying so, the merged explanation of the ranks' hang
    /// reports, and the pending requests; MPI is then left unfinalized, so return an
    /// error from the process and `mpirun` ends the job. So it does when a peer does not
    /// come to the closing barrier within [`MpiConfig::watchdog`] and stands still
    /// meanwhile (the explanation then names it: "rank 1 never entered it"); a peer that
    /// still works (its heartbeat in [`MpiConfig::hang_dir`] moves) is waited for.
    pub fn shutdown(mut self) -> Result<(), ShutdownError> {
        let runner = self
            .runner
            .take()
            .expect("the rank runs until shutdown consumes it");
        let result = self.finish(runner);
        RUNNING.store(false, Ordering::SeqCst);
        result
    }
}

impl MpiRank {
    /// Stops the watchdog thread; what it found, if it fired.
    fn stop_watchdog(&mut self) -> Vec<String> {
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
        self.fired_so_far()
    }

    /// What the watchdog found, if it fired (emptied); it goes on watching.
    fn fired_so_far(&self) -> Vec<String> {
        core::mem::take(&mut *self.fired.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Shuts `runner` down ([`MpiRank::shutdown`]). A watchdog watches the closing
    /// barrier too: a peer that never comes to it and stands still (deadlocked, or
    /// stuck outside Starling) makes this rank give up with the explanation after
    /// [`MpiConfig::watchdog`], as a hang while the rank runs does, instead of waiting
    /// forever; a peer whose heartbeat moves (it computes) is waited for.
    fn finish(&mut self, runner: RankRunner) -> Result<(), ShutdownError> {
        let rank = runner.context().rank();
        let fired = self.stop_watchdog();
        if !fired.is_empty() {
            // The watchdog gave up while the rank ran: it is failing, its peers may be
            // hung.
            return Err(self.give_up(runner, fired));
        }
        let finished = if self.config.watchdog.is_zero() {
            runner.context().wait_for_all();
            true
        } else {
            // Waits while this rank, or else a peer, progresses: a rank whose receive
            // waits for a peer that computes is not hung.
            loop {
                if runner.wait_for_all_or_idle(self.config.watchdog) {
                    break true;
                }
                if !watchdog::peer_moved(
                    self.config.hang_dir.as_deref(),
                    runner.context().size(),
                    rank,
                    self.config.watchdog,
                    self.config.watchdog,
                ) {
                    break false;
                }
            }
        };
        if !finished {
            let header = format!(
                "rank {}: nothing progressed for {} s while tasks or requests were pending \
                 (STARLING_WATCHDOG_SECS); giving up",
                rank.0,
                self.config.watchdog.as_secs_f64()
            );
            let explained = watchdog::explain(
                &runner.probe(),
                runner.context().size(),
                self.config.hang_dir.as_deref(),
                self.config.watchdog,
                header,
            );
            return Err(self.give_up(runner, explained));
        }
        if !self.config.watchdog.is_zero() {
            // The closing barrier waits for every peer: watched like any wait.
            self.watchdog = Some(watchdog::start(
                runner.probe(),
                runner.context().size(),
                self.config.watchdog,
                self.config.hang_dir.clone(),
                Arc::clone(&self.fired),
            ));
        }
        runner.context().closing_barrier();
        let fired = self.stop_watchdog();
        // Every rank came to the barrier: nobody reads the heartbeat any more.
        drop(self.heartbeat.take());
        if !fired.is_empty() {
            // The barrier (or a request before it) stalled and the watchdog failed it.
            return Err(self.give_up(runner, fired));
        }
        let leftovers = runner.leftovers();
        let failures = runner.failures();
        // Statistics on from the start, or switched on at run time by the application.
        if let Some(report) = runner.stats_report() {
            eprint!("{report}");
            if let Some(dir) = &self.config.stats_dir {
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
            Err(ShutdownError {
                leftovers,
                failures,
            })
        }
    }

    /// Stops `runner` without finalizing MPI (its peers may be hung: `mpirun` ends the
    /// job once this process exits); the error to return: the watchdog's lines `first`,
    /// then what the rank left behind.
    fn give_up(&self, runner: RankRunner, first: Vec<String>) -> ShutdownError {
        let mut leftovers: Vec<_> = first.into_iter().map(Leftover::Watchdog).collect();
        leftovers.extend(runner.leftovers());
        let failures = runner.failures();
        self.abandon.store(true, Ordering::SeqCst);
        runner.stop();
        ShutdownError {
            leftovers,
            failures,
        }
    }
}

impl Drop for MpiRank {
    fn drop(&mut self) {
        let Some(runner) = self.runner.take() else {
            return;
        };
        if std::thread::panicking() {
            self.stop_watchdog();
            self.abandon.store(true, Ordering::SeqCst);
            drop(runner);
        } else if let Err(e) = self.finish(runner) {
            eprintln!("[starling-mpi] {e}");
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}

/// Writes `line` and a newline to stderr in one `write` call, so that the lines of the
/// ranks that share a terminal or a launcher's pipe never interleave mid-line
/// (`eprintln!` writes each formatted piece separately).
fn say(line: &str) {
    use std::io::Write as _;
    let mut bytes = String::with_capacity(line.len() + 1);
    bytes.push_str(line);
    bytes.push('\n');
    let _ = std::io::stderr().lock().write_all(bytes.as_bytes());
}
