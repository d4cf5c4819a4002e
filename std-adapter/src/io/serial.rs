//! The protocol on a `std` byte stream: the core's [framing] over a pipe, a socket pair
//! or a TCP connection, so that a rank of this runtime can talk to a board running the
//! core's embedded link, or to another rank, with no MPI.
//!
//! * [`write_frame`] and [`FrameReader`]: frames over any [`Write`] / [`Read`].
//! * [`StreamTransport`]: a [`Transport`] whose peers are byte streams ([`PeerStream`]),
//!   one per peer. A rank built on it with [`RankRunner::start`](crate::RankRunner::start)
//!   runs the ordinary runtime — the ring, any task flow — over the streams. One reader
//!   thread per stream decodes frames; the rank's progression thread writes them and polls
//!   what the readers decoded.
//! * With the `embedded-hal` feature, `NbStream` and `StdDelay`: a `std` stream seen
//!   as an `embedded-hal-nb` serial port and a sleeping `embedded-hal` delay, so that the
//!   core's `Link` — the code a board runs — runs in a thread of this process.
//!
//! The stream carries what the core's framing defines (`docs/protocol.md`, "Framing on a
//! byte stream"): envelope frames for messages on the envelope tag, payload frames
//! (communicator, tag, bytes) for the others, barrier frames. A payload longer than one
//! frame ([`framing::MAX_BODY`]) goes as payload pieces then a final payload frame; a
//! board's link accepts single frames only, so messages to a board must fit its frame.
//! Both ends use [`framing::STREAM_TAGS`]: the transport's tag bound is
//! [`framing::STREAM_TAG_UB`], and a rank started with the default communication tag
//! computes the same tags as a board's `LinkConfig::new`.
//!
//! A damaged frame is dropped (its checks fail) and counted ([`LineStats`]); nothing
//! resends it, so the request waiting for it never completes — the shutdown report lists
//! it. A stream between two processes of one machine does not damage frames; a serial
//! line can.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
// Plain `std` threads and locks, not the `sync` module's: the reader threads block in
// I/O, which `loom` does not model, and nothing here is part of the modelled queues.
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;

use starling_core::framing::{
    self, Counters, Decoder, FrameKind, MAX_BODY, OVERHEAD, PAYLOAD_HEAD_LEN, STREAM_TAG_UB,
};
use starling_core::{CommId, PhysTag, Rank, ReqId};

use crate::io::barrier::MessageBarrier;
use crate::io::transport::{Completion, Transport};

/// The longest frame on the host side: a [`framing::MAX_BODY`] body.
pub const HOST_FRAME: usize = MAX_BODY + OVERHEAD;

/// The longest piece of a payload in one payload frame.
const PIECE: usize = MAX_BODY - PAYLOAD_HEAD_LEN;

/// Writes one frame of `kind` whose body is `parts`, concatenated.
///
/// # Errors
/// The stream's error; [`io::ErrorKind::InvalidInput`] for a body longer than
/// [`framing::MAX_BODY`].
pub fn write_frame<W: Write + ?Sized>(
    w: &mut W,
    kind: FrameKind,
    parts: &[&[u8]],
) -> io::Result<()> {
    let body: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = vec![0; framing::frame_len(body)];
    let n = framing::encode(kind, parts, &mut out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    w.write_all(&out[..n])?;
    w.flush()
}

/// A frame read from a stream, with its own copy of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedFrame {
    /// What it carries.
    pub kind: FrameKind,
    /// Its body.
    pub body: Vec<u8>,
}

/// Reads frames from a byte stream, dropping and counting damaged bytes.
pub struct FrameReader<R> {
    reader: R,
    decoder: Box<Decoder<HOST_FRAME>>,
    chunk: Box<[u8]>,
}

impl<R> core::fmt::Debug for FrameReader<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrameReader")
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl<R: Read> FrameReader<R> {
    /// A reader of frames from `reader`.
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            decoder: Box::new(Decoder::new()),
            chunk: vec![0; 16 * 1024].into_boxed_slice(),
        }
    }

    /// What the decoder has counted: frames, CRC failures, resynchronisations, ...
    pub fn counters(&self) -> Counters {
        *self.decoder.counters()
    }

    /// The next good frame; `None` at the end of the stream (a partial frame left there
    /// is counted as truncated).
    ///
    /// # Errors
    /// The stream's error.
    pub fn read_frame(&mut self) -> io::Result<Option<OwnedFrame>> {
        loop {
            while let Some(r) = self.decoder.poll() {
                if let Ok(f) = r {
                    return Ok(Some(OwnedFrame {
                        kind: f.kind,
                        body: f.body.to_vec(),
                    }));
                }
            }
            let room = self.decoder.room().min(self.chunk.len());
            let n = match self.reader.read(&mut self.chunk[..room]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                // The end: a partial frame will never complete; frames inside it may.
                if self.decoder.abandon() {
                    continue;
                }
                return Ok(None);
            }
            self.decoder.feed(&self.chunk[..n]);
        }
    }
}

/// The counters of one stream's decoder, readable while the stream is in use.
#[derive(Clone, Debug, Default)]
pub struct LineStats(Arc<Mutex<Counters>>);

