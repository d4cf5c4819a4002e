use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

use super::*;

const R: AccessMode = AccessMode::R;
const W: AccessMode = AccessMode::W;
const RW: AccessMode = AccessMode::RW;

type P = Plan<16>;

fn acc(data: u32, mode: AccessMode, owner: u32, size: u64) -> Access {
    Access::new(
        DataId(data),
        mode,
        Owner::Rank(Rank(owner)),
        Tag(i64::from(data) + 100),
        size,
    )
}

fn per_node(data: u32, mode: AccessMode) -> Access {
    Access::new(
        DataId(data),
        mode,
        Owner::PerNode,
        Tag(i64::from(data) + 100),
        4,
    )
}

fn unknown(a: Access) -> Access {
    Access { known: false, ..a }
}

fn on(rank: u32) -> Options {
    Options {
        execute: Execute::OnNode(Rank(rank)),
        ..Options::default()
    }
}

fn auto() -> Options {
    Options::default()
}

fn t(data: u32, peer: u32, direction: Direction) -> Transfer {
    Transfer {
        data: DataId(data),
        tag: Tag(i64::from(data) + 100),
        peer: Rank(peer),
        direction,
        sync: false,
        priority: Priority::DEFAULT,
    }
}

/// `n` ranks, each with its own cache, sharing one policy table (registered identically
/// everywhere). Every insert is planned on every rank, checked to pair up, and applied.
struct World {
    n: u32,
    caches: Vec<Cache<64>>,
    policies: Policies,
    /// Bytes sent from a to b.
    traffic: BTreeMap<(u32, u32), u64>,
}

impl World {
    fn new(n: u32) -> Self {
        Self {
            n,
            caches: (0..n).map(|_| Cache::new()).collect(),
            policies: Policies::new(),
            traffic: BTreeMap::new(),
        }
    }

    fn plan_on(&self, me: u32, accesses: &[Access], options: Options) -> Result<P, InsertError> {
        plan(
            Rank(me),
            self.n,
            accesses,
            &options,
            &self.policies,
            &self.caches[me as usize],
        )
    }

    /// Plans on every rank with per-rank accesses; checks pairing; applies the updates.
    fn insert_with(&mut self, accesses: impl Fn(u32) -> Vec<Access>, options: Options) -> Vec<P> {
        let plans: Vec<P> = (0..self.n)
            .map(|me| self.plan_on(me, &accesses(me), options).unwrap())
            .collect();
        for a in 0..self.n {
            for b in 0..self.n {
                let sends: Vec<_> = plans[a as usize]
                    .before
                    .iter()
                    .chain(&plans[a as usize].after)
                    .filter(|x| x.direction == Direction::Send && x.peer == Rank(b))
                    .map(|x| (x.data, x.tag, x.sync, x.priority))
                    .collect();
                let recvs: Vec<_> = plans[b as usize]
                    .before
                    .iter()
                    .chain(&plans[b as usize].after)
                    .filter(|x| x.direction == Direction::Recv && x.peer == Rank(a))
                    .map(|x| (x.data, x.tag, x.sync, x.priority))
                    .collect();
                assert_eq!(sends, recvs, "transfers {a} -> {b} do not pair up");
                let size_of = |d: DataId| {
                    accesses(a)
                        .iter()
                        .find(|x| x.data == d)
                        .map_or(0, |x| x.size)
                };
                let bytes: u64 = sends.iter().map(|s| size_of(s.0)).sum();
                *self.traffic.entry((a, b)).or_default() += bytes;
            }
        }
        for (me, p) in plans.iter().enumerate() {
            for u in &p.cache {
                self.caches[me].apply(u).unwrap();
            }
        }
        plans
    }

    fn insert(&mut self, accesses: &[Access], options: Options) -> Vec<P> {
        self.insert_with(|_| accesses.to_vec(), options)
    }

    /// The executor every rank agreed on.
    fn executor(plans: &[P]) -> Executor {
        let e = plans[0].executor.unwrap();
        for (me, p) in plans.iter().enumerate() {
            assert_eq!(p.executor, Some(e));
            let here = match e {
                Executor::PerNode => true,
                Executor::Rank(x) => x.index() == me,
            };
            assert_eq!(p.execute_here, here);
        }
        e
    }

