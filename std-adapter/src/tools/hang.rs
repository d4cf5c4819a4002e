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
//! * under MPI (the facade's `starling::mpi`), each process watches its own rank, writes its report as
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
use std::collections::BTreeMap;

use starling_core::request::State;
use starling_core::{CommId, DataId, Rank, Tag};

use crate::error::CommError;

mod merge;
mod track;

pub use merge::{Explanation, GROUPS, LIKE, explain, explain_all, explain_and_keep, hang_dir};
pub use track::{Activity, Probe, Watchdog};
pub(crate) use track::{Tracked, Tracker};

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
            Self::Engine(State::AwaitingFast) => "awaiting-fast",
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
            "awaiting-fast" => Self::Engine(State::AwaitingFast),
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
    /// How long ago it was submitted. While a watchdog watches the rank (the default),
    /// a request takes the time of the watchdog's last look as its submission time
    /// rather than reading the clock, so the age may be overstated by up to the time
    /// between two looks (a tenth of the watchdog's timeout, 200 ms at most).
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
