//! Timeline traces: what each rank's threads did, when, in the Chrome / Perfetto JSON
//! trace format.
//!
//! With a trace file configured (`STARLING_TRACE=<path>`, or
//! [`RankConfig::trace_file`](crate::RankConfig::trace_file) /
//! [`ClusterConfig::trace_file`](crate::ClusterConfig::trace_file)), every rank records,
//! in memory:
//!
//! * **tasks**: one slice per task a worker ran, named after its codelet, on the
//!   worker's track (`worker 0`, `worker 1`, …);
//! * **messages**: one slice per message the progression thread handed to the transport
//!   (from the post to the transport's completion) and per message it received (from the
//!   post of the receive to its completion; an envelope, received as it arrives, is a
//!   short slice), on `sends k` / `receives k` tracks (overlapping messages take separate
//!   tracks). A **flow arrow** joins each sent message to its receipt on the peer: both
//!   sides name a message by (source, destination, communicator, physical tag, its
//!   number among the messages of that key), which MPI's non-overtaking order makes the
//!   same on both sides, and hash it into the arrow's id;
//! * **requests**: one slice per send or receive request, from its submission to the
//!   progression thread to its completion, on `requests k` tracks;
//! * **waits**: the application blocked in `wait_for_all`, `Request::wait`, `acquire`,
//!   `barrier` or `tag_wait`, on the `application` track.
//!
//! Threads buffer their own records (a worker in a local `Vec`, the progression thread
//! in its own state) and hand them over when they stop; when the rank stops, it writes
//! `<path>.rank<N>.json` — or `<path>/rank<N>.json` when `<path>` is a directory or ends
//! with `/` ([`rank_file`]). Tracing off costs a test of an `Option` per task and per
//! message.
//!
//! Timestamps are microseconds of one clock per process ([`clock_ns`]), so the ranks of
//! an in-process cluster share it. Under MPI each process has its own: the MPI adapter
//! measures, at start-up, what to add to this process's clock to read rank 0's
//! ([`set_clock_offset_ns`]) and the file records it (`otherData.clock_offset_us`);
//! `trace-merge` (a binary of the `starling` package) applies it when it merges the
//! ranks' files into one timeline, with one process per rank.

use core::fmt::Write as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use starling_core::envelope;
use starling_core::{CommId, PhysTag, Rank, ReqId};

use crate::sync::{Arc, Mutex, lock};

/// The process's trace clock: nanoseconds since its first reading in this process.
///
/// Every rank of the process reads the same clock, so in-process ranks need no
/// alignment.
pub fn clock_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What to add to this process's [`clock_ns`] to read rank 0's clock, in nanoseconds.
static CLOCK_OFFSET_NS: core::sync::atomic::AtomicI64 = core::sync::atomic::AtomicI64::new(0);

/// Records that rank 0's clock reads this process's [`clock_ns`] plus `offset`
/// nanoseconds. A transport whose ranks are separate processes (MPI) measures it at
/// start-up, when tracing; trace files record it and the merger applies it.
pub fn set_clock_offset_ns(offset: i64) {
    CLOCK_OFFSET_NS.store(offset, core::sync::atomic::Ordering::Relaxed);
}

/// The offset last given to [`set_clock_offset_ns`] (0 by default).
pub fn clock_offset_ns() -> i64 {
    CLOCK_OFFSET_NS.load(core::sync::atomic::Ordering::Relaxed)
}

/// The file rank `rank` writes its trace to, for the configured path `base`:
/// `<base>/rank<N>.json` when `base` is an existing directory or ends with a `/`,
/// `<base>.rank<N>.json` otherwise.
///
/// ```
/// use std::path::Path;
/// use starling_std::trace::rank_file;
/// assert_eq!(rank_file(Path::new("out/run"), 1), Path::new("out/run.rank1.json"));
/// assert_eq!(rank_file(Path::new("out/traces/"), 0), Path::new("out/traces/rank0.json"));
/// ```
pub fn rank_file(base: &Path, rank: u32) -> PathBuf {
    let s = base.as_os_str().to_string_lossy();
    if base.is_dir() || s.ends_with('/') || s.ends_with(std::path::MAIN_SEPARATOR) {
        base.join(format!("rank{rank}.json"))
    } else {
        let mut name = base.as_os_str().to_owned();
        name.push(format!(".rank{rank}.json"));
        PathBuf::from(name)
    }
}

