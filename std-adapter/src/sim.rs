//! A seeded, deterministic cluster of N protocol engines in one thread.
//!
//! [`Cluster`] drives N [`Engine`]s over a simulated network that keeps MPI's guarantee —
//! messages between one ordered pair of ranks arrive in the order they were sent — and
//! nothing more: which pair delivers next, and when a send is reported complete, are
//! chosen by a seeded random generator. Every run with the same seed and the same calls
//! is the same run, so a failing interleaving is replayed from its seed.
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

use std::collections::{HashMap, VecDeque};

use starling_core::engine::{
    Arrival, Config, Engine, Event, Leftover, RecvArgs, RequestError, SendArgs, SubmitError,
    Transmit,
};
use starling_core::request::Kind;
use starling_core::tags::TagSpace;
use starling_core::{CommId, PhysTag, Rank, ReqId};

/// The engine type the simulator runs: 1024 requests, 256 match keys, 64 peers.
pub type SimEngine = Engine<1024, 256, 64>;

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
        sender: ReqId,
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

struct Node {
    engine: Box<SimEngine>,
    /// Send payloads and receive buffers of application requests.
    buffers: HashMap<ReqId, Vec<u8>>,
    /// Early buffers of the engine's own requests.
    early: HashMap<ReqId, Vec<u8>>,
    posted: Vec<PostedRecv>,
    unexpected: Vec<UnexpectedPayload>,
    completions: Vec<Completion>,
}

/// N engines over a seeded, per-pair-FIFO network. See the [module docs](self).
pub struct Cluster {
    nodes: Vec<Node>,
    /// `links[src * n + dst]`: messages in flight from `src` to `dst`, in order.
    links: Vec<VecDeque<Wire>>,
    rng: SplitMix64,
    delivered: u64,
}

impl core::fmt::Debug for Cluster {
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
        assert!(n > 0, "a cluster needs at least one rank");
        let tags = TagSpace::new(32767).expect("32767 is the smallest legal bound");
        let nodes = (0..n)
            .map(|r| {
                let mut config = Config::new(Rank(r), n, tags);
                tweak(&mut config);
                let mut engine = Box::new(SimEngine::new(config));
                engine.stats_mut().enable();
                Node {
                    engine,
                    buffers: HashMap::new(),
                    early: HashMap::new(),
                    posted: Vec::new(),
                    unexpected: Vec::new(),
                    completions: Vec::new(),
                }
            })
            .collect();
        let links = (0..n * n).map(|_| VecDeque::new()).collect();
        Self {
            nodes,
            links,
            rng: SplitMix64::new(seed),
            delivered: 0,
        }
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// The engine of `rank`.
    pub fn engine(&self, rank: Rank) -> &SimEngine {
        &self.nodes[rank.index()].engine
    }

    /// Messages delivered so far (envelopes and payloads).
    pub const fn delivered(&self) -> u64 {
        self.delivered
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
        self.nodes[rank.index()]
            .engine
            .handle_data_ready(req)
            .expect("handle_data_ready");
        self.drain(rank);
    }

    /// Retires a completed, non-detached request on `rank` (the application waited).
    ///
    /// # Panics
    /// When the engine refuses (a test bug).
    pub fn retire(&mut self, rank: Rank, req: ReqId) {
        self.nodes[rank.index()].engine.retire(req).expect("retire");
        self.nodes[rank.index()].buffers.remove(&req);
    }

    /// Takes the requests of `rank` that finished since the last call.
    pub fn take_completions(&mut self, rank: Rank) -> Vec<Completion> {
        core::mem::take(&mut self.nodes[rank.index()].completions)
    }

    /// Delivers one in-flight message, from a pair chosen at random. Returns `false` when
    /// nothing is in flight.
    pub fn step(&mut self) -> bool {
        let busy: Vec<usize> = (0..self.links.len())
            .filter(|&i| !self.links[i].is_empty())
            .collect();
        if busy.is_empty() {
            return false;
        }
        let link = busy[self.rng.below(busy.len())];
        let n = self.nodes.len();
        let (src, dst) = (Rank((link / n) as u32), Rank((link % n) as u32));
        let Some(msg) = self.links[link].pop_front() else {
            return false;
        };
        self.delivered += 1;
        self.deliver(src, dst, msg);
        true
    }

    /// Delivers messages until none is in flight. Returns how many were delivered.
    pub fn run_until_quiet(&mut self) -> u64 {
        let before = self.delivered;
        while self.step() {}
        self.delivered - before
    }

    /// What `rank` has left (messages never received, requests never finished).
    pub fn leftovers(&self, rank: Rank) -> Vec<Leftover> {
        self.nodes[rank.index()].engine.leftovers().collect()
    }

    /// Whether every rank is idle and nothing is in flight.
    pub fn is_quiet(&self) -> bool {
        self.links.iter().all(VecDeque::is_empty) && self.nodes.iter().all(|n| n.engine.is_idle())
    }

