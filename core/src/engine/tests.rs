//! Engine behaviour, one scenario per test, driven by hand so each output is checked.

use std::vec::Vec;

use super::*;
use crate::envelope::{HEADER_LEN, decode};
use crate::request::Kind;
use crate::tags::TagSpace;

type E = Engine<16, 16, 4>;

const W: CommId = CommId::WORLD;

fn tags() -> TagSpace {
    TagSpace::new(32767).unwrap()
}

fn engine(rank: u32, nranks: u32) -> E {
    let mut e = E::new(Config::new(Rank(rank), nranks, tags()));
    e.stats_mut().enable();
    e
}

fn transmits(e: &mut E) -> Vec<Transmit> {
    core::iter::from_fn(|| e.poll_transmit()).collect()
}

fn events(e: &mut E) -> Vec<Event> {
    core::iter::from_fn(|| e.poll_event()).collect()
}

/// The wire bytes of an envelope transmit (header plus `inline` payload).
fn wire(t: &Transmit, inline: &[u8]) -> Vec<u8> {
    match t {
        Transmit::Envelope {
            header, inline: i, ..
        } => {
            let mut v = header.to_vec();
            if i.is_some() {
                v.extend_from_slice(inline);
            }
            v
        }
        other => panic!("not an envelope: {other:?}"),
    }
}

fn env_of(t: &Transmit) -> Envelope {
    match t {
        Transmit::Envelope { header, inline, .. } => {
            // An eager header decodes only with its inline payload: pad with zeros.
            let mut bytes = header.to_vec();
            if inline.is_some() {
                let size = u64::from_le_bytes(header[16..24].try_into().unwrap());
                bytes.resize(HEADER_LEN + size as usize, 0);
            }
            decode(&bytes).unwrap().envelope
        }
        other => panic!("not an envelope: {other:?}"),
    }
}

fn send(e: &mut E, dest: u32, tag: i64, size: u64) -> ReqId {
    let r = e
        .submit_send(SendArgs::new(W, Rank(dest), Tag(tag), size))
        .unwrap();
    e.handle_data_ready(r).unwrap();
    r
}

fn sync_send(e: &mut E, dest: u32, tag: i64, size: u64) -> ReqId {
    let mut args = SendArgs::new(W, Rank(dest), Tag(tag), size);
    args.sync = true;
    let r = e.submit_send(args).unwrap();
    e.handle_data_ready(r).unwrap();
    r
}

fn recv(e: &mut E, source: u32, tag: i64, capacity: u64) -> ReqId {
    let r = e
        .submit_recv(RecvArgs::new(W, Rank(source), Tag(tag), capacity))
        .unwrap();
    e.handle_data_ready(r).unwrap();
    r
}

fn completed(req: ReqId, len: u64, from_early: Option<ReqId>, kind: Kind) -> Event {
    Event::Completed {
        req,
        kind,
        len,
        from_early,
    }
}

#[test]
fn small_send_travels_inline_in_one_message() {
    let mut a = engine(0, 2);
    let s = send(&mut a, 1, 7, 3);
    let out = transmits(&mut a);
    assert_eq!(out.len(), 1);
    let env = env_of(&out[0]);
    assert_eq!(env.kind, EnvKind::Eager);
    assert_eq!((env.tag, env.size), (Tag(7), 3));
    assert!(matches!(out[0], Transmit::Envelope { inline: Some(r), dest: Rank(1), .. } if r == s));
    a.handle_sent(s).unwrap();
    assert_eq!(events(&mut a), [completed(s, 3, None, Kind::Send)]);
    assert_eq!(a.stats().sent_to(Rank(1)), 3);
}

#[test]
fn large_send_is_an_envelope_then_its_payload_on_a_data_tag() {
    let mut a = engine(0, 2);
    let s = send(&mut a, 1, 7, 1000);
    let out = transmits(&mut a);
    assert_eq!(out.len(), 2);
    let env = env_of(&out[0]);
    assert_eq!(env.kind, EnvKind::Data);
    assert_eq!(
        out[1],
        Transmit::Payload {
            req: s,
            dest: Rank(1),
            comm: W,
            tag: tags().data(env.msg),
            size: 1000
        }
    );
}

