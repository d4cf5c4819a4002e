use core::time::Duration;

use starling_core::{AccessMode, Rank};

use super::{MsConfig, MsError, Registry, run_local};
use crate::runtime::interfaces::{Matrix, Variable, Vector};
use crate::{ClusterConfig, Codelet, Context};

fn cluster() -> ClusterConfig {
    let mut c = ClusterConfig::from_env();
    c.runtime.workers = 1;
    c
}

fn config() -> MsConfig {
    MsConfig {
        timeout: Duration::from_secs(20),
        ..MsConfig::default()
    }
}

/// `x[i] = x[i] * 2 + 1`.
fn twice_plus_one() -> Codelet {
    Codelet::new("twice_plus_one", |b| {
        for x in b.w::<Vector<i64>>(0).as_mut_slice() {
            *x = *x * 2 + 1;
        }
    })
}

/// `y += x`.
fn axpy() -> Codelet {
    Codelet::new("axpy", |b| {
        let x = b.r::<Vector<i64>>(0);
        let mut y = b.w::<Vector<i64>>(1);
        for (y, x) in y.as_mut_slice().iter_mut().zip(x.as_slice()) {
            *y += *x;
        }
    })
}

fn registry() -> Registry {
    Registry::new().codelet(&twice_plus_one()).codelet(&axpy())
}

/// A flow of 8 vectors: independent chains, then a reduction into the first; run on
/// any context (a plain one or a master's).
fn flow(ctx: &Context) -> Vec<Vec<i64>> {
    let (tpo, axpy) = (twice_plus_one(), axpy());
    let hs: Vec<_> = (0..8i64)
        .map(|i| ctx.register(Vector::from_vec((0..64).map(|j| i * 100 + j).collect())))
        .collect();
    for round in 0..3 {
        for h in &hs {
            ctx.task(&tpo).rw(h).submit();
        }
        for pair in hs.windows(2) {
            if round % 2 == 0 {
                ctx.task(&axpy).r(&pair[1]).rw(&pair[0]).submit();
            }
        }
    }
    ctx.wait_for_all();
    let first = ctx.acquire(&hs[0], AccessMode::R).get().as_slice().to_vec();
    let mut out = vec![first];
    for h in hs.into_iter().skip(1) {
        out.push(ctx.unregister(h).as_slice().to_vec());
    }
    out
}

fn expected() -> Vec<Vec<i64>> {
    crate::run_local_with(1, cluster(), flow).expect("a plain run")[0].clone()
}

#[test]
fn a_master_with_one_or_three_slaves_computes_what_one_process_does() {
    let want = expected();
    for ranks in [2, 4] {
        let got = run_local(ranks, config(), cluster(), registry(), flow).expect("ms run");
        assert_eq!(got, want, "{ranks} ranks");
    }
}

#[test]
fn any_rank_can_be_the_master() {
    let want = expected();
    let cfg = MsConfig {
        master: Rank(2),
        ..config()
    };
    assert_eq!(
        run_local(3, cfg, cluster(), registry(), flow).expect("run"),
        want
    );
}

#[test]
fn an_unknown_codelet_name_is_an_error_on_the_master() {
    let err = run_local(2, config(), cluster(), registry(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        let stranger = Codelet::new("not_registered", |b| b.w::<Variable<u32>>(0).set(7));
        ctx.task(&stranger).rw(&h).submit();
        ctx.wait_for_all();
        ctx.unregister(h).get()
    })
    .expect_err("an unknown codelet");
    assert_eq!(
        err,
        MsError::UnknownCodelet {
            name: "not_registered".into()
        }
    );
    assert!(err.to_string().contains("Registry::codelet"), "{err}");
}

#[test]
fn data_larger_than_a_slave_budget_is_refused() {
    let cfg = MsConfig {
        slave_memory: Some(1024),
        ..config()
    };
    let err = run_local(2, cfg, cluster(), registry(), |ctx| {
        let h = ctx.register(Vector::<i64>::zeros(1024));
        ctx.task(&twice_plus_one()).rw(&h).submit();
        ctx.wait_for_all();
    })
    .expect_err("too large");
    assert_eq!(
        err,
        MsError::TooLarge {
            codelet: "twice_plus_one".into(),
            bytes: 8192,
            budget: 1024
        }
    );
}

#[test]
fn a_tight_budget_evicts_and_writes_back_without_losing_a_value() {
    // 8 vectors of 512 bytes, 1200 bytes per slave: every round evicts, and the only
    // valid copies are written back to the master before their buffers go.
    let cfg = MsConfig {
        slave_memory: Some(1200),
        ..config()
    };
    let want = expected();
    assert_eq!(
        run_local(3, cfg, cluster(), registry(), flow).expect("run"),
        want
    );
}

