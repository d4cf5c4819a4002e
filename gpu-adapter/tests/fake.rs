//! The device pipeline on the fake device (no GPU needed): data that stay on the device,
//! the host-access hooks, asynchronous tasks that hold no CPU worker, prefetch, eviction
//! with write-back, staging before a send, failures and the CPU fallback, several ranks
//! and several devices. Each test asserts the traffic, not only the values.

use core::time::Duration;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use starling_core::{AccessMode, Rank, Tag};
use starling_gpu::GpuError;
use starling_gpu::fake::{Fake, FakeConfig, FakeGpu, FakeView};
use starling_std::interfaces::{Matrix, Variable};
use starling_std::{ClusterConfig, Codelet, Context, Handle, run_local, run_local_with};

mod common;
use common::{cholesky_cpu, spd, tile};

/// The order of a square tile.
fn order(v: &FakeView<'_>) -> usize {
    (v.data.len() as f64).sqrt() as usize
}

/// The four tile kernels, on the fake device (plain loops on its buffers).
fn fake_codelets(gpu: &Arc<FakeGpu>) -> [Codelet; 4] {
    let potrf = gpu.codelet("potrf", None, |d| {
        let n = order(&d[0]);
        let a = &mut *d[0].data;
        for j in 0..n {
            let s = a[j + j * n] - (0..j).map(|k| a[j + k * n] * a[j + k * n]).sum::<f64>();
            if s <= 0.0 {
                return Err(GpuError::NotPositiveDefinite(j as i32 + 1));
            }
            a[j + j * n] = s.sqrt();
            for i in j + 1..n {
                let s = a[i + j * n] - (0..j).map(|k| a[i + k * n] * a[j + k * n]).sum::<f64>();
                a[i + j * n] = s / a[j + j * n];
            }
        }
        Ok(())
    });
    // b ← b·L⁻ᵀ
    let trsm = gpu.codelet("trsm", None, |d| {
        let n = order(&d[0]);
        let [l, b] = d else { unreachable!() };
        for i in 0..n {
            for j in 0..n {
                let s = b.data[i + j * n]
                    - (0..j)
                        .map(|k| b.data[i + k * n] * l.data[j + k * n])
                        .sum::<f64>();
                b.data[i + j * n] = s / l.data[j + j * n];
            }
        }
        Ok(())
    });
    // c ← c − a·aᵀ (lower)
    let syrk = gpu.codelet("syrk", None, |d| {
        let n = order(&d[0]);
        let [a, c] = d else { unreachable!() };
        for j in 0..n {
            for i in j..n {
                let s: f64 = (0..n).map(|k| a.data[i + k * n] * a.data[j + k * n]).sum();
                c.data[i + j * n] -= s;
            }
        }
        Ok(())
    });
    // c ← c − a·bᵀ
    let gemm = gpu.codelet("gemm", None, |d| {
        let n = order(&d[0]);
        let [a, b, c] = d else { unreachable!() };
        for j in 0..n {
            for i in 0..n {
                let s: f64 = (0..n).map(|k| a.data[i + k * n] * b.data[j + k * n]).sum();
                c.data[i + j * n] -= s;
            }
        }
        Ok(())
    });
    [potrf, trsm, syrk, gemm]
}

type Tiles = Vec<Vec<Handle<Matrix<f64>>>>;

fn factorize(ctx: &Context, cl: &[Codelet; 4], tiles: &Tiles) {
    let [potrf, trsm, syrk, gemm] = cl;
    let nt = tiles.len();
    for k in 0..nt {
        ctx.task(potrf).rw(&tiles[k][k]).submit();
        for m in k + 1..nt {
            ctx.task(trsm).r(&tiles[k][k]).rw(&tiles[m][k]).submit();
        }
        for j in k + 1..nt {
            ctx.task(syrk).r(&tiles[j][k]).rw(&tiles[j][j]).submit();
            for m in j + 1..nt {
                ctx.task(gemm)
                    .r(&tiles[m][k])
                    .r(&tiles[j][k])
                    .rw(&tiles[m][j])
                    .submit();
            }
        }
    }
}

fn gather(ctx: &Context, tiles: &Tiles, n: usize, nb: usize) -> Vec<f64> {
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
}

fn assert_close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-9 * (1.0 + w.abs()), "{g} vs {w}");
    }
}

