//! Starting one rank over any transport.
//!
//! A rank is a [`Context`], a worker pool and a progression thread that owns the rank's
//! [`Transport`]. The transport is **built and dropped on the progression thread** by a
//! closure (MPI must be finalized by the thread that initialized it). In between, the
//! transport and the engine sit behind the rank's progression lock: the progression
//! thread drives them, and so does an application thread blocked in a wait
//! ([`RankConfig::caller_drives`]), one thread at a time — what `MPI_THREAD_SERIALIZED`
//! allows. [`crate::run_local`] starts its ranks this way over [`crate::InProcess`]; the
//! MPI adapter does the same over MPI.

use std::sync::mpsc;
use std::thread;

use starling_core::Rank;
use starling_core::engine::Leftover as EngineLeftover;
use starling_core::tags::{DEFAULT_BASE, TagSpace};

use crate::api::context::{CommandSink, Context, Progression};
use crate::error::Leftover;
pub use crate::io::progress::config::{DriverMode, Tables};
use crate::io::progress::{self, Command, Drive, InboxTx, Input, ProgressConfig};
use crate::io::transport::Transport;
use crate::runtime::task::{Runtime, RuntimeConfig, Workers, env_flag};
use crate::sync::{Arc, InboxReceiver, InboxSender, Ordering, inbox, lock};
use crate::trace::Recorder;

