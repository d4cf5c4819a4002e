use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::insert::{self, Execute, Options, Plan};
use crate::select::Policies;
use crate::types::{AccessMode, Tag};

type B = Budget<16, 8>;

const O: Rank = Rank(0);
const X: Rank = Rank(1);

fn received(data: u32) -> CacheUpdate {
    CacheUpdate::ReceivedSet { data: DataId(data) }
}

/// Counts a received copy of `data` (owner `O`) on reader `X`; returns what was dropped.
fn receive(b: &mut B, cache: &mut Cache<16>, data: u32, size: u64) -> Vec<DataId> {
    let u = received(data);
    cache.apply_from(&u, Some(O)).unwrap();
    let mut dropped = Vec::new();
    b.on_update(X, &u, Some(O), Some(size), cache, |d| dropped.push(d))
        .unwrap();
    dropped
}

#[test]
fn unbounded_counts_nothing() {
    let (mut b, mut c) = (B::new(), Cache::new());
    assert!(receive(&mut b, &mut c, 1, 1000).is_empty());
    assert!(b.is_empty());
    assert!(c.cached_receive(DataId(1)));
}

#[test]
fn past_the_bound_the_least_recently_used_copies_go_first() {
    let (mut b, mut c) = (B::new(), Cache::new());
    b.set_limit(Some(100));
    assert!(receive(&mut b, &mut c, 1, 40).is_empty());
    assert!(receive(&mut b, &mut c, 2, 40).is_empty());
    assert_eq!(b.bytes(O, X), 80);
    // Datum 1 is read again by a task on the reader: 2 is now the oldest.
    let read = Access::new(DataId(1), AccessMode::R, Owner::Rank(O), Tag(1), 40);
    b.touch_reads(X, X, &[read]);
    assert_eq!(receive(&mut b, &mut c, 3, 40), [DataId(2)]);
    assert!(!c.cached_receive(DataId(2)) && c.cached_receive(DataId(1)));
    assert_eq!(b.bytes(O, X), 80);
    // One copy larger than the bound evicts the others, never itself.
    assert_eq!(receive(&mut b, &mut c, 4, 500), [DataId(1), DataId(3)]);
    assert!(b.holds(O, X, DataId(4)) && c.cached_receive(DataId(4)));
    assert_eq!(b.bytes(O, X), 500);
}

#[test]
fn the_owner_clears_its_sent_flag_for_that_reader_only() {
    let (mut b, mut c) = (B::new(), Cache::<16>::new());
    b.set_limit(Some(50));
    for (data, dest) in [(1, Rank(1)), (1, Rank(2)), (2, Rank(1))] {
        let u = CacheUpdate::SentSet {
            data: DataId(data),
            dest,
        };
        c.apply(&u).unwrap();
        b.on_update(O, &u, None, Some(30), &mut c, |_| panic!("no copy here"))
            .unwrap();
    }
    assert!(!c.cached_send(DataId(1), Rank(1)), "evicted in pair (0, 1)");
    assert!(c.cached_send(DataId(1), Rank(2)), "pair (0, 2) is its own");
    assert!(c.cached_send(DataId(2), Rank(1)));
    assert_eq!((b.bytes(O, Rank(1)), b.bytes(O, Rank(2))), (30, 30));
}

#[test]
fn a_write_or_a_flush_forgets_the_datum_in_every_pair() {
    let (mut b, mut c) = (B::new(), Cache::<16>::new());
    b.set_limit(Some(1000));
    for dest in 1..4 {
        let u = CacheUpdate::SentSet {
            data: DataId(7),
            dest: Rank(dest),
        };
        c.apply(&u).unwrap();
        b.on_update(O, &u, None, Some(10), &mut c, |_| {}).unwrap();
    }
    assert_eq!(b.len(), 3);
    let inv = CacheUpdate::Invalidate { data: DataId(7) };
    c.apply(&inv).unwrap();
    b.on_update(O, &inv, None, None, &mut c, |_| {}).unwrap();
    assert!(b.is_empty());
    assert_eq!(b.bytes(O, Rank(2)), 0);
    // Slots are reused.
    assert!(receive(&mut b, &mut c, 8, 10).is_empty());
    b.forget(DataId(8));
    assert!(b.is_empty());
}

#[test]
fn a_copy_counted_again_moves_to_the_recent_end_with_its_new_size() {
    let (mut b, mut c) = (B::new(), Cache::new());
    b.set_limit(Some(100));
    receive(&mut b, &mut c, 1, 30);
    receive(&mut b, &mut c, 2, 30);
    receive(&mut b, &mut c, 1, 50);
    assert_eq!(b.bytes(O, X), 80);
    assert_eq!(receive(&mut b, &mut c, 3, 30), [DataId(2)]);
}

#[test]
fn a_full_budget_is_an_error_that_changes_nothing() {
    let mut b = Budget::<2, 2>::new();
    let mut c = Cache::<16>::new();
    b.set_limit(Some(1 << 20));
    for data in 0..2 {
        let u = received(data);
        c.apply_from(&u, Some(O)).unwrap();
        b.on_update(X, &u, Some(O), Some(1), &mut c, |_| {})
            .unwrap();
    }
    let u = received(9);
    assert_eq!(
        b.on_update(X, &u, Some(O), Some(1), &mut c, |_| {}),
        Err(Full::new(Table::Cache, DataId(9)))
    );
    assert_eq!((b.len(), b.bytes(O, X)), (2, 2));
}

