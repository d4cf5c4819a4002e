//! The handbook's token ring on the in-process cluster (no MPI needed).
//!
//! Rank 0 starts with token 0; in each loop every rank receives the token from its left
//! neighbour, increments it in a task, and sends it to its right neighbour, so after
//! `loops` loops the last rank holds `loops × ranks`. The variants are the reference's
//! tests of the same name:
//!
//! * `detached` (default, the handbook's code): detached receive → increment task →
//!   detached send; nothing waits, the implicit dependencies on the token order it all;
//! * `async` (`ring_async`): `irecv`/`isend` returning requests, each waited on;
//! * `sync` (`ring_sync`): synchronous sends (`issend`), waited on.
//!
//! ```sh
//! cargo run --release --example ring -- [ranks] [loops] [detached|async|sync]
//! ```

use std::time::Instant;

use starling::core::{AccessMode, Rank, Tag};
use starling::interfaces::Vector;
use starling::{Codelet, Context, run_local};

fn ring(ctx: &Context, loops: u32, variant: &str) -> u32 {
    let (rank, size) = (ctx.rank().0, ctx.size());
    let token = ctx.register(Vector::<u32>::zeros(1));
    let increment = Codelet::new("increment_token", |b| {
        b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
    });
    let prev = Rank((rank + size - 1) % size);
    let next = Rank((rank + 1) % size);
    for l in 0..loops {
        let tag = Tag(i64::from(l * size + rank));
        if l == 0 && rank == 0 {
            let t = ctx.acquire(&token, AccessMode::W);
            t.get_mut().as_mut_slice()[0] = 0;
            println!("Start with token value {}", t.get().as_slice()[0]);
        } else {
            match variant {
                "detached" => ctx.irecv_detached(&token, prev, tag, |r| r.expect("receive")),
                _ => ctx.irecv(&token, prev, tag).and_then(|r| r.wait()),
            }
            .expect("receive the token");
        }
        ctx.task(&increment).rw(&token).submit();
        if l == loops - 1 && rank == size - 1 {
            let t = ctx.acquire(&token, AccessMode::R);
            println!("Finished: token value {}", t.get().as_slice()[0]);
        } else {
            let next_tag = Tag(tag.0 + 1);
            match variant {
                "detached" => ctx.isend_detached(&token, next, next_tag, |r| r.expect("send")),
                "sync" => ctx.issend(&token, next, next_tag).and_then(|r| r.wait()),
                _ => ctx.isend(&token, next, next_tag).and_then(|r| r.wait()),
            }
            .expect("send the token");
        }
    }
    ctx.wait_for_all();

    ctx.unregister(token).as_slice()[0]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let loops: u32 = args.next().map_or(1000, |a| a.parse().expect("loops"));
    let variant = args.next().unwrap_or_else(|| "detached".into());
    assert!(
        matches!(variant.as_str(), "detached" | "async" | "sync"),
        "variant: detached, async or sync"
    );
    assert!(ranks >= 1 && loops >= 1);
    let start = Instant::now();
    let v = variant.clone();
    let tokens = run_local(ranks, move |ctx| ring(ctx, loops, &v)).expect("a clean shutdown");
    let elapsed = start.elapsed();
    let last = tokens[ranks as usize - 1];
    eprintln!("[{}] token = {last} == {loops} * {ranks} ?", ranks - 1);
    assert_eq!(last, loops * ranks, "the token went astray");
    eprintln!(
        "{variant} ring: {} hops in {:.1} ms, {:.2} µs per hop (in-process cluster)",
        loops * ranks,
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / f64::from(loops * ranks)
    );
}
