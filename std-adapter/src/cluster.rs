//! The in-process cluster: N ranks as threads of one process (the embedded default).

use core::time::Duration;
use std::sync::mpsc;
use std::thread;

use starling_core::Rank;
use starling_core::engine::Leftover;
use starling_core::tags::{DEFAULT_BASE, MIN_TAG_UB, TagSpace};

use crate::context::Context;
use crate::error::ShutdownError;
use crate::progress::{self, Command, Input, ProgressConfig};
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};
use crate::task::{Runtime, RuntimeConfig, env_flag};
use crate::transport::{Deliver, InProcess, InProcessWire};

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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            runtime: RuntimeConfig::default(),
            tag_ub: MIN_TAG_UB,
            communication_tag: DEFAULT_BASE,
            stats: false,
            trace: false,
            pedantic_isend: false,
            shutdown_grace: Duration::from_millis(50),
            priorities: true,
            max_inflight_sends: 10,
        }
    }
}

impl ClusterConfig {
    /// The defaults, overridden by the environment: `STARLING_NCPU`,
    /// `STARLING_DISABLE_KERNELS`, `STARLING_COMM_STATS` (or its 1.4 name
    /// `STARLING_MPI_STATS`), `STARLING_MPI_COMM`, `STARLING_MPI_PRIORITIES=0`,
    /// `STARLING_MPI_NDETACHED_SEND`. A flag is on when set to anything but empty or `0`.
    pub fn from_env() -> Self {
        let mut c = Self {
            runtime: RuntimeConfig::from_env(),
            stats: env_flag("STARLING_COMM_STATS") || env_flag("STARLING_MPI_STATS"),
            trace: env_flag("STARLING_MPI_COMM"),
            ..Self::default()
        };
        if std::env::var("STARLING_MPI_PRIORITIES").is_ok_and(|v| v == "0") {
            c.priorities = false;
        }
        if let Some(n) = std::env::var("STARLING_MPI_NDETACHED_SEND")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.max_inflight_sends = n;
        }
        c
    }
}

/// What every rank of a cluster shares, to agree on shutdown.
struct Quiesce {
    ranks: u32,
    at_shutdown: AtomicUsize,
    in_flight: Arc<AtomicUsize>,
    probes: Mutex<Vec<(Runtime, Arc<progress::Shared>)>>,
    rendezvous: std::sync::Barrier,
}

impl Quiesce {
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
            if shared.queued.load(Ordering::SeqCst) != 0 {
                return None;
            }
            let mut busy = 0;
            runtime.wait_until(Duration::ZERO, |v| {
                busy = v.busy;
                epoch = epoch.wrapping_add(v.completed);
                true
            });
            if busy != 0 {
                return None;
            }
            epoch = epoch.wrapping_add(shared.epoch.load(Ordering::SeqCst));
        }
        Some(epoch)
    }

    /// Whether nothing has moved anywhere for `grace`: what is still pending never will.
    fn stuck(&self, grace: Duration) -> bool {
        let Some(before) = self.idle_snapshot() else {
            return false;
        };
        thread::sleep(grace);
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
    run_local_with(ranks, ClusterConfig::from_env(), f)
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
    let tags = TagSpace::with_base(config.communication_tag, config.tag_ub)
        .expect("the tag bound leaves room for the communication tag");
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut inboxes = Vec::new();
    let mut senders = Vec::new();
    let mut shareds = Vec::new();
    for _ in 0..ranks {
        let (tx, rx) = mpsc::channel::<Input<InProcessWire>>();
        senders.push(tx);
        inboxes.push(rx);
        shareds.push(Arc::new(progress::Shared::new()));
    }
    let delivers: Vec<Deliver> = senders
        .iter()
        .zip(&shareds)
        .map(|(tx, shared)| {
            let tx = Mutex::new(tx.clone());
            let shared = Arc::clone(shared);
            let d: Deliver = Arc::new(move |w| {
                shared.queued.fetch_add(1, Ordering::SeqCst);
                let _ = lock(&tx).send(Input::Net(w));
            });
            d
        })
        .collect();
    let quiesce = Arc::new(Quiesce {
        ranks,
        at_shutdown: AtomicUsize::new(0),
        in_flight: Arc::clone(&in_flight),
        probes: Mutex::new(Vec::new()),
        rendezvous: std::sync::Barrier::new(ranks as usize),
    });
    let f = Arc::new(f);
    let mut threads = Vec::new();
    for (r, inbox) in inboxes.into_iter().enumerate() {
        let rank = Rank(r as u32);
        let transport = InProcess::new(
            rank,
            delivers.clone(),
            config.tag_ub,
            Arc::clone(&in_flight),
        );
        let tx = Mutex::new(senders[r].clone());
        let shared = Arc::clone(&shareds[r]);
        let config = config.clone();
        let quiesce = Arc::clone(&quiesce);
        let f = Arc::clone(&f);
        threads.push(
            thread::Builder::new()
                .name(format!("rank{r}"))
                .spawn(move || {
                    rank_main(
                        rank, ranks, transport, inbox, tx, shared, tags, &config, &quiesce, &*f,
                    )
                })
                .expect("spawning a rank thread"),
        );
    }
    let mut results = Vec::new();
    let mut leftovers = Vec::new();
    let mut panic = None;
    for t in threads {
        match t.join() {
            Ok((r, mut left)) => {
                results.push(r);
                leftovers.append(&mut left);
            }
            Err(p) => panic = Some(p),
        }
    }
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    if !leftovers.is_empty() {
        return Err(ShutdownError { leftovers });
    }
    Ok(results.into_iter().flatten().collect())
}

