//! [`MpiTransport`]: the runtime's [`Transport`] over MPI.
//!
//! One transport per process, built ([`MpiTransport::new`]) and dropped on the rank's
//! progression thread, and driven as the [transport contract](starling_std::transport)
//! says: under the rank's progression lock, by that thread or by an application thread
//! blocked in a wait, never by two threads at once. Who builds the rank around it is not
//! this crate's business (the facade's `starling::mpi::init` does).
//!
//! * **Communicators.** Starling's traffic runs on duplicates of `MPI_COMM_WORLD`
//!   (`MPI_Comm_dup`), or of a communicator the application made ([`AppComms`]),
//!   never on the application's communicator itself (internals §12.11). Every
//!   rank creates `n` of them at start-up, collectively and in the same order
//!   ([`Settings::communicators`], default 8): the engine's [`CommId`] `k < n - 1` is
//!   the `k`-th (`CommId(0)`, the world, is the first; the runtime's `Context::comm_dup`
//!   numbers the others), and every `CommId` from `n - 1` on shares the last. Sharing is
//!   safe: the envelope names its communicator and the engine matches per communicator, and the
//!   ordering rules that pair payloads with their receives (see
//!   [`starling_core::tags`]) hold per MPI communicator, whatever the engine's
//!   communicators on it. A communicator cannot be duplicated later, when a rank first
//!   uses it: `MPI_Comm_dup` is collective, and a rank learns that it receives on a
//!   communicator only from an envelope that arrives on it.
//! * **Envelopes** are received on the envelope tag from any source, on the world's
//!   duplicate, on each other communicator this rank has used, and on all of them once a
//!   barrier was posted: by one `MPI_Irecv` per such communicator posted ahead of time
//!   into a buffer of the envelope limit (a header and the largest eager payload,
//!   [`Transport::set_envelope_limit`]) and posted again as soon as it completed, so an
//!   arriving envelope lands at once and a poll costs one `MPI_Test`; MPI matches one
//!   sender's messages in their order, so each peer's envelopes keep theirs. (Before the
//!   limit is told, `MPI_Improbe` finds them and `MPI_Imrecv` receives them into a buffer
//!   of the probed size.) They are handed to the engine in arrival order, one at a time,
//!   so the engine posts the payload receive of one envelope before it sees the next
//!   (internals §3.4).
//! * **Payloads** travel with `MPI_Isend`/`MPI_Irecv` on the physical tags the engine
//!   gives, from buffers the transport owns until `MPI_Test` says the request completed
//!   (rsmpi panics when an unfinished request is dropped). A payload longer than
//!   [`Settings::max_message`] (at most `i32::MAX` bytes, MPI's count type) is split
//!   into chunks of that size, alike on both sides. (Envelopes are never split: they
//!   carry a header and at most an eager payload of a few KiB.)
//! * **What a peer sends cannot abort the job.** Starling's communicators (and the world,
//!   when Starling initialised MPI) have `MPI_ERRORS_RETURN`: a message longer than the
//!   receive posted for it — an envelope past the largest eager limit, a payload longer
//!   than its envelope said — completes truncated instead of aborting with
//!   `MPI_ERR_TRUNCATE`, and a truncated envelope is dropped as malformed, with a line
//!   naming the peer (the facade's `tests/mpi_p2p.rs`, job `oversize`).
//! * **Barriers** never block the progression thread, and they *flush*: a barrier
//!   completes on a rank only once every envelope any rank sent it before entering the
//!   barrier was received. MPI orders messages per sender only, so an `MPI_Ibarrier`
//!   alone may complete before an earlier message from a third rank shows up (Open MPI's
//!   shared-memory transport does that with 4 ranks); shutdown would then miss orphan
//!   messages, and "early data" would depend on luck. So each rank counts the envelopes
//!   it sent to each peer, and a barrier is an `MPI_Ialltoall` of those counts — which
//!   synchronises like a barrier — after which the rank probes until it has received as
//!   many from each peer.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use mpi::Threading;
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::raw::AsRaw;
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Group;
use starling_core::{CommId, PhysTag, Rank, ReqId};
use starling_std::transport::{Completion, RecvBuffer, SendBuffer, Transport};

use crate::TransportError;
use crate::lent::{Lent, split, split_mut};

