//! Partitioning (`starpu_data_partition` / `starpu_data_unpartition`) through the facade:
//! the reference's `partition` test (`mpi/tests/partition.c`) on 2 and 4 in-process ranks,
//! the implicit dependencies both ways, children in the insert flow and in point-to-point
//! transfers, the filters' sizes, and the typed refusals of a partitioned parent.

use core::time::Duration;
use std::sync::{Arc, Mutex};

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Matrix, Vector};
use starling::partition::{MatrixBlock, MatrixVerticalBlock, VectorBlock, VectorList};
use starling::{
    ClusterConfig, Codelet, CommError, Context, FilterError, InsertError, PartitionError,
    RuntimeConfig, TagChoice, run_local_with,
};

fn run<R: Send + 'static>(
    n: u32,
    workers: usize,
    f: impl Fn(&Context) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    };
    run_local_with(n, config, f).expect("a clean shutdown")
}

/// The reference's `partition` test, written as it writes it: a 1 MiB byte vector
/// registered on rank 0, migrated to rank 1, partitioned there in 16 parts owned by
/// rank 1 (tags 1..=16), each part written by a memset task on its owner (the odd parts on
/// rank 2 when there are 3 ranks or more, "just for fun"), and checked from rank 0.
/// (The reference leaves the unpartition implicit, with `starpu_data_partition_plan`: a
/// task on the parent unpartitions it. Here it is one call, every rank at the same point.)
fn reference_partition_test(ranks: u32) {
    const SIZE: usize = 1 << 20;
    const NPARTS: usize = 16;
    let out = run(ranks, 2, |ctx| {
        let size = ctx.size();
        // Initial data on rank 0 (allocated on first use elsewhere).
        let handle = ctx
            .register_owned(Tag(0), Owner::Rank(Rank(0)), || Vector::<u8>::zeros(SIZE))
            .unwrap();
        // Migrate it to 1.
        ctx.migrate(&handle, Rank(1)).unwrap();
        // Partition it there.
        let handles = ctx
            .partition(&handle, &VectorBlock { parts: NPARTS })
            .unwrap();
        for (i, h) in handles.iter().enumerate() {
            ctx.mpi_register(h, Tag(i as i64 + 1), Owner::Rank(Rank(1)))
                .unwrap();
        }
        // Initialize the pieces.
        let memset = Codelet::new("memset", |b| b.w::<Vector<u8>>(0).as_mut_slice().fill(42));
        let mut executors = Vec::new();
        for (i, h) in handles.iter().enumerate() {
            let insert = if size >= 3 && i % 2 == 1 {
                ctx.insert(&memset).w(h).on_node(Rank(2))
            } else {
                ctx.insert(&memset).w(h)
            };
            executors.push(insert.submit().unwrap().executor);
        }
        ctx.unpartition(&handle).unwrap();
        // Check it from somewhere else.
        let checked = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&checked);
        let me = ctx.rank();
        let check = Codelet::new("memset_check_content", move |b| {
            let v = b.r::<Vector<u8>>(0);
            *seen.lock().unwrap() = Some((
                me,
                v.len(),
                v.as_slice().iter().filter(|&&x| x != 42).count(),
            ));
        });
        ctx.insert(&check)
            .r(&handle)
            .on_node(Rank(0))
            .submit()
            .unwrap();
        // Clean up.
        drop(ctx.unregister(handle));
        let checked = *checked.lock().unwrap();
        (executors, checked)
    });
    for (r, (executors, checked)) in out.iter().enumerate() {
        for (i, e) in executors.iter().enumerate() {
            let expected = if ranks >= 3 && i % 2 == 1 { 2 } else { 1 };
            assert_eq!(*e, Some(Rank(expected)), "rank {r}: part {i}'s executor");
        }
        if r == 0 {
            assert_eq!(
                *checked,
                Some((Rank(0), SIZE, 0)),
                "every byte == 42, checked on rank 0"
            );
        } else {
            assert_eq!(*checked, None, "the check ran on rank 0 only");
        }
    }
}

