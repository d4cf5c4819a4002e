//! Receives deferred for want of match keys: kept in order inside the engine and
//! matched when their message comes or room frees.

use super::*;

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    /// The oldest deferred receive of `key`, when the matcher holds neither a receive
    /// nor a message of `key` (then it is the oldest receive of the key).
    pub(super) fn peek_deferred(&self, key: Key) -> Option<ReqId> {
        // On a key with a fast tag a deferred receive is not posted on it yet, so it is
        // not the receive of the key's next envelope message (protocol §19).
        if !self.deferred_keys.contains_key(&key)
            || self.matcher.peek_unexpected(key).is_some()
            || crate::fast::fast_tag(&self.config, key.comm, key.tag).is_some()
        {
            return None;
        }
        self.deferred
            .iter()
            .find(|(_, k)| *k == key)
            .map(|(id, _)| *id)
    }

    /// Takes [`Engine::peek_deferred`] out of the deferred receives; the others keep
    /// their order.
    pub(super) fn take_deferred(&mut self, key: Key) -> Option<ReqId> {
        let id = self.peek_deferred(key)?;
        for _ in 0..self.deferred.len() {
            if let Some(d) = self.deferred.pop_front() {
                if d.0 != id {
                    let _ = self.deferred.push_back(d);
                }
            }
        }
        self.uncount_deferred(key);
        Some(id)
    }

    /// One deferred receive of `key` fewer.
    pub(super) fn uncount_deferred(&mut self, key: Key) {
        if let Some(n) = self.deferred_keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.deferred_keys.remove(&key);
            }
        }
    }

    /// Keeps a ready receive that the matcher has no room for, behind the others; it goes
    /// in when an arrival frees room ([`Engine::retry_deferred`]). It stays `Ready`.
    pub(super) fn defer(&mut self, req: ReqId, next: State) -> Result<(), UsageError> {
        let full = UsageError::Full(Table::EarlyRequests);
        let r = self.get(req)?;
        let key = Key {
            comm: r.comm,
            peer: r.peer,
            tag: r.tag,
        };
        // One entry per live request at most: neither can be full.
        if self.deferred.is_full()
            || (self.deferred_keys.len() == REQ && !self.deferred_keys.contains_key(&key))
        {
            return Err(full);
        }
        let _ = self.deferred.push_back((req, key));
        match self.deferred_keys.get_mut(&key) {
            Some(n) => *n += 1,
            None => {
                let _ = self.deferred_keys.insert(key, 1);
            }
        }
        if self.matcher.peek_unexpected(key).is_some() {
            self.deferred_matchable = true;
        }
        self.deferred_dirty = true;
        self.set_state(req, next);
        Ok(())
    }

    /// Hands deferred receives to the matcher again while the output queues have room
    /// for what a match produces: the oldest ones, in order, while the matcher has room
    /// for them; then, when one was deferred while its message waited, every receive
    /// whose message waits takes it, whatever waits before it. A receive held back holds
    /// back only the receives of its own key (a later one of its key could not take a
    /// message before it: its message would wait for it first), and once one with a
    /// message waiting cannot go in (no discard buffer), the rest wait as they are.
    pub(super) fn retry_deferred(&mut self) {
        if self.deferred.is_empty() || !self.deferred_dirty {
            return;
        }
        self.deferred_dirty = false;
        while let Some(&(req, key)) = self.deferred.front() {
            if self.check_room().is_err() {
                // Outputs first: try again after they are drained.
                self.deferred_dirty = true;
                return;
            }
            if let Some(r) = self.requests.get(req).copied() {
                // `post_ready_recv` steps from `Created`; the request is `Ready`.
                let Ok(next) = State::Created.step(r.kind, r.sync, Step::DataReady) else {
                    break;
                };
                if self.post_ready_recv(req, &r, next).is_err() {
                    break;
                }
            }
            let _ = self.deferred.pop_front();
            self.uncount_deferred(key);
        }
        if !self.deferred_matchable || self.deferred.is_empty() {
            return;
        }
        self.deferred_matchable = false;
        let mut blocked = false;
        for _ in 0..self.deferred.len() {
            let Some((req, key)) = self.deferred.pop_front() else {
                break;
            };
            if !blocked && self.check_room().is_err() {
                blocked = true;
                self.deferred_dirty = true;
                self.deferred_matchable = true;
            }
            let keep = match self.requests.get(req).copied() {
                None => false,
                Some(_) if blocked => true,
                Some(_) if self.matcher.peek_unexpected(key).is_none() => true,
                Some(r) => match State::Created.step(r.kind, r.sync, Step::DataReady) {
                    Ok(next) if self.post_ready_recv(req, &r, next).is_ok() => false,
                    _ => {
                        blocked = true;
                        self.deferred_matchable = true;
                        true
                    }
                },
            };
            if keep {
                let _ = self.deferred.push_back((req, key));
            } else {
                self.uncount_deferred(key);
            }
        }
    }
}
