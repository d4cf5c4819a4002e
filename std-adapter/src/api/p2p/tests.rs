use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use starling_core::{Rank, Tag};

use crate::runtime::interfaces::{Variable, Vector};
use crate::{ClusterConfig, CommError, DataError, RuntimeConfig, TaskTag, run_local_with};

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

#[test]
fn arrays_on_a_communicator_take_its_ranks_unlock_once_and_report_once() {
    // World ranks 1 and 3 are members 0 and 1 of the odd split: member 0 sends two
    // handles of different interfaces to member 1 in one array.
    let out = run_local_with(4, config(), |ctx| {
        let me = ctx.rank().0;
        let odd = ctx
            .comm_split(&ctx.world(), (me % 2 == 1).then_some(1), 0)
            .unwrap();
        let a = ctx.register(Variable::new(me * 10));
        let b = ctx.register(Vector::from_vec(vec![me; 3]));
        let (tx, rx) = mpsc::channel();
        let done = move |r: Result<(), CommError>| tx.send(r).unwrap();
        // Member 0 sends to member 1, which receives from member 0.
        let peer = Rank(u32::from(me == 1));
        let items: [(crate::AnyHandle, Rank, Tag); 2] =
            [((&a).into(), peer, Tag(1)), ((&b).into(), peer, Tag(2))];
        match (me, &odd) {
            (1, Some(c)) => ctx
                .send_all(items)
                .on(c)
                .unlock(TaskTag(5))
                .detach(done)
                .unwrap(),
            (3, Some(c)) => ctx
                .recv_all(items)
                .on(c)
                .unlock(TaskTag(5))
                .detach(done)
                .unwrap(),
            _ => return None,
        }
        ctx.tag_wait(&[TaskTag(5)]);
        let outcome = rx.recv().unwrap();
        assert!(rx.try_recv().is_err(), "the callback runs once");
        Some((
            outcome,
            ctx.unregister(a).get(),
            ctx.unregister(b).as_slice().to_vec(),
        ))
    })
    .unwrap();
    assert_eq!(out[1], Some((Ok(()), 10, vec![1, 1, 1])));
    assert_eq!(out[3], Some((Ok(()), 10, vec![1, 1, 1])));
}

#[test]
fn an_array_is_refused_whole_before_anything_is_posted() {
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(0u8));
        let (tx, rx) = mpsc::channel();
        // The second item's destination is outside the world: nothing is posted, the
        // callback never runs.
        let e = ctx
            .send_all([(&h, Rank(0), Tag(1)), (&h, Rank(7), Tag(1))])
            .unlock(TaskTag(3))
            .detach(move |r| tx.send(r).unwrap())
            .unwrap_err();
        ctx.wait_for_all();
        (e, rx.try_recv().is_err())
    })
    .unwrap();
    for o in out {
        assert_eq!(
            o,
            (
                CommError::RankOutOfRange {
                    rank: Rank(7),
                    size: 2
                },
                true
            )
        );
    }
}

#[test]
fn an_empty_array_unlocks_and_calls_back_at_once() {
    let out = run_local_with(1, config(), |ctx| {
        let (tx, rx) = mpsc::channel();
        ctx.recv_all(core::iter::empty::<(&crate::Handle<Variable<u8>>, Rank, Tag)>())
            .unlock(TaskTag(1))
            .detach(move |r| tx.send(r).unwrap())
            .unwrap();
        ctx.tag_wait(&[TaskTag(1)]);
        rx.try_recv().unwrap()
    })
    .unwrap();
    assert_eq!(out, vec![Ok(())]);
}

#[test]
fn an_array_callback_gets_the_first_failure_after_every_item_completed() {
    // Rank 1 receives a 100-byte vector into a 10-byte one, and a variable that fits: the
    // callback runs once both completed, with the size mismatch.
    let out = run_local_with(2, config(), |ctx| {
        let big = ctx.register(Vector::from_vec(vec![1u8; 100]));
        let v = ctx.register(Variable::new(7u32));
        if ctx.rank() == Rank(0) {
            ctx.send(&big, Rank(1), Tag(1)).wait().unwrap();
            ctx.send(&v, Rank(1), Tag(2)).wait().unwrap();
            return None;
        }
        let small = ctx.register(Vector::from_vec(vec![9u8; 10]));
        let got = ctx.register(Variable::new(0u32));
        let (tx, rx) = mpsc::channel();
        ctx.recv_all::<crate::AnyHandle>([
            ((&small).into(), Rank(0), Tag(1)),
            ((&got).into(), Rank(0), Tag(2)),
        ])
        .detach(move |r| tx.send(r).unwrap())
        .unwrap();
        let outcome = rx.recv().unwrap();
        Some((outcome, ctx.unregister(got).get()))
    })
    .unwrap();
    assert_eq!(
        out[1],
        Some((
            Err(CommError::Data(DataError::SizeMismatch {
                expected: 10,
                got: 100
            })),
            7
        ))
    );
}

