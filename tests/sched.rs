//! Schedulers and performance models through the facade: `dmda` sends a chain to the
//! fast workers, splits a batch in proportion to the speeds, keeps priorities, calibrates
//! what has no samples; model files read back, and a corrupted or unwritable one never
//! stops a run. Worker speeds come from the speed-factor hook
//! (`RuntimeConfig::worker_speed`); the placements asserted are decided from the models
//! alone (a batch is made ready at once, behind a gate task), so that no assertion
//! depends on how fast this machine runs.

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use starling::interfaces::{Variable, Vector};
use starling::perfmodel::{CALIBRATION_SAMPLES, Footprint, History, Regression, machine_file};
use starling::{
    Arch, ClusterConfig, Codelet, Context, Handle, Models, PerfModel, RuntimeConfig, SchedPolicy,
    SchedStats, run_local_with,
};

/// A fresh directory for this test's files.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("starling-sched-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// One rank with workers at `speeds` percent, scheduled by `sched`, models under `home`.
fn config(sched: SchedPolicy, speeds: &[u32], home: &Path) -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: speeds.len(),
            sched,
            worker_speed: speeds.to_vec(),
            model_home: Some(home.to_path_buf()),
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

/// Saves calibrated histories of codelet `name` on data of `sizes`: `mean` seconds per
/// arch.
fn preload(home: &Path, name: &str, sizes: &[usize], means: &[(Arch, f64)]) {
    let mut m = Models::default();
    let fp = Footprint::of(sizes.iter().copied());
    let cm = m.codelets.entry(name.to_owned()).or_default();
    for &(arch, mean) in means {
        cm.history.insert(
            (arch, fp.hash),
            History {
                bytes: fp.bytes,
                count: CALIBRATION_SAMPLES,
                mean,
                m2: 0.0,
            },
        );
    }
    m.save(&machine_file(home)).unwrap();
}

/// A codelet that sleeps `ms` and adds one to its last access (a `Variable<u64>`).
fn sleeper(name: &str, ms: u64) -> Codelet {
    Codelet::new(name, move |b| {
        std::thread::sleep(Duration::from_millis(ms));
        let last = b.len() - 1;
        *b.w::<Variable<u64>>(last).value_mut() += 1;
    })
}

/// A task writing `g` that blocks until the returned sender sends (or 10 s pass): the
/// tasks reading `g` submitted meanwhile become ready together when it ends.
fn gate(ctx: &Context, g: &Handle<Variable<u64>>) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Arc::new(Mutex::new(rx));
    let gate = Codelet::new("gate", move |_| {
        let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
    });
    ctx.task(&gate).w(g).submit();
    tx
}

/// Runs `batch` independent tasks of `codelet` (priorities from `priority`) made ready
/// at once; returns the scheduler's statistics and, per task in the order they ran, the
/// worker thread's name and the priority.
fn batch(
    config: ClusterConfig,
    codelet: Codelet,
    n: u64,
    priority: fn(u64) -> i32,
) -> (SchedStats, Vec<(String, i32)>) {
    let out = run_local_with(1, config, move |ctx| {
        let g = ctx.register(Variable::new(0u64));
        let ran = Arc::new(Mutex::new(Vec::new()));
        let release = gate(ctx, &g);
        let xs: Vec<_> = (0..n).map(|_| ctx.register(Variable::new(0u64))).collect();
        for (i, x) in xs.iter().enumerate() {
            let p = priority(i as u64);
            let ran = Arc::clone(&ran);
            ctx.task(&codelet)
                .r(&g)
                .rw(x)
                .priority(p)
                .callback(move || {
                    let me = std::thread::current().name().unwrap_or("").to_owned();
                    ran.lock().unwrap().push((me, p));
                })
                .submit();
        }
        release.send(()).unwrap();
        ctx.wait_for_all();
        for x in xs {
            assert_eq!(ctx.unregister(x).get(), 1, "every task ran once");
        }
        let ran = ran.lock().unwrap().clone();
        (ctx.sched_stats(), ran)
    })
    .expect("a clean run");
    out.into_iter().next().unwrap()
}