#[test]
fn the_reference_partition_test_on_2_ranks() {
    reference_partition_test(2);
}

#[test]
fn the_reference_partition_test_on_4_ranks() {
    reference_partition_test(4);
}

/// A codelet that waits a little, then runs `f` on access 0 (so that an access ordered
/// wrongly would overtake it).
fn slow(name: &str, f: impl Fn(&mut Vector<u64>) + Send + Sync + 'static) -> Codelet {
    Codelet::new(name, move |b| {
        std::thread::sleep(Duration::from_millis(20));
        f(&mut b.w::<Vector<u64>>(0));
    })
}

#[test]
fn partition_waits_for_the_parent_and_unpartition_for_the_children() {
    let out = run(1, 4, |ctx| {
        let v = ctx.register(Vector::<u64>::zeros(100));
        // Before the partition: a slow task writes the parent.
        let fill = slow("fill", |v| {
            for (i, x) in v.as_mut_slice().iter_mut().enumerate() {
                *x = i as u64;
            }
        });
        ctx.task(&fill).w(&v).submit();
        let parts = ctx.partition(&v, &VectorBlock { parts: 7 }).unwrap();
        // The children's tasks see the parent's value: each doubles its piece, slowly.
        let double = slow("double", |v| {
            v.as_mut_slice().iter_mut().for_each(|x| *x *= 2)
        });
        for p in &parts {
            ctx.task(&double).rw(p).submit();
        }
        ctx.unpartition(&v).unwrap();
        // After the unpartition: a task on the parent sees every child's write.
        let sum = Arc::new(Mutex::new(0));
        let total = Arc::clone(&sum);
        let add = Codelet::new("sum", move |b| {
            *total.lock().unwrap() = b.r::<Vector<u64>>(0).as_slice().iter().sum::<u64>();
        });
        ctx.task(&add).r(&v).submit();
        ctx.wait_for_all();
        let whole = ctx.acquire(&v, AccessMode::R).get().as_slice().to_vec();
        let sum = *sum.lock().unwrap();
        (whole, sum)
    });
    let (whole, sum) = &out[0];
    assert_eq!(*whole, (0..100).map(|i| 2 * i).collect::<Vec<u64>>());
    assert_eq!(*sum, 2 * (0..100).sum::<u64>());
}

