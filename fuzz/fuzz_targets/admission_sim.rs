//! The `admission_sim` fuzz target: see `starling_fuzz::engine_sim::run_admitted`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| starling_fuzz::engine_sim::run_admitted(data));
