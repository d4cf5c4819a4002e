//! The request lists of the progression engine: which request goes next, which receive
//! or message waits for which key, which synchronous send waits for which
//! acknowledgement, and which detached requests are in flight.
//!
//! These are the reference's global lists and tables (internals §2.3), each with a
//! fixed capacity. They hold [`ReqId`]s (and small `Copy` records), never requests or
//! payloads.
//!
//! | list | reference | key / order | cost |
//! | --- | --- | --- | --- |
//! | [`ReadyList`] | `ready_send_requests` | highest [`Priority`] first, FIFO among equals | push, pop O(log n); remove O(n) |
//! | [`KeyedFifo`] | early requests, early data (used by the [matcher](crate::matcher)) | FIFO per [`Key`] | push, pop O(1); remove O(length of the key's list) |
//! | [`SyncSends`] | sync data, sender side | ([`CommId`], destination, [`MsgId`]) | O(n) |
//! | [`Detached`] | `detached_requests` | insertion order | O(n) |
//!
//! Rules shared by all of them:
//!
//! - **Nothing is lost or dropped.** A full list refuses the item and hands it back in
//!   a [`Full`] naming the table ([`Table`]); the list is then unchanged.
//! - **FIFO is strict.** Equal priorities in the [`ReadyList`] leave in push order (a
//!   `u64` sequence number breaks ties; it cannot wrap in practice), and a
//!   [`KeyedFifo`] gives a key's items back in push order (MPI's non-overtaking rule).
//! - **Synchronous sends have their own table.** [`SyncSends`] is keyed by the
//!   destination and the message id, and it is a different table from the matcher's
//!   early data, where a synchronous *envelope from* a peer waits. The reference keeps
//!   both in one table under (comm, rank, tag) and can pop the wrong kind of entry when
//!   two ranks `issend` to each other with the same tag (internals §3.7, §12.6); here
//!   the two can never meet.

use core::fmt;
use core::hash::Hasher;

use heapless::index_map::IndexMap;

use crate::error::{Full, Table};
use crate::types::{CommId, MsgId, Priority, Rank, ReqId, Tag};

// ---------------------------------------------------------------------------------
// The key tables' hasher
// ---------------------------------------------------------------------------------

/// The hasher of the core's bounded tables ([`KeyMap`]): the multiply-rotate word hash
/// of rustc's `FxHasher`, with a final rotation, over whole words. heapless's default,
/// FNV-1a, takes a multiplication per byte (14 for a [`Key`], about 60 instructions a
/// lookup, several lookups a message); this takes one per field.
///
/// It does not resist keys chosen to collide: the keys are the ranks, communicators and
/// tags of one job, and a table is bounded, so a colliding key set costs time, never
/// correctness. heapless picks a bucket by the low 16 bits of the hash: the final
/// rotation brings the well-mixed high bits of the product there (a multiplication mixes
/// an input bit only into the bits above it).
#[derive(Clone, Copy, Debug, Default)]
pub struct WordHasher(u64);

/// The multiplier of [`WordHasher`] (rustc-hash 2's).
const WORD_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl WordHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(WORD_SEED);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

/// A bounded map of the core's tables: heapless's `IndexMap` (insertion-ordered, at
/// most `N` entries; `N` a power of two greater than 1) hashed by [`WordHasher`].
pub type KeyMap<K, V, const N: usize> = IndexMap<K, V, hash32::BuildHasherDefault<WordHasher>, N>;

// ---------------------------------------------------------------------------------
// ReadyList
// ---------------------------------------------------------------------------------

/// One entry of the ready list's heap.
#[derive(Clone, Copy, Debug)]
struct Ready {
    priority: Priority,
    seq: u64,
    id: ReqId,
}

impl Ready {
    /// Whether `self` leaves the list before `other`.
    fn before(&self, other: &Self) -> bool {
        self.priority > other.priority || (self.priority == other.priority && self.seq < other.seq)
    }
}

/// Ready requests, highest [`Priority`] first and FIFO among equal priorities (the
/// reference's `ready_send_requests`, internals §2.3).
///
/// A binary heap of up to `N` entries ordered by (priority, push sequence number).
#[derive(Clone, Debug)]
pub struct ReadyList<const N: usize> {
    heap: heapless::Vec<Ready, N>,
    next_seq: u64,
}

impl<const N: usize> Default for ReadyList<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ReadyList<N> {
    /// An empty list.
    pub const fn new() -> Self {
        Self {
            heap: heapless::Vec::new(),
            next_seq: 0,
        }
    }

