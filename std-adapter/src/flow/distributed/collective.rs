//! Reductions, moving data (get-data-on-node, migration, copy) and the scatter/gather
//! collectives of the insert-task utility.

use std::collections::BTreeSet;

use starling_core::{AccessMode, Owner, Rank, reduce};

use super::{DistState, InsertError, Redux, release_after_pending};
use crate::api::context::{Context, RecvOpts, SendOpts, TaskHandle};
use crate::runtime::data::{AnyCell, Handle, Interface};
use crate::runtime::task::{Access as TaskAccess, Codelet};
use crate::sync::{Arc, lock};

/// The reduction of `cell` across its contributors, with groups of `arity` (0 or 1:
/// flat), as in the reference's `starpu_mpi_redux_data_prio_tree` (internals §8.1).
pub(super) fn reduce(
    ctx: &Context,
    dist: &mut DistState,
    cell: &Arc<dyn AnyCell>,
    arity: usize,
) -> Result<(), InsertError> {
    let id = cell.id();
    let info = *dist.info.get(&id).ok_or(InsertError::NotRegistered(id))?;
    let Owner::Rank(owner) = info.owner else {
        return Err(InsertError::NoReduction(id));
    };
    let Some(r) = dist.redux.get_mut(&id) else {
        return Err(InsertError::NoReduction(id));
    };
    let mut members = vec![Rank(0); r.contributors.len() + 1];
    let n = reduce::members(r.contributors.iter().copied(), owner, &mut members)
        .ok_or(InsertError::NoReduction(id))?;
    members.truncate(n);
    r.contributors.clear();
    let was_initialised = core::mem::take(&mut r.initialised);
    let combine = r.combine.clone();
    let me = ctx.rank;
    let fake = ctx.fake.load(core::sync::atomic::Ordering::Relaxed);
    let mut planned = Vec::new();
    reduce::steps(me, owner, &mut members, arity, was_initialised, |s| {
        planned.push(s)
    })
    .map_err(|_| InsertError::NoReduction(id))?;
    for step in planned {
        match step {
            reduce::Step::Combine { from } => {
                let tmp = cell.same_shape().ok_or(InsertError::NoReduction(id))?;
                if !fake {
                    ctx.post_flow_recv_for(
                        Arc::clone(&tmp),
                        id,
                        from,
                        info.tag,
                        RecvOpts {
                            comm: info.comm,
                            ..RecvOpts::default()
                        },
                        crate::io::progress::Done::new(|_| {}),
                    )?;
                }
                ctx.runtime.submit_task(
                    combine.clone(),
                    vec![
                        TaskAccess {
                            cell: Arc::clone(cell),
                            mode: AccessMode::RW,
                        },
                        TaskAccess {
                            cell: tmp,
                            mode: AccessMode::R,
                        },
                    ],
                    0,
                    None,
                    None,
                );
            }
            reduce::Step::Send { to } => {
                if !fake {
                    ctx.post_flow_send(
                        Arc::clone(cell),
                        to,
                        info.tag,
                        SendOpts {
                            comm: info.comm,
                            ..SendOpts::default()
                        },
                        crate::io::progress::Done::new(|_| {}),
                    )?;
                }
            }
            // Non-owners' contributions are consumed: their copies are stale now.
            reduce::Step::DropCopy => release_after_pending(ctx, Arc::clone(cell)),
        }
    }
    // The value changed: like a write, on every rank.
    let _ = dist.cache.clear_received(id);
    dist.cache.clear_sent(id);
    Ok(())
}

