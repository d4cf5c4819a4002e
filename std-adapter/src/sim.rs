//! A seeded, deterministic cluster of N protocol engines in one thread, and an explorer
//! of every interleaving of a small one.
//!
//! [`Cluster`] drives N [`Engine`]s over a simulated network whose order is its
//! [`Network`]: by default ([`Network::PerPair`]) the messages from one rank to another
//! arrive in the order they were sent, whatever their tags; [`Network::PerTag`] keeps
//! exactly MPI's guarantee and nothing more — order within one (source, destination,
//! communicator, physical tag) channel, so that a payload may overtake the envelope sent
//! before it, and the messages of two communicators pass each other. Which message arrives
//! next is chosen by a seeded random generator ([`Cluster::step`]) or by the caller
//! ([`Cluster::step_channel`]). Every run with the same seed and the same calls is the
//! same run, so a failing interleaving is replayed from its seed.
//!
//! [`Explorer`] runs a deterministic program once per sequence of its choices, depth
//! first, until every sequence ran: driven by it, a small workload on a cluster is checked
//! in *every* interleaving that the network allows (stateless model checking). A failing
//! path is printed as its list of choices, which [`Explorer::replay`] runs again.
//!
//! The engines' tables are large by default; [`Cluster::sized`] makes them small (and
//! [`Config::request_limit`] / [`Config::key_limit`] smaller still), and the cluster then
//! does the adapter's part for a full table with the adapter's own code (the crate's
//! `admission` module, which the progression thread runs too): an envelope the engine
//! refused waits behind the refused ones of its key (or payload tag) only, and goes in
//! when its receive is posted or after any step; a submission made with
//! [`Cluster::post_send`] / [`Cluster::post_recv`] that the engine has no room for waits
//! in order per direction and is submitted when room frees.
//!
//! The simulated transport models the part of MPI the engine relies on: an envelope tag
//! whose messages are handed to [`Engine::handle_message`] as they arrive, and payload
//! messages matched to posted receives on (communicator, source, physical tag) in
//! posting order, or kept as unexpected until a receive is posted (MPI's unexpected
//! queue). Payload bytes live here, in per-request buffers, as they would in an adapter.
//!
//! It is a test harness: every peer is a well-behaved engine, so any error an engine
//! returns is a bug in the core or in the test, and the simulator panics on it with the
//! error's message. (The core's handling of *misbehaving* peers is tested in the core.)

use std::collections::{BTreeMap, HashMap, VecDeque};

use starling_core::engine::{
    Arrival, Config, Engine, Event, Express, Leftover, MessageError, RecvArgs, RefusalOrder,
    RequestError, SendArgs, SubmitError, Transmit,
};
use starling_core::error::Table;
use starling_core::lists::Key;
use starling_core::request::Kind;
use starling_core::tags::TagSpace;
use starling_core::{CommId, PhysTag, Rank, ReqId, Tag};

use crate::io::admission::{Admission, Admit, Direction};

mod explorer;
mod wire;

pub use explorer::{Exploration, Explorer};

/// The engine type the simulator runs: 1024 requests, 256 match keys, 64 peers.
pub type SimEngine = Engine<REQUESTS, MATCH_KEYS, PEER_SLOTS>;

/// Requests of a [`SimEngine`] (and of a [`Cluster`] by default).
pub const REQUESTS: usize = 1024;
/// Match keys of a [`SimEngine`].
pub const MATCH_KEYS: usize = 256;
/// Peers of a [`SimEngine`].
pub const PEER_SLOTS: usize = 64;

/// A small, fast, seedable generator (SplitMix64): reproducible across platforms.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub const fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        // n is small; the modulo bias is irrelevant for test scheduling.
        (self.next_u64() % n as u64) as usize
    }

    /// `true` with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
}

