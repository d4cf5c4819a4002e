//! Matching: pairing incoming envelopes with posted receives on (communicator, source,
//! user tag), in MPI's non-overtaking order.
//!
//! The [`Matcher`] is the state machine of one key at a time. For every [`Key`] it
//! holds *either* receives that were posted before their envelope arrived (the
//! reference's *early requests*) *or* envelopes that arrived before their receive was
//! posted (*early data* and *sync data*, here one table of [`Unexpected`] messages),
//! never both. Its rules:
//!
//! 1. **Exact keys, no wildcards.** A message matches only a receive with the same
//!    communicator, source rank and 64-bit user tag (internals §3.4).
//! 2. **FIFO per key.** A key's receives are matched oldest first, and a key's
//!    unexpected messages are delivered oldest first: the k-th receive posted for a key
//!    gets the k-th message sent on it (MPI's non-overtaking rule, §12.2).
//! 3. **One table for every kind of unexpected message.** Early payloads
//!    ([`UnexpectedKind::Data`]), inline eager payloads ([`UnexpectedKind::Eager`]) and
//!    synchronous envelopes ([`UnexpectedKind::Sync`]) of one key wait in *one* FIFO.
//!    The reference keeps sync envelopes in a separate table and, when a receive is
//!    posted, looks in the early-data table first (§3.4 step 1): a non-synchronous
//!    message that arrived *after* a synchronous one with the same key is then
//!    delivered first, breaking rule 2. A single table makes that reordering impossible.
//! 4. **At most one side is non-empty per key** (the invariant). A receive is recorded
//!    only if no message waits for its key, and a message only if no receive waits for
//!    it; [`Matcher::post_recv`] and [`Matcher::arrive`] keep this by construction. The
//!    primitive operations ([`push_recv`](Matcher::push_recv),
//!    [`push_unexpected`](Matcher::push_unexpected)) leave it to the caller: call them
//!    only after the matching `take_*` for the same key returned `None`.
//! 5. **Nothing is lost.** A full table hands the receive or the message back in a
//!    [`Full`] and changes nothing: the early-request table reports
//!    [`Table::EarlyRequests`], the unexpected table [`Table::EarlyData`], and either
//!    reports [`Table::MatchKeys`] when its `KEYS` distinct keys are all in use.
//! 6. **Leftovers are reported, not asserted.** At shutdown, [`Matcher::orphans`] lists
//!    the messages that arrived and were never received (the reference aborts on the
//!    first one, §3.5) and [`Matcher::unmatched`] the receives never matched (§12.8).
//!
//! The matcher holds ids and sizes only; the payload of an early or eager message stays
//! in the adapter's buffers, named by the internal request or the message id.

use core::fmt;

use crate::error::{Full, Table};
use crate::lists::{Key, KeyedFifo};
use crate::types::{CommId, MsgId, Rank, ReqId, Tag};

/// What kind of message arrived before its receive was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UnexpectedKind {
    /// A data envelope: its payload is being received into an engine-owned early buffer
    /// by an internal request, to be copied out when the receive is posted (internals
    /// §3.5).
    Data,
    /// An eager envelope: the payload came inline and the adapter stashed it.
    Eager,
    /// A synchronous envelope: nothing was sent yet, the sender waits for our ready
    /// acknowledgement (internals §3.7).
    Sync,
}

impl fmt::Display for UnexpectedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Data => "data",
            Self::Eager => "eager",
            Self::Sync => "sync",
        })
    }
}

/// A message that arrived before its receive was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Unexpected {
    /// What arrived.
    pub kind: UnexpectedKind,
    /// The message id from the envelope (names the payload's physical tag, and the
    /// synchronous send to acknowledge).
    pub msg: MsgId,
    /// The payload size announced by the envelope, in bytes.
    pub size: u64,
    /// The engine's internal request receiving (or holding) the early payload; `None`
    /// for [`UnexpectedKind::Sync`] and [`UnexpectedKind::Eager`] messages.
    pub internal: Option<ReqId>,
}

