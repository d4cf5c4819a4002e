use std::collections::BTreeSet;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

/// Operations per model-test case: fewer under Miri, which interprets every step.
const MAX_OPS: usize = if cfg!(miri) { 12 } else { 80 };

const D0: DataId = DataId(0);
const D1: DataId = DataId(1);

fn collect_flush_all<const N: usize>(cache: &mut Cache<N>) -> Vec<DataId> {
    let mut dropped = Vec::new();
    cache.flush_all(|d| dropped.push(d));
    dropped.sort();
    dropped
}

#[test]
fn new_cache_is_enabled_and_empty() {
    let c = Cache::<8>::new();
    assert!(c.is_enabled());
    assert_eq!((c.len_sent(), c.len_received()), (0, 0));
    assert!(!c.cached_send(D0, Rank(1)));
    assert!(!c.cached_receive(D0));
}

#[test]
fn an_owner_change_clears_every_flag_of_the_datum_only() {
    let mut c = Cache::<8>::new();
    c.set_sent(D0, Rank(1)).unwrap();
    c.set_sent(D0, Rank(2)).unwrap();
    c.set_received(D0).unwrap();
    c.set_sent(D1, Rank(1)).unwrap();
    c.set_received(D1).unwrap();
    c.on_owner_change(D0);
    assert!(!c.cached_send(D0, Rank(1)) && !c.cached_send(D0, Rank(2)));
    assert!(!c.cached_receive(D0));
    assert!(c.cached_send(D1, Rank(1)) && c.cached_receive(D1));
    assert_eq!((c.len_sent(), c.len_received()), (1, 1));
}

#[test]
fn set_sent_returns_the_previous_flag_per_destination() {
    let mut c = Cache::<8>::new();
    assert_eq!(c.set_sent(D0, Rank(1)), Ok(false));
    assert_eq!(c.set_sent(D0, Rank(1)), Ok(true));
    assert_eq!(c.set_sent(D0, Rank(2)), Ok(false));
    assert!(c.cached_send(D0, Rank(1)) && c.cached_send(D0, Rank(2)));
    assert!(!c.cached_send(D0, Rank(3)) && !c.cached_send(D1, Rank(1)));
    assert_eq!(c.len_sent(), 2);
}

#[test]
fn set_received_returns_the_previous_flag() {
    let mut c = Cache::<8>::new();
    assert_eq!(c.set_received(D0), Ok(false));
    assert_eq!(c.set_received(D0), Ok(true));
    assert!(c.cached_receive(D0) && !c.cached_receive(D1));
}

#[test]
fn clear_sent_forgets_every_destination_of_that_datum_only() {
    let mut c = Cache::<8>::new();
    for r in 1..4 {
        c.set_sent(D0, Rank(r)).unwrap();
    }
    c.set_sent(D1, Rank(1)).unwrap();
    c.clear_sent(D0);
    assert_eq!(c.len_sent(), 1);
    assert!(c.cached_send(D1, Rank(1)));
    assert!(!c.cached_send(D0, Rank(2)));
}

#[test]
fn clear_received_says_whether_a_copy_must_be_dropped() {
    let mut c = Cache::<8>::new();
    c.set_received(D0).unwrap();
    assert!(c.clear_received(D0));
    assert!(!c.clear_received(D0));
    assert!(!c.cached_receive(D0));
}

#[test]
fn flush_clears_both_flags_and_non_owners_drop_their_copy() {
    let mut c = Cache::<8>::new();
    c.set_sent(D0, Rank(2)).unwrap();
    c.set_received(D0).unwrap();
    c.set_received(D1).unwrap();
    let f = c.flush(D0, Rank(1), Owner::Rank(Rank(0)));
    assert!(f.drop_local_copy);
    assert!(!c.cached_send(D0, Rank(2)) && !c.cached_receive(D0));
    assert!(c.cached_receive(D1));
    // The owner keeps its copy; so does every rank for a per-node datum.
    assert!(!c.flush(D1, Rank(1), Owner::Rank(Rank(1))).drop_local_copy);
    assert!(!c.flush(D1, Rank(1), Owner::PerNode).drop_local_copy);
    // As in the reference, a non-owner drops its copy even without a recorded one (it may
    // hold a value it computed).
    assert!(c.flush(D1, Rank(1), Owner::Rank(Rank(3))).drop_local_copy);
}

