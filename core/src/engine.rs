//! The progression engine: point-to-point messaging of one rank, sans-IO.
//!
//! The engine ties the [request slab](crate::request), the [ready list](crate::lists),
//! the [matcher](crate::matcher), the [sync-send table](crate::lists::SyncSends), the
//! [tag space](crate::tags) and the [statistics](crate::stats) into the two-message
//! protocol of the reference (internals §3): every user message is an
//! [envelope] — kind, communicator, 64-bit user tag, size, message id —
//! then, unless the payload travelled inline, a payload on a physical data tag.
//!
//! It performs no I/O. The adapter (the in-process cluster, the MPI progression thread,
//! the deterministic simulator) feeds it what the transport reports and performs what
//! it asks for.
//!
//! # The driving contract
//!
//! The engine has four kinds of methods:
//!
//! * **commands** from the application: [`Engine::submit_send`], [`Engine::submit_recv`],
//!   [`Engine::handle_data_ready`] (the runtime acquired the request's data: R for a send,
//!   W for a receive), [`Engine::retire`] (the application waited on a non-detached request);
//! * **inputs** from the transport: [`Engine::handle_message`] (a message arrived on the
//!   envelope tag), [`Engine::handle_sent`] (a posted send finished),
//!   [`Engine::handle_received`] (a posted receive finished);
//! * **outputs**: [`Engine::poll_transmit`] (what to post to the transport) and
//!   [`Engine::poll_event`] (what to tell the application);
//! * **getters**: [`Engine::request`], [`Engine::is_idle`], [`Engine::leftovers`], ...
//!
//! The rule: **after any command or input, drain [`Engine::poll_transmit`] and
//! [`Engine::poll_event`] until both return `None`.** The engine keeps only a small,
//! fixed queue of outputs ([`OUTPUTS`] each); an input that finds too little room left
//! is refused with [`Table::Transmits`] or [`Table::Events`] before it changes anything,
//! so a careless adapter gets an error, never a lost message.
//!
//! Payload bytes never enter the engine. Each [`Transmit`] names the request whose buffer
//! the adapter sends from or receives into; requests the engine creates for itself
//! (early data, see below) are named too, and the adapter allocates their buffers of
//! the size given.
//!
//! ```
//! use starling_core::engine::{Arrival, Config, Engine, Event, RecvArgs, SendArgs, Transmit};
//! use starling_core::tags::TagSpace;
//! use starling_core::{CommId, Rank, Tag};
//!
//! let tags = TagSpace::new(32767).unwrap();
//! let mut a: Engine<8, 8, 4> = Engine::new(Config::new(Rank(0), 2, tags));
//! let mut b: Engine<8, 8, 4> = Engine::new(Config::new(Rank(1), 2, tags));
//!
//! // Rank 0 sends 3 bytes with tag 7; rank 1 receives them.
//! let send = a.submit_send(SendArgs::new(CommId::WORLD, Rank(1), Tag(7), 3)).unwrap();
//! a.handle_data_ready(send).unwrap();
//! let recv = b.submit_recv(RecvArgs::new(CommId::WORLD, Rank(0), Tag(7), 16)).unwrap();
//! b.handle_data_ready(recv).unwrap();
//!
//! let payload = [1u8, 2, 3];
//! let mut inbox = [0u8; 16];
//! let mut got = None;
//! // The adapter's loop: perform every transmit, feed back what the transport reports.
//! while let Some(t) = a.poll_transmit() {
//!     match t {
//!         Transmit::Envelope { header, inline, .. } => {
//!             // A 3-byte payload is under the eager limit: it travels inline.
//!             let mut msg = header.to_vec();
//!             if let Some(req) = inline {
//!                 msg.extend_from_slice(&payload);
//!                 a.handle_sent(req).unwrap();
//!             }
//!             match b.handle_message(Rank(0), CommId::WORLD, &msg).unwrap() {
//!                 Arrival::Deliver { req, inline } => {
//!                     inbox[..inline.len()].copy_from_slice(inline);
//!                     got = Some(req);
//!                 }
//!                 other => unreachable!("{other:?}"),
//!             }
//!         }
//!         other => unreachable!("{other:?}"),
//!     }
//! }
//! assert_eq!(got, Some(recv));
//! assert!(matches!(a.poll_event(), Some(Event::Completed { req, .. }) if req == send));
//! assert!(matches!(b.poll_event(), Some(Event::Completed { req, len: 3, .. }) if req == recv));
//! assert_eq!(&inbox[..3], &payload);
//! ```
//!
//! # Early data, synchronous sends, ordering
//!
//! * A data envelope with no posted receive is **early data**: the engine creates an
//!   internal receive (an *early request*) of the envelope's size and asks the adapter to
//!   post it at once ([`Transmit::Receive`] with `early: true`), so payload receives are
//!   posted in envelope order per source — the ordering invariant of internals §3.4. When
//!   the application's receive arrives, [`Event::Completed`] carries `from_early`: the
//!   adapter moves that buffer into the request's buffer, then frees it.
//! * An eager envelope with no posted receive is stashed by the adapter
//!   ([`Arrival::Stash`]) and delivered the same way.
//! * A synchronous send (`sync`) sends only its envelope; the payload waits for the
//!   receiver's `SyncReady` acknowledgement, which names the send by [`MsgId`], so no
//!   early buffer is ever made for it and two handshakes can never be confused (the
//!   reference's sync-table collision, internals §12.6, cannot happen: pending sync sends
//!   are keyed by message id, arrived sync envelopes by user key, in separate tables).
//! * Messages with the same (communicator, source, tag) are received in the order they
//!   were sent, whatever their kinds (data, eager, sync): one FIFO per key holds them all.
//! * Sends leave in priority order (highest first, FIFO among equals) when more are ready
//!   than the in-flight cap ([`Config::max_inflight_sends`]) lets out.

use core::fmt;

