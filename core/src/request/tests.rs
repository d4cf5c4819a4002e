use std::collections::{BTreeSet, VecDeque};
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

/// Operations per model-test case: fewer under Miri, which interprets every step.
const MAX_OPS: usize = if cfg!(miri) { 12 } else { 200 };

const W: CommId = CommId::WORLD;

/// The transition table of the module docs, one row per (kind, sync) it applies to.
fn legal_rows() -> Vec<(Kind, bool, State, Step, State)> {
    use State::*;
    use Step::*;
    let mut rows = Vec::new();
    for sync in [false, true] {
        rows.push((Kind::Send, sync, Created, DataReady, Ready));
        rows.push((Kind::Send, sync, Transferring, Done, Completed));
        rows.push((Kind::Recv, sync, Created, DataReady, Ready));
        rows.push((Kind::Recv, sync, Ready, Queued, AwaitingEnvelope));
        rows.push((Kind::Recv, sync, Ready, Matched, Transferring));
        rows.push((Kind::Recv, sync, AwaitingEnvelope, Matched, Transferring));
        rows.push((Kind::Recv, sync, Ready, Done, Completed));
        rows.push((Kind::Recv, sync, Transferring, Done, Completed));
        rows.push((Kind::Recv, sync, Ready, FastPosted, AwaitingFast));
        rows.push((Kind::Recv, sync, AwaitingFast, Done, Completed));
        rows.push((Kind::Recv, sync, AwaitingFast, Marked, AwaitingEnvelope));
    }
    rows.push((Kind::Send, false, Ready, Posted, Transferring));
    rows.push((Kind::Send, true, Ready, EnvelopeSent, AwaitingReady));
    rows.push((Kind::Send, true, AwaitingReady, ReadyReceived, Transferring));
    rows
}

#[test]
fn every_legal_transition_is_accepted() {
    for (kind, sync, from, step, to) in legal_rows() {
        assert_eq!(
            from.step(kind, sync, step),
            Ok(to),
            "{kind} sync={sync}: {from} --{step}--> {to}"
        );
    }
}

#[test]
fn every_other_transition_is_rejected() {
    let rows = legal_rows();
    let mut rejected = 0;
    for kind in [Kind::Send, Kind::Recv] {
        for sync in [false, true] {
            for from in State::ALL {
                for step in Step::ALL {
                    let legal = rows
                        .iter()
                        .any(|r| (r.0, r.1, r.2, r.3) == (kind, sync, from, step));
                    if !legal {
                        assert_eq!(
                            from.step(kind, sync, step),
                            Err(IllegalStep { from, step }),
                            "{kind} sync={sync}: {from} --{step}--> must be illegal"
                        );
                        rejected += 1;
                    }
                }
            }
        }
    }
    // 2 kinds × 2 sync flags × 7 states × 9 steps, minus the 25 legal rows.
    assert_eq!(rejected, 2 * 2 * 7 * 9 - 25);
    assert_eq!(rows.len(), 25);
}

#[test]
fn completed_is_terminal() {
    for kind in [Kind::Send, Kind::Recv] {
        for sync in [false, true] {
            for step in Step::ALL {
                assert!(State::Completed.step(kind, sync, step).is_err());
            }
        }
    }
    assert!(State::Completed.is_completed());
    assert!(!State::Transferring.is_completed());
}

#[test]
fn sync_send_cannot_skip_the_handshake() {
    let mut r = Request::send(W, Rank(1), Tag(7), 64).with_sync(true);
    r.apply(Step::DataReady).unwrap();
    assert_eq!(
        r.apply(Step::Posted),
        Err(IllegalStep {
            from: State::Ready,
            step: Step::Posted
        })
    );
    assert_eq!(r.state, State::Ready);
    assert_eq!(r.apply(Step::EnvelopeSent), Ok(State::AwaitingReady));
    assert!(r.apply(Step::Posted).is_err());
    assert!(r.apply(Step::Done).is_err());
    assert_eq!(r.apply(Step::ReadyReceived), Ok(State::Transferring));
    assert_eq!(r.apply(Step::Done), Ok(State::Completed));
}

