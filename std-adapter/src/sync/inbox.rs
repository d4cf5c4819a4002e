//! The progression thread's inbox: an unbounded multi-producer, single-consumer queue
//! that allocates nothing once it has grown to its peak.
//!
//! `std::sync::mpsc`'s unbounded channel allocates a block of 31 slots for every 31
//! inputs and frees it once they are taken. An input is large (a [`Command`] carries its
//! arguments inline), so each block is a large `malloc` request, and glibc's `malloc`
//! consolidates every small free chunk it holds before it serves one: with 100 000
//! requests outstanding, thousands of them (issue 17; `perf` put `malloc_consolidate`,
//! reached from the channel's block `calloc`, among the sending rank's first symbols at
//! 100 000 outstanding and nowhere at 1 000). Measured against the channel
//! (`docs/performance.md`, "The progression thread's inbox without allocation"): a
//! message among 1 000 outstanding over MPI 0.89×, among 100 000 0.97×, the rings and
//! the ping-pong unchanged.
//!
//! Here the senders push onto a `VecDeque` under a lock; the receiver swaps that queue
//! with its own emptied one when its own runs dry, so that the two queues trade places
//! and keep their capacity, and it takes each batch with one acquisition of the lock. An
//! empty poll reads a flag beside the lock instead of taking it (`looks_empty`).
//!
//! [`Command`]: crate::io::progress::Command

use core::cell::RefCell;
use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::VecDeque;

use super::{Arc, HotLock, lock_hot};

/// What the two ends share.
struct Shared<T> {
    queue: HotLock<Queue<T>>,
    /// Whether an input may be queued: raised by a sender after it let go of the lock,
    /// lowered by the receiver under the lock as it swaps the queue out; read without
    /// the lock, so that an empty poll costs a load rather than the lock (the progression
    /// thread and a waiting thread poll without pause), and so that a receiver goes for
    /// the lock only once the sender whose raise it saw has let go of it (raised under
    /// the lock, a sender preempted before its unlock had the receiver wait for it in the
    /// kernel; another sender may still hold the lock then). It is also down for a moment
    /// with an input queued, between that input's push and its raise: the input is then
    /// late, not lost ([`InboxReceiver::looks_empty`] says why). `core`'s atomic under
    /// `loom` too: the models never read it, and as one of `loom`'s its writes were
    /// scheduling points inside the lock, where `loom` (with a preemption bound) then
    /// failed to hand the lock over.
    maybe: AtomicBool,
}

struct Queue<T> {
    items: VecDeque<T>,
    /// The receiver is gone: a send fails and gives its input back.
    closed: bool,
}

/// The sending end; cloned for every thread that sends.
pub(crate) struct InboxSender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving end, owned by whichever thread drives the rank's progress.
pub(crate) struct InboxReceiver<T> {
    shared: Arc<Shared<T>>,
    /// The batch taken last, oldest first.
    taken: RefCell<VecDeque<T>>,
}

/// Why [`InboxReceiver::try_recv`] returned nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Empty;

/// A new inbox's two ends.
pub(crate) fn inbox<T>() -> (InboxSender<T>, InboxReceiver<T>) {
    let shared = Arc::new(Shared {
        queue: HotLock::new(Queue {
            items: VecDeque::new(),
            closed: false,
        }),
        maybe: AtomicBool::new(false),
    });
    (
        InboxSender {
            shared: Arc::clone(&shared),
        },
        InboxReceiver {
            shared,
            taken: RefCell::new(VecDeque::new()),
        },
    )
}

impl<T> Clone for InboxSender<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> InboxSender<T> {
    /// Queues `item` behind every input sent before it (by any sender); gives it back
    /// when the receiver is gone.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        let mut q = lock_hot(&self.shared.queue);
        if q.closed {
            return Err(item);
        }
        q.items.push_back(item);
        drop(q);
        self.shared.maybe.store(true, Ordering::Release);
        Ok(())
    }
}

impl<T> InboxReceiver<T> {
    /// The oldest input not yet taken, if any.
    pub(crate) fn try_recv(&self) -> Result<T, Empty> {
        let mut taken = self.taken.borrow_mut();
        if let Some(item) = taken.pop_front() {
            return Ok(item);
        }
        if self.looks_empty() {
            return Err(Empty);
        }
        {
            let mut q = lock_hot(&self.shared.queue);
            // `taken` is empty: the queues trade places, each keeping its capacity.
            core::mem::swap(&mut q.items, &mut *taken);
            self.shared.maybe.store(false, Ordering::Relaxed);
        }
        taken.pop_front().ok_or(Empty)
    }

    /// Whether the flag says nothing is queued. The flag is never lowered with an input
    /// left in the queue: it is lowered only as the queue is swapped out, and a sender
    /// that pushes after that swap took the lock after it, so its raise comes after the
    /// lowering. (A raise after a swap that already took its input only sends the
    /// receiver to an empty queue once.) A flag read down while an input is queued (read
    /// too old, or between the input's push and its raise) only delays the input, never
    /// loses it: its sender counted it in `progress::Shared::queued` before the push and
    /// wakes the receiver after the raise, so the receiver either sees that count and
    /// polls again, or parks and is woken by an unpark that comes after the raise (and
    /// then reads the flag no older than it). This argument, not a model, covers the
    /// flag: under `loom` it is not read.
    #[cfg(not(loom))]
    fn looks_empty(&self) -> bool {
        !self.shared.maybe.load(Ordering::Acquire)
    }

