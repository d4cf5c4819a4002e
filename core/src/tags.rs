//! Physical tags, and the allocator of user-tag ranges.
//!
//! Two tag spaces meet here and must not be confused:
//!
//! - A **user tag** ([`Tag`], `i64`) labels a message or a datum for the application.
//!   It travels inside the [envelope](crate::envelope) and is matched by the core, so
//!   it is never limited by the MPI library: all of `i64` is legal (reference §9).
//!   [`TagAllocator`] hands out ranges of user tags that every rank agrees on.
//! - A **physical tag** ([`PhysTag`], `i32`) is what the transport passes to
//!   `MPI_Isend`/`MPI_Irecv`. It must stay in `0..=tag_ub`, where `tag_ub` is the
//!   transport's `MPI_TAG_UB` (at least [`MIN_TAG_UB`] in any conforming MPI).
//!   [`TagSpace`] computes every physical tag the protocol uses.
//!
//! # The physical layout
//!
//! [`TagSpace`] is built once at start-up from the transport's bound and a base
//! (default [`DEFAULT_BASE`] = 42, the reference's `_starpu_mpi_tag`, internals §3.1):
//!
//! | tags | class | carries |
//! | --- | --- | --- |
//! | `0..base` | (none) | never used by Starling; free for the application's own MPI traffic on the same communicator (a duplicated communicator is still the safer choice, §12.11) |
//! | `base` | [`TagClass::Envelope`] | every envelope, data and acknowledgement alike; the receiver keeps one receive posted here per communicator |
//! | `base+1 ..` (first half) | [`TagClass::Data`] | payloads of standard sends, on [`data(msg)`](TagSpace::data) |
//! | second half `..= tag_ub` | [`TagClass::Sync`] | payloads of synchronous sends, on [`sync(msg)`](TagSpace::sync) |
//!
//! The two payload classes have the same length, [`class_len`](TagSpace::class_len)
//! `= (tag_ub - base) / 2`; when `tag_ub - base` is odd, `tag_ub` itself stays unused.
//! A payload's tag is its class start plus `msg % class_len`, where `msg` is the
//! [`MsgId`] carried in its envelope. [`Eager`](crate::envelope::Kind::Eager)
//! messages have no separate payload and so no payload tag.
//!
//! # Why two payload classes are enough, and why reusing a tag is safe
//!
//! MPI pairs a message with a receive on (communicator, source, tag), and between one
//! sender and one receiver it never lets a message overtake an earlier one that matches
//! the same receive (the *non-overtaking* rule). The core posts every payload receive
//! with an explicit source and an exact physical tag, so correctness reduces to this:
//! **per (communicator, source, class), the receiver posts its payload receives in the
//! order in which the sender sends those payloads.** Each class is built to keep it:
//!
//! - **Data.** The sender sends each payload right after its envelope, and sends
//!   (envelope, payload) pairs to one destination in one order. The receiver handles
//!   envelopes from a source one at a time, in arrival (= send) order, and posts the
//!   payload receive of envelope *k* before it consumes envelope *k+1* (internals
//!   §3.4, §12.1). So data payload receives are posted in data payload send order.
//! - **Sync.** The receiver posts a sync payload receive right when it sends the
//!   [`SyncReady`](crate::envelope::Kind::SyncReady) acknowledgement, so in
//!   acknowledgement order. Acknowledgements travel on the envelope tag and arrive in
//!   that order; the sender must send each sync payload as it handles the
//!   acknowledgement, so in acknowledgement order too.
//!
//! The two orders do *not* agree with each other: a sync payload answers an earlier
//! envelope but is sent after later data payloads (it waits for the receiver's
//! application to post its receive), while the receiver may already have posted its
//! receive for it. On one shared tag the data payload would land in the sync receive.
//! That is why the classes are disjoint, and why the envelope tag is disjoint from
//! both (the envelope receive must never swallow a payload).
//!
//! Within a class the rule above already pairs every payload with its receive even
//! when *all* in-flight messages share one physical tag; in particular two in-flight
//! messages whose ids are equal modulo `class_len` may safely share a tag, so the id
//! can wrap around the class. Spreading ids over many tags is not needed for
//! correctness: it lets a trace, or a hang report listing pending receives, pair each
//! payload with its envelope. A tiny bound (such as `tag_ub = base + 2`, one tag per
//! class) is therefore legal and is a good test of the ordering rules.
//!
//! # The user-tag allocator
//!
//! [`TagAllocator`] is the reference's `starpu_mpi_tags_allocate/free` (1.4+, internals
//! §9): a sorted list of allocated `[start, end)` ranges; an allocation returns the
//! lowest start with room. Tag allocation is a replicated decision (§12.4): every rank
//! must allocate and free in the same order, and then gets the same tags, since the
//! result depends on nothing but that order.

