//! The CUDA backend of the [device pipeline](crate::pipeline), and [`Gpu`]: the CUDA
//! devices of a process as a device layer of the runtime.
//!
//! [`Gpu::codelet`] makes a [`Codelet`] with a CPU and a CUDA implementation
//! ([`CudaKernel`]). A CPU worker that takes a ready task of it hands it to the pipeline
//! and goes on at once; the device's driver thread queues the task's input copies on the
//! device's upload stream and its kernel on one of its compute streams (each with its
//! own cuBLAS and cuSOLVER handles), and completes the task when the event after the
//! kernel fired. Data written on a device stay there until the host needs them (see
//! [`pipeline`](crate::pipeline) for the coherence, the memory budget, pinning and the
//! policies).
//!
//! A CUDA implementation queues its work on [`Kernels::device`]'s stream and returns; it
//! must not wait for it. Results it must check once the work is done (POTRF's result
//! code) are handed to [`Kernels::defer_check`].

use core::time::Duration;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use starling_std::device::{Buffers, Codelet};

use crate::backend::{Backend, Launched, Timing};
pub use crate::backend::{DeviceBuf, Shape};
use crate::blas::Blas;
use crate::kernels::Stencil;
pub use crate::pipeline::{GpuStats, Policy};
use crate::pipeline::{Layer, PipelineConfig};
use crate::probe;
use crate::replicas::MAX_NODES;
use crate::{Device, GpuError};

/// How the CUDA devices are set up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuConfig {
    /// How many devices to use (the first ones); `None`: every device. `Some(0)` disables
    /// the GPU ([`GpuError::Disabled`]).
    pub devices: Option<usize>,
    /// CPU or device, per task, under the `prio` and `ws` schedulers (`dmda` chooses
    /// from the performance models instead: [`Policy`]).
    pub policy: Policy,
    /// Bytes of data the pipeline keeps on each device; `None`: three quarters of the
    /// device's free memory when it is opened.
    pub cache_bytes: Option<usize>,
    /// Compute streams per device; `None`: 4.
    pub streams: Option<usize>,
    /// Tasks in flight per device; `None`: 16.
    pub window: Option<usize>,
    /// Run a task's CPU implementation when the device fails it (`STARLING_CUDA_FALLBACK=1`);
    /// off by default: the task fails and the run reports it.
    pub fallback: bool,
}

impl GpuConfig {
    /// The configuration from the environment: `STARLING_NCUDA` (the number of devices,
    /// the reference's `STARPU_NCUDA`; 0 disables them), `STARLING_CUDA_POLICY`
    /// (`prefer`, the default, or `eager`), `STARLING_CUDA_CACHE_MB`,
    /// `STARLING_CUDA_STREAMS`, `STARLING_CUDA_WINDOW` and `STARLING_CUDA_FALLBACK`.
    /// Values that do not parse are ignored.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration from `var` (the environment, or a table in tests).
    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Self {
        let num = |name: &str| var(name).and_then(|v| v.trim().parse::<usize>().ok());
        Self {
            devices: num("STARLING_NCUDA"),
            policy: match var("STARLING_CUDA_POLICY").as_deref().map(str::trim) {
                Some("eager") => Policy::Eager,
                _ => Policy::PreferDevice,
            },
            cache_bytes: num("STARLING_CUDA_CACHE_MB").map(|mb| mb.saturating_mul(1 << 20)),
            streams: num("STARLING_CUDA_STREAMS").filter(|&s| s > 0),
            window: num("STARLING_CUDA_WINDOW").filter(|&w| w > 0),
            fallback: var("STARLING_CUDA_FALLBACK").is_some_and(|v| {
                let v = v.trim();
                !v.is_empty() && v != "0"
            }),
        }
    }
}

/// What a CUDA implementation can launch on its compute stream: the stencil kernels,
/// cuBLAS and cuSOLVER (their handles made as the driver thread starts, else at the first
/// kernel that asks), and checks to run once its work is done.
#[derive(Debug)]
pub struct Kernels {
    device: Device,
    blas: Option<Blas>,
    stencil: Option<Stencil>,
    checks: Vec<CudaSlice<i32>>,
    /// A handle or module was made during the current launch (its time is not timed).
    fresh: bool,
}

