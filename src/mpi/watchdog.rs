//! The hang explainer under MPI: each process watches its own rank; when nothing
//! progressed for the watchdog's timeout while requests were pending, it writes its
//! report into the hang directory, waits a while for the other ranks' reports, merges
//! what it found ([`hang::explain`](crate::hang::explain)), prints it and gives up on its pending
//! requests. Files, not messages: a hung or dead peer may not answer a collective.
//!
//! A rank's own activity does not tell a hung job from a busy one: a rank that finished
//! its work waits in the closing barrier of shutdown, and a rank waits for a message,
//! while a peer computes for longer than the timeout. So every watched rank also keeps a
//! heartbeat in the hang directory ([`Heartbeat`]: its file is rewritten whenever the rank
//! progressed), and a watchdog gives up only when no peer's heartbeat moved during its
//! rank's stall either ([`peer_moved`]) — as the in-process cluster's watchdog gives up
//! only when no rank moved. A peer stuck outside Starling (its heartbeat still) is given
//! up on as before.

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use starling_core::Rank;
use starling_std::hang::{self, Probe, RankReport, Watchdog};

/// The directory ranks write their reports into when `STARLING_HANG_DIR` is not set:
/// one per job in the temporary directory, named after the launcher's job id (Open MPI
/// and PMIx's `PMIX_NAMESPACE`, Open MPI's `OMPI_MCA_ess_base_jobid`, Slurm's
/// `SLURM_JOB_ID`.`SLURM_STEP_ID`; under MPICH's Hydra, which names no job, the process
/// id of the node's `hydra_pmi_proxy`, the parent of every rank it started there).
/// Node-local: a job on several nodes needs a shared `STARLING_HANG_DIR` for the ranks
/// to see each other's reports.
pub(crate) fn default_dir() -> Option<PathBuf> {
    let job = ["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            let id = std::env::var("SLURM_JOB_ID").ok()?;
            let step = std::env::var("SLURM_STEP_ID").unwrap_or_default();
            Some(format!("{id}.{step}"))
        })
        .or_else(hydra_job)?;
    let safe: String = job
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Some(std::env::temp_dir().join(format!("starling-hang-{safe}")))
}

/// Under MPICH's Hydra (each rank has a PMI connection, `PMI_FD`, to its node's proxy):
/// `hydra-<the proxy's process id>`.
#[cfg(unix)]
fn hydra_job() -> Option<String> {
    std::env::var_os("PMI_FD")?;
    Some(format!("hydra-{}", std::os::unix::process::parent_id()))
}

#[cfg(not(unix))]
fn hydra_job() -> Option<String> {
    None
}

