//! Ping-pong between 2 MPI ranks: Starling's blocking `send`/`recv` on `Vector<u8>`
//! handles, or raw rsmpi `send`/`receive_into` of the same bytes.
//!
//! ```sh
//! mpirun -n 2 target/release/examples/mpi_bench raw
//! mpirun -n 2 target/release/examples/mpi_bench raw-pattern [bytes...]
//! mpirun -n 2 target/release/examples/mpi_bench starling [bytes...]
//! ```
//!
//! Rank 0 prints one line per sample: `sample <impl> <bytes> <half round trip in ns>`;
//! `scripts/bench-mpi.sh` runs both and turns the samples into medians and ratios.
//! `MPI_BENCH_SCALE=<n>` multiplies the round trips per sample (for a profile).

use std::time::Instant;

use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator;
use starling::mpi::mpi;
use starling_core::{Rank, Tag};
use starling_std::interfaces::Vector;

const SIZES: [usize; 5] = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20];
const SAMPLES: usize = 7;

/// Round trips per sample (about 20–100 ms each), per implementation, times
/// `MPI_BENCH_SCALE` (default 1; a larger one for a profile).
fn iterations(raw: bool, size: usize) -> u32 {
    let scale: u32 = std::env::var("MPI_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    scale
        * match (raw, size) {
            (true, s) if s <= 1 << 10 => 20_000,
            (true, s) if s <= 64 << 10 => 5_000,
            (true, s) if s <= 1 << 20 => 500,
            (true, _) => 20,
            (false, s) if s <= 1 << 10 => 1_000,
            (false, s) if s <= 64 << 10 => 500,
            (false, s) if s <= 1 << 20 => 100,
            (false, _) => 10,
        }
}

/// Times `SAMPLES` samples of `iters` calls of `round` after a warm-up; prints them on
/// rank 0.
fn measure(name: &str, me: i32, size: usize, iters: u32, mut round: impl FnMut()) {
    for _ in 0..(iters / 10).max(2) {
        round();
    }
    for _ in 0..SAMPLES {
        let start = Instant::now();
        for _ in 0..iters {
            round();
        }
        let half = start.elapsed().as_secs_f64() * 1e9 / f64::from(iters) / 2.0;
        if me == 0 {
            println!("sample {name} {size} {half:.0}");
        }
    }
}

/// The sizes given after the implementation's name, or all of [`SIZES`].
fn sizes() -> Vec<usize> {
    let given: Vec<usize> = std::env::args()
        .skip(2)
        .map(|a| a.parse().expect("a size in bytes"))
        .collect();
    if given.is_empty() {
        SIZES.to_vec()
    } else {
        given
    }
}

fn raw() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let me = world.rank();
    assert_eq!(world.size(), 2, "run with mpirun -n 2");
    let other = world.process_at_rank(1 - me);
    for size in sizes() {
        let mut buf = vec![0u8; size];
        measure("raw", me, size, iterations(true, size), || {
            if me == 0 {
                other.send_with_tag(&buf[..], 1);
                other.receive_into_with_tag(&mut buf[..], 2);
            } else {
                other.receive_into_with_tag(&mut buf[..], 1);
                other.send_with_tag(&buf[..], 2);
            }
        });
    }
}

/// Waits for `req` by polling `MPI_Test`, as Starling's progression does.
fn poll<'a, S: mpi::request::Scope<'a>>(mut req: mpi::request::Request<'a, [u8], S>) {
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => req = r,
        }
    }
}

