//! CUDA codelets in the runtime. Without a device, opening the GPU is a typed error; with
//! one, a tiled Cholesky factorization and a stencil run their CUDA implementations and
//! match the CPU.

use std::sync::Arc;

use starling_core::AccessMode;
use starling_gpu::runtime::GpuConfig;
use starling_gpu::{Gpu, Policy, probe, tiles};
use starling_std::interfaces::{Matrix, Variable};
use starling_std::{Codelet, run_local};

/// The GPU to test on, or `None` after printing why the test is skipped.
fn gpu(policy: Policy) -> Option<Arc<Gpu>> {
    // One device, so that the byte counts below do not depend on the machine.
    let config = GpuConfig {
        devices: Some(1),
        policy,
        ..GpuConfig::default()
    };
    match Gpu::open(&config) {
        Ok(g) => Some(g),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

#[test]
fn opening_the_gpu_without_a_device_is_the_probe_error() {
    match (probe(), Gpu::open(&GpuConfig::default())) {
        (Ok(info), Ok(g)) => assert_eq!(g.device_count(), info.count()),
        (Err(p), Err(o)) => assert_eq!(p, o),
        (p, o) => panic!("probe {p:?} but open {o:?}"),
    }
}

mod common;
use common::{cholesky_cpu, spd, tile};

/// The four tile codelets with only CUDA implementations.
fn codelets(gpu: &Arc<Gpu>) -> [Codelet; 4] {
    [
        gpu.cuda_codelet("potrf", tiles::potrf),
        gpu.cuda_codelet("trsm", tiles::trsm),
        gpu.cuda_codelet("syrk", tiles::syrk),
        gpu.cuda_codelet("gemm", tiles::gemm),
    ]
}

#[test]
fn a_tiled_cholesky_on_the_device_matches_the_cpu() {
    let Some(gpu) = gpu(Policy::PreferDevice) else {
        return;
    };
    if !(probe::libraries().cublas && probe::libraries().cusolver) {
        println!("skipped: no cuBLAS/cuSOLVER");
        return;
    }
    let (nt, nb) = (4, 32);
    let n = nt * nb;
    let a = spd(n);
    let want = cholesky_cpu(&a, n);
    let g = Arc::clone(&gpu);
    let got = run_local(1, move |ctx| {
        let [potrf, trsm, syrk, gemm] = codelets(&g);
        let tiles: Vec<Vec<_>> = (0..nt)
            .map(|m| {
                (0..=m)
                    .map(|k| ctx.register(Matrix::new(nb, nb, nb, tile(&a, n, nb, m, k)).unwrap()))
                    .collect()
            })
            .collect();
        for k in 0..nt {
            ctx.task(&potrf).rw(&tiles[k][k]).submit();
            for m in k + 1..nt {
                ctx.task(&trsm).r(&tiles[k][k]).rw(&tiles[m][k]).submit();
            }
            for j in k + 1..nt {
                ctx.task(&syrk).r(&tiles[j][k]).rw(&tiles[j][j]).submit();
                for m in j + 1..nt {
                    ctx.task(&gemm)
                        .r(&tiles[m][k])
                        .r(&tiles[j][k])
                        .rw(&tiles[m][j])
                        .submit();
                }
            }
        }
        ctx.wait_for_all();
        let mut l = vec![0.0; n * n];
        for (m, row) in tiles.iter().enumerate() {
            for (k, t) in row.iter().enumerate() {
                let t = ctx.acquire(t, AccessMode::R);
                let t = t.get();
                for j in 0..nb {
                    for i in 0..nb {
                        if m > k || i >= j {
                            l[(m * nb + i) + (k * nb + j) * n] = t.get(i, j);
                        }
                    }
                }
            }
        }
        l
    })
    .unwrap()
    .remove(0);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-10 * (1.0 + w.abs()), "{g} vs {w}");
    }
    let stats = gpu.stats();
    // 4 potrf + 6 trsm + 6 syrk + 4 gemm.
    assert_eq!(stats.device_tasks, 20);
    assert_eq!(stats.cpu_tasks, 0);
    // Each of the 10 tiles goes up once (later reads hit the device copy) and comes down
    // once, when the host reads it at the end (no write-through).
    assert_eq!(stats.bytes_to_device, 10 * (nb * nb * 8) as u64);
    assert_eq!(stats.bytes_to_host, 10 * (nb * nb * 8) as u64);
}

#[test]
fn a_host_write_between_device_tasks_is_seen_by_the_device() {
    let Some(gpu) = gpu(Policy::PreferDevice) else {
        return;
    };
    let g = Arc::clone(&gpu);
    let got = run_local(1, move |ctx| {
        // c ← (c + l + r + u + d) / 5 on the device; the CPU implementation is the same.
        let cpu = |b: &mut starling_std::Buffers<'_>| {
            let v: f64 = (0..5).map(|i| b.r::<Variable<f64>>(i).get()).sum::<f64>() / 5.0;
            b.w::<Variable<f64>>(0).set(v);
        };
        let stencil = g.codelet("stencil5", cpu, tiles::stencil5_cell);
        let add_one = Codelet::new("add_one", |b| {
            let v = b.r::<Variable<f64>>(0).get();
            b.w::<Variable<f64>>(0).set(v + 1.0);
        });
        let cells: Vec<_> = (0..5)
            .map(|i| ctx.register(Variable::new(i as f64)))
            .collect();
        let sweep = |ctx: &starling_std::Context| {
            ctx.task(&stencil)
                .rw(&cells[0])
                .r(&cells[1])
                .r(&cells[2])
                .r(&cells[3])
                .r(&cells[4])
                .submit();
        };
        sweep(ctx);
        // A CPU task writes a neighbour the device already holds.
        ctx.task(&add_one).rw(&cells[4]).submit();
        sweep(ctx);
        ctx.wait_for_all();
        let acquired = ctx.acquire(&cells[0], AccessMode::R);
        acquired.get().get()
    })
    .unwrap()
    .remove(0);
    let first = (0.0 + 1.0 + 2.0 + 3.0 + 4.0) / 5.0;
    assert_eq!(got, (first + 1.0 + 2.0 + 3.0 + 5.0) / 5.0);
    assert_eq!(gpu.stats().device_tasks, 2);
}
