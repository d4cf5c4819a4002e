//! The graph-agreement check and the hang explainer on the in-process cluster: divergent
//! task flows are reported on every rank with the first insert where they part, and a job
//! whose requests can never complete returns an explanation instead of hanging.

use core::time::Duration;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Variable;
use starling::{
    ClusterConfig, Codelet, CommError, Context, Handle, InsertError, Leftover, RuntimeConfig,
    Tables, run_local_with,
};

/// The leftovers' lines, as the report prints them.
fn text_of(leftovers: &[Leftover]) -> String {
    leftovers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        check_agreement: true,
        ..ClusterConfig::default()
    }
}

fn with_watchdog(ms: u64) -> ClusterConfig {
    ClusterConfig {
        watchdog: Some(Duration::from_millis(ms)),
        ..config()
    }
}

fn var(ctx: &Context, tag: i64, owner: u32) -> Handle<Variable<i64>> {
    ctx.register_owned(Tag(tag), Owner::Rank(Rank(owner)), || Variable::new(1))
        .unwrap()
}

/// Runs `f` on `n` ranks and returns what each rank's closure returned, by rank, even
/// when the cluster's shutdown reports leftovers (returned too).
fn outcomes<R: Send + 'static>(
    n: u32,
    config: ClusterConfig,
    f: impl Fn(&Context) -> R + Send + Sync + 'static,
) -> (Vec<Option<R>>, Result<(), starling::ShutdownError>) {
    let slots: Arc<Mutex<Vec<Option<R>>>> = Arc::new(Mutex::new((0..n).map(|_| None).collect()));
    let s = Arc::clone(&slots);
    let shutdown = run_local_with(n, config, move |ctx| {
        let r = f(ctx);
        s.lock().unwrap()[ctx.rank().index()] = Some(r);
    })
    .map(|_| ());
    let out = core::mem::take(&mut *slots.lock().unwrap());
    (out, shutdown)
}

fn codelet(name: &str) -> Codelet {
    Codelet::new(name, |b| {
        let mut x = b.w::<Variable<i64>>(0);
        let v = x.get();
        x.set(v + 1);
    })
}

// ----- the graph-agreement check ---------------------------------------------------------

#[test]
fn agreeing_flows_pass_the_check_at_every_synchronisation_point() {
    let (out, shutdown) = outcomes(3, config(), |ctx| {
        let x = var(ctx, 1, 0);
        let y = var(ctx, 2, 1);
        let tmp = (ctx.rank() == Rank(2)).then(|| ctx.register(Variable::new(0i64)));
        if let Some(t) = &tmp {
            ctx.mpi_register(t, Tag(3), Owner::Rank(Rank(2))).unwrap();
        }
        let step = codelet("step");
        for _ in 0..5 {
            ctx.insert(&step).rw(&x).r(&y).submit().unwrap();
            ctx.insert(&step).rw(&y).r(&x).submit().unwrap();
        }
        // Temporary data: known on rank 2 only, every rank passes it with access_opt.
        ctx.insert(&step)
            .access_opt(tmp.as_ref(), AccessMode::RW)
            .r(&x)
            .on_node(Rank(2))
            .submit()
            .unwrap();
        ctx.barrier();
        let a = ctx.check_agreement();
        let b = ctx.mpi_wait_for_all();
        (a, b)
    });
    shutdown.expect("a clean shutdown");
    for o in out {
        assert_eq!(o, Some((Ok(()), Ok(()))));
    }
}

