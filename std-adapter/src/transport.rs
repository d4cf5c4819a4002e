//! The transport a rank's progression thread drives the engine over.
//!
//! A [`Transport`] offers what the engine's [`Transmit`](starling_core::engine::Transmit)s
//! need from MPI: sends and receives addressed by (communicator, rank, physical tag),
//! receives matched in posting order (MPI's non-overtaking rule), messages on the
//! envelope tag handed over as they arrive, and a barrier. Completions come back through
//! [`Transport::poll`]. Only the progression thread calls a transport.
//!
//! [`InProcess`] connects N ranks that are threads of one process: a message is a
//! `Vec<u8>` moved into the destination's inbox. It is the embedded default.

use std::collections::{HashMap, VecDeque};

use starling_core::{CommId, PhysTag, Rank, ReqId};

pub use crate::buffer::{RecvBuffer, SendBuffer};
use crate::device::DeviceValue;
use crate::sync::{Arc, AtomicUsize, Ordering};

/// Something a transport finished or received.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// The send posted with this token left (its buffer is free).
    Sent(ReqId),
    /// The receive posted with this token got these bytes.
    Received(ReqId, Vec<u8>),
    /// A message arrived on the envelope tag.
    Envelope {
        /// Its sender.
        source: Rank,
        /// Its communicator.
        comm: CommId,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// The barrier posted with this token completed on every rank.
    Barrier(u64),
    /// The receive posted with this token by [`Transport::recv_lent`] wrote this many
    /// bytes into the lent buffer, and dropped the buffer.
    ReceivedInPlace(ReqId, usize),
    /// The receive posted with this token got a device value in place of bytes
    /// ([`Transport::send_device`]).
    ReceivedDevice(ReqId, DeviceValue),
}

/// A transport between ranks, driven by one progression thread.
pub trait Transport: Send + 'static {
    /// What a peer hands to this rank's progression thread (through its inbox).
    type Wire: Send + 'static;

    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// The largest physical tag the transport accepts (MPI's `MPI_TAG_UB`).
    fn tag_ub(&self) -> i32;
    /// Messages on this tag are handed over as [`Completion::Envelope`] as they arrive.
    fn set_envelope_tag(&mut self, tag: PhysTag);
    /// No message on the envelope tag is longer than `bytes` (a header and the largest
    /// payload that rides inside it), on any rank: a transport may receive envelopes into
    /// buffers of that size posted ahead of time. Told once, after
    /// [`Transport::set_envelope_tag`]; ignored by default.
    fn set_envelope_limit(&mut self, bytes: usize) {
        let _ = bytes;
    }
    /// Posts a send of `bytes`; reports [`Completion::Sent`] with `token` when it left,
    /// if a token is given.
    fn send(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        bytes: Vec<u8>,
        token: Option<ReqId>,
    );
    /// Posts a receive of at most `size` bytes; reports [`Completion::Received`].
    fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, size: usize, token: ReqId);
    /// Posts a receive of `buffer.len()` bytes into `buffer` (a recycled buffer, whose
    /// old contents are overwritten); reports [`Completion::Received`] with `token` and
    /// the buffer. The default ignores the buffer and calls [`Transport::recv`].
    fn recv_into(
        &mut self,
        source: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Vec<u8>,
        token: ReqId,
    ) {
        self.recv(source, comm, tag, buffer.len(), token);
    }
    /// Posts a send of `buffer`'s bytes read in place (a large handle's data, locked for
    /// reading until the buffer drops); reports [`Completion::Sent`] with `token` when it
    /// left, if a token is given. The default copies the bytes and calls
    /// [`Transport::send`].
    fn send_lent(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Box<dyn SendBuffer>,
        token: Option<ReqId>,
    ) {
        self.send(dest, comm, tag, buffer.bytes().to_vec(), token);
    }
    /// Whether [`Transport::send_device`] carries device values as they are (ranks of
    /// one process sharing their devices); the default is `false`, and the runtime then
    /// sends bytes.
    fn carries_device_values(&self) -> bool {
        false
    }
    /// Sends a handle's value held on a device ([`DeviceValue`]) in place of its bytes;
    /// the receiver gets [`Completion::ReceivedDevice`]. The default copies the value's
    /// bytes from the device and calls [`Transport::send`] (an empty message if that copy
    /// failed, which the receiver reports as a size mismatch).
    fn send_device(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        value: DeviceValue,
        token: Option<ReqId>,
    ) {
        let bytes = value.into_bytes().unwrap_or_default();
        self.send(dest, comm, tag, bytes, token);
    }
    /// Posts a receive straight into `buffer` (a handle's data, locked for writing until
    /// the buffer drops) and reports [`Completion::ReceivedInPlace`]; or returns the
    /// buffer untouched when the transport cannot (the default), and the runtime posts an
    /// ordinary receive.
    fn recv_lent(
        &mut self,
        source: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Box<dyn RecvBuffer>,
        token: ReqId,
    ) -> Option<Box<dyn RecvBuffer>> {
        let _ = (source, comm, tag, token);
        Some(buffer)
    }
    /// A buffer whose send completed, for the runtime to reuse (see
    /// [`Transport::recv_into`]); the default keeps none.
    fn spent(&mut self) -> Option<Vec<u8>> {
        None
    }
    /// Posts a barrier; reports [`Completion::Barrier`] with `token` once every rank
    /// posted its own.
    fn barrier(&mut self, token: u64);
    /// Takes in something a peer sent to this rank's inbox.
    fn accept(&mut self, wire: Self::Wire);
    /// The next completion, if any.
    fn poll(&mut self) -> Option<Completion>;
    /// Whether the progression thread must poll actively (a transport that learns of
    /// arrivals only by polling, like MPI). When `false`, everything arrives through the
    /// inbox and the thread may block on it.
    fn needs_polling(&self) -> bool;
    /// Whether requests are in flight that move only while the transport is polled (MPI
    /// copies a long message in fragments, inside MPI calls): the progression thread of
    /// a polling transport then polls without sleeping. The default is `false`.
    fn busy(&self) -> bool {
        false
    }
}

