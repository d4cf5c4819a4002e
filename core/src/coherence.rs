//! Replica coherence: which memory nodes hold a valid copy of one datum, and which copies
//! must move or be dropped for an access.
//!
//! A datum may have a *replica* on each memory node of a rank: node 0 is main memory
//! ([`MemNode::MAIN_RAM`]), the others are devices (one per GPU). [`Replicas`] is the
//! state of one datum's replicas, the reference's `per_node[]` array of
//! `struct _starpu_data_replicate` with its MSI protocol. Each replica is in one of three
//! states ([`ReplicaState`], the reference's `enum _starpu_cache_state`):
//!
//! | state | reference | meaning |
//! | --- | --- | --- |
//! | [`Owner`](ReplicaState::Owner) | `STARPU_OWNER` | the only valid copy |
//! | [`Shared`](ReplicaState::Shared) | `STARPU_SHARED` | a valid copy; other nodes hold one too |
//! | [`Invalid`](ReplicaState::Invalid) | `STARPU_INVALID` | no valid copy here (stale, or never fetched) |
//!
//! The states are derived from one set, the *valid set* ([`Replicas::valid`]); a node
//! may also have a copy *in flight* towards it ([`Replicas::is_fetching`]) and hold
//! *acquisitions* ([`Replicas::held`]).
//!
//! # The state machine
//!
//! | input | when | state change | actions out |
//! | --- | --- | --- | --- |
//! | [`acquire`](Replicas::acquire)`(n, R)` | `n` valid | `held[n] += 1` | none: ready |
//! | `acquire(n, R)` | a copy into `n` is in flight | `held[n] += 1` | [`Acquire::wait`]: ready after that copy's `handle_transfer_done` |
//! | `acquire(n, R)` | `n` invalid, nothing in flight | `held[n] += 1`; `n` fetching from `s` | [`Fetch`] `{ from: s, to: n }`, `s` = [`Replicas::source_for`]`(n)` |
//! | `acquire(n, W)` | nothing held anywhere | `held[n] += 1`; valid = {`n`} | [`Acquire::invalidate`] = the other valid nodes |
//! | `acquire(n, RW)` | nothing held, `n` valid | as `W` | as `W` |
//! | `acquire(n, RW)` | nothing held, `n` invalid | `held[n] += 1`; `n` fetching from `s`; `n` becomes the owner when the copy lands | [`Fetch`] `{ from: s, to: n }` |
//! | `acquire(n, SCRATCH)` | no write held | `held[n] += 1` | none: a scratch buffer has no value to fetch |
//! | [`handle_transfer_done`](Replicas::handle_transfer_done)`(s → n)` | that copy was in flight | `n` valid (and, after an `RW` fetch, valid = {`n`}) | the nodes to invalidate (after an `RW` fetch) |
//! | [`handle_transfer_failed`](Replicas::handle_transfer_failed)`(s → n)` | that copy was in flight | nothing in flight towards `n`; `n` stays invalid | none: release the acquisition, or acquire again |
//! | [`release`](Replicas::release)`(n, mode)` | an acquisition of `mode` is held on `n`, its copy landed | `held[n] -= 1` | none |
//! | [`evict`](Replicas::evict)`(n)` | nothing held on `n`, no copy from or to `n` in flight, another valid copy exists | `n` invalid | none (the adapter frees the buffer) |
//! | [`before_send`](Replicas::before_send) | a valid copy exists | none (a query) | [`BeforeSend::MainRam`] or [`BeforeSend::StageFrom`]`(s)` |
//! | [`after_receive`](Replicas::after_receive) | nothing held | valid = {main memory} | the nodes to invalidate |
//! | [`invalidate_all`](Replicas::invalidate_all) | nothing held | valid = {} | the nodes to invalidate |
//!
//! Every other combination is refused with a [`CoherenceError`] and changes nothing.
//!
//! # Rules
//!
//! - **Read: fetch a valid copy.** A read (R, RW, REDUX) on a node without a valid copy
//!   fetches one from a valid node (the reference's `_starpu_fetch_data_on_node`), chosen
//!   by [`Replicas::source_for`]: main memory when it is valid, else the lowest-numbered
//!   valid node (the reference's `_starpu_select_src_node` ranks sources by the bus's
//!   estimated transfer time; a cost model can replace this rule later). A node that is
//!   already valid fetches nothing, and a node with a copy already in flight towards it
//!   waits for that copy instead of starting a second one.
//! - **Write: invalidate the others.** A write (W, RW, REDUX) leaves the writer's node
//!   the only valid one (`STARPU_OWNER`) and every other valid node `STARPU_INVALID`
//!   (the reference's `_starpu_update_data_state`). A pure write (W) needs no fetch; a
//!   read-write fetches first and invalidates once the copy landed, so the source is
//!   never dropped before it was read. A reduction contribution (REDUX) is treated as a
//!   read-write: the runtime accumulates into the current value.
//! - **Scratch** (SCRATCH) is a per-node buffer with no value: no fetch, no invalidation,
//!   no change to the valid set.
//! - **Exclusive writes.** A write acquisition is refused while any acquisition is held
//!   on any node, and every acquisition is refused while a write is held
//!   ([`CoherenceError::Busy`]). The runtime's implicit dependencies already order
//!   conflicting accesses (the reference's `_starpu_attempt_to_submit_data_request`);
//!   the state machine checks it instead of trusting it. Reads on several nodes may be
//!   held at once.
//! - **Release** (the reference's `_starpu_release_data_on_node`) only drops the
//!   acquisition: the valid set changed at acquisition (or when the fetched copy landed).
//!   Releasing an acquisition whose copy is still in flight is refused.
//! - **Eviction never loses the value.** [`Replicas::evict`] refuses to drop the last
//!   valid copy ([`CoherenceError::LastCopy`]): copy it to main memory first
//!   (`acquire(MAIN_RAM, R)`, then `release`), as the reference writes an owner copy back
//!   before freeing its memory chunk. A node that is held, fetching, or the source of a
//!   copy in flight cannot be evicted either.
//! - **At least one valid copy**, always, except after [`Replicas::invalidate_all`] (the
//!   reference's `starpu_data_invalidate`: the value is no longer needed) and until the
//!   next write; a read then fails with [`CoherenceError::NoValidCopy`].
//! - **MPI.** A send reads the datum in main memory: [`Replicas::before_send`] says
//!   whether main memory is valid or which node to stage from (the same node an
//!   `acquire(MAIN_RAM, R)` would fetch from), or which node a CUDA-aware MPI can send
//!   from directly. A receive writes main memory: [`Replicas::after_receive`] makes it
//!   the only valid copy.
//!
//! # Capacities
//!
//! `NODES` memory nodes, main memory included: between 1 and 64 (checked at compile
//! time by [`Replicas::new`]); every node set is one `u64`. The state of a datum is a
//! few words per node, with no allocation.

