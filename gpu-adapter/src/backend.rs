//! What the device pipeline ([`crate::pipeline`]) asks of a device: buffers, copies on
//! their own streams, kernels on compute streams, and events marking the end of each.
//!
//! Two implementations: [`Cuda`](crate::runtime::Cuda) (the real devices, through
//! `cudarc`) and [`Fake`](crate::fake::Fake) (host memory standing for device memory,
//! streams as threads, a latency and a bandwidth you set), so that the whole pipeline —
//! coherence, hooks, streams and events, prefetch, eviction, write-back — runs in CI
//! without a GPU.
//!
//! # The contract
//!
//! - Every operation is *queued*: [`upload`](Backend::upload) on the device's upload
//!   stream, [`launch`](Backend::launch) on one of its compute streams; each returns the
//!   event that marks its end. [`download`](Backend::download) is the one synchronous
//!   copy (a host access waits for it anyway).
//! - **Ordering of a buffer's uses is the backend's**: a kernel that uses a buffer runs
//!   after the upload that filled it and after the kernels that wrote it, whatever their
//!   streams (CUDA: `cudarc`'s per-buffer events; the fake: a ready event per buffer).
//!   The pipeline only starts a task once the tasks it depends on completed.
//! - The host memory an upload reads stays valid and unchanged until the upload's event
//!   completes: the pipeline keeps the handle alive and no writer of it runs before the
//!   task that reads it completes (implicit dependencies).

use std::sync::Arc;

use starling_core::AccessMode;

use crate::GpuError;

/// The layout of a handle's storage on the device (its host storage, copied as is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shape {
    /// A `Variable<f64>`: one element.
    Variable,
    /// A `Vector<f64>` of `len` elements.
    Vector {
        /// Elements.
        len: usize,
    },
    /// A `Matrix<f64>`, column-major: element (i, j) at `i + j·ld`.
    Matrix {
        /// Rows.
        nx: usize,
        /// Columns.
        ny: usize,
        /// Elements between the starts of two columns.
        ld: usize,
    },
    /// A `Block<f64>`: element (x, y, z) at `x + y·ldy + z·ldz`.
    Block {
        /// Extent along x.
        nx: usize,
        /// Extent along y.
        ny: usize,
        /// Extent along z.
        nz: usize,
        /// Elements between two y.
        ldy: usize,
        /// Elements between two z.
        ldz: usize,
    },
}

/// One access of a task, on the device: the buffer, its layout and the access mode.
#[derive(Debug)]
pub struct DeviceBuf<B = cudarc::driver::CudaSlice<f64>> {
    /// The handle's storage on the device (the whole host storage, padding included).
    pub data: B,
    /// Its layout.
    pub shape: Shape,
    /// How the task accesses it.
    pub mode: AccessMode,
}

/// A kernel [`Backend::launch`] queued.
pub struct Launched<B: Backend + ?Sized> {
    /// The event of its end.
    pub end: B::Event,
    /// The checks to run once it completed.
    pub checks: Vec<B::Check>,
    /// What it says of its kernels' time on the device.
    pub timing: Timing<B::Timer>,
}

/// What a launch says of its kernels' time on the device, the sample of the `dmda`
/// scheduler's models.
#[derive(Debug)]
pub enum Timing<T> {
    /// Timed from this start; [`Backend::kernel_seconds`] reads it once the end event
    /// completed.
    From(T),
    /// Not representative: the launch waited on the host (a library handle made for
    /// it), which the device's clock would count. No sample.
    Skip,
    /// Not timed: the runtime takes the wall time from hand-over to completion.
    Untimed,
}

