//! The soak workloads of issue 17 ("correct at any size"): flows of tens or hundreds of
//! thousands of outstanding messages, far past the protocol engine's tables, at the
//! default capacities. Each workload checks every value it moved, and the run fails
//! (exit status 1) on a wrong value, an error, a watchdog or anything left at shutdown;
//! it ends by printing the process's peak resident set size. `scripts/soak.sh` runs
//! every workload at 10× the sizes of the issue's table, in-process and under `mpirun`.
//!
//! ```sh
//! cargo run --release --example soak -- <workload> [ranks] [n]
//! cargo run --release --example soak -- stencil 2 40000        # an 8 × 40 000 grid
//! cargo run --release --example soak -- outstanding 2 1000,100000 5
//! cargo build --release --features mpi --example soak
//! mpirun -n 4 target/release/examples/soak gather 4 1000000    # ranks = mpirun's -n
//! ```
//!
//! The workloads (`n` in brackets: the issue's size; every rank does its part at once):
//!
//! | workload | what every rank does |
//! | --- | --- |
//! | `stencil` | the `stencil5` example on an 8 × `n` grid, 3 sweeps each way, its migrations and gather in one pass, checked bit for bit against the sequential run (4 000 on 2 ranks, 1 100 on 4) |
//! | `gather` | `gather_detached` of `n` handles owned round-robin onto rank 0 in one call, then `scatter_detached` of them back, changed (100 000) |
//! | `get-data` | `get_data_on_node_detached` of each of `n` handles onto rank 0, the whole set in flight at once (100 000) |
//! | `early-recvs` | posts `n` detached receives from the previous rank, then (after a barrier) `n` detached sends to the next (20 000) |
//! | `reverse` | sends `n` eager messages to the next rank; after they arrived, receives the previous rank's in the reverse order (1 100) |
//! | `one-tag` | sends `n` messages on one tag to the next rank; after they arrived, receives them in order (4 200) |
//! | `pairs` | posts `n` receives (`ctx.recv(..).start()`) from the previous rank and `n` sends to the next, all at once, then waits for each (50 000) |
//! | `cache` | ranks 1.. own `n` variables round-robin; rank 0 reads each twice through inserts; the owner and the reader must agree on every cached pair (70 000) |
//! | `outstanding` | 2 ranks: rank 0 sends `n` messages to rank 1, all outstanding at once (receives posted first, `posted`; sends first, `early`; both at once, `mixed`), for each `n` of a comma-separated list, rounds alternating between the sizes: the time per message of each size and their ratio |
//!
//! `outstanding` takes `[ranks] [n,n,...] [rounds]` and prints, per mode, the median time
//! per message of every size and its ratio to the first size.
//! A small size repeats its round on the next `n` handles each time, so that every size
//! moves each of the largest size's handles once per round: the same working set, and the
//! ratio measures the number outstanding, not a cache that holds 1 000 handles and not
//! 100 000 (`SOAK_SAME_HANDLES=1`: the first `n` handles every time, as before).
//!
//! Standard output holds the result lines, each printed by one rank; the timings and the
//! peak RSS go to standard error (`soak: … peak RSS …`), one line per process.

use std::process::ExitCode;
use std::time::Instant;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Variable;
use starling::{AnyHandle, ClusterConfig, Codelet, Context, Handle, launch_with};

#[path = "stencil5.rs"]
#[allow(
    dead_code,
    reason = "the stencil example's `main` and CLI are not used here"
)]
mod stencil5;

/// What a rank's part returns: its result line, or what went wrong.
type Outcome = Result<String, String>;

/// The value of a variable, read on this rank.
fn value(ctx: &Context, h: &Handle<Variable<u64>>) -> u64 {
    ctx.acquire(h, AccessMode::R).get().get()
}

/// The rank this one sends to, and the one it receives from, in a ring of the ranks.
fn neighbours(ctx: &Context) -> (Rank, Rank) {
    let (me, size) = (ctx.rank().0, ctx.size());
    (Rank((me + 1) % size), Rank((me + size - 1) % size))
}

