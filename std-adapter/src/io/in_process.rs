//! [`InProcess`]: the [`Transport`] of N ranks that are threads of one process.
//!
//! A message is a `Vec<u8>` (or a device value, [`DeviceValue`]) moved into the
//! destination's inbox ([`Deliver`]); barriers count arrivals per generation. It is the
//! embedded default: [`run_local`](crate::run_local) builds one per rank.

use std::collections::VecDeque;

use starling_core::{CommId, PhysTag, Rank, ReqId};

use crate::io::barrier::MessageBarrier;
use crate::io::transport::{Completion, Transport};
use crate::runtime::device::DeviceValue;
use crate::sync::{Arc, AtomicUsize, Ordering};

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
    barrier: MessageBarrier,
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
            barrier: MessageBarrier::default(),
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
        let peers = self.size.saturating_sub(1) as usize;
        if let Some(token) = self.barrier.complete(peers) {
            self.completions.push_back(Completion::Barrier(token));
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
        let generation = self.barrier.enter(token);
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
                self.barrier.arrived(generation);
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
