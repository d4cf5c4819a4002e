//! The runtime's errors.

use starling_core::engine::{RequestError, SubmitError};
use starling_core::{Rank, Tag};

use crate::data::DataError;

/// A point-to-point call, or the request it started, failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// The peer rank is not in the world. Nothing was submitted.
    #[error("{rank} is out of range: the world has {size} ranks")]
    RankOutOfRange {
        /// The rank given.
        rank: Rank,
        /// The number of ranks.
        size: u32,
    },
    /// The data that arrived does not fit the receiving handle (too long or too short):
    /// nothing was copied into it.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The protocol engine refused or failed the request.
    #[error("request failed: {0}")]
    Request(RequestError),
    /// The protocol engine's tables are full: too many requests in flight.
    #[error("cannot submit: {0}")]
    Submit(SubmitError),
    /// Another live handle of this rank already uses this tag.
    #[error("{tag} is already used by another live handle")]
    TagInUse {
        /// The tag.
        tag: Tag,
    },
    /// The tag is one the runtime keeps for its own messages (the negative tags
    /// `i64::MIN ..= i64::MIN + 15`, [`crate::agreement::RESERVED_TAGS`]). Nothing was
    /// submitted: use another tag.
    #[error("{tag} is reserved for the runtime's own messages")]
    ReservedTag {
        /// The tag.
        tag: Tag,
    },
    /// The watchdog gave up: nothing progressed for its timeout while this request was
    /// pending ([`crate::hang`]). The request was abandoned (its handle is released with
    /// its old value), and so is every later one of the rank: the job is failing. The
    /// explanation merges every rank's pending requests.
    #[error("the watchdog gave up on this request; {explanation}")]
    Stalled {
        /// Why nothing moves, one finding per line ([`crate::hang::explain`]).
        explanation: String,
    },
}

impl From<SubmitError> for CommError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::RankOutOfRange { rank, nranks } => {
                Self::RankOutOfRange { rank, size: nranks }
            }
            other => Self::Submit(other),
        }
    }
}

/// What a rank left behind at shutdown; [`crate::run_local`] returns these as an error
/// instead of hanging or aborting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shutdown left {} item(s): {}", leftovers.len(), leftovers.join("; "))]
pub struct ShutdownError {
    /// One line per leftover, naming its rank: orphan messages (source, tag, size), receives that never
    /// completed, requests never waited on.
    pub leftovers: Vec<String>,
}
