//! The task-insert planner: from a task's accesses, the policies and the cache, which rank
//! runs the task and which transfers and cache updates that takes on this rank.
//!
//! [`plan`] is the reference's `starpu_mpi_task_insert` decision logic
//! (`starpu_mpi_task_insert.c`, internals §6) as a **pure function**: it reads the
//! [`Cache`] and the [`Policies`] and returns a [`Plan`]; it changes nothing. The caller
//! performs the plan: posts the [`before`](Plan::before) transfers, runs the task if
//! [`execute_here`](Plan::execute_here), posts the [`after`](Plan::after) transfers and
//! applies the [`cache`](Plan::cache) updates in order with [`Cache::apply`] (which yields
//! the reference's cache state after the insert).
//!
//! Every rank of the job calls [`plan`] for every task of the (sequential) task flow, with
//! the same accesses and options, so every rank computes the same executor and the ranks'
//! plans pair up: each send planned on rank `a` to rank `b` has exactly one receive planned
//! on `b` from `a`, with the same datum and tag, in the same order (the *agreement*
//! property, tested in `core/tests/agreement.rs`).
//!
//! # Rules
//!
//! **1. The executor** (reference §6.1, `_starpu_mpi_task_decode_v`):
//! - [`Execute::OnNode`]`(r)` → rank `r`; [`Execute::OnData`]`(i)` → the owner of
//!   `accesses[i]` (a per-node datum → [`Executor::PerNode`]). An explicit choice overrides
//!   the data.
//! - [`Execute::Auto`]: the owner of the written data (accesses whose mode
//!   [writes](AccessMode::writes): W, RW or REDUX). If they are all per-node →
//!   [`Executor::PerNode`] (the task runs on every rank, on each rank's own instance). If
//!   there are none, or their owners differ → the node-selection policy
//!   ([`Options::policy`], or the current one; see [`select`](crate::select)).
//! - Mixing per-node and rank-owned written data, a per-node task accessing rank-owned data,
//!   or a per-node datum written by a task that runs on one rank is
//!   [`InsertError::MixedPerNode`]. (The reference asserts on the first two and, on the
//!   third, makes every other rank wait for a write-back that is never sent.)
//!
//! **2. Before the task** (reference §6.2), for the first read (R or RW) access of each
//! datum that is known here and owned by a rank `o` other than the executor `x`:
//! - on `x`: a [`Direction::Recv`] from `o`, unless [`Cache::cached_receive`]; with the
//!   cache enabled, a [`CacheUpdate::ReceivedSet`];
//! - on `o`: a [`Direction::Send`] to `x`, unless [`Cache::cached_send`]`(data, x)`; with
//!   the cache enabled, a [`CacheUpdate::SentSet`].
//!
//! A datum accessed twice by one task is transferred once (the reference gets this from its
//! cache, and sends twice with the cache disabled). Per-node data are never transferred.
//!
//! **3. After the task** (reference §6.3), for the first W or RW access of each datum owned
//! by a rank `o` other than the executor `x` (the write-back): on `x` a send to `o`, on `o` a
//! receive from `x`.
//!
//! **REDUX** accesses choose the executor and clear the cache like W, but get **no
//! write-back and no inter-node reduction**: reductions (`starpu_mpi_redux_data`, reference
//! §8.1) are out of the planner's scope; the caller must reduce such data itself before
//! they are read elsewhere.
//!
//! **4. Cache updates**, after the `SentSet`/`ReceivedSet` of rule 2:
//! - cache enabled: every datum the task writes (W, RW or REDUX) gets a
//!   [`CacheUpdate::Invalidate`] on **every rank that knows it**, involved in the task or
//!   not: the cache is replicated state;
//! - cache disabled: the executor gets a [`CacheUpdate::DropCopy`] for each datum it read and
//!   does not own (it received that copy for this task only).
//!
//! **Transfers**: [`sync`](Transfer::sync) is set if [`Options::ssend`] or the access mode
//! contains [`AccessMode::SSEND`] (the sender then uses a synchronous send; both sides see
//! the same flag); [`priority`](Transfer::priority) is [`Options::priority`]. Within a
//! phase, transfers follow the order of the accesses.
//!
//! # Temporary data and the replication contract
//!
//! An access with [`known`](Access::known) `== false` names a datum that is not registered
//! on this rank (the reference's `NULL` handle). This rank skips it: it is neither scored
//! by [`most_r_data`](crate::select::most_r_data) nor transferred nor cached. If the task
//! chooses its executor from its data ([`Execute::Auto`]) and writes such a datum, this rank
//! cannot tell who runs the task and takes no part in it: the plan has
//! [`executor`](Plan::executor) `None` and nothing else (the reference returns `-EINVAL`).
//!
//! The agreement property holds only if the caller keeps this contract:
//! - every rank plans every task with the same accesses (same data, modes, owners, tags,
//!   sizes where known) and options, and performs the same cache operations and owner
//!   changes at the same points of the flow;
//! - **the executor must not depend on data unknown on some ranks**: a task touching
//!   temporary data should name its executor with [`Execute::OnNode`] (typically the
//!   datum's owner); with [`Execute::Auto`] every written datum and every datum the policy
//!   looks at must be known on every rank;
//! - the executor knows every datum of the task (checked: [`InsertError::UnknownData`]), and
//!   the owner of a datum knows it;
//! - a rank that does not know a written datum of an [`Execute::Auto`] task takes no part in
//!   it, so it must have no role in it either (not the owner of another accessed datum) and
//!   no cache entry the task would invalidate.

