//! Everyday habits of StarPU-MPI code that Starling's facade supports directly (issue 22,
//! items 3–7): waiting for one task, statistics switched around a region, registration
//! with automatic tags, typed shutdown leftovers, and the smaller conveniences (request
//! arrays, callback-free transfers, closure policies, `on_node` with no node, `launch`'s
//! shape). Only the facade's public items are used.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, mpsc};

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{
    ClusterConfig, Codelet, CommError, Context, Handle, RuntimeConfig, TaskError,
    TransferDirection, run_local, run_local_with,
};

fn workers(n: usize) -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: n,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

fn value(ctx: &Context, h: &Handle<Variable<i64>>) -> i64 {
    ctx.acquire(h, AccessMode::R).get().get()
}

// ---- Item 3: waiting for one task (`starpu_task_wait`) ----

/// A task that blocks until told to go (or 20 s pass: then it records the timeout).
fn gate(go: mpsc::Receiver<()>, timed_out: Arc<AtomicBool>) -> Codelet {
    let go = std::sync::Mutex::new(go);
    Codelet::new("gate", move |_| {
        let rx = go.lock().unwrap();
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            timed_out.store(true, Ordering::SeqCst);
        }
    })
}

#[test]
fn a_task_handle_waits_for_its_task_and_not_for_the_others() {
    let out = run_local_with(1, workers(2), |ctx| {
        let (tx, rx) = mpsc::channel();
        let timed_out = Arc::new(AtomicBool::new(false));
        let blocked = ctx.register(Variable::new(0_i64));
        let free = ctx.register(Variable::new(0_i64));
        // Holds `blocked` until released below.
        let gate = ctx
            .task(&gate(rx, Arc::clone(&timed_out)))
            .rw(&blocked)
            .submit();
        // After the gate on `blocked`: cannot complete while the gate holds.
        let after_gate = ctx
            .task(&Codelet::new("after", |b| b.w::<Variable<i64>>(0).set(5)))
            .w(&blocked)
            .submit();
        let set = Codelet::new("set", |b| b.w::<Variable<i64>>(0).set(42));
        let mine = ctx.task(&set).w(&free).submit();
        // Waiting for `mine` returns while the gate still holds: it waits for this task
        // alone (`wait_for_all` would wait for the gate, which waits for us).
        assert_eq!(mine.wait(), Ok(()));
        assert!(mine.is_done());
        assert_eq!(mine.test(), Some(Ok(())));
        assert_eq!(value(ctx, &free), 42);
        assert!(!gate.is_done(), "the gate cannot have completed yet");
        assert_eq!(after_gate.test(), None, "its predecessor still runs");
        tx.send(()).unwrap();
        assert_eq!(after_gate.wait(), Ok(()));
        assert!(
            gate.is_done(),
            "a successor completes after its predecessor"
        );
        assert!(
            !timed_out.load(Ordering::SeqCst),
            "the gate was never released"
        );
        value(ctx, &blocked)
    })
    .unwrap();
    assert_eq!(out, vec![5]);
}

#[test]
fn a_dropped_task_handle_changes_nothing() {
    let out = run_local(2, |ctx| {
        let h = ctx.register(Variable::new(1_i64));
        let double = Codelet::new("double", |b| {
            let mut v = b.w::<Variable<i64>>(0);
            let x = v.get();
            v.set(2 * x);
        });
        for _ in 0..10 {
            ctx.task(&double).rw(&h).submit();
        }
        ctx.wait_for_all();
        value(ctx, &h)
    })
    .unwrap();
    assert_eq!(out, vec![1024, 1024]);
}

