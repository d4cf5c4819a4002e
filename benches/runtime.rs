//! Benchmarks of the threaded runtime (`starling-std`, through the `starling` facade),
//! each next to a `std` baseline measured in the same process and run.
//!
//! * `ping_pong/*`: two ranks of the in-process cluster (1 worker each) bounce a
//!   `Vector<u8>` with blocking `send`/`recv`; one iteration is one round trip. Baseline
//!   (`mpsc_channel`): two threads bounce a `Vec<u8>` over a pair of `std::sync::mpsc`
//!   channels, copying it once per direction (the sender copies its buffer into a recycled
//!   `Vec` and moves that; the receiver swaps it in as its buffer), with no allocation.
//! * `tasks/*`: one rank with 1 worker submits a batch of [`TASKS`] tasks, then
//!   `wait_for_all`; one iteration is one batch. Three kinds: `Codelet::empty`, a trivial
//!   kernel with no access (it bumps an atomic counter), and a chain of RW tasks on one
//!   `Variable<u64>` (each increments it). Baseline (`pool`): one worker thread pulling
//!   boxed closures doing the same work from a `Mutex<VecDeque>` + `Condvar`, the shape
//!   of the runtime's worker, and the submitter waiting for the batch on a second
//!   `Condvar`.
//! * `ring/*`: the handbook's token ring (detached receive → increment task → detached
//!   send) on 2 and 4 ranks, 1 worker each; one iteration is one lap (one hop per rank).
//!   No in-process baseline exists.
//!
//! Every figure is timed inside the cluster (after a warm-up and a barrier), never the
//! cluster's start-up, and handed to criterion through `iter_custom`.
//!
//! Run: `bash scripts/bench-runtime.sh` (figures in `docs/performance.md`).

use core::hint::black_box;
use core::mem;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::Instant;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use starling::core::{Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{ClusterConfig, Codelet, Context, RuntimeConfig, run_local_with};

/// Ping-pong message sizes.
const SIZES: [(&str, usize); 5] = [
    ("8B", 8),
    ("1KiB", 1 << 10),
    ("64KiB", 64 << 10),
    ("1MiB", 1 << 20),
    ("16MiB", 16 << 20),
];

/// Tasks per batch in `tasks/*`.
const TASKS: u64 = 1000;

/// Laps of the ring run untimed before the timed ones.
const WARM_LAPS: u32 = 20;

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

/// Untimed round trips before the timed ones: about 4 MiB moved, at least 2.
fn warm_round_trips(size: usize) -> u64 {
    ((4 << 20) / size).clamp(2, 200) as u64
}

// ----- ping-pong ---------------------------------------------------------------------

/// `iters` round trips of a `size`-byte vector between ranks 0 and 1, timed on rank 0.
fn starling_ping_pong(size: usize, iters: u64) -> Duration {
    let out = run_local_with(2, config(), move |ctx| {
        let v = ctx.register(Vector::from_vec(vec![1u8; size]));
        let me = ctx.rank().0;
        let peer = Rank(me ^ 1);
        let mut tag = 0i64;
        let mut round_trip = |ctx: &Context| {
            let (there, back) = (Tag(tag), Tag(tag + 1));
            if me == 0 {
                ctx.send(&v, peer, there).wait().expect("send");
                ctx.recv(&v, peer, back).wait().expect("receive");
            } else {
                ctx.recv(&v, peer, there).wait().expect("receive");
                ctx.send(&v, peer, back).wait().expect("send");
            }
            tag += 2;
        };
        for _ in 0..warm_round_trips(size) {
            round_trip(ctx);
        }
        ctx.barrier();
        let start = Instant::now();
        for _ in 0..iters {
            round_trip(ctx);
        }
        let elapsed = start.elapsed();
        ctx.wait_for_all();
        elapsed
    })
    .expect("a clean shutdown");
    out[0]
}

/// The baseline: the same round trips between two threads over `mpsc` channels. Each
/// side keeps its own buffer; a message is a copy of the sender's buffer written into a
/// recycled `Vec` (the one that arrived last) and moved through the channel, and the
/// receiver swaps it in as its buffer: one copy per direction, no allocation once warm.
fn channel_ping_pong(size: usize, iters: u64) -> Duration {
    let rounds = warm_round_trips(size) + iters;
    let (to_echo, echo_inbox) = mpsc::channel::<Vec<u8>>();
    let (to_main, main_inbox) = mpsc::channel::<Vec<u8>>();
    let echo = thread::spawn(move || {
        let mut mine = vec![1u8; size];
        for _ in 0..rounds {
            let got = echo_inbox.recv().expect("ping");
            let mut out = mem::replace(&mut mine, got);
            out.copy_from_slice(&mine);
            to_main.send(out).expect("pong");
        }
        black_box(mine.len())
    });
    let mut mine = vec![1u8; size];
    let mut spare = vec![0u8; size];
    let mut round_trip = || {
        spare.copy_from_slice(&mine);
        to_echo.send(mem::take(&mut spare)).expect("ping");
        let got = main_inbox.recv().expect("pong");
        spare = mem::replace(&mut mine, got);
    };
    for _ in 0..warm_round_trips(size) {
        round_trip();
    }
    let start = Instant::now();
    for _ in 0..iters {
        round_trip();
    }
    let elapsed = start.elapsed();
    echo.join().expect("the echo thread");
    elapsed
}

fn ping_pong(c: &mut Criterion) {
    let mut g = c.benchmark_group("ping_pong");
    g.sampling_mode(SamplingMode::Flat);
    for (name, size) in SIZES {
        // One iteration is a round trip: the message crosses twice.
        g.throughput(Throughput::Bytes(2 * size as u64));
        g.bench_with_input(BenchmarkId::new("starling", name), &size, |b, &size| {
            b.iter_custom(|iters| starling_ping_pong(size, iters));
        });
        g.bench_with_input(BenchmarkId::new("mpsc_channel", name), &size, |b, &size| {
            b.iter_custom(|iters| channel_ping_pong(size, iters));
        });
    }
    g.finish();
}

// ----- empty tasks -------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum TaskKind {
    /// `Codelet::empty`, no access.
    Empty,
    /// A kernel that bumps an atomic counter, no access.
    Trivial,
    /// A kernel that increments a `Variable<u64>` accessed RW: every task depends on the
    /// one before.
    Chain,
}

