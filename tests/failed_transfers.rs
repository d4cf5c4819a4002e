//! No task runs on data whose transfer failed (`DESIGN.md`, rule 3; issue 17, item 1).
//!
//! Each test plants a failed transfer in the in-process cluster — a datum that one rank
//! registers with another shape than its owner (a rank-local registration bug), so that
//! the receive of its value fails with a size mismatch and leaves the old, stale value in
//! the handle — and checks that what depends on it does not run, that nothing stale
//! leaves the rank, and that the application gets a typed error naming the datum, the
//! peer and the cause: from `mpi_wait_for_all`, `try_wait_for_all`, the next insert and
//! shutdown. Never a stale result with `Ok`.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::Arc;

use starling::core::{AccessMode, DataId, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{
    AnyHandle, ClusterConfig, Codelet, CommError, Context, DataError, Handle, InsertError,
    Leftover, RuntimeConfig, ShutdownError, TransferDirection, TransferError, run_local_with,
};

fn config(watchdog: Option<Duration>) -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 2,
            ..RuntimeConfig::default()
        },
        watchdog,
        ..ClusterConfig::default()
    }
}

/// `x`, owned by rank 0 with 4 values, which rank 1 registers with 8 (stale ones: -1):
/// every receive of it on rank 1 fails.
fn mismatched(ctx: &Context, tag: i64) -> Handle<Vector<i64>> {
    let h = if ctx.rank() == Rank(0) {
        ctx.register(Vector::from_vec(vec![1_i64, 2, 3, 4]))
    } else {
        ctx.register(Vector::from_vec(vec![-1_i64; 8]))
    };
    ctx.mpi_register(&h, Tag(tag), Owner::Rank(Rank(0)))
        .unwrap();
    h
}

fn var(ctx: &Context, tag: i64, owner: u32, value: i64) -> Handle<Variable<i64>> {
    ctx.register_owned(Tag(tag), Owner::Rank(Rank(owner)), move || {
        Variable::new(value)
    })
    .unwrap()
}

fn value(ctx: &Context, h: &Handle<Variable<i64>>) -> i64 {
    ctx.acquire(h, AccessMode::R).get().get()
}

fn sum() -> Codelet {
    Codelet::new("sum", |b| {
        let s: i64 = b.r::<Vector<i64>>(1).as_slice().iter().sum();
        b.w::<Variable<i64>>(0).set(s);
    })
}

fn double() -> Codelet {
    Codelet::new("double", |b| {
        let v = b.r::<Variable<i64>>(1).get();
        b.w::<Variable<i64>>(0).set(2 * v);
    })
}

/// The error a failed receive of `data` from rank 0 into a handle of 8 values gets.
fn size_mismatch(data: DataId, tag: i64) -> TransferError {
    TransferError {
        data,
        peer: Rank(0),
        tag: Tag(tag),
        direction: TransferDirection::Recv,
        cause: CommError::Data(DataError::SizeMismatch {
            expected: 64,
            got: 32,
        }),
    }
}

#[test]
fn a_task_whose_input_transfer_failed_does_not_run_nor_do_the_tasks_after_it() {
    let ran = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&ran);
    let out = run_local_with(2, config(None), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = var(ctx, 2, 1, 0);
        let z = var(ctx, 3, 1, 7);
        // Runs on rank 1 (it writes y): x travels from rank 0 and its receive fails.
        let seen = Arc::clone(&seen);
        ctx.insert(&sum())
            .w(&y)
            .r(&x)
            .callback(move || seen.store(true, Ordering::SeqCst))
            .submit()
            .unwrap();
        // On rank 1 too, after it on y: it must not run either. (The insert itself may
        // already report the failure if the receive failed before it: then it plans
        // nothing, which is the same here.)
        let _ = ctx.insert(&double()).w(&z).r(&y).submit();
        let _ = ctx.mpi_wait_for_all();
    });
    // Shutdown reports the failure too, typed, with its rank.
    let err: ShutdownError = out.expect_err("shutdown reports the failed transfer");
    assert!(
        !ran.load(Ordering::SeqCst),
        "the callback of a task that did not run ran"
    );
    assert_eq!(err.failures.len(), 1, "{err}");
    let (rank, failure) = &err.failures[0];
    assert_eq!(*rank, Rank(1));
    assert_eq!(failure.peer, Rank(0));
    assert_eq!(failure.tag, Tag(1));
    assert_eq!(failure.direction, TransferDirection::Recv);
    assert!(
        err.leftovers.iter().any(|l| matches!(
            l,
            Leftover::TransferFailed { rank: Rank(1), error } if error == failure
        )),
        "{err}"
    );
    assert!(
        err.leftovers.iter().any(|l| {
            let l = l.to_string();
            l.contains("rank 1: transfer failed") && l.contains("from rank 0")
        }),
        "{err}"
    );
    assert!(
        err.leftovers.iter().any(|l| matches!(
            l,
            Leftover::TasksSkipped {
                rank: Rank(1),
                count: 1..
            }
        )),
        "{err}"
    );
    assert!(
        err.leftovers.iter().any(|l| {
            let l = l.to_string();
            l.contains("rank 1: ") && l.contains("task(s) did not run")
        }),
        "{err}"
    );
}