impl Context {
    /// An insert that brings data to a node and keeps it there even with the cache off.
    fn fetch(&self, name: &str) -> super::InsertBuilder<'_> {
        let mut b = self.insert(&Codelet::empty(name));
        b.keep_copies = true;
        b
    }

    /// Wraps up every pending reduction, then waits for every task and request of this
    /// rank (`starpu_mpi_wait_for_all`). Collective: every rank calls it at the same point
    /// of the flow (a pending reduction moves data between ranks).
    ///
    /// While the graph-agreement check is on, the ranks compare their task flows first
    /// ([`Context::check_agreement`]).
    ///
    /// # Errors
    /// As for [`Context::redux`]; [`InsertError::Diverged`] when the ranks' flows differ
    /// (then it does not wait: a divergent flow may never complete);
    /// [`InsertError::Transfer`] when a transfer the flow depends on failed on this rank
    /// (after waiting: what did not depend on it completed).
    pub fn mpi_wait_for_all(&self) -> Result<(), InsertError> {
        {
            let mut dist = lock(&self.dist);
            let pending: Vec<_> = dist
                .redux
                .iter()
                .filter(|(_, r)| !r.contributors.is_empty())
                .map(|(id, _)| *id)
                .collect();
            let mut pending: Vec<_> = pending
                .into_iter()
                .filter_map(|id| dist.cells.get(&id).cloned())
                .collect();
            pending.sort_by_key(|c| c.id());
            for cell in pending {
                reduce(self, &mut dist, &cell, 2)?;
            }
        }
        // Before waiting: a divergent flow may never complete.
        if lock(&self.dist).agreement.enabled {
            self.agreement_check("mpi_wait_for_all")?;
        }
        self.wait_for_all();
        self.transfer_failure()
            .map_err(|e| InsertError::Transfer(Box::new(e)))
    }
    // ----- reductions -------------------------------------------------------------------

    /// Gives `h` its reduction codelets: `combine` (RW the accumulator, R a
    /// contribution) and `init` (W a contribution buffer to the neutral value)
    /// (`starpu_data_set_reduction_methods`). Every rank sets them.
    pub fn set_reduction_methods<I: Interface>(
        &self,
        h: &Handle<I>,
        combine: &Codelet,
        init: &Codelet,
    ) {
        lock(&self.dist).redux.insert(
            h.id(),
            Redux {
                combine: combine.clone(),
                init: init.clone(),
                contributors: BTreeSet::new(),
                initialised: false,
            },
        );
    }

    /// Combines the contributions that tasks with REDUX accesses made to `h` on several
    /// ranks into its owner's value (`starpu_mpi_redux_data_tree`); `arity` 0 or 1 is
    /// flat (every contributor sends to the owner), 2 or more a tree. Every rank calls
    /// it at the same point of the flow. A read of `h` without REDUX does it by itself
    /// (with arity 2), as the reference's automatic wrap-up.
    ///
    /// # Errors
    /// [`InsertError::NoReduction`] without reduction methods, for per-node data, or for
    /// an interface without [`Interface::shape`]; [`InsertError::Partition`] for a
    /// partitioned handle or a retired child.
    pub fn redux<I: Interface>(&self, h: &Handle<I>, arity: usize) -> Result<(), InsertError> {
        h.cell.usable()?;
        let mut dist = lock(&self.dist);
        reduce(self, &mut dist, &h.erased(), arity)
    }

    // ----- moving data ----------------------------------------------------------------

    /// Brings the current value of `h` to `node` and waits there until it arrived
    /// (`starpu_mpi_get_data_on_node`). Every rank calls it; cache-aware.
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn get_data_on_node<I: Interface>(
        &self,
        h: &Handle<I>,
        node: Rank,
    ) -> Result<(), InsertError> {
        self.fetch("get_data_on_node").r(h).on_node(node).submit()?;
        if self.rank == node {
            drop(self.acquire(h, AccessMode::R));
            // The value acquired is sound unless it depends on a failed transfer.
            if let Some(p) = self.runtime.data_poison(h.id()) {
                return Err(InsertError::Transfer(Box::new((*p).clone())));
            }
        }
        Ok(())
    }

    /// Brings the current value of `h` to `node` without waiting
    /// (`starpu_mpi_get_data_on_node_detached` with no callback). On `node`, the handle of
    /// the step that completes once the value arrived: wait on it, or ignore it; `None`
    /// on the other ranks. [`Context::get_data_on_node_detached_cb`] runs a callback
    /// there instead.
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn get_data_on_node_detached<I: Interface>(
        &self,
        h: &Handle<I>,
        node: Rank,
    ) -> Result<Option<TaskHandle>, InsertError> {
        self.fetch("get_data_on_node")
            .r(h)
            .on_node(node)
            .submit()
            .map(|i| i.task)
    }

    /// [`Context::get_data_on_node_detached`] with `callback`, run on `node` once the
    /// value arrived (`starpu_mpi_get_data_on_node_detached` with a callback).
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn get_data_on_node_detached_cb<I: Interface>(
        &self,
        h: &Handle<I>,
        node: Rank,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<(), InsertError> {
        self.fetch("get_data_on_node")
            .r(h)
            .on_node(node)
            .callback(callback)
            .submit()
            .map(|_| ())
    }

    /// Brings the current value of `h` to every rank
    /// (`starpu_mpi_get_data_on_all_nodes_detached`).
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn get_data_on_all_nodes_detached<I: Interface>(
        &self,
        h: &Handle<I>,
    ) -> Result<(), InsertError> {
        for r in 0..self.size {
            self.fetch("get_data_on_node")
                .r(h)
                .on_node(Rank(r))
                .submit()?;
        }
        Ok(())
    }

    /// Moves `h` to a new owner: its current value goes to `new_owner`, which owns it
    /// from now on, and every other copy is flushed (`starpu_mpi_data_migrate`). Every
    /// rank calls it at the same point of the flow.
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit) and [`Context::set_data_owner`].
    pub fn migrate<I: Interface>(&self, h: &Handle<I>, new_owner: Rank) -> Result<(), InsertError> {
        if self.data_owner(h) == Some(Owner::Rank(new_owner)) {
            return Ok(());
        }
        self.fetch("migrate").r(h).on_node(new_owner).submit()?;
        self.set_data_owner(h, Owner::Rank(new_owner))?;
        // Every rank but the new owner, the old owner included, drops its copy.
        self.flush(h);
        Ok(())
    }

    /// Copies the value of `src` into `dst`, which may have another owner: the owner of
    /// `src` sends it to the owner of `dst` (`starpu_mpi_data_cpy` with no callback). It is
    /// an insert, so it is cache-aware; the value travels with `src`'s tag (the reference
    /// uses `dst`'s). Every rank calls it. On `dst`'s owner, the handle of the copy (wait
    /// on it, or ignore it); `None` on the other ranks. [`Context::data_cpy_cb`] runs a
    /// callback there instead.
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn data_cpy<I: Interface + Clone>(
        &self,
        dst: &Handle<I>,
        src: &Handle<I>,
    ) -> Result<Option<TaskHandle>, InsertError> {
        Ok(self
            .insert(&copy_codelet::<I>())
            .w(dst)
            .r(src)
            .submit()?
            .task)
    }

    /// [`Context::data_cpy`] with `callback`, run on `dst`'s owner when the copy is done
    /// (`starpu_mpi_data_cpy` with a callback).
    ///
    /// # Errors
    /// As for [`InsertBuilder::submit`](super::InsertBuilder::submit).
    pub fn data_cpy_cb<I: Interface + Clone>(
        &self,
        dst: &Handle<I>,
        src: &Handle<I>,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<(), InsertError> {
        self.insert(&copy_codelet::<I>())
            .w(dst)
            .r(src)
            .callback(callback)
            .submit()?;
        Ok(())
    }

    /// Sends each handle of `handles` from `root` to its owner
    /// (`starpu_mpi_scatter_detached`). On `root`, `root_callback` runs once after all its
    /// sends; on every other rank, `callback` runs once after all its receives.
    ///
    /// # Errors
    /// [`InsertError::NotRegistered`]; [`crate::CommError`] for a bad root.
    pub fn scatter_detached(
        &self,
        handles: &[crate::api::context::AnyHandle],
        root: Rank,
        root_callback: impl FnOnce() + Send + 'static,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<(), InsertError> {
        self.collective(handles, root, true, root_callback, callback)
    }

    /// Sends each handle of `handles` from its owner to `root`
    /// (`starpu_mpi_gather_detached`); callbacks as for [`Context::scatter_detached`].
    ///
    /// # Errors
    /// As for [`Context::scatter_detached`].
    pub fn gather_detached(
        &self,
        handles: &[crate::api::context::AnyHandle],
        root: Rank,
        root_callback: impl FnOnce() + Send + 'static,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<(), InsertError> {
        self.collective(handles, root, false, root_callback, callback)
    }

    fn collective(
        &self,
        handles: &[crate::api::context::AnyHandle],
        root: Rank,
        scatter: bool,
        root_callback: impl FnOnce() + Send + 'static,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<(), InsertError> {
        self.check_rank(root)?;
        let me = self.rank;
        let mut moves = Vec::new();
        {
            let dist = lock(&self.dist);
            for h in handles {
                let cell = h.cell();
                cell.usable()?;
                let info = *dist
                    .info
                    .get(&cell.id())
                    .ok_or_else(|| InsertError::NotRegistered(cell.id()))?;
                let Owner::Rank(owner) = info.owner else {
                    continue;
                };
                if owner == root {
                    continue;
                }
                let (from, to) = if scatter {
                    (root, owner)
                } else {
                    (owner, root)
                };
                if me == from || me == to {
                    moves.push((cell, info, from, to));
                }
            }
        }
        let mine: Box<dyn FnOnce() + Send> = if me == root {
            Box::new(root_callback)
        } else {
            Box::new(callback)
        };
        let done = countdown(moves.len(), mine);
        for (cell, info, from, to) in moves {
            let d = Arc::clone(&done);
            // Each transfer's outcome counts: the callback runs only if all succeeded (a
            // failure is reported by the runtime, see `post_flow_recv`).
            let cb: crate::io::progress::Done =
                crate::io::progress::Done::new(move |r| d(r.is_ok()));
            if me == from {
                let opts = SendOpts {
                    comm: info.comm,
                    ..SendOpts::default()
                };
                self.post_flow_send(cell, to, info.tag, opts, cb)?;
            } else {
                let opts = RecvOpts {
                    comm: info.comm,
                    ..RecvOpts::default()
                };
                self.post_flow_recv(cell, from, info.tag, opts, cb)?;
            }
        }
        Ok(())
    }
}

