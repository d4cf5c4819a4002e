//! The request slab shared out by the [`Budget`]: what each class of request may hold,
//! the receive slots left, and whether a refused arrival's table may have room.

use super::*;

/// Live requests per class of the [`Budget`], and the discard buffers outside it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Live {
    pub(super) sends: usize,
    pub(super) recvs: usize,
    pub(super) early: usize,
    /// Discard buffers ([`Link::Drain`]): not counted against the budget.
    pub(super) drains: usize,
}

/// The class of a request, for the [`Budget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Send,
    Recv,
    Early,
    /// A discard buffer ([`Link::Drain`]): any free slot of the slab, outside the budget.
    Drain,
}

impl Class {
    /// The class of `r`: fixed for its life (a request's link becomes [`Link::Drain`]
    /// only as it is made, and an early buffer that nobody wants later is
    /// [`Link::Discard`], still an early request).
    pub(super) const fn of(r: &Request) -> Self {
        match (r.internal, r.kind, r.link) {
            (true, _, Link::Drain) => Self::Drain,
            (true, _, _) => Self::Early,
            (false, Kind::Send, _) => Self::Send,
            (false, Kind::Recv, _) => Self::Recv,
        }
    }
}

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    /// How the slab is shared out: `None` with no [`Config::request_limit`] (the whole
    /// slab, first come first served).
    pub fn budget(&self) -> Option<Budget> {
        match self.config.request_limit as usize {
            0 => None,
            n => Some(Budget::of(if n > REQ { REQ } else { n })),
        }
    }

    /// The most distinct keys each matcher table may use ([`Config::key_limit`]).
    pub const fn key_limit(&self) -> usize {
        match self.config.key_limit as usize {
            0 => KEYS,
            n if n > KEYS => KEYS,
            n => n,
        }
    }

    /// Whether the slab has a free slot, whatever the budget says (a discard buffer's).
    pub(super) fn has_slab_slot(&self) -> bool {
        self.requests.len() < self.requests.capacity()
    }

    /// Whether a new request of `class` fits the slab and the budget.
    pub(super) fn has_room(&self, class: Class) -> bool {
        if !self.has_slab_slot() {
            return false;
        }
        let Some(b) = self.budget() else {
            return true;
        };
        let Live {
            sends,
            recvs,
            early,
            ..
        } = self.live;
        match class {
            Class::Send => sends < b.sends,
            Class::Recv => recvs + early < b.recvs,
            // An early request never takes the last receive slot: it is kept for a
            // receive whose message is already here (see [`Engine::free_recv_slots`]).
            Class::Early => early < b.early && recvs + early + 1 < b.recvs,
            Class::Drain => true,
        }
    }

    /// The receive slots free now: how many more application receives the budget (and
    /// the slab) would take. `None` with no [`Config::request_limit`] (no budget: first
    /// come first served).
    ///
    /// An adapter keeps the last one for a receive whose message is already here (early
    /// data of its key: [`Engine::has_early`], or an envelope it refused): a receive
    /// whose message is not here may depend on a later one's completion, and early
    /// requests never take it either, so a receive whose message is here can always go
    /// in, complete and free it.
    pub fn free_recv_slots(&self) -> Option<usize> {
        let b = self.budget()?;
        let slab = self.requests.capacity() - self.requests.len();
        let budget = b.recvs.saturating_sub(self.live.recvs + self.live.early);
        Some(if slab < budget { slab } else { budget })
    }

    /// Whether a submission of `kind` would be taken now: [`Engine::submit_send`] and
    /// [`Engine::submit_recv`] refuse with [`SubmitError::Full`]`(`[`Table::Requests`]`)`
    /// exactly when this is `false` (the slab, or the class's share of the budget, is
    /// full). An adapter that keeps submissions waiting asks before it takes one out
    /// of its queue, rather than take it out, be refused and put it back.
    pub fn can_submit(&self, kind: Kind) -> bool {
        self.has_room(match kind {
            Kind::Send => Class::Send,
            Kind::Recv => Class::Recv,
        })
    }

    /// Whether `table` may have room for an arrival now: `false` only when an envelope
    /// that [`Engine::handle_message`] refused with [`MessageError::Full`]`(table)` would
    /// certainly be refused again for it (the request budget's early class, the early
    /// data's keys, the output queues); `true` for the tables it cannot tell about. An
    /// adapter that keeps refused envelopes tries again only those whose table may have
    /// room, rather than every one after every completion.
    pub fn room_for(&self, table: Table) -> bool {
        match table {
            // A marked receive (protocol §19) takes its envelope message with no room.
            Table::Requests => self.has_room(Class::Early) || self.fast_marked > 0,
            Table::MatchKeys => {
                self.matcher.unexpected_keys() < self.key_limit() || self.fast_marked > 0
            }
            Table::Transmits | Table::Events => self.check_room().is_ok(),
            // A discard buffer takes any free slot of the slab, outside the budget.
            Table::Discards => self.has_slab_slot(),
            _ => true,
        }
    }

    /// Inserts `r` into the slab, counting it in its class.
    pub(super) fn slab_insert(&mut self, r: Request) -> Result<ReqId, crate::error::Full<Request>> {
        let class = Class::of(&r);
        let id = self.requests.insert(r)?;
        match class {
            Class::Send => self.live.sends += 1,
            Class::Recv => self.live.recvs += 1,
            Class::Early => self.live.early += 1,
            Class::Drain => self.live.drains += 1,
        }
        Ok(id)
    }

    /// Removes `id` from the slab, uncounting it.
    pub(super) fn slab_remove(&mut self, id: ReqId) -> Option<Request> {
        let r = self.requests.remove(id)?;
        match Class::of(&r) {
            Class::Send => self.live.sends -= 1,
            Class::Recv => self.live.recvs -= 1,
            Class::Early => self.live.early -= 1,
            Class::Drain => self.live.drains -= 1,
        }
        self.deferred_dirty = true;
        Some(r)
    }
}