#[test]
fn dmda_sends_a_chain_to_the_fast_worker() {
    let home = fresh_dir("chain");
    preload(
        &home,
        "chain",
        &[8],
        &[(Arch::Cpu, 2e-3), (Arch::ScaledCpu(40), 5e-3)],
    );
    let out = run_local_with(1, config(SchedPolicy::Dmda, &[40, 100], &home), |ctx| {
        let x = ctx.register(Variable::new(0u64));
        let chain = sleeper("chain", 1);
        for _ in 0..20 {
            ctx.task(&chain).rw(&x).submit();
        }
        ctx.wait_for_all();
        (ctx.sched_stats(), ctx.unregister(x).get())
    })
    .expect("a clean run");
    let (stats, value) = &out[0];
    assert_eq!(*value, 20);
    assert_eq!(stats.policy, SchedPolicy::Dmda);
    // Worker 0 is the slow one (40 %): every link of the chain went to worker 1.
    assert_eq!(stats.workers[0].tasks, 0, "{stats:?}");
    assert_eq!(stats.workers[1].tasks, 20, "{stats:?}");
    let (error, n) = stats.mean_error.expect("the tasks had expected durations");
    assert_eq!(n, 20);
    assert!(error.is_finite());
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn dmda_splits_a_batch_in_proportion_to_the_speeds() {
    let home = fresh_dir("split");
    // The slow class is at 50 %: it should get a third of the batch.
    preload(
        &home,
        "part",
        &[8, 8],
        &[(Arch::Cpu, 2e-3), (Arch::ScaledCpu(50), 4e-3)],
    );
    let (stats, _) = batch(
        config(SchedPolicy::Dmda, &[100, 50], &home),
        sleeper("part", 1),
        30,
        |_| 0,
    );
    let fast = stats.workers[0].tasks as f64 - 1.0; // the gate ran on worker 0
    let slow = stats.workers[1].tasks as f64;
    assert_eq!(fast + slow, 30.0, "{stats:?}");
    let share = fast / 30.0;
    assert!(
        (share - 2.0 / 3.0).abs() <= 0.15 * 2.0 / 3.0,
        "fast share {share}: {stats:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn dmda_runs_each_workers_tasks_in_priority_order() {
    let home = fresh_dir("prio");
    preload(&home, "ranked", &[8, 8], &[(Arch::Cpu, 1e-3)]);
    let (stats, ran) = batch(
        config(SchedPolicy::Dmda, &[100, 100], &home),
        sleeper("ranked", 1),
        40,
        |i| ((i * 7) % 5) as i32 - 2,
    );
    assert_eq!(stats.workers[0].tasks + stats.workers[1].tasks, 41);
    for worker in ["worker0", "worker1"] {
        let mine: Vec<i32> = ran
            .iter()
            .filter(|(w, _)| w.ends_with(worker))
            .map(|&(_, p)| p)
            .collect();
        assert_eq!(mine.len(), 20, "an even split of alike workers: {ran:?}");
        assert!(
            mine.windows(2).all(|w| w[0] >= w[1]),
            "{worker} ran {mine:?}: not highest priority first"
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn uncalibrated_workers_get_tasks_until_they_have_samples_then_dmda_uses_them() {
    let home = fresh_dir("calibrate");
    let speeds = [100, 50];
    let (stats, _) = batch(
        config(SchedPolicy::Dmda, &speeds, &home),
        sleeper("fresh", 3),
        40,
        |_| 0,
    );
    // Uncalibrated: the batch is spread over both workers (the gate ran on worker 0).
    assert_eq!(stats.workers[0].tasks, 21, "{stats:?}");
    assert_eq!(stats.workers[1].tasks, 20, "{stats:?}");
    // The run saved its models: both classes calibrated, the slow one slower.
    let models = Models::load(&machine_file(&home)).expect("a valid model file");
    let fp = Footprint::of([8, 8]).hash;
    let fast = *models.history("fresh", Arch::Cpu, fp).unwrap();
    let slow = *models.history("fresh", Arch::ScaledCpu(50), fp).unwrap();
    assert_eq!(
        fast.count, CALIBRATION_SAMPLES,
        "calibrate 0 stops once calibrated"
    );
    assert_eq!(slow.count, CALIBRATION_SAMPLES);
    assert!(slow.mean > 1.3 * fast.mean, "{slow:?} vs {fast:?}");
    // A second run loads them and splits a batch in proportion to the measured speeds.
    let (stats, _) = batch(
        config(SchedPolicy::Dmda, &speeds, &home),
        sleeper("fresh", 3),
        30,
        |_| 0,
    );
    let share = (stats.workers[0].tasks - 1) as f64 / 30.0;
    let ideal = slow.mean / (slow.mean + fast.mean);
    assert!(
        (share - ideal).abs() <= 0.15 * ideal,
        "fast share {share}, ideal {ideal}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn dmda_predicts_a_size_never_run_from_a_regression_formula() {
    let home = fresh_dir("regression");
    // Fitted on 1 000 to 10 000 bytes: 1 µs per byte on a plain CPU worker, 2 µs at 50 %.
    let mut m = Models::default();
    let cm = m.codelets.entry("scale".to_owned()).or_default();
    for (arch, per_byte) in [(Arch::Cpu, 1e-6), (Arch::ScaledCpu(50), 2e-6)] {
        let mut r = Regression::default();
        for k in 1..=CALIBRATION_SAMPLES {
            let x = k as f64 * 1000.0;
            r.add(x, x * per_byte);
        }
        cm.regression.insert(arch, r);
    }
    m.save(&machine_file(&home)).unwrap();
    let out = run_local_with(1, config(SchedPolicy::Dmda, &[50, 100], &home), |ctx| {
        // 24 000 bytes: no history has this footprint, the formula predicts it.
        let v = ctx.register(Vector::<u64>::zeros(3000));
        let scale = Codelet::new("scale", |b| {
            std::thread::sleep(Duration::from_millis(1));
            for x in b.w::<Vector<u64>>(0).as_mut_slice() {
                *x += 1;
            }
        })
        .with_model(PerfModel::regression(|sizes| sizes[0] as f64));
        for _ in 0..10 {
            ctx.task(&scale).rw(&v).submit();
        }
        ctx.wait_for_all();
        (ctx.sched_stats(), ctx.unregister(v).into_vec())
    })
    .expect("a clean run");
    let (stats, values) = &out[0];
    assert!(values.iter().all(|&x| x == 10));
    assert_eq!(
        (stats.workers[0].tasks, stats.workers[1].tasks),
        (0, 10),
        "24 ms expected on the fast worker, 48 ms on the slow one: {stats:?}"
    );
    // The runs added their samples: history for the new footprint, and the regression.
    let models = Models::load(&machine_file(&home)).unwrap();
    let scale = &models.codelets["scale"];
    assert_eq!(scale.regression[&Arch::Cpu].count, CALIBRATION_SAMPLES + 10);
    let fp = Footprint::of([24_000]).hash;
    assert_eq!(scale.history[&(Arch::Cpu, fp)].count, 10);
    let _ = std::fs::remove_dir_all(&home);
}

/// A small flow whose result is known: 3 chains of 10 increments.
fn counting_flow(ctx: &Context) -> Vec<u64> {
    let add = sleeper("add", 0);
    let hs: Vec<_> = (0..3).map(|_| ctx.register(Variable::new(0u64))).collect();
    for _ in 0..10 {
        for h in &hs {
            ctx.task(&add).rw(h).submit();
        }
    }
    ctx.wait_for_all();
    hs.into_iter().map(|h| ctx.unregister(h).get()).collect()
}

#[test]
fn a_corrupted_model_file_is_reported_and_the_run_goes_on_uncalibrated() {
    let home = fresh_dir("corrupt");
    let file = machine_file(&home);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        "starling-perfmodel 1\nhistory add cpu 0000000x 8 1 0.1 0 0\nend 1\n",
    )
    .unwrap();
    let e = Models::load(&file).unwrap_err();
    assert_eq!((e.file.as_path(), e.line), (file.as_path(), 2));
    assert!(
        e.to_string().contains(&format!("{}:2:", file.display())),
        "{e}"
    );

    // Truncated: no `end` line.
    let truncated = home.join("truncated.txt");
    std::fs::write(&truncated, "starling-perfmodel 1\nbus 0 1 1e-5 1e10\n").unwrap();
    let e = Models::load(&truncated).unwrap_err();
    assert_eq!(e.line, 3);

    let out = run_local_with(
        1,
        config(SchedPolicy::Dmda, &[100, 100], &home),
        counting_flow,
    )
    .expect("the run goes on");
    assert_eq!(out[0], vec![10, 10, 10]);
    // The models of this run replaced the corrupted file.
    let models = Models::load(&file).expect("a valid file now");
    assert!(models.codelets.contains_key("add"));
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn an_unwritable_model_folder_is_a_warning_not_a_failure() {
    let dir = fresh_dir("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, b"not a folder").unwrap();
    // The home is under a regular file: it can be neither read nor made.
    let out = run_local_with(
        1,
        config(SchedPolicy::Dmda, &[100, 100], &blocker),
        counting_flow,
    )
    .expect("a clean run");
    assert_eq!(out[0], vec![10, 10, 10]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ws_and_prio_run_the_same_flow_to_the_same_result() {
    let home = fresh_dir("ws");
    for sched in [SchedPolicy::Ws, SchedPolicy::Prio] {
        let out = run_local_with(1, config(sched, &[100, 100], &home), |ctx| {
            (counting_flow(ctx), ctx.sched_stats().policy)
        })
        .expect("a clean run");
        assert_eq!(out[0], (vec![10, 10, 10], sched));
    }
    assert!(
        !home.exists(),
        "prio and ws without STARLING_CALIBRATE touch no model file"
    );
}

#[test]
fn the_trace_shows_the_worker_and_the_expected_against_the_measured_time() {
    let home = fresh_dir("trace");
    preload(
        &home,
        "chain",
        &[8],
        &[(Arch::Cpu, 2e-3), (Arch::ScaledCpu(40), 5e-3)],
    );
    let base = home.join("trace");
    let config = ClusterConfig {
        trace_file: Some(base.clone()),
        ..config(SchedPolicy::Dmda, &[40, 100], &home)
    };
    run_local_with(1, config, |ctx| {
        let x = ctx.register(Variable::new(0u64));
        let chain = sleeper("chain", 1);
        for _ in 0..5 {
            ctx.task(&chain).rw(&x).submit();
        }
        ctx.wait_for_all();
        ctx.unregister(x);
    })
    .expect("a clean run");
    let file = starling::trace::rank_file(&base, 0);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let tasks: Vec<&Value> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "task" && e["name"] == "chain")
        .collect();
    assert_eq!(tasks.len(), 5);
    for t in tasks {
        assert_eq!(t["args"]["worker"], 1, "{t}");
        assert_eq!(t["args"]["expected_us"].as_f64(), Some(2000.0), "{t}");
        assert!(t["args"]["measured_us"].as_f64().unwrap() >= 1000.0, "{t}");
    }
    let _ = std::fs::remove_dir_all(&home);
}
