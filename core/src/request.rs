//! Requests: the state machine of one point-to-point send or receive, and the slab
//! that stores them.
//!
//! A [`Request`] is the core's record of one message the application (or the engine
//! itself) wants to send or receive: the reference's `struct _starpu_mpi_req`
//! (internals §2.1) without the buffer, which the adapter owns. Its [`State`] moves only
//! through [`State::step`], a pure function of the current state, the request's
//! [`Kind`], its `sync` flag and the [`Step`] that happened; every other combination is
//! an [`IllegalStep`], a local caller's misuse that changes nothing.
//!
//! # The transition table
//!
//! | kind | sync | from | step | to | when |
//! | --- | --- | --- | --- | --- | --- |
//! | send | any | `Created` | `DataReady` | `Ready` | the datum was acquired in R mode; the send waits in the [ready list](crate::lists::ReadyList) |
//! | send | no | `Ready` | `Posted` | `Transferring` | envelope and payload handed to the transport (an eager send carries its payload inside the envelope) |
//! | send | yes | `Ready` | `EnvelopeSent` | `AwaitingReady` | the envelope (sync flag set) was handed to the transport; the request waits in [`SyncSends`](crate::lists::SyncSends) |
//! | send | yes | `AwaitingReady` | `ReadyReceived` | `Transferring` | the receiver's ready acknowledgement arrived and the payload is posted in the same engine step |
//! | recv | any | `Created` | `DataReady` | `Ready` | the datum was acquired in W mode; the receive is being matched |
//! | recv | any | `Ready` | `Queued` | `AwaitingEnvelope` | no envelope for its key yet: the receive waits in the early-request table |
//! | recv | any | `Ready` | `Matched` | `Transferring` | an envelope for its key was already there (early data, a sync envelope) |
//! | recv | any | `AwaitingEnvelope` | `Matched` | `Transferring` | its envelope arrived |
//! | recv | any | `Ready` | `Done` | `Completed` | the payload was already local (eager payload, finished early data) and was copied |
//! | recv | any | `Ready` | `FastPosted` | `AwaitingFast` | its key has a fast tag (protocol §19): it was posted there, in its key's order |
//! | recv | any | `AwaitingFast` | `Done` | `Completed` | a fast message (a payload of at least one byte) filled it |
//! | recv | any | `AwaitingFast` | `Marked` | `AwaitingEnvelope` | a marker (an empty message) came on the fast tag: its message is the key's next envelope message |
//! | any | any | `Transferring` | `Done` | `Completed` | the transport finished the payload (and the copy out of an early buffer, if any) |
//!
//! Rules that the table encodes:
//!
//! - **A synchronous send has no `Posted` step.** Its payload may only be posted once
//!   the receiver acknowledged, so `Ready --Posted-->` is illegal for it (that would skip
//!   the handshake) and the acknowledgement itself (`ReadyReceived`) moves it to
//!   `Transferring`: the engine posts the payload in the same step in which it handles
//!   the acknowledgement, as the reference does (internals §3.7 step 4). Conversely a
//!   non-synchronous send can never wait for an acknowledgement.
//! - **A receive ignores its `sync` flag.** Whether the sender was synchronous only
//!   changes what the engine emits on `Matched` (a ready acknowledgement before the
//!   payload receive), not the receive's states. The flag is learnt from the envelope.
//! - **`Completed` is terminal**: no step leaves it. The engine then removes the request
//!   from the [`Slab`]; its [`ReqId`] never resolves again.
//! - A failed step changes nothing: [`Request::apply`] leaves the state as it was.
//!
//! # The slab
//!
//! [`Slab`] stores up to `N` requests and names them by a generational [`ReqId`]. Insert
//! and remove are O(1) (a free list threaded through the vacant slots). Freed slots are
//! reused oldest-freed first, and each reuse increments the slot's generation, so a
//! removed id never resolves again: it could only do so after the generation of its slot
//! wrapped around, that is after 2³² further reuses of that very slot.

use core::fmt;

use crate::error::{Full, Table};
use crate::lists::Key;
use crate::types::{CommId, MsgId, Priority, Rank, ReqId, Tag};

/// Whether a request sends or receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Kind {
    /// A send (the reference's `SEND_REQ`).
    Send,
    /// A receive (the reference's `RECV_REQ`).
    Recv,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Send => "send",
            Self::Recv => "recv",
        })
    }
}