/// What one in-process rank sends another.
#[derive(Debug)]
pub enum InProcessWire {
    /// A message.
    Message {
        /// Its sender.
        source: Rank,
        /// Its communicator.
        comm: CommId,
        /// Its physical tag.
        tag: PhysTag,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A message carrying a device value in place of bytes.
    DeviceMessage {
        /// Its sender.
        source: Rank,
        /// Its communicator.
        comm: CommId,
        /// Its physical tag.
        tag: PhysTag,
        /// The value.
        value: DeviceValue,
    },
    /// The sender entered barrier number `generation`.
    Barrier {
        /// Its sender.
        source: Rank,
        /// Which barrier (counted from 0 on every rank).
        generation: u64,
    },
}

/// What a message carries.
#[derive(Debug)]
enum Body {
    Bytes(Vec<u8>),
    Device(DeviceValue),
}

impl Body {
    /// The completion of the receive `token` that gets this body.
    fn received(self, token: ReqId) -> Completion {
        match self {
            Self::Bytes(b) => Completion::Received(token, b),
            Self::Device(v) => Completion::ReceivedDevice(token, v),
        }
    }
}

/// Delivers a wire item into a rank's inbox.
pub type Deliver = Arc<dyn Fn(InProcessWire) + Send + Sync>;

/// The in-process transport of one rank.
pub struct InProcess {
    rank: Rank,
    size: u32,
    tag_ub: i32,
    peers: Vec<Deliver>,
    /// Messages sent by any rank and not yet accepted: zero when the network is quiet.
    in_flight: Arc<AtomicUsize>,
    envelope_tag: Option<PhysTag>,
    posted: Vec<(Rank, CommId, PhysTag, usize, ReqId)>,
    unexpected: VecDeque<(Rank, CommId, PhysTag, Body)>,
    completions: VecDeque<Completion>,
    barrier_arrivals: HashMap<u64, u32>,
    barrier_generation: u64,
    barrier_waiting: Option<(u64, u64)>,
}

impl core::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InProcess")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl InProcess {
    /// Rank `rank` of a cluster whose inboxes are `peers` (indexed by rank).
    /// `in_flight` is shared by all ranks of the cluster.
    pub fn new(rank: Rank, peers: Vec<Deliver>, tag_ub: i32, in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            rank,
            size: peers.len() as u32,
            tag_ub,
            peers,
            in_flight,
            envelope_tag: None,
            posted: Vec::new(),
            unexpected: VecDeque::new(),
            completions: VecDeque::new(),
            barrier_arrivals: HashMap::new(),
            barrier_generation: 0,
            barrier_waiting: None,
        }
    }

    fn deliver(&self, dest: Rank, wire: InProcessWire) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        (self.peers[dest.index()])(wire);
    }

    /// Delivers a data message and completes its send: the payload (bytes, or a device
    /// snapshot) was moved into the destination's inbox, as an MPI send whose payload
    /// was buffered.
    fn deliver_sent(&mut self, dest: Rank, wire: InProcessWire, token: Option<ReqId>) {
        self.deliver(dest, wire);
        if let Some(t) = token {
            self.completions.push_back(Completion::Sent(t));
        }
    }

    /// A data message arrived: it completes the first matching posted receive, or waits.
    fn arrive(&mut self, source: Rank, comm: CommId, tag: PhysTag, body: Body) {
        let found = self
            .posted
            .iter()
            .position(|(s, c, t, _, _)| *s == source && *c == comm && *t == tag);
        match found {
            Some(i) => {
                let (_, _, _, _, token) = self.posted.remove(i);
                self.completions.push_back(body.received(token));
            }
            None => self.unexpected.push_back((source, comm, tag, body)),
        }
    }

    fn check_barrier(&mut self) {
        if let Some((generation, token)) = self.barrier_waiting {
            let arrived = self.barrier_arrivals.get(&generation).copied().unwrap_or(0);
            if arrived + 1 >= self.size {
                self.barrier_arrivals.remove(&generation);
                self.barrier_waiting = None;
                self.completions.push_back(Completion::Barrier(token));
            }
        }
    }
}

