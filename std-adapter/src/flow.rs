//! The distributed task flow: insert, collectives, the communication cache, partitioning.

pub(crate) mod distributed;
pub mod partition;
