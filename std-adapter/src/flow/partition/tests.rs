//! Tests of the filters (pure: pieces, copies) and of the partition's states on one rank.
//! The multi-rank scenarios are in the workspace's `tests/partition.rs`.

use starling_core::{AccessMode, Rank, Tag};

use super::*;
use crate::runtime::interfaces::{Matrix, Vector};
use crate::{CommError, run_local};

#[test]
fn block_ranges_give_the_remainder_to_the_first_parts() {
    assert_eq!(block_ranges(10, 4).unwrap(), vec![0..3, 3..6, 6..8, 8..10]);
    assert_eq!(
        block_ranges(16, 4).unwrap(),
        vec![0..4, 4..8, 8..12, 12..16]
    );
    assert_eq!(block_ranges(3, 3).unwrap(), vec![0..1, 1..2, 2..3]);
    assert_eq!(block_ranges(7, 1).unwrap(), vec![0..7]);
    // Every size and offset as the reference's formula gives them.
    for len in 1..40_usize {
        for parts in 1..=len {
            let r = block_ranges(len, parts).unwrap();
            assert_eq!(r.len(), parts);
            for (id, piece) in r.iter().enumerate() {
                let size = len / parts + usize::from(id < len % parts);
                let offset = id * (len / parts) + id.min(len % parts);
                assert_eq!(*piece, offset..offset + size, "len {len} parts {parts}");
            }
            assert_eq!(r.last().unwrap().end, len);
        }
    }
}

#[test]
fn block_ranges_refuse_zero_parts_and_more_parts_than_elements() {
    assert_eq!(block_ranges(10, 0), Err(FilterError::NoParts));
    assert_eq!(
        block_ranges(3, 4),
        Err(FilterError::TooManyParts { parts: 4, len: 3 })
    );
    assert_eq!(
        block_ranges(0, 1),
        Err(FilterError::TooManyParts { parts: 1, len: 0 })
    );
}

#[test]
fn vector_list_cuts_by_the_sizes_given_and_refuses_a_wrong_sum() {
    let v = Vector::<u8>::zeros(10);
    let list = VectorList {
        sizes: vec![2, 0, 5, 3],
    };
    assert_eq!(list.pieces(&v).unwrap(), vec![0..2, 2..2, 2..7, 7..10]);
    let short = VectorList {
        sizes: vec![2, 5, 2],
    };
    assert_eq!(
        short.pieces(&v),
        Err(FilterError::SizesMismatch {
            sum: Some(9),
            len: 10
        })
    );
    let long = VectorList { sizes: vec![6, 5] };
    assert_eq!(
        long.pieces(&v),
        Err(FilterError::SizesMismatch {
            sum: Some(11),
            len: 10
        })
    );
    let overflow = VectorList {
        sizes: vec![usize::MAX, 11],
    };
    assert_eq!(
        overflow.pieces(&v),
        Err(FilterError::SizesMismatch { sum: None, len: 10 })
    );
    assert_eq!(
        VectorList { sizes: vec![] }.pieces(&v),
        Err(FilterError::NoParts)
    );
}

#[test]
fn vector_block_copies_out_and_back() {
    let parent = Vector::from_vec((0..11_i32).collect());
    let pieces = VectorBlock { parts: 3 }.pieces(&parent).unwrap();
    assert_eq!(pieces, vec![0..4, 4..8, 8..11]);
    let mut children: Vec<Vector<i32>> = pieces.iter().map(|p| parent.part(p).unwrap()).collect();
    for (c, p) in children.iter_mut().zip(&pieces) {
        parent.copy_out(p, c).unwrap();
    }
    assert_eq!(children[2].as_slice(), &[8, 9, 10]);
    for c in &mut children {
        for x in c.as_mut_slice() {
            *x = -*x;
        }
    }
    let mut back = Vector::<i32>::zeros(11);
    for (c, p) in children.iter().zip(&pieces) {
        back.copy_in(p, c).unwrap();
    }
    assert_eq!(back.as_slice(), (0..11).map(|x| -x).collect::<Vec<_>>());
}

