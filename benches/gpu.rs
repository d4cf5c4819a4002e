//! The GPU benchmarks of the CUDA device (feature `cuda`; run on a machine with a GPU):
//!
//! 1. **Cholesky**: GFlop/s (`n³/3` flops) of the tiled factorization of
//!    `examples/cholesky.rs` with its CUDA codelets (cuSOLVER POTRF, cuBLAS TRSM, SYRK,
//!    GEMM) run by Starling's CUDA worker, on one rank, against cuSOLVER's dense `potrf`
//!    of the same matrix on the same device in the same run (the single-device limit);
//!    `n` = 8192, 16384, 32768 (`STARLING_GPU_BENCH_N` = a comma-separated list),
//!    tiles of `STARLING_GPU_BENCH_NB` (default 1024). The dense run times the
//!    factorization only; Starling's includes the transfers its tasks make (every tile
//!    goes up once and every task writes its tile back: write-through).
//! 2. **Staging**: host ↔ device bandwidth of the replica layer (`Replicated::before_send`
//!    staging a device copy to the host, and a fetch of the host copy to the device)
//!    against a raw `cudarc` copy of the same pageable buffer, 256 MiB.
//!
//! ```sh
//! cargo bench --features cuda --bench gpu
//! ```
//!
//! Without a CUDA device it prints "skipped: no CUDA device (<reason>)" and exits 0.

use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use starling::core::AccessMode;
use starling::gpu::blas::Blas;
use starling::gpu::replicas::{Devices, Replicated};
use starling::gpu::{Device, Gpu, GpuConfig};
use starling::{ClusterConfig, run_local_with};

#[allow(
    dead_code,
    reason = "the example's command line and checks are not benchmarked"
)]
#[path = "../examples/cholesky.rs"]
mod cholesky;

fn list(var: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// cuSOLVER's dense POTRF of `A` (order `n`) on `dev`: the factorization's time only.
fn dense(dev: &Device, n: usize) -> Duration {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = cholesky::element(n, i, j);
        }
    }
    let mut blas = Blas::new(dev).expect("cuBLAS and cuSOLVER");
    let mut da = dev.upload(&a).expect("uploading A");
    drop(a);
    dev.synchronize().expect("the upload");
    let start = Instant::now();
    blas.potrf(n, &mut da).expect("potrf");
    start.elapsed()
}

/// Starling's tiled factorization with the CUDA codelets, one rank.
fn tiled(gpu: &Arc<Gpu>, n: usize, nb: usize) -> Duration {
    let p = cholesky::Params {
        ranks: 1,
        n,
        nb,
        check: false,
        openblas: false,
    };
    let gpu = Arc::clone(gpu);
    let out = run_local_with(1, ClusterConfig::from_env(), move |ctx| {
        let tiles = cholesky::register_tiles(ctx, &p).expect("registering the tiles");
        let codelets = cholesky::Codelets::on(Some(&gpu));
        ctx.wait_for_all();
        let start = Instant::now();
        cholesky::factorize(ctx, &p, &tiles, &codelets).expect("an insert");
        ctx.wait_for_all();
        let t = start.elapsed();
        gpu.clear();
        t
    })
    .expect("a clean shutdown");
    out[0]
}

fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Host ↔ device bandwidth: the replica layer against raw copies.
fn staging(dev: &Device) {
    let len = 32 << 20; // 256 MiB of f64
    let bytes = len * 8;
    let devices = Devices(vec![dev.clone()]);
    let node = Devices::node(0);
    let mut host = vec![1.0f64; len];
    let mut raw = dev.alloc_zeros::<f64>(len).expect("a device buffer");
    let mut r = Replicated::new(len);
    let best = |f: &mut dyn FnMut() -> Duration| (0..5).map(|_| f()).min().unwrap_or_default();
    let h2d_raw = best(&mut || {
        let s = Instant::now();
        dev.upload_into(&host, &mut raw).expect("upload");
        dev.synchronize().expect("sync");
        s.elapsed()
    });
    let d2h_raw = best(&mut || {
        let s = Instant::now();
        dev.download_into(&raw, &mut host).expect("download");
        s.elapsed()
    });
    let h2d = best(&mut || {
        r.host_written().expect("host written");
        let s = Instant::now();
        r.acquire_device(&devices, node, AccessMode::R, &host)
            .expect("fetch");
        dev.synchronize().expect("sync");
        let t = s.elapsed();
        r.release(node, AccessMode::R).expect("release");
        t
    });
    let d2h = best(&mut || {
        let _ = r
            .acquire_device(&devices, node, AccessMode::W, &host)
            .expect("a write on the device");
        r.release(node, AccessMode::W).expect("release");
        let s = Instant::now();
        r.before_send(&devices, &mut host).expect("staging");
        s.elapsed()
    });
    assert_eq!(r.state().valid().len(), 2);
    let _ = r.evict(node);
    println!("staging (256 MiB, pageable host memory, best of 5):");
    println!(
        "  host → device: replica fetch {:6.2} GB/s, raw cudarc copy {:6.2} GB/s",
        gbs(bytes, h2d),
        gbs(bytes, h2d_raw)
    );
    println!(
        "  device → host: before_send   {:6.2} GB/s, raw cudarc copy {:6.2} GB/s",
        gbs(bytes, d2h),
        gbs(bytes, d2h_raw)
    );
}

fn main() {
    // `cargo test --benches` runs every bench once with `--bench`-less args: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let config = GpuConfig {
        devices: Some(1),
        ..GpuConfig::from_env()
    };
    let gpu = match Gpu::open(&config) {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let dev = Device::open(0).expect("device 0");
    println!(
        "device: {}",
        dev.name().unwrap_or_else(|e| format!("? ({e})"))
    );
    staging(&dev);
    let nb = list("STARLING_GPU_BENCH_NB", &[1024])[0];
    println!("cholesky (GFlop/s = n³/3 / time), tiles of {nb}:");
    for n in list("STARLING_GPU_BENCH_N", &[8192, 16384, 32768]) {
        let flops = (n as f64).powi(3) / 3.0;
        let t_dense = dense(&dev, n);
        let t_tiled = tiled(&gpu, n, nb);
        let s = gpu.stats();
        println!(
            "  n = {n:5}: Starling (CUDA worker) {:8.1} GFlop/s ({:.3} s) | cuSOLVER dense potrf {:8.1} GFlop/s ({:.3} s) | {} device tasks, {} CPU",
            flops / t_tiled.as_secs_f64() / 1e9,
            t_tiled.as_secs_f64(),
            flops / t_dense.as_secs_f64() / 1e9,
            t_dense.as_secs_f64(),
            s.device_tasks,
            s.cpu_tasks
        );
    }
}
