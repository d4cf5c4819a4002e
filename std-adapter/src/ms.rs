//! Master-slave mode: one rank submits an ordinary task flow, the others run its tasks
//! (the reference's "MPI Master Slave Support").
//!
//! The insert-task mode asks every rank to walk the same flow and to say which rank owns
//! which datum. Master-slave mode asks neither: the **master** (rank 0, or
//! [`MsConfig::master`], `STARLING_MPI_MASTER_NODE`) runs the application's flow on a
//! [`Context`] of its own, a world of one rank, exactly as a single-process program
//! would; every other rank is a **slave**, a remote device with its own memory and
//! [`MsConfig::slave_threads`] worker threads (`STARLING_NMPIMSTHREADS`, default: all
//! cores; the ranks of one process share them, [`crate::ClusterConfig::share_cores`]).
//! The modes are exclusive: a job starts in one or the other ([`serve`], [`run_local`],
//! or the facade's `launch_ms`).
//!
//! # What the master does with a task
//!
//! When a task of a codelet with an implementation is ready on the master (its implicit
//! dependencies met), the master hands it to one slave:
//!
//! 1. it picks the slave holding the most bytes of the task's data already, among those
//!    with a free worker (fewest tasks in flight on a tie), whose memory budget
//!    ([`MsConfig::slave_memory`]) can take the task's data once stale copies are freed;
//! 2. for each datum, the core's [`coherence`](starling_core::coherence) state machine
//!    says what moves: a read on a slave without a valid copy fetches one — from the
//!    master's memory, or straight from the slave holding it; a write leaves the slave's
//!    copy the only valid one and the other slaves free theirs;
//! 3. it sends the slave one message with everything to do, in order (allocate buffers,
//!    receive data, run the task), and the data messages beside it; the slave runs the
//!    task on its workers and answers when it is done.
//!
//! **Results come back when the master reads them**: a datum a slave wrote stays there
//! (later tasks on that slave use it in place) until the master acquires it
//! ([`Context::acquire`], [`Context::acquire_cb`]) or unregisters it — then it is fetched
//! into the master's memory first.
//!
//! # Codelets and data on the slaves
//!
//! All ranks run the same binary, and slaves find codelets **by name** in a [`Registry`]
//! built at start-up on every rank: [`Registry::codelet`] registers a CPU
//! implementation; [`Registry::codelet_with_slave`] gives slaves another one (the
//! reference's `mpi_ms_funcs`). A task whose codelet name is not in the registry fails
//! on the master with [`MsError::UnknownCodelet`] before anything is sent. Data travel
//! as their packed form; a slave allocates its copy from the interface's name and shape
//! ([`Remote`]): the built-in interfaces are registered already, a user-defined one with
//! [`Registry::interface`].
//!
//! # Errors, and what the reference does instead
//!
//! [`serve`] and [`run_local`] return the first failure as an [`MsError`]: an unknown
//! codelet or interface, a task larger than every slave's memory budget, a task that
//! panicked on its slave, a slave that stopped answering for [`MsConfig::timeout`] while
//! it had work (busy slaves say they are alive every quarter of it, so a long task is not
//! taken for a dead slave). The reference aborts on most of these.
//!
//! All MPI calls of a rank go through its progression thread, so "one master thread
//! drives all slaves" always holds: the master's dispatch runs on one thread and never
//! blocks on a slave. The reference's one-thread-per-slave option
//! (`--with-mpi-master-slave-multiple-thread`) has no counterpart: nothing on the master
//! waits on one slave while another could be served.

use core::any::{Any, TypeId};
use core::time::Duration;
use std::collections::HashMap;

use starling_core::{CommId, Rank, Tag};

use crate::api::context::{Context, RecvOpts, SendOpts};
use crate::error::{CommError, ShutdownError};
use crate::io::progress::Done;
use crate::runtime::data::{AnyCell, Cell, DataError, Interface, blob, temporary_id};
use crate::runtime::interfaces::{Bcsr, Block, Complex, Csr, Matrix, Ndim, Variable, Vector};
use crate::runtime::task::{Buffers, Codelet, Kernel};
use crate::sync::Arc;

mod master;
mod slave;
mod wire;

