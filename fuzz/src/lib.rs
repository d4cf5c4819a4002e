//! `starling-fuzz`: the fuzz targets of Starling, as a library.
//!
//! Each module holds one target's input type (derived with [`arbitrary`]), its reference
//! model or checker, and a `run(&[u8])` that builds an input from raw fuzzer bytes, drives
//! the code under test and panics on any disagreement. The fuzz targets in
//! `fuzz_targets/` are one-line `fuzz_target!`s over these functions, and
//! `tests/corpus.rs` replays every file of `corpus/<target>/` through the same function,
//! so `cargo test --manifest-path fuzz/Cargo.toml` checks the corpus without a fuzzer.
//!
//! | target | module | what it checks |
//! | --- | --- | --- |
//! | `envelope` | [`envelope`] | `decode` is total and re-encodes what it accepts byte for byte; an engine given the bytes as a message answers with a value, never a panic |
//! | `matcher` | [`matcher`] | the matcher, ready list, keyed FIFO, sync-send table and detached set agree with their reference models (`starling_core::model`) after every operation |
//! | `engine_sim` | [`engine_sim`] | 2–4 engines in the seeded simulator, arbitrary sends, receives and interleavings: every request completes once, payloads intact and in per-key order, nothing lost or duplicated, leftovers exactly the unmatched ones |
//! | `planner` | [`planner`] | arbitrary task flows planned on every rank: the plans pair up (the agreement checker of `core/tests/agreement.rs`) |
//!
//! How to run them is in `docs/verification.md`.

pub mod engine_sim;
pub mod envelope;
pub mod matcher;
pub mod planner;

/// The agreement checker of the planner, shared with `core/tests/agreement.rs`.
#[path = "../../core/tests/support/flow.rs"]
#[allow(
    dead_code,
    reason = "the fault injection is used by the core's tests only"
)]
mod flow;
