//! Aligning the ranks' trace clocks at start-up.
//!
//! A traced rank (`STARLING_TRACE`) timestamps its events with its process's clock
//! ([`starling_std::trace::clock_ns`]); the processes of an MPI job each start theirs at
//! a different moment, on possibly different machines. Before the rank starts, [`sync`]
//! measures how far each rank's clock is from rank 0's, Cristian's way: rank 0 sends its
//! time to each other rank in turn, which answers with its own; of [`ROUNDS`] round trips
//! the shortest gives the estimate — the other rank read its clock about halfway through
//! it — with an error below half that round trip (a few µs over shared memory). Each rank
//! records the offset ([`starling_std::trace::set_clock_offset_ns`]) and its trace file
//! carries it; the merger moves every rank onto rank 0's clock.
//!
//! It runs on a duplicate of the world communicator, with blocking calls, on the
//! progression thread right after MPI started: collective, so every rank must trace (or
//! none).

use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use starling_std::trace::{clock_ns, set_clock_offset_ns};

/// Round trips per rank; the shortest is kept.
const ROUNDS: usize = 16;

/// Measures this rank's clock offset to rank 0 and records it (collective).
pub(crate) fn sync() {
    let comm = SimpleCommunicator::world().duplicate();
    if comm.rank() == 0 {
        for peer in 1..comm.size() {
            let p = comm.process_at_rank(peer);
            let mut best = (u64::MAX, 0i64);
            for _ in 0..ROUNDS {
                let t0 = clock_ns();
                p.send(&t0);
                let (theirs, _) = p.receive::<u64>();
                let t1 = clock_ns();
                let middle = (i128::from(t0) + i128::from(t1)) / 2;
                let offset = (middle - i128::from(theirs)) as i64;
                if t1 - t0 < best.0 {
                    best = (t1 - t0, offset);
                }
            }
            p.send(&best.1);
        }
        set_clock_offset_ns(0);
    } else {
        let root = comm.process_at_rank(0);
        for _ in 0..ROUNDS {
            let _: (u64, _) = root.receive();
            root.send(&clock_ns());
        }
        let (offset, _) = root.receive::<i64>();
        set_clock_offset_ns(offset);
    }
}