impl Kernels {
    /// The device, with this compute stream as its stream: queue work on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// cuBLAS and cuSOLVER on this compute stream.
    ///
    /// # Errors
    /// [`GpuError::NoCublas`], [`GpuError::NoCusolver`], or a handle creation failure.
    pub fn blas(&mut self) -> Result<&mut Blas, GpuError> {
        if self.blas.is_none() {
            self.fresh = true;
            self.blas = Some(Blas::new(&self.device)?);
        }
        self.blas
            .as_mut()
            .ok_or(GpuError::Unsupported("cuBLAS handles"))
    }

    /// The stencil kernels.
    ///
    /// # Errors
    /// [`GpuError::Compile`] or [`GpuError::Driver`] when they do not load.
    pub fn stencil(&mut self) -> Result<&Stencil, GpuError> {
        if self.stencil.is_none() {
            self.fresh = true;
            self.stencil = Some(Stencil::load(&self.device)?);
        }
        self.stencil
            .as_ref()
            .ok_or(GpuError::Unsupported("stencil kernels"))
    }

    /// A cuSOLVER result code (`info`) written by work queued on this stream: the task
    /// fails when it is not 0 once that work is done.
    pub fn defer_check(&mut self, info: CudaSlice<i32>) {
        self.checks.push(info);
    }
}

/// What a CUDA implementation receives: its compute stream's kernels and the task's data
/// on the device, in the order of the task's accesses. The two fields are separate
/// borrows, so `let [a, b] = &mut *cb.data else { .. }` and `cb.kernels.blas()?` go
/// together.
#[derive(Debug)]
pub struct CudaBuffers<'a> {
    /// The compute stream's kernels.
    pub kernels: &'a mut Kernels,
    /// The task's accesses on the device.
    pub data: &'a mut [DeviceBuf],
}

/// A codelet's CUDA implementation: queues its work on the compute stream and returns.
pub type CudaKernel = dyn Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync;

/// One CUDA device: its upload and download streams and its compute streams.
#[derive(Debug)]
struct CudaDev {
    device: Device,
    upload: Arc<CudaStream>,
    download: Arc<CudaStream>,
    compute: Vec<Device>,
}

/// The CUDA backend of the pipeline (through `cudarc`).
#[derive(Debug)]
pub struct Cuda {
    devs: Vec<CudaDev>,
}

/// The CUDA devices of a process: a device layer whose codelets have CUDA
/// implementations. Share it (`Arc`) between the codelets made by [`Gpu::codelet`].
pub type Gpu = Layer<Cuda>;

impl Backend for Cuda {
    type Buf = CudaSlice<f64>;
    type Event = CudaEvent;
    type Kernel = CudaKernel;
    type Exec = Kernels;
    type Check = CudaSlice<i32>;
    type Timer = CudaEvent;

    fn devices(&self) -> usize {
        self.devs.len()
    }

    fn streams(&self) -> usize {
        self.devs.first().map_or(1, |d| d.compute.len())
    }

    fn exec(&self, dev: usize, stream: usize) -> Result<Kernels, GpuError> {
        let d = &self.devs[dev];
        let device = d.compute[stream % d.compute.len()].clone();
        // cuBLAS and cuSOLVER handles now, when their libraries load (as StarPU's
        // `starpu_cublas_init`): the driver thread makes its streams' execs as it starts,
        // before its first task. Made inside a launch instead, they counted in that task's
        // time and held the pipeline's lock for tens of milliseconds. A handle that fails
        // here is made (and its error reported) at the first kernel that asks for it.
        let blas = probe::require(&[probe::Lib::Cublas, probe::Lib::Cusolver])
            .ok()
            .and_then(|()| Blas::new(&device).ok());
        Ok(Kernels {
            device,
            blas,
            stencil: None,
            checks: Vec::new(),
            fresh: false,
        })
    }

    fn alloc(&self, dev: usize, len: usize) -> Result<CudaSlice<f64>, GpuError> {
        // SAFETY: the content is undefined until a copy or a kernel writes it; the
        // pipeline never reads a buffer it has not filled (the coherence state says so).
        Ok(unsafe { self.devs[dev].upload.alloc::<f64>(len.max(1)) }?)
    }

