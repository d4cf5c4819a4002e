//! The per-rank API: register data, submit tasks, move data between ranks.

use std::collections::HashMap;
use std::sync::mpsc;

use starling_core::engine::{RecvArgs, SendArgs};
use starling_core::{AccessMode, CommId, DataId, Priority, Rank, Tag};

use crate::data::{AnyCell, Cell, DataMut, DataRef, Handle, Interface};
use crate::error::{CommError, Noted, TaskError, TransferDirection, TransferError};
use crate::pool::BufferPool;
use crate::progress::{Command, Done, Drive, Driven, DriverGuard, Payload};
use crate::sync::{
    Arc, AtomicBool, AtomicU32, AtomicUsize, Condvar, Mutex, Ordering, lock, thread,
};
use crate::task::{Access, Codelet, NodeId, Outcome, Runtime, TaskTag};
use crate::trace::{self, Recorder};

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
    pub(crate) dist: Mutex<crate::distributed::state::DistState>,
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
    pub(crate) tracker: Arc<crate::hang::Tracker>,
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Options of a send (the reference's `_prio`, `issend`, `_unlock_tag` variants and
/// communicator argument).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOpts {
    /// The communicator ([`CommId::WORLD`] by default).
    pub comm: CommId,
    /// The send's priority: among ready sends, higher leaves first.
    pub priority: i32,
    /// Synchronous mode: the payload leaves only once the receiver posted its receive.
    pub sync: bool,
    /// A task tag to unlock when the send completes.
    pub unlock: Option<TaskTag>,
}

/// Options of a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvOpts {
    /// The communicator ([`CommId::WORLD`] by default).
    pub comm: CommId,
    /// Order the receive after earlier accesses to the handle, and later ones after it
    /// (default `true`; the reference's `_sequential_consistency` variant switches it off).
    pub sequential_consistency: bool,
    /// A task tag to unlock when the receive completes.
    pub unlock: Option<TaskTag>,
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

/// A handle of any interface, for the array variants.
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

/// The state a [`Request`] shares with its completion.
struct ReqInner {
    result: Mutex<Option<Result<(), CommError>>>,
    cv: Condvar,
    /// Threads asleep on `cv` (changed under `result`'s lock): the completion notifies
    /// only when one is, since a notification is a system call.
    sleepers: AtomicUsize,
    /// Set once `result` is: what a thread driving progress polls (no lock).
    finished: AtomicBool,
    waited: AtomicBool,
    what: ReqWhat,
    reports: Arc<Mutex<Vec<Noted>>>,
    driver: Option<Arc<dyn Drive>>,
    /// The rank's timeline trace, when tracing (waits are recorded).
    timeline: Option<Arc<Recorder>>,
}

/// What a request is, for reports: formatted only when one is written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReqWhat {
    /// A send or a receive of a handle.
    Transfer {
        send: bool,
        data: DataId,
        peer: Rank,
        tag: Tag,
        me: Rank,
    },
    /// A request named by a fixed text (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Named(&'static str),
}

impl From<&'static str> for ReqWhat {
    fn from(name: &'static str) -> Self {
        Self::Named(name)
    }
}

impl core::fmt::Display for ReqWhat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Transfer {
                send: true,
                data,
                peer,
                tag,
                me,
            } => write!(f, "send of {data} to {peer} with {tag} from {me}"),
            Self::Transfer {
                data,
                peer,
                tag,
                me,
                ..
            } => write!(f, "receive into {data} from {peer} with {tag} on {me}"),
            Self::Named(name) => f.write_str(name),
        }
    }
}

/// A non-detached point-to-point request: [`Request::wait`] or [`Request::test`] it.
/// A request dropped before it was waited on is reported at shutdown.
pub struct Request {
    inner: Arc<ReqInner>,
}

impl core::fmt::Debug for Request {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Request")
            .field("what", &self.inner.what)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// Blocks until the request completes; returns its outcome.
    ///
    /// # Errors
    /// The request's failure, e.g. [`CommError::Data`] for a size mismatch.
    pub fn wait(self) -> Result<(), CommError> {
        self.wait_driving(None)
    }

