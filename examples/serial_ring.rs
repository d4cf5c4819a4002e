//! The token ring over a byte stream, between "boards": threads that run the core's
//! embedded link (`starling::core::link`, the `no_std` code a microcontroller runs)
//! joined by a socket pair, as two boards are joined by a serial line.
//!
//! Each loop, a side receives the token from the other, increments it and sends it on;
//! after `loops` loops the second side holds `2 × loops`. The modes:
//!
//! * `boards` (default): two boards. Messages take every path of the protocol: a 4-byte
//!   token inline in its envelope frame, every fifth one padded to 100 bytes (an envelope
//!   frame then a payload frame), every third one sent synchronously (the payload waits
//!   for the receiver's acknowledgement).
//! * `noisy`: the same, with line noise written between frames: the decoders drop it and
//!   resynchronise (their counters say how often).
//! * `rank`: rank 0 is the ordinary runtime (a `RankRunner` over a `StreamTransport`, the
//!   ring of `examples/ring.rs` with tasks and handles) and rank 1 is a board.
//! * `ranks`: two ranks of the runtime over the socket pair.
//!
//! ```sh
//! cargo run --example serial_ring -- [loops] [boards|noisy|rank|ranks]
//! ```
//!
//! It checks the token and exits non-zero when it went astray.

use core::convert::Infallible;
use core::time::Duration;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use starling::core::framing::Counters;
use starling::core::link::{Link, LinkConfig, LinkError};
use starling::core::{AccessMode, Rank, Tag};
use starling::interfaces::Vector;
use starling::serial::{NbStream, PeerStream, StdDelay, StreamTransport};
use starling::{Codelet, Context, RankConfig, RankRunner};

/// A board: the embedded link with 8 requests, 8 match keys, 2 peers and 256-byte frames.
type Board<S> = Link<NbStream<S>, StdDelay, 8, 8, 2, 256>;

/// What a run found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The token each side holds at the end.
    pub(crate) tokens: [u32; 2],
    /// Each side's decoder counters.
    pub(crate) lines: [Counters; 2],
    /// Time from the first barrier to the last, per hop.
    pub(crate) per_hop: Duration,
}

/// A stream that writes line noise before the first write after each flush, so the noise
/// falls between frames.
struct Noisy {
    stream: UnixStream,
    at_boundary: bool,
}

impl Read for Noisy {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl Write for Noisy {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if core::mem::take(&mut self.at_boundary) {
            self.stream.write_all(b"\x00\xA5~noise~\xA5\x5A\x02\xFF")?;
        }
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.at_boundary = true;
        self.stream.flush()
    }
}

fn board_config(me: u32) -> LinkConfig {
    let mut c = LinkConfig::new(Rank(me), Rank(1 - me));
    c.poll_us = 20;
    c.timeout_polls = 250_000; // 5 s of silence: the other side is gone
    c.eager_limit = 16;
    c
}

/// One board's side of the ring. Tags as in `examples/ring.rs`: the message of loop `l`
/// from side `r` carries tag `2l + r + 1`.
fn board_ring<S: Read + Write>(
    link: &mut Board<S>,
    me: u32,
    loops: u32,
    long: bool,
) -> Result<(u32, Duration), LinkError> {
    link.barrier()?;
    let start = Instant::now();
    let mut token = 0u32;
    let mut buf = [0u8; 128];
    for l in 0..loops {
        let tag = Tag(i64::from(2 * l + me));
        if l > 0 || me > 0 {
            let n = link.recv(tag, &mut buf)?;
            token = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
            assert!(
                buf[4..n].iter().all(|&b| b == l as u8),
                "padding went astray"
            );
        }
        token += 1;
        if l < loops - 1 || me == 0 {
            let len = if long && l % 5 == 4 { 100 } else { 4 };
            buf[..4].copy_from_slice(&token.to_le_bytes());
            // The receiver checks the padding against its own loop number.
            buf[4..len].fill((l as u8).wrapping_add(u8::from(me == 1)));
            let next = Tag(tag.0 + 1);
            if l % 3 == 2 {
                link.send_sync(next, &buf[..len])?;
            } else {
                link.send(next, &buf[..len])?;
            }
        }
    }
    let elapsed = start.elapsed();
    link.barrier()?;
    Ok((token, elapsed))
}

/// The runtime's side of the ring (rank 0 of 2): receive, increment in a task, send on.
fn rank_ring(ctx: &Context, loops: u32) -> u32 {
    let token = ctx.register(Vector::<u32>::zeros(1));
    let increment = Codelet::new("increment_token", |b| {
        b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
    });
    let (me, other) = (ctx.rank(), Rank(1 - ctx.rank().0));
    ctx.barrier();
    for l in 0..loops {
        let tag = Tag(i64::from(2 * l + me.0));
        if l > 0 || me.0 > 0 {
            ctx.recv(&token, other, tag)
                .wait()
                .expect("receive the token");
        }
        ctx.task(&increment).rw(&token).submit();
        if l < loops - 1 || me.0 == 0 {
            let next = Tag(tag.0 + 1);
            if l % 3 == 2 {
                ctx.send(&token, other, next)
                    .sync()
                    .start()
                    .and_then(|r| r.wait())
            } else {
                ctx.send(&token, other, next).wait()
            }
            .expect("send the token");
        }
    }
    ctx.wait_for_all();
    ctx.barrier();
    let value = ctx.acquire(&token, AccessMode::R).get().as_slice()[0];
    let _ = ctx.unregister(token);
    value
}

