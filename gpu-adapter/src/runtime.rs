//! CUDA implementations of codelets, and the CUDA worker of each device that runs them.
//!
//! [`Gpu::codelet`] makes a [`Codelet`] with two implementations: the CPU one and a CUDA
//! one ([`CudaKernel`]). Starling's scheduler hands every ready task to a CPU worker
//! thread; for a codelet with a CUDA implementation that thread becomes, for the length
//! of the task, the driver of one device's **CUDA worker** (one per device, behind a
//! lock: the device's stream, its cuBLAS/cuSOLVER handles and kernels, and the device
//! copies of the data it has seen). The choice of CPU or device is the [`Policy`]'s:
//! [`Policy::PreferDevice`] (the default) always runs on the device;
//! [`Policy::Eager`] runs on the CPU when every device is busy.
//!
//! # Coherence
//!
//! Each CUDA worker keeps, per handle (keyed by [`Buffers::uid`]), a
//! [`Replicated`] whose decisions come from the core's
//! [`coherence`](starling_core::coherence) state machine: a read on the device fetches the
//! host copy only when the device copy is not valid. The rest of the runtime (CPU tasks,
//! MPI sends and receives, acquisitions) reads and writes the host copy directly, so the
//! CUDA worker keeps the host copy valid after each task (**write-through**): a task that
//! writes a handle on the device copies it back before it completes, and the device copy
//! stays valid as a shared copy. A host write made anywhere else gives the handle a new
//! [`Buffers::version`], which the worker sees at the next task and treats as a receive
//! ([`Replicated::host_written`]: the host copy becomes the only valid one). So an MPI send
//! never needs to stage (the host is valid), and after a receive the host copy is the
//! valid one, as the issue asks.
//!
//! What write-through costs: one device-to-host copy of every handle a device task
//! writes. Keeping the device copy as the only valid one (the reference's behaviour) needs
//! the runtime to ask the device layer before every host access of a handle
//! ([`Replicated::acquire_host`] / [`Replicated::before_send`] exist for it); that hook
//! into `starling-std` is not built yet.
//!
//! Device memory is a cache: when a worker's copies exceed its budget
//! ([`GpuConfig::cache_bytes`], by default three quarters of the free memory at start),
//! the least recently used ones are evicted (the host copy is always valid, so nothing is
//! lost).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::CudaSlice;
use starling_core::AccessMode;
use starling_core::coherence::MemNode;
use starling_std::interfaces::{Block, Matrix, Variable, Vector};
use starling_std::{Buffers, Codelet};

use crate::blas::Blas;
use crate::kernels::Stencil;
use crate::probe;
use crate::replicas::{Devices, MAX_NODES, Replicated};
use crate::{Device, GpuError};

/// How tasks whose codelet has a CUDA implementation choose between the CPU and a device.
///
/// `#[non_exhaustive]`: a policy driven by performance models (the reference's `dmda`)
/// can join later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// Always on a device: when its device is busy, the task waits for it.
    #[default]
    PreferDevice,
    /// On a device when one is free, else on the CPU (when the codelet has a CPU
    /// implementation).
    Eager,
}

/// How the CUDA workers are set up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuConfig {
    /// How many devices to use (the first ones); `None`: every device. `Some(0)` disables
    /// the GPU ([`GpuError::Disabled`]).
    pub devices: Option<usize>,
    /// CPU or device, per task.
    pub policy: Policy,
    /// Bytes of data each worker keeps on its device; `None`: three quarters of the
    /// device's free memory when it is opened.
    pub cache_bytes: Option<usize>,
}

impl GpuConfig {
    /// The configuration from the environment: `STARLING_NCUDA` (the number of devices,
    /// the reference's `STARPU_NCUDA`; 0 disables them), `STARLING_CUDA_POLICY`
    /// (`prefer`, the default, or `eager`) and `STARLING_CUDA_CACHE_MB`. Values that do
    /// not parse are ignored.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration from `var` (the environment, or a table in tests).
    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            devices: var("STARLING_NCUDA").and_then(|v| v.trim().parse().ok()),
            policy: match var("STARLING_CUDA_POLICY").as_deref().map(str::trim) {
                Some("eager") => Policy::Eager,
                _ => Policy::PreferDevice,
            },
            cache_bytes: var("STARLING_CUDA_CACHE_MB")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .map(|mb| mb.saturating_mul(1 << 20)),
        }
    }
}

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

/// One access of a task, on the device.
#[derive(Debug)]
pub struct DeviceBuf {
    /// The handle's storage (the whole host storage, leading-dimension padding included).
    pub data: CudaSlice<f64>,
    /// Its layout.
    pub shape: Shape,
    /// How the task accesses it.
    pub mode: AccessMode,
}