use core::fmt;

use crate::types::AccessMode;

/// A memory node of one rank: [`MemNode::MAIN_RAM`] (node 0) or a device.
///
/// The reference's memory node numbers (`STARPU_MAIN_RAM` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MemNode(pub u8);

impl MemNode {
    /// Main memory, where data are registered and whence MPI sends them (the reference's
    /// `STARPU_MAIN_RAM`).
    pub const MAIN_RAM: Self = Self(0);

    /// The node as an index into per-node arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Whether this is main memory.
    #[inline]
    pub const fn is_main_ram(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for MemNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_main_ram() {
            f.write_str("memory node 0 (main memory)")
        } else {
            write!(f, "memory node {}", self.0)
        }
    }
}

/// The bit of `node` in a [`NodeSet`] (none for a node above 63).
const fn bit(node: MemNode) -> u64 {
    match 1u64.checked_shl(node.0 as u32) {
        Some(b) => b,
        None => 0,
    }
}

/// A set of memory nodes (node `i` is bit `i`; nodes above 63 are never members).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub struct NodeSet(pub u64);

impl NodeSet {
    /// No node.
    pub const EMPTY: Self = Self(0);

    /// The set holding `node` only (empty for a node above 63).
    #[inline]
    pub const fn single(node: MemNode) -> Self {
        Self(bit(node))
    }

    /// Whether `node` is in the set.
    #[inline]
    pub const fn contains(self, node: MemNode) -> bool {
        self.0 & bit(node) != 0
    }

    /// Whether the set is empty.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many nodes the set holds.
    #[inline]
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The lowest-numbered node of the set.
    #[inline]
    pub const fn first(self) -> Option<MemNode> {
        if self.0 == 0 {
            None
        } else {
            Some(MemNode(self.0.trailing_zeros() as u8))
        }
    }