#[test]
fn a_rank_inserting_another_codelet_is_named_at_the_first_divergent_insert() {
    let (out, _) = outcomes(3, config(), |ctx| {
        let x = var(ctx, 1, 0);
        let y = var(ctx, 2, 0);
        ctx.insert(&codelet("init")).w(&x).submit().unwrap();
        // Rank 1 takes another branch at the second insert.
        let name = if ctx.rank() == Rank(1) {
            "scale"
        } else {
            "shift"
        };
        ctx.insert(&codelet(name)).rw(&x).r(&y).submit().unwrap();
        ctx.insert(&codelet("last")).rw(&y).submit().unwrap();
        let waited = ctx.mpi_wait_for_all();
        // Every later insert fails with the same report: the ranks stop.
        let later = ctx.insert(&codelet("later")).rw(&y).submit();
        (waited, later.map(|_| ()))
    });
    let mut messages = Vec::new();
    for (r, o) in out.into_iter().enumerate() {
        let (waited, later) = o.expect("every rank returns");
        let Err(InsertError::Diverged(d)) = waited else {
            panic!("rank {r}: expected a divergence, got {waited:?}");
        };
        assert_eq!(d.insert, Some(2), "rank {r}");
        assert_eq!(d.at, "mpi_wait_for_all");
        assert!(
            d.seen[0].starts_with("shift(tag 1 RW of rank 0, tag 2 R of rank 0)"),
            "{d:?}"
        );
        assert!(
            d.seen[1].starts_with("scale(tag 1 RW of rank 0, tag 2 R of rank 0)"),
            "{d:?}"
        );
        assert_eq!(later, Err(InsertError::Diverged(d.clone())));
        messages.push(d.message);
    }
    assert!(
        messages.windows(2).all(|w| w[0] == w[1]),
        "every rank reports alike"
    );
    assert!(
        messages[0].contains("diverged at insert #2")
            && messages[0].contains("ranks 0, 2 saw shift(")
            && messages[0].contains("rank 1 saw scale("),
        "{}",
        messages[0]
    );
}

#[test]
fn a_rank_that_skips_an_insert_is_found_by_the_check_on_demand() {
    let (out, _) = outcomes(2, config(), |ctx| {
        let x = var(ctx, 1, 0);
        let step = codelet("step");
        for i in 0..10 {
            if ctx.rank() == Rank(1) && i == 7 {
                continue; // rank 1 prunes an insert it should not
            }
            ctx.insert(&step).rw(&x).priority(i).submit().unwrap();
        }
        ctx.check_agreement()
    });
    for o in out {
        let Some(Err(InsertError::Diverged(d))) = o else {
            panic!("expected a divergence, got {o:?}");
        };
        assert_eq!(d.insert, Some(8), "{d:?}");
        assert!(d.seen[0].contains("[priority 7]"), "{d:?}");
        assert!(d.seen[1].contains("[priority 8]"), "{d:?}");
    }
}

