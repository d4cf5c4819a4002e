//! Tiled Cholesky factorization (`A = L·Lᵀ`) with the insert-task utility, on the
//! in-process cluster (no MPI needed) or, built with the `mpi` feature and started by
//! `mpirun`, across MPI processes ([`starling::launch`]), checked against `A` (the
//! reference's `mpi/examples/matrix_decomposition`).
//!
//! The symmetric positive definite matrix `A = H + n·I` (`H` the Hilbert matrix,
//! `h_ij = 1 / (i + j + 1)`, as in the reference's example) of order `n` is cut into
//! `NT × NT` tiles of `nb × nb` (`Matrix<f64>`, column-major, `ld = nb`); only the lower
//! tiles are registered. The tiles are distributed 2-D block-cyclically over a `P × Q`
//! grid of the ranks: tile (m, k) belongs to rank `(m mod P)·Q + k mod Q`. Every rank
//! inserts the right-looking algorithm's tasks in the same order:
//!
//! ```text
//! for k in 0..NT:
//!     POTRF  A[k][k] ← chol(A[k][k])                       priority 2·NT − 2k
//!     TRSM   A[m][k] ← A[m][k] · A[k][k]⁻ᵀ     (m > k)     priority 2·NT − 2k − m
//!     flush  A[k][k]                          (its last use)
//!     SYRK   A[n][n] ← A[n][n] − A[n][k]·A[n][k]ᵀ (n > k)  priority 2·NT − 2k − 2n
//!     GEMM   A[m][n] ← A[m][n] − A[m][k]·A[n][k]ᵀ (m > n > k) priority 2·NT − 2k − m − n
//!     flush  A[m][k]                          (m > k, their last use)
//! ```
//!
//! (the priorities of the reference's `cholesky_implicit`: the panel, the critical path,
//! goes first). The owner of the written tile runs each task; the runtime moves the panel
//! tiles to the ranks that need them, once per rank thanks to its communication cache, and
//! the flushes free those copies after their last use. The tile kernels are `faer`'s
//! (pure Rust, sequential: `Par::Seq`), called on views over the tiles' storage.
//!
//! The run prints the factorization's wall time and GFlop/s (`n³/3` flops), then gathers
//! the tiles on rank 0 (`get_data_on_node`), which checks `‖A − L·Lᵀ‖_F / ‖A‖_F < 1e-10`
//! (above n = 4096, where that product would cost more than the factorization,
//! `‖A·x − L·(Lᵀ·x)‖ / ‖A·x‖ < 1e-10` for 3 random vectors `x`, in `O(n²)`);
//! the example exits non-zero when the check fails (it runs unless `--no-check` is given,
//! for timing large `n`, where the sequential check costs more than the factorization;
//! `--check` is accepted for the reference's command line) or when the cluster shuts down
//! with leftovers.
//!
//! ```sh
//! cargo run --release --example cholesky -- [ranks] [n] [nb] [--check | --no-check] [--openblas] [--gpu] [--ms] | --probe
//! cargo run --release --features cuda --example cholesky -- 1 8192 1024 --gpu
//! cargo run --release --features cuda-13 --example cholesky -- --probe   # CUDA 13 API
//! cargo build --release --features mpi --example cholesky
//! mpirun -n 2 target/release/examples/cholesky 2 4096 512 --no-check   # over MPI
//! ```
//!
//! Standard output holds the results only, printed by rank 0, so a run under `mpirun`
//! prints the same lines as the in-process run; the timing goes to standard error.
//!
//! It runs on the in-process cluster, or over MPI under `mpirun` when built with the
//! `mpi` feature (`starling::launch_with`; the job's size then replaces `ranks`). The
//! worker count per rank comes from `STARLING_NCPU` (default: the machine's cores). On a
//! terminal the run shows its progress (tasks done / submitted) on stderr;
//! `STARLING_PROGRESS=0` hides it, `=1` shows it anywhere.
//!
//! `--openblas` (with the `openblas` feature, which links the system's `libopenblas`,
//! Debian's `libopenblas-dev`) runs the same tile kernels as the C comparison
//! (`bench/compare/cholesky_starpu.c`): `dpotrf_`, `cblas_dtrsm`, `cblas_dsyrk`,
//! `cblas_dgemm`; set `OPENBLAS_NUM_THREADS=1` for one thread per worker.
//!
//! `--ms` runs the same flow in master-slave mode ([`starling::launch_ms`]): rank 0 (the
//! master) submits the whole factorization as a one-rank flow and the other ranks run its
//! tasks, the data moving to them as the core's coherence state machine decides; the four
//! codelets are registered by name at start-up (`starling::ms::Registry`). `ranks` counts
//! the master: `cholesky 3 4096 512 --ms` has two slaves.
//!
//! `--gpu` (with the `cuda` feature) gives the four codelets their CUDA implementations
//! (`starling::gpu::tiles`: cuSOLVER's POTRF, cuBLAS's TRSM, SYRK and GEMM), run by the
//! CUDA worker of each device (`STARLING_NCUDA`, `STARLING_CUDA_POLICY`); the check is the
//! same. `--gpu` first prints, on standard error, each CUDA library (the name loaded, its
//! file and version) and the devices; without the feature, without a CUDA device, or
//! without cuBLAS or cuSOLVER (under a name this build loads: `cuda` is the CUDA 12 API,
//! `cuda-13` the CUDA 13 API), it fails with the reason and exits non-zero. `--probe`
//! prints the same table and exits.