/// The tag of the master's messages to a slave.
const CMD: Tag = Tag(1);
/// The tag of a slave's messages to the master.
const REPLY: Tag = Tag(2);
/// The first tag of data transfers: each transfer gets its own.
const FIRST_DATA_TAG: i64 = 16;

/// How a master-slave job is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MsConfig {
    /// The rank that runs the flow (`STARLING_MPI_MASTER_NODE`, default 0).
    pub master: Rank,
    /// Worker threads on each slave (`STARLING_NMPIMSTHREADS`); `None`: the rank's
    /// configured workers (every core by default; in one process, [`run_local`], the
    /// ranks share them: [`crate::ClusterConfig::share_cores`]). Applied by
    /// [`run_local`] and the facade's `launch_ms`, which start the slaves.
    pub slave_threads: Option<usize>,
    /// Bytes of data each slave may hold (`STARLING_MS_MEMORY`, a number of bytes);
    /// `None`: no limit. A task needing more than this fails with
    /// [`MsError::TooLarge`]; below it, a slave frees stale and least recently used copies
    /// (writing back the only valid ones first) to make room.
    pub slave_memory: Option<u64>,
    /// A slave with work in flight that says nothing for this long is taken for dead
    /// ([`MsError::SlaveDied`]) (`STARLING_MS_TIMEOUT_SECS`, default 60).
    pub timeout: Duration,
    /// Fault injection, for tests: slave `.0` stops answering after it has run `.1`
    /// tasks, as if its process had died.
    pub exit_after: Option<(Rank, u64)>,
    /// At the end, the master writes what each slave did to stderr: workers, tasks,
    /// bytes moved, evictions and write-backs (`STARLING_MS_STATS=1`).
    pub stats: bool,
}

impl Default for MsConfig {
    fn default() -> Self {
        Self {
            master: Rank(0),
            slave_threads: None,
            slave_memory: None,
            timeout: Duration::from_secs(60),
            exit_after: None,
            stats: false,
        }
    }
}

impl MsConfig {
    /// The defaults, overridden by `STARLING_MPI_MASTER_NODE`, `STARLING_NMPIMSTHREADS`,
    /// `STARLING_MS_MEMORY`, `STARLING_MS_TIMEOUT_SECS` and `STARLING_MS_STATS`.
    pub fn from_env() -> Self {
        let num = |v: &str| {
            std::env::var(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        let mut c = Self::default();
        if let Some(m) = num("STARLING_MPI_MASTER_NODE") {
            c.master = Rank(u32::try_from(m).unwrap_or(u32::MAX));
        }
        if let Some(n) = num("STARLING_NMPIMSTHREADS") {
            c.slave_threads = Some(usize::try_from(n).unwrap_or(usize::MAX).max(1));
        }
        c.slave_memory = num("STARLING_MS_MEMORY");
        c.stats = crate::runtime::task::env_flag("STARLING_MS_STATS");
        if let Some(s) = num("STARLING_MS_TIMEOUT_SECS") {
            c.timeout = Duration::from_secs(s.max(1));
        }
        c
    }
}

/// Why a master-slave job failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MsError {
    /// A task's codelet name is not in the [`Registry`]: slaves could not find it.
    #[error(
        "task of codelet `{name}`: no codelet of that name is registered for master-slave mode (Registry::codelet)"
    )]
    UnknownCodelet {
        /// The codelet's name.
        name: String,
    },
    /// A task accesses data of an interface slaves cannot allocate.
    #[error(
        "task of codelet `{codelet}`: interface `{interface}` cannot travel to a slave (Registry::interface)"
    )]
    UnknownInterface {
        /// The task's codelet.
        codelet: String,
        /// The interface's type name.
        interface: String,
    },
    /// A task needs more memory on a slave than any slave's budget.
    #[error(
        "task of codelet `{codelet}` needs {bytes} bytes on a slave, more than a slave's memory budget of {budget} bytes (STARLING_MS_MEMORY)"
    )]
    TooLarge {
        /// The task's codelet.
        codelet: String,
        /// Bytes of the task's data.
        bytes: u64,
        /// The largest budget of a live slave.
        budget: u64,
    },
    /// A task failed on its slave (its kernel panicked, or its data did not arrive).
    #[error("task of codelet `{codelet}` failed on slave {slave}: {message}")]
    TaskFailed {
        /// The task's codelet.
        codelet: String,
        /// The slave's rank.
        slave: Rank,
        /// What happened.
        message: String,
    },
    /// A slave stopped answering while it had work: its tasks failed, and the data whose
    /// only valid copy it held are lost.
    #[error(
        "slave {slave} stopped answering for {silent_ms} ms while running {tasks} task(s) (first: `{first}`): taken for dead"
    )]
    SlaveDied {
        /// The slave's rank.
        slave: Rank,
        /// Milliseconds since its last message.
        silent_ms: u64,
        /// Tasks it was running.
        tasks: usize,
        /// The codelet of one of them.
        first: String,
    },
    /// A task reads data whose only valid copy was lost with a dead slave.
    #[error("task of codelet `{codelet}` reads data lost with a dead slave")]
    DataLost {
        /// The task's codelet.
        codelet: String,
    },
    /// No slave is left to run tasks (the job has one rank, or every slave died).
    #[error("no slave to run task of codelet `{codelet}`: the job has {ranks} rank(s)")]
    NoSlave {
        /// The task's codelet.
        codelet: String,
        /// Ranks in the job.
        ranks: u32,
    },
    /// The master rank is outside the job, or the job is larger than the 63 slaves the
    /// coherence state machine tracks.
    #[error("master-slave mode cannot start: {0}")]
    Setup(String),
    /// A peer sent something that is not a master-slave message, or a message failed.
    #[error("master-slave protocol: {0}")]
    Protocol(String),
    /// The job's ranks shut down with leftovers.
    #[error("{0}")]
    Shutdown(ShutdownError),
}

