//! Point-to-point transfers of handles: one builder per direction, the mode as an option.
//!
//! [`Context::send`] and [`Context::recv`] start a [`SendBuilder`] / [`RecvBuilder`] for
//! one handle, peer and tag; options change how it travels, and one terminal posts it:
//!
//! | terminal | what it does | the reference's |
//! | --- | --- | --- |
//! | `.wait()` | posts it and blocks until it completed | `starpu_mpi_send`, `_recv` |
//! | `.start()` | posts it and returns a [`Request`] to [`wait`](Request::wait) or [`test`](Request::test) | `starpu_mpi_isend`, `_irecv` |
//! | `.detach(callback)` | posts it and forgets it; `callback` gets its outcome | `starpu_mpi_isend_detached`, `_irecv_detached` |
//!
//! | option | sends | receives | the reference's |
//! | --- | --- | --- | --- |
//! | `.sync()` | ✓ | | `issend` variants |
//! | `.priority(p)` | ✓ | | `_prio` variants |
//! | `.unlock(tag)` | ✓ | ✓ | `_unlock_tag` variants |
//! | `.sequential_consistency(false)` | | ✓ | `_sequential_consistency` variant |
//! | `.on(&comm)` | ✓ | ✓ | the `comm` argument, ranks numbered in the [`Comm`] |
//! | `.comm(id)` | ✓ | ✓ | the `comm` argument, world ranks (a [`Context::comm_dup`] id) |
//!
//! Without `.on` or `.comm`, a transfer is on the world; of the two, the last one given
//! counts.
//!
//! [`Context::send_all`] and [`Context::recv_all`] take an iterator of (handle, peer,
//! tag) and detach them all, with one callback and an optional tag to unlock once every
//! one completed (the reference's `_array_detached_unlock_tag` calls).
//!
//! ```
//! use starling_std::{run_local, interfaces::Variable};
//! use starling_core::{Rank, Tag};
//!
//! let got = run_local(2, |ctx| {
//!     let v = ctx.register(Variable::new(ctx.rank().0 + 40));
//!     if ctx.rank() == Rank(0) {
//!         // A synchronous send with a priority, waited on.
//!         ctx.send(&v, Rank(1), Tag(7)).sync().priority(3).wait()?;
//!     } else {
//!         // A receive started now, waited on later.
//!         let req = ctx.recv(&v, Rank(0), Tag(7)).start()?;
//!         req.wait()?;
//!     }
//!     Ok::<_, starling_std::CommError>(ctx.unregister(v).get())
//! })?;
//! assert_eq!(*got[1].as_ref().unwrap(), 40);
//! # Ok::<(), starling_std::ShutdownError>(())
//! ```
//!
//! **Errors.** Each terminal checks its transfer before it posts anything, and refuses
//! it with a [`CommError`]: [`CommError::RankOutOfRange`] for a peer outside the world
//! (or, with `.on(&comm)`, outside the communicator), [`CommError::ReservedTag`] for a
//! tag the runtime keeps for itself, [`CommError::Partition`] for a partitioned handle or
//! a retired child ([`crate::partition`]). The transfer's own outcome comes later: from
//! `.wait()`, from the [`Request`], or to the callback.
//!
//! **Callbacks** (`.detach`) run once, with the outcome, on the thread driving the rank's
//! progress — the progression thread, or a thread blocked in a wait — so they must not
//! block; a panic in one is caught and reported at shutdown. There is no detach without a
//! callback: an outcome nobody reads is an error nobody hears of. A callback that has
//! nothing to do but fail loudly is `|r| r.unwrap()`; one that counts on
//! [`Context::wait_for_all`] and an unlocked tag still gets to see the failure.

use starling_core::{CommId, Rank, Tag};

use crate::api::comm::Comm;
use crate::api::context::{AnyHandle, Context, RecvOpts, Request, SendOpts};
use crate::error::CommError;
use crate::runtime::data::{Handle, Interface};
use crate::runtime::task::TaskTag;

/// The transfers of an array: (handle, peer, tag).
type Items = Vec<(AnyHandle, Rank, Tag)>;

/// Where a transfer's peer ranks are numbered: the world (on any [`CommId`]), or a
/// [`Comm`], whose members are numbered from 0.
#[derive(Clone, Copy, Debug)]
enum Ranks<'a> {
    World,
    In(&'a Comm),
}

