//! The device pipeline: one [`Layer`] runs the device tasks of a process on every device
//! of a [`Backend`], asynchronously, and keeps main memory coherent with the devices.
//!
//! # What it does
//!
//! - **Data stays on the device.** A task that writes a handle on a device leaves the
//!   device copy the only valid one (the core's [`coherence`](starling_core::coherence)
//!   state machine decides every copy). Main memory is brought up to date only when the
//!   host needs it: `starling-std` calls [`DeviceLayer::to_host`] before every host
//!   access (a CPU task, a send, a receive, an acquisition, an unregistration) and
//!   [`DeviceLayer::flush`] at shutdown.
//! - **No CPU worker waits for a device.** A worker that takes a ready device task hands
//!   it to [`DeviceLayer::start`] and goes on. Each device has a *driver thread*: it
//!   queues the task's input copies on the device's upload stream and its kernel on one of
//!   the device's compute streams (round robin), up to [`PipelineConfig::window`] tasks in
//!   flight, and completes a task when the event after its kernel fired. The inputs of
//!   the tasks in the window are therefore copied while earlier tasks compute (prefetch).
//!   It polls those events without the layer's lock, taking the lock only to release
//!   what completed and to issue what was queued, and it reports each task's kernel time
//!   as the device measured it ([`Backend::kernel_seconds`]) for the `dmda` scheduler's
//!   models.
//! - **Device memory is a cache under a byte budget** ([`PipelineConfig::budget`]): before
//!   a task's buffers are allocated, the least recently used copies that no task in
//!   flight uses are freed; a copy that is the only valid one is written back to main
//!   memory first, so nothing is ever lost. When nothing can be freed, the task waits for
//!   the tasks in flight.
//! - **Pinned memory.** A handle copied more than once ([`PipelineConfig::auto_pin`]
//!   bytes or more), or pinned by the application ([`Layer::pin`], the reference's
//!   `starpu_memory_pin`), has its host storage page-locked: its copies are asynchronous
//!   and run at the bus's speed. It is unpinned when the handle is unregistered.
//! - **Where tasks run.** Under the runtime's `prio` and `ws` schedulers the layer
//!   decides: [`Policy::PreferDevice`] queues every task on a device;
//!   [`Policy::Eager`] gives a task back to the CPU when its device's window is full.
//!   Under `dmda` (`STARLING_SCHED=dmda`) the runtime's scheduler places each task on a
//!   CPU worker or here from the performance models, and the layer queues every task it
//!   is given ([`DeviceTask::placed`]); [`Layer::measure_bus`](DeviceLayer::measure_bus)
//!   gives the scheduler the link's latency and bandwidth. A
//!   task that fails on the device fails (reported at shutdown, never a wrong result),
//!   unless [`PipelineConfig::fallback`] asks to run its CPU implementation instead.
//!   [`Layer::stats`] counts tasks on each side and the bytes each way.
//!
//! A device for each task: the device that holds a valid copy of the data it writes, else
//! the first written handle's [uid](Buffers::uid) modulo the devices (owner
//! computes, stable per handle), so every device of a process is used.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use starling_core::AccessMode;
use starling_core::coherence::{MemNode, Replicas};
use starling_std::device::{Buffers, Bus, Codelet, DeviceImpl, DeviceLayer, DeviceTask, HostRef};
use starling_std::interfaces::{Block, Matrix, Variable, Vector};
use std::time::Instant;

use crate::GpuError;
use crate::backend::{Backend, DeviceBuf, Launched, Shape, Timing};
use crate::replicas::MAX_NODES;

mod driver;

/// How tasks whose codelet has a device implementation choose between the CPU and a
/// device, under the runtime's `prio` and `ws` schedulers. Under `dmda`
/// (`STARLING_SCHED=dmda`) the scheduler chooses from the performance models and the
/// policy is not used: every task it places on a device is queued there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// Always on a device: when its window is full, the task waits in the device's queue.
    #[default]
    PreferDevice,
    /// On a device when its window has room, else on the CPU (when the codelet has a CPU
    /// implementation).
    Eager,
}

