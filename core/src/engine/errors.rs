//! The engine's errors, by blame: the local caller, a peer, a full table, a request.

use core::fmt;

use crate::envelope::DecodeError;
use crate::error::Table;
use crate::request::IllegalStep;
use crate::types::{CommId, MsgId, Rank, ReqId};

#[cfg(doc)]
use super::{Engine, Event};

/// Why a request failed ([`Event::Failed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RequestError {
    /// The matched message is longer than the receive buffer. The payload is drained and
    /// discarded. Size the receive for the largest message of its key.
    Truncated {
        /// Bytes the receive can hold.
        capacity: u64,
        /// Bytes the sender announced.
        size: u64,
    },
    /// The payload that arrived is not the length its envelope announced: the peer is
    /// faulty or runs an incompatible version.
    LengthMismatch {
        /// Bytes announced by the envelope.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { capacity, size } => write!(
                f,
                "message of {size} bytes does not fit the {capacity}-byte receive buffer"
            ),
            Self::LengthMismatch { expected, got } => write!(
                f,
                "payload of {got} bytes arrived where the envelope announced {expected}"
            ),
        }
    }
}

impl core::error::Error for RequestError {}

/// A command was refused ([`Engine::submit_send`], [`Engine::submit_recv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SubmitError {
    /// The peer rank is not in the world (`rank >= nranks`). Nothing was submitted.
    RankOutOfRange {
        /// The rank given.
        rank: Rank,
        /// The number of ranks.
        nranks: u32,
    },
    /// The request slab is full: wait for requests to complete (or retire completed
    /// ones), or build the engine with a larger `REQ`.
    Full(Table),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RankOutOfRange { rank, nranks } => {
                write!(f, "{rank} is out of range: the world has {nranks} ranks")
            }
            Self::Full(t) => write!(f, "the {t} is full"),
        }
    }
}

impl core::error::Error for SubmitError {}

impl SubmitError {
    /// Whether the submission must wait rather than fail: the request slab (or its share
    /// of the [`Budget`](super::Budget)) is full, which frees as requests complete and
    /// are retired. The adapter keeps the submission, unchanged and in order, and submits
    /// it again when room frees (a full table is a wait, never a failure); any other
    /// refusal fails the request.
    pub const fn waits(&self) -> bool {
        matches!(self, Self::Full(Table::Requests))
    }
}

/// The local caller misused the engine (a bug in the adapter or the application).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum UsageError {
    /// The id names no live request (never issued, already retired, or stale).
    UnknownRequest(ReqId),
    /// The request is not in a state where this call makes sense, e.g. data ready twice,
    /// or a send completion reported for a receive.
    IllegalStep(IllegalStep),
    /// [`Engine::retire`] on a request that has not completed yet, or on a detached one.
    NotRetirable(ReqId),
    /// An output queue has too little room: drain [`Engine::poll_transmit`] and
    /// [`Engine::poll_event`], then call again. Nothing was changed.
    Full(Table),
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownRequest(r) => write!(f, "{r} is not a live request"),
            Self::IllegalStep(s) => write!(f, "{s}"),
            Self::NotRetirable(r) => write!(f, "{r} is detached or not completed"),
            Self::Full(t) => write!(f, "the {t} is full: drain the engine's outputs first"),
        }
    }
}

impl core::error::Error for UsageError {}

impl From<IllegalStep> for UsageError {
    fn from(s: IllegalStep) -> Self {
        Self::IllegalStep(s)
    }
}

/// A peer sent something wrong ([`Engine::handle_message`]). The message was ignored and
/// nothing changed; the run can go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PeerError {
    /// The envelope does not decode.
    Decode(DecodeError),
    /// The transport reported a source outside the world.
    SourceOutOfRange {
        /// The source reported.
        source: Rank,
        /// The number of ranks.
        nranks: u32,
    },
    /// The envelope names another communicator than the one it arrived on.
    CommMismatch {
        /// The communicator in the envelope.
        envelope: CommId,
        /// The communicator it arrived on.
        arrived: CommId,
    },
    /// A ready acknowledgement for no synchronous send of ours.
    UnexpectedReady {
        /// Who sent it.
        source: Rank,
        /// The message id it names.
        msg: MsgId,
    },
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => write!(f, "malformed envelope: {e}"),
            Self::SourceOutOfRange { source, nranks } => {
                write!(
                    f,
                    "message from {source}, outside a world of {nranks} ranks"
                )
            }
            Self::CommMismatch { envelope, arrived } => {
                write!(f, "envelope for {envelope} arrived on {arrived}")
            }
            Self::UnexpectedReady { source, msg } => write!(
                f,
                "ready acknowledgement from {source} for message {} that no synchronous send awaits",
                msg.0
            ),
        }
    }
}

impl core::error::Error for PeerError {}

/// [`Engine::handle_message`] refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum MessageError {
    /// The peer is at fault; the message was dropped.
    Peer(PeerError),
    /// A table is full; nothing changed. Keep the message, drain the outputs, complete or
    /// retire requests, and hand it in again.
    Full(Table),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Peer(e) => e.fmt(f),
            Self::Full(t) => write!(f, "the {t} is full: message kept for a retry"),
        }
    }
}

impl core::error::Error for MessageError {}

impl From<PeerError> for MessageError {
    fn from(e: PeerError) -> Self {
        Self::Peer(e)
    }
}
