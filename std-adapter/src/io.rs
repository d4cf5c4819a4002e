//! The rank's communication: the transports (the contract, in-process, serial), what waits outside a full engine, and the progression thread.

pub(crate) mod admission;
mod barrier;
pub mod in_process;
pub(crate) mod progress;
pub mod serial;
pub mod transport;