use heapless::Deque;
use heapless::index_map::FnvIndexMap;

mod errors;
mod io;

pub use errors::{MessageError, PeerError, RequestError, SubmitError, UsageError};
pub use io::{
    Arrival, Budget, Config, DEFAULT_EAGER_LIMIT, Event, Leftover, OUTPUTS, RecvArgs, SendArgs,
    Transmit, WORST_CASE_OUTPUTS,
};

use crate::envelope::{self, Envelope, Kind as EnvKind};
use crate::error::Table;
use crate::lists::{Key, ReadyList, SyncSends};
use crate::matcher::{Matcher, Unexpected, UnexpectedKind};
use crate::request::{IllegalStep, Kind, Link, Request, Slab, State, Step};
use crate::stats::Stats;
use crate::types::{CommId, MsgId, PhysTag, Priority, Rank, ReqId, Tag};

/// The progression engine of one rank.
///
/// `REQ` bounds live requests (application and early ones together) and must be a power
/// of two; `KEYS` bounds distinct (communicator, source, tag) keys waiting in the matcher,
/// a power of two; `PEERS` bounds the peers the statistics tell apart.
pub struct Engine<const REQ: usize, const KEYS: usize, const PEERS: usize> {
    config: Config,
    requests: Slab<REQ>,
    ready: ReadyList<REQ>,
    matcher: Matcher<KEYS, REQ>,
    sync_sends: SyncSends<REQ>,
    /// Sends whose payload goes out next: after its envelope, or after the ready ack.
    payloads: Deque<ReqId, REQ>,
    /// Ready receives the matcher had no room for, in order, with their keys (see
    /// `handle_data_ready`).
    deferred: Deque<(ReqId, Key), REQ>,
    /// How many deferred receives each key has (keys with none are absent): an arrival
    /// looks for a deferred receive of its key only when there is one.
    deferred_keys: FnvIndexMap<Key, u32, REQ>,
    /// A receive was deferred while a message of its key waited in the matcher: the next
    /// retry looks at every deferred receive, not only the oldest.
    deferred_matchable: bool,
    transmits: Deque<Transmit, OUTPUTS>,
    events: Deque<Event, OUTPUTS>,
    next_msg: MsgId,
    inflight_sends: u32,
    early_messages: u64,
    stats: Stats<PEERS>,
    /// Live application sends, application receives and engine-owned (early, discard)
    /// requests, for the [`Budget`].
    live: Live,
    /// Something changed that may let a deferred receive in (a freed slot, an arrival).
    deferred_dirty: bool,
}

/// What a refused envelope keeps its order with ([`Engine::refusal_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RefusalOrder {
    /// The matching key (communicator, source, user tag): messages of one key are
    /// received in the order they were sent.
    pub key: Key,
    /// The physical tag its payload follows on, for a data envelope (from the same
    /// source): payloads on one tag are matched in the order their receives are posted.
    pub payload: Option<PhysTag>,
}

/// Live requests per class of the [`Budget`].
#[derive(Clone, Copy, Debug, Default)]
struct Live {
    sends: usize,
    recvs: usize,
    early: usize,
}

/// The class of a request, for the [`Budget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Send,
    Recv,
    Early,
}

impl Class {
    const fn of(r: &Request) -> Self {
        match (r.internal, r.kind) {
            (true, _) => Self::Early,
            (false, Kind::Send) => Self::Send,
            (false, Kind::Recv) => Self::Recv,
        }
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> fmt::Debug
    for Engine<REQ, KEYS, PEERS>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("requests", &self.requests.len())
            .field("ready", &self.ready.len())
            .field("inflight_sends", &self.inflight_sends)
            .finish_non_exhaustive()
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    /// A new engine with nothing pending.
    pub const fn new(config: Config) -> Self {
        Self {
            config,
            requests: Slab::new(),
            ready: ReadyList::new(),
            matcher: Matcher::new(),
            sync_sends: SyncSends::new(),
            payloads: Deque::new(),
            deferred: Deque::new(),
            deferred_keys: FnvIndexMap::new(),
            deferred_matchable: false,
            transmits: Deque::new(),
            events: Deque::new(),
            next_msg: MsgId(0),
            inflight_sends: 0,
            early_messages: 0,
            stats: Stats::new(),
            live: Live {
                sends: 0,
                recvs: 0,
                early: 0,
            },
            deferred_dirty: false,
        }
    }

    /// How the slab is shared out: `None` with no [`Config::request_limit`] (the whole
    /// slab, first come first served).
    pub fn budget(&self) -> Option<Budget> {
        match self.config.request_limit as usize {
            0 => None,
            n => Some(Budget::of(if n > REQ { REQ } else { n })),
        }
    }

    /// The most distinct keys each matcher table may use ([`Config::key_limit`]).
    pub const fn key_limit(&self) -> usize {
        match self.config.key_limit as usize {
            0 => KEYS,
            n if n > KEYS => KEYS,
            n => n,
        }
    }

    /// Whether a new request of `class` fits the slab and the budget.
    fn has_room(&self, class: Class) -> bool {
        if self.requests.len() >= self.requests.capacity() {
            return false;
        }
        let Some(b) = self.budget() else {
            return true;
        };
        let Live {
            sends,
            recvs,
            early,
        } = self.live;
        match class {
            Class::Send => sends < b.sends,
            Class::Recv => recvs + early < b.recvs,
            // An early request never takes the last receive slot: it is kept for a
            // receive whose message is already here (see [`Engine::free_recv_slots`]).
            Class::Early => early < b.early && recvs + early + 1 < b.recvs,
        }
    }

    /// The receive slots free now: how many more application receives the budget (and
    /// the slab) would take. `None` with no [`Config::request_limit`] (no budget: first
    /// come first served).
    ///
    /// An adapter keeps the last one for a receive whose message is already here (early
    /// data of its key: [`Engine::has_early`], or an envelope it refused): a receive
    /// whose message is not here may depend on a later one's completion, and early
    /// requests never take it either, so a receive whose message is here can always go
    /// in, complete and free it.
    pub fn free_recv_slots(&self) -> Option<usize> {
        let b = self.budget()?;
        let slab = self.requests.capacity() - self.requests.len();
        let budget = b.recvs.saturating_sub(self.live.recvs + self.live.early);
        Some(if slab < budget { slab } else { budget })
    }

    /// Whether `table` may have room for an arrival now: `false` only when an envelope
    /// that [`Engine::handle_message`] refused with [`MessageError::Full`]`(table)` would
    /// certainly be refused again for it (the request budget's early class, the early
    /// data's keys, the output queues); `true` for the tables it cannot tell about. An
    /// adapter that keeps refused envelopes tries again only those whose table may have
    /// room, rather than every one after every completion.
    pub fn room_for(&self, table: Table) -> bool {
        match table {
            Table::Requests => self.has_room(Class::Early),
            Table::MatchKeys => self.matcher.unexpected_keys() < self.key_limit(),
            Table::Transmits | Table::Events => self.check_room().is_ok(),
            _ => true,
        }
    }

    /// Whether a message of `key` waits in the engine for its receive (early data, or
    /// the envelope of a synchronous or rendezvous send): a receive of `key` posted now
    /// is matched at once and completes without anything else.
    pub fn has_early(&self, key: Key) -> bool {
        self.matcher.has_unexpected_key(key)
    }

    /// Whether any message waits in the engine for its receive ([`Engine::has_early`]
    /// of some key).
    pub fn any_early(&self) -> bool {
        self.matcher.unexpected_keys() > 0
    }

    /// The key of each message waiting in the engine for its receive, oldest first per
    /// key (a key comes once per message).
    pub fn early_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.matcher.unexpected().map(|(k, _)| k)
    }

