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
    Arrival, Config, Engine, Event, Express, Leftover, MessageError, RecvArgs, RefusalOrder,
    RequestError, SendArgs, SubmitError, Transmit, UsageError,
};
use starling_core::error::Table;
use starling_core::lists::Key;
use starling_core::request::Kind;
use starling_core::tags::TagSpace;
use starling_core::{CommId, Rank, ReqId};

use self::config::DriverMode;
use crate::error::CommError;
use crate::id_hash::IdMap;
use crate::io::admission::{Admission, Admit, Direction};
use crate::io::transport::{Completion, SendBuffer, Transport};
use crate::runtime::data::{AnyCell, DataError};
use crate::runtime::device::DeviceValue;
use crate::runtime::pool::BufferPool;
use crate::runtime::task::Runtime;
use crate::sync::{
    self, Arc, AtomicBool, AtomicU64, AtomicUsize, DriveLock, InboxReceiver, InboxSender, Ordering,
    park_timeout, spin_wait, store_load_order, thread,
};
use crate::trace::{CommTrace, Recorder};

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

/// The engine of a rank: [`REQUESTS`] requests, match-key tables of 2048 (of which at
/// most [`MATCH_KEYS`] are used), 256 peers in the statistics.
pub(crate) type RankEngine = Engine<REQUESTS, 2048, 256>;

/// The slots of a rank engine's request slab.
pub(crate) const REQUESTS: usize = 4096;

/// The slots of the slab kept out of the request budget, for discard buffers (a payload
/// too long for the receive it arrived for is drained into one, outside the budget: the
/// receive's message is here, so it must not wait for the budget's room).
pub(crate) const DRAIN_SLOTS: usize = 32;

/// The most distinct keys each of a rank's matcher tables holds: half their capacity.
/// The tables are `heapless` index maps, whose probe sequences grow without bound as they
/// fill: a message on a new key (a receive posted, its envelope matched) costs 74 ns with
/// 512 live keys in a table of 1024, 224 ns with 960 and 848 ns with 1023
/// (`cargo bench -p starling-core --bench core -- matcher_fill`). Kept at most half full,
/// a workload with thousands of keys in flight costs per message what one with a few
/// does.
pub(crate) const MATCH_KEYS: usize = 1024;

/// Called once, on the progression thread, when a request finishes ([`Done::call`]): a
/// closure, or the hang tracker's entry that holds one. The tracker keeps a request's
/// closure where the watchdog can reach it, and the request carries only the entry's
/// place ([`crate::tools::hang::Tracked`]) — before, a box of its own around the
/// closure, one allocation per request.
pub(crate) struct Done(DoneKind);

enum DoneKind {
    Call(Box<dyn FnOnce(Result<(), CommError>) + Send>),
    Tracked(crate::tools::hang::Tracked),
}

impl Done {
    /// `f`, boxed.
    pub(crate) fn new(f: impl FnOnce(Result<(), CommError>) + Send + 'static) -> Self {
        Self(DoneKind::Call(Box::new(f)))
    }

    /// The closure that the hang tracker's entry `t` holds.
    pub(crate) const fn tracked(t: crate::tools::hang::Tracked) -> Self {
        Self(DoneKind::Tracked(t))
    }

