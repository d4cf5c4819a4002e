//! `starling`: the assembled system.
#![forbid(unsafe_code)]

pub use starling_core as core;
pub use starling_std as std_adapter;