    /// Inserts `r` into the slab, counting it in its class.
    fn slab_insert(&mut self, r: Request) -> Result<ReqId, crate::error::Full<Request>> {
        let class = Class::of(&r);
        let id = self.requests.insert(r)?;
        match class {
            Class::Send => self.live.sends += 1,
            Class::Recv => self.live.recvs += 1,
            Class::Early => self.live.early += 1,
        }
        Ok(id)
    }

    /// Removes `id` from the slab, uncounting it.
    fn slab_remove(&mut self, id: ReqId) -> Option<Request> {
        let r = self.requests.remove(id)?;
        match Class::of(&r) {
            Class::Send => self.live.sends -= 1,
            Class::Recv => self.live.recvs -= 1,
            Class::Early => self.live.early -= 1,
        }
        self.deferred_dirty = true;
        Some(r)
    }

    // ----- getters ---------------------------------------------------------------------

    /// The configuration.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// A live request (submitted, or completed and not yet retired).
    pub fn request(&self, req: ReqId) -> Option<&Request> {
        self.requests.get(req)
    }

    /// The communication statistics (payload bytes per peer).
    pub const fn stats(&self) -> &Stats<PEERS> {
        &self.stats
    }

    /// The communication statistics, to enable, disable or reset them.
    pub const fn stats_mut(&mut self) -> &mut Stats<PEERS> {
        &mut self.stats
    }

    /// How many messages arrived before their receive and were kept as early data (a
    /// payload received into an engine buffer, or an eager payload stashed) since the
    /// engine started. Synchronous sends never add to it (the reference's test hook
    /// `early_data_nb`).
    pub const fn early_messages(&self) -> u64 {
        self.early_messages
    }

    /// Application requests submitted and not yet completed (the reference's
    /// `posted_requests`, which `wait_for_all` waits to reach zero).
    pub fn pending(&self) -> usize {
        self.requests
            .iter()
            .filter(|(_, r)| !r.internal && r.state != State::Completed)
            .count()
    }

    /// Whether nothing at all is in progress: no pending request, no early data, no
    /// output waiting. A non-detached completed request not yet retired does not count.
    pub fn is_idle(&self) -> bool {
        self.pending() == 0
            && self.matcher.is_empty()
            && self.transmits.is_empty()
            && self.events.is_empty()
            && self.requests.iter().all(|(_, r)| !r.internal)
    }

