//! Starling's side of two benchmarks of the side-by-side comparison with StarPU-MPI
//! (`bench/compare/run.sh`) that no other example measures as the C side does:
//!
//! * `empty-tasks [ntasks] [reps]` — one rank (the in-process cluster, one rank; workers
//!   from `STARLING_NCPU`) submits `ntasks` tasks of an empty CPU codelet, then waits for
//!   all: time per task, submission and execution together (the C side:
//!   `empty_task_starpu.c`, `starpu_task_insert` of an empty codelet).
//! * `insert [side] [niter] [reps] [pruned|unpruned]` — the handbook's stencil5 as a
//!   measure of submission cost: this process poses as rank 2 of 1024
//!   (`run_fake`, kernels disabled, 1 worker), registers every cell of a `side × side`
//!   grid of `Variable<f32>` with the handbook's `my_distrib` as owner, and times `niter`
//!   sweeps of `insert(RW c, R left, R right, R up, R down)`, with or without the
//!   handbook's pruning `if`; per logical task (`niter · (side − 2)²` loop iterations),
//!   the insertion loops alone (the C side: `insert_starpu.c`).
//! * `submit [loops] [reps]` — the submitting thread's cost per node of a flow submitted
//!   ahead of its execution, as the handbook's ring is: on each of the two ranks of an
//!   in-process cluster (1 worker each), `loops` times a task and a detached transfer on
//!   one handle (rank 0 sends after its task, rank 1 receives before its own), all
//!   chained, while a first task holds the handle until the whole flow is in; per node,
//!   the submission loop alone, both ranks submitting at once, the first repetition
//!   (`cold`: the tables and the heap grow) apart (no C side in `run.sh`).
//! * `pingpong [iters] [reps]` — blocking `send`/`recv` round trips of a `Vector<u8>` of
//!   8 B, 1 KiB, 64 KiB and 1 MiB between the two ranks of an in-process cluster (1 worker
//!   each): the half round trip (the MPI side of `run.sh` measures the same over MPI with
//!   `mpi_bench`; this one needs no MPI, and `scripts/bench-against.sh` runs it against an
//!   older commit); `PINGPONG_SIZES=8B,1KiB` runs only those sizes (for a profile).
//! * `acquire [handles] [reps]` — `Context::acquire` of a handle nothing else uses, then
//!   the guard dropped (`starpu_data_acquire` / `starpu_data_release`), on one rank (1
//!   worker): per acquisition, in read mode over `handles` handles, then in write mode
//!   (the value set through the guard); then `register` and `unregister` of a temporary
//!   `Variable` (its data handed back), per pair; the first repetition discarded (no C
//!   side in `run.sh`; compare it with an older commit's binary, alternating).
//!
//! Each repetition after a discarded warm-up prints `SAMPLE <bench> starling <param>
//! <value> us`, the line format `run.sh` pools.
//!
//! ```sh
//! cargo run --release --example compare -- empty-tasks 100000 5
//! cargo run --release --example compare -- insert 256 10 3 unpruned
//! cargo run --release --example compare -- submit 20000 5
//! cargo run --release --example compare -- pingpong 2000 5
//! cargo run --release --example compare -- acquire 10000 5
//! ```

use std::process::ExitCode;
use std::time::Instant;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{ClusterConfig, Codelet, InsertError, RuntimeConfig, run_fake, run_local_with};

/// The handbook's distribution, verbatim (`stencil5`, "MPI Insert Task Utility"): the
/// owner of cell (x, y) among `nodes` ranks.
fn my_distrib(x: usize, y: usize, nodes: u32) -> u32 {
    let s = f64::from(nodes).sqrt();
    ((x as f64 / s + (y as f64 / s) * s) as i64 % i64::from(nodes)) as u32
}

