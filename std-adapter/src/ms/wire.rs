//! The master-slave protocol's messages: what the master tells a slave (a [`Bundle`] of
//! [`Op`]s) and what a slave answers ([`Reply`]), as little-endian bytes.
//!
//! Every decode is total: a short, long or unknown message is a [`WireError`], never a
//! panic, and no length read from a message allocates before it was checked against the
//! bytes actually there.

use core::fmt;

use starling_core::{AccessMode, Rank, Tag};

/// The first bytes of every bundle: the protocol and its version.
const BUNDLE_MAGIC: [u8; 4] = *b"SMS1";

/// A message that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WireError(pub(crate) &'static str);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed master-slave message: {}", self.0)
    }
}

/// One access of a task sent to a slave: the datum (by uid) and the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireAccess {
    pub(crate) uid: u64,
    pub(crate) mode: AccessMode,
}

/// One thing the master asks of a slave, carried out in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Make a zeroed buffer for datum `uid` of interface `kind` and shape `shape`, unless
    /// one exists.
    Alloc {
        uid: u64,
        kind: String,
        shape: Vec<u8>,
    },
    /// Receive datum `uid`'s value from `from` with `tag`.
    Recv { uid: u64, from: Rank, tag: Tag },
    /// Send datum `uid`'s value to `dest` with `tag` (after the tasks before it wrote it).
    SendTo { uid: u64, dest: Rank, tag: Tag },
    /// Run task `task` of codelet `name` on the accesses, then answer [`Reply::Done`].
    Exec {
        task: u64,
        name: String,
        priority: i32,
        accesses: Vec<WireAccess>,
    },
    /// Free the buffer of datum `uid` (its copy is stale or no longer needed).
    Drop { uid: u64 },
    /// Finish what was asked, answer [`Reply::Bye`] and stop.
    Stop,
}

/// What the master sends a slave in one message: ops numbered by `seq` (consecutive per
/// slave, from 0), so that the slave carries them out in the master's order whatever
/// order the messages arrive in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bundle {
    pub(crate) seq: u64,
    pub(crate) ops: Vec<Op>,
}

/// What a slave tells the master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The slave is up: its worker threads and memory budget (`u64::MAX`: none).
    Hello { threads: u32, budget: u64 },
    /// Task `task` ran (`error` is `None`) or failed.
    Done { task: u64, error: Option<String> },
    /// The slave is alive and busy (sent while tasks run, so that the master can tell a
    /// long task from a dead slave).
    Alive,
    /// Something the master asked failed outside a task (a transfer, a bad op).
    Failed { message: String },
    /// The slave stopped.
    Bye,
}

// ----- encoding ----------------------------------------------------------------------

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        // A message longer than 4 GiB is no master-slave message.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, WireError> {
        core::str::from_utf8(self.bytes()?)
            .map(str::to_owned)
            .map_err(|_| WireError("a name is not UTF-8"))
    }
    fn mode(&mut self) -> Result<AccessMode, WireError> {
        AccessMode::from_bits(self.u8()?).ok_or(WireError("unknown access mode bits"))
    }
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError("trailing bytes"))
        }
    }
}

impl Bundle {
    /// The bundle as bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(64));
        w.0.extend_from_slice(&BUNDLE_MAGIC);
        w.u64(self.seq);
        w.u32(u32::try_from(self.ops.len()).unwrap_or(u32::MAX));
        for op in &self.ops {
            match op {
                Op::Alloc { uid, kind, shape } => {
                    w.u8(0);
                    w.u64(*uid);
                    w.bytes(kind.as_bytes());
                    w.bytes(shape);
                }
                Op::Recv { uid, from, tag } => {
                    w.u8(1);
                    w.u64(*uid);
                    w.u32(from.0);
                    w.i64(tag.0);
                }
                Op::SendTo { uid, dest, tag } => {
                    w.u8(2);
                    w.u64(*uid);
                    w.u32(dest.0);
                    w.i64(tag.0);
                }
                Op::Exec {
                    task,
                    name,
                    priority,
                    accesses,
                } => {
                    w.u8(3);
                    w.u64(*task);
                    w.bytes(name.as_bytes());
                    w.u32(*priority as u32);
                    w.u32(u32::try_from(accesses.len()).unwrap_or(u32::MAX));
                    for a in accesses {
                        w.u64(a.uid);
                        w.u8(a.mode.bits());
                    }
                }
                Op::Drop { uid } => {
                    w.u8(4);
                    w.u64(*uid);
                }
                Op::Stop => w.u8(5),
            }
        }
        w.0
    }

    /// Decodes a bundle.
    ///
    /// # Errors
    /// [`WireError`] for anything but one well-formed bundle.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader(bytes);
        if r.array::<4>()? != BUNDLE_MAGIC {
            return Err(WireError("not a master-slave bundle (bad magic)"));
        }
        let seq = r.u64()?;
        let count = r.u32()?;
        let mut ops = Vec::new();
        for _ in 0..count {
            let op = match r.u8()? {
                0 => Op::Alloc {
                    uid: r.u64()?,
                    kind: r.string()?,
                    shape: r.bytes()?.to_vec(),
                },
                1 => Op::Recv {
                    uid: r.u64()?,
                    from: Rank(r.u32()?),
                    tag: Tag(r.i64()?),
                },
                2 => Op::SendTo {
                    uid: r.u64()?,
                    dest: Rank(r.u32()?),
                    tag: Tag(r.i64()?),
                },
                3 => {
                    let task = r.u64()?;
                    let name = r.string()?;
                    let priority = r.u32()? as i32;
                    let n = r.u32()?;
                    let mut accesses = Vec::new();
                    for _ in 0..n {
                        accesses.push(WireAccess {
                            uid: r.u64()?,
                            mode: r.mode()?,
                        });
                    }
                    Op::Exec {
                        task,
                        name,
                        priority,
                        accesses,
                    }
                }
                4 => Op::Drop { uid: r.u64()? },
                5 => Op::Stop,
                _ => return Err(WireError("unknown op")),
            };
            ops.push(op);
        }
        r.end()?;
        Ok(Self { seq, ops })
    }
}

