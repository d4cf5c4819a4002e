//! Reading the ranks' communication statistics back into a rank × rank matrix.
//!
//! With statistics on, every rank prints (and, with
//! [`ClusterConfig::stats_dir`](crate::ClusterConfig::stats_dir), writes to
//! `<dir>/rank<N>.txt`) the report of
//! [`starling_core::stats::Report`]. Its per-destination lines read
//!
//! ```text
//! [starling_comm_stats][<me>:<dst>] <bytes> B <MiB> MiB <rate> B/s <rate> MiB/s
//! ```
//!
//! (fields separated by tabs; the rate columns are absent when the rank's run time was
//! 0). [`CommMatrix::parse`] turns any text holding such lines — report files, or a whole stderr log — into the
//! matrix of bytes sent from each rank (row) to each rank (column), with the sender's
//! average rate over its run. The `comm-matrix` binary draws it as heatmaps.
//!
//! The rules:
//!
//! - A line is read from the first `[starling_comm_stats][` it contains, so prefixes such
//!   as `mpirun --tag-output`'s are fine. Other lines, including the
//!   `[starling_comm_stats_recv]` ones, are ignored without counting.
//! - `[starling_comm_stats][<me>] ...` lines (the whole-rank totals) only make the
//!   matrix at least `me + 1` wide, so a rank that sent nothing still gets its row.
//! - A `[starling_comm_stats]` line that cannot be read — a rank that is not a number or
//!   not below [`MAX_RANKS`], no `<n> B` field, a rate that is not a finite non-negative
//!   number — is skipped and counted in [`CommMatrix::malformed`]. Parsing never panics.
//! - A pair seen twice (two reports of one rank) is summed, and counted in
//!   [`CommMatrix::duplicates`]; its rate becomes the total bytes over the total time
//!   (each line's time being its bytes over its rate).

use std::collections::BTreeMap;

/// The prefix of every line the matrix is built from.
pub const PREFIX: &str = "[starling_comm_stats][";

/// Ranks at or above this bound make a line malformed (a guard against a corrupted
/// report asking for an absurd matrix).
pub const MAX_RANKS: u32 = 1 << 16;

/// The traffic of one (sender, destination) pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Payload bytes sent.
    pub bytes: u64,
    /// The sender's average rate for this destination, in bytes per second of its run,
    /// when the report had one.
    pub rate: Option<f64>,
}

/// What one line holds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Line {
    /// Not a statistics line.
    Other,
    /// A whole-rank line of rank `me`.
    Rank(u32),
    /// A per-destination line.
    Pair { src: u32, dst: u32, cell: Cell },
}

/// The line could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Malformed;

/// A rank number below [`MAX_RANKS`].
fn rank(s: &str) -> Result<u32, Malformed> {
    match s.trim().parse::<u32>() {
        Ok(r) if r < MAX_RANKS => Ok(r),
        _ => Err(Malformed),
    }
}

/// Reads one line; total: every input gives a value or [`Malformed`].
fn parse_line(line: &str) -> Result<Line, Malformed> {
    let Some(at) = line.find(PREFIX) else {
        return Ok(Line::Other);
    };
    let rest = &line[at + PREFIX.len()..];
    let (who, fields) = rest.split_once(']').ok_or(Malformed)?;
    let Some((src, dst)) = who.split_once(':') else {
        return rank(who).map(Line::Rank);
    };
    let (src, dst) = (rank(src)?, rank(dst)?);
    // Fields are `<value> <unit>` pairs separated by white space.
    let tokens: Vec<&str> = fields.split_whitespace().collect();
    let mut bytes = None;
    let mut rate = None;
    for pair in tokens.windows(2) {
        match pair[1] {
            "B" if bytes.is_none() => bytes = Some(pair[0].parse::<u64>().map_err(|_| Malformed)?),
            "B/s" if rate.is_none() => {
                let r = pair[0].parse::<f64>().map_err(|_| Malformed)?;
                if !r.is_finite() || r < 0.0 {
                    return Err(Malformed);
                }
                rate = Some(r);
            }
            _ => {}
        }
    }
    let bytes = bytes.ok_or(Malformed)?;
    Ok(Line::Pair {
        src,
        dst,
        cell: Cell { bytes, rate },
    })
}

/// Bytes and rates sent between ranks, read from statistics reports.
///
/// ```
/// use starling::comm_matrix::CommMatrix;
///
/// let m = CommMatrix::parse(
///     "[starling_comm_stats][0:1]\t2048 B\t0.002 MiB\t1024 B/s\t0.001 MiB/s\n\
///      [starling_comm_stats][2] TOTAL:\t0 B\t0.000 MiB\n\
///      [starling_comm_stats][1:x]\tgarbage\n",
/// );
/// assert_eq!(m.size(), 3);
/// assert_eq!(m.bytes(0, 1), 2048);
/// assert_eq!(m.rate(0, 1), Some(1024.0));
/// assert_eq!(m.malformed(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommMatrix {
    size: u32,
    cells: BTreeMap<(u32, u32), Cell>,
    malformed: usize,
    duplicates: usize,
}

