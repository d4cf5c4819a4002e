//! The graph-agreement check: do all ranks walk the same task flow?
//!
//! The insert-task utility needs every rank to submit the same inserts in the same order
//! (`docs/protocol.md` §10). When a rank's flow differs, nothing fails where the flows
//! part: the ranks' plans stop pairing up, and the job hangs or computes garbage later.
//! With the check on ([`crate::RankConfig::check_agreement`], `STARLING_CHECK_AGREEMENT`;
//! on by default in debug builds), every rank folds each insert — codelet name, accesses
//! (mode, tag and owner of each datum), options and the executor chosen — and each
//! registration with an automatic tag ([`AUTO_TAGS`]; its interface, tag and owner, kept
//! as an insert named `register <interface>`) into a running
//! digest ([`starling_core::digest`]) and keeps the last [`RING`] inserts. At
//! [`Context::mpi_wait_for_all`](crate::Context::mpi_wait_for_all), at [`Context::barrier`](crate::Context::barrier) and on demand
//! ([`Context::check_agreement`](crate::Context::check_agreement)) the ranks exchange their insert count and digest; on a
//! mismatch they exchange their kept inserts and every rank gets the same
//! [`Divergence`]: the first insert where they differ and what each rank saw there.
//! From then on every insert and check fails with it: the ranks stop instead of hanging.
//!
//! The exchange is an all-gather: on the in-process cluster through shared memory (no
//! message, so statistics and early-data counts are untouched); over any other transport
//! (MPI) through the runtime's own point-to-point requests on reserved negative tags
//! ([`GATHER_TAG`], [`BCAST_TAG`]), with synchronous sends (no early data), gathered at
//! rank 0 and broadcast back.

use core::fmt::Write as _;
use std::collections::HashMap;

use starling_core::digest::{DigestAccess, chain, insert_digest};
use starling_core::insert::{Execute, Executor, Options};
use starling_core::{AccessMode, Owner, Tag};

use crate::error::CommError;
use crate::runtime::data::DataError;
use crate::runtime::data::blob;
use crate::sync::{Arc, Condvar, Mutex, Ordering, lock};
use crate::tools::hang::{Waiting, stalled};

/// How many inserts each rank keeps to name the first divergent one.
pub const RING: usize = 1024;

pub use crate::tags::{AUTO_TAGS, RESERVED_TAGS};

/// The name under which the agreement check records a registration with an automatic
/// tag of an `interface` (the flows of all ranks must register the same interfaces, with
/// the same owners, in the same order).
pub(crate) fn registration_name(interface: &str) -> String {
    format!("register {interface}")
}

pub use crate::tags::{BCAST_TAG, GATHER_TAG};

/// The longest description of an insert kept for a report.
const DESCRIPTION_MAX: usize = 240;
/// The largest agreement message accepted (a ring of [`RING`] described inserts fits).
const MESSAGE_MAX: usize = 1 << 20;

/// What a reserved tag is for, in a hang explanation.
pub(crate) fn internal_tag_name(tag: Tag) -> Option<&'static str> {
    match tag {
        GATHER_TAG => Some("the agreement check's message to rank 0"),
        BCAST_TAG => Some("the agreement check's answer from rank 0"),
        _ => None,
    }
}

/// The ranks' task flows differ: the first insert where they do, and what each saw.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Divergence {
    /// The first insert (numbered from 1 on every rank, registrations with an automatic
    /// tag counted as inserts) where the ranks' flows differ;
    /// `None` when it is older than the last [`RING`] inserts the ranks keep.
    pub insert: Option<u64>,
    /// What each rank saw at that insert, indexed by rank.
    pub seen: Vec<String>,
    /// Where the check ran: `"barrier"`, `"mpi_wait_for_all"`, `"check_agreement"`.
    pub at: String,
    /// The whole report, in one paragraph.
    pub message: String,
}

/// How many accesses of an insert are kept to describe it.
const KEPT_ACCESSES: usize = 8;
/// The most distinct codelet names kept to describe inserts.
const NAMES_MAX: usize = 1 << 16;

/// One kept access: its tag and mode, and its owner (`u32::MAX`: per node; `u32::MAX -
/// 1`: a temporary datum, tag unknown).
#[derive(Clone, Copy)]
struct Kept {
    tag: i64,
    owner: u32,
    mode: AccessMode,
}

const PER_NODE: u32 = u32::MAX;
const TEMPORARY: u32 = u32::MAX - 1;

