use std::vec::Vec;

use proptest::prelude::*;

use super::*;

const MAIN: MemNode = MemNode::MAIN_RAM;
const GPU1: MemNode = MemNode(1);
const GPU2: MemNode = MemNode(2);

type R3 = Replicas<3>;

fn set(nodes: &[MemNode]) -> NodeSet {
    nodes.iter().fold(NodeSet::EMPTY, |s, &n| s.with(n))
}

#[test]
fn a_new_datum_is_owned_by_main_memory() {
    let r = R3::new();
    assert_eq!(r.valid(), set(&[MAIN]));
    assert_eq!(r.owner(), Some(MAIN));
    assert_eq!(r.state(MAIN), Ok(ReplicaState::Owner));
    assert_eq!(r.state(GPU1), Ok(ReplicaState::Invalid));
    assert_eq!(
        r.state(MemNode(3)),
        Err(CoherenceError::NodeOutOfRange(MemNode(3)))
    );
    assert_eq!(R3::on_node(GPU2).owner(), Some(GPU2));
}

#[test]
fn a_read_on_a_device_fetches_from_main_memory_then_both_are_shared() {
    let mut r = R3::new();
    let a = r.acquire(GPU1, AccessMode::R).unwrap();
    let fetch = Fetch {
        from: MAIN,
        to: GPU1,
    };
    assert_eq!(a.fetch, Some(fetch));
    assert!(!a.is_ready() && a.invalidate.is_empty());
    assert!(r.is_fetching(GPU1));
    assert_eq!(r.state(GPU1), Ok(ReplicaState::Invalid));
    assert_eq!(r.handle_transfer_done(fetch), Ok(NodeSet::EMPTY));
    assert_eq!(r.state(GPU1), Ok(ReplicaState::Shared));
    assert_eq!(r.state(MAIN), Ok(ReplicaState::Shared));
    r.release(GPU1, AccessMode::R).unwrap();
    // Valid already: no second fetch.
    let again = r.acquire(GPU1, AccessMode::R).unwrap();
    assert!(again.is_ready());
}

#[test]
fn a_second_reader_waits_for_the_copy_in_flight_instead_of_fetching_again() {
    let mut r = R3::new();
    let first = r.acquire(GPU1, AccessMode::R).unwrap();
    let second = r.acquire(GPU1, AccessMode::R).unwrap();
    assert!(first.fetch.is_some());
    assert_eq!(second.fetch, None);
    assert!(second.wait);
    assert_eq!(r.held(GPU1), 2);
    assert_eq!(
        r.release(GPU1, AccessMode::R),
        Err(CoherenceError::Busy(GPU1))
    );
    assert!(
        r.handle_transfer_done(first.fetch.unwrap())
            .unwrap()
            .is_empty()
    );
    r.release(GPU1, AccessMode::R).unwrap();
    r.release(GPU1, AccessMode::R).unwrap();
    assert_eq!(r.held(GPU1), 0);
}

#[test]
fn a_write_makes_the_writer_the_owner_and_invalidates_the_others_without_fetching() {
    let mut r = R3::new();
    let f = r.acquire(GPU1, AccessMode::R).unwrap().fetch.unwrap();
    assert!(r.handle_transfer_done(f).unwrap().is_empty());
    r.release(GPU1, AccessMode::R).unwrap();
    let w = r.acquire(GPU2, AccessMode::W).unwrap();
    assert_eq!(w.fetch, None);
    assert_eq!(w.invalidate, set(&[MAIN, GPU1]));
    assert_eq!(r.owner(), Some(GPU2));
    assert_eq!(r.writer(), Some(GPU2));
    r.release(GPU2, AccessMode::W).unwrap();
    assert_eq!(r.writer(), None);
}

#[test]
fn a_read_write_fetches_first_and_invalidates_the_source_once_the_copy_landed() {
    let mut r = R3::new();
    let a = r.acquire(GPU1, AccessMode::RW).unwrap();
    let fetch = a.fetch.unwrap();
    assert_eq!(
        fetch,
        Fetch {
            from: MAIN,
            to: GPU1
        }
    );
    assert!(a.invalidate.is_empty());
    // The source stays valid, and pinned, while the copy is in flight.
    assert_eq!(r.valid(), set(&[MAIN]));
    assert_eq!(r.evict(MAIN), Err(CoherenceError::Busy(MAIN)));
    assert_eq!(r.handle_transfer_done(fetch), Ok(set(&[MAIN])));
    assert_eq!(r.owner(), Some(GPU1));
    r.release(GPU1, AccessMode::RW).unwrap();
}

