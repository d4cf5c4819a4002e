use std::collections::BTreeMap;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::model::{DetachedModel, FifoModel, ReadyModel, SyncSendsModel};

/// Operations per model-test case: fewer under Miri, which interprets every step.
const MAX_OPS: usize = if cfg!(miri) { 12 } else { 200 };

const W: CommId = CommId::WORLD;

fn id(n: u32) -> ReqId {
    ReqId {
        index: n,
        generation: 0,
    }
}

fn key(peer: u32, tag: i64) -> Key {
    Key::new(W, Rank(peer), Tag(tag))
}

fn drain<const N: usize>(list: &ReadyList<N>) -> Vec<ReqId> {
    let mut list = list.clone();
    core::iter::from_fn(|| list.pop()).collect()
}

// ---------------------------------------------------------------------------------
// ReadyList
// ---------------------------------------------------------------------------------

#[test]
fn ready_list_pops_highest_priority_first() {
    let mut l: ReadyList<8> = ReadyList::new();
    l.push(id(0), Priority(0)).unwrap();
    l.push(id(1), Priority(5)).unwrap();
    l.push(id(2), Priority(-3)).unwrap();
    l.push(id(3), Priority(2)).unwrap();
    assert_eq!(l.peek(), Some(id(1)));
    assert_eq!(drain(&l), [id(1), id(3), id(0), id(2)]);
}

#[test]
fn ready_list_is_fifo_among_equal_priorities() {
    let mut l: ReadyList<16> = ReadyList::new();
    for n in 0..12 {
        l.push(id(n), Priority(if n % 3 == 0 { 1 } else { 0 }))
            .unwrap();
    }
    assert_eq!(drain(&l), [0, 3, 6, 9, 1, 2, 4, 5, 7, 8, 10, 11].map(id));
}

#[test]
fn full_ready_list_hands_the_id_back_and_changes_nothing() {
    let mut l: ReadyList<2> = ReadyList::new();
    l.push(id(0), Priority(0)).unwrap();
    l.push(id(1), Priority(0)).unwrap();
    let err = l.push(id(2), Priority(9)).unwrap_err();
    assert_eq!(err, Full::new(Table::ReadyList, id(2)));
    assert_eq!(l.len(), 2);
    assert_eq!(drain(&l), [id(0), id(1)]);
    // A refused push does not disturb FIFO order of later pushes.
    l.pop();
    l.push(id(3), Priority(0)).unwrap();
    assert_eq!(drain(&l), [id(1), id(3)]);
}

#[test]
fn ready_list_remove_keeps_the_order_of_the_others() {
    let mut l: ReadyList<8> = ReadyList::new();
    for n in 0..6 {
        l.push(id(n), Priority((n % 2) as i32)).unwrap();
    }
    assert!(l.remove(id(3)));
    assert!(!l.remove(id(3)));
    assert!(!l.contains(id(3)));
    assert!(l.contains(id(4)));
    assert_eq!(drain(&l), [1, 5, 0, 2, 4].map(id));
    assert_eq!(l.iter().count(), 5);
    assert_eq!(l.capacity(), 8);
}

#[test]
fn empty_ready_list_pops_nothing() {
    let mut l: ReadyList<1> = ReadyList::new();
    assert!(l.is_empty());
    assert_eq!(l.pop(), None);
    assert_eq!(l.peek(), None);
    assert!(!l.remove(id(0)));
}

// ---------------------------------------------------------------------------------
// KeyedFifo
// ---------------------------------------------------------------------------------

type Fifo = KeyedFifo<u32, 4, 6>;

