//! Insert-task scenarios of the reference's test suite (`test-catalogue.md`), on the
//! in-process cluster with 2, 3 and 4 ranks. Each test names the reference test it ports.

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use starling::PolicyId;
use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{
    AnyHandle, ClusterConfig, Codelet, Context, Handle, InsertError, RuntimeConfig, run_fake,
    run_local_with,
};

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        stats: true,
        ..ClusterConfig::default()
    }
}

fn run<R: Send + 'static>(n: u32, f: impl Fn(&Context) -> R + Send + Sync + 'static) -> Vec<R> {
    run_local_with(n, config(), f).expect("a clean shutdown")
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

/// A codelet that records the rank it ran on.
fn probe(log: &Arc<Mutex<Vec<u32>>>, rank: Rank) -> Codelet {
    let log = Arc::clone(log);
    Codelet::new("probe", move |_| log.lock().unwrap().push(rank.0))
}

#[test]
fn the_executor_follows_the_reference_rules() {
    // `insert_task_owner`, `insert_task_node_choice`, `policy_selection`.
    let out = run(3, |ctx| {
        let a = var(ctx, 1, 0, 1);
        let b = var(ctx, 2, 1, 2);
        let c = var(ctx, 3, 2, 3);
        let log = Arc::new(Mutex::new(Vec::new()));
        let p = probe(&log, ctx.rank());
        let executors = vec![
            // The owner of the written datum.
            ctx.insert(&p).rw(&b).r(&a).submit().unwrap().executor,
            // Explicit node, explicit data.
            ctx.insert(&p)
                .rw(&b)
                .on_node(Rank(2))
                .submit()
                .unwrap()
                .executor,
            ctx.insert(&p)
                .r(&a)
                .rw(&b)
                .on_data(&c)
                .submit()
                .unwrap()
                .executor,
            // Written data of several owners: the policy. Most R data: a and b score 8
            // bytes (written), c 16 (read and written): rank 2. A three-way tie: rank 0.
            ctx.insert(&p).w(&a).w(&b).rw(&c).submit().unwrap().executor,
            ctx.insert(&p).w(&a).w(&b).r(&c).submit().unwrap().executor,
            // Nothing written, nothing read: rank 0.
            ctx.insert(&p).submit().unwrap().executor,
        ];
        ctx.wait_for_all();
        let ran = log.lock().unwrap().len();
        (executors, ran)
    });
    let expected = vec![
        Some(Rank(1)),
        Some(Rank(2)),
        Some(Rank(2)),
        Some(Rank(2)),
        Some(Rank(0)),
        Some(Rank(0)),
    ];
    for (executors, _) in &out {
        assert_eq!(executors, &expected);
    }
    // Every task ran exactly once, on its executor.
    let ran: Vec<usize> = out.iter().map(|(_, n)| *n).collect();
    assert_eq!(ran, vec![2, 1, 3]);
}

#[test]
fn a_remote_rw_is_written_back_to_its_owner() {
    // `insert_task_compute`, `insert_task_owner2`: x0 = x0 · x1 run on the other node,
    // through insert and through build/post_build.
    for on in [0u32, 1] {
        for use_build in [false, true] {
            let out = run(2, move |ctx| {
                let x0 = var(ctx, 10, 0, 11);
                let x1 = var(ctx, 11, 1, 20);
                let mul = Codelet::new("mul", |b| {
                    let v = b.r::<Variable<i64>>(1).get();
                    let mut x = b.w::<Variable<i64>>(0);
                    let x0 = x.get();
                    x.set(x0 * v);
                });
                let insert = ctx.insert(&mul).rw(&x0).r(&x1).on_node(Rank(on));
                if use_build {
                    let (built, post) = insert.build().unwrap();
                    assert_eq!(built.task.is_some(), ctx.rank() == Rank(on));
                    if let Some(t) = built.task {
                        t.submit();
                    }
                    post.finish();
                } else {
                    insert.submit().unwrap();
                }
                ctx.wait_for_all();
                if ctx.rank() == Rank(0) {
                    value(ctx, &x0)
                } else {
                    value(ctx, &x1)
                }
            });
            assert_eq!(out, vec![220, 20], "on node {on}, build {use_build}");
        }
    }
}

#[test]
fn several_written_owners_each_get_their_value_back() {
    // `policy_selection2`: (R h2, W h0, W h1) runs on one node; h0 and h1 go back home.
    let out = run(3, |ctx| {
        let h0 = var(ctx, 0, 0, 0);
        let h1 = var(ctx, 1, 1, 0);
        let h2 = var(ctx, 2, 2, 12);
        let copy = Codelet::new("copy", |b| {
            let v = b.r::<Variable<i64>>(0).get();
            b.w::<Variable<i64>>(1).set(v);
            b.w::<Variable<i64>>(2).set(v + 1);
        });
        ctx.insert(&copy).r(&h2).w(&h0).w(&h1).submit().unwrap();
        ctx.insert(&copy)
            .r(&h2)
            .w(&h0)
            .w(&h1)
            .on_node(Rank(1))
            .submit()
            .unwrap();
        ctx.wait_for_all();
        match ctx.rank().0 {
            0 => value(ctx, &h0),
            1 => value(ctx, &h1),
            _ => value(ctx, &h2),
        }
    });
    assert_eq!(out, vec![12, 13, 12]);
}

#[test]
fn the_cache_halves_the_traffic_and_a_flush_frees_the_copy() {
    // `insert_task_recv_cache`, `insert_task_sent_cache`, `cache/cache`: exact bytes.
    let bytes = |cache: bool| {
        run(2, move |ctx| {
            ctx.set_cache_enabled(cache);
            let h0 = ctx
                .register_owned(Tag(0), Owner::Rank(Rank(0)), || {
                    Vector::from_vec(vec![1u32; 1000])
                })
                .unwrap();
            let h1 = ctx
                .register_owned(Tag(1), Owner::Rank(Rank(1)), || {
                    Vector::from_vec(vec![2u32; 1000])
                })
                .unwrap();
            let touch = Codelet::new("touch", |b| {
                let v = b.r::<Vector<u32>>(1).as_slice()[0];
                b.w::<Vector<u32>>(0).as_mut_slice()[0] += v;
            });
            for _ in 0..2 {
                ctx.insert(&touch).rw(&h0).r(&h1).submit().unwrap();
            }
            let cached = ctx.cached_receive(&h1);
            ctx.flush(&h1);
            let after_flush = ctx.cached_receive(&h1);
            for _ in 0..2 {
                ctx.insert(&touch).rw(&h0).r(&h1).submit().unwrap();
            }
            ctx.wait_for_all();
            (
                ctx.comm_amounts().expect("statistics are on"),
                cached,
                after_flush,
            )
        })
    };
    let with = bytes(true);
    let without = bytes(false);
    // With the cache: h1 (4000 bytes) goes to rank 0 once, then once more after the flush.
    assert_eq!(with[1].0, vec![8000, 0]);
    assert_eq!(
        without[1].0,
        vec![16000, 0],
        "without the cache every read re-sends"
    );
    assert!(
        with[0].1 && !with[0].2,
        "rank 0 held a cached copy until the flush"
    );
}

#[test]
fn repeated_remote_rw_with_synchronous_sends_counts_every_round() {
    // `insert_task_count`: N inserts RW on node 0 of a token owned by 1, alternating plain
    // and SSEND.
    let out = run(2, |ctx| {
        let token = var(ctx, 5, 1, 0);
        let inc = Codelet::new("inc", |b| {
            let mut t = b.w::<Variable<i64>>(0);
            let v = t.get();
            t.set(v + 1);
        });
        for i in 0..20 {
            let mode = if i % 2 == 0 {
                AccessMode::RW
            } else {
                AccessMode::RW | AccessMode::SSEND
            };
            ctx.insert(&inc)
                .access(&token, mode)
                .on_node(Rank(0))
                .submit()
                .unwrap();
        }
        ctx.wait_for_all();
        (ctx.rank().0 == 1).then(|| value(ctx, &token))
    });
    assert_eq!(out[1], Some(20));
}

#[test]
fn execute_on_data_follows_a_moving_rw_datum() {
    // `insert_task_owner_data`, `matrix`: x0 += 1 and x1 *= x1 on x1's owner.
    let out = run(2, |ctx| {
        let x0 = var(ctx, 0, 0, 11);
        let x1 = var(ctx, 1, 1, 12);
        let cl = Codelet::new("cl", |b| {
            let mut a = b.w::<Variable<i64>>(0);
            let v = a.get();
            a.set(v + 1);
            let mut c = b.w::<Variable<i64>>(1);
            let w = c.get();
            c.set(w * w);
        });
        let inserted = ctx
            .insert(&cl)
            .rw(&x0)
            .rw(&x1)
            .on_data(&x1)
            .submit()
            .unwrap();
        ctx.get_data_on_node(&x1, Rank(0)).unwrap();
        ctx.wait_for_all();
        let v0 = if ctx.rank() == Rank(0) {
            (value(ctx, &x0), value(ctx, &x1))
        } else {
            (0, 0)
        };
        (inserted.executor, v0)
    });
    assert_eq!(out[0], (Some(Rank(1)), (12, 144)));
}

#[test]
fn temporary_and_per_node_data() {
    // `temporary`: a datum known on rank 0 only, used by tasks run on rank 0; per-node data
    // written by a task that runs on every rank, with no transfer.
    let out = run(2, |ctx| {
        let shared = var(ctx, 1, 1, 12);
        let tmp = (ctx.rank() == Rank(0)).then(|| {
            ctx.register_owned(Tag(2), Owner::Rank(Rank(0)), || Variable::new(0i64))
                .unwrap()
        });
        let copy = Codelet::new("copy", |b| {
            let v = b.r::<Variable<i64>>(1).get();
            b.w::<Variable<i64>>(0).set(2 * v);
        });
        ctx.insert(&copy)
            .access_opt(tmp.as_ref(), AccessMode::W)
            .r(&shared)
            .on_node(Rank(0))
            .submit()
            .unwrap();
        let pernode = ctx
            .register_owned(Tag(3), Owner::PerNode, || Variable::new(0i64))
            .unwrap();
        let rank = ctx.rank().0 as i64;
        let set = Codelet::new("set", move |b| b.w::<Variable<i64>>(0).set(100 + rank));
        let inserted = ctx.insert(&set).w(&pernode).submit().unwrap();
        ctx.wait_for_all();
        let t = tmp.map(|t| value(ctx, &t));
        (
            t,
            value(ctx, &pernode),
            inserted.executed_here,
            inserted.transfers,
        )
    });
    // The per-node insert runs on every rank and moves nothing.
    assert_eq!(out[0], (Some(24), 100, true, 0));
    assert_eq!(out[1], (None, 101, true, 0));
}

#[test]
fn a_distributed_dot_product_reduces_contributions_flat_and_as_a_tree() {
    // `mpi_reduction`, `mpi_redux`: every rank adds its blocks into a REDUX datum.
    for arity in [0usize, 2] {
        let out = run(4, move |ctx| {
            let dot = var(ctx, 1000, 0, 14);
            let blocks: Vec<_> = (0..8).map(|i| var(ctx, i, (i % 4) as u32, i + 1)).collect();
            let add = Codelet::new("add", |b| {
                let v = b.r::<Variable<i64>>(0).get();
                let mut d = b.w::<Variable<i64>>(1);
                let x = d.get();
                d.set(x + v);
            });
            let init = Codelet::new("zero", |b| b.w::<Variable<i64>>(0).set(0));
            // combine(acc RW, contribution R): note the order of its buffers.
            let combine = Codelet::new("combine", move |b| {
                let v = b.r::<Variable<i64>>(1).get();
                let mut acc = b.w::<Variable<i64>>(0);
                let x = acc.get();
                acc.set(x + v);
            });
            ctx.set_reduction_methods(&dot, &combine, &init);
            for blk in &blocks {
                ctx.insert(&add)
                    .r(blk)
                    .redux(&dot)
                    .on_data(blk)
                    .submit()
                    .unwrap();
            }
            ctx.redux(&dot, arity).unwrap();
            ctx.wait_for_all();
            (ctx.rank() == Rank(0)).then(|| value(ctx, &dot))
        });
        assert_eq!(out[0], Some(14 + 36), "arity {arity}");
    }
}

#[test]
fn scatter_then_gather_with_callbacks() {
    // `mpi_scatter_gather`: 10 vectors on rank 0, value x + 10, owned by x % size after
    // scatter; owners multiply by rank + 2; gathered back.
    let out = run(3, |ctx| {
        let size = ctx.size();
        let hs: Vec<_> = (0..10)
            .map(|x| {
                let h = ctx.register(Variable::new(if ctx.rank() == Rank(0) {
                    x + 10
                } else {
                    0
                }));
                ctx.mpi_register(&h, Tag(x), Owner::Rank(Rank(0))).unwrap();
                h
            })
            .collect();
        for (x, h) in hs.iter().enumerate() {
            ctx.set_data_owner(h, Owner::Rank(Rank(x as u32 % size)))
                .unwrap();
        }
        let any: Vec<AnyHandle> = hs.iter().map(AnyHandle::from).collect();
        let fired = Arc::new(AtomicUsize::new(0));
        let (f1, f2) = (Arc::clone(&fired), Arc::clone(&fired));
        ctx.scatter_detached(
            &any,
            Rank(0),
            move || {
                f1.fetch_add(1, Ordering::SeqCst);
            },
            move || {
                f2.fetch_add(1, Ordering::SeqCst);
            },
        )
        .unwrap();
        let factor = i64::from(ctx.rank().0) + 2;
        let mul = Codelet::new("mul", move |b| {
            let mut v = b.w::<Variable<i64>>(0);
            let x = v.get();
            v.set(x * factor);
        });
        for h in &hs {
            if ctx.data_owner(h) == Some(Owner::Rank(ctx.rank())) {
                ctx.task(&mul).rw(h).submit();
            }
        }
        let (g1, g2) = (Arc::clone(&fired), Arc::clone(&fired));
        ctx.gather_detached(
            &any,
            Rank(0),
            move || {
                g1.fetch_add(1, Ordering::SeqCst);
            },
            move || {
                g2.fetch_add(1, Ordering::SeqCst);
            },
        )
        .unwrap();
        ctx.wait_for_all();
        let values: Vec<i64> = if ctx.rank() == Rank(0) {
            hs.iter().map(|h| value(ctx, h)).collect()
        } else {
            Vec::new()
        };
        (values, fired.load(Ordering::SeqCst))
    });
    let expected: Vec<i64> = (0..10).map(|x| (x + 10) * (x % 3 + 2)).collect();
    assert_eq!(out[0].0, expected);
    assert!(
        out.iter().all(|(_, fired)| *fired == 2),
        "each side's callback fired once per collective"
    );
}

#[test]
fn migration_and_distributed_copy() {
    // `mpi_data_cpy`, `stencil5`'s migration: move a datum, copy between owners.
    let out = run(3, |ctx| {
        let a = var(ctx, 1, 0, 5);
        let b = var(ctx, 2, 2, 0);
        let inc = Codelet::new("inc", |b| {
            let mut x = b.w::<Variable<i64>>(0);
            let v = x.get();
            x.set(v + 1);
        });
        ctx.insert(&inc).rw(&a).submit().unwrap(); // 6 on rank 0
        ctx.migrate(&a, Rank(1)).unwrap();
        ctx.insert(&inc).rw(&a).submit().unwrap(); // 7, now on rank 1
        ctx.data_cpy(&b, &a).unwrap(); // b = 7 on rank 2
        ctx.wait_for_all();
        let owner = ctx.data_owner(&a);
        let v = match ctx.rank().0 {
            1 => value(ctx, &a),
            2 => value(ctx, &b),
            _ => 0,
        };
        (owner, v)
    });
    assert_eq!(out[1], (Some(Owner::Rank(Rank(1))), 7));
    assert_eq!(out[2].1, 7);
}

#[test]
fn tags_near_i64_max_work() {
    // `insert_task_tags`.
    let out = run(2, |ctx| {
        let a = var(ctx, i64::MAX - 1, 0, 3);
        let b = var(ctx, i64::MAX - 2, 1, 4);
        let add = Codelet::new("add", |bf| {
            let v = bf.r::<Variable<i64>>(1).get();
            let mut x = bf.w::<Variable<i64>>(0);
            let w = x.get();
            x.set(w + v);
        });
        ctx.insert(&add).rw(&a).r(&b).submit().unwrap();
        ctx.insert(&add).rw(&b).r(&a).submit().unwrap();
        ctx.wait_for_all();
        if ctx.rank() == Rank(0) {
            value(ctx, &a)
        } else {
            value(ctx, &b)
        }
    });
    assert_eq!(out, vec![7, 11]);
}

#[test]
fn fake_rank_2_of_1024_completes_with_zero_messages() {
    let mut config = config();
    config.runtime.disable_kernels = true;
    let (inserted, amounts) = run_fake(Rank(2), 1024, config, |ctx| {
        assert_eq!((ctx.rank(), ctx.size()), (Rank(2), 1024));
        let hs: Vec<_> = (0..64).map(|i| var(ctx, i, (i % 1024) as u32, 0)).collect();
        let cl = Codelet::new("never", |_| panic!("kernels are disabled"));
        let mut n = 0;
        for i in 1..63 {
            let ins = ctx
                .insert(&cl)
                .rw(&hs[i])
                .r(&hs[i - 1])
                .r(&hs[i + 1])
                .submit()
                .unwrap();
            n += usize::from(ins.executed_here);
        }
        ctx.wait_for_all();
        (n, ctx.comm_amounts().expect("statistics are on"))
    })
    .unwrap();
    assert_eq!(inserted, 1, "rank 2 runs the task of tile 2 only");
    assert_eq!(amounts.iter().sum::<u64>(), 0, "no message at all");
}

#[test]
fn the_policy_registry_reports_its_limits_as_errors() {
    // `policy_register`, `policy_register_many`, `policy_register_toomany`,
    // `policy_unregister`.
    let out = run(2, |ctx| {
        fn second_owner(_me: Rank, _n: u32, accesses: &[starling::PolicyAccess]) -> Rank {
            accesses
                .get(1)
                .and_then(|a| a.owner.rank())
                .unwrap_or(Rank(0))
        }
        let a = var(ctx, 1, 0, 0);
        let b = var(ctx, 2, 1, 0);
        let p = ctx.register_policy(second_owner).unwrap();
        let cl = Codelet::empty("nothing");
        let chosen = ctx
            .insert(&cl)
            .w(&a)
            .w(&b)
            .policy(p)
            .submit()
            .unwrap()
            .executor;
        ctx.set_current_policy(p).unwrap();
        let current = ctx.insert(&cl).w(&a).w(&b).submit().unwrap().executor;
        let builtin = ctx.unregister_policy(PolicyId::MOST_R_DATA);
        let mut registered = vec![p];
        let full = loop {
            match ctx.register_policy(second_owner) {
                Ok(id) => registered.push(id),
                Err(e) => break e,
            }
        };
        ctx.wait_for_all();
        (chosen, current, builtin.is_err(), registered.len(), full)
    });
    assert_eq!(
        out[0],
        (
            Some(Rank(1)),
            Some(Rank(1)),
            true,
            23,
            InsertError::PoliciesFull
        )
    );
}

#[test]
fn a_byte_budget_evicts_least_recently_used_copies_without_breaking_agreement() {
    // Beyond the reference (internals §12.14): reading 8 remote 4 KiB tiles with a 10 KiB
    // budget keeps at most 2 copies; the flow still computes the right sum.
    let out = run(2, |ctx| {
        ctx.set_cache_budget(Some(10 * 1024));
        let tiles: Vec<_> = (0..8)
            .map(|i| {
                ctx.register_owned(Tag(i), Owner::Rank(Rank(1)), move || {
                    Vector::from_vec(vec![i as u32; 1024])
                })
                .unwrap()
            })
            .collect();
        let acc = ctx
            .register_owned(Tag(100), Owner::Rank(Rank(0)), || Variable::new(0u64))
            .unwrap();
        let add = Codelet::new("add", |b| {
            let s: u64 = b
                .r::<Vector<u32>>(1)
                .as_slice()
                .iter()
                .map(|v| u64::from(*v))
                .sum();
            let mut a = b.w::<Variable<u64>>(0);
            let x = a.get();
            a.set(x + s);
        });
        for _round in 0..2 {
            for t in &tiles {
                ctx.insert(&add).rw(&acc).r(t).submit().unwrap();
            }
        }
        ctx.wait_for_all();
        let cached = tiles.iter().filter(|t| ctx.cached_receive(t)).count();
        let sum = (ctx.rank() == Rank(0)).then(|| ctx.acquire(&acc, AccessMode::R).get().get());
        (cached, sum, ctx.comm_amounts().expect("statistics are on"))
    });
    let per_round: u64 = (0..8u64).map(|i| i * 1024).sum();
    assert_eq!(out[0].1, Some(2 * per_round));
    assert!(
        out[0].0 <= 2,
        "at most 2 copies of 4 KiB fit 10 KiB: {}",
        out[0].0
    );
    // Evicted copies were fetched again in the second round: 16 transfers of 4 KiB.
    assert_eq!(out[1].2, vec![16 * 4096, 0]);
}

#[test]
fn the_manual_exchange_pair_equals_an_insert() {
    // `mpi_task_submit`: a hand-built task between exchange-before and exchange-after
    // gives the same values and the same traffic as the insert.
    let run_one = |manual: bool| {
        run(2, move |ctx| {
            let x0 = var(ctx, 0, 0, 3);
            let x1 = var(ctx, 1, 1, 4);
            let mul = Codelet::new("mul", |b| {
                let v = b.r::<Variable<i64>>(1).get();
                let mut x = b.w::<Variable<i64>>(0);
                let w = x.get();
                x.set(w * v);
            });
            if manual {
                let (inserted, after) = ctx
                    .insert(&Codelet::empty("unused"))
                    .rw(&x0)
                    .r(&x1)
                    .on_node(Rank(1))
                    .exchange_before()
                    .unwrap();
                if inserted.executed_here {
                    ctx.task(&mul).rw(&x0).r(&x1).submit();
                }
                after.finish();
            } else {
                ctx.insert(&mul)
                    .rw(&x0)
                    .r(&x1)
                    .on_node(Rank(1))
                    .submit()
                    .unwrap();
            }
            ctx.wait_for_all();
            let v = if ctx.rank() == Rank(0) {
                value(ctx, &x0)
            } else {
                value(ctx, &x1)
            };
            (v, ctx.comm_amounts().expect("statistics are on"))
        })
    };
    let manual = run_one(true);
    assert_eq!(manual, run_one(false));
    assert_eq!(manual[0].0, 12);
    assert_eq!(
        (manual[0].1.clone(), manual[1].1.clone()),
        (vec![0, 8], vec![8, 0])
    );
}

#[test]
fn cache_events_are_printed_when_asked() {
    // STARLING_MPI_CACHE_STATS=1 prints "+"/"-" lines; checked by running a child
    // process of this test binary with the variable set (it cannot be set in-process).
    if std::env::var("STARLING_CACHE_STATS_CHILD").is_ok() {
        let _ = run(2, |ctx| {
            let a = var(ctx, 0, 0, 1);
            let b = var(ctx, 1, 1, 2);
            let cl = Codelet::empty("read");
            ctx.insert(&cl).rw(&a).r(&b).submit().unwrap();
            ctx.flush(&b);
            ctx.wait_for_all();
        });
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "cache_events_are_printed_when_asked",
            "--exact",
            "--nocapture",
        ])
        .env("STARLING_CACHE_STATS_CHILD", "1")
        .env("STARLING_MPI_CACHE_STATS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("[starling_mpi_cache][0] + 8 bytes of data 1"),
        "{err}"
    );
    assert!(
        err.contains("[starling_mpi_cache][0] - data 1 (flushed)"),
        "{err}"
    );
}

