//! The waiting receives' queue: oldest first by arrival number, and taken from anywhere
//! in amortized constant time.
//!
//! A receive whose message is here goes into the engine before older receives of other
//! keys ([`super::Admission::first_here`]), so receives leave this queue from its middle
//! as well as from its front. A `VecDeque`'s `remove` moves every entry on one side of the
//! gap: with 200 000 receives waiting, each such removal moved megabytes, and a rank that
//! received out of flow order spent most of its time in `memmove` (the soak's `cache`
//! workload on 4 MPICH ranks: 46 % of the reading rank's samples, and the run's time
//! growing with the square of its size). Here a receive taken from the middle leaves an
//! empty slot behind; empty slots at the front are dropped at once, and the queue is
//! compacted when they outnumber the receives still waiting, so that a removal costs a
//! binary search and, amortized, a constant, and the queue holds at most about twice the
//! receives that wait.

use std::collections::VecDeque;

/// Empty slots tolerated before a compaction, whatever the number waiting.
const SLACK: usize = 64;

/// Waiting items by arrival number, oldest first.
pub(super) struct Queue<C> {
    /// Arrival numbers, increasing; `None`: taken. The front is never `None`.
    slots: VecDeque<(u64, Option<C>)>,
    /// Slots that are not `None`.
    live: usize,
}

impl<C> Default for Queue<C> {
    fn default() -> Self {
        Self {
            slots: VecDeque::new(),
            live: 0,
        }
    }
}

impl<C> Queue<C> {
    /// Whether nothing waits.
    pub(super) const fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Items waiting.
    #[cfg(test)]
    pub(super) const fn len(&self) -> usize {
        self.live
    }

    /// Slots held, taken ones included (at most about twice [`Queue::len`]).
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Appends `c` with arrival number `seq`, above every number in the queue.
    pub(super) fn push_back(&mut self, seq: u64, c: C) {
        debug_assert!(self.slots.back().is_none_or(|(s, _)| *s < seq));
        self.slots.push_back((seq, Some(c)));
        self.live += 1;
    }

    /// The oldest waiting item.
    pub(super) fn front(&self) -> Option<(u64, &C)> {
        self.slots
            .front()
            .map(|(s, c)| (*s, c.as_ref().expect("the front slot is never taken")))
    }

    /// The slot of `seq`, if the queue holds one. The front first: the oldest receive is
    /// the one that usually leaves, and a binary search through a queue of 100 000 is
    /// seventeen cold cache lines.
    fn find(&self, seq: u64) -> Result<usize, usize> {
        match self.slots.front() {
            Some((s, _)) if *s == seq => Ok(0),
            Some((s, _)) if *s > seq => Err(0),
            _ => self.slots.binary_search_by_key(&seq, |(s, _)| *s),
        }
    }

    /// The item `seq`, if it waits.
    pub(super) fn get(&self, seq: u64) -> Option<&C> {
        let at = self.find(seq).ok()?;
        self.slots[at].1.as_ref()
    }

    /// Whether item `seq` waits.
    pub(super) fn contains(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }

    /// Takes item `seq` out, if it waits.
    pub(super) fn take(&mut self, seq: u64) -> Option<C> {
        let at = self.find(seq).ok()?;
        let c = self.slots[at].1.take()?;
        self.live -= 1;
        if self.live == 0 {
            self.slots.clear();
        } else {
            while self.slots.front().is_some_and(|(_, c)| c.is_none()) {
                self.slots.pop_front();
            }
            let empty = self.slots.len() - self.live;
            if empty > self.live.max(SLACK) {
                self.slots.retain(|(_, c)| c.is_some());
            }
        }
        Some(c)
    }

    /// Puts item `seq` back where its arrival number places it (it was taken and the
    /// engine had no room for it).
    pub(super) fn put_back(&mut self, seq: u64, c: C) {
        match self.find(seq) {
            Ok(at) => {
                debug_assert!(self.slots[at].1.is_none(), "{seq} is already waiting");
                self.slots[at].1 = Some(c);
            }
            // Its slot was dropped (at the front, or by a compaction).
            Err(at) => self.slots.insert(at, (seq, Some(c))),
        }
        self.live += 1;
    }

    /// The waiting items, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &C)> + '_ {
        self.slots
            .iter()
            .filter_map(|(s, c)| c.as_ref().map(|c| (*s, c)))
    }

    /// The waiting items, oldest first, to update in place.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut C> + '_ {
        self.slots.iter_mut().filter_map(|(_, c)| c.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_leave_from_anywhere_and_the_rest_keep_their_order() {
        let mut q = Queue::default();
        for s in 0..10u64 {
            q.push_back(s, s * 10);
        }
        assert_eq!(q.take(4), Some(40));
        assert_eq!(q.take(4), None, "taken once");
        assert_eq!(q.take(0), Some(0));
        assert_eq!(q.front(), Some((1, &10)));
        assert!(!q.contains(4) && q.contains(5));
        q.put_back(4, 41);
        q.put_back(0, 1);
        assert_eq!(q.front(), Some((0, &1)));
        let all: Vec<_> = q.iter().map(|(s, c)| (s, *c)).collect();
        assert_eq!(
            all,
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(|s| (
                s,
                if s == 0 {
                    1
                } else if s == 4 {
                    41
                } else {
                    s * 10
                }
            ))
        );
        for s in 0..10 {
            assert!(q.take(s).is_some());
        }
        assert!(q.is_empty() && q.front().is_none() && q.slots() == 0);
    }

    #[test]
    fn taking_from_the_middle_keeps_the_slots_within_twice_the_waiting_items() {
        // The head never leaves; everything behind it passes through.
        let mut q = Queue::default();
        q.push_back(0, ());
        let mut next = 1;
        for _ in 0..10_000 {
            q.push_back(next, ());
            q.push_back(next + 1, ());
            assert!(q.take(next).is_some());
            assert!(q.take(next + 1).is_some());
            next += 2;
            assert!(q.slots() <= 2 * q.len() + SLACK + 1, "{} slots", q.slots());
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.front(), Some((0, &())));
        // A receive put back after a compaction dropped its slot goes back in order.
        q.push_back(next, ());
        q.push_back(next + 1, ());
        assert!(q.take(next).is_some());
        q.put_back(next, ());
        let order: Vec<_> = q.iter().map(|(s, ())| s).collect();
        assert_eq!(order, [0, next, next + 1]);
    }
}
