//! The embedded link: the protocol between two peers over a serial port, on a board with
//! no operating system and no MPI (feature `embedded-hal`).
//!
//! A [`Link`] owns an [`Engine`], a [frame decoder](Decoder), an
//! [`embedded-hal-nb`](embedded_hal_nb) serial port and an [`embedded-hal`](embedded_hal)
//! delay. It is the adapter of the engine's driving contract for one point-to-point peer:
//! it writes what [`Engine::poll_transmit`] yields as [frames](crate::framing), feeds
//! the frames it decodes to [`Engine::handle_message`] and
//! [`Engine::handle_received`], and hands the engine's events to the caller's buffers. It
//! allocates nothing: its buffers are fixed by its const generics.
//!
//! # The state machine of a blocking call
//!
//! [`send`](Link::send), [`send_sync`](Link::send_sync), [`recv`](Link::recv) and
//! [`barrier`](Link::barrier) submit one request and loop until it completes:
//!
//! 1. **drain**: take every [`Transmit`] and [`Event`] the engine has (after every input),
//!    writing each transmit as one frame, byte by byte, then `flush`;
//! 2. **done?** when the request completed or failed, retire it and return;
//! 3. **retry** a frame the engine had no room for (kept at the front of the decoder);
//! 4. **read** one byte if the decoder has room: feed it, and hand every frame it
//!    completes to the engine (draining after each);
//! 5. **idle** when the port had nothing (`WouldBlock`) or reported an error: after
//!    [`LinkConfig::quiet_polls`] idle polls in a row with a partial frame buffered,
//!    [abandon](Decoder::abandon) it; after [`LinkConfig::timeout_polls`], fail with
//!    [`LinkError::Timeout`]; otherwise `delay.delay_us(`[`LinkConfig::poll_us`]`)`
//!    and go to 1.
//!
//! A write that would block is retried after the same delay, and counts towards the same
//! timeout. [`progress`](Link::progress) runs steps 1 to 4 without blocking, until the
//! port has nothing more, so that a board can take in early messages between calls.
//!
//! # Rules
//!
//! * One message is one frame: a send longer than [`Link::max_message`] is refused
//!   ([`LinkError::TooLong`]). Both ends must use the same frame size and the same
//!   [`TagSpace`] ([`STREAM_TAGS`] by default, as the host side does).
//! * Messages that arrive before their receive are kept in early buffers, one per request
//!   slot (`REQ` buffers of `FRAME` bytes), so a message the engine accepts always has a
//!   buffer; when the engine has no room, the frame waits at the front of the decoder and
//!   the bytes behind it wait in the port.
//! * Damaged frames are never delivered (the frame check fails); they are counted in
//!   [`LinkStats::decoder`] and the message they carried is lost: the call that waits for
//!   it times out. Frames the protocol refuses (malformed, a payload nobody posted a
//!   receive for, a piece of a payload split by a host) are dropped and counted in
//!   [`LinkStats::peer_errors`]. Serial read errors (overrun, noise, parity) are counted
//!   and reading goes on.
//! * After [`LinkError::Timeout`] the request stays pending in the engine
//!   ([`Engine::leftovers`] lists it); start a new link to start afresh.
//!
//! ```
//! use embedded_hal_mock::eh1::delay::NoopDelay;
//! use embedded_hal_mock::eh1::serial::{Mock, Transaction};
//! use starling_core::envelope::{Envelope, Kind};
//! use starling_core::framing::{self, FrameKind};
//! use starling_core::link::{Link, LinkConfig};
//! use starling_core::{CommId, MsgId, Rank, Tag};
//!
//! // What rank 0 puts on the line for a 4-byte send with tag 7: one eager envelope frame.
//! let envelope = Envelope { kind: Kind::Eager, comm: CommId::WORLD, tag: Tag(7), size: 4, msg: MsgId(0) };
//! let mut frame = [0u8; 64];
//! let n = framing::encode(FrameKind::Envelope, &[&envelope.encode(), b"ping"], &mut frame).unwrap();
//!
//! let mut port = Mock::new(&[Transaction::write_many(&frame[..n]), Transaction::flush()]);
//! let mut link: Link<_, _, 8, 8, 2, 128> =
//!     Link::new(port.clone(), NoopDelay::new(), LinkConfig::new(Rank(0), Rank(1)));
//! link.send(Tag(7), b"ping").unwrap();
//! port.done();
//! ```

