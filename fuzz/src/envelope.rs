//! The `envelope` target: the decoder is total and exact, and an engine fed the same bytes
//! as a message from a peer answers with a value.
//!
//! The input is the raw message. Checks:
//! 1. [`decode`] returns (it never panics), and whatever it accepts re-encodes to exactly
//!    the same bytes, with [`Envelope::wire_len`] equal to the message length;
//! 2. an [`Engine`] with receives posted and a synchronous send waiting for its
//!    acknowledgement, handed the bytes by [`Engine::handle_message`] (from a source and on
//!    a communicator chosen by the length, sometimes out of range), returns `Ok` or a typed
//!    error, and leaves no inconsistency behind: an inline payload it hands over fits the
//!    receive it names, and draining its outputs works.

use starling_core::engine::{Arrival, Config, Engine, MessageError, RecvArgs, SendArgs};
use starling_core::envelope::{Envelope, decode};
use starling_core::tags::TagSpace;
use starling_core::{CommId, Rank, Tag};

type SmallEngine = Engine<8, 4, 4>;

/// Checks one message; panics on a violation.
pub fn run(data: &[u8]) {
    check_decode(data);
    check_engine(data);
}

fn check_decode(data: &[u8]) {
    let Ok(d) = decode(data) else {
        return;
    };
    let env: Envelope = d.envelope;
    assert_eq!(env.wire_len(), data.len(), "wire_len of {env:?}");
    let mut out = vec![0u8; data.len()];
    let n = env.encode_with_inline(d.inline, &mut out);
    assert_eq!(n, Ok(data.len()), "re-encoding {env:?}");
    assert_eq!(&out[..], data, "re-encoding {env:?} changed the bytes");
    assert_eq!(
        &env.encode()[..],
        &data[..starling_core::envelope::HEADER_LEN]
    );
}

fn check_engine(data: &[u8]) {
    let tags = TagSpace::new(32767).expect("legal bound");
    let mut e = SmallEngine::new(Config::new(Rank(0), 2, tags));
    // A synchronous send to rank 1 (message 0) waits for its acknowledgement.
    let send = e
        .submit_send(SendArgs {
            sync: true,
            ..SendArgs::new(CommId::WORLD, Rank(1), Tag(0), 10)
        })
        .expect("room");
    e.handle_data_ready(send).expect("ready");
    drain(&mut e);
    // Receives from rank 1 on tags 0 and 1: a small and a large buffer.
    let mut capacities = Vec::new();
    for (tag, capacity) in [(0, 4), (1, 300)] {
        let r = e
            .submit_recv(RecvArgs::new(CommId::WORLD, Rank(1), Tag(tag), capacity))
            .expect("room");
        e.handle_data_ready(r).expect("ready");
        capacities.push((r, capacity));
        drain(&mut e);
    }
    let source = Rank(u32::try_from(data.len() % 3).expect("small"));
    let comm = CommId(u16::from(data.len() % 5 == 4));
    match e.handle_message(source, comm, data) {
        Ok(Arrival::Deliver { req, inline }) => {
            let cap = capacities
                .iter()
                .find(|(r, _)| *r == req)
                .map(|(_, c)| *c)
                .unwrap_or_else(|| panic!("delivered to {req}, which is no receive"));
            assert!(
                inline.len() as u64 <= cap,
                "{} inline bytes delivered into a {cap}-byte receive",
                inline.len()
            );
        }
        Ok(Arrival::Stash { early, .. }) => {
            assert!(
                e.request(early).is_some(),
                "stash for a dead request {early}"
            );
        }
        Ok(Arrival::Nothing) | Err(MessageError::Peer(_)) => {}
        Err(MessageError::Full(t)) => panic!("the {t} is full with a single message"),
        Err(other) => panic!("unknown error {other:?}"),
    }
    drain(&mut e);
    // Whatever happened, the engine can still report what is left.
    let _ = e.leftovers().count();
}

fn drain(e: &mut SmallEngine) {
    let mut n = 0;
    while e.poll_transmit().is_some() || e.poll_event().is_some() {
        n += 1;
        assert!(n < 1000, "the engine's outputs never drain");
    }
}
