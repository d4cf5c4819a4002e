//! The hang explainer: what each rank is waiting for, and why nothing moves.
//!
//! A distributed program that hangs usually does so because one rank waits for a message
//! another rank never sends: a tag typed differently, a branch taken on one rank only, a
//! missing insert. Each rank only sees its own side. Starling keeps, per rank, every
//! request it has not finished — point-to-point requests, the transfers of inserts,
//! barriers, agreement checks — with its peer, tag, handle, stage and age; a **watchdog**
//! notices when nothing has progressed for a while, each rank writes its [`RankReport`],
//! and [`explain`] merges the ranks' reports into one explanation:
//!
//! ```text
//! rank 0 waits for tag 17 from rank 1 (into data 0, for 1.0 s); rank 1 never sent it:
//! it is itself waiting for tag 5 from rank 0
//! deadlock: rank 0 waits for rank 1, which waits for rank 0
//! ```
//!
//! Where it runs:
//!
//! * on the in-process cluster ([`crate::run_local_with`]), one watchdog watches every
//!   rank ([`crate::ClusterConfig::watchdog`], `STARLING_WATCHDOG_SECS`): it fires when
//!   nothing has moved anywhere for that long while requests are pending, merges the
//!   reports directly, prints the explanation, and **abandons** the pending requests:
//!   they fail with [`CommError::Stalled`] carrying the explanation, so blocking calls
//!   return instead of hanging, and `run_local_with` returns it in its
//!   [`ShutdownError`](crate::ShutdownError);
//! * under MPI (`starling-mpi`), each process watches its own rank, writes its report as
//!   text ([`RankReport::to_text`]) into a shared directory and merges the files it
//!   finds ([`RankReport::parse`], [`explain`]): files, because a hung peer may not
//!   answer a collective.
//!
//! [`explain`] is a pure function of the reports; it pairs each pending receive with the
//! peer's pending sends and says which side is missing, follows chains of waits and names
//! cycles. It sees what waits outside a rank's engine too: a message that arrived and
//! waits at its receiver (refused for a full table: [`Orphan::refused`]; or early data)
//! is never blamed on its sender and makes no wait, a submission waiting for room is
//! [`Stage::Queued`], and a rank in the closing barrier of shutdown
//! ([`Waiting::Shutdown`]) waits for no one.
//!
//! A report leads with its cause: beyond [`LIKE`] findings alike (the same ranks, the same
//! kind of cause), [`explain`] gives a line of counts, then each group's count, first and
//! last; [`explain_and_keep`] (which the watchdogs use) writes every finding to a file in
//! `STARLING_HANG_DIR` or the temporary directory and names it.

use core::fmt::{self, Write as _};
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use starling_core::request::State;
use starling_core::{CommId, DataId, Rank, Tag};

use crate::error::CommError;

mod track;

pub(crate) use track::Tracker;
pub use track::{Activity, Probe, Watchdog};

/// What a pending item of a rank is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Waiting {
    /// A send to [`Pending::peer`].
    Send,
    /// A receive from [`Pending::peer`].
    Recv,
    /// A barrier ([`crate::Context::barrier`]); it waits for every rank.
    Barrier,
    /// A graph-agreement check; it waits for every rank.
    Check,
    /// The closing barrier of a rank that finished its work
    /// ([`crate::Context::closing_barrier`]): it waits for no message, so it is no wait
    /// *between* ranks (no deadlock goes through it); a rank whose receive waits for a
    /// rank at shutdown waits for a message that will never be sent.
    Shutdown,
}

impl Waiting {
    const fn word(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Recv => "recv",
            Self::Barrier => "barrier",
            Self::Check => "check",
            Self::Shutdown => "shutdown",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "send" => Self::Send,
            "recv" => Self::Recv,
            "barrier" => Self::Barrier,
            "check" => Self::Check,
            "shutdown" => Self::Shutdown,
            _ => return None,
        })
    }
}

/// How far a pending request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// Submitted, but earlier accesses to its handle are not done yet (a send waits for
    /// the task or receive that produces its value).
    WaitingForData,
    /// Handed to the rank's progression thread; the engine had not reported on it.
    Posted,
    /// Handed to the rank's progression thread, which keeps it until the engine's tables
    /// have room for it (a full table is a wait: it goes in, in order, when room frees).
    Queued,
    /// In the protocol engine, in this state.
    Engine(State),
}