impl Reply {
    /// The reply as bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(16));
        match self {
            Self::Hello { threads, budget } => {
                w.u8(0);
                w.u32(*threads);
                w.u64(*budget);
            }
            Self::Done { task, error } => {
                w.u8(1);
                w.u64(*task);
                match error {
                    None => w.u8(0),
                    Some(e) => {
                        w.u8(1);
                        w.bytes(e.as_bytes());
                    }
                }
            }
            Self::Alive => w.u8(2),
            Self::Failed { message } => {
                w.u8(3);
                w.bytes(message.as_bytes());
            }
            Self::Bye => w.u8(4),
        }
        w.0
    }

    /// Decodes a reply.
    ///
    /// # Errors
    /// [`WireError`] for anything but one well-formed reply.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader(bytes);
        let reply = match r.u8()? {
            0 => Self::Hello {
                threads: r.u32()?,
                budget: r.u64()?,
            },
            1 => {
                let task = r.u64()?;
                let error = match r.u8()? {
                    0 => None,
                    1 => Some(r.string()?),
                    _ => return Err(WireError("bad outcome flag")),
                };
                Self::Done { task, error }
            }
            2 => Self::Alive,
            3 => Self::Failed {
                message: r.string()?,
            },
            4 => Self::Bye,
            _ => return Err(WireError("unknown reply")),
        };
        r.end()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_op() -> Bundle {
        Bundle {
            seq: 7,
            ops: vec![
                Op::Alloc {
                    uid: 3,
                    kind: "starling_std::interfaces::Vector<f64>".into(),
                    shape: vec![1, 2, 3],
                },
                Op::Recv {
                    uid: 3,
                    from: Rank(0),
                    tag: Tag(99),
                },
                Op::SendTo {
                    uid: 4,
                    dest: Rank(2),
                    tag: Tag(-5),
                },
                Op::Exec {
                    task: 11,
                    name: "gemm".into(),
                    priority: -3,
                    accesses: vec![
                        WireAccess {
                            uid: 3,
                            mode: AccessMode::R,
                        },
                        WireAccess {
                            uid: 4,
                            mode: AccessMode::RW,
                        },
                    ],
                },
                Op::Drop { uid: 4 },
                Op::Stop,
            ],
        }
    }

    #[test]
    fn bundles_and_replies_round_trip() {
        let b = every_op();
        assert_eq!(Bundle::decode(&b.encode()), Ok(b));
        for reply in [
            Reply::Hello {
                threads: 4,
                budget: u64::MAX,
            },
            Reply::Done {
                task: 1,
                error: None,
            },
            Reply::Done {
                task: 2,
                error: Some("boom".into()),
            },
            Reply::Alive,
            Reply::Failed {
                message: "size".into(),
            },
            Reply::Bye,
        ] {
            assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused_without_panic() {
        let bytes = every_op().encode();
        for cut in 0..bytes.len() {
            assert!(Bundle::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = bytes;
        long.push(0);
        assert_eq!(Bundle::decode(&long), Err(WireError("trailing bytes")));
        let reply = Reply::Done {
            task: 2,
            error: Some("boom".into()),
        }
        .encode();
        for cut in 0..reply.len() {
            assert!(Reply::decode(&reply[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = Reply::decode(&bytes);
            let mut b = BUNDLE_MAGIC.to_vec();
            b.extend_from_slice(&bytes);
            let _ = Bundle::decode(&b);
        }
        // A count of 4 billion ops in a short message allocates nothing up front.
        let mut huge = BUNDLE_MAGIC.to_vec();
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Bundle::decode(&huge), Err(WireError("truncated")));
    }
}