/// A device backend for the [pipeline](crate::pipeline): see the [module docs](self) for
/// the contract.
pub trait Backend: Send + Sync + 'static {
    /// A buffer of `f64` in one device's memory.
    type Buf: Send + 'static;
    /// The end of a queued operation.
    type Event: Send + 'static;
    /// A codelet's implementation on this backend.
    type Kernel: ?Sized + Send + Sync + 'static;
    /// What a compute stream keeps between kernels (library handles); made on the
    /// device's driver thread by [`exec`](Self::exec).
    type Exec: Send + 'static;
    /// A check to run once a kernel's event completed (a factorization's result code).
    type Check: Send + 'static;
    /// The start of a kernel, for its time on the device ([`kernel_seconds`](Self::kernel_seconds)).
    type Timer: Send + 'static;

    /// How many devices.
    fn devices(&self) -> usize;

    /// Compute streams per device.
    fn streams(&self) -> usize;

    /// What compute stream `stream` of device `dev` needs to run kernels; the driver
    /// thread makes one per stream as it starts (outside the pipeline's lock).
    ///
    /// # Errors
    /// The backend's failure (a library missing, a handle not created).
    fn exec(&self, dev: usize, stream: usize) -> Result<Self::Exec, GpuError>;

    /// A buffer of `len` elements on device `dev` (its content is undefined).
    ///
    /// # Errors
    /// Out of memory; the backend's failure.
    fn alloc(&self, dev: usize, len: usize) -> Result<Self::Buf, GpuError>;

    /// Queues the copy of `host` into `dst` on device `dev`'s upload stream; `pinned`
    /// says that `host` lies in page-locked memory (the copy is then truly asynchronous).
    ///
    /// # Errors
    /// The backend's failure (nothing was queued).
    fn upload(
        &self,
        dev: usize,
        host: &[f64],
        pinned: bool,
        dst: &mut Self::Buf,
    ) -> Result<Self::Event, GpuError>;

    /// Queues the copy of `src` into `dst`, both on device `dev`, on its upload stream
    /// (after the work that wrote `src`).
    ///
    /// # Errors
    /// The backend's failure (nothing was queued).
    fn copy(
        &self,
        dev: usize,
        src: &Self::Buf,
        dst: &mut Self::Buf,
    ) -> Result<Self::Event, GpuError>;

    /// Copies `src` (of device `dev`) into `host` and waits for the copy.
    ///
    /// # Errors
    /// The backend's failure (an earlier asynchronous failure may be reported here).
    fn download(&self, dev: usize, src: &Self::Buf, host: &mut [f64]) -> Result<(), GpuError>;

    /// Queues `kernel` on `data` on compute stream `stream` of device `dev`, after the
    /// events `after` (the task's uploads: a task completes only once the host memory it
    /// reads was read, even when its kernel does not touch a buffer); returns the event
    /// of its end, the checks to run once it completed, and a timer of its kernels when
    /// their time on the device can be measured.
    ///
    /// # Errors
    /// The kernel's error (what it queued before failing still runs).
    fn launch(
        &self,
        dev: usize,
        stream: usize,
        exec: &mut Self::Exec,
        kernel: &Arc<Self::Kernel>,
        data: &mut [DeviceBuf<Self::Buf>],
        after: &[Self::Event],
    ) -> Result<Launched<Self>, GpuError>;

    /// The seconds a launched kernel took on the device, from its timer to its end
    /// event, once that event completed (`None`: not measured). `prev`: the end event of
    /// the device's task completed before, when there is one: kernels of several compute
    /// streams overlap, and an instant the device spent on both counts once (the time
    /// since `prev` ended, when that is shorter).
    fn kernel_seconds(
        &self,
        timer: &Self::Timer,
        end: &Self::Event,
        prev: Option<&Self::Event>,
    ) -> Option<f64>;

    /// Whether `event` completed; an error reported by the device is returned.
    ///
    /// # Errors
    /// The device's failure of the operation.
    fn done(&self, event: &Self::Event) -> Result<bool, GpuError>;

    /// Runs a check of a completed kernel.
    ///
    /// # Errors
    /// What the check found (for POTRF: a matrix that is not positive definite).
    fn check(&self, dev: usize, check: Self::Check) -> Result<(), GpuError>;

    /// Page-locks `host` so that copies from and to it are asynchronous and run at the
    /// bus's speed; returns whether it is pinned now.
    ///
    /// # Errors
    /// The backend's failure (the memory stays pageable).
    fn pin(&self, host: &[f64]) -> Result<(), GpuError>;

    /// Undoes [`pin`](Self::pin) of the memory starting at `ptr`.
    fn unpin(&self, ptr: usize);
}
