//! The byte budget of cached copies ([`Budget`]).

use crate::lists::KeyMap;

use super::{Cache, CacheUpdate};
use crate::error::{Full, Table};
use crate::types::{Access, DataId, Owner, Rank};

/// No slot.
const NIL: u32 = u32::MAX;

/// One counted copy: a node of its pair's recency list.
#[derive(Clone, Copy, Debug)]
struct Node {
    data: DataId,
    size: u64,
    /// Towards the least recently used.
    prev: u32,
    /// Towards the most recently used; the next free slot while free.
    next: u32,
}

/// The recency list and bytes of one (owner, reader) pair.
#[derive(Clone, Copy, Debug)]
struct Pair {
    /// Least recently used.
    head: u32,
    /// Most recently used.
    tail: u32,
    bytes: u64,
}

/// The byte budget of cached copies: least-recently-used eviction per (owner, reader)
/// pair, decided alike on both ranks of the pair with no message.
///
/// The [`Cache`] keeps a received copy for as long as its value is current, as the
/// reference does; a long flow that reads many data of a peer then holds them all. A
/// [`Budget`] bounds the bytes of the copies of each (owner, reader) pair: past the bound,
/// the least recently used copies of the pair are evicted — the reader drops its copy
/// and clears its received flag, the owner clears its sent flag for that reader — so that
/// the next read transfers the value again.
///
/// **Agreement.** Eviction is safe only if both ranks of a pair evict the same copies at
/// the same point of the flow: otherwise the owner thinks a copy is cached that the
/// reader dropped (the reader waits for a value never sent), or the reverse. Every input
/// of a pair's list is a step of the task flow that both ranks of the pair plan alike:
/// - a copy enters (or is refreshed) when the planner sets the owner's sent flag
///   ([`CacheUpdate::SentSet`], on the owner) and the reader's received flag
///   ([`CacheUpdate::ReceivedSet`], on the reader), with the datum's size, which both
///   ranks know;
/// - a copy is used again when a task executed by the reader reads it
///   ([`Budget::touch_reads`], on both ranks of the pair);
/// - a copy leaves when its value changes or its flags are flushed
///   ([`CacheUpdate::Invalidate`], [`Budget::forget`]).
///
/// Each pair has a list of its own and a bound of its own, so what happens to one pair
/// never moves another: the owner, which sees many readers, and each reader, which sees
/// many owners, keep the same list for the pair they share. The agreement is checked by
/// the tests of this module with the planner on several ranks.
///
/// Capacities: at most `N` copies over all pairs and `P` pairs (both powers of two,
/// `heapless` index maps). A rank whose copies are all counted by its [`Cache`] never
/// holds more copies than the cache's two sets, so `N` = twice the cache's capacity never
/// fills; a full table is an error ([`Table::Cache`]) that changes nothing.
#[derive(Clone, Debug)]
pub struct Budget<const N: usize, const P: usize> {
    limit: Option<u64>,
    nodes: heapless::Vec<Node, N>,
    free: u32,
    /// (owner, reader, datum) → node.
    index: KeyMap<(Rank, Rank, DataId), u32, N>,
    pairs: KeyMap<(Rank, Rank), Pair, P>,
}

impl<const N: usize, const P: usize> Default for Budget<N, P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const P: usize> Budget<N, P> {
    /// An empty budget with no bound: nothing is counted or evicted.
    pub const fn new() -> Self {
        Self {
            limit: None,
            nodes: heapless::Vec::new(),
            free: NIL,
            index: KeyMap::new(),
            pairs: KeyMap::new(),
        }
    }

