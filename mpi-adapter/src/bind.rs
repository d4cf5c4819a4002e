//! Workers bound to the cores the launcher gave the process (the reference's
//! `STARPU_WORKERS_GETBIND`).
//!
//! `mpirun` may bind each process to a few cores (Open MPI binds to a core with 2
//! processes or fewer, to a socket above; `--bind-to core`, `--cpu-set`, `taskset`). A rank
//! that ignored that mask would start one worker per core of the machine and let every
//! rank's workers compete for the same cores. A rank's default worker count is already
//! the number of cores in its mask (the runtime's `RuntimeConfig::default` counts them;
//! `STARLING_NCPU` overrides it). With binding on ([`Bindings::for_policy`]), the rank also
//! reads its process's affinity mask (`sched_getaffinity`) and pins worker `w` to the
//! mask's `w mod n`-th core (`sched_setaffinity`, from the worker's own thread as it
//! starts: [`Bindings::pin_worker`], which the facade installs as the runtime's
//! worker-start hook), so that its workers do not migrate between the cores and never
//! leave them. The progression thread and the application's threads keep the whole
//! process mask.
//!
//! `STARLING_WORKERS_GETBIND=1` turns it on, `=0` off; unset, it is on when the process
//! mask holds fewer cores than the machine has online — that is, when something (the
//! launcher, `taskset`) bound the process — and off otherwise. `STARLING_DISPLAY_BINDINGS=1`
//! (the reference's `STARPU_DISPLAY_BINDINGS`) prints each rank's cores and where each
//! worker runs, as read back from the worker's own thread.
//!
//! Only Linux has these calls; elsewhere binding is never on.

use std::sync::{Arc, Mutex, PoisonError};

/// Whether workers bind to the process's cores (the facade's `MpiConfig::getbind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetBind {
    /// Never (`STARLING_WORKERS_GETBIND=0`).
    Off,
    /// Always, on Linux (`STARLING_WORKERS_GETBIND=1`).
    On,
    /// When the process was bound to fewer cores than the machine has online
    /// (`STARLING_WORKERS_GETBIND` unset).
    Auto,
}

impl GetBind {
    /// `STARLING_WORKERS_GETBIND`: `0` is [`Off`](Self::Off), any other non-empty value
    /// [`On`](Self::On), unset or empty [`Auto`](Self::Auto).
    pub fn from_env() -> Self {
        match std::env::var("STARLING_WORKERS_GETBIND").as_deref() {
            Ok("0") => Self::Off,
            Ok(v) if !v.is_empty() => Self::On,
            _ => Self::Auto,
        }
    }
}

/// Where one worker runs: its core, and the cores its thread's mask holds once bound (read
/// back from the thread itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerBinding {
    /// The worker's index.
    pub worker: usize,
    /// The core it was pinned to.
    pub core: usize,
    /// Its thread's affinity mask after pinning, or the error that pinning met.
    pub mask: Result<Vec<usize>, String>,
}

/// The cores of a rank and where its workers run (the facade's `MpiRank::bindings`).
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// The cores of the process's affinity mask when the rank started, in increasing order.
    pub cores: Vec<usize>,
    /// One entry per worker that has started, in the order they did.
    pub workers: Arc<Mutex<Vec<WorkerBinding>>>,
}

impl Bindings {
    /// A copy of the workers' bindings, sorted by worker.
    pub fn workers(&self) -> Vec<WorkerBinding> {
        let mut w = self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        w.sort_by_key(|b| b.worker);
        w
    }

