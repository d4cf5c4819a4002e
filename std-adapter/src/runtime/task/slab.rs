//! The table of a runtime's live nodes: a slab whose node ids name their slot.
//!
//! A node id is its slot in the low 32 bits and the slot's generation in the high 32: a
//! lookup is two indices (chunk, then slot) and a comparison, with no hashing and no
//! probing, and the nodes sit side by side, in the order their slots were taken. A hash
//! table keyed by a counted id (what this replaces) scattered them by hash: with 100 000
//! requests outstanding, each lookup of a node cold in cache cost two misses (the control
//! bytes, then the bucket), at unrelated addresses (issue 17, "cost no more per
//! message").
//!
//! A freed slot is taken again before the table grows, the first freed first, with its
//! generation raised, so that the id of a node that completed names nothing any more
//! (a late [`Slab::get`] of it finds `None`, as the hash table did). A slot whose 2^32
//! generations are spent is retired, never wrapped: an id names one node for the
//! runtime's life (a `TaskHandle` reads its task's outcome by it). The table grows to the most nodes live at once, never
//! beyond. First freed, first taken: the submitting
//! thread and a worker completing tasks work on two ends of the free list, so that a new
//! node does not land in the slot a worker on another core freed a moment ago, whose
//! cache lines (the slot, the list's end) that core still holds modified — taking the
//! last freed first made an empty task 4–11 % slower than the hash table it replaces,
//! on the lock's critical path; first freed first, 5 % faster (`compare empty-tasks`).
//!
//! The slots are kept in chunks of [`CHUNK`], each allocated once and never moved: a
//! table that grows to tens of thousands of nodes (a flow submitted well ahead of its
//! execution) adds a chunk rather than copying every slot into an array twice as long,
//! under the runtime's lock (a ring of 20 000 loops: 60 000 nodes, 7.7 MB copied in
//! reallocations and a sixth of the submitting thread's time).

use std::collections::VecDeque;

use super::NodeId;

/// Aligned to a cache line: a node's slot (128 bytes for the task graph's nodes) takes
/// two whole lines, never parts of three, when the submitting thread writes it and a
/// worker on another core reads it.
#[repr(align(64))]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Slots per chunk: 128 KiB of the task graph's nodes.
const CHUNK: usize = 1024;

/// Live nodes by id.
pub(super) struct Slab<T> {
    /// The slots, [`CHUNK`] to a chunk; only the last chunk is not full.
    chunks: Vec<Vec<Slot<T>>>,
    /// Free slots, the first freed in front.
    free: VecDeque<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            free: VecDeque::new(),
        }
    }
}

fn split(id: NodeId) -> (usize, u32) {
    // Truncation is the encoding: the low half is the slot, the high half its generation.
    #[allow(clippy::cast_possible_truncation)]
    ((id & u64::from(u32::MAX)) as usize, (id >> 32) as u32)
}

fn join(slot: u32, generation: u32) -> NodeId {
    (u64::from(generation) << 32) | u64::from(slot)
}

impl<T> Slab<T> {
    /// The id the next [`Slab::insert`] gives, for a node that names itself in the
    /// bookkeeping done before it is inserted.
    pub(super) fn next_id(&self) -> NodeId {
        match self.free.front() {
            Some(&slot) => join(slot, self.slot(slot as usize).map_or(0, |s| s.generation)),
            None => join(self.slot_count(), 0),
        }
    }

    /// Slots taken so far, free or not: the full chunks and the last one's.
    fn slot_count(&self) -> u32 {
        let n = self
            .chunks
            .last()
            .map_or(0, |last| (self.chunks.len() - 1) * CHUNK + last.len());
        u32::try_from(n).expect("fewer than 2^32 nodes live at once")
    }

