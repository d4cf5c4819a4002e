//! What a task runs: a [`Codelet`] — a name, a CPU implementation ([`Kernel`]) and
//! optionally a device implementation ([`DeviceImpl`]) run by a device layer
//! ([`DeviceLayer`]) — and the [`Buffers`] its implementations see. A codelet names its
//! device layer and a layer runs the tasks of codelets, so both live here, below the
//! task runtime that schedules them and the transports that carry
//! device values ([`DeviceValue`]); the public paths are [`crate::device`] for the
//! layers and the crate root for the codelet.

use core::any::Any;
use core::fmt;

use starling_core::AccessMode;

use crate::runtime::data::{AnyCell, Cell, DataMut, DataRef, Interface};
use crate::runtime::perfmodel::PerfModel;
use crate::sync::Arc;

/// A task's CPU implementation.
pub type Kernel = dyn Fn(&mut Buffers<'_>) + Send + Sync;

/// A kind of task: a name and a CPU implementation (the reference's `starpu_codelet`).
///
/// One `Arc`: a codelet is cloned into every insert being built, which moves at every
/// call of its chain, so it stays one pointer (8 bytes) and clones with one count.
#[derive(Clone)]
pub struct Codelet(pub(crate) Arc<Parts>);

/// What a [`Codelet`] is made of.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) name: Arc<str>,
    pub(crate) kernel: Option<Arc<Kernel>>,
    pub(crate) device: Option<Arc<DeviceImpl>>,
    /// A regression model's formula; `None`: history-based.
    pub(crate) model: Option<PerfModel>,
}

impl fmt::Debug for Codelet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codelet")
            .field("name", &self.0.name)
            .finish_non_exhaustive()
    }
}

impl Codelet {
    /// A codelet named `name` whose CPU implementation is `kernel`.
    pub fn new(name: &str, kernel: impl Fn(&mut Buffers<'_>) + Send + Sync + 'static) -> Self {
        Self(Arc::new(Parts {
            name: Arc::from(name),
            kernel: Some(Arc::new(kernel)),
            device: None,
            model: None,
        }))
    }

    /// A codelet named `name` with a device implementation, run by the device layer
    /// `device` names ([`crate::device`]), and optionally a CPU one, `cpu`, for the tasks
    /// the layer gives back.
    pub fn with_device(name: &str, cpu: Option<Arc<Kernel>>, device: DeviceImpl) -> Self {
        Self(Arc::new(Parts {
            name: Arc::from(name),
            kernel: cpu,
            device: Some(Arc::new(device)),
            model: None,
        }))
    }

    /// The codelet with performance model `model` (the reference's `cl.model`). Without
    /// one, a codelet with an implementation has a history-based model
    /// ([`PerfModel::history`]), used by the `dmda` scheduler and kept under its name
    /// ([`crate::perfmodel`]).
    pub fn with_model(self, model: PerfModel) -> Self {
        let mut parts = (*self.0).clone();
        parts.model = Some(model);
        Self(Arc::new(parts))
    }

    /// The codelet's performance model, if it was given one ([`Codelet::with_model`]).
    pub fn model(&self) -> Option<&PerfModel> {
        self.0.model.as_ref()
    }

    /// The device implementation, if the codelet has one.
    pub fn device(&self) -> Option<&DeviceImpl> {
        self.0.device.as_deref()
    }

    /// A codelet with no implementation: its tasks only order accesses and run their
    /// callbacks (the reference's `NULL` codelet).
    pub fn empty(name: &str) -> Self {
        Self(Arc::new(Parts {
            name: Arc::from(name),
            kernel: None,
            device: None,
            model: None,
        }))
    }

    /// The codelet's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether the codelet has an implementation (not [`Codelet::empty`]).
    pub fn has_kernel(&self) -> bool {
        self.0.kernel.is_some() || self.0.device.is_some()
    }

    /// The CPU implementation, if any.
    pub(crate) fn kernel(&self) -> Option<&Arc<Kernel>> {
        self.0.kernel.as_ref()
    }

    /// A codelet named `name` running `kernel`.
    pub(crate) fn from_kernel(name: &str, kernel: Arc<Kernel>) -> Self {
        Self(Arc::new(Parts {
            name: Arc::from(name),
            kernel: Some(kernel),
            device: None,
            model: None,
        }))
    }
}

/// The data a running task accesses, in the order of the task's accesses.
pub struct Buffers<'a> {
    pub(crate) accesses: &'a [Access],
}

