//! The driver of a rank's progress: the lock that the progression thread, or an
//! application thread blocked in a wait, holds while it pumps the engine and the
//! transport; the progression thread's loop; a rank's start.

use super::*;

/// A rank's progress, drivable by whichever thread holds its lock: the progression
/// thread, or an application thread blocked in a wait ([`Drive::try_drive`]). The
/// transport is made and dropped on the progression thread (MPI is finalized by the
/// thread that initialized it); in between every MPI call is made under this lock, one
/// at a time (`MPI_THREAD_SERIALIZED`).
pub(crate) struct Driver<T: Transport> {
    state: DriveLock<State<T>>,
    shared: Arc<Shared>,
    polling: bool,
    driver_mode: Option<DriverMode>,
    /// [`crate::RankConfig::multiple_send`]: [`Drive::post`] transmits at once.
    send_now: bool,
}

struct State<T: Transport> {
    /// `None` once stopped.
    progress: Option<Progress<T>>,
    inbox: InboxReceiver<Input<T::Wire>>,
    /// When anything last happened (as of the last [`Driver::hot`]).
    last_active: std::time::Instant,
    /// Something happened since `last_active` was read from the clock: a drive only
    /// sets this, and the progression thread reads the clock when it asks whether to
    /// poll on ([`Driver::hot`]), so that a thread driving progress reads no clock.
    moved: bool,
    /// A [`Command::Stop`] was taken: the progression thread drops the transport.
    stopping: bool,
}

/// What one drive of a rank's progress did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Inputs were taken or the engine or transport moved.
    Progressed,
    /// Nothing to do right now.
    Idle,
    /// Nothing completed, but the transport has transfers under way (they move only
    /// while it is polled).
    InFlight,
    /// Another thread is driving.
    Busy,
    /// The rank stopped.
    Stopped,
}

/// Progress a thread can drive while it waits, whatever the transport.
pub(crate) trait Drive: Send + Sync {
    /// Drives the rank's progress once unless another thread is driving it.
    fn try_drive(&self) -> Driven;
    /// Drives the rank's progress, as its progression thread does, until neither the
    /// engine nor the transport has anything to do, unless another thread is driving it;
    /// for a thread that looks at the rank's queued inputs once it lets go (and drives
    /// them or wakes the progression thread): a sender that finds the lock held meanwhile
    /// leaves its input to it ([`InboxTx::send`]).
    fn try_drive_checked(&self) -> Driven;
    /// Marks the calling thread as driving until the guard drops: the progression thread
    /// stands back meanwhile.
    fn enter(&self) -> DriverGuard<'_>;
    /// Hands `command` to the engine on the calling thread, skipping the inbox, when
    /// nothing waits in the inbox (which keeps the commands' order) and the progression
    /// lock is free; gives it back otherwise (the caller queues it). The command's outputs go out at the next
    /// drive: the progression thread is woken for it unless a thread drives; a thread
    /// allowed to ([`sync::with_peer_drive`]: a worker after its task) drives them out
    /// itself, completions included.
    fn post(&self, command: Command) -> Result<(), Command>;
    /// Sends `bytes`, the packed payload of a standard send of `args`, on the calling
    /// thread at once and without a request (`Progress::send_now`: nothing waits to go
    /// before it), when nothing waits in the inbox and the progression lock is free; gives
    /// the bytes back otherwise (the caller submits the send).
    fn send_now(&self, args: SendArgs, bytes: Vec<u8>) -> Result<(), Vec<u8>>;
    /// An idle worker's look at its rank's progress (it polls for work): when the
    /// transport is polled or something is queued or posted, drives once if the lock is
    /// free, then, having let go, takes what came in meanwhile (a sender that found the
    /// lock held by it did not wake the progression thread: `InboxTx::send`), a few
    /// rounds; what is still queued after them is the progression thread's, woken for
    /// it.
    fn idle_drive(&self);
}