    /// The bindings `policy` asks for: the process's cores when binding is on, with no
    /// worker pinned yet; `None` when binding is off, or unsupported here.
    pub fn for_policy(policy: GetBind) -> Option<Self> {
        let cores = process_cores().ok()?;
        let on = match policy {
            GetBind::Off => false,
            GetBind::On => true,
            GetBind::Auto => online_cpus().is_some_and(|n| cores.len() < n),
        };
        if !on || cores.is_empty() {
            return None;
        }
        Some(Self {
            cores,
            workers: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Pins the calling thread, worker `worker`, to the `worker mod n`-th of the
    /// [`cores`](Self::cores), and records where it runs (its mask read back, or the
    /// error pinning met) in [`workers`](Self::workers), shared by every clone.
    pub fn pin_worker(&self, worker: usize) {
        if self.cores.is_empty() {
            return;
        }
        let core = self.cores[worker % self.cores.len()];
        let mask = pin_current_thread(core)
            .and_then(|()| current_thread_cores())
            .map_err(|e| e.to_string());
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(WorkerBinding { worker, core, mask });
    }
}

/// The cores of this process's affinity mask (`sched_getaffinity` of the process), in
/// increasing order.
///
/// # Errors
/// The system call's error; on systems other than Linux, `Unsupported`.
pub fn process_cores() -> std::io::Result<Vec<usize>> {
    sys::affinity(true)
}

/// The cores of the calling thread's affinity mask, in increasing order.
///
/// # Errors
/// The system call's error; on systems other than Linux, `Unsupported`.
pub fn current_thread_cores() -> std::io::Result<Vec<usize>> {
    sys::affinity(false)
}

/// Restricts the calling thread to `core`.
///
/// # Errors
/// The system call's error (`EINVAL` for a core outside the process's cpuset); on systems
/// other than Linux, `Unsupported`.
pub fn pin_current_thread(core: usize) -> std::io::Result<()> {
    sys::pin(core)
}

/// The number of processors online, if the system says.
pub fn online_cpus() -> Option<usize> {
    sys::online()
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;

    fn empty_set() -> libc::cpu_set_t {
        // SAFETY: `cpu_set_t` is a plain bit array; all zeros is the empty set.
        unsafe { core::mem::zeroed() }
    }

    /// The mask of the process (that is, of its main thread, whose id is the pid) or of
    /// the calling thread (id 0).
    pub(super) fn affinity(process: bool) -> io::Result<Vec<usize>> {
        let pid = if process {
            // SAFETY: `getpid` has no preconditions.
            unsafe { libc::getpid() }
        } else {
            0
        };
        let mut set = empty_set();
        // SAFETY: `set` is a valid, writable `cpu_set_t` of the size given.
        let rc = unsafe { libc::sched_getaffinity(pid, size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
        // SAFETY: `CPU_ISSET` reads the bit of a valid set; `c` is below `CPU_SETSIZE`.
        Ok((0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect())
    }

    pub(super) fn pin(core: usize) -> io::Result<()> {
        let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
        if core >= max {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let mut set = empty_set();
        // SAFETY: `core` is below `CPU_SETSIZE` (checked above); `set` is a valid set.
        unsafe { libc::CPU_SET(core, &mut set) };
        // SAFETY: `set` is a valid `cpu_set_t` of the size given; pid 0 is this thread.
        let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(super) fn online() -> Option<usize> {
        // SAFETY: `sysconf` has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        usize::try_from(n).ok().filter(|n| *n > 0)
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;

    pub(super) fn affinity(_process: bool) -> io::Result<Vec<usize>> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    pub(super) fn pin(_core: usize) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    pub(super) fn online() -> Option<usize> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_reads_back_its_one_core_and_the_process_keeps_its_mask() {
        let cores = process_cores().expect("the process's mask");
        assert!(!cores.is_empty());
        let last = *cores.last().expect("a core");
        let seen = std::thread::spawn(move || {
            pin_current_thread(last).expect("pin to a core of the mask");
            (current_thread_cores().expect("read back"), process_cores())
        })
        .join()
        .expect("the thread");
        assert_eq!(seen.0, vec![last]);
        // The process's mask is the main thread's, untouched by the worker's pinning.
        assert_eq!(seen.1.expect("the process's mask"), cores);
    }
}
