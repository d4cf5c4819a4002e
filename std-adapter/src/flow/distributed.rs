//! The MPI insert-task utility: one sequential task flow, run across ranks.
//!
//! Every rank registers the same data with the same tags and owners, and calls
//! [`Context::insert`] for every task of the flow, in the same order. For each insert,
//! every rank runs the core's planner ([`starling_core::insert::plan_into`]) on what it
//! knows — the accesses, the owners, its [communication cache](starling_core::cache) and
//! the [node-selection policies](starling_core::select) — and all ranks reach the same
//! decision without exchanging a message: which rank executes the task, which data move
//! there before it, which written data go back to their owners after it. This module
//! performs that plan with the runtime: it posts the transfers as detached requests
//! ordered by the handles' implicit dependencies, submits the task on the executor, and
//! applies the cache updates.
//!
//! Replicated decisions (the cache, flushes, owner changes, policies, reductions) must be
//! made by every rank at the same point of the flow; see `docs/protocol.md` §10–12.

use starling_core::insert::{self, Access, Direction, Execute, Executor, Options};
use starling_core::select::{PolicyFn, PolicyId, SelectError};
use starling_core::{AccessMode, CommId, DataId, Owner, Priority, Rank, Tag, reduce};

use crate::api::context::{Context, RecvOpts, SendOpts, TaskHandle};
use crate::error::{CommError, TransferError};
use crate::runtime::data::{AnyCell, Handle, Interface};
use crate::runtime::task::{Access as TaskAccess, Codelet};
use crate::sync::{Arc, lock};

pub(crate) use state::{CACHE_CAPACITY, DistState, forget};
use state::{MpiInfo, Redux, forget_lru, new_budget};

/// An insert (or a registration) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InsertError {
    /// The planner refused the task (see the core's `InsertError`): a bad execute-on
    /// index or rank, per-node data mixed with owned data, a policy failure.
    #[error("the task cannot be planned: {0}")]
    Plan(insert::InsertError),
    /// A handle of the task was never given an owner with [`Context::mpi_register`].
    #[error("{0} has no owner: register it with mpi_register first")]
    NotRegistered(DataId),
    /// A registration or a transfer failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The policy registry refused the call.
    #[error("policy registry: {0}")]
    Policy(SelectError),
    /// The policy registry is full (24 slots, as in the reference).
    #[error("the policy registry is full")]
    PoliciesFull,
    /// A reduction needs the handle's reduction codelets
    /// ([`Context::set_reduction_methods`]) and an interface that can allocate a
    /// same-shaped buffer ([`Interface::shape`]).
    #[error("{0} cannot be reduced: no reduction methods or no shape")]
    NoReduction(DataId),
    /// The graph-agreement check found that the ranks' task flows differ
    /// ([`Context::check_agreement`]): every rank gets the same report, naming the first
    /// insert where they differ and what each rank saw there. Every later insert and
    /// check fails with it too: fix the flow (a branch on the rank, a tag or owner that
    /// differs between ranks, a policy that answers differently).
    #[error("{0}")]
    Diverged(Box<crate::tools::agreement::Divergence>),
    /// A transfer the task flow depends on failed on this rank (the first one is named:
    /// datum, peer, cause): the tasks that read what it carried did not run, nor any
    /// task after them on that data, and no value depending on it was sent. Every later
    /// insert fails with it too; the flow cannot give a right result any more.
    #[error("{0}")]
    Transfer(Box<TransferError>),
    /// A handle of the task is partitioned, or was a child of an undone partition
    /// ([`crate::partition`]): nothing was planned, on any rank (every rank partitions at
    /// the same point of the flow). Use the children, or unpartition first.
    #[error(transparent)]
    Partition(#[from] crate::runtime::data::PartitionError),
}

impl From<insert::InsertError> for InsertError {
    fn from(e: insert::InsertError) -> Self {
        Self::Plan(e)
    }
}