/// How a [`Layer`] runs its devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// CPU or device, per task.
    pub policy: Policy,
    /// Run a task's CPU implementation when the device fails it (off: the task fails).
    pub fallback: bool,
    /// Tasks in flight per device (queued on its streams).
    pub window: usize,
    /// Bytes of device memory the layer keeps copies in, per device.
    pub budget: Vec<usize>,
    /// A handle of this many bytes or more is pinned when it is copied a second time.
    pub auto_pin: Option<usize>,
    /// How long the driver thread sleeps between two looks at the events of the tasks in
    /// flight; zero: it yields the processor instead (a busy device on a machine with
    /// cores to spare).
    pub poll: Duration,
}

/// How many tasks ran where, and the bytes copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Tasks whose device implementation ran.
    pub device_tasks: u64,
    /// Tasks of device codelets that ran their CPU implementation (given back under
    /// [`Policy::Eager`], or a fallback).
    pub cpu_tasks: u64,
    /// Of those, tasks that failed on a device and fell back to the CPU.
    pub fallbacks: u64,
    /// Device tasks that failed (and did not fall back).
    pub failed: u64,
    /// Bytes copied from host to device.
    pub bytes_to_device: u64,
    /// Bytes copied from device to host (host accesses, write-backs, flushes).
    pub bytes_to_host: u64,
    /// Copies freed to make room.
    pub evictions: u64,
    /// Of those, copies written back to main memory first (the only valid ones).
    pub write_backs: u64,
    /// Bytes of host memory pinned.
    pub pinned_bytes: u64,
    /// Values received from another rank of the process as device copies (no copy
    /// through main memory).
    pub device_values: u64,
}

#[derive(Debug, Default)]
struct Counters {
    device_tasks: AtomicU64,
    cpu_tasks: AtomicU64,
    fallbacks: AtomicU64,
    failed: AtomicU64,
    bytes_to_device: AtomicU64,
    bytes_to_host: AtomicU64,
    evictions: AtomicU64,
    write_backs: AtomicU64,
    pinned_bytes: AtomicU64,
    device_values: AtomicU64,
}

fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A codelet's kernel for backend `B`, as the runtime carries it ([`DeviceImpl`]).
struct KernelOf<B: Backend>(Arc<B::Kernel>);

/// One handle known to the layer: its copies and their coherence.
struct Entry<B: Backend> {
    state: Replicas<MAX_NODES>,
    /// Index = memory node; entry 0 (main memory) is never used.
    bufs: Vec<Option<B::Buf>>,
    /// Elements.
    len: usize,
    /// The host version the state was last brought up to date with.
    version: u64,
    /// Tasks in flight using the copy on each node.
    in_use: [u32; MAX_NODES],
    last_use: u64,
    /// Copies made between main memory and a device.
    copies: u32,
    /// The host storage, kept alive while the layer knows the handle.
    host: HostRef,
    /// The address of the host storage, when it is pinned.
    pinned: Option<usize>,
}

impl<B: Backend> Entry<B> {
    fn bytes(&self) -> usize {
        self.len * size_of::<f64>()
    }

    fn buf(&self, node: MemNode) -> Option<&B::Buf> {
        self.bufs.get(node.index()).and_then(Option::as_ref)
    }

    fn has_buf(&self, node: MemNode) -> bool {
        self.buf(node).is_some()
    }

    /// Frees the buffer on device `d`, if it has one that no task in flight uses (its copy
    /// is stale or may go), and gives its bytes back to the device's count.
    fn free_copy(&mut self, devs: &mut [Dev], d: usize) {
        let i = node_of(d).index();
        if self.in_use[i] == 0 && self.bufs.get_mut(i).and_then(Option::take).is_some() {
            devs[d].used = devs[d].used.saturating_sub(self.bytes());
        }
    }

    /// Frees every device buffer and unpins the host storage: the layer forgets the handle
    /// (nothing of it is in flight).
    fn discard(&mut self, devs: &mut [Dev], backend: &B) {
        for d in 0..devs.len() {
            self.free_copy(devs, d);
        }
        if let Some(p) = self.pinned.take() {
            backend.unpin(p);
        }
    }

