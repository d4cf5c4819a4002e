//! Planner cost per task: Starling's `insert::plan` (fixed capacities, no allocation)
//! against a naive `std` planner that follows the same rules with hash-set caches and
//! `Vec` outputs. Both plan the same flows as rank 1 of 4 and apply their cache updates.

use core::hint::black_box;
use std::collections::{HashMap, HashSet};

use criterion::{BenchmarkId, Criterion, Throughput};
use starling_core::cache::Cache;
use starling_core::insert::{self, Access, Options};
use starling_core::select::Policies;
use starling_core::{AccessMode, DataId, Owner, Rank, Tag};

const NRANKS: u32 = 4;
const ME: Rank = Rank(1);

/// Tasks of a flow: each a list of accesses.
type Flow = Vec<Vec<Access>>;

fn access(data: u32, mode: AccessMode, owner: u32, size: u64) -> Access {
    Access::new(
        DataId(data),
        mode,
        Owner::Rank(Rank(owner)),
        Tag(i64::from(data)),
        size,
    )
}

/// Two sweeps of a 5-point stencil on a 16 × 16 grid of tiles, block-distributed by rows
/// over 4 ranks: each task writes its tile and reads its 4 neighbours.
fn stencil_flow() -> Flow {
    const N: u32 = 16;
    let owner = |_x: u32, y: u32| y * NRANKS / N;
    let id = |x: u32, y: u32| y * N + x;
    let mut flow = Vec::new();
    for _ in 0..2 {
        for y in 1..N - 1 {
            for x in 1..N - 1 {
                let mut t = vec![access(id(x, y), AccessMode::RW, owner(x, y), 4096)];
                for (nx, ny) in [(x - 1, y), (x + 1, y), (x, y - 1), (x, y + 1)] {
                    t.push(access(id(nx, ny), AccessMode::R, owner(nx, ny), 4096));
                }
                flow.push(t);
            }
        }
    }
    flow
}

/// The GEMM tasks of a tiled Cholesky on 12 × 12 tiles, 2-D block-cyclic on a 2 × 2 grid:
/// C(i,j) -= A(i,k) · A(j,k)ᵀ.
fn gemm_flow() -> Flow {
    const NT: u32 = 12;
    let owner = |i: u32, j: u32| (i % 2) * 2 + (j % 2);
    let id = |i: u32, j: u32| i * NT + j;
    let size = 512 * 512 * 8;
    let mut flow = Vec::new();
    for k in 0..NT {
        for i in k + 1..NT {
            for j in k + 1..i {
                flow.push(vec![
                    access(id(i, j), AccessMode::RW, owner(i, j), size),
                    access(id(i, k), AccessMode::R, owner(i, k), size),
                    access(id(j, k), AccessMode::R, owner(j, k), size),
                ]);
            }
        }
    }
    flow
}

/// A straightforward `std` planner with the same rules as `insert::plan`
/// (executor = owner of written data, else most-R-data; transfers; write-backs; cache).
#[derive(Default)]
struct NaivePlanner {
    sent: HashSet<(DataId, Rank)>,
    received: HashSet<DataId>,
}

#[derive(Debug)]
#[allow(dead_code)] // fields are only consumed through `black_box`
struct NaivePlan {
    executor: Rank,
    before: Vec<(DataId, Rank, bool)>,
    after: Vec<(DataId, Rank, bool)>,
}

impl NaivePlanner {
    fn plan(&mut self, me: Rank, accesses: &[Access]) -> NaivePlan {
        let owner = |a: &Access| match a.owner {
            Owner::Rank(r) => r,
            Owner::PerNode => me,
        };
        let written: Vec<Rank> = accesses
            .iter()
            .filter(|a| a.mode.writes())
            .map(owner)
            .collect();
        let executor = if !written.is_empty() && written.iter().all(|w| *w == written[0]) {
            written[0]
        } else {
            let mut score: HashMap<Rank, u64> = HashMap::new();
            for a in accesses {
                let s = score.entry(owner(a)).or_default();
                if a.mode.reads() {
                    *s += a.size;
                }
                if a.mode.writes() {
                    *s += a.size;
                }
            }
            let mut best = (Rank(0), 0);
            for r in 0..NRANKS {
                let s = score.get(&Rank(r)).copied().unwrap_or(0);
                if s > best.1 {
                    best = (Rank(r), s);
                }
            }
            best.0
        };
        let mut before = Vec::new();
        let mut after = Vec::new();
        let mut seen = HashSet::new();
        for a in accesses {
            let o = owner(a);
            if a.mode.reads() && o != executor && seen.insert(a.data) {
                if me == executor && self.received.insert(a.data) {
                    before.push((a.data, o, false));
                }
                if me == o && self.sent.insert((a.data, executor)) {
                    before.push((a.data, executor, true));
                }
            }
        }
        for a in accesses {
            let o = owner(a);
            if a.mode.writes() {
                if o != executor {
                    if me == executor {
                        after.push((a.data, o, true));
                    }
                    if me == o {
                        after.push((a.data, executor, false));
                    }
                }
                self.received.remove(&a.data);
                self.sent.retain(|(d, _)| *d != a.data);
            }
        }
        NaivePlan {
            executor,
            before,
            after,
        }
    }
}

/// Both planners must do the same work: same executors, same number of transfers.
fn check_same_work(flow: &Flow, policies: &Policies, options: &Options) {
    let mut cache: Box<Cache<1024>> = Box::new(Cache::new());
    let mut naive = NaivePlanner::default();
    for task in flow {
        let plan: insert::Plan<16> =
            insert::plan(ME, NRANKS, task, options, policies, &cache).expect("plan");
        for u in &plan.cache {
            cache.apply(u).expect("cache room");
        }
        let n = naive.plan(ME, task);
        let executor = match plan.executor {
            Some(insert::Executor::Rank(r)) => r,
            other => panic!("unexpected executor {other:?}"),
        };
        assert_eq!(executor, n.executor);
        assert_eq!(plan.before.len(), n.before.len(), "before-transfers differ");
        assert_eq!(plan.after.len(), n.after.len(), "write-backs differ");
    }
}

pub(crate) fn planner(c: &mut Criterion) {
    let mut group = c.benchmark_group("planner");
    for (name, flow) in [("stencil5", stencil_flow()), ("cholesky_gemm", gemm_flow())] {
        group.throughput(Throughput::Elements(flow.len() as u64));
        let policies = Policies::new();
        let options = Options::default();
        check_same_work(&flow, &policies, &options);
        group.bench_with_input(BenchmarkId::new("starling", name), &flow, |b, flow| {
            let mut plan: insert::Plan<16> = insert::Plan::new();
            b.iter(|| {
                let mut cache: Box<Cache<1024>> = Box::new(Cache::new());
                for task in flow {
                    insert::plan_into(ME, NRANKS, task, &options, &policies, &cache, &mut plan)
                        .expect("plan");
                    for u in &plan.cache {
                        cache.apply(u).expect("cache room");
                    }
                    black_box(&plan);
                }
            });
        });
        group.bench_with_input(BenchmarkId::new("naive_std", name), &flow, |b, flow| {
            b.iter(|| {
                let mut p = NaivePlanner::default();
                for task in flow {
                    black_box(p.plan(ME, task));
                }
            });
        });
    }
    group.finish();
}