#[test]
fn plain_send_never_waits_for_an_ack() {
    let mut r = Request::send(W, Rank(1), Tag(7), 64);
    r.apply(Step::DataReady).unwrap();
    assert!(r.apply(Step::EnvelopeSent).is_err());
    assert_eq!(r.apply(Step::Posted), Ok(State::Transferring));
    assert!(r.apply(Step::ReadyReceived).is_err());
    assert_eq!(r.apply(Step::Done), Ok(State::Completed));
}

#[test]
fn recv_lifecycles_early_late_and_local_copy() {
    // Posted before its envelope.
    let mut early = Request::recv(W, Rank(2), Tag(1), 8);
    for (step, to) in [
        (Step::DataReady, State::Ready),
        (Step::Queued, State::AwaitingEnvelope),
        (Step::Matched, State::Transferring),
        (Step::Done, State::Completed),
    ] {
        assert_eq!(early.apply(step), Ok(to));
    }
    // Its envelope was already there.
    let mut late = Request::recv(W, Rank(2), Tag(1), 8).with_sync(true);
    assert_eq!(late.apply(Step::DataReady), Ok(State::Ready));
    assert_eq!(late.apply(Step::Matched), Ok(State::Transferring));
    assert_eq!(late.apply(Step::Done), Ok(State::Completed));
    // Served by copying a payload already held locally.
    let mut copied = Request::recv(W, Rank(2), Tag(1), 8);
    copied.apply(Step::DataReady).unwrap();
    assert_eq!(copied.apply(Step::Done), Ok(State::Completed));
    // A receive is never queued twice, and never queued once matched.
    let mut r = Request::recv(W, Rank(2), Tag(1), 8);
    r.apply(Step::DataReady).unwrap();
    r.apply(Step::Queued).unwrap();
    assert!(r.apply(Step::Queued).is_err());
    assert!(r.apply(Step::Done).is_err());
}

#[test]
fn failed_apply_leaves_the_request_unchanged() {
    let mut r = Request::recv(W, Rank(0), Tag(-3), 16);
    let before = r;
    let err = r.apply(Step::Matched).unwrap_err();
    assert_eq!(err.from, State::Created);
    assert_eq!(err.step, Step::Matched);
    assert_eq!(r, before);
    assert_eq!(
        std::format!("{err}"),
        "illegal request step `matched` from state `created`"
    );
}

#[test]
fn constructors_set_documented_defaults() {
    let s = Request::send(CommId(3), Rank(4), Tag(-5), 100);
    assert_eq!(s.kind, Kind::Send);
    assert_eq!(
        (s.comm, s.peer, s.tag, s.size),
        (CommId(3), Rank(4), Tag(-5), 100)
    );
    assert_eq!(s.priority, Priority::DEFAULT);
    assert!(!s.sync && !s.detached && !s.internal);
    assert_eq!(s.msg, None);
    assert_eq!(s.state, State::Created);
    assert_eq!(s.key(), Key::new(CommId(3), Rank(4), Tag(-5)));

    let r = Request::recv(CommId(1), Rank(2), Tag(9), 50)
        .with_priority(Priority(4))
        .with_detached(true)
        .with_sync(true);
    assert_eq!(r.kind, Kind::Recv);
    assert_eq!((r.peer, r.size, r.priority), (Rank(2), 50, Priority(4)));
    assert!(r.sync && r.detached && !r.internal);

    let i = Request::internal_recv(W, Rank(1), Tag(2), 30, MsgId(11));
    assert_eq!(i.kind, Kind::Recv);
    assert!(i.internal && i.detached && !i.sync);
    assert_eq!(
        (i.size, i.msg, i.state),
        (30, Some(MsgId(11)), State::Created)
    );
}

fn req(tag: i64) -> Request {
    Request::send(W, Rank(1), Tag(tag), 0)
}

