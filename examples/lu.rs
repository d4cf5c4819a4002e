//! LU factorisation without pivoting of a diagonally dominant matrix, in tiles, across
//! ranks (the reference's `mpi_lu` examples), in two versions:
//!
//! * `explicit` (`plu_example`): every rank walks the tile algorithm, runs the kernels of
//!   the tiles it owns as local tasks, and itself sends each finished tile to the ranks
//!   that need it (`ctx.send(..).detach(..)` / `ctx.recv(..).detach(..)`); the handles' implicit
//!   dependencies order the transfers and the tasks;
//! * `implicit` (`plu_implicit_example`): every rank registers every tile with a tag and
//!   a 2-D block-cyclic owner and inserts the whole flow with `ctx.insert(..)`; the
//!   runtime decides where each task runs and moves the tiles.
//!
//! Both end with the tiles on rank 0 (explicit sends, or `get_data_on_node`), which
//! checks ‖A − L·U‖_F / ‖A‖_F < 1e-10.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch`], once: `both` runs the versions
//! one after the other in the same job). Rank 0 prints the results; the timings go to
//! standard error, so both ways print the same lines.
//!
//! ```sh
//! cargo run --release --example lu -- [ranks] [explicit|implicit|both] [tiles] [tile_size]
//! cargo build --release --features mpi --example lu
//! mpirun -n 4 target/release/examples/lu 4 [explicit|implicit|both] [tiles] [tile_size]
//! ```
//!
//! On a terminal the run shows its progress (tasks done / submitted) on stderr;
//! `STARLING_PROGRESS=0` hides it, `=1` shows it anywhere.

use std::io::IsTerminal as _;
use std::time::Instant;

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Matrix;
use starling::{ClusterConfig, Codelet, Context, Handle, launch_with};

/// The problem: `nt × nt` tiles of `bs × bs`, over a `p × q` grid of ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lu {
    /// Tiles per dimension.
    pub(crate) nt: usize,
    /// Tile size.
    pub(crate) bs: usize,
}

impl Lu {
    fn n(self) -> usize {
        self.nt * self.bs
    }

    /// Element `(i, j)` of the matrix: pseudo-random in [0, 1), plus `n` on the diagonal.
    fn a(self, i: usize, j: usize) -> f64 {
        let mut x = (i * 7919 + j * 104_729 + 12_345) as u64;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = (x % 1000) as f64 / 1000.0;
        if i == j { v + self.n() as f64 } else { v }
    }

    /// Tile `(ti, tj)` of the matrix, column-major.
    fn tile(self, ti: usize, tj: usize) -> Matrix<f64> {
        let mut m = Matrix::zeros(self.bs, self.bs);
        for c in 0..self.bs {
            for r in 0..self.bs {
                m.set(r, c, self.a(ti * self.bs + r, tj * self.bs + c));
            }
        }
        m
    }

    fn tag(self, i: usize, j: usize) -> Tag {
        Tag((i * self.nt + j) as i64)
    }
}

/// A `p × q` grid of ranks as square as the rank count allows.
fn grid(size: u32) -> (usize, usize) {
    let size = size as usize;
    let p = (1..=size)
        .filter(|p| size.is_multiple_of(*p) && p * p <= size)
        .max()
        .unwrap_or(1);
    (p, size / p)
}

/// The 2-D block-cyclic owner of tile `(i, j)`.
fn owner(size: u32, i: usize, j: usize) -> Rank {
    let (p, q) = grid(size);
    Rank(((i % p) * q + j % q) as u32)
}

// ----- tile kernels (column-major, dense, `n × n`) ---------------------------------------

/// In-place LU of `a` without pivoting: L (unit lower) below the diagonal, U on and above.
fn getrf(a: &mut [f64], n: usize) {
    for k in 0..n {
        let p = a[k + k * n];
        for i in k + 1..n {
            a[i + k * n] /= p;
        }
        for j in k + 1..n {
            let u = a[k + j * n];
            for i in k + 1..n {
                a[i + j * n] -= a[i + k * n] * u;
            }
        }
    }
}