    /// [`Request::wait`], driving progress meanwhile with `guard` if the caller already
    /// entered (see [`drive_until`]).
    fn wait_driving(self, guard: Option<DriverGuard<'_>>) -> Result<(), CommError> {
        let _wait = trace::wait(self.inner.timeline.as_ref(), "request wait");
        if let Some(driver) = &self.inner.driver {
            drive_until(&**driver, guard, || {
                self.inner.finished.load(Ordering::Acquire)
            });
        }
        let mut r = lock(&self.inner.result);
        loop {
            if let Some(result) = r.clone() {
                self.inner.waited.store(true, Ordering::SeqCst);
                return result;
            }
            self.inner.sleepers.fetch_add(1, Ordering::SeqCst);
            r = self
                .inner
                .cv
                .wait(r)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.inner.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Blocks until every request of `requests` completed (`starpu_mpi_wait_all`); each
    /// is waited on, even after one failed.
    ///
    /// # Errors
    /// The first failure, in the order of `requests` (the others completed all the same).
    pub fn wait_all(requests: impl IntoIterator<Item = Self>) -> Result<(), CommError> {
        let mut first = Ok(());
        for r in requests {
            let outcome = r.wait();
            if first.is_ok() {
                first = outcome;
            }
        }
        first
    }

    /// Whether every request of `requests` completed (`starpu_mpi_test_all`): `None` while
    /// one has not; once all have, their outcome — `Ok`, or the first failure in the order
    /// of `requests` — and then every one of them counts as waited. Testing moves
    /// communication on, as [`Request::test`] does.
    pub fn test_all(requests: &[Self]) -> Option<Result<(), CommError>> {
        // Looked at without marking any as waited: a request counts as waited only once
        // the whole array is done, as the reference's flag is all-or-nothing.
        if let Some(driver) = requests.first().and_then(|r| r.inner.driver.as_ref()) {
            let _driving = driver.enter();
            driver.try_drive();
        }
        let mut outcomes = Vec::with_capacity(requests.len());
        for r in requests {
            outcomes.push(lock(&r.inner.result).clone()?);
        }
        for r in requests {
            r.inner.waited.store(true, Ordering::SeqCst);
        }
        Some(outcomes.into_iter().collect())
    }

    /// The outcome if the request completed (then it counts as waited), `None` if not yet.
    /// Testing again, or waiting, after a completed test returns the same outcome.
    pub fn test(&self) -> Option<Result<(), CommError>> {
        if let Some(driver) = &self.inner.driver {
            // Like `MPI_Test`, testing moves communication on.
            let _driving = driver.enter();
            driver.try_drive();
        }
        let result = lock(&self.inner.result).clone();
        if result.is_some() {
            self.inner.waited.store(true, Ordering::SeqCst);
        }
        result
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.inner.waited.load(Ordering::SeqCst) {
            lock(&self.inner.reports).push(Noted::Unwaited(self.inner.what.to_string()));
        }
    }
}

/// How long a waiting thread goes on driving progress with nothing happening before it
/// hands back to the progression thread and sleeps.
const DRIVE_PATIENCE: core::time::Duration = core::time::Duration::from_micros(200);

/// Polls in a row that moved nothing before a driving thread yields its core between polls.
const SPIN_POLLS: u32 = 64;

/// A driving thread reads the clock once per this many polls in a row that moved nothing.
const CLOCK_POLLS: u32 = 16;

/// Drives the rank's progress on this thread until `ready` holds, or until nothing moved
/// for [`DRIVE_PATIENCE`] (the wait then sleeps as usual, and the progression thread takes
/// over). A blocking call whose message is coming thus crosses no thread.
fn drive_until<'a>(
    driver: &'a dyn Drive,
    guard: Option<DriverGuard<'a>>,
    ready: impl Fn() -> bool,
) {
    let guard = guard.unwrap_or_else(|| driver.enter());
    // When the current run of idle polls began: read from the clock only every
    // `CLOCK_POLLS` idle polls (a clock read costs as much as a poll that finds nothing).
    let mut idle_since: Option<std::time::Instant> = None;
    let mut idle = 0u32;
    loop {
        if ready() {
            return;
        }
        match driver.try_drive() {
            Driven::Progressed => {
                idle_since = None;
                idle = 0;
            }
            Driven::Stopped => break,
            Driven::InFlight => {
                // Transfers are under way: they move while this thread polls, so it
                // goes on polling, back to back and without counting towards its
                // patience (the progression thread would poll them as hard).
                idle_since = None;
                idle = 0;
                core::hint::spin_loop();
            }
            Driven::Idle | Driven::Busy => {
                if idle.is_multiple_of(CLOCK_POLLS) {
                    let now = std::time::Instant::now();
                    match idle_since {
                        None => idle_since = Some(now),
                        Some(since) if now - since >= DRIVE_PATIENCE => break,
                        Some(_) => {}
                    }
                }
                // Poll back to back for a while (a long message moves only while MPI is
                // called), then let the other threads of the core run between polls.
                idle = idle.saturating_add(1);
                if idle < SPIN_POLLS {
                    core::hint::spin_loop();
                } else {
                    thread::yield_now();
                }
            }
        }
    }
    guard.hand_back();
}

/// A new request and its completion: the progression thread calls the [`Done`] once with
/// the outcome, which wakes [`Request::wait`]. A request dropped unwaited is reported in
/// `reports`. (The hand-off the loom models of `sync/handoffs.rs` check.)
pub(crate) fn request_pair(
    what: ReqWhat,
    reports: Arc<Mutex<Vec<Noted>>>,
    driver: Option<Arc<dyn Drive>>,
    timeline: Option<Arc<Recorder>>,
) -> (Request, Done) {
    let inner = Arc::new(ReqInner {
        result: Mutex::new(None),
        cv: Condvar::new(),
        sleepers: AtomicUsize::new(0),
        finished: AtomicBool::new(false),
        waited: AtomicBool::new(false),
        what,
        reports,
        driver,
        timeline,
    });
    let i2 = Arc::clone(&inner);
    let done: Done = Box::new(move |result| {
        let sleeping = {
            let mut r = lock(&i2.result);
            *r = Some(result);
            i2.finished.store(true, Ordering::Release);
            i2.sleepers.load(Ordering::SeqCst) > 0
        };
        // Notified once the lock is released, so that the woken waiter does not block on
        // it at once.
        if sleeping {
            i2.cv.notify_all();
        }
    });
    (Request { inner }, done)
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

    /// Reads `h`.
    #[must_use]
    pub fn r<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::R)
    }

    /// Writes `h` (its previous value is not read).
    #[must_use]
    pub fn w<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::W)
    }

    /// Reads and writes `h`.
    #[must_use]
    pub fn rw<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::RW)
    }

    /// Uses `h` as scratch space: no ordering with other accesses.
    #[must_use]
    pub fn scratch<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::SCRATCH)
    }

    /// Contributes to a reduction of `h` (ordered like a write on one rank).
    #[must_use]
    pub fn redux<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::REDUX)
    }

    /// Writes `h` in any order among other commuting writers.
    #[must_use]
    pub fn commute<I: Interface>(self, h: &Handle<I>) -> Self {
        self.access(h, AccessMode::RW | AccessMode::COMMUTE)
    }

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
/// `starpu_task_wait` on a task submitted with `detach = 0`). Cheap: two shared pointers;
/// clone it to wait from several places. Dropping it detaches nothing and waits for
/// nothing.
#[derive(Clone)]
pub struct TaskHandle {
    runtime: Runtime,
    outcome: Outcome,
}

