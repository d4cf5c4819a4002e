//! A distributed dot product by reduction (the reference's `mpi_redux` examples): the
//! vectors `x` and `y` are split in blocks owned block-cyclically; each block pair's task
//! runs on the blocks' owner and adds `x_i · y_i` into `dot` with a REDUX access, so every
//! rank accumulates its own contribution locally; `ctx.redux(&dot, arity)` then combines
//! the contributions into the owner's value — flat (arity 0: every contributor sends to
//! rank 0) or as a tree (arity 2: pairs, then pairs of pairs). The `auto` variant calls no
//! `redux` and lets the next plain read of `dot` wrap the reduction up by itself.
//! Each variant runs two rounds (`dot` accumulates) and is checked against the sequential
//! dot product.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch`], once: `all` runs the variants
//! one after the other in the same job); rank 0 checks and prints the results, so both
//! ways print the same lines.
//!
//! ```sh
//! cargo run --release --example redux -- [ranks] [flat|tree|auto|all] [blocks] [block_size]
//! cargo build --release --features mpi --example redux
//! mpirun -n 4 target/release/examples/redux 4 [flat|tree|auto|all] [blocks] [block_size]
//! ```

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Variable, Vector};
use starling::{Codelet, Context, launch};

/// Rounds of the dot product, accumulated into the same datum.
const ROUNDS: usize = 2;

/// Element `k` of `x` and of `y`: small positive integers, so every summation order is
/// exact and a lost or doubled contribution shows.
fn x(k: usize) -> f64 {
    (1 + k % 7) as f64
}

fn y(k: usize) -> f64 {
    (1 + k % 3) as f64
}

/// The arity of a variant; `None` for the automatic wrap-up.
fn arity(variant: &str) -> Option<usize> {
    match variant {
        "flat" => Some(0),
        "tree" => Some(2),
        _ => None,
    }
}

/// One variant's dot product; its data take the tags from `base` on (a job that runs
/// several variants keeps their tags apart: the tag registry holds them until the end).
fn dot_product(ctx: &Context, variant: &str, base: i64, blocks: usize, bs: usize) -> Option<f64> {
    let (me, size) = (ctx.rank(), ctx.size());
    let owner = |i: usize| Owner::Rank(Rank((i % size as usize) as u32));
    let vector = |tag: i64, i: usize, f: fn(usize) -> f64| {
        ctx.register_owned(Tag(tag), owner(i), move || {
            Vector::from_vec((i * bs..(i + 1) * bs).map(f).collect())
        })
        .expect("register a block")
    };
    let xs: Vec<_> = (0..blocks).map(|i| vector(base + i as i64, i, x)).collect();
    let ys: Vec<_> = (0..blocks)
        .map(|i| vector(base + (blocks + i) as i64, i, y))
        .collect();
    let dot = ctx
        .register_owned(Tag(base - 1), Owner::Rank(Rank(0)), || {
            Variable::new(0.0f64)
        })
        .expect("register dot");
    // dot (REDUX) += x_i · y_i
    let partial = Codelet::new("dot", |b| {
        let xi = b.r::<Vector<f64>>(0);
        let yi = b.r::<Vector<f64>>(1);
        let s: f64 = xi
            .as_slice()
            .iter()
            .zip(yi.as_slice())
            .map(|(a, c)| a * c)
            .sum();
        let mut d = b.w::<Variable<f64>>(2);
        let v = d.get();
        d.set(v + s);
    });
    // The reduction methods: combine (RW accumulator, R contribution) and init (W).
    let combine = Codelet::new("redux_add", |b| {
        let c = b.r::<Variable<f64>>(1).get();
        let mut acc = b.w::<Variable<f64>>(0);
        let v = acc.get();
        acc.set(v + c);
    });
    let init = Codelet::new("redux_zero", |b| b.w::<Variable<f64>>(0).set(0.0));
    ctx.set_reduction_methods(&dot, &combine, &init);
    for _ in 0..ROUNDS {
        for (xi, yi) in xs.iter().zip(&ys) {
            ctx.insert(&partial)
                .r(xi)
                .r(yi)
                .redux(&dot)
                .on_data(xi)
                .submit()
                .expect("insert a partial dot product");
        }
        if let Some(a) = arity(variant) {
            ctx.redux(&dot, a).expect("reduce");
        }
    }
    // A plain read: for `auto`, this wraps the pending reduction up.
    ctx.get_data_on_node(&dot, Rank(0))
        .expect("read dot on rank 0");
    ctx.wait_for_all();
    (me == Rank(0)).then(|| ctx.acquire(&dot, AccessMode::R).get().get())
}

/// One variant on this rank: rank 0 checks the result, prints it and returns it.
fn variant_on_rank(
    ctx: &Context,
    variant: &str,
    base: i64,
    blocks: usize,
    bs: usize,
) -> Result<Option<f64>, String> {
    let got = dot_product(ctx, variant, base, blocks, bs);
    ctx.barrier();
    if ctx.rank() != Rank(0) {
        return Ok(None);
    }
    let got = got.ok_or("rank 0 returned no result")?;
    let n = blocks * bs;
    let expected = ROUNDS as f64 * (0..n).map(|k| x(k) * y(k)).sum::<f64>();
    println!(
        "{variant} reduction: {} ranks, n = {n} ({blocks} blocks), {ROUNDS} rounds: \
         dot = {got}, sequential {expected}",
        ctx.size()
    );
    if got == expected {
        Ok(Some(got))
    } else {
        Err(format!("{variant}: dot = {got}, expected {expected}"))
    }
}

/// Runs the variants one after the other on `ranks` ranks (one job: under `mpirun`, MPI
/// starts once per process) and returns their dot products (under `mpirun`: on rank 0's
/// process; zeros on the others).
///
/// # Errors
/// When the cluster does not shut down cleanly or a result differs from the sequential
/// dot product.
pub(crate) fn run_all(
    ranks: u32,
    variants: &[&str],
    blocks: usize,
    bs: usize,
) -> Result<Vec<f64>, String> {
    let vs: Vec<String> = variants.iter().map(|v| (*v).to_owned()).collect();
    let out = launch(ranks, move |ctx| {
        let stride = 2 * blocks as i64 + 1;
        (0..)
            .zip(&vs)
            .map(|(i, v)| variant_on_rank(ctx, v, i * stride, blocks, bs))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(|e| e.to_string())?;
    let mut dots = vec![0.0; variants.len()];
    for (_, rank) in out {
        for (d, got) in dots.iter_mut().zip(rank?) {
            if let Some(got) = got {
                *d = got;
            }
        }
    }
    Ok(dots)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let which = args.next().unwrap_or_else(|| "all".into());
    let blocks: usize = args.next().map_or(16, |a| a.parse().expect("blocks"));
    let bs: usize = args.next().map_or(256, |a| a.parse().expect("block size"));
    assert!(ranks >= 1, "ranks ≥ 1");
    let variants: &[&str] = match which.as_str() {
        "flat" => &["flat"],
        "tree" => &["tree"],
        "auto" => &["auto"],
        "all" => &["flat", "tree", "auto"],
        _ => panic!("variant: flat, tree, auto or all"),
    };
    if let Err(e) = run_all(ranks, variants, blocks, bs) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