    fn flush(&mut self, data: u32, owner: u32) -> Vec<bool> {
        (0..self.n)
            .map(|me| {
                self.caches[me as usize]
                    .flush(DataId(data), Rank(me), Owner::Rank(Rank(owner)))
                    .drop_local_copy
            })
            .collect()
    }

    fn set_cache(&mut self, enabled: bool) {
        for c in &mut self.caches {
            c.set_enabled(enabled, |_| {});
        }
    }

    fn traffic(&self, a: u32, b: u32) -> u64 {
        self.traffic.get(&(a, b)).copied().unwrap_or(0)
    }
}

/// The reference test `insert_task_owner`: x0 (a long) on rank 0, x1 (an int) on rank 1.
#[test]
fn insert_task_owner_runs_each_task_on_the_expected_rank() {
    for n in [2, 4] {
        let mut w = World::new(n);
        let x = |m0, m1| [acc(0, m0, 0, 8), acc(1, m1, 1, 4)];
        let tasks = [
            (x(R, W), auto(), 1),
            (x(RW, R), auto(), 0),
            (x(RW, RW), auto(), 0),
            (x(RW, RW), on(1), 1),
            (x(RW, RW), on(0), 0),
            (x(R, R), on(0), 0),
            // The explicit node overrides the owner of the written datum.
            (x(R, W), on(0), 0),
            (x(W, R), on(0), 0),
        ];
        for (accesses, options, expected) in tasks {
            let plans = w.insert(&accesses, options);
            assert_eq!(World::executor(&plans), Executor::Rank(Rank(expected)));
        }
    }
}

#[test]
fn the_owner_sends_reads_and_the_executor_writes_back() {
    let mut w = World::new(2);
    // (R x0, W x1) runs on 1: x0 goes 0 -> 1; x1 is 1's own.
    let plans = w.insert(&[acc(0, R, 0, 8), acc(1, W, 1, 4)], auto());
    assert_eq!(plans[0].before.as_slice(), [t(0, 1, Direction::Send)]);
    assert_eq!(plans[1].before.as_slice(), [t(0, 0, Direction::Recv)]);
    assert!(plans[0].after.is_empty() && plans[1].after.is_empty());
    // (R x0, W x1) forced on 0: x1 is written back 0 -> 1; x0 is 0's own.
    let plans = w.insert(&[acc(0, R, 0, 8), acc(1, W, 1, 4)], on(0));
    assert!(plans[0].before.is_empty() && plans[1].before.is_empty());
    assert_eq!(plans[0].after.as_slice(), [t(1, 1, Direction::Send)]);
    assert_eq!(plans[1].after.as_slice(), [t(1, 0, Direction::Recv)]);
}

#[test]
fn write_backs_go_to_each_owner_in_access_order() {
    let mut w = World::new(4);
    let accesses = [
        acc(0, RW, 0, 1),
        acc(1, W, 1, 1),
        acc(3, R, 3, 1),
        acc(4, W, 0, 1),
    ];
    let plans = w.insert(&accesses, on(2));
    assert_eq!(
        plans[2].before.as_slice(),
        [t(0, 0, Direction::Recv), t(3, 3, Direction::Recv)]
    );
    assert_eq!(
        plans[2].after.as_slice(),
        [
            t(0, 0, Direction::Send),
            t(1, 1, Direction::Send),
            t(4, 0, Direction::Send)
        ]
    );
    assert_eq!(plans[0].before.as_slice(), [t(0, 2, Direction::Send)]);
    assert_eq!(
        plans[0].after.as_slice(),
        [t(0, 2, Direction::Recv), t(4, 2, Direction::Recv)]
    );
    assert_eq!(plans[1].after.as_slice(), [t(1, 2, Direction::Recv)]);
    assert_eq!(plans[3].before.as_slice(), [t(3, 2, Direction::Send)]);
}

/// The reference test `insert_task_node_choice`: an int on 0, an int64 on 1.
#[test]
fn insert_task_node_choice_follows_node_data_then_policy() {
    let mut w = World::new(2);
    let x = [acc(0, RW, 0, 4), acc(1, RW, 1, 8)];
    let plans = w.insert(&x, on(0));
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
    let on_data = Options {
        execute: Execute::OnData(1),
        ..auto()
    };
    let plans = w.insert(&x, on_data);
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(1)));
    // Both written, different owners: most_r_data, 16 bytes on 1 beat 8 on 0.
    let plans = w.insert(&x, auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(1)));
}

