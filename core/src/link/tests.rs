//! The link against scripted serial ports (`embedded-hal-mock`): every byte written and
//! read, and every delay of the polling loop, is checked; then two links joined by an
//! in-memory line in threads; then random damage on the line.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use embedded_hal_mock::eh1::delay::{CheckedDelay, NoopDelay, StdSleep, Transaction as Delay};
use embedded_hal_mock::eh1::serial::{Mock, Transaction as T};
use embedded_hal_nb::serial::{ErrorKind, ErrorType, Read, Write};
use proptest::prelude::*;

use super::*;
use crate::envelope::{Envelope, Kind as EnvKind};
use crate::types::MsgId;

type L<S, Dl> = Link<S, Dl, 8, 8, 2, 128>;

const POLL: u32 = 50;

fn config() -> LinkConfig {
    let mut c = LinkConfig::new(Rank(0), Rank(1));
    c.poll_us = POLL;
    c
}

fn frame(kind: FrameKind, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = std::vec![0u8; 1024];
    let n = framing::encode(kind, parts, &mut out).unwrap();
    out.truncate(n);
    out
}

/// An envelope frame as a peer's engine writes it.
fn envelope(kind: EnvKind, tag: i64, size: u64, msg: u32, inline: &[u8]) -> Vec<u8> {
    let env = Envelope {
        kind,
        comm: CommId::WORLD,
        tag: Tag(tag),
        size,
        msg: MsgId(msg),
    };
    frame(FrameKind::Envelope, &[&env.encode(), inline])
}

fn eager(tag: i64, msg: u32, bytes: &[u8]) -> Vec<u8> {
    envelope(EnvKind::Eager, tag, bytes.len() as u64, msg, bytes)
}

fn payload(tag: PhysTag, bytes: &[u8]) -> Vec<u8> {
    let head = framing::payload_head(CommId::WORLD, tag);
    frame(FrameKind::Payload, &[&head, bytes])
}

fn barrier(generation: u64) -> Vec<u8> {
    frame(FrameKind::Barrier, &[&generation.to_le_bytes()])
}

fn would_block() -> T<u8> {
    T::read_error(nb::Error::WouldBlock)
}

fn written(f: &[u8]) -> Vec<T<u8>> {
    std::vec![T::write_many(f), T::flush()]
}

fn polls(n: usize) -> Vec<Delay> {
    std::vec![Delay::delay_us(POLL); n]
}

/// Checks that every scripted transaction and delay happened.
fn finish<const R: usize, const K: usize, const P: usize, const F: usize>(
    link: Link<Mock<u8>, CheckedDelay, R, K, P, F>,
) {
    let (mut port, mut delay) = link.release();
    port.done();
    delay.done();
}

#[test]
fn a_small_send_writes_one_eager_envelope_frame() {
    let port = Mock::new(&written(&eager(7, 0, b"ping")));
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), config());
    link.send(Tag(7), b"ping").unwrap();
    assert_eq!(link.stats().frames_sent, 1);
    assert!(link.engine().is_idle());
    finish(link);
}

#[test]
fn a_receive_polls_with_the_configured_delay_until_its_frame_arrives() {
    let port = Mock::new(&[
        would_block(),
        would_block(),
        T::read_many(eager(5, 9, b"abc")),
    ]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(2)), config());
    let mut buf = [0u8; 8];
    assert_eq!(link.recv(Tag(5), &mut buf), Ok(3));
    assert_eq!(&buf[..3], b"abc");
    assert_eq!(link.stats().decoder.frames, 1);
    finish(link);
}