    fn upload(
        &self,
        dev: usize,
        host: &[f64],
        _pinned: bool,
        dst: &mut CudaSlice<f64>,
    ) -> Result<CudaEvent, GpuError> {
        crate::device::check_len(dst.len(), host.len().max(1))?;
        let up = &self.devs[dev].upload;
        // Pageable memory: the driver stages it before returning; pinned memory: the copy
        // runs asynchronously, and the pipeline keeps `host` alive and unwritten until the
        // task that reads it completed.
        up.memcpy_htod(host, dst)?;
        Ok(up.record_event(None)?)
    }

    fn copy(
        &self,
        dev: usize,
        src: &CudaSlice<f64>,
        dst: &mut CudaSlice<f64>,
    ) -> Result<CudaEvent, GpuError> {
        crate::device::check_len(dst.len(), src.len())?;
        let up = &self.devs[dev].upload;
        up.memcpy_dtod(src, dst)?;
        Ok(up.record_event(None)?)
    }

    fn download(&self, dev: usize, src: &CudaSlice<f64>, host: &mut [f64]) -> Result<(), GpuError> {
        crate::device::check_len(src.len(), host.len().max(1))?;
        let down = &self.devs[dev].download;
        down.memcpy_dtoh(src, host)?;
        down.synchronize()?;
        Ok(())
    }

    fn launch(
        &self,
        _dev: usize,
        _stream: usize,
        exec: &mut Kernels,
        kernel: &Arc<CudaKernel>,
        data: &mut [DeviceBuf],
        after: &[CudaEvent],
    ) -> Result<Launched<Self>, GpuError> {
        let stream = exec.device.stream().clone();
        for e in after {
            stream.wait(e)?;
        }
        // Timing events (the default flags): the kernel's time on the device.
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = stream.record_event(timed)?;
        exec.fresh = false;
        let ran = kernel(&mut CudaBuffers {
            kernels: exec,
            data,
        });
        let checks = core::mem::take(&mut exec.checks);
        ran?;
        Ok(Launched {
            end: stream.record_event(timed)?,
            checks,
            // Handles made during the launch held the stream idle between the events.
            timing: if core::mem::take(&mut exec.fresh) {
                Timing::Skip
            } else {
                Timing::From(start)
            },
        })
    }

    fn kernel_seconds(
        &self,
        start: &CudaEvent,
        end: &CudaEvent,
        prev: Option<&CudaEvent>,
    ) -> Option<f64> {
        let own = start.elapsed_ms(end).ok()?;
        // Negative: `prev` ended after this task (another stream's, polled first).
        let since_prev = prev
            .and_then(|p| p.elapsed_ms(end).ok())
            .filter(|&ms| ms >= 0.0);
        Some(f64::from(since_prev.map_or(own, |p| own.min(p))) / 1e3)
    }

    fn done(&self, event: &CudaEvent) -> Result<bool, GpuError> {
        Ok(event.try_is_complete()?)
    }

    fn check(&self, dev: usize, info: CudaSlice<i32>) -> Result<(), GpuError> {
        let down = &self.devs[dev].download;
        let mut code = [0i32];
        down.memcpy_dtoh(&info, &mut code)?;
        down.synchronize()?;
        match code[0] {
            0 => Ok(()),
            i if i > 0 => Err(GpuError::NotPositiveDefinite(i)),
            i => Err(GpuError::Cusolver(format!("argument {} is invalid", -i))),
        }
    }