#[test]
fn keyed_fifo_is_fifo_per_key() {
    let mut f = Fifo::new(Table::EarlyData);
    f.push_back(key(0, 1), 10).unwrap();
    f.push_back(key(1, 1), 20).unwrap();
    f.push_back(key(0, 1), 11).unwrap();
    f.push_back(key(0, 2), 30).unwrap();
    f.push_back(key(0, 1), 12).unwrap();
    assert_eq!(f.len(), 5);
    assert_eq!(f.len_of(key(0, 1)), 3);
    assert_eq!(f.front(key(0, 1)), Some(&10));
    assert_eq!(
        f.iter_key(key(0, 1)).copied().collect::<Vec<_>>(),
        [10, 11, 12]
    );
    assert_eq!(f.pop_front(key(0, 1)), Some(10));
    assert_eq!(f.pop_front(key(0, 1)), Some(11));
    assert_eq!(f.pop_front(key(1, 1)), Some(20));
    assert_eq!(f.pop_front(key(0, 1)), Some(12));
    assert_eq!(f.pop_front(key(0, 1)), None);
    assert_eq!(f.pop_front(key(0, 2)), Some(30));
    assert!(f.is_empty());
}

#[test]
fn keys_are_exact_on_comm_peer_and_tag() {
    let mut f = Fifo::new(Table::EarlyData);
    f.push_back(Key::new(CommId(1), Rank(0), Tag(5)), 1)
        .unwrap();
    assert_eq!(f.pop_front(Key::new(CommId(0), Rank(0), Tag(5))), None);
    assert_eq!(f.pop_front(Key::new(CommId(1), Rank(1), Tag(5))), None);
    assert_eq!(f.pop_front(Key::new(CommId(1), Rank(0), Tag(-5))), None);
    assert_eq!(f.pop_front(Key::new(CommId(1), Rank(0), Tag(5))), Some(1));
}

#[test]
fn key_is_removed_when_its_list_empties() {
    let mut f = Fifo::new(Table::EarlyData);
    for k in 0..4 {
        f.push_back(key(k, 0), k).unwrap();
    }
    assert_eq!(f.key_count(), 4);
    assert_eq!(
        f.push_back(key(9, 0), 9),
        Err(Full::new(Table::MatchKeys, 9))
    );
    assert_eq!(f.pop_front(key(2, 0)), Some(2));
    assert!(!f.contains_key(key(2, 0)));
    assert_eq!(f.key_count(), 3);
    // The freed key slot can be used by a new key.
    f.push_back(key(9, 0), 9).unwrap();
    assert_eq!(f.remove(key(9, 0), |v| *v == 9), Some(9));
    assert!(!f.contains_key(key(9, 0)));
    assert_eq!(f.keys().count(), 3);
}