/// How one rank is set up (what every transport shares).
#[derive(Clone, Debug)]
pub struct RankConfig {
    /// The task runtime (workers, kernels on or off).
    pub runtime: RuntimeConfig,
    /// The base of the runtime's physical tags (the reference's communication tag, 42).
    pub communication_tag: i32,
    /// Count payload bytes per peer (`STARLING_COMM_STATS=1`).
    pub stats: bool,
    /// Print every transmission and completion to stderr (`STARLING_MPI_COMM=1`).
    pub trace: bool,
    /// Sends acquire their data for writing until they complete ("pedantic isend").
    pub pedantic_isend: bool,
    /// Whether send priorities order the sends that are ready at once
    /// (`STARLING_MPI_PRIORITIES=0` turns it off).
    pub priorities: bool,
    /// The most sends in flight before ready sends wait, in priority order
    /// (`STARLING_MPI_NDETACHED_SEND`, default 10; 0 = no cap).
    pub max_inflight_sends: u32,
    /// A thread blocked in [`crate::Request::wait`] drives the rank's progress itself
    /// (the engine and the transport, under the progression lock) instead of sleeping
    /// until the progression thread wakes it: a blocking call then crosses no thread.
    /// So do the workers: one that finishes a task drives out the sends and receives its
    /// completion posted (completions included), and, on the in-process cluster, the
    /// progress of the rank it hands a message to; an idle worker that expects work
    /// drives its rank's progress while it polls for it, for at most 30 µs before it
    /// sleeps. A ring hop then crosses no sleeping thread.
    /// `STARLING_CALLER_DRIVES=0` turns it all off (default on).
    pub caller_drives: bool,
    /// A thread that posts a send while the progression lock is free hands it to the
    /// transport itself (`MPI_Isend` on that thread, under the lock), instead of leaving
    /// it for the progression thread's next poll — the reference's
    /// `STARPU_MPI_THREAD_MULTIPLE_SEND`, without needing `MPI_THREAD_MULTIPLE`: the lock
    /// keeps MPI calls serialized. A worker finishing a task sends its result without
    /// waking the progression thread first. It runs no completion callback on the
    /// posting thread (it only transmits), unless that thread is a worker that finished
    /// a task ([`RankConfig::caller_drives`]). `STARLING_MPI_THREAD_MULTIPLE_SEND=0` turns it
    /// off (default on).
    pub multiple_send: bool,
    /// Driver mode: the progression thread also runs tasks, in place of one worker
    /// (`STARLING_MPI_DRIVER_CALL_FREQUENCY` > 0). `None` (the default): it runs none.
    pub driver: Option<DriverMode>,
    /// Payloads of at least this many bytes of a contiguous built-in interface travel in
    /// place when the transport can (MPI): a send reads the handle's memory and holds the
    /// handle for reading until it completes (as the reference's sends do), a receive
    /// writes straight into it. Smaller ones are copied, and a send releases the handle at
    /// once. Receives and blocking sends, which hold their handle until they complete
    /// anyway, travel in place from the first size that does not ride inside its envelope
    /// (above [`RankConfig::eager_limit`]) whatever this size, unless it is `off`.
    /// `STARLING_IN_PLACE_MIN=<bytes>` (default 256 KiB; `off` never).
    pub in_place_min: usize,
    /// The largest payload that travels inside its envelope, as one MPI message instead
    /// of an envelope and a payload message (`STARLING_EAGER_LIMIT=<bytes>`, default
    /// [`RankConfig::DEFAULT_EAGER_LIMIT`], at most [`RankConfig::MAX_EAGER_LIMIT`]; 0:
    /// never). An eager payload is copied on both sides (packed into the envelope,
    /// unpacked from it) where a larger one is received in place, so the best limit is
    /// where one message's saving meets the copies' cost: `docs/performance.md` measures
    /// it. Ranks need not agree: every rank receives envelopes into room for the largest.
    pub eager_limit: u32,
    /// The fast path for small messages (`docs/protocol.md` §19): on a transport that
    /// offers it (MPI), a standard send of 1 to `fast_limit` bytes whose user tag has a
    /// fast tag (a tag in `0..` about half the transport's `MPI_TAG_UB`) travels as its
    /// payload alone on that tag, and is received straight into the receive's buffer;
    /// other messages of such a tag leave an empty marker message there and take the
    /// envelope path. **Off by default** (0): it takes 7–9 % off a small message and
    /// adds 13 % to a 64 KiB one (the marker; `docs/performance.md`), so a job opts in.
    /// `STARLING_MPI_FAST=on` (or `1`) turns it on at
    /// [`RankConfig::DEFAULT_FAST_LIMIT`], `STARLING_MPI_FAST=<bytes>` sets the limit (at
    /// most [`RankConfig::MAX_EAGER_LIMIT`]), `0` or `off` turns it off. **Every rank
    /// must use the same value.** The in-process transport ignores it.
    pub fast_limit: u32,
    /// Fold every insert into a digest and compare the ranks' digests at
    /// `mpi_wait_for_all` and barriers: the graph-agreement check
    /// ([`Context::check_agreement`]). On by default in debug builds, off in release;
    /// `STARLING_CHECK_AGREEMENT=0/1` overrides it. Every rank must use the same setting.
    pub check_agreement: bool,
    /// Record a timeline of the rank's tasks, messages and waits, and write it when the
    /// rank stops to [`trace::rank_file`](crate::trace::rank_file)`(path, rank)`:
    /// `<path>.rank<N>.json`, or `<path>/rank<N>.json` for a directory
    /// (`STARLING_TRACE=<path>`). See [`crate::trace`].
    pub trace_file: Option<std::path::PathBuf>,
    /// Show tasks done / submitted on a line of stderr, refreshed at most every 200 ms
    /// (`STARLING_PROGRESS=1`). The ranks of a process share the line; a rank started
    /// with [`RankRunner::start`] (one per process, as under MPI) shows it only on rank 0.
    pub progress: bool,
    /// The sizes of the protocol engine's tables ([`Tables`]): what does not fit waits
    /// in the progression thread, in order, and goes in when room frees.
    pub tables: Tables,
}