#[test]
fn slab_insert_get_remove() {
    let mut slab: Slab<4> = Slab::new();
    assert!(slab.is_empty());
    assert_eq!(slab.capacity(), 4);
    let a = slab.insert(req(1)).unwrap();
    let b = slab.insert(req(2)).unwrap();
    assert_ne!(a, b);
    assert_eq!(slab.len(), 2);
    assert_eq!(slab.get(a).map(|r| r.tag), Some(Tag(1)));
    slab.get_mut(b).unwrap().size = 77;
    assert_eq!(slab.get(b).map(|r| r.size), Some(77));
    assert_eq!(slab.remove(a).map(|r| r.tag), Some(Tag(1)));
    assert!(!slab.contains(a));
    assert!(slab.contains(b));
    assert_eq!(slab.len(), 1);
    let ids: Vec<_> = slab.iter().map(|(id, r)| (id, r.tag)).collect();
    assert_eq!(ids, [(b, Tag(2))]);
}

#[test]
fn stale_id_never_resolves_even_when_its_slot_is_reused() {
    let mut slab: Slab<1> = Slab::new();
    let old = slab.insert(req(1)).unwrap();
    slab.remove(old).unwrap();
    let new = slab.insert(req(2)).unwrap();
    assert_eq!(new.index, old.index);
    assert_ne!(new.generation, old.generation);
    assert!(slab.get(old).is_none());
    assert!(slab.get_mut(old).is_none());
    assert!(slab.remove(old).is_none());
    assert_eq!(slab.len(), 1);
    assert_eq!(slab.get(new).map(|r| r.tag), Some(Tag(2)));
}

#[test]
fn remove_twice_or_unknown_id_changes_nothing() {
    let mut slab: Slab<2> = Slab::new();
    let a = slab.insert(req(1)).unwrap();
    assert!(slab.remove(a).is_some());
    assert!(slab.remove(a).is_none());
    assert!(
        slab.remove(ReqId {
            index: 9,
            generation: 0
        })
        .is_none()
    );
    assert_eq!(slab.len(), 0);
    // The double remove did not put the slot twice on the free list.
    let b = slab.insert(req(2)).unwrap();
    let c = slab.insert(req(3)).unwrap();
    assert_ne!(b.index, c.index);
    assert!(slab.insert(req(4)).is_err());
}

#[test]
fn full_slab_hands_the_request_back_and_changes_nothing() {
    let mut slab: Slab<2> = Slab::new();
    let a = slab.insert(req(1)).unwrap();
    let b = slab.insert(req(2)).unwrap();
    let err = slab.insert(req(3)).unwrap_err();
    assert_eq!(err.table, Table::Requests);
    assert_eq!(err.item, req(3));
    assert_eq!(slab.len(), 2);
    assert_eq!(slab.get(a).map(|r| r.tag), Some(Tag(1)));
    assert_eq!(slab.get(b).map(|r| r.tag), Some(Tag(2)));

    let mut none: Slab<0> = Slab::new();
    assert_eq!(none.insert(req(1)).unwrap_err().item, req(1));
}

#[test]
fn freed_slots_are_reused_oldest_freed_first() {
    let mut slab: Slab<3> = Slab::new();
    let ids: Vec<_> = (0..3).map(|t| slab.insert(req(t)).unwrap()).collect();
    slab.remove(ids[2]).unwrap();
    slab.remove(ids[0]).unwrap();
    slab.remove(ids[1]).unwrap();
    let again: Vec<_> = (0..3).map(|t| slab.insert(req(t)).unwrap().index).collect();
    assert_eq!(again, [ids[2].index, ids[0].index, ids[1].index]);
}

#[test]
fn generation_wraps_without_panicking() {
    let mut slab: Slab<1> = Slab::new();
    let first = slab.insert(req(1)).unwrap();
    // Fast-forward the slot to its last generation.
    slab.slots[0] = Slot::Occupied {
        generation: u32::MAX,
        request: req(1),
    };
    let last = ReqId {
        index: first.index,
        generation: u32::MAX,
    };
    assert!(slab.remove(last).is_some());
    let wrapped = slab.insert(req(2)).unwrap();
    assert_eq!(wrapped.generation, 0);
    assert!(slab.get(last).is_none());
}

// ---------------------------------------------------------------------------------
// Model-based test of the slab
// ---------------------------------------------------------------------------------

const CAP: usize = 4;

#[derive(Clone, Debug)]
enum SlabOp {
    Insert(i64),
    /// Remove an id picked among those ever issued (live or stale), or a never-issued one.
    Remove(usize),
    Get(usize),
    Touch(usize, u64),
}