use core::fmt;
use core::ops::RangeInclusive;

use heapless::Vec;

use crate::types::{MsgId, PhysTag, Tag};

/// The smallest `MPI_TAG_UB` the MPI standard guarantees (so [`TagSpace::new`] never
/// fails on a conforming MPI).
pub const MIN_TAG_UB: i32 = 32767;

/// The default envelope tag: 42, the reference's `_starpu_mpi_tag`.
pub const DEFAULT_BASE: i32 = 42;

/// Which part of the [`TagSpace`] a physical tag belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TagClass {
    /// The envelope tag ([`TagSpace::envelope`]).
    Envelope,
    /// A payload tag of a standard send ([`TagSpace::data`]).
    Data,
    /// A payload tag of a synchronous send ([`TagSpace::sync`]).
    Sync,
    /// The fast tag of a user tag ([`TagSpace::fast`]): its fast messages and markers.
    Fast,
}

/// The physical tags of the protocol, derived from the transport's upper bound.
///
/// See the [module docs](self) for the layout and why it is correct.
///
/// ```
/// use starling_core::tags::{TagClass, TagSpace, MIN_TAG_UB};
/// use starling_core::MsgId;
///
/// let tags = TagSpace::new(MIN_TAG_UB).unwrap();
/// assert_eq!(tags.envelope().0, 42);
/// assert_eq!(tags.data(MsgId(0)).0, 43);
/// assert_eq!(tags.classify(tags.sync(MsgId(7))), Some(TagClass::Sync));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TagSpace {
    /// The envelope tag; `>= 0`.
    base: i32,
    /// Tags per payload class; `>= 1` and `base + 2 * class_len <= tag_ub`.
    class_len: i32,
    /// The transport's bound.
    tag_ub: i32,
    /// Tags of the fast class ([`TagSpace::with_fast`]), right after the sync class;
    /// 0 when the space has none.
    fast_len: i32,
}

impl TagSpace {
    /// The tag space for a transport whose largest tag is `tag_ub`, with the envelope
    /// on [`DEFAULT_BASE`].
    ///
    /// # Errors
    ///
    /// [`TagError::BoundTooSmall`] if `tag_ub < DEFAULT_BASE + 2`; never for a
    /// conforming MPI (its bound is at least [`MIN_TAG_UB`]).
    pub const fn new(tag_ub: i32) -> Result<Self, TagError> {
        Self::with_base(DEFAULT_BASE, tag_ub)
    }

    /// The tag space with the envelope on `base` (the reference's
    /// `starpu_mpi_set_communication_tag`) and the largest tag `tag_ub`.
    ///
    /// # Errors
    ///
    /// - [`TagError::NegativeBase`] if `base < 0`;
    /// - [`TagError::BoundTooSmall`] if `tag_ub < base + 2` (one tag per class at least).
    pub const fn with_base(base: i32, tag_ub: i32) -> Result<Self, TagError> {
        if base < 0 {
            return Err(TagError::NegativeBase { base });
        }
        let needed = base as i64 + 2;
        if (tag_ub as i64) < needed {
            return Err(TagError::BoundTooSmall { tag_ub, needed });
        }
        // 2 <= tag_ub - base <= i32::MAX: no overflow.
        let class_len = (tag_ub - base) / 2;
        Ok(Self {
            base,
            class_len,
            tag_ub,
            fast_len: 0,
        })
    }

