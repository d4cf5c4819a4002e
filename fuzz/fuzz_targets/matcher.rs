//! The `matcher` fuzz target: see `starling_fuzz::matcher`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| starling_fuzz::matcher::run(data));