    /// The set with `node` added.
    #[inline]
    pub const fn with(self, node: MemNode) -> Self {
        Self(self.0 | bit(node))
    }

    /// The set with `node` removed.
    #[inline]
    pub const fn without(self, node: MemNode) -> Self {
        Self(self.0 & !bit(node))
    }

    /// The nodes of the set, lowest first.
    pub fn iter(self) -> impl Iterator<Item = MemNode> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let node = bits.trailing_zeros();
            bits &= bits - 1;
            Some(MemNode(node as u8))
        })
    }
}

/// The MSI state of one replica (the reference's `enum _starpu_cache_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReplicaState {
    /// The only valid copy (`STARPU_OWNER`).
    Owner,
    /// A valid copy that other nodes hold too (`STARPU_SHARED`).
    Shared,
    /// Not a valid copy (`STARPU_INVALID`).
    Invalid,
}

/// A copy of the datum's value from one memory node to another, for the adapter to
/// perform; report its end with [`Replicas::handle_transfer_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Fetch {
    /// A node holding a valid copy; it stays valid (and may not be evicted) until the
    /// copy is done.
    pub from: MemNode,
    /// The node that receives the copy.
    pub to: MemNode,
}

impl fmt::Display for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copy from {} to {}", self.from, self.to)
    }
}

/// What an [`acquire`](Replicas::acquire) asks of the adapter before the task may use the
/// node's replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub struct Acquire {
    /// Start this copy into the acquired node; the replica is ready once
    /// [`Replicas::handle_transfer_done`] was called for it.
    pub fetch: Option<Fetch>,
    /// A copy into the acquired node (started by an earlier acquisition) is in flight:
    /// the replica is ready once that copy's `handle_transfer_done` was called.
    pub wait: bool,
    /// Replicas that the write made stale: the adapter may free them. Already removed
    /// from the valid set.
    pub invalidate: NodeSet,
}

impl Acquire {
    /// Whether the replica is ready now (nothing to fetch, nothing to wait for).
    #[inline]
    pub const fn is_ready(&self) -> bool {
        self.fetch.is_none() && !self.wait
    }
}

/// Where an MPI send of the datum reads it from ([`Replicas::before_send`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BeforeSend {
    /// Main memory holds a valid copy: send from it.
    MainRam,
    /// Main memory is invalid: stage the value from this (device) node into main memory
    /// first (`acquire(MAIN_RAM, R)` fetches from this very node), or hand this node's
    /// buffer to a CUDA-aware MPI.
    StageFrom(MemNode),
}

/// A refused coherence input; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CoherenceError {
    /// The node is not below the `NODES` of the [`Replicas`]: a caller's bug (a device
    /// number from another configuration).
    NodeOutOfRange(MemNode),
    /// A read (or [`Replicas::before_send`]) found no valid copy anywhere: the value was
    /// dropped with [`Replicas::invalidate_all`] and not written since. Write the datum
    /// before reading it.
    NoValidCopy,
    /// [`Replicas::evict`] of the only valid copy, which would lose the value. Copy it to
    /// another node first (`acquire(MAIN_RAM, R)` then `release`).
    LastCopy(MemNode),
    /// The input conflicts with what is in progress on this node: an acquisition held on
    /// it (a write while anything is held, anything while a write is held, an eviction,
    /// [`Replicas::after_receive`] or [`Replicas::invalidate_all`] while it is held), a
    /// copy in flight from or to it (an eviction; a release before the copy landed), or
    /// its count of acquisitions at `u32::MAX`. Retry once the conflicting work is done.
    Busy(MemNode),
    /// [`Replicas::release`] with no matching acquisition held on the node (or a write
    /// release where the node holds no write).
    NotAcquired(MemNode),
    /// [`Replicas::handle_transfer_done`] for a copy that is not in flight.
    UnexpectedTransfer(Fetch),
}

impl fmt::Display for CoherenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NodeOutOfRange(n) => write!(f, "{n} does not exist"),
            Self::NoValidCopy => f.write_str("no memory node holds a valid copy of the datum"),
            Self::LastCopy(n) => write!(f, "{n} holds the only valid copy; it cannot be evicted"),
            Self::Busy(n) => write!(f, "{n} is busy (an acquisition or a copy is in progress)"),
            Self::NotAcquired(n) => write!(f, "{n} holds no such acquisition to release"),
            Self::UnexpectedTransfer(t) => write!(f, "no {t} is in flight"),
        }
    }
}

