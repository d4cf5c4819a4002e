//! Performance models: how long a codelet's tasks take on each kind of worker, and how
//! long data take to move between memory nodes (the reference's `starpu_perfmodel`).
//!
//! # What is measured
//!
//! For each codelet (by name) and each [`Arch`] (a CPU worker, a CPU worker slowed by the
//! speed-factor test hook, a device), the runtime keeps:
//!
//! * a **history** ([`History`]) per [`Footprint`] — a hash of the sizes of the task's
//!   data, so that tasks on tiles of one size share an entry: the number of samples,
//!   their mean and their spread (the reference's `STARPU_HISTORY_BASED`);
//! * when the codelet gives a formula of its footprint ([`PerfModel::regression`]: the
//!   flops of a task of those sizes), a **linear regression** of the time against the
//!   formula's value ([`Regression`]), which predicts sizes never seen (the reference's
//!   `STARPU_REGRESSION_BASED`, here linear in the flops).
//!
//! A history entry predicts once it holds [`CALIBRATION_SAMPLES`] samples; until then the
//! implementation is *uncalibrated* and the `dmda` scheduler gives it tasks so that it
//! gets them (see [`SchedPolicy`](crate::SchedPolicy)). Samples are added while an entry
//! has too few, always with `STARLING_CALIBRATE=1`, and `STARLING_CALIBRATE=2` drops the
//! saved models first ([`Calibrate`]).
//!
//! The **bus** ([`Bus`]): latency and bandwidth from each memory node to each other one
//! (node 0 is main memory, the devices follow). A machine with CPUs only has main memory
//! alone and no bus entry: its tasks never wait for a copy.
//!
//! # The file
//!
//! Models are saved per machine in `<STARLING_HOME>/perfmodel/<hostname>.txt`
//! (`STARLING_HOME` defaults to `$HOME/.starling`), loaded when a runtime that uses them
//! starts and written back when it stops. A missing or read-only folder is a warning on
//! stderr, never a failure; a corrupted or truncated file is an error naming the file and
//! the line ([`ModelError`]), printed, and the run goes on uncalibrated. The file is plain
//! text, one record a line, fields separated by one space, times in seconds, every number
//! in Rust's shortest round-trip notation (so that a file read back is the same models,
//! bit for bit):
//!
//! ```text
//! starling-perfmodel 1
//! # lines starting with '#' are comments
//! bus <from node> <to node> <latency s> <bandwidth B/s>
//! history <codelet> <arch> <footprint, 8 hex digits> <bytes> <count> <mean s> <m2 s²>
//! regression <codelet> <arch> <count> <Σx> <Σy> <Σx²> <Σxy>
//! end <number of records>
//! ```
//!
//! `<arch>` is `cpu`, `cpu@<percent>` (a CPU worker at that speed, the test hook) or
//! `device`; `m2` is the sum of the squared deviations from the mean (the deviation is
//! `sqrt(m2 / count)`); in a regression `x` is the formula's value (flops) and `y` the
//! time. A codelet name is written with `%` escapes for `%`, spaces and line breaks. The
//! `end` line, with the count of the records above it, tells a truncated file from a
//! complete one.

use core::fmt;
use core::fmt::Write as _;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex as StdMutex, Weak};

use crate::sync::{Arc, Mutex, lock};

/// Samples a history entry needs before it predicts (the reference's
/// `STARPU_CALIBRATE_MINIMUM`, 10).
pub const CALIBRATION_SAMPLES: u64 = 10;

/// Where an implementation runs: the models keep one history per arch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Arch {
    /// A CPU worker.
    Cpu,
    /// A CPU worker slowed to this percent of its speed by the test hook
    /// ([`RuntimeConfig::worker_speed`](crate::RuntimeConfig::worker_speed)): its own
    /// class, so that the models tell slow workers from fast ones.
    ScaledCpu(u32),
    /// A device (a [`DeviceLayer`](crate::DeviceLayer)'s implementation).
    Device,
}

impl Arch {
    /// The arch of a CPU worker at `percent` of its speed (100: a plain CPU worker).
    pub fn cpu_at(percent: u32) -> Self {
        if percent >= 100 {
            Self::Cpu
        } else {
            Self::ScaledCpu(percent.max(1))
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(Self::Cpu),
            "device" => Some(Self::Device),
            _ => {
                let p: u32 = s.strip_prefix("cpu@")?.parse().ok()?;
                (1..100).contains(&p).then_some(Self::ScaledCpu(p))
            }
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::ScaledCpu(p) => write!(f, "cpu@{p}"),
            Self::Device => f.write_str("device"),
        }
    }
}

