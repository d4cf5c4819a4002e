//! The task runtime of one rank: codelets, implicit dependencies, the worker pool.
//!
//! Everything the application submits on a rank — a task, a send, a receive, an
//! acquisition — is a **node** that accesses handles with access modes. Nodes are ordered
//! per handle by *sequential consistency* (the reference's implicit dependencies): a node
//! that reads a handle waits for the last node that wrote it; a node that writes it waits
//! for the last writer and for every reader since. Reads therefore run concurrently and
//! writes serialize, in submission order. A handle can opt out
//! ([`crate::Context::set_sequential_consistency`]); `SCRATCH` accesses never wait.
//! `COMMUTE` and `REDUX` accesses are ordered like writes (a legal schedule of
//! commuting writes).
//!
//! A node whose dependencies are met either joins the **ready queue** (a task: the
//! highest priority first, FIFO among equals, run by the worker pool) or runs its
//! **hook** at once (a send packs its data, a receive is handed to the progression
//! thread, an acquisition wakes its caller). A hook node completes when its event
//! happens, through [`Runtime::complete`].

use core::fmt;
use std::collections::HashMap;

use smallvec::SmallVec;
use starling_core::{AccessMode, DataId};

use crate::error::{TaskError, TransferError};
use crate::id_hash::IdMap;
use crate::runtime::by_id::ById;
use crate::runtime::codelet::DeviceTask;
pub(crate) use crate::runtime::codelet::{Access, Finish, KernelTime, panic_text};
pub use crate::runtime::codelet::{Buffers, Codelet, Kernel};
use crate::runtime::data::{AnyCell, is_temporary};
use crate::runtime::device::Layers;
use crate::runtime::perfmodel::{Arch, Calibrate, Store};
pub(crate) use crate::runtime::ready::NodeId;
use crate::runtime::sched::{SchedPolicy, Scheduler, Target};
use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, HotCondvar, HotGuard, HotLock, Ordering, lock_hot,
    wait_hot, wait_hot_for,
};
use crate::trace::{self, Recorder, WorkerTrace};
use placement::{CURRENT, DeviceEnd};
use slab::Slab;

/// A task tag: tasks and requests can unlock one when they finish, and the application
/// can wait for it (the reference's `starpu_tag_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskTag(pub u64);

/// What runs when a hook node's dependencies are met. It receives the node's id, to pass
/// to [`Runtime::complete`] when its event happens.
pub(crate) type Hook = Box<dyn FnOnce(NodeId) + Send>;

/// A task's completion callback.
pub(crate) type Callback = Box<dyn FnOnce() + Send>;

/// Where a runtime runs its tasks' kernels instead of its own workers (master-slave
/// mode, [`crate::ms`]): the worker that takes a ready task hands it over and goes on at
/// once; the task completes when `finish` is called.
pub(crate) trait Offload: Send + Sync {
    /// Runs a task of `codelet` on `accesses` elsewhere; calls `finish` exactly once.
    fn start(&self, codelet: &Codelet, accesses: Vec<Access>, priority: i32, finish: Finish);

    /// Makes main memory's copy of `cell` valid for an access in `mode` by this process
    /// (an acquisition, an unregistration), then calls `then`.
    fn to_host(&self, cell: Arc<dyn AnyCell>, mode: AccessMode, then: Box<dyn FnOnce() + Send>);

    /// The handle `cell` is unregistered: forget its copies elsewhere.
    fn forget(&self, cell: &Arc<dyn AnyCell>);
}

enum Work {
    Task {
        codelet: Codelet,
        callback: Option<Callback>,
        tag: Option<TaskTag>,
    },
    Hook {
        hook: Hook,
        /// The hook asks the device layers itself how to read its data (a send: a device
        /// value or main memory), instead of main memory being brought up to date before
        /// it.
        own_host: bool,
    },
}

/// Why a node is poisoned: the first failed transfer that its input depends on.
pub(crate) type Poison = Arc<TransferError>;

/// Why a task failed, kept for its [`crate::TaskHandle`] once its node is gone
/// ([`State::task_failures`]).
enum TaskFailure {
    /// It did not run: an input depends on this failed transfer.
    Upstream(Poison),
    /// Its kernel or callback panicked, or its data could not come back from a device.
    Failed(Box<TaskError>),
}

impl TaskFailure {
    fn error(&self) -> TaskError {
        match self {
            Self::Upstream(p) => TaskError::Upstream(Box::new((**p).clone())),
            Self::Failed(e) => (**e).clone(),
        }
    }
}

/// Where `dmda` placed a task and what it expects of it: boxed, and absent under `prio`
/// and `ws`, so that a node takes two cache lines (its slot one 128-byte line pair,
/// `slab.rs`), which the submitting thread writes and a worker on another core reads.
#[derive(Clone, Copy)]
struct Placement {
    /// Where the scheduler placed the task once ready.
    placed: Target,
    /// The duration it expects there.
    expected: Option<f64>,
    /// When it was handed to its device (seconds of the scheduler's clock).
    begin: f64,
}

/// What a new node does ([`Runtime::submit_node_with`]): its work, or a request's hook,
/// which runs unboxed if the node is ready at once and is boxed only to wait.
enum NewWork<F> {
    Work(Work),
    Hook { hook: F, own_host: bool },
}

