//! Model checks, under `loom`, of the progression thread's hand-offs: its inbox
//! ([`InboxTx`] and the loop of [`run`]), its wake-up (`Shared::wake` and the park in
//! [`run`]), caller-driven progress ([`Drive::enter`], [`Drive::try_drive`],
//! [`DriverGuard`](super::DriverGuard)'s drop and `hand_back`, and the progression thread
//! standing back while `drivers > 0`), a send posted straight into the engine
//! ([`Drive::post`], with and without multiple-send) and the quiescence witness
//! ([`Shared::settled`]) that the in-process cluster reads at shutdown.
//!
//! Each model runs the real [`start`] and [`run`] on a progression thread, with a
//! transport that only counts (`Probe`). Under `loom` the thread parks without a timeout
//! (`sync::park_timeout`): an input left in the inbox with the thread parked and nobody
//! to wake it is a deadlock, which `loom` reports. Two substitutions, both in `sync`:
//! the drive lock is a compare-and-swap flag around `loom`'s mutex (`loom`'s `try_lock`
//! is broken), and a `SeqCst` fence stands where the code relies on two `SeqCst`
//! accesses being ordered (`loom` models them as `AcqRel`). Run with `RUSTFLAGS="--cfg
//! loom" CARGO_TARGET_DIR=target/loom cargo test -p starling-std --release --lib loom`.

use core::mem::ManuallyDrop;

use loom::sync::mpsc;
use starling_core::tags::{DEFAULT_BASE, MIN_TAG_UB, TagSpace};
use starling_core::{CommId, PhysTag, Rank, ReqId, Tag};

use super::driver::Driver;
use super::{Command, Drive, Driven, InboxTx, Input, ProgressConfig, Shared, run, start};
use crate::io::in_process::{Deliver, InProcess, InProcessWire};
use crate::io::progress::config::DriverMode;
use crate::io::transport::{Completion, Transport};
use crate::runtime::task::{Codelet, Runtime, RuntimeConfig};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, inbox, lock, thread};

/// A transport that takes `()` from peers and reports each on `delivered` (and counts
/// them in `accepted`), and counts what it is asked to send in `sent`. With `inside` it checks that no two threads are
/// in it (drive the engine) at once.
struct Probe {
    delivered: mpsc::Sender<()>,
    inside: Option<Arc<AtomicBool>>,
    sent: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

impl Probe {
    fn enter(&self) {
        if let Some(inside) = &self.inside {
            assert!(
                !inside.swap(true, Ordering::SeqCst),
                "two threads drive the engine at once"
            );
        }
    }

    fn leave(&self) {
        if let Some(inside) = &self.inside {
            inside.store(false, Ordering::SeqCst);
        }
    }
}

impl Transport for Probe {
    type Wire = ();