/// The value message `i` from rank `from` carries.
fn payload(from: Rank, i: u64) -> u64 {
    u64::from(from.0) << 40 | i
}

/// Counts the values of `hs` that are not `payload(from, i)`; `Err` names the first.
fn check_received(ctx: &Context, what: &str, hs: &[Handle<Variable<u64>>], from: Rank) -> Outcome {
    let wrong: Vec<usize> = (0..hs.len())
        .filter(|&i| value(ctx, &hs[i]) != payload(from, i as u64))
        .collect();
    match wrong.first() {
        None => Ok(format!(
            "rank {}: {what}: {} values right",
            ctx.rank().0,
            hs.len()
        )),
        Some(&i) => Err(format!(
            "rank {}: {what}: {} of {} values wrong (first: message {i})",
            ctx.rank().0,
            wrong.len(),
            hs.len()
        )),
    }
}

/// `early-recvs`: every receive is posted before any send of the job.
fn early_recvs(ctx: &Context, n: u64) -> Outcome {
    let (next, prev) = neighbours(ctx);
    let ins: Vec<_> = (0..n)
        .map(|_| ctx.register(Variable::new(u64::MAX)))
        .collect();
    for (i, h) in ins.iter().enumerate() {
        ctx.recv(h, prev, Tag(i as i64))
            .detach(|r| {
                r.expect("a detached receive");
            })
            .map_err(|e| e.to_string())?;
    }
    ctx.barrier();
    let me = ctx.rank();
    for i in 0..n {
        let h = ctx.register(Variable::new(payload(me, i)));
        ctx.send(&h, next, Tag(i as i64))
            .detach(|r| {
                r.expect("a detached send");
            })
            .map_err(|e| e.to_string())?;
    }
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    check_received(ctx, "receives posted before their sends", &ins, prev)
}