/// Where a request is in its life; see the [module docs](self) for the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum State {
    /// Submitted, waiting for its datum to be acquired (R mode for a send, W for a
    /// receive).
    Created,
    /// Datum acquired: a send waits in the ready list, a receive is being matched.
    Ready,
    /// A receive waiting in the early-request table for its envelope (or, on a key with a
    /// fast tag, marked and waiting for the key's next envelope message).
    AwaitingEnvelope,
    /// A receive posted on its key's fast tag (protocol §19), waiting for a fast message
    /// or a marker.
    AwaitingFast,
    /// A synchronous send whose envelope was sent, waiting for the receiver's ready
    /// acknowledgement.
    AwaitingReady,
    /// The payload was handed to the transport (or is being received into an early
    /// buffer that will be copied out).
    Transferring,
    /// Finished. Terminal.
    Completed,
}

impl State {
    /// Every state, in the order of the transition table (for exhaustive tests and
    /// fuzzers).
    pub const ALL: [Self; 7] = [
        Self::Created,
        Self::Ready,
        Self::AwaitingEnvelope,
        Self::AwaitingFast,
        Self::AwaitingReady,
        Self::Transferring,
        Self::Completed,
    ];

    /// The state after `step` for a request of `kind` and `sync` flag.
    ///
    /// Pure: it only looks at its arguments.
    ///
    /// # Errors
    ///
    /// [`IllegalStep`] when the [transition table](self) has no row for
    /// (`kind`, `sync`, `self`, `step`).
    pub const fn step(self, kind: Kind, sync: bool, step: Step) -> Result<Self, IllegalStep> {
        let next = match (kind, self, step) {
            (_, Self::Created, Step::DataReady) => Some(Self::Ready),
            (Kind::Send, Self::Ready, Step::Posted) if !sync => Some(Self::Transferring),
            (Kind::Send, Self::Ready, Step::EnvelopeSent) if sync => Some(Self::AwaitingReady),
            (Kind::Send, Self::AwaitingReady, Step::ReadyReceived) if sync => {
                Some(Self::Transferring)
            }
            (Kind::Recv, Self::Ready, Step::Queued) => Some(Self::AwaitingEnvelope),
            (Kind::Recv, Self::Ready | Self::AwaitingEnvelope, Step::Matched) => {
                Some(Self::Transferring)
            }
            (Kind::Recv, Self::Ready, Step::Done) => Some(Self::Completed),
            (Kind::Recv, Self::Ready, Step::FastPosted) => Some(Self::AwaitingFast),
            (Kind::Recv, Self::AwaitingFast, Step::Done) => Some(Self::Completed),
            (Kind::Recv, Self::AwaitingFast, Step::Marked) => Some(Self::AwaitingEnvelope),
            (_, Self::Transferring, Step::Done) => Some(Self::Completed),
            _ => None,
        };
        match next {
            Some(state) => Ok(state),
            None => Err(IllegalStep { from: self, step }),
        }
    }

    /// Whether the state is [`State::Completed`].
    #[inline]
    pub const fn is_completed(self) -> bool {
        matches!(self, Self::Completed)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Created => "created",
            Self::Ready => "ready",
            Self::AwaitingEnvelope => "awaiting envelope",
            Self::AwaitingFast => "awaiting fast message",
            Self::AwaitingReady => "awaiting ready ack",
            Self::Transferring => "transferring",
            Self::Completed => "completed",
        })
    }
}

/// Something that happened to a request; the input of [`State::step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Step {
    /// The request's datum was acquired.
    DataReady,
    /// A receive found no envelope for its key and was put in the early-request table.
    Queued,
    /// A receive was paired with an envelope (one that just arrived, or one found in the
    /// early-data table).
    Matched,
    /// A synchronous send's envelope was handed to the transport.
    EnvelopeSent,
    /// A synchronous send got the receiver's ready acknowledgement (and its payload is
    /// posted in the same engine step).
    ReadyReceived,
    /// A non-synchronous send's envelope and payload were handed to the transport.
    Posted,
    /// The transfer finished (or, for a receive served from a local payload, the copy
    /// did).
    Done,
    /// A receive was posted on its key's fast tag (protocol §19).
    FastPosted,
    /// A receive posted on its key's fast tag got a marker: its message is the key's
    /// next envelope message.
    Marked,
}

impl Step {
    /// Every step (for exhaustive tests and fuzzers).
    pub const ALL: [Self; 9] = [
        Self::DataReady,
        Self::Queued,
        Self::Matched,
        Self::EnvelopeSent,
        Self::ReadyReceived,
        Self::Posted,
        Self::Done,
        Self::FastPosted,
        Self::Marked,
    ];
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DataReady => "data ready",
            Self::Queued => "queued",
            Self::Matched => "matched",
            Self::EnvelopeSent => "envelope sent",
            Self::ReadyReceived => "ready received",
            Self::Posted => "posted",
            Self::Done => "done",
            Self::FastPosted => "fast posted",
            Self::Marked => "marked",
        })
    }
}

