//! Delivery: driven by any interleaving that keeps MPI's ordering, every request
//! completes exactly once and every payload reaches the right receive, in FIFO order per
//! (communicator, source, tag); nothing is left at the end.
//!
//! Each seed builds a random point-to-point workload (standard, synchronous, detached,
//! eager and two-message payloads, same-tag bursts, receives posted before and after
//! their messages arrive, data made ready late) and runs it on `starling::sim::Cluster`.
//! A failure prints its seed; replay one seed with `STARLING_SIM_SEED=<seed> cargo test
//! --test delivery`; search longer with `STARLING_SIM_SEEDS=<count>` (seeds per test). Odd seeds run over MPI's ordering only (`Network::PerTag`: a payload
//! may overtake its envelope), even seeds keep each pair's order.
//!
//! The `every_interleaving_of_*` tests run small fixed workloads in every interleaving
//! instead, one per path of a `starling::sim::Explorer` (docs/verification.md).

use core::panic::AssertUnwindSafe;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{catch_unwind, resume_unwind};

use starling::core::engine::{RecvArgs, RequestError, SendArgs};
use starling::core::request::Kind;
use starling::core::{CommId, Priority, Rank, Tag};
use starling::sim::{Cluster, Explorer, Network, SplitMix64, Ticket};

/// One user message of the workload.
#[derive(Clone, Debug)]
struct Msg {
    src: u32,
    dst: u32,
    comm: CommId,
    tag: Tag,
    size: usize,
    sync: bool,
    detached_send: bool,
    detached_recv: bool,
    slack: usize,
    /// Bytes its receive lacks (with no slack): more than 0 and the receive fails with
    /// `Truncated`, the send succeeds, and the payload is dropped.
    short: usize,
    /// Its send and its receive acquire their data as a step of their own, after being
    /// submitted (otherwise in the same step).
    late: bool,
    /// Where its receive comes in its rank's script ([`Setup::scripted`]): receives are
    /// posted by ascending `recv_order`.
    recv_order: i64,
}

type Key = (CommId, u32, u32, Tag);

impl Msg {
    fn key(&self) -> Key {
        (self.comm, self.src, self.dst, self.tag)
    }

    /// The receive's buffer.
    fn capacity(&self) -> usize {
        (self.size + self.slack).saturating_sub(self.short)
    }

    /// How its receive fails: `Truncated` when the buffer is shorter than the message.
    fn truncation(&self) -> Option<RequestError> {
        (self.capacity() < self.size).then(|| RequestError::Truncated {
            capacity: self.capacity() as u64,
            size: self.size as u64,
        })
    }

