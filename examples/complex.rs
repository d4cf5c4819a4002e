//! A user-defined, packed data interface exchanged between ranks (the reference's
//! `complex/mpi_complex`): `Complex` holds its real and imaginary parts in two vectors,
//! so it travels through its `pack`/`unpack` (no contiguous byte view).
//!
//! * Point to point: every rank sends its numbers to the next rank
//!   (`ctx.send(..).detach(..)`), receives the previous rank's (`ctx.recv(..).detach(..)`),
//!   sends them back, and receives its
//!   own numbers back; a `compare` codelet checks the echo against the original and the
//!   received numbers against what the sender holds.
//! * Through inserts: every rank owns `a[r]` and `b[r]`; the task `b[r+1] = 2·conj(a[r])`
//!   runs on the owner of `b[r+1]`, so `a[r]` moves there; then a check task on rank 0
//!   reads both and counts mismatches.
//!
//! Runs on the in-process cluster, or across MPI processes when built with the `mpi`
//! feature and started by `mpirun` ([`starling::launch`]); each rank checks its own part
//! and prints its own lines, so both ways print the same lines (in some order).
//!
//! ```sh
//! cargo run --release --example complex -- [ranks] [length]
//! cargo build --release --features mpi --example complex
//! mpirun -n 4 target/release/examples/complex 4 [length]
//! ```

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Complex, Variable};
use starling::{Codelet, Context, launch};

/// Rank `r`'s numbers: `(r + k + 0.5) − (r·k + 1) i`.
fn numbers(r: u32, len: usize) -> Complex {
    let real = (0..len).map(|k| f64::from(r) + k as f64 + 0.5).collect();
    let imag = (0..len).map(|k| -(f64::from(r) * k as f64) - 1.0).collect();
    Complex::new(real, imag).expect("parts of one length")
}

fn show(z: &Complex) -> String {
    let terms: Vec<String> = z
        .real()
        .iter()
        .zip(z.imag())
        .map(|(re, im)| format!("{re}{im:+}i"))
        .collect();
    format!("[{}]", terms.join(", "))
}

/// A codelet printing its only (read) buffer, labelled.
fn display(rank: Rank, label: &'static str) -> Codelet {
    Codelet::new("display", move |b| {
        println!("[{}] {label}: {}", rank.0, show(&b.r::<Complex>(0)));
    })
}

/// `compare` (R x, R y, RW mismatches): counts the numbers where x ≠ y.
fn compare() -> Codelet {
    Codelet::new("compare", |b| {
        let x = b.r::<Complex>(0);
        let y = b.r::<Complex>(1);
        let bad = if x.len() == y.len() {
            x.real()
                .iter()
                .zip(x.imag())
                .zip(y.real().iter().zip(y.imag()))
                .filter(|(p, q)| p != q)
                .count()
        } else {
            x.len().max(y.len())
        };
        let mut m = b.w::<Variable<u32>>(2);
        let v = m.get();
        m.set(v + bad as u32);
    })
}

/// Exchanges detached both ways; returns the mismatches this rank counted.
fn point_to_point(ctx: &Context, len: usize) -> u32 {
    let (me, size) = (ctx.rank(), ctx.size());
    let next = Rank((me.0 + 1) % size);
    let prev = Rank((me.0 + size - 1) % size);
    let mine = ctx.register(numbers(me.0, len));
    let got = ctx.register(Complex::zeros(len));
    let echo = ctx.register(Complex::zeros(len));
    let expected = ctx.register(numbers(prev.0, len));
    let mismatches = ctx.register(Variable::new(0u32));
    let ok = |r: Result<(), starling::CommError>| r.expect("a transfer");
    ok(ctx.send(&mine, next, Tag(10)).detach(ok));
    ok(ctx.recv(&got, prev, Tag(10)).detach(ok));
    ctx.task(&display(me, "received from the previous rank"))
        .r(&got)
        .submit();
    // Send them back, and receive this rank's own numbers back.
    ok(ctx.send(&got, prev, Tag(20)).detach(ok));
    ok(ctx.recv(&echo, next, Tag(20)).detach(ok));
    let cmp = compare();
    ctx.task(&cmp).r(&mine).r(&echo).rw(&mismatches).submit();
    ctx.task(&cmp).r(&got).r(&expected).rw(&mismatches).submit();
    ctx.wait_for_all();
    ctx.unregister(mismatches).get()
}

