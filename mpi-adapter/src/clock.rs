//! Aligning the ranks' clocks at start-up.
//!
//! A traced rank (`STARLING_TRACE`) timestamps its events with its process's clock; the
//! processes of an MPI job each start theirs at a different moment, on possibly different
//! machines. Before the rank starts, [`offset_to_rank0`] measures how far each rank's
//! clock is from rank 0's, Cristian's way: rank 0 sends its time to each other rank in
//! turn, which answers with its own; of [`ROUNDS`] round trips the shortest gives the
//! estimate — the other rank read its clock about halfway through it — with an error
//! below half that round trip (a few µs over shared memory). Whoever assembles the rank
//! records the offset with the trace (the facade: `starling::trace::set_clock_offset_ns`),
//! and the merger moves every rank onto rank 0's clock.
//!
//! It runs on a duplicate of the world communicator, with blocking calls, on the
//! progression thread right after MPI started: collective, so every rank must measure (or
//! none).

use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};

/// Round trips per rank; the shortest is kept.
pub const ROUNDS: usize = 16;

/// Measures how far this rank's clock `now` (nanoseconds) is from rank 0's, collectively
/// over the world: the offset to add to this rank's times to put them on rank 0's clock
/// (0 on rank 0). Every rank calls it, after [`MpiTransport::new`](crate::MpiTransport::new)
/// initialised MPI.
pub fn offset_to_rank0(now: impl Fn() -> u64) -> i64 {
    let comm = SimpleCommunicator::world().duplicate();
    if comm.rank() == 0 {
        for peer in 1..comm.size() {
            let p = comm.process_at_rank(peer);
            let mut best = (u64::MAX, 0i64);
            for _ in 0..ROUNDS {
                let t0 = now();
                p.send(&t0);
                let (theirs, _) = p.receive::<u64>();
                let t1 = now();
                let middle = (i128::from(t0) + i128::from(t1)) / 2;
                let offset = (middle - i128::from(theirs)) as i64;
                if t1 - t0 < best.0 {
                    best = (t1 - t0, offset);
                }
            }
            p.send(&best.1);
        }
        0
    } else {
        let root = comm.process_at_rank(0);
        for _ in 0..ROUNDS {
            let _: (u64, _) = root.receive();
            root.send(&now());
        }
        let (offset, _) = root.receive::<i64>();
        offset
    }
}