#[test]
fn posted_recv_matches_arriving_envelope_and_posts_its_payload_receive() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 7, 1000);
    let out = transmits(&mut a);
    let r = recv(&mut b, 0, 7, 1000);
    assert!(transmits(&mut b).is_empty());
    assert_eq!(
        b.handle_message(Rank(0), W, &wire(&out[0], &[])),
        Ok(Arrival::Nothing)
    );
    let msg = env_of(&out[0]).msg;
    assert_eq!(
        transmits(&mut b),
        [Transmit::Receive {
            req: r,
            source: Rank(0),
            comm: W,
            tag: tags().data(msg),
            size: 1000,
            early: false
        }]
    );
    b.handle_received(r, 1000).unwrap();
    assert_eq!(events(&mut b), [completed(r, 1000, None, Kind::Recv)]);
    assert_eq!(b.stats().received_from(Rank(0)), 1000);
}

#[test]
fn early_data_is_received_into_an_engine_buffer_then_handed_over() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 7, 1000);
    let out = transmits(&mut a);
    b.handle_message(Rank(0), W, &wire(&out[0], &[])).unwrap();
    // No receive yet: the payload receive is posted at once into an early buffer.
    let posted = transmits(&mut b);
    let Transmit::Receive {
        req: early,
        early: true,
        size: 1000,
        ..
    } = posted[0]
    else {
        panic!("{posted:?}");
    };
    b.handle_received(early, 1000).unwrap();
    assert!(events(&mut b).is_empty());
    assert_eq!(b.early_messages(), 1);
    let r = recv(&mut b, 0, 7, 4096);
    assert_eq!(
        events(&mut b),
        [completed(r, 1000, Some(early), Kind::Recv)]
    );
    assert!(b.request(early).is_none(), "the early request is freed");
}

#[test]
fn receive_posted_while_early_payload_is_in_flight_completes_when_it_lands() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 7, 1000);
    let out = transmits(&mut a);
    b.handle_message(Rank(0), W, &wire(&out[0], &[])).unwrap();
    let Transmit::Receive { req: early, .. } = transmits(&mut b)[0] else {
        panic!()
    };
    let r = recv(&mut b, 0, 7, 1000);
    assert!(events(&mut b).is_empty());
    b.handle_received(early, 1000).unwrap();
    assert_eq!(
        events(&mut b),
        [completed(r, 1000, Some(early), Kind::Recv)]
    );
}

#[test]
fn early_eager_payload_is_stashed_and_delivered_on_receive() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 7, 3);
    let out = transmits(&mut a);
    let bytes = wire(&out[0], b"abc");
    let Ok(Arrival::Stash { early, inline }) = b.handle_message(Rank(0), W, &bytes) else {
        panic!()
    };
    assert_eq!(inline, b"abc");
    let r = recv(&mut b, 0, 7, 8);
    assert_eq!(events(&mut b), [completed(r, 3, Some(early), Kind::Recv)]);
}

#[test]
fn sync_send_waits_for_the_receivers_ready_ack() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    let s = sync_send(&mut a, 1, 7, 100);
    let out = transmits(&mut a);
    assert_eq!(out.len(), 1, "only the envelope leaves: {out:?}");
    let env = env_of(&out[0]);
    assert_eq!(env.kind, EnvKind::SyncData);
    // The envelope arrives before the receive: nothing is received yet.
    b.handle_message(Rank(0), W, &wire(&out[0], &[])).unwrap();
    assert!(transmits(&mut b).is_empty());
    assert_eq!(
        b.early_messages(),
        0,
        "a synchronous send never makes early data"
    );
    let r = recv(&mut b, 0, 7, 100);
    let back = transmits(&mut b);
    assert_eq!(back.len(), 2);
    let ack = env_of(&back[0]);
    assert_eq!((ack.kind, ack.msg), (EnvKind::SyncReady, env.msg));
    assert!(
        matches!(back[1], Transmit::Receive { req, tag, .. } if req == r && tag == tags().sync(env.msg))
    );
    a.handle_message(Rank(1), W, &wire(&back[0], &[])).unwrap();
    assert_eq!(
        transmits(&mut a),
        [Transmit::Payload {
            req: s,
            dest: Rank(1),
            comm: W,
            tag: tags().sync(env.msg),
            size: 100
        }]
    );
}