/// The same interface moved by the insert-task utility; returns rank 0's mismatches.
fn inserted(ctx: &Context, len: usize) -> Option<u32> {
    let (me, size) = (ctx.rank(), ctx.size());
    let a: Vec<_> = (0..size)
        .map(|r| {
            ctx.register_owned(Tag(100 + i64::from(r)), Owner::Rank(Rank(r)), move || {
                numbers(r, len)
            })
            .expect("register a")
        })
        .collect();
    let b: Vec<_> = (0..size)
        .map(|r| {
            ctx.register_owned(Tag(200 + i64::from(r)), Owner::Rank(Rank(r)), move || {
                Complex::zeros(len)
            })
            .expect("register b")
        })
        .collect();
    let mismatches = ctx
        .register_owned(Tag(300), Owner::Rank(Rank(0)), || Variable::new(0u32))
        .expect("register the count");
    let conj2 = Codelet::new("conj2", |bf| {
        let src = bf.r::<Complex>(0);
        let mut dst = bf.w::<Complex>(1);
        let (re, im) = dst.parts_mut();
        for k in 0..src.len() {
            re[k] = 2.0 * src.real()[k];
            im[k] = -2.0 * src.imag()[k];
        }
    });
    // `expected` (W, on rank 0) = 2·conj(numbers(r)), computed where it is checked.
    let fill_expected = |r: u32| {
        Codelet::new("fill_expected", move |bf| {
            let z = numbers(r, len);
            let mut e = bf.w::<Complex>(0);
            let (re, im) = e.parts_mut();
            for k in 0..len {
                re[k] = 2.0 * z.real()[k];
                im[k] = -2.0 * z.imag()[k];
            }
        })
    };
    let expected = ctx
        .register_owned(Tag(301), Owner::Rank(Rank(0)), move || Complex::zeros(len))
        .expect("register the expected value");
    let cmp = compare();
    let err = |r: Result<starling::Inserted, starling::InsertError>| {
        r.expect("insert");
    };
    for (r, ar) in a.iter().enumerate() {
        let to = (r + 1) % size as usize;
        err(ctx.insert(&conj2).r(ar).w(&b[to]).submit());
    }
    for r in 0..size as usize {
        let to = (r + 1) % size as usize;
        err(ctx.insert(&fill_expected(r as u32)).w(&expected).submit());
        err(ctx
            .insert(&cmp)
            .r(&b[to])
            .r(&expected)
            .rw(&mismatches)
            .submit());
    }
    err(ctx
        .insert(&display(me, "b[1] = 2·conj(a[0]), on rank 0"))
        .r(&b[1 % size as usize])
        .on_node(Rank(0))
        .submit());
    ctx.wait_for_all();
    (me == Rank(0)).then(|| ctx.acquire(&mismatches, AccessMode::R).get().get())
}

/// Runs both parts on `ranks` ranks (under `mpirun`: this process's rank of the job) with
/// `len` numbers per datum.
///
/// # Errors
/// When the cluster does not shut down cleanly or a comparison found a mismatch.
pub(crate) fn run(ranks: u32, len: usize) -> Result<(), String> {
    let out = launch(ranks, move |ctx| {
        let me = ctx.rank().0;
        let p2p = point_to_point(ctx, len);
        let ins = inserted(ctx, len);
        println!("[{me}] point-to-point mismatches: {p2p}");
        if let Some(ins) = ins {
            println!(
                "complex: {} rank(s), {len} numbers; insert mismatches {ins}",
                ctx.size()
            );
        }
        match ins {
            None if me == 0 => Err("rank 0 returned no count".to_string()),
            _ if p2p != 0 || ins.is_some_and(|m| m != 0) => {
                Err(format!("rank {me}: the complex numbers changed on the way"))
            }
            _ => Ok(()),
        }
    })
    .map_err(|e| e.to_string())?;
    out.into_iter().try_for_each(|(_, r)| r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ranks: u32 = args.next().map_or(4, |a| a.parse().expect("ranks"));
    let len: usize = args.next().map_or(3, |a| a.parse().expect("length"));
    assert!(ranks >= 1, "ranks ≥ 1");
    if let Err(e) = run(ranks, len) {
        eprintln!("FAILED: {e}");
        std::process::exit(1);
    }
}