    /// The same space with a **fast class** (§19 of the protocol, [`crate::fast`]): the
    /// upper half of `base+1..=tag_ub` carries the messages of user tags
    /// `0..fast_len`, one physical tag per user tag ([`TagSpace::fast`]); the data and
    /// sync classes share the lower half. Unchanged when the bound leaves no room for
    /// one tag per class (`tag_ub < base + 3`).
    ///
    /// ```
    /// use starling_core::tags::{TagClass, TagSpace, MIN_TAG_UB};
    /// use starling_core::Tag;
    ///
    /// let tags = TagSpace::new(MIN_TAG_UB).unwrap().with_fast();
    /// assert_eq!(tags.fast_len(), 16362);
    /// let t = tags.fast(Tag(7)).unwrap();
    /// assert_eq!(tags.classify(t), Some(TagClass::Fast));
    /// assert_eq!(tags.fast(Tag(-1)), None);
    /// ```
    #[must_use]
    pub const fn with_fast(self) -> Self {
        let total = self.tag_ub - self.base;
        if total < 3 {
            return self;
        }
        let fast_len = total / 2;
        Self {
            base: self.base,
            class_len: (total - fast_len) / 2,
            tag_ub: self.tag_ub,
            fast_len,
        }
    }

    /// How many user tags have a fast tag: `0..fast_len` (0 when the space has no fast
    /// class).
    #[inline]
    pub const fn fast_len(&self) -> u32 {
        self.fast_len.unsigned_abs()
    }

    /// The user tag whose fast tag is `tag` (the inverse of [`TagSpace::fast`]); `None`
    /// for a tag outside the fast class.
    pub const fn fast_user_tag(&self, tag: PhysTag) -> Option<Tag> {
        let offset = tag.0 as i64 - self.fast_start() as i64;
        if offset < 0 || offset >= self.fast_len as i64 {
            return None;
        }
        Some(Tag(offset))
    }

    /// The physical tag of user tag `tag` in the fast class, `fast_start + tag`; `None`
    /// when `tag` is outside `0..fast_len` (negative, too large, or no fast class).
    #[inline]
    pub const fn fast(&self, tag: Tag) -> Option<PhysTag> {
        if tag.0 < 0 || tag.0 >= self.fast_len as i64 {
            return None;
        }
        // 0 <= tag < fast_len <= i32::MAX, and fast_start + tag <= tag_ub.
        Some(PhysTag(self.fast_start() + tag.0 as i32))
    }

    /// The tag every envelope travels on.
    #[inline]
    pub const fn envelope(&self) -> PhysTag {
        PhysTag(self.base)
    }

    /// The tag the payload of standard send `msg` travels on:
    /// `base + 1 + msg % class_len`.
    #[inline]
    pub const fn data(&self, msg: MsgId) -> PhysTag {
        PhysTag(self.data_start() + self.offset(msg))
    }

    /// The tag the payload of synchronous send `msg` travels on:
    /// `base + 1 + class_len + msg % class_len`.
    #[inline]
    pub const fn sync(&self, msg: MsgId) -> PhysTag {
        PhysTag(self.sync_start() + self.offset(msg))
    }

    /// Which class `tag` belongs to; `None` for tags the protocol never uses (below the
    /// base, the spare top tag, beyond the bound, negative).
    pub const fn classify(&self, tag: PhysTag) -> Option<TagClass> {
        let t = tag.0 as i64;
        let data = self.data_start() as i64;
        let sync = data + self.class_len as i64;
        let end = sync + self.class_len as i64;
        if t == self.base as i64 {
            Some(TagClass::Envelope)
        } else if t >= data && t < sync {
            Some(TagClass::Data)
        } else if t >= sync && t < end {
            Some(TagClass::Sync)
        } else if t >= end && t < end + self.fast_len as i64 {
            Some(TagClass::Fast)
        } else {
            None
        }
    }

    /// The transport's largest tag, as given at construction.
    #[inline]
    pub const fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    /// The envelope tag's value (the base of the layout).
    #[inline]
    pub const fn base(&self) -> i32 {
        self.base
    }

    /// How many tags each payload class holds (`(tag_ub - base) / 2`, at least 1).
    #[inline]
    pub const fn class_len(&self) -> u32 {
        self.class_len.unsigned_abs()
    }

    /// Every data-payload tag.
    pub const fn data_tags(&self) -> RangeInclusive<PhysTag> {
        let start = self.data_start();
        PhysTag(start)..=PhysTag(start + (self.class_len - 1))
    }

