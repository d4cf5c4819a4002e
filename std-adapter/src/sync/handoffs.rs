//! Model checks, under `loom`, of what a rank's threads hand each other outside the task
//! queue (whose models are in `task/tests.rs`) and the progression thread (whose models,
//! of its inbox, wake-up, caller-driven progress and quiescence witness, are in
//! `progress/models.rs`):
//!
//! * a point-to-point [`Request`](crate::Request) and its completion: the progression
//!   thread runs the request's `Done` while the application waits on it, tests it, or
//!   drops it (`context::request_pair`);
//! * a handle's storage (`data::Cell`): lazy allocation on first use by two tasks that
//!   read it at once.
//!
//! Each model fails on a wrong result and, through loom's deadlock detection, on a lost
//! wake-up. Not modelled: `Cell::release` racing an access. It is not safe against one
//! (a read can find the data freed between its allocation check and its lock), and need
//! not be: the runtime runs it as a write-mode hook, exclusive with every other access
//! (`distributed::release_after_pending`). Run with `RUSTFLAGS="--cfg loom"
//! CARGO_TARGET_DIR=target/loom cargo test -p starling-std --release --lib loom`.

use loom::thread;
use starling_core::DataId;

use crate::context::request_pair;
use crate::data::Cell;
use crate::error::CommError;
use crate::interfaces::Variable;
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};

fn reports() -> Arc<Mutex<Vec<String>>> {
    Arc::new(Mutex::new(Vec::new()))
}

#[test]
fn loom_a_request_completed_on_another_thread_wakes_its_waiter() {
    loom::model(|| {
        let log = reports();
        let (req, done) = request_pair("send".into(), Arc::clone(&log), None, None);
        let progression = thread::spawn(move || done(Ok(())));
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
        let progression = thread::spawn(move || done(outcome));
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
        let progression = thread::spawn(move || done(Ok(())));
        drop(req);
        progression.join().expect("the progression thread");
        assert_eq!(
            lock(&log).as_slice(),
            ["request never waited on: send of d0"]
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
