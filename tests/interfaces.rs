//! The N-dimensional and sparse interfaces (`Ndim`, `Csr`, `Bcsr`) between two ranks of
//! the in-process cluster: point to point (`isend` / `irecv`) and through the insert
//! flow, with the values checked on arrival and the padding of a strided `Ndim` kept.
//! Ports the reference's `ndim_interface` (a 4-D array inside a larger one, sent, checked,
//! rewritten and sent back) and the CSR / BCSR rows of `datatypes`.

use std::sync::{Arc, Mutex};

use starling::core::{AccessMode, Owner, Rank, Tag};
use starling::interfaces::{Bcsr, Csr, Ndim, Variable, Vector};
use starling::{
    ClusterConfig, Codelet, CommError, Context, DataError, Handle, RuntimeConfig, run_local_with,
};

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

fn run<R: Send + 'static>(n: u32, f: impl Fn(&Context) -> R + Send + Sync + 'static) -> Vec<R> {
    run_local_with(n, config(), f).expect("a clean shutdown")
}

/// Sizes of the 4-D array, and of the array that holds it on rank 0 (the reference's
/// test puts 16⁴ inside 32⁴; smaller here, same shape of problem).
const N: usize = 6;
const OUTER: usize = 9;
/// What rank 0's padding holds, and must still hold at the end.
const PAD: i32 = -1;
/// What rank 1's padding holds (its elements too, until something arrives).
const PAD_1: i32 = -2;

/// Every index of an `N⁴` array, dimension 0 fastest.
fn indices() -> impl Iterator<Item = [usize; 4]> {
    (0..N).flat_map(|l| {
        (0..N).flat_map(move |k| (0..N).flat_map(move |j| (0..N).map(move |i| [i, j, k, l])))
    })
}

/// `N⁴` elements inside `OUTER⁴` storage, every element `pad`.
fn blank(pad: i32) -> Ndim<i32> {
    let ldn = vec![1, OUTER, OUTER * OUTER, OUTER * OUTER * OUTER];
    Ndim::new(vec![N; 4], ldn, vec![pad; OUTER.pow(4)]).unwrap()
}

/// `N⁴` elements inside `OUTER⁴` storage, the padding `PAD`, the elements `first`,
/// `first + 1`, … in index order.
fn padded(first: i32) -> Ndim<i32> {
    let mut a = blank(PAD);
    for (x, index) in (first..).zip(indices()) {
        a.set(&index, x);
    }
    a
}

/// The storage offsets of the elements of a [`padded`] array.
fn element_offsets() -> Vec<usize> {
    indices()
        .map(|[i, j, k, l]| i + OUTER * (j + OUTER * (k + OUTER * l)))
        .collect()
}

/// Whether `a` holds `first`, `first + 1`, … in index order and `pad` everywhere else
/// (`padded` layout).
fn holds_padded(a: &Ndim<i32>, first: i32, pad: i32) -> bool {
    let offsets = element_offsets();
    let mut expected = vec![pad; OUTER.pow(4)];
    for (x, &at) in (first..).zip(&offsets) {
        expected[at] = x;
    }
    a.as_slice() == &expected[..]
}