#[test]
fn a_datum_registered_with_another_owner_on_one_rank_is_caught_before_it_hangs() {
    // The ranks disagree on who owns `y`: the plans no longer pair up (a receive that no
    // send matches). The check at mpi_wait_for_all reports it instead of waiting forever.
    let start = Instant::now();
    let (out, shutdown) = outcomes(2, config(), |ctx| {
        let x = var(ctx, 1, 0);
        // Rank 0 believes rank 1 owns `y` and waits for it; rank 1 believes rank 0 does.
        let owner = if ctx.rank() == Rank(0) { 1 } else { 0 };
        let y = var(ctx, 2, owner);
        ctx.insert(&codelet("use")).rw(&x).r(&y).submit().unwrap();
        ctx.mpi_wait_for_all()
    });
    for o in out {
        let Some(Err(InsertError::Diverged(d))) = o else {
            panic!("expected a divergence, got {o:?}");
        };
        assert_eq!(d.insert, Some(1));
        assert!(d.message.contains("tag 2 R of rank 1"), "{}", d.message);
    }
    // The unmatched transfer is left behind and explained at shutdown, not waited for.
    let err = shutdown.expect_err("the unmatched transfer is reported");
    assert!(
        err.to_string()
            .contains("why: rank 0 waits for tag 2 from rank 1"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_divergence_found_at_a_barrier_is_reported_at_shutdown() {
    let (out, shutdown) = outcomes(2, config(), |ctx| {
        let x = var(ctx, 1, 0);
        let name = if ctx.rank() == Rank(0) { "a" } else { "b" };
        ctx.insert(&codelet(name)).rw(&x).submit().unwrap();
        ctx.wait_for_all();
        ctx.barrier(); // returns nothing: the divergence stops later inserts
        ctx.insert(&codelet("c")).rw(&x).submit().map(|_| ())
    });
    for o in out {
        assert!(
            matches!(&o, Some(Err(InsertError::Diverged(d))) if d.at == "barrier" && d.insert == Some(1)),
            "{o:?}"
        );
    }
    let err = shutdown.expect_err("the divergence is a leftover");
    assert_eq!(err.leftovers.len(), 2, "one line per rank: {err}");
    assert!(
        matches!(&err.leftovers[0], Leftover::Note { rank: Rank(0), .. }),
        "{err}"
    );
    assert!(
        err.leftovers[0]
            .to_string()
            .starts_with("rank 0: the ranks' task flows diverged at insert #1"),
        "{err}"
    );
}

#[test]
fn with_the_check_off_nothing_is_recorded_or_exchanged() {
    let config = ClusterConfig {
        check_agreement: false,
        ..config()
    };
    let (out, shutdown) = outcomes(2, config, |ctx| {
        let x = var(ctx, 1, 0);
        let name = if ctx.rank() == Rank(0) { "a" } else { "b" };
        ctx.insert(&codelet(name)).rw(&x).submit().unwrap();
        ctx.barrier();
        (ctx.mpi_wait_for_all(), ctx.check_agreement())
    });
    shutdown.expect("a clean shutdown");
    for o in out {
        assert_eq!(o, Some((Ok(()), Ok(()))));
    }
}

// ----- the hang explainer ----------------------------------------------------------------

#[test]
fn a_receive_whose_send_is_missing_returns_the_explanation_instead_of_hanging() {
    let start = Instant::now();
    let (out, shutdown) = outcomes(2, with_watchdog(300), |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            ctx.recv(&h, Rank(1), Tag(17)).wait() // rank 1 never sends it
        } else {
            Ok(())
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let Some(Err(CommError::Stalled { explanation })) = &out[0] else {
        panic!("expected the watchdog's explanation, got {:?}", out[0]);
    };
    assert!(
        explanation.contains("rank 0 waits for tag 17 from rank 1 (into data 0, for 0.")
            && explanation
                .contains("rank 1 never sent it and waits for nothing: its flow has no such send"),
        "{explanation}"
    );
    let err = shutdown.expect_err("the watchdog's finding is returned");
    assert!(matches!(err.leftovers[0], Leftover::Watchdog(_)), "{err}");
    assert!(
        err.leftovers[0]
            .to_string()
            .starts_with("watchdog: nothing progressed for 0."),
        "{err}"
    );
    assert!(
        err.leftovers[1]
            .to_string()
            .starts_with("rank 0 waits for tag 17 from rank 1"),
        "{err}"
    );
}

#[test]
fn two_ranks_waiting_for_each_other_are_named_as_a_deadlock() {
    let (out, shutdown) = outcomes(2, with_watchdog(1000), |ctx| {
        let h = ctx.register(Variable::new(0u32));
        let (from, tag) = if ctx.rank() == Rank(0) {
            (Rank(1), Tag(17))
        } else {
            (Rank(0), Tag(5))
        };
        ctx.recv(&h, from, tag).wait()?; // both receive first: neither sends
        ctx.send(&h, from, tag).wait()
    });
    for o in &out {
        assert!(matches!(o, Some(Err(CommError::Stalled { .. }))), "{o:?}");
    }
    let err = shutdown.expect_err("the watchdog's finding is returned");
    let text = text_of(&err.leftovers);
    assert_eq!(
        err.leftovers[1],
        Leftover::Watchdog("deadlock: rank 0 waits for rank 1, which waits for rank 0".to_owned()),
        "{text}"
    );
    assert!(
        text.contains("rank 1 never sent it: it is itself waiting for tag 5 from rank 0"),
        "{text}"
    );
}

#[test]
fn a_send_with_the_wrong_tag_is_pointed_at() {
    let (out, shutdown) = outcomes(2, with_watchdog(1000), |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            ctx.recv(&h, Rank(1), Tag(17)).wait()
        } else {
            ctx.send(&h, Rank(0), Tag(18)).wait() // a typo
        }
    });
    assert_eq!(out[1], Some(Ok(())));
    let err = shutdown.expect_err("the watchdog's finding is returned");
    let text = text_of(&err.leftovers);
    assert!(
        text.contains(
            "rank 1 never sent it; it sent tag 18 (4 bytes) instead, which rank 0 never received"
        ),
        "{text}"
    );
    // The orphan is still reported as such at shutdown.
    assert!(
        text.contains("rank 0: message from rank 1 with tag 18 (4 bytes) was never received"),
        "{text}"
    );
}

#[test]
fn a_rank_stuck_before_a_barrier_is_named() {
    // With the agreement check on, the ranks wait in the barrier's check.
    for (check, what) in [(false, "a barrier"), (true, "an agreement check")] {
        rank_stuck_before_a_barrier(check, what);
    }
}

fn rank_stuck_before_a_barrier(check: bool, what: &str) {
    let config = ClusterConfig {
        check_agreement: check,
        ..with_watchdog(1000)
    };
    let (out, shutdown) = outcomes(3, config, |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(2) {
            // Waits for a message rank 0 sends only after the barrier.
            ctx.recv(&h, Rank(0), Tag(1)).wait()?;
        }
        ctx.barrier();
        if ctx.rank() == Rank(0) {
            ctx.send(&h, Rank(2), Tag(1)).wait()?;
        }
        Ok::<(), CommError>(())
    });
    assert!(
        matches!(out[2], Some(Err(CommError::Stalled { .. }))),
        "{out:?}"
    );
    let err = shutdown.expect_err("the watchdog's finding is returned");
    let text = text_of(&err.leftovers);
    assert!(
        text.contains(&format!(
            "ranks 0, 1 wait in {what}; rank 2 never entered it (rank 2 waits for tag 1 from rank 0)"
        )),
        "{text}"
    );
    assert_eq!(
        err.leftovers.len(),
        5,
        "the finding, the engine's leftover, no copy per rank: {text}"
    );
    assert!(
        text.contains("deadlock: rank 0 waits for rank 2, which waits for rank 0"),
        "{text}"
    );
}

#[test]
fn a_long_task_is_progress_not_a_hang() {
    let (out, shutdown) = outcomes(2, with_watchdog(200), |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            let slow = Codelet::new("slow", |b| {
                std::thread::sleep(Duration::from_millis(800));
                b.w::<Variable<u32>>(0).set(7);
            });
            ctx.task(&slow).rw(&h).submit();
            ctx.send(&h, Rank(1), Tag(1)).wait()?;
            Ok(7)
        } else {
            ctx.recv(&h, Rank(0), Tag(1)).wait()?;
            Ok(ctx.acquire(&h, AccessMode::R).get().get())
        }
    });
    shutdown.expect("no watchdog finding");
    assert_eq!(out, vec![Some(Ok::<u32, CommError>(7)), Some(Ok(7))]);
}

