//! The in-process cluster: N ranks as threads of one process (the embedded default).

use core::time::Duration;
use std::thread;

use starling_core::Rank;
use starling_core::tags::{DEFAULT_BASE, MIN_TAG_UB};

use crate::api::context::Context;
use crate::error::{Leftover, ShutdownError, TransferError};
use crate::io::in_process::{Deliver, InProcess, InProcessWire};
use crate::io::progress::{self, InboxTx, Input};
use crate::launch::rank::{DriverMode, Inbox, RankConfig, RankRunner, Tables};
use crate::runtime::task::{Runtime, RuntimeConfig};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, lock};
use crate::tools::agreement::Board;
use crate::tools::hang::{self, Probe, RankReport, Watchdog};

/// How an in-process cluster is set up.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Each rank's task runtime (workers, kernels on or off).
    pub runtime: RuntimeConfig,
    /// The largest physical tag of the simulated transport (MPI's `MPI_TAG_UB`); the
    /// default is the smallest any MPI may offer, 32767.
    pub tag_ub: i32,
    /// The base of the runtime's physical tags (the reference's communication tag, 42).
    pub communication_tag: i32,
    /// Count payload bytes per peer, and print each rank's table at shutdown
    /// (`STARLING_COMM_STATS=1`).
    pub stats: bool,
    /// Also write each rank's statistics report to `<dir>/rank<N>.txt` at shutdown (the
    /// directory is created), for the `comm-matrix` tool (`STARLING_COMM_STATS_DIR=<dir>`).
    /// Setting it turns the statistics on.
    pub stats_dir: Option<std::path::PathBuf>,
    /// Print every transmission and completion to stderr (`STARLING_MPI_COMM=1`).
    pub trace: bool,
    /// Sends acquire their data for writing, so no task reads it during a send (the
    /// reference's "pedantic isend").
    pub pedantic_isend: bool,
    /// How long shutdown waits for a rank whose requests cannot complete before it
    /// reports them.
    pub shutdown_grace: Duration,
    /// Whether send priorities order the sends that are ready at once
    /// (`STARLING_MPI_PRIORITIES=0` turns it off).
    pub priorities: bool,
    /// The most sends in flight per rank before ready sends wait, in priority order (the
    /// reference's `STARPU_MPI_NDETACHED_SEND`, default 10; 0 = no cap).
    pub max_inflight_sends: u32,
    /// Threads blocked in a wait drive their rank's progress themselves
    /// ([`RankConfig::caller_drives`]; `STARLING_CALLER_DRIVES=0` turns it off).
    pub caller_drives: bool,
    /// A thread posting a send hands it to the transport itself when the progression
    /// lock is free ([`RankConfig::multiple_send`];
    /// `STARLING_MPI_THREAD_MULTIPLE_SEND=0` turns it off).
    pub multiple_send: bool,
    /// The largest payload that travels inside its envelope ([`RankConfig::eager_limit`];
    /// `STARLING_EAGER_LIMIT`).
    pub eager_limit: u32,
    /// Driver mode: each rank's progression thread also runs tasks
    /// ([`RankConfig::driver`]).
    pub driver: Option<DriverMode>,
    /// The graph-agreement check ([`RankConfig::check_agreement`]; on by default in
    /// debug builds, `STARLING_CHECK_AGREEMENT`). In process, ranks compare their digests
    /// through shared memory: no message, no effect on statistics.
    pub check_agreement: bool,
    /// The hang explainer's watchdog ([`crate::hang`]): when nothing has moved on any
    /// rank for this long while requests are pending, it merges every rank's pending
    /// requests into one explanation, prints it, and fails the pending requests with
    /// [`crate::CommError::Stalled`] so that blocking calls return; `run_local_with` then
    /// returns the explanation first in its [`ShutdownError`]. A running task counts as
    /// progress. `None`: no watchdog (`STARLING_WATCHDOG_SECS`, default 60, `0` = none).
    pub watchdog: Option<Duration>,
    /// Write each rank's timeline trace to `<path>.rank<N>.json`, or
    /// `<path>/rank<N>.json` for a directory (`STARLING_TRACE=<path>`); see
    /// [`crate::trace`].
    pub trace_file: Option<std::path::PathBuf>,
    /// Show the ranks' tasks done / submitted on one line of stderr, refreshed at most
    /// every 200 ms (`STARLING_PROGRESS=1`).
    pub progress: bool,
    /// The sizes of each rank's protocol-engine tables ([`RankConfig::tables`]).
    pub tables: Tables,
    /// The in-process ranks share the machine's cores: when
    /// [`runtime.workers`](RuntimeConfig::workers) is the default (the machine's
    /// parallelism), each of `n` ranks gets `parallelism / n` workers, as `n` processes
    /// bound to their share of a node would, but at least two (or the machine's one).
    ///
    /// With every rank's workers on every core, the idle workers' wake-ups took the
    /// cores the progression threads and a device's driver thread needed: two ranks
    /// sharing an H100 at tiles of 1 024 ran at 27 % of one rank with 16 workers each,
    /// 73 % with 2 (docs/performance.md). At least two: an idle worker that polls for the
    /// next task while another runs one saves a wake-up per hand-off (the in-process ring
    /// on 2 cores: 3.3 µs a hop with two workers per rank, 3.9 µs with one).
    ///
    /// `STARLING_SHARE_CORES=0` gives each rank them all; [`from_env`](Self::from_env)
    /// turns sharing off when `STARLING_NCPU` gives the count. In code, a count equal to
    /// the machine's parallelism is taken for the default: turn this off to give each
    /// rank that many.
    pub share_cores: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            runtime: RuntimeConfig::default(),
            tag_ub: MIN_TAG_UB,
            communication_tag: DEFAULT_BASE,
            stats: false,
            stats_dir: None,
            trace: false,
            pedantic_isend: false,
            shutdown_grace: Duration::from_millis(50),
            priorities: true,
            max_inflight_sends: 10,
            caller_drives: true,
            multiple_send: true,
            eager_limit: RankConfig::DEFAULT_EAGER_LIMIT,
            driver: None,
            check_agreement: cfg!(debug_assertions),
            watchdog: Some(Duration::from_secs(60)),
            trace_file: None,
            progress: false,
            tables: Tables::DEFAULT,
            share_cores: true,
        }
    }
}

