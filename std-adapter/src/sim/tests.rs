use starling_core::Tag;

use super::*;

/// Rank 0 sends `size` bytes to rank 1, which receives them; both ready at once.
fn one_message(network: Network, size: usize) -> (Cluster, ReqId) {
    let mut c = Cluster::with_config(2, 1, |cfg| cfg.eager_limit = 8).with_network(network);
    let recv = c.recv(
        Rank(1),
        RecvArgs::new(CommId::WORLD, Rank(0), Tag(9), 64),
        true,
    );
    c.send(
        Rank(0),
        SendArgs::new(CommId::WORLD, Rank(1), Tag(9), 0),
        vec![7; size],
        true,
    );
    (c, recv)
}

#[test]
fn over_mpi_ordering_a_payload_may_arrive_before_its_envelope() {
    // A 20-byte payload travels after its envelope, on another physical tag.
    let (pair, _) = one_message(Network::PerPair, 20);
    assert_eq!(pair.channels(), 1, "one ordered link from 0 to 1");
    let (mut c, recv) = one_message(Network::PerTag, 20);
    assert_eq!(
        c.channels(),
        3,
        "the envelope's tag, the payload's, and the payload's send to complete"
    );
    // Deliver the payload first: it waits as unexpected until the envelope makes
    // rank 1 post its receive.
    assert!(c.step_channel(1));
    assert!(c.take_completions(Rank(1)).is_empty());
    assert!(c.step_channel(0));
    let done = c.take_completions(Rank(1));
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].req, done[0].data.clone()), (recv, vec![7; 20]));
    // The send completes on its own step, here after the receive.
    assert!(c.take_completions(Rank(0)).is_empty());
    assert_eq!(c.channels(), 1);
    assert!(c.step_channel(0));
    assert_eq!(c.take_completions(Rank(0)).len(), 1);
    assert!(!c.step_channel(0), "nothing left in flight");
    assert!(c.is_quiet());
}

#[test]
fn every_path_runs_once_and_the_limit_stops_early() {
    let mut seen = Vec::new();
    let all = Explorer::run(100, |e| {
        let a = e.choose(2);
        let b = if a == 0 { e.choose(3) } else { 9 };
        seen.push((a, b));
    });
    assert_eq!(
        (all.paths, all.complete, all.longest),
        (4, true, 2),
        "{seen:?}"
    );
    assert_eq!(seen, [(0, 0), (0, 1), (0, 2), (1, 9)]);
    let cut = Explorer::run(3, |e| {
        e.choose(2);
        e.choose(3);
    });
    assert_eq!((cut.paths, cut.complete), (3, false));
}

#[test]
#[should_panic(expected = "not deterministic")]
fn a_program_whose_options_change_between_runs_is_reported() {
    let mut runs = 0;
    Explorer::run(10, |e| {
        runs += 1;
        e.choose(2);
        e.choose(runs + 1);
    });
}

#[test]
fn a_failing_path_is_re_raised_and_replays() {
    let failed = std::panic::catch_unwind(|| {
        Explorer::run(100, |e| {
            let path = (e.choose(3), e.choose(2));
            assert_ne!(path, (2, 1), "the planted failure");
        })
    });
    assert!(failed.is_err(), "the last path fails");
    let mut taken = None;
    Explorer::replay(&[2, 1], |e| {
        taken = Some((e.choose(3), e.choose(2), e.path()))
    });
    assert_eq!(taken, Some((2, 1, vec![2, 1])));
}
