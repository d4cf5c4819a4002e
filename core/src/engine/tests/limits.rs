//! Run-time table limits (`Config::request_limit`, `Config::key_limit`): how the slab is
//! shared out ([`Budget`]), and receives the matcher has no room for, which wait without
//! holding back the others.

use super::*;

/// An engine of 16 slots and 16 keys, limited at run time to `requests` and `keys`.
fn limited(rank: u32, requests: u32, keys: u32) -> E {
    let mut config = Config::new(Rank(rank), 2, tags());
    config.request_limit = requests;
    config.key_limit = keys;
    E::new(config)
}

fn eager(tag: i64, msg: u32, byte: u8) -> Vec<u8> {
    let env = Envelope {
        kind: EnvKind::Eager,
        comm: W,
        tag: Tag(tag),
        size: 1,
        msg: MsgId(msg),
    };
    let mut bytes = env.encode().to_vec();
    bytes.push(byte);
    bytes
}

fn ready_recv(e: &mut E, tag: i64) -> ReqId {
    let r = e
        .submit_recv(RecvArgs::new(W, Rank(0), Tag(tag), 8))
        .unwrap();
    e.handle_data_ready(r).unwrap();
    r
}

#[test]
fn the_budget_is_a_pure_function_of_the_limit() {
    assert_eq!(
        Budget::of(4),
        Budget {
            sends: 2,
            recvs: 2,
            early: 1
        }
    );
    assert_eq!(Budget::of(1), Budget::of(4));
    assert_eq!(
        Budget::of(4096),
        Budget {
            sends: 2048,
            recvs: 2048,
            early: 2047
        }
    );
    // No limit: the whole slab, first come first served (what the other tests pin).
    assert_eq!(engine(0, 2).budget(), None);
    // A limit above the slab is the slab.
    assert_eq!(limited(0, 1 << 20, 0).budget(), Some(Budget::of(16)));
}

#[test]
fn sends_beyond_their_share_are_refused_and_leave_room_for_receives() {
    let mut a = limited(0, 4, 0);
    for t in 0..2 {
        a.submit_send(SendArgs::new(W, Rank(1), Tag(t), 1)).unwrap();
    }
    assert_eq!(
        a.submit_send(SendArgs::new(W, Rank(1), Tag(9), 1)),
        Err(SubmitError::Full(Table::Requests))
    );
    // The receives' share is untouched.
    for t in 0..2 {
        a.submit_recv(RecvArgs::new(W, Rank(1), Tag(t), 1)).unwrap();
    }
    assert_eq!(
        a.submit_recv(RecvArgs::new(W, Rank(1), Tag(9), 1)),
        Err(SubmitError::Full(Table::Requests))
    );
}

#[test]
fn can_submit_says_whether_a_submission_would_be_taken() {
    // With a budget: each class's share.
    let mut a = limited(0, 4, 0);
    for t in 0..3 {
        let (send, recv) = (a.can_submit(Kind::Send), a.can_submit(Kind::Recv));
        assert_eq!(
            send,
            a.submit_send(SendArgs::new(W, Rank(1), Tag(t), 1)).is_ok()
        );
        assert_eq!(
            recv,
            a.submit_recv(RecvArgs::new(W, Rank(1), Tag(t), 1)).is_ok()
        );
    }
    assert!(!a.can_submit(Kind::Send) && !a.can_submit(Kind::Recv));
    // Without one: the slab (16 slots), first come first served.
    let mut b = limited(0, 0, 0);
    for t in 0..17 {
        let send = b.can_submit(Kind::Send);
        assert_eq!(
            send,
            b.submit_send(SendArgs::new(W, Rank(1), Tag(t), 1)).is_ok()
        );
        assert_eq!(send, t < 16);
    }
    assert!(!b.can_submit(Kind::Recv));
}