#[test]
fn flush_all_reports_the_received_copies_and_empties_the_cache() {
    let mut c = Cache::<8>::new();
    c.set_sent(D0, Rank(1)).unwrap();
    c.set_received(D1).unwrap();
    c.set_received(DataId(5)).unwrap();
    assert_eq!(collect_flush_all(&mut c), [D1, DataId(5)]);
    assert_eq!((c.len_sent(), c.len_received()), (0, 0));
    assert!(c.is_enabled());
}

/// The reference example `cache/cache_disable`: a cached copy is forgotten when the cache is
/// disabled, and nothing is cached afterwards.
#[test]
fn disabling_flushes_everything_and_records_nothing_after() {
    let mut c = Cache::<8>::new();
    c.set_received(D0).unwrap();
    c.set_sent(D1, Rank(1)).unwrap();
    let mut dropped = Vec::new();
    c.set_enabled(false, |d| dropped.push(d));
    assert_eq!(dropped, [D0]);
    assert!(!c.is_enabled() && !c.cached_receive(D0) && !c.cached_send(D1, Rank(1)));

    assert_eq!(c.set_received(D0), Ok(false));
    assert_eq!(c.set_received(D0), Ok(false));
    assert_eq!(c.set_sent(D1, Rank(1)), Ok(false));
    assert!(!c.cached_receive(D0) && !c.cached_send(D1, Rank(1)));
    assert_eq!((c.len_sent(), c.len_received()), (0, 0));
    assert!(!c.flush(D0, Rank(1), Owner::Rank(Rank(0))).drop_local_copy);
    assert!(collect_flush_all(&mut c).is_empty());

    c.set_enabled(true, |_| panic!("enabling drops nothing"));
    assert_eq!(c.set_received(D0), Ok(false));
    assert!(c.cached_receive(D0));
}

#[test]
fn a_full_set_hands_the_entry_back_and_changes_nothing() {
    let mut c = Cache::<2>::new();
    c.set_sent(D0, Rank(1)).unwrap();
    c.set_sent(D0, Rank(2)).unwrap();
    let err = c.set_sent(D0, Rank(3)).unwrap_err();
    assert_eq!((err.table, err.item), (Table::Cache, (D0, Rank(3))));
    // An entry already present still answers.
    assert_eq!(c.set_sent(D0, Rank(2)), Ok(true));
    assert_eq!(c.len_sent(), 2);

    c.set_received(D0).unwrap();
    c.set_received(D1).unwrap();
    let err = c.set_received(DataId(9)).unwrap_err();
    assert_eq!((err.table, err.item), (Table::Cache, DataId(9)));
    assert!(!c.cached_receive(DataId(9)));
}

#[test]
fn apply_performs_each_update_and_says_when_to_drop_a_copy() {
    let mut c = Cache::<8>::new();
    assert_eq!(
        c.apply(&CacheUpdate::SentSet {
            data: D0,
            dest: Rank(1)
        }),
        Ok(false)
    );
    assert_eq!(c.apply(&CacheUpdate::ReceivedSet { data: D1 }), Ok(false));
    assert!(c.cached_send(D0, Rank(1)) && c.cached_receive(D1));
    assert_eq!(c.apply(&CacheUpdate::Invalidate { data: D0 }), Ok(false));
    assert!(!c.cached_send(D0, Rank(1)));
    assert_eq!(c.apply(&CacheUpdate::Invalidate { data: D1 }), Ok(true));
    assert!(!c.cached_receive(D1));
    assert_eq!(c.apply(&CacheUpdate::DropCopy { data: D1 }), Ok(true));
}