impl Ranks<'_> {
    /// The world rank of peer `rank`, and the communicator on which to match.
    fn resolve(self, rank: Rank, comm: CommId) -> Result<(Rank, CommId), CommError> {
        match self {
            Self::World => Ok((rank, comm)),
            Self::In(c) => Ok((c.world(rank)?, c.id())),
        }
    }
}

impl Context {
    /// Starts building a send of `h` to rank `dest` with `tag`; a terminal posts it:
    /// [`wait`](SendBuilder::wait), [`start`](SendBuilder::start) or
    /// [`detach`](SendBuilder::detach) (see the [module](crate::p2p)).
    ///
    /// ```
    /// # use starling_std::{run_local, interfaces::Variable};
    /// # use starling_core::{Rank, Tag};
    /// # run_local(2, |ctx| {
    /// # let h = ctx.register(Variable::new(1u8));
    /// # if ctx.rank() == Rank(0) {
    /// ctx.send(&h, Rank(1), Tag(3)).wait()?; // starpu_mpi_send
    /// # } else { ctx.recv(&h, Rank(0), Tag(3)).wait()?; }
    /// # Ok::<(), starling_std::CommError>(())
    /// # })?;
    /// # Ok::<(), starling_std::ShutdownError>(())
    /// ```
    #[doc(alias = "starpu_mpi_send")]
    #[doc(alias = "starpu_mpi_isend")]
    #[doc(alias = "starpu_mpi_issend")]
    #[doc(alias = "starpu_mpi_isend_detached")]
    pub fn send<'a, I: Interface>(
        &'a self,
        h: &'a Handle<I>,
        dest: Rank,
        tag: Tag,
    ) -> SendBuilder<'a, I> {
        SendBuilder {
            ctx: self,
            handle: h,
            dest,
            tag,
            ranks: Ranks::World,
            opts: SendOpts::default(),
        }
    }

    /// Starts building a receive into `h` from rank `source` with `tag`; a terminal
    /// posts it: [`wait`](RecvBuilder::wait), [`start`](RecvBuilder::start) or
    /// [`detach`](RecvBuilder::detach) (see the [module](crate::p2p)).
    #[doc(alias = "starpu_mpi_recv")]
    #[doc(alias = "starpu_mpi_irecv")]
    #[doc(alias = "starpu_mpi_irecv_detached")]
    pub fn recv<'a, I: Interface>(
        &'a self,
        h: &'a Handle<I>,
        source: Rank,
        tag: Tag,
    ) -> RecvBuilder<'a, I> {
        RecvBuilder {
            ctx: self,
            handle: h,
            source,
            tag,
            ranks: Ranks::World,
            opts: RecvOpts::default(),
        }
    }

    /// Starts building detached sends of several handles, each to its destination with
    /// its tag (`starpu_mpi_isend_array_detached_unlock_tag`). Items are
    /// `(handle, dest, tag)` where the handle is a `&Handle<I>` or an [`AnyHandle`] (for
    /// handles of different interfaces). [`SendAllBuilder::detach`] posts them.
    #[doc(alias = "starpu_mpi_isend_array_detached_unlock_tag")]
    pub fn send_all<H: Into<AnyHandle>>(
        &self,
        items: impl IntoIterator<Item = (H, Rank, Tag)>,
    ) -> SendAllBuilder<'_> {
        SendAllBuilder {
            ctx: self,
            items: collect(items),
            ranks: Ranks::World,
            opts: SendOpts::default(),
            unlock: None,
        }
    }

    /// Starts building detached receives into several handles, each from its source with
    /// its tag (`starpu_mpi_irecv_array_detached_unlock_tag`). Items are as for
    /// [`Context::send_all`]; [`RecvAllBuilder::detach`] posts them.
    #[doc(alias = "starpu_mpi_irecv_array_detached_unlock_tag")]
    pub fn recv_all<H: Into<AnyHandle>>(
        &self,
        items: impl IntoIterator<Item = (H, Rank, Tag)>,
    ) -> RecvAllBuilder<'_> {
        RecvAllBuilder {
            ctx: self,
            items: collect(items),
            ranks: Ranks::World,
            opts: RecvOpts::default(),
            unlock: None,
        }
    }
}

fn collect<H: Into<AnyHandle>>(items: impl IntoIterator<Item = (H, Rank, Tag)>) -> Items {
    items
        .into_iter()
        .map(|(h, peer, tag)| (h.into(), peer, tag))
        .collect()
}