impl fmt::Debug for Buffers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffers")
            .field("len", &self.accesses.len())
            .finish()
    }
}

impl<'a> Buffers<'a> {
    /// The buffers of `accesses`.
    pub(crate) fn of(accesses: &'a [Access]) -> Self {
        Self { accesses }
    }

    /// Access `i`.
    pub(crate) fn access(&self, i: usize) -> &'a Access {
        &self.accesses[i]
    }
}

impl Buffers<'_> {
    /// How many accesses the task has.
    pub fn len(&self) -> usize {
        self.accesses.len()
    }

    /// Whether the task has no access.
    pub fn is_empty(&self) -> bool {
        self.accesses.is_empty()
    }

    /// The mode of access `i`.
    ///
    /// # Panics
    /// When `i` is out of range (a bug in the codelet).
    pub fn mode(&self, i: usize) -> AccessMode {
        self.accesses[i].mode
    }

    fn cell<I: Interface>(&self, i: usize) -> &Cell<I> {
        let access = self
            .accesses
            .get(i)
            .unwrap_or_else(|| panic!("the task has {} accesses, not {}", self.len(), i + 1));
        access
            .cell
            .as_any()
            .downcast_ref::<Cell<I>>()
            .unwrap_or_else(|| panic!("access {i} is not a {}", core::any::type_name::<I>()))
    }

    /// Whether access `i` is a handle of interface `I` (so that [`Buffers::r`] and
    /// [`Buffers::w`] of `I` do not panic). `false` when `i` is out of range.
    pub fn is<I: Interface>(&self, i: usize) -> bool {
        self.accesses
            .get(i)
            .is_some_and(|a| a.cell.as_any().is::<Cell<I>>())
    }

    /// A number naming access `i`'s handle, unique in the process and never reused, even
    /// after the handle is unregistered: device adapters key their copies of the data by
    /// it.
    ///
    /// # Panics
    /// When `i` is out of range (a bug in the codelet).
    pub fn uid(&self, i: usize) -> u64 {
        self.accesses[i].cell.uid()
    }

    /// The version of access `i`'s data: a number, never reused in the process, that
    /// changes whenever write access to the data is granted (a task's [`Buffers::w`], a
    /// receive, an acquisition for writing, a cache flush, ...). A device adapter holding
    /// a copy made at version `v` knows the host data are unchanged while the version is
    /// still `v`. Read it after dropping any [`DataMut`] of the access.
    ///
    /// # Panics
    /// When `i` is out of range (a bug in the codelet).
    pub fn version(&self, i: usize) -> u64 {
        self.accesses[i].cell.version()
    }

    /// Reads access `i` as interface `I`.
    ///
    /// # Panics
    /// When `i` is out of range or its handle is not of interface `I` (a codelet bug).
    pub fn r<I: Interface>(&self, i: usize) -> DataRef<'_, I> {
        self.cell::<I>(i).read()
    }

    /// Writes access `i` as interface `I`.
    ///
    /// # Panics
    /// When `i` is out of range or its handle is not of interface `I` (a codelet bug).
    pub fn w<I: Interface>(&self, i: usize) -> DataMut<'_, I> {
        self.cell::<I>(i).write()
    }
}

/// One access of a node: a handle and a mode.
#[derive(Clone)]
pub(crate) struct Access {
    pub(crate) cell: Arc<dyn AnyCell>,
    pub(crate) mode: AccessMode,
}

/// Called once when an offloaded task finished: `Err` names why it failed; then what the
/// device says of its kernels' time ([`DeviceTask::finish_measured`]).
pub(crate) type Finish = Box<dyn FnOnce(Result<(), String>, KernelTime) + Send>;

/// What a device says of a task's time on it, for the `dmda` scheduler's models.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KernelTime {
    /// Not measured: the model learns the wall time between hand-over and completion.
    Wall,
    /// Its kernels took these seconds on the device.
    Measured(f64),
    /// Not representative (a library handle was made for it): no sample.
    Skip,
}

/// The text of a panic's payload.
pub(crate) fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_owned())
}

/// A device layer: runs the tasks of the codelets that name it and keeps main memory's
/// copies valid for every host access (see the [module docs](self)).
pub trait DeviceLayer: Send + Sync {
    /// Takes a ready task of a codelet that names this layer: queue it on a device and
    /// return `Ok(())`, then call [`DeviceTask::finish`] exactly once when it is done; or
    /// return it (`Err(task)`) to have the calling worker run its CPU implementation
    /// (after [`to_host`](Self::to_host) for its accesses).
    ///
    /// # Errors
    /// The task itself, handed back, when this layer does not run it.
    fn start(&self, task: DeviceTask) -> Result<(), DeviceTask>;

