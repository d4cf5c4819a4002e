//! Frames over `std` streams, and ranks of the runtime over a socket pair and TCP.

use core::convert::Infallible;
use std::io::Cursor;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;

use starling_core::{AccessMode, Tag};

use super::*;
use crate::runtime::interfaces::Vector;
use crate::{Codelet, Context, RankConfig, RankRunner};

#[test]
fn frames_survive_a_stream_with_garbage_and_a_truncated_tail() {
    let mut wire = b"line noise".to_vec();
    write_frame(&mut wire, FrameKind::Barrier, &[&5u64.to_le_bytes()]).unwrap();
    write_frame(&mut wire, FrameKind::Envelope, &[b"abc", b"def"]).unwrap();
    let mut cut = Vec::new();
    write_frame(&mut cut, FrameKind::Payload, &[&[0; 6], &[1; 100]]).unwrap();
    wire.extend_from_slice(&cut[..50]); // the stream ends in the middle of a frame
    let mut r = FrameReader::new(Cursor::new(wire));
    let f = r.read_frame().unwrap().unwrap();
    assert_eq!(
        (f.kind, f.body),
        (FrameKind::Barrier, 5u64.to_le_bytes().to_vec())
    );
    let f = r.read_frame().unwrap().unwrap();
    assert_eq!((f.kind, f.body), (FrameKind::Envelope, b"abcdef".to_vec()));
    assert_eq!(r.read_frame().unwrap(), None);
    let c = r.counters();
    assert_eq!((c.frames, c.truncated, c.resyncs), (2, 1, 1));
    assert!(c.garbage_bytes >= 10);
}

#[test]
fn a_long_payload_goes_in_pieces_and_comes_back_whole() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut t0 = StreamTransport::new(Rank(0), 2, vec![PeerStream::unix(Rank(1), a).unwrap()]);
    let mut t1 = StreamTransport::new(Rank(1), 2, vec![PeerStream::unix(Rank(0), b).unwrap()]);
    let long: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let token = ReqId {
        index: 0,
        generation: 0,
    };
    t0.send(
        Rank(1),
        CommId::WORLD,
        PhysTag(50),
        long.clone(),
        Some(token),
    );
    t0.send(Rank(1), CommId::WORLD, PhysTag(51), Vec::new(), None);
    assert_eq!(t0.poll(), Some(Completion::Sent(token)));
    t1.recv(Rank(0), CommId::WORLD, PhysTag(51), 0, token);
    t1.recv(Rank(0), CommId::WORLD, PhysTag(50), long.len(), token);
    let mut got = Vec::new();
    let start = std::time::Instant::now();
    while got.len() < 2 && start.elapsed().as_secs() < 10 {
        match t1.poll() {
            Some(c) => got.push(c),
            None => thread::yield_now(),
        }
    }
    assert_eq!(
        got,
        [
            Completion::Received(token, long),
            Completion::Received(token, Vec::new())
        ]
    );
}

/// Starts rank `rank` of 2 over `peer`.
fn start(rank: u32, peer: PeerStream) -> RankRunner {
    let mut config = RankConfig::default();
    config.runtime.workers = 1;
    RankRunner::start(
        move || Ok::<_, Infallible>(StreamTransport::new(Rank(rank), 2, vec![peer])),
        &config,
    )
    .expect("a rank over a stream starts")
}

/// The handbook's ring on two ranks: each loop, receive the token, increment it in a
/// task, pass it on; synchronous sends every third loop. Returns the last token seen.
fn ring(ctx: &Context, loops: u32, len: usize) -> u32 {
    let (rank, size) = (ctx.rank().0, ctx.size());
    let token = ctx.register(Vector::<u32>::zeros(len));
    let increment = Codelet::new("increment", |b| {
        b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
    });
    let (prev, next) = (Rank((rank + size - 1) % size), Rank((rank + 1) % size));
    ctx.barrier();
    for l in 0..loops {
        let tag = Tag(i64::from(l * size + rank));
        if l > 0 || rank > 0 {
            ctx.recv(&token, prev, tag)
                .wait()
                .expect("receive the token");
        }
        ctx.task(&increment).rw(&token).submit();
        if l < loops - 1 || rank < size - 1 {
            let next_tag = Tag(tag.0 + 1);
            let sent = if l % 3 == 2 {
                ctx.send(&token, next, next_tag)
                    .sync()
                    .start()
                    .and_then(|r| r.wait())
            } else {
                ctx.send(&token, next, next_tag).wait()
            };
            sent.expect("send the token");
        }
    }
    ctx.wait_for_all();
    ctx.barrier();
    let value = ctx.acquire(&token, AccessMode::R).get().as_slice()[0];
    let _ = ctx.unregister(token);
    value
}

fn run_ring(a: PeerStream, b: PeerStream, loops: u32, len: usize) -> (u32, u32) {
    let (r0, r1) = (start(0, a), start(1, b));
    let (v0, v1) = thread::scope(|s| {
        let h0 = s.spawn(|| ring(r0.context(), loops, len));
        let h1 = s.spawn(|| ring(r1.context(), loops, len));
        (h0.join().unwrap(), h1.join().unwrap())
    });
    assert!(r0.leftovers().is_empty(), "{:?}", r0.leftovers());
    assert!(r1.leftovers().is_empty(), "{:?}", r1.leftovers());
    r0.stop();
    r1.stop();
    (v0, v1)
}

#[test]
fn two_ranks_run_the_ring_over_a_socket_pair() {
    let (a, b) = UnixStream::pair().unwrap();
    let (a, b) = (
        PeerStream::unix(Rank(1), a).unwrap(),
        PeerStream::unix(Rank(0), b).unwrap(),
    );
    let (sa, sb) = (a.stats(), b.stats());
    let (v0, v1) = run_ring(a, b, 30, 1);
    assert_eq!(v1, 60, "the last rank holds loops × ranks");
    assert_eq!(v0, 59);
    for s in [sa.get(), sb.get()] {
        assert!(s.frames > 30);
        assert_eq!(s.failures(), 0);
    }
}

#[test]
fn two_ranks_run_the_ring_over_tcp_loopback_with_long_tokens() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = TcpStream::connect(addr).unwrap();
    let (server, _) = listener.accept().unwrap();
    let a = PeerStream::tcp(Rank(1), server).unwrap();
    let b = PeerStream::tcp(Rank(0), client).unwrap();
    // 40 000 u32 = 160 kB per message: envelope, then three payload frames.
    let (_, v1) = run_ring(a, b, 4, 40_000);
    assert_eq!(v1, 8);
}

/// A writer that puts line noise before everything it writes.
struct Noisy<W>(W);

impl<W: Write> Write for Noisy<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(b"\xA5\x00noise\xA5\x5A\x01")?;
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[test]
fn the_ring_survives_line_noise_between_frames() {
    let (a, b) = UnixStream::pair().unwrap();
    let peer =
        |rank: u32, s: UnixStream| PeerStream::new(Rank(rank), s.try_clone().unwrap(), Noisy(s));
    let (a, b) = (peer(1, a), peer(0, b));
    let (sa, sb) = (a.stats(), b.stats());
    let (_, v1) = run_ring(a, b, 10, 1);
    assert_eq!(v1, 20);
    for s in [sa.get(), sb.get()] {
        assert!(s.resyncs > 10, "{s:?}");
        assert!(s.garbage_bytes > 100);
        assert_eq!(s.crc_failures, 0);
    }
}