/// What a task's data look like to a model: a hash of their sizes (the reference's
/// footprint) and their total bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Footprint {
    /// FNV-1a of the sizes, in the order of the task's accesses.
    pub hash: u32,
    /// The sizes added up.
    pub bytes: u64,
}

impl Footprint {
    /// The footprint of data of `sizes` bytes, in the order of the task's accesses.
    pub fn of(sizes: impl IntoIterator<Item = usize>) -> Self {
        let mut hash: u32 = 0x811c_9dc5;
        let mut bytes = 0u64;
        for s in sizes {
            bytes += s as u64;
            for b in (s as u64).to_le_bytes() {
                hash ^= u32::from(b);
                hash = hash.wrapping_mul(0x0100_0193);
            }
        }
        Self { hash, bytes }
    }
}

/// Execution times of one codelet on one arch for one footprint: count, mean and the sum
/// of squared deviations (Welford's running form, exact to save and read back).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct History {
    /// The footprint's total bytes (for readers of the file; not part of the key).
    pub bytes: u64,
    /// Samples.
    pub count: u64,
    /// Their mean, in seconds.
    pub mean: f64,
    /// The sum of their squared deviations from the mean, in seconds².
    pub m2: f64,
}

impl History {
    /// Adds a sample of `seconds`.
    pub fn add(&mut self, seconds: f64) {
        self.count += 1;
        let delta = seconds - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (seconds - self.mean);
    }

    /// The standard deviation of the samples, in seconds (0 with fewer than two).
    pub fn deviation(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2 / self.count as f64).sqrt()
        }
    }

    /// The mean once calibrated ([`CALIBRATION_SAMPLES`] samples), else `None`.
    pub fn predict(&self) -> Option<f64> {
        (self.count >= CALIBRATION_SAMPLES).then_some(self.mean)
    }
}

/// A least-squares line of time (y, seconds) against a codelet's formula (x, flops):
/// the sums it is fitted from.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Regression {
    /// Samples.
    pub count: u64,
    /// Σx.
    pub sx: f64,
    /// Σy.
    pub sy: f64,
    /// Σx².
    pub sxx: f64,
    /// Σxy.
    pub sxy: f64,
}

impl Regression {
    /// Adds a sample: the formula gave `x`, the task took `seconds`.
    pub fn add(&mut self, x: f64, seconds: f64) {
        self.count += 1;
        self.sx += x;
        self.sy += seconds;
        self.sxx += x * x;
        self.sxy += x * seconds;
    }

    /// The time predicted for `x`, once calibrated ([`CALIBRATION_SAMPLES`] samples of at
    /// least two distinct `x`); never negative.
    pub fn predict(&self, x: f64) -> Option<f64> {
        if self.count < CALIBRATION_SAMPLES {
            return None;
        }
        let n = self.count as f64;
        let det = n * self.sxx - self.sx * self.sx;
        if det <= f64::EPSILON * n * self.sxx {
            return None;
        }
        let slope = (n * self.sxy - self.sx * self.sy) / det;
        let intercept = (self.sy - slope * self.sx) / n;
        Some((slope * x + intercept).max(0.0))
    }
}

/// A link between two memory nodes: a copy of `b` bytes takes `latency + b / bandwidth`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bus {
    /// Seconds.
    pub latency: f64,
    /// Bytes per second.
    pub bandwidth: f64,
}

impl Bus {
    /// The expected time of a copy of `bytes` bytes, in seconds.
    pub fn time(&self, bytes: u64) -> f64 {
        if bytes == 0 {
            0.0
        } else {
            self.latency + bytes as f64 / self.bandwidth
        }
    }
}

/// The models of one codelet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CodeletModel {
    /// Histories by arch and footprint hash.
    pub history: BTreeMap<(Arch, u32), History>,
    /// Regressions by arch (codelets with a formula).
    pub regression: BTreeMap<Arch, Regression>,
}

/// The models of a machine: what its file holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Models {
    /// By codelet name.
    pub codelets: BTreeMap<String, CodeletModel>,
    /// By (from, to) memory node; node 0 is main memory.
    pub bus: BTreeMap<(u32, u32), Bus>,
}

/// A model file that cannot be read: which file, which line (1-based; the line after
/// the last for a truncated file) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {what}", file.display())]
pub struct ModelError {
    /// The file.
    pub file: PathBuf,
    /// The line, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub what: String,
}

/// The first line of a model file.
const MAGIC: &str = "starling-perfmodel 1";

