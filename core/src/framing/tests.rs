//! The decoder's state machine, byte by byte: clean streams split at every position,
//! garbage, damaged, truncated, oversized and unknown frames, and a property test that
//! random damage never panics and never delivers a frame that was not sent.

use std::vec::Vec;

use proptest::prelude::*;

use super::*;

type Owned = (FrameKind, Vec<u8>);

fn frame(kind: FrameKind, body: &[u8]) -> Vec<u8> {
    let mut out = std::vec![0u8; frame_len(body.len())];
    let n = encode(kind, &[body], &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

/// Feeds `bytes` in chunks of the given sizes (cycled), polling after each, and returns
/// every frame and error seen, then abandons partial frames until the buffer is empty.
fn decode_all<const N: usize>(
    d: &mut Decoder<N>,
    bytes: &[u8],
    chunks: &[usize],
) -> (Vec<Owned>, Vec<FrameError>) {
    let (mut frames, mut errors) = (Vec::new(), Vec::new());
    let drain = |d: &mut Decoder<N>, frames: &mut Vec<Owned>, errors: &mut Vec<FrameError>| {
        while let Some(r) = d.poll() {
            match r {
                Ok(f) => frames.push((f.kind, f.body.to_vec())),
                Err(e) => errors.push(e),
            }
        }
    };
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let want = chunks
            .get(i % chunks.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        let take = want.min(rest.len());
        let mut chunk = &rest[..take];
        while !chunk.is_empty() {
            let n = d.feed(chunk);
            chunk = &chunk[n..];
            drain(d, &mut frames, &mut errors);
        }
        rest = &rest[take..];
        i += 1;
    }
    drain(d, &mut frames, &mut errors);
    while d.abandon() {
        drain(d, &mut frames, &mut errors);
    }
    (frames, errors)
}

fn sample() -> Vec<Owned> {
    std::vec![
        (FrameKind::Envelope, (0u8..24).collect()),
        (
            FrameKind::Payload,
            b"\x00\x00\x2b\x00\x00\x00payload".to_vec()
        ),
        (FrameKind::Barrier, 3u64.to_le_bytes().to_vec()),
        (FrameKind::Payload, std::vec![0xA5; 40]), // sync bytes inside a body
        (FrameKind::Envelope, Vec::new()),
    ]
}

fn stream(frames: &[Owned]) -> Vec<u8> {
    frames.iter().flat_map(|(k, b)| frame(*k, b)).collect()
}

#[test]
fn checksums_match_their_published_check_values() {
    assert_eq!(crc16(b"123456789"), 0x29B1);
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn encode_writes_the_documented_layout() {
    let f = frame(FrameKind::Barrier, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&f[..2], &SYNC);
    assert_eq!(f[2], 3);
    assert_eq!(u16::from_le_bytes([f[3], f[4]]), 8);
    assert_eq!(u16::from_le_bytes([f[5], f[6]]), crc16(&f[2..5]));
    assert_eq!(&f[7..15], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        u32::from_le_bytes(f[15..19].try_into().unwrap()),
        crc32(&f[2..15])
    );
    assert_eq!(f.len(), 8 + OVERHEAD);
}

#[test]
fn encode_concatenates_parts_and_refuses_small_buffers() {
    let mut out = [0u8; 32];
    let n = encode(FrameKind::Payload, &[b"ab", b"", b"cde"], &mut out).unwrap();
    assert_eq!(&out[..n], &frame(FrameKind::Payload, b"abcde")[..]);
    let mut small = [0u8; 15];
    assert_eq!(
        encode(FrameKind::Payload, &[b"abcde"], &mut small),
        Err(EncodeError::BufferTooSmall {
            needed: 16,
            available: 15
        })
    );
    assert_eq!(small, [0u8; 15]);
    let big = std::vec![0u8; MAX_BODY + 1];
    assert_eq!(
        header(FrameKind::Payload, big.len()),
        Err(EncodeError::BodyTooLong {
            len: MAX_BODY + 1,
            max: MAX_BODY
        })
    );
}

#[test]
fn clean_stream_decodes_whole_and_byte_by_byte() {
    let sent = sample();
    let bytes = stream(&sent);
    for chunks in [&[usize::MAX][..], &[1], &[3, 1, 7], &[13]] {
        let mut d: Decoder<128> = Decoder::new();
        let (frames, errors) = decode_all(&mut d, &bytes, chunks);
        assert_eq!(frames, sent, "chunks {chunks:?}");
        assert!(errors.is_empty());
        assert_eq!(d.counters().frames, sent.len() as u64);
        assert_eq!(d.counters().failures(), 0);
        assert_eq!(d.counters().garbage_bytes, 0);
        assert_eq!(d.counters().resyncs, 0);
        assert_eq!(d.buffered(), 0);
    }
}

#[test]
fn bytes_split_at_every_position_give_the_same_frames() {
    let sent = sample();
    let bytes = stream(&sent);
    let ends: Vec<usize> = sent
        .iter()
        .scan(0, |end, f| {
            *end += frame_len(f.1.len());
            Some(*end)
        })
        .collect();
    for cut in 0..=bytes.len() {
        let mut d: Decoder<256> = Decoder::new();
        let mut got = Vec::new();
        for (half, part) in [&bytes[..cut], &bytes[cut..]].into_iter().enumerate() {
            assert_eq!(d.feed(part), part.len());
            while let Some(r) = d.poll() {
                let f = r.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
                got.push((f.kind, f.body.to_vec()));
            }
            if half == 0 {
                // The first half delivers exactly the frames it holds whole.
                let whole = ends.iter().filter(|&&end| end <= cut).count();
                assert_eq!(got, sent[..whole], "first half, cut at {cut}");
            }
        }
        assert_eq!(got, sent, "cut at {cut}");
        assert_eq!(d.counters().failures(), 0);
    }
}

#[test]
fn garbage_before_between_and_after_frames_is_dropped_and_counted() {
    let sent = sample();
    let mut bytes = b"\xA5\xA5noise\x00\xFF".to_vec();
    for (k, b) in &sent {
        bytes.extend_from_slice(&frame(*k, b));
        bytes.extend_from_slice(b"\x5A\xA5x");
    }
    let mut d: Decoder<128> = Decoder::new();
    let (frames, _) = decode_all(&mut d, &bytes, &[1]);
    assert_eq!(frames, sent);
    let garbage = 9 + 3 * sent.len() as u64;
    assert_eq!(d.counters().garbage_bytes, garbage);
    assert_eq!(d.counters().resyncs, sent.len() as u64);
    assert_eq!(d.counters().frames, sent.len() as u64);
}

#[test]
fn a_damaged_byte_anywhere_loses_only_that_frame() {
    let before = frame(FrameKind::Barrier, &1u64.to_le_bytes());
    let victim = frame(
        FrameKind::Payload,
        b"\x00\x00\x2b\x00\x00\x00a payload to damage",
    );
    let after = frame(FrameKind::Barrier, &2u64.to_le_bytes());
    for at in 0..victim.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut damaged = victim.clone();
            damaged[at] ^= flip;
            let bytes = [&before[..], &damaged, &after].concat();
            let mut d: Decoder<64> = Decoder::new();
            let (frames, errors) = decode_all(&mut d, &bytes, &[1]);
            let kinds: Vec<_> = frames.iter().map(|f| f.0).collect();
            assert_eq!(
                kinds,
                [FrameKind::Barrier, FrameKind::Barrier],
                "byte {at} ^ {flip:#x}: {frames:?}"
            );
            assert_eq!(frames[0].1, 1u64.to_le_bytes());
            assert_eq!(frames[1].1, 2u64.to_le_bytes());
            let c = d.counters();
            assert!(
                c.failures() > 0 || c.garbage_bytes > 0,
                "byte {at}: the loss is counted"
            );
            if at >= HEADER_LEN {
                assert_eq!(c.crc_failures, 1, "body byte {at}: {errors:?}");
            } else if at >= 2 {
                assert!(c.header_failures + c.truncated >= 1, "header byte {at}");
            }
        }
    }
}

#[test]
fn a_truncated_frame_does_not_hide_the_next_one() {
    let victim = frame(FrameKind::Payload, &[7u8; 30]);
    let next = frame(FrameKind::Barrier, &9u64.to_le_bytes());
    for keep in 1..victim.len() {
        let bytes = [&victim[..keep], &next[..]].concat();
        let mut d: Decoder<64> = Decoder::new();
        let (frames, _) = decode_all(&mut d, &bytes, &[usize::MAX]);
        assert_eq!(
            frames,
            [(FrameKind::Barrier, 9u64.to_le_bytes().to_vec())],
            "victim cut to {keep} bytes"
        );
    }
}

#[test]
fn a_truncated_frame_waits_for_the_line_to_go_quiet() {
    let victim = frame(FrameKind::Payload, &[7u8; 40]);
    let next = frame(FrameKind::Barrier, &9u64.to_le_bytes());
    let mut d: Decoder<64> = Decoder::new();
    d.feed(&victim[..20]);
    d.feed(&next);
    // The victim declares 40 bytes: the decoder cannot tell yet that the next frame is
    // not its body.
    assert!(d.poll().is_none());
    assert!(d.abandon());
    let mut got = None;
    while let Some(r) = d.poll() {
        if let Ok(f) = r {
            got = Some(f.barrier());
        }
    }
    assert_eq!(got, Some(Ok(9)));
    assert_eq!(d.counters().truncated, 1);
    assert_eq!(d.counters().resyncs, 1);
    assert!(!d.abandon());
}

#[test]
fn an_oversized_frame_is_refused_without_growing() {
    let big = frame(FrameKind::Payload, &[1u8; 100]);
    let small = frame(FrameKind::Barrier, &5u64.to_le_bytes());
    let mut d: Decoder<32> = Decoder::new();
    let (frames, errors) = decode_all(&mut d, &[&big[..], &small].concat(), &[4]);
    assert_eq!(frames, [(FrameKind::Barrier, 5u64.to_le_bytes().to_vec())]);
    assert_eq!(errors[0], FrameError::Oversize { len: 100, max: 21 });
    assert_eq!(d.counters().oversize, 1);
    assert_eq!(d.max_body(), 21);
}

#[test]
fn the_largest_frame_fills_the_buffer_exactly() {
    let mut d: Decoder<32> = Decoder::new();
    let f = frame(FrameKind::Payload, &[3u8; 21]);
    assert_eq!(f.len(), 32);
    assert_eq!(d.feed(b"xyz"), 3);
    assert!(d.poll().is_none());
    assert_eq!(d.room(), 32);
    assert_eq!(d.feed(&f), 32);
    assert_eq!(d.feed(b"more"), 0, "full");
    assert_eq!(d.poll().unwrap().unwrap().body, &[3u8; 21]);
    assert_eq!(d.feed(b"more"), 4, "the frame left at this call");
}

#[test]
fn unknown_kinds_are_consumed_whole() {
    let mut f = frame(FrameKind::Barrier, &[0xA5, 0x5A, 0, 0, 0, 0, 0, 0]);
    f[2] = 9;
    let [c0, c1] = crc16(&f[2..5]).to_le_bytes();
    f[5] = c0;
    f[6] = c1;
    let n = f.len();
    let crc = crc32(&f[2..n - 4]).to_le_bytes();
    f[n - 4..].copy_from_slice(&crc);
    let next = frame(FrameKind::Barrier, &1u64.to_le_bytes());
    let mut d: Decoder<64> = Decoder::new();
    let (frames, errors) = decode_all(&mut d, &[&f[..], &next].concat(), &[1]);
    assert_eq!(errors, [FrameError::UnknownKind { found: 9 }]);
    assert_eq!(frames.len(), 1);
    assert_eq!(d.counters().unknown_kinds, 1);
    assert_eq!(d.counters().garbage_bytes, 0);
}

#[test]
fn a_kept_frame_comes_back_once_and_is_counted_once() {
    let bytes = stream(&sample());
    let mut d: Decoder<128> = Decoder::new();
    d.feed(&bytes[..60]);
    let first = d.poll().unwrap().unwrap().body.to_vec();
    d.keep();
    d.feed(&bytes[60..70]);
    assert_eq!(d.poll().unwrap().unwrap().body, &first[..]);
    assert_eq!(d.counters().frames, 1);
    d.keep();
    assert_eq!(d.poll().unwrap().unwrap().body, &first[..]);
    let second = d.poll().unwrap().unwrap();
    assert_eq!(second.kind, FrameKind::Payload);
    assert_eq!(d.counters().frames, 2);
}

#[test]
fn bodies_parse_by_kind() {
    let head = payload_head(CommId(3), PhysTag(-2));
    let body = [&head[..], b"xy"].concat();
    let f = Frame {
        kind: FrameKind::Payload,
        body: &body,
    };
    assert_eq!(
        f.payload(),
        Ok(PayloadFrame {
            comm: CommId(3),
            tag: PhysTag(-2),
            bytes: b"xy"
        })
    );
    assert_eq!(
        f.barrier(),
        Err(BodyError::WrongKind {
            expected: FrameKind::Barrier,
            found: FrameKind::Payload
        })
    );
    let short = Frame {
        kind: FrameKind::Payload,
        body: &body[..5],
    };
    assert_eq!(
        short.payload(),
        Err(BodyError::Length {
            kind: FrameKind::Payload,
            len: 5
        })
    );
    let b = Frame {
        kind: FrameKind::Barrier,
        body: &[0; 7],
    };
    assert!(b.barrier().is_err());
}

/// One way to damage the stream.
#[derive(Clone, Debug)]
enum Damage {
    Flip { at: usize, mask: u8 },
    Delete { at: usize, len: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Damage::Delete { at, len }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..40)
        )
            .prop_map(|(at, bytes)| Damage::Insert { at, bytes }),
    ]
}