    fn rank(&self) -> Rank {
        Rank(0)
    }
    fn size(&self) -> u32 {
        1
    }
    fn tag_ub(&self) -> i32 {
        MIN_TAG_UB
    }
    fn set_envelope_tag(&mut self, _tag: PhysTag) {}
    fn send(&mut self, _: Rank, _: CommId, _: PhysTag, _: Vec<u8>, _: Option<ReqId>) {
        self.enter();
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.leave();
    }
    fn recv(&mut self, _: Rank, _: CommId, _: PhysTag, _: usize, _: ReqId) {
        unreachable!("the models receive nothing");
    }
    fn barrier(&mut self, _token: u64) {
        unreachable!("the models post no barrier");
    }
    fn accept(&mut self, (): ()) {
        self.enter();
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let _ = self.delivered.send(());
        self.leave();
    }
    fn poll(&mut self) -> Option<Completion> {
        self.enter();
        self.leave();
        None
    }
    fn needs_polling(&self) -> bool {
        false
    }
}

/// A rank's progression thread over a [`Probe`]: its inbox's sender, what it shares, its
/// driver (once started) and the thread, which runs until [`Command::Stop`].
struct Rank0 {
    tx: Arc<InboxTx<()>>,
    shared: Arc<Shared>,
    /// What the transport was asked to send.
    sent: Arc<AtomicUsize>,
    /// The inputs the transport took.
    accepted: Arc<AtomicUsize>,
    /// Dropped only once the thread stopped (`loom`'s receiver drains itself on drop,
    /// which a model that failed cannot do).
    driver: ManuallyDrop<mpsc::Receiver<Arc<Driver<Probe>>>>,
    thread: thread::JoinHandle<()>,
}

/// The progression thread's configuration in the models (multiple-send on, as by
/// default).
fn config(driver: Option<DriverMode>) -> ProgressConfig {
    ProgressConfig {
        tags: TagSpace::with_base(DEFAULT_BASE, MIN_TAG_UB).expect("the default tags fit"),
        stats: false,
        trace: false,
        priorities: true,
        max_inflight_sends: 0,
        driver,
        in_place_min: usize::MAX,
        timeline: None,
        multiple_send: true,
        eager_limit: crate::RankConfig::DEFAULT_EAGER_LIMIT,
        fast_limit: 0,
        tables: crate::io::progress::config::Tables::DEFAULT,
    }
}

fn rank0(
    delivered: mpsc::Sender<()>,
    inside: Option<Arc<AtomicBool>>,
    driver_mode: Option<DriverMode>,
) -> Rank0 {
    rank0_with(delivered, inside, config(driver_mode))
}

fn rank0_with(
    delivered: mpsc::Sender<()>,
    inside: Option<Arc<AtomicBool>>,
    config: ProgressConfig,
) -> Rank0 {
    let (tx, rx) = inbox();
    let shared = Arc::new(Shared::new());
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&sent);
    let accepted = Arc::new(AtomicUsize::new(0));
    let taken = Arc::clone(&accepted);
    let (driver_tx, driver) = mpsc::channel();
    let pshared = Arc::clone(&shared);
    let thread = thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(move || {
            let transport = Probe {
                delivered,
                inside,
                sent: counted,
                accepted: taken,
            };
            let d = start(transport, rx, config, pshared);
            let _ = driver_tx.send(Arc::clone(&d));
            run(&d);
        })
        .expect("the progression thread");
    Rank0 {
        tx: Arc::new(InboxTx::new(tx, Arc::clone(&shared))),
        shared,
        sent,
        accepted,
        driver: ManuallyDrop::new(driver),
        thread,
    }
}

impl Rank0 {
    fn stop(self) {
        self.tx.send(Input::Command(Command::Stop));
        self.thread.join().expect("the progression thread");
        drop(ManuallyDrop::into_inner(self.driver));
    }
}

/// Runs `f` under every interleaving, with at most `preemptions` preemptions each when
/// bounded, and says how many it ran (seen with `--nocapture`).
pub(crate) fn explore(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = preemptions;
    let runs = Arc::new(core::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    model.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "{}: {} interleavings (preemption bound {preemptions:?})",
        std::thread::current().name().unwrap_or("model"),
        runs.load(Ordering::Relaxed)
    );
}

#[test]
fn loom_an_input_sent_as_the_progression_thread_parks_is_taken() {
    explore(None, || {
        let (delivered, arrivals) = mpsc::channel();
        let rank = rank0(delivered, None, None);
        // Sent at any point of the thread's start, drive or park: it must be taken (a
        // lost wake-up leaves this thread blocked and the other parked: a deadlock).
        rank.tx.send(Input::Net(()));
        arrivals.recv().expect("the input is taken");
        rank.stop();
    });
}

/// How a thread that drove progress stops.
#[derive(Clone, Copy)]
enum Leave {
    /// Drops its guard (`Request::test`): it wakes the progression thread only if inputs
    /// are queued.
    Drop,
    /// Hands back (`context::drive_until`): it always wakes the progression thread.
    HandBack,
}

