//! The merger: from the ranks' reports, one explanation ([`explain`]).

use core::fmt::Write as _;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use starling_core::request::State;
use starling_core::{CommId, Rank, Tag};

use super::{Pending, RankReport, Stage, Waiting};

/// A tag as an explanation names it: the runtime's own tags by what they are for.
fn tag_name(tag: Tag) -> String {
    match crate::tools::agreement::internal_tag_name(tag) {
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
        Stage::Engine(State::AwaitingFast) => {
            "posted on its tag's fast tag: no message of that tag arrived"
        }
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