#[test]
fn blocking_sends_that_leave_at_once_are_progress_not_a_hang() {
    // Rank 0 waits for tag 99 (detached) and meanwhile sends a small value every 50 ms
    // for 600 ms, blocking sends that leave at once without a request; rank 1 takes them
    // only at the end, then sends tag 99. With a watchdog of 300 ms, each send is
    // progress: nothing is given up.
    let (out, shutdown) = outcomes(2, with_watchdog(300), |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            let (tx, rx) = std::sync::mpsc::channel();
            ctx.recv(&h, Rank(1), Tag(99))
                .detach(move |r| tx.send(r).unwrap())?;
            let v = ctx.register(Variable::new(5u32));
            for _ in 0..12 {
                std::thread::sleep(Duration::from_millis(50));
                ctx.send(&v, Rank(1), Tag(1)).wait()?;
            }
            rx.recv().unwrap()?;
            Ok(ctx.acquire(&h, AccessMode::R).get().get())
        } else {
            std::thread::sleep(Duration::from_millis(700));
            for _ in 0..12 {
                ctx.recv(&h, Rank(0), Tag(1)).wait()?;
            }
            ctx.send(&h, Rank(0), Tag(99)).wait()?;
            Ok(0)
        }
    });
    shutdown.expect("no watchdog finding");
    assert_eq!(out, vec![Some(Ok::<u32, CommError>(5)), Some(Ok(0))]);
}

