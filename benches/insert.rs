//! Benchmarks of the insert-task utility, through the two dense examples (their code is
//! included here as modules, so the bench measures exactly what they run), each next to a
//! baseline measured in the same process and run.
//!
//! * `stencil_insert/*`: the submission cost of the 5-point stencil
//!   (`examples/stencil5.rs`) as fake rank 2 of 1024 (`run_fake`, kernels disabled, 1
//!   worker), the handbook's way of measuring one rank's share of a big job. Every cell of
//!   a 256 × 256 grid (`STARLING_BENCH_STENCIL_SIDE` to change it) is registered on the
//!   rank, outside the timed part, block-distributed by rows; one iteration is one sweep
//!   (254² logical tasks), timed from the first insert to the last, without the
//!   `wait_for_all` that follows. Four variants: `unpruned` (every insert submitted),
//!   `pruned` (the example's rule: the handbook's test, then the cache test),
//!   `pruned_handbook` (the handbook's test alone, valid here: the distribution is fixed)
//!   and the baseline `test_only` (the same loop evaluating the handbook's test, with no
//!   insert at all: the floor of any pruned submission). `unpruned_checked` is
//!   `unpruned` with the graph-agreement check on (every insert folded into the rank's
//!   digest and kept in its ring; off by default in release builds): its cost.
//!   `unpruned_cpu` and `unpruned_checked_cpu` are the same two, timed in CPU time of the
//!   submitting thread (`/proc/thread-self/schedstat`; wall-clock where it is missing),
//!   which a machine shared with other jobs does not inflate.
//! * `cholesky/*`: the tiled Cholesky (`examples/cholesky.rs`, n = 2048, nb = 256) on 1, 2
//!   and 4 in-process ranks with 1 worker each; one iteration is one factorization, timed
//!   on rank 0 between two barriers (registration and the cluster's start-up excluded).
//!   Baseline (`sequential`): the same faer tile kernels called in the same order by a
//!   plain loop over `Vec<f64>` tiles in this thread.
//!
//! Every figure is handed to criterion through `iter_custom`.
//!
//! Run: `bash scripts/bench-insert.sh` (figures in `docs/performance.md`).

use core::cell::OnceCell;
use core::hint::black_box;
use core::time::Duration;
use std::time::Instant;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use faer::{MatMut, MatRef};
use starling::core::Rank;
use starling::{ClusterConfig, RuntimeConfig, run_fake, run_local_with};

#[allow(
    dead_code,
    reason = "the example's command line and checks are not benchmarked"
)]
#[path = "../examples/stencil5.rs"]
mod stencil5;

#[allow(
    dead_code,
    reason = "the example's command line and checks are not benchmarked"
)]
#[path = "../examples/cholesky.rs"]
mod cholesky;

use stencil5::{Counts, Distribution, Params, Pruning};

/// The fake job: rank 2 of 1024, as in the handbook.
const FAKE_RANK: Rank = Rank(2);
const FAKE_SIZE: u32 = 1024;

/// The Cholesky problem.
const N: usize = 2048;
const NB: usize = 256;

fn config(workers: usize, disable_kernels: bool) -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers,
            disable_kernels,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

// ----- stencil submission ------------------------------------------------------------

fn stencil(c: &mut Criterion) {
    let side: usize = std::env::var("STARLING_BENCH_STENCIL_SIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let base = Params {
        ranks: FAKE_SIZE,
        x: side,
        y: side,
        iterations: 1,
        pruning: Pruning::Off,
    };
    let tasks = ((side - 2) * (side - 2)) as u64;
    let case = format!("{side}x{side}");
    run_fake(FAKE_RANK, FAKE_SIZE, config(1, true), |ctx| {
        let codelet = stencil5::codelet();
        // Registered on first use, so that a run filtered to other benchmarks skips it.
        let grid = OnceCell::new();
        let grid = || {
            grid.get_or_init(|| {
                let start = Instant::now();
                let grid = stencil5::register_grid(ctx, &base, Distribution::Rows)
                    .expect("registering the grid");
                eprintln!(
                    "stencil_insert: registered {} handles in {:.2} s",
                    grid.len(),
                    start.elapsed().as_secs_f64()
                );
                // What one sweep does on the fake rank, for the record.
                for pruning in [Pruning::Off, Pruning::Safe] {
                    let mut counts = Counts::default();
                    let p = Params { pruning, ..base };
                    stencil5::sweeps(ctx, &p, Distribution::Rows, &grid, &codelet, &mut counts)
                        .expect("an insert");
                    ctx.wait_for_all();
                    eprintln!(
                        "stencil_insert: {pruning:?}: per sweep {} inserts, {} skipped, \
                         {} executed on rank 2",
                        counts.inserted, counts.skipped, counts.executed
                    );
                }
                grid
            })
        };
        let mut group = c.benchmark_group("stencil_insert");
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.throughput(Throughput::Elements(tasks));
        for (name, pruning, checked, cpu) in [
            ("unpruned", Pruning::Off, false, false),
            ("unpruned_checked", Pruning::Off, true, false),
            ("unpruned_cpu", Pruning::Off, false, true),
            ("unpruned_checked_cpu", Pruning::Off, true, true),
            ("pruned", Pruning::Safe, false, false),
            ("pruned_handbook", Pruning::Handbook, false, false),
        ] {
            let p = Params { pruning, ..base };
            group.bench_function(BenchmarkId::new(name, &case), |b| {
                let grid = grid();
                ctx.set_check_agreement(checked);
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut counts = Counts::default();
                        let start = Instant::now();
                        let cpu_start = thread_cpu().filter(|_| cpu);
                        let rows = Distribution::Rows;
                        stencil5::sweeps(ctx, &p, rows, grid, &codelet, &mut counts)
                            .expect("an insert");
                        total += match (cpu_start, thread_cpu()) {
                            (Some(a), Some(b)) => b.saturating_sub(a),
                            _ => start.elapsed(),
                        };
                        black_box(counts);
                        ctx.wait_for_all();
                    }
                    total
                });
                ctx.set_check_agreement(false);
            });
        }
        group.bench_function(BenchmarkId::new("test_only", &case), |b| {
            b.iter_custom(|iters| {
                let (me, size, rows) = (FAKE_RANK, FAKE_SIZE, Distribution::Rows);
                let start = Instant::now();
                for _ in 0..iters {
                    let mut kept = 0u64;
                    for x in 1..side - 1 {
                        for y in 1..side - 1 {
                            let (x, y) = (black_box(x), black_box(y));
                            if stencil5::owns_any(me, size, &base, rows, x, y) {
                                kept += 1;
                            }
                        }
                    }
                    black_box(kept);
                }
                start.elapsed()
            });
        });
        group.finish();
    })
    .expect("a clean shutdown of the fake rank");
}

