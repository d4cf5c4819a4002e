//! The point-to-point machinery of a [`Context`]: the checks and posts behind the send
//! and receive builders of [`crate::p2p`] (blocking, immediate, detached, arrays), the
//! transfers of the task flow, barriers and communication statistics.

use std::sync::mpsc;

use starling_core::engine::{RecvArgs, SendArgs};
use starling_core::envelope::HEADER_LEN;
use starling_core::{AccessMode, CommId, DataId, Priority, Rank, Tag};

use crate::error::{CommError, Noted, TransferDirection, TransferError};
use crate::io::progress::{Command, Done, Payload};
use crate::runtime::data::{AnyCell, Handle, Interface};
use crate::runtime::pool::BufferPool;
use crate::runtime::task::{Access, TaskTag};
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};
use crate::trace::{self};

use super::*;

impl Context {
    // ----- point to point ------------------------------------------------------------

    pub(crate) fn check_rank(&self, rank: Rank) -> Result<(), CommError> {
        if rank.0 >= self.size {
            return Err(CommError::RankOutOfRange {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Refuses the tags the runtime keeps for itself ([`crate::tags::RESERVED_TAGS`]).
    pub(crate) fn check_user_tag(&self, tag: Tag) -> Result<(), CommError> {
        if crate::tags::RESERVED_TAGS.contains(&tag.0) {
            return Err(CommError::ReservedTag { tag });
        }
        Ok(())
    }

    /// Refuses, for an explicit registration, the reserved tags and the automatic ones
    /// ([`crate::tags::AUTO_TAGS`]).
    pub(crate) fn check_explicit_tag(&self, tag: Tag) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        if crate::tags::AUTO_TAGS.contains(&tag.0) {
            return Err(CommError::AutoTagRange { tag });
        }
        Ok(())
    }

    /// Posts a send of `cell` once its earlier writers are done; `done` runs on the
    /// thread driving progress (see [`drive_until`]) when the request completes.
    pub(crate) fn post_send(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.post_send_from(cell, dest, tag, opts, done, self.in_place_min, false)
    }

    /// [`Context::post_send`] for a transfer the task flow depends on (the insert flow,
    /// collectives, reductions): its failure is recorded in the runtime and reported by
    /// [`Context::try_wait_for_all`], later inserts and shutdown.
    pub(crate) fn post_flow_send(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_send_from(
            cell,
            dest,
            tag,
            opts,
            move |r| done.call(r),
            self.in_place_min,
            true,
        )
    }

    /// [`Context::post_recv`] for a transfer the task flow depends on: when it fails, the
    /// handle's value is poisoned ([`Runtime::fail`]) — no task reads it, no send carries
    /// it — and the failure is reported as for [`Context::post_flow_send`].
    pub(crate) fn post_flow_recv(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
    ) -> Result<(), CommError> {
        let data = cell.id();
        self.post_recv_inner(cell, source, tag, opts, move |r| done.call(r), Some(data))
    }

    /// [`Context::post_flow_recv`] into a buffer that stands for datum `data` (a
    /// reduction's contribution buffer): a failure names `data`.
    pub(crate) fn post_flow_recv_for(
        &self,
        cell: Arc<dyn AnyCell>,
        data: DataId,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: Done,
    ) -> Result<(), CommError> {
        self.post_recv_inner(cell, source, tag, opts, move |r| done.call(r), Some(data))
    }

    /// [`Context::post_send`], lending the handle's data in place from `in_place_min`
    /// bytes up; `flow`: a transfer of the task flow ([`Context::post_flow_send`]).
    ///
    /// Whatever the transfer, a value that depends on a failed transfer never leaves: the
    /// send fails with [`CommError::Upstream`].
    #[allow(clippy::too_many_arguments)] // reason: the private core of the send family
    pub(super) fn post_send_from(
        &self,
        cell: Arc<dyn AnyCell>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        done: impl FnOnce(Result<(), CommError>) + Send + 'static,
        in_place_min: usize,
        flow: bool,
    ) -> Result<(), CommError> {
        self.check_rank(dest)?;
        if self.fake.load(Ordering::Relaxed) {
            // Fake rank mode: communications are dropped (the reference's behaviour).
            done(Ok(()));
            return Ok(());
        }
        let runtime = self.runtime.clone();
        let commands = Arc::clone(&self.commands);
        let pedantic = self.pedantic_isend;
        let mode = if pedantic {
            AccessMode::RW
        } else {
            AccessMode::R
        };
        let ticket = self.tracker.begin(
            crate::tools::hang::Waiting::Send,
            dest,
            opts.comm,
            tag,
            Some(cell.id()),
        );
        let access = vec![Access {
            cell: Arc::clone(&cell),
            mode,
        }];
        let rt = runtime;
        let pool = Arc::clone(&self.pool);
        let device_min = self.device_min;
        self.runtime
            .submit_send_hook(access, opts.priority, move |node| {
                let data = cell.id();
                // A value that depends on a failed transfer is not sent.
                let poison = rt.poison_of(node);
                let size = cell.packed_size();
                // Between ranks of one process, a large value held on a device travels as
                // a device snapshot (its layer decides); anything else is read from main
                // memory, which the device layers bring up to date first.
                let on_device = if size >= device_min && poison.is_none() {
                    rt.layers().export(&cell)
                } else {
                    None
                };
                let mut host_failed = None;
                if on_device.is_none() {
                    if let Err(e) = rt.layers().to_host(&[Access {
                        cell: Arc::clone(&cell),
                        mode,
                    }]) {
                        host_failed = Some(e);
                    }
                }
                // A large contiguous handle is sent from its own memory, held for reading
                // until the send completes; anything else is packed, and the value
                // current now is the one sent: later writers may go on at once.
                let lent = if on_device.is_none()
                    && size >= in_place_min
                    && poison.is_none()
                    && host_failed.is_none()
                {
                    cell.lend_read()
                } else {
                    None
                };
                let hold = pedantic || lent.is_some();
                let bytes = match (on_device, lent) {
                    (Some(v), _) => Payload::Device(v),
                    (None, Some(l)) => Payload::Lent(l),
                    (None, None) => {
                        let sound = poison.is_none() && host_failed.is_none();
                        Payload::Bytes(packed(&pool, sound.then_some(&*cell), size))
                    }
                };
                if let Some(e) = host_failed {
                    rt.record_device_failure(format!("a send could not read its data: {e}"));
                }
                let mut args = SendArgs::new(opts.comm, dest, tag, size as u64);
                args.priority = Priority(opts.priority);
                args.sync = opts.sync;
                let rt2 = rt.clone();
                let finish: Done = Done::new(move |result| {
                    if let Some(t) = opts.unlock {
                        rt2.unlock_tag(t);
                    }
                    // Release the handle before waking the waiter, so that its next
                    // access finds the handle free.
                    if hold {
                        rt2.complete(node);
                    }
                    if let (true, Err(cause)) = (flow, &result) {
                        if !matches!(cause, CommError::Upstream(_)) {
                            // (an upstream failure is recorded already, at its source)
                            rt2.record_failure(TransferError {
                                data,
                                peer: dest,
                                tag,
                                direction: TransferDirection::Send,
                                cause: cause.clone(),
                            });
                        }
                    }
                    done(result);
                    rt2.end_request();
                });
                match (ticket.start(finish), poison) {
                    (Ok(done), None) => commands(Command::Send { args, bytes, done }),
                    (Ok(done), Some(p)) => {
                        drop(bytes);
                        done.call(Err(CommError::Upstream(Box::new((*p).clone()))));
                    }
                    (Err((finish, e)), _) => finish.call(Err(e)), // the rank gave up (watchdog)
                }
                if !hold {
                    rt.complete(node);
                }
            });
        Ok(())
    }

    /// Posts a receive into `cell` once its earlier accesses are done.
    pub(crate) fn post_recv(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.post_recv_inner(cell, source, tag, opts, done, None)
    }

    /// [`Context::post_recv`]; `flow`: a transfer of the task flow, whose failure
    /// poisons the handle's value and is reported naming that datum
    /// ([`Context::post_flow_recv`]).
    pub(super) fn post_recv_inner(
        &self,
        cell: Arc<dyn AnyCell>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        done: impl FnOnce(Result<(), CommError>) + Send + 'static,
        flow: Option<DataId>,
    ) -> Result<(), CommError> {
        self.check_rank(source)?;
        if self.fake.load(Ordering::Relaxed) {
            done(Ok(()));
            return Ok(());
        }
        let runtime = self.runtime.clone();
        let commands = Arc::clone(&self.commands);
        let ticket = self.tracker.begin(
            crate::tools::hang::Waiting::Recv,
            source,
            opts.comm,
            tag,
            Some(cell.id()),
        );
        let access = if opts.sequential_consistency {
            vec![Access {
                cell: Arc::clone(&cell),
                mode: AccessMode::W,
            }]
        } else {
            Vec::new()
        };
        let rt = runtime;
        self.runtime.submit_request_hook(access, 0, move |node| {
            let args = RecvArgs::new(opts.comm, source, tag, 0);
            let finish: Done = Done::new(move |result| {
                if let Some(t) = opts.unlock {
                    rt.unlock_tag(t);
                }
                // Release the handle before waking the waiter, so that its next
                // access finds the handle free. A failed receive of the task flow
                // leaves a stale value: it is poisoned, so nothing reads it.
                match (&result, flow) {
                    (Err(cause), Some(data)) => rt.fail(
                        node,
                        TransferError {
                            data,
                            peer: source,
                            tag,
                            direction: TransferDirection::Recv,
                            cause: cause.clone(),
                        },
                    ),
                    _ => rt.complete(node),
                }
                done(result);
                rt.end_request();
            });
            match ticket.start(finish) {
                Ok(done) => commands(Command::Recv { args, cell, done }),
                Err((finish, e)) => finish.call(Err(e)), // the rank gave up (watchdog)
            }
        });
        Ok(())
    }

    /// Wraps a user's completion callback: it runs on the thread driving progress, so a panic
    /// in it is caught (the thread goes on) and reported at shutdown, named by `what`
    /// (called only then: a detached request formats no text of its own — a `format!`
    /// per request was a quarter of a detached receive's instructions). The wrapper is
    /// not boxed: [`Context::post_send`] and [`Context::post_recv`] take any closure and
    /// box it once, inside the request's own completion.
    pub(super) fn guarded(
        &self,
        what: impl FnOnce() -> String + Send + 'static,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> impl FnOnce(Result<(), CommError>) + Send + 'static {
        let panics = Arc::clone(&self.reports);
        let rt = self.runtime.clone();
        move |result| {
            // Busy while it runs: a slow callback at shutdown is not a rank stuck.
            let _running = rt.callback_running();
            if std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| callback(result))).is_err()
            {
                lock(&panics).push(Noted::CallbackPanicked(what()));
            }
        }
    }

    pub(super) fn request(&self, what: ReqWhat) -> (Request, Done) {
        request_pair(
            what,
            Arc::clone(&self.reports),
            self.driver.clone(),
            self.runtime.tracer().cloned(),
        )
    }

    /// Checks and posts a send of `h` to `dest` with `tag` and `opts`: the request of
    /// [`SendBuilder::start`](crate::p2p::SendBuilder::start).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a destination outside the world;
    /// [`CommError::ReservedTag`] for a tag the runtime keeps for itself;
    /// [`CommError::Partition`] for a partitioned handle or a retired child
    /// ([`crate::partition`]). Nothing was submitted then.
    pub(crate) fn start_send<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
    ) -> Result<Request, CommError> {
        self.start_send_from(h, dest, tag, opts, self.in_place_min)
    }

    /// [`Context::start_send`], lending the handle's data in place from `in_place_min`
    /// bytes up.
    pub(super) fn start_send_from<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        in_place_min: usize,
    ) -> Result<Request, CommError> {
        self.check_rank(dest)?;
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let (req, done) = self.request(ReqWhat::Transfer {
            send: true,
            data: h.id(),
            peer: dest,
            tag,
            me: self.rank,
        });
        self.post_send_from(
            h.erased(),
            dest,
            tag,
            opts,
            move |r| done.call(r),
            in_place_min,
            false,
        )?;
        Ok(req)
    }

