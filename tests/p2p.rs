//! Point-to-point scenarios of the reference's test suite (`test-catalogue.md`), on the
//! in-process cluster with 2 and 4 ranks. Each test names the reference test it ports.

use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;
use std::sync::Arc;

use starling::core::{AccessMode, CommId, Rank, Tag};
use starling::interfaces::{Block, Complex, Matrix, Variable, Vector};
use starling::{
    ClusterConfig, Codelet, CommError, Context, DataError, Leftover, RuntimeConfig, TaskTag,
    run_local_with,
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

fn peer(ctx: &Context) -> Rank {
    Rank(ctx.rank().0 ^ 1)
}

/// `pingpong`, `mpi_isend`, `mpi_irecv`, `mpi_isend_detached`, `mpi_irecv_detached`:
/// pairs of ranks bounce a 16-float vector in every call flavour.
fn ping_pong(ctx: &Context, flavour: &str) -> f32 {
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
    ctx.unregister(v).as_slice()[15]
}

#[test]
fn ping_pong_in_every_call_flavour_on_2_and_4_ranks() {
    for n in [2, 4] {
        for flavour in ["blocking", "async", "sync", "detached"] {
            let values = run(n, move |ctx| ping_pong(ctx, flavour));
            // 10 rounds, one increment per round, alternately on each rank of a pair.
            assert!(
                values.iter().all(|v| *v == 10.0 || *v == 9.0),
                "{flavour}: {values:?}"
            );
        }
    }
}

fn token_ring(ctx: &Context, loops: u32, variant: &'static str) -> u32 {
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
    ctx.unregister(token).as_slice()[0]
}

#[test]
fn ring_variants_pass_the_token_loops_times_ranks() {
    // `ring`, `ring_async`, `ring_async_implicit`, `ring_sync`, `ring_sync_detached`.
    for n in [2, 4] {
        for variant in ["detached", "async", "sync", "sync_detached"] {
            let tokens = run(n, move |ctx| token_ring(ctx, 20, variant));
            assert_eq!(tokens[n as usize - 1], 20 * n, "{variant} on {n} ranks");
        }
    }
}

#[test]
fn early_data_is_received_for_registered_and_unregistered_tags() {
    // `mpi_earlyrecv`, `mpi_earlyrecv2`: the sender sends before the receive exists.
    let early = run(2, |ctx| {
        let a = ctx.register(Variable::new(0u64));
        let b = ctx.register(Variable::new(0u64));
        if ctx.rank().0 == 1 {
            ctx.register_lazy(|| Variable::new(0u64)); // unrelated lazy handle
            ctx.acquire(&a, AccessMode::W).get_mut().set(11);
            ctx.acquire(&b, AccessMode::W).get_mut().set(22);
            ctx.send(&a, Rank(0), Tag(1)).wait().unwrap();
            ctx.send(&b, Rank(0), Tag(2)).wait().unwrap();
            ctx.barrier();
            (0, 0, 0)
        } else {
            ctx.set_tag(&a, Tag(1)).unwrap(); // tag 1 registered here, tag 2 not
            ctx.barrier(); // both messages have been sent: they arrive early
            ctx.recv(&b, Rank(1), Tag(2)).wait().unwrap();
            ctx.recv(&a, Rank(1), Tag(1)).wait().unwrap();
            let n = ctx.early_messages();
            let va = ctx.acquire(&a, AccessMode::R).get().get();
            let vb = ctx.acquire(&b, AccessMode::R).get().get();
            (va, vb, n)
        }
    });
    assert_eq!(early[0], (11, 22, 2));
}

#[test]
fn synchronous_sends_never_create_early_data() {
    // `mpi_sync`, `mpi_earlyrecv2_sync`: the receiver posts late, yet nothing waits as
    // early data, and the payload still arrives.
    let out = run(2, |ctx| {
        let v = ctx.register(Vector::from_vec(vec![7u8; 5000]));
        if ctx.rank().0 == 1 {
            let req = ctx.send(&v, Rank(0), Tag(22)).sync().start().unwrap();
            ctx.barrier();
            req.wait().unwrap();
            0
        } else {
            ctx.barrier();
            std::thread::sleep(Duration::from_millis(20));
            let n = ctx.early_messages();
            ctx.recv(&v, Rank(1), Tag(22)).wait().unwrap();
            assert_eq!(ctx.acquire(&v, AccessMode::R).get().as_slice()[4999], 7);
            n
        }
    });
    assert_eq!(out[0], 0);
}

#[test]
fn a_standard_send_overtakes_a_pending_synchronous_send() {
    // `sync`: issend tag 22 then a blocking send tag 12; the receiver takes 12 first.
    let out = run(2, |ctx| {
        let a = ctx.register(Variable::new(ctx.rank().0 * 100 + 1));
        let b = ctx.register(Variable::new(ctx.rank().0 * 100 + 2));
        if ctx.rank().0 == 1 {
            let pending = ctx.send(&a, Rank(0), Tag(22)).sync().start().unwrap();
            ctx.send(&b, Rank(0), Tag(12)).wait().unwrap();
            pending.wait().unwrap();
            (0, 0)
        } else {
            ctx.recv(&b, Rank(1), Tag(12)).wait().unwrap();
            ctx.recv(&a, Rank(1), Tag(22)).wait().unwrap();
            let va = ctx.acquire(&a, AccessMode::R).get().get();
            let vb = ctx.acquire(&b, AccessMode::R).get().get();
            (va, vb)
        }
    });
    assert_eq!(out[0], (101, 102));
}

#[test]
fn tag_matching_does_not_depend_on_arrival_order() {
    // `tags_checking`, `multiple_send`: sent 88 then 77, received 77 then 88, in every
    // blocking/detached combination.
    for (send_detached, recv_detached) in
        [(false, false), (false, true), (true, false), (true, true)]
    {
        let out = run(2, move |ctx| {
            let x = ctx.register(Variable::new(0i32));
            let y = ctx.register(Variable::new(0i32));
            if ctx.rank().0 == 1 {
                ctx.acquire(&x, AccessMode::W).get_mut().set(12);
                ctx.acquire(&y, AccessMode::W).get_mut().set(24);
                for (h, t) in [(&y, 88), (&x, 77)] {
                    if send_detached {
                        ctx.send(h, Rank(0), Tag(t)).detach(|r| r.unwrap()).unwrap();
                    } else {
                        ctx.send(h, Rank(0), Tag(t)).wait().unwrap();
                    }
                }
            } else {
                for (h, t) in [(&x, 77), (&y, 88)] {
                    if recv_detached {
                        ctx.recv(h, Rank(1), Tag(t)).detach(|r| r.unwrap()).unwrap();
                    } else {
                        ctx.recv(h, Rank(1), Tag(t)).wait().unwrap();
                    }
                }
            }
            ctx.wait_for_all();
            let vx = ctx.acquire(&x, AccessMode::R).get().get();
            let vy = ctx.acquire(&y, AccessMode::R).get().get();
            (vx, vy)
        });
        assert_eq!(out[0], (12, 24));
    }
}

#[test]
fn many_to_one_with_equal_tags_keeps_sources_apart() {
    // `gather`, `gather2`: every rank n > 0 sends n, 2n, 4n with tags 42, 44, 46.
    let out = run(4, |ctx| {
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
            got
        } else {
            for (tag, k) in [(42, 1), (44, 2), (46, 4)] {
                let h = ctx.register(Variable::new(me * k));
                ctx.send(&h, Rank(0), Tag(tag)).wait().unwrap();
            }
            Vec::new()
        }
    });
    assert_eq!(out[0], vec![1, 2, 4, 2, 4, 8, 3, 6, 12]);
}