    /// Every sync-payload tag.
    pub const fn sync_tags(&self) -> RangeInclusive<PhysTag> {
        let start = self.sync_start();
        PhysTag(start)..=PhysTag(start + (self.class_len - 1))
    }

    #[inline]
    const fn data_start(&self) -> i32 {
        self.base + 1
    }

    #[inline]
    const fn sync_start(&self) -> i32 {
        self.base + 1 + self.class_len
    }

    #[inline]
    const fn fast_start(&self) -> i32 {
        self.base + 1 + 2 * self.class_len
    }

    /// `msg % class_len`, in `0..class_len` (so it fits `i32`).
    #[inline]
    const fn offset(&self, msg: MsgId) -> i32 {
        (msg.0 % self.class_len()) as i32
    }
}

/// A [`TagSpace`] cannot be built: a start-up configuration error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TagError {
    /// The transport's bound leaves no room for the envelope tag and one tag per
    /// payload class.
    ///
    /// Happens only with a non-conforming transport or a base close to the bound:
    /// lower the base, or use a transport with a larger `MPI_TAG_UB`.
    BoundTooSmall {
        /// The bound given.
        tag_ub: i32,
        /// The smallest bound that works with the base (`base + 2`).
        needed: i64,
    },
    /// The base (envelope tag) is negative; MPI tags are never negative.
    ///
    /// Choose a base in `0..=tag_ub - 2`.
    NegativeBase {
        /// The base given.
        base: i32,
    },
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BoundTooSmall { tag_ub, needed } => write!(
                f,
                "the transport's tag bound {tag_ub} is too small: the tag layout needs at least {needed}"
            ),
            Self::NegativeBase { base } => {
                write!(f, "the envelope tag {base} is negative")
            }
        }
    }
}

impl core::error::Error for TagError {}

/// Allocates ranges of user tags identically on every rank (the reference's
/// `starpu_mpi_tags_allocate`/`starpu_mpi_tags_free`).
///
/// Holds at most `N` allocated ranges, sorted and disjoint, within `0..=max` (by
/// default all non-negative tags, `0..=i64::MAX`). [`allocate`](Self::allocate)
/// returns the lowest start with room, so the result depends only on the sequence of
/// calls: ranks that allocate and free in the same order get the same tags.
///
/// The bound is a value given at construction (the reference stores the *address* of
/// the MPI attribute as its bound, internals §9 and §12.10; that cannot happen here).
///
/// ```
/// use starling_core::tags::TagAllocator;
/// use starling_core::Tag;
///
/// let mut tags = TagAllocator::<4>::new();
/// assert_eq!(tags.allocate(10), Ok(Tag(0)));
/// assert_eq!(tags.allocate(5), Ok(Tag(10)));
/// tags.free(Tag(0)).unwrap();
/// assert_eq!(tags.allocate(3), Ok(Tag(0)));  // the lowest gap with room
/// ```
#[derive(Clone, Debug)]
pub struct TagAllocator<const N: usize> {
    /// Allocated `[start, end)` ranges, sorted by start, disjoint, non-empty, all
    /// within `0..limit`.
    ranges: Vec<(u64, u64), N>,
    /// One past the largest allocatable tag (at most `2^63`).
    limit: u64,
}

impl<const N: usize> Default for TagAllocator<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> TagAllocator<N> {
    /// An allocator over all non-negative tags, `0..=i64::MAX`.
    pub const fn new() -> Self {
        Self::with_max(Tag(i64::MAX))
    }

    /// An allocator over `0..=max` (leaving larger tags to the application); empty if
    /// `max` is negative.
    pub const fn with_max(max: Tag) -> Self {
        let limit = if max.0 < 0 { 0 } else { max.0 as u64 + 1 };
        Self {
            ranges: Vec::new(),
            limit,
        }
    }