/// CPU time this thread has run so far, from `/proc/thread-self/schedstat` (Linux);
/// `None` where it cannot be read.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

// ----- Cholesky ----------------------------------------------------------------------

/// One factorization on `ranks` in-process ranks with 1 worker each: rank 0's time
/// between the barriers around the inserts and the `wait_for_all`.
fn starling_cholesky(ranks: u32) -> Duration {
    let p = cholesky::Params {
        ranks,
        n: N,
        nb: NB,
        check: false,
        openblas: false,
    };
    let out = run_local_with(ranks, config(1, false), move |ctx| {
        let tiles = cholesky::register_tiles(ctx, &p).expect("registering the tiles");
        let codelets = cholesky::Codelets::new();
        ctx.wait_for_all();
        ctx.barrier();
        let start = Instant::now();
        cholesky::factorize(ctx, &p, &tiles, &codelets).expect("an insert");
        ctx.wait_for_all();
        ctx.barrier();
        start.elapsed()
    })
    .expect("a clean shutdown");
    out[0]
}

/// A tile's storage as an `NB × NB` matrix.
fn view(t: &[f64]) -> MatRef<'_, f64> {
    MatRef::from_column_major_slice(t, NB, NB)
}

/// The baseline: the same kernels, in the same order, in a plain loop in this thread.
fn sequential_cholesky() -> Duration {
    let p = cholesky::Params {
        ranks: 1,
        n: N,
        nb: NB,
        check: false,
        openblas: false,
    };
    let nt = p.nt();
    let mut t: Vec<Vec<Vec<f64>>> = (0..nt)
        .map(|m| (0..=m).map(|k| cholesky::tile(&p, m, k)).collect())
        .collect();
    let start = Instant::now();
    for k in 0..nt {
        cholesky::potrf(MatMut::from_column_major_slice_mut(&mut t[k][k], NB, NB));
        for m in k + 1..nt {
            let (top, bottom) = t.split_at_mut(m);
            let l = view(&top[k][k]);
            cholesky::trsm(
                l,
                MatMut::from_column_major_slice_mut(&mut bottom[0][k], NB, NB),
            );
        }
        for n in k + 1..nt {
            let (top, bottom) = t.split_at_mut(n + 1);
            {
                let row_n = &mut top[n];
                let (panel, rest) = row_n.split_at_mut(k + 1);
                let diag = &mut rest[n - k - 1];
                cholesky::syrk(
                    view(&panel[k]),
                    MatMut::from_column_major_slice_mut(diag, NB, NB),
                );
            }
            let a_n = &top[n][k];
            for row_m in bottom.iter_mut() {
                let (left, right) = row_m.split_at_mut(n);
                cholesky::gemm(
                    view(&left[k]),
                    view(a_n),
                    MatMut::from_column_major_slice_mut(&mut right[0], NB, NB),
                );
            }
        }
    }
    let elapsed = start.elapsed();
    black_box(&t);
    elapsed
}

fn cholesky_benches(c: &mut Criterion) {
    let flops = cholesky::Params {
        ranks: 1,
        n: N,
        nb: NB,
        check: false,
        openblas: false,
    }
    .flops();
    let mut group = c.benchmark_group("cholesky");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.throughput(Throughput::Elements(flops as u64));
    let case = format!("n{N}_nb{NB}");
    group.bench_function(BenchmarkId::new("sequential", &case), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| sequential_cholesky()).sum());
    });
    for ranks in [1u32, 2, 4] {
        group.bench_function(BenchmarkId::new(format!("starling_{ranks}"), &case), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| starling_cholesky(ranks)).sum());
        });
    }
    group.finish();
}

criterion_group!(benches, stencil, cholesky_benches);
criterion_main!(benches);