    /// Slot `i`, if it was ever taken.
    fn slot(&self, i: usize) -> Option<&Slot<T>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    /// Slot `i`, if it was ever taken, to change.
    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot<T>> {
        self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)
    }

    /// Inserts `value` under [`Slab::next_id`], which it returns.
    pub(super) fn insert(&mut self, value: T) -> NodeId {
        if let Some(slot) = self.free.pop_front() {
            if let Some(s) = self.slot_mut(slot as usize) {
                debug_assert!(s.value.is_none());
                s.value = Some(value);
                return join(slot, s.generation);
            }
        }
        let slot = self.slot_count();
        if (slot as usize).is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(Slot {
                generation: 0,
                value: Some(value),
            });
        }
        join(slot, 0)
    }

    /// The live node `id`.
    pub(super) fn get(&self, id: &NodeId) -> Option<&T> {
        let (slot, generation) = split(*id);
        self.slot(slot)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.value.as_ref())
    }

    /// The live node `id`, to change.
    pub(super) fn get_mut(&mut self, id: &NodeId) -> Option<&mut T> {
        let (slot, generation) = split(*id);
        self.slot_mut(slot)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.value.as_mut())
    }

    /// Removes node `id`; its id names nothing from now on.
    pub(super) fn remove(&mut self, id: &NodeId) -> Option<T> {
        let (slot, generation) = split(*id);
        let s = self.slot_mut(slot).filter(|s| s.generation == generation)?;
        let value = s.value.take()?;
        if s.generation == u32::MAX {
            // Its generations are spent: the slot is retired rather than wrapped, so that
            // no id ever names two nodes (a `TaskHandle` keeps its task's id for as long
            // as the application likes, and reads "done" and the failure by it). One
            // slot of 128 bytes lost per 2^32 nodes that used it.
            return Some(value);
        }
        s.generation += 1;
        // `slot` came from a u32.
        #[allow(clippy::cast_possible_truncation)]
        self.free.push_back(slot as u32);
        Some(value)
    }

    /// How many nodes are live.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .filter(|s| s.value.is_some())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn a_slot_whose_generations_are_spent_is_retired_not_wrapped() {
        let mut s = Slab::default();
        let first = s.insert("first");
        assert_eq!(s.remove(&first), Some("first"));
        // Slot 0, free, at its last generation.
        s.slot_mut(0).expect("slot 0").generation = u32::MAX;
        let last = s.insert("last");
        assert_eq!(last, u64::from(u32::MAX) << 32, "slot 0's last generation");
        assert_eq!(s.remove(&last), Some("last"));
        // The next node takes a new slot: slot 0 wrapped would give `first`'s id again.
        let next = s.insert("next");
        assert_ne!(next, first);
        assert_eq!(next, 1, "slot 1, generation 0");
        assert_eq!(s.get(&last), None);
        assert_eq!(s.get(&first), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_nodes_slot_is_two_whole_cache_lines() {
        // The submitting thread writes a node's slot and a worker on another core reads
        // it: each byte over 128 is a third line to move (`Node` keeps `dmda`'s
        // placement boxed for this).
        assert_eq!(size_of::<super::Slot<super::super::Node>>(), 128);
        assert_eq!(align_of::<super::Slot<super::super::Node>>(), 64);
    }

    #[test]
    fn an_id_names_its_node_until_it_is_removed_and_never_after() {
        let mut s = Slab::default();
        let a = s.next_id();
        assert_eq!(s.insert("a"), a);
        let b = s.insert("b");
        assert_ne!(a, b);
        assert_eq!(s.get(&a), Some(&"a"));
        assert_eq!(s.remove(&a), Some("a"));
        assert_eq!(s.get(&a), None);
        assert_eq!(s.remove(&a), None);
        // The freed slot is taken again, under a new id; the old one still names nothing.
        let c = s.next_id();
        assert_eq!(s.insert("c"), c);
        assert_ne!(c, a);
        assert_eq!(c & u64::from(u32::MAX), a & u64::from(u32::MAX));
        assert_eq!(s.get(&a), None);
        assert_eq!(s.get_mut(&c).map(|v| *v), Some("c"));
        assert_eq!(s.get(&b), Some(&"b"));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn the_table_grows_to_the_most_nodes_live_at_once() {
        let mut s = Slab::default();
        for round in 0..5 {
            let ids: Vec<_> = (0..100).map(|i| s.insert(round * 100 + i)).collect();
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(s.remove(id), Some(round * 100 + i));
            }
        }
        assert_eq!(s.slot_count(), 100);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn an_id_of_no_slot_finds_nothing() {
        let mut s: Slab<u8> = Slab::default();
        assert_eq!(s.get(&7), None);
        assert_eq!(s.get_mut(&(1 << 40)), None);
        assert_eq!(s.remove(&u64::MAX), None);
    }
}