impl Stage {
    const fn word(self) -> &'static str {
        match self {
            Self::WaitingForData => "waiting-for-data",
            Self::Posted => "posted",
            Self::Queued => "queued",
            Self::Engine(State::Created) => "created",
            Self::Engine(State::Ready) => "ready",
            Self::Engine(State::AwaitingEnvelope) => "awaiting-envelope",
            Self::Engine(State::AwaitingReady) => "awaiting-ready",
            Self::Engine(State::Transferring) => "transferring",
            Self::Engine(State::Completed) => "completed",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "waiting-for-data" => Self::WaitingForData,
            "posted" => Self::Posted,
            "queued" => Self::Queued,
            "created" => Self::Engine(State::Created),
            "ready" => Self::Engine(State::Ready),
            "awaiting-envelope" => Self::Engine(State::AwaitingEnvelope),
            "awaiting-ready" => Self::Engine(State::AwaitingReady),
            "transferring" => Self::Engine(State::Transferring),
            "completed" => Self::Engine(State::Completed),
            _ => return None,
        })
    }
}

/// One request (or collective) a rank has not finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// What it is.
    pub kind: Waiting,
    /// The destination of a send, the source of a receive; this rank for a collective.
    pub peer: Rank,
    /// The communicator.
    pub comm: CommId,
    /// The user tag (0 for a collective).
    pub tag: Tag,
    /// The handle sent or received into, if any.
    pub data: Option<DataId>,
    /// How far it got.
    pub stage: Stage,
    /// How long ago it was submitted.
    pub age: Duration,
}

/// A message that arrived on a rank and that no receive took (yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// Its sender.
    pub source: Rank,
    /// Its communicator.
    pub comm: CommId,
    /// Its user tag.
    pub tag: Tag,
    /// Its payload size in bytes.
    pub size: u64,
    /// Whether the engine refused its envelope for a full table: the progression thread
    /// keeps it, in order with its key, until its receive is posted or room frees
    /// (otherwise the engine holds it as early data).
    pub refused: bool,
}

/// What one rank reports when the watchdog fires: its pending requests and the messages
/// it holds that no receive took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankReport {
    /// The rank.
    pub rank: Rank,
    /// The number of ranks of the job.
    pub size: u32,
    /// Its pending requests and collectives, oldest first.
    pub pending: Vec<Pending>,
    /// Messages it received that no receive took.
    pub orphans: Vec<Orphan>,
}

/// The first line of a report's text form.
const HEADER: &str = "starling hang report v1";

/// Why a report's text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("hang report, line {line}: {why}")]
pub struct ReportError {
    /// The line (from 1) that could not be read.
    pub line: usize,
    /// What was wrong with it.
    pub why: String,
}

impl RankReport {
    /// The report as text, one item per line: what [`RankReport::parse`] reads back
    /// (the file each MPI rank writes when its watchdog fires).
    pub fn to_text(&self) -> String {
        let mut s = format!("{HEADER}\nrank {} size {}\n", self.rank.0, self.size);
        for p in &self.pending {
            let _ = writeln!(
                s,
                "pending {} peer={} comm={} tag={} data={} stage={} age_ms={}",
                p.kind.word(),
                p.peer.0,
                p.comm.0,
                p.tag.0,
                p.data.map_or_else(|| "-".to_owned(), |d| d.0.to_string()),
                p.stage.word(),
                p.age.as_millis()
            );
        }
        for o in &self.orphans {
            let _ = writeln!(
                s,
                "orphan source={} comm={} tag={} size={} refused={}",
                o.source.0,
                o.comm.0,
                o.tag.0,
                o.size,
                u8::from(o.refused)
            );
        }
        s.push_str("end\n");
        s
    }

