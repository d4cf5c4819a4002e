//! The envelope: the fixed 24-byte header of the two-message protocol.
//!
//! Every point-to-point transfer starts with an envelope sent on the
//! [envelope tag](crate::tags::TagSpace::envelope). It tells the receiver which
//! communicator and user tag the message belongs to, how many payload bytes follow and
//! under which internal message id, so that the receiver can match it against its posted
//! receives (or keep it as early data) and post the payload receive on the right
//! [physical tag](crate::tags::TagSpace). The envelope is the only thing a peer sends
//! that the core parses, so [`decode`] is *total*: any byte string yields either an
//! [`Envelope`] or a [`DecodeError`] naming the offending field, never a panic.
//!
//! # The four kinds and what follows each
//!
//! | [`Kind`] | sent by | what follows |
//! | --- | --- | --- |
//! | [`Data`](Kind::Data) | sender | `size` payload bytes, on [`TagSpace::data`](crate::tags::TagSpace::data)`(msg)`, posted right after the envelope |
//! | [`SyncData`](Kind::SyncData) | sender of a synchronous send | nothing yet: the payload goes on [`TagSpace::sync`](crate::tags::TagSpace::sync)`(msg)` once the receiver's [`SyncReady`](Kind::SyncReady) arrives |
//! | [`SyncReady`](Kind::SyncReady) | receiver of a synchronous send | nothing: it acknowledges the sync send numbered `msg` and declares `size` 0 |
//! | [`Eager`](Kind::Eager) | sender of a small message | exactly `size` payload bytes inline, in the same message, right after the header |
//!
//! # Wire layout (version 1)
//!
//! Fixed and little-endian, independent of the host's struct layout and byte order
//! (the reference sends its C struct raw, padding and host endianness included,
//! internals §3.2 and §12.9; this layout is designed to be read on any host):
//!
//! | bytes | field | encoding |
//! | --- | --- | --- |
//! | `0` | version | `u8`, [`VERSION`] |
//! | `1` | kind | `u8`, the [`Kind`] discriminant |
//! | `2..4` | comm | `u16` LE, [`CommId`] |
//! | `4..8` | msg | `u32` LE, [`MsgId`] |
//! | `8..16` | tag | `i64` LE, user [`Tag`] |
//! | `16..24` | size | `u64` LE, payload bytes |
//! | `24..` | inline payload | [`Eager`](Kind::Eager) only: exactly `size` bytes |
//!
//! # Rules that [`decode`] enforces (checked in this order)
//!
//! 1. At least one byte, and byte 0 is [`VERSION`]: the version decides the layout, so
//!    it is checked before the length ([`DecodeError::UnsupportedVersion`]).
//! 2. At least [`HEADER_LEN`] bytes ([`DecodeError::Truncated`]).
//! 3. Byte 1 is a known [`Kind`] ([`DecodeError::UnknownKind`]).
//! 4. A [`SyncReady`](Kind::SyncReady) declares `size` 0 ([`DecodeError::ReadyWithPayload`]).
//! 5. An [`Eager`](Kind::Eager) envelope carries exactly `size` bytes after the header
//!    ([`DecodeError::InlineLength`]); any other kind carries nothing after it
//!    ([`DecodeError::TrailingBytes`]).
//!
//! The communicator, tag and message id are not checked here: every value is
//! well-formed, and whether the communicator is registered is the engine's business.
//! Every successfully decoded message re-encodes to exactly the same bytes.
//!
//! The source rank is not in the envelope: like MPI's `MPI_SOURCE`, the transport
//! reports who sent it.

use core::fmt;

use crate::types::{CommId, MsgId, Tag};

/// The wire-format version this build writes and accepts (byte 0 of every envelope).
pub const VERSION: u8 = 1;

/// The length of the envelope header in bytes; an [`Kind::Eager`] payload follows it.
pub const HEADER_LEN: usize = 24;

/// What an envelope announces, and so what (if anything) follows it.
///
/// The discriminant is the kind byte on the wire. The set is exhaustive on purpose:
/// a new kind changes the protocol and needs a new [`VERSION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum Kind {
    /// A standard send: the payload follows as a second message on the data tag of
    /// `msg`, sent right after this envelope.
    Data = 0,
    /// A synchronous send: the payload is sent only after the receiver's
    /// [`SyncReady`](Self::SyncReady) acknowledgement, on the sync tag of `msg`, so it
    /// never arrives before its receive is posted (no early data).
    SyncData = 1,
    /// The receiver's acknowledgement of a synchronous send; `msg` names the
    /// [`SyncData`](Self::SyncData) envelope it answers and `size` is 0.
    SyncReady = 2,
    /// A small payload carried inline right after the header: one message instead of two.
    Eager = 3,
}

