//! A [`Request`]: the application's handle on one point-to-point call, completed by the
//! progression thread and waited on (driving the rank's progress while it waits).

use starling_core::{DataId, Rank, Tag};

use crate::error::{CommError, Noted};
use crate::io::progress::{Done, Drive, Driven, DriverGuard};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering, lock, thread};
use crate::trace::{self, Recorder};

/// The state a [`Request`] shares with its completion.
pub(super) struct ReqInner {
    result: Mutex<Option<Result<(), CommError>>>,
    cv: Condvar,
    /// Threads asleep on `cv` (changed under `result`'s lock): the completion notifies
    /// only when one is, since a notification is a system call.
    sleepers: AtomicUsize,
    /// Set once `result` is: what a thread driving progress polls (no lock).
    finished: AtomicBool,
    waited: AtomicBool,
    what: ReqWhat,
    reports: Arc<Mutex<Vec<Noted>>>,
    driver: Option<Arc<dyn Drive>>,
    /// The rank's timeline trace, when tracing (waits are recorded).
    timeline: Option<Arc<Recorder>>,
}

/// What a request is, for reports: formatted only when one is written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReqWhat {
    /// A send or a receive of a handle.
    Transfer {
        send: bool,
        data: DataId,
        peer: Rank,
        tag: Tag,
        me: Rank,
    },
    /// A request named by a fixed text (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Named(&'static str),
}

impl From<&'static str> for ReqWhat {
    fn from(name: &'static str) -> Self {
        Self::Named(name)
    }
}

impl core::fmt::Display for ReqWhat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Transfer {
                send: true,
                data,
                peer,
                tag,
                me,
            } => write!(f, "send of {data} to {peer} with {tag} from {me}"),
            Self::Transfer {
                data,
                peer,
                tag,
                me,
                ..
            } => write!(f, "receive into {data} from {peer} with {tag} on {me}"),
            Self::Named(name) => f.write_str(name),
        }
    }
}

/// A non-detached point-to-point request: [`Request::wait`] or [`Request::test`] it.
/// A request dropped before it was waited on is reported at shutdown.
#[must_use = "a request must be waited on or tested to completion; dropped, it is reported at shutdown"]
pub struct Request {
    inner: Arc<ReqInner>,
}

impl core::fmt::Debug for Request {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Request")
            .field("what", &self.inner.what)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// Blocks until the request completes; returns its outcome.
    ///
    /// # Errors
    /// The request's failure, e.g. [`CommError::Data`] for a size mismatch.
    pub fn wait(self) -> Result<(), CommError> {
        self.wait_driving(None)
    }