/// Writes this rank's report, gathers the others' from `dir` for at most `wait`, and
/// merges them. Without a directory, only this rank's report is used.
pub(crate) fn explain(
    probe: &Probe,
    size: u32,
    dir: Option<&Path>,
    wait: Duration,
    header: String,
) -> Vec<String> {
    let mine = probe.report();
    let mut lines = vec![header];
    let mut notes = Vec::new();
    let reports: Vec<RankReport> = match dir {
        None => {
            notes.push(
                "only this rank's report: set STARLING_HANG_DIR to a directory every rank \
                 can write to for the others'"
                    .to_owned(),
            );
            vec![mine]
        }
        Some(dir) => {
            if let Err(e) = hang::write_report(dir, &mine) {
                notes.push(format!("cannot write {}: {e}", dir.display()));
            }
            let deadline = Instant::now() + wait;
            loop {
                let (mut found, bad) = hang::read_reports(dir, size);
                // Our own, as taken now, whatever the file holds.
                found.retain(|r| r.rank != mine.rank);
                let complete = found.len() + 1 >= size as usize;
                if complete || Instant::now() >= deadline {
                    notes.extend(bad);
                    found.push(mine);
                    found.sort_by_key(|r| r.rank);
                    if !complete {
                        notes.push(format!(
                            "reports read from {} ({} of {size} ranks)",
                            dir.display(),
                            found.len()
                        ));
                    }
                    break found;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    // A summary that leads with the cause; every finding goes to a file it names.
    let keep = dir.map_or_else(hang::hang_dir, Path::to_path_buf);
    lines.extend(hang::explain_and_keep(size, &reports, &keep));
    lines.extend(notes);
    lines
}

/// Starts the rank's watchdog: on a stall it explains (see [`explain`]), prints the
/// explanation, records it in `fired` and gives up on the rank's pending requests, so
/// that the application's blocking calls return with
/// [`CommError::Stalled`](crate::CommError::Stalled).
pub(crate) fn start(
    probe: Probe,
    size: u32,
    timeout: Duration,
    dir: Option<PathBuf>,
    fired: Arc<Mutex<Vec<String>>>,
) -> Watchdog {
    let rank: Rank = probe.rank();
    Watchdog::start(
        vec![probe],
        timeout,
        || 0,
        move |probes, idle| {
            if peer_moved(dir.as_deref(), size, rank, idle, timeout) {
                // A peer worked meanwhile: the job is not hung, this rank waits for it.
                return;
            }
            let header = format!(
                "rank {}: watchdog: nothing progressed for {:.1} s while requests were pending \
                 (STARLING_WATCHDOG_SECS); giving up",
                rank.0,
                idle.as_secs_f64()
            );
            let lines = explain(&probes[0], size, dir.as_deref(), timeout, header);
            let text = lines.join("\n");
            // One rank prints the merged explanation, the lowest that reported (every
            // rank's failed requests carry it all the same).
            let printer = dir
                .as_deref()
                .and_then(|d| hang::read_reports(d, size).0.first().map(|r| r.rank))
                .unwrap_or(rank);
            if printer == rank {
                eprintln!("[starling-mpi] {text}");
            } else {
                eprintln!(
                    "[starling-mpi] rank {}: watchdog: nothing progressed for {:.1} s; rank {} \
                     prints the explanation",
                    rank.0,
                    idle.as_secs_f64(),
                    printer.0
                );
            }
            probes[0].abandon(&text);
            fired
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(lines);
        },
    )
}

/// The file of rank `rank`'s heartbeat in the hang directory `dir`.
fn heartbeat_path(dir: &Path, rank: Rank) -> PathBuf {
    dir.join(format!("alive-rank{}", rank.0))
}

/// How often a heartbeat looks at its rank under a watchdog of `timeout`: four times per
/// timeout, between 50 ms and 15 s.
pub(crate) fn heartbeat_period(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(15))
}

/// Whether a rank of a job of `size` other than `me` progressed during the last `idle`
/// (a stall of this rank that long, under a watchdog of `timeout`), by its heartbeat.
/// A heartbeat written at `t` says its rank moved after `t` less one period (it looks
/// once a period), so only one written more than a period into the stall counts: a
/// peer's last move before the stall began (posting the receive of a deadlock, say)
/// does not. Never without a hang directory.
///
/// Asked only when this rank's watchdog would give up, not at each of its looks (as the
/// watchdog's `extra` activity is): each call reads one file per rank of the job.
pub(crate) fn peer_moved(
    dir: Option<&Path>,
    size: u32,
    me: Rank,
    idle: Duration,
    timeout: Duration,
) -> bool {
    let Some(dir) = dir else {
        return false;
    };
    let Some(since) = SystemTime::now()
        .checked_sub(idle)
        .and_then(|t| t.checked_add(heartbeat_period(timeout)))
    else {
        return false;
    };
    (0..size).filter(|&r| r != me.0).any(|r| {
        std::fs::metadata(heartbeat_path(dir, Rank(r)))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > since)
    })
}

/// A rank's heartbeat: a thread that looks at the rank every `period` and rewrites the
/// rank's file in the hang directory (`alive-rank<N>`) whenever it progressed since the
/// last look or runs a task, so that the file's time says when the rank last moved. A
/// rank that stands still (stuck outside Starling, or deadlocked) leaves it alone. The
/// thread stops, and the file goes, when this drops. A thread of its own rather than the
/// watchdog's looks: the watchdog is stopped while `MpiRank::shutdown` waits for the
/// rank's last tasks, which is when a rank that computes at the end must beat.
pub(crate) struct Heartbeat {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    dir: PathBuf,
}

impl Heartbeat {
    /// Starts the heartbeat of `probe`'s rank in `dir`, looked at every `period`.
    pub(crate) fn start(probe: Probe, dir: PathBuf, period: Duration) -> Option<Self> {
        let path = heartbeat_path(&dir, probe.rank());
        // A file of an earlier job would say this rank moved.
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir_all(&dir).ok()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let file = path.clone();
        let thread = std::thread::Builder::new()
            .name("starling-heartbeat".into())
            .spawn(move || {
                // Where the rank stands now: only a move from here on beats.
                let mut last = probe.activity();
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let now = probe.activity();
                    if now != last || now.busy > 0 {
                        let _ = std::fs::write(&file, format!("{}\n", now.completed));
                        last = now;
                    }
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            thread: Some(thread),
            path,
            dir,
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        // The last rank out removes the directory (it fails while others are in it).
        let _ = std::fs::remove_dir(&self.dir);
    }
}