    /// Reads a report written by [`RankReport::to_text`]. Total: any text gives a report
    /// or an error, never a panic.
    ///
    /// # Errors
    /// [`ReportError`] naming the first line that is not part of a report, or a missing
    /// `end` line (a truncated file).
    pub fn parse(text: &str) -> Result<Self, ReportError> {
        let err = |line: usize, why: &str| ReportError {
            line,
            why: why.to_owned(),
        };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        match lines.next() {
            Some((_, HEADER)) => {}
            _ => return Err(err(1, "not a Starling hang report")),
        }
        let (n, head) = lines.next().ok_or_else(|| err(2, "no rank line"))?;
        let words: Vec<&str> = head.split_whitespace().collect();
        let (rank, size) = match words.as_slice() {
            ["rank", r, "size", s] => (
                r.parse().map_err(|_| err(n, "bad rank"))?,
                s.parse().map_err(|_| err(n, "bad size"))?,
            ),
            _ => return Err(err(n, "expected `rank R size N`")),
        };
        let mut report = Self {
            rank: Rank(rank),
            size,
            ..Self::default()
        };
        for (n, line) in lines {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("end") => return Ok(report),
                Some("pending") => {
                    let kind = words
                        .next()
                        .and_then(Waiting::from_word)
                        .ok_or_else(|| err(n, "bad pending kind"))?;
                    let f = fields(words, n)?;
                    report.pending.push(Pending {
                        kind,
                        peer: Rank(number(&f, "peer", n)?),
                        comm: CommId(number(&f, "comm", n)?),
                        tag: Tag(number(&f, "tag", n)?),
                        data: match field(&f, "data", n)? {
                            "-" => None,
                            d => Some(DataId(d.parse().map_err(|_| err(n, "bad data"))?)),
                        },
                        stage: Stage::from_word(field(&f, "stage", n)?)
                            .ok_or_else(|| err(n, "bad stage"))?,
                        age: Duration::from_millis(number(&f, "age_ms", n)?),
                    });
                }
                Some("orphan") => {
                    let f = fields(words, n)?;
                    report.orphans.push(Orphan {
                        source: Rank(number(&f, "source", n)?),
                        comm: CommId(number(&f, "comm", n)?),
                        tag: Tag(number(&f, "tag", n)?),
                        size: number(&f, "size", n)?,
                        // (absent from reports written before it was added)
                        refused: f.get("refused").is_some_and(|v| *v == "1"),
                    });
                }
                None => {}
                Some(_) => return Err(err(n, "unknown line")),
            }
        }
        Err(err(0, "no `end` line: the report is truncated"))
    }
}

fn fields<'a>(
    words: impl Iterator<Item = &'a str>,
    line: usize,
) -> Result<BTreeMap<&'a str, &'a str>, ReportError> {
    words
        .map(|w| {
            w.split_once('=').ok_or_else(|| ReportError {
                line,
                why: format!("`{w}` is not key=value"),
            })
        })
        .collect()
}

fn field<'a>(f: &BTreeMap<&str, &'a str>, key: &str, line: usize) -> Result<&'a str, ReportError> {
    f.get(key).copied().ok_or_else(|| ReportError {
        line,
        why: format!("no `{key}`"),
    })
}

fn number<T: core::str::FromStr>(
    f: &BTreeMap<&str, &str>,
    key: &str,
    line: usize,
) -> Result<T, ReportError> {
    field(f, key, line)?.parse().map_err(|_| ReportError {
        line,
        why: format!("bad `{key}`"),
    })
}

// ----- the merger ----------------------------------------------------------------------

/// A tag as an explanation names it: the runtime's own tags by what they are for.
fn tag_name(tag: Tag) -> String {
    match crate::agreement::internal_tag_name(tag) {
        Some(what) => what.to_owned(),
        None => format!("tag {}", tag.0),
    }
}