/// The id of the flow arrow of a message: a hash of what both its sender and its
/// receiver know of it, below 2⁵³ (JSON readers hold numbers as doubles).
fn flow_id(source: Rank, dest: Rank, comm: CommId, tag: PhysTag, seq: u64) -> u64 {
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |v: u64| {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(u64::from(source.0));
    eat(u64::from(dest.0));
    eat(u64::from(comm.0));
    eat(tag.0 as u32 as u64);
    eat(seq);
    h & ((1 << 53) - 1)
}

/// The track ids (Chrome's `tid`) of a rank's trace.
mod track {
    /// The application's threads (waits).
    pub(super) const APPLICATION: u32 = 0;
    /// Worker `w` is `WORKER + w`.
    pub(super) const WORKER: u32 = 1;
    /// Device slot `d`'s tasks (`dmda`) are those of worker `DEVICES + d`.
    pub(super) const DEVICES: u32 = 500;
    /// Requests lane `k` is `REQUESTS + k`.
    pub(super) const REQUESTS: u32 = 1000;
    /// Sent messages, lane `k`.
    pub(super) const SENDS: u32 = 2000;
    /// Received messages, lane `k`.
    pub(super) const RECEIVES: u32 = 3000;
}

/// One message, as the trace shows it.
#[derive(Clone, Debug)]
struct Message {
    /// The peer: destination of a send, source of a receive.
    peer: Rank,
    comm: CommId,
    tag: PhysTag,
    /// Bytes on the wire (0 for a receive not yet completed).
    bytes: u64,
    /// For an envelope message: its kind and user tag.
    envelope: Option<(&'static str, i64)>,
    /// The flow id.
    flow: u64,
    /// Its number among the messages of its key.
    seq: u64,
}

/// What a record shows.
#[derive(Clone, Debug)]
enum What {
    /// A task run by worker `worker`, expected by the scheduler to take `expected`
    /// seconds (`dmda`).
    Task {
        worker: u32,
        codelet: Arc<str>,
        expected: Option<f64>,
    },
    /// The application blocked.
    Wait(&'static str),
    /// A request, from its submission to its completion.
    Request {
        send: bool,
        peer: Rank,
        tag: i64,
        bytes: u64,
        failed: bool,
    },
    /// A message handed to the transport.
    Sent(Message),
    /// A message received.
    Received(Message),
}

/// One slice of the timeline.
#[derive(Clone, Debug)]
struct Record {
    start: u64,
    end: u64,
    what: What,
}

/// A rank's trace: the records its threads handed over, written when the rank stops.
#[derive(Debug)]
pub(crate) struct Recorder {
    rank: Rank,
    size: u32,
    file: PathBuf,
    records: Mutex<Vec<Record>>,
}

impl Recorder {
    /// The trace of rank `rank` of `size`, to be written to [`rank_file`]`(base, rank)`.
    pub(crate) fn new(base: &Path, rank: Rank, size: u32) -> Arc<Self> {
        // Start the clock before anything is recorded.
        let _ = clock_ns();
        Arc::new(Self {
            rank,
            size,
            file: rank_file(base, rank.0),
            records: Mutex::new(Vec::new()),
        })
    }

    /// Records that the application waited in `what` from `start` until now.
    fn wait(&self, what: &'static str, start: u64) {
        let end = clock_ns();
        lock(&self.records).push(Record {
            start,
            end,
            what: What::Wait(what),
        });
    }

    /// Records a task of `codelet` that device slot `device` ran from `start` until now
    /// (clock nanoseconds), expected by the scheduler to take `expected` seconds.
    pub(crate) fn device_task(
        &self,
        device: u32,
        codelet: &Arc<str>,
        start: u64,
        expected: Option<f64>,
    ) {
        let end = clock_ns();
        lock(&self.records).push(Record {
            start: start.min(end),
            end,
            what: What::Task {
                worker: track::DEVICES + device,
                codelet: Arc::clone(codelet),
                expected,
            },
        });
    }

    fn absorb(&self, records: &mut Vec<Record>) {
        if !records.is_empty() {
            lock(&self.records).append(records);
        }
    }

    /// Writes the trace to its file (the records are consumed); returns the path.
    pub(crate) fn write(&self) -> std::io::Result<PathBuf> {
        let records = core::mem::take(&mut *lock(&self.records));
        let json = render(self.rank, self.size, records, clock_offset_ns());
        if let Some(dir) = self.file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&self.file, json)?;
        Ok(self.file.clone())
    }

    /// Writes the trace and says where on stderr, or why it could not.
    pub(crate) fn finish(&self) {
        match self.write() {
            Ok(path) => eprintln!(
                "[starling] rank {}: trace written to {}",
                self.rank.0,
                path.display()
            ),
            Err(e) => eprintln!(
                "[starling] rank {}: cannot write the trace {}: {e}",
                self.rank.0,
                self.file.display()
            ),
        }
    }
}

/// A wait of the application, recorded when dropped (nothing when tracing is off).
pub(crate) struct Wait<'a> {
    on: Option<(&'a Recorder, &'static str, u64)>,
}

/// Starts recording a wait named `what` if `recorder` is set.
pub(crate) fn wait<'a>(recorder: Option<&'a Arc<Recorder>>, what: &'static str) -> Wait<'a> {
    Wait {
        on: recorder.map(|r| (&**r, what, clock_ns())),
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some((r, what, start)) = self.on {
            r.wait(what, start);
        }
    }
}

/// A worker's records, handed to the rank's recorder when the worker stops.
pub(crate) struct WorkerTrace {
    recorder: Option<Arc<Recorder>>,
    worker: u32,
    records: Vec<Record>,
}

impl WorkerTrace {
    /// Worker `worker`'s trace, recording only when `recorder` is set.
    pub(crate) fn new(recorder: Option<Arc<Recorder>>, worker: u32) -> Self {
        Self {
            recorder,
            worker,
            records: Vec::new(),
        }
    }

    /// The time a task starts, when tracing.
    #[inline]
    pub(crate) fn begin(&self) -> Option<u64> {
        self.recorder.as_ref().map(|_| clock_ns())
    }

    /// Records a task of `codelet` that started at `begin` (from [`WorkerTrace::begin`]),
    /// expected to take `expected` seconds.
    #[inline]
    pub(crate) fn end(&mut self, begin: Option<u64>, codelet: &Arc<str>, expected: Option<f64>) {
        if let Some(start) = begin {
            self.records.push(Record {
                start,
                end: clock_ns(),
                what: What::Task {
                    worker: self.worker,
                    codelet: Arc::clone(codelet),
                    expected,
                },
            });
        }
    }
}

impl Drop for WorkerTrace {
    fn drop(&mut self) {
        if let Some(r) = &self.recorder {
            r.absorb(&mut self.records);
        }
    }
}

/// An open request or message: its start and what it is.
struct Open {
    start: u64,
    what: What,
}

/// The progression thread's part of the trace: requests and messages. Every method
/// returns at once when tracing is off.
pub(crate) struct CommTrace {
    on: Option<Box<CommState>>,
}

struct CommState {
    recorder: Arc<Recorder>,
    rank: Rank,
    envelope_tag: PhysTag,
    /// Messages sent per (destination, communicator, tag).
    sent: HashMap<(Rank, CommId, PhysTag), u64>,
    /// Receives posted or envelopes received per (source, communicator, tag).
    received: HashMap<(Rank, CommId, PhysTag), u64>,
    sends: HashMap<ReqId, Open>,
    receives: HashMap<ReqId, Open>,
    requests: HashMap<ReqId, Open>,
    records: Vec<Record>,
}

impl CommTrace {
    /// The progression thread's trace for `rank`, recording only when `recorder` is set.
    pub(crate) fn new(recorder: Option<Arc<Recorder>>, rank: Rank, envelope_tag: PhysTag) -> Self {
        Self {
            on: recorder.map(|recorder| {
                Box::new(CommState {
                    recorder,
                    rank,
                    envelope_tag,
                    sent: HashMap::new(),
                    received: HashMap::new(),
                    sends: HashMap::new(),
                    receives: HashMap::new(),
                    requests: HashMap::new(),
                    records: Vec::new(),
                })
            }),
        }
    }

    /// A send (`send`) or receive request `req` with `peer` and user tag `tag` was
    /// submitted to the engine.
    #[inline]
    pub(crate) fn request(&mut self, req: ReqId, send: bool, peer: Rank, tag: i64, bytes: u64) {
        if let Some(s) = &mut self.on {
            let what = What::Request {
                send,
                peer,
                tag,
                bytes,
                failed: false,
            };
            s.requests.insert(
                req,
                Open {
                    start: clock_ns(),
                    what,
                },
            );
        }
    }

    /// Request `req` finished (`ok`: successfully).
    #[inline]
    pub(crate) fn request_done(&mut self, req: ReqId, ok: bool) {
        if let Some(s) = &mut self.on {
            if let Some(mut open) = s.requests.remove(&req) {
                if let What::Request { failed, .. } = &mut open.what {
                    *failed = !ok;
                }
                s.close(open);
            }
        }
    }

    /// A message of `bytes` to `dest` on (`comm`, `tag`) is handed to the transport;
    /// with `token`, it completes when the transport reports that token sent
    /// ([`CommTrace::sent`]).
    #[inline]
    pub(crate) fn send(
        &mut self,
        dest: Rank,
        comm: CommId,
        tag: PhysTag,
        bytes: &[u8],
        token: Option<ReqId>,
    ) {
        let Some(s) = &mut self.on else {
            return;
        };
        let seq = bump(&mut s.sent, (dest, comm, tag));
        let envelope = (tag == s.envelope_tag).then(|| describe(bytes)).flatten();
        let message = Message {
            peer: dest,
            comm,
            tag,
            bytes: bytes.len() as u64,
            envelope,
            flow: flow_id(s.rank, dest, comm, tag, seq),
            seq,
        };
        let open = Open {
            start: clock_ns(),
            what: What::Sent(message),
        };
        match token {
            Some(t) => {
                s.sends.insert(t, open);
            }
            None => s.close(open),
        }
    }

    /// A receive from `source` on (`comm`, `tag`) is posted to the transport.
    #[inline]
    pub(crate) fn recv(&mut self, source: Rank, comm: CommId, tag: PhysTag, token: ReqId) {
        let Some(s) = &mut self.on else {
            return;
        };
        let seq = bump(&mut s.received, (source, comm, tag));
        let message = Message {
            peer: source,
            comm,
            tag,
            bytes: 0,
            envelope: None,
            flow: flow_id(source, s.rank, comm, tag, seq),
            seq,
        };
        s.receives.insert(
            token,
            Open {
                start: clock_ns(),
                what: What::Received(message),
            },
        );
    }

    /// The transport reports the send posted with `req` done.
    #[inline]
    pub(crate) fn sent(&mut self, req: ReqId) {
        let Some(s) = &mut self.on else {
            return;
        };
        if let Some(open) = s.sends.remove(&req) {
            s.close(open);
        }
    }

    /// The transport reports the receive posted with `req` done, with `len` bytes.
    #[inline]
    pub(crate) fn received(&mut self, req: ReqId, len: usize) {
        let Some(s) = &mut self.on else {
            return;
        };
        if let Some(mut open) = s.receives.remove(&req) {
            if let What::Received(m) = &mut open.what {
                m.bytes = len as u64;
            }
            s.close(open);
        }
    }

    /// The transport reports envelope `bytes` from `source` on `comm`.
    #[inline]
    pub(crate) fn envelope(&mut self, source: Rank, comm: CommId, bytes: &[u8]) {
        let Some(s) = &mut self.on else {
            return;
        };
        let tag = s.envelope_tag;
        let seq = bump(&mut s.received, (source, comm, tag));
        let message = Message {
            peer: source,
            comm,
            tag,
            bytes: bytes.len() as u64,
            envelope: describe(bytes),
            flow: flow_id(source, s.rank, comm, tag, seq),
            seq,
        };
        let now = clock_ns();
        s.records.push(Record {
            start: now,
            end: now,
            what: What::Received(message),
        });
    }
}

impl CommState {
    fn close(&mut self, open: Open) {
        self.records.push(Record {
            start: open.start,
            end: clock_ns(),
            what: open.what,
        });
    }
}

impl Drop for CommTrace {
    fn drop(&mut self) {
        if let Some(s) = &mut self.on {
            // Requests and messages still open at the end are shown up to now.
            let open: Vec<Open> = s
                .requests
                .drain()
                .chain(s.sends.drain())
                .chain(s.receives.drain())
                .map(|(_, o)| o)
                .collect();
            for o in open {
                s.close(o);
            }
            s.recorder.absorb(&mut s.records);
        }
    }
}

/// The next number of key `k`.
fn bump<K: core::hash::Hash + Eq>(counts: &mut HashMap<K, u64>, k: K) -> u64 {
    let n = counts.entry(k).or_insert(0);
    let seq = *n;
    *n += 1;
    seq
}

/// An envelope message's kind and user tag.
fn describe(bytes: &[u8]) -> Option<(&'static str, i64)> {
    envelope::decode(bytes)
        .ok()
        .map(|d| (d.envelope.kind.name(), d.envelope.tag.0))
}

/// Assigns each slice of `slices` (start, end) the first lane free at its start; returns
/// the lanes, in the order of `slices`.
fn lanes(slices: &[(u64, u64)]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..slices.len()).collect();
    order.sort_by_key(|&i| slices[i]);
    let mut ends: Vec<u64> = Vec::new();
    let mut out = vec![0; slices.len()];
    for i in order {
        let (start, end) = slices[i];
        let lane = match ends.iter().position(|&e| e <= start) {
            Some(l) => l,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[lane] = end;
        out[i] = lane as u32;
    }
    out
}

/// The shortest slice drawn, in ns: an instant (an envelope's arrival) still gets a
/// slice that a flow arrow can bind to.
const MIN_SLICE_NS: u64 = 100;

/// Writes `ns` as microseconds with 3 decimals.
fn us(out: &mut String, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

/// Writes `s` as a JSON string.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The JSON trace of rank `rank`: one event per line.
fn render(rank: Rank, size: u32, mut records: Vec<Record>, offset_ns: i64) -> String {
    let pid = rank.0;
    for r in &mut records {
        r.end = r.end.max(r.start + MIN_SLICE_NS);
    }
    // Lanes: overlapping requests and messages go to separate tracks.
    let mut tids = vec![0u32; records.len()];
    for (base, pick) in [
        (
            track::REQUESTS,
            (|w: &What| matches!(w, What::Request { .. })) as fn(&What) -> bool,
        ),
        (track::SENDS, |w| matches!(w, What::Sent(_))),
        (track::RECEIVES, |w| matches!(w, What::Received(_))),
    ] {
        let idx: Vec<usize> = (0..records.len())
            .filter(|&i| pick(&records[i].what))
            .collect();
        let spans: Vec<(u64, u64)> = idx
            .iter()
            .map(|&i| (records[i].start, records[i].end))
            .collect();
        for (i, lane) in idx.into_iter().zip(lanes(&spans)) {
            tids[i] = base + lane;
        }
    }
    for (i, r) in records.iter().enumerate() {
        match &r.what {
            What::Task { worker, .. } => tids[i] = track::WORKER + worker,
            What::Wait(_) => tids[i] = track::APPLICATION,
            _ => {}
        }
    }
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| (records[i].start, i));

    let mut out = String::with_capacity(128 * (records.len() + 8));
    out.push_str("{\"traceEvents\":[\n");
    let _ = write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"rank {pid}\"}}}},\n\
         {{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"tid\":0,\"args\":{{\"sort_index\":{pid}}}}}"
    );
    let mut named: Vec<u32> = tids.clone();
    named.push(track::APPLICATION);
    named.sort_unstable();
    named.dedup();
    for tid in named {
        let name = match tid {
            track::APPLICATION => "application".to_owned(),
            t if t >= track::RECEIVES => format!("receives {}", t - track::RECEIVES),
            t if t >= track::SENDS => format!("sends {}", t - track::SENDS),
            t if t >= track::REQUESTS => format!("requests {}", t - track::REQUESTS),
            t if t >= track::WORKER + track::DEVICES => {
                format!("device {}", t - track::WORKER - track::DEVICES)
            }
            t => format!("worker {}", t - track::WORKER),
        };
        let _ = write!(
            out,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{name}\"}}}},\n\
             {{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
        );
    }
    for i in order {
        let r = &records[i];
        let tid = tids[i];
        out.push_str(",\n{\"ph\":\"X\",\"name\":");
        match &r.what {
            What::Task { codelet, .. } => {
                json_str(&mut out, codelet);
                out.push_str(",\"cat\":\"task\"");
            }
            What::Wait(what) => {
                json_str(&mut out, what);
                out.push_str(",\"cat\":\"wait\"");
            }
            What::Request { send, peer, .. } => {
                let name = if *send {
                    format!("send to {}", peer.0)
                } else {
                    format!("recv from {}", peer.0)
                };
                json_str(&mut out, &name);
                out.push_str(",\"cat\":\"request\"");
            }
            What::Sent(m) | What::Received(m) => {
                let dir = if matches!(r.what, What::Sent(_)) {
                    "to"
                } else {
                    "from"
                };
                let name = match m.envelope {
                    Some((kind, _)) => format!("{kind} envelope {dir} {}", m.peer.0),
                    None => format!("payload {dir} {}", m.peer.0),
                };
                json_str(&mut out, &name);
                out.push_str(",\"cat\":\"message\"");
            }
        }
        let _ = write!(out, ",\"pid\":{pid},\"tid\":{tid},\"ts\":");
        us(&mut out, r.start);
        out.push_str(",\"dur\":");
        us(&mut out, r.end - r.start);
        out.push_str(",\"args\":{");
        match &r.what {
            What::Task {
                worker, expected, ..
            } => {
                // Which worker ran it, and (`dmda`) the expected against the measured time.
                if *worker >= track::DEVICES {
                    let _ = write!(
                        out,
                        "\"device\":{},\"measured_us\":",
                        worker - track::DEVICES
                    );
                } else {
                    let _ = write!(out, "\"worker\":{worker},\"measured_us\":");
                }
                us(&mut out, r.end - r.start);
                if let Some(e) = expected {
                    let _ = write!(out, ",\"expected_us\":{:.3}", e * 1e6);
                }
            }
            What::Wait(_) => {}
            What::Request {
                tag, bytes, failed, ..
            } => {
                let _ = write!(out, "\"tag\":{tag},\"bytes\":{bytes},\"failed\":{failed}");
            }
            What::Sent(m) | What::Received(m) => {
                let (source, dest) = if matches!(r.what, What::Sent(_)) {
                    (rank, m.peer)
                } else {
                    (m.peer, rank)
                };
                let _ = write!(
                    out,
                    "\"source\":{},\"dest\":{},\"comm\":{},\"physical_tag\":{},\"seq\":{},\"bytes\":{},\"flow\":{}",
                    source.0, dest.0, m.comm.0, m.tag.0, m.seq, m.bytes, m.flow
                );
                if let Some((_, tag)) = m.envelope {
                    let _ = write!(out, ",\"tag\":{tag}");
                }
            }
        }
        out.push_str("}}");
        // The flow arrow: from the middle of the send to the middle of the receipt.
        if let What::Sent(m) | What::Received(m) = &r.what {
            let (ph, bp) = if matches!(r.what, What::Sent(_)) {
                ("s", "")
            } else {
                ("f", ",\"bp\":\"e\"")
            };
            let _ = write!(
                out,
                ",\n{{\"ph\":\"{ph}\"{bp},\"name\":\"message\",\"cat\":\"message\",\"id\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":",
                m.flow
            );
            us(&mut out, r.start + (r.end - r.start) / 2);
            out.push('}');
        }
    }
    out.push_str("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{");
    let _ = write!(
        out,
        "\"starling_trace\":1,\"rank\":{},\"size\":{size},\"clock_offset_us\":",
        rank.0
    );
    let sign = if offset_ns < 0 { "-" } else { "" };
    out.push_str(sign);
    us(&mut out, offset_ns.unsigned_abs());
    out.push_str("}}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_slices_take_separate_lanes_and_reuse_freed_ones() {
        let l = lanes(&[(0, 10), (5, 15), (10, 20), (16, 30), (0, 1)]);
        // (0,1) and (0,10) overlap: two lanes from the start; (5,15) needs a third.
        assert_eq!(l.len(), 5);
        let spans = [(0u64, 10u64), (5, 15), (10, 20), (16, 30), (0, 1)];
        for i in 0..spans.len() {
            for j in 0..i {
                let overlap = spans[i].0 < spans[j].1 && spans[j].0 < spans[i].1;
                if overlap {
                    assert_ne!(l[i], l[j], "{:?} and {:?} share a lane", spans[i], spans[j]);
                }
            }
        }
        assert!(l.iter().all(|&x| x < 3), "{l:?}");
    }

    #[test]
    fn both_sides_of_a_message_compute_the_same_flow_id() {
        let a = flow_id(Rank(0), Rank(1), CommId(0), PhysTag(43), 7);
        assert_eq!(a, flow_id(Rank(0), Rank(1), CommId(0), PhysTag(43), 7));
        assert_ne!(a, flow_id(Rank(1), Rank(0), CommId(0), PhysTag(43), 7));
        assert_ne!(a, flow_id(Rank(0), Rank(1), CommId(0), PhysTag(43), 8));
        assert!(a < 1 << 53);
    }

    #[test]
    fn a_rendered_trace_names_its_tracks_and_escapes_names() {
        let records = vec![Record {
            start: 1_500,
            end: 4_000,
            what: What::Task {
                worker: 0,
                codelet: Arc::from("say \"hi\"\n"),
                expected: Some(2.0e-6),
            },
        }];
        let json = render(Rank(3), 4, records, -2_500);
        assert!(json.contains("\"name\":\"say \\\"hi\\\"\\n\""), "{json}");
        assert!(json.contains("\"ts\":1.500,\"dur\":2.500"), "{json}");
        assert!(json.contains("\"name\":\"worker 0\""), "{json}");
        assert!(
            json.contains("\"args\":{\"worker\":0,\"measured_us\":2.500,\"expected_us\":2.000}"),
            "{json}"
        );
        assert!(json.contains("\"clock_offset_us\":-2.500"), "{json}");
        assert!(json.contains("\"pid\":3"), "{json}");
    }

    #[test]
    fn a_trace_is_written_next_to_the_configured_path() {
        assert_eq!(
            rank_file(Path::new("/x/run"), 2),
            Path::new("/x/run.rank2.json")
        );
        let dir = std::env::temp_dir();
        assert_eq!(rank_file(&dir, 0), dir.join("rank0.json"));
    }
}
