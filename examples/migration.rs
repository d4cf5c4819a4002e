//! Data migration (`migrate`, the reference's `starpu_mpi_data_migrate`, as in its
//! `stencil5` example): a periodic 1-D stencil runs on a block distribution, every cell
//! then migrates to the next rank, the stencil continues — its tasks now run on the new
//! owners — and the cells migrate back for a last phase. Every rank checks that
//! `data_owner` changed for every cell after each migration and that every task ran on
//! its cell's current owner; the new owners check their cells' values after the first
//! migration, and rank 0 checks the final values against a sequential run.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch`]); each rank checks its own part
//! and prints its own lines, so both ways print the same lines (in some order).
//!
//! ```sh
//! cargo run --release --example migration -- [ranks] [cells] [iterations]
//! cargo build --release --features mpi --example migration
//! mpirun -n 4 target/release/examples/migration 4 [cells] [iterations]
//! ```

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Variable;
use starling::{Codelet, Context, launch};

const MODULUS: i64 = 1_000_003;

/// The stencil: `u_i ← (u_i + 2 u_{i−1} + 3 u_{i+1} + 1) mod p`.
fn stencil(u: i64, left: i64, right: i64) -> i64 {
    (u + 2 * left + 3 * right + 1) % MODULUS
}

fn initial(i: usize) -> i64 {
    (i * i + 7) as i64
}

/// The cells after `iters` sweeps, run sequentially (in place, in order, as the task flow
/// reads).
fn sequential(n: usize, iters: usize) -> Vec<i64> {
    let mut u: Vec<i64> = (0..n).map(initial).collect();
    for _ in 0..iters {
        for i in 0..n {
            u[i] = stencil(u[i], u[(i + n - 1) % n], u[(i + 1) % n]);
        }
    }
    u
}

/// The block distribution, and the same shifted by one rank.
fn block(i: usize, n: usize, size: u32) -> Rank {
    Rank((i * size as usize / n) as u32)
}

fn shifted(i: usize, n: usize, size: u32) -> Rank {
    Rank((block(i, n, size).0 + 1) % size)
}

/// What one rank saw.
struct Report {
    /// Cells whose owner, as this rank sees it, was not the expected one after each
    /// migration (and at the start).
    bad_owners: usize,
    /// Tasks whose executor was not their cell's owner of the phase.
    bad_executors: usize,
    /// This rank's cells after the first two phases (cell, value), read where they live.
    owned_mid: Vec<(usize, i64)>,
    /// All cells at the end, on rank 0.
    last: Option<Vec<i64>>,
}

fn migration(ctx: &Context, n: usize, iters: usize) -> Report {
    let (me, size) = (ctx.rank(), ctx.size());
    let cells: Vec<_> = (0..n)
        .map(|i| {
            ctx.register_owned(Tag(i as i64), Owner::Rank(block(i, n, size)), move || {
                Variable::new(initial(i))
            })
            .expect("register a cell")
        })
        .collect();
    let update = Codelet::new("stencil", |b| {
        let left = b.r::<Variable<i64>>(1).get();
        let right = b.r::<Variable<i64>>(2).get();
        let mut u = b.w::<Variable<i64>>(0);
        let v = u.get();
        u.set(stencil(v, left, right));
    });
    let (mut bad_owners, mut bad_executors) = (0, 0);
    let mut check_owners = |dist: fn(usize, usize, u32) -> Rank| {
        bad_owners += (0..n)
            .filter(|&i| ctx.data_owner(&cells[i]) != Some(Owner::Rank(dist(i, n, size))))
            .count();
    };
    let mut sweep = |dist: fn(usize, usize, u32) -> Rank| {
        for _ in 0..iters {
            for i in 0..n {
                let ins = ctx
                    .insert(&update)
                    .rw(&cells[i])
                    .r(&cells[(i + n - 1) % n])
                    .r(&cells[(i + 1) % n])
                    .submit()
                    .expect("insert a stencil task");
                if ins.executor != Some(dist(i, n, size)) {
                    bad_executors += 1;
                }
            }
        }
    };
    let migrate_all = |dist: fn(usize, usize, u32) -> Rank| {
        for (i, c) in cells.iter().enumerate() {
            ctx.migrate(c, dist(i, n, size)).expect("migrate a cell");
        }
    };
    check_owners(block);
    sweep(block);
    migrate_all(shifted);
    check_owners(shifted);
    sweep(shifted);
    ctx.wait_for_all();
    let owned_mid = (0..n)
        .filter(|&i| shifted(i, n, size) == me)
        .map(|i| (i, ctx.acquire(&cells[i], AccessMode::R).get().get()))
        .collect();
    migrate_all(block);
    check_owners(block);
    sweep(block);
    for c in &cells {
        ctx.get_data_on_node(c, Rank(0))
            .expect("bring a cell to rank 0");
    }
    ctx.wait_for_all();
    let last = (me == Rank(0)).then(|| {
        cells
            .iter()
            .map(|c| ctx.acquire(c, AccessMode::R).get().get())
            .collect()
    });
    Report {
        bad_owners,
        bad_executors,
        owned_mid,
        last,
    }
}

/// Checks what rank `r` of `size` saw against the sequential run, and prints it.
fn check(r: u32, size: u32, rep: &Report, n: usize, iters: usize) -> Result<(), String> {
    let mid = sequential(n, 2 * iters);
    let cells: Vec<usize> = rep.owned_mid.iter().map(|(i, _)| *i).collect();
    println!(
        "[{r}] owned after the migration: cells {cells:?}; wrong owners {}, tasks off \
         their owner {}",
        rep.bad_owners, rep.bad_executors
    );
    if rep.bad_owners != 0 || rep.bad_executors != 0 {
        return Err(format!(
            "[{r}] {} wrong owners, {} tasks off their owner",
            rep.bad_owners, rep.bad_executors
        ));
    }
    if let Some((i, v)) = rep.owned_mid.iter().find(|(i, v)| mid[*i] != *v) {
        return Err(format!(
            "[{r}] cell {i} = {v} after the migration, expected {}",
            mid[*i]
        ));
    }
    if r != 0 {
        return Ok(());
    }
    let end = sequential(n, 3 * iters);
    let last = rep.last.as_ref().ok_or("rank 0 returned no cells")?;
    println!(
        "migration: {size} ranks, {n} cells, 3 phases of {iters} sweeps (block → shifted → \
         block): {last:?}"
    );
    if *last != end {
        return Err(format!("final cells {last:?}, expected {end:?}"));
    }
    Ok(())
}

/// Runs the example on `ranks` ranks (under `mpirun`: this process's rank of the job) with
/// `n` cells and `iters` sweeps per phase.
///
/// # Errors
/// When the cluster does not shut down cleanly, an owner or an executor was not the
/// expected one, or a value differs from the sequential run.
pub(crate) fn run(ranks: u32, n: usize, iters: usize) -> Result<(), String> {
    if n < 3 {
        return Err("the periodic stencil needs at least 3 cells".into());
    }
    let out = launch(ranks, move |ctx| {
        let rep = migration(ctx, n, iters);
        check(ctx.rank().0, ctx.size(), &rep, n, iters)
    })
    .map_err(|e| e.to_string())?;
    out.into_iter().try_for_each(|(_, r)| r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let n: usize = args.next().map_or(12, |a| a.parse().expect("cells"));
    let iters: usize = args.next().map_or(3, |a| a.parse().expect("iterations"));
    assert!(ranks >= 1, "ranks ≥ 1");
    if let Err(e) = run(ranks, n, iters) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
