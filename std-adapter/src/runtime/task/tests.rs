//! Tests of the task runtime.
//!
//! The dependency graph is checked with hook nodes and no threads: a hook runs on the
//! thread that makes its node ready, inside `submit` or `complete`, so which hooks have
//! started is exact at every step. Workers, priorities, kernels, tags and the public API
//! are checked with real threads, and every wait is bounded so that a broken runtime
//! fails a test instead of hanging it. Under `cfg(loom)` only the `loom_model` tests
//! are built.

use starling_core::{AccessMode, DataId};

use super::{Access, Codelet, Runtime, RuntimeConfig};
use crate::runtime::data::{Cell, Interface};
use crate::runtime::interfaces::Variable;
use crate::sync::Arc;

/// A variable handle's storage, as the runtime sees it.
fn variable(id: u32, value: u64) -> Arc<Cell<Variable<u64>>> {
    Arc::new(Cell::new(DataId(id), Variable::new(value)))
}

/// An access of `cell` in `mode`.
fn access<I: Interface>(cell: &Arc<Cell<I>>, mode: AccessMode) -> Access {
    Access {
        cell: Arc::clone(cell) as _,
        mode,
    }
}

#[cfg(not(loom))]
mod support {
    use core::time::Duration;
    use std::sync::{Condvar, Mutex, mpsc};
    use std::thread;

    use super::super::{NodeId, Workers};
    use super::*;
    use crate::sync::lock;

    /// How long any wait of a test may take before the test fails.
    pub(super) const TIMEOUT: Duration = Duration::from_secs(10);

    /// How long a negative check gives a wrongly released task or waiter to show up.
    pub(super) const SETTLE: Duration = Duration::from_millis(50);

    /// A runtime with `workers` workers and kernels on.
    pub(super) fn start(workers: usize) -> (Runtime, Workers) {
        let config = RuntimeConfig {
            workers,
            disable_kernels: false,
            ..RuntimeConfig::default()
        };
        Runtime::start(&config, "test")
    }

    /// Waits (bounded) until everything submitted completed, then stops the workers.
    pub(super) fn finish(rt: &Runtime, workers: Workers) {
        assert!(
            rt.wait_until(TIMEOUT, |v| v.outstanding == 0),
            "the runtime did not drain within {TIMEOUT:?}"
        );
        workers.stop();
    }