use core::time::Duration;
use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Instant;

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::Matrix;
use starling::ms::{MsConfig, Registry};
use starling::{
    Buffers, ClusterConfig, Codelet, Context, Handle, InsertError, launch_ms, launch_with,
};

/// The problem: `ranks` ranks factor a matrix of order `n` in tiles of order `nb`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) ranks: u32,
    pub(crate) n: usize,
    pub(crate) nb: usize,
    /// Gather `L` on rank 0 and check it.
    pub(crate) check: bool,
    /// Run the tile kernels of the system's OpenBLAS instead of faer's (`--openblas`,
    /// feature `openblas`).
    pub(crate) openblas: bool,
}

impl Params {
    /// Tiles per row and per column.
    pub(crate) fn nt(&self) -> usize {
        self.n / self.nb
    }

    /// The process grid `P × Q = ranks`: `P` the largest divisor of `ranks` not above its
    /// square root.
    pub(crate) fn grid(&self) -> (u32, u32) {
        let p = (1..=self.ranks)
            .take_while(|p| p * p <= self.ranks)
            .filter(|p| self.ranks.is_multiple_of(*p))
            .last()
            .unwrap_or(1);
        (p, self.ranks / p)
    }

    /// The owner of tile (m, k): 2-D block-cyclic over the `P × Q` grid.
    pub(crate) fn owner(&self, m: usize, k: usize) -> Rank {
        let (p, q) = self.grid();
        Rank((m as u32 % p) * q + k as u32 % q)
    }

    /// Floating-point operations of the factorization, as the reference counts them.
    pub(crate) fn flops(&self) -> f64 {
        let n = self.n as f64;
        n * n * n / 3.0
    }
}

/// Element (i, j) of `A = H + n·I`.
pub(crate) fn element(n: usize, i: usize, j: usize) -> f64 {
    let h = 1.0 / (i + j + 1) as f64;
    if i == j { h + n as f64 } else { h }
}

/// Tile (m, k) of `A`, column-major with `ld = nb`.
pub(crate) fn tile(p: &Params, m: usize, k: usize) -> Vec<f64> {
    let nb = p.nb;
    let mut t = vec![0.0; nb * nb];
    for j in 0..nb {
        for i in 0..nb {
            t[i + j * nb] = element(p.n, m * nb + i, k * nb + j);
        }
    }
    t
}

// ----- the tile kernels (faer, sequential) -------------------------------------------------

/// The view of a tile's storage as an `nx × ny` matrix with leading dimension `ld`.
fn view(t: &Matrix<f64>) -> MatRef<'_, f64> {
    MatRef::from_column_major_slice_with_stride(t.as_slice(), t.nx(), t.ny(), t.ld())
}

/// The writable view of a tile's storage.
fn view_mut(t: &mut Matrix<f64>) -> MatMut<'_, f64> {
    let (nx, ny, ld) = (t.nx(), t.ny(), t.ld());
    MatMut::from_column_major_slice_with_stride_mut(t.as_mut_slice(), nx, ny, ld)
}

