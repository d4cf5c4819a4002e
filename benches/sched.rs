//! Scheduling policies side by side, in one process: 100 000 empty tasks on one rank of
//! 2 workers under `prio` and `ws` (the issue's target: `ws` ≥ `prio`), alternating the
//! policies run after run so that a noisy machine weighs on both alike; prints each
//! policy's median time and tasks per second, and the ratio.
//!
//! ```sh
//! cargo bench --bench sched -- [runs] [tasks]      # default: 9 runs of 100 000 tasks
//! ```
//!
//! `scripts/bench-sched.sh` runs it after the Cholesky comparison of `prio` and `dmda`.

use core::time::Duration;
use std::time::Instant;

use starling::{ClusterConfig, Codelet, RuntimeConfig, SchedPolicy, run_local_with};

/// One batch of `tasks` empty tasks (no access) submitted on one rank of 2 workers and
/// waited for, after a warm-up batch of a tenth as many; the batch's time.
fn empty_tasks(sched: SchedPolicy, tasks: usize) -> Duration {
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 2,
            sched,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    };
    let out = run_local_with(1, config, move |ctx| {
        let empty = Codelet::empty("empty");
        for _ in 0..tasks / 10 {
            ctx.task(&empty).submit();
        }
        ctx.wait_for_all();
        let start = Instant::now();
        for _ in 0..tasks {
            ctx.task(&empty).submit();
        }
        ctx.wait_for_all();
        start.elapsed()
    })
    .expect("a clean shutdown");
    out[0]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; keep the numbers only.
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let runs = args.first().copied().unwrap_or(9).max(1);
    let tasks = args.get(1).copied().unwrap_or(100_000).max(10);
    let policies = [SchedPolicy::Prio, SchedPolicy::Ws];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); policies.len()];
    for run in 0..runs {
        // Alternate which policy goes first.
        for k in 0..policies.len() {
            let i = (k + run) % policies.len();
            times[i].push(empty_tasks(policies[i], tasks));
        }
    }
    println!("empty tasks: {tasks} per run, 1 rank, 2 workers, {runs} runs per policy");
    let medians: Vec<Duration> = times.iter().cloned().map(median).collect();
    for (p, (m, all)) in policies.iter().zip(medians.iter().zip(&times)) {
        let ms: Vec<String> = all
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64() * 1e3))
            .collect();
        println!(
            "  {:<5} median {:>8.2} ms  {:>10.0} tasks/s   (runs, ms: {})",
            p.name(),
            m.as_secs_f64() * 1e3,
            tasks as f64 / m.as_secs_f64(),
            ms.join(" ")
        );
    }
    println!(
        "  ws / prio throughput: {:.3}",
        medians[0].as_secs_f64() / medians[1].as_secs_f64()
    );
}