#[test]
fn a_child_of_another_shape_is_refused_without_a_copy() {
    let mut parent = Vector::from_vec(vec![1_u16, 2, 3, 4]);
    let mut wrong = Vector::from_vec(vec![9_u16; 3]);
    assert_eq!(
        parent.copy_out(&(0..2), &mut wrong),
        Err(DataError::SizeMismatch {
            expected: 4,
            got: 6
        })
    );
    assert_eq!(wrong.as_slice(), &[9, 9, 9]);
    assert!(parent.copy_in(&(0..2), &wrong).is_err());
    // A piece past the parent's end (the parent was replaced by a shorter value).
    assert!(parent.copy_in(&(3..5), &Vector::zeros(2)).is_err());
    assert_eq!(parent.as_slice(), &[1, 2, 3, 4]);
    assert_eq!(parent.part(&(3..5)), Err("range outside the vector"));
}

/// A 5 × 4 matrix with leading dimension 7: element (i, j) = 10 i + j, padding 99.
fn padded() -> Matrix<i32> {
    let mut data = vec![99; 7 * 3 + 5];
    for j in 0..4 {
        for i in 0..5 {
            data[i + j * 7] = (10 * i + j) as i32;
        }
    }
    Matrix::new(5, 4, 7, data).unwrap()
}

#[test]
fn matrix_filters_cut_rows_or_columns_with_the_reference_sizes() {
    let m = padded();
    let rows = MatrixBlock { parts: 2 }.pieces(&m).unwrap();
    assert_eq!(
        rows,
        vec![
            MatrixPiece {
                rows: 0..3,
                cols: 0..4,
                ld: 3
            },
            MatrixPiece {
                rows: 3..5,
                cols: 0..4,
                ld: 2
            },
        ]
    );
    let cols = MatrixVerticalBlock { parts: 3 }.pieces(&m).unwrap();
    assert_eq!(
        cols,
        vec![
            MatrixPiece {
                rows: 0..5,
                cols: 0..2,
                ld: 7
            },
            MatrixPiece {
                rows: 0..5,
                cols: 2..3,
                ld: 7
            },
            MatrixPiece {
                rows: 0..5,
                cols: 3..4,
                ld: 7
            },
        ]
    );
    assert_eq!(
        MatrixBlock { parts: 6 }.pieces(&m),
        Err(FilterError::TooManyParts { parts: 6, len: 5 })
    );
    assert_eq!(
        MatrixVerticalBlock { parts: 5 }.pieces(&m),
        Err(FilterError::TooManyParts { parts: 5, len: 4 })
    );
}

#[test]
fn matrix_children_hold_their_elements_and_the_padding_survives_the_round_trip() {
    let mut m = padded();
    for filter in [
        &MatrixBlock { parts: 2 } as &dyn Filter<Matrix<i32>>,
        &MatrixVerticalBlock { parts: 3 },
    ] {
        let pieces = filter.pieces(&m).unwrap();
        let mut children: Vec<Matrix<i32>> = pieces.iter().map(|p| m.part(p).unwrap()).collect();
        for (c, p) in children.iter_mut().zip(&pieces) {
            m.copy_out(p, c).unwrap();
            assert_eq!(c.ld(), p.ld);
            for j in 0..c.ny() {
                for i in 0..c.nx() {
                    assert_eq!(c.get(i, j), m.get(p.rows.start + i, p.cols.start + j));
                }
            }
            for j in 0..c.ny() {
                for i in 0..c.nx() {
                    let v = c.get(i, j);
                    c.set(i, j, v + 1000);
                }
            }
        }
        for (c, p) in children.iter().zip(&pieces) {
            m.copy_in(p, c).unwrap();
        }
    }
    // Both round trips added 1000 to every element; the padding was never written.
    for j in 0..4 {
        for i in 0..5 {
            assert_eq!(m.get(i, j), (10 * i + j) as i32 + 2000);
        }
        for pad in 5..7 {
            if j < 3 {
                assert_eq!(m.as_slice()[pad + j * 7], 99);
            }
        }
    }
    // The column children keep the parent's leading dimension: not dense.
    assert!(
        !m.part(&MatrixVerticalBlock { parts: 2 }.pieces(&m).unwrap()[0])
            .unwrap()
            .is_dense()
    );
    // The row children are dense.
    assert!(
        m.part(&MatrixBlock { parts: 2 }.pieces(&m).unwrap()[0])
            .unwrap()
            .is_dense()
    );
}