/// The requests of a payload's chunks (`None` once completed): one inline (an envelope, a
/// message within the transport's limit: no allocation per message), or several.
enum Reqs {
    One(Option<Request<'static, [u8]>>),
    Many(Vec<Option<Request<'static, [u8]>>>),
}

impl Reqs {
    /// The chunks' requests.
    fn as_mut_slice(&mut self) -> &mut [Option<Request<'static, [u8]>>] {
        match self {
            Self::One(r) => core::slice::from_mut(r),
            Self::Many(v) => v,
        }
    }

    /// The requests of the chunks not completed.
    fn into_pending(self) -> impl Iterator<Item = Request<'static, [u8]>> {
        let (one, many) = match self {
            Self::One(r) => (r, Vec::new()),
            Self::Many(v) => (None, v),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// A payload request: its chunks' requests and its buffer.
struct Op {
    reqs: Reqs,
    lent: Lent,
    /// Bytes received so far (receives).
    got: usize,
}

impl Op {
    /// Tests every unfinished chunk; whether all have completed.
    fn test(&mut self) -> bool {
        let mut done = true;
        for slot in self.reqs.as_mut_slice() {
            if let Some(r) = slot.take() {
                match r.test() {
                    Ok(status) => self.got += count(&status),
                    Err(r) => {
                        *slot = Some(r);
                        done = false;
                    }
                }
            }
        }
        done
    }

    /// Gives up on the unfinished chunks (an abnormal shutdown): their requests and the
    /// buffer are leaked, since MPI may still use them.
    fn abandon(self) {
        for r in self.reqs.into_pending() {
            core::mem::forget(r);
        }
    }
}

/// The bytes a completed request moved.
fn count(status: &mpi::point_to_point::Status) -> usize {
    usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0)
}

/// Something to hand to the engine in order: an envelope being received, or a barrier
/// that completed.
enum Arrival {
    Envelope {
        source: Rank,
        /// Which of Starling's MPI duplicates it arrived on.
        index: usize,
        op: Op,
    },
    /// An envelope received whole by a receive posted ahead of time.
    Received {
        source: Rank,
        /// Which of Starling's MPI duplicates it arrived on.
        index: usize,
        bytes: Vec<u8>,
    },
    Barrier(u64),
}

/// A flushing barrier (see the [module docs](self)): the all-to-all exchange of envelope
/// counts, then the counts this rank must have received.
struct BarrierOp {
    token: u64,
    exchange: Option<Op>,
    /// The envelope counts each rank had sent this one when it entered the barrier.
    expected: Option<Vec<u64>>,
    /// What this rank sent (kept until the exchange completed).
    sent: Option<Lent>,
}

/// One of Starling's communicators.
struct Comm {
    comm: SimpleCommunicator,
    /// Whether this rank probes it for envelopes (it used it, or shutdown is near).
    active: bool,
    /// The receive posted ahead of time for its next envelope, from any source, into a
    /// buffer of the envelope limit ([`Transport::set_envelope_limit`]).
    envelope: Option<(Request<'static, [u8]>, Lent)>,
}

/// The environment variable through which Open MPI reads its `mpi_yield_when_idle`
/// parameter at `MPI_Init` (an MCA parameter, `OMPI_MCA_<name>`; `mpirun --mca
/// mpi_yield_when_idle 1` sets it too). Left unset, Open MPI 4 turns the parameter on by
/// itself when the node is oversubscribed (more processes than slots, as `mpirun
/// --oversubscribe` allows); set, it is what it says (measured with Open MPI 4.1).
/// Open MPI 5 turns it on for an oversubscribed node whatever the variable says (read in
/// its sources, not run here): there, setting it changes nothing.
pub const YIELD_WHEN_IDLE_VAR: &str = "OMPI_MCA_mpi_yield_when_idle";

/// What [`no_yield_when_idle`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum YieldWhenIdle {
    /// The variable was unset (Open MPI would decide: on when the node is
    /// oversubscribed): it is now 0.
    TurnedOff,
    /// The variable was set, by the user or the launcher (`--mca`): left as it says.
    Set(String),
    /// MPI is initialised already: its parameters are read; nothing changed.
    TooLate,
    /// The process has other threads, or their number cannot be read (not Linux):
    /// setting the environment could race with a thread that reads it, so it was left
    /// unset.
    OtherThreads,
}

/// Turns off Open MPI's `mpi_yield_when_idle` for this process before MPI is
/// initialised, by setting [`YIELD_WHEN_IDLE_VAR`] to 0 when it is unset (a value the
/// user or the launcher gave is kept; other MPI libraries do not read it). The variable
/// stays in the environment: processes this one starts inherit it.
///
/// With it on (what Open MPI chooses on an oversubscribed node), every call into MPI's
/// progress that completes nothing gives up the core (`sched_yield`): each `MPI_Test`
/// of a progression thread's poll, and of an idle worker that drives the rank, and of a
/// worker about to run the task a message just made ready. Starling's threads pace
/// their own polling (they yield at every poll when the ranks outnumber the cores:
/// `RuntimeConfig::crowded`), and with MPI yielding too, the 4-process token ring on 2
/// cores took 87 – 109 µs a hop against 8.1 – 10 µs without (`docs/performance.md`).
///
/// Sound only while no other thread reads or writes the environment, so it changes
/// nothing when the process has another thread (Linux's `/proc/self/task` says; elsewhere
/// it cannot tell, and changes nothing): call it before anything starts a thread, as the
/// facade's `starling::mpi::init` does.
pub fn no_yield_when_idle() -> YieldWhenIdle {
    if mpi::environment::is_initialized() {
        return YieldWhenIdle::TooLate;
    }
    if let Ok(value) = std::env::var(YIELD_WHEN_IDLE_VAR) {
        return YieldWhenIdle::Set(value);
    }
    let alone = std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1);
    if !alone {
        return YieldWhenIdle::OtherThreads;
    }
    // SAFETY: the process has one thread, this one (counted just above, and only this
    // thread could have started another since): no other thread can read or write the
    // environment while it changes.
    unsafe { std::env::set_var(YIELD_WHEN_IDLE_VAR, "0") };
    YieldWhenIdle::TurnedOff
}

/// What [`MpiTransport::new`] needs.
#[derive(Debug)]
pub struct Settings {
    /// The thread level MPI must provide: `MPI_THREAD_SERIALIZED` when only Starling
    /// calls MPI, `MPI_THREAD_MULTIPLE` when the application does too.
    pub threading: Threading,
    /// How many duplicates of the world communicator to make (at least 1; see the
    /// [module docs](self)); every rank must ask for the same number. Not used with
    /// [`Settings::comms`].
    pub communicators: u16,
    /// The longest single MPI message, in bytes (at most `i32::MAX`); longer payloads
    /// travel in chunks. Every rank must use the same value.
    pub max_message: usize,
    /// Set by whoever owns the rank when it gives up without a clean shutdown (a hung
    /// peer, a panic): the transport then leaks its pending requests and leaves MPI
    /// unfinalized instead of waiting for them when it is dropped.
    pub abandon: Arc<AtomicBool>,
    /// Starling's duplicates of a communicator the application made; `None`: duplicate
    /// the world.
    pub comms: Option<AppComms>,
}

/// Starling's duplicates of a communicator the application made
/// (`starpu_mpi_init_comm`), made on the application's thread ([`AppComms::duplicate`]:
/// `MPI_Comm_dup` is collective over the application's communicator, so every member
/// makes them at the same point of its program) and handed to the progression thread in
/// [`Settings::comms`], which owns them from then on.
pub struct AppComms {
    dups: Vec<SimpleCommunicator>,
    leader: i32,
}

impl core::fmt::Debug for AppComms {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AppComms")
            .field("duplicates", &self.dups.len())
            .field("leader", &self.leader)
            .finish()
    }
}

// SAFETY: as for `MpiTransport` below: the handles move with exclusive ownership (nothing
// else refers to these duplicates), and MPI provides at least `MPI_THREAD_SERIALIZED`
// (`AppComms::duplicate` checked it before making them), which allows calls from any
// thread that are not concurrent.
unsafe impl Send for AppComms {}

impl AppComms {
    /// Checks that a rank can start on a communicator of the application: MPI is
    /// initialised (by the application, which made the communicator) and not finalized,
    /// and provides at least `required`.
    ///
    /// # Errors
    /// [`TransportError::NotInitialized`] when MPI is not initialised or was finalized;
    /// [`TransportError::Threading`] when its thread level is below `required`.
    pub fn check(required: Threading) -> Result<(), TransportError> {
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(TransportError::NotInitialized);
        }
        let provided = mpi::environment::threading_support();
        if provided < required {
            return Err(TransportError::Threading { required, provided });
        }
        Ok(())
    }