    /// Runs `f` on its own thread and returns its result, failing the test if it does
    /// not finish within [`TIMEOUT`] (a blocking call that never returns) and passing on
    /// its panic.
    pub(super) fn within<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        let t = thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(TIMEOUT) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the thread sends before it ends"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("blocked for more than {TIMEOUT:?}"),
        }
    }

    /// A one-shot gate that kernels wait on (at most [`TIMEOUT`]) until the test opens it.
    #[derive(Default)]
    pub(super) struct Gate {
        open: Mutex<bool>,
        cv: Condvar,
    }

    impl Gate {
        pub(super) fn open(&self) {
            *lock(&self.open) = true;
            self.cv.notify_all();
        }

        pub(super) fn wait(&self) {
            let open = lock(&self.open);
            let _open = self
                .cv
                .wait_timeout_while(open, TIMEOUT, |open| !*open)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Hook nodes named by the test, which record when they start and complete only when
    /// the test says so: the dependency graph observed step by step, with no thread.
    pub(super) struct Hooks {
        pub(super) rt: Runtime,
        workers: Workers,
        started: Arc<Mutex<Vec<(&'static str, NodeId)>>>,
        completed: Mutex<Vec<&'static str>>,
    }

    impl Hooks {
        pub(super) fn new() -> Self {
            let (rt, workers) = start(1);
            Self {
                rt,
                workers,
                started: Arc::default(),
                completed: Mutex::default(),
            }
        }

        /// Submits hook node `name` with `accesses`.
        pub(super) fn submit(&self, name: &'static str, accesses: Vec<Access>) {
            let started = Arc::clone(&self.started);
            self.rt.submit_hook(
                accesses,
                0,
                Box::new(move |id| lock(&started).push((name, id))),
            );
        }

        /// The nodes started so far, in the order they started.
        pub(super) fn started(&self) -> Vec<&'static str> {
            lock(&self.started).iter().map(|(n, _)| *n).collect()
        }

        /// Completes started node `name`.
        pub(super) fn complete(&self, name: &'static str) {
            let id = lock(&self.started)
                .iter()
                .find_map(|(n, id)| (*n == name).then_some(*id))
                .unwrap_or_else(|| panic!("{name} has not started"));
            let mut completed = lock(&self.completed);
            assert!(!completed.contains(&name), "{name} completed twice");
            completed.push(name);
            drop(completed);
            self.rt.complete(id);
        }

        /// Fails started node `name` with `failure` ([`Runtime::fail`]).
        pub(super) fn fail(&self, name: &'static str, failure: crate::error::TransferError) {
            let id = self.id(name);
            lock(&self.completed).push(name);
            self.rt.fail(id, failure);
        }

        /// The poison of started node `name` ([`Runtime::poison_of`]).
        pub(super) fn poison_of(&self, name: &'static str) -> Option<super::super::Poison> {
            self.rt.poison_of(self.id(name))
        }

        fn id(&self, name: &'static str) -> NodeId {
            lock(&self.started)
                .iter()
                .find_map(|(n, id)| (*n == name).then_some(*id))
                .unwrap_or_else(|| panic!("{name} has not started"))
        }

        /// Completes the started nodes, and those they release, until none is left open,
        /// then checks that the runtime drained and stops it.
        pub(super) fn finish(self) {
            loop {
                let completed = lock(&self.completed).clone();
                let open: Vec<_> = self
                    .started()
                    .into_iter()
                    .filter(|n| !completed.contains(n))
                    .collect();
                if open.is_empty() {
                    break;
                }
                for name in open {
                    self.complete(name);
                }
            }
            finish(&self.rt, self.workers);
        }
    }
}

#[cfg(not(loom))]
mod dependencies {
    use super::support::Hooks;
    use super::*;

    const R: AccessMode = AccessMode::R;
    const W: AccessMode = AccessMode::W;

    #[test]
    fn a_read_waits_for_the_earlier_write() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("w", vec![access(&h, W)]);
        hooks.submit("r", vec![access(&h, R)]);
        assert_eq!(hooks.started(), ["w"]);
        hooks.complete("w");
        assert_eq!(hooks.started(), ["w", "r"]);
        hooks.finish();
    }

    #[test]
    fn a_temporary_handle_leaves_no_entry_once_nothing_of_it_is_pending() {
        use crate::runtime::data::TEMPORARY_BASE;
        let hooks = Hooks::new();
        let h = variable(0, 0);
        let t = variable(TEMPORARY_BASE + 1, 0);
        hooks.submit("w", vec![access(&h, W), access(&t, W)]);
        hooks.submit("r", vec![access(&t, R)]);
        let temporaries = || hooks.rt.state().handles.temporaries();
        assert_eq!(temporaries(), 1);
        hooks.complete("w");
        // The reader still holds the temporary handle: its entry stays, and orders a
        // writer after the reader.
        assert_eq!(temporaries(), 1);
        hooks.submit("w2", vec![access(&t, W)]);
        assert_eq!(hooks.started(), ["w", "r"]);
        hooks.complete("r");
        assert_eq!(hooks.started(), ["w", "r", "w2"]);
        hooks.complete("w2");
        assert_eq!(
            temporaries(),
            0,
            "a temporary handle's entry outlived its accesses"
        );
        // The application's handle keeps its slot.
        assert!(hooks.rt.state().handles.get(&DataId(0)).is_some());
        hooks.finish();
    }

    #[test]
    fn under_dmda_a_temporary_handle_leaves_no_entry_either() {
        // `dmda` records where it expects a handle's copies (never 0 once placed): that
        // estimate must not keep a temporary handle's entry alive.
        use crate::runtime::data::TEMPORARY_BASE;
        use crate::runtime::sched::SchedPolicy;
        let home = std::env::temp_dir().join(format!("starling-dmda-temp-{}", std::process::id()));
        let config = RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            sched: SchedPolicy::Dmda,
            model_home: Some(home.clone()),
            ..RuntimeConfig::default()
        };
        let (rt, workers) = Runtime::start(&config, "test");
        let t = variable(TEMPORARY_BASE + 1, 0);
        rt.submit_task(
            Codelet::new("writes t", |_| {}),
            vec![access(&t, W)],
            0,
            None,
            None,
        );
        support::finish(&rt, workers);
        assert_eq!(rt.state().handles.temporaries(), 0);
        let _ = std::fs::remove_dir_all(home);
    }

    #[test]
    fn reads_of_one_handle_start_together() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("w", vec![access(&h, W)]);
        hooks.submit("r1", vec![access(&h, R)]);
        hooks.submit("r2", vec![access(&h, R)]);
        hooks.submit("r3", vec![access(&h, AccessMode::R | AccessMode::SSEND)]);
        hooks.complete("w");
        assert_eq!(hooks.started(), ["w", "r1", "r2", "r3"]);
        hooks.finish();
    }

    #[test]
    fn a_write_waits_for_every_earlier_read_and_a_later_read_for_it() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("r1", vec![access(&h, R)]);
        hooks.submit("r2", vec![access(&h, R)]);
        hooks.submit("w", vec![access(&h, AccessMode::RW)]);
        hooks.submit("r3", vec![access(&h, R)]);
        assert_eq!(hooks.started(), ["r1", "r2"]);
        hooks.complete("r2");
        assert_eq!(hooks.started(), ["r1", "r2"], "w waits for r1 too");
        hooks.complete("r1");
        assert_eq!(hooks.started(), ["r1", "r2", "w"]);
        hooks.complete("w");
        assert_eq!(hooks.started(), ["r1", "r2", "w", "r3"]);
        hooks.finish();
    }

    #[test]
    fn writes_to_one_handle_start_one_at_a_time_in_submission_order() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("w1", vec![access(&h, W)]);
        hooks.submit("w2", vec![access(&h, AccessMode::RW)]);
        hooks.submit("w3", vec![access(&h, W)]);
        assert_eq!(hooks.started(), ["w1"]);
        hooks.complete("w1");
        assert_eq!(hooks.started(), ["w1", "w2"]);
        hooks.complete("w2");
        assert_eq!(hooks.started(), ["w1", "w2", "w3"]);
        hooks.finish();
    }

    #[test]
    fn commute_and_redux_accesses_are_ordered_like_writes() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("c1", vec![access(&h, AccessMode::RW | AccessMode::COMMUTE)]);
        hooks.submit("c2", vec![access(&h, AccessMode::RW | AccessMode::COMMUTE)]);
        hooks.submit("x", vec![access(&h, AccessMode::REDUX)]);
        hooks.submit("r", vec![access(&h, R)]);
        assert_eq!(hooks.started(), ["c1"]);
        hooks.complete("c1");
        hooks.complete("c2");
        assert_eq!(hooks.started(), ["c1", "c2", "x"]);
        hooks.complete("x");
        assert_eq!(hooks.started(), ["c1", "c2", "x", "r"]);
        hooks.finish();
    }

    #[test]
    fn scratch_accesses_never_wait_and_are_never_waited_for() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("w1", vec![access(&h, W)]);
        hooks.submit("s", vec![access(&h, AccessMode::SCRATCH)]);
        hooks.submit("w2", vec![access(&h, W)]);
        assert_eq!(hooks.started(), ["w1", "s"]);
        hooks.complete("w1");
        assert_eq!(hooks.started(), ["w1", "s", "w2"], "w2 does not wait for s");
        hooks.finish();
    }

    #[test]
    fn a_scratch_access_does_not_hide_another_access_to_the_same_handle() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("w", vec![access(&h, W)]);
        hooks.submit(
            "sr",
            vec![access(&h, AccessMode::SCRATCH), access(&h, AccessMode::R)],
        );
        assert_eq!(hooks.started(), ["w"], "the read of h waits for w");
        hooks.complete("w");
        assert_eq!(hooks.started(), ["w", "sr"]);
        hooks.finish();
    }

    #[test]
    fn a_node_accessing_a_handle_twice_is_ordered_once_by_its_strongest_mode() {
        let hooks = Hooks::new();
        let h = variable(0, 0);
        hooks.submit("r1", vec![access(&h, R)]);
        hooks.submit("rw", vec![access(&h, R), access(&h, W)]);
        hooks.submit("r2", vec![access(&h, R)]);
        assert_eq!(hooks.started(), ["r1"], "rw writes: it waits for r1");
        hooks.complete("r1");
        assert_eq!(hooks.started(), ["r1", "rw"], "and not for itself");
        hooks.complete("rw");
        assert_eq!(hooks.started(), ["r1", "rw", "r2"]);
        hooks.finish();
    }

    #[test]
    fn accesses_to_different_handles_do_not_wait_for_each_other() {
        let hooks = Hooks::new();
        let (a, b) = (variable(0, 0), variable(1, 0));
        hooks.submit("wa", vec![access(&a, W)]);
        hooks.submit("wb", vec![access(&b, W)]);
        assert_eq!(hooks.started(), ["wa", "wb"]);
        hooks.finish();
    }

    #[test]
    fn a_node_waits_for_every_handle_it_accesses() {
        let hooks = Hooks::new();
        let (a, b) = (variable(0, 0), variable(1, 0));
        hooks.submit("wa", vec![access(&a, W)]);
        hooks.submit("wb", vec![access(&b, W)]);
        hooks.submit("rab", vec![access(&a, R), access(&b, R)]);
        hooks.complete("wb");
        assert_eq!(hooks.started(), ["wa", "wb"]);
        hooks.complete("wa");
        assert_eq!(hooks.started(), ["wa", "wb", "rab"]);
        hooks.finish();
    }

    #[test]
    fn a_handle_without_sequential_consistency_is_not_ordered() {
        let hooks = Hooks::new();
        let (h, other) = (variable(0, 0), variable(1, 0));
        hooks.rt.set_ordered(h.id, false);
        hooks.submit("w1", vec![access(&h, W)]);
        hooks.submit("w2", vec![access(&h, W)]);
        hooks.submit("r", vec![access(&h, R)]);
        hooks.submit("o1", vec![access(&other, W)]);
        hooks.submit("o2", vec![access(&other, W)]);
        assert_eq!(
            hooks.started(),
            ["w1", "w2", "r", "o1"],
            "other stays ordered"
        );
        hooks.complete("o1");
        assert_eq!(hooks.started(), ["w1", "w2", "r", "o1", "o2"]);

        hooks.rt.set_ordered(h.id, true);
        hooks.submit("w3", vec![access(&h, W)]);
        hooks.submit("w4", vec![access(&h, W)]);
        assert_eq!(hooks.started(), ["w1", "w2", "r", "o1", "o2", "w3"]);
        hooks.complete("w3");
        assert_eq!(hooks.started(), ["w1", "w2", "r", "o1", "o2", "w3", "w4"]);
        hooks.finish();
    }
}

