use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::lists::SyncSends;
use crate::model::MatcherModel;

/// Operations per model-test case: fewer under Miri, which interprets every step.
const MAX_OPS: usize = if cfg!(miri) { 12 } else { 200 };

const W: CommId = CommId::WORLD;

type M = Matcher<4, 6>;

fn id(n: u32) -> ReqId {
    ReqId {
        index: n,
        generation: 0,
    }
}

fn key(source: u32, tag: i64) -> Key {
    Key::new(W, Rank(source), Tag(tag))
}

fn data(msg: u32, internal: u32) -> Unexpected {
    Unexpected {
        kind: UnexpectedKind::Data,
        msg: MsgId(msg),
        size: 8,
        internal: Some(id(internal)),
    }
}

fn sync(msg: u32) -> Unexpected {
    Unexpected {
        kind: UnexpectedKind::Sync,
        msg: MsgId(msg),
        size: 8,
        internal: None,
    }
}

fn eager(msg: u32) -> Unexpected {
    Unexpected {
        kind: UnexpectedKind::Eager,
        msg: MsgId(msg),
        size: 4,
        internal: None,
    }
}

#[test]
fn early_data_matches_late_recv() {
    let mut m = M::new();
    assert_eq!(m.arrive(key(1, 5), data(0, 90)), Ok(None));
    assert_eq!(m.unexpected_count(), 1);
    assert_eq!(m.post_recv(key(1, 5), id(1)), Ok(Some(data(0, 90))));
    assert!(m.is_empty());
}

#[test]
fn early_recv_matches_late_data() {
    let mut m = M::new();
    assert_eq!(m.post_recv(key(1, 5), id(1)), Ok(None));
    assert_eq!(m.recv_count(), 1);
    assert_eq!(m.arrive(key(1, 5), data(0, 90)), Ok(Some(id(1))));
    assert!(m.is_empty());
}

#[test]
fn receives_and_messages_of_one_key_match_in_order() {
    let mut m = M::new();
    m.post_recv(key(1, 5), id(1)).unwrap();
    m.post_recv(key(1, 5), id(2)).unwrap();
    assert_eq!(m.arrive(key(1, 5), eager(0)), Ok(Some(id(1))));
    assert_eq!(m.arrive(key(1, 5), eager(1)), Ok(Some(id(2))));
    m.arrive(key(1, 5), eager(2)).unwrap();
    m.arrive(key(1, 5), eager(3)).unwrap();
    assert_eq!(m.post_recv(key(1, 5), id(3)), Ok(Some(eager(2))));
    assert_eq!(m.post_recv(key(1, 5), id(4)), Ok(Some(eager(3))));
    assert!(m.is_empty());
}

#[test]
fn sync_and_data_messages_of_one_key_keep_arrival_order() {
    // The reference would hand out the data message first (early data is looked up
    // before sync data); here the sync envelope that arrived first is matched first.
    let mut m = M::new();
    m.arrive(key(2, 7), sync(0)).unwrap();
    m.arrive(key(2, 7), data(1, 50)).unwrap();
    m.arrive(key(2, 7), eager(2)).unwrap();
    assert_eq!(m.sync_count(), 1);
    assert_eq!(m.post_recv(key(2, 7), id(1)), Ok(Some(sync(0))));
    assert_eq!(m.post_recv(key(2, 7), id(2)), Ok(Some(data(1, 50))));
    assert_eq!(m.post_recv(key(2, 7), id(3)), Ok(Some(eager(2))));
    assert_eq!(m.sync_count(), 0);
}

#[test]
fn different_tags_sources_and_comms_do_not_match() {
    let mut m = M::new();
    m.post_recv(Key::new(W, Rank(1), Tag(5)), id(1)).unwrap();
    for other in [
        Key::new(W, Rank(1), Tag(6)),
        Key::new(W, Rank(2), Tag(5)),
        Key::new(CommId(1), Rank(1), Tag(5)),
    ] {
        assert_eq!(m.arrive(other, eager(0)), Ok(None));
    }
    assert_eq!(m.recv_count(), 1);
    assert_eq!(m.unexpected_count(), 3);
    assert!(m.is_consistent());
    // Receives on different tags may be posted in any order.
    assert_eq!(
        m.post_recv(Key::new(W, Rank(1), Tag(6)), id(2)),
        Ok(Some(eager(0)))
    );
}