/// Sends `n` detached messages to the next rank, on tag `i` (or `tag` for all when given).
fn send_all(ctx: &Context, n: u64, tag: Option<i64>) -> Result<(), String> {
    let (next, _) = neighbours(ctx);
    let me = ctx.rank();
    for i in 0..n {
        let h = ctx.register(Variable::new(payload(me, i)));
        ctx.send(&h, next, Tag(tag.unwrap_or(i as i64)))
            .detach(|r| {
                r.expect("a detached send");
            })
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `reverse`: every message has arrived before its receive, received last first.
fn reverse(ctx: &Context, n: u64) -> Outcome {
    let (_, prev) = neighbours(ctx);
    send_all(ctx, n, None)?;
    ctx.barrier();
    let h = ctx.register(Variable::new(u64::MAX));
    for i in (0..n).rev() {
        ctx.recv(&h, prev, Tag(i as i64))
            .wait()
            .map_err(|e| format!("message {i}: {e}"))?;
        if value(ctx, &h) != payload(prev, i) {
            return Err(format!("rank {}: message {i} wrong", ctx.rank().0));
        }
    }
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    Ok(format!(
        "rank {}: {n} messages received in the reverse order of their arrival",
        ctx.rank().0
    ))
}

/// `one-tag`: every message on one tag, received after they arrived, in order.
fn one_tag(ctx: &Context, n: u64) -> Outcome {
    let (_, prev) = neighbours(ctx);
    send_all(ctx, n, Some(5))?;
    ctx.barrier();
    let h = ctx.register(Variable::new(u64::MAX));
    for i in 0..n {
        ctx.recv(&h, prev, Tag(5))
            .wait()
            .map_err(|e| format!("message {i}: {e}"))?;
        if value(ctx, &h) != payload(prev, i) {
            return Err(format!("rank {}: message {i} out of order", ctx.rank().0));
        }
    }
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    Ok(format!(
        "rank {}: {n} messages on one tag received in order",
        ctx.rank().0
    ))
}

/// `pairs`: every receive and every send posted at once, then waited for.
fn pairs(ctx: &Context, n: u64) -> Outcome {
    let (next, prev) = neighbours(ctx);
    let me = ctx.rank();
    let ins: Vec<_> = (0..n)
        .map(|_| ctx.register(Variable::new(u64::MAX)))
        .collect();
    let outs: Vec<_> = (0..n)
        .map(|i| ctx.register(Variable::new(payload(me, i))))
        .collect();
    let mut requests = Vec::with_capacity(2 * n as usize);
    for (i, h) in ins.iter().enumerate() {
        requests.push(
            ctx.recv(h, prev, Tag(i as i64))
                .start()
                .map_err(|e| e.to_string())?,
        );
    }
    for (i, h) in outs.iter().enumerate() {
        requests.push(
            ctx.send(h, next, Tag(i as i64))
                .start()
                .map_err(|e| e.to_string())?,
        );
    }
    for r in requests {
        r.wait().map_err(|e| e.to_string())?;
    }
    check_received(ctx, "isend/irecv pairs posted at once", &ins, prev)
}

/// Registers `n` variables, variable `i` owned by `owner(i)` with the value `i` there.
fn owned_variables(
    ctx: &Context,
    n: u64,
    owner: impl Fn(u64) -> Rank,
) -> Result<Vec<Handle<Variable<u64>>>, String> {
    (0..n)
        .map(|i| {
            ctx.register_owned(Tag(i as i64), Owner::Rank(owner(i)), move || {
                Variable::new(i)
            })
            .map_err(|e| e.to_string())
        })
        .collect()
}

/// `gather`: the whole set onto rank 0 in one call, changed there, scattered back.
fn gather(ctx: &Context, n: u64) -> Outcome {
    let size = u64::from(ctx.size());
    let me = ctx.rank();
    let owner = |i: u64| Rank((i % size) as u32);
    let hs = owned_variables(ctx, n, owner)?;
    let any: Vec<AnyHandle> = hs.iter().map(AnyHandle::from).collect();
    ctx.gather_detached(&any, Rank(0), || {}, || {})
        .map_err(|e| e.to_string())?;
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    if me == Rank(0) {
        for (i, h) in hs.iter().enumerate() {
            let v = value(ctx, h);
            if v != i as u64 {
                return Err(format!("rank 0: gathered value {i} wrong: {v}"));
            }
            ctx.acquire(h, AccessMode::W).get_mut().set(v + 1);
        }
    }
    ctx.scatter_detached(&any, Rank(0), || {}, || {})
        .map_err(|e| e.to_string())?;
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    let wrong = (0..n)
        .filter(|&i| owner(i) == me && value(ctx, &hs[i as usize]) != i + 1)
        .count();
    if wrong > 0 {
        return Err(format!("rank {}: {wrong} scattered values wrong", me.0));
    }
    Ok(format!(
        "rank {}: {n} handles gathered on rank 0 and scattered back",
        me.0
    ))
}

/// `get-data`: each handle brought to rank 0, the whole set in flight at once.
fn get_data(ctx: &Context, n: u64) -> Outcome {
    let size = u64::from(ctx.size());
    let hs = owned_variables(ctx, n, |i| Rank((i % size) as u32))?;
    for h in &hs {
        ctx.get_data_on_node_detached(h, Rank(0))
            .map_err(|e| e.to_string())?;
    }
    ctx.mpi_wait_for_all().map_err(|e| e.to_string())?;
    if ctx.rank() == Rank(0) {
        let wrong = (0..n).filter(|&i| value(ctx, &hs[i as usize]) != i).count();
        if wrong > 0 {
            return Err(format!("rank 0: {wrong} of {n} values wrong"));
        }
    }
    Ok(format!(
        "rank {}: {n} handles brought to rank 0",
        ctx.rank().0
    ))
}

/// `cache`: rank 0 reads every variable of the other ranks twice; each (owner, reader)
/// pair must agree on what is cached, and the sum must be right.
fn cache(ctx: &Context, n: u64) -> Outcome {
    let size = u64::from(ctx.size());
    if size < 2 {
        return Err("the cache workload needs 2 ranks or more".into());
    }
    let me = ctx.rank();
    let owner = |i: u64| Rank((1 + i % (size - 1)) as u32);
    let hs = owned_variables(ctx, n, owner)?;
    let sum = ctx
        .register_owned(Tag(n as i64), Owner::Rank(Rank(0)), || Variable::new(0u64))
        .map_err(|e| e.to_string())?;
    let add = Codelet::new("add", |b| {
        let v = b.r::<Variable<u64>>(1).get();
        let s = b.r::<Variable<u64>>(0).get();
        b.w::<Variable<u64>>(0).set(s.wrapping_add(v));
    });
    for _ in 0..2 {
        for h in &hs {
            ctx.insert(&add)
                .rw(&sum)
                .r(h)
                .submit()
                .map_err(|e| e.to_string())?;
        }
    }
    ctx.mpi_wait_for_all().map_err(|e| e.to_string())?;
    // What this rank's cache says of each datum it is a party to, as a bit string.
    let cached: Vec<bool> = (0..n)
        .filter(|&i| me == Rank(0) || owner(i) == me)
        .map(|i| {
            let h = &hs[i as usize];
            if me == Rank(0) {
                ctx.cached_receive(h)
            } else {
                ctx.cached_send(h, Rank(0))
            }
        })
        .collect();
    let total = (me == Rank(0)).then(|| value(ctx, &sum));
    if let Some(total) = total {
        let expected = n * (n - 1);
        if total != expected {
            return Err(format!("rank 0: sum {total}, expected {expected}"));
        }
    }
    // The ranks compare their cache states through the data they hold: each owner sends
    // its bits to rank 0, which compares them with its own.
    let bits = |c: &[bool]| -> Vec<u64> {
        c.chunks(64)
            .map(|w| {
                w.iter()
                    .enumerate()
                    .fold(0u64, |acc, (k, b)| acc | (u64::from(*b) << k))
            })
            .collect()
    };
    let cached_count = cached.iter().filter(|c| **c).count();
    if me == Rank(0) {
        for o in 1..size {
            let mine: Vec<bool> = (0..n)
                .filter(|&i| owner(i) == Rank(o as u32))
                .map(|i| cached[i as usize])
                .collect();
            let h = ctx.register(starling::interfaces::Vector::from_vec(vec![
                0u64;
                mine.len()
                    .div_ceil(
                        64
                    )
            ]));
            ctx.recv(&h, Rank(o as u32), Tag(n as i64 + 1))
                .wait()
                .map_err(|e| e.to_string())?;
            let theirs = ctx.acquire(&h, AccessMode::R).get().as_slice().to_vec();
            if theirs != bits(&mine) {
                return Err(format!(
                    "rank 0 and rank {o} disagree on their cached pairs"
                ));
            }
        }
    } else {
        let h = ctx.register(starling::interfaces::Vector::from_vec(bits(&cached)));
        ctx.send(&h, Rank(0), Tag(n as i64 + 1))
            .wait()
            .map_err(|e| e.to_string())?;
    }
    Ok(format!(
        "rank {}: {n} variables read twice by rank 0, sum right, cached pairs agree ({cached_count} cached here)",
        me.0
    ))
}

/// `stencil`: the stencil5 example on an 8 × `n` grid, 3 sweeps each way.
fn stencil(ctx: &Context, n: u64) -> Outcome {
    let p = stencil5::Params {
        ranks: ctx.size(),
        x: 8,
        y: n as usize,
        iterations: 3,
        pruning: stencil5::Pruning::Safe,
    };
    let (counts, grid) = stencil5::distributed(ctx, &p, None).map_err(|e| e.to_string())?;
    if let Some(grid) = grid {
        stencil5::check(&p, &grid)?;
    }
    Ok(format!(
        "rank {}: stencil 8 × {n}: {} inserts, {} tasks executed{}",
        ctx.rank().0,
        counts.inserted,
        counts.executed,
        if ctx.rank().0 == ctx.size() - 1 {
            ", the grid equals the sequential run bit for bit"
        } else {
            ""
        }
    ))
}

/// How rank 0's messages meet rank 1's receives in `outstanding`.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Every receive posted before the first send.
    Posted,
    /// Every message arrived before the first receive.
    Early,
    /// Both at once.
    Mixed,
}

/// One round of `outstanding`: rank 0 sends `n` messages to rank 1, all outstanding at
/// once; the time from the first post to the last completion, on both ranks.
fn outstanding_round(
    ctx: &Context,
    mode: Mode,
    out: &[Handle<Variable<u64>>],
    ins: &[Handle<Variable<u64>>],
) -> Result<f64, String> {
    let me = ctx.rank();
    let post_recvs = || -> Result<(), String> {
        for (i, h) in ins.iter().enumerate() {
            ctx.recv(h, Rank(0), Tag(i as i64))
                .detach(|r| {
                    r.expect("a detached receive");
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let post_sends = || -> Result<(), String> {
        for (i, h) in out.iter().enumerate() {
            ctx.send(h, Rank(1), Tag(i as i64))
                .detach(|r| {
                    r.expect("a detached send");
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    ctx.barrier();
    let start = Instant::now();
    match (mode, me.0) {
        (Mode::Posted, 1) => {
            post_recvs()?;
            ctx.barrier();
        }
        (Mode::Posted, 0) => {
            ctx.barrier();
            post_sends()?;
        }
        (Mode::Early, 0) => {
            post_sends()?;
            ctx.wait_for_all();
            ctx.barrier();
        }
        (Mode::Early, 1) => {
            ctx.barrier();
            post_recvs()?;
        }
        (Mode::Mixed, 0) => post_sends()?,
        (Mode::Mixed, 1) => post_recvs()?,
        _ => {}
    }
    ctx.try_wait_for_all().map_err(|e| e.to_string())?;
    ctx.barrier();
    Ok(start.elapsed().as_secs_f64())
}

/// `outstanding`: the time per message of each size, rounds alternating between the
/// sizes, on ranks 0 and 1. Rank 0 returns its lines.
fn outstanding(ctx: &Context, sizes: &[u64], rounds: usize) -> Outcome {
    let me = ctx.rank();
    if ctx.size() != 2 {
        return Err("outstanding runs on 2 ranks".into());
    }
    // SOAK_HANDLES=n registers at least n handles (a profile of one size with the other's
    // working set).
    let at_least: u64 = std::env::var("SOAK_HANDLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let largest = sizes.iter().copied().max().unwrap_or(0).max(at_least);
    // One round moves at least this many messages: a small size repeats its exchange.
    let per_round = largest.max(100_000);
    let out: Vec<_> = (0..largest)
        .map(|i| ctx.register(Variable::new(payload(me, i))))
        .collect();
    let ins: Vec<_> = (0..largest)
        .map(|_| ctx.register(Variable::new(u64::MAX)))
        .collect();
    // The fixed cost of a round (its barriers and waits) with no message, for scale.
    let mut empty: Vec<f64> = (0..=rounds)
        .map(|_| outstanding_round(ctx, Mode::Mixed, &[], &[]).map(|s| s * 1e6))
        .collect::<Result<_, _>>()?;
    let mut lines = vec![format!(
        "outstanding: a round with no message takes {:.1} µs (its barriers and waits); \
         a size of n repeats its round until 100 000 messages have moved",
        median(&mut empty)
    )];
    let same_handles = std::env::var("SOAK_SAME_HANDLES").is_ok_and(|v| v == "1");
    // SOAK_MODES=posted,early,mixed (default: all three) picks the modes, for profiling one.
    let picked = std::env::var("SOAK_MODES")
        .unwrap_or_default()
        .to_lowercase();
    for mode in [Mode::Posted, Mode::Early, Mode::Mixed] {
        if !picked.is_empty() && !picked.contains(&format!("{mode:?}").to_lowercase()) {
            continue;
        }
        // samples[s]: ns per message of size s, one per round.
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
        for round in 0..=rounds {
            for (s, &n) in sizes.iter().enumerate() {
                let n_us = n as usize;
                let repeats = per_round.div_ceil(n);
                let mut secs = 0.0;
                for k in 0..repeats {
                    // Each repeat of a small size takes the next n handles, so that both
                    // sizes touch the same 100 000 handles per round (the same working
                    // set; `SOAK_SAME_HANDLES=1`: the first n each time, hot in cache).
                    let at = if same_handles {
                        0
                    } else {
                        (k as usize * n_us) % (out.len() - n_us + 1)
                    };
                    let (o, i) = (&out[at..at + n_us], &ins[at..at + n_us]);
                    secs += outstanding_round(ctx, mode, o, i)?;
                    if me == Rank(1) {
                        let wrong = (0..n_us)
                            .filter(|&j| value(ctx, &i[j]) != payload(Rank(0), (at + j) as u64))
                            .count();
                        if wrong > 0 {
                            return Err(format!("{mode:?} n = {n}: {wrong} values wrong"));
                        }
                        for h in i {
                            ctx.acquire(h, AccessMode::W).get_mut().set(u64::MAX);
                        }
                    }
                }
                // Round 0 warms up.
                if round > 0 {
                    samples[s].push(secs * 1e9 / (repeats * n) as f64);
                }
            }
        }
        let medians: Vec<f64> = samples.iter_mut().map(|v| median(v)).collect();
        let mut line = format!("outstanding {mode:?}:");
        for (s, &n) in sizes.iter().enumerate() {
            line += &format!(
                " n={n} {:.1} ns/msg ({:.2}×)",
                medians[s],
                medians[s] / medians[0]
            );
        }
        lines.push(line);
    }
    Ok(if me == Rank(0) {
        lines.join("\n")
    } else {
        format!("rank 1: every value right in {rounds} rounds")
    })
}

/// The median of `v` (sorted in place); 0 for none.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// This process's peak resident set size in MiB (`VmHWM`), when `/proc` says.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: soak <stencil|gather|get-data|early-recvs|reverse|one-tag|pairs|cache> [ranks] [n] \
                 | soak outstanding [ranks] [n,n,...] [rounds]";
    let Some(workload) = args.first().cloned() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let ranks: u32 = match args.get(1).map_or(Ok(2), |s| s.parse()) {
        Ok(r) if r > 0 => r,
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let sizes: Vec<u64> = match args
        .get(2)
        .map_or("10000", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<u64>, _>>()
    {
        Ok(s) if !s.is_empty() && s.iter().all(|n| *n > 0) => s,
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let n = sizes[0];
    let config = ClusterConfig::from_env();
    let start = Instant::now();
    let w = workload.clone();
    let out = launch_with(ranks, config, move |ctx| -> Outcome {
        match w.as_str() {
            "stencil" => stencil(ctx, n),
            "gather" => gather(ctx, n),
            "get-data" => get_data(ctx, n),
            "early-recvs" => early_recvs(ctx, n),
            "reverse" => reverse(ctx, n),
            "one-tag" => one_tag(ctx, n),
            "pairs" => pairs(ctx, n),
            "cache" => cache(ctx, n),
            "outstanding" => outstanding(ctx, &sizes, rounds),
            other => Err(format!("unknown workload `{other}`")),
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let rss = peak_rss_mib().map_or_else(|| "?".into(), |m| format!("{m:.0} MiB"));
    let mut ok = true;
    match out {
        Ok(results) => {
            for (_, r) in results {
                match r {
                    Ok(line) => println!("{line}"),
                    Err(e) => {
                        eprintln!("soak {workload}: FAILED: {e}");
                        ok = false;
                    }
                }
            }
        }
        Err(e) => {
            let e: String = e.to_string().chars().take(3000).collect();
            eprintln!("soak {workload}: FAILED: the cluster did not shut down cleanly: {e}");
            ok = false;
        }
    }
    eprintln!(
        "soak: {workload} ranks={ranks} n={n}: {} in {elapsed:.2} s, peak RSS {rss}",
        if ok { "ok" } else { "FAILED" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
