//! Model checks, under `loom`, of what a rank's threads hand each other outside the task
//! queue (whose models are in `task/tests.rs`) and the progression thread (whose models,
//! of its inbox, wake-up, caller-driven progress and quiescence witness, are in
//! `progress/models.rs`):
//!
//! * a point-to-point [`Request`](crate::Request) and its completion: the progression
//!   thread runs the request's `Done` while the application waits on it, tests it, or
//!   drops it (`context::request_pair`);
//! * a handle's storage (`data::Cell`): lazy allocation on first use by two tasks that
//!   read it at once, and `Cell::release` (a cache flush freeing a received copy) racing
//!   a read or a write. The runtime only releases from a write-mode hook, exclusive with
//!   every other access (`distributed::release_after_pending`), but the cell is sound
//!   without relying on it: the access sees the data as before the release, or finds it
//!   freed and allocates it again, zeroed. Both release models failed on the cell as it
//!   was (the data and its allocator under two locks: a read found the data freed between
//!   its allocation and its read lock).
//!
//! Each model fails on a wrong result and, through loom's deadlock detection, on a lost
//! wake-up. Run with `RUSTFLAGS="--cfg loom"
//! CARGO_TARGET_DIR=target/loom cargo test -p starling-std --release --lib loom`.

use loom::thread;
use starling_core::DataId;

use crate::api::context::request_pair;
use crate::error::{CommError, Noted};
use crate::io::progress::models::explore;
use crate::runtime::data::Cell;
use crate::runtime::interfaces::Variable;
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};

fn reports() -> Arc<Mutex<Vec<Noted>>> {
    Arc::new(Mutex::new(Vec::new()))
}

#[test]
fn loom_a_request_completed_on_another_thread_wakes_its_waiter() {
    loom::model(|| {
        let log = reports();
        let (req, done) = request_pair("send".into(), Arc::clone(&log), None, None);
        let progression = thread::spawn(move || done.call(Ok(())));
        assert_eq!(req.wait(), Ok(()));
        progression.join().expect("the progression thread");
        assert!(lock(&log).is_empty(), "a waited request is not reported");
    });
}

#[test]
fn loom_a_test_racing_the_completion_sees_nothing_or_the_outcome() {
    loom::model(|| {
        let log = reports();
        let (req, done) = request_pair("recv".into(), Arc::clone(&log), None, None);
        let failure = CommError::TagInUse {
            tag: starling_core::Tag(3),
        };
        let outcome = Err(failure.clone());
        let progression = thread::spawn(move || done.call(outcome));
        match req.test() {
            None => assert_eq!(req.wait(), Err(failure)),
            Some(got) => {
                assert_eq!(got, Err(failure.clone()));
                // A completed test counts as waited; testing again gives the same.
                assert_eq!(req.test(), Some(Err(failure)));
                drop(req);
            }
        }
        progression.join().expect("the progression thread");
        assert!(
            lock(&log).is_empty(),
            "a tested or waited request is not reported"
        );
    });
}

#[test]
fn loom_a_request_dropped_unwaited_is_reported_once() {
    loom::model(|| {
        let log = reports();
        let (req, done) = request_pair("send of d0".into(), Arc::clone(&log), None, None);
        let progression = thread::spawn(move || done.call(Ok(())));
        drop(req);
        progression.join().expect("the progression thread");
        assert!(
            matches!(lock(&log).as_slice(), [Noted::Unwaited(what)] if what == "send of d0"),
            "one unwaited request, named: {:?}",
            lock(&log)
        );
    });
}

#[test]
fn loom_two_readers_allocate_a_lazy_handle_once() {
    loom::model(|| {
        let allocations = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&allocations);
        let cell = Arc::new(Cell::lazy(DataId(0), move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Variable::new(9u64)
        }));
        let other = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.read().get())
        };
        assert_eq!(cell.read().get(), 9);
        assert_eq!(other.join().expect("the other reader"), 9);
        assert_eq!(allocations.load(Ordering::SeqCst), 1);
    });
}

/// A handle's storage freed (`Cell::release`, a cache flush) while a task reads it: the
/// read sees the value from before the release, or the zeroed re-allocation after it —
/// never freed data — and the cell is left allocated or released, never half of each.
#[test]
fn loom_a_read_racing_a_release_sees_the_value_or_its_zeroed_reallocation() {
    explore(None, || {
        let cell = Arc::new(Cell::new(DataId(0), Variable::new(5u64)));
        let releaser = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.release())
        };
        let seen = cell.read().get();
        assert!(
            releaser.join().expect("the releasing thread"),
            "a variable can be freed"
        );
        assert!(seen == 5 || seen == 0, "read {seen}");
        // The release came before this read: it finds the data freed or re-allocated zeroed.
        let again = cell.read().get();
        assert_eq!(again, 0, "read {seen} then {again}");
    });
}

/// A write racing a release: the write lands either before the release (and is freed with
/// the data: the next read sees the zeroed re-allocation) or after it (on the re-allocated
/// data, and is kept).
#[test]
fn loom_a_write_racing_a_release_is_freed_with_the_data_or_kept() {
    explore(None, || {
        let cell = Arc::new(Cell::new(DataId(0), Variable::new(5u64)));
        let releaser = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.release())
        };
        cell.write().set(7);
        assert!(
            releaser.join().expect("the releasing thread"),
            "a variable can be freed"
        );
        let after = cell.read().get();
        assert!(after == 7 || after == 0, "read {after}");
    });
}