#[test]
fn a_builder_refuses_before_posting_whatever_its_terminal() {
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(0u8));
        let reserved = Tag(*crate::tags::RESERVED_TAGS.start());
        let out_of_world = ctx.send(&h, Rank(2), Tag(0)).sync().priority(1).wait();
        let reserved_tag = ctx
            .recv(&h, Rank(0), reserved)
            .detach(|_| panic!("never posted"));
        let world = ctx.world();
        let out_of_comm = ctx.recv(&h, Rank(5), Tag(0)).on(&world).start().map(|_| ());
        (out_of_world, reserved_tag, out_of_comm)
    })
    .unwrap();
    for (a, b, c) in out {
        assert_eq!(
            a,
            Err(CommError::RankOutOfRange {
                rank: Rank(2),
                size: 2
            })
        );
        assert!(matches!(b, Err(CommError::ReservedTag { .. })));
        assert_eq!(
            c,
            Err(CommError::RankOutOfRange {
                rank: Rank(5),
                size: 2
            })
        );
    }
}

/// A codelet that sleeps, then sets its variable to `value`.
fn slow_set(value: u64) -> crate::Codelet {
    crate::Codelet::new("slow_set", move |b| {
        std::thread::sleep(core::time::Duration::from_millis(40));
        b.w::<Variable<u64>>(0).set(value);
    })
}

#[test]
fn blocking_transfers_of_a_handle_with_something_pending_wait_for_it() {
    // A blocking transfer of a handle with nothing pending goes without a node; one with
    // an access pending waits for it as before: rank 0 sends a value, then the value of a
    // slow writer submitted just before the send; rank 1 receives the first, then has a
    // slow reader of it pending when the second receive is called, and a slow writer
    // pending before a third.
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(ctx.rank().0 as u64 + 1));
        if ctx.rank() == Rank(0) {
            ctx.send(&h, Rank(1), Tag(4)).wait().unwrap();
            ctx.task(&slow_set(7)).w(&h).submit();
            ctx.send(&h, Rank(1), Tag(4)).wait().unwrap();
            ctx.send(&h, Rank(1), Tag(4)).wait().unwrap();
            (ctx.unregister(h).get(), Vec::new())
        } else {
            ctx.recv(&h, Rank(0), Tag(4)).wait().unwrap();
            let (tx, rx) = mpsc::channel();
            let read = crate::Codelet::new("slow_read", move |b| {
                std::thread::sleep(core::time::Duration::from_millis(40));
                tx.send(b.r::<Variable<u64>>(0).get()).unwrap();
            });
            ctx.task(&read).r(&h).submit();
            ctx.recv(&h, Rank(0), Tag(4)).wait().unwrap();
            let second = ctx.acquire(&h, starling_core::AccessMode::R).get().get();
            ctx.task(&slow_set(9)).w(&h).submit();
            ctx.recv(&h, Rank(0), Tag(4)).wait().unwrap();
            let seen = rx.recv().unwrap();
            (ctx.unregister(h).get(), vec![seen, second])
        }
    })
    .unwrap();
    assert_eq!(
        out[0],
        (7, Vec::new()),
        "the slow writer ran before the send"
    );
    // The reader saw the first value, not the second that the receive brought after it;
    // the third receive came after the slow writer, which it overwrote.
    assert_eq!(out[1], (7, vec![1, 7]));
}

/// Waits until `posted` is set, then 20 ms more.
fn after_posted(posted: &AtomicBool) {
    while !posted.load(Ordering::SeqCst) {
        std::thread::sleep(core::time::Duration::from_millis(1));
    }
    std::thread::sleep(core::time::Duration::from_millis(20));
}