    /// Runs it with the request's outcome.
    pub(crate) fn call(self, result: Result<(), CommError>) {
        match self.0 {
            DoneKind::Call(f) => f(result),
            DoneKind::Tracked(t) => t.finish(result),
        }
    }
}

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
    /// At shutdown: take the fast messages (protocol §19) that wait in the transport and
    /// that no receive took, to report them as leftovers from now on; then answer.
    TakeStrays(Box<dyn FnOnce(()) + Send>),
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
    /// Set while a *checked* holder holds the progress lock (an idle worker,
    /// [`Drive::idle_drive`]; a worker driving out what its task's completion posted,
    /// [`Drive::post`]; another rank's worker driving this one, [`Drive::try_drive_checked`];
    /// the progression thread): it lowers it before it lets go, then looks at `queued`
    /// and takes what came in meanwhile (or wakes the progression thread for it), so a
    /// sender that finds the lock busy and this set need not wake the progression thread.
    /// Every other holder looks at `queued` once it lets go too, or wakes the progression
    /// thread whatever it finds (a post from a thread that may not drive).
    checked_holder: AtomicBool,
    /// A drive of one poll moved something, and may have left more behind (a second
    /// completion waiting in the transport): an idle worker drives then even with
    /// nothing queued, as it did on every poll before it looked at `queued` first.
    more: AtomicBool,
    /// The progression thread, to wake when an input arrives.
    thread: std::sync::OnceLock<thread::Thread>,
    /// The rank's progress, which a thread handing it a message may drive itself
    /// ([`InboxTx::send`], [`sync::with_peer_drive`]); set when threads other than the
    /// progression thread may drive ([`crate::RankConfig::caller_drives`]); weak: the
    /// driver holds this.
    driver: std::sync::OnceLock<std::sync::Weak<dyn Drive>>,
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
            checked_holder: AtomicBool::new(false),
            more: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            driver: std::sync::OnceLock::new(),
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

    /// Lets the threads that hand this rank a message drive its progress
    /// ([`InboxTx::send`]).
    pub(crate) fn set_driver(&self, driver: &Arc<dyn Drive>) {
        let _ = self.driver.set(Arc::downgrade(driver));
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
            if sent && self.drive_here() {
                return;
            }
            self.shared.wake();
        }
    }

    /// A thread allowed to ([`sync::with_peer_drive`]: a worker posting the sends that
    /// follow its task) drives the receiving rank's progress itself when its lock is
    /// free: the message is taken, and what it completes runs, without waking the
    /// rank's progression thread (a wake-up through the kernel, 5 – 10 µs of a ring hop).
    /// Whether nothing is left for that thread to do.
    fn drive_here(&self) -> bool {
        let Some(driver) = self.shared.driver.get().and_then(std::sync::Weak::upgrade) else {
            return false;
        };
        sync::as_peer_driver(|| match driver.try_drive_checked() {
            // A checked holder drives it (an idle worker, a worker driving out what its
            // task's completion posted, the progression thread, another rank's worker
            // driving it): it takes the input once it lets go of the lock
            // (`Driver::checked_drive`). Waking the progression thread instead had it
            // preempt a polling worker on its core, in one ring hop of six.
            Driven::Busy if self.shared.checked_holder.load(Ordering::SeqCst) => true,
            // Another thread drives, or the rank stopped: the usual wake.
            Driven::Busy | Driven::Stopped => false,
            // Inputs queued meanwhile, or commands posted, are the progression thread's
            // (looked at once the lock is let go: a sender that found it held by this
            // thread left its input to it).
            _ => {
                store_load_order();
                self.shared.queued.load(Ordering::SeqCst) == 0
                    && !self.shared.posted.load(Ordering::SeqCst)
            }
        })
        .unwrap_or(false)
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
    /// [`crate::RankConfig::fast_limit`]: the fast path runs when it is not 0 and the
    /// transport offers it ([`Transport::fast_comms`]).
    pub(crate) fast_limit: u32,
}

