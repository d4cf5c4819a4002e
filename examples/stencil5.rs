//! The handbook's 5-point stencil (`stencil5`) with the insert-task utility, on the
//! in-process cluster (no MPI needed) or, built with the `mpi` feature and started by
//! `mpirun`, across MPI processes ([`starling::launch`]), with a data migration (handbook
//! § "MPI Data Migration") and a check against a sequential run.
//!
//! An X × Y grid of `Variable<f64>` cells; every sweep inserts, for every inner cell c
//! (in row-major order), the task `c ← (c + left + right + up + down) / 5`, i.e.
//! `insert(&stencil).rw(&c).r(&l).r(&r).r(&u).r(&d)`. Every rank inserts the same tasks in
//! the same order; the owner of c runs each one, and the runtime moves the neighbours it
//! needs. The run follows the handbook's migration example:
//!
//! 1. the cells are block-distributed by rows, and `iterations` sweeps run;
//! 2. every cell is `migrate`d to a block distribution by columns, and `iterations` more
//!    sweeps run;
//! 3. every cell is migrated back to its row owner (where the handbook unregisters it).
//!
//! Then every cell is gathered on the last rank (`get_data_on_node_detached`), which
//! compares the grid with the same sweeps run sequentially. (The last rank rather than rank 0: in this
//! flow it is the rank whose cache the handbook's pruning test alone would leave stale,
//! so the check also guards the pruning rule; see `involved`.) The implicit
//! dependencies order the tasks exactly as the sequential loop does, and each kernel adds
//! the same values in the same order, so the two grids must be **bit for bit equal**; the
//! example exits non-zero when they are not, or when the cluster shuts down with
//! leftovers.
//!
//! By default (`prune`) each rank skips the inserts it has nothing to do with: the
//! handbook's pruning `if`, with the extra condition explained at `involved`. `full`
//! inserts every task on every rank; `handbook` uses the handbook's test alone, which is
//! only valid while the distribution stays fixed: with this example's migration the run
//! fails, as `involved` explains.
//!
//! ```sh
//! cargo run --release --example stencil5 -- [ranks] [X] [Y] [iterations] [prune|full|handbook] [--gpu] | --probe
//! cargo run --release --features cuda --example stencil5 -- 4 32 32 3 --gpu
//! cargo run --release --features cuda-13 --example stencil5 -- --probe   # CUDA 13 API
//! cargo build --release --features mpi --example stencil5
//! mpirun -n 4 target/release/examples/stencil5 4 [X] [Y] [iterations]   # ranks = mpirun's -n
//! ```
//!
//! Standard output holds the results only, each line printed by one rank (the last rank
//! checks the grid), so a run under `mpirun` prints the same lines as the in-process run,
//! in some order; the timing goes to standard error.
//!
//! `--gpu` (with the `cuda` feature) gives the codelet its CUDA implementation
//! (`starling::gpu::tiles::stencil5_cell`: the same sum, so the check stays bit for bit),
//! run by the CUDA worker of each device; one task per cell makes it a correctness run,
//! not a fast one. `--gpu` first prints, on standard error, each CUDA library (the name
//! loaded, its file and version) and the devices; without the feature (`cuda` for the
//! CUDA 12 API, `cuda-13` for CUDA 13), or without a CUDA device, it fails with the reason
//! and exits non-zero. `--probe` prints the same table and exits.
//!
//! Each migration and the gather move the whole grid in one pass, every cell's transfer
//! in flight at once: tens of thousands of outstanding messages, far past the protocol
//! engine's tables, wait in the progression thread for room (`DESIGN.md`, rule 2), so the
//! grid's size is bounded by memory only (`tests/examples.rs` runs 8 × 4000 on 2 ranks
//! and 8 × 1100 on 4).

use std::process::ExitCode;
use std::time::Instant;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Variable;
use starling::{Buffers, Codelet, Context, Handle, InsertError, launch};