/// Calls left, whether every call so far succeeded, and the function the last one runs.
type Countdown = crate::sync::Mutex<(usize, bool, Option<Box<dyn FnOnce() + Send>>)>;

/// A function to call `n` times with each transfer's success; the last call runs `f`
/// if every call succeeded (at once when `n` is 0), and drops it otherwise: a collective's
/// callback never announces data that did not arrive.
fn countdown(n: usize, f: Box<dyn FnOnce() + Send>) -> Arc<dyn Fn(bool) + Send + Sync> {
    let slot = Arc::new(crate::sync::Mutex::new((n, true, Some(f))));
    let run = |slot: &Countdown, ok: bool| {
        let f = {
            let mut s = lock(slot);
            if s.0 > 0 {
                s.0 -= 1;
            }
            s.1 &= ok;
            let all_ok = s.1;
            if s.0 == 0 {
                s.2.take().filter(|_| all_ok)
            } else {
                None
            }
        };
        if let Some(f) = f {
            f();
        }
    };
    if n == 0 {
        run(&slot, true);
    }
    Arc::new(move |ok| run(&slot, ok))
}

/// The codelet of [`Context::data_cpy`]: buffer 0 (W) becomes a copy of buffer 1 (R).
fn copy_codelet<I: Interface + Clone>() -> Codelet {
    Codelet::new("data_cpy", |b| {
        let value = b.r::<I>(1).clone();
        *b.w::<I>(0) = value;
    })
}
