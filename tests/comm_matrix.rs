//! The communication matrix, end to end: a 4-rank run writes its statistics to
//! `STARLING_COMM_STATS_DIR`-style files, [`CommMatrix`] reads them back exactly, and the
//! `comm-matrix` binary draws them.

use std::path::{Path, PathBuf};

use starling::comm_matrix::CommMatrix;
use starling::core::{Rank, Tag};
use starling::interfaces::Vector;
use starling::{ClusterConfig, RuntimeConfig, run_local_with};

/// Ranks of the run.
const RANKS: u32 = 4;

/// Rank r sends `K * (r + 1)` bytes to rank `(r + 1) % RANKS`.
const K: usize = 1000;

/// A fresh, empty directory for `name` under cargo's temporary directory for tests.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs the ring on `RANKS` ranks, writing the statistics into `dir`.
fn ring_with_stats(dir: &Path) {
    let config = ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        stats: true,
        stats_dir: Some(dir.to_path_buf()),
        ..ClusterConfig::default()
    };
    run_local_with(RANKS, config, |ctx| {
        let me = ctx.rank().0;
        let (next, prev) = ((me + 1) % RANKS, (me + RANKS - 1) % RANKS);
        let out = ctx.register(Vector::from_vec(vec![1u8; K * (me as usize + 1)]));
        let inp = ctx.register(Vector::<u8>::zeros(K * (prev as usize + 1)));
        let recv = ctx.recv(&inp, Rank(prev), Tag(7)).start().unwrap();
        let send = ctx.send(&out, Rank(next), Tag(7)).start().unwrap();
        send.wait().unwrap();
        recv.wait().unwrap();
        ctx.wait_for_all();
        assert!(ctx.unregister(inp).as_slice().iter().all(|&b| b == 1));
    })
    .expect("a clean shutdown");
}

#[test]
fn a_run_writes_reports_that_read_back_as_the_exact_matrix() {
    let dir = fresh_dir("comm_matrix_reports");
    ring_with_stats(&dir);

    let mut m = CommMatrix::new();
    for r in 0..RANKS {
        let text = std::fs::read_to_string(dir.join(format!("rank{r}.txt"))).unwrap();
        m.add_text(&text);
    }
    assert_eq!(m.malformed(), 0);
    assert_eq!(m.duplicates(), 0);
    assert_eq!(m.size(), RANKS);
    let mut want = vec![vec![0u64; RANKS as usize]; RANKS as usize];
    for r in 0..RANKS as usize {
        want[r][(r + 1) % RANKS as usize] = (K * (r + 1)) as u64;
    }
    assert_eq!(m.volume_rows(), want);
    assert_eq!(m.total_bytes(), (K * (1 + 2 + 3 + 4)) as u64);
    // Every pair that sent has a positive rate (the run lasted more than a microsecond).
    for r in 0..RANKS {
        let rate = m.rate(r, (r + 1) % RANKS);
        assert!(rate.is_some_and(|x| x > 0.0), "rank {r}: {rate:?}");
    }
    assert_eq!(m.cells().count(), RANKS as usize);
}

#[cfg(feature = "comm-matrix")]
mod binary {
    use std::process::Command;

    use super::*;

    fn comm_matrix(args: &[&Path]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_comm-matrix"))
            .args(args)
            .output()
            .expect("the comm-matrix binary runs")
    }

    #[test]
    fn the_binary_draws_four_images_from_a_run() {
        let dir = fresh_dir("comm_matrix_draw");
        ring_with_stats(&dir.join("stats"));
        let prefix = dir.join("out").join("ring");
        let out = comm_matrix(&[&dir.join("stats"), Path::new("-o"), &prefix]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("4 rank(s), 4 pair(s)"), "{stdout}");
        for (name, magic) in [
            ("volume.png", &b"\x89PNG\r\n\x1a\n"[..]),
            ("bandwidth.png", b"\x89PNG\r\n\x1a\n"),
            ("volume.svg", b"<svg"),
            ("bandwidth.svg", b"<svg"),
        ] {
            let path = dir.join("out").join(format!("ring-{name}"));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            assert!(bytes.len() > 1000, "{path:?}: {} bytes", bytes.len());
            assert!(bytes.starts_with(magic), "{path:?} starts with {magic:?}");
        }
    }

    #[test]
    fn the_binary_fails_without_statistics_lines() {
        let dir = fresh_dir("comm_matrix_empty");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rank0.txt"), "no statistics here\n").unwrap();
        let out = comm_matrix(&[&dir, Path::new("-o"), &dir.join("m")]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no [starling_comm_stats] line"));
        assert!(!dir.join("m-volume.png").exists());

        let out = comm_matrix(&[]);
        assert_eq!(out.status.code(), Some(2));
    }
}
