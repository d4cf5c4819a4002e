//! Reference models of the [lists](crate::lists).

use core::cmp::Reverse;
use core::fmt::Debug;
use std::collections::{BTreeMap, VecDeque};
use std::string::String;
use std::vec::Vec;

use super::same;
use crate::error::{Full, Table};
use crate::lists::{Detached, Key, KeyedFifo, ReadyList, SyncInsertError, SyncKey, SyncSends};
use crate::types::{CommId, MsgId, Priority, Rank, ReqId};

/// The [`ReadyList`] as a sorted map from (reversed priority, push number) to id: its
/// first entry is the one that leaves next.
#[derive(Clone, Debug, Default)]
pub struct ReadyModel {
    capacity: usize,
    map: BTreeMap<(Reverse<Priority>, u64), ReqId>,
    seq: u64,
}

impl ReadyModel {
    /// An empty model of a `ReadyList<capacity>`.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            map: BTreeMap::new(),
            seq: 0,
        }
    }

    /// [`ReadyList::push`].
    ///
    /// # Errors
    /// As [`ReadyList::push`].
    pub fn push(&mut self, id: ReqId, priority: Priority) -> Result<(), Full<ReqId>> {
        if self.map.len() >= self.capacity {
            return Err(Full::new(Table::ReadyList, id));
        }
        self.map.insert((Reverse(priority), self.seq), id);
        self.seq += 1;
        Ok(())
    }

    /// [`ReadyList::pop`].
    pub fn pop(&mut self) -> Option<ReqId> {
        self.map.pop_first().map(|(_, id)| id)
    }

    /// [`ReadyList::peek`].
    pub fn peek(&self) -> Option<ReqId> {
        self.map.values().next().copied()
    }

    /// [`ReadyList::remove`].
    pub fn remove(&mut self, id: ReqId) -> bool {
        let at = self.map.iter().find(|(_, v)| **v == id).map(|(k, _)| *k);
        at.and_then(|k| self.map.remove(&k)).is_some()
    }

    /// [`ReadyList::contains`].
    pub fn contains(&self, id: ReqId) -> bool {
        self.map.values().any(|v| *v == id)
    }

    /// Compares `list` with the model: the order in which it would give its ids out
    /// (popping a clone), their priorities and the counts.
    ///
    /// # Errors
    /// A message naming the first difference.
    pub fn check<const N: usize>(&self, list: &ReadyList<N>) -> Result<(), String> {
        same("len", list.len(), self.map.len())?;
        same("is_empty", list.is_empty(), self.map.is_empty())?;
        same("peek", list.peek(), self.peek())?;
        let mut drained = list.clone();
        let order: Vec<ReqId> = core::iter::from_fn(|| drained.pop()).collect();
        same("order", order, self.map.values().copied().collect())?;
        let mut got: Vec<(ReqId, Priority)> = list.iter().collect();
        got.sort();
        let mut want: Vec<(ReqId, Priority)> = self
            .map
            .iter()
            .map(|((Reverse(p), _), id)| (*id, *p))
            .collect();
        want.sort();
        same("priorities", got, want)
    }
}

/// The [`KeyedFifo`] as a map of queues, with the capacities of a
/// `KeyedFifo<V, keys, entries>` that reports `table` when its pool is full.
#[derive(Clone, Debug)]
pub struct FifoModel<V> {
    keys: usize,
    entries: usize,
    table: Table,
    map: BTreeMap<Key, VecDeque<V>>,
}

impl<V: Copy + PartialEq + Debug> FifoModel<V> {
    /// An empty model.
    pub fn new(keys: usize, entries: usize, table: Table) -> Self {
        Self {
            keys,
            entries,
            table,
            map: BTreeMap::new(),
        }
    }

    /// [`KeyedFifo::push_back`].
    ///
    /// # Errors
    /// As [`KeyedFifo::push_back`].
    pub fn push_back(&mut self, key: Key, value: V) -> Result<(), Full<V>> {
        let total: usize = self.map.values().map(VecDeque::len).sum();
        if total >= self.entries {
            Err(Full::new(self.table, value))
        } else if !self.map.contains_key(&key) && self.map.len() >= self.keys {
            Err(Full::new(Table::MatchKeys, value))
        } else {
            self.map.entry(key).or_default().push_back(value);
            Ok(())
        }
    }

    /// [`KeyedFifo::pop_front`].
    pub fn pop_front(&mut self, key: Key) -> Option<V> {
        let queue = self.map.get_mut(&key)?;
        let value = queue.pop_front();
        if queue.is_empty() {
            self.map.remove(&key);
        }
        value
    }

    /// [`KeyedFifo::front`].
    pub fn front(&self, key: Key) -> Option<&V> {
        self.map.get(&key).and_then(VecDeque::front)
    }

    /// [`KeyedFifo::remove`] of the first item equal to `value`.
    pub fn remove(&mut self, key: Key, value: V) -> Option<V> {
        let queue = self.map.get_mut(&key)?;
        let at = queue.iter().position(|x| *x == value)?;
        let removed = queue.remove(at);
        if queue.is_empty() {
            self.map.remove(&key);
        }
        removed
    }

