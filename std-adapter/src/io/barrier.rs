//! A barrier made of messages, for transports with no barrier of their own (in-process,
//! serial): a rank entering barrier *g* (its *g*-th) tells every peer so, and the barrier
//! completes once every peer's message for *g* came. Messages for a later barrier that
//! arrive first are counted apart by their generation.

use std::collections::HashMap;

/// The barrier state of one rank: arrivals per generation and the barrier it waits in.
#[derive(Debug, Default)]
pub(crate) struct MessageBarrier {
    /// Peers' arrivals, per generation.
    arrivals: HashMap<u64, u32>,
    /// The generation of this rank's next barrier.
    next: u64,
    /// The barrier this rank waits in: (generation, token).
    waiting: Option<(u64, u64)>,
}

impl MessageBarrier {
    /// Enters the barrier completed as `token`: the generation to send to every peer.
    pub(crate) fn enter(&mut self, token: u64) -> u64 {
        let generation = self.next;
        self.next += 1;
        self.waiting = Some((generation, token));
        generation
    }

    /// A peer's message for barrier `generation` came.
    pub(crate) fn arrived(&mut self, generation: u64) {
        *self.arrivals.entry(generation).or_default() += 1;
    }

    /// The token of the barrier this rank waits in, once `peers` peers arrived at it
    /// (then it waits in none).
    pub(crate) fn complete(&mut self, peers: usize) -> Option<u64> {
        let (generation, token) = self.waiting?;
        let arrived = self.arrivals.get(&generation).copied().unwrap_or(0);
        if (arrived as usize) < peers {
            return None;
        }
        self.arrivals.remove(&generation);
        self.waiting = None;
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_once_every_peer_arrived_at_its_generation() {
        let mut b = MessageBarrier::default();
        // A peer already in the next barrier: counted for generation 1 only.
        b.arrived(1);
        assert_eq!(b.enter(7), 0);
        assert_eq!(b.complete(2), None);
        b.arrived(0);
        assert_eq!(b.complete(2), None);
        b.arrived(0);
        assert_eq!(b.complete(2), Some(7));
        assert_eq!(b.complete(2), None, "completes once");
        assert_eq!(b.enter(8), 1);
        b.arrived(1);
        assert_eq!(b.complete(2), Some(8));
    }

    #[test]
    fn alone_it_completes_at_once() {
        let mut b = MessageBarrier::default();
        assert_eq!(b.complete(0), None, "waits in no barrier");
        b.enter(3);
        assert_eq!(b.complete(0), Some(3));
    }
}