impl core::error::Error for CoherenceError {}

/// The replicas of one datum on `NODES` memory nodes (node 0 is main memory). See the
/// [module docs](self) for the state machine and its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Replicas<const NODES: usize> {
    /// The nodes holding a valid copy.
    valid: NodeSet,
    /// Nodes with a copy in flight towards them.
    fetching: NodeSet,
    /// For each fetching node, the node it copies from.
    fetch_from: [MemNode; NODES],
    /// Acquisitions held per node.
    held: [u32; NODES],
    /// Copies in flight reading each node.
    sourcing: [u32; NODES],
    /// The node holding the write acquisition, if one is held.
    writer: Option<MemNode>,
}

impl<const NODES: usize> Default for Replicas<NODES> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const NODES: usize> Replicas<NODES> {
    const CHECK: () = assert!(
        NODES >= 1 && NODES <= 64,
        "Replicas needs between 1 and 64 memory nodes"
    );

    /// A datum registered in main memory: main memory holds the only valid copy.
    pub const fn new() -> Self {
        Self::on_node(MemNode::MAIN_RAM)
    }

    /// A datum registered on `home`: `home` holds the only valid copy.
    ///
    /// # Panics
    ///
    /// When `home` is not below `NODES` (a caller's bug at registration).
    pub const fn on_node(home: MemNode) -> Self {
        let () = Self::CHECK;
        assert!(home.index() < NODES, "home node out of range");
        Self {
            valid: NodeSet::single(home),
            fetching: NodeSet::EMPTY,
            fetch_from: [MemNode::MAIN_RAM; NODES],
            held: [0; NODES],
            sourcing: [0; NODES],
            writer: None,
        }
    }

    /// The nodes holding a valid copy.
    #[inline]
    pub const fn valid(&self) -> NodeSet {
        self.valid
    }

    /// The node holding the only valid copy (`STARPU_OWNER`), if exactly one does.
    pub const fn owner(&self) -> Option<MemNode> {
        if self.valid.len() == 1 {
            self.valid.first()
        } else {
            None
        }
    }

    /// The MSI state of `node`'s replica.
    ///
    /// # Errors
    ///
    /// [`CoherenceError::NodeOutOfRange`].
    pub const fn state(&self, node: MemNode) -> Result<ReplicaState, CoherenceError> {
        if node.index() >= NODES {
            return Err(CoherenceError::NodeOutOfRange(node));
        }
        Ok(if !self.valid.contains(node) {
            ReplicaState::Invalid
        } else if self.valid.len() == 1 {
            ReplicaState::Owner
        } else {
            ReplicaState::Shared
        })
    }

    /// Acquisitions held on `node` (0 for a node out of range).
    pub const fn held(&self, node: MemNode) -> u32 {
        if node.index() < NODES {
            self.held[node.index()]
        } else {
            0
        }
    }

    /// Whether a copy towards `node` is in flight.
    #[inline]
    pub const fn is_fetching(&self, node: MemNode) -> bool {
        self.fetching.contains(node)
    }

    /// The node holding the write acquisition, if one is held.
    #[inline]
    pub const fn writer(&self) -> Option<MemNode> {
        self.writer
    }

    /// The node a read on `dest` would fetch from: main memory when it is valid, else the
    /// lowest-numbered valid node (the reference's `_starpu_select_src_node`). `None`
    /// when no node is valid.
    pub const fn source_for(&self, dest: MemNode) -> Option<MemNode> {
        let others = self.valid.without(dest);
        if others.contains(MemNode::MAIN_RAM) {
            Some(MemNode::MAIN_RAM)
        } else {
            others.first()
        }
    }

    const fn check(node: MemNode) -> Result<usize, CoherenceError> {
        if node.index() < NODES {
            Ok(node.index())
        } else {
            Err(CoherenceError::NodeOutOfRange(node))
        }
    }

    /// Any node holding an acquisition, if one does.
    fn any_held(&self) -> Option<MemNode> {
        self.held
            .iter()
            .position(|&h| h > 0)
            .map(|i| MemNode(i as u8))
    }

