//! Communication statistics: payload bytes and messages per peer rank.
//!
//! [`Stats`] is a counter table with one state bit: *enabled* or *disabled* (the
//! reference's `STARPU_MPI_STATS` / `starpu_mpi_comm_stats_enable/disable`, internals
//! §10.1). Its rules:
//!
//! - While disabled, [`record_send`](Stats::record_send) and
//!   [`record_recv`](Stats::record_recv) change nothing and succeed. A new table is
//!   disabled, as in the reference; [`enable`](Stats::enable) and
//!   [`disable`](Stats::disable) may be called at any time and keep what was counted.
//! - Only **payload bytes** are counted, once per message, when the payload is handed
//!   to the transport (a [`Kind::Eager`](crate::envelope::Kind::Eager) message counts
//!   its inline payload). Envelopes and acknowledgements are not counted, as in the
//!   reference.
//! - The totals ([`total`](Stats::total)) count every recorded message. The per-peer
//!   rows hold at most `PEERS` distinct ranks: a message to or from a rank that does not
//!   fit is still counted in the totals, and the call returns
//!   [`Full`] with [`Table::Stats`] and the rank handed back.
//! - Counters saturate at `u64::MAX` instead of wrapping.
//! - [`reset`](Stats::reset) clears every counter and keeps the enabled bit.
//! - [`was_enabled`](Stats::was_enabled) says whether the table was ever enabled: a
//!   table never enabled has counted nothing, and its zeros are no measurement.
//!
//! The core reads no clock: the adapter measures the elapsed time and passes it to
//! [`report`](Stats::report), whose [`Report`] prints the reference's line format.

use core::fmt;

use heapless::Vec;

use crate::error::{Full, Table};
use crate::types::Rank;

/// The counters of one peer (or, in [`Stats::total`], of all peers together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PeerStats {
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Messages sent.
    pub msgs_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Messages received.
    pub msgs_received: u64,
    /// The largest payload sent, in bytes.
    pub max_sent: u64,
}

impl PeerStats {
    /// All counters at zero.
    pub const ZERO: Self = Self {
        bytes_sent: 0,
        msgs_sent: 0,
        bytes_received: 0,
        msgs_received: 0,
        max_sent: 0,
    };

    fn add_send(&mut self, bytes: u64) {
        self.bytes_sent = self.bytes_sent.saturating_add(bytes);
        self.msgs_sent = self.msgs_sent.saturating_add(1);
        self.max_sent = self.max_sent.max(bytes);
    }

    fn add_recv(&mut self, bytes: u64) {
        self.bytes_received = self.bytes_received.saturating_add(bytes);
        self.msgs_received = self.msgs_received.saturating_add(1);
    }
}

/// Communication statistics of one rank, with rows for at most `PEERS` peer ranks.
///
/// See the [module docs](self) for the rules.
///
/// ```
/// use starling_core::stats::Stats;
/// use starling_core::Rank;
///
/// let mut stats = Stats::<4>::new();
/// stats.record_send(Rank(1), 100).unwrap(); // disabled: not counted
/// stats.enable();
/// stats.record_send(Rank(1), 1000).unwrap();
/// stats.record_recv(Rank(2), 24).unwrap();
/// assert_eq!(stats.sent_to(Rank(1)), 1000);
/// assert_eq!(stats.received_from(Rank(2)), 24);
/// let mut per_rank = [0u64; 3];
/// stats.retrieve(&mut per_rank);
/// assert_eq!(per_rank, [0, 1000, 0]);
/// ```
#[derive(Clone, Debug)]
pub struct Stats<const PEERS: usize> {
    enabled: bool,
    /// Enabled at least once.
    was_enabled: bool,
    /// One row per peer seen, sorted by rank.
    peers: Vec<(Rank, PeerStats), PEERS>,
    total: PeerStats,
}

impl<const PEERS: usize> Default for Stats<PEERS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const PEERS: usize> Stats<PEERS> {
    /// An empty, **disabled** table (the reference's default).
    pub const fn new() -> Self {
        Self {
            enabled: false,
            was_enabled: false,
            peers: Vec::new(),
            total: PeerStats::ZERO,
        }
    }

