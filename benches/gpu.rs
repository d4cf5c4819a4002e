//! The GPU benchmarks of the CUDA device (feature `cuda`; run on a machine with a GPU):
//!
//! 1. **Staging**: host ↔ device bandwidth of the pipeline's copies of a 256 MiB handle,
//!    pinned (`Layer::pin`) and pinned by the pipeline at its second copy, against raw
//!    `cudarc` copies from pinned and from pageable memory and against a pool of pinned
//!    staging buffers.
//! 2. **Cholesky**: GFlop/s (`n³/3` flops) of the tiled factorization of
//!    `examples/cholesky.rs` with its CUDA codelets (cuSOLVER POTRF, cuBLAS TRSM, SYRK,
//!    GEMM) run by the device pipeline, on 1 and 2 in-process ranks sharing the device
//!    (`STARLING_GPU_BENCH_RANKS`), against cuSOLVER's dense `potrf` of the same matrix
//!    on the same device in the same run; `n` = 8192, 16384, 32768
//!    (`STARLING_GPU_BENCH_N`), tiles of 1024 and 2048 (`STARLING_GPU_BENCH_NB`). Both
//!    are warmed up first. The dense run times the factorization only; Starling's includes
//!    every copy its tasks make; its tiles are pinned before the timer
//!    (`STARLING_GPU_BENCH_PAGEABLE=1` adds unpinned runs). The table gives the bytes each
//!    way during the factorization.
//! 3. **CPUs and the GPU together** (the `dmda` scheduler): the same factorization, warm,
//!    on the GPU alone (`prio`: every task on the device) against `dmda` over the GPU and
//!    every CPU worker (models calibrated into a fresh folder by untimed runs, until each
//!    codelet has its samples on both),
//!    alternating, medians of `STARLING_GPU_BENCH_REPS` (3); and on the CPU workers
//!    alone where that is short (n ≤ 8192). With those rates, the best that adding the
//!    CPUs could give: (GPU + CPUs) / GPU. `STARLING_GPU_BENCH_TOGETHER` (default
//!    `8192:1024,32768:2048`) lists `n:nb`.
//!
//! ```sh
//! cargo bench --features cuda --bench gpu
//! ```
//!
//! `STARLING_GPU_BENCH_STAGING=0` skips section 1.
//!
//! Without a CUDA device it prints "skipped: no CUDA device (<reason>)" and exits 0.

use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use starling::core::AccessMode;
use starling::gpu::blas::Blas;
use starling::gpu::{Device, Gpu, GpuConfig};
use starling::interfaces::Vector;
use starling::{ClusterConfig, RuntimeConfig, SchedPolicy, run_local_with};

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

/// One run of Starling's tiled factorization with the CUDA codelets.
struct Tiled {
    time: Duration,
    /// Bytes up and down during the factorization (between the two `wait_for_all`).
    up: u64,
    down: u64,
    device_tasks: u64,
    cpu_tasks: u64,
    /// Tasks the scheduler ran on CPU workers (`dmda`'s placements; 0 when the device
    /// layer decided).
    sched_cpu: u64,
    /// Seconds spent pinning the tiles (before the timer, as `starpu_malloc` would).
    pin: f64,
}

/// Starling's tiled factorization with the CUDA codelets on `ranks` in-process ranks
/// sharing the device(s); `pin`: the tiles' host memory is pinned first.
fn tiled(gpu: &Arc<Gpu>, ranks: u32, n: usize, nb: usize, pin: bool) -> Tiled {
    tiled_with(gpu, ClusterConfig::from_env(), true, ranks, n, nb, pin)
}

