use std::collections::BTreeMap;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::types::{DataId, Owner, Tag};

fn acc(data: u32, mode: AccessMode, owner: u32, size: u64) -> Access {
    Access::new(
        DataId(data),
        mode,
        Owner::Rank(Rank(owner)),
        Tag(data.into()),
        size,
    )
}

fn per_node(data: u32, mode: AccessMode, size: u64) -> Access {
    Access::new(DataId(data), mode, Owner::PerNode, Tag(data.into()), size)
}

fn owner_of_second(_me: Rank, _n: u32, accesses: &[Access]) -> Rank {
    accesses
        .get(1)
        .and_then(|a| a.owner.rank())
        .unwrap_or(Rank(0))
}

fn always_zero(_me: Rank, _n: u32, _accesses: &[Access]) -> Rank {
    Rank(0)
}

fn always_seven(_me: Rank, _n: u32, _accesses: &[Access]) -> Rank {
    Rank(7)
}

#[test]
fn built_in_policy_is_current_after_new() {
    let p = Policies::new();
    assert_eq!(p.current(), PolicyId::MOST_R_DATA);
    assert!(p.is_registered(PolicyId::MOST_R_DATA));
    assert_eq!(p.len(), 1);
    assert!(!p.is_registered(PolicyId(1)));
}

#[test]
fn most_r_data_counts_rw_twice() {
    // 8 bytes read-written on 0 (16) beat 10 bytes read on 1 (10).
    let a = [acc(0, AccessMode::RW, 0, 8), acc(1, AccessMode::R, 1, 10)];
    assert_eq!(most_r_data(Rank(1), 2, &a), Rank(0));
    // W alone counts once: 8 on 0 lose to 10 on 1.
    let a = [acc(0, AccessMode::W, 0, 8), acc(1, AccessMode::R, 1, 10)];
    assert_eq!(most_r_data(Rank(0), 2, &a), Rank(1));
}

#[test]
fn most_r_data_sums_several_data_of_one_owner() {
    let a = [
        acc(0, AccessMode::R, 2, 5),
        acc(1, AccessMode::R, 1, 9),
        acc(2, AccessMode::R, 2, 5),
    ];
    assert_eq!(most_r_data(Rank(0), 3, &a), Rank(2));
}

#[test]
fn most_r_data_ties_go_to_the_lowest_rank() {
    let a = [acc(0, AccessMode::R, 2, 4), acc(1, AccessMode::W, 1, 4)];
    assert_eq!(most_r_data(Rank(2), 3, &a), Rank(1));
}

#[test]
fn most_r_data_with_nothing_to_score_runs_on_rank_0() {
    assert_eq!(most_r_data(Rank(3), 4, &[]), Rank(0));
    let a = [
        per_node(0, AccessMode::RW, 100),
        acc(1, AccessMode::SCRATCH, 3, 100),
        acc(2, AccessMode::REDUX, 3, 100),
        acc(3, AccessMode::R, 2, 0),
        Access {
            known: false,
            ..acc(4, AccessMode::RW, 3, 100)
        },
    ];
    assert_eq!(most_r_data(Rank(3), 4, &a), Rank(0));
}

#[test]
fn most_r_data_handles_ranks_far_beyond_any_array() {
    let a = [
        acc(0, AccessMode::R, u32::MAX - 1, 1),
        acc(1, AccessMode::R, 7, 1),
    ];
    assert_eq!(most_r_data(Rank(0), u32::MAX, &a), Rank(7));
    let a = [
        acc(0, AccessMode::RW, u32::MAX - 1, 1),
        acc(1, AccessMode::R, 7, 1),
    ];
    assert_eq!(most_r_data(Rank(0), u32::MAX, &a), Rank(u32::MAX - 1));
}

#[test]
fn most_r_data_ignores_owners_out_of_range_and_saturates() {
    let a = [acc(0, AccessMode::RW, 9, 50), acc(1, AccessMode::R, 1, 1)];
    assert_eq!(most_r_data(Rank(0), 2, &a), Rank(1));
    let a = [
        acc(0, AccessMode::RW, 1, u64::MAX),
        acc(1, AccessMode::RW, 1, u64::MAX),
        acc(2, AccessMode::R, 0, u64::MAX),
    ];
    // Both saturate at u64::MAX: the tie goes to rank 0.
    assert_eq!(most_r_data(Rank(0), 2, &a), Rank(0));
}

#[test]
fn register_takes_the_first_free_slot_from_one() {
    let mut p = Policies::new();
    assert_eq!(p.register(always_zero), Ok(PolicyId(1)));
    assert_eq!(p.register(always_zero), Ok(PolicyId(2)));
    assert_eq!(p.register(always_zero), Ok(PolicyId(3)));
    p.unregister(PolicyId(2)).unwrap();
    assert_eq!(p.register(owner_of_second), Ok(PolicyId(2)));
    assert_eq!(p.len(), 4);
}

/// The reference test `policy_register_many`.
#[test]
fn policy_register_many_reuses_the_freed_slot() {
    let mut p = Policies::new();
    for i in 1..SLOTS {
        assert_eq!(p.register(always_zero), Ok(PolicyId(i as u8)));
    }
    p.unregister(PolicyId(SLOTS as u8 - 2)).unwrap();
    assert_eq!(p.register(always_zero), Ok(PolicyId(SLOTS as u8 - 2)));
}

