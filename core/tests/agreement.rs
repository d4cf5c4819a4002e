//! The agreement property of the task-insert planner.
//!
//! N ranks walk the same random task flow; each plans every task with its own cache and
//! applies its own cache updates. Checked after every step and over the whole flow:
//! 1. every participating rank names the same executor, and exactly the executor (or every
//!    rank, for a per-node task) runs the task; ranks either all plan a task or all refuse
//!    it with the same error;
//! 2. for every ordered pair (a, b), the planned sends from a to b (datum, tag, sync,
//!    priority) are exactly the planned receives on b from a, in the same order;
//! 3. with the cache on, no datum is sent twice to the same rank without a write, a flush
//!    or an owner change in between;
//! 4. no task reads a stale value: an executor reading a datum it does not own receives it
//!    in that task, or received it after the datum's last write, flush or owner change;
//!
//! and the cache invariant behind them: the owner `o` of a datum records it as sent to `x`
//! exactly when `x` records a received copy, and nobody else records anything for it.

use proptest::prelude::*;
use starling_core::{AccessMode, Owner, Rank};

/// The checker itself (`run_flow`), shared with the `planner` fuzz target.
#[path = "support/flow.rs"]
mod flow;

use flow::{Collective, Datum, Exec, Fault, Op, Task, run_flow};

fn any_owner(n: u32) -> impl Strategy<Value = Owner> {
    prop_oneof![
        6 => (0..n).prop_map(|r| Owner::Rank(Rank(r))),
        1 => Just(Owner::PerNode),
    ]
}

fn any_datum(n: u32) -> impl Strategy<Value = Datum> {
    (any_owner(n), 0u64..100, prop::bool::weighted(0.15)).prop_map(|(owner, size, temp)| Datum {
        owner,
        size,
        temp: temp && owner != Owner::PerNode,
    })
}

fn any_mode() -> impl Strategy<Value = AccessMode> {
    prop::sample::select(vec![
        AccessMode::R,
        AccessMode::R,
        AccessMode::R,
        AccessMode::W,
        AccessMode::RW,
        AccessMode::RW,
        AccessMode::REDUX,
        AccessMode::SCRATCH,
        AccessMode::R | AccessMode::SSEND,
        AccessMode::RW | AccessMode::SSEND,
        AccessMode::RW | AccessMode::COMMUTE,
        AccessMode::W | AccessMode::SSEND,
    ])
}

fn any_task(n: u32, ndata: usize) -> impl Strategy<Value = Task> {
    (
        prop::collection::vec((0..ndata, any_mode()), 1..5),
        prop_oneof![
            3 => Just(Exec::Auto),
            2 => (0..n).prop_map(Exec::OnNode),
            1 => (0usize..6).prop_map(Exec::OnData),
        ],
        -2i32..3,
        prop::bool::weighted(0.1),
        prop_oneof![3 => Just(None), 1 => Just(Some(true)), 1 => Just(Some(false))],
    )
        .prop_map(|(accesses, exec, priority, ssend, policy)| Task {
            accesses,
            exec,
            priority,
            ssend,
            policy,
        })
}

fn any_collective(n: u32, ndata: usize) -> impl Strategy<Value = Collective> {
    prop_oneof![
        4 => (0..ndata).prop_map(Collective::Flush),
        1 => Just(Collective::FlushAll),
        2 => prop::bool::weighted(0.6).prop_map(Collective::SetCache),
        3 => (0..ndata, any_owner(n)).prop_map(|(d, o)| Collective::SetRank(d, o)),
        1 => any::<bool>().prop_map(Collective::SetCurrentPolicy),
    ]
}

/// Data, then 1..60 tasks, each preceded by a collective operation one time in four.
fn any_flow(n: u32) -> impl Strategy<Value = (Vec<Datum>, Vec<Op>)> {
    prop::collection::vec(any_datum(n), 1..10).prop_flat_map(move |data| {
        let ndata = data.len();
        let steps = prop::collection::vec(
            (
                any_task(n, ndata),
                prop::option::weighted(0.25, any_collective(n, ndata)),
            ),
            1..if cfg!(miri) { 8 } else { 60 },
        )
        .prop_map(|steps| {
            steps
                .into_iter()
                .flat_map(|(task, c)| c.map(Op::Collective).into_iter().chain([Op::Task(task)]))
                .collect::<Vec<_>>()
        });
        (Just(data), steps)
    })
}