#[test]
fn with_the_cache_off_fetched_and_migrated_data_stay_where_they_were_brought() {
    let out = run(2, |ctx| {
        ctx.set_cache_enabled(false);
        let a = var(ctx, 1, 0, 42);
        ctx.get_data_on_node(&a, Rank(1)).unwrap();
        let seen = (ctx.rank() == Rank(1)).then(|| value(ctx, &a));
        let b = var(ctx, 2, 0, 7);
        ctx.migrate(&b, Rank(1)).unwrap();
        ctx.wait_for_all();
        let migrated = (ctx.rank() == Rank(1)).then(|| value(ctx, &b));
        (seen, migrated)
    });
    assert_eq!(out[1], (Some(42), Some(7)));
}

#[test]
fn mpi_wait_for_all_wraps_up_pending_reductions() {
    // `mpi_redux_autowrapup`: contributions on every rank, no explicit redux call.
    let out = run(3, |ctx| {
        let sum = var(ctx, 100, 1, 1);
        let parts: Vec<_> = (0..6)
            .map(|i| var(ctx, i, (i % 3) as u32, i * 10))
            .collect();
        let add = Codelet::new("add", |b| {
            let v = b.r::<Variable<i64>>(1).get();
            let mut acc = b.w::<Variable<i64>>(0);
            let x = acc.get();
            acc.set(x + v);
        });
        let zero = Codelet::new("zero", |b| b.w::<Variable<i64>>(0).set(0));
        ctx.set_reduction_methods(&sum, &add, &zero);
        for p in &parts {
            ctx.insert(&add)
                .redux(&sum)
                .r(p)
                .on_data(p)
                .submit()
                .unwrap();
        }
        ctx.mpi_wait_for_all().unwrap();
        (ctx.rank() == Rank(1)).then(|| value(ctx, &sum))
    });
    assert_eq!(out[1], Some(1 + 150));
}

