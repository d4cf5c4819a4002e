//! The ready queue of a rank's workers: the highest priority first, FIFO among equals.
//!
//! One FIFO per priority in an ordered map: a push and a pop cost a lookup among the
//! *distinct* priorities present (one, in most flows) instead of a binary heap's
//! sift over every ready task (an empty task's largest single cost with 100 000 ready).
//! The default priority, 0, has a FIFO of its own outside the map, kept when it empties:
//! a worker that keeps up with its submitter empties the queue at every task, and the
//! map would drop the FIFO and allocate a new one at the next push.

use std::collections::{BTreeMap, VecDeque};

/// A node's id in the runtime.
pub(crate) type NodeId = u64;

/// Ready tasks by priority.
#[derive(Default)]
pub(crate) struct ReadyQueue {
    /// Priority 0.
    zero: VecDeque<NodeId>,
    /// Every other priority present.
    others: BTreeMap<i32, VecDeque<NodeId>>,
    len: usize,
}

impl ReadyQueue {
    /// Queues `id` behind the tasks of its priority.
    pub(crate) fn push(&mut self, priority: i32, id: NodeId) {
        if priority == 0 {
            self.zero.push_back(id);
        } else {
            self.others.entry(priority).or_default().push_back(id);
        }
        self.len += 1;
    }

    /// The first task of the highest priority.
    pub(crate) fn pop(&mut self) -> Option<NodeId> {
        let above_zero = self.others.last_key_value().is_some_and(|(p, _)| *p > 0);
        let id = if !above_zero && !self.zero.is_empty() {
            self.zero.pop_front()
        } else {
            let mut top = self.others.last_entry()?;
            let id = top.get_mut().pop_front();
            if top.get().is_empty() {
                top.remove();
            }
            id
        };
        self.len -= usize::from(id.is_some());
        id
    }

    /// How many tasks are queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_priority_leaves_first_and_equals_in_order() {
        let mut q = ReadyQueue::default();
        for (p, id) in [(0, 1), (5, 2), (0, 3), (-2, 4), (5, 5)] {
            q.push(p, id);
        }
        assert_eq!(q.len(), 5);
        let order: Vec<NodeId> = core::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![2, 5, 1, 3, 4]);
        assert_eq!(q.len(), 0);
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn priority_zero_keeps_its_place_among_the_others_as_the_queue_empties_and_fills() {
        let mut q = ReadyQueue::default();
        q.push(0, 1);
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), None);
        for (p, id) in [(-1, 2), (0, 3), (1, 4), (0, 5), (-1, 6), (3, 7)] {
            q.push(p, id);
        }
        assert_eq!(q.pop(), Some(7));
        q.push(0, 8);
        q.push(2, 9);
        let order: Vec<NodeId> = core::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![9, 4, 3, 5, 8, 2, 6]);
        assert_eq!(q.len(), 0);
    }
}
