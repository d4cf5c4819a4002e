//! The per-rank API: register data, submit tasks, move data between ranks.

use std::collections::HashMap;
use std::sync::mpsc;

use starling_core::{AccessMode, CommId, DataId, Rank, Tag};

use crate::error::{CommError, Noted, TaskError, TransferError};
use crate::io::progress::{Command, Drive};
use crate::runtime::data::{AnyCell, Cell, DataMut, DataRef, Handle, Interface};
use crate::runtime::pool::BufferPool;
use crate::runtime::task::{Access, Codelet, NodeId, Runtime, TaskTag};
use crate::sync::{Arc, AtomicBool, AtomicU32, Mutex, Ordering, lock};
use crate::trace::{self};

mod access;
mod p2p;
mod request;

pub(crate) use access::methods as access_methods;

pub use request::Request;
use request::drive_until;
pub(crate) use request::{ReqWhat, request_pair};

/// Sends a command to this rank's progression thread.
pub(crate) type CommandSink = Arc<dyn Fn(Command) + Send + Sync>;

/// One rank: its data, its tasks, its communication.
///
/// Every rank of a job runs the same program with its own `Context` (see
/// [`crate::run_local`]). Methods take `&self`: a context may be shared by the threads of
/// its rank.
pub struct Context {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) runtime: Runtime,
    pub(crate) commands: CommandSink,
    next_data: AtomicU32,
    next_comm: AtomicU32,
    /// Tags of live handles, both ways (unique per rank).
    tags: Mutex<(HashMap<Tag, DataId>, HashMap<DataId, Tag>)>,
    pedantic_isend: bool,
    pub(crate) reports: Arc<Mutex<Vec<Noted>>>,
    pub(crate) tag_base: i32,
    /// The insert-task utility's state: registrations, cache, policies.
    pub(crate) dist: Mutex<crate::flow::distributed::state::DistState>,
    /// Fake rank mode: every communication is dropped.
    pub(crate) fake: AtomicBool,
    /// The rank's progress, for threads that drive it while they wait
    /// ([`crate::RankConfig::caller_drives`]).
    driver: Option<Arc<dyn Drive>>,
    /// Recycled transfer buffers, shared with the progression.
    pool: Arc<BufferPool>,
    /// Sends from this size up read their data in place.
    in_place_min: usize,
    /// [`Progression::blocking_in_place_min`].
    blocking_in_place_min: usize,
    /// [`Progression::device_min`].
    device_min: usize,
    /// The next free id of a split or duplicated communicator (`crate::comm`).
    pub(crate) next_split: AtomicU32,
    /// Pending requests and collectives, for the hang explainer.
    pub(crate) tracker: Arc<crate::tools::hang::Tracker>,
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Options of a send: what [`crate::p2p::SendBuilder`]'s options set, and what the
/// transfers of the task flow pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendOpts {
    /// The communicator ([`CommId::WORLD`] by default).
    pub(crate) comm: CommId,
    /// The send's priority: among ready sends, higher leaves first.
    pub(crate) priority: i32,
    /// Synchronous mode: the payload leaves only once the receiver posted its receive.
    pub(crate) sync: bool,
    /// A task tag to unlock when the send completes.
    pub(crate) unlock: Option<TaskTag>,
}

/// Options of a receive: what [`crate::p2p::RecvBuilder`]'s options set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvOpts {
    /// The communicator ([`CommId::WORLD`] by default).
    pub(crate) comm: CommId,
    /// Order the receive after earlier accesses to the handle, and later ones after it
    /// (default `true`; the reference's `_sequential_consistency` variant switches it off).
    pub(crate) sequential_consistency: bool,
    /// A task tag to unlock when the receive completes.
    pub(crate) unlock: Option<TaskTag>,
}

impl Default for RecvOpts {
    fn default() -> Self {
        Self {
            comm: CommId::WORLD,
            sequential_consistency: true,
            unlock: None,
        }
    }
}

