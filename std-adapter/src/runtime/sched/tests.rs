use super::*;

fn dmda(arch: &[Arch]) -> Scheduler {
    Scheduler::new(SchedPolicy::Dmda, arch)
}

/// Places `n` tasks at once as `dmda` does, with fixed durations per arch; returns the
/// worker of each.
fn place(s: &mut Scheduler, n: u64, duration: impl Fn(Arch) -> Option<f64>) -> Vec<Target> {
    (0..n)
        .map(|id| {
            let (t, e) = s.choose(true, None, &duration, |_| 0.0);
            match t {
                Target::Worker(w) => s.push_to(w, 0, id, e.unwrap_or(0.0)),
                Target::Device(d) => s.push_device(d, e.unwrap_or(0.0)),
                Target::Any => unreachable!(),
            }
        })
        .collect()
}

#[test]
fn dmda_splits_a_batch_in_proportion_to_the_speeds() {
    for (slow_percent, batch) in [(50u32, 300u64), (25, 500), (80, 900)] {
        let mut s = dmda(&[Arch::Cpu, Arch::cpu_at(slow_percent)]);
        let base = 2e-3;
        let placed = place(&mut s, batch, |a| {
            Some(match a {
                Arch::ScaledCpu(p) => base * 100.0 / f64::from(p),
                _ => base,
            })
        });
        let fast = placed.iter().filter(|t| **t == Target::Worker(0)).count() as f64;
        let share = fast / batch as f64;
        let ideal = 1.0 / (1.0 + f64::from(slow_percent) / 100.0);
        assert!(
            (share - ideal).abs() / ideal < 0.02,
            "{slow_percent}%: {share} vs {ideal}"
        );
    }
}

#[test]
fn dmda_adds_the_transfers_to_the_completion() {
    let mut s = dmda(&[Arch::Cpu]);
    let d = s.device_slot(0);
    // The device is 4× faster, but its copies cost more than the difference.
    let (t, _) = s.choose(
        true,
        Some(d),
        |a| Some(if a == Arch::Device { 1e-3 } else { 4e-3 }),
        |t| if t == Target::Device(d) { 5e-3 } else { 0.0 },
    );
    assert_eq!(t, Target::Worker(0));
    let (t, e) = s.choose(
        true,
        Some(d),
        |a| Some(if a == Arch::Device { 1e-3 } else { 4e-3 }),
        |_| 0.0,
    );
    assert_eq!((t, e), (Target::Device(d), Some(1e-3)));
    // A codelet with no CPU implementation goes to the device whatever the cost.
    let (t, _) = s.choose(false, Some(d), |_| Some(1.0), |_| 9.0);
    assert_eq!(t, Target::Device(d));
}

#[test]
fn an_uncalibrated_arch_gets_tasks_until_it_has_samples() {
    let mut s = dmda(&[Arch::Cpu, Arch::cpu_at(50), Arch::cpu_at(50)]);
    // CPU calibrated and fast; the slow class uncalibrated: it gets the tasks, spread.
    let placed = place(&mut s, 6, |a| (a == Arch::Cpu).then_some(1e-6));
    assert_eq!(
        placed,
        [1, 2, 1, 2, 1, 2].map(Target::Worker).to_vec(),
        "uncalibrated workers first, the shortest queue among them"
    );
}

#[test]
fn dmda_queues_keep_priority_order() {
    let mut s = dmda(&[Arch::Cpu]);
    for (id, p) in [(1, 0), (2, 5), (3, -1), (4, 5), (5, 2)] {
        s.push_to(0, p, id, 1e-3);
    }
    let order: Vec<NodeId> = core::iter::from_fn(|| s.pop(0)).collect();
    assert_eq!(order, vec![2, 4, 5, 1, 3]);
    assert_eq!(s.len(), 0);
}

#[test]
fn dmda_never_steals_and_ws_does() {
    let mut d = dmda(&[Arch::Cpu, Arch::Cpu]);
    d.push_to(0, 0, 1, 0.0);
    assert_eq!(d.pop(1), None);
    assert_eq!(d.pop(0), Some(1));

    let mut ws = Scheduler::new(SchedPolicy::Ws, &[Arch::Cpu, Arch::Cpu, Arch::Cpu]);
    // Tasks made ready by worker 0 go to its queue.
    for id in 0..4 {
        assert_eq!(ws.push(0, id, Some(0)), Target::Worker(0));
    }
    ws.push(0, 9, Some(2));
    assert_eq!(ws.pop(2), Some(9), "its own queue first");
    assert_eq!(ws.pop(2), Some(0), "then steals from the longest queue");
    assert_eq!(ws.pop(1), Some(1));
    assert_eq!(ws.len(), 2);
    assert_eq!(ws.pop_any(), Some(2));
}

#[test]
fn ws_spreads_tasks_from_outside_the_workers() {
    let mut ws = Scheduler::new(SchedPolicy::Ws, &[Arch::Cpu, Arch::Cpu]);
    let targets: Vec<Target> = (0..4).map(|id| ws.push(0, id, None)).collect();
    assert_eq!(
        targets.iter().filter(|t| **t == Target::Worker(0)).count(),
        2
    );
}