impl Default for RankConfig {
    fn default() -> Self {
        Self {
            runtime: RuntimeConfig::default(),
            communication_tag: DEFAULT_BASE,
            stats: false,
            trace: false,
            pedantic_isend: false,
            priorities: true,
            max_inflight_sends: 10,
            caller_drives: true,
            multiple_send: true,
            driver: None,
            in_place_min: 256 << 10,
            eager_limit: Self::DEFAULT_EAGER_LIMIT,
            fast_limit: 0,
            check_agreement: cfg!(debug_assertions),
            trace_file: None,
            progress: false,
            tables: Tables::DEFAULT,
        }
    }
}

impl RankConfig {
    /// [`RankConfig::eager_limit`] by default: 3968 bytes, 4 KiB less 128. An envelope
    /// is its 24-byte header and the payload; with Open MPI's own headers it then fits
    /// the shared-memory transport's 4 KiB eager size (`btl_vader_eager_limit`), past
    /// which a message costs a rendezvous. Measured (`scripts/bench-eager.sh`, blocking
    /// ping-pong, half round trip): 8 B inside its envelope 0.98 µs, outside 1.45 µs; a
    /// 4 KiB payload inside (limit 4096) 3.75 µs, outside (this default) 1.92 µs; from 2 to
    /// 4 KiB the two ways are within this machine's noise.
    pub const DEFAULT_EAGER_LIMIT: u32 = 4096 - 128;
    /// [`RankConfig::fast_limit`] when the fast path is turned on without a limit
    /// (`STARLING_MPI_FAST=on`): the default eager limit, so that a message that would
    /// ride inside its envelope travels alone instead.
    pub const DEFAULT_FAST_LIMIT: u32 = Self::DEFAULT_EAGER_LIMIT;
    /// The largest [`RankConfig::eager_limit`] and [`RankConfig::fast_limit`]: 64 KiB.
    /// Larger settings are clamped.
    pub const MAX_EAGER_LIMIT: u32 = 64 << 10;

    /// The defaults, overridden by the environment: `STARLING_NCPU`,
    /// `STARLING_DISABLE_KERNELS`, `STARLING_COMM_STATS` (or its 1.4 name
    /// `STARLING_MPI_STATS`), `STARLING_MPI_COMM`, `STARLING_MPI_PRIORITIES=0`,
    /// `STARLING_MPI_NDETACHED_SEND`, `STARLING_CALLER_DRIVES=0`,
    /// `STARLING_MPI_THREAD_MULTIPLE_SEND=0`, `STARLING_IN_PLACE_MIN`, `STARLING_MPI_FAST`,
    /// `STARLING_MPI_DRIVER_CALL_FREQUENCY`, `STARLING_MPI_DRIVER_TASK_FREQUENCY`,
    /// `STARLING_CHECK_AGREEMENT`, `STARLING_TRACE`, `STARLING_PROGRESS` and
    /// `STARLING_ENGINE_TABLES` (`requests,match_keys`, e.g. `4,2`: [`Tables`]). A flag
    /// is on when set to anything but empty or `0`.
    pub fn from_env() -> Self {
        let mut c = Self {
            runtime: RuntimeConfig::from_env(),
            stats: env_flag("STARLING_COMM_STATS") || env_flag("STARLING_MPI_STATS"),
            trace: env_flag("STARLING_MPI_COMM"),
            driver: DriverMode::from_env(),
            trace_file: std::env::var_os("STARLING_TRACE")
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
            progress: env_flag("STARLING_PROGRESS"),
            ..Self::default()
        };
        if let Some(t) = std::env::var("STARLING_ENGINE_TABLES")
            .ok()
            .and_then(|v| Tables::parse(&v))
        {
            c.tables = t;
        }
        if std::env::var("STARLING_MPI_PRIORITIES").is_ok_and(|v| v == "0") {
            c.priorities = false;
        }
        if std::env::var("STARLING_CALLER_DRIVES").is_ok_and(|v| v == "0") {
            c.caller_drives = false;
        }
        if std::env::var("STARLING_MPI_THREAD_MULTIPLE_SEND").is_ok_and(|v| v == "0") {
            c.multiple_send = false;
        }
        if let Ok(v) = std::env::var("STARLING_IN_PLACE_MIN") {
            if v.trim() == "off" {
                c.in_place_min = usize::MAX;
            } else if let Ok(n) = v.trim().parse() {
                c.in_place_min = n;
            }
        }
        if let Some(n) = std::env::var("STARLING_EAGER_LIMIT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            c.eager_limit = u32::try_from(n)
                .unwrap_or(u32::MAX)
                .min(Self::MAX_EAGER_LIMIT);
        }
        if let Ok(v) = std::env::var("STARLING_MPI_FAST") {
            let v = v.trim();
            if v == "off" {
                c.fast_limit = 0;
            } else if v == "on" || v == "1" {
                c.fast_limit = Self::DEFAULT_FAST_LIMIT;
            } else if let Ok(n) = v.parse::<u64>() {
                c.fast_limit = u32::try_from(n)
                    .unwrap_or(u32::MAX)
                    .min(Self::MAX_EAGER_LIMIT);
            }
        }
        if let Some(n) = std::env::var("STARLING_MPI_NDETACHED_SEND")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.max_inflight_sends = n;
        }
        if let Ok(v) = std::env::var("STARLING_CHECK_AGREEMENT") {
            c.check_agreement = !v.is_empty() && v != "0";
        }
        c
    }
}

