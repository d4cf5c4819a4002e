//! The progress line (`STARLING_PROGRESS=1`): tasks done / submitted, on stderr.
//!
//! Ranks that show progress register their runtime here; one thread per process samples
//! every registered runtime's counters (two integers read under the runtime's lock) every
//! 200 ms and rewrites the line when they changed: on a terminal in place
//! (`\r … ESC[K`), otherwise as a new line at most once a second. The ranks of an
//! in-process cluster share the line. The thread ends with the last rank, which prints
//! the final counts. A run pays one lock of its runtime's state per rank per 200 ms.
//!
//! The registry is a process-wide `static`, so it uses `std`'s lock directly rather than
//! the `sync` module's (nothing here is model-checked).

use core::fmt::Write as _;
use core::time::Duration;
use std::io::{IsTerminal as _, Write as _};
use std::sync::Mutex;
use std::time::Instant;

use starling_core::Rank;

use crate::runtime::task::Runtime;

/// How often the line is refreshed on a terminal.
const PERIOD: Duration = Duration::from_millis(200);
/// How often a new line is printed when stderr is not a terminal.
const LOG_PERIOD: Duration = Duration::from_secs(1);

struct Meter {
    ranks: Vec<(u64, Rank, Runtime)>,
    next_id: u64,
    /// Whether the sampling thread runs.
    running: bool,
    /// The counts last printed, if any since the first rank registered.
    last: Option<Vec<(Rank, (u64, u64))>>,
    last_print: Option<Instant>,
    since: Option<Instant>,
}

static METER: Mutex<Meter> = Mutex::new(Meter {
    ranks: Vec::new(),
    next_id: 0,
    running: false,
    last: None,
    last_print: None,
    since: None,
});

fn meter() -> std::sync::MutexGuard<'static, Meter> {
    METER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A rank shown on the progress line; dropping it takes the rank off.
pub(crate) struct Shown {
    id: u64,
}

/// Shows `runtime`'s tasks on the progress line as rank `rank`'s.
pub(crate) fn show(rank: Rank, runtime: Runtime) -> Shown {
    let mut m = meter();
    let id = m.next_id;
    m.next_id += 1;
    m.ranks.push((id, rank, runtime));
    m.since.get_or_insert_with(Instant::now);
    if !m.running {
        m.running = true;
        let spawned = std::thread::Builder::new()
            .name("starling-meter".into())
            .spawn(sample_loop);
        if spawned.is_err() {
            m.running = false;
        }
    }
    Shown { id }
}

impl Drop for Shown {
    fn drop(&mut self) {
        let mut m = meter();
        // The final counts, this rank's included.
        refresh(&mut m, true);
        m.ranks.retain(|(id, ..)| *id != self.id);
        if m.ranks.is_empty() {
            if m.last.take().is_some() && std::io::stderr().is_terminal() {
                eprintln!();
            }
            m.since = None;
            m.last_print = None;
        }
    }
}

fn sample_loop() {
    loop {
        std::thread::sleep(PERIOD);
        let mut m = meter();
        if m.ranks.is_empty() {
            m.running = false;
            return;
        }
        refresh(&mut m, false);
    }
}

/// The registered ranks' counts (done, submitted).
fn counts(m: &Meter) -> Vec<(Rank, (u64, u64))> {
    m.ranks
        .iter()
        .map(|(_, rank, rt)| (*rank, rt.task_counts()))
        .collect()
}

/// The line for `counts`, `secs` after the first rank registered.
fn line(counts: &[(Rank, (u64, u64))], secs: f64) -> String {
    let (done, submitted) = counts
        .iter()
        .fold((0, 0), |(d, s), (_, (d1, s1))| (d + d1, s + s1));
    let mut out = format!("[starling] tasks done/submitted: {done}/{submitted}");
    if counts.len() > 1 {
        out.push_str(" (");
        for (i, (rank, (d, s))) in counts.iter().take(8).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(out, "{sep}rank {}: {d}/{s}", rank.0);
        }
        if counts.len() > 8 {
            out.push_str(", …");
        }
        out.push(')');
    }
    let _ = write!(out, ", {secs:.1} s");
    out
}

/// Prints the line if the counts changed since it was last printed (off a terminal,
/// only once a [`LOG_PERIOD`] passed, or when `last`).
fn refresh(m: &mut Meter, last: bool) {
    let now = counts(m);
    if m.last.as_ref() == Some(&now) {
        return;
    }
    let terminal = std::io::stderr().is_terminal();
    if !terminal && !last && m.last_print.is_some_and(|t| t.elapsed() < LOG_PERIOD) {
        return;
    }
    let text = line(&now, m.since.map_or(0.0, |t| t.elapsed().as_secs_f64()));
    let mut err = std::io::stderr().lock();
    if terminal {
        let _ = write!(err, "\r{text}\x1b[K");
    } else {
        let _ = writeln!(err, "{text}");
    }
    let _ = err.flush();
    m.last_print = Some(Instant::now());
    m.last = Some(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_sums_the_ranks_and_lists_each() {
        let one = line(&[(Rank(0), (3, 10))], 1.26);
        assert_eq!(one, "[starling] tasks done/submitted: 3/10, 1.3 s");
        let two = line(&[(Rank(0), (3, 10)), (Rank(1), (4, 10))], 0.0);
        assert_eq!(
            two,
            "[starling] tasks done/submitted: 7/20 (rank 0: 3/10, rank 1: 4/10), 0.0 s"
        );
    }
}