impl Models {
    /// The models in `text`, read from `file` (named in errors).
    ///
    /// # Errors
    /// The first line that is not a record of the format, or a missing `end` line.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ModelError> {
        let err = |line: usize, what: String| ModelError {
            file: file.to_path_buf(),
            line,
            what,
        };
        let mut m = Self::default();
        let mut records = 0usize;
        let mut ended = false;
        let mut lines = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            lines = line;
            if i == 0 {
                if raw != MAGIC {
                    return Err(err(line, format!("expected `{MAGIC}`")));
                }
                continue;
            }
            if raw.starts_with('#') || raw.trim().is_empty() {
                continue;
            }
            if ended {
                return Err(err(line, "a record after the `end` line".to_owned()));
            }
            let f: Vec<&str> = raw.split(' ').collect();
            let num = |k: usize| -> Result<f64, ModelError> {
                let s = f
                    .get(k)
                    .ok_or_else(|| err(line, format!("field {} missing", k + 1)))?;
                s.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| err(line, format!("`{s}` is not a finite number")))
            };
            let int = |k: usize| -> Result<u64, ModelError> {
                let s = f
                    .get(k)
                    .ok_or_else(|| err(line, format!("field {} missing", k + 1)))?;
                s.parse::<u64>()
                    .map_err(|_| err(line, format!("`{s}` is not a count")))
            };
            let arity = |n: usize| {
                if f.len() == n {
                    Ok(())
                } else {
                    Err(err(line, format!("{} fields, expected {n}", f.len())))
                }
            };
            let arch = |k: usize| {
                Arch::parse(f[k]).ok_or_else(|| err(line, format!("`{}` is no arch", f[k])))
            };
            match f[0] {
                "bus" => {
                    arity(5)?;
                    let node = |k| {
                        u32::try_from(int(k)?).map_err(|_| err(line, "node out of range".into()))
                    };
                    let bus = Bus {
                        latency: num(3)?,
                        bandwidth: num(4)?,
                    };
                    if bus.latency < 0.0 || bus.bandwidth <= 0.0 {
                        return Err(err(line, "a negative latency or bandwidth".to_owned()));
                    }
                    m.bus.insert((node(1)?, node(2)?), bus);
                }
                "history" => {
                    arity(9)?;
                    let name = unescape(f[1]).ok_or_else(|| err(line, "bad escape".into()))?;
                    let fp = u32::from_str_radix(f[3], 16)
                        .ok()
                        .filter(|_| f[3].len() == 8)
                        .ok_or_else(|| err(line, format!("`{}` is no footprint", f[3])))?;
                    let h = History {
                        bytes: int(4)?,
                        count: int(5)?,
                        mean: num(6)?,
                        m2: num(7)?,
                    };
                    // The 9th field, the deviation, is for readers: checked, then recomputed.
                    num(8)?;
                    m.codelets
                        .entry(name)
                        .or_default()
                        .history
                        .insert((arch(2)?, fp), h);
                }
                "regression" => {
                    arity(8)?;
                    let name = unescape(f[1]).ok_or_else(|| err(line, "bad escape".into()))?;
                    let r = Regression {
                        count: int(3)?,
                        sx: num(4)?,
                        sy: num(5)?,
                        sxx: num(6)?,
                        sxy: num(7)?,
                    };
                    m.codelets
                        .entry(name)
                        .or_default()
                        .regression
                        .insert(arch(2)?, r);
                }
                "end" => {
                    arity(2)?;
                    let n = int(1)?;
                    if n != records as u64 {
                        return Err(err(line, format!("{records} records, `end` says {n}")));
                    }
                    ended = true;
                    continue;
                }
                other => return Err(err(line, format!("`{other}` is no record"))),
            }
            records += 1;
        }
        if lines == 0 {
            return Err(err(1, "an empty file".to_owned()));
        }
        if !ended {
            return Err(err(lines + 1, "truncated: no `end` line".to_owned()));
        }
        Ok(m)
    }

    /// The models as the file's text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{MAGIC}");
        out.push_str(
            "# Starling performance models: see the `perfmodel` module of starling-std.\n\
             # history <codelet> <arch> <footprint> <bytes> <count> <mean s> <m2 s^2> <deviation s>\n",
        );
        let mut records = 0;
        for ((from, to), b) in &self.bus {
            let _ = writeln!(out, "bus {from} {to} {:?} {:?}", b.latency, b.bandwidth);
            records += 1;
        }
        for (name, cm) in &self.codelets {
            let name = escape(name);
            for ((arch, fp), h) in &cm.history {
                let _ = writeln!(
                    out,
                    "history {name} {arch} {fp:08x} {} {} {:?} {:?} {:?}",
                    h.bytes,
                    h.count,
                    h.mean,
                    h.m2,
                    h.deviation()
                );
                records += 1;
            }
            for (arch, r) in &cm.regression {
                let _ = writeln!(
                    out,
                    "regression {name} {arch} {} {:?} {:?} {:?} {:?}",
                    r.count, r.sx, r.sy, r.sxx, r.sxy
                );
                records += 1;
            }
        }
        let _ = writeln!(out, "end {records}");
        out
    }

    /// The models saved in `file`; no models when it does not exist.
    ///
    /// # Errors
    /// The file cannot be read (line 0) or is not a model file ([`Models::parse`]).
    pub fn load(file: &Path) -> Result<Self, ModelError> {
        match std::fs::read_to_string(file) {
            Ok(text) => Self::parse(&text, file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(ModelError {
                file: file.to_path_buf(),
                line: 0,
                what: e.to_string(),
            }),
        }
    }

    /// Writes the models to `file` (through a temporary file renamed over it, so that a
    /// reader never sees half a file), creating its folder.
    ///
    /// # Errors
    /// The folder or the file cannot be written.
    pub fn save(&self, file: &Path) -> std::io::Result<()> {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, self.render())?;
        std::fs::rename(&tmp, file).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// The history of codelet `name` on `arch` for footprint `fp`, if any.
    pub fn history(&self, name: &str, arch: Arch, fp: u32) -> Option<&History> {
        self.codelets.get(name)?.history.get(&(arch, fp))
    }
}

fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            ' ' => out.push_str("%20"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            '\t' => out.push_str("%09"),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        out.push_str("%00");
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    if s == "%00" {
        return Some(String::new());
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.split('%');
    out.push_str(it.next()?);
    for part in it {
        let code = u8::from_str_radix(part.get(..2)?, 16).ok()?;
        if !matches!(code, b'%' | b' ' | b'\n' | b'\r' | b'\t') {
            return None;
        }
        out.push(char::from(code));
        out.push_str(&part[2..]);
    }
    Some(out)
}

/// A codelet's performance model (the reference's `starpu_perfmodel`): history-based,
/// the default of every codelet with an implementation, or a regression on a formula.
#[derive(Clone)]
pub struct PerfModel {
    pub(crate) formula: Option<Arc<Formula>>,
}

/// The flops of a task whose data have these sizes in bytes, in access order.
pub type Formula = dyn Fn(&[usize]) -> f64 + Send + Sync;

impl fmt::Debug for PerfModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.formula.is_some() {
            "PerfModel::Regression"
        } else {
            "PerfModel::History"
        })
    }
}

impl PerfModel {
    /// A history-based model (the reference's `STARPU_HISTORY_BASED`): a mean per data
    /// footprint. What every codelet has unless it says otherwise.
    pub fn history() -> Self {
        Self { formula: None }
    }

    /// A regression on `flops` (the reference's `STARPU_REGRESSION_BASED`, linear in
    /// the formula's value): the time of a task is fitted as `a · flops(sizes) + b`, so
    /// that sizes never measured are predicted too. The history is kept as well and
    /// predicts first where it is calibrated.
    pub fn regression(flops: impl Fn(&[usize]) -> f64 + Send + Sync + 'static) -> Self {
        Self {
            formula: Some(Arc::new(flops)),
        }
    }
}

/// What `STARLING_CALIBRATE` asks (the reference's `STARPU_CALIBRATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Calibrate {
    /// `0` (the default): use the models; add samples only where an entry has fewer than
    /// [`CALIBRATION_SAMPLES`].
    #[default]
    Auto,
    /// `1`: add every sample.
    Always,
    /// `2`: drop the saved models and start again, adding every sample.
    Reset,
}

impl Calibrate {
    /// `0`, `1` or `2`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "0" => Some(Self::Auto),
            "1" => Some(Self::Always),
            "2" => Some(Self::Reset),
            _ => None,
        }
    }
}