impl TaskKind {
    const ALL: [(&'static str, Self); 3] = [
        ("empty", Self::Empty),
        ("trivial", Self::Trivial),
        ("rw_chain", Self::Chain),
    ];
}

/// `iters` batches of [`TASKS`] tasks on one rank with one worker, each batch followed by
/// `wait_for_all`.
fn starling_tasks(kind: TaskKind, iters: u64) -> Duration {
    let out = run_local_with(1, config(), move |ctx| {
        let counter = Arc::new(AtomicU64::new(0));
        let c2 = Arc::clone(&counter);
        let codelet = match kind {
            TaskKind::Empty => Codelet::empty("empty"),
            TaskKind::Trivial => Codelet::new("trivial", move |_| {
                c2.fetch_add(1, Ordering::Relaxed);
            }),
            TaskKind::Chain => Codelet::new("increment", |b| {
                let mut x = b.w::<Variable<u64>>(0);
                let v = x.get();
                x.set(v + 1);
            }),
        };
        let x = ctx.register(Variable::new(0u64));
        let batch = || {
            for _ in 0..TASKS {
                match kind {
                    TaskKind::Chain => ctx.task(&codelet).rw(&x).submit(),
                    _ => ctx.task(&codelet).submit(),
                };
            }
            ctx.wait_for_all();
        };
        batch();
        let start = Instant::now();
        for _ in 0..iters {
            batch();
        }
        let elapsed = start.elapsed();
        let done = match kind {
            TaskKind::Empty => (iters + 1) * TASKS,
            TaskKind::Trivial => counter.load(Ordering::Relaxed),
            TaskKind::Chain => ctx.unregister(x).get(),
        };
        assert_eq!(done, (iters + 1) * TASKS, "{kind:?}: every task ran");
        elapsed
    })
    .expect("a clean shutdown");
    out[0]
}

type Job = Box<dyn FnOnce() + Send>;

struct PoolState {
    queue: VecDeque<Job>,
    /// Jobs submitted and not finished.
    pending: usize,
    stop: bool,
}

/// The baseline: a one-thread pool of boxed closures, shaped like the runtime's worker
/// (a locked queue, a condition variable for work, one for completion).
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
    idle: Condvar,
}