/// The command line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) ranks: u32,
    pub(crate) x: usize,
    pub(crate) y: usize,
    pub(crate) iterations: usize,
    pub(crate) pruning: Pruning,
}

/// Which inserts a rank skips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pruning {
    /// None: every rank inserts every task (`full`).
    Off,
    /// Those [`involved`] rules out (`prune`, the default).
    Safe,
    /// Those the handbook's test, [`owns_any`], rules out (`handbook`): only valid while
    /// the distribution stays fixed.
    Handbook,
}

impl Params {
    fn from_args() -> Result<Self, String> {
        let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--gpu").collect();
        let num = |i: usize, default: usize| -> Result<usize, String> {
            args.get(i).map_or(Ok(default), |s| {
                s.parse()
                    .map_err(|_| format!("argument {}: `{s}` is not a number", i + 1))
            })
        };
        let p = Self {
            ranks: u32::try_from(num(0, 4)?).map_err(|_| "too many ranks".to_string())?,
            x: num(1, 32)?,
            y: num(2, 32)?,
            iterations: num(3, 4)?,
            pruning: match args.get(4).map(String::as_str) {
                None | Some("prune") => Pruning::Safe,
                Some("full") => Pruning::Off,
                Some("handbook") => Pruning::Handbook,
                Some(other) => {
                    return Err(format!("argument 5: `{other}`: prune, full or handbook"));
                }
            },
        };
        if p.ranks == 0 || p.x < 3 || p.y < 3 {
            return Err("need at least 1 rank and a 3 × 3 grid".into());
        }
        Ok(p)
    }
}

/// A data distribution: the owner of cell (x, y).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Distribution {
    /// Blocks of whole rows (the first distribution, and the last).
    Rows,
    /// Blocks of whole columns (the distribution migrated to).
    Columns,
}

impl Distribution {
    pub(crate) fn owner(self, p: &Params, size: u32, x: usize, y: usize) -> Rank {
        let size = size as usize;
        let r = match self {
            Self::Rows => x / p.x.div_ceil(size),
            Self::Columns => y / p.y.div_ceil(size),
        };
        Rank(r as u32)
    }
}

/// The stencil, shared by the task's kernel and the sequential reference so that both add
/// the same values in the same order.
fn stencil(c: f64, l: f64, r: f64, u: f64, d: f64) -> f64 {
    (c + l + r + u + d) / 5.0
}

/// The initial value of cell (x, y).
fn initial(x: usize, y: usize) -> f64 {
    ((x * 31 + y * 17) % 101) as f64
}

/// What one rank did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) inserted: u64,
    pub(crate) skipped: u64,
    pub(crate) executed: u64,
}

/// Whether `me` owns cell (x, y) or one of its four neighbours: the handbook's pruning
/// `if` (§ "Pruning MPI Task Insertion").
pub(crate) fn owns_any(
    me: Rank,
    size: u32,
    p: &Params,
    dist: Distribution,
    x: usize,
    y: usize,
) -> bool {
    let owner = |x, y| dist.owner(p, size, x, y);
    owner(x, y) == me
        || owner(x - 1, y) == me
        || owner(x + 1, y) == me
        || owner(x, y - 1) == me
        || owner(x, y + 1) == me
}