#[test]
fn crossing_same_tag_sync_sends_do_not_collide() {
    // internals §12.6: two ranks issend to each other with the same tag at once.
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    let sa = sync_send(&mut a, 1, 5, 100);
    let sb = sync_send(&mut b, 0, 5, 100);
    let ra = recv(&mut a, 1, 5, 100);
    let rb = recv(&mut b, 0, 5, 100);
    let from_a = transmits(&mut a);
    let from_b = transmits(&mut b);
    b.handle_message(Rank(0), W, &wire(&from_a[0], &[]))
        .unwrap();
    a.handle_message(Rank(1), W, &wire(&from_b[0], &[]))
        .unwrap();
    // Each answers with its ack and posts its receive; each ack releases the right send.
    let acks_b = transmits(&mut b);
    let acks_a = transmits(&mut a);
    assert!(matches!(acks_b[1], Transmit::Receive { req, .. } if req == rb));
    assert!(matches!(acks_a[1], Transmit::Receive { req, .. } if req == ra));
    a.handle_message(Rank(1), W, &wire(&acks_b[0], &[]))
        .unwrap();
    b.handle_message(Rank(0), W, &wire(&acks_a[0], &[]))
        .unwrap();
    assert!(matches!(transmits(&mut a)[0], Transmit::Payload { req, .. } if req == sa));
    assert!(matches!(transmits(&mut b)[0], Transmit::Payload { req, .. } if req == sb));
}

#[test]
fn same_key_messages_of_every_kind_are_received_in_order() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 9, 2); // eager
    send(&mut a, 1, 9, 600); // envelope + payload
    sync_send(&mut a, 1, 9, 50); // sync
    let out = transmits(&mut a);
    let envs: Vec<_> = out
        .iter()
        .filter(|t| matches!(t, Transmit::Envelope { .. }))
        .collect();
    assert_eq!(envs.len(), 3);
    for t in &envs {
        b.handle_message(Rank(0), W, &wire(t, b"hi")).unwrap();
    }
    let _early = transmits(&mut b);
    let r1 = recv(&mut b, 0, 9, 1000);
    let r2 = recv(&mut b, 0, 9, 1000);
    let r3 = recv(&mut b, 0, 9, 1000);
    let ev = events(&mut b);
    assert!(matches!(ev[0], Event::Completed { req, len: 2, .. } if req == r1));
    // r2 waits for its early payload; r3 answers the sync envelope.
    let out = transmits(&mut b);
    assert!(matches!(out[1], Transmit::Receive { req, size: 50, .. } if req == r3));
    assert!(
        b.request(r2)
            .is_some_and(|r| r.state == State::Transferring)
    );
}

#[test]
fn truncated_eager_message_fails_the_receive() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 1, 10);
    let r = recv(&mut b, 0, 1, 4);
    let out = transmits(&mut a);
    assert_eq!(
        b.handle_message(Rank(0), W, &wire(&out[0], &[0; 10])),
        Ok(Arrival::Nothing)
    );
    assert_eq!(
        events(&mut b),
        [Event::Failed {
            req: r,
            kind: Kind::Recv,
            error: RequestError::Truncated {
                capacity: 4,
                size: 10
            }
        }]
    );
}

#[test]
fn truncated_data_message_is_drained_into_a_discard_buffer() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 1, 1000);
    let r = recv(&mut b, 0, 1, 10);
    let out = transmits(&mut a);
    b.handle_message(Rank(0), W, &wire(&out[0], &[])).unwrap();
    let posted = transmits(&mut b);
    let Transmit::Receive {
        req: drain,
        early: true,
        size: 1000,
        ..
    } = posted[0]
    else {
        panic!("{posted:?}")
    };
    assert!(matches!(events(&mut b)[0], Event::Failed { req, .. } if req == r));
    b.handle_received(drain, 1000).unwrap();
    assert_eq!(events(&mut b), [Event::Discard { early: drain }]);
    assert!(b.is_idle());
}

#[test]
fn payload_of_the_wrong_length_fails_the_receive() {
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    send(&mut a, 1, 1, 1000);
    let r = recv(&mut b, 0, 1, 2000);
    let out = transmits(&mut a);
    b.handle_message(Rank(0), W, &wire(&out[0], &[])).unwrap();
    transmits(&mut b);
    b.handle_received(r, 999).unwrap();
    assert_eq!(
        events(&mut b),
        [Event::Failed {
            req: r,
            kind: Kind::Recv,
            error: RequestError::LengthMismatch {
                expected: 1000,
                got: 999
            }
        }]
    );
}