#[test]
fn same_tag_sends_deliver_the_value_current_at_each_send() {
    // `broadcast`, `coop_wrong_order`: write 42, send; write 43, send (same tag) —
    // receivers see 42 then 43. Then with two tags received in the other order.
    let out = run(4, |ctx| {
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
            Vec::new()
        } else {
            let mut seen = Vec::new();
            for tag in [0, 0, 1, 2] {
                ctx.recv(&h, Rank(0), Tag(tag)).wait().unwrap();
                seen.push(ctx.acquire(&h, AccessMode::R).get().get());
            }
            seen
        }
    });
    for seen in &out[1..] {
        assert_eq!(seen, &vec![42, 43, 45, 44]);
    }
}

#[test]
fn user_defined_packed_types_arriving_early_are_unpacked() {
    // `user_datatype_early`, `mpi_complex`: the complex interface packs; it arrives early.
    let out = run(2, |ctx| {
        if ctx.rank().0 == 1 {
            let c = ctx.register(Complex::new(vec![1.5, 2.5, 3.5], vec![-1.0, 0.0, 1.0]).unwrap());
            ctx.send(&c, Rank(0), Tag(9)).wait().unwrap();
            ctx.barrier();
            (vec![], vec![])
        } else {
            let c = ctx.register(Complex::zeros(3));
            ctx.barrier();
            ctx.recv(&c, Rank(1), Tag(9)).wait().unwrap();
            let data = ctx.unregister(c);
            (data.real().to_vec(), data.imag().to_vec())
        }
    });
    assert_eq!(out[0], (vec![1.5, 2.5, 3.5], vec![-1.0, 0.0, 1.0]));
}

