//! [`ById`]: a map keyed by [`DataId`], stored as a vector indexed by the id.
//!
//! A rank numbers its handles densely from 0 ([`crate::Context::register`]), so a vector
//! holds one slot per handle and finds a datum's slot without hashing; handles
//! registered one after the other sit next to each other in memory, and a flow that
//! walks them in order walks the vector in order (the hardware prefetches it). Two
//! tables are kept so:
//! - the insert-task utility's, looked up at every access of every insert: with a
//!   `HashMap` of 65 536 grid cells that lookup was the largest single cost of an insert
//!   (random cache misses), see `docs/performance.md`;
//! - the task graph's per-handle dependencies, looked up when a node is submitted and
//!   again when it completes: with 100 000 messages outstanding over MPI, the second
//!   lookup of a hashed table found each entry cold (issue 17).
//!
//! The runtime's temporary handles (reduction buffers, [`crate::runtime::data::temporary_id`])
//! take ids from `0x8000_0000` up: those go to a hash map, which drops them again.

use core::ops::Index;

use starling_core::DataId;

use crate::id_hash::IdMap;
use crate::runtime::data::is_temporary;

/// A map from [`DataId`] to `V`, with the `HashMap` methods its users need.
pub(crate) struct ById<V> {
    /// Slot `i` holds id `i`, for the ids a context hands out (not temporary ones).
    slots: Vec<Option<V>>,
    /// The ids of temporary handles.
    sparse: IdMap<DataId, V>,
}

impl<V> Default for ById<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> ById<V> {
    pub(crate) fn new() -> Self {
        Self {
            slots: Vec::new(),
            sparse: IdMap::default(),
        }
    }

    /// Whether `id` has a slot in the vector.
    const fn dense(id: DataId) -> bool {
        !is_temporary(id)
    }

    pub(crate) fn get(&self, id: &DataId) -> Option<&V> {
        if Self::dense(*id) {
            self.slots.get(id.0 as usize).and_then(Option::as_ref)
        } else {
            self.sparse.get(id)
        }
    }

    pub(crate) fn get_mut(&mut self, id: &DataId) -> Option<&mut V> {
        if Self::dense(*id) {
            self.slots.get_mut(id.0 as usize).and_then(Option::as_mut)
        } else {
            self.sparse.get_mut(id)
        }
    }

    /// The value of `id`, made by `make` when it has none.
    pub(crate) fn get_or_insert_with(&mut self, id: DataId, make: impl FnOnce() -> V) -> &mut V {
        if !Self::dense(id) {
            return self.sparse.entry(id).or_insert_with(make);
        }
        self.slot(id).get_or_insert_with(make)
    }

    /// The vector's slot of dense id `id`, grown to it.
    fn slot(&mut self, id: DataId) -> &mut Option<V> {
        let i = id.0 as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        &mut self.slots[i]
    }

    /// Sets the value of `id`; returns the one it replaces.
    pub(crate) fn insert(&mut self, id: DataId, value: V) -> Option<V> {
        if !Self::dense(id) {
            return self.sparse.insert(id, value);
        }
        self.slot(id).replace(value)
    }

    pub(crate) fn remove(&mut self, id: &DataId) -> Option<V> {
        if Self::dense(*id) {
            self.slots.get_mut(id.0 as usize).and_then(Option::take)
        } else {
            self.sparse.remove(id)
        }
    }

    /// How many temporary ids have a value (what a temporary handle left behind).
    #[cfg(test)]
    pub(crate) fn temporaries(&self) -> usize {
        self.sparse.len()
    }
}

impl<V: Default> ById<V> {
    /// The value of `id`, the default when it has none (`HashMap::entry(id).or_default()`).
    pub(crate) fn or_default(&mut self, id: DataId) -> &mut V {
        self.get_or_insert_with(id, V::default)
    }
}

impl<V> Index<&DataId> for ById<V> {
    type Output = V;

    /// # Panics
    /// When `id` has no value (as `HashMap`'s index).
    fn index(&self, id: &DataId) -> &V {
        self.get(id)
            .unwrap_or_else(|| panic!("{id} is not in the map"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::data::TEMPORARY_BASE;

    #[test]
    fn a_map_by_id_behaves_as_a_hash_map() {
        let mut m = ById::new();
        assert_eq!(m.get(&DataId(3)), None);
        assert_eq!(m.insert(DataId(3), "c"), None);
        assert_eq!(m.insert(DataId(0), "a"), None);
        assert_eq!(m.insert(DataId(3), "C"), Some("c"));
        assert_eq!(m[&DataId(3)], "C");
        assert_eq!(m.get(&DataId(1)), None);
        assert_eq!(m.get(&DataId(99)), None);
        if let Some(v) = m.get_mut(&DataId(0)) {
            *v = "A";
        }
        assert_eq!(m.remove(&DataId(0)), Some("A"));
        assert_eq!(m.remove(&DataId(0)), None);
        assert_eq!(m.remove(&DataId(1000)), None);
        assert_eq!(m.get(&DataId(0)), None);
    }

    #[test]
    fn a_temporary_id_is_kept_apart_and_dropped_on_removal() {
        let mut m: ById<u32> = ById::new();
        let t = DataId(TEMPORARY_BASE + 7);
        *m.or_default(t) += 2;
        *m.or_default(DataId(2)) += 1;
        assert_eq!(m.get(&t), Some(&2));
        assert_eq!(m.get(&DataId(TEMPORARY_BASE)), None);
        assert_eq!(m.temporaries(), 1);
        // The vector holds the dense ids only: a temporary id did not grow it.
        assert_eq!(m.slots.len(), 3);
        assert_eq!(m.remove(&t), Some(2));
        assert_eq!(m.temporaries(), 0);
        assert_eq!(m.get(&DataId(2)), Some(&1));
    }
}
