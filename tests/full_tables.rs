//! A full table is a wait, never a failure, a hang or a disagreement (`DESIGN.md`, rule
//! 2; issue 17, item 2).
//!
//! Every rank runs with the smallest protocol-engine tables (`Tables::TINY`: 4 requests,
//! 2 match keys) and every workload outgrows them a thousand times over: what does not
//! fit waits in the progression thread — submissions in order per direction, refused
//! envelopes in order per key — and goes in when room frees. Each workload must complete
//! with every value right and nothing left at shutdown. A watchdog turns a hang into a
//! failed test instead of a stuck suite.

use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;
use std::sync::Arc;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{AnyHandle, ClusterConfig, Context, Handle, RuntimeConfig, Tables, run_local_with};

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            ..RuntimeConfig::default()
        },
        tables: Tables::TINY,
        watchdog: Some(Duration::from_secs(60)),
        ..ClusterConfig::default()
    }
}

fn run<R: Send + 'static>(f: impl Fn(&Context) -> R + Send + Sync + 'static) -> Vec<R> {
    run_local_with(2, config(), f).expect("a clean shutdown: nothing left behind")
}

fn value(ctx: &Context, h: &Handle<Variable<u64>>) -> u64 {
    ctx.acquire(h, AccessMode::R).get().get()
}

