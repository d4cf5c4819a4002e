//! Framing throughput: encoding a stream of frames, and decoding it in 4 KiB chunks (as
//! the host side reads a socket) and one byte at a time (as the embedded link reads a
//! UART), against a plain copy of the same bytes measured in the same run.

use core::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput};
use starling_core::framing::{self, Decoder, FrameKind};

/// Bytes of payload per measured batch, whatever the frame size.
const BATCH: usize = 64 * 1024;

/// The decoder's capacity: room for the largest body measured.
const CAP: usize = 4096 + framing::OVERHEAD;

pub(crate) fn framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing");
    for body in [64usize, 1024, 4096] {
        let frames = BATCH / body;
        let payload: Vec<u8> = (0..body).map(|i| (i * 7 + 3) as u8).collect();
        let mut wire = vec![0u8; frames * framing::frame_len(body)];
        let mut at = 0;
        for _ in 0..frames {
            at += framing::encode(FrameKind::Payload, &[&payload], &mut wire[at..]).expect("room");
        }
        group.throughput(Throughput::Bytes(wire.len() as u64));

        let mut out = vec![0u8; wire.len()];
        group.bench_with_input(BenchmarkId::new("encode", body), &body, |b, _| {
            b.iter(|| {
                let mut at = 0;
                for _ in 0..frames {
                    at +=
                        framing::encode(FrameKind::Payload, &[black_box(&payload)], &mut out[at..])
                            .expect("room");
                }
                black_box(&out);
            });
        });

        let mut decoder: Box<Decoder<CAP>> = Box::new(Decoder::new());
        let check = |d: &mut Decoder<CAP>, got: &mut usize| {
            while let Some(r) = d.poll() {
                *got += black_box(r.expect("a clean stream").body.len());
            }
        };
        group.bench_with_input(BenchmarkId::new("decode_chunks", body), &body, |b, _| {
            b.iter(|| {
                let mut got = 0;
                for chunk in wire.chunks(4096) {
                    let mut rest = chunk;
                    while !rest.is_empty() {
                        let n = decoder.feed(rest);
                        rest = &rest[n..];
                        check(&mut decoder, &mut got);
                    }
                }
                assert_eq!(got, frames * body);
            });
        });
        group.bench_with_input(BenchmarkId::new("decode_bytes", body), &body, |b, _| {
            b.iter(|| {
                let mut got = 0;
                for &byte in &wire {
                    decoder.feed(&[byte]);
                    check(&mut decoder, &mut got);
                }
                assert_eq!(got, frames * body);
            });
        });
        group.bench_with_input(BenchmarkId::new("memcpy", body), &body, |b, _| {
            b.iter(|| {
                out.copy_from_slice(black_box(&wire));
                black_box(&out);
            });
        });
    }
    group.finish();
}