#[cfg(not(loom))]
mod workers {
    use std::sync::{Barrier, Mutex, mpsc};
    use std::thread;

    use super::support::{Gate, SETTLE, TIMEOUT, finish, start, within};
    use super::*;
    use crate::runtime::interfaces::Vector;
    use crate::runtime::task::TaskTag;
    use crate::sync::{AtomicUsize, Ordering, lock};

    /// A task that appends `i` to a `Vector<u32>` whose element 0 counts the entries,
    /// counting in `overlaps` any other appender it runs alongside. It sleeps a little
    /// before taking the data, a different time for each `i`, so that appends that were
    /// not serialized would land out of order.
    pub(super) fn append(i: u32, overlaps: &Arc<[AtomicUsize; 2]>) -> Codelet {
        let overlaps = Arc::clone(overlaps);
        Codelet::new("append", move |b| {
            let [active, clashes] = &*overlaps;
            if active.fetch_add(1, Ordering::SeqCst) != 0 {
                clashes.fetch_add(1, Ordering::SeqCst);
            }
            thread::sleep(core::time::Duration::from_micros(u64::from(i % 3) * 700));
            {
                let mut v = b.w::<Vector<u32>>(0);
                let s = v.as_mut_slice();
                let n = s[0] as usize;
                s[n + 1] = i;
                s[0] += 1;
            }
            active.fetch_sub(1, Ordering::SeqCst);
        })
    }

    fn writes_run_in_submission_order(workers: usize) {
        const N: u32 = 24;
        let (rt, pool) = start(workers);
        let h = Arc::new(Cell::new(DataId(0), Vector::<u32>::zeros(N as usize + 1)));
        let overlaps = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        for i in 0..N {
            rt.submit_task(
                append(i, &overlaps),
                vec![access(&h, AccessMode::RW)],
                0,
                None,
                None,
            );
        }
        finish(&rt, pool);
        let expected: Vec<u32> = core::iter::once(N).chain(0..N).collect();
        assert_eq!(h.read().as_slice(), &expected[..]);
        assert_eq!(overlaps[1].load(Ordering::SeqCst), 0, "writers overlapped");
    }

    #[test]
    fn writes_to_one_handle_run_in_submission_order_on_one_worker() {
        writes_run_in_submission_order(1);
    }

    #[test]
    fn writes_to_one_handle_run_in_submission_order_on_several_workers() {
        writes_run_in_submission_order(4);
    }

    #[test]
    fn reads_of_one_handle_run_concurrently() {
        // Each reader waits for the other inside its kernel: serialized, they deadlock.
        let (rt, pool) = start(2);
        let h = variable(0, 0);
        let set = Codelet::new("set", |b| b.w::<Variable<u64>>(0).set(3));
        rt.submit_task(set, vec![access(&h, AccessMode::W)], 0, None, None);
        let barrier = Arc::new(Barrier::new(2));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..2 {
            let (barrier, seen) = (Arc::clone(&barrier), Arc::clone(&seen));
            let read = Codelet::new("read", move |b| {
                barrier.wait();
                lock(&seen).push(b.r::<Variable<u64>>(0).get());
            });
            rt.submit_task(read, vec![access(&h, AccessMode::R)], 0, None, None);
        }
        finish(&rt, pool);
        assert_eq!(*lock(&seen), [3, 3]);
    }

