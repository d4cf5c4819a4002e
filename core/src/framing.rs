//! Framing on a byte stream: the protocol's messages over a serial line, a pipe or a
//! socket, with a length, a frame kind and checksums, resynchronisation after garbage,
//! and bounded buffers.
//!
//! MPI delivers whole messages; a serial line delivers bytes, some of them damaged, lost
//! or invented by noise. This module turns messages into frames ([`encode`]) and bytes
//! back into frames ([`Decoder`]). It performs no I/O and allocates nothing: the
//! [decoder](Decoder) is a sans-IO state machine — bytes in ([`Decoder::feed`]), frames
//! out ([`Decoder::poll`]). The embedded link (`link`, feature `embedded-hal`) and the
//! host side (`starling_std::serial`) drive it over a real byte stream.
//!
//! # The decoder's state machine
//!
//! The decoder holds at most `N` bytes. What it holds always starts at the place it is
//! looking at, in one of four states:
//!
//! | state | buffered bytes start with | [`poll`](Decoder::poll) does |
//! | --- | --- | --- |
//! | **hunting** | no [`SYNC`] marker | drops bytes up to the next marker (counted in [`Counters::garbage_bytes`]); keeps a lone trailing `SYNC[0]`; returns `None` when none is left |
//! | **header** | a marker, fewer than [`HEADER_LEN`] bytes | returns `None`: wait for more |
//! | **body** | a checked header declaring `len` body bytes, fewer than `len + `[`OVERHEAD`] bytes buffered | returns `None`: wait for more |
//! | **complete** | a whole frame | checks it and returns it, or an error |
//!
//! Every failure — a header whose check fails, a length the buffer cannot hold, a frame
//! whose CRC fails, a partial frame [abandoned](Decoder::abandon) when the line went
//! quiet — drops **one** byte, the first of the marker, and goes back to hunting *inside
//! the bytes already buffered*. So a frame that starts inside the remains of a damaged
//! or truncated one is still found: at most one frame is lost per damaged frame. A frame
//! returned by [`poll`](Decoder::poll) leaves the buffer at the next call, unless
//! [`keep`](Decoder::keep) asks for it again (a consumer that cannot take it yet).
//!
//! # Wire layout
//!
//! | bytes | field | encoding |
//! | --- | --- | --- |
//! | `0..2` | sync marker | [`SYNC`] = `A5 5A` |
//! | `2` | kind | `u8`, the [`FrameKind`] discriminant |
//! | `3..5` | len | `u16` LE, body bytes (at most [`MAX_BODY`]) |
//! | `5..7` | header check | `u16` LE, [`crc16`] of bytes `2..5` |
//! | `7..7+len` | body | as the kind says (below) |
//! | `7+len..11+len` | frame check | `u32` LE, [`crc32`] of bytes `2..7+len` |
//!
//! [`OVERHEAD`] = 11 bytes per frame. The bodies:
//!
//! | [`FrameKind`] | body |
//! | --- | --- |
//! | [`Envelope`](FrameKind::Envelope) | one envelope message exactly as the engine sends it on the envelope tag: the 24-byte [`Envelope`](crate::envelope::Envelope) header, then for an eager envelope its inline payload. Its communicator is the envelope's (bytes `2..4`) |
//! | [`Payload`](FrameKind::Payload) | a message on a data or sync tag: communicator `u16` LE, physical tag `i32` LE ([`PAYLOAD_HEAD_LEN`] bytes), then the payload bytes ([`Frame::payload`]) |
//! | [`Barrier`](FrameKind::Barrier) | a barrier: its generation, `u64` LE, counted from 0 on each side ([`Frame::barrier`]) |
//! | [`PayloadPart`](FrameKind::PayloadPart) | as `Payload`: a leading piece of a payload longer than one frame; the `Payload` frame with the same communicator and tag that follows ends it |
//!
//! A message is one frame, except that the host side splits a payload longer than
//! [`MAX_BODY`] into pieces. The embedded link sends and accepts single frames only: a
//! message longer than its decoder's [`max_body`]`(N)` (less the payload head) cannot
//! cross it, and the sender refuses it.
//!
//! # Rules
//!
//! 1. A frame is delivered only if its header check and its frame check both pass: a
//!    frame with damaged bytes is never delivered (the CRC-32 misses a random error with
//!    probability 2⁻³²). Every failure is counted in [`Counters`].
//! 2. The header check comes first, so a damaged length never makes the decoder wait
//!    for bytes that are not coming, nor swallow the frames behind it.
//! 3. A header declaring more than [`max_body`]`(N)` bytes is refused at once
//!    ([`FrameError::Oversize`]); the buffer never grows.
//! 4. A frame of a kind this build does not know, with both checks good, is consumed whole
//!    and reported ([`FrameError::UnknownKind`]).
//! 5. Nothing a peer sends makes the decoder panic; [`Decoder::feed`] takes what fits and
//!    says how much.
//!
//! ```
//! use starling_core::framing::{Decoder, FrameKind, encode};
//!
//! let mut wire = [0u8; 64];
//! let n = encode(FrameKind::Barrier, &[&7u64.to_le_bytes()], &mut wire).unwrap();
//!
//! let mut decoder: Decoder<64> = Decoder::new();
//! decoder.feed(b"noise");                  // garbage first
//! for &b in &wire[..n] {
//!     decoder.feed(&[b]);                  // then the frame, one byte at a time
//! }
//! let frame = decoder.poll().unwrap().unwrap();
//! assert_eq!(frame.kind, FrameKind::Barrier);
//! assert_eq!(frame.barrier(), Ok(7));
//! assert!(decoder.poll().is_none());
//! assert_eq!(decoder.counters().garbage_bytes, 5);
//! ```