fn on_comm(comm: CommId) -> String {
    if comm == CommId::WORLD {
        String::new()
    } else {
        format!(" on communicator {}", comm.0)
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ranks_list(ranks: &BTreeSet<u32>) -> String {
    let v: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match v.len() {
        1 => format!("rank {}", v[0]),
        _ => format!("ranks {}", v.join(", ")),
    }
}

/// Names what a rank is waiting for, briefly (for chains: "it is itself waiting for …").
fn first_wait(report: &RankReport) -> Option<String> {
    let p = report
        .pending
        .iter()
        .find(|p| p.kind == Waiting::Recv)
        .or_else(|| report.pending.first())?;
    Some(match p.kind {
        Waiting::Recv => format!(
            "{} from rank {}{}",
            tag_name(p.tag),
            p.peer.0,
            on_comm(p.comm)
        ),
        Waiting::Send => format!(
            "its send of {} to rank {}{} ({})",
            tag_name(p.tag),
            p.peer.0,
            on_comm(p.comm),
            stage_text(p.stage)
        ),
        Waiting::Barrier => "a barrier".to_owned(),
        Waiting::Check => "an agreement check".to_owned(),
        Waiting::Shutdown => "the others at shutdown: its work is done".to_owned(),
    })
}

fn stage_text(stage: Stage) -> &'static str {
    match stage {
        Stage::WaitingForData => "waiting for its data: earlier accesses to it are not done",
        Stage::Posted => "handed to the progression thread",
        Stage::Queued => "waiting for room in the engine's tables",
        Stage::Engine(State::Created | State::Ready) => "ready, waiting for its turn to leave",
        Stage::Engine(State::AwaitingEnvelope) => "no matching message arrived",
        Stage::Engine(State::AwaitingReady) => {
            "a synchronous send: waiting for the receiver to post the receive"
        }
        Stage::Engine(State::Transferring) => "its payload is in flight",
        Stage::Engine(State::Completed) => "completed, not yet reported",
    }
}

fn matches(p: &Pending, kind: Waiting, peer: Rank, comm: CommId, tag: Tag) -> bool {
    p.kind == kind && p.peer == peer && p.comm == comm && p.tag == tag
}

/// A message's key on its receiver: (source, communicator, tag).
type MsgKey = (u32, u16, i64);

/// How many messages of each key a rank holds that no receive took: (held, refused).
fn held_messages(r: &RankReport) -> BTreeMap<MsgKey, (usize, usize)> {
    let mut held: BTreeMap<MsgKey, (usize, usize)> = BTreeMap::new();
    for o in &r.orphans {
        let e = held.entry((o.source.0, o.comm.0, o.tag.0)).or_default();
        e.0 += 1;
        e.1 += usize::from(o.refused);
    }
    held
}

/// Whether a rank is in the closing barrier of shutdown (its work is done).
fn at_shutdown(r: &RankReport) -> bool {
    r.pending.iter().any(|p| p.kind == Waiting::Shutdown)
}

/// One finding, and the group of like findings it belongs to (same ranks, same kind of
/// cause) for the summary.
struct Finding {
    group: String,
    text: String,
}

/// The findings of [`explain`], every one of them: the deadlock cycles, then per rank its
/// receives and sends, the collectives, the messages nobody took, the missing reports.
fn findings(size: u32, reports: &[RankReport]) -> Vec<Finding> {
    let by_rank: BTreeMap<u32, &RankReport> = reports.iter().map(|r| (r.rank.0, r)).collect();
    let mut findings = Vec::new();
    let mut push = |group: String, text: String| findings.push(Finding { group, text });

    for r in by_rank.values().copied() {
        // Messages that arrived and wait (refused, or early data): a receive of their key
        // waits on this rank, not on its sender.
        let mut held = held_messages(r);
        // The keys this rank's receives wait for: a message held of such a key is theirs,
        // not one sent "instead".
        let awaited: BTreeSet<MsgKey> = r
            .pending
            .iter()
            .filter(|p| p.kind == Waiting::Recv)
            .map(|p| (p.peer.0, p.comm.0, p.tag.0))
            .collect();
        for p in r.pending.iter().filter(|p| p.kind == Waiting::Recv) {
            let s = p.peer;
            let mut line = format!(
                "rank {} waits for {} from rank {}{}",
                r.rank.0,
                tag_name(p.tag),
                s.0,
                on_comm(p.comm)
            );
            let mut detail = Vec::new();
            if let Some(d) = p.data {
                detail.push(format!("into {d}"));
            }
            detail.push(format!("for {}", secs(p.age)));
            let _ = write!(line, " ({})", detail.join(", "));
            let key = (s.0, p.comm.0, p.tag.0);
            let arrived = match held.get_mut(&key) {
                Some((n, refused)) if *n > 0 => {
                    *n -= 1;
                    let was_refused = *refused > 0;
                    *refused = refused.saturating_sub(1);
                    Some(was_refused)
                }
                _ => None,
            };
            let (class, reason) = if let Some(refused) = arrived {
                let how = if refused {
                    "refused by its engine for a full table and kept, in order, until it fits"
                } else {
                    "as early data in its engine"
                };
                (
                    "arrived",
                    format!(
                        "rank {} sent it and it arrived: rank {} holds it ({how}); the receive is {}",
                        s.0,
                        r.rank.0,
                        stage_text(p.stage)
                    ),
                )
            } else {
                match by_rank.get(&s.0) {
                    None => ("no-report", format!("rank {} sent no report", s.0)),
                    Some(sr) => recv_reason(r, p, sr, &awaited),
                }
            };
            push(
                format!("recv {} {} {} {class}", r.rank.0, s.0, p.comm.0),
                format!("{line}; {reason}"),
            );
        }
        for p in r.pending.iter().filter(|p| p.kind == Waiting::Send) {
            let received = by_rank.get(&p.peer.0).is_some_and(|d| {
                d.pending
                    .iter()
                    .any(|q| matches(q, Waiting::Recv, r.rank, p.comm, p.tag))
            });
            if received {
                continue; // explained with the receive
            }
            let mut line = format!(
                "rank {}'s send of {}{} to rank {}{} ({}, for {})",
                r.rank.0,
                tag_name(p.tag),
                p.data.map(|d| format!(" ({d})")).unwrap_or_default(),
                p.peer.0,
                on_comm(p.comm),
                stage_text(p.stage),
                secs(p.age)
            );
            if p.stage == Stage::WaitingForData {
                if let Some(feed) = r
                    .pending
                    .iter()
                    .find(|q| q.kind == Waiting::Recv && q.data.is_some() && q.data == p.data)
                {
                    let _ = write!(
                        line,
                        "; it waits for the receive into it of {} from rank {}",
                        tag_name(feed.tag),
                        feed.peer.0
                    );
                }
            } else if let Some(d) = by_rank.get(&p.peer.0) {
                match first_wait(d) {
                    Some(w) => {
                        let _ = write!(
                            line,
                            "; rank {} never posted a matching receive: it waits for {w}",
                            p.peer.0
                        );
                    }
                    None => {
                        let _ = write!(line, "; rank {} never posted a matching receive", p.peer.0);
                    }
                }
            }
            push(
                format!(
                    "send {} {} {} {}",
                    r.rank.0,
                    p.peer.0,
                    p.comm.0,
                    p.stage.word()
                ),
                line,
            );
        }
    }

    // Collectives: who is in, who never came.
    for kind in [Waiting::Barrier, Waiting::Check, Waiting::Shutdown] {
        let inside: BTreeSet<u32> = reports
            .iter()
            .filter(|r| r.pending.iter().any(|p| p.kind == kind))
            .map(|r| r.rank.0)
            .collect();
        if inside.is_empty() {
            continue;
        }
        let what = match kind {
            Waiting::Barrier => "a barrier",
            Waiting::Check => "an agreement check",
            _ => "the closing barrier of shutdown (their work is done)",
        };
        let outside: BTreeSet<u32> = (0..size).filter(|r| !inside.contains(r)).collect();
        let mut line = format!(
            "{} {} in {what}",
            ranks_list(&inside),
            if inside.len() == 1 { "waits" } else { "wait" }
        );
        if outside.is_empty() {
            line.push_str(" that every rank entered");
        } else {
            let _ = write!(line, "; {} never entered it", ranks_list(&outside));
            let why: Vec<String> = outside
                .iter()
                .filter_map(|o| {
                    by_rank
                        .get(o)
                        .and_then(|r| first_wait(r))
                        .map(|w| format!("rank {o} waits for {w}"))
                })
                .collect();
            if !why.is_empty() {
                let _ = write!(line, " ({})", why.join("; "));
            }
        }
        push(format!("collective {}", kind.word()), line);
    }

    // Messages nobody took, not explained above.
    for r in by_rank.values().copied() {
        let waited: BTreeSet<u32> = r
            .pending
            .iter()
            .filter(|p| p.kind == Waiting::Recv)
            .map(|p| p.peer.0)
            .collect();
        for o in &r.orphans {
            if !waited.contains(&o.source.0) {
                push(
                    format!("orphan {} {} {}", r.rank.0, o.source.0, o.refused),
                    format!(
                        "rank {} holds a message from rank {} with {}{} ({} bytes{}) that no receive took",
                        r.rank.0,
                        o.source.0,
                        tag_name(o.tag),
                        on_comm(o.comm),
                        o.size,
                        if o.refused {
                            ", refused by its engine for a full table"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
    }

    let missing: BTreeSet<u32> = (0..size).filter(|r| !by_rank.contains_key(r)).collect();
    if !missing.is_empty() && !findings.is_empty() {
        findings.push(Finding {
            group: "missing".to_owned(),
            text: format!(
                "no report from {} (it may have died, or be stuck outside Starling)",
                ranks_list(&missing)
            ),
        });
    }

    let mut out: Vec<Finding> = cycles(&waits_for(size, &by_rank))
        .into_iter()
        .map(|c| {
            let mut t = format!("deadlock: rank {} waits for rank {}", c[0], c[1]);
            for w in c.windows(2).skip(1) {
                let _ = write!(t, ", which waits for rank {}", w[1]);
            }
            Finding {
                group: t.clone(),
                text: t,
            }
        })
        .collect();
    out.extend(findings);
    out
}

/// Why receive `p` of rank `r` waits, from its sender's report `sr` (the message did not
/// arrive; `awaited`: the keys `r`'s receives wait for): the kind of cause (for grouping)
/// and the text.
fn recv_reason(
    r: &RankReport,
    p: &Pending,
    sr: &RankReport,
    awaited: &BTreeSet<MsgKey>,
) -> (&'static str, String) {
    let s = p.peer;
    if let Some(send) = sr
        .pending
        .iter()
        .find(|q| matches(q, Waiting::Send, r.rank, p.comm, p.tag))
    {
        return match send.stage {
            Stage::WaitingForData => {
                let mut t = format!(
                    "rank {}'s send of it waits for its data{}",
                    s.0,
                    send.data.map(|d| format!(" ({d})")).unwrap_or_default()
                );
                if let Some(feed) = sr
                    .pending
                    .iter()
                    .find(|q| q.kind == Waiting::Recv && q.data.is_some() && q.data == send.data)
                {
                    let _ = write!(
                        t,
                        ": the receive into it of {} from rank {}",
                        tag_name(feed.tag),
                        feed.peer.0
                    );
                }
                ("send-data", t)
            }
            stage => (
                "send-posted",
                format!("rank {} posted the send ({})", s.0, stage_text(stage)),
            ),
        };
    }
    let wrong_comm = r
        .orphans
        .iter()
        .find(|o| o.source == s && o.tag == p.tag && o.comm != p.comm);
    let other_tag = r.orphans.iter().find(|o| {
        o.source == s
            && o.comm == p.comm
            && o.tag != p.tag
            && !awaited.contains(&(o.source.0, o.comm.0, o.tag.0))
    });
    if let Some(o) = wrong_comm {
        (
            "wrong-comm",
            format!(
                "rank {} sent it on communicator {} instead, where nobody received it",
                s.0, o.comm.0
            ),
        )
    } else if let Some(o) = other_tag {
        (
            "other-tag",
            format!(
                "rank {} never sent it; it sent {} ({} bytes) instead, which rank {} never received",
                s.0,
                tag_name(o.tag),
                o.size,
                r.rank.0
            ),
        )
    } else if at_shutdown(sr) {
        (
            "shutdown",
            format!(
                "rank {} finished its work without sending it (it waits at shutdown)",
                s.0
            ),
        )
    } else if let Some(w) = first_wait(sr) {
        (
            "waiting",
            format!("rank {} never sent it: it is itself waiting for {w}", s.0),
        )
    } else {
        (
            "nothing",
            format!(
                "rank {} never sent it and waits for nothing: its flow has no such send",
                s.0
            ),
        )
    }
}

/// Merges the ranks' reports into one explanation, one finding per line, the most
/// telling first (a cycle of waits, else the first receive that waits for a message its
/// sender never sent). `size` is the number of ranks: ranks with no report are named.
/// The findings come in rank order, whatever the order of `reports`. A message that
/// arrived and waits on its receiver (refused for a full table, or early data) is never
/// blamed on its sender, and a rank at shutdown waits for no one.
/// Empty when no rank has anything pending.
///
/// Findings alike (the same ranks, the same kind of cause) beyond [`LIKE`] are
/// summarised ([`Explanation::summary`]); [`explain_all`] gives every finding too, and
/// [`explain_and_keep`] writes them to a file.
///
/// Pure: it looks only at its arguments.
pub fn explain(size: u32, reports: &[RankReport]) -> Vec<String> {
    explain_all(size, reports).summary
}

/// Findings alike beyond which [`explain`] summarises them: their count, the first and
/// the last.
pub const LIKE: usize = 3;

/// Groups of findings beyond which [`explain`]'s summary names only their count (the
/// full list has them all).
pub const GROUPS: usize = 12;

/// An explanation: every finding, and a summary that leads with the cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explanation {
    /// Every finding, one per line ([`explain`]'s order).
    pub findings: Vec<String>,
    /// The findings when no more than [`LIKE`] are alike; otherwise a first line with the
    /// counts, then per group of like findings its count, first and last (at most
    /// [`GROUPS`] groups).
    pub summary: Vec<String>,
}

impl Explanation {
    /// Whether the summary leaves findings out.
    pub fn is_summarised(&self) -> bool {
        self.summary != self.findings
    }
}

/// [`explain`], with every finding as well as the summary.
pub fn explain_all(size: u32, reports: &[RankReport]) -> Explanation {
    let all = findings(size, reports);
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, f) in all.iter().enumerate() {
        match index.get(f.group.as_str()) {
            Some(&g) => groups[g].1.push(i),
            None => {
                index.insert(&f.group, groups.len());
                groups.push((f.group.clone(), vec![i]));
            }
        }
    }
    let findings: Vec<String> = all.iter().map(|f| f.text.clone()).collect();
    if groups.iter().all(|g| g.1.len() <= LIKE) && groups.len() <= GROUPS {
        return Explanation {
            summary: findings.clone(),
            findings,
        };
    }
    let pending: usize = reports.iter().map(|r| r.pending.len()).sum();
    let held: usize = reports.iter().map(|r| r.orphans.len()).sum();
    let refused: usize = reports
        .iter()
        .flat_map(|r| &r.orphans)
        .filter(|o| o.refused)
        .count();
    let mut summary = vec![format!(
        "{} findings in {} groups ({pending} pending requests; {held} messages arrived and \
         not taken, {refused} of them refused for a full table); each group below gives its \
         count, its first and its last",
        findings.len(),
        groups.len()
    )];
    for (_, members) in groups.iter().take(GROUPS) {
        let first = &findings[members[0]];
        match members.len() {
            1 => summary.push(first.clone()),
            n => {
                summary.push(format!("{n} like this; the first: {first}"));
                let last = &findings[members[n - 1]];
                summary.push(format!("  … the last: {last}"));
            }
        }
    }
    if groups.len() > GROUPS {
        let rest: usize = groups[GROUPS..].iter().map(|g| g.1.len()).sum();
        summary.push(format!(
            "… {} more groups ({rest} findings) in the full list",
            groups.len() - GROUPS
        ));
    }
    Explanation { findings, summary }
}

/// Where [`explain_and_keep`] writes the full list: `STARLING_HANG_DIR` when set, else
/// the temporary directory.
pub fn hang_dir() -> std::path::PathBuf {
    std::env::var_os("STARLING_HANG_DIR").map_or_else(std::env::temp_dir, std::path::PathBuf::from)
}

/// [`explain`], and when the summary leaves findings out, every finding written to a new
/// file in `dir` (`starling-hang-<process>-<n>.txt`), whose path the last line names.
pub fn explain_and_keep(size: u32, reports: &[RankReport], dir: &std::path::Path) -> Vec<String> {
    static FILES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let e = explain_all(size, reports);
    if !e.is_summarised() {
        return e.summary;
    }
    let n = FILES.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
    let path = dir.join(format!("starling-hang-{}-{n}.txt", std::process::id()));
    let mut text = e.findings.join("\n");
    text.push('\n');
    let mut lines = e.summary;
    match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text)) {
        Ok(()) => lines.push(format!(
            "the full list ({} findings): {}",
            e.findings.len(),
            path.display()
        )),
        Err(err) => lines.push(format!(
            "the full list could not be written to {}: {err}",
            path.display()
        )),
    }
    lines
}

/// Who waits for whom: a receive waits for its source unless the source's send of it
/// is on its way or its message already arrived (it waits on its own rank then); a send
/// waiting for its data waits for the source of this rank's receive into that data; a
/// synchronous send waits for its destination until the destination posts the receive; a
/// rank inside a barrier or a check waits for every rank outside it; a rank at shutdown
/// waits for no one (no message it could send is missing).
fn waits_for(size: u32, by_rank: &BTreeMap<u32, &RankReport>) -> BTreeMap<u32, BTreeSet<u32>> {
    let mut g: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for r in by_rank.values() {
        let me = r.rank.0;
        let mut held = held_messages(r);
        for p in &r.pending {
            let on_its_way = |d: &RankReport| {
                d.pending.iter().any(|q| {
                    matches(q, Waiting::Send, r.rank, p.comm, p.tag)
                        && q.stage != Stage::WaitingForData
                })
            };
            match p.kind {
                Waiting::Recv => {
                    if let Some((n, _)) = held.get_mut(&(p.peer.0, p.comm.0, p.tag.0)) {
                        if *n > 0 {
                            *n -= 1;
                            continue; // it arrived
                        }
                    }
                    if !by_rank.get(&p.peer.0).is_some_and(|d| on_its_way(d)) {
                        g.entry(me).or_default().insert(p.peer.0);
                    }
                }
                Waiting::Send if p.stage == Stage::WaitingForData => {
                    for feed in r
                        .pending
                        .iter()
                        .filter(|q| q.kind == Waiting::Recv && q.data.is_some() && q.data == p.data)
                    {
                        g.entry(me).or_default().insert(feed.peer.0);
                    }
                }
                Waiting::Send if p.stage == Stage::Engine(State::AwaitingReady) => {
                    let posted = by_rank.get(&p.peer.0).is_some_and(|d| {
                        d.pending
                            .iter()
                            .any(|q| matches(q, Waiting::Recv, r.rank, p.comm, p.tag))
                    });
                    if !posted {
                        g.entry(me).or_default().insert(p.peer.0);
                    }
                }
                Waiting::Send | Waiting::Shutdown => {}
                Waiting::Barrier | Waiting::Check => {
                    for o in 0..size {
                        let inside = by_rank
                            .get(&o)
                            .is_some_and(|d| d.pending.iter().any(|q| q.kind == p.kind));
                        if !inside {
                            g.entry(me).or_default().insert(o);
                        }
                    }
                }
            }
        }
    }
    g
}

/// The elementary cycles of the wait-for graph, each once, starting at its lowest rank
/// and closed (its first rank repeated at the end).
fn cycles(graph: &BTreeMap<u32, BTreeSet<u32>>) -> Vec<Vec<u32>> {
    let mut found = Vec::new();
    for &start in graph.keys() {
        // Depth-first over ranks above `start`, so each cycle is found from its lowest.
        let mut path = vec![start];
        let mut stack = vec![
            graph
                .get(&start)
                .map(|s| s.iter().copied().collect::<Vec<_>>())
                .unwrap_or_default(),
        ];
        while let Some(next) = stack.last_mut() {
            match next.pop() {
                Some(n) if n == start => {
                    let mut c = path.clone();
                    c.push(start);
                    found.push(c);
                }
                Some(n) if n > start && !path.contains(&n) && found.len() < 16 => {
                    path.push(n);
                    stack.push(
                        graph
                            .get(&n)
                            .map(|s| s.iter().copied().collect())
                            .unwrap_or_default(),
                    );
                }
                Some(_) => {}
                None => {
                    stack.pop();
                    path.pop();
                }
            }
        }
    }
    found
}

/// The explanation as one text: the findings, one per line.
pub(crate) fn join(lines: &[String]) -> String {
    lines.join("\n")
}

impl fmt::Display for RankReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// The error an abandoned request fails with.
pub(crate) fn stalled(explanation: &str) -> CommError {
    CommError::Stalled {
        explanation: explanation.to_owned(),
    }
}

#[cfg(test)]
mod tests;

// ----- report files ----------------------------------------------------------------------

/// The file a rank's report is written to in a hang directory.
pub fn report_path(dir: &std::path::Path, rank: Rank) -> std::path::PathBuf {
    dir.join(format!("rank{}.txt", rank.0))
}

/// Writes `report` into `dir` (created if needed) as `rank<N>.txt`, atomically: readers
/// see the whole report or none.
///
/// # Errors
/// The I/O error that stopped it.
pub fn write_report(dir: &std::path::Path, report: &RankReport) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = report_path(dir, report.rank);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, report.to_text())?;
    std::fs::rename(&tmp, &path)
}