impl Kind {
    /// Every kind, in discriminant order.
    pub const ALL: [Self; 4] = [Self::Data, Self::SyncData, Self::SyncReady, Self::Eager];

    /// The kind encoded by `byte`, if any.
    #[inline]
    pub const fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Data),
            1 => Some(Self::SyncData),
            2 => Some(Self::SyncReady),
            3 => Some(Self::Eager),
            _ => None,
        }
    }

    /// The kind byte written on the wire.
    #[inline]
    pub const fn to_byte(self) -> u8 {
        self as u8
    }

    /// Whether `size` payload bytes follow the header inside the same message.
    #[inline]
    pub const fn has_inline_payload(self) -> bool {
        matches!(self, Self::Eager)
    }

    /// A short human name, used in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Data => "data",
            Self::SyncData => "sync data",
            Self::SyncReady => "sync ready",
            Self::Eager => "eager",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The message header of the two-message protocol (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Envelope {
    /// What this envelope announces.
    pub kind: Kind,
    /// The communicator the message belongs to.
    pub comm: CommId,
    /// The user tag the receiver matches on.
    pub tag: Tag,
    /// Payload bytes: of the data message that follows, of the sync payload to come, or
    /// inline for [`Kind::Eager`]; 0 for [`Kind::SyncReady`].
    pub size: u64,
    /// The internal id of the data message (for [`Kind::SyncReady`]: of the synchronous
    /// send acknowledged); it selects the physical tag of the payload.
    pub msg: MsgId,
}

impl Envelope {
    /// The header bytes of this envelope.
    ///
    /// For [`Kind::Eager`] the `size` inline bytes must follow them in the same message
    /// (see [`encode_with_inline`](Self::encode_with_inline)).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let [c0, c1] = self.comm.0.to_le_bytes();
        let [m0, m1, m2, m3] = self.msg.0.to_le_bytes();
        let [t0, t1, t2, t3, t4, t5, t6, t7] = self.tag.0.to_le_bytes();
        let [s0, s1, s2, s3, s4, s5, s6, s7] = self.size.to_le_bytes();
        #[rustfmt::skip]
        let out = [
            VERSION, self.kind.to_byte(),
            c0, c1,
            m0, m1, m2, m3,
            t0, t1, t2, t3, t4, t5, t6, t7,
            s0, s1, s2, s3, s4, s5, s6, s7,
        ];
        out
    }

    /// Writes the header into the front of `out` and returns [`HEADER_LEN`].
    ///
    /// Only the header is written, whatever the kind: the core never holds payload
    /// bytes. An adapter sending an [`Kind::Eager`] envelope appends the payload itself
    /// or uses [`encode_with_inline`](Self::encode_with_inline).
    ///
    /// # Errors
    ///
    /// [`EncodeError::BufferTooSmall`] if `out` is shorter than [`HEADER_LEN`]; `out`
    /// is left untouched.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let available = out.len();
        let Some(head) = out.get_mut(..HEADER_LEN) else {
            return Err(EncodeError::BufferTooSmall {
                needed: HEADER_LEN,
                available,
            });
        };
        head.copy_from_slice(&self.encode());
        Ok(HEADER_LEN)
    }

    /// Writes the whole message (header, then `inline`) into the front of `out` and
    /// returns its length, [`wire_len`](Self::wire_len).
    ///
    /// `inline` must hold exactly `size` bytes for [`Kind::Eager`] and be empty for the
    /// other kinds, so that the result always [`decode`]s back to this envelope.
    ///
    /// # Errors
    ///
    /// - [`EncodeError::InlineLength`] if `inline.len()` disagrees with the kind and
    ///   `size` as above;
    /// - [`EncodeError::BufferTooSmall`] if `out` cannot hold the message.
    ///
    /// On error `out` is left untouched.
    pub fn encode_with_inline(&self, inline: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
        let expected = if self.kind.has_inline_payload() {
            self.size
        } else {
            0
        };
        let present = len_u64(inline.len());
        if present != expected {
            return Err(EncodeError::InlineLength {
                kind: self.kind,
                declared: expected,
                present,
            });
        }
        let needed = HEADER_LEN.saturating_add(inline.len());
        let available = out.len();
        let Some(msg) = out.get_mut(..needed) else {
            return Err(EncodeError::BufferTooSmall { needed, available });
        };
        let (head, tail) = msg.split_at_mut(HEADER_LEN);
        head.copy_from_slice(&self.encode());
        tail.copy_from_slice(inline);
        Ok(needed)
    }

    /// The length of the whole message on the wire: [`HEADER_LEN`], plus `size` for
    /// [`Kind::Eager`].
    ///
    /// Saturates at `usize::MAX` for an eager size that no memory could hold (only a
    /// caller bug produces one: the engine sends eagerly only below its threshold).
    pub fn wire_len(&self) -> usize {
        if self.kind.has_inline_payload() {
            usize::try_from(self.size)
                .unwrap_or(usize::MAX)
                .saturating_add(HEADER_LEN)
        } else {
            HEADER_LEN
        }
    }
}

impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} envelope ({}, {}, msg {}, {} bytes)",
            self.kind, self.comm, self.tag, self.msg.0, self.size
        )
    }
}

/// A decoded message: the envelope and, for [`Kind::Eager`], its inline payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Decoded<'a> {
    /// The header.
    pub envelope: Envelope,
    /// The inline payload: exactly `envelope.size` bytes for [`Kind::Eager`], empty
    /// otherwise. Borrowed from the decoded buffer.
    pub inline: &'a [u8],
}

/// Decodes one received envelope message (header and, for [`Kind::Eager`], the inline
/// payload).
///
/// Total: every input gives `Ok` or an error, never a panic. See the
/// [module docs](self) for the rules and the order they are checked in.
///
/// # Errors
///
/// A [`DecodeError`] naming the first rule the bytes break. The message comes from a
/// peer: drop it and report the peer; nothing in the core has changed.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let Some(&version) = bytes.first() else {
        return Err(DecodeError::Truncated { len: 0 });
    };
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let (Some(head), Some(inline)) = (bytes.first_chunk::<HEADER_LEN>(), bytes.get(HEADER_LEN..))
    else {
        return Err(DecodeError::Truncated { len: bytes.len() });
    };
    // Infallible field split of the fixed-size header (byte 0 is the version, checked).
    #[rustfmt::skip]
    let [
        _version, kind_byte,
        c0, c1,
        m0, m1, m2, m3,
        t0, t1, t2, t3, t4, t5, t6, t7,
        s0, s1, s2, s3, s4, s5, s6, s7,
    ] = *head;
    let Some(kind) = Kind::from_byte(kind_byte) else {
        return Err(DecodeError::UnknownKind { found: kind_byte });
    };
    let envelope = Envelope {
        kind,
        comm: CommId(u16::from_le_bytes([c0, c1])),
        tag: Tag(i64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7])),
        size: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
        msg: MsgId(u32::from_le_bytes([m0, m1, m2, m3])),
    };
    match kind {
        Kind::SyncReady if envelope.size != 0 => Err(DecodeError::ReadyWithPayload {
            size: envelope.size,
        }),
        Kind::Eager if len_u64(inline.len()) != envelope.size => Err(DecodeError::InlineLength {
            declared: envelope.size,
            present: len_u64(inline.len()),
        }),
        Kind::Eager => Ok(Decoded { envelope, inline }),
        Kind::Data | Kind::SyncData | Kind::SyncReady if !inline.is_empty() => {
            Err(DecodeError::TrailingBytes {
                extra: inline.len(),
            })
        }
        Kind::Data | Kind::SyncData | Kind::SyncReady => Ok(Decoded { envelope, inline }),
    }
}

/// A byte count as `u64` (saturating on a hypothetical host with wider `usize`).
#[inline]
fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// Which part of an envelope a [`DecodeError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Field {
    /// The length of the message (too short, or bytes after the header).
    Length,
    /// The version byte (byte 0).
    Version,
    /// The kind byte (byte 1).
    Kind,
    /// The payload size (bytes 16..24), or its agreement with the inline payload.
    Size,
}

