//! Placeholder: being written (see the module table in the crate docs).