/// The reference test `policy_selection`: three ints owned by 0, 1 and 2.
#[test]
fn policy_selection_uses_the_explicit_node_or_the_default_policy() {
    let mut w = World::new(3);
    let r2_w0_w1 = [acc(2, R, 2, 4), acc(0, W, 0, 4), acc(1, W, 1, 4)];
    let w0_w1 = [acc(0, W, 0, 4), acc(1, W, 1, 4)];
    let plans = w.insert(&r2_w0_w1, on(1));
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(1)));
    let plans = w.insert(&w0_w1, on(1));
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(1)));
    let plans = w.insert(&r2_w0_w1, auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
    let plans = w.insert(&w0_w1, auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
}

fn owner_of_first(_me: Rank, _n: u32, accesses: &[Access]) -> Rank {
    accesses
        .first()
        .and_then(|a| a.owner.rank())
        .unwrap_or(Rank(0))
}

fn owner_of_second(_me: Rank, _n: u32, accesses: &[Access]) -> Rank {
    accesses
        .get(1)
        .and_then(|a| a.owner.rank())
        .unwrap_or(Rank(0))
}

/// The reference test `policy_register`: a current custom policy, then a per-call one.
#[test]
fn policy_register_current_and_per_call_policies_choose_the_executor() {
    let mut w = World::new(2);
    let w0_w1 = [acc(0, W, 0, 4), acc(1, W, 1, 4)];
    let second = w.policies.register(owner_of_second).unwrap();
    w.policies.set_current(second).unwrap();
    let plans = w.insert(&w0_w1, auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(1)));
    let first = w.policies.register(owner_of_first).unwrap();
    let options = Options {
        policy: Some(first),
        ..auto()
    };
    let plans = w.insert(&w0_w1, options);
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
}