/// A finished request, as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The rank it ran on.
    pub rank: Rank,
    /// The request.
    pub req: ReqId,
    /// Send or receive.
    pub kind: Kind,
    /// For a successful receive: the bytes received. For a send: empty.
    pub data: Vec<u8>,
    /// Why it failed, if it did.
    pub error: Option<RequestError>,
    /// The ticket of a request submitted with [`Cluster::post_send`] or
    /// [`Cluster::post_recv`].
    pub ticket: Option<Ticket>,
}

/// A submission made with [`Cluster::post_send`] or [`Cluster::post_recv`]: it may wait
/// for room before the engine gives it a [`ReqId`]; its [`Completion`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// A submission waiting for room, as the simulated adapter keeps it.
#[derive(Debug)]
enum SimCmd {
    Send {
        ticket: Ticket,
        args: SendArgs,
        data: Vec<u8>,
        ready: bool,
    },
    Recv {
        ticket: Ticket,
        args: RecvArgs,
        ready: bool,
    },
}

impl SimCmd {
    const fn ticket(&self) -> Ticket {
        match self {
            Self::Send { ticket, .. } | Self::Recv { ticket, .. } => *ticket,
        }
    }

    const fn set_ready(&mut self) {
        match self {
            Self::Send { ready, .. } | Self::Recv { ready, .. } => *ready = true,
        }
    }
}

#[derive(Debug)]
enum Wire {
    Envelope {
        comm: CommId,
        bytes: Vec<u8>,
        /// The send whose payload rides inline, completed when the message is delivered.
        inline: Option<ReqId>,
    },
    Payload {
        comm: CommId,
        tag: PhysTag,
        bytes: Vec<u8>,
        /// The send it completes; none for a marker (protocol §19).
        sender: Option<ReqId>,
    },
}

#[derive(Debug)]
struct PostedRecv {
    source: Rank,
    comm: CommId,
    tag: PhysTag,
    req: ReqId,
}

#[derive(Debug)]
struct UnexpectedPayload {
    source: Rank,
    comm: CommId,
    tag: PhysTag,
    bytes: Vec<u8>,
}

struct Node<const REQ: usize, const KEYS: usize, const PEERS: usize> {
    engine: Box<Engine<REQ, KEYS, PEERS>>,
    /// Refused envelopes and submissions waiting for room, handled by the threaded
    /// adapter's own code.
    admission: Admission<SimCmd>,
    /// The tickets of the requests submitted through [`Cluster::post_send`] /
    /// [`Cluster::post_recv`], until they complete.
    tickets: HashMap<ReqId, Ticket>,
    /// The requests of tickets, until they complete.
    reqs: HashMap<Ticket, (ReqId, Kind, Key)>,
    /// Send payloads and receive buffers of application requests.
    buffers: HashMap<ReqId, Vec<u8>>,
    /// Early buffers of the engine's own requests.
    early: HashMap<ReqId, Vec<u8>>,
    posted: Vec<PostedRecv>,
    unexpected: Vec<UnexpectedPayload>,
    /// Keys whose receive got its marker (protocol §19): their refused envelopes are
    /// handed in again at the next settling.
    marked: Vec<Key>,
    completions: Vec<Completion>,
}

/// Which messages of a simulated network keep their order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// Every message from one rank to another arrives in the order it was sent, whatever
    /// its communicator and tag: stronger than MPI (what shared memory usually does).
    #[default]
    PerPair,
    /// Exactly MPI's non-overtaking rule: order is kept only within one (source,
    /// destination, communicator, physical tag) channel. A payload may arrive before the
    /// envelope that announced it, and messages of different communicators or tags pass
    /// each other. And a send completes at any time after it was posted, before or after
    /// its message arrives (MPI may buffer it), as a step of its own.
    PerTag,
}

/// A channel of the network: messages in it arrive in the order they were sent.
/// (`PerPair` uses communicator 0 and tag 0 for every message of a pair.)
type Channel = (u32, u32, u16, i32);