impl CommMatrix {
    /// An empty matrix.
    pub fn new() -> Self {
        Self::default()
    }

    /// The matrix of the statistics lines in `text`.
    pub fn parse(text: &str) -> Self {
        let mut m = Self::new();
        m.add_text(text);
        m
    }

    /// Adds the statistics lines of `text` (one report, or a log holding several).
    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            match parse_line(line) {
                Ok(Line::Other) => {}
                Ok(Line::Rank(me)) => self.size = self.size.max(me + 1),
                Ok(Line::Pair { src, dst, cell }) => self.add(src, dst, cell),
                Err(Malformed) => self.malformed += 1,
            }
        }
    }

    fn add(&mut self, src: u32, dst: u32, cell: Cell) {
        self.size = self.size.max(src.max(dst) + 1);
        let Some(old) = self.cells.get_mut(&(src, dst)) else {
            self.cells.insert((src, dst), cell);
            return;
        };
        self.duplicates += 1;
        let bytes = old.bytes.saturating_add(cell.bytes);
        old.rate = match (old.rate, cell.rate) {
            (Some(r1), Some(r2)) => {
                // Rate = bytes over time; a line's time is its bytes over its rate.
                let time = |b: u64, r: f64| if r > 0.0 { b as f64 / r } else { 0.0 };
                let t = time(old.bytes, r1) + time(cell.bytes, r2);
                Some(if t > 0.0 { bytes as f64 / t } else { 0.0 })
            }
            (r1, r2) => r1.or(r2),
        };
        old.bytes = bytes;
    }

    /// The number of ranks: one more than the highest rank any statistics line named.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The traffic of `src` to `dst`, if a line gave it.
    pub fn cell(&self, src: u32, dst: u32) -> Option<Cell> {
        self.cells.get(&(src, dst)).copied()
    }

    /// Payload bytes `src` sent to `dst` (0 when no line said).
    pub fn bytes(&self, src: u32, dst: u32) -> u64 {
        self.cells.get(&(src, dst)).map_or(0, |c| c.bytes)
    }

    /// The rate of `src` to `dst` in bytes per second, when a line gave one.
    pub fn rate(&self, src: u32, dst: u32) -> Option<f64> {
        self.cells.get(&(src, dst)).and_then(|c| c.rate)
    }

    /// The pairs that sent something, in (sender, destination) order.
    pub fn cells(&self) -> impl Iterator<Item = ((u32, u32), Cell)> + '_ {
        self.cells.iter().map(|(&k, &c)| (k, c))
    }

    /// Bytes sent, row by row: `rows()[src][dst]`.
    pub fn volume_rows(&self) -> Vec<Vec<u64>> {
        let n = self.size as usize;
        let mut rows = vec![vec![0; n]; n];
        for (&(s, d), c) in &self.cells {
            rows[s as usize][d as usize] = c.bytes;
        }
        rows
    }

    /// All bytes sent between ranks.
    pub fn total_bytes(&self) -> u64 {
        self.cells
            .values()
            .fold(0u64, |t, c| t.saturating_add(c.bytes))
    }

    /// The sum of the pairs' rates, in bytes per second (the cluster's aggregate rate when
    /// the ranks ran for the same time).
    pub fn total_rate(&self) -> f64 {
        self.cells.values().filter_map(|c| c.rate).sum()
    }

    /// Whether any line gave a rate.
    pub fn has_rates(&self) -> bool {
        self.cells.values().any(|c| c.rate.is_some())
    }

    /// Statistics lines that could not be read and were skipped.
    pub fn malformed(&self) -> usize {
        self.malformed
    }

    /// Lines whose (sender, destination) pair had been seen before; their bytes were
    /// added.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The report `starling_core` prints, with two destinations and rates.
    fn report() -> String {
        let mut stats = starling_core::stats::Stats::<4>::new();
        stats.enable();
        stats.record_send(starling_core::Rank(1), 1 << 20).unwrap();
        stats.record_send(starling_core::Rank(3), 1000).unwrap();
        stats.record_recv(starling_core::Rank(2), 77).unwrap();
        stats.report(starling_core::Rank(0), 2_000_000).to_string()
    }

    #[test]
    fn reads_the_cores_report_exactly() {
        let m = CommMatrix::parse(&report());
        assert_eq!(m.size(), 4);
        assert_eq!(m.malformed(), 0);
        assert_eq!(m.bytes(0, 1), 1 << 20);
        assert_eq!(m.rate(0, 1), Some(524_288.0));
        assert_eq!(m.bytes(0, 3), 1000);
        assert_eq!(m.rate(0, 3), Some(500.0));
        // Received traffic is on `_recv` lines, which are not read.
        assert_eq!(m.bytes(2, 0), 0);
        assert_eq!(m.bytes(0, 2), 0);
        assert_eq!(m.cells().count(), 2);
        assert_eq!(m.total_bytes(), (1 << 20) + 1000);
        assert_eq!(m.total_rate(), 524_788.0);
    }

    #[test]
    fn report_without_elapsed_time_has_no_rates() {
        let mut stats = starling_core::stats::Stats::<4>::new();
        stats.enable();
        stats.record_send(starling_core::Rank(2), 64).unwrap();
        let m = CommMatrix::parse(&stats.report(starling_core::Rank(1), 0).to_string());
        assert_eq!(m.bytes(1, 2), 64);
        assert_eq!(m.rate(1, 2), None);
        assert!(!m.has_rates());
        assert_eq!(m.size(), 3);
    }

    #[test]
    fn whole_rank_lines_widen_the_matrix() {
        let m = CommMatrix::parse("[starling_comm_stats][5] nb_sends:\t0\n");
        assert_eq!(m.size(), 6);
        assert_eq!(m.cells().count(), 0);
        assert_eq!(m.volume_rows(), vec![vec![0; 6]; 6]);
    }

    #[test]
    fn other_lines_are_ignored_without_counting() {
        let m = CommMatrix::parse(
            "hello\n\n[starling_comm_stats_recv][0:1]\t5 B\n[starpu_comm_stats][0:1]\t5 B\n\
             [1,0]<stderr>:[starling_comm_stats][0:1]\t5 B\t0.000 MiB\n",
        );
        assert_eq!(m.malformed(), 0);
        assert_eq!(m.bytes(0, 1), 5);
        assert_eq!(m.size(), 2);
    }

    #[test]
    fn malformed_lines_are_counted_and_skipped() {
        let bad = [
            "[starling_comm_stats][",
            "[starling_comm_stats][0:1",
            "[starling_comm_stats][a:1]\t5 B",
            "[starling_comm_stats][0:-1]\t5 B",
            "[starling_comm_stats][0:1]",
            "[starling_comm_stats][0:1]\t5",
            "[starling_comm_stats][0:1]\tfive B",
            "[starling_comm_stats][0:1]\t-5 B",
            "[starling_comm_stats][0:1]\t5 B\tNaN B/s",
            "[starling_comm_stats][0:1]\t5 B\t-1 B/s",
            "[starling_comm_stats][0:1]\t5 B\tinf B/s",
            "[starling_comm_stats][0:99999999999]\t5 B",
            "[starling_comm_stats][65536:0]\t5 B",
            "[starling_comm_stats][x] TOTAL:",
            "[starling_comm_stats][1:2:3]\t5 B",
        ];
        let m = CommMatrix::parse(&bad.join("\n"));
        assert_eq!(m.malformed(), bad.len());
        assert_eq!(m.size(), 0);
        assert_eq!(m.cells().count(), 0);
    }

    #[test]
    fn duplicate_pairs_add_bytes_and_combine_rates() {
        // 1000 B over 1 s, then 3000 B over 1 s: 4000 B over 2 s.
        let m = CommMatrix::parse(
            "[starling_comm_stats][1:0]\t1000 B\t0 MiB\t1000 B/s\n\
             [starling_comm_stats][1:0]\t3000 B\t0 MiB\t3000 B/s\n",
        );
        assert_eq!(m.duplicates(), 1);
        assert_eq!(m.bytes(1, 0), 4000);
        assert_eq!(m.rate(1, 0), Some(2000.0));
    }

    #[test]
    fn a_duplicate_without_rate_keeps_the_known_rate() {
        let m = CommMatrix::parse(
            "[starling_comm_stats][1:0]\t1000 B\t0 MiB\t1000 B/s\n\
             [starling_comm_stats][1:0]\t3000 B\n",
        );
        assert_eq!(m.bytes(1, 0), 4000);
        assert_eq!(m.rate(1, 0), Some(1000.0));
    }

    #[test]
    fn counters_saturate() {
        let m = CommMatrix::parse(&format!(
            "[starling_comm_stats][0:1]\t{} B\n[starling_comm_stats][0:1]\t{} B\n\
             [starling_comm_stats][1:0]\t1 B\n",
            u64::MAX,
            u64::MAX
        ));
        assert_eq!(m.bytes(0, 1), u64::MAX);
        assert_eq!(m.total_bytes(), u64::MAX);
    }

    #[test]
    fn volume_rows_are_indexed_sender_then_destination() {
        let mut m = CommMatrix::new();
        m.add_text("[starling_comm_stats][0:2]\t7 B\n");
        m.add_text("[starling_comm_stats][2:1]\t9 B\n");
        assert_eq!(
            m.volume_rows(),
            vec![vec![0, 0, 7], vec![0, 0, 0], vec![0, 9, 0]]
        );
    }

    proptest! {
        #[test]
        fn any_text_parses_without_panic(text in "(\\PC|\t|\n){0,300}") {
            let m = CommMatrix::parse(&text);
            prop_assert!(m.malformed() <= text.lines().count());
        }

        #[test]
        fn a_statistics_line_is_either_read_or_counted(rest in "[0-9a:\\] \t.eEBs/+-]{0,40}") {
            let m = CommMatrix::parse(&format!("{PREFIX}{rest}"));
            prop_assert!(m.malformed() <= 1);
            prop_assert_eq!(m.malformed() == 1, m.size() == 0);
            prop_assert!(m.cells().count() <= 1);
        }
    }
}
