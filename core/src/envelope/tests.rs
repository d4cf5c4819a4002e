use std::string::ToString;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

fn env(kind: Kind, size: u64) -> Envelope {
    Envelope {
        kind,
        comm: CommId(3),
        tag: Tag(-77),
        size,
        msg: MsgId(12),
    }
}

/// Encodes header and inline payload into a fresh vector.
fn message(e: &Envelope, inline: &[u8]) -> Vec<u8> {
    let mut out = std::vec![0u8; HEADER_LEN + inline.len()];
    let n = e.encode_with_inline(inline, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

/// A known envelope and its bytes: a change of layout breaks this test.
const GOLDEN: Envelope = Envelope {
    kind: Kind::SyncData,
    comm: CommId(0x0102),
    tag: Tag(0x0708_090A_0B0C_0D0E),
    size: 0x1112_1314_1516_1718,
    msg: MsgId(0x0304_0506),
};

#[rustfmt::skip]
const GOLDEN_BYTES: [u8; HEADER_LEN] = [
    1,                                              // version
    1,                                              // kind: SyncData
    0x02, 0x01,                                     // comm, LE
    0x06, 0x05, 0x04, 0x03,                         // msg, LE
    0x0E, 0x0D, 0x0C, 0x0B, 0x0A, 0x09, 0x08, 0x07, // tag, LE
    0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, // size, LE
];

#[test]
fn golden_layout_is_fixed_little_endian() {
    assert_eq!(GOLDEN.encode(), GOLDEN_BYTES);
    let d = decode(&GOLDEN_BYTES).unwrap();
    assert_eq!(d.envelope, GOLDEN);
    assert!(d.inline.is_empty());
}

#[test]
fn golden_negative_tag_is_twos_complement_le() {
    let e = Envelope {
        kind: Kind::Eager,
        comm: CommId::WORLD,
        tag: Tag(-2),
        size: 2,
        msg: MsgId(1),
    };
    let bytes = message(&e, &[0xAA, 0xBB]);
    #[rustfmt::skip]
    let expected: [u8; 26] = [
        1, 3, 0, 0, 1, 0, 0, 0,
        0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        2, 0, 0, 0, 0, 0, 0, 0,
        0xAA, 0xBB,
    ];
    assert_eq!(bytes, expected);
}

#[test]
fn each_kind_round_trips() {
    for kind in Kind::ALL {
        let size = match kind {
            Kind::SyncReady => 0,
            Kind::Eager => 5,
            Kind::Data | Kind::SyncData => 1 << 40,
        };
        let e = env(kind, size);
        let inline: &[u8] = if kind == Kind::Eager { b"hello" } else { b"" };
        let bytes = message(&e, inline);
        assert_eq!(bytes.len(), e.wire_len());
        let d = decode(&bytes).unwrap();
        assert_eq!(d.envelope, e, "{kind}");
        assert_eq!(d.inline, inline, "{kind}");
    }
}

#[test]
fn extreme_values_round_trip() {
    for (tag, size) in [
        (i64::MIN, u64::MAX),
        (i64::MAX, 0),
        (0, u64::MAX - 1),
        (-1, 1),
    ] {
        for kind in [Kind::Data, Kind::SyncData] {
            let e = Envelope {
                kind,
                comm: CommId(u16::MAX),
                tag: Tag(tag),
                size,
                msg: MsgId(u32::MAX),
            };
            assert_eq!(decode(&e.encode()).unwrap().envelope, e);
        }
    }
    let ready = Envelope {
        kind: Kind::SyncReady,
        comm: CommId(u16::MAX),
        tag: Tag(i64::MIN),
        size: 0,
        msg: MsgId(u32::MAX),
    };
    assert_eq!(decode(&ready.encode()).unwrap().envelope, ready);
}

#[test]
fn eager_with_empty_payload_is_valid() {
    let e = env(Kind::Eager, 0);
    let bytes = e.encode();
    let d = decode(&bytes).unwrap();
    assert_eq!(d.envelope, e);
    assert!(d.inline.is_empty());
}

#[test]
fn kind_byte_inverts_for_every_byte() {
    for b in 0..=u8::MAX {
        match Kind::from_byte(b) {
            Some(k) => assert_eq!(k.to_byte(), b),
            None => assert!(b >= 4, "byte {b} must be a kind"),
        }
    }
    for k in Kind::ALL {
        assert_eq!(Kind::from_byte(k.to_byte()), Some(k));
    }
}

#[test]
fn empty_input_is_truncated() {
    let err = decode(&[]).unwrap_err();
    assert_eq!(err, DecodeError::Truncated { len: 0 });
    assert_eq!(err.field(), Field::Length);
}

#[test]
fn short_header_is_truncated() {
    let bytes = GOLDEN.encode();
    for len in 1..HEADER_LEN {
        assert_eq!(
            decode(&bytes[..len]),
            Err(DecodeError::Truncated { len }),
            "len {len}"
        );
    }
}

#[test]
fn wrong_version_is_reported_before_length() {
    assert_eq!(
        decode(&[2]),
        Err(DecodeError::UnsupportedVersion { found: 2 })
    );
    let mut bytes = GOLDEN.encode();
    bytes[0] = 0;
    let err = decode(&bytes).unwrap_err();
    assert_eq!(err, DecodeError::UnsupportedVersion { found: 0 });
    assert_eq!(err.field(), Field::Version);
}

#[test]
fn unknown_kind_is_rejected() {
    let mut bytes = GOLDEN.encode();
    bytes[1] = 9;
    let err = decode(&bytes).unwrap_err();
    assert_eq!(err, DecodeError::UnknownKind { found: 9 });
    assert_eq!(err.field(), Field::Kind);
    assert_eq!(err.to_string(), "envelope kind byte 9 is not a known kind");
}

#[test]
fn ready_with_payload_is_rejected() {
    let bytes = env(Kind::SyncReady, 8).encode();
    let err = decode(&bytes).unwrap_err();
    assert_eq!(err, DecodeError::ReadyWithPayload { size: 8 });
    assert_eq!(err.field(), Field::Size);
}

#[test]
fn eager_inline_shorter_or_longer_than_size_is_rejected() {
    let e = env(Kind::Eager, 4);
    let full = message(&e, b"abcd");
    let err = decode(&full[..full.len() - 1]).unwrap_err();
    assert_eq!(
        err,
        DecodeError::InlineLength {
            declared: 4,
            present: 3
        }
    );
    assert_eq!(err.field(), Field::Size);
    let mut long = full;
    long.push(0);
    assert_eq!(
        decode(&long),
        Err(DecodeError::InlineLength {
            declared: 4,
            present: 5
        })
    );
}

#[test]
fn eager_with_huge_declared_size_is_rejected_not_allocated() {
    let bytes = env(Kind::Eager, u64::MAX).encode();
    assert_eq!(
        decode(&bytes),
        Err(DecodeError::InlineLength {
            declared: u64::MAX,
            present: 0
        })
    );
}

#[test]
fn trailing_bytes_after_non_eager_header_are_rejected() {
    for kind in [Kind::Data, Kind::SyncData, Kind::SyncReady] {
        let mut bytes = env(kind, 0).encode().to_vec();
        bytes.extend_from_slice(&[0, 0, 0]);
        let err = decode(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::TrailingBytes { extra: 3 }, "{kind}");
        assert_eq!(err.field(), Field::Length);
    }
}

#[test]
fn decode_error_messages_read_well() {
    let cases = [
        (
            DecodeError::Truncated { len: 5 },
            "envelope is 5 bytes long, shorter than the 24-byte header",
        ),
        (
            DecodeError::UnsupportedVersion { found: 7 },
            "envelope version 7 is not supported (this build speaks version 1)",
        ),
        (
            DecodeError::InlineLength {
                declared: 10,
                present: 3,
            },
            "eager envelope declares 10 payload bytes but carries 3",
        ),
        (
            DecodeError::TrailingBytes { extra: 2 },
            "non-eager envelope has 2 unexpected bytes after the 24-byte header",
        ),
        (
            DecodeError::ReadyWithPayload { size: 8 },
            "sync ready envelope declares a payload of 8 bytes, but must declare 0",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
    }
}

#[test]
fn encode_into_small_buffer_fails_and_leaves_it_untouched() {
    let mut buf = [0xEEu8; HEADER_LEN - 1];
    assert_eq!(
        GOLDEN.encode_into(&mut buf),
        Err(EncodeError::BufferTooSmall {
            needed: HEADER_LEN,
            available: HEADER_LEN - 1
        })
    );
    assert!(buf.iter().all(|&b| b == 0xEE));
}

#[test]
fn encode_into_writes_only_the_header() {
    let mut buf = [0xEEu8; HEADER_LEN + 4];
    let e = env(Kind::Eager, 4);
    assert_eq!(e.encode_into(&mut buf), Ok(HEADER_LEN));
    assert_eq!(buf[..HEADER_LEN], e.encode());
    assert_eq!(buf[HEADER_LEN..], [0xEE; 4]);
}

#[test]
fn encode_with_inline_checks_payload_length_and_buffer() {
    let mut buf = [0u8; 64];
    assert_eq!(
        env(Kind::Eager, 4).encode_with_inline(b"abc", &mut buf),
        Err(EncodeError::InlineLength {
            kind: Kind::Eager,
            declared: 4,
            present: 3
        })
    );
    assert_eq!(
        env(Kind::Data, 4).encode_with_inline(b"abcd", &mut buf),
        Err(EncodeError::InlineLength {
            kind: Kind::Data,
            declared: 0,
            present: 4
        })
    );
    let mut small = [0u8; HEADER_LEN + 3];
    assert_eq!(
        env(Kind::Eager, 4).encode_with_inline(b"abcd", &mut small),
        Err(EncodeError::BufferTooSmall {
            needed: HEADER_LEN + 4,
            available: HEADER_LEN + 3
        })
    );
    assert!(small.iter().all(|&b| b == 0));
    assert_eq!(
        EncodeError::BufferTooSmall {
            needed: 28,
            available: 27
        }
        .to_string(),
        "envelope needs 28 bytes but the buffer holds 27"
    );
}

#[test]
fn wire_len_counts_inline_payload_only_for_eager() {
    assert_eq!(env(Kind::Data, 1000).wire_len(), HEADER_LEN);
    assert_eq!(env(Kind::SyncData, 1000).wire_len(), HEADER_LEN);
    assert_eq!(env(Kind::SyncReady, 0).wire_len(), HEADER_LEN);
    assert_eq!(env(Kind::Eager, 1000).wire_len(), HEADER_LEN + 1000);
    assert_eq!(env(Kind::Eager, u64::MAX).wire_len(), usize::MAX);
}

#[test]
fn envelope_display_names_every_field() {
    assert_eq!(
        env(Kind::SyncData, 9).to_string(),
        "sync data envelope (comm 3, tag -77, msg 12, 9 bytes)"
    );
}

/// Decodes `bytes`; when that succeeds, checks that re-encoding gives the same bytes.
fn check_total(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(d) = decode(bytes) {
        prop_assert_eq!(d.envelope.wire_len(), bytes.len());
        let mut out = std::vec![0u8; bytes.len()];
        let n = d.envelope.encode_with_inline(d.inline, &mut out);
        prop_assert_eq!(n, Ok(bytes.len()));
        prop_assert_eq!(&out[..], bytes);
    }
    Ok(())
}

fn any_kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

/// An arbitrary valid message: envelope and matching inline payload.
fn any_message() -> impl Strategy<Value = (Envelope, Vec<u8>)> {
    (
        any_kind(),
        any::<u16>(),
        any::<i64>(),
        any::<u64>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(kind, comm, tag, size, msg, payload)| {
            let (size, inline) = match kind {
                Kind::Eager => (payload.len() as u64, payload),
                Kind::SyncReady => (0, Vec::new()),
                Kind::Data | Kind::SyncData => (size, Vec::new()),
            };
            let e = Envelope {
                kind,
                comm: CommId(comm),
                tag: Tag(tag),
                size,
                msg: MsgId(msg),
            };
            (e, inline)
        })
}

/// A change to a valid message: flip bits of one byte, cut it, or extend it.
#[derive(Clone, Debug)]
enum Mutation {
    Xor(usize, u8),
    Truncate(usize),
    Append(u8),
}

fn any_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1..=u8::MAX).prop_map(|(i, x)| Mutation::Xor(i, x)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => any::<u8>().prop_map(Mutation::Append),
    ]
}

proptest! {
    #[test]
    fn decode_of_arbitrary_bytes_is_total(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check_total(&bytes)?;
    }

    #[test]
    fn decode_of_plausible_headers_is_total(
        kind in 0u8..6,
        rest in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = std::vec![VERSION, kind];
        bytes.extend_from_slice(&rest);
        check_total(&bytes)?;
    }

    #[test]
    fn decode_of_mutated_messages_is_total(
        (e, inline) in any_message(),
        mutations in prop::collection::vec(any_mutation(), 1..4),
    ) {
        let mut bytes = message(&e, &inline);
        for m in mutations {
            match m {
                Mutation::Xor(i, x) => {
                    if !bytes.is_empty() {
                        let i = i % bytes.len();
                        bytes[i] ^= x;
                    }
                }
                Mutation::Truncate(n) => bytes.truncate(n % (bytes.len() + 1)),
                Mutation::Append(b) => bytes.push(b),
            }
        }
        check_total(&bytes)?;
    }

    #[test]
    fn encode_then_decode_round_trips((e, inline) in any_message()) {
        let bytes = message(&e, &inline);
        prop_assert_eq!(bytes.len(), e.wire_len());
        let d = decode(&bytes).unwrap();
        prop_assert_eq!(d.envelope, e);
        prop_assert_eq!(d.inline, &inline[..]);
        prop_assert_eq!(&bytes[..HEADER_LEN], &e.encode()[..]);
    }
}