#[test]
fn waiting_for_a_panicking_task_reports_the_panic() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let keep = Arc::clone(&seen);
    let out = run_local(1, move |ctx| {
        let h = ctx.register(Variable::new(0_i64));
        let boom = Codelet::new("boom", |_| panic!("kaput"));
        let t = ctx.task(&boom).rw(&h).submit();
        *keep.lock().unwrap() = Some(t.wait());
        // The task completed: its successor runs.
        let set = Codelet::new("set", |b| b.w::<Variable<i64>>(0).set(3));
        ctx.task(&set).w(&h).submit().wait().unwrap();
        value(ctx, &h)
    });
    match seen.lock().unwrap().take() {
        Some(Err(TaskError::Failed { codelet, what })) => {
            assert_eq!(codelet, "boom");
            assert!(what.contains("panicked: kaput"), "{what}");
        }
        other => panic!("expected the task's panic, got {other:?}"),
    }
    // Shutdown reports the panic as well.
    let err = out.expect_err("a panicking task is reported at shutdown");
    assert!(err.to_string().contains("kaput"), "{err}");
}

/// `x`, owned by rank 0 with 4 values, which rank 1 registers with 8: every receive of
/// it on rank 1 fails (a rank-local registration bug).
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

#[test]
fn waiting_for_a_task_whose_input_transfer_failed_reports_the_transfer() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    let ran = Arc::new(AtomicBool::new(false));
    let ran2 = Arc::clone(&ran);
    let out = run_local_with(2, workers(2), move |ctx| {
        let x = mismatched(ctx, 1);
        let y = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let ran = Arc::clone(&ran2);
        let sum = Codelet::new("sum", move |b| {
            ran.store(true, Ordering::SeqCst);
            let s: i64 = b.r::<Vector<i64>>(1).as_slice().iter().sum();
            b.w::<Variable<i64>>(0).set(s);
        });
        // Runs on rank 1 (it writes y): x travels from rank 0 and its receive fails.
        let inserted = ctx.insert(&sum).w(&y).r(&x).submit().unwrap();
        assert_eq!(inserted.task.is_some(), ctx.rank() == Rank(1));
        assert_eq!(inserted.task.is_some(), inserted.executed_here);
        if let Some(task) = inserted.task {
            // Not a hang, not `Ok`: the failed receive, typed.
            keep.lock().unwrap().push(task.wait());
        }
        let _ = ctx.mpi_wait_for_all();
    });
    assert!(out.is_err(), "shutdown reports the failed transfer");
    assert!(!ran.load(Ordering::SeqCst), "the task ran on a stale input");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    match &seen[0] {
        Err(TaskError::Upstream(e)) => {
            assert_eq!(e.peer, Rank(0));
            assert_eq!(e.tag, Tag(1));
            assert_eq!(e.direction, TransferDirection::Recv);
            assert!(matches!(e.cause, CommError::Data(_)), "{e}");
        }
        other => panic!("expected the failed transfer, got {other:?}"),
    }
}

#[test]
fn a_built_task_returns_its_handle_on_the_executor() {
    let out = run_local(2, |ctx| {
        let x = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let set = Codelet::new("set", |b| b.w::<Variable<i64>>(0).set(9));
        let (built, post) = ctx.insert(&set).w(&x).build().unwrap();
        assert!(built.inserted.task.is_none(), "build submits nothing");
        let done = built.task.map(|t| {
            let handle = t.submit();
            handle.wait().unwrap();
            handle.is_done()
        });
        post.finish();
        ctx.wait_for_all();
        done
    })
    .unwrap();
    assert_eq!(out, vec![None, Some(true)]);
}

// ---- Item 4: statistics switched at run time ----

#[test]
fn statistics_switched_on_around_a_region_count_that_region_only() {
    // Statistics off at start-up (the default).
    let out = run_local_with(2, workers(1), |ctx| {
        let before = ctx.comm_amounts();
        let h = ctx.register(Variable::new(7u32));
        let exchange = |t: i64| {
            if ctx.rank() == Rank(0) {
                ctx.send(&h, Rank(1), Tag(t)).wait().unwrap();
            } else {
                ctx.recv(&h, Rank(0), Tag(t)).wait().unwrap();
            }
        };
        exchange(0); // not counted: statistics are off
        ctx.set_comm_stats(true);
        for t in 1..4 {
            exchange(t); // 3 × 4 bytes, counted
        }
        ctx.set_comm_stats(false);
        exchange(4); // not counted, and the region's counts are kept
        (before, ctx.comm_amounts())
    })
    .unwrap();
    assert_eq!(out[0], (None, Some(vec![0, 12])));
    assert_eq!(out[1], (None, Some(vec![0, 0])));
}