/// The tag a registration gives its datum ([`Context::mpi_register`],
/// [`Context::register_owned`]): one the application chose, or the next automatic one.
/// A [`Tag`] converts into it, so `ctx.mpi_register(&h, Tag(7), owner)` reads as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagChoice {
    /// The next tag of [`crate::tags::AUTO_TAGS`], in this rank's registration
    /// order: every rank that registers its data in the same order gives each datum the
    /// same tag, with no tag to invent. Read it back with [`Context::data_tag`]. While the
    /// graph-agreement check is on, each such registration is part of the checked flow
    /// (its interface, tag and owner): ranks that register in different orders are told
    /// so at the next check instead of exchanging the wrong data.
    Auto,
    /// This tag (outside [`crate::tags::AUTO_TAGS`] and
    /// [`crate::tags::RESERVED_TAGS`]).
    Given(Tag),
}

impl From<Tag> for TagChoice {
    fn from(tag: Tag) -> Self {
        Self::Given(tag)
    }
}

/// One access of an insert being built: a handle this rank knows, or none (temporary data
/// that exists on other ranks only).
struct Item {
    cell: Option<Arc<dyn AnyCell>>,
    mode: AccessMode,
    /// Given with `access_opt`: a datum that may be unknown on other ranks.
    temporary: bool,
}

enum Target {
    Auto,
    Node(Rank),
    Data(Arc<dyn AnyCell>),
}

/// A task insert being built ([`Context::insert`]): every rank builds the same one.
pub struct InsertBuilder<'a> {
    ctx: &'a Context,
    codelet: Codelet,
    items: Vec<Item>,
    target: Target,
    policy: Option<PolicyId>,
    priority: i32,
    callback: Option<Box<dyn FnOnce() + Send>>,
    /// Keep the copies this insert fetches even with the cache off, and never evict them
    /// for the byte budget (a get-data-on-node or a migration: the copy is the point; the
    /// flag is the same on every rank, so both ranks of a pair agree).
    pub(crate) keep_copies: bool,
}

impl core::fmt::Debug for InsertBuilder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InsertBuilder")
            .field("codelet", &self.codelet)
            .field("accesses", &self.items.len())
            .finish_non_exhaustive()
    }
}

/// What an insert did on this rank.
#[derive(Clone, Debug)]
pub struct Inserted {
    /// The rank that executes the task (`None`: every rank, for per-node data; or this
    /// rank took no part because a written temporary datum is unknown here).
    pub executor: Option<Rank>,
    /// Whether this rank runs the task.
    pub executed_here: bool,
    /// Transfers this rank posted for the task (before and after it).
    pub transfers: usize,
    /// The task, to wait for it alone ([`TaskHandle::wait`]): `Some` on the rank that runs
    /// it once [`InsertBuilder::submit`] submitted it, as the reference returns the task
    /// only where it executes; `None` on the other ranks, and from
    /// [`InsertBuilder::build`] and [`InsertBuilder::exchange_before`] (the application
    /// submits the task itself: [`BuiltTask::submit`] returns its handle).
    pub task: Option<TaskHandle>,
}

impl<'a> InsertBuilder<'a> {
    /// Adds an access to `h` with `mode` (R, W, RW, SCRATCH, REDUX, COMMUTE, SSEND).
    /// `mode | AccessMode::SSEND` is how an insert asks for a synchronous send of that
    /// datum (`STARPU_SSEND`; the only spelling).
    #[must_use]
    pub fn access<I: Interface>(mut self, h: &Handle<I>, mode: AccessMode) -> Self {
        self.items.push(Item {
            cell: Some(h.erased()),
            mode,
            temporary: false,
        });
        self
    }

    /// Adds an access to a datum that may not exist on this rank (the reference's
    /// temporary data: ranks that do not know it pass `None`).
    #[must_use]
    pub fn access_opt<I: Interface>(mut self, h: Option<&Handle<I>>, mode: AccessMode) -> Self {
        self.items.push(Item {
            cell: h.map(Handle::erased),
            mode,
            temporary: true,
        });
        self
    }

    crate::api::context::access_methods!();

    /// Runs the task on `rank` (the reference's `STARPU_EXECUTE_ON_NODE`). `None` changes
    /// nothing — the written data, an [`InsertBuilder::on_data`] or the policy decide — as
    /// the reference ignores `STARPU_EXECUTE_ON_NODE, -1`, so a computed `Option<Rank>`
    /// needs no `if`. A [`Rank`] converts into `Some`: `.on_node(Rank(1))`.
    #[must_use]
    pub fn on_node(mut self, rank: impl Into<Option<Rank>>) -> Self {
        if let Some(r) = rank.into() {
            self.target = Target::Node(r);
        }
        self
    }