    /// The host is about to access `data` (every access in its mode): make main memory's
    /// copy of each valid for it, copying from a device when it is not, and mark the
    /// device copies stale for a write. Blocks until the host copies are valid.
    ///
    /// # Errors
    /// A text naming the datum and the cause when a copy failed: the host access then
    /// must not happen (a task fails, a send is not posted).
    fn to_host(&self, data: &Buffers<'_>) -> Result<(), String>;

    /// The handle whose [`Buffers::uid`] is `uid` is unregistered: free its device
    /// copies (its host copy was brought up to date by the unregistration's acquisition).
    fn forget(&self, uid: u64);

    /// Writes every copy that is valid only on a device back to main memory (the rank is
    /// shutting down).
    fn flush(&self);

    /// A send of `data`'s access 0 is about to read it, over a transport that carries
    /// device values (ranks of one process): when a device holds a valid copy, returns a
    /// snapshot of it on that device (a device-to-device copy), to travel instead of
    /// bytes; `None` (the default): the send reads main memory, after
    /// [`to_host`](Self::to_host).
    fn export(&self, data: &Buffers<'_>) -> Option<Box<dyn Any + Send>> {
        let _ = data;
        None
    }

    /// A receive into `data`'s access 0 got `value` (made by [`export`](Self::export) of
    /// this layer): the device copy becomes that value, the only valid copy; main memory
    /// is not written.
    ///
    /// # Errors
    /// The value, handed back, when it does not fit the handle (another shape, another
    /// layer's value): the runtime then writes [`value_bytes`](Self::value_bytes) into
    /// main memory instead.
    fn adopt(
        &self,
        data: &Buffers<'_>,
        value: Box<dyn Any + Send>,
    ) -> Result<(), Box<dyn Any + Send>> {
        let _ = data;
        Err(value)
    }

    /// The packed bytes of a value made by [`export`](Self::export) (copied from the
    /// device).
    ///
    /// # Errors
    /// A text naming the cause when the copy failed or the value is not this layer's.
    fn value_bytes(&self, value: Box<dyn Any + Send>) -> Result<Vec<u8>, String> {
        let _ = value;
        Err("not a value of this device layer".to_owned())
    }

    /// Measures the link between main memory and this layer's (first) device: the
    /// latency and bandwidth of a copy to the device and of one back, for the `dmda`
    /// scheduler's transfer model ([`crate::perfmodel::Bus`]). Called once, when the
    /// layer is first attached to a runtime that uses the models and has no saved link
    /// for it. `None` (the default): not measured; copies are expected to cost nothing.
    fn measure_bus(
        &self,
    ) -> Option<(
        crate::runtime::perfmodel::Bus,
        crate::runtime::perfmodel::Bus,
    )> {
        None
    }
}

/// A handle's value on a device, travelling in place of its bytes between ranks of one
/// process ([`DeviceLayer::export`]): a snapshot the receiving rank's device copy
/// becomes, with no copy through main memory.
pub struct DeviceValue {
    layer: Arc<dyn DeviceLayer>,
    value: Box<dyn Any + Send>,
    size: usize,
}

impl fmt::Debug for DeviceValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceValue")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl PartialEq for DeviceValue {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::addr_eq(&*self.value, &*other.value)
    }
}

impl Eq for DeviceValue {}

impl DeviceValue {
    /// The bytes the value stands for (the handle's packed size).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Makes `cell`'s device copy this value; when its layer cannot, writes its bytes
    /// into main memory (`cell`'s unpack).
    pub(crate) fn deliver(
        self,
        cell: &Arc<dyn AnyCell>,
        layers: Option<&Layers>,
    ) -> Result<(), String> {
        // The receiving rank asks this layer before its host accesses from now on.
        if let Some(l) = layers {
            l.attach(&self.layer);
        }
        let access = [Access {
            cell: Arc::clone(cell),
            mode: AccessMode::W,
        }];
        match self.layer.adopt(&Buffers::of(&access), self.value) {
            Ok(()) => Ok(()),
            Err(value) => {
                let bytes = self.layer.value_bytes(value)?;
                cell.unpack(&bytes).map_err(|e| e.to_string())
            }
        }
    }

    /// The value's packed bytes, copied from the device (for a transport that carries
    /// bytes only).
    pub fn into_bytes(self) -> Result<Vec<u8>, String> {
        self.layer.value_bytes(self.value)
    }
}