#[test]
fn detached_receives_posted_before_their_sends_wait_for_room_instead_of_failing() {
    const N: u64 = 5_000;
    let out = run(|ctx| {
        if ctx.rank() == Rank(1) {
            let hs: Vec<_> = (0..N)
                .map(|_| ctx.register(Variable::new(u64::MAX)))
                .collect();
            for (i, h) in hs.iter().enumerate() {
                ctx.recv(h, Rank(0), Tag(i as i64))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.barrier();
            ctx.wait_for_all();
            hs.iter()
                .enumerate()
                .all(|(i, h)| value(ctx, h) == i as u64 * 3)
        } else {
            ctx.barrier();
            for i in 0..N {
                let h = ctx.register(Variable::new(i * 3));
                ctx.send(&h, Rank(1), Tag(i as i64))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.wait_for_all();
            true
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn eager_messages_received_in_the_reverse_order_of_their_arrival() {
    const N: u64 = 1_100;
    let out = run(|ctx| {
        if ctx.rank() == Rank(0) {
            for i in 0..N {
                let h = ctx.register(Variable::new(i + 7));
                ctx.send(&h, Rank(1), Tag(i as i64))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.wait_for_all();
            ctx.barrier();
            true
        } else {
            ctx.barrier();
            let h = ctx.register(Variable::new(0u64));
            (0..N).rev().all(|i| {
                ctx.recv(&h, Rank(0), Tag(i as i64)).wait().unwrap();
                value(ctx, &h) == i + 7
            })
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn messages_on_one_tag_received_after_they_arrived_keep_their_order() {
    const N: u64 = 4_200;
    let out = run(|ctx| {
        if ctx.rank() == Rank(0) {
            for i in 0..N {
                let h = ctx.register(Variable::new(i));
                ctx.send(&h, Rank(1), Tag(5))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.wait_for_all();
            ctx.barrier();
            true
        } else {
            ctx.barrier();
            let h = ctx.register(Variable::new(u64::MAX));
            (0..N).all(|i| {
                ctx.recv(&h, Rank(0), Tag(5)).wait().unwrap();
                value(ctx, &h) == i
            })
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn isend_irecv_pairs_posted_at_once_all_complete() {
    // Every receive is posted before any send, on both ranks: the receives fill their
    // share of the slab and wait; the sends have their own share and go on.
    const N: u64 = 50_000;
    let out = run(|ctx| {
        let me = u64::from(ctx.rank().0);
        let peer = Rank(1 - ctx.rank().0);
        let ins: Vec<_> = (0..N)
            .map(|_| ctx.register(Variable::new(u64::MAX)))
            .collect();
        let outs: Vec<_> = (0..N)
            .map(|i| ctx.register(Variable::new(i * 2 + me)))
            .collect();
        let recvs: Vec<_> = ins
            .iter()
            .enumerate()
            .map(|(i, h)| ctx.recv(h, peer, Tag(i as i64)).start().unwrap())
            .collect();
        let sends: Vec<_> = outs
            .iter()
            .enumerate()
            .map(|(i, h)| ctx.send(h, peer, Tag(i as i64)).start().unwrap())
            .collect();
        for r in recvs.into_iter().chain(sends) {
            r.wait().unwrap();
        }
        let other = 1 - me;
        ins.iter()
            .enumerate()
            .all(|(i, h)| value(ctx, h) == i as u64 * 2 + other)
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn a_message_refused_for_one_key_does_not_hold_back_another_key() {
    // 100 messages of tag 1 arrive first and are not received yet: they fill the early
    // buffers and are refused. The message of tag 2 behind them is received at once.
    let out = run(|ctx| {
        if ctx.rank() == Rank(0) {
            for i in 0..100u64 {
                let h = ctx.register(Variable::new(i));
                ctx.send(&h, Rank(1), Tag(1))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.wait_for_all();
            let h = ctx.register(Variable::new(1_000u64));
            ctx.send(&h, Rank(1), Tag(2)).wait().unwrap();
            true
        } else {
            let h = ctx.register(Variable::new(0u64));
            ctx.recv(&h, Rank(0), Tag(2)).wait().unwrap();
            let mut ok = value(ctx, &h) == 1_000;
            for i in 0..100u64 {
                ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
                ok &= value(ctx, &h) == i;
            }
            ok
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn a_full_cache_pair_stops_caching_on_both_of_its_ranks() {
    // Three ranks, a cache bound of 2 entries per (owner, reader) pair: rank 0 reads 10
    // data of rank 1 and 10 of rank 2, twice. The first 2 of each pair are cached (the
    // second read sends nothing), the others are sent again, and both ranks of each pair
    // always agree on which.
    const N: usize = 10;
    let out = run_local_with(3, config(), |ctx| {
        ctx.set_cache_pair_limit(2);
        let data: Vec<Vec<Handle<Variable<u64>>>> = (1..3u32)
            .map(|o| {
                (0..N)
                    .map(|k| {
                        let tag = i64::from(o) * 100 + k as i64;
                        ctx.register_owned(Tag(tag), Owner::Rank(Rank(o)), move || {
                            Variable::new(u64::from(o) * 1_000 + k as u64)
                        })
                        .unwrap()
                    })
                    .collect()
            })
            .collect();
        let sum = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(0u64))
            .unwrap();
        let add = starling::Codelet::new("add", |b| {
            let v = b.r::<Variable<u64>>(1).get();
            let s = b.r::<Variable<u64>>(0).get();
            b.w::<Variable<u64>>(0).set(s + v);
        });
        for _ in 0..2 {
            for h in data.iter().flatten() {
                ctx.insert(&add).rw(&sum).r(h).submit().unwrap();
            }
        }
        ctx.mpi_wait_for_all().unwrap();
        // What this rank's cache says of each datum, as owner (sent to rank 0) or reader.
        let me = ctx.rank();
        let cached: Vec<bool> = data
            .iter()
            .flatten()
            .map(|h| {
                if me == Rank(0) {
                    ctx.cached_receive(h)
                } else {
                    ctx.cached_send(h, Rank(0))
                }
            })
            .collect();
        let total = (me == Rank(0)).then(|| value(ctx, &sum));
        (cached, total)
    })
    .expect("a clean shutdown");
    let expected: u64 = 2
        * (1..3u64)
            .map(|o| (0..N as u64).map(|k| o * 1_000 + k).sum::<u64>())
            .sum::<u64>();
    assert_eq!(out[0].1, Some(expected));
    for o in 1..3usize {
        let reader = &out[0].0[(o - 1) * N..o * N];
        let owner = &out[o].0[(o - 1) * N..o * N];
        assert_eq!(
            reader, owner,
            "rank 0 and rank {o} disagree on their cached pairs"
        );
        assert_eq!(reader.iter().filter(|c| **c).count(), 2);
    }
}

#[test]
fn a_gather_then_a_scatter_of_ten_thousand_handles_completes_right() {
    // The whole grid in one call each way, every transfer past the tables waiting.
    const N: usize = 10_000;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let out = run(move |ctx| {
        let me = ctx.rank();
        let hs: Vec<Handle<Variable<u64>>> = (0..N)
            .map(|i| {
                let owner = Rank((i % 2) as u32);
                let v = if owner == me { i as u64 } else { u64::MAX };
                let h = ctx.register(Variable::new(v));
                ctx.mpi_register(&h, Tag(i as i64), Owner::Rank(owner))
                    .unwrap();
                h
            })
            .collect();
        let any: Vec<AnyHandle> = hs.iter().map(AnyHandle::from).collect();
        let (a, b) = (Arc::clone(&seen), Arc::clone(&seen));
        ctx.gather_detached(
            &any,
            Rank(0),
            move || {
                a.fetch_add(1, Ordering::SeqCst);
            },
            move || {
                b.fetch_add(1, Ordering::SeqCst);
            },
        )
        .unwrap();
        ctx.try_wait_for_all().unwrap();
        let gathered = me != Rank(0)
            || hs
                .iter()
                .enumerate()
                .all(|(i, h)| value(ctx, h) == i as u64);
        // Rank 0 changes every value, then scatters them back to their owners.
        if me == Rank(0) {
            for h in &hs {
                let v = value(ctx, h);
                ctx.acquire(h, AccessMode::W).get_mut().set(v + 1);
            }
        }
        ctx.scatter_detached(&any, Rank(0), || {}, || {}).unwrap();
        ctx.try_wait_for_all().unwrap();
        let scattered = hs
            .iter()
            .enumerate()
            .filter(|(i, _)| Rank((i % 2) as u32) == me)
            .all(|(i, h)| value(ctx, h) == i as u64 + 1);
        gathered && scattered
    });
    assert_eq!(out, vec![true, true]);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one callback per rank");
}

/// A receive too small for its message, holding the last receive slot of the tiny budget
/// beside another posted receive: it fails with a size mismatch, its payload is drained
/// into a discard buffer outside the budget, and the flow goes on. Before, the discard
/// buffer needed a slot of the budget that only that receive's completion could free: the
/// envelope was refused for ever and both ranks hung (found by the `admission_sim` fuzz
/// target).
#[test]
fn a_receive_too_small_for_its_message_with_the_budget_full_fails_and_the_flow_goes_on() {
    let out = run(|ctx| {
        if ctx.rank() == Rank(1) {
            let big = ctx.register(Vector::from_vec(vec![0u8; 1000]));
            let small = ctx.register(Vector::from_vec(vec![0u8; 8]));
            let a = ctx.recv(&big, Rank(0), Tag(1)).start().unwrap();
            let b = ctx.recv(&small, Rank(0), Tag(2)).start().unwrap();
            ctx.barrier();
            let truncated = b.wait().is_err();
            a.wait().unwrap();
            let got = ctx.unregister(big);
            truncated && got.as_slice().iter().all(|v| *v == 7)
        } else {
            ctx.barrier();
            // Beyond the eager limit: the payload travels apart from its envelope.
            let long = ctx.register(Vector::from_vec(vec![5u8; 64 << 10]));
            ctx.send(&long, Rank(1), Tag(2)).wait().unwrap();
            let h = ctx.register(Vector::from_vec(vec![7u8; 1000]));
            ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
            true
        }
    });
    assert_eq!(out, vec![true, true]);
}
