//! The `planner` target: the agreement property of the task-insert planner on arbitrary
//! task flows.
//!
//! The input is a number of ranks (2–7), the data (owner rank or per-node, size,
//! temporary) and a flow of tasks (accesses with modes, where to execute, priority,
//! synchronous sends, node-selection policy), each optionally preceded by a collective
//! operation (flush one or all, cache on/off, owner change, current policy). Every rank
//! plans every task with its own cache; the checker of `core/tests/agreement.rs`
//! (`core/tests/support/flow.rs`, included here) then requires that ranks agree on the
//! executor or all refuse alike, that each planned send a→b has exactly one matching
//! receive on b in the same order, that the cache never sends a value twice or lets a
//! task read a stale copy, and that the owner's and the readers' caches agree.

use arbitrary::{Arbitrary, Unstructured};
use starling_core::{AccessMode, Owner, Rank};

use crate::flow::{Collective, Datum, Exec, Op, Task, run_flow};

/// The access modes a flow draws from (the proptest's list).
const MODES: [AccessMode; 12] = [
    AccessMode::R,
    AccessMode::R,
    AccessMode::R,
    AccessMode::W,
    AccessMode::RW,
    AccessMode::RW,
    AccessMode::REDUX,
    AccessMode::SCRATCH,
    AccessMode::R.union(AccessMode::SSEND),
    AccessMode::RW.union(AccessMode::SSEND),
    AccessMode::RW.union(AccessMode::COMMUTE),
    AccessMode::W.union(AccessMode::SSEND),
];

/// A datum: owner `owner % (n + 1)` (`n` meaning per-node), size `size % 100`, temporary
/// (registered on its owner only) unless per-node.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct ADatum {
    owner: u8,
    size: u8,
    temp: bool,
}

/// Where a task runs.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum AExec {
    /// The planner decides.
    Auto,
    /// On rank `r % n`.
    OnNode(u8),
    /// On the owner of access `i % 6` (possibly out of range: refused alike).
    OnData(u8),
}

/// A task: 1–4 accesses (datum `d % ndata`, mode `m % 12`).
#[derive(Arbitrary, Clone, Debug)]
pub struct ATask {
    first: (u8, u8),
    more: Vec<(u8, u8)>,
    exec: AExec,
    priority: u8,
    ssend: bool,
    /// `Some(true)`: the custom policy for this call, `Some(false)`: the built-in one.
    policy: Option<bool>,
}

/// A collective operation every rank performs.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ACollective {
    /// Flush one datum's cache entries.
    Flush(u8),
    /// Flush every cache.
    FlushAll,
    /// Turn the cache on or off.
    SetCache(bool),
    /// Change a datum's owner.
    SetRank(u8, u8),
    /// Make the custom policy (or the built-in one) current.
    SetCurrentPolicy(bool),
}

/// One step of the flow.
#[derive(Arbitrary, Clone, Debug)]
pub struct AStep {
    collective: Option<ACollective>,
    task: ATask,
}

/// One fuzz case.
#[derive(Arbitrary, Debug)]
pub struct Case {
    ranks: u8,
    first: ADatum,
    more: Vec<ADatum>,
    steps: Vec<AStep>,
}

/// Builds a [`Case`] from `data` and checks it; panics when the ranks' plans disagree.
pub fn run(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    check(&case);
}

fn owner(n: u32, o: u8) -> Owner {
    let o = u32::from(o) % (n + 1);
    if o == n {
        Owner::PerNode
    } else {
        Owner::Rank(Rank(o))
    }
}

/// Checks one case; panics when the ranks' plans disagree.
pub fn check(case: &Case) {
    let n = 2 + u32::from(case.ranks % 6);
    let data: Vec<Datum> = core::iter::once(&case.first)
        .chain(case.more.iter().take(8))
        .map(|d| {
            let owner = owner(n, d.owner);
            Datum {
                owner,
                size: u64::from(d.size % 100),
                temp: d.temp && owner != Owner::PerNode,
            }
        })
        .collect();
    let nd = data.len();
    let mut ops = Vec::new();
    for step in case.steps.iter().take(60) {
        if let Some(c) = step.collective {
            ops.push(Op::Collective(match c {
                ACollective::Flush(d) => Collective::Flush(usize::from(d) % nd),
                ACollective::FlushAll => Collective::FlushAll,
                ACollective::SetCache(on) => Collective::SetCache(on),
                ACollective::SetRank(d, o) => Collective::SetRank(usize::from(d) % nd, owner(n, o)),
                ACollective::SetCurrentPolicy(c) => Collective::SetCurrentPolicy(c),
            }));
        }
        let t = &step.task;
        let accesses = core::iter::once(&t.first)
            .chain(t.more.iter().take(3))
            .map(|&(d, m)| (usize::from(d) % nd, MODES[usize::from(m) % MODES.len()]))
            .collect();
        ops.push(Op::Task(Task {
            accesses,
            exec: match t.exec {
                AExec::Auto => Exec::Auto,
                AExec::OnNode(r) => Exec::OnNode(u32::from(r) % n),
                AExec::OnData(i) => Exec::OnData(usize::from(i) % 6),
            },
            priority: i32::from(t.priority % 5) - 2,
            ssend: t.ssend,
            policy: t.policy,
        }));
    }
    if let Err(e) = run_flow(n, &data, &ops, None) {
        panic!("{n} ranks, data {data:?}: {e}");
    }
}
