//! `comm-matrix`: draws the communication statistics of a run as two rank × rank
//! heatmaps, data volume and bandwidth — the counterpart of the reference's
//! `starpu_mpi_comm_matrix.py`.
//!
//! ```text
//! comm-matrix <dir | file>... [-o <prefix>]
//! ```
//!
//! Reads every `[starling_comm_stats][me:dst]` line of the given files (a directory
//! stands for its `*.txt` files, such as the `rank<N>.txt` that `STARLING_COMM_STATS_DIR`
//! makes a run write; a file may also be a whole stderr log), then writes
//! `<prefix>-volume.svg`, `<prefix>-volume.png`, `<prefix>-bandwidth.svg` and
//! `<prefix>-bandwidth.png` (default prefix: `comm-matrix`). Rows are senders, columns
//! destinations; grey cells sent nothing. Text is drawn with an embedded DejaVu Sans, so
//! no system font library is needed.
//!
//! Exits with 1 on a file it cannot read or when no statistics line was found, and with 2
//! on bad arguments; malformed lines are skipped and counted on stderr.

use core::error::Error;
use core::ops::Range;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use starling::comm_matrix::CommMatrix;

/// The usage line.
const USAGE: &str = "usage: comm-matrix <dir | file>... [-o <prefix>]";

/// Size of one heatmap image, in pixels.
const SIZE: (u32, u32) = (900, 760);

/// Width of the colour-scale strip on the right.
const SCALE_WIDTH: u32 = 150;

/// Cells are annotated with their value up to this many ranks.
const ANNOTATE_UP_TO: u32 = 12;

/// The colour of a pair that sent nothing.
const NOTHING: RGBColor = RGBColor(225, 225, 225);

/// Anchors of the viridis colour scale, from 0 to the maximum.
const VIRIDIS: [(u8, u8, u8); 6] = [
    (68, 1, 84),
    (65, 68, 135),
    (42, 120, 142),
    (34, 168, 132),
    (122, 209, 81),
    (253, 231, 37),
];

/// The colour of `t` in `0.0..=1.0` on the viridis scale.
fn colour(t: f64) -> RGBColor {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (VIRIDIS.len() - 1) as f64;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |p: u8, q: u8| (f64::from(p) + (f64::from(q) - f64::from(p)) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// `v` with a binary unit: `512 B`, `1.50 KiB`, `3.00 MiB`... followed by `suffix`.
fn human(v: f64, suffix: &str) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 && v.fract() == 0.0 {
        format!("{v:.0} {}{suffix}", UNITS[u])
    } else {
        format!("{v:.2} {}{suffix}", UNITS[u])
    }
}

/// One heatmap to draw.
struct Map<'a> {
    title: String,
    /// The unit suffix after the byte unit (`""` or `"/s"`).
    suffix: &'a str,
    /// The value of each pair that has one, `None` elsewhere.
    value: &'a dyn Fn(u32, u32) -> Option<f64>,
}

/// An axis of `n` ranks: rank r spans `r..r + 1`, labelled at its centre.
struct RankAxis {
    n: u32,
    /// Whether rank 0 is at the far end of the pixel range (the top, for a y axis).
    down: bool,
}

impl Ranged for RankAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = v / f64::from(self.n);
        let t = if self.down { 1.0 - t } else { t };
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    /// The centres of every `k`-th rank, `k` as small as the hint allows.
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let most = hint.max_num_points().max(1) as u32;
        let step = self.n.div_ceil(most).max(1) as usize;
        (0..self.n)
            .step_by(step)
            .map(|r| f64::from(r) + 0.5)
            .collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..f64::from(self.n)
    }
}

