//! Point-to-point scenarios over real MPI, under `mpirun -n 2` and `-n 4`.
//!
//! MPI can be initialised once per process, so this is a `harness = false` test: run by
//! `cargo test`, it launches itself under `mpirun` once per job below and checks each
//! job's exit status and output; under `mpirun` (`OMPI_COMM_WORLD_SIZE` / `PMI_SIZE`
//! set) it is one rank of that job. Without `mpirun` on the `PATH` it prints
//! "skipped: mpirun not found" and passes. `STARLING_MPIRUN` names another launcher:
//! `tests/mpi/mpich.sh` builds this test against MPICH and runs it with `mpirun.mpich`.
//!
//! The scenarios port `tests/p2p.rs` (the reference's test catalogue) to real MPI; each
//! names the reference test it ports. A failed check panics, the rank exits non-zero and
//! `mpirun` fails the job.
//!
//! ```sh
//! cargo test --features mpi --test mpi_p2p
//! mpirun -n 2 target/debug/deps/mpi_p2p-* suite   # one job by hand
//! ```

use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use starling::mpi::{MpiConfig, MpiError, Threading, TransportError, mpi};
use starling_core::{AccessMode, CommId, Owner, Rank, Tag};
use starling_std::interfaces::{Bcsr, Block, Complex, Csr, Matrix, Ndim, Variable, Vector};
use starling_std::{Codelet, CommError, Context, DataError, InsertError, TaskTag};

// ----- the launcher ----------------------------------------------------------------------

/// One `mpirun` job: ranks, the job's name (the program's argument), extra environment,
/// and lines its output must contain.
struct Job {
    ranks: u32,
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    expect: &'static [&'static str],
    /// Whether mpirun must exit 0 (a job that leaves MPI unfinalized on purpose cannot).
    must_succeed: bool,
    /// An environment variable that must be set to `1` for the job to run (heavy jobs).
    opt_in: Option<&'static str>,
}