/// A message that arrived and was never received, reported at shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Orphan {
    /// The communicator it came on.
    pub comm: CommId,
    /// The rank that sent it.
    pub source: Rank,
    /// Its user tag.
    pub tag: Tag,
    /// Its payload size in bytes.
    pub size: u64,
    /// What arrived.
    pub kind: UnexpectedKind,
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unexpected {} message of {} bytes from {} on {} with {} was never received \
             (did you forget to post a receive matching a send?)",
            self.kind, self.size, self.source, self.comm, self.tag
        )
    }
}

/// Posted receives and unexpected messages, matched per [`Key`]; see the
/// [module docs](self) for the rules.
///
/// Each of the two tables holds up to `ENTRIES` items over up to `KEYS` distinct keys;
/// **`KEYS` must be a power of two greater than 1** (see [`KeyedFifo`]).
#[derive(Clone, Debug)]
pub struct Matcher<const KEYS: usize, const ENTRIES: usize> {
    /// Early requests: receives posted before their envelope.
    recvs: KeyedFifo<ReqId, KEYS, ENTRIES>,
    /// Early data: messages (data, eager, sync) that arrived before their receive.
    unexpected: KeyedFifo<Unexpected, KEYS, ENTRIES>,
}

impl<const KEYS: usize, const ENTRIES: usize> Default for Matcher<KEYS, ENTRIES> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const KEYS: usize, const ENTRIES: usize> Matcher<KEYS, ENTRIES> {
    /// An empty matcher.
    pub const fn new() -> Self {
        Self {
            recvs: KeyedFifo::new(Table::EarlyRequests),
            unexpected: KeyedFifo::new(Table::EarlyData),
        }
    }

    /// A receive for `key` was posted: returns the oldest unexpected message for `key`
    /// (removed from the matcher), or `None` after recording the receive behind any
    /// other receives for `key`.
    ///
    /// # Errors
    ///
    /// [`Full`] handing `id` back ([`Table::EarlyRequests`] or [`Table::MatchKeys`])
    /// when no message waited and the receive could not be recorded; nothing changed.
    pub fn post_recv(&mut self, key: Key, id: ReqId) -> Result<Option<Unexpected>, Full<ReqId>> {
        if let Some(message) = self.unexpected.pop_front(key) {
            return Ok(Some(message));
        }
        self.recvs.push_back(key, id).map(|()| None)
    }

    /// A message for `key` arrived: returns the oldest receive posted for `key`
    /// (removed from the matcher), or `None` after recording the message behind any
    /// other unexpected messages for `key`.
    ///
    /// # Errors
    ///
    /// [`Full`] handing `message` back ([`Table::EarlyData`] or [`Table::MatchKeys`])
    /// when no receive waited and the message could not be recorded; nothing changed.
    pub fn arrive(
        &mut self,
        key: Key,
        message: Unexpected,
    ) -> Result<Option<ReqId>, Full<Unexpected>> {
        if let Some(id) = self.recvs.pop_front(key) {
            return Ok(Some(id));
        }
        self.unexpected.push_back(key, message).map(|()| None)
    }

    /// The oldest receive posted for `key`, left in place.
    pub fn peek_recv(&self, key: Key) -> Option<ReqId> {
        self.recvs.front(key).copied()
    }

    /// Removes and returns the oldest receive posted for `key`.
    pub fn take_recv(&mut self, key: Key) -> Option<ReqId> {
        self.recvs.pop_front(key)
    }

    /// Records receive `id` for `key` behind the others.
    ///
    /// Call it only after [`take_unexpected`](Self::take_unexpected) returned `None`
    /// for `key`, or the matcher would hold a receive and a message that match (rule 4
    /// of the [module docs](self)); [`post_recv`](Self::post_recv) does both.
    ///
    /// # Errors
    ///
    /// [`Full`] handing `id` back ([`Table::EarlyRequests`] or [`Table::MatchKeys`]);
    /// nothing changed.
    pub fn push_recv(&mut self, key: Key, id: ReqId) -> Result<(), Full<ReqId>> {
        self.recvs.push_back(key, id)
    }