    /// Runs the task on the owner of `h` (`STARPU_EXECUTE_ON_DATA`).
    #[must_use]
    pub fn on_data<I: Interface>(mut self, h: &Handle<I>) -> Self {
        self.target = Target::Data(h.erased());
        self
    }

    /// Chooses the executor with `policy` when the written data do not decide it
    /// (`STARPU_NODE_SELECTION_POLICY`).
    #[must_use]
    pub fn policy(mut self, policy: PolicyId) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The task's priority; it orders the task and its transfers (`STARPU_PRIORITY`).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Runs `f` after the task, on the executor.
    #[must_use]
    pub fn callback(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.callback = Some(Box::new(f));
        self
    }

    /// Plans and performs the insert on this rank: transfers before, the task on the
    /// executor, write-backs after, cache updates (`starpu_mpi_task_insert`).
    ///
    /// # Errors
    /// [`InsertError`]: the same on every rank that knows the task's data, except
    /// [`InsertError::NotRegistered`] (a rank-local registration bug).
    pub fn submit(self) -> Result<Inserted, InsertError> {
        let (built, post) = self.build()?;
        let mut inserted = built.inserted;
        inserted.task = built.task.map(BuiltTask::submit);
        post.finish();
        Ok(inserted)
    }

    /// For a task the application builds itself: performs the transfers before it on
    /// every rank (`starpu_mpi_task_exchange_data_before_execution`) and returns the
    /// write-backs to perform after submitting it
    /// (`starpu_mpi_task_exchange_data_after_execution`, [`PostBuild::finish`]). The
    /// codelet given to [`Context::insert`] is not used; [`Inserted::executed_here`] says
    /// whether this rank must run the task.
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`].
    pub fn exchange_before(self) -> Result<(Inserted, PostBuild<'a>), InsertError> {
        let (built, post) = self.build()?;
        Ok((built.inserted, post))
    }

    /// The first half of [`InsertBuilder::submit`]: plans, posts the transfers before the
    /// task and returns the task on the executor, unsubmitted
    /// (`starpu_mpi_task_build`). Submit it, then call [`PostBuild::finish`]
    /// (`starpu_mpi_task_post_build`).
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`].
    pub fn build(self) -> Result<(Built<'a>, PostBuild<'a>), InsertError> {
        let ctx = self.ctx;
        let mut dist = lock(&ctx.dist);
        let dist = &mut *dist;
        let me = ctx.rank;
        if let Some(d) = &dist.agreement.diverged {
            return Err(InsertError::Diverged(d.clone()));
        }
        for cell in self.items.iter().filter_map(|i| i.cell.as_ref()) {
            cell.usable()?;
        }
        // Describe the accesses for the planner (in a buffer kept across inserts).
        let mut accesses = core::mem::take(&mut dist.accesses);
        accesses.clear();
        for item in &self.items {
            accesses.push(match &item.cell {
                None => Access {
                    data: DataId(u32::MAX),
                    mode: item.mode,
                    owner: Owner::Rank(Rank(0)),
                    tag: Tag(0),
                    size: 0,
                    known: false,
                },
                Some(cell) => {
                    let info = dist
                        .info
                        .get(&cell.id())
                        .ok_or_else(|| InsertError::NotRegistered(cell.id()))?;
                    Access::new(cell.id(), item.mode, info.owner, info.tag, 0)
                }
            });
        }
        let execute = match &self.target {
            Target::Auto => Execute::Auto,
            Target::Node(r) => Execute::OnNode(*r),
            Target::Data(cell) => match dist.info.get(&cell.id()) {
                Some(info) => insert::execute_on_datum(&accesses, cell.id(), info.owner),
                None => return Err(InsertError::NotRegistered(cell.id())),
            },
        };
        let options = Options {
            execute,
            policy: self.policy,
            priority: Priority(self.priority),
            // One spelling of a synchronous send: `AccessMode::SSEND` on the datum's
            // access (`STARPU_SSEND`), which the planner reads per transfer.
            ssend: false,
        };
        // Sizes only matter when a policy chooses the executor: compute them then (it
        // may allocate a lazily registered copy).
        if insert::policy_needed(&accesses, &options) {
            for (a, item) in accesses.iter_mut().zip(&self.items) {
                if let Some(cell) = &item.cell {
                    a.size = cell.packed_size() as u64;
                }
            }
        }
        // A pending reduction is wrapped up before the datum is read without REDUX.
        if !dist.redux.is_empty() {
            for (a, item) in accesses.iter().zip(&self.items) {
                // (the reduction table is looked up only for an access that would wrap
                // up a pending reduction)
                if let (Some(cell), true) = (&item.cell, reduce::wraps_up(a, true)) {
                    let pending = dist
                        .redux
                        .get(&cell.id())
                        .is_some_and(|r| !r.contributors.is_empty());
                    if pending {
                        collective::reduce(ctx, dist, cell, 2)?;
                    }
                }
            }
        }
        insert::plan_into(
            me,
            ctx.size,
            &accesses,
            &options,
            &dist.policies,
            &dist.cache,
            &mut dist.plan,
        )?;
        if dist.agreement.enabled {
            dist.agreement.record(
                self.codelet.name(),
                accesses.iter().zip(&self.items).map(|(a, i)| {
                    let datum = (!i.temporary).then_some((a.tag, a.owner));
                    (datum, a.mode)
                }),
                &options,
                dist.plan.executor,
            );
        }
        // A rank whose flow already lost a transfer performs no more of it (recorded
        // above all the same: the ranks' flows still agree).
        ctx.transfer_failure()
            .map_err(|e| InsertError::Transfer(Box::new(e)))?;
        let plan = &dist.plan;
        let executor = match plan.executor {
            Some(Executor::Rank(r)) => Some(r),
            _ => None,
        };
        let execute_here = plan.execute_here;
        let cell_of = |data: DataId| {
            self.items
                .iter()
                .find_map(|i| i.cell.as_ref().filter(|c| c.id() == data).cloned())
        };
        // Reductions: record the executor as a contributor on every rank; a
        // non-owner executor initialises its copy first.
        for (a, item) in accesses.iter().zip(&self.items) {
            if !(a.known && a.mode.contains(AccessMode::REDUX)) {
                continue;
            }
            let (Some(cell), Some(x)) = (&item.cell, executor) else {
                continue;
            };
            if let Some(r) = dist.redux.get_mut(&cell.id()) {
                r.contributors.insert(x);
                if reduce::needs_init(me, x, a.owner, r.initialised) {
                    r.initialised = true;
                    let init = r.init.clone();
                    ctx.runtime.submit_task(
                        init,
                        vec![TaskAccess {
                            cell: Arc::clone(cell),
                            mode: AccessMode::W,
                        }],
                        self.priority,
                        None,
                        None,
                    );
                }
            }
        }
        let fake = ctx.fake.load(core::sync::atomic::Ordering::Relaxed);
        let mut transfers = 0;
        for t in &plan.before {
            if let Some(cell) = cell_of(t.data) {
                transfers += 1;
                if !fake {
                    post_transfer(ctx, dist.info[&t.data].comm, cell, t)?;
                }
            }
        }
        let task = execute_here.then(|| {
            let accesses = self
                .items
                .iter()
                .filter_map(|i| {
                    i.cell.as_ref().map(|c| TaskAccess {
                        cell: Arc::clone(c),
                        mode: i.mode,
                    })
                })
                .collect();
            BuiltTask {
                ctx,
                codelet: self.codelet.clone(),
                accesses,
                priority: self.priority,
                callback: self.callback,
            }
        });
        let after: Vec<_> = plan
            .after
            .iter()
            .filter_map(|t| cell_of(t.data).map(|c| (dist.info[&t.data].comm, c, *t)))
            .collect();
        transfers += after.len();
        let updates: Vec<_> = plan.cache.iter().copied().collect();
        // Recency of the cached copies the task reads, for the byte budget.
        if let (Some(b), Some(x)) = (dist.budget.as_deref_mut(), executor) {
            b.touch_reads(me, x, &accesses);
        }
        dist.accesses = accesses;
        Ok((
            Built {
                task,
                inserted: Inserted {
                    executor,
                    executed_here: execute_here,
                    transfers,
                    task: None,
                },
            },
            PostBuild {
                ctx,
                after,
                updates,
                fake,
                keep_copies: self.keep_copies,
                items: self.items,
            },
        ))
    }
}