#[test]
fn a_task_without_data_or_node_runs_on_rank_0() {
    let mut w = World::new(3);
    let plans = w.insert(&[], auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
    assert!(plans.iter().skip(1).all(Plan::is_empty));
}

/// The reference test `insert_task_recv_cache`: 1000-uint vectors on 0 and 1; two inserts
/// (RW h0, R h1), a flush of h1, two more. Without the cache twice the traffic.
#[test]
fn insert_task_recv_cache_halves_the_traffic() {
    let run = |cache: bool| {
        let mut w = World::new(2);
        w.set_cache(cache);
        let task = [acc(0, RW, 0, 4000), acc(1, R, 1, 4000)];
        w.insert(&task, auto());
        w.insert(&task, auto());
        if cache {
            // Rank 0 holds exactly one cached copy: h1.
            assert_eq!(w.caches[0].received().collect::<Vec<_>>(), [DataId(1)]);
        }
        let dropped = w.flush(1, 1);
        if cache {
            assert_eq!(dropped, [true, false]);
            assert_eq!(w.caches[0].len_received(), 0);
        }
        w.insert(&task, auto());
        w.insert(&task, auto());
        w.traffic(1, 0)
    };
    let (with, without) = (run(true), run(false));
    assert_eq!((with, without), (2 * 4000, 4 * 4000));
}

/// The reference test `insert_task_sent_cache`: five times the traffic without the cache, in
/// both directions.
#[test]
fn insert_task_sent_cache_divides_the_traffic_by_five() {
    let run = |cache: bool| {
        let mut w = World::new(2);
        w.set_cache(cache);
        let h0_h1 = [acc(0, RW, 0, 4000), acc(1, R, 1, 4000)];
        let h1_h0 = [acc(1, RW, 1, 4000), acc(0, R, 0, 4000)];
        for _ in 0..5 {
            w.insert(&h0_h1, auto());
        }
        for _ in 0..5 {
            w.insert(&h1_h0, auto());
        }
        for _ in 0..5 {
            w.flush(0, 0);
        }
        for _ in 0..5 {
            w.insert(&h1_h0, auto());
        }
        (w.traffic(0, 1), w.traffic(1, 0))
    };
    let (with, without) = (run(true), run(false));
    assert_eq!(with, (2 * 4000, 4000));
    assert_eq!(without, (5 * with.0, 5 * with.1));
}

/// The reference example `cache/cache`: after an R task on 1 the datum of 0 is cached on
/// 1; after a W (or RW) task it is not.
#[test]
fn cache_example_read_caches_and_write_clears() {
    for n in [2, 3] {
        let mut w = World::new(n);
        for (mode, cached) in [(R, true), (RW, false), (R, true), (R, true), (W, false)] {
            w.insert(&[acc(42, mode, 0, 4)], on(1));
            assert_eq!(w.caches[1].cached_receive(DataId(42)), cached, "{mode:?}");
        }
    }
}

#[test]
fn a_cached_read_is_not_transferred_again() {
    let mut w = World::new(2);
    let plans = w.insert(&[acc(0, R, 0, 4)], on(1));
    assert_eq!(
        plans[0].cache.as_slice(),
        [CacheUpdate::SentSet {
            data: DataId(0),
            dest: Rank(1)
        }]
    );
    assert_eq!(
        plans[1].cache.as_slice(),
        [CacheUpdate::ReceivedSet { data: DataId(0) }]
    );
    let plans = w.insert(&[acc(0, R, 0, 4)], on(1));
    assert!(
        plans
            .iter()
            .all(|p| p.before.is_empty() && p.cache.is_empty())
    );
}

#[test]
fn a_write_invalidates_on_every_rank_even_uninvolved_ones() {
    let mut w = World::new(3);
    w.insert(&[acc(0, R, 0, 4)], on(2));
    let plans = w.insert(&[acc(0, W, 0, 4)], auto());
    for p in &plans {
        assert_eq!(
            p.cache.as_slice(),
            [CacheUpdate::Invalidate { data: DataId(0) }]
        );
    }
    assert!(!w.caches[2].cached_receive(DataId(0)));
    assert!(!w.caches[0].cached_send(DataId(0), Rank(2)));
    // The next read transfers again.
    let plans = w.insert(&[acc(0, R, 0, 4)], on(2));
    assert_eq!(plans[2].before.as_slice(), [t(0, 0, Direction::Recv)]);
}

#[test]
fn without_cache_the_executor_drops_every_copy_it_read() {
    let mut w = World::new(3);
    w.set_cache(false);
    let task = [
        acc(0, R, 0, 4),
        acc(1, RW, 1, 4),
        acc(2, R, 2, 4),
        acc(0, R, 0, 4),
    ];
    for _ in 0..2 {
        let plans = w.insert(&task, on(2));
        assert_eq!(
            plans[2].cache.as_slice(),
            [
                CacheUpdate::DropCopy { data: DataId(0) },
                CacheUpdate::DropCopy { data: DataId(1) }
            ]
        );
        assert!(plans[0].cache.is_empty() && plans[1].cache.is_empty());
        assert_eq!(
            plans[2].before.as_slice(),
            [t(0, 0, Direction::Recv), t(1, 1, Direction::Recv)]
        );
    }
}

/// The reference example `cache/cache_disable`.
#[test]
fn cache_disable_example_stops_caching() {
    let mut w = World::new(2);
    w.insert(&[acc(0, R, 0, 4)], on(1));
    assert!(w.caches[1].cached_receive(DataId(0)));
    w.set_cache(false);
    assert!(!w.caches[1].cached_receive(DataId(0)));
    let plans = w.insert(&[acc(0, R, 0, 4)], on(1));
    assert_eq!(plans[1].before.as_slice(), [t(0, 0, Direction::Recv)]);
    assert!(!w.caches[1].cached_receive(DataId(0)));
}

#[test]
fn a_datum_accessed_twice_is_transferred_once() {
    for cache in [true, false] {
        let mut w = World::new(2);
        w.set_cache(cache);
        let task = [
            acc(0, R, 0, 4),
            acc(0, RW, 0, 4),
            acc(1, W, 1, 4),
            acc(1, W, 1, 4),
        ];
        let plans = w.insert(&task, on(1));
        assert_eq!(plans[1].before.as_slice(), [t(0, 0, Direction::Recv)]);
        assert_eq!(plans[1].after.as_slice(), [t(0, 0, Direction::Send)]);
        if cache {
            assert_eq!(
                plans[0].cache.as_slice(),
                [
                    CacheUpdate::SentSet {
                        data: DataId(0),
                        dest: Rank(1)
                    },
                    CacheUpdate::Invalidate { data: DataId(0) },
                    CacheUpdate::Invalidate { data: DataId(1) }
                ]
            );
        }
    }
}

#[test]
fn redux_chooses_the_owner_and_clears_the_cache_without_write_back() {
    let mut w = World::new(3);
    w.insert(&[acc(0, R, 0, 4)], on(2));
    let redux = AccessMode::REDUX;
    let plans = w.insert(&[acc(0, redux, 0, 4)], auto());
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(0)));
    let plans = w.insert(&[acc(0, redux, 0, 4)], on(1));
    assert!(
        plans
            .iter()
            .all(|p| p.before.is_empty() && p.after.is_empty())
    );
    assert!(!w.caches[2].cached_receive(DataId(0)));
}

