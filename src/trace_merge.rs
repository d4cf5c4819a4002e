//! Merging the ranks' timeline traces into one.
//!
//! With `STARLING_TRACE=<path>` (see [`starling_std::trace`]) every rank writes its own
//! Chrome / Perfetto JSON file: `<path>.rank<N>.json`, or `<path>/rank<N>.json` for a
//! directory. [`merge`] puts them on one timeline: every rank is one process (`pid` =
//! rank) whose tracks are its application thread, its workers, its requests and its
//! messages; each file's timestamps are moved onto rank 0's clock by the offset the file
//! records (`otherData.clock_offset_us`: 0 for the ranks of one process, which share a
//! clock; measured at start-up under MPI); and the flow arrows from each sent message to
//! its receipt, which each side wrote with the same id, now join two ranks. The
//! `trace-merge` binary does this from the command line; [`Summary`] counts what a
//! merged trace holds, flow arrows matched or not.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use starling::trace_merge::{Summary, merge_files, rank_files};
//! let files = rank_files(std::path::Path::new("/tmp/stencil"))?; // stencil.rank<N>.json
//! let merged = merge_files(&files)?;
//! let s = Summary::of(&merged);
//! assert_eq!(s.unmatched_flows, 0);
//! std::fs::write("/tmp/stencil.json", starling::trace_merge::to_json(&merged))?;
//! # Ok(()) }
//! ```

use core::fmt;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// Why traces could not be merged.
#[derive(Debug)]
#[non_exhaustive]
pub enum MergeError {
    /// A file could not be read (its path, the error).
    Read(PathBuf, std::io::Error),
    /// A file is not JSON (its name, the parser's message).
    Json(String, serde_json::Error),
    /// A trace has no `traceEvents` array (its name): not a trace file.
    NotATrace(String),
    /// Two traces are of the same rank (the rank): files of two runs, or one file twice.
    SameRank(u64),
    /// No trace file matched the given path (the path).
    NoFiles(PathBuf),
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            Self::Json(name, e) => write!(f, "{name} is not JSON: {e}"),
            Self::NotATrace(name) => write!(f, "{name} has no traceEvents array"),
            Self::SameRank(r) => write!(f, "two traces of rank {r}"),
            Self::NoFiles(p) => write!(f, "no trace files at {}", p.display()),
        }
    }
}

impl core::error::Error for MergeError {}

/// The rank trace files a path names: the file itself; for a directory its
/// `rank<N>.json` files; otherwise the `<path>.rank<N>.json` files beside it. In rank
/// order.
///
/// # Errors
/// [`MergeError::Read`] when the directory cannot be listed; [`MergeError::NoFiles`] when
/// nothing matched.
pub fn rank_files(path: &Path) -> Result<Vec<PathBuf>, MergeError> {
    if path.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let (dir, prefix) = if path.is_dir() {
        (path.to_owned(), "rank".to_owned())
    } else {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."))
            .to_owned();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        (dir, format!("{name}.rank"))
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| MergeError::Read(dir.clone(), e))?;
    let mut found: BTreeMap<u64, PathBuf> = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rank = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|r| r.parse::<u64>().ok());
        if let Some(rank) = rank {
            found.insert(rank, entry.path());
        }
    }
    if found.is_empty() {
        return Err(MergeError::NoFiles(path.to_owned()));
    }
    Ok(found.into_values().collect())
}

/// Reads and merges the trace files `paths` (see [`merge`]).
///
/// # Errors
/// [`MergeError::Read`] or [`MergeError::Json`] for a file that cannot be read or parsed,
/// and those of [`merge`].
pub fn merge_files(paths: &[PathBuf]) -> Result<Value, MergeError> {
    let mut traces = Vec::with_capacity(paths.len());
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| MergeError::Read(p.clone(), e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| MergeError::Json(p.display().to_string(), e))?;
        traces.push((p.display().to_string(), v));
    }
    merge(traces)
}