    /// Under `loom`, never: the models take the lock on every poll, which the flag only
    /// saves. (With a count beside the lock, this flag's first form, read by the models
    /// as a hint, `loom` let the receiver read it older than a send it came after and
    /// the progression models reported deadlocks: the thread parked with an input
    /// queued. `loom` models `SeqCst` as acquire-release; whether that explains every
    /// such read was not settled.)
    #[cfg(loom)]
    fn looks_empty(&self) -> bool {
        false
    }
}

impl<T> Drop for InboxReceiver<T> {
    /// Closes the inbox and drops what it still holds, as a dropped `mpsc` receiver
    /// does: an input may own what keeps a sender alive.
    fn drop(&mut self) {
        let left = {
            let mut q = lock_hot(&self.shared.queue);
            q.closed = true;
            core::mem::take(&mut q.items)
        };
        drop(left);
        self.taken.get_mut().clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn inputs_come_out_in_the_order_they_went_in_across_batches() {
        let (tx, rx) = inbox();
        for i in 0..5 {
            tx.send(i).unwrap();
        }
        assert_eq!(rx.try_recv(), Ok(0));
        // Sent while the receiver holds a batch: after that batch.
        tx.send(5).unwrap();
        let rest: Vec<_> = core::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(rest, [1, 2, 3, 4, 5]);
        assert_eq!(rx.try_recv(), Err(Empty));
    }

    #[test]
    fn a_send_after_the_receiver_is_gone_gives_its_input_back() {
        let (tx, rx) = inbox();
        tx.send(1).unwrap();
        drop(rx);
        assert_eq!(tx.send(2), Err(2));
    }

    #[test]
    fn what_the_receiver_held_is_dropped_with_it() {
        let (tx, rx) = inbox();
        let held = Arc::new(());
        tx.send(Arc::clone(&held)).unwrap();
        tx.send(Arc::clone(&held)).unwrap();
        // One in the receiver's batch, one still queued.
        drop(rx.try_recv().unwrap());
        tx.send(Arc::clone(&held)).unwrap();
        assert_eq!(Arc::strong_count(&held), 3);
        drop(rx);
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn many_senders_lose_nothing_and_keep_each_their_order() {
        let (tx, rx) = inbox();
        let threads: Vec<_> = (0..3u64)
            .map(|s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        tx.send((s, i)).unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0u64; 3];
        let mut got = 0;
        while got < 30_000 {
            if let Ok((s, i)) = rx.try_recv() {
                assert_eq!(i, next[s as usize], "sender {s} out of order");
                next[s as usize] += 1;
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(rx.try_recv(), Err(Empty));
    }
}

/// The inbox's own models (the progression thread's models in `io/progress/models.rs`
/// run over it too): it loses nothing, keeps each sender's order, and never reports
/// empty after a send it could see.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::{AtomicUsize, Ordering};

    #[test]
    fn loom_inbox_two_senders_lose_nothing_and_keep_their_order() {
        loom::model(|| {
            let (tx, rx) = inbox();
            let senders: Vec<_> = (0..2u32)
                .map(|s| {
                    let tx = tx.clone();
                    loom::thread::spawn(move || {
                        tx.send((s, 0)).unwrap();
                        tx.send((s, 1)).unwrap();
                    })
                })
                .collect();
            // One take racing the sends, the rest after them (a receiver spinning on an
            // empty inbox runs past `loom`'s branch limit).
            let mut got: Vec<(u32, u32)> = rx.try_recv().into_iter().collect();
            for t in senders {
                t.join().unwrap();
            }
            got.extend(core::iter::from_fn(|| rx.try_recv().ok()));
            assert_eq!(got.len(), 4);
            for s in 0..2 {
                let mine: Vec<_> = got.iter().filter(|(f, _)| *f == s).collect();
                assert_eq!(mine, [&(s, 0), &(s, 1)]);
            }
            assert_eq!(rx.try_recv(), Err(Empty));
        });
    }

    #[test]
    fn loom_inbox_an_input_sent_before_a_flag_is_seen_after_it() {
        // The progression thread's pattern: a sender queues, then raises a counter; a
        // receiver that sees the counter must find the input.
        loom::model(|| {
            let (tx, rx) = inbox();
            let flag = Arc::new(AtomicUsize::new(0));
            let raised = Arc::clone(&flag);
            let t = loom::thread::spawn(move || {
                tx.send((0, 0)).unwrap();
                raised.store(1, Ordering::SeqCst);
            });
            if flag.load(Ordering::SeqCst) == 1 {
                assert_eq!(rx.try_recv(), Ok((0, 0)));
            }
            t.join().unwrap();
            assert!(flag.load(Ordering::SeqCst) == 1);
        });
    }

    #[test]
    fn loom_inbox_a_send_racing_the_receivers_drop_is_dropped_or_refused() {
        loom::model(|| {
            let (tx, rx) = inbox::<Arc<()>>();
            let held = Arc::new(());
            let mine = Arc::clone(&held);
            let t = loom::thread::spawn(move || match tx.send(mine) {
                Ok(()) => {}
                Err(back) => drop(back),
            });
            drop(rx);
            t.join().unwrap();
            // Taken and dropped by the receiver, or refused and dropped by the sender:
            // never kept.
            assert_eq!(Arc::strong_count(&held), 1);
        });
    }
}
