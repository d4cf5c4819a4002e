//! The progression thread: the one thread of a rank that drives the protocol engine.
//!
//! It owns the rank's [`Engine`] and its [`Transport`]. Application threads and workers
//! talk to it only through its inbox ([`Input`]): commands (post a send whose data is
//! packed, post a receive into a handle, a barrier, queries) and, for the in-process
//! transport, the messages peers deliver. Its loop is the adapter loop of the core's
//! driving contract: take inputs, hand them to the engine, drain `poll_transmit` and
//! `poll_event`, perform what they return.

use core::time::Duration;
use std::collections::HashMap;

use starling_core::engine::{
    Arrival, Config, Engine, Event, Leftover, MessageError, RecvArgs, RefusalOrder, RequestError,
    SendArgs, SubmitError, Transmit, UsageError,
};
use starling_core::error::Table;
use starling_core::lists::Key;
use starling_core::request::Kind;
use starling_core::tags::TagSpace;
use starling_core::{CommId, Rank, ReqId};

use self::config::DriverMode;
use crate::admission::{Admission, Admit, Direction};
use crate::data::{AnyCell, DataError};
use crate::device::DeviceValue;
use crate::error::CommError;
use crate::id_hash::IdMap;
use crate::pool::BufferPool;
use crate::sync::{
    self, Arc, AtomicBool, AtomicU64, AtomicUsize, DriveLock, InboxReceiver, InboxSender, Ordering,
    park_timeout, spin_wait, store_load_order, thread,
};
use crate::task::Runtime;
use crate::trace::{CommTrace, Recorder};
use crate::transport::{Completion, SendBuffer, Transport};

/// How long after its last activity a polled transport's progression thread keeps
/// polling without sleeping.
const HOT: Duration = Duration::from_millis(1);

/// The size from which a transfer that holds its handle until it completes anyway (a
/// receive, a blocking send) lends the handle's memory to the transport: the first size
/// that travels as a message of its own (above `eager_limit`), unless `in_place_min` (the
/// configured size for the others, [`crate::RankConfig::in_place_min`]) is smaller or
/// in-place transfers are off (`usize::MAX`).
pub(crate) fn lend_min(in_place_min: usize, eager_limit: u32) -> usize {
    if in_place_min == usize::MAX {
        usize::MAX
    } else {
        in_place_min.min(eager_limit as usize + 1)
    }
}

/// The engine of a rank: 4096 requests, match-key tables of 2048 (of which at most
/// [`MATCH_KEYS`] are used), 256 peers in the statistics.
pub(crate) type RankEngine = Engine<4096, 2048, 256>;

/// The most distinct keys each of a rank's matcher tables holds: half their capacity.
/// The tables are `heapless` index maps, whose probe sequences grow without bound as they
/// fill: a message on a new key (a receive posted, its envelope matched) costs 74 ns with
/// 512 live keys in a table of 1024, 224 ns with 960 and 848 ns with 1023
/// (`cargo bench -p starling-core --bench core -- matcher_fill`). Kept at most half full,
/// a workload with thousands of keys in flight costs per message what one with a few
/// does.
pub(crate) const MATCH_KEYS: usize = 1024;

/// Called once, on the progression thread, when a request finishes.
pub(crate) type Done = Box<dyn FnOnce(Result<(), CommError>) + Send>;

/// What the progression thread is asked to do.
pub(crate) enum Command {
    /// Send `bytes` (a handle's packed value, or its data lent in place).
    Send {
        args: SendArgs,
        bytes: Payload,
        done: Done,
    },
    /// Receive into `cell`.
    Recv {
        args: RecvArgs,
        cell: Arc<dyn AnyCell>,
        done: Done,
    },
    /// A barrier with every rank; `done` runs when it completes.
    Barrier { done: Box<dyn FnOnce() + Send> },
    /// Answer with the bytes sent to each peer (`None`: statistics were never on).
    Amounts(Box<dyn FnOnce(Option<Vec<u64>>) + Send>),
    /// Switch statistics on or off, then answer.
    SetStats(bool, Box<dyn FnOnce(()) + Send>),
    /// Answer with what is left in the engine and what waits outside it.
    Leftovers(Box<dyn FnOnce(Held) + Send>),
    /// Answer with the statistics report (`None`: statistics were never on).
    Report(Box<dyn FnOnce(Option<String>) + Send>),
    /// Answer with how many messages arrived as early data.
    EarlyMessages(Box<dyn FnOnce(u64) + Send>),
    /// Stop the thread.
    Stop,
}

/// What a rank's progression thread holds that did not finish, for the leftovers at
/// shutdown and the hang explainer.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// The engine's leftovers ([`Engine::leftovers`]).
    pub(crate) engine: Vec<Leftover>,
    /// The envelopes kept refused for a full table, as orphans: they arrived, and wait
    /// outside the engine for their receive.
    pub(crate) refused: Vec<Leftover>,
    /// The submissions waiting for room in the engine, oldest first per direction:
    /// (kind, communicator, peer, tag).
    pub(crate) queued: Vec<(Kind, CommId, Rank, starling_core::Tag)>,
}

