//! A worker's side of the runtime: its loop, taking ready tasks, running their kernels
//! (or handing them to a device layer or an offload), and completing them.

use super::*;

impl Runtime {
    /// Runs one ready task on the calling thread, if there is one (driver mode); whether
    /// one ran.
    pub(crate) fn try_run_one(&self) -> bool {
        let mut st = self.state();
        match st.sched.pop_any() {
            Some(id) => {
                // The progression thread runs it: its track comes after the workers'.
                let worker = u32::try_from(self.shared.threads).unwrap_or(u32::MAX);
                let mut timeline = WorkerTrace::new(self.shared.trace.clone(), worker);
                self.execute(st, id, &mut timeline, self.shared.threads);
                true
            }
            None => false,
        }
    }

    pub(super) fn worker_loop(&self, worker: u32) {
        let w = worker as usize;
        CURRENT.with(|c| c.set((Arc::as_ptr(&self.shared) as usize, w)));
        let mut timeline = WorkerTrace::new(self.shared.trace.clone(), worker);
        loop {
            let mut st = self.state();
            // Once per idle spell, a worker that expects work (nodes are outstanding)
            // polls for it before it sleeps: a task made ready meanwhile is taken without
            // a notify and a wake-up through the kernel.
            let mut may_spin = true;
            let id = loop {
                if let Some(id) = st.sched.pop(w) {
                    break id;
                }
                if st.stopping {
                    return;
                }
                if core::mem::take(&mut may_spin) && st.outstanding > st.running {
                    let seen = self.shared.readied.load(Ordering::Acquire);
                    st.sched.set_polling(true);
                    drop(st);
                    // Counted out again if the poll panics (a drive's completion), so that
                    // no task counts on a worker that stopped polling (`Scheduler::wake`).
                    let polling = Polling(self);
                    let idle_drive = self.shared.idle_drive.get();
                    let found = || {
                        self.shared.readied.load(Ordering::Acquire) != seen
                            || self.shared.stop.load(Ordering::Acquire)
                    };
                    crate::sync::spin_until(self.shared.polls_per_yield, || {
                        found()
                            || idle_drive.is_some_and(|d| {
                                crate::sync::with_peer_drive(d);
                                found()
                            })
                    });
                    core::mem::forget(polling);
                    st = self.state();
                    st.sched.set_polling(false);
                    continue;
                }
                st.sched.set_asleep(w, true);
                st = wait_hot(&self.shared.work[w], st);
                st.sched.set_asleep(w, false);
            };
            self.execute(st, id, &mut timeline, w);
        }
    }

