//! Every lock, condition variable, atomic and shared pointer of the runtime, the
//! progression thread's inbox and its park, come from here, so that `loom` can replace
//! them under `cfg(loom)` and model-check the queues and hand-offs
//! (`docs/verification.md`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
/// `loom`'s `Arc` cannot hold unsized values (`Arc<str>`, `Arc<dyn Fn()>`): the runtime
/// keeps `std`'s under `loom` too. Its count is not what the models check; the locks it
/// shares are.
#[cfg(loom)]
pub(crate) use std::sync::Arc;

/// Threads the runtime spawns (its workers), so that `loom` schedules them.
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The progression thread's inbox (`progress::InboxTx`, `rank::Inbox`): an unbounded
/// multi-producer queue that the thread drains with `try_recv`, parking in between
/// (`sync/inbox.rs`: it allocates nothing once grown). Built on this module's lock, so
/// that `loom` schedules its every send and take in the progression thread's models (its
/// empty-poll flag is not read under `loom`: `InboxReceiver::looks_empty`).
pub(crate) use inbox::{InboxReceiver, InboxSender, inbox};

/// Parks the calling thread until another unparks it ([`thread::Thread::unpark`]) or
/// `timeout` passes.
#[cfg(not(loom))]
pub(crate) fn park_timeout(timeout: core::time::Duration) {
    thread::park_timeout(timeout);
}
/// Under `loom`, parks without a timeout: the models require every wake-up to come from
/// an unpark, so that a lost one is a deadlock that `loom` reports rather than a delay.
#[cfg(loom)]
pub(crate) fn park_timeout(_timeout: core::time::Duration) {
    thread::park();
}

