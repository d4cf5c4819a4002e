//! What waits outside a full engine, and the order it goes back in: one implementation
//! for the progression thread (`progress.rs`) and the simulator ([`crate::sim`]), so that
//! what the explorer checks in every interleaving is what the threaded runtime runs.
//!
//! Two kinds of items wait (design rule 2: a bounded table is a wait):
//!
//! * **submissions** the engine refused with an error that waits (`SubmitError::waits`): they
//!   wait in submission order per direction (sends, receives) and are submitted again,
//!   oldest first, whenever room may have freed ([`Admission::admit_waiting`]); a new
//!   submission waits behind the waiting ones of its direction. One exception keeps a
//!   full table a wait, never a hang (issue 17): receives reach the adapter when their
//!   data is ready, not in flow order, so a receive whose message is not here yet never
//!   takes the last receive slot (it may depend on an earlier receive's completion), and
//!   a receive whose message is here (an envelope of its key refused and kept, or early
//!   data of its key in the engine) goes in ahead of the waiting receives of other keys
//!   and may take it: it completes without anything else and frees it;
//! * **envelopes** the engine refused with `MessageError::Full`: each waits behind the
//!   earlier refused envelopes it must keep its order with — those of its key and, for a
//!   data envelope, those of its payload tag from the same source (the core says which:
//!   [`Engine::refusal_order`](starling_core::engine::Engine::refusal_order)); an
//!   envelope of another key goes by. They go in again when a receive of their key is
//!   posted ([`Admission::retry_key`]: they then need no room) and after progress
//!   ([`Admission::retry_refused`]), except one that only waits for its receive
//!   ([`RefusalOrder::waits_for_its_receive`], the core's decision): it is *parked*
//!   ([`Refused::parked`]) and goes in with its receive only, so that thousands of
//!   them cost no retry pass and take none of the engine's room.
//!
//! The driver ([`Admit`]) performs the engine calls; this module only decides what is
//! tried, in which order, and what waits.

use std::collections::{BTreeSet, VecDeque};

use starling_core::engine::{RecvRoom, RefusalOrder};
use starling_core::error::Table;
use starling_core::lists::Key;
use starling_core::request::Kind;
use starling_core::{CommId, PhysTag, Rank};

use self::queue::Queue;
use crate::id_hash::IdMap;

mod queue;

/// Refused envelopes tried per pass of [`Admission::retry_refused`] (a pass runs after
/// every completion; a later pass goes on).
pub(crate) const TRIES: usize = 32;

/// Keys noted as possibly here before [`Admission::first_here`] looks at them, beyond
/// which it looks through the engine's early data once instead (its table is bounded,
/// so a look costs at most a pass over it for every `PENDING` arrivals).
const PENDING: usize = 1024;

/// The engine calls an [`Admission`] needs, performed by its driver.
pub(crate) trait Admit {
    /// A submission (a send or a receive, with whatever the driver keeps with it).
    type Cmd;

    /// Submits `c` to the engine (and, when its data is ready, hands that in too).
    /// `Err(c)` when the engine has no room for it now (nothing changed);
    /// `Ok(Some(key))` when a receive of `key` is now in the engine, ready: the refused
    /// envelopes of its key need no room any more.
    fn submit(&mut self, c: Self::Cmd) -> Result<Option<Key>, Self::Cmd>;

    /// Hands envelope `bytes` from `source` to the engine; gives it back with the full
    /// table when the engine refused it (nothing changed).
    fn hand_in(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)>;

    /// The engine's [`RefusalOrder`] of an envelope (`None`: it does not decode).
    fn refusal_order(&self, source: Rank, comm: CommId, bytes: &[u8]) -> Option<RefusalOrder>;

    /// Whether a submission in direction `dir` would be taken now
    /// ([`Engine::can_submit`](starling_core::engine::Engine::can_submit)): a waiting
    /// one is taken out of its queue only then, rather than taken out, refused and put
    /// back on every pass (with 100 000 outstanding, nearly every message waits, and
    /// each put-back was two key-table updates). The default is `true` (try).
    fn can_submit(&self, dir: Direction) -> bool {
        let _ = dir;
        true
    }

    /// The key of a receive (`None` for a send).
    fn recv_key(&self, c: &Self::Cmd) -> Option<Key>;

    /// Whether `table` may have room for a refused envelope now: `false` only when one
    /// refused for it would certainly be refused again
    /// ([`Engine::room_for`](starling_core::engine::Engine::room_for)).
    fn has_room(&self, table: Table) -> bool;

    /// The engine's free receive slots
    /// ([`Engine::free_recv_slots`](starling_core::engine::Engine::free_recv_slots)):
    /// `None` with no budget.
    fn free_recv_slots(&self) -> Option<usize>;

    /// Whether a message of `key` waits in the engine for its receive
    /// ([`Engine::has_early`](starling_core::engine::Engine::has_early)).
    fn has_early(&self, key: Key) -> bool;

    /// Whether a receive of `key` submitted now would wait inside the engine for match
    /// keys ([`Engine::recv_would_wait`](starling_core::engine::Engine::recv_would_wait)):
    /// one whose message is not here then waits here instead, in the queue's order —
    /// with 100 000 receives of distinct keys outstanding, the engine's own wait (kept in
    /// order, searched by key) cost a fifth of a message. The default is `false`.
    fn recv_would_wait(&self, key: Key) -> bool {
        let _ = key;
        false
    }

    /// The engine's reading of what [`Admit::recv_would_wait`] depends on
    /// ([`Engine::recv_room`](starling_core::engine::Engine::recv_room)): `None` (the
    /// default) asks every time.
    fn recv_room(&self) -> Option<RecvRoom> {
        None
    }

