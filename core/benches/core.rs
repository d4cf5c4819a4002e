//! Benchmarks of the protocol core against naive `std` references, side by side.
//!
//! * `matcher/*`: one match (an envelope meets a posted receive) plus the re-post of that
//!   receive, with 1, 64 and 4096 live keys — Starling's fixed-capacity [`Matcher`]
//!   against a `HashMap<Key, VecDeque<_>>` matcher doing the same work.
//! * `matcher_fill/*`: a message on a new key each time (a receive posted on a new key,
//!   the envelope of the oldest one matched), as 100 000 outstanding messages of distinct
//!   tags make, with key tables of 1024 holding 512, 960 and 1023 live keys: the cost of a
//!   `heapless` index map as it fills (why a rank uses half of its key tables).
//! * `planner/*`: the task-insert planner for a 5-access stencil task and a Cholesky
//!   GEMM task — [`insert::plan`] against a straightforward `std` planner with hash-set
//!   caches and `Vec` outputs.
//! * `framing/*`: frame encoding and decoding (in 4 KiB chunks, and byte by byte as a
//!   UART delivers) of 64 KiB of payload in 64 B, 1 KiB and 4 KiB frames, against a plain
//!   copy of the same bytes.
//!
//! Run: `cargo bench -p starling-core --bench core` (figures in `docs/performance.md`).

use core::hint::black_box;
use std::collections::{HashMap, VecDeque};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use starling_core::lists::Key;
use starling_core::matcher::{Matcher, Unexpected, UnexpectedKind};
use starling_core::{CommId, MsgId, Rank, ReqId, Tag};

#[path = "core/framing.rs"]
mod framing;
#[path = "core/planner.rs"]
mod planner;

/// Live keys in the largest case; the matcher's capacities.
const MAX_KEYS: usize = 4096;
const KEY_CAP: usize = 8192;

fn key(i: usize) -> Key {
    Key::new(CommId::WORLD, Rank((i % 7) as u32), Tag(i as i64))
}

fn unexpected(i: usize) -> Unexpected {
    Unexpected {
        kind: UnexpectedKind::Data,
        msg: MsgId(i as u32),
        size: 64,
        internal: None,
    }
}

fn req(i: usize) -> ReqId {
    ReqId {
        index: i as u32,
        generation: 0,
    }
}

/// The naive reference: two hash maps of FIFO queues, one per side.
#[derive(Default)]
struct NaiveMatcher {
    recvs: HashMap<Key, VecDeque<ReqId>>,
    unexpected: HashMap<Key, VecDeque<Unexpected>>,
}

impl NaiveMatcher {
    fn post_recv(&mut self, k: Key, r: ReqId) -> Option<Unexpected> {
        if let Some(q) = self.unexpected.get_mut(&k) {
            let u = q.pop_front();
            if q.is_empty() {
                self.unexpected.remove(&k);
            }
            return u;
        }
        self.recvs.entry(k).or_default().push_back(r);
        None
    }

    fn arrive(&mut self, k: Key, u: Unexpected) -> Option<ReqId> {
        if let Some(q) = self.recvs.get_mut(&k) {
            let r = q.pop_front();
            if q.is_empty() {
                self.recvs.remove(&k);
            }
            return r;
        }
        self.unexpected.entry(k).or_default().push_back(u);
        None
    }
}

fn matcher(c: &mut Criterion) {
    let mut group = c.benchmark_group("matcher");
    const BATCH: usize = 4096;
    group.throughput(Throughput::Elements(BATCH as u64));
    for live in [1usize, 64, MAX_KEYS] {
        let keys: Vec<Key> = (0..live).map(key).collect();
        let mut m: Box<Matcher<KEY_CAP, KEY_CAP>> = Box::new(Matcher::new());
        for (i, k) in keys.iter().enumerate() {
            m.push_recv(*k, req(i)).expect("capacity");
        }
        group.bench_with_input(BenchmarkId::new("starling", live), &live, |b, _| {
            b.iter(|| {
                for i in 0..BATCH {
                    let k = keys[i % live];
                    let r = m.arrive(k, unexpected(i)).expect("room");
                    let back = m.post_recv(k, r.expect("a posted receive")).expect("room");
                    black_box(back);
                }
            });
        });
        let mut n = NaiveMatcher::default();
        for (i, k) in keys.iter().enumerate() {
            n.post_recv(*k, req(i));
        }
        group.bench_with_input(BenchmarkId::new("naive_std", live), &live, |b, _| {
            b.iter(|| {
                for i in 0..BATCH {
                    let k = keys[i % live];
                    let r = n.arrive(k, unexpected(i));
                    let back = n.post_recv(k, r.expect("a posted receive"));
                    black_box(back);
                }
            });
        });
    }
    group.finish();
}

/// A key of one source, as a run of tags from one peer makes.
fn one_source_key(i: usize) -> Key {
    Key::new(CommId::WORLD, Rank(0), Tag(i as i64))
}

fn matcher_fill(c: &mut Criterion) {
    let mut group = c.benchmark_group("matcher_fill");
    const BATCH: usize = 4096;
    group.throughput(Throughput::Elements(BATCH as u64));
    for live in [512usize, 960, 1023] {
        let mut m: Box<Matcher<1024, 4096>> = Box::new(Matcher::new());
        for i in 0..live {
            m.push_recv(one_source_key(i), req(i)).expect("capacity");
        }
        // Keys oldest..next are posted.
        let (mut oldest, mut next) = (0usize, live);
        group.bench_with_input(BenchmarkId::new("starling", live), &live, |b, _| {
            b.iter(|| {
                for _ in 0..BATCH {
                    m.push_recv(one_source_key(next), req(next % 4096))
                        .expect("room");
                    next += 1;
                    let r = m
                        .arrive(one_source_key(oldest), unexpected(oldest))
                        .expect("room");
                    oldest += 1;
                    black_box(r);
                }
            });
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    matcher,
    matcher_fill,
    planner::planner,
    framing::framing
);
criterion_main!(benches);