    fn payload(&self, index: usize) -> Vec<u8> {
        (0..self.size)
            .map(|i| (index.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8)
            .collect()
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Send(usize),
    Recv(usize),
}

fn workload(rng: &mut SplitMix64, nranks: u32) -> Vec<Msg> {
    const SIZES: [usize; 9] = [0, 1, 8, 200, 255, 256, 257, 1000, 5000];
    let count = 1 + rng.below(60);
    let ntags = 1 + rng.below(4); // few tags: same-tag bursts
    (0..count)
        .map(|_| {
            let src = rng.below(nranks as usize) as u32;
            let dst = if rng.chance(1, 12) {
                src // a rank may send to itself
            } else {
                rng.below(nranks as usize) as u32
            };
            Msg {
                src,
                dst,
                comm: CommId(rng.below(2) as u16),
                tag: Tag(rng.below(ntags) as i64 - 1), // negative tags are legal
                size: SIZES[rng.below(SIZES.len())],
                sync: rng.chance(1, 4),
                detached_send: rng.chance(1, 2),
                detached_recv: rng.chance(1, 2),
                slack: if rng.chance(1, 3) { rng.below(16) } else { 0 },
                short: 0,
                late: true,
                recv_order: 0,
            }
        })
        .collect()
}

/// A random interleaving of `rank`'s operations that keeps each key's order.
/// Where a run's choices come from: a seeded generator (one random interleaving) or an
/// [`Explorer`] (every interleaving, one per path).
enum Chooser<'a> {
    Seeded(&'a mut SplitMix64),
    Every(&'a mut Explorer),
}

impl Chooser<'_> {
    fn below(&mut self, n: usize) -> usize {
        match self {
            Self::Seeded(rng) => rng.below(n),
            Self::Every(e) => e.choose(n),
        }
    }
}

fn schedule(rng: &mut Chooser<'_>, msgs: &[Msg], rank: u32, scripted: bool) -> VecDeque<Op> {
    if scripted {
        // Sends in message order, then receives by their `recv_order`.
        let mut recvs: Vec<usize> = (0..msgs.len()).filter(|&i| msgs[i].dst == rank).collect();
        recvs.sort_by_key(|&i| (msgs[i].recv_order, i));
        return (0..msgs.len())
            .filter(|&i| msgs[i].src == rank)
            .map(Op::Send)
            .chain(recvs.into_iter().map(Op::Recv))
            .collect();
    }
    let mut queues: BTreeMap<(bool, Key), VecDeque<Op>> = BTreeMap::new();
    for (i, m) in msgs.iter().enumerate() {
        if m.src == rank {
            queues
                .entry((true, m.key()))
                .or_default()
                .push_back(Op::Send(i));
        }
        if m.dst == rank {
            queues
                .entry((false, m.key()))
                .or_default()
                .push_back(Op::Recv(i));
        }
    }
    let mut out = VecDeque::new();
    while !queues.is_empty() {
        let k = *queues
            .keys()
            .nth(rng.below(queues.len()))
            .expect("non-empty");
        let q = queues.get_mut(&k).expect("present");
        out.push_back(q.pop_front().expect("non-empty"));
        if q.is_empty() {
            queues.remove(&k);
        }
    }
    out
}

/// The engine settings of a run.
#[derive(Clone, Copy, Debug)]
struct Setup {
    nranks: u32,
    eager_limit: u32,
    /// In-flight cap (0 = none).
    cap: u32,
    priorities: bool,
    network: Network,
    /// Engines with two match keys and 16 requests ([`tiny`]): receives of a third key
    /// wait in the engine's deferred queue, envelopes of a third key are refused and
    /// handed in again.
    tiny: bool,
    /// And a run-time request limit of 4 (the threaded runtime's `Tables::TINY`): the
    /// slab shared out as 2 sends, 2 receives, 1 early buffer; submissions wait for
    /// room in the adapter's queues.
    budget: bool,
    /// Each rank submits in one fixed order ([`schedule`]): only the interleavings of the
    /// ranks' steps and the network's are explored.
    scripted: bool,
    /// The fast path (protocol §19) for sends of 1 to this many bytes; 0: off.
    fast_limit: u32,
}

fn run_seed(seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let nranks = 2 + rng.below(4) as u32;
    let eager_limit = [0u32, 8, 256][rng.below(3)];
    let cap = rng.below(4) as u32; // 0 = no in-flight cap
    let priorities = rng.chance(1, 2);
    let msgs = workload(&mut rng, nranks);
    // One priority per key, so equal-priority FIFO keeps each key's order.
    let mut key_prio: HashMap<Key, i32> = HashMap::new();
    for m in &msgs {
        let p = rng.below(3) as i32 - 1;
        key_prio.entry(m.key()).or_insert(p);
    }
    // Odd seeds run over MPI's own guarantee only (payloads may overtake envelopes).
    let network = if seed % 2 == 1 {
        Network::PerTag
    } else {
        Network::PerPair
    };
    let setup = Setup {
        nranks,
        eager_limit,
        cap,
        priorities,
        network,
        tiny: false,
        budget: false,
        scripted: false,
        // A third of the seeds run with the fast path: small messages on non-negative
        // tags go alone on their fast tag, the others leave a marker there.
        fast_limit: [0, 0, 8][(seed / 2 % 3) as usize],
    };
    let cluster = cluster(setup, seed ^ 0x5eed);
    execute(
        &format!("seed {seed}"),
        cluster,
        &msgs,
        &key_prio,
        &mut Chooser::Seeded(&mut rng),
        false,
    );
}

fn cluster(setup: Setup, seed: u64) -> Cluster {
    Cluster::with_config(setup.nranks, seed, |c| configure(setup, c)).with_network(setup.network)
}

/// A cluster of engines with 16 requests, two match keys (heapless's least) and 4 peers.
fn tiny(setup: Setup) -> Cluster<16, 2, 4> {
    Cluster::sized(setup.nranks, 0, |c| configure(setup, c)).with_network(setup.network)
}

fn configure(setup: Setup, c: &mut starling::core::engine::Config) {
    c.eager_limit = setup.eager_limit;
    c.max_inflight_sends = setup.cap;
    c.priorities = setup.priorities;
    if setup.fast_limit > 0 {
        c.tags = c.tags.with_fast();
        c.fast_limit = setup.fast_limit;
    }
    if setup.budget {
        c.request_limit = 4;
        c.key_limit = 2;
    }
}

/// Runs the workload `msgs` on `cluster`, each rank submitting its operations in an order
/// `chooser` picks (keeping each key's order), and checks that every request completes
/// exactly once without error, every payload reaches the receive of its index in FIFO
/// order per key, and nothing is left. `run` names the run in failures. With `scripted`,
/// each rank submits in its fixed order ([`schedule`]).
fn execute<const REQ: usize, const KEYS: usize, const PEERS: usize>(
    run: &str,
    mut cluster: Cluster<REQ, KEYS, PEERS>,
    msgs: &[Msg],
    key_prio: &HashMap<Key, i32>,
    rng: &mut Chooser<'_>,
    scripted: bool,
) {
    let nranks = cluster.size();
    let mut scripts: Vec<VecDeque<Op>> = (0..nranks)
        .map(|r| schedule(rng, msgs, r, scripted))
        .collect();
    // Submitted requests whose data is not ready yet, per rank and key, in order.
    let mut not_ready: Vec<BTreeMap<(bool, Key), VecDeque<Ticket>>> =
        (0..nranks).map(|_| BTreeMap::new()).collect();
    // What each request is, per rank.
    let mut ops: Vec<HashMap<Ticket, Op>> = (0..nranks).map(|_| HashMap::new()).collect();
    let mut done: Vec<HashMap<Ticket, usize>> = (0..nranks).map(|_| HashMap::new()).collect();
    let mut completed_ops = 0usize;

    loop {
        // Collect completions, until there are none (retiring a request frees room, which
        // lets waiting submissions and refused envelopes in, which may complete more).
        loop {
            let mut collected = false;
            for r in 0..nranks {
                for c in cluster.take_completions(Rank(r)) {
                    collected = true;
                    let ticket = c.ticket.expect("every request has a ticket");
                    *done[r as usize].entry(ticket).or_default() += 1;
                    let op = ops[r as usize][&ticket];
                    // Only a receive made short on purpose fails, and with `Truncated`.
                    let want = match op {
                        Op::Recv(i) => msgs[i].truncation(),
                        Op::Send(_) => None,
                    };
                    let truncated = want.is_some();
                    assert_eq!(c.error, want, "{run}: {op:?}");
                    completed_ops += 1;
                    match (op, c.kind) {
                        (Op::Send(i), Kind::Send) => {
                            if !msgs[i].detached_send {
                                cluster.retire(Rank(r), c.req);
                            }
                        }
                        (Op::Recv(i), Kind::Recv) => {
                            let m = &msgs[i];
                            // FIFO per key: receives of a key are made ready in message
                            // order, so the receive made for message i must hold message
                            // i's payload (payloads differ by index). Completion order
                            // may differ: an eager message matched second can finish
                            // before a two-message payload matched first.
                            if !truncated {
                                assert_eq!(c.data, m.payload(i), "{run}: wrong payload for {m:?}");
                            }
                            if !m.detached_recv {
                                cluster.retire(Rank(r), c.req);
                            }
                        }
                        other => panic!("{run}: kind mismatch {other:?}"),
                    }
                }
            }
            if !collected {
                break;
            }
        }
        // Pick an action: submit, make data ready, or deliver.
        let mut actions = Vec::new();
        for r in 0..nranks as usize {
            if !scripts[r].is_empty() {
                actions.push((0, r));
            }
            if !not_ready[r].is_empty() {
                actions.push((1, r));
            }
        }
        let pick = match rng {
            Chooser::Seeded(rng) => {
                let network = !cluster.is_quiet();
                if actions.is_empty() && !network {
                    break;
                }
                let pick = rng.below(actions.len() + usize::from(network) * 2);
                if pick >= actions.len() {
                    if !cluster.step() && actions.is_empty() {
                        break;
                    }
                    continue;
                }
                pick
            }
            Chooser::Every(e) => {
                // Every local action and every channel's next delivery is a branch.
                let channels = cluster.channels();
                if actions.is_empty() && channels == 0 {
                    break;
                }
                let pick = e.choose(actions.len() + channels);
                if pick >= actions.len() {
                    cluster.step_channel(pick - actions.len());
                    continue;
                }
                pick
            }
        };
        let (what, r) = actions[pick];
        let rank = Rank(r as u32);
        if what == 0 {
            let op = scripts[r].pop_front().expect("non-empty");
            let (Op::Send(i) | Op::Recv(i)) = op;
            let m = &msgs[i];
            let key = (matches!(op, Op::Send(_)), m.key());
            // Requests of one key match in the order their data is ready (protocol §7),
            // which the payload check assumes is their submission order: a request whose
            // key has an earlier one waiting for its data waits too.
            let late = m.late || not_ready[r].contains_key(&key);
            let req = match op {
                Op::Send(_) => {
                    let mut args = SendArgs::new(m.comm, Rank(m.dst), m.tag, 0);
                    args.sync = m.sync;
                    args.detached = m.detached_send;
                    args.priority = Priority(key_prio.get(&m.key()).copied().unwrap_or(0));
                    cluster.post_send(rank, args, m.payload(i), !late)
                }
                Op::Recv(_) => {
                    let mut args = RecvArgs::new(m.comm, Rank(m.src), m.tag, m.capacity() as u64);
                    args.detached = m.detached_recv;
                    cluster.post_recv(rank, args, !late)
                }
            };
            ops[r].insert(req, op);
            if late {
                not_ready[r].entry(key).or_default().push_back(req);
            }
        } else {
            let n = not_ready[r].len();
            let k = *not_ready[r].keys().nth(rng.below(n)).expect("non-empty");
            let q = not_ready[r].get_mut(&k).expect("present");
            let req = q.pop_front().expect("non-empty");
            if q.is_empty() {
                not_ready[r].remove(&k);
            }
            cluster.ticket_ready(rank, req);
        }
    }

    if completed_ops != msgs.len() * 2 {
        for r in 0..nranks {
            eprintln!("rank {r}: {:?}", cluster.describe(Rank(r)));
        }
    }
    assert_eq!(
        completed_ops,
        msgs.len() * 2,
        "{run}: not every request completed"
    );
    for (r, d) in done.iter().enumerate() {
        for (req, n) in d {
            assert_eq!(*n, 1, "{run}: rank {r} {req:?} completed {n} times");
        }
        let left = cluster.leftovers(Rank(r as u32));
        assert!(left.is_empty(), "{run}: rank {r} left {left:?}");
    }
    assert!(cluster.is_quiet(), "{run}: cluster not quiet");
    assert!(
        cluster.transports_empty(),
        "{run}: a message or a receive left in a transport"
    );
    let (fast, markers) = cluster.fast_counts();
    FAST_COUNTS.with(|c| c.set((c.get().0 + fast, c.get().1 + markers)));
    REFUSALS.with(|r| r.set(r.get() + cluster.refusals()));
    QUEUED.with(|r| r.set(r.get() + cluster.queued()));
}

thread_local! {
    /// Envelopes refused for a full table in the runs of this thread so far.
    static REFUSALS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    /// Submissions that waited for room in the runs of this thread so far.
    static QUEUED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    /// Fast messages and markers sent in the runs of this thread so far (protocol §19).
    static FAST_COUNTS: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// Runs `count` seeds from `first` (`STARLING_SIM_SEEDS=<count>` runs that many instead,
/// for a longer search), or only `STARLING_SIM_SEED`.
fn run_seeds(first: u64, count: u64) {
    if let Ok(s) = std::env::var("STARLING_SIM_SEED") {
        run_seed(s.parse().expect("STARLING_SIM_SEED must be a number"));
        return;
    }
    let count = std::env::var("STARLING_SIM_SEEDS").map_or(count, |n| {
        n.parse().expect("STARLING_SIM_SEEDS must be a number")
    });
    for seed in first..first + count {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
            eprintln!(
                "delivery failed for seed {seed}; replay with \
                 STARLING_SIM_SEED={seed} cargo test --test delivery"
            );
            resume_unwind(panic);
        }
    }
}

#[test]
fn random_workloads_deliver_exactly_once_in_fifo_order() {
    run_seeds(0, 400);
}

#[test]
fn random_workloads_with_other_seeds() {
    run_seeds(1_000_000, 400);
}

// ----- every interleaving of small workloads -----------------------------------------------

/// A standard message of `size` bytes from `src` to `dst` on `comm` with `tag`, waited on
/// at both ends.
fn msg(src: u32, dst: u32, comm: u16, tag: i64, size: usize) -> Msg {
    Msg {
        src,
        dst,
        comm: CommId(comm),
        tag: Tag(tag),
        size,
        sync: false,
        detached_send: false,
        detached_recv: false,
        slack: 0,
        short: 0,
        late: false,
        recv_order: 0,
    }
}

/// The same message, whose send and receive acquire their data late.
fn late(m: Msg) -> Msg {
    Msg { late: true, ..m }
}

/// The same message, sent synchronously.
fn sync(m: Msg) -> Msg {
    Msg { sync: true, ..m }
}

/// Runs `msgs` in every interleaving the network of `setup` allows — every order of
/// each rank's submissions (keeping each key's order) and data acquisitions, and every
/// order of deliveries between them — checking each as the random runs do. Returns how
/// many interleavings there were.
fn every_interleaving(name: &str, setup: Setup, msgs: &[Msg]) -> u64 {
    let done = Explorer::run(MAX_PATHS, |e| {
        let (prio, choose) = (&HashMap::new(), &mut Chooser::Every(e));
        if setup.tiny {
            execute(name, tiny(setup), msgs, prio, choose, setup.scripted);
        } else {
            execute(name, cluster(setup, 0), msgs, prio, choose, setup.scripted);
        }
    });
    assert!(
        done.complete,
        "{name}: {} interleavings were not all of them",
        done.paths
    );
    eprintln!(
        "{name}: {} interleavings, up to {} choices each",
        done.paths, done.longest
    );
    done.paths
}

/// More than any workload below has.
const MAX_PATHS: u64 = 2_000_000;

/// Two ranks; payloads of 1 byte travel inside their envelope, 20 bytes as a message of
/// their own; MPI's ordering only.
const TWO: Setup = Setup {
    nranks: 2,
    eager_limit: 8,
    cap: 0,
    priorities: true,
    network: Network::PerTag,
    tiny: false,
    budget: false,
    scripted: false,
    fast_limit: 0,
};

#[test]
fn every_interleaving_of_a_two_message_payload_then_an_inline_one_on_one_key() {
    let msgs = [msg(0, 1, 0, 5, 20), msg(0, 1, 0, 5, 1)];
    let per_tag = every_interleaving("data then eager", TWO, &msgs);
    // MPI lets the payload overtake the envelopes: more interleavings than a network
    // that keeps each pair's order, and each of them correct.
    let per_pair = every_interleaving(
        "data then eager, per-pair order",
        Setup {
            network: Network::PerPair,
            ..TWO
        },
        &msgs,
    );
    assert!(per_tag > per_pair, "{per_tag} <= {per_pair}");
}

#[test]
fn every_interleaving_of_a_synchronous_message_then_a_standard_one_on_one_key() {
    // The reference can match the standard message before the synchronous one sent
    // before it (internals §12.6); here one FIFO per key holds every kind.
    let msgs = [sync(msg(0, 1, 0, 5, 1)), msg(0, 1, 0, 5, 20)];
    every_interleaving("sync then data", TWO, &msgs);
}

#[test]
fn every_interleaving_of_synchronous_sends_crossing_with_one_tag() {
    // Both ranks issend to each other with the same tag at once: the reference keys
    // both tables by (comm, rank, tag) and can pop the wrong kind of entry (§12.6).
    let msgs = [sync(msg(0, 1, 0, 3, 20)), sync(msg(1, 0, 0, 3, 1))];
    every_interleaving("crossing synchronous sends", TWO, &msgs);
}

#[test]
fn every_interleaving_of_one_tag_on_two_communicators() {
    let msgs = [msg(0, 1, 0, 7, 20), msg(0, 1, 1, 7, 1)];
    every_interleaving("two communicators", TWO, &msgs);
}

#[test]
fn every_interleaving_of_two_senders_to_one_receiver_with_one_tag() {
    let msgs = [msg(1, 0, 0, 2, 20), msg(2, 0, 0, 2, 1)];
    every_interleaving("two senders", Setup { nranks: 3, ..TWO }, &msgs);
}

#[test]
fn every_interleaving_of_capped_sends() {
    // One payload in flight at a time: the second waits in the ready list.
    let msgs = [msg(0, 1, 0, 1, 20), msg(0, 1, 0, 2, 20)];
    every_interleaving("capped sends", Setup { cap: 1, ..TWO }, &msgs);
}

#[test]
fn every_interleaving_of_sends_to_self() {
    let msgs = [msg(0, 0, 0, 4, 20), msg(0, 0, 0, 4, 1)];
    every_interleaving("sends to self", TWO, &msgs);
}

#[test]
fn every_interleaving_of_a_truncated_message_then_a_whole_one_on_one_key() {
    // The first receive is 16 bytes short of its 20-byte message (then 3 bytes short of
    // an inline one): it fails with `Truncated` and the payload is dropped, the sends
    // succeed, and the next message of the key still reaches the next receive.
    let short = |m: Msg, by| Msg { short: by, ..m };
    let msgs = [short(msg(0, 1, 0, 6, 20), 16), msg(0, 1, 0, 6, 1)];
    every_interleaving("truncated then whole", TWO, &msgs);
    let msgs = [short(msg(0, 1, 0, 6, 4), 3), msg(0, 1, 0, 6, 20)];
    every_interleaving("truncated inline then whole", TWO, &msgs);
    // A synchronous payload into a short receive: the receiver answers, takes the payload
    // into a discard buffer and fails the receive; the send completes.
    let msgs = [short(sync(msg(0, 1, 0, 6, 20)), 16), msg(0, 1, 0, 6, 1)];
    every_interleaving("truncated synchronous then whole", TWO, &msgs);
}

#[test]
fn every_interleaving_of_three_keys_on_engines_with_two_match_keys() {
    // Rank 1's matcher holds two keys: the receive of the third key waits in the deferred
    // queue, and an envelope of the third key arriving while two wait is refused and
    // handed in again once room frees; nothing is lost or reordered.
    // (Three messages over `PerTag` pass 2 million interleavings: per-pair order here.)
    let two_keys = Setup {
        tiny: true,
        network: Network::PerPair,
        ..TWO
    };
    let msgs = [msg(0, 1, 0, 1, 1), msg(0, 1, 0, 2, 1), msg(0, 1, 0, 3, 1)];
    let before = REFUSALS.with(core::cell::Cell::get);
    let paths = every_interleaving("three keys, two match keys", two_keys, &msgs);
    let refusals = REFUSALS.with(core::cell::Cell::get) - before;
    // The full tables were part of the runs.
    assert!(
        refusals > 0 && refusals < paths,
        "{refusals} refusals in {paths} paths"
    );
    eprintln!("three keys, two match keys: {refusals} envelopes refused and handed in again");
}

/// Larger workloads: 634 920 interleavings with data made ready late, 226 800 each with
/// two two-message payloads (over MPI's ordering), and three messages on one key over
/// per-pair order (6 089); about a minute in a release build, so out of the default run.
/// `cargo test --release --test delivery -- --ignored --nocapture`.
#[test]
#[ignore = "a minute in release: run with --release --ignored"]
fn every_interleaving_of_larger_workloads() {
    every_interleaving(
        "data then eager, data made ready late",
        TWO,
        &[late(msg(0, 1, 0, 5, 20)), late(msg(0, 1, 0, 5, 1))],
    );
    every_interleaving(
        "two communicators, two two-message payloads",
        TWO,
        &[msg(0, 1, 0, 7, 20), msg(0, 1, 1, 7, 20)],
    );
    every_interleaving(
        "two senders, two two-message payloads",
        Setup { nranks: 3, ..TWO },
        &[msg(1, 0, 0, 2, 20), msg(2, 0, 0, 2, 20)],
    );
    every_interleaving(
        "sync then eager then data, per-pair order",
        Setup {
            network: Network::PerPair,
            ..TWO
        },
        &[
            sync(msg(0, 1, 0, 5, 1)),
            msg(0, 1, 0, 5, 1),
            msg(0, 1, 0, 5, 20),
        ],
    );
}

// ----- every interleaving on the threaded runtime's tiny tables ----------------------------

/// Two ranks with the threaded runtime's `Tables::TINY` (a request limit of 4: 2 sends,
/// 2 receives, 1 early buffer; 2 match keys), the adapter's queues for what does not fit
/// (`starling_std`'s admission code, which the progression thread runs), per-pair order,
/// each rank submitting in one fixed order: sends first, then receives.
const TINY: Setup = Setup {
    nranks: 2,
    eager_limit: 8,
    cap: 0,
    priorities: true,
    network: Network::PerPair,
    tiny: true,
    budget: true,
    scripted: true,
    fast_limit: 0,
};

/// Runs `msgs` in every interleaving on [`TINY`] tables (or `setup`'s), checks that the
/// tables overflowed (submissions waited, envelopes were refused) and returns the
/// interleavings, the refusals and the waiting submissions.
fn every_interleaving_overflowing(name: &str, setup: Setup, msgs: &[Msg]) -> (u64, u64, u64) {
    let (r0, q0) = (
        REFUSALS.with(core::cell::Cell::get),
        QUEUED.with(core::cell::Cell::get),
    );
    let paths = every_interleaving(name, setup, msgs);
    let refusals = REFUSALS.with(core::cell::Cell::get) - r0;
    let queued = QUEUED.with(core::cell::Cell::get) - q0;
    eprintln!("{name}: {refusals} envelopes refused, {queued} submissions waited for room");
    (paths, refusals, queued)
}

/// `n` messages from `src` to `dst`, of `size` bytes, on tags `tag(i)`.
fn burst(src: u32, dst: u32, n: usize, size: usize, tag: impl Fn(usize) -> i64) -> Vec<Msg> {
    (0..n).map(|i| msg(src, dst, 0, tag(i), size)).collect()
}

/// Four inline messages on four keys, received last first.
fn reverse_order() -> Vec<Msg> {
    let mut msgs = burst(0, 1, 4, 1, |i| i as i64);
    for (i, m) in msgs.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    msgs
}

/// `n` messages on one key, the second and the fourth two-message payloads.
fn one_tag(n: usize) -> Vec<Msg> {
    let mut msgs = burst(0, 1, n, 1, |_| 7);
    for m in msgs.iter_mut().skip(1).step_by(2) {
        m.size = 20;
    }
    msgs
}

/// `a` messages from rank 0 to rank 1 and `b` from rank 1 to rank 0, on one tag.
fn crossing(a: usize, b: usize) -> Vec<Msg> {
    let mut msgs = burst(0, 1, a, 1, |_| 1);
    msgs.extend(burst(1, 0, b, 1, |_| 1));
    msgs
}

#[test]
fn every_interleaving_of_receives_in_the_reverse_order_on_tiny_tables() {
    // Received last first: one message waits as early data (the early share is 1), the
    // others are refused (no slot) and each goes in when its receive is posted; the sends
    // overflow their share of 2 and wait in order, and so do the receives.
    let (paths, refusals, queued) =
        every_interleaving_overflowing("reverse order, tiny tables", TINY, &reverse_order());
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
}

#[test]
fn every_interleaving_of_data_made_ready_late_on_tiny_tables() {
    // Three messages on three keys, received last first; the first one's send and
    // receive acquire their data as steps of their own: its receive waits for room and
    // may be made ready before the engine took it (`Cluster::ticket_ready` then hands it
    // in with its data ready), or after.
    let mut msgs = burst(0, 1, 3, 1, |i| i as i64);
    for (i, m) in msgs.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    msgs[0].late = true;
    let (paths, refusals, queued) =
        every_interleaving_overflowing("data made ready late, tiny tables", TINY, &msgs);
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
}

#[test]
fn every_interleaving_of_many_messages_on_one_tag_on_tiny_tables() {
    // Four messages on one key, two of them two-message payloads, received after they
    // were sent: early messages past the one early buffer are refused and keep their
    // order; sends and receives overflow their shares and wait.
    let (paths, refusals, queued) =
        every_interleaving_overflowing("one tag, tiny tables", TINY, &one_tag(4));
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
}

#[test]
fn every_interleaving_of_many_keys_on_tiny_tables() {
    // Four keys through two match keys, received in order.
    let msgs = burst(0, 1, 4, 1, |i| i as i64 + 10);
    let (paths, refusals, queued) =
        every_interleaving_overflowing("many keys, tiny tables", TINY, &msgs);
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
}

#[test]
fn every_interleaving_of_crossing_bursts_on_tiny_tables() {
    // Rank 0 sends three messages to rank 1 while rank 1 sends one back, then each
    // receives the other's: rank 0's sends overflow their share while rank 1's early
    // buffer is full and envelopes wait refused.
    let (paths, refusals, queued) =
        every_interleaving_overflowing("crossing bursts, tiny tables", TINY, &crossing(3, 1));
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
    // Two each way: the early share overflows on both ranks at once.
    let (paths, refusals, _) =
        every_interleaving_overflowing("crossing pairs, tiny tables", TINY, &crossing(2, 2));
    assert!(refusals > 0, "{refusals} {paths}");
}

/// Larger tiny-table workloads: five messages on one key (612 612 interleavings), five
/// keys through two (126 126), and over MPI's ordering three keys received in the reverse
/// order and three messages on one key (1 103 960 each, a two-message payload in each);
/// about 20 s in a release build.
/// `cargo test --release --test delivery tiny -- --ignored --nocapture`.
#[test]
#[ignore = "minutes in debug: run with --release --ignored"]
fn every_interleaving_of_larger_workloads_on_tiny_tables() {
    every_interleaving_overflowing("one tag, five messages, tiny tables", TINY, &one_tag(5));
    every_interleaving_overflowing(
        "five keys, tiny tables",
        TINY,
        &burst(0, 1, 5, 1, |i| i as i64 + 10),
    );
    // Over MPI's ordering only: a payload may overtake its envelope, a send completes
    // before or after its message arrives.
    let per_tag = Setup {
        network: Network::PerTag,
        ..TINY
    };
    let mut reverse = burst(0, 1, 3, 1, |i| i as i64);
    for (i, m) in reverse.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    reverse[1].size = 20;
    every_interleaving_overflowing(
        "reverse order, MPI's ordering, tiny tables",
        per_tag,
        &reverse,
    );
    every_interleaving_overflowing("one tag, MPI's ordering, tiny tables", per_tag, &one_tag(3));
}

// ----- receives made ready out of flow order, with dependencies ----------------------------

/// One operation of a [`dependent_flow`]: a send or a receive of `size` bytes, `tag`,
/// between `rank` and `peer`, submitted (with its data ready, as the progression thread
/// gets it) once the operations `after` completed; a send is synchronous with `sync`.
#[derive(Clone, Copy)]
struct Step {
    rank: u32,
    send: bool,
    peer: u32,
    tag: i64,
    after: &'static [usize],
    size: usize,
    sync: bool,
}

/// A one-byte operation (its payload travels inside its envelope).
const fn step(rank: u32, send: bool, peer: u32, tag: i64, after: &'static [usize]) -> Step {
    Step {
        rank,
        send,
        peer,
        tag,
        after,
        size: 1,
        sync: false,
    }
}

/// Runs `steps` on [`TINY`] tables in every interleaving: every order in which the
/// operations whose dependencies completed are submitted (so receives reach the adapter
/// when their data is ready, not in flow order; one key keeps its order), and every order
/// of deliveries. Checks that each operation completes once with its payload and that
/// nothing is left (a deadlock leaves operations unsubmitted or pending). Returns the
/// interleavings and the envelopes refused and submissions that waited in them.
fn dependent_flow(name: &str, steps: &[Step]) -> (u64, u64, u64) {
    let (mut refusals, mut queued) = (0, 0);
    let done = Explorer::run(MAX_PATHS, |e| {
        let mut cluster = tiny(TINY);
        let mut posted: Vec<Option<Ticket>> = vec![None; steps.len()];
        let mut completed = vec![0u32; steps.len()];
        loop {
            for r in 0..2 {
                for c in cluster.take_completions(Rank(r)) {
                    let i = posted
                        .iter()
                        .position(|t| *t == c.ticket)
                        .expect("a ticket of this run");
                    assert_eq!(c.error, None, "{name}: step {i}");
                    if !steps[i].send {
                        assert_eq!(
                            c.data,
                            vec![i as u8; steps[i].size],
                            "{name}: step {i}'s payload"
                        );
                    }
                    completed[i] += 1;
                }
            }
            // Submittable: dependencies completed, and no earlier step of its rank,
            // direction and key still unsubmitted.
            let ready: Vec<usize> = (0..steps.len())
                .filter(|&i| {
                    let s = &steps[i];
                    posted[i].is_none()
                        && s.after.iter().all(|&d| completed[d] > 0)
                        && !(0..i).any(|j| {
                            let o = &steps[j];
                            posted[j].is_none()
                                && (o.rank, o.send, o.peer, o.tag)
                                    == (s.rank, s.send, s.peer, s.tag)
                        })
                })
                .collect();
            let channels = cluster.channels();
            if ready.is_empty() && channels == 0 {
                break;
            }
            let pick = e.choose(ready.len() + channels);
            if pick >= ready.len() {
                cluster.step_channel(pick - ready.len());
                continue;
            }
            let i = ready[pick];
            let s = &steps[i];
            // The payload of a message names the step that sends it: its receive is the
            // step after the send of the same key in `steps`.
            let ticket = if s.send {
                let mut args = SendArgs::new(CommId(0), Rank(s.peer), Tag(s.tag), 0);
                args.detached = true;
                args.sync = s.sync;
                let recv = (0..steps.len())
                    .find(|&j| {
                        let o = &steps[j];
                        !o.send && (o.rank, o.peer, o.tag) == (s.peer, s.rank, s.tag)
                    })
                    .expect("every send has its receive");
                cluster.post_send(Rank(s.rank), args, vec![recv as u8; s.size], true)
            } else {
                let mut args = RecvArgs::new(CommId(0), Rank(s.peer), Tag(s.tag), s.size as u64);
                args.detached = true;
                cluster.post_recv(Rank(s.rank), args, true)
            };
            posted[i] = Some(ticket);
        }
        if completed.iter().any(|&n| n != 1) {
            for r in 0..2 {
                eprintln!("rank {r}: {:?}", cluster.describe(Rank(r)));
            }
        }
        for (i, n) in completed.iter().enumerate() {
            assert_eq!(*n, 1, "{name}: step {i} completed {n} times (a deadlock?)");
        }
        for r in 0..2 {
            let left = cluster.leftovers(Rank(r));
            assert!(left.is_empty(), "{name}: rank {r} left {left:?}");
        }
        assert!(cluster.is_quiet(), "{name}: cluster not quiet");
        refusals += cluster.refusals();
        queued += cluster.queued();
    });
    assert!(
        done.complete,
        "{name}: {} interleavings were not all of them",
        done.paths
    );
    eprintln!(
        "{name}: {} interleavings, up to {} choices each; {refusals} envelopes refused, \
         {queued} submissions waited for room",
        done.paths, done.longest
    );
    (done.paths, refusals, queued)
}

#[test]
fn every_interleaving_of_receives_made_ready_out_of_flow_order_on_tiny_tables() {
    // Rank 1's flow: receive R1 (tag 1), reply (tag 3) once R1 is done, receive R2
    // (tag 2), receive A (tag 10) once R2 is done. Rank 0 sends A and R1's message, and
    // R2's message only once the reply came: R2's message depends on R1's completion.
    // R2 may reach rank 1's adapter before R1 (its data is ready first). With 2 receive
    // slots, R2 (whose message cannot come yet) and early data (A, or R1's message)
    // could hold both while R1, whose message is here, waits: a cycle. A receive whose
    // message is not here never takes the last receive slot, early data neither, and a
    // receive whose message is here goes ahead of the waiting ones.
    const STEPS: [Step; 8] = [
        step(0, true, 1, 10, &[]),   // 0: A
        step(0, true, 1, 1, &[]),    // 1: R1's message
        step(1, false, 0, 1, &[]),   // 2: R1
        step(1, true, 0, 3, &[2]),   // 3: the reply, after R1
        step(0, false, 1, 3, &[]),   // 4: the reply's receive
        step(0, true, 1, 2, &[4]),   // 5: R2's message, after the reply
        step(1, false, 0, 2, &[]),   // 6: R2
        step(1, false, 0, 10, &[6]), // 7: A's receive, after R2
    ];
    let (paths, refusals, queued) =
        dependent_flow("receives out of flow order, tiny tables", &STEPS);
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
    // The same flow with R1's message synchronous (its envelope waits in the engine as
    // early data, needing no slot, until R1 is posted) and R2's a two-message payload
    // (20 bytes past the eager limit of 8).
    let mut steps = STEPS;
    steps[1].sync = true;
    steps[5].size = 20;
    steps[6].size = 20;
    let (paths, _, queued) = dependent_flow(
        "receives out of flow order, synchronous and two-message payloads, tiny tables",
        &steps,
    );
    assert!(queued > 0, "{queued} {paths}");
}

// ----- the fast path (protocol §19): fast and envelope messages on one key ----------------

/// Two ranks with the fast path, over MPI's ordering only: sends of 1 to 4 bytes travel
/// alone on their tag's fast tag; empty ones, inline ones (5 to 8 bytes), two-message
/// payloads (20 bytes) and synchronous ones leave a marker there and take the envelope
/// path, which a fast message of the same key may overtake or be overtaken by.
const FAST: Setup = Setup {
    fast_limit: 4,
    ..TWO
};

/// [`every_interleaving`], checking that the runs sent fast messages and markers.
fn every_interleaving_fast(name: &str, setup: Setup, msgs: &[Msg]) -> u64 {
    let before = FAST_COUNTS.with(core::cell::Cell::get);
    let paths = every_interleaving(name, setup, msgs);
    let after = FAST_COUNTS.with(core::cell::Cell::get);
    let (fast, markers) = (after.0 - before.0, after.1 - before.1);
    let want_fast = msgs.iter().filter(|m| goes_fast(setup, m)).count() as u64;
    let want_markers = msgs.iter().filter(|m| m.tag.0 >= 0).count() as u64 - want_fast;
    // Every run sends each message of a tag with a fast tag there, as itself or a marker.
    assert_eq!(
        (fast, markers),
        (want_fast * paths, want_markers * paths),
        "{name}: fast messages and markers in {paths} runs"
    );
    paths
}

fn goes_fast(setup: Setup, m: &Msg) -> bool {
    m.tag.0 >= 0 && !m.sync && (1..=setup.fast_limit as usize).contains(&m.size)
}

#[test]
fn every_interleaving_of_fast_and_envelope_messages_on_one_key() {
    let on5 = |size| msg(0, 1, 0, 5, size);
    for (name, msgs) in [
        ("fast then two-message", [on5(1), on5(20)]),
        ("two-message then fast", [on5(20), on5(1)]),
        ("inline then fast", [on5(6), on5(3)]),
        ("fast then inline", [on5(4), on5(8)]),
        ("fast then empty", [on5(2), on5(0)]),
        ("synchronous then fast", [sync(on5(1)), on5(4)]),
        ("fast then synchronous", [on5(4), sync(on5(20))]),
        ("fast then fast", [on5(1), on5(4)]),
    ] {
        every_interleaving_fast(&format!("{name}, fast path"), FAST, &msgs);
    }
}

#[test]
fn every_interleaving_of_a_fast_message_between_envelope_messages_on_one_key() {
    // Three messages on one key: the fast one must land between the other two whatever
    // overtakes what (per-pair order keeps the count of interleavings small; the MPI-order
    // runs of two messages above let each overtake the other).
    let per_pair = Setup {
        network: Network::PerPair,
        ..FAST
    };
    let on5 = |size| msg(0, 1, 0, 5, size);
    every_interleaving_fast(
        "inline, fast, two-message",
        per_pair,
        &[on5(6), on5(2), on5(20)],
    );
    every_interleaving_fast("fast, inline, fast", per_pair, &[on5(1), on5(6), on5(2)]);
}

#[test]
fn every_interleaving_of_fast_messages_with_data_made_ready_late() {
    // The receives acquire their buffers as steps of their own: a fast message may wait
    // in the transport for its receive, a marker too, while the envelope message waits
    // in the engine.
    // (Over MPI's ordering these pass 2 million interleavings: per-pair order here.)
    let per_pair = Setup {
        network: Network::PerPair,
        ..FAST
    };
    let on5 = |size| late(msg(0, 1, 0, 5, size));
    every_interleaving_fast("late, two-message then fast", per_pair, &[on5(20), on5(1)]);
    every_interleaving_fast("late, fast then inline", per_pair, &[on5(1), on5(6)]);
}

#[test]
fn every_interleaving_of_fast_and_envelope_messages_on_several_keys_received_in_reverse() {
    // Two keys (a fast and an envelope message on one), and a tag with no fast tag;
    // receives posted keys last first (each key's own in order): each key's order is
    // kept, the keys pass each other.
    let mut msgs = vec![
        msg(0, 1, 0, 1, 2),
        msg(0, 1, 0, 2, 20),
        msg(0, 1, 0, 1, 6),
        msg(0, 1, 0, -3, 1),
    ];
    for (m, order) in msgs.iter_mut().zip([0, -2, 1, -3]) {
        m.recv_order = order;
    }
    let scripted = Setup {
        scripted: true,
        network: Network::PerPair,
        ..FAST
    };
    every_interleaving_fast(
        "two keys and a negative tag, reverse receives",
        scripted,
        &msgs,
    );
    // Over MPI's ordering, two keys received in reverse.
    let mut msgs = vec![msg(0, 1, 0, 1, 20), msg(0, 1, 0, 2, 1)];
    for (i, m) in msgs.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    every_interleaving_fast(
        "two keys over MPI's order, reverse receives",
        Setup {
            scripted: true,
            ..FAST
        },
        &msgs,
    );
}

#[test]
fn every_interleaving_of_fast_keys_past_two_match_keys() {
    // Engines with two match keys: the receive of a third fast key waits in the deferred
    // queue until a fast message frees a key; a marked receive and the envelope messages
    // of the third key wait and keep their order.
    let two_keys = Setup {
        tiny: true,
        network: Network::PerPair,
        ..FAST
    };
    let msgs = [msg(0, 1, 0, 1, 1), msg(0, 1, 0, 2, 20), msg(0, 1, 0, 3, 2)];
    every_interleaving_fast("three fast keys, two match keys", two_keys, &msgs);
}

#[test]
fn every_interleaving_of_a_short_receive_on_a_fast_key() {
    // A fast message longer than its receive fails it (`Truncated`), whole; the next
    // message of the key, through the envelope path, reaches the next receive.
    let short = |m: Msg, by| Msg { short: by, ..m };
    let msgs = [short(msg(0, 1, 0, 6, 4), 2), msg(0, 1, 0, 6, 20)];
    every_interleaving_fast("truncated fast then two-message", FAST, &msgs);
    let msgs = [short(msg(0, 1, 0, 6, 20), 16), msg(0, 1, 0, 6, 1)];
    every_interleaving_fast("truncated two-message then fast", FAST, &msgs);
}

#[test]
fn every_interleaving_of_crossing_fast_and_synchronous_sends_on_one_tag() {
    let msgs = [
        sync(msg(0, 1, 0, 3, 2)),
        msg(1, 0, 0, 3, 1),
        msg(0, 1, 0, 3, 1),
    ];
    every_interleaving_fast(
        "crossing synchronous and fast",
        Setup {
            network: Network::PerPair,
            ..FAST
        },
        &msgs,
    );
}

#[test]
fn every_interleaving_of_fast_and_envelope_messages_on_tiny_tables() {
    // The threaded runtime's smallest tables with the fast path: envelope messages are
    // refused for want of an early buffer while their receive, marked, waits for them
    // (they go in when the marker comes), and a receive whose fast message waits in the
    // transport gets the last receive slot (admission asks the transport).
    let tiny_fast = Setup {
        fast_limit: 4,
        ..TINY
    };
    let (paths, refusals, queued) =
        every_interleaving_overflowing("one tag, tiny tables, fast path", tiny_fast, &one_tag(4));
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
    let mut msgs = reverse_order();
    msgs[1].size = 6;
    msgs[3].size = 20;
    let (paths, refusals, queued) =
        every_interleaving_overflowing("reverse order, tiny tables, fast path", tiny_fast, &msgs);
    assert!(refusals > 0 && queued > 0, "{refusals} {queued} {paths}");
    // Three keys received last first, each message behind a marker: envelopes wait as
    // early data or are refused while their receives wait for a slot or for their
    // marker; every receive still gets its own message.
    let mut msgs = burst(0, 1, 3, 20, |i| i as i64);
    for (i, m) in msgs.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    let (paths, refusals, _) = every_interleaving_overflowing(
        "three keys behind markers, reverse order, tiny tables",
        tiny_fast,
        &msgs,
    );
    assert!(refusals > 0, "{refusals} {paths}");
    // Over MPI's ordering: two keys received last first, each message behind a marker.
    // An envelope may overtake its marker and be refused behind the other key's; the
    // marker then comes and marks a receive whose envelope waits refused. (These small
    // flows always free the older refused envelope's receive too; the case where only
    // `Engine::marked_key` lets the marked receive's envelope in, seen under MPI, is the
    // `fast` job of `tests/mpi_p2p.rs` with `STARLING_ENGINE_TABLES=4,2`.)
    let mut msgs = vec![msg(0, 1, 0, 1, 6), msg(0, 1, 0, 2, 6)];
    for (i, m) in msgs.iter_mut().enumerate() {
        m.recv_order = -(i as i64);
    }
    let (paths, refusals, _) = every_interleaving_overflowing(
        "two keys behind markers, MPI order, reverse, tiny tables",
        Setup {
            network: Network::PerTag,
            ..tiny_fast
        },
        &msgs,
    );
    assert!(refusals > 0, "{refusals} {paths}");
    let (fast, markers) = FAST_COUNTS.with(core::cell::Cell::get);
    assert!(
        fast > 0 && markers > 0,
        "{fast} fast messages, {markers} markers"
    );
}