struct Progress<T: Transport> {
    transport: T,
    engine: Box<RankEngine>,
    pending: IdMap<ReqId, Pending>,
    early: IdMap<ReqId, Vec<u8>>,
    /// Device values received for early requests, as `early` holds bytes.
    early_device: IdMap<ReqId, DeviceValue>,
    /// What waits outside the engine for room: submissions in order per direction,
    /// envelopes refused for a full table in order per key ([`crate::io::admission`], the
    /// code the simulator's explorer checks). Boxed and `None` only while
    /// [`Progress::with_admission`] lends it out: lending moves one pointer.
    admission: Option<Box<Admission<Command>>>,
    /// Keys whose receive got its marker (protocol §19): their refused envelopes are
    /// handed in again at the next [`Progress::admit_waiting`].
    marked: Vec<Key>,
    /// Fast messages no receive took, found at shutdown ([`Command::TakeStrays`]).
    strays: Vec<Leftover>,
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

impl<T: Transport> Progress<T> {
    /// Sends `bytes`, the packed payload of a standard send of `args` (packed with room for
    /// an envelope header before it), at once and without a request, when nothing waits
    /// to go before it — no send waiting for room here, nothing ready or queued in the
    /// engine ([`Engine::express_send`], protocol §8.2) — and gives them back otherwise.
    /// The message is the transport's from then on: nothing reports its completion.
    fn send_now(&mut self, mut args: SendArgs, mut bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        if self.admission.as_deref().is_some_and(Admission::sends_wait) {
            return Err(bytes);
        }
        // The header announces the bytes that follow it, as a submitted send's does.
        args.size = bytes.len() as u64;
        let Some(out) = self.engine.express_send(args) else {
            return Err(bytes);
        };
        if let Some(header) = &out.header {
            events::prepend(&mut bytes, header);
        }
        let Express {
            dest, comm, tag, ..
        } = out;
        if self.trace {
            eprintln!(
                "[starling_comm][{}] post {out:?} ({} bytes, express)",
                self.rank.0,
                bytes.len()
            );
        }
        self.timeline.send(dest, comm, tag, &bytes, None);
        self.transport.send(dest, comm, tag, bytes, None);
        Ok(())
    }

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
            Command::TakeStrays(reply) => {
                let config = self.engine.config();
                let tags = config.tags;
                let taken = self
                    .transport
                    .take_strays(&|t| tags.fast_user_tag(t).is_some());
                self.strays.extend(
                    taken
                        .into_iter()
                        .filter_map(|(source, comm, tag, len)| {
                            starling_core::fast::stray(config, source, comm, tag, len as u64)
                        })
                        .map(Leftover::Orphan),
                );
                reply(());
            }
            Command::Leftovers(reply) => {
                // The envelopes still refused were never received either, and the
                // submissions waiting for room never reached the engine.
                let admission = self.admission.as_deref();
                let refused = admission
                    .into_iter()
                    .flat_map(Admission::refused)
                    .filter_map(|(s, c, b)| self.engine.orphan_of(s, c, b))
                    .collect();
                let queued = [Direction::Send, Direction::Recv]
                    .into_iter()
                    .flat_map(|d| admission.into_iter().flat_map(move |a| a.waiting(d)))
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
                    engine: self
                        .engine
                        .leftovers()
                        .chain(self.strays.iter().copied())
                        .collect(),
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
    ///
    /// The admission is lent out of `self` for the call (one pointer moved each way, no
    /// placeholder built and dropped: this is on every send's and receive's path). It is
    /// never lent twice: nothing `f` reaches through `self` runs an admission step.
    fn with_admission<R>(&mut self, f: impl FnOnce(&mut Admission<Command>, &mut Self) -> R) -> R {
        debug_assert!(self.admission.is_some(), "the admission is lent once");
        let mut a = self.admission.take().unwrap_or_default();
        let r = f(&mut a, self);
        self.admission = Some(a);
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
                    Err(e) => done.call(Err(CommError::from(e))),
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
                    Err(e) => done.call(Err(CommError::from(e))),
                }
            }
            other => self.command(other),
        }
        Ok(None)
    }

    /// Submits what waits for room and hands refused envelopes in again; whether any
    /// went in.
    fn admit_waiting(&mut self) -> bool {
        if self.admission.as_deref().is_none_or(Admission::is_empty) {
            self.marked.clear();
            return false;
        }
        let marked = core::mem::take(&mut self.marked);
        self.with_admission(|a, p| {
            for key in marked {
                a.retry_key(p, key);
            }
            a.admit_waiting(p) | a.retry_refused(p)
        })
    }

    /// Reports a finished receive to the engine; a receive that got its marker
    /// (protocol §19) makes its key's refused envelopes go in again.
    fn received(&mut self, req: ReqId, len: u64) {
        let _ = self.engine.handle_received(req, len);
        if let Some(key) = self.engine.marked_key(req) {
            self.marked.push(key);
        }
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
                    // Not a full table of the engine's (a receive that cannot go in yet
                    // waits inside it, in order, a discard buffer's slot included): a
                    // usage error, reported as the request's failure.
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
                        done.call(Err(error));
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

    fn can_submit(&self, dir: Direction) -> bool {
        self.engine.can_submit(dir.kind())
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

    fn recv_would_wait(&self, key: Key) -> bool {
        self.engine.recv_would_wait(key)
    }

    fn recv_room(&self) -> Option<starling_core::engine::RecvRoom> {
        Some(self.engine.recv_room())
    }

    fn fast_path(&self) -> bool {
        starling_core::fast::enabled(self.engine.config())
    }

    fn fast_message_here(&self, key: Key) -> bool {
        starling_core::fast::fast_tag(self.engine.config(), key.comm, key.tag)
            .is_some_and(|tag| self.transport.has_message(key.peer, key.comm, tag))
    }

    fn early_keys(&self, f: &mut dyn FnMut(Key)) {
        self.engine.early_keys().for_each(f);
    }

    fn any_early(&self) -> bool {
        self.engine.any_early()
    }

    fn waiting_arrivals(&self) -> u64 {
        self.engine.waiting_arrivals()
    }
}

pub(crate) mod config;
mod driver;
mod events;

pub(crate) use driver::{Drive, Driven, DriverGuard, run, start};

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

    #[test]
    fn a_header_moves_in_before_the_payload() {
        let mut v = Vec::with_capacity(40);
        v.extend_from_slice(&[1, 2, 3]);
        events::prepend(&mut v, &[9, 8]);
        assert_eq!(v, [9, 8, 1, 2, 3]);
        let mut empty = Vec::new();
        events::prepend(&mut empty, &[7; 24]);
        assert_eq!(empty, [7; 24]);
        let mut long: Vec<u8> = (0..=255).collect();
        events::prepend(&mut long, &[0xAA; 24]);
        assert_eq!(long.len(), 280);
        assert!(long[..24].iter().all(|&b| b == 0xAA));
        assert!(long[24..].iter().copied().eq(0..=255));
    }
}