/// `b = L⁻¹ b`, with L the unit lower triangle of `lu`.
fn trsm_l(lu: &[f64], b: &mut [f64], n: usize) {
    for c in 0..n {
        for r in 0..n {
            let x = b[r + c * n];
            for s in r + 1..n {
                b[s + c * n] -= lu[s + r * n] * x;
            }
        }
    }
}

/// `b = b U⁻¹`, with U the upper triangle of `lu`.
fn trsm_u(lu: &[f64], b: &mut [f64], n: usize) {
    for j in 0..n {
        for m in 0..j {
            let u = lu[m + j * n];
            for r in 0..n {
                b[r + j * n] -= b[r + m * n] * u;
            }
        }
        let d = lu[j + j * n];
        for r in 0..n {
            b[r + j * n] /= d;
        }
    }
}

/// `c −= a · b`.
fn gemm(a: &[f64], b: &[f64], c: &mut [f64], n: usize) {
    for j in 0..n {
        for m in 0..n {
            let x = b[m + j * n];
            for r in 0..n {
                c[r + j * n] -= a[r + m * n] * x;
            }
        }
    }
}

struct Kernels {
    getrf: Codelet,
    trsm_l: Codelet,
    trsm_u: Codelet,
    gemm: Codelet,
}

fn kernels() -> Kernels {
    type M = Matrix<f64>;
    Kernels {
        getrf: Codelet::new("getrf", |b| {
            let mut a = b.w::<M>(0);
            let n = a.nx();
            getrf(a.as_mut_slice(), n);
        }),
        // (R the diagonal tile, RW the tile to solve)
        trsm_l: Codelet::new("trsm_l", |b| {
            let lu = b.r::<M>(0);
            let mut x = b.w::<M>(1);
            trsm_l(lu.as_slice(), x.as_mut_slice(), lu.nx());
        }),
        trsm_u: Codelet::new("trsm_u", |b| {
            let lu = b.r::<M>(0);
            let mut x = b.w::<M>(1);
            trsm_u(lu.as_slice(), x.as_mut_slice(), lu.nx());
        }),
        // (R A_ik, R A_kj, RW A_ij)
        gemm: Codelet::new("gemm", |b| {
            let a = b.r::<M>(0);
            let bb = b.r::<M>(1);
            let mut c = b.w::<M>(2);
            gemm(a.as_slice(), bb.as_slice(), c.as_mut_slice(), a.nx());
        }),
    }
}

/// ‖A − L·U‖_F / ‖A‖_F for the factored tiles `f[i][j]`.
fn residual(lu: Lu, f: &[Vec<Matrix<f64>>]) -> f64 {
    let (n, bs) = (lu.n(), lu.bs);
    let at = |i: usize, j: usize| f[i / bs][j / bs].get(i % bs, j % bs);
    let (mut err, mut norm) = (0.0, 0.0);
    for i in 0..n {
        for j in 0..n {
            // (L·U)_ij = Σ_{m ≤ min(i, j)} L_im U_mj, L unit lower.
            let mut s = 0.0;
            for m in 0..=i.min(j) {
                let l = if m == i { 1.0 } else { at(i, m) };
                s += l * at(m, j);
            }
            let a = lu.a(i, j);
            err += (a - s) * (a - s);
            norm += a * a;
        }
    }
    (err / norm).sqrt()
}