    /// Starts counting (`starpu_mpi_comm_stats_enable`).
    pub fn enable(&mut self) {
        self.enabled = true;
        self.was_enabled = true;
    }

    /// Stops counting, keeping what was counted (`starpu_mpi_comm_stats_disable`).
    pub fn disable(&mut self) {
        self.enabled = false;
    }

    /// Whether recording counts.
    #[inline]
    pub const fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the table was ever enabled (and so may hold counts): `false` means its
    /// zeros measure nothing.
    #[inline]
    pub const fn was_enabled(&self) -> bool {
        self.was_enabled
    }

    /// Counts a payload of `bytes` sent to `dest`; a no-op while disabled.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Stats`], handing `dest` back) if `dest` has no row yet and
    /// `PEERS` rows are taken. The message is still counted in [`total`](Self::total).
    pub fn record_send(&mut self, dest: Rank, bytes: u64) -> Result<(), Full<Rank>> {
        if !self.enabled {
            return Ok(());
        }
        self.total.add_send(bytes);
        self.row(dest)?.add_send(bytes);
        Ok(())
    }

    /// Counts a payload of `bytes` received from `src`; a no-op while disabled.
    ///
    /// # Errors
    ///
    /// [`Full`] ([`Table::Stats`], handing `src` back) if `src` has no row yet and
    /// `PEERS` rows are taken. The message is still counted in [`total`](Self::total).
    pub fn record_recv(&mut self, src: Rank, bytes: u64) -> Result<(), Full<Rank>> {
        if !self.enabled {
            return Ok(());
        }
        self.total.add_recv(bytes);
        self.row(src)?.add_recv(bytes);
        Ok(())
    }

    /// The row of `rank`, created empty if needed.
    fn row(&mut self, rank: Rank) -> Result<&mut PeerStats, Full<Rank>> {
        let i = match self.peers.binary_search_by_key(&rank, |&(r, _)| r) {
            Ok(i) => i,
            Err(i) => {
                self.peers
                    .insert(i, (rank, PeerStats::ZERO))
                    .map_err(|_| Full::new(Table::Stats, rank))?;
                i
            }
        };
        // `i` is a valid index: found by the search, or just inserted there.
        Ok(&mut self.peers[i].1)
    }

    /// The counters of `rank` (all zero if nothing was recorded for it).
    pub fn peer(&self, rank: Rank) -> PeerStats {
        self.peers
            .binary_search_by_key(&rank, |&(r, _)| r)
            .ok()
            .and_then(|i| self.peers.get(i))
            .map_or(PeerStats::ZERO, |&(_, s)| s)
    }

    /// Payload bytes sent to `dest`.
    pub fn sent_to(&self, dest: Rank) -> u64 {
        self.peer(dest).bytes_sent
    }

    /// Payload bytes received from `src`.
    pub fn received_from(&self, src: Rank) -> u64 {
        self.peer(src).bytes_received
    }

    /// Writes the payload bytes sent to each destination into `out`, indexed by rank
    /// (`starpu_mpi_comm_stats_retrieve`); ranks with no traffic get 0, ranks at or
    /// beyond `out.len()` are left out.
    ///
    /// Unlike the reference, which leaves the buffer untouched while disabled, this
    /// always writes what was counted (zeros if nothing was).
    pub fn retrieve(&self, out: &mut [u64]) {
        out.fill(0);
        for &(rank, s) in &self.peers {
            if let Some(slot) = out.get_mut(rank.index()) {
                *slot = s.bytes_sent;
            }
        }
    }

    /// The peers with a row and their counters, in increasing rank order.
    pub fn peers(&self) -> impl Iterator<Item = (Rank, PeerStats)> + '_ {
        self.peers.iter().copied()
    }

    /// The counters over all peers, including messages whose peer had no row.
    #[inline]
    pub const fn total(&self) -> PeerStats {
        self.total
    }

    /// Clears every counter and row; the enabled bit is kept.
    pub fn reset(&mut self) {
        self.peers.clear();
        self.total = PeerStats::ZERO;
    }

    /// A printable report of rank `me` after `elapsed_us` microseconds of run time.
    pub fn report(&self, me: Rank, elapsed_us: u64) -> Report<'_> {
        Report {
            peers: &self.peers,
            total: self.total,
            me,
            elapsed_us,
        }
    }
}