    /// Sends `h` and waits for the send to complete: the blocking send of
    /// [`SendBuilder::wait`](crate::p2p::SendBuilder::wait).
    ///
    /// # Errors
    /// As for [`Context::start_send`], and the request's failure.
    pub(crate) fn wait_send<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
    ) -> Result<(), CommError> {
        // Drive from before the send is posted, so that posting it wakes no thread.
        let driving = self.driver.as_ref().map(|d| d.enter());
        // The caller waits until the send completes: holding the handle for reading
        // until then costs nothing, so every payload that travels as its own message
        // is sent from the handle's memory.
        match self.express_send(h, dest, tag, opts)? {
            Some(Blocking::Sent) => return Ok(()),
            Some(Blocking::Posted(req)) => return req.wait_driving(driving),
            None => {}
        }
        self.start_send_from(h, dest, tag, opts, self.blocking_in_place_min)?
            .wait_driving(driving)
    }

    /// The blocking send of a handle with nothing pending, without a node
    /// ([`Runtime::begin_request_on`]): its caller waits for it before it submits
    /// anything else, so no later access of this thread can come before it, and the
    /// handle's data is read now (packed, or lent until the send completes, as a blocking
    /// send's is). `None`, with nothing posted, when the send needs the task graph: a
    /// writer or reader pending, a poisoned value, a device layer, a tag to unlock, the
    /// pedantic mode, a fake rank.
    ///
    /// A standard send whose packed payload fits an eager message (or a fast one) leaves
    /// from this thread at once, without a request, when nothing waits to go before it
    /// ([`Drive::send_now`]): its bytes are the transport's from then on, so the handle may
    /// be used again, and the send is over ([`Blocking::Sent`]).
    fn express_send<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
    ) -> Result<Option<Blocking>, CommError> {
        if !self.express_checked(h, dest, tag, opts.unlock.is_some() || self.pedantic_isend)? {
            return Ok(None);
        }
        let cell = h.erased();
        let size = cell.packed_size();
        let lent = if size >= self.blocking_in_place_min {
            cell.lend_read()
        } else {
            None
        };
        let mut args = SendArgs::new(opts.comm, dest, tag, size as u64);
        args.priority = Priority(opts.priority);
        args.sync = opts.sync;
        let bytes = match lent {
            Some(l) => Payload::Lent(l),
            None => {
                let mut bytes = packed(&self.pool, Some(&*cell), size);
                // (A rank that gave up fails its later requests: this one is made as
                // any other then.)
                let now = self
                    .driver
                    .as_ref()
                    .filter(|_| !opts.sync && !self.tracker.gave_up());
                if let Some(d) = now {
                    match d.send_now(args, bytes) {
                        Ok(()) => {
                            // Counted in by `express_checked`; over already.
                            self.runtime.end_request_at_once();
                            return Ok(Some(Blocking::Sent));
                        }
                        Err(back) => bytes = back,
                    }
                }
                Payload::Bytes(bytes)
            }
        };
        Ok(Some(Blocking::Posted(self.post_express(
            true,
            cell,
            (dest, opts.comm, tag),
            |done, _| Command::Send { args, bytes, done },
        ))))
    }

    /// The checks of a blocking transfer of `h` with `peer` and `tag` (as its terminal
    /// makes them), then whether it may go without a node: nothing about it `needs_graph`,
    /// the rank is not fake, `h` is not the child of a partition (undoing the partition
    /// takes a child's data in a node of the graph, which would not wait for it), and
    /// nothing is pending on `h` — it is counted in flight then
    /// ([`Runtime::begin_request_on`]).
    fn express_checked<I: Interface>(
        &self,
        h: &Handle<I>,
        peer: Rank,
        tag: Tag,
        needs_graph: bool,
    ) -> Result<bool, CommError> {
        self.check_rank(peer)?;
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        Ok(!needs_graph
            && !self.fake.load(Ordering::Relaxed)
            && h.cell.state() & crate::runtime::data::CHILD == 0
            && self.runtime.begin_request_on(h.id()))
    }

    /// Posts the command `make` builds around its completion (and the cell) for a
    /// blocking transfer of `cell` without a node (counted in by
    /// [`Context::express_checked`]) with `(peer, comm, tag)`: its request, which ends the
    /// count when it completes, tracked for the hang explainer. The cell counts the
    /// transfer in flight meanwhile ([`AnyCell::direct`]: unregistration waits for it).
    fn post_express(
        &self,
        send: bool,
        cell: Arc<dyn AnyCell>,
        (peer, comm, tag): (Rank, CommId, Tag),
        make: impl FnOnce(Done, Arc<dyn AnyCell>) -> Command,
    ) -> Request {
        let data = cell.id();
        let (req, done) = self.request(ReqWhat::Transfer {
            send,
            data,
            peer,
            tag,
            me: self.rank,
        });
        if let Some(n) = cell.direct() {
            n.fetch_add(1, Ordering::SeqCst);
        }
        let rt = self.runtime.clone();
        let held = Arc::clone(&cell);
        let finish = Done::new(move |result| {
            if let Some(n) = held.direct() {
                n.fetch_sub(1, Ordering::SeqCst);
            }
            done.call(result);
            rt.end_request();
        });
        let waiting = if send {
            crate::tools::hang::Waiting::Send
        } else {
            crate::tools::hang::Waiting::Recv
        };
        match self
            .tracker
            .begin_started(waiting, peer, comm, tag, Some(data), finish)
        {
            Ok(done) => (self.commands)(make(done, cell)),
            Err((finish, e)) => finish.call(Err(e)), // the rank gave up (watchdog)
        }
        req
    }

    /// Posts a send and forgets it; `callback` runs once with its outcome, on the thread
    /// driving the rank's progress: the detached send of
    /// [`SendBuilder::detach`](crate::p2p::SendBuilder::detach).
    ///
    /// # Errors
    /// As for [`Context::start_send`].
    pub(crate) fn detach_send<I: Interface>(
        &self,
        h: &Handle<I>,
        dest: Rank,
        tag: Tag,
        opts: SendOpts,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let data = h.id();
        let callback = self.guarded(
            move || format!("send of {data} to {dest} with {tag}"),
            callback,
        );
        self.post_send(h.erased(), dest, tag, opts, callback)
    }

    /// Posts detached sends of several handles (destinations in the world), every one
    /// checked before any is posted; once all completed, unlocks `unlock` and runs
    /// `callback` with the first failure, or `Ok`: the sends of
    /// [`SendAllBuilder::detach`](crate::p2p::SendAllBuilder::detach).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`], [`CommError::ReservedTag`] or
    /// [`CommError::Partition`] for the first item refused; nothing was sent then.
    pub(crate) fn detach_sends(
        &self,
        sends: &[(AnyHandle, Rank, Tag)],
        opts: SendOpts,
        unlock: Option<TaskTag>,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let what = format!("{} sends", sends.len());
        self.detach_many(sends, what, unlock, callback, |cell, dest, tag, done| {
            self.post_send(cell, dest, tag, opts, move |r| done.call(r))
        })
    }

    /// Checks and posts a receive into `h` from `source` with `tag` and `opts`: the
    /// request of [`RecvBuilder::start`](crate::p2p::RecvBuilder::start).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a source outside the world;
    /// [`CommError::ReservedTag`] for a tag the runtime keeps for itself;
    /// [`CommError::Partition`] for a partitioned handle or a retired child
    /// ([`crate::partition`]). Nothing was submitted then.
    pub(crate) fn start_recv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
    ) -> Result<Request, CommError> {
        self.check_rank(source)?;
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let (req, done) = self.request(ReqWhat::Transfer {
            send: false,
            data: h.id(),
            peer: source,
            tag,
            me: self.rank,
        });
        self.post_recv(h.erased(), source, tag, opts, move |r| done.call(r))?;
        Ok(req)
    }

    /// Receives into `h` and waits: the blocking receive of
    /// [`RecvBuilder::wait`](crate::p2p::RecvBuilder::wait).
    ///
    /// # Errors
    /// As for [`Context::start_recv`], and the request's failure (a size mismatch).
    pub(crate) fn wait_recv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
    ) -> Result<(), CommError> {
        let driving = self.driver.as_ref().map(|d| d.enter());
        if let Some(req) = self.express_recv(h, source, tag, opts)? {
            return req.wait_driving(driving);
        }
        self.start_recv(h, source, tag, opts)?.wait_driving(driving)
    }

    /// The blocking receive into a handle with nothing pending, without a node, as
    /// [`Context::express_send`] sends: the caller submits nothing else until it
    /// completed. `None`, with nothing posted, when the receive needs the task graph (as
    /// for the send; and a receive without sequential consistency).
    fn express_recv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
    ) -> Result<Option<Request>, CommError> {
        let needs_graph = opts.unlock.is_some() || !opts.sequential_consistency;
        if !self.express_checked(h, source, tag, needs_graph)? {
            return Ok(None);
        }
        let args = RecvArgs::new(opts.comm, source, tag, 0);
        Ok(Some(self.post_express(
            false,
            h.erased(),
            (source, opts.comm, tag),
            |done, cell| Command::Recv { args, cell, done },
        )))
    }

    /// Posts a receive and forgets it; `callback` runs once with its outcome on the
    /// thread driving the rank's progress: the detached receive of
    /// [`RecvBuilder::detach`](crate::p2p::RecvBuilder::detach).
    ///
    /// # Errors
    /// As for [`Context::start_recv`].
    pub(crate) fn detach_recv<I: Interface>(
        &self,
        h: &Handle<I>,
        source: Rank,
        tag: Tag,
        opts: RecvOpts,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        self.check_user_tag(tag)?;
        h.cell.usable()?;
        let data = h.id();
        let callback = self.guarded(
            move || format!("receive into {data} from {source} with {tag}"),
            callback,
        );
        self.post_recv(h.erased(), source, tag, opts, callback)
    }

    /// Posts detached receives into several handles (sources in the world), every one
    /// checked before any is posted; once all completed, unlocks `unlock` and runs
    /// `callback` with the first failure, or `Ok`: the receives of
    /// [`RecvAllBuilder::detach`](crate::p2p::RecvAllBuilder::detach).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`], [`CommError::ReservedTag`] or
    /// [`CommError::Partition`] for the first item refused; nothing was received then.
    pub(crate) fn detach_recvs(
        &self,
        recvs: &[(AnyHandle, Rank, Tag)],
        opts: RecvOpts,
        unlock: Option<TaskTag>,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
    ) -> Result<(), CommError> {
        let what = format!("{} receives", recvs.len());
        self.detach_many(recvs, what, unlock, callback, |cell, source, tag, done| {
            self.post_recv(cell, source, tag, opts, move |r| done.call(r))
        })
    }

    /// Checks every item (peer, tag, handle) before posting any, then posts each with
    /// `post` and a completion that counts down to `unlock` and `callback` (named
    /// `what` in a report of its panic): the body of [`Context::detach_sends`] and
    /// [`Context::detach_recvs`].
    fn detach_many(
        &self,
        items: &[(AnyHandle, Rank, Tag)],
        what: String,
        unlock: Option<TaskTag>,
        callback: impl FnOnce(Result<(), CommError>) + Send + 'static,
        post: impl Fn(Arc<dyn AnyCell>, Rank, Tag, Done) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        for (h, peer, tag) in items {
            self.check_rank(*peer)?;
            self.check_user_tag(*tag)?;
            h.cell.usable()?;
        }
        let callback = Done::new(self.guarded(move || what, callback));
        let all = self.all_done(items.len(), unlock, callback);
        for (h, peer, tag) in items {
            let all = Arc::clone(&all);
            post(h.cell(), *peer, *tag, Done::new(move |r| all(r)))?;
        }
        Ok(())
    }

    /// A function to call `n` times with each outcome of a group of requests; the last
    /// call unlocks `unlock`, if any, then runs `done` with the first failure it was
    /// given, or `Ok`. With `n == 0`, both happen at once.
    fn all_done(
        &self,
        n: usize,
        unlock: Option<TaskTag>,
        done: Done,
    ) -> Arc<dyn Fn(Result<(), CommError>) + Send + Sync> {
        let runtime = self.runtime.clone();
        let left = AtomicUsize::new(n);
        // The first failure, and the completion until it runs.
        let state: Mutex<(Option<CommError>, Option<Done>)> = Mutex::new((None, Some(done)));
        let finish = move |state: &Mutex<(Option<CommError>, Option<Done>)>| {
            if let Some(t) = unlock {
                runtime.unlock_tag(t);
            }
            let (first, done) = {
                let mut s = lock(state);
                (s.0.take(), s.1.take())
            };
            if let Some(done) = done {
                done.call(first.map_or(Ok(()), Err));
            }
        };
        if n == 0 {
            finish(&state);
        }
        Arc::new(move |result| {
            if let Err(e) = result {
                lock(&state).0.get_or_insert(e);
            }
            if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                finish(&state);
            }
        })
    }

    /// Blocks until every rank called `barrier` (`starpu_mpi_barrier`). It does not wait
    /// for this rank's pending requests (call [`Context::wait_for_all`] first for that);
    /// unlike the reference's, it never blocks the progression thread.
    ///
    /// While the graph-agreement check is on, the ranks first compare their task flows
    /// ([`Context::check_agreement`]); a divergence is reported at shutdown and fails
    /// every later insert. When the watchdog gives up on the job, it returns.
    pub fn barrier(&self) {
        self.barrier_as(crate::tools::hang::Waiting::Barrier);
    }

    /// [`Context::barrier`] as the closing barrier of shutdown, which a rank enters once
    /// its work is done: the hang explainer counts it as no wait between ranks
    /// ([`crate::hang::Waiting::Shutdown`]), so it invents no deadlock between ranks that
    /// exchange nothing, and it says that a message awaited from such a rank will never
    /// be sent.
    pub fn closing_barrier(&self) {
        self.barrier_as(crate::tools::hang::Waiting::Shutdown);
    }

    pub(super) fn barrier_as(&self, kind: crate::tools::hang::Waiting) {
        self.agreement_at_barrier();
        let _wait = trace::wait(self.runtime.tracer(), "barrier");
        let ended = Arc::new(Handoff::new());
        let raised = Arc::clone(&ended);
        let ticket = self
            .tracker
            .begin(kind, self.rank, CommId::WORLD, Tag(0), None);
        let woken: Done = Done::new(move |_| raised.give(0));
        match ticket.start(woken) {
            Ok(done) => (self.commands)(Command::Barrier {
                done: Box::new(move || done.call(Ok(()))),
            }),
            Err((woken, e)) => woken.call(Err(e)),
        }
        if let Some(driver) = &self.driver {
            drive_until(&**driver, None, || ended.given());
        }
        ended.wait();
    }

    /// A new communicator duplicating `comm`: the same ranks, its own matching. Every
    /// rank must call it in the same order. (On the in-process cluster every communicator
    /// holds every rank, so a duplicate of a duplicate is simply another new one.)
    pub fn comm_dup(&self, _comm: CommId) -> CommId {
        CommId(self.next_comm.fetch_add(1, Ordering::SeqCst) as u16)
    }

    /// How many messages arrived on this rank before their receive was posted and were
    /// kept as early data (a diagnostic: synchronous sends never create any).
    pub fn early_messages(&self) -> u64 {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::EarlyMessages(Box::new(move |n| {
            let _ = tx.send(n);
        })));
        rx.recv().unwrap_or_default()
    }

    /// Payload bytes this rank sent to each peer, indexed by rank
    /// (`starpu_mpi_comm_amounts_retrieve` / `starpu_mpi_comm_stats_retrieve`): what was
    /// counted while statistics were on, kept when they are switched off
    /// ([`Context::set_comm_stats`]), so a region between an enable and a disable can be
    /// read after it.
    ///
    /// `None` when statistics were never on for this rank (neither at start-up,
    /// [`crate::ClusterConfig::stats`] / `STARLING_MPI_STATS`, nor at run time): then
    /// nothing was counted, and a row of zeros would be no measurement.
    pub fn comm_amounts(&self) -> Option<Vec<u64>> {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::Amounts(Box::new(move |v| {
            let _ = tx.send(v);
        })));
        rx.recv().unwrap_or_default()
    }

    /// Switches this rank's communication statistics on or off at run time
    /// (`starpu_mpi_comm_stats_enable` / `starpu_mpi_comm_stats_disable`), around a
    /// region of interest; what was counted is kept either way. Payload bytes are counted
    /// when a message is handed to the transport, so a transfer of the task flow counts
    /// if statistics are on when it leaves, which may be after the insert that planned
    /// it: call [`Context::wait_for_all`] before switching them off to count a region
    /// whole. Returns once the switch is made (later sends see it). A rank whose
    /// statistics were on at any time prints its report at shutdown.
    pub fn set_comm_stats(&self, on: bool) {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::SetStats(
            on,
            Box::new(move |()| {
                let _ = tx.send(());
            }),
        ));
        let _ = rx.recv();
    }
}

/// What a blocking send without a node came to ([`Context::express_send`]).
enum Blocking {
    /// It left at once, without a request: it is over.
    Sent,
    /// Its request, to wait for.
    Posted(Request),
}

/// A buffer of `pool` with room for `size` bytes and an envelope's header before them (an
/// eager payload becomes its envelope message in place), holding `cell`'s packed form, or
/// nothing without a cell (a value that must not travel).
fn packed(pool: &BufferPool, cell: Option<&dyn AnyCell>, size: usize) -> Vec<u8> {
    let mut bytes = pool.take_empty_with_headroom(size, HEADER_LEN);
    if let Some(cell) = cell {
        cell.pack_into(&mut bytes);
    }
    bytes
}