fn empty_tasks(ntasks: usize, reps: usize) {
    let config = ClusterConfig::from_env();
    let out = run_local_with(1, config, move |ctx| {
        let empty = Codelet::new("empty", |_| {});
        let mut samples = Vec::new();
        for rep in 0..=reps {
            let start = Instant::now();
            for _ in 0..ntasks {
                ctx.task(&empty).submit();
            }
            ctx.wait_for_all();
            if rep > 0 {
                samples.push(start.elapsed().as_secs_f64() * 1e6 / ntasks as f64);
            }
        }
        samples
    })
    .expect("a clean shutdown");
    for s in &out[0] {
        println!("SAMPLE empty_task starling ntasks={ntasks} {s:.6} us");
    }
}

/// Two in-process ranks' configuration from the environment, with one worker each.
fn one_worker() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::from_env()
    }
}

/// `submit`: ns per node submitted, once cold and `reps` times more; each sample is the
/// slower rank's.
fn submit(loops: usize, reps: usize) {
    let config = one_worker();
    let out = run_local_with(2, config, move |ctx| {
        let me = ctx.rank().0;
        let peer = Rank(me ^ 1);
        let hold = Codelet::new("hold", |_| {
            std::thread::sleep(core::time::Duration::from_millis(100));
        });
        let step = Codelet::new("step", |b| {
            b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
        });
        let mut samples = Vec::new();
        for _ in 0..=reps {
            let h = ctx.register(Vector::<u32>::zeros(1));
            ctx.barrier();
            // Holds `h` until the flow is in, so that nothing runs while it is submitted.
            ctx.task(&hold).rw(&h).submit();
            let start = Instant::now();
            for l in 0..loops {
                let tag = Tag(l as i64);
                if me == 0 {
                    ctx.task(&step).rw(&h).submit();
                    ctx.send(&h, peer, tag)
                        .detach(|r| r.expect("a detached send"))
                        .expect("send");
                } else {
                    ctx.recv(&h, peer, tag)
                        .detach(|r| r.expect("a detached receive"))
                        .expect("receive");
                    ctx.task(&step).rw(&h).submit();
                }
            }
            let ns = start.elapsed().as_secs_f64() * 1e9 / (2 * loops) as f64;
            ctx.wait_for_all();
            // Rank 1's steps add one to each value received: the last is `loops` + 1.
            assert_eq!(
                ctx.acquire(&h, AccessMode::R).get().as_slice()[0] as usize,
                loops + me as usize,
                "every step ran once, on the value before it"
            );
            let _ = ctx.unregister(h);
            samples.push(ns);
        }
        samples
    })
    .expect("a clean shutdown");
    // The first repetition grows the runtime's tables and the allocator's heap (a flow
    // submitted once, as the ring's is); the others reuse them.
    for (rep, (a, b)) in out[0].iter().zip(&out[1]).enumerate() {
        let when = if rep == 0 { ",cold" } else { "" };
        println!(
            "SAMPLE submit starling loops={loops}{when} {:.1} ns",
            a.max(*b)
        );
    }
}