/// Merges the traces of several ranks (each with a name for errors) into one: every
/// event kept, its `ts` moved by its file's `otherData.clock_offset_us`, then all of them
/// shifted so that the earliest is at 0, and sorted by time (metadata first).
///
/// # Errors
/// [`MergeError::NotATrace`] for a value without a `traceEvents` array;
/// [`MergeError::SameRank`] when two traces are of one rank.
pub fn merge(traces: Vec<(String, Value)>) -> Result<Value, MergeError> {
    let mut ranks = BTreeSet::new();
    let mut events: Vec<Value> = Vec::new();
    for (name, mut trace) in traces {
        let other = trace.get("otherData");
        let offset = other
            .and_then(|o| o.get("clock_offset_us"))
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        if let Some(rank) = other.and_then(|o| o.get("rank")).and_then(Value::as_u64) {
            if !ranks.insert(rank) {
                return Err(MergeError::SameRank(rank));
            }
        }
        let Some(Value::Array(list)) = trace.get_mut("traceEvents").map(Value::take) else {
            return Err(MergeError::NotATrace(name));
        };
        for mut e in list {
            if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
                e["ts"] = json!(ts + offset);
            }
            events.push(e);
        }
    }
    let min = events
        .iter()
        .filter_map(|e| e.get("ts").and_then(Value::as_f64))
        .fold(f64::INFINITY, f64::min);
    let shift = if min.is_finite() { -min } else { 0.0 };
    for e in &mut events {
        if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
            // Nanosecond precision, as the rank files have.
            e["ts"] = json!(((ts + shift) * 1000.0).round() / 1000.0);
        }
    }
    let key = |e: &Value| {
        let meta = e.get("ph").and_then(Value::as_str) == Some("M");
        let ts = e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
        (!meta, ts)
    };
    events.sort_by(|a, b| {
        key(a)
            .partial_cmp(&key(b))
            .unwrap_or(core::cmp::Ordering::Equal)
    });
    let mut other = Map::new();
    other.insert("starling_trace".into(), json!(1));
    other.insert(
        "merged_ranks".into(),
        json!(ranks.into_iter().collect::<Vec<_>>()),
    );
    Ok(json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": other,
    }))
}

/// A trace as text: one event per line.
pub fn to_json(trace: &Value) -> String {
    let mut out = String::from("{\"traceEvents\":[");
    if let Some(events) = trace.get("traceEvents").and_then(Value::as_array) {
        for (i, e) in events.iter().enumerate() {
            out.push_str(if i == 0 { "\n" } else { ",\n" });
            out.push_str(&e.to_string());
        }
    }
    out.push_str("\n]");
    if let Some(obj) = trace.as_object() {
        for (k, v) in obj.iter().filter(|(k, _)| *k != "traceEvents") {
            out.push_str(",\n");
            out.push_str(&Value::String(k.clone()).to_string());
            out.push(':');
            out.push_str(&v.to_string());
        }
    }
    out.push_str("}\n");
    out
}

/// What a (merged) trace holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The ranks (`pid`s) with events.
    pub ranks: BTreeSet<u64>,
    /// Task slices per (rank, worker track).
    pub tasks: BTreeMap<(u64, u64), u64>,
    /// Message slices (sent and received).
    pub messages: u64,
    /// Request slices.
    pub requests: u64,
    /// Wait slices.
    pub waits: u64,
    /// Flow arrows with both a start (`s`) and a finish (`f`) on another rank.
    pub matched_flows: u64,
    /// Flow ids with a start and no finish, or the other way round, or more than one of
    /// either.
    pub unmatched_flows: u64,
    /// Messages received before they were sent: the receive's slice ends before the
    /// send's begins. Only clocks that disagree by more than a message's latency make
    /// any.
    pub inverted_messages: u64,
}