#[test]
fn a_full_send_and_receive_exchange() {
    let mut script = written(&eager(1, 0, b"ping"));
    script.extend([would_block(), T::read_many(eager(2, 0, b"pong!"))]);
    let mut link: L<_, _> = Link::new(Mock::new(&script), CheckedDelay::new(&polls(1)), config());
    link.send(Tag(1), b"ping").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(link.recv(Tag(2), &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"pong!");
    let s = link.stats();
    assert_eq!((s.frames_sent, s.decoder.frames), (1, 1));
    assert_eq!(
        link.engine().stats().sent_to(Rank(1)),
        0,
        "statistics are off"
    );
    assert!(link.engine().leftovers().next().is_none());
    finish(link);
}

#[test]
fn a_long_message_goes_as_an_envelope_then_a_payload_frame() {
    let mut c = config();
    c.eager_limit = 0;
    let data: Vec<u8> = (0..40).collect();
    let tags = c.tags;
    let mut script = written(&envelope(EnvKind::Data, 3, 40, 0, &[]));
    script.extend(written(&payload(tags.data(MsgId(0)), &data)));
    // The answer comes the same way.
    script.push(T::read_many(envelope(EnvKind::Data, 4, 40, 11, &[])));
    script.push(T::read_many(payload(tags.data(MsgId(11)), &data)));
    let mut link: L<_, _> = Link::new(Mock::new(&script), CheckedDelay::new(&[]), c);
    link.send(Tag(3), &data).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(link.recv(Tag(4), &mut buf), Ok(40));
    assert_eq!(&buf[..40], &data[..]);
    finish(link);
}

#[test]
fn a_synchronous_send_waits_for_the_ready_acknowledgement() {
    let tags = config().tags;
    let mut script = written(&envelope(EnvKind::SyncData, 4, 4, 0, &[]));
    script.extend([
        would_block(),
        T::read_many(envelope(EnvKind::SyncReady, 4, 0, 0, &[])),
    ]);
    script.extend(written(&payload(tags.sync(MsgId(0)), b"sync")));
    let mut link: L<_, _> = Link::new(Mock::new(&script), CheckedDelay::new(&polls(1)), config());
    link.send_sync(Tag(4), b"sync").unwrap();
    finish(link);
}

#[test]
fn a_synchronous_receive_acknowledges_then_takes_the_payload() {
    let tags = config().tags;
    let mut script = std::vec![T::read_many(envelope(EnvKind::SyncData, 6, 2, 3, &[]))];
    script.extend(written(&envelope(EnvKind::SyncReady, 6, 0, 3, &[])));
    script.push(T::read_many(payload(tags.sync(MsgId(3)), b"ok")));
    let mut link: L<_, _> = Link::new(Mock::new(&script), CheckedDelay::new(&[]), config());
    let mut buf = [0u8; 4];
    assert_eq!(link.recv(Tag(6), &mut buf), Ok(2));
    assert_eq!(&buf[..2], b"ok");
    finish(link);
}

#[test]
fn a_corrupted_frame_is_dropped_counted_and_the_next_one_delivered() {
    let mut bad = eager(5, 1, b"bad!");
    let last = bad.len() - 6;
    bad[last] ^= 0x10; // a payload byte
    let port = Mock::new(&[T::read_many(bad), T::read_many(eager(5, 2, b"good"))]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), config());
    let mut buf = [0u8; 8];
    assert_eq!(link.recv(Tag(5), &mut buf), Ok(4));
    assert_eq!(&buf[..4], b"good");
    let d = link.stats().decoder;
    assert_eq!((d.crc_failures, d.frames, d.resyncs), (1, 1, 1));
    finish(link);
}

#[test]
fn a_truncated_frame_is_abandoned_once_the_line_goes_quiet() {
    let mut c = config();
    c.quiet_polls = 3;
    let cut = eager(5, 1, &[9u8; 64]);
    let port = Mock::new(&[
        T::read_many(&cut[..20]),
        T::read_many(eager(5, 2, b"after")),
        would_block(),
        would_block(),
        would_block(),
    ]);
    // Two delays, then the third quiet poll abandons the partial frame instead.
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(2)), c);
    let mut buf = [0u8; 80];
    assert_eq!(link.recv(Tag(5), &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"after");
    let d = link.stats().decoder;
    assert_eq!((d.truncated, d.frames), (1, 1));
    finish(link);
}