#[test]
fn ndim_goes_p2p_into_a_dense_copy_and_back_keeping_the_padding() {
    // `ndim_interface`: rank 0 sends its strided array; rank 1 (dense) checks 0, 1, …,
    // rewrites it from 10 and sends it back; rank 0 sees 10, 11, … in the strided region
    // and its padding untouched.
    let out = run(2, |ctx| {
        let peer = Rank(1 - ctx.rank().0);
        if ctx.rank() == Rank(0) {
            let a = ctx.register(padded(0));
            ctx.send(&a, peer, Tag(1)).start().unwrap().wait().unwrap();
            ctx.recv(&a, peer, Tag(2)).start().unwrap().wait().unwrap();
            let a = ctx.unregister(a);
            holds_padded(&a, 10, PAD)
        } else {
            let a = ctx.register(Ndim::<i32>::zeros(&[N; 4]));
            ctx.recv(&a, peer, Tag(1)).start().unwrap().wait().unwrap();
            let received = {
                let got = ctx.acquire(&a, AccessMode::R);
                let got = got.get();
                assert!(got.is_dense());
                indices().zip(0..).all(|(index, x)| got.get(&index) == x)
            };
            let rewrite = Codelet::new("rewrite", |b| {
                let mut a = b.w::<Ndim<i32>>(0);
                for (x, index) in (10..).zip(indices()) {
                    a.set(&index, x);
                }
            });
            ctx.task(&rewrite).rw(&a).submit();
            ctx.send(&a, peer, Tag(2)).start().unwrap().wait().unwrap();
            ctx.wait_for_all();
            received
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn ndim_goes_through_insert_and_is_written_back_keeping_the_padding() {
    // Owned by rank 0, read by a task on rank 1 (the owner of the written sum), then
    // rewritten by a task run on rank 1 and written back to rank 0. Both ranks register
    // the strided layout, rank 1 with other padding (and no elements yet): the task there
    // checks that the elements arrived and its padding stayed.
    let out = run(2, |ctx| {
        let a = owned(ctx, 1, 0, || padded(0), || blank(PAD_1));
        let sum = ctx
            .register_owned(Tag(2), Owner::Rank(Rank(1)), || Variable::new(0_i64))
            .unwrap();
        let padding_kept_on_1 = Arc::new(Mutex::new(None));
        let add = {
            let seen = Arc::clone(&padding_kept_on_1);
            Codelet::new("sum", move |b| {
                let a = b.r::<Ndim<i32>>(0);
                *seen.lock().unwrap() = Some(holds_padded(&a, 0, PAD_1));
                let total = indices().map(|index| i64::from(a.get(&index))).sum();
                b.w::<Variable<i64>>(1).set(total);
            })
        };
        let rewrite = Codelet::new("rewrite", |b| {
            let mut a = b.w::<Ndim<i32>>(0);
            for (x, index) in (10..).zip(indices()) {
                a.set(&index, x);
            }
        });
        let on = ctx.insert(&add).r(&a).w(&sum).submit().unwrap().executor;
        assert_eq!(on, Some(Rank(1)));
        ctx.insert(&rewrite)
            .rw(&a)
            .on_node(Rank(1))
            .submit()
            .unwrap();
        ctx.wait_for_all();
        let total = (ctx.rank() == Rank(1)).then(|| ctx.acquire(&sum, AccessMode::R).get().get());
        let back_on_0 = (ctx.rank() == Rank(0))
            .then(|| holds_padded(&ctx.acquire(&a, AccessMode::R).get(), 10, PAD));
        let kept = *padding_kept_on_1.lock().unwrap();
        (total, back_on_0, kept)
    });
    let elements = (N as i64).pow(4);
    assert_eq!(out[1].0, Some(elements * (elements - 1) / 2));
    assert_eq!(out[0].1, Some(true), "written back into the strided region");
    assert_eq!(out[1].2, Some(true), "rank 1's padding kept on receive");
}

/// A 5 × 4 CSR matrix with an empty row and Fortran-style pointers:
/// [ 1 0 0 2 ]
/// [ 0 0 0 0 ]
/// [ 0 3 4 0 ]
/// [ 5 0 0 0 ]
/// [ 0 0 0 6 ]
fn csr() -> Csr<f64> {
    Csr::new(
        4,
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        vec![0, 3, 1, 2, 0, 3],
        vec![1, 3, 3, 5, 6, 7],
        1,
    )
    .unwrap()
}

/// `y = A x` for a CSR `A`.
fn csr_times(a: &Csr<f64>, x: &[f64]) -> Vec<f64> {
    (0..a.nrow())
        .map(|i| {
            let (cols, vals) = a.row(i);
            cols.iter().zip(vals).map(|(&j, v)| v * x[j as usize]).sum()
        })
        .collect()
}

/// A 2 × 3 block-row BCSR matrix of 2 × 2 blocks (a 4 × 6 matrix).
fn bcsr() -> Bcsr<i64> {
    Bcsr::new(2, 2, 3, (1..=12).collect(), vec![0, 2, 1], vec![0, 2, 3], 0).unwrap()
}

/// `y = A x` for a BCSR `A`, element by element.
fn bcsr_times(a: &Bcsr<i64>, x: &[i64]) -> Vec<i64> {
    (0..a.nrow() * a.r())
        .map(|i| (0..x.len()).map(|j| a.get(i, j).unwrap_or(0) * x[j]).sum())
        .collect()
}

#[test]
fn csr_and_bcsr_go_p2p_and_come_back_rewritten() {
    // `datatypes` for CSR and BCSR: 0 → 1 → 0. Rank 1 receives into placeholders of the
    // sender's shape, doubles the values, and sends them back.
    let out = run(2, |ctx| {
        let peer = Rank(1 - ctx.rank().0);
        let (a, b) = if ctx.rank() == Rank(0) {
            (ctx.register(csr()), ctx.register(bcsr()))
        } else {
            (
                ctx.register(Csr::zeros(5, 4, 6).unwrap()),
                ctx.register(Bcsr::zeros(2, 3, 3, 2, 2).unwrap()),
            )
        };
        if ctx.rank() == Rank(0) {
            ctx.send(&a, peer, Tag(1)).start().unwrap().wait().unwrap();
            ctx.send(&b, peer, Tag(2)).start().unwrap().wait().unwrap();
            ctx.recv(&a, peer, Tag(3)).start().unwrap().wait().unwrap();
            ctx.recv(&b, peer, Tag(4)).start().unwrap().wait().unwrap();
        } else {
            let ra = ctx.recv(&a, peer, Tag(1)).start().unwrap();
            let rb = ctx.recv(&b, peer, Tag(2)).start().unwrap();
            ra.wait().unwrap();
            rb.wait().unwrap();
            assert_eq!(*ctx.acquire(&a, AccessMode::R).get(), csr());
            assert_eq!(*ctx.acquire(&b, AccessMode::R).get(), bcsr());
            let double = Codelet::new("double", |bufs| {
                bufs.w::<Csr<f64>>(0)
                    .nzval_mut()
                    .iter_mut()
                    .for_each(|v| *v *= 2.0);
                bufs.w::<Bcsr<i64>>(1)
                    .nzval_mut()
                    .iter_mut()
                    .for_each(|v| *v *= 2);
            });
            ctx.task(&double).rw(&a).rw(&b).submit();
            ctx.send(&a, peer, Tag(3)).start().unwrap().wait().unwrap();
            ctx.send(&b, peer, Tag(4)).start().unwrap().wait().unwrap();
        }
        ctx.wait_for_all();
        (ctx.unregister(a), ctx.unregister(b))
    });
    let (a, b) = &out[0];
    assert_eq!(
        (a.rowptr(), a.colind(), a.firstentry()),
        (csr().rowptr(), csr().colind(), 1)
    );
    assert_eq!(a.nzval(), &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    assert_eq!(b.colind(), bcsr().colind());
    assert_eq!(b.nzval(), (1..=12).map(|v| 2 * v).collect::<Vec<i64>>());
    assert_eq!(out[1], out[0], "rank 1 kept what it sent");
}

#[test]
fn csr_of_another_shape_is_refused_with_a_typed_error() {
    // Rank 1 registers a CSR of the sender's byte size but another shape: the receive
    // fails with the typed error and rank 1's matrix is unchanged.
    let out = run(2, |ctx| {
        if ctx.rank() == Rank(0) {
            // 2 rows, 1 entry: 48 + 4 * 3 + 4 * 1 + 4 * 1 = 68 bytes.
            let a = ctx.register(Csr::new(2, vec![7_u32], vec![1], vec![0, 0, 1], 0).unwrap());
            ctx.send(&a, Rank(1), Tag(1))
                .start()
                .unwrap()
                .wait()
                .unwrap();
            None
        } else {
            // 4 rows and no entry: 48 + 4 * 5 = 68 bytes too.
            let a = ctx.register(Csr::<u32>::zeros(4, 2, 0).unwrap());
            let err = ctx
                .recv(&a, Rank(0), Tag(1))
                .start()
                .unwrap()
                .wait()
                .unwrap_err();
            let unchanged = *ctx.acquire(&a, AccessMode::R).get() == Csr::zeros(4, 2, 0).unwrap();
            Some((err, unchanged))
        }
    });
    let (err, unchanged) = out[1].clone().unwrap();
    assert!(
        matches!(err, CommError::Data(DataError::InvalidPayload(_))),
        "{err:?}"
    );
    assert!(unchanged);
}

/// Registers `data` owned by `owner` on every rank, placeholders elsewhere.
fn owned<I: starling::Interface>(
    ctx: &Context,
    tag: i64,
    owner: u32,
    data: impl FnOnce() -> I + Send + 'static,
    placeholder: impl FnOnce() -> I + Send + 'static,
) -> Handle<I> {
    let registered = if ctx.rank() == Rank(owner) {
        ctx.register_owned(Tag(tag), Owner::Rank(Rank(owner)), data)
    } else {
        ctx.register_owned(Tag(tag), Owner::Rank(Rank(owner)), placeholder)
    };
    registered.unwrap()
}

#[test]
fn csr_and_bcsr_go_through_insert_as_spmv_operands_and_are_written_back() {
    // y = A x on rank 1 (the owner of y) with A and x owned by rank 0: both travel
    // through the insert flow. Then a task run on rank 1 scales A, which goes back to
    // its owner.
    let out = run(2, |ctx| {
        let a = owned(ctx, 1, 0, csr, || Csr::zeros(5, 4, 6).unwrap());
        let b = owned(ctx, 2, 0, bcsr, || Bcsr::zeros(2, 3, 3, 2, 2).unwrap());
        let x = owned(
            ctx,
            3,
            0,
            || Vector::from_vec(vec![1.0, -1.0, 0.5, 2.0]),
            || Vector::zeros(4),
        );
        let xi = owned(
            ctx,
            4,
            0,
            || Vector::from_vec(vec![1_i64, 2, 3, 4, 5, 6]),
            || Vector::zeros(6),
        );
        let y = owned(ctx, 5, 1, || Vector::<f64>::zeros(5), || Vector::zeros(5));
        let yi = owned(ctx, 6, 1, || Vector::<i64>::zeros(4), || Vector::zeros(4));
        let spmv = Codelet::new("spmv", |bufs| {
            let y = csr_times(&bufs.r::<Csr<f64>>(0), bufs.r::<Vector<f64>>(1).as_slice());
            bufs.w::<Vector<f64>>(2).as_mut_slice().copy_from_slice(&y);
        });
        let bspmv = Codelet::new("bspmv", |bufs| {
            let y = bcsr_times(&bufs.r::<Bcsr<i64>>(0), bufs.r::<Vector<i64>>(1).as_slice());
            bufs.w::<Vector<i64>>(2).as_mut_slice().copy_from_slice(&y);
        });
        let scale = Codelet::new("scale", |bufs| {
            bufs.w::<Csr<f64>>(0)
                .nzval_mut()
                .iter_mut()
                .for_each(|v| *v *= 3.0);
            bufs.w::<Bcsr<i64>>(1)
                .nzval_mut()
                .iter_mut()
                .for_each(|v| *v *= 3);
        });
        let on = ctx
            .insert(&spmv)
            .r(&a)
            .r(&x)
            .w(&y)
            .submit()
            .unwrap()
            .executor;
        let bon = ctx
            .insert(&bspmv)
            .r(&b)
            .r(&xi)
            .w(&yi)
            .submit()
            .unwrap()
            .executor;
        ctx.insert(&scale)
            .rw(&a)
            .rw(&b)
            .on_node(Rank(1))
            .submit()
            .unwrap();
        ctx.wait_for_all();
        let products = (ctx.rank() == Rank(1)).then(|| {
            (
                ctx.acquire(&y, AccessMode::R).get().as_slice().to_vec(),
                ctx.acquire(&yi, AccessMode::R).get().as_slice().to_vec(),
            )
        });
        let scaled = (ctx.rank() == Rank(0)).then(|| {
            (
                ctx.acquire(&a, AccessMode::R).get().clone(),
                ctx.acquire(&b, AccessMode::R).get().clone(),
            )
        });
        (on, bon, products, scaled)
    });
    assert_eq!((out[0].0, out[0].1), (Some(Rank(1)), Some(Rank(1))));
    let (y, yi) = out[1].2.clone().unwrap();
    assert_eq!(y, csr_times(&csr(), &[1.0, -1.0, 0.5, 2.0]));
    assert_eq!(y, vec![5.0, 0.0, -1.0, 5.0, 12.0]);
    assert_eq!(yi, bcsr_times(&bcsr(), &[1, 2, 3, 4, 5, 6]));
    let (a, b) = out[0].3.clone().unwrap();
    assert_eq!((a.rowptr(), a.colind()), (csr().rowptr(), csr().colind()));
    assert_eq!(a.nzval(), &[3.0, 6.0, 9.0, 12.0, 15.0, 18.0]);
    assert_eq!(b.nzval(), (1..=12).map(|v| 3 * v).collect::<Vec<i64>>());
}