impl Field {
    /// A short human name for the field.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::Version => "version",
            Self::Kind => "kind",
            Self::Size => "size",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A received envelope message is malformed.
///
/// The blame lies with the peer (or the link): the message must be dropped and the
/// peer reported; the core's state is unchanged. [`field`](Self::field) names the part
/// that is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DecodeError {
    /// The message is shorter than [`HEADER_LEN`] (`len` bytes, possibly 0).
    ///
    /// The transport delivered a cut message or the peer is not speaking this protocol;
    /// check that both ends use the same build and that the envelope receive buffer
    /// holds at least [`HEADER_LEN`] bytes plus the eager threshold.
    Truncated {
        /// How many bytes were received.
        len: usize,
    },
    /// Byte 0 is not [`VERSION`].
    ///
    /// The peer runs a different wire version: run the same Starling version on
    /// every rank.
    UnsupportedVersion {
        /// The version byte received.
        found: u8,
    },
    /// Byte 1 is not a known [`Kind`].
    ///
    /// The message is corrupt or comes from an incompatible peer; drop it.
    UnknownKind {
        /// The kind byte received.
        found: u8,
    },
    /// An [`Kind::Eager`] envelope's `size` disagrees with the bytes after the header.
    ///
    /// The message was cut (receive buffer smaller than the eager threshold?) or is
    /// corrupt; drop it.
    InlineLength {
        /// The payload size the header declares.
        declared: u64,
        /// The bytes actually present after the header.
        present: u64,
    },
    /// A non-eager envelope has bytes after the header.
    ///
    /// Only [`Kind::Eager`] carries an inline payload; the peer is broken or not
    /// speaking this protocol.
    TrailingBytes {
        /// How many bytes follow the header.
        extra: usize,
    },
    /// A [`Kind::SyncReady`] acknowledgement declares a non-zero payload size.
    ///
    /// An acknowledgement carries no payload; the peer is broken.
    ReadyWithPayload {
        /// The size the acknowledgement declares.
        size: u64,
    },
}

impl DecodeError {
    /// Which field of the envelope is wrong.
    pub const fn field(&self) -> Field {
        match self {
            Self::Truncated { .. } | Self::TrailingBytes { .. } => Field::Length,
            Self::UnsupportedVersion { .. } => Field::Version,
            Self::UnknownKind { .. } => Field::Kind,
            Self::InlineLength { .. } | Self::ReadyWithPayload { .. } => Field::Size,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { len } => write!(
                f,
                "envelope is {len} bytes long, shorter than the {HEADER_LEN}-byte header"
            ),
            Self::UnsupportedVersion { found } => write!(
                f,
                "envelope version {found} is not supported (this build speaks version {VERSION})"
            ),
            Self::UnknownKind { found } => {
                write!(f, "envelope kind byte {found} is not a known kind")
            }
            Self::InlineLength { declared, present } => write!(
                f,
                "eager envelope declares {declared} payload bytes but carries {present}"
            ),
            Self::TrailingBytes { extra } => write!(
                f,
                "non-eager envelope has {extra} unexpected bytes after the {HEADER_LEN}-byte header"
            ),
            Self::ReadyWithPayload { size } => write!(
                f,
                "sync ready envelope declares a payload of {size} bytes, but must declare 0"
            ),
        }
    }
}

impl core::error::Error for DecodeError {}

/// An envelope could not be written: a local caller's mistake, nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small for the message.
    ///
    /// Give a buffer of at least [`Envelope::wire_len`] bytes.
    BufferTooSmall {
        /// Bytes the message needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// The inline payload given to [`Envelope::encode_with_inline`] does not fit the
    /// envelope: an [`Kind::Eager`] one needs exactly `size` bytes, the others none.
    ///
    /// Fix the envelope's `size` (or kind) to match the payload.
    InlineLength {
        /// The envelope's kind.
        kind: Kind,
        /// The inline length the envelope requires.
        declared: u64,
        /// The inline length given.
        present: u64,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BufferTooSmall { needed, available } => write!(
                f,
                "envelope needs {needed} bytes but the buffer holds {available}"
            ),
            Self::InlineLength {
                kind,
                declared,
                present,
            } => write!(
                f,
                "{kind} envelope needs {declared} inline payload bytes but {present} were given"
            ),
        }
    }
}

impl core::error::Error for EncodeError {}

#[cfg(test)]
mod tests;