/// Whether this rank must take part in the insert of the task that writes cell (x, y) and
/// reads its four neighbours.
///
/// Skipping an insert is only valid when processing it would change **nothing** on this
/// rank: it does not execute the task (here, it does not own the written cell), it sends
/// nothing (it owns none of the read cells), and its communication cache has nothing to
/// forget — it holds no received copy of a datum the task writes, which the owner's write
/// must invalidate on every rank that holds one. The handbook's `if` tests the first two
/// only. With a fixed distribution that is enough for a 5-point stencil: a rank holds a
/// copy of c only if it owns a neighbour of c, and then it owns one of the five cells. But
/// a migration that keeps a cell's owner does nothing (no flush), so after it a rank may
/// still hold a copy of c received under the previous distribution while it owns none of
/// c's neighbours any more. Skipping the writes of c leaves that copy stale; when the rank
/// next reads c before the owner writes it again, its cache says "received" and it reads
/// the stale value without a transfer, while the owner — whose write forgot that it had
/// sent c — sends a message that is never received: wrong results, and leftovers at
/// shutdown. Hence the third test, [`Context::cached_receive`] on the written cell
/// (calling `flush_all` after each migration would do as well, at the price of sending
/// every boundary again).
///
/// Here: at the end of the sweeps on rows, rank r holds current copies of the last row of
/// rank r − 1's block (read by its first row after they were written). The cells of that
/// row in column block r − 1 keep their owner through both migrations. On columns, rank
/// r − 1 rewrites them while rank r owns none of their neighbours (but for the block's
/// last column), so the handbook's test skips those inserts on rank r; the gather then
/// reads them on the last rank. With the handbook's test alone, on 4 ranks and a 32 × 32
/// grid, the last rank reads 7 cells from stale copies, and the 7 messages rank 2 sends
/// to refresh them are never received (the run fails at shutdown); with the third test
/// the grids match.
pub(crate) fn involved(
    ctx: &Context,
    p: &Params,
    dist: Distribution,
    x: usize,
    y: usize,
    c: &Handle<Variable<f64>>,
) -> bool {
    owns_any(ctx.rank(), ctx.size(), p, dist, x, y) || ctx.cached_receive(c)
}

/// `p.iterations` sweeps of the stencil over the inner cells, in row-major order.
pub(crate) fn sweeps(
    ctx: &Context,
    p: &Params,
    dist: Distribution,
    grid: &[Handle<Variable<f64>>],
    codelet: &Codelet,
    counts: &mut Counts,
) -> Result<(), InsertError> {
    let at = |x: usize, y: usize| &grid[x * p.y + y];
    let (me, size) = (ctx.rank(), ctx.size());
    for _ in 0..p.iterations {
        for x in 1..p.x - 1 {
            for y in 1..p.y - 1 {
                let c = at(x, y);
                let skip = match p.pruning {
                    Pruning::Off => false,
                    Pruning::Safe => !involved(ctx, p, dist, x, y, c),
                    Pruning::Handbook => !owns_any(me, size, p, dist, x, y),
                };
                if skip {
                    counts.skipped += 1;
                    continue;
                }
                let done = ctx
                    .insert(codelet)
                    .rw(c)
                    .r(at(x - 1, y))
                    .r(at(x + 1, y))
                    .r(at(x, y - 1))
                    .r(at(x, y + 1))
                    .submit()?;
                counts.inserted += 1;
                counts.executed += u64::from(done.executed_here);
            }
        }
    }
    Ok(())
}

/// Moves every cell to its owner under `dist` (`starpu_mpi_data_migrate`); every rank
/// migrates every cell, at the same point of the flow.
fn migrate_all(
    ctx: &Context,
    p: &Params,
    dist: Distribution,
    grid: &[Handle<Variable<f64>>],
) -> Result<(), InsertError> {
    for (i, h) in grid.iter().enumerate() {
        ctx.migrate(h, dist.owner(p, ctx.size(), i / p.y, i % p.y))?;
    }
    Ok(())
}

/// Registers every cell on this rank (row-major, cell (x, y) at `x·Y + y`) with the same
/// tag and owner as every other rank: only the owner under `dist` allocates it now, the
/// others on first use (the handbook's home node −1). Registering every cell is simple
/// and what pruning needs to query the cache; the handbook registers only the cells a
/// rank touches.
///
/// # Errors
/// [`InsertError`] from the registration.
pub(crate) fn register_grid(
    ctx: &Context,
    p: &Params,
    dist: Distribution,
) -> Result<Vec<Handle<Variable<f64>>>, InsertError> {
    let mut grid = Vec::with_capacity(p.x * p.y);
    for x in 0..p.x {
        for y in 0..p.y {
            let owner = dist.owner(p, ctx.size(), x, y);
            let tag = Tag((x * p.y + y) as i64);
            grid.push(ctx.register_owned(tag, Owner::Rank(owner), move || {
                Variable::new(initial(x, y))
            })?);
        }
    }
    Ok(grid)
}