/// What a CUDA implementation can launch on its device: copies, the stencil kernels,
/// cuBLAS and cuSOLVER (loaded on first use).
#[derive(Debug)]
pub struct Kernels {
    device: Device,
    blas: Option<Blas>,
    stencil: Option<Stencil>,
}

impl Kernels {
    /// The device (its context and stream).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// cuBLAS and cuSOLVER on the device's stream.
    ///
    /// # Errors
    /// [`GpuError::NoCublas`], [`GpuError::NoCusolver`], or a handle creation failure.
    pub fn blas(&mut self) -> Result<&mut Blas, GpuError> {
        if self.blas.is_none() {
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
            self.stencil = Some(Stencil::load(&self.device)?);
        }
        self.stencil
            .as_ref()
            .ok_or(GpuError::Unsupported("stencil kernels"))
    }
}

/// What a CUDA implementation receives: its device's kernels and the task's data on the
/// device, in the order of the task's accesses. The two fields are separate borrows, so
/// `let [a, b] = &mut *cb.data else { .. }` and `cb.kernels.blas()?` go together.
#[derive(Debug)]
pub struct CudaBuffers<'a> {
    /// The device's kernels.
    pub kernels: &'a mut Kernels,
    /// The task's accesses on the device.
    pub data: &'a mut [DeviceBuf],
}

/// A codelet's CUDA implementation. Work it queues on the device's stream is waited for
/// before the task completes.
pub type CudaKernel = dyn Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync;

/// How many tasks ran where, and the bytes copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Tasks whose CUDA implementation ran.
    pub device_tasks: u64,
    /// Tasks of CUDA-capable codelets that ran their CPU implementation (devices busy
    /// under [`Policy::Eager`], or a device error).
    pub cpu_tasks: u64,
    /// Bytes copied from host to device.
    pub bytes_to_device: u64,
    /// Bytes copied from device to host (write-through).
    pub bytes_to_host: u64,
}

#[derive(Debug, Default)]
struct Counters {
    device_tasks: AtomicU64,
    cpu_tasks: AtomicU64,
    bytes_to_device: AtomicU64,
    bytes_to_host: AtomicU64,
}

/// A handle's copies on one device.
#[derive(Debug)]
struct Entry {
    replicas: Replicated<f64, CudaSlice<f64>>,
    /// The host version the device state was last brought up to date with.
    version: u64,
    last_use: u64,
}

/// One device's CUDA worker: its kernels and the copies of the data it has seen.
#[derive(Debug)]
struct Worker {
    kernels: Kernels,
    node: MemNode,
    backend: Devices,
    cache: HashMap<u64, Entry>,
    budget: usize,
    clock: u64,
}

/// The CUDA devices of a process and their workers. Share it (`Arc`) between the
/// codelets made by [`Gpu::codelet`].
#[derive(Debug)]
pub struct Gpu {
    workers: Vec<Mutex<Worker>>,
    policy: Policy,
    counters: Counters,
    warned: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gpu {
    /// Opens the devices `config` asks for, one CUDA worker each.
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
        let devices = (0..count)
            .map(Device::open)
            .collect::<Result<Vec<_>, _>>()?;
        let backend = Devices(devices.clone());
        let mut workers = Vec::with_capacity(count);
        for (d, device) in devices.into_iter().enumerate() {
            let budget = match config.cache_bytes {
                Some(b) => b,
                None => device.context().mem_get_info()?.0 / 4 * 3,
            };
            workers.push(Mutex::new(Worker {
                kernels: Kernels {
                    device,
                    blas: None,
                    stencil: None,
                },
                node: Devices::node(d),
                backend: backend.clone(),
                cache: HashMap::new(),
                budget,
                clock: 0,
            }));
        }
        Ok(Arc::new(Self {
            workers,
            policy: config.policy,
            counters: Counters::default(),
            warned: AtomicBool::new(false),
        }))
    }

    /// [`Gpu::open`] with [`GpuConfig::from_env`].
    ///
    /// # Errors
    /// As [`Gpu::open`].
    pub fn from_env() -> Result<Arc<Self>, GpuError> {
        Self::open(&GpuConfig::from_env())
    }

    /// How many devices (CUDA workers) there are.
    pub fn device_count(&self) -> usize {
        self.workers.len()
    }

    /// The policy choosing between the CPU and a device.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// How many tasks ran where, and the bytes copied, so far.
    pub fn stats(&self) -> GpuStats {
        let c = &self.counters;
        GpuStats {
            device_tasks: c.device_tasks.load(Ordering::Relaxed),
            cpu_tasks: c.cpu_tasks.load(Ordering::Relaxed),
            bytes_to_device: c.bytes_to_device.load(Ordering::Relaxed),
            bytes_to_host: c.bytes_to_host.load(Ordering::Relaxed),
        }
    }