/// What the failing rank's calls return, and the values its tasks left.
#[test]
fn no_stale_result_comes_back_with_ok() {
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(None), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = var(ctx, 2, 1, 0);
        let z = var(ctx, 3, 1, 7);
        ctx.insert(&sum()).w(&y).r(&x).submit().unwrap();
        let second = ctx.insert(&double()).w(&z).r(&y).submit();
        let waited = ctx.mpi_wait_for_all();
        let again = ctx.try_wait_for_all();
        let later = ctx.insert(&double()).w(&z).r(&y).submit();
        if ctx.rank() == Rank(1) {
            let values = (value(ctx, &y), value(ctx, &z));
            sink.lock()
                .unwrap()
                .push((x.id(), second.err(), waited, again, later, values));
        } else {
            // The owner sent its value: nothing failed there.
            assert_eq!(waited, Ok(()));
            assert_eq!(again, Ok(()));
        }
    });
    let results = results.lock().unwrap();
    let (x, second, waited, again, later, values) = &results[0];
    let expected = size_mismatch(*x, 1);
    // The tasks never ran on the stale copy of x (which would give y = -8, z = -16).
    assert_eq!(*values, (0, 7), "a task ran on data whose transfer failed");
    assert_eq!(
        *waited,
        Err(InsertError::Transfer(Box::new(expected.clone())))
    );
    assert_eq!(*again, Err(expected.clone()));
    assert!(
        matches!(later, Err(InsertError::Transfer(e)) if **e == expected),
        "{later:?}"
    );
    if let Some(e) = second {
        assert_eq!(*e, InsertError::Transfer(Box::new(expected)));
    }
    let text = format!("{}", waited.as_ref().unwrap_err());
    assert!(
        text.contains("receive of data") && text.contains("from rank 0") && text.contains("64"),
        "{text}"
    );
}

/// A value that depends on a failed transfer never leaves its rank: the peer that reads
/// it gets a typed error (here: its receive is given up by the watchdog), never the stale
/// value.
#[test]
fn a_value_depending_on_a_failed_transfer_is_not_sent_to_a_peer() {
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(Some(Duration::from_millis(500))), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = var(ctx, 2, 1, 0);
        let w = var(ctx, 3, 0, 5);
        ctx.insert(&sum()).w(&y).r(&x).submit().unwrap();
        // Runs on rank 0 (it writes w): y travels from rank 1, where it is poisoned.
        let _ = ctx.insert(&double()).w(&w).r(&y).submit();
        let waited = ctx.mpi_wait_for_all();
        if ctx.rank() == Rank(0) {
            sink.lock().unwrap().push((waited, value(ctx, &w)));
        }
    });
    let results = results.lock().unwrap();
    let (waited, w) = &results[0];
    assert_eq!(
        *w, 5,
        "rank 0 ran a task on a value computed from a failed transfer"
    );
    match waited {
        Err(InsertError::Transfer(e)) => {
            assert_eq!(e.peer, Rank(1));
            assert_eq!(e.direction, TransferDirection::Recv);
            assert!(matches!(e.cause, CommError::Stalled { .. }), "{e}");
        }
        other => panic!("rank 0 must get the failed transfer, got {other:?}"),
    }
}

/// A gather whose receive fails: the root's callback does not announce data that did not
/// arrive, and the wait names the failure.
#[test]
fn a_collective_with_a_failed_receive_does_not_run_its_callback() {
    let called = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&called);
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(None), move |ctx| {
        // Owned by rank 1 with 4 values; rank 0, the root, registers it with 8.
        let h = if ctx.rank() == Rank(1) {
            ctx.register(Vector::from_vec(vec![1_i64, 2, 3, 4]))
        } else {
            ctx.register(Vector::from_vec(vec![-1_i64; 8]))
        };
        ctx.mpi_register(&h, Tag(9), Owner::Rank(Rank(1))).unwrap();
        let seen = Arc::clone(&seen);
        ctx.gather_detached(
            &[AnyHandle::from(&h)],
            Rank(0),
            move || seen.store(true, Ordering::SeqCst),
            || {},
        )
        .unwrap();
        let waited = ctx.try_wait_for_all();
        if ctx.rank() == Rank(0) {
            sink.lock().unwrap().push((h.id(), waited));
        }
    });
    assert!(!called.load(Ordering::SeqCst), "the root callback ran");
    let results = results.lock().unwrap();
    let (id, waited) = &results[0];
    let e = waited
        .as_ref()
        .expect_err("the root's wait reports the failure");
    assert_eq!(e.data, *id);
    assert_eq!(e.peer, Rank(1));
    assert_eq!(e.tag, Tag(9));
}

