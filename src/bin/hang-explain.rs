//! `hang-explain`: merges the hang reports that the ranks of a job wrote when their
//! watchdog fired (`STARLING_HANG_DIR`, `rank<N>.txt`) into one explanation, as each rank
//! did when it gave up — for a job whose ranks were killed before they could print it, or
//! to read the reports again.
//!
//! ```text
//! hang-explain <dir> [ranks]
//! ```
//!
//! `ranks` is the size of the job; by default, the size the reports name. Prints one
//! finding per line (`starling::hang::explain`); beyond a few findings alike, their
//! summary, with every finding written to a file in `<dir>` whose path the last line
//! names (`starling::hang::explain_and_keep`). Exits with 1 when the directory holds no
//! report, 2 on bad arguments; unreadable or stale reports are named on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use starling::hang;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, ranks) = match args.as_slice() {
        [dir] => (PathBuf::from(dir), None),
        [dir, n] => match n.parse::<u32>() {
            Ok(n) if n > 0 => (PathBuf::from(dir), Some(n)),
            _ => {
                eprintln!("hang-explain: `{n}` is not a number of ranks");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: hang-explain <dir> [ranks]");
            return ExitCode::from(2);
        }
    };
    let size = ranks.unwrap_or_else(|| {
        // The size the first report found names (reports of ranks 0..4096 are looked for).
        let (found, _) = hang::read_reports_any(&dir, 4096);
        found.first().map_or(0, |r| r.size)
    });
    let (reports, bad) = hang::read_reports(&dir, size);
    for b in &bad {
        eprintln!("hang-explain: {b}");
    }
    if reports.is_empty() {
        eprintln!("hang-explain: no report in {}", dir.display());
        return ExitCode::FAILURE;
    }
    let lines = hang::explain_and_keep(size, &reports, &dir);
    if lines.is_empty() {
        println!("nothing pending in the {} report(s) found", reports.len());
    }
    for l in lines {
        println!("{l}");
    }
    ExitCode::SUCCESS
}