#[test]
fn at_most_one_side_of_a_key_is_non_empty() {
    let mut m = M::new();
    let k = key(0, 0);
    for step in 0..10u32 {
        if step % 3 == 0 {
            let _ = m.arrive(k, eager(step));
        } else {
            let _ = m.post_recv(k, id(step));
        }
        assert!(m.is_consistent());
        assert!(m.recv_count() == 0 || m.unexpected_count() == 0);
    }
    // Misusing a primitive breaks it, and the check notices.
    m.take_recv(k);
    m.take_recv(k);
    m.take_recv(k);
    m.take_recv(k);
    m.push_unexpected(k, eager(99)).unwrap();
    m.push_recv(k, id(99)).unwrap();
    assert!(!m.is_consistent());
}

#[test]
fn primitives_take_and_push_each_side() {
    let mut m = M::new();
    let k = key(3, 1);
    assert_eq!(m.take_recv(k), None);
    assert_eq!(m.take_unexpected(k), None);
    m.push_recv(k, id(1)).unwrap();
    assert_eq!(m.take_recv(k), Some(id(1)));
    m.push_unexpected(k, sync(4)).unwrap();
    assert_eq!(m.peek_unexpected(k), Some(&sync(4)));
    assert_eq!(m.take_unexpected(k), Some(sync(4)));
    assert!(m.is_empty());
}

#[test]
fn cancelled_recv_is_no_longer_matched() {
    let mut m = M::new();
    let k = key(1, 1);
    m.post_recv(k, id(1)).unwrap();
    m.post_recv(k, id(2)).unwrap();
    m.post_recv(k, id(3)).unwrap();
    assert!(m.cancel_recv(k, id(2)));
    assert!(!m.cancel_recv(k, id(2)));
    assert!(!m.cancel_recv(key(1, 2), id(1)));
    assert_eq!(m.arrive(k, eager(0)), Ok(Some(id(1))));
    assert_eq!(m.arrive(k, eager(1)), Ok(Some(id(3))));
    assert_eq!(m.arrive(k, eager(2)), Ok(None));
}

#[test]
fn full_tables_hand_the_item_back_and_change_nothing() {
    let mut m: Matcher<2, 2> = Matcher::new();
    m.post_recv(key(0, 0), id(0)).unwrap();
    m.post_recv(key(0, 0), id(1)).unwrap();
    assert_eq!(
        m.post_recv(key(0, 0), id(2)),
        Err(Full::new(Table::EarlyRequests, id(2)))
    );
    assert_eq!(m.recv_count(), 2);

    let mut m: Matcher<2, 2> = Matcher::new();
    m.arrive(key(0, 0), eager(0)).unwrap();
    m.arrive(key(1, 0), eager(1)).unwrap();
    assert_eq!(
        m.arrive(key(2, 0), eager(2)),
        Err(Full::new(Table::EarlyData, eager(2)))
    );
    let mut m: Matcher<2, 4> = Matcher::new();
    m.arrive(key(0, 0), eager(0)).unwrap();
    m.arrive(key(1, 0), eager(1)).unwrap();
    assert_eq!(
        m.arrive(key(2, 0), eager(2)),
        Err(Full::new(Table::MatchKeys, eager(2)))
    );
    assert_eq!(m.unexpected_count(), 2);
    // A full unexpected table does not stop a message that matches a waiting receive.
    let mut m: Matcher<2, 1> = Matcher::new();
    m.arrive(key(0, 0), eager(0)).unwrap();
    m.post_recv(key(1, 0), id(1)).unwrap();
    assert_eq!(m.arrive(key(1, 0), eager(1)), Ok(Some(id(1))));
}

#[test]
fn orphans_and_unmatched_receives_are_reported() {
    let mut m = M::new();
    m.arrive(key(1, 5), data(0, 90)).unwrap();
    m.arrive(key(1, 5), sync(1)).unwrap();
    m.arrive(Key::new(CommId(2), Rank(3), Tag(-1)), eager(0))
        .unwrap();
    m.post_recv(key(4, 4), id(7)).unwrap();
    let mut orphans: Vec<Orphan> = m.orphans().collect();
    orphans.sort_by_key(|o| (o.comm, o.source, o.tag));
    assert_eq!(
        orphans,
        [
            Orphan {
                comm: W,
                source: Rank(1),
                tag: Tag(5),
                size: 8,
                kind: UnexpectedKind::Data
            },
            Orphan {
                comm: W,
                source: Rank(1),
                tag: Tag(5),
                size: 8,
                kind: UnexpectedKind::Sync
            },
            Orphan {
                comm: CommId(2),
                source: Rank(3),
                tag: Tag(-1),
                size: 4,
                kind: UnexpectedKind::Eager
            },
        ]
    );
    assert_eq!(m.unmatched().collect::<Vec<_>>(), [(key(4, 4), id(7))]);
    assert_eq!(m.unexpected().count(), 3);
    assert!(!m.is_empty());
    let text = std::format!("{}", orphans[2]);
    assert!(text.contains("eager") && text.contains("rank 3") && text.contains("tag -1"));
}