#[test]
fn comm_amounts_says_when_statistics_were_never_on() {
    let off = run_local_with(2, workers(1), |ctx| {
        let h = ctx.register(Variable::new(7u32));
        if ctx.rank() == Rank(0) {
            ctx.send(&h, Rank(1), Tag(0)).wait().unwrap();
        } else {
            ctx.recv(&h, Rank(0), Tag(0)).wait().unwrap();
        }
        ctx.comm_amounts()
    })
    .unwrap();
    assert_eq!(off, vec![None, None], "no silent row of zeros");
    let on = run_local_with(
        2,
        ClusterConfig {
            stats: true,
            ..workers(1)
        },
        |ctx| ctx.comm_amounts(),
    )
    .unwrap();
    assert_eq!(on, vec![Some(vec![0, 0]), Some(vec![0, 0])]);
}

// ---- Item 5: registration with an automatic tag ----

use starling::agreement::AUTO_TAGS;
use starling::{InsertError, TagChoice};

fn auto_var(ctx: &Context, owner: u32, v: i64) -> Handle<Variable<i64>> {
    ctx.register_owned(TagChoice::Auto, Owner::Rank(Rank(owner)), move || {
        Variable::new(v)
    })
    .unwrap()
}

#[test]
fn automatic_tags_follow_the_registration_order_and_carry_the_flow() {
    let out = run_local(3, |ctx| {
        let a = auto_var(ctx, 0, 20);
        // An explicit tag between two automatic ones takes none of theirs.
        let e = ctx
            .register_owned(Tag(7), Owner::Rank(Rank(2)), || Variable::new(1_i64))
            .unwrap();
        let b = auto_var(ctx, 1, 0);
        let h = ctx.register(Variable::new(0_i64));
        ctx.mpi_register(&h, TagChoice::Auto, Owner::Rank(Rank(2)))
            .unwrap();
        let add = Codelet::new("add", |bufs| {
            let x = bufs.r::<Variable<i64>>(1).get() + bufs.r::<Variable<i64>>(2).get();
            bufs.w::<Variable<i64>>(0).set(x);
        });
        // b = a + e on rank 1, then h = b + e on rank 2: the data travel on their tags.
        ctx.insert(&add).w(&b).r(&a).r(&e).submit().unwrap();
        ctx.insert(&add).w(&h).r(&b).r(&e).submit().unwrap();
        ctx.wait_for_all();
        let tags = [&a, &e, &b, &h].map(|x| ctx.data_tag(x).unwrap());
        let result = (ctx.rank() == Rank(2)).then(|| value(ctx, &h));
        (tags, result)
    })
    .unwrap();
    let first = *AUTO_TAGS.start();
    let want = [Tag(first), Tag(7), Tag(first + 1), Tag(first + 2)];
    for (rank, (tags, _)) in out.iter().enumerate() {
        assert_eq!(*tags, want, "rank {rank}");
    }
    assert_eq!(out[2].1, Some(22));
}

