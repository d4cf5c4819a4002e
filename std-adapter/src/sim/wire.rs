//! The simulated network of a [`Cluster`]: messages pushed on channels with MPI's
//! per-pair order, delivered to their rank's engine, and the engine's transmissions and
//! events performed.

use super::*;
use starling_core::tags::TagClass;

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Cluster<REQ, KEYS, PEERS> {
    /// Queues `msg` from `src` to `dst`, sent on `comm` with physical tag `tag`.
    pub(super) fn push(&mut self, src: Rank, dst: Rank, comm: CommId, tag: PhysTag, msg: Wire) {
        let channel = match self.network {
            Network::PerPair => (src.0, dst.0, 0, 0),
            Network::PerTag => {
                let sender = match msg {
                    Wire::Envelope { inline, .. } => inline,
                    Wire::Payload { sender, .. } => sender,
                };
                if let Some(req) = sender {
                    self.unsent.push((src, req));
                }
                (src.0, dst.0, comm.0, tag.0)
            }
        };
        self.links.entry(channel).or_default().push_back(msg);
    }

    pub(super) fn deliver(&mut self, src: Rank, dst: Rank, msg: Wire) {
        match msg {
            Wire::Envelope {
                comm,
                bytes,
                inline,
            } => {
                if let (Some(req), Network::PerPair) = (inline, self.network) {
                    self.sent(src, req);
                }
                self.with_admission(dst, |a, at| a.on_envelope(at, src, comm, bytes));
            }
            Wire::Payload {
                comm,
                tag,
                bytes,
                sender,
            } => {
                if let (Some(req), Network::PerPair) = (sender, self.network) {
                    self.sent(src, req);
                }
                let node = &mut self.nodes[dst.index()];
                let pos = node
                    .posted
                    .iter()
                    .position(|p| p.source == src && p.comm == comm && p.tag == tag);
                match pos {
                    Some(i) => {
                        let p = node.posted.remove(i);
                        self.received(dst, p.req, &bytes);
                    }
                    None => node.unexpected.push(UnexpectedPayload {
                        source: src,
                        comm,
                        tag,
                        bytes,
                    }),
                }
            }
        }
    }

    /// Hands envelope `bytes` from `src` to `dst`'s engine; gives it back with the full
    /// table when the engine refused it.
    pub(super) fn hand_in(
        &mut self,
        dst: Rank,
        src: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)> {
        let node = &mut self.nodes[dst.index()];
        match node.engine.handle_message(src, comm, &bytes) {
            Ok(Arrival::Nothing) => {}
            Ok(Arrival::Deliver { req, inline }) => {
                let buf = node.buffers.get_mut(&req).expect("receive buffer");
                buf[..inline.len()].copy_from_slice(inline);
            }
            Ok(Arrival::Stash { early, inline }) => {
                node.early.insert(early, inline.to_vec());
            }
            Err(MessageError::Full(table)) => return Err((bytes, table)),
            Err(e) => panic!("rank {} refused a message from {src}: {e}", dst.0),
        }
        self.drain(dst);
        Ok(())
    }

    /// Submits a waiting or new submission on `rank`: `Err` when the engine has no room.
    pub(super) fn submit(&mut self, rank: Rank, c: SimCmd) -> Result<Option<Key>, SimCmd> {
        let node = &mut self.nodes[rank.index()];
        let (req, kind, key, ready) = match c {
            SimCmd::Send {
                ticket,
                args,
                data,
                ready,
            } => match node.engine.submit_send(args) {
                Ok(req) => {
                    node.buffers.insert(req, data);
                    node.tickets.insert(req, ticket);
                    let key = Key::new(args.comm, args.dest, args.tag);
                    node.reqs.insert(ticket, (req, Kind::Send, key));
                    (req, Kind::Send, key, ready)
                }
                Err(e) if e.waits() => {
                    return Err(SimCmd::Send {
                        ticket,
                        args,
                        data,
                        ready,
                    });
                }
                Err(e) => panic!("rank {}: submit_send: {e}", rank.0),
            },
            SimCmd::Recv {
                ticket,
                args,
                ready,
            } => match node.engine.submit_recv(args) {
                Ok(req) => {
                    node.buffers.insert(req, vec![0; args.capacity as usize]);
                    node.tickets.insert(req, ticket);
                    let key = Key::new(args.comm, args.source, args.tag);
                    node.reqs.insert(ticket, (req, Kind::Recv, key));
                    (req, Kind::Recv, key, ready)
                }
                Err(e) if e.waits() => {
                    return Err(SimCmd::Recv {
                        ticket,
                        args,
                        ready,
                    });
                }
                Err(e) => panic!("rank {}: submit_recv: {e}", rank.0),
            },
        };
        if !ready {
            return Ok(None);
        }
        self.nodes[rank.index()]
            .engine
            .handle_data_ready(req)
            .expect("handle_data_ready");
        self.drain(rank);
        Ok((kind == Kind::Recv).then_some(key))
    }

    pub(super) fn sent(&mut self, rank: Rank, req: ReqId) {
        self.nodes[rank.index()]
            .engine
            .handle_sent(req)
            .expect("handle_sent");
        self.drain(rank);
    }

    pub(super) fn received(&mut self, rank: Rank, req: ReqId, bytes: &[u8]) {
        let node = &mut self.nodes[rank.index()];
        let buf = node
            .early
            .get_mut(&req)
            .or_else(|| node.buffers.get_mut(&req))
            .expect("a buffer for every posted receive");
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        node.engine
            .handle_received(req, bytes.len() as u64)
            .expect("handle_received");
        if let Some(key) = node.engine.marked_key(req) {
            node.marked.push(key);
        }
        self.drain(rank);
    }

    /// Performs every output of `rank`'s engine (the adapter's drain loop).
    pub(super) fn drain(&mut self, rank: Rank) {
        loop {
            let node = &mut self.nodes[rank.index()];
            if let Some(t) = node.engine.poll_transmit() {
                self.perform(rank, t);
                continue;
            }
            if let Some(e) = node.engine.poll_event() {
                Self::on_event(node, rank, e);
                continue;
            }
            break;
        }
    }

    pub(super) fn perform(&mut self, rank: Rank, t: Transmit) {
        match t {
            Transmit::Envelope {
                dest,
                comm,
                tag,
                header,
                inline,
            } => {
                let mut bytes = header.to_vec();
                if let Some(req) = inline {
                    bytes.extend_from_slice(&self.nodes[rank.index()].buffers[&req]);
                }
                let msg = Wire::Envelope {
                    comm,
                    bytes,
                    inline,
                };
                self.push(rank, dest, comm, tag, msg);
            }
            Transmit::Payload {
                req,
                dest,
                comm,
                tag,
                ..
            } => {
                let node = &self.nodes[rank.index()];
                if node.engine.config().tags.classify(tag) == Some(TagClass::Fast) {
                    self.fast_counts.0 += 1;
                }
                let bytes = self.nodes[rank.index()].buffers[&req].clone();
                let msg = Wire::Payload {
                    comm,
                    tag,
                    bytes,
                    sender: Some(req),
                };
                self.push(rank, dest, comm, tag, msg);
            }
            Transmit::Marker { dest, comm, tag } => {
                self.fast_counts.1 += 1;
                let msg = Wire::Payload {
                    comm,
                    tag,
                    bytes: Vec::new(),
                    sender: None,
                };
                self.push(rank, dest, comm, tag, msg);
            }
            Transmit::Receive {
                req,
                source,
                comm,
                tag,
                size,
                early,
            } => {
                let node = &mut self.nodes[rank.index()];
                if early {
                    node.early.insert(req, vec![0; size as usize]);
                }
                let pos = node
                    .unexpected
                    .iter()
                    .position(|u| u.source == source && u.comm == comm && u.tag == tag);
                match pos {
                    Some(i) => {
                        let u = node.unexpected.remove(i);
                        self.received(rank, req, &u.bytes);
                    }
                    None => node.posted.push(PostedRecv {
                        source,
                        comm,
                        tag,
                        req,
                    }),
                }
            }
        }
    }

    /// The ticket of `req`, which finished: forgotten.
    pub(super) fn ticket_done(node: &mut Node<REQ, KEYS, PEERS>, req: ReqId) -> Option<Ticket> {
        let t = node.tickets.remove(&req)?;
        node.reqs.remove(&t);
        Some(t)
    }

    pub(super) fn on_event(node: &mut Node<REQ, KEYS, PEERS>, rank: Rank, e: Event) {
        match e {
            Event::Completed {
                req,
                kind,
                len,
                from_early,
            } => {
                if let Some(early) = from_early {
                    let bytes = node.early.remove(&early).expect("early buffer");
                    let buf = node.buffers.get_mut(&req).expect("receive buffer");
                    buf[..len as usize].copy_from_slice(&bytes[..len as usize]);
                }
                let data = match kind {
                    Kind::Recv => node.buffers[&req][..len as usize].to_vec(),
                    Kind::Send => Vec::new(),
                };
                let ticket = Self::ticket_done(node, req);
                node.completions.push(Completion {
                    rank,
                    req,
                    kind,
                    data,
                    error: None,
                    ticket,
                });
            }
            Event::Failed { req, kind, error } => {
                let ticket = Self::ticket_done(node, req);
                node.completions.push(Completion {
                    rank,
                    req,
                    kind,
                    data: Vec::new(),
                    error: Some(error),
                    ticket,
                });
            }
            Event::Discard { early } => {
                node.early.remove(&early);
            }
        }
    }
}