#[test]
fn early_messages_never_take_the_last_receive_slot() {
    let mut b = limited(1, 4, 0);
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(1, 0, 10)),
        Ok(Arrival::Stash { .. })
    ));
    // A second early message would leave no slot for the receive that takes the first.
    assert_eq!(
        b.handle_message(Rank(0), W, &eager(2, 1, 20)),
        Err(MessageError::Full(Table::Requests))
    );
    // The receive of the first goes in and takes it, freeing its slot.
    let r = ready_recv(&mut b, 1);
    transmits(&mut b);
    assert!(matches!(
        events(&mut b)[..],
        [Event::Completed { req, from_early: Some(_), .. }] if req == r
    ));
    // The completed receive, not yet retired, still holds a slot: the other is the last
    // one, kept for a receive whose message is here (`Engine::free_recv_slots`), so an
    // early message is refused still.
    assert_eq!(b.free_recv_slots(), Some(1));
    assert_eq!(
        b.handle_message(Rank(0), W, &eager(2, 1, 20)),
        Err(MessageError::Full(Table::Requests))
    );
    b.retire(r).unwrap();
    assert_eq!(b.free_recv_slots(), Some(2));
    // The refused message goes in now.
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(2, 1, 20)),
        Ok(Arrival::Stash { .. })
    ));
    assert!(b.has_early(Key::new(W, Rank(0), Tag(2))) && b.any_early());
    assert_eq!(b.free_recv_slots(), Some(1));
    // Beside a posted receive whose message is not here, an early message would take the
    // last slot: refused.
    let _waiting = ready_recv(&mut b, 9);
    assert_eq!(b.free_recv_slots(), Some(0));
}

#[test]
fn early_messages_leave_the_last_receive_slot_beside_posted_receives() {
    let mut b = limited(1, 4, 0);
    // A receive whose message is not here: one slot left, the last.
    let _r = ready_recv(&mut b, 5);
    assert_eq!(b.free_recv_slots(), Some(1));
    assert_eq!(
        b.handle_message(Rank(0), W, &eager(1, 0, 10)),
        Err(MessageError::Full(Table::Requests))
    );
    assert!(!b.any_early());
    // Its own message needs no slot.
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(5, 1, 50)),
        Ok(Arrival::Deliver { .. } | Arrival::Nothing)
    ));
}

#[test]
fn early_messages_beyond_the_key_limit_are_refused_and_a_waiting_receive_takes_them() {
    let mut b = limited(1, 0, 2);
    for (i, t) in [1, 2].into_iter().enumerate() {
        assert!(matches!(
            b.handle_message(Rank(0), W, &eager(t, i as u32, 0)),
            Ok(Arrival::Stash { .. })
        ));
    }
    // A third key: refused.
    assert_eq!(
        b.handle_message(Rank(0), W, &eager(3, 2, 0)),
        Err(MessageError::Full(Table::MatchKeys))
    );
    // Once its receive waits, it needs no key.
    let r = ready_recv(&mut b, 3);
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(3, 2, 0)),
        Ok(Arrival::Deliver { req, .. }) if req == r
    ));
}

#[test]
fn a_message_for_a_receive_deferred_for_want_of_keys_is_matched_at_once() {
    let mut b = limited(1, 0, 2);
    let _first = ready_recv(&mut b, 1);
    let _second = ready_recv(&mut b, 2);
    let third = ready_recv(&mut b, 3);
    assert_eq!(b.request(third).unwrap().state, State::Ready, "deferred");
    let early_before = b.early_messages();
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(3, 0, 7)),
        Ok(Arrival::Deliver { req, .. }) if req == third
    ));
    assert_eq!(b.early_messages(), early_before, "no early buffer was made");
    transmits(&mut b);
    assert!(matches!(
        events(&mut b)[..],
        [Event::Completed { req, .. }] if req == third
    ));
}

#[test]
fn a_deferred_receive_whose_message_waits_does_not_wait_behind_other_keys() {
    let mut b = limited(1, 0, 2);
    // The message for tag 4 arrived first.
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(4, 0, 7)),
        Ok(Arrival::Stash { .. })
    ));
    let _first = ready_recv(&mut b, 1);
    let _second = ready_recv(&mut b, 2);
    // Tag 3 has no room (2 keys) and nothing waiting: deferred. Tag 4 queues behind it.
    let third = ready_recv(&mut b, 3);
    let fourth = ready_recv(&mut b, 4);
    assert_eq!(b.request(fourth).unwrap().state, State::Ready);
    transmits(&mut b);
    // The receive of tag 4 took its message; tag 3's still waits for room.
    assert!(matches!(
        events(&mut b)[..],
        [Event::Completed { req, from_early: Some(_), .. }] if req == fourth
    ));
    assert_eq!(b.request(third).unwrap().state, State::Ready);
    // Two receives of one key deferred in order stay in order.
    let fifth = ready_recv(&mut b, 3);
    for (i, r) in [third, fifth].into_iter().enumerate() {
        assert!(matches!(
            b.handle_message(Rank(0), W, &eager(3, 1 + i as u32, i as u8)),
            Ok(Arrival::Deliver { req, .. }) if req == r
        ));
    }
}