impl From<CommError> for MsError {
    fn from(e: CommError) -> Self {
        Self::Protocol(e.to_string())
    }
}

/// Data that a slave can allocate from a description of its shape: what lets a datum of
/// this interface travel to slaves.
///
/// The built-in interfaces implement it (over every element type), and so can
/// user-defined ones; register the latter with [`Registry::interface`]. A slave's copy is
/// built with [`Remote::from_shape`] and then filled by [`Interface::unpack`], so its
/// layout may differ from the master's (a slave's matrix is dense) as long as the packed
/// form is the same.
pub trait Remote: Interface + Sized {
    /// Appends a description of the data's shape (not its values) to `out`.
    fn write_shape(&self, out: &mut Vec<u8>);

    /// Zeroed data of the shape `shape` wrote.
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `shape` is not one `write_shape` writes (it comes
    /// from another process: never panic on it).
    fn from_shape(shape: &[u8]) -> Result<Self, DataError>;
}

/// The `N` little-endian `u64`s of a shape, as `usize`s.
fn dims<const N: usize>(shape: &[u8]) -> Result<[usize; N], DataError> {
    if shape.len() != N * 8 {
        return Err(DataError::Malformed("shape: wrong length"));
    }
    let mut out = [0; N];
    for (d, chunk) in out.iter_mut().zip(shape.chunks_exact(8)) {
        let mut b = [0; 8];
        b.copy_from_slice(chunk);
        *d = usize::try_from(u64::from_le_bytes(b))
            .map_err(|_| DataError::Malformed("shape: dimension overflows usize"))?;
    }
    Ok(out)
}

fn put_dims(out: &mut Vec<u8>, dims: &[usize]) {
    for d in dims {
        out.extend_from_slice(&(*d as u64).to_le_bytes());
    }
}

/// Elements of a shape, refused when its bytes overflow (a malformed shape must not
/// reach the allocator as an absurd size that aborts the process).
fn elements<T>(dims: &[usize]) -> Result<usize, DataError> {
    let n = dims
        .iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(*d))
        .ok_or(DataError::Malformed("shape: element count overflows"))?;
    n.checked_mul(size_of::<T>().max(1))
        .filter(|b| isize::try_from(*b).is_ok())
        .ok_or(DataError::Malformed("shape: byte count overflows"))?;
    Ok(n)
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Variable<T> {
    fn write_shape(&self, _out: &mut Vec<u8>) {}

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        dims::<0>(shape)?;
        Ok(Self::new(T::zeroed()))
    }
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Vector<T> {
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.len()]);
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [len] = dims(shape)?;
        elements::<T>(&[len])?;
        Ok(Self::zeros(len))
    }
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Matrix<T> {
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.nx(), self.ny()]);
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [nx, ny] = dims(shape)?;
        elements::<T>(&[nx, ny])?;
        Ok(Self::zeros(nx, ny))
    }
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Block<T> {
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.nx(), self.ny(), self.nz()]);
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [nx, ny, nz] = dims(shape)?;
        elements::<T>(&[nx, ny, nz])?;
        Ok(Self::zeros(nx, ny, nz))
    }
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Ndim<T> {
    /// The number of dimensions, then the sizes (a slave's copy is dense).
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.ndim()]);
        put_dims(out, self.nn());
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let (count, sizes) = shape
            .split_first_chunk::<8>()
            .ok_or(DataError::Malformed("shape: wrong length"))?;
        let ndim = u64::from_le_bytes(*count);
        if u64::try_from(sizes.len()).ok() != ndim.checked_mul(8) {
            return Err(DataError::Malformed("shape: wrong length"));
        }
        let mut nn = Vec::with_capacity(sizes.len() / 8);
        for chunk in sizes.chunks_exact(8) {
            let [d] = dims(chunk)?;
            nn.push(d);
        }
        elements::<T>(&nn)?;
        Ok(Self::zeros(&nn))
    }
}

