//! The insert-task utility's per-rank state: what this rank knows of each registered
//! datum, the communication cache and its byte budget, the node-selection policies, the
//! pending reductions and the graph-agreement check's record. A leaf of the distributed
//! flow: the context holds it, the flow above reads and changes it.

use std::collections::{BTreeSet, HashMap};

use starling_core::cache::{Budget, Cache};
use starling_core::insert::{Access, Plan};
use starling_core::select::Policies;
use starling_core::{CommId, DataId, Owner, Rank, Tag};

use crate::runtime::by_id::ById;
use crate::runtime::data::AnyCell;
use crate::runtime::task::{Codelet, env_flag};
use crate::sync::Arc;

/// The communication cache's capacity (sent pairs and received copies, each).
pub(crate) const CACHE_CAPACITY: usize = 1 << 16;
/// The most transfers one insert can plan.
pub(crate) const PLAN_CAPACITY: usize = 64;

/// What a rank knows of a registered datum.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MpiInfo {
    pub(crate) tag: Tag,
    pub(crate) owner: Owner,
    pub(crate) comm: CommId,
}

/// A handle's reduction methods and pending contributors.
pub(crate) struct Redux {
    pub(crate) combine: Codelet,
    pub(crate) init: Codelet,
    pub(crate) contributors: BTreeSet<Rank>,
    /// This rank's copy was initialised for the pending reduction.
    pub(crate) initialised: bool,
}

/// The insert-task utility's per-rank state.
pub(crate) struct DistState {
    pub(crate) cache: Box<Cache<CACHE_CAPACITY>>,
    pub(crate) policies: Policies,
    pub(crate) plan: Box<Plan<PLAN_CAPACITY>>,
    pub(crate) info: ById<MpiInfo>,
    /// The planner's input, kept across inserts (no allocation per insert).
    pub(crate) accesses: Vec<Access>,
    pub(crate) cells: HashMap<DataId, Arc<dyn AnyCell>>,
    pub(crate) redux: HashMap<DataId, Redux>,
    pub(crate) cache_stats: bool,
    /// The byte budget of cached copies per (owner, reader) pair (the core's
    /// [`Budget`]: its evictions); `None`: unbounded.
    pub(crate) budget: Option<Box<CopyBudget>>,
    /// A full cache was reported already (once per rank is enough).
    pub(crate) cache_full: bool,
    /// The graph-agreement check's side of this rank.
    pub(crate) agreement: crate::tools::agreement::Agreement,
    /// The next automatic tag ([`crate::tags::AUTO_TAGS`]); past its end: none left.
    pub(crate) next_auto_tag: i64,
}

impl DistState {
    /// The state as the environment sets it: `STARLING_MPI_CACHE=0` disables the cache,
    /// `STARLING_MPI_CACHE_STATS=1` prints cache events, `STARLING_MPI_CACHE_BUDGET=bytes`
    /// bounds the received copies kept per peer. In a world of `size` ranks the cache
    /// keeps at most `CACHE_CAPACITY / 2 / (size − 1)` entries per (owner, reader) pair,
    /// so that no table is ever more than half full: a full pair stops caching on both of
    /// its ranks alike.
    pub(crate) fn from_env(size: u32) -> Self {
        let mut cache = new_cache();
        cache.set_pair_limit(pair_limit(size));
        if std::env::var("STARLING_MPI_CACHE").is_ok_and(|v| v == "0") {
            cache.set_enabled(false, |_| {});
        }
        Self {
            cache,
            policies: Policies::new(),
            plan: Box::new(Plan::new()),
            info: ById::new(),
            accesses: Vec::new(),
            cells: HashMap::new(),
            redux: HashMap::new(),
            cache_stats: env_flag("STARLING_MPI_CACHE_STATS"),
            budget: std::env::var("STARLING_MPI_CACHE_BUDGET")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(new_budget),
            cache_full: false,
            agreement: crate::tools::agreement::Agreement::new(cfg!(debug_assertions)),
            next_auto_tag: *crate::tags::AUTO_TAGS.start(),
        }
    }
}

/// The cache entries one (owner, reader) pair may hold in a world of `size` ranks: half
/// the tables' capacity shared by the peers of a rank, so that neither the owner's sent
/// set nor the reader's received set is ever more than half full (the same on every
/// rank).
fn pair_limit(size: u32) -> usize {
    // Half the capacity: the cache's tables are `heapless` index maps, whose probe
    // sequences grow without bound as they fill (see `progress::MATCH_KEYS`).
    CACHE_CAPACITY / 2 / (size.max(2) as usize - 1)
}

/// A new, empty cache on the heap. Built on a thread with a large stack: `Box::new` of a
/// multi-megabyte value goes through the stack in unoptimised builds.
fn new_cache() -> Box<Cache<CACHE_CAPACITY>> {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| Box::new(Cache::new()))
        .ok()
        .and_then(|t| t.join().ok())
        .expect("building the communication cache")
}

/// The byte budget's tables: twice the cache's capacity (its sent and received sets:
/// every counted copy has a flag, so they never fill) and the pairs of up to 2 048 ranks.
pub(crate) type CopyBudget = Budget<{ 2 * CACHE_CAPACITY }, 4096>;

/// A budget of `bytes` per pair on the heap, built as [`new_cache`] builds the cache.
pub(crate) fn new_budget(bytes: u64) -> Box<CopyBudget> {
    let mut b = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| Box::new(CopyBudget::new()))
        .ok()
        .and_then(|t| t.join().ok())
        .expect("building the cache's byte budget");
    b.set_limit(Some(bytes));
    b
}

/// Forgets a datum being unregistered: its registration, reduction state and cache flags.
pub(crate) fn forget(dist: &mut DistState, data: DataId) {
    if dist.info.remove(&data).is_some() {
        dist.cells.remove(&data);
        dist.redux.remove(&data);
        dist.cache.clear_sent(data);
        let _ = dist.cache.clear_received(data);
        forget_lru(dist, data);
    }
}

/// Forgets `data` in the byte budget's bookkeeping (its copies are no longer cached).
pub(crate) fn forget_lru(dist: &mut DistState, data: DataId) {
    if let Some(b) = dist.budget.as_deref_mut() {
        b.forget(data);
    }
}