#[test]
fn a_refused_envelope_keeps_its_order_with_its_key_and_its_payload_tag_only() {
    let b = limited(1, 4, 2);
    let data = |tag, msg| Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(tag),
        size: 1000,
        msg: MsgId(msg),
    };
    let a = b.refusal_order(Rank(0), W, &data(1, 0).encode()).unwrap();
    let c = b.refusal_order(Rank(0), W, &data(2, 1).encode()).unwrap();
    assert_eq!(a.key, Key::new(W, Rank(0), Tag(1)));
    assert_ne!(a.key, c.key);
    assert_ne!(
        a.payload, c.payload,
        "different message ids: different payload tags"
    );
    // One class length apart, two data messages share their payload tag.
    let wrap = tags().class_len();
    let d = b
        .refusal_order(Rank(0), W, &data(3, wrap).encode())
        .unwrap();
    assert_eq!(a.payload, d.payload);
    // Eager envelopes carry their payload: only their key orders them.
    assert_eq!(
        b.refusal_order(Rank(0), W, &eager(1, 5, 0))
            .unwrap()
            .payload,
        None
    );
    assert_eq!(b.refusal_order(Rank(0), W, &[1, 2, 3]), None);
}

#[test]
fn recv_would_wait_says_whether_a_receive_would_wait_for_a_key_and_the_reading_moves_with_it() {
    let mut b = limited(1, 0, 2);
    let key = |t: i64| Key {
        comm: W,
        peer: Rank(0),
        tag: Tag(t),
    };
    assert!(!b.recv_would_wait(key(1)));
    let first = ready_recv(&mut b, 1);
    let _second = ready_recv(&mut b, 2);
    let full = b.recv_room();
    // Both keys taken: a third key would wait; another receive of a posted key would not.
    assert!(b.recv_would_wait(key(3)));
    assert!(!b.recv_would_wait(key(1)));
    // A message of tag 4 kept for its receive: that receive is matched at once.
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(4, 0, 7)),
        Ok(Arrival::Stash { .. })
    ));
    assert!(!b.recv_would_wait(key(4)));
    assert_ne!(
        b.recv_room(),
        full,
        "an arrival kept waiting moves the reading"
    );
    let stashed = b.recv_room();
    // The message of tag 1 frees its key: tag 3 would go in now, and the reading moved.
    assert!(matches!(
        b.handle_message(Rank(0), W, &eager(1, 1, 7)),
        Ok(Arrival::Deliver { req, .. }) if req == first
    ));
    assert!(!b.recv_would_wait(key(3)));
    assert_ne!(b.recv_room(), stashed, "a freed key moves the reading");
    // A receive waiting inside the engine makes every later one wait behind it.
    let _third = ready_recv(&mut b, 3);
    let _fifth = ready_recv(&mut b, 5);
    assert!(b.recv_would_wait(key(2)));
}

/// A too-small receive holding the last receive slot of the budget gets a message whose
/// payload travels apart: its discard buffer is outside the budget, so the envelope goes
/// in and the receive fails with `Truncated` — refused for the budget, it would wait for
/// a slot only its own completion frees (a hang).
#[test]
fn a_too_small_receive_holding_the_last_receive_slot_drains_its_payload_outside_the_budget() {
    let mut b = limited(1, 4, 0);
    let big = recv_sized(&mut b, 1, 1000);
    let small = recv_sized(&mut b, 2, 8);
    assert_eq!(b.free_recv_slots(), Some(0), "both receive slots taken");
    assert!(
        !b.room_for(Table::Requests),
        "no early request fits the budget"
    );
    let data = Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(2),
        size: 500,
        msg: MsgId(0),
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &data.encode()),
        Ok(Arrival::Nothing)
    );
    let posted = transmits(&mut b);
    let [
        Transmit::Receive {
            req: drain,
            early: true,
            size: 500,
            ..
        },
    ] = posted[..]
    else {
        panic!("{posted:?}")
    };
    assert!(matches!(
        events(&mut b)[..],
        [Event::Failed { req, error: RequestError::Truncated { capacity: 8, size: 500 }, .. }] if req == small
    ));
    // The budget is unchanged by the discard buffer: once the failed receive is
    // retired, its slot is a receive's again while the drain is still under way.
    b.retire(small).unwrap();
    assert_eq!(b.free_recv_slots(), Some(1));
    b.handle_received(drain, 500).unwrap();
    assert_eq!(events(&mut b), [Event::Discard { early: drain }]);
    assert_eq!(b.request(big).unwrap().state, State::AwaitingEnvelope);
}

