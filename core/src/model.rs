//! Reference models of the core's tables, for property tests and fuzzing (feature
//! `model`).
//!
//! Each model is the obvious, allocating implementation of one table's rules — a
//! `BTreeMap` of `VecDeque`s where the table uses fixed pools and free lists, a sorted
//! map where it uses a heap — with the same capacities and the same errors. A test drives
//! the real table and its model with the same operations, compares what each operation
//! returns, then calls the model's `check` to compare the whole contents:
//!
//! | model | table |
//! | --- | --- |
//! | [`MatcherModel`] | [`Matcher`](crate::matcher::Matcher) |
//! | [`ReadyModel`] | [`ReadyList`](crate::lists::ReadyList) |
//! | [`FifoModel`] | [`KeyedFifo`](crate::lists::KeyedFifo) |
//! | [`SyncSendsModel`] | [`SyncSends`](crate::lists::SyncSends) |
//! | [`DetachedModel`] | [`Detached`](crate::lists::Detached) |
//!
//! The core's own property tests (`matcher/tests.rs`, `lists/tests.rs`) and the fuzz
//! targets of the `fuzz/` crate (`starling-fuzz`) share these models, so both check the
//! same rules.
//!
//! This module is compiled for the core's tests and with the `model` feature only. It
//! uses `alloc` (never `std`), so the feature keeps the crate `no_std`, but it does
//! allocate: **never enable `model` in a build that ships**; the allocation-free
//! guarantee of the crate is about the other modules, and CI builds the bare-metal
//! targets without it.

mod lists;
mod matcher;

pub use lists::{DetachedModel, FifoModel, ReadyModel, SyncSendsModel};
pub use matcher::MatcherModel;

use alloc::string::String;

/// Returns `Err(message)` unless `got == want`: the comparison of a model's `check`.
fn same<T: PartialEq + core::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(alloc::format!(
            "{what}: the table has {got:?}, the model {want:?}"
        ))
    }
}