    #[test]
    fn mixed_reads_and_writes_see_the_value_of_the_last_earlier_write() {
        let (rt, pool) = start(4);
        let h = variable(0, 0);
        let readers = Arc::new(AtomicUsize::new(0));
        let clashes = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let pause = || thread::sleep(core::time::Duration::from_millis(2));
        for round in 1..=5u64 {
            let (r, c) = (Arc::clone(&readers), Arc::clone(&clashes));
            let write = Codelet::new("write", move |b| {
                let mut v = b.w::<Variable<u64>>(0);
                if r.load(Ordering::SeqCst) != 0 {
                    c.fetch_add(1, Ordering::SeqCst);
                }
                pause();
                v.set(round);
            });
            rt.submit_task(write, vec![access(&h, AccessMode::RW)], 0, None, None);
            for _ in 0..3 {
                let (r, s) = (Arc::clone(&readers), Arc::clone(&seen));
                let read = Codelet::new("read", move |b| {
                    r.fetch_add(1, Ordering::SeqCst);
                    pause();
                    lock(&s).push((round, b.r::<Variable<u64>>(0).get()));
                    r.fetch_sub(1, Ordering::SeqCst);
                });
                rt.submit_task(read, vec![access(&h, AccessMode::R)], 0, None, None);
            }
        }
        finish(&rt, pool);
        let seen = lock(&seen).clone();
        assert_eq!(seen.len(), 15);
        for (round, value) in seen {
            assert_eq!(value, round, "a reader of round {round} saw {value}");
        }
        assert_eq!(
            clashes.load(Ordering::SeqCst),
            0,
            "a write ran during reads"
        );
    }

    #[test]
    fn ready_tasks_run_highest_priority_first_and_fifo_among_equals() {
        let (rt, pool) = start(1);
        let gate = Arc::new(Gate::default());
        let (started_tx, started) = mpsc::channel();
        let g = Arc::clone(&gate);
        let blocker = Codelet::new("blocker", move |_| {
            let _ = started_tx.send(());
            g.wait();
        });
        rt.submit_task(blocker, Vec::new(), 0, None, None);
        started.recv_timeout(TIMEOUT).expect("the blocker runs");

        let order = Arc::new(Mutex::new(Vec::new()));
        let priorities = [0, 5, 0, -1, 5, 7, 0, -1];
        for (i, p) in priorities.into_iter().enumerate() {
            let order = Arc::clone(&order);
            let task = Codelet::new("ranked", move |_| lock(&order).push(i));
            rt.submit_task(task, Vec::new(), p, None, None);
        }
        gate.open();
        finish(&rt, pool);
        assert_eq!(*lock(&order), [5, 1, 4, 0, 2, 6, 3, 7]);
    }

    #[test]
    fn the_callback_runs_after_the_kernel() {
        let (rt, pool) = start(2);
        let h = variable(0, 0);
        let set = Codelet::new("set", |b| b.w::<Variable<u64>>(0).set(9));
        let (tx, rx) = mpsc::channel();
        let cell = Arc::clone(&h);
        let callback = Box::new(move || {
            let _ = tx.send(cell.read().get());
        });
        rt.submit_task(
            set,
            vec![access(&h, AccessMode::W)],
            0,
            Some(callback),
            None,
        );
        assert_eq!(rx.recv_timeout(TIMEOUT), Ok(9));
        finish(&rt, pool);
    }

    #[test]
    fn disabled_kernels_complete_tasks_and_still_run_callbacks_and_tags() {
        let config = RuntimeConfig {
            workers: 2,
            disable_kernels: true,
            ..RuntimeConfig::default()
        };
        let (rt, pool) = Runtime::start(&config, "test");
        let h = variable(0, 0);
        let ran = Arc::new(AtomicUsize::new(0));
        let called = Arc::new(Mutex::new(Vec::new()));
        for i in 0..6 {
            let r = Arc::clone(&ran);
            let kernel = Codelet::new("never", move |b| {
                r.fetch_add(1, Ordering::SeqCst);
                b.w::<Variable<u64>>(0).set(1);
            });
            let c = Arc::clone(&called);
            let callback = Box::new(move || lock(&c).push(i));
            let tag = Some(TaskTag(i));
            rt.submit_task(
                kernel,
                vec![access(&h, AccessMode::RW)],
                0,
                Some(callback),
                tag,
            );
        }
        finish(&rt, pool);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a kernel ran");
        assert_eq!(h.read().get(), 0);
        assert_eq!(
            *lock(&called),
            [0, 1, 2, 3, 4, 5],
            "callbacks keep the order"
        );
        let tags: Vec<TaskTag> = (0..6).map(TaskTag).collect();
        within(move || rt.wait_tags(&tags));
    }