#[test]
fn a_slave_that_stops_answering_fails_its_tasks_with_a_clear_error() {
    let cfg = MsConfig {
        timeout: Duration::from_millis(400),
        exit_after: Some((Rank(1), 1)),
        ..config()
    };
    let slow = Codelet::new("slow", |b| {
        std::thread::sleep(Duration::from_millis(20));
        b.w::<Variable<u32>>(0).set(1);
    });
    let reg = registry().codelet(&slow);
    let err = run_local(2, cfg, cluster(), reg, move |ctx| {
        let h = ctx.register(Variable::new(0u32));
        for _ in 0..3 {
            ctx.task(&slow).rw(&h).submit();
        }
        ctx.wait_for_all();
    })
    .expect_err("a dead slave");
    match err {
        MsError::SlaveDied { slave, tasks, .. } => {
            assert_eq!(slave, Rank(1));
            assert_eq!(tasks, 1);
        }
        other => panic!("not a dead slave: {other}"),
    }
}

#[test]
fn a_long_task_is_not_taken_for_a_dead_slave() {
    let cfg = MsConfig {
        timeout: Duration::from_millis(200),
        ..config()
    };
    let long = Codelet::new("long", |b| {
        std::thread::sleep(Duration::from_millis(700));
        b.w::<Variable<u32>>(0).set(5);
    });
    let reg = registry().codelet(&long);
    let v = run_local(2, cfg, cluster(), reg, move |ctx| {
        let h = ctx.register(Variable::new(0u32));
        ctx.task(&long).w(&h).submit();
        ctx.unregister(h).get()
    })
    .expect("alive");
    assert_eq!(v, 5);
}

#[test]
fn slaves_run_their_own_implementation_when_given_one() {
    let set = Codelet::new("set", |b| b.w::<Variable<u32>>(0).set(1));
    let reg = Registry::new().codelet_with_slave(&set, |b| b.w::<Variable<u32>>(0).set(2));
    let v = run_local(2, config(), cluster(), reg, move |ctx| {
        let h = ctx.register(Variable::new(0u32));
        ctx.task(&set).w(&h).submit();
        ctx.unregister(h).get()
    })
    .expect("run");
    assert_eq!(v, 2);
}

#[test]
fn a_panicking_kernel_on_a_slave_fails_its_task_and_the_job_goes_on() {
    let boom = Codelet::new("boom", |_| panic!("kernel failed"));
    let reg = registry().codelet(&boom);
    let err = run_local(2, config(), cluster(), reg, move |ctx| {
        let h = ctx.register(Vector::<i64>::zeros(4));
        ctx.task(&boom).rw(&h).submit();
        ctx.task(&twice_plus_one()).rw(&h).submit();
        ctx.unregister(h).as_slice().to_vec()
    })
    .expect_err("a failed task");
    assert_eq!(
        err,
        MsError::TaskFailed {
            codelet: "boom".into(),
            slave: Rank(1),
            message: "panicked: kernel failed".into()
        }
    );
}

#[test]
fn results_stay_on_the_slave_until_the_master_reads_them() {
    // Two tasks in a row on one handle: the second finds the first's result in place;
    // the value comes back only for the acquisition, and an acquisition for writing
    // makes the master's copy the one the next task fetches.
    let v = run_local(2, config(), cluster(), registry(), |ctx| {
        let h = ctx.register(Vector::from_vec(vec![1i64; 4]));
        ctx.task(&twice_plus_one()).rw(&h).submit();
        ctx.task(&twice_plus_one()).rw(&h).submit();
        let seen = ctx.acquire(&h, AccessMode::RW);
        let after_two = seen.get().as_slice()[0];
        seen.get_mut().as_mut_slice()[0] = 100;
        drop(seen);
        ctx.task(&twice_plus_one()).rw(&h).submit();
        (after_two, ctx.unregister(h).as_slice().to_vec())
    })
    .expect("run");
    assert_eq!(v, (7, vec![201, 15, 15, 15]));
}

#[test]
fn acquire_cb_sees_the_slave_written_value() {
    let v = run_local(2, config(), cluster(), registry(), |ctx| {
        let h = ctx.register(Vector::from_vec(vec![3i64; 2]));
        ctx.task(&twice_plus_one()).rw(&h).submit();
        let (tx, rx) = std::sync::mpsc::channel();
        ctx.acquire_cb(&h, AccessMode::R, move |a| {
            let _ = tx.send(a.get().as_slice().to_vec());
        });
        let seen = rx.recv().expect("the callback ran");
        ctx.wait_for_all();
        seen
    })
    .expect("run");
    assert_eq!(v, vec![7, 7]);
}

#[test]
fn matrices_with_padding_travel_as_their_packed_form() {
    let scale = Codelet::new("scale_m", |b| {
        let mut m = b.w::<Matrix<f64>>(0);
        let (nx, ny) = (m.nx(), m.ny());
        for j in 0..ny {
            for i in 0..nx {
                let v = m.get(i, j) * 3.0;
                m.set(i, j, v);
            }
        }
    });
    let reg = Registry::new().codelet(&scale);
    let v = run_local(3, config(), cluster(), reg, move |ctx| {
        let data: Vec<f64> = (0..12).map(f64::from).collect();
        let h = ctx.register(Matrix::new(3, 3, 4, data).expect("a matrix"));
        ctx.task(&scale).rw(&h).submit();
        let m = ctx.unregister(h);
        (0..3)
            .flat_map(|j| (0..3).map(move |i| (i, j)))
            .map(|(i, j)| m.get(i, j))
            .collect::<Vec<_>>()
    })
    .expect("run");
    let want: Vec<f64> = (0..3)
        .flat_map(|j| (0..3).map(move |i| f64::from(j * 4 + i) * 3.0))
        .collect();
    assert_eq!(v, want);
}