impl<F> NewWork<F> {
    /// A hook; `own_host`: it asks the device layers for its data itself.
    const fn hook(hook: F, own_host: bool) -> Self {
        Self::Hook { hook, own_host }
    }
}

/// A node of the task graph (a task, or a hook: a request, an acquisition).
struct Node {
    /// Predecessors not completed yet (a count of nodes, far below 2^32).
    deps: u32,
    /// Nodes that wait for this one, in the order they were linked. Two fit in place
    /// (the size of a `Vec`), so a chain of tasks and transfers allocates none for them.
    successors: SmallVec<[NodeId; 2]>,
    priority: i32,
    accesses: Vec<Access>,
    /// `None` once handed to a worker or run.
    work: Option<Work>,
    /// A value this node reads depends on a failed transfer (or, set by
    /// [`Runtime::fail`], this node's own transfer failed): a task does not run, and the
    /// data it writes are poisoned in turn for the nodes after it.
    poison: Option<Poison>,
    /// `dmda`'s placement, once placed.
    placement: Option<Box<Placement>>,
}

impl Node {
    /// Where the scheduler placed the task (`Any` unless `dmda` placed it).
    fn placed(&self) -> Target {
        self.placement.as_ref().map_or(Target::Any, |p| p.placed)
    }

    /// The duration the scheduler expects the task to take where it placed it.
    fn expected(&self) -> Option<f64> {
        self.placement.as_ref().and_then(|p| p.expected)
    }
}

#[derive(Default)]
struct HandleDeps {
    last_writer: Option<NodeId>,
    readers: Vec<NodeId>,
    /// Sequential consistency switched off for this handle.
    unordered: bool,
    /// The value left by the last completed writer depends on a failed transfer: a node
    /// submitted with no writer pending that reads it is poisoned from the start.
    poison: Option<Poison>,
    /// `dmda`'s estimate of where valid copies are, as its placements leave them: bit 0
    /// main memory, bit `d + 1` device slot `d`; 0 is read as "main memory only". An
    /// estimate for the transfer model, never a coherence decision (the device layers
    /// make those).
    copies: u64,
}

impl HandleDeps {
    /// Nothing pending and nothing to remember but `dmda`'s estimate of its copies: a
    /// temporary handle's entry goes then (the estimate goes with it: it only weighs a
    /// transfer, never decides coherence, and under `dmda` it is never 0 once placed,
    /// which kept every temporary handle's entry).
    fn is_idle(&self) -> bool {
        self.last_writer.is_none()
            && self.readers.is_empty()
            && !self.unordered
            && self.poison.is_none()
    }
}

/// Whether an access in `mode` depends on the value before it (R, RW, COMMUTE, REDUX):
/// a poisoned value poisons it. A plain W replaces the value.
fn reads_value(mode: AccessMode) -> bool {
    mode.reads() || mode.intersects(AccessMode::COMMUTE.union(AccessMode::REDUX))
}

/// Whether an access in `mode` produces a new value (W, RW, COMMUTE, REDUX).
fn writes_value(mode: AccessMode) -> bool {
    mode.writes() || mode.contains(AccessMode::COMMUTE)
}

struct State {
    nodes: Slab<Node>,
    /// Each handle's pending accesses, by id: a vector for the application's handles
    /// (submission and completion walk it in the flow's order), a hash map for the
    /// runtime's temporary ones, dropped when nothing of theirs is pending.
    handles: ById<HandleDeps>,
    sched: Scheduler,
    /// Nodes submitted and not complete, plus requests in flight: what `wait_for_all`
    /// waits to reach zero.
    outstanding: usize,
    /// Tasks being run by a worker.
    running: usize,
    /// Nodes completed so far: a witness of progress.
    completed: u64,
    unlocked_tags: HashMap<TaskTag, bool>,
    stopping: bool,
    /// Threads asleep on `progress` for any change.
    progress_waiters: usize,
    /// Threads asleep on `progress` in [`Runtime::wait_for_all`]: they need waking only
    /// when `outstanding` reaches zero (a ring's `wait_for_all` would otherwise be woken
    /// by each of the several completions of every hop, to sleep again at once).
    idle_waiters: usize,
    /// Tasks whose kernel or callback panicked, reported at shutdown.
    panics: Vec<String>,
    /// Tasks submitted and tasks run so far (the progress line).
    tasks_submitted: u64,
    tasks_done: u64,
    /// Failed transfers the task flow depends on, in the order they failed.
    failures: Vec<Poison>,
    /// Why each task that failed or did not run failed, by id, for its handle: a task
    /// that completes without failing leaves nothing (its handle reads "done" from its
    /// node being gone), so a task costs no outcome of its own to allocate, share with
    /// the worker that completes it and free (issue 20). Kept for the runtime's life, as
    /// the failures and panics reported at shutdown are.
    task_failures: IdMap<NodeId, TaskFailure>,
    /// Poisoned tasks made ready and not completed yet (they complete without running).
    skipped: Vec<NodeId>,
    /// Tasks that did not run because an input depended on a failed transfer.
    tasks_skipped: u64,
}

