//! Digests of the task flow, for the graph-agreement check.
//!
//! Every rank walks the same task flow (the *replication contract* of [`insert`]). When a
//! rank's flow differs — a branch on the rank, a datum registered with another tag, a
//! policy that answers differently — the ranks' plans stop pairing up and the job hangs
//! or computes garbage far from the cause. The adapter therefore folds each insert into a
//! 64-bit [`insert_digest`] and chains the inserts into a running digest ([`chain`]);
//! ranks compare running digests at synchronisation points, and on a mismatch compare the
//! per-insert digests to name the first insert where they diverged.
//!
//! The digest is **canonical**: every field is folded explicitly, as one 64-bit
//! little-endian word (no struct is hashed as memory, so padding and layout play no
//! part), byte strings with their length first. It depends on nothing but its inputs:
//! not on the rank, the platform or the build.
//!
//! The fold ([`Digest`]) is a multiply-rotate hash in the style of `FxHash`: each step
//! `state = (state.rotl(5) ^ word) * K` with an odd `K` is a bijection of the state for a
//! fixed word and of the word for a fixed state, so **two sequences of words of the same
//! length that differ in exactly one word always have different states**. That is the
//! common case of a divergence (one tag, one mode, one rank). Several differences may
//! collide, with the probability of a 64-bit hash. [`Digest::finish`] mixes the state
//! with the `fmix64` finaliser so that related inputs give unrelated digests.
//!
//! [`insert`]: crate::insert

use crate::insert::{Execute, Executor, Options};
use crate::types::{AccessMode, Owner, Tag};

/// The fold's multiplier (odd: multiplication by it is a bijection of `u64`).
const K: u64 = 0x517c_c1b7_2722_0a95;

/// The state a fold starts from.
const SEED: u64 = 0x5354_4152_4c49_4e47; // "STARLING"

/// A running 64-bit fold of words. See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Digest {
    state: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Self::new()
    }
}

impl Digest {
    /// A fold of nothing yet.
    pub const fn new() -> Self {
        Self { state: SEED }
    }

    /// Folds one word.
    #[inline]
    pub const fn u64(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(K);
    }

    /// Folds a signed word (two's complement).
    #[inline]
    pub const fn i64(&mut self, word: i64) {
        self.u64(word as u64);
    }

    /// Folds a flag as the word 0 or 1.
    #[inline]
    pub const fn bool(&mut self, flag: bool) {
        self.u64(flag as u64);
    }

    /// Folds a byte string: its length, then its bytes in 8-byte little-endian words,
    /// the last one padded with zeros (the length makes the padding unambiguous).
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.u64(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.u64(u64::from_le_bytes(w));
        }
    }

    /// The digest of what was folded: the state through the `fmix64` finaliser.
    #[must_use]
    pub const fn finish(&self) -> u64 {
        let mut h = self.state;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h
    }
}

/// One access of an insert as the digest records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DigestAccess {
    /// A datum every rank registers: its mode, user tag and owner are recorded.
    Datum {
        /// The access mode.
        mode: AccessMode,
        /// The datum's user tag.
        tag: Tag,
        /// The datum's owner.
        owner: Owner,
    },
    /// A temporary datum, known on some ranks only (the reference's `NULL` handle): only
    /// its mode is recorded, since the ranks that do not know it cannot name it.
    Temporary {
        /// The access mode.
        mode: AccessMode,
    },
}

/// The digest of one task insert: the codelet's `name`, its accesses in order, its
/// options and the executor the planner chose.
///
/// `executor` is `None` when it is not to be recorded: for a task whose executor depends
/// on temporary data ([`Execute::Auto`] with a [`DigestAccess::Temporary`] access), ranks
/// that do not know the datum cannot compute it (`plan.executor` is `None` there).
///
/// The fields are packed into words without overlap (so the packing is injective): per
/// access its tag, then `temporary << 63 | per_node << 62 | mode << 32 | owner rank`;
/// then the number of accesses; `kind << 62 | rank or index` for the requested
/// execution; `has_policy << 63 | policy << 40 | ssend << 32 | priority` for the options;
/// `kind << 62 | rank` for the executor.
#[must_use]
pub fn insert_digest(
    name: &[u8],
    accesses: impl IntoIterator<Item = DigestAccess>,
    options: &Options,
    executor: Option<Executor>,
) -> u64 {
    const LOW62: u64 = (1 << 62) - 1;
    let mut d = Digest::new();
    d.bytes(name);
    let mut n = 0u64;
    for a in accesses {
        n += 1;
        let (tag, word) = match a {
            DigestAccess::Datum { mode, tag, owner } => {
                let owner = match owner {
                    Owner::Rank(r) => u64::from(r.0),
                    Owner::PerNode => 1 << 62,
                };
                (tag.0, owner | u64::from(mode.bits()) << 32)
            }
            DigestAccess::Temporary { mode } => (0, 1 << 63 | u64::from(mode.bits()) << 32),
        };
        d.i64(tag);
        d.u64(word);
    }
    d.u64(n);
    d.u64(match options.execute {
        Execute::Auto => 0,
        Execute::OnNode(r) => 1 << 62 | u64::from(r.0),
        Execute::OnData(i) => 2 << 62 | (i as u64 & LOW62),
    });
    d.u64(
        options.policy.map_or(0, |p| 1 << 63 | u64::from(p.0) << 40)
            | u64::from(options.ssend) << 32
            | u64::from(options.priority.0 as u32),
    );
    d.u64(match executor {
        None => 0,
        Some(Executor::Rank(r)) => 1 << 62 | u64::from(r.0),
        Some(Executor::PerNode) => 2 << 62,
    });
    d.finish()
}

/// The running digest after insert number `index` (counted from 1) with digest
/// `insert`, given the running digest `running` before it. The running digest of an
/// empty flow is 0.
#[must_use]
pub const fn chain(running: u64, index: u64, insert: u64) -> u64 {
    let mut d = Digest::new();
    d.u64(running);
    d.u64(index);
    d.u64(insert);
    d.finish()
}

#[cfg(test)]
mod tests;