#[test]
fn ssend_and_priority_reach_both_sides() {
    let mut w = World::new(2);
    let options = Options {
        priority: Priority(7),
        ..on(1)
    };
    let ssend = R | AccessMode::SSEND;
    let plans = w.insert(&[acc(0, ssend, 0, 4), acc(2, RW, 0, 4)], options);
    let expect = |data, peer, dir, sync| Transfer {
        sync,
        priority: Priority(7),
        ..t(data, peer, dir)
    };
    assert_eq!(
        plans[0].before.as_slice(),
        [
            expect(0, 1, Direction::Send, true),
            expect(2, 1, Direction::Send, false)
        ]
    );
    assert_eq!(
        plans[1].after.as_slice(),
        [expect(2, 0, Direction::Send, false)]
    );
    let options = Options {
        ssend: true,
        ..on(0)
    };
    let plans = w.insert(&[acc(1, W, 1, 4)], options);
    assert!(plans[0].after[0].sync && plans[1].after[0].sync);
}

#[test]
fn per_node_written_data_run_everywhere_without_transfers() {
    let mut w = World::new(3);
    let plans = w.insert(&[per_node(0, RW), per_node(1, R)], auto());
    assert_eq!(World::executor(&plans), Executor::PerNode);
    assert!(
        plans
            .iter()
            .all(|p| p.before.is_empty() && p.after.is_empty())
    );
    let on_data = Options {
        execute: Execute::OnData(1),
        ..auto()
    };
    let plans = w.insert(&[acc(5, R, 1, 4), per_node(1, R)], on(2));
    assert!(plans.iter().all(|p| p.after.is_empty()));
    assert_eq!(plans[2].before.as_slice(), [t(5, 1, Direction::Recv)]);
    let plans = w.insert(&[per_node(0, R), per_node(1, W)], on_data);
    assert_eq!(World::executor(&plans), Executor::PerNode);
}

#[test]
fn mixing_per_node_and_rank_owned_data_is_refused() {
    let w = World::new(2);
    let cases = [
        (vec![per_node(0, W), acc(1, W, 1, 4)], auto()),
        (vec![per_node(0, W), acc(1, R, 1, 4)], auto()),
        (vec![per_node(0, W)], on(1)),
        (
            vec![acc(1, R, 1, 4), per_node(0, R)],
            Options {
                execute: Execute::OnData(1),
                ..auto()
            },
        ),
    ];
    for (accesses, options) in cases {
        for me in 0..2 {
            assert_eq!(
                w.plan_on(me, &accesses, options),
                Err(InsertError::MixedPerNode),
                "{accesses:?}"
            );
        }
    }
}

#[test]
fn an_unknown_written_datum_of_an_auto_task_leaves_the_rank_out() {
    let w = World::new(3);
    let temp = acc(9, W, 2, 4);
    let task = [unknown(temp), acc(0, R, 0, 4)];
    let p = w.plan_on(0, &task, auto()).unwrap();
    assert_eq!(p, Plan::empty(None, false));
    assert!(p.is_empty());
}

