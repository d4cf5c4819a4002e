//! Node-selection policies: which rank runs a task when its data do not say.
//!
//! The state machine is a fixed table of [`SLOTS`] policy slots plus the number of the
//! *current* policy (the reference's `starpu_mpi_node_selection_*`, internals §6.1). The
//! [planner](crate::insert::plan) asks it for an executor only when a task names no node
//! ([`Execute::Auto`](crate::insert::Execute::Auto)) and its written data do not name a
//! single owner: several written data with different owners, or no written data at all.
//!
//! Rules:
//! - Slot 0 always holds the built-in [`most_r_data`] ([`PolicyId::MOST_R_DATA`]); it is the
//!   current policy after [`Policies::new`] and it can be neither unregistered nor replaced.
//! - [`Policies::register`] takes the first free slot ≥ 1 (so a slot freed by
//!   [`Policies::unregister`] is reused before any higher one). When every slot is taken it
//!   hands the function back in a [`Full`] error (the reference aborts).
//! - [`Policies::select`] with `None` uses the current policy, with `Some(id)` the given one
//!   (the reference's per-call `STARPU_NODE_SELECTION_POLICY`).
//! - A policy is a plain function of `(me, nranks, accesses)`. Every rank of the job calls it
//!   with the same arguments except `me`, so **a policy must not depend on `me`** (nor on any
//!   other per-rank state): if it did, two ranks would pick different executors and their
//!   transfers would no longer pair up. The policy table itself is replicated state: every
//!   rank registers the same functions in the same order.
//! - A policy that returns a rank `≥ nranks` is reported as
//!   [`SelectError::OutOfRange`] rather than trusted.

use core::fmt;

use crate::error::{Full, Table};
use crate::types::Access;
use crate::types::{AccessMode, Rank};

/// A node-selection policy: given this rank, the number of ranks and the task's accesses
/// (in submission order), the rank that runs the task.
///
/// The reference's `starpu_mpi_select_node_policy_func_t`. It must be a pure function of
/// `nranks` and `accesses` (see the [module docs](self)); accesses with
/// [`known`](Access::known) `== false` carry no trustworthy owner or size on this rank.
pub type PolicyFn = fn(me: Rank, nranks: u32, accesses: &[Access]) -> Rank;

/// The number of policy slots, built-in one included (the reference's
/// `_STARPU_MPI_NODE_SELECTION_MAX_POLICY`).
pub const SLOTS: usize = 24;

/// The number of a slot in the [`Policies`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PolicyId(pub u8);

impl PolicyId {
    /// The built-in policy [`most_r_data`] (slot 0), the reference's
    /// `STARPU_MPI_NODE_SELECTION_MOST_R_DATA`.
    pub const MOST_R_DATA: Self = Self(0);

    /// The slot as an index into the table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy {}", self.0)
    }
}

/// Why a policy operation failed. Every case is a local caller's misuse; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SelectError {
    /// The slot holds no policy (never registered, unregistered since, or `≥ SLOTS`).
    /// Register the policy first, on every rank, in the same order.
    NotRegistered {
        /// The slot that was named.
        policy: PolicyId,
    },
    /// Slot 0 ([`PolicyId::MOST_R_DATA`]) was named for unregistration; the built-in policy
    /// cannot be removed. Switch the current policy instead.
    BuiltIn,
    /// A policy returned a rank that does not exist. Fix the policy: it must return a rank
    /// in `0..nranks`.
    OutOfRange {
        /// The rank the policy returned.
        rank: Rank,
        /// The number of ranks it was given.
        nranks: u32,
    },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRegistered { policy } => write!(f, "{policy} is not registered"),
            Self::BuiltIn => f.write_str("the built-in policy cannot be unregistered"),
            Self::OutOfRange { rank, nranks } => {
                write!(
                    f,
                    "the policy chose {rank}, but there are only {nranks} ranks"
                )
            }
        }
    }
}

impl core::error::Error for SelectError {}

/// The policy table: [`SLOTS`] slots, slot 0 the built-in [`most_r_data`], and the current
/// policy. See the [module docs](self) for the rules.
#[derive(Clone, Copy, Debug)]
pub struct Policies {
    slots: [Option<PolicyFn>; SLOTS],
    current: PolicyId,
}

#[cfg(feature = "defmt")]
impl defmt::Format for Policies {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "Policies {{ registered: {=usize}, current: {} }}",
            self.len(),
            self.current
        )
    }
}

impl Default for Policies {
    fn default() -> Self {
        Self::new()
    }
}

impl Policies {
    /// A table holding only the built-in policy, which is current.
    pub const fn new() -> Self {
        let mut slots: [Option<PolicyFn>; SLOTS] = [None; SLOTS];
        slots[PolicyId::MOST_R_DATA.index()] = Some(most_r_data as PolicyFn);
        Self {
            slots,
            current: PolicyId::MOST_R_DATA,
        }
    }

    /// The current policy (the reference's `starpu_mpi_node_selection_get_current_policy`).
    #[inline]
    pub const fn current(&self) -> PolicyId {
        self.current
    }

    /// Whether `policy` names a registered slot.
    pub fn is_registered(&self, policy: PolicyId) -> bool {
        self.get(policy).is_some()
    }

    /// The function registered in `policy`'s slot, if any.
    pub fn get(&self, policy: PolicyId) -> Option<PolicyFn> {
        self.slots.get(policy.index()).copied().flatten()
    }