/// Waits until `ctx`'s runtime counts a request in flight — looked at, not waited on
/// (counting a request in wakes nobody) — for 10 s at most, after which a request not
/// counted makes the caller's checks fail.
fn until_a_request_is_in_flight(ctx: &crate::Context) {
    for _ in 0..10_000 {
        if ctx
            .runtime
            .wait_until(core::time::Duration::ZERO, |v| v.outstanding > 0)
        {
            return;
        }
        std::thread::sleep(core::time::Duration::from_millis(1));
    }
}

#[test]
fn a_blocking_receive_counts_for_a_wait_for_all_on_another_thread() {
    // Rank 1 receives on a thread of its own; its main thread, once the receive is
    // counted in flight, waits for everything — the receive included, whose value is in
    // once it returns (a receive left out would leave the first value to read).
    let posted = std::sync::Arc::new(AtomicBool::new(false));
    let out = run_local_with(2, config(), move |ctx| {
        let h = ctx.register(Variable::new(u64::from(ctx.rank().0) + 1));
        if ctx.rank() == Rank(0) {
            after_posted(&posted);
            ctx.send(&h, Rank(1), Tag(5)).wait().unwrap();
            return ctx.unregister(h).get();
        }
        let got = std::thread::scope(|s| {
            s.spawn(|| ctx.recv(&h, Rank(0), Tag(5)).wait().unwrap());
            until_a_request_is_in_flight(ctx);
            posted.store(true, Ordering::SeqCst);
            ctx.wait_for_all();
            ctx.acquire(&h, starling_core::AccessMode::R).get().get()
        });
        let _ = ctx.unregister(h);
        got
    })
    .unwrap();
    assert_eq!(out, vec![1, 1]);
}

#[test]
fn unregistering_a_clone_waits_for_a_blocking_receive_on_another_thread() {
    // Rank 1 receives on a thread of its own; its main thread, once the receive is in
    // flight, unregisters a clone of the handle: it gets the received value, not the one
    // before. An unregistration that did not wait returns before rank 0 sends (20 ms
    // later): rank 1 then says so, rank 0 does not send (a receive writing into data
    // already taken would wedge the rank), and the watchdog fails the receive in seconds.
    let config = ClusterConfig {
        watchdog: Some(core::time::Duration::from_secs(5)),
        ..config()
    };
    let posted = std::sync::Arc::new(AtomicBool::new(false));
    let taken_early = std::sync::Arc::new(AtomicBool::new(false));
    let out = run_local_with(2, config, move |ctx| {
        let h = ctx.register(Variable::new(u64::from(ctx.rank().0) + 1));
        if ctx.rank() == Rank(0) {
            after_posted(&posted);
            if !taken_early.load(Ordering::SeqCst) {
                ctx.send(&h, Rank(1), Tag(6)).wait().unwrap();
            }
            return Ok(ctx.unregister(h).get());
        }
        let clone = h.clone();
        let received = AtomicBool::new(false);
        std::thread::scope(|s| {
            let receiver = s.spawn(|| {
                let r = ctx.recv(&h, Rank(0), Tag(6)).wait();
                received.store(true, Ordering::SeqCst);
                r
            });
            until_a_request_is_in_flight(ctx);
            posted.store(true, Ordering::SeqCst);
            let got = ctx.unregister(clone).get();
            if !received.load(Ordering::SeqCst) {
                taken_early.store(true, Ordering::SeqCst);
            }
            receiver.join().unwrap().map(|()| got)
        })
    });
    assert_eq!(out.unwrap(), vec![Ok(1), Ok(1)]);
}

#[test]
fn a_watched_rank_gives_its_requests_the_watchdogs_time_and_reads_no_clock_for_them() {
    // A watchdog of 1 s looks at the ranks every 100 ms and gives each rank's tracker the
    // time of its look, which the requests posted until the next look take as theirs
    // (`Table::now`); once it stops, the trackers read the clock again.
    let config = ClusterConfig {
        watchdog: Some(core::time::Duration::from_secs(1)),
        ..config()
    };
    let trackers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&trackers);
    let out = run_local_with(2, config, move |ctx| {
        kept.lock()
            .unwrap()
            .push(std::sync::Arc::clone(&ctx.tracker));
        let start = std::time::Instant::now();
        while ctx.tracker.ticked().is_none() && start.elapsed().as_secs() < 5 {
            std::thread::sleep(core::time::Duration::from_millis(5));
        }
        ctx.tracker.ticked().is_some()
    })
    .expect("a clean shutdown");
    assert_eq!(out, vec![true, true], "each rank is ticked while watched");
    for t in trackers.lock().unwrap().iter() {
        assert_eq!(t.ticked(), None, "unwatched after shutdown");
    }
}

