//! Communicators (the reference's `comm/comm` and `comm/mix_comm` examples): the world is
//! split in two by rank parity (`Context::comm_split`, `MPI_Comm_split`), each half
//! numbering its members in reverse world order; in each half, member 0 sends a value to
//! every other member (synchronous and standard sends), then a token goes round the half
//! in a ring of tasks; meanwhile a token goes round the whole world with the **same
//! tags**. Matching is per communicator, so no message is taken by the wrong ring.
//!
//! Each rank checks what it received and prints one line; the last member of each ring
//! checks its token. Runs on the in-process cluster, or across MPI processes when built
//! with the `mpi` feature and started by `mpirun` ([`starling::launch`]); both ways print
//! the same lines (in some order).
//!
//! ```sh
//! cargo run --release --example comm -- [ranks] [loops]
//! cargo build --release --features mpi --example comm
//! mpirun -n 4 target/release/examples/comm 4 [loops]
//! ```

use starling::core::{AccessMode, Rank, Tag};
use starling::interfaces::Variable;
use starling::{Codelet, Comm, CommError, Context, Handle, launch};

/// The value member 0 of a half sends to member `r`.
fn greeting(color: u32, r: u32) -> u64 {
    u64::from(1000 * (color + 1) + r)
}

/// `loops` rounds of a token ring on `comm` (ranks in `comm`), each hop a task that
/// increments the token; returns the token on the ring's last member, `None` elsewhere.
fn ring(
    ctx: &Context,
    comm: &Comm,
    token: &Handle<Variable<u64>>,
    increment: &Codelet,
    loops: u32,
) -> Result<Option<u64>, CommError> {
    let (me, size) = (comm.rank().0, comm.size());
    let prev = Rank((me + size - 1) % size);
    let next = Rank((me + 1) % size);
    for l in 0..loops {
        let tag = Tag(i64::from(l));
        if l > 0 || me > 0 {
            ctx.recv(token, prev, tag).on(comm).wait()?;
        }
        ctx.task(increment).rw(token).submit();
        if l < loops - 1 || me < size - 1 {
            let next_tag = if me == size - 1 { Tag(tag.0 + 1) } else { tag };
            ctx.send(token, next, next_tag).on(comm).wait()?;
        }
    }
    ctx.wait_for_all();
    Ok((me == size - 1).then(|| ctx.acquire(token, AccessMode::R).get().get()))
}

fn comm_example(ctx: &Context, loops: u32) -> Result<(), String> {
    let world = ctx.world();
    let w = ctx.rank().0;
    let color = w % 2;
    let half = ctx
        .comm_split(&world, Some(color), -i64::from(w))
        .map_err(|e| e.to_string())?
        .ok_or("every rank passed a color")?;
    let (r, n) = (half.rank().0, half.size());
    // The reversed order: member r of a half is the r-th largest world rank of its parity.
    let expected_members: Vec<Rank> = (0..ctx.size())
        .rev()
        .filter(|x| x % 2 == color)
        .map(Rank)
        .collect();
    if half.members() != expected_members {
        return Err(format!(
            "[{w}] members {:?}, expected {expected_members:?}",
            half.members()
        ));
    }

    // Member 0 greets every other member: odd members by a synchronous send.
    let value = ctx.register(Variable::new(0u64));
    if r == 0 {
        for to in 1..n {
            ctx.acquire(&value, AccessMode::W)
                .get_mut()
                .set(greeting(color, to));
            let req = if to % 2 == 1 {
                ctx.send(&value, Rank(to), Tag(0)).sync().on(&half).start()
            } else {
                ctx.send(&value, Rank(to), Tag(0)).on(&half).start()
            };
            req.and_then(|q| q.wait()).map_err(|e| e.to_string())?;
        }
    } else {
        ctx.recv(&value, Rank(0), Tag(0))
            .on(&half)
            .wait()
            .map_err(|e| e.to_string())?;
        let got = ctx.acquire(&value, AccessMode::R).get().get();
        if got != greeting(color, r) {
            return Err(format!(
                "[{w}] got {got} from member 0, expected {}",
                greeting(color, r)
            ));
        }
    }

    // Two rings with the same tags, the half's then the world's: ranks reach the world's
    // at different times, so its messages arrive while the halves still run theirs.
    let increment = Codelet::new("increment", |b| {
        let mut t = b.w::<Variable<u64>>(0);
        let v = t.get();
        t.set(v + 1);
    });
    let half_token = ctx.register(Variable::new(0u64));
    let world_token = ctx.register(Variable::new(0u64));
    let half_end = ring(ctx, &half, &half_token, &increment, loops).map_err(|e| e.to_string())?;
    let world_end =
        ring(ctx, &world, &world_token, &increment, loops).map_err(|e| e.to_string())?;
    println!("[{w}] half {color}: member {r} of {n}; greeting ok");
    if let Some(t) = half_end {
        println!("half {color}: token {t} after {loops} loops of {n} members");
        if t != u64::from(loops * n) {
            return Err(format!("half {color}: token {t}, expected {}", loops * n));
        }
    }
    if let Some(t) = world_end {
        println!(
            "world: token {t} after {loops} loops of {} ranks",
            ctx.size()
        );
        if t != u64::from(loops * ctx.size()) {
            return Err(format!("world: token {t}, expected {}", loops * ctx.size()));
        }
    }
    half.barrier(ctx).map_err(|e| e.to_string())?;
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let loops: u32 = args.next().map_or(5, |a| a.parse().expect("loops"));
    assert!(ranks >= 2 && loops >= 1, "ranks ≥ 2, loops ≥ 1");
    let out = launch(ranks, move |ctx| comm_example(ctx, loops)).unwrap_or_else(|e| {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    });
    for (_, r) in out {
        if let Err(e) = r {
            eprintln!("FAILED: {e}");
            std::process::exit(1);
        }
    }
}