struct Shared {
    state: HotLock<State>,
    /// Worker `w` waits on `work[w]` for ready tasks.
    work: Vec<HotCondvar>,
    /// Counts the tasks queued for the workers (changed under the state lock): a worker
    /// that polls for work before it sleeps reads it without the lock.
    readied: AtomicU64,
    /// The workers are stopping (as `State::stopping`, read without the lock).
    stop: AtomicBool,
    /// `wait_for_all`, tag waiters and quiescence checks wait here.
    progress: HotCondvar,
    disable_kernels: bool,
    /// Called when a task becomes ready (driver mode wakes the progression thread).
    on_ready: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Drives the rank's progress once on the calling thread unless another thread does
    /// (an idle worker polling for work, [`Runtime::set_idle_drive`]).
    idle_drive: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// How many worker threads run tasks.
    threads: usize,
    /// Polls an idle worker makes between two yields of its core
    /// ([`RuntimeConfig::crowded`]).
    polls_per_yield: u32,
    /// The rank's timeline trace, when tracing.
    trace: Option<Arc<Recorder>>,
    /// Where tasks with a kernel run, when not on this runtime's workers.
    offload: std::sync::OnceLock<Arc<dyn Offload>>,
    /// The device layers asked before every host access ([`crate::device`]).
    layers: Layers,
    /// A transfer failed once ([`Runtime::fail`], [`Runtime::record_failure`]): until
    /// then no node can be poisoned, and the checks skip the lock.
    failed: AtomicBool,
    /// The performance models, when used (`dmda`, or `STARLING_CALIBRATE` set).
    models: Option<Arc<Store>>,
    /// Worker `w`'s speed percent (the test hook) and arch.
    speed: Vec<u32>,
    /// Time each task (models, statistics or the speed hook need it).
    measure: bool,
    /// Print the scheduler's statistics at shutdown.
    sched_stats: bool,
    /// The scheduling policy (also in the scheduler: read here without the lock).
    policy: SchedPolicy,
    /// The runtime's name (for reports).
    name: String,
    /// Users' completion callbacks running now ([`Runtime::callback_running`]): busy
    /// for the shutdown's quiescence checks ([`RuntimeView::callbacks`]).
    callbacks: AtomicUsize,
}

/// A user's completion callback runs while this lives ([`Runtime::callback_running`]).
pub(crate) struct CallbackRunning<'a>(&'a AtomicUsize);

impl Drop for CallbackRunning<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The task runtime of one rank. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Runtime {
    shared: Arc<Shared>,
}

/// The worker threads of a runtime; joined by [`Workers::stop`].
pub(crate) struct Workers {
    runtime: Runtime,
    threads: Vec<crate::sync::thread::JoinHandle<()>>,
}

impl Workers {
    /// Stops the workers once the ready queue is empty and joins them.
    pub(crate) fn stop(self) {
        {
            let mut st = lock_hot(&self.runtime.shared.state);
            st.stopping = true;
            self.runtime.shared.stop.store(true, Ordering::Release);
        }
        for w in &self.runtime.shared.work {
            w.notify_all();
        }
        for t in self.threads {
            let _ = t.join();
        }
        // Nothing runs any more: every copy valid only on a device comes home.
        self.runtime.shared.layers.flush();
        let shared = &self.runtime.shared;
        if shared.sched_stats {
            eprint!("{}", lock_hot(&shared.state).sched.report(&shared.name));
        }
        if let Some(models) = &shared.models {
            models.save();
        }
    }
}

impl Runtime {
    /// A runtime and its started workers.
    #[cfg(test)]
    pub(crate) fn start(config: &RuntimeConfig, name: &str) -> (Self, Workers) {
        Self::start_threads(config, name, config.workers.max(1), None)
    }

    /// A runtime and its started workers, recording what they run into `trace`.
    pub(crate) fn start_traced(
        config: &RuntimeConfig,
        name: &str,
        trace: Option<Arc<Recorder>>,
    ) -> (Self, Workers) {
        Self::start_threads(config, name, config.workers.max(1), trace)
    }