#[test]
fn an_in_process_receive_takes_no_recycled_buffer_only_to_drop_it() {
    // The in-process transport hands the sender's buffer over: a recycled buffer taken
    // for a receive would be dropped unused (and a fresh one zeroed in its place when the
    // pool is empty). Three messages of a size the pool keeps, each sent once its receive
    // is posted (the barrier), so that each receive is posted while the buffers of the
    // earlier messages are in the pool: the receiver keeps every message's buffer.
    let out = run_local_with(2, config(), |ctx| {
        let v = ctx.register(Vector::from_vec(vec![ctx.rank().0 as u8; 100 << 10]));
        for i in 0..3 {
            if ctx.rank().0 == 0 {
                ctx.barrier();
                ctx.send(&v, Rank(1), Tag(i)).wait().expect("send");
            } else {
                let posted = ctx.recv(&v, Rank(0), Tag(i)).start().expect("posted");
                ctx.barrier();
                posted.wait().expect("receive");
            }
        }
        ctx.wait_for_all();
        let received = ctx
            .acquire(&v, starling_core::AccessMode::R)
            .get()
            .as_slice()
            .iter()
            .all(|&b| b == 0);
        (ctx.pooled_buffers(), received)
    })
    .expect("a clean shutdown");
    assert_eq!(out[1], (3, true));
}

#[test]
fn a_blocking_send_with_nothing_before_it_leaves_at_once_and_keeps_its_place_in_the_order() {
    // Rank 0 sends 1 to 6 on one tag: blocking sends of idle handles (which leave at
    // once, without a request: the hang tracker never sees them) between sends that do
    // not — a detached send, a synchronous one, a payload above the eager limit, a
    // handle with a task pending on it. Rank 1 receives them in that order.
    let out = run_local_with(2, config(), |ctx| {
        let t = Tag(5);
        if ctx.rank().0 == 0 {
            let small = |v: u64| ctx.register(Variable::new(v));
            let before = ctx.tracker.tracked();
            ctx.send(&small(1), Rank(1), t).wait().expect("send");
            ctx.send(&small(2), Rank(1), t).wait().expect("send");
            let express = ctx.tracker.tracked() - before;
            let detached = small(3);
            ctx.send(&detached, Rank(1), t)
                .detach(|r| r.expect("detached send"))
                .expect("posted");
            ctx.send(&small(4), Rank(1), t)
                .sync()
                .wait()
                .expect("sync send");
            let busy = small(0);
            ctx.task(&slow_set(5)).w(&busy).submit();
            ctx.send(&busy, Rank(1), t)
                .wait()
                .expect("send after the task");
            let large = ctx.register(Vector::from_vec(vec![6u8; 64 << 10]));
            ctx.send(&large, Rank(1), t).wait().expect("large send");
            ctx.wait_for_all();
            vec![express]
        } else {
            let x = ctx.register(Variable::new(0u64));
            let mut got = Vec::new();
            for _ in 0..5 {
                ctx.recv(&x, Rank(0), t).wait().expect("receive");
                got.push(ctx.acquire(&x, starling_core::AccessMode::R).get().get());
            }
            let v = ctx.register(Vector::from_vec(vec![0u8; 64 << 10]));
            ctx.recv(&v, Rank(0), t).wait().expect("large receive");
            let all_six = ctx
                .acquire(&v, starling_core::AccessMode::R)
                .get()
                .as_slice()
                .iter()
                .all(|&b| b == 6);
            got.push(if all_six { 6 } else { 0 });
            got
        }
    })
    .expect("a clean shutdown");
    assert_eq!(
        out[0],
        [0],
        "the two express sends were not tracked as requests"
    );
    assert_eq!(out[1], [1, 2, 3, 4, 5, 6]);
}