fn kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![
        Just(FrameKind::Envelope),
        Just(FrameKind::Payload),
        Just(FrameKind::Barrier),
        Just(FrameKind::PayloadPart)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random damage never panics and never delivers a frame that was not sent: what is
    /// delivered is the sent frames, in order, with some missing; every loss that left a
    /// trace on the line is counted.
    #[test]
    fn random_damage_never_delivers_a_wrong_frame(
        sent in proptest::collection::vec(
            (kind(), proptest::collection::vec(any::<u8>(), 0..60)), 1..12),
        damages in proptest::collection::vec(damage(), 0..6),
        chunks in proptest::collection::vec(1usize..50, 1..5),
    ) {
        let mut bytes = stream(&sent);
        let clean = bytes.clone();
        for d in &damages {
            let n = bytes.len();
            match d {
                Damage::Flip { at, mask } if n > 0 => bytes[at % n] ^= mask,
                Damage::Delete { at, len } if n > 0 => {
                    let at = at % n;
                    bytes.drain(at..(at + len).min(n));
                }
                Damage::Insert { at, bytes: b } => {
                    let at = at % (n + 1);
                    bytes.splice(at..at, b.iter().copied());
                }
                _ => {}
            }
        }
        let mut d: Decoder<80> = Decoder::new();
        let (frames, _) = decode_all(&mut d, &bytes, &chunks);
        // A subsequence of what was sent, in order.
        let mut rest = sent.iter();
        for f in &frames {
            prop_assert!(rest.any(|s| s == f), "{f:?} was not sent (or came out of order)");
        }
        let c = *d.counters();
        prop_assert_eq!(c.frames, frames.len() as u64);
        if bytes == clean {
            prop_assert_eq!(&frames, &sent);
            prop_assert_eq!(c.failures(), 0);
            prop_assert_eq!((c.garbage_bytes, c.resyncs), (0, 0));
        }
        // Only a deletion can remove a whole frame without a trace.
        let deleted = damages.iter().any(|d| matches!(d, Damage::Delete { .. }));
        if frames.len() < sent.len() && !deleted {
            prop_assert!(c.failures() > 0 || c.garbage_bytes > 0, "a loss went uncounted");
        }
        prop_assert_eq!(d.buffered(), 0);
    }
}