/// What a send sends.
pub(crate) enum Payload {
    /// Packed bytes, owned.
    Bytes(Vec<u8>),
    /// A handle's data read in place, locked for reading until the send completes.
    Lent(Box<dyn SendBuffer>),
    /// A handle's value on a device, for a transport that carries device values.
    Device(DeviceValue),
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::Lent(l) => l.bytes().len(),
            Self::Device(v) => v.size(),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Self::Bytes(b) => b,
            Self::Lent(l) => l.bytes(),
            // Never inline: a device value is sent only above the in-place size.
            Self::Device(_) => &[],
        }
    }
}

/// One item of a progression thread's inbox.
pub(crate) enum Input<W> {
    /// From this rank's threads.
    Command(Command),
    /// From a peer (in-process transport).
    Net(W),
}

enum Pending {
    Send {
        bytes: Option<Payload>,
        done: Done,
    },
    Recv {
        cell: Arc<dyn AnyCell>,
        bytes: Option<Vec<u8>>,
        /// Bytes received straight into the handle's data, when received in place.
        in_place: Option<usize>,
        /// A device value received in place of bytes.
        device: Option<DeviceValue>,
        done: Done,
    },
}

/// What the progression thread shares with the rest of the rank.
pub(crate) struct Shared {
    /// Inputs sent to the inbox and not yet processed.
    pub(crate) queued: AtomicUsize,
    /// A command was handed straight to the engine ([`Drive::post`]) and not driven out
    /// yet: like a queued input, it needs a drive.
    posted: AtomicBool,
    /// Incremented whenever the rank's progress was driven: a quiescence witness.
    pub(crate) epoch: AtomicU64,
    /// Threads driving progress themselves while they wait ([`Drive`]); the progression
    /// thread stands back while there are any.
    drivers: AtomicUsize,
    /// The progression thread, to wake when an input arrives.
    thread: std::sync::OnceLock<thread::Thread>,
    /// The rank's recycled transfer buffers.
    pub(crate) pool: Arc<BufferPool>,
    /// The rank's task runtime, once started: in driver mode the progression thread runs
    /// its tasks.
    pub(crate) runtime: std::sync::OnceLock<Runtime>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            queued: AtomicUsize::new(0),
            posted: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            drivers: AtomicUsize::new(0),
            thread: std::sync::OnceLock::new(),
            pool: Arc::new(BufferPool::new()),
            runtime: std::sync::OnceLock::new(),
        }
    }

    /// Wakes the progression thread if it sleeps (cheap when it does not).
    pub(crate) fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// The rank's quiescence witness: `None` while an input is queued, else the progress
    /// epoch. Two equal witnesses taken apart mean that no input was queued at the first
    /// and none was taken in between.
    pub(crate) fn settled(&self) -> Option<u64> {
        // A command posted straight to the engine and not yet driven out is unsettled
        // work, like a queued input.
        if self.queued.load(Ordering::SeqCst) != 0 || self.posted.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.epoch.load(Ordering::SeqCst))
    }
}

/// The sending end of a progression thread's inbox: counts the input, queues it and
/// wakes the thread.
pub(crate) struct InboxTx<W> {
    tx: InboxSender<Input<W>>,
    shared: Arc<Shared>,
}

impl<W> InboxTx<W> {
    pub(crate) fn new(tx: InboxSender<Input<W>>, shared: Arc<Shared>) -> Self {
        Self { tx, shared }
    }

    /// Queues `input` and wakes the progression thread.
    pub(crate) fn send(&self, input: Input<W>) {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let sent = self.tx.send(input).is_ok();
        if !sent {
            // The rank stopped: nobody will take it.
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        }
        // A thread driving progress takes the input; if it stops driving before, it sees
        // `queued` and wakes the progression thread (see `DriverGuard`'s drop).
        store_load_order();
        if self.shared.drivers.load(Ordering::SeqCst) == 0 {
            self.shared.wake();
        }
    }
}

/// Configuration of the progression thread.
pub(crate) struct ProgressConfig {
    pub(crate) tags: TagSpace,
    pub(crate) stats: bool,
    pub(crate) trace: bool,
    pub(crate) priorities: bool,
    pub(crate) max_inflight_sends: u32,
    pub(crate) driver: Option<DriverMode>,
    pub(crate) in_place_min: usize,
    /// The rank's timeline trace, when tracing.
    pub(crate) timeline: Option<Arc<Recorder>>,
    /// [`crate::RankConfig::multiple_send`].
    pub(crate) multiple_send: bool,
    /// [`crate::RankConfig::eager_limit`], already clamped to
    /// [`crate::RankConfig::MAX_EAGER_LIMIT`] (by [`crate::RankRunner::start`]).
    pub(crate) eager_limit: u32,
    /// [`crate::RankConfig::tables`].
    pub(crate) tables: config::Tables,
}