    /// Makes `n` (at least 1) duplicates of `comm`, collectively over `comm`, after
    /// [`AppComms::check`]`(required)`. `comm` itself is not used again and may be freed.
    ///
    /// # Errors
    /// As [`AppComms::check`]; nothing is duplicated then.
    pub fn duplicate<C: Communicator>(
        comm: &C,
        n: u16,
        required: Threading,
    ) -> Result<Self, TransportError> {
        // Never below SERIALIZED: the duplicates move to another thread (`Send` above).
        let floor = Threading::Serialized;
        Self::check(if required < floor { floor } else { required })?;
        let dups = (0..n.max(1)).map(|_| comm.duplicate()).collect();
        let leader = comm
            .group()
            .translate_rank(0, &SimpleCommunicator::world().group())
            .unwrap_or(0);
        Ok(Self { dups, leader })
    }

    /// The world rank of the communicator's rank 0: the same on every member, different
    /// for two disjoint communicators (a name for this Starling world within the job).
    pub fn leader(&self) -> i32 {
        self.leader
    }
}

/// Sent buffers smaller than this are dropped, not handed back for reuse.
const SPENT_MIN: usize = 64 << 10;
/// The most sent buffers kept for the runtime to take back.
const SPENT_MAX: usize = 4;

/// The runtime's [`Transport`] over MPI (see the [module docs](self)).
///
/// Built by [`MpiTransport::new`] on the rank's progression thread, by whoever assembles
/// the rank (the facade's `starling::mpi::init`); applications do not make one.
pub struct MpiTransport {
    rank: Rank,
    size: u32,
    tag_ub: i32,
    envelope_tag: Option<i32>,
    /// The longest envelope message, once told: envelopes are then received by receives
    /// posted ahead of time (one per active communicator) instead of probed for.
    envelope_limit: Option<usize>,
    max_message: usize,
    comms: Vec<Comm>,
    sends: Vec<(Option<ReqId>, Op)>,
    recvs: Vec<(ReqId, Op)>,
    arrivals: VecDeque<Arrival>,
    barriers: VecDeque<BarrierOp>,
    /// Envelopes sent to each rank, and received from each rank, since the start.
    envelopes_sent: Vec<u64>,
    envelopes_received: Vec<u64>,
    ready: VecDeque<Completion>,
    /// Buffers of completed payload sends, for the runtime to reuse
    /// ([`Transport::spent`]).
    spent: Vec<Vec<u8>>,
    abandon: Arc<AtomicBool>,
    /// `Some` when Starling initialised MPI: dropping it finalizes MPI.
    universe: Option<Universe>,
}

