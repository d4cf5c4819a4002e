use super::*;
use crate::runtime::interfaces::Variable;
use crate::runtime::task::Codelet;
use starling_core::Rank;

fn ring(count: u64, agreed: u64, items: &[(u64, u64, &str)]) -> RankRing {
    // Running digests chained from the insert digests, as the ranks compute them.
    let mut running = 0;
    let mut out = Vec::new();
    for (i, d, text) in items {
        running = chain(running, *i, *d);
        out.push((*i, *d, running, (*text).to_owned()));
    }
    RankRing {
        count,
        running,
        agreed,
        items: out,
    }
}

#[test]
fn the_first_differing_insert_is_named_with_what_each_rank_saw() {
    let a = ring(
        3,
        0,
        &[
            (1, 10, "init(tag 0 W of rank 0)"),
            (2, 20, "potrf(tag 3 RW of rank 0) on rank 0"),
            (3, 30, "x"),
        ],
    );
    let b = ring(
        3,
        0,
        &[
            (1, 10, "init(tag 0 W of rank 0)"),
            (2, 21, "gemm(tag 3 R of rank 0) on rank 1"),
            (3, 30, "x"),
        ],
    );
    let d = compare("barrier", &[a.clone(), b, a]);
    assert_eq!(d.insert, Some(2));
    assert_eq!(d.seen[1], "gemm(tag 3 R of rank 0) on rank 1");
    assert!(
        d.message.contains(
            "diverged at insert #2 (found at barrier; they agreed up to insert #0): ranks 0, 2 \
             saw potrf(tag 3 RW of rank 0) on rank 0; rank 1 saw gemm(tag 3 R of rank 0) on rank 1"
        ),
        "{}",
        d.message
    );
}

#[test]
fn a_rank_whose_flow_is_shorter_has_no_insert_there() {
    let a = ring(2, 0, &[(1, 10, "a()"), (2, 20, "b()")]);
    let b = ring(1, 0, &[(1, 10, "a()")]);
    let d = compare("mpi_wait_for_all", &[a, b]);
    assert_eq!(d.insert, Some(2));
    assert_eq!(d.seen[1], "no insert #2 (its flow has 1 inserts)");
    assert!(
        d.message.contains("rank 1 has no insert #2"),
        "{}",
        d.message
    );
}

#[test]
fn a_divergence_older_than_the_kept_inserts_says_so() {
    // Same inserts kept, different histories before them.
    let mut a = ring(5, 0, &[(5, 50, "e()")]);
    let mut b = a.clone();
    a.items[0].2 = 1;
    b.items[0].2 = 2;
    a.running = 1;
    b.running = 2;
    let d = compare("check_agreement", &[a, b]);
    assert_eq!(d.insert, None);
    assert!(
        d.message.contains("diverged before insert #5"),
        "{}",
        d.message
    );
}

#[test]
fn a_ring_message_reads_back_and_garbage_does_not_panic() {
    let mut a = Agreement::new(true);
    let cl = Codelet::empty("gemm");
    for i in 0..3 {
        a.record(
            cl.name(),
            [
                (Some((Tag(i), Owner::Rank(Rank(1)))), AccessMode::RW),
                (None, AccessMode::R),
            ]
            .into_iter(),
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        );
    }
    let bytes = a.ring_bytes();
    let r = RankRing::parse(&bytes).expect("a rank's own message reads back");
    assert_eq!((r.count, r.running), (a.count, a.running));
    assert_eq!(r.items.len(), 3);
    assert_eq!(r.items[2].3, "gemm(tag 2 RW of rank 1, temporary R)");
    // Every truncation and some corruptions are refused or read, never a panic.
    for n in 0..bytes.len() {
        let _ = RankRing::parse(&bytes[..n]);
    }
    let mut bad = bytes;
    bad[24 + 24] = 0xff; // a huge description length
    bad[24 + 25] = 0xff;
    bad[24 + 26] = 0xff;
    bad[24 + 27] = 0xff;
    assert_eq!(RankRing::parse(&bad), None);
    assert_eq!(unframe(&[1, 0, 0, 0, 9, 0, 0, 0]), None);
    assert_eq!(
        unframe(&frame(&[vec![1], vec![], vec![2, 3]])),
        Some(vec![vec![1], vec![], vec![2, 3]])
    );
}

#[test]
fn the_ring_keeps_the_last_inserts_only() {
    let mut a = Agreement::new(true);
    let cl = Codelet::empty("t");
    for i in 0..(RING as i64 + 10) {
        a.record(
            cl.name(),
            [(Some((Tag(i), Owner::Rank(Rank(0)))), AccessMode::W)].into_iter(),
            &Options::default(),
            Some(Executor::Rank(Rank(0))),
        );
    }
    let r = RankRing::parse(&a.ring_bytes()).unwrap();
    assert_eq!(r.items.len(), RING);
    assert_eq!(r.items[0].0, 11, "oldest first");
    assert_eq!(r.items[RING - 1].0, RING as u64 + 10);
    assert!(r.items.windows(2).all(|w| w[1].0 == w[0].0 + 1));
}