#[test]
fn an_explicit_tag_in_the_automatic_range_is_refused_and_uses_up_nothing() {
    let out = run_local(1, |ctx| {
        let inside = Tag(*AUTO_TAGS.start() + 5);
        let h = ctx.register(Variable::new(0_i64));
        let registered = ctx.mpi_register(&h, inside, Owner::Rank(Rank(0)));
        let set = ctx.set_tag(&h, inside);
        let last = Tag(*AUTO_TAGS.end());
        let at_end = ctx.mpi_register(&h, last, Owner::Rank(Rank(0)));
        let after = Tag(*AUTO_TAGS.end() + 1);
        let outside = ctx.mpi_register(&h, after, Owner::Rank(Rank(0)));
        let auto = auto_var(ctx, 0, 0);
        (registered, set, at_end, outside, ctx.data_tag(&auto))
    })
    .unwrap();
    let inside = Tag(*AUTO_TAGS.start() + 5);
    let (registered, set, at_end, outside, auto) = out[0].clone();
    assert_eq!(
        registered,
        Err(InsertError::Comm(CommError::AutoTagRange { tag: inside }))
    );
    assert_eq!(set, Err(CommError::AutoTagRange { tag: inside }));
    assert_eq!(
        at_end,
        Err(InsertError::Comm(CommError::AutoTagRange {
            tag: Tag(*AUTO_TAGS.end())
        }))
    );
    assert_eq!(
        outside,
        Ok(()),
        "the first tag after the range is the user's"
    );
    assert_eq!(
        auto,
        Some(Tag(*AUTO_TAGS.start())),
        "no automatic tag used up"
    );
    // The range is disjoint from the reserved tags, and negative (away from the small
    // tags applications write by hand).
    let reserved = starling::agreement::RESERVED_TAGS;
    assert!(*AUTO_TAGS.start() > *reserved.end() + 1);
    assert!(*AUTO_TAGS.end() < 0);
}

#[test]
fn ranks_that_register_in_different_orders_are_told_by_the_agreement_check() {
    let config = ClusterConfig {
        check_agreement: true,
        ..workers(1)
    };
    let out = run_local_with(2, config, |ctx| {
        // Same interfaces, owners swapped on rank 1: the tags pair the wrong data.
        let (x, y) = if ctx.rank() == Rank(0) {
            let x = auto_var(ctx, 0, 1);
            let y = auto_var(ctx, 1, 2);
            (x, y)
        } else {
            let y = auto_var(ctx, 1, 2);
            let x = auto_var(ctx, 0, 1);
            (x, y)
        };
        let checked = ctx.check_agreement();
        // Every later insert fails with it instead of exchanging the wrong data.
        let add = Codelet::new("add", |_| {});
        let inserted = ctx.insert(&add).rw(&x).r(&y).submit().map(|_| ());
        (checked, inserted)
    })
    .unwrap();
    for (checked, inserted) in out {
        let Err(InsertError::Diverged(d)) = checked else {
            panic!("expected a divergence, got {checked:?}");
        };
        assert_eq!(d.insert, Some(1), "{d}");
        assert!(d.message.contains("register"), "{d}");
        assert!(d.message.contains("of rank 1"), "{d}");
        assert!(matches!(inserted, Err(InsertError::Diverged(_))));
    }
}

#[test]
fn ranks_that_register_the_same_automatic_data_agree() {
    let config = ClusterConfig {
        check_agreement: true,
        ..workers(1)
    };
    let out = run_local_with(3, config, |ctx| {
        let _v = auto_var(ctx, 0, 1);
        let _w = ctx
            .register_owned(TagChoice::Auto, Owner::PerNode, || {
                Vector::from_vec(vec![0_i64; 4])
            })
            .unwrap();
        ctx.check_agreement()
    })
    .unwrap();
    assert!(out.iter().all(Result::is_ok), "{out:?}");
}

// ---- Item 6: typed shutdown leftovers ----

use starling::Leftover;
use starling::core::request::{Kind as RequestKind, State as RequestState};

#[test]
fn an_orphan_message_is_a_typed_leftover_that_prints_as_before() {
    let err = run_local_with(2, workers(1), |ctx| {
        let h = ctx.register(Variable::new(7u32));
        if ctx.rank() == Rank(1) {
            ctx.send(&h, Rank(0), Tag(77)).wait().unwrap();
        }
    })
    .unwrap_err();
    assert_eq!(err.leftovers.len(), 1, "{err}");
    let Leftover::Orphan {
        rank,
        source,
        tag,
        bytes,
        refused,
        ..
    } = &err.leftovers[0]
    else {
        panic!("expected an orphan message: {err}");
    };
    assert_eq!(
        (*rank, *source, *tag, *bytes, *refused),
        (Rank(0), Rank(1), Tag(77), 4, false)
    );
    assert_eq!(err.leftovers[0].rank(), Some(Rank(0)));
    assert_eq!(
        err.leftovers[0].to_string(),
        "rank 0: message from rank 1 with tag 77 (4 bytes) was never received"
    );
    assert_eq!(
        err.to_string(),
        "shutdown left 1 item(s): rank 0: message from rank 1 with tag 77 (4 bytes) was never \
         received"
    );
}