/// Rounds of [`Driver::checked_rounds`]: a worker that posted what its task made ready
/// takes what came in while it drove, this many times at most, before it leaves it to the
/// progression thread.
const CHECKED_ROUNDS: usize = 3;

/// `Shared::checked_holder`, raised while a checked holder holds the progress lock and
/// lowered when dropped, before the lock is let go.
struct CheckedFlag<'a>(&'a AtomicBool);

impl<'a> CheckedFlag<'a> {
    fn raise(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for CheckedFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// While alive, a thread drives progress itself ([`Drive::enter`]).
pub(crate) struct DriverGuard<'a> {
    shared: &'a Shared,
}

impl DriverGuard<'_> {
    /// Stops driving because nothing moves: the progression thread takes over at once.
    pub(crate) fn hand_back(self) {
        self.shared.drivers.fetch_sub(1, Ordering::SeqCst);
        self.shared.wake();
        core::mem::forget(self);
    }
}

impl Drop for DriverGuard<'_> {
    fn drop(&mut self) {
        // Stops driving, then reads `queued` and `posted`; `InboxTx::send` counts, then
        // reads `drivers`: one of the two sees the other.
        let last = self.shared.drivers.fetch_sub(1, Ordering::SeqCst) == 1;
        store_load_order();
        if last
            && (self.shared.queued.load(Ordering::SeqCst) != 0
                || self.shared.posted.load(Ordering::SeqCst))
        {
            // Inputs came in after the last drive: the progression thread takes over.
            self.shared.wake();
        }
    }
}

impl<T: Transport> Drive for Driver<T> {
    fn try_drive(&self) -> Driven {
        match sync::try_drive(&self.state) {
            Some(mut st) => self.drive(&mut st, false),
            None => Driven::Busy,
        }
    }

    fn try_drive_checked(&self) -> Driven {
        match sync::try_drive(&self.state) {
            Some(mut st) => self.checked_drive(&mut st),
            None => Driven::Busy,
        }
    }

    fn idle_drive(&self) {
        let shared = &*self.shared;
        if !(self.polling || shared.settled().is_none() || shared.more.load(Ordering::Relaxed)) {
            return;
        }
        for _ in 0..4 {
            let Some(mut st) = sync::try_drive(&self.state) else {
                // Its holder looks at `queued` after it lets go, like this one.
                return;
            };
            let driven = {
                // Set while this thread holds the lock, cleared before it lets go (even
                // if a callback panics): a sender that read it set, and did not wake
                // anyone, counted its input before this thread looks below.
                let _flag = CheckedFlag::raise(&shared.checked_holder);
                // In one process, a full drive: the message it takes completes a receive
                // whose task this worker then runs (one poll left it half done: 5.7 µs
                // a ring hop instead of 2.1). A polled transport gets one poll, as
                // before.
                let full = !self.polling;
                if full {
                    shared.more.store(false, Ordering::Relaxed);
                }
                self.drive(&mut st, full)
            };
            drop(st);
            store_load_order();
            if driven == Driven::Stopped || shared.settled().is_some() {
                return;
            }
        }
        if shared.drivers.load(Ordering::SeqCst) == 0 {
            shared.wake();
        }
    }