    /// Frees every device copy (the host copies are always valid).
    pub fn clear(&self) {
        for w in &self.workers {
            lock(w).cache.clear();
        }
    }

    /// A codelet with a CPU and a CUDA implementation: the policy picks one per task. A
    /// device error makes the task run its CPU implementation (reported once on stderr).
    pub fn codelet(
        self: &Arc<Self>,
        name: &str,
        cpu: impl Fn(&mut Buffers<'_>) + Send + Sync + 'static,
        cuda: impl Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync + 'static,
    ) -> Codelet {
        let gpu = Arc::clone(self);
        let label: Arc<str> = Arc::from(name);
        Codelet::new(name, move |bufs| match gpu.run(bufs, &cuda, gpu.policy) {
            Ok(true) => {}
            Ok(false) => {
                gpu.counters.cpu_tasks.fetch_add(1, Ordering::Relaxed);
                cpu(bufs);
            }
            Err(e) => {
                if !gpu.warned.swap(true, Ordering::Relaxed) {
                    eprintln!("starling-gpu: {label} ran on the CPU: {e}");
                }
                gpu.counters.cpu_tasks.fetch_add(1, Ordering::Relaxed);
                cpu(bufs);
            }
        })
    }

    /// A codelet with only a CUDA implementation: always on a device; a device error
    /// panics the task (the runtime reports it at shutdown).
    pub fn cuda_codelet(
        self: &Arc<Self>,
        name: &str,
        cuda: impl Fn(&mut CudaBuffers<'_>) -> Result<(), GpuError> + Send + Sync + 'static,
    ) -> Codelet {
        let gpu = Arc::clone(self);
        let label: Arc<str> = Arc::from(name);
        Codelet::new(name, move |bufs| {
            if let Err(e) = gpu.run(bufs, &cuda, Policy::PreferDevice) {
                panic!("{label} failed on the device: {e}");
            }
        })
    }

    /// Runs the task on a device; `Ok(false)` when the policy sends it to the CPU.
    fn run(&self, bufs: &Buffers<'_>, cuda: &CudaKernel, policy: Policy) -> Result<bool, GpuError> {
        let n = self.workers.len();
        if n == 0 {
            return Ok(false);
        }
        // Owner computes: the device of the first written handle (stable per handle).
        let key = (0..bufs.len())
            .find(|&i| bufs.mode(i).writes())
            .or(if bufs.is_empty() { None } else { Some(0) })
            .map_or(0, |i| bufs.uid(i));
        let first = (key % n as u64) as usize;
        let mut worker = match policy {
            Policy::Eager => {
                let free = (0..n).find_map(|k| self.workers[(first + k) % n].try_lock().ok());
                match free {
                    Some(w) => w,
                    None => return Ok(false),
                }
            }
            _ => lock(&self.workers[first]),
        };
        worker.run(bufs, cuda, &self.counters)?;
        self.counters.device_tasks.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// The host storage of access `i` and its shape, for the interfaces a device can hold.
fn shape_of(bufs: &Buffers<'_>, i: usize) -> Result<Shape, GpuError> {
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
fn with_host<R>(bufs: &Buffers<'_>, i: usize, f: impl FnOnce(&[f64]) -> R) -> R {
    if bufs.is::<Matrix<f64>>(i) {
        f(bufs.r::<Matrix<f64>>(i).as_slice())
    } else if bufs.is::<Vector<f64>>(i) {
        f(bufs.r::<Vector<f64>>(i).as_slice())
    } else if bufs.is::<Block<f64>>(i) {
        f(bufs.r::<Block<f64>>(i).as_slice())
    } else {
        f(core::slice::from_ref(bufs.r::<Variable<f64>>(i).value()))
    }
}

/// Runs `f` on the host storage of access `i` (write: the handle takes a new version).
fn with_host_mut<R>(bufs: &Buffers<'_>, i: usize, f: impl FnOnce(&mut [f64]) -> R) -> R {
    if bufs.is::<Matrix<f64>>(i) {
        f(bufs.w::<Matrix<f64>>(i).as_mut_slice())
    } else if bufs.is::<Vector<f64>>(i) {
        f(bufs.w::<Vector<f64>>(i).as_mut_slice())
    } else if bufs.is::<Block<f64>>(i) {
        f(bufs.w::<Block<f64>>(i).as_mut_slice())
    } else {
        f(core::slice::from_mut(
            bufs.w::<Variable<f64>>(i).value_mut(),
        ))
    }
}

impl Worker {
    fn run(
        &mut self,
        bufs: &Buffers<'_>,
        cuda: &CudaKernel,
        counters: &Counters,
    ) -> Result<(), GpuError> {
        let node = self.node;
        let n = bufs.len();
        let mut uids = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        for i in 0..n {
            let uid = bufs.uid(i);
            if uids.contains(&uid) {
                return Err(GpuError::Unsupported("one handle accessed twice by a task"));
            }
            let mode = bufs.mode(i);
            if mode.contains(AccessMode::SCRATCH) || !(mode.reads() || mode.writes()) {
                return Err(GpuError::Unsupported("a SCRATCH access"));
            }
            uids.push(uid);
            shapes.push(shape_of(bufs, i)?);
        }
        self.clock += 1;
        let mut lent: Vec<DeviceBuf> = Vec::with_capacity(n);
        let mut acquired = 0;
        let mut outcome = Ok(());
        for i in 0..n {
            let mode = bufs.mode(i);
            let version = bufs.version(i);
            let len = with_host(bufs, i, <[f64]>::len);
            let entry = self.cache.entry(uids[i]).or_insert_with(|| Entry {
                replicas: Replicated::new(len),
                version,
                last_use: 0,
            });
            if entry.replicas.len() != len {
                // The handle was reshaped (or its uid's copies are stale): start over.
                *entry = Entry {
                    replicas: Replicated::new(len),
                    version,
                    last_use: 0,
                };
            }
            entry.last_use = self.clock;
            if entry.version != version {
                // Written on the host since: the host copy is the only valid one.
                if let Err(e) = entry.replicas.host_written() {
                    outcome = Err(e);
                    break;
                }
                entry.version = version;
            }
            let fetches = mode.reads() && !entry.replicas.state().valid().contains(node);
            let backend = &self.backend;
            let got = with_host(bufs, i, |host| {
                entry
                    .replicas
                    .acquire_device(backend, node, mode, host)
                    .map(|_| ())
            });
            if let Err(e) = got {
                outcome = Err(e);
                break;
            }
            acquired += 1;
            if fetches {
                counters
                    .bytes_to_device
                    .fetch_add((len * size_of::<f64>()) as u64, Ordering::Relaxed);
            }
            let Some(data) = entry.replicas.lend(node) else {
                outcome = Err(GpuError::Driver("an acquired replica has no buffer".into()));
                break;
            };
            lent.push(DeviceBuf {
                data,
                shape: shapes[i],
                mode,
            });
        }
        if outcome.is_ok() {
            outcome = cuda(&mut CudaBuffers {
                kernels: &mut self.kernels,
                data: &mut lent,
            })
            .and_then(|()| self.kernels.device.synchronize());
        }
        // Give the buffers back and release the device acquisitions.
        for (i, buf) in lent.into_iter().enumerate() {
            if let Some(e) = self.cache.get_mut(&uids[i]) {
                e.replicas.give_back(node, buf.data);
            }
        }
        for (i, &uid) in uids.iter().enumerate().take(acquired) {
            if let Some(e) = self.cache.get_mut(&uid) {
                let _ = e.replicas.release(node, bufs.mode(i));
                if outcome.is_err() {
                    // The host copy still holds the value from before the task, which
                    // the CPU implementation will use: make it the valid one.
                    let _ = e.replicas.host_written();
                }
            }
        }
        outcome?;
        // Write-through: copy every written handle back to the host.
        for (i, &uid) in uids.iter().enumerate() {
            let Some(entry) = self.cache.get_mut(&uid) else {
                continue;
            };
            if bufs.mode(i).writes() {
                let backend = &self.backend;
                let replicas = &mut entry.replicas;
                with_host_mut(bufs, i, |host| {
                    replicas.acquire_host(backend, AccessMode::R, host)?;
                    replicas.release(MemNode::MAIN_RAM, AccessMode::R)
                })?;
                counters.bytes_to_host.fetch_add(
                    (entry.replicas.len() * size_of::<f64>()) as u64,
                    Ordering::Relaxed,
                );
            }
            // After the write guard is dropped: the version the copies now match.
            entry.version = bufs.version(i);
        }
        self.evict_to_budget();
        Ok(())
    }

    /// Frees the least recently used copies until the worker is within its budget. The
    /// host copy is always valid between tasks, so an eviction loses nothing.
    fn evict_to_budget(&mut self) {
        let mut used: usize = self.cache.values().map(|e| e.replicas.device_bytes()).sum();
        while used > self.budget {
            let Some((&uid, _)) = self
                .cache
                .iter()
                .filter(|(_, e)| e.last_use != self.clock)
                .min_by_key(|(_, e)| e.last_use)
            else {
                break;
            };
            if let Some(e) = self.cache.remove(&uid) {
                used = used.saturating_sub(e.replicas.device_bytes());
            }
        }
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
