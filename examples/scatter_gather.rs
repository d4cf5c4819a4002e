//! The handbook's collective example (“MPI Collective Operations”): rank 0 holds a vector
//! in blocks; `set_data_owner` hands the blocks out block-cyclically, `scatter_detached`
//! sends each block to its new owner, every owner computes on its blocks with local tasks,
//! and `gather_detached` brings the blocks back to rank 0, which checks them. The
//! collectives' callbacks report when each rank's part is done: on the root once all its
//! sends (scatter) or receives (gather) completed, on every other rank once its own did.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch`]); each rank checks its own part
//! and prints its own lines, so both ways print the same lines (in some order).
//!
//! ```sh
//! cargo run --release --example scatter_gather -- [ranks] [blocks] [block_size]
//! cargo build --release --features mpi --example scatter_gather
//! mpirun -n 4 target/release/examples/scatter_gather 4 [blocks] [block_size]
//! ```

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Vector;
use starling::{AnyHandle, Codelet, Context, launch};

const ROOT: Rank = Rank(0);

/// The owner of block `x` after the scatter (the handbook's `my_distrib`).
fn distrib(x: usize, size: u32) -> Rank {
    Rank((x % size as usize) as u32)
}

/// Element `i` of block `x` before and after the computation on its owner `o`.
fn before(x: usize, i: usize, bs: usize) -> f64 {
    (x * bs + i) as f64
}

fn after(x: usize, i: usize, bs: usize, o: Rank) -> f64 {
    2.0 * before(x, i, bs) + f64::from(o.0)
}

/// One rank's part: returns the gathered blocks on the root, and how many collective
/// callbacks fired here.
fn scatter_gather(ctx: &Context, blocks: usize, bs: usize) -> (Option<Vec<Vec<f64>>>, usize) {
    let (me, size) = (ctx.rank(), ctx.size());
    let root = me == ROOT;
    // The root holds the data; the other ranks allocate their blocks when they first
    // receive one.
    let hs: Vec<_> = (0..blocks)
        .map(|x| {
            ctx.register_owned(Tag(x as i64), Owner::Rank(ROOT), move || {
                Vector::from_vec(if root {
                    (0..bs).map(|i| before(x, i, bs)).collect()
                } else {
                    vec![0.0; bs]
                })
            })
            .expect("register a block")
        })
        .collect();
    for (x, h) in hs.iter().enumerate() {
        ctx.set_data_owner(h, Owner::Rank(distrib(x, size)))
            .expect("distribute a block");
    }
    let any: Vec<AnyHandle> = hs.iter().map(AnyHandle::from).collect();
    let fired = Arc::new(AtomicUsize::new(0));
    // The root's callback and the others': each rank runs only its own.
    let report = |what: &'static str, side: &'static str| {
        let fired = Arc::clone(&fired);
        move || {
            fired.fetch_add(1, Ordering::SeqCst);
            println!("[{}] {what}: {side} callback fired", me.0);
        }
    };
    let (root_side, other_side) = ("root", "non-root");
    ctx.scatter_detached(
        &any,
        ROOT,
        report("scatter", root_side),
        report("scatter", other_side),
    )
    .expect("scatter");
    // Every owner computes on its blocks: x ← 2x + owner.
    let offset = f64::from(me.0);
    let compute = Codelet::new("compute", move |b| {
        for v in b.w::<Vector<f64>>(0).as_mut_slice() {
            *v = 2.0 * *v + offset;
        }
    });
    let mut mine = 0;
    for h in &hs {
        if ctx.data_owner(h) == Some(Owner::Rank(me)) {
            ctx.task(&compute).rw(h).submit();
            mine += 1;
        }
    }
    println!("[{}] computes on {mine} of {blocks} blocks", me.0);
    ctx.gather_detached(
        &any,
        ROOT,
        report("gather", root_side),
        report("gather", other_side),
    )
    .expect("gather");
    ctx.wait_for_all();
    let values = root.then(|| {
        hs.iter()
            .map(|h| ctx.acquire(h, AccessMode::R).get().as_slice().to_vec())
            .collect()
    });
    (values, fired.load(Ordering::SeqCst))
}

/// Checks what rank `me` of `size` holds after the run: the gathered blocks on the root,
/// and the number of collective callbacks that fired on this rank (one per collective).
fn check(
    me: Rank,
    size: u32,
    (gathered, fired): &(Option<Vec<Vec<f64>>>, usize),
    blocks: usize,
    bs: usize,
) -> Result<(), String> {
    if *fired != 2 {
        return Err(format!("rank {}: {fired} callbacks fired, not 2", me.0));
    }
    if me != ROOT {
        return Ok(());
    }
    let gathered = gathered.as_ref().ok_or("the root returned no blocks")?;
    let mut wrong = 0;
    for (x, block) in gathered.iter().enumerate() {
        let o = distrib(x, size);
        for (i, v) in block.iter().enumerate() {
            if *v != after(x, i, bs, o) {
                wrong += 1;
            }
        }
    }
    let sum: f64 = gathered.iter().flatten().sum();
    println!(
        "gathered {blocks} blocks of {bs} on rank 0 from {size} rank(s): sum {sum}, \
         {wrong} wrong values"
    );
    if wrong != 0 {
        return Err(format!("{wrong} gathered values are wrong"));
    }
    Ok(())
}

/// Runs the example on `ranks` ranks (under `mpirun`: this process's rank of the job) with
/// `blocks` blocks of `bs` elements.
///
/// # Errors
/// When the cluster does not shut down cleanly, a gathered value is wrong, or a rank's
/// callbacks did not fire once per collective.
pub(crate) fn run(ranks: u32, blocks: usize, bs: usize) -> Result<(), String> {
    let out = launch(ranks, move |ctx| {
        let part = scatter_gather(ctx, blocks, bs);
        let checked = check(ctx.rank(), ctx.size(), &part, blocks, bs);
        if checked.is_ok() {
            println!("[{}] callbacks fired: {}", ctx.rank().0, part.1);
        }
        checked
    })
    .map_err(|e| e.to_string())?;
    out.into_iter().try_for_each(|(_, r)| r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let blocks: usize = args.next().map_or(10, |a| a.parse().expect("blocks"));
    let bs: usize = args.next().map_or(64, |a| a.parse().expect("block size"));
    assert!(ranks >= 1, "ranks ≥ 1");
    if let Err(e) = run(ranks, blocks, bs) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