#[test]
fn a_tiled_cholesky_moves_each_tile_up_once_and_down_once_at_the_end() {
    let gpu = Fake::open(FakeConfig::default()).unwrap();
    let (nt, nb) = (4, 8);
    let n = nt * nb;
    let a = spd(n);
    let want = cholesky_cpu(&a, n);
    let g = Arc::clone(&gpu);
    let (got, down_before_gather) = run_local(1, move |ctx| {
        let cl = fake_codelets(&g);
        let tiles: Tiles = (0..nt)
            .map(|m| {
                (0..=m)
                    .map(|k| ctx.register(Matrix::new(nb, nb, nb, tile(&a, n, nb, m, k)).unwrap()))
                    .collect()
            })
            .collect();
        factorize(ctx, &cl, &tiles);
        ctx.wait_for_all();
        let down = g.stats().bytes_to_host;
        (gather(ctx, &tiles, n, nb), down)
    })
    .unwrap()
    .remove(0);
    assert_close(&got, &want);
    let s = gpu.stats();
    let tile_bytes = (nb * nb * 8) as u64;
    // 4 potrf + 6 trsm + 6 syrk + 4 gemm, all on the device.
    assert_eq!((s.device_tasks, s.cpu_tasks, s.failed), (20, 0, 0));
    // Ten tiles: each goes up once, and comes down once, when the host reads it.
    assert_eq!(s.bytes_to_device, 10 * tile_bytes);
    assert_eq!(
        down_before_gather, 0,
        "nothing comes down during the factorization"
    );
    assert_eq!(s.bytes_to_host, 10 * tile_bytes);
    assert_eq!(
        gpu.backend()
            .log()
            .uploads
            .load(core::sync::atomic::Ordering::Relaxed),
        10
    );
}

#[test]
fn a_send_of_a_device_written_tile_stages_exactly_that_tile() {
    let gpu = Fake::open(FakeConfig::default()).unwrap();
    let g = Arc::clone(&gpu);
    let nb = 16;
    let got = run_local(2, move |ctx| {
        let scale = g.codelet("scale", None, |d| {
            for x in d[0].data.iter_mut() {
                *x *= 3.0;
            }
            Ok(())
        });
        let a = ctx.register(Matrix::new(nb, nb, nb, vec![1.0; nb * nb]).unwrap());
        let b = ctx.register(Matrix::new(nb, nb, nb, vec![2.0; nb * nb]).unwrap());
        if ctx.rank() == Rank(0) {
            ctx.task(&scale).rw(&a).submit();
            ctx.task(&scale).rw(&b).submit();
            ctx.send(&a, Rank(1), Tag(7)).wait().unwrap();
            ctx.wait_for_all();
            // Before shutdown, which brings every device-only copy home.
            g.stats().bytes_to_host as f64
        } else {
            ctx.recv(&a, Rank(0), Tag(7)).wait().unwrap();
            ctx.acquire(&a, AccessMode::R).get().get(3, 4)
        }
    })
    .unwrap();
    assert_eq!(got[1], 3.0);
    let s = gpu.stats();
    assert_eq!(s.device_tasks, 2);
    // Only `a` came down (to be sent); `b` stayed on the device until shutdown.
    assert_eq!(got[0], (nb * nb * 8) as f64);
    assert_eq!(s.bytes_to_host, 2 * (nb * nb * 8) as u64);
}

#[test]
fn a_device_task_holds_no_cpu_worker() {
    let gpu = Fake::open(FakeConfig {
        kernel_time: Duration::from_millis(300),
        ..FakeConfig::default()
    })
    .unwrap();
    let g = Arc::clone(&gpu);
    let mut config = ClusterConfig::default();
    config.runtime.workers = 1;
    let times = run_local_with(1, config, move |ctx| {
        let marks = Arc::new(Mutex::new(Vec::new()));
        let slow = g.codelet("slow", None, |_| Ok(()));
        let (m1, m2) = (Arc::clone(&marks), Arc::clone(&marks));
        let cpu = Codelet::new("cpu", move |b| {
            b.w::<Variable<f64>>(0).set(1.0);
            m1.lock().unwrap().push(("cpu", Instant::now()));
        });
        let x = ctx.register(Variable::new(0.0));
        let y = ctx.register(Variable::new(0.0));
        let start = Instant::now();
        ctx.task(&slow)
            .rw(&x)
            .callback(move || m2.lock().unwrap().push(("device", Instant::now())))
            .submit();
        ctx.task(&cpu).rw(&y).submit();
        ctx.wait_for_all();
        let m = marks.lock().unwrap().clone();
        m.into_iter()
            .map(|(w, t)| (w, t - start))
            .collect::<Vec<_>>()
    })
    .unwrap()
    .remove(0);
    // The one worker ran the CPU task while the device task was in flight.
    assert_eq!(times[0].0, "cpu", "{times:?}");
    assert!(times[0].1 < Duration::from_millis(250), "{times:?}");
    assert_eq!(times[1].0, "device");
}

