//! A fake device backend: host memory stands for device memory, each stream is a thread
//! running its operations in order, and copies take a latency plus their bytes over a
//! bandwidth you set. It runs the whole [pipeline](crate::pipeline) — coherence, the
//! host-access hooks, streams and events, prefetch, eviction, write-back, staging before
//! a send — with no GPU, so CI tests it on any machine.
//!
//! A fake kernel is a CPU function of the task's device buffers ([`FakeKernel`]), run on
//! its compute stream's thread once the copies and kernels it depends on are done.
//!
//! ```
//! use std::sync::Arc;
//! use starling_gpu::fake::{Fake, FakeConfig};
//!
//! let gpu = Fake::open(FakeConfig::default()).unwrap();
//! let double = gpu.codelet("double", None, |data| {
//!     for x in data[0].data.iter_mut() {
//!         *x *= 2.0;
//!     }
//!     Ok(())
//! });
//! # let _ = double;
//! ```

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use starling_core::AccessMode;
use starling_std::device::Codelet;

use crate::GpuError;
use crate::backend::{Backend, DeviceBuf, Launched, Shape, Timing};
use crate::pipeline::{Layer, PipelineConfig, Policy};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the fake devices behave.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeConfig {
    /// Devices.
    pub devices: usize,
    /// Compute streams per device.
    pub streams: usize,
    /// Bytes of memory per device (the layer's budget).
    pub memory: usize,
    /// The fixed cost of each copy.
    pub latency: Duration,
    /// Bytes per second of a copy; `f64::INFINITY`: only the latency.
    pub bandwidth: f64,
    /// The time each kernel takes on top of its function's.
    pub kernel_time: Duration,
    /// Tasks in flight per device.
    pub window: usize,
    /// CPU or device, per task.
    pub policy: Policy,
    /// Run a task's CPU implementation when its fake kernel fails.
    pub fallback: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            devices: 1,
            streams: 2,
            memory: 1 << 30,
            latency: Duration::from_micros(10),
            bandwidth: 10e9,
            kernel_time: Duration::ZERO,
            window: 4,
            policy: Policy::PreferDevice,
            fallback: false,
        }
    }
}

/// One access of a fake kernel: the buffer's elements, its layout and the mode.
#[derive(Debug)]
pub struct FakeView<'a> {
    /// The elements (the whole host storage's, padding included).
    pub data: &'a mut [f64],
    /// Their layout.
    pub shape: Shape,
    /// How the task accesses them.
    pub mode: AccessMode,
}