#[test]
fn a_matrix_piece_outside_the_parent_or_with_a_short_ld_is_refused() {
    let m = padded();
    let outside = MatrixPiece {
        rows: 4..6,
        cols: 0..1,
        ld: 2,
    };
    assert!(m.part(&outside).is_err());
    let short_ld = MatrixPiece {
        rows: 0..3,
        cols: 0..2,
        ld: 2,
    };
    assert!(m.part(&short_ld).is_err());
    let mut child = Matrix::<i32>::zeros(2, 1);
    assert!(m.copy_out(&outside, &mut child).is_err());
    let mut wrong = Matrix::<i32>::zeros(1, 2);
    let piece = MatrixPiece {
        rows: 0..2,
        cols: 0..1,
        ld: 2,
    };
    assert!(m.copy_out(&piece, &mut wrong).is_err());
}

// ----- the partition on a rank --------------------------------------------------------

#[test]
fn partition_and_unpartition_round_trip_with_the_children_as_handles() {
    let out = run_local(1, |ctx| {
        let v = ctx.register(Vector::from_vec((0..10_u64).collect()));
        assert!(!v.is_partitioned());
        assert_eq!(v.nb_children(), 0);
        assert!(v.sub_data(0).is_none());
        let kids = ctx
            .partition(&v, &VectorList { sizes: vec![3, 7] })
            .unwrap();
        assert!(v.is_partitioned());
        assert_eq!(v.nb_children(), 2);
        assert_eq!(v.sub_data(1).unwrap().id(), kids[1].id());
        assert!(v.sub_data(2).is_none());
        assert_eq!(v.children().len(), 2);
        let first = ctx
            .acquire(&kids[0], AccessMode::R)
            .get()
            .as_slice()
            .to_vec();
        {
            let a = ctx.acquire(&kids[1], AccessMode::RW);
            a.get_mut().as_mut_slice()[0] = 1000;
        }
        ctx.unpartition(&v).unwrap();
        assert!(!v.is_partitioned());
        assert_eq!(v.nb_children(), 0);
        let whole = ctx.acquire(&v, AccessMode::R).get().as_slice().to_vec();
        (first, whole)
    })
    .unwrap();
    assert_eq!(out[0].0, vec![0, 1, 2]);
    assert_eq!(out[0].1, vec![0, 1, 2, 1000, 4, 5, 6, 7, 8, 9]);
}

#[test]
fn a_partition_refused_changes_nothing() {
    let out = run_local(1, |ctx| {
        let v = ctx.register(Vector::<u8>::zeros(4));
        let too_many = ctx.partition(&v, &VectorBlock { parts: 5 }).err();
        let bad_sum = ctx.partition(&v, &VectorList { sizes: vec![1, 2] }).err();
        // A filter of one's own whose piece runs past the end.
        let past_end = |_: &Vector<u8>| Ok(vec![0..2, 2..6]);
        let bad_piece = ctx.partition(&v, &past_end).err();
        let still_whole = !v.is_partitioned() && v.nb_children() == 0;
        // The next handle registered gets the next id: nothing was registered.
        let next = ctx.register(Vector::<u8>::zeros(1)).id();
        (too_many, bad_sum, bad_piece, still_whole, v.id(), next)
    })
    .unwrap();
    let (too_many, bad_sum, bad_piece, still_whole, v, next) = out.into_iter().next().unwrap();
    assert_eq!(
        too_many,
        Some(PartitionError::Filter {
            data: v,
            cause: FilterError::TooManyParts { parts: 5, len: 4 }
        })
    );
    assert_eq!(
        bad_sum,
        Some(PartitionError::Filter {
            data: v,
            cause: FilterError::SizesMismatch {
                sum: Some(3),
                len: 4
            }
        })
    );
    assert_eq!(
        bad_piece,
        Some(PartitionError::Filter {
            data: v,
            cause: FilterError::BadPiece {
                index: 1,
                what: "range outside the vector"
            }
        })
    );
    assert!(still_whole);
    assert_eq!(next.0, v.0 + 1);
}