/// A thread drives the rank's progress once (as `Request::test` does, or a wait before it
/// sleeps) while a peer delivers an input: the input is taken, by the driving thread or by
/// the progression thread, and never by both at once (`Probe` checks the transport is
/// entered by one thread at a time).
fn a_driver_and_the_progression_thread_take_turns(leave: Leave) {
    explore(Some(4), move || {
        let (delivered, arrivals) = mpsc::channel();
        let rank = rank0(delivered, Some(Arc::new(AtomicBool::new(false))), None);
        let peer = {
            let tx = Arc::clone(&rank.tx);
            thread::spawn(move || tx.send(Input::Net(())))
        };
        let d = rank.driver.recv().expect("the driver");
        let guard = d.enter();
        d.try_drive();
        match leave {
            Leave::Drop => drop(guard),
            Leave::HandBack => guard.hand_back(),
        }
        // Whoever took it: it arrives (left behind by the driver with the progression
        // thread parked, it never would: a deadlock).
        arrivals.recv().expect("the input is taken");
        peer.join().expect("the peer");
        drop(d);
        rank.stop();
    });
}

#[test]
fn loom_an_input_queued_as_a_driver_drops_its_guard_is_taken() {
    a_driver_and_the_progression_thread_take_turns(Leave::Drop);
}

#[test]
fn loom_an_input_queued_as_a_driver_hands_back_is_taken() {
    a_driver_and_the_progression_thread_take_turns(Leave::HandBack);
}

/// A waiting thread drives until its input is taken (as `drive_until` does), its first
/// drives finding nothing: an input a peer queues at any point of that is taken by the
/// waiter (the progression thread stands back while the waiter drives: a drive that
/// missed it for good would leave the waiter spinning for ever, which `loom` reports).
/// A shortcut that skipped drives on a rank known to be quiet (tried: a flag set by a
/// drive that found nothing, read with `queued` and `posted`) fails this model if it
/// ignores `queued`.
#[test]
fn loom_a_waiter_whose_drives_found_nothing_takes_an_input_queued_meanwhile() {
    explore(Some(3), || {
        let (delivered, _arrivals) = mpsc::channel();
        let rank = rank0(delivered, Some(Arc::new(AtomicBool::new(false))), None);
        let d = rank.driver.recv().expect("the driver");
        let guard = d.enter();
        let peer = {
            let tx = Arc::clone(&rank.tx);
            thread::spawn(move || tx.send(Input::Net(())))
        };
        while rank.accepted.load(Ordering::SeqCst) == 0 {
            if d.try_drive() != Driven::Progressed {
                thread::yield_now();
            }
        }
        drop(guard);
        peer.join().expect("the peer");
        drop(d);
        rank.stop();
    });
}

/// A send of 8 bytes to rank 0 with tag 1, its outcome ignored: what the models post.
fn eight_byte_send() -> Command {
    Command::Send {
        args: starling_core::engine::SendArgs::new(CommId::WORLD, Rank(0), Tag(1), 8),
        bytes: super::Payload::Bytes(vec![7; 8]),
        done: super::Done::new(|_| {}),
    }
}

/// A thread posts a send straight into the engine ([`Drive::post`]; into the inbox when
/// the progression lock is taken) while the progression thread runs. With multiple-send
/// the posting thread hands it to the transport itself; without, the progression thread
/// does. Either way the transport is asked to send it exactly once, by one thread at a
/// time, and soon: a send left in the engine with the progression thread parked would
/// never leave (a deadlock, which `loom` reports).
fn a_posted_send_leaves_once(multiple_send: bool) {
    explore(Some(3), move || {
        let (delivered, _arrivals) = mpsc::channel();
        let mut c = config(None);
        c.multiple_send = multiple_send;
        let rank = rank0_with(delivered, Some(Arc::new(AtomicBool::new(false))), c);
        let d = rank.driver.recv().expect("the driver");
        if let Err(send) = d.post(eight_byte_send()) {
            rank.tx.send(Input::Command(send));
        }
        while rank.sent.load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
        drop(d);
        let sent = Arc::clone(&rank.sent);
        rank.stop();
        assert_eq!(sent.load(Ordering::SeqCst), 1, "the envelope is sent once");
    });
}

#[test]
fn loom_a_send_posted_with_multiple_send_leaves_once() {
    a_posted_send_leaves_once(true);
}

#[test]
fn loom_a_send_posted_without_multiple_send_leaves_once() {
    a_posted_send_leaves_once(false);
}

/// Rank 0's progression thread, its driver registered for peer driving
/// ([`Shared::set_driver`], as a rank's start does).
fn peer_drivable(rank: &Rank0) -> Arc<Driver<Probe>> {
    let d = rank.driver.recv().expect("the driver");
    let drive: Arc<dyn Drive> = d.clone();
    rank.shared.set_driver(&drive);
    d
}

