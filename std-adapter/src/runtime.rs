//! The task runtime: data handles, interfaces, codelets and device layers, performance models, the scheduler, the ready queue, tasks and workers.

pub(crate) mod by_id;
pub mod codelet;
pub mod data;
pub mod device;
pub mod interfaces;
pub(crate) mod meter;
pub mod perfmodel;
pub(crate) mod pool;
pub(crate) mod ready;
pub mod sched;
pub(crate) mod task;