/// The stencil's task on the CPU: RW the cell, R its four neighbours.
fn stencil_task(b: &mut Buffers<'_>) {
    let v = stencil(
        b.r::<Variable<f64>>(0).get(),
        b.r::<Variable<f64>>(1).get(),
        b.r::<Variable<f64>>(2).get(),
        b.r::<Variable<f64>>(3).get(),
        b.r::<Variable<f64>>(4).get(),
    );
    b.w::<Variable<f64>>(0).set(v);
}

/// The stencil's codelet: RW the cell, R its four neighbours.
pub(crate) fn codelet() -> Codelet {
    Codelet::new("stencil5", stencil_task)
}

/// The CUDA devices of `--gpu` (the `cuda` feature).
#[cfg(any(feature = "cuda", feature = "cuda-13"))]
pub(crate) type Gpu = std::sync::Arc<starling::gpu::Gpu>;

/// Without the `cuda` feature there is no GPU to give the codelet.
#[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
#[derive(Debug)]
pub(crate) enum Gpu {}

/// `--probe`: prints the CUDA libraries (name loaded, file, version) and devices found.
fn print_probe() -> ExitCode {
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    {
        println!("{}", starling::gpu::probe::report());
        ExitCode::SUCCESS
    }
    #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
    {
        eprintln!("--probe needs the `cuda` or `cuda-13` feature");
        ExitCode::FAILURE
    }
}

/// Opens the GPU for `--gpu`, or says why it cannot be used.
fn open_gpu() -> Result<Gpu, String> {
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    {
        // The libraries, their files and versions, then the devices: one line each. The
        // stencil needs no library beyond the driver: without NVRTC the shipped PTX runs.
        eprintln!("{}", starling::gpu::probe::report());
        starling::gpu::Gpu::from_env().map_err(|e| format!("--gpu: {e}"))
    }
    #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
    {
        Err(
            "--gpu needs the `cuda` or `cuda-13` feature (cargo run --release --features cuda --example ...)"
                .into(),
        )
    }
}

/// The stencil's codelet, with its CUDA implementation (the same sum, bit for bit) when
/// `gpu` is given.
fn codelet_on(gpu: Option<&Gpu>) -> Codelet {
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    if let Some(gpu) = gpu {
        return gpu.codelet(
            "stencil5",
            stencil_task,
            starling::gpu::tiles::stencil5_cell,
        );
    }
    #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
    if let Some(never) = gpu {
        match *never {}
    }
    codelet()
}

/// What one rank returns: its rank, the job's size, and its counts and (on the last rank)
/// the gathered grid, or the insert that failed.
type Outcome = (Rank, u32, Result<(Counts, Option<Vec<f64>>), InsertError>);

/// One rank's part: the sweeps, the migrations, then the gather. The last rank returns
/// the grid.
pub(crate) fn distributed(
    ctx: &Context,
    p: &Params,
    gpu: Option<&Gpu>,
) -> Result<(Counts, Option<Vec<f64>>), InsertError> {
    distributed_with(ctx, p, gpu, true)
}

