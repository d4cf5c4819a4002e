//! Benchmarks of the core (being written).
fn main() {}