/// The MPI calls a Starling ping-pong makes, without Starling — the floor of the
/// protocol's own MPI traffic under the runtime (`raw-pattern`). Every message starts
/// with a 24-byte header sent by `MPI_Isend` and received by an `MPI_Irecv` from any
/// source posted ahead of time (with room for the eager limit), each completed by polling
/// `MPI_Test`. A payload of at most the default eager limit (3968 bytes) travels in the
/// header's message; a longer one is its own message, sent right after the header from
/// the sender's buffer and received into the receiver's buffer by an `MPI_Irecv` posted
/// once the header arrived (Starling's `Data` envelope, both sides in place).
fn raw_pattern() {
    use mpi::request::StaticScope;
    const HEADER: usize = 24;
    const EAGER: usize = 3968;
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let me = world.rank();
    assert_eq!(world.size(), 2, "run with mpirun -n 2");
    let other = world.process_at_rank(1 - me);
    let any = world.any_process();
    let inbox: &'static mut [u8] = Vec::leak(vec![0u8; HEADER + 4096]);
    let (ptr, len) = (inbox.as_mut_ptr(), inbox.len());
    let mut posted = Some(any.immediate_receive_into_with_tag(StaticScope, inbox, 7));
    for size in sizes() {
        let eager = size <= EAGER;
        let out: &'static [u8] = Vec::leak(vec![0u8; HEADER + if eager { size } else { 0 }]);
        let data: &'static mut [u8] = Vec::leak(vec![0u8; if eager { 0 } else { size }]);
        let (data_ptr, data_len) = (data.as_mut_ptr(), data.len());
        let mut receive = || {
            poll(posted.take().expect("a posted receive"));
            // SAFETY: the receive that borrowed the buffer completed (its request is
            // gone), so nothing else uses it; it was leaked, so it lives forever.
            let again = unsafe { core::slice::from_raw_parts_mut(ptr, len) };
            posted = Some(any.immediate_receive_into_with_tag(StaticScope, again, 7));
            if !eager {
                // SAFETY: as above; no send of this buffer is in flight (ping-pong).
                let into = unsafe { core::slice::from_raw_parts_mut(data_ptr, data_len) };
                poll(other.immediate_receive_into_with_tag(StaticScope, into, 8));
            }
        };
        let send = || {
            let header = other.immediate_send_with_tag(StaticScope, out, 7);
            if !eager {
                // SAFETY: no receive into this buffer is in flight (ping-pong).
                let from = unsafe { core::slice::from_raw_parts(data_ptr, data_len) };
                poll(other.immediate_send_with_tag(StaticScope, from, 8));
            }
            poll(header);
        };
        measure("raw-pattern", me, size, iterations(true, size), || {
            if me == 0 {
                send();
                receive();
            } else {
                receive();
                send();
            }
        });
    }
    let last = posted.take().expect("a posted receive");
    last.cancel();
    let _ = last.wait();
}

/// Starling's blocking `send`/`recv`; `caller_drives` off leaves every MPI call to the
/// progression thread (the `starling-thread` variant).
fn starling(name: &str, caller_drives: bool) {
    let mut config = starling::mpi::MpiConfig::from_env();
    config.rank.caller_drives = caller_drives;
    let rank = starling::mpi::init(config).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    assert_eq!(ctx.size(), 2, "run with mpirun -n 2");
    let other = Rank(1 - me);
    for size in sizes() {
        let h = ctx.register(Vector::from_vec(vec![0u8; size]));
        measure(name, me as i32, size, iterations(false, size), || {
            if me == 0 {
                ctx.send(&h, other, Tag(1)).wait().expect("send");
                ctx.recv(&h, other, Tag(2)).wait().expect("recv");
            } else {
                ctx.recv(&h, other, Tag(1)).wait().expect("recv");
                ctx.send(&h, other, Tag(2)).wait().expect("send");
            }
        });
        let _ = ctx.unregister(h);
    }
    rank.shutdown().expect("a clean shutdown");
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("raw") => raw(),
        Some("raw-pattern") => raw_pattern(),
        Some("starling") => starling("starling", true),
        Some("starling-thread") => starling("starling-thread", false),
        _ => panic!("usage: mpirun -n 2 mpi_bench raw|raw-pattern|starling|starling-thread"),
    }
}
