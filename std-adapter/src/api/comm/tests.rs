use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use starling_core::{CommId, Rank, Tag};

use crate::runtime::interfaces::Variable;
use crate::{ClusterConfig, CommError, RuntimeConfig, run_fake, run_local_with};

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
fn a_split_groups_colors_orders_members_by_key_and_translates_ranks() {
    let out = run_local_with(6, config(), |ctx| {
        let me = ctx.rank().0;
        // Three colors (world rank mod 3), keys reversed: the larger world rank first.
        let c = ctx
            .comm_split(&ctx.world(), Some(me % 3), -i64::from(me))
            .unwrap()
            .unwrap();
        (c.id(), c.rank(), c.size(), c.members().to_vec())
    })
    .unwrap();
    for (me, (id, rank, size, members)) in out.iter().enumerate() {
        let me = me as u32;
        let expected = vec![Rank(me % 3 + 3), Rank(me % 3)];
        assert_eq!(*members, expected, "world rank {me}");
        assert_eq!(*size, 2);
        assert_eq!(*rank, Rank(u32::from(me < 3)));
        assert_eq!(*id, out[0].0, "one split, one id");
        assert_ne!(*id, CommId::WORLD);
    }
}

#[test]
fn world_and_comm_ranks_translate_both_ways() {
    let out = run_local_with(4, config(), |ctx| {
        let c = ctx
            .comm_split(&ctx.world(), Some(u32::from(ctx.rank().0 >= 1)), 0)
            .unwrap()
            .unwrap();
        (
            c.world_rank(Rank(0)),
            c.world_rank(Rank(3)),
            c.rank_of(Rank(3)),
            c.rank_of(Rank(0)),
        )
    })
    .unwrap();
    assert_eq!(out[0], (Some(Rank(0)), None, None, Some(Rank(0))));
    for seen in &out[1..] {
        assert_eq!(*seen, (Some(Rank(1)), None, Some(Rank(2)), None));
    }
}

#[test]
fn matching_is_per_communicator_whatever_the_tags() {
    // Rank 0 sends on the split first, then on the world, then on a duplicate of the
    // split, all with tag 7; rank 1 receives in the opposite order and gets each message
    // from its own communicator.
    let out = run_local_with(2, config(), |ctx| {
        let world = ctx.world();
        let split = ctx.comm_split(&world, Some(0), 0).unwrap().unwrap();
        let dup = split.dup(ctx).unwrap();
        assert_ne!(split.id(), dup.id());
        let v = ctx.register(Variable::new(0u32));
        if ctx.rank() == Rank(0) {
            for (value, comm) in [(1, &split), (2, &world), (3, &dup)] {
                ctx.acquire(&v, starling_core::AccessMode::W)
                    .get_mut()
                    .set(value);
                ctx.send(&v, Rank(1), Tag(7)).on(comm).wait().unwrap();
            }
            vec![]
        } else {
            [&dup, &world, &split]
                .iter()
                .map(|comm| {
                    ctx.recv(&v, Rank(0), Tag(7)).on(comm).wait().unwrap();
                    ctx.acquire(&v, starling_core::AccessMode::R).get().get()
                })
                .collect()
        }
    })
    .unwrap();
    assert_eq!(out[1], vec![3, 2, 1]);
}

#[test]
fn context_calls_take_world_ranks_on_a_split_communicator() {
    // World ranks 1 and 3 form a split where they are members 0 and 1; the context's own
    // calls still address world ranks, with the split's id.
    let out = run_local_with(4, config(), |ctx| {
        let me = ctx.rank().0;
        let odd = ctx
            .comm_split(&ctx.world(), (me % 2 == 1).then_some(1), 0)
            .unwrap();
        let v = ctx.register(Variable::new(me * 10));
        match (me, odd) {
            (1, Some(c)) => {
                ctx.send(&v, Rank(3), Tag(1))
                    .comm(c.id())
                    .start()
                    .unwrap()
                    .wait()
                    .unwrap();
            }
            (3, Some(c)) => {
                ctx.recv(&v, Rank(1), Tag(1))
                    .comm(c.id())
                    .start()
                    .unwrap()
                    .wait()
                    .unwrap();
            }
            (_, odd) => assert!(odd.is_none() == (me % 2 == 0)),
        }
        ctx.unregister(v).get()
    })
    .unwrap();
    assert_eq!(out, vec![0, 10, 20, 10]);
}

