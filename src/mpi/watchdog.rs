//! The hang explainer under MPI: each process watches its own rank; when nothing
//! progressed for the watchdog's timeout while requests were pending, it writes its
//! report into the hang directory, waits a while for the other ranks' reports, merges
//! what it found ([`hang::explain`](crate::hang::explain)), prints it and gives up on its pending
//! requests. Files, not messages: a hung or dead peer may not answer a collective.

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

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
