//! The communication cache of the insert flow: a plan's updates applied (flags,
//! statistics, dropped copies, the byte budget's evictions), and the cache's API on the
//! [`Context`] (`starpu_mpi_cache_*`).

use super::*;

/// Applies one cache update of a plan: flags, statistics, dropped copies, the budget.
pub(super) fn apply_update(
    ctx: &Context,
    dist: &mut DistState,
    u: &insert::CacheUpdate,
    items: &[Item],
    evictable: bool,
) {
    let me = ctx.rank;
    let data = match *u {
        insert::CacheUpdate::SentSet { data, .. }
        | insert::CacheUpdate::ReceivedSet { data }
        | insert::CacheUpdate::Invalidate { data }
        | insert::CacheUpdate::DropCopy { data } => data,
    };
    let cell = items
        .iter()
        .find_map(|i| i.cell.as_ref().filter(|c| c.id() == data));
    // A received copy is counted in its (owner, reader) pair: the pair bound.
    let from = match (u, dist.info.get(&data).map(|i| i.owner)) {
        (insert::CacheUpdate::ReceivedSet { .. }, Some(Owner::Rank(o))) => Some(o),
        _ => None,
    };
    let drop_copy = match dist.cache.apply_from(u, from) {
        Ok(d) => d,
        Err(_) => {
            // A full cache only stops caching: the next read transfers again, on every
            // rank alike (the flag was not set anywhere... only if all ranks are full
            // alike). Report it: the cache must be sized for the flow.
            if !dist.cache_full {
                dist.cache_full = true;
                lock(&ctx.reports).push(crate::error::Noted::Other(format!(
                    "the communication cache ({CACHE_CAPACITY} entries per table) was full at \
                     {data}: ranks may disagree from there on; flush data after their last use \
                     or set a byte budget"
                )));
            }
            false
        }
    };
    if let insert::CacheUpdate::ReceivedSet { .. } = u {
        if dist.cache_stats {
            let size = cell.as_ref().map_or(0, |c| c.packed_size());
            let from = match from {
                Some(r) => format!("rank {}", r.0),
                None => "its owner".to_owned(),
            };
            eprintln!(
                "[starling_mpi_cache][{}] + {size} bytes of {data} from {from}",
                me.0
            );
        }
    }
    if let Some(budget) = dist.budget.as_deref_mut() {
        // The copy's size, when the insert lets its copies be evicted.
        let size = cell.filter(|_| evictable).map(|c| c.packed_size() as u64);
        let mut evicted = Vec::new();
        let counted = budget.on_update(me, u, from, size, &mut dist.cache, |victim| {
            evicted.push(victim)
        });
        if counted.is_err() && !dist.cache_full {
            dist.cache_full = true;
            lock(&ctx.reports).push(crate::error::Noted::Other(format!(
                "the cache's byte budget had no room to count {data}: it is kept until \
                 its value changes"
            )));
        }
        for victim in evicted {
            if dist.cache_stats {
                eprintln!("[starling_mpi_cache][{}] - {victim} (evicted)", me.0);
            }
            if let Some(c) = dist.cells.get(&victim) {
                release_after_pending(ctx, Arc::clone(c));
            }
        }
    }
    if drop_copy {
        if dist.cache_stats {
            eprintln!("[starling_mpi_cache][{}] - {data}", me.0);
        }
        if let Some(c) = cell {
            release_after_pending(ctx, Arc::clone(c));
        }
    }
}

impl Context {
    // ----- the communication cache ----------------------------------------------------

    /// Whether the communication cache is on (`starpu_mpi_cache_is_enabled`).
    pub fn cache_enabled(&self) -> bool {
        lock(&self.dist).cache.is_enabled()
    }

    /// Switches the communication cache (`starpu_mpi_cache_set`); switching it off
    /// flushes everything. Every rank must call it at the same point of the flow.
    pub fn set_cache_enabled(&self, on: bool) {
        let mut dist = lock(&self.dist);
        let dist = &mut *dist;
        let mut dropped = Vec::new();
        dist.cache.set_enabled(on, |d| dropped.push(d));
        for d in dropped {
            if let Some(c) = dist.cells.get(&d) {
                release_after_pending(self, Arc::clone(c));
            }
        }
    }

    /// Forgets what was sent of `h` and drops this rank's received copy, unless it owns
    /// `h` (`starpu_mpi_cache_flush`). Every rank must call it at the same point of the
    /// flow; it sends nothing.
    pub fn flush<I: Interface>(&self, h: &Handle<I>) {
        let mut dist = lock(&self.dist);
        let Some(owner) = dist.info.get(&h.id()).map(|i| i.owner) else {
            return;
        };
        let held = dist.cache.cached_receive(h.id());
        let f = dist.cache.flush(h.id(), self.rank, owner);
        forget_lru(&mut dist, h.id());
        if held && dist.cache_stats {
            eprintln!(
                "[starling_mpi_cache][{}] - {} (flushed)",
                self.rank.0,
                h.id()
            );
        }
        if f.drop_local_copy {
            release_after_pending(self, h.erased());
        }
    }

    /// [`Context::flush`] for every datum (`starpu_mpi_cache_flush_all_data`).
    pub fn flush_all(&self) {
        let mut dist = lock(&self.dist);
        let dist = &mut *dist;
        let mut dropped = Vec::new();
        dist.cache.flush_all(|d| dropped.push(d));
        if let Some(b) = dist.budget.as_deref_mut() {
            b.clear();
        }
        for d in dropped {
            if let Some(c) = dist.cells.get(&d) {
                release_after_pending(self, Arc::clone(c));
            }
        }
    }

    /// Whether the current value of `h` was already sent to `dest`
    /// (`starpu_mpi_cached_send`).
    pub fn cached_send<I: Interface>(&self, h: &Handle<I>, dest: Rank) -> bool {
        lock(&self.dist).cache.cached_send(h.id(), dest)
    }

    /// Whether this rank holds a received copy of the current value of `h`
    /// (`starpu_mpi_cached_receive`).
    pub fn cached_receive<I: Interface>(&self, h: &Handle<I>) -> bool {
        lock(&self.dist).cache.cached_receive(h.id())
    }

    /// Bounds the cache entries per (owner, reader) pair: past `entries`, a new value
    /// read by the pair is not cached, on both ranks alike (the next read transfers it
    /// again). By default half the cache's capacity shared by a rank's peers, so that no
    /// table is more than half full; smaller, it saves memory (or tests the bound). Every rank must set the
    /// same bound at the same point of the flow; it applies to entries made from then on.
    pub fn set_cache_pair_limit(&self, entries: usize) {
        lock(&self.dist).cache.set_pair_limit(entries);
    }

    /// Bounds the bytes of received copies kept per (owner, reader) pair; beyond it the
    /// least recently used copies are evicted on both ranks of the pair alike, with no
    /// message (`STARLING_MPI_CACHE_BUDGET`). `None`: unbounded, as in the reference.
    /// Every rank must set the same budget at the same point of the flow.
    pub fn set_cache_budget(&self, bytes: Option<u64>) {
        let mut dist = lock(&self.dist);
        match (bytes, dist.budget.as_deref_mut()) {
            (None, _) => dist.budget = None,
            (Some(n), Some(b)) => b.set_limit(Some(n)),
            (Some(n), None) => dist.budget = Some(new_budget(n)),
        }
    }
}
