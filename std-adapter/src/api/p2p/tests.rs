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
