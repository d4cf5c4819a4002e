//! The tags and communicator ids the runtime keeps for itself, in one place: a leaf
//! that every layer may read and that reads nothing of the runtime.
//!
//! * [`RESERVED_TAGS`]: user tags of the runtime's own messages (the agreement check's,
//!   [`GATHER_TAG`] and [`BCAST_TAG`]); point-to-point calls and registrations refuse them.
//! * [`AUTO_TAGS`]: the tags handed out to registrations with an automatic tag.
//! * [`FIRST_SPLIT_ID`]: the first communicator id of a split or duplicated communicator.

use starling_core::Tag;

/// The user tags the runtime keeps for its own messages: point-to-point calls and
/// registrations refuse them ([`CommError::ReservedTag`](crate::CommError::ReservedTag)).
pub const RESERVED_TAGS: core::ops::RangeInclusive<i64> = i64::MIN..=i64::MIN + 15;

/// The tags of registrations with an automatic tag ([`crate::TagChoice::Auto`]):
/// `-2^62 ..= -2^61 - 1` (2^61 tags), far from [`RESERVED_TAGS`] and from the tags
/// applications write by hand (small ones, either sign). They are handed out in
/// registration order from the first, so every rank that registers its data in the
/// same order gives each datum the same tag; a tag is never handed out twice in a run.
/// A registration or [`crate::Context::set_tag`] with an explicit tag in this range is
/// refused ([`CommError::AutoTagRange`](crate::CommError::AutoTagRange)), so an automatic
/// tag never collides with an explicit one; the range running out is
/// [`CommError::AutoTagsExhausted`](crate::CommError::AutoTagsExhausted).
pub const AUTO_TAGS: core::ops::RangeInclusive<i64> = -(1 << 62)..=-(1 << 61) - 1;

/// The tag of the agreement check's messages to rank 0 (in [`RESERVED_TAGS`]).
pub const GATHER_TAG: Tag = Tag(i64::MIN + 1);
/// The tag of the agreement check's messages from rank 0 (in [`RESERVED_TAGS`]).
pub const BCAST_TAG: Tag = Tag(i64::MIN + 2);

/// The first id of a split or duplicated [`Comm`](crate::Comm).
pub const FIRST_SPLIT_ID: u32 = 1 << 14;