/// Draws `map` of an `n`-rank matrix on `root`.
fn draw<DB>(root: &DrawingArea<DB, Shift>, n: u32, map: &Map<'_>) -> Result<(), Box<dyn Error>>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max = (0..n)
        .flat_map(|s| (0..n).map(move |d| (s, d)))
        .filter_map(|(s, d)| (map.value)(s, d))
        .fold(0.0f64, f64::max);
    let (w, _) = root.dim_in_pixel();
    let (left, right) = root.split_horizontally(w - SCALE_WIDTH);

    // The matrix: rank r spans r..r + 1 on both axes, destinations left to right,
    // senders top to bottom.
    let mut chart = ChartBuilder::on(&left)
        .caption(&map.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(RankAxis { n, down: false }, RankAxis { n, down: true })?;
    let label = |v: &f64| format!("{}", v.floor());
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(32)
        .y_labels(32)
        .x_label_formatter(&label)
        .y_label_formatter(&label)
        .x_desc("destination rank (grey: nothing sent)")
        .y_desc("sending rank")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()?;
    let cell = |s: u32, d: u32| {
        let (x, y) = (f64::from(d), f64::from(s));
        [(x, y), (x + 1.0, y + 1.0)]
    };
    let centre = |s: u32, d: u32| (f64::from(d) + 0.5, f64::from(s) + 0.5);
    let pairs = || (0..n).flat_map(|s| (0..n).map(move |d| (s, d)));
    chart.draw_series(pairs().map(|(s, d)| {
        let fill = match (map.value)(s, d) {
            Some(v) if max > 0.0 => colour(v / max),
            Some(_) => colour(0.0),
            None => NOTHING,
        };
        Rectangle::new(cell(s, d), fill.filled())
    }))?;
    // Thin white lines between cells.
    chart.draw_series(pairs().map(|(s, d)| Rectangle::new(cell(s, d), WHITE.stroke_width(1))))?;
    if n <= ANNOTATE_UP_TO {
        // Even sizes: plotters' glyph placement rounds half a size.
        let font_size = if n <= 6 { 16 } else { 12 };
        for (s, d) in pairs() {
            let Some(v) = (map.value)(s, d) else { continue };
            let t = if max > 0.0 { v / max } else { 0.0 };
            let ink = if t > 0.6 { BLACK } else { WHITE };
            let style = ("sans-serif", font_size)
                .into_font()
                .color(&ink)
                .pos(Pos::new(HPos::Center, VPos::Center));
            chart.draw_series(core::iter::once(Text::new(
                human(v, map.suffix),
                centre(s, d),
                style,
            )))?;
        }
    }

    // The colour scale (none when every value is 0).
    if max <= 0.0 {
        root.present()?;
        return Ok(());
    }
    let top = max;
    let mut scale = ChartBuilder::on(&right)
        .margin_top(55)
        .margin_bottom(65)
        .margin_right(10)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..1.0, 0.0..top)?;
    scale
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_formatter(&|v| human(*v, map.suffix))
        .label_style(("sans-serif", 14))
        .draw()?;
    const STEPS: u32 = 128;
    scale.draw_series((0..STEPS).map(|i| {
        let (a, b) = (
            f64::from(i) / f64::from(STEPS),
            f64::from(i + 1) / f64::from(STEPS),
        );
        Rectangle::new([(0.0, a * top), (1.0, b * top)], colour(a).filled())
    }))?;
    root.present()?;
    Ok(())
}

/// Writes `map` as `<base>.svg` and `<base>.png`; returns the two paths.
fn render(n: u32, map: &Map<'_>, base: &OsStr) -> Result<[PathBuf; 2], Box<dyn Error>> {
    let with = |ext: &str| {
        let mut p = base.to_os_string();
        p.push(ext);
        PathBuf::from(p)
    };
    let (svg, png) = (with(".svg"), with(".png"));
    draw(&SVGBackend::new(&svg, SIZE).into_drawing_area(), n, map)?;
    draw(&BitMapBackend::new(&png, SIZE).into_drawing_area(), n, map)?;
    Ok([svg, png])
}

/// The files named by `args`: a directory stands for its `*.txt` files, in name order.
fn inputs(args: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for a in args {
        if a.is_dir() {
            let entries = std::fs::read_dir(a).map_err(|e| format!("{}: {e}", a.display()))?;
            let mut txt: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "txt"))
                .collect();
            txt.sort();
            if txt.is_empty() {
                return Err(format!("{}: no .txt report in this directory", a.display()));
            }
            files.extend(txt);
        } else {
            files.push(a.clone());
        }
    }
    Ok(files)
}

/// What the command line asks for.
struct Args {
    inputs: Vec<PathBuf>,
    prefix: PathBuf,
}