    /// Frees the buffers of the device copies in `stale` (from a write's invalidation).
    fn free_stale(&mut self, devs: &mut [Dev], stale: starling_core::coherence::NodeSet) {
        for n in stale.iter().filter(|n| !n.is_main_ram()) {
            self.free_copy(devs, n.index() - 1);
        }
    }
}

/// A ready task in a device's queue: highest priority first, then first come.
struct Queued {
    priority: i32,
    seq: u64,
    task: DeviceTask,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.priority, self.seq) == (other.priority, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then(other.seq.cmp(&self.seq))
    }
}

/// A task queued on a device's streams.
struct InFlight<B: Backend> {
    task: DeviceTask,
    event: B::Event,
    checks: Vec<B::Check>,
    timing: Timing<B::Timer>,
    /// The handles it uses on the device, and how.
    uses: Vec<(u64, AccessMode)>,
}

/// One device's queue and tasks in flight.
struct Dev {
    queue: BinaryHeap<Queued>,
    /// Tasks in flight: the driver thread holds them, and polls their events without
    /// the lock (a driver spinning on the lock starved the threads handing it tasks and
    /// device values: milliseconds per message between two ranks).
    in_flight: usize,
    /// Bytes of copies on the device.
    used: usize,
    next_stream: usize,
}

struct State<B: Backend> {
    entries: HashMap<u64, Entry<B>>,
    devs: Vec<Dev>,
    clock: u64,
    seq: u64,
    stop: bool,
}

struct Shared<B: Backend> {
    backend: B,
    config: PipelineConfig,
    state: Mutex<State<B>>,
    /// One per device: its driver thread waits here for work.
    wake: Vec<Condvar>,
    /// Per device, tasks queued so far: the driver thread takes the lock to issue only
    /// when this moved (or a task of its completed).
    submitted: Vec<AtomicU64>,
    counters: Counters,
}

/// The device layer of a process over backend `B`: see the [module docs](self).
pub struct Layer<B: Backend> {
    shared: Arc<Shared<B>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<B: Backend> core::fmt::Debug for Layer<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Layer")
            .field("devices", &self.shared.backend.devices())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// The memory node of device `d`.
pub(crate) fn node_of(d: usize) -> MemNode {
    MemNode(u8::try_from(d + 1).unwrap_or(u8::MAX))
}

impl<B: Backend> Layer<B> {
    /// A layer over `backend`, with one driver thread per device.
    ///
    /// # Errors
    /// [`GpuError::Unsupported`] when the backend has no device or more than
    /// [`MAX_NODES`] − 1.
    pub fn new(backend: B, mut config: PipelineConfig) -> Result<Arc<Self>, GpuError> {
        let n = backend.devices();
        if n == 0 || n >= MAX_NODES {
            return Err(GpuError::Unsupported("a device count of 0 or above 16"));
        }
        config.window = config.window.max(1);
        config.budget.resize(n, usize::MAX);
        let shared = Arc::new(Shared {
            backend,
            config,
            state: Mutex::new(State {
                entries: HashMap::new(),
                devs: (0..n)
                    .map(|_| Dev {
                        queue: BinaryHeap::new(),
                        in_flight: 0,
                        used: 0,
                        next_stream: 0,
                    })
                    .collect(),
                clock: 0,
                seq: 0,
                stop: false,
            }),
            wake: (0..n).map(|_| Condvar::new()).collect(),
            submitted: (0..n).map(|_| AtomicU64::new(0)).collect(),
            counters: Counters::default(),
        });
        let threads = (0..n)
            .map(|d| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("starling-dev{d}"))
                    .spawn(move || s.drive(d))
                    .map_err(|e| GpuError::Driver(format!("spawning a driver thread: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Self {
            shared,
            threads: Mutex::new(threads),
        }))
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.shared.config
    }

    /// How many devices.
    pub fn device_count(&self) -> usize {
        self.shared.backend.devices()
    }

    /// The policy choosing between the CPU and a device.
    pub fn policy(&self) -> Policy {
        self.shared.config.policy
    }

