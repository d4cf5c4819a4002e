use proptest::prelude::*;

use super::*;
use crate::select::PolicyId;
use crate::types::{Priority, Rank};

fn datum(mode: AccessMode, tag: i64, owner: u32) -> DigestAccess {
    DigestAccess::Datum {
        mode,
        tag: Tag(tag),
        owner: Owner::Rank(Rank(owner)),
    }
}

fn gemm() -> u64 {
    insert_digest(
        b"gemm",
        [
            datum(AccessMode::R, 1, 0),
            datum(AccessMode::R, 2, 1),
            datum(AccessMode::RW, 3, 1),
        ],
        &Options::default(),
        Some(Executor::Rank(Rank(1))),
    )
}

#[test]
fn the_digest_is_a_pure_function_of_its_fields() {
    assert_eq!(gemm(), gemm());
    // A fixed value: the digest does not depend on the platform or the build, so ranks
    // built differently (or a report written by another machine) compare.
    let mut d = Digest::new();
    d.bytes(b"starling");
    d.u64(7);
    assert_eq!(d.finish(), {
        let mut e = Digest::new();
        e.u64(8);
        e.u64(u64::from_le_bytes(*b"starling"));
        e.u64(7);
        e.finish()
    });
}

#[test]
fn every_field_of_an_insert_changes_its_digest() {
    let base = gemm();
    let variants = [
        insert_digest(
            b"gemn",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::W, 3, 1),
            ],
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 4, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 0),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [datum(AccessMode::R, 1, 0), datum(AccessMode::R, 2, 1)],
            &Options::default(),
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options {
                priority: Priority(1),
                ..Options::default()
            },
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options {
                execute: Execute::OnNode(Rank(1)),
                ..Options::default()
            },
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options {
                policy: Some(PolicyId(0)),
                ..Options::default()
            },
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options {
                ssend: true,
                ..Options::default()
            },
            Some(Executor::Rank(Rank(1))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options::default(),
            Some(Executor::Rank(Rank(0))),
        ),
        insert_digest(
            b"gemm",
            [
                datum(AccessMode::R, 1, 0),
                datum(AccessMode::R, 2, 1),
                datum(AccessMode::RW, 3, 1),
            ],
            &Options::default(),
            None,
        ),
    ];
    for (i, v) in variants.iter().enumerate() {
        assert_ne!(*v, base, "variant {i} collides with the base insert");
        for (j, w) in variants.iter().enumerate().skip(i + 1) {
            assert_ne!(v, w, "variants {i} and {j} collide");
        }
    }
}

#[test]
fn a_temporary_access_records_its_mode_only() {
    let opt = |mode| {
        insert_digest(
            b"t",
            [DigestAccess::Temporary { mode }],
            &Options::default(),
            None,
        )
    };
    assert_eq!(opt(AccessMode::R), opt(AccessMode::R));
    assert_ne!(opt(AccessMode::R), opt(AccessMode::W));
    let known = insert_digest(
        b"t",
        [datum(AccessMode::R, 0, 0)],
        &Options::default(),
        None,
    );
    assert_ne!(opt(AccessMode::R), known);
}

#[test]
fn byte_strings_are_length_prefixed() {
    // "ab" then word 0 vs "ab\0" — the same words once padded, told apart by the length.
    let mut a = Digest::new();
    a.bytes(b"ab");
    let mut b = Digest::new();
    b.bytes(b"ab\0");
    assert_ne!(a.finish(), b.finish());
    let mut e = Digest::new();
    e.bytes(b"");
    assert_ne!(e.finish(), Digest::new().finish());
}

#[test]
fn the_chain_depends_on_order_and_position() {
    let (x, y) = (gemm(), gemm() ^ 1);
    let xy = chain(chain(0, 1, x), 2, y);
    let yx = chain(chain(0, 1, y), 2, x);
    assert_ne!(xy, yx);
    assert_ne!(chain(0, 1, x), chain(0, 2, x));
    assert_eq!(xy, chain(chain(0, 1, x), 2, y));
}

proptest! {
    /// The fold is a bijection at each step: sequences of equal length that differ in
    /// exactly one word never collide.
    #[test]
    fn one_changed_word_always_changes_the_digest(
        words in proptest::collection::vec(any::<u64>(), 1..40),
        at in any::<prop::sample::Index>(),
        delta in 1u64..,
    ) {
        let i = at.index(words.len());
        let mut other = words.clone();
        other[i] = other[i].wrapping_add(delta);
        let fold = |ws: &[u64]| {
            let mut d = Digest::new();
            for w in ws {
                d.u64(*w);
            }
            d.finish()
        };
        prop_assert_ne!(fold(&words), fold(&other));
    }
}
