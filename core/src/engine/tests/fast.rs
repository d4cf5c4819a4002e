//! The fast path (protocol §19): payloads alone on the fast tag of their user tag,
//! markers, and envelope messages handed to marked receives in posting order.

use super::*;
use crate::tags::TagClass;

/// An engine with a fast class and a fast limit of 64 bytes (eager limit 256).
fn fast_engine(rank: u32) -> E {
    let mut config = Config::new(Rank(rank), 2, tags().with_fast());
    config.fast_limit = 64;
    let mut e = E::new(config);
    e.stats_mut().enable();
    e
}

fn fast_tag(e: &E, tag: i64) -> PhysTag {
    e.config().tags.fast(Tag(tag)).unwrap()
}

/// The receive the engine posted for `req`, as (tag, size).
fn posted(out: &[Transmit], req: ReqId) -> (PhysTag, u64) {
    out.iter()
        .find_map(|t| match *t {
            Transmit::Receive {
                req: r, tag, size, ..
            } if r == req => Some((tag, size)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no receive for {req:?} in {out:?}"))
}

#[test]
fn a_small_send_is_its_payload_alone_on_the_fast_tag_and_lands_in_the_receive() {
    let (mut a, mut b) = (fast_engine(0), fast_engine(1));
    let s = send(&mut a, 1, 5, 8);
    let f = fast_tag(&a, 5);
    assert_eq!(
        transmits(&mut a),
        [Transmit::Payload {
            req: s,
            dest: Rank(1),
            comm: W,
            tag: f,
            size: 8
        }]
    );
    a.handle_sent(s).unwrap();
    assert_eq!(events(&mut a), [completed(s, 8, None, Kind::Send)]);
    // The receive is posted on the same tag with room for any fast message.
    let r = recv(&mut b, 0, 5, 8);
    assert_eq!(posted(&transmits(&mut b), r), (f, 64));
    assert_eq!(b.request(r).unwrap().state, State::AwaitingFast);
    b.handle_received(r, 8).unwrap();
    assert_eq!(events(&mut b), [completed(r, 8, None, Kind::Recv)]);
    assert!(transmits(&mut b).is_empty());
    assert_eq!(b.early_messages(), 0);
    assert_eq!(b.stats().received_from(Rank(0)), 8);
}

#[test]
fn tags_without_a_fast_tag_and_engines_without_a_fast_path_keep_the_envelope_path() {
    let mut a = fast_engine(0);
    send(&mut a, 1, -5, 8);
    assert!(matches!(transmits(&mut a)[..], [Transmit::Envelope { .. }]));
    let mut plain = engine(0, 2);
    send(&mut plain, 1, 5, 8);
    assert!(matches!(
        transmits(&mut plain)[..],
        [Transmit::Envelope { .. }]
    ));
    let mut b = fast_engine(1);
    let r = recv(&mut b, 0, -5, 8);
    assert!(transmits(&mut b).is_empty());
    assert_eq!(b.request(r).unwrap().state, State::AwaitingEnvelope);
}

#[test]
fn longer_and_synchronous_sends_leave_a_marker_then_their_envelope() {
    let mut a = fast_engine(0);
    let f = fast_tag(&a, 5);
    send(&mut a, 1, 5, 100);
    let out = transmits(&mut a);
    assert_eq!(
        out[0],
        Transmit::Marker {
            dest: Rank(1),
            comm: W,
            tag: f
        }
    );
    assert_eq!(env_of(&out[1]).kind, EnvKind::Eager);
    assert_eq!(out.len(), 2);
    sync_send(&mut a, 1, 5, 8);
    let out = transmits(&mut a);
    assert!(matches!(out[0], Transmit::Marker { tag, .. } if tag == f));
    assert_eq!(env_of(&out[1]).kind, EnvKind::SyncData);
    send(&mut a, 1, 5, 1000);
    let out = transmits(&mut a);
    assert!(matches!(out[0], Transmit::Marker { .. }));
    assert_eq!(env_of(&out[1]).kind, EnvKind::Data);
    assert!(matches!(out[2], Transmit::Payload { size: 1000, .. }));
}

#[test]
fn a_marker_gives_the_receive_the_envelope_message_that_arrived_before_it() {
    let (mut a, mut b) = (fast_engine(0), fast_engine(1));
    let s = send(&mut a, 1, 5, 100);
    let out = transmits(&mut a);
    let r = recv(&mut b, 0, 5, 128);
    transmits(&mut b);
    // The envelope overtakes the marker: it waits as early data, not taken by the
    // receive that has no marker yet.
    let bytes = wire(&out[1], &[7; 100]);
    let arrival = b.handle_message(Rank(0), W, &bytes).unwrap();
    let Arrival::Stash { early, .. } = arrival else {
        panic!("{arrival:?}")
    };
    assert!(events(&mut b).is_empty());
    b.handle_received(r, 0).unwrap();
    assert_eq!(events(&mut b), [completed(r, 100, Some(early), Kind::Recv)]);
    a.handle_sent(s).unwrap();
}

#[test]
fn an_envelope_message_after_the_marker_goes_straight_to_the_receive() {
    let (mut a, mut b) = (fast_engine(0), fast_engine(1));
    send(&mut a, 1, 5, 100);
    let out = transmits(&mut a);
    let r = recv(&mut b, 0, 5, 128);
    transmits(&mut b);
    b.handle_received(r, 0).unwrap();
    assert_eq!(b.request(r).unwrap().state, State::AwaitingEnvelope);
    let bytes = wire(&out[1], &[7; 100]);
    let arrival = b.handle_message(Rank(0), W, &bytes).unwrap();
    assert!(matches!(arrival, Arrival::Deliver { req, .. } if req == r));
    assert_eq!(events(&mut b), [completed(r, 100, None, Kind::Recv)]);
}

#[test]
fn a_later_receives_marker_waits_until_the_earlier_receive_is_known() {
    // Rank 0 sends 8 bytes (fast), then 100 (marker + eager envelope) on one tag. Rank
    // 1's transport reports the second receive's marker before the first receive's
    // payload: the envelope must still go to the second receive, and only once the
    // first is known to be a fast one.
    let (mut a, mut b) = (fast_engine(0), fast_engine(1));
    send(&mut a, 1, 5, 8);
    send(&mut a, 1, 5, 100);
    let out = transmits(&mut a);
    assert_eq!(out.len(), 3);
    let r1 = recv(&mut b, 0, 5, 128);
    let r2 = recv(&mut b, 0, 5, 128);
    transmits(&mut b);
    b.handle_received(r2, 0).unwrap();
    let bytes = wire(&out[2], &[7; 100]);
    let arrival = b.handle_message(Rank(0), W, &bytes).unwrap();
    let Arrival::Stash { early, .. } = arrival else {
        panic!("{arrival:?}")
    };
    assert!(events(&mut b).is_empty());
    b.handle_received(r1, 8).unwrap();
    assert_eq!(
        core::iter::from_fn(|| {
            b.poll_transmit();
            b.poll_event()
        })
        .collect::<Vec<_>>(),
        [
            completed(r1, 8, None, Kind::Recv),
            completed(r2, 100, Some(early), Kind::Recv)
        ]
    );
    assert_eq!(b.pending(), 0);
}

#[test]
fn a_fast_message_longer_than_the_receive_fails_it_whole() {
    let mut b = fast_engine(1);
    let r = recv(&mut b, 0, 5, 4);
    assert_eq!(posted(&transmits(&mut b), r).1, 64);
    b.handle_received(r, 8).unwrap();
    assert_eq!(
        events(&mut b),
        [Event::Failed {
            req: r,
            kind: Kind::Recv,
            error: RequestError::Truncated {
                capacity: 4,
                size: 8
            }
        }]
    );
    // The next message of the key reaches the next receive.
    let r2 = recv(&mut b, 0, 5, 4);
    transmits(&mut b);
    b.handle_received(r2, 3).unwrap();
    assert_eq!(events(&mut b), [completed(r2, 3, None, Kind::Recv)]);
}

#[test]
fn a_synchronous_message_is_answered_once_its_receive_is_marked() {
    let (mut a, mut b) = (fast_engine(0), fast_engine(1));
    let s = sync_send(&mut a, 1, 5, 8);
    let out = transmits(&mut a);
    let r = recv(&mut b, 0, 5, 8);
    transmits(&mut b);
    // The synchronous envelope comes first: nothing is answered before the marker.
    assert_eq!(
        b.handle_message(Rank(0), W, &wire(&out[1], &[])).unwrap(),
        Arrival::Nothing
    );
    assert!(transmits(&mut b).is_empty());
    b.handle_received(r, 0).unwrap();
    let back = transmits(&mut b);
    assert_eq!(env_of(&back[0]).kind, EnvKind::SyncReady);
    let (tag, size) = posted(&back, r);
    assert_eq!(
        (b.config().tags.classify(tag), size),
        (Some(TagClass::Sync), 8)
    );
    a.handle_message(Rank(1), W, &wire(&back[0], &[])).unwrap();
    assert!(matches!(transmits(&mut a)[..], [Transmit::Payload { req, .. }] if req == s));
}

#[test]
fn receives_of_more_fast_keys_than_the_key_limit_wait_in_order() {
    let mut config = Config::new(Rank(1), 2, tags().with_fast());
    config.fast_limit = 64;
    config.key_limit = 1;
    let mut b = E::new(config);
    let r1 = recv(&mut b, 0, 5, 8);
    let r2 = recv(&mut b, 0, 6, 8);
    let out = transmits(&mut b);
    assert_eq!(out.len(), 1);
    posted(&out, r1);
    assert_eq!(b.request(r2).unwrap().state, State::Ready);
    b.handle_received(r1, 8).unwrap();
    events(&mut b);
    // Room freed: the waiting receive is posted on its own fast tag.
    let out = transmits(&mut b);
    assert_eq!(posted(&out, r2).0, b.config().tags.fast(Tag(6)).unwrap());
}

#[test]
fn an_express_send_of_a_fast_key_is_its_payload_alone_and_an_empty_one_is_refused() {
    let mut a = fast_engine(0);
    let f = fast_tag(&a, 5);
    assert_eq!(
        a.express_send(SendArgs::new(W, Rank(1), Tag(5), 8)),
        Some(Express {
            dest: Rank(1),
            comm: W,
            tag: f,
            header: None
        })
    );
    assert_eq!(a.stats().sent_to(Rank(1)), 8);
    // An empty message, or one above the fast limit, leaves a marker then its envelope:
    // a request's.
    assert_eq!(a.express_send(SendArgs::new(W, Rank(1), Tag(5), 0)), None);
    assert_eq!(a.express_send(SendArgs::new(W, Rank(1), Tag(5), 65)), None);
    assert!(transmits(&mut a).is_empty());
}