/// Reads every report of a rank below `max` found in `dir`, whatever world it names
/// (to learn a job's size); unreadable files are named in the second list.
pub fn read_reports_any(dir: &std::path::Path, max: u32) -> (Vec<RankReport>, Vec<String>) {
    let mut reports = Vec::new();
    let mut bad = Vec::new();
    for r in 0..max {
        let path = report_path(dir, Rank(r));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match RankReport::parse(&text) {
            Ok(rep) => reports.push(rep),
            Err(e) => bad.push(format!("{}: {e}", path.display())),
        }
    }
    (reports, bad)
}

/// Reads the reports of ranks `0..size` found in `dir` (missing files are skipped); a
/// file that is not a report of that rank in a world of `size` is named in the second
/// list instead.
pub fn read_reports(dir: &std::path::Path, size: u32) -> (Vec<RankReport>, Vec<String>) {
    let mut reports = Vec::new();
    let mut bad = Vec::new();
    for r in 0..size {
        let path = report_path(dir, Rank(r));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match RankReport::parse(&text) {
            Ok(rep) if rep.rank == Rank(r) && rep.size == size => reports.push(rep),
            Ok(rep) => bad.push(format!(
                "{}: a report of rank {} of {} (stale?)",
                path.display(),
                rep.rank.0,
                rep.size
            )),
            Err(e) => bad.push(format!("{}: {e}", path.display())),
        }
    }
    (reports, bad)
}