/// The owners of `tiles`, once each, in order.
fn owners(size: u32, tiles: impl Iterator<Item = (usize, usize)>) -> Vec<Rank> {
    let mut v: Vec<Rank> = tiles.map(|(i, j)| owner(size, i, j)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The explicit version: local tasks plus the application's own sends and receives.
/// Returns the factored tiles on rank 0.
fn explicit(ctx: &Context, lu: Lu) -> Option<Vec<Vec<Matrix<f64>>>> {
    let (me, size, nt) = (ctx.rank(), ctx.size(), lu.nt);
    let k = kernels();
    let own = |i, j| owner(size, i, j) == me;
    // Every rank holds a buffer for every tile: its own tiles with their values, the
    // others to receive the finished tiles into.
    let tiles: Vec<Vec<Handle<Matrix<f64>>>> = (0..nt)
        .map(|i| {
            (0..nt)
                .map(|j| {
                    ctx.register(if own(i, j) {
                        lu.tile(i, j)
                    } else {
                        Matrix::zeros(lu.bs, lu.bs)
                    })
                })
                .collect()
        })
        .collect();
    // A tile is sent once, when it is final, to the other ranks of `users`.
    let publish = |i: usize, j: usize, users: Vec<Rank>| {
        let h = &tiles[i][j];
        if own(i, j) {
            for dest in users.into_iter().filter(|d| *d != me) {
                ctx.send(h, dest, lu.tag(i, j))
                    .detach(|r| r.expect("send a tile"))
                    .expect("post a send");
            }
        } else if users.contains(&me) {
            ctx.recv(h, owner(size, i, j), lu.tag(i, j))
                .detach(|r| {
                    r.expect("receive a tile");
                })
                .expect("post a receive");
        }
    };
    for s in 0..nt {
        if own(s, s) {
            ctx.task(&k.getrf).rw(&tiles[s][s]).submit();
        }
        publish(
            s,
            s,
            owners(size, (s + 1..nt).flat_map(|t| [(s, t), (t, s)])),
        );
        for j in s + 1..nt {
            if own(s, j) {
                ctx.task(&k.trsm_l)
                    .r(&tiles[s][s])
                    .rw(&tiles[s][j])
                    .submit();
            }
            publish(s, j, owners(size, (s + 1..nt).map(|i| (i, j))));
        }
        for i in s + 1..nt {
            if own(i, s) {
                ctx.task(&k.trsm_u)
                    .r(&tiles[s][s])
                    .rw(&tiles[i][s])
                    .submit();
            }
            publish(i, s, owners(size, (s + 1..nt).map(|j| (i, j))));
        }
        for i in s + 1..nt {
            for j in s + 1..nt {
                if own(i, j) {
                    ctx.task(&k.gemm)
                        .r(&tiles[i][s])
                        .r(&tiles[s][j])
                        .rw(&tiles[i][j])
                        .submit();
                }
            }
        }
    }
    // Gather on rank 0, with tags past the tiles'.
    let gather_tag = |i, j| Tag(lu.tag(i, j).0 + (nt * nt) as i64);
    for (i, row) in tiles.iter().enumerate() {
        for (j, h) in row.iter().enumerate() {
            let o = owner(size, i, j);
            if o == Rank(0) {
                continue;
            }
            if me == o {
                ctx.send(h, Rank(0), gather_tag(i, j))
                    .detach(|r| {
                        r.expect("send a tile home");
                    })
                    .expect("post a send");
            } else if me == Rank(0) {
                ctx.recv(h, o, gather_tag(i, j))
                    .detach(|r| {
                        r.expect("receive a tile");
                    })
                    .expect("post a receive");
            }
        }
    }
    ctx.wait_for_all();
    let out: Vec<Vec<Matrix<f64>>> = tiles
        .into_iter()
        .map(|row| row.into_iter().map(|h| ctx.unregister(h)).collect())
        .collect();
    (me == Rank(0)).then_some(out)
}

/// The implicit version: the whole flow inserted on every rank.
fn implicit(ctx: &Context, lu: Lu) -> Option<Vec<Vec<Matrix<f64>>>> {
    let (me, size, nt) = (ctx.rank(), ctx.size(), lu.nt);
    let k = kernels();
    let tiles: Vec<Vec<Handle<Matrix<f64>>>> = (0..nt)
        .map(|i| {
            (0..nt)
                .map(|j| {
                    ctx.register_owned(lu.tag(i, j), Owner::Rank(owner(size, i, j)), move || {
                        lu.tile(i, j)
                    })
                    .expect("register a tile")
                })
                .collect()
        })
        .collect();
    let ok = |r: Result<starling::Inserted, starling::InsertError>| {
        r.expect("insert a task");
    };
    for s in 0..nt {
        ok(ctx.insert(&k.getrf).rw(&tiles[s][s]).submit());
        for j in s + 1..nt {
            ok(ctx
                .insert(&k.trsm_l)
                .r(&tiles[s][s])
                .rw(&tiles[s][j])
                .submit());
        }
        for i in s + 1..nt {
            ok(ctx
                .insert(&k.trsm_u)
                .r(&tiles[s][s])
                .rw(&tiles[i][s])
                .submit());
        }
        for i in s + 1..nt {
            for j in s + 1..nt {
                ok(ctx
                    .insert(&k.gemm)
                    .r(&tiles[i][s])
                    .r(&tiles[s][j])
                    .rw(&tiles[i][j])
                    .submit());
            }
        }
        // The diagonal tile is no longer read: drop its cached copies.
        ctx.flush(&tiles[s][s]);
    }
    for row in &tiles {
        for h in row {
            ctx.get_data_on_node(h, Rank(0))
                .expect("bring a tile to rank 0");
        }
    }
    ctx.wait_for_all();
    (me == Rank(0)).then(|| {
        tiles
            .iter()
            .map(|row| {
                row.iter()
                    .map(|h| ctx.acquire(h, AccessMode::R).get().clone())
                    .collect()
            })
            .collect()
    })
}

/// One version on this rank: rank 0 checks the residual, prints it and returns it.
fn version_on_rank(ctx: &Context, version: &str, lu: Lu) -> Result<Option<f64>, String> {
    let start = Instant::now();
    let tiles = match version {
        "explicit" => explicit(ctx, lu),
        _ => implicit(ctx, lu),
    };
    ctx.barrier();
    if ctx.rank() != Rank(0) {
        return Ok(None);
    }
    let tiles = tiles.ok_or("rank 0 returned no tiles")?;
    let res = residual(lu, &tiles);
    let size = ctx.size();
    let (p, q) = grid(size);
    println!(
        "{version} LU: n = {} ({} × {} tiles of {}), {size} ranks ({p} × {q}), \
         ‖A − LU‖/‖A‖ = {res:.3e}",
        lu.n(),
        lu.nt,
        lu.nt,
        lu.bs,
    );
    eprintln!(
        "{version} LU: {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    if res < 1e-10 {
        Ok(Some(res))
    } else {
        Err(format!("{version}: residual {res:e} is not below 1e-10"))
    }
}

/// Runs the versions one after the other on `ranks` ranks (one job: under `mpirun`, MPI
/// starts once per process) and returns their relative residuals (under `mpirun`: on rank
/// 0's process; zeros on the others).
///
/// # Errors
/// When the cluster does not shut down cleanly or a residual is 1e-10 or more.
pub(crate) fn run_all(
    ranks: u32,
    versions: &[&str],
    lu: Lu,
    config: ClusterConfig,
) -> Result<Vec<f64>, String> {
    let vs: Vec<String> = versions.iter().map(|v| (*v).to_owned()).collect();
    let out = launch_with(ranks, config, move |ctx| {
        vs.iter()
            .map(|v| version_on_rank(ctx, v, lu))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(|e| e.to_string())?;
    let mut residuals = vec![0.0; versions.len()];
    for (_, rank) in out {
        for (r, res) in residuals.iter_mut().zip(rank?) {
            if let Some(res) = res {
                *r = res;
            }
        }
    }
    Ok(residuals)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let which = args.next().unwrap_or_else(|| "both".into());
    let nt: usize = args.next().map_or(6, |a| a.parse().expect("tiles"));
    let bs: usize = args.next().map_or(16, |a| a.parse().expect("tile size"));
    assert!(
        ranks >= 1 && nt >= 1 && bs >= 1,
        "ranks, tiles and tile size ≥ 1"
    );
    let versions: &[&str] = match which.as_str() {
        "explicit" => &["explicit"],
        "implicit" => &["implicit"],
        "both" => &["explicit", "implicit"],
        _ => panic!("version: explicit, implicit or both"),
    };
    let mut config = ClusterConfig::from_env();
    if std::env::var_os("STARLING_PROGRESS").is_none() {
        config.progress = std::io::stderr().is_terminal();
    }
    if let Err(e) = run_all(ranks, versions, Lu { nt, bs }, config) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
