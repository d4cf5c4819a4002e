//! Where ready tasks go and what the scheduler learns when they end: `dmda`'s placement
//! (CPU worker or device slot, from the performance models), the hand-off of a task
//! placed on a device, the bookkeeping of a task that ended, the speed-factor test hook
//! and the measurement of a device layer's link. The policies themselves are in
//! [`crate::sched`], the models in [`crate::perfmodel`].

use super::{
    Access, DeviceTask, KernelTime, NodeId, Placement, Runtime, State, Work, reads_value,
    writes_value,
};
use crate::runtime::perfmodel::{Arch, Bus};
use crate::runtime::sched::{SchedPolicy, Target};
use crate::sync::Arc;

thread_local! {
    /// The runtime (its shared state's address) and the index of the CPU worker running
    /// on this thread, so that `ws` queues a task made ready by a worker on that worker.
    pub(super) static CURRENT: core::cell::Cell<(usize, usize)> = const { core::cell::Cell::new((0, 0)) };
}

/// A task `dmda` placed on a device ended: its device slot, the time expected, the time
/// it took there (seconds) and whether that time is a sample of the models (not when the
/// device said it was not representative).
pub(super) type DeviceEnd = (usize, Option<f64>, f64, bool);

impl Runtime {
    /// A device layer was attached: when the models are used and hold no link to its
    /// memory node yet, the layer measures it (the transfer model, saved with the models).
    pub(super) fn measure_bus(&self, layer: &Arc<dyn crate::runtime::device::DeviceLayer>) {
        let (Some(models), Some(slot)) = (&self.shared.models, self.shared.layers.index_of(layer))
        else {
            return;
        };
        let node = slot as u32 + 1;
        if models.bus(0, node).is_none() {
            if let Some((up, down)) = layer.measure_bus() {
                models.set_bus(0, node, up);
                models.set_bus(node, 0, down);
            }
        }
    }

    /// The scheduler's statistics so far ([`crate::sched::SchedStats`]).
    pub(crate) fn sched_stats(&self) -> crate::runtime::sched::SchedStats {
        self.state().sched.public_stats()
    }

    /// The CPU worker of this runtime running on the calling thread, if any.
    pub(super) fn current_worker(&self) -> Option<usize> {
        let (rt, w) = CURRENT.with(core::cell::Cell::get);
        (rt == Arc::as_ptr(&self.shared) as usize).then_some(w)
    }

    /// The test hook's slowdown ([`RuntimeConfig::worker_speed`]): a kernel run by worker
    /// `w` since `t0` takes `100 / percent` times as long. Returns its measured seconds.
    pub(super) fn slow_down(&self, w: usize, t0: std::time::Instant) -> f64 {
        let percent = self.shared.speed.get(w).copied().unwrap_or(100);
        if percent < 100 {
            let extra = t0.elapsed().mul_f64(100.0 / f64::from(percent) - 1.0);
            std::thread::sleep(extra);
        }
        t0.elapsed().as_secs_f64()
    }

    /// The arch of CPU worker `w`'s models.
    pub(super) fn arch(&self, w: usize) -> Arch {
        Arch::cpu_at(self.shared.speed.get(w).copied().unwrap_or(100))
    }