/// The statistics report of one rank, in the reference's line format; see
/// [`Stats::report`].
///
/// Every line starts with `[starling_comm_stats][me]` (whole-rank lines) or
/// `[starling_comm_stats][me:dst]` (one per destination that was sent something), like
/// the reference's `[starpu_comm_stats]` lines, so `starpu_mpi_comm_matrix.py`-style
/// tools can read them after the prefix rename. Received traffic, which the reference
/// does not report, goes on separate `[starling_comm_stats_recv]` lines so those
/// tools skip it. Values are tab-separated, with their unit after each:
///
/// - `B`: bytes; `MiB`: bytes / 1024²;
/// - `B/s`, `MiB/s`: per **second** of the elapsed time, which is given in
///   microseconds. The rate columns are left out when the elapsed time is 0.
///
/// Two reference quirks are designed out (internals §10.1): its "B/s" column is
/// really bytes per microsecond, and its TOTAL line divides by 1204 instead of 1024.
///
/// ```
/// use starling_core::stats::Stats;
/// use starling_core::Rank;
///
/// let mut stats = Stats::<4>::new();
/// stats.enable();
/// stats.record_send(Rank(1), 1 << 20).unwrap();
/// stats.record_send(Rank(1), 1 << 20).unwrap();
/// let text = stats.report(Rank(0), 2_000_000).to_string();
/// assert!(text.contains("[starling_comm_stats][0] TOTAL:\t2097152 B\t2.000 MiB\t1048576 B/s\t1.000 MiB/s\n"));
/// assert!(text.contains("[starling_comm_stats][0:1]\t2097152 B\t2.000 MiB\t1048576 B/s\t1.000 MiB/s\n"));
/// ```
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Report<'a> {
    peers: &'a [(Rank, PeerStats)],
    total: PeerStats,
    me: Rank,
    elapsed_us: u64,
}

/// Bytes per mebibyte.
const MIB: f64 = 1024.0 * 1024.0;

impl Report<'_> {
    /// Writes `\t<B> B\t<MiB> MiB[\t<B/s> B/s\t<MiB/s> MiB/s]`.
    fn amount(&self, f: &mut fmt::Formatter<'_>, bytes: u64) -> fmt::Result {
        let b = bytes as f64;
        write!(f, "\t{bytes} B\t{:.3} MiB", b / MIB)?;
        if self.elapsed_us > 0 {
            let per_s = b * 1_000_000.0 / self.elapsed_us as f64;
            write!(f, "\t{per_s:.0} B/s\t{:.3} MiB/s", per_s / MIB)?;
        }
        Ok(())
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let me = self.me.0;
        let t = self.total;
        write!(f, "[starling_comm_stats][{me}] TOTAL:")?;
        self.amount(f, t.bytes_sent)?;
        writeln!(f)?;
        writeln!(f, "[starling_comm_stats][{me}] nb_sends:\t{}", t.msgs_sent)?;
        writeln!(
            f,
            "[starling_comm_stats][{me}] max_sent_size:\t{} B",
            t.max_sent
        )?;
        if t.msgs_sent > 0 {
            let avg = t.bytes_sent as f64 / t.msgs_sent as f64;
            writeln!(
                f,
                "[starling_comm_stats][{me}] average_sent_size:\t{avg:.1} B"
            )?;
        }
        for &(dst, s) in self.peers.iter().filter(|(_, s)| s.msgs_sent > 0) {
            write!(f, "[starling_comm_stats][{me}:{}]", dst.0)?;
            self.amount(f, s.bytes_sent)?;
            writeln!(f)?;
        }
        write!(f, "[starling_comm_stats_recv][{me}] TOTAL:")?;
        self.amount(f, t.bytes_received)?;
        writeln!(f)?;
        writeln!(
            f,
            "[starling_comm_stats_recv][{me}] nb_recvs:\t{}",
            t.msgs_received
        )?;
        for &(src, s) in self.peers.iter().filter(|(_, s)| s.msgs_received > 0) {
            write!(f, "[starling_comm_stats_recv][{me}:{}]", src.0)?;
            self.amount(f, s.bytes_received)?;
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
