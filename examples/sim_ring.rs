//! The token ring on the deterministic simulator: bare protocol engines, one thread.
//!
//! In round `l`, rank `r` receives the token from its left neighbour (tag `l·size + r − 1`),
//! increments it (the "task"), and sends it to its right neighbour with tag `l·size + r`;
//! rank 0 starts the first round with token 0, and after `loops` rounds the last rank
//! holds `loops · size` — the reference's `ring` test. Today the ranks are protocol
//! engines driven by Starling's seeded, deterministic simulator (`starling::sim`), so the
//! run needs no MPI and every run with the same seed is the same run.
//!
//! ```sh
//! cargo run --release --example sim_ring -- [ranks] [loops] [seed]
//! ```

use std::time::Instant;

use starling::core::engine::{RecvArgs, SendArgs};
use starling::core::request::Kind;
use starling::core::{CommId, Rank, Tag};
use starling::sim::Cluster;

struct Ring {
    cluster: Cluster,
    size: u32,
    loops: u64,
    /// The round each rank is in.
    round: Vec<u64>,
    hops: u64,
    last: Option<u64>,
}

impl Ring {
    fn tag(&self, round: u64, rank: u32) -> Tag {
        Tag((round * u64::from(self.size) + u64::from(rank)) as i64 - 1)
    }

    fn post_recv(&mut self, r: u32) {
        let prev = Rank((r + self.size - 1) % self.size);
        let args = RecvArgs::new(CommId::WORLD, prev, self.tag(self.round[r as usize], r), 8);
        self.cluster.recv(Rank(r), args, true);
    }

    /// Rank `r` holds the token: run the task, pass it on, wait for the next one.
    fn on_token(&mut self, r: u32, token: u64) {
        let token = token + 1; // the task
        self.hops += 1;
        let l = self.round[r as usize];
        if r == self.size - 1 && l == self.loops - 1 {
            self.last = Some(token);
            return;
        }
        let next = Rank((r + 1) % self.size);
        let args = SendArgs::new(CommId::WORLD, next, self.tag(l, r + 1), 8);
        self.cluster
            .send(Rank(r), args, token.to_le_bytes().to_vec(), true);
        self.round[r as usize] += 1;
        if self.round[r as usize] < self.loops {
            self.post_recv(r);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let size: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let loops: u64 = args.next().map_or(1000, |a| a.parse().expect("loops"));
    let seed: u64 = args.next().map_or(2026, |a| a.parse().expect("seed"));
    assert!(
        size >= 2 && loops >= 1,
        "the ring needs 2 ranks and 1 round"
    );

    let start = Instant::now();
    let mut ring = Ring {
        cluster: Cluster::new(size, seed),
        size,
        loops,
        round: vec![0; size as usize],
        hops: 0,
        last: None,
    };
    for r in 1..size {
        ring.post_recv(r);
    }
    ring.on_token(0, 0);
    while ring.cluster.step() {
        for r in 0..size {
            for done in ring.cluster.take_completions(Rank(r)) {
                assert!(done.error.is_none(), "{done:?}");
                ring.cluster.retire(Rank(r), done.req);
                if done.kind == Kind::Recv {
                    let token = u64::from_le_bytes(done.data[..8].try_into().expect("8 bytes"));
                    ring.on_token(r, token);
                }
            }
        }
    }
    let elapsed = start.elapsed();

    let expected = loops * u64::from(size);
    println!("token ring: {size} ranks, {loops} rounds, seed {seed}");
    println!("  hops:             {}", ring.hops);
    println!("  final token:      {:?} (expected {expected})", ring.last);
    println!("  messages:         {}", ring.cluster.delivered());
    println!(
        "  time per hop:     {:.3} µs (simulated network, one thread)",
        elapsed.as_secs_f64() * 1e6 / ring.hops.max(1) as f64
    );
    let mut leftovers = 0;
    for r in 0..size {
        let s = ring.cluster.engine(Rank(r)).stats().total();
        println!(
            "  rank {r}: sent {} B in {} messages, received {} B in {} messages",
            s.bytes_sent, s.msgs_sent, s.bytes_received, s.msgs_received
        );
        leftovers += ring.cluster.leftovers(Rank(r)).len();
    }
    println!("  left at shutdown: {leftovers}");
    assert_eq!(ring.last, Some(expected), "the token went astray");
    assert!(leftovers == 0 && ring.cluster.is_quiet());
}
