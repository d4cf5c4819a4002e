//! Inter-node reductions of the insert-task flow: who takes part, who combines what, and
//! when a pending reduction is wrapped up (the reference's
//! `starpu_mpi_redux_data_prio_tree`, internals §8.1).
//!
//! A datum accessed in `REDUX` mode by tasks on several ranks accumulates one
//! contribution per executing rank. Its reduction combines them into the owner's value
//! along a tree, with no allocation and the same answer on every rank:
//!
//! 1. **Members**: the ranks that executed a `REDUX` task on the datum since the last
//!    reduction, and the owner ([`members`] puts them in order).
//! 2. **Tree**: the members, in rank order, are cut into groups of `arity` (0 or 1: one
//!    group, a flat reduction). Each group's *reducer* is the owner if it is in the group,
//!    else the group's first member; every other member sends its contribution to the
//!    reducer, which receives it into a temporary and combines it into its own
//!    ([`Step`]). The reducers form the next level, until one rank — the owner — is left.
//! 3. **Afterwards** the non-owners' contributions are consumed: a rank that initialised a
//!    contribution buffer drops its copy ([`Step::DropCopy`]), and every rank clears the
//!    datum's cache flags (the value changed), like a write.
//!
//! Two rules of the flow around it, also here so that the adapter decides nothing:
//! - a rank that executes a `REDUX` task on a datum it does not own initialises its
//!   contribution buffer first, once per reduction ([`needs_init`]);
//! - a pending reduction is wrapped up (a tree of arity 2) before a task reads the datum
//!   in any other mode ([`wraps_up`]).

use crate::types::{Access, AccessMode, Owner, Rank};

/// What rank `me` does for one reduction, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Step {
    /// Receive the contribution of `from` into a temporary of the datum's shape, then
    /// combine it into this rank's value (the codelet `combine`: RW the value, R the
    /// temporary).
    Combine {
        /// The member whose contribution is received.
        from: Rank,
    },
    /// Send this rank's contribution to `to`, its group's reducer (this rank is done).
    Send {
        /// The reducer.
        to: Rank,
    },
    /// Drop this rank's copy once the steps before it are done: its contribution was
    /// consumed (a non-owner that initialised a contribution buffer).
    DropCopy,
}

/// Why a reduction cannot be planned (a caller's bug: the adapter builds the members).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReduceError {
    /// The owner is not among the members ([`members`] adds it).
    OwnerMissing,
    /// The members are not in strictly increasing rank order.
    Unordered,
}

impl core::fmt::Display for ReduceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OwnerMissing => f.write_str("the owner is not among the reduction's members"),
            Self::Unordered => f.write_str("the reduction's members are not in rank order"),
        }
    }
}

impl core::error::Error for ReduceError {}

/// Puts the members of a reduction in order in `buf`: the `contributors` (the executors
/// of `REDUX` tasks on the datum, in any order, repeats allowed) and the `owner`, sorted
/// and without repeats. Returns how many there are; `None` when `buf` is too small to
/// hold the owner and every contributor (repeats included).
pub fn members(
    contributors: impl IntoIterator<Item = Rank>,
    owner: Rank,
    buf: &mut [Rank],
) -> Option<usize> {
    let mut n = 0;
    for r in core::iter::once(owner).chain(contributors) {
        *buf.get_mut(n)? = r;
        n += 1;
    }
    buf[..n].sort_unstable();
    // Without repeats, in place.
    let mut kept = 0;
    for i in 0..n {
        if kept == 0 || buf[i] != buf[kept - 1] {
            buf[kept] = buf[i];
            kept += 1;
        }
    }
    Some(kept)
}

/// The steps of rank `me` in the reduction of a datum owned by `owner` among `members`
/// (sorted, without repeats, owner included: [`members`]), with groups of `arity` (0 or
/// 1: flat); `initialised`: `me` initialised a contribution buffer for it
/// ([`needs_init`]). `members` is used as scratch space (its order is changed). Every
/// rank calls it, members or not, and the steps pair up: each [`Step::Send`] from `a` to
/// `b` has one [`Step::Combine`] from `a` on `b`, at the same level of the tree (the
/// transfers of one reduction use the datum's tag, so each pair exchanges one message).
///
/// # Errors
/// [`ReduceError`] when `members` does not hold the owner or is not in order.
pub fn steps(
    me: Rank,
    owner: Rank,
    members: &mut [Rank],
    arity: usize,
    initialised: bool,
    mut step: impl FnMut(Step),
) -> Result<(), ReduceError> {
    if !members.contains(&owner) {
        return Err(ReduceError::OwnerMissing);
    }
    if members.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ReduceError::Unordered);
    }
    let mut len = members.len();
    let arity = if arity < 2 { len } else { arity };
    while len > 1 {
        // The reducers of this level go to the front, in order.
        let mut next = 0;
        let mut start = 0;
        while start < len {
            let end = if len - start > arity {
                start + arity
            } else {
                len
            };
            let group = start..end;
            let reducer = if members[group.clone()].contains(&owner) {
                owner
            } else {
                members[start]
            };
            for i in group {
                let m = members[i];
                if m == reducer {
                    continue;
                }
                if me == reducer {
                    step(Step::Combine { from: m });
                } else if me == m {
                    step(Step::Send { to: reducer });
                }
            }
            members[next] = reducer;
            next += 1;
            start = end;
        }
        len = next;
    }
    if me != owner && initialised {
        step(Step::DropCopy);
    }
    Ok(())
}

/// Whether rank `me`, about to run a task with a `REDUX` access to a datum of `owner` as
/// its `executor`, must first initialise its contribution buffer (the codelet `init`,
/// W): it executes the task, does not own the datum, and has not initialised it since
/// the last reduction. The owner accumulates into its own value.
pub fn needs_init(me: Rank, executor: Rank, owner: Owner, initialised: bool) -> bool {
    executor == me && owner != Owner::Rank(me) && !initialised
}

/// Whether a pending reduction of the datum of `access` (one with contributions not yet
/// combined: `pending`) must be wrapped up before the task is planned: the task reads
/// it in another mode than `REDUX`.
pub fn wraps_up(access: &Access, pending: bool) -> bool {
    pending && access.known && access.mode.reads() && !access.mode.contains(AccessMode::REDUX)
}

#[cfg(test)]
mod tests;