/// One kept insert: compact and inline (the ring is written at every insert, so it is
/// kept small and allocation-free once full).
struct Entry {
    index: u64,
    digest: u64,
    running: u64,
    /// Index into [`Agreement::names`]; `u32::MAX` when the table was full.
    name: u32,
    /// The first accesses; `kept` of them are set.
    accesses: [Kept; KEPT_ACCESSES],
    kept: u8,
    /// Accesses beyond the kept ones.
    more: u32,
    options: Options,
    executor: Option<Executor>,
}

/// A rank's side of the check (inside the insert-task state).
pub(crate) struct Agreement {
    pub(crate) enabled: bool,
    count: u64,
    running: u64,
    /// The insert count at the last check where every rank agreed.
    agreed: u64,
    ring: Vec<Entry>,
    /// The slot the next insert overwrites once the ring is full.
    head: usize,
    /// Set once a check found a divergence: every later insert fails with it.
    pub(crate) diverged: Option<Box<Divergence>>,
    /// All-gathers done (every rank does the same ones).
    round: u64,
    /// The in-process cluster's shared board; `None`: point-to-point messages.
    pub(crate) board: Option<Arc<Board>>,
    /// Codelet names of kept inserts, and their index.
    names: Vec<String>,
    name_index: HashMap<String, u32>,
    /// The name of the last insert (the common case: the same codelet again).
    last_name: u32,
}

impl Agreement {
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            count: 0,
            running: 0,
            agreed: 0,
            ring: Vec::new(),
            head: 0,
            diverged: None,
            round: 0,
            board: None,
            names: Vec::new(),
            name_index: HashMap::new(),
            last_name: u32::MAX,
        }
    }

    /// The index of codelet name `name` in the names table.
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(n) = self.names.get(self.last_name as usize) {
            if n == name {
                return self.last_name;
            }
        }
        let i = match self.name_index.get(name) {
            Some(&i) => i,
            None if self.names.len() < NAMES_MAX => {
                let i = self.names.len() as u32;
                self.names.push(name.to_owned());
                self.name_index.insert(name.to_owned(), i);
                i
            }
            None => return u32::MAX,
        };
        self.last_name = i;
        i
    }

    /// Folds one insert of codelet `name` into the running digest and keeps it.
    /// `accesses` are the insert's accesses in order: `None` for a temporary datum
    /// (`access_opt`), else its tag and owner.
    pub(crate) fn record(
        &mut self,
        name: &str,
        accesses: impl Iterator<Item = (Option<(Tag, Owner)>, AccessMode)> + Clone,
        options: &Options,
        executor: Option<Executor>,
    ) {
        let temporary = accesses.clone().any(|(a, _)| a.is_none());
        // Ranks that do not know a temporary datum cannot compute an executor that
        // depends on it.
        let executor = if temporary && options.execute == Execute::Auto {
            None
        } else {
            executor
        };
        let digest = insert_digest(
            name.as_bytes(),
            accesses.clone().map(|(a, mode)| match a {
                Some((tag, owner)) => DigestAccess::Datum { mode, tag, owner },
                None => DigestAccess::Temporary { mode },
            }),
            options,
            executor,
        );
        self.count += 1;
        self.running = chain(self.running, self.count, digest);
        let name = self.intern(name);
        let mut kept = [Kept {
            tag: 0,
            owner: 0,
            mode: AccessMode::empty(),
        }; KEPT_ACCESSES];
        let mut n = 0;
        let mut more = 0;
        for (a, mode) in accesses {
            let (tag, owner) = match a {
                Some((tag, Owner::Rank(r))) => (tag.0, r.0),
                Some((tag, Owner::PerNode)) => (tag.0, PER_NODE),
                None => (0, TEMPORARY),
            };
            match kept.get_mut(n) {
                Some(k) => {
                    *k = Kept { tag, owner, mode };
                    n += 1;
                }
                None => more += 1,
            }
        }
        let entry = Entry {
            index: self.count,
            digest,
            running: self.running,
            name,
            accesses: kept,
            kept: n as u8,
            more,
            options: *options,
            executor,
        };
        if self.ring.len() < RING {
            self.ring.push(entry);
        } else {
            self.ring[self.head] = entry;
            self.head = (self.head + 1) % RING;
        }
    }

    /// The kept inserts after the last agreed one, oldest first, serialised.
    fn ring_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, self.count);
        put(&mut out, self.running);
        put(&mut out, self.agreed);
        let (a, b) = self.ring.split_at(self.head.min(self.ring.len()));
        for e in b.iter().chain(a).filter(|e| e.index > self.agreed) {
            put(&mut out, e.index);
            put(&mut out, e.digest);
            put(&mut out, e.running);
            let mut d = describe(e, &self.names);
            if d.len() > DESCRIPTION_MAX {
                let mut cut = DESCRIPTION_MAX;
                while !d.is_char_boundary(cut) {
                    cut -= 1;
                }
                d.truncate(cut);
                d.push('…');
            }
            out.extend_from_slice(&(d.len() as u32).to_le_bytes());
            out.extend_from_slice(d.as_bytes());
        }
        out
    }
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A mode as the reference writes it: R, W, RW, with its extra flags.
fn mode_text(mode: AccessMode) -> String {
    let mut s = String::from(match (mode.reads(), mode.contains(AccessMode::W)) {
        (true, true) => "RW",
        (true, false) => "R",
        (false, true) => "W",
        (false, false) => "",
    });
    for (flag, name) in [
        (AccessMode::SCRATCH, "SCRATCH"),
        (AccessMode::REDUX, "REDUX"),
        (AccessMode::COMMUTE, "COMMUTE"),
        (AccessMode::SSEND, "SSEND"),
    ] {
        if mode.contains(flag) {
            if !s.is_empty() {
                s.push('|');
            }
            s.push_str(name);
        }
    }
    s
}