    /// Calls `f` with the key of each message waiting in the engine for its receive
    /// ([`Engine::early_keys`](starling_core::engine::Engine::early_keys)).
    fn early_keys(&self, f: &mut dyn FnMut(Key));

    /// Whether any message waits in the engine for its receive
    /// ([`Engine::any_early`](starling_core::engine::Engine::any_early)).
    fn any_early(&self) -> bool;

    /// How many messages the engine kept waiting for their receive so far
    /// ([`Engine::waiting_arrivals`](starling_core::engine::Engine::waiting_arrivals)):
    /// unchanged, no key gained one.
    fn waiting_arrivals(&self) -> u64;

    /// Whether `key` has a fast tag (protocol §19) on which the transport holds a
    /// message no posted receive took: the message (or the marker) of the key's oldest
    /// receive not yet in the engine. The default is `false` (no fast path).
    fn fast_message_here(&self, key: Key) -> bool {
        let _ = key;
        false
    }

    /// Whether the fast path runs ([`fast::enabled`](starling_core::fast::enabled)):
    /// without it no key has a fast tag, and no search asks
    /// [`Admit::fast_message_here`] of every waiting key. The default is `false`.
    fn fast_path(&self) -> bool {
        false
    }
}

/// The direction of a submission: each keeps its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A send.
    Send,
    /// A receive.
    Recv,
}

impl Direction {
    /// The core's request kind of a submission in this direction.
    pub(crate) const fn kind(self) -> Kind {
        match self {
            Self::Send => Kind::Send,
            Self::Recv => Kind::Recv,
        }
    }
}

/// What waits outside one engine: submissions per direction and refused envelopes.
pub(crate) struct Admission<C> {
    sends: VecDeque<C>,
    /// The waiting receives, oldest first, by arrival number.
    recvs: Queue<C>,
    /// The arrival numbers of the waiting receives per key, oldest first, while
    /// `indexed` (see [`Admission::index`]); empty otherwise.
    recv_keys: IdMap<Key, Fifo>,
    /// Whether `recv_keys` is kept: built when a question needs it (a receive whose
    /// message is here, refused envelopes of a waiting key, early data, the fast path),
    /// dropped when no receive waits. With 100 000 receives waiting and none of these,
    /// it was two probes of a table of 100 000 keys, cold, for every receive that
    /// waited.
    indexed: bool,
    next_recv: u64,
    refused: Refused,
    /// Envelopes refused so far (a retry refused again counts again).
    refusals: u64,
    /// Submissions that had to wait so far.
    queued: u64,
    /// What [`Admission::first_here`] last found nothing with: the refused envelopes'
    /// changes, the receives waited so far and the engine's waiting arrivals. While they
    /// are the same, nothing can be here that was not then.
    none_here_at: Option<(u64, u64, u64)>,
    /// Waiting receives (by arrival number) that were the oldest of their key when a
    /// message of that key was here (a refused envelope free to go, or early data in the
    /// engine): what [`Admission::first_here`] looks through, kept as things change
    /// rather than searched for (stale ones are dropped when met).
    here: BTreeSet<u64>,
    /// Keys that may have gained early data in the engine for their oldest waiting
    /// receive since `first_here` last looked: the key of each envelope the engine kept
    /// waiting (handed in here), and the key of a receive that went in while more of its
    /// key's messages wait. Looked up (with the waiting receives' keys) only when
    /// `first_here` needs them, so that a flow whose oldest receive always goes in builds
    /// no index; at most [`PENDING`], beyond which the early data is looked through once
    /// instead (`scan`).
    pending: Vec<Key>,
    /// The engine's count of messages kept waiting for their receive
    /// ([`Admit::waiting_arrivals`]) up to which every such message's key went to
    /// `pending` (or no receive waited then: a receive that waits later is checked as it
    /// waits). While it is the engine's count, `first_here` need not look through the
    /// engine's early data. (Looking on every arrival was a pass over up to
    /// [`MATCH_KEYS`] keys a message: with 280 000 receives waiting out of flow order,
    /// the reading rank's first cost.)
    ///
    /// [`MATCH_KEYS`]: crate::io::progress::MATCH_KEYS
    noted: u64,
    /// The early data must be looked through at the next `first_here`: an arrival was not
    /// seen (the engine's count moved alone) or `pending` overflowed.
    scan: bool,
    /// The oldest waiting receive when it was last found not to go in, with what that
    /// depended on ([`HeadStamp`]).
    head_blocked: Option<HeadStamp>,
}

/// What whether the oldest waiting receive goes in depends on: which one it is, the
/// engine's match-key room ([`RecvRoom`]), the refused envelopes' changes and the free
/// receive slots. While they are the same, it still does not go in. That holds because
/// no receive of the head's key goes into the engine while the head waits (`offer` puts
/// a new one behind it, `first_here` takes only the oldest of each key): a receive of
/// that key posted in the engine would change the answer without changing the reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeadStamp {
    seq: u64,
    room: RecvRoom,
    refused: u64,
    slots: Option<usize>,
}

impl<C> Default for Admission<C> {
    fn default() -> Self {
        Self {
            sends: VecDeque::new(),
            recvs: Queue::default(),
            recv_keys: IdMap::default(),
            indexed: false,
            next_recv: 0,
            refused: Refused::default(),
            refusals: 0,
            queued: 0,
            none_here_at: None,
            here: BTreeSet::new(),
            pending: Vec::new(),
            noted: 0,
            scan: false,
            head_blocked: None,
        }
    }
}