    /// Acquires `node`'s replica for an access in `mode` (the reference's
    /// `_starpu_fetch_data_on_node`); see the [module docs](self) for the table. Pair it
    /// with a [`release`](Self::release) of the same node and mode once the access is done.
    ///
    /// # Errors
    ///
    /// [`NodeOutOfRange`](CoherenceError::NodeOutOfRange); [`Busy`](CoherenceError::Busy)
    /// (a write while anything is held, anything while a write is held);
    /// [`NoValidCopy`](CoherenceError::NoValidCopy) for a read after
    /// [`invalidate_all`](Self::invalidate_all). Nothing changed.
    pub fn acquire(&mut self, node: MemNode, mode: AccessMode) -> Result<Acquire, CoherenceError> {
        let i = Self::check(node)?;
        if let Some(w) = self.writer {
            return Err(CoherenceError::Busy(w));
        }
        let reads = mode.reads() || mode.contains(AccessMode::REDUX);
        let writes = mode.writes();
        if writes {
            if let Some(h) = self.any_held() {
                return Err(CoherenceError::Busy(h));
            }
        }
        let Some(held) = self.held[i].checked_add(1) else {
            return Err(CoherenceError::Busy(node));
        };
        let mut out = Acquire::default();
        if reads && !self.valid.contains(node) {
            if self.fetching.contains(node) {
                // Only reads can be in flight here: a write excludes every other holder.
                out.wait = true;
            } else {
                let Some(from) = self.source_for(node) else {
                    return Err(CoherenceError::NoValidCopy);
                };
                self.fetching = self.fetching.with(node);
                self.fetch_from[i] = from;
                self.sourcing[from.index()] += 1;
                out.fetch = Some(Fetch { from, to: node });
            }
        }
        if writes && out.fetch.is_none() {
            out.invalidate = self.valid.without(node);
            self.valid = NodeSet::single(node);
        }
        if writes {
            self.writer = Some(node);
        }
        self.held[i] = held;
        Ok(out)
    }

    /// The copy `fetch` (from an [`Acquire::fetch`]) is done: its destination is valid.
    /// Returns the nodes the copy made stale, which the adapter may free: after a
    /// read-write fetch, every other valid node (its source included); after a read,
    /// none.
    ///
    /// # Errors
    ///
    /// [`UnexpectedTransfer`](CoherenceError::UnexpectedTransfer) when that copy is not in
    /// flight; [`NodeOutOfRange`](CoherenceError::NodeOutOfRange). Nothing changed.
    pub fn handle_transfer_done(&mut self, fetch: Fetch) -> Result<NodeSet, CoherenceError> {
        let to = Self::check(fetch.to)?;
        Self::check(fetch.from)?;
        if !self.fetching.contains(fetch.to) || self.fetch_from[to] != fetch.from {
            return Err(CoherenceError::UnexpectedTransfer(fetch));
        }
        self.fetching = self.fetching.without(fetch.to);
        self.sourcing[fetch.from.index()] -= 1;
        if self.writer == Some(fetch.to) {
            let stale = self.valid.without(fetch.to);
            self.valid = NodeSet::single(fetch.to);
            Ok(stale)
        } else {
            self.valid = self.valid.with(fetch.to);
            Ok(NodeSet::EMPTY)
        }
    }

    /// The copy `fetch` failed (a device error, out of memory): it is no longer in flight,
    /// its destination stays invalid and its source is no longer pinned. The acquisition
    /// that asked for it is still held: release it (or acquire again to retry).
    ///
    /// # Errors
    ///
    /// [`UnexpectedTransfer`](CoherenceError::UnexpectedTransfer) when that copy is not in
    /// flight; [`NodeOutOfRange`](CoherenceError::NodeOutOfRange). Nothing changed.
    pub fn handle_transfer_failed(&mut self, fetch: Fetch) -> Result<(), CoherenceError> {
        let to = Self::check(fetch.to)?;
        Self::check(fetch.from)?;
        if !self.fetching.contains(fetch.to) || self.fetch_from[to] != fetch.from {
            return Err(CoherenceError::UnexpectedTransfer(fetch));
        }
        self.fetching = self.fetching.without(fetch.to);
        self.sourcing[fetch.from.index()] -= 1;
        Ok(())
    }

