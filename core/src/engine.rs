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

use crate::lists::KeyMap;
use heapless::Deque;

mod arrival;
mod deferred;
mod errors;
mod fast;
pub(crate) mod io;
mod sends;
mod slots;

pub use errors::{MessageError, PeerError, RequestError, SubmitError, UsageError};
pub use io::{
    Arrival, Budget, Config, DEFAULT_EAGER_LIMIT, Event, Express, Leftover, OUTPUTS, RecvArgs,
    SendArgs, Transmit, WORST_CASE_OUTPUTS,
};

use self::slots::{Class, Live};
use crate::envelope::{self, Envelope, Kind as EnvKind};
use crate::error::Table;
use crate::lists::{Key, KeyedFifo, ReadyList, SyncSends};
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
    deferred_keys: KeyMap<Key, u32, REQ>,
    /// A receive was deferred while a message of its key waited in the matcher: the next
    /// retry looks at every deferred receive, not only the oldest.
    deferred_matchable: bool,
    /// Receives posted on their key's fast tag, per key, in posting order (protocol
    /// §19): waiting for a fast message, or marked and waiting for an envelope message.
    fast: KeyedFifo<ReqId, KEYS, REQ>,
    /// A fast key's oldest receive is marked while an envelope message of its key waits:
    /// the next `poll_transmit` matches them ([`Engine::retry_fast`]).
    fast_dirty: bool,
    /// Receives in `fast` that got their marker and wait for their envelope message: an
    /// envelope refused for a full table may go in now without room
    /// ([`Engine::room_for`]).
    fast_marked: u32,
    transmits: Deque<Transmit, OUTPUTS>,
    events: Deque<Event, OUTPUTS>,
    next_msg: MsgId,
    inflight_sends: u32,
    early_messages: u64,
    /// Messages kept waiting for their receive, synchronous envelopes included.
    waiting_arrivals: u64,
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
    /// A ready acknowledgement (the answer to a synchronous send of this rank, named by
    /// its message id): no message of `key`, so it keeps its order with nothing, no
    /// message waits behind it, and it is never a receive's message. Refused only for
    /// the output queues (`Table::Transmits`, `Table::Events`).
    pub reply: bool,
    /// A message that only its receive lets in ([`RefusalOrder::waits_for_its_receive`]):
    /// no payload tag (no envelope of another key waits behind it), no fast tag (§19:
    /// its receive takes it only once marked, which the adapter does not see as a
    /// receive going in), not an acknowledgement.
    pub receive_lets_in: bool,
}

impl RefusalOrder {
    /// Whether the envelope, refused for `table`, need be handed in again only when a
    /// receive of its key is in the engine: it was refused for want of room to wait for
    /// its receive (an early request slot, a match key, the early data), which it does
    /// not need once that receive is posted — it is matched at once — and
    /// ([`RefusalOrder::receive_lets_in`]) no envelope of another key waits behind it.
    /// Handed in before, it would only take room to wait in, then be matched all the
    /// same. Any other refused envelope is handed in again after progress too.
    pub const fn waits_for_its_receive(&self, table: Table) -> bool {
        self.receive_lets_in
            && matches!(table, Table::Requests | Table::MatchKeys | Table::EarlyData)
    }
}

