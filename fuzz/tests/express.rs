//! The engine simulation's express sends, by hand: a send that leaves without a request
//! keeps its place among the sends of its key (protocol §8.2), directly and through the
//! admission on tiny tables.

use starling_fuzz::engine_sim::{Case, Op, check, check_admitted};

/// Rank 0 sends four messages on one key — two submitted and made ready under an
/// in-flight cap of one (the second waits in the ready list), then two express sends —
/// and rank 1 receives four, each checked against its own send's payload.
fn case(seed: u64) -> Case {
    let send = |size| Op::Send {
        src: 0,
        dst: 1,
        comm: false,
        tag: 1,
        size,
        sync: false,
        detached: false,
    };
    let express = |size| Op::Express {
        src: 0,
        dst: 1,
        comm: false,
        tag: 1,
        size,
    };
    let recv = Op::Recv {
        src: 0,
        dst: 1,
        comm: false,
        tag: 1,
        capacity: 0,
        detached: false,
    };
    let ready = |rank| Op::Ready { rank, pick: 0 };
    let mut ops = vec![send(1), send(2), ready(0), ready(0), express(3), express(4)];
    ops.extend([
        recv,
        recv,
        recv,
        recv,
        ready(1),
        ready(1),
        ready(1),
        ready(1),
    ]);
    ops.extend([
        Op::Deliver { count: 7 },
        express(5),
        Op::Deliver { count: 7 },
    ]);
    Case {
        ranks: 0,
        eager: 2,
        cap: 1,
        priorities: false,
        seed,
        key_priority: [0; 4],
        ops,
    }
}

#[test]
fn express_sends_keep_their_place_among_their_keys_sends() {
    for seed in 0..8 {
        check(&case(seed));
        check_admitted(&case(seed));
    }
}