/// A sparse matrix's `ncol` from a shape (a `u32` on the sender).
fn ncol(d: usize) -> Result<u32, DataError> {
    u32::try_from(d).map_err(|_| DataError::Malformed("shape: ncol is not a u32"))
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Csr<T> {
    /// `nrow`, `ncol`, `nnz` (a slave's copy has a placeholder pattern, which the packed
    /// form replaces).
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.nrow(), self.ncol() as usize, self.nnz()]);
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [nrow, ncol_, nnz] = dims(shape)?;
        elements::<(T, u32)>(&[nnz])?;
        elements::<u32>(&[nrow, 1])?;
        Self::zeros(nrow, ncol(ncol_)?, nnz)
    }
}

impl<T: bytemuck::Pod + Send + Sync> Remote for Bcsr<T> {
    /// `nrow`, `ncol`, `nnz`, `r`, `c` (as for [`Csr`]).
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(
            out,
            &[
                self.nrow(),
                self.ncol() as usize,
                self.nnz(),
                self.r(),
                self.c(),
            ],
        );
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [nrow, ncol_, nnz, r, c] = dims(shape)?;
        elements::<T>(&[nnz, r, c])?;
        elements::<u32>(&[nrow, 1])?;
        Self::zeros(nrow, ncol(ncol_)?, nnz, r, c)
    }
}

impl Remote for Complex {
    fn write_shape(&self, out: &mut Vec<u8>) {
        put_dims(out, &[self.len()]);
    }

    fn from_shape(shape: &[u8]) -> Result<Self, DataError> {
        let [len] = dims(shape)?;
        elements::<[f64; 2]>(&[len])?;
        Ok(Self::zeros(len))
    }
}

/// Makes a slave's zeroed copy from a shape.
type Make = fn(&[u8]) -> Result<Arc<dyn AnyCell>, DataError>;

/// How to describe and rebuild data of one interface.
struct Kind {
    name: &'static str,
    shape: fn(&dyn Any) -> Option<Vec<u8>>,
    make: Make,
}

fn shape_of<I: Remote>(cell: &dyn Any) -> Option<Vec<u8>> {
    let cell = cell.downcast_ref::<Cell<I>>()?;
    let mut out = Vec::new();
    cell.read().write_shape(&mut out);
    Some(out)
}

fn make_cell<I: Remote>(shape: &[u8]) -> Result<Arc<dyn AnyCell>, DataError> {
    let data = I::from_shape(shape)?;
    Ok(Arc::new(Cell::new(temporary_id(), data)))
}

/// A codelet as slaves know it.
#[derive(Clone)]
struct Entry {
    /// What slaves run.
    slave: Arc<Kernel>,
}