#[test]
fn inputs_are_copied_while_earlier_tasks_compute() {
    let gpu = Fake::open(FakeConfig {
        kernel_time: Duration::from_millis(40),
        latency: Duration::from_millis(5),
        window: 4,
        streams: 1,
        ..FakeConfig::default()
    })
    .unwrap();
    let g = Arc::clone(&gpu);
    run_local(1, move |ctx| {
        let touch = g.codelet("touch", None, |d| {
            d[1].data[0] += d[0].data[0];
            Ok(())
        });
        let xs: Vec<_> = (0..4)
            .map(|i| ctx.register(Variable::new(f64::from(i))))
            .collect();
        let ys: Vec<_> = (0..4).map(|_| ctx.register(Variable::new(0.0))).collect();
        for (x, y) in xs.iter().zip(&ys) {
            ctx.task(&touch).r(x).rw(y).submit();
        }
        ctx.wait_for_all();
        for (i, y) in ys.iter().enumerate() {
            assert_eq!(ctx.acquire(y, AccessMode::R).get().get(), i as f64);
        }
    })
    .unwrap();
    let log = gpu.backend().log();
    assert!(
        log.overlapped_uploads
            .load(core::sync::atomic::Ordering::Relaxed)
            > 0,
        "no upload overlapped a kernel"
    );
}

#[test]
fn a_full_device_evicts_and_writes_back_and_loses_nothing() {
    let nb = 8;
    let tile_bytes = nb * nb * 8;
    // Room for three tiles; each task uses two.
    let gpu = Fake::open(FakeConfig {
        memory: 3 * tile_bytes,
        ..FakeConfig::default()
    })
    .unwrap();
    let g = Arc::clone(&gpu);
    let got = run_local(1, move |ctx| {
        let inc = g.codelet("inc", None, |d| {
            for x in d[0].data.iter_mut() {
                *x += 1.0;
            }
            Ok(())
        });
        let acc = g.codelet("acc", None, |d| {
            let s: f64 = d[0].data.iter().sum();
            d[1].data[0] += s;
            Ok(())
        });
        let ts: Vec<_> = (0..6)
            .map(|i| ctx.register(Matrix::new(nb, nb, nb, vec![i as f64; nb * nb]).unwrap()))
            .collect();
        let sums: Vec<_> = (0..6).map(|_| ctx.register(Variable::new(0.0))).collect();
        for t in &ts {
            ctx.task(&inc).rw(t).submit();
        }
        for (t, s) in ts.iter().zip(&sums) {
            ctx.task(&acc).r(t).rw(s).submit();
        }
        ctx.wait_for_all();
        let tiles: Vec<f64> = ts
            .iter()
            .map(|t| ctx.acquire(t, AccessMode::R).get().get(1, 1))
            .collect();
        let sums: Vec<f64> = sums
            .iter()
            .map(|s| ctx.acquire(s, AccessMode::R).get().get())
            .collect();
        (tiles, sums)
    })
    .unwrap()
    .remove(0);
    for i in 0..6 {
        assert_eq!(got.0[i], i as f64 + 1.0);
        assert_eq!(got.1[i], (i as f64 + 1.0) * (nb * nb) as f64);
    }
    let s = gpu.stats();
    assert!(s.evictions > 0 && s.write_backs > 0, "{s:?}");
}

#[test]
fn a_host_write_between_device_tasks_is_seen_by_the_device() {
    let gpu = Fake::open(FakeConfig::default()).unwrap();
    let g = Arc::clone(&gpu);
    let got = run_local(1, move |ctx| {
        let double = g.codelet("double", None, |d| {
            d[0].data[0] *= 2.0;
            Ok(())
        });
        let add_one = Codelet::new("add_one", |b| {
            let v = b.r::<Variable<f64>>(0).get();
            b.w::<Variable<f64>>(0).set(v + 1.0);
        });
        let x = ctx.register(Variable::new(1.0));
        ctx.task(&double).rw(&x).submit(); // 2, on the device only
        ctx.task(&add_one).rw(&x).submit(); // 3: the CPU task brings it home first
        ctx.task(&double).rw(&x).submit(); // 6: the device sees the host write
        ctx.wait_for_all();
        ctx.unregister(x).get()
    })
    .unwrap()
    .remove(0);
    assert_eq!(got, 6.0);
    assert_eq!(gpu.stats().device_tasks, 2);
}