/// What handing in a refused envelope again did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// The engine took it.
    In,
    /// An earlier refused envelope holds it back: not tried.
    Held,
    /// The engine refused it again for this full table.
    Refused(Table),
}

impl<C> Admission<C> {
    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.recvs.is_empty() && self.refused.is_empty()
    }

    /// Whether a send waits for room (then a new one goes behind it).
    pub(crate) fn sends_wait(&self) -> bool {
        !self.sends.is_empty()
    }

    /// Whether no envelope is refused (then nothing holds a new one back).
    pub(crate) fn nothing_refused(&self) -> bool {
        self.refused.is_empty()
    }

    /// Envelopes refused so far, retries included.
    pub(crate) const fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Submissions that waited for room so far.
    pub(crate) const fn queued(&self) -> u64 {
        self.queued
    }

    /// The submissions waiting for room in direction `dir`, oldest first.
    pub(crate) fn waiting(&self, dir: Direction) -> impl Iterator<Item = &C> + '_ {
        let (sends, recvs) = match dir {
            Direction::Send => (Some(self.sends.iter()), None),
            Direction::Recv => (None, Some(self.recvs.iter())),
        };
        sends
            .into_iter()
            .flatten()
            .chain(recvs.into_iter().flatten().map(|(_, c)| c))
    }

    /// The submissions waiting for room in direction `dir`, to update in place.
    pub(crate) fn waiting_mut(&mut self, dir: Direction) -> impl Iterator<Item = &mut C> + '_ {
        let (sends, recvs) = match dir {
            Direction::Send => (Some(self.sends.iter_mut()), None),
            Direction::Recv => (None, Some(self.recvs.iter_mut())),
        };
        sends
            .into_iter()
            .flatten()
            .chain(recvs.into_iter().flatten())
    }

    /// The refused envelopes, oldest first: source, communicator, bytes.
    pub(crate) fn refused(&self) -> impl Iterator<Item = (Rank, CommId, &[u8])> + '_ {
        self.refused.iter()
    }

    /// Keeps a submission waiting, behind the others of its direction.
    fn wait(&mut self, a: &impl Admit<Cmd = C>, dir: Direction, c: C) {
        self.queued += 1;
        match dir {
            Direction::Send => self.sends.push_back(c),
            Direction::Recv => {
                let seq = self.next_recv;
                self.next_recv += 1;
                let key = a.recv_key(&c);
                self.recvs.push_back(seq, c);
                self.refused.note_freed = true;
                if let Some(key) = key {
                    if self.indexed {
                        push_seq(&mut self.recv_keys, key, seq);
                    }
                    self.note_key(a, key);
                    self.note_if_early(a, key);
                }
            }
        }
    }

    /// Takes waiting receive `seq` out of the queue (the oldest of its key).
    fn take_recv(&mut self, a: &impl Admit<Cmd = C>, seq: u64) -> Option<C> {
        let c = self.recvs.take(seq)?;
        self.here.remove(&seq);
        if self.recvs.is_empty() {
            // Nothing waits: nothing to index (a later question builds it again).
            self.recv_keys.clear();
            self.indexed = false;
            self.here.clear();
            // (a receive that waits again notes its key itself: `wait`)
            self.refused.note_freed = false;
            self.refused.freed_keys.clear();
        } else if let Some(key) = a.recv_key(&c) {
            if !self.indexed || remove_seq(&mut self.recv_keys, &key, seq).is_some() {
                self.note_key(a, key);
            }
        }
        Some(c)
    }

    /// Puts waiting receive `seq` back in its place: the engine had no room for it.
    fn put_back_recv(&mut self, a: &impl Admit<Cmd = C>, seq: u64, c: C) {
        let key = a.recv_key(&c);
        self.recvs.put_back(seq, c);
        self.refused.note_freed = true;
        if let Some(key) = key {
            if self.indexed {
                match self.recv_keys.get_mut(&key) {
                    Some(q) => q.push_front(seq),
                    None => {
                        self.recv_keys.insert(key, Fifo::new(seq));
                    }
                }
            }
            self.note_key(a, key);
            self.note_if_early(a, key);
        }
    }

    /// Builds the waiting receives' keys (`recv_keys`) if they are not kept yet: one pass
    /// through the waiting receives, in order; from then on they are kept as receives
    /// wait and go, until none waits.
    fn index(&mut self, a: &impl Admit<Cmd = C>) {
        if self.indexed {
            return;
        }
        self.indexed = true;
        for (seq, c) in self.recvs.iter() {
            if let Some(key) = a.recv_key(c) {
                push_seq(&mut self.recv_keys, key, seq);
            }
        }
    }

    /// Whether a receive of `key` waits (building the index if needed).
    fn waits(&mut self, a: &impl Admit<Cmd = C>, key: Key) -> bool {
        if self.recvs.is_empty() {
            return false;
        }
        self.index(a);
        self.recv_keys.contains_key(&key)
    }

    /// A new submission: submitted at once unless earlier ones of its direction wait (it
    /// waits behind them), or the engine has no room (it waits). A receive whose message
    /// is already here ([`Admission::message_here`]) goes by the waiting receives of
    /// other keys; one whose message is not here waits rather than take the last receive
    /// slot ([`Admission::may_take_slot`]).
    pub(crate) fn offer(&mut self, a: &mut impl Admit<Cmd = C>, dir: Direction, c: C) {
        let go = a.can_submit(dir)
            && match dir {
                Direction::Send => self.sends.is_empty(),
                Direction::Recv => match a.recv_key(&c) {
                    Some(key) => {
                        if self.message_here(a, key) {
                            !self.waits(a, key)
                        } else {
                            self.recvs.is_empty() && Self::may_go_in(a, key)
                        }
                    }
                    None => self.recvs.is_empty(),
                },
            };
        if !go {
            self.wait(a, dir, c);
            return;
        }
        match a.submit(c) {
            Ok(Some(key)) => self.retry_key(a, key),
            Ok(None) => {}
            Err(c) => self.wait(a, dir, c),
        }
    }

    /// Whether the message of a receive of `key` is already here: an envelope of `key`
    /// refused and kept here, early data of `key` in the engine, or a message on the
    /// key's fast tag in the transport (protocol §19). Such a receive, once in, is
    /// matched at once and completes without anything else (the sender's part is
    /// already under way; a marker's envelope message left with it).
    fn message_here(&self, a: &impl Admit<Cmd = C>, key: Key) -> bool {
        // (a refused envelope held back by an earlier one of its payload tag is not
        // here yet: it goes in only after that one)
        self.refused.free_front(key).is_some() || a.has_early(key) || a.fast_message_here(key)
    }

    /// Whether a receive whose message is not here may take a receive slot now: not the
    /// last one (kept for a receive whose message is here). Receives reach the adapter
    /// when their data is ready, not in flow order: a later receive, whose message
    /// can only come after an earlier receive completes, must never hold the slot that
    /// earlier receive needs once its message is here (design rule 2: a full table is a
    /// wait, never a hang). With no budget, any may.
    fn may_take_slot(a: &impl Admit<Cmd = C>) -> bool {
        a.free_recv_slots().is_none_or(|n| n > 1)
    }

    /// Whether a receive of `key` whose message is not here goes in now: it may take a
    /// slot ([`Admission::may_take_slot`]) and would not wait inside the engine for match
    /// keys ([`Admit::recv_would_wait`]: it waits here, where waiting costs nothing).
    fn may_go_in(a: &impl Admit<Cmd = C>, key: Key) -> bool {
        Self::may_take_slot(a) && !a.recv_would_wait(key)
    }

    /// Submits the waiting sends in order while the engine has room, then the waiting
    /// receives: in order while the engine has room and the receive's message is here or
    /// it may take a slot ([`Admission::may_take_slot`]); when the oldest may not go in,
    /// the oldest waiting receive of a key whose message is here goes before it (each key
    /// keeps its order). Whether any went in.
    pub(crate) fn admit_waiting(&mut self, a: &mut impl Admit<Cmd = C>) -> bool {
        self.absorb_freed(a);
        let mut any = false;
        while a.can_submit(Direction::Send) {
            let Some(c) = self.sends.pop_front() else {
                break;
            };
            match a.submit(c) {
                Ok(key) => {
                    any = true;
                    if let Some(key) = key {
                        self.retry_key(a, key);
                    }
                }
                Err(c) => {
                    self.sends.push_front(c);
                    break;
                }
            }
        }
        while let Some((head_seq, head)) = self.recvs.front() {
            if !a.can_submit(Direction::Recv) {
                break;
            }
            // Nothing the answer depends on changed since the head was found not to fit:
            // it still does not (the progression thread passes here on every idle poll).
            let stamp = a
                .recv_room()
                .filter(|_| !a.fast_path())
                .map(|room| HeadStamp {
                    seq: head_seq,
                    room,
                    refused: self.refused.changes,
                    slots: a.free_recv_slots(),
                });
            let known = stamp.is_some() && self.head_blocked == stamp;
            // (the slot count first: a look at two counters, where whether the message is
            // here looks its key up in the refused envelopes and the engine's early data)
            let fits = !known
                && a.recv_key(head)
                    .is_none_or(|k| Self::may_go_in(a, k) || self.message_here(a, k));
            if !fits {
                self.head_blocked = stamp;
            }
            let seq = if fits {
                Some(head_seq)
            } else {
                self.first_here(a)
            };
            let Some(seq) = seq else {
                break;
            };
            let Some(c) = self.take_recv(a, seq) else {
                break;
            };
            let recv_key = a.recv_key(&c);
            match a.submit(c) {
                Ok(key) => {
                    any = true;
                    if let Some(key) = key {
                        self.retry_key(a, key);
                    }
                    // (the next waiting receive of its key: its message may be here too)
                    if let Some(k) = recv_key {
                        self.note_if_early(a, k);
                    }
                }
                Err(c) => {
                    self.put_back_recv(a, seq, c);
                    break;
                }
            }
        }
        any
    }

    /// The arrival number of the oldest waiting receive that is the oldest of its key
    /// and whose message is here: looked for among the keys that have something here
    /// (refused envelopes, early data), not through the whole queue.
    fn first_here(&mut self, a: &impl Admit<Cmd = C>) -> Option<u64> {
        if self.recvs.is_empty() {
            return None;
        }
        // Messages on fast tags wait in the transport (protocol §19), which no epoch
        // counts: ask about each waiting key, when the fast path runs. (Without it, that
        // would be a search through every waiting key on every idle poll: quadratic in
        // the waiting receives over MPI, whose progression polls without pause.)
        let fast = if a.fast_path() {
            self.index(a);
            self.recv_keys
                .iter()
                .filter(|(key, _)| a.fast_message_here(**key))
                .map(|(_, f)| f.front())
                .min()
        } else {
            None
        };
        // Nothing changed since a search found nothing: nothing is here.
        let epoch = (self.refused.changes, self.next_recv, a.waiting_arrivals());
        if self.none_here_at == Some(epoch) {
            let seq = fast?;
            return self.recvs.contains(seq).then_some(seq);
        }
        self.absorb_freed(a);
        // The engine's side, when an arrival was not noted as it came (`noted`): its early
        // data, a table of bounded size (with none, the index is not needed).
        let arrivals = a.waiting_arrivals();
        if self.noted != arrivals {
            self.noted = arrivals;
            self.scan = true;
        }
        // The keys to look up: every key of the early data, or the pending ones.
        let scan = core::mem::take(&mut self.scan);
        let pending = core::mem::take(&mut self.pending);
        if (scan && a.any_early()) || (!scan && !pending.is_empty()) {
            self.index(a);
            let mut here = core::mem::take(&mut self.here);
            let mut consider = |key: Key| {
                if let Some(seq) = self.recv_keys.get(&key).map(Fifo::front) {
                    if self.message_here(a, key) {
                        here.insert(seq);
                    }
                }
            };
            if scan {
                a.early_keys(&mut consider);
            } else {
                pending.iter().copied().for_each(&mut consider);
            }
            self.here = here;
        }
        // (emptied, it keeps its capacity)
        self.pending = pending;
        self.pending.clear();
        let mut oldest: Option<u64> = None;
        while let Some(&seq) = self.here.first() {
            if self.still_here(a, seq) {
                oldest = Some(seq);
                break;
            }
            self.here.remove(&seq);
        }
        if oldest.is_none() {
            self.none_here_at = Some(epoch);
        }
        let seq = match (oldest, fast) {
            (Some(o), Some(f)) => o.min(f),
            (o, f) => o.or(f)?,
        };
        self.recvs.contains(seq).then_some(seq)
    }

    /// Notes the keys whose refused envelope became free to go since the last time (the
    /// refused side of [`Admission::first_here`]).
    fn absorb_freed(&mut self, a: &impl Admit<Cmd = C>) {
        if self.refused.freed_keys.is_empty() {
            return;
        }
        // (taken out and put back emptied: the list keeps its capacity, so noting a freed
        // envelope allocates nothing once it grew; `note_key` adds to it no key)
        let mut keys = core::mem::take(&mut self.refused.freed_keys);
        for &key in &keys {
            self.note_key(a, key);
        }
        keys.clear();
        self.refused.freed_keys = keys;
    }

    /// Notes that the oldest waiting receive of `key`, if any, has its message here when
    /// a refused envelope of `key` is free to go.
    fn note_key(&mut self, a: &impl Admit<Cmd = C>, key: Key) {
        // (the refused envelopes first: usually none, and then the waiting receives' keys
        // are not needed)
        if self.recvs.is_empty() || self.refused.free_front(key).is_none() {
            return;
        }
        self.index(a);
        if let Some(seq) = self.recv_keys.get(&key).map(Fifo::front) {
            self.here.insert(seq);
        }
    }

    /// Whether waiting receive `seq` is still waiting, the oldest of its key, with its
    /// message here.
    fn still_here(&self, a: &impl Admit<Cmd = C>, seq: u64) -> bool {
        let Some(key) = self.recvs.get(seq).and_then(|c| a.recv_key(c)) else {
            return false;
        };
        self.recv_keys.get(&key).map(Fifo::front) == Some(seq) && self.message_here(a, key)
    }

    /// An envelope arrived: it waits behind the refused envelopes it must keep its
    /// order with, else goes to the engine, and waits if the engine refuses it. Whether
    /// it went in.
    pub(crate) fn on_envelope(
        &mut self,
        a: &mut impl Admit<Cmd = C>,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> bool {
        // (decoded once, and only when something waits here: with nothing refused and no
        // receive waiting, nothing holds it back and no key is noted)
        let order = if self.refused.is_empty() && self.recvs.is_empty() {
            None
        } else {
            a.refusal_order(source, comm, &bytes)
        };
        if let Some(o) = order.filter(|o| !o.reply) {
            if !self.refused.is_empty() && self.refused.must_wait(source, &o) {
                self.refused.push(source, comm, bytes, o, None);
                return false;
            }
        }
        match self.hand_in(a, source, comm, bytes, order.map(|o| o.key)) {
            Ok(()) => true,
            Err((bytes, table)) => {
                self.refusals += 1;
                // (refused bytes always have an order: the engine decoded them)
                if let Some(o) = order.or_else(|| a.refusal_order(source, comm, &bytes)) {
                    self.keep(source, comm, bytes, o, table);
                }
                false
            }
        }
    }

    /// Hands envelope `bytes` of `key` (when known) to the engine ([`Admit::hand_in`]);
    /// when the engine keeps it waiting for its receive while receives wait here, notes
    /// its key (`noted`), so that the oldest waiting receive of that key is found
    /// without a search.
    fn hand_in(
        &mut self,
        a: &mut impl Admit<Cmd = C>,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
        key: Option<Key>,
    ) -> Result<(), (Vec<u8>, Table)> {
        let key = if self.recvs.is_empty() {
            None
        } else {
            key.or_else(|| a.refusal_order(source, comm, &bytes).map(|o| o.key))
        };
        let before = a.waiting_arrivals();
        let handed = a.hand_in(source, comm, bytes);
        let after = a.waiting_arrivals();
        // Only an arrival of this envelope, with every one before it noted, keeps the
        // count: anything else leaves `first_here` to look once.
        if self.noted == before && after == before + 1 {
            if let Some(key) = key {
                self.note_early(key);
            }
            self.noted = after;
        }
        handed
    }

    /// Notes that `key` may have early data for its oldest waiting receive (`pending`).
    fn note_early(&mut self, key: Key) {
        if self.recvs.is_empty() {
            return;
        }
        self.none_here_at = None;
        if self.pending.len() < PENDING {
            self.pending.push(key);
        } else {
            self.pending.clear();
            self.scan = true;
        }
    }

    /// A receive of `key` went in (or waits, or was put back): if more messages of `key`
    /// wait in the engine, the next waiting receive of `key` may have its message here.
    fn note_if_early(&mut self, a: &impl Admit<Cmd = C>, key: Key) {
        if !self.recvs.is_empty() && a.has_early(key) {
            self.note_early(key);
        }
    }

    /// Keeps an envelope the engine just refused for `table` (handed in directly, with
    /// nothing refused before it), behind the others.
    pub(crate) fn keep_refused(
        &mut self,
        a: &impl Admit<Cmd = C>,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
        table: Table,
    ) {
        self.refusals += 1;
        // (refused bytes always have an order: the engine decoded them)
        if let Some(o) = a.refusal_order(source, comm, &bytes) {
            self.keep(source, comm, bytes, o, table);
        }
    }

    /// Keeps envelope `bytes`, which keeps `order`, refused for `table`.
    fn keep(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
        order: RefusalOrder,
        table: Table,
    ) {
        if order.reply {
            self.refused.replies.push_back((source, comm, bytes));
        } else {
            self.refused.push(source, comm, bytes, order, Some(table));
        }
    }

    /// Hands in again the refused envelopes of `key` that may go in, oldest first,
    /// until one is refused again (a receive of `key` was just posted: they need no
    /// room now).
    pub(crate) fn retry_key(&mut self, a: &mut impl Admit<Cmd = C>, key: Key) {
        while let Some(seq) = self.refused.free_front(key) {
            if self.hand_in_again(a, seq) != Retry::In {
                return;
            }
        }
    }

    /// Hands in refused envelope `seq` if nothing it must stay behind is still
    /// refused.
    fn retry_one(&mut self, a: &mut impl Admit<Cmd = C>, seq: u64) -> Retry {
        if !self.refused.eligible(seq) {
            return Retry::Held;
        }
        self.hand_in_again(a, seq)
    }

    /// Hands in refused envelope `seq`, free to go ([`Refused::eligible`]).
    fn hand_in_again(&mut self, a: &mut impl Admit<Cmd = C>, seq: u64) -> Retry {
        let Some((source, comm, bytes, key)) = self.refused.take(seq) else {
            return Retry::Held;
        };
        match self.hand_in(a, source, comm, bytes, Some(key)) {
            Ok(()) => {
                self.refused.remove(seq);
                Retry::In
            }
            Err((bytes, table)) => {
                self.refusals += 1;
                self.refused.put_back(seq, bytes, table);
                Retry::Refused(table)
            }
        }
    }

    /// Hands refused envelopes in again, each that nothing earlier holds back: those
    /// refused for a table that may have room now ([`Admit::has_room`]) and those not
    /// tried since they became free to go, oldest first per table, while their table may
    /// have room; stops at the first refused for want of a request slot (the next ones
    /// would need one too), and after [`TRIES`] tries (a later pass goes on). Whether
    /// any went in.
    pub(crate) fn retry_refused(&mut self, a: &mut impl Admit<Cmd = C>) -> bool {
        // (a sending rank whose sends wait comes here after every completion: with
        // nothing refused, nothing to look at)
        if self.refused.is_empty() {
            return false;
        }
        let mut any = false;
        // Acknowledgements first: refused only for the output queues, and each one lets
        // a synchronous send go on.
        while let Some((source, comm, bytes)) = self.refused.replies.pop_front() {
            match self.hand_in(a, source, comm, bytes, None) {
                Ok(()) => any = true,
                Err((bytes, _)) => {
                    self.refusals += 1;
                    self.refused.replies.push_front((source, comm, bytes));
                    break;
                }
            }
        }
        let mut tries = 0;
        // Rounds: one that let an envelope in may have freed those behind it.
        let mut moved = true;
        'rounds: while moved && tries < TRIES {
            moved = false;
            for group in self.refused.free_groups() {
                let mut after = None;
                while tries < TRIES && group.is_none_or(|t| a.has_room(t)) {
                    let Some(seq) = self.refused.next_free(group, after) else {
                        break;
                    };
                    after = Some(seq);
                    tries += 1;
                    match self.retry_one(a, seq) {
                        Retry::In => (any, moved) = (true, true),
                        Retry::Refused(Table::Requests) => break 'rounds,
                        Retry::Refused(_) | Retry::Held => {}
                    }
                }
            }
        }
        any
    }
}