impl core::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MpiTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("tag_ub", &self.tag_ub)
            .field("communicators", &self.comms.len())
            .finish_non_exhaustive()
    }
}

// SAFETY: the MPI handles inside (communicators, requests: raw pointers with Open MPI)
// make the type `!Send` by default. Moving the transport moves the exclusive ownership
// of all of them, so no two threads ever call MPI through it at once; and `new` only
// succeeds once MPI provides at least `MPI_THREAD_SERIALIZED`, which allows MPI calls from
// any thread as long as they are not concurrent. (The transport is built and dropped on
// the progression thread; in between it is used under the rank's progression lock, by
// that thread or by a thread blocked in a wait, one at a time.)
unsafe impl Send for MpiTransport {}

impl MpiTransport {
    /// Posts the send of `buf` (lent by `lent`), in chunks.
    fn post_send(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        lent: Lent,
        buf: &'static [u8],
        token: Option<ReqId>,
    ) {
        // Envelopes (a header and at most an eager payload) travel whole: the receiver
        // probes one message per envelope.
        let max = if Some(tag.0) == self.envelope_tag {
            if let Some(n) = self.envelopes_sent.get_mut(dest.index()) {
                *n += 1;
            }
            usize::MAX
        } else {
            self.max_message
        };
        let process = self.comm(comm).process_at_rank(dest.0 as i32);
        let reqs = if buf.len() <= max {
            Reqs::One(Some(process.immediate_send_with_tag(
                StaticScope,
                buf,
                tag.0,
            )))
        } else {
            Reqs::Many(
                split(buf, max)
                    .into_iter()
                    .map(|chunk| Some(process.immediate_send_with_tag(StaticScope, chunk, tag.0)))
                    .collect(),
            )
        };
        self.sends.push((token, Op { reqs, lent, got: 0 }));
    }

    /// Posts the receive of `buf` (lent by `lent`), in chunks.
    fn post_recv(
        &mut self,
        source: Rank,
        comm: CommId,
        tag: PhysTag,
        lent: Lent,
        buf: &'static mut [u8],
        token: ReqId,
    ) {
        let max = self.max_message;
        let process = self.comm(comm).process_at_rank(source.0 as i32);
        let reqs = if buf.len() <= max {
            Reqs::One(Some(process.immediate_receive_into_with_tag(
                StaticScope,
                buf,
                tag.0,
            )))
        } else {
            Reqs::Many(
                split_mut(buf, max)
                    .into_iter()
                    .map(|chunk| {
                        Some(process.immediate_receive_into_with_tag(StaticScope, chunk, tag.0))
                    })
                    .collect(),
            )
        };
        self.recvs.push((token, Op { reqs, lent, got: 0 }));
    }

