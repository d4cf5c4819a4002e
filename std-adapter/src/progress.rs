//! The progression thread: the one thread of a rank that drives the protocol engine.
//!
//! It owns the rank's [`Engine`] and its [`Transport`]. Application threads and workers
//! talk to it only through its inbox ([`Input`]): commands (post a send whose data is
//! packed, post a receive into a handle, a barrier, queries) and, for the in-process
//! transport, the messages peers deliver. Its loop is the adapter loop of the core's
//! driving contract: take inputs, hand them to the engine, drain `poll_transmit` and
//! `poll_event`, perform what they return.

use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};

use starling_core::engine::{
    Arrival, Config, Engine, Event, Leftover, MessageError, RecvArgs, RequestError, SendArgs,
    SubmitError, Transmit, UsageError,
};
use starling_core::error::Table;
use starling_core::request::Kind;
use starling_core::tags::TagSpace;
use starling_core::{CommId, Rank, ReqId};

use crate::data::{AnyCell, DataError};
use crate::error::CommError;
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering};
use crate::trace::{CommTrace, Recorder};
use crate::transport::{Completion, Transport};

/// How long after its last activity a polled transport's progression thread keeps
/// polling without sleeping.
const HOT: Duration = Duration::from_millis(1);

/// The engine of a rank: 4096 requests, 1024 match keys, 256 peers in the statistics.
pub(crate) type RankEngine = Engine<4096, 1024, 256>;

/// Called once, on the progression thread, when a request finishes.
pub(crate) type Done = Box<dyn FnOnce(Result<(), CommError>) + Send>;

/// What the progression thread is asked to do.
pub(crate) enum Command {
    /// Send `bytes` (a handle's packed value).
    Send {
        args: SendArgs,
        bytes: Vec<u8>,
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
    /// Answer with the bytes sent to each peer.
    Amounts(Box<dyn FnOnce(Vec<u64>) + Send>),
    /// Answer with what is left in the engine.
    Leftovers(Box<dyn FnOnce(Vec<Leftover>) + Send>),
    /// Answer with the statistics report.
    Report(Box<dyn FnOnce(String) + Send>),
    /// Answer with how many messages arrived as early data.
    EarlyMessages(Box<dyn FnOnce(u64) + Send>),
    /// Stop the thread.
    Stop,
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
        bytes: Option<Vec<u8>>,
        done: Done,
    },
    Recv {
        cell: Arc<dyn AnyCell>,
        bytes: Option<Vec<u8>>,
        done: Done,
    },
}

/// What the progression thread shares with the rest of the rank.
pub(crate) struct Shared {
    /// Inputs sent to the inbox and not yet processed.
    pub(crate) queued: AtomicUsize,
    /// Incremented whenever the thread processed something: a quiescence witness.
    pub(crate) epoch: AtomicU64,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            queued: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
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
    /// The rank's timeline trace, when tracing.
    pub(crate) timeline: Option<Arc<Recorder>>,
}

struct Progress<T: Transport> {
    transport: T,
    engine: Box<RankEngine>,
    pending: HashMap<ReqId, Pending>,
    early: HashMap<ReqId, Vec<u8>>,
    /// Envelope messages the engine refused for a full table, in arrival order.
    refused: VecDeque<(Rank, CommId, Vec<u8>)>,
    barriers: HashMap<u64, Box<dyn FnOnce() + Send>>,
    next_barrier: u64,
    shared: Arc<Shared>,
    trace: bool,
    rank: Rank,
    start: std::time::Instant,
    timeline: CommTrace,
}

