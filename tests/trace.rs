//! Timeline traces (`STARLING_TRACE`, `ClusterConfig::trace_file`): a traced stencil on 2
//! in-process ranks writes one file per rank; merged, they form one valid JSON trace
//! with each rank's tasks on its worker tracks, the messages on both sides, the waits,
//! and an arrow from every sent message to its receipt.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use starling::trace_merge::{Summary, merge_files, rank_files, to_json};
use starling::{ClusterConfig, InsertError, RuntimeConfig, run_local_with};

#[path = "../examples/stencil5.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` and checks are not called from the tests"
)]
mod stencil5;

use stencil5::{Counts, Distribution, Params, Pruning};

/// A fresh directory for this test's files.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("starling-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs two sweeps of an 8 × 6 stencil on 2 ranks of 2 workers, traced to `base`; what
/// each rank did.
fn traced_stencil(base: PathBuf) -> Vec<Counts> {
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 2,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        trace_file: Some(base),
        ..ClusterConfig::default()
    };
    let p = Params {
        ranks: 2,
        x: 8,
        y: 6,
        iterations: 2,
        pruning: Pruning::Safe,
    };
    let out = run_local_with(2, config, move |ctx| {
        let grid = stencil5::register_grid(ctx, &p, Distribution::Rows)?;
        let codelet = stencil5::codelet();
        let mut counts = Counts::default();
        stencil5::sweeps(ctx, &p, Distribution::Rows, &grid, &codelet, &mut counts)?;
        ctx.wait_for_all();
        Ok::<_, InsertError>(counts)
    })
    .expect("a clean shutdown");
    out.into_iter()
        .map(|r| r.expect("the stencil runs"))
        .collect()
}

fn events(trace: &Value) -> &[Value] {
    trace["traceEvents"]
        .as_array()
        .expect("a traceEvents array")
}

fn num(e: &Value, k: &str) -> f64 {
    e[k].as_f64()
        .unwrap_or_else(|| panic!("{k} is not a number in {e}"))
}

#[test]
fn a_traced_stencil_merges_into_one_timeline_with_tasks_messages_and_arrows() {
    let dir = fresh_dir("trace-stencil");
    let base = dir.join("stencil");
    let counts = traced_stencil(base.clone());

    // One file per rank, each valid JSON on its own.
    let files = rank_files(&base).unwrap();
    assert_eq!(
        files,
        vec![
            dir.join("stencil.rank0.json"),
            dir.join("stencil.rank1.json")
        ]
    );
    for f in &files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        assert!(!events(&v).is_empty(), "{} is empty", f.display());
    }

    // The merged trace, as written, parses back.
    let merged: Value = serde_json::from_str(&to_json(&merge_files(&files).unwrap())).unwrap();
    let s = Summary::of(&merged);
    assert_eq!(s.ranks.iter().copied().collect::<Vec<_>>(), vec![0, 1]);

    // Every task a rank executed is a slice on one of its two worker tracks.
    for (rank, c) in counts.iter().enumerate() {
        assert!(c.executed > 0, "rank {rank} executed nothing");
        let on_workers: u64 = s
            .tasks
            .iter()
            .filter(|((pid, _), _)| *pid == rank as u64)
            .map(|((_, tid), n)| {
                assert!((1..=2).contains(tid), "a task on track {tid}");
                n
            })
            .sum();
        assert_eq!(on_workers, c.executed, "rank {rank}");
    }
    let stencil_tasks = events(&merged)
        .iter()
        .filter(|e| e["cat"] == "task")
        .all(|e| e["name"] == "stencil5");
    assert!(stencil_tasks, "tasks are named after their codelet");
    assert!(s.waits >= 2, "each rank waited for all: {s:?}");
    assert!(s.requests > 0, "the stencil moves data: {s:?}");

    // Every message has one arrow from its send to its receipt on the other rank, and a
    // message is never received before it was sent (the ranks share a clock).
    assert_eq!(s.unmatched_flows, 0, "{s:?}");
    assert_eq!(s.inverted_messages, 0, "{s:?}");
    let sent: BTreeMap<u64, &Value> = events(&merged)
        .iter()
        .filter(|e| e["cat"] == "message" && e["ph"] == "X" && e["args"]["source"] == e["pid"])
        .map(|e| (e["args"]["flow"].as_u64().unwrap(), e))
        .collect();
    let received: BTreeMap<u64, &Value> = events(&merged)
        .iter()
        .filter(|e| e["cat"] == "message" && e["ph"] == "X" && e["args"]["dest"] == e["pid"])
        .map(|e| (e["args"]["flow"].as_u64().unwrap(), e))
        .collect();
    assert!(!sent.is_empty());
    assert_eq!(sent.len() as u64, s.matched_flows);
    assert_eq!(received.len(), sent.len());
    for (flow, snd) in &sent {
        let rcv = received.get(flow).expect("each sent message was received");
        assert_eq!(snd["args"]["dest"], rcv["pid"]);
        assert_eq!(snd["args"]["bytes"], rcv["args"]["bytes"], "{snd} / {rcv}");
        assert!(
            num(snd, "ts") <= num(rcv, "ts") + num(rcv, "dur"),
            "received before it was sent: {snd} / {rcv}"
        );
    }
    // The arrows' ends sit on the message tracks: starts on "sends", finishes on
    // "receives", each inside its slice.
    for e in events(&merged) {
        let tid = e["tid"].as_u64().unwrap_or(0);
        match e["ph"].as_str() {
            Some("s") => assert!((2000..3000).contains(&tid), "{e}"),
            Some("f") => {
                assert!(tid >= 3000, "{e}");
                assert_eq!(e["bp"], "e");
            }
            _ => {}
        }
    }
    // The tracks are named.
    let names: Vec<&str> = events(&merged)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    for want in ["application", "sends 0", "receives 0"] {
        assert!(names.contains(&want), "no track {want}: {names:?}");
    }
    // Which of a rank's two workers ran tasks is the scheduler's business (on a loaded
    // machine one worker may take them all); at least one did, on its own track.
    assert!(
        names.iter().any(|n| n.starts_with("worker ")),
        "no worker track: {names:?}"
    );

    // The command-line merger writes the same trace next to the prefix.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_trace-merge"))
        .arg(&base)
        .status()
        .unwrap();
    assert!(status.success());
    let from_cli: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("stencil.json")).unwrap()).unwrap();
    assert_eq!(Summary::of(&from_cli), s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_gets_one_rank_file_each_with_the_waits() {
    let dir = fresh_dir("trace-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let config = ClusterConfig {
        trace_file: Some(dir.clone()),
        ..ClusterConfig::default()
    };
    run_local_with(2, config, |ctx| ctx.barrier()).unwrap();
    let files = rank_files(&dir).unwrap();
    assert_eq!(files, vec![dir.join("rank0.json"), dir.join("rank1.json")]);
    let merged = merge_files(&files).unwrap();
    let barriers = events(&merged)
        .iter()
        .filter(|e| e["cat"] == "wait" && e["name"] == "barrier")
        .count();
    assert_eq!(barriers, 2, "one barrier wait per rank");
    let _ = std::fs::remove_dir_all(&dir);
}
