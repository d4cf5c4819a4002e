//! The fast path for small messages: pure decisions (protocol §19).
//!
//! The envelope protocol costs a small message a 24-byte header, a copy into the
//! envelope and a copy out of it, and a match in the core. Where a message needs none of
//! that, it travels as its payload alone on a physical tag derived from its user tag
//! (its **fast tag**, [`TagSpace::fast`]) and is received straight into the receive's
//! buffer, like a plain `MPI_Isend`/`MPI_Irecv` pair.
//!
//! # The rule
//!
//! A user tag `t` on communicator `c` **has a fast tag** when the fast path is
//! [`enabled`], `t` lies in `0..fast_len` of the tag space and `c` is one of the
//! [`Config::fast_comms`] communicators that the transport keeps apart. For every key
//! (`c`, source, `t`) with a fast tag `F`:
//!
//! 1. **Every message of the key puts exactly one message on `F`, in send order.** A
//!    standard send of 1 to [`Config::fast_limit`] bytes sends its payload there and
//!    nothing else ([`Route::Fast`]). Any other message of the key (empty, longer,
//!    synchronous) sends an empty message there, a **marker**, and goes through the
//!    envelope path as before ([`Route::Marked`]).
//! 2. **Every receive of the key is posted on `F`, in the key's receive order**, for
//!    [`recv_size`] bytes. A message of at least one byte completes it (a
//!    longer one than its capacity fails it with `Truncated`). A marker says that its
//!    message is the key's next envelope message: it then waits for that one.
//! 3. **The envelope messages of the key go to the marked receives in their posting
//!    order**: an envelope message is matched only with the oldest receive of its key
//!    still posted, and only once that receive got its marker; until then it waits as
//!    early data.
//!
//! Why the order is MPI's: by 1 and MPI's non-overtaking rule on (communicator, source,
//! `F`), the *i*-th message the receiver takes from `F` is the one the *i*-th message of
//! the key put there, and by 2 it lands in the *i*-th receive. So a fast message reaches
//! the receive of its rank in the key's order, and the *j*-th marked receive is the
//! receive of the key's *j*-th envelope message. Envelope messages of one key arrive in
//! send order on the envelope tag, and by 3 the *j*-th goes to the *j*-th marked
//! receive. The transport may report completions on `F` in any order: rule 3 waits for
//! the oldest receive, so a later receive's marker never takes an envelope message
//! before an earlier receive is known to be a fast one or a marked one.
//!
//! Nothing is counted and no epoch is needed: the marker *is* the envelope message's
//! place in the order of `F`. User tags without a fast tag (negative, too large) never
//! use it and keep the envelope path unchanged, so 64-bit tags still work everywhere.
//! Both sides decide from values they share ([`Config::fast_limit`], the tag space), so
//! they agree on which keys use `F`: every rank must use the same ones.
//!
//! # With a request limit
//!
//! A fast message waits in the transport, not in the engine, so the engine cannot tell
//! that a receive's message is already here. The adapter's admission (protocol §15)
//! keeps the last receive slot of a [`Config::request_limit`] for a receive whose
//! message is here; for a key with a fast tag it asks the transport whether a message
//! waits on that tag (an `MPI_Iprobe`): one that does is the message, or the marker, of
//! the key's oldest receive not yet posted, since the posted ones took theirs first.
//!
//! ```
//! use starling_core::engine::Config;
//! use starling_core::fast::{self, Route};
//! use starling_core::tags::TagSpace;
//! use starling_core::{CommId, Rank, Tag};
//!
//! let mut config = Config::new(Rank(0), 2, TagSpace::new(32767).unwrap().with_fast());
//! config.fast_limit = 1024;
//! let f = config.tags.fast(Tag(5)).unwrap();
//! let w = CommId::WORLD;
//! assert_eq!(fast::route(&config, w, Tag(5), 8, false), Route::Fast(f));
//! assert_eq!(fast::route(&config, w, Tag(5), 4096, false), Route::Marked(f));
//! assert_eq!(fast::route(&config, w, Tag(5), 8, true), Route::Marked(f));
//! assert_eq!(fast::route(&config, w, Tag(-5), 8, false), Route::Envelope);
//! config.fast_comms = 0; // no communicator of its own in the transport
//! assert_eq!(fast::route(&config, w, Tag(5), 8, false), Route::Envelope);
//! assert_eq!(fast::recv_size(&config, 8), 1024);
//! ```

use crate::engine::io::Config;
use crate::matcher::{Orphan, UnexpectedKind};
#[cfg(doc)]
use crate::tags::TagSpace;
use crate::types::{CommId, PhysTag, Rank, Tag};

/// How a send leaves ([`route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Route {
    /// Its payload alone, on this fast tag.
    Fast(PhysTag),
    /// A marker (an empty message) on this fast tag, then the envelope path.
    Marked(PhysTag),
    /// The envelope path only: its user tag has no fast tag.
    Envelope,
}

/// Whether the fast path runs with `config`: a fast limit and a tag space with a fast
/// class.
pub const fn enabled(config: &Config) -> bool {
    config.fast_limit > 0 && config.tags.fast_len() > 0
}

/// The fast tag of user tag `tag` on communicator `comm`, when the fast path runs there
/// and `tag` has one: the tag every message and every receive of its keys goes through.
/// Only communicators below [`Config::fast_comms`] have one: the transport keeps them
/// apart (the rule needs MPI's order per (communicator, source, fast tag)).
pub const fn fast_tag(config: &Config, comm: CommId, tag: Tag) -> Option<PhysTag> {
    if !enabled(config) || comm.0 >= config.fast_comms {
        return None;
    }
    config.tags.fast(tag)
}