#[test]
fn a_temporary_datum_is_skipped_by_ranks_that_do_not_know_it() {
    // t is known only on its owner 2, which runs the task; rank 0 still sends its datum
    // and invalidates the written one.
    let mut w = World::new(3);
    let temp = acc(9, RW, 2, 4);
    let plans = w.insert_with(
        |me| {
            let t = if me == 2 { temp } else { unknown(temp) };
            vec![t, acc(0, R, 0, 4), acc(1, RW, 1, 4)]
        },
        on(2),
    );
    assert_eq!(World::executor(&plans), Executor::Rank(Rank(2)));
    assert_eq!(plans[0].before.as_slice(), [t(0, 2, Direction::Send)]);
    assert_eq!(
        plans[0].cache.as_slice(),
        [
            CacheUpdate::SentSet {
                data: DataId(0),
                dest: Rank(2)
            },
            CacheUpdate::Invalidate { data: DataId(1) }
        ]
    );
    assert_eq!(
        plans[2].cache.last(),
        Some(&CacheUpdate::Invalidate { data: DataId(1) })
    );
    assert!(
        plans[2]
            .cache
            .contains(&CacheUpdate::Invalidate { data: DataId(9) })
    );
    // Unknown data are not scored either.
    let a = [unknown(acc(9, R, 2, 1000)), acc(0, R, 1, 4)];
    assert_eq!(
        w.plan_on(0, &a, auto()).unwrap().executor,
        Some(Executor::Rank(Rank(1)))
    );
}

#[test]
fn the_executor_must_know_every_datum() {
    let w = World::new(3);
    let task = [acc(0, R, 0, 4), unknown(acc(9, R, 2, 4))];
    assert_eq!(
        w.plan_on(1, &task, on(1)),
        Err(InsertError::UnknownData { index: 1 })
    );
    let on_data = Options {
        execute: Execute::OnData(1),
        ..auto()
    };
    assert_eq!(
        w.plan_on(0, &task, on_data),
        Err(InsertError::UnknownData { index: 1 })
    );
}

#[test]
fn bad_indices_and_ranks_are_refused() {
    let w = World::new(2);
    let task = [acc(0, R, 0, 4)];
    let on_data = Options {
        execute: Execute::OnData(3),
        ..auto()
    };
    assert_eq!(
        w.plan_on(0, &task, on_data),
        Err(InsertError::ExecuteOnDataOutOfRange { index: 3, len: 1 })
    );
    let out = InsertError::RankOutOfRange {
        rank: Rank(2),
        nranks: 2,
    };
    assert_eq!(w.plan_on(0, &task, on(2)), Err(out));
    assert_eq!(w.plan_on(0, &[acc(0, R, 2, 4)], auto()), Err(out));
    let cache = Cache::<8>::new();
    let p: Result<P, _> = plan(Rank(2), 2, &task, &auto(), &w.policies, &cache);
    assert_eq!(p, Err(out));
    // An unknown datum's owner is not checked: it means nothing here.
    assert!(w.plan_on(0, &[unknown(acc(0, R, 7, 4))], on(0)).is_err());
    assert!(w.plan_on(1, &[unknown(acc(0, R, 7, 4))], on(0)).is_ok());
}

fn always_nine(_me: Rank, _n: u32, _a: &[Access]) -> Rank {
    Rank(9)
}

#[test]
fn policy_failures_are_reported() {
    let mut w = World::new(2);
    let task = [acc(0, W, 0, 4), acc(1, W, 1, 4)];
    let bad = w.policies.register(always_nine).unwrap();
    let options = Options {
        policy: Some(bad),
        ..auto()
    };
    assert_eq!(
        w.plan_on(0, &task, options),
        Err(InsertError::Select(SelectError::OutOfRange {
            rank: Rank(9),
            nranks: 2
        }))
    );
    let options = Options {
        policy: Some(PolicyId(20)),
        ..auto()
    };
    let err = w.plan_on(0, &task, options).unwrap_err();
    assert_eq!(
        err,
        InsertError::Select(SelectError::NotRegistered {
            policy: PolicyId(20)
        })
    );
    assert!(core::error::Error::source(&err).is_some());
    // A single written owner needs no policy.
    assert!(w.plan_on(0, &task[..1], options).is_ok());
}

#[test]
fn a_plan_too_small_is_a_full_error() {
    let w = World::new(2);
    let task = [acc(0, R, 0, 4), acc(1, R, 0, 4), acc(2, R, 0, 4)];
    let cache = Cache::<8>::new();
    let p: Result<Plan<2>, _> = plan(Rank(1), 2, &task, &on(1), &w.policies, &cache);
    assert_eq!(p, Err(InsertError::Full(Table::PlanTransfers)));
    let p: Result<Plan<3>, _> = plan(Rank(1), 2, &task, &on(1), &w.policies, &cache);
    assert_eq!(p.unwrap().before.len(), 3);
}