    /// How many tasks ran where, and the bytes copied, so far.
    pub fn stats(&self) -> GpuStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GpuStats {
            device_tasks: l(&c.device_tasks),
            cpu_tasks: l(&c.cpu_tasks),
            fallbacks: l(&c.fallbacks),
            failed: l(&c.failed),
            bytes_to_device: l(&c.bytes_to_device),
            bytes_to_host: l(&c.bytes_to_host),
            evictions: l(&c.evictions),
            write_backs: l(&c.write_backs),
            pinned_bytes: l(&c.pinned_bytes),
            device_values: l(&c.device_values),
        }
    }

    /// A codelet whose device implementation is `kernel` and CPU implementation `cpu`
    /// (`None`: device only).
    pub fn codelet_with(
        self: &Arc<Self>,
        name: &str,
        cpu: Option<Arc<starling_std::device::Kernel>>,
        kernel: Arc<B::Kernel>,
    ) -> Codelet {
        let layer: Arc<dyn DeviceLayer> = Arc::clone(self) as Arc<dyn DeviceLayer>;
        let device = DeviceImpl::new(layer, Arc::new(KernelOf::<B>(kernel)));
        Codelet::with_device(name, cpu, device)
    }

    /// Pins the host storage of `data` (the reference's `starpu_memory_pin`): its copies
    /// to and from the devices become asynchronous and run at the bus's speed. It stays
    /// pinned until the handle is unregistered or the layer is dropped.
    ///
    /// # Errors
    /// [`GpuError::Unsupported`] for an interface a device cannot hold; the backend's
    /// failure to pin.
    pub fn pin(&self, data: &HostRef) -> Result<(), GpuError> {
        let bufs = data.buffers();
        let len = with_host(&bufs, 0, <[f64]>::len)?;
        let mut st = lock(&self.shared.state);
        let version = bufs.version(0);
        let e = st
            .entries
            .entry(data.uid())
            .or_insert_with(|| Entry::new(len, version, data.clone()));
        self.shared.pin_entry(e)
    }

    /// Writes every copy valid only on a device back to main memory, then frees every
    /// device copy (a fresh start, e.g. between two benchmark runs). Nothing is in
    /// flight when it is called.
    pub fn clear(&self) {
        self.shared.flush();
        let mut st = lock(&self.shared.state);
        let st = &mut *st;
        for e in st.entries.values_mut() {
            for d in 0..st.devs.len() {
                let node = node_of(d);
                if e.has_buf(node) && e.in_use[node.index()] == 0 && e.state.evict(node).is_ok() {
                    e.free_copy(&mut st.devs, d);
                }
            }
        }
    }
}

impl<B: Backend> Drop for Layer<B> {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.shared.state);
            st.stop = true;
        }
        for w in &self.shared.wake {
            w.notify_all();
        }
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
        let mut st = lock(&self.shared.state);
        for e in st.entries.values_mut() {
            if let Some(p) = e.pinned.take() {
                self.shared.backend.unpin(p);
            }
        }
    }
}

impl<B: Backend> Entry<B> {
    fn new(len: usize, version: u64, host: HostRef) -> Self {
        Self {
            state: Replicas::new(),
            bufs: Vec::new(),
            len,
            version,
            in_use: [0; MAX_NODES],
            last_use: 0,
            copies: 0,
            host,
            pinned: None,
        }
    }
}