/// A handle of any interface, for the arrays of transfers ([`Context::send_all`],
/// [`Context::recv_all`]) and the collectives (`AnyHandle::from(&handle)`).
#[derive(Clone)]
pub struct AnyHandle {
    cell: Arc<dyn AnyCell>,
}

impl core::fmt::Debug for AnyHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AnyHandle")
            .field("id", &self.cell.id())
            .finish()
    }
}

impl AnyHandle {
    pub(crate) fn cell(&self) -> Arc<dyn AnyCell> {
        Arc::clone(&self.cell)
    }
}

impl<I: Interface> From<&Handle<I>> for AnyHandle {
    fn from(h: &Handle<I>) -> Self {
        Self { cell: h.erased() }
    }
}

/// A value handed from whichever thread finishes something to the one thread that
/// waits for it: an acquisition's node ([`Context::acquire`]), a barrier's end
/// ([`Context::barrier`]). It replaces a `std::sync::mpsc` channel, which took four
/// allocations a wait (two of them 512-byte blocks aligned to 128 bytes) where this takes
/// one of 32 bytes. When the giver is the waiting thread itself (an acquisition of a free
/// handle, whose hook runs from its submission; a barrier ended while its thread drives
/// the rank's progress), no wake-up is made at all.
struct Handoff {
    /// The value, once given; [`Handoff::NOT_YET`] before. `core`'s atomic under `loom`
    /// too: the waiter parks with `std`'s `park`, and no model waits on one.
    value: core::sync::atomic::AtomicU64,
    /// The thread that waits.
    waiter: std::thread::Thread,
}

impl Handoff {
    /// Nothing given yet (node ids count up from 0 and never reach it).
    const NOT_YET: u64 = u64::MAX;

    /// A handoff to the calling thread, which alone may [`Handoff::wait`].
    fn new() -> Self {
        Self {
            value: core::sync::atomic::AtomicU64::new(Self::NOT_YET),
            waiter: std::thread::current(),
        }
    }

    /// Gives `value` (not [`Handoff::NOT_YET`]) to the waiting thread and wakes it,
    /// unless this is that thread: an unpark then would only leave a stray token, and
    /// its next `park` (its own, or the runtime's while it drives progress) would return
    /// at once.
    fn give(&self, value: u64) {
        debug_assert_ne!(value, Self::NOT_YET);
        self.value.store(value, Ordering::Release);
        if std::thread::current().id() != self.waiter.id() {
            self.waiter.unpark();
        }
    }

    /// Whether the value was given.
    fn given(&self) -> bool {
        self.value.load(Ordering::Acquire) != Self::NOT_YET
    }

    /// Waits for the value (a wake-up without it, which `park` allows, waits again).
    fn wait(&self) -> u64 {
        debug_assert_eq!(std::thread::current().id(), self.waiter.id());
        loop {
            let value = self.value.load(Ordering::Acquire);
            if value != Self::NOT_YET {
                return value;
            }
            std::thread::park();
        }
    }
}

/// A handle acquired by the application ([`Context::acquire`]): later accesses wait
/// until it is dropped (the reference's `starpu_data_release`).
pub struct Acquired<I: Interface> {
    runtime: Runtime,
    node: NodeId,
    handle: Handle<I>,
    mode: AccessMode,
}

impl<I: Interface> core::fmt::Debug for Acquired<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Acquired")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl<I: Interface> Acquired<I> {
    /// Reads the data.
    pub fn get(&self) -> DataRef<'_, I> {
        self.handle.cell.read()
    }

    /// Writes the data.
    ///
    /// # Panics
    /// When the handle was acquired for reading only.
    pub fn get_mut(&self) -> DataMut<'_, I> {
        assert!(
            self.mode.writes(),
            "the handle was acquired for reading only"
        );
        self.handle.cell.write()
    }
}

impl<I: Interface> Drop for Acquired<I> {
    fn drop(&mut self) {
        self.runtime.complete(self.node);
    }
}