/// POTRF: the lower triangle of `a` becomes its Cholesky factor `L` (`a = L·Lᵀ`); the
/// strict upper triangle is left as it was.
///
/// # Panics
/// When `a` is not positive definite.
pub(crate) fn potrf(a: MatMut<'_, f64>) {
    let nb = a.nrows();
    let mut buf = MemBuffer::new(cholesky_in_place_scratch::<f64>(
        nb,
        Par::Seq,
        Default::default(),
    ));
    cholesky_in_place(
        a,
        Default::default(),
        Par::Seq,
        MemStack::new(&mut buf),
        Default::default(),
    )
    .expect("a diagonal tile is not positive definite");
}

/// TRSM: `b ← b·L⁻ᵀ` for the lower triangle `L` of `l` (solved as `L·bᵀ = bᵀ`).
pub(crate) fn trsm(l: MatRef<'_, f64>, b: MatMut<'_, f64>) {
    solve_lower_triangular_in_place(l, b.transpose_mut(), Par::Seq);
}

/// SYRK: `c ← c − a·aᵀ`, on the lower triangle of `c` only.
pub(crate) fn syrk(a: MatRef<'_, f64>, c: MatMut<'_, f64>) {
    triangular::matmul(
        c,
        BlockStructure::TriangularLower,
        Accum::Add,
        a,
        BlockStructure::Rectangular,
        a.transpose(),
        BlockStructure::Rectangular,
        -1.0,
        Par::Seq,
    );
}

/// GEMM: `c ← c − a·bᵀ`.
pub(crate) fn gemm(a: MatRef<'_, f64>, b: MatRef<'_, f64>, c: MatMut<'_, f64>) {
    matmul(c, Accum::Add, a, b.transpose(), -1.0, Par::Seq);
}

/// The same tile kernels on the system's OpenBLAS (feature `openblas`): LAPACK's `dpotrf_`
/// and CBLAS's `dtrsm`, `dsyrk`, `dgemm`, on the tiles' column-major storage.
#[cfg(feature = "openblas")]
mod openblas {
    use core::ffi::{c_char, c_int};

    use starling::interfaces::Matrix;

    use super::{Codelet, Codelets};

    #[link(name = "openblas")]
    unsafe extern "C" {
        fn dpotrf_(
            uplo: *const c_char,
            n: *const c_int,
            a: *mut f64,
            lda: *const c_int,
            info: *mut c_int,
        );
        fn cblas_dtrsm(
            layout: c_int,
            side: c_int,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: f64,
            a: *const f64,
            lda: c_int,
            b: *mut f64,
            ldb: c_int,
        );
        fn cblas_dsyrk(
            layout: c_int,
            uplo: c_int,
            trans: c_int,
            n: c_int,
            k: c_int,
            alpha: f64,
            a: *const f64,
            lda: c_int,
            beta: f64,
            c: *mut f64,
            ldc: c_int,
        );
        fn cblas_dgemm(
            layout: c_int,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: f64,
            a: *const f64,
            lda: c_int,
            b: *const f64,
            ldb: c_int,
            beta: f64,
            c: *mut f64,
            ldc: c_int,
        );
    }

    // CBLAS's enumerations.
    const COL_MAJOR: c_int = 102;
    const NO_TRANS: c_int = 111;
    const TRANS: c_int = 112;
    const LOWER: c_int = 122;
    const NON_UNIT: c_int = 131;
    const RIGHT: c_int = 142;

    /// A tile's order and leading dimension, as C ints.
    fn dims(t: &Matrix<f64>) -> (c_int, c_int) {
        assert_eq!(t.nx(), t.ny(), "a tile is square");
        let n = c_int::try_from(t.nx()).expect("a tile's order fits a C int");
        let ld = c_int::try_from(t.ld()).expect("a tile's leading dimension fits a C int");
        (n, ld)
    }