/// The codelets and interfaces of a master-slave job, found by name on the slaves. Build
/// the same registry on every rank (all ranks run the same binary).
///
/// ```
/// use starling_std::Codelet;
/// use starling_std::interfaces::Vector;
/// use starling_std::ms::Registry;
///
/// let scale = Codelet::new("scale", |b| {
///     for x in b.w::<Vector<f64>>(0).as_mut_slice() {
///         *x *= 2.0;
///     }
/// });
/// let registry = Registry::new().codelet(&scale);
/// assert!(registry.contains("scale"));
/// assert!(!registry.contains("gemm"));
/// ```
#[derive(Clone)]
pub struct Registry {
    codelets: HashMap<String, Entry>,
    by_type: HashMap<TypeId, Arc<Kind>>,
    by_name: HashMap<&'static str, Arc<Kind>>,
}

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut names: Vec<&str> = self.codelets.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Registry")
            .field("codelets", &names)
            .field("interfaces", &self.by_name.len())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! builtins {
    ($reg:ident; $($t:ty),*) => {
        $(
            $reg = $reg
                .interface::<Variable<$t>>()
                .interface::<Vector<$t>>()
                .interface::<Matrix<$t>>()
                .interface::<Block<$t>>()
                .interface::<Ndim<$t>>()
                .interface::<Csr<$t>>()
                .interface::<Bcsr<$t>>();
        )*
    };
}

impl Registry {
    /// A registry with no codelet and every built-in interface (variables, vectors,
    /// matrices, blocks, N-dimensional arrays and CSR / BCSR matrices of every primitive
    /// number type, and [`Complex`]).
    pub fn new() -> Self {
        let mut reg = Self {
            codelets: HashMap::new(),
            by_type: HashMap::new(),
            by_name: HashMap::new(),
        };
        builtins!(reg; f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);
        reg.interface::<Complex>()
    }

    /// Registers `codelet`: slaves run its CPU implementation. A codelet without one
    /// ([`Codelet::empty`]) needs no registration: its tasks never leave the master.
    #[must_use]
    pub fn codelet(mut self, codelet: &Codelet) -> Self {
        if let Some(kernel) = codelet.kernel() {
            self.codelets.insert(
                codelet.name().to_owned(),
                Entry {
                    slave: Arc::clone(kernel),
                },
            );
        }
        self
    }

    /// Registers `codelet` with a slave-specific implementation `on_slave` (the
    /// reference's `starpu_codelet::mpi_ms_funcs`): slaves run `on_slave` instead of the
    /// CPU implementation.
    #[must_use]
    pub fn codelet_with_slave(
        mut self,
        codelet: &Codelet,
        on_slave: impl Fn(&mut Buffers<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.codelets.insert(
            codelet.name().to_owned(),
            Entry {
                slave: Arc::new(on_slave),
            },
        );
        self
    }

    /// Lets data of interface `I` travel to slaves.
    #[must_use]
    pub fn interface<I: Remote>(mut self) -> Self {
        let kind = Arc::new(Kind {
            name: core::any::type_name::<I>(),
            shape: shape_of::<I>,
            make: make_cell::<I>,
        });
        self.by_type
            .insert(TypeId::of::<Cell<I>>(), Arc::clone(&kind));
        self.by_name.insert(kind.name, kind);
        self
    }

    /// Whether a codelet named `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.codelets.contains_key(name)
    }

    /// The kind of an erased cell.
    fn kind_of(&self, cell: &dyn AnyCell) -> Option<&Arc<Kind>> {
        self.by_type.get(&cell.as_any().type_id())
    }
}

/// The most bytes a master-slave control message may have.
const MAX_MESSAGE: usize = 1 << 30;

/// Sends `bytes` to `dest` with `tag`; `done` runs with the outcome.
///
/// # Errors
/// [`CommError::RankOutOfRange`] (then `done` never runs).
fn send_bytes(
    ctx: &Context,
    bytes: Vec<u8>,
    dest: Rank,
    tag: Tag,
    done: Done,
) -> Result<(), CommError> {
    let cell: Arc<dyn AnyCell> = blob(bytes, 0);
    ctx.post_send(cell, dest, tag, SendOpts::default(), move |r| done.call(r))
}

