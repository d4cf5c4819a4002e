//! The runtime's errors.

use starling_core::engine::{RequestError, SubmitError};
use starling_core::request::{Kind as RequestKind, State as RequestState};
use starling_core::{CommId, DataId, Rank, Tag};

/// Why data could not be moved into or out of a handle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The bytes that arrived are not the size of the handle's data: nothing was copied
    /// (no silent partial copy). Register the receiving handle with the sender's shape.
    #[error("a payload of {got} bytes cannot fill a handle of {expected} bytes")]
    SizeMismatch {
        /// Bytes the handle holds.
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// A shape is invalid (a leading dimension smaller than a row, storage shorter than
    /// its span), or a user-defined interface could not parse its packed form.
    #[error("malformed data: {0}")]
    Malformed(&'static str),
    /// The bytes that arrived are the handle's size but not a valid packed form of its
    /// interface: a header announcing another shape, or a sparse matrix whose row
    /// pointers do not start at its first entry, decrease, or do not end at its number of
    /// entries, or whose column index is out of range. Nothing was copied. The sender is
    /// at fault (its data, or a registration of another shape), not this rank: register
    /// the datum with one shape on every rank, and check the sender's data.
    #[error("invalid payload: {0}")]
    InvalidPayload(&'static str),
}

/// Why a partitioning call was refused, or a handle cannot be used now because of one
/// ([`crate::partition`]).
///
/// Nothing changed when a call returns one: no handle was registered, no state moved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The handle is partitioned: while it is, only its children may be used (tasks,
    /// inserts, transfers, acquisitions). Use the children, or
    /// [`unpartition`](crate::Context::unpartition) it first.
    #[error("{0} is partitioned: use its children, or unpartition it first")]
    Partitioned(DataId),
    /// The handle was a child of a partition that was undone
    /// ([`unpartition`](crate::Context::unpartition)): its data went back into the parent
    /// and it can no longer be used. Partition the parent again for new children.
    #[error("{0} was a child of an undone partition: it can no longer be used")]
    Retired(DataId),
    /// [`unpartition`](crate::Context::unpartition) of a handle that is not partitioned.
    #[error("{0} is not partitioned")]
    NotPartitioned(DataId),
    /// [`unpartition`](crate::Context::unpartition) of a handle one of whose children is
    /// partitioned itself: unpartition that child first (innermost first).
    #[error("{parent} cannot be unpartitioned: its child {child} is partitioned")]
    ChildPartitioned {
        /// The handle being unpartitioned.
        parent: DataId,
        /// Its child that is partitioned.
        child: DataId,
    },
    /// The filter refused the handle's shape: nothing was partitioned.
    #[error("the filter cannot cut {data}: {cause}")]
    Filter {
        /// The handle being partitioned.
        data: DataId,
        /// Why.
        cause: FilterError,
    },
}

/// Why a filter cannot cut data in the pieces asked ([`crate::partition::Filter`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// Zero parts were asked: a partition has at least one child.
    #[error("a partition needs at least one part")]
    NoParts,
    /// More parts than elements along the cut dimension (the reference asserts
    /// `nparts <= n`): ask for at most `len` parts.
    #[error("cannot cut {len} elements in {parts} parts")]
    TooManyParts {
        /// Parts asked.
        parts: usize,
        /// Elements along the cut dimension.
        len: usize,
    },
    /// The sizes given ([`crate::partition::VectorList`]) do not add up to the length of
    /// the data (`sum` is `None` when the sum overflows `usize`).
    #[error("the sizes add up to {sum:?} elements, the data has {len}")]
    SizesMismatch {
        /// What the sizes add up to.
        sum: Option<usize>,
        /// Elements of the data.
        len: usize,
    },
    /// A piece does not lie inside the data (a user-defined filter's piece out of range,
    /// or a matrix piece whose leading dimension is shorter than its rows).
    #[error("piece {index} does not fit the data: {what}")]
    BadPiece {
        /// The piece's index.
        index: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

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
    /// `i64::MIN ..= i64::MIN + 15`, [`crate::tags::RESERVED_TAGS`]). Nothing was
    /// submitted: use another tag.
    #[error("{tag} is reserved for the runtime's own messages")]
    ReservedTag {
        /// The tag.
        tag: Tag,
    },
    /// An explicit tag among the automatic ones ([`crate::tags::AUTO_TAGS`]), which
    /// only registrations with [`crate::TagChoice::Auto`] get. Nothing was registered:
    /// choose a tag outside the range, or let the runtime choose.
    #[error("{tag} is in the automatic tag range: use another tag, or TagChoice::Auto")]
    AutoTagRange {
        /// The tag.
        tag: Tag,
    },
    /// Every automatic tag of this run was handed out ([`crate::tags::AUTO_TAGS`]:
    /// 2^61 of them, never reused). Nothing was registered: give the datum an
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
    /// The handle is partitioned, or was a child of an undone partition
    /// ([`crate::partition`]): nothing was submitted. Transfer its children (or the
    /// parent once unpartitioned).
    #[error(transparent)]
    Partition(#[from] PartitionError),
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

/// One thing a rank left behind at shutdown (an item of [`ShutdownError::leftovers`]).
///
/// Its `Display` is the line the report prints, naming its rank (`rank 1: …`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leftover {
    /// A message arrived and no receive ever took it ("did you forget to post a receive
    /// corresponding to a send?").
    Orphan {
        /// The rank that holds it.
        rank: Rank,
        /// The rank that sent it.
        source: Rank,
        /// Its communicator.
        comm: CommId,
        /// Its user tag.
        tag: Tag,
        /// Its payload size in bytes.
        bytes: u64,
        /// Its envelope waited outside the engine, refused for a full table, until the
        /// end.
        refused: bool,
    },
    /// A request that never completed (a receive whose message never came, a send never
    /// received), with where it stopped: its explanation.
    NeverCompleted {
        /// The rank of the request.
        rank: Rank,
        /// Send or receive.
        kind: RequestKind,
        /// Its communicator.
        comm: CommId,
        /// Destination (send) or source (receive).
        peer: Rank,
        /// Its user tag.
        tag: Tag,
        /// Payload size (send) or buffer size (receive).
        bytes: u64,
        /// Where it stopped (`awaiting envelope`: nothing matching ever arrived).
        state: RequestState,
    },
    /// A request that completed in the engine but whose [`crate::Request`] was never
    /// waited on.
    NotRetired {
        /// The rank of the request.
        rank: Rank,
        /// Send or receive.
        kind: RequestKind,
        /// Destination (send) or source (receive).
        peer: Rank,
        /// Its user tag.
        tag: Tag,
    },
    /// A send or receive that waited for room in the engine's tables until the end: it
    /// never reached the engine.
    NeverAdmitted {
        /// The rank of the request.
        rank: Rank,
        /// Send or receive.
        kind: RequestKind,
        /// Its communicator.
        comm: CommId,
        /// Destination (send) or source (receive).
        peer: Rank,
        /// Its user tag.
        tag: Tag,
    },
    /// A [`crate::Request`] dropped without `wait` or a completed `test`.
    Unwaited {
        /// The rank of the request.
        rank: Rank,
        /// The request (`isend of tag 3 to rank 1`).
        what: String,
    },
    /// The completion callback of a detached request panicked.
    CallbackPanicked {
        /// The rank of the request.
        rank: Rank,
        /// The request.
        what: String,
    },
    /// A task failed: its kernel or callback panicked, or its data could not be brought
    /// back from a device.
    TaskFailed {
        /// The rank of the task.
        rank: Rank,
        /// What happened (`task `gemm` panicked: …`).
        what: String,
    },
    /// A transfer that the task flow depended on failed (also in
    /// [`ShutdownError::failures`]).
    TransferFailed {
        /// The rank of the transfer.
        rank: Rank,
        /// The failure.
        error: TransferError,
    },
    /// Tasks that did not run because they read data whose transfer failed.
    TasksSkipped {
        /// The rank of the tasks.
        rank: Rank,
        /// How many.
        count: u64,
    },
    /// Tasks or requests still pending when nothing moved any more at shutdown.
    Incomplete {
        /// The rank.
        rank: Rank,
        /// How many.
        outstanding: usize,
    },
    /// Something else the rank reported during the run (a full communication cache, a
    /// graph-agreement divergence).
    Note {
        /// The rank.
        rank: Rank,
        /// The report.
        text: String,
    },
    /// A line of the watchdog that gave up on the job ([`crate::hang`]): its heading,
    /// then the hang explanation.
    Watchdog(String),
    /// A line of the hang explanation of what could never complete at shutdown
    /// ([`crate::hang`]), printed `why: …`.
    Why(String),
}

impl Leftover {
    /// The rank it names; `None` for the job-wide watchdog and explanation lines.
    pub fn rank(&self) -> Option<Rank> {
        match self {
            Self::Orphan { rank, .. }
            | Self::NeverCompleted { rank, .. }
            | Self::NotRetired { rank, .. }
            | Self::NeverAdmitted { rank, .. }
            | Self::Unwaited { rank, .. }
            | Self::CallbackPanicked { rank, .. }
            | Self::TaskFailed { rank, .. }
            | Self::TransferFailed { rank, .. }
            | Self::TasksSkipped { rank, .. }
            | Self::Incomplete { rank, .. }
            | Self::Note { rank, .. } => Some(*rank),
            Self::Watchdog(_) | Self::Why(_) => None,
        }
    }
}

impl core::fmt::Display for Leftover {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Orphan {
                rank,
                source,
                tag,
                bytes,
                refused,
                ..
            } => {
                write!(
                    f,
                    "rank {}: message from rank {} with tag {} ({bytes} bytes) was never received",
                    rank.0, source.0, tag.0
                )?;
                if *refused {
                    f.write_str(
                        " (it arrived; its engine refused it for a full table and it waited \
                         outside, for its receive)",
                    )?;
                }
                Ok(())
            }
            Self::NeverCompleted {
                rank,
                kind,
                peer,
                tag,
                state,
                ..
            } => write!(
                f,
                "rank {}: {kind:?} with rank {} and tag {} never completed ({state})",
                rank.0, peer.0, tag.0
            ),
            Self::NotRetired {
                rank,
                kind,
                peer,
                tag,
            } => write!(
                f,
                "rank {}: {kind:?} with rank {} and tag {} was never waited on",
                rank.0, peer.0, tag.0
            ),
            Self::NeverAdmitted {
                rank,
                kind,
                peer,
                tag,
                ..
            } => write!(
                f,
                "rank {}: {kind:?} with rank {} and tag {} never reached the engine (it \
                 waited for room in the engine's tables)",
                rank.0, peer.0, tag.0
            ),
            Self::Unwaited { rank, what } => {
                write!(f, "rank {}: request never waited on: {what}", rank.0)
            }
            Self::CallbackPanicked { rank, what } => {
                write!(f, "rank {}: the callback of the {what} panicked", rank.0)
            }
            Self::TaskFailed { rank, what } => write!(f, "rank {}: {what}", rank.0),
            Self::TransferFailed { rank, error } => {
                write!(f, "rank {}: transfer failed: {error}", rank.0)
            }
            Self::TasksSkipped { rank, count } => write!(
                f,
                "rank {}: {count} task(s) did not run: they read data whose transfer failed",
                rank.0
            ),
            Self::Incomplete { rank, outstanding } => write!(
                f,
                "rank {}: {outstanding} task(s) or request(s) could never complete",
                rank.0
            ),
            Self::Note { rank, text } => write!(f, "rank {}: {text}", rank.0),
            Self::Watchdog(line) => f.write_str(line),
            Self::Why(line) => write!(f, "why: {line}"),
        }
    }
}