/// A migration whose transfer fails: the new owner does not run tasks on its stale copy.
#[test]
fn a_failed_migration_leaves_no_task_running_on_the_stale_copy() {
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(None), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = var(ctx, 2, 1, 0);
        let _ = ctx.migrate(&x, Rank(1));
        // x is rank 1's now: the task runs there, on the copy whose transfer failed.
        let _ = ctx.insert(&sum()).w(&y).r(&x).submit();
        let waited = ctx.mpi_wait_for_all();
        if ctx.rank() == Rank(1) {
            sink.lock().unwrap().push((x.id(), waited, value(ctx, &y)));
        }
    });
    let results = results.lock().unwrap();
    let (x, waited, y) = &results[0];
    assert_eq!(*y, 0, "a task ran on the stale copy of a migrated datum");
    assert_eq!(
        *waited,
        Err(InsertError::Transfer(Box::new(size_mismatch(*x, 1))))
    );
}

/// `get_data_on_node` returns the failure instead of handing over a stale copy.
#[test]
fn get_data_on_node_reports_the_failed_transfer() {
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(None), move |ctx| {
        let x = mismatched(ctx, 1);
        let got = ctx.get_data_on_node(&x, Rank(1));
        sink.lock().unwrap().push((ctx.rank(), x.id(), got));
    });
    let results = results.lock().unwrap();
    for (rank, x, got) in results.iter() {
        if *rank == Rank(1) {
            assert_eq!(
                *got,
                Err(InsertError::Transfer(Box::new(size_mismatch(*x, 1))))
            );
        } else {
            assert_eq!(*got, Ok(()));
        }
    }
}

/// A reduction whose contribution does not arrive: the owner's value is not combined
/// from what is left, and the wait names the reduced datum.
#[test]
fn a_reduction_with_a_failed_contribution_reports_the_datum_and_leaves_no_wrong_value() {
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&results);
    let _ = run_local_with(2, config(None), move |ctx| {
        // The accumulator: 4 values on its owner, rank 0; rank 1 registers 8.
        let n = if ctx.rank() == Rank(0) { 4 } else { 8 };
        let acc = ctx.register(Vector::from_vec(vec![1_i64; n]));
        ctx.mpi_register(&acc, Tag(7), Owner::Rank(Rank(0)))
            .unwrap();
        let out = var(ctx, 8, 0, -1);
        let init = Codelet::new("zero", |b| {
            for v in b.w::<Vector<i64>>(0).as_mut_slice() {
                *v = 0;
            }
        });
        let combine = Codelet::new("combine", |b| {
            let add: Vec<i64> = b.r::<Vector<i64>>(1).as_slice().to_vec();
            let mut acc = b.w::<Vector<i64>>(0);
            for (a, v) in acc.as_mut_slice().iter_mut().zip(add) {
                *a += v;
            }
        });
        let bump = Codelet::new("bump", |b| {
            for v in b.w::<Vector<i64>>(0).as_mut_slice() {
                *v += 5;
            }
        });
        ctx.set_reduction_methods(&acc, &combine, &init);
        for r in 0..2 {
            ctx.insert(&bump)
                .redux(&acc)
                .on_node(Rank(r))
                .submit()
                .unwrap();
        }
        // Reading the accumulator wraps the reduction up, then sums it.
        let _ = ctx.insert(&sum()).w(&out).r(&acc).submit();
        let waited = ctx.mpi_wait_for_all();
        if ctx.rank() == Rank(0) {
            sink.lock()
                .unwrap()
                .push((acc.id(), waited, value(ctx, &out)));
        }
    });
    let results = results.lock().unwrap();
    let (acc, waited, out) = &results[0];
    assert_eq!(*out, -1, "a task read a reduction missing a contribution");
    match waited {
        Err(InsertError::Transfer(e)) => {
            assert_eq!(e.data, *acc, "the failure names the reduced datum");
            assert_eq!(e.peer, Rank(1));
            assert_eq!(e.direction, TransferDirection::Recv);
        }
        other => panic!("the owner must get the failed contribution, got {other:?}"),
    }
}

/// A task skipped because its input's transfer failed still unlocks its tag: `tag_wait`
/// returns (the failure is reported by the waits and at shutdown) instead of hanging.
#[test]
fn the_tag_of_a_task_skipped_for_a_failed_transfer_is_unlocked() {
    let out = run_local_with(2, config(Some(Duration::from_secs(20))), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = var(ctx, 2, 1, 0);
        let z = var(ctx, 3, 1, 7);
        ctx.insert(&sum()).w(&y).r(&x).submit().unwrap();
        if ctx.rank() == Rank(1) {
            // A local task after the failed one on y: skipped, its tag unlocked.
            ctx.task(&double())
                .w(&z)
                .r(&y)
                .tag(starling::TaskTag(77))
                .submit();
            ctx.tag_wait(&[starling::TaskTag(77)]);
            assert_eq!(value(ctx, &z), 7, "the skipped task did not run");
        }
        let _ = ctx.mpi_wait_for_all();
    });
    let err = out.expect_err("shutdown reports the failed transfer");
    assert_eq!(err.failures.len(), 1, "{err}");
}
