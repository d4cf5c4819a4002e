//! The ready queue of a rank's workers: the highest priority first, FIFO among equals.
//!
//! One FIFO per priority in an ordered map: a push and a pop cost a lookup among the
//! *distinct* priorities present (one, in most flows) instead of a binary heap's
//! sift over every ready task (an empty task's largest single cost with 100 000 ready).

use std::collections::{BTreeMap, VecDeque};

use crate::task::NodeId;

/// Ready tasks by priority.
#[derive(Default)]
pub(crate) struct ReadyQueue {
    by_priority: BTreeMap<i32, VecDeque<NodeId>>,
    len: usize,
}

impl ReadyQueue {
    /// Queues `id` behind the tasks of its priority.
    pub(crate) fn push(&mut self, priority: i32, id: NodeId) {
        self.by_priority.entry(priority).or_default().push_back(id);
        self.len += 1;
    }

    /// The first task of the highest priority.
    pub(crate) fn pop(&mut self) -> Option<NodeId> {
        let mut top = self.by_priority.last_entry()?;
        let id = top.get_mut().pop_front();
        if top.get().is_empty() {
            top.remove();
        }
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
}