    fn pin(&self, host: &[f64]) -> Result<(), GpuError> {
        if host.is_empty() {
            return Ok(());
        }
        let Some(d) = self.devs.first() else {
            return Ok(());
        };
        d.device.context().bind_to_thread()?;
        // SAFETY: `host` is a live allocation of `len` elements; registering page-locks
        // it (PORTABLE: for every context) without moving it. The pipeline unregisters it
        // (`unpin`) before the handle's storage can be freed: it keeps the handle alive
        // until then.
        unsafe {
            cudarc::driver::sys::cuMemHostRegister_v2(
                host.as_ptr().cast_mut().cast(),
                size_of_val(host),
                cudarc::driver::sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
        }
        .result()?;
        Ok(())
    }

    fn unpin(&self, ptr: usize) {
        if let Some(d) = self.devs.first() {
            let _ = d.device.context().bind_to_thread();
            // SAFETY: `ptr` was registered by `pin` and is still allocated (see `pin`).
            let _ = unsafe { cudarc::driver::sys::cuMemHostUnregister(ptr as *mut _) }.result();
        }
    }
}

impl Gpu {
    /// Opens the devices `config` asks for, with their streams and driver threads.
    ///
    /// # Errors
    /// [`GpuError::Disabled`] for `devices: Some(0)`; [`GpuError::NoDriver`] or
    /// [`GpuError::NoDevice`] when there is no CUDA device; [`GpuError::Driver`].
    pub fn open(config: &GpuConfig) -> Result<Arc<Self>, GpuError> {
        if config.devices == Some(0) {
            return Err(GpuError::Disabled);
        }
        let count = probe::device_count()?;
        let count = config
            .devices
            .map_or(count, |n| n.min(count))
            .min(MAX_NODES - 1);
        let streams = config.streams.unwrap_or(4).max(1);
        let mut devs = Vec::with_capacity(count);
        let mut budget = Vec::with_capacity(count);
        for d in 0..count {
            let device = Device::open(d)?;
            let upload = device.context().new_stream()?;
            let download = device.context().new_stream()?;
            let compute = (0..streams)
                .map(|_| device.with_new_stream())
                .collect::<Result<Vec<_>, _>>()?;
            budget.push(match config.cache_bytes {
                Some(b) => b,
                None => device.context().mem_get_info()?.0 / 4 * 3,
            });
            devs.push(CudaDev {
                device,
                upload,
                download,
                compute,
            });
        }
        Self::new(
            Cuda { devs },
            PipelineConfig {
                policy: config.policy,
                fallback: config.fallback,
                window: config.window.unwrap_or(16),
                budget,
                auto_pin: Some(1 << 20),
                poll: Duration::ZERO,
            },
        )
    }

    /// [`Gpu::open`] with [`GpuConfig::from_env`].
    ///
    /// # Errors
    /// As [`Gpu::open`].
    pub fn from_env() -> Result<Arc<Self>, GpuError> {
        Self::open(&GpuConfig::from_env())
    }

    /// A codelet with a CPU and a CUDA implementation: the policy picks one per task. A
    /// task that fails on the device fails (the run reports it), unless
    /// [`GpuConfig::fallback`] asks to run the CPU implementation instead.
    pub fn codelet(
        self: &Arc<Self>,
        name: &str,
        cpu: impl Fn(&mut Buffers<'_>) + Send + Sync + 'static,
        cuda: impl Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync + 'static,
    ) -> Codelet {
        self.codelet_with(name, Some(Arc::new(cpu)), Arc::new(cuda))
    }

    /// A codelet with only a CUDA implementation: always on a device; a device error
    /// fails the task (the runtime reports it at shutdown).
    pub fn cuda_codelet(
        self: &Arc<Self>,
        name: &str,
        cuda: impl Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync + 'static,
    ) -> Codelet {
        self.codelet_with(name, None, Arc::new(cuda))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> GpuConfig {
        GpuConfig::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn the_configuration_comes_from_the_variables() {
        assert_eq!(config(&[]), GpuConfig::default());
        let c = config(&[
            ("STARLING_NCUDA", "2"),
            ("STARLING_CUDA_POLICY", "eager"),
            ("STARLING_CUDA_CACHE_MB", "3"),
        ]);
        assert_eq!(c.devices, Some(2));
        assert_eq!(c.policy, Policy::Eager);
        assert_eq!(c.cache_bytes, Some(3 << 20));
        let bad = config(&[("STARLING_NCUDA", "many"), ("STARLING_CUDA_POLICY", "fast")]);
        assert_eq!(bad, GpuConfig::default());
    }

    #[test]
    fn zero_devices_is_disabled_even_with_a_gpu() {
        let c = config(&[("STARLING_NCUDA", "0")]);
        assert_eq!(Gpu::open(&c).unwrap_err(), GpuError::Disabled);
    }
}