/// A wait between the sweeps and a migration (every rank finishes its sweeps before any
/// migrates), kept only as the phased variant of the tests: the example overlaps them
/// (`overlap`, the default of [`distributed`]).
///
/// On a grid whose migration alone overflows the engine's tables (8 × 2000 cells on 2
/// ranks at the default tables, 8 × 16 at `STARLING_ENGINE_TABLES=4,2`), overlapping
/// used to deadlock: a flow receive reaches the progression thread when its handle's
/// earlier tasks are done, not in flow order, so a migration's receive could hold the
/// last slot while an earlier sweep receive, which the migration's message depends on
/// through the peer's tasks, waited behind it for room. The adapter now keeps the last
/// receive slot for a receive whose message is here (issue 17; `tests/examples.rs`,
/// `stencil5_sweeps_overlapping_a_migration_past_the_tables`, runs without the wait).
fn between_phases(ctx: &Context, overlap: bool) {
    if !overlap {
        ctx.wait_for_all();
        ctx.barrier();
    }
}

/// [`distributed`], with (`overlap`) or without the wait between the sweeps and each
/// migration ([`between_phases`]).
pub(crate) fn distributed_with(
    ctx: &Context,
    p: &Params,
    gpu: Option<&Gpu>,
    overlap: bool,
) -> Result<(Counts, Option<Vec<f64>>), InsertError> {
    let size = ctx.size();
    // A pruned flow differs from rank to rank by design (each skips the inserts it has
    // nothing to do with): the graph-agreement check compares whole flows, so it is for
    // unpruned runs only. Every rank makes the same choice.
    if p.pruning != Pruning::Off {
        ctx.set_check_agreement(false);
    }
    if ctx.rank() == Rank(0) {
        println!(
            "stencil5: {size} rank(s), {} × {} grid, 2 × {} sweeps (on rows, then on columns), {}",
            p.x,
            p.y,
            p.iterations,
            match p.pruning {
                Pruning::Off => "not pruned",
                Pruning::Safe => "pruned",
                Pruning::Handbook => "pruned with the handbook's test alone",
            }
        );
    }
    let grid = register_grid(ctx, p, Distribution::Rows)?;
    let codelet = codelet_on(gpu);
    let mut counts = Counts::default();
    ctx.barrier();
    let start = Instant::now();
    sweeps(ctx, p, Distribution::Rows, &grid, &codelet, &mut counts)?;
    between_phases(ctx, overlap);
    migrate_all(ctx, p, Distribution::Columns, &grid)?;
    sweeps(ctx, p, Distribution::Columns, &grid, &codelet, &mut counts)?;
    between_phases(ctx, overlap);
    migrate_all(ctx, p, Distribution::Rows, &grid)?;
    ctx.wait_for_all();
    ctx.barrier();
    let root = Rank(size - 1);
    if ctx.rank() == root {
        let tasks = 2 * p.iterations * (p.x - 2) * (p.y - 2);
        let elapsed = start.elapsed();
        eprintln!(
            "{tasks} tasks on {size} rank(s) in {:.1} ms ({:.2} µs per task)",
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e6 / tasks as f64
        );
    }
    // Gather: every rank takes part in bringing each cell to the root, the whole grid in
    // flight at once, then waits; a failed transfer is an error here, never a stale cell.
    // Cache-aware, as the sweeps' reads: a copy the root holds is not sent again, which
    // is what makes the check guard the pruning rule (see `involved`).
    for h in &grid {
        ctx.get_data_on_node_detached(h, root)?;
    }
    ctx.mpi_wait_for_all()?;
    let values: Vec<f64> = if ctx.rank() == root {
        grid.iter()
            .map(|h| ctx.acquire(h, AccessMode::R).get().get())
            .collect()
    } else {
        Vec::new()
    };
    Ok((counts, (ctx.rank() == root).then_some(values)))
}

/// The same sweeps run sequentially: the data distribution does not change the
/// arithmetic.
pub(crate) fn sequential(p: &Params) -> Vec<f64> {
    let mut g: Vec<f64> = (0..p.x * p.y).map(|i| initial(i / p.y, i % p.y)).collect();
    for _ in 0..2 * p.iterations {
        for x in 1..p.x - 1 {
            for y in 1..p.y - 1 {
                let at = |x: usize, y: usize| x * p.y + y;
                g[at(x, y)] = stencil(
                    g[at(x, y)],
                    g[at(x - 1, y)],
                    g[at(x + 1, y)],
                    g[at(x, y - 1)],
                    g[at(x, y + 1)],
                );
            }
        }
    }
    g
}