impl<B: Backend> Shared<B> {
    fn state(&self) -> MutexGuard<'_, State<B>> {
        lock(&self.state)
    }

    /// Pins `e`'s host storage, if it is not yet.
    fn pin_entry(&self, e: &mut Entry<B>) -> Result<(), GpuError> {
        if e.pinned.is_some() {
            return Ok(());
        }
        let bufs = e.host.buffers();
        let (ptr, res) = with_host(&bufs, 0, |h| (h.as_ptr() as usize, self.backend.pin(h)))?;
        res?;
        e.pinned = Some(ptr);
        add(&self.counters.pinned_bytes, e.bytes());
        Ok(())
    }

    /// Whether the host storage of `bufs`' access `i` is pinned memory.
    fn is_pinned(e: &Entry<B>, bufs: &Buffers<'_>, i: usize) -> bool {
        e.pinned
            .is_some_and(|p| with_host(bufs, i, |h| h.as_ptr() as usize == p).unwrap_or(false))
    }

    /// Counts a copy of `e`; pins it when it is copied a second time and large enough.
    fn count_copy(&self, e: &mut Entry<B>) {
        e.copies = e.copies.saturating_add(1);
        if e.copies >= 2 && self.config.auto_pin.is_some_and(|min| e.bytes() >= min) {
            // Pinning is an optimisation: a failure leaves the memory pageable.
            let _ = self.pin_entry(e);
        }
    }

    /// The host data changed since `e` last saw it (a receive, a CPU write): the host
    /// copy is the only valid one.
    fn sync_version(e: &mut Entry<B>, version: u64) -> Result<(), GpuError> {
        if e.version != version {
            let _stale = e.state.after_receive()?;
            e.version = version;
        }
        Ok(())
    }

    /// Makes main memory's copy of `e` valid (copying from a device), writing into the
    /// host storage of `bufs`' access `i`.
    fn fetch_to_host(
        &self,
        e: &mut Entry<B>,
        bufs: &Buffers<'_>,
        i: usize,
    ) -> Result<(), GpuError> {
        if e.state.valid().contains(MemNode::MAIN_RAM) {
            return Ok(());
        }
        let a = e.state.acquire(MemNode::MAIN_RAM, AccessMode::R)?;
        if let Some(f) = a.fetch {
            let dev = f.from.index() - 1;
            let copied = match e.buf(f.from) {
                Some(src) => {
                    with_host_mut(bufs, i, |h| self.backend.download(dev, src, h)).and_then(|r| r)
                }
                None => Err(GpuError::Driver(format!("no buffer on valid {}", f.from))),
            };
            match copied {
                Ok(()) => {
                    let _stale = e.state.handle_transfer_done(f)?;
                    add(&self.counters.bytes_to_host, e.bytes());
                }
                Err(err) => {
                    e.state.handle_transfer_failed(f)?;
                    let _ = e.state.release(MemNode::MAIN_RAM, AccessMode::R);
                    return Err(err);
                }
            }
        }
        e.state.release(MemNode::MAIN_RAM, AccessMode::R)?;
        // The download took write access to the host copy: the version the copies match.
        e.version = bufs.version(i);
        self.count_copy(e);
        Ok(())
    }

    /// [`DeviceLayer::to_host`]: see the trait.
    fn to_host(&self, bufs: &Buffers<'_>) -> Result<(), GpuError> {
        let mut st = self.state();
        let st = &mut *st;
        for i in 0..bufs.len() {
            let mode = bufs.mode(i);
            if mode == AccessMode::SCRATCH {
                continue;
            }
            let Some(e) = st.entries.get_mut(&bufs.uid(i)) else {
                continue;
            };
            Self::sync_version(e, bufs.version(i))?;
            let pure_write = mode.writes() && !mode.reads() && !mode.contains(AccessMode::REDUX);
            if !pure_write {
                self.fetch_to_host(e, bufs, i)?;
            }
            if mode.writes() || mode.intersects(AccessMode::REDUX | AccessMode::COMMUTE) {
                let _ = e.state.acquire(MemNode::MAIN_RAM, AccessMode::W)?;
                e.state.release(MemNode::MAIN_RAM, AccessMode::W)?;
                // The device copies are stale: free them.
                for d in 0..st.devs.len() {
                    e.free_copy(&mut st.devs, d);
                }
            }
        }
        Ok(())
    }

    /// [`DeviceLayer::flush`]: every copy valid only on a device goes home.
    fn flush(&self) {
        let mut st = self.state();
        for e in st.entries.values_mut() {
            if e.state.valid().contains(MemNode::MAIN_RAM) || e.state.valid().is_empty() {
                continue;
            }
            let host = e.host.clone();
            let bufs = host.buffers();
            if let Err(err) = self.fetch_to_host(e, &bufs, 0) {
                eprintln!("starling-gpu: a device copy could not be written back: {err}");
            }
        }
    }

    /// Frees copies on device `dev` (least recently used first, none that `keep` names or
    /// a task in flight uses) until `need` more bytes fit in its budget; writes back the
    /// only valid ones first. Whether they fit now.
    fn make_room(&self, st: &mut State<B>, dev: usize, need: usize, keep: &[u64]) -> bool {
        let node = node_of(dev);
        let budget = self.config.budget[dev];
        while st.devs[dev].used.saturating_add(need) > budget {
            let victim = st
                .entries
                .iter()
                .filter(|(uid, e)| {
                    e.has_buf(node) && e.in_use[node.index()] == 0 && !keep.contains(uid)
                })
                .min_by_key(|(_, e)| e.last_use)
                .map(|(uid, _)| *uid);
            let Some(uid) = victim else {
                return false;
            };
            let Some(e) = st.entries.get_mut(&uid) else {
                return false;
            };
            if e.state.valid() == starling_core::coherence::NodeSet::single(node) {
                let host = e.host.clone();
                if let Err(err) = self.fetch_to_host(e, &host.buffers(), 0) {
                    eprintln!("starling-gpu: writing back before an eviction failed: {err}");
                    return false;
                }
                add(&self.counters.write_backs, 1);
            }
            if e.state.evict(node).is_err() {
                return false;
            }
            e.free_copy(&mut st.devs, dev);
            add(&self.counters.evictions, 1);
        }
        true
    }

    /// The device for `bufs`: the one holding a valid copy of a written handle, else the
    /// first written handle's uid modulo the devices.
    fn pick_device(&self, st: &State<B>, bufs: &Buffers<'_>) -> usize {
        let n = st.devs.len();
        if n == 1 {
            return 0;
        }
        let written = (0..bufs.len()).filter(|&i| bufs.mode(i).writes());
        for i in written.clone() {
            if let Some(e) = st.entries.get(&bufs.uid(i)) {
                if let Some(d) = (0..n).find(|&d| e.state.valid().contains(node_of(d))) {
                    return d;
                }
            }
        }
        let key = written
            .chain(0..bufs.len())
            .next()
            .map_or(0, |i| bufs.uid(i));
        // Uids are handed out in steps: mix them before taking the remainder.
        ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % n as u64) as usize
    }
}

