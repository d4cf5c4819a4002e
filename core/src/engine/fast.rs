//! The engine's side of the fast path (protocol §19, [`crate::fast`]): receives posted on
//! their key's fast tag, markers, and envelope messages handed to marked receives in
//! posting order.

use super::*;

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    /// The key of receive `req` when it got its marker (protocol §19) and waits for its
    /// key's next envelope message, which it takes with no room: after reporting its
    /// completion ([`Engine::handle_received`]), an adapter that keeps envelopes refused
    /// for a full table hands those of this key in again, as after submitting a receive.
    pub fn marked_key(&self, req: ReqId) -> Option<Key> {
        let r = self.requests.get(req)?;
        let key = Key {
            comm: r.comm,
            peer: r.peer,
            tag: r.tag,
        };
        let marked = r.kind == Kind::Recv
            && r.state == State::AwaitingEnvelope
            && self.fast.iter_key(key).any(|&id| id == req);
        marked.then_some(key)
    }

    /// Posts a ready receive of a key with a fast tag on that tag, behind the key's
    /// other receives posted there (rule 2). Nothing changes on error.
    pub(super) fn post_fast_recv(
        &mut self,
        req: ReqId,
        r: &Request,
        next: State,
        key: Key,
        tag: PhysTag,
    ) -> Result<(), UsageError> {
        if !self.fast.contains_key(key) && self.fast.key_count() >= self.key_limit() {
            return Err(UsageError::Full(Table::MatchKeys));
        }
        self.fast
            .push_back(key, req)
            .map_err(|e| UsageError::Full(e.table))?;
        self.set_state(req, next);
        self.step(req, Step::FastPosted);
        self.push_transmit(Transmit::Receive {
            req,
            source: r.peer,
            comm: r.comm,
            tag,
            size: crate::fast::recv_size(&self.config, r.size),
            early: false,
        });
        Ok(())
    }

    /// The receive that an envelope message of fast key `key` arriving now goes to: the
    /// oldest receive posted on the key's fast tag, once it got its marker, and only when
    /// no earlier envelope message of the key waits for it (rule 3).
    pub(super) fn fast_waiting(&self, key: Key) -> Option<ReqId> {
        if self.matcher.has_unexpected_key(key) {
            return None;
        }
        self.fast_marked_front(key)
    }

    /// The oldest receive posted on fast key `key`, if it got its marker.
    fn fast_marked_front(&self, key: Key) -> Option<ReqId> {
        let id = *self.fast.front(key)?;
        (self.requests.get(id)?.state == State::AwaitingEnvelope).then_some(id)
    }

    /// Whether fast key `key` has a marked oldest receive and an envelope message
    /// waiting for it.
    fn fast_matchable(&self, key: Key) -> bool {
        self.fast_marked_front(key).is_some() && self.matcher.has_unexpected_key(key)
    }

    /// A receive posted on its fast tag got `len` bytes: a fast message completes it
    /// (or fails it, when longer than its buffer); a marker makes it wait for its key's
    /// next envelope message, which may be here already. At most one event and two
    /// transmits.
    pub(super) fn on_fast_received(&mut self, req: ReqId, r: Request, len: u64) {
        let key = Key {
            comm: r.comm,
            peer: r.peer,
            tag: r.tag,
        };
        if crate::fast::is_marker(len) {
            self.step(req, Step::Marked);
            self.fast_marked += 1;
            // A marked oldest receive takes the oldest waiting envelope message now.
            self.fast_advance(key);
            return;
        }
        let _ = self.fast.remove(key, |&id| id == req);
        // Room freed for a receive deferred for want of keys.
        self.deferred_dirty = true;
        let _ = self.stats.record_recv(r.peer, len);
        if let Some(rm) = self.requests.get_mut(req) {
            rm.msg_size = len;
        }
        if len > r.size {
            self.fail(
                req,
                RequestError::Truncated {
                    capacity: r.size,
                    size: len,
                },
            );
        } else {
            self.complete(req, len, None);
        }
        // The receive behind it may be marked with a message waiting: matched in
        // `poll_transmit`, where the outputs have room for it.
        if self.fast_matchable(key) {
            self.fast_dirty = true;
        }
    }

    /// Matches the marked oldest receive of fast key `key` with the oldest waiting
    /// envelope message of the key; whether it did. At most one match (two transmits or
    /// two events).
    fn fast_advance(&mut self, key: Key) -> bool {
        let Some(req) = self.fast_marked_front(key) else {
            return false;
        };
        let Some(u) = self.matcher.peek_unexpected(key).copied() else {
            return false;
        };
        let Some(r) = self.requests.get(req).copied() else {
            return false;
        };
        if self.room_for_match(&r, &u).is_err() {
            // A truncated synchronous message needs a discard buffer: later.
            self.fast_dirty = true;
            return false;
        }
        let _ = self.fast.pop_front(key);
        self.fast_marked -= 1;
        let _ = self.matcher.take_unexpected(key);
        self.deferred_dirty = true;
        self.match_recv(req, u);
        if self.fast_matchable(key) {
            self.fast_dirty = true;
        }
        true
    }

    /// Matches every fast key's marked oldest receive with its waiting envelope message,
    /// while the output queues have room (called by `poll_transmit`).
    pub(super) fn retry_fast(&mut self) {
        if !self.fast_dirty {
            return;
        }
        self.fast_dirty = false;
        loop {
            if self.check_room().is_err() {
                self.fast_dirty = true;
                return;
            }
            let Some(key) = self.fast.keys().find(|&k| self.fast_matchable(k)) else {
                return;
            };
            if !self.fast_advance(key) {
                return;
            }
        }
    }
}