/// What runs on a thread of its own beside a peer's input, with rank 0's driver and inbox.
type Beside = fn(Arc<Driver<Probe>>, Arc<InboxTx<()>>);

/// Another rank's worker hands rank 0 an input and, allowed to
/// (`sync::with_peer_drive`, granted here by `sync::model_peer_drive`), tries to drive
/// rank 0 itself (`InboxTx::send`), while rank 0's progression thread runs and `beside`,
/// if any, runs on a thread of its own: the input is taken (an input left with the
/// progression thread parked is a deadlock, which `loom` reports), the transport is never
/// entered by two threads at once (`Probe`), and it is asked to send `sends` messages.
fn a_peer_input_is_taken(preemptions: Option<usize>, beside: Option<Beside>, sends: usize) {
    explore(preemptions, move || {
        let (delivered, arrivals) = mpsc::channel();
        let rank = rank0(delivered, Some(Arc::new(AtomicBool::new(false))), None);
        let d = peer_drivable(&rank);
        let other = beside.map(|f| {
            let (d, tx) = (Arc::clone(&d), Arc::clone(&rank.tx));
            thread::spawn(move || f(d, tx))
        });
        crate::sync::model_peer_drive(|| rank.tx.send(Input::Net(())));
        arrivals.recv().expect("the input is taken");
        if let Some(t) = other {
            t.join().expect("the thread beside");
        }
        while rank.sent.load(Ordering::SeqCst) < sends {
            thread::yield_now();
        }
        drop(d);
        let sent = Arc::clone(&rank.sent);
        rank.stop();
        assert_eq!(sent.load(Ordering::SeqCst), sends, "each send leaves once");
    });
}

/// [`a_peer_input_is_taken`] with the progression thread alone beside the peer: it runs,
/// drives (a checked holder: `Shared::checked_holder` raised) or parks; when the peer
/// finds the lock held by it, the peer wakes nobody, and the input is taken all the same.
/// A progression thread that let go without looking at `queued` would park with the input
/// left.
#[test]
fn loom_an_input_a_peer_drives_as_the_progression_thread_runs_is_taken() {
    a_peer_input_is_taken(None, None, 0);
}

/// [`a_peer_input_is_taken`] while an application thread of rank 0 drives once and leaves
/// (`Drive::enter`, `Drive::try_drive`, the guard's drop: the progression thread stands
/// back meanwhile): whichever holds the lock when the input comes — the application
/// thread, not a checked holder, or the progression thread, a checked one — the input is
/// taken.
#[test]
fn loom_an_input_a_peer_drives_while_an_application_thread_drives_is_taken() {
    a_peer_input_is_taken(
        Some(3),
        Some(|d, _| {
            let _guard = d.enter();
            d.try_drive();
        }),
        0,
    );
}

/// [`a_peer_input_is_taken`] while a worker posts a send and drives it out itself
/// ([`Drive::post`] with the permission of `sync::with_peer_drive`: a checked holder from
/// the post on): the input is taken, and the send leaves once. A checked holder that let
/// go without taking what came in meanwhile, or waking the progression thread for it,
/// would leave the input behind.
#[test]
fn loom_an_input_left_to_a_worker_driving_its_post_is_taken() {
    a_peer_input_is_taken(
        Some(3),
        Some(|d, tx| {
            crate::sync::model_peer_drive(|| {
                if let Err(send) = d.post(eight_byte_send()) {
                    tx.send(Input::Command(send));
                }
            });
        }),
        1,
    );
}

/// Two application threads drive at once (`drivers` reaches 2) while a peer delivers:
/// only the last to leave may find the input left behind, and it wakes the progression
/// thread.
#[test]
fn loom_an_input_queued_as_two_drivers_leave_is_taken() {
    explore(Some(4), || {
        let (delivered, arrivals) = mpsc::channel();
        let rank = rank0(delivered, Some(Arc::new(AtomicBool::new(false))), None);
        let d = rank.driver.recv().expect("the driver");
        let other = {
            let d = Arc::clone(&d);
            thread::spawn(move || {
                let _guard = d.enter();
                d.try_drive();
            })
        };
        let guard = d.enter();
        rank.tx.send(Input::Net(()));
        drop(guard);
        arrivals.recv().expect("the input is taken");
        other.join().expect("the other driver");
        drop(d);
        rank.stop();
    });
}