/// A send of one handle being built ([`Context::send`]). Nothing is posted until a
/// terminal: [`wait`](Self::wait), [`start`](Self::start) or [`detach`](Self::detach).
#[must_use = "a send is posted by `.wait()`, `.start()` or `.detach(callback)`"]
pub struct SendBuilder<'a, I: Interface> {
    ctx: &'a Context,
    handle: &'a Handle<I>,
    dest: Rank,
    tag: Tag,
    ranks: Ranks<'a>,
    opts: SendOpts,
}

impl<I: Interface> core::fmt::Debug for SendBuilder<'_, I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendBuilder")
            .field("data", &self.handle.id())
            .field("dest", &self.dest)
            .field("tag", &self.tag)
            .field("ranks", &self.ranks)
            .field("opts", &self.opts)
            .finish()
    }
}

impl<'a, I: Interface> SendBuilder<'a, I> {
    /// Synchronous mode (`starpu_mpi_issend`): the send completes once the receiver
    /// posted the matching receive, and never creates early data there.
    #[doc(alias = "starpu_mpi_issend")]
    #[doc(alias = "starpu_mpi_issend_detached")]
    pub fn sync(mut self) -> Self {
        self.opts.sync = true;
        self
    }

    /// The send's priority (the reference's `_prio` variants; default 0): among the sends
    /// ready together, higher leaves first.
    #[doc(alias = "starpu_mpi_isend_prio")]
    #[doc(alias = "starpu_mpi_isend_detached_prio")]
    pub fn priority(mut self, priority: i32) -> Self {
        self.opts.priority = priority;
        self
    }

    /// Sends on `comm`, to its member `dest` (numbered in `comm`, from 0). A `dest` not
    /// below [`Comm::size`] is refused by the terminal with
    /// [`CommError::RankOutOfRange`].
    pub fn on(mut self, comm: &'a Comm) -> Self {
        self.ranks = Ranks::In(comm);
        self
    }

    /// Sends on the communicator `comm` (a [`Context::comm_dup`] id, or a [`Comm::id`]),
    /// to world rank `dest`: only the matching changes.
    pub fn comm(mut self, comm: CommId) -> Self {
        self.ranks = Ranks::World;
        self.opts.comm = comm;
        self
    }

    /// Unlocks task tag `tag` when the send completes, successfully or not, just before
    /// its callback runs (`starpu_mpi_isend_detached_unlock_tag`); wait for it with
    /// [`Context::tag_wait`].
    #[doc(alias = "starpu_mpi_isend_detached_unlock_tag")]
    pub fn unlock(mut self, tag: TaskTag) -> Self {
        self.opts.unlock = Some(tag);
        self
    }

    fn resolve(&self) -> Result<(Rank, SendOpts), CommError> {
        let (dest, comm) = self.ranks.resolve(self.dest, self.opts.comm)?;
        Ok((dest, SendOpts { comm, ..self.opts }))
    }

    /// Posts the send and blocks until it completed (`starpu_mpi_send`). The send waits
    /// for the handle's earlier writers; later writers wait for it.
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted; or the transfer's
    /// failure.
    #[doc(alias = "starpu_mpi_send")]
    pub fn wait(self) -> Result<(), CommError> {
        let (dest, opts) = self.resolve()?;
        self.ctx.wait_send(self.handle, dest, self.tag, opts)
    }

    /// Posts the send and returns its [`Request`] (`starpu_mpi_isend`): wait on it or
    /// test it to completion; one dropped before is reported at shutdown.
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted.
    #[doc(alias = "starpu_mpi_isend")]
    #[must_use = "a request must be waited on or tested to completion"]
    pub fn start(self) -> Result<Request, CommError> {
        let (dest, opts) = self.resolve()?;
        self.ctx.start_send(self.handle, dest, self.tag, opts)
    }

    /// Posts the send and forgets it (`starpu_mpi_isend_detached`): `callback` runs once
    /// with its outcome, on the thread driving the rank's progress, so it must not block.
    /// [`Context::wait_for_all`] waits for it too.
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted, and `callback`
    /// never runs.
    #[doc(alias = "starpu_mpi_isend_detached")]
    pub fn detach(
        self,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let (dest, opts) = self.resolve()?;
        self.ctx
            .detach_send(self.handle, dest, self.tag, opts, callback)
    }
}

/// A receive into one handle being built ([`Context::recv`]). Nothing is posted until a
/// terminal: [`wait`](Self::wait), [`start`](Self::start) or [`detach`](Self::detach).
#[must_use = "a receive is posted by `.wait()`, `.start()` or `.detach(callback)`"]
pub struct RecvBuilder<'a, I: Interface> {
    ctx: &'a Context,
    handle: &'a Handle<I>,
    source: Rank,
    tag: Tag,
    ranks: Ranks<'a>,
    opts: RecvOpts,
}