use core::fmt;

use heapless::Vec;

use crate::cache::Cache;
pub use crate::cache::CacheUpdate;
use crate::error::Table;
use crate::select::{Policies, PolicyId, SelectError};
pub use crate::types::Access;
use crate::types::{AccessMode, DataId, Owner, Priority, Rank, Tag};

/// Where a task runs, as requested by the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Execute {
    /// From the written data, else the node-selection policy (rule 1 of the
    /// [module docs](self)).
    #[default]
    Auto,
    /// On this rank (the reference's `STARPU_EXECUTE_ON_NODE`).
    OnNode(Rank),
    /// On the owner of the datum of this access, an index into the task's accesses (the
    /// reference's `STARPU_EXECUTE_ON_DATA`).
    OnData(usize),
}

/// The options of one task insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Options {
    /// Where the task runs.
    pub execute: Execute,
    /// The node-selection policy to use if one is needed; `None`: the current policy (the
    /// reference's `STARPU_NODE_SELECTION_POLICY`).
    pub policy: Option<PolicyId>,
    /// The priority of the task and of its transfers (the reference's `STARPU_PRIORITY`).
    pub priority: Priority,
    /// Send every datum of the task synchronously, as if each access had
    /// [`AccessMode::SSEND`].
    pub ssend: bool,
}

/// Who runs a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Executor {
    /// One rank.
    Rank(Rank),
    /// Every rank, each on its own instance of the per-node data (the reference's
    /// `STARPU_MPI_PER_NODE`).
    PerNode,
}

/// Whether this rank sends or receives a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Direction {
    /// This rank sends the datum's value to [`Transfer::peer`].
    Send,
    /// This rank receives the datum's value from [`Transfer::peer`].
    Recv,
}

/// One point-to-point transfer this rank must post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Transfer {
    /// The datum.
    pub data: DataId,
    /// The datum's tag, which the transfer travels with.
    pub tag: Tag,
    /// The other rank.
    pub peer: Rank,
    /// Send or receive.
    pub direction: Direction,
    /// A synchronous send (the reference's `STARPU_SSEND`): the sender completes only once
    /// the receiver has matched it. Planned identically on both sides; a receiver may
    /// ignore it.
    pub sync: bool,
    /// The task's priority.
    pub priority: Priority,
}

/// What one rank does for one task: the result of [`plan`].
///
/// Up to `T` entries in each of the three lists.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Plan<const T: usize> {
    /// Who runs the task; `None` when this rank takes no part in it (a written datum of an
    /// [`Execute::Auto`] task is unknown here) — every other field is then empty.
    pub executor: Option<Executor>,
    /// Whether this rank runs the task (it is the executor, or the task is per-node).
    pub execute_here: bool,
    /// Transfers to post before the task runs, in access order.
    pub before: Vec<Transfer, T>,
    /// Transfers to post after the task is submitted (write-backs), in access order.
    pub after: Vec<Transfer, T>,
    /// Cache updates, to apply in order once the transfers are posted.
    pub cache: Vec<CacheUpdate, T>,
}

impl<const T: usize> Default for Plan<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const T: usize> Plan<T> {
    /// An empty plan (no executor, nothing to do), to fill with [`plan_into`].
    pub const fn new() -> Self {
        Self::empty(None, false)
    }

