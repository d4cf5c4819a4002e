//! Refuses a build without exactly one CUDA API level (`cuda-12` or `cuda-13`).
//!
//! `src/lib.rs` says the same with `compile_error!`, but `cudarc` is compiled first and
//! fails first: with neither feature its build script stops on a list of its own version
//! features, and with both its sources define every type twice. This script runs before
//! any of that is reported, and names this crate's features.

use std::process::exit;

fn main() {
    let on = |feature: &str| std::env::var_os(format!("CARGO_FEATURE_{feature}")).is_some();
    let problem = match (on("CUDA_12"), on("CUDA_13")) {
        (true, false) | (false, true) => return,
        (true, true) => {
            "the features `cuda-12` and `cuda-13` are exclusive (one CUDA API level per build): for CUDA 13 build with `--no-default-features --features cuda-13` (starling: `--features cuda-13`, without `cuda`)"
        }
        (false, false) => {
            "enable one CUDA API level: the feature `cuda-12` (the default) or `cuda-13` (starling: `--features cuda` or `--features cuda-13`)"
        }
    };
    eprintln!("error: starling-gpu: {problem}");
    exit(1);
}