/// The groups of free refused envelopes, by the table that refused them
/// ([`Refused::free_groups`]): one per table and one not tried, so no more than the
/// tables plus one.
#[derive(Default)]
struct Groups {
    items: [Option<Table>; 16],
    len: usize,
}

impl IntoIterator for Groups {
    type Item = Option<Table>;
    type IntoIter = core::iter::Take<core::array::IntoIter<Option<Table>, 16>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len)
    }
}

/// A refused envelope kept for handing in again.
struct RefusedItem {
    source: Rank,
    comm: CommId,
    /// `None` while being handed in.
    bytes: Option<Vec<u8>>,
    /// What it keeps its order with.
    order: RefusalOrder,
    /// The table that refused it last, while it is free to go ([`Refused::free`]);
    /// `None` when it has not been tried since it became free.
    refused_by: Option<Table>,
}

/// The refused envelopes by arrival number: arrival numbers are handed out in order, so
/// a ring indexed from the oldest one kept (no search, no allocation per envelope).
#[derive(Default)]
struct BySeq {
    /// The arrival number of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<RefusedItem>>,
    len: usize,
}

impl BySeq {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps `item` as arrival number `seq`, the next one.
    fn push(&mut self, seq: u64, item: RefusedItem) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        debug_assert_eq!(seq, self.base + self.slots.len() as u64);
        self.slots.push_back(Some(item));
        self.len += 1;
    }

    fn index(&self, seq: u64) -> Option<usize> {
        seq.checked_sub(self.base).map(|i| i as usize)
    }

    fn get(&self, seq: u64) -> Option<&RefusedItem> {
        self.slots.get(self.index(seq)?)?.as_ref()
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut RefusedItem> {
        let i = self.index(seq)?;
        self.slots.get_mut(i)?.as_mut()
    }

    fn remove(&mut self, seq: u64) -> Option<RefusedItem> {
        let i = self.index(seq)?;
        let item = self.slots.get_mut(i)?.take()?;
        self.len -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(item)
    }

    fn values(&self) -> impl Iterator<Item = &RefusedItem> + '_ {
        self.slots.iter().flatten()
    }
}