/// Receives one message from `source` with `tag`; `then` runs with its bytes.
///
/// # Errors
/// [`CommError::RankOutOfRange`] (then `then` never runs).
fn recv_bytes(
    ctx: &Context,
    source: Rank,
    tag: Tag,
    then: impl FnOnce(Result<Vec<u8>, CommError>) + Send + 'static,
) -> Result<(), CommError> {
    let blob = blob(Vec::new(), MAX_MESSAGE);
    let cell: Arc<dyn AnyCell> = blob.clone();
    let done: Done = Done::new(move |result| {
        then(result.map(|()| blob.take().map(|b| b.bytes).unwrap_or_default()));
    });
    let opts = RecvOpts {
        comm: CommId::WORLD,
        sequential_consistency: false,
        unlock: None,
    };
    ctx.post_recv(cell, source, tag, opts, move |r| done.call(r))
}

/// Runs this rank's part of a master-slave job on `ctx`, a context of the whole job (the
/// in-process cluster's or an MPI rank's), whose world the mode uses for itself.
///
/// On the master it starts a one-rank [`Context`] for the application, runs `flow` on it
/// and returns `Some` of its value once every task finished and every slave stopped; on a
/// slave it serves the master until told to stop and returns `None`. Every rank must call
/// it with the same registry and configuration.
///
/// # Errors
/// The first [`MsError`] of the job, on the master; on a slave, a protocol error.
pub fn serve<R, F>(
    ctx: &Context,
    config: &MsConfig,
    registry: &Registry,
    flow: F,
) -> Result<Option<R>, MsError>
where
    R: Send,
    F: FnOnce(&Context) -> R + Send,
{
    if config.master.0 >= ctx.size() {
        return Err(MsError::Setup(format!(
            "the master is rank {} of a job of {} rank(s) (STARLING_MPI_MASTER_NODE)",
            config.master.0,
            ctx.size()
        )));
    }
    if ctx.size() > 64 {
        return Err(MsError::Setup(format!(
            "{} ranks: at most 63 slaves (64 memory nodes)",
            ctx.size()
        )));
    }
    // Master and slaves walk different flows: nothing for the agreement check to compare.
    ctx.set_check_agreement(false);
    if ctx.rank() == config.master {
        master::run(ctx, config, registry, flow).map(Some)
    } else {
        slave::run(ctx, config, registry).map(|()| None)
    }
}

/// Runs a master-slave job of `ranks` ranks held in this process (no MPI needed): rank
/// [`MsConfig::master`] runs `flow`, the others are its slaves, each with
/// [`MsConfig::slave_threads`] workers.
///
/// # Errors
/// The first [`MsError`] of the job; [`MsError::Shutdown`] when the ranks shut down with
/// leftovers.
///
/// # Panics
/// When `ranks` is 0, or when `flow` panics.
pub fn run_local<R, F>(
    ranks: u32,
    config: MsConfig,
    cluster: crate::ClusterConfig,
    registry: Registry,
    flow: F,
) -> Result<R, MsError>
where
    R: Send + 'static,
    F: Fn(&Context) -> R + Send + Sync + 'static,
{
    let mut cluster = cluster;
    if let Some(n) = config.slave_threads {
        cluster.runtime.workers = n;
    }
    // The ranks wait for each other's commands: a quiet spell is not a hang.
    cluster.watchdog = None;
    let master = config.master.0;
    // The master's failure, kept aside: it explains a shutdown with leftovers (a dead
    // slave's unanswered messages) better than the leftovers do.
    let failure: Arc<crate::sync::Mutex<Option<MsError>>> = Arc::default();
    let seen = Arc::clone(&failure);
    let results = crate::run_local_with(ranks, cluster, move |ctx| {
        let r = serve(ctx, &config, &registry, |app| flow(app));
        if let (Err(e), true) = (&r, ctx.rank().0 == config.master.0) {
            *crate::sync::lock(&seen) = Some(e.clone());
        }
        r
    });
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            return Err(crate::sync::lock(&failure)
                .take()
                .unwrap_or(MsError::Shutdown(e)));
        }
    };
    // The master's outcome first: its failure names what went wrong; a slave's says less.
    let mut value = None;
    let mut slave_error = None;
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(Some(v)) => value = Some(v),
            Ok(None) => {}
            Err(e) if rank == master as usize => return Err(e),
            Err(e) => {
                slave_error.get_or_insert(e);
            }
        }
    }
    match (value, slave_error) {
        (_, Some(e)) => Err(e),
        (Some(v), None) => Ok(v),
        (None, None) => Err(MsError::Setup("the master returned nothing".into())),
    }
}

#[cfg(test)]
mod tests;