impl ClusterConfig {
    /// The defaults, overridden by the environment as [`RankConfig::from_env`] reads it,
    /// by `STARLING_COMM_STATS_DIR` ([`stats_dir`](Self::stats_dir)),
    /// `STARLING_WATCHDOG_SECS` ([`watchdog`](Self::watchdog)) and
    /// `STARLING_SHARE_CORES` ([`share_cores`](Self::share_cores)).
    pub fn from_env() -> Self {
        let r = RankConfig::from_env();
        let stats_dir = std::env::var_os("STARLING_COMM_STATS_DIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from);
        Self {
            runtime: r.runtime,
            stats: r.stats || stats_dir.is_some(),
            stats_dir,
            trace: r.trace,
            priorities: r.priorities,
            max_inflight_sends: r.max_inflight_sends,
            caller_drives: r.caller_drives,
            multiple_send: r.multiple_send,
            eager_limit: r.eager_limit,
            driver: r.driver,
            check_agreement: r.check_agreement,
            watchdog: match std::env::var("STARLING_WATCHDOG_SECS")
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
            {
                Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
                Some(_) => None,
                None => Self::default().watchdog,
            },
            trace_file: r.trace_file,
            progress: r.progress,
            tables: r.tables,
            // A worker count given (`STARLING_NCPU`) is each rank's, not shared.
            share_cores: std::env::var_os("STARLING_NCPU").is_none()
                && !std::env::var("STARLING_SHARE_CORES")
                    .is_ok_and(|v| matches!(v.trim(), "0" | "false" | "off" | "no")),
            ..Self::default()
        }
    }

    /// This configuration for `ranks` in-process ranks: with
    /// [`share_cores`](Self::share_cores) and the default worker count, each rank's share
    /// of the cores; and whether the ranks outnumber the cores
    /// ([`RuntimeConfig::crowded`], unless `STARLING_CROWDED` says).
    pub fn for_ranks(mut self, ranks: u32) -> Self {
        let all = RuntimeConfig::default().workers;
        if self.share_cores && ranks > 1 && self.runtime.workers == all {
            self.runtime.workers = (all / ranks as usize).max(all.min(2));
        }
        // Whether the ranks outnumber the cores ([`RuntimeConfig::crowded`]).
        self.runtime = self.runtime.crowded_by(ranks as usize, all);
        self
    }

    /// The part of the configuration every rank gets.
    pub fn rank_config(&self) -> RankConfig {
        RankConfig {
            runtime: self.runtime.clone(),
            communication_tag: self.communication_tag,
            stats: self.stats || self.stats_dir.is_some(),
            trace: self.trace,
            pedantic_isend: self.pedantic_isend,
            priorities: self.priorities,
            max_inflight_sends: self.max_inflight_sends,
            caller_drives: self.caller_drives,
            multiple_send: self.multiple_send,
            eager_limit: self.eager_limit,
            // The in-process transport does not offer the fast path.
            fast_limit: 0,
            driver: self.driver,
            // The in-process transport copies every payload anyway.
            in_place_min: usize::MAX,
            check_agreement: self.check_agreement,
            tables: self.tables,
            trace_file: self.trace_file.clone(),
            progress: self.progress,
        }
    }
}

/// What every rank of a cluster shares, to agree on shutdown.
///
/// Its atomics and its `probes` lock come from [`crate::sync`], so that the loom model
/// `progress::models::loom_the_cluster_is_not_stuck_while_a_message_is_in_flight_or_queued`
/// runs the real [`Quiesce::stuck`]. The `rendezvous` barrier stays `std`'s (`loom` has
/// none; no model goes past it).
pub(crate) struct Quiesce {
    ranks: u32,
    /// Ranks whose application function returned.
    pub(crate) at_shutdown: AtomicUsize,
    /// The in-process transport's count of messages sent and not yet accepted, over all
    /// ranks.
    in_flight: Arc<AtomicUsize>,
    /// Each rank's runtime and progression-thread witness, as it starts.
    pub(crate) probes: Mutex<Vec<(Runtime, Arc<progress::Shared>)>>,
    rendezvous: std::sync::Barrier,
    /// Some rank's requests could never complete at shutdown.
    any_stuck: AtomicBool,
    /// The ranks' reports at a stuck shutdown.
    reports: Mutex<Vec<RankReport>>,
    /// What the watchdog found, if it fired.
    fired: Arc<Mutex<Vec<String>>>,
}

impl Quiesce {
    /// What `ranks` ranks share, over the transport's `in_flight` count.
    pub(crate) fn new(ranks: u32, in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            ranks,
            at_shutdown: AtomicUsize::new(0),
            in_flight,
            probes: Mutex::new(Vec::new()),
            rendezvous: std::sync::Barrier::new(ranks as usize),
            any_stuck: AtomicBool::new(false),
            reports: Mutex::new(Vec::new()),
            fired: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A snapshot of the whole cluster's activity: `None` while anything can still move.
    fn idle_snapshot(&self) -> Option<u64> {
        if self.at_shutdown.load(Ordering::SeqCst) < self.ranks as usize
            || self.in_flight.load(Ordering::SeqCst) != 0
        {
            return None;
        }
        let probes = lock(&self.probes);
        let mut epoch = 0u64;
        for (runtime, shared) in probes.iter() {
            // No input queued, and the rank's progress epoch (see `Shared::settled`).
            let settled = shared.settled()?;
            let mut busy = 0;
            runtime.wait_until(Duration::ZERO, |v| {
                busy = v.busy + v.callbacks;
                epoch = epoch.wrapping_add(v.completed);
                true
            });
            if busy != 0 {
                return None;
            }
            epoch = epoch.wrapping_add(settled);
        }
        Some(epoch)
    }

    /// Whether nothing has moved anywhere for `grace`: what is still pending never will.
    ///
    /// Never while a message is in flight between two ranks or an input is queued at
    /// one: the in-process transport counts a message in `in_flight` before it queues
    /// it at the receiver (where `Shared::queued` counts it), and uncounts it only as the
    /// receiver accepts it, before the receiver's drive moves its epoch and uncounts the
    /// input; a snapshot reads `in_flight` before the ranks' witnesses.
    pub(crate) fn stuck(&self, grace: Duration) -> bool {
        let Some(before) = self.idle_snapshot() else {
            return false;
        };
        crate::sync::sleep(grace);
        self.idle_snapshot() == Some(before)
    }
}

/// Runs `f` as an SPMD program on `ranks` ranks held in this process (the embedded
/// default: no MPI needed), with the configuration from the environment.
///
/// Each rank gets its own [`Context`] — its own data, workers and progression thread —
/// and they share nothing but the in-process transport. When `f` returns on a rank, the
/// rank waits for its tasks and requests, then every rank meets the others and checks
/// what is left.
///
/// # Errors
/// [`ShutdownError`] listing what the ranks left behind: messages never received
/// (source, tag, size), receives that never completed, requests never waited on. A rank
/// whose requests can never complete does not hang the job: once nothing has moved
/// anywhere, its leftovers are reported.
///
/// # Panics
/// When `ranks` is 0, or when `f` panics on a rank (after the other ranks shut down).
pub fn run_local<R, F>(ranks: u32, f: F) -> Result<Vec<R>, ShutdownError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    let fake = |v: &str| std::env::var(v).ok().and_then(|s| s.parse::<u32>().ok());
    if let (Some(rank), Some(size)) = (
        fake("STARLING_MPI_FAKE_RANK"),
        fake("STARLING_MPI_FAKE_SIZE"),
    ) {
        return run_fake(Rank(rank), size, ClusterConfig::from_env(), f).map(|r| vec![r]);
    }
    run_local_with(ranks, ClusterConfig::from_env(), f)
}

/// Runs `f` once, in this process, as rank `rank` of a job of `size` ranks that does not
/// exist: every insert is planned as that rank would plan it and every communication is
/// dropped (the reference's `STARPU_MPI_FAKE_RANK` / `STARPU_MPI_FAKE_SIZE`, which
/// [`run_local`] honours too). With kernels disabled (`RuntimeConfig::disable_kernels`,
/// `STARLING_DISABLE_KERNELS=1`) it measures one rank's submission cost.
///
/// # Errors
/// [`ShutdownError`] for panicking tasks or requests never waited on.
///
/// # Panics
/// When `rank >= size`, or when `f` panics.
pub fn run_fake<R, F>(
    rank: Rank,
    size: u32,
    config: ClusterConfig,
    f: F,
) -> Result<R, ShutdownError>
where
    F: FnOnce(&Context) -> R,
{
    assert!(rank.0 < size, "the fake rank must be below the fake size");
    let mut runner = solo(&config);
    runner.fake(rank, size);
    let r = f(runner.context());
    runner.context().wait_for_all();
    let leftovers = runner.leftovers();
    let failures = runner.failures();
    runner.stop();
    if leftovers.is_empty() {
        Ok(r)
    } else {
        Err(ShutdownError {
            leftovers,
            failures,
        })
    }
}

/// A world of one rank in this process, started (the fake rank's, and the application
/// context of master-slave mode's master).
pub(crate) fn solo(config: &ClusterConfig) -> RankRunner {
    let inbox = Inbox::<InProcessWire>::new();
    let tx = InboxTx::new(inbox.tx.clone(), Arc::clone(&inbox.shared));
    let deliver: Deliver = Arc::new(move |w| tx.send(Input::Net(w)));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let tag_ub = config.tag_ub;
    let make = move || {
        Ok::<_, core::convert::Infallible>(InProcess::new(
            Rank(0),
            vec![deliver],
            tag_ub,
            in_flight,
        ))
    };
    RankRunner::start_with_inbox(make, inbox, &config.rank_config())
        .expect("a one-rank world starts")
}

/// [`run_local`] with an explicit configuration.
///
/// # Errors
/// As for [`run_local`].
///
/// # Panics
/// As for [`run_local`], and when the configuration's tag bound leaves no room for the
/// communication tag.
pub fn run_local_with<R, F>(
    ranks: u32,
    config: ClusterConfig,
    f: F,
) -> Result<Vec<R>, ShutdownError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    assert!(ranks > 0, "a cluster needs at least one rank");
    let config = config.for_ranks(ranks);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let inboxes: Vec<Inbox<InProcessWire>> = (0..ranks).map(|_| Inbox::new()).collect();
    let delivers: Vec<Deliver> = inboxes
        .iter()
        .map(|inbox| {
            let tx = InboxTx::new(inbox.tx.clone(), Arc::clone(&inbox.shared));
            let d: Deliver = Arc::new(move |w| tx.send(Input::Net(w)));
            d
        })
        .collect();
    let quiesce = Arc::new(Quiesce::new(ranks, Arc::clone(&in_flight)));
    let board = Arc::new(Board::new(ranks));
    let (probe_tx, probe_rx) = std::sync::mpsc::channel::<Probe>();
    let f = Arc::new(f);
    let mut threads = Vec::new();
    for (r, inbox) in inboxes.into_iter().enumerate() {
        let rank = Rank(r as u32);
        let delivers = delivers.clone();
        let in_flight = Arc::clone(&in_flight);
        let tag_ub = config.tag_ub;
        let make = move || {
            Ok::<_, core::convert::Infallible>(InProcess::new(rank, delivers, tag_ub, in_flight))
        };
        let config = config.clone();
        let quiesce = Arc::clone(&quiesce);
        let f = Arc::clone(&f);
        let board = Arc::clone(&board);
        let probe_tx = probe_tx.clone();
        threads.push(
            thread::Builder::new()
                .name(format!("rank{r}"))
                .stack_size(32 << 20)
                .spawn(move || {
                    let runner = RankRunner::start_with_inbox(make, inbox, &config.rank_config())
                        .expect("an in-process rank starts");
                    lock(&runner.context().dist).agreement.board = Some(board);
                    let _ = probe_tx.send(runner.probe());
                    drop(probe_tx);
                    rank_main(runner, &config, &quiesce, &*f)
                })
                .expect("spawning a rank thread"),
        );
    }
    drop(probe_tx);
    let watchdog = config.watchdog.map(|timeout| {
        // Every rank's probe (fewer if a rank failed to start: it panics on its own).
        let probes: Vec<Probe> = probe_rx.iter().take(ranks as usize).collect();
        let fired = Arc::clone(&quiesce.fired);
        let in_flight = Arc::clone(&in_flight);
        Watchdog::start(
            probes,
            timeout,
            move || in_flight.load(Ordering::SeqCst) as u64,
            move |probes, idle| {
                let reports: Vec<RankReport> = probes.iter().map(Probe::report).collect();
                let mut lines = vec![format!(
                    "watchdog: nothing progressed for {:.1} s while requests were pending \
                     (ClusterConfig::watchdog, STARLING_WATCHDOG_SECS); giving up",
                    idle.as_secs_f64()
                )];
                lines.extend(hang::explain_and_keep(ranks, &reports, &hang::hang_dir()));
                let text = hang::join(&lines);
                eprintln!("[starling] {text}");
                for p in probes {
                    p.abandon(&text);
                }
                lock(&fired).extend(lines);
            },
        )
    });
    let mut results = Vec::new();
    let mut leftovers = Vec::new();
    let mut failures = Vec::new();
    let mut panic = None;
    for t in threads {
        match t.join() {
            Ok((r, mut left, mut failed)) => {
                results.push(r);
                leftovers.append(&mut left);
                failures.append(&mut failed);
            }
            Err(p) => panic = Some(p),
        }
    }
    if let Some(w) = watchdog {
        w.stop();
    }
    // What the watchdog found comes first.
    leftovers.splice(
        0..0,
        core::mem::take(&mut *lock(&quiesce.fired))
            .into_iter()
            .map(Leftover::Watchdog),
    );
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    if !leftovers.is_empty() {
        return Err(ShutdownError {
            leftovers,
            failures,
        });
    }
    Ok(results.into_iter().flatten().collect())
}