/// A task being built ([`Context::task`]).
pub struct TaskBuilder<'a> {
    ctx: &'a Context,
    codelet: Codelet,
    accesses: Vec<Access>,
    priority: i32,
    callback: Option<Box<dyn FnOnce() + Send>>,
    tag: Option<TaskTag>,
}

impl core::fmt::Debug for TaskBuilder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TaskBuilder")
            .field("codelet", &self.codelet)
            .finish_non_exhaustive()
    }
}

impl TaskBuilder<'_> {
    /// Adds an access to `h` with `mode`.
    ///
    /// # Panics
    /// When `h` is partitioned, or was a child of an undone partition
    /// ([`crate::partition`]): a caller bug, as using an unregistered handle is. The
    /// inserts and transfers, which return errors, return
    /// [`PartitionError`](crate::PartitionError) instead.
    #[must_use]
    pub fn access<I: Interface>(mut self, h: &Handle<I>, mode: AccessMode) -> Self {
        h.expect_usable();
        self.accesses.push(Access {
            cell: h.erased(),
            mode,
        });
        self
    }

    access::methods!();

    /// The task's priority (higher runs first among ready tasks).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Runs `f` once after the task's kernel.
    #[must_use]
    pub fn callback(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.callback = Some(Box::new(f));
        self
    }

    /// Unlocks `tag` when the task completes.
    #[must_use]
    pub fn tag(mut self, tag: TaskTag) -> Self {
        self.tag = Some(tag);
        self
    }

    /// Submits the task, and returns a handle to wait for it alone
    /// ([`TaskHandle::wait`], the reference's `starpu_task_wait`). Dropping the handle
    /// changes nothing: the task runs all the same, and [`Context::wait_for_all`] waits
    /// for it.
    pub fn submit(self) -> TaskHandle {
        let outcome = self.ctx.runtime.submit_task(
            self.codelet,
            self.accesses,
            self.priority,
            self.callback,
            self.tag,
        );
        TaskHandle::new(self.ctx, outcome)
    }
}

/// A submitted task, to wait for it alone ([`TaskBuilder::submit`]; the reference's
/// `starpu_task_wait` on a task submitted with `detach = 0`). Cheap: a shared pointer to
/// the runtime and the task's id; clone it to wait from several places. Dropping it
/// detaches nothing and waits for nothing.
#[derive(Clone)]
pub struct TaskHandle {
    runtime: Runtime,
    id: NodeId,
}

impl core::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("outcome", &self.test())
            .finish_non_exhaustive()
    }
}

impl TaskHandle {
    /// The handle of task `id` of `ctx`'s runtime.
    pub(crate) fn new(ctx: &Context, id: NodeId) -> Self {
        Self {
            runtime: ctx.runtime.clone(),
            id,
        }
    }

    /// Blocks until the task completed: it ran (its kernel and its callback), or it
    /// will never run.
    ///
    /// # Errors
    /// [`TaskError::Upstream`]: the task did not run, because a value it reads depends on
    /// a failed transfer ([`Context::try_wait_for_all`] reports the same failure);
    /// [`TaskError::Failed`]: its kernel or callback panicked. Either way the task is
    /// complete, and shutdown reports the failure too.
    ///
    /// Call it from the application's thread, as `starpu_task_wait` is: from inside a
    /// task or a callback it can wait for a task that needs the very worker it holds (on
    /// a rank with one worker, it waits forever).
    pub fn wait(&self) -> Result<(), TaskError> {
        self.runtime.wait_outcome(self.id)
    }

    /// The task's outcome if it completed, `None` while it has not (without waiting).
    pub fn test(&self) -> Option<Result<(), TaskError>> {
        self.runtime.task_outcome(self.id)
    }

    /// Whether the task completed (ran, failed or was skipped).
    pub fn is_done(&self) -> bool {
        self.test().is_some()
    }
}