#[test]
fn a_stuck_receive_is_a_typed_leftover_with_its_explanation() {
    let config = ClusterConfig {
        watchdog: Some(Duration::from_secs(2)),
        ..workers(1)
    };
    let err = run_local_with(2, config, |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            // Rank 1 never sends it.
            ctx.recv(&h, Rank(1), Tag(9)).detach(|_| {}).unwrap();
        }
    })
    .unwrap_err();
    let stuck: Vec<_> = err
        .leftovers
        .iter()
        .filter(|l| matches!(l, Leftover::NeverCompleted { .. }))
        .collect();
    assert_eq!(stuck.len(), 1, "{err}");
    let Leftover::NeverCompleted {
        rank,
        kind,
        peer,
        tag,
        state,
        ..
    } = stuck[0]
    else {
        unreachable!()
    };
    assert_eq!(
        (*rank, *kind, *peer, *tag, *state),
        (
            Rank(0),
            RequestKind::Recv,
            Rank(1),
            Tag(9),
            RequestState::AwaitingEnvelope
        )
    );
    assert_eq!(
        stuck[0].to_string(),
        "rank 0: Recv with rank 1 and tag 9 never completed (awaiting envelope)"
    );
    // The explanation leads, job-wide (no rank of its own): the shutdown's `why: …` lines,
    // or the watchdog's if it fired first.
    assert_eq!(err.leftovers[0].rank(), None, "{err}");
    assert!(
        err.leftovers.iter().any(|l| match l {
            Leftover::Why(line) | Leftover::Watchdog(line) => {
                line.starts_with("rank 0 waits for tag 9 from rank 1")
            }
            _ => false,
        }),
        "{err}"
    );
}

// ---- Item 7: the smaller ones ----

use starling::core::AccessMode as Mode;
use starling::{PolicyAccess, PolicyId, Request};

#[test]
fn wait_all_and_test_all_cover_an_array_of_requests() {
    let out = run_local_with(2, workers(1), |ctx| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                ctx.register(Variable::new(if ctx.rank() == Rank(0) {
                    10 + i
                } else {
                    0
                }))
            })
            .collect();
        let short = ctx.register(Vector::from_vec(vec![1_i64; 4]));
        let long = ctx.register(Vector::from_vec(vec![0_i64; 8]));
        if ctx.rank() == Rank(1) {
            let reqs: Vec<Request> = hs
                .iter()
                .enumerate()
                .map(|(i, h)| ctx.recv(h, Rank(0), Tag(i as i64)).start().unwrap())
                .collect();
            // Rank 0 sends only after the barrier: nothing can have arrived.
            let before = Request::test_all(&reqs);
            ctx.barrier();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let after = loop {
                if let Some(r) = Request::test_all(&reqs) {
                    break Some(r);
                }
                if std::time::Instant::now() > deadline {
                    break None;
                }
                std::thread::yield_now();
            };
            // Dropped after a completed test_all: they count as waited (no leftover).
            drop(reqs);
            // One receive of three fails (8 values expected, 4 sent): wait_all waits for
            // every one and reports that failure.
            let reqs = vec![
                ctx.recv(&hs[0], Rank(0), Tag(10)).start().unwrap(),
                ctx.recv(&long, Rank(0), Tag(11)).start().unwrap(),
                ctx.recv(&hs[2], Rank(0), Tag(12)).start().unwrap(),
            ];
            let all = Request::wait_all(reqs);
            let values: Vec<i64> = hs.iter().map(|h| value(ctx, h)).collect();
            (before, after, Some(all), values)
        } else {
            ctx.barrier();
            let sends: Vec<Request> = hs
                .iter()
                .enumerate()
                .map(|(i, h)| ctx.send(h, Rank(1), Tag(i as i64)).start().unwrap())
                .collect();
            let sent = Request::wait_all(sends);
            let more = vec![
                ctx.send(&hs[2], Rank(1), Tag(10)).start().unwrap(),
                ctx.send(&short, Rank(1), Tag(11)).start().unwrap(),
                ctx.send(&hs[1], Rank(1), Tag(12)).start().unwrap(),
            ];
            let _ = Request::wait_all(more);
            (None, Some(sent), None, Vec::new())
        }
    })
    .unwrap();
    assert_eq!(out[0].1, Some(Ok(())), "every send completed");
    let (before, after, all, values) = &out[1];
    assert_eq!(*before, None);
    assert_eq!(*after, Some(Ok(())));
    assert!(
        matches!(all, Some(Err(CommError::Data(_)))),
        "the failed receive is reported: {all:?}"
    );
    // The receives around the failed one completed all the same.
    assert_eq!(*values, vec![12, 11, 11]);
}