/// A codelet's device implementation: the layer that runs it and what the layer needs to
/// know about it (for `starling-gpu`, its CUDA kernel), opaque to the runtime.
#[derive(Clone)]
pub struct DeviceImpl {
    pub(crate) layer: Arc<dyn DeviceLayer>,
    pub(crate) kernel: Arc<dyn Any + Send + Sync>,
}

impl DeviceImpl {
    /// A device implementation run by `layer`; `kernel` is handed back to the layer with
    /// each task ([`DeviceTask::kernel`]).
    pub fn new(layer: Arc<dyn DeviceLayer>, kernel: Arc<dyn Any + Send + Sync>) -> Self {
        Self { layer, kernel }
    }
}

impl fmt::Debug for DeviceImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeviceImpl(..)")
    }
}

/// A ready task handed to a device layer ([`DeviceLayer::start`]): its accesses, its
/// priority, the codelet's device kernel, and the completion to call once.
pub struct DeviceTask {
    pub(crate) codelet: Codelet,
    pub(crate) accesses: Vec<Access>,
    pub(crate) priority: i32,
    pub(crate) finish: Option<Finish>,
    /// The scheduler chose the device for this task (`dmda`).
    pub(crate) placed: bool,
}

impl fmt::Debug for DeviceTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceTask")
            .field("codelet", &self.codelet.name())
            .field("accesses", &self.accesses.len())
            .field("priority", &self.priority)
            .finish()
    }
}

impl DeviceTask {
    /// The task's data, in the order of its accesses.
    pub fn buffers(&self) -> Buffers<'_> {
        Buffers::of(&self.accesses)
    }

    /// The codelet's name.
    pub fn name(&self) -> &str {
        self.codelet.name()
    }

    /// The task's priority (higher first).
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The codelet's device kernel as `K`, if it is one.
    pub fn kernel<K: Any + Send + Sync>(&self) -> Option<Arc<K>> {
        let device = self.codelet.device()?;
        Arc::clone(&device.kernel).downcast::<K>().ok()
    }

    /// Whether the scheduler placed this task on the device (the `dmda` policy, from the
    /// performance models): the layer queues it, whatever its own CPU-or-device policy
    /// would do. `false`: the layer decides (the `prio` and `ws` policies).
    pub fn placed(&self) -> bool {
        self.placed
    }

    /// Whether the codelet has a CPU implementation to fall back on.
    pub fn has_cpu(&self) -> bool {
        self.codelet.kernel().is_some()
    }

    /// The task is done: `Ok` when it ran, `Err` with the reason when it failed (its
    /// failure is reported like a panicking CPU kernel's).
    pub fn finish(self, outcome: Result<(), String>) {
        self.complete(outcome, KernelTime::Wall);
    }

    fn complete(mut self, outcome: Result<(), String>, time: KernelTime) {
        if let Some(f) = self.finish.take() {
            f(outcome, time);
        }
    }

    /// [`finish`](Self::finish) of a task that ran, with the time its kernels took on the
    /// device, as the device measured it (between events queued around them): the `dmda`
    /// scheduler's models learn this time rather than the wall time between the
    /// hand-over and the completion, which holds the queueing and copies of the tasks in
    /// flight before it. `None`: the device knows its time is not representative (a
    /// library handle was made for it, say): no sample.
    pub fn finish_measured(self, seconds: Option<f64>) {
        let time = seconds.map_or(KernelTime::Skip, KernelTime::Measured);
        self.complete(Ok(()), time);
    }

    /// Runs the codelet's CPU implementation on the calling thread, after `to_host`
    /// brought the host copies of its accesses up to date, and finishes the task: a
    /// device layer's fallback when the device failed and falling back was asked for.
    pub fn run_on_cpu(self, to_host: impl FnOnce(&Buffers<'_>) -> Result<(), String>) {
        let outcome = match to_host(&self.buffers()) {
            Err(e) => Err(e),
            Ok(()) => match self.codelet.kernel() {
                None => Err("the codelet has no CPU implementation".to_owned()),
                Some(kernel) => {
                    let kernel = Arc::clone(kernel);
                    let mut buffers = Buffers::of(&self.accesses);
                    std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
                        kernel(&mut buffers);
                    }))
                    .map_err(|p| format!("panicked: {}", panic_text(&*p)))
                }
            },
        };
        // The CPU's time, not the device's: no sample of the device's model.
        self.complete(outcome, KernelTime::Skip);
    }
}

