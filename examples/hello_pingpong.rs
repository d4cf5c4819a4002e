//! A 2-rank ping-pong over MPI: `mpirun -n 2 target/debug/examples/hello_pingpong`.

use starling_core::{Rank, Tag};
use starling_std::interfaces::Vector;

fn main() {
    let rank = starling::mpi::init(starling::mpi::MpiConfig::from_env()).expect("MPI starts");
    let ctx = rank.context();
    assert_eq!(ctx.size(), 2, "run with mpirun -n 2");
    let me = ctx.rank().0;
    let other = Rank(1 - me);
    let v = ctx.register(Vector::from_vec(vec![0u8; 100]));
    for round in 0..10u32 {
        let tag = Tag(i64::from(round));
        if round % 2 == me {
            ctx.send(&v, other, tag).wait().expect("send");
        } else {
            ctx.recv(&v, other, tag).wait().expect("recv");
        }
    }
    println!("rank {me}: 10 rounds done");
    rank.shutdown().expect("a clean shutdown");
}