use core::fmt;

mod crc;

pub use crc::{Crc32, crc16, crc32};

use crate::tags::TagSpace;
use crate::types::{CommId, PhysTag};

/// The two bytes every frame starts with.
pub const SYNC: [u8; 2] = [0xA5, 0x5A];

/// Bytes before the body: sync marker, kind, length, header check.
pub const HEADER_LEN: usize = 7;

/// Bytes after the body: the frame check.
pub const TRAILER_LEN: usize = 4;

/// Bytes a frame adds to its body.
pub const OVERHEAD: usize = HEADER_LEN + TRAILER_LEN;

/// The longest body the length field can declare.
pub const MAX_BODY: usize = u16::MAX as usize;

/// Bytes before the payload in a [`FrameKind::Payload`] body: communicator and tag.
pub const PAYLOAD_HEAD_LEN: usize = 6;

/// Bytes of a [`FrameKind::Barrier`] body.
pub const BARRIER_LEN: usize = 8;

/// The largest physical tag on a byte stream (the stream's `MPI_TAG_UB`): payload frames
/// carry tags in `0..=STREAM_TAG_UB`.
pub const STREAM_TAG_UB: i32 = 32767;

/// The tag space both ends of a byte stream use: the envelope on
/// [`DEFAULT_BASE`](crate::tags::DEFAULT_BASE), payload tags up to [`STREAM_TAG_UB`]. A
/// payload frame is matched by its tag, so both ends must compute the same tags.
pub const STREAM_TAGS: TagSpace = match TagSpace::new(STREAM_TAG_UB) {
    Ok(tags) => tags,
    Err(_) => panic!("the stream's tag bound leaves room for the protocol's tags"),
};

/// The longest body a [`Decoder<N>`] accepts: `N - `[`OVERHEAD`], at most [`MAX_BODY`].
pub const fn max_body(n: usize) -> usize {
    let body = n.saturating_sub(OVERHEAD);
    if body > MAX_BODY { MAX_BODY } else { body }
}

/// The length on the wire of a frame with `body` bytes.
pub const fn frame_len(body: usize) -> usize {
    body.saturating_add(OVERHEAD)
}

/// What a frame carries.
///
/// The discriminant is the kind byte on the wire; 0 is never used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
#[repr(u8)]
pub enum FrameKind {
    /// A message on the envelope tag: an envelope, with its inline payload if eager.
    Envelope = 1,
    /// A message on a payload (data or sync) tag, with its communicator and tag.
    Payload = 2,
    /// A barrier generation.
    Barrier = 3,
    /// A leading piece of a payload too long for one frame: same body layout as
    /// [`Payload`](Self::Payload); the next frame of the same communicator and tag
    /// continues it, and the `Payload` frame ends it. Only the host side sends pieces
    /// (its frames hold [`MAX_BODY`] bytes); the embedded link refuses them.
    PayloadPart = 4,
}

