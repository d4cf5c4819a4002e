//! The examples' cores, run on small clusters: each example's `run` is compiled in here
//! from `examples/` and checked as `cargo run --example` would check it.

use starling::ClusterConfig;

#[path = "../examples/complex.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod complex;
#[path = "../examples/lu.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod lu;
#[path = "../examples/migration.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod migration;
#[path = "../examples/pernode.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod pernode;
#[path = "../examples/redux.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod redux;
#[path = "../examples/scatter_gather.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod scatter_gather;
#[path = "../examples/stencil5.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod stencil5;

#[test]
fn lu_explicit_and_implicit_factor_the_matrix() {
    for version in ["explicit", "implicit"] {
        for ranks in [1, 3, 4] {
            let res = lu::run_all(
                ranks,
                &[version],
                lu::Lu { nt: 4, bs: 8 },
                ClusterConfig::from_env(),
            )
            .unwrap()[0];
            assert!(res < 1e-10, "{version} on {ranks} ranks: {res:e}");
        }
    }
}

#[test]
fn scatter_compute_gather_returns_every_block_computed_by_its_owner() {
    for ranks in [1, 3, 4] {
        scatter_gather::run(ranks, 7, 16).unwrap();
    }
}

#[test]
fn complex_numbers_cross_ranks_packed_both_ways_and_through_inserts() {
    for ranks in [1, 2, 3] {
        complex::run(ranks, 5).unwrap();
    }
}

#[test]
fn per_node_tasks_run_everywhere_and_move_nothing() {
    for ranks in [1, 2, 4] {
        pernode::run(ranks, 6, 5).unwrap();
    }
}

#[test]
fn a_reduced_dot_product_matches_the_sequential_one_flat_tree_and_auto() {
    for variant in ["flat", "tree", "auto"] {
        for ranks in [1, 3, 4] {
            redux::run_all(ranks, &[variant], 7, 32).unwrap();
        }
    }
}

#[test]
fn migrated_cells_change_owner_everywhere_and_tasks_follow_them() {
    for ranks in [1, 2, 4] {
        migration::run(ranks, 9, 2).unwrap();
    }
}

/// The implicit LU and the migrations with the cache off and with a tiny byte budget for
/// received copies: the environment is read at start-up, so each setting runs in a child
/// process of this test binary.
#[test]
fn examples_hold_with_the_cache_off_and_with_a_tiny_budget() {
    if std::env::var("STARLING_EXAMPLES_CHILD").is_ok() {
        lu::run_all(
            4,
            &["implicit"],
            lu::Lu { nt: 4, bs: 8 },
            ClusterConfig::from_env(),
        )
        .unwrap();
        migration::run(4, 12, 2).unwrap();
        return;
    }
    for (var, value) in [
        ("STARLING_MPI_CACHE", "0"),
        ("STARLING_MPI_CACHE_BUDGET", "200"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "examples_hold_with_the_cache_off_and_with_a_tiny_budget",
                "--exact",
            ])
            .env("STARLING_EXAMPLES_CHILD", "1")
            .env(var, value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{var}={value}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("1 passed"),
            "{var}={value}: the child ran no test: {text}"
        );
    }
}

#[test]
fn stencil5_migrates_and_gathers_small_grids_in_one_pass() {
    for ranks in [1, 2, 4] {
        for pruning in [stencil5::Pruning::Safe, stencil5::Pruning::Off] {
            let p = stencil5::Params {
                ranks,
                x: 16,
                y: 12,
                iterations: 2,
                pruning,
            };
            stencil5::run(p, ClusterConfig::from_env(), false).unwrap();
        }
    }
}

/// The sizes of issue 17's table that went wrong in chunk-free runs before the engine's
/// full tables became waits: each migration and the gather put the whole grid in flight
/// at once, past the 4 096-request slab (16 000 cells from rank 0 on 2 ranks), and the
/// result must equal the sequential run bit for bit.
#[test]
fn stencil5_whole_grid_in_flight_past_the_old_tables() {
    for (ranks, y) in [(2, 4000), (4, 1100)] {
        let p = stencil5::Params {
            ranks,
            x: 8,
            y,
            iterations: 3,
            pruning: stencil5::Pruning::Safe,
        };
        stencil5::run(p, ClusterConfig::from_env(), false)
            .unwrap_or_else(|e| panic!("{ranks} ranks, 8 × {y}: {e}"));
    }
}

/// The same flow without the wait between the sweeps and each migration, on the smallest
/// engine tables and past the default ones. A flow receive reaches the progression thread
/// when its handle's earlier tasks are done, not in flow order: a migration's receive,
/// whose message depends through the peer's tasks on an earlier sweep receive, must not
/// hold the last receive slot while that sweep receive, whose message is here, waits
/// behind it (this deadlocked before issue 17's fix: the watchdog reported a cycle
/// between the two ranks). A receive whose message is not here never takes the last
/// receive slot, early data neither, and a receive whose message is here goes ahead of
/// the waiting ones (docs/protocol.md, "Admission").
#[test]
fn stencil5_sweeps_overlapping_a_migration_past_the_tables() {
    for (tables, ranks, y) in [
        (starling::Tables::TINY, 2, 16),
        (starling::Tables::TINY, 2, 64),
        (starling::Tables::TINY, 4, 64),
        (starling::Tables::DEFAULT, 2, 2000),
    ] {
        let config = ClusterConfig {
            tables,
            watchdog: Some(core::time::Duration::from_secs(5)),
            ..ClusterConfig::from_env()
        };
        let p = stencil5::Params {
            ranks,
            x: 8,
            y,
            iterations: 3,
            pruning: stencil5::Pruning::Safe,
        };
        stencil5::run(p, config, true)
            .unwrap_or_else(|e| panic!("{tables:?}, {ranks} ranks, 8 × {y}: {e}"));
    }
}