/// Compares the gathered `grid` with the sequential run, bit for bit: the result line, or
/// what differs.
///
/// # Errors
/// How many cells differ, and by how much at most.
pub(crate) fn check(p: &Params, grid: &[f64]) -> Result<String, String> {
    let expected = sequential(p);
    let wrong = grid
        .iter()
        .zip(&expected)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count()
        + expected.len().abs_diff(grid.len());
    let max_diff = grid
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    if wrong != 0 {
        return Err(format!(
            "{wrong} of {} cells differ from the sequential run (max |diff| {max_diff:e})",
            expected.len()
        ));
    }
    Ok(format!(
        "OK: the {} cells equal the sequential run bit for bit",
        grid.len()
    ))
}

/// The whole example on `p.ranks` in-process ranks (no GPU), checked: what `main` checks,
/// for the tests; `overlap` as for [`distributed_with`].
///
/// # Errors
/// A failed insert or transfer, an unclean shutdown, or a grid that differs from the
/// sequential run.
#[allow(
    dead_code,
    reason = "the tests' entry point (tests/examples.rs); `main` uses `launch`, for mpirun"
)]
pub(crate) fn run(p: Params, config: starling::ClusterConfig, overlap: bool) -> Result<(), String> {
    let out = starling::run_local_with(p.ranks, config, move |ctx| {
        distributed_with(ctx, &p, None, overlap)
    })
    .map_err(|e| e.to_string().chars().take(2000).collect::<String>())?;
    let last = out.len() - 1;
    let mut grid = None;
    for (rank, r) in out.into_iter().enumerate() {
        let (_, values) = r.map_err(|e| format!("rank {rank}: {e}"))?;
        if rank == last {
            grid = values;
        }
    }
    check(&p, &grid.ok_or("the last rank returned no grid")?).map(drop)
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--probe") {
        return print_probe();
    }
    let p = match Params::from_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stencil5: {e}");
            eprintln!(
                "usage: stencil5 [ranks] [X] [Y] [iterations] [prune|full|handbook] [--gpu] | --probe"
            );
            return ExitCode::FAILURE;
        }
    };
    let gpu = if std::env::args().any(|a| a == "--gpu") {
        match open_gpu() {
            Ok(gpu) => Some(gpu),
            Err(e) => {
                eprintln!("stencil5: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    // In-process: every rank's outcome; under mpirun: this process's rank only.
    let out: Vec<Outcome> = match launch(p.ranks, move |ctx| {
        (ctx.rank(), ctx.size(), distributed(ctx, &p, gpu.as_ref()))
    }) {
        Ok(out) => out.into_values(),
        Err(e) => {
            let e: String = e.to_string().chars().take(2000).collect();
            eprintln!("stencil5: FAILED: the cluster did not shut down cleanly: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut grid = None;
    for (rank, size, r) in out {
        match r {
            Ok((c, values)) => {
                println!(
                    "rank {}: {} inserts, {} skipped by pruning, {} tasks executed",
                    rank.0, c.inserted, c.skipped, c.executed
                );
                if rank.0 == size - 1 {
                    let Some(values) = values else {
                        eprintln!("stencil5: FAILED: the last rank returned no grid");
                        return ExitCode::FAILURE;
                    };
                    grid = Some(values);
                }
            }
            Err(e) => {
                eprintln!("stencil5: FAILED on rank {}: {e}", rank.0);
                return ExitCode::FAILURE;
            }
        }
    }
    // Only the process of the last rank holds the grid to check.
    let Some(grid) = grid else {
        return ExitCode::SUCCESS;
    };
    match check(&p, &grid) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("stencil5: FAILED: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