#[test]
fn bytes_split_at_every_position_arrive_whole() {
    let f = eager(5, 1, b"split me");
    for cut in 1..f.len() {
        let port = Mock::new(&[
            T::read_many(&f[..cut]),
            would_block(),
            T::read_many(&f[cut..]),
        ]);
        let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(1)), config());
        let mut buf = [0u8; 8];
        assert_eq!(link.recv(Tag(5), &mut buf), Ok(8), "cut at {cut}");
        assert_eq!(&buf, b"split me");
        finish(link);
    }
}

#[test]
fn a_silent_peer_times_out_after_the_configured_polls() {
    let mut c = config();
    c.timeout_polls = 3;
    let port = Mock::new(&[would_block(), would_block(), would_block(), would_block()]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(3)), c);
    let mut buf = [0u8; 8];
    assert_eq!(
        link.recv(Tag(5), &mut buf),
        Err(LinkError::Timeout { polls: 3 })
    );
    assert_eq!(
        link.engine().leftovers().count(),
        1,
        "the receive is pending"
    );
    finish(link);
}

#[test]
fn messages_that_arrive_early_wait_in_early_buffers() {
    let mut c = config();
    c.eager_limit = 16;
    let tags = c.tags;
    let long: Vec<u8> = (100..140).collect();
    let port = Mock::new(&[
        T::read_many(eager(2, 1, b"second")),
        T::read_many(envelope(EnvKind::Data, 3, 40, 2, &[])),
        T::read_many(payload(tags.data(MsgId(2)), &long)),
        T::read_many(eager(1, 3, b"first")),
    ]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), c);
    let mut buf = [0u8; 64];
    assert_eq!(link.recv(Tag(1), &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"first");
    // The rest is already here: no more reads.
    assert_eq!(link.recv(Tag(2), &mut buf), Ok(6));
    assert_eq!(&buf[..6], b"second");
    assert_eq!(link.recv(Tag(3), &mut buf), Ok(40));
    assert_eq!(&buf[..40], &long[..]);
    assert_eq!(link.engine().early_messages(), 2);
    assert!(link.engine().is_idle());
    finish(link);
}

#[test]
fn progress_takes_in_early_messages_without_blocking() {
    let port = Mock::new(&[T::read_many(eager(2, 1, b"early")), would_block()]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), config());
    assert_eq!(link.progress(), Ok(true));
    let mut buf = [0u8; 8];
    assert_eq!(link.recv(Tag(2), &mut buf), Ok(5));
    finish(link);
}

#[test]
fn a_frame_waits_while_the_engine_has_no_room() {
    // Two match keys: the third early message's key does not fit until a receive
    // takes one.
    let port = Mock::new(&[
        T::read_many(eager(2, 1, b"two")),
        T::read_many(eager(3, 2, b"three")),
        T::read_many(eager(4, 3, b"four")),
        would_block(),
    ]);
    let mut link: Link<_, _, 8, 2, 2, 128> = Link::new(port, CheckedDelay::new(&[]), config());
    assert_eq!(link.progress(), Ok(true));
    assert_eq!(link.stats().held, 1);
    let mut buf = [0u8; 8];
    // Taking "two" frees its key; the held frame goes in while the next call waits.
    assert_eq!(link.recv(Tag(2), &mut buf), Ok(3));
    assert_eq!(link.recv(Tag(4), &mut buf), Ok(4));
    assert_eq!(&buf[..4], b"four");
    assert_eq!(link.recv(Tag(3), &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"three");
    assert_eq!(link.stats().held, 1);
    finish(link);
}

#[test]
fn a_write_that_would_block_waits_and_retries_the_byte() {
    let f = eager(7, 0, b"slow");
    let port = Mock::new(&[
        T::write_error(f[0], nb::Error::WouldBlock),
        T::write_many(&f),
        T::flush(),
    ]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(1)), config());
    link.send(Tag(7), b"slow").unwrap();
    finish(link);
}