/// Posts one transfer of a plan. Its outcome goes to the runtime: a failed receive
/// poisons the datum (no task reads it), a failed send is recorded; both are reported by
/// [`Context::try_wait_for_all`], [`Context::mpi_wait_for_all`], the next insert and
/// shutdown. The completion itself has nothing left to do.
fn post_transfer(
    ctx: &Context,
    comm: CommId,
    cell: Arc<dyn AnyCell>,
    t: &insert::Transfer,
) -> Result<(), CommError> {
    match t.direction {
        Direction::Send => {
            let opts = SendOpts {
                comm,
                priority: t.priority.0,
                sync: t.sync,
                unlock: None,
            };
            ctx.post_flow_send(
                cell,
                t.peer,
                t.tag,
                opts,
                crate::io::progress::Done::new(|_| {}),
            )
        }
        Direction::Recv => {
            let opts = RecvOpts {
                comm,
                ..RecvOpts::default()
            };
            ctx.post_flow_recv(
                cell,
                t.peer,
                t.tag,
                opts,
                crate::io::progress::Done::new(|_| {}),
            )
        }
    }
}

/// The task of an insert built with [`InsertBuilder::build`], on its executor.
pub struct Built<'a> {
    /// The task, on the executor only (`None` elsewhere).
    pub task: Option<BuiltTask<'a>>,
    /// What the insert does on this rank.
    pub inserted: Inserted,
}

