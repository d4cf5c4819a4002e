//! The `envelope` fuzz target: see `starling_fuzz::envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| starling_fuzz::envelope::run(data));