#[test]
fn children_travel_the_insert_flow_to_their_owners_and_back() {
    // The parent lives on rank 0; its children are registered there, migrate to their
    // owners, are updated where they live, come back and are gathered on rank 0. Rank 1
    // read the parent before (a cached copy): after the unpartition it reads it again,
    // and gets the new value, not its cached copy.
    let out = run(2, 1, |ctx| {
        let v = ctx
            .register_owned(Tag(100), Owner::Rank(Rank(0)), || {
                Vector::from_vec((0..30_i64).collect())
            })
            .unwrap();
        let seen = Arc::new(Mutex::new(None));
        let s = Arc::clone(&seen);
        let read = Codelet::new("read", move |b| {
            *s.lock().unwrap() = Some(b.r::<Vector<i64>>(0).as_slice().to_vec());
        });
        ctx.insert(&read).r(&v).on_node(Rank(1)).submit().unwrap();
        ctx.wait_for_all();
        let before = seen.lock().unwrap().take();
        let cached = ctx.cached_receive(&v);
        let sizes = vec![5, 10, 0, 15];
        let parts = ctx.partition(&v, &VectorList { sizes }).unwrap();
        // Automatic tags: every rank registers the children in the same order.
        for p in &parts {
            ctx.mpi_register(p, TagChoice::Auto, Owner::Rank(Rank(0)))
                .unwrap();
        }
        for (i, p) in parts.iter().enumerate() {
            ctx.migrate(p, Rank((i % 2) as u32)).unwrap();
        }
        let me = ctx.rank();
        let tag_rank = Codelet::new("times_ten_plus_rank", move |b| {
            for x in b.w::<Vector<i64>>(0).as_mut_slice() {
                *x = *x * 10 + i64::from(me.0);
            }
        });
        let mut executors = Vec::new();
        for p in &parts {
            executors.push(ctx.insert(&tag_rank).rw(p).submit().unwrap().executor);
        }
        for p in &parts {
            ctx.get_data_on_node(p, Rank(0)).unwrap();
        }
        ctx.unpartition(&v).unwrap();
        ctx.wait_for_all();
        let whole =
            (me == Rank(0)).then(|| ctx.acquire(&v, AccessMode::R).get().as_slice().to_vec());
        // The parent is an ordinary datum again: an insert reads it on rank 1.
        ctx.insert(&read).r(&v).on_node(Rank(1)).submit().unwrap();
        ctx.wait_for_all();
        let seen = seen.lock().unwrap().clone();
        (parts.len(), executors, whole, (before, cached, seen))
    });
    let expected: Vec<i64> = (0..30)
        .map(|x| {
            // Pieces 0..5 → rank 0, 5..15 → rank 1, (empty piece 2 → rank 0), 15..30 → rank 1.
            let owner = i64::from(!(0..5).contains(&x));
            x * 10 + owner
        })
        .collect();
    for (r, (n, executors, whole, (before, cached, seen))) in out.iter().enumerate() {
        assert_eq!(*n, 4);
        assert_eq!(
            *executors,
            vec![Some(Rank(0)), Some(Rank(1)), Some(Rank(0)), Some(Rank(1))],
            "rank {r}: each child's task ran on its owner"
        );
        if r == 0 {
            assert_eq!(whole.as_deref(), Some(&expected[..]));
            assert_eq!(*seen, None);
        } else {
            assert_eq!(*before, Some((0..30).collect::<Vec<i64>>()));
            assert!(*cached, "rank 1 kept a received copy of the parent");
            assert_eq!(
                seen.as_deref(),
                Some(&expected[..]),
                "rank 1 read the gathered parent"
            );
        }
    }
}

#[test]
fn matrix_children_are_sent_and_received_as_any_handle() {
    // A 4 × 6 matrix with leading dimension 5 on both ranks; rank 0 sends its column
    // blocks to rank 1, which adds 100 and sends them back; the padding stays untouched.
    let out = run(2, 1, |ctx| {
        let me = ctx.rank();
        let mut data = vec![-1_i32; 5 * 5 + 4];
        for j in 0..6 {
            for i in 0..4 {
                data[i + 5 * j] = if me == Rank(0) {
                    (10 * j + i) as i32
                } else {
                    0
                };
            }
        }
        let m = ctx.register(Matrix::new(4, 6, 5, data).unwrap());
        let cols = ctx
            .partition(&m, &MatrixVerticalBlock { parts: 4 })
            .unwrap();
        let shapes: Vec<(usize, usize, usize)> = cols
            .iter()
            .map(|c| {
                let c = ctx.acquire(c, AccessMode::R);
                let c = c.get();
                (c.nx(), c.ny(), c.ld())
            })
            .collect();
        let peer = Rank(1 - me.0);
        let add = Codelet::new("add100", |b| {
            let mut c = b.w::<Matrix<i32>>(0);
            for j in 0..c.ny() {
                for i in 0..c.nx() {
                    let v = c.get(i, j);
                    c.set(i, j, v + 100);
                }
            }
        });
        for (k, c) in cols.iter().enumerate() {
            let tag = Tag(k as i64);
            if me == Rank(0) {
                ctx.send(c, peer, tag).wait().unwrap();
                ctx.recv(c, peer, tag).wait().unwrap();
            } else {
                ctx.recv(c, peer, tag).wait().unwrap();
                ctx.task(&add).rw(c).submit();
                ctx.send(c, peer, tag).wait().unwrap();
            }
        }
        ctx.unpartition(&m).unwrap();
        let whole = ctx.acquire(&m, AccessMode::R).get().as_slice().to_vec();
        (shapes, whole)
    });
    let (shapes, whole) = &out[0];
    // 6 columns in 4 blocks: 2, 2, 1, 1; each keeps the parent's leading dimension.
    assert_eq!(*shapes, vec![(4, 2, 5), (4, 2, 5), (4, 1, 5), (4, 1, 5)]);
    for j in 0..6 {
        for i in 0..5 {
            let k = i + 5 * j;
            if k >= whole.len() {
                continue;
            }
            let expected = if i < 4 { (10 * j + i) as i32 + 100 } else { -1 };
            assert_eq!(whole[k], expected, "element ({i}, {j})");
        }
    }
    // Rank 1's parent holds what it received and updated.
    assert_eq!(out[1].1[..4], [100, 101, 102, 103]);
}

