//! A cheap hasher for the runtime's own integer ids (data ids; node ids before the task
//! graph's nodes moved to a slab that their ids index, `runtime/task/slab.rs`) and for
//! the match keys of the admission queues (source, communicator, tag): `std`'s default
//! SipHash resists hash flooding, which ids counted from 0 do not need, and cost about
//! a third of an empty task's instructions (four lookups of the node table per task),
//! and about 3 % of the CPU time of 100 000 refused messages handled past the engine's
//! tables (issue 17).
//! It is the core's [`starling_core::lists::WordHasher`] (the multiply-rotate word hash
//! of rustc's `FxHasher`, with its final rotation), which the core's bounded tables use
//! too; its documentation says why it is sound here. The tests below check what the
//! adapter relies on: keys that differ only in their high bits (tags such as
//! `i << 32 | j`, common in StarPU programs) spread over a table's buckets.

use core::hash::BuildHasherDefault;

/// The hasher of [`IdMap`]: the core's, which its bounded tables use
/// ([`starling_core::lists::WordHasher`]).
pub(crate) use starling_core::lists::WordHasher as IdHasher;

/// A `HashMap` keyed by a runtime id.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use core::hash::Hasher;

    use super::*;

    #[test]
    fn consecutive_ids_hash_apart_and_a_map_finds_them() {
        let h = |v: u64| {
            let mut s = IdHasher::default();
            s.write_u64(v);
            s.finish()
        };
        assert_ne!(h(1), h(2));
        assert_ne!(h(1) >> 57, h(2) >> 57, "the control bytes differ too");
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m.get(&i) == Some(&(i * 2))));
    }

    #[test]
    fn keys_that_differ_in_their_high_bits_only_spread_over_the_low_bits() {
        let h = |v: u64| {
            let mut s = IdHasher::default();
            s.write_u64(v);
            s.finish()
        };
        // 4 096 keys `i << 32`: their buckets in a table of 4 096 (the low 12 bits); without
        // the final rotation they all share one (a random hash fills about 2 600).
        let buckets: std::collections::HashSet<u64> =
            (0..4096u64).map(|i| h(i << 32) & 4095).collect();
        assert!(buckets.len() > 1024, "{} distinct buckets", buckets.len());
    }
}