    pub(super) fn codelets() -> Codelets {
        Codelets {
            potrf: Codelet::new("potrf", |b| {
                let mut a = b.w::<Matrix<f64>>(0);
                let (n, ld) = dims(&a);
                let mut info: c_int = 0;
                // SAFETY: `a` is an n × n column-major tile with leading dimension `ld`,
                // held for writing for the call's duration.
                unsafe {
                    dpotrf_(
                        c"L".as_ptr(),
                        &n,
                        a.as_mut_slice().as_mut_ptr(),
                        &ld,
                        &mut info,
                    )
                };
                assert_eq!(info, 0, "a diagonal tile is not positive definite");
            }),
            trsm: Codelet::new("trsm", |b| {
                let l = b.r::<Matrix<f64>>(0);
                let mut x = b.w::<Matrix<f64>>(1);
                let ((n, lda), (_, ldb)) = (dims(&l), dims(&x));
                // SAFETY: two n × n tiles of their leading dimensions, one read, one
                // written, distinct handles.
                unsafe {
                    cblas_dtrsm(
                        COL_MAJOR,
                        RIGHT,
                        LOWER,
                        TRANS,
                        NON_UNIT,
                        n,
                        n,
                        1.0,
                        l.as_slice().as_ptr(),
                        lda,
                        x.as_mut_slice().as_mut_ptr(),
                        ldb,
                    );
                }
            }),
            syrk: Codelet::new("syrk", |b| {
                let a = b.r::<Matrix<f64>>(0);
                let mut c = b.w::<Matrix<f64>>(1);
                let ((n, lda), (_, ldc)) = (dims(&a), dims(&c));
                // SAFETY: as for TRSM.
                unsafe {
                    cblas_dsyrk(
                        COL_MAJOR,
                        LOWER,
                        NO_TRANS,
                        n,
                        n,
                        -1.0,
                        a.as_slice().as_ptr(),
                        lda,
                        1.0,
                        c.as_mut_slice().as_mut_ptr(),
                        ldc,
                    );
                }
            }),
            gemm: Codelet::new("gemm", |b| {
                let (a, bt) = (b.r::<Matrix<f64>>(0), b.r::<Matrix<f64>>(1));
                let mut c = b.w::<Matrix<f64>>(2);
                let ((n, lda), (_, ldb), (_, ldc)) = (dims(&a), dims(&bt), dims(&c));
                // SAFETY: as for TRSM, two tiles read, one written.
                unsafe {
                    cblas_dgemm(
                        COL_MAJOR,
                        NO_TRANS,
                        TRANS,
                        n,
                        n,
                        n,
                        -1.0,
                        a.as_slice().as_ptr(),
                        lda,
                        bt.as_slice().as_ptr(),
                        ldb,
                        1.0,
                        c.as_mut_slice().as_mut_ptr(),
                        ldc,
                    );
                }
            }),
        }
    }
}

// ----- the distributed factorization ------------------------------------------------------

/// The lower tiles of `A` as registered handles: `tiles[m][k]` for `k ≤ m`.
pub(crate) type Tiles = Vec<Vec<Handle<Matrix<f64>>>>;

/// Registers the lower tiles on every rank, with the same tags and owners; the owner
/// allocates and fills its tiles now, the other ranks allocate a copy on first use.
///
/// # Errors
/// [`InsertError`] from the registration (a tag in use, a rank out of range).
pub(crate) fn register_tiles(ctx: &Context, p: &Params) -> Result<Tiles, InsertError> {
    let nt = p.nt();
    let params = *p;
    let mut tiles = Vec::with_capacity(nt);
    for m in 0..nt {
        let mut row = Vec::with_capacity(m + 1);
        for k in 0..=m {
            let owner = p.owner(m, k);
            let mine = owner == ctx.rank();
            let nb = p.nb;
            let h =
                ctx.register_owned(Tag((m * nt + k) as i64), Owner::Rank(owner), move || {
                    let data = if mine {
                        tile(&params, m, k)
                    } else {
                        vec![0.0; nb * nb]
                    };
                    Matrix::new(nb, nb, nb, data).expect("a tile is nb × nb")
                })?;
            row.push(h);
        }
        tiles.push(row);
    }
    Ok(tiles)
}

/// The CPU implementations of the four codelets, on the task's tiles.
fn potrf_task(b: &mut Buffers<'_>) {
    potrf(view_mut(&mut b.w::<Matrix<f64>>(0)));
}