use core::fmt;

use embedded_hal::delay::DelayNs;
use embedded_hal_nb::nb;
use embedded_hal_nb::serial::{Error as _, Read, Write};
use heapless::Vec;

use crate::engine::{
    Arrival, Config, DEFAULT_EAGER_LIMIT, Engine, Event, MessageError, RecvArgs, RequestError,
    SendArgs, Transmit, UsageError,
};
use crate::envelope::HEADER_LEN as ENVELOPE_LEN;
use crate::error::Table;
use crate::framing::{
    self, Counters, Decoder, Frame, FrameKind, PAYLOAD_HEAD_LEN, STREAM_TAGS, max_body,
};
use crate::tags::TagSpace;
use crate::types::{CommId, PhysTag, Rank, ReqId, Tag};

mod errors;

pub use errors::{LinkError, SerialError};

/// How a [`Link`] is set up. Both ends must agree on `tags` and `nranks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LinkConfig {
    /// This end's rank.
    pub rank: Rank,
    /// The rank at the other end of the line.
    pub peer: Rank,
    /// Ranks in the world (both ranks are below it).
    pub nranks: u32,
    /// The physical tags; [`STREAM_TAGS`] by default, as the host side.
    pub tags: TagSpace,
    /// Payloads of at most this many bytes travel inside their envelope frame; lowered
    /// to what one frame holds.
    pub eager_limit: u32,
    /// Microseconds to wait when the port has nothing to read or cannot take a byte.
    pub poll_us: u32,
    /// Idle polls in a row after which a blocking call fails with
    /// [`LinkError::Timeout`]; 0 waits forever.
    pub timeout_polls: u32,
    /// Idle polls in a row after which a partial frame is abandoned (the peer stopped in
    /// the middle of a frame: the frame was truncated); 0 never abandons. Make it longer
    /// than any pause of the peer inside a frame.
    pub quiet_polls: u32,
}

impl LinkConfig {
    /// A link from `rank` to `peer` in a world just large enough for both, with
    /// [`STREAM_TAGS`], the engine's default eager limit, 100 µs polls, no timeout, and
    /// partial frames abandoned after 1000 quiet polls (0.1 s).
    pub const fn new(rank: Rank, peer: Rank) -> Self {
        let top = if rank.0 > peer.0 { rank.0 } else { peer.0 };
        Self {
            rank,
            peer,
            nranks: top.saturating_add(1),
            tags: STREAM_TAGS,
            eager_limit: DEFAULT_EAGER_LIMIT,
            poll_us: 100,
            timeout_polls: 0,
            quiet_polls: 1000,
        }
    }
}

/// What a [`Link`] has counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LinkStats {
    /// Frames written.
    pub frames_sent: u64,
    /// The decoder's counters: frames received, CRC and header failures, oversized and
    /// truncated frames, garbage bytes, resynchronisations.
    pub decoder: Counters,
    /// Errors the port reported on reads (overrun, noise, ...).
    pub serial_errors: u64,
    /// Good frames the protocol refused: malformed or unexpected envelopes, malformed
    /// bodies, payloads with no posted receive, out-of-order barriers.
    pub peer_errors: u64,
    /// Times a frame had to wait because the engine had no room for it.
    pub held: u64,
}

/// A receive the engine posted ([`Transmit::Receive`]), waiting for its payload frame.
#[derive(Clone, Copy, Debug)]
struct Posted {
    req: ReqId,
    comm: CommId,
    tag: PhysTag,
}

/// The buffer of an engine-owned early request.
struct EarlyBuf<const N: usize> {
    req: ReqId,
    len: usize,
    bytes: [u8; N],
}