impl core::fmt::Debug for Built<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Built")
            .field("inserted", &self.inserted)
            .finish_non_exhaustive()
    }
}

/// A task built by [`InsertBuilder::build`], to submit on its executor.
pub struct BuiltTask<'a> {
    ctx: &'a Context,
    codelet: Codelet,
    accesses: Vec<TaskAccess>,
    priority: i32,
    callback: Option<Box<dyn FnOnce() + Send>>,
}

impl core::fmt::Debug for BuiltTask<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BuiltTask")
            .field("codelet", &self.codelet)
            .finish_non_exhaustive()
    }
}

impl BuiltTask<'_> {
    /// Changes the task's priority before submitting it.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Submits the task, and returns a handle to wait for it alone ([`TaskHandle::wait`]).
    pub fn submit(self) -> TaskHandle {
        let outcome = self.ctx.runtime.submit_task(
            self.codelet,
            self.accesses,
            self.priority,
            self.callback,
            None,
        );
        TaskHandle::new(self.ctx, outcome)
    }
}

/// The second half of an insert built with [`InsertBuilder::build`]: the write-backs and
/// cache updates, to perform after the task was submitted.
#[must_use = "call finish() after submitting the task, or the write-backs never happen"]
pub struct PostBuild<'a> {
    ctx: &'a Context,
    after: Vec<(CommId, Arc<dyn AnyCell>, insert::Transfer)>,
    updates: Vec<insert::CacheUpdate>,
    fake: bool,
    /// The insert's accesses (their cells, to find a datum's).
    items: Vec<Item>,
    keep_copies: bool,
}

impl core::fmt::Debug for PostBuild<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PostBuild")
            .field("write_backs", &self.after.len())
            .finish_non_exhaustive()
    }
}

impl PostBuild<'_> {
    /// Posts the write-backs and applies the cache updates (`starpu_mpi_task_post_build`).
    pub fn finish(self) {
        let ctx = self.ctx;
        for (comm, cell, t) in self.after {
            if !self.fake {
                // The ranks are in range: the planner checked them.
                let _ = post_transfer(ctx, comm, cell, &t);
            }
        }
        let mut dist = lock(&ctx.dist);
        let dist = &mut *dist;
        for u in &self.updates {
            if self.keep_copies && matches!(u, insert::CacheUpdate::DropCopy { .. }) {
                continue;
            }
            apply_update(ctx, dist, u, &self.items, !self.keep_copies);
        }
    }
}

