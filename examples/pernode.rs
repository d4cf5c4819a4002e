//! Per-node data (`Owner::PerNode`, the reference's `STARPU_MPI_PER_NODE`): every rank
//! holds its own instance, and a task that writes it runs on every rank, each on its own
//! instance, with no transfer at all (`comm_amounts()` stays zero). Tasks on ordinary
//! rank-owned data then read the per-node table where they run, still with no transfer;
//! only combining the owned blocks on rank 0 moves bytes.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch_with`]); each rank checks its own
//! part and prints its own lines, so both ways print the same lines (in some order).
//!
//! ```sh
//! cargo run --release --example pernode -- [ranks] [blocks] [length]
//! cargo build --release --features mpi --example pernode
//! mpirun -n 4 target/release/examples/pernode 4 [blocks] [length]
//! ```

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{ClusterConfig, Codelet, Context, launch_with};

/// What one rank saw.
struct Report {
    /// Per-node inserts: (executor, executed here, transfers) of each.
    per_node: Vec<(Option<Rank>, bool, usize)>,
    /// This rank's per-node table after the per-node tasks.
    table: Vec<f64>,
    /// Bytes sent per peer after the per-node part, after the owned tasks reading the
    /// table, and at the end.
    amounts: [Vec<u64>; 3],
    /// The combined sum, on rank 0.
    sum: Option<f64>,
}

fn table_value(k: usize) -> f64 {
    k as f64 + 1.5
}

fn block_value(i: usize, k: usize) -> f64 {
    (i + k) as f64
}

fn pernode(ctx: &Context, blocks: usize, len: usize) -> Report {
    let (me, size) = (ctx.rank(), ctx.size());
    // A per-node table: every rank allocates its own instance now.
    let table = ctx
        .register_owned(Tag(1000), Owner::PerNode, move || Vector::<f64>::zeros(len))
        .expect("register the per-node table");
    let fill = Codelet::new("fill", |b| {
        for (k, v) in b.w::<Vector<f64>>(0).as_mut_slice().iter_mut().enumerate() {
            *v = k as f64 + 1.0;
        }
    });
    let bump = Codelet::new("bump", |b| {
        for v in b.w::<Vector<f64>>(0).as_mut_slice() {
            *v += 0.5;
        }
    });
    let per_node: Vec<_> = [&fill, &bump]
        .into_iter()
        .zip([AccessMode::W, AccessMode::RW])
        .map(|(cl, mode)| {
            let i = ctx
                .insert(cl)
                .access(&table, mode)
                .submit()
                .expect("a per-node insert");
            (i.executor, i.executed_here, i.transfers)
        })
        .collect();
    ctx.wait_for_all();
    let a0 = ctx
        .comm_amounts()
        .expect("statistics are on (run sets them)");
    let table_now = ctx.acquire(&table, AccessMode::R).get().as_slice().to_vec();
    // Ordinary data, owned block-cyclically, scaled by the table where they live.
    let xs: Vec<_> = (0..blocks)
        .map(|i| {
            ctx.register_owned(
                Tag(i as i64),
                Owner::Rank(Rank((i % size as usize) as u32)),
                move || Vector::from_vec((0..len).map(|k| block_value(i, k)).collect()),
            )
            .expect("register a block")
        })
        .collect();
    let scale = Codelet::new("scale", |b| {
        let t = b.r::<Vector<f64>>(0);
        for (v, s) in b
            .w::<Vector<f64>>(1)
            .as_mut_slice()
            .iter_mut()
            .zip(t.as_slice())
        {
            *v *= s;
        }
    });
    for x in &xs {
        ctx.insert(&scale)
            .r(&table)
            .rw(x)
            .submit()
            .expect("scale a block");
    }
    ctx.wait_for_all();
    let a1 = ctx
        .comm_amounts()
        .expect("statistics are on (run sets them)");
    // Combine on rank 0: the blocks move there.
    let sum = ctx
        .register_owned(Tag(2000), Owner::Rank(Rank(0)), || Variable::new(0.0f64))
        .expect("register the sum");
    let accumulate = Codelet::new("accumulate", |b| {
        let s: f64 = b.r::<Vector<f64>>(0).as_slice().iter().sum();
        let mut acc = b.w::<Variable<f64>>(1);
        let v = acc.get();
        acc.set(v + s);
    });
    for x in &xs {
        ctx.insert(&accumulate)
            .r(x)
            .rw(&sum)
            .submit()
            .expect("accumulate a block");
    }
    ctx.wait_for_all();
    let a2 = ctx
        .comm_amounts()
        .expect("statistics are on (run sets them)");
    Report {
        per_node,
        table: table_now,
        amounts: [a0, a1, a2],
        sum: (me == Rank(0)).then(|| ctx.acquire(&sum, AccessMode::R).get().get()),
    }
}

