//! The values the engine takes and gives: configuration, arguments, transmits, events.

use crate::envelope::HEADER_LEN;
use crate::matcher::Orphan;
use crate::request::{Kind, State};
use crate::tags::TagSpace;
use crate::types::{CommId, PhysTag, Priority, Rank, ReqId, Tag};

#[cfg(doc)]
use super::Engine;
use super::RequestError;

/// Capacity of each output queue ([`Engine::poll_transmit`], [`Engine::poll_event`]).
///
/// One input never produces more than [`WORST_CASE_OUTPUTS`] of either kind, so an
/// adapter that drains after each input never sees a full queue.
pub const OUTPUTS: usize = 16;

/// The most transmits, or events, one command or input can produce.
pub const WORST_CASE_OUTPUTS: usize = 2;

/// The default largest payload sent inline in its envelope (bytes).
pub const DEFAULT_EAGER_LIMIT: u32 = 256;

/// How one rank's engine is set up. All ranks of a job should agree on `tags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Config {
    /// This rank.
    pub rank: Rank,
    /// Number of ranks in the world communicator.
    pub nranks: u32,
    /// The physical tags the transport may use.
    pub tags: TagSpace,
    /// Payloads of at most this many bytes travel inside their envelope (one message
    /// instead of two). 0 sends every payload separately. Synchronous sends never go
    /// inline. A receiver accepts inline payloads of any size, so ranks need not agree.
    pub eager_limit: u32,
    /// Whether send priorities are honoured (`STARLING_MPI_PRIORITIES`); when off every
    /// send has the default priority and sends leave in submission order.
    pub priorities: bool,
    /// The most sends whose payload may be in flight at once (the reference's
    /// `STARPU_MPI_NDETACHED_SEND`); 0 means no cap. Ready sends beyond it wait in the
    /// ready list, in priority order.
    pub max_inflight_sends: u32,
    /// The most live requests, application and early ones together, shared out by
    /// [`Budget`]: anything above the engine's `REQ` means `REQ`, anything below 4
    /// means 4. A run-time bound under the compile-time capacity, so that a runtime can
    /// be tried with tiny tables. 0 (the default): the whole slab, with no budget (any
    /// class may take every slot, so an adapter must then be ready for early messages
    /// that hold every slot).
    pub request_limit: u32,
    /// The most distinct keys in each of the matcher's two tables (posted receives,
    /// early data); 0 (the default) or anything above the engine's `KEYS` means `KEYS`,
    /// and 0 after clamping means 1.
    pub key_limit: u32,
    /// The fast path for small messages (protocol §19, [`crate::fast`]): a standard send
    /// of 1 to `fast_limit` bytes on a user tag that has a fast tag
    /// ([`TagSpace::fast`], so `tags` must have a fast class: [`TagSpace::with_fast`])
    /// travels as its payload alone on that tag, and every receive of such a tag is
    /// posted there. 0 (the default) turns it off. **Every rank of a job must agree**
    /// on it and on `tags`: a receiver posts on the fast tag exactly when its sender
    /// sends there. With a [`Config::request_limit`], the adapter's admission must ask
    /// the transport whether a message waits on a key's fast tag (see [`crate::fast`]).
    pub fast_limit: u32,
    /// The communicators `CommId(0)..CommId(fast_comms)` on which the fast path may run:
    /// those the transport keeps apart in its own matching (for MPI, those with an MPI
    /// communicator of their own). A communicator that shares the transport's matching
    /// with another keeps the envelope path, which names its communicator. `u16::MAX`
    /// (the default): all but the last id.
    pub fast_comms: u16,
}

/// How the request slab is shared out (a pure function of the request limit, the same
/// on every rank of a configuration): what does not fit waits in the adapter, and no
/// class can starve another.
///
/// * application sends hold at most `sends` slots: a standard send completes without the
///   peer's application (a synchronous one once the peer posts its receive), so their
///   share drains whatever the receives wait for;
/// * application receives and early requests (buffers of messages that arrived before
///   their receive, discard buffers) share the other `recvs` slots, of which early
///   requests hold at most `early` (`recvs − 1`) and never the last free one: a
///   receive can always be submitted, and its message, once it waits, needs no slot.
///   The adapter keeps that last slot for a receive whose message is already here
///   ([`Engine::free_recv_slots`](crate::engine::Engine::free_recv_slots)), so that
///   receives posted out of flow order, whose messages depend on an earlier receive's
///   completion, can never hold every slot while that earlier receive waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Budget {
    /// Slots application sends may hold.
    pub sends: usize,
    /// Slots application receives and early requests may hold together.
    pub recvs: usize,
    /// Slots early requests may hold.
    pub early: usize,
}

