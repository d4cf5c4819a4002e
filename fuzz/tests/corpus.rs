//! Replays every checked-in corpus file of every fuzz target through the target's
//! function, so that CI exercises the targets on every submission without a fuzzer.

use std::fs;
use std::path::{Path, PathBuf};

fn files(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8])) {
    let files = files(target);
    assert!(!files.is_empty(), "the {target} corpus is empty");
    for path in &files {
        let data = fs::read(path).expect("readable corpus file");
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            eprintln!("{target}: {} fails", path.display());
            std::panic::resume_unwind(panic);
        }
    }
    eprintln!("{target}: {} corpus files replayed", files.len());
}

#[test]
fn envelope_corpus_replays_clean() {
    replay("envelope", starling_fuzz::envelope::run);
}

#[test]
fn matcher_corpus_replays_clean() {
    replay("matcher", starling_fuzz::matcher::run);
}

#[test]
fn engine_sim_corpus_replays_clean() {
    replay("engine_sim", starling_fuzz::engine_sim::run);
}

#[test]
fn admission_sim_corpus_replays_clean() {
    replay("admission_sim", starling_fuzz::engine_sim::run_admitted);
}

#[test]
fn planner_corpus_replays_clean() {
    replay("planner", starling_fuzz::planner::run);
}
