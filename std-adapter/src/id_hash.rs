//! A cheap hasher for the runtime's own integer ids (node ids, data ids), which no peer
//! chooses: `std`'s default SipHash resists hash flooding, which ids counted from 0 do
//! not need, and costs about a third of an empty task's instructions (four lookups of
//! the node table per task). This is the multiply-rotate hash of rustc's `FxHasher`.

use core::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by a runtime id.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// The hasher of [`IdMap`].
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
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
        self.0
    }
}

#[cfg(test)]
mod tests {
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
}
