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
//! A codelet made by [`Codelet::with_device`](crate::Codelet::with_device) names its layer; the first task of such a
//! codelet submitted on a rank attaches the layer to the rank's runtime (several layers
//! may be attached; each is asked). A worker that takes a ready task of such a codelet
//! hands it to the layer with [`DeviceLayer::start`] and goes on at once: the device task
//! holds no worker thread for its length. The layer completes it with
//! [`DeviceTask::finish`], from any thread, or gives it back to run on the CPU.
//!
//! # The device contract
//!
//! This module is everything of this crate a device adapter (`starling-gpu`) uses, with
//! the data layouts it copies ([`interfaces`](crate::interfaces)) and the core's ids; it
//! names nothing of the runtime's internals, and the runtime names no device adapter:
//!
//! | item | what it is |
//! | --- | --- |
//! | [`DeviceLayer`] | the trait a device memory node implements |
//! | [`DeviceTask`] | a ready task handed to the layer, completed with [`DeviceTask::finish`] |
//! | [`Buffers`] | a task's (or a host access's) data, as the layer reads its shapes and bytes |
//! | [`HostRef`] | a handle's host copy, kept by the layer beside its device copies |
//! | [`DeviceValue`] | a device copy travelling between ranks of one process |
//! | [`Codelet`], [`DeviceImpl`], [`Kernel`] | a codelet whose device implementation names the layer ([`Codelet::with_device`]), with its CPU kernel |
//! | [`Bus`] | a measured link between main memory and a device ([`DeviceLayer::measure_bus`]) |
//!
//! See `docs/architecture.md`, "Which crate may import which, and why".
//!
//! The types live in [`crate::codelet`] with the codelets whose device implementations
//! they are (and [`Bus`] in [`crate::perfmodel`]); this module is their public path.

pub(crate) use crate::runtime::codelet::Layers;
pub use crate::runtime::codelet::{
    Buffers, Codelet, DeviceImpl, DeviceLayer, DeviceTask, DeviceValue, HostRef, Kernel,
};
pub use crate::runtime::perfmodel::Bus;