impl FrameKind {
    /// The kind encoded by `byte`, if any.
    pub const fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Envelope),
            2 => Some(Self::Payload),
            3 => Some(Self::Barrier),
            4 => Some(Self::PayloadPart),
            _ => None,
        }
    }

    /// The kind byte written on the wire.
    pub const fn to_byte(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Envelope => "envelope frame",
            Self::Payload => "payload frame",
            Self::Barrier => "barrier frame",
            Self::PayloadPart => "payload piece frame",
        })
    }
}

/// The header of a frame of `kind` with a body of `body_len` bytes.
///
/// # Errors
/// [`EncodeError::BodyTooLong`] when `body_len` exceeds [`MAX_BODY`].
pub fn header(kind: FrameKind, body_len: usize) -> Result<[u8; HEADER_LEN], EncodeError> {
    let Ok(len) = u16::try_from(body_len) else {
        return Err(EncodeError::BodyTooLong {
            len: body_len,
            max: MAX_BODY,
        });
    };
    let [l0, l1] = len.to_le_bytes();
    let [c0, c1] = crc16(&[kind.to_byte(), l0, l1]).to_le_bytes();
    Ok([SYNC[0], SYNC[1], kind.to_byte(), l0, l1, c0, c1])
}

/// The frame check that follows `header` and the body `parts` (concatenated).
pub fn trailer(header: &[u8; HEADER_LEN], parts: &[&[u8]]) -> [u8; TRAILER_LEN] {
    let mut crc = Crc32::new();
    crc.update(header.get(2..).unwrap_or_default());
    for part in parts {
        crc.update(part);
    }
    crc.finish().to_le_bytes()
}

/// Writes a frame of `kind` whose body is `parts`, concatenated, into the front of `out`;
/// returns its length, [`frame_len`] of the body length.
///
/// # Errors
/// [`EncodeError::BodyTooLong`] when the body exceeds [`MAX_BODY`];
/// [`EncodeError::BufferTooSmall`] when `out` cannot hold the frame. `out` is left
/// untouched on error.
pub fn encode(kind: FrameKind, parts: &[&[u8]], out: &mut [u8]) -> Result<usize, EncodeError> {
    let body: usize = parts.iter().map(|p| p.len()).sum();
    let head = header(kind, body)?;
    let needed = frame_len(body);
    let available = out.len();
    let Some(frame) = out.get_mut(..needed) else {
        return Err(EncodeError::BufferTooSmall { needed, available });
    };
    let (h, rest) = frame.split_at_mut(HEADER_LEN);
    h.copy_from_slice(&head);
    let (mut b, t) = rest.split_at_mut(body);
    for part in parts {
        let (dst, tail) = b.split_at_mut(part.len());
        dst.copy_from_slice(part);
        b = tail;
    }
    t.copy_from_slice(&trailer(&head, parts));
    Ok(needed)
}

/// The head of a [`FrameKind::Payload`] body: communicator `u16` LE, tag `i32` LE.
pub fn payload_head(comm: CommId, tag: PhysTag) -> [u8; PAYLOAD_HEAD_LEN] {
    let [c0, c1] = comm.0.to_le_bytes();
    let [t0, t1, t2, t3] = tag.0.to_le_bytes();
    [c0, c1, t0, t1, t2, t3]
}

/// Why a frame could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The body is longer than the length field can say. Send less per message.
    BodyTooLong {
        /// Body bytes given.
        len: usize,
        /// The most a frame carries, [`MAX_BODY`].
        max: usize,
    },
    /// The output buffer cannot hold the frame. Give a buffer of [`frame_len`] bytes.
    BufferTooSmall {
        /// Bytes the frame needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BodyTooLong { len, max } => {
                write!(
                    f,
                    "a frame body of {len} bytes exceeds the {max}-byte limit"
                )
            }
            Self::BufferTooSmall { needed, available } => write!(
                f,
                "a {needed}-byte frame does not fit a {available}-byte buffer"
            ),
        }
    }
}

impl core::error::Error for EncodeError {}

/// A frame whose checks passed, borrowed from the decoder's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Frame<'a> {
    /// What it carries.
    pub kind: FrameKind,
    /// Its body.
    pub body: &'a [u8],
}