impl Budget {
    /// The budget of `limit` slots (at least 4).
    pub const fn of(limit: usize) -> Self {
        let limit = if limit < 4 { 4 } else { limit };
        let sends = limit / 2;
        let recvs = limit - sends;
        Self {
            sends,
            recvs,
            early: recvs - 1,
        }
    }
}

impl Config {
    /// A configuration with the defaults: eager limit [`DEFAULT_EAGER_LIMIT`],
    /// priorities on, at most 10 sends in flight (the reference's default), no fast
    /// path.
    pub const fn new(rank: Rank, nranks: u32, tags: TagSpace) -> Self {
        Self {
            rank,
            nranks,
            tags,
            eager_limit: DEFAULT_EAGER_LIMIT,
            priorities: true,
            max_inflight_sends: 10,
            request_limit: 0,
            key_limit: 0,
            fast_limit: 0,
            fast_comms: u16::MAX,
        }
    }
}

/// A send to submit ([`Engine::submit_send`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendArgs {
    /// The communicator.
    pub comm: CommId,
    /// The destination rank.
    pub dest: Rank,
    /// The user tag.
    pub tag: Tag,
    /// The payload size in bytes.
    pub size: u64,
    /// The send's priority (ignored when [`Config::priorities`] is off).
    pub priority: Priority,
    /// Synchronous mode (`issend`): the payload leaves only once the receiver has posted
    /// the matching receive.
    pub sync: bool,
    /// Detached: the request is forgotten when it completes (no [`Engine::retire`]).
    pub detached: bool,
}

impl SendArgs {
    /// A standard, non-detached send with the default priority.
    pub const fn new(comm: CommId, dest: Rank, tag: Tag, size: u64) -> Self {
        Self {
            comm,
            dest,
            tag,
            size,
            priority: Priority::DEFAULT,
            sync: false,
            detached: false,
        }
    }
}

/// A receive to submit ([`Engine::submit_recv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RecvArgs {
    /// The communicator.
    pub comm: CommId,
    /// The source rank.
    pub source: Rank,
    /// The user tag.
    pub tag: Tag,
    /// The size of the receive buffer in bytes; a longer message fails the request
    /// with [`RequestError::Truncated`].
    pub capacity: u64,
    /// Detached: the request is forgotten when it completes (no [`Engine::retire`]).
    pub detached: bool,
}

impl RecvArgs {
    /// A non-detached receive.
    pub const fn new(comm: CommId, source: Rank, tag: Tag, capacity: u64) -> Self {
        Self {
            comm,
            source,
            tag,
            capacity,
            detached: false,
        }
    }
}

/// What a standard send that leaves at once puts on the wire ([`Engine::express_send`]):
/// one message to `dest` on `tag`, owned by no request, with nothing to report when it has
/// left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Express {
    /// The destination rank.
    pub dest: Rank,
    /// The communicator.
    pub comm: CommId,
    /// [`TagSpace::envelope`] for an eager envelope, else the user tag's fast tag
    /// ([`TagSpace::fast`], protocol §19).
    pub tag: PhysTag,
    /// The encoded eager envelope that goes before the whole payload; `None` for a fast
    /// message, the payload alone.
    pub header: Option<[u8; HEADER_LEN]>,
}