/// The request a blocking call waits for, with its buffer.
enum Current<'a> {
    Idle,
    Send { req: ReqId, bytes: &'a [u8] },
    Recv { req: ReqId, buf: &'a mut [u8] },
}

impl Current<'_> {
    fn req(&self) -> Option<ReqId> {
        match self {
            Self::Idle => None,
            Self::Send { req, .. } | Self::Recv { req, .. } => Some(*req),
        }
    }

    /// The bytes to send for `req` (empty if `req` is not the current send).
    fn send_bytes(&self, req: ReqId) -> &[u8] {
        match self {
            Self::Send { req: r, bytes } if *r == req => bytes,
            _ => &[],
        }
    }

    /// Copies `bytes` into the buffer of `req` if it is the current receive.
    fn deliver(&mut self, req: ReqId, bytes: &[u8]) {
        if let Self::Recv { req: r, buf } = self {
            if *r == req {
                let n = bytes.len().min(buf.len());
                if let (Some(dst), Some(src)) = (buf.get_mut(..n), bytes.get(..n)) {
                    dst.copy_from_slice(src);
                }
            }
        }
    }
}

/// The port side: the serial port, the delay, and what they need.
struct Port<S, D> {
    serial: S,
    delay: D,
    poll_us: u32,
    timeout_polls: u32,
    frames_sent: u64,
    serial_errors: u64,
}

impl<S: Write<u8>, D: DelayNs> Port<S, D> {
    /// Writes one frame whose body is `parts`, then flushes.
    fn write_frame(&mut self, kind: FrameKind, parts: &[&[u8]]) -> Result<(), LinkError> {
        let len = parts.iter().map(|p| p.len()).sum();
        // Lengths are checked against the frame size before anything is sent.
        let head = framing::header(kind, len).map_err(|_| LinkError::TooLong {
            len,
            max: framing::MAX_BODY,
        })?;
        let trailer = framing::trailer(&head, parts);
        self.write_all(&head)?;
        for part in parts {
            self.write_all(part)?;
        }
        self.write_all(&trailer)?;
        let mut waited = 0;
        loop {
            match self.serial.flush() {
                Ok(()) => break,
                Err(nb::Error::WouldBlock) => self.pause(&mut waited)?,
                Err(nb::Error::Other(e)) => return Err(LinkError::Serial(e.kind().into())),
            }
        }
        self.frames_sent += 1;
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        for &b in bytes {
            let mut waited = 0;
            loop {
                match self.serial.write(b) {
                    Ok(()) => break,
                    Err(nb::Error::WouldBlock) => self.pause(&mut waited)?,
                    Err(nb::Error::Other(e)) => return Err(LinkError::Serial(e.kind().into())),
                }
            }
        }
        Ok(())
    }

    /// One more poll without progress: time out, or wait `poll_us`.
    fn pause(&mut self, waited: &mut u32) -> Result<(), LinkError> {
        *waited = waited.saturating_add(1);
        if self.timeout_polls != 0 && *waited > self.timeout_polls {
            return Err(LinkError::Timeout {
                polls: self.timeout_polls,
            });
        }
        self.delay.delay_us(self.poll_us);
        Ok(())
    }
}