/// The parts of a [`FrameKind::Payload`] body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PayloadFrame<'a> {
    /// The communicator.
    pub comm: CommId,
    /// The physical tag (a data or sync tag of the sender's [`TagSpace`]).
    pub tag: PhysTag,
    /// The payload.
    pub bytes: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The communicator, tag and bytes of a [`FrameKind::Payload`] or
    /// [`FrameKind::PayloadPart`] frame.
    ///
    /// # Errors
    /// [`BodyError`] when the frame is of another kind or its body is shorter than
    /// [`PAYLOAD_HEAD_LEN`].
    pub fn payload(&self) -> Result<PayloadFrame<'a>, BodyError> {
        if self.kind != FrameKind::PayloadPart {
            self.expect(FrameKind::Payload)?;
        }
        match self.body.split_first_chunk::<PAYLOAD_HEAD_LEN>() {
            Some((&[c0, c1, t0, t1, t2, t3], bytes)) => Ok(PayloadFrame {
                comm: CommId(u16::from_le_bytes([c0, c1])),
                tag: PhysTag(i32::from_le_bytes([t0, t1, t2, t3])),
                bytes,
            }),
            None => Err(BodyError::Length {
                kind: self.kind,
                len: self.body.len(),
            }),
        }
    }

    /// The generation of a [`FrameKind::Barrier`] frame.
    ///
    /// # Errors
    /// [`BodyError`] when the frame is of another kind or its body is not
    /// [`BARRIER_LEN`] bytes.
    pub fn barrier(&self) -> Result<u64, BodyError> {
        self.expect(FrameKind::Barrier)?;
        match <[u8; BARRIER_LEN]>::try_from(self.body) {
            Ok(b) => Ok(u64::from_le_bytes(b)),
            Err(_) => Err(BodyError::Length {
                kind: self.kind,
                len: self.body.len(),
            }),
        }
    }

    fn expect(&self, kind: FrameKind) -> Result<(), BodyError> {
        if self.kind == kind {
            Ok(())
        } else {
            Err(BodyError::WrongKind {
                expected: kind,
                found: self.kind,
            })
        }
    }
}

/// A checked frame whose body does not have the layout of its kind: the peer is faulty
/// or runs another version. Drop the frame and report the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum BodyError {
    /// The frame is not of the kind asked for (a caller's mistake).
    WrongKind {
        /// The kind asked for.
        expected: FrameKind,
        /// The frame's kind.
        found: FrameKind,
    },
    /// The body's length does not fit its kind's layout.
    Length {
        /// The frame's kind.
        kind: FrameKind,
        /// Its body length.
        len: usize,
    },
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongKind { expected, found } => write!(f, "{found} read as a {expected}"),
            Self::Length { kind, len } => write!(f, "{kind} with a malformed {len}-byte body"),
        }
    }
}

impl core::error::Error for BodyError {}

/// Why bytes were dropped instead of delivered ([`Decoder::poll`]). Each is also counted
/// in [`Counters`]. None is fatal: the decoder has already resumed hunting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// A sync marker was followed by a header whose check failed: noise, or a marker
    /// that was only data. One byte is dropped.
    HeaderCheck,
    /// A checked header declared a body longer than this decoder holds
    /// ([`max_body`]`(N)`). The peer sends frames too big for this buffer; one byte is
    /// dropped and the frame's bytes are hunted through as garbage.
    Oversize {
        /// Body bytes declared.
        len: usize,
        /// The most this decoder accepts.
        max: usize,
    },
    /// A whole frame arrived and its frame check failed: damaged on the line. One byte is
    /// dropped; a frame that started inside it is still found.
    Crc {
        /// The kind byte read (itself possibly damaged).
        kind: u8,
        /// Body bytes declared.
        len: usize,
    },
    /// A frame with good checks and a kind this build does not know (a newer peer). It is
    /// consumed whole.
    UnknownKind {
        /// The kind byte.
        found: u8,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeaderCheck => f.write_str("frame header check failed"),
            Self::Oversize { len, max } => write!(
                f,
                "frame of {len} body bytes exceeds this decoder's {max}-byte limit"
            ),
            Self::Crc { kind, len } => {
                write!(f, "frame check failed (kind byte {kind}, {len} body bytes)")
            }
            Self::UnknownKind { found } => write!(f, "frame of unknown kind {found}"),
        }
    }
}

impl core::error::Error for FrameError {}

/// What a [`Decoder`] has seen since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Counters {
    /// Frames delivered.
    pub frames: u64,
    /// Frames whose frame check failed ([`FrameError::Crc`]).
    pub crc_failures: u64,
    /// Headers whose check failed ([`FrameError::HeaderCheck`]).
    pub header_failures: u64,
    /// Headers declaring a body too long for the buffer ([`FrameError::Oversize`]).
    pub oversize: u64,
    /// Checked frames of an unknown kind ([`FrameError::UnknownKind`]).
    pub unknown_kinds: u64,
    /// Partial frames given up when the line went quiet ([`Decoder::abandon`]).
    pub truncated: u64,
    /// Bytes dropped while hunting for a sync marker (including the first byte of each
    /// failed candidate).
    pub garbage_bytes: u64,
    /// Times a frame was delivered after bytes had been dropped: how often the decoder
    /// lost and found the frame boundaries again.
    pub resyncs: u64,
}