/// Something for the adapter to post to the transport ([`Engine::poll_transmit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Transmit {
    /// Send an envelope message to `dest` on the envelope tag: `header`, followed, when
    /// `inline` names a request, by that request's whole payload. When `inline` is set,
    /// report [`Engine::handle_sent`] for it once the message has left (or was copied);
    /// an envelope without `inline` needs no report.
    Envelope {
        /// The destination rank.
        dest: Rank,
        /// The communicator.
        comm: CommId,
        /// The physical tag (always [`TagSpace::envelope`]).
        tag: PhysTag,
        /// The encoded envelope.
        header: [u8; HEADER_LEN],
        /// The send whose payload follows the header in the same message.
        inline: Option<ReqId>,
    },
    /// Send the payload of `req` (`size` bytes from its buffer) to `dest` on `tag`;
    /// report [`Engine::handle_sent`] when done.
    Payload {
        /// The send request.
        req: ReqId,
        /// The destination rank.
        dest: Rank,
        /// The communicator.
        comm: CommId,
        /// The physical data, sync or fast tag.
        tag: PhysTag,
        /// Payload bytes.
        size: u64,
    },
    /// Send an empty message to `dest` on `tag`, a fast tag: a **marker**, saying that
    /// the next message of that user tag travels through the envelope path (protocol
    /// §19). It belongs to no request: nothing to report.
    Marker {
        /// The destination rank.
        dest: Rank,
        /// The communicator.
        comm: CommId,
        /// The fast tag ([`TagSpace::fast`]).
        tag: PhysTag,
    },
    /// Post a receive of `size` bytes from `source` on `tag` into the buffer of `req`;
    /// report [`Engine::handle_received`] when done. On a fast tag (protocol §19) `size`
    /// may exceed the request's capacity, so that a longer message is seen whole and
    /// fails the request rather than being cut; an empty message there is a marker. When `early` is set, `req` is the
    /// engine's own: allocate a buffer of `size` bytes for it, keep it until an event
    /// names it (`from_early` of [`Event::Completed`], or [`Event::Discard`]).
    Receive {
        /// The receive request.
        req: ReqId,
        /// The source rank.
        source: Rank,
        /// The communicator.
        comm: CommId,
        /// The physical data, sync or fast tag.
        tag: PhysTag,
        /// Payload bytes expected (at most).
        size: u64,
        /// Whether `req` is an engine-owned early-data buffer.
        early: bool,
    },
}

/// Something for the application side of the adapter ([`Engine::poll_event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Event {
    /// `req` finished successfully: run its callback, release its data, wake its waiters.
    ///
    /// For a receive with `from_early` set, first move the first `len` bytes of that early
    /// buffer into `req`'s buffer and free the early buffer. A detached request is
    /// forgotten by the engine now; a non-detached one stays until [`Engine::retire`].
    Completed {
        /// The request.
        req: ReqId,
        /// Send or receive.
        kind: Kind,
        /// Payload bytes moved.
        len: u64,
        /// The early buffer holding the payload of a receive, if it arrived early.
        from_early: Option<ReqId>,
    },
    /// `req` failed; it is finished (as for [`Event::Completed`]) but its buffer holds
    /// nothing valid.
    Failed {
        /// The request.
        req: ReqId,
        /// Send or receive.
        kind: Kind,
        /// Why.
        error: RequestError,
    },
    /// Free the early buffer of `early`: its payload was not wanted (the receive that
    /// matched it failed).
    Discard {
        /// The engine's early request.
        early: ReqId,
    },
}

/// What to do with the inline payload of a message given to [`Engine::handle_message`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival<'a> {
    /// Nothing to keep (an envelope without inline payload, or an acknowledgement).
    Nothing,
    /// Copy `inline` into the buffer of `req` now; its [`Event::Completed`] follows.
    Deliver {
        /// The matched receive.
        req: ReqId,
        /// The payload, borrowed from the message.
        inline: &'a [u8],
    },
    /// Keep a copy of `inline` as the early buffer of `early` until an event names it.
    Stash {
        /// The engine's early request.
        early: ReqId,
        /// The payload, borrowed from the message.
        inline: &'a [u8],
    },
}

/// Something left at shutdown ([`Engine::leftovers`]): the reference asserts on these;
/// Starling reports them as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Leftover {
    /// A message arrived and no receive ever took it ("did you forget to post a receive
    /// corresponding to a send?").
    Orphan(Orphan),
    /// A request that never completed.
    Pending {
        /// The request.
        req: ReqId,
        /// Send or receive.
        kind: Kind,
        /// The communicator.
        comm: CommId,
        /// Destination (send) or source (receive).
        peer: Rank,
        /// The user tag.
        tag: Tag,
        /// Payload size (send) or buffer size (receive).
        size: u64,
        /// Where it stopped.
        state: State,
    },
    /// A non-detached request that completed but was never waited on ([`Engine::retire`]).
    NotRetired {
        /// The request.
        req: ReqId,
        /// Send or receive.
        kind: Kind,
        /// Destination (send) or source (receive).
        peer: Rank,
        /// The user tag.
        tag: Tag,
    },
}