/// Between a `SeqCst` write and a `SeqCst` read of another atomic whose order the code
/// relies on (a store-buffering pair: each of two threads writes one flag, then reads the
/// other's). Nothing outside `loom`: `SeqCst` accesses already take part in one total
/// order, so at least one thread sees the other's write. `loom` models `SeqCst` accesses
/// as `AcqRel` (its README, "Unsupported features") and would report the pair as a
/// false alarm; under it this is a `SeqCst` fence, which it does model and which restores
/// that order.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn store_load_order() {}
/// Under `loom`, a `SeqCst` fence (see the `std` version).
#[cfg(loom)]
pub(crate) fn store_load_order() {
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// How long a thread that expects work polls for it before it sleeps ([`spin_until`]).
/// A wake-up through the kernel costs 3 – 10 µs on a shared core (futex, then the
/// scheduler), more than a ring hop's whole work; a poll this long catches the work that
/// a thread on the other core is about to hand over, and bounds what an idle thread
/// burns before it sleeps.
#[cfg(not(loom))]
pub(crate) const SPIN: core::time::Duration = core::time::Duration::from_micros(30);

/// Polls `ready` until it holds or [`SPIN`] passes; whether it holds. Between polls the
/// thread hints the processor that it spins, and every `polls_per_yield` polls yields its
/// core, so that on an oversubscribed machine the thread it waits for can run on it.
#[cfg(not(loom))]
pub(crate) fn spin_until(polls_per_yield: u32, mut ready: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    let mut polls = 0u32;
    loop {
        if ready() {
            return true;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(polls_per_yield.max(1)) {
            if start.elapsed() >= SPIN {
                return false;
            }
            thread::yield_now();
        } else {
            for _ in 0..32 {
                core::hint::spin_loop();
            }
        }
    }
}
/// Under `loom`, one poll after a yield: the models explore the path through the poll
/// (the lock released and taken again) without a clock.
#[cfg(loom)]
pub(crate) fn spin_until(_polls_per_yield: u32, mut ready: impl FnMut() -> bool) -> bool {
    thread::yield_now();
    ready()
}

#[cfg(not(loom))]
thread_local! {
    /// Whether this thread may drive the progress of the rank it hands a message to
    /// ([`with_peer_drive`]).
    static PEER_DRIVE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}
#[cfg(loom)]
loom::thread_local! {
    /// Under `loom`, set only by a model ([`model_peer_drive`]).
    static PEER_DRIVE: core::cell::Cell<bool> = core::cell::Cell::new(false);
}

/// Runs `f` with permission to drive, on this thread, the progress of a rank of this
/// process that it hands a message to (the in-process transport), rather than wake that
/// rank's progression thread. Given where the thread holds no lock of its own but its
/// rank's progression lock (a worker completing a task, its hooks posting the sends that
/// follow): the receiving rank's completions, callbacks included, then run on it.
#[cfg(not(loom))]
pub(crate) fn with_peer_drive<R>(f: impl FnOnce() -> R) -> R {
    grant_peer_drive(f)
}
/// Under `loom`, `f` alone: the peers' progression threads take every message (the
/// models of the whole runtime check their hand-offs); a model of peer driving itself
/// grants the permission with [`model_peer_drive`].
#[cfg(loom)]
pub(crate) fn with_peer_drive<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Under `loom`, [`with_peer_drive`] as it is without `loom`: for the models of peer
/// driving (`io::progress::models`).
#[cfg(all(loom, test))]
pub(crate) fn model_peer_drive<R>(f: impl FnOnce() -> R) -> R {
    grant_peer_drive(f)
}

/// Runs `f` with the permission of [`with_peer_drive`].
#[cfg(any(not(loom), test))]
fn grant_peer_drive<R>(f: impl FnOnce() -> R) -> R {
    let before = PEER_DRIVE.with(|p| p.replace(true));
    let r = f();
    PEER_DRIVE.with(|p| p.set(before));
    r
}

/// Whether this thread may drive progress where it posts ([`with_peer_drive`]).
pub(crate) fn may_drive_here() -> bool {
    PEER_DRIVE.with(core::cell::Cell::get)
}

/// Runs `f` if this thread may drive a peer's progress ([`with_peer_drive`]), with that
/// permission withdrawn meanwhile (a peer driven here hands on its messages the usual
/// way): `None` without the permission.
pub(crate) fn as_peer_driver<R>(f: impl FnOnce() -> R) -> Option<R> {
    if !PEER_DRIVE.with(|p| p.replace(false)) {
        return None;
    }
    let r = f();
    PEER_DRIVE.with(|p| p.set(true));
    Some(r)
}

/// Sleeps for `d` (a grace period that a cluster's shutdown waits out).
#[cfg(not(loom))]
pub(crate) fn sleep(d: core::time::Duration) {
    thread::sleep(d);
}
/// Under `loom`, nothing: what sleeps must not rely on other threads running meanwhile
/// (a thread preempted on a loaded machine can stay off its core for longer than any
/// grace period), so the models explore every interleaving, those where no other thread
/// runs during the sleep included.
#[cfg(loom)]
pub(crate) fn sleep(_d: core::time::Duration) {}

/// Called by a thread that loops on a condition another thread will change, without
/// blocking: nothing outside `loom`; under `loom` a yield, so that the models schedule the
/// other thread rather than explore the loop.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn spin_wait() {}
/// Under `loom`, a yield (see the `std` version).
#[cfg(loom)]
pub(crate) fn spin_wait() {
    thread::yield_now();
}
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A lock that threads on different cores take several times per task or message (the
/// task runtime's state, a rank's progress, the progression thread's inbox), and its
/// condition variables. Outside `loom` they are `parking_lot`'s: its lock spins with
/// backoff (yielding the core) before it parks, where `std`'s parks in the kernel after a
/// short spin. With a submitter and a worker taking the task state's lock three times per
/// empty task, `std`'s contended path took 38 % of the samples, and an empty task cost
/// 1.7 times what it costs with this one (`docs/performance.md`, "The state lock that
/// spins").
#[cfg(not(loom))]
pub(crate) type HotLock<T> = parking_lot::Mutex<T>;
/// A held [`HotLock`].
#[cfg(not(loom))]
pub(crate) type HotGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
/// A condition variable of a [`HotLock`].
#[cfg(not(loom))]
pub(crate) type HotCondvar = parking_lot::Condvar;
/// Takes `m`.
#[cfg(not(loom))]
pub(crate) fn lock_hot<T>(m: &HotLock<T>) -> HotGuard<'_, T> {
    m.lock()
}
/// Waits on `cv`, letting `g` go meanwhile.
#[cfg(not(loom))]
pub(crate) fn wait_hot<'a, T>(cv: &HotCondvar, mut g: HotGuard<'a, T>) -> HotGuard<'a, T> {
    cv.wait(&mut g);
    g
}
/// Waits on `cv` for at most `d`, letting `g` go meanwhile.
#[cfg(not(loom))]
pub(crate) fn wait_hot_for<'a, T>(
    cv: &HotCondvar,
    mut g: HotGuard<'a, T>,
    d: core::time::Duration,
) -> HotGuard<'a, T> {
    cv.wait_for(&mut g, d);
    g
}
/// Under `loom`, its lock.
#[cfg(loom)]
pub(crate) type HotLock<T> = Mutex<T>;
/// Under `loom`, its guard.
#[cfg(loom)]
pub(crate) type HotGuard<'a, T> = MutexGuard<'a, T>;
/// Under `loom`, its condition variable.
#[cfg(loom)]
pub(crate) type HotCondvar = Condvar;
/// Under `loom`, [`lock`].
#[cfg(loom)]
pub(crate) fn lock_hot<T>(m: &HotLock<T>) -> HotGuard<'_, T> {
    lock(m)
}
/// Under `loom`, `Condvar::wait`.
#[cfg(loom)]
pub(crate) fn wait_hot<'a, T>(cv: &HotCondvar, g: HotGuard<'a, T>) -> HotGuard<'a, T> {
    cv.wait(g)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
