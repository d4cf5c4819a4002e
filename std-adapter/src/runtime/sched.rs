//! Scheduling policies: which worker runs each ready task (the reference's
//! `STARPU_SCHED`).
//!
//! | policy | ready tasks wait in | a worker takes | for |
//! | --- | --- | --- | --- |
//! | [`SchedPolicy::Prio`] (default) | one priority queue for the rank | the first task of the highest priority | most flows; no model needed |
//! | [`SchedPolicy::Ws`] | a queue per worker (the worker that made the task ready, else round robin) | its own queue's first task, else one stolen from the longest queue | many small tasks |
//! | [`SchedPolicy::Dmda`] | a queue per worker, priority-ordered, and the devices' own queues | its own queue's first task (no stealing) | CPUs and devices together, workers of different speeds |
//!
//! `dmda` ("deque model data aware") places each task when it becomes ready, on the
//! worker — CPU worker or device — where it is expected to *finish* first:
//! the worker's expected end (the rest of its running task and the expected durations of
//! the tasks queued on it) + the transfers the task needs there (the bus model, for the
//! bytes a device layer says it would copy) + the model's duration of the task on that
//! worker's [`Arch`]. An implementation with no calibrated model for the task's
//! footprint is uncalibrated: the task goes to the earliest free worker of such an arch,
//! so that every implementation gets samples. Priorities order each worker's queue
//! (highest first, FIFO among equals). The models are in [`crate::perfmodel`].
//!
//! A codelet with a device implementation, under `prio` and `ws`, is handed to its device
//! layer by the worker that takes it, and the layer's own policy decides (for
//! `starling-gpu`, `Policy::PreferDevice` or `Policy::Eager`); under `dmda` the scheduler
//! decides, and the layer queues what it is given ([`crate::DeviceTask::placed`]).

use core::fmt;
use std::time::Instant;

use crate::runtime::perfmodel::Arch;
use crate::runtime::ready::NodeId;
use crate::runtime::ready::ReadyQueue;

/// A scheduling policy (`STARLING_SCHED`: `prio`, `ws` or `dmda`); see the
/// [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SchedPolicy {
    /// One central priority queue (the default).
    #[default]
    Prio,
    /// Per-worker queues with work stealing.
    Ws,
    /// Earliest expected completion from the performance models.
    Dmda,
}

impl SchedPolicy {
    /// The policy named `name` (`prio`, `ws`, `dmda`; the reference's `eager` is `prio`,
    /// `lws` is `ws`, `dm`/`dmdas` are `dmda`), if known.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "prio" | "eager" => Some(Self::Prio),
            "ws" | "lws" => Some(Self::Ws),
            "dmda" | "dmdas" | "dm" => Some(Self::Dmda),
            _ => None,
        }
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Prio => "prio",
            Self::Ws => "ws",
            Self::Dmda => "dmda",
        }
    }
}

impl fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a ready task was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The central queue: any worker.
    Any,
    /// CPU worker `w`'s queue.
    Worker(usize),
    /// Device slot `d` (handed to its layer at once).
    Device(usize),
}

/// What one CPU worker or device did so far ([`SchedStats`]). Counted when something
/// measures tasks: the `dmda` policy, `STARLING_SCHED_STATS`, `STARLING_CALIBRATE` or
/// the speed hook; zero otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerStats {
    /// Tasks it ran.
    pub tasks: u64,
    /// Seconds it spent running them (a device: each instant with a task in flight,
    /// once).
    pub busy: f64,
}

/// A rank's scheduler statistics ([`crate::Context::sched_stats`]; printed at shutdown
/// with `STARLING_SCHED_STATS=1`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedStats {
    /// The policy.
    pub policy: SchedPolicy,
    /// Per CPU worker, in worker order.
    pub workers: Vec<WorkerStats>,
    /// Per device layer, in the order they were attached (`dmda` only).
    pub devices: Vec<WorkerStats>,
    /// The models' mean relative error, |expected − measured| / measured, over the tasks
    /// that had an expected duration, and how many they were.
    pub mean_error: Option<(f64, u64)>,
    /// Seconds since the runtime started.
    pub elapsed: f64,
}

/// A CPU worker's or a device's queue and expectations.
#[derive(Default)]
struct Slot {
    queue: ReadyQueue,
    arch: Option<Arch>,
    /// Σ of the expected durations of the tasks queued (CPU) or in flight (device).
    queued: f64,
    /// When the running task is expected to end (CPU), seconds since the epoch.
    running_end: f64,
    asleep: bool,
    stats: WorkerStats,
    /// Device: when the last task ended (for the busy time of overlapping tasks).
    last_end: f64,
}

impl Slot {
    fn available(&self, now: f64) -> f64 {
        self.running_end.max(now) + self.queued
    }
}