/// The cluster's shutdown reads each rank's [`Shared::settled`] twice, a grace period
/// apart, and takes two equal witnesses for "nothing can move". An input is counted in
/// `queued` from before it can be taken until after it is handled, and handling it
/// changes the witness: an observer never sees equal witnesses around its handling.
#[test]
fn loom_an_input_handled_between_two_witnesses_changes_them() {
    explore(Some(4), || {
        let (delivered, _arrivals) = mpsc::channel();
        let rank = rank0(delivered, None, None);
        let handled = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = mpsc::channel();
        let sender = {
            let tx = Arc::clone(&rank.tx);
            let shared = Arc::clone(&rank.shared);
            let handled = Arc::clone(&handled);
            thread::spawn(move || {
                let reply = move |_: u64| {
                    assert_ne!(
                        shared.queued.load(Ordering::SeqCst),
                        0,
                        "an input is handled while not counted as queued"
                    );
                    handled.store(true, Ordering::SeqCst);
                    let _ = done_tx.send(());
                };
                tx.send(Input::Command(Command::EarlyMessages(Box::new(reply))));
            })
        };
        let first = rank.shared.settled();
        let before = handled.load(Ordering::SeqCst);
        let after = handled.load(Ordering::SeqCst);
        let second = rank.shared.settled();
        if first.is_some() && !before && after {
            assert_ne!(first, second, "equal witnesses around the input's handling");
        }
        done.recv().expect("the input is handled");
        sender.join().expect("the sender");
        rank.stop();
    });
}

/// Driver mode: the progression thread also runs the rank's tasks, and the runtime wakes it
/// when one becomes ready (`Runtime::set_on_ready`, as `rank.rs` sets it). A task
/// submitted while the thread looks for one, drives or parks is run.
#[test]
fn loom_a_task_ready_as_the_driver_mode_thread_parks_is_run() {
    explore(Some(4), || {
        let (delivered, _arrivals) = mpsc::channel();
        let mode = DriverMode {
            call_frequency: 1,
            task_frequency: 1,
        };
        let rank = rank0(delivered, None, Some(mode));
        // No worker thread: the progression thread takes the only worker's place.
        let config = RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        };
        let (runtime, workers) = Runtime::start_threads(&config, "loom", 0, None);
        let waker = Arc::clone(&rank.shared);
        runtime.set_on_ready(Box::new(move || waker.wake()));
        let _ = rank.shared.runtime.set(runtime.clone());
        let (ran_tx, ran) = mpsc::channel();
        let kernel = Codelet::new("task", move |_| {
            let _ = ran_tx.send(());
        });
        runtime.submit_task(kernel, Vec::new(), 0, None, None);
        ran.recv().expect("the task ran");
        runtime.wait_for_all();
        rank.stop();
        workers.stop();
    });
}

/// The real in-process transport of the quiescence model's receiving rank, which says
/// when it accepted a message (after `InProcess::accept` uncounted it from `in_flight`).
struct Flagged {
    inner: InProcess,
    handled: Arc<AtomicBool>,
}

impl Transport for Flagged {
    type Wire = InProcessWire;

    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn tag_ub(&self) -> i32 {
        self.inner.tag_ub()
    }
    fn set_envelope_tag(&mut self, tag: PhysTag) {
        self.inner.set_envelope_tag(tag);
    }
    fn send(&mut self, dest: Rank, comm: CommId, tag: PhysTag, bytes: Vec<u8>, t: Option<ReqId>) {
        self.inner.send(dest, comm, tag, bytes, t);
    }
    fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, size: usize, token: ReqId) {
        self.inner.recv(source, comm, tag, size, token);
    }
    fn barrier(&mut self, token: u64) {
        self.inner.barrier(token);
    }
    fn accept(&mut self, wire: InProcessWire) {
        self.inner.accept(wire);
        self.handled.store(true, Ordering::SeqCst);
    }
    fn poll(&mut self) -> Option<Completion> {
        self.inner.poll()
    }
    fn needs_polling(&self) -> bool {
        self.inner.needs_polling()
    }
}