/// What a rank reported during its run, kept for its leftovers at shutdown.
#[derive(Clone, Debug)]
pub(crate) enum Noted {
    /// A request dropped without being waited on.
    Unwaited(String),
    /// A detached request's callback panicked.
    CallbackPanicked(String),
    /// Anything else, in words.
    Other(String),
}

impl Noted {
    /// The leftover of rank `rank` that it becomes.
    pub(crate) fn leftover(self, rank: Rank) -> Leftover {
        match self {
            Self::Unwaited(what) => Leftover::Unwaited { rank, what },
            Self::CallbackPanicked(what) => Leftover::CallbackPanicked { rank, what },
            Self::Other(text) => Leftover::Note { rank, text },
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
    /// What was left, each naming its rank: orphan messages (source, tag, size), requests
    /// that never completed (with where they stopped) or were never waited on, failed
    /// tasks and transfers ([`Leftover`]; each prints as one line).
    pub leftovers: Vec<Leftover>,
    /// The transfers the task flow depended on that failed, with their rank, in the order
    /// of the ranks (each also has a line in `leftovers`).
    pub failures: Vec<(Rank, TransferError)>,
}

/// The leftovers as [`ShutdownError`]'s text shows them.
fn shown(leftovers: &[Leftover]) -> String {
    let n = leftovers.len();
    let join = |items: &[Leftover]| {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    if n <= ShutdownError::SHOWN {
        return join(leftovers);
    }
    let head = ShutdownError::SHOWN - 1;
    format!(
        "{}; … {} more …; {}",
        join(&leftovers[..head]),
        n - head - 1,
        leftovers[n - 1]
    )
}

impl ShutdownError {
    /// The most leftovers its text names one by one.
    pub const SHOWN: usize = 24;

    /// A report of `leftovers` with no failed transfer.
    pub fn new(leftovers: Vec<Leftover>) -> Self {
        Self {
            leftovers,
            failures: Vec::new(),
        }
    }
}