#[test]
fn fetched_copies_are_never_evicted_by_the_byte_budget() {
    let out = run(2, |ctx| {
        ctx.set_cache_budget(Some(8));
        let a = var(ctx, 1, 1, 42);
        let b = var(ctx, 2, 1, 7);
        ctx.get_data_on_node(&a, Rank(0)).unwrap();
        ctx.get_data_on_node(&b, Rank(0)).unwrap();
        ctx.wait_for_all();
        (ctx.rank() == Rank(0)).then(|| (value(ctx, &a), value(ctx, &b)))
    });
    assert_eq!(out[0], Some((42, 7)));
}

#[test]
fn unregistering_a_datum_frees_its_cache_entries_without_a_flush() {
    // The reference's `starpu_data_unregister` clears the datum's cache entries
    // (`_starpu_mpi_cache_data_clear`): an application that registers a temporary datum
    // per iteration, reads it remotely and unregisters it, never flushing, keeps caching.
    // With a bound of 2 entries per pair, entries left behind by unregistered data would
    // fill it after two iterations, and every later datum would travel once per read.
    const ITERATIONS: i64 = 6;
    const READS: i64 = 3;
    let out = run(2, |ctx| {
        ctx.set_cache_pair_limit(2);
        let acc = var(ctx, 1_000, 1, 0);
        let add = Codelet::new("add", |b| {
            let v = b.r::<Variable<i64>>(1).get();
            let mut acc = b.w::<Variable<i64>>(0);
            let x = acc.get();
            acc.set(x + v);
        });
        for i in 0..ITERATIONS {
            let tmp = var(ctx, i, 0, i + 1);
            for _ in 0..READS {
                ctx.insert(&add).rw(&acc).r(&tmp).submit().unwrap();
            }
            ctx.wait_for_all();
            ctx.unregister(tmp);
        }
        ctx.wait_for_all();
        let sum = (ctx.rank() == Rank(1)).then(|| value(ctx, &acc));
        (ctx.comm_amounts().expect("statistics are on"), sum)
    });
    // Rank 1 read each temporary datum READS times; 1 + 2 + … + ITERATIONS each time.
    let expected = READS * ITERATIONS * (ITERATIONS + 1) / 2;
    assert_eq!(out[1].1, Some(expected));
    // Each datum (8 bytes) went from rank 0 to rank 1 once: every iteration cached.
    assert_eq!(
        out[0].0,
        vec![0, 8 * ITERATIONS as u64],
        "a datum travelled more than once: unregistered data still held cache entries"
    );
}
