//! `starling-std`: Starling's threaded adapter.
#![forbid(unsafe_code)]