    /// A runtime and `threads` started workers (0 in driver mode with one worker: the
    /// progression thread runs the tasks, [`Runtime::try_run_one`]), recording what they
    /// run into `trace`.
    pub(crate) fn start_threads(
        config: &RuntimeConfig,
        name: &str,
        threads: usize,
        trace: Option<Arc<Recorder>>,
    ) -> (Self, Workers) {
        let speed: Vec<u32> = (0..threads).map(|w| config.speed(w)).collect();
        let arch: Vec<Arch> = speed.iter().map(|&p| Arch::cpu_at(p)).collect();
        let policy = Scheduler::effective(config.sched, threads);
        let models = (policy == SchedPolicy::Dmda || config.calibrate.is_some()).then(|| {
            Store::open(
                config.model_home.as_deref(),
                config.calibrate.unwrap_or_default(),
            )
        });
        let state = State {
            nodes: Slab::default(),
            handles: ById::new(),
            sched: {
                let mut sched = Scheduler::new(config.sched, &arch);
                sched.count_on_pollers(config.is_crowded());
                sched
            },
            outstanding: 0,
            running: 0,
            completed: 0,
            unlocked_tags: HashMap::new(),
            stopping: false,
            progress_waiters: 0,
            idle_waiters: 0,
            panics: Vec::new(),
            tasks_submitted: 0,
            tasks_done: 0,
            failures: Vec::new(),
            task_failures: IdMap::default(),
            skipped: Vec::new(),
            tasks_skipped: 0,
        };
        let runtime = Self {
            shared: Arc::new(Shared {
                state: HotLock::new(state),
                work: (0..threads).map(|_| HotCondvar::new()).collect(),
                readied: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                progress: HotCondvar::new(),
                disable_kernels: config.disable_kernels,
                on_ready: std::sync::OnceLock::new(),
                idle_drive: std::sync::OnceLock::new(),
                trace,
                threads,
                polls_per_yield: config.polls_per_yield(),
                offload: std::sync::OnceLock::new(),
                layers: Layers::default(),
                failed: AtomicBool::new(false),
                measure: models.is_some() || config.sched_stats || speed.iter().any(|&p| p < 100),
                models,
                speed,
                sched_stats: config.sched_stats,
                policy: Scheduler::effective(config.sched, threads),
                name: name.to_owned(),
                callbacks: AtomicUsize::new(0),
            }),
        };
        let threads = (0..threads)
            .map(|w| {
                let rt = runtime.clone();
                let hook = config.on_worker_start.clone();
                crate::sync::thread::Builder::new()
                    .name(format!("{name}-worker{w}"))
                    .spawn(move || {
                        if let Some(hook) = hook {
                            (hook.0)(w);
                        }
                        rt.worker_loop(w as u32);
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        let workers = Workers {
            runtime: runtime.clone(),
            threads,
        };
        (runtime, workers)
    }

    fn state(&self) -> HotGuard<'_, State> {
        lock_hot(&self.shared.state)
    }

    /// The rank's timeline trace, when tracing.
    pub(crate) fn tracer(&self) -> Option<&Arc<Recorder>> {
        self.shared.trace.as_ref()
    }

    /// Tasks run and tasks submitted so far.
    pub(crate) fn task_counts(&self) -> (u64, u64) {
        let st = self.state();
        (st.tasks_done, st.tasks_submitted)
    }

    /// Submits a task, and returns its id: [`Runtime::task_outcome`] says how it ended
    /// once it completed, `Ok` when it ran, [`TaskError`] when it did not run (a failed
    /// transfer upstream) or failed.
    pub(crate) fn submit_task(
        &self,
        codelet: Codelet,
        accesses: Vec<Access>,
        priority: i32,
        callback: Option<Callback>,
        tag: Option<TaskTag>,
    ) -> NodeId {
        if let Some(device) = codelet.device() {
            if self.shared.layers.attach(&device.layer) {
                self.measure_bus(&device.layer);
            }
        }
        let work = Work::Task {
            codelet,
            callback,
            tag,
        };
        self.submit_node(work, accesses, priority, 0)
    }

    /// How task `id` (of [`Runtime::submit_task`]) ended, `None` while it has not
    /// completed. A node id names its node until it completes and nothing after
    /// (`task/slab.rs`), and a failure is recorded before its task completes.
    fn outcome_in(st: &State, id: NodeId) -> Option<Result<(), TaskError>> {
        if st.nodes.get(&id).is_some() {
            return None;
        }
        Some(st.task_failures.get(&id).map_or(Ok(()), |f| Err(f.error())))
    }

    /// [`Runtime::outcome_in`], without waiting.
    pub(crate) fn task_outcome(&self, id: NodeId) -> Option<Result<(), TaskError>> {
        Self::outcome_in(&self.state(), id)
    }

    /// Blocks until task `id` (of [`Runtime::submit_task`]) completed, and returns how
    /// it ended.
    pub(crate) fn wait_outcome(&self, id: NodeId) -> Result<(), TaskError> {
        let _wait = trace::wait(self.tracer(), "task_wait");
        let mut st = self.state();
        loop {
            if let Some(r) = Self::outcome_in(&st, id) {
                return r;
            }
            st = self.wait_progress(st);
        }
    }

    /// Submits a hook node: `hook` runs once the accesses' dependencies are met (on the
    /// submitting thread if they already are), and the node completes when someone calls
    /// [`Runtime::complete`] with its id.
    ///
    /// The hook is boxed only when it must wait: with nothing pending on its handles it
    /// runs at once, from the caller's frame (an acquisition of a free handle, the usual
    /// case, allocates no hook).
    pub(crate) fn submit_hook(
        &self,
        accesses: Vec<Access>,
        priority: i32,
        hook: impl FnOnce(NodeId) + Send + 'static,
    ) {
        self.submit_node_with(NewWork::hook(hook, false), accesses, priority, 0);
    }

    /// [`Runtime::submit_hook`] for a request: also counts the request in flight, as
    /// [`Runtime::begin_request`] does, under the same lock.
    ///
    /// The hook is boxed only when it must wait: with nothing pending on its handles it
    /// runs at once, from the caller's frame (a request posted on a free handle, the
    /// usual case, allocates no hook).
    pub(crate) fn submit_request_hook(
        &self,
        accesses: Vec<Access>,
        priority: i32,
        hook: impl FnOnce(NodeId) + Send + 'static,
    ) {
        self.submit_node_with(NewWork::hook(hook, false), accesses, priority, 1);
    }

    /// [`Runtime::submit_request_hook`] for a send: the hook reads its data itself, asking
    /// the device layers how ([`crate::device::Layers::export`], else `to_host`).
    pub(crate) fn submit_send_hook(
        &self,
        accesses: Vec<Access>,
        priority: i32,
        hook: impl FnOnce(NodeId) + Send + 'static,
    ) {
        self.submit_node_with(NewWork::hook(hook, true), accesses, priority, 1);
    }

    /// Records a host access that could not bring its data back from a device: reported
    /// at shutdown like a failed task.
    pub(crate) fn record_device_failure(&self, what: String) {
        self.state().panics.push(what);
    }

    /// Submits a node, counting `requests` requests in flight with it; its id.
    fn submit_node(
        &self,
        work: Work,
        accesses: Vec<Access>,
        priority: i32,
        requests: usize,
    ) -> NodeId {
        self.submit_node_with(
            NewWork::<fn(NodeId)>::Work(work),
            accesses,
            priority,
            requests,
        )
    }

    /// [`Runtime::submit_node`] for a node's work or a hook that runs unboxed when the
    /// node is ready at once.
    fn submit_node_with<F: FnOnce(NodeId) + Send + 'static>(
        &self,
        work: NewWork<F>,
        accesses: Vec<Access>,
        priority: i32,
        requests: usize,
    ) -> NodeId {
        let mut st = self.state();
        // The id is known before the node goes in: the handles' bookkeeping names it.
        let id = st.nodes.next_id();
        st.outstanding += 1 + requests;
        st.tasks_submitted += u64::from(matches!(work, NewWork::Work(Work::Task { .. })));
        let mut deps = 0;
        let mut poison = None;
        let State { nodes, handles, .. } = &mut *st;
        // Node `p` comes before this one: it gains `id` as a successor, once. Only this
        // call pushes `id`, so a second link to `p` finds it last in `p`'s list. (No list
        // of predecessors is gathered, sorted and deduplicated first: that was an
        // allocation and a free per node.)
        let mut link = |p: NodeId| {
            if let Some(pred) = nodes.get_mut(&p) {
                if pred.successors.last() != Some(&id) {
                    pred.successors.push(id);
                    deps += 1;
                }
            }
        };
        for (i, a) in accesses.iter().enumerate() {
            if a.mode == AccessMode::SCRATCH {
                continue;
            }
            let data = a.cell.id();
            // One handle accessed twice by a node: order it once, by the strongest mode
            // (a SCRATCH access, skipped above, does not count).
            if accesses[..i]
                .iter()
                .any(|b| b.mode != AccessMode::SCRATCH && b.cell.id() == data)
            {
                continue;
            }
            let writes = accesses
                .iter()
                .filter(|b| b.cell.id() == data)
                .any(|b| b.mode.writes() || b.mode.contains(AccessMode::COMMUTE));
            let hd = handles.or_default(data);
            if hd.unordered {
                continue;
            }
            if let Some(w) = hd.last_writer {
                link(w);
            } else if poison.is_none()
                && hd.poison.is_some()
                && accesses
                    .iter()
                    .any(|b| b.cell.id() == data && reads_value(b.mode))
            {
                // No writer pending: the value is the last completed writer's.
                poison.clone_from(&hd.poison);
            }
            if writes {
                for r in hd.readers.drain(..) {
                    link(r);
                }
                hd.last_writer = Some(id);
            } else {
                hd.readers.push(id);
            }
        }
        // A hook ready at once runs from here, unboxed; one that waits is boxed.
        let (work, now) = match work {
            NewWork::Work(w) => (Some(w), None),
            NewWork::Hook { hook, own_host } if deps == 0 => (None, Some((hook, own_host))),
            NewWork::Hook { hook, own_host } => (
                Some(Work::Hook {
                    hook: Box::new(hook),
                    own_host,
                }),
                None,
            ),
        };
        let inserted = st.nodes.insert(Node {
            deps,
            successors: SmallVec::new(),
            priority,
            accesses,
            work,
            poison,
            placement: None,
        });
        debug_assert_eq!(inserted, id);
        let mut hooks = Hooks::default();
        let mut now_host = Vec::new();
        if deps == 0 {
            match &now {
                Some((_, own_host)) => now_host = self.hook_host(&mut st, id, *own_host),
                None => self.make_ready(&mut st, id, &mut hooks),
            }
            self.complete_skipped(&mut st, &mut hooks);
        }
        drop(st);
        // (this node's hook first, as `make_ready` would have queued it)
        if let Some((hook, _)) = now {
            self.run_hook(id, hook, &now_host);
        }
        self.run_hooks(hooks);
        id
    }

    /// What the device layers bring to main memory before hook node `id` runs: its
    /// accesses when a layer is attached and the hook does not ask the layers itself
    /// (`own_host`), else nothing. Under `dmda`, the transfer estimate notes main memory
    /// as holding a copy.
    fn hook_host(&self, st: &mut State, id: NodeId, own_host: bool) -> Vec<Access> {
        let host = match st.nodes.get(&id) {
            Some(node) if self.shared.layers.any() && !own_host => node.accesses.clone(),
            _ => Vec::new(),
        };
        if !host.is_empty() && self.shared.policy == SchedPolicy::Dmda {
            // The layers bring main memory up to date (the transfer estimate).
            for a in &host {
                if let Some(h) = st.handles.get_mut(&a.cell.id()) {
                    h.copies |= 1;
                }
            }
        }
        host
    }

    /// A node's dependencies are met: queue a task, or collect a hook to run unlocked.
    fn make_ready(&self, st: &mut State, id: NodeId, hooks: &mut Hooks) {
        let Some(node) = st.nodes.get_mut(&id) else {
            return;
        };
        match node.work.take() {
            Some(Work::Hook { hook: h, own_host }) => {
                // A hook accesses host memory: the device layers bring it up to date first.
                let host = self.hook_host(st, id, own_host);
                hooks.push(id, h, host);
            }
            Some(task @ Work::Task { .. }) if node.poison.is_some() => {
                // An input depends on a failed transfer: the task does not run (nor its
                // callback); it completes at once, poisoning what it writes.
                node.work = Some(task);
                st.skipped.push(id);
            }
            Some(task @ Work::Task { .. }) => {
                node.work = Some(task);
                let target = if self.shared.policy == SchedPolicy::Dmda {
                    self.place(st, id)
                } else {
                    // `prio` and `ws` need no bookkeeping per task.
                    let priority = node.priority;
                    let from = match self.shared.policy {
                        SchedPolicy::Ws => self.current_worker(),
                        _ => None,
                    };
                    st.sched.push(priority, id, from)
                };
                if let Target::Device(_) = target {
                    // Handed to its device layer once the lock is released.
                    let rt = self.clone();
                    hooks.push(id, Box::new(move |id| rt.start_on_device(id)), Vec::new());
                    return;
                }
                self.shared.readied.fetch_add(1, Ordering::Release);
                if let Some(w) = st.sched.wake(target) {
                    self.shared.work[w].notify_one();
                }
                if let Some(f) = self.shared.on_ready.get() {
                    f();
                }
            }
            None => {}
        }
    }

    /// Completes node `id`: its successors may become ready.
    pub(crate) fn complete(&self, id: NodeId) {
        let mut st = self.state();
        let mut hooks = Hooks::default();
        self.complete_locked(&mut st, id, &mut hooks);
        drop(st);
        self.run_hooks(hooks);
    }

    /// Completes hook node `id` whose transfer failed with `failure`: the failure is
    /// recorded for the rank's reports, and the data the node writes are poisoned, so
    /// that the nodes that read them after it do not run on the stale value.
    pub(crate) fn fail(&self, id: NodeId, failure: TransferError) {
        let failure = Arc::new(failure);
        let mut st = self.state();
        self.shared.failed.store(true, Ordering::SeqCst);
        st.failures.push(Arc::clone(&failure));
        if let Some(node) = st.nodes.get_mut(&id) {
            node.poison = Some(failure);
        }
        let mut hooks = Hooks::default();
        self.complete_locked(&mut st, id, &mut hooks);
        drop(st);
        self.run_hooks(hooks);
    }

    /// Records a failed transfer that poisons no local data (a send): reported like the
    /// others.
    pub(crate) fn record_failure(&self, failure: TransferError) {
        let mut st = self.state();
        self.shared.failed.store(true, Ordering::SeqCst);
        st.failures.push(Arc::new(failure));
        self.notify_progress(&st);
    }

    /// Why hook node `id` must not use its data: a value it reads depends on a failed
    /// transfer. `None` for a node with sound inputs (or unknown).
    pub(crate) fn poison_of(&self, id: NodeId) -> Option<Poison> {
        if !self.any_failure() {
            return None;
        }
        self.state().nodes.get(&id).and_then(|n| n.poison.clone())
    }

    /// Whether a transfer ever failed on this runtime (no lock taken).
    fn any_failure(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// The first failed transfer, if any (no lock taken while there is none).
    pub(crate) fn first_failure(&self) -> Option<Poison> {
        if !self.any_failure() {
            return None;
        }
        self.state().failures.first().cloned()
    }

    /// Why the current value of `data` must not be used, as of the accesses completed so
    /// far: it depends on a failed transfer.
    pub(crate) fn data_poison(&self, data: DataId) -> Option<Poison> {
        self.state()
            .handles
            .get(&data)
            .and_then(|h| h.poison.clone())
    }

    /// The failed transfers so far, oldest first, and how many tasks did not run because
    /// of them.
    pub(crate) fn failures(&self) -> (Vec<Poison>, u64) {
        let st = self.state();
        (st.failures.clone(), st.tasks_skipped)
    }

    fn complete_locked(&self, st: &mut State, id: NodeId, hooks: &mut Hooks) {
        self.complete_one(st, id, hooks);
        self.complete_skipped(st, hooks);
    }

    /// Completes the poisoned tasks made ready, without running them (a worklist, not
    /// recursion: a poison may run down a long chain of tasks).
    fn complete_skipped(&self, st: &mut State, hooks: &mut Hooks) {
        while let Some(id) = st.skipped.pop() {
            st.tasks_skipped += 1;
            st.tasks_done += 1;
            // Its tag is unlocked as if it ran, so that `tag_wait` returns (the failure
            // that skipped it is reported by the waits and at shutdown) instead of hanging.
            let tag = match st
                .nodes
                .get_mut(&id)
                .map(|n| (n.work.take(), n.poison.clone()))
            {
                Some((Some(Work::Task { tag, .. }), poison)) => {
                    // Its handle reads why, once the node is gone.
                    if let Some(p) = poison {
                        st.task_failures.insert(id, TaskFailure::Upstream(p));
                    }
                    tag
                }
                _ => None,
            };
            if let Some(t) = tag {
                st.unlocked_tags.insert(t, true);
            }
            self.complete_one(st, id, hooks);
        }
    }

    fn complete_one(&self, st: &mut State, id: NodeId, hooks: &mut Hooks) {
        let Some(node) = st.nodes.remove(&id) else {
            return;
        };
        for a in &node.accesses {
            if let Some(hd) = st.handles.get_mut(&a.cell.id()) {
                if hd.last_writer == Some(id) {
                    hd.last_writer = None;
                    let data = a.cell.id();
                    if node
                        .accesses
                        .iter()
                        .any(|b| b.cell.id() == data && writes_value(b.mode))
                    {
                        // The value now is this node's: sound, or poisoned with it.
                        hd.poison.clone_from(&node.poison);
                    }
                }
                hd.readers.retain(|r| *r != id);
                if hd.is_idle() && is_temporary(a.cell.id()) {
                    // A temporary handle with nothing pending: nothing to keep (its
                    // entry would otherwise outlive it, one per reduction buffer).
                    st.handles.remove(&a.cell.id());
                }
            }
        }
        for s in node.successors {
            if let Some(succ) = st.nodes.get_mut(&s) {
                if let Some(p) = &node.poison {
                    // A successor that reads a datum this node wrote inherits the poison.
                    if succ.poison.is_none()
                        && succ.accesses.iter().any(|b| {
                            reads_value(b.mode)
                                && node
                                    .accesses
                                    .iter()
                                    .any(|a| writes_value(a.mode) && a.cell.id() == b.cell.id())
                        })
                    {
                        succ.poison = Some(Arc::clone(p));
                    }
                }
                succ.deps -= 1;
                if succ.deps == 0 {
                    self.make_ready(st, s, hooks);
                }
            }
        }
        st.outstanding -= 1;
        st.completed += 1;
        self.notify_progress(st);
    }

    /// Runs the hooks made ready, in order, each once the device layers made main memory's
    /// copies of its accesses valid. A copy that failed is reported at shutdown like a
    /// failed task, so that the run cannot end with `Ok`.
    fn run_hooks(&self, hooks: Hooks) {
        for (id, hook, host) in hooks.first.into_iter().chain(hooks.rest) {
            self.run_hook(id, hook, &host);
        }
    }

    /// Runs hook node `id`'s hook once the device layers brought `host` to main memory.
    fn run_hook(&self, id: NodeId, hook: impl FnOnce(NodeId), host: &[Access]) {
        if !host.is_empty() {
            if let Err(e) = self.shared.layers.to_host(host) {
                self.state()
                    .panics
                    .push(format!("a host access could not bring its data back: {e}"));
            }
        }
        hook(id);
    }

    /// The device layers attached to this runtime.
    pub(crate) fn layers(&self) -> &Layers {
        &self.shared.layers
    }

    /// Wakes the threads waiting on `progress`, if any waits for what may have changed.
    fn notify_progress(&self, st: &State) {
        if st.progress_waiters > 0 || (st.idle_waiters > 0 && st.outstanding == 0) {
            self.shared.progress.notify_all();
        }
    }

    /// Waits on `progress`, counted so that notifiers know someone waits.
    fn wait_progress<'a>(&'a self, mut st: HotGuard<'a, State>) -> HotGuard<'a, State> {
        st.progress_waiters += 1;
        let mut st = wait_hot(&self.shared.progress, st);
        st.progress_waiters -= 1;
        st
    }

    /// Counts a request in flight (so that `wait_for_all` waits for it). Only the
    /// threaded tests use it (none runs under `cfg(loom)`).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn begin_request(&self) {
        self.state().outstanding += 1;
    }

    /// Counts a request on `data` in flight without a node, when it may go without one:
    /// nothing is pending on `data` (no writer, no reader), nothing is remembered of it
    /// (sequential consistency on, its value not poisoned) and no device layer is attached
    /// (main memory holds its value). `false` otherwise: the request takes a node
    /// ([`Runtime::submit_request_hook`]). A blocking transfer, whose caller waits for it
    /// before it submits anything else, takes this path ([`crate::Context`]'s
    /// `wait_send`); [`Runtime::end_request`] ends it.
    pub(crate) fn begin_request_on(&self, data: DataId) -> bool {
        if self.shared.layers.any() {
            return false;
        }
        let mut st = self.state();
        if st.handles.get(&data).is_some_and(|h| !h.is_idle()) {
            return false;
        }
        st.outstanding += 1;
        true
    }

    /// Counts a user's completion callback as running until the guard drops: the
    /// shutdown's quiescence checks count the rank busy meanwhile, so that a callback that
    /// takes its time at shutdown is not taken for a rank where nothing moves.
    pub(crate) fn callback_running(&self) -> CallbackRunning<'_> {
        self.shared.callbacks.fetch_add(1, Ordering::SeqCst);
        CallbackRunning(&self.shared.callbacks)
    }

    /// A request counted by [`Runtime::begin_request_on`] that completed at once,
    /// without a node or a tracked request (a blocking send that left at once): its end
    /// counts as a completion, progress for the watchdog and the quiescence checks.
    pub(crate) fn end_request_at_once(&self) {
        let mut st = self.state();
        st.outstanding -= 1;
        st.completed += 1;
        self.notify_progress(&st);
    }

    /// A request counted by [`Runtime::begin_request`] or [`Runtime::begin_request_on`]
    /// finished.
    pub(crate) fn end_request(&self) {
        let mut st = self.state();
        st.outstanding -= 1;
        self.notify_progress(&st);
    }

    /// Switches sequential consistency for one handle.
    pub(crate) fn set_ordered(&self, data: DataId, ordered: bool) {
        self.state().handles.or_default(data).unordered = !ordered;
    }

    /// Blocks until every node and request submitted so far has completed.
    pub(crate) fn wait_for_all(&self) {
        let _wait = trace::wait(self.tracer(), "wait_for_all");
        let mut st = self.state();
        while st.outstanding > 0 {
            st.idle_waiters += 1;
            st = wait_hot(&self.shared.progress, st);
            st.idle_waiters -= 1;
        }
    }

    /// Blocks until `done` holds or `timeout` passes; returns whether it holds.
    pub(crate) fn wait_until(
        &self,
        timeout: core::time::Duration,
        mut done: impl FnMut(&RuntimeView) -> bool,
    ) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.state();
        loop {
            let view = RuntimeView {
                outstanding: st.outstanding,
                busy: st.running + st.sched.len(),
                callbacks: self.shared.callbacks.load(Ordering::SeqCst),
                completed: st.completed,
            };
            if done(&view) {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            st.progress_waiters += 1;
            st = wait_hot_for(&self.shared.progress, st, deadline - now);
            st.progress_waiters -= 1;
        }
    }

    /// The panics of tasks so far (emptied).
    pub(crate) fn take_panics(&self) -> Vec<String> {
        core::mem::take(&mut self.state().panics)
    }

    /// Marks `tag` unlocked and wakes its waiters.
    pub(crate) fn unlock_tag(&self, tag: TaskTag) {
        let mut st = self.state();
        st.unlocked_tags.insert(tag, true);
        self.notify_progress(&st);
    }

    /// Blocks until every tag of `tags` is unlocked.
    pub(crate) fn wait_tags(&self, tags: &[TaskTag]) {
        let _wait = trace::wait(self.tracer(), "tag_wait");
        let mut st = self.state();
        while !tags
            .iter()
            .all(|t| st.unlocked_tags.get(t).copied().unwrap_or(false))
        {
            st = self.wait_progress(st);
        }
    }

    /// Forgets that `tag` was unlocked, so it can be reused.
    pub(crate) fn reset_tag(&self, tag: TaskTag) {
        self.state().unlocked_tags.remove(&tag);
    }

    /// Calls `f` whenever a task becomes ready (once set, for the rank's life).
    pub(crate) fn set_on_ready(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.shared.on_ready.set(f);
    }

    /// Lets an idle worker that expects work drive the rank's progress while it polls for
    /// it (once set, for the rank's life): a message that makes a task ready is then
    /// taken by the worker that runs the task.
    pub(crate) fn set_idle_drive(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.shared.idle_drive.set(f);
    }

    /// Hands every task with a kernel to `offload` from now on (once set, for the
    /// runtime's life).
    pub(crate) fn set_offload(&self, offload: Arc<dyn Offload>) {
        let _ = self.shared.offload.set(offload);
    }

    /// How many worker threads run tasks.
    pub(crate) fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Where tasks run when not here, if anywhere.
    pub(crate) fn offload(&self) -> Option<&Arc<dyn Offload>> {
        self.shared.offload.get()
    }
}

/// A snapshot of a runtime's activity, for quiescence checks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RuntimeView {
    /// Nodes and requests not complete.
    pub(crate) outstanding: usize,
    /// Tasks running or ready to run.
    pub(crate) busy: usize,
    /// Users' completion callbacks running ([`Runtime::callback_running`]): busy for the
    /// shutdown's quiescence checks, which wait for them; not for the watchdog, which
    /// still explains a callback that never returns.
    pub(crate) callbacks: usize,
    /// Nodes completed so far.
    pub(crate) completed: u64,
}

/// Whether the environment variable `name` is set to something other than empty or `0`.
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Hooks whose nodes became ready under the lock, to run once it is released, in order.
/// The first is kept inline: most completions make at most one hook ready, and then
/// nothing is allocated.
#[derive(Default)]
struct Hooks {
    first: Option<ReadyHook>,
    rest: Vec<ReadyHook>,
}

/// A hook node made ready: its id, its hook, and the accesses the device layers bring to
/// main memory before it runs (empty when no layer is attached).
type ReadyHook = (NodeId, Hook, Vec<Access>);

impl Hooks {
    fn push(&mut self, id: NodeId, hook: Hook, host: Vec<Access>) {
        if self.first.is_none() {
            self.first = Some((id, hook, host));
        } else {
            self.rest.push((id, hook, host));
        }
    }
}

mod config;
mod placement;
mod slab;
mod worker;

pub use config::{RuntimeConfig, WorkerStart};

#[cfg(test)]
mod tests;
