//! Device layers: where the runtime hands the tasks of codelets with a device
//! implementation, and whom it asks before any host access of a handle.
//!
//! A **device layer** ([`DeviceLayer`], implemented by `starling-gpu`) keeps copies of
//! handles in a device's memory. After a device task, the device copy may be the only
//! valid one (the reference's `STARPU_OWNER`), so main memory is brought up to date only
//! when something on the host needs it. The runtime keeps that promise with one hook,
//! [`DeviceLayer::to_host`], called with the accesses of every host access before it
//! happens:
//!
//! | host access | where the runtime calls `to_host` |
//! | --- | --- |
//! | a CPU task (a codelet's CPU implementation) | the worker, before the kernel runs |
//! | a send (MPI or in-process: packs or lends the data), a receive (writes it), an acquisition ([`Context::acquire`](crate::Context::acquire), `acquire_cb`, unregistration, `get_data_*`, migrations, cache flushes, collectives) | before the node's hook runs: every one of them is a hook node of the task graph |
//! | shutdown | [`DeviceLayer::flush`], once the workers stopped |
//!
//! The runtime never looks at where a datum's valid copy is: whether `to_host` copies
//! anything is the device layer's decision (the core's
//! [`coherence`](starling_core::coherence) state machine). A write access (a receive, a
//! CPU task's `W`) makes the device copies stale; a read leaves them valid.
//!
//! A codelet made by [`Codelet::with_device`] names its layer; the first task of such a
//! codelet submitted on a rank attaches the layer to the rank's runtime (several layers
//! may be attached; each is asked). A worker that takes a ready task of such a codelet
//! hands it to the layer with [`DeviceLayer::start`] and goes on at once: the device task
//! holds no worker thread for its length. The layer completes it with
//! [`DeviceTask::finish`], from any thread, or gives it back to run on the CPU.

use core::any::Any;
use core::fmt;

use crate::sync::Arc;
use crate::task::{Access, Buffers, Codelet, Finish};

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
    fn measure_bus(&self) -> Option<(crate::perfmodel::Bus, crate::perfmodel::Bus)> {
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
        cell: &Arc<dyn crate::data::AnyCell>,
        layers: Option<&Layers>,
    ) -> Result<(), String> {
        // The receiving rank asks this layer before its host accesses from now on.
        if let Some(l) = layers {
            l.attach(&self.layer);
        }
        let access = [Access {
            cell: Arc::clone(cell),
            mode: starling_core::AccessMode::W,
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
    pub fn finish(mut self, outcome: Result<(), String>) {
        if let Some(f) = self.finish.take() {
            f(outcome);
        }
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
                    .map_err(|p| format!("panicked: {}", crate::task::panic_text(&*p)))
                }
            },
        };
        self.finish(outcome);
    }
}

impl Drop for DeviceTask {
    fn drop(&mut self) {
        // A layer that drops a task without finishing it must not wedge the rank.
        if let Some(f) = self.finish.take() {
            f(Err("the device layer dropped the task".to_owned()));
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
    pub(crate) fn export(&self, cell: &Arc<dyn crate::data::AnyCell>) -> Option<DeviceValue> {
        if !self.any() {
            return None;
        }
        let access = [Access {
            cell: Arc::clone(cell),
            mode: starling_core::AccessMode::R,
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
                mode: starling_core::AccessMode::RW,
            },
        }
    }
}

impl<I: crate::data::Interface> crate::data::Handle<I> {
    /// The handle's data for a device layer ([`HostRef`]), e.g. to pin its host memory.
    pub fn host_ref(&self) -> HostRef {
        HostRef {
            access: Access {
                cell: self.erased(),
                mode: starling_core::AccessMode::RW,
            },
        }
    }
}