impl<B: Backend> DeviceLayer for Layer<B> {
    fn start(&self, task: DeviceTask) -> Result<(), DeviceTask> {
        let s = &self.shared;
        let mut st = s.state();
        if st.stop {
            return Err(task);
        }
        let dev = s.pick_device(&st, &task.buffers());
        let d = &st.devs[dev];
        // A task the scheduler placed here (`dmda`) is queued whatever the policy.
        if s.config.policy == Policy::Eager
            && !task.placed()
            && task.has_cpu()
            && d.in_flight + d.queue.len() >= s.config.window
        {
            add(&s.counters.cpu_tasks, 1);
            return Err(task);
        }
        st.seq += 1;
        let seq = st.seq;
        let priority = task.priority();
        st.devs[dev].queue.push(Queued {
            priority,
            seq,
            task,
        });
        s.submitted[dev].fetch_add(1, Ordering::Release);
        drop(st);
        s.wake[dev].notify_one();
        Ok(())
    }

    fn to_host(&self, data: &Buffers<'_>) -> Result<(), String> {
        self.shared.to_host(data).map_err(|e| e.to_string())
    }

    /// Times copies of 8 bytes and of 4 MiB from pageable host memory to device 0 and
    /// back (the best of three each): the latency is the small copy's time, the bandwidth
    /// the large copy's bytes over the rest of its time.
    fn measure_bus(&self) -> Option<(Bus, Bus)> {
        let b = &self.shared.backend;
        const LARGE: usize = 1 << 19;
        let mut host = vec![0.0f64; LARGE];
        let mut time = |len: usize, up: bool| -> Option<f64> {
            let mut best = f64::INFINITY;
            let mut buf = b.alloc(0, len).ok()?;
            for _ in 0..3 {
                let t0 = Instant::now();
                let ev = b.upload(0, &host[..len], false, &mut buf).ok()?;
                while !b.done(&ev).ok()? {
                    std::thread::yield_now();
                }
                let up_time = t0.elapsed().as_secs_f64();
                let t = if up {
                    up_time
                } else {
                    let t0 = Instant::now();
                    b.download(0, &buf, &mut host[..len]).ok()?;
                    t0.elapsed().as_secs_f64()
                };
                best = best.min(t);
            }
            Some(best)
        };
        let mut link = |up: bool| -> Option<Bus> {
            let latency = time(1, up)?;
            let large = time(LARGE, up)?;
            Some(Bus {
                latency,
                bandwidth: (LARGE * 8) as f64 / (large - latency).max(1e-9),
            })
        };
        Some((link(true)?, link(false)?))
    }