/// A codelet's implementation on the fake device.
pub type FakeKernel = dyn Fn(&mut [FakeView<'_>]) -> Result<(), GpuError> + Send + Sync;

/// The end of a fake operation: set once, with its outcome.
#[derive(Clone, Debug, Default)]
pub struct FakeEvent(Arc<(Mutex<Outcome>, Condvar)>);

/// A fake kernel's seconds from the end of its waits to its end: `None` while it runs.
pub type FakeTimer = Arc<Mutex<Option<f64>>>;

/// An operation's outcome: `None` while it runs.
type Outcome = Option<Result<(), String>>;

/// A kernel's buffer as its stream's thread holds it.
type Held = (Arc<Mutex<Vec<f64>>>, Shape, AccessMode);

impl FakeEvent {
    fn done() -> Self {
        let e = Self::default();
        e.set(Ok(()));
        e
    }

    fn set(&self, outcome: Result<(), String>) {
        *lock(&self.0.0) = Some(outcome);
        self.0.1.notify_all();
    }

    fn poll(&self) -> Option<Result<(), String>> {
        lock(&self.0.0).clone()
    }

    fn wait(&self) -> Result<(), String> {
        let mut g = lock(&self.0.0);
        loop {
            if let Some(r) = g.clone() {
                return r;
            }
            g = self.0.1.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A buffer in a fake device's memory.
#[derive(Debug)]
pub struct FakeBuf {
    data: Arc<Mutex<Vec<f64>>>,
    /// The end of the last operation that wrote it.
    ready: FakeEvent,
}

type Job = Box<dyn FnOnce() + Send>;

/// A stream: a thread running its jobs in order.
struct Lane {
    tx: Mutex<mpsc::Sender<Job>>,
}

impl Lane {
    fn new(name: String) -> Result<Self, GpuError> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .map_err(|e| GpuError::Driver(format!("spawning a fake stream: {e}")))?;
        Ok(Self { tx: Mutex::new(tx) })
    }

    fn push(&self, job: Job) -> Result<(), GpuError> {
        lock(&self.tx)
            .send(job)
            .map_err(|_| GpuError::Driver("a fake stream stopped".into()))
    }
}

/// One fake device: its upload stream and compute streams.
struct FakeDev {
    upload: Lane,
    compute: Vec<Lane>,
}

/// What the fake devices did, for tests.
#[derive(Debug, Default)]
pub struct FakeLog {
    /// Uploads made.
    pub uploads: AtomicU64,
    /// Downloads made.
    pub downloads: AtomicU64,
    /// Kernels run.
    pub kernels: AtomicU64,
    /// Kernels running now.
    running: AtomicU64,
    /// Uploads that ran while a kernel of the same device was running (prefetch).
    pub overlapped_uploads: AtomicU64,
    /// Bytes pinned.
    pub pinned: AtomicU64,
    /// Copies from one buffer of a device to another (device values between ranks).
    pub device_copies: AtomicU64,
    per_device: Mutex<Vec<u64>>,
}

impl FakeLog {
    /// Kernels run on each device.
    pub fn kernels_per_device(&self) -> Vec<u64> {
        lock(&self.per_device).clone()
    }
}

/// The fake backend: see the [module docs](self).
pub struct Fake {
    config: FakeConfig,
    devs: Vec<FakeDev>,
    log: Arc<FakeLog>,
}

impl core::fmt::Debug for Fake {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fake")
            .field("config", &self.config)
            .finish()
    }
}

/// The fake devices' layer.
pub type FakeGpu = Layer<Fake>;

impl Fake {
    /// A layer over fake devices as `config` describes.
    ///
    /// # Errors
    /// [`GpuError::Driver`] when a stream's thread cannot start;
    /// [`GpuError::Unsupported`] for 0 devices.
    pub fn open(config: FakeConfig) -> Result<Arc<FakeGpu>, GpuError> {
        let devs = (0..config.devices)
            .map(|d| {
                Ok(FakeDev {
                    upload: Lane::new(format!("fake{d}-up"))?,
                    compute: (0..config.streams.max(1))
                        .map(|s| Lane::new(format!("fake{d}-c{s}")))
                        .collect::<Result<_, GpuError>>()?,
                })
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        let pipeline = PipelineConfig {
            policy: config.policy,
            fallback: config.fallback,
            window: config.window,
            budget: vec![config.memory; config.devices],
            auto_pin: Some(1 << 20),
            poll: Duration::from_micros(200),
        };
        let devices = config.devices;
        Layer::new(
            Self {
                config,
                devs,
                log: Arc::new(FakeLog {
                    per_device: Mutex::new(vec![0; devices]),
                    ..FakeLog::default()
                }),
            },
            pipeline,
        )
    }

    /// What the devices did so far.
    pub fn log(&self) -> &FakeLog {
        &self.log
    }

    fn copy_time(&self, bytes: usize) -> Duration {
        let bw = if self.config.bandwidth.is_finite() && self.config.bandwidth > 0.0 {
            Duration::from_secs_f64(bytes as f64 / self.config.bandwidth)
        } else {
            Duration::ZERO
        };
        self.config.latency + bw
    }
}

fn pause(d: Duration) {
    if !d.is_zero() {
        let end = Instant::now() + d;
        while Instant::now() < end {
            std::thread::sleep(end.saturating_duration_since(Instant::now()));
        }
    }
}

impl Backend for Fake {
    type Buf = FakeBuf;
    type Event = FakeEvent;
    type Kernel = FakeKernel;
    type Exec = ();
    type Check = ();
    type Timer = FakeTimer;

    fn devices(&self) -> usize {
        self.devs.len()
    }

    fn streams(&self) -> usize {
        self.config.streams.max(1)
    }

    fn exec(&self, _dev: usize, _stream: usize) -> Result<(), GpuError> {
        Ok(())
    }

    fn alloc(&self, _dev: usize, len: usize) -> Result<FakeBuf, GpuError> {
        Ok(FakeBuf {
            data: Arc::new(Mutex::new(vec![f64::NAN; len])),
            ready: FakeEvent::done(),
        })
    }

    fn upload(
        &self,
        dev: usize,
        host: &[f64],
        _pinned: bool,
        dst: &mut FakeBuf,
    ) -> Result<FakeEvent, GpuError> {
        if host.len() != dst_len(dst) {
            return Err(GpuError::LengthMismatch {
                expected: dst_len(dst),
                got: host.len(),
            });
        }
        // The staging copy: the host data as they are now.
        let staged = host.to_vec();
        let event = FakeEvent::default();
        let (done, after, data) = (event.clone(), dst.ready.clone(), Arc::clone(&dst.data));
        let time = self.copy_time(size_of_val(host));
        let log = Arc::clone(&self.log);
        self.devs[dev].upload.push(Box::new(move || {
            // Ordered after the buffer's last writer, whatever its outcome.
            let _ = after.wait();
            let r = Ok(());
            if log.running.load(Ordering::SeqCst) > 0 {
                log.overlapped_uploads.fetch_add(1, Ordering::Relaxed);
            }
            pause(time);
            lock(&data).copy_from_slice(&staged);
            log.uploads.fetch_add(1, Ordering::Relaxed);
            done.set(r);
        }))?;
        dst.ready = event.clone();
        Ok(event)
    }

    fn copy(&self, dev: usize, src: &FakeBuf, dst: &mut FakeBuf) -> Result<FakeEvent, GpuError> {
        if dst_len(src) != dst_len(dst) {
            return Err(GpuError::LengthMismatch {
                expected: dst_len(dst),
                got: dst_len(src),
            });
        }
        let event = FakeEvent::default();
        let (done, after) = (event.clone(), [src.ready.clone(), dst.ready.clone()]);
        let (from, to) = (Arc::clone(&src.data), Arc::clone(&dst.data));
        let log = Arc::clone(&self.log);
        self.devs[dev].upload.push(Box::new(move || {
            for a in &after {
                let _ = a.wait();
            }
            let values = lock(&from).clone();
            lock(&to).copy_from_slice(&values);
            log.device_copies.fetch_add(1, Ordering::Relaxed);
            done.set(Ok(()));
        }))?;
        dst.ready = event.clone();
        Ok(event)
    }

    fn download(&self, _dev: usize, src: &FakeBuf, host: &mut [f64]) -> Result<(), GpuError> {
        // Ordered after the buffer's last writer; a writer that failed left it as it was.
        let _ = src.ready.wait();
        pause(self.copy_time(size_of_val(host)));
        let data = lock(&src.data);
        if data.len() != host.len() {
            return Err(GpuError::LengthMismatch {
                expected: host.len(),
                got: data.len(),
            });
        }
        host.copy_from_slice(&data);
        self.log.downloads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn launch(
        &self,
        dev: usize,
        stream: usize,
        _exec: &mut (),
        kernel: &Arc<FakeKernel>,
        data: &mut [DeviceBuf<FakeBuf>],
        uploads: &[FakeEvent],
    ) -> Result<Launched<Self>, GpuError> {
        let kernel = Arc::clone(kernel);
        let event = FakeEvent::default();
        let timer = FakeTimer::default();
        let timed = Arc::clone(&timer);
        let after: Vec<FakeEvent> = data
            .iter()
            .map(|b| b.data.ready.clone())
            .chain(uploads.iter().cloned())
            .collect();
        let bufs: Vec<Held> = data
            .iter()
            .map(|b| (Arc::clone(&b.data.data), b.shape, b.mode))
            .collect();
        let done = event.clone();
        let time = self.config.kernel_time;
        let log = Arc::clone(&self.log);
        self.devs[dev].compute[stream % self.devs[dev].compute.len()].push(Box::new(
            move || {
                let outcome;
                for a in &after {
                    // Ordering only: a failed writer left its buffer as it was.
                    let _ = a.wait();
                }
                let t0 = Instant::now();
                {
                    log.running.fetch_add(1, Ordering::SeqCst);
                    // Lock in address order: two kernels reading the same buffers never
                    // deadlock.
                    let mut order: Vec<usize> = (0..bufs.len()).collect();
                    order.sort_by_key(|&i| Arc::as_ptr(&bufs[i].0) as usize);
                    let mut guards: Vec<Option<MutexGuard<'_, Vec<f64>>>> =
                        (0..bufs.len()).map(|_| None).collect();
                    for i in order {
                        guards[i] = Some(lock(&bufs[i].0));
                    }
                    let mut views: Vec<FakeView<'_>> = guards
                        .iter_mut()
                        .zip(&bufs)
                        .filter_map(|(g, b)| {
                            g.as_mut().map(|g| FakeView {
                                data: g.as_mut_slice(),
                                shape: b.1,
                                mode: b.2,
                            })
                        })
                        .collect();
                    outcome = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
                        kernel(&mut views)
                    }))
                    .map_err(|_| "the fake kernel panicked".to_owned())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                    drop(views);
                    drop(guards);
                    pause(time);
                    log.kernels.fetch_add(1, Ordering::Relaxed);
                    if let Some(k) = lock(&log.per_device).get_mut(dev) {
                        *k += 1;
                    }
                    log.running.fetch_sub(1, Ordering::SeqCst);
                }
                *lock(&timed) = Some(t0.elapsed().as_secs_f64());
                done.set(outcome);
            },
        ))?;
        for b in data.iter_mut() {
            if b.mode.writes() {
                b.data.ready = event.clone();
            }
        }
        Ok(Launched {
            end: event,
            checks: Vec::new(),
            timing: Timing::From(timer),
        })
    }

    fn kernel_seconds(
        &self,
        timer: &FakeTimer,
        _end: &FakeEvent,
        _prev: Option<&FakeEvent>,
    ) -> Option<f64> {
        *lock(timer)
    }

    fn done(&self, event: &FakeEvent) -> Result<bool, GpuError> {
        match event.poll() {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => Err(GpuError::Driver(e)),
        }
    }

    fn check(&self, _dev: usize, _check: ()) -> Result<(), GpuError> {
        Ok(())
    }

    fn pin(&self, host: &[f64]) -> Result<(), GpuError> {
        self.log
            .pinned
            .fetch_add((size_of_val(host)) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn unpin(&self, _ptr: usize) {}
}

fn dst_len(b: &FakeBuf) -> usize {
    lock(&b.data).len()
}

impl FakeGpu {
    /// A codelet whose fake-device implementation is `kernel`, with the CPU
    /// implementation `cpu` (`None`: device only).
    pub fn codelet(
        self: &Arc<Self>,
        name: &str,
        cpu: Option<Arc<starling_std::device::Kernel>>,
        kernel: impl Fn(&mut [FakeView<'_>]) -> Result<(), GpuError> + Send + Sync + 'static,
    ) -> Codelet {
        let k: Arc<FakeKernel> = Arc::new(kernel);
        self.codelet_with(name, cpu, k)
    }
}
