//! The tools that watch a run: the hang explainer and the graph-agreement check.

pub mod agreement;
pub mod hang;