/// Under `loom`, `Condvar::wait_timeout`.
#[cfg(loom)]
pub(crate) fn wait_hot_for<'a, T>(
    cv: &HotCondvar,
    g: HotGuard<'a, T>,
    d: core::time::Duration,
) -> HotGuard<'a, T> {
    cv.wait_timeout(g, d)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .0
}

/// The lock around a handle's data. Outside `loom` it is `parking_lot`'s, whose owned
/// guards ([`try_read_owned`], [`try_write_owned`]) may travel to another thread: a
/// transfer holds one for as long as MPI reads or writes the data in place.
#[cfg(not(loom))]
pub(crate) type DataLock<T> = Arc<parking_lot::RwLock<T>>;
/// Shared access to a handle's data.
#[cfg(not(loom))]
pub(crate) type DataReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
/// Exclusive access to a handle's data.
#[cfg(not(loom))]
pub(crate) type DataWriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;
/// Shared access to a handle's data that owns its lock (and may change threads).
#[cfg(not(loom))]
pub(crate) type OwnedReadGuard<T> = parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, T>;
/// Exclusive access to a handle's data that owns its lock (and may change threads).
#[cfg(not(loom))]
pub(crate) type OwnedWriteGuard<T> = parking_lot::ArcRwLockWriteGuard<parking_lot::RawRwLock, T>;

/// A new data lock.
#[cfg(not(loom))]
pub(crate) fn data_lock<T>(value: T) -> DataLock<T> {
    Arc::new(parking_lot::RwLock::new(value))
}
/// Locks `l` for reading.
#[cfg(not(loom))]
pub(crate) fn data_read<T>(l: &DataLock<T>) -> DataReadGuard<'_, T> {
    l.read()
}
/// Locks `l` for writing.
#[cfg(not(loom))]
pub(crate) fn data_write<T>(l: &DataLock<T>) -> DataWriteGuard<'_, T> {
    l.write()
}
/// Locks `l` for reading with an owned guard, unless a writer holds it.
#[cfg(not(loom))]
pub(crate) fn try_read_owned<T>(l: &DataLock<T>) -> Option<OwnedReadGuard<T>> {
    l.try_read_arc()
}
/// Locks `l` for writing with an owned guard, unless anyone holds it.
#[cfg(not(loom))]
pub(crate) fn try_write_owned<T>(l: &DataLock<T>) -> Option<OwnedWriteGuard<T>> {
    l.try_write_arc()
}