#[test]
fn a_reduction_contribution_reads_and_writes() {
    let mut r = R3::new();
    let a = r.acquire(GPU1, AccessMode::REDUX).unwrap();
    assert_eq!(
        a.fetch,
        Some(Fetch {
            from: MAIN,
            to: GPU1
        })
    );
    assert_eq!(r.writer(), Some(GPU1));
}

#[test]
fn scratch_fetches_nothing_and_changes_no_copy() {
    let mut r = R3::new();
    let a = r.acquire(GPU1, AccessMode::SCRATCH).unwrap();
    assert!(a.is_ready() && a.invalidate.is_empty());
    assert_eq!(r.valid(), set(&[MAIN]));
    r.release(GPU1, AccessMode::SCRATCH).unwrap();
}

#[test]
fn the_source_is_main_memory_when_valid_else_the_lowest_valid_device() {
    let mut r = Replicas::<4>::on_node(MemNode(3));
    let f = r.acquire(GPU2, AccessMode::R).unwrap().fetch.unwrap();
    assert_eq!(f.from, MemNode(3));
    assert!(r.handle_transfer_done(f).unwrap().is_empty());
    r.release(GPU2, AccessMode::R).unwrap();
    assert_eq!(r.source_for(GPU1), Some(GPU2));
    let f = r.acquire(MAIN, AccessMode::R).unwrap().fetch.unwrap();
    assert!(r.handle_transfer_done(f).unwrap().is_empty());
    assert_eq!(r.source_for(GPU1), Some(MAIN));
}

#[test]
fn writes_are_exclusive() {
    let mut r = R3::new();
    let _ = r.acquire(MAIN, AccessMode::R).unwrap();
    assert_eq!(
        r.acquire(GPU1, AccessMode::W),
        Err(CoherenceError::Busy(MAIN))
    );
    r.release(MAIN, AccessMode::R).unwrap();
    let _ = r.acquire(GPU1, AccessMode::W).unwrap();
    assert_eq!(
        r.acquire(MAIN, AccessMode::R),
        Err(CoherenceError::Busy(GPU1))
    );
    assert_eq!(
        r.acquire(GPU1, AccessMode::SCRATCH),
        Err(CoherenceError::Busy(GPU1))
    );
    // The writer's node holds a write: a read release does not match it.
    assert_eq!(
        r.release(GPU1, AccessMode::R),
        Err(CoherenceError::NotAcquired(GPU1))
    );
    assert_eq!(r.release(GPU1, AccessMode::W), Ok(()));
    assert_eq!(r.writer(), None);
}

#[test]
fn release_without_acquisition_is_refused() {
    let mut r = R3::new();
    assert_eq!(
        r.release(MAIN, AccessMode::R),
        Err(CoherenceError::NotAcquired(MAIN))
    );
    let _ = r.acquire(MAIN, AccessMode::R).unwrap();
    assert_eq!(
        r.release(MAIN, AccessMode::W),
        Err(CoherenceError::NotAcquired(MAIN))
    );
    assert_eq!(
        r.release(MemNode(9), AccessMode::R),
        Err(CoherenceError::NodeOutOfRange(MemNode(9)))
    );
}

#[test]
fn eviction_refuses_the_last_copy_and_busy_nodes() {
    let mut r = R3::new();
    assert_eq!(r.evict(MAIN), Err(CoherenceError::LastCopy(MAIN)));
    assert_eq!(r.evict(GPU1), Ok(false));
    let f = r.acquire(GPU1, AccessMode::R).unwrap().fetch.unwrap();
    assert_eq!(r.evict(GPU1), Err(CoherenceError::Busy(GPU1)));
    assert!(r.handle_transfer_done(f).unwrap().is_empty());
    assert_eq!(r.evict(GPU1), Err(CoherenceError::Busy(GPU1)));
    r.release(GPU1, AccessMode::R).unwrap();
    assert_eq!(r.evict(MAIN), Ok(true));
    assert_eq!(r.owner(), Some(GPU1));
    assert_eq!(r.evict(GPU1), Err(CoherenceError::LastCopy(GPU1)));
}

