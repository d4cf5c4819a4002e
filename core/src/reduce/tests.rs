use std::collections::BTreeMap;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;
use crate::types::{DataId, Tag};

fn all_steps(n: u32, owner: u32, members_: &[u32], arity: usize) -> Vec<Vec<Step>> {
    (0..n)
        .map(|me| {
            let mut m: Vec<Rank> = members_.iter().map(|&r| Rank(r)).collect();
            let mut out = Vec::new();
            steps(Rank(me), Rank(owner), &mut m, arity, me != owner, |s| {
                out.push(s)
            })
            .unwrap();
            out
        })
        .collect()
}

#[test]
fn a_flat_reduction_combines_every_contribution_on_the_owner() {
    let s = all_steps(4, 0, &[0, 1, 2, 3], 0);
    let combine = |r| Step::Combine { from: Rank(r) };
    assert_eq!(s[0], [combine(1), combine(2), combine(3)]);
    for steps in &s[1..] {
        assert_eq!(steps, &[Step::Send { to: Rank(0) }, Step::DropCopy]);
    }
}

#[test]
fn a_binary_tree_reduces_pairs_and_the_owner_reduces_its_group() {
    let s = all_steps(5, 2, &[0, 1, 2, 3], 2);
    let combine = |r| Step::Combine { from: Rank(r) };
    let send = |r| Step::Send { to: Rank(r) };
    assert_eq!(s[0], [combine(1), send(2), Step::DropCopy]);
    assert_eq!(s[1], [send(0), Step::DropCopy]);
    assert_eq!(s[2], [combine(3), combine(0)]);
    assert_eq!(s[3], [send(2), Step::DropCopy]);
    // A rank outside the tree only drops a copy it initialised (none here: no member).
    assert_eq!(s[4], [Step::DropCopy]);
}

#[test]
fn members_are_the_contributors_and_the_owner_in_order() {
    let mut buf = [Rank(0); 8];
    let n = members([Rank(3), Rank(1), Rank(3), Rank(5)], Rank(2), &mut buf).unwrap();
    assert_eq!(&buf[..n], [Rank(1), Rank(2), Rank(3), Rank(5)]);
    let n = members([Rank(2)], Rank(2), &mut buf).unwrap();
    assert_eq!(&buf[..n], [Rank(2)]);
    assert_eq!(members([Rank(1), Rank(2)], Rank(0), &mut buf[..2]), None);
}

#[test]
fn members_without_the_owner_or_out_of_order_are_refused() {
    let mut m = [Rank(1), Rank(2)];
    assert_eq!(
        steps(Rank(0), Rank(0), &mut m, 2, false, |_| {}),
        Err(ReduceError::OwnerMissing)
    );
    let mut m = [Rank(2), Rank(0)];
    assert_eq!(
        steps(Rank(0), Rank(0), &mut m, 2, false, |_| {}),
        Err(ReduceError::Unordered)
    );
    let mut m = [Rank(0), Rank(0)];
    assert_eq!(
        steps(Rank(0), Rank(0), &mut m, 2, false, |_| {}),
        Err(ReduceError::Unordered)
    );
}

#[test]
fn only_a_non_owner_executor_initialises_and_only_once() {
    let owner = Owner::Rank(Rank(0));
    assert!(needs_init(Rank(1), Rank(1), owner, false));
    assert!(!needs_init(Rank(1), Rank(1), owner, true));
    assert!(
        !needs_init(Rank(0), Rank(0), owner, false),
        "the owner accumulates"
    );
    assert!(
        !needs_init(Rank(1), Rank(2), owner, false),
        "not the executor"
    );
    assert!(needs_init(Rank(1), Rank(1), Owner::PerNode, false));
}

#[test]
fn a_read_in_another_mode_wraps_up_a_pending_reduction() {
    let a = |mode| Access::new(DataId(1), mode, Owner::Rank(Rank(0)), Tag(1), 8);
    assert!(wraps_up(&a(AccessMode::R), true));
    assert!(wraps_up(&a(AccessMode::RW), true));
    assert!(!wraps_up(&a(AccessMode::R), false), "nothing pending");
    assert!(
        !wraps_up(&a(AccessMode::REDUX), true),
        "another contribution"
    );
    assert!(
        !wraps_up(&a(AccessMode::W), true),
        "a write does not read it"
    );
    let unknown = Access {
        known: false,
        ..a(AccessMode::R)
    };
    assert!(!wraps_up(&unknown, true));
}

proptest! {
    /// Any members, owner and arity: the steps pair up (each send has its combine on the
    /// receiver, at the same level: the k-th message between a pair is the k-th
    /// combine), every member but the owner sends exactly once and last, the owner never
    /// sends, and the combines form a tree (n − 1 of them in all).
    #[test]
    fn the_steps_of_all_ranks_form_one_tree_towards_the_owner(
        set in proptest::collection::btree_set(0u32..9, 1..9),
        owner_at in 0usize..9,
        arity in 0usize..5,
    ) {
        let members_: Vec<u32> = set.iter().copied().collect();
        let owner = members_[owner_at % members_.len()];
        let s = all_steps(9, owner, &members_, arity);
        let mut sends: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        let mut combines: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for (me, list) in s.iter().enumerate() {
            let me = me as u32;
            let transfers: Vec<_> = list.iter().filter(|s| **s != Step::DropCopy).collect();
            for (i, st) in transfers.iter().enumerate() {
                match **st {
                    Step::Send { to } => {
                        prop_assert!(members_.contains(&me) && me != owner);
                        prop_assert_eq!(i, transfers.len() - 1, "a member sends last");
                        *sends.entry((me, to.0)).or_default() += 1;
                    }
                    Step::Combine { from } => {
                        *combines.entry((from.0, me)).or_default() += 1;
                    }
                    Step::DropCopy => unreachable!(),
                }
            }
            let sent = transfers.iter().filter(|s| matches!(s, Step::Send { .. })).count();
            let expected = usize::from(members_.contains(&me) && me != owner);
            prop_assert_eq!(sent, expected);
            prop_assert_eq!(list.last() == Some(&Step::DropCopy), me != owner);
        }
        prop_assert_eq!(&sends, &combines);
        prop_assert_eq!(sends.values().sum::<usize>(), members_.len() - 1);
    }
}
