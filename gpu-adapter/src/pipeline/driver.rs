//! A device's driver thread: it issues the queued tasks within the window (inputs
//! acquired and copied in on the upload stream, kernels on a compute stream, events),
//! completes those whose last event fired, and fails those the device refused.

use super::*;

/// What happened to a task the driver thread tried to queue.
pub(super) enum Issue<B: Backend> {
    /// On the device: the driver thread holds it until its event completed.
    Queued(InFlight<B>),
    /// No room on the device while tasks are in flight: retry after a completion.
    NoRoom(DeviceTask),
    Failed(DeviceTask, GpuError),
}

impl<B: Backend> Shared<B> {
    /// Queues `task`'s copies and kernel on device `dev`.
    pub(super) fn issue(
        &self,
        st: &mut State<B>,
        dev: usize,
        exec: &mut B::Exec,
        task: DeviceTask,
    ) -> Issue<B> {
        let Some(kernel) = task.kernel::<KernelOf<B>>() else {
            return Issue::Failed(task, GpuError::Unsupported("a kernel of another backend"));
        };
        let node = node_of(dev);
        let bufs = task.buffers();
        let n = bufs.len();
        let mut uids = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        let mut lens = Vec::with_capacity(n);
        for i in 0..n {
            let uid = bufs.uid(i);
            let mode = bufs.mode(i);
            let checked = if uids.contains(&uid) {
                Err(GpuError::Unsupported("one handle accessed twice by a task"))
            } else if mode.contains(AccessMode::SCRATCH) || !(mode.reads() || mode.writes()) {
                Err(GpuError::Unsupported("a SCRATCH access"))
            } else {
                shape_of(&bufs, i).and_then(|s| Ok((s, with_host(&bufs, i, <[f64]>::len)?)))
            };
            match checked {
                Ok((shape, len)) => {
                    uids.push(uid);
                    shapes.push(shape);
                    lens.push(len);
                }
                Err(e) => {
                    return Issue::Failed(task, e);
                }
            }
        }
        // Room for the copies the task needs on this device.
        let need: usize = (0..n)
            .filter(|&i| !st.entries.get(&uids[i]).is_some_and(|e| e.has_buf(node)))
            .map(|i| lens[i] * size_of::<f64>())
            .sum();
        if !self.make_room(st, dev, need, &uids) && st.devs[dev].in_flight > 0 {
            return Issue::NoRoom(task);
        }
        st.clock += 1;
        let clock = st.clock;
        let mut acquired: Vec<usize> = Vec::with_capacity(n);
        let mut uploads: Vec<B::Event> = Vec::new();
        let mut failure = None;
        for (i, &len) in lens.iter().enumerate() {
            match self.acquire(st, dev, &bufs, i, len, clock) {
                Ok(up) => uploads.extend(up),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            acquired.push(i);
        }
        let mut data = Vec::with_capacity(n);
        if failure.is_none() {
            for i in 0..n {
                let buf = st
                    .entries
                    .get_mut(&uids[i])
                    .and_then(|e| e.bufs.get_mut(node.index()))
                    .and_then(Option::take);
                match buf {
                    Some(b) => data.push(DeviceBuf {
                        data: b,
                        shape: shapes[i],
                        mode: bufs.mode(i),
                    }),
                    None => {
                        failure = Some(GpuError::Driver("an acquired copy has no buffer".into()));
                        break;
                    }
                }
            }
        }
        let stream = st.devs[dev].next_stream % self.backend.streams().max(1);
        let launched = match failure {
            Some(e) => Err(e),
            None => {
                st.devs[dev].next_stream = st.devs[dev].next_stream.wrapping_add(1);
                self.backend
                    .launch(dev, stream, exec, &kernel.0, &mut data, &uploads)
            }
        };
        // Give the buffers back: later users are ordered after this kernel by the backend.
        for (i, b) in data.into_iter().enumerate() {
            if let Some(e) = st.entries.get_mut(&uids[i]) {
                e.bufs[node.index()] = Some(b.data);
            }
        }
        let uses: Vec<(u64, AccessMode)> =
            acquired.iter().map(|&i| (uids[i], bufs.mode(i))).collect();
        match launched {
            Ok(Launched {
                end,
                checks,
                timing,
            }) => Issue::Queued(InFlight {
                task,
                event: end,
                checks,
                timing,
                uses,
            }),
            Err(e) => {
                Self::release(st, node, &uses);
                Issue::Failed(task, e)
            }
        }
    }

    /// Acquires access `i` of `bufs` on device `dev`: the entry, its buffer, and the
    /// upload of the host copy when the device copy is not valid (its event returned: the
    /// task's kernel, and so its completion, come after it).
    pub(super) fn acquire(
        &self,
        st: &mut State<B>,
        dev: usize,
        bufs: &Buffers<'_>,
        i: usize,
        len: usize,
        clock: u64,
    ) -> Result<Option<B::Event>, GpuError> {
        let node = node_of(dev);
        let uid = bufs.uid(i);
        let mode = bufs.mode(i);
        let version = bufs.version(i);
        let e = st
            .entries
            .entry(uid)
            .or_insert_with(|| Entry::new(len, version, bufs.host_ref(i)));
        if e.len != len {
            // Reshaped since: start over (nothing of it is in flight: its writer is done).
            if e.in_use.iter().any(|&u| u > 0) {
                return Err(GpuError::Unsupported("a handle reshaped while in use"));
            }
            e.discard(&mut st.devs, &self.backend);
            *e = Entry::new(len, version, bufs.host_ref(i));
        }
        Self::sync_version(e, version)?;
        let reads = mode.reads() || mode.contains(AccessMode::REDUX);
        if reads && !e.state.valid().contains(node) && !e.state.valid().contains(MemNode::MAIN_RAM)
        {
            // Valid only on another device: through main memory.
            self.fetch_to_host(e, bufs, i)?;
        }
        if !e.has_buf(node) {
            if e.bufs.len() <= node.index() {
                e.bufs.resize_with(node.index() + 1, || None);
            }
            e.bufs[node.index()] = Some(self.backend.alloc(dev, len)?);
            st.devs[dev].used += e.bytes();
        }
        let a = e.state.acquire(node, mode)?;
        let mut upload = None;
        if let Some(f) = a.fetch {
            let pinned = Self::is_pinned(e, bufs, i);
            let Some(dst) = e.bufs[node.index()].as_mut() else {
                e.state.handle_transfer_failed(f)?;
                let _ = e.state.release(node, mode);
                return Err(GpuError::Driver("a buffer vanished".into()));
            };
            let up =
                with_host(bufs, i, |h| self.backend.upload(dev, h, pinned, dst)).and_then(|r| r);
            match up {
                Ok(event) => {
                    upload = Some(event);
                    // The backend orders the kernel after the upload: the copy is as good
                    // as landed for the state machine.
                    let _stale = e.state.handle_transfer_done(f)?;
                    add(&self.counters.bytes_to_device, e.bytes());
                    self.count_copy(e);
                }
                Err(err) => {
                    e.state.handle_transfer_failed(f)?;
                    let _ = e.state.release(node, mode);
                    return Err(err);
                }
            }
        }
        // Copies on other devices that the write made stale: free them.
        e.free_stale(&mut st.devs, a.invalidate);
        e.in_use[node.index()] += 1;
        e.last_use = clock;
        Ok(upload)
    }

    /// Releases the acquisitions `uses` of node `node`.
    pub(super) fn release(st: &mut State<B>, node: MemNode, uses: &[(u64, AccessMode)]) {
        for &(uid, mode) in uses {
            if let Some(e) = st.entries.get_mut(&uid) {
                let _ = e.state.release(node, mode);
                e.in_use[node.index()] = e.in_use[node.index()].saturating_sub(1);
            }
        }
    }

    /// The driver thread of device `dev`. It polls the events of its tasks in flight
    /// without the lock, and takes it only to release what completed and to issue what
    /// was queued: other threads (workers handing tasks over, ranks exchanging device
    /// values, host accesses) get the lock between two of its polls.
    pub(super) fn drive(self: Arc<Self>, dev: usize) {
        let node = node_of(dev);
        // Each compute stream's exec (library handles) before the first task, outside the
        // lock; one that fails is made again, and its error reported, when a task needs it.
        let mut execs: Vec<Option<B::Exec>> = (0..self.backend.streams().max(1))
            .map(|s| self.backend.exec(dev, s).ok())
            .collect();
        let mut inflight: Vec<InFlight<B>> = Vec::new();
        let mut done: Vec<InFlight<B>> = Vec::new();
        // Tasks the device failed (their uses to release) and tasks never issued.
        let mut errored: Vec<(InFlight<B>, GpuError)> = Vec::new();
        let mut failed: Vec<(DeviceTask, GpuError)> = Vec::new();
        let mut seen = 0u64;
        // The end event of the task completed last, for the next kernel time.
        let mut last_end: Option<B::Event> = None;
        loop {
            // Completions, polled without the lock.
            let mut k = 0;
            while k < inflight.len() {
                match self.backend.done(&inflight[k].event) {
                    Ok(false) => k += 1,
                    Ok(true) => done.push(inflight.swap_remove(k)),
                    Err(e) => errored.push((inflight.swap_remove(k), e)),
                }
            }
            let submitted = self.submitted[dev].load(Ordering::Acquire);
            let ended = !done.is_empty() || !errored.is_empty();
            // A task that did not fit (a full window, no room on the device) is retried
            // after a completion; a new one when the window has room.
            let room = inflight.len() < self.config.window;
            let lock_needed = ended || inflight.is_empty() || (room && submitted != seen);
            if !lock_needed {
                // Nothing to release or to issue: poll again.
                if self.config.poll.is_zero() {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(self.config.poll);
                }
                continue;
            }
            let mut st = self.state();
            seen = submitted;
            for f in done.iter().chain(errored.iter().map(|(f, _)| f)) {
                Self::release(&mut st, node, &f.uses);
            }
            st.devs[dev].in_flight = inflight.len();
            // New tasks, up to the window.
            while inflight.len() < self.config.window {
                let Some(q) = st.devs[dev].queue.pop() else {
                    break;
                };
                let stream = st.devs[dev].next_stream % execs.len();
                if execs[stream].is_none() {
                    match self.backend.exec(dev, stream) {
                        Ok(x) => execs[stream] = Some(x),
                        Err(e) => {
                            failed.push((q.task, e));
                            continue;
                        }
                    }
                }
                let Some(exec) = execs[stream].as_mut() else {
                    continue;
                };
                match self.issue(&mut st, dev, exec, q.task) {
                    Issue::Queued(f) => {
                        inflight.push(f);
                        st.devs[dev].in_flight = inflight.len();
                    }
                    Issue::NoRoom(task) => {
                        st.devs[dev].queue.push(Queued { task, ..q });
                        break;
                    }
                    Issue::Failed(task, e) => failed.push((task, e)),
                }
            }
            if !ended && failed.is_empty() {
                if st.stop && st.devs[dev].queue.is_empty() && inflight.is_empty() {
                    return;
                }
                if inflight.is_empty() {
                    // Nothing on the device: sleep until a task comes.
                    drop(
                        self.wake[dev]
                            .wait_timeout(st, Duration::from_millis(50))
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                }
                continue;
            }
            drop(st);
            // Outside the lock: completions run the runtime's successors, which may ask
            // for host copies.
            for f in done.drain(..) {
                let mut outcome = Ok(());
                for c in f.checks {
                    if let Err(e) = self.backend.check(dev, c) {
                        outcome = Err(e);
                    }
                }
                match outcome {
                    Ok(()) => {
                        add(&self.counters.device_tasks, 1);
                        let b = &self.backend;
                        match &f.timing {
                            Timing::From(t) => {
                                match b.kernel_seconds(t, &f.event, last_end.as_ref()) {
                                    Some(s) => f.task.finish_measured(Some(s)),
                                    None => f.task.finish(Ok(())),
                                }
                            }
                            Timing::Skip => f.task.finish_measured(None),
                            Timing::Untimed => f.task.finish(Ok(())),
                        }
                    }
                    Err(e) => self.fail(f.task, e),
                }
                last_end = Some(f.event);
            }
            for (f, e) in errored.drain(..) {
                self.fail(f.task, e);
            }
            for (task, e) in failed.drain(..) {
                self.fail(task, e);
            }
        }
    }

    /// A task failed on a device: its CPU implementation runs when falling back is asked
    /// for, else it fails.
    pub(super) fn fail(&self, task: DeviceTask, e: GpuError) {
        if self.config.fallback && task.has_cpu() {
            add(&self.counters.cpu_tasks, 1);
            add(&self.counters.fallbacks, 1);
            task.run_on_cpu(|data| self.to_host(data).map_err(|e| e.to_string()));
        } else {
            add(&self.counters.failed, 1);
            let name = task.name().to_owned();
            task.finish(Err(format!("failed on the device ({name}): {e}")));
        }
    }
}