/// A step that the [transition table](self) does not allow from the current state.
///
/// This is a local caller's misuse (the engine applied a step out of order), never
/// something a peer can cause by itself: the engine checks a peer's input (an
/// acknowledgement for an unknown send, say) before it steps a request. The request is
/// unchanged; the caller should treat it as a bug and report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct IllegalStep {
    /// The state the request was (and still is) in.
    pub from: State,
    /// The step that was refused.
    pub step: Step,
}

impl fmt::Display for IllegalStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "illegal request step `{}` from state `{}`",
            self.step, self.from
        )
    }
}

impl core::error::Error for IllegalStep {}

/// One point-to-point send or receive.
///
/// Build one with [`Request::send`] or [`Request::recv`] (and the `with_*` methods),
/// then store it in a [`Slab`]. Fields are public so that the engine can read them
/// freely; change [`state`](Self::state) only through [`Request::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Request {
    /// Send or receive.
    pub kind: Kind,
    /// The communicator.
    pub comm: CommId,
    /// The destination of a send, the source of a receive.
    pub peer: Rank,
    /// The user tag.
    pub tag: Tag,
    /// For a send: the payload size in bytes. For a receive: the capacity of the
    /// receive buffer in bytes.
    pub size: u64,
    /// The priority; only sends are ordered by it (in the ready list).
    pub priority: Priority,
    /// Synchronous mode: a send waits for the receiver's ready acknowledgement before
    /// its payload goes; a receive learns it from the envelope.
    pub sync: bool,
    /// Nobody waits for this request: the engine completes and frees it by itself.
    pub detached: bool,
    /// An engine-owned receive of early data, not an application request.
    pub internal: bool,
    /// The data-message id: chosen when a send's envelope is built, learnt from the
    /// envelope by a receive. `None` until then.
    pub msg: Option<MsgId>,
    /// The payload size announced by the envelope (a receive) or sent (a send); 0 until
    /// the envelope is built or matched. A receive completes only if exactly this many
    /// bytes arrive.
    pub msg_size: u64,
    /// For an engine-owned early receive: what to do with its payload once it lands.
    pub link: Link,
    /// Where the request is in its life.
    pub state: State,
}

/// Where the payload of an engine-owned early receive goes (internals §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Link {
    /// No application receive took it yet: it stays in the early-data table.
    None,
    /// This application receive took it: hand the payload over when it lands.
    DeliverTo(ReqId),
    /// Nobody wants it (the receive that matched it failed): free it when it lands.
    Discard,
    /// A discard buffer from the start: it drains the payload of a message too long for
    /// the receive it arrived for, and is freed when it lands. It holds a slot of the
    /// slab outside the request budget (the receive's message is here: within the budget
    /// the receive could wait for a slot only its own completion frees).
    Drain,
}

impl Request {
    /// A send of `size` bytes to `dest` with user tag `tag`: default priority, not
    /// synchronous, not detached, in state [`State::Created`].
    pub const fn send(comm: CommId, dest: Rank, tag: Tag, size: u64) -> Self {
        Self {
            kind: Kind::Send,
            comm,
            peer: dest,
            tag,
            size,
            priority: Priority::DEFAULT,
            sync: false,
            detached: false,
            internal: false,
            msg: None,
            msg_size: 0,
            link: Link::None,
            state: State::Created,
        }
    }

    /// A receive from `source` with user tag `tag` into a buffer of `capacity` bytes:
    /// default priority, not detached, in state [`State::Created`].
    pub const fn recv(comm: CommId, source: Rank, tag: Tag, capacity: u64) -> Self {
        Self {
            kind: Kind::Recv,
            peer: source,
            size: capacity,
            ..Self::send(comm, source, tag, capacity)
        }
    }

    /// The engine's internal receive of an early data message (internals §3.5): a
    /// detached, internal receive of `size` bytes for the envelope `msg`, in state
    /// [`State::Created`]. Synchronous envelopes never create one (internals §3.5).
    pub const fn internal_recv(
        comm: CommId,
        source: Rank,
        tag: Tag,
        size: u64,
        msg: MsgId,
    ) -> Self {
        Self {
            detached: true,
            internal: true,
            msg: Some(msg),
            msg_size: size,
            ..Self::recv(comm, source, tag, size)
        }
    }

    /// This request with priority `priority`.
    #[must_use]
    pub const fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// This request with synchronous mode `sync`.
    #[must_use]
    pub const fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// This request with the detached flag `detached`.
    #[must_use]
    pub const fn with_detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// The matching key of the request: (communicator, peer, user tag).
    #[inline]
    pub const fn key(&self) -> Key {
        Key {
            comm: self.comm,
            peer: self.peer,
            tag: self.tag,
        }
    }

