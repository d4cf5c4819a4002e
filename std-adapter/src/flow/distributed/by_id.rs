//! [`ById`]: a map keyed by [`DataId`], stored as a vector indexed by the id.
//!
//! A rank numbers its handles densely from 0 ([`crate::Context::register`]), so a vector
//! holds one slot per handle and finds a datum's slot without hashing; handles
//! registered one after the other sit next to each other in memory. The insert-task
//! utility looks up every access of every insert here: with a `HashMap` of 65 536 grid
//! cells, that lookup was the largest single cost of an insert (random cache misses), see
//! `docs/performance.md`.

use core::ops::Index;

use starling_core::DataId;

/// A map from [`DataId`] to `V`, with the `HashMap` methods the utility uses.
pub(crate) struct ById<V> {
    slots: Vec<Option<V>>,
}

impl<V> ById<V> {
    pub(crate) const fn new() -> Self {
        Self { slots: Vec::new() }
    }

    pub(crate) fn get(&self, id: &DataId) -> Option<&V> {
        self.slots.get(id.0 as usize).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, id: &DataId) -> Option<&mut V> {
        self.slots.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// Sets the value of `id`; returns the one it replaces.
    pub(crate) fn insert(&mut self, id: DataId, value: V) -> Option<V> {
        let i = id.0 as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].replace(value)
    }

    pub(crate) fn remove(&mut self, id: &DataId) -> Option<V> {
        self.slots.get_mut(id.0 as usize).and_then(Option::take)
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
}
