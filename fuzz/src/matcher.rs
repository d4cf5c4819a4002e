//! The `matcher` target: the matcher and the lists against their reference models.
//!
//! The input picks one table and a sequence of operations on it. After every operation
//! the table's answer must equal the model's ([`starling_core::model`]), and the model's
//! `check` compares the whole contents (every key's FIFO, counts, orphans, invariants).
//! Capacities are small so that full tables, exhausted key tables and freed slots are
//! reached often.

use arbitrary::{Arbitrary, Unstructured};
use starling_core::error::Table;
use starling_core::lists::{Detached, Key, KeyedFifo, ReadyList, SyncSends};
use starling_core::matcher::{Matcher, Unexpected, UnexpectedKind};
use starling_core::model::{DetachedModel, FifoModel, MatcherModel, ReadyModel, SyncSendsModel};
use starling_core::{CommId, MsgId, Priority, Rank, ReqId, Tag};

const KEYS: usize = 4;
const ENTRIES: usize = 5;

/// One of 2 communicators × 3 sources × 3 tags: more keys than the tables hold.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct SmallKey {
    comm: u8,
    peer: u8,
    tag: u8,
}

impl SmallKey {
    fn key(self) -> Key {
        Key::new(
            CommId(u16::from(self.comm % 2)),
            Rank(u32::from(self.peer % 3)),
            Tag(i64::from(self.tag % 3) - 1),
        )
    }
}

/// What kind of message arrives.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum MsgKind {
    /// A data envelope (its payload goes to an early buffer).
    Data,
    /// An eager envelope.
    Eager,
    /// A synchronous envelope.
    Sync,
}

/// An operation on the [`Matcher`].
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum MatcherOp {
    /// `post_recv` with a fresh id.
    Post(SmallKey),
    /// `arrive` with a fresh message.
    Arrive(SmallKey, MsgKind),
    /// `cancel_recv` of the n-th waiting receive of the key (or of one not there).
    Cancel(SmallKey, u8),
    /// `take_recv`.
    TakeRecv(SmallKey),
    /// `take_unexpected`.
    TakeUnexpected(SmallKey),
    /// `push_recv`, applied only where the matcher allows it (no message waits).
    PushRecv(SmallKey),
    /// `push_unexpected`, applied only where no receive waits.
    PushUnexpected(SmallKey, MsgKind),
}

/// An operation on the [`ReadyList`].
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ReadyOp {
    /// `push` a fresh id with priority `p % 5 - 2`.
    Push(u8),
    /// `pop`.
    Pop,
    /// `peek`.
    Peek,
    /// `remove` an id pushed before (or never pushed).
    Remove(u8),
}

/// An operation on the [`KeyedFifo`].
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum FifoOp {
    /// `push_back(key, v % 4)`.
    Push(SmallKey, u8),
    /// `pop_front`.
    Pop(SmallKey),
    /// `front`.
    Front(SmallKey),
    /// `remove` the first item equal to `v % 4`.
    Remove(SmallKey, u8),
}

/// An operation on [`SyncSends`] (destination `d % 2`, message `m % 4`) or [`Detached`]
/// (id `m % 4`).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum SetOp {
    /// `insert`.
    Insert(u8, u8),
    /// `get` / `contains`, then `remove`.
    Remove(u8, u8),
}

/// One fuzz case: a table and the operations on it.
#[derive(Arbitrary, Debug)]
pub enum Case {
    /// A `Matcher<4, 5>`.
    Matcher(Vec<MatcherOp>),
    /// A `ReadyList<6>`.
    Ready(Vec<ReadyOp>),
    /// A `KeyedFifo<u32, 4, 6>`.
    Fifo(Vec<FifoOp>),
    /// A `SyncSends<4>`.
    SyncSends(Vec<SetOp>),
    /// A `Detached<3>`.
    Detached(Vec<SetOp>),
}

/// Builds a [`Case`] from `data` and checks it; panics on a disagreement.
pub fn run(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    check(&case);
}

fn id(n: u32) -> ReqId {
    ReqId {
        index: n,
        generation: n.wrapping_mul(7) % 3,
    }
}

fn ok(step: usize, r: Result<(), String>) {
    if let Err(e) = r {
        panic!("step {step}: {e}");
    }
}

/// Checks one case; panics on a disagreement.
pub fn check(case: &Case) {
    match case {
        Case::Matcher(ops) => matcher(ops),
        Case::Ready(ops) => ready(ops),
        Case::Fifo(ops) => fifo(ops),
        Case::SyncSends(ops) => sync_sends(ops),
        Case::Detached(ops) => detached(ops),
    }
}