    /// Compares `fifo` with the model: every key's items in order, the keys, the counts.
    ///
    /// # Errors
    /// A message naming the first difference.
    pub fn check<const KEYS: usize, const ENTRIES: usize>(
        &self,
        fifo: &KeyedFifo<V, KEYS, ENTRIES>,
    ) -> Result<(), String> {
        let mut got: BTreeMap<Key, Vec<V>> = BTreeMap::new();
        for (k, v) in fifo.iter() {
            got.entry(k).or_default().push(*v);
        }
        let want: BTreeMap<Key, Vec<V>> = self
            .map
            .iter()
            .map(|(k, q)| (*k, q.iter().copied().collect()))
            .collect();
        same("contents", got, want)?;
        same(
            "len",
            fifo.len(),
            self.map.values().map(VecDeque::len).sum::<usize>(),
        )?;
        same("is_empty", fifo.is_empty(), self.map.is_empty())?;
        same("key_count", fifo.key_count(), self.map.len())?;
        let mut keys: Vec<Key> = fifo.keys().collect();
        keys.sort();
        same("keys", keys, self.map.keys().copied().collect())?;
        for (k, q) in &self.map {
            same("len_of", fifo.len_of(*k), q.len())?;
            same("contains_key", fifo.contains_key(*k), true)?;
            same("front", fifo.front(*k), q.front())?;
            same(
                "iter_key",
                fifo.iter_key(*k).copied().collect::<Vec<_>>(),
                q.iter().copied().collect(),
            )?;
        }
        Ok(())
    }
}

/// [`SyncSends`] as a list of (key, id) in insertion order, with its capacity.
#[derive(Clone, Debug, Default)]
pub struct SyncSendsModel {
    capacity: usize,
    entries: Vec<(SyncKey, ReqId)>,
}

impl SyncSendsModel {
    /// An empty model of a `SyncSends<capacity>`.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::new(),
        }
    }

    /// [`SyncSends::insert`].
    ///
    /// # Errors
    /// As [`SyncSends::insert`].
    pub fn insert(
        &mut self,
        comm: CommId,
        dest: Rank,
        msg: MsgId,
        id: ReqId,
    ) -> Result<(), SyncInsertError> {
        let key = SyncKey { comm, dest, msg };
        if let Some((_, existing)) = self.entries.iter().find(|(k, _)| *k == key) {
            return Err(SyncInsertError::Duplicate {
                existing: *existing,
                item: id,
            });
        }
        if self.entries.len() >= self.capacity {
            return Err(SyncInsertError::Full(Full::new(Table::SyncSends, id)));
        }
        self.entries.push((key, id));
        Ok(())
    }

    /// [`SyncSends::remove`].
    pub fn remove(&mut self, comm: CommId, dest: Rank, msg: MsgId) -> Option<ReqId> {
        let key = SyncKey { comm, dest, msg };
        let at = self.entries.iter().position(|(k, _)| *k == key)?;
        Some(self.entries.remove(at).1)
    }

    /// [`SyncSends::get`].
    pub fn get(&self, comm: CommId, dest: Rank, msg: MsgId) -> Option<ReqId> {
        let key = SyncKey { comm, dest, msg };
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, id)| *id)
    }

    /// Compares `table` with the model: its entries in order and its counts.
    ///
    /// # Errors
    /// A message naming the first difference.
    pub fn check<const N: usize>(&self, table: &SyncSends<N>) -> Result<(), String> {
        same(
            "entries",
            table.iter().collect::<Vec<_>>(),
            self.entries.clone(),
        )?;
        same("len", table.len(), self.entries.len())?;
        same("is_empty", table.is_empty(), self.entries.is_empty())
    }
}

/// [`Detached`] as a list of ids in insertion order, with its capacity.
#[derive(Clone, Debug, Default)]
pub struct DetachedModel {
    capacity: usize,
    ids: Vec<ReqId>,
}

impl DetachedModel {
    /// An empty model of a `Detached<capacity>`.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ids: Vec::new(),
        }
    }

    /// [`Detached::insert`].
    ///
    /// # Errors
    /// As [`Detached::insert`].
    pub fn insert(&mut self, id: ReqId) -> Result<(), Full<ReqId>> {
        if self.ids.contains(&id) {
            return Ok(());
        }
        if self.ids.len() >= self.capacity {
            return Err(Full::new(Table::Detached, id));
        }
        self.ids.push(id);
        Ok(())
    }

    /// [`Detached::remove`].
    pub fn remove(&mut self, id: ReqId) -> bool {
        match self.ids.iter().position(|x| *x == id) {
            Some(at) => {
                self.ids.remove(at);
                true
            }
            None => false,
        }
    }

    /// [`Detached::contains`].
    pub fn contains(&self, id: ReqId) -> bool {
        self.ids.contains(&id)
    }

    /// Compares `set` with the model: its ids in order and its counts.
    ///
    /// # Errors
    /// A message naming the first difference.
    pub fn check<const N: usize>(&self, set: &Detached<N>) -> Result<(), String> {
        same("ids", set.iter().collect::<Vec<_>>(), self.ids.clone())?;
        same("len", set.len(), self.ids.len())?;
        same("is_empty", set.is_empty(), self.ids.is_empty())
    }
}
