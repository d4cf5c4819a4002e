//! What the progression thread does with the engine's outputs and the transport's
//! completions: it performs each transmission, hands in each arrival, and finishes each
//! request its events complete.

use core::ops::Range;

use super::*;

impl<T: Transport> Progress<T> {
    pub(super) fn perform(&mut self, t: Transmit) {
        if self.trace {
            eprintln!("[starling_comm][{}] post {t:?}", self.rank.0);
        }
        match t {
            Transmit::Envelope {
                dest,
                comm,
                tag,
                header,
                inline,
            } => {
                // An eager payload travels in its envelope message, and nothing reads it
                // after: its packed buffer (packed with room for the header) becomes the
                // message, the header moved in before it — no allocation per message.
                let bytes = match inline.and_then(|req| self.pending.get_mut(&req)) {
                    Some(Pending::Send {
                        bytes: Some(Payload::Bytes(b)),
                        ..
                    }) => {
                        let mut message = core::mem::take(b);
                        prepend(&mut message, &header);
                        message
                    }
                    Some(Pending::Send { bytes: Some(p), .. }) => [&header[..], p.bytes()].concat(),
                    _ => header.to_vec(),
                };
                self.timeline.send(dest, comm, tag, &bytes, inline);
                self.transport.send(dest, comm, tag, bytes, inline);
            }
            Transmit::Payload {
                req,
                dest,
                comm,
                tag,
                ..
            } => {
                let bytes = match self.pending.get_mut(&req) {
                    Some(Pending::Send { bytes, .. }) => bytes.take(),
                    _ => None,
                };
                let payload = bytes.unwrap_or(Payload::Bytes(Vec::new()));
                self.timeline
                    .send(dest, comm, tag, payload.bytes(), Some(req));
                match payload {
                    Payload::Bytes(b) => self.transport.send(dest, comm, tag, b, Some(req)),
                    Payload::Lent(l) => self.transport.send_lent(dest, comm, tag, l, Some(req)),
                    Payload::Device(v) => self.transport.send_device(dest, comm, tag, v, Some(req)),
                }
            }
            Transmit::Marker { dest, comm, tag } => {
                self.timeline.send(dest, comm, tag, &[], None);
                self.transport.send(dest, comm, tag, Vec::new(), None);
            }
            Transmit::Receive {
                req,
                source,
                comm,
                tag,
                size,
                ..
            } => {
                self.timeline.recv(source, comm, tag, req);
                let size = size as usize;
                // A receive posted again for `req` (after a marker on its fast tag, §19)
                // replaces what the first one got.
                if let Some(Pending::Recv {
                    bytes, in_place, ..
                }) = self.pending.get_mut(&req)
                {
                    *in_place = None;
                    if let Some(old) = bytes.take() {
                        self.pool.give(old);
                    }
                }
                // A large contiguous handle receives in place, when the transport can.
                if size >= self.recv_in_place_min {
                    if let Some(Pending::Recv { cell, in_place, .. }) = self.pending.get_mut(&req) {
                        if cell.packed_size() == size {
                            if let Some(lent) = cell.lend_write() {
                                match self.transport.recv_lent(source, comm, tag, lent, req) {
                                    None => {
                                        *in_place = Some(0);
                                        return;
                                    }
                                    // Not taken: the guard drops, an ordinary receive follows.
                                    Some(lent) => drop(lent),
                                }
                            }
                        }
                    }
                }
                if self.transport.fills_given_buffers() {
                    let buffer = self.pool.take_filled(size);
                    self.transport.recv_into(source, comm, tag, buffer, req);
                } else {
                    self.transport.recv(source, comm, tag, size, req);
                }
            }
        }
    }

