//! What leaves for a send: its envelope (eager payload inline), then its payload, in
//! priority order under the in-flight cap.

use super::*;
use crate::fast::Route;

impl<const REQ: usize, const KEYS: usize, const PEERS: usize> Engine<REQ, KEYS, PEERS> {
    pub(super) fn alloc_msg(&mut self) -> MsgId {
        let m = self.next_msg;
        self.next_msg = m.next();
        m
    }

    pub(super) fn envelope_transmit(
        &self,
        dest: Rank,
        env: Envelope,
        inline: Option<ReqId>,
    ) -> Transmit {
        Transmit::Envelope {
            dest,
            comm: env.comm,
            tag: self.config.tags.envelope(),
            header: env.encode(),
            inline,
        }
    }

    /// A standard send of `args` whose data is ready now, leaving at once without a
    /// request when nothing it could be ordered behind waits to leave (protocol §8.2,
    /// *Express sends*): returns the one message to post — an eager envelope followed by
    /// the payload, or the payload alone on the user tag's fast tag — which no request
    /// owns and nothing reports. `None`, with nothing changed, when the send needs a
    /// request: a destination outside the world, a synchronous send, a payload longer
    /// than the eager limit (or, on a key with a fast tag, one that is not fast), a send
    /// ready or an output queued (a send of the same key among them would be overtaken),
    /// or the in-flight cap reached. (An express message is not counted in flight: it is
    /// complete for the engine once posted, as an eager message of MPI's own buffered
    /// send is.)
    ///
    /// The send is counted in the statistics as it leaves; its `MsgId` comes from the same
    /// sequence as every other envelope's.
    pub fn express_send(&mut self, args: SendArgs) -> Option<Express> {
        let cap = self.config.max_inflight_sends;
        if args.sync
            || args.dest.0 >= self.config.nranks
            || !self.ready.is_empty()
            || !self.transmits.is_empty()
            || !self.payloads.is_empty()
            || (cap != 0 && self.inflight_sends >= cap)
        {
            return None;
        }
        let out = match crate::fast::route(&self.config, args.comm, args.tag, args.size, false) {
            Route::Fast(tag) => Express {
                dest: args.dest,
                comm: args.comm,
                tag,
                header: None,
            },
            Route::Marked(_) => return None,
            Route::Envelope if args.size > u64::from(self.config.eager_limit) => return None,
            Route::Envelope => {
                let env = Envelope {
                    kind: EnvKind::Eager,
                    comm: args.comm,
                    tag: args.tag,
                    size: args.size,
                    msg: self.alloc_msg(),
                };
                Express {
                    dest: args.dest,
                    comm: args.comm,
                    tag: self.config.tags.envelope(),
                    header: Some(env.encode()),
                }
            }
        };
        let _ = self.stats.record_send(args.dest, args.size);
        Some(out)
    }

    /// Takes the highest-priority ready send, within the in-flight cap, and emits its
    /// envelope, or its fast message, or its marker (then its envelope).
    pub(super) fn next_send(&mut self) -> Option<Transmit> {
        let cap = self.config.max_inflight_sends;
        if cap != 0 && self.inflight_sends >= cap {
            return None;
        }
        let req = self.ready.pop()?;
        let r = *self.requests.get(req)?;
        // A key with a fast tag puts one message on it per message (protocol §19).
        let marker = match crate::fast::route(&self.config, r.comm, r.tag, r.size, r.sync) {
            Route::Fast(tag) => {
                self.inflight_sends += 1;
                self.step(req, Step::Posted);
                if let Some(rm) = self.requests.get_mut(req) {
                    rm.msg_size = r.size;
                }
                return Some(Transmit::Payload {
                    req,
                    dest: r.peer,
                    comm: r.comm,
                    tag,
                    size: r.size,
                });
            }
            Route::Marked(tag) => Some(Transmit::Marker {
                dest: r.peer,
                comm: r.comm,
                tag,
            }),
            Route::Envelope => None,
        };
        let envelope = self.envelope_path(req, r)?;
        match marker {
            // `next_send` runs only when no transmit waits: the envelope goes right after.
            Some(m) => {
                let _ = self.transmits.push_back(envelope);
                Some(m)
            }
            None => Some(envelope),
        }
    }

    /// The envelope of a ready send (its payload queued after it, when it has one).
    fn envelope_path(&mut self, req: ReqId, r: Request) -> Option<Transmit> {
        let msg = self.alloc_msg();
        if let Some(rm) = self.requests.get_mut(req) {
            rm.msg = Some(msg);
            rm.msg_size = r.size;
        }
        let mut env = Envelope {
            kind: EnvKind::Data,
            comm: r.comm,
            tag: r.tag,
            size: r.size,
            msg,
        };
        if r.sync {
            env.kind = EnvKind::SyncData;
            if self.sync_sends.insert(r.comm, r.peer, msg, req).is_err() {
                // Unreachable by construction (one entry per live request, same
                // capacity); keep the send ready rather than lose it.
                let _ = self.ready.push(req, r.priority);
                return None;
            }
            self.step(req, Step::EnvelopeSent);
            return Some(self.envelope_transmit(r.peer, env, None));
        }
        self.inflight_sends += 1;
        self.step(req, Step::Posted);
        if r.size <= u64::from(self.config.eager_limit) {
            env.kind = EnvKind::Eager;
            return Some(self.envelope_transmit(r.peer, env, Some(req)));
        }
        // The payload follows right after its envelope.
        let _ = self.payloads.push_back(req);
        Some(self.envelope_transmit(r.peer, env, None))
    }

    pub(super) fn payload_transmit(&self, req: ReqId) -> Option<Transmit> {
        let r = *self.requests.get(req)?;
        let msg = r.msg?;
        let tag = if r.sync {
            self.config.tags.sync(msg)
        } else {
            self.config.tags.data(msg)
        };
        Some(Transmit::Payload {
            req,
            dest: r.peer,
            comm: r.comm,
            tag,
            size: r.size,
        })
    }
}