    /// The bound in bytes per pair; `None`: unbounded.
    pub const fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Sets the bound (every rank alike, at the same point of the flow): copies made
    /// from then on are counted and evicted past it. `None` forgets every count.
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
        if limit.is_none() {
            self.clear();
        }
    }

    /// Forgets every count (after the cache's flags were all flushed).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.free = NIL;
        self.index.clear();
        self.pairs.clear();
    }

    /// How many copies are counted.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no copy is counted.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The bytes counted for the copies of `owner` held by `reader`.
    pub fn bytes(&self, owner: Rank, reader: Rank) -> u64 {
        self.pairs.get(&(owner, reader)).map_or(0, |p| p.bytes)
    }

    /// Whether the copy of `data` in the pair (`owner`, `reader`) is counted.
    pub fn holds(&self, owner: Rank, reader: Rank, data: DataId) -> bool {
        self.index.contains_key(&(owner, reader, data))
    }

    /// Marks the copies read by a task as used now, on the ranks of each pair they
    /// belong to: for each read access of a rank-owned datum known here, whose owner is
    /// not `executor`, when this rank `me` is the owner or the executor. Call it for
    /// every task the planner gave an executor, in the flow's order.
    pub fn touch_reads(&mut self, me: Rank, executor: Rank, accesses: &[Access]) {
        if self.limit.is_none() {
            return;
        }
        for a in accesses.iter().filter(|a| a.known && a.mode.reads()) {
            if let Owner::Rank(o) = a.owner {
                if o != executor && (me == o || me == executor) {
                    if let Some(&at) = self.index.get(&(o, executor, a.data)) {
                        self.move_to_tail((o, executor), at);
                    }
                }
            }
        }
    }

    /// Counts one of a plan's cache updates, just applied to `cache` on rank `me`, and
    /// evicts past the bound: a [`SentSet`](CacheUpdate::SentSet) counts the copy of
    /// the pair (`me`, its destination), a [`ReceivedSet`](CacheUpdate::ReceivedSet) the
    /// copy of the pair (`owner`, `me`), with `size` bytes (`None`: the copy is not
    /// counted, as for an insert that keeps its copies); an
    /// [`Invalidate`](CacheUpdate::Invalidate) forgets the datum. Each eviction clears
    /// the flag in `cache`; `drop_copy` is called for each received copy evicted here,
    /// which the adapter must drop. The copy just counted is never evicted (the task
    /// needs it).
    ///
    /// # Errors
    /// [`Full`] ([`Table::Cache`]) when the copy does not fit the budget's tables: it is
    /// not counted, nothing else changed.
    pub fn on_update<const C: usize>(
        &mut self,
        me: Rank,
        update: &CacheUpdate,
        owner: Option<Rank>,
        size: Option<u64>,
        cache: &mut Cache<C>,
        mut drop_copy: impl FnMut(DataId),
    ) -> Result<(), Full<DataId>> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let (pair, data) = match *update {
            CacheUpdate::SentSet { data, dest } => ((me, dest), data),
            CacheUpdate::ReceivedSet { data } => match owner {
                Some(o) => ((o, me), data),
                None => return Ok(()),
            },
            CacheUpdate::Invalidate { data } => {
                self.forget(data);
                return Ok(());
            }
            CacheUpdate::DropCopy { .. } => return Ok(()),
        };
        let Some(size) = size else {
            return Ok(());
        };
        self.count(pair, data, size)?;
        while self.bytes(pair.0, pair.1) > limit {
            let Some(victim) = self.evict_lru(pair, data) else {
                break;
            };
            if me == pair.0 {
                cache.clear_sent_to(victim, pair.1);
            } else if cache.clear_received(victim) {
                drop_copy(victim);
            }
        }
        Ok(())
    }

    /// Forgets every count of `data` (its value changed, or its flags were flushed or
    /// its owner changed): O(pairs with copies).
    pub fn forget(&mut self, data: DataId) {
        if self.index.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.pairs.len() {
            let Some((&pair, _)) = self.pairs.get_index(i) else {
                break;
            };
            if let Some(at) = self.index.remove(&(pair.0, pair.1, data)) {
                self.unlink(pair, at);
                self.release(at);
                // The pair may have gone with its last copy: look at index `i` again.
                if !self.pairs.contains_key(&pair) {
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Counts (or refreshes, as the most recently used) the copy of `data` in `pair`.
    fn count(&mut self, pair: (Rank, Rank), data: DataId, size: u64) -> Result<(), Full<DataId>> {
        let full = || Full::new(Table::Cache, data);
        if let Some(&at) = self.index.get(&(pair.0, pair.1, data)) {
            let old = self.nodes[at as usize].size;
            self.nodes[at as usize].size = size;
            if let Some(p) = self.pairs.get_mut(&pair) {
                p.bytes = p.bytes - old + size;
            }
            self.move_to_tail(pair, at);
            return Ok(());
        }
        if !self.pairs.contains_key(&pair) {
            self.pairs
                .insert(
                    pair,
                    Pair {
                        head: NIL,
                        tail: NIL,
                        bytes: 0,
                    },
                )
                .map_err(|_| full())?;
        }
        let node = Node {
            data,
            size,
            prev: NIL,
            next: NIL,
        };
        let at = if self.free != NIL {
            let at = self.free;
            self.free = self.nodes[at as usize].next;
            self.nodes[at as usize] = node;
            at
        } else {
            let at = self.nodes.len() as u32;
            if self.nodes.push(node).is_err() {
                self.drop_pair_if_empty(pair);
                return Err(full());
            }
            at
        };
        if self.index.insert((pair.0, pair.1, data), at).is_err() {
            self.release(at);
            self.drop_pair_if_empty(pair);
            return Err(full());
        }
        self.link_tail(pair, at);
        Ok(())
    }

    /// Evicts the least recently used copy of `pair` unless it is `keep`; returns it.
    fn evict_lru(&mut self, pair: (Rank, Rank), keep: DataId) -> Option<DataId> {
        let head = self.pairs.get(&pair)?.head;
        if head == NIL {
            return None;
        }
        let victim = self.nodes[head as usize].data;
        if victim == keep {
            return None;
        }
        self.index.remove(&(pair.0, pair.1, victim));
        self.unlink(pair, head);
        self.release(head);
        Some(victim)
    }

    /// Moves node `at` of `pair` to the most recently used end.
    fn move_to_tail(&mut self, pair: (Rank, Rank), at: u32) {
        if self.pairs.get(&pair).is_some_and(|p| p.tail == at) {
            return;
        }
        self.unlink(pair, at);
        // (unlink drops an emptied pair: `at` was not its only node, it is not the tail)
        self.link_tail(pair, at);
    }

    /// Appends node `at` at the most recently used end of `pair` (which exists).
    fn link_tail(&mut self, pair: (Rank, Rank), at: u32) {
        let Some(p) = self.pairs.get_mut(&pair) else {
            return;
        };
        let size = self.nodes[at as usize].size;
        self.nodes[at as usize].prev = p.tail;
        self.nodes[at as usize].next = NIL;
        if p.tail != NIL {
            self.nodes[p.tail as usize].next = at;
        } else {
            p.head = at;
        }
        p.tail = at;
        p.bytes += size;
    }

    /// Takes node `at` out of the list of `pair`; a pair left empty is dropped.
    fn unlink(&mut self, pair: (Rank, Rank), at: u32) {
        let Node {
            prev, next, size, ..
        } = self.nodes[at as usize];
        let Some(p) = self.pairs.get_mut(&pair) else {
            return;
        };
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            p.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            p.tail = prev;
        }
        p.bytes -= size;
        self.drop_pair_if_empty(pair);
    }

    fn drop_pair_if_empty(&mut self, pair: (Rank, Rank)) {
        if self.pairs.get(&pair).is_some_and(|p| p.head == NIL) {
            self.pairs.remove(&pair);
        }
    }

    /// Puts slot `at` on the free list.
    fn release(&mut self, at: u32) {
        self.nodes[at as usize].next = self.free;
        self.free = at;
    }
}

#[cfg(test)]
mod tests;