/// Why a rank could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The transport could not be built (its own message).
    #[error("the transport could not start: {0}")]
    Transport(String),
    /// The transport's tag bound leaves no room for the communication tag.
    #[error("the transport's tag bound {tag_ub} leaves no room above communication tag {base}")]
    Tags {
        /// The transport's largest tag.
        tag_ub: i32,
        /// The configured communication tag.
        base: i32,
    },
}

/// One running rank: its context, workers and progression thread.
pub struct RankRunner {
    ctx: Context,
    runtime: Runtime,
    workers: Option<Workers>,
    progression: Option<thread::JoinHandle<()>>,
    pub(crate) shared: Arc<progress::Shared>,
    /// The timeline trace, written when the rank stops.
    timeline: Option<Arc<Recorder>>,
    /// The rank's place on the progress line.
    shown: Option<crate::runtime::meter::Shown>,
}

impl core::fmt::Debug for RankRunner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RankRunner")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

/// The inbox of a rank's progression thread, made before the transport when peers must
/// deliver into it (the in-process transport).
pub(crate) struct Inbox<W> {
    pub(crate) tx: InboxSender<Input<W>>,
    pub(crate) rx: InboxReceiver<Input<W>>,
    pub(crate) shared: Arc<progress::Shared>,
}

impl<W> Inbox<W> {
    pub(crate) fn new() -> Self {
        let (tx, rx) = inbox();
        Self {
            tx,
            rx,
            shared: Arc::new(progress::Shared::new()),
        }
    }
}

impl RankRunner {
    /// Starts a rank whose transport `make` builds on the rank's progression thread.
    ///
    /// # Errors
    /// [`StartError::Transport`] when `make` fails; [`StartError::Tags`] when the
    /// transport's tag bound leaves no room for the configured communication tag.
    pub fn start<T, E>(
        make: impl FnOnce() -> Result<T, E> + Send + 'static,
        config: &RankConfig,
    ) -> Result<Self, StartError>
    where
        T: Transport,
        E: core::fmt::Display,
    {
        Self::start_inner(make, Inbox::<T::Wire>::new(), config, false)
    }

    pub(crate) fn start_with_inbox<T, E>(
        make: impl FnOnce() -> Result<T, E> + Send + 'static,
        inbox: Inbox<T::Wire>,
        config: &RankConfig,
    ) -> Result<Self, StartError>
    where
        T: Transport,
        E: core::fmt::Display,
    {
        Self::start_inner(make, inbox, config, true)
    }