/// The protocol side: the engine and the link's tables.
struct State<const REQ: usize, const KEYS: usize, const PEERS: usize, const FRAME: usize> {
    config: LinkConfig,
    engine: Engine<REQ, KEYS, PEERS>,
    posted: Vec<Posted, REQ>,
    early: Vec<EarlyBuf<FRAME>, REQ>,
    /// The outcome of the current request, once the engine told it.
    done: Option<Result<u64, RequestError>>,
    barriers_sent: u64,
    barriers_seen: u64,
    /// A frame waits at the front of the decoder for room in the engine.
    holding: bool,
    peer_errors: u64,
    held: u64,
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize, const FRAME: usize>
    State<REQ, KEYS, PEERS, FRAME>
{
    /// Performs every transmit and event until the engine has none.
    fn drain<S: Write<u8>, D: DelayNs>(
        &mut self,
        port: &mut Port<S, D>,
        cur: &mut Current<'_>,
    ) -> Result<(), LinkError> {
        loop {
            if let Some(t) = self.engine.poll_transmit() {
                self.perform(port, cur, t)?;
            } else if let Some(e) = self.engine.poll_event() {
                self.on_event(cur, e);
            } else {
                return Ok(());
            }
        }
    }

    fn perform<S: Write<u8>, D: DelayNs>(
        &mut self,
        port: &mut Port<S, D>,
        cur: &Current<'_>,
        t: Transmit,
    ) -> Result<(), LinkError> {
        match t {
            Transmit::Envelope { header, inline, .. } => {
                let payload = inline.map_or(&[][..], |req| cur.send_bytes(req));
                port.write_frame(FrameKind::Envelope, &[&header, payload])?;
                if let Some(req) = inline {
                    self.engine.handle_sent(req).map_err(LinkError::Usage)?;
                }
            }
            Transmit::Payload { req, comm, tag, .. } => {
                let head = framing::payload_head(comm, tag);
                port.write_frame(FrameKind::Payload, &[&head, cur.send_bytes(req)])?;
                self.engine.handle_sent(req).map_err(LinkError::Usage)?;
            }
            Transmit::Marker { comm, tag, .. } => {
                // An empty payload frame on the fast tag (the link's engine runs without
                // the fast path; this keeps a marker what it is if one ever comes).
                let head = framing::payload_head(comm, tag);
                port.write_frame(FrameKind::Payload, &[&head])?;
            }
            Transmit::Receive {
                req,
                comm,
                tag,
                early,
                ..
            } => {
                let full = LinkError::Usage(UsageError::Full(Table::Requests));
                self.posted
                    .push(Posted { req, comm, tag })
                    .map_err(|_| full)?;
                if early {
                    let buf = EarlyBuf {
                        req,
                        len: 0,
                        bytes: [0; FRAME],
                    };
                    self.early.push(buf).map_err(|_| full)?;
                }
            }
        }
        Ok(())
    }

    fn on_event(&mut self, cur: &mut Current<'_>, e: Event) {
        match e {
            Event::Completed {
                req,
                len,
                from_early,
                ..
            } => {
                if let Some(early) = from_early {
                    if let Some(buf) = self.take_early(early) {
                        let n = usize::try_from(len).unwrap_or(usize::MAX).min(buf.len);
                        cur.deliver(req, buf.bytes.get(..n).unwrap_or_default());
                    }
                }
                if cur.req() == Some(req) {
                    self.done = Some(Ok(len));
                }
            }
            Event::Failed { req, error, .. } => {
                if cur.req() == Some(req) {
                    self.done = Some(Err(error));
                }
            }
            Event::Discard { early } => {
                let _ = self.take_early(early);
            }
        }
    }

    fn take_early(&mut self, req: ReqId) -> Option<EarlyBuf<FRAME>> {
        let i = self.early.iter().position(|b| b.req == req)?;
        Some(self.early.swap_remove(i))
    }

    /// Hands a checked frame to the engine; `false` when the engine has no room for it
    /// yet (keep it and try again later).
    fn on_frame(&mut self, cur: &mut Current<'_>, frame: Frame<'_>) -> Result<bool, LinkError> {
        match frame.kind {
            FrameKind::Envelope => {
                let comm = match frame.body {
                    [_, _, c0, c1, ..] => CommId(u16::from_le_bytes([*c0, *c1])),
                    _ => CommId::WORLD, // too short: the engine reports it
                };
                match self
                    .engine
                    .handle_message(self.config.peer, comm, frame.body)
                {
                    Ok(Arrival::Nothing) => {}
                    Ok(Arrival::Deliver { req, inline }) => cur.deliver(req, inline),
                    Ok(Arrival::Stash { early, inline }) => {
                        let mut buf = EarlyBuf {
                            req: early,
                            len: inline.len(),
                            bytes: [0; FRAME],
                        };
                        if let Some(dst) = buf.bytes.get_mut(..inline.len()) {
                            dst.copy_from_slice(inline);
                        }
                        if self.early.push(buf).is_err() {
                            return Err(LinkError::Usage(UsageError::Full(Table::Requests)));
                        }
                    }
                    Err(MessageError::Full(_)) => return Ok(false),
                    Err(_) => self.peer_errors += 1,
                }
            }
            FrameKind::Payload => {
                let Ok(p) = frame.payload() else {
                    self.peer_errors += 1;
                    return Ok(true);
                };
                let found = self
                    .posted
                    .iter()
                    .position(|r| r.comm == p.comm && r.tag == p.tag);
                let Some(i) = found else {
                    self.peer_errors += 1;
                    return Ok(true);
                };
                let req = self.posted.remove(i).req;
                if let Some(buf) = self.early.iter_mut().find(|b| b.req == req) {
                    let n = p.bytes.len().min(FRAME);
                    if let (Some(dst), Some(src)) = (buf.bytes.get_mut(..n), p.bytes.get(..n)) {
                        dst.copy_from_slice(src);
                    }
                    buf.len = n;
                } else {
                    cur.deliver(req, p.bytes);
                }
                self.engine
                    .handle_received(req, p.bytes.len() as u64)
                    .map_err(LinkError::Usage)?;
            }
            FrameKind::Barrier => match frame.barrier() {
                Ok(g) if g == self.barriers_seen => self.barriers_seen += 1,
                _ => self.peer_errors += 1,
            },
            // A piece of a payload longer than this link's frames: never sent to a link.
            FrameKind::PayloadPart => self.peer_errors += 1,
        }
        Ok(true)
    }
}

/// The protocol over one serial line to one peer (see the [module docs](self)).
///
/// `REQ`, `KEYS` and `PEERS` size the [`Engine`] (`REQ` and `KEYS` powers of two);
/// `FRAME` is the longest frame in bytes, which bounds a message to
/// [`max_body`]`(FRAME) - `[`PAYLOAD_HEAD_LEN`] bytes and must be more than
/// [`framing::OVERHEAD`] plus an envelope (checked at compile time). The link holds `REQ`
/// early buffers of `FRAME` bytes and a decoder of `FRAME` bytes.
pub struct Link<S, D, const REQ: usize, const KEYS: usize, const PEERS: usize, const FRAME: usize> {
    port: Port<S, D>,
    decoder: Decoder<FRAME>,
    state: State<REQ, KEYS, PEERS, FRAME>,
}

impl<S, D, const REQ: usize, const KEYS: usize, const PEERS: usize, const FRAME: usize> fmt::Debug
    for Link<S, D, REQ, KEYS, PEERS, FRAME>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("config", &self.state.config)
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl<S, D, const REQ: usize, const KEYS: usize, const PEERS: usize, const FRAME: usize>
    Link<S, D, REQ, KEYS, PEERS, FRAME>
where
    S: Read<u8> + Write<u8>,
    D: DelayNs,
{
    const ROOM_FOR_AN_ENVELOPE: () = assert!(
        max_body(FRAME) > ENVELOPE_LEN + PAYLOAD_HEAD_LEN,
        "a link frame must hold an envelope"
    );

    /// A link over `serial`, paced by `delay`.
    pub fn new(serial: S, delay: D, config: LinkConfig) -> Self {
        #[allow(clippy::let_unit_value, reason = "forces the compile-time size check")]
        let () = Self::ROOM_FOR_AN_ENVELOPE;
        let mut engine_config = Config::new(config.rank, config.nranks, config.tags);
        let inline_max = u32::try_from(max_body(FRAME) - ENVELOPE_LEN).unwrap_or(u32::MAX);
        engine_config.eager_limit = config.eager_limit.min(inline_max);
        Self {
            port: Port {
                serial,
                delay,
                poll_us: config.poll_us,
                timeout_polls: config.timeout_polls,
                frames_sent: 0,
                serial_errors: 0,
            },
            decoder: Decoder::new(),
            state: State {
                config,
                engine: Engine::new(engine_config),
                posted: Vec::new(),
                early: Vec::new(),
                done: None,
                barriers_sent: 0,
                barriers_seen: 0,
                holding: false,
                peer_errors: 0,
                held: 0,
            },
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &LinkConfig {
        &self.state.config
    }

    /// The engine, for its statistics and [`Engine::leftovers`].
    pub const fn engine(&self) -> &Engine<REQ, KEYS, PEERS> {
        &self.state.engine
    }

    /// What the link has counted.
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            frames_sent: self.port.frames_sent,
            decoder: *self.decoder.counters(),
            serial_errors: self.port.serial_errors,
            peer_errors: self.state.peer_errors,
            held: self.state.held,
        }
    }

    /// The longest message one call may send: what a payload frame carries.
    pub const fn max_message(&self) -> usize {
        max_body(FRAME) - PAYLOAD_HEAD_LEN
    }

    /// Gives the port and the delay back.
    pub fn release(self) -> (S, D) {
        (self.port.serial, self.port.delay)
    }

    /// Sends `bytes` to the peer with user tag `tag` and waits until they left.
    ///
    /// # Errors
    /// [`LinkError::TooLong`] (nothing sent), [`LinkError::Submit`], a write's
    /// [`LinkError::Serial`] or [`LinkError::Timeout`].
    pub fn send(&mut self, tag: Tag, bytes: &[u8]) -> Result<(), LinkError> {
        self.send_with(tag, bytes, false)
    }

    /// Sends `bytes` synchronously: the payload leaves only once the peer posted the
    /// matching receive, and the call returns when it left.
    ///
    /// # Errors
    /// As [`Link::send`]; [`LinkError::Timeout`] also when the peer never receives.
    pub fn send_sync(&mut self, tag: Tag, bytes: &[u8]) -> Result<(), LinkError> {
        self.send_with(tag, bytes, true)
    }

    /// Receives the next message from the peer with user tag `tag` into `buf`; returns
    /// its length. A message that arrived earlier is taken from its early buffer.
    ///
    /// # Errors
    /// [`LinkError::Request`] when the message is longer than `buf`
    /// ([`RequestError::Truncated`]); [`LinkError::Submit`]; [`LinkError::Timeout`].
    pub fn recv(&mut self, tag: Tag, buf: &mut [u8]) -> Result<usize, LinkError> {
        let args = RecvArgs::new(CommId::WORLD, self.state.config.peer, tag, buf.len() as u64);
        let req = self
            .state
            .engine
            .submit_recv(args)
            .map_err(LinkError::Submit)?;
        let len = self.run(req, &mut Current::Recv { req, buf })?;
        Ok(usize::try_from(len).unwrap_or(usize::MAX))
    }

    /// Waits until the peer entered the same barrier (barriers are counted from 0 on each
    /// side).
    ///
    /// # Errors
    /// A write's [`LinkError::Serial`]; [`LinkError::Timeout`].
    pub fn barrier(&mut self) -> Result<(), LinkError> {
        let generation = self.state.barriers_sent;
        let mut cur = Current::Idle;
        self.state.drain(&mut self.port, &mut cur)?;
        self.port
            .write_frame(FrameKind::Barrier, &[&generation.to_le_bytes()])?;
        self.state.barriers_sent += 1;
        self.wait(&mut cur, |s| s.barriers_seen > generation)
    }

    /// Takes in whatever the port has, without waiting: messages that arrive before their
    /// receive go to early buffers. Returns whether anything happened.
    ///
    /// # Errors
    /// A write's [`LinkError::Serial`] or [`LinkError::Timeout`] (answers the engine
    /// sends, such as a synchronous send's acknowledgement).
    pub fn progress(&mut self) -> Result<bool, LinkError> {
        let mut cur = Current::Idle;
        let mut any = false;
        loop {
            self.state.drain(&mut self.port, &mut cur)?;
            if !self.step(&mut cur)? {
                return Ok(any);
            }
            any = true;
        }
    }

    fn send_with(&mut self, tag: Tag, bytes: &[u8], sync: bool) -> Result<(), LinkError> {
        let max = self.max_message();
        if bytes.len() > max {
            return Err(LinkError::TooLong {
                len: bytes.len(),
                max,
            });
        }
        let mut args = SendArgs::new(
            CommId::WORLD,
            self.state.config.peer,
            tag,
            bytes.len() as u64,
        );
        args.sync = sync;
        let req = self
            .state
            .engine
            .submit_send(args)
            .map_err(LinkError::Submit)?;
        self.run(req, &mut Current::Send { req, bytes }).map(|_| ())
    }

    /// Starts `req` and waits for it; retires it and returns its length.
    fn run(&mut self, req: ReqId, cur: &mut Current<'_>) -> Result<u64, LinkError> {
        self.state.done = None;
        self.state.drain(&mut self.port, cur)?;
        loop {
            match self.state.engine.handle_data_ready(req) {
                Ok(()) => break,
                Err(UsageError::Full(Table::Transmits | Table::Events)) => {
                    self.state.drain(&mut self.port, cur)?;
                }
                Err(e) => return Err(LinkError::Usage(e)),
            }
        }
        self.wait(cur, |s| s.done.is_some())?;
        let _ = self.state.engine.retire(req);
        match self.state.done.take() {
            Some(Ok(len)) => Ok(len),
            Some(Err(e)) => Err(LinkError::Request(e)),
            None => Err(LinkError::Timeout { polls: 0 }), // unreachable: waited for it
        }
    }

    /// The blocking loop (see the module docs): drain, check, read or wait.
    fn wait(
        &mut self,
        cur: &mut Current<'_>,
        until: impl Fn(&State<REQ, KEYS, PEERS, FRAME>) -> bool,
    ) -> Result<(), LinkError> {
        let (timeout, quiet) = (
            self.state.config.timeout_polls,
            self.state.config.quiet_polls,
        );
        let mut idle = 0u32;
        loop {
            self.state.drain(&mut self.port, cur)?;
            if until(&self.state) {
                return Ok(());
            }
            if self.step(cur)? {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if quiet != 0
                && idle.is_multiple_of(quiet)
                && !self.state.holding
                && self.decoder.abandon()
                && self.frames(cur)?
            {
                idle = 0;
                continue;
            }
            if timeout != 0 && idle > timeout {
                return Err(LinkError::Timeout { polls: timeout });
            }
            self.port.delay.delay_us(self.port.poll_us);
        }
    }

    /// One step: retry a held frame, or read one byte and hand in the frames it
    /// completes. Whether anything happened.
    fn step(&mut self, cur: &mut Current<'_>) -> Result<bool, LinkError> {
        if self.state.holding && self.frames(cur)? {
            return Ok(true);
        }
        if self.decoder.room() == 0 {
            return Ok(false);
        }
        match self.port.serial.read() {
            Ok(b) => {
                self.decoder.feed(&[b]);
                self.frames(cur)?;
                Ok(true)
            }
            Err(nb::Error::WouldBlock) => Ok(false),
            Err(nb::Error::Other(_)) => {
                self.port.serial_errors += 1;
                Ok(false)
            }
        }
    }

    /// Hands every complete frame to the engine, draining after each; stops at a frame
    /// the engine has no room for. Whether any frame went in.
    fn frames(&mut self, cur: &mut Current<'_>) -> Result<bool, LinkError> {
        let retry = core::mem::take(&mut self.state.holding);
        let mut any = false;
        while let Some(r) = self.decoder.poll() {
            let Ok(frame) = r else {
                continue; // counted by the decoder
            };
            if !self.state.on_frame(cur, frame)? {
                self.decoder.keep();
                self.state.holding = true;
                if !retry || any {
                    self.state.held += 1; // a frame newly held
                }
                return Ok(any);
            }
            any = true;
            self.state.drain(&mut self.port, cur)?;
        }
        Ok(any)
    }
}

#[cfg(test)]
mod tests;
