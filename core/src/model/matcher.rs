//! The reference model of the [`Matcher`].

use std::collections::{BTreeMap, VecDeque};
use std::string::String;
use std::vec::Vec;

use super::same;
use crate::error::{Full, Table};
use crate::lists::Key;
use crate::matcher::{Matcher, Orphan, Unexpected, UnexpectedKind};
use crate::types::ReqId;

/// One side of the model: a FIFO per key, with the table's two capacities.
type Side<V> = BTreeMap<Key, VecDeque<V>>;

/// The [`Matcher`] as two maps of queues: waiting receives and unexpected messages per
/// key, with the capacities of a `Matcher<KEYS, ENTRIES>`.
///
/// Every method returns what the same call on the matcher must return.
#[derive(Clone, Debug, Default)]
pub struct MatcherModel {
    keys: usize,
    entries: usize,
    recvs: Side<ReqId>,
    unexpected: Side<Unexpected>,
}

/// The table a push onto `side` overflows, if any.
fn full<V>(side: &Side<V>, keys: usize, entries: usize, key: Key, table: Table) -> Option<Table> {
    let total: usize = side.values().map(VecDeque::len).sum();
    if total >= entries {
        Some(table)
    } else if !side.contains_key(&key) && side.len() >= keys {
        Some(Table::MatchKeys)
    } else {
        None
    }
}

fn pop<V>(side: &mut Side<V>, key: Key) -> Option<V> {
    let queue = side.get_mut(&key)?;
    let value = queue.pop_front();
    if queue.is_empty() {
        side.remove(&key);
    }
    value
}

fn flatten<V: Copy>(side: &Side<V>) -> BTreeMap<Key, Vec<V>> {
    side.iter()
        .map(|(k, q)| (*k, q.iter().copied().collect()))
        .collect()
}

fn collect<V>(items: impl Iterator<Item = (Key, V)>) -> BTreeMap<Key, Vec<V>> {
    let mut out: BTreeMap<Key, Vec<V>> = BTreeMap::new();
    for (k, v) in items {
        out.entry(k).or_default().push(v);
    }
    out
}

impl MatcherModel {
    /// An empty model of a `Matcher<keys, entries>`.
    pub fn new(keys: usize, entries: usize) -> Self {
        Self {
            keys,
            entries,
            recvs: BTreeMap::new(),
            unexpected: BTreeMap::new(),
        }
    }

    fn push<V>(
        side: &mut Side<V>,
        keys: usize,
        entries: usize,
        key: Key,
        value: V,
        table: Table,
    ) -> Result<(), Full<V>> {
        match full(side, keys, entries, key, table) {
            Some(t) => Err(Full::new(t, value)),
            None => {
                side.entry(key).or_default().push_back(value);
                Ok(())
            }
        }
    }

    /// [`Matcher::post_recv`].
    ///
    /// # Errors
    /// As [`Matcher::post_recv`].
    pub fn post_recv(&mut self, key: Key, id: ReqId) -> Result<Option<Unexpected>, Full<ReqId>> {
        if let Some(u) = pop(&mut self.unexpected, key) {
            return Ok(Some(u));
        }
        self.push_recv(key, id).map(|()| None)
    }

    /// [`Matcher::arrive`].
    ///
    /// # Errors
    /// As [`Matcher::arrive`].
    pub fn arrive(
        &mut self,
        key: Key,
        message: Unexpected,
    ) -> Result<Option<ReqId>, Full<Unexpected>> {
        if let Some(id) = pop(&mut self.recvs, key) {
            return Ok(Some(id));
        }
        self.push_unexpected(key, message).map(|()| None)
    }

    /// [`Matcher::take_recv`].
    pub fn take_recv(&mut self, key: Key) -> Option<ReqId> {
        pop(&mut self.recvs, key)
    }

    /// [`Matcher::take_unexpected`].
    pub fn take_unexpected(&mut self, key: Key) -> Option<Unexpected> {
        pop(&mut self.unexpected, key)
    }