/// The arrival numbers of one key or payload tag, oldest first: the first inline (most
/// keys hold one envelope, which then costs no allocation).
struct Fifo {
    head: u64,
    rest: VecDeque<u64>,
}

impl Fifo {
    const fn new(seq: u64) -> Self {
        Self {
            head: seq,
            rest: VecDeque::new(),
        }
    }

    const fn front(&self) -> u64 {
        self.head
    }

    fn push_back(&mut self, seq: u64) {
        self.rest.push_back(seq);
    }

    fn push_front(&mut self, seq: u64) {
        self.rest.push_front(self.head);
        self.head = seq;
    }

    /// Takes `seq` out; whether the queue is empty now.
    fn remove(&mut self, seq: u64) -> bool {
        if self.head == seq {
            match self.rest.pop_front() {
                Some(next) => {
                    self.head = next;
                    false
                }
                None => true,
            }
        } else {
            self.rest.retain(|s| *s != seq);
            false
        }
    }
}

/// Appends `seq` to the queue of `k` in `map`.
fn push_seq<K: core::hash::Hash + Eq>(map: &mut IdMap<K, Fifo>, k: K, seq: u64) {
    match map.entry(k) {
        std::collections::hash_map::Entry::Occupied(mut q) => q.get_mut().push_back(seq),
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(Fifo::new(seq));
        }
    }
}