struct Progress<T: Transport> {
    transport: T,
    engine: Box<RankEngine>,
    pending: IdMap<ReqId, Pending>,
    early: IdMap<ReqId, Vec<u8>>,
    /// Device values received for early requests, as `early` holds bytes.
    early_device: IdMap<ReqId, DeviceValue>,
    /// What waits outside the engine for room: submissions in order per direction,
    /// envelopes refused for a full table in order per key ([`crate::admission`], the
    /// code the simulator's explorer checks).
    admission: Admission<Command>,
    barriers: HashMap<u64, Box<dyn FnOnce() + Send>>,
    next_barrier: u64,
    trace: bool,
    rank: Rank,
    start: std::time::Instant,
    pool: Arc<BufferPool>,
    /// Payloads from this size up are received in place when they can be (a receive
    /// holds its handle until it completes anyway: [`lend_min`]).
    recv_in_place_min: usize,
    timeline: CommTrace,
    /// What the progression shares with the rank (its runtime's device layers).
    rank_shared: Arc<Shared>,
}

/// A rank's progress, drivable by whichever thread holds its lock: the progression
/// thread, or an application thread blocked in a wait ([`Drive::try_drive`]). The
/// transport is made and dropped on the progression thread (MPI is finalized by the
/// thread that initialized it); in between every MPI call is made under this lock, one
/// at a time (`MPI_THREAD_SERIALIZED`).
pub(crate) struct Driver<T: Transport> {
    state: DriveLock<State<T>>,
    shared: Arc<Shared>,
    polling: bool,
    driver_mode: Option<DriverMode>,
    /// [`crate::RankConfig::multiple_send`]: [`Drive::post`] transmits at once.
    send_now: bool,
}

struct State<T: Transport> {
    /// `None` once stopped.
    progress: Option<Progress<T>>,
    inbox: InboxReceiver<Input<T::Wire>>,
    /// When anything last happened (as of the last [`Driver::hot`]).
    last_active: std::time::Instant,
    /// Something happened since `last_active` was read from the clock: a drive only
    /// sets this, and the progression thread reads the clock when it asks whether to
    /// poll on ([`Driver::hot`]), so that a thread driving progress reads no clock.
    moved: bool,
    /// A [`Command::Stop`] was taken: the progression thread drops the transport.
    stopping: bool,
}

/// What one drive of a rank's progress did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Inputs were taken or the engine or transport moved.
    Progressed,
    /// Nothing to do right now.
    Idle,
    /// Nothing completed, but the transport has transfers under way (they move only
    /// while it is polled).
    InFlight,
    /// Another thread is driving.
    Busy,
    /// The rank stopped.
    Stopped,
}

/// Progress a thread can drive while it waits, whatever the transport.
pub(crate) trait Drive: Send + Sync {
    /// Drives the rank's progress once unless another thread is driving it.
    fn try_drive(&self) -> Driven;
    /// Marks the calling thread as driving until the guard drops: the progression thread
    /// stands back meanwhile.
    fn enter(&self) -> DriverGuard<'_>;
    /// Hands `command` to the engine on the calling thread, skipping the inbox, when
    /// nothing waits in the inbox (which keeps the commands' order) and the progression
    /// lock is free; gives it back otherwise (the caller queues it). The command's outputs go out at the next
    /// drive: the progression thread is woken for it unless a thread drives.
    fn post(&self, command: Command) -> Result<(), Command>;
}

/// While alive, a thread drives progress itself ([`Drive::enter`]).
pub(crate) struct DriverGuard<'a> {
    shared: &'a Shared,
}

impl DriverGuard<'_> {
    /// Stops driving because nothing moves: the progression thread takes over at once.
    pub(crate) fn hand_back(self) {
        self.shared.drivers.fetch_sub(1, Ordering::SeqCst);
        self.shared.wake();
        core::mem::forget(self);
    }
}

impl Drop for DriverGuard<'_> {
    fn drop(&mut self) {
        // Stops driving, then reads `queued` and `posted`; `InboxTx::send` counts, then
        // reads `drivers`: one of the two sees the other.
        let last = self.shared.drivers.fetch_sub(1, Ordering::SeqCst) == 1;
        store_load_order();
        if last
            && (self.shared.queued.load(Ordering::SeqCst) != 0
                || self.shared.posted.load(Ordering::SeqCst))
        {
            // Inputs came in after the last drive: the progression thread takes over.
            self.shared.wake();
        }
    }
}

impl<T: Transport> Drive for Driver<T> {
    fn try_drive(&self) -> Driven {
        match sync::try_drive(&self.state) {
            Some(mut st) => self.drive(&mut st, false),
            None => Driven::Busy,
        }
    }