    /// How many slots hold a policy, built-in one included.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Always `false`: the built-in policy is always registered. Present for symmetry with
    /// [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Registers `policy` in the first free slot `≥ 1` and returns its number (the
    /// reference's `starpu_mpi_node_selection_register_policy`).
    ///
    /// Every rank must register the same functions in the same order, so that a number
    /// names the same policy everywhere.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Policies`]) handing `policy` back when all [`SLOTS`] `- 1` user
    /// slots are taken. Unregister a policy first.
    pub fn register(&mut self, policy: PolicyFn) -> Result<PolicyId, Full<PolicyFn>> {
        let free = self
            .slots
            .iter_mut()
            .enumerate()
            .skip(1)
            .find(|(_, slot)| slot.is_none());
        match free {
            Some((index, slot)) => {
                *slot = Some(policy);
                // `index < SLOTS = 24`, so it fits in a `u8`.
                Ok(PolicyId(index as u8))
            }
            None => Err(Full::new(Table::Policies, policy)),
        }
    }

    /// Frees `policy`'s slot (the reference's
    /// `starpu_mpi_node_selection_unregister_policy`).
    ///
    /// If `policy` was the current policy it stays current, as in the reference: selecting
    /// with it then fails with [`SelectError::NotRegistered`] until another policy is made
    /// current or the slot is registered again.
    ///
    /// # Errors
    ///
    /// [`SelectError::BuiltIn`] for slot 0, [`SelectError::NotRegistered`] for a free or
    /// nonexistent slot.
    pub fn unregister(&mut self, policy: PolicyId) -> Result<(), SelectError> {
        if policy == PolicyId::MOST_R_DATA {
            return Err(SelectError::BuiltIn);
        }
        match self.slots.get_mut(policy.index()) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(SelectError::NotRegistered { policy }),
        }
    }

    /// Makes `policy` the current policy (the reference's
    /// `starpu_mpi_node_selection_set_current_policy`).
    ///
    /// # Errors
    ///
    /// [`SelectError::NotRegistered`] if the slot holds no policy; the current policy is
    /// unchanged.
    pub fn set_current(&mut self, policy: PolicyId) -> Result<(), SelectError> {
        if self.is_registered(policy) {
            self.current = policy;
            Ok(())
        } else {
            Err(SelectError::NotRegistered { policy })
        }
    }

    /// Runs `policy` (`None`: the current one) on a task's accesses and returns the rank that
    /// runs the task (the reference's `_starpu_mpi_select_node`).
    ///
    /// # Errors
    ///
    /// [`SelectError::NotRegistered`] if the slot holds no policy,
    /// [`SelectError::OutOfRange`] if the policy returns a rank `≥ nranks`.
    pub fn select(
        &self,
        policy: Option<PolicyId>,
        me: Rank,
        nranks: u32,
        accesses: &[Access],
    ) -> Result<Rank, SelectError> {
        let policy = policy.unwrap_or(self.current);
        let f = self
            .get(policy)
            .ok_or(SelectError::NotRegistered { policy })?;
        let rank = f(me, nranks, accesses);
        if rank.0 < nranks {
            Ok(rank)
        } else {
            Err(SelectError::OutOfRange { rank, nranks })
        }
    }
}

/// The built-in policy `STARPU_MPI_NODE_SELECTION_MOST_R_DATA`: the rank that owns the most
/// bytes the task would otherwise have to move.
///
/// For each access that is [`known`](Access::known) on this rank and whose owner is a rank
/// (not [`PerNode`](crate::types::Owner::PerNode)), the datum's size is added to its owner's
/// score once if the mode contains [`AccessMode::R`] and once more if it contains
/// [`AccessMode::W`] (it would have to be sent back), so RW counts twice. REDUX alone,
/// SCRATCH and COMMUTE add nothing, as in the reference (`mode & STARPU_R`,
/// `mode & STARPU_W`). The highest score wins; ties go to the lowest rank; if every score is
/// zero (no data, or only per-node, unknown or zero-sized data) the task runs on rank 0.
///
/// Owners `≥ nranks` are ignored (the reference would index out of bounds); `me` is unused.
/// Scores saturate at `u64::MAX`. Allocation-free: the candidates are the owners that appear
/// in `accesses`, each scored by a pass over the slice (quadratic in the number of accesses,
/// independent of the number of ranks).
pub fn most_r_data(me: Rank, nranks: u32, accesses: &[Access]) -> Rank {
    let _ = me;
    let scored_owner = |a: &Access| a.owner.rank().filter(|r| a.known && r.0 < nranks);
    let weight = |a: &Access| {
        let times =
            u64::from(a.mode.contains(AccessMode::R)) + u64::from(a.mode.contains(AccessMode::W));
        a.size.saturating_mul(times)
    };

    let mut best = Rank(0);
    let mut best_score = 0u64;
    for (i, a) in accesses.iter().enumerate() {
        let Some(owner) = scored_owner(a) else {
            continue;
        };
        let seen = accesses
            .iter()
            .take(i)
            .any(|b| scored_owner(b) == Some(owner));
        if seen {
            continue;
        }
        let score = accesses
            .iter()
            .skip(i)
            .filter(|b| scored_owner(b) == Some(owner))
            .fold(0u64, |sum, b| sum.saturating_add(weight(b)));
        if score > best_score || (score == best_score && score > 0 && owner < best) {
            best = owner;
            best_score = score;
        }
    }
    best
}

#[cfg(test)]
mod tests;