#[test]
fn an_auto_executor_next_to_temporary_data_is_not_recorded() {
    // Ranks that do not know the temporary datum get no executor from the planner.
    let digest = |executor| {
        let mut a = Agreement::new(true);
        a.record(
            "t",
            [(None, AccessMode::W)].into_iter(),
            &Options::default(),
            executor,
        );
        a.running
    };
    assert_eq!(digest(Some(Executor::Rank(Rank(1)))), digest(None));
}

/// The point-to-point exchange (what MPI uses) on the in-process cluster: the board is
/// taken away, so the ranks exchange on the reserved tags, with synchronous sends.
#[test]
fn the_point_to_point_exchange_agrees_then_finds_a_divergence_and_leaves_nothing_behind() {
    use crate::{ClusterConfig, RuntimeConfig, run_local_with};
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        check_agreement: true,
        ..ClusterConfig::default()
    };
    let out = run_local_with(3, config, |ctx| {
        lock(&ctx.dist).agreement.board = None;
        let x = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(0u32))
            .unwrap();
        let step = Codelet::empty("step");
        for _ in 0..4 {
            ctx.insert(&step).rw(&x).submit().unwrap();
        }
        ctx.barrier();
        let agreed = ctx.check_agreement();
        let early = ctx.early_messages();
        let name = if ctx.rank() == Rank(2) { "odd" } else { "step" };
        ctx.insert(&Codelet::empty(name)).rw(&x).submit().unwrap();
        let diverged = ctx.mpi_wait_for_all();
        ctx.wait_for_all();
        (agreed, early, diverged)
    })
    .expect("the exchange leaves no request or message behind");
    let mut messages = Vec::new();
    for (agreed, early, diverged) in out {
        assert_eq!(agreed, Ok(()));
        assert_eq!(early, 0, "synchronous sends create no early data");
        let Err(crate::InsertError::Diverged(d)) = diverged else {
            panic!("expected a divergence, got {diverged:?}");
        };
        assert_eq!(d.insert, Some(5));
        assert!(
            d.message.contains("they agreed up to insert #4"),
            "{}",
            d.message
        );
        assert!(
            d.message
                .contains("rank 2 saw odd(tag 1 RW of rank 0) on rank 0"),
            "{}",
            d.message
        );
        messages.push(d.message);
    }
    assert!(messages.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn an_insert_with_many_accesses_is_described_with_the_first_ones() {
    let mut a = Agreement::new(true);
    let accesses: Vec<_> = (0..10)
        .map(|i| (Some((Tag(i), Owner::PerNode)), AccessMode::R))
        .collect();
    a.record(
        "wide",
        accesses.iter().copied(),
        &Options::default(),
        Some(Executor::PerNode),
    );
    let r = RankRing::parse(&a.ring_bytes()).unwrap();
    assert!(
        r.items[0]
            .3
            .ends_with("tag 7 R per node, … 2 more) on every rank"),
        "{}",
        r.items[0].3
    );
}

#[test]
fn the_last_automatic_tag_is_handed_out_then_registrations_are_refused() {
    let out = crate::run_local(1, |ctx| {
        lock(&ctx.dist).next_auto_tag = *AUTO_TAGS.end();
        let last = ctx.register_owned(crate::TagChoice::Auto, Owner::Rank(Rank(0)), || {
            Variable::new(0u32)
        });
        let last = last.map(|h| ctx.data_tag(&h));
        let none = ctx
            .register_owned(crate::TagChoice::Auto, Owner::Rank(Rank(0)), || {
                Variable::new(0u32)
            })
            .map(|_| ());
        // Still refused, and an explicit tag outside the range still works.
        let again = ctx
            .register_owned(crate::TagChoice::Auto, Owner::Rank(Rank(0)), || {
                Variable::new(0u32)
            })
            .map(|_| ());
        let explicit = ctx
            .register_owned(Tag(3), Owner::Rank(Rank(0)), || Variable::new(0u32))
            .map(|h| ctx.data_tag(&h));
        (last, none, again, explicit)
    })
    .unwrap();
    let exhausted = Err(crate::InsertError::Comm(CommError::AutoTagsExhausted));
    assert_eq!(
        out[0],
        (
            Ok(Some(Tag(*AUTO_TAGS.end()))),
            exhausted.clone(),
            exhausted,
            Ok(Some(Tag(3)))
        )
    );
}