#[test]
fn malformed_or_unexpected_messages_are_peer_errors_that_change_nothing() {
    let mut b = engine(1, 2);
    let r = recv(&mut b, 0, 1, 10);
    let garbage = [9u8; 5];
    assert!(matches!(
        b.handle_message(Rank(0), W, &garbage),
        Err(MessageError::Peer(PeerError::Decode(_)))
    ));
    let env = Envelope {
        kind: EnvKind::Eager,
        comm: W,
        tag: Tag(1),
        size: 0,
        msg: MsgId(3),
    };
    assert_eq!(
        b.handle_message(Rank(5), W, &env.encode()),
        Err(MessageError::Peer(PeerError::SourceOutOfRange {
            source: Rank(5),
            nranks: 2
        }))
    );
    assert_eq!(
        b.handle_message(Rank(0), CommId(1), &env.encode()),
        Err(MessageError::Peer(PeerError::CommMismatch {
            envelope: W,
            arrived: CommId(1)
        }))
    );
    let ready = Envelope {
        kind: EnvKind::SyncReady,
        ..env
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &ready.encode()),
        Err(MessageError::Peer(PeerError::UnexpectedReady {
            source: Rank(0),
            msg: MsgId(3)
        }))
    );
    assert!(transmits(&mut b).is_empty() && events(&mut b).is_empty());
    assert_eq!(b.request(r).unwrap().state, State::AwaitingEnvelope);
    // The good message still matches afterwards.
    assert!(
        matches!(b.handle_message(Rank(0), W, &env.encode()), Ok(Arrival::Deliver { req, .. }) if req == r)
    );
}

#[test]
fn submissions_to_ranks_outside_the_world_are_refused() {
    let mut a = engine(0, 2);
    assert_eq!(
        a.submit_send(SendArgs::new(W, Rank(2), Tag(0), 1)),
        Err(SubmitError::RankOutOfRange {
            rank: Rank(2),
            nranks: 2
        })
    );
    assert_eq!(
        a.submit_recv(RecvArgs::new(W, Rank(9), Tag(0), 1)),
        Err(SubmitError::RankOutOfRange {
            rank: Rank(9),
            nranks: 2
        })
    );
    assert!(a.is_idle());
}

#[test]
fn a_full_slab_refuses_submissions_and_loses_nothing() {
    let mut a = engine(0, 2);
    let ids: Vec<_> = (0..16)
        .map(|i| a.submit_send(SendArgs::new(W, Rank(1), Tag(i), 1)).unwrap())
        .collect();
    assert_eq!(
        a.submit_send(SendArgs::new(W, Rank(1), Tag(99), 1)),
        Err(SubmitError::Full(Table::Requests))
    );
    assert_eq!(a.pending(), 16);
    for id in ids {
        assert!(a.request(id).is_some());
    }
    // A full slab is a wait; a peer outside the world is a failure.
    assert!(SubmitError::Full(Table::Requests).waits());
    assert!(
        !a.submit_send(SendArgs::new(W, Rank(9), Tag(1), 1))
            .unwrap_err()
            .waits()
    );
}

#[test]
fn an_early_message_that_does_not_fit_is_refused_and_can_be_retried() {
    let mut b = engine(1, 2);
    let env = Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(1),
        size: 1000,
        msg: MsgId(0),
    };
    for i in 0..16 {
        let e = Envelope {
            msg: MsgId(i),
            ..env
        };
        b.handle_message(Rank(0), W, &e.encode()).unwrap();
        transmits(&mut b);
    }
    let last = Envelope {
        msg: MsgId(16),
        ..env
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &last.encode()),
        Err(MessageError::Full(Table::Requests))
    );
    assert_eq!(b.leftovers().count(), 16);
}

#[test]
fn a_slab_full_of_posted_receives_still_accepts_their_envelopes() {
    let mut b = engine(1, 2);
    let recvs: Vec<_> = (0..16).map(|t| recv(&mut b, 0, t, 1000)).collect();
    let data = Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(3),
        size: 1000,
        msg: MsgId(0),
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &data.encode()),
        Ok(Arrival::Nothing)
    );
    assert!(
        matches!(transmits(&mut b)[..], [Transmit::Receive { req, early: false, .. }] if req == recvs[3])
    );
    let sync = Envelope {
        kind: EnvKind::SyncData,
        tag: Tag(4),
        size: 10,
        msg: MsgId(1),
        ..data
    };
    b.handle_message(Rank(0), W, &sync.encode()).unwrap();
    assert_eq!(transmits(&mut b).len(), 2, "ack and receive");
    // An envelope no receive waits for needs an early buffer: refused, nothing changed.
    let early = Envelope {
        tag: Tag(99),
        msg: MsgId(2),
        ..data
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &early.encode()),
        Err(MessageError::Full(Table::Requests))
    );
    // A too-small receive needs a discard buffer for a separate payload: refused too,
    // for want of a slot of the slab (a discard buffer is outside the budget: it waits
    // for any free slot, `room_for(Table::Discards)`).
    let big = Envelope {
        tag: Tag(5),
        size: 5000,
        msg: MsgId(3),
        ..data
    };
    assert_eq!(
        b.handle_message(Rank(0), W, &big.encode()),
        Err(MessageError::Full(Table::Discards))
    );
    assert!(!b.room_for(Table::Discards));
    assert_eq!(b.request(recvs[5]).unwrap().state, State::AwaitingEnvelope);
}

