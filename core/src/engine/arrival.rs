//! Arrivals: an envelope matched to a posted receive, or kept as early data until
//! its receive comes (the engine's side of [`Engine::handle_message`]).

use super::*;

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    /// A ready acknowledgement: the receiver posted its receive; send the payload.
    pub(super) fn on_ready(
        &mut self,
        source: Rank,
        env: Envelope,
    ) -> Result<Arrival<'static>, MessageError> {
        let Some(req) = self.sync_sends.remove(env.comm, source, env.msg) else {
            return Err(PeerError::UnexpectedReady {
                source,
                msg: env.msg,
            }
            .into());
        };
        self.step(req, Step::ReadyReceived);
        self.inflight_sends += 1;
        let _ = self.payloads.push_back(req);
        Ok(Arrival::Nothing)
    }

    /// An envelope for which a receive was waiting.
    pub(super) fn on_matched_arrival<'m>(
        &mut self,
        req: ReqId,
        u: Unexpected,
        inline: &'m [u8],
    ) -> Arrival<'m> {
        self.step(req, Step::Matched);
        self.accept(req, u, inline)
    }

    /// Matches a receive that just became ready with the oldest early message of its key.
    pub(super) fn match_recv(&mut self, req: ReqId, u: Unexpected) {
        self.step(req, Step::Matched);
        match (u.kind, u.internal) {
            (UnexpectedKind::Sync, _) => {
                let _ = self.accept(req, u, &[]);
            }
            (_, Some(early)) => self.take_early(req, u, early),
            (_, None) => {
                // Unreachable: data and eager early messages always have a buffer.
                self.fail(
                    req,
                    RequestError::LengthMismatch {
                        expected: u.size,
                        got: 0,
                    },
                );
            }
        }
    }

    /// A receive takes an early message whose payload has (or is being) received into
    /// the early buffer `early`.
    pub(super) fn take_early(&mut self, req: ReqId, u: Unexpected, early: ReqId) {
        let capacity = self.requests.get(req).map_or(0, |r| r.size);
        let early_done = self
            .requests
            .get(early)
            .is_some_and(|e| e.state == State::Completed);
        if u.size > capacity {
            self.fail(
                req,
                RequestError::Truncated {
                    capacity,
                    size: u.size,
                },
            );
            if early_done {
                let _ = self.slab_remove(early);
                self.push_event(Event::Discard { early });
            } else if let Some(e) = self.requests.get_mut(early) {
                e.link = Link::Discard;
            }
            return;
        }
        if early_done {
            let _ = self.slab_remove(early);
            if let Some(peer) = self.requests.get(req).map(|r| r.peer) {
                let _ = self.stats.record_recv(peer, u.size);
            }
            self.complete(req, u.size, Some(early));
        } else {
            if let Some(rm) = self.requests.get_mut(req) {
                rm.msg = Some(u.msg);
                rm.msg_size = u.size;
            }
            if let Some(e) = self.requests.get_mut(early) {
                e.link = Link::DeliverTo(req);
            }
        }
    }

    /// A matched receive accepts a message that arrives now (data, eager, or a sync
    /// envelope that may be answered now).
    pub(super) fn accept<'m>(
        &mut self,
        req: ReqId,
        u: Unexpected,
        inline: &'m [u8],
    ) -> Arrival<'m> {
        let Some(r) = self.requests.get(req).copied() else {
            return Arrival::Nothing;
        };
        let truncated = u.size > r.size;
        if let Some(rm) = self.requests.get_mut(req) {
            rm.msg = Some(u.msg);
            rm.msg_size = u.size;
        }
        match u.kind {
            UnexpectedKind::Eager => {
                if truncated {
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    return Arrival::Nothing;
                }
                let _ = self.stats.record_recv(r.peer, u.size);
                self.complete(req, u.size, None);
                Arrival::Deliver { req, inline }
            }
            UnexpectedKind::Data => {
                if truncated {
                    // Drain the payload into a discard buffer so it never lingers on
                    // its physical tag.
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    self.drain_into_discard(r.comm, r.peer, self.config.tags.data(u.msg), u);
                    return Arrival::Nothing;
                }
                self.push_transmit(Transmit::Receive {
                    req,
                    source: r.peer,
                    comm: r.comm,
                    tag: self.config.tags.data(u.msg),
                    size: u.size,
                    early: false,
                });
                Arrival::Nothing
            }
            UnexpectedKind::Sync => {
                let ready = Envelope {
                    kind: EnvKind::SyncReady,
                    comm: r.comm,
                    tag: r.tag,
                    size: 0,
                    msg: u.msg,
                };
                self.push_transmit(self.envelope_transmit(r.peer, ready, None));
                let tag = self.config.tags.sync(u.msg);
                if truncated {
                    self.fail(
                        req,
                        RequestError::Truncated {
                            capacity: r.size,
                            size: u.size,
                        },
                    );
                    self.drain_into_discard(r.comm, r.peer, tag, u);
                } else {
                    self.push_transmit(Transmit::Receive {
                        req,
                        source: r.peer,
                        comm: r.comm,
                        tag,
                        size: u.size,
                        early: false,
                    });
                }
                Arrival::Nothing
            }
        }
    }

    /// Posts an engine-owned receive that takes a payload nobody wants, then discards it.
    pub(super) fn drain_into_discard(
        &mut self,
        comm: CommId,
        source: Rank,
        tag: PhysTag,
        u: Unexpected,
    ) {
        let mut early = Request::internal_recv(comm, source, Tag(0), u.size, u.msg);
        early.link = Link::Drain;
        early_steps(&mut early, false);
        if let Ok(id) = self.slab_insert(early) {
            self.push_transmit(Transmit::Receive {
                req: id,
                source,
                comm,
                tag,
                size: u.size,
                early: true,
            });
        }
    }

    /// An envelope that no receive waits for: keep it as early data.
    pub(super) fn on_early_arrival<'m>(
        &mut self,
        key: Key,
        mut u: Unexpected,
        inline: &'m [u8],
    ) -> Result<Arrival<'m>, MessageError> {
        if !self.matcher.has_unexpected_key(key)
            && self.matcher.unexpected_keys() >= self.key_limit()
        {
            return Err(MessageError::Full(Table::MatchKeys));
        }
        if u.kind == UnexpectedKind::Sync {
            // Nothing is sent until we answer: remember the envelope only.
            self.matcher
                .push_unexpected(key, u)
                .map_err(|e| MessageError::Full(e.table))?;
            self.waiting_arrivals += 1;
            return Ok(Arrival::Nothing);
        }
        let mut early = Request::internal_recv(key.comm, key.peer, key.tag, u.size, u.msg);
        early_steps(&mut early, u.kind == UnexpectedKind::Eager);
        if !self.has_room(Class::Early) {
            return Err(MessageError::Full(Table::Requests));
        }
        let id = self
            .slab_insert(early)
            .map_err(|e| MessageError::Full(e.table))?;
        u.internal = Some(id);
        if let Err(e) = self.matcher.push_unexpected(key, u) {
            let _ = self.slab_remove(id);
            return Err(MessageError::Full(e.table));
        }
        self.early_messages += 1;
        self.waiting_arrivals += 1;
        if u.kind == UnexpectedKind::Eager {
            return Ok(Arrival::Stash { early: id, inline });
        }
        self.push_transmit(Transmit::Receive {
            req: id,
            source: key.peer,
            comm: key.comm,
            tag: self.config.tags.data(u.msg),
            size: u.size,
            early: true,
        });
        Ok(Arrival::Nothing)
    }
}

/// Steps a new early request through the state machine: it is ready at once (the engine
/// owns its buffer), matched to its envelope, and — for an eager payload that arrived
/// with the envelope — already done.
pub(super) fn early_steps(early: &mut Request, arrived: bool) {
    let _ = early.apply(Step::DataReady);
    let _ = early.apply(Step::Matched);
    if arrived {
        let _ = early.apply(Step::Done);
    }
}
