//! The facade's side of worker binding (`STARLING_WORKERS_GETBIND`): the policy installed
//! as the runtime's worker-start hook. The adapter's side (the process's mask, pinning a
//! thread) is tested in `starling-mpi`'s `bind`.

use super::*;

#[test]
fn binding_on_pins_each_worker_to_a_core_of_the_mask_in_turn() {
    let cores = bind::process_cores().expect("the process's mask");
    let mut runtime = RuntimeConfig::default();
    let bindings = bind_workers(GetBind::On, &mut runtime).expect("binding is on");
    assert_eq!(bindings.cores, cores);
    let hook = runtime.on_worker_start.clone().expect("a hook");
    let n = cores.len() + 1; // one more worker than cores: wraps around
    let threads: Vec<_> = (0..n)
        .map(|w| {
            let hook = hook.clone();
            std::thread::spawn(move || (hook.0)(w))
        })
        .collect();
    for t in threads {
        t.join().expect("a worker");
    }
    let got = bindings.workers();
    assert_eq!(got.len(), n);
    for b in got {
        assert_eq!(b.core, cores[b.worker % cores.len()]);
        assert_eq!(b.mask, Ok(vec![b.core]));
    }
}

#[test]
fn binding_off_leaves_the_runtime_alone_and_on_keeps_the_worker_count() {
    let mut runtime = RuntimeConfig {
        workers: 3,
        ..RuntimeConfig::default()
    };
    assert!(bind_workers(GetBind::Off, &mut runtime).is_none());
    assert!(runtime.on_worker_start.is_none());
    assert!(bind_workers(GetBind::On, &mut runtime).is_some());
    assert_eq!(runtime.workers, 3, "STARLING_NCPU's count stays");
    assert!(runtime.on_worker_start.is_some());
}

#[test]
fn with_another_thread_the_environment_is_left_as_it_is() {
    // Another thread, alive while the call runs (besides the test harness's): setting the
    // environment could race with it, so nothing is set.
    let (stop, wait) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || wait.recv());
    let before = std::env::var(transport::YIELD_WHEN_IDLE_VAR).ok();
    let did = transport::no_yield_when_idle();
    match &before {
        // A value the user gave is kept, whatever the threads.
        Some(v) => assert_eq!(did, YieldWhenIdle::Set(v.clone())),
        None => assert_eq!(did, YieldWhenIdle::OtherThreads),
    }
    assert_eq!(std::env::var(transport::YIELD_WHEN_IDLE_VAR).ok(), before);
    drop(stop);
    let _ = other.join();
}