/// One rank of a world: its cache and budget, as the insert-task runtime keeps them.
struct Rank_ {
    cache: Cache<64>,
    budget: Budget<128, 8>,
}

/// Plans `accesses` on `executor` on every rank, applies the updates as the runtime
/// does (flags, then counts, touches), and checks the pairs agree.
fn step(world: &mut [Rank_], accesses: &[Access], executor: u32, sizes: &[u64], owners: &[u32]) {
    let n = world.len() as u32;
    let owners_of = |d: DataId| owners[d.0 as usize];
    let options = Options {
        execute: Execute::OnNode(Rank(executor)),
        ..Options::default()
    };
    for (me, r) in world.iter_mut().enumerate() {
        let me = Rank(me as u32);
        let plan: Plan<16> =
            insert::plan(me, n, accesses, &options, &Policies::new(), &r.cache).unwrap();
        for u in &plan.cache {
            let data = match *u {
                CacheUpdate::SentSet { data, .. }
                | CacheUpdate::ReceivedSet { data }
                | CacheUpdate::Invalidate { data }
                | CacheUpdate::DropCopy { data } => data,
            };
            let owner = accesses
                .iter()
                .find(|a| a.data == data)
                .and_then(|a| match a.owner {
                    Owner::Rank(o) => Some(o),
                    Owner::PerNode => None,
                });
            r.cache.apply_from(u, owner).unwrap();
            let size = Some(sizes[data.0 as usize]);
            r.budget
                .on_update(me, u, owner, size, &mut r.cache, |_| {})
                .unwrap();
        }
        r.budget.touch_reads(me, Rank(executor), accesses);
    }
    // The cache's invariant holds, and both ranks of each pair count the same copies.
    let data = sizes.len() as u32;
    for o in 0..n {
        for x in (0..n).filter(|&x| x != o) {
            for d in 0..data {
                let d = DataId(d);
                let (ro, rx) = (&world[o as usize], &world[x as usize]);
                if owners_of(d) == o {
                    assert_eq!(
                        ro.cache.cached_send(d, Rank(x)),
                        rx.cache.cached_receive(d),
                        "{d} {o} -> {x}: the flags disagree"
                    );
                }
                assert_eq!(
                    ro.budget.holds(Rank(o), Rank(x), d),
                    rx.budget.holds(Rank(o), Rank(x), d),
                    "{d} in pair ({o}, {x})"
                );
            }
            assert_eq!(
                world[o as usize].budget.bytes(Rank(o), Rank(x)),
                world[x as usize].budget.bytes(Rank(o), Rank(x))
            );
            let limit = world[o as usize].budget.limit().unwrap();
            let bytes = world[o as usize].budget.bytes(Rank(o), Rank(x));
            let largest = sizes.iter().copied().max().unwrap_or(0);
            assert!(bytes <= limit.max(largest), "pair ({o}, {x}) holds {bytes}");
        }
    }
}

proptest! {
    /// Any flow of tasks, each reading and writing data of any owners on any executor:
    /// the owner and the reader of every pair evict the same copies at the same point,
    /// so the sent and received flags never disagree.
    #[test]
    fn both_ranks_of_a_pair_evict_the_same_copies(
        owners in proptest::collection::vec(0u32..3, 6),
        sizes in proptest::collection::vec(1u64..60, 6),
        limit in 1u64..150,
        flow in proptest::collection::vec(
            (0u32..3, proptest::collection::vec((0u32..6, 0u8..4), 1..4)),
            1..40,
        ),
    ) {
        let mut world: Vec<Rank_> = (0..3)
            .map(|_| {
                let mut budget = Budget::new();
                budget.set_limit(Some(limit));
                Rank_ { cache: Cache::new(), budget }
            })
            .collect();
        for (executor, items) in flow {
            let mut accesses: Vec<Access> = Vec::new();
            for (d, m) in items {
                if accesses.iter().any(|a| a.data == DataId(d)) {
                    continue;
                }
                let mode = match m {
                    0 | 1 => AccessMode::R,
                    2 => AccessMode::W,
                    _ => AccessMode::RW,
                };
                accesses.push(Access::new(
                    DataId(d),
                    mode,
                    Owner::Rank(Rank(owners[d as usize])),
                    Tag(i64::from(d)),
                    sizes[d as usize],
                ));
            }
            step(&mut world, &accesses, executor, &sizes, &owners);
        }
    }
}

#[test]
fn a_copy_read_again_is_kept_on_both_ranks_of_its_pair() {
    let owners = [0, 0, 0];
    let sizes = [40, 40, 40];
    let mut world: Vec<Rank_> = (0..2)
        .map(|_| {
            let mut budget = Budget::new();
            budget.set_limit(Some(100));
            Rank_ {
                cache: Cache::new(),
                budget,
            }
        })
        .collect();
    let read = |d: u32| {
        [Access::new(
            DataId(d),
            AccessMode::R,
            Owner::Rank(O),
            Tag(i64::from(d)),
            40,
        )]
    };
    for d in [0, 1, 0, 2] {
        step(&mut world, &read(d), 1, &sizes, &owners);
    }
    // Datum 0, read again, stayed; datum 1 went, on both ranks.
    assert!(world[1].cache.cached_receive(DataId(0)));
    assert!(!world[1].cache.cached_receive(DataId(1)));
    assert!(world[0].cache.cached_send(DataId(0), X));
    assert!(!world[0].cache.cached_send(DataId(1), X));
}