fn rank_main<R, F>(
    runner: RankRunner,
    config: &ClusterConfig,
    quiesce: &Quiesce,
    f: &F,
) -> (Option<R>, Vec<Leftover>, Vec<(Rank, TransferError)>)
where
    F: Fn(&Context) -> R,
{
    let runtime = runner.runtime().clone();
    let shared = Arc::clone(&runner.shared);
    let rank = runner.context().rank();
    lock(&quiesce.probes).push((runtime.clone(), Arc::clone(&shared)));

    let outcome = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| f(runner.context())));

    // Shutdown: wait for this rank's work, or until nothing moves anywhere.
    quiesce.at_shutdown.fetch_add(1, Ordering::SeqCst);
    let mut stuck = false;
    while !runtime.wait_until(Duration::from_millis(10), |v| v.outstanding == 0) {
        if quiesce.stuck(config.shutdown_grace) {
            stuck = true;
            quiesce.any_stuck.store(true, Ordering::SeqCst);
            break;
        }
    }
    quiesce.rendezvous.wait();
    // Every rank is done sending: let the network drain before looking for orphans.
    while quiesce.in_flight.load(Ordering::SeqCst) != 0 || shared.queued.load(Ordering::SeqCst) != 0
    {
        thread::sleep(Duration::from_millis(1));
    }
    let mut leftovers = runner.leftovers();
    let failures = runner.failures();
    if stuck {
        let mut outstanding = 0;
        runtime.wait_until(Duration::ZERO, |v| {
            outstanding = v.outstanding;
            true
        });
        // (Declared stuck, then done after all: nothing is left to report.)
        if outstanding > 0 {
            leftovers.push(Leftover::Incomplete { rank, outstanding });
        }
    }
    // Why they could not: every rank reports, one rank merges (below).
    let explain = quiesce.any_stuck.load(Ordering::SeqCst) && lock(&quiesce.fired).is_empty();
    if explain {
        // Asked before taking the lock: the report waits for this rank's threads.
        let report = runner.probe().report();
        lock(&quiesce.reports).push(report);
    }
    // Statistics on from the start, or switched on at run time by the application.
    if let Some(report) = runner.stats_report() {
        eprint!("{report}");
        if let Some(dir) = &config.stats_dir {
            let path = dir.join(format!("rank{}.txt", rank.0));
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &report))
            {
                eprintln!(
                    "starling: rank {}: cannot write {}: {e}",
                    rank.0,
                    path.display()
                );
            }
        }
    }
    quiesce.rendezvous.wait();
    if explain && rank.0 == 0 {
        let reports = lock(&quiesce.reports);
        let why = hang::explain_and_keep(quiesce.ranks, &reports, &hang::hang_dir());
        leftovers.splice(0..0, why.into_iter().map(Leftover::Why));
    }
    runner.stop();
    match outcome {
        Ok(r) => (Some(r), leftovers, failures),
        Err(p) => std::panic::resume_unwind(p),
    }
}