/// The same for a synchronous message that waited as early data: the receive that takes
/// it, too small, answers and drains the payload into a discard buffer outside the
/// budget, rather than fail for a full table while the sender waits for its answer.
#[test]
fn a_too_small_receive_matching_an_early_synchronous_message_drains_it_outside_the_budget() {
    let mut b = limited(1, 4, 0);
    b.handle_message(Rank(0), W, &sync_envelope(2, 500))
        .unwrap();
    let _other = recv_sized(&mut b, 1, 1000);
    let small = b.submit_recv(RecvArgs::new(W, Rank(0), Tag(2), 8)).unwrap();
    assert!(
        !b.room_for(Table::Requests),
        "no early request fits the budget"
    );
    assert_eq!(b.handle_data_ready(small), Ok(()));
    let out = transmits(&mut b);
    assert_eq!(out.len(), 2, "the answer and the drain: {out:?}");
    assert_eq!(env_of(&out[0]).kind, EnvKind::SyncReady);
    assert!(matches!(
        out[1],
        Transmit::Receive {
            early: true,
            size: 500,
            ..
        }
    ));
    assert!(matches!(
        events(&mut b)[..],
        [Event::Failed { req, error: RequestError::Truncated { .. }, .. }] if req == small
    ));
}

/// With the slab itself full, a too-small receive's discard buffer waits for a slot:
/// the receive waits in order inside the engine and goes on once a slot frees.
#[test]
fn a_too_small_receive_waits_for_a_slab_slot_for_its_discard_buffer_then_goes_on() {
    let mut b = engine(1, 2);
    b.handle_message(Rank(0), W, &sync_envelope(2, 500))
        .unwrap();
    // Fill the slab (16 slots) with receives of other tags, the too-small one last.
    let others: Vec<_> = (0..15).map(|t| recv_sized(&mut b, 100 + t, 8)).collect();
    let small = b.submit_recv(RecvArgs::new(W, Rank(0), Tag(2), 8)).unwrap();
    assert!(!b.room_for(Table::Discards));
    assert_eq!(b.handle_data_ready(small), Ok(()), "it waits: no error");
    assert!(transmits(&mut b).is_empty());
    assert!(events(&mut b).is_empty());
    // A slot frees: an eager message completes another receive, which is retired.
    let eager = Envelope {
        kind: EnvKind::Eager,
        comm: W,
        tag: Tag(100),
        size: 1,
        msg: MsgId(1),
    };
    let mut bytes = eager.encode().to_vec();
    bytes.push(7);
    b.handle_message(Rank(0), W, &bytes).unwrap();
    let _ = events(&mut b);
    b.retire(others[0]).unwrap();
    let out = transmits(&mut b);
    assert_eq!(env_of(&out[0]).kind, EnvKind::SyncReady, "{out:?}");
    assert!(matches!(
        events(&mut b)[..],
        [Event::Failed { req, error: RequestError::Truncated { .. }, .. }] if req == small
    ));
}

/// A synchronous send's envelope from rank 0 on `tag`, of `size` bytes (message 0).
fn sync_envelope(tag: i64, size: u64) -> Vec<u8> {
    let env = Envelope {
        kind: EnvKind::SyncData,
        comm: W,
        tag: Tag(tag),
        size,
        msg: MsgId(0),
    };
    env.encode().to_vec()
}

fn recv_sized(e: &mut E, tag: i64, capacity: u64) -> ReqId {
    let r = e
        .submit_recv(RecvArgs::new(W, Rank(0), Tag(tag), capacity))
        .unwrap();
    e.handle_data_ready(r).unwrap();
    r
}