    fn enter(&self) -> DriverGuard<'_> {
        self.shared.drivers.fetch_add(1, Ordering::SeqCst);
        DriverGuard {
            shared: &self.shared,
        }
    }

    fn send_now(&self, args: SendArgs, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        let Some(mut st) = self.free_to_post() else {
            return Err(bytes);
        };
        let Some(p) = st.progress.as_mut() else {
            return Err(bytes);
        };
        p.send_now(args, bytes)?;
        st.moved = true;
        Ok(())
    }

    fn post(&self, command: Command) -> Result<(), Command> {
        if matches!(command, Command::Stop) {
            return Err(command);
        }
        let Some(mut st) = self.free_to_post() else {
            return Err(command);
        };
        let Some(p) = st.progress.as_mut() else {
            return Err(command);
        };
        // A thread that drives what it posts out itself looks at `queued` once it lets go
        // (`Driver::checked_rounds`): checked from here on, like `Driver::checked_drive`.
        let drive_here = sync::may_drive_here();
        let checked = drive_here.then(|| CheckedFlag::raise(&self.shared.checked_holder));
        p.command(command);
        if self.send_now {
            // Multiple-send: what the engine lets leave goes to the transport from this
            // thread. Only transmissions: completions and their callbacks stay for the
            // next drive, so a thread posting with locks of its own held runs no
            // callback.
            p.transmit();
        }
        st.moved = true;
        self.shared.posted.store(true, Ordering::SeqCst);
        if drive_here {
            // A thread that holds no lock of its own (a worker posting the sends and
            // receives its task's completion made ready) drives what it posted out
            // itself, completions and callbacks included: the progression thread is
            // woken only for what comes in meanwhile and this thread does not take
            // (`Driver::checked_rounds`).
            self.drive(&mut st, true);
            drop(checked);
            drop(st);
            store_load_order();
            self.checked_rounds();
            return Ok(());
        }
        drop(st);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if self.shared.drivers.load(Ordering::SeqCst) == 0 {
            self.shared.wake();
        }
        Ok(())
    }
}

impl<T: Transport> Driver<T> {
    /// The progression lock, for a thread that posts to the engine itself: when nothing
    /// waits in the inbox (which keeps the commands' order, so nothing posted now may go
    /// before it), the lock is free — held by another thread, or by this one (a
    /// completion posting the next request), the inbox takes the input — and the rank
    /// has not stopped.
    fn free_to_post(&self) -> Option<sync::DriveGuard<'_, State<T>>> {
        if self.shared.queued.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let st = sync::try_drive(&self.state)?;
        if st.stopping || self.shared.queued.load(Ordering::SeqCst) != 0 {
            return None;
        }
        Some(st)
    }

    /// A full drive by a thread that looks at `queued` once it lets go of the lock (a
    /// worker that posted what its task made ready, a peer driving this rank, the
    /// progression thread; an idle worker raises the flag itself, around a drive that may
    /// be a single poll): `checked_holder` is raised meanwhile, so that a sender that finds the lock held by it leaves its input
    /// to it rather than wake the progression thread (`InboxTx::send`; in the ring, a
    /// wake-up in one hop of seven, and with it the progression thread on a core a
    /// polling worker needed). Lowered before the lock is let go.
    fn checked_drive(&self, st: &mut State<T>) -> Driven {
        let _flag = CheckedFlag::raise(&self.shared.checked_holder);
        self.drive(st, true)
    }

    /// After a [`Driver::checked_drive`], the lock let go and `store_load_order` passed:
    /// takes what came in meanwhile, a few rounds; what is still there after them, with
    /// nobody else driving, is the progression thread's, woken for it. A lock held by
    /// another thread is that thread's to look at once it lets go.
    fn checked_rounds(&self) {
        let shared = &*self.shared;
        for _ in 0..CHECKED_ROUNDS {
            if shared.settled().is_some() {
                return;
            }
            let Some(mut st) = sync::try_drive(&self.state) else {
                return;
            };
            let driven = self.checked_drive(&mut st);
            drop(st);
            store_load_order();
            if driven == Driven::Stopped {
                return;
            }
        }
        if shared.drivers.load(Ordering::SeqCst) == 0 && shared.settled().is_none() {
            shared.wake();
        }
    }

    /// Takes in everything queued, then drives the engine once: sends that became ready
    /// together leave in priority order. `full`: until neither the engine nor the
    /// transport has anything to do (the progression thread); otherwise with one poll of
    /// the transport (a waiting thread, which looks at what it waits for in between).
    fn drive(&self, st: &mut State<T>, full: bool) -> Driven {
        let State {
            progress,
            inbox,
            moved: stamp,
            stopping,
            ..
        } = st;
        if *stopping {
            return Driven::Stopped;
        }
        let Some(p) = progress.as_mut() else {
            return Driven::Stopped;
        };
        let mut taken = 0;
        let mut stop = false;
        // What was posted straight to the engine goes out with this drive (both change
        // the flag under the progression lock).
        if self.shared.posted.load(Ordering::Relaxed) {
            self.shared.posted.store(false, Ordering::SeqCst);
        }
        let mut moved = false;
        // A full drive also takes what came in while it pumped (a completion's hook posts
        // the next request through the inbox while this thread holds the lock), a few
        // rounds at most: what still comes in is the progression thread's (`queued`).
        let mut rounds = if full { 4 } else { 1 };
        let mut first = true;
        while rounds > 0 {
            rounds -= 1;
            let round = taken;
            while let Ok(input) = inbox.try_recv() {
                taken += 1;
                match input {
                    Input::Command(Command::Stop) => stop = true,
                    Input::Command(c) => p.command(c),
                    Input::Net(w) => p.transport.accept(w),
                }
            }
            if !first && taken == round {
                break;
            }
            first = false;
            moved |= if full {
                p.pump()
            } else {
                let more = p.pump_once();
                if more {
                    self.shared.more.store(true, Ordering::Relaxed);
                }
                more
            };
            if stop {
                break;
            }
        }
        let moved = moved || taken > 0;
        *stamp |= moved;
        let in_flight = !moved && self.polling && p.transport.busy();
        // The epoch moves before the inputs stop counting as queued: a witness
        // (`Shared::settled`) that finds them gone finds the epoch moved too. A drive that
        // took nothing and moved nothing changes neither (two locked writes saved on
        // each idle turn of a waiting thread's loop).
        if moved {
            self.shared.epoch.fetch_add(1, Ordering::SeqCst);
            if taken > 0 {
                self.shared.queued.fetch_sub(taken, Ordering::SeqCst);
            }
        }
        if stop {
            // The transport is dropped by the progression thread (see `run`).
            *stopping = true;
            self.shared.wake();
            return Driven::Stopped;
        }
        if moved {
            Driven::Progressed
        } else if in_flight {
            Driven::InFlight
        } else {
            Driven::Idle
        }
    }

    /// Whether the progression thread should poll again without sleeping: a polled
    /// transport (MPI) learns of arrivals and moves long messages only when polled, so
    /// while it is busy, or anything happened within `HOT`, it is polled continuously.
    fn hot(&self, st: &mut State<T>) -> bool {
        if core::mem::take(&mut st.moved) {
            st.last_active = std::time::Instant::now();
        }
        self.polling
            && (st.progress.as_ref().is_some_and(|p| p.transport.busy())
                || st.last_active.elapsed() < HOT)
    }
}