impl core::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("outcome", &*lock(&self.outcome))
            .finish_non_exhaustive()
    }
}

impl TaskHandle {
    /// The handle of a task of `ctx`'s runtime whose outcome is `outcome`.
    pub(crate) fn new(ctx: &Context, outcome: Outcome) -> Self {
        Self {
            runtime: ctx.runtime.clone(),
            outcome,
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
        self.runtime.wait_outcome(&self.outcome)
    }

    /// The task's outcome if it completed, `None` while it has not (without waiting).
    pub fn test(&self) -> Option<Result<(), TaskError>> {
        lock(&self.outcome).clone()
    }

    /// Whether the task completed (ran, failed or was skipped).
    pub fn is_done(&self) -> bool {
        lock(&self.outcome).is_some()
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
            dist: Mutex::new(crate::distributed::state::DistState::from_env(size)),
            fake: AtomicBool::new(false),
            driver,
            pool,
            in_place_min,
            blocking_in_place_min,
            device_min,
            next_split: AtomicU32::new(crate::tags::FIRST_SPLIT_ID),
            tracker: Arc::new(crate::hang::Tracker::new()),
        }
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
            h.cell.state() & crate::data::CHILD == 0,
            "{} is the child of a partition: unpartition its parent instead",
            h.id()
        );
        // Read-write, not write: the value must come home from a device copy, if any.
        let acquired = self.acquire(&h, AccessMode::RW);
        drop(acquired);
        {
            let mut guard = lock(&self.tags);
            let (by_tag, by_data) = &mut *guard;
            if let Some(tag) = by_data.remove(&h.id()) {
                by_tag.remove(&tag);
            }
        }
        crate::distributed::state::forget(&mut lock(&self.dist), h.id());
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
        let (tx, rx) = mpsc::channel();
        self.runtime.submit_hook(
            vec![Access {
                cell: h.erased(),
                mode,
            }],
            0,
            Box::new(move |node| {
                let _ = tx.send(node);
            }),
        );
        let node = {
            let _wait = trace::wait(self.runtime.tracer(), "acquire");
            let node = rx.recv().expect("the runtime runs every hook");
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
            Box::new(move |node| {
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
            }),
        );
    }

    /// Blocks until every task and request submitted on this rank so far has completed,
    /// detached requests included.
    pub fn wait_for_all(&self) {
        self.runtime.wait_for_all();
    }

    /// This rank's scheduler statistics so far: the policy, tasks and busy time per
    /// worker and device, the models' mean error ([`crate::sched`]).
    pub fn sched_stats(&self) -> crate::sched::SchedStats {
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

    // ----- point to point ------------------------------------------------------------

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<(), CommError> {
        if rank.0 >= self.size {
            return Err(CommError::RankOutOfRange {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Refuses the tags the runtime keeps for itself ([`crate::tags::RESERVED_TAGS`]).
    pub(crate) fn check_user_tag(&self, tag: Tag) -> Result<(), CommError> {
        if crate::tags::RESERVED_TAGS.contains(&tag.0) {
            return Err(CommError::ReservedTag { tag });
        }
        Ok(())
    }

    /// Refuses, for an explicit registration, the reserved tags and the automatic ones
    /// ([`crate::tags::AUTO_TAGS`]).
    pub(crate) fn check_explicit_tag(&self, tag: Tag) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        if crate::tags::AUTO_TAGS.contains(&tag.0) {
            return Err(CommError::AutoTagRange { tag });
        }
        Ok(())
    }

    /// Posts a send of `cell` once its earlier writers are done; `done` runs on the
    /// thread driving progress (see [`drive_until`]) when the request completes.
    pub(crate) fn post_send(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_send_from(cell, dest, tag, opts, done, self.in_place_min, false)
    }

    /// [`Context::post_send`] for a transfer the task flow depends on (the insert flow,
    /// collectives, reductions): its failure is recorded in the runtime and reported by
    /// [`Context::try_wait_for_all`], later inserts and shutdown.
    pub(crate) fn post_flow_send(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_send_from(cell, dest, tag, opts, done, self.in_place_min, true)
    }

    /// [`Context::post_recv`] for a transfer the task flow depends on: when it fails, the
    /// handle's value is poisoned ([`Runtime::fail`]) — no task reads it, no send carries
    /// it — and the failure is reported as for [`Context::post_flow_send`].
    pub(crate) fn post_flow_recv(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
    ) -> Result<(), CommError> {
        let data = cell.id();
        self.post_recv_inner(cell, source, tag, opts, done, Some(data))
    }

    /// [`Context::post_flow_recv`] into a buffer that stands for datum `data` (a
    /// reduction's contribution buffer): a failure names `data`.
    pub(crate) fn post_flow_recv_for(
        &self,
        cell: Arc<dyn AnyCell>,
        data: DataId,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_recv_inner(cell, source, tag, opts, done, Some(data))
    }

    /// [`Context::post_send`], lending the handle's data in place from `in_place_min`
    /// bytes up; `flow`: a transfer of the task flow ([`Context::post_flow_send`]).
    ///
    /// Whatever the transfer, a value that depends on a failed transfer never leaves: the
    /// send fails with [`CommError::Upstream`].
    #[allow(clippy::too_many_arguments)] // reason: the private core of the send family
    fn post_send_from(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: Done,
        in_place_min: usize,
        flow: bool,
    ) -> Result<(), CommError> {
        self.check_rank(dest)?;
        if self.fake.load(Ordering::Relaxed) {
            // Fake rank mode: communications are dropped (the reference's behaviour).
            done(Ok(()));
            return Ok(());
        }
        let runtime = self.runtime.clone();
        let commands = Arc::clone(&self.commands);
        let pedantic = self.pedantic_isend;
        let mode = if pedantic {
            AccessMode::RW
        } else {
            AccessMode::R
        };
        let ticket = self.tracker.begin(
            crate::hang::Waiting::Send,
            dest,
            opts.comm,
            tag,
            Some(cell.id()),
        );
        let access = vec![Access {
            cell: Arc::clone(&cell),
            mode,
        }];
        let rt = runtime;
        let pool = Arc::clone(&self.pool);
        let device_min = self.device_min;
        self.runtime.submit_send_hook(
            access,
            opts.priority,
            Box::new(move |node| {
                let data = cell.id();
                // A value that depends on a failed transfer is not sent.
                let poison = rt.poison_of(node);
                let size = cell.packed_size();
                // Between ranks of one process, a large value held on a device travels as
                // a device snapshot (its layer decides); anything else is read from main
                // memory, which the device layers bring up to date first.
                let on_device = if size >= device_min && poison.is_none() {
                    rt.layers().export(&cell)
                } else {
                    None
                };
                let mut host_failed = None;
                if on_device.is_none() {
                    if let Err(e) = rt.layers().to_host(&[Access {
                        cell: Arc::clone(&cell),
                        mode,
                    }]) {
                        host_failed = Some(e);
                    }
                }
                // A large contiguous handle is sent from its own memory, held for reading
                // until the send completes; anything else is packed, and the value
                // current now is the one sent: later writers may go on at once.
                let lent = if on_device.is_none()
                    && size >= in_place_min
                    && poison.is_none()
                    && host_failed.is_none()
                {
                    cell.lend_read()
                } else {
                    None
                };
                let hold = pedantic || lent.is_some();
                let bytes = match (on_device, lent) {
                    (Some(v), _) => Payload::Device(v),
                    (None, Some(l)) => Payload::Lent(l),
                    (None, None) => {
                        let mut bytes = pool.take_empty(size);
                        if poison.is_none() && host_failed.is_none() {
                            cell.pack_into(&mut bytes);
                        }
                        Payload::Bytes(bytes)
                    }
                };
                if let Some(e) = host_failed {
                    rt.record_device_failure(format!("a send could not read its data: {e}"));
                }
                let mut args = SendArgs::new(opts.comm, dest, tag, size as u64);
                args.priority = Priority(opts.priority);
                args.sync = opts.sync;
                let rt2 = rt.clone();
                let finish: Done = Box::new(move |result| {
                    if let Some(t) = opts.unlock {
                        rt2.unlock_tag(t);
                    }
                    // Release the handle before waking the waiter, so that its next
                    // access finds the handle free.
                    if hold {
                        rt2.complete(node);
                    }
                    if let (true, Err(cause)) = (flow, &result) {
                        if !matches!(cause, CommError::Upstream(_)) {
                            // (an upstream failure is recorded already, at its source)
                            rt2.record_failure(TransferError {
                                data,
                                peer: dest,
                                tag,
                                direction: TransferDirection::Send,
                                cause: cause.clone(),
                            });
                        }
                    }
                    done(result);
                    rt2.end_request();
                });
                match (ticket.start(finish), poison) {
                    (Ok(done), None) => commands(Command::Send { args, bytes, done }),
                    (Ok(done), Some(p)) => {
                        drop(bytes);
                        done(Err(CommError::Upstream(Box::new((*p).clone()))));
                    }
                    (Err((finish, e)), _) => finish(Err(e)), // the rank gave up (watchdog)
                }
                if !hold {
                    rt.complete(node);
                }
            }),
        );
        Ok(())
    }

    /// Posts a receive into `cell` once its earlier accesses are done.
    pub(crate) fn post_recv(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_recv_inner(cell, source, tag, opts, done, None)
    }

    /// [`Context::post_recv`]; `flow`: a transfer of the task flow, whose failure
    /// poisons the handle's value and is reported naming that datum
    /// ([`Context::post_flow_recv`]).
    fn post_recv_inner(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
        flow: Option<DataId>,
    ) -> Result<(), CommError> {
        self.check_rank(source)?;
        if self.fake.load(Ordering::Relaxed) {
            done(Ok(()));
            return Ok(());
        }
        let runtime = self.runtime.clone();
        let commands = Arc::clone(&self.commands);
        let ticket = self.tracker.begin(
            crate::hang::Waiting::Recv,
            source,
            opts.comm,
            tag,
            Some(cell.id()),
        );
        let access = if opts.sequential_consistency {
            vec![Access {
                cell: Arc::clone(&cell),
                mode: AccessMode::W,
            }]
        } else {
            Vec::new()
        };
        let rt = runtime;
        self.runtime.submit_request_hook(
            access,
            0,
            Box::new(move |node| {
                let args = RecvArgs::new(opts.comm, source, tag, 0);
                let finish: Done = Box::new(move |result| {
                    if let Some(t) = opts.unlock {
                        rt.unlock_tag(t);
                    }
                    // Release the handle before waking the waiter, so that its next
                    // access finds the handle free. A failed receive of the task flow
                    // leaves a stale value: it is poisoned, so nothing reads it.
                    match (&result, flow) {
                        (Err(cause), Some(data)) => rt.fail(
                            node,
                            TransferError {
                                data,
                                peer: source,
                                tag,
                                direction: TransferDirection::Recv,
                                cause: cause.clone(),
                            },
                        ),
                        _ => rt.complete(node),
                    }
                    done(result);
                    rt.end_request();
                });
                match ticket.start(finish) {
                    Ok(done) => commands(Command::Recv { args, cell, done }),
                    Err((finish, e)) => finish(Err(e)), // the rank gave up (watchdog)
                }
            }),
        );
        Ok(())
    }

    /// Wraps a user's completion callback: it runs on the thread driving progress, so a panic
    /// in it is caught (the thread goes on) and reported at shutdown.
    fn guarded(
        &self,
        what: String,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Done {
        let panics = Arc::clone(&self.reports);
        Box::new(move |result| {
            if std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| callback(result))).is_err()
            {
                lock(&panics).push(Noted::CallbackPanicked(what));
            }
        })
    }

    fn request(&self, what: ReqWhat) -> (Request, Done) {
        request_pair(
            what,
            Arc::clone(&self.reports),
            self.driver.clone(),
            self.runtime.tracer().cloned(),
        )
    }

    /// Starts a send of `h` to `dest` with `tag` and options; wait on the request.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a destination outside the world;
    /// [`CommError::ReservedTag`] for a tag the runtime keeps for itself;
    /// [`CommError::Partition`] for a partitioned handle or a retired child
    /// ([`crate::partition`]). Nothing was submitted then.
    pub fn isend_with<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
    ) -> Result<Request, CommError> {
        self.isend_from(h, dest, tag, opts, self.in_place_min)
    }

    /// [`Context::isend_with`], lending the handle's data in place from `in_place_min`
    /// bytes up.
    fn isend_from<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        in_place_min: usize,
    ) -> Result<Request, CommError> {
        self.check_rank(dest)?;
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let (req, done) = self.request(ReqWhat::Transfer {
            send: true,
            data: h.id(),
            peer: dest,
            tag,
            me: self.rank,
        });
        self.post_send_from(h.erased(), dest, tag, opts, done, in_place_min, false)?;
        Ok(req)
    }

    /// Starts a send (`starpu_mpi_isend`).
    ///
    /// # Errors
    /// As for [`Context::isend_with`].
    pub fn isend<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
    ) -> Result<Request, CommError> {
        self.isend_with(h, dest, tag, SendOpts::default())
    }

    /// Starts a synchronous send (`starpu_mpi_issend`): it completes once the receiver
    /// posted the matching receive, and never creates early data there.
    ///
    /// # Errors
    /// As for [`Context::isend_with`].
    pub fn issend<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
    ) -> Result<Request, CommError> {
        let opts = SendOpts {
            sync: true,
            ..SendOpts::default()
        };
        self.isend_with(h, dest, tag, opts)
    }

    /// Sends `h` and waits for the send to complete (`starpu_mpi_send`).
    ///
    /// # Errors
    /// As for [`Context::isend_with`], and the request's failure.
    pub fn send<I: Interface>(&self, h: &Handle<I>, dest: Rank, tag: Tag) -> Result<(), CommError> {
        // Drive from before the send is posted, so that posting it wakes no thread.
        let driving = self.driver.as_ref().map(|d| d.enter());
        // The caller waits until the send completes: holding the handle for reading
        // until then costs nothing, so every payload that travels as its own message
        // is sent from the handle's memory.
        self.isend_from(
            h,
            dest,
            tag,
            SendOpts::default(),
            self.blocking_in_place_min,
        )?
        .wait_driving(driving)
    }

    /// Starts a send and forgets it; `callback` runs once with its outcome, on the thread
    /// driving the rank's progress — the progression thread, or a thread blocked in a
    /// wait — so it must not block (`starpu_mpi_isend_detached`).
    ///
    /// # Errors
    /// As for [`Context::isend_with`].
    pub fn isend_detached_with<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let callback = self.guarded(format!("send of {} to {dest} with {tag}", h.id()), callback);
        self.post_send(h.erased(), dest, tag, opts, callback)
    }

    /// Starts a detached send (`starpu_mpi_isend_detached`).
    ///
    /// # Errors
    /// As for [`Context::isend_with`].
    pub fn isend_detached<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.isend_detached_with(h, dest, tag, SendOpts::default(), callback)
    }

    /// Starts a detached synchronous send (`starpu_mpi_issend_detached`).
    ///
    /// # Errors
    /// As for [`Context::isend_with`].
    pub fn issend_detached<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let opts = SendOpts {
            sync: true,
            ..SendOpts::default()
        };
        self.isend_detached_with(h, dest, tag, opts, callback)
    }

    /// Starts detached sends of several handles and unlocks `unlock` once all completed
    /// (`starpu_mpi_isend_array_detached_unlock_tag`).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for any destination outside the world, or
    /// [`CommError::ReservedTag`] for any reserved tag (then nothing
    /// is sent).
    pub fn isend_array_detached_unlock_tag(
        &self,
        sends: &[(AnyHandle, Rank, Tag)],
        unlock: TaskTag,
    ) -> Result<(), CommError> {
        for (h, dest, tag) in sends {
            self.check_rank(*dest)?;
            self.check_user_tag(*tag)?;
            h.cell.usable()?;
        }
        let all = self.countdown(sends.len(), unlock);
        for (h, dest, tag) in sends {
            let all = Arc::clone(&all);
            self.post_send(
                Arc::clone(&h.cell),
                *dest,
                *tag,
                SendOpts::default(),
                Box::new(move |_| all()),
            )?;
        }
        Ok(())
    }

    /// Starts a receive into `h` from `source` with `tag` and options.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a source outside the world;
    /// [`CommError::ReservedTag`] for a tag the runtime keeps for itself;
    /// [`CommError::Partition`] for a partitioned handle or a retired child
    /// ([`crate::partition`]). Nothing was submitted then.
    pub fn irecv_with<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
    ) -> Result<Request, CommError> {
        self.check_rank(source)?;
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let (req, done) = self.request(ReqWhat::Transfer {
            send: false,
            data: h.id(),
            peer: source,
            tag,
            me: self.rank,
        });
        self.post_recv(h.erased(), source, tag, opts, done)?;
        Ok(req)
    }

    /// Starts a receive (`starpu_mpi_irecv`).
    ///
    /// # Errors
    /// As for [`Context::irecv_with`].
    pub fn irecv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
    ) -> Result<Request, CommError> {
        self.irecv_with(h, source, tag, RecvOpts::default())
    }

    /// Receives into `h` and waits (`starpu_mpi_recv`).
    ///
    /// # Errors
    /// As for [`Context::irecv_with`], and the request's failure (a size mismatch).
    pub fn recv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
    ) -> Result<(), CommError> {
        let driving = self.driver.as_ref().map(|d| d.enter());
        self.irecv(h, source, tag)?.wait_driving(driving)
    }

    /// Starts a detached receive with options; `callback` runs once with its outcome on
    /// the thread driving the rank's progress (it must not block)
    /// (`starpu_mpi_irecv_detached`).
    ///
    /// # Errors
    /// As for [`Context::irecv_with`].
    pub fn irecv_detached_with<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let callback = self.guarded(
            format!("receive into {} from {source} with {tag}", h.id()),
            callback,
        );
        self.post_recv(h.erased(), source, tag, opts, callback)
    }

    /// Starts a detached receive (`starpu_mpi_irecv_detached`).
    ///
    /// # Errors
    /// As for [`Context::irecv_with`].
    pub fn irecv_detached<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.irecv_detached_with(h, source, tag, RecvOpts::default(), callback)
    }

    /// Starts detached receives into several handles and unlocks `unlock` once all
    /// completed (`starpu_mpi_irecv_array_detached_unlock_tag`).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for any source outside the world, or
    /// [`CommError::ReservedTag`] for any reserved tag (then nothing is
    /// received).
    pub fn irecv_array_detached_unlock_tag(
        &self,
        recvs: &[(AnyHandle, Rank, Tag)],
        unlock: TaskTag,
    ) -> Result<(), CommError> {
        for (h, source, tag) in recvs {
            self.check_rank(*source)?;
            self.check_user_tag(*tag)?;
            h.cell.usable()?;
        }
        let all = self.countdown(recvs.len(), unlock);
        for (h, source, tag) in recvs {
            let all = Arc::clone(&all);
            self.post_recv(
                Arc::clone(&h.cell),
                *source,
                *tag,
                RecvOpts::default(),
                Box::new(move |_| all()),
            )?;
        }
        Ok(())
    }

    /// A function to call `n` times; the last call unlocks `tag`.
    fn countdown(&self, n: usize, tag: TaskTag) -> Arc<dyn Fn() + Send + Sync> {
        let runtime = self.runtime.clone();
        if n == 0 {
            runtime.unlock_tag(tag);
        }
        let left = Arc::new(AtomicUsize::new(n));
        Arc::new(move || {
            if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                runtime.unlock_tag(tag);
            }
        })
    }

    /// Blocks until every rank called `barrier` (`starpu_mpi_barrier`). It does not wait
    /// for this rank's pending requests (call [`Context::wait_for_all`] first for that);
    /// unlike the reference's, it never blocks the progression thread.
    ///
    /// While the graph-agreement check is on, the ranks first compare their task flows
    /// ([`Context::check_agreement`]); a divergence is reported at shutdown and fails
    /// every later insert. When the watchdog gives up on the job, it returns.
    pub fn barrier(&self) {
        self.barrier_as(crate::hang::Waiting::Barrier);
    }

    /// [`Context::barrier`] as the closing barrier of shutdown, which a rank enters once
    /// its work is done: the hang explainer counts it as no wait between ranks
    /// ([`crate::hang::Waiting::Shutdown`]), so it invents no deadlock between ranks that
    /// exchange nothing, and it says that a message awaited from such a rank will never
    /// be sent.
    pub fn closing_barrier(&self) {
        self.barrier_as(crate::hang::Waiting::Shutdown);
    }

    fn barrier_as(&self, kind: crate::hang::Waiting) {
        self.agreement_at_barrier();
        let _wait = trace::wait(self.runtime.tracer(), "barrier");
        let (tx, rx) = mpsc::channel();
        let flag = Arc::new(AtomicBool::new(false));
        let raised = Arc::clone(&flag);
        let ticket = self
            .tracker
            .begin(kind, self.rank, CommId::WORLD, Tag(0), None);
        let woken: Done = Box::new(move |_| {
            raised.store(true, Ordering::SeqCst);
            let _ = tx.send(());
        });
        match ticket.start(woken) {
            Ok(done) => (self.commands)(Command::Barrier {
                done: Box::new(move || done(Ok(()))),
            }),
            Err((woken, e)) => woken(Err(e)),
        }
        if let Some(driver) = &self.driver {
            drive_until(&**driver, None, || flag.load(Ordering::SeqCst));
        }
        let _ = rx.recv();
    }

    /// A new communicator duplicating `comm`: the same ranks, its own matching. Every
    /// rank must call it in the same order. (On the in-process cluster every communicator
    /// holds every rank, so a duplicate of a duplicate is simply another new one.)
    pub fn comm_dup(&self, _comm: CommId) -> CommId {
        CommId(self.next_comm.fetch_add(1, Ordering::SeqCst) as u16)
    }

    /// How many messages arrived on this rank before their receive was posted and were
    /// kept as early data (a diagnostic: synchronous sends never create any).
    pub fn early_messages(&self) -> u64 {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::EarlyMessages(Box::new(move |n| {
            let _ = tx.send(n);
        })));
        rx.recv().unwrap_or_default()
    }

    /// Payload bytes this rank sent to each peer, indexed by rank
    /// (`starpu_mpi_comm_amounts_retrieve` / `starpu_mpi_comm_stats_retrieve`): what was
    /// counted while statistics were on, kept when they are switched off
    /// ([`Context::set_comm_stats`]), so a region between an enable and a disable can be
    /// read after it.
    ///
    /// `None` when statistics were never on for this rank (neither at start-up,
    /// [`crate::ClusterConfig::stats`] / `STARLING_MPI_STATS`, nor at run time): then
    /// nothing was counted, and a row of zeros would be no measurement.
    pub fn comm_amounts(&self) -> Option<Vec<u64>> {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::Amounts(Box::new(move |v| {
            let _ = tx.send(v);
        })));
        rx.recv().unwrap_or_default()
    }

    /// Switches this rank's communication statistics on or off at run time
    /// (`starpu_mpi_comm_stats_enable` / `starpu_mpi_comm_stats_disable`), around a
    /// region of interest; what was counted is kept either way. Payload bytes are counted
    /// when a message is handed to the transport, so a transfer of the task flow counts
    /// if statistics are on when it leaves, which may be after the insert that planned
    /// it: call [`Context::wait_for_all`] before switching them off to count a region
    /// whole. Returns once the switch is made (later sends see it). A rank whose
    /// statistics were on at any time prints its report at shutdown.
    pub fn set_comm_stats(&self, on: bool) {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::SetStats(
            on,
            Box::new(move |()| {
                let _ = tx.send(());
            }),
        ));
        let _ = rx.recv();
    }
}