    /// Calls `wait_tags(tags)` on a new thread; the receiver hears when it returns.
    fn wait_tags_in_background(rt: &Runtime, tags: &[TaskTag]) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let (rt, tags) = (rt.clone(), tags.to_vec());
        thread::spawn(move || {
            rt.wait_tags(&tags);
            let _ = tx.send(());
        });
        rx
    }

    #[test]
    fn a_task_tag_unlocks_when_its_task_completes() {
        let (rt, pool) = start(1);
        let h = variable(0, 0);
        let gate = Arc::new(Gate::default());
        let g = Arc::clone(&gate);
        let slow = Codelet::new("slow", move |b| {
            g.wait();
            b.w::<Variable<u64>>(0).set(4);
        });
        let tag = TaskTag(7);
        rt.submit_task(slow, vec![access(&h, AccessMode::W)], 0, None, Some(tag));
        let waiter = wait_tags_in_background(&rt, &[tag]);
        assert!(
            waiter.recv_timeout(SETTLE).is_err(),
            "the tag unlocked early"
        );
        gate.open();
        waiter.recv_timeout(TIMEOUT).expect("the tag unlocks");
        assert_eq!(h.read().get(), 4, "the kernel is done when its tag unlocks");
        finish(&rt, pool);
    }

    #[test]
    fn waiting_for_several_tags_waits_for_all_of_them() {
        let (rt, pool) = start(1);
        let (a, b) = (TaskTag(1), TaskTag(2));
        rt.unlock_tag(a);
        let waiter = wait_tags_in_background(&rt, &[a, b]);
        assert!(waiter.recv_timeout(SETTLE).is_err(), "b is still locked");
        rt.submit_task(Codelet::empty("b"), Vec::new(), 0, None, Some(b));
        waiter.recv_timeout(TIMEOUT).expect("both tags unlock");
        finish(&rt, pool);
    }

    #[test]
    fn a_reset_tag_waits_for_its_next_unlock() {
        let (rt, pool) = start(1);
        let tag = TaskTag(3);
        rt.submit_task(Codelet::empty("t"), Vec::new(), 0, None, Some(tag));
        wait_tags_in_background(&rt, &[tag])
            .recv_timeout(TIMEOUT)
            .expect("the tag unlocks");
        rt.reset_tag(tag);
        let waiter = wait_tags_in_background(&rt, &[tag]);
        assert!(
            waiter.recv_timeout(SETTLE).is_err(),
            "the reset tag is locked"
        );
        rt.unlock_tag(tag);
        waiter.recv_timeout(TIMEOUT).expect("the tag unlocks again");
        finish(&rt, pool);
    }

    #[test]
    fn a_hook_nodes_successors_wait_until_it_is_completed() {
        let (rt, pool) = start(2);
        let h = variable(0, 0);
        let (tx, rx) = mpsc::channel();
        rt.submit_hook(
            vec![access(&h, AccessMode::W)],
            0,
            Box::new(move |id| {
                let _ = tx.send(id);
            }),
        );
        let hook = rx.recv_timeout(TIMEOUT).expect("the hook runs at once");
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let read = Codelet::new("read", move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        });
        rt.submit_task(read, vec![access(&h, AccessMode::R)], 0, None, None);
        assert!(
            !rt.wait_until(SETTLE, |v| v.completed > 0),
            "a node completed"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        rt.complete(hook);
        finish(&rt, pool);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_for_all_waits_for_hooks_and_requests() {
        let (rt, pool) = start(1);
        let (tx, rx) = mpsc::channel();
        rt.submit_hook(
            Vec::new(),
            0,
            Box::new(move |id| {
                let _ = tx.send(id);
            }),
        );
        let hook = rx.recv_timeout(TIMEOUT).expect("the hook runs at once");
        rt.begin_request();

        let (done_tx, done) = mpsc::channel();
        let rt2 = rt.clone();
        thread::spawn(move || {
            rt2.wait_for_all();
            let _ = done_tx.send(());
        });
        assert!(
            done.recv_timeout(SETTLE).is_err(),
            "returned with a hook pending"
        );
        rt.complete(hook);
        assert!(
            done.recv_timeout(SETTLE).is_err(),
            "returned with a request"
        );
        rt.end_request();
        done.recv_timeout(TIMEOUT).expect("wait_for_all returns");
        finish(&rt, pool);
    }
}

#[cfg(not(loom))]
mod public_api {
    use core::time::Duration;
    use std::sync::{Barrier, mpsc};
    use std::thread;

    use super::support::{SETTLE, TIMEOUT, within};
    use super::workers::append;
    use super::*;
    use crate::runtime::interfaces::Vector;
    use crate::runtime::task::TaskTag;
    use crate::sync::AtomicUsize;
    use crate::{ClusterConfig, Context, run_local_with};