#[test]
fn the_partition_states_refuse_what_they_must() {
    let out = run_local(2, |ctx| {
        let v = ctx.register(Vector::<u32>::zeros(8));
        let not_yet = ctx.unpartition(&v);
        let kids = ctx.partition(&v, &VectorBlock { parts: 2 }).unwrap();
        let twice = ctx.partition(&v, &VectorBlock { parts: 2 }).map(|_| ());
        let send = ctx
            .send(&v, Rank(1 - ctx.rank().0), Tag(1))
            .start()
            .map(|_| ());
        // A hierarchy: a child partitioned in turn blocks its parent's unpartition.
        let grandkids = ctx.partition(&kids[0], &VectorBlock { parts: 2 }).unwrap();
        let inner_first = ctx.unpartition(&v);
        let still = v.is_partitioned() && v.nb_children() == 2;
        ctx.unpartition(&kids[0]).unwrap();
        ctx.unpartition(&v).unwrap();
        let retired = ctx
            .recv(&kids[1], Rank(1 - ctx.rank().0), Tag(2))
            .start()
            .map(|_| ());
        let retired_grandchild = ctx.partition(&grandkids[0], &VectorBlock { parts: 1 });
        let again = ctx
            .partition(&v, &VectorBlock { parts: 4 })
            .map(|k| k.len());
        (
            not_yet,
            twice,
            send,
            inner_first,
            still,
            retired,
            retired_grandchild.map(|_| ()),
            again,
            v.id(),
            kids.iter().map(Handle::id).collect::<Vec<_>>(),
            grandkids[0].id(),
        )
    })
    .unwrap();
    for (not_yet, twice, send, inner_first, still, retired, grand, again, v, kids, g) in out {
        assert_eq!(not_yet, Err(PartitionError::NotPartitioned(v)));
        assert_eq!(twice, Err(PartitionError::Partitioned(v)));
        assert_eq!(
            send,
            Err(CommError::Partition(PartitionError::Partitioned(v)))
        );
        assert_eq!(
            inner_first,
            Err(PartitionError::ChildPartitioned {
                parent: v,
                child: kids[0]
            })
        );
        assert!(still);
        assert_eq!(
            retired,
            Err(CommError::Partition(PartitionError::Retired(kids[1])))
        );
        assert_eq!(grand, Err(PartitionError::Retired(g)));
        assert_eq!(again, Ok(4));
    }
}

/// Runs `f`, and returns the text of its panic (`None`: it did not panic).
fn panic_of(f: impl FnOnce()) -> Option<String> {
    std::panic::catch_unwind(core::panic::AssertUnwindSafe(f))
        .err()
        .map(|p| crate::runtime::task::panic_text(&*p))
}