    /// [`Matcher::push_recv`]; call it only when [`has_unexpected`](Self::has_unexpected)
    /// is `false` for `key`, as the matcher requires.
    ///
    /// # Errors
    /// As [`Matcher::push_recv`].
    pub fn push_recv(&mut self, key: Key, id: ReqId) -> Result<(), Full<ReqId>> {
        let (keys, entries) = (self.keys, self.entries);
        Self::push(
            &mut self.recvs,
            keys,
            entries,
            key,
            id,
            Table::EarlyRequests,
        )
    }

    /// [`Matcher::push_unexpected`]; call it only when [`has_recvs`](Self::has_recvs) is
    /// `false` for `key`.
    ///
    /// # Errors
    /// As [`Matcher::push_unexpected`].
    pub fn push_unexpected(
        &mut self,
        key: Key,
        message: Unexpected,
    ) -> Result<(), Full<Unexpected>> {
        let (keys, entries) = (self.keys, self.entries);
        Self::push(
            &mut self.unexpected,
            keys,
            entries,
            key,
            message,
            Table::EarlyData,
        )
    }

    /// [`Matcher::cancel_recv`].
    pub fn cancel_recv(&mut self, key: Key, id: ReqId) -> bool {
        let Some(queue) = self.recvs.get_mut(&key) else {
            return false;
        };
        let Some(at) = queue.iter().position(|r| *r == id) else {
            return false;
        };
        let _ = queue.remove(at);
        if queue.is_empty() {
            self.recvs.remove(&key);
        }
        true
    }

    /// The receives waiting for `key`, oldest first.
    pub fn recvs_of(&self, key: Key) -> Vec<ReqId> {
        self.recvs
            .get(&key)
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether a receive waits for `key`.
    pub fn has_recvs(&self, key: Key) -> bool {
        self.recvs.contains_key(&key)
    }

    /// Whether a message waits for `key`.
    pub fn has_unexpected(&self, key: Key) -> bool {
        self.unexpected.contains_key(&key)
    }

    /// Compares the whole state of `m` with the model: each key's receives and messages
    /// in FIFO order, the orphans, every count, and the matcher's invariant (no key on
    /// both sides).
    ///
    /// # Errors
    /// A message naming the first difference.
    pub fn check<const KEYS: usize, const ENTRIES: usize>(
        &self,
        m: &Matcher<KEYS, ENTRIES>,
    ) -> Result<(), String> {
        same("consistent", m.is_consistent(), true)?;
        same(
            "model consistent",
            self.recvs.keys().any(|k| self.unexpected.contains_key(k)),
            false,
        )?;
        same("receives", collect(m.unmatched()), flatten(&self.recvs))?;
        same(
            "unexpected",
            collect(m.unexpected().map(|(k, u)| (k, *u))),
            flatten(&self.unexpected),
        )?;
        let orphans = collect(
            m.orphans()
                .map(|o: Orphan| (Key::new(o.comm, o.source, o.tag), (o.size, o.kind))),
        );
        let want: BTreeMap<Key, Vec<(u64, UnexpectedKind)>> = self
            .unexpected
            .iter()
            .map(|(k, q)| (*k, q.iter().map(|u| (u.size, u.kind)).collect()))
            .collect();
        same("orphans", orphans, want)?;
        let recvs: usize = self.recvs.values().map(VecDeque::len).sum();
        let unexpected: usize = self.unexpected.values().map(VecDeque::len).sum();
        same("recv_count", m.recv_count(), recvs)?;
        same("unexpected_count", m.unexpected_count(), unexpected)?;
        same(
            "sync_count",
            m.sync_count(),
            self.unexpected
                .values()
                .flatten()
                .filter(|u| u.kind == UnexpectedKind::Sync)
                .count(),
        )?;
        same("is_empty", m.is_empty(), recvs == 0 && unexpected == 0)?;
        for (k, q) in &self.recvs {
            same("peek_recv", m.peek_recv(*k), q.front().copied())?;
        }
        for (k, q) in &self.unexpected {
            same("peek_unexpected", m.peek_unexpected(*k), q.front())?;
        }
        Ok(())
    }
}