/// The command line; `None` for `--help`.
fn parse_args() -> Result<Option<Args>, String> {
    let mut inputs = Vec::new();
    let mut prefix = PathBuf::from("comm-matrix");
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-o" | "--output") => {
                prefix = args.next().ok_or("-o needs a prefix")?.into();
            }
            Some("-h" | "--help") => return Ok(None),
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Err(format!("unknown option {s}"));
            }
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    if inputs.is_empty() {
        return Err("no input".into());
    }
    Ok(Some(Args { inputs, prefix }))
}

/// Reads the reports and draws the two heatmaps.
fn run(args: &Args) -> Result<(), String> {
    let mut m = CommMatrix::new();
    for f in inputs(&args.inputs)? {
        let text = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        m.add_text(&String::from_utf8_lossy(&text));
    }
    if m.malformed() > 0 {
        eprintln!(
            "comm-matrix: skipped {} malformed statistics line(s)",
            m.malformed()
        );
    }
    if m.duplicates() > 0 {
        eprintln!(
            "comm-matrix: {} (sender, destination) pair(s) appeared more than once; their bytes were added",
            m.duplicates()
        );
    }
    let n = m.size();
    if n == 0 {
        return Err("no [starling_comm_stats] line found (run with STARLING_COMM_STATS_DIR=<dir> or STARLING_COMM_STATS=1)".into());
    }
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded font could not be loaded")?;

    let bytes = |s: u32, d: u32| m.cell(s, d).map(|c| c.bytes as f64);
    let rate = |s: u32, d: u32| m.rate(s, d);
    let pairs = m.cells().count();
    let volume_map = Map {
        title: format!(
            "Data sent: {} in {pairs} pair(s), {n} rank(s)",
            human(m.total_bytes() as f64, "")
        ),
        suffix: "",
        value: &bytes,
    };
    let bandwidth_map = Map {
        title: if m.has_rates() {
            format!(
                "Bandwidth (bytes / sender's run time): sum {}",
                human(m.total_rate(), "/s")
            )
        } else {
            "Bandwidth: no rate in the reports (run time 0)".into()
        },
        suffix: "/s",
        value: &rate,
    };
    if let Some(dir) = args.prefix.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut written = Vec::new();
    for (map, name) in [(&volume_map, "volume"), (&bandwidth_map, "bandwidth")] {
        let mut base = args.prefix.clone().into_os_string();
        base.push(format!("-{name}"));
        let files = render(n, map, &base)
            .map_err(|e| format!("drawing {}: {e}", Path::new(&base).display()))?;
        written.extend(files);
    }
    println!(
        "{n} rank(s), {pairs} pair(s), {} sent",
        human(m.total_bytes() as f64, "")
    );
    for f in written {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("comm-matrix: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("comm-matrix: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_picks_binary_units() {
        assert_eq!(human(0.0, ""), "0 B");
        assert_eq!(human(1000.0, ""), "1000 B");
        assert_eq!(human(0.25, "/s"), "0.25 B/s");
        assert_eq!(human(1536.0, "/s"), "1.50 KiB/s");
        assert_eq!(human(3.0 * 1024.0 * 1024.0, ""), "3.00 MiB");
    }

    #[test]
    fn colour_runs_from_the_scales_first_to_last_anchor() {
        let rgb = |(r, g, b): (u8, u8, u8)| RGBColor(r, g, b);
        assert_eq!(colour(0.0), rgb(VIRIDIS[0]));
        assert_eq!(colour(1.0), rgb(VIRIDIS[5]));
        assert_eq!(colour(0.4), rgb(VIRIDIS[2]));
        // Out of range and NaN are clamped, never a panic.
        assert_eq!(colour(7.0), rgb(VIRIDIS[5]));
        assert_eq!(colour(-1.0), rgb(VIRIDIS[0]));
        assert_eq!(colour(f64::NAN), rgb(VIRIDIS[0]));
    }

    #[test]
    fn rank_axis_maps_rank_zero_to_the_top_when_down() {
        let x = RankAxis { n: 4, down: false };
        let y = RankAxis { n: 4, down: true };
        assert_eq!(x.map(&0.0, (0, 400)), 0);
        assert_eq!(x.map(&4.0, (0, 400)), 400);
        assert_eq!(y.map(&0.0, (0, 400)), 400);
        assert_eq!(x.key_points(32), vec![0.5, 1.5, 2.5, 3.5]);
        assert_eq!(RankAxis { n: 40, down: false }.key_points(20).len(), 20);
    }
}