impl Summary {
    /// Counts the events of `trace`.
    pub fn of(trace: &Value) -> Self {
        let mut s = Self::default();
        let mut flows: BTreeMap<u64, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
        // Per message (flow id): when its send began, when its receipt ended.
        let mut times: BTreeMap<u64, (Option<f64>, Option<f64>)> = BTreeMap::new();
        let empty = Vec::new();
        let events = trace
            .get("traceEvents")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        for e in events {
            let field = |k: &str| e.get(k).and_then(Value::as_u64);
            let ph = e.get("ph").and_then(Value::as_str).unwrap_or("");
            let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
            let pid = field("pid").unwrap_or(0);
            if ph != "M" {
                s.ranks.insert(pid);
            }
            match (ph, cat) {
                ("X", "task") => {
                    *s.tasks.entry((pid, field("tid").unwrap_or(0))).or_default() += 1;
                }
                ("X", "message") => {
                    s.messages += 1;
                    let args = &e["args"];
                    let ts = e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
                    let dur = e.get("dur").and_then(Value::as_f64).unwrap_or(0.0);
                    if let Some(flow) = args.get("flow").and_then(Value::as_u64) {
                        let t = times.entry(flow).or_default();
                        if args.get("source").and_then(Value::as_u64) == Some(pid) {
                            t.0 = Some(ts);
                        } else if args.get("dest").and_then(Value::as_u64) == Some(pid) {
                            t.1 = Some(ts + dur);
                        }
                    }
                }
                ("X", "request") => s.requests += 1,
                ("X", "wait") => s.waits += 1,
                ("s", _) => flows
                    .entry(field("id").unwrap_or(0))
                    .or_default()
                    .0
                    .push(pid),
                ("f", _) => flows
                    .entry(field("id").unwrap_or(0))
                    .or_default()
                    .1
                    .push(pid),
                _ => {}
            }
        }
        s.inverted_messages = times
            .values()
            .filter(|t| matches!(t, (Some(sent), Some(received)) if received < sent))
            .count() as u64;
        for (starts, finishes) in flows.values() {
            match (starts.as_slice(), finishes.as_slice()) {
                ([a], [b]) if a != b => s.matched_flows += 1,
                _ => s.unmatched_flows += 1,
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(rank: u64, offset: f64, events: Value) -> (String, Value) {
        (
            format!("rank{rank}"),
            json!({"traceEvents": events, "otherData": {"rank": rank, "clock_offset_us": offset}}),
        )
    }

    #[test]
    fn offsets_move_each_rank_onto_rank_0s_clock() {
        let a = trace(
            0,
            0.0,
            json!([{"ph":"X","name":"t","cat":"task","pid":0,"tid":1,"ts":10.0,"dur":1.0},
                   {"ph":"s","id":7,"pid":0,"tid":2000,"ts":10.5}]),
        );
        let b = trace(
            1,
            -4.0,
            json!([{"ph":"f","bp":"e","id":7,"pid":1,"tid":3000,"ts":20.0},
                   {"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 1"}}]),
        );
        let m = merge(vec![a, b]).unwrap();
        let ev = m["traceEvents"].as_array().unwrap();
        assert_eq!(ev[0]["ph"], "M", "metadata first");
        let ts: Vec<f64> = ev[1..].iter().map(|e| e["ts"].as_f64().unwrap()).collect();
        // Rank 1's 20.0 is 16.0 on rank 0's clock; everything shifted by -10.
        assert_eq!(ts, vec![0.0, 0.5, 6.0]);
        let s = Summary::of(&m);
        assert_eq!(s.matched_flows, 1);
        assert_eq!(s.unmatched_flows, 0);
        assert_eq!(s.tasks.get(&(0, 1)), Some(&1));
    }

    #[test]
    fn two_files_of_one_rank_are_refused() {
        let e = merge(vec![trace(1, 0.0, json!([])), trace(1, 0.0, json!([]))]);
        assert!(matches!(e, Err(MergeError::SameRank(1))));
        let e = merge(vec![("x".into(), json!({"foo": 1}))]);
        assert!(matches!(e, Err(MergeError::NotATrace(_))));
    }

    #[test]
    fn a_flow_without_its_other_end_is_unmatched() {
        let m = merge(vec![trace(
            0,
            0.0,
            json!([{"ph":"s","id":3,"pid":0,"ts":1.0}]),
        )])
        .unwrap();
        let s = Summary::of(&m);
        assert_eq!((s.matched_flows, s.unmatched_flows), (0, 1));
    }

    #[test]
    fn the_text_form_parses_back_to_the_same_trace() {
        let m = merge(vec![trace(
            0,
            0.0,
            json!([{"ph":"X","pid":0,"ts":1.5,"dur":2.0}]),
        )])
        .unwrap();
        let back: Value = serde_json::from_str(&to_json(&m)).unwrap();
        assert_eq!(back, m);
    }
}