fn matcher(ops: &[MatcherOp]) {
    let mut m: Matcher<KEYS, ENTRIES> = Matcher::new();
    let mut model = MatcherModel::new(KEYS, ENTRIES);
    for (step, op) in ops.iter().enumerate() {
        let next = u32::try_from(step).unwrap_or(u32::MAX);
        let fresh = id(next);
        let message = |kind: MsgKind| {
            let kind = match kind {
                MsgKind::Data => UnexpectedKind::Data,
                MsgKind::Eager => UnexpectedKind::Eager,
                MsgKind::Sync => UnexpectedKind::Sync,
            };
            Unexpected {
                kind,
                msg: MsgId(next),
                size: u64::from(next) * 3,
                internal: (kind == UnexpectedKind::Data).then_some(id(100_000 + next)),
            }
        };
        match *op {
            MatcherOp::Post(k) => {
                let k = k.key();
                assert_eq!(
                    m.post_recv(k, fresh),
                    model.post_recv(k, fresh),
                    "{step}: post"
                );
            }
            MatcherOp::Arrive(k, kind) => {
                let (k, u) = (k.key(), message(kind));
                assert_eq!(m.arrive(k, u), model.arrive(k, u), "{step}: arrive");
            }
            MatcherOp::Cancel(k, i) => {
                let k = k.key();
                let waiting = model.recvs_of(k);
                let target = waiting
                    .get(usize::from(i) % (waiting.len() + 1))
                    .copied()
                    .unwrap_or(fresh);
                assert_eq!(
                    m.cancel_recv(k, target),
                    model.cancel_recv(k, target),
                    "{step}: cancel"
                );
            }
            MatcherOp::TakeRecv(k) => {
                let k = k.key();
                assert_eq!(m.take_recv(k), model.take_recv(k), "{step}: take_recv");
            }
            MatcherOp::TakeUnexpected(k) => {
                let k = k.key();
                assert_eq!(
                    m.take_unexpected(k),
                    model.take_unexpected(k),
                    "{step}: take_unexpected"
                );
            }
            MatcherOp::PushRecv(k) => {
                let k = k.key();
                if !model.has_unexpected(k) {
                    assert_eq!(m.push_recv(k, fresh), model.push_recv(k, fresh), "{step}");
                }
            }
            MatcherOp::PushUnexpected(k, kind) => {
                let (k, u) = (k.key(), message(kind));
                if !model.has_recvs(k) {
                    assert_eq!(
                        m.push_unexpected(k, u),
                        model.push_unexpected(k, u),
                        "{step}"
                    );
                }
            }
        }
        ok(step, model.check(&m));
    }
}

fn ready(ops: &[ReadyOp]) {
    const N: usize = 6;
    let mut list: ReadyList<N> = ReadyList::new();
    let mut model = ReadyModel::new(N);
    let mut pushed = 0u32;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            ReadyOp::Push(p) => {
                let (r, p) = (id(pushed), Priority(i32::from(p % 5) - 2));
                pushed += 1;
                assert_eq!(list.push(r, p), model.push(r, p), "{step}: push");
            }
            ReadyOp::Pop => assert_eq!(list.pop(), model.pop(), "{step}: pop"),
            ReadyOp::Peek => assert_eq!(list.peek(), model.peek(), "{step}: peek"),
            ReadyOp::Remove(i) => {
                let r = id(u32::from(i) % (pushed + 1));
                assert_eq!(list.contains(r), model.contains(r), "{step}: contains");
                assert_eq!(list.remove(r), model.remove(r), "{step}: remove");
            }
        }
        ok(step, model.check(&list));
    }
}

fn fifo(ops: &[FifoOp]) {
    const FKEYS: usize = 4;
    const FENTRIES: usize = 6;
    let mut f: KeyedFifo<u32, FKEYS, FENTRIES> = KeyedFifo::new(Table::EarlyRequests);
    let mut model = FifoModel::new(FKEYS, FENTRIES, Table::EarlyRequests);
    for (step, op) in ops.iter().enumerate() {
        match *op {
            FifoOp::Push(k, v) => {
                let (k, v) = (k.key(), u32::from(v % 4));
                assert_eq!(f.push_back(k, v), model.push_back(k, v), "{step}: push");
            }
            FifoOp::Pop(k) => {
                let k = k.key();
                assert_eq!(f.pop_front(k), model.pop_front(k), "{step}: pop");
            }
            FifoOp::Front(k) => {
                let k = k.key();
                assert_eq!(f.front(k), model.front(k), "{step}: front");
            }
            FifoOp::Remove(k, v) => {
                let (k, v) = (k.key(), u32::from(v % 4));
                assert_eq!(
                    f.remove(k, |x| *x == v),
                    model.remove(k, v),
                    "{step}: remove"
                );
            }
        }
        ok(step, model.check(&f));
    }
}

fn sync_sends(ops: &[SetOp]) {
    let mut table: SyncSends<4> = SyncSends::new();
    let mut model = SyncSendsModel::new(4);
    let w = CommId::WORLD;
    for (step, op) in ops.iter().enumerate() {
        let fresh = id(u32::try_from(step).unwrap_or(u32::MAX));
        match *op {
            SetOp::Insert(d, m) => {
                let (d, m) = (Rank(u32::from(d % 2)), MsgId(u32::from(m % 4)));
                assert_eq!(
                    table.insert(w, d, m, fresh),
                    model.insert(w, d, m, fresh),
                    "{step}: insert"
                );
            }
            SetOp::Remove(d, m) => {
                let (d, m) = (Rank(u32::from(d % 2)), MsgId(u32::from(m % 4)));
                assert_eq!(table.get(w, d, m), model.get(w, d, m), "{step}: get");
                assert_eq!(table.contains(w, d, m), model.get(w, d, m).is_some());
                assert_eq!(
                    table.remove(w, d, m),
                    model.remove(w, d, m),
                    "{step}: remove"
                );
            }
        }
        ok(step, model.check(&table));
    }
}

fn detached(ops: &[SetOp]) {
    let mut set: Detached<3> = Detached::new();
    let mut model = DetachedModel::new(3);
    for (step, op) in ops.iter().enumerate() {
        match *op {
            SetOp::Insert(_, m) => {
                let r = id(u32::from(m % 4));
                assert_eq!(set.insert(r), model.insert(r), "{step}: insert");
            }
            SetOp::Remove(_, m) => {
                let r = id(u32::from(m % 4));
                assert_eq!(set.contains(r), model.contains(r), "{step}: contains");
                assert_eq!(set.remove(r), model.remove(r), "{step}: remove");
            }
        }
        ok(step, model.check(&set));
    }
}