#[test]
fn get_data_on_node_detached_and_data_cpy_need_no_callback() {
    let called = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&called);
    let out = run_local_with(2, workers(1), move |ctx| {
        let x = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(5_i64))
            .unwrap();
        let y = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let z = ctx
            .register_owned(Tag(3), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let fetched = ctx.get_data_on_node_detached(&x, Rank(1)).unwrap();
        assert_eq!(
            fetched.is_some(),
            ctx.rank() == Rank(1),
            "a handle on the node only"
        );
        let fetched = fetched.map(|t| t.wait());
        let copied = ctx.data_cpy(&y, &x).unwrap().map(|t| t.wait());
        let seen = Arc::clone(&seen);
        ctx.data_cpy_cb(&z, &x, move || seen.store(true, Ordering::SeqCst))
            .unwrap();
        ctx.wait_for_all();
        let mine =
            (ctx.rank() == Rank(1)).then(|| (value(ctx, &x), value(ctx, &y), value(ctx, &z)));
        (fetched, copied, mine)
    })
    .unwrap();
    assert_eq!(out[0], (None, None, None));
    assert_eq!(out[1], (Some(Ok(())), Some(Ok(())), Some((5, 5, 5))));
    assert!(
        called.load(Ordering::SeqCst),
        "the callback form still calls back"
    );
}

/// The owner of the second access: a policy written with the facade's items only.
fn second_owner(_me: Rank, _nranks: u32, accesses: &[PolicyAccess]) -> Rank {
    accesses
        .get(1)
        .and_then(|a| a.owner.rank())
        .unwrap_or(Rank(0))
}

#[test]
fn node_selection_policies_are_plain_functions_or_closures_of_facade_items() {
    let out = run_local(3, |ctx| {
        let a = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(0_i64))
            .unwrap();
        let b = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let last: PolicyId = ctx
            .register_policy(|_me, nranks, _accesses| Rank(nranks - 1))
            .unwrap();
        let second = ctx.register_policy(second_owner).unwrap();
        let cl = Codelet::empty("nothing");
        // Two written data of different owners: the policy decides.
        let by_closure = ctx.insert(&cl).w(&a).w(&b).policy(last).submit().unwrap();
        let by_fn = ctx.insert(&cl).w(&a).w(&b).policy(second).submit().unwrap();
        ctx.wait_for_all();
        (by_closure.executor, by_fn.executor)
    })
    .unwrap();
    assert!(
        out.iter().all(|o| *o == (Some(Rank(2)), Some(Rank(1)))),
        "{out:?}"
    );
}