    fn forget(&self, uid: u64) {
        let mut st = self.shared.state();
        let st = &mut *st;
        if let Some(mut e) = st.entries.remove(&uid) {
            e.discard(&mut st.devs, &self.shared.backend);
        }
    }

    fn flush(&self) {
        self.shared.flush();
    }

    fn export(&self, data: &Buffers<'_>) -> Option<Box<dyn core::any::Any + Send>> {
        self.shared
            .export(data)
            .map(|s| Box::new(s) as Box<dyn core::any::Any + Send>)
    }

    fn adopt(
        &self,
        data: &Buffers<'_>,
        value: Box<dyn core::any::Any + Send>,
    ) -> Result<(), Box<dyn core::any::Any + Send>> {
        let snap = value.downcast::<Snapshot<B>>()?;
        self.shared
            .adopt(data, *snap)
            .map_err(|s| Box::new(s) as Box<dyn core::any::Any + Send>)
    }

    fn value_bytes(&self, value: Box<dyn core::any::Any + Send>) -> Result<Vec<u8>, String> {
        let snap = value
            .downcast::<Snapshot<B>>()
            .map_err(|_| "not a value of this device layer".to_owned())?;
        let mut host = vec![0.0f64; snap.len];
        self.shared
            .backend
            .download(snap.dev, &snap.buf, &mut host)
            .map_err(|e| e.to_string())?;
        add(
            &self.shared.counters.bytes_to_host,
            snap.len * size_of::<f64>(),
        );
        Ok(host.iter().flat_map(|x| x.to_ne_bytes()).collect())
    }
}

/// A handle's value copied on a device, travelling between ranks of one process in place
/// of its bytes ([`DeviceLayer::export`]).
struct Snapshot<B: Backend> {
    dev: usize,
    buf: B::Buf,
    len: usize,
    shape: Shape,
}

/// Whether the packed bytes of a handle of this shape are its storage as it is (no
/// padding): then a device copy of the storage is its value, and its bytes its packed form.
fn dense(shape: Shape) -> bool {
    match shape {
        Shape::Variable | Shape::Vector { .. } => true,
        Shape::Matrix { nx, ld, .. } => ld == nx,
        Shape::Block {
            nx, ny, ldy, ldz, ..
        } => ldy == nx && ldz == nx * ny,
    }
}

impl<B: Backend> Shared<B> {
    /// [`DeviceLayer::export`]: a snapshot of access 0's device copy, when a device holds
    /// a valid one.
    fn export(&self, data: &Buffers<'_>) -> Option<Snapshot<B>> {
        let shape = shape_of(data, 0).ok().filter(|&s| dense(s))?;
        let len = with_host(data, 0, <[f64]>::len).ok()?;
        let mut st = self.state();
        let st = &mut *st;
        let e = st.entries.get_mut(&data.uid(0))?;
        Self::sync_version(e, data.version(0)).ok()?;
        if e.len != len {
            return None;
        }
        let dev = (0..st.devs.len()).find(|&d| e.state.valid().contains(node_of(d)))?;
        let src = e.buf(node_of(dev))?;
        let mut buf = self.backend.alloc(dev, len).ok()?;
        self.backend.copy(dev, src, &mut buf).ok()?;
        Some(Snapshot {
            dev,
            buf,
            len,
            shape,
        })
    }