/// The ready tasks of a rank and where they go.
pub(crate) struct Scheduler {
    policy: SchedPolicy,
    central: ReadyQueue,
    workers: Vec<Slot>,
    devices: Vec<Slot>,
    rr: usize,
    len: usize,
    /// Polling workers not yet counted on to take a task ([`Scheduler::set_polling`]).
    pollers: usize,
    /// Whether a ready task counts on a polling worker rather than wake a sleeping one
    /// ([`Scheduler::count_on_pollers`]).
    count_on_pollers: bool,
    /// Workers asleep: notify only when one is (a notify is a system call).
    asleep: usize,
    epoch: Instant,
    /// Σ |expected − measured| / measured and the count, for the models' mean error.
    error: (f64, u64),
    /// Σ expected and Σ measured over the same tasks: the models' error in aggregate,
    /// which a device's samples (split where its tasks overlap) keep meaningful.
    sums: (f64, f64),
}

impl Scheduler {
    /// A scheduler for CPU workers of `arch[w]`. With no worker thread (driver mode with
    /// one worker: the progression thread runs every task) every policy is `prio`.
    pub(crate) fn new(policy: SchedPolicy, arch: &[Arch]) -> Self {
        Self {
            policy: Self::effective(policy, arch.len()),
            asleep: 0,
            central: ReadyQueue::default(),
            workers: arch
                .iter()
                .map(|&a| Slot {
                    arch: Some(a),
                    ..Slot::default()
                })
                .collect(),
            devices: Vec::new(),
            rr: 0,
            len: 0,
            pollers: 0,
            count_on_pollers: false,
            epoch: Instant::now(),
            error: (0.0, 0),
            sums: (0.0, 0.0),
        }
    }

    #[cfg(test)]
    pub(crate) fn policy(&self) -> SchedPolicy {
        self.policy
    }

