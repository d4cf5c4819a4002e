//! Communicators: the world, duplicates and splits (the reference's `comm` examples,
//! `MPI_Comm_split`).
//!
//! A Starling communicator is a [`CommId`] — the label that every message's envelope
//! carries and that the protocol core matches on, with the source and the tag — and a
//! group of world ranks. Matching is kept per communicator: a receive on one never takes
//! a message sent on another, whatever their tags. Every communicator's traffic travels on
//! the transport's own channels (over MPI: Starling's duplicates of `MPI_COMM_WORLD`;
//! see `starling_mpi::transport`), so a split needs no MPI call: the members agree on
//! the group and on the id by exchanging messages.
//!
//! **Ranks.** A [`Comm`] numbers its members from 0 as MPI does and translates:
//! [`Comm::world_rank`], [`Comm::rank_of`]. A transfer is on a communicator as an option
//! of its builder ([`crate::p2p`]): with `.on(&comm)` its peer is numbered in the
//! communicator, as MPI's; with `.comm(comm.id())` it stays a world rank and only the
//! matching changes.
//!
//! **Ids.** [`Context::comm_split`] and [`Comm::dup`] are collective over the parent: every
//! member calls them, in the same order as the other members' calls on communicators they
//! share (MPI's rule). The members agree on the new id: the largest next free id any of
//! them holds; every member then moves past it. So two communicators that share a member
//! never share an id, while disjoint ones (the colors of one split) may. Split and
//! duplicated communicators take ids from 16384 up; [`Context::comm_dup`]'s numbering of
//! world duplicates stays below.

use starling_core::{CommId, Rank, Tag};

use crate::api::context::{Context, RecvOpts, SendOpts};
use crate::error::CommError;
use crate::runtime::interfaces::Vector;
use crate::sync::{Arc, Ordering};

/// The communicator on which members agree on a split, and meet in [`Comm::barrier`]: no
/// application message travels on it.
const INTERNAL: CommId = CommId(u16::MAX);
/// The tag of a split's exchange on [`INTERNAL`].
const SPLIT_TAG: Tag = Tag(0);
/// The tag of [`Comm::barrier`]'s messages on [`INTERNAL`].
const BARRIER_TAG: Tag = Tag(1);

/// A communicator: its [`CommId`], this rank's place in it, and its members.
///
/// Cloning is cheap (the member list is shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm {
    id: CommId,
    rank: Rank,
    /// The members' world ranks, indexed by their rank in the communicator.
    members: Arc<[Rank]>,
}

impl Comm {
    /// The communicator's id (for a transfer's `.comm(id)`, world ranks: [`crate::p2p`]).
    pub fn id(&self) -> CommId {
        self.id
    }

    /// This rank, numbered in the communicator (`MPI_Comm_rank`).
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The number of members (`MPI_Comm_size`).
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }

    /// The world rank of member `rank` of the communicator, if there is one.
    pub fn world_rank(&self, rank: Rank) -> Option<Rank> {
        self.members.get(rank.0 as usize).copied()
    }

    /// The rank in the communicator of world rank `world`, if it is a member
    /// (`MPI_Group_translate_ranks`).
    pub fn rank_of(&self, world: Rank) -> Option<Rank> {
        self.members
            .iter()
            .position(|m| *m == world)
            .map(|r| Rank(r as u32))
    }

    /// The members' world ranks, in the communicator's order.
    pub fn members(&self) -> &[Rank] {
        &self.members
    }

    /// The world rank of member `rank`.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `rank` is not below [`Comm::size`].
    pub(crate) fn world(&self, rank: Rank) -> Result<Rank, CommError> {
        self.world_rank(rank)
            .ok_or_else(|| CommError::RankOutOfRange {
                rank,
                size: self.size(),
            })
    }

    /// Blocks until every member called `barrier` on this communicator (`MPI_Barrier`
    /// of a communicator): the members report to the first, which then releases them. It
    /// does not wait for this rank's pending requests. On the world, [`Context::barrier`]
    /// is cheaper.
    ///
    /// # Errors
    /// A message of the barrier failed.
    pub fn barrier(&self, ctx: &Context) -> Result<(), CommError> {
        if self.size() == 1 || ctx.fake.load(Ordering::SeqCst) {
            return Ok(());
        }
        let token = ctx.register(Vector::<u8>::zeros(1));
        let opts = SendOpts {
            comm: INTERNAL,
            ..SendOpts::default()
        };
        let ropts = RecvOpts {
            comm: INTERNAL,
            ..RecvOpts::default()
        };
        let first = self.members[0];
        if self.rank.0 == 0 {
            let others = &self.members[1..];
            let arrived = others
                .iter()
                .map(|m| ctx.start_recv(&token, *m, BARRIER_TAG, ropts))
                .collect::<Result<Vec<_>, _>>()?;
            for r in arrived {
                r.wait()?;
            }
            let released = others
                .iter()
                .map(|m| ctx.start_send(&token, *m, BARRIER_TAG, opts))
                .collect::<Result<Vec<_>, _>>()?;
            for r in released {
                r.wait()?;
            }
        } else {
            ctx.start_send(&token, first, BARRIER_TAG, opts)?.wait()?;
            ctx.start_recv(&token, first, BARRIER_TAG, ropts)?.wait()?;
        }
        Ok(())
    }

    /// A new communicator with the same members in the same order and its own matching
    /// (`MPI_Comm_dup`). Collective over this communicator (see the [module](self)).
    ///
    /// # Errors
    /// A message of the members' agreement failed.
    pub fn dup(&self, ctx: &Context) -> Result<Self, CommError> {
        let key = i64::from(self.rank.0);
        ctx.comm_split(self, Some(0), key)
            .map(|c| c.expect("every member passed a color"))
    }
}