#[test]
fn a_busy_worker_is_expected_free_later() {
    let mut s = dmda(&[Arch::Cpu, Arch::Cpu]);
    s.push_to(0, 0, 1, 10.0);
    assert_eq!(s.pop(0), Some(1));
    s.started(0, 10.0);
    let (t, _) = s.choose(true, None, |_| Some(1e-3), |_| 0.0);
    assert_eq!(t, Target::Worker(1), "worker 0 runs a 10 s task");
    // It ended early: free now.
    let took = s.ended(Target::Worker(0), Some(10.0), Some(5.0), 0.0, true);
    assert_eq!(took, 5.0);
    s.push_to(1, 0, 2, 1.0);
    let (t, _) = s.choose(true, None, |_| Some(1e-3), |_| 0.0);
    assert_eq!(t, Target::Worker(0));
    let stats = s.public_stats();
    assert_eq!(stats.workers[0].tasks, 1);
    assert_eq!(stats.workers[0].busy, 5.0);
    let (err, n) = stats.mean_error.unwrap();
    assert_eq!(n, 1);
    assert!((err - 1.0).abs() < 1e-12, "|10 - 5| / 5");
    assert!(s.report("r").contains("mean error 100.0 % over 1 tasks"));
}

#[test]
fn waking_marks_the_worker_awake_so_the_next_task_wakes_another() {
    let mut s = Scheduler::new(SchedPolicy::Prio, &[Arch::Cpu, Arch::Cpu]);
    s.set_asleep(0, true);
    s.set_asleep(1, true);
    assert_eq!(s.wake(Target::Any), Some(0));
    assert_eq!(s.wake(Target::Any), Some(1));
    assert_eq!(s.wake(Target::Any), None);
    let mut d = dmda(&[Arch::Cpu, Arch::Cpu]);
    d.set_asleep(0, true);
    d.set_asleep(1, true);
    assert_eq!(
        d.wake(Target::Worker(1)),
        Some(1),
        "dmda wakes the chosen worker"
    );
    assert_eq!(d.wake(Target::Worker(1)), None);
}

#[test]
fn on_a_crowded_machine_a_ready_task_counts_on_a_polling_worker_once() {
    let mut s = Scheduler::new(SchedPolicy::Prio, &[Arch::Cpu, Arch::Cpu, Arch::Cpu]);
    s.set_asleep(1, true);
    s.set_asleep(2, true);
    // Not crowded: a polling worker does not stop a sleeping one from being woken.
    s.set_polling(true);
    assert_eq!(s.wake(Target::Any), Some(1));
    s.set_asleep(1, true);
    // Crowded: the polling worker takes the first task, a sleeper the second.
    s.count_on_pollers(true);
    assert_eq!(s.wake(Target::Any), None, "the polling worker will take it");
    assert_eq!(s.wake(Target::Any), Some(1), "counted on once only");
    // It stops polling (it took the task): the next task wakes the last sleeper.
    s.set_polling(false);
    assert_eq!(s.wake(Target::Any), Some(2));
    // Two poll, neither counted on yet: two tasks wake nobody.
    s.set_asleep(1, true);
    s.set_polling(true);
    s.set_polling(true);
    assert_eq!(s.wake(Target::Any), None);
    assert_eq!(s.wake(Target::Any), None);
    assert_eq!(s.wake(Target::Any), Some(1));
    // `dmda` places a task on one worker: a polling one elsewhere cannot take it.
    let mut d = dmda(&[Arch::Cpu, Arch::Cpu]);
    d.count_on_pollers(true);
    d.set_asleep(1, true);
    d.set_polling(true);
    assert_eq!(d.wake(Target::Worker(1)), Some(1));
}

#[test]
fn policies_parse_by_name() {
    for p in [SchedPolicy::Prio, SchedPolicy::Ws, SchedPolicy::Dmda] {
        assert_eq!(SchedPolicy::parse(p.name()), Some(p));
    }
    assert_eq!(SchedPolicy::parse("dmdas"), Some(SchedPolicy::Dmda));
    assert_eq!(SchedPolicy::parse("random"), None);
    assert_eq!(
        Scheduler::new(SchedPolicy::Dmda, &[]).policy(),
        SchedPolicy::Prio,
        "no worker thread: the progression thread takes from one queue"
    );
}

#[test]
fn a_device_sample_is_its_kernel_time_and_a_skipped_one_counts_in_no_error() {
    let mut s = dmda(&[Arch::Cpu]);
    let d = s.device_slot(0);
    s.push_device(d, 2.0);
    s.push_device(d, 2.0);
    // Measured on the device: 1 s, whatever the wall time since the hand-over.
    let took = s.ended(Target::Device(d), Some(2.0), Some(1.0), 0.0, true);
    assert_eq!(took, 1.0);
    // Not representative: the wall time is returned, no error is counted.
    let wall = s.ended(Target::Device(d), Some(2.0), None, 0.0, false);
    assert!(wall >= 0.0);
    let stats = s.public_stats();
    assert_eq!(stats.devices[0].tasks, 2);
    // Busy time is the wall time in both cases (here, since the scheduler started).
    assert!(stats.devices[0].busy >= 0.0 && stats.devices[0].busy <= s.now());
    let (err, n) = stats.mean_error.unwrap();
    assert_eq!(n, 1, "the skipped task counts in no error");
    assert!((err - 1.0).abs() < 1e-12, "|2 - 1| / 1");
    // In aggregate too, over the same task only.
    let report = s.report("r");
    assert!(
        report.contains("in all, 2.000 s expected against 1.000 s measured"),
        "{report}"
    );
    // Both left the device's queue (4 s queued would send the next task to the CPU).
    let predict = |a: Arch| Some(if a == Arch::Device { 0.5 } else { 1.0 });
    let (t, _) = s.choose(true, Some(d), predict, |_| 0.0);
    assert_eq!(t, Target::Device(d));
}