    /// What is left: messages never received, requests never completed, completed
    /// requests never retired. Empty after a clean run. Call it at shutdown and report
    /// each item (Starling never aborts on them, unlike the reference).
    pub fn leftovers(&self) -> impl Iterator<Item = Leftover> + '_ {
        let orphans = self.matcher.orphans().map(Leftover::Orphan);
        let requests = self.requests.iter().filter_map(|(id, r)| {
            if r.internal {
                return None; // reported as its orphan, or through the receive it feeds
            }
            if r.state == State::Completed {
                return (!r.detached).then_some(Leftover::NotRetired {
                    req: id,
                    kind: r.kind,
                    peer: r.peer,
                    tag: r.tag,
                });
            }
            Some(Leftover::Pending {
                req: id,
                kind: r.kind,
                comm: r.comm,
                peer: r.peer,
                tag: r.tag,
                size: r.size,
                state: r.state,
            })
        });
        orphans.chain(requests)
    }

    // ----- commands --------------------------------------------------------------------

    /// Submits a send. It leaves once [`Engine::handle_data_ready`] says its data can be
    /// read.
    ///
    /// # Errors
    /// [`SubmitError::RankOutOfRange`] for a destination outside the world;
    /// [`SubmitError::Full`] when the slab or the detached list is full. Nothing is
    /// submitted on error.
    pub fn submit_send(&mut self, args: SendArgs) -> Result<ReqId, SubmitError> {
        self.check_rank(args.dest)?;
        let priority = if self.config.priorities {
            args.priority
        } else {
            Priority::DEFAULT
        };
        let request = Request::send(args.comm, args.dest, args.tag, args.size)
            .with_priority(priority)
            .with_sync(args.sync)
            .with_detached(args.detached);
        self.insert(request)
    }

    /// Submits a receive. It is matched once [`Engine::handle_data_ready`] says its buffer
    /// can be written.
    ///
    /// # Errors
    /// As for [`Engine::submit_send`].
    pub fn submit_recv(&mut self, args: RecvArgs) -> Result<ReqId, SubmitError> {
        self.check_rank(args.source)?;
        let request = Request::recv(args.comm, args.source, args.tag, args.capacity)
            .with_detached(args.detached);
        self.insert(request)
    }

    /// The runtime acquired the data of `req` (read for a send, write for a receive): a
    /// send joins the ready list, a receive is matched against early data or waits for
    /// its envelope.
    ///
    /// # Errors
    /// [`UsageError::UnknownRequest`], [`UsageError::IllegalStep`] (data ready twice),
    /// [`UsageError::Full`] when an output queue has no room; nothing is changed on error.
    ///
    /// A receive that the matcher has no room for (too many keys or receives waiting) is
    /// not an error: it waits, `Ready`, behind the other such receives and goes in, in
    /// order, as arrivals free room — so receives of one key keep their order.
    pub fn handle_data_ready(&mut self, req: ReqId) -> Result<(), UsageError> {
        self.check_room()?;
        let r = *self.get(req)?;
        let next = r.state.step(r.kind, r.sync, Step::DataReady)?;
        match r.kind {
            Kind::Send => {
                self.ready
                    .push(req, r.priority)
                    .map_err(|e| UsageError::Full(e.table))?;
                self.set_state(req, next);
            }
            Kind::Recv => {
                // Receives wait in order behind any receive the matcher had no room for.
                if !self.deferred.is_empty() {
                    self.defer(req, next)?;
                } else if let Err(e) = self.post_ready_recv(req, &r, next) {
                    match e {
                        UsageError::Full(Table::EarlyRequests | Table::MatchKeys) => {
                            self.defer(req, next)?;
                        }
                        other => return Err(other),
                    }
                }
            }
        }
        Ok(())
    }

    /// Matches a receive whose data just became ready with the oldest early message of its
    /// key, or records it in the matcher. Nothing changes on error.
    fn post_ready_recv(&mut self, req: ReqId, r: &Request, next: State) -> Result<(), UsageError> {
        let key = Key {
            comm: r.comm,
            peer: r.peer,
            tag: r.tag,
        };
        if let Some(u) = self.matcher.peek_unexpected(key).copied() {
            self.room_for_match(r, &u)?;
            let _ = self.matcher.take_unexpected(key);
            self.set_state(req, next);
            self.match_recv(req, u);
        } else {
            if !self.matcher.has_recv_key(key) && self.matcher.recv_keys() >= self.key_limit() {
                return Err(UsageError::Full(Table::MatchKeys));
            }
            self.matcher
                .push_recv(key, req)
                .map_err(|e| UsageError::Full(e.table))?;
            self.set_state(req, next);
            self.step(req, Step::Queued);
        }
        Ok(())
    }

    /// The oldest deferred receive of `key`, when the matcher holds neither a receive
    /// nor a message of `key` (then it is the oldest receive of the key).
    fn peek_deferred(&self, key: Key) -> Option<ReqId> {
        if !self.deferred_keys.contains_key(&key) || self.matcher.peek_unexpected(key).is_some() {
            return None;
        }
        self.deferred
            .iter()
            .find(|(_, k)| *k == key)
            .map(|(id, _)| *id)
    }

    /// Takes [`Engine::peek_deferred`] out of the deferred receives; the others keep
    /// their order.
    fn take_deferred(&mut self, key: Key) -> Option<ReqId> {
        let id = self.peek_deferred(key)?;
        for _ in 0..self.deferred.len() {
            if let Some(d) = self.deferred.pop_front() {
                if d.0 != id {
                    let _ = self.deferred.push_back(d);
                }
            }
        }
        self.uncount_deferred(key);
        Some(id)
    }

    /// One deferred receive of `key` fewer.
    fn uncount_deferred(&mut self, key: Key) {
        if let Some(n) = self.deferred_keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.deferred_keys.remove(&key);
            }
        }
    }

    /// Keeps a ready receive that the matcher has no room for, behind the others; it goes
    /// in when an arrival frees room ([`Engine::retry_deferred`]). It stays `Ready`.
    fn defer(&mut self, req: ReqId, next: State) -> Result<(), UsageError> {
        let full = UsageError::Full(Table::EarlyRequests);
        let r = self.get(req)?;
        let key = Key {
            comm: r.comm,
            peer: r.peer,
            tag: r.tag,
        };
        // One entry per live request at most: neither can be full.
        if self.deferred.is_full()
            || (self.deferred_keys.len() == REQ && !self.deferred_keys.contains_key(&key))
        {
            return Err(full);
        }
        let _ = self.deferred.push_back((req, key));
        match self.deferred_keys.get_mut(&key) {
            Some(n) => *n += 1,
            None => {
                let _ = self.deferred_keys.insert(key, 1);
            }
        }
        if self.matcher.peek_unexpected(key).is_some() {
            self.deferred_matchable = true;
        }
        self.deferred_dirty = true;
        self.set_state(req, next);
        Ok(())
    }

    /// Hands deferred receives to the matcher again while the output queues have room
    /// for what a match produces: the oldest ones, in order, while the matcher has room
    /// for them; then, when one was deferred while its message waited, every receive
    /// whose message waits takes it, whatever waits before it. A receive held back holds
    /// back only the receives of its own key (a later one of its key could not take a
    /// message before it: its message would wait for it first), and once one with a
    /// message waiting cannot go in (no discard buffer), the rest wait as they are.
    fn retry_deferred(&mut self) {
        if self.deferred.is_empty() || !self.deferred_dirty {
            return;
        }
        self.deferred_dirty = false;
        while let Some(&(req, key)) = self.deferred.front() {
            if self.check_room().is_err() {
                // Outputs first: try again after they are drained.
                self.deferred_dirty = true;
                return;
            }
            if let Some(r) = self.requests.get(req).copied() {
                // `post_ready_recv` steps from `Created`; the request is `Ready`.
                let Ok(next) = State::Created.step(r.kind, r.sync, Step::DataReady) else {
                    break;
                };
                if self.post_ready_recv(req, &r, next).is_err() {
                    break;
                }
            }
            let _ = self.deferred.pop_front();
            self.uncount_deferred(key);
        }
        if !self.deferred_matchable || self.deferred.is_empty() {
            return;
        }
        self.deferred_matchable = false;
        let mut blocked = false;
        for _ in 0..self.deferred.len() {
            let Some((req, key)) = self.deferred.pop_front() else {
                break;
            };
            if !blocked && self.check_room().is_err() {
                blocked = true;
                self.deferred_dirty = true;
                self.deferred_matchable = true;
            }
            let keep = match self.requests.get(req).copied() {
                None => false,
                Some(_) if blocked => true,
                Some(_) if self.matcher.peek_unexpected(key).is_none() => true,
                Some(r) => match State::Created.step(r.kind, r.sync, Step::DataReady) {
                    Ok(next) if self.post_ready_recv(req, &r, next).is_ok() => false,
                    _ => {
                        blocked = true;
                        self.deferred_matchable = true;
                        true
                    }
                },
            };
            if keep {
                let _ = self.deferred.push_back((req, key));
            } else {
                self.uncount_deferred(key);
            }
        }
    }

    /// Forgets a completed, non-detached request (the application waited on it) and
    /// returns it.
    ///
    /// # Errors
    /// [`UsageError::UnknownRequest`]; [`UsageError::NotRetirable`] when it has not
    /// completed or is detached.
    pub fn retire(&mut self, req: ReqId) -> Result<Request, UsageError> {
        let r = self.get(req)?;
        if r.state != State::Completed || r.detached || r.internal {
            return Err(UsageError::NotRetirable(req));
        }
        self.slab_remove(req).ok_or(UsageError::UnknownRequest(req))
    }

    // ----- inputs ----------------------------------------------------------------------

    /// A message arrived on the envelope tag from `source` on `comm`.
    ///
    /// Returns what to do with its inline payload, if any ([`Arrival`]).
    ///
    /// # Errors
    /// [`MessageError::Peer`] when the message is malformed or unexpected (it is
    /// dropped); [`MessageError::Full`] when a table has no room (nothing changed: hand
    /// the message in again after draining).
    pub fn handle_message<'m>(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: &'m [u8],
    ) -> Result<Arrival<'m>, MessageError> {
        let decoded = envelope::decode(bytes).map_err(PeerError::Decode)?;
        let env = decoded.envelope;
        if source.0 >= self.config.nranks {
            return Err(PeerError::SourceOutOfRange {
                source,
                nranks: self.config.nranks,
            }
            .into());
        }
        if env.comm != comm {
            return Err(PeerError::CommMismatch {
                envelope: env.comm,
                arrived: comm,
            }
            .into());
        }
        self.check_room().map_err(|e| match e {
            UsageError::Full(table) => MessageError::Full(table),
            _ => MessageError::Full(Table::Transmits),
        })?;
        if env.kind == EnvKind::SyncReady {
            return self.on_ready(source, env);
        }
        let key = Key {
            comm,
            peer: source,
            tag: env.tag,
        };
        let kind = match env.kind {
            EnvKind::Eager => UnexpectedKind::Eager,
            EnvKind::SyncData => UnexpectedKind::Sync,
            _ => UnexpectedKind::Data,
        };
        let unexpected = Unexpected {
            kind,
            msg: env.msg,
            size: env.size,
            internal: None,
        };
        // An arrival may need a request slot: an early buffer when no receive waits, a
        // discard buffer when the waiting receive is too small for a payload that
        // travels separately. Refuse up front rather than half-handle it; an arrival
        // that needs no slot is never refused for a full slab (a slab full of posted
        // receives must still accept the envelopes that complete them).
        let needs_slot = match self
            .matcher
            .peek_recv(key)
            .or_else(|| self.peek_deferred(key))
        {
            None => kind != UnexpectedKind::Sync,
            Some(waiting) => {
                let capacity = self.requests.get(waiting).map_or(0, |r| r.size);
                env.size > capacity && kind != UnexpectedKind::Eager
            }
        };
        if needs_slot && !self.has_room(Class::Early) {
            return Err(MessageError::Full(Table::Requests));
        }
        self.deferred_dirty = true;
        if let Some(req) = self.matcher.take_recv(key) {
            return Ok(self.on_matched_arrival(req, unexpected, decoded.inline));
        }
        if let Some(req) = self.take_deferred(key) {
            // The oldest receive of this key is one the matcher had no room for: it
            // takes the message now, with no key and no early buffer.
            self.step(req, Step::Queued);
            return Ok(self.on_matched_arrival(req, unexpected, decoded.inline));
        }
        self.on_early_arrival(key, unexpected, decoded.inline)
    }

    /// What an envelope refused with [`MessageError::Full`] must keep its order with:
    /// the adapter hands it in again after every earlier refused envelope of the same
    /// [`RefusalOrder::key`], and after every earlier one from the same source with the
    /// same [`RefusalOrder::payload`] tag (their payloads are matched in posting order on
    /// that tag); it may overtake any other. `None` for bytes that do not decode (hand
    /// them in: they are dropped as a peer error).
    pub fn refusal_order(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<RefusalOrder> {
        let env = envelope::decode(bytes).ok()?.envelope;
        let payload = match env.kind {
            EnvKind::Data => Some(self.config.tags.data(env.msg)),
            _ => None,
        };
        Some(RefusalOrder {
            key: Key {
                comm,
                peer: source,
                tag: env.tag,
            },
            payload,
        })
    }

    /// A refused envelope as a [`Leftover::Orphan`]: what an adapter reports at shutdown
    /// for an envelope it still keeps (it arrived and was never received). `None` for
    /// bytes that do not decode, or an acknowledgement.
    pub fn orphan_of(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<Leftover> {
        let env = envelope::decode(bytes).ok()?.envelope;
        let kind = match env.kind {
            EnvKind::Eager => UnexpectedKind::Eager,
            EnvKind::SyncData => UnexpectedKind::Sync,
            EnvKind::Data => UnexpectedKind::Data,
            _ => return None,
        };
        Some(Leftover::Orphan(crate::matcher::Orphan {
            comm,
            source,
            tag: env.tag,
            size: env.size,
            kind,
        }))
    }

    /// A send posted by a [`Transmit`] finished: the payload of `req` left (for an
    /// envelope with `inline`, once the whole message left or was copied).
    ///
    /// # Errors
    /// [`UsageError::UnknownRequest`], or [`UsageError::IllegalStep`] when `req` is not a
    /// send in flight; [`UsageError::Full`] when the event queue has no room.
    pub fn handle_sent(&mut self, req: ReqId) -> Result<(), UsageError> {
        let r = self.transfer_done(req, Kind::Send)?;
        self.inflight_sends = self.inflight_sends.saturating_sub(1);
        let _ = self.stats.record_send(r.peer, r.size);
        self.complete(req, r.size, None);
        Ok(())
    }

    /// A receive posted by a [`Transmit::Receive`] finished with `len` bytes.
    ///
    /// # Errors
    /// [`UsageError::UnknownRequest`], or [`UsageError::IllegalStep`] when `req` is not a
    /// receive in flight; [`UsageError::Full`] when the event queue has no room.
    pub fn handle_received(&mut self, req: ReqId, len: u64) -> Result<(), UsageError> {
        let r = self.transfer_done(req, Kind::Recv)?;
        let expected = r.msg_size;
        if !r.internal {
            let _ = self.stats.record_recv(r.peer, len);
            if len != expected {
                self.fail(req, RequestError::LengthMismatch { expected, got: len });
            } else {
                self.complete(req, len, None);
            }
            return Ok(());
        }
        // An early buffer filled up.
        match r.link {
            Link::None => {} // waits for its receive (it is in the matcher)
            Link::Discard => {
                let _ = self.slab_remove(req);
                self.push_event(Event::Discard { early: req });
            }
            Link::DeliverTo(app) => {
                let _ = self.stats.record_recv(r.peer, len);
                if len != expected {
                    let _ = self.slab_remove(req);
                    self.push_event(Event::Discard { early: req });
                    self.fail(app, RequestError::LengthMismatch { expected, got: len });
                } else {
                    // The early request's slot is freed now; the adapter frees the
                    // buffer once it moved the bytes.
                    let _ = self.slab_remove(req);
                    self.complete(app, len, Some(req));
                }
            }
        }
        Ok(())
    }

    // ----- outputs ---------------------------------------------------------------------

    /// The next thing to post to the transport, if any.
    ///
    /// Sends leave here: each call may take the highest-priority ready send (within the
    /// in-flight cap) and turn it into its envelope, then its payload.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if self.transmits.is_empty() {
            self.retry_deferred();
        }
        if let Some(t) = self.transmits.pop_front() {
            return Some(t);
        }
        if let Some(req) = self.payloads.pop_front() {
            return self.payload_transmit(req);
        }
        self.next_send()
    }

    /// The next event for the application side, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- internals -------------------------------------------------------------------

    /// The transport finished the transfer of `req`, which must be of `kind`: steps it to
    /// `Completed` and returns it as it was before. Checks room for the events first.
    fn transfer_done(&mut self, req: ReqId, kind: Kind) -> Result<Request, UsageError> {
        self.check_room()?;
        let r = *self.get(req)?;
        if r.kind != kind {
            return Err(IllegalStep {
                from: r.state,
                step: Step::Done,
            }
            .into());
        }
        let next = r.state.step(r.kind, r.sync, Step::Done)?;
        self.set_state(req, next);
        Ok(r)
    }

    fn check_rank(&self, rank: Rank) -> Result<(), SubmitError> {
        if rank.0 >= self.config.nranks {
            return Err(SubmitError::RankOutOfRange {
                rank,
                nranks: self.config.nranks,
            });
        }
        Ok(())
    }

    /// Takes a request into the slab. A detached request is one whose `detached` flag is
    /// set: it is forgotten when it ends ([`Engine::end`]); no separate set of them is
    /// kept (one bounded by the slab could never fill first, and its scans made every
    /// detached request cost O(outstanding requests)).
    fn insert(&mut self, request: Request) -> Result<ReqId, SubmitError> {
        if !self.has_room(Class::of(&request)) {
            return Err(SubmitError::Full(Table::Requests));
        }
        self.slab_insert(request)
            .map_err(|e| SubmitError::Full(e.table))
    }

    fn get(&self, req: ReqId) -> Result<&Request, UsageError> {
        self.requests
            .get(req)
            .ok_or(UsageError::UnknownRequest(req))
    }

    fn set_state(&mut self, req: ReqId, state: State) {
        if let Some(r) = self.requests.get_mut(req) {
            r.state = state;
        }
    }

    /// Applies a step the engine itself knows to be legal.
    fn step(&mut self, req: ReqId, step: Step) {
        if let Some(r) = self.requests.get_mut(req) {
            let _ = r.apply(step);
        }
    }

    /// Room for the worst-case output of one input.
    fn check_room(&self) -> Result<(), UsageError> {
        if self.transmits.capacity() - self.transmits.len() < WORST_CASE_OUTPUTS {
            return Err(UsageError::Full(Table::Transmits));
        }
        if self.events.capacity() - self.events.len() < WORST_CASE_OUTPUTS {
            return Err(UsageError::Full(Table::Events));
        }
        Ok(())
    }

    /// Whether matching `r` with `u` can proceed: a truncated synchronous message needs a
    /// discard buffer (a new early request).
    fn room_for_match(&self, r: &Request, u: &Unexpected) -> Result<(), UsageError> {
        if u.kind == UnexpectedKind::Sync && u.size > r.size && !self.has_room(Class::Early) {
            return Err(UsageError::Full(Table::Requests));
        }
        Ok(())
    }

    fn push_transmit(&mut self, t: Transmit) {
        // Room was checked by `check_room` at the start of the input.
        let _ = self.transmits.push_back(t);
    }

    fn push_event(&mut self, e: Event) {
        let _ = self.events.push_back(e);
    }

    /// Moves a request to `Completed` through the state machine's own steps.
    fn finish(&mut self, req: ReqId) {
        if let Some(r) = self.requests.get_mut(req) {
            if r.state == State::AwaitingEnvelope {
                let _ = r.apply(Step::Matched);
            }
            if !r.state.is_completed() {
                let _ = r.apply(Step::Done);
            }
        }
    }

    fn complete(&mut self, req: ReqId, len: u64, from_early: Option<ReqId>) {
        self.end(req, |kind| Event::Completed {
            req,
            kind,
            len,
            from_early,
        });
    }

    fn fail(&mut self, req: ReqId, error: RequestError) {
        self.end(req, |kind| Event::Failed { req, kind, error });
    }

    /// Ends `req`: steps it to `Completed`, tells the application with the event `event`
    /// builds, and forgets it when detached (a non-detached request waits for `retire`).
    fn end(&mut self, req: ReqId, event: impl FnOnce(Kind) -> Event) {
        let Some(r) = self.requests.get(req).copied() else {
            return;
        };
        self.finish(req);
        self.push_event(event(r.kind));
        if r.detached {
            let _ = self.slab_remove(req);
        }
    }

    fn alloc_msg(&mut self) -> MsgId {
        let m = self.next_msg;
        self.next_msg = m.next();
        m
    }

    fn envelope_transmit(&self, dest: Rank, env: Envelope, inline: Option<ReqId>) -> Transmit {
        Transmit::Envelope {
            dest,
            comm: env.comm,
            tag: self.config.tags.envelope(),
            header: env.encode(),
            inline,
        }
    }

    /// Takes the highest-priority ready send, within the in-flight cap, and emits its
    /// envelope.
    fn next_send(&mut self) -> Option<Transmit> {
        let cap = self.config.max_inflight_sends;
        if cap != 0 && self.inflight_sends >= cap {
            return None;
        }
        let req = self.ready.pop()?;
        let r = *self.requests.get(req)?;
        let msg = self.alloc_msg();
        if let Some(rm) = self.requests.get_mut(req) {
            rm.msg = Some(msg);
            rm.msg_size = r.size;
        }
        let mut env = Envelope {
            kind: EnvKind::Data,
            comm: r.comm,
            tag: r.tag,
            size: r.size,
            msg,
        };
        if r.sync {
            env.kind = EnvKind::SyncData;
            if self.sync_sends.insert(r.comm, r.peer, msg, req).is_err() {
                // Unreachable by construction (one entry per live request, same
                // capacity); keep the send ready rather than lose it.
                let _ = self.ready.push(req, r.priority);
                return None;
            }
            self.step(req, Step::EnvelopeSent);
            return Some(self.envelope_transmit(r.peer, env, None));
        }
        self.inflight_sends += 1;
        self.step(req, Step::Posted);
        if r.size <= u64::from(self.config.eager_limit) {
            env.kind = EnvKind::Eager;
            return Some(self.envelope_transmit(r.peer, env, Some(req)));
        }
        // The payload follows right after its envelope.
        let _ = self.payloads.push_back(req);
        Some(self.envelope_transmit(r.peer, env, None))
    }

    fn payload_transmit(&self, req: ReqId) -> Option<Transmit> {
        let r = *self.requests.get(req)?;
        let msg = r.msg?;
        let tag = if r.sync {
            self.config.tags.sync(msg)
        } else {
            self.config.tags.data(msg)
        };
        Some(Transmit::Payload {
            req,
            dest: r.peer,
            comm: r.comm,
            tag,
            size: r.size,
        })
    }

    /// A ready acknowledgement: the receiver posted its receive; send the payload.
    fn on_ready(&mut self, source: Rank, env: Envelope) -> Result<Arrival<'static>, MessageError> {
        let Some(req) = self.sync_sends.remove(env.comm, source, env.msg) else {
            return Err(PeerError::UnexpectedReady {
                source,
                msg: env.msg,
            }
            .into());
        };
        self.step(req, Step::ReadyReceived);
        self.inflight_sends += 1;
        let _ = self.payloads.push_back(req);
        Ok(Arrival::Nothing)
    }

    /// An envelope for which a receive was waiting.
    fn on_matched_arrival<'m>(
        &mut self,
        req: ReqId,
        u: Unexpected,
        inline: &'m [u8],
    ) -> Arrival<'m> {
        self.step(req, Step::Matched);
        self.accept(req, u, inline)
    }

    /// Matches a receive that just became ready with the oldest early message of its key.
    fn match_recv(&mut self, req: ReqId, u: Unexpected) {
        self.step(req, Step::Matched);
        match (u.kind, u.internal) {
            (UnexpectedKind::Sync, _) => {
                let _ = self.accept(req, u, &[]);
            }
            (_, Some(early)) => self.take_early(req, u, early),
            (_, None) => {
                // Unreachable: data and eager early messages always have a buffer.
                self.fail(
                    req,
                    RequestError::LengthMismatch {
                        expected: u.size,
                        got: 0,
                    },
                );
            }
        }
    }

    /// A receive takes an early message whose payload has (or is being) received into
    /// the early buffer `early`.
    fn take_early(&mut self, req: ReqId, u: Unexpected, early: ReqId) {
        let capacity = self.requests.get(req).map_or(0, |r| r.size);
        let early_done = self
            .requests
            .get(early)
            .is_some_and(|e| e.state == State::Completed);
        if u.size > capacity {
            self.fail(
                req,
                RequestError::Truncated {
                    capacity,
                    size: u.size,
                },
            );
            if early_done {
                let _ = self.slab_remove(early);
                self.push_event(Event::Discard { early });
            } else if let Some(e) = self.requests.get_mut(early) {
                e.link = Link::Discard;
            }
            return;
        }
        if early_done {
            let _ = self.slab_remove(early);
            if let Some(peer) = self.requests.get(req).map(|r| r.peer) {
                let _ = self.stats.record_recv(peer, u.size);
            }
            self.complete(req, u.size, Some(early));
        } else {
            if let Some(rm) = self.requests.get_mut(req) {
                rm.msg = Some(u.msg);
                rm.msg_size = u.size;
            }
            if let Some(e) = self.requests.get_mut(early) {
                e.link = Link::DeliverTo(req);
            }
        }
    }

    /// A matched receive accepts a message that arrives now (data, eager, or a sync
    /// envelope that may be answered now).
    fn accept<'m>(&mut self, req: ReqId, u: Unexpected, inline: &'m [u8]) -> Arrival<'m> {
        let Some(r) = self.requests.get(req).copied() else {
            return Arrival::Nothing;
        };
        let truncated = u.size > r.size;
        if let Some(rm) = self.requests.get_mut(req) {
            rm.msg = Some(u.msg);
            rm.msg_size = u.size;
        }
        match u.kind {
            UnexpectedKind::Eager => {
                if truncated {
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    return Arrival::Nothing;
                }
                let _ = self.stats.record_recv(r.peer, u.size);
                self.complete(req, u.size, None);
                Arrival::Deliver { req, inline }
            }
            UnexpectedKind::Data => {
                if truncated {
                    // Drain the payload into a discard buffer so it never lingers on
                    // its physical tag.
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    self.drain_into_discard(r.comm, r.peer, self.config.tags.data(u.msg), u);
                    return Arrival::Nothing;
                }
                self.push_transmit(Transmit::Receive {
                    req,
                    source: r.peer,
                    comm: r.comm,
                    tag: self.config.tags.data(u.msg),
                    size: u.size,
                    early: false,
                });
                Arrival::Nothing
            }
            UnexpectedKind::Sync => {
                let ready = Envelope {
                    kind: EnvKind::SyncReady,
                    comm: r.comm,
                    tag: r.tag,
                    size: 0,
                    msg: u.msg,
                };
                self.push_transmit(self.envelope_transmit(r.peer, ready, None));
                let tag = self.config.tags.sync(u.msg);
                if truncated {
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    self.drain_into_discard(r.comm, r.peer, tag, u);
                } else {
                    self.push_transmit(Transmit::Receive {
                        req,
                        source: r.peer,
                        comm: r.comm,
                        tag,
                        size: u.size,
                        early: false,
                    });
                }
                Arrival::Nothing
            }
        }
    }

    /// Posts an engine-owned receive that takes a payload nobody wants, then discards it.
    fn drain_into_discard(&mut self, comm: CommId, source: Rank, tag: PhysTag, u: Unexpected) {
        let mut early = Request::internal_recv(comm, source, Tag(0), u.size, u.msg);
        early.link = Link::Discard;
        early_steps(&mut early, false);
        if let Ok(id) = self.slab_insert(early) {
            self.push_transmit(Transmit::Receive {
                req: id,
                source,
                comm,
                tag,
                size: u.size,
                early: true,
            });
        }
    }

    /// An envelope that no receive waits for: keep it as early data.
    fn on_early_arrival<'m>(
        &mut self,
        key: Key,
        mut u: Unexpected,
        inline: &'m [u8],
    ) -> Result<Arrival<'m>, MessageError> {
        if !self.matcher.has_unexpected_key(key)
            && self.matcher.unexpected_keys() >= self.key_limit()
        {
            return Err(MessageError::Full(Table::MatchKeys));
        }
        if u.kind == UnexpectedKind::Sync {
            // Nothing is sent until we answer: remember the envelope only.
            self.matcher
                .push_unexpected(key, u)
                .map_err(|e| MessageError::Full(e.table))?;
            return Ok(Arrival::Nothing);
        }
        let mut early = Request::internal_recv(key.comm, key.peer, key.tag, u.size, u.msg);
        early_steps(&mut early, u.kind == UnexpectedKind::Eager);
        if !self.has_room(Class::Early) {
            return Err(MessageError::Full(Table::Requests));
        }
        let id = self
            .slab_insert(early)
            .map_err(|e| MessageError::Full(e.table))?;
        u.internal = Some(id);
        if let Err(e) = self.matcher.push_unexpected(key, u) {
            let _ = self.slab_remove(id);
            return Err(MessageError::Full(e.table));
        }
        self.early_messages += 1;
        if u.kind == UnexpectedKind::Eager {
            return Ok(Arrival::Stash { early: id, inline });
        }
        self.push_transmit(Transmit::Receive {
            req: id,
            source: key.peer,
            comm: key.comm,
            tag: self.config.tags.data(u.msg),
            size: u.size,
            early: true,
        });
        Ok(Arrival::Nothing)
    }
}

/// Steps a new early request through the state machine: it is ready at once (the engine
/// owns its buffer), matched to its envelope, and — for an eager payload that arrived
/// with the envelope — already done.
fn early_steps(early: &mut Request, arrived: bool) {
    let _ = early.apply(Step::DataReady);
    let _ = early.apply(Step::Matched);
    if arrived {
        let _ = early.apply(Step::Done);
    }
}

#[cfg(test)]
mod tests;
