//! The `engine_sim` target: the protocol engine on 2–4 ranks of the deterministic
//! simulator (`starling_std::sim::Cluster`), driven by arbitrary operations and an
//! arbitrary interleaving seed.
//!
//! The input sets the cluster up (ranks, eager limit, in-flight cap, priorities, the
//! simulator's seed, whose parity picks the network's ordering) and lists operations: sends and receives (standard, synchronous,
//! detached; sizes on both sides of the eager limit; receive buffers that may be too
//! small; self-sends; express sends, which leave without a request when the engine lets
//! them), "make this request's data ready", "deliver a few messages", and
//! submissions the engine must refuse. Sends and receives need not pair up. The checker
//! numbers each (communicator, source, destination, tag) key's sends and receives in
//! submission order; the k-th receive of a key must get the k-th send's payload (MPI's
//! non-overtaking rule). Checked while running and at the end, once every request's data
//! was made ready and the network drained:
//!
//! * every completion names a live request, of the right kind, and each request completes
//!   at most once; a send never fails;
//! * a receive completes only with its paired send, with exactly that payload, or fails
//!   with `Truncated` exactly when the payload is longer than its buffer;
//! * at the end, per key with `s` sends and `r` receives, the first `min(s, r)` of each
//!   completed, the extra receives are pending, the extra standard sends completed and
//!   their messages are orphans on the receiver, the extra synchronous sends are pending
//!   with their envelopes orphaned — and nothing else is left anywhere;
//! * a submission to a rank outside the world is refused with a typed error.
//!
//! The simulator panics if an engine returns an error for something a well-behaved peer
//! did, so any engine error there is a finding too.
//!
//! [`run_admitted`] (the `admission_sim` target) runs the same operations through the
//! adapter's admission ([`Cluster::post_send`], [`Cluster::post_recv`]: what does not fit
//! waits outside the engine, refused envelopes are kept and handed in again) on engines of
//! tiny tables (16 requests shared out as 4, 2 match keys), with the fast path on for
//! half the seeds (a fast limit of 8 or 256 bytes), so that every case overflows the
//! tables. There, once every request was made ready and the network drained, the flows
//! are paired up (a receive of the largest size for each extra send, a standard send for
//! each extra receive) and drained again: then every request must have completed, each
//! receive with its own send's payload (or `Truncated`), and nothing may be left — no
//! leftover, no submission that never went in, nothing in the transports. A full table is
//! a wait, never a loss or a hang.

use std::collections::{BTreeMap, HashMap, VecDeque};

use arbitrary::{Arbitrary, Unstructured};
use starling_core::engine::{Leftover, RecvArgs, RequestError, SendArgs, SubmitError};
use starling_core::request::Kind;
use starling_core::{CommId, Priority, Rank, ReqId, Tag};
use starling_std::sim::{Cluster, Network, Ticket};

/// Payload sizes: around the eager limits (0, 8, 256) and beyond.
const SIZES: [usize; 11] = [0, 1, 7, 8, 9, 200, 255, 256, 257, 1000, 5000];
/// The most operations one case runs (the simulator's engines hold 1024 requests).
const MAX_OPS: usize = 300;

