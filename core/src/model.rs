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
//! This module is compiled for the core's tests and with the `model` feature only, and
//! the feature links `std` (the crate is `no_std` without it): **never enable `model` in
//! a build that ships**. The shipped core pulls in neither `std` nor `alloc`; CI builds
//! the bare-metal targets without the feature.

mod lists;
mod matcher;

pub use lists::{DetachedModel, FifoModel, ReadyModel, SyncSendsModel};
pub use matcher::MatcherModel;

use std::string::String;

/// Returns `Err(message)` unless `got == want`: the comparison of a model's `check`.
fn same<T: PartialEq + core::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(std::format!(
            "{what}: the table has {got:?}, the model {want:?}"
        ))
    }
}