/// Shutdown quiescence (`cluster.rs`'s `Quiesce::stuck`, run for real over two ranks'
/// real witnesses): rank 0 sends a message to rank 1 through the real in-process
/// transport (`InProcess::send`: counted in the cluster's `in_flight`, queued in rank
/// 1's inbox by `InboxTx::send`), rank 1's real progression thread takes and accepts it,
/// and a third thread asks whether the cluster is stuck (both ranks at shutdown, no task
/// anywhere). Once the send has returned, the cluster must not be declared stuck until
/// rank 1 has accepted the message; once everything is handled, it is.
#[test]
fn loom_the_cluster_is_not_stuck_while_a_message_is_in_flight_or_queued() {
    explore(Some(3), || {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = inbox();
        let shared = Arc::new(Shared::new());
        let to_rank1 = InboxTx::new(tx.clone(), Arc::clone(&shared));
        let nowhere: Deliver = Arc::new(|_| unreachable!("rank 0 receives nothing"));
        let rank1: Deliver = Arc::new(move |w| to_rank1.send(Input::Net(w)));
        let peers = vec![nowhere, rank1];

        let handled = Arc::new(AtomicBool::new(false));
        let (driver_tx, driver) = mpsc::channel();
        // Dropped only once the thread stopped (see `Rank0::driver`).
        let driver = ManuallyDrop::new(driver);
        let thread = {
            let transport = Flagged {
                inner: InProcess::new(Rank(1), peers.clone(), MIN_TAG_UB, Arc::clone(&in_flight)),
                handled: Arc::clone(&handled),
            };
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .stack_size(16 << 20)
                .spawn(move || {
                    let d = start(transport, rx, config(None), shared);
                    let _ = driver_tx.send(Arc::clone(&d));
                    run(&d);
                })
                .expect("rank 1's progression thread")
        };

        // Both ranks at shutdown, with runtimes that have no task.
        let quiesce = crate::launch::cluster::Quiesce::new(2, Arc::clone(&in_flight));
        let idle = RuntimeConfig {
            workers: 0,
            ..RuntimeConfig::default()
        };
        let (runtime0, workers0) = Runtime::start_threads(&idle, "loom0", 0, None);
        let (runtime1, workers1) = Runtime::start_threads(&idle, "loom1", 0, None);
        lock(&quiesce.probes).push((runtime0, Arc::new(Shared::new())));
        lock(&quiesce.probes).push((runtime1, Arc::clone(&shared)));
        quiesce.at_shutdown.fetch_add(2, Ordering::SeqCst);

        let sent = Arc::new(AtomicBool::new(false));
        let sender = {
            let sent = Arc::clone(&sent);
            let in_flight = Arc::clone(&in_flight);
            thread::spawn(move || {
                let mut rank0 = InProcess::new(Rank(0), peers, MIN_TAG_UB, in_flight);
                rank0.send(Rank(1), CommId(0), PhysTag(7), vec![1], None);
                sent.store(true, Ordering::SeqCst);
            })
        };
        let sent_before = sent.load(Ordering::SeqCst);
        let stuck = quiesce.stuck(core::time::Duration::ZERO);
        let handled_after = handled.load(Ordering::SeqCst);
        assert!(
            !(sent_before && stuck && !handled_after),
            "the cluster was declared stuck with a message in flight or queued"
        );
        sender.join().expect("rank 0");

        // Stopping is an input too: once rank 1 took it and everything before it, the
        // cluster is quiet.
        InboxTx::new(tx, Arc::clone(&shared)).send(Input::Command(Command::Stop));
        thread.join().expect("rank 1's progression thread");
        assert!(handled.load(Ordering::SeqCst), "the message was accepted");
        assert!(
            quiesce.stuck(core::time::Duration::ZERO),
            "a quiet cluster is declared stuck at shutdown"
        );
        drop(ManuallyDrop::into_inner(driver));
        workers0.stop();
        workers1.stop();
    });
}