    fn enter(&self) -> DriverGuard<'_> {
        self.shared.drivers.fetch_add(1, Ordering::SeqCst);
        DriverGuard {
            shared: &self.shared,
        }
    }

    fn post(&self, command: Command) -> Result<(), Command> {
        if matches!(command, Command::Stop) || self.shared.queued.load(Ordering::SeqCst) != 0 {
            return Err(command);
        }
        let Some(mut st) = sync::try_drive(&self.state) else {
            // Held (by another thread, or by this one: a completion posting the next
            // request): the inbox takes it.
            return Err(command);
        };
        if st.stopping || self.shared.queued.load(Ordering::SeqCst) != 0 {
            return Err(command);
        }
        let Some(p) = st.progress.as_mut() else {
            return Err(command);
        };
        p.command(command);
        if self.send_now {
            // Multiple-send: what the engine lets leave goes to the transport from this
            // thread. Only transmissions: completions and their callbacks stay for the
            // next drive, so a thread posting with locks of its own held runs no
            // callback.
            p.transmit();
        }
        st.moved = true;
        self.shared.posted.store(true, Ordering::SeqCst);
        drop(st);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if self.shared.drivers.load(Ordering::SeqCst) == 0 {
            self.shared.wake();
        }
        Ok(())
    }
}

impl<T: Transport> Driver<T> {
    /// Takes in everything queued, then drives the engine once: sends that became ready
    /// together leave in priority order. `full`: until neither the engine nor the
    /// transport has anything to do (the progression thread); otherwise with one poll of
    /// the transport (a waiting thread, which looks at what it waits for in between).
    fn drive(&self, st: &mut State<T>, full: bool) -> Driven {
        let State {
            progress,
            inbox,
            moved: stamp,
            stopping,
            ..
        } = st;
        if *stopping {
            return Driven::Stopped;
        }
        let Some(p) = progress.as_mut() else {
            return Driven::Stopped;
        };
        let mut taken = 0;
        let mut stop = false;
        // What was posted straight to the engine goes out with this drive (both change
        // the flag under the progression lock).
        if self.shared.posted.load(Ordering::Relaxed) {
            self.shared.posted.store(false, Ordering::SeqCst);
        }
        while let Ok(input) = inbox.try_recv() {
            taken += 1;
            match input {
                Input::Command(Command::Stop) => stop = true,
                Input::Command(c) => p.command(c),
                Input::Net(w) => p.transport.accept(w),
            }
        }
        let moved = if full { p.pump() } else { p.pump_once() } || taken > 0;
        *stamp |= moved;
        let in_flight = !moved && self.polling && p.transport.busy();
        // The epoch moves before the inputs stop counting as queued: a witness
        // (`Shared::settled`) that finds them gone finds the epoch moved too.
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.queued.fetch_sub(taken, Ordering::SeqCst);
        if stop {
            // The transport is dropped by the progression thread (see `run`).
            *stopping = true;
            self.shared.wake();
            return Driven::Stopped;
        }
        if moved {
            Driven::Progressed
        } else if in_flight {
            Driven::InFlight
        } else {
            Driven::Idle
        }
    }

    /// Whether the progression thread should poll again without sleeping: a polled
    /// transport (MPI) learns of arrivals and moves long messages only when polled, so
    /// while it is busy, or anything happened within `HOT`, it is polled continuously.
    fn hot(&self, st: &mut State<T>) -> bool {
        if core::mem::take(&mut st.moved) {
            st.last_active = std::time::Instant::now();
        }
        self.polling
            && (st.progress.as_ref().is_some_and(|p| p.transport.busy())
                || st.last_active.elapsed() < HOT)
    }
}

/// Makes the progression thread's state and hands out its driver; [`run`] then drives it.
pub(crate) fn start<T: Transport>(
    mut transport: T,
    inbox: InboxReceiver<Input<T::Wire>>,
    config: ProgressConfig,
    shared: Arc<Shared>,
) -> Arc<Driver<T>> {
    let rank = transport.rank();
    let size = transport.size();
    transport.set_envelope_tag(config.tags.envelope());
    // Room for the largest eager payload any rank may send, whatever this rank's own
    // limit: ranks need not agree on it.
    transport.set_envelope_limit(
        starling_core::envelope::HEADER_LEN + crate::RankConfig::MAX_EAGER_LIMIT as usize,
    );
    let eager_limit = config.eager_limit;
    let mut engine_config = Config::new(rank, size, config.tags);
    engine_config.eager_limit = eager_limit;
    engine_config.priorities = config.priorities;
    engine_config.max_inflight_sends = config.max_inflight_sends;
    engine_config.request_limit = u32::try_from(config.tables.requests).unwrap_or(u32::MAX);
    engine_config.key_limit = config.tables.match_keys.clamp(1, MATCH_KEYS) as u32;
    let mut engine = Box::new(RankEngine::new(engine_config));
    if config.stats {
        engine.stats_mut().enable();
    }
    let polling = transport.needs_polling();
    let progress = Progress {
        transport,
        engine,
        pending: IdMap::default(),
        early: IdMap::default(),
        early_device: IdMap::default(),
        admission: Admission::default(),
        barriers: HashMap::new(),
        next_barrier: 0,
        trace: config.trace,
        rank,
        start: std::time::Instant::now(),
        pool: Arc::clone(&shared.pool),
        recv_in_place_min: lend_min(config.in_place_min, eager_limit),
        timeline: CommTrace::new(config.timeline, rank, config.tags.envelope()),
        rank_shared: Arc::clone(&shared),
    };
    let _ = shared.thread.set(thread::current());
    Arc::new(Driver {
        state: sync::drive_lock(State {
            progress: Some(progress),
            inbox,
            last_active: std::time::Instant::now(),
            moved: false,
            stopping: false,
        }),
        shared,
        polling,
        driver_mode: config.driver,
        send_now: config.multiple_send,
    })
}

