//! The communication cache: which values this rank already sent, and which it holds a
//! received copy of.
//!
//! The state machine is two sets and a switch (the reference's `starpu_mpi_cache.c`,
//! internals §5):
//! - the **sent** set of `(datum, destination)` pairs: "the current value of this datum,
//!   which I own, was already sent to that rank";
//! - the **received** set of data: "I hold a received copy of the current value of this
//!   datum, which I do not own";
//! - whether the cache is enabled (it is after [`Cache::new`]).
//!
//! Its purpose: the [planner](crate::insert::plan) sends a given *value* of a datum at most
//! once to each rank, and a rank keeps the copies it received while the value is unchanged.
//!
//! Rules:
//! - **The cache is replicated state.** Every rank keeps its own, and the planner relies on
//!   an invariant between them: for every datum `d` owned by `o` and every rank `x ≠ o`,
//!   `(d, x)` is in `o`'s sent set exactly when `d` is in `x`'s received set. Each update
//!   keeps it only when every rank performs the same updates at the same point of the
//!   submission sequence: the planner's [`CacheUpdate`]s (applied with [`Cache::apply`]),
//!   [`flush`](Cache::flush), [`flush_all`](Cache::flush_all) and
//!   [`set_enabled`](Cache::set_enabled) are all logically collective and
//!   communication-free. A rank that skips one desynchronises the caches: either a receive
//!   is never posted (the sender thinks the copy is current) or a stale value is read.
//! - Flags are set **at submission time**, not at completion: the planner sets them when it
//!   plans the transfer.
//! - Any write (W, RW or REDUX access) clears the datum's flags on every rank
//!   ([`CacheUpdate::Invalidate`]); so does a flush.
//! - **Changing a datum's owner** (the reference's `starpu_mpi_data_set_rank`) must clear the
//!   datum's flags on every rank too (as `starpu_mpi_data_migrate` does with its flush):
//!   otherwise a rank still holding a received copy from the old owner skips its receive
//!   while the new owner, whose sent set knows nothing, sends. The reference's `set_rank`
//!   does not flush and has this bug.
//! - While disabled, queries answer `false`, setters change nothing and answer `Ok(false)`,
//!   and flushes do nothing (as in the reference); disabling flushes everything first.
//!
//! Capacities: each set holds at most `N` entries; `N` must be a power of two greater than
//! one (a `heapless` index-set requirement, checked at compile time). A full set hands the
//! entry back in a [`Full`] error ([`Table::Cache`]) and changes nothing.
//!
//! **The pair bound.** A full set is seen by one rank only: a reader that receives from
//! many owners fills its received set while each owner's sent set has room, and the two
//! ranks of a pair would then disagree (the owner thinks the copy is cached, the reader
//! receives again: a deadlock). [`Cache::set_pair_limit`] bounds instead the entries of
//! each (owner, reader) pair — the owner's sent pairs to that reader, the reader's copies
//! from that owner, which are equal by the invariant above — and a new entry past the
//! bound is not recorded, on both ranks alike: a pure function of what both see. With a
//! bound of `N / (ranks − 1)` no set ever fills. The received copies must then name their
//! owner ([`Cache::apply_from`], [`Cache::set_received_from`]); a copy recorded without one
//! is not counted.
//!
//! Cost: every query and setter is O(1). Clearing a datum's sent flags (every write does
//! it) costs O(number of destinations of that datum), not O(size of the cache): the sent
//! pairs of one datum are threaded into a list through the pair map, whose head is kept
//! per datum. (A plain set would need a scan of all `N` pairs per write.)

use crate::lists::KeyMap;

use crate::error::{Full, Table};

mod budget;

use crate::types::{DataId, Owner, Rank};
pub use budget::Budget;