impl<I: Interface> core::fmt::Debug for RecvBuilder<'_, I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvBuilder")
            .field("data", &self.handle.id())
            .field("source", &self.source)
            .field("tag", &self.tag)
            .field("ranks", &self.ranks)
            .field("opts", &self.opts)
            .finish()
    }
}

impl<'a, I: Interface> RecvBuilder<'a, I> {
    /// Receives on `comm`, from its member `source` (numbered in `comm`, from 0). A
    /// `source` not below [`Comm::size`] is refused by the terminal with
    /// [`CommError::RankOutOfRange`].
    pub fn on(mut self, comm: &'a Comm) -> Self {
        self.ranks = Ranks::In(comm);
        self
    }

    /// Receives on the communicator `comm` (a [`Context::comm_dup`] id, or a
    /// [`Comm::id`]), from world rank `source`: only the matching changes.
    pub fn comm(mut self, comm: CommId) -> Self {
        self.ranks = Ranks::World;
        self.opts.comm = comm;
        self
    }

    /// Unlocks task tag `tag` when the receive completes, successfully or not, just
    /// before its callback runs (`starpu_mpi_irecv_detached_unlock_tag`).
    #[doc(alias = "starpu_mpi_irecv_detached_unlock_tag")]
    pub fn unlock(mut self, tag: TaskTag) -> Self {
        self.opts.unlock = Some(tag);
        self
    }

    /// Whether the receive is ordered after the handle's earlier accesses, and later ones
    /// after it (default `true`, as a write; `false` is the reference's
    /// `starpu_mpi_irecv_detached_sequential_consistency`). For every access to one
    /// handle, see [`Context::set_sequential_consistency`].
    #[doc(alias = "starpu_mpi_irecv_detached_sequential_consistency")]
    pub fn sequential_consistency(mut self, on: bool) -> Self {
        self.opts.sequential_consistency = on;
        self
    }

    fn resolve(&self) -> Result<(Rank, RecvOpts), CommError> {
        let (source, comm) = self.ranks.resolve(self.source, self.opts.comm)?;
        Ok((source, RecvOpts { comm, ..self.opts }))
    }

    /// Posts the receive and blocks until it completed (`starpu_mpi_recv`).
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted; or the transfer's
    /// failure (a size mismatch: [`CommError::Data`]).
    #[doc(alias = "starpu_mpi_recv")]
    pub fn wait(self) -> Result<(), CommError> {
        let (source, opts) = self.resolve()?;
        self.ctx.wait_recv(self.handle, source, self.tag, opts)
    }

    /// Posts the receive and returns its [`Request`] (`starpu_mpi_irecv`): wait on it or
    /// test it to completion; one dropped before is reported at shutdown.
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted.
    #[doc(alias = "starpu_mpi_irecv")]
    #[must_use = "a request must be waited on or tested to completion"]
    pub fn start(self) -> Result<Request, CommError> {
        let (source, opts) = self.resolve()?;
        self.ctx.start_recv(self.handle, source, self.tag, opts)
    }

    /// Posts the receive and forgets it (`starpu_mpi_irecv_detached`): `callback` runs
    /// once with its outcome, on the thread driving the rank's progress, so it must not
    /// block. [`Context::wait_for_all`] waits for it too.
    ///
    /// # Errors
    /// A refusal (see the [module](crate::p2p)): nothing was posted, and `callback`
    /// never runs.
    #[doc(alias = "starpu_mpi_irecv_detached")]
    pub fn detach(
        self,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let (source, opts) = self.resolve()?;
        self.ctx
            .detach_recv(self.handle, source, self.tag, opts, callback)
    }
}

/// Sends of several handles being built ([`Context::send_all`]); [`detach`](Self::detach)
/// posts them.
#[must_use = "the sends are posted by `.detach(callback)`"]
pub struct SendAllBuilder<'a> {
    ctx: &'a Context,
    items: Items,
    ranks: Ranks<'a>,
    opts: SendOpts,
    unlock: Option<TaskTag>,
}

impl core::fmt::Debug for SendAllBuilder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendAllBuilder")
            .field("items", &self.items)
            .field("ranks", &self.ranks)
            .field("opts", &self.opts)
            .field("unlock", &self.unlock)
            .finish()
    }
}