impl Counters {
    /// Every failure counted: damaged, oversized, unknown and truncated frames.
    pub const fn failures(&self) -> u64 {
        self.crc_failures
            + self.header_failures
            + self.oversize
            + self.unknown_kinds
            + self.truncated
    }
}

/// What one scan of the buffer found (indices only, so nothing stays borrowed).
enum Scan {
    NeedMore,
    Failed(FrameError),
    Frame { kind: FrameKind, len: usize },
}

/// The sans-IO frame decoder: bytes in, frames out, at most `N` bytes held (see the
/// [module docs](self) for the state machine and the rules).
///
/// `N` bounds the longest frame: bodies of at most [`max_body`]`(N)` bytes. It must be
/// more than [`OVERHEAD`] (checked at compile time).
pub struct Decoder<const N: usize> {
    buf: [u8; N],
    start: usize,
    end: usize,
    /// Length of the frame last returned by `poll`, dropped at the next call.
    consume: usize,
    /// `consume` is a frame handed out (not an unknown kind): `keep` may keep it.
    delivered: bool,
    /// The frame at the front was returned and kept: do not count it again.
    replay: bool,
    /// Bytes were dropped since the last frame.
    lost_sync: bool,
    /// The kind byte and body length of the header at the front, once checked, so that
    /// a frame arriving byte by byte has its header checked once.
    checked: Option<(u8, usize)>,
    /// Bytes the front needs before a scan can say anything new (0: scan).
    need: usize,
    counters: Counters,
}

