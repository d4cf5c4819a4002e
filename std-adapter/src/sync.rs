//! Every lock, condition variable, atomic and shared pointer of the runtime comes from
//! here, so that `loom` can replace them under `cfg(loom)` and model-check the queues.

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
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Locks `m`, recovering the data if a panicking thread poisoned it: the runtime's
/// invariants are kept by whole critical sections, and a task's panic is reported on its
/// own (it must not wedge every other thread).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(all(test, loom))]
mod handoffs;