fn trsm_task(b: &mut Buffers<'_>) {
    let l = b.r::<Matrix<f64>>(0);
    trsm(view(&l), view_mut(&mut b.w::<Matrix<f64>>(1)));
}

fn syrk_task(b: &mut Buffers<'_>) {
    let a = b.r::<Matrix<f64>>(0);
    syrk(view(&a), view_mut(&mut b.w::<Matrix<f64>>(1)));
}

fn gemm_task(b: &mut Buffers<'_>) {
    let (a, bt) = (b.r::<Matrix<f64>>(0), b.r::<Matrix<f64>>(1));
    gemm(view(&a), view(&bt), view_mut(&mut b.w::<Matrix<f64>>(2)));
}

/// Pins the host memory of the tiles this rank owns for the devices of `--gpu`, as a
/// StarPU application allocates its matrix with `starpu_malloc`: their copies to and from
/// the devices then run asynchronously, at the bus's speed. Tiles received from other
/// ranks are pinned by the device layer when they are copied a second time.
pub(crate) fn pin_tiles(ctx: &Context, p: &Params, tiles: &Tiles, gpu: Option<&Gpu>) {
    #[cfg(feature = "cuda")]
    if let Some(gpu) = gpu {
        for (m, row) in tiles.iter().enumerate() {
            for (k, h) in row.iter().enumerate() {
                if p.owner(m, k) == ctx.rank() {
                    if let Err(e) = gpu.pin(&h.host_ref()) {
                        eprintln!("cholesky: tile ({m}, {k}) stays pageable: {e}");
                    }
                }
            }
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (ctx, p, tiles, gpu);
}

/// The CUDA devices of `--gpu` (the `cuda` feature).
#[cfg(any(feature = "cuda", feature = "cuda-13"))]
pub(crate) type Gpu = std::sync::Arc<starling::gpu::Gpu>;

/// Without the `cuda` feature there is no GPU to give the codelets.
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
pub(crate) fn open_gpu() -> Result<Gpu, String> {
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    {
        use starling::gpu::probe::{self, Lib};
        // The libraries, their files and versions, then the devices: one line each.
        let report = probe::report();
        eprintln!("{report}");
        let gpu = starling::gpu::Gpu::from_env().map_err(|e| format!("--gpu: {e}"))?;
        // The tile codelets need cuBLAS and cuSOLVER: a missing one is an error naming
        // it, not a silent run on the CPU.
        report
            .require(&[Lib::Cublas, Lib::Cusolver])
            .map_err(|e| format!("--gpu: {e}"))?;
        Ok(gpu)
    }
    #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
    {
        Err(
            "--gpu needs the `cuda` or `cuda-13` feature (cargo run --release --features cuda --example ...)"
                .into(),
        )
    }
}

/// The four tile codelets.
pub(crate) struct Codelets {
    potrf: Codelet,
    trsm: Codelet,
    syrk: Codelet,
    gemm: Codelet,
}

impl Codelets {
    /// The codelets of `p`'s kernels: faer's (with their CUDA implementations when `gpu`
    /// is given), or OpenBLAS's with `p.openblas`.
    pub(crate) fn of(p: &Params, gpu: Option<&Gpu>) -> Self {
        #[cfg(feature = "openblas")]
        if p.openblas {
            return openblas::codelets();
        }
        debug_assert!(!p.openblas, "--openblas needs the `openblas` feature");
        Self::on(gpu)
    }

    /// The CPU codelets.
    #[allow(dead_code, reason = "benches/insert.rs builds the CPU codelets")]
    pub(crate) fn new() -> Self {
        Self::on(None)
    }

    /// The codelets, with their CUDA implementations when `gpu` is given.
    pub(crate) fn on(gpu: Option<&Gpu>) -> Self {
        #[cfg(any(feature = "cuda", feature = "cuda-13"))]
        if let Some(gpu) = gpu {
            use starling::gpu::tiles;
            return Self {
                potrf: gpu.codelet("potrf", potrf_task, tiles::potrf),
                trsm: gpu.codelet("trsm", trsm_task, tiles::trsm),
                syrk: gpu.codelet("syrk", syrk_task, tiles::syrk),
                gemm: gpu.codelet("gemm", gemm_task, tiles::gemm),
            };
        }
        #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
        if let Some(never) = gpu {
            match *never {}
        }
        Self {
            potrf: Codelet::new("potrf", potrf_task),
            trsm: Codelet::new("trsm", trsm_task),
            syrk: Codelet::new("syrk", syrk_task),
            gemm: Codelet::new("gemm", gemm_task),
        }
    }
}

/// Inserts the factorization's tasks (every rank, in the same order); returns without
/// waiting for them.
///
/// # Errors
/// [`InsertError`] from an insert.
pub(crate) fn factorize(
    ctx: &Context,
    p: &Params,
    tiles: &Tiles,
    cl: &Codelets,
) -> Result<(), InsertError> {
    let nt = p.nt();
    // The priorities go negative for the trailing updates far from the panel.
    let prio = |terms: &[usize]| {
        let v = 2 * nt as i64 - terms.iter().map(|&t| t as i64).sum::<i64>();
        i32::try_from(v).unwrap_or(i32::MIN)
    };
    for k in 0..nt {
        ctx.insert(&cl.potrf)
            .rw(&tiles[k][k])
            .priority(prio(&[2 * k]))
            .submit()?;
        for m in k + 1..nt {
            ctx.insert(&cl.trsm)
                .r(&tiles[k][k])
                .rw(&tiles[m][k])
                .priority(prio(&[2 * k, m]))
                .submit()?;
        }
        ctx.flush(&tiles[k][k]);
        for n in k + 1..nt {
            ctx.insert(&cl.syrk)
                .r(&tiles[n][k])
                .rw(&tiles[n][n])
                .priority(prio(&[2 * k, 2 * n]))
                .submit()?;
            for m in n + 1..nt {
                ctx.insert(&cl.gemm)
                    .r(&tiles[m][k])
                    .r(&tiles[n][k])
                    .rw(&tiles[m][n])
                    .priority(prio(&[2 * k, m, n]))
                    .submit()?;
            }
        }
        for row in tiles.iter().skip(k + 1) {
            ctx.flush(&row[k]);
        }
    }
    Ok(())
}

/// One rank's run: register, factor (timed between two barriers), gather on rank 0
/// when checking. Rank 0 returns the wall time and `L` (column-major, `n × n`; empty
/// without the check).
fn distributed(
    ctx: &Context,
    p: &Params,
    gpu: Option<&Gpu>,
) -> Result<Option<(Duration, Vec<f64>)>, InsertError> {
    // Under mpirun the job's size is mpirun's `-n`, whatever the command line said.
    let p = &Params {
        ranks: ctx.size(),
        ..*p
    };
    if ctx.rank() == Rank(0) {
        let (gp, gq) = p.grid();
        println!(
            "cholesky: n = {}, nb = {} ({} × {} tiles), {} rank(s) on a {gp} × {gq} grid, {} kernels",
            p.n,
            p.nb,
            p.nt(),
            p.nt(),
            p.ranks,
            if p.openblas { "OpenBLAS" } else { "faer" }
        );
    }
    let tiles = register_tiles(ctx, p)?;
    let cl = Codelets::of(p, gpu);
    pin_tiles(ctx, p, &tiles, gpu);
    ctx.wait_for_all();
    ctx.barrier();
    let start = Instant::now();
    factorize(ctx, p, &tiles, &cl)?;
    ctx.wait_for_all();
    ctx.barrier();
    let elapsed = start.elapsed();
    if !p.check {
        return Ok((ctx.rank() == Rank(0)).then_some((elapsed, Vec::new())));
    }
    for row in &tiles {
        for h in row {
            ctx.get_data_on_node(h, Rank(0))?;
        }
    }
    if ctx.rank() != Rank(0) {
        return Ok(None);
    }
    let (n, nb) = (p.n, p.nb);
    let mut l = vec![0.0; n * n];
    for (m, row) in tiles.iter().enumerate() {
        for (k, h) in row.iter().enumerate() {
            let t = ctx.acquire(h, AccessMode::R);
            let t = t.get();
            for j in 0..nb {
                // Diagonal tiles: only the lower triangle holds L.
                let first = if m == k { j } else { 0 };
                for i in first..nb {
                    l[(m * nb + i) + (k * nb + j) * n] = t.get(i, j);
                }
            }
        }
    }
    Ok(Some((elapsed, l)))
}

/// `‖A − L·Lᵀ‖_F / ‖A‖_F` for `L` column-major `n × n`.
fn residual(n: usize, l: &[f64]) -> f64 {
    let l = MatRef::from_column_major_slice(l, n, n);
    let a = Mat::from_fn(n, n, |i, j| element(n, i, j));
    let mut r = a.clone();
    matmul(r.as_mut(), Accum::Add, l, l.transpose(), -1.0, Par::Seq);
    let frobenius = |m: MatRef<'_, f64>| {
        let mut s = 0.0;
        for j in 0..n {
            for i in 0..n {
                s += m[(i, j)] * m[(i, j)];
            }
        }
        s.sqrt()
    };
    frobenius(r.as_ref()) / frobenius(a.as_ref())
}

/// Above this order the check is [`probe_residual`]: the full product `L·Lᵀ` would cost
/// `n³` flops, more than the factorization.
const FULL_CHECK_MAX: usize = 4096;

/// `max ‖A·x − L·(Lᵀ·x)‖₂ / ‖A·x‖₂` over a few fixed pseudo-random vectors `x`, for `L`
/// column-major `n × n` (lower triangle): the check of large factorizations, in `O(n²)`
/// (`A`'s elements computed on the fly). A wrong tile changes `L·Lᵀ` on whole rows and
/// columns, which a random `x` sees with probability one.
fn probe_residual(n: usize, l: &[f64]) -> f64 {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let mut worst = 0.0f64;
    for _ in 0..3 {
        let x: Vec<f64> = (0..n).map(|_| next()).collect();
        // y = Lᵀ·x, then z = L·y, column by column.
        let y: Vec<f64> = (0..n)
            .map(|j| (j..n).map(|i| l[i + j * n] * x[i]).sum())
            .collect();
        let mut z = vec![0.0; n];
        for (j, yj) in y.iter().enumerate() {
            for (i, zi) in z.iter_mut().enumerate().skip(j) {
                *zi += l[i + j * n] * yj;
            }
        }
        let (mut num, mut den) = (0.0, 0.0);
        for (i, zi) in z.iter().enumerate() {
            let ax: f64 = (0..n).map(|j| element(n, i, j) * x[j]).sum();
            num += (ax - zi) * (ax - zi);
            den += ax * ax;
        }
        worst = worst.max((num / den).sqrt());
    }
    worst
}

fn parse() -> Result<Params, String> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let check = !all.iter().any(|a| a == "--no-check");
    let openblas = all.iter().any(|a| a == "--openblas");
    if openblas && !cfg!(feature = "openblas") {
        return Err(
            "--openblas needs the `openblas` feature (cargo build --features openblas)".into(),
        );
    }
    let args: Vec<String> = all
        .into_iter()
        .filter(|a| {
            !matches!(
                a.as_str(),
                "--check" | "--no-check" | "--openblas" | "--gpu" | "--ms"
            )
        })
        .collect();
    let num = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| format!("argument {}: `{s}` is not a number", i + 1))
        })
    };
    let p = Params {
        ranks: u32::try_from(num(0, 2)?).map_err(|_| "too many ranks".to_string())?,
        n: num(1, 512)?,
        nb: num(2, 128)?,
        check,
        openblas,
    };
    if p.ranks == 0 || p.nb == 0 || p.n == 0 || !p.n.is_multiple_of(p.nb) {
        return Err("need ranks ≥ 1 and n a positive multiple of nb".into());
    }
    Ok(p)
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--probe") {
        return print_probe();
    }
    let p = match parse() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cholesky: {e}");
            eprintln!(
                "usage: cholesky [ranks] [n] [nb] [--check | --no-check] [--openblas] [--gpu] [--ms] | --probe"
            );
            return ExitCode::FAILURE;
        }
    };
    let gpu = if std::env::args().any(|a| a == "--gpu") {
        match open_gpu() {
            Ok(gpu) => Some(gpu),
            Err(e) => {
                eprintln!("cholesky: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    let devices = gpu.clone();
    let mut config = ClusterConfig::from_env();
    if std::env::var_os("STARLING_PROGRESS").is_none() {
        config.progress = std::io::stderr().is_terminal();
    }
    if std::env::args().any(|a| a == "--ms") {
        if gpu.is_some() {
            eprintln!("cholesky: --ms runs the CPU kernels on the slaves; drop --gpu");
            return ExitCode::FAILURE;
        }
        let cl = Codelets::of(&p, None);
        let registry = Registry::new()
            .codelet(&cl.potrf)
            .codelet(&cl.trsm)
            .codelet(&cl.syrk)
            .codelet(&cl.gemm);
        let ms = MsConfig::from_env();
        eprintln!("cholesky: master-slave mode, master rank {}", ms.master.0);
        let out = launch_ms(p.ranks, ms, config, registry, move |ctx| {
            distributed(ctx, &p, None)
        });
        return match out {
            Ok(Some(r)) => finish(&p, vec![(Rank(0), r)]),
            Ok(None) => ExitCode::SUCCESS, // a slave's process under mpirun
            Err(e) => {
                eprintln!("cholesky: FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // In-process: every rank's outcome; under mpirun: this process's rank only (each with
    // its rank, either way).
    let out = match launch_with(p.ranks, config, move |ctx| {
        distributed(ctx, &p, gpu.as_ref())
    }) {
        Ok(out) => out.into_iter().collect(),
        Err(e) => {
            let e: String = e.to_string().chars().take(2000).collect();
            eprintln!("cholesky: FAILED: the cluster did not shut down cleanly: {e}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    let code = finish(&p, out);
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    if let Some(g) = devices {
        let s = g.stats();
        eprintln!(
            "gpu: {} device(s), {} tasks on a device, {} on the CPU ({} fallbacks, {} failed), {:.1} MB up, {:.1} MB down, {:.1} MB pinned, {} evictions",
            g.device_count(),
            s.device_tasks,
            s.cpu_tasks,
            s.fallbacks,
            s.failed,
            s.bytes_to_device as f64 / 1e6,
            s.bytes_to_host as f64 / 1e6,
            s.pinned_bytes as f64 / 1e6,
            s.evictions
        );
    }
    #[cfg(any(feature = "cuda", feature = "cuda-13"))]
    return code;
    #[cfg(not(any(feature = "cuda", feature = "cuda-13")))]
    finish(&p, out)
}

/// What a rank computed.
type RankOutcome = Result<Option<(Duration, Vec<f64>)>, InsertError>;

/// Prints the timing and checks the factor that rank 0 gathered.
fn finish(p: &Params, out: Vec<(Rank, RankOutcome)>) -> ExitCode {
    let mut result = None;
    for (rank, r) in out {
        match r {
            Ok(None) if rank == Rank(0) => {
                eprintln!("cholesky: FAILED: rank 0 returned no factor");
                return ExitCode::FAILURE;
            }
            Ok(r) => result = result.or(r),
            Err(e) => {
                eprintln!("cholesky: FAILED on rank {}: {e}", rank.0);
                return ExitCode::FAILURE;
            }
        }
    }
    // Only the process of rank 0 holds the factor to check.
    let Some((elapsed, l)) = result else {
        return ExitCode::SUCCESS;
    };
    let secs = elapsed.as_secs_f64();
    eprintln!(
        "factorization: {:.1} ms, {:.2} GFlop/s",
        secs * 1e3,
        p.flops() / secs / 1e9
    );
    if !p.check {
        return ExitCode::SUCCESS;
    }
    let (r, what) = if p.n <= FULL_CHECK_MAX {
        (residual(p.n, &l), "‖A − L·Lᵀ‖_F / ‖A‖_F")
    } else {
        (
            probe_residual(p.n, &l),
            "max ‖A·x − L·(Lᵀ·x)‖ / ‖A·x‖ over 3 random x",
        )
    };
    if r.is_finite() && r < 1e-10 {
        println!("OK: {what} = {r:.3e} < 1e-10");
        ExitCode::SUCCESS
    } else {
        eprintln!("cholesky: FAILED: {what} = {r:.3e} (want < 1e-10)");
        ExitCode::FAILURE
    }
}