/// [`tiled`] under `config`; `cuda`: the codelets have their CUDA implementations (else
/// the CPU's only).
fn tiled_with(
    gpu: &Arc<Gpu>,
    config: ClusterConfig,
    cuda: bool,
    ranks: u32,
    n: usize,
    nb: usize,
    pin: bool,
) -> Tiled {
    let p = cholesky::Params {
        ranks,
        n,
        nb,
        check: false,
        openblas: false,
    };
    let g = Arc::clone(gpu);
    let out = run_local_with(ranks, config, move |ctx| {
        let gpu = &g;
        let tiles = cholesky::register_tiles(ctx, &p).expect("registering the tiles");
        let codelets = cholesky::Codelets::on(cuda.then_some(gpu));
        let t0 = Instant::now();
        if pin {
            cholesky::pin_tiles(ctx, &p, &tiles, Some(gpu));
        }
        let pin = t0.elapsed().as_secs_f64();
        ctx.wait_for_all();
        ctx.barrier();
        let before = gpu.stats();
        let on_cpu = |ctx: &starling::Context| -> u64 {
            ctx.sched_stats().workers.iter().map(|w| w.tasks).sum()
        };
        let cpu_before = on_cpu(ctx);
        let start = Instant::now();
        cholesky::factorize(ctx, &p, &tiles, &codelets).expect("an insert");
        ctx.wait_for_all();
        ctx.barrier();
        let time = start.elapsed();
        let after = gpu.stats();
        let sched_cpu = on_cpu(ctx) - cpu_before;
        ctx.barrier();
        Tiled {
            time,
            up: after.bytes_to_device - before.bytes_to_device,
            down: after.bytes_to_host - before.bytes_to_host,
            device_tasks: after.device_tasks - before.device_tasks,
            cpu_tasks: after.cpu_tasks - before.cpu_tasks,
            sched_cpu,
            pin,
        }
    })
    .expect("a clean shutdown");
    gpu.clear();
    out.into_iter()
        .max_by(|a, b| a.time.cmp(&b.time))
        .expect("one rank at least")
}

fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Host ↔ device bandwidth: the pipeline's copies of a pinned handle and of a pageable
/// one, against raw `cudarc` copies from pinned and from pageable memory.
fn staging(dev: &Device, gpu: &Arc<Gpu>) -> (f64, f64, f64, f64) {
    let len = 32 << 20; // 256 MiB of f64
    let bytes = len * 8;
    let best = |f: &mut dyn FnMut() -> Duration| (0..5).map(|_| f()).min().unwrap_or_default();
    let mut host = vec![1.0f64; len];
    let mut raw = dev.alloc_zeros::<f64>(len).expect("a device buffer");
    let ctx = dev.context();
    // SAFETY: a fresh page-locked allocation, written before it is read.
    let mut pinned = unsafe { ctx.alloc_pinned::<f64>(len) }.expect("pinned memory");
    let stream = dev.stream();
    let h2d_pinned = best(&mut || {
        let s = Instant::now();
        stream.memcpy_htod(&pinned, &mut raw).expect("upload");
        stream.synchronize().expect("sync");
        s.elapsed()
    });
    let d2h_pinned = best(&mut || {
        let s = Instant::now();
        stream.memcpy_dtoh(&raw, &mut pinned).expect("download");
        stream.synchronize().expect("sync");
        s.elapsed()
    });
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
    // The alternative to pinning a handle's own memory: a pool of two pinned 8 MiB staging
    // buffers, the host data copied into one while the other's copy to the device runs.
    let chunk = 1 << 20;
    // SAFETY: fresh page-locked allocations, written before they are read.
    let mut stage = unsafe {
        [
            ctx.alloc_pinned::<f64>(chunk),
            ctx.alloc_pinned::<f64>(chunk),
        ]
    }
    .map(|b| b.expect("pinned memory"));
    let h2d_pool = best(&mut || {
        let s = Instant::now();
        for (k, part) in host.chunks(chunk).enumerate() {
            let b = &mut stage[k % 2];
            // (waits for this buffer's previous copy)
            b.as_mut_slice().expect("a staging buffer")[..part.len()].copy_from_slice(part);
            let mut dst = raw.slice_mut(k * chunk..k * chunk + part.len());
            stream.memcpy_htod(&*b, &mut dst).expect("upload");
        }
        stream.synchronize().expect("sync");
        s.elapsed()
    });
    println!(
        "  host → device through a pool of pinned staging buffers (2 × 8 MiB): {:6.2} GB/s",
        gbs(bytes, h2d_pool)
    );
    drop(host);
    // The pipeline: a device task reading a fresh host value (one upload), and a host
    // read after a device write (one download), of a 256 MiB vector.
    let mut rows = Vec::new();
    for pin in [true, false] {
        let g = Arc::clone(gpu);
        let (up, down) = run_local_with(1, ClusterConfig::from_env(), move |ctx| {
            let noop = g.cuda_codelet("noop", |_| Ok(()));
            let v = ctx.register(Vector::from_vec(vec![1.0f64; len]));
            if pin {
                g.pin(&v.host_ref()).expect("pinning");
            }
            let mut up = Duration::MAX;
            let mut down = Duration::MAX;
            // A pageable handle is pinned by the pipeline at its second copy: its first
            // copy each way is the pageable one, the best of the rest the pinned one.
            for round in 0..6 {
                {
                    // A host write: the device copy is stale.
                    let w = ctx.acquire(&v, AccessMode::W);
                    w.get_mut().as_mut_slice()[0] = 2.0;
                }
                ctx.wait_for_all();
                let s = Instant::now();
                ctx.task(&noop).r(&v).submit();
                ctx.wait_for_all();
                let u = s.elapsed();
                ctx.task(&noop).rw(&v).submit();
                ctx.wait_for_all();
                let s = Instant::now();
                drop(ctx.acquire(&v, AccessMode::R));
                let d = s.elapsed();
                if pin || round > 0 {
                    up = up.min(u);
                    down = down.min(d);
                } else {
                    println!(
                        "  pageable handle, first copies: up {:6.2} GB/s, down {:6.2} GB/s",
                        gbs(bytes, u),
                        gbs(bytes, d)
                    );
                }
            }
            (up, down)
        })
        .expect("a clean shutdown")
        .remove(0);
        rows.push((gbs(bytes, up), gbs(bytes, down)));
    }
    gpu.clear();
    println!("staging (256 MiB, best of 5):");
    println!(
        "  host → device: pipeline pinned {:6.2} GB/s, auto-pinned {:6.2} GB/s | raw cudarc pinned {:6.2} GB/s, pageable {:6.2} GB/s",
        rows[0].0,
        rows[1].0,
        gbs(bytes, h2d_pinned),
        gbs(bytes, h2d_raw)
    );
    println!(
        "  device → host: pipeline pinned {:6.2} GB/s, auto-pinned {:6.2} GB/s | raw cudarc pinned {:6.2} GB/s, pageable {:6.2} GB/s",
        rows[0].1,
        rows[1].1,
        gbs(bytes, d2h_pinned),
        gbs(bytes, d2h_raw)
    );
    (
        rows[0].0 / gbs(bytes, h2d_pinned),
        rows[0].1 / gbs(bytes, d2h_pinned),
        rows[1].0 / gbs(bytes, h2d_pinned),
        rows[1].1 / gbs(bytes, d2h_pinned),
    )
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
    if std::env::var("STARLING_GPU_BENCH_STAGING").as_deref() != Ok("0") {
        let (up, down, up_pageable, down_pageable) = staging(&dev, &gpu);
        println!(
            "| staging | pinned handle / raw pinned copy: up {:.0} %, down {:.0} % | auto-pinned handle / raw pinned copy: up {:.0} %, down {:.0} % |",
            100.0 * up,
            100.0 * down,
            100.0 * up_pageable,
            100.0 * down_pageable
        );
    }
    // Warm-up, untimed: cuSOLVER's first call and each compute stream's first cuBLAS
    // and cuSOLVER handles cost hundreds of milliseconds.
    let _ = dense(&dev, 4096);
    let _ = tiled(&gpu, 1, 8192, 1024, true);
    let nbs = list("STARLING_GPU_BENCH_NB", &[1024, 2048]);
    let ranks = list("STARLING_GPU_BENCH_RANKS", &[1]);
    println!(
        "cholesky (GFlop/s = n³/3 / time; Starling's time includes every copy its tasks make):"
    );
    println!(
        "| n | nb | ranks | pinned | Starling GFlop/s | cuSOLVER dense GFlop/s | ratio | MB up | MB down | device tasks | CPU tasks | pin s |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for n in list("STARLING_GPU_BENCH_N", &[8192, 16384, 32768]) {
        let flops = (n as f64).powi(3) / 3.0;
        let t_dense = dense(&dev, n);
        let g_dense = flops / t_dense.as_secs_f64() / 1e9;
        for &nb in &nbs {
            if n % nb != 0 || n / nb < 2 {
                continue;
            }
            for &r in &ranks {
                for pin in [true, false] {
                    if !pin && std::env::var_os("STARLING_GPU_BENCH_PAGEABLE").is_none() {
                        continue;
                    }
                    let t = tiled(&gpu, r as u32, n, nb, pin);
                    let g = flops / t.time.as_secs_f64() / 1e9;
                    println!(
                        "| {n} | {nb} | {r} | {} | {g:.0} | {g_dense:.0} | {:.1} % | {:.0} | {:.0} | {} | {} | {:.2} |",
                        if pin { "yes" } else { "no" },
                        100.0 * g / g_dense,
                        t.up as f64 / 1e6,
                        t.down as f64 / 1e6,
                        t.device_tasks,
                        t.cpu_tasks,
                        t.pin
                    );
                }
            }
        }
    }
    together(&gpu);
}

