//! Master-slave mode ([`starling::launch_ms`], the reference's "MPI Master Slave
//! Support"): rank 0 runs an ordinary task flow, the other ranks run its tasks.
//!
//! The flow is a single-process program: it registers `blocks` vectors, runs `rounds`
//! rounds of a stencil-like update (each block mixed with its neighbours), and prints
//! each block's checksum. The same flow on a plain one-rank context gives the expected
//! sums, which the master compares with its own.
//!
//! ```sh
//! cargo run --release --example master_slave -- [ranks] [blocks] [rounds] [mode]
//! cargo build --release --features mpi --example master_slave
//! mpirun -n 4 target/release/examples/master_slave 4 16 8     # 1 master, 3 slaves
//! ```
//!
//! `mode`:
//! * `ok` (default): the flow above;
//! * `unknown`: the flow also submits a task of a codelet nobody registered, which fails
//!   on the master with `MsError::UnknownCodelet` (the example exits with status 2);
//! * `tight`: every slave may hold only three blocks (`MsConfig::slave_memory`), so that
//!   slaves free and write back copies all along; the sums are the same.
//!
//! `STARLING_MPI_MASTER_NODE` picks another master, `STARLING_NMPIMSTHREADS` the workers
//! of each slave.

use std::process::ExitCode;

use starling::interfaces::Vector;
use starling::ms::{MsConfig, MsError, Registry};
use starling::{ClusterConfig, Codelet, Context, launch_ms, run_local};

/// Elements per block.
const LEN: usize = 256;

/// `b[i] = (3·b[i] + 1) mod 1_000_003`.
fn bump() -> Codelet {
    Codelet::new("bump", |b| {
        for x in b.w::<Vector<u64>>(0).as_mut_slice() {
            *x = (3 * *x + 1) % 1_000_003;
        }
    })
}

/// `b[i] += left[i] + right[i]` (mod 1_000_003).
fn mix() -> Codelet {
    Codelet::new("mix", |b| {
        let left = b.r::<Vector<u64>>(0);
        let right = b.r::<Vector<u64>>(1);
        let mut me = b.w::<Vector<u64>>(2);
        for ((x, l), r) in me
            .as_mut_slice()
            .iter_mut()
            .zip(left.as_slice())
            .zip(right.as_slice())
        {
            *x = (*x + l + r) % 1_000_003;
        }
    })
}

/// The flow: the same code on a plain context and on a master's.
fn flow(ctx: &Context, blocks: usize, rounds: usize, unknown: bool) -> Vec<u64> {
    let (bump, mix) = (bump(), mix());
    let hs: Vec<_> = (0..blocks as u64)
        .map(|i| {
            ctx.register(Vector::from_vec(
                (0..LEN as u64).map(|j| i * 1000 + j).collect(),
            ))
        })
        .collect();
    for _ in 0..rounds {
        for h in &hs {
            ctx.task(&bump).rw(h).submit();
        }
        for i in (0..blocks).step_by(2) {
            let (l, r) = ((i + blocks - 1) % blocks, (i + 1) % blocks);
            ctx.task(&mix).r(&hs[l]).r(&hs[r]).rw(&hs[i]).submit();
        }
    }
    if unknown {
        let stranger = Codelet::new("stranger", |_| {});
        ctx.task(&stranger).rw(&hs[0]).submit();
    }
    hs.into_iter()
        .map(|h| ctx.unregister(h).as_slice().iter().sum())
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (ranks, blocks, rounds) = (num(0, 4) as u32, num(1, 16).max(3), num(2, 8));
    let mode = args.get(3).map_or("ok", String::as_str).to_owned();
    assert!(
        matches!(mode.as_str(), "ok" | "unknown" | "tight"),
        "mode: ok, unknown or tight"
    );
    let mut ms = MsConfig::from_env();
    if mode == "tight" {
        ms.slave_memory = Some(3 * (LEN * 8) as u64);
    }
    let registry = Registry::new().codelet(&bump()).codelet(&mix());
    let unknown = mode == "unknown";
    let out = launch_ms(ranks, ms, ClusterConfig::from_env(), registry, move |ctx| {
        flow(ctx, blocks, rounds, unknown)
    });
    let sums = match out {
        Ok(Some(sums)) => sums,
        Ok(None) => return ExitCode::SUCCESS, // a slave's process under mpirun
        Err(e @ MsError::UnknownCodelet { .. }) => {
            println!("refused: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("master_slave: FAILED: {e}");
            return ExitCode::FAILURE;
        }
    };
    let want = run_local(1, move |ctx| flow(ctx, blocks, rounds, false))
        .expect("the plain run")
        .remove(0);
    for (i, s) in sums.iter().enumerate() {
        println!("block {i}: checksum {s}");
    }
    if sums == want {
        println!("OK: master-slave sums equal the one-process run's");
        ExitCode::SUCCESS
    } else {
        eprintln!("master_slave: FAILED: sums {sums:?}, want {want:?}");
        ExitCode::FAILURE
    }
}