    /// Allocates `n` consecutive tags and returns the first: the lowest tag `t` such
    /// that `t..t + n` is free.
    ///
    /// # Errors
    ///
    /// - [`TagAllocError::Zero`] if `n` is 0;
    /// - [`TagAllocError::Full`] if `N` ranges are already allocated;
    /// - [`TagAllocError::Exhausted`] if no free gap holds `n` tags.
    ///
    /// On error nothing changes.
    pub fn allocate(&mut self, n: u64) -> Result<Tag, TagAllocError> {
        if n == 0 {
            return Err(TagAllocError::Zero);
        }
        if self.ranges.is_full() {
            return Err(TagAllocError::Full { capacity: N });
        }
        let mut lo = 0u64;
        let mut at = None;
        let mut largest_free = 0u64;
        for (i, &(start, end)) in self.ranges.iter().enumerate() {
            let gap = start.saturating_sub(lo);
            if gap >= n {
                at = Some(i);
                break;
            }
            largest_free = largest_free.max(gap);
            lo = end;
        }
        let at = match at {
            Some(i) => i,
            None => {
                let gap = self.limit.saturating_sub(lo);
                if gap < n {
                    return Err(TagAllocError::Exhausted {
                        requested: n,
                        largest_free: largest_free.max(gap),
                    });
                }
                self.ranges.len()
            }
        };
        // `lo + n <= limit <= 2^63`, so neither overflows and `lo` fits `i64`.
        let tag = Tag(lo as i64);
        self.ranges
            .insert(at, (lo, lo + n))
            .map_err(|_| TagAllocError::Full { capacity: N })?;
        Ok(tag)
    }

    /// Frees the range that [`allocate`](Self::allocate) returned as `start`.
    ///
    /// # Errors
    ///
    /// [`TagAllocError::NotAllocated`] if no allocated range starts at `start`
    /// (never allocated, already freed, or a tag inside a range); nothing changes.
    pub fn free(&mut self, start: Tag) -> Result<(), TagAllocError> {
        let found = u64::try_from(start.0)
            .ok()
            .and_then(|s| self.ranges.binary_search_by_key(&s, |&(lo, _)| lo).ok());
        match found {
            Some(i) => {
                self.ranges.remove(i);
                Ok(())
            }
            None => Err(TagAllocError::NotAllocated { start }),
        }
    }

    /// Whether `tag` lies in an allocated range.
    pub fn is_allocated(&self, tag: Tag) -> bool {
        let Ok(t) = u64::try_from(tag.0) else {
            return false;
        };
        self.ranges.iter().any(|&(lo, hi)| lo <= t && t < hi)
    }

    /// The allocated ranges as `(first tag, count)`, in increasing order.
    pub fn ranges(&self) -> impl Iterator<Item = (Tag, u64)> + '_ {
        // Every start is below `limit <= 2^63`, so it fits `i64`.
        self.ranges
            .iter()
            .map(|&(lo, hi)| (Tag(lo as i64), hi - lo))
    }

    /// How many ranges are allocated.
    #[inline]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no range is allocated.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many ranges can be allocated at once (`N`).
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }
}

/// A [`TagAllocator`] operation failed; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TagAllocError {
    /// [`allocate`](TagAllocator::allocate) was asked for 0 tags: a caller bug (the
    /// reference returns -1). Ask for at least one tag.
    Zero,
    /// No free gap holds the requested number of tags.
    ///
    /// Free ranges no longer needed, or ask for fewer tags.
    Exhausted {
        /// How many tags were requested.
        requested: u64,
        /// The largest free gap (what could still be allocated).
        largest_free: u64,
    },
    /// The allocator already holds its capacity `N` of ranges.
    ///
    /// Free a range, or build the allocator with a larger `N`.
    Full {
        /// The capacity `N`.
        capacity: usize,
    },
    /// [`free`](TagAllocator::free) was given a tag that does not start an allocated
    /// range: a caller bug (double free, or a tag that was never allocated).
    NotAllocated {
        /// The tag given.
        start: Tag,
    },
}

impl fmt::Display for TagAllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Zero => f.write_str("cannot allocate a range of 0 tags"),
            Self::Exhausted {
                requested,
                largest_free,
            } => write!(
                f,
                "no free range of {requested} tags (the largest free range holds {largest_free})"
            ),
            Self::Full { capacity } => {
                write!(f, "the tag allocator already holds its {capacity} ranges")
            }
            Self::NotAllocated { start } => {
                write!(f, "no allocated tag range starts at {start}")
            }
        }
    }
}

impl core::error::Error for TagAllocError {}

#[cfg(test)]
mod tests;