fn start_rank(me: u32, peer: PeerStream, board: bool) -> RankRunner {
    let mut config = RankConfig::from_env();
    // A board speaks the point-to-point protocol only: the graph-agreement check's
    // exchange at barriers (on in debug builds) is for ranks of the runtime.
    config.check_agreement &= !board;
    RankRunner::start(
        move || Ok::<_, Infallible>(StreamTransport::new(Rank(me), 2, vec![peer])),
        &config,
    )
    .expect("a rank over a stream starts")
}

fn spawn_board<S: Read + Write + Send + 'static>(
    me: u32,
    stream: S,
    loops: u32,
    long: bool,
) -> std::thread::JoinHandle<(u32, Duration, Counters)> {
    std::thread::spawn(move || {
        let mut link: Board<S> = Link::new(NbStream::new(stream), StdDelay, board_config(me));
        let (token, elapsed) = board_ring(&mut link, me, loops, long)
            .unwrap_or_else(|e| panic!("board {me}: {e} ({:?})", link.stats()));
        assert!(
            link.engine().leftovers().next().is_none(),
            "board {me} left requests"
        );
        (token, elapsed, link.stats().decoder)
    })
}

/// Runs the ring in `mode` for `loops` loops.
///
/// # Errors
/// A message naming what went wrong (an unknown mode, a socket that would not open).
pub(crate) fn run(mode: &str, loops: u32) -> Result<Outcome, String> {
    assert!(loops >= 1);
    let (a, b) = UnixStream::pair().map_err(|e| e.to_string())?;
    let hops = 2 * loops - 1;
    let outcome = match mode {
        "boards" | "noisy" => {
            for s in [&a, &b] {
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
            }
            let (h0, h1) = if mode == "noisy" {
                let noisy = |stream| Noisy {
                    stream,
                    at_boundary: true,
                };
                (
                    spawn_board(0, noisy(a), loops, true),
                    spawn_board(1, noisy(b), loops, true),
                )
            } else {
                (
                    spawn_board(0, a, loops, true),
                    spawn_board(1, b, loops, true),
                )
            };
            let (t0, e0, c0) = h0.join().map_err(|_| "board 0 failed")?;
            let (t1, _, c1) = h1.join().map_err(|_| "board 1 failed")?;
            Outcome {
                tokens: [t0, t1],
                lines: [c0, c1],
                per_hop: e0 / hops,
            }
        }
        "rank" => {
            b.set_nonblocking(true).map_err(|e| e.to_string())?;
            let peer = PeerStream::unix(Rank(1), a).map_err(|e| e.to_string())?;
            let line = peer.stats();
            let board = spawn_board(1, b, loops, false);
            let runner = start_rank(0, peer, true);
            let start = Instant::now();
            let t0 = rank_ring(runner.context(), loops);
            let elapsed = start.elapsed();
            let leftovers = runner.leftovers();
            runner.stop();
            assert!(leftovers.is_empty(), "{leftovers:?}");
            let (t1, _, c1) = board.join().map_err(|_| "the board failed")?;
            Outcome {
                tokens: [t0, t1],
                lines: [line.get(), c1],
                per_hop: elapsed / hops,
            }
        }
        "ranks" => {
            let p0 = PeerStream::unix(Rank(1), a).map_err(|e| e.to_string())?;
            let p1 = PeerStream::unix(Rank(0), b).map_err(|e| e.to_string())?;
            let lines = [p0.stats(), p1.stats()];
            let (r0, r1) = (start_rank(0, p0, false), start_rank(1, p1, false));
            let start = Instant::now();
            let (t0, t1) = std::thread::scope(|s| {
                let h = s.spawn(|| rank_ring(r1.context(), loops));
                let t0 = rank_ring(r0.context(), loops);
                (t0, h.join().expect("rank 1"))
            });
            let elapsed = start.elapsed();
            for r in [&r0, &r1] {
                let left = r.leftovers();
                assert!(left.is_empty(), "{left:?}");
            }
            r0.stop();
            r1.stop();
            Outcome {
                tokens: [t0, t1],
                lines: [lines[0].get(), lines[1].get()],
                per_hop: elapsed / hops,
            }
        }
        other => {
            return Err(format!(
                "unknown mode {other}: boards, noisy, rank or ranks"
            ));
        }
    };
    Ok(outcome)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let loops: u32 = args.next().map_or(100, |a| a.parse().expect("loops"));
    let mode = args.next().unwrap_or_else(|| "boards".into());
    let o = run(&mode, loops).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[1] token = {} == 2 * {loops} ?", o.tokens[1]);
    assert_eq!(o.tokens[1], 2 * loops, "the token went astray");
    assert_eq!(o.tokens[0], 2 * loops - 1, "the token went astray");
    for (side, c) in o.lines.iter().enumerate() {
        eprintln!(
            "line into side {side}: {} frames, {} CRC failures, {} header failures, {} resyncs, {} garbage bytes",
            c.frames, c.crc_failures, c.header_failures, c.resyncs, c.garbage_bytes
        );
    }
    eprintln!(
        "{mode} ring over a socket pair: {} hops, {:.1} µs per hop",
        2 * loops - 1,
        o.per_hop.as_secs_f64() * 1e6
    );
}