/// Early messages on rank 1 when rank 0 sends `x` to it for an insert that rank 1 makes
/// late, with `mode` on the access to `x`.
fn early_messages_with(mode: Mode) -> u64 {
    let out = run_local_with(2, workers(1), move |ctx| {
        let x = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(5_i64))
            .unwrap();
        let y = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        if ctx.rank() == Rank(1) {
            // Rank 0's message is there before this rank posts its receive.
            std::thread::sleep(Duration::from_millis(300));
        }
        let copy = Codelet::new("copy", |b| {
            let v = b.r::<Variable<i64>>(1).get();
            b.w::<Variable<i64>>(0).set(v);
        });
        ctx.insert(&copy).w(&y).access(&x, mode).submit().unwrap();
        ctx.wait_for_all();
        let v = (ctx.rank() == Rank(1)).then(|| value(ctx, &y));
        (ctx.early_messages(), v)
    })
    .unwrap();
    assert_eq!(out[1].1, Some(5));
    out[1].0
}

#[test]
fn an_insert_asks_for_a_synchronous_send_with_the_access_mode() {
    // A standard send arrives before its receive (early data); a synchronous one waits
    // for the receive, so none does.
    assert!(early_messages_with(Mode::R) > 0);
    assert_eq!(early_messages_with(Mode::R | Mode::SSEND), 0);
}

#[test]
fn on_node_with_no_node_changes_nothing() {
    let out = run_local(2, |ctx| {
        let x = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(0_i64))
            .unwrap();
        let y = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let cl = Codelet::empty("nothing");
        let none: Option<Rank> = None;
        let auto = ctx.insert(&cl).w(&y).r(&x).on_node(none).submit().unwrap();
        let some = ctx
            .insert(&cl)
            .w(&y)
            .r(&x)
            .on_node(Some(Rank(0)))
            .submit()
            .unwrap();
        let rank = ctx
            .insert(&cl)
            .w(&y)
            .r(&x)
            .on_node(Rank(0))
            .submit()
            .unwrap();
        // `None` after `on_data` keeps it, as the reference skips EXECUTE_ON_NODE -1.
        let data = ctx
            .insert(&cl)
            .w(&y)
            .r(&x)
            .on_data(&x)
            .on_node(none)
            .submit()
            .unwrap();
        ctx.wait_for_all();
        [auto, some, rank, data].map(|i| i.executor)
    })
    .unwrap();
    for o in out {
        assert_eq!(
            o,
            [Some(Rank(1)), Some(Rank(0)), Some(Rank(0)), Some(Rank(0))]
        );
    }
}

/// One check for `launch`'s results, whichever way it ran: every rank in-process, this
/// rank under `mpirun`.
fn check_launched(out: &starling::Launched<(u32, i64)>) {
    for (rank, (seen, sum)) in out {
        assert_eq!(*seen, rank.0, "each value comes with its own rank");
        assert_eq!(*sum, 1 + 2 + 3, "rank {}", rank.0);
    }
}

/// The same body passes under MPI (checked by hand: `cargo test -p starling --features mpi
/// --test everyday --no-run`, then `mpirun -n 3 <that binary> launch_returns`), where each
/// process checks its own rank.
#[test]
fn launch_returns_each_rank_with_its_value_in_one_shape() {
    let out = starling::launch(3, |ctx| {
        // A reduction-free sum: every rank computes the same value from its rank's data.
        let h = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(1_i64))
            .unwrap();
        let s = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(2)), || Variable::new(5_i64))
            .unwrap();
        let add = Codelet::new("add", |b| {
            let v = b.r::<Variable<i64>>(1).get() + b.w::<Variable<i64>>(0).get();
            b.w::<Variable<i64>>(0).set(v);
        });
        ctx.insert(&add).rw(&s).r(&h).submit().unwrap(); // s = 6 on rank 2
        ctx.get_data_on_all_nodes_detached(&s).unwrap();
        ctx.wait_for_all();
        (ctx.rank().0, value(ctx, &s))
    })
    .unwrap();
    check_launched(&out);
    if !starling::under_mpirun() {
        assert_eq!(out.len(), 3);
        assert_eq!(out.get(Rank(1)), Some(&(1, 6)));
        let ranks: Vec<Rank> = out.iter().map(|(r, _)| r).collect();
        assert_eq!(ranks, vec![Rank(0), Rank(1), Rank(2)]);
        assert_eq!(out.clone().into_values(), vec![(0, 6), (1, 6), (2, 6)]);
        let pairs: Vec<(Rank, (u32, i64))> = out.into_iter().collect();
        assert_eq!(pairs[2], (Rank(2), (2, 6)));
    }
}