/// Runs the progression loop on the thread that called [`start`] until
/// [`Command::Stop`], then drops the transport on this thread.
pub(crate) fn run<T: Transport>(d: &Driver<T>) {
    // Driver mode: polls in a row that moved nothing.
    let mut idle_polls = 0u32;
    loop {
        if d.shared.drivers.load(Ordering::SeqCst) > 0 {
            // A waiting thread drives: stand back (it wakes this one when it leaves
            // inputs behind).
            park_timeout(Duration::from_millis(1));
            continue;
        }
        let mut st = sync::drive(&d.state);
        let driven = if st.stopping {
            Driven::Stopped
        } else {
            d.drive(&mut st, true)
        };
        if st.stopping {
            let progress = st.progress.take();
            drop(st);
            drop(progress);
            return;
        }
        let hot = d.hot(&mut st);
        drop(st);
        if let (Some(mode), Some(rt)) = (d.driver_mode, d.shared.runtime.get()) {
            // Driver mode: every `call_frequency` polls that moved nothing, and whenever
            // the transport is idle, run up to `task_frequency` tasks here.
            idle_polls = if driven == Driven::Progressed {
                0
            } else {
                idle_polls + 1
            };
            if idle_polls >= mode.call_frequency.max(1) || !hot {
                idle_polls = 0;
                let mut ran = false;
                for _ in 0..mode.task_frequency.max(1) {
                    if !rt.try_run_one() {
                        break;
                    }
                    ran = true;
                }
                if ran {
                    continue;
                }
            }
        }
        if hot {
            thread::yield_now();
        } else if d.shared.queued.load(Ordering::SeqCst) == 0 {
            // Idle: a polled transport is looked at every 50 µs; an input wakes the
            // thread at once.
            park_timeout(if d.polling {
                Duration::from_micros(50)
            } else {
                Duration::from_millis(100)
            });
        } else {
            // An input is counted and not yet taken (its sender is between counting and
            // queueing it): drive again at once.
            spin_wait();
        }
    }
}

impl<T: Transport> Progress<T> {
    fn command(&mut self, c: Command) {
        match c {
            // Behind the submissions already waiting: one direction keeps its order.
            c @ Command::Send { .. } => {
                self.with_admission(|a, p| a.offer(p, Direction::Send, c));
            }
            c @ Command::Recv { .. } => {
                self.with_admission(|a, p| a.offer(p, Direction::Recv, c));
            }
            Command::Barrier { done } => {
                let token = self.next_barrier;
                self.next_barrier += 1;
                self.barriers.insert(token, done);
                self.transport.barrier(token);
            }
            Command::Amounts(reply) => {
                let stats = self.engine.stats();
                reply(stats.was_enabled().then(|| {
                    let mut v = vec![0; self.transport.size() as usize];
                    stats.retrieve(&mut v);
                    v
                }));
            }
            Command::SetStats(on, reply) => {
                let stats = self.engine.stats_mut();
                if on {
                    stats.enable();
                } else {
                    stats.disable();
                }
                reply(());
            }
            Command::Leftovers(reply) => {
                // The envelopes still refused were never received either, and the
                // submissions waiting for room never reached the engine.
                let refused = self
                    .admission
                    .refused()
                    .filter_map(|(s, c, b)| self.engine.orphan_of(s, c, b))
                    .collect();
                let queued = [Direction::Send, Direction::Recv]
                    .into_iter()
                    .flat_map(|d| self.admission.waiting(d))
                    .filter_map(|c| match c {
                        Command::Send { args, .. } => {
                            Some((Kind::Send, args.comm, args.dest, args.tag))
                        }
                        Command::Recv { args, .. } => {
                            Some((Kind::Recv, args.comm, args.source, args.tag))
                        }
                        _ => None,
                    })
                    .collect();
                reply(Held {
                    engine: self.engine.leftovers().collect(),
                    refused,
                    queued,
                });
            }
            Command::EarlyMessages(reply) => reply(self.engine.early_messages()),
            Command::Report(reply) => {
                let elapsed = self.start.elapsed().as_micros() as u64;
                let stats = self.engine.stats();
                reply(
                    stats
                        .was_enabled()
                        .then(|| stats.report(self.rank, elapsed).to_string()),
                );
            }
            Command::Stop => {}
        }
    }