#[test]
fn apply_on_a_full_cache_hands_the_update_back() {
    let mut c = Cache::<2>::new();
    c.set_received(D0).unwrap();
    c.set_received(D1).unwrap();
    let update = CacheUpdate::ReceivedSet { data: DataId(7) };
    let err = c.apply(&update).unwrap_err();
    assert_eq!((err.table, err.item), (Table::Cache, update));
}

#[derive(Clone, Copy, Debug)]
enum Op {
    SetSent(u32, u32),
    SetReceived(u32),
    ClearSent(u32),
    ClearReceived(u32),
    Flush(u32, u32),
    FlushAll,
    Enable(bool),
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..6, 0u32..4).prop_map(|(d, r)| Op::SetSent(d, r)),
        4 => (0u32..6).prop_map(Op::SetReceived),
        1 => (0u32..6).prop_map(Op::ClearSent),
        1 => (0u32..6).prop_map(Op::ClearReceived),
        1 => (0u32..6, 0u32..4).prop_map(|(d, o)| Op::Flush(d, o)),
        1 => Just(Op::FlushAll),
        1 => any::<bool>().prop_map(Op::Enable),
    ]
}

/// A simple model of the cache: two ordered sets and a switch, capacity 8 each.
#[derive(Default)]
struct Model {
    disabled: bool,
    sent: BTreeSet<(u32, u32)>,
    received: BTreeSet<u32>,
}

proptest! {
    #[test]
    fn cache_behaves_like_two_sets(ops in prop::collection::vec(any_op(), 0..MAX_OPS)) {
        const ME: Rank = Rank(1);
        let mut c = Cache::<8>::new();
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::SetSent(d, r) => {
                    let got = c.set_sent(DataId(d), Rank(r));
                    let want = if m.disabled {
                        Ok(false)
                    } else if m.sent.contains(&(d, r)) {
                        Ok(true)
                    } else if m.sent.len() == 8 {
                        Err(Full::new(Table::Cache, (DataId(d), Rank(r))))
                    } else {
                        m.sent.insert((d, r));
                        Ok(false)
                    };
                    prop_assert_eq!(got, want);
                }
                Op::SetReceived(d) => {
                    let got = c.set_received(DataId(d));
                    let want = if m.disabled {
                        Ok(false)
                    } else if m.received.contains(&d) {
                        Ok(true)
                    } else if m.received.len() == 8 {
                        Err(Full::new(Table::Cache, DataId(d)))
                    } else {
                        m.received.insert(d);
                        Ok(false)
                    };
                    prop_assert_eq!(got, want);
                }
                Op::ClearSent(d) => {
                    c.clear_sent(DataId(d));
                    m.sent.retain(|(x, _)| *x != d);
                }
                Op::ClearReceived(d) => {
                    prop_assert_eq!(c.clear_received(DataId(d)), m.received.remove(&d));
                }
                Op::Flush(d, o) => {
                    let f = c.flush(DataId(d), ME, Owner::Rank(Rank(o)));
                    prop_assert_eq!(f.drop_local_copy, !m.disabled && o != ME.0);
                    m.sent.retain(|(x, _)| *x != d);
                    m.received.remove(&d);
                }
                Op::FlushAll => {
                    let got: BTreeSet<u32> = collect_flush_all(&mut c).iter().map(|d| d.0).collect();
                    prop_assert_eq!(got, core::mem::take(&mut m.received));
                    m.sent.clear();
                }
                Op::Enable(on) => {
                    let mut dropped = BTreeSet::new();
                    c.set_enabled(on, |d| { dropped.insert(d.0); });
                    if on {
                        prop_assert!(dropped.is_empty());
                    } else {
                        prop_assert_eq!(dropped, core::mem::take(&mut m.received));
                        m.sent.clear();
                    }
                    m.disabled = !on;
                }
            }
            prop_assert_eq!(c.is_enabled(), !m.disabled);
            prop_assert_eq!(c.len_sent(), m.sent.len());
            prop_assert_eq!(c.len_received(), m.received.len());
            for d in 0..6 {
                prop_assert_eq!(c.cached_receive(DataId(d)), m.received.contains(&d));
                for r in 0..4 {
                    prop_assert_eq!(c.cached_send(DataId(d), Rank(r)), m.sent.contains(&(d, r)));
                }
            }
        }
    }
}