/// Runs the progression loop until [`Command::Stop`].
pub(crate) fn run<T: Transport>(
    mut transport: T,
    inbox: Receiver<Input<T::Wire>>,
    config: ProgressConfig,
    shared: Arc<Shared>,
) {
    let rank = transport.rank();
    let size = transport.size();
    transport.set_envelope_tag(config.tags.envelope());
    let mut engine_config = Config::new(rank, size, config.tags);
    engine_config.eager_limit = 4096;
    engine_config.priorities = config.priorities;
    engine_config.max_inflight_sends = config.max_inflight_sends;
    let mut engine = Box::new(RankEngine::new(engine_config));
    if config.stats {
        engine.stats_mut().enable();
    }
    let mut p = Progress {
        transport,
        engine,
        pending: HashMap::new(),
        early: HashMap::new(),
        refused: VecDeque::new(),
        barriers: HashMap::new(),
        next_barrier: 0,
        shared,
        trace: config.trace,
        rank,
        start: std::time::Instant::now(),
        timeline: CommTrace::new(config.timeline, rank, config.tags.envelope()),
    };
    let polling = p.transport.needs_polling();
    let mut last_active = std::time::Instant::now();
    loop {
        // Block for the next input unless the transport must be polled. A polled
        // transport (MPI) learns of arrivals and moves long messages only when polled:
        // while it is busy, or anything happened within `HOT`, poll without sleeping,
        // yielding the core between polls; once idle, poll every 50 µs.
        let hot = polling && (p.transport.busy() || last_active.elapsed() < HOT);
        let first = if hot {
            match inbox.try_recv() {
                Ok(input) => Some(input),
                Err(TryRecvError::Empty) => {
                    std::thread::yield_now();
                    None
                }
                Err(TryRecvError::Disconnected) => return,
            }
        } else {
            let timeout = if polling {
                Duration::from_micros(50)
            } else {
                Duration::from_millis(100)
            };
            match inbox.recv_timeout(timeout) {
                Ok(input) => Some(input),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        // Take in everything queued, then drive the engine once: sends that became ready
        // together leave in priority order.
        let mut inputs: Vec<Input<T::Wire>> = first.into_iter().collect();
        inputs.extend(inbox.try_iter());
        let taken = inputs.len();
        let mut stop = false;
        for input in inputs {
            match input {
                Input::Command(Command::Stop) => stop = true,
                Input::Command(c) => p.command(c),
                Input::Net(w) => p.transport.accept(w),
            }
        }
        if p.pump() || taken > 0 {
            last_active = std::time::Instant::now();
        }
        p.shared.queued.fetch_sub(taken, Ordering::SeqCst);
        p.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if stop {
            return;
        }
    }
}

impl<T: Transport> Progress<T> {
    fn command(&mut self, c: Command) {
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
                                done,
                            },
                        );
                        self.data_ready(req);
                    }
                    Err(e) => done(Err(CommError::from(e))),
                }
            }
            Command::Barrier { done } => {
                let token = self.next_barrier;
                self.next_barrier += 1;
                self.barriers.insert(token, done);
                self.transport.barrier(token);
            }
            Command::Amounts(reply) => {
                let mut v = vec![0; self.transport.size() as usize];
                self.engine.stats().retrieve(&mut v);
                reply(v);
            }
            Command::Leftovers(reply) => reply(self.engine.leftovers().collect()),
            Command::EarlyMessages(reply) => reply(self.engine.early_messages()),
            Command::Report(reply) => {
                let elapsed = self.start.elapsed().as_micros() as u64;
                reply(self.engine.stats().report(self.rank, elapsed).to_string());
            }
            Command::Stop => {}
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
        while let Some(t) = self.engine.poll_transmit() {
            self.perform(t);
        }
        while let Some(e) = self.engine.poll_event() {
            self.on_event(e);
        }
    }

    /// Drives the engine until neither it nor the transport has anything to do; whether
    /// anything happened.
    fn pump(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut progressed = false;
            while let Some(t) = self.engine.poll_transmit() {
                self.perform(t);
                progressed = true;
            }
            while let Some(e) = self.engine.poll_event() {
                self.on_event(e);
                progressed = true;
            }
            if let Some(c) = self.transport.poll() {
                self.on_completion(c);
                progressed = true;
            }
            // Progress may have freed room: waiting receives and envelopes go in again.
            if !progressed && self.retry_refused() {
                progressed = true;
            }
            if !progressed {
                return any;
            }
            any = true;
        }
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
                let mut bytes = header.to_vec();
                if let Some(req) = inline {
                    if let Some(Pending::Send { bytes: Some(b), .. }) = self.pending.get(&req) {
                        bytes.extend_from_slice(b);
                    }
                }
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
                    Some(Pending::Send { bytes, .. }) => bytes.take().unwrap_or_default(),
                    _ => Vec::new(),
                };
                self.timeline.send(dest, comm, tag, &bytes, Some(req));
                self.transport.send(dest, comm, tag, bytes, Some(req));
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
                self.transport.recv(source, comm, tag, size as usize, req);
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
        }
        self.retry_refused();
    }

    /// Hands an envelope message to the engine. While earlier ones wait in `refused`,
    /// it waits behind them: messages of one (source, tag) key keep their order.
    fn on_envelope(&mut self, source: Rank, comm: CommId, bytes: Vec<u8>) {
        if !self.refused.is_empty() {
            self.refused.push_back((source, comm, bytes));
            return;
        }
        self.handle_envelope(source, comm, bytes);
    }

    fn handle_envelope(&mut self, source: Rank, comm: CommId, bytes: Vec<u8>) {
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
            Err(MessageError::Full(_)) => self.refused.push_back((source, comm, bytes)),
            Err(e) => eprintln!(
                "[starling][{}] dropped a message from {source}: {e}",
                self.rank.0
            ),
        }
    }

    /// Hands refused envelopes in again, in arrival order, until one is refused again.
    fn retry_refused(&mut self) -> bool {
        let mut any = false;
        while let Some((source, comm, bytes)) = self.refused.pop_front() {
            let before = self.refused.len();
            self.handle_envelope(source, comm, bytes);
            if self.refused.len() > before {
                // Refused again: it went to the back; put it back in front, keep order.
                if let Some(m) = self.refused.pop_back() {
                    self.refused.push_front(m);
                }
                break;
            }
            any = true;
        }
        any
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
                match (kind, self.pending.remove(&req)) {
                    (Kind::Send, Some(Pending::Send { done, .. })) => done(Ok(())),
                    (Kind::Recv, Some(Pending::Recv { cell, bytes, done })) => {
                        let bytes = early.or(bytes).unwrap_or_default();
                        let result = if bytes.len() as u64 != len {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got: bytes.len(),
                            }))
                        } else {
                            cell.unpack(&bytes).map_err(CommError::Data)
                        };
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