    pub(super) fn on_completion(&mut self, c: Completion) {
        match &c {
            Completion::Sent(req) => self.timeline.sent(*req),
            Completion::Received(req, bytes) => self.timeline.received(*req, bytes.len()),
            Completion::ReceivedInPlace(req, len) => self.timeline.received(*req, *len),
            Completion::ReceivedDevice(req, value) => self.timeline.received(*req, value.size()),
            Completion::Envelope {
                source,
                comm,
                bytes,
            } => self.timeline.envelope(*source, *comm, bytes),
            Completion::Barrier(_) => {}
        }
        match c {
            Completion::Sent(req) => {
                let _ = self.engine.handle_sent(req);
            }
            Completion::Received(req, bytes) => {
                let len = bytes.len() as u64;
                match self.pending.get_mut(&req) {
                    Some(Pending::Recv { bytes: slot, .. }) => *slot = Some(bytes),
                    _ => {
                        self.early.insert(req, bytes);
                    }
                }
                self.received(req, len);
            }
            Completion::Envelope {
                source,
                comm,
                bytes,
            } => self.on_envelope(source, comm, bytes),
            Completion::Barrier(token) => {
                if let Some(done) = self.barriers.remove(&token) {
                    done();
                }
            }
            Completion::ReceivedDevice(req, value) => {
                let len = value.size() as u64;
                match self.pending.get_mut(&req) {
                    Some(Pending::Recv { device, .. }) => *device = Some(value),
                    _ => {
                        self.early_device.insert(req, value);
                    }
                }
                self.received(req, len);
            }
            Completion::ReceivedInPlace(req, len) => {
                if let Some(Pending::Recv { in_place, .. }) = self.pending.get_mut(&req) {
                    *in_place = Some(len);
                }
                self.received(req, len as u64);
            }
        }
        self.admit_waiting();
    }

    /// Hands an envelope message to the engine. While earlier ones that it must stay
    /// behind wait refused (the core says which: [`RankEngine::refusal_order`]), it
    /// waits behind them; a message of another key goes in.
    pub(super) fn on_envelope(&mut self, source: Rank, comm: CommId, bytes: Vec<u8>) {
        if self
            .admission
            .as_deref()
            .is_none_or(Admission::nothing_refused)
        {
            // Nothing holds it back.
            match self.handle_envelope(source, comm, bytes) {
                Ok(()) => return,
                Err((bytes, table)) => {
                    return self
                        .with_admission(|a, p| a.keep_refused(p, source, comm, bytes, table));
                }
            }
        }
        self.with_admission(|a, p| {
            a.on_envelope(p, source, comm, bytes);
        });
    }

    /// Hands an envelope to the engine; gives it back when a table is full (the engine
    /// changed nothing).
    pub(super) fn handle_envelope(
        &mut self,
        source: Rank,
        comm: CommId,
        bytes: Vec<u8>,
    ) -> Result<(), (Vec<u8>, Table)> {
        loop {
            match self.engine.handle_message(source, comm, &bytes) {
                Ok(Arrival::Nothing) => {}
                Ok(Arrival::Deliver { req, inline }) => {
                    let at = locate(&bytes, inline);
                    if let Some(Pending::Recv {
                        bytes: slot,
                        in_place,
                        ..
                    }) = self.pending.get_mut(&req)
                    {
                        // What a marker left (§19) is replaced by the message.
                        *in_place = None;
                        *slot = Some(own_inline(bytes, at));
                    }
                }
                Ok(Arrival::Stash { early, inline }) => {
                    let at = locate(&bytes, inline);
                    self.early.insert(early, own_inline(bytes, at));
                }
                Err(MessageError::Full(Table::Transmits | Table::Events)) => {
                    // Outputs first, then the same message again.
                    self.drain_outputs();
                    continue;
                }
                Err(MessageError::Full(table)) => return Err((bytes, table)),
                Err(e) => eprintln!(
                    "[starling][{}] dropped a message from {source}: {e}",
                    self.rank.0
                ),
            }
            return Ok(());
        }
    }