    /// Runs task `id`, just taken off the ready queue under `st` by CPU worker `w`, and
    /// completes it.
    pub(super) fn execute(
        &self,
        mut st: HotGuard<'_, State>,
        id: NodeId,
        timeline: &mut WorkerTrace,
        w: usize,
    ) {
        let State {
            nodes,
            sched,
            running,
            ..
        } = &mut *st;
        let Some(node) = nodes.get_mut(&id) else {
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
        // Where its kernel runs: offloaded (master-slave mode), on a device, or here. Under
        // `dmda` the scheduler chose this CPU worker for a task with a CPU kernel: that
        // one runs, here.
        let kernels = !self.shared.disable_kernels;
        let offload = self
            .shared
            .offload
            .get()
            .filter(|_| kernels && codelet.0.kernel.is_some());
        let device = codelet.0.device.as_ref().filter(|_| {
            kernels
                && offload.is_none()
                && !(self.shared.policy == SchedPolicy::Dmda && codelet.0.kernel.is_some())
        });
        // A task whose kernel runs here takes its accesses out of its node for its run
        // and puts them back as it completes ([`Runtime::finish_task`]): nothing reads a
        // running node's accesses, and a copy cost an allocation and a reference count
        // per access on the worker's path. One that runs elsewhere runs with a copy.
        let accesses = if offload.is_none() && device.is_none() {
            core::mem::take(&mut node.accesses)
        } else {
            node.accesses.clone()
        };
        let priority = node.priority;
        let expected = node.expected();
        if let Target::Worker(placed) = node.placed() {
            if self.shared.policy == SchedPolicy::Dmda {
                sched.started(placed, expected.unwrap_or(0.0));
            }
        }
        *running += 1;
        drop(st);

        if let Some(offload) = offload {
            // Master-slave mode: the kernel runs elsewhere; this worker goes on at once.
            let finish = self.completion(id, &codelet, callback, tag, None);
            offload.start(&codelet, accesses, priority, finish);
            return;
        }

        if let Some(device) = device {
            // A device task: its layer queues it and this worker goes on at once; or the
            // layer gives it back, and it runs here, on the CPU.
            let layer = Arc::clone(&device.layer);
            let finish = self.completion(id, &codelet, callback, tag, None);
            let task = DeviceTask {
                codelet,
                accesses,
                priority,
                finish: Some(finish),
                placed: false,
            };
            if let Err(task) = layer.start(task) {
                let begin = timeline.begin();
                let name = Arc::clone(&task.codelet.0.name);
                task.run_on_cpu(|b| self.shared.layers.to_host(b.accesses));
                timeline.end(begin, &name, None);
            }
            return;
        }

        // A panicking kernel or callback must not wedge the rank: the task still
        // completes (its successors run) and the panic is reported at shutdown.
        let begin = timeline.begin();
        let mut measured = None;
        let ran = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
            if !self.shared.disable_kernels {
                if let Some(kernel) = &codelet.0.kernel {
                    // The device layers bring main memory's copies up to date first.
                    self.shared.layers.to_host(&accesses)?;
                    let mut buffers = Buffers {
                        accesses: &accesses,
                    };
                    let t0 = self.shared.measure.then(std::time::Instant::now);
                    kernel(&mut buffers);
                    if let Some(t0) = t0 {
                        measured = Some(self.slow_down(w, t0));
                    }
                }
            }
            if let Some(cb) = callback {
                cb();
            }
            Ok::<(), String>(())
        }));
        timeline.end(begin, &codelet.0.name, expected);
        let failure = match ran {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("did not run: {e}")),
            Err(p) => Some(format!("panicked: {}", panic_text(&*p))),
        };
        if let (Some(m), Some(models), None) = (measured, &self.shared.models, &failure) {
            // The access is still granted: the sizes are read without waiting.
            let sizes: Vec<usize> = accesses.iter().map(|a| a.cell.packed_size()).collect();
            models.record(&codelet.0.name, codelet.model(), self.arch(w), &sizes, m);
        }
        // The worker holds no lock here: the sends its task's completion makes ready
        // may drive the receiving ranks' progress on this thread
        // ([`crate::sync::with_peer_drive`]), and the tasks they make ready there run
        // without a wake-up of those ranks' progression threads.
        crate::sync::with_peer_drive(|| {
            let ran = (Some(w), measured, accesses);
            self.finish_task(id, &codelet.0.name, failure, tag, ran, KernelTime::Wall);
        });
    }

    /// The completion of task `id` when it runs elsewhere (offloaded, or on a device): its
    /// callback (a panic in it is the task's failure), then [`Runtime::finish_task`].
    /// `sizes`: the task's data sizes when it was placed on a device by `dmda`, so that
    /// its device time is added to the models.
    pub(super) fn completion(
        &self,
        id: NodeId,
        codelet: &Codelet,
        callback: Option<Callback>,
        tag: Option<TaskTag>,
        sizes: Option<Vec<usize>>,
    ) -> Finish {
        let rt = self.clone();
        let name = Arc::clone(&codelet.0.name);
        let model = codelet.0.model.clone();
        Box::new(move |outcome, kernel_time| {
            let ok = outcome.is_ok();
            let mut failure = outcome.err();
            if let Some(cb) = callback {
                if let Err(p) = std::panic::catch_unwind(core::panic::AssertUnwindSafe(cb)) {
                    failure.get_or_insert_with(|| {
                        format!("its callback panicked: {}", panic_text(&*p))
                    });
                }
            }
            let ran = (None, None, Vec::new());
            let device = rt.finish_task(id, &name, failure, tag, ran, kernel_time);
            if let Some((slot, expected, took, sampled)) = device {
                if let Some(trace) = &rt.shared.trace {
                    let start = trace::clock_ns().saturating_sub((took * 1e9) as u64);
                    trace.device_task(slot as u32, &name, start, expected);
                }
                if let (Some(models), Some(sizes), true, true) =
                    (&rt.shared.models, sizes, sampled, ok)
                {
                    models.record(&name, model.as_ref(), Arch::Device, &sizes, took);
                }
            }
        })
    }

    /// Task `id` of codelet `name` ran (or failed, `failure` says how) on CPU worker
    /// `ran_on` for `measured` seconds, or elsewhere (`None`, `kernel`: what its device
    /// said of its time): completes it, its accesses put back first when it took them
    /// out for its run (`accesses`; empty otherwise). For a task `dmda` placed on a
    /// device: the device slot, the expected time, the time it took there and the
    /// models' sample.
    pub(super) fn finish_task(
        &self,
        id: NodeId,
        name: &str,
        failure: Option<String>,
        tag: Option<TaskTag>,
        (ran_on, measured, accesses): (Option<usize>, Option<f64>, Vec<Access>),
        kernel: KernelTime,
    ) -> Option<DeviceEnd> {
        if let Some(what) = failure {
            let mut st = self.state();
            // Its handle reads why, once the node is gone.
            let failed = TaskError::Failed {
                codelet: name.to_owned(),
                what: what.clone(),
            };
            st.task_failures
                .insert(id, TaskFailure::Failed(Box::new(failed)));
            st.panics.push(format!("task `{name}` {what}"));
        }
        if let Some(t) = tag {
            self.unlock_tag(t);
        }
        let mut st = self.state();
        if !accesses.is_empty() {
            if let Some(node) = st.nodes.get_mut(&id) {
                node.accesses = accesses;
            }
        }
        st.running -= 1;
        st.tasks_done += 1;
        let device_time = self.account(&mut st, id, ran_on, measured, kernel);
        let mut hooks = Hooks::default();
        self.complete_locked(&mut st, id, &mut hooks);
        drop(st);
        self.run_hooks(hooks);
        device_time
    }
}

/// A worker's poll for work, counted in its scheduler ([`Scheduler::set_polling`]): if the
/// poll unwinds, its drop counts the worker out. Forgotten on the way out of a poll that
/// returned (the worker counts itself out under the lock it takes anyway).
struct Polling<'a>(&'a Runtime);

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.state().sched.set_polling(false);
    }
}