/// Why an owner change must clear the datum's cache flags everywhere: the reference's
/// `set_rank` does not, and the next read is then sent but never received.
#[test]
fn an_owner_change_without_flush_breaks_agreement_and_a_flush_restores_it() {
    let run = |flush: bool| {
        let mut w = World::new(3);
        w.insert(&[acc(0, R, 0, 4)], on(2));
        if flush {
            for me in 0..3 {
                w.caches[me].clear_sent(DataId(0));
                w.caches[me].clear_received(DataId(0));
            }
        }
        // Owner is now 1; rank 2 reads again.
        let task = [acc(0, R, 1, 4)];
        let p1 = w.plan_on(1, &task, on(2)).unwrap();
        let p2 = w.plan_on(2, &task, on(2)).unwrap();
        (p1.before.len(), p2.before.len())
    };
    assert_eq!(run(false), (1, 0), "rank 1 sends, rank 2 does not receive");
    assert_eq!(run(true), (1, 1));
}

#[test]
fn errors_display_their_cause() {
    let e = InsertError::Select(SelectError::BuiltIn);
    assert!(std::format!("{e}").contains("built-in"));
    let e = InsertError::Full(Table::PlanTransfers);
    assert_eq!(std::format!("{e}"), "the plan transfer list is full");
}

#[test]
fn the_written_data_name_one_owner_or_leave_it_to_the_policy() {
    assert_eq!(
        written_owner(&[acc(1, R, 0, 8), acc(2, W, 1, 8), acc(3, RW, 1, 8)]),
        Ok(Written::Owner(Owner::Rank(Rank(1))))
    );
    assert_eq!(
        written_owner(&[acc(1, W, 0, 8), acc(2, W, 1, 8)]),
        Ok(Written::Policy)
    );
    assert_eq!(written_owner(&[acc(1, R, 0, 8)]), Ok(Written::Policy));
    assert_eq!(written_owner(&[]), Ok(Written::Policy));
    assert_eq!(
        written_owner(&[acc(1, R, 0, 8), unknown(acc(2, W, 1, 8))]),
        Ok(Written::Unknown)
    );
    assert_eq!(
        written_owner(&[per_node(1, W), per_node(2, RW)]),
        Ok(Written::Owner(Owner::PerNode))
    );
    assert_eq!(
        written_owner(&[per_node(1, W), acc(2, W, 1, 8)]),
        Err(InsertError::MixedPerNode)
    );
}

#[test]
fn a_policy_is_needed_only_for_an_automatic_task_whose_written_data_do_not_agree() {
    let split = [acc(1, W, 0, 8), acc(2, W, 1, 8)];
    assert!(policy_needed(&split, &auto()));
    assert!(!policy_needed(&split, &on(1)));
    assert!(!policy_needed(&[acc(1, RW, 0, 8)], &auto()));
    assert!(!policy_needed(&[unknown(acc(1, W, 0, 8))], &auto()));
    assert!(!policy_needed(&[per_node(1, W), acc(2, W, 1, 8)], &auto()));
    // Whenever it says no, the planner calls no policy: one with no policy registered
    // plans the same task.
    let policies = Policies::new();
    for accesses in [&[acc(1, RW, 0, 8)][..], &[acc(1, R, 0, 8), acc(2, W, 1, 8)]] {
        assert!(!policy_needed(accesses, &auto()));
        let p: P = plan(Rank(0), 2, accesses, &auto(), &policies, &Cache::<4>::new()).unwrap();
        assert!(p.executor.is_some());
    }
}

#[test]
fn a_named_datum_runs_the_task_on_its_access_or_on_its_owner() {
    let accesses = [acc(1, R, 0, 8), acc(2, W, 1, 8)];
    assert_eq!(
        execute_on_datum(&accesses, DataId(2), Owner::Rank(Rank(1))),
        Execute::OnData(1)
    );
    assert_eq!(
        execute_on_datum(&accesses, DataId(7), Owner::Rank(Rank(3))),
        Execute::OnNode(Rank(3))
    );
    assert_eq!(
        execute_on_datum(&accesses, DataId(7), Owner::PerNode),
        Execute::Auto
    );
    // An access this rank does not know is not the named datum.
    let hidden = [unknown(acc(2, W, 1, 8))];
    assert_eq!(
        execute_on_datum(&hidden, DataId(2), Owner::Rank(Rank(1))),
        Execute::OnNode(Rank(1))
    );
}