    /// Runs `f` on a 1-rank cluster with 2 workers, bounded in time.
    fn on_one_rank<R: Send + 'static>(f: impl Fn(&Context) -> R + Send + Sync + 'static) -> R {
        let config = ClusterConfig {
            runtime: RuntimeConfig {
                workers: 2,
                disable_kernels: false,
                ..RuntimeConfig::default()
            },
            ..ClusterConfig::default()
        };
        within(move || {
            run_local_with(1, config, f)
                .expect("a clean shutdown")
                .pop()
                .expect("one rank")
        })
    }

    /// Sleeps a little, then sets the variable to `value`.
    fn slow_set(value: u64) -> Codelet {
        Codelet::new("slow_set", move |b| {
            thread::sleep(Duration::from_millis(30));
            b.w::<Variable<u64>>(0).set(value);
        })
    }

    #[test]
    fn acquire_waits_for_earlier_writers_and_holds_later_tasks_until_dropped() {
        let (acquired, held, after) = on_one_rank(|ctx| {
            let h = ctx.register(Variable::new(0u64));
            ctx.task(&slow_set(1)).w(&h).submit();
            let guard = ctx.acquire(&h, AccessMode::R);
            let acquired = guard.get().get();
            ctx.task(&slow_set(2)).w(&h).submit();
            thread::sleep(SETTLE);
            let held = guard.get().get();
            drop(guard);
            ctx.wait_for_all();
            let after = ctx.acquire(&h, AccessMode::R).get().get();
            (acquired, held, after)
        });
        assert_eq!(
            acquired, 1,
            "acquire returned before the earlier writer finished"
        );
        assert_eq!(held, 1, "a later writer ran while the handle was acquired");
        assert_eq!(after, 2);
    }

    #[test]
    fn acquiring_a_free_handle_takes_it_at_once_and_leaves_the_thread_no_stray_wake_up() {
        // With nothing pending, the acquisition's hook runs on the acquiring thread itself,
        // before it waits: it must not unpark that thread, whose next `park` (its own, or
        // the runtime's while it drives progress) would then return at once.
        let (value, parked) = on_one_rank(|ctx| {
            let h = ctx.register(Variable::new(7u64));
            let value = ctx.acquire(&h, AccessMode::R).get().get();
            let start = std::time::Instant::now();
            thread::park_timeout(SETTLE);
            (value, start.elapsed())
        });
        assert_eq!(value, 7);
        assert!(
            parked >= SETTLE,
            "a park after the acquisition returned after {parked:?}: a stray wake-up"
        );
    }

    #[test]
    fn acquire_cb_runs_once_earlier_accesses_are_done() {
        let (early, seen, last) = on_one_rank(|ctx| {
            let h = ctx.register(Variable::new(0u64));
            ctx.task(&slow_set(5)).w(&h).submit();
            let (tx, rx) = mpsc::channel();
            ctx.acquire_cb(&h, AccessMode::RW, move |a| {
                let v = a.get().get();
                a.get_mut().set(v + 1);
                let _ = tx.send(v);
            });
            let early = rx.try_recv().is_ok();
            let seen = rx.recv_timeout(TIMEOUT).expect("the callback runs");
            (early, seen, ctx.unregister(h).get())
        });
        assert!(
            !early,
            "acquire_cb ran its callback before the writer finished"
        );
        assert_eq!(seen, 5);
        assert_eq!(last, 6);
    }

    #[test]
    fn unregister_waits_for_pending_tasks_and_returns_the_data() {
        const N: u32 = 12;
        let data = on_one_rank(|ctx| {
            let h = ctx.register(Vector::<u32>::zeros(N as usize + 1));
            let overlaps = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
            for i in 0..N {
                ctx.task(&append(i, &overlaps)).rw(&h).submit();
            }
            ctx.unregister(h).into_vec()
        });
        let expected: Vec<u32> = core::iter::once(N).chain(0..N).collect();
        assert_eq!(data, expected);
    }

    #[test]
    fn tasks_on_a_handle_without_sequential_consistency_run_together() {
        on_one_rank(|ctx| {
            let h = ctx.register(Variable::new(0u64));
            ctx.set_sequential_consistency(&h, false);
            let barrier = Arc::new(Barrier::new(2));
            for _ in 0..2 {
                let barrier = Arc::clone(&barrier);
                let meet = Codelet::new("meet", move |_| {
                    barrier.wait();
                });
                ctx.task(&meet).rw(&h).submit();
            }
            ctx.wait_for_all();
        });
    }

    #[test]
    fn tag_wait_returns_once_the_tagged_task_is_done() {
        let value = on_one_rank(|ctx| {
            let h = ctx.register(Variable::new(0u64));
            ctx.task(&slow_set(8)).w(&h).tag(TaskTag(1)).submit();
            ctx.tag_wait(&[TaskTag(1)]);
            ctx.acquire(&h, AccessMode::R).get().get()
        });
        assert_eq!(value, 8);
    }
}

#[cfg(not(loom))]
mod config {
    use std::process::Command;

    use super::*;

    const VARS: [&str; 7] = [
        "STARLING_NCPU",
        "STARLING_DISABLE_KERNELS",
        "STARLING_SCHED",
        "STARLING_CALIBRATE",
        "STARLING_HOME",
        "STARLING_WORKER_SPEED",
        "STARLING_SCHED_STATS",
    ];
    const EXPECT: &str = "STARLING_TEST_EXPECT_CONFIG";