    /// Places ready task `id` as `dmda` says: on a CPU worker's queue, or on a device
    /// slot, which the caller hands the task to.
    pub(super) fn place(&self, st: &mut State, id: NodeId) -> Target {
        let State {
            nodes,
            sched,
            handles,
            ..
        } = st;
        let Some(node) = nodes.get_mut(&id) else {
            return Target::Any;
        };
        let Some(Work::Task { codelet, .. }) = &node.work else {
            return Target::Any;
        };
        let models = self.shared.models.as_ref();
        let (target, expected) = match models {
            Some(models) if codelet.has_kernel() && !self.shared.disable_kernels => {
                let sizes: Vec<usize> = node.accesses.iter().map(|a| a.cell.size_hint()).collect();
                let device = codelet
                    .0
                    .device
                    .as_ref()
                    .and_then(|d| self.shared.layers.index_of(&d.layer))
                    .map(|l| sched.device_slot(l));
                let copies = |a: &Access| {
                    handles
                        .get(&a.cell.id())
                        .map_or(1, |h| if h.copies == 0 { 1 } else { h.copies })
                };
                let transfer = |target: Target| -> f64 {
                    let mut t = 0.0;
                    for a in node.accesses.iter().filter(|a| reads_value(a.mode)) {
                        let c = copies(a);
                        let bytes = a.cell.size_hint() as u64;
                        let link = match target {
                            Target::Device(d) if c & (1 << (d + 1)) == 0 => {
                                models.bus(0, d as u32 + 1)
                            }
                            Target::Worker(_) if c & 1 == 0 => models.bus(c.trailing_zeros(), 0),
                            _ => None,
                        };
                        t += link.map_or(0.0, |b: Bus| b.time(bytes));
                    }
                    t
                };
                sched.choose(
                    codelet.0.kernel.is_some(),
                    device,
                    |arch| models.predict(&codelet.0.name, codelet.model(), arch, &sizes),
                    transfer,
                )
            }
            // Nothing to model: the earliest free worker.
            _ => sched.choose(true, None, |_| Some(0.0), |_| 0.0),
        };
        // Where the valid copies will be once it ran there (the transfer model's estimate).
        let bit = match target {
            Target::Device(d) => 1u64 << (d + 1),
            _ => 1,
        };
        for a in &node.accesses {
            let h = handles.or_default(a.cell.id());
            let before = if h.copies == 0 { 1 } else { h.copies };
            h.copies = if writes_value(a.mode) {
                bit
            } else {
                before | bit
            };
        }
        let placed = match target {
            Target::Worker(w) => sched.push_to(w, node.priority, id, expected.unwrap_or(0.0)),
            Target::Device(d) => sched.push_device(d, expected.unwrap_or(0.0)),
            Target::Any => sched.push(node.priority, id, None),
        };
        node.placement = Some(Box::new(Placement {
            placed,
            expected,
            begin: 0.0,
        }));
        placed
    }

    /// Hands task `id`, placed on a device slot by `dmda`, to its device layer; when the
    /// layer gives it back (it is stopping), runs its CPU implementation here.
    pub(super) fn start_on_device(&self, id: NodeId) {
        let mut st = self.state();
        let now = st.sched.now();
        let Some(node) = st.nodes.get_mut(&id) else {
            return;
        };
        let Some(Work::Task {
            codelet,
            callback,
            tag,
        }) = node.work.take()
        else {
            return;
        };
        if let Some(p) = node.placement.as_mut() {
            p.begin = now;
        }
        let accesses = node.accesses.clone();
        let priority = node.priority;
        st.running += 1;
        drop(st);
        let Some(layer) = codelet.0.device.as_ref().map(|d| Arc::clone(&d.layer)) else {
            return;
        };
        let sizes: Vec<usize> = accesses.iter().map(|a| a.cell.size_hint()).collect();
        let finish = self.completion(id, &codelet, callback, tag, Some(sizes));
        let task = DeviceTask {
            codelet,
            accesses,
            priority,
            finish: Some(finish),
            placed: true,
        };
        if let Err(task) = layer.start(task) {
            // Not the device's time: no sample, and the slot forgets the task.
            {
                let mut st = self.state();
                let State { nodes, sched, .. } = &mut *st;
                if let Some(p) = nodes.get_mut(&id).and_then(|n| n.placement.as_mut()) {
                    if let Target::Device(d) = p.placed {
                        sched.withdraw_device(d, p.expected.unwrap_or(0.0));
                    }
                    p.placed = Target::Any;
                }
            }
            task.run_on_cpu(|b| self.shared.layers.to_host(b.accesses));
        }
    }

    /// The scheduler's bookkeeping of a task that ended (nothing under `prio`/`ws` when
    /// nothing is measured: the default costs nothing).
    pub(super) fn account(
        &self,
        st: &mut State,
        id: NodeId,
        ran_on: Option<usize>,
        measured: Option<f64>,
        kernel: KernelTime,
    ) -> Option<DeviceEnd> {
        if !self.shared.measure && self.shared.policy != SchedPolicy::Dmda {
            return None;
        }
        let (placed, expected, begin) = st
            .nodes
            .get(&id)
            .and_then(|n| n.placement.as_deref())
            .map_or((Target::Any, None, 0.0), |p| {
                (p.placed, p.expected, p.begin)
            });
        match (placed, ran_on) {
            (Target::Device(d), _) => {
                let (measured, sampled) = match kernel {
                    KernelTime::Wall => (None, true),
                    KernelTime::Measured(s) => (Some(s), true),
                    KernelTime::Skip => (None, false),
                };
                let took = st
                    .sched
                    .ended(Target::Device(d), expected, measured, begin, sampled);
                Some((d, expected, took, sampled))
            }
            (_, Some(w)) => {
                st.sched
                    .ended(Target::Worker(w), expected, measured, 0.0, true);
                None
            }
            _ => None,
        }
    }
}