impl Transport for InProcess {
    type Wire = InProcessWire;

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    fn set_envelope_tag(&mut self, tag: PhysTag) {
        self.envelope_tag = Some(tag);
    }

    fn send(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        bytes: Vec<u8>,
        token: Option<ReqId>,
    ) {
        let source = self.rank;
        let wire = InProcessWire::Message {
            source,
            comm,
            tag,
            bytes,
        };
        self.deliver_sent(dest, wire, token);
    }

    fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, size: usize, token: ReqId) {
        let found = self
            .unexpected
            .iter()
            .position(|(s, c, t, _)| *s == source && *c == comm && *t == tag);
        match found {
            Some(i) => {
                if let Some((_, _, _, body)) = self.unexpected.remove(i) {
                    self.completions.push_back(body.received(token));
                }
            }
            None => self.posted.push((source, comm, tag, size, token)),
        }
    }

    fn carries_device_values(&self) -> bool {
        true
    }

    fn send_device(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        value: DeviceValue,
        token: Option<ReqId>,
    ) {
        let source = self.rank;
        let wire = InProcessWire::DeviceMessage {
            source,
            comm,
            tag,
            value,
        };
        self.deliver_sent(dest, wire, token);
    }

    fn barrier(&mut self, token: u64) {
        let generation = self.barrier_generation;
        self.barrier_generation += 1;
        for r in 0..self.size {
            if r != self.rank.0 {
                self.deliver(
                    Rank(r),
                    InProcessWire::Barrier {
                        source: self.rank,
                        generation,
                    },
                );
            }
        }
        self.barrier_waiting = Some((generation, token));
        self.check_barrier();
    }

    fn accept(&mut self, wire: InProcessWire) {
        match wire {
            InProcessWire::Message {
                source,
                comm,
                tag,
                bytes,
            } => {
                if Some(tag) == self.envelope_tag {
                    self.completions.push_back(Completion::Envelope {
                        source,
                        comm,
                        bytes,
                    });
                } else {
                    self.arrive(source, comm, tag, Body::Bytes(bytes));
                }
            }
            InProcessWire::DeviceMessage {
                source,
                comm,
                tag,
                value,
            } => self.arrive(source, comm, tag, Body::Device(value)),
            InProcessWire::Barrier { generation, .. } => {
                *self.barrier_arrivals.entry(generation).or_default() += 1;
                self.check_barrier();
            }
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    fn poll(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    fn needs_polling(&self) -> bool {
        false
    }
}