#[test]
fn strided_blocks_keep_their_padding_untouched() {
    // `block_interface`: an 8³ block inside a 32³ allocation on rank 0, dense on rank 1;
    // 0 sends, 1 checks and writes 33, sends back; rank 0's padding is untouched.
    let out = run(2, |ctx| {
        let (n, big) = (8usize, 32usize);
        if ctx.rank().0 == 0 {
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
            let inner_ok = (0..n).all(|z| (0..n).all(|y| (0..n).all(|x| b.get(x, y, z) == 33.0)));
            let padding_ok =
                b.as_slice().iter().filter(|v| **v == -7.0).count() == big * big * big - n * n * n;
            inner_ok && padding_ok
        } else {
            let h = ctx.register(Block::<f32>::zeros(n, n, n));
            ctx.recv(&h, Rank(0), Tag(0x42)).wait().unwrap();
            let all_one = ctx
                .acquire(&h, AccessMode::R)
                .get()
                .as_slice()
                .iter()
                .all(|v| *v == 1.0);
            for v in ctx.acquire(&h, AccessMode::W).get_mut().as_mut_slice() {
                *v = 33.0;
            }
            ctx.send(&h, Rank(0), Tag(0x1337)).wait().unwrap();
            all_one
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn matrices_with_a_leading_dimension_travel_without_their_padding() {
    let out = run(2, |ctx| {
        if ctx.rank().0 == 0 {
            let mut data = vec![0.0f64; 10 * 4];
            for j in 0..4 {
                for i in 0..3 {
                    data[i + j * 10] = (i * 10 + j) as f64;
                }
            }
            let m = ctx.register(Matrix::new(3, 4, 10, data).unwrap());
            ctx.send(&m, Rank(1), Tag(5)).wait().unwrap();
            true
        } else {
            let m = ctx.register(Matrix::<f64>::zeros(3, 4));
            ctx.recv(&m, Rank(0), Tag(5)).wait().unwrap();
            let m = ctx.unregister(m);
            (0..4).all(|j| (0..3).all(|i| m.get(i, j) == (i * 10 + j) as f64))
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn two_requests_complete_by_polling() {
    // `mpi_test`, `multiple_send`: isend/irecv, then a busy test loop.
    let out = run(2, |ctx| {
        let a = ctx.register(Variable::new(42u32));
        let b = ctx.register(Variable::new(11u32));
        let other = peer(ctx);
        let reqs = if ctx.rank().0 == 0 {
            vec![
                ctx.send(&a, other, Tag(12)).start().unwrap(),
                ctx.send(&b, other, Tag(13)).start().unwrap(),
            ]
        } else {
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
        drop(reqs); // tested to completion: they count as waited
        let va = ctx.acquire(&a, AccessMode::R).get().get();
        let vb = ctx.acquire(&b, AccessMode::R).get().get();
        (va, vb)
    });
    assert_eq!(out, vec![(42, 11), (42, 11)]);
}

#[test]
fn callbacks_fire_exactly_once_and_wait_for_all_covers_detached_requests() {
    // `callback`, `wait_for_all`: a 1 MiB detached receive whose callback must have run
    // when wait_for_all returns; every detached callback runs once.
    let counts = run(2, |ctx| {
        let count = Arc::new(AtomicUsize::new(0));
        let v = ctx.register(Vector::from_vec(vec![ctx.rank().0 as u8; 1 << 20]));
        let other = peer(ctx);
        for t in 0..5 {
            let c = Arc::clone(&count);
            if ctx.rank().0 == 1 {
                ctx.send(&v, other, Tag(t))
                    .detach(move |r| {
                        r.unwrap();
                        c.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            } else {
                ctx.recv(&v, other, Tag(t))
                    .detach(move |r| {
                        r.unwrap();
                        c.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            }
        }
        let task_done = Arc::new(AtomicUsize::new(0));
        let t = Arc::clone(&task_done);
        ctx.task(&Codelet::empty("nothing"))
            .callback(move || {
                t.fetch_add(1, Ordering::SeqCst);
            })
            .submit();
        ctx.wait_for_all();
        let n = count.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(count.load(Ordering::SeqCst), n, "no callback runs twice");
        (n, task_done.load(Ordering::SeqCst))
    });
    assert_eq!(counts, vec![(5, 1), (5, 1)]);
}

#[test]
fn tag_unlocking_variants_unlock_their_task_tag() {
    // `mpi_detached_tag`: alternating isend/irecv_detached_unlock_tag + tag_wait; the
    // array variants unlock once all requests completed.
    let out = run(2, |ctx| {
        let v = ctx.register(Vector::from_vec(vec![1.0f32; 16]));
        let w = ctx.register(Vector::from_vec(vec![2.0f32; 16]));
        let other = peer(ctx);
        for round in 0..4u64 {
            let tag = TaskTag(round);
            if (round % 2 == 0) == (ctx.rank().0 == 0) {
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
        if ctx.rank().0 == 0 {
            ctx.send_all(items)
                .unlock(TaskTag(99))
                .detach(|r| r.unwrap())
                .unwrap();
        } else {
            ctx.recv_all(items)
                .unlock(TaskTag(99))
                .detach(|r| r.unwrap())
                .unwrap();
        }
        ctx.tag_wait(&[TaskTag(99)]);
        ctx.wait_for_all();
        true
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn a_duplicate_communicator_keeps_the_same_user_tags_apart() {
    // `multiple_comms`: the same tags on the world and on a duplicate do not mix.
    let out = run(2, |ctx| {
        let dup = ctx.comm_dup(CommId::WORLD);
        let a = ctx.register(Variable::new(0u8));
        let b = ctx.register(Variable::new(0u8));
        if ctx.rank().0 == 0 {
            ctx.acquire(&a, AccessMode::W).get_mut().set(1);
            ctx.acquire(&b, AccessMode::W).get_mut().set(2);
            ctx.send(&a, Rank(1), Tag(5)).wait().unwrap();
            ctx.send(&b, Rank(1), Tag(5))
                .comm(dup)
                .start()
                .unwrap()
                .wait()
                .unwrap();
            (0, 0)
        } else {
            ctx.recv(&b, Rank(0), Tag(5))
                .comm(dup)
                .start()
                .unwrap()
                .wait()
                .unwrap();
            ctx.recv(&a, Rank(0), Tag(5)).wait().unwrap();
            let va = ctx.acquire(&a, AccessMode::R).get().get();
            let vb = ctx.acquire(&b, AccessMode::R).get().get();
            (va, vb)
        }
    });
    assert_eq!(out[1], (1, 2));
}

#[test]
fn a_receive_with_sequential_consistency_off_is_not_ordered_after_tasks() {
    let out = run(2, |ctx| {
        let h = ctx.register(Variable::new(0u32));
        if ctx.rank().0 == 0 {
            ctx.acquire(&h, AccessMode::W).get_mut().set(5);
            ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
            0
        } else {
            // A held acquisition would block an ordered receive forever.
            let held = ctx.acquire(&h, AccessMode::R);
            let req = ctx
                .recv(&h, Rank(0), Tag(1))
                .sequential_consistency(false)
                .start()
                .unwrap();
            drop(held);
            req.wait().unwrap();
            ctx.acquire(&h, AccessMode::R).get().get()
        }
    });
    assert_eq!(out[1], 5);
}

#[test]
fn statistics_count_payload_bytes_per_peer() {
    // `stats`: 3 sends of 4 bytes from 0 to 1.
    let mut config = config();
    config.stats = true;
    let out = run_local_with(2, config, |ctx| {
        let h = ctx.register(Variable::new(7u32));
        for t in 0..3 {
            if ctx.rank().0 == 0 {
                ctx.send(&h, Rank(1), Tag(t)).wait().unwrap();
            } else {
                ctx.recv(&h, Rank(0), Tag(t)).wait().unwrap();
            }
        }
        ctx.comm_amounts().expect("statistics are on")
    })
    .unwrap();
    assert_eq!(out[0], vec![0, 12]);
    assert_eq!(out[1], vec![0, 0]);
}

#[test]
fn pedantic_sends_and_lazy_handles_still_deliver() {
    let mut config = config();
    config.pedantic_isend = true;
    let out = run_local_with(2, config, |ctx| {
        if ctx.rank().0 == 0 {
            let h = ctx.register(Vector::from_vec(vec![3u16; 100]));
            ctx.send(&h, Rank(1), Tag(1))
                .detach(|r| r.unwrap())
                .unwrap();
            // A writer after a pedantic send waits for the send to complete.
            ctx.task(&Codelet::new("zero", |b| {
                b.w::<Vector<u16>>(0).as_mut_slice().fill(0)
            }))
            .w(&h)
            .submit();
            ctx.wait_for_all();
            0
        } else {
            let h = ctx.register_lazy(|| Vector::<u16>::zeros(100));
            ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
            ctx.unregister(h)
                .as_slice()
                .iter()
                .map(|v| u32::from(*v))
                .sum()
        }
    })
    .unwrap();
    assert_eq!(out[1], 300);
}

// ----- bad input ------------------------------------------------------------------------

#[test]
fn a_receive_into_a_smaller_or_larger_handle_fails_with_a_size_mismatch() {
    let out = run(2, |ctx| {
        if ctx.rank().0 == 0 {
            let h = ctx.register(Vector::from_vec(vec![1u8; 100]));
            ctx.send(&h, Rank(1), Tag(1)).wait().unwrap();
            ctx.send(&h, Rank(1), Tag(2)).wait().unwrap();
            vec![]
        } else {
            let small = ctx.register(Vector::from_vec(vec![9u8; 10]));
            let large = ctx.register(Vector::from_vec(vec![9u8; 1000]));
            let e1 = ctx.recv(&small, Rank(0), Tag(1)).wait().unwrap_err();
            let e2 = ctx.recv(&large, Rank(0), Tag(2)).wait().unwrap_err();
            // Nothing was copied into either handle.
            assert!(ctx.unregister(small).as_slice().iter().all(|v| *v == 9));
            assert!(ctx.unregister(large).as_slice().iter().all(|v| *v == 9));
            vec![e1, e2]
        }
    });
    assert!(matches!(
        out[1][0],
        CommError::Data(DataError::SizeMismatch {
            expected: 10,
            got: 100
        })
    ));
    assert!(matches!(
        out[1][1],
        CommError::Data(DataError::SizeMismatch {
            expected: 1000,
            got: 100
        })
    ));
}

#[test]
fn ranks_out_of_range_and_tags_used_twice_are_errors_at_the_call() {
    let out = run(2, |ctx| {
        let h = ctx.register(Variable::new(0u8));
        let g = ctx.register(Variable::new(0u8));
        let e1 = ctx.send(&h, Rank(7), Tag(0)).start().unwrap_err();
        let e2 = ctx.recv(&h, Rank(2), Tag(0)).start().unwrap_err();
        ctx.set_tag(&h, Tag(5)).unwrap();
        let e3 = ctx.set_tag(&g, Tag(5)).unwrap_err();
        let _ = ctx.unregister(h);
        ctx.set_tag(&g, Tag(5)).unwrap(); // free again once h is gone
        vec![e1, e2, e3]
    });
    assert_eq!(
        out[0],
        vec![
            CommError::RankOutOfRange {
                rank: Rank(7),
                size: 2
            },
            CommError::RankOutOfRange {
                rank: Rank(2),
                size: 2
            },
            CommError::TagInUse { tag: Tag(5) },
        ]
    );
}

#[test]
fn shutdown_reports_orphan_messages_instead_of_aborting() {
    let err = run_local_with(2, config(), |ctx| {
        if ctx.rank().0 == 1 {
            let h = ctx.register(Variable::new(5u32));
            ctx.send(&h, Rank(0), Tag(77)).wait().unwrap();
        }
    })
    .unwrap_err();
    assert_eq!(err.leftovers.len(), 1, "{err}");
    assert!(
        matches!(
            err.leftovers[0],
            Leftover::Orphan {
                rank: Rank(0),
                source: Rank(1),
                tag: Tag(77),
                bytes: 4,
                refused: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.leftovers[0]
            .to_string()
            .contains("rank 0: message from rank 1 with tag 77 (4 bytes)"),
        "{err}"
    );
}

#[test]
fn shutdown_reports_receives_that_can_never_complete_instead_of_hanging() {
    let err = run_local_with(2, config(), |ctx| {
        if ctx.rank().0 == 0 {
            let h = ctx.register(Variable::new(0u32));
            ctx.recv(&h, Rank(1), Tag(3)).detach(|_| {}).unwrap();
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("rank 0: Recv with rank 1 and tag 3 never completed"),
        "{text}"
    );
}

#[test]
fn shutdown_reports_requests_never_waited_on() {
    let err = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(1u8));
        if ctx.rank().0 == 0 {
            let req = ctx.send(&h, Rank(1), Tag(4)).start().unwrap();
            drop(req);
        } else {
            ctx.recv(&h, Rank(0), Tag(4)).wait().unwrap();
        }
    })
    .unwrap_err();
    assert_eq!(err.leftovers.len(), 1, "{err}");
    assert!(
        matches!(
            &err.leftovers[0],
            Leftover::Unwaited { rank: Rank(0), what } if what.starts_with("send of data 0 to rank 1 with tag 4")
        ),
        "{err}"
    );
    assert!(
        err.leftovers[0]
            .to_string()
            .contains("request never waited on: send of data 0 to rank 1 with tag 4"),
        "{err}"
    );
}

#[test]
fn a_panicking_task_is_reported_at_shutdown_and_does_not_wedge_the_rank() {
    let err = run_local_with(1, config(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        ctx.task(&Codelet::new("boom", |_| panic!("kernel failed")))
            .rw(&h)
            .submit();
        // The successor still runs, and wait_for_all returns.
        ctx.task(&Codelet::new("after", |b| b.w::<Variable<u32>>(0).set(2)))
            .rw(&h)
            .submit();
        ctx.wait_for_all();
        assert_eq!(ctx.acquire(&h, AccessMode::R).get().get(), 2);
    })
    .unwrap_err();
    assert_eq!(err.leftovers.len(), 1, "{err}");
    assert!(
        matches!(
            &err.leftovers[0],
            Leftover::TaskFailed { rank: Rank(0), what } if what.contains("panicked: kernel failed")
        ),
        "{err}"
    );
    assert!(
        err.leftovers[0]
            .to_string()
            .contains("rank 0: task `boom` panicked: kernel failed"),
        "{err}"
    );
}

#[test]
fn a_slow_request_callback_at_shutdown_is_waited_for_not_taken_for_a_stuck_rank() {
    // The callback of a detached send runs on the thread that drives progress, after the
    // rank's closure returned, and takes five times the shutdown's grace (50 ms): the
    // rank is busy meanwhile, not a rank where nothing moves.
    let grace = ClusterConfig::default().shutdown_grace;
    let out = run_local_with(2, config(), move |ctx| {
        let h = ctx.register(Variable::new(1u32));
        if ctx.rank().0 == 0 {
            ctx.send(&h, Rank(1), Tag(1))
                .detach(move |r| {
                    std::thread::sleep(grace * 5);
                    r.expect("sent");
                })
                .unwrap();
        } else {
            ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
        }
    });
    assert!(out.is_ok(), "{:?}", out.err().map(|e| e.to_string()));
}

#[test]
fn a_panicking_request_callback_is_reported_and_the_rank_goes_on() {
    let err = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        if ctx.rank().0 == 0 {
            ctx.send(&h, Rank(1), Tag(1))
                .detach(|_| panic!("callback failed"))
                .unwrap();
            ctx.send(&h, Rank(1), Tag(2)).wait().unwrap(); // the progression thread still runs
        } else {
            ctx.recv(&h, Rank(0), Tag(1)).wait().unwrap();
            ctx.recv(&h, Rank(0), Tag(2)).wait().unwrap();
        }
    })
    .unwrap_err();
    assert_eq!(err.leftovers.len(), 1, "{err}");
    assert!(
        matches!(
            &err.leftovers[0],
            Leftover::CallbackPanicked { rank: Rank(0), what } if what == "send of data 0 to rank 1 with tag 1"
        ),
        "{err}"
    );
    assert!(
        err.leftovers[0]
            .to_string()
            .contains("rank 0: the callback of the send of data 0 to rank 1 with tag 1 panicked"),
        "{err}"
    );
}

#[test]
fn more_pending_receives_than_the_engine_holds_wait_in_order_instead_of_spinning() {
    // 1100 receives with distinct tags posted before any message: more than the engine's
    // 1024 match keys. The extra ones wait in the progression thread and go in as the
    // first ones complete; same-key order is kept.
    let out = run(2, |ctx| {
        let n = 1100;
        if ctx.rank().0 == 0 {
            let hs: Vec<_> = (0..n).map(|_| ctx.register(Variable::new(0u32))).collect();
            for (i, h) in hs.iter().enumerate() {
                ctx.recv(h, Rank(1), Tag(i as i64))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            ctx.barrier();
            ctx.wait_for_all();
            hs.iter()
                .enumerate()
                .all(|(i, h)| ctx.acquire(h, AccessMode::R).get().get() == i as u32)
        } else {
            ctx.barrier();
            for i in 0..n {
                let h = ctx.register(Variable::new(i as u32));
                ctx.send(&h, Rank(0), Tag(i64::from(i))).wait().unwrap();
            }
            true
        }
    });
    assert_eq!(out, vec![true, true]);
}

#[test]
fn more_early_messages_than_the_engine_holds_are_kept_in_order_and_delivered() {
    // 2200 messages (two per tag, 1100 tags) sent before any receive: more than the early
    // tables hold. Refused envelopes wait, in arrival order, and go in as receives free
    // room; the two messages of each tag arrive in order.
    let out = run(2, |ctx| {
        let n = 1100u32;
        if ctx.rank().0 == 1 {
            for i in 0..n {
                for k in 0..2 {
                    let h = ctx.register(Variable::new(i * 10 + k));
                    ctx.send(&h, Rank(0), Tag(i64::from(i)))
                        .detach(|r| r.unwrap())
                        .unwrap();
                }
            }
            ctx.wait_for_all();
            ctx.barrier();
            true
        } else {
            ctx.barrier();
            let h = ctx.register(Variable::new(0u32));
            let mut ok = true;
            for i in 0..n {
                for k in 0..2 {
                    ctx.recv(&h, Rank(1), Tag(i64::from(i))).wait().unwrap();
                    ok &= ctx.acquire(&h, AccessMode::R).get().get() == i * 10 + k;
                }
            }
            ok
        }
    });
    assert_eq!(out, vec![true, true]);
}

/// A thread blocked in `recv` drives its rank's progress, then hands back to the
/// progression thread when nothing comes for a while: a message that comes much later
/// (here 50 ms, far past the driving patience) still completes the receive, with the
/// waiting thread driving and with it off (`caller_drives`), for blocking and async calls
/// and for a barrier.
#[test]
fn a_blocking_call_whose_message_comes_late_completes() {
    for caller_drives in [true, false] {
        let config = ClusterConfig {
            caller_drives,
            ..config()
        };
        let got = run_local_with(2, config, |ctx| {
            let v = ctx.register(Variable::new(0u64));
            let other = peer(ctx);
            for round in 0..3u64 {
                let tag = Tag(round as i64);
                if ctx.rank().0 == 0 {
                    std::thread::sleep(Duration::from_millis(50));
                    ctx.acquire(&v, AccessMode::W).get_mut().set(round + 10);
                    ctx.send(&v, other, tag).wait().unwrap();
                } else if round == 1 {
                    ctx.recv(&v, other, tag).start().unwrap().wait().unwrap();
                } else {
                    ctx.recv(&v, other, tag).wait().unwrap();
                }
                ctx.barrier();
            }
            ctx.acquire(&v, AccessMode::R).get().get()
        })
        .expect("a clean shutdown");
        assert_eq!(got, vec![12, 12], "caller_drives = {caller_drives}");
    }
}

/// The eager limit (`ClusterConfig::eager_limit`, `STARLING_EAGER_LIMIT`): whatever it
/// is — never eager, the core's 256 B, the default 4 KiB, the largest 64 KiB, or beyond
/// it (clamped) — payloads on either side of it arrive intact, blocking and detached.
#[test]
fn payloads_around_every_eager_limit_arrive_intact() {
    for eager_limit in [0, 256, 4096, 64 << 10, u32::MAX] {
        let config = ClusterConfig {
            eager_limit,
            ..config()
        };
        let sizes = [0usize, 1, 255, 256, 257, 4096, 4097, 65536, 65537, 200_000];
        let got = run_local_with(2, config, move |ctx| {
            let me = ctx.rank().0;
            let other = peer(ctx);
            let mut ok = 0;
            for (i, &n) in sizes.iter().enumerate() {
                let fill = |k: usize| ((k * 7 + n) % 251) as u8;
                let h = ctx.register(Vector::from_vec(if me == 0 {
                    (0..n).map(fill).collect()
                } else {
                    vec![0u8; n]
                }));
                let tag = Tag(i as i64);
                if me == 0 {
                    if i % 2 == 0 {
                        ctx.send(&h, other, tag).wait().unwrap();
                    } else {
                        ctx.send(&h, other, tag).detach(|r| r.unwrap()).unwrap();
                    }
                } else {
                    ctx.recv(&h, other, tag).wait().unwrap();
                    let v = ctx.acquire(&h, AccessMode::R);
                    assert!(
                        v.get()
                            .as_slice()
                            .iter()
                            .enumerate()
                            .all(|(k, b)| *b == fill(k)),
                        "{n} bytes with eager limit {eager_limit}"
                    );
                    ok += 1;
                }
                ctx.wait_for_all();
            }
            ok
        })
        .expect("a clean shutdown");
        assert_eq!(got, vec![0, sizes.len()], "eager limit {eager_limit}");
    }
}

/// Multiple-send (`STARPU_MPI_THREAD_MULTIPLE_SEND`, `ClusterConfig::multiple_send`): a
/// send posted while the progression lock is free leaves from the posting thread — here
/// the worker whose increment released the token, or the application thread — or, off,
/// from the progression thread. The token ring over 3 ranks, 20 laps, ends with the same
/// token either way, and a burst of prioritised sends all arrive intact.
#[test]
fn multiple_send_on_and_off_deliver_the_same() {
    for multiple_send in [true, false] {
        let config = ClusterConfig {
            multiple_send,
            ..config()
        };
        let got = run_local_with(3, config, |ctx| {
            let (me, n) = (ctx.rank().0, ctx.size());
            let (prev, next) = (Rank((me + n - 1) % n), Rank((me + 1) % n));
            let token = ctx.register(Variable::new(0u64));
            let inc = Codelet::new("inc", |b| *b.w::<Variable<u64>>(0).value_mut() += 1);
            for lap in 0..20i64 {
                if me != 0 {
                    ctx.recv(&token, prev, Tag(lap))
                        .detach(|r| r.unwrap())
                        .unwrap();
                } else if lap > 0 {
                    ctx.recv(&token, prev, Tag(lap - 1))
                        .detach(|r| r.unwrap())
                        .unwrap();
                }
                ctx.task(&inc).rw(&token).submit();
                ctx.send(&token, next, Tag(lap))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            if me == 0 {
                ctx.recv(&token, prev, Tag(19))
                    .detach(|r| r.unwrap())
                    .unwrap();
            }
            // A burst: rank 0 sends 16 handles to rank 1 with mixed priorities.
            let hs: Vec<_> = (0..16u64)
                .map(|i| ctx.register(Variable::new(if me == 0 { 100 + i } else { 0 })))
                .collect();
            for (i, h) in hs.iter().enumerate() {
                let tag = Tag(1000 + i as i64);
                if me == 0 {
                    ctx.send(h, Rank(1), tag)
                        .priority((i % 5) as i32)
                        .detach(|r| r.unwrap())
                        .unwrap();
                } else if me == 1 {
                    ctx.recv(h, Rank(0), tag).detach(|r| r.unwrap()).unwrap();
                }
            }
            ctx.wait_for_all();
            let burst: Vec<u64> = hs
                .iter()
                .map(|h| ctx.acquire(h, AccessMode::R).get().get())
                .collect();
            (ctx.acquire(&token, AccessMode::R).get().get(), burst)
        })
        .expect("a clean shutdown");
        assert_eq!(got[0].0, 60, "multiple_send = {multiple_send}");
        assert_eq!(
            got[1].1,
            (100..116).collect::<Vec<u64>>(),
            "multiple_send = {multiple_send}"
        );
    }
}

/// Driver mode (`STARPU_MPI_DRIVER_CALL_FREQUENCY` / `_TASK_FREQUENCY`) with one worker:
/// the progression thread takes the worker's place and runs every task, and the ping-pong
/// of tasks and messages completes (the reference's token ring deadlocks in this setting:
/// its thread sleeps while tasks wait).
#[test]
fn driver_mode_with_one_worker_runs_every_task_on_the_progression_thread() {
    for flavour in ["blocking", "detached"] {
        let config = ClusterConfig {
            driver: Some(starling::DriverMode {
                call_frequency: 1,
                task_frequency: 1,
            }),
            ..config()
        };
        let threads = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let seen = Arc::clone(&threads);
        let got = run_local_with(2, config, move |ctx| {
            let seen = Arc::clone(&seen);
            let probe = Codelet::new("probe", move |_| {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                seen.lock().unwrap().insert(name);
            });
            let v = ctx.register(Variable::new(0u64));
            ctx.task(&probe).rw(&v).submit();
            let sum = ping_pong(ctx, flavour);
            ctx.wait_for_all();
            sum
        })
        .expect("a clean shutdown");
        assert!(
            got.iter().all(|v| *v == 10.0 || *v == 9.0),
            "{flavour}: {got:?}"
        );
        let names = threads.lock().unwrap().clone();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            vec!["starling-progress".to_owned()],
            "{flavour}"
        );
    }
}