impl Pool {
    fn start() -> (Arc<Self>, thread::JoinHandle<()>) {
        let pool = Arc::new(Self {
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                pending: 0,
                stop: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let p = Arc::clone(&pool);
        let worker = thread::spawn(move || p.worker_loop());
        (pool, worker)
    }

    fn submit(&self, job: Job) {
        let mut st = self.state.lock().expect("pool lock");
        st.queue.push_back(job);
        st.pending += 1;
        self.work.notify_one();
    }

    fn wait_for_all(&self) {
        let mut st = self.state.lock().expect("pool lock");
        while st.pending > 0 {
            st = self.idle.wait(st).expect("pool lock");
        }
    }

    fn stop(&self) {
        self.state.lock().expect("pool lock").stop = true;
        self.work.notify_all();
    }

    fn worker_loop(&self) {
        loop {
            let mut st = self.state.lock().expect("pool lock");
            let job = loop {
                if let Some(job) = st.queue.pop_front() {
                    break job;
                }
                if st.stop {
                    return;
                }
                st = self.work.wait(st).expect("pool lock");
            };
            drop(st);
            job();
            let mut st = self.state.lock().expect("pool lock");
            st.pending -= 1;
            if st.pending == 0 {
                self.idle.notify_all();
            }
        }
    }
}

/// The baseline of [`starling_tasks`]: the same batches of closures on [`Pool`].
fn pool_tasks(kind: TaskKind, iters: u64) -> Duration {
    let (pool, worker) = Pool::start();
    let counter = Arc::new(AtomicU64::new(0));
    let value = Arc::new(Mutex::new(0u64));
    let batch = || {
        for _ in 0..TASKS {
            let job: Job = match kind {
                TaskKind::Empty => Box::new(|| {}),
                TaskKind::Trivial => {
                    let c = Arc::clone(&counter);
                    Box::new(move || {
                        c.fetch_add(1, Ordering::Relaxed);
                    })
                }
                TaskKind::Chain => {
                    let v = Arc::clone(&value);
                    Box::new(move || *v.lock().expect("value lock") += 1)
                }
            };
            pool.submit(job);
        }
        pool.wait_for_all();
    };
    batch();
    let start = Instant::now();
    for _ in 0..iters {
        batch();
    }
    let elapsed = start.elapsed();
    pool.stop();
    worker.join().expect("the pool's worker");
    let done = match kind {
        TaskKind::Empty => (iters + 1) * TASKS,
        TaskKind::Trivial => counter.load(Ordering::Relaxed),
        TaskKind::Chain => *value.lock().expect("value lock"),
    };
    assert_eq!(done, (iters + 1) * TASKS, "{kind:?}: every job ran");
    elapsed
}

fn tasks(c: &mut Criterion) {
    let mut g = c.benchmark_group("tasks");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(TASKS));
    for (name, kind) in TaskKind::ALL {
        g.bench_with_input(BenchmarkId::new("starling", name), &kind, |b, &kind| {
            b.iter_custom(|iters| starling_tasks(kind, iters));
        });
        g.bench_with_input(BenchmarkId::new("pool", name), &kind, |b, &kind| {
            b.iter_custom(|iters| pool_tasks(kind, iters));
        });
    }
    g.finish();
}

// ----- ring --------------------------------------------------------------------------

/// `laps` laps of the handbook's detached ring, with tags from `base`. Rank 0 starts
/// with the token it holds; the last rank keeps it at the end.
fn ring_laps(ctx: &Context, token: &starling::Handle<Vector<u32>>, laps: u32, base: i64) {
    let (rank, size) = (ctx.rank().0, ctx.size());
    let increment = Codelet::new("increment_token", |b| {
        b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
    });
    let prev = Rank((rank + size - 1) % size);
    let next = Rank((rank + 1) % size);
    for l in 0..laps {
        let tag = Tag(base + i64::from(l * size + rank));
        if !(l == 0 && rank == 0) {
            ctx.recv(token, prev, tag)
                .detach(|r| r.expect("receive"))
                .expect("receive the token");
        }
        ctx.task(&increment).rw(token).submit();
        if !(l == laps - 1 && rank == size - 1) {
            ctx.send(token, next, Tag(tag.0 + 1))
                .detach(|r| r.expect("send"))
                .expect("send the token");
        }
    }
    ctx.wait_for_all();
}

/// `laps` timed laps of the ring on `ranks` ranks: from the first rank leaving the
/// starting barrier to the last rank finishing its work.
fn starling_ring(ranks: u32, laps: u32) -> Duration {
    let out = run_local_with(ranks, config(), move |ctx| {
        let token = ctx.register(Vector::<u32>::zeros(1));
        ring_laps(ctx, &token, WARM_LAPS, 0);
        ctx.barrier();
        let start = Instant::now();
        ring_laps(ctx, &token, laps, 1 << 40);
        (start, Instant::now())
    })
    .expect("a clean shutdown");
    let start = out.iter().map(|t| t.0).min().expect("ranks");
    let end = out.iter().map(|t| t.1).max().expect("ranks");
    end - start
}

fn ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
    g.sampling_mode(SamplingMode::Flat);
    for ranks in [2u32, 4] {
        // One iteration is one lap: `ranks` hops.
        g.throughput(Throughput::Elements(u64::from(ranks)));
        g.bench_with_input(BenchmarkId::new("starling", ranks), &ranks, |b, &ranks| {
            b.iter_custom(|laps| starling_ring(ranks, u32::try_from(laps).expect("laps")));
        });
    }
    g.finish();
}

criterion_group! {
    name = runtime;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = ping_pong, tasks, ring
}
criterion_main!(runtime);