#[test]
fn in_process_ranks_share_the_cores_unless_told_not_to() {
    let all = RuntimeConfig::default().workers;
    let share = (all / 2).max(all.min(2));
    // The default: each of two ranks gets half of the machine's cores (at least two).
    let out = run_local_with(2, ClusterConfig::default(), |ctx| {
        ctx.sched_stats().workers.len()
    })
    .unwrap();
    assert_eq!(out, vec![share, share]);
    // One rank keeps them all; a count given, or sharing off, is kept as it is.
    let one = run_local_with(1, ClusterConfig::default(), |ctx| {
        ctx.sched_stats().workers.len()
    })
    .unwrap();
    assert_eq!(one, vec![all]);
    assert_eq!(
        ClusterConfig::default().for_ranks(4).runtime.workers,
        (all / 4).max(all.min(2))
    );
    let off = ClusterConfig {
        share_cores: false,
        ..ClusterConfig::default()
    };
    assert_eq!(off.for_ranks(2).runtime.workers, all);
    let given = workers(all + 1);
    assert_eq!(given.for_ranks(2).runtime.workers, all + 1);
}

/// More in-process ranks than cores crowd the machine (`RuntimeConfig::crowded`: idle
/// workers yield at every poll, a ready task counts on a polling worker); as many or
/// fewer do not. (`STARLING_CROWDED` would override: the test suite leaves it unset.)
#[test]
fn more_ranks_than_cores_crowd_the_machine() {
    if std::env::var_os("STARLING_CROWDED").is_some() {
        return;
    }
    let all = RuntimeConfig::default().workers as u32;
    let crowded = |ranks: u32| ClusterConfig::default().for_ranks(ranks).runtime.crowded;
    assert_eq!(crowded(all + 1), Some(true));
    assert_eq!(crowded(all), Some(false));
    assert_eq!(crowded(1), Some(false));
    // A configuration that says is kept as it says.
    let said = |crowded: bool, ranks: u32| {
        ClusterConfig {
            runtime: RuntimeConfig {
                crowded: Some(crowded),
                ..RuntimeConfig::default()
            },
            ..ClusterConfig::default()
        }
        .for_ranks(ranks)
        .runtime
        .crowded
    };
    assert_eq!(said(false, all + 1), Some(false));
    assert_eq!(said(true, 1), Some(true));
    // Crowded, the ring still carries its token round (the policy changes waits only).
    let tokens = run_local_with(all + 1, ClusterConfig::default(), |ctx| {
        let token = ctx.register(Variable::new(0u64));
        let (me, n) = (ctx.rank().0, ctx.size());
        let bump = Codelet::new("bump", |b| {
            let mut v = b.w::<Variable<u64>>(0);
            let x = v.get();
            v.set(x + 1);
        });
        for round in 0..50u32 {
            let tag = Tag(i64::from(round));
            if me != 0 || round != 0 {
                let from = Rank((me + n - 1) % n);
                ctx.recv(&token, from, tag).wait().expect("the token comes");
            }
            ctx.task(&bump).rw(&token).submit();
            let to = Rank((me + 1) % n);
            let next = Tag(i64::from(round + u32::from(me + 1 == n)));
            if !(me + 1 == n && round == 49) {
                ctx.send(&token, to, next).wait().expect("the token goes");
            }
        }
        ctx.wait_for_all();
        ctx.unregister(token).get()
    })
    .unwrap();
    assert_eq!(tokens[all as usize], u64::from(50 * (all + 1)));
}