#[test]
fn a_device_failure_fails_the_run_unless_falling_back_is_asked_for() {
    for fallback in [false, true] {
        let gpu = Fake::open(FakeConfig {
            fallback,
            ..FakeConfig::default()
        })
        .unwrap();
        let g = Arc::clone(&gpu);
        let out = run_local(1, move |ctx| {
            let cpu: Arc<starling_std::Kernel> = Arc::new(|b: &mut starling_std::Buffers<'_>| {
                let v = b.r::<Variable<f64>>(0).get();
                b.w::<Variable<f64>>(0).set(v + 10.0);
            });
            let broken = g.codelet("broken", Some(cpu), |_| {
                Err(GpuError::Unsupported("this kernel always fails"))
            });
            let x = ctx.register(Variable::new(1.0));
            ctx.task(&broken).rw(&x).submit();
            ctx.wait_for_all();
            ctx.unregister(x).get()
        });
        let s = gpu.stats();
        if fallback {
            assert_eq!(out.unwrap(), vec![11.0]);
            assert_eq!((s.fallbacks, s.cpu_tasks, s.failed), (1, 1, 0));
        } else {
            let err = out.unwrap_err();
            assert!(format!("{err}").contains("always fails"), "{err}");
            assert_eq!((s.fallbacks, s.failed), (0, 1));
        }
    }
}

#[test]
fn two_ranks_share_a_device_and_two_devices_both_work() {
    for devices in [1, 2] {
        let gpu = Fake::open(FakeConfig {
            devices,
            ..FakeConfig::default()
        })
        .unwrap();
        let (nt, nb) = (4, 4);
        let n = nt * nb;
        let a = spd(n);
        let want = cholesky_cpu(&a, n);
        for ranks in [1, 2] {
            let g = Arc::clone(&gpu);
            let a = a.clone();
            let got = run_local(ranks, move |ctx| {
                // Each rank factorizes its own copy of the matrix on the shared device(s).
                let cl = fake_codelets(&g);
                let tiles: Tiles = (0..nt)
                    .map(|m| {
                        (0..=m)
                            .map(|k| {
                                ctx.register(
                                    Matrix::new(nb, nb, nb, tile(&a, n, nb, m, k)).unwrap(),
                                )
                            })
                            .collect()
                    })
                    .collect();
                factorize(ctx, &cl, &tiles);
                ctx.wait_for_all();
                gather(ctx, &tiles, n, nb)
            })
            .unwrap();
            for l in &got {
                assert_close(l, &want);
            }
        }
        let per_device = gpu.backend().log().kernels_per_device();
        assert_eq!(per_device.len(), devices);
        assert!(per_device.iter().all(|&k| k > 0), "{per_device:?}");
    }
}

