//! How a rank's runtime is set up: workers, scheduling policy, performance models,
//! tracing (read from the environment by [`RuntimeConfig::from_env`]).

use super::*;

/// How a rank's runtime is set up.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Worker threads (`STARLING_NCPU`; default: the machine's parallelism, which on Linux
    /// counts the cores of the process's affinity mask).
    pub workers: usize,
    /// Skip every kernel (`STARLING_DISABLE_KERNELS=1`): tasks are scheduled and complete
    /// without running, to measure submission cost.
    pub disable_kernels: bool,
    /// Run by each worker thread as it starts, before it takes any task: where an adapter
    /// binds the worker to a core (the MPI adapter's `STARLING_WORKERS_GETBIND`). `None`:
    /// workers run where the operating system puts them.
    pub on_worker_start: Option<WorkerStart>,
    /// The scheduling policy (`STARLING_SCHED`: `prio`, the default, `ws` or `dmda`; see
    /// [`crate::sched`]).
    pub sched: SchedPolicy,
    /// Whether and how tasks add samples to the performance models
    /// (`STARLING_CALIBRATE`: 0, 1 or 2; [`Calibrate`]). `None`: the models are used and
    /// calibrated only by the `dmda` policy; set, they are measured whatever the policy.
    pub calibrate: Option<Calibrate>,
    /// The folder the performance models are saved under (`None`: `STARLING_HOME`, else
    /// `$HOME/.starling`; see [`crate::perfmodel`]).
    pub model_home: Option<std::path::PathBuf>,
    /// A test hook: worker `w` runs at `worker_speed[w]` percent of its speed (missing
    /// entries: 100). A slowed worker sleeps after each CPU kernel so that the kernel
    /// takes `100 / percent` times as long, and its models are kept apart
    /// ([`Arch::ScaledCpu`]). `STARLING_WORKER_SPEED=100,50,...`.
    pub worker_speed: Vec<u32>,
    /// Print each worker's tasks, busy and idle time and the models' mean error at
    /// shutdown (`STARLING_SCHED_STATS=1`).
    pub sched_stats: bool,
    /// Whether the machine has fewer cores than ranks on it, so that a rank's workers
    /// cannot all have a core. `Some` says so (`STARLING_CROWDED=1` or `0`); `None`, the
    /// default, lets the launchers decide ([`RuntimeConfig::crowded_by`]: in-process
    /// ranks against the process's cores, an MPI rank from the ranks on its node against
    /// the node's cores); a runtime started with `None` is not crowded. When crowded, an
    /// idle worker that polls for work gives its core up at every poll rather than every
    /// sixteenth, and a task made ready counts on a polling worker of its rank rather
    /// than wake a sleeping one: the worker whose task is ready gets a core sooner (the
    /// 4-rank in-process ring on 2 cores: 16 – 19 µs a hop → 3 – 4 µs).
    pub crowded: Option<bool>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            disable_kernels: false,
            on_worker_start: None,
            sched: SchedPolicy::Prio,
            calibrate: None,
            model_home: None,
            worker_speed: Vec::new(),
            sched_stats: false,
            crowded: None,
        }
    }
}

/// A hook run by each worker thread as it starts, with the worker's index (0 to
/// [`RuntimeConfig::workers`] − 1): [`RuntimeConfig::on_worker_start`].
#[derive(Clone)]
pub struct WorkerStart(pub Arc<dyn Fn(usize) + Send + Sync>);

impl WorkerStart {
    /// The hook `f`.
    pub fn new(f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl fmt::Debug for WorkerStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WorkerStart(..)")
    }
}

impl RuntimeConfig {
    /// The defaults, overridden by `STARLING_NCPU`, `STARLING_DISABLE_KERNELS`,
    /// `STARLING_SCHED`, `STARLING_CALIBRATE`, `STARLING_HOME`, `STARLING_WORKER_SPEED`
    /// and `STARLING_SCHED_STATS`. An unknown policy or calibration value is reported on
    /// stderr and the default kept.
    pub fn from_env() -> Self {
        let mut c = Self::default();
        if let Some(n) = std::env::var("STARLING_NCPU")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            c.workers = n.max(1);
        }
        if env_flag("STARLING_DISABLE_KERNELS") {
            c.disable_kernels = true;
        }
        if let Ok(v) = std::env::var("STARLING_SCHED") {
            match SchedPolicy::parse(&v) {
                Some(p) => c.sched = p,
                None => eprintln!("[starling] STARLING_SCHED={v}: unknown policy, using prio"),
            }
        }
        if let Ok(v) = std::env::var("STARLING_CALIBRATE") {
            match Calibrate::parse(&v) {
                Some(k) => c.calibrate = Some(k),
                None => eprintln!("[starling] STARLING_CALIBRATE={v}: expected 0, 1 or 2"),
            }
        }
        c.model_home = std::env::var_os("STARLING_HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::PathBuf::from);
        if let Ok(v) = std::env::var("STARLING_WORKER_SPEED") {
            c.worker_speed = v
                .split(',')
                .map(|p| p.trim().parse::<u32>().unwrap_or(100).clamp(1, 100))
                .collect();
        }
        c.sched_stats = env_flag("STARLING_SCHED_STATS");
        c.crowded = crowded_env();
        c
    }

    /// Decides [`RuntimeConfig::crowded`], unless it is set already (or
    /// `STARLING_CROWDED` says), for `ranks` ranks (processes or in-process ranks) on a
    /// machine of `cores` cores: whether they outnumber them.
    #[must_use]
    pub fn crowded_by(mut self, ranks: usize, cores: usize) -> Self {
        self.crowded = Some(self.crowded.or_else(crowded_env).unwrap_or(ranks > cores));
        self
    }

    /// Whether the runtime runs crowded ([`RuntimeConfig::crowded`]; undecided: not).
    pub(super) fn is_crowded(&self) -> bool {
        self.crowded == Some(true)
    }

    /// How many polls an idle worker makes between two yields of its core
    /// ([`RuntimeConfig::crowded`]).
    pub(super) fn polls_per_yield(&self) -> u32 {
        if self.is_crowded() { 1 } else { 16 }
    }

    /// Worker `w`'s speed in percent ([`RuntimeConfig::worker_speed`]).
    pub(super) fn speed(&self, w: usize) -> u32 {
        self.worker_speed
            .get(w)
            .copied()
            .unwrap_or(100)
            .clamp(1, 100)
    }
}

/// `STARLING_CROWDED`: `Some(true)` for 1/true/on/yes, `Some(false)` for 0/false/off/no,
/// `None` unset or otherwise.
fn crowded_env() -> Option<bool> {
    match std::env::var("STARLING_CROWDED").ok()?.trim() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}