/// The folder models are saved under: `dir` when given, else `STARLING_HOME`, else
/// `$HOME/.starling`; `None` when none is known.
pub fn home(dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = dir {
        return Some(d.to_path_buf());
    }
    if let Some(h) = std::env::var_os("STARLING_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".starling"))
}

/// The model file of this machine under `home`: `<home>/perfmodel/<hostname>.txt`.
pub fn machine_file(home: &Path) -> PathBuf {
    home.join("perfmodel").join(format!("{}.txt", hostname()))
}

fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

/// The models a runtime uses: one per model file in a process, shared by the ranks of
/// the process that use it, loaded when the first opens it and saved when each stops.
pub(crate) struct Store {
    /// Where it is saved; `None`: nowhere (no home folder known).
    file: Option<PathBuf>,
    calibrate: Calibrate,
    models: Mutex<Models>,
}

/// The stores open in this process, by file. A plain `std` mutex: a static needs a
/// `const` constructor, and this registry is no structure the loom models check.
static STORES: StdMutex<Vec<(PathBuf, Weak<Store>)>> = StdMutex::new(Vec::new());

impl Store {
    /// The store of the model file under `home` (see [`home`]), opened (loaded) once per
    /// process and file. A file that cannot be read is reported on stderr, naming the
    /// file and line, and the store starts empty: the run goes on uncalibrated.
    pub(crate) fn open(home_dir: Option<&Path>, calibrate: Calibrate) -> Arc<Self> {
        let Some(file) = home(home_dir).map(|h| machine_file(&h)) else {
            eprintln!(
                "[starling] warning: no STARLING_HOME and no HOME: performance models are \
                 kept in memory only"
            );
            return Arc::new(Self {
                file: None,
                calibrate,
                models: Mutex::new(Models::default()),
            });
        };
        let mut stores = STORES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stores.retain(|(_, w)| w.strong_count() > 0);
        if let Some(s) = stores
            .iter()
            .find(|(f, _)| *f == file)
            .and_then(|(_, w)| w.upgrade())
        {
            return s;
        }
        let models = if calibrate == Calibrate::Reset {
            Models::default()
        } else {
            Models::load(&file).unwrap_or_else(|e| {
                eprintln!(
                    "[starling] error: performance models: {e}; the run goes on uncalibrated"
                );
                Models::default()
            })
        };
        let store = Arc::new(Self {
            file: Some(file.clone()),
            calibrate,
            models: Mutex::new(models),
        });
        stores.push((file, Arc::downgrade(&store)));
        store
    }

    /// The expected time of a task of codelet `name` (with `model`) on `arch`, on data of
    /// `sizes` bytes: the history's mean where calibrated, else the regression's line;
    /// `None` while uncalibrated.
    pub(crate) fn predict(
        &self,
        name: &str,
        model: Option<&PerfModel>,
        arch: Arch,
        sizes: &[usize],
    ) -> Option<f64> {
        let fp = Footprint::of(sizes.iter().copied());
        let models = lock(&self.models);
        let cm = models.codelets.get(name)?;
        if let Some(t) = cm.history.get(&(arch, fp.hash)).and_then(History::predict) {
            return Some(t);
        }
        let formula = model.and_then(|m| m.formula.as_ref())?;
        cm.regression.get(&arch)?.predict(formula(sizes))
    }

    /// Adds a measured time, as [`Calibrate`] says.
    pub(crate) fn record(
        &self,
        name: &str,
        model: Option<&PerfModel>,
        arch: Arch,
        sizes: &[usize],
        seconds: f64,
    ) {
        let fp = Footprint::of(sizes.iter().copied());
        let mut models = lock(&self.models);
        let cm = match models.codelets.get_mut(name) {
            Some(cm) => cm,
            None => models.codelets.entry(name.to_owned()).or_default(),
        };
        let h = cm.history.entry((arch, fp.hash)).or_default();
        if self.calibrate == Calibrate::Auto && h.count >= CALIBRATION_SAMPLES {
            return;
        }
        h.bytes = fp.bytes;
        h.add(seconds);
        if let Some(formula) = model.and_then(|m| m.formula.as_ref()) {
            cm.regression
                .entry(arch)
                .or_default()
                .add(formula(sizes), seconds);
        }
    }

    /// The link from memory node `from` to `to`, if measured.
    pub(crate) fn bus(&self, from: u32, to: u32) -> Option<Bus> {
        lock(&self.models).bus.get(&(from, to)).copied()
    }

    /// Records the link from `from` to `to` (measured at first start).
    pub(crate) fn set_bus(&self, from: u32, to: u32, bus: Bus) {
        lock(&self.models).bus.insert((from, to), bus);
    }

    /// Writes the models to their file; a folder that cannot be written is a warning.
    pub(crate) fn save(&self) {
        let Some(file) = &self.file else { return };
        let models = lock(&self.models).clone();
        if let Err(e) = models.save(file) {
            eprintln!(
                "[starling] warning: cannot save the performance models to {}: {e}",
                file.display()
            );
        }
    }
}

#[cfg(test)]
mod tests;