    const fn empty(executor: Option<Executor>, execute_here: bool) -> Self {
        Self {
            executor,
            execute_here,
            before: Vec::new(),
            after: Vec::new(),
            cache: Vec::new(),
        }
    }

    /// Empties the plan for reuse by [`plan_into`].
    fn reset(&mut self, executor: Option<Executor>, execute_here: bool) {
        self.executor = executor;
        self.execute_here = execute_here;
        self.before.clear();
        self.after.clear();
        self.cache.clear();
    }

    /// Whether this rank has anything to do for the task: run it, transfer, or update its
    /// cache.
    pub fn is_empty(&self) -> bool {
        !self.execute_here
            && self.before.is_empty()
            && self.after.is_empty()
            && self.cache.is_empty()
    }
}

/// Why [`plan`] failed. Nothing was planned; the cache and policies are unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum InsertError {
    /// [`Execute::OnData`] names an access that does not exist. Fix the index.
    ExecuteOnDataOutOfRange {
        /// The index given.
        index: usize,
        /// The number of accesses.
        len: usize,
    },
    /// An access's datum is not registered on this rank ([`Access::known`] is `false`) but
    /// this rank needs it: it is the [`Execute::OnData`] datum (this rank cannot tell who
    /// runs the task: use [`Execute::OnNode`]), or this rank runs the task (register the
    /// datum here, or run the task elsewhere).
    UnknownData {
        /// The index of the access.
        index: usize,
    },
    /// A rank `≥ nranks` was given as this rank, as [`Execute::OnNode`] or as the owner of
    /// a known datum. Fix the registration or the option.
    RankOutOfRange {
        /// The rank given.
        rank: Rank,
        /// The number of ranks.
        nranks: u32,
    },
    /// Per-node and rank-owned data are mixed in a way that cannot be executed: written data
    /// of both kinds, a per-node task accessing rank-owned data, or a per-node datum written
    /// by a task that runs on one rank. Split the task, or run it per node on per-node data
    /// only.
    MixedPerNode,
    /// The node-selection policy failed (see [`SelectError`]).
    Select(SelectError),
    /// A list of the plan holds fewer entries than the task needs
    /// ([`Table::PlanTransfers`]). Use a larger `T`.
    Full(Table),
}

impl From<SelectError> for InsertError {
    fn from(e: SelectError) -> Self {
        Self::Select(e)
    }
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ExecuteOnDataOutOfRange { index, len } => write!(
                f,
                "execute-on-data names access {index}, but the task has {len} accesses"
            ),
            Self::UnknownData { index } => {
                write!(
                    f,
                    "the datum of access {index} is not registered on this rank"
                )
            }
            Self::RankOutOfRange { rank, nranks } => {
                write!(f, "{rank} does not exist: there are {nranks} ranks")
            }
            Self::MixedPerNode => f.write_str("per-node and rank-owned data are mixed"),
            Self::Select(e) => write!(f, "node selection failed: {e}"),
            Self::Full(table) => write!(f, "the {table} is full"),
        }
    }
}

impl core::error::Error for InsertError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Select(e) => Some(e),
            _ => None,
        }
    }
}

fn check_rank(rank: Rank, nranks: u32) -> Result<(), InsertError> {
    if rank.0 < nranks {
        Ok(())
    } else {
        Err(InsertError::RankOutOfRange { rank, nranks })
    }
}

fn push<E, const T: usize>(list: &mut Vec<E, T>, item: E) -> Result<(), InsertError> {
    list.push(item)
        .map_err(|_| InsertError::Full(Table::PlanTransfers))
}

/// Whether an access before `index` satisfies `same` for the same datum (the first access
/// of a datum speaks for it).
fn seen_before(accesses: &[Access], index: usize, same: impl Fn(&Access) -> bool) -> bool {
    let data = accesses.get(index).map(|a| a.data);
    accesses
        .iter()
        .take(index)
        .any(|b| Some(b.data) == data && same(b))
}

/// What the written data of an [`Execute::Auto`] task say about its executor (rule 1
/// of the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Written {
    /// A written datum is unknown here: this rank takes no part in the task.
    Unknown,
    /// Every written datum has this owner: it runs the task.
    Owner(Owner),
    /// No datum is written, or the written data have different owners: the
    /// node-selection policy chooses (from the accesses' sizes).
    Policy,
}