/// Half round trips of `iters` blocking round trips per size, `reps` times after a
/// warm-up, on 2 in-process ranks; rank 0 prints the samples.
fn pingpong(iters: usize, reps: usize) {
    let config = one_worker();
    // PINGPONG_SIZES=8B,1KiB picks sizes (for a profile of one).
    let picked = std::env::var("PINGPONG_SIZES").unwrap_or_default();
    let out = run_local_with(2, config, move |ctx| {
        let me = ctx.rank().0;
        let peer = Rank(me ^ 1);
        let mut lines = Vec::new();
        let mut tag = 0i64;
        for (name, size) in [
            ("8B", 8),
            ("1KiB", 1 << 10),
            ("64KiB", 64 << 10),
            ("1MiB", 1 << 20),
        ] {
            if !picked.is_empty() && !picked.split(',').any(|p| p == name) {
                continue;
            }
            let v = ctx.register(Vector::from_vec(vec![1u8; size]));
            // Fewer round trips for the large sizes: about the same bytes as 8 KiB ones.
            let n = if size > 8192 {
                (iters / (size / 8192)).max(20)
            } else {
                iters
            };
            for rep in 0..=reps {
                ctx.barrier();
                let start = Instant::now();
                for _ in 0..n {
                    let (there, back) = (Tag(tag), Tag(tag + 1));
                    tag = (tag + 2) % 30_000;
                    if me == 0 {
                        ctx.send(&v, peer, there).wait().expect("send");
                        ctx.recv(&v, peer, back).wait().expect("receive");
                    } else {
                        ctx.recv(&v, peer, there).wait().expect("receive");
                        ctx.send(&v, peer, back).wait().expect("send");
                    }
                }
                let half = start.elapsed().as_secs_f64() * 1e6 / n as f64 / 2.0;
                if rep > 0 {
                    lines.push(format!(
                        "SAMPLE pingpong starling-local {name} {half:.6} us"
                    ));
                }
            }
        }
        ctx.wait_for_all();
        lines
    })
    .expect("a clean shutdown");
    for line in &out[0] {
        println!("{line}");
    }
}

fn insert(side: usize, niter: usize, reps: usize, pruned: bool) -> Result<(), InsertError> {
    const FAKE_RANK: u32 = 2;
    const FAKE_SIZE: u32 = 1024;
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: true,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::from_env()
    };
    let samples = run_fake(Rank(FAKE_RANK), FAKE_SIZE, config, |ctx| {
        let (me, size) = (ctx.rank().0, ctx.size());
        let mut grid = Vec::with_capacity(side * side);
        for x in 0..side {
            for y in 0..side {
                let owner = Owner::Rank(Rank(my_distrib(x, y, size)));
                let tag = Tag((x * side + y) as i64);
                grid.push(ctx.register_owned(tag, owner, || Variable::new(0.0f32))?);
            }
        }
        let at = |x: usize, y: usize| &grid[x * side + y];
        let stencil = Codelet::new("stencil5", |b| {
            let mut s = b.r::<Variable<f32>>(0).get();
            for i in 1..5 {
                s += b.r::<Variable<f32>>(i).get();
            }
            b.w::<Variable<f32>>(0).set(s / 5.0);
        });
        let logical = (niter * (side - 2) * (side - 2)) as f64;
        let mut samples = Vec::new();
        for rep in 0..=reps {
            let start = Instant::now();
            for _ in 0..niter {
                for x in 1..side - 1 {
                    for y in 1..side - 1 {
                        if pruned
                            && !(my_distrib(x, y, size) == me
                                || my_distrib(x - 1, y, size) == me
                                || my_distrib(x + 1, y, size) == me
                                || my_distrib(x, y - 1, size) == me
                                || my_distrib(x, y + 1, size) == me)
                        {
                            continue;
                        }
                        ctx.insert(&stencil)
                            .rw(at(x, y))
                            .r(at(x - 1, y))
                            .r(at(x + 1, y))
                            .r(at(x, y - 1))
                            .r(at(x, y + 1))
                            .submit()?;
                    }
                }
            }
            let elapsed = start.elapsed();
            ctx.wait_for_all();
            if rep > 0 {
                samples.push(elapsed.as_secs_f64() * 1e6 / logical);
            }
        }
        Ok::<_, InsertError>(samples)
    })
    .expect("a clean shutdown")?;
    let variant = if pruned { "pruned" } else { "unpruned" };
    for s in samples {
        println!(
            "SAMPLE insert starling {variant},grid={side}x{side},niter={niter},fake={FAKE_RANK}/{FAKE_SIZE} {s:.6} us"
        );
    }
    Ok(())
}