#[test]
fn simultaneous_same_tag_issends_do_not_collide() {
    // Rank 0 issends to rank 1 with tag 5 while rank 1 issends to rank 0 with tag 5.
    // On rank 0: its own waiting send and rank 1's sync envelope live in different
    // tables, so the ack and the envelope each find their own entry (§12.6).
    let mut sends: SyncSends<4> = SyncSends::new();
    let mut m = M::new();
    sends.insert(W, Rank(1), MsgId(0), id(1)).unwrap();
    assert_eq!(m.arrive(key(1, 5), sync(0)), Ok(None));
    assert_eq!(sends.remove(W, Rank(1), MsgId(0)), Some(id(1)));
    assert_eq!(m.post_recv(key(1, 5), id(2)), Ok(Some(sync(0))));
}

// ---------------------------------------------------------------------------------
// Model-based test
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Post(Key),
    Arrive(Key, UnexpectedKind),
    Cancel(Key, usize),
    TakeRecv(Key),
    TakeUnexpected(Key),
    /// Primitive push, applied only where the model says it keeps the invariant.
    PushRecv(Key),
    PushUnexpected(Key, UnexpectedKind),
}

fn small_key() -> impl Strategy<Value = Key> {
    (0u16..2, 0u32..3, 0i64..2).prop_map(|(c, p, t)| Key::new(CommId(c), Rank(p), Tag(t)))
}

fn kind() -> impl Strategy<Value = UnexpectedKind> {
    prop_oneof![
        Just(UnexpectedKind::Data),
        Just(UnexpectedKind::Eager),
        Just(UnexpectedKind::Sync),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => small_key().prop_map(Op::Post),
        4 => (small_key(), kind()).prop_map(|(k, c)| Op::Arrive(k, c)),
        1 => (small_key(), any::<usize>()).prop_map(|(k, i)| Op::Cancel(k, i)),
        1 => small_key().prop_map(Op::TakeRecv),
        1 => small_key().prop_map(Op::TakeUnexpected),
        1 => small_key().prop_map(Op::PushRecv),
        1 => (small_key(), kind()).prop_map(|(k, c)| Op::PushUnexpected(k, c)),
    ]
}

const KEYS: usize = 4;
const ENTRIES: usize = 5;

proptest! {
    #[test]
    fn matcher_agrees_with_model(ops in proptest::collection::vec(op(), 1..MAX_OPS)) {
        let mut m: Matcher<KEYS, ENTRIES> = Matcher::new();
        let mut model = MatcherModel::new(KEYS, ENTRIES);
        let mut next = 0u32;
        for op in ops {
            next += 1;
            let fresh_id = id(next);
            let fresh_msg = |kind| Unexpected {
                kind,
                msg: MsgId(next),
                size: u64::from(next) * 3,
                internal: (kind == UnexpectedKind::Data).then_some(id(10_000 + next)),
            };
            match op {
                Op::Post(k) => {
                    prop_assert_eq!(m.post_recv(k, fresh_id), model.post_recv(k, fresh_id));
                }
                Op::Arrive(k, kind) => {
                    let u = fresh_msg(kind);
                    prop_assert_eq!(m.arrive(k, u), model.arrive(k, u));
                }
                Op::Cancel(k, i) => {
                    // A waiting receive of that key, or one that is not there.
                    let waiting = model.recvs_of(k);
                    let target = waiting.get(i % (waiting.len() + 1)).copied().unwrap_or(fresh_id);
                    prop_assert_eq!(m.cancel_recv(k, target), model.cancel_recv(k, target));
                }
                Op::TakeRecv(k) => {
                    prop_assert_eq!(m.take_recv(k), model.take_recv(k));
                }
                Op::TakeUnexpected(k) => {
                    prop_assert_eq!(m.take_unexpected(k), model.take_unexpected(k));
                }
                Op::PushRecv(k) => {
                    if !model.has_unexpected(k) {
                        prop_assert_eq!(m.push_recv(k, fresh_id), model.push_recv(k, fresh_id));
                    }
                }
                Op::PushUnexpected(k, kind) => {
                    if !model.has_recvs(k) {
                        let u = fresh_msg(kind);
                        prop_assert_eq!(m.push_unexpected(k, u), model.push_unexpected(k, u));
                    }
                }
            }
            // The invariant and the full contents, per key in FIFO order.
            model.check(&m).map_err(TestCaseError::fail)?;
        }
    }
}