/// N engines over a seeded network whose order is a [`Network`]. See the
/// [module docs](self).
///
/// The engines hold `REQ` requests, `KEYS` match keys and `PEERS` peers: by default those
/// of [`SimEngine`], so large that no table fills; [`Cluster::sized`] makes them small, so
/// that full tables (receives deferred in order, envelopes refused and handed in again)
/// are part of the run.
pub struct Cluster<
    const REQ: usize = REQUESTS,
    const KEYS: usize = MATCH_KEYS,
    const PEERS: usize = PEER_SLOTS,
> {
    nodes: Vec<Node<REQ, KEYS, PEERS>>,
    /// Messages in flight, per channel, in order; a channel leaves the map when it empties
    /// (so the map's order, source first, is the order of [`Cluster::step_channel`]).
    links: BTreeMap<Channel, VecDeque<Wire>>,
    /// Sends posted and not reported complete yet ([`Network::PerTag`] only; otherwise a
    /// send completes when its message is delivered), oldest first.
    unsent: Vec<(Rank, ReqId)>,
    network: Network,
    rng: SplitMix64,
    delivered: u64,
    next_ticket: u64,
    /// Fast messages and markers sent ([`Cluster::fast_counts`]).
    fast_counts: (u64, u64),
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> core::fmt::Debug
    for Cluster<REQ, KEYS, PEERS>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cluster")
            .field("ranks", &self.nodes.len())
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// `n` ranks with the default engine configuration and the smallest legal MPI tag
    /// bound (32767), seeded with `seed`.
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn new(n: u32, seed: u64) -> Self {
        Self::with_config(n, seed, |_| {})
    }

    /// `n` ranks whose configuration `tweak` may adjust (eager limit, in-flight cap, ...).
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn with_config(n: u32, seed: u64, tweak: impl Fn(&mut Config)) -> Self {
        Self::sized(n, seed, tweak)
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Cluster<REQ, KEYS, PEERS> {
    /// [`Cluster::with_config`] with engines of `REQ` requests, `KEYS` match keys and
    /// `PEERS` peers, e.g. `Cluster::<32, 1, 4>::sized(..)`.
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn sized(n: u32, seed: u64, tweak: impl Fn(&mut Config)) -> Self {
        assert!(n > 0, "a cluster needs at least one rank");
        let tags = TagSpace::new(32767).expect("32767 is the smallest legal bound");
        let nodes = (0..n)
            .map(|r| {
                let mut config = Config::new(Rank(r), n, tags);
                tweak(&mut config);
                let mut engine = Box::new(Engine::new(config));
                engine.stats_mut().enable();
                Node {
                    engine,
                    admission: Admission::default(),
                    tickets: HashMap::new(),
                    reqs: HashMap::new(),
                    buffers: HashMap::new(),
                    early: HashMap::new(),
                    posted: Vec::new(),
                    unexpected: Vec::new(),
                    marked: Vec::new(),
                    completions: Vec::new(),
                }
            })
            .collect();
        Self {
            nodes,
            links: BTreeMap::new(),
            unsent: Vec::new(),
            network: Network::PerPair,
            rng: SplitMix64::new(seed),
            delivered: 0,
            next_ticket: 0,
            fast_counts: (0, 0),
        }
    }

    /// The same cluster over a network that orders messages by `network`.
    #[must_use]
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// The engine of `rank`.
    pub fn engine(&self, rank: Rank) -> &Engine<REQ, KEYS, PEERS> {
        &self.nodes[rank.index()].engine
    }

    /// Messages delivered so far (envelopes and payloads).
    pub const fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Envelopes an engine refused so far for a full table (each was kept and handed in
    /// again later; a retry refused again counts again).
    pub fn refusals(&self) -> u64 {
        self.nodes.iter().map(|n| n.admission.refusals()).sum()
    }

    /// Messages sent on fast tags so far (protocol §19): (fast messages, markers).
    pub const fn fast_counts(&self) -> (u64, u64) {
        self.fast_counts
    }

    /// Submissions made with [`Cluster::post_send`] / [`Cluster::post_recv`] that waited
    /// for room in their engine so far.
    pub fn queued(&self) -> u64 {
        self.nodes.iter().map(|n| n.admission.queued()).sum()
    }

    /// Submits a send of `data` from `rank` as the threaded adapter does: when the
    /// engine has no room for it (or earlier sends of `rank` wait), it waits, in order,
    /// and is submitted when room frees. It waits for [`Cluster::ticket_ready`] unless
    /// `ready`.
    ///
    /// # Panics
    /// When the engine refuses the submission for anything but room (a test bug).
    pub fn post_send(
        &mut self,
        rank: Rank,
        mut args: SendArgs,
        data: Vec<u8>,
        ready: bool,
    ) -> Ticket {
        args.size = data.len() as u64;
        let ticket = self.new_ticket();
        let cmd = SimCmd::Send {
            ticket,
            args,
            data,
            ready,
        };
        self.with_admission(rank, |a, at| a.offer(at, Direction::Send, cmd));
        self.settle();
        ticket
    }

    /// Sends `data` from `rank` at once and without a request, as the threaded adapter's
    /// blocking send of an idle handle does (`Engine::express_send`, protocol §8.2): when
    /// no send of `rank` waits outside its engine and the engine lets it. Returns whether
    /// it left; nothing happened otherwise (the caller submits the send).
    ///
    /// # Panics
    /// When `rank` is not a rank of the cluster.
    pub fn express_send(&mut self, rank: Rank, mut args: SendArgs, data: Vec<u8>) -> bool {
        args.size = data.len() as u64;
        let node = &mut self.nodes[rank.index()];
        if node.admission.sends_wait() {
            return false;
        }
        let Some(Express {
            dest,
            comm,
            tag,
            header,
        }) = node.engine.express_send(args)
        else {
            return false;
        };
        let msg = match header {
            Some(header) => Wire::Envelope {
                comm,
                bytes: [&header[..], &data].concat(),
                inline: None,
            },
            None => {
                self.fast_counts.0 += 1;
                Wire::Payload {
                    comm,
                    tag,
                    bytes: data,
                    sender: None,
                }
            }
        };
        self.push(rank, dest, comm, tag, msg);
        true
    }

    /// Submits a receive on `rank` as the threaded adapter does ([`Cluster::post_send`]).
    ///
    /// # Panics
    /// When the engine refuses the submission for anything but room (a test bug).
    pub fn post_recv(&mut self, rank: Rank, args: RecvArgs, ready: bool) -> Ticket {
        let ticket = self.new_ticket();
        let cmd = SimCmd::Recv {
            ticket,
            args,
            ready,
        };
        self.with_admission(rank, |a, at| a.offer(at, Direction::Recv, cmd));
        self.settle();
        ticket
    }

    /// The data of `ticket`'s request on `rank` was acquired: let it go (at once if it
    /// is in the engine, else as soon as it is).
    ///
    /// # Panics
    /// When the engine refuses (a test bug).
    pub fn ticket_ready(&mut self, rank: Rank, ticket: Ticket) {
        let node = &mut self.nodes[rank.index()];
        if let Some(&(req, kind, key)) = node.reqs.get(&ticket) {
            self.with_admission(rank, |a, at| {
                at.ready(req);
                if kind == Kind::Recv {
                    a.retry_key(at, key);
                }
            });
        } else {
            for dir in [Direction::Send, Direction::Recv] {
                for c in node.admission.waiting_mut(dir) {
                    if c.ticket() == ticket {
                        c.set_ready();
                    }
                }
            }
        }
        self.settle();
    }

    fn new_ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Runs `f` on `rank`'s [`Admission`] with the cluster as its driver.
    fn with_admission<R>(
        &mut self,
        rank: Rank,
        f: impl FnOnce(&mut Admission<SimCmd>, &mut At<'_, REQ, KEYS, PEERS>) -> R,
    ) -> R {
        let mut a = core::mem::take(&mut self.nodes[rank.index()].admission);
        let r = f(
            &mut a,
            &mut At {
                cluster: self,
                rank,
            },
        );
        self.nodes[rank.index()].admission = a;
        r
    }

    /// What `rank` has left and what waits outside its engine (submissions, the keys of
    /// refused envelopes), for a failure message.
    pub fn describe(&self, rank: Rank) -> String {
        let n = &self.nodes[rank.index()];
        format!(
            "left {:?} waiting sends {:?} recvs {:?} refused {:?}",
            self.leftovers(rank),
            n.admission.waiting(Direction::Send).collect::<Vec<_>>(),
            n.admission.waiting(Direction::Recv).collect::<Vec<_>>(),
            n.admission
                .refused()
                .map(|(s, c, b)| n.engine.refusal_order(s, c, b))
                .collect::<Vec<_>>(),
        )
    }

    /// Submits what waits for room and hands refused envelopes in again on every rank,
    /// as the adapter does after progress, until nothing more goes in.
    fn settle(&mut self) {
        let mut moved = true;
        while moved {
            moved = false;
            for r in 0..self.nodes.len() {
                let marked = core::mem::take(&mut self.nodes[r].marked);
                if self.nodes[r].admission.is_empty() {
                    continue;
                }
                moved |= self.with_admission(Rank(r as u32), |a, at| {
                    for key in marked {
                        a.retry_key(at, key);
                    }
                    a.admit_waiting(at) | a.retry_refused(at)
                });
            }
        }
    }

    /// Submits a send of `data` from `rank`; it waits for [`Cluster::data_ready`] unless
    /// `ready`.
    ///
    /// # Panics
    /// When the engine refuses the submission (a test bug); [`Cluster::try_send`] returns
    /// the refusal instead.
    pub fn send(&mut self, rank: Rank, args: SendArgs, data: Vec<u8>, ready: bool) -> ReqId {
        self.try_send(rank, args, data, ready).expect("submit_send")
    }

    /// [`Cluster::send`], returning the engine's refusal instead of panicking.
    ///
    /// # Errors
    /// The [`SubmitError`] of [`Engine::submit_send`]; nothing was submitted.
    ///
    /// # Panics
    /// When `rank` is not a rank of the cluster.
    pub fn try_send(
        &mut self,
        rank: Rank,
        mut args: SendArgs,
        data: Vec<u8>,
        ready: bool,
    ) -> Result<ReqId, SubmitError> {
        args.size = data.len() as u64;
        let node = &mut self.nodes[rank.index()];
        let req = node.engine.submit_send(args)?;
        node.buffers.insert(req, data);
        if ready {
            self.data_ready(rank, req);
        }
        Ok(req)
    }

    /// Submits a receive on `rank`; it waits for [`Cluster::data_ready`] unless `ready`.
    ///
    /// # Panics
    /// When the engine refuses the submission (a test bug); [`Cluster::try_recv`] returns
    /// the refusal instead.
    pub fn recv(&mut self, rank: Rank, args: RecvArgs, ready: bool) -> ReqId {
        self.try_recv(rank, args, ready).expect("submit_recv")
    }

    /// [`Cluster::recv`], returning the engine's refusal instead of panicking.
    ///
    /// # Errors
    /// The [`SubmitError`] of [`Engine::submit_recv`]; nothing was submitted.
    ///
    /// # Panics
    /// When `rank` is not a rank of the cluster.
    pub fn try_recv(
        &mut self,
        rank: Rank,
        args: RecvArgs,
        ready: bool,
    ) -> Result<ReqId, SubmitError> {
        let node = &mut self.nodes[rank.index()];
        let req = node.engine.submit_recv(args)?;
        node.buffers.insert(req, vec![0; args.capacity as usize]);
        if ready {
            self.data_ready(rank, req);
        }
        Ok(req)
    }

    /// The data of `req` on `rank` was acquired: let it go.
    ///
    /// # Panics
    /// When the engine refuses (a test bug).
    pub fn data_ready(&mut self, rank: Rank, req: ReqId) {
        let engine = &mut self.nodes[rank.index()].engine;
        let key = engine
            .request(req)
            .filter(|r| r.kind == Kind::Recv)
            .map(|r| Key::new(r.comm, r.peer, r.tag));
        engine.handle_data_ready(req).expect("handle_data_ready");
        self.drain(rank);
        // Its messages need no room now: those refused go in (as the adapter's submit).
        if let Some(key) = key {
            self.with_admission(rank, |a, at| a.retry_key(at, key));
        }
        self.settle();
    }

    /// Retires a completed, non-detached request on `rank` (the application waited).
    ///
    /// # Panics
    /// When the engine refuses (a test bug).
    pub fn retire(&mut self, rank: Rank, req: ReqId) {
        self.nodes[rank.index()].engine.retire(req).expect("retire");
        self.nodes[rank.index()].buffers.remove(&req);
        self.settle();
    }

    /// Takes the requests of `rank` that finished since the last call.
    pub fn take_completions(&mut self, rank: Rank) -> Vec<Completion> {
        core::mem::take(&mut self.nodes[rank.index()].completions)
    }

    /// Delivers one in-flight message, the first of a channel chosen at random. Returns
    /// `false` when nothing is in flight.
    pub fn step(&mut self) -> bool {
        let busy = self.channels();
        if busy == 0 {
            return false;
        }
        let i = self.rng.below(busy);
        self.step_channel(i)
    }

    /// How many network steps can happen now, the choices of [`Cluster::step_channel`]:
    /// the channels with a message in flight, then (over [`Network::PerTag`]) the sends
    /// not yet reported complete.
    pub fn channels(&self) -> usize {
        self.links.len() + self.unsent.len()
    }

    /// Takes network step `i` of [`Cluster::channels`]: delivers the first message of the
    /// `i`-th channel that has one in flight (in the order source rank, destination rank,
    /// communicator, physical tag), or, past the channels, reports a send complete (oldest
    /// first). Returns `false` when there is no such step.
    pub fn step_channel(&mut self, i: usize) -> bool {
        if let Some(j) = i.checked_sub(self.links.len()) {
            if j >= self.unsent.len() {
                return false;
            }
            let (rank, req) = self.unsent.remove(j);
            self.sent(rank, req);
            self.settle();
            return true;
        }
        let Some(&channel) = self.links.keys().nth(i) else {
            return false;
        };
        let Some(queue) = self.links.get_mut(&channel) else {
            return false;
        };
        let msg = queue.pop_front();
        if queue.is_empty() {
            self.links.remove(&channel);
        }
        let Some(msg) = msg else {
            return false;
        };
        self.delivered += 1;
        self.deliver(Rank(channel.0), Rank(channel.1), msg);
        self.settle();
        true
    }

    /// Delivers messages until none is in flight. Returns how many were delivered.
    pub fn run_until_quiet(&mut self) -> u64 {
        let before = self.delivered;
        while self.step() {}
        self.delivered - before
    }

    /// What `rank` has left (messages never received, requests never finished), the
    /// envelopes still refused included (as messages never received).
    pub fn leftovers(&self, rank: Rank) -> Vec<Leftover> {
        let node = &self.nodes[rank.index()];
        let refused = node
            .admission
            .refused()
            .filter_map(|(s, c, b)| node.engine.orphan_of(s, c, b));
        node.engine.leftovers().chain(refused).collect()
    }

    /// The submissions of `rank` that never went into its engine (still waiting for room
    /// in the admission): send or receive, communicator, peer (destination or source),
    /// tag, oldest first per direction. What the threaded runtime reports as
    /// `Leftover::NeverAdmitted`.
    pub fn never_admitted(&self, rank: Rank) -> Vec<(Kind, CommId, Rank, Tag)> {
        let a = &self.nodes[rank.index()].admission;
        a.waiting(Direction::Send)
            .chain(a.waiting(Direction::Recv))
            .map(|c| match c {
                SimCmd::Send { args, .. } => (Kind::Send, args.comm, args.dest, args.tag),
                SimCmd::Recv { args, .. } => (Kind::Recv, args.comm, args.source, args.tag),
            })
            .collect()
    }

    /// Whether the simulated transports hold nothing: no message arrived that no
    /// receive took (the transport's unexpected queue: a fast message or a marker with
    /// no receive, protocol §19), no receive posted that got nothing. At the end of a
    /// run, with [`Cluster::is_quiet`].
    pub fn transports_empty(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.unexpected.is_empty() && n.posted.is_empty())
    }

    /// Whether every rank is idle and nothing is in flight.
    pub fn is_quiet(&self) -> bool {
        self.links.is_empty()
            && self.unsent.is_empty()
            && self
                .nodes
                .iter()
                .all(|n| n.admission.is_empty() && n.engine.is_idle())
    }

    /// The random generator, for workloads that want to share the seed.
    pub const fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }
}

/// A [`Cluster`] driving one rank's [`Admission`]: the adapter's part, simulated.
struct At<'a, const REQ: usize, const KEYS: usize, const PEERS: usize> {
    cluster: &'a mut Cluster<REQ, KEYS, PEERS>,
    rank: Rank,
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> At<'_, REQ, KEYS, PEERS> {
    /// The data of `req`, in the engine, is ready.
    fn ready(&mut self, req: ReqId) {
        self.cluster.nodes[self.rank.index()]
            .engine
            .handle_data_ready(req)
            .expect("handle_data_ready");
        self.cluster.drain(self.rank);
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Admit for At<'_, REQ, KEYS, PEERS> {
    type Cmd = SimCmd;

    fn submit(&mut self, c: SimCmd) -> Result<Option<Key>, SimCmd> {
        self.cluster.submit(self.rank, c)
    }

    fn hand_in(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)> {
        self.cluster.hand_in(self.rank, source, comm, bytes)
    }

    fn refusal_order(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<RefusalOrder> {
        self.cluster.nodes[self.rank.index()]
            .engine
            .refusal_order(source, comm, bytes)
    }

    fn can_submit(&self, dir: Direction) -> bool {
        self.cluster.nodes[self.rank.index()]
            .engine
            .can_submit(dir.kind())
    }

    fn recv_key(&self, c: &SimCmd) -> Option<Key> {
        match c {
            SimCmd::Recv { args, .. } => Some(Key::new(args.comm, args.source, args.tag)),
            SimCmd::Send { .. } => None,
        }
    }

    fn has_room(&self, table: Table) -> bool {
        self.cluster.nodes[self.rank.index()].engine.room_for(table)
    }

    fn free_recv_slots(&self) -> Option<usize> {
        self.cluster.nodes[self.rank.index()]
            .engine
            .free_recv_slots()
    }

    fn has_early(&self, key: Key) -> bool {
        self.cluster.nodes[self.rank.index()].engine.has_early(key)
    }

    fn recv_would_wait(&self, key: Key) -> bool {
        self.cluster.nodes[self.rank.index()]
            .engine
            .recv_would_wait(key)
    }

    fn recv_room(&self) -> Option<starling_core::engine::RecvRoom> {
        Some(self.cluster.nodes[self.rank.index()].engine.recv_room())
    }

    fn fast_path(&self) -> bool {
        starling_core::fast::enabled(self.cluster.nodes[self.rank.index()].engine.config())
    }

    fn fast_message_here(&self, key: Key) -> bool {
        let node = &self.cluster.nodes[self.rank.index()];
        starling_core::fast::fast_tag(node.engine.config(), key.comm, key.tag).is_some_and(|tag| {
            node.unexpected
                .iter()
                .any(|u| u.source == key.peer && u.comm == key.comm && u.tag == tag)
        })
    }

    fn early_keys(&self, f: &mut dyn FnMut(Key)) {
        self.cluster.nodes[self.rank.index()]
            .engine
            .early_keys()
            .for_each(f);
    }

    fn any_early(&self) -> bool {
        self.cluster.nodes[self.rank.index()].engine.any_early()
    }

    fn waiting_arrivals(&self) -> u64 {
        self.cluster.nodes[self.rank.index()]
            .engine
            .waiting_arrivals()
    }
}

#[cfg(test)]
mod tests;