#[test]
fn the_filters_cut_with_the_reference_sizes() {
    let out = run(1, 1, |ctx| {
        let lens = |parts: &[starling::Handle<Vector<u16>>]| -> Vec<usize> {
            parts
                .iter()
                .map(|p| ctx.acquire(p, AccessMode::R).get().len())
                .collect()
        };
        let v = ctx.register(Vector::<u16>::zeros(100));
        let block = lens(&ctx.partition(&v, &VectorBlock { parts: 16 }).unwrap());
        ctx.unpartition(&v).unwrap();
        let list = lens(
            &ctx.partition(
                &v,
                &VectorList {
                    sizes: vec![1, 98, 1],
                },
            )
            .unwrap(),
        );
        ctx.unpartition(&v).unwrap();
        let refused = [
            ctx.partition(
                &v,
                &VectorList {
                    sizes: vec![50, 49],
                },
            )
            .err(),
            ctx.partition(&v, &VectorBlock { parts: 101 }).err(),
            ctx.partition(&v, &VectorBlock { parts: 0 }).err(),
        ];
        let m = ctx.register(Matrix::<f64>::zeros(10, 7));
        let shape = |parts: Vec<starling::Handle<Matrix<f64>>>| -> Vec<(usize, usize, usize)> {
            parts
                .iter()
                .map(|p| {
                    let a = ctx.acquire(p, AccessMode::R);
                    let p = a.get();
                    (p.nx(), p.ny(), p.ld())
                })
                .collect()
        };
        let rows = shape(ctx.partition(&m, &MatrixBlock { parts: 3 }).unwrap());
        ctx.unpartition(&m).unwrap();
        let cols = shape(
            ctx.partition(&m, &MatrixVerticalBlock { parts: 2 })
                .unwrap(),
        );
        ctx.unpartition(&m).unwrap();
        (block, list, refused, rows, cols, v.id())
    });
    let (block, list, refused, rows, cols, v) = &out[0];
    // 100 = 16 × 6 + 4: the first four parts have 7 elements.
    assert_eq!(*block, [vec![7; 4], vec![6; 12]].concat());
    assert_eq!(*list, vec![1, 98, 1]);
    assert_eq!(
        refused[0],
        Some(PartitionError::Filter {
            data: *v,
            cause: FilterError::SizesMismatch {
                sum: Some(99),
                len: 100
            }
        })
    );
    assert_eq!(
        refused[1],
        Some(PartitionError::Filter {
            data: *v,
            cause: FilterError::TooManyParts {
                parts: 101,
                len: 100
            }
        })
    );
    assert_eq!(
        refused[2],
        Some(PartitionError::Filter {
            data: *v,
            cause: FilterError::NoParts
        })
    );
    // 10 rows in 3: 4, 3, 3, stored dense; 7 columns in 2: 4, 3, with the parent's ld.
    assert_eq!(*rows, vec![(4, 7, 4), (3, 7, 3), (3, 7, 3)]);
    assert_eq!(*cols, vec![(10, 4, 10), (10, 3, 10)]);
}