#[test]
fn read_errors_are_counted_and_reading_goes_on() {
    let port = Mock::new(&[
        T::read_error(nb::Error::Other(ErrorKind::Overrun)),
        T::read_many(eager(5, 0, b"x")),
    ]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&polls(1)), config());
    let mut buf = [0u8; 1];
    assert_eq!(link.recv(Tag(5), &mut buf), Ok(1));
    assert_eq!(link.stats().serial_errors, 1);
    finish(link);
}

#[test]
fn a_barrier_writes_its_generation_and_waits_for_the_peers() {
    let mut script = written(&barrier(0));
    script.extend([would_block(), T::read_many(barrier(0))]);
    script.extend(written(&barrier(1)));
    script.push(T::read_many(barrier(1)));
    let mut link: L<_, _> = Link::new(Mock::new(&script), CheckedDelay::new(&polls(1)), config());
    link.barrier().unwrap();
    link.barrier().unwrap();
    finish(link);
}

#[test]
fn oversized_frames_and_unexpected_payloads_are_dropped_and_counted() {
    let port = Mock::new(&[
        T::read_many(eager(5, 0, &[1u8; 200])),
        T::read_many(payload(PhysTag(77), b"nobody asked")),
        T::read_many(eager(5, 1, b"ok")),
    ]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), config());
    let mut buf = [0u8; 8];
    assert_eq!(link.recv(Tag(5), &mut buf), Ok(2));
    let s = link.stats();
    assert_eq!(s.decoder.oversize, 1);
    assert_eq!(s.peer_errors, 1);
    finish(link);
}

#[test]
fn a_message_longer_than_a_frame_is_refused_before_sending() {
    let mut link: L<_, _> = Link::new(Mock::new(&[]), CheckedDelay::new(&[]), config());
    assert_eq!(
        link.max_message(),
        128 - framing::OVERHEAD - PAYLOAD_HEAD_LEN
    );
    assert_eq!(
        link.send(Tag(1), &[0; 200]),
        Err(LinkError::TooLong { len: 200, max: 111 })
    );
    finish(link);
}

#[test]
fn a_short_receive_buffer_fails_the_receive() {
    let port = Mock::new(&[T::read_many(eager(5, 0, b"too long"))]);
    let mut link: L<_, _> = Link::new(port, CheckedDelay::new(&[]), config());
    let mut buf = [0u8; 4];
    assert_eq!(
        link.recv(Tag(5), &mut buf),
        Err(LinkError::Request(RequestError::Truncated {
            capacity: 4,
            size: 8
        }))
    );
    finish(link);
}

/// One direction of an in-memory serial line.
type Wire = Arc<Mutex<VecDeque<u8>>>;

/// One end of an in-memory serial line: reads one wire, writes the other.
struct Line {
    rx: Wire,
    tx: Wire,
}

fn line() -> (Line, Line) {
    let (a, b) = (Wire::default(), Wire::default());
    (
        Line {
            rx: a.clone(),
            tx: b.clone(),
        },
        Line { rx: b, tx: a },
    )
}

impl ErrorType for Line {
    type Error = ErrorKind;
}

impl Read<u8> for Line {
    fn read(&mut self) -> nb::Result<u8, ErrorKind> {
        self.rx
            .lock()
            .unwrap()
            .pop_front()
            .ok_or(nb::Error::WouldBlock)
    }
}

impl Write<u8> for Line {
    fn write(&mut self, b: u8) -> nb::Result<(), ErrorKind> {
        self.tx.lock().unwrap().push_back(b);
        Ok(())
    }

    fn flush(&mut self) -> nb::Result<(), ErrorKind> {
        Ok(())
    }
}