/// The value of `data` changed on every rank at this point of the flow (an unpartition
/// gathered its children into it): what was sent and received of it is forgotten, as for
/// a write, so that its next reader fetches it again. Local copies are kept (they are
/// stale on the ranks that did not hold the children's values, and no read trusts them).
pub(crate) fn invalidate(ctx: &Context, data: DataId) {
    let mut dist = lock(&ctx.dist);
    let dist = &mut *dist;
    if dist.info.get(&data).is_some() {
        dist.cache.clear_sent(data);
        let _ = dist.cache.clear_received(data);
        forget_lru(dist, data);
    }
}

/// Frees a copy's memory once the accesses already submitted on it are done.
fn release_after_pending(ctx: &Context, cell: Arc<dyn AnyCell>) {
    let rt = ctx.runtime.clone();
    let c = Arc::clone(&cell);
    ctx.runtime.submit_hook(
        vec![TaskAccess {
            cell,
            mode: AccessMode::W,
        }],
        0,
        move |node| {
            c.release();
            rt.complete(node);
        },
    );
}

impl Context {
    /// Gives `h` a tag and an owner for the insert-task utility, on the world
    /// communicator (`starpu_mpi_data_register`). Every rank registers every datum it
    /// uses, with the same tag and owner; `Owner::PerNode` gives every rank its own
    /// instance (`STARPU_MPI_PER_NODE`). The tag is a [`Tag`], or [`TagChoice::Auto`]: the
    /// next automatic tag in registration order ([`crate::tags::AUTO_TAGS`]).
    ///
    /// # Errors
    /// [`CommError::TagInUse`] when another live handle of this rank has `tag`;
    /// [`CommError::RankOutOfRange`] for an owner outside the world;
    /// [`CommError::ReservedTag`] for a tag the runtime keeps for itself;
    /// [`CommError::AutoTagRange`] for an explicit tag among the automatic ones;
    /// [`CommError::AutoTagsExhausted`] when no automatic tag is left. Nothing is
    /// registered then, and no automatic tag is used up.
    pub fn mpi_register<I: Interface>(
        &self,
        h: &Handle<I>,
        tag: impl Into<TagChoice>,
        owner: Owner,
    ) -> Result<(), InsertError> {
        self.mpi_register_comm(h, tag, owner, CommId::WORLD)
    }

    /// [`Context::mpi_register`] on communicator `comm` (`starpu_mpi_data_register_comm`).
    ///
    /// # Errors
    /// As for [`Context::mpi_register`].
    pub fn mpi_register_comm<I: Interface>(
        &self,
        h: &Handle<I>,
        tag: impl Into<TagChoice>,
        owner: Owner,
        comm: CommId,
    ) -> Result<(), InsertError> {
        if let Owner::Rank(r) = owner {
            self.check_rank(r)?;
        }
        let tag = match tag.into() {
            TagChoice::Given(tag) => {
                self.check_explicit_tag(tag)?;
                self.set_tag_unchecked(h, tag)?;
                tag
            }
            TagChoice::Auto => {
                // Under the registry's lock from choosing the tag to recording it: two
                // threads of a rank registering at once still get distinct tags (their
                // order is theirs to keep the same on every rank).
                let mut dist = lock(&self.dist);
                let tag = Tag(dist.next_auto_tag);
                if !crate::tags::AUTO_TAGS.contains(&tag.0) {
                    return Err(CommError::AutoTagsExhausted.into());
                }
                // Never in use: no explicit registration can take an automatic tag.
                self.set_tag_unchecked(h, tag)?;
                dist.next_auto_tag += 1;
                if dist.agreement.enabled {
                    let name =
                        crate::tools::agreement::registration_name(h.erased().interface_name());
                    dist.agreement.record(
                        &name,
                        core::iter::once((Some((tag, owner)), AccessMode::W)),
                        &Options::default(),
                        None,
                    );
                }
                tag
            }
        };
        let mut dist = lock(&self.dist);
        dist.info.insert(h.id(), MpiInfo { tag, owner, comm });
        dist.cells.insert(h.id(), h.erased());
        Ok(())
    }