    /// Applies `step` to the request's state and returns the new state.
    ///
    /// # Errors
    ///
    /// [`IllegalStep`] when the [transition table](self) forbids the step; the request
    /// is left unchanged.
    pub const fn apply(&mut self, step: Step) -> Result<State, IllegalStep> {
        match self.state.step(self.kind, self.sync, step) {
            Ok(next) => {
                self.state = next;
                Ok(next)
            }
            Err(e) => Err(e),
        }
    }
}

/// A slot of the slab.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// Holds a request handed out under `generation`.
    Occupied { generation: u32, request: Request },
    /// Free; the next request stored here gets `generation`. `next` links the free list.
    Vacant { generation: u32, next: Option<u32> },
}

/// Up to `N` requests, named by generational [`ReqId`]s.
///
/// Insert and remove are O(1). A removed id never resolves again (see the
/// [module docs](self)). `N` must fit in a `u32` (checked when [`Slab::new`] is
/// evaluated).
#[derive(Clone, Debug)]
pub struct Slab<const N: usize> {
    /// Slots handed out so far; grows up to `N`, never shrinks.
    slots: heapless::Vec<Slot, N>,
    /// Oldest freed slot (reused first).
    free_head: Option<u32>,
    /// Newest freed slot.
    free_tail: Option<u32>,
    /// Occupied slots.
    len: usize,
}

impl<const N: usize> Default for Slab<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Slab<N> {
    /// An empty slab.
    ///
    /// A slab whose `N` exceeds `u32::MAX` fails to compile.
    pub const fn new() -> Self {
        const {
            assert!(
                N <= u32::MAX as usize,
                "a slab holds at most u32::MAX requests"
            );
        }
        Self {
            slots: heapless::Vec::new(),
            free_head: None,
            free_tail: None,
            len: 0,
        }
    }

    /// Stores `request` and returns its id.
    ///
    /// Never-used slots are handed out first, then freed slots, oldest-freed first.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Requests`]) when `N` requests are stored; `request` is handed
    /// back and the slab is unchanged.
    pub fn insert(&mut self, request: Request) -> Result<ReqId, Full<Request>> {
        let fresh = self.slots.len();
        if fresh < N {
            let slot = Slot::Occupied {
                generation: 0,
                request,
            };
            if self.slots.push(slot).is_ok() {
                self.len += 1;
                return Ok(ReqId {
                    index: fresh as u32,
                    generation: 0,
                });
            }
        }
        let Some(index) = self.free_head else {
            return Err(Full::new(Table::Requests, request));
        };
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return Err(Full::new(Table::Requests, request));
        };
        let Slot::Vacant { generation, next } = *slot else {
            return Err(Full::new(Table::Requests, request));
        };
        *slot = Slot::Occupied {
            generation,
            request,
        };
        self.free_head = next;
        if next.is_none() {
            self.free_tail = None;
        }
        self.len += 1;
        Ok(ReqId { index, generation })
    }

    /// The request named by `id`, if it is still stored.
    pub fn get(&self, id: ReqId) -> Option<&Request> {
        match self.slots.get(id.index as usize) {
            Some(Slot::Occupied {
                generation,
                request,
            }) if *generation == id.generation => Some(request),
            _ => None,
        }
    }

    /// The request named by `id`, mutably, if it is still stored.
    pub fn get_mut(&mut self, id: ReqId) -> Option<&mut Request> {
        match self.slots.get_mut(id.index as usize) {
            Some(Slot::Occupied {
                generation,
                request,
            }) if *generation == id.generation => Some(request),
            _ => None,
        }
    }

    /// Whether `id` names a stored request.
    pub fn contains(&self, id: ReqId) -> bool {
        self.get(id).is_some()
    }

    /// Removes and returns the request named by `id`; `None` (and no change) when `id`
    /// is stale or was never handed out. `id` never resolves again.
    pub fn remove(&mut self, id: ReqId) -> Option<Request> {
        let slot = self.slots.get_mut(id.index as usize)?;
        let request = match *slot {
            Slot::Occupied {
                generation,
                request,
            } if generation == id.generation => request,
            _ => return None,
        };
        *slot = Slot::Vacant {
            generation: id.generation.wrapping_add(1),
            next: None,
        };
        match self.free_tail {
            Some(tail) => {
                if let Some(Slot::Vacant { next, .. }) = self.slots.get_mut(tail as usize) {
                    *next = Some(id.index);
                }
            }
            None => self.free_head = Some(id.index),
        }
        self.free_tail = Some(id.index);
        self.len -= 1;
        Some(request)
    }

    /// How many requests are stored.
    #[inline]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether no request is stored.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many requests the slab can hold (`N`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The stored requests with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ReqId, &Request)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| match slot {
                Slot::Occupied {
                    generation,
                    request,
                } => Some((
                    ReqId {
                        index: index as u32,
                        generation: *generation,
                    },
                    request,
                )),
                Slot::Vacant { .. } => None,
            })
    }
}

#[cfg(test)]
mod tests;