/// A point-to-point operation or a scheduling choice.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Op {
    /// Submit a send (its data is not ready yet).
    Send {
        /// Source rank (modulo the ranks).
        src: u8,
        /// Destination rank (modulo the ranks).
        dst: u8,
        /// Communicator 1 instead of the world.
        comm: bool,
        /// Tag `tag % 3 - 1`.
        tag: u8,
        /// Size: an index into the size table.
        size: u8,
        /// Synchronous (`issend`).
        sync: bool,
        /// Detached.
        detached: bool,
    },
    /// Submit a receive (its buffer is not ready yet).
    Recv {
        /// Source rank (modulo the ranks).
        src: u8,
        /// Receiving rank (modulo the ranks).
        dst: u8,
        /// Communicator 1 instead of the world.
        comm: bool,
        /// Tag `tag % 3 - 1`.
        tag: u8,
        /// Even: the largest size; odd: an index into the size table (may truncate).
        capacity: u8,
        /// Detached.
        detached: bool,
    },
    /// A send whose data is ready as it is submitted, as the threaded adapter's blocking
    /// send of an idle handle: it leaves at once without a request when the engine lets
    /// it ([`Cluster::express_send`], protocol §8.2), and is submitted as any other, ready,
    /// otherwise. Skipped while an earlier send of its key waits for its data (the
    /// adapter's sends are ready as they are submitted).
    Express {
        /// Source rank (modulo the ranks).
        src: u8,
        /// Destination rank (modulo the ranks).
        dst: u8,
        /// Communicator 1 instead of the world.
        comm: bool,
        /// Tag `tag % 3 - 1`.
        tag: u8,
        /// Size: an index into the size table.
        size: u8,
    },
    /// Make the data of the oldest not-ready request of one of `rank`'s keys ready.
    Ready {
        /// The rank (modulo the ranks).
        rank: u8,
        /// Which of its keys.
        pick: u8,
    },
    /// Deliver `count % 8` messages.
    Deliver {
        /// How many.
        count: u8,
    },
    /// Submit a send or receive naming a rank outside the world: it must be refused.
    OutOfRange {
        /// The submitting rank.
        rank: u8,
        /// A receive instead of a send.
        recv: bool,
    },
}

/// One fuzz case.
#[derive(Arbitrary, Debug)]
pub struct Case {
    /// `2 + ranks % 3` ranks.
    pub ranks: u8,
    /// Eager limit: 0, 8 or 256.
    pub eager: u8,
    /// In-flight cap `cap % 4` (0: none).
    pub cap: u8,
    /// Whether priorities are honoured.
    pub priorities: bool,
    /// The simulator's seed: which link delivers next. Odd seeds run over MPI's ordering
    /// only ([`Network::PerTag`]: a payload may overtake its envelope, sends complete on
    /// steps of their own), even ones keep each pair's order.
    pub seed: u64,
    /// Priorities per key (all sends of a key share one, as the non-overtaking rule
    /// requires of sends that may wait together in the ready list).
    pub key_priority: [i8; 4],
    /// The operations.
    pub ops: Vec<Op>,
}

/// Builds a [`Case`] from `data` and checks it; panics on a violation.
pub fn run(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    check(&case);
}

/// Builds a [`Case`] from `data` and checks it through the admission on tiny tables
/// ([`check_admitted`]); panics on a violation.
pub fn run_admitted(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    check_admitted(&case);
}

/// (communicator, source, destination, tag).
type Key = (CommId, u32, u32, Tag);

#[derive(Debug)]
struct SendRec {
    payload: Vec<u8>,
    sync: bool,
    completed: bool,
}

#[derive(Debug)]
struct RecvRec {
    capacity: usize,
    completed: bool,
}

#[derive(Default)]
struct Flows {
    sends: Vec<SendRec>,
    recvs: Vec<RecvRec>,
}

/// A request as the checker names it: by the engine's id when submitted to the engine
/// directly, by its ticket when submitted through the admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Id {
    Req(ReqId),
    Ticket(Ticket),
}

/// A live request: its key, whether it is a send, its number within the key, detached.
#[derive(Clone, Copy, Debug)]
struct Live {
    key: Key,
    send: bool,
    index: usize,
    detached: bool,
}

struct Checker<const REQ: usize, const KEYS: usize, const PEERS: usize> {
    n: u32,
    cluster: Cluster<REQ, KEYS, PEERS>,
    flows: BTreeMap<Key, Flows>,
    live: Vec<HashMap<Id, Live>>,
    /// Per rank: requests submitted whose data is not ready, FIFO per (send?, key).
    not_ready: Vec<BTreeMap<(bool, Key), VecDeque<Id>>>,
    key_priority: [i8; 4],
    /// Submissions go through the admission ([`run_admitted`]).
    admitted: bool,
}

