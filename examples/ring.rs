//! The handbook's token ring, on the in-process cluster (no MPI needed) or, built with
//! the `mpi` feature and started by `mpirun`, across MPI processes ([`starling::launch`]).
//!
//! Rank 0 starts with token 0; in each loop every rank receives the token from its left
//! neighbour, increments it in a task, and sends it to its right neighbour, so after
//! `loops` loops the last rank holds `loops × ranks`. The variants are the reference's
//! tests of the same name:
//!
//! * `detached` (default, the handbook's code): detached receive → increment task →
//!   detached send; nothing waits, the implicit dependencies on the token order it all;
//! * `async` (`ring_async`): `ctx.recv(..).start()` / `ctx.send(..).start()` returning
//!   requests, each waited on;
//! * `sync` (`ring_sync`): synchronous sends (`ctx.send(..).sync().start()`), waited on;
//! * `ms`: the ring's task in master-slave mode ([`starling::launch_ms`]): the master
//!   submits the `loops × (ranks − 1)` increments as an ordinary flow on one token and the
//!   slaves run them; the code of the task is the same, the start-up registers it by
//!   name.
//!
//! ```sh
//! cargo run --release --example ring -- [ranks] [loops] [detached|async|sync]
//! cargo build --release --features mpi --example ring
//! mpirun -n 4 target/release/examples/ring 4 [loops] [variant]   # ranks = mpirun's -n
//! ```
//!
//! The time per hop is measured on the ranks, from a barrier before the first hop to a
//! barrier after the last (start-up and shutdown excluded). `RING_HOPS=1` (in-process)
//! also prints the distribution of the hops: the time from one increment to the next,
//! by token value, and the hops taken before and after the first rank finished submitting
//! its flow; `RING_HOPS_DUMP=<file>` also writes each hop (token value, ms since the
//! start, µs) to that file, one per line.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::Mutex;
use std::time::Instant;

use starling::core::{AccessMode, Rank, Tag};
use starling::interfaces::Vector;
use starling::ms::{MsConfig, Registry};
use starling::{ClusterConfig, Codelet, Context, launch, launch_ms};

/// One rank's part: its rank, the job's size, its final token and the ring's duration.
struct Outcome {
    rank: u32,
    size: u32,
    token: u32,
    elapsed: Duration,
}

/// Whether `RING_HOPS=1` asked for the hops' distribution.
static HOPS: AtomicBool = AtomicBool::new(false);
/// With `RING_HOPS=1`: when each increment ran, by the token value it left.
static STAMPS: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
/// With `RING_HOPS=1`: when each rank had submitted its whole flow.
static SUBMITTED: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

/// The ring's task: the token plus one.
fn increment() -> Codelet {
    Codelet::new("increment_token", |b| {
        let mut token = b.w::<Vector<u32>>(0);
        let slot = &mut token.as_mut_slice()[0];
        *slot += 1;
        if HOPS.load(Ordering::Relaxed) {
            let value = *slot;
            STAMPS.lock().expect("stamps").push((value, Instant::now()));
        }
    })
}

/// `RING_HOPS=1`: the hops' percentiles (µs), the slow ones, and the hops taken while
/// the ranks were still submitting.
fn print_hops(start: Instant) {
    let mut stamps = STAMPS.lock().expect("stamps").clone();
    stamps.sort_by_key(|s| s.0);
    let submitted = SUBMITTED.lock().expect("submitted").iter().min().copied();
    let mut all: Vec<f64> = Vec::new();
    let mut early = 0;
    for w in stamps.windows(2) {
        all.push(w[1].1.saturating_duration_since(w[0].1).as_secs_f64() * 1e6);
        early += usize::from(submitted.is_some_and(|t| w[1].1 <= t));
    }
    if let Ok(path) = std::env::var("RING_HOPS_DUMP") {
        let lines: Vec<String> = stamps
            .windows(2)
            .map(|w| {
                format!(
                    "{} {:.3} {:.3}",
                    w[1].0,
                    w[1].1.duration_since(start).as_secs_f64() * 1e3,
                    w[1].1.saturating_duration_since(w[0].1).as_secs_f64() * 1e6
                )
            })
            .collect();
        let _ = std::fs::write(path, lines.join("\n"));
    }
    if all.is_empty() {
        return;
    }
    all.sort_by(f64::total_cmp);
    let at = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    let slow: Vec<f64> = all.iter().copied().filter(|d| *d > 10.0).collect();
    eprintln!(
        "hops: p10 {:.2} p50 {:.2} p90 {:.2} p99 {:.2} max {:.0} µs, mean {:.2}; {} of {} \
         over 10 µs ({:.0} % of the time); {early} taken before a rank had submitted its \
         flow ({:.1} ms after the start)",
        at(0.1),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        all.iter().sum::<f64>() / all.len() as f64,
        slow.len(),
        all.len(),
        100.0 * slow.iter().sum::<f64>() / all.iter().sum::<f64>(),
        submitted.map_or(0.0, |t| t.duration_since(start).as_secs_f64() * 1e3),
    );
}