    /// Registers data that `owner` holds: the owner (and every rank, for per-node data)
    /// allocates it now with `init`, the other ranks only on first use (the reference's
    /// home node −1), then [`Context::mpi_register`]s it.
    ///
    /// # Errors
    /// As for [`Context::mpi_register`].
    pub fn register_owned<I: Interface>(
        &self,
        tag: impl Into<TagChoice>,
        owner: Owner,
        init: impl FnOnce() -> I + Send + 'static,
    ) -> Result<Handle<I>, InsertError> {
        let local = match owner {
            Owner::Rank(r) => r == self.rank,
            Owner::PerNode => true,
        };
        let h = if local {
            self.register(init())
        } else {
            self.register_lazy(init)
        };
        self.mpi_register(&h, tag, owner)?;
        Ok(h)
    }

    /// The owner of `h` (`starpu_mpi_data_get_rank`).
    pub fn data_owner<I: Interface>(&self, h: &Handle<I>) -> Option<Owner> {
        lock(&self.dist).info.get(&h.id()).map(|i| i.owner)
    }

    /// The insert-task tag of `h` (`starpu_mpi_data_get_tag`).
    pub fn data_tag<I: Interface>(&self, h: &Handle<I>) -> Option<Tag> {
        lock(&self.dist).info.get(&h.id()).map(|i| i.tag)
    }

    /// Changes the owner of `h` without moving data (`starpu_mpi_data_set_rank`). Every
    /// rank must call it at the same point of the flow. Unlike the reference, it clears
    /// the datum's cache flags, which would otherwise disagree between the old owner's
    /// readers and the new owner (`docs/protocol.md` §10); local copies are kept.
    ///
    /// # Errors
    /// [`InsertError::NotRegistered`]; [`CommError::RankOutOfRange`].
    pub fn set_data_owner<I: Interface>(
        &self,
        h: &Handle<I>,
        owner: Owner,
    ) -> Result<(), InsertError> {
        if let Owner::Rank(r) = owner {
            self.check_rank(r)?;
        }
        let mut dist = lock(&self.dist);
        let dist = &mut *dist;
        let info = dist
            .info
            .get_mut(&h.id())
            .ok_or_else(|| InsertError::NotRegistered(h.id()))?;
        info.owner = owner;
        dist.cache.on_owner_change(h.id());
        forget_lru(dist, h.id());
        Ok(())
    }

    /// Starts building a task insert (`starpu_mpi_task_insert`): add its accesses and
    /// options, then [`InsertBuilder::submit`]. Every rank calls it for every task, in
    /// the same order.
    pub fn insert(&self, codelet: &Codelet) -> InsertBuilder<'_> {
        InsertBuilder {
            ctx: self,
            codelet: codelet.clone(),
            // The stencil's five accesses without a reallocation.
            items: Vec::with_capacity(5),
            target: Target::Auto,
            policy: None,
            priority: 0,
            callback: None,
            keep_copies: false,
        }
    }

    // ----- node selection -------------------------------------------------------------

    /// Registers a node-selection policy (`starpu_mpi_node_selection_register_policy`);
    /// every rank must register the same policies in the same order.
    ///
    /// # Errors
    /// [`InsertError::PoliciesFull`] past the reference's 24 slots (the reference aborts).
    pub fn register_policy(&self, policy: PolicyFn) -> Result<PolicyId, InsertError> {
        lock(&self.dist)
            .policies
            .register(policy)
            .map_err(|_| InsertError::PoliciesFull)
    }

    /// Unregisters a policy (`starpu_mpi_node_selection_unregister_policy`).
    ///
    /// # Errors
    /// [`InsertError::Policy`] for the built-in policy or an unregistered slot (the
    /// reference aborts).
    pub fn unregister_policy(&self, policy: PolicyId) -> Result<(), InsertError> {
        lock(&self.dist)
            .policies
            .unregister(policy)
            .map_err(InsertError::Policy)
    }

    /// Makes `policy` the default of inserts that do not name one
    /// (`starpu_mpi_node_selection_set_current_policy`).
    ///
    /// # Errors
    /// [`InsertError::Policy`] for an unregistered slot.
    pub fn set_current_policy(&self, policy: PolicyId) -> Result<(), InsertError> {
        lock(&self.dist)
            .policies
            .set_current(policy)
            .map_err(InsertError::Policy)
    }

    /// The default policy (`starpu_mpi_node_selection_get_current_policy`).
    pub fn current_policy(&self) -> PolicyId {
        lock(&self.dist).policies.current()
    }
}

mod cache;
mod collective;
use cache::apply_update;
pub(crate) mod state;