#[test]
fn full_pool_reports_its_table_and_changes_nothing() {
    let mut f = Fifo::new(Table::EarlyRequests);
    for v in 0..6 {
        f.push_back(key(0, 0), v).unwrap();
    }
    assert_eq!(
        f.push_back(key(0, 0), 6),
        Err(Full::new(Table::EarlyRequests, 6))
    );
    // Pool full and key table not: the pool is reported for a new key too.
    assert_eq!(
        f.push_back(key(1, 0), 7),
        Err(Full::new(Table::EarlyRequests, 7))
    );
    assert_eq!(f.len(), 6);
    assert_eq!(f.key_count(), 1);
    assert_eq!(
        f.iter_key(key(0, 0)).copied().collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(f.table(), Table::EarlyRequests);
    assert_eq!((f.capacity(), f.key_capacity()), (6, 4));
}

#[test]
fn full_key_table_still_accepts_known_keys() {
    let mut f = Fifo::new(Table::EarlyData);
    for k in 0..4 {
        f.push_back(key(k, 0), k).unwrap();
    }
    assert_eq!(
        f.push_back(key(4, 0), 4),
        Err(Full::new(Table::MatchKeys, 4))
    );
    f.push_back(key(3, 0), 33).unwrap();
    assert_eq!(f.len_of(key(3, 0)), 2);
}

#[test]
fn remove_takes_the_first_match_and_fixes_the_tail() {
    let mut f = Fifo::new(Table::EarlyData);
    for v in [1, 2, 3, 2] {
        f.push_back(key(0, 0), v).unwrap();
    }
    assert_eq!(f.remove(key(0, 0), |v| *v == 2), Some(2));
    assert_eq!(
        f.iter_key(key(0, 0)).copied().collect::<Vec<_>>(),
        [1, 3, 2]
    );
    // Remove the tail, then append: the new item must follow 3.
    assert_eq!(f.remove(key(0, 0), |v| *v == 2), Some(2));
    f.push_back(key(0, 0), 4).unwrap();
    assert_eq!(
        f.iter_key(key(0, 0)).copied().collect::<Vec<_>>(),
        [1, 3, 4]
    );
    // Remove the head.
    assert_eq!(f.remove(key(0, 0), |v| *v == 1), Some(1));
    assert_eq!(f.front(key(0, 0)), Some(&3));
    assert_eq!(f.remove(key(0, 0), |v| *v == 99), None);
    assert_eq!(f.remove(key(5, 0), |_| true), None);
    assert_eq!(f.len(), 2);
}

#[test]
fn iter_lists_each_key_in_fifo_order() {
    let mut f = Fifo::new(Table::EarlyData);
    for (k, v) in [(0, 1), (1, 2), (0, 3), (1, 4), (0, 5)] {
        f.push_back(key(k, 0), v).unwrap();
    }
    let mut by_key: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    for (k, v) in f.iter() {
        by_key.entry(k).or_default().push(*v);
    }
    assert_eq!(by_key[&key(0, 0)], [1, 3, 5]);
    assert_eq!(by_key[&key(1, 0)], [2, 4]);
}

// ---------------------------------------------------------------------------------
// SyncSends and Detached
// ---------------------------------------------------------------------------------

#[test]
fn sync_sends_are_found_by_destination_and_message_id() {
    let mut s: SyncSends<4> = SyncSends::new();
    s.insert(W, Rank(1), MsgId(0), id(10)).unwrap();
    s.insert(W, Rank(1), MsgId(1), id(11)).unwrap();
    s.insert(W, Rank(2), MsgId(0), id(12)).unwrap();
    s.insert(CommId(1), Rank(1), MsgId(0), id(13)).unwrap();
    assert_eq!(s.len(), 4);
    assert_eq!(s.remove(W, Rank(1), MsgId(1)), Some(id(11)));
    assert_eq!(s.remove(W, Rank(1), MsgId(1)), None);
    assert_eq!(s.remove(W, Rank(3), MsgId(0)), None);
    assert_eq!(s.get(CommId(1), Rank(1), MsgId(0)), Some(id(13)));
    assert!(s.contains(W, Rank(2), MsgId(0)));
    let order: Vec<_> = s.iter().map(|(_, r)| r).collect();
    assert_eq!(order, [id(10), id(12), id(13)]);
}

#[test]
fn duplicate_sync_send_is_refused_and_the_first_kept() {
    let mut s: SyncSends<4> = SyncSends::new();
    s.insert(W, Rank(1), MsgId(7), id(1)).unwrap();
    let err = s.insert(W, Rank(1), MsgId(7), id(2)).unwrap_err();
    assert_eq!(
        err,
        SyncInsertError::Duplicate {
            existing: id(1),
            item: id(2)
        }
    );
    assert_eq!(err.item(), id(2));
    assert_eq!(s.len(), 1);
    assert_eq!(s.get(W, Rank(1), MsgId(7)), Some(id(1)));
}

#[test]
fn full_sync_sends_hands_the_id_back() {
    let mut s: SyncSends<1> = SyncSends::new();
    s.insert(W, Rank(1), MsgId(0), id(1)).unwrap();
    let err = s.insert(W, Rank(1), MsgId(1), id(2)).unwrap_err();
    assert_eq!(
        err,
        SyncInsertError::Full(Full::new(Table::SyncSends, id(2)))
    );
    assert_eq!(err.item(), id(2));
    assert_eq!(std::format!("{err}"), "the sync-send table is full");
    assert_eq!(s.len(), 1);
    assert_eq!(s.capacity(), 1);
}

#[test]
fn detached_set_inserts_once_and_keeps_order() {
    let mut d: Detached<3> = Detached::new();
    d.insert(id(1)).unwrap();
    d.insert(id(2)).unwrap();
    d.insert(id(1)).unwrap();
    assert_eq!(d.len(), 2);
    d.insert(id(3)).unwrap();
    assert_eq!(d.insert(id(4)), Err(Full::new(Table::Detached, id(4))));
    // Already present: accepted even when full.
    d.insert(id(2)).unwrap();
    assert!(d.remove(id(2)));
    assert!(!d.remove(id(2)));
    assert!(!d.contains(id(2)));
    assert_eq!(d.iter().collect::<Vec<_>>(), [id(1), id(3)]);
    assert!(!d.is_empty());
    assert_eq!(d.capacity(), 3);
}

// ---------------------------------------------------------------------------------
// Model-based tests
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum ReadyOp {
    Push(i32),
    Pop,
    Peek,
    Remove(usize),
}

fn ready_op() -> impl Strategy<Value = ReadyOp> {
    prop_oneof![
        4 => (-2i32..3).prop_map(ReadyOp::Push),
        3 => Just(ReadyOp::Pop),
        1 => Just(ReadyOp::Peek),
        1 => any::<usize>().prop_map(ReadyOp::Remove),
    ]
}

proptest! {
    /// The model ([`ReadyModel`]): a `BTreeMap` from (reversed priority, sequence) to id,
    /// whose first entry is the one that leaves next.
    #[test]
    fn ready_list_agrees_with_model(ops in proptest::collection::vec(ready_op(), 1..MAX_OPS)) {
        const N: usize = 6;
        let mut list: ReadyList<N> = ReadyList::new();
        let mut model = ReadyModel::new(N);
        let mut next_id = 0u32;
        for op in ops {
            match op {
                ReadyOp::Push(p) => {
                    let r = id(next_id);
                    next_id += 1;
                    prop_assert_eq!(list.push(r, Priority(p)), model.push(r, Priority(p)));
                }
                ReadyOp::Pop => {
                    prop_assert_eq!(list.pop(), model.pop());
                }
                ReadyOp::Peek => {
                    prop_assert_eq!(list.peek(), model.peek());
                }
                ReadyOp::Remove(i) => {
                    // Some existing id, or one never pushed.
                    let r = id(if next_id == 0 { 0 } else { (i % (next_id as usize + 1)) as u32 });
                    prop_assert_eq!(list.contains(r), model.contains(r));
                    prop_assert_eq!(list.remove(r), model.remove(r));
                }
            }
            model.check(&list).map_err(TestCaseError::fail)?;
        }
    }
}

#[derive(Clone, Debug)]
enum FifoOp {
    Push(Key, u32),
    Pop(Key),
    Front(Key),
    Remove(Key, u32),
}

/// 3 comms × 2 peers × 3 tags = 18 keys, for a key table of 4.
fn small_key() -> impl Strategy<Value = Key> {
    (0u16..3, 0u32..2, -1i64..2).prop_map(|(c, p, t)| Key::new(CommId(c), Rank(p), Tag(t)))
}

fn fifo_op() -> impl Strategy<Value = FifoOp> {
    prop_oneof![
        4 => (small_key(), 0u32..4).prop_map(|(k, v)| FifoOp::Push(k, v)),
        3 => small_key().prop_map(FifoOp::Pop),
        1 => small_key().prop_map(FifoOp::Front),
        2 => (small_key(), 0u32..4).prop_map(|(k, v)| FifoOp::Remove(k, v)),
    ]
}

proptest! {
    #[test]
    fn keyed_fifo_agrees_with_model(ops in proptest::collection::vec(fifo_op(), 1..MAX_OPS)) {
        const KEYS: usize = 4;
        const ENTRIES: usize = 6;
        let mut f: KeyedFifo<u32, KEYS, ENTRIES> = KeyedFifo::new(Table::EarlyData);
        let mut model = FifoModel::new(KEYS, ENTRIES, Table::EarlyData);
        for op in ops {
            match op {
                FifoOp::Push(k, v) => {
                    prop_assert_eq!(f.push_back(k, v), model.push_back(k, v));
                }
                FifoOp::Pop(k) => {
                    prop_assert_eq!(f.pop_front(k), model.pop_front(k));
                }
                FifoOp::Front(k) => {
                    prop_assert_eq!(f.front(k), model.front(k));
                }
                FifoOp::Remove(k, v) => {
                    prop_assert_eq!(f.remove(k, |x| *x == v), model.remove(k, v));
                }
            }
            model.check(&f).map_err(TestCaseError::fail)?;
        }
    }
}

#[derive(Clone, Debug)]
enum SetOp {
    /// Sync sends: insert (dest, msg) with a fresh id; detached: insert id `msg`.
    Insert(u32, u32),
    Remove(u32, u32),
}

fn set_op() -> impl Strategy<Value = SetOp> {
    prop_oneof![
        3 => (0u32..2, 0u32..4).prop_map(|(d, m)| SetOp::Insert(d, m)),
        2 => (0u32..2, 0u32..4).prop_map(|(d, m)| SetOp::Remove(d, m)),
    ]
}

proptest! {
    #[test]
    fn sync_sends_agree_with_model(ops in proptest::collection::vec(set_op(), 1..MAX_OPS)) {
        let mut table: SyncSends<4> = SyncSends::new();
        let mut model = SyncSendsModel::new(4);
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                SetOp::Insert(d, m) => prop_assert_eq!(
                    table.insert(W, Rank(d), MsgId(m), id(n as u32)),
                    model.insert(W, Rank(d), MsgId(m), id(n as u32))
                ),
                SetOp::Remove(d, m) => {
                    prop_assert_eq!(table.get(W, Rank(d), MsgId(m)), model.get(W, Rank(d), MsgId(m)));
                    prop_assert_eq!(
                        table.remove(W, Rank(d), MsgId(m)),
                        model.remove(W, Rank(d), MsgId(m))
                    );
                }
            }
            model.check(&table).map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn detached_set_agrees_with_model(ops in proptest::collection::vec(set_op(), 1..MAX_OPS)) {
        let mut set: Detached<3> = Detached::new();
        let mut model = DetachedModel::new(3);
        for op in ops {
            match op {
                SetOp::Insert(_, m) => prop_assert_eq!(set.insert(id(m)), model.insert(id(m))),
                SetOp::Remove(_, m) => {
                    prop_assert_eq!(set.contains(id(m)), model.contains(id(m)));
                    prop_assert_eq!(set.remove(id(m)), model.remove(id(m)));
                }
            }
            model.check(&set).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn the_key_tables_hash_spreads_keys_that_differ_in_their_high_bits_only() {
    use core::hash::BuildHasher;
    let build = hash32::BuildHasherDefault::<WordHasher>::new();
    // heapless picks a bucket by the hash's low 16 bits.
    let bucket = |k: Key| build.hash_one(k) & 0xFFFF;
    // 4 096 keys whose tags differ only above bit 32 (tags such as `i << 32 | j`):
    // without the final rotation they would share their low bits.
    let buckets: std::collections::HashSet<u64> = (0..4096i64)
        .map(|i| bucket(Key::new(CommId(0), Rank(1), Tag(i << 32))))
        .collect();
    assert!(buckets.len() > 2048, "{} distinct buckets", buckets.len());
    // And a full table finds every key.
    let mut m: KeyMap<Key, u32, 1024> = KeyMap::new();
    for i in 0..1024u32 {
        let k = Key::new(
            CommId(u16::try_from(i % 3).unwrap()),
            Rank(i % 7),
            Tag(i64::from(i) << 20),
        );
        assert!(m.insert(k, i).is_ok());
    }
    for i in 0..1024u32 {
        let k = Key::new(
            CommId(u16::try_from(i % 3).unwrap()),
            Rank(i % 7),
            Tag(i64::from(i) << 20),
        );
        assert_eq!(m.get(&k), Some(&i));
    }
}