/// What the written data of an [`Execute::Auto`] task say about its executor: the one
/// place of rule 1, used by [`plan_into`] and by an adapter that must know beforehand
/// whether a policy will run (then it fills in the accesses' sizes).
///
/// # Errors
///
/// [`InsertError::MixedPerNode`] when per-node and rank-owned data are both written.
pub fn written_owner(accesses: &[Access]) -> Result<Written, InsertError> {
    if accesses.iter().any(|a| a.mode.writes() && !a.known) {
        return Ok(Written::Unknown);
    }
    let mut first: Option<Owner> = None;
    let mut inconsistent = false;
    let (mut per_node, mut ranked) = (false, false);
    for a in accesses.iter().filter(|a| a.mode.writes()) {
        match a.owner {
            Owner::PerNode => per_node = true,
            Owner::Rank(_) => ranked = true,
        }
        match first {
            None => first = Some(a.owner),
            Some(owner) if owner != a.owner => inconsistent = true,
            Some(_) => {}
        }
    }
    if per_node && ranked {
        return Err(InsertError::MixedPerNode);
    }
    Ok(match first {
        Some(Owner::PerNode) => Written::Owner(Owner::PerNode),
        Some(Owner::Rank(r)) if !inconsistent => Written::Owner(Owner::Rank(r)),
        _ => Written::Policy,
    })
}

/// Where a task runs when the application names a datum, `data` of owner `owner`, that
/// may or may not be among the task's accesses (the reference's
/// `STARPU_EXECUTE_ON_DATA`): on the owner of access `i` ([`Execute::OnData`]) when the
/// datum is access `i`; otherwise on its owner ([`Execute::OnNode`]), or, for a per-node
/// datum (a copy on every rank), where the written data say ([`Execute::Auto`]).
pub fn execute_on_datum(accesses: &[Access], data: DataId, owner: Owner) -> Execute {
    match accesses.iter().position(|a| a.known && a.data == data) {
        Some(i) => Execute::OnData(i),
        None => match owner {
            Owner::Rank(r) => Execute::OnNode(r),
            Owner::PerNode => Execute::Auto,
        },
    }
}

/// Whether planning a task with `options` calls a node-selection policy (then the
/// accesses' [`size`](Access::size)s matter, and only then: an adapter may leave them 0
/// otherwise). A task with mixed per-node data answers `false`: it fails to plan.
pub fn policy_needed(accesses: &[Access], options: &Options) -> bool {
    options.execute == Execute::Auto && written_owner(accesses) == Ok(Written::Policy)
}

/// The executor of an [`Execute::Auto`] task, or `None` if this rank takes no part.
fn executor_from_data(
    me: Rank,
    nranks: u32,
    accesses: &[Access],
    options: &Options,
    policies: &Policies,
) -> Result<Option<Executor>, InsertError> {
    Ok(Some(match written_owner(accesses)? {
        Written::Unknown => return Ok(None),
        Written::Owner(Owner::PerNode) => Executor::PerNode,
        Written::Owner(Owner::Rank(r)) => Executor::Rank(r),
        Written::Policy => Executor::Rank(policies.select(options.policy, me, nranks, accesses)?),
    }))
}

/// Plans one task insert on rank `me` of `nranks`: who runs the task, and what this rank
/// transfers and records in its cache for it. See the [module docs](self) for the rules
/// and the contract that makes the ranks' plans agree.
///
/// Pure: `cache` and `policies` are only read. Apply the plan's
/// [`cache`](Plan::cache) updates with [`Cache::apply`] afterwards.
///
/// # Errors
///
/// See [`InsertError`]: a bad index, rank or per-node mix, an unknown datum this rank
/// needs, a policy failure, or `T` too small. Every error but `Full` and `UnknownData`
/// arises identically on every rank that knows the task's data.
pub fn plan<const T: usize, const C: usize>(
    me: Rank,
    nranks: u32,
    accesses: &[Access],
    options: &Options,
    policies: &Policies,
    cache: &Cache<C>,
) -> Result<Plan<T>, InsertError> {
    let mut out = Plan::empty(None, false);
    plan_into(me, nranks, accesses, options, policies, cache, &mut out)?;
    Ok(out)
}