    /// Run by [`from_env_reads_ncpu_disable_kernels_and_the_scheduler_settings`] in a child process with its own
    /// environment (the crate forbids `unsafe`, so a test cannot `set_var`; a child also
    /// keeps the variables away from tests running in parallel).
    #[test]
    #[ignore = "a probe run by from_env_reads_ncpu_disable_kernels_and_the_scheduler_settings"]
    fn from_env_probe() {
        let Ok(expected) = std::env::var(EXPECT) else {
            return;
        };
        let c = RuntimeConfig::from_env();
        let mut got = format!("{} {}", c.workers, c.disable_kernels);
        if c.sched != crate::SchedPolicy::Prio
            || c.calibrate.is_some()
            || c.model_home.is_some()
            || !c.worker_speed.is_empty()
            || c.sched_stats
        {
            got += &format!(
                " {} {:?} {:?} {:?} {}",
                c.sched, c.calibrate, c.model_home, c.worker_speed, c.sched_stats
            );
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn from_env_reads_ncpu_disable_kernels_and_the_scheduler_settings() {
        let default = RuntimeConfig::default().workers;
        let cases: [(&[(&str, &str)], String); 8] = [
            (&[], format!("{default} false")),
            (&[("STARLING_NCPU", "3")], "3 false".into()),
            (&[("STARLING_NCPU", "0")], "1 false".into()),
            (&[("STARLING_NCPU", "lots")], format!("{default} false")),
            (
                &[("STARLING_NCPU", "2"), ("STARLING_DISABLE_KERNELS", "1")],
                "2 true".into(),
            ),
            (
                &[
                    ("STARLING_NCPU", "2"),
                    ("STARLING_SCHED", "dmda"),
                    ("STARLING_CALIBRATE", "2"),
                    ("STARLING_HOME", "/tmp/models"),
                    ("STARLING_WORKER_SPEED", "100, 50,0,x"),
                    ("STARLING_SCHED_STATS", "1"),
                ],
                "2 false dmda Some(Reset) Some(\"/tmp/models\") [100, 50, 1, 100] true".into(),
            ),
            (
                &[("STARLING_NCPU", "2"), ("STARLING_SCHED", "ws")],
                "2 false ws None None [] false".into(),
            ),
            (
                &[
                    ("STARLING_NCPU", "2"),
                    ("STARLING_SCHED", "fastest"),
                    ("STARLING_CALIBRATE", "yes"),
                ],
                "2 false".into(),
            ),
        ];
        let exe = std::env::current_exe().expect("the test binary");
        for (vars, expected) in cases {
            let mut probe = Command::new(&exe);
            probe
                .args(["--exact", "runtime::task::tests::config::from_env_probe"])
                .args(["--ignored", "--test-threads=1"])
                .env(EXPECT, &expected);
            for v in VARS {
                probe.env_remove(v);
            }
            probe.envs(vars.iter().copied());
            let out = probe.output().expect("running the probe");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "with {vars:?}, expected {expected}:\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Model checks of the dependency queue under `loom`: every interleaving of submitting
/// and completing nodes on one handle from two threads with one worker (a read or a
/// write submitted on one thread after a writer that another completes; `wait_for_all`
/// racing the completion), and a writer then a reader on two workers. Each model fails
/// on a wrong order and, through loom's deadlock detection, on a lost wake-up.
///
/// Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p
/// starling-std --release --lib loom` (a few seconds).
#[cfg(loom)]
mod loom_model {
    use loom::thread;

    use super::super::NodeId;
    use super::*;
    use crate::sync::{Mutex, lock};

    const R: AccessMode = AccessMode::R;
    const W: AccessMode = AccessMode::W;

    fn one_worker() -> RuntimeConfig {
        RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        }
    }

    /// Submits a writer hook on `h` with no predecessor and returns its node id.
    fn started_writer(rt: &Runtime, h: &Arc<Cell<Variable<u64>>>) -> NodeId {
        let id = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&id);
        rt.submit_hook(
            vec![access(h, W)],
            0,
            Box::new(move |n| *lock(&slot) = Some(n)),
        );
        lock(&id).expect("a writer with no predecessor starts at once")
    }

    #[test]
    fn loom_a_read_submitted_on_another_thread_sees_the_write_completed_here() {
        loom::model(|| {
            let (rt, workers) = Runtime::start(&one_worker(), "loom");
            let h = variable(0, 0);
            let w = started_writer(&rt, &h);
            let seen = Arc::new(Mutex::new(None));
            let reader = {
                let (rt, h, seen) = (rt.clone(), Arc::clone(&h), Arc::clone(&seen));
                thread::spawn(move || {
                    let read = Codelet::new("read", move |b| {
                        *lock(&seen) = Some(b.r::<Variable<u64>>(0).get());
                    });
                    rt.submit_task(read, vec![access(&h, R)], 0, None, None);
                })
            };
            h.write().set(7);
            rt.complete(w);
            reader.join().expect("the reader thread");
            rt.wait_for_all();
            assert_eq!(*lock(&seen), Some(7));
            workers.stop();
        });
    }

    #[test]
    fn loom_a_write_submitted_on_another_thread_runs_after_the_write_completed_here() {
        loom::model(|| {
            let (rt, workers) = Runtime::start(&one_worker(), "loom");
            let h = variable(0, 0);
            let w1 = started_writer(&rt, &h);
            let log = Arc::new(Mutex::new(Vec::new()));
            let second = {
                let (rt, h, log) = (rt.clone(), Arc::clone(&h), Arc::clone(&log));
                thread::spawn(move || {
                    let write = Codelet::new("w2", move |b| {
                        b.w::<Variable<u64>>(0).set(2);
                        lock(&log).push("w2");
                    });
                    rt.submit_task(write, vec![access(&h, AccessMode::RW)], 0, None, None);
                })
            };
            lock(&log).push("w1");
            rt.complete(w1);
            second.join().expect("the second writer's thread");
            rt.wait_for_all();
            assert_eq!(*lock(&log), ["w1", "w2"]);
            assert_eq!(h.read().get(), 2);
            workers.stop();
        });
    }

    #[test]
    fn loom_wait_for_all_returns_once_another_thread_completes_the_writer() {
        loom::model(|| {
            let (rt, workers) = Runtime::start(&one_worker(), "loom");
            let h = variable(0, 0);
            let w1 = started_writer(&rt, &h);
            let log = Arc::new(Mutex::new(Vec::new()));
            {
                // A second writer hook that completes itself when it starts.
                let (rt2, log) = (rt.clone(), Arc::clone(&log));
                rt.submit_hook(
                    vec![access(&h, W)],
                    0,
                    Box::new(move |id| {
                        lock(&log).push("w2");
                        rt2.complete(id);
                    }),
                );
            }
            let completer = {
                let (rt, log) = (rt.clone(), Arc::clone(&log));
                thread::spawn(move || {
                    lock(&log).push("w1");
                    rt.complete(w1);
                })
            };
            rt.wait_for_all();
            assert_eq!(*lock(&log), ["w1", "w2"]);
            completer.join().expect("the completer thread");
            workers.stop();
        });
    }

    /// Two workers make the full state space too large: this model bounds preemptions
    /// (at most three preemptions per run), which keeps the lost-wakeup cases.
    #[test]
    fn loom_two_workers_run_a_reader_after_its_writer() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let config = RuntimeConfig {
                workers: 2,
                disable_kernels: false,
                ..RuntimeConfig::default()
            };
            let (rt, workers) = Runtime::start(&config, "loom");
            let h = variable(0, 0);
            let seen = Arc::new(Mutex::new(None));
            let write = Codelet::new("write", |b| b.w::<Variable<u64>>(0).set(5));
            rt.submit_task(write, vec![access(&h, W)], 0, None, None);
            let s = Arc::clone(&seen);
            let read = Codelet::new("read", move |b| {
                *lock(&s) = Some(b.r::<Variable<u64>>(0).get());
            });
            rt.submit_task(read, vec![access(&h, R)], 0, None, None);
            rt.wait_for_all();
            assert_eq!(*lock(&seen), Some(5));
            workers.stop();
        });
    }
}

#[cfg(not(loom))]
#[test]
fn buffers_name_each_handle_and_version_its_writes() {
    use crate::runtime::data::AnyCell;
    let a = variable(0, 1);
    // The same id, another handle (as another rank's): another uid.
    let b = variable(0, 1);
    let accesses = [access(&a, AccessMode::RW), access(&b, AccessMode::R)];
    let bufs = super::Buffers {
        accesses: &accesses,
    };
    assert_ne!(bufs.uid(0), bufs.uid(1));
    assert!(bufs.is::<Variable<u64>>(0));
    assert!(!bufs.is::<Variable<f64>>(0));
    assert!(!bufs.is::<Variable<u64>>(2));
    let (v0, v1) = (bufs.version(0), bufs.version(1));
    assert_eq!(bufs.r::<Variable<u64>>(0).get(), 1);
    assert_eq!(bufs.version(0), v0, "a read keeps the version");
    bufs.w::<Variable<u64>>(0).set(2);
    let written = bufs.version(0);
    assert!(written > v0, "a write takes a fresh version");
    assert_eq!(bufs.version(1), v1);
    AnyCell::unpack(&*a, &5u64.to_le_bytes()).unwrap();
    assert!(bufs.version(0) > written, "a receive takes a fresh version");
    assert_eq!(bufs.r::<Variable<u64>>(0).get(), 5);
}