/// Makes the progression thread's state and hands out its driver; [`run`] then drives it.
pub(crate) fn start<T: Transport>(
    mut transport: T,
    inbox: InboxReceiver<Input<T::Wire>>,
    config: ProgressConfig,
    shared: Arc<Shared>,
) -> Arc<Driver<T>> {
    let rank = transport.rank();
    let size = transport.size();
    transport.set_envelope_tag(config.tags.envelope());
    // Room for the largest eager payload any rank may send, whatever this rank's own
    // limit: ranks need not agree on it.
    transport.set_envelope_limit(
        starling_core::envelope::HEADER_LEN + crate::RankConfig::MAX_EAGER_LIMIT as usize,
    );
    let eager_limit = config.eager_limit;
    let mut engine_config = Config::new(rank, size, config.tags);
    // The fast path (protocol §19) where the transport offers it, for messages it sends
    // whole: every rank of a job runs the same transport and configuration, so all agree.
    let fast_comms = transport.fast_comms();
    let fast_limit = (config.fast_limit as usize).min(transport.max_message()) as u32;
    if fast_limit > 0 && fast_comms > 0 {
        engine_config.tags = config.tags.with_fast();
        engine_config.fast_limit = fast_limit;
        engine_config.fast_comms = fast_comms;
    }
    engine_config.eager_limit = eager_limit;
    engine_config.priorities = config.priorities;
    engine_config.max_inflight_sends = config.max_inflight_sends;
    // The budget leaves slots of the slab free for discard buffers, which take a slot
    // outside it (`Table::Discards`): with the budget the whole slab, a receive too small
    // for its message would wait while the budget's requests fill the slab.
    let budget = config.tables.requests.min(REQUESTS - DRAIN_SLOTS);
    engine_config.request_limit = u32::try_from(budget).unwrap_or(u32::MAX);
    engine_config.key_limit = config.tables.match_keys.clamp(1, MATCH_KEYS) as u32;
    let mut engine = Box::new(RankEngine::new(engine_config));
    if config.stats {
        engine.stats_mut().enable();
    }
    let polling = transport.needs_polling();
    let progress = Progress {
        transport,
        engine,
        pending: IdMap::default(),
        early: IdMap::default(),
        early_device: IdMap::default(),
        admission: Some(Box::default()),
        marked: Vec::new(),
        strays: Vec::new(),
        barriers: HashMap::new(),
        next_barrier: 0,
        trace: config.trace,
        rank,
        start: std::time::Instant::now(),
        pool: Arc::clone(&shared.pool),
        recv_in_place_min: lend_min(config.in_place_min, eager_limit),
        timeline: CommTrace::new(config.timeline, rank, config.tags.envelope()),
        rank_shared: Arc::clone(&shared),
    };
    let _ = shared.thread.set(thread::current());
    Arc::new(Driver {
        state: sync::drive_lock(State {
            progress: Some(progress),
            inbox,
            last_active: std::time::Instant::now(),
            moved: false,
            stopping: false,
        }),
        shared,
        polling,
        driver_mode: config.driver,
        send_now: config.multiple_send,
    })
}