#[test]
fn a_send_reads_main_memory_or_stages_from_the_device_acquire_would_pick() {
    let mut r = R3::new();
    assert_eq!(r.before_send(), Ok(BeforeSend::MainRam));
    let _ = r.acquire(GPU2, AccessMode::W).unwrap();
    r.release(GPU2, AccessMode::W).unwrap();
    assert_eq!(r.before_send(), Ok(BeforeSend::StageFrom(GPU2)));
    let f = r.acquire(MAIN, AccessMode::R).unwrap().fetch.unwrap();
    assert_eq!(
        f,
        Fetch {
            from: GPU2,
            to: MAIN
        }
    );
    assert!(r.handle_transfer_done(f).unwrap().is_empty());
    r.release(MAIN, AccessMode::R).unwrap();
    assert_eq!(r.before_send(), Ok(BeforeSend::MainRam));
}

#[test]
fn a_receive_leaves_main_memory_the_only_valid_copy() {
    let mut r = R3::on_node(GPU1);
    let _ = r.acquire(GPU1, AccessMode::R).unwrap();
    assert_eq!(r.after_receive(), Err(CoherenceError::Busy(GPU1)));
    r.release(GPU1, AccessMode::R).unwrap();
    assert_eq!(r.after_receive(), Ok(set(&[GPU1])));
    assert_eq!(r.owner(), Some(MAIN));
}

#[test]
fn after_invalidate_all_reads_fail_until_a_write() {
    let mut r = R3::new();
    assert_eq!(r.invalidate_all(), Ok(set(&[MAIN])));
    assert_eq!(
        r.acquire(GPU1, AccessMode::R),
        Err(CoherenceError::NoValidCopy)
    );
    assert_eq!(
        r.acquire(GPU1, AccessMode::RW),
        Err(CoherenceError::NoValidCopy)
    );
    assert_eq!(r.held(GPU1), 0);
    assert_eq!(r.before_send(), Err(CoherenceError::NoValidCopy));
    let w = r.acquire(GPU1, AccessMode::W).unwrap();
    assert!(w.is_ready() && w.invalidate.is_empty());
    assert_eq!(r.owner(), Some(GPU1));
}

#[test]
fn an_unexpected_transfer_is_refused() {
    let mut r = R3::new();
    let bogus = Fetch {
        from: MAIN,
        to: GPU1,
    };
    assert_eq!(
        r.handle_transfer_done(bogus),
        Err(CoherenceError::UnexpectedTransfer(bogus))
    );
    let f = r.acquire(GPU1, AccessMode::R).unwrap().fetch.unwrap();
    let wrong_source = Fetch {
        from: GPU2,
        to: GPU1,
    };
    assert_eq!(
        r.handle_transfer_done(wrong_source),
        Err(CoherenceError::UnexpectedTransfer(wrong_source))
    );
    assert_eq!(r.handle_transfer_done(f), Ok(NodeSet::EMPTY));
    assert_eq!(
        r.handle_transfer_done(f),
        Err(CoherenceError::UnexpectedTransfer(f))
    );
}

#[test]
fn a_failed_copy_leaves_the_destination_invalid_and_the_acquisition_held() {
    let mut r = R3::new();
    let f = r.acquire(GPU1, AccessMode::RW).unwrap().fetch.unwrap();
    assert_eq!(r.evict(MAIN), Err(CoherenceError::Busy(MAIN)));
    assert_eq!(r.handle_transfer_failed(f), Ok(()));
    assert_eq!(r.valid(), set(&[MAIN]));
    assert!(!r.is_fetching(GPU1));
    assert_eq!(
        r.handle_transfer_failed(f),
        Err(CoherenceError::UnexpectedTransfer(f))
    );
    r.release(GPU1, AccessMode::RW).unwrap();
    assert_eq!(r.held(GPU1), 0);
}