    /// Runs `f` on the rank's [`Admission`] with this thread as its driver.
    fn with_admission<R>(&mut self, f: impl FnOnce(&mut Admission<Command>, &mut Self) -> R) -> R {
        let mut a = core::mem::take(&mut self.admission);
        let r = f(&mut a, self);
        self.admission = a;
        r
    }

    /// Submits a send or a receive to the engine; hands it back when the engine's budget
    /// has no room for it now (it waits, in order, and is submitted again when room
    /// frees: [`Admission::admit_waiting`]). `Some(key)` for a receive now in the engine.
    fn submit(&mut self, c: Command) -> Result<Option<Key>, Command> {
        match c {
            Command::Send {
                mut args,
                bytes,
                done,
            } => {
                args.size = bytes.len() as u64;
                args.detached = true;
                match self.engine.submit_send(args) {
                    Ok(req) => {
                        self.timeline
                            .request(req, true, args.dest, args.tag.0, args.size);
                        self.pending.insert(
                            req,
                            Pending::Send {
                                bytes: Some(bytes),
                                done,
                            },
                        );
                        self.data_ready(req);
                    }
                    Err(e) if e.waits() => {
                        return Err(Command::Send { args, bytes, done });
                    }
                    Err(e) => done(Err(CommError::from(e))),
                }
            }
            Command::Recv {
                mut args,
                cell,
                done,
            } => {
                args.capacity = cell.packed_size() as u64;
                args.detached = true;
                match self.engine.submit_recv(args) {
                    Ok(req) => {
                        self.timeline
                            .request(req, false, args.source, args.tag.0, args.capacity);
                        self.pending.insert(
                            req,
                            Pending::Recv {
                                cell,
                                bytes: None,
                                in_place: None,
                                device: None,
                                done,
                            },
                        );
                        self.data_ready(req);
                        // Its messages need no room now: those refused go in.
                        return Ok(Some(Key::new(args.comm, args.source, args.tag)));
                    }
                    Err(e) if e.waits() => {
                        return Err(Command::Recv { args, cell, done });
                    }
                    Err(e) => done(Err(CommError::from(e))),
                }
            }
            other => self.command(other),
        }
        Ok(None)
    }

    /// Submits what waits for room and hands refused envelopes in again; whether any
    /// went in.
    fn admit_waiting(&mut self) -> bool {
        if self.admission.is_empty() {
            return false;
        }
        self.with_admission(|a, p| a.admit_waiting(p) | a.retry_refused(p))
    }

    /// Hands a request whose data is ready to the engine. A send only joins the ready
    /// list (it leaves at the next pump, in priority order with the others); a receive
    /// may answer at once, so the outputs are drained if the engine asks for room. A
    /// receive the matcher has no room for waits inside the engine, in order.
    fn data_ready(&mut self, req: ReqId) {
        loop {
            match self.engine.handle_data_ready(req) {
                Err(UsageError::Full(Table::Transmits | Table::Events)) => self.drain_outputs(),
                Err(e) => {
                    // A full table (the slab, for a truncated synchronous message's
                    // discard buffer): the request fails rather than waits forever.
                    let error = match e {
                        UsageError::Full(t) => CommError::Submit(SubmitError::Full(t)),
                        other => {
                            eprintln!("[starling][{}] {req} could not start: {other}", self.rank.0);
                            CommError::Submit(SubmitError::Full(Table::Requests))
                        }
                    };
                    if let Some(Pending::Send { done, .. } | Pending::Recv { done, .. }) =
                        self.pending.remove(&req)
                    {
                        done(Err(error));
                    }
                    return;
                }
                Ok(()) => return,
            }
        }
    }

    fn drain_outputs(&mut self) {
        self.transmit();
        while let Some(e) = self.engine.poll_event() {
            self.on_event(e);
        }
    }

    /// Drives the engine until neither it nor the transport has anything to do; whether
    /// anything happened.
    fn pump(&mut self) -> bool {
        let mut any = false;
        while self.pump_once() {
            any = true;
        }
        any
    }

    /// Performs the engine's outputs, polls the transport once and performs what its
    /// completion caused; whether anything happened.
    fn pump_once(&mut self) -> bool {
        let mut progressed = self.drain_counted();
        if let Some(c) = self.transport.poll() {
            self.on_completion(c);
            self.drain_counted();
            progressed = true;
        }
        while let Some(spent) = self.transport.spent() {
            self.pool.give(spent);
        }
        // Progress may have freed room: waiting submissions and envelopes go in again.
        if !progressed && self.admit_waiting() {
            self.drain_counted();
            progressed = true;
        }
        progressed
    }

    /// Performs every transmission the engine has (and no event).
    fn transmit(&mut self) {
        while let Some(t) = self.engine.poll_transmit() {
            self.perform(t);
        }
    }

    /// Performs every transmission and event the engine has; whether there was any.
    fn drain_counted(&mut self) -> bool {
        let mut any = false;
        while let Some(t) = self.engine.poll_transmit() {
            self.perform(t);
            any = true;
        }
        while let Some(e) = self.engine.poll_event() {
            self.on_event(e);
            any = true;
        }
        any
    }