    /// Releases an acquisition of `node` in `mode` (the reference's
    /// `_starpu_release_data_on_node`). The valid set does not change: a write took
    /// effect at acquisition.
    ///
    /// # Errors
    ///
    /// [`NotAcquired`](CoherenceError::NotAcquired) when no acquisition is held on `node`,
    /// or `mode` writes and the write is not held on `node`, or `mode` does not write and
    /// `node` holds the write;
    /// [`Busy`](CoherenceError::Busy) while the copy towards `node` is still in flight;
    /// [`NodeOutOfRange`](CoherenceError::NodeOutOfRange). Nothing changed.
    pub fn release(&mut self, node: MemNode, mode: AccessMode) -> Result<(), CoherenceError> {
        let i = Self::check(node)?;
        // While a write is held it is the only acquisition (writes are exclusive), so the
        // writer's node releases a write and every other node releases a non-write.
        if self.held[i] == 0 || mode.writes() != (self.writer == Some(node)) {
            return Err(CoherenceError::NotAcquired(node));
        }
        if self.fetching.contains(node) {
            return Err(CoherenceError::Busy(node));
        }
        self.held[i] -= 1;
        if mode.writes() {
            self.writer = None;
        }
        Ok(())
    }

    /// Drops `node`'s replica (memory pressure, or a device going away); returns whether
    /// it was valid. The adapter frees the buffer.
    ///
    /// # Errors
    ///
    /// [`LastCopy`](CoherenceError::LastCopy) when `node` holds the only valid copy;
    /// [`Busy`](CoherenceError::Busy) when `node` is held, fetching, or the source of a
    /// copy in flight; [`NodeOutOfRange`](CoherenceError::NodeOutOfRange). Nothing changed.
    pub fn evict(&mut self, node: MemNode) -> Result<bool, CoherenceError> {
        let i = Self::check(node)?;
        if self.held[i] > 0 || self.sourcing[i] > 0 || self.fetching.contains(node) {
            return Err(CoherenceError::Busy(node));
        }
        if !self.valid.contains(node) {
            return Ok(false);
        }
        if self.valid.len() == 1 {
            return Err(CoherenceError::LastCopy(node));
        }
        self.valid = self.valid.without(node);
        Ok(true)
    }

    /// Where an MPI send reads the datum: main memory when it holds a valid copy, else the
    /// node to stage from (the source `acquire(MAIN_RAM, R)` picks) or to hand to a
    /// CUDA-aware MPI. A query: nothing changes.
    ///
    /// # Errors
    ///
    /// [`NoValidCopy`](CoherenceError::NoValidCopy) after
    /// [`invalidate_all`](Self::invalidate_all).
    pub const fn before_send(&self) -> Result<BeforeSend, CoherenceError> {
        if self.valid.contains(MemNode::MAIN_RAM) {
            return Ok(BeforeSend::MainRam);
        }
        match self.source_for(MemNode::MAIN_RAM) {
            Some(node) => Ok(BeforeSend::StageFrom(node)),
            None => Err(CoherenceError::NoValidCopy),
        }
    }

    /// A receive wrote a new value into main memory: main memory becomes the only valid
    /// copy. Returns the stale nodes, which the adapter may free. The same as
    /// `acquire(MAIN_RAM, W)` followed by its `release`.
    ///
    /// # Errors
    ///
    /// [`Busy`](CoherenceError::Busy) while an acquisition is held. Nothing changed.
    pub fn after_receive(&mut self) -> Result<NodeSet, CoherenceError> {
        if let Some(node) = self.any_held() {
            return Err(CoherenceError::Busy(node));
        }
        let stale = self.valid.without(MemNode::MAIN_RAM);
        self.valid = NodeSet::single(MemNode::MAIN_RAM);
        Ok(stale)
    }

    /// Drops every copy: the value is no longer needed (the reference's
    /// `starpu_data_invalidate`). Returns the nodes whose copies the adapter may free.
    /// A read then fails with [`NoValidCopy`](CoherenceError::NoValidCopy) until a write.
    ///
    /// # Errors
    ///
    /// [`Busy`](CoherenceError::Busy) while an acquisition is held. Nothing changed.
    pub fn invalidate_all(&mut self) -> Result<NodeSet, CoherenceError> {
        if let Some(node) = self.any_held() {
            return Err(CoherenceError::Busy(node));
        }
        let stale = self.valid;
        self.valid = NodeSet::EMPTY;
        Ok(stale)
    }
}

#[cfg(test)]
mod tests;