fn payload(key: Key, index: usize, size: usize) -> Vec<u8> {
    let salt = (key.0.0 as usize) * 7 + (key.1 as usize) * 13 + (key.2 as usize) * 17;
    (0..size)
        .map(|i| (index.wrapping_mul(31) ^ i.wrapping_mul(7) ^ salt ^ (i >> 8)) as u8)
        .collect()
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Checker<REQ, KEYS, PEERS> {
    fn rank(&self, r: u8) -> u32 {
        u32::from(r) % self.n
    }

    fn key(&self, comm: bool, src: u8, dst: u8, tag: u8) -> Key {
        (
            CommId(u16::from(comm)),
            self.rank(src),
            self.rank(dst),
            Tag(i64::from(tag % 3) - 1),
        )
    }

    fn priority(&self, key: Key) -> Priority {
        let i =
            (key.0.0 as usize + key.1 as usize * 2 + key.2 as usize * 3 + (key.3.0 + 1) as usize)
                % self.key_priority.len();
        Priority(i32::from(self.key_priority[i] % 3))
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Send {
                src,
                dst,
                comm,
                tag,
                size,
                sync,
                detached,
            } => {
                let key = self.key(comm, src, dst, tag);
                let priority = self.priority(key);
                let flows = self.flows.entry(key).or_default();
                let index = flows.sends.len();
                let data = payload(key, index, SIZES[usize::from(size) % SIZES.len()]);
                let mut args = SendArgs::new(key.0, Rank(key.2), key.3, 0);
                args.sync = sync;
                args.detached = detached;
                args.priority = priority;
                let req = if self.admitted {
                    Id::Ticket(
                        self.cluster
                            .post_send(Rank(key.1), args, data.clone(), false),
                    )
                } else {
                    Id::Req(
                        self.cluster
                            .try_send(Rank(key.1), args, data.clone(), false)
                            .unwrap_or_else(|e| panic!("send {key:?} refused: {e}")),
                    )
                };
                flows.sends.push(SendRec {
                    payload: data,
                    sync,
                    completed: false,
                });
                self.submitted(key.1, req, key, true, index, detached);
            }
            Op::Recv {
                src,
                dst,
                comm,
                tag,
                capacity,
                detached,
            } => {
                let key = self.key(comm, src, dst, tag);
                let capacity = if capacity % 2 == 0 {
                    SIZES[SIZES.len() - 1]
                } else {
                    SIZES[usize::from(capacity / 2) % SIZES.len()]
                };
                let flows = self.flows.entry(key).or_default();
                let index = flows.recvs.len();
                let mut args = RecvArgs::new(key.0, Rank(key.1), key.3, capacity as u64);
                args.detached = detached;
                let req = if self.admitted {
                    Id::Ticket(self.cluster.post_recv(Rank(key.2), args, false))
                } else {
                    Id::Req(
                        self.cluster
                            .try_recv(Rank(key.2), args, false)
                            .unwrap_or_else(|e| panic!("receive {key:?} refused: {e}")),
                    )
                };
                flows.recvs.push(RecvRec {
                    capacity,
                    completed: false,
                });
                self.submitted(key.2, req, key, false, index, detached);
            }
            Op::Express {
                src,
                dst,
                comm,
                tag,
                size,
            } => {
                let key = self.key(comm, src, dst, tag);
                if self.not_ready[key.1 as usize].contains_key(&(true, key)) {
                    return;
                }
                let index = self.flows.entry(key).or_default().sends.len();
                let data = payload(key, index, SIZES[usize::from(size) % SIZES.len()]);
                let mut args = SendArgs::new(key.0, Rank(key.2), key.3, 0);
                args.priority = self.priority(key);
                if self.cluster.express_send(Rank(key.1), args, data.clone()) {
                    self.flows.entry(key).or_default().sends.push(SendRec {
                        payload: data,
                        sync: false,
                        completed: true,
                    });
                    return;
                }
                self.apply(Op::Send {
                    src,
                    dst,
                    comm,
                    tag,
                    size,
                    sync: false,
                    detached: true,
                });
                self.ready(key.1, (true, key));
            }
            Op::Ready { rank, pick } => {
                let r = self.rank(rank);
                let queues = &mut self.not_ready[r as usize];
                if queues.is_empty() {
                    return;
                }
                let k = *queues
                    .keys()
                    .nth(usize::from(pick) % queues.len())
                    .expect("in range");
                self.ready(r, k);
            }
            Op::Deliver { count } => {
                for _ in 0..count % 8 {
                    if !self.cluster.step() {
                        break;
                    }
                }
            }
            // (through the admission, a refusal for anything but room is a test bug: the
            // direct runs check this one)
            Op::OutOfRange { .. } if self.admitted => {}
            Op::OutOfRange { rank, recv } => {
                let r = Rank(self.rank(rank));
                let outside = Rank(self.n + u32::from(rank % 3));
                let got = if recv {
                    self.cluster
                        .try_recv(r, RecvArgs::new(CommId::WORLD, outside, Tag(0), 4), true)
                } else {
                    self.cluster.try_send(
                        r,
                        SendArgs::new(CommId::WORLD, outside, Tag(0), 0),
                        vec![1, 2],
                        true,
                    )
                };
                assert!(
                    matches!(got, Err(SubmitError::RankOutOfRange { rank, nranks }) if rank == outside && nranks == self.n),
                    "submission to {outside} gave {got:?}"
                );
            }
        }
        self.collect();
    }

    fn submitted(
        &mut self,
        rank: u32,
        req: Id,
        key: Key,
        send: bool,
        index: usize,
        detached: bool,
    ) {
        let live = Live {
            key,
            send,
            index,
            detached,
        };
        if let Some(old) = self.live[rank as usize].insert(req, live) {
            panic!("rank {rank}: {req:?} issued while still live as {old:?}");
        }
        self.not_ready[rank as usize]
            .entry((send, key))
            .or_default()
            .push_back(req);
    }

    /// Makes the oldest not-ready request of (`send?`, key) on `rank` ready.
    fn ready(&mut self, rank: u32, k: (bool, Key)) {
        let queues = &mut self.not_ready[rank as usize];
        let q = queues.get_mut(&k).expect("present");
        let req = q.pop_front().expect("non-empty");
        if q.is_empty() {
            queues.remove(&k);
        }
        match req {
            Id::Req(req) => self.cluster.data_ready(Rank(rank), req),
            Id::Ticket(t) => self.cluster.ticket_ready(Rank(rank), t),
        }
    }

    /// Takes every completion and checks it.
    fn collect(&mut self) {
        // (retiring a completion may let a waiting submission in, which may complete at
        // once: collected until none is left)
        let mut again = true;
        while again {
            again = false;
            for r in 0..self.n {
                let done = self.cluster.take_completions(Rank(r));
                again |= !done.is_empty();
                self.check_completions(r, done);
            }
        }
    }

    /// Checks the completions `done` of rank `r`.
    fn check_completions(&mut self, r: u32, done: Vec<starling_std::sim::Completion>) {
        {
            for c in done {
                let id = match (self.admitted, c.ticket) {
                    (true, Some(t)) => Id::Ticket(t),
                    (true, None) => panic!("rank {r}: completion without a ticket: {c:?}"),
                    (false, _) => Id::Req(c.req),
                };
                let Some(live) = self.live[r as usize].remove(&id) else {
                    panic!("rank {r}: completion of {} which is not live: {c:?}", c.req);
                };
                let flows = self.flows.get_mut(&live.key).expect("key");
                if live.send {
                    assert_eq!(c.kind, Kind::Send, "{live:?}");
                    assert_eq!(c.error, None, "send {live:?} failed");
                    let s = &mut flows.sends[live.index];
                    assert!(!s.completed, "send {live:?} completed twice");
                    s.completed = true;
                } else {
                    assert_eq!(c.kind, Kind::Recv, "{live:?}");
                    let Some(s) = flows.sends.get(live.index) else {
                        panic!("receive {live:?} completed before its send was submitted");
                    };
                    let rec = &mut flows.recvs[live.index];
                    assert!(!rec.completed, "receive {live:?} completed twice");
                    rec.completed = true;
                    if s.payload.len() > rec.capacity {
                        assert_eq!(
                            c.error,
                            Some(RequestError::Truncated {
                                capacity: rec.capacity as u64,
                                size: s.payload.len() as u64,
                            }),
                            "receive {live:?}"
                        );
                    } else {
                        assert_eq!(c.error, None, "receive {live:?}");
                        assert!(c.data == s.payload, "receive {live:?}: wrong payload");
                    }
                }
                if !live.detached {
                    self.cluster.retire(Rank(r), c.req);
                }
            }
        }
    }

    /// Makes every request ready and drains the network, until nothing moves.
    fn drain(&mut self) {
        loop {
            let mut moved = false;
            for r in 0..self.n {
                while let Some(&k) = self.not_ready[r as usize].keys().next() {
                    self.ready(r, k);
                    self.collect();
                    moved = true;
                }
            }
            moved |= self.cluster.run_until_quiet() > 0;
            self.collect();
            // (retiring a completion frees a slot, which lets a waiting submission in and
            // may send something: not done while anything is in flight)
            if !moved && self.cluster.channels() == 0 {
                break;
            }
        }
    }

    /// What every rank has left and keeps waiting, for a failure message.
    fn dump(&self) -> String {
        (0..self.n)
            .map(|r| format!("\nrank {r}: {}", self.cluster.describe(Rank(r))))
            .collect()
    }

    /// Through the admission: pairs the flows up (a receive of the largest size for each
    /// extra send, a standard send for each extra receive), drains again, and checks that
    /// everything completed and nothing is left anywhere.
    fn finish_admitted(&mut self) {
        self.drain();
        let keys: Vec<Key> = self.flows.keys().copied().collect();
        for key in keys {
            loop {
                let f = &self.flows[&key];
                let (s, r) = (f.sends.len(), f.recvs.len());
                let tag = u8::try_from(key.3.0 + 1).expect("tags -1..=1");
                let (src, dst, comm) = (key.1 as u8, key.2 as u8, key.0.0 == 1);
                let op = match s.cmp(&r) {
                    core::cmp::Ordering::Greater => Op::Recv {
                        src,
                        dst,
                        comm,
                        tag,
                        capacity: 0,
                        detached: false,
                    },
                    core::cmp::Ordering::Less => Op::Send {
                        src,
                        dst,
                        comm,
                        tag,
                        size: 3,
                        sync: false,
                        detached: false,
                    },
                    core::cmp::Ordering::Equal => break,
                };
                self.apply(op);
            }
        }
        self.drain();
        for (key, f) in &self.flows {
            let sends = f.sends.iter().map(|s| ("send", s.completed, f.sends.len()));
            let recvs = f
                .recvs
                .iter()
                .map(|r| ("receive", r.completed, f.recvs.len()));
            for (i, (what, completed, of)) in sends.enumerate().chain(recvs.enumerate()) {
                assert!(
                    completed,
                    "{key:?}: {what} {i} of {of} never completed; {}",
                    self.dump()
                );
            }
        }
        for r in 0..self.n {
            let rank = Rank(r);
            assert!(
                self.cluster.leftovers(rank).is_empty()
                    && self.cluster.never_admitted(rank).is_empty(),
                "rank {r}: {}",
                self.cluster.describe(rank)
            );
        }
        assert!(
            self.cluster.is_quiet(),
            "not quiet with everything completed"
        );
        assert!(
            self.cluster.transports_empty(),
            "a message left in a transport"
        );
    }

    /// Makes every request ready, drains the network, and checks what is left.
    fn finish(&mut self) {
        self.drain();
        let mut expected: Vec<BTreeMap<String, usize>> = vec![BTreeMap::new(); self.n as usize];
        for (key, f) in &self.flows {
            let pairs = f.sends.len().min(f.recvs.len());
            for (i, s) in f.sends.iter().enumerate() {
                let should = i < pairs || !s.sync;
                assert_eq!(
                    s.completed,
                    should,
                    "{key:?}: send {i} of {}, {pairs} pairs",
                    f.sends.len()
                );
                if i >= pairs {
                    *expected[key.2 as usize]
                        .entry(format!("orphan {key:?} sync={}", s.sync))
                        .or_default() += 1;
                    if s.sync {
                        *expected[key.1 as usize]
                            .entry(format!("pending send {key:?}"))
                            .or_default() += 1;
                    }
                }
            }
            for (i, r) in f.recvs.iter().enumerate() {
                assert_eq!(
                    r.completed,
                    i < pairs,
                    "{key:?}: receive {i} of {}",
                    f.recvs.len()
                );
                if i >= pairs {
                    *expected[key.2 as usize]
                        .entry(format!("pending recv {key:?}"))
                        .or_default() += 1;
                }
            }
        }
        let mut all_clear = true;
        for r in 0..self.n {
            let mut got: BTreeMap<String, usize> = BTreeMap::new();
            for left in self.cluster.leftovers(Rank(r)) {
                let what = match left {
                    Leftover::Orphan(o) => format!(
                        "orphan {:?} sync={}",
                        (o.comm, o.source.0, r, o.tag),
                        o.kind == starling_core::matcher::UnexpectedKind::Sync
                    ),
                    Leftover::Pending {
                        kind: Kind::Send,
                        comm,
                        peer,
                        tag,
                        ..
                    } => format!("pending send {:?}", (comm, r, peer.0, tag)),
                    Leftover::Pending {
                        kind: Kind::Recv,
                        comm,
                        peer,
                        tag,
                        ..
                    } => format!("pending recv {:?}", (comm, peer.0, r, tag)),
                    other => panic!("rank {r}: unexpected leftover {other:?}"),
                };
                *got.entry(what).or_default() += 1;
            }
            all_clear &= got.is_empty();
            assert_eq!(got, expected[r as usize], "rank {r}: leftovers");
        }
        assert_eq!(
            self.cluster.is_quiet(),
            all_clear,
            "quiet iff nothing is left"
        );
    }
}