/// A change to this rank's [`Cache`], listed by the [planner](crate::insert::plan);
/// apply them in order with [`Cache::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CacheUpdate {
    /// The current value of `data` is sent to `dest` (set on the owner).
    SentSet {
        /// The datum.
        data: DataId,
        /// The rank it is sent to.
        dest: Rank,
    },
    /// This rank receives (or received) the current value of `data` (set on the executor).
    ReceivedSet {
        /// The datum.
        data: DataId,
    },
    /// The task writes `data`: clear its sent and received flags, and drop the received copy
    /// if one was recorded (after the task and its write-back). Listed on every rank that
    /// knows the datum.
    Invalidate {
        /// The datum.
        data: DataId,
    },
    /// The cache is disabled and the executor read `data`, which it does not own: drop the
    /// copy it received for the task, once the task is done.
    DropCopy {
        /// The datum.
        data: DataId,
    },
}

/// What a [`Cache::flush`] asks of the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub struct Flush {
    /// The adapter must drop (invalidate) this rank's local copy of the datum, once the
    /// accesses already submitted on it are done: the cache was enabled and this rank does
    /// not own the datum. As in the reference, this holds whether or not a received copy is
    /// recorded, since a non-owner can also hold the value it computed in a task it ran;
    /// dropping a copy that does not exist must be a no-op. Never set for a per-node datum,
    /// whose every instance is owned by its rank.
    pub drop_local_copy: bool,
}

/// The communication cache of one rank, holding at most `N` sent entries and `N` received
/// entries. See the [module docs](self) for the rules.
#[derive(Clone, Debug)]
pub struct Cache<const N: usize> {
    enabled: bool,
    /// The sent set: each `(datum, destination)` pair maps to the next destination of
    /// the same datum, so that a datum's pairs form a list.
    sent: KeyMap<(DataId, Rank), Option<Rank>, N>,
    /// The first destination of each datum's list of sent pairs.
    heads: KeyMap<DataId, Rank, N>,
    /// The received set, with each copy's owner when known (for the pair bound).
    received: KeyMap<DataId, Option<Rank>, N>,
    /// Sent pairs per destination (only destinations with some).
    sent_to: KeyMap<Rank, u32, N>,
    /// Received copies per owner (only owners with some, named ones).
    received_from: KeyMap<Rank, u32, N>,
    /// The most entries of one (owner, reader) pair ([`Cache::set_pair_limit`]).
    pair_limit: u32,
}

#[cfg(feature = "defmt")]
impl<const N: usize> defmt::Format for Cache<N> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "Cache {{ enabled: {=bool}, sent: {=usize}, received: {=usize} }}",
            self.enabled,
            self.sent.len(),
            self.received.len()
        )
    }
}

impl<const N: usize> Default for Cache<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Cache<N> {
    /// An empty, enabled cache.
    pub const fn new() -> Self {
        Self {
            enabled: true,
            sent: KeyMap::new(),
            heads: KeyMap::new(),
            received: KeyMap::new(),
            sent_to: KeyMap::new(),
            received_from: KeyMap::new(),
            pair_limit: u32::MAX,
        }
    }

    /// Bounds the entries of each (owner, reader) pair (see the [module docs](self)):
    /// past `limit`, a new sent pair or received copy of the pair is not recorded, on both
    /// ranks alike. Every rank must set the same bound; `N / (ranks − 1)` keeps every set
    /// from filling. The default is no bound.
    pub fn set_pair_limit(&mut self, limit: usize) {
        self.pair_limit = u32::try_from(limit).unwrap_or(u32::MAX);
    }

    /// The entries of the pair this rank forms with `peer`, as the sender (`sent`) or the
    /// receiver.
    pub fn pair_entries(&self, peer: Rank, sent: bool) -> usize {
        let counts = if sent {
            &self.sent_to
        } else {
            &self.received_from
        };
        counts.get(&peer).map_or(0, |c| *c as usize)
    }