/// Under `loom`, the data lock is `loom`'s (and transfers never lend the data in place).
#[cfg(loom)]
pub(crate) type DataLock<T> = RwLock<T>;
/// Shared access to a handle's data.
#[cfg(loom)]
pub(crate) type DataReadGuard<'a, T> = RwLockReadGuard<'a, T>;
/// Exclusive access to a handle's data.
#[cfg(loom)]
pub(crate) type DataWriteGuard<'a, T> = RwLockWriteGuard<'a, T>;
/// A new data lock.
#[cfg(loom)]
pub(crate) fn data_lock<T>(value: T) -> DataLock<T> {
    RwLock::new(value)
}
/// Locks `l` for reading.
#[cfg(loom)]
pub(crate) fn data_read<T>(l: &DataLock<T>) -> DataReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}
/// Locks `l` for writing.
#[cfg(loom)]
pub(crate) fn data_write<T>(l: &DataLock<T>) -> DataWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lock around a rank's progress (`progress::Driver`): the progression thread takes
/// it, a waiting thread tries it. Outside `loom`, a [`HotLock`].
#[cfg(not(loom))]
pub(crate) type DriveLock<T> = HotLock<T>;
/// A held [`DriveLock`].
#[cfg(not(loom))]
pub(crate) type DriveGuard<'a, T> = HotGuard<'a, T>;
/// A new drive lock.
#[cfg(not(loom))]
pub(crate) fn drive_lock<T>(value: T) -> DriveLock<T> {
    HotLock::new(value)
}
/// Takes `l`, waiting for it.
#[cfg(not(loom))]
pub(crate) fn drive<T>(l: &DriveLock<T>) -> DriveGuard<'_, T> {
    lock_hot(l)
}
/// Takes `l` unless another thread holds it.
#[cfg(not(loom))]
pub(crate) fn try_drive<T>(l: &DriveLock<T>) -> Option<DriveGuard<'_, T>> {
    l.try_lock()
}

/// Under `loom`, a drive lock is a flag taken by compare-and-swap around `loom`'s mutex:
/// `loom`'s own `Mutex::try_lock` wrongly blocks the threads waiting in `lock`
/// (tokio-rs/loom#376). Taking it waits by yielding until the flag is free; the mutex
/// inside is then never contended, and gives the data the mutex's happens-before.
#[cfg(loom)]
pub(crate) struct DriveLock<T> {
    held: AtomicBool,
    inner: Mutex<T>,
}
/// A held [`DriveLock`]: frees the flag after the mutex when dropped.
#[cfg(loom)]
pub(crate) struct DriveGuard<'a, T> {
    guard: Option<MutexGuard<'a, T>>,
    held: &'a AtomicBool,
}
#[cfg(loom)]
impl<T> core::ops::Deref for DriveGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard.as_ref().expect("held until dropped")
    }
}
#[cfg(loom)]
impl<T> core::ops::DerefMut for DriveGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_mut().expect("held until dropped")
    }
}
#[cfg(loom)]
impl<T> Drop for DriveGuard<'_, T> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.held.store(false, Ordering::SeqCst);
    }
}
/// A new drive lock.
#[cfg(loom)]
pub(crate) fn drive_lock<T>(value: T) -> DriveLock<T> {
    DriveLock {
        held: AtomicBool::new(false),
        inner: Mutex::new(value),
    }
}
/// Takes `l`, waiting for it.
#[cfg(loom)]
pub(crate) fn drive<T>(l: &DriveLock<T>) -> DriveGuard<'_, T> {
    loop {
        if let Some(g) = try_drive(l) {
            return g;
        }
        thread::yield_now();
    }
}
/// Takes `l` unless another thread holds it.
#[cfg(loom)]
pub(crate) fn try_drive<T>(l: &DriveLock<T>) -> Option<DriveGuard<'_, T>> {
    l.held
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .ok()?;
    Some(DriveGuard {
        guard: Some(lock(&l.inner)),
        held: &l.held,
    })
}

/// Locks `m`, recovering the data if a panicking thread poisoned it: the runtime's
/// invariants are kept by whole critical sections, and a task's panic is reported on its
/// own (it must not wedge every other thread).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

mod inbox;

#[cfg(all(test, loom))]
mod handoffs;