#[test]
fn clearing_one_destination_keeps_the_others_and_the_list_intact() {
    let mut c = Cache::<16>::new();
    for r in 1..=4 {
        c.set_sent(D0, Rank(r)).unwrap();
    }
    c.set_sent(D1, Rank(1)).unwrap();
    // The list is 4 -> 3 -> 2 -> 1: remove the head, a middle entry and the tail.
    assert!(c.clear_sent_to(D0, Rank(4)));
    assert!(c.clear_sent_to(D0, Rank(2)));
    assert!(!c.clear_sent_to(D0, Rank(2)), "already cleared");
    assert!(c.cached_send(D0, Rank(1)) && c.cached_send(D0, Rank(3)));
    assert!(!c.cached_send(D0, Rank(4)) && !c.cached_send(D0, Rank(2)));
    assert!(c.clear_sent_to(D0, Rank(1)));
    assert_eq!(c.len_sent(), 2);
    // Clearing the whole datum still walks a consistent list.
    c.clear_sent(D0);
    assert_eq!(c.len_sent(), 1);
    assert!(c.cached_send(D1, Rank(1)));
}

/// Three ranks, caches of 4 entries, the pair bound `4 / (3 − 1)` = 2: rank 0 reads 3
/// data from rank 1 and 3 from rank 2. Without the bound its received set fills at the
/// 5th copy while the owners' sent sets have room, and the ranks of a pair disagree;
/// with it, the 3rd copy of each pair is declined by the reader and its owner alike.
#[test]
fn a_full_pair_is_decided_alike_on_both_ranks() {
    let mut reader: Cache<4> = Cache::new();
    let mut owners: [Cache<4>; 2] = [Cache::new(), Cache::new()];
    for c in owners.iter_mut().chain([&mut reader]) {
        c.set_pair_limit(4 / (3 - 1));
    }
    let me = Rank(0);
    for (o, owner) in owners.iter_mut().enumerate() {
        let from = Rank(o as u32 + 1);
        for k in 0..3u32 {
            let data = DataId(10 * (o as u32 + 1) + k);
            let sent = CacheUpdate::SentSet { data, dest: me };
            let got = CacheUpdate::ReceivedSet { data };
            assert_eq!(owner.apply_from(&sent, None), Ok(false));
            assert_eq!(reader.apply_from(&got, Some(from)), Ok(false));
            // Both ranks of the pair agree on whether the copy is cached.
            assert_eq!(
                owner.cached_send(data, me),
                reader.cached_receive(data),
                "pair ({from}, {me}), datum {data}"
            );
            assert_eq!(reader.cached_receive(data), k < 2);
        }
        assert_eq!(owner.pair_entries(me, true), 2);
        assert_eq!(reader.pair_entries(from, false), 2);
    }
    assert_eq!(
        reader.len_received(),
        4,
        "the received set never overflowed"
    );
    // A write frees a slot of the pair on both sides: the next copy is cached again.
    let data = DataId(10);
    assert!(
        reader
            .apply_from(&CacheUpdate::Invalidate { data }, None)
            .unwrap()
    );
    assert!(!owners[0].apply(&CacheUpdate::Invalidate { data }).unwrap());
    let next = DataId(12);
    owners[0]
        .apply(&CacheUpdate::SentSet {
            data: next,
            dest: me,
        })
        .unwrap();
    reader
        .apply_from(&CacheUpdate::ReceivedSet { data: next }, Some(Rank(1)))
        .unwrap();
    assert!(owners[0].cached_send(next, me) && reader.cached_receive(next));
    // Evictions and flushes count down alike.
    assert!(owners[0].clear_sent_to(next, me));
    assert!(reader.clear_received(next));
    assert_eq!(owners[0].pair_entries(me, true), 1);
    assert_eq!(reader.pair_entries(Rank(1), false), 1);
    reader.flush_all(|_| {});
    assert_eq!(reader.pair_entries(Rank(2), false), 0);
}