/// An insert in one line: `gemm(tag 1 R of rank 0, tag 3 RW of rank 1) on rank 1`.
fn describe(e: &Entry, names: &[String]) -> String {
    let name = names
        .get(e.name as usize)
        .map_or("<codelet>", String::as_str);
    let mut s = format!("{name}(");
    for (i, k) in e.accesses[..usize::from(e.kept)].iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let mode = mode_text(k.mode);
        let _ = match k.owner {
            TEMPORARY => write!(s, "temporary {mode}"),
            PER_NODE => write!(s, "tag {} {mode} per node", k.tag),
            r => write!(s, "tag {} {mode} of rank {r}", k.tag),
        };
    }
    if e.more > 0 {
        let _ = write!(s, ", … {} more", e.more);
    }
    s.push(')');
    match e.executor {
        Some(Executor::Rank(r)) => {
            let _ = write!(s, " on rank {}", r.0);
        }
        Some(Executor::PerNode) => s.push_str(" on every rank"),
        None => {}
    }
    let mut opts = Vec::new();
    match e.options.execute {
        Execute::Auto => {}
        Execute::OnNode(r) => opts.push(format!("on_node {}", r.0)),
        Execute::OnData(i) => opts.push(format!("on_data {i}")),
    }
    if let Some(p) = e.options.policy {
        opts.push(format!("policy {}", p.0));
    }
    if e.options.priority.0 != 0 {
        opts.push(format!("priority {}", e.options.priority.0));
    }
    if e.options.ssend {
        opts.push("ssend".to_owned());
    }
    if !opts.is_empty() {
        let _ = write!(s, " [{}]", opts.join(", "));
    }
    s
}

// ----- what a rank sends ---------------------------------------------------------------

/// A rank's kept inserts, read back from its message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RankRing {
    pub(crate) count: u64,
    pub(crate) running: u64,
    pub(crate) agreed: u64,
    /// (index, digest, running digest, description), oldest first.
    pub(crate) items: Vec<(u64, u64, u64, String)>,
}