fn acquire(handles: usize, reps: usize) {
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::from_env()
    };
    let out = run_local_with(1, config, move |ctx| {
        let hs: Vec<_> = (0..handles)
            .map(|i| ctx.register(Variable::new(i as u64)))
            .collect();
        let (mut read, mut write) = (Vec::new(), Vec::new());
        let mut sum = 0u64;
        for rep in 0..=reps {
            let start = Instant::now();
            for h in &hs {
                sum = sum.wrapping_add(ctx.acquire(h, AccessMode::R).get().get());
            }
            let r = start.elapsed().as_secs_f64() * 1e6 / handles as f64;
            let start = Instant::now();
            for h in &hs {
                ctx.acquire(h, AccessMode::W).get_mut().set(sum);
            }
            let w = start.elapsed().as_secs_f64() * 1e6 / handles as f64;
            if rep > 0 {
                read.push(r);
                write.push(w);
            }
        }
        assert!(
            hs.iter()
                .all(|h| ctx.acquire(h, AccessMode::R).get().get() == sum)
        );
        // Registration and unregistration of a temporary handle (the data handed back).
        let mut lifetime = Vec::new();
        for rep in 0..=reps {
            let start = Instant::now();
            for i in 0..handles {
                let h = ctx.register(Variable::new(i as u64));
                sum = sum.wrapping_add(ctx.unregister(h).get());
            }
            if rep > 0 {
                lifetime.push(start.elapsed().as_secs_f64() * 1e6 / handles as f64);
            }
        }
        core::hint::black_box(sum);
        (read, write, lifetime)
    })
    .expect("a clean shutdown");
    let (read, write, lifetime) = &out[0];
    for s in read {
        println!("SAMPLE acquire starling R,handles={handles} {s:.6} us");
    }
    for s in write {
        println!("SAMPLE acquire starling W,handles={handles} {s:.6} us");
    }
    for s in lifetime {
        println!("SAMPLE acquire starling register+unregister {s:.6} us");
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| {
        args.get(i)
            .map_or(Some(default), |s| s.parse().ok())
            .filter(|n| *n > 0)
    };
    let usage = "usage: compare empty-tasks [ntasks] [reps] | insert [side] [niter] [reps] [pruned|unpruned] | submit [loops] [reps] | pingpong [iters] [reps] | acquire [handles] [reps]";
    match args.first().map(String::as_str) {
        Some("empty-tasks") => {
            let (Some(n), Some(reps)) = (num(1, 100_000), num(2, 5)) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            empty_tasks(n, reps);
        }
        Some("submit") => {
            let (Some(loops), Some(reps)) = (num(1, 20_000), num(2, 5)) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            submit(loops, reps);
        }
        Some("pingpong") => {
            let (Some(iters), Some(reps)) = (num(1, 2000), num(2, 5)) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            pingpong(iters, reps);
        }
        Some("acquire") => {
            let (Some(handles), Some(reps)) = (num(1, 10_000), num(2, 5)) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            acquire(handles, reps);
        }
        Some("insert") => {
            let (Some(side), Some(niter), Some(reps)) = (num(1, 256), num(2, 10), num(3, 3)) else {
                eprintln!("{usage}");
                return ExitCode::from(2);
            };
            if side < 3 {
                eprintln!("compare: the grid needs at least 3 × 3 cells");
                return ExitCode::from(2);
            }
            let pruned = match args.get(4).map(String::as_str) {
                None | Some("unpruned") => false,
                Some("pruned") => true,
                Some(_) => {
                    eprintln!("{usage}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = insert(side, niter, reps, pruned) {
                eprintln!("compare: {e}");
                return ExitCode::FAILURE;
            }
        }
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::my_distrib;

    #[test]
    fn the_handbooks_distribution_gives_rank_2_of_1024_its_63_cells_per_sweep() {
        // As measured for StarPU (anchor numbers §5.4: exec/sweep = 63 at 256²).
        let mine = (1..255)
            .flat_map(|x| (1..255).map(move |y| (x, y)))
            .filter(|&(x, y)| my_distrib(x, y, 1024) == 2)
            .count();
        assert_eq!(mine, 63);
    }
}