#[test]
fn node_sets_iterate_lowest_first() {
    let s = set(&[MemNode(5), MemNode(0), MemNode(63)]);
    assert_eq!(
        s.iter().collect::<Vec<_>>(),
        [MemNode(0), MemNode(5), MemNode(63)]
    );
    assert_eq!(s.len(), 3);
    assert_eq!(s.first(), Some(MemNode(0)));
    assert!(!s.contains(MemNode(64)));
    assert_eq!(NodeSet::single(MemNode(200)), NodeSet::EMPTY);
}

#[test]
fn errors_say_what_happened() {
    use std::string::ToString;
    assert_eq!(
        CoherenceError::LastCopy(MAIN).to_string(),
        "memory node 0 (main memory) holds the only valid copy; it cannot be evicted"
    );
    assert_eq!(
        CoherenceError::UnexpectedTransfer(Fetch {
            from: GPU1,
            to: MAIN
        })
        .to_string(),
        "no copy from memory node 1 to memory node 0 (main memory) is in flight"
    );
}

// ---------------------------------------------------------------------------------------
// Model test: the state machine against a plain reference model (one `bool` per node).

const N: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8, AccessMode),
    /// Complete the k-th copy in flight (or a copy that is not in flight).
    Done(usize),
    /// Fail the k-th copy in flight (or a copy that is not in flight).
    Fail(usize),
    /// Release the k-th held acquisition (or one that is not held).
    Release(usize),
    Evict(u8),
    BeforeSend,
    AfterReceive,
    InvalidateAll,
}