const JOBS: &[Job] = &[
    Job {
        ranks: 2,
        name: "suite",
        env: &[],
        expect: &["rank 0: suite passed", "rank 1: suite passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 4,
        name: "suite",
        env: &[],
        expect: &["rank 0: suite passed", "rank 3: suite passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "chunks",
        // Every message longer than 1000 bytes travels in chunks; the world has an MPI
        // duplicate of its own, every other communicator shares the second.
        env: &[
            ("STARLING_MPI_MAX_MESSAGE", "1000"),
            ("STARLING_MPI_COMMS", "2"),
        ],
        expect: &["rank 0: chunks passed", "rank 1: chunks passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "orphan",
        env: &[],
        expect: &["rank 0: orphan passed", "rank 1: orphan passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "orphan",
        // With the fast path (protocol §19): the 4-byte message never received waits in
        // MPI on its fast tag and is reported the same; the 10 000-byte one leaves a
        // marker there, which is not reported, and its envelope, which is.
        env: &[("STARLING_MPI_FAST", "on")],
        expect: &["rank 0: orphan passed", "rank 1: orphan passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "adopt",
        env: &[],
        expect: &["rank 0: adopt passed", "rank 1: adopt passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "serialized",
        env: &[],
        expect: &["rank 0: serialized passed", "rank 1: serialized passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "watchdog",
        env: &[("STARLING_WATCHDOG_SECS", "1")],
        expect: &["rank 0: watchdog passed", "rank 1: watchdog passed"],
        must_succeed: false,
        opt_in: None,
    },
    Job {
        ranks: 1,
        name: "fake",
        // One process posing as rank 2 of 1024 (submission cost measurement).
        env: &[
            ("STARLING_MPI_FAKE_RANK", "2"),
            ("STARLING_MPI_FAKE_SIZE", "1024"),
            ("STARLING_COMM_STATS", "1"),
        ],
        expect: &["rank 2: fake passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "hang",
        // The reports go to the job's default directory (named after PMIX_NAMESPACE).
        env: &[("STARLING_WATCHDOG_SECS", "1")],
        expect: &["rank 0: hang passed", "rank 1: hang passed"],
        must_succeed: false,
        opt_in: None,
    },
    Job {
        ranks: 3,
        name: "diverge",
        env: &[("STARLING_CHECK_AGREEMENT", "1")],
        expect: &[
            "rank 0: diverge passed",
            "rank 1: diverge passed",
            "rank 2: diverge passed",
        ],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 4,
        name: "split",
        env: &[],
        expect: &[
            "world rank 0: split passed",
            "world rank 1: split passed",
            "world rank 2: split passed",
            "world rank 3: split passed",
        ],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "eager",
        env: &[],
        expect: &["rank 0: eager passed", "rank 1: eager passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "oversize",
        env: &[],
        expect: &[
            "rank 0: oversize passed",
            "rank 1: oversize passed",
            "dropped a message from rank 0",
        ],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "late",
        env: &[("STARLING_WATCHDOG_SECS", "1")],
        expect: &["rank 0: late passed"],
        // Rank 0 gives up and leaves MPI unfinalized; the launcher then ends rank 1.
        must_succeed: false,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "busy_peer",
        env: &[("STARLING_WATCHDOG_SECS", "1")],
        expect: &["rank 0: busy_peer passed", "rank 1: busy_peer passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "fast",
        // The fast path (protocol §19, off by default), traced: its markers show in the
        // trace.
        env: &[("STARLING_MPI_FAST", "on"), ("STARLING_MPI_COMM", "1")],
        expect: &[
            "rank 0: fast passed",
            "rank 1: fast passed",
            "post Marker {",
        ],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "fast",
        // The same with a lowered fast limit and the smallest tables: receives wait for
        // room, and a receive whose fast message waits in MPI gets the last slot.
        env: &[
            ("STARLING_MPI_FAST", "16"),
            ("STARLING_ENGINE_TABLES", "4,2"),
        ],
        expect: &["rank 0: fast passed", "rank 1: fast passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "fast",
        // And with the fast path off: the envelope path alone.
        env: &[("STARLING_MPI_FAST", "0")],
        expect: &["rank 0: fast passed", "rank 1: fast passed"],
        must_succeed: true,
        opt_in: None,
    },
    Job {
        ranks: 2,
        name: "big",
        // A payload over 2 GiB: two MPI messages (i32 counts). About 9 GB of memory.
        env: &[],
        expect: &["rank 0: big passed", "rank 1: big passed"],
        must_succeed: true,
        opt_in: Some("STARLING_MPI_BIG"),
    },
];

fn launcher() -> ExitCode {
    // `STARLING_MPIRUN` picks another launcher (tests/mpi/mpich.sh: `mpirun.mpich`).
    let mpirun = std::env::var("STARLING_MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {mpirun}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("mpi_p2p: skipped: {mpirun} not found (install openmpi-bin to run the MPI tests)");
        println!(
            "test result: ok. 0 passed; 0 failed; {} ignored",
            JOBS.len()
        );
        return ExitCode::SUCCESS;
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // Open MPI's launcher refuses root and more ranks than cores unless told; MPICH's
    // (Hydra) takes neither option.
    let open_mpi = Command::new(&mpirun)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"));
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let mut failed = 0;
    let mut skipped = 0;
    for job in JOBS {
        if let Some(var) = job.opt_in {
            if std::env::var(var).as_deref() != Ok("1") {
                println!(
                    "mpi_p2p: {mpirun} -n {} {} ... skipped (set {var}=1)",
                    job.ranks, job.name
                );
                skipped += 1;
                continue;
            }
        }
        let start = Instant::now();
        let log = std::env::temp_dir().join(format!(
            "starling-mpi-{}-{}-{}.log",
            std::process::id(),
            job.name,
            job.ranks
        ));
        let file = std::fs::File::create(&log).expect("a log file");
        let mut cmd = Command::new(&mpirun);
        if open_mpi {
            if root {
                cmd.arg("--allow-run-as-root");
            }
            cmd.arg("--oversubscribe");
        }
        cmd.args(["-n", &job.ranks.to_string()])
            .arg(&exe)
            .arg(job.name)
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env(
                "STARLING_NCPU",
                std::env::var("STARLING_NCPU").unwrap_or_else(|_| "1".into()),
            )
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("a log file"))
            .stderr(file);
        for (k, v) in job.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("mpirun starts");
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(s) = child.try_wait().expect("waiting for mpirun") {
                break Some(s);
            }
            if Instant::now() > deadline {
                // SIGTERM lets mpirun take its ranks down with it; SIGKILL if it won't.
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                std::thread::sleep(Duration::from_secs(5));
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut output = String::new();
        if let Ok(mut f) = std::fs::File::open(&log) {
            let _ = f.read_to_string(&mut output);
        }
        let _ = std::fs::remove_file(&log);
        let missing: Vec<&str> = job
            .expect
            .iter()
            .copied()
            .filter(|e| !output.contains(e))
            .collect();
        let ok = match status {
            None => false,
            Some(s) => (s.success() || !job.must_succeed) && missing.is_empty(),
        };
        let what = format!("{mpirun} -n {} {}", job.ranks, job.name);
        let secs = start.elapsed().as_secs_f64();
        if ok {
            println!("mpi_p2p: {what} ... ok ({secs:.1} s)");
        } else {
            failed += 1;
            let why = match status {
                None => "timed out after 90 s".to_string(),
                Some(s) if !s.success() && job.must_succeed => format!("exited with {s}"),
                Some(_) => format!("output lacks {missing:?}"),
            };
            println!("mpi_p2p: {what} ... FAILED ({why}, {secs:.1} s); its output:\n{output}");
        }
    }
    // A libtest-style summary, so that scripts counting `test result:` lines count jobs.
    let passed = JOBS.len() - failed - skipped;
    if failed == 0 {
        println!("mpi_p2p: all {passed} MPI jobs passed");
        println!("test result: ok. {passed} passed; 0 failed; {skipped} ignored");
        ExitCode::SUCCESS
    } else {
        println!("mpi_p2p: {failed} MPI job(s) failed");
        println!("test result: FAILED. {passed} passed; {failed} failed; {skipped} ignored");
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    if !starling::mpi::under_mpirun() {
        return launcher();
    }
    let job = std::env::args().nth(1).unwrap_or_default();
    match job.as_str() {
        "suite" => suite(),
        "chunks" => chunks(),
        "orphan" => orphan(),
        "adopt" => adopt(),
        "watchdog" => watchdog(),
        "hang" => hang(),
        "diverge" => diverge(),
        "big" => big(),
        "serialized" => serialized(),
        "fake" => fake(),
        "split" => split(),
        "eager" => eager(),
        "oversize" => oversize(),
        "late" => late(),
        "busy_peer" => busy_peer(),
        "fast" => fast(),
        other => panic!("unknown job {other:?}"),
    }
    ExitCode::SUCCESS
}

/// Swaps `mine` with `partner` over the application's own `world` with raw rsmpi calls,
/// on `tag`: what `partner` sent.
fn swap_raw(world: &mpi::topology::SimpleCommunicator, partner: i32, mine: i32, tag: i32) -> i32 {
    use mpi::point_to_point::{Destination, Source};
    use mpi::topology::Communicator;
    let (out, mut back) = ([mine], [-1]);
    mpi::request::scope(|scope| {
        let s = world
            .process_at_rank(partner)
            .immediate_send_with_tag(scope, &out[..], tag);
        world
            .process_at_rank(partner)
            .receive_into_with_tag(&mut back[..], tag);
        s.wait();
    });
    back[0]
}

/// This process's rank in the job, as the launcher says (before MPI is initialised):
/// Open MPI's `OMPI_COMM_WORLD_RANK`, or the `PMI_RANK` of MPICH's Hydra.
fn launcher_rank() -> u32 {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .expect("the launcher names this rank")
}

/// [`config`] for the jobs that wait for the watchdog: they run with
/// `STARLING_WATCHDOG_SECS=1`.
fn watched_config() -> MpiConfig {
    let c = config();
    assert_eq!(
        c.watchdog,
        Duration::from_secs(1),
        "run with STARLING_WATCHDOG_SECS=1"
    );
    c
}

fn config() -> MpiConfig {
    let mut c = MpiConfig::from_env();
    c.rank.runtime.workers = 1;
    c
}

// ----- scenarios ---------------------------------------------------------------------------

fn peer(ctx: &Context) -> Rank {
    Rank(ctx.rank().0 ^ 1)
}

/// Runs `f` on the ranks of the pairs (0, 1), (2, 3), … that exist.
fn paired(ctx: &Context) -> bool {
    ctx.rank().0 ^ 1 < ctx.size()
}

/// `pingpong`, `mpi_isend`, `mpi_irecv`, `mpi_isend_detached`, `mpi_irecv_detached`:
/// pairs of ranks bounce a 16-float vector in every call flavour.
fn ping_pong(ctx: &Context, flavour: &str) {
    if !paired(ctx) {
        return;
    }
    let v = ctx.register(Vector::from_vec(vec![0.0f32; 16]));
    let me = ctx.rank().0;
    let other = peer(ctx);
    let inc = Codelet::new("inc", |b| {
        for x in b.w::<Vector<f32>>(0).as_mut_slice() {
            *x += 1.0;
        }
    });
    for round in 0..10u32 {
        let tag = Tag(i64::from(round));
        let my_turn = round.is_multiple_of(2) == me.is_multiple_of(2);
        if my_turn {
            ctx.task(&inc).rw(&v).submit();
            match flavour {
                "blocking" => ctx.send(&v, other, tag).wait().unwrap(),
                "async" => ctx.send(&v, other, tag).start().unwrap().wait().unwrap(),
                "sync" => ctx
                    .send(&v, other, tag)
                    .sync()
                    .start()
                    .unwrap()
                    .wait()
                    .unwrap(),
                _ => ctx.send(&v, other, tag).detach(|r| r.unwrap()).unwrap(),
            }
        } else {
            match flavour {
                "blocking" => ctx.recv(&v, other, tag).wait().unwrap(),
                "detached" => ctx.recv(&v, other, tag).detach(|r| r.unwrap()).unwrap(),
                _ => ctx.recv(&v, other, tag).start().unwrap().wait().unwrap(),
            }
        }
    }
    ctx.wait_for_all();
    let last = ctx.unregister(v).as_slice()[15];
    assert!(last == 10.0 || last == 9.0, "{flavour}: {last}");
}

/// `ring`, `ring_async`, `ring_async_implicit`, `ring_sync`, `ring_sync_detached`.
fn token_ring(ctx: &Context, loops: u32, variant: &'static str) {
    let (rank, size) = (ctx.rank().0, ctx.size());
    let token = ctx.register(Vector::<u32>::zeros(1));
    let inc = Codelet::new("increment_token", |b| {
        b.w::<Vector<u32>>(0).as_mut_slice()[0] += 1;
    });
    let prev = Rank((rank + size - 1) % size);
    let next = Rank((rank + 1) % size);
    for l in 0..loops {
        let tag = Tag(i64::from(l * size + rank));
        if !(l == 0 && rank == 0) {
            match variant {
                "detached" => ctx.recv(&token, prev, tag).detach(|r| r.unwrap()).unwrap(),
                _ => ctx.recv(&token, prev, tag).wait().unwrap(),
            }
        }
        ctx.task(&inc).rw(&token).submit();
        if !(l == loops - 1 && rank == size - 1) {
            let t = Tag(tag.0 + 1);
            match variant {
                "detached" => ctx.send(&token, next, t).detach(|r| r.unwrap()).unwrap(),
                "sync_detached" => ctx
                    .send(&token, next, t)
                    .sync()
                    .detach(|r| r.unwrap())
                    .unwrap(),
                "sync" => ctx
                    .send(&token, next, t)
                    .sync()
                    .start()
                    .unwrap()
                    .wait()
                    .unwrap(),
                _ => ctx.send(&token, next, t).start().unwrap().wait().unwrap(),
            }
        }
    }
    ctx.wait_for_all();
    let value = ctx.unregister(token).as_slice()[0];
    if rank == size - 1 {
        assert_eq!(value, loops * size, "{variant} on {size} ranks");
    }
}

/// `mpi_earlyrecv`, `mpi_earlyrecv2`: the sender sends before the receive exists. On
/// tags with no fast tag (negative) both wait in the engine as early data; on tags with
/// one, under the fast path (`docs/protocol.md` §19), they wait in MPI instead and the
/// engine keeps none.
fn early_data(ctx: &Context) {
    let fast = config().rank.fast_limit > 0;
    for (t1, t2, early) in [(-1, -2, 2), (1, 2, if fast { 0 } else { 2 })] {
        let a = ctx.register(Variable::new(0u64));
        let b = ctx.register(Variable::new(0u64));
        let before = ctx.early_messages();
        ctx.barrier(); // rank 0 counted before anything was sent
        match ctx.rank().0 {
            1 => {
                ctx.acquire(&a, AccessMode::W).get_mut().set(11);
                ctx.acquire(&b, AccessMode::W).get_mut().set(22);
                ctx.send(&a, Rank(0), Tag(t1)).wait().unwrap();
                ctx.send(&b, Rank(0), Tag(t2)).wait().unwrap();
                ctx.barrier();
            }
            0 => {
                ctx.set_tag(&a, Tag(t1)).unwrap(); // tag t1 registered here, t2 not
                ctx.barrier(); // both messages were sent: they arrive early
                ctx.recv(&b, Rank(1), Tag(t2)).wait().unwrap();
                ctx.recv(&a, Rank(1), Tag(t1)).wait().unwrap();
                let n = ctx.early_messages() - before;
                let va = ctx.acquire(&a, AccessMode::R).get().get();
                let vb = ctx.acquire(&b, AccessMode::R).get().get();
                assert_eq!((va, vb, n), (11, 22, early), "tags {t1} and {t2}");
            }
            _ => ctx.barrier(),
        }
        let _ = ctx.unregister(a);
        let _ = ctx.unregister(b);
    }
}

/// `mpi_sync`, `mpi_earlyrecv2_sync`: the receiver posts late, yet nothing waits as early
/// data, and the payload still arrives.
fn sync_never_creates_early_data(ctx: &Context) {
    let v = ctx.register(Vector::from_vec(vec![7u8; 5000]));
    match ctx.rank().0 {
        1 => {
            let req = ctx.send(&v, Rank(0), Tag(22)).sync().start().unwrap();
            ctx.barrier();
            req.wait().unwrap();
        }
        0 => {
            let before = ctx.early_messages();
            let w = ctx.register(Vector::from_vec(vec![0u8; 5000]));
            ctx.barrier();
            std::thread::sleep(Duration::from_millis(20));
            let n = ctx.early_messages() - before;
            ctx.recv(&w, Rank(1), Tag(22)).wait().unwrap();
            assert_eq!(ctx.acquire(&w, AccessMode::R).get().as_slice()[4999], 7);
            assert_eq!(n, 0, "a synchronous send created early data");
        }
        _ => ctx.barrier(),
    }
}

/// `sync`: issend tag 22 then a blocking send tag 12; the receiver takes 12 first.
fn standard_overtakes_pending_sync(ctx: &Context) {
    let a = ctx.register(Variable::new(ctx.rank().0 * 100 + 1));
    let b = ctx.register(Variable::new(ctx.rank().0 * 100 + 2));
    match ctx.rank().0 {
        1 => {
            let pending = ctx.send(&a, Rank(0), Tag(22)).sync().start().unwrap();
            ctx.send(&b, Rank(0), Tag(12)).wait().unwrap();
            pending.wait().unwrap();
        }
        0 => {
            ctx.recv(&b, Rank(1), Tag(12)).wait().unwrap();
            ctx.recv(&a, Rank(1), Tag(22)).wait().unwrap();
            let va = ctx.acquire(&a, AccessMode::R).get().get();
            let vb = ctx.acquire(&b, AccessMode::R).get().get();
            assert_eq!((va, vb), (101, 102));
        }
        _ => {}
    }
}

/// `tags_checking`, `multiple_send`: sent 88 then 77, received 77 then 88, in every
/// blocking/detached combination.
fn tag_matching_out_of_order(ctx: &Context) {
    for (send_detached, recv_detached) in
        [(false, false), (false, true), (true, false), (true, true)]
    {
        let x = ctx.register(Variable::new(0i32));
        let y = ctx.register(Variable::new(0i32));
        match ctx.rank().0 {
            1 => {
                ctx.acquire(&x, AccessMode::W).get_mut().set(12);
                ctx.acquire(&y, AccessMode::W).get_mut().set(24);
                for (h, t) in [(&y, 88), (&x, 77)] {
                    if send_detached {
                        ctx.send(h, Rank(0), Tag(t)).detach(|r| r.unwrap()).unwrap();
                    } else {
                        ctx.send(h, Rank(0), Tag(t)).wait().unwrap();
                    }
                }
            }
            0 => {
                for (h, t) in [(&x, 77), (&y, 88)] {
                    if recv_detached {
                        ctx.recv(h, Rank(1), Tag(t)).detach(|r| r.unwrap()).unwrap();
                    } else {
                        ctx.recv(h, Rank(1), Tag(t)).wait().unwrap();
                    }
                }
                ctx.wait_for_all();
                let vx = ctx.acquire(&x, AccessMode::R).get().get();
                let vy = ctx.acquire(&y, AccessMode::R).get().get();
                assert_eq!((vx, vy), (12, 24));
            }
            _ => {}
        }
        ctx.wait_for_all();
    }
}

/// `gather`, `gather2`: every rank n > 0 sends n, 2n, 4n with tags 42, 44, 46.
fn many_to_one_with_equal_tags(ctx: &Context) {
    let me = ctx.rank().0;
    if me == 0 {
        let mut got = Vec::new();
        for src in 1..ctx.size() {
            let h = ctx.register(Variable::new(0u32));
            for tag in [42, 44, 46] {
                ctx.recv(&h, Rank(src), Tag(tag)).wait().unwrap();
                got.push(ctx.acquire(&h, AccessMode::R).get().get());
            }
        }
        let want: Vec<u32> = (1..ctx.size()).flat_map(|s| [s, 2 * s, 4 * s]).collect();
        assert_eq!(got, want);
    } else {
        for (tag, k) in [(42, 1), (44, 2), (46, 4)] {
            let h = ctx.register(Variable::new(me * k));
            ctx.send(&h, Rank(0), Tag(tag)).wait().unwrap();
        }
    }
}

/// `broadcast`, `coop_wrong_order`: write 42, send; write 43, send (same tag) —
/// receivers see 42 then 43. Then two tags received in the other order.
fn same_tag_sends_deliver_the_value_current_at_each_send(ctx: &Context) {
    let h = ctx.register(Variable::new(0i32));
    let set = |v: i32| Codelet::new("set", move |b| b.w::<Variable<i32>>(0).set(v));
    if ctx.rank().0 == 0 {
        for (value, tag) in [(42, 0), (43, 0), (44, 2), (45, 1)] {
            ctx.task(&set(value)).w(&h).submit();
            for r in 1..ctx.size() {
                ctx.send(&h, Rank(r), Tag(tag))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
        }
        ctx.wait_for_all();
    } else {
        let mut seen = Vec::new();
        for tag in [0, 0, 1, 2] {
            ctx.recv(&h, Rank(0), Tag(tag)).wait().unwrap();
            seen.push(ctx.acquire(&h, AccessMode::R).get().get());
        }
        assert_eq!(seen, vec![42, 43, 45, 44]);
    }
}

/// `user_datatype_early`, `mpi_complex`: the complex interface packs; it arrives early.
fn packed_types_arriving_early(ctx: &Context) {
    match ctx.rank().0 {
        1 => {
            let c = ctx.register(Complex::new(vec![1.5, 2.5, 3.5], vec![-1.0, 0.0, 1.0]).unwrap());
            ctx.send(&c, Rank(0), Tag(9)).wait().unwrap();
            ctx.barrier();
        }
        0 => {
            let c = ctx.register(Complex::zeros(3));
            ctx.barrier();
            ctx.recv(&c, Rank(1), Tag(9)).wait().unwrap();
            let data = ctx.unregister(c);
            assert_eq!(
                (data.real().to_vec(), data.imag().to_vec()),
                (vec![1.5, 2.5, 3.5], vec![-1.0, 0.0, 1.0])
            );
        }
        _ => ctx.barrier(),
    }
}

/// `block_interface`: an 8³ block inside a 32³ allocation on rank 0, dense on rank 1;
/// 0 sends, 1 checks and writes 33, sends back; rank 0's padding is untouched.
fn strided_blocks_keep_their_padding(ctx: &Context) {
    let (n, big) = (8usize, 32usize);
    match ctx.rank().0 {
        0 => {
            let mut data = vec![-7.0f32; big * big * big];
            for z in 0..n {
                for y in 0..n {
                    for x in 0..n {
                        data[x + y * big + z * big * big] = 1.0;
                    }
                }
            }
            let h = ctx.register(Block::new(n, n, n, big, big * big, data).unwrap());
            ctx.send(&h, Rank(1), Tag(0x42)).wait().unwrap();
            ctx.recv(&h, Rank(1), Tag(0x1337)).wait().unwrap();
            let b = ctx.unregister(h);
            assert!((0..n).all(|z| (0..n).all(|y| (0..n).all(|x| b.get(x, y, z) == 33.0))));
            let padding = b.as_slice().iter().filter(|v| **v == -7.0).count();
            assert_eq!(padding, big * big * big - n * n * n);
        }
        1 => {
            let h = ctx.register(Block::<f32>::zeros(n, n, n));
            ctx.recv(&h, Rank(0), Tag(0x42)).wait().unwrap();
            let all_one = ctx
                .acquire(&h, AccessMode::R)
                .get()
                .as_slice()
                .iter()
                .all(|v| *v == 1.0);
            assert!(all_one);
            for v in ctx.acquire(&h, AccessMode::W).get_mut().as_mut_slice() {
                *v = 33.0;
            }
            ctx.send(&h, Rank(0), Tag(0x1337)).wait().unwrap();
        }
        _ => {}
    }
}

/// `ndim_interface`: a 4⁴ array inside 6⁴ on rank 0, dense on rank 1; 0 sends, 1 checks
/// 0, 1, … and rewrites from 10, sends back; rank 0 sees 10, 11, … and its padding.
fn ndim_arrays_keep_their_padding(ctx: &Context) {
    let (n, big) = (4usize, 6usize);
    let index = |k: usize| [k % n, k / n % n, k / (n * n) % n, k / (n * n * n)];
    let count = n.pow(4);
    match ctx.rank().0 {
        0 => {
            let ldn = vec![1, big, big * big, big * big * big];
            let mut a = Ndim::new(vec![n; 4], ldn, vec![-7_i32; big.pow(4)]).unwrap();
            for k in 0..count {
                a.set(&index(k), k as i32);
            }
            let h = ctx.register(a);
            ctx.send(&h, Rank(1), Tag(0x43)).wait().unwrap();
            ctx.recv(&h, Rank(1), Tag(0x1338)).wait().unwrap();
            let a = ctx.unregister(h);
            assert!((0..count).all(|k| a.get(&index(k)) == 10 + k as i32));
            let padding = a.as_slice().iter().filter(|v| **v == -7).count();
            assert_eq!(padding, big.pow(4) - count);
        }
        1 => {
            let h = ctx.register(Ndim::<i32>::zeros(&[n; 4]));
            ctx.recv(&h, Rank(0), Tag(0x43)).wait().unwrap();
            let in_order = ctx.acquire(&h, AccessMode::R).get().as_slice()
                == (0..count as i32).collect::<Vec<_>>();
            assert!(in_order);
            for v in ctx.acquire(&h, AccessMode::W).get_mut().as_mut_slice() {
                *v += 10;
            }
            ctx.send(&h, Rank(0), Tag(0x1338)).wait().unwrap();
        }
        _ => {}
    }
}

/// `datatypes` for CSR and BCSR: 0 → 1 → 0, rank 1 receiving into placeholders of the
/// sender's shape; a CSR of another shape with the same size is refused, typed.
fn sparse_matrices_round_trip(ctx: &Context) {
    let csr = || Csr::new(4, vec![1.0, 2.0, 3.0], vec![3, 0, 2], vec![1, 2, 2, 4], 1).unwrap();
    let bcsr = || Bcsr::new(2, 1, 2, vec![1_u16, 2, 3, 4], vec![1, 0], vec![0, 1, 2], 0).unwrap();
    match ctx.rank().0 {
        0 => {
            let (a, b) = (ctx.register(csr()), ctx.register(bcsr()));
            ctx.send(&a, Rank(1), Tag(0x50)).wait().unwrap();
            ctx.send(&b, Rank(1), Tag(0x51)).wait().unwrap();
            ctx.recv(&a, Rank(1), Tag(0x52)).wait().unwrap();
            ctx.recv(&b, Rank(1), Tag(0x53)).wait().unwrap();
            assert_eq!(ctx.unregister(a), csr());
            assert_eq!(ctx.unregister(b), bcsr());
            // 3 rows and 2 entries: 48 + 4 * 4 + 4 * 2 + 4 * 2 = 80 bytes, as rank 1's.
            let other = Csr::new(1, vec![5_u32, 6], vec![0, 0], vec![0, 1, 2, 2], 0).unwrap();
            let other = ctx.register(other);
            ctx.send(&other, Rank(1), Tag(0x54)).wait().unwrap();
        }
        1 => {
            let a = ctx.register(Csr::<f64>::zeros(3, 4, 3).unwrap());
            let b = ctx.register(Bcsr::<u16>::zeros(2, 2, 2, 2, 1).unwrap());
            ctx.recv(&a, Rank(0), Tag(0x50)).wait().unwrap();
            ctx.recv(&b, Rank(0), Tag(0x51)).wait().unwrap();
            assert_eq!(*ctx.acquire(&a, AccessMode::R).get(), csr());
            assert_eq!(*ctx.acquire(&b, AccessMode::R).get(), bcsr());
            ctx.send(&a, Rank(0), Tag(0x52)).wait().unwrap();
            ctx.send(&b, Rank(0), Tag(0x53)).wait().unwrap();
            // 1 row and 3 entries: 48 + 4 * 2 + 4 * 3 + 4 * 3 = 80 bytes, as rank 0's.
            let wrong = ctx.register(Csr::<u32>::zeros(1, 1, 3).unwrap());
            let err = ctx.recv(&wrong, Rank(0), Tag(0x54)).wait().unwrap_err();
            assert!(
                matches!(err, CommError::Data(DataError::InvalidPayload(_))),
                "{err:?}"
            );
        }
        _ => {}
    }
}

/// Matrices with a leading dimension travel without their padding.
fn matrices_with_a_leading_dimension(ctx: &Context) {
    match ctx.rank().0 {
        0 => {
            let mut data = vec![0.0f64; 10 * 4];
            for j in 0..4 {
                for i in 0..3 {
                    data[i + j * 10] = (i * 10 + j) as f64;
                }
            }
            let m = ctx.register(Matrix::new(3, 4, 10, data).unwrap());
            ctx.send(&m, Rank(1), Tag(5)).wait().unwrap();
        }
        1 => {
            let m = ctx.register(Matrix::<f64>::zeros(3, 4));
            ctx.recv(&m, Rank(0), Tag(5)).wait().unwrap();
            let m = ctx.unregister(m);
            assert!((0..4).all(|j| (0..3).all(|i| m.get(i, j) == (i * 10 + j) as f64)));
        }
        _ => {}
    }
}

/// `mpi_test`, `multiple_send`: isend/irecv, then a busy test loop.
fn two_requests_complete_by_polling(ctx: &Context) {
    if !paired(ctx) {
        return;
    }
    let a = ctx.register(Variable::new(42u32));
    let b = ctx.register(Variable::new(11u32));
    let other = peer(ctx);
    let reqs = if ctx.rank().0.is_multiple_of(2) {
        vec![
            ctx.send(&a, other, Tag(12)).start().unwrap(),
            ctx.send(&b, other, Tag(13)).start().unwrap(),
        ]
    } else {
        ctx.acquire(&a, AccessMode::W).get_mut().set(0);
        ctx.acquire(&b, AccessMode::W).get_mut().set(0);
        vec![
            ctx.recv(&a, other, Tag(12)).start().unwrap(),
            ctx.recv(&b, other, Tag(13)).start().unwrap(),
        ]
    };
    let mut done = [false, false];
    while !done.iter().all(|d| *d) {
        for (i, r) in reqs.iter().enumerate() {
            if !done[i] {
                if let Some(result) = r.test() {
                    result.unwrap();
                    done[i] = true;
                }
            }
        }
        std::thread::yield_now();
    }
    drop(reqs);
    let va = ctx.acquire(&a, AccessMode::R).get().get();
    let vb = ctx.acquire(&b, AccessMode::R).get().get();
    assert_eq!((va, vb), (42, 11));
}

/// `callback`, `wait_for_all`: 1 MiB detached transfers whose callbacks have run when
/// wait_for_all returns; every detached callback runs once.
fn callbacks_fire_exactly_once(ctx: &Context) {
    if !paired(ctx) {
        return;
    }
    let count = Arc::new(AtomicUsize::new(0));
    let v = ctx.register(Vector::from_vec(vec![ctx.rank().0 as u8; 1 << 20]));
    let other = peer(ctx);
    for t in 0..5 {
        let c = Arc::clone(&count);
        let cb = move |r: Result<(), CommError>| {
            r.unwrap();
            c.fetch_add(1, Ordering::SeqCst);
        };
        if ctx.rank().0 % 2 == 1 {
            ctx.send(&v, other, Tag(t)).detach(cb).unwrap();
        } else {
            ctx.recv(&v, other, Tag(t)).detach(cb).unwrap();
        }
    }
    ctx.wait_for_all();
    let n = count.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(count.load(Ordering::SeqCst), n, "no callback runs twice");
    assert_eq!(n, 5);
    let got = ctx.unregister(v);
    let from = (ctx.rank().0 | 1) as u8;
    assert!(got.as_slice().iter().all(|b| *b == from));
}

/// `mpi_detached_tag`: isend/irecv_detached with unlock tags, and the array variants.
fn tag_unlocking_variants(ctx: &Context) {
    if !paired(ctx) {
        return;
    }
    let v = ctx.register(Vector::from_vec(vec![1.0f32; 16]));
    let w = ctx.register(Vector::from_vec(vec![2.0f32; 16]));
    let other = peer(ctx);
    let base = 1000 + u64::from(ctx.rank().0 / 2) * 100;
    for round in 0..4u64 {
        let tag = TaskTag(base + round);
        if round.is_multiple_of(2) == (ctx.rank().0.is_multiple_of(2)) {
            ctx.send(&v, other, Tag(round as i64))
                .unlock(tag)
                .detach(|r| r.unwrap())
                .unwrap();
        } else {
            ctx.recv(&v, other, Tag(round as i64))
                .unlock(tag)
                .detach(|r| r.unwrap())
                .unwrap();
        }
        ctx.tag_wait(&[tag]);
    }
    let items = [(&v, other, Tag(100)), (&w, other, Tag(101))];
    let all = TaskTag(base + 99);
    if ctx.rank().0.is_multiple_of(2) {
        ctx.send_all(items)
            .unlock(all)
            .detach(|r| r.unwrap())
            .unwrap();
    } else {
        ctx.recv_all(items)
            .unlock(all)
            .detach(|r| r.unwrap())
            .unwrap();
    }
    ctx.tag_wait(&[all]);
    ctx.wait_for_all();
}

/// `multiple_comms`: the same tags on the world and on duplicates do not mix, even when
/// received in the other order.
fn duplicates_keep_the_same_tags_apart(ctx: &Context) {
    let dup = ctx.comm_dup(CommId::WORLD);
    let dup2 = ctx.comm_dup(CommId::WORLD);
    let hs: Vec<_> = (0..3).map(|_| ctx.register(Variable::new(0u8))).collect();
    let comms = [CommId::WORLD, dup, dup2];
    match ctx.rank().0 {
        0 => {
            for (i, (h, comm)) in hs.iter().zip(comms).enumerate() {
                ctx.acquire(h, AccessMode::W).get_mut().set(i as u8 + 1);
                ctx.send(h, Rank(1), Tag(5))
                    .comm(comm)
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.wait_for_all();
        }
        1 => {
            for (h, comm) in hs.iter().zip(comms).rev() {
                ctx.recv(h, Rank(0), Tag(5))
                    .comm(comm)
                    .start()
                    .unwrap()
                    .wait()
                    .unwrap();
            }
            let got: Vec<u8> = hs
                .iter()
                .map(|h| ctx.acquire(h, AccessMode::R).get().get())
                .collect();
            assert_eq!(got, vec![1, 2, 3]);
        }
        _ => {}
    }
}

/// `comm/comm`, `comm/mix_comm`: the world split by parity, each half numbered in reverse
/// world order; in each half the last member sends on the half, on the world and on a
/// duplicate of the half, all with one tag, and member 0 receives them in the other order,
/// each from its own communicator; ranks translate both ways.
fn splits_keep_their_members_ranks_and_matching(ctx: &Context) {
    let w = ctx.rank().0;
    let world = ctx.world();
    let half = ctx
        .comm_split(&world, Some(w % 2), -i64::from(w))
        .unwrap()
        .unwrap();
    let members: Vec<Rank> = (0..ctx.size())
        .rev()
        .filter(|x| x % 2 == w % 2)
        .map(Rank)
        .collect();
    assert_eq!(half.members(), members);
    assert_eq!(half.world_rank(half.rank()), Some(ctx.rank()));
    assert_eq!(half.rank_of(ctx.rank()), Some(half.rank()));
    let dup = half.dup(ctx).unwrap();
    assert_ne!(dup.id(), half.id());
    let n = half.size();
    if n < 2 {
        return;
    }
    let hs: Vec<_> = (0..3).map(|_| ctx.register(Variable::new(0u32))).collect();
    let last = Rank(n - 1);
    if half.rank() == last {
        for (i, h) in hs.iter().enumerate() {
            ctx.acquire(h, AccessMode::W)
                .get_mut()
                .set(w * 10 + i as u32);
        }
        ctx.send(&hs[0], Rank(0), Tag(3)).on(&half).wait().unwrap();
        let to = half.world_rank(Rank(0)).unwrap();
        ctx.send(&hs[1], to, Tag(3)).wait().unwrap();
        ctx.send(&hs[2], Rank(0), Tag(3)).on(&dup).wait().unwrap();
    } else if half.rank() == Rank(0) {
        let from = half.world_rank(last).unwrap();
        ctx.recv(&hs[2], last, Tag(3)).on(&dup).wait().unwrap();
        ctx.recv(&hs[1], from, Tag(3)).wait().unwrap();
        ctx.recv(&hs[0], last, Tag(3)).on(&half).wait().unwrap();
        let got: Vec<u32> = hs
            .iter()
            .map(|h| ctx.acquire(h, AccessMode::R).get().get())
            .collect();
        assert_eq!(got, vec![from.0 * 10, from.0 * 10 + 1, from.0 * 10 + 2]);
    }
    half.barrier(ctx).unwrap();
}

/// A receive with sequential consistency off is not ordered after an acquisition.
fn unordered_receive(ctx: &Context) {
    let h = ctx.register(Variable::new(0u32));
    match ctx.rank().0 {
        0 => {
            ctx.acquire(&h, AccessMode::W).get_mut().set(5);
            ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
        }
        1 => {
            let held = ctx.acquire(&h, AccessMode::R);
            let req = ctx
                .recv(&h, Rank(0), Tag(1))
                .sequential_consistency(false)
                .start()
                .unwrap();
            drop(held);
            req.wait().unwrap();
            assert_eq!(ctx.acquire(&h, AccessMode::R).get().get(), 5);
        }
        _ => {}
    }
}

/// `stats`: 3 sends of 4 bytes from 0 to 1 (statistics are on in this job).
fn statistics_count_payload_bytes(ctx: &Context) {
    let before = ctx.comm_amounts().expect("statistics are on in this job");
    let h = ctx.register(Variable::new(7u32));
    for t in 0..3 {
        match ctx.rank().0 {
            0 => ctx.send(&h, Rank(1), Tag(t)).wait().unwrap(),
            1 => ctx.recv(&h, Rank(0), Tag(t)).wait().unwrap(),
            _ => {}
        }
    }
    let after = ctx.comm_amounts().expect("statistics are on in this job");
    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let mut want = vec![0; ctx.size() as usize];
    if ctx.rank().0 == 0 {
        want[1] = 12;
    }
    assert_eq!(sent, want);
}

/// A receive into a smaller or larger handle fails with a size mismatch and copies
/// nothing.
fn size_mismatch(ctx: &Context) {
    match ctx.rank().0 {
        0 => {
            for len in [100, 10_000, 1 << 20] {
                let h = ctx.register(Vector::from_vec(vec![1u8; len]));
                ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
                ctx.send(&h, Rank(1), Tag(2)).wait().unwrap();
            }
        }
        1 => {
            for len in [100, 10_000, 1 << 20] {
                let small = ctx.register(Vector::from_vec(vec![9u8; len / 10]));
                let large = ctx.register(Vector::from_vec(vec![9u8; len * 10]));
                let e1 = ctx.recv(&small, Rank(0), Tag(1)).wait().unwrap_err();
                let e2 = ctx.recv(&large, Rank(0), Tag(2)).wait().unwrap_err();
                assert!(ctx.unregister(small).as_slice().iter().all(|v| *v == 9));
                assert!(ctx.unregister(large).as_slice().iter().all(|v| *v == 9));
                assert_eq!(
                    e1,
                    CommError::Data(DataError::SizeMismatch {
                        expected: len / 10,
                        got: len
                    })
                );
                assert_eq!(
                    e2,
                    CommError::Data(DataError::SizeMismatch {
                        expected: len * 10,
                        got: len
                    })
                );
            }
        }
        _ => {}
    }
}

/// Ranks outside the world and tags used twice are errors at the call.
fn bad_arguments(ctx: &Context) {
    let h = ctx.register(Variable::new(0u8));
    let g = ctx.register(Variable::new(0u8));
    let size = ctx.size();
    assert_eq!(
        ctx.send(&h, Rank(size + 5), Tag(0)).start().unwrap_err(),
        CommError::RankOutOfRange {
            rank: Rank(size + 5),
            size
        }
    );
    assert_eq!(
        ctx.recv(&h, Rank(size), Tag(0)).start().unwrap_err(),
        CommError::RankOutOfRange {
            rank: Rank(size),
            size
        }
    );
    ctx.set_tag(&h, Tag(5)).unwrap();
    assert_eq!(
        ctx.set_tag(&g, Tag(5)).unwrap_err(),
        CommError::TagInUse { tag: Tag(5) }
    );
    let _ = ctx.unregister(h);
    ctx.set_tag(&g, Tag(5)).unwrap();
    let _ = ctx.unregister(g);
}

/// Payloads of many sizes, eager and not, standard and synchronous, both directions;
/// with `STARLING_MPI_MAX_MESSAGE` small, every long one travels in chunks.
fn payload_sizes(ctx: &Context) {
    if !paired(ctx) {
        return;
    }
    let other = peer(ctx);
    let even = ctx.rank().0.is_multiple_of(2);
    let sizes = [
        0usize,
        1,
        999,
        1000,
        1001,
        4095,
        4096,
        4097,
        65_536,
        1 << 20,
        3_000_017,
    ];
    let pattern = |len: usize, salt: usize| -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + salt) % 251) as u8).collect()
    };
    for (i, len) in sizes.into_iter().enumerate() {
        for sync in [false, true] {
            let tag = Tag(i as i64 * 2 + i64::from(sync));
            if even {
                let h = ctx.register(Vector::from_vec(pattern(len, i)));
                ctx.send(&h, other, tag).start().unwrap().wait().unwrap();
                let back = ctx.register(Vector::<u8>::zeros(len));
                ctx.recv(&back, other, tag).wait().unwrap();
                assert!(ctx.unregister(back).as_slice() == pattern(len, i + 1).as_slice());
            } else {
                let h = ctx.register(Vector::<u8>::zeros(len));
                ctx.recv(&h, other, tag).wait().unwrap();
                let got = ctx.unregister(h);
                assert!(got.as_slice() == pattern(len, i).as_slice(), "size {len}");
                let reply = ctx.register(Vector::from_vec(pattern(len, i + 1)));
                ctx.send(&reply, other, tag).wait().unwrap();
            }
        }
    }
}

type Scenario = (&'static str, fn(&Context));

const SUITE: &[Scenario] = &[
    ("ping_pong blocking", |c| ping_pong(c, "blocking")),
    ("ping_pong async", |c| ping_pong(c, "async")),
    ("ping_pong sync", |c| ping_pong(c, "sync")),
    ("ping_pong detached", |c| ping_pong(c, "detached")),
    ("ring detached", |c| token_ring(c, 20, "detached")),
    ("ring async", |c| token_ring(c, 20, "async")),
    ("ring sync", |c| token_ring(c, 20, "sync")),
    ("ring sync_detached", |c| token_ring(c, 20, "sync_detached")),
    ("early data", early_data),
    (
        "sync never creates early data",
        sync_never_creates_early_data,
    ),
    (
        "standard overtakes pending sync",
        standard_overtakes_pending_sync,
    ),
    ("tag matching out of order", tag_matching_out_of_order),
    ("many to one with equal tags", many_to_one_with_equal_tags),
    (
        "same tag sends deliver the current value",
        same_tag_sends_deliver_the_value_current_at_each_send,
    ),
    ("packed types arriving early", packed_types_arriving_early),
    (
        "strided blocks keep their padding",
        strided_blocks_keep_their_padding,
    ),
    (
        "matrices with a leading dimension",
        matrices_with_a_leading_dimension,
    ),
    (
        "ndim arrays keep their padding",
        ndim_arrays_keep_their_padding,
    ),
    ("sparse matrices round trip", sparse_matrices_round_trip),
    (
        "two requests complete by polling",
        two_requests_complete_by_polling,
    ),
    ("callbacks fire exactly once", callbacks_fire_exactly_once),
    ("tag unlocking variants", tag_unlocking_variants),
    (
        "duplicates keep the same tags apart",
        duplicates_keep_the_same_tags_apart,
    ),
    (
        "splits keep their members, ranks and matching",
        splits_keep_their_members_ranks_and_matching,
    ),
    ("unordered receive", unordered_receive),
    (
        "statistics count payload bytes",
        statistics_count_payload_bytes,
    ),
    ("size mismatch", size_mismatch),
    ("bad arguments", bad_arguments),
    ("payload sizes", payload_sizes),
    (
        "in-place sends keep the value of their submission",
        in_place_send_keeps_its_value,
    ),
];

/// A large send travels from the handle's own memory (in place): a task that writes the
/// handle after the send was submitted waits until the send completed, so the receiver
/// gets the value at submission even when it posts its receive late; and the writer's
/// value is the one the next send carries.
fn in_place_send_keeps_its_value(ctx: &Context) {
    if !paired(ctx) {
        return;
    }
    let other = peer(ctx);
    let len = 1 << 20;
    let set = Codelet::new("set", |b| {
        for x in b.w::<Vector<u8>>(0).as_mut_slice() {
            *x = 2;
        }
    });
    if ctx.rank().0.is_multiple_of(2) {
        let h = ctx.register(Vector::from_vec(vec![1u8; len]));
        let first = ctx.send(&h, other, Tag(1)).start().unwrap();
        ctx.task(&set).w(&h).submit();
        ctx.send(&h, other, Tag(2)).wait().unwrap();
        first.wait().unwrap();
        ctx.wait_for_all();
    } else {
        std::thread::sleep(Duration::from_millis(50));
        let h = ctx.register(Vector::<u8>::zeros(len));
        ctx.recv(&h, other, Tag(1)).wait().unwrap();
        assert!(
            ctx.acquire(&h, AccessMode::R)
                .get()
                .as_slice()
                .iter()
                .all(|v| *v == 1)
        );
        ctx.recv(&h, other, Tag(2)).wait().unwrap();
        assert!(
            ctx.acquire(&h, AccessMode::R)
                .get()
                .as_slice()
                .iter()
                .all(|v| *v == 2)
        );
    }
}

fn run_scenarios(job: &str, config: MpiConfig, scenarios: &[Scenario]) {
    let rank = starling::mpi::init(config).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    for (name, f) in scenarios {
        let start = Instant::now();
        f(ctx);
        ctx.wait_for_all();
        ctx.barrier();
        if me == 0 {
            println!(
                "[{} ranks] {name} ... ok ({:.0} ms)",
                ctx.size(),
                start.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    rank.shutdown().expect("a clean shutdown");
    println!("rank {me}: {job} passed");
}

fn suite() {
    let mut config = config();
    config.rank.stats = true;
    run_scenarios("suite", config, SUITE);
}

fn chunks() {
    let config = config();
    assert_eq!(
        config.max_message, 1000,
        "run with STARLING_MPI_MAX_MESSAGE=1000"
    );
    assert_eq!(config.communicators, 2, "run with STARLING_MPI_COMMS=2");
    run_scenarios(
        "chunks",
        config,
        &[
            ("payload sizes (chunked)", payload_sizes),
            (
                "duplicates sharing one MPI communicator",
                duplicates_keep_the_same_tags_apart,
            ),
            (
                "callbacks fire exactly once (chunked)",
                callbacks_fire_exactly_once,
            ),
            ("size mismatch (chunked)", size_mismatch),
        ],
    );
}

/// Shutdown reports messages never received (eager and not) and requests never waited
/// on, with their ranks, instead of aborting.
fn orphan() {
    let rank = starling::mpi::init(config()).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    if me == 1 {
        let h = ctx.register(Variable::new(5u32));
        ctx.send(&h, Rank(0), Tag(77)).wait().unwrap();
        let big = ctx.register(Vector::from_vec(vec![1u8; 10_000]));
        ctx.send(&big, Rank(0), Tag(78)).wait().unwrap();
        let req = ctx.send(&h, Rank(0), Tag(79)).start().unwrap();
        drop(req);
    } else {
        let h = ctx.register(Variable::new(0u32));
        ctx.recv(&h, Rank(1), Tag(79)).wait().unwrap();
    }
    let err = rank.shutdown().expect_err("leftovers are reported");
    let text = err.to_string();
    if me == 0 {
        assert_eq!(err.leftovers.len(), 2, "{text}");
        assert!(
            text.contains("rank 0: message from rank 1 with tag 77 (4 bytes) was never received"),
            "{text}"
        );
        assert!(
            text.contains(
                "rank 0: message from rank 1 with tag 78 (10000 bytes) was never received"
            ),
            "{text}"
        );
    } else {
        assert_eq!(err.leftovers.len(), 1, "{text}");
        assert!(
            text.contains("request never waited on: send of data 0 to rank 0 with tag 79"),
            "{text}"
        );
    }
    println!("rank {me}: orphan passed");
}

/// The application initialised MPI itself: Starling checks its thread level, adopts it,
/// runs its traffic on its own duplicate while the application sends on the world with
/// the very tags Starling uses (42, 43), and leaves finalizing to the application.
fn adopt() {
    let (universe, provided) =
        mpi::initialize_with_threading(Threading::Multiple).expect("MPI initialises");
    assert_eq!(
        provided,
        Threading::Multiple,
        "this test needs MPI_THREAD_MULTIPLE"
    );
    use mpi::point_to_point::{Destination, Source};
    use mpi::topology::Communicator;
    let world = universe.world();
    let me = world.rank();
    let other = 1 - me;

    // Serialized would be enough without application MPI calls; Multiple is required when
    // the application calls MPI.
    let mut c = config();
    c.application_calls_mpi = true;
    let rank = starling::mpi::init(c).expect("Starling adopts MPI");
    assert!(matches!(
        starling::mpi::init(config()),
        Err(MpiError::AlreadyRunning)
    ));
    let ctx = rank.context();
    let v = ctx.register(Vector::from_vec(vec![me as u8; 100]));
    let tag = Tag(i64::from(ctx.communication_tag()));
    if me == 0 {
        ctx.send(&v, Rank(1), tag).detach(|r| r.unwrap()).unwrap();
    } else {
        ctx.recv(&v, Rank(0), tag).detach(|r| r.unwrap()).unwrap();
    }
    // Raw MPI on the world, on Starling's envelope and data tags, at the same time.
    for t in [42, 43] {
        let out = [me * 1000 + t; 4];
        let mut back = [0i32; 4];
        mpi::request::scope(|scope| {
            let sreq = world
                .process_at_rank(other)
                .immediate_send_with_tag(scope, &out[..], t);
            world
                .process_at_rank(other)
                .receive_into_with_tag(&mut back[..], t);
            sreq.wait();
        });
        assert_eq!(back, [other * 1000 + t; 4]);
    }
    ctx.wait_for_all();
    if me == 1 {
        assert!(ctx.unregister(v).as_slice().iter().all(|b| *b == 0));
    }
    rank.shutdown().expect("a clean shutdown");
    // MPI is still the application's: it can still talk, and finalizes on drop.
    assert_eq!(swap_raw(&world, other, me, 1), other);
    drop(universe);
    println!("rank {me}: adopt passed");
}

/// Rank 1 never comes to the closing barrier (it is stuck elsewhere for a minute):
/// rank 0's shutdown gives up after the watchdog's second with the explanation, instead
/// of waiting in the barrier for as long as rank 1 is stuck.
fn late() {
    let c = watched_config();
    let dir = c.hang_dir.clone();
    let rank = starling::mpi::init(c).expect("MPI starts");
    let me = rank.context().rank().0;
    if me == 1 {
        std::thread::sleep(Duration::from_secs(60));
        let _ = rank.shutdown();
        return;
    }
    let start = Instant::now();
    let err = rank
        .shutdown()
        .expect_err("the watchdog gives up on the barrier");
    let text = err.to_string();
    assert!(start.elapsed() < Duration::from_secs(15), "{text}");
    // The closing barrier begins with the agreement check's exchange (debug builds):
    // what rank 0 waits for is rank 1's digest.
    assert!(text.contains("nothing progressed for 1.0 s"), "{text}");
    assert!(text.contains("no report from rank 1"), "{text}");
    clean_hang_dir(dir.as_deref(), me);
    println!("rank 0: late passed");
}

/// Rank 0 computes for three watchdog timeouts before it sends, and again before it
/// shuts down: rank 1 waits that long in a receive, then in the closing barrier, with
/// nothing moving on its own side. Its watchdog sees rank 0's heartbeat move (a running
/// task is progress) and waits: a busy peer is not a hang, and the job ends cleanly.
/// (`late` is the other side: a peer that stands still is given up on.)
fn busy_peer() {
    let rank = starling::mpi::init(watched_config()).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let v = ctx.register(Variable::new(0u32));
    let compute = Codelet::new("compute", |b| {
        std::thread::sleep(Duration::from_secs(3));
        b.w::<Variable<u32>>(0).set(7);
    });
    if me == 0 {
        ctx.task(&compute).w(&v).submit();
        ctx.send(&v, Rank(1), Tag(1)).wait().expect("send");
        ctx.task(&compute).w(&v).submit();
    } else {
        let start = Instant::now();
        ctx.recv(&v, Rank(0), Tag(1))
            .wait()
            .expect("a receive from a busy peer is not given up on");
        assert!(start.elapsed() >= Duration::from_secs(2));
        assert_eq!(ctx.acquire(&v, AccessMode::R).get().get(), 7);
    }
    let _ = ctx.unregister(v);
    rank.shutdown()
        .expect("a rank waiting for a busy peer shuts down cleanly");
    println!("rank {me}: busy_peer passed");
}

/// A peer that is not Starling sends an "envelope" twice the size of any receive posted
/// for one (128 KiB on Starling's envelope tag and communicator). Under MPI's default
/// error handler that is `MPI_ERR_TRUNCATE` and the job aborts; Starling's communicators
/// return errors instead, so rank 1 drops the message with a line naming the peer, goes
/// on (a task runs), and shuts down cleanly. Rank 0 is plain MPI: it makes the same
/// duplicates of the world as Starling's start-up (collective), and joins the shutdown
/// barrier's exchange of envelope counts.
fn oversize() {
    use mpi::collective::CommunicatorCollectives;
    use mpi::point_to_point::Destination;
    use mpi::topology::Communicator;
    let world_rank = launcher_rank();
    let mut c = config();
    if world_rank == 0 {
        let (universe, _) =
            mpi::initialize_with_threading(Threading::Serialized).expect("MPI initialises");
        let world = universe.world();
        let dups: Vec<_> = (0..c.communicators.max(1))
            .map(|_| world.duplicate())
            .collect();
        let junk = vec![0xA5u8; 128 << 10];
        let envelope_tag = c.rank.communication_tag;
        dups[0]
            .process_at_rank(1)
            .send_with_tag(&junk[..], envelope_tag);
        // Rank 1's shutdown barrier: each rank's count of envelopes sent to each rank.
        let mine: Vec<u8> = [0u64, 1].iter().flat_map(|n| n.to_le_bytes()).collect();
        let mut theirs = [0u8; 16];
        // Non-blocking, as Starling's (a blocking collective never matches one).
        mpi::request::scope(|scope| {
            dups[0]
                .immediate_all_to_all_into(scope, &mine[..], &mut theirs[..])
                .wait();
        });
        drop(dups);
        drop(universe);
        println!("rank 0: oversize passed");
        return;
    }
    c.rank.check_agreement = false; // rank 0 has no digest to compare
    let rank = starling::mpi::init(c).expect("MPI starts");
    let ctx = rank.context();
    let v = ctx.register(Variable::new(1u32));
    let double = Codelet::new("double", |b| *b.w::<Variable<u32>>(0).value_mut() *= 2);
    ctx.task(&double).rw(&v).submit();
    ctx.wait_for_all();
    assert_eq!(ctx.acquire(&v, AccessMode::R).get().get(), 2);
    rank.shutdown()
        .expect("a clean shutdown after dropping the message");
    println!("rank 1: oversize passed");
}

/// Ranks with different eager limits (`RankConfig::eager_limit`): rank 0 puts payloads
/// of up to 64 KiB inside their envelope, rank 1 never does. Every rank receives
/// envelopes into room for the largest limit, so payloads on either side of both limits
/// cross intact both ways — no MPI truncation error.
fn eager() {
    let world_rank = launcher_rank();
    let mut c = config();
    c.rank.eager_limit = if world_rank == 0 { 64 << 10 } else { 0 };
    let rank = starling::mpi::init(c).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let other = Rank(1 - me);
    let sizes = [0usize, 1, 4096, 4097, 65536, 65537, 300_000];
    for round in 0..2u32 {
        for (i, &n) in sizes.iter().enumerate() {
            let fill = |k: usize| ((k * 13 + n + round as usize) % 253) as u8;
            let sender = round;
            let h = ctx.register(Vector::from_vec(if me == sender {
                (0..n).map(fill).collect()
            } else {
                vec![0u8; n]
            }));
            let tag = Tag(i64::from(round) * 100 + i as i64);
            if me == sender {
                ctx.send(&h, other, tag).wait().unwrap();
            } else {
                ctx.recv(&h, other, tag).wait().unwrap();
                let v = ctx.acquire(&h, AccessMode::R);
                assert!(
                    v.get()
                        .as_slice()
                        .iter()
                        .enumerate()
                        .all(|(k, b)| *b == fill(k)),
                    "{n} bytes from rank {sender}"
                );
            }
        }
    }
    ctx.barrier();
    rank.shutdown().expect("a clean shutdown");
    println!("rank {me}: eager passed");
}

/// The fast path (protocol §19) mixed with the envelope path on one key: messages of
/// every size and mode on one tag — fast ones (1 byte to the fast limit), empty, just
/// past the limit, two-message payloads, synchronous ones — all started at once and
/// received by receives all posted at once; then the same on tags with no fast tag (a
/// negative one, the largest), and on two keys whose receives are posted in the reverse
/// order of the sends. Each receive must get its own message, whole.
fn fast() {
    let rank = starling::mpi::init(config()).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let other = Rank(1 - me);
    // (size, synchronous)
    let seq: &[(usize, bool)] = &[
        (8, false),
        (5000, false),
        (1, false),
        (0, false),
        (16, true),
        (17, false),
        (1024, false),
        (100_000, false),
        (4, false),
        (3968, false),
        (3969, false),
        (8, true),
        (64, false),
        (2, false),
    ];
    let fill = |tag: Tag, i: usize, k: usize| ((i * 31 + k * 7 + tag.0 as usize % 97) % 251) as u8;
    // Rank 0 sends `msgs` (tag, size, sync) in order, all at once; rank 1 posts the
    // receives in `order` (indices into `msgs`) all at once, then checks each.
    let exchange = |msgs: &[(Tag, usize, bool)], order: &[usize]| {
        let handles: Vec<_> = msgs
            .iter()
            .enumerate()
            .map(|(i, &(tag, n, _))| {
                ctx.register(Vector::from_vec(if me == 0 {
                    (0..n).map(|k| fill(tag, i, k)).collect()
                } else {
                    vec![0u8; n]
                }))
            })
            .collect();
        if me == 0 {
            let sends: Vec<_> = msgs
                .iter()
                .zip(&handles)
                .map(|(&(tag, _, sync), h)| {
                    let s = ctx.send(h, other, tag);
                    if sync { s.sync() } else { s }.start().unwrap()
                })
                .collect();
            for s in sends {
                s.wait().unwrap();
            }
        } else {
            let recvs: Vec<_> = order
                .iter()
                .map(|&i| ctx.recv(&handles[i], other, msgs[i].0).start().unwrap())
                .collect();
            for r in recvs {
                r.wait().unwrap();
            }
            for (i, h) in handles.iter().enumerate() {
                let (tag, n, _) = msgs[i];
                let v = ctx.acquire(h, AccessMode::R);
                let value = v.get();
                let got = value.as_slice();
                assert_eq!(got.len(), n);
                assert!(
                    got.iter().enumerate().all(|(k, b)| *b == fill(tag, i, k)),
                    "message {i} ({n} bytes) on {tag:?} got another's bytes"
                );
            }
        }
        for h in handles {
            let _ = ctx.unregister(h);
        }
    };
    for tag in [Tag(5), Tag(-7), Tag(i64::MAX)] {
        let msgs: Vec<_> = seq.iter().map(|&(n, sync)| (tag, n, sync)).collect();
        let order: Vec<_> = (0..msgs.len()).collect();
        exchange(&msgs, &order);
    }
    // Two keys interleaved; the receives of tag 9 are posted before those of tag 8.
    let msgs: Vec<_> = seq
        .iter()
        .enumerate()
        .map(|(i, &(n, sync))| (Tag(8 + (i % 2) as i64), n, sync))
        .collect();
    let mut order: Vec<_> = (0..msgs.len()).filter(|i| i % 2 == 1).collect();
    order.extend((0..msgs.len()).filter(|i| i % 2 == 0));
    exchange(&msgs, &order);
    ctx.barrier();
    rank.shutdown().expect("a clean shutdown");
    println!("rank {me}: fast passed");
}

/// Two Starling worlds in one job (`starpu_mpi_init_comm` with the application's
/// communicator): the application splits the world into its even and odd processes and
/// starts Starling on its half. Each half numbers its ranks 0 and 1, both use the same
/// tags at the same time, and nothing crosses: a message, an insert-task flow with an
/// owner on each rank, a barrier and a clean shutdown per half. MPI stays the
/// application's, which talks on its own communicators afterwards and finalizes it.
fn split() {
    use mpi::topology::{Color, Communicator};
    let (universe, _) =
        mpi::initialize_with_threading(Threading::Serialized).expect("MPI initialises");
    let world = universe.world();
    let w = world.rank();
    let colour = w % 2;
    let half = world
        .split_by_color(Color::with_value(colour))
        .expect("every process has a colour");
    let rank = starling::mpi::init_comm(config(), &half).expect("Starling starts on the half");
    assert!(matches!(
        starling::mpi::init_comm(config(), &half),
        Err(MpiError::AlreadyRunning)
    ));
    let ctx = rank.context();
    let me = ctx.rank().0;
    assert_eq!((me, ctx.size()), ((w / 2) as u32, 2), "ranks of the half");
    let other = Rank(1 - me);
    let colour = colour as u32;

    // The same tag in both halves, at the same time: each receiver gets its own half's.
    let v = ctx.register(Variable::new(0u32));
    if me == 0 {
        ctx.acquire(&v, AccessMode::W).get_mut().set(1000 + colour);
        ctx.send(&v, other, Tag(5)).wait().unwrap();
    } else {
        ctx.recv(&v, other, Tag(5)).wait().unwrap();
        assert_eq!(ctx.acquire(&v, AccessMode::R).get().get(), 1000 + colour);
    }

    // An insert-task chain across the half's two ranks, same data tags in both halves.
    let xs: Vec<_> = (0..2u32)
        .map(|i| {
            ctx.register_owned(Tag(100 + i64::from(i)), Owner::Rank(Rank(i)), || {
                Variable::new(0u32)
            })
            .unwrap()
        })
        .collect();
    let add = Codelet::new("add", |b| {
        let x = b.r::<Variable<u32>>(1).get();
        *b.w::<Variable<u32>>(0).value_mut() += x + 1;
    });
    let seed = Codelet::new("seed", move |b| {
        b.w::<Variable<u32>>(0).set(10 * (colour + 1));
    });
    ctx.insert(&seed).w(&xs[0]).submit().unwrap();
    for _ in 0..3 {
        ctx.insert(&add).rw(&xs[1]).r(&xs[0]).submit().unwrap();
        ctx.insert(&add).rw(&xs[0]).r(&xs[1]).submit().unwrap();
    }
    ctx.mpi_wait_for_all().unwrap();
    // x0 = s, x1 = 0; three rounds of x1 += x0 + 1, x0 += x1 + 1.
    let (mut x0, mut x1) = (10 * (colour + 1), 0);
    for _ in 0..3 {
        x1 += x0 + 1;
        x0 += x1 + 1;
    }
    let mine = ctx.acquire(&xs[me as usize], AccessMode::R).get().get();
    assert_eq!(
        mine,
        if me == 0 { x0 } else { x1 },
        "half {colour}, rank {me}"
    );
    ctx.barrier();
    rank.shutdown().expect("a clean shutdown");

    // MPI is still the application's: its world still talks.
    let partner = w ^ 1;
    assert_eq!(swap_raw(&world, partner, w, 9), partner);
    drop(universe);
    // Once MPI is finalized a communicator is no basis for a rank: a typed error, and
    // `half` is never touched (freeing it now would be an MPI error: it is leaked).
    assert!(matches!(
        starling::mpi::init_comm(config(), &half),
        Err(MpiError::Transport(TransportError::NotInitialized))
    ));
    core::mem::forget(half);
    println!("world rank {w}: split passed");
}

/// The application initialised MPI with `MPI_THREAD_SERIALIZED`: Starling refuses to
/// start when told the application calls MPI too (that needs `MPI_THREAD_MULTIPLE`), with
/// a typed error, and starts when it is the only caller.
/// A fake rank under `mpirun` (`STARLING_MPI_FAKE_RANK=2`, `STARLING_MPI_FAKE_SIZE=1024`):
/// the stencil's inserts are planned as rank 2 of 1024 plans them, the one task it owns
/// runs, and not a byte is sent.
fn fake() {
    let config = config();
    assert_eq!(
        config.fake,
        Some((Rank(2), 1024)),
        "run with STARLING_MPI_FAKE_RANK=2 STARLING_MPI_FAKE_SIZE=1024"
    );
    let rank = starling::mpi::init(config).expect("MPI starts");
    let ctx = rank.context();
    assert_eq!((ctx.rank(), ctx.size()), (Rank(2), 1024));
    // Counted from here, so that "not a byte is sent" is a measurement.
    ctx.set_comm_stats(true);
    let hs: Vec<_> = (0..64u32)
        .map(|i| {
            ctx.register_owned(Tag(i64::from(i)), Owner::Rank(Rank(i)), || {
                Variable::new(0u64)
            })
            .unwrap()
        })
        .collect();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let count = Codelet::new("count", move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let mut here = 0;
    for i in 1..63 {
        let ins = ctx
            .insert(&count)
            .rw(&hs[i])
            .r(&hs[i - 1])
            .r(&hs[i + 1])
            .submit()
            .unwrap();
        here += usize::from(ins.executed_here);
    }
    ctx.wait_for_all();
    assert_eq!(
        (here, ran.load(Ordering::SeqCst)),
        (1, 1),
        "rank 2 runs tile 2 only"
    );
    assert_eq!(
        ctx.comm_amounts()
            .expect("statistics are on")
            .iter()
            .sum::<u64>(),
        0,
        "no message at all"
    );
    println!("rank 2: fake passed");
    rank.shutdown().expect("a clean shutdown");
}

fn serialized() {
    let (universe, provided) =
        mpi::initialize_with_threading(Threading::Serialized).expect("MPI initialises");
    if provided > Threading::Serialized {
        // This MPI upgrades the level: nothing to refuse.
        println!("rank ?: serialized passed (MPI gave {provided:?})");
        return;
    }
    let mut c = config();
    c.application_calls_mpi = true;
    match starling::mpi::init(c) {
        Err(MpiError::Transport(TransportError::Threading { required, provided })) => {
            assert_eq!(
                (required, provided),
                (Threading::Multiple, Threading::Serialized)
            );
        }
        other => panic!("expected a thread-level error, got {other:?}"),
    }
    let rank = starling::mpi::init(config()).expect("Serialized is enough for Starling alone");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let h = ctx.register(Variable::new(me));
    if me == 0 {
        ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
    } else {
        ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
        assert_eq!(ctx.acquire(&h, AccessMode::R).get().get(), 0);
    }
    rank.shutdown().expect("a clean shutdown");
    drop(universe);
    println!("rank {me}: serialized passed");
}

/// A receive whose message never comes: shutdown's watchdog reports it instead of
/// hanging (`STARLING_WATCHDOG_SECS=1`). MPI stays unfinalized on purpose.
fn watchdog() {
    let c = watched_config();
    let dir = c.hang_dir.clone();
    let rank = starling::mpi::init(c).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let h = ctx.register(Variable::new(0u32));
    ctx.recv(&h, Rank(1 - me), Tag(3)).detach(|_| {}).unwrap();
    let start = Instant::now();
    let err = rank.shutdown().expect_err("the watchdog fires");
    let text = err.to_string();
    assert!(start.elapsed() < Duration::from_secs(10), "{text}");
    assert!(text.contains("nothing progressed for 1 s"), "{text}");
    assert!(
        text.contains(&format!(
            "rank {me}: Recv with rank {} and tag 3 never completed",
            1 - me
        )),
        "{text}"
    );
    clean_hang_dir(dir.as_deref(), me);
    println!("rank {me}: watchdog passed");
    linger();
}

/// Each rank waits for a message the other never sends (a deadlock): the watchdog
/// explains it from both ranks' reports, merged through the job's hang directory, and
/// the blocking receives return with the explanation instead of hanging.
fn hang() {
    let c = watched_config();
    assert!(c.hang_dir.is_some(), "the launcher names the job: {c:?}");
    let dir = c.hang_dir.clone();
    let rank = starling::mpi::init(c).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let h = ctx.register(Variable::new(0u32));
    let (from, tag) = if me == 0 { (1, 17) } else { (0, 5) };
    let start = Instant::now();
    let err = ctx
        .recv(&h, Rank(from), Tag(tag))
        .wait()
        .expect_err("nobody sends it");
    assert!(start.elapsed() < Duration::from_secs(20), "{err}");
    let CommError::Stalled { explanation } = &err else {
        panic!("expected the watchdog's explanation, got {err:?}");
    };
    for want in [
        "deadlock: rank 0 waits for rank 1, which waits for rank 0",
        "rank 0 waits for tag 17 from rank 1 (into data 0, for 1.",
        "rank 1 never sent it: it is itself waiting for tag 5 from rank 0",
        "rank 1 waits for tag 5 from rank 0",
    ] {
        assert!(
            explanation.contains(want),
            "{want:?} not in:\n{explanation}"
        );
    }
    let err = rank
        .shutdown()
        .expect_err("the watchdog's finding is returned");
    assert!(
        matches!(&err.leftovers[0], starling_std::Leftover::Watchdog(line)
            if line.starts_with(&format!("rank {me}: watchdog: nothing progressed"))),
        "{err}"
    );
    clean_hang_dir(dir.as_deref(), me);
    println!("rank {me}: hang passed");
    linger();
}

/// For a job that leaves MPI unfinalized on purpose (its requests never completed):
/// MPICH's launcher kills the whole job as soon as one such process exits, so each rank
/// gives the others time to report first.
fn linger() {
    std::thread::sleep(Duration::from_millis(1500));
}

/// Removes this rank's hang report, and the directory once it is empty (the last rank
/// done removes it), after the watchdog's wait: a peer may still be reading our report.
fn clean_hang_dir(dir: Option<&std::path::Path>, me: u32) {
    if let Some(d) = dir {
        std::thread::sleep(Duration::from_secs(1));
        let _ = std::fs::remove_file(starling_std::hang::report_path(d, Rank(me)));
        let _ = std::fs::remove_dir(d);
    }
}

/// Rank 1 inserts another codelet than the others: `mpi_wait_for_all` returns the same
/// divergence on every rank, exchanged over MPI, naming the insert and what each saw.
fn diverge() {
    let c = config();
    assert!(
        c.rank.check_agreement,
        "run with STARLING_CHECK_AGREEMENT=1"
    );
    let rank = starling::mpi::init(c).expect("MPI starts");
    let ctx = rank.context();
    let me = ctx.rank().0;
    let x = ctx
        .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(0u32))
        .unwrap();
    let step = Codelet::empty("step");
    for _ in 0..3 {
        ctx.insert(&step).rw(&x).submit().unwrap();
    }
    ctx.barrier(); // agrees so far
    let name = if me == 1 { "odd" } else { "step" };
    ctx.insert(&Codelet::empty(name)).rw(&x).submit().unwrap();
    let Err(InsertError::Diverged(d)) = ctx.mpi_wait_for_all() else {
        panic!("rank {me}: the divergence is found");
    };
    assert_eq!(d.insert, Some(4), "{d:?}");
    assert!(
        d.message.contains("they agreed up to insert #3")
            && d.message
                .contains("ranks 0, 2 saw step(tag 1 RW of rank 0) on rank 0")
            && d.message
                .contains("rank 1 saw odd(tag 1 RW of rank 0) on rank 0"),
        "{}",
        d.message
    );
    ctx.wait_for_all();
    rank.shutdown()
        .expect("a clean shutdown: the flows still paired up");
    println!("rank {me}: diverge passed");
}

/// A payload longer than `i32::MAX` bytes travels as two MPI messages and arrives whole
/// (opt-in: `STARLING_MPI_BIG=1`; about 9 GB of memory on one machine).
fn big() {
    run_scenarios(
        "big",
        config(),
        &[("a payload over 2 GiB", |ctx: &Context| {
            let len = (1usize << 31) + 4097;
            match ctx.rank().0 {
                0 => {
                    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                    let h = ctx.register(Vector::from_vec(data));
                    ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
                }
                1 => {
                    let h = ctx.register(Vector::<u8>::zeros(len));
                    ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
                    let v = ctx.unregister(h);
                    let s = v.as_slice();
                    let edge = i32::MAX as usize;
                    for i in [0, 1, edge - 1, edge, edge + 1, len - 1] {
                        assert_eq!(s[i], (i % 251) as u8, "byte {i}");
                    }
                    assert!(
                        s.iter()
                            .enumerate()
                            .step_by(4093)
                            .all(|(i, b)| *b == (i % 251) as u8)
                    );
                }
                _ => {}
            }
        })],
    );
}