    /// Seconds since the scheduler started.
    pub(crate) fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Ready tasks queued (devices' excluded: their layers hold them).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device slot of layer number `layer` (slots are made as layers appear).
    pub(crate) fn device_slot(&mut self, layer: usize) -> usize {
        while self.devices.len() <= layer {
            self.devices.push(Slot {
                arch: Some(Arch::Device),
                ..Slot::default()
            });
        }
        layer
    }

    /// Places a ready task where `push` of the policy says, `from` being the worker that
    /// made it ready (if a worker did). For `dmda`, `choose` has chosen already.
    pub(crate) fn push(&mut self, priority: i32, id: NodeId, from: Option<usize>) -> Target {
        match self.policy {
            SchedPolicy::Prio => {
                self.central.push(priority, id);
                self.len += 1;
                Target::Any
            }
            SchedPolicy::Ws | SchedPolicy::Dmda => {
                let w = from.filter(|&w| w < self.workers.len()).unwrap_or_else(|| {
                    self.rr = (self.rr + 1) % self.workers.len().max(1);
                    self.rr
                });
                self.push_to(w, priority, id, 0.0)
            }
        }
    }

    /// Queues task `id` on CPU worker `w`, expected to take `expected` seconds.
    pub(crate) fn push_to(&mut self, w: usize, priority: i32, id: NodeId, expected: f64) -> Target {
        let slot = &mut self.workers[w];
        slot.queue.push(priority, id);
        slot.queued += expected;
        self.len += 1;
        Target::Worker(w)
    }

    /// A task expected to take `expected` seconds was handed to device slot `d`.
    pub(crate) fn push_device(&mut self, d: usize, expected: f64) -> Target {
        self.devices[d].queued += expected;
        Target::Device(d)
    }

    /// A task handed to device slot `d` was given back by its layer (it is stopping).
    pub(crate) fn withdraw_device(&mut self, d: usize, expected: f64) {
        if let Some(s) = self.devices.get_mut(d) {
            s.queued = (s.queued - expected).max(0.0);
        }
    }

    /// `dmda`'s choice for a task: among the CPU workers (when `cpu` holds: the codelet
    /// has a CPU implementation) and device slot `device`, the earliest expected
    /// completion. `predict(arch)` gives the model's duration on an arch (`None`:
    /// uncalibrated) and `transfer(target)` the expected copies before it runs there.
    /// Returns the target and the expected duration there (`None`: uncalibrated).
    pub(crate) fn choose(
        &self,
        cpu: bool,
        device: Option<usize>,
        mut predict: impl FnMut(Arch) -> Option<f64>,
        mut transfer: impl FnMut(Target) -> f64,
    ) -> (Target, Option<f64>) {
        let now = self.now();
        let candidates = self
            .workers
            .iter()
            .enumerate()
            .filter(|_| cpu)
            .map(|(w, s)| (Target::Worker(w), s))
            .chain(device.map(|d| (Target::Device(d), &self.devices[d])));
        // Per arch, the prediction once (the models' lock is taken once per arch).
        let mut known: Vec<(Arch, Option<f64>)> = Vec::with_capacity(3);
        let mut best: Option<(f64, Target, Option<f64>)> = None;
        let mut best_uncalibrated: Option<(f64, usize, Target)> = None;
        for (target, slot) in candidates {
            let arch = slot.arch.unwrap_or(Arch::Cpu);
            let expected = match known.iter().find(|(a, _)| *a == arch) {
                Some(&(_, e)) => e,
                None => {
                    let e = predict(arch);
                    known.push((arch, e));
                    e
                }
            };
            let start = slot.available(now);
            match expected {
                None => {
                    // Ties (all idle): the shortest queue, so that a batch made ready at
                    // once is spread over the uncalibrated workers.
                    let queued = slot.queue.len();
                    if best_uncalibrated.is_none_or(|(s, q, _)| (start, queued) < (s, q)) {
                        best_uncalibrated = Some((start, queued, target));
                    }
                }
                Some(e) => {
                    let end = start + transfer(target) + e;
                    if best.is_none_or(|(b, _, _)| end < b) {
                        best = Some((end, target, Some(e)));
                    }
                }
            }
        }
        if let Some((_, _, target)) = best_uncalibrated {
            return (target, None);
        }
        best.map_or((Target::Worker(0), None), |(_, t, e)| (t, e))
    }

    /// The next task for CPU worker `w`, as the policy says, with the slot bookkeeping of
    /// a task starting (`expected`: its expected duration, when the policy has one).
    pub(crate) fn pop(&mut self, w: usize) -> Option<NodeId> {
        let id = match self.policy {
            SchedPolicy::Prio => self.central.pop(),
            SchedPolicy::Dmda => self.workers.get_mut(w).and_then(|s| s.queue.pop()),
            SchedPolicy::Ws => match self.workers.get_mut(w).and_then(|s| s.queue.pop()) {
                Some(id) => Some(id),
                None => self.steal(),
            },
        };
        self.len -= usize::from(id.is_some());
        id
    }

    /// A task from any queue (the progression thread in driver mode).
    pub(crate) fn pop_any(&mut self) -> Option<NodeId> {
        let id = match self.policy {
            SchedPolicy::Prio => self.central.pop(),
            _ => self.steal(),
        };
        self.len -= usize::from(id.is_some());
        id
    }

    /// A task from the longest worker queue.
    fn steal(&mut self) -> Option<NodeId> {
        self.workers
            .iter_mut()
            .max_by_key(|s| s.queue.len())
            .and_then(|s| s.queue.pop())
    }

    /// The policy in effect (`prio` with no worker thread).
    pub(crate) fn effective(policy: SchedPolicy, workers: usize) -> SchedPolicy {
        if workers == 0 {
            SchedPolicy::Prio
        } else {
            policy
        }
    }

    /// CPU worker `w` starts a task placed on it, expected to take `expected` seconds.
    pub(crate) fn started(&mut self, w: usize, expected: f64) {
        let now = self.now();
        if let Some(s) = self.workers.get_mut(w) {
            s.queued = (s.queued - expected).max(0.0);
            s.running_end = now + expected;
        }
    }

    /// A task of `target` ended: it ran `measured` seconds on a CPU worker, or (device)
    /// was handed to the device at `begin` (seconds of [`Scheduler::now`]) and its kernels
    /// took `measured` seconds there when the device timed them; it was expected to take
    /// `expected`. Returns the time it took, the model's sample: `measured`, or for a
    /// device that timed nothing the time since `begin` or since the device's previous
    /// task ended, whichever is later (tasks in flight on a device overlap: each instant
    /// counts once). That wall time is the device's busy time in either case. `sampled`:
    /// the time is a sample of the models (else it counts in no model error).
    pub(crate) fn ended(
        &mut self,
        target: Target,
        expected: Option<f64>,
        measured: Option<f64>,
        begin: f64,
        sampled: bool,
    ) -> f64 {
        let now = self.now();
        let slot = match target {
            Target::Worker(w) => self.workers.get_mut(w),
            Target::Device(d) => self.devices.get_mut(d),
            Target::Any => None,
        };
        let Some(slot) = slot else {
            return measured.unwrap_or(0.0);
        };
        slot.stats.tasks += 1;
        let took = match target {
            Target::Device(_) => {
                slot.queued = (slot.queued - expected.unwrap_or(0.0)).max(0.0);
                let wall = (now - begin.max(slot.last_end)).max(0.0);
                slot.last_end = slot.last_end.max(now);
                slot.stats.busy += wall;
                measured.unwrap_or(wall)
            }
            _ => {
                slot.running_end = now;
                let took = measured.unwrap_or(0.0);
                slot.stats.busy += took;
                took
            }
        };
        if let (Some(e), true) = (expected, sampled) {
            if took > 0.0 && (measured.is_some() || matches!(target, Target::Device(_))) {
                self.error.0 += (e - took).abs() / took;
                self.error.1 += 1;
                self.sums.0 += e;
                self.sums.1 += took;
            }
        }
        took
    }

    /// Marks worker `w` asleep or awake.
    pub(crate) fn set_asleep(&mut self, w: usize, asleep: bool) {
        if let Some(s) = self.workers.get_mut(w) {
            if s.asleep != asleep {
                s.asleep = asleep;
                if asleep {
                    self.asleep += 1;
                } else {
                    self.asleep -= 1;
                }
            }
        }
    }

    /// Makes a ready task count on a polling worker, when one polls, rather than wake a
    /// sleeping one ([`Scheduler::wake`]): on a crowded machine
    /// ([`crate::RuntimeConfig::crowded`]) a woken worker waits for a core as long as the
    /// polling one, and both then race for the one task (in the 4-rank in-process ring,
    /// a wake-up in most hops); where each rank has a core the woken worker often wins
    /// the race, and waking it is faster.
    pub(crate) fn count_on_pollers(&mut self, on: bool) {
        self.count_on_pollers = on;
    }

    /// A worker starts (`true`) or stops polling for work: while one polls and is not
    /// counted on yet, a task it can take wakes nobody ([`Scheduler::wake`]).
    pub(crate) fn set_polling(&mut self, polling: bool) {
        if polling {
            self.pollers += 1;
        } else {
            self.pollers = self.pollers.saturating_sub(1);
        }
    }

    /// The worker to wake for a task placed at `target`: itself if asleep (`dmda`), any
    /// asleep worker otherwise; `None` when none needs waking — none asleep, or (`prio`,
    /// `ws`: any worker can take the task; [`Scheduler::count_on_pollers`] set) a polling
    /// worker not yet counted on, which will (it looks at the queues once it stops
    /// polling) and is counted on from now. The worker is marked awake at once, so that
    /// the next task wakes another.
    pub(crate) fn wake(&mut self, target: Target) -> Option<usize> {
        if self.asleep == 0 {
            return None;
        }
        if self.count_on_pollers && self.pollers > 0 && self.policy != SchedPolicy::Dmda {
            self.pollers -= 1;
            return None;
        }
        let w = match target {
            Target::Worker(w) if self.policy == SchedPolicy::Dmda => {
                self.workers[w].asleep.then_some(w)
            }
            Target::Worker(w) if self.workers[w].asleep => Some(w),
            Target::Device(_) => None,
            _ => self.workers.iter().position(|s| s.asleep),
        }?;
        self.set_asleep(w, false);
        Some(w)
    }

    /// The report `STARLING_SCHED_STATS=1` prints at shutdown: per worker and device,
    /// tasks, busy and idle seconds over `lifetime`, and the models' mean error, per task
    /// and in aggregate (Σ expected against Σ measured).
    pub(crate) fn report(&self, name: &str) -> String {
        use fmt::Write as _;
        let lifetime = self.now();
        let mut out = format!(
            "[starling] {name}: scheduler {} over {lifetime:.3} s\n",
            self.policy
        );
        let rows = self
            .workers
            .iter()
            .enumerate()
            .map(|(w, s)| (format!("worker {w} ({})", s.arch.unwrap_or(Arch::Cpu)), s))
            .chain(
                self.devices
                    .iter()
                    .enumerate()
                    .map(|(d, s)| (format!("device {d}"), s)),
            );
        for (who, s) in rows {
            let _ = writeln!(
                out,
                "[starling]   {who:<20} tasks {:>8}  busy {:>9.3} s  idle {:>9.3} s",
                s.stats.tasks,
                s.stats.busy,
                (lifetime - s.stats.busy).max(0.0)
            );
        }
        match self.error {
            (_, 0) => out.push_str("[starling]   models: no task had an expected duration\n"),
            (sum, n) => {
                let _ = writeln!(
                    out,
                    "[starling]   models: mean error {:.1} % over {n} tasks; in all, {:.3} s expected against {:.3} s measured",
                    100.0 * sum / n as f64,
                    self.sums.0,
                    self.sums.1
                );
            }
        }
        out
    }

    /// The statistics so far.
    pub(crate) fn public_stats(&self) -> SchedStats {
        SchedStats {
            policy: self.policy,
            workers: self.workers.iter().map(|s| s.stats).collect(),
            devices: self.devices.iter().map(|s| s.stats).collect(),
            mean_error: match self.error {
                (_, 0) => None,
                (s, n) => Some((s / n as f64, n)),
            },
            elapsed: self.now(),
        }
    }
}

#[cfg(test)]
mod tests;