    /// Counts one more (`up`) or one fewer entry of `peer` in `counts`. Cannot fail: a
    /// peer is counted only while it has entries, and there are at most `N`.
    fn count(counts: &mut KeyMap<Rank, u32, N>, peer: Rank, up: bool) {
        if up {
            match counts.get_mut(&peer) {
                Some(c) => *c += 1,
                None => {
                    let _ = counts.insert(peer, 1);
                }
            }
        } else if let Some(c) = counts.get_mut(&peer) {
            *c -= 1;
            if *c == 0 {
                counts.remove(&peer);
            }
        }
    }

    /// Whether the cache is enabled (the reference's `starpu_mpi_cache_is_enabled`).
    #[inline]
    pub const fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Enables or disables the cache (the reference's `starpu_mpi_cache_set`).
    ///
    /// Disabling an enabled cache first flushes every entry, as
    /// [`flush_all`](Self::flush_all) does: `drop_copy` is called once for each datum this
    /// rank held a received copy of. Enabling calls nothing. Like every cache operation it
    /// must be performed by every rank at the same point of the submission sequence.
    pub fn set_enabled(&mut self, enabled: bool, drop_copy: impl FnMut(DataId)) {
        if !enabled {
            self.flush_all(drop_copy);
        }
        self.enabled = enabled;
    }

    /// Whether the current value of `data` was already sent to `dest` (the reference's
    /// `starpu_mpi_cached_send`). `false` while disabled.
    pub fn cached_send(&self, data: DataId, dest: Rank) -> bool {
        self.enabled && self.sent.contains_key(&(data, dest))
    }

    /// Whether this rank holds a received copy of the current value of `data` (the
    /// reference's `starpu_mpi_cached_receive`). `false` while disabled.
    pub fn cached_receive(&self, data: DataId) -> bool {
        self.enabled && self.received.contains_key(&data)
    }

    /// Records that the current value of `data` was sent to `dest`; returns whether it was
    /// already recorded (the reference's `starpu_mpi_cached_send_set`). Does nothing and
    /// returns `Ok(false)` while disabled, or when the pair (this rank, `dest`) has its
    /// [bound](Cache::set_pair_limit) of entries (the reader declines its copy alike).
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Cache`]) handing `(data, dest)` back when the sent set is full and
    /// the entry is new; nothing changed. Flush entries or size the cache larger.
    pub fn set_sent(&mut self, data: DataId, dest: Rank) -> Result<bool, Full<(DataId, Rank)>> {
        if !self.enabled {
            return Ok(false);
        }
        if self.sent.contains_key(&(data, dest)) {
            return Ok(true);
        }
        if self.pair_entries(dest, true) >= self.pair_limit as usize {
            return Ok(false);
        }
        let next = self.heads.get(&data).copied();
        if self.sent.insert((data, dest), next).is_err() {
            return Err(Full::new(Table::Cache, (data, dest)));
        }
        // A datum has a head only while it has pairs, so `heads` never holds more entries
        // than `sent` and this insert cannot fail; undo the pair all the same if it does.
        if self.heads.insert(data, dest).is_err() {
            self.sent.remove(&(data, dest));
            return Err(Full::new(Table::Cache, (data, dest)));
        }
        Self::count(&mut self.sent_to, dest, true);
        Ok(false)
    }

    /// Records that this rank holds a received copy of `data`; returns whether it was
    /// already recorded (the reference's `starpu_mpi_cached_receive_set`). Does nothing and
    /// returns `Ok(false)` while disabled.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Cache`]) handing `data` back when the received set is full and the
    /// entry is new; nothing changed. Flush entries or size the cache larger.
    pub fn set_received(&mut self, data: DataId) -> Result<bool, Full<DataId>> {
        self.set_received_from(data, None)
    }

    /// [`Cache::set_received`] of a copy from `owner`: counted in the pair (`owner`, this
    /// rank), and not recorded (answering `Ok(false)`) when the pair has its
    /// [bound](Cache::set_pair_limit) of entries — as the owner declines its sent pair.
    ///
    /// # Errors
    /// As for [`Cache::set_received`].
    pub fn set_received_from(
        &mut self,
        data: DataId,
        owner: Option<Rank>,
    ) -> Result<bool, Full<DataId>> {
        if !self.enabled {
            return Ok(false);
        }
        if self.received.contains_key(&data) {
            return Ok(true);
        }
        if let Some(o) = owner {
            if self.pair_entries(o, false) >= self.pair_limit as usize {
                return Ok(false);
            }
        }
        match self.received.insert(data, owner) {
            Ok(_) => {
                if let Some(o) = owner {
                    Self::count(&mut self.received_from, o, true);
                }
                Ok(false)
            }
            Err((item, _)) => Err(Full::new(Table::Cache, item)),
        }
    }

    /// Forgets every destination `data` was sent to (the reference's
    /// `starpu_mpi_cached_send_clear`).
    #[inline] // reason: hot in every insert's cache update (see `apply_from`)
    pub fn clear_sent(&mut self, data: DataId) {
        let mut next = self.heads.remove(&data);
        while let Some(dest) = next {
            next = self.sent.remove(&(data, dest)).flatten();
            Self::count(&mut self.sent_to, dest, false);
        }
    }

    /// Forgets that the current value of `data` was sent to `dest` only (an eviction of
    /// that copy, decided alike by both ranks); returns whether it was recorded.
    pub fn clear_sent_to(&mut self, data: DataId, dest: Rank) -> bool {
        let Some(&after) = self.sent.get(&(data, dest)) else {
            return false;
        };
        // Unlink `dest` from the datum's list: it is the head, or follows another entry.
        if self.heads.get(&data) == Some(&dest) {
            match after {
                Some(next) => {
                    if let Some(h) = self.heads.get_mut(&data) {
                        *h = next;
                    }
                }
                None => {
                    self.heads.remove(&data);
                }
            }
        } else {
            let mut cur = self.heads.get(&data).copied();
            while let Some(r) = cur {
                let next = self.sent.get(&(data, r)).copied().flatten();
                if next == Some(dest) {
                    if let Some(link) = self.sent.get_mut(&(data, r)) {
                        *link = after;
                    }
                    break;
                }
                cur = next;
            }
        }
        self.sent.remove(&(data, dest));
        Self::count(&mut self.sent_to, dest, false);
        true
    }

    /// Forgets the received copy of `data`; returns whether one was recorded, in which case
    /// the adapter must drop (invalidate) the local copy (the reference's
    /// `starpu_mpi_cached_receive_clear`).
    #[inline] // reason: hot in every insert's cache update (see `apply_from`)
    pub fn clear_received(&mut self, data: DataId) -> bool {
        match self.received.remove(&data) {
            Some(owner) => {
                if let Some(o) = owner {
                    Self::count(&mut self.received_from, o, false);
                }
                true
            }
            None => false,
        }
    }

    /// The owner of `data` changed (the reference's `starpu_mpi_data_set_rank`): clears
    /// both kinds of its flags on this rank, as every rank must at the same point of the
    /// flow (see the rules in the [module docs](self)), but asks for no copy to be
    /// dropped: no data moves, and the old owner may still send its value (a scatter).
    /// The reference's `set_rank` does not clear them and lets the caches disagree.
    pub fn on_owner_change(&mut self, data: DataId) {
        self.clear_sent(data);
        let _ = self.clear_received(data);
    }

    /// Clears both kinds of flags of `data` (the reference's `starpu_mpi_cache_flush`).
    ///
    /// `me` is this rank and `owner` the datum's owner; the answer says whether the local
    /// copy must be dropped (see [`Flush`]). Does nothing while disabled. Must be called by
    /// every rank at the same point of the submission sequence.
    pub fn flush(&mut self, data: DataId, me: Rank, owner: Owner) -> Flush {
        if !self.enabled {
            return Flush::default();
        }
        self.clear_sent(data);
        self.clear_received(data);
        Flush {
            drop_local_copy: matches!(owner, Owner::Rank(r) if r != me),
        }
    }

    /// Clears every flag of every datum (the reference's
    /// `starpu_mpi_cache_flush_all_data`), calling `drop_copy` once for each datum this rank
    /// held a received copy of: the adapter must drop (invalidate) those local copies.
    ///
    /// A received copy is only ever recorded for a datum this rank does not own (the
    /// planner never receives a rank's own data, and an owner change clears the flags), so
    /// these are exactly the non-owned data the reference invalidates. Does nothing while
    /// disabled. Must be called by every rank at the same point of the submission sequence.
    pub fn flush_all(&mut self, mut drop_copy: impl FnMut(DataId)) {
        if !self.enabled {
            return;
        }
        for data in self.received.keys() {
            drop_copy(*data);
        }
        self.received.clear();
        self.sent.clear();
        self.heads.clear();
        self.sent_to.clear();
        self.received_from.clear();
    }

    /// Applies one update listed by the [planner](crate::insert::plan); returns whether the
    /// adapter must drop (invalidate) this rank's local copy of the datum.
    ///
    /// - [`SentSet`](CacheUpdate::SentSet) / [`ReceivedSet`](CacheUpdate::ReceivedSet):
    ///   [`set_sent`](Self::set_sent) / [`set_received`](Self::set_received); answers `false`.
    /// - [`Invalidate`](CacheUpdate::Invalidate): [`clear_sent`](Self::clear_sent) and
    ///   [`clear_received`](Self::clear_received); answers whether a received copy was
    ///   recorded.
    /// - [`DropCopy`](CacheUpdate::DropCopy): changes nothing; answers `true`.
    ///
    /// Applying a plan's updates in order leaves the cache in the reference's state after
    /// `starpu_mpi_task_insert`.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Cache`]) handing the update back when a set is full; nothing
    /// changed (updates applied before it stay applied).
    pub fn apply(&mut self, update: &CacheUpdate) -> Result<bool, Full<CacheUpdate>> {
        self.apply_from(update, None)
    }

    /// [`Cache::apply`], naming the owner of the datum of a
    /// [`ReceivedSet`](CacheUpdate::ReceivedSet) ([`Cache::set_received_from`]): what a
    /// runtime with a [pair bound](Cache::set_pair_limit) calls.
    ///
    /// # Errors
    /// As for [`Cache::apply`].
    // Hot: every insert's cache updates go through it. The hint keeps it (and the two
    // `clear_*` it calls) inlined into the adapter's caller whichever codegen unit that
    // lands in: without them, an unrelated change of `starling-std`'s module layout moved
    // them out of line (+0.7 % instructions on `benches/insert.rs`).
    #[inline]
    pub fn apply_from(
        &mut self,
        update: &CacheUpdate,
        owner: Option<Rank>,
    ) -> Result<bool, Full<CacheUpdate>> {
        let full = || Full::new(Table::Cache, *update);
        match *update {
            CacheUpdate::SentSet { data, dest } => {
                self.set_sent(data, dest).map_err(|_| full())?;
                Ok(false)
            }
            CacheUpdate::ReceivedSet { data } => {
                self.set_received_from(data, owner).map_err(|_| full())?;
                Ok(false)
            }
            CacheUpdate::Invalidate { data } => {
                self.clear_sent(data);
                Ok(self.clear_received(data))
            }
            CacheUpdate::DropCopy { .. } => Ok(true),
        }
    }

    /// How many `(datum, destination)` pairs are recorded as sent.
    pub fn len_sent(&self) -> usize {
        self.sent.len()
    }

    /// How many received copies are recorded.
    pub fn len_received(&self) -> usize {
        self.received.len()
    }

    /// The data this rank holds a received copy of, in no particular order.
    pub fn received(&self) -> impl Iterator<Item = DataId> + '_ {
        self.received.keys().copied()
    }

    /// The `(datum, destination)` pairs recorded as sent, in no particular order.
    pub fn sent(&self) -> impl Iterator<Item = (DataId, Rank)> + '_ {
        self.sent.keys().copied()
    }
}

#[cfg(test)]
mod tests;
