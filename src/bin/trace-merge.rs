//! `trace-merge`: merges the per-rank timeline traces of a run (`STARLING_TRACE=<path>`)
//! into one Chrome / Perfetto JSON file, on rank 0's clock.
//!
//! ```text
//! trace-merge <path>... [-o <out.json>]
//! ```
//!
//! Each `<path>` is a rank file, a directory (its `rank<N>.json` files), or the path given
//! to `STARLING_TRACE` (its `<path>.rank<N>.json` files). The output defaults to
//! `<path>.json` for such a prefix, `<dir>/merged.json` for a directory, `merged.json`
//! otherwise. Open it in <https://ui.perfetto.dev> or `chrome://tracing`: one process per
//! rank, with its application thread, workers, requests and messages, and an arrow from
//! each sent message to its receipt.
//!
//! Prints what the merged trace holds on stderr. Exits with 1 when a file cannot be read
//! or merged, and with 2 on bad arguments.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use starling::trace_merge::{Summary, merge_files, rank_files, to_json};

/// The usage line.
const USAGE: &str = "usage: trace-merge <dir | prefix | file>... [-o <out.json>]";

fn default_output(first: &Path) -> PathBuf {
    if first.is_dir() {
        first.join("merged.json")
    } else if first.is_file() {
        PathBuf::from("merged.json")
    } else {
        let mut s = first.as_os_str().to_owned();
        s.push(".json");
        PathBuf::from(s)
    }
}

fn main() -> ExitCode {
    let mut inputs: Vec<PathBuf> = Vec::new();
    let mut output: Option<PathBuf> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some("-o") => match args.next() {
                Some(o) => output = Some(PathBuf::from(o)),
                None => {
                    eprintln!("trace-merge: -o needs a file\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let Some(first) = inputs.first() else {
        eprintln!("trace-merge: no input\n{USAGE}");
        return ExitCode::from(2);
    };
    let output = output.unwrap_or_else(|| default_output(first));
    let mut files = Vec::new();
    for i in &inputs {
        match rank_files(i) {
            Ok(mut f) => files.append(&mut f),
            Err(e) => {
                eprintln!("trace-merge: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    files.retain(|f| f != &output);
    let merged = match merge_files(&files) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("trace-merge: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&output, to_json(&merged)) {
        eprintln!("trace-merge: cannot write {}: {e}", output.display());
        return ExitCode::FAILURE;
    }
    let s = Summary::of(&merged);
    let tasks: u64 = s.tasks.values().sum();
    eprintln!(
        "trace-merge: {} file(s), ranks {:?}: {tasks} tasks, {} requests, {} messages, \
         {} waits, {} message arrows ({} unmatched, {} received before sent) -> {}",
        files.len(),
        s.ranks,
        s.requests,
        s.messages,
        s.waits,
        s.matched_flows,
        s.unmatched_flows,
        s.inverted_messages,
        output.display()
    );
    ExitCode::SUCCESS
}
