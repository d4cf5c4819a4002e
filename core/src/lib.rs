//! `starling-core`: the protocol core of Starling.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod cache;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod insert;
pub mod lists;
pub mod matcher;
pub mod request;
pub mod select;
pub mod stats;
pub mod tags;
pub mod types;

pub use error::{Full, Table};
pub use types::{AccessMode, CommId, DataId, MsgId, Owner, PhysTag, Priority, Rank, ReqId, Tag};