#[test]
fn unregistering_while_a_copy_is_written_back_waits_for_it() {
    // One slave, one worker, room for two of these vectors. The first task writes `a`;
    // the master unregisters `a` at once, so its acquisition arrives just as the first
    // task ends, after the second task (which needs `b` and `c`) made the master write
    // `a` back to free room. The acquisition must wait for that copy to land: taking the
    // data earlier let the copy land in an unregistered handle (a panic on the
    // progression thread), and the acquisition itself was refused as busy.
    let cfg = MsConfig {
        slave_memory: Some(1100),
        ..config()
    };
    for _ in 0..4 {
        let got = run_local(2, cfg.clone(), cluster(), registry(), |ctx| {
            let v = |x: i64| ctx.register(Vector::from_vec(vec![x; 64]));
            let (a, b, c) = (v(1), v(2), v(3));
            ctx.task(&twice_plus_one()).rw(&a).submit();
            ctx.task(&axpy()).r(&b).rw(&c).submit();
            let a = ctx.unregister(a).as_slice()[0];
            let c = ctx.unregister(c).as_slice()[0];
            let b = ctx.unregister(b).as_slice()[0];
            (a, b, c)
        })
        .expect("run");
        assert_eq!(got, (3, 2, 5));
    }
}

/// `write_shape` then `from_shape` gives a copy that the packed form fills (its layout
/// may differ: a strided `Ndim` becomes dense, a sparse pattern a placeholder).
fn rebuilt<I: super::Remote + core::fmt::Debug>(data: &I) -> I {
    let mut shape = Vec::new();
    data.write_shape(&mut shape);
    let mut copy = I::from_shape(&shape).expect("a shape write_shape wrote");
    let mut packed = Vec::new();
    data.pack(&mut packed);
    copy.unpack(&packed).expect("the same packed form");
    copy
}

#[test]
fn ndim_and_sparse_shapes_rebuild_copies_that_take_the_packed_form() {
    use crate::runtime::interfaces::{Bcsr, Csr, Ndim};
    let a = Ndim::new(vec![2, 3], vec![1, 4], (0..12_i32).collect()).unwrap();
    let b = rebuilt(&a);
    assert!(b.is_dense());
    assert_eq!((b.get(&[1, 2]), b.nn()), (9, &[2, 3][..]));
    assert_eq!(rebuilt(&Ndim::<u8>::zeros(&[])).len(), 1);
    let c = Csr::new(3, vec![1.5_f32, 2.5], vec![2, 0], vec![1, 2, 2, 3], 1).unwrap();
    assert_eq!(rebuilt(&c), c);
    let d = Bcsr::new(1, 2, 2, vec![1_u64, 2, 3, 4], vec![1, 0], vec![0, 2], 0).unwrap();
    assert_eq!(rebuilt(&d), d);
}

#[test]
fn ndim_and_sparse_shapes_from_a_peer_are_checked() {
    use super::Remote;
    use crate::runtime::data::DataError;
    use crate::runtime::interfaces::{Bcsr, Csr, Ndim};
    let le = |xs: &[u64]| -> Vec<u8> { xs.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let malformed = |r: Result<(), DataError>| matches!(r, Err(DataError::Malformed(_)));
    // An Ndim announcing more sizes than it carries, or an element count that overflows.
    assert!(malformed(Ndim::<u8>::from_shape(&le(&[3, 2, 2])).map(drop)));
    assert!(malformed(
        Ndim::<u8>::from_shape(&le(&[u64::MAX, 2])).map(drop)
    ));
    assert!(malformed(
        Ndim::<u64>::from_shape(&le(&[2, u64::MAX, 4])).map(drop)
    ));
    assert!(malformed(Ndim::<u8>::from_shape(&[1, 2, 3]).map(drop)));
    // Entries without rows, ncol past a u32, a block of no row, sizes that overflow.
    assert!(malformed(Csr::<f64>::from_shape(&le(&[0, 2, 1])).map(drop)));
    assert!(malformed(
        Csr::<f64>::from_shape(&le(&[1, 1 << 32, 1])).map(drop)
    ));
    assert!(malformed(
        Csr::<f64>::from_shape(&le(&[1, 1, u64::MAX])).map(drop)
    ));
    assert!(malformed(
        Bcsr::<f64>::from_shape(&le(&[1, 1, 1, 0, 2])).map(drop)
    ));
    assert!(malformed(
        Bcsr::<f64>::from_shape(&le(&[1, 1, 1, u64::MAX, 2])).map(drop)
    ));
    assert!(malformed(
        Bcsr::<f64>::from_shape(&le(&[1, 1, 1])).map(drop)
    ));
}
