//! The agreement checker of the task-insert planner, shared by `core/tests/agreement.rs`
//! (proptest flows) and the `planner` fuzz target of `fuzz/` (arbitrary flows), which
//! both include this file with `#[path]`. See `agreement.rs` for the properties checked.

use std::collections::{BTreeMap, BTreeSet};

use starling_core::cache::Cache;
use starling_core::insert::{
    Access, Direction, Execute, Executor, InsertError, Options, Plan, Transfer, plan,
};
use starling_core::select::{Policies, PolicyId};
use starling_core::{AccessMode, DataId, Owner, Priority, Rank, Tag};

const T: usize = 16;
const C: usize = 128;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Datum {
    pub(crate) owner: Owner,
    pub(crate) size: u64,
    /// Registered only on its owner (a rank), used only by tasks that run there.
    pub(crate) temp: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Exec {
    Auto,
    OnNode(u32),
    OnData(usize),
}

#[derive(Clone, Debug)]
pub(crate) struct Task {
    pub(crate) accesses: Vec<(usize, AccessMode)>,
    pub(crate) exec: Exec,
    pub(crate) priority: i32,
    pub(crate) ssend: bool,
    /// `Some(true)`: the custom policy for this call, `Some(false)`: the built-in one.
    pub(crate) policy: Option<bool>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Collective {
    Flush(usize),
    FlushAll,
    SetCache(bool),
    /// `starpu_mpi_data_set_rank`: a new owner, no data moved; the datum's cache entries
    /// are cleared on every rank.
    SetRank(usize, Owner),
    /// Make the custom policy (or the built-in one) current.
    SetCurrentPolicy(bool),
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Task(Task),
    Collective(Collective),
}

/// A node-selection policy that depends only on the accesses (never on `me`).
fn custom_policy(_me: Rank, nranks: u32, accesses: &[Access]) -> Rank {
    let sum: u64 = accesses
        .iter()
        .filter(|a| a.known)
        .map(|a| a.size + u64::from(a.data.0) + u64::from(a.mode.bits()))
        .sum();
    Rank((sum % u64::from(nranks)) as u32)
}

type Key = (DataId, Tag, bool, Priority);

#[derive(Default, Debug)]
pub(crate) struct Stats {
    pub(crate) tasks: usize,
    pub(crate) refused: usize,
    pub(crate) transfers: usize,
    pub(crate) cache_hits: usize,
}

struct RankState {
    cache: Cache<C>,
    policies: Policies,
}

/// A deliberate fault, to show the checker catches desynchronised ranks: this rank skips
/// the collective operation at this step.
#[derive(Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) rank: u32,
    pub(crate) step: usize,
}

fn key(t: &Transfer) -> Key {
    (t.data, t.tag, t.sync, t.priority)
}

fn tag_of(d: usize) -> Tag {
    Tag(d as i64 * 7 - 3)
}

pub(crate) fn run_flow(
    n: u32,
    data: &[Datum],
    ops: &[Op],
    fault: Option<Fault>,
) -> Result<Stats, String> {
    let mut owners: Vec<Owner> = data.iter().map(|d| d.owner).collect();
    let mut ranks: Vec<RankState> = (0..n)
        .map(|_| RankState {
            cache: Cache::new(),
            policies: Policies::new(),
        })
        .collect();
    let mut custom = PolicyId::MOST_R_DATA;
    for r in &mut ranks {
        custom = r
            .policies
            .register(custom_policy)
            .map_err(|e| e.to_string())?;
    }
    let mut sends: BTreeMap<(u32, u32), Vec<Key>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32), Vec<Key>> = BTreeMap::new();
    let mut fresh: BTreeSet<(u32, u32, DataId)> = BTreeSet::new();
    // (rank, datum): the rank holds a received copy of the datum's current value.
    let mut current: BTreeSet<(u32, DataId)> = BTreeSet::new();
    let mut cache_on = true;
    let mut stats = Stats::default();

    for (step, op) in ops.iter().enumerate() {
        let skips = |me: u32| fault.is_some_and(|f| f.step == step && f.rank == me);
        match op {
            Op::Collective(c) => match *c {
                Collective::Flush(d) => {
                    for me in 0..n {
                        let known = !data[d].temp || owners[d] == Owner::Rank(Rank(me));
                        if known && !skips(me) {
                            let _ = ranks[me as usize].cache.flush(
                                DataId(d as u32),
                                Rank(me),
                                owners[d],
                            );
                        }
                    }
                    fresh.retain(|e| e.2 != DataId(d as u32));
                    current.retain(|e| e.1 != DataId(d as u32));
                }
                Collective::FlushAll => {
                    for me in (0..n).filter(|&me| !skips(me)) {
                        ranks[me as usize].cache.flush_all(|_| {});
                    }
                    fresh.clear();
                    current.clear();
                }
                Collective::SetCache(on) => {
                    for me in (0..n).filter(|&me| !skips(me)) {
                        ranks[me as usize].cache.set_enabled(on, |_| {});
                    }
                    cache_on = on;
                    if !on {
                        // Disabling flushes everything; enabling keeps what is cached.
                        fresh.clear();
                        current.clear();
                    }
                }
                Collective::SetRank(d, owner) => {
                    if data[d].temp {
                        continue;
                    }
                    for me in (0..n).filter(|&me| !skips(me)) {
                        let cache = &mut ranks[me as usize].cache;
                        cache.clear_sent(DataId(d as u32));
                        cache.clear_received(DataId(d as u32));
                    }
                    owners[d] = owner;
                    fresh.retain(|e| e.2 != DataId(d as u32));
                    current.retain(|e| e.1 != DataId(d as u32));
                }
                Collective::SetCurrentPolicy(use_custom) => {
                    let id = if use_custom {
                        custom
                    } else {
                        PolicyId::MOST_R_DATA
                    };
                    for r in &mut ranks {
                        r.policies.set_current(id).map_err(|e| e.to_string())?;
                    }
                }
            },
            Op::Task(task) => {
                // Temporary data: the task runs on the owner of the first one, and only
                // temporary data of that owner stay in it.
                let temp_owner = task
                    .accesses
                    .iter()
                    .find(|(d, _)| data[*d].temp)
                    .and_then(|(d, _)| owners[*d].rank());
                let accesses: Vec<(usize, AccessMode)> = task
                    .accesses
                    .iter()
                    .copied()
                    .filter(|(d, _)| !data[*d].temp || owners[*d].rank() == temp_owner)
                    .collect();
                let execute = match (temp_owner, task.exec) {
                    (Some(owner), _) => Execute::OnNode(owner),
                    (None, Exec::Auto) => Execute::Auto,
                    (None, Exec::OnNode(r)) => Execute::OnNode(Rank(r)),
                    (None, Exec::OnData(i)) => Execute::OnData(i),
                };
                let options = Options {
                    execute,
                    policy: task
                        .policy
                        .map(|c| if c { custom } else { PolicyId::MOST_R_DATA }),
                    priority: Priority(task.priority),
                    ssend: task.ssend,
                };
                let accesses_on = |me: u32| -> Vec<Access> {
                    accesses
                        .iter()
                        .map(|&(d, mode)| Access {
                            known: !data[d].temp || owners[d] == Owner::Rank(Rank(me)),
                            ..Access::new(
                                DataId(d as u32),
                                mode,
                                owners[d],
                                tag_of(d),
                                data[d].size,
                            )
                        })
                        .collect()
                };
                let results: Vec<Result<Plan<T>, InsertError>> = (0..n)
                    .map(|me| {
                        let r = &ranks[me as usize];
                        plan(
                            Rank(me),
                            n,
                            &accesses_on(me),
                            &options,
                            &r.policies,
                            &r.cache,
                        )
                    })
                    .collect();

                // (1) all plan it or all refuse it alike.
                if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                    if results.iter().any(|r| r.as_ref().err() != Some(e)) {
                        return Err(format!(
                            "step {step}: ranks disagree on refusing: {results:?}"
                        ));
                    }
                    stats.refused += 1;
                    continue;
                }
                let plans: Vec<Plan<T>> = results.into_iter().map(Result::unwrap).collect();
                stats.tasks += 1;

                // (1) one executor.
                let executors: BTreeSet<String> = plans
                    .iter()
                    .filter_map(|p| p.executor.map(|e| format!("{e:?}")))
                    .collect();
                if executors.len() > 1 {
                    return Err(format!("step {step}: executors differ: {executors:?}"));
                }
                for (me, p) in plans.iter().enumerate() {
                    let here = match p.executor {
                        None => {
                            if !p.is_empty() {
                                return Err(format!(
                                    "step {step}: rank {me} left out but planned {p:?}"
                                ));
                            }
                            false
                        }
                        Some(Executor::PerNode) => true,
                        Some(Executor::Rank(x)) => {
                            if x.0 >= n {
                                return Err(format!("step {step}: executor {x} out of range"));
                            }
                            x.index() == me
                        }
                    };
                    if p.execute_here != here {
                        return Err(format!(
                            "step {step}: rank {me} execute_here is wrong: {p:?}"
                        ));
                    }
                }

                // (2) per task, then appended to the whole flow.
                let mut task_sends: BTreeMap<(u32, u32), Vec<Key>> = BTreeMap::new();
                let mut task_recvs: BTreeMap<(u32, u32), Vec<Key>> = BTreeMap::new();
                for (me, p) in plans.iter().enumerate() {
                    let me = me as u32;
                    for t in p.before.iter().chain(&p.after) {
                        if t.peer.0 == me || t.peer.0 >= n {
                            return Err(format!("step {step}: rank {me} bad peer in {t:?}"));
                        }
                        stats.transfers += 1;
                        match t.direction {
                            Direction::Send => {
                                task_sends.entry((me, t.peer.0)).or_default().push(key(t))
                            }
                            Direction::Recv => {
                                task_recvs.entry((t.peer.0, me)).or_default().push(key(t))
                            }
                        }
                    }
                }
                if task_sends != task_recvs {
                    return Err(format!(
                        "step {step}: transfers do not pair up:\n sends {task_sends:?}\n recvs {task_recvs:?}\n plans {plans:?}"
                    ));
                }
                for (pair, keys) in task_sends {
                    sends.entry(pair).or_default().extend(keys);
                }
                for (pair, keys) in task_recvs {
                    recvs.entry(pair).or_default().extend(keys);
                }

                // (3) no value sent twice to a rank while the cache is on.
                if cache_on {
                    for (me, p) in plans.iter().enumerate() {
                        for t in p.before.iter().filter(|t| t.direction == Direction::Send) {
                            if !fresh.insert((me as u32, t.peer.0, t.data)) {
                                return Err(format!(
                                    "step {step}: {:?} sent twice to {}",
                                    t.data, t.peer
                                ));
                            }
                        }
                    }
                    for (d, mode) in &accesses {
                        if mode.writes() {
                            fresh.retain(|e| e.2 != DataId(*d as u32));
                        }
                    }
                    for (me, p) in plans.iter().enumerate() {
                        for t in p.after.iter().filter(|t| t.direction == Direction::Send) {
                            if !fresh.insert((me as u32, t.peer.0, t.data)) {
                                return Err(format!(
                                    "step {step}: {:?} written back twice",
                                    t.data
                                ));
                            }
                        }
                    }
                }
                // (4) the executor reads current values only.
                if let Some(Executor::Rank(x)) = plans[0].executor {
                    for t in &plans[x.index()].before {
                        current.insert((x.0, t.data));
                    }
                    for (d, mode) in &accesses {
                        let id = DataId(*d as u32);
                        let remote = owners[*d].rank().is_some_and(|o| o != x);
                        if mode.reads() && remote && !current.contains(&(x.0, id)) {
                            return Err(format!("step {step}: {x} reads a stale {id}"));
                        }
                    }
                }
                for (d, mode) in &accesses {
                    if mode.writes() {
                        current.retain(|e| e.1 != DataId(*d as u32));
                    }
                }
                if !cache_on {
                    current.clear();
                }

                // A read that needed no transfer because of the cache.
                if cache_on {
                    if let Some(Executor::Rank(x)) = plans[0].executor {
                        stats.cache_hits += accesses
                            .iter()
                            .filter(|(d, m)| m.reads() && owners[*d].rank().is_some_and(|o| o != x))
                            .filter(|(d, _)| {
                                !plans[x.index()]
                                    .before
                                    .iter()
                                    .any(|t| t.data == DataId(*d as u32))
                            })
                            .count();
                    }
                }

                for (me, p) in plans.iter().enumerate() {
                    for u in &p.cache {
                        ranks[me]
                            .cache
                            .apply(u)
                            .map_err(|e| format!("step {step}: {e}"))?;
                    }
                }
            }
        }

        // The cache invariant.
        for (d, owner) in owners.iter().enumerate() {
            let id = DataId(d as u32);
            for x in 0..n {
                let cx = &ranks[x as usize].cache;
                match owner.rank() {
                    Some(o) if o.0 != x => {
                        let sent = ranks[o.index()].cache.cached_send(id, Rank(x));
                        if sent != cx.cached_receive(id) {
                            return Err(format!(
                                "step {step}: {id} sent to {x} by its owner {o}: {sent}, received: {}",
                                !sent
                            ));
                        }
                    }
                    _ => {
                        if cx.cached_receive(id) {
                            return Err(format!("step {step}: rank {x} caches its own {id}"));
                        }
                    }
                }
                for y in 0..n {
                    if cx.cached_send(id, Rank(y)) && owner.rank() != Some(Rank(x)) {
                        return Err(format!(
                            "step {step}: rank {x} records {id} sent but does not own it"
                        ));
                    }
                }
            }
        }
    }

    // (2) over the whole flow.
    if sends != recvs {
        return Err(format!(
            "the flow's transfers do not pair up:\n{sends:?}\n{recvs:?}"
        ));
    }
    Ok(stats)
}