/// How a [`Context`] reaches its rank's progression.
pub(crate) struct Progression {
    /// Sends commands to the progression.
    pub(crate) commands: CommandSink,
    /// Drives progress from a waiting thread, when allowed.
    pub(crate) driver: Option<Arc<dyn Drive>>,
    /// Recycled transfer buffers.
    pub(crate) pool: Arc<BufferPool>,
    /// Sends from this size up read their data in place ([`crate::RankConfig::in_place_min`]).
    pub(crate) in_place_min: usize,
    /// Blocking sends from this size up read their data in place: the first size above
    /// the eager limit, or `in_place_min` when smaller.
    pub(crate) blocking_in_place_min: usize,
    /// Sends from this size up may carry a device value instead of bytes
    /// ([`crate::Transport::carries_device_values`]); `usize::MAX`: never.
    pub(crate) device_min: usize,
}

impl Context {
    pub(crate) fn new(
        rank: Rank,
        size: u32,
        runtime: Runtime,
        progression: Progression,
        pedantic_isend: bool,
        tag_base: i32,
    ) -> Self {
        let Progression {
            commands,
            driver,
            pool,
            in_place_min,
            blocking_in_place_min,
            device_min,
        } = progression;
        Self {
            rank,
            size,
            runtime,
            commands,
            next_data: AtomicU32::new(0),
            next_comm: AtomicU32::new(1),
            tags: Mutex::new((HashMap::new(), HashMap::new())),
            pedantic_isend,
            reports: Arc::new(Mutex::new(Vec::new())),
            tag_base,
            dist: Mutex::new(crate::flow::distributed::state::DistState::from_env(size)),
            fake: AtomicBool::new(false),
            driver,
            pool,
            in_place_min,
            blocking_in_place_min,
            device_min,
            next_split: AtomicU32::new(crate::tags::FIRST_SPLIT_ID),
            tracker: Arc::new(crate::tools::hang::Tracker::new()),
        }
    }

    /// How many recycled transfer buffers the rank keeps (tests).
    #[cfg(test)]
    pub(crate) fn pooled_buffers(&self) -> usize {
        self.pool.len()
    }