/// A reading of what [`Engine::recv_would_wait`] depends on ([`Engine::recv_room`]).
/// While two readings are equal, a receive of a key that would wait still would — no
/// match key was freed, no message was kept waiting for its receive, nothing went in or
/// out of the engine's own wait — provided no receive of that key was submitted between
/// them (posted, it would change the answer for its key alone, not the reading). An
/// adapter that keeps each key's receives in order asks about its oldest waiting one
/// again only when the reading changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RecvRoom {
    /// Distinct keys of the posted receives in the matcher.
    pub keys: usize,
    /// Distinct keys of the receives posted on fast tags (protocol §19).
    pub fast_keys: usize,
    /// [`Engine::waiting_arrivals`].
    pub arrivals: u64,
    /// Receives waiting inside the engine for room in the matcher.
    pub deferred: usize,
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
            deferred_keys: KeyMap::new(),
            deferred_matchable: false,
            fast: KeyedFifo::new(Table::MatchKeys),
            fast_dirty: false,
            fast_marked: 0,
            transmits: Deque::new(),
            events: Deque::new(),
            next_msg: MsgId(0),
            inflight_sends: 0,
            early_messages: 0,
            waiting_arrivals: 0,
            stats: Stats::new(),
            live: Live {
                sends: 0,
                recvs: 0,
                early: 0,
                drains: 0,
            },
            deferred_dirty: false,
        }
    }

    /// Whether a message of `key` waits in the engine for its receive (early data, or
    /// the envelope of a synchronous or rendezvous send): a receive of `key` posted now
    /// is matched at once and completes without anything else.
    pub fn has_early(&self, key: Key) -> bool {
        self.matcher.has_unexpected_key(key)
    }

    /// Whether a receive of `key` whose data became ready now would wait inside the
    /// engine for room in the matcher ([`Engine::handle_data_ready`]): receives wait there
    /// already, or no message of `key` waits for it, no receive of `key` is posted and
    /// every match key is taken. An adapter that keeps receives waiting in order may keep
    /// such a receive itself until this turns `false` — it goes in then with no wait
    /// inside — unless its message is here ([`Engine::has_early`]: it is matched at once).
    /// A hint: a receive submitted anyway is never refused for it.
    pub fn recv_would_wait(&self, key: Key) -> bool {
        if !self.deferred.is_empty() {
            return true;
        }
        if crate::fast::fast_tag(&self.config, key.comm, key.tag).is_some() {
            return !self.fast.contains_key(key) && self.fast.key_count() >= self.key_limit();
        }
        self.matcher.recv_keys() >= self.key_limit()
            && !self.matcher.has_recv_key(key)
            && !self.matcher.has_unexpected_key(key)
    }

    /// The reading of what [`Engine::recv_would_wait`] depends on ([`RecvRoom`]): four
    /// counters, no lookup.
    pub fn recv_room(&self) -> RecvRoom {
        RecvRoom {
            keys: self.matcher.recv_keys(),
            fast_keys: self.fast.key_count(),
            arrivals: self.waiting_arrivals,
            deferred: self.deferred.len(),
        }
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

    /// How many messages were kept waiting for their receive since the engine started,
    /// synchronous envelopes included: when it has not changed, no key has gained a
    /// message in the engine ([`Engine::has_early`]), so an adapter may skip looking for
    /// one.
    pub const fn waiting_arrivals(&self) -> u64 {
        self.waiting_arrivals
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
                        // (no discard buffer for its truncated synchronous message: it
                        // waits in order, retried as slots free)
                        UsageError::Full(
                            Table::EarlyRequests | Table::MatchKeys | Table::Discards,
                        ) => {
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
        if let Some(tag) = crate::fast::fast_tag(&self.config, r.comm, r.tag) {
            return self.post_fast_recv(req, r, next, key, tag);
        }
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
        // On a key with a fast tag, an envelope message goes to the oldest receive of the
        // key once it is marked, and to no other (protocol §19).
        let fast_key = crate::fast::fast_tag(&self.config, comm, env.tag).is_some();
        let waiting = if fast_key {
            self.fast_waiting(key)
        } else {
            self.matcher
                .peek_recv(key)
                .or_else(|| self.peek_deferred(key))
        };
        //
        // The two take their slot differently. An early buffer is an early request of the
        // budget (it must leave the last receive slot free: `has_room`). A discard buffer
        // drains the payload of a message whose receive is here and too small: that
        // receive's completion needs it, so it takes any free slot of the slab, outside
        // the budget — within the budget, a receive holding the last receive slot would
        // wait for a slot that only its own completion frees (a hang, never an error).
        // Refused, it waits for a slab slot ([`Table::Discards`]).
        match waiting {
            None if kind != UnexpectedKind::Sync && !self.has_room(Class::Early) => {
                return Err(MessageError::Full(Table::Requests));
            }
            Some(waiting) => {
                let capacity = self.requests.get(waiting).map_or(0, |r| r.size);
                let discard = env.size > capacity && kind != UnexpectedKind::Eager;
                if discard && !self.has_slab_slot() {
                    return Err(MessageError::Full(Table::Discards));
                }
            }
            None => {}
        }
        self.deferred_dirty = true;
        if fast_key {
            if let Some(req) = self.fast_waiting(key) {
                let _ = self.fast.pop_front(key);
                self.fast_marked -= 1;
                return Ok(self.on_matched_arrival(req, unexpected, decoded.inline));
            }
            return self.on_early_arrival(key, unexpected, decoded.inline);
        }
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
    /// that tag); it may overtake any other. A ready acknowledgement
    /// ([`RefusalOrder::reply`]) keeps its order with nothing: held behind a refused
    /// message of its key, the synchronous send it answers could wait for a receive
    /// that waits for that send's own receive to complete. `None` for bytes that do not
    /// decode (hand them in: they are dropped as a peer error).
    pub fn refusal_order(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<RefusalOrder> {
        let env = envelope::decode(bytes).ok()?.envelope;
        let payload = match env.kind {
            EnvKind::Data => Some(self.config.tags.data(env.msg)),
            _ => None,
        };
        let reply = env.kind == EnvKind::SyncReady;
        let fast = crate::fast::fast_tag(&self.config, comm, env.tag).is_some();
        Some(RefusalOrder {
            key: Key {
                comm,
                peer: source,
                tag: env.tag,
            },
            payload,
            reply,
            receive_lets_in: payload.is_none() && !reply && !fast,
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
        if let Some(r) = self.requests.get(req).copied() {
            if r.state == State::AwaitingFast {
                self.check_room()?;
                self.on_fast_received(req, r, len);
                return Ok(());
            }
        }
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
            Link::Discard | Link::Drain => {
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
            self.retry_fast();
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
    /// discard buffer, which takes any free slot of the slab, outside the budget (as in
    /// [`Engine::handle_message`]: the receive's message is here, and within the budget
    /// the receive could wait for a slot only its own completion frees).
    fn room_for_match(&self, r: &Request, u: &Unexpected) -> Result<(), UsageError> {
        if u.kind == UnexpectedKind::Sync && u.size > r.size && !self.has_slab_slot() {
            return Err(UsageError::Full(Table::Discards));
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
}

#[cfg(test)]
mod tests;
