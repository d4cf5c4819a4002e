//! The per-rank API: the context, its point-to-point builders and the communicators.

pub mod comm;
pub(crate) mod context;
pub mod p2p;