    /// Removes and returns the oldest unexpected message for `key`.
    pub fn take_unexpected(&mut self, key: Key) -> Option<Unexpected> {
        self.unexpected.pop_front(key)
    }

    /// The oldest unexpected message for `key`, left in place.
    pub fn peek_unexpected(&self, key: Key) -> Option<&Unexpected> {
        self.unexpected.front(key)
    }

    /// Records `message` for `key` behind the others.
    ///
    /// Call it only after [`take_recv`](Self::take_recv) returned `None` for `key`, or
    /// the matcher would hold a receive and a message that match (rule 4 of the
    /// [module docs](self)); [`arrive`](Self::arrive) does both.
    ///
    /// # Errors
    ///
    /// [`Full`] handing `message` back ([`Table::EarlyData`] or [`Table::MatchKeys`]);
    /// nothing changed.
    pub fn push_unexpected(
        &mut self,
        key: Key,
        message: Unexpected,
    ) -> Result<(), Full<Unexpected>> {
        self.unexpected.push_back(key, message)
    }

    /// Withdraws receive `id` from `key`'s waiting receives (a cancelled receive);
    /// `false` if it was not waiting there. The other receives keep their order.
    pub fn cancel_recv(&mut self, key: Key, id: ReqId) -> bool {
        self.recvs.remove(key, |r| *r == id).is_some()
    }

    /// The messages that arrived and were never received: each key's oldest first, the
    /// keys in no particular order. Report them at shutdown.
    pub fn orphans(&self) -> impl Iterator<Item = Orphan> + '_ {
        self.unexpected.iter().map(|(key, m)| Orphan {
            comm: key.comm,
            source: key.peer,
            tag: key.tag,
            size: m.size,
            kind: m.kind,
        })
    }

    /// The receives never matched, with their keys: each key's oldest first, the keys
    /// in no particular order.
    pub fn unmatched(&self) -> impl Iterator<Item = (Key, ReqId)> + '_ {
        self.recvs.iter().map(|(key, id)| (key, *id))
    }

    /// The unexpected messages with their keys: each key's oldest first, the keys in no
    /// particular order.
    pub fn unexpected(&self) -> impl Iterator<Item = (Key, &Unexpected)> + '_ {
        self.unexpected.iter()
    }

    /// How many receives wait for an envelope (early requests).
    #[inline]
    pub const fn recv_count(&self) -> usize {
        self.recvs.len()
    }

    /// How many messages wait for a receive (early data, eager and sync envelopes).
    #[inline]
    pub const fn unexpected_count(&self) -> usize {
        self.unexpected.len()
    }

    /// How many of the waiting messages are synchronous envelopes (their senders wait
    /// for our acknowledgement). O(n).
    pub fn sync_count(&self) -> usize {
        self.unexpected
            .iter()
            .filter(|(_, m)| m.kind == UnexpectedKind::Sync)
            .count()
    }

    /// Whether a key of the posted-receive table is `key` (a receive for it may be
    /// recorded without a new key).
    pub fn has_recv_key(&self, key: Key) -> bool {
        self.recvs.contains_key(key)
    }

    /// How many distinct keys the posted receives use.
    pub fn recv_keys(&self) -> usize {
        self.recvs.key_count()
    }

    /// Whether a key of the early-data table is `key`.
    pub fn has_unexpected_key(&self, key: Key) -> bool {
        self.unexpected.contains_key(key)
    }

    /// How many distinct keys the waiting messages use.
    pub fn unexpected_keys(&self) -> usize {
        self.unexpected.key_count()
    }

    /// Whether nothing waits on either side.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.recvs.is_empty() && self.unexpected.is_empty()
    }

    /// Whether rule 4 of the [module docs](self) holds: no key has both a waiting
    /// receive and a waiting message. O(keys). Always `true` unless the primitive
    /// operations were misused; for tests and debug checks.
    pub fn is_consistent(&self) -> bool {
        self.recvs.keys().all(|k| !self.unexpected.contains_key(k))
    }
}

#[cfg(test)]
mod tests;