    /// Adds `id` with `priority`, after every request already in the list with the same
    /// priority. O(log n).
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::ReadyList`]) when the list holds `N` requests; `id` is handed
    /// back and the list is unchanged.
    pub fn push(&mut self, id: ReqId, priority: Priority) -> Result<(), Full<ReqId>> {
        let entry = Ready {
            priority,
            seq: self.next_seq,
            id,
        };
        if self.heap.push(entry).is_err() {
            return Err(Full::new(Table::ReadyList, id));
        }
        self.next_seq = self.next_seq.wrapping_add(1);
        self.sift_up(self.heap.len().saturating_sub(1));
        Ok(())
    }

    /// Removes and returns the request that goes next: the highest priority, the oldest
    /// among equals. O(log n).
    pub fn pop(&mut self) -> Option<ReqId> {
        let last = self.heap.len().checked_sub(1)?;
        self.heap.swap(0, last);
        let top = self.heap.pop()?;
        self.sift_down(0);
        Some(top.id)
    }

    /// The request that [`pop`](Self::pop) would return.
    pub fn peek(&self) -> Option<ReqId> {
        self.heap.first().map(|e| e.id)
    }

    /// Removes `id` wherever it is (a cancelled request); `false` if it is not in the
    /// list. O(n).
    pub fn remove(&mut self, id: ReqId) -> bool {
        let Some(at) = self.heap.iter().position(|e| e.id == id) else {
            return false;
        };
        let Some(last) = self.heap.len().checked_sub(1) else {
            return false;
        };
        self.heap.swap(at, last);
        let _removed = self.heap.pop();
        if at < self.heap.len() {
            self.sift_down(at);
            self.sift_up(at);
        }
        true
    }

    /// Whether `id` is in the list. O(n).
    pub fn contains(&self, id: ReqId) -> bool {
        self.heap.iter().any(|e| e.id == id)
    }

    /// The requests in the list with their priorities, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (ReqId, Priority)> + '_ {
        self.heap.iter().map(|e| (e.id, e.priority))
    }

    /// How many requests are in the list.
    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// How many requests the list can hold (`N`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Whether the entry at `a` leaves before the one at `b` (`false` if either is out
    /// of range).
    fn before_at(&self, a: usize, b: usize) -> bool {
        match (self.heap.get(a), self.heap.get(b)) {
            (Some(x), Some(y)) => x.before(y),
            _ => false,
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.before_at(at, parent) {
                break;
            }
            self.heap.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = 2 * at + 1;
            let right = left + 1;
            let mut best = at;
            if self.before_at(left, best) {
                best = left;
            }
            if self.before_at(right, best) {
                best = right;
            }
            if best == at {
                break;
            }
            self.heap.swap(at, best);
            at = best;
        }
    }
}

// ---------------------------------------------------------------------------------
// Key and KeyedFifo
// ---------------------------------------------------------------------------------

/// A matching key: (communicator, peer rank, user tag).
///
/// For the matcher the peer is the source of a message; for a request it is the
/// request's [`peer`](crate::request::Request::peer). Matching is exact on all three
/// fields (no wildcards, internals §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Key {
    /// The communicator.
    pub comm: CommId,
    /// The peer rank (the source, for the matcher).
    pub peer: Rank,
    /// The user tag.
    pub tag: Tag,
}

impl Key {
    /// The key (`comm`, `peer`, `tag`).
    #[inline]
    pub const fn new(comm: CommId, peer: Rank, tag: Tag) -> Self {
        Self { comm, peer, tag }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.comm, self.peer, self.tag)
    }
}

/// A non-empty list of one key: indices into the node pool.
#[derive(Clone, Copy, Debug)]
struct List {
    head: usize,
    tail: usize,
    len: usize,
}

/// A node of the shared pool.
#[derive(Clone, Copy, Debug)]
enum Node<V> {
    /// Holds a value; `next` is the next node of the same key.
    Used { value: V, next: Option<usize> },
    /// Free; `next` links the free list.
    Free { next: Option<usize> },
}

/// Walks one key's list.
struct ListIter<'a, V> {
    nodes: &'a [Node<V>],
    next: Option<usize>,
}

impl<'a, V> Iterator for ListIter<'a, V> {
    type Item = &'a V;

    fn next(&mut self) -> Option<&'a V> {
        let at = self.next?;
        match self.nodes.get(at) {
            Some(Node::Used { value, next }) => {
                self.next = *next;
                Some(value)
            }
            _ => {
                self.next = None;
                None
            }
        }
    }
}

/// FIFO lists of `V`, one per [`Key`], sharing a pool of `ENTRIES` nodes, with at most
/// `KEYS` keys holding items at once.
///
/// The reference's two-level hash of FIFO lists (early requests, early data; internals
/// §2.3), flattened: a key table (a [`KeyMap`]) maps each key to the head and tail
/// of a singly linked list threaded through the pool.
///
/// - **`KEYS` must be a power of two greater than 1** (a requirement of heapless's
///   `IndexMap`); any other value fails to compile when [`KeyedFifo::new`] is
///   evaluated.
/// - A key whose list becomes empty leaves the key table, so `KEYS` bounds the keys
///   with *pending* items, not the keys ever seen.
/// - [`push_back`](Self::push_back) and [`pop_front`](Self::pop_front) are O(1).
/// - A full pool is reported with the table given to [`KeyedFifo::new`]; a full key
///   table with [`Table::MatchKeys`]. When both are full, the pool is reported.
#[derive(Clone, Debug)]
pub struct KeyedFifo<V: Copy, const KEYS: usize, const ENTRIES: usize> {
    table: Table,
    lists: KeyMap<Key, List, KEYS>,
    nodes: heapless::Vec<Node<V>, ENTRIES>,
    free: Option<usize>,
    len: usize,
}

impl<V: Copy, const KEYS: usize, const ENTRIES: usize> KeyedFifo<V, KEYS, ENTRIES> {
    /// Empty lists; a full pool will be reported as `table`.
    pub const fn new(table: Table) -> Self {
        Self {
            table,
            lists: KeyMap::new(),
            nodes: heapless::Vec::new(),
            free: None,
            len: 0,
        }
    }

    /// Appends `value` to the list of `key`. O(1).
    ///
    /// # Errors
    ///
    /// [`Full`] handing `value` back, with nothing changed: with the table given to
    /// [`new`](Self::new) when `ENTRIES` items are stored, or with
    /// [`Table::MatchKeys`] when `key` has no items yet and `KEYS` other keys do.
    pub fn push_back(&mut self, key: Key, value: V) -> Result<(), Full<V>> {
        if self.len >= ENTRIES {
            return Err(Full::new(self.table, value));
        }
        let known = self.lists.contains_key(&key);
        if !known && self.lists.len() >= KEYS {
            return Err(Full::new(Table::MatchKeys, value));
        }
        let Some(at) = self.alloc(value) else {
            return Err(Full::new(self.table, value));
        };
        if let Some(list) = self.lists.get_mut(&key) {
            if let Some(Node::Used { next, .. }) = self.nodes.get_mut(list.tail) {
                *next = Some(at);
            }
            list.tail = at;
            list.len += 1;
        } else {
            let list = List {
                head: at,
                tail: at,
                len: 1,
            };
            if self.lists.insert(key, list).is_err() {
                self.release(at);
                return Err(Full::new(Table::MatchKeys, value));
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the oldest item of `key`. O(1).
    pub fn pop_front(&mut self, key: Key) -> Option<V> {
        let list = self.lists.get_mut(&key)?;
        let head = list.head;
        let next = match self.nodes.get(head) {
            Some(Node::Used { next, .. }) => *next,
            _ => None,
        };
        match next {
            Some(next) => {
                list.head = next;
                list.len -= 1;
            }
            None => {
                self.lists.swap_remove(&key);
            }
        }
        let value = self.release(head);
        if value.is_some() {
            self.len -= 1;
        }
        value
    }

    /// The oldest item of `key`.
    pub fn front(&self, key: Key) -> Option<&V> {
        let list = self.lists.get(&key)?;
        match self.nodes.get(list.head) {
            Some(Node::Used { value, .. }) => Some(value),
            _ => None,
        }
    }

    /// Removes and returns the oldest item of `key` for which `pred` holds. O(length of
    /// the key's list).
    pub fn remove(&mut self, key: Key, mut pred: impl FnMut(&V) -> bool) -> Option<V> {
        let list = self.lists.get_mut(&key)?;
        let mut prev: Option<usize> = None;
        let mut cur = Some(list.head);
        while let Some(at) = cur {
            let Some(Node::Used { value, next }) = self.nodes.get(at) else {
                return None;
            };
            let (hit, next) = (pred(value), *next);
            if !hit {
                prev = Some(at);
                cur = next;
                continue;
            }
            match (prev, next) {
                (None, None) => {
                    self.lists.swap_remove(&key);
                }
                (None, Some(next)) => {
                    list.head = next;
                    list.len -= 1;
                }
                (Some(prev), _) => {
                    if let Some(Node::Used { next: link, .. }) = self.nodes.get_mut(prev) {
                        *link = next;
                    }
                    if list.tail == at {
                        list.tail = prev;
                    }
                    list.len -= 1;
                }
            }
            let value = self.release(at);
            if value.is_some() {
                self.len -= 1;
            }
            return value;
        }
        None
    }

    /// How many items `key` holds.
    pub fn len_of(&self, key: Key) -> usize {
        self.lists.get(&key).map_or(0, |l| l.len)
    }

    /// Whether `key` holds at least one item.
    pub fn contains_key(&self, key: Key) -> bool {
        self.lists.contains_key(&key)
    }

    /// The items of `key`, oldest first.
    pub fn iter_key(&self, key: Key) -> impl Iterator<Item = &V> + '_ {
        ListIter {
            nodes: &self.nodes,
            next: self.lists.get(&key).map(|l| l.head),
        }
    }

    /// Every item with its key: each key's items oldest first, the keys in no particular
    /// order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &V)> + '_ {
        self.lists.iter().flat_map(move |(key, list)| {
            let key = *key;
            ListIter {
                nodes: &self.nodes,
                next: Some(list.head),
            }
            .map(move |v| (key, v))
        })
    }

    /// The keys that hold items, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.lists.keys().copied()
    }

    /// How many items are stored, all keys together.
    #[inline]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether no item is stored.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many keys hold items.
    #[inline]
    pub fn key_count(&self) -> usize {
        self.lists.len()
    }

    /// How many items can be stored (`ENTRIES`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        ENTRIES
    }

    /// How many keys can hold items at once (`KEYS`).
    #[inline]
    pub const fn key_capacity(&self) -> usize {
        KEYS
    }

    /// The table reported when the pool is full.
    #[inline]
    pub const fn table(&self) -> Table {
        self.table
    }

    /// Takes a free node for `value`.
    fn alloc(&mut self, value: V) -> Option<usize> {
        if let Some(at) = self.free {
            let node = self.nodes.get_mut(at)?;
            let Node::Free { next } = *node else {
                return None;
            };
            *node = Node::Used { value, next: None };
            self.free = next;
            return Some(at);
        }
        self.nodes.push(Node::Used { value, next: None }).ok()?;
        self.nodes.len().checked_sub(1)
    }

    /// Returns the node at `at` to the free list, with its value.
    fn release(&mut self, at: usize) -> Option<V> {
        let node = self.nodes.get_mut(at)?;
        let Node::Used { value, .. } = *node else {
            return None;
        };
        *node = Node::Free { next: self.free };
        self.free = Some(at);
        Some(value)
    }
}

// ---------------------------------------------------------------------------------
// SyncSends
// ---------------------------------------------------------------------------------

/// The key of a synchronous send waiting for its acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SyncKey {
    /// The communicator.
    pub comm: CommId,
    /// The destination of the send (the rank the acknowledgement comes from).
    pub dest: Rank,
    /// The data-message id carried by the envelope and echoed by the acknowledgement.
    pub msg: MsgId,
}

/// Why [`SyncSends::insert`] refused a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SyncInsertError {
    /// The table holds `N` sends ([`Table::SyncSends`]); the send is handed back.
    /// Wait for acknowledgements to drain it, or size it larger.
    Full(Full<ReqId>),
    /// A send already waits under the same (communicator, destination, message id): a
    /// local bug (message ids are unique per destination until they wrap). Nothing was
    /// changed; `existing` still waits, `item` is handed back.
    Duplicate {
        /// The send that already waits under the key.
        existing: ReqId,
        /// The send that was refused.
        item: ReqId,
    },
}

impl SyncInsertError {
    /// The refused send, handed back.
    pub const fn item(self) -> ReqId {
        match self {
            Self::Full(full) => full.item,
            Self::Duplicate { item, .. } => item,
        }
    }
}

impl fmt::Display for SyncInsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(full) => full.fmt(f),
            Self::Duplicate { existing, item } => write!(
                f,
                "{item} refused: {existing} already waits for the same acknowledgement"
            ),
        }
    }
}

impl core::error::Error for SyncInsertError {}

/// Synchronous sends whose envelope went out, waiting for the receiver's ready
/// acknowledgement (the sender side of the reference's sync table, internals §3.7).
///
/// Keyed by [`SyncKey`] (communicator, destination, message id). The acknowledgement
/// names the message id, so it finds exactly its send even when several synchronous
/// sends with the same user tag wait for the same destination, and even when that
/// destination synchronously sends to us with the same tag (those envelopes wait in the
/// matcher, a different table). Up to `N` sends (any `N`); operations are O(n), in
/// insertion order.
#[derive(Clone, Debug)]
pub struct SyncSends<const N: usize> {
    entries: heapless::Vec<(SyncKey, ReqId), N>,
}

impl<const N: usize> Default for SyncSends<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> SyncSends<N> {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            entries: heapless::Vec::new(),
        }
    }

    /// Records that send `id` to `dest` with message id `msg` waits for its
    /// acknowledgement.
    ///
    /// # Errors
    ///
    /// [`SyncInsertError::Duplicate`] when the key is taken (the existing entry is
    /// kept), [`SyncInsertError::Full`] when `N` sends wait; nothing changes either way.
    pub fn insert(
        &mut self,
        comm: CommId,
        dest: Rank,
        msg: MsgId,
        id: ReqId,
    ) -> Result<(), SyncInsertError> {
        let key = SyncKey { comm, dest, msg };
        if let Some(existing) = self.get(comm, dest, msg) {
            return Err(SyncInsertError::Duplicate { existing, item: id });
        }
        self.entries
            .push((key, id))
            .map_err(|_| SyncInsertError::Full(Full::new(Table::SyncSends, id)))
    }

    /// Removes and returns the send waiting for the acknowledgement from `dest` for
    /// message `msg`; `None` if there is none (a peer's bogus or duplicate
    /// acknowledgement: the engine reports it).
    pub fn remove(&mut self, comm: CommId, dest: Rank, msg: MsgId) -> Option<ReqId> {
        let key = SyncKey { comm, dest, msg };
        let at = self.entries.iter().position(|(k, _)| *k == key)?;
        Some(self.entries.remove(at).1)
    }

    /// The send waiting under (`comm`, `dest`, `msg`).
    pub fn get(&self, comm: CommId, dest: Rank, msg: MsgId) -> Option<ReqId> {
        let key = SyncKey { comm, dest, msg };
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, id)| *id)
    }

    /// Whether a send waits under (`comm`, `dest`, `msg`).
    pub fn contains(&self, comm: CommId, dest: Rank, msg: MsgId) -> bool {
        self.get(comm, dest, msg).is_some()
    }

    /// The waiting sends, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (SyncKey, ReqId)> + '_ {
        self.entries.iter().copied()
    }

    /// How many sends wait.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no send waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many sends can wait at once (`N`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }
}

// ---------------------------------------------------------------------------------
// Detached
// ---------------------------------------------------------------------------------

/// The detached requests in flight (the reference's `detached_requests`, internals
/// §2.3), in insertion order.
///
/// The engine counts the detached *sends* among them against its in-flight cap (the
/// reference's `STARPU_MPI_NDETACHED_SEND`). A set: inserting an id that is already
/// there changes nothing. Up to `N` ids (any `N`); operations are O(n).
#[derive(Clone, Debug)]
pub struct Detached<const N: usize> {
    ids: heapless::Vec<ReqId, N>,
}

impl<const N: usize> Default for Detached<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Detached<N> {
    /// An empty set.
    pub const fn new() -> Self {
        Self {
            ids: heapless::Vec::new(),
        }
    }

    /// Adds `id` (no change if it is already there).
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Detached`]) when `N` other ids are in the set; `id` is handed
    /// back and the set is unchanged.
    pub fn insert(&mut self, id: ReqId) -> Result<(), Full<ReqId>> {
        if self.contains(id) {
            return Ok(());
        }
        self.ids
            .push(id)
            .map_err(|id| Full::new(Table::Detached, id))
    }

    /// Removes `id`; `false` if it was not there. Keeps the others in order.
    pub fn remove(&mut self, id: ReqId) -> bool {
        match self.ids.iter().position(|x| *x == id) {
            Some(at) => {
                self.ids.remove(at);
                true
            }
            None => false,
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: ReqId) -> bool {
        self.ids.contains(&id)
    }

    /// The ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.ids.iter().copied()
    }

    /// How many ids are in the set.
    #[inline]
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// How many ids the set can hold (`N`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }
}

#[cfg(test)]
mod tests;