/// Whether the models under `home` hold, for each of the four codelets, a calibrated
/// history on the CPU and on the device.
fn calibrated(home: &std::path::Path) -> bool {
    use starling::perfmodel::{CALIBRATION_SAMPLES, machine_file};
    use starling::{Arch, Models};
    let Ok(m) = Models::load(&machine_file(home)) else {
        return false;
    };
    ["potrf", "trsm", "syrk", "gemm"].iter().all(|name| {
        m.codelets.get(*name).is_some_and(|c| {
            [Arch::Cpu, Arch::Device].iter().all(|&arch| {
                c.history
                    .iter()
                    .any(|((a, _), h)| *a == arch && h.count >= CALIBRATION_SAMPLES)
            })
        })
    })
}

/// Section 3: `dmda` over the GPU and the CPU workers against the GPU alone (and the CPU
/// workers alone where that is short), warm, alternating, medians.
fn together(gpu: &Arc<Gpu>) {
    let reps = list("STARLING_GPU_BENCH_REPS", &[3])
        .first()
        .map_or(3, |&r| r.max(1));
    let sizes: Vec<(usize, usize)> = std::env::var("STARLING_GPU_BENCH_TOGETHER")
        .unwrap_or_else(|_| "8192:1024,32768:2048".into())
        .split(',')
        .filter_map(|p| {
            let (n, nb) = p.split_once(':')?;
            Some((n.trim().parse().ok()?, nb.trim().parse().ok()?))
        })
        .collect();
    let home = std::env::temp_dir().join(format!("starling-gpu-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let base = ClusterConfig::from_env();
    let with = |sched: SchedPolicy| ClusterConfig {
        runtime: RuntimeConfig {
            sched,
            model_home: Some(home.clone()),
            ..base.runtime.clone()
        },
        ..base.clone()
    };
    let gflops = |n: usize, t: &Tiled| (n as f64).powi(3) / 3.0 / t.time.as_secs_f64() / 1e9;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "cpus and gpu together ({} CPU workers; GFlop/s, medians of {reps}, alternating; dmda's models calibrated by untimed runs first):",
        base.runtime.workers
    );
    println!(
        "| together n | nb | GPU alone | dmda GPU + CPUs | dmda / GPU alone | dmda tasks on CPUs | CPUs alone | bound (GPU + CPUs) / GPU | calibration runs s |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (n, nb) in sizes {
        if n % nb != 0 || n / nb < 2 {
            continue;
        }
        // Until every codelet has its samples on both archs (a run has only n / nb
        // POTRFs): an uncalibrated arch would still be given tasks in the timed runs.
        let mut calibration = 0.0;
        for _ in 0..6 {
            let t = tiled_with(gpu, with(SchedPolicy::Dmda), true, 1, n, nb, true);
            calibration += t.time.as_secs_f64();
            if calibrated(&home) {
                break;
            }
        }
        let (mut alone, mut dmda, mut on_cpu) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            alone.push(gflops(
                n,
                &tiled_with(gpu, with(SchedPolicy::Prio), true, 1, n, nb, true),
            ));
            let t = tiled_with(gpu, with(SchedPolicy::Dmda), true, 1, n, nb, true);
            dmda.push(gflops(n, &t));
            on_cpu.push(t.sched_cpu as f64);
        }
        let (alone, dmda) = (median(alone), median(dmda));
        let cpus = (n <= 8192).then(|| {
            gflops(
                n,
                &tiled_with(gpu, with(SchedPolicy::Prio), false, 1, n, nb, false),
            )
        });
        println!(
            "| {n} | {nb} | {alone:.0} | {dmda:.0} | {:.3} | {:.0} | {} | {} | {:.2} |",
            dmda / alone,
            median(on_cpu),
            cpus.map_or_else(|| "-".into(), |c| format!("{c:.0}")),
            cpus.map_or_else(|| "-".into(), |c| format!("{:.3}", (alone + c) / alone)),
            calibration
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}
