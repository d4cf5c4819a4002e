//! The transport contract: what a rank's progression thread needs from a network, and
//! everything of this crate a transport adapter uses.
//!
//! A [`Transport`] offers what the engine's [`Transmit`](starling_core::engine::Transmit)s
//! need from MPI: sends and receives addressed by (communicator, rank, physical tag),
//! receives matched in posting order (MPI's non-overtaking rule), messages on the
//! envelope tag handed over as they arrive, and a barrier. Completions come back through
//! [`Transport::poll`]. Only the progression thread calls a transport (or a thread that
//! holds the rank's progression lock in its place), never two at once.
//!
//! The contract is this module and nothing else:
//!
//! | item | what it is |
//! | --- | --- |
//! | [`Transport`] | the trait a transport implements |
//! | [`Completion`] | what it reports from [`Transport::poll`] |
//! | [`SendBuffer`], [`RecvBuffer`] | a handle's data lent in place for one send or receive |
//! | [`DeviceValue`] | a handle's value on a device, for transports that carry it as it is |
//!
//! A transport adapter (`starling-mpi`) implements [`Transport`] with these types and the
//! core's ids ([`starling_core::Rank`], [`CommId`], [`PhysTag`], [`ReqId`]) and imports
//! nothing else of this crate: it does not start ranks, watch them or shut them down.
//! Whoever assembles a rank hands the transport to the runtime
//! ([`RankRunner::start`](crate::RankRunner::start) takes a function that builds it on the
//! rank's progression thread); for MPI that is the facade, `starling::mpi`. See
//! `docs/architecture.md`, "Which crate may import which, and why".
//!
//! This crate's own transports: [`InProcess`](crate::InProcess) (N ranks as threads of one
//! process, the embedded default) and [`serial`](crate::serial) (byte streams).

use starling_core::{CommId, PhysTag, Rank, ReqId};

pub use crate::buffer::{RecvBuffer, SendBuffer};
pub use crate::runtime::device::DeviceValue;

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
    /// Whether [`Transport::recv_into`] receives into the buffer it is given. The
    /// progression thread takes a recycled buffer for a receive only from a transport
    /// that says so: one that hands over buffers of its own (the in-process transport
    /// moves the sender's) would drop it, and a buffer taken only to be dropped costs a
    /// zeroed allocation of the message's size per receive. The default is `false`, as
    /// the default [`Transport::recv_into`] ignores its buffer.
    fn fills_given_buffers(&self) -> bool {
        false
    }
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
    /// The communicators, `CommId(0)..CommId(n)`, on which the engine's fast path
    /// (protocol §19) may run: each matches every physical tag in `0..=tag_ub` as MPI
    /// does — by (source, tag), receives in posting order, a message with no receive
    /// kept until one is posted, an empty message delivered as one — apart from every
    /// other communicator; and [`Transport::has_message`] answers. Every rank must get
    /// the same number. The default is 0: no fast path.
    fn fast_comms(&self) -> u16 {
        0
    }
    /// The longest message the transport sends as one (longer ones travel in pieces,
    /// split alike on both sides only when both know the size): the fast path's
    /// messages stay within it. Every rank must get the same. The default is no limit.
    fn max_message(&self) -> usize {
        usize::MAX
    }
    /// Whether a message from `source` on `comm` and `tag` waits that no posted receive
    /// took (`MPI_Iprobe`). Asked only on the [`Transport::fast_comms`]; the default is
    /// `false`.
    fn has_message(&self, source: Rank, comm: CommId, tag: PhysTag) -> bool {
        let _ = (source, comm, tag);
        false
    }
    /// At shutdown, once every rank's work is done: takes every message that waits on
    /// the [`Transport::fast_comms`] with a tag `stray` accepts and no receive took (it
    /// was never received), and says (source, communicator, tag, bytes) of each. The
    /// default takes none.
    fn take_strays(
        &mut self,
        stray: &dyn Fn(PhysTag) -> bool,
    ) -> Vec<(Rank, CommId, PhysTag, usize)> {
        let _ = stray;
        Vec::new()
    }
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