/// Takes `seq` out of the queue of `k` in `map`; the new oldest, if any.
fn remove_seq<K: core::hash::Hash + Eq + Copy>(
    map: &mut IdMap<K, Fifo>,
    k: &K,
    seq: u64,
) -> Option<u64> {
    // (one probe of the table, which may be large and cold: the entry is removed in place)
    let std::collections::hash_map::Entry::Occupied(mut q) = map.entry(*k) else {
        return None;
    };
    if q.get_mut().remove(seq) {
        q.remove();
        None
    } else {
        Some(q.get().front())
    }
}

/// Envelopes the engine refused for a full table, kept for handing in again: in arrival
/// order per matching key and per payload tag of a source (what [`RefusalOrder`] says
/// they must stay behind), otherwise free to overtake each other.
///
/// The envelopes free to go (the oldest of their key and of their payload tag) are kept
/// by the table that refused them last, so that a retry pass tries only those whose
/// table may have room ([`Admit::has_room`]): with thousands refused for one full table,
/// a pass after a completion costs a look at that table, not a try of each.
#[derive(Default)]
struct Refused {
    /// By arrival number.
    items: BySeq,
    /// Arrival numbers per key, oldest first.
    by_key: IdMap<Key, Fifo>,
    /// Arrival numbers per (source, payload tag), oldest first.
    by_payload: IdMap<(Rank, PhysTag), Fifo>,
    /// The envelopes free to go, by the table that refused them last (`None`: not tried
    /// since they became free), oldest first.
    free: Vec<(Option<Table>, BTreeSet<u64>)>,
    next: u64,
    /// Changes so far (an envelope kept, freed, handed in or given back).
    changes: u64,
    /// The keys of the envelopes that became free to go since the admission last looked,
    /// while `note_freed`.
    freed_keys: Vec<Key>,
    /// Whether receives wait in the admission (set by it): with none, a freed key needs
    /// no note, since a receive that starts waiting looks its key up itself.
    note_freed: bool,
    /// Refused ready acknowledgements ([`RefusalOrder::reply`]), in arrival order: they
    /// keep no order with the envelopes above and are handed in first.
    replies: VecDeque<(Rank, CommId, Vec<u8>)>,
}