impl<'a> SendAllBuilder<'a> {
    /// Every send in synchronous mode ([`SendBuilder::sync`]).
    pub fn sync(mut self) -> Self {
        self.opts.sync = true;
        self
    }

    /// Every send's priority ([`SendBuilder::priority`]).
    pub fn priority(mut self, priority: i32) -> Self {
        self.opts.priority = priority;
        self
    }

    /// Every send on `comm`, destinations numbered in it ([`SendBuilder::on`]).
    pub fn on(mut self, comm: &'a Comm) -> Self {
        self.ranks = Ranks::In(comm);
        self
    }

    /// Every send on the communicator `comm`, to world ranks ([`SendBuilder::comm`]).
    pub fn comm(mut self, comm: CommId) -> Self {
        self.ranks = Ranks::World;
        self.opts.comm = comm;
        self
    }

    /// Unlocks task tag `tag` once every send completed, failed ones included, just
    /// before the callback runs; at once when there is none
    /// (`starpu_mpi_isend_array_detached_unlock_tag`).
    pub fn unlock(mut self, tag: TaskTag) -> Self {
        self.unlock = Some(tag);
        self
    }

    /// Checks every item, then posts every send detached; `callback` runs once, when all
    /// completed, with the first failure among them or `Ok` — on the thread driving the
    /// rank's progress (it must not block), or at once for no items.
    ///
    /// # Errors
    /// The refusal of the first item refused (see the [module](crate::p2p)): nothing was
    /// posted, `callback` never runs and no tag is unlocked.
    pub fn detach(
        self,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let (items, comm) = resolve_all(self.items, self.ranks, self.opts.comm)?;
        let opts = SendOpts { comm, ..self.opts };
        self.ctx.detach_sends(&items, opts, self.unlock, callback)
    }
}

/// Receives into several handles being built ([`Context::recv_all`]);
/// [`detach`](Self::detach) posts them.
#[must_use = "the receives are posted by `.detach(callback)`"]
pub struct RecvAllBuilder<'a> {
    ctx: &'a Context,
    items: Items,
    ranks: Ranks<'a>,
    opts: RecvOpts,
    unlock: Option<TaskTag>,
}

impl core::fmt::Debug for RecvAllBuilder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvAllBuilder")
            .field("items", &self.items)
            .field("ranks", &self.ranks)
            .field("opts", &self.opts)
            .field("unlock", &self.unlock)
            .finish()
    }
}

impl<'a> RecvAllBuilder<'a> {
    /// Every receive on `comm`, sources numbered in it ([`RecvBuilder::on`]).
    pub fn on(mut self, comm: &'a Comm) -> Self {
        self.ranks = Ranks::In(comm);
        self
    }

    /// Every receive on the communicator `comm`, from world ranks
    /// ([`RecvBuilder::comm`]).
    pub fn comm(mut self, comm: CommId) -> Self {
        self.ranks = Ranks::World;
        self.opts.comm = comm;
        self
    }

    /// Every receive's ordering ([`RecvBuilder::sequential_consistency`]).
    pub fn sequential_consistency(mut self, on: bool) -> Self {
        self.opts.sequential_consistency = on;
        self
    }

    /// Unlocks task tag `tag` once every receive completed, failed ones included, just
    /// before the callback runs; at once when there is none
    /// (`starpu_mpi_irecv_array_detached_unlock_tag`).
    pub fn unlock(mut self, tag: TaskTag) -> Self {
        self.unlock = Some(tag);
        self
    }

    /// Checks every item, then posts every receive detached; `callback` runs once, when
    /// all completed, with the first failure among them or `Ok` — on the thread driving
    /// the rank's progress (it must not block), or at once for no items.
    ///
    /// # Errors
    /// The refusal of the first item refused (see the [module](crate::p2p)): nothing was
    /// posted, `callback` never runs and no tag is unlocked.
    pub fn detach(
        self,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let (items, comm) = resolve_all(self.items, self.ranks, self.opts.comm)?;
        let opts = RecvOpts { comm, ..self.opts };
        self.ctx.detach_recvs(&items, opts, self.unlock, callback)
    }
}

/// The items with their peers as world ranks, and the communicator to match on.
fn resolve_all(
    mut items: Items,
    ranks: Ranks<'_>,
    comm: CommId,
) -> Result<(Items, CommId), CommError> {
    let mut on = comm;
    for (_, peer, _) in &mut items {
        (*peer, on) = ranks.resolve(*peer, comm)?;
    }
    Ok((items, on))
}

#[cfg(test)]
mod tests;