/// Runs the progression loop on the thread that called [`start`] until
/// [`Command::Stop`], then drops the transport on this thread.
pub(crate) fn run<T: Transport>(d: &Driver<T>) {
    // Driver mode: polls in a row that moved nothing.
    let mut idle_polls = 0u32;
    loop {
        if d.shared.drivers.load(Ordering::SeqCst) > 0 {
            // A waiting thread drives: stand back (it wakes this one when it leaves
            // inputs behind).
            park_timeout(Duration::from_millis(1));
            continue;
        }
        let mut st = sync::drive(&d.state);
        let driven = if st.stopping {
            Driven::Stopped
        } else {
            // Checked: this thread looks at `queued` once it lets go (below), so a sender
            // that finds the lock held by it need not wake it.
            d.checked_drive(&mut st)
        };
        if st.stopping {
            let progress = st.progress.take();
            drop(st);
            drop(progress);
            return;
        }
        let hot = d.hot(&mut st);
        drop(st);
        // (`InboxTx::send` counts its input, then reads the flag `checked_drive` lowered
        // before the lock was let go: one of the two sees the other)
        store_load_order();
        if let (Some(mode), Some(rt)) = (d.driver_mode, d.shared.runtime.get()) {
            // Driver mode: every `call_frequency` polls that moved nothing, and whenever
            // the transport is idle, run up to `task_frequency` tasks here.
            idle_polls = if driven == Driven::Progressed {
                0
            } else {
                idle_polls + 1
            };
            if idle_polls >= mode.call_frequency.max(1) || !hot {
                idle_polls = 0;
                let mut ran = false;
                for _ in 0..mode.task_frequency.max(1) {
                    if !rt.try_run_one() {
                        break;
                    }
                    ran = true;
                }
                if ran {
                    continue;
                }
            }
        }
        if hot {
            thread::yield_now();
        } else if d.shared.queued.load(Ordering::SeqCst) == 0 {
            // Idle: a polled transport is looked at every 50 µs; an input wakes the
            // thread at once.
            park_timeout(if d.polling {
                Duration::from_micros(50)
            } else {
                Duration::from_millis(100)
            });
        } else {
            // An input is counted and not yet taken (its sender is between counting and
            // queueing it): drive again at once.
            spin_wait();
        }
    }
}