#[test]
fn undrained_outputs_refuse_new_input_before_changing_anything() {
    let mut b = engine(1, 2);
    let env = Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(1),
        size: 1000,
        msg: MsgId(0),
    };
    let mut accepted = 0;
    let err = loop {
        let e = Envelope {
            msg: MsgId(accepted),
            ..env
        };
        match b.handle_message(Rank(0), W, &e.encode()) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, MessageError::Full(Table::Transmits));
    assert_eq!(transmits(&mut b).len(), accepted as usize);
}

#[test]
fn undrained_events_refuse_completions_before_changing_anything() {
    let mut a = engine(0, 2);
    a.config.max_inflight_sends = 0;
    let sends: Vec<_> = (0..OUTPUTS as i64).map(|t| send(&mut a, 1, t, 3)).collect();
    transmits(&mut a);
    let mut done = 0;
    let err = loop {
        match a.handle_sent(sends[done]) {
            Ok(()) => done += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, UsageError::Full(Table::Events));
    let refused = sends[done];
    assert_eq!(
        a.request(refused).unwrap().state,
        State::Transferring,
        "unchanged"
    );
    assert_eq!(events(&mut a).len(), done);
    a.handle_sent(refused).unwrap();
    assert_eq!(events(&mut a), [completed(refused, 3, None, Kind::Send)]);
}

fn express(e: &mut E, dest: u32, tag: i64, size: u64) -> Option<Express> {
    e.express_send(SendArgs::new(W, Rank(dest), Tag(tag), size))
}

#[test]
fn an_express_send_is_the_eager_envelope_a_request_would_have_sent() {
    let (mut a, mut twin) = (engine(0, 2), engine(0, 2));
    let s = send(&mut a, 1, 7, 3);
    let out = transmits(&mut a);
    let Transmit::Envelope { header, tag, .. } = out[0] else {
        panic!("not an envelope: {out:?}")
    };
    assert_eq!(
        express(&mut twin, 1, 7, 3),
        Some(Express {
            dest: Rank(1),
            comm: W,
            tag,
            header: Some(header)
        })
    );
    // No request, nothing to report, nothing else to send; counted as it left.
    assert!(transmits(&mut twin).is_empty());
    assert!(events(&mut twin).is_empty());
    assert_eq!(twin.stats().sent_to(Rank(1)), 3);
    // The message ids go on from the same sequence.
    a.handle_sent(s).unwrap();
    let next = send(&mut twin, 1, 7, 3);
    let again = transmits(&mut twin);
    assert_eq!(env_of(&again[0]).msg, MsgId(1));
    assert!(matches!(again[0], Transmit::Envelope { inline: Some(r), .. } if r == next));
}

#[test]
fn an_express_send_is_refused_behind_anything_waiting_to_leave_and_when_it_needs_a_request() {
    let mut a = engine(0, 2);
    // A ready send not yet out: an express send of its key would overtake it.
    let ready = send(&mut a, 1, 7, 3);
    assert_eq!(express(&mut a, 1, 7, 3), None);
    let out = transmits(&mut a);
    assert_eq!(out.len(), 1);
    assert!(express(&mut a, 1, 7, 3).is_some());
    a.handle_sent(ready).unwrap();
    // A payload queued behind its envelope.
    let large = send(&mut a, 1, 8, 1 << 20);
    assert!(matches!(a.poll_transmit(), Some(Transmit::Envelope { .. })));
    assert_eq!(express(&mut a, 1, 8, 3), None);
    assert!(matches!(a.poll_transmit(), Some(Transmit::Payload { req, .. }) if req == large));
    assert!(express(&mut a, 1, 8, 3).is_some());
    // Longer than the eager limit, synchronous, outside the world: a request's.
    let limit = u64::from(a.config.eager_limit);
    assert_eq!(express(&mut a, 1, 9, limit + 1), None);
    assert!(express(&mut a, 1, 9, limit).is_some());
    let mut sync = SendArgs::new(W, Rank(1), Tag(9), 3);
    sync.sync = true;
    assert_eq!(a.express_send(sync), None);
    assert_eq!(express(&mut a, 2, 9, 3), None);
    // The in-flight cap reached (the large send's payload is in flight).
    a.config.max_inflight_sends = 1;
    assert_eq!(express(&mut a, 1, 9, 3), None);
    a.handle_sent(large).unwrap();
    assert!(express(&mut a, 1, 9, 3).is_some());
    let _ = events(&mut a);
}

#[test]
fn express_and_requested_sends_of_one_key_are_received_in_send_order() {
    // Sizes 1 to 4 on one key, every other one an express send; the receives expect
    // them in that order (a receive of the wrong length fails).
    let (mut a, mut b) = (engine(0, 2), engine(1, 2));
    let mut wires = Vec::new();
    for size in 1..=4u64 {
        let payload = std::vec![size as u8; size as usize];
        if size % 2 == 0 {
            let Some(Express {
                header: Some(header),
                ..
            }) = express(&mut a, 1, 5, size)
            else {
                panic!("refused")
            };
            wires.push([&header[..], &payload].concat());
        } else {
            let s = send(&mut a, 1, 5, size);
            let out = transmits(&mut a);
            wires.push(wire(&out[0], &payload));
            a.handle_sent(s).unwrap();
        }
    }
    let recvs: Vec<ReqId> = (1..=4).map(|n| recv(&mut b, 0, 5, n)).collect();
    for w in &wires {
        b.handle_message(Rank(0), W, w).unwrap();
    }
    let done = events(&mut b);
    assert_eq!(done.len(), 4, "{done:?}");
    for (n, r) in recvs.iter().enumerate() {
        assert!(
            done.contains(&completed(*r, n as u64 + 1, None, Kind::Recv)),
            "{done:?}"
        );
    }
    assert_eq!(b.stats().received_from(Rank(0)), 10);
}

#[test]
fn sends_leave_in_priority_order_fifo_among_equals_within_the_cap() {
    let mut a = engine(0, 2);
    a.config.max_inflight_sends = 1;
    let mk = |a: &mut E, tag: i64, prio: i32| {
        let mut args = SendArgs::new(W, Rank(1), Tag(tag), 3);
        args.priority = Priority(prio);
        let r = a.submit_send(args).unwrap();
        a.handle_data_ready(r).unwrap();
        r
    };
    let low = mk(&mut a, 0, 0);
    let high1 = mk(&mut a, 1, 5);
    let high2 = mk(&mut a, 2, 5);
    let mut order = Vec::new();
    for _ in 0..3 {
        let out = transmits(&mut a);
        assert_eq!(out.len(), 1, "one send in flight at a time");
        let Transmit::Envelope {
            inline: Some(r), ..
        } = out[0]
        else {
            panic!()
        };
        order.push(r);
        a.handle_sent(r).unwrap();
    }
    assert_eq!(order, [high1, high2, low]);
}

#[test]
fn with_priorities_off_sends_keep_submission_order() {
    let mut a = engine(0, 2);
    a.config.priorities = false;
    let mut ids = Vec::new();
    for (tag, prio) in [(0, 0), (1, 9), (2, -3)] {
        let mut args = SendArgs::new(W, Rank(1), Tag(tag), 3);
        args.priority = Priority(prio);
        let r = a.submit_send(args).unwrap();
        a.handle_data_ready(r).unwrap();
        ids.push(r);
    }
    let order: Vec<_> = transmits(&mut a)
        .into_iter()
        .map(|t| match t {
            Transmit::Envelope {
                inline: Some(r), ..
            } => r,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(order, ids);
}

#[test]
fn leftovers_report_orphans_pending_and_unretired_requests() {
    let mut b = engine(1, 2);
    let env = Envelope {
        kind: EnvKind::Eager,
        comm: W,
        tag: Tag(4),
        size: 2,
        msg: MsgId(0),
    };
    let mut bytes = env.encode().to_vec();
    bytes.extend_from_slice(b"xy");
    b.handle_message(Rank(0), W, &bytes).unwrap();
    let pending = recv(&mut b, 0, 8, 10);
    let done = recv(&mut b, 0, 4, 10);
    events(&mut b);
    let left: Vec<_> = b.leftovers().collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().any(|l| matches!(l, Leftover::Pending { req, state: State::AwaitingEnvelope, .. } if *req == pending)));
    assert!(
        left.iter()
            .any(|l| matches!(l, Leftover::NotRetired { req, .. } if *req == done))
    );
    b.retire(done).unwrap();
    let orphan = Envelope {
        tag: Tag(77),
        msg: MsgId(1),
        ..env
    };
    let mut bytes = orphan.encode().to_vec();
    bytes.extend_from_slice(b"zz");
    b.handle_message(Rank(0), W, &bytes).unwrap();
    let left: Vec<_> = b.leftovers().collect();
    assert!(left.iter().any(|l| matches!(l, Leftover::Orphan(o) if o.tag == Tag(77) && o.size == 2 && o.source == Rank(0))));
}

#[test]
fn retire_takes_only_completed_non_detached_requests() {
    let mut a = engine(0, 2);
    let s = send(&mut a, 1, 0, 3);
    assert_eq!(a.retire(s), Err(UsageError::NotRetirable(s)));
    transmits(&mut a);
    a.handle_sent(s).unwrap();
    assert_eq!(events(&mut a), [completed(s, 3, None, Kind::Send)]);
    assert!(a.retire(s).is_ok());
    assert_eq!(a.retire(s), Err(UsageError::UnknownRequest(s)));
    let mut args = SendArgs::new(W, Rank(1), Tag(0), 3);
    args.detached = true;
    let d = a.submit_send(args).unwrap();
    a.handle_data_ready(d).unwrap();
    transmits(&mut a);
    a.handle_sent(d).unwrap();
    assert!(
        a.request(d).is_none(),
        "a detached request is forgotten when done"
    );
    assert_eq!(events(&mut a), [completed(d, 3, None, Kind::Send)]);
    assert!(a.is_idle());
}

#[test]
fn data_ready_twice_is_an_illegal_step() {
    let mut a = engine(0, 2);
    let s = send(&mut a, 1, 0, 3);
    assert!(matches!(
        a.handle_data_ready(s),
        Err(UsageError::IllegalStep(_))
    ));
    assert!(matches!(
        a.handle_received(s, 3),
        Err(UsageError::IllegalStep(_))
    ));
}

#[test]
fn receives_beyond_the_match_keys_wait_in_order_until_an_arrival_frees_room() {
    // A matcher of 4 keys: the 5th and 6th receives (both tag 9) are deferred, `Ready`,
    // and go in, in order, once a message frees a key.
    let mut b: Engine<16, 4, 4> = Engine::new(Config::new(Rank(1), 2, tags()));
    let first: Vec<_> = (0..4)
        .map(|t| {
            let r = b.submit_recv(RecvArgs::new(W, Rank(0), Tag(t), 8)).unwrap();
            b.handle_data_ready(r).unwrap();
            r
        })
        .collect();
    let late: Vec<_> = (0..2)
        .map(|_| {
            let r = b.submit_recv(RecvArgs::new(W, Rank(0), Tag(9), 8)).unwrap();
            b.handle_data_ready(r).unwrap();
            r
        })
        .collect();
    assert!(
        late.iter()
            .all(|r| b.request(*r).unwrap().state == State::Ready)
    );
    assert!(
        b.poll_transmit().is_none(),
        "no room yet: they stay deferred"
    );
    // A message for tag 0 completes the first receive and frees its key.
    let env = Envelope {
        kind: EnvKind::Eager,
        comm: W,
        tag: Tag(0),
        size: 1,
        msg: MsgId(0),
    };
    let mut bytes = env.encode().to_vec();
    bytes.push(7);
    assert!(
        matches!(b.handle_message(Rank(0), W, &bytes), Ok(Arrival::Deliver { req, .. }) if req == first[0])
    );
    assert!(b.poll_transmit().is_none());
    // The first deferred receive took the freed key; the second waits behind it (same key).
    assert_eq!(b.request(late[0]).unwrap().state, State::AwaitingEnvelope);
    assert_eq!(b.request(late[1]).unwrap().state, State::AwaitingEnvelope);
    // Two messages for tag 9 complete them in order.
    for (i, r) in late.iter().enumerate() {
        let e = Envelope {
            tag: Tag(9),
            msg: MsgId(1 + i as u32),
            ..env
        };
        let mut bytes = e.encode().to_vec();
        bytes.push(i as u8);
        assert!(
            matches!(b.handle_message(Rank(0), W, &bytes), Ok(Arrival::Deliver { req, .. }) if req == *r)
        );
    }
}

mod fast;
mod limits;

#[test]
fn room_for_says_when_a_refused_arrival_would_be_refused_again() {
    let mut config = Config::new(Rank(1), 2, tags());
    config.key_limit = 2;
    let mut b = E::new(config);
    let env = |tag, msg| Envelope {
        kind: EnvKind::Data,
        comm: W,
        tag: Tag(tag),
        size: 1000,
        msg: MsgId(msg),
    };
    assert!(b.room_for(Table::MatchKeys) && b.room_for(Table::Requests));
    // Two keys of early data use the key limit: a third key is refused, and would be
    // again until one of them is received.
    for t in 0..2 {
        b.handle_message(Rank(0), W, &env(t, t as u32).encode())
            .unwrap();
        transmits(&mut b);
    }
    assert_eq!(
        b.handle_message(Rank(0), W, &env(2, 2).encode()),
        Err(MessageError::Full(Table::MatchKeys))
    );
    assert!(!b.room_for(Table::MatchKeys));
    assert!(b.room_for(Table::Requests), "the slab has room");
    recv(&mut b, 0, 0, 1000);
    transmits(&mut b);
    assert!(b.room_for(Table::MatchKeys));
    assert_eq!(
        b.handle_message(Rank(0), W, &env(2, 2).encode()),
        Ok(Arrival::Nothing)
    );
    assert!(!b.room_for(Table::MatchKeys));
    // Tables it cannot tell about say they may have room.
    assert!(b.room_for(Table::EarlyData));
}

#[test]
fn a_message_refused_for_room_to_wait_needs_only_its_receive() {
    let mut config = Config::new(Rank(1), 2, tags());
    config.key_limit = 2;
    let mut b = E::new(config);
    let env = |kind, tag, msg| Envelope {
        kind,
        comm: W,
        tag: Tag(tag),
        size: 0,
        msg: MsgId(msg),
    };
    // Two keys of early data use the key limit: an eager message of a third is refused.
    for t in 0..2 {
        b.handle_message(Rank(0), W, &env(EnvKind::Eager, t, t as u32).encode())
            .unwrap();
    }
    let third = env(EnvKind::Eager, 2, 2).encode();
    assert_eq!(
        b.handle_message(Rank(0), W, &third),
        Err(MessageError::Full(Table::MatchKeys))
    );
    let order = b.refusal_order(Rank(0), W, &third).unwrap();
    assert!(order.receive_lets_in);
    assert!(order.waits_for_its_receive(Table::MatchKeys));
    assert!(order.waits_for_its_receive(Table::EarlyData));
    assert!(order.waits_for_its_receive(Table::Requests));
    assert!(
        !order.waits_for_its_receive(Table::Transmits),
        "an output queue frees with progress alone"
    );
    // Every key is still taken, but a receive of its key lets it in: it is matched.
    let r = recv(&mut b, 0, 2, 8);
    assert!(!b.room_for(Table::MatchKeys));
    assert!(matches!(
        b.handle_message(Rank(0), W, &third),
        Ok(Arrival::Deliver { req, .. }) if req == r
    ));
    // A data envelope (its payload tag may hold back another key's), a synchronous one's
    // answer, and a message on a fast tag (its receive takes it once marked) are not.
    let data = b.refusal_order(Rank(0), W, &env(EnvKind::Data, 3, 3).encode());
    assert!(!data.unwrap().receive_lets_in);
    let ready = b.refusal_order(Rank(0), W, &env(EnvKind::SyncReady, 3, 4).encode());
    assert!(!ready.unwrap().receive_lets_in);
    let sync = b.refusal_order(Rank(0), W, &env(EnvKind::SyncData, 3, 5).encode());
    assert!(sync.unwrap().receive_lets_in);
    let mut config = Config::new(Rank(1), 2, tags().with_fast());
    config.fast_limit = 64;
    let f = E::new(config);
    let fast = f.refusal_order(Rank(0), W, &env(EnvKind::Eager, 3, 6).encode());
    assert!(!fast.unwrap().receive_lets_in);
}

#[test]
fn room_for_requests_follows_the_early_class_of_the_slab() {
    let mut b = engine(1, 2);
    for i in 0..16 {
        let e = Envelope {
            kind: EnvKind::Data,
            comm: W,
            tag: Tag(1),
            size: 1000,
            msg: MsgId(i),
        };
        assert!(b.room_for(Table::Requests));
        b.handle_message(Rank(0), W, &e.encode()).unwrap();
        transmits(&mut b);
    }
    assert!(!b.room_for(Table::Requests));
}