impl Context {
    /// The world communicator: every rank, numbered as in the world.
    pub fn world(&self) -> Comm {
        Comm {
            id: CommId::WORLD,
            rank: self.rank,
            members: (0..self.size).map(Rank).collect(),
        }
    }

    /// Splits `parent` (`MPI_Comm_split`): the members that pass the same `color` form a
    /// new communicator, numbered by increasing `key` (ties by their rank in `parent`);
    /// a member that passes `None` (`MPI_UNDEFINED`) gets `None`.
    ///
    /// Collective over `parent`: every member calls it, in the same order as the other
    /// members' calls on communicators they share. It blocks until every member of
    /// `parent` called it: each sends the others its color, key and next free id (a
    /// message per pair, on an internal communicator). The new communicator's id is the
    /// largest of those ids (see the [module](crate::comm) on ids); the colors of one
    /// split may share it, as they share no member.
    ///
    /// With the fake rank of [`crate::run_fake`], where no message arrives, every member
    /// is taken to pass this rank's color and key.
    ///
    /// ```
    /// use starling_std::{run_local, interfaces::Variable};
    /// use starling_core::{Rank, Tag};
    ///
    /// let sums = run_local(4, |ctx| {
    ///     let world = ctx.world();
    ///     // Even and odd world ranks, each half numbered in reverse.
    ///     let half = ctx
    ///         .comm_split(&world, Some(ctx.rank().0 % 2), -i64::from(ctx.rank().0))?
    ///         .expect("every rank passed a color");
    ///     assert_eq!(half.size(), 2);
    ///     // Member 0 of each half is its larger world rank; it receives from member 1.
    ///     let v = ctx.register(Variable::new(ctx.rank().0));
    ///     if half.rank() == Rank(0) {
    ///         ctx.recv(&v, Rank(1), Tag(5)).on(&half).wait()?;
    ///     } else {
    ///         ctx.send(&v, Rank(0), Tag(5)).on(&half).wait()?;
    ///     }
    ///     Ok::<_, starling_std::CommError>((half.rank(), ctx.unregister(v).get()))
    /// })?;
    /// // World ranks 2 and 3 lead the halves and got 0 and 1 from their partners.
    /// assert_eq!(sums[2].as_ref().unwrap(), &(Rank(0), 0));
    /// assert_eq!(sums[3].as_ref().unwrap(), &(Rank(0), 1));
    /// # Ok::<(), starling_std::ShutdownError>(())
    /// ```
    ///
    /// # Errors
    /// A message of the members' agreement failed.
    ///
    /// # Panics
    /// When this rank is not a member of `parent`, or when the ids are exhausted (49 151
    /// splits and duplicates in a job).
    pub fn comm_split(
        &self,
        parent: &Comm,
        color: Option<u32>,
        key: i64,
    ) -> Result<Option<Comm>, CommError> {
        assert_eq!(
            parent.world_rank(parent.rank),
            Some(self.rank),
            "comm_split on a communicator this rank is not a member of"
        );
        let proposal = i64::from(self.next_split.load(Ordering::SeqCst));
        let color_word = color.map_or(-1, i64::from);
        let mine = [color_word, key, proposal];
        let mut all = vec![mine; parent.members.len()];
        if !self.fake.load(Ordering::SeqCst) {
            self.exchange(parent, mine, &mut all)?;
        }
        let id = all.iter().map(|m| m[2]).max().unwrap_or(proposal);
        let id = u32::try_from(id).unwrap_or(u32::MAX);
        self.next_split
            .fetch_max(id.saturating_add(1), Ordering::SeqCst);
        let id = CommId(
            u16::try_from(id)
                .ok()
                .filter(|id| *id != INTERNAL.0)
                .expect("communicator ids exhausted: 49151 splits and duplicates at most"),
        );
        if color.is_none() {
            return Ok(None);
        }
        // Members of this color, by (key, parent rank).
        let mut group: Vec<(i64, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, m)| m[0] == color_word)
            .map(|(r, m)| (m[1], r))
            .collect();
        group.sort_unstable();
        let members: Arc<[Rank]> = group.iter().map(|&(_, r)| parent.members[r]).collect();
        let rank = members
            .iter()
            .position(|m| *m == self.rank)
            .expect("this rank passed its own color");
        Ok(Some(Comm {
            id,
            rank: Rank(rank as u32),
            members,
        }))
    }

    /// Sends `mine` to every other member of `parent` and receives theirs into `all`
    /// (indexed by rank in `parent`).
    fn exchange(
        &self,
        parent: &Comm,
        mine: [i64; 3],
        all: &mut [[i64; 3]],
    ) -> Result<(), CommError> {
        let me = parent.rank.0 as usize;
        let out = self.register(Vector::from_vec(mine.to_vec()));
        let opts = SendOpts {
            comm: INTERNAL,
            ..SendOpts::default()
        };
        let ropts = RecvOpts {
            comm: INTERNAL,
            ..RecvOpts::default()
        };
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for (r, m) in parent.members.iter().enumerate() {
            if r == me {
                continue;
            }
            sends.push(self.start_send(&out, *m, SPLIT_TAG, opts)?);
            let h = self.register(Vector::<i64>::zeros(3));
            recvs.push((r, self.start_recv(&h, *m, SPLIT_TAG, ropts)?, h));
        }
        for s in sends {
            s.wait()?;
        }
        for (r, req, h) in recvs {
            req.wait()?;
            let got = self.unregister(h);
            let v = got.as_slice();
            all[r] = [v[0], v[1], v[2]];
        }
        all[me] = mine;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