impl LineStats {
    /// The counters now.
    pub fn get(&self) -> Counters {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One peer of a [`StreamTransport`]: its rank and the two directions of its stream.
pub struct PeerStream {
    rank: Rank,
    reader: Box<dyn Read + Send>,
    writer: Box<dyn Write + Send>,
    close: Option<Box<dyn FnOnce() + Send>>,
    stats: LineStats,
}

impl core::fmt::Debug for PeerStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PeerStream")
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl PeerStream {
    /// The peer `rank`, read from `reader` and written to `writer` (two ends of one
    /// stream, or two pipes).
    pub fn new(
        rank: Rank,
        reader: impl Read + Send + 'static,
        writer: impl Write + Send + 'static,
    ) -> Self {
        Self {
            rank,
            reader: Box::new(reader),
            writer: Box::new(writer),
            close: None,
            stats: LineStats::default(),
        }
    }

    /// The peer `rank` over a Unix socket (one end of `UnixStream::pair()`). The socket is
    /// shut down when the transport is dropped, which ends both sides' readers.
    ///
    /// # Errors
    /// When the socket cannot be cloned.
    #[cfg(unix)]
    pub fn unix(rank: Rank, stream: std::os::unix::net::UnixStream) -> io::Result<Self> {
        let (reader, closer) = (stream.try_clone()?, stream.try_clone()?);
        let mut p = Self::new(rank, reader, stream);
        p.close = Some(Box::new(move || {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        }));
        Ok(p)
    }

    /// The peer `rank` over a TCP connection (`TCP_NODELAY` is set: frames are small and
    /// latency-bound). The socket is shut down when the transport is dropped.
    ///
    /// # Errors
    /// When the socket cannot be cloned or configured.
    pub fn tcp(rank: Rank, stream: std::net::TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let (reader, closer) = (stream.try_clone()?, stream.try_clone()?);
        let mut p = Self::new(rank, reader, stream);
        p.close = Some(Box::new(move || {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        }));
        Ok(p)
    }

    /// The counters of this stream's decoder (keep the handle before handing the stream
    /// to a transport).
    pub fn stats(&self) -> LineStats {
        self.stats.clone()
    }
}

/// What a reader thread hands to the transport.
enum Incoming {
    Frame(OwnedFrame),
    /// The stream ended (or failed: the message says how).
    Closed(Option<String>),
}

/// A [`Transport`] over byte streams, one per peer (see the [module docs](self)).
pub struct StreamTransport {
    rank: Rank,
    size: u32,
    writers: HashMap<Rank, Box<dyn Write + Send>>,
    incoming: mpsc::Receiver<(Rank, Incoming)>,
    closers: Vec<Box<dyn FnOnce() + Send>>,
    envelope_tag: Option<PhysTag>,
    posted: Vec<(Rank, CommId, PhysTag, ReqId)>,
    unexpected: VecDeque<(Rank, CommId, PhysTag, Vec<u8>)>,
    /// Pieces of a long payload, per source, until its last frame.
    pieces: HashMap<Rank, (CommId, PhysTag, Vec<u8>)>,
    completions: VecDeque<Completion>,
    barrier: MessageBarrier,
}

impl core::fmt::Debug for StreamTransport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StreamTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl StreamTransport {
    /// Rank `rank` of `size`, connected to each of `peers`; starts one reader thread per
    /// peer. Ranks without a stream cannot be reached.
    pub fn new(rank: Rank, size: u32, peers: Vec<PeerStream>) -> Self {
        let (tx, incoming) = mpsc::channel();
        let mut writers = HashMap::new();
        let mut closers = Vec::new();
        for p in peers {
            let (tx, source, stats) = (tx.clone(), p.rank, p.stats);
            let mut reader = FrameReader::new(p.reader);
            thread::Builder::new()
                .name(format!("starling-line{}-{}", rank.0, source.0))
                .spawn(move || {
                    let end = loop {
                        let r = reader.read_frame();
                        *stats.0.lock().unwrap_or_else(PoisonError::into_inner) = reader.counters();
                        match r {
                            Ok(Some(f)) => {
                                if tx.send((source, Incoming::Frame(f))).is_err() {
                                    return; // the transport is gone
                                }
                            }
                            Ok(None) => break None,
                            Err(e) => break Some(e.to_string()),
                        }
                    };
                    let _ = tx.send((source, Incoming::Closed(end)));
                })
                .expect("spawning a stream reader thread");
            writers.insert(source, p.writer);
            closers.extend(p.close);
        }
        Self {
            rank,
            size,
            writers,
            incoming,
            closers,
            envelope_tag: None,
            posted: Vec::new(),
            unexpected: VecDeque::new(),
            pieces: HashMap::new(),
            completions: VecDeque::new(),
            barrier: MessageBarrier::default(),
        }
    }

    fn write(&mut self, dest: Rank, kind: FrameKind, parts: &[&[u8]]) {
        let result = match self.writers.get_mut(&dest) {
            Some(w) => write_frame(w, kind, parts),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "no stream to it",
            )),
        };
        if let Err(e) = result {
            eprintln!(
                "[starling][{}] cannot write a {kind} to rank {}: {e}",
                self.rank.0, dest.0
            );
        }
    }

