//! Starting ranks: the rank runner and the in-process cluster.

pub(crate) mod cluster;
pub mod rank;
