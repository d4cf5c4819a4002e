//! The `planner` fuzz target: see `starling_fuzz::planner`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| starling_fuzz::planner::run(data));