    pub(super) fn on_event(&mut self, e: Event) {
        if self.trace {
            eprintln!("[starling_comm][{}] {e:?}", self.rank.0);
        }
        match e {
            Event::Completed {
                req,
                kind,
                len,
                from_early,
            } => {
                self.timeline.request_done(req, true);
                let early = from_early.and_then(|e| self.early.remove(&e));
                let early_device = from_early.and_then(|e| self.early_device.remove(&e));
                let mut pending = self.pending.remove(&req);
                if let (true, Some(Pending::Recv { in_place, .. })) =
                    (from_early.is_some(), pending.as_mut())
                {
                    // The bytes are in the early buffer; a marker (§19) may have left an
                    // empty in-place receive behind.
                    *in_place = None;
                }
                match (kind, pending) {
                    (Kind::Send, Some(Pending::Send { done, .. })) => done.call(Ok(())),
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            in_place: Some(got),
                            done,
                            ..
                        }),
                    ) => {
                        // The bytes are in the handle already (its lock was released when
                        // the receive completed).
                        done.call(if got as u64 == len {
                            Ok(())
                        } else {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got,
                            }))
                        });
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell,
                            device: Some(value),
                            done,
                            ..
                        }),
                    ) => {
                        // A device value: the handle's device copy becomes it.
                        let size = value.size();
                        done.call(if size as u64 != len {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got: size,
                            }))
                        } else {
                            value
                                .deliver(&cell, self.rank_shared.runtime.get().map(Runtime::layers))
                                .map_err(CommError::Device)
                        });
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell, bytes, done, ..
                        }),
                    ) if early_device.is_some() => {
                        drop(bytes);
                        let value = early_device.unwrap_or_else(|| unreachable!("checked"));
                        done.call(
                            value
                                .deliver(&cell, self.rank_shared.runtime.get().map(Runtime::layers))
                                .map_err(CommError::Device),
                        );
                    }
                    (
                        Kind::Recv,
                        Some(Pending::Recv {
                            cell, bytes, done, ..
                        }),
                    ) => {
                        let bytes = early.or(bytes).unwrap_or_default();
                        let result = if bytes.len() as u64 != len {
                            Err(CommError::Data(DataError::SizeMismatch {
                                expected: len as usize,
                                got: bytes.len(),
                            }))
                        } else {
                            cell.unpack(&bytes).map_err(CommError::Data)
                        };
                        self.pool.give(bytes);
                        done.call(result);
                    }
                    _ => {}
                }
            }
            Event::Failed { req, error, .. } => {
                self.timeline.request_done(req, false);
                if let Some(Pending::Send { done, .. } | Pending::Recv { done, .. }) =
                    self.pending.remove(&req)
                {
                    done.call(Err(match error {
                        RequestError::Truncated { capacity, size } => {
                            CommError::Data(DataError::SizeMismatch {
                                expected: capacity as usize,
                                got: size as usize,
                            })
                        }
                        other => CommError::Request(other),
                    }));
                }
            }
            Event::Discard { early } => {
                self.early.remove(&early);
            }
        }
    }
}

/// Where `inline`, an eager payload the engine handed out of envelope `bytes`, lies in
/// it: `Ok(range)` when it is a part of `bytes` (the engine hands out a slice of the
/// envelope it was given), else `Err` with a copy of it.
fn locate(bytes: &[u8], inline: &[u8]) -> Result<Range<usize>, Vec<u8>> {
    (inline.as_ptr() as usize)
        .checked_sub(bytes.as_ptr() as usize)
        .and_then(|start| Some(start..start.checked_add(inline.len())?))
        .filter(|at| at.end <= bytes.len())
        .ok_or_else(|| inline.to_vec())
}

/// The payload that [`locate`] found, as an owned buffer: `bytes` cut down to it in
/// place (the envelope's buffer becomes the payload's: no allocation per message), or
/// the copy.
fn own_inline(mut bytes: Vec<u8>, at: Result<Range<usize>, Vec<u8>>) -> Vec<u8> {
    match at {
        Ok(at) => {
            bytes.truncate(at.end);
            bytes.drain(..at.start);
            bytes
        }
        Err(copy) => copy,
    }
}

/// Moves `head` in before `bytes`' contents: one move of the contents and one copy of the
/// head (`Vec::splice` inserted the head byte by byte, 370 instructions for a header of 24
/// bytes before 8).
pub(super) fn prepend(bytes: &mut Vec<u8>, head: &[u8]) {
    let len = bytes.len();
    bytes.resize(len + head.len(), 0);
    bytes.copy_within(..len, head.len());
    bytes[..head.len()].copy_from_slice(head);
}