#[test]
fn two_boards_pass_a_token_back_and_forth() {
    const LOOPS: u32 = 60;
    let (a, b) = line();
    let board = |port: Line, me: u32| {
        move || {
            let mut c = LinkConfig::new(Rank(me), Rank(1 - me));
            c.poll_us = 20;
            c.timeout_polls = 200_000;
            c.eager_limit = 8;
            let mut link: Link<_, _, 8, 8, 2, 256> = Link::new(port, StdSleep::new(), c);
            link.barrier().unwrap();
            let mut token = 0u32;
            for l in 0..LOOPS {
                // Eager, long (envelope + payload) and synchronous messages in turn.
                let mut msg = [0u8; 100];
                let len = if l % 2 == 0 { 4 } else { 100 };
                let tag = Tag(i64::from(l));
                if l % 2 != me {
                    let mut buf = [0u8; 100];
                    let n = link.recv(tag, &mut buf).unwrap();
                    assert_eq!(n, len);
                    token = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    assert!(buf[4..n].iter().all(|&x| x == l as u8));
                } else {
                    token += 1;
                    msg[..4].copy_from_slice(&token.to_le_bytes());
                    msg[4..].fill(l as u8);
                    if l % 3 == 0 {
                        link.send_sync(tag, &msg[..len]).unwrap();
                    } else {
                        link.send(tag, &msg[..len]).unwrap();
                    }
                }
            }
            link.barrier().unwrap();
            assert!(link.engine().leftovers().next().is_none());
            assert_eq!(link.stats().decoder.failures(), 0);
            token
        }
    };
    let t0 = std::thread::spawn(board(a, 0));
    let t1 = std::thread::spawn(board(b, 1));
    let (x, y) = (t0.join().unwrap(), t1.join().unwrap());
    assert_eq!(x.max(y), LOOPS);
}

/// A port that plays back a fixed byte string, then has nothing; writes are discarded.
struct Playback(VecDeque<u8>);

impl ErrorType for Playback {
    type Error = ErrorKind;
}

impl Read<u8> for Playback {
    fn read(&mut self) -> nb::Result<u8, ErrorKind> {
        self.0.pop_front().ok_or(nb::Error::WouldBlock)
    }
}

impl Write<u8> for Playback {
    fn write(&mut self, _: u8) -> nb::Result<(), ErrorKind> {
        Ok(())
    }

    fn flush(&mut self) -> nb::Result<(), ErrorKind> {
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random damage on the line never panics the link and never delivers a wrong
    /// payload: each receive returns its message exactly, or times out; every message
    /// lost is accounted for in the decoder's counters.
    #[test]
    fn random_damage_never_delivers_a_wrong_payload(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8),
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..4),
        inserts in proptest::collection::vec((any::<usize>(), proptest::collection::vec(any::<u8>(), 1..20)), 0..3),
    ) {
        let mut bytes: Vec<u8> = messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| eager(i as i64, i as u32, m))
            .collect();
        for (at, mask) in &flips {
            let n = bytes.len();
            bytes[at % n] ^= mask;
        }
        for (at, junk) in &inserts {
            let at = at % (bytes.len() + 1);
            bytes.splice(at..at, junk.iter().copied());
        }
        let mut c = config();
        c.timeout_polls = 3;
        c.quiet_polls = 1;
        let mut link: Link<_, _, 16, 16, 2, 80> =
            Link::new(Playback(bytes.into()), NoopDelay::new(), c);
        let mut lost = 0;
        for (i, m) in messages.iter().enumerate() {
            let mut buf = [0u8; 64];
            match link.recv(Tag(i as i64), &mut buf) {
                Ok(n) => prop_assert_eq!(&buf[..n], &m[..]),
                Err(LinkError::Timeout { .. }) => lost += 1,
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
        let d = link.stats().decoder;
        if lost > 0 {
            prop_assert!(d.failures() > 0 || d.garbage_bytes > 0, "a loss went uncounted");
        }
        if flips.is_empty() && inserts.is_empty() {
            prop_assert_eq!(lost, 0);
        }
    }
}