#[test]
fn a_peer_that_dies_leaves_an_explanation_not_a_hang() {
    // Rank 1 panics before sending: rank 0's receive fails once the watchdog gives up,
    // and the panic comes back from run_local_with after every rank stopped.
    let seen = Arc::new(Mutex::new(None));
    let s = Arc::clone(&seen);
    let start = Instant::now();
    let result = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        run_local_with(2, with_watchdog(1000), move |ctx| {
            let h = ctx.register(Variable::new(0u32));
            if ctx.rank() == Rank(1) {
                panic!("rank 1 dies");
            }
            *s.lock().unwrap() = Some(ctx.recv(&h, Rank(1), Tag(4)).wait());
        })
    }));
    assert!(result.is_err(), "the panic is resumed");
    assert!(start.elapsed() < Duration::from_secs(10));
    let got = seen.lock().unwrap().take();
    assert!(
        matches!(&got, Some(Err(CommError::Stalled { explanation }))
            if explanation.contains("rank 0 waits for tag 4 from rank 1")),
        "{got:?}"
    );
}

#[test]
fn hang_explain_merges_a_directory_of_reports() {
    use starling::core::CommId;
    use starling::core::request::State;
    use starling::hang::{Pending, RankReport, Stage, Waiting};
    let dir = std::env::temp_dir().join(format!("starling-hang-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let waits = |rank: u32, peer: u32, tag: i64| RankReport {
        rank: Rank(rank),
        size: 2,
        pending: vec![Pending {
            kind: Waiting::Recv,
            peer: Rank(peer),
            comm: CommId::WORLD,
            tag: Tag(tag),
            data: None,
            stage: Stage::Engine(State::AwaitingEnvelope),
            age: Duration::from_secs(3),
        }],
        orphans: vec![],
    };
    starling::hang::write_report(&dir, &waits(0, 1, 17)).unwrap();
    starling::hang::write_report(&dir, &waits(1, 0, 5)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hang-explain"))
        .arg(&dir)
        .output()
        .expect("hang-explain runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.lines().next(),
        Some("deadlock: rank 0 waits for rank 1, which waits for rank 0"),
        "{text}"
    );
    assert!(
        text.contains("rank 0 waits for tag 17 from rank 1 (for 3.0 s); rank 1 never sent it: it is itself waiting for tag 5 from rank 0"),
        "{text}"
    );
}

// ----- honest reports: refused and queued items, thousands of them -----------------------

#[test]
fn a_message_refused_at_its_receiver_goes_in_ahead_of_receives_waiting_for_room() {
    // Tiny tables (2 receive slots): rank 1's first receive of a message never sent takes
    // a slot, its second may not take the last one (its message is not here) and waits
    // for room; the message rank 0 sends on tag 5 is refused when it arrives (early data
    // never takes the last slot either). Rank 1's receive of it, whose message is here,
    // goes in ahead of the waiting receive and completes: a full table is a wait, never a
    // hang (issue 17). Before that fix this receive stalled behind the never-sent ones;
    // how the hang explainer words a refused message whose receive waits for room is
    // checked in `std-adapter/src/tools/hang/tests.rs`
    // (`a_message_sent_but_refused_at_its_receiver_is_not_blamed_on_its_sender`).
    let config = ClusterConfig {
        tables: Tables::TINY,
        ..with_watchdog(1000)
    };
    let (out, shutdown) = outcomes(2, config, |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(1) {
            let never: Vec<_> = (0..2).map(|_| ctx.register(Variable::new(0u32))).collect();
            for (i, n) in never.iter().enumerate() {
                ctx.recv(n, Rank(0), Tag(100 + i as i64))
                    .detach(|r| {
                        assert!(r.is_err(), "never sent: given up by the watchdog");
                    })
                    .unwrap();
            }
            ctx.barrier();
            std::thread::sleep(Duration::from_millis(100));
            ctx.recv(&h, Rank(0), Tag(5)).wait()
        } else {
            ctx.barrier();
            ctx.send(&h, Rank(1), Tag(5)).wait()
        }
    });
    assert_eq!(out[0], Some(Ok(())), "an eager send completes");
    assert_eq!(
        out[1],
        Some(Ok(())),
        "its receive went in ahead and completed"
    );
    let err = shutdown.expect_err("the watchdog's finding is returned");
    let text = text_of(&err.leftovers);
    // Only the never-sent receives are left; the message on tag 5 is not.
    assert!(!text.contains("tag 5 "), "{text}");
    assert!(!text.contains("deadlock"), "{text}");
    assert!(
        text.contains("rank 1: Recv with rank 0 and tag 100 never completed"),
        "{text}"
    );
    assert!(
        text.contains(
            "rank 1: Recv with rank 0 and tag 101 never reached the engine (it waited for room \
             in the engine's tables)"
        ),
        "{text}"
    );
}

#[test]
fn a_hang_with_thousands_of_stuck_receives_is_summarised_and_listed_in_a_file() {
    const N: i64 = 5_000;
    let dir = std::env::temp_dir().join(format!("starling-verify-hang-{}", std::process::id()));
    // (The explainer writes its full list where STARLING_HANG_DIR says, else in the
    // temporary directory: this test reads the path it prints.)
    let (out, shutdown) = outcomes(2, with_watchdog(1000), |ctx| {
        if ctx.rank() == Rank(1) {
            let hs: Vec<_> = (0..N).map(|_| ctx.register(Variable::new(0u32))).collect();
            for (i, h) in hs.iter().enumerate() {
                ctx.recv(h, Rank(0), Tag(i as i64))
                    .detach(|r| {
                        assert!(r.is_err(), "never sent: given up by the watchdog");
                    })
                    .unwrap();
            }
            ctx.wait_for_all();
        }
    });
    assert_eq!(out, vec![Some(()), Some(())]);
    let err = shutdown.expect_err("the watchdog's finding is returned");
    // The watchdog's report leads, in a few lines, and names where the full list is.
    let listed = err
        .leftovers
        .iter()
        .position(|l| matches!(l, Leftover::Watchdog(t) if t.starts_with("the full list (")))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(listed < 30, "{:#?}", &err.leftovers[..listed + 1]);
    let head = text_of(&err.leftovers[..=listed]);
    assert!(
        err.leftovers[0]
            .to_string()
            .starts_with("watchdog: nothing progressed"),
        "{head}"
    );
    assert!(
        head.contains("5000 like this; the first: rank 1 waits for tag 0 from rank 0")
            && head.contains("  … the last: rank 1 waits for tag 4999 from rank 0"),
        "{head}"
    );
    let path = err.leftovers[listed]
        .to_string()
        .split_once("findings): ")
        .map(|(_, p)| p.to_owned())
        .unwrap_or_else(|| panic!("{head}"));
    let kept = std::fs::read_to_string(&path).expect("the full list is written");
    assert_eq!(kept.lines().count(), N as usize, "{path}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&dir);
    // The error's text stays short whatever it holds.
    assert!(err.leftovers.len() > N as usize);
    assert!(err.to_string().len() < 8_000, "{}", err.to_string().len());
}