/// How a send of `size` bytes on user tag `tag` and communicator `comm` leaves (rule 1
/// of the [module docs](self)).
pub const fn route(config: &Config, comm: CommId, tag: Tag, size: u64, sync: bool) -> Route {
    match fast_tag(config, comm, tag) {
        None => Route::Envelope,
        Some(f) if !sync && size >= 1 && size <= config.fast_limit as u64 => Route::Fast(f),
        Some(f) => Route::Marked(f),
    }
}

/// The bytes a receive posts on a fast tag, whatever its capacity:
/// [`Config::fast_limit`], the most a fast message holds. Any fast message is received
/// whole (one longer than the capacity then fails the receive instead of being cut to
/// fit), and as one message: a transport that splits long messages into pieces splits
/// a receive as its sender splits the send only when both sizes agree.
pub const fn recv_size(config: &Config, capacity: u64) -> u64 {
    let _ = capacity;
    config.fast_limit as u64
}

/// Whether a receive posted on a fast tag that got `len` bytes got a marker (a fast
/// message has at least one byte).
pub const fn is_marker(len: u64) -> bool {
    len == 0
}

/// What a message found on a fast tag at shutdown, that no receive took, leaves to
/// report: a fast message of `len` bytes on physical tag `tag` from `source` on `comm` is
/// the orphan of its user tag; a marker is nothing (its envelope message is reported as
/// any envelope message never received), nor is a tag outside the fast class.
pub const fn stray(
    config: &Config,
    source: Rank,
    comm: CommId,
    tag: PhysTag,
    len: u64,
) -> Option<Orphan> {
    match config.tags.fast_user_tag(tag) {
        Some(tag) if !is_marker(len) => Some(Orphan {
            comm,
            source,
            tag,
            size: len,
            kind: UnexpectedKind::Eager,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::TagSpace;

    const W: CommId = CommId::WORLD;

    fn config(fast_limit: u32) -> Config {
        let mut c = Config::new(
            Rank(0),
            2,
            TagSpace::with_base(42, 1042).unwrap().with_fast(),
        );
        c.fast_limit = fast_limit;
        c
    }

    #[test]
    fn small_standard_sends_on_tags_with_a_fast_tag_go_fast() {
        let c = config(64);
        let f = c.tags.fast(Tag(3)).unwrap();
        for size in [1, 8, 64] {
            assert_eq!(route(&c, W, Tag(3), size, false), Route::Fast(f));
        }
    }

    #[test]
    fn empty_long_and_synchronous_sends_leave_a_marker() {
        let c = config(64);
        let f = c.tags.fast(Tag(3)).unwrap();
        assert_eq!(route(&c, W, Tag(3), 0, false), Route::Marked(f));
        assert_eq!(route(&c, W, Tag(3), 65, false), Route::Marked(f));
        assert_eq!(route(&c, W, Tag(3), 1, true), Route::Marked(f));
    }

    #[test]
    fn tags_without_a_fast_tag_keep_the_envelope_path() {
        let c = config(64);
        let len = i64::from(c.tags.fast_len());
        assert_eq!(len, 500);
        for tag in [-1, i64::MIN, len, i64::MAX] {
            assert_eq!(route(&c, W, Tag(tag), 8, false), Route::Envelope);
            assert_eq!(fast_tag(&c, W, Tag(tag)), None);
        }
        assert!(fast_tag(&c, W, Tag(len - 1)).is_some());
    }

    #[test]
    fn off_without_a_limit_or_a_fast_class() {
        assert!(enabled(&config(1)));
        assert!(!enabled(&config(0)));
        assert_eq!(route(&config(0), W, Tag(3), 8, false), Route::Envelope);
        let mut c = config(64);
        c.tags = TagSpace::with_base(42, 1042).unwrap();
        assert!(!enabled(&c));
        assert_eq!(fast_tag(&c, W, Tag(3)), None);
    }

    #[test]
    fn communicators_the_transport_shares_keep_the_envelope_path() {
        let mut c = config(64);
        c.fast_comms = 2;
        assert!(fast_tag(&c, CommId(1), Tag(3)).is_some());
        assert_eq!(fast_tag(&c, CommId(2), Tag(3)), None);
        assert_eq!(route(&c, CommId(16384), Tag(3), 8, false), Route::Envelope);
    }

    #[test]
    fn a_fast_receive_has_room_for_any_fast_message() {
        let c = config(64);
        assert_eq!(recv_size(&c, 0), 64);
        assert_eq!(recv_size(&c, 8), 64);
        assert_eq!(recv_size(&c, 100), 64);
        // Whatever the sender routes fast fits the receive posted for it.
        for size in 0..200 {
            if let Route::Fast(_) = route(&c, W, Tag(1), size, false) {
                assert!(size <= recv_size(&c, 1) && !is_marker(size));
            }
        }
        assert!(is_marker(0));
    }

    #[test]
    fn a_stray_fast_message_is_an_orphan_of_its_user_tag_and_a_stray_marker_nothing() {
        let c = config(64);
        let f = c.tags.fast(Tag(5)).unwrap();
        assert_eq!(
            stray(&c, Rank(1), W, f, 8),
            Some(Orphan {
                comm: W,
                source: Rank(1),
                tag: Tag(5),
                size: 8,
                kind: UnexpectedKind::Eager,
            })
        );
        assert_eq!(stray(&c, Rank(1), W, f, 0), None, "a marker");
        assert_eq!(stray(&c, Rank(1), W, c.tags.envelope(), 8), None);
    }
}