    fn perform(&mut self, t: Transmit) {
        if self.trace {
            eprintln!("[starling_comm][{}] post {t:?}", self.rank.0);
        }
        match t {
            Transmit::Envelope {
                dest,
                comm,
                tag,
                header,
                inline,
            } => {
                let body = match inline.and_then(|req| self.pending.get(&req)) {
                    Some(Pending::Send { bytes: Some(b), .. }) => b.bytes(),
                    _ => &[],
                };
                let mut bytes = Vec::with_capacity(header.len() + body.len());
                bytes.extend_from_slice(&header);
                bytes.extend_from_slice(body);
                self.timeline.send(dest, comm, tag, &bytes, inline);
                self.transport.send(dest, comm, tag, bytes, inline);
            }
            Transmit::Payload {
                req,
                dest,
                comm,
                tag,
                ..
            } => {
                let bytes = match self.pending.get_mut(&req) {
                    Some(Pending::Send { bytes, .. }) => bytes.take(),
                    _ => None,
                };
                let payload = bytes.unwrap_or(Payload::Bytes(Vec::new()));
                self.timeline
                    .send(dest, comm, tag, payload.bytes(), Some(req));
                match payload {
                    Payload::Bytes(b) => self.transport.send(dest, comm, tag, b, Some(req)),
                    Payload::Lent(l) => self.transport.send_lent(dest, comm, tag, l, Some(req)),
                    Payload::Device(v) => self.transport.send_device(dest, comm, tag, v, Some(req)),
                }
            }
            Transmit::Receive {
                req,
                source,
                comm,
                tag,
                size,
                ..
            } => {
                self.timeline.recv(source, comm, tag, req);
                let size = size as usize;
                // A large contiguous handle receives in place, when the transport can.
                if size >= self.recv_in_place_min {
                    if let Some(Pending::Recv { cell, in_place, .. }) = self.pending.get_mut(&req) {
                        if cell.packed_size() == size {
                            if let Some(lent) = cell.lend_write() {
                                match self.transport.recv_lent(source, comm, tag, lent, req) {
                                    None => {
                                        *in_place = Some(0);
                                        return;
                                    }
                                    // Not taken: the guard drops, an ordinary receive follows.
                                    Some(lent) => drop(lent),
                                }
                            }
                        }
                    }
                }
                let buffer = self.pool.take_filled(size);
                self.transport.recv_into(source, comm, tag, buffer, req);
            }
        }
    }

    fn on_completion(&mut self, c: Completion) {
        self.timeline.completion(&c);
        match c {
            Completion::Sent(req) => {
                let _ = self.engine.handle_sent(req);
            }
            Completion::Received(req, bytes) => {
                let len = bytes.len() as u64;
                match self.pending.get_mut(&req) {
                    Some(Pending::Recv { bytes: slot, .. }) => *slot = Some(bytes),
                    _ => {
                        self.early.insert(req, bytes);
                    }
                }
                let _ = self.engine.handle_received(req, len);
            }
            Completion::Envelope {
                source,
                comm,
                bytes,
            } => self.on_envelope(source, comm, bytes),
            Completion::Barrier(token) => {
                if let Some(done) = self.barriers.remove(&token) {
                    done();
                }
            }
            Completion::ReceivedDevice(req, value) => {
                let len = value.size() as u64;
                match self.pending.get_mut(&req) {
                    Some(Pending::Recv { device, .. }) => *device = Some(value),
                    _ => {
                        self.early_device.insert(req, value);
                    }
                }
                let _ = self.engine.handle_received(req, len);
            }
            Completion::ReceivedInPlace(req, len) => {
                if let Some(Pending::Recv { in_place, .. }) = self.pending.get_mut(&req) {
                    *in_place = Some(len);
                }
                let _ = self.engine.handle_received(req, len as u64);
            }
        }
        self.admit_waiting();
    }

    /// Hands an envelope message to the engine. While earlier ones that it must stay
    /// behind wait refused (the core says which: [`RankEngine::refusal_order`]), it
    /// waits behind them; a message of another key goes in.
    fn on_envelope(&mut self, source: Rank, comm: CommId, bytes: Vec<u8>) {
        if self.admission.nothing_refused() {
            // Nothing holds it back.
            match self.handle_envelope(source, comm, bytes) {
                Ok(()) => return,
                Err((bytes, table)) => {
                    return self
                        .with_admission(|a, p| a.keep_refused(p, source, comm, bytes, table));
                }
            }
        }
        self.with_admission(|a, p| {
            a.on_envelope(p, source, comm, bytes);
        });
    }