fn slab_op() -> impl Strategy<Value = SlabOp> {
    prop_oneof![
        3 => any::<i64>().prop_map(SlabOp::Insert),
        2 => any::<usize>().prop_map(SlabOp::Remove),
        1 => any::<usize>().prop_map(SlabOp::Get),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(i, s)| SlabOp::Touch(i, s)),
    ]
}

/// The reference model: slots as `Vec<Option<..>>` with their generations, and the
/// free slots in the order they were freed.
#[derive(Default)]
struct SlabModel {
    slots: Vec<(u32, Option<Request>)>,
    free: VecDeque<usize>,
}

impl SlabModel {
    fn insert(&mut self, r: Request) -> Option<ReqId> {
        let index = if self.slots.len() < CAP {
            self.slots.push((0, None));
            self.slots.len() - 1
        } else {
            self.free.pop_front()?
        };
        let slot = &mut self.slots[index];
        slot.1 = Some(r);
        Some(ReqId {
            index: index as u32,
            generation: slot.0,
        })
    }

    fn get(&self, id: ReqId) -> Option<&Request> {
        match self.slots.get(id.index as usize) {
            Some((g, Some(r))) if *g == id.generation => Some(r),
            _ => None,
        }
    }

    fn remove(&mut self, id: ReqId) -> Option<Request> {
        self.get(id)?;
        let slot = &mut self.slots[id.index as usize];
        slot.0 = slot.0.wrapping_add(1);
        self.free.push_back(id.index as usize);
        slot.1.take()
    }

    fn live(&self) -> Vec<(ReqId, Request)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, (g, r))| {
                r.map(|r| {
                    (
                        ReqId {
                            index: i as u32,
                            generation: *g,
                        },
                        r,
                    )
                })
            })
            .collect()
    }
}

proptest! {
    #[test]
    fn slab_agrees_with_model(ops in proptest::collection::vec(slab_op(), 1..MAX_OPS)) {
        let mut slab: Slab<CAP> = Slab::new();
        let mut model = SlabModel::default();
        let mut issued: Vec<ReqId> = Vec::new();
        let mut removed: BTreeSet<ReqId> = BTreeSet::new();
        let pick = |issued: &Vec<ReqId>, i: usize| {
            // One chance in (issued + 1) of an id that was never issued.
            if i % (issued.len() + 1) == issued.len() {
                ReqId { index: (i % 7) as u32, generation: 1_000 + (i % 3) as u32 }
            } else {
                issued[i % (issued.len() + 1)]
            }
        };
        for op in ops {
            match op {
                SlabOp::Insert(tag) => {
                    let r = req(tag);
                    let got = slab.insert(r);
                    match model.insert(r) {
                        Some(id) => {
                            prop_assert_eq!(got, Ok(id));
                            prop_assert!(!removed.contains(&id), "a removed id was reissued");
                            issued.push(id);
                        }
                        None => prop_assert_eq!(got, Err(Full::new(Table::Requests, r))),
                    }
                }
                SlabOp::Remove(i) => {
                    let id = pick(&issued, i);
                    let got = slab.remove(id);
                    prop_assert_eq!(got, model.remove(id));
                    if got.is_some() {
                        removed.insert(id);
                    }
                }
                SlabOp::Get(i) => {
                    let id = pick(&issued, i);
                    prop_assert_eq!(slab.get(id), model.get(id));
                    prop_assert_eq!(slab.contains(id), model.get(id).is_some());
                }
                SlabOp::Touch(i, size) => {
                    let id = pick(&issued, i);
                    let got = slab.get_mut(id).map(|r| { r.size = size; });
                    let want = model.get(id).is_some();
                    if want {
                        model.slots[id.index as usize].1.as_mut().unwrap().size = size;
                    }
                    prop_assert_eq!(got.is_some(), want);
                }
            }
            for id in &removed {
                prop_assert!(slab.get(*id).is_none(), "stale {} resolves", id);
            }
            let live: Vec<_> = slab.iter().map(|(id, r)| (id, *r)).collect();
            prop_assert_eq!(&live, &model.live());
            prop_assert_eq!(slab.len(), live.len());
            prop_assert_eq!(slab.is_empty(), live.is_empty());
        }
    }
}
