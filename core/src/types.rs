//! The vocabulary shared by every module: ids, ranks, tags, priorities, access modes.
//!
//! Every id is a small `Copy` newtype so that a rank can never be passed where a tag is
//! expected. None of them owns anything: the core never holds payload bytes, the adapter
//! owns every buffer and refers to it through these ids.

use core::fmt;

/// A process in the job: an MPI rank, or a rank of the in-process cluster.
///
/// Ranks are numbered `0..size` within a communicator, as in MPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rank(pub u32);

impl Rank {
    /// The rank as an index into per-rank arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}", self.0)
    }
}

/// A user tag: the 64-bit label the application gives a message or a datum.
///
/// User tags travel inside envelopes and are matched by the core, so they are never
/// limited by the MPI library's `MPI_TAG_UB` (reference §9). All of `i64` is legal,
/// negative values included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Tag(pub i64);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tag {}", self.0)
    }
}

/// A communicator, as numbered by the runtime.
///
/// Every rank registers its communicators in the same order, so the same number names
/// the same communicator everywhere. [`CommId::WORLD`] is always registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CommId(pub u16);

impl CommId {
    /// The world communicator (every rank of the job).
    pub const WORLD: Self = Self(0);
}

impl fmt::Display for CommId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "comm {}", self.0)
    }
}

/// A registered datum (a data handle), as numbered by the runtime of one rank.
///
/// The core never sees the data itself, only this id, the datum's owner, tag and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DataId(pub u32);

impl fmt::Display for DataId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "data {}", self.0)
    }
}

/// A request (a send or a receive) in a [`request::Slab`](crate::request::Slab).
///
/// The generation makes a stale id harmless: once a request completes and its slot is
/// reused, the old id no longer resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReqId {
    /// The slot in the slab.
    pub index: u32,
    /// How many times the slot was handed out before this request.
    pub generation: u32,
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req {}#{}", self.index, self.generation)
    }
}

/// The internal id of a data message, carried in its envelope.
///
/// The sender numbers its data messages to each destination in sequence; the receiver
/// derives from it the physical tag the payload travels on
/// ([`TagSpace`](crate::tags::TagSpace)), and a ready acknowledgement names the
/// synchronous send it answers by this id, so two handshakes can never be confused
/// (the reference's sync-table collision, internals §12.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MsgId(pub u32);

impl MsgId {
    /// The id that follows this one (wrapping).
    #[inline]
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.wrapping_add(1))
    }
}

/// A tag as the transport sees it: what is passed to `MPI_Isend`/`MPI_Irecv`.
///
/// Physical tags are always in `0..=tag_ub` of the transport; they are computed by
/// [`TagSpace`](crate::tags::TagSpace) and never chosen by the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PhysTag(pub i32);

/// A priority: higher runs (and sends) first; equal priorities keep submission order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Priority(pub i32);

impl Priority {
    /// The default priority (0), as in StarPU.
    pub const DEFAULT: Self = Self(0);
}

/// Who owns a datum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Owner {
    /// One rank holds the reference value.
    Rank(Rank),
    /// Every rank holds its own instance (the reference's `STARPU_MPI_PER_NODE`): a
    /// task writing it runs on every rank, and it is never transferred.
    PerNode,
}

impl Owner {
    /// The owning rank, if one rank owns the datum.
    #[inline]
    pub const fn rank(self) -> Option<Rank> {
        match self {
            Self::Rank(r) => Some(r),
            Self::PerNode => None,
        }
    }
}

bitflags::bitflags! {
    /// How a task (or a transfer) accesses a datum.
    ///
    /// The reference's `STARPU_R`, `STARPU_W`, `STARPU_RW`, `STARPU_SCRATCH`,
    /// `STARPU_REDUX`, `STARPU_COMMUTE` and `STARPU_SSEND`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct AccessMode: u8 {
        /// The task reads the datum.
        const R = 1 << 0;
        /// The task writes the datum.
        const W = 1 << 1;
        /// The task reads and writes the datum.
        const RW = Self::R.bits() | Self::W.bits();
        /// A per-worker scratch buffer: never read, never transferred.
        const SCRATCH = 1 << 2;
        /// The task contributes to a reduction of the datum.
        const REDUX = 1 << 3;
        /// Writers of the datum may run in any order among themselves.
        const COMMUTE = 1 << 4;
        /// Transfers of the datum for this task use synchronous sends (no early data).
        const SSEND = 1 << 5;
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for AccessMode {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "AccessMode({=u8:#04x})", self.bits())
    }
}

impl AccessMode {
    /// Whether the task reads the current value (R or RW; not SCRATCH, not REDUX alone).
    #[inline]
    pub const fn reads(self) -> bool {
        self.contains(Self::R)
    }

    /// Whether the task produces a new value (W, RW or REDUX).
    #[inline]
    pub const fn writes(self) -> bool {
        self.intersects(Self::W.union(Self::REDUX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rw_reads_and_writes() {
        assert!(AccessMode::RW.reads());
        assert!(AccessMode::RW.writes());
        assert!(!AccessMode::W.reads());
        assert!(AccessMode::REDUX.writes());
        assert!(!AccessMode::SCRATCH.reads());
        assert!(!AccessMode::SCRATCH.writes());
    }

    #[test]
    fn msg_id_wraps() {
        assert_eq!(MsgId(u32::MAX).next(), MsgId(0));
    }
}

/// One datum accessed by a task, as this rank sees it (the reference's
/// `struct starpu_data_descr` plus what the MPI layer knows of the handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Access {
    /// The datum.
    pub data: DataId,
    /// How the task accesses it.
    pub mode: AccessMode,
    /// Who owns it.
    pub owner: Owner,
    /// Its user tag: the tag its transfers use.
    pub tag: Tag,
    /// Its size in bytes, as scored by [`most_r_data`](crate::select::most_r_data).
    pub size: u64,
    /// Whether the datum is registered on this rank. `false` for a temporary datum that
    /// exists only on some ranks (the reference's `NULL` handle); `owner`, `tag` and `size`
    /// are then ignored. See the [planner's docs](crate::insert).
    pub known: bool,
}

impl Access {
    /// An access to a datum registered on this rank.
    pub const fn new(data: DataId, mode: AccessMode, owner: Owner, tag: Tag, size: u64) -> Self {
        Self {
            data,
            mode,
            owner,
            tag,
            size,
            known: true,
        }
    }

    /// The owning rank if the datum is known here, owned by one rank and read by the task.
    pub(crate) fn read_from(&self) -> Option<Rank> {
        if self.known && self.mode.reads() {
            self.owner.rank()
        } else {
            None
        }
    }

    /// Whether the task writes the datum in W (or RW) mode and the datum is known here.
    pub(crate) fn written_back(&self) -> bool {
        self.known && self.mode.contains(AccessMode::W)
    }
}