impl Refused {
    /// Whether no envelope is kept.
    fn is_empty(&self) -> bool {
        self.items.is_empty() && self.replies.is_empty()
    }

    /// Whether an envelope from `source` that keeps `order` must wait behind refused ones.
    fn must_wait(&self, source: Rank, order: &RefusalOrder) -> bool {
        self.by_key.contains_key(&order.key)
            || order
                .payload
                .is_some_and(|t| self.by_payload.contains_key(&(source, t)))
    }

    /// Keeps an envelope, behind the others; `refused_by`: the table that refused it
    /// (`None` when it was not handed in: an earlier one holds it back).
    fn push(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
        order: RefusalOrder,
        refused_by: Option<Table>,
    ) {
        let seq = self.next;
        self.next += 1;
        self.changes += 1;
        self.items.push(
            seq,
            RefusedItem {
                source,
                comm,
                bytes: Some(bytes),
                order,
                refused_by,
            },
        );
        push_seq(&mut self.by_key, order.key, seq);
        if let Some(t) = order.payload {
            push_seq(&mut self.by_payload, (source, t), seq);
        }
        if self.eligible(seq) {
            self.set_free(seq, refused_by);
        }
    }

    /// The oldest refused envelope of `key`.
    fn front_of(&self, key: Key) -> Option<u64> {
        self.by_key.get(&key).map(Fifo::front)
    }