/// The reference test `policy_register_toomany` (the reference aborts).
#[test]
fn policy_register_toomany_is_a_full_error() {
    let mut p = Policies::new();
    for _ in 1..SLOTS {
        p.register(always_zero).unwrap();
    }
    let err = p.register(always_seven).unwrap_err();
    assert_eq!(err.table, Table::Policies);
    // The function is handed back.
    assert_eq!((err.item)(Rank(0), 8, &[]), Rank(7));
    assert_eq!(p.len(), SLOTS);
}

/// The reference test `policy_unregister` (the reference aborts).
#[test]
fn policy_unregister_refuses_the_built_in_policy() {
    let mut p = Policies::new();
    assert_eq!(
        p.unregister(PolicyId::MOST_R_DATA),
        Err(SelectError::BuiltIn)
    );
    assert!(p.is_registered(PolicyId::MOST_R_DATA));
}

#[test]
fn unregister_of_a_free_or_missing_slot_fails() {
    let mut p = Policies::new();
    assert_eq!(
        p.unregister(PolicyId(5)),
        Err(SelectError::NotRegistered {
            policy: PolicyId(5)
        })
    );
    assert_eq!(
        p.unregister(PolicyId(200)),
        Err(SelectError::NotRegistered {
            policy: PolicyId(200)
        })
    );
}

#[test]
fn set_current_requires_a_registered_policy() {
    let mut p = Policies::new();
    assert_eq!(
        p.set_current(PolicyId(1)),
        Err(SelectError::NotRegistered {
            policy: PolicyId(1)
        })
    );
    assert_eq!(p.current(), PolicyId::MOST_R_DATA);
    let id = p.register(owner_of_second).unwrap();
    p.set_current(id).unwrap();
    assert_eq!(p.current(), id);
}

#[test]
fn select_uses_the_current_or_the_given_policy() {
    let mut p = Policies::new();
    let a = [acc(0, AccessMode::RW, 0, 100), acc(1, AccessMode::R, 1, 1)];
    assert_eq!(p.select(None, Rank(0), 2, &a), Ok(Rank(0)));
    let id = p.register(owner_of_second).unwrap();
    assert_eq!(p.select(Some(id), Rank(0), 2, &a), Ok(Rank(1)));
    assert_eq!(p.select(None, Rank(0), 2, &a), Ok(Rank(0)));
    p.set_current(id).unwrap();
    assert_eq!(p.select(None, Rank(0), 2, &a), Ok(Rank(1)));
    assert_eq!(
        p.select(Some(PolicyId::MOST_R_DATA), Rank(0), 2, &a),
        Ok(Rank(0))
    );
}

#[test]
fn select_rejects_a_rank_out_of_range() {
    let mut p = Policies::new();
    let id = p.register(always_seven).unwrap();
    assert_eq!(
        p.select(Some(id), Rank(0), 4, &[]),
        Err(SelectError::OutOfRange {
            rank: Rank(7),
            nranks: 4
        })
    );
    assert_eq!(p.select(Some(id), Rank(0), 8, &[]), Ok(Rank(7)));
}

#[test]
fn select_after_unregistering_the_current_policy_fails() {
    let mut p = Policies::new();
    let id = p.register(always_zero).unwrap();
    p.set_current(id).unwrap();
    p.unregister(id).unwrap();
    assert_eq!(
        p.select(None, Rank(0), 2, &[]),
        Err(SelectError::NotRegistered { policy: id })
    );
    assert_eq!(
        p.select(Some(PolicyId(100)), Rank(0), 2, &[]),
        Err(SelectError::NotRegistered {
            policy: PolicyId(100)
        })
    );
}

#[test]
fn errors_display_their_cause() {
    let s = std::format!(
        "{}",
        SelectError::OutOfRange {
            rank: Rank(7),
            nranks: 4
        }
    );
    assert!(s.contains("rank 7") && s.contains('4'), "{s}");
    assert!(std::format!("{}", SelectError::BuiltIn).contains("built-in"));
}

/// The reference's algorithm, with an array indexed by rank.
fn most_r_data_model(nranks: u32, accesses: &[Access]) -> Rank {
    let mut size: BTreeMap<u32, u128> = BTreeMap::new();
    for a in accesses {
        if let (true, Owner::Rank(r)) = (a.known, a.owner) {
            if r.0 < nranks {
                let times = u128::from(a.mode.contains(AccessMode::R))
                    + u128::from(a.mode.contains(AccessMode::W));
                *size.entry(r.0).or_default() += u128::from(a.size) * times;
            }
        }
    }
    let mut best = (0u32, 0u128);
    for r in 0..nranks {
        let s = size.get(&r).copied().unwrap_or(0);
        if s > best.1 {
            best = (r, s);
        }
    }
    Rank(best.0)
}

fn any_access(nranks: u32) -> impl Strategy<Value = Access> {
    (
        0u32..6,
        0u8..64,
        prop_oneof![4 => (0..nranks).prop_map(|r| Owner::Rank(Rank(r))), 1 => Just(Owner::PerNode)],
        0u64..1000,
        prop::bool::weighted(0.9),
    )
        .prop_map(|(data, bits, owner, size, known)| Access {
            known,
            ..Access::new(
                DataId(data),
                AccessMode::from_bits_truncate(bits),
                owner,
                Tag(data.into()),
                size,
            )
        })
}

proptest! {
    #[test]
    fn most_r_data_matches_the_reference_algorithm(
        (nranks, accesses) in (1u32..9).prop_flat_map(|n| (Just(n), prop::collection::vec(any_access(n), 0..8)))
    ) {
        let accesses: Vec<Access> = accesses;
        prop_assert_eq!(most_r_data(Rank(0), nranks, &accesses), most_r_data_model(nranks, &accesses));
    }
}