impl Drop for DeviceTask {
    fn drop(&mut self) {
        // A layer that drops a task without finishing it must not wedge the rank.
        if let Some(f) = self.finish.take() {
            f(
                Err("the device layer dropped the task".to_owned()),
                KernelTime::Wall,
            );
        }
    }
}

/// The device layers attached to a runtime, asked before every host access.
#[derive(Default)]
pub(crate) struct Layers {
    layers: crate::sync::Mutex<Vec<Arc<dyn DeviceLayer>>>,
    any: core::sync::atomic::AtomicBool,
}

impl Layers {
    /// Attaches `layer` (once); whether it was not attached before.
    pub(crate) fn attach(&self, layer: &Arc<dyn DeviceLayer>) -> bool {
        let mut ls = crate::sync::lock(&self.layers);
        if ls.iter().any(|l| Arc::ptr_eq(l, layer)) {
            return false;
        }
        ls.push(Arc::clone(layer));
        self.any.store(true, core::sync::atomic::Ordering::Release);
        true
    }

    /// The attachment number of `layer` (its device slot for the scheduler), if attached.
    pub(crate) fn index_of(&self, layer: &Arc<dyn DeviceLayer>) -> Option<usize> {
        crate::sync::lock(&self.layers)
            .iter()
            .position(|l| Arc::ptr_eq(l, layer))
    }

    /// Whether any layer is attached (cheap: the host-access path asks nothing else
    /// when none is).
    pub(crate) fn any(&self) -> bool {
        self.any.load(core::sync::atomic::Ordering::Acquire)
    }

    fn all(&self) -> Vec<Arc<dyn DeviceLayer>> {
        crate::sync::lock(&self.layers).clone()
    }

    /// [`DeviceLayer::to_host`] of every layer for `accesses`.
    pub(crate) fn to_host(&self, accesses: &[Access]) -> Result<(), String> {
        if !self.any() || accesses.is_empty() {
            return Ok(());
        }
        let buffers = Buffers::of(accesses);
        for l in self.all() {
            l.to_host(&buffers)?;
        }
        Ok(())
    }

    /// A device value for a send of `cell` ([`DeviceLayer::export`]), if a layer has one.
    pub(crate) fn export(&self, cell: &Arc<dyn AnyCell>) -> Option<DeviceValue> {
        if !self.any() {
            return None;
        }
        let access = [Access {
            cell: Arc::clone(cell),
            mode: AccessMode::R,
        }];
        let buffers = Buffers::of(&access);
        self.all().into_iter().find_map(|layer| {
            let value = layer.export(&buffers)?;
            Some(DeviceValue {
                layer,
                value,
                size: cell.packed_size(),
            })
        })
    }

    /// [`DeviceLayer::forget`] of every layer.
    pub(crate) fn forget(&self, uid: u64) {
        if self.any() {
            for l in self.all() {
                l.forget(uid);
            }
        }
    }

    /// [`DeviceLayer::flush`] of every layer.
    pub(crate) fn flush(&self) {
        if self.any() {
            for l in self.all() {
                l.flush();
            }
        }
    }
}

/// One handle's host data as a device layer keeps it between tasks (for write-backs,
/// eviction, flushes): it keeps the handle's storage alive while held, and reads or
/// writes it through [`HostRef::buffers`] (one access, read-write).
#[derive(Clone)]
pub struct HostRef {
    access: Access,
}

impl fmt::Debug for HostRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRef")
            .field("uid", &self.access.cell.uid())
            .finish()
    }
}

impl HostRef {
    /// The handle's data as one read-write access.
    pub fn buffers(&self) -> Buffers<'_> {
        Buffers::of(core::slice::from_ref(&self.access))
    }

    /// The handle's [`Buffers::uid`].
    pub fn uid(&self) -> u64 {
        self.access.cell.uid()
    }
}

impl Buffers<'_> {
    /// Access `i`'s handle, kept by a device layer ([`HostRef`]).
    ///
    /// # Panics
    /// When `i` is out of range (a bug in the caller).
    pub fn host_ref(&self, i: usize) -> HostRef {
        HostRef {
            access: Access {
                cell: Arc::clone(&self.access(i).cell),
                mode: AccessMode::RW,
            },
        }
    }
}

impl<I: Interface> crate::runtime::data::Handle<I> {
    /// The handle's data for a device layer ([`HostRef`]), e.g. to pin its host memory.
    pub fn host_ref(&self) -> HostRef {
        HostRef {
            access: Access {
                cell: self.erased(),
                mode: AccessMode::RW,
            },
        }
    }
}