/// Checks what rank `r` of `ranks` saw, and prints it.
fn check(r: usize, ranks: usize, rep: &Report, blocks: usize, len: usize) -> Result<(), String> {
    let table: Vec<f64> = (0..len).map(table_value).collect();
    println!(
        "[{r}] per-node inserts (executor, here, transfers): {:?}; table {:?}; bytes sent: \
         per-node part {:?}, owned tasks reading it {:?}, combine on rank 0 {:?}",
        rep.per_node, rep.table, rep.amounts[0], rep.amounts[1], rep.amounts[2]
    );
    if rep.per_node.iter().any(|p| *p != (None, true, 0)) {
        return Err(format!("[{r}] a per-node task did not run here alone"));
    }
    if rep.table != table {
        return Err(format!("[{r}] the per-node table is {:?}", rep.table));
    }
    if rep.amounts[0]
        .iter()
        .chain(&rep.amounts[1])
        .any(|b| *b != 0)
    {
        return Err(format!("[{r}] the per-node part sent bytes"));
    }
    // Combining sends each owned block to rank 0 once.
    let owned = (0..blocks).filter(|i| i % ranks == r).count() as u64;
    let to0 = if r == 0 { 0 } else { owned * len as u64 * 8 };
    let expected: Vec<u64> = (0..ranks).map(|p| if p == 0 { to0 } else { 0 }).collect();
    if rep.amounts[2] != expected {
        return Err(format!("[{r}] combining sent {:?}", rep.amounts[2]));
    }
    if r != 0 {
        return Ok(());
    }
    let expected: f64 = (0..blocks)
        .flat_map(|i| (0..len).map(move |k| block_value(i, k) * table_value(k)))
        .sum();
    let sum = rep.sum.ok_or("rank 0 returned no sum")?;
    println!("sum of the scaled blocks on rank 0: {sum} (expected {expected})");
    if sum != expected {
        return Err(format!("sum {sum} != {expected}"));
    }
    Ok(())
}

/// Runs the example on `ranks` ranks (under `mpirun`: this process's rank of the job) with
/// `blocks` blocks of `len` elements.
///
/// # Errors
/// When the cluster does not shut down cleanly, a per-node task ran somewhere else than
/// everywhere or moved data, or a value is wrong.
pub(crate) fn run(ranks: u32, blocks: usize, len: usize) -> Result<(), String> {
    let config = ClusterConfig {
        stats: true,
        ..ClusterConfig::from_env()
    };
    let out = launch_with(ranks, config, move |ctx| {
        let rep = pernode(ctx, blocks, len);
        check(
            ctx.rank().0 as usize,
            ctx.size() as usize,
            &rep,
            blocks,
            len,
        )
    })
    .map_err(|e| e.to_string())?;
    out.into_iter().try_for_each(|(_, r)| r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let blocks: usize = args.next().map_or(8, |a| a.parse().expect("blocks"));
    let len: usize = args.next().map_or(4, |a| a.parse().expect("length"));
    assert!(ranks >= 1, "ranks ≥ 1");
    if let Err(e) = run(ranks, blocks, len) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