#[test]
fn a_partitioned_parent_and_a_retired_child_are_refused_with_typed_errors() {
    let out = run(2, 1, |ctx| {
        let v = ctx
            .register_owned(Tag(7), Owner::Rank(Rank(0)), || Vector::<u32>::zeros(8))
            .unwrap();
        let parts = ctx.partition(&v, &VectorBlock { parts: 2 }).unwrap();
        for (i, p) in parts.iter().enumerate() {
            ctx.mpi_register(p, Tag(8 + i as i64), Owner::Rank(Rank(0)))
                .unwrap();
        }
        let nop = Codelet::new("nop", |_| {});
        let insert = ctx.insert(&nop).rw(&v).submit().err();
        let migrate = ctx.migrate(&v, Rank(1)).err();
        let peer = Rank(1 - ctx.rank().0);
        let send = ctx.send(&v, peer, Tag(1)).start().err();
        let recv = ctx.recv(&v, peer, Tag(1)).detach(|_| {}).err();
        let twice = ctx.partition(&v, &VectorBlock { parts: 4 }).err();
        ctx.unpartition(&v).unwrap();
        let again = ctx.unpartition(&v).err();
        let retired = ctx.insert(&nop).r(&parts[0]).submit().err();
        // The children's tags are free again; the parent works again.
        let reuse = ctx.register(Vector::<u32>::zeros(1));
        let reused = ctx
            .mpi_register(&reuse, Tag(8), Owner::Rank(Rank(1)))
            .is_ok();
        let works = ctx.insert(&nop).rw(&v).submit().is_ok();
        ctx.wait_for_all();
        (
            [insert, migrate, retired],
            [send, recv],
            [twice, again],
            reused && works,
            v.id(),
            parts[0].id(),
        )
    });
    for (inserts, transfers, calls, ok, v, child) in out {
        let partitioned = PartitionError::Partitioned(v);
        assert_eq!(
            inserts,
            [
                Some(InsertError::Partition(partitioned.clone())),
                Some(InsertError::Partition(partitioned.clone())),
                Some(InsertError::Partition(PartitionError::Retired(child))),
            ]
        );
        assert_eq!(
            transfers,
            [
                Some(CommError::Partition(partitioned.clone())),
                Some(CommError::Partition(partitioned.clone())),
            ]
        );
        assert_eq!(
            calls,
            [Some(partitioned), Some(PartitionError::NotPartitioned(v))]
        );
        assert!(ok);
    }
}

#[test]
fn a_parent_whose_value_failed_to_arrive_poisons_its_children_and_its_gathered_self() {
    // `x` is owned by rank 0 with 4 values; rank 1 registers it with 8 (a registration
    // bug), so its receive there fails and leaves a stale value. Cut on rank 1, that
    // stale value must reach no task: not the children's, not the parent's after the
    // unpartition. Rank 0's tasks run.
    let ran = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&ran);
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 2,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    };
    let out = run_local_with(2, config, move |ctx| {
        let me = ctx.rank();
        let x = if me == Rank(0) {
            ctx.register(Vector::from_vec(vec![1_i64, 2, 3, 4]))
        } else {
            ctx.register(Vector::from_vec(vec![-1_i64; 8]))
        };
        ctx.mpi_register(&x, Tag(1), Owner::Rank(Rank(0))).unwrap();
        let _ = ctx.get_data_on_node(&x, Rank(1));
        let parts = ctx.partition(&x, &VectorBlock { parts: 2 }).unwrap();
        let mark = |what: &'static str| {
            let log = Arc::clone(&log);
            Codelet::new(what, move |_| log.lock().unwrap().push((me.0, what)))
        };
        for p in &parts {
            ctx.task(&mark("child")).r(p).submit();
        }
        ctx.unpartition(&x).unwrap();
        ctx.task(&mark("parent")).r(&x).submit();
        ctx.wait_for_all();
    });
    assert!(out.is_err(), "the failed receive is reported at shutdown");
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(
        ran,
        vec![(0, "child"), (0, "child"), (0, "parent")],
        "rank 1 ran nothing on the stale value"
    );
}