#[test]
fn a_large_device_value_goes_to_another_rank_of_the_process_without_main_memory() {
    let gpu = Fake::open(FakeConfig::default()).unwrap();
    let g = Arc::clone(&gpu);
    // 512 KiB: above the size from which sends read in place (256 KiB).
    let nb = 256;
    let tile_bytes = (nb * nb * 8) as u64;
    let got = run_local(2, move |ctx| {
        let scale = g.codelet("scale", None, |d| {
            for x in d[0].data.iter_mut() {
                *x *= 3.0;
            }
            Ok(())
        });
        let a = ctx.register(Matrix::new(nb, nb, nb, vec![1.0; nb * nb]).unwrap());
        if ctx.rank() == Rank(0) {
            ctx.task(&scale).rw(&a).submit(); // 3, on the device only
            ctx.send(&a, Rank(1), Tag(9)).wait().unwrap();
            ctx.wait_for_all();
            (0.0, 0)
        } else {
            ctx.recv(&a, Rank(0), Tag(9)).wait().unwrap();
            ctx.task(&scale).rw(&a).submit(); // 9, on the device copy it received
            ctx.wait_for_all();
            let moved = g.stats().bytes_to_host + g.stats().bytes_to_device;
            let v = ctx.acquire(&a, AccessMode::R).get().get(7, 9);
            (v, moved)
        }
    })
    .unwrap();
    assert_eq!(got[1].0, 9.0);
    let s = gpu.stats();
    assert_eq!(s.device_values, 1, "{s:?}");
    // Up once (rank 0's first read), nothing else until rank 1 reads on the host.
    assert_eq!(got[1].1, tile_bytes as usize as u64, "{s:?}");
    assert_eq!(
        gpu.backend()
            .log()
            .device_copies
            .load(core::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// The `dmda` scheduler with the fake device: models saved under a fresh folder, one rank
/// of `workers` CPU workers.
mod dmda {
    use std::path::{Path, PathBuf};
    use std::sync::mpsc;

    use starling_std::interfaces::Vector;
    use starling_std::perfmodel::{CALIBRATION_SAMPLES, Footprint, History, machine_file};
    use starling_std::{Arch, Kernel, Models, RuntimeConfig, SchedPolicy};

    use super::*;

    fn fresh_dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("starling-fake-dmda-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Calibrated histories of `name` on data of `sizes`: `mean` seconds per arch.
    fn preload(home: &Path, name: &str, sizes: &[usize], means: &[(Arch, f64)]) {
        let mut m = Models::default();
        let fp = Footprint::of(sizes.iter().copied());
        let cm = m.codelets.entry(name.to_owned()).or_default();
        for &(arch, mean) in means {
            let h = History {
                bytes: fp.bytes,
                count: CALIBRATION_SAMPLES,
                mean,
                m2: 0.0,
            };
            cm.history.insert((arch, fp.hash), h);
        }
        m.save(&machine_file(home)).unwrap();
    }

    fn config(workers: usize, home: &Path) -> ClusterConfig {
        ClusterConfig {
            runtime: RuntimeConfig {
                workers,
                sched: SchedPolicy::Dmda,
                model_home: Some(home.to_path_buf()),
                ..RuntimeConfig::default()
            },
            ..ClusterConfig::default()
        }
    }

    /// A codelet doubling the last access (a `Vector<f64>`), on the CPU and the device.
    fn double(gpu: &Arc<FakeGpu>) -> Codelet {
        let cpu: Arc<Kernel> = Arc::new(|b| {
            let last = b.len() - 1;
            for x in b.w::<Vector<f64>>(last).as_mut_slice() {
                *x *= 2.0;
            }
        });
        gpu.codelet("double", Some(cpu), |d| {
            let last = d.len() - 1;
            for x in d[last].data.iter_mut() {
                *x *= 2.0;
            }
            Ok(())
        })
    }

    #[test]
    fn a_chain_goes_where_the_models_say_it_finishes_first() {
        // (device s, CPU s): the device 20× faster, then 20× slower.
        for (device, cpu, on_device) in [(1e-3, 20e-3, true), (20e-3, 1e-3, false)] {
            let home = fresh_dir(if on_device { "dev" } else { "cpu" });
            preload(
                &home,
                "double",
                &[128],
                &[(Arch::Device, device), (Arch::Cpu, cpu)],
            );
            let gpu = Fake::open(FakeConfig::default()).unwrap();
            let codelet = double(&gpu);
            let traced = ClusterConfig {
                trace_file: Some(home.join("trace/")),
                ..config(2, &home)
            };
            let out = run_local_with(1, traced, move |ctx| {
                let v = ctx.register(Vector::from_vec(vec![1.0; 16]));
                for _ in 0..8 {
                    ctx.task(&codelet).rw(&v).submit();
                }
                ctx.wait_for_all();
                (ctx.sched_stats(), ctx.unregister(v).into_vec())
            })
            .expect("a clean run");
            let (stats, values) = &out[0];
            assert_eq!(*values, vec![256.0; 16]);
            let cpu_tasks: u64 = stats.workers.iter().map(|w| w.tasks).sum();
            let device_tasks = stats.devices.first().map_or(0, |d| d.tasks);
            let trace = std::fs::read_to_string(home.join("trace/rank0.json")).unwrap();
            if on_device {
                assert_eq!((device_tasks, cpu_tasks), (8, 0), "{stats:?}");
                assert_eq!(gpu.stats().device_tasks, 8);
                // The trace shows the device's tasks on a track of their own, with the
                // expected time.
                assert!(trace.contains("\"name\":\"device 0\""), "{trace}");
                let on_track = trace.matches("\"device\":0,\"measured_us\":").count();
                assert_eq!(on_track, 8, "{trace}");
                assert_eq!(trace.matches("\"expected_us\":1000.000").count(), 8);
                // The link to the fake device was measured at the first start and saved:
                // its copies take at least the fake's 10 µs latency.
                let saved = Models::load(&machine_file(&home)).unwrap();
                for link in [(0, 1), (1, 0)] {
                    let bus = saved.bus[&link];
                    assert!(
                        bus.latency >= 10e-6 && bus.bandwidth > 0.0,
                        "{link:?}: {bus:?}"
                    );
                }
            } else {
                assert_eq!((device_tasks, cpu_tasks), (0, 8), "{stats:?}");
                assert_eq!(gpu.stats().device_tasks, 0);
            }
            let _ = std::fs::remove_dir_all(&home);
        }
    }

    #[test]
    fn the_device_model_learns_the_kernel_time_not_the_copies_queued_before_it() {
        // Each task reads a fresh vector: its upload (20 ms) comes first, one at a time on
        // the upload stream, so tasks end about 20 ms apart while each kernel takes 2 ms.
        let home = fresh_dir("kernel-time");
        let gpu = Fake::open(FakeConfig {
            latency: Duration::from_millis(20),
            kernel_time: Duration::from_millis(2),
            ..FakeConfig::default()
        })
        .unwrap();
        let codelet = gpu.codelet("sum", None, |d| {
            d[1].data[0] = d[0].data.iter().sum();
            Ok(())
        });
        run_local_with(1, config(2, &home), move |ctx| {
            let vs: Vec<_> = (0..12)
                .map(|i| ctx.register(Vector::from_vec(vec![f64::from(i); 16])))
                .collect();
            let sums: Vec<_> = (0..12).map(|_| ctx.register(Variable::new(0.0))).collect();
            for (v, s) in vs.iter().zip(&sums) {
                ctx.task(&codelet).r(v).w(s).submit();
            }
            ctx.wait_for_all();
            for (i, s) in sums.into_iter().enumerate() {
                assert_eq!(ctx.unregister(s).get(), 16.0 * i as f64);
            }
        })
        .expect("a clean run");
        let saved = Models::load(&machine_file(&home)).unwrap();
        let (_, h) = saved.codelets["sum"]
            .history
            .iter()
            .find(|((arch, _), _)| *arch == Arch::Device)
            .expect("a device history");
        assert_eq!(h.count, CALIBRATION_SAMPLES, "{h:?}");
        // The wall time between hand-over and completion would be about 20 ms a task.
        assert!(h.mean >= 2e-3 && h.mean < 10e-3, "{h:?}");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn a_batch_is_shared_by_the_device_and_the_cpus_in_proportion_to_their_speeds() {
        let home = fresh_dir("batch");
        // The device runs a task in 2 ms, each of 2 CPU workers in 4 ms: the device
        // should take half of the batch, each CPU worker a quarter.
        preload(
            &home,
            "double",
            &[8, 128],
            &[(Arch::Device, 2e-3), (Arch::Cpu, 4e-3)],
        );
        let gpu = Fake::open(FakeConfig::default()).unwrap();
        let codelet = double(&gpu);
        let out = run_local_with(1, config(2, &home), move |ctx| {
            let g = ctx.register(Variable::new(0.0f64));
            let (tx, rx) = mpsc::channel::<()>();
            let rx = Mutex::new(rx);
            let gate = Codelet::new("gate", move |_| {
                let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
            });
            ctx.task(&gate).w(&g).submit();
            let vs: Vec<_> = (0..40)
                .map(|_| ctx.register(Vector::from_vec(vec![1.0; 16])))
                .collect();
            for v in &vs {
                ctx.task(&codelet).r(&g).rw(v).submit();
            }
            tx.send(()).unwrap();
            ctx.wait_for_all();
            for v in vs {
                assert_eq!(ctx.unregister(v).into_vec(), vec![2.0; 16]);
            }
            ctx.sched_stats()
        })
        .expect("a clean run");
        let stats = &out[0];
        let device = stats.devices[0].tasks as f64;
        let cpu = stats.workers.iter().map(|w| w.tasks).sum::<u64>() as f64 - 1.0; // the gate
        assert_eq!(device + cpu, 40.0, "{stats:?}");
        assert!((device / 40.0 - 0.5).abs() <= 0.15 * 0.5, "{stats:?}");
        assert_eq!(gpu.stats().device_tasks, device as u64);
        let _ = std::fs::remove_dir_all(&home);
    }
}
