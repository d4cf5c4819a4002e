//! The runtime's errors.

use starling_core::engine::{RequestError, SubmitError};
use starling_core::{DataId, Rank, Tag};

use crate::data::DataError;

/// A point-to-point call, or the request it started, failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// A device value received in place of bytes could not become the handle's value
    /// (its device copy failed): the handle keeps its previous value.
    #[error("a value received on a device could not be delivered: {0}")]
    Device(String),
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
    /// An explicit tag among the automatic ones ([`crate::agreement::AUTO_TAGS`]), which
    /// only registrations with [`crate::TagChoice::Auto`] get. Nothing was registered:
    /// choose a tag outside the range, or let the runtime choose.
    #[error("{tag} is in the automatic tag range: use another tag, or TagChoice::Auto")]
    AutoTagRange {
        /// The tag.
        tag: Tag,
    },
    /// Every automatic tag of this run was handed out ([`crate::agreement::AUTO_TAGS`]:
    /// 2^62 − 16 of them, never reused). Nothing was registered: give the datum an
    /// explicit tag.
    #[error("no automatic tag is left: register with an explicit tag")]
    AutoTagsExhausted,
    /// The watchdog gave up: nothing progressed for its timeout while this request was
    /// pending ([`crate::hang`]). The request was abandoned (its handle is released with
    /// its old value), and so is every later one of the rank: the job is failing. The
    /// explanation merges every rank's pending requests.
    #[error("the watchdog gave up on this request; {explanation}")]
    Stalled {
        /// Why nothing moves, one finding per line ([`crate::hang::explain`]).
        explanation: String,
    },
    /// The data to send were never produced: an earlier transfer that this rank's value
    /// of the datum depends on failed (the first such failure is named). Nothing was sent:
    /// a peer never receives a stale value. Fix the failure named.
    #[error("not sent, the value depends on a failed transfer: {0}")]
    Upstream(Box<TransferError>),
}

/// A task waited on with [`crate::TaskHandle::wait`] did not complete normally.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// The task did not run (nor its callback): a value it reads depends on a transfer
    /// that failed (the first such failure is named). What it writes is poisoned in turn;
    /// [`crate::Context::try_wait_for_all`] and shutdown report the same failure.
    #[error("the task did not run, an input depends on a failed transfer: {0}")]
    Upstream(Box<TransferError>),
    /// The task's kernel or callback panicked, or its data could not be brought back from
    /// a device: the task completed all the same (its successors ran), and shutdown
    /// reports it too.
    #[error("task `{codelet}` {what}")]
    Failed {
        /// The task's codelet.
        codelet: String,
        /// What went wrong (`panicked: …`, `did not run: …`).
        what: String,
    },
}

/// Which way a failed transfer went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferDirection {
    /// This rank sent the datum to the peer.
    Send,
    /// This rank received the datum from the peer.
    Recv,
}

/// A transfer that the task flow depends on failed (a receive or send of the insert
/// flow, of a collective, a reduction, a migration or a `get_data_*`): the tasks that
/// read the datum after it did not run, nor anything that depends on them, and the
/// sends of values depending on it did not leave. [`crate::Context::try_wait_for_all`],
/// [`crate::Context::mpi_wait_for_all`], later inserts and shutdown report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferError {
    /// The datum transferred.
    pub data: DataId,
    /// The peer rank.
    pub peer: Rank,
    /// The datum's tag.
    pub tag: Tag,
    /// Which way it went.
    pub direction: TransferDirection,
    /// Why it failed.
    pub cause: CommError,
}

impl core::fmt::Display for TransferError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (what, way) = match self.direction {
            TransferDirection::Send => ("send", "to"),
            TransferDirection::Recv => ("receive", "from"),
        };
        write!(
            f,
            "the {what} of {} (tag {}) {way} rank {} failed: {}",
            self.data, self.tag.0, self.peer.0, self.cause
        )
    }
}

impl core::error::Error for TransferError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.cause)
    }
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
///
/// Its text names every item up to [`ShutdownError::SHOWN`] of them; beyond, the first
/// ones, how many are left out, and the last (the fields hold them all).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shutdown left {} item(s): {}", leftovers.len(), shown(leftovers))]
pub struct ShutdownError {
    /// One line per leftover, naming its rank: orphan messages (source, tag, size), receives that never
    /// completed, requests never waited on, transfers that failed.
    pub leftovers: Vec<String>,
    /// The transfers the task flow depended on that failed, with their rank, in the order
    /// of the ranks (each also has a line in `leftovers`).
    pub failures: Vec<(Rank, TransferError)>,
}

/// The leftovers as [`ShutdownError`]'s text shows them.
fn shown(leftovers: &[String]) -> String {
    let n = leftovers.len();
    if n <= ShutdownError::SHOWN {
        return leftovers.join("; ");
    }
    let head = ShutdownError::SHOWN - 1;
    format!(
        "{}; … {} more …; {}",
        leftovers[..head].join("; "),
        n - head - 1,
        leftovers[n - 1]
    )
}

impl ShutdownError {
    /// The most leftovers its text names one by one.
    pub const SHOWN: usize = 24;

    /// A report of `leftovers` with no failed transfer.
    pub fn new(leftovers: Vec<String>) -> Self {
        Self {
            leftovers,
            failures: Vec::new(),
        }
    }
}