    /// Initialises MPI (or adopts the application's), checks the thread level, and
    /// duplicates the world communicator into the pool of Starling's communicators (or
    /// takes the duplicates of the application's communicator that `settings` carries).
    /// Call it on the thread that will drive the transport (the rank's progression
    /// thread): when it initialises MPI, that thread is MPI's main thread.
    ///
    /// # Errors
    /// [`TransportError::Finalized`] after MPI was finalized in this process;
    /// [`TransportError::Threading`] when MPI does not provide
    /// [`Settings::threading`]; [`TransportError::TagUb`] when MPI does not report
    /// `MPI_TAG_UB`.
    pub fn new(settings: Settings) -> Result<Self, TransportError> {
        let required = settings.threading;
        let universe = if mpi::environment::is_initialized() {
            if mpi::environment::is_finalized() {
                return Err(TransportError::Finalized);
            }
            let provided = mpi::environment::threading_support();
            if provided < required {
                return Err(TransportError::Threading { required, provided });
            }
            None
        } else {
            let Some((universe, provided)) = mpi::initialize_with_threading(required) else {
                return Err(TransportError::Finalized);
            };
            if provided < required {
                return Err(TransportError::Threading { required, provided });
            }
            Some(universe)
        };
        // `MPI_TAG_UB` is an attribute of the world (the standard does not promise it on
        // other communicators); it bounds tags on every communicator.
        let world = SimpleCommunicator::world();
        let tag_ub = read_tag_ub(&world).ok_or(TransportError::TagUb)?;
        let pool = usize::from(settings.communicators.max(1));
        let dups = match settings.comms {
            Some(AppComms { dups, .. }) if !dups.is_empty() => dups,
            _ => (0..pool).map(|_| world.duplicate()).collect(),
        };
        for comm in &dups {
            errors_return(comm);
        }
        if universe.is_some() {
            // MPICH raises a failed `MPI_Test` on the world's handler, not the request's
            // communicator's. The world is Starling's here (it initialised MPI); an
            // application that initialised MPI keeps its own handler on its world.
            errors_return(&world);
        }
        let comms: Vec<Comm> = dups
            .into_iter()
            .enumerate()
            .map(|(i, comm)| Comm {
                comm,
                active: i == 0,
                envelope: None,
            })
            .collect();
        let rank = Rank(u32::try_from(comms[0].comm.rank()).unwrap_or(0));
        let size = u32::try_from(comms[0].comm.size()).unwrap_or(1);
        Ok(Self {
            rank,
            size,
            tag_ub,
            envelope_tag: None,
            envelope_limit: None,
            max_message: settings.max_message.clamp(1, i32::MAX as usize),
            comms,
            sends: Vec::new(),
            recvs: Vec::new(),
            arrivals: VecDeque::new(),
            barriers: VecDeque::new(),
            envelopes_sent: vec![0; size as usize],
            envelopes_received: vec![0; size as usize],
            ready: VecDeque::new(),
            spent: Vec::new(),
            abandon: settings.abandon,
            universe,
        })
    }

    /// The MPI duplicate that carries `id` (the last one carries every `CommId` from
    /// its index on); from now on it is probed for envelopes.
    fn comm(&mut self, id: CommId) -> &SimpleCommunicator {
        let i = usize::from(id.0).min(self.comms.len() - 1);
        let c = &mut self.comms[i];
        c.active = true;
        &c.comm
    }

    /// The communicator to report for an envelope that arrived on MPI duplicate `index`:
    /// that duplicate's own, or, on the shared last one, the one the envelope names (the
    /// engine rejects an envelope whose communicator does not match).
    fn arrived_on(&self, index: usize, bytes: &[u8]) -> CommId {
        let own = CommId(u16::try_from(index).unwrap_or(u16::MAX));
        if index + 1 < self.comms.len() {
            return own;
        }
        match starling_core::envelope::decode(bytes) {
            Ok(d) if d.envelope.comm >= own => d.envelope.comm,
            _ => own,
        }
    }

    fn has_pending(&self) -> bool {
        !(self.sends.is_empty()
            && self.recvs.is_empty()
            && self.arrivals.is_empty()
            && self.barriers.is_empty())
    }