    /// Hands an envelope to the engine; gives it back when a table is full (the engine
    /// changed nothing).
    fn handle_envelope(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)> {
        loop {
            match self.engine.handle_message(source, comm, &bytes) {
                Ok(Arrival::Nothing) => {}
                Ok(Arrival::Deliver { req, inline }) => {
                    if let Some(Pending::Recv { bytes: slot, .. }) = self.pending.get_mut(&req) {
                        *slot = Some(inline.to_vec());
                    }
                }
                Ok(Arrival::Stash { early, inline }) => {
                    self.early.insert(early, inline.to_vec());
                }
                Err(MessageError::Full(Table::Transmits | Table::Events)) => {
                    // Outputs first, then the same message again.
                    self.drain_outputs();
                    continue;
                }
                Err(MessageError::Full(table)) => return Err((bytes, table)),
                Err(e) => eprintln!(
                    "[starling][{}] dropped a message from {source}: {e}",
                    self.rank.0
                ),
            }
            return Ok(());
        }
    }

    fn on_event(&mut self, e: Event) {
        if self.trace {
            eprintln!("[starling_comm][{}] {e:?}", self.rank.0);
        }
        match e {
            Event::Completed {
                req,
                kind,
                len,
                from_early,
            } => {
                self.timeline.request_done(req, true);
                let early = from_early.and_then(|e| self.early.remove(&e));
                let early_device = from_early.and_then(|e| self.early_device.remove(&e));
                match (kind, self.pending.remove(&req)) {
                    (Kind::Send, Some(Pending::Send { done, .. })) => done(Ok(())),
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            in_place: Some(got),
                            done,
                            ..
                        }),
                    ) => {
                        // The bytes are in the handle already (its lock was released when
                        // the receive completed).
                        done(if got as u64 == len {
                            Ok(())
                        } else {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got,
                            }))
                        });
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell,
                            device: Some(value),
                            done,
                            ..
                        }),
                    ) => {
                        // A device value: the handle's device copy becomes it.
                        let size = value.size();
                        done(if size as u64 != len {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got: size,
                            }))
                        } else {
                            value
                                .deliver(&cell, self.rank_shared.runtime.get().map(Runtime::layers))
                                .map_err(CommError::Device)
                        });
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell, bytes, done, ..
                        }),
                    ) if early_device.is_some() => {
                        drop(bytes);
                        let value = early_device.unwrap_or_else(|| unreachable!("checked"));
                        done(
                            value
                                .deliver(&cell, self.rank_shared.runtime.get().map(Runtime::layers))
                                .map_err(CommError::Device),
                        );
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell, bytes, done, ..
                        }),
                    ) => {
                        let bytes = early.or(bytes).unwrap_or_default();
                        let result = if bytes.len() as u64 != len {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got: bytes.len(),
                            }))
                        } else {
                            cell.unpack(&bytes).map_err(CommError::Data)
                        };
                        self.pool.give(bytes);
                        done(result);
                    }
                    _ => {}
                }
            }
            Event::Failed { req, error, .. } => {
                self.timeline.request_done(req, false);
                if let Some(Pending::Send { done, .. } | Pending::Recv { done, .. }) =
                    self.pending.remove(&req)
                {
                    done(Err(match error {
                        RequestError::Truncated { capacity, size } => {
                            CommError::Data(DataError::SizeMismatch {
                                expected: capacity as usize,
                                got: size as usize,
                            })
                        }
                        other => CommError::Request(other),
                    }));
                }
            }
            Event::Discard { early } => {
                self.early.remove(&early);
            }
        }
    }
}

impl<T: Transport> Admit for Progress<T> {
    type Cmd = Command;

    fn submit(&mut self, c: Command) -> Result<Option<Key>, Command> {
        Self::submit(self, c)
    }

    fn hand_in(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)> {
        self.handle_envelope(source, comm, bytes)
    }

    fn refusal_order(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<RefusalOrder> {
        self.engine.refusal_order(source, comm, bytes)
    }

    fn recv_key(&self, c: &Command) -> Option<Key> {
        match c {
            Command::Recv { args, .. } => Some(Key::new(args.comm, args.source, args.tag)),
            _ => None,
        }
    }

    fn has_room(&self, table: Table) -> bool {
        self.engine.room_for(table)
    }

    fn free_recv_slots(&self) -> Option<usize> {
        self.engine.free_recv_slots()
    }

    fn has_early(&self, key: Key) -> bool {
        self.engine.has_early(key)
    }

    fn early_keys(&self, f: &mut dyn FnMut(Key)) {
        self.engine.early_keys().for_each(f);
    }
}

pub(crate) mod config;

#[cfg(all(test, loom))]
pub(crate) mod models;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn transfers_that_hold_their_handle_lend_it_from_the_first_size_past_the_envelope() {
        // The default (256 KiB) and anything larger: lent from 4 KiB + 1.
        assert_eq!(lend_min(256 << 10, 4096), 4097);
        assert_eq!(lend_min(usize::MAX - 1, 4096), 4097);
        assert_eq!(lend_min(256 << 10, 0), 1);
        // A smaller configured size wins.
        assert_eq!(lend_min(1024, 4096), 1024);
        // Off stays off.
        assert_eq!(lend_min(usize::MAX, 4096), usize::MAX);
    }
}