fn check(n: u32, data: &[Datum], ops: &[Op]) -> Result<(), TestCaseError> {
    run_flow(n, data, ops, None)
        .map(|_| ())
        .map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 1 } else { 192 }))]

    #[test]
    fn plans_agree_on_2_ranks((data, ops) in any_flow(2)) {
        check(2, &data, &ops)?;
    }

    #[test]
    #[cfg_attr(miri, ignore = "the 2-rank flow covers the same code; Miri is slow")]
    fn plans_agree_on_3_ranks((data, ops) in any_flow(3)) {
        check(3, &data, &ops)?;
    }

    #[test]
    #[cfg_attr(miri, ignore = "the 2-rank flow covers the same code; Miri is slow")]
    fn plans_agree_on_4_ranks((data, ops) in any_flow(4)) {
        check(4, &data, &ops)?;
    }

    #[test]
    #[cfg_attr(miri, ignore = "the 2-rank flow covers the same code; Miri is slow")]
    fn plans_agree_on_7_ranks((data, ops) in any_flow(7)) {
        check(7, &data, &ops)?;
    }
}

fn read_on(d: usize, rank: u32) -> Op {
    Op::Task(Task {
        accesses: vec![(d, AccessMode::R)],
        exec: Exec::OnNode(rank),
        priority: 0,
        ssend: false,
        policy: None,
    })
}

fn rank_owned(owner: u32) -> Datum {
    Datum {
        owner: Owner::Rank(Rank(owner)),
        size: 8,
        temp: false,
    }
}

/// The harness is not vacuous: a fixed flow moves data and hits the cache.
#[test]
fn a_fixed_flow_transfers_and_hits_the_cache() {
    let data = [rank_owned(0), rank_owned(1)];
    let ops = [
        read_on(0, 1),
        read_on(0, 1),
        read_on(0, 2),
        Op::Task(Task {
            accesses: vec![(0, AccessMode::RW), (1, AccessMode::R)],
            exec: Exec::Auto,
            priority: 1,
            ssend: true,
            policy: None,
        }),
        read_on(0, 1),
    ];
    let stats = run_flow(3, &data, &ops, None).unwrap();
    // 0->1, 0->2, 1->0 (for the RW task on 0), 0->1 again after the write; both sides.
    assert_eq!((stats.tasks, stats.refused), (5, 0));
    assert_eq!(stats.transfers, 2 * 4);
    assert_eq!(stats.cache_hits, 1);
}

/// The checker catches a rank that skips a collective flush: the owner sends again, the
/// reader thinks its copy is current.
#[test]
fn the_checker_catches_a_rank_that_skips_a_flush() {
    let data = [rank_owned(0)];
    let ops = [
        read_on(0, 1),
        Op::Collective(Collective::Flush(0)),
        read_on(0, 1),
    ];
    assert!(run_flow(2, &data, &ops, None).is_ok());
    let fault = Fault { rank: 1, step: 1 };
    let err = run_flow(2, &data, &ops, Some(fault)).unwrap_err();
    assert!(err.contains("step 1"), "{err}");
}

/// An owner change à la `set_rank` keeps the plans paired because it clears the datum's
/// cache entries everywhere; a rank that skips the clearing breaks them.
#[test]
fn an_owner_change_keeps_agreement_only_if_every_rank_clears_the_datum() {
    let data = [rank_owned(0)];
    let ops = [
        read_on(0, 2),
        Op::Collective(Collective::SetRank(0, Owner::Rank(Rank(1)))),
        read_on(0, 2),
    ];
    assert!(run_flow(3, &data, &ops, None).is_ok());
    let fault = Fault { rank: 2, step: 1 };
    assert!(run_flow(3, &data, &ops, Some(fault)).is_err());
}

/// A per-node datum written by a task that runs on one rank is refused by every rank.
#[test]
fn ranks_refuse_a_task_alike() {
    let data = [
        Datum {
            owner: Owner::PerNode,
            size: 4,
            temp: false,
        },
        rank_owned(1),
    ];
    let ops = [Op::Task(Task {
        accesses: vec![(0, AccessMode::W), (1, AccessMode::R)],
        exec: Exec::OnNode(1),
        priority: 0,
        ssend: false,
        policy: None,
    })];
    let stats = run_flow(3, &data, &ops, None).unwrap();
    assert_eq!((stats.tasks, stats.refused), (0, 1));
}