    /// [`Request::wait`], driving progress meanwhile with `guard` if the caller already
    /// entered (see [`drive_until`]).
    pub(super) fn wait_driving(self, guard: Option<DriverGuard<'_>>) -> Result<(), CommError> {
        let _wait = trace::wait(self.inner.timeline.as_ref(), "request wait");
        if let Some(driver) = &self.inner.driver {
            drive_until(&**driver, guard, || {
                self.inner.finished.load(Ordering::Acquire)
            });
        }
        let mut r = lock(&self.inner.result);
        loop {
            if let Some(result) = r.clone() {
                self.inner.waited.store(true, Ordering::SeqCst);
                return result;
            }
            self.inner.sleepers.fetch_add(1, Ordering::SeqCst);
            r = self
                .inner
                .cv
                .wait(r)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.inner.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Blocks until every request of `requests` completed (`starpu_mpi_wait_all`); each
    /// is waited on, even after one failed.
    ///
    /// # Errors
    /// The first failure, in the order of `requests` (the others completed all the same).
    pub fn wait_all(requests: impl IntoIterator<Item = Self>) -> Result<(), CommError> {
        let mut first = Ok(());
        for r in requests {
            let outcome = r.wait();
            if first.is_ok() {
                first = outcome;
            }
        }
        first
    }

    /// Whether every request of `requests` completed (`starpu_mpi_test_all`): `None` while
    /// one has not; once all have, their outcome — `Ok`, or the first failure in the order
    /// of `requests` — and then every one of them counts as waited. Testing moves
    /// communication on, as [`Request::test`] does.
    pub fn test_all(requests: &[Self]) -> Option<Result<(), CommError>> {
        // Looked at without marking any as waited: a request counts as waited only once
        // the whole array is done, as the reference's flag is all-or-nothing.
        if let Some(driver) = requests.first().and_then(|r| r.inner.driver.as_ref()) {
            let _driving = driver.enter();
            driver.try_drive();
        }
        let mut outcomes = Vec::with_capacity(requests.len());
        for r in requests {
            outcomes.push(lock(&r.inner.result).clone()?);
        }
        for r in requests {
            r.inner.waited.store(true, Ordering::SeqCst);
        }
        Some(outcomes.into_iter().collect())
    }

    /// The outcome if the request completed (then it counts as waited), `None` if not yet.
    /// Testing again, or waiting, after a completed test returns the same outcome.
    pub fn test(&self) -> Option<Result<(), CommError>> {
        if let Some(driver) = &self.inner.driver {
            // Like `MPI_Test`, testing moves communication on.
            let _driving = driver.enter();
            driver.try_drive();
        }
        let result = lock(&self.inner.result).clone();
        if result.is_some() {
            self.inner.waited.store(true, Ordering::SeqCst);
        }
        result
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.inner.waited.load(Ordering::SeqCst) {
            lock(&self.inner.reports).push(Noted::Unwaited(self.inner.what.to_string()));
        }
    }
}

/// How long a waiting thread goes on driving progress with nothing happening before it
/// hands back to the progression thread and sleeps.
const DRIVE_PATIENCE: core::time::Duration = core::time::Duration::from_micros(200);

/// Polls in a row that moved nothing before a driving thread yields its core between polls.
const SPIN_POLLS: u32 = 64;

/// A driving thread reads the clock once per this many polls in a row that moved nothing.
const CLOCK_POLLS: u32 = 16;

/// Drives the rank's progress on this thread until `ready` holds, or until nothing moved
/// for [`DRIVE_PATIENCE`] (the wait then sleeps as usual, and the progression thread takes
/// over). A blocking call whose message is coming thus crosses no thread.
pub(super) fn drive_until<'a>(
    driver: &'a dyn Drive,
    guard: Option<DriverGuard<'a>>,
    ready: impl Fn() -> bool,
) {
    let guard = guard.unwrap_or_else(|| driver.enter());
    // When the current run of idle polls began: read from the clock only every
    // `CLOCK_POLLS` idle polls, from the `CLOCK_POLLS`th on (a clock read costs as much as
    // a poll that finds nothing, and most waits end before it).
    let mut idle_since: Option<std::time::Instant> = None;
    let mut idle = 0u32;
    loop {
        if ready() {
            return;
        }
        match driver.try_drive() {
            Driven::Progressed => {
                idle_since = None;
                idle = 0;
            }
            Driven::Stopped => break,
            Driven::InFlight => {
                // Transfers are under way: they move while this thread polls, so it
                // goes on polling, back to back and without counting towards its
                // patience (the progression thread would poll them as hard).
                idle_since = None;
                idle = 0;
                core::hint::spin_loop();
            }
            Driven::Idle | Driven::Busy => {
                if idle > 0 && idle.is_multiple_of(CLOCK_POLLS) {
                    let now = std::time::Instant::now();
                    match idle_since {
                        None => idle_since = Some(now),
                        Some(since) if now - since >= DRIVE_PATIENCE => break,
                        Some(_) => {}
                    }
                }
                // Poll back to back for a while (a long message moves only while MPI is
                // called), then let the other threads of the core run between polls.
                idle = idle.saturating_add(1);
                if idle < SPIN_POLLS {
                    core::hint::spin_loop();
                } else {
                    thread::yield_now();
                }
            }
        }
    }
    guard.hand_back();
}

/// A new request and its completion: the progression thread calls the [`Done`] once with
/// the outcome, which wakes [`Request::wait`]. A request dropped unwaited is reported in
/// `reports`. (The hand-off the loom models of `sync/handoffs.rs` check.)
pub(crate) fn request_pair(
    what: ReqWhat,
    reports: Arc<Mutex<Vec<Noted>>>,
    driver: Option<Arc<dyn Drive>>,
    timeline: Option<Arc<Recorder>>,
) -> (Request, Done) {
    let inner = Arc::new(ReqInner {
        result: Mutex::new(None),
        cv: Condvar::new(),
        sleepers: AtomicUsize::new(0),
        finished: AtomicBool::new(false),
        waited: AtomicBool::new(false),
        what,
        reports,
        driver,
        timeline,
    });
    let i2 = Arc::clone(&inner);
    let done: Done = Done::new(move |result| {
        let sleeping = {
            let mut r = lock(&i2.result);
            *r = Some(result);
            i2.finished.store(true, Ordering::Release);
            i2.sleepers.load(Ordering::SeqCst) > 0
        };
        // Notified once the lock is released, so that the woken waiter does not block on
        // it at once.
        if sleeping {
            i2.cv.notify_all();
        }
    });
    (Request { inner }, done)
}