    /// The random generator, for workloads that want to share the seed.
    pub const fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }

    fn link(&mut self, src: Rank, dst: Rank) -> &mut VecDeque<Wire> {
        let n = self.nodes.len();
        &mut self.links[src.index() * n + dst.index()]
    }

    fn deliver(&mut self, src: Rank, dst: Rank, msg: Wire) {
        match msg {
            Wire::Envelope {
                comm,
                bytes,
                inline,
            } => {
                if let Some(req) = inline {
                    self.sent(src, req);
                }
                let node = &mut self.nodes[dst.index()];
                match node.engine.handle_message(src, comm, &bytes) {
                    Ok(Arrival::Nothing) => {}
                    Ok(Arrival::Deliver { req, inline }) => {
                        let buf = node.buffers.get_mut(&req).expect("receive buffer");
                        buf[..inline.len()].copy_from_slice(inline);
                    }
                    Ok(Arrival::Stash { early, inline }) => {
                        node.early.insert(early, inline.to_vec());
                    }
                    Err(e) => panic!("rank {} refused a message from {src}: {e}", dst.0),
                }
                self.drain(dst);
            }
            Wire::Payload {
                comm,
                tag,
                bytes,
                sender,
            } => {
                self.sent(src, sender);
                let node = &mut self.nodes[dst.index()];
                let pos = node
                    .posted
                    .iter()
                    .position(|p| p.source == src && p.comm == comm && p.tag == tag);
                match pos {
                    Some(i) => {
                        let p = node.posted.remove(i);
                        self.received(dst, p.req, &bytes);
                    }
                    None => node.unexpected.push(UnexpectedPayload {
                        source: src,
                        comm,
                        tag,
                        bytes,
                    }),
                }
            }
        }
    }

    fn sent(&mut self, rank: Rank, req: ReqId) {
        self.nodes[rank.index()]
            .engine
            .handle_sent(req)
            .expect("handle_sent");
        self.drain(rank);
    }

    fn received(&mut self, rank: Rank, req: ReqId, bytes: &[u8]) {
        let node = &mut self.nodes[rank.index()];
        let buf = node
            .early
            .get_mut(&req)
            .or_else(|| node.buffers.get_mut(&req))
            .expect("a buffer for every posted receive");
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        node.engine
            .handle_received(req, bytes.len() as u64)
            .expect("handle_received");
        self.drain(rank);
    }

    /// Performs every output of `rank`'s engine (the adapter's drain loop).
    fn drain(&mut self, rank: Rank) {
        loop {
            let node = &mut self.nodes[rank.index()];
            if let Some(t) = node.engine.poll_transmit() {
                self.perform(rank, t);
                continue;
            }
            if let Some(e) = node.engine.poll_event() {
                Self::on_event(node, rank, e);
                continue;
            }
            break;
        }
    }

    fn perform(&mut self, rank: Rank, t: Transmit) {
        match t {
            Transmit::Envelope {
                dest,
                comm,
                header,
                inline,
                ..
            } => {
                let mut bytes = header.to_vec();
                if let Some(req) = inline {
                    bytes.extend_from_slice(&self.nodes[rank.index()].buffers[&req]);
                }
                self.link(rank, dest).push_back(Wire::Envelope {
                    comm,
                    bytes,
                    inline,
                });
            }
            Transmit::Payload {
                req,
                dest,
                comm,
                tag,
                ..
            } => {
                let bytes = self.nodes[rank.index()].buffers[&req].clone();
                self.link(rank, dest).push_back(Wire::Payload {
                    comm,
                    tag,
                    bytes,
                    sender: req,
                });
            }
            Transmit::Receive {
                req,
                source,
                comm,
                tag,
                size,
                early,
            } => {
                let node = &mut self.nodes[rank.index()];
                if early {
                    node.early.insert(req, vec![0; size as usize]);
                }
                let pos = node
                    .unexpected
                    .iter()
                    .position(|u| u.source == source && u.comm == comm && u.tag == tag);
                match pos {
                    Some(i) => {
                        let u = node.unexpected.remove(i);
                        self.received(rank, req, &u.bytes);
                    }
                    None => node.posted.push(PostedRecv {
                        source,
                        comm,
                        tag,
                        req,
                    }),
                }
            }
        }
    }

    fn on_event(node: &mut Node, rank: Rank, e: Event) {
        match e {
            Event::Completed {
                req,
                kind,
                len,
                from_early,
            } => {
                if let Some(early) = from_early {
                    let bytes = node.early.remove(&early).expect("early buffer");
                    let buf = node.buffers.get_mut(&req).expect("receive buffer");
                    buf[..len as usize].copy_from_slice(&bytes[..len as usize]);
                }
                let data = match kind {
                    Kind::Recv => node.buffers[&req][..len as usize].to_vec(),
                    Kind::Send => Vec::new(),
                };
                node.completions.push(Completion {
                    rank,
                    req,
                    kind,
                    data,
                    error: None,
                });
            }
            Event::Failed { req, kind, error } => {
                node.completions.push(Completion {
                    rank,
                    req,
                    kind,
                    data: Vec::new(),
                    error: Some(error),
                });
            }
            Event::Discard { early } => {
                node.early.remove(&early);
            }
        }
    }
}