fn ring(ctx: &Context, loops: u32, variant: &str) -> Outcome {
    let (rank, size) = (ctx.rank().0, ctx.size());
    let token = ctx.register(Vector::<u32>::zeros(1));
    let increment = increment();
    let prev = Rank((rank + size - 1) % size);
    let next = Rank((rank + 1) % size);
    ctx.barrier();
    let start = Instant::now();
    for l in 0..loops {
        let tag = Tag(i64::from(l * size + rank));
        if l == 0 && rank == 0 {
            let t = ctx.acquire(&token, AccessMode::W);
            t.get_mut().as_mut_slice()[0] = 0;
            println!("Start with token value {}", t.get().as_slice()[0]);
        } else {
            match variant {
                "detached" => ctx.recv(&token, prev, tag).detach(|r| r.expect("receive")),
                _ => ctx.recv(&token, prev, tag).start().and_then(|r| r.wait()),
            }
            .expect("receive the token");
        }
        ctx.task(&increment).rw(&token).submit();
        if l == loops - 1 && rank == size - 1 {
            SUBMITTED.lock().expect("submitted").push(Instant::now());
            let t = ctx.acquire(&token, AccessMode::R);
            println!("Finished: token value {}", t.get().as_slice()[0]);
        } else {
            let next_tag = Tag(tag.0 + 1);
            match variant {
                "detached" => ctx
                    .send(&token, next, next_tag)
                    .detach(|r| r.expect("send")),
                "sync" => ctx
                    .send(&token, next, next_tag)
                    .sync()
                    .start()
                    .and_then(|r| r.wait()),
                _ => ctx
                    .send(&token, next, next_tag)
                    .start()
                    .and_then(|r| r.wait()),
            }
            .expect("send the token");
        }
    }
    if rank != size - 1 {
        SUBMITTED.lock().expect("submitted").push(Instant::now());
    }
    ctx.wait_for_all();
    ctx.barrier();
    let elapsed = start.elapsed();
    if rank == 0 && HOPS.load(Ordering::Relaxed) {
        print_hops(start);
    }

    Outcome {
        rank,
        size,
        token: ctx.unregister(token).as_slice()[0],
        elapsed,
    }
}

/// The ring in master-slave mode: the master's flow increments the token once per slave
/// and loop; returns the token and the time the flow took.
fn ring_ms(ranks: u32, loops: u32) -> Option<(u32, u32, Duration)> {
    let registry = Registry::new().codelet(&increment());
    let hops = loops * (ranks.max(2) - 1);
    launch_ms(
        ranks,
        MsConfig::from_env(),
        ClusterConfig::from_env(),
        registry,
        move |ctx| {
            let increment = increment();
            let token = ctx.register(Vector::<u32>::zeros(1));
            let start = Instant::now();
            for _ in 0..hops {
                ctx.task(&increment).rw(&token).submit();
            }
            let value = ctx.unregister(token).as_slice()[0];
            (value, hops, start.elapsed())
        },
    )
    .expect("a clean master-slave run")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let loops: u32 = args.next().map_or(1000, |a| a.parse().expect("loops"));
    let variant = args.next().unwrap_or_else(|| "detached".into());
    assert!(
        matches!(variant.as_str(), "detached" | "async" | "sync" | "ms"),
        "variant: detached, async, sync or ms"
    );
    assert!(ranks >= 1 && loops >= 1);
    HOPS.store(
        std::env::var("RING_HOPS").is_ok_and(|v| v == "1"),
        Ordering::Relaxed,
    );
    if variant == "ms" {
        // `None`: a slave's process under mpirun.
        if let Some((token, hops, elapsed)) = ring_ms(ranks, loops) {
            println!("Finished: token value {token}");
            assert_eq!(token, hops, "the token went astray");
            eprintln!(
                "ms ring: {hops} tasks in {:.1} ms, {:.2} µs per task (master-slave)",
                elapsed.as_secs_f64() * 1e3,
                elapsed.as_secs_f64() * 1e6 / f64::from(hops)
            );
        }
        return;
    }
    let v = variant.clone();
    let outcomes = launch(ranks, move |ctx| ring(ctx, loops, &v)).expect("a clean shutdown");
    // In-process: every rank's outcome; under mpirun: this process's rank only.
    for o in outcomes.values().filter(|o| o.rank == o.size - 1) {
        let (size, last) = (o.size, o.token);
        eprintln!("[{}] token = {last} == {loops} * {size} ?", size - 1);
        assert_eq!(last, loops * size, "the token went astray");
        let hops = loops * size;
        let how = if outcomes.len() == 1 && size > 1 {
            format!("MPI, {size} processes")
        } else {
            "in-process cluster".to_string()
        };
        eprintln!(
            "{variant} ring: {hops} hops in {:.1} ms, {:.2} µs per hop ({how})",
            o.elapsed.as_secs_f64() * 1e3,
            o.elapsed.as_secs_f64() * 1e6 / f64::from(hops)
        );
    }
}