/// A node whose transfer failed poisons what it wrote: the tasks that read it do not run,
/// nor the tasks that read what they would have written; a plain write heals the datum.
#[cfg(not(loom))]
mod poison {
    use std::sync::Mutex;

    use starling_core::{Rank, Tag};

    use super::support::{Hooks, finish, start};
    use super::*;
    use crate::error::{CommError, TransferDirection, TransferError};
    use crate::sync::lock;

    const R: AccessMode = AccessMode::R;
    const W: AccessMode = AccessMode::W;
    const RW: AccessMode = AccessMode::RW;

    fn failure(data: u32) -> TransferError {
        TransferError {
            data: DataId(data),
            peer: Rank(1),
            tag: Tag(5),
            direction: TransferDirection::Recv,
            cause: CommError::Stalled {
                explanation: "planted".into(),
            },
        }
    }

    /// A receive into `x`, started and held until the test fails or completes it: its
    /// node's id.
    fn held_receive(rt: &Runtime, x: &Arc<Cell<Variable<u64>>>) -> super::super::NodeId {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.submit_hook(
            vec![access(x, W)],
            0,
            Box::new(move |id| tx.send(id).unwrap()),
        );
        rx.recv().unwrap()
    }

    /// A task that logs its name when it runs.
    fn logged(log: &Arc<Mutex<Vec<&'static str>>>, name: &'static str) -> Codelet {
        let log = Arc::clone(log);
        Codelet::new(name, move |_| lock(&log).push(name))
    }

    #[test]
    fn readers_of_a_failed_receive_and_their_successors_do_not_run_and_a_write_heals() {
        let (rt, workers) = start(1);
        let log = Arc::new(Mutex::new(Vec::new()));
        let x = variable(0, 0);
        let y = variable(1, 0);
        let z = variable(2, 0);
        let recv = held_receive(&rt, &x);
        let log_cb = Arc::clone(&log);
        // y = f(x), then z = g(y): both poisoned. An unrelated task on z's sibling runs.
        rt.submit_task(
            logged(&log, "reads x"),
            vec![access(&y, W), access(&x, R)],
            0,
            Some(Box::new(move || lock(&log_cb).push("callback"))),
            None,
        );
        rt.submit_task(
            logged(&log, "reads y"),
            vec![access(&z, RW), access(&y, R)],
            0,
            None,
            None,
        );
        rt.fail(recv, failure(0));
        assert!(rt.wait_until(support::TIMEOUT, |v| v.outstanding == 0));
        assert_eq!(rt.failures(), (vec![Arc::new(failure(0))], 2));
        // Submitted after the failure completed: still poisoned (no writer pending).
        rt.submit_task(
            logged(&log, "reads x later"),
            vec![access(&x, R)],
            0,
            None,
            None,
        );
        // A plain write replaces the stale value; what reads after it runs.
        rt.submit_task(logged(&log, "writes x"), vec![access(&x, W)], 0, None, None);
        rt.submit_task(
            logged(&log, "reads x healed"),
            vec![access(&x, R)],
            0,
            None,
            None,
        );
        assert!(rt.wait_until(support::TIMEOUT, |v| v.outstanding == 0));
        assert_eq!(*lock(&log), ["writes x", "reads x healed"]);
        assert_eq!(rt.failures().1, 3);
        assert!(rt.data_poison(DataId(0)).is_none());
        assert_eq!(rt.data_poison(DataId(1)), Some(Arc::new(failure(0))));
        assert_eq!(rt.data_poison(DataId(2)), Some(Arc::new(failure(0))));
        finish(&rt, workers);
    }

    #[test]
    fn a_tasks_outcome_is_read_by_its_id_even_after_its_slot_is_taken_again() {
        use crate::error::TaskError;
        let (rt, workers) = start(1);
        let x = variable(0, 0);
        let recv = held_receive(&rt, &x);
        let skipped = rt.submit_task(
            Codelet::empty("reads x"),
            vec![access(&x, R)],
            0,
            None,
            None,
        );
        assert!(rt.task_outcome(skipped).is_none(), "not complete yet");
        rt.fail(recv, failure(0));
        assert!(rt.wait_until(support::TIMEOUT, |v| v.outstanding == 0));
        let ran = rt.submit_task(
            Codelet::empty("writes x"),
            vec![access(&x, W)],
            0,
            None,
            None,
        );
        // More tasks than slots were freed: every freed slot is taken again, with its
        // generation raised.
        for _ in 0..64 {
            rt.submit_task(Codelet::empty("more"), vec![access(&x, RW)], 0, None, None);
        }
        assert!(rt.wait_until(support::TIMEOUT, |v| v.outstanding == 0));
        match rt.wait_outcome(skipped) {
            Err(TaskError::Upstream(e)) => assert_eq!(*e, failure(0)),
            other => panic!("expected the failed transfer, got {other:?}"),
        }
        assert!(matches!(rt.task_outcome(ran), Some(Ok(()))));
        finish(&rt, workers);
    }

    #[test]
    fn a_hook_after_a_poisoned_value_sees_the_poison_and_a_writer_hook_does_not() {
        let hooks = Hooks::new();
        let x = variable(0, 0);
        hooks.submit("recv", vec![access(&x, W)]);
        hooks.submit("send", vec![access(&x, R)]);
        hooks.submit("recv again", vec![access(&x, W)]);
        assert_eq!(hooks.started(), ["recv"]);
        hooks.fail("recv", failure(0));
        assert_eq!(hooks.started(), ["recv", "send"]);
        assert_eq!(hooks.poison_of("send"), Some(Arc::new(failure(0))));
        hooks.complete("send");
        assert_eq!(hooks.poison_of("recv again"), None);
        hooks.finish();
    }
}