#[test]
fn undefined_colors_get_none_and_nested_splits_and_dups_keep_ids_apart() {
    let out = run_local_with(4, config(), |ctx| {
        let me = ctx.rank().0;
        let world = ctx.world();
        // {0, 1, 2}; rank 3 passes no color.
        let a = ctx.comm_split(&world, (me < 3).then_some(0), 0).unwrap();
        let mut ids = vec![];
        if let Some(a) = &a {
            ids.push(a.id());
            // A split of the split: {0} and {1, 2}; then a duplicate of the latter.
            let b = ctx
                .comm_split(a, Some(u32::from(a.rank().0 > 0)), 0)
                .unwrap()
                .unwrap();
            ids.push(b.id());
            if b.size() == 2 {
                let d = b.dup(ctx).unwrap();
                ids.push(d.id());
                // The duplicate carries traffic between its members.
                let v = ctx.register(Variable::new(me));
                if d.rank() == Rank(0) {
                    ctx.recv(&v, Rank(1), Tag(0)).on(&d).wait().unwrap();
                } else {
                    ctx.send(&v, Rank(0), Tag(0)).on(&d).wait().unwrap();
                }
                ids.push(CommId(ctx.unregister(v).get() as u16));
            }
        }
        // A split of the whole world after all that: every rank agrees on its id.
        let w = ctx.comm_split(&world, Some(0), 0).unwrap().unwrap();
        (a.is_some(), ids, w.id())
    })
    .unwrap();
    assert!(!out[3].0 && out[3].1.is_empty());
    let world_split = out[0].2;
    for (r, (_, ids, w)) in out.iter().enumerate() {
        assert_eq!(*w, world_split, "rank {r}");
        // Every communicator this rank belongs to has its own id.
        let mut all = ids[..ids.len().min(3)].to_vec();
        all.push(*w);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "rank {r}: {ids:?} {w:?}");
    }
    // Member 0 of the duplicate {1, 2} received world rank 2's value.
    assert_eq!(out[1].1[3], CommId(2));
}

#[test]
fn a_communicator_barrier_waits_for_every_member() {
    let arrived = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let a = Arc::clone(&arrived);
    let seen = run_local_with(4, config(), move |ctx| {
        let color = ctx.rank().0 % 2;
        let c = ctx
            .comm_split(&ctx.world(), Some(color), 0)
            .unwrap()
            .unwrap();
        std::thread::sleep(core::time::Duration::from_millis(
            u64::from(ctx.rank().0) * 20,
        ));
        a[color as usize].fetch_add(1, Ordering::SeqCst);
        c.barrier(ctx).unwrap();
        a[color as usize].load(Ordering::SeqCst)
    })
    .unwrap();
    assert_eq!(seen, vec![2, 2, 2, 2]);
}

#[test]
fn a_member_outside_the_communicator_is_out_of_range() {
    let out = run_local_with(2, config(), |ctx| {
        let c = ctx
            .comm_split(&ctx.world(), Some(ctx.rank().0), 0)
            .unwrap()
            .unwrap();
        let v = ctx.register(Variable::new(0u8));
        ctx.send(&v, Rank(1), Tag(0))
            .on(&c)
            .start()
            .map(|_| ())
            .unwrap_err()
    })
    .unwrap();
    for e in out {
        assert_eq!(
            e,
            CommError::RankOutOfRange {
                rank: Rank(1),
                size: 1
            }
        );
    }
}

#[test]
fn a_fake_rank_splits_as_if_every_rank_passed_its_color() {
    let (rank, size) = run_fake(Rank(2), 8, config(), |ctx| {
        let c = ctx.comm_split(&ctx.world(), Some(5), 0).unwrap().unwrap();
        c.barrier(ctx).unwrap();
        (c.rank(), c.size())
    })
    .unwrap();
    assert_eq!((rank, size), (Rank(2), 8));
}