#[test]
fn a_task_or_an_acquisition_on_a_partitioned_handle_panics_before_submitting() {
    let out = run_local(1, |ctx| {
        let v = ctx.register(Vector::<u32>::zeros(8));
        let kids = ctx.partition(&v, &VectorBlock { parts: 2 }).unwrap();
        let nop = crate::Codelet::new("nop", |_| {});
        let task = panic_of(|| drop(ctx.task(&nop).r(&v).submit()));
        let acquire = panic_of(|| drop(ctx.acquire(&v, AccessMode::R)));
        let unregister = panic_of(|| drop(ctx.unregister(kids[0].clone())));
        ctx.unpartition(&v).unwrap();
        let retired = panic_of(|| drop(ctx.task(&nop).w(&kids[1]).submit()));
        // The parent is whole again: a task on it runs.
        ctx.task(&nop).rw(&v).submit();
        ctx.wait_for_all();
        (task, acquire, unregister, retired, v.id(), kids[1].id())
    })
    .unwrap();
    let (task, acquire, unregister, retired, v, k) = out.into_iter().next().unwrap();
    let partitioned = format!("{v} is partitioned");
    assert!(task.unwrap().contains(&partitioned));
    assert!(acquire.unwrap().contains(&partitioned));
    assert!(unregister.unwrap().contains("is the child of a partition"));
    assert!(
        retired
            .unwrap()
            .contains(&format!("{k} was a child of an undone partition"))
    );
}

#[test]
fn in_master_slave_mode_the_values_come_home_to_be_cut_and_gathered() {
    // Results stay on the slave until the master reads them: the partition must bring
    // the parent's value home before cutting it, the unpartition the children's before
    // gathering them.
    let twice_plus_one = || {
        crate::Codelet::new("twice_plus_one", |b| {
            for x in b.w::<Vector<i64>>(0).as_mut_slice() {
                *x = *x * 2 + 1;
            }
        })
    };
    let registry = crate::ms::Registry::new().codelet(&twice_plus_one());
    let config = crate::ms::MsConfig {
        timeout: core::time::Duration::from_secs(20),
        ..crate::ms::MsConfig::default()
    };
    let mut cluster = crate::ClusterConfig::from_env();
    cluster.runtime.workers = 1;
    let got = crate::ms::run_local(2, config, cluster, registry, move |ctx| {
        let tpo = twice_plus_one();
        let h = ctx.register(Vector::from_vec(vec![1_i64; 10]));
        ctx.task(&tpo).rw(&h).submit(); // 3, on the slave
        let parts = ctx.partition(&h, &VectorBlock { parts: 3 }).unwrap();
        for p in &parts {
            ctx.task(&tpo).rw(p).submit(); // 7, on the slave
        }
        ctx.unpartition(&h).unwrap();
        ctx.task(&tpo).rw(&h).submit(); // 15
        ctx.unregister(h).into_vec()
    })
    .expect("a master-slave run");
    assert_eq!(got, vec![15; 10]);
}

#[test]
fn a_hierarchy_gathers_innermost_first_and_keeps_every_write() {
    let out = run_local(1, |ctx| {
        let v = ctx.register(Vector::from_vec(vec![0_u32; 12]));
        let halves = ctx.partition(&v, &VectorBlock { parts: 2 }).unwrap();
        let quarters = ctx
            .partition(&halves[0], &VectorBlock { parts: 2 })
            .unwrap();
        let set = |k: u32| {
            crate::Codelet::new("set", move |b| {
                b.w::<Vector<u32>>(0).as_mut_slice().fill(k);
            })
        };
        drop(ctx.task(&set(1)).w(&quarters[0]).submit());
        drop(ctx.task(&set(2)).w(&quarters[1]).submit());
        drop(ctx.task(&set(3)).w(&halves[1]).submit());
        ctx.unpartition(&halves[0]).unwrap();
        // The half is whole again: a task on it sees its quarters' writes.
        let inc = crate::Codelet::new("inc", |b| {
            for x in b.w::<Vector<u32>>(0).as_mut_slice() {
                *x += 10;
            }
        });
        drop(ctx.task(&inc).rw(&halves[0]).submit());
        ctx.unpartition(&v).unwrap();
        ctx.acquire(&v, AccessMode::R).get().as_slice().to_vec()
    })
    .unwrap();
    assert_eq!(out[0], vec![11, 11, 11, 12, 12, 12, 3, 3, 3, 3, 3, 3]);
}