/// [`plan`], writing into a plan the caller owns and reuses, so that a runtime inserting
/// millions of tasks moves no plan by value (a [`Plan`] of `T` transfers is about
/// `60·T` bytes).
///
/// `out` is overwritten; on error its contents are unspecified (but valid).
///
/// # Errors
///
/// As for [`plan`].
pub fn plan_into<const T: usize, const C: usize>(
    me: Rank,
    nranks: u32,
    accesses: &[Access],
    options: &Options,
    policies: &Policies,
    cache: &Cache<C>,
    out: &mut Plan<T>,
) -> Result<(), InsertError> {
    out.reset(None, false);
    check_rank(me, nranks)?;
    for a in accesses.iter().filter(|a| a.known) {
        if let Owner::Rank(r) = a.owner {
            check_rank(r, nranks)?;
        }
    }

    let executor = match options.execute {
        Execute::OnNode(r) => {
            check_rank(r, nranks)?;
            Executor::Rank(r)
        }
        Execute::OnData(index) => {
            let a = accesses
                .get(index)
                .ok_or(InsertError::ExecuteOnDataOutOfRange {
                    index,
                    len: accesses.len(),
                })?;
            if !a.known {
                return Err(InsertError::UnknownData { index });
            }
            match a.owner {
                Owner::Rank(r) => Executor::Rank(r),
                Owner::PerNode => Executor::PerNode,
            }
        }
        Execute::Auto => match executor_from_data(me, nranks, accesses, options, policies)? {
            Some(executor) => executor,
            None => return Ok(()),
        },
    };

    let mixed = match executor {
        Executor::PerNode => accesses
            .iter()
            .any(|a| a.known && a.owner != Owner::PerNode),
        Executor::Rank(_) => accesses
            .iter()
            .any(|a| a.known && a.mode.writes() && a.owner == Owner::PerNode),
    };
    if mixed {
        return Err(InsertError::MixedPerNode);
    }

    let execute_here = match executor {
        Executor::PerNode => true,
        Executor::Rank(x) => x == me,
    };
    if execute_here {
        if let Some(index) = accesses.iter().position(|a| !a.known) {
            return Err(InsertError::UnknownData { index });
        }
    }

    out.reset(Some(executor), execute_here);
    let plan = out;
    let enabled = cache.is_enabled();
    let transfer = |a: &Access, peer: Rank, direction: Direction| Transfer {
        data: a.data,
        tag: a.tag,
        peer,
        direction,
        sync: options.ssend || a.mode.contains(AccessMode::SSEND),
        priority: options.priority,
    };

    if let Executor::Rank(x) = executor {
        // Rule 2: the executor receives what it reads and does not own.
        for (i, a) in accesses.iter().enumerate() {
            let Some(owner) = a.read_from() else {
                continue;
            };
            if owner == x || seen_before(accesses, i, |b| b.read_from().is_some()) {
                continue;
            }
            if me == x && !cache.cached_receive(a.data) {
                push(&mut plan.before, transfer(a, owner, Direction::Recv))?;
                if enabled {
                    push(&mut plan.cache, CacheUpdate::ReceivedSet { data: a.data })?;
                }
            } else if me == owner && !cache.cached_send(a.data, x) {
                push(&mut plan.before, transfer(a, x, Direction::Send))?;
                if enabled {
                    push(
                        &mut plan.cache,
                        CacheUpdate::SentSet {
                            data: a.data,
                            dest: x,
                        },
                    )?;
                }
            }
        }

        // Rule 3: the executor sends what it wrote back to the owner.
        for (i, a) in accesses.iter().enumerate() {
            if !a.written_back() || seen_before(accesses, i, Access::written_back) {
                continue;
            }
            let Some(owner) = a.owner.rank() else {
                continue;
            };
            if owner == x {
                continue;
            }
            if me == x {
                push(&mut plan.after, transfer(a, owner, Direction::Send))?;
            } else if me == owner {
                push(&mut plan.after, transfer(a, x, Direction::Recv))?;
            }
        }
    }

    // Rule 4: cache invalidation on every rank, or copy dropping with the cache disabled.
    for (i, a) in accesses.iter().enumerate() {
        if !a.known {
            continue;
        }
        if enabled {
            let writes = |b: &Access| b.known && b.mode.writes();
            if a.mode.writes() && !seen_before(accesses, i, writes) {
                push(&mut plan.cache, CacheUpdate::Invalidate { data: a.data })?;
            }
        } else if execute_here
            && a.read_from().is_some_and(|owner| owner != me)
            && !seen_before(accesses, i, |b| b.read_from().is_some())
        {
            push(&mut plan.cache, CacheUpdate::DropCopy { data: a.data })?;
        }
    }

    Ok(())
}

#[cfg(test)]
mod tests;