    /// `every_rank_shows`: every rank of the process shows on the progress line (the
    /// in-process cluster), or rank 0 alone (one rank per process).
    fn start_inner<T, E>(
        make: impl FnOnce() -> Result<T, E> + Send + 'static,
        inbox: Inbox<T::Wire>,
        config: &RankConfig,
        every_rank_shows: bool,
    ) -> Result<Self, StartError>
    where
        T: Transport,
        E: core::fmt::Display,
    {
        let Inbox { tx, rx, shared } = inbox;
        type Ready = Result<(Rank, u32, Arc<dyn Drive>, Option<Arc<Recorder>>, bool), StartError>;
        let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
        let trace_file = config.trace_file.clone();
        let base = config.communication_tag;
        let (stats, trace) = (config.stats, config.trace);
        let (priorities, max_inflight_sends) = (config.priorities, config.max_inflight_sends);
        let driver_mode = config.driver;
        let in_place_min = config.in_place_min;
        let multiple_send = config.multiple_send;
        let eager_limit = config.eager_limit.min(RankConfig::MAX_EAGER_LIMIT);
        let fast_limit = config.fast_limit.min(RankConfig::MAX_EAGER_LIMIT);
        let tables = config.tables;
        let pshared = Arc::clone(&shared);
        let progression = thread::Builder::new()
            .name("starling-progress".into())
            .stack_size(16 << 20)
            .spawn(move || {
                let transport = match make() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(StartError::Transport(e.to_string())));
                        return;
                    }
                };
                let tag_ub = transport.tag_ub();
                let Ok(tags) = TagSpace::with_base(base, tag_ub) else {
                    let _ = ready_tx.send(Err(StartError::Tags { tag_ub, base }));
                    return;
                };
                let (rank, size) = (transport.rank(), transport.size());
                let device_values = transport.carries_device_values();
                let timeline = trace_file.map(|f| Recorder::new(&f, rank, size));
                let recorder = timeline.clone();
                let config = ProgressConfig {
                    tags,
                    stats,
                    trace,
                    priorities,
                    max_inflight_sends,
                    driver: driver_mode,
                    in_place_min,
                    timeline,
                    multiple_send,
                    eager_limit,
                    tables,
                    fast_limit,
                };
                let driver = progress::start(transport, rx, config, pshared);
                let erased: Arc<dyn Drive> = driver.clone();
                let _ = ready_tx.send(Ok((rank, size, erased, recorder, device_values)));
                progress::run(&driver);
            })
            .expect("spawning the progression thread");
        let (rank, size, driver, timeline, device_values) = match ready_rx.recv() {
            Ok(Ok(rs)) => rs,
            Ok(Err(e)) => {
                let _ = progression.join();
                return Err(e);
            }
            Err(_) => {
                let _ = progression.join();
                return Err(StartError::Transport("the progression thread died".into()));
            }
        };
        let name = format!("rank{}", rank.0);
        let (runtime, workers) = match config.driver {
            // The progression thread takes one worker's place.
            Some(_) => {
                let threads = config.runtime.workers.max(1) - 1;
                let (runtime, workers) =
                    Runtime::start_threads(&config.runtime, &name, threads, timeline.clone());
                let waker = Arc::clone(&shared);
                runtime.set_on_ready(Box::new(move || waker.wake()));
                (runtime, workers)
            }
            None => Runtime::start_traced(&config.runtime, &name, timeline.clone()),
        };
        let _ = shared.runtime.set(runtime.clone());
        let shown = (config.progress && (every_rank_shows || rank.0 == 0))
            .then(|| crate::runtime::meter::show(rank, runtime.clone()));
        let tx = InboxTx::new(tx, Arc::clone(&shared));
        if config.caller_drives {
            // A worker that completes a task drives the progress of the rank it hands a
            // message to (in-process), and an idle worker that expects work drives its
            // own rank's progress while it polls for it.
            shared.set_driver(&driver);
            let d = Arc::clone(&driver);
            runtime.set_idle_drive(Box::new(move || d.idle_drive()));
        }
        let driver = config.caller_drives.then_some(driver);
        let commands: CommandSink = match driver.clone() {
            // Sends and receives go straight to the engine when its lock is free (a
            // blocking call then crosses no queue); anything else, or when it is held,
            // through the inbox.
            Some(direct) => Arc::new(move |c: Command| {
                let c = match c {
                    Command::Send { .. } | Command::Recv { .. } => match direct.post(c) {
                        Ok(()) => return,
                        Err(c) => c,
                    },
                    other => other,
                };
                tx.send(Input::Command(c));
            }),
            None => Arc::new(move |c: Command| tx.send(Input::Command(c))),
        };
        let ctx = Context::new(
            rank,
            size,
            runtime.clone(),
            Progression {
                commands,
                driver,
                pool: Arc::clone(&shared.pool),
                in_place_min,
                blocking_in_place_min: progress::lend_min(in_place_min, eager_limit),
                // A value above the eager limit travels as a message of its own: there a
                // device value can stand for its bytes (from 64 KiB: below, the host path
                // costs less than a device snapshot).
                device_min: if device_values {
                    (eager_limit as usize + 1).max(64 << 10)
                } else {
                    usize::MAX
                },
            },
            config.pedantic_isend,
            config.communication_tag,
        );
        lock(&ctx.dist).agreement.enabled = config.check_agreement;
        Ok(Self {
            ctx,
            runtime,
            workers: Some(workers),
            progression: Some(progression),
            shared,
            timeline,
            shown,
        })
    }

    /// The rank's context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Makes this rank pose as rank `rank` of `size` (the reference's
    /// `STARPU_MPI_FAKE_RANK` / `STARPU_MPI_FAKE_SIZE`): every insert is planned as that
    /// rank would plan it, and every communication is dropped.
    pub fn fake(&mut self, rank: Rank, size: u32) {
        self.ctx.rank = rank;
        self.ctx.size = size;
        self.ctx.fake.store(true, Ordering::SeqCst);
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A handle on this rank for a watchdog ([`crate::hang::Watchdog`]): its activity,
    /// its pending requests, and giving up on them.
    pub fn probe(&self) -> crate::tools::hang::Probe {
        crate::tools::hang::Probe::new(
            self.ctx.rank,
            self.ctx.size,
            Arc::clone(&self.ctx.tracker),
            self.runtime.clone(),
            Arc::clone(&self.ctx.commands),
        )
    }

    /// What the rank leaves behind, one [`Leftover`] each: messages never received,
    /// requests never completed or never waited on, panicking tasks and callbacks, failed
    /// transfers. Ask after every rank finished its work (after a barrier), or orphans
    /// may still be in flight.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let rank = self.ctx.rank();
        // Fast messages no receive took wait in the transport, not in the engine.
        ask(&self.ctx, Command::TakeStrays);
        let held = ask(&self.ctx, Command::Leftovers);
        let mut out: Vec<Leftover> = held.engine.iter().map(|l| typed(rank, l)).collect();
        out.extend(held.refused.iter().map(|l| match typed(rank, l) {
            Leftover::Orphan {
                rank,
                source,
                comm,
                tag,
                bytes,
                ..
            } => Leftover::Orphan {
                rank,
                source,
                comm,
                tag,
                bytes,
                refused: true,
            },
            other => other,
        }));
        out.extend(
            held.queued
                .iter()
                .map(|&(kind, comm, peer, tag)| Leftover::NeverAdmitted {
                    rank,
                    kind,
                    comm,
                    peer,
                    tag,
                }),
        );
        out.extend(
            lock(&self.ctx.reports)
                .drain(..)
                .map(|noted| noted.leftover(rank)),
        );
        out.extend(
            self.runtime
                .take_panics()
                .into_iter()
                .map(|what| Leftover::TaskFailed { rank, what }),
        );
        let (failures, skipped) = self.runtime.failures();
        out.extend(failures.iter().map(|f| Leftover::TransferFailed {
            rank,
            error: (**f).clone(),
        }));
        if skipped > 0 {
            out.push(Leftover::TasksSkipped {
                rank,
                count: skipped,
            });
        }
        out
    }

    /// The transfers the task flow depended on that failed on this rank, oldest first
    /// (each has a line in [`RankRunner::leftovers`] too).
    pub fn failures(&self) -> Vec<(Rank, crate::error::TransferError)> {
        let rank = self.ctx.rank();
        self.runtime
            .failures()
            .0
            .iter()
            .map(|f| (rank, (**f).clone()))
            .collect()
    }

    /// Waits, like [`Context::wait_for_all`], until every task and request submitted on
    /// this rank completed, and returns `true`; but returns `false` once nothing completed
    /// and no task ran for `idle` while something is still outstanding: what is pending
    /// then cannot complete by itself (a receive whose message never comes). A shutdown
    /// watchdog; [`RankRunner::leftovers`] names what is pending.
    pub fn wait_for_all_or_idle(&self, idle: core::time::Duration) -> bool {
        let step = idle.min(core::time::Duration::from_millis(100));
        let mut last = None;
        let mut since = std::time::Instant::now();
        loop {
            let mut seen = (0, 0, 0);
            let done = self.runtime.wait_until(step, |v| {
                seen = (v.outstanding, v.busy + v.callbacks, v.completed);
                v.outstanding == 0
            });
            if done {
                return true;
            }
            // A running task or callback, or any change in the counts, is progress.
            if seen.1 > 0 || last != Some(seen) {
                last = Some(seen);
                since = std::time::Instant::now();
            } else if since.elapsed() >= idle {
                return false;
            }
        }
    }

    /// The rank's communication statistics in the reference's line format; `None` when
    /// statistics were never on (at start-up, [`RankConfig::stats`], or at run time,
    /// [`Context::set_comm_stats`](crate::Context::set_comm_stats)).
    pub fn stats_report(&self) -> Option<String> {
        ask(&self.ctx, Command::Report)
    }

    /// Stops the progression thread and the workers.
    pub fn stop(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        if let Some(p) = self.progression.take() {
            (self.ctx.commands)(Command::Stop);
            let _ = p.join();
        }
        if let Some(w) = self.workers.take() {
            w.stop();
        }
        self.shown.take();
        if let Some(t) = self.timeline.take() {
            t.finish();
        }
    }
}

impl Drop for RankRunner {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Asks the progression thread a question and waits for the answer.
fn ask<T: Send + Default + 'static>(
    ctx: &Context,
    q: fn(Box<dyn FnOnce(T) + Send>) -> Command,
) -> T {
    let (tx, rx) = mpsc::channel();
    (ctx.commands)(q(Box::new(move |v| {
        let _ = tx.send(v);
    })));
    rx.recv().unwrap_or_default()
}

/// The engine's leftover `l` of rank `rank`, as the runtime reports it.
fn typed(rank: Rank, l: &EngineLeftover) -> Leftover {
    match *l {
        EngineLeftover::Orphan(o) => Leftover::Orphan {
            rank,
            source: o.source,
            comm: o.comm,
            tag: o.tag,
            bytes: o.size,
            refused: false,
        },
        EngineLeftover::Pending {
            kind,
            comm,
            peer,
            tag,
            size,
            state,
            ..
        } => Leftover::NeverCompleted {
            rank,
            kind,
            comm,
            peer,
            tag,
            bytes: size,
            state,
        },
        EngineLeftover::NotRetired {
            kind, peer, tag, ..
        } => Leftover::NotRetired {
            rank,
            kind,
            peer,
            tag,
        },
    }
}