fn any_mode() -> impl Strategy<Value = AccessMode> {
    prop_oneof![
        Just(AccessMode::R),
        Just(AccessMode::W),
        Just(AccessMode::RW),
        Just(AccessMode::SCRATCH),
        Just(AccessMode::REDUX),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    // Node N (one past the end) exercises NodeOutOfRange.
    prop_oneof![
        4 => (0..=N as u8, any_mode()).prop_map(|(n, m)| Op::Acquire(n, m)),
        3 => (0..8usize).prop_map(Op::Done),
        1 => (0..8usize).prop_map(Op::Fail),
        3 => (0..8usize).prop_map(Op::Release),
        2 => (0..=N as u8).prop_map(Op::Evict),
        1 => Just(Op::BeforeSend),
        1 => Just(Op::AfterReceive),
        1 => Just(Op::InvalidateAll),
    ]
}

/// The reference model: plain vectors, one entry per node.
#[derive(Debug)]
struct Model {
    valid: Vec<bool>,
    /// Per node: the source of the copy in flight towards it.
    fetch_from: Vec<Option<usize>>,
    /// Held acquisitions, in order: (node, mode).
    held: Vec<(usize, AccessMode)>,
    /// The node holding a write, if any.
    writer: Option<usize>,
    /// The value was dropped by `invalidate_all` and not written since.
    dropped: bool,
}

impl Model {
    fn new() -> Self {
        let mut valid = vec![false; N];
        valid[0] = true;
        Self {
            valid,
            fetch_from: vec![None; N],
            held: Vec::new(),
            writer: None,
            dropped: false,
        }
    }

    fn valid_set(&self) -> NodeSet {
        (0..N)
            .filter(|&i| self.valid[i])
            .fold(NodeSet::EMPTY, |s, i| s.with(MemNode(i as u8)))
    }

    fn source_for(&self, dest: usize) -> Option<usize> {
        if dest != 0 && self.valid[0] {
            return Some(0);
        }
        (0..N).find(|&i| i != dest && self.valid[i])
    }

    fn first_held(&self) -> Option<usize> {
        (0..N).find(|&i| self.held.iter().any(|&(n, _)| n == i))
    }

    fn in_flight(&self) -> Vec<Fetch> {
        (0..N)
            .filter_map(|to| {
                self.fetch_from[to].map(|from| Fetch {
                    from: MemNode(from as u8),
                    to: MemNode(to as u8),
                })
            })
            .collect()
    }

    fn acquire(&mut self, n: usize, mode: AccessMode) -> Result<Acquire, CoherenceError> {
        if n >= N {
            return Err(CoherenceError::NodeOutOfRange(MemNode(n as u8)));
        }
        if let Some(w) = self.writer {
            return Err(CoherenceError::Busy(MemNode(w as u8)));
        }
        let reads = mode.intersects(AccessMode::R | AccessMode::REDUX);
        let writes = mode.intersects(AccessMode::W | AccessMode::REDUX);
        if writes {
            if let Some(h) = self.first_held() {
                return Err(CoherenceError::Busy(MemNode(h as u8)));
            }
        }
        let mut out = Acquire::default();
        if reads && !self.valid[n] {
            if self.fetch_from[n].is_some() {
                out.wait = true;
            } else {
                let from = self.source_for(n).ok_or(CoherenceError::NoValidCopy)?;
                self.fetch_from[n] = Some(from);
                out.fetch = Some(Fetch {
                    from: MemNode(from as u8),
                    to: MemNode(n as u8),
                });
            }
        }
        if writes {
            self.writer = Some(n);
            self.dropped = false;
            if out.fetch.is_none() {
                for i in 0..N {
                    if i != n && self.valid[i] {
                        out.invalidate = out.invalidate.with(MemNode(i as u8));
                    }
                    self.valid[i] = i == n;
                }
            }
        }
        self.held.push((n, mode));
        Ok(out)
    }

    fn done(&mut self, f: Fetch) -> Result<NodeSet, CoherenceError> {
        let (from, to) = (f.from.index(), f.to.index());
        if to >= N || from >= N || self.fetch_from[to] != Some(from) {
            return Err(CoherenceError::UnexpectedTransfer(f));
        }
        self.fetch_from[to] = None;
        let mut stale = NodeSet::EMPTY;
        if self.writer == Some(to) {
            for i in 0..N {
                if i != to && self.valid[i] {
                    stale = stale.with(MemNode(i as u8));
                    self.valid[i] = false;
                }
            }
        }
        self.valid[to] = true;
        Ok(stale)
    }

    fn fail(&mut self, f: Fetch) -> Result<(), CoherenceError> {
        let (from, to) = (f.from.index(), f.to.index());
        if to >= N || from >= N || self.fetch_from[to] != Some(from) {
            return Err(CoherenceError::UnexpectedTransfer(f));
        }
        self.fetch_from[to] = None;
        Ok(())
    }

    fn release(&mut self, n: usize, mode: AccessMode) -> Result<(), CoherenceError> {
        let node = MemNode(n as u8);
        if n >= N {
            return Err(CoherenceError::NodeOutOfRange(node));
        }
        let writes = mode.intersects(AccessMode::W | AccessMode::REDUX);
        let Some(pos) = self.held.iter().position(|&(h, _)| h == n) else {
            return Err(CoherenceError::NotAcquired(node));
        };
        if writes != (self.writer == Some(n)) {
            return Err(CoherenceError::NotAcquired(node));
        }
        if self.fetch_from[n].is_some() {
            return Err(CoherenceError::Busy(node));
        }
        self.held.remove(pos);
        if writes {
            self.writer = None;
        }
        Ok(())
    }

    fn evict(&mut self, n: usize) -> Result<bool, CoherenceError> {
        let node = MemNode(n as u8);
        if n >= N {
            return Err(CoherenceError::NodeOutOfRange(node));
        }
        let sourcing = self.fetch_from.contains(&Some(n));
        if self.held.iter().any(|&(h, _)| h == n) || sourcing || self.fetch_from[n].is_some() {
            return Err(CoherenceError::Busy(node));
        }
        if !self.valid[n] {
            return Ok(false);
        }
        if self.valid.iter().filter(|&&v| v).count() == 1 {
            return Err(CoherenceError::LastCopy(node));
        }
        self.valid[n] = false;
        Ok(true)
    }

    fn drop_all(&mut self, keep_main: bool) -> Result<NodeSet, CoherenceError> {
        if let Some(h) = self.first_held() {
            return Err(CoherenceError::Busy(MemNode(h as u8)));
        }
        let mut stale = self.valid_set();
        if keep_main {
            stale = stale.without(MAIN);
        }
        for (i, v) in self.valid.iter_mut().enumerate() {
            *v = keep_main && i == 0;
        }
        self.dropped = !keep_main;
        Ok(stale)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn replicas_agree_with_the_model_and_keep_the_invariants(
        ops in prop::collection::vec(any_op(), 0..120),
    ) {
        let mut r = Replicas::<N>::new();
        let mut m = Model::new();
        for op in ops {
            let valid_before = m.valid.clone();
            match op {
                Op::Acquire(n, mode) => {
                    let node = MemNode(n);
                    let got = r.acquire(node, mode);
                    let want = m.acquire(n as usize, mode);
                    prop_assert_eq!(got, want);
                    if let Ok(a) = got {
                        if let Some(f) = a.fetch {
                            // A read fetches from a node that was valid, never into a valid node.
                            prop_assert!(valid_before[f.from.index()]);
                            prop_assert!(!valid_before[n as usize]);
                            prop_assert_eq!(f.to, node);
                        }
                        if valid_before.get(n as usize) == Some(&true) {
                            prop_assert!(a.is_ready(), "fetch or wait for a valid node");
                        }
                        if mode.writes() && a.fetch.is_none() {
                            // After a write only the writer's node is valid.
                            prop_assert_eq!(r.valid(), NodeSet::single(node));
                        }
                    }
                }
                Op::Done(k) => {
                    let flights = m.in_flight();
                    let f = if flights.is_empty() {
                        Fetch { from: MemNode((k % N) as u8), to: MemNode(((k + 1) % N) as u8) }
                    } else {
                        flights[k % flights.len()]
                    };
                    let got = r.handle_transfer_done(f);
                    prop_assert_eq!(got, m.done(f));
                    if got.is_ok() {
                        // The destination of a read is valid once the copy landed.
                        prop_assert!(r.valid().contains(f.to));
                        if r.writer() == Some(f.to) {
                            prop_assert_eq!(r.valid(), NodeSet::single(f.to));
                        }
                    }
                }
                Op::Fail(k) => {
                    let flights = m.in_flight();
                    let f = if flights.is_empty() {
                        Fetch { from: MemNode((k % N) as u8), to: MemNode(((k + 1) % N) as u8) }
                    } else {
                        flights[k % flights.len()]
                    };
                    let valid = r.valid();
                    let got = r.handle_transfer_failed(f);
                    prop_assert_eq!(got, m.fail(f));
                    // A failed copy changes no valid copy.
                    prop_assert_eq!(r.valid(), valid);
                }
                Op::Release(k) => {
                    let (n, mode) = if m.held.is_empty() {
                        ((k % N) as u8, AccessMode::R)
                    } else {
                        let (n, mode) = m.held[k % m.held.len()];
                        (n as u8, mode)
                    };
                    prop_assert_eq!(r.release(MemNode(n), mode), m.release(n as usize, mode));
                }
                Op::Evict(n) => {
                    prop_assert_eq!(r.evict(MemNode(n)), m.evict(n as usize));
                }
                Op::BeforeSend => {
                    let want = if m.valid[0] {
                        Ok(BeforeSend::MainRam)
                    } else {
                        m.source_for(0)
                            .map(|s| BeforeSend::StageFrom(MemNode(s as u8)))
                            .ok_or(CoherenceError::NoValidCopy)
                    };
                    prop_assert_eq!(r.before_send(), want);
                }
                Op::AfterReceive => {
                    prop_assert_eq!(r.after_receive(), m.drop_all(true));
                }
                Op::InvalidateAll => {
                    prop_assert_eq!(r.invalidate_all(), m.drop_all(false));
                }
            }
            prop_assert_eq!(r.valid(), m.valid_set());
            for (i, &from) in m.fetch_from.iter().enumerate() {
                prop_assert_eq!(r.is_fetching(MemNode(i as u8)), from.is_some());
                if let Some(from) = from {
                    // A copy in flight always reads a valid node.
                    prop_assert!(m.valid[from]);
                }
            }
            for i in 0..N {
                let held = m.held.iter().filter(|&&(h, _)| h == i).count() as u32;
                prop_assert_eq!(r.held(MemNode(i as u8)), held);
            }
            prop_assert_eq!(r.writer().map(MemNode::index), m.writer);
            // At least one valid copy, unless the value was dropped and not written since.
            prop_assert!(m.dropped || !r.valid().is_empty());
        }
    }
}