/// Checks one case; panics on a violation.
pub fn check(case: &Case) {
    let s = Setup::of(case);
    let cluster = Cluster::with_config(s.n, case.seed, |c| s.configure(c)).with_network(s.network);
    let mut checker = Checker::new(case, cluster, false);
    for op in case.ops.iter().take(MAX_OPS) {
        checker.apply(*op);
    }
    checker.finish();
}

/// Checks one case through the admission, on engines of 16 requests (a budget of 4) and
/// 2 match keys; panics on a violation.
pub fn check_admitted(case: &Case) {
    let s = Setup::of(case);
    // Half the seeds with the fast path (small messages on tags 0 and 1 alone on their
    // fast tag, the others with a marker there): a limit of 8 bytes, or of 256, which
    // sends messages of 9 to 256 bytes on the fast tag, to receives that may be smaller.
    let fast = [0u32, 0, 8, 256][(case.seed / 2 % 4) as usize];
    let cluster = Cluster::<16, 2, 4>::sized(s.n, case.seed, |c| {
        s.configure(c);
        c.request_limit = 4;
        c.key_limit = 2;
        if fast > 0 {
            c.tags = c.tags.with_fast();
            c.fast_limit = fast;
        }
    })
    .with_network(s.network);
    let mut checker = Checker::new(case, cluster, true);
    for op in case.ops.iter().take(MAX_OPS) {
        checker.apply(*op);
    }
    checker.finish_admitted();
}

/// What a case sets up: ranks, eager limit, in-flight cap, priorities, network order.
struct Setup {
    n: u32,
    eager: u32,
    cap: u32,
    priorities: bool,
    network: Network,
}

impl Setup {
    fn of(case: &Case) -> Self {
        Self {
            n: 2 + u32::from(case.ranks % 3),
            eager: [0u32, 8, 256][usize::from(case.eager % 3)],
            cap: u32::from(case.cap % 4),
            priorities: case.priorities,
            network: if case.seed % 2 == 1 {
                Network::PerTag
            } else {
                Network::PerPair
            },
        }
    }

    fn configure(&self, c: &mut starling_core::engine::Config) {
        c.eager_limit = self.eager;
        c.max_inflight_sends = self.cap;
        c.priorities = self.priorities;
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Checker<REQ, KEYS, PEERS> {
    fn new(case: &Case, cluster: Cluster<REQ, KEYS, PEERS>, admitted: bool) -> Self {
        let n = cluster.size();
        Self {
            n,
            cluster,
            flows: BTreeMap::new(),
            live: vec![HashMap::new(); n as usize],
            not_ready: vec![BTreeMap::new(); n as usize],
            key_priority: case.key_priority,
            admitted,
        }
    }
}