    /// [`DeviceLayer::adopt`]: access 0's copy on the snapshot's device becomes the
    /// snapshot, the only valid copy.
    fn adopt(&self, data: &Buffers<'_>, snap: Snapshot<B>) -> Result<(), Snapshot<B>> {
        let fits = shape_of(data, 0).is_ok_and(|s| s == snap.shape)
            && with_host(data, 0, <[f64]>::len).is_ok_and(|l| l == snap.len);
        if !fits {
            return Err(snap);
        }
        let node = node_of(snap.dev);
        let mut st = self.state();
        let st = &mut *st;
        st.clock += 1;
        let clock = st.clock;
        let version = data.version(0);
        let e = st
            .entries
            .entry(data.uid(0))
            .or_insert_with(|| Entry::new(snap.len, version, data.host_ref(0)));
        if e.len != snap.len || Self::sync_version(e, version).is_err() {
            return Err(snap);
        }
        let Ok(a) = e.state.acquire(node, AccessMode::W) else {
            return Err(snap);
        };
        let _ = e.state.release(node, AccessMode::W);
        if e.bufs.len() <= node.index() {
            e.bufs.resize_with(node.index() + 1, || None);
        }
        if e.bufs[node.index()].replace(snap.buf).is_none() {
            st.devs[snap.dev].used += e.bytes();
        }
        e.free_stale(&mut st.devs, a.invalidate);
        e.last_use = clock;
        add(&self.counters.device_values, 1);
        Ok(())
    }
}

/// The layout of `bufs`' access `i`, for the interfaces a device holds.
pub(crate) fn shape_of(bufs: &Buffers<'_>, i: usize) -> Result<Shape, GpuError> {
    if bufs.is::<Matrix<f64>>(i) {
        let m = bufs.r::<Matrix<f64>>(i);
        Ok(Shape::Matrix {
            nx: m.nx(),
            ny: m.ny(),
            ld: m.ld(),
        })
    } else if bufs.is::<Vector<f64>>(i) {
        Ok(Shape::Vector {
            len: bufs.r::<Vector<f64>>(i).len(),
        })
    } else if bufs.is::<Variable<f64>>(i) {
        Ok(Shape::Variable)
    } else if bufs.is::<Block<f64>>(i) {
        let b = bufs.r::<Block<f64>>(i);
        Ok(Shape::Block {
            nx: b.nx(),
            ny: b.ny(),
            nz: b.nz(),
            ldy: b.ldy(),
            ldz: b.ldz(),
        })
    } else {
        Err(GpuError::Unsupported(
            "an interface other than Variable, Vector, Matrix or Block of f64",
        ))
    }
}

/// Runs `f` on the host storage of access `i` (read).
pub(crate) fn with_host<R>(
    bufs: &Buffers<'_>,
    i: usize,
    f: impl FnOnce(&[f64]) -> R,
) -> Result<R, GpuError> {
    Ok(if bufs.is::<Matrix<f64>>(i) {
        f(bufs.r::<Matrix<f64>>(i).as_slice())
    } else if bufs.is::<Vector<f64>>(i) {
        f(bufs.r::<Vector<f64>>(i).as_slice())
    } else if bufs.is::<Block<f64>>(i) {
        f(bufs.r::<Block<f64>>(i).as_slice())
    } else if bufs.is::<Variable<f64>>(i) {
        f(core::slice::from_ref(bufs.r::<Variable<f64>>(i).value()))
    } else {
        return Err(GpuError::Unsupported(
            "an interface other than Variable, Vector, Matrix or Block of f64",
        ));
    })
}

/// Runs `f` on the host storage of access `i` (write: the handle takes a new version).
pub(crate) fn with_host_mut<R>(
    bufs: &Buffers<'_>,
    i: usize,
    f: impl FnOnce(&mut [f64]) -> R,
) -> Result<R, GpuError> {
    Ok(if bufs.is::<Matrix<f64>>(i) {
        f(bufs.w::<Matrix<f64>>(i).as_mut_slice())
    } else if bufs.is::<Vector<f64>>(i) {
        f(bufs.w::<Vector<f64>>(i).as_mut_slice())
    } else if bufs.is::<Block<f64>>(i) {
        f(bufs.w::<Block<f64>>(i).as_mut_slice())
    } else if bufs.is::<Variable<f64>>(i) {
        f(core::slice::from_mut(
            bufs.w::<Variable<f64>>(i).value_mut(),
        ))
    } else {
        return Err(GpuError::Unsupported(
            "an interface other than Variable, Vector, Matrix or Block of f64",
        ));
    })
}