    fn on_frame(&mut self, source: Rank, f: OwnedFrame) {
        let frame = framing::Frame {
            kind: f.kind,
            body: &f.body,
        };
        match f.kind {
            FrameKind::Envelope => {
                let comm = match f.body.as_slice() {
                    [_, _, c0, c1, ..] => CommId(u16::from_le_bytes([*c0, *c1])),
                    _ => CommId::WORLD, // too short: the engine reports it
                };
                self.completions.push_back(Completion::Envelope {
                    source,
                    comm,
                    bytes: f.body,
                });
            }
            FrameKind::Payload | FrameKind::PayloadPart => {
                let Ok(p) = frame.payload() else {
                    eprintln!(
                        "[starling][{}] malformed payload frame from {source}",
                        self.rank.0
                    );
                    return;
                };
                let mut bytes = match self.pieces.remove(&source) {
                    Some((comm, tag, mut head)) if comm == p.comm && tag == p.tag => {
                        head.extend_from_slice(p.bytes);
                        head
                    }
                    _ => p.bytes.to_vec(),
                };
                if f.kind == FrameKind::PayloadPart {
                    self.pieces
                        .insert(source, (p.comm, p.tag, core::mem::take(&mut bytes)));
                    return;
                }
                self.deliver(source, p.comm, p.tag, bytes);
            }
            FrameKind::Barrier => {
                if let Ok(generation) = frame.barrier() {
                    self.barrier.arrived(generation);
                    self.check_barrier();
                }
            }
            _ => {}
        }
    }

    fn deliver(&mut self, source: Rank, comm: CommId, tag: PhysTag, bytes: Vec<u8>) {
        let found = self
            .posted
            .iter()
            .position(|(s, c, t, _)| *s == source && *c == comm && *t == tag);
        match found {
            Some(i) => {
                let (_, _, _, token) = self.posted.remove(i);
                self.completions
                    .push_back(Completion::Received(token, bytes));
            }
            None => self.unexpected.push_back((source, comm, tag, bytes)),
        }
    }

    fn check_barrier(&mut self) {
        if let Some(token) = self.barrier.complete(self.writers.len()) {
            self.completions.push_back(Completion::Barrier(token));
        }
    }
}

impl Drop for StreamTransport {
    fn drop(&mut self) {
        for close in self.closers.drain(..) {
            close();
        }
    }
}

impl Transport for StreamTransport {
    /// Nothing comes through the rank's inbox: reader threads decode the streams.
    type Wire = core::convert::Infallible;

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn tag_ub(&self) -> i32 {
        STREAM_TAG_UB
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
        if Some(tag) == self.envelope_tag {
            self.write(dest, FrameKind::Envelope, &[&bytes]);
        } else {
            let head = framing::payload_head(comm, tag);
            let mut pieces = bytes.chunks(PIECE).peekable();
            if pieces.peek().is_none() {
                self.write(dest, FrameKind::Payload, &[&head]);
            }
            while let Some(piece) = pieces.next() {
                let kind = if pieces.peek().is_some() {
                    FrameKind::PayloadPart
                } else {
                    FrameKind::Payload
                };
                self.write(dest, kind, &[&head, piece]);
            }
        }
        // The bytes are in the stream: the send is complete, as a buffered MPI send.
        if let Some(t) = token {
            self.completions.push_back(Completion::Sent(t));
        }
    }

    fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, _size: usize, token: ReqId) {
        let found = self
            .unexpected
            .iter()
            .position(|(s, c, t, _)| *s == source && *c == comm && *t == tag);
        match found.and_then(|i| self.unexpected.remove(i)) {
            Some((_, _, _, bytes)) => self
                .completions
                .push_back(Completion::Received(token, bytes)),
            None => self.posted.push((source, comm, tag, token)),
        }
    }

    fn barrier(&mut self, token: u64) {
        let generation = self.barrier.enter(token);
        let peers: Vec<Rank> = self.writers.keys().copied().collect();
        for dest in peers {
            self.write(dest, FrameKind::Barrier, &[&generation.to_le_bytes()]);
        }
        self.check_barrier();
    }

    fn accept(&mut self, wire: Self::Wire) {
        match wire {}
    }

    fn poll(&mut self) -> Option<Completion> {
        while self.completions.is_empty() {
            match self.incoming.try_recv() {
                Ok((source, Incoming::Frame(f))) => self.on_frame(source, f),
                Ok((source, Incoming::Closed(why))) => {
                    if let Some(e) = why {
                        eprintln!(
                            "[starling][{}] the stream from rank {} failed: {e}",
                            self.rank.0, source.0
                        );
                    }
                }
                Err(_) => break,
            }
        }
        self.completions.pop_front()
    }

    fn needs_polling(&self) -> bool {
        true
    }
}

#[cfg(feature = "embedded-hal")]
mod nb_stream;
#[cfg(feature = "embedded-hal")]
pub use nb_stream::{NbStream, StdDelay};

#[cfg(test)]
mod tests;