/// Reads a little-endian `u64` at `*at`, advancing; `None` past the end.
fn take_u64(b: &[u8], at: &mut usize) -> Option<u64> {
    let s = b.get(*at..*at + 8)?;
    *at += 8;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

fn take_u32(b: &[u8], at: &mut usize) -> Option<u32> {
    let s = b.get(*at..*at + 4)?;
    *at += 4;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

impl RankRing {
    /// Reads a rank's message (total: `None` for anything malformed).
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let mut at = 0;
        let mut r = Self {
            count: take_u64(b, &mut at)?,
            running: take_u64(b, &mut at)?,
            agreed: take_u64(b, &mut at)?,
            items: Vec::new(),
        };
        while at < b.len() {
            let index = take_u64(b, &mut at)?;
            let digest = take_u64(b, &mut at)?;
            let running = take_u64(b, &mut at)?;
            let len = take_u32(b, &mut at)? as usize;
            let text = b.get(at..at.checked_add(len)?)?;
            at += len;
            r.items.push((
                index,
                digest,
                running,
                String::from_utf8_lossy(text).into_owned(),
            ));
        }
        Some(r)
    }
}

fn ranks_text(ranks: &[usize]) -> String {
    let v: Vec<String> = ranks.iter().map(usize::to_string).collect();
    if v.len() == 1 {
        format!("rank {}", v[0])
    } else {
        format!("ranks {}", v.join(", "))
    }
}

/// Compares the ranks' kept inserts (indexed by rank) and names the first insert where
/// they differ. Every rank computes it from the same rings, so every rank gets the same.
pub(crate) fn compare(at: &str, rings: &[RankRing]) -> Divergence {
    let agreed = rings.iter().map(|r| r.agreed).max().unwrap_or(0);
    let max_count = rings.iter().map(|r| r.count).max().unwrap_or(0);
    let oldest = |r: &RankRing| r.items.first().map_or(r.count + 1, |i| i.0);
    let lo = rings.iter().map(oldest).max().unwrap_or(1).max(agreed + 1);
    fn item(r: &RankRing, i: u64) -> Option<&(u64, u64, u64, String)> {
        r.items.iter().find(|x| x.0 == i)
    }
    let mut first = None;
    let mut before_window = false;
    for i in lo..=max_count {
        let here: Vec<Option<&(u64, u64, u64, String)>> =
            rings.iter().map(|r| item(r, i)).collect();
        let digests: Vec<Option<u64>> = here.iter().map(|x| x.map(|x| x.1)).collect();
        if digests.iter().any(|d| *d != digests[0]) {
            first = Some(i);
            break;
        }
        let runs: Vec<Option<u64>> = here.iter().map(|x| x.map(|x| x.2)).collect();
        if runs.iter().any(|d| *d != runs[0]) {
            // The same insert here, different histories: they parted earlier.
            before_window = true;
            break;
        }
    }
    let counts: Vec<String> = rings
        .iter()
        .enumerate()
        .map(|(r, x)| format!("rank {r}: {}", x.count))
        .collect();
    let Some(i) = first.filter(|_| !before_window) else {
        let message = format!(
            "the ranks' task flows diverged before insert #{lo} (at {at}): the ranks keep only \
             their last {RING} inserts, and they agreed up to insert #{agreed}; inserts so far: {}",
            counts.join(", ")
        );
        return Divergence {
            insert: None,
            seen: Vec::new(),
            at: at.to_owned(),
            message,
        };
    };
    let seen: Vec<String> = rings
        .iter()
        .map(|r| match item(r, i) {
            Some(x) => x.3.clone(),
            None if r.count < i => format!("no insert #{i} (its flow has {} inserts)", r.count),
            None => format!("insert #{i} not kept"),
        })
        .collect();
    // Group the ranks that saw the same thing, in rank order of first appearance.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (r, s) in seen.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == *s) {
            Some(g) => g.1.push(r),
            None => groups.push((s.clone(), vec![r])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(s, rs)| {
            let verb = if s.starts_with("no insert") || s.starts_with("insert #") {
                "has"
            } else {
                "saw"
            };
            format!("{} {verb} {s}", ranks_text(rs))
        })
        .collect();
    let message = format!(
        "the ranks' task flows diverged at insert #{i} (found at {at}; they agreed up to insert \
         #{agreed}): {}",
        parts.join("; ")
    );
    Divergence {
        insert: Some(i),
        seen,
        at: at.to_owned(),
        message,
    }
}

/// One all-gather on the board: each rank's bytes, and how many ranks took them.
type Round = (Vec<Option<Arc<Vec<u8>>>>, usize);

/// The in-process cluster's all-gather: every rank posts its bytes on a shared board.
pub(crate) struct Board {
    size: usize,
    /// Per round: each rank's bytes, and how many ranks took the round's result.
    rounds: Mutex<HashMap<u64, Round>>,
    cv: Condvar,
}

impl Board {
    pub(crate) fn new(size: u32) -> Self {
        Self {
            size: size as usize,
            rounds: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
        }
    }
}

/// Frames several byte strings into one.
fn frame(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (parts.len() as u32).to_le_bytes().to_vec();
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// Reads [`frame`]'s output (total: `None` for anything malformed).
fn unframe(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut at = 0;
    let n = take_u32(b, &mut at)? as usize;
    let mut parts = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        let len = take_u32(b, &mut at)? as usize;
        parts.push(b.get(at..at.checked_add(len)?)?.to_vec());
        at += len;
    }
    (at == b.len()).then_some(parts)
}

mod exchange;

#[cfg(test)]
mod tests;