impl<const N: usize> fmt::Debug for Decoder<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("capacity", &N)
            .field("buffered", &self.buffered())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Default for Decoder<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Decoder<N> {
    const ROOM_FOR_A_FRAME: () = assert!(N > OVERHEAD, "a decoder must hold a frame header");

    /// An empty decoder, hunting.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value, reason = "forces the compile-time size check")]
        let () = Self::ROOM_FOR_A_FRAME;
        Self {
            buf: [0; N],
            start: 0,
            end: 0,
            consume: 0,
            delivered: false,
            replay: false,
            lost_sync: false,
            checked: None,
            need: 0,
            counters: Counters {
                frames: 0,
                crc_failures: 0,
                header_failures: 0,
                oversize: 0,
                unknown_kinds: 0,
                truncated: 0,
                garbage_bytes: 0,
                resyncs: 0,
            },
        }
    }

    /// The longest body this decoder accepts, [`max_body`]`(N)`.
    pub const fn max_body(&self) -> usize {
        max_body(N)
    }

    /// What it has seen.
    pub const fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Bytes held and not yet delivered or dropped.
    pub const fn buffered(&self) -> usize {
        self.end - self.start - self.consume
    }

    /// How many bytes the next [`feed`](Self::feed) takes at most.
    pub const fn room(&self) -> usize {
        N - self.buffered()
    }

    /// Copies as much of `bytes` as fits and returns how many were taken; hand the rest
    /// in after [`poll`](Self::poll) made room. After `poll` returned `None` there is
    /// always room for at least one byte.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        self.settle();
        if self.end + bytes.len() > N && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = bytes.len().min(N - self.end);
        if let (Some(dst), Some(src)) = (self.buf.get_mut(self.end..self.end + n), bytes.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.end += n;
        n
    }

    /// The next frame, or the next reason bytes were dropped, or `None` when more bytes
    /// are needed.
    ///
    /// The frame stays borrowed from the buffer until the next call of any `&mut self`
    /// method, which drops it (unless [`keep`](Self::keep) is called first).
    pub fn poll(&mut self) -> Option<Result<Frame<'_>, FrameError>> {
        self.settle();
        if self.end - self.start < self.need {
            return None; // still waiting for the same frame
        }
        match self.scan() {
            Scan::NeedMore => None,
            Scan::Failed(e) => Some(Err(e)),
            Scan::Frame { kind, len } => {
                let body = self
                    .buf
                    .get(self.start + HEADER_LEN..self.start + HEADER_LEN + len)
                    .unwrap_or_default();
                Some(Ok(Frame { kind, body }))
            }
        }
    }

    /// Asks for the frame just returned by [`poll`](Self::poll) again at the next call:
    /// its consumer could not take it yet. It stays at the front, and the bytes behind it
    /// wait; it is not counted twice. Does nothing if the last call was not a frame.
    pub fn keep(&mut self) {
        if self.delivered {
            self.delivered = false;
            self.consume = 0;
            self.replay = true;
        }
    }

    /// The line went quiet with a partial frame buffered: give it up (counted in
    /// [`Counters::truncated`]), drop its first byte and hunt through the rest, so that a
    /// frame that followed a truncated one is delivered by the next polls. Returns whether
    /// anything was buffered.
    ///
    /// Call it only after [`poll`](Self::poll) returned `None` and the line stayed
    /// silent for longer than the peer ever pauses inside a frame: a partial frame that is
    /// still arriving is lost otherwise (never delivered wrong: its check fails).
    pub fn abandon(&mut self) -> bool {
        self.settle();
        if self.start == self.end {
            return false;
        }
        self.counters.truncated += 1;
        self.drop_bytes(1);
        true
    }

    /// Forgets every buffered byte (the counters stay) and starts hunting.
    pub fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.consume = 0;
        self.delivered = false;
        self.replay = false;
        self.checked = None;
        self.need = 0;
    }

    /// Drops the frame returned by the last `poll`, if any.
    fn settle(&mut self) {
        if self.consume > 0 {
            self.checked = None;
            self.need = 0;
        }
        self.start += self.consume;
        self.consume = 0;
        self.delivered = false;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    fn drop_bytes(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.start += n;
        self.counters.garbage_bytes += n as u64;
        self.lost_sync = true;
        self.replay = false;
        self.checked = None;
        self.need = 0;
    }

    /// Runs the state machine from the front of the buffer until it can say something.
    fn scan(&mut self) -> Scan {
        loop {
            let avail = self.buf.get(self.start..self.end).unwrap_or_default();
            // Hunting: find the marker (or a lone first byte of one at the end).
            let at = avail
                .iter()
                .enumerate()
                .position(|(i, &b)| b == SYNC[0] && avail.get(i + 1).is_none_or(|&n| n == SYNC[1]));
            let Some(at) = at else {
                let all = avail.len();
                self.drop_bytes(all);
                return Scan::NeedMore;
            };
            if at > 0 {
                self.drop_bytes(at);
                continue;
            }
            let (kind, len) = match self.checked {
                Some(header) => header,
                None => {
                    let Some(&[_, _, kind, l0, l1, h0, h1]) = avail.first_chunk::<HEADER_LEN>()
                    else {
                        return Scan::NeedMore;
                    };
                    if crc16(&[kind, l0, l1]) != u16::from_le_bytes([h0, h1]) {
                        self.counters.header_failures += 1;
                        self.drop_bytes(1);
                        return Scan::Failed(FrameError::HeaderCheck);
                    }
                    let len = usize::from(u16::from_le_bytes([l0, l1]));
                    let max = max_body(N);
                    if len > max {
                        self.counters.oversize += 1;
                        self.drop_bytes(1);
                        return Scan::Failed(FrameError::Oversize { len, max });
                    }
                    self.checked = Some((kind, len));
                    (kind, len)
                }
            };
            let total = frame_len(len);
            let Some(frame) = avail.get(..total) else {
                self.need = total;
                return Scan::NeedMore;
            };
            let (checked, check) = frame.split_at(total - TRAILER_LEN);
            let check = u32::from_le_bytes(check.try_into().unwrap_or_default());
            if crc32(checked.get(2..).unwrap_or_default()) != check {
                self.counters.crc_failures += 1;
                self.drop_bytes(1);
                return Scan::Failed(FrameError::Crc { kind, len });
            }
            self.consume = total;
            let replay = core::mem::take(&mut self.replay);
            if !replay && core::mem::take(&mut self.lost_sync) {
                self.counters.resyncs += 1;
            }
            let Some(kind) = FrameKind::from_byte(kind) else {
                self.counters.unknown_kinds += 1;
                return Scan::Failed(FrameError::UnknownKind { found: kind });
            };
            if !replay {
                self.counters.frames += 1;
            }
            self.delivered = true;
            return Scan::Frame { kind, len };
        }
    }
}

#[cfg(test)]
mod tests;