    /// The largest user tag (`starpu_mpi_comm_get_attr(comm, STARPU_MPI_TAG_UB, ..)`):
    /// user tags travel inside envelopes, so every tag up to `i64::MAX` works whatever
    /// MPI's own `MPI_TAG_UB` (which bounds only Starling's internal tags).
    pub fn tag_ub(&self) -> Tag {
        Tag(i64::MAX)
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The base of the physical tags the runtime uses on the transport (the reference's
    /// internal communication tag; set it with the cluster configuration).
    pub fn communication_tag(&self) -> i32 {
        self.tag_base
    }

    // ----- data --------------------------------------------------------------------------

    fn data_id(&self) -> DataId {
        DataId(self.next_data.fetch_add(1, Ordering::SeqCst))
    }

    /// Registers `data` on this rank.
    pub fn register<I: Interface>(&self, data: I) -> Handle<I> {
        Handle {
            cell: Arc::new(Cell::new(self.data_id(), data)),
        }
    }

    /// Registers data allocated by `init` on its first use (the reference's home node −1).
    pub fn register_lazy<I: Interface>(
        &self,
        init: impl FnOnce() -> I + Send + 'static,
    ) -> Handle<I> {
        Handle {
            cell: Arc::new(Cell::lazy(self.data_id(), init)),
        }
    }

    /// Gives `h` a tag, unique among this rank's live handles.
    ///
    /// # Errors
    /// [`CommError::TagInUse`] when another live handle has `tag`;
    /// [`CommError::AutoTagRange`] for a tag among the automatic ones
    /// ([`crate::tags::AUTO_TAGS`]), which only registrations with
    /// [`crate::TagChoice::Auto`] get.
    pub fn set_tag<I: Interface>(&self, h: &Handle<I>, tag: Tag) -> Result<(), CommError> {
        if crate::tags::AUTO_TAGS.contains(&tag.0) {
            return Err(CommError::AutoTagRange { tag });
        }
        self.set_tag_unchecked(h, tag)
    }

    /// [`Context::set_tag`] for any tag (an automatic one included).
    pub(crate) fn set_tag_unchecked<I: Interface>(
        &self,
        h: &Handle<I>,
        tag: Tag,
    ) -> Result<(), CommError> {
        let mut guard = lock(&self.tags);
        let (by_tag, by_data) = &mut *guard;
        match by_tag.get(&tag) {
            Some(id) if *id != h.id() => Err(CommError::TagInUse { tag }),
            _ => {
                if let Some(old) = by_data.insert(h.id(), tag) {
                    by_tag.remove(&old);
                }
                by_tag.insert(tag, h.id());
                Ok(())
            }
        }
    }

    /// Forgets the tag of the handle `data`, if it has one (another handle may take it).
    pub(crate) fn forget_tag(&self, data: DataId) {
        let mut guard = lock(&self.tags);
        let (by_tag, by_data) = &mut *guard;
        if let Some(tag) = by_data.remove(&data) {
            by_tag.remove(&tag);
        }
    }

    /// The tag of `h`, if it has one.
    pub fn tag_of<I: Interface>(&self, h: &Handle<I>) -> Option<Tag> {
        lock(&self.tags).1.get(&h.id()).copied()
    }

    /// Unregisters `h`: waits until every access submitted on it is done, then hands the
    /// data back (allocating it first if it was never used). A datum registered for the
    /// insert-task utility is forgotten there too, with its cache flags — like every
    /// replicated decision, every rank unregisters it at the same point of the flow.
    ///
    /// # Panics
    /// A task or request submitted later through a clone of `h` panics when it touches the
    /// data: the handle is gone. Unregistering a partitioned handle panics (unpartition it
    /// first), and so does unregistering the child of a partition
    /// ([`crate::partition`]): unpartitioning its parent retires it.
    pub fn unregister<I: Interface>(&self, h: Handle<I>) -> I {
        assert!(
            h.cell.state() & crate::runtime::data::CHILD == 0,
            "{} is the child of a partition: unpartition its parent instead",
            h.id()
        );
        // Read-write, not write: the value must come home from a device copy, if any.
        let acquired = self.acquire(&h, AccessMode::RW);
        drop(acquired);
        // A blocking transfer of a clone of the handle, on another thread, that went
        // without a node (`Context::wait_recv`): the graph did not see it; it is waited
        // for here, as the graph waits for every other access.
        while h
            .cell
            .direct()
            .is_some_and(|n| n.load(Ordering::SeqCst) > 0)
        {
            std::thread::sleep(core::time::Duration::from_micros(50));
        }
        {
            let mut guard = lock(&self.tags);
            let (by_tag, by_data) = &mut *guard;
            if let Some(tag) = by_data.remove(&h.id()) {
                by_tag.remove(&tag);
            }
        }
        crate::flow::distributed::state::forget(&mut lock(&self.dist), h.id());
        if let Some(offload) = self.runtime.offload() {
            offload.forget(&h.erased());
        }
        self.runtime.layers().forget(h.erased().uid());
        // The last access is done: nothing else can be scheduled on a handle we own.
        h.cell
            .take()
            .expect("the handle's data is present until unregistration")
    }

    /// Switches sequential consistency (implicit dependencies) for `h`.
    pub fn set_sequential_consistency<I: Interface>(&self, h: &Handle<I>, on: bool) {
        self.runtime.set_ordered(h.id(), on);
    }

    // ----- tasks -------------------------------------------------------------------------

    /// Starts building a task of `codelet`.
    pub fn task(&self, codelet: &Codelet) -> TaskBuilder<'_> {
        TaskBuilder {
            ctx: self,
            codelet: codelet.clone(),
            accesses: Vec::new(),
            priority: 0,
            callback: None,
            tag: None,
        }
    }

    /// Acquires `h` in `mode` once the accesses submitted before are done; later accesses
    /// wait until the returned guard is dropped (blocking `starpu_data_acquire`).
    ///
    /// # Panics
    /// When `h` is partitioned, or was a child of an undone partition
    /// ([`crate::partition`]).
    pub fn acquire<I: Interface>(&self, h: &Handle<I>, mode: AccessMode) -> Acquired<I> {
        h.expect_usable();
        let grant = Arc::new(Handoff::new());
        let granted = Arc::clone(&grant);
        self.runtime.submit_hook(
            vec![Access {
                cell: h.erased(),
                mode,
            }],
            0,
            move |node| granted.give(node),
        );
        let node = {
            let _wait = trace::wait(self.runtime.tracer(), "acquire");
            let node = grant.wait();
            if let Some(offload) = self.runtime.offload() {
                // Master-slave mode: the valid copy may be on a slave; bring it back.
                let (tx, rx) = mpsc::channel();
                offload.to_host(
                    h.erased(),
                    mode,
                    Box::new(move || {
                        let _ = tx.send(());
                    }),
                );
                let _ = rx.recv();
            }
            node
        };
        Acquired {
            runtime: self.runtime.clone(),
            node,
            handle: h.clone(),
            mode,
        }
    }

    /// Acquires `h` in `mode` without blocking: `f` runs with the acquired handle once the
    /// accesses submitted before are done (`starpu_data_acquire_cb`); dropping it releases.
    ///
    /// `f` runs on whichever thread finished the last of those accesses — possibly a
    /// worker, or the thread driving the rank's progress — so it must not block; keep the guard and drop it
    /// later to hold the data.
    ///
    /// # Panics
    /// As for [`Context::acquire`].
    pub fn acquire_cb<I: Interface>(
        &self,
        h: &Handle<I>,
        mode: AccessMode,
        f: impl FnOnce(Acquired<I>) + Send + 'static,
    ) {
        h.expect_usable();
        let runtime = self.runtime.clone();
        let handle = h.clone();
        self.runtime.submit_hook(
            vec![Access {
                cell: h.erased(),
                mode,
            }],
            0,
            move |node| {
                let offload = runtime.offload().cloned();
                let cell = handle.erased();
                let acquired = Acquired {
                    runtime,
                    node,
                    handle,
                    mode,
                };
                match offload {
                    // Master-slave mode: `f` runs once main memory's copy is valid.
                    Some(offload) => offload.to_host(cell, mode, Box::new(move || f(acquired))),
                    None => f(acquired),
                }
            },
        );
    }

    /// Blocks until every task and request submitted on this rank so far has completed,
    /// detached requests included.
    pub fn wait_for_all(&self) {
        self.runtime.wait_for_all();
    }

    /// This rank's scheduler statistics so far: the policy, tasks and busy time per
    /// worker and device, the models' mean error ([`crate::sched`]).
    pub fn sched_stats(&self) -> crate::runtime::sched::SchedStats {
        self.runtime.sched_stats()
    }

    /// [`Context::wait_for_all`], then says whether a transfer that the task flow
    /// depends on failed on this rank (a receive or send of the insert flow, a collective,
    /// a reduction, a migration, a `get_data_*`): the tasks that read what it carried did
    /// not run, nor anything after them on that data, and no value depending on it was
    /// sent.
    ///
    /// # Errors
    /// The first [`TransferError`] of this rank (every later call returns it too).
    pub fn try_wait_for_all(&self) -> Result<(), TransferError> {
        self.runtime.wait_for_all();
        self.transfer_failure()
    }

    /// The first failed transfer the task flow depends on, if any (without waiting).
    pub(crate) fn transfer_failure(&self) -> Result<(), TransferError> {
        match self.runtime.first_failure() {
            Some(f) => Err((*f).clone()),
            None => Ok(()),
        }
    }

    /// Blocks until every tag of `tags` was unlocked (by a task or a request).
    pub fn tag_wait(&self, tags: &[TaskTag]) {
        self.runtime.wait_tags(tags);
    }

    /// Unlocks `tag` by hand.
    pub fn tag_notify(&self, tag: TaskTag) {
        self.runtime.unlock_tag(tag);
    }

    /// Forgets that `tag` was unlocked, so it can be waited on again.
    pub fn tag_reset(&self, tag: TaskTag) {
        self.runtime.reset_tag(tag);
    }
}