    /// One sweep: tests every request, probes for envelopes, and queues what completed.
    fn progress(&mut self) {
        for b in &mut self.barriers {
            if let Some(op) = &mut b.exchange {
                if op.test() {
                    let op = b.exchange.take().expect("tested above");
                    // SAFETY: the exchange completed (`test` returned true): MPI no longer
                    // writes the received counts...
                    let counts = unsafe { op.lent.take() };
                    if let Some(sent) = b.sent.take() {
                        // SAFETY: ...nor reads the sent ones.
                        drop(unsafe { sent.take() });
                    }
                    b.expected = Some(
                        counts
                            .chunks_exact(8)
                            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                            .collect(),
                    );
                }
            }
        }
        let mut i = 0;
        while i < self.sends.len() {
            if self.sends[i].1.test() {
                let (token, op) = self.sends.swap_remove(i);
                // SAFETY: every chunk's request completed (`test` returned true).
                let bytes = unsafe { op.lent.take() };
                if bytes.capacity() >= SPENT_MIN && self.spent.len() < SPENT_MAX {
                    self.spent.push(bytes);
                }
                if let Some(t) = token {
                    self.ready.push_back(Completion::Sent(t));
                }
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.recvs.len() {
            if self.recvs[i].1.test() {
                let (token, op) = self.recvs.swap_remove(i);
                let got = op.got;
                let in_place = matches!(op.lent, Lent::Recv(_));
                // SAFETY: every chunk's request completed (`test` returned true).
                let mut bytes = unsafe { op.lent.take() };
                if in_place {
                    // The handle's lock was released by `take`.
                    self.ready
                        .push_back(Completion::ReceivedInPlace(token, got));
                } else {
                    bytes.truncate(got);
                    self.ready.push_back(Completion::Received(token, bytes));
                }
            } else {
                i += 1;
            }
        }
        self.probe();
        // A barrier whose expected envelopes were all probed completes, after them.
        while let Some(b) = self.barriers.front() {
            let flushed = b.expected.as_ref().is_some_and(|e| {
                e.iter()
                    .zip(&self.envelopes_received)
                    .all(|(want, got)| got >= want)
            });
            if !flushed {
                break;
            }
            let token = b.token;
            self.barriers.pop_front();
            self.arrivals.push_back(Arrival::Barrier(token));
        }
        self.drain_arrivals();
    }

    /// Receives every envelope waiting on an active communicator.
    fn probe(&mut self) {
        let Some(tag) = self.envelope_tag else {
            return;
        };
        if let Some(limit) = self.envelope_limit {
            self.receive_envelopes(tag, limit);
            return;
        }
        for (id, c) in self.comms.iter().enumerate() {
            if !c.active {
                continue;
            }
            while let Some((msg, status)) =
                c.comm.any_process().immediate_matched_probe_with_tag(tag)
            {
                let (lent, buf) = Lent::new(vec![0u8; count(&status)]);
                let req = msg.immediate_matched_receive_into(StaticScope, buf);
                let source = usize::try_from(status.source_rank()).unwrap_or(0);
                if let Some(n) = self.envelopes_received.get_mut(source) {
                    *n += 1;
                }
                self.arrivals.push_back(Arrival::Envelope {
                    source: Rank(source as u32),
                    index: id,
                    op: Op {
                        reqs: Reqs::One(Some(req)),
                        lent,
                        got: 0,
                    },
                });
            }
        }
    }

    /// Takes every envelope that the receives posted ahead of time on the active
    /// communicators received, reposting each at once into the same buffer (MPI matches
    /// the messages of one sender in the order they were sent, so the envelopes of each
    /// peer keep their order); at most `limit` bytes each.
    fn receive_envelopes(&mut self, tag: i32, limit: usize) {
        for (id, c) in self.comms.iter_mut().enumerate() {
            if !c.active {
                continue;
            }
            loop {
                let (req, lent) = match c.envelope.take() {
                    Some(posted) => posted,
                    None => {
                        let (lent, buf) = Lent::new(vec![0u8; limit]);
                        let req = c.comm.any_process().immediate_receive_into_with_tag(
                            StaticScope,
                            buf,
                            tag,
                        );
                        (req, lent)
                    }
                };
                let status = match req.test() {
                    Ok(status) => status,
                    Err(req) => {
                        c.envelope = Some((req, lent));
                        break;
                    }
                };
                // SAFETY: the receive completed (`test` returned its status).
                let buffer = unsafe { lent.take() };
                let bytes = buffer[..count(&status).min(buffer.len())].to_vec();
                let (lent, buf) = Lent::new(buffer);
                let again =
                    c.comm
                        .any_process()
                        .immediate_receive_into_with_tag(StaticScope, buf, tag);
                c.envelope = Some((again, lent));
                let source = usize::try_from(status.source_rank()).unwrap_or(0);
                if let Some(n) = self.envelopes_received.get_mut(source) {
                    *n += 1;
                }
                self.arrivals.push_back(Arrival::Received {
                    source: Rank(source as u32),
                    index: id,
                    bytes,
                });
            }
        }
    }

    /// Cancels the receives posted ahead of time for envelopes (at shutdown).
    fn cancel_envelope_receives(&mut self) {
        for c in &mut self.comms {
            if let Some((req, lent)) = c.envelope.take() {
                req.cancel();
                let _ = req.wait();
                // SAFETY: the receive completed or was cancelled (`wait` returned).
                drop(unsafe { lent.take() });
            }
        }
    }

    /// Moves the arrivals that completed, in order, to the completions.
    fn drain_arrivals(&mut self) {
        while let Some(front) = self.arrivals.front_mut() {
            match front {
                Arrival::Envelope { op, .. } => {
                    if !op.test() {
                        break;
                    }
                }
                Arrival::Received { .. } | Arrival::Barrier(_) => {}
            }
            match self.arrivals.pop_front() {
                Some(Arrival::Envelope { source, index, op }) => {
                    let got = op.got;
                    // SAFETY: the envelope's receive completed (`test` returned true).
                    let mut bytes = unsafe { op.lent.take() };
                    bytes.truncate(got);
                    let comm = self.arrived_on(index, &bytes);
                    self.ready.push_back(Completion::Envelope {
                        source,
                        comm,
                        bytes,
                    });
                }
                Some(Arrival::Received {
                    source,
                    index,
                    bytes,
                }) => {
                    let comm = self.arrived_on(index, &bytes);
                    self.ready.push_back(Completion::Envelope {
                        source,
                        comm,
                        bytes,
                    });
                }
                Some(Arrival::Barrier(token)) => self.ready.push_back(Completion::Barrier(token)),
                None => break,
            }
        }
    }
}

/// Makes MPI errors on Starling's communicator `comm` return instead of aborting the job
/// (`MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)`; rsmpi does not wrap it). What a
/// peer sends must not abort this process: a message longer than the receive posted for
/// it (an envelope past the largest eager limit, a payload longer than its envelope
/// said) is `MPI_ERR_TRUNCATE`, fatal under MPI's default handler. With this handler the
/// receive completes with the bytes that fit; a truncated envelope then fails the
/// engine's decoding (dropped with a message naming the peer, like any malformed
/// envelope), and a payload keeps the length its envelope announced. (MPICH raises a
/// failed `MPI_Test` on the world's handler, so under MPICH an application that
/// initialised MPI itself must set `MPI_ERRORS_RETURN` on its world for the same.)
fn errors_return(comm: &SimpleCommunicator) {
    // SAFETY: MPI is initialised; `comm` is a valid communicator owned by the transport;
    // `RSMPI_ERRORS_RETURN` is the predefined `MPI_ERRORS_RETURN` handle.
    unsafe {
        mpi::ffi::MPI_Comm_set_errhandler(comm.as_raw(), mpi::ffi::RSMPI_ERRORS_RETURN);
    }
}

/// Reads `MPI_TAG_UB`, which rsmpi does not wrap.
fn read_tag_ub(world: &SimpleCommunicator) -> Option<i32> {
    let mut value: *mut c_int = core::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI is initialised; `MPI_TAG_UB` is a predefined attribute of every
    // communicator whose value is a pointer to an `int` owned by MPI; `value` and `flag`
    // are valid for writes of the types MPI_Comm_get_attr writes.
    unsafe {
        mpi::ffi::MPI_Comm_get_attr(
            world.as_raw(),
            mpi::ffi::MPI_TAG_UB as c_int,
            (&raw mut value).cast(),
            &raw mut flag,
        );
    }
    if flag == 0 || value.is_null() {
        return None;
    }
    // SAFETY: the attribute is set (`flag`), so `value` points to MPI's `int`, valid until
    // MPI_Finalize.
    Some(unsafe { *value })
}

impl Transport for MpiTransport {
    /// Nothing comes through the inbox: arrivals are found by polling MPI.
    type Wire = core::convert::Infallible;

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    fn set_envelope_tag(&mut self, tag: PhysTag) {
        self.envelope_tag = Some(tag.0);
    }

    fn set_envelope_limit(&mut self, bytes: usize) {
        self.envelope_limit = Some(bytes.max(1));
    }

    fn send(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        bytes: Vec<u8>,
        token: Option<ReqId>,
    ) {
        let (lent, buf) = Lent::new(bytes);
        self.post_send(dest, comm, tag, lent, buf, token);
    }

    fn send_lent(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Box<dyn SendBuffer>,
        token: Option<ReqId>,
    ) {
        let (lent, buf) = Lent::send(buffer);
        self.post_send(dest, comm, tag, lent, buf, token);
    }

    fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, size: usize, token: ReqId) {
        self.recv_into(source, comm, tag, vec![0u8; size], token);
    }

    fn fills_given_buffers(&self) -> bool {
        true
    }

    fn recv_into(
        &mut self,
        source: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Vec<u8>,
        token: ReqId,
    ) {
        let (lent, buf) = Lent::new(buffer);
        self.post_recv(source, comm, tag, lent, buf, token);
    }

    fn recv_lent(
        &mut self,
        source: Rank,
        comm: CommId,
        tag: PhysTag,
        buffer: Box<dyn RecvBuffer>,
        token: ReqId,
    ) -> Option<Box<dyn RecvBuffer>> {
        let (lent, buf) = Lent::recv(buffer);
        self.post_recv(source, comm, tag, lent, buf, token);
        None
    }
    fn barrier(&mut self, token: u64) {
        // A barrier precedes shutdown's search for orphan messages: from now on, look for
        // envelopes on every communicator.
        for c in &mut self.comms {
            c.active = true;
        }
        let counts: Vec<u8> = self
            .envelopes_sent
            .iter()
            .flat_map(|n| n.to_le_bytes())
            .collect();
        let (sent, send_buf) = Lent::new(counts);
        let (lent, recv_buf) = Lent::new(vec![0u8; 8 * self.size as usize]);
        let req = self.comms[0]
            .comm
            .immediate_all_to_all_into(StaticScope, &*send_buf, recv_buf);
        self.barriers.push_back(BarrierOp {
            token,
            exchange: Some(Op {
                reqs: Reqs::One(Some(req)),
                lent,
                got: 0,
            }),
            expected: None,
            sent: Some(sent),
        });
    }

    fn accept(&mut self, wire: Self::Wire) {
        match wire {}
    }

    fn poll(&mut self) -> Option<Completion> {
        if self.ready.is_empty() {
            self.progress();
        }
        self.ready.pop_front()
    }

    fn needs_polling(&self) -> bool {
        true
    }

    /// The engine communicators with an MPI duplicate of their own: all but the last,
    /// which every later `CommId` shares (see the [module docs](self)).
    fn fast_comms(&self) -> u16 {
        u16::try_from(self.comms.len() - 1).unwrap_or(u16::MAX)
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn take_strays(
        &mut self,
        stray: &dyn Fn(PhysTag) -> bool,
    ) -> Vec<(Rank, CommId, PhysTag, usize)> {
        let mut out = Vec::new();
        for (i, c) in self
            .comms
            .iter()
            .enumerate()
            .take(usize::from(self.fast_comms()))
        {
            // The first message no receive took, whatever its tag; a stray one is taken
            // (received and dropped), which shows the next.
            while let Some(status) = c.comm.any_process().immediate_probe() {
                let tag = PhysTag(status.tag());
                if !stray(tag) {
                    break;
                }
                let source = status.source_rank();
                let Some((msg, status)) = c
                    .comm
                    .process_at_rank(source)
                    .immediate_matched_probe_with_tag(tag.0)
                else {
                    break;
                };
                let mut bytes = vec![0u8; count(&status)];
                let _ = msg.matched_receive_into(&mut bytes[..]);
                out.push((
                    Rank(source.unsigned_abs()),
                    CommId(u16::try_from(i).unwrap_or(u16::MAX)),
                    tag,
                    bytes.len(),
                ));
            }
        }
        out
    }

    fn has_message(&self, source: Rank, comm: CommId, tag: PhysTag) -> bool {
        let i = usize::from(comm.0).min(self.comms.len() - 1);
        let Ok(source) = i32::try_from(source.0) else {
            return false;
        };
        self.comms[i]
            .comm
            .process_at_rank(source)
            .immediate_probe_with_tag(tag.0)
            .is_some()
    }

    fn spent(&mut self) -> Option<Vec<u8>> {
        self.spent.pop()
    }

    /// Payload sends and receives, or envelope receives, are in flight: long ones move
    /// only while MPI is called. (A barrier waiting for other ranks is not busy.)
    fn busy(&self) -> bool {
        !(self.sends.is_empty() && self.recvs.is_empty() && self.arrivals.is_empty())
    }
}

impl Drop for MpiTransport {
    fn drop(&mut self) {
        let abandon = self.abandon.load(Ordering::SeqCst);
        if !abandon {
            // At a clean shutdown everything completed already; let stragglers finish.
            let deadline = std::time::Instant::now() + Duration::from_millis(200);
            while self.has_pending() && std::time::Instant::now() < deadline {
                self.progress();
            }
        }
        let clean = !abandon && !self.has_pending();
        if clean {
            self.cancel_envelope_receives();
            // Free the duplicates (MPI_Comm_free), then finalize if MPI is ours.
            self.comms.clear();
            drop(self.universe.take());
            return;
        }
        // Requests that never completed: leak them and their buffers (MPI may still use
        // them), and leave MPI initialised: finalizing could wait forever for them or for
        // peers. The process should exit with an error; mpirun then ends the job.
        let pending = self.sends.len() + self.recvs.len() + self.arrivals.len();
        for (_, op) in self.sends.drain(..) {
            op.abandon();
        }
        for (_, op) in self.recvs.drain(..) {
            op.abandon();
        }
        for a in self.arrivals.drain(..) {
            if let Arrival::Envelope { op, .. } = a {
                op.abandon();
            }
        }
        for b in self.barriers.drain(..) {
            if let Some(op) = b.exchange {
                op.abandon();
            }
        }
        for c in self.comms.drain(..) {
            if let Some((req, _lent)) = c.envelope {
                // The buffer leaks with the `Lent` (dropped without `take`).
                core::mem::forget(req);
            }
            core::mem::forget(c.comm);
        }
        if let Some(u) = self.universe.take() {
            core::mem::forget(u);
            let why = if abandon {
                "the rank stopped without a clean shutdown".to_string()
            } else {
                format!("{pending} request(s) never completed")
            };
            eprintln!(
                "[starling-mpi][{}] {why}: MPI is left unfinalized",
                self.rank.0
            );
        }
    }
}