#[allow(clippy::too_many_arguments)] // one rank's whole world, passed once
fn rank_main<R, F>(
    rank: Rank,
    size: u32,
    transport: InProcess,
    inbox: mpsc::Receiver<Input<InProcessWire>>,
    tx: Mutex<mpsc::Sender<Input<InProcessWire>>>,
    shared: Arc<progress::Shared>,
    tags: TagSpace,
    config: &ClusterConfig,
    quiesce: &Quiesce,
    f: &F,
) -> (Option<R>, Vec<String>)
where
    F: Fn(&Context) -> R,
{
    let (runtime, workers) = Runtime::start(&config.runtime, &format!("rank{}", rank.0));
    let progress_config = ProgressConfig {
        tags,
        stats: config.stats,
        trace: config.trace,
        priorities: config.priorities,
        max_inflight_sends: config.max_inflight_sends,
    };
    let pshared = Arc::clone(&shared);
    let progression = thread::Builder::new()
        .name(format!("rank{}-progress", rank.0))
        .stack_size(16 << 20)
        .spawn(move || progress::run(transport, inbox, progress_config, pshared))
        .expect("spawning the progression thread");
    let sink_shared = Arc::clone(&shared);
    let commands: crate::context::CommandSink = Arc::new(move |c: Command| {
        sink_shared.queued.fetch_add(1, Ordering::SeqCst);
        let _ = lock(&tx).send(Input::Command(c));
    });
    let ctx = Context::new(
        rank,
        size,
        runtime.clone(),
        commands,
        config.pedantic_isend,
        config.communication_tag,
    );
    lock(&quiesce.probes).push((runtime.clone(), Arc::clone(&shared)));

    let outcome = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| f(&ctx)));

    // Shutdown: wait for this rank's work, or until nothing moves anywhere.
    quiesce.at_shutdown.fetch_add(1, Ordering::SeqCst);
    let mut stuck = false;
    while !runtime.wait_until(Duration::from_millis(10), |v| v.outstanding == 0) {
        if quiesce.stuck(config.shutdown_grace) {
            stuck = true;
            break;
        }
    }
    quiesce.rendezvous.wait();
    // Every rank is done sending: let the network drain before looking for orphans.
    while quiesce.in_flight.load(Ordering::SeqCst) != 0 || shared.queued.load(Ordering::SeqCst) != 0
    {
        thread::sleep(Duration::from_millis(1));
    }
    let mut leftovers: Vec<String> = ask(&ctx, Command::Leftovers)
        .into_iter()
        .map(|l| describe(rank, &l))
        .collect();
    leftovers.extend(
        lock(&ctx.reports)
            .drain(..)
            .map(|w| format!("rank {}: {w}", rank.0)),
    );
    leftovers.extend(
        runtime
            .take_panics()
            .into_iter()
            .map(|p| format!("rank {}: {p}", rank.0)),
    );
    if stuck {
        let mut outstanding = 0;
        runtime.wait_until(Duration::ZERO, |v| {
            outstanding = v.outstanding;
            true
        });
        leftovers.push(format!(
            "rank {}: {outstanding} task(s) or request(s) could never complete",
            rank.0
        ));
    }
    if config.stats {
        eprint!("{}", ask(&ctx, Command::Report));
    }
    quiesce.rendezvous.wait();
    (ctx.commands)(Command::Stop);
    let _ = progression.join();
    workers.stop();
    match outcome {
        Ok(r) => (Some(r), leftovers),
        Err(p) => std::panic::resume_unwind(p),
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

fn describe(rank: Rank, l: &Leftover) -> String {
    match l {
        Leftover::Orphan(o) => format!(
            "rank {}: message from rank {} with tag {} ({} bytes) was never received",
            rank.0, o.source.0, o.tag.0, o.size
        ),
        Leftover::Pending {
            kind,
            peer,
            tag,
            state,
            ..
        } => format!(
            "rank {}: {kind:?} with rank {} and tag {} never completed ({state})",
            rank.0, peer.0, tag.0
        ),
        Leftover::NotRetired {
            kind, peer, tag, ..
        } => format!(
            "rank {}: {kind:?} with rank {} and tag {} was never waited on",
            rank.0, peer.0, tag.0
        ),
    }
}