    /// The tables the free envelopes were refused for, those not tried yet (`None`)
    /// first: at most one group per table and one untried, so a list on the stack.
    fn free_groups(&self) -> Groups {
        let mut groups = Groups::default();
        for untried in [true, false] {
            for (t, _) in &self.free {
                debug_assert!(groups.len < groups.items.len(), "more groups than tables");
                if t.is_none() == untried && groups.len < groups.items.len() {
                    groups.items[groups.len] = *t;
                    groups.len += 1;
                }
            }
        }
        groups
    }

    /// The oldest free envelope refused for `group` after arrival number `after` (from
    /// the first).
    fn next_free(&self, group: Option<Table>, after: Option<u64>) -> Option<u64> {
        let (_, set) = self.free.iter().find(|(t, _)| *t == group)?;
        match after {
            None => set.iter().next().copied(),
            Some(a) => set
                .range((core::ops::Bound::Excluded(a), core::ops::Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// Files free envelope `seq` under `group` (out of the one it was under), or parks
    /// it ([`Refused::parked`]).
    fn set_free(&mut self, seq: u64, group: Option<Table>) {
        let Some(item) = self.items.get_mut(seq) else {
            return;
        };
        self.changes += 1;
        if self.note_freed {
            self.freed_keys.push(item.order.key);
        }
        let was_parked = Self::parked(item);
        let old = item.refused_by;
        item.refused_by = group;
        let parked = Self::parked(item);
        if !was_parked {
            self.unfree(seq, old);
        }
        if parked {
            return;
        }
        match self.free.iter_mut().find(|(t, _)| *t == group) {
            Some((_, set)) => {
                set.insert(seq);
            }
            None => self.free.push((group, BTreeSet::from([seq]))),
        }
    }

    /// Whether `item` is parked: free to go, but refused for a table that only a
    /// receive of its key makes it not need (the core decides:
    /// [`RefusalOrder::waits_for_its_receive`]). A parked envelope is in no retry group:
    /// it goes in when a receive of its key does ([`Admission::retry_key`]), so it costs
    /// no retry pass and the engine's room goes to what needs it.
    fn parked(item: &RefusedItem) -> bool {
        item.refused_by
            .is_some_and(|t| item.order.waits_for_its_receive(t))
    }

    /// Takes `seq` out of the free envelopes of `group`.
    fn unfree(&mut self, seq: u64, group: Option<Table>) {
        if let Some(i) = self.free.iter().position(|(t, _)| *t == group) {
            self.free[i].1.remove(&seq);
            if self.free[i].1.is_empty() {
                self.free.swap_remove(i);
            }
        }
    }

    /// Whether envelope `seq` is the oldest of its key and of its payload tag.
    fn eligible(&self, seq: u64) -> bool {
        self.items.get(seq).is_some_and(|item| {
            self.front_of(item.order.key) == Some(seq) && self.free_of_payload(seq, item)
        })
    }

    /// The oldest refused envelope of `key` if it is free to go ([`Refused::eligible`]):
    /// one look-up of the key.
    fn free_front(&self, key: Key) -> Option<u64> {
        let seq = self.front_of(key)?;
        let item = self.items.get(seq)?;
        self.free_of_payload(seq, item).then_some(seq)
    }

    /// Whether `item` (envelope `seq`, the oldest of its key) is not being handed in and
    /// is the oldest of its payload tag.
    fn free_of_payload(&self, seq: u64, item: &RefusedItem) -> bool {
        item.bytes.is_some()
            && item.order.payload.is_none_or(|t| {
                self.by_payload.get(&(item.source, t)).map(Fifo::front) == Some(seq)
            })
    }

    /// Takes envelope `seq`'s bytes to hand it in (it stays in place until removed).
    fn take(&mut self, seq: u64) -> Option<(Rank, CommId, Vec<u8>, Key)> {
        let item = self.items.get_mut(seq)?;
        self.changes += 1;
        Some((item.source, item.comm, item.bytes.take()?, item.order.key))
    }

    /// Gives envelope `seq` its bytes back: it was refused again, for `table`.
    fn put_back(&mut self, seq: u64, bytes: Vec<u8>, table: Table) {
        if let Some(item) = self.items.get_mut(seq) {
            item.bytes = Some(bytes);
            self.set_free(seq, Some(table));
        }
    }

    /// Forgets envelope `seq`, which went in (the oldest of its key and payload tag).
    /// The envelopes that were held behind it only and are now free to go are filed as
    /// not tried: the next pass hands them in whatever refused them before (a receive
    /// may have been posted for them meanwhile, and then they need no room).
    fn remove(&mut self, seq: u64) {
        let Some(item) = self.items.remove(seq) else {
            return;
        };
        self.changes += 1;
        if !Self::parked(&item) {
            self.unfree(seq, item.refused_by);
        }
        let freed = [
            remove_seq(&mut self.by_key, &item.order.key, seq),
            item.order
                .payload
                .and_then(|t| remove_seq(&mut self.by_payload, &(item.source, t), seq)),
        ];
        for next in freed.into_iter().flatten() {
            if self.eligible(next) {
                self.set_free(next, None);
            }
        }
    }

    /// The refused envelopes, oldest first, then the refused acknowledgements: source,
    /// communicator, bytes.
    fn iter(&self) -> impl Iterator<Item = (Rank, CommId, &[u8])> + '_ {
        self.items
            .values()
            .filter_map(|i| i.bytes.as_deref().map(|b| (i.source, i.comm, b)))
            .chain(self.replies.iter().map(|(s, c, b)| (*s, *c, b.as_slice())))
    }
}

#[cfg(test)]
mod tests;
