//! The master's view of the slaves' memory: where each datum has a copy, which slave a
//! task goes to (the fewest bytes to move), room made by evicting copies, and copies
//! brought home before the host reads them.

use super::*;

impl Master<'_> {
    /// Bytes of `p`'s data that slave `s` has no buffer for.
    pub(super) fn missing_bytes(&self, p: &Pending, s: usize) -> u64 {
        distinct(&p.accesses)
            .iter()
            .filter(|(uid, _)| !self.slaves[s].resident.contains_key(uid))
            .map(|(uid, _)| self.data[uid].bytes)
            .sum()
    }

    /// Bytes slave `s` could free now without touching `p`'s data.
    pub(super) fn freeable_bytes(&self, p: &Pending, s: usize) -> u64 {
        let used = distinct(&p.accesses);
        let node = self.slaves[s].node;
        self.slaves[s]
            .resident
            .iter()
            .filter(|(uid, _)| !used.iter().any(|(u, _)| u == *uid))
            .filter(|(uid, _)| {
                self.data
                    .get(uid)
                    .is_none_or(|d| d.replicas.held(node) == 0 && !d.replicas.is_fetching(node))
            })
            .map(|(_, b)| *b)
            .sum()
    }

    /// The slave to run `p`: a free worker and room for its data; the most bytes of its
    /// data already valid there, then the fewest tasks in flight.
    pub(super) fn choose(&self, p: &Pending) -> Option<usize> {
        let reads = distinct(&p.accesses);
        let mut best: Option<(u64, usize, usize)> = None;
        for (i, s) in self.slaves.iter().enumerate() {
            if s.dead || !s.hello || s.in_flight >= s.threads {
                continue;
            }
            let need = self.missing_bytes(p, i);
            if s.resident_bytes.saturating_add(need) > s.budget
                && (s.resident_bytes - self.freeable_bytes(p, i)).saturating_add(need) > s.budget
            {
                continue;
            }
            let local: u64 = reads
                .iter()
                .filter(|(uid, mode)| {
                    mode.contains(AccessMode::R) && self.data[uid].replicas.valid().contains(s.node)
                })
                .map(|(uid, _)| self.data[uid].bytes)
                .sum();
            let better = match best {
                None => true,
                Some((bl, bf, _)) => local > bl || (local == bl && s.in_flight < bf),
            };
            if better {
                best = Some((local, s.in_flight, i));
            }
        }
        best.map(|(_, _, i)| i)
    }

    /// The slave whose memory node is `node`.
    pub(super) fn slave_of(&self, node: MemNode) -> Option<usize> {
        self.slaves.iter().position(|s| s.node == node)
    }

    /// Frees stale copies of the slaves in `nodes` (a write made them stale).
    pub(super) fn drop_copies(&mut self, uid: u64, nodes: NodeSet) {
        for n in nodes.iter() {
            if let Some(s) = self.slave_of(n) {
                self.forget_copy(s, uid);
            }
        }
    }

    /// Slave `s` frees its buffer of `uid`.
    pub(super) fn forget_copy(&mut self, s: usize, uid: u64) {
        let slave = &mut self.slaves[s];
        if let Some(b) = slave.resident.remove(&uid) {
            slave.resident_bytes -= b;
            slave.ops.push(Op::Drop { uid });
        }
    }

    /// Makes room on slave `s` for `need` more bytes, freeing the least recently used
    /// copies `p` does not use; the only valid ones are written back to the master first,
    /// and freed when that copy landed. Returns whether the room is there now.
    pub(super) fn make_room(&mut self, p: &Pending, s: usize, need: u64) -> bool {
        let used = distinct(&p.accesses);
        let node = self.slaves[s].node;
        let mut victims: Vec<(u64, u64)> = self.slaves[s]
            .resident
            .keys()
            .filter(|uid| !used.iter().any(|(u, _)| u == *uid))
            .filter(|uid| !self.homeward.contains_key(uid))
            .map(|uid| (self.data.get(uid).map_or(0, |d| d.last_use), *uid))
            .collect();
        victims.sort_unstable();
        for (_, uid) in victims {
            let slave = &self.slaves[s];
            if slave.resident_bytes.saturating_add(need) <= slave.budget {
                return true;
            }
            let Some(d) = self.data.get_mut(&uid) else {
                self.forget_copy(s, uid);
                continue;
            };
            match d.replicas.evict(node) {
                Ok(_) => {
                    self.slaves[s].stats.evictions += 1;
                    self.forget_copy(s, uid);
                }
                Err(starling_core::coherence::CoherenceError::LastCopy(_)) => {
                    if let Ok(acq) = d.replicas.acquire(MemNode::MAIN_RAM, AccessMode::R) {
                        let st = &mut self.slaves[s].stats;
                        st.evictions += 1;
                        st.write_backs += 1;
                        if let Some(fetch) = acq.fetch {
                            self.fetch_home(uid, fetch);
                        }
                        self.host_waits
                            .entry(uid)
                            .or_default()
                            .push(HostWait::Evict { slave: s });
                    }
                }
                Err(_) => {} // held or in flight: not a victim now
            }
        }
        let slave = &self.slaves[s];
        slave.resident_bytes.saturating_add(need) <= slave.budget
    }

    /// Starts the copy `fetch` of `uid` from a slave into the master's memory.
    pub(super) fn fetch_home(&mut self, uid: u64, fetch: Fetch) {
        let Some(src) = self.slave_of(fetch.from) else {
            return;
        };
        let tag = self.tag();
        let cell = Arc::clone(&self.data[&uid].cell);
        let tx = self.tx.clone();
        let opts = RecvOpts::default();
        let posted = self.ctx.post_recv(
            cell,
            self.slaves[src].rank,
            tag,
            opts,
            Box::new(move |result| {
                let _ = tx.send(Event::Fetched { uid, fetch, result });
            }),
        );
        if let Err(e) = posted {
            self.errors.push(e.into());
            return;
        }
        self.homeward.insert(uid, fetch);
        let master = self.master_rank();
        let bytes = self.data[&uid].bytes;
        let slave = &mut self.slaves[src];
        slave.stats.bytes_home += bytes;
        slave.sending_home += 1;
        slave.ops.push(Op::SendTo {
            uid,
            dest: master,
            tag,
        });
    }

    pub(super) fn bring_home(
        &mut self,
        cell: &Arc<dyn AnyCell>,
        mode: AccessMode,
        then: Box<dyn FnOnce() + Send>,
    ) {
        let uid = cell.uid();
        if self.homeward.contains_key(&uid) {
            // A write-back holds the master's copy until it lands: the access waits for
            // it (taking the data now would let the copy land in a handle the
            // application already unregistered).
            let cell = Arc::clone(cell);
            self.host_waits
                .entry(uid)
                .or_default()
                .push(HostWait::Retry { cell, mode, then });
            return;
        }
        let Some(d) = self.data.get_mut(&uid) else {
            return then(); // never left the master
        };
        // The application may read what it acquires, whatever the mode: fetch it.
        let mode = if mode.writes() {
            AccessMode::RW
        } else {
            AccessMode::R
        };
        match d.replicas.acquire(MemNode::MAIN_RAM, mode) {
            Ok(acq) => {
                self.drop_copies(uid, acq.invalidate);
                if let Some(fetch) = acq.fetch {
                    self.fetch_home(uid, fetch);
                }
                if acq.is_ready() {
                    if let Some(d) = self.data.get_mut(&uid) {
                        let _ = d.replicas.release(MemNode::MAIN_RAM, mode);
                    }
                    then();
                } else {
                    self.host_waits
                        .entry(uid)
                        .or_default()
                        .push(HostWait::Acquire { mode, then });
                }
            }
            Err(e) => {
                self.errors.push(MsError::Protocol(format!(
                    "the master's access to a datum: {e} (its only copy was lost with a dead slave)"
                )));
                then();
            }
        }
    }

    pub(super) fn fetched(&mut self, uid: u64, fetch: Fetch, result: Result<(), CommError>) {
        if self.homeward.remove(&uid).is_none() {
            return; // given up already (its slave was taken for dead)
        }
        if let Some(src) = self.slave_of(fetch.from) {
            let slave = &mut self.slaves[src];
            slave.sending_home = slave.sending_home.saturating_sub(1);
        }
        if let Some(d) = self.data.get_mut(&uid) {
            match result {
                Ok(()) => {
                    if let Ok(stale) = d.replicas.handle_transfer_done(fetch) {
                        let stale = NodeSet(stale.0 & !NodeSet::single(MemNode::MAIN_RAM).0);
                        self.drop_copies(uid, stale);
                    }
                }
                Err(e) => {
                    let _ = d.replicas.handle_transfer_failed(fetch);
                    self.errors.push(MsError::Protocol(format!(
                        "copying a datum back from a slave: {e}"
                    )));
                }
            }
        }
        let mut waits = self.host_waits.remove(&uid).unwrap_or_default();
        // Write-backs first: they free the master's copy for the accesses after them.
        waits.sort_by_key(|w| !matches!(w, HostWait::Evict { .. }));
        for wait in waits {
            match wait {
                HostWait::Retry { cell, mode, then } => self.bring_home(&cell, mode, then),
                HostWait::Acquire { mode, then } => {
                    if let Some(d) = self.data.get_mut(&uid) {
                        let _ = d.replicas.release(MemNode::MAIN_RAM, mode);
                    }
                    then();
                }
                HostWait::Evict { slave } => {
                    let node = self.slaves[slave].node;
                    if let Some(d) = self.data.get_mut(&uid) {
                        let _ = d.replicas.release(MemNode::MAIN_RAM, AccessMode::R);
                        if d.replicas.evict(node).is_ok() {
                            self.forget_copy(slave, uid);
                        }
                    }
                }
            }
        }
        self.dispatch_ready();
    }
}
