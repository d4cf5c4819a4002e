//! Keeping track of a rank's pending requests, and the watchdog that watches them.

use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::time::Instant;

use starling_core::engine::Leftover;
use starling_core::request::Kind;
use starling_core::{CommId, DataId, Rank, Tag};

use super::{Orphan, Pending, RankReport, Stage, Waiting, stalled};
use crate::api::context::CommandSink;
use crate::error::CommError;
use crate::io::progress::{Command, Done, Held};
use crate::runtime::task::Runtime;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering, lock};

/// One tracked item.
struct Entry {
    /// Its submission number (orders the report; tells a reused slot apart).
    id: u64,
    kind: Waiting,
    peer: Rank,
    comm: CommId,
    tag: Tag,
    data: Option<DataId>,
    /// When it was posted, as [`Table::now`] tells.
    posted: Instant,
    /// Set once the request was handed over: what to run when it finishes.
    done: Option<Done>,
}

impl Entry {
    /// A new item posted at `posted`, not handed over yet (its `id` is given by
    /// [`Table::put`]).
    fn new(
        kind: Waiting,
        peer: Rank,
        (comm, tag): (CommId, Tag),
        data: Option<DataId>,
        posted: Instant,
    ) -> Self {
        Self {
            id: 0,
            kind,
            peer,
            comm,
            tag,
            data,
            posted,
            done: None,
        }
    }
}

/// A slab of entries: no allocation once warm, O(1) in and out.
#[derive(Default)]
struct Table {
    next: u64,
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    live: usize,
    /// Set by [`Tracker::abandon`]: the rank gave up, later requests fail at once.
    abandoned: Option<Arc<str>>,
    /// Bumped at every begin, start and finish: a progress witness. Counted under the
    /// table's lock, which each of them takes anyway (an atomic beside it cost three
    /// locked read-modify-writes more per request).
    activity: u64,
    /// The time of the watchdog's last look ([`Tracker::tick`]) while one watches the
    /// rank: see [`Table::now`].
    ticked: Option<Instant>,
}

impl Table {
    /// The posting time of an item put in now: while a watchdog watches the rank, the
    /// time of its last look, which is at most one of its steps old (200 ms at most), so
    /// that a request reads no clock (about 70 ns a read on the 2-core machine of
    /// `docs/performance.md`, once per request); otherwise the clock. An age is read
    /// only in a hang report, which the watchdog makes: it is then overstated by less
    /// than one step.
    fn now(&self) -> Instant {
        self.ticked.unwrap_or_else(Instant::now)
    }

    fn get_mut(&mut self, slot: usize, id: u64) -> Option<&mut Entry> {
        self.slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .filter(|e| e.id == id)
    }

    /// Puts a new item in, numbered next (whatever its `id` says); returns its slot and
    /// number.
    fn put(&mut self, mut entry: Entry) -> (usize, u64) {
        let id = self.next;
        self.next += 1;
        entry.id = id;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(entry);
                s
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.live += 1;
        self.activity += 1;
        (slot, id)
    }

    fn remove(&mut self, slot: usize, id: u64) -> Option<Entry> {
        self.get_mut(slot, id)?;
        self.free.push(slot);
        self.live -= 1;
        self.slots[slot].take()
    }
}

/// A rank's pending requests and collectives, with their age, for the hang explainer.
/// Every request the [`crate::Context`] submits goes through it: [`Tracker::begin`] when
/// it is submitted, [`Ticket::start`] when its data is ready and it is handed to the
/// progression thread, and the callback `start` returns when it finishes.
pub(crate) struct Tracker {
    table: Mutex<Table>,
    /// Set with `Table::abandoned` ([`Tracker::abandon`]), read without the lock by the
    /// requests that are never tracked ([`Tracker::gave_up`]).
    gave_up: AtomicBool,
}

/// A tracked item, from its submission until it is handed over.
pub(crate) struct Ticket {
    tracker: Arc<Tracker>,
    slot: usize,
    id: u64,
}

impl Tracker {
    pub(crate) fn new() -> Self {
        Self {
            table: Mutex::new(Table::default()),
            gave_up: AtomicBool::new(false),
        }
    }

    /// Whether the rank gave up ([`Tracker::abandon`]): a request that would go without
    /// being tracked (a blocking send that leaves at once) is made as any other then, and
    /// fails.
    pub(crate) fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::SeqCst)
    }

    /// How many items were tracked so far (tests).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> u64 {
        lock(&self.table).next
    }

    /// Tracks a new item, waiting for its data.
    pub(crate) fn begin(
        self: &Arc<Self>,
        kind: Waiting,
        peer: Rank,
        comm: CommId,
        tag: Tag,
        data: Option<DataId>,
    ) -> Ticket {
        let mut t = lock(&self.table);
        let entry = Entry::new(kind, peer, (comm, tag), data, t.now());
        let (slot, id) = t.put(entry);
        drop(t);
        Ticket {
            tracker: Arc::clone(self),
            slot,
            id,
        }
    }

    /// Tracks a new item handed over at once with `done`: [`Tracker::begin`] and
    /// [`Ticket::start`] under one acquisition of the table.
    pub(crate) fn begin_started(
        self: &Arc<Self>,
        kind: Waiting,
        peer: Rank,
        comm: CommId,
        tag: Tag,
        data: Option<DataId>,
        done: Done,
    ) -> Result<Done, (Done, CommError)> {
        let mut t = lock(&self.table);
        let mut entry = Entry::new(kind, peer, (comm, tag), data, t.now());
        if let Some(why) = t.abandoned.clone() {
            t.activity += 1;
            return Err((done, stalled(&why)));
        }
        entry.done = Some(done);
        let (slot, id) = t.put(entry);
        drop(t);
        Ok(Done::tracked(Tracked {
            tracker: Arc::clone(self),
            slot,
            id,
        }))
    }

    /// Takes the item's callback out, if it is still pending.
    fn finish(&self, slot: usize, id: u64) -> Option<Done> {
        let mut t = lock(&self.table);
        t.activity += 1;
        match t.get_mut(slot, id) {
            Some(e) if e.done.is_some() => t.remove(slot, id).and_then(|e| e.done),
            _ => None,
        }
    }

    /// Fails every item handed over and not finished with [`CommError::Stalled`]
    /// carrying `explanation`, and every later one as soon as its data is ready: the rank
    /// gave up. Returns how many failed now.
    pub(crate) fn abandon(&self, explanation: &str) -> usize {
        let dones: Vec<Done> = {
            let mut t = lock(&self.table);
            t.activity += 1;
            t.abandoned = Some(Arc::from(explanation));
            self.gave_up.store(true, Ordering::SeqCst);
            let started: Vec<(usize, u64)> = t
                .slots
                .iter()
                .enumerate()
                .filter_map(|(s, e)| e.as_ref().filter(|e| e.done.is_some()).map(|e| (s, e.id)))
                .collect();
            started
                .into_iter()
                .filter_map(|(s, id)| t.remove(s, id).and_then(|e| e.done))
                .collect()
        };
        let n = dones.len();
        for d in dones {
            d.call(Err(stalled(explanation)));
        }
        n
    }

    /// The explanation the rank gave up with, if it did.
    pub(crate) fn abandoned(&self) -> Option<Arc<str>> {
        lock(&self.table).abandoned.clone()
    }

    /// Every pending item, oldest first, with whether it was handed over.
    fn snapshot(&self) -> Vec<(Pending, bool)> {
        let now = Instant::now();
        let t = lock(&self.table);
        let mut live: Vec<&Entry> = t.slots.iter().flatten().collect();
        live.sort_by_key(|e| e.id);
        live.into_iter()
            .map(|e| {
                let p = Pending {
                    kind: e.kind,
                    peer: e.peer,
                    comm: e.comm,
                    tag: e.tag,
                    data: e.data,
                    stage: Stage::Posted,
                    age: now.saturating_duration_since(e.posted),
                };
                (p, e.done.is_some())
            })
            .collect()
    }

    /// The watchdog looks at the rank at `now` (`Some`), or stops watching it (`None`):
    /// items posted until the next look take `now` as their posting time
    /// ([`Table::now`]).
    fn tick(&self, now: Option<Instant>) {
        lock(&self.table).ticked = now;
    }

    /// The time of the watchdog's last look, while one watches (tests).
    #[cfg(test)]
    pub(crate) fn ticked(&self) -> Option<Instant> {
        lock(&self.table).ticked
    }

    /// The pending items and the activity count, read together.
    fn counts(&self) -> (usize, u64) {
        let t = lock(&self.table);
        (t.live, t.activity)
    }
}

impl Ticket {
    /// The item is handed over to the progression thread with `done`, to run once when
    /// it finishes. Returns the callback to hand over in its place (it runs `done`
    /// unless the watchdog abandoned the item first) or, when the rank already gave up,
    /// `done` back with the error to finish it with at once.
    pub(crate) fn start(self, done: Done) -> Result<Done, (Done, CommError)> {
        let Self { tracker, slot, id } = self;
        {
            let mut t = lock(&tracker.table);
            t.activity += 1;
            if let Some(why) = t.abandoned.clone() {
                t.remove(slot, id);
                return Err((done, stalled(&why)));
            }
            if let Some(e) = t.get_mut(slot, id) {
                e.done = Some(done);
            }
        }
        Ok(Done::tracked(Tracked { tracker, slot, id }))
    }
}

/// A request's entry in the hang tracker, which holds its completion: what the request
/// carries in its place ([`Done::tracked`]).
pub(crate) struct Tracked {
    tracker: Arc<Tracker>,
    slot: usize,
    id: u64,
}

impl Tracked {
    /// Takes the completion out of the entry and runs it with `result`, unless the
    /// watchdog abandoned the request first (it ran it then).
    pub(crate) fn finish(self, result: Result<(), CommError>) {
        if let Some(d) = self.tracker.finish(self.slot, self.id) {
            d.call(result);
        }
    }
}

// ----- probes ----------------------------------------------------------------------------

/// A snapshot of a rank's activity: two equal snapshots taken apart mean nothing moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Tasks and requests completed so far.
    pub completed: u64,
    /// Tasks running or ready to run (progress in itself).
    pub busy: usize,
    /// Tasks and requests submitted and not completed.
    pub outstanding: usize,
    /// Requests submitted, handed over or finished so far.
    pub requests: u64,
    /// Requests and collectives pending.
    pub pending: usize,
}

/// A handle on one rank for a watchdog: its activity, its report, and giving up.
/// Cheap to clone; usable from any thread ([`crate::RankRunner::probe`]).
#[derive(Clone)]
pub struct Probe {
    rank: Rank,
    size: u32,
    tracker: Arc<Tracker>,
    runtime: Runtime,
    commands: CommandSink,
}

impl core::fmt::Debug for Probe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Probe")
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl Probe {
    pub(crate) fn new(
        rank: Rank,
        size: u32,
        tracker: Arc<Tracker>,
        runtime: Runtime,
        commands: CommandSink,
    ) -> Self {
        Self {
            rank,
            size,
            tracker,
            runtime,
            commands,
        }
    }

    /// The rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// What the rank is doing now.
    pub fn activity(&self) -> Activity {
        let (pending, requests) = self.tracker.counts();
        let mut a = Activity {
            requests,
            pending,
            ..Activity::default()
        };
        self.runtime.wait_until(Duration::ZERO, |v| {
            a.completed = v.completed;
            a.busy = v.busy;
            a.outstanding = v.outstanding;
            true
        });
        a
    }

    /// The rank's report: its pending requests (with the engine's state of those it
    /// holds, asked of the progression thread for at most a second) and the messages it
    /// holds that no receive took.
    pub fn report(&self) -> RankReport {
        let (tx, rx) = mpsc::channel();
        (self.commands)(Command::Leftovers(Box::new(move |v| {
            let _ = tx.send(v);
        })));
        let held: Held = rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
        let mut engine: Vec<(Kind, CommId, Rank, Tag, Stage)> = Vec::new();
        let mut orphans = Vec::new();
        for o in held.refused.iter().filter_map(|l| match l {
            Leftover::Orphan(o) => Some(o),
            _ => None,
        }) {
            orphans.push(Orphan {
                source: o.source,
                comm: o.comm,
                tag: o.tag,
                size: o.size,
                refused: true,
            });
        }
        // The submissions waiting for room, per key, oldest first.
        let mut queued: HashMap<(Kind, CommId, Rank, Tag), usize> = HashMap::new();
        for q in &held.queued {
            *queued.entry(*q).or_default() += 1;
        }
        for l in held.engine {
            match l {
                Leftover::Orphan(o) => orphans.push(Orphan {
                    source: o.source,
                    comm: o.comm,
                    tag: o.tag,
                    size: o.size,
                    refused: false,
                }),
                Leftover::Pending {
                    kind,
                    comm,
                    peer,
                    tag,
                    state,
                    ..
                } => engine.push((kind, comm, peer, tag, Stage::Engine(state))),
                Leftover::NotRetired { .. } => {}
            }
        }
        // The engine's requests per key, oldest first.
        let mut engines: HashMap<(Kind, CommId, Rank, Tag), VecDeque<Stage>> = HashMap::new();
        for (kind, comm, peer, tag, stage) in engine {
            engines
                .entry((kind, comm, peer, tag))
                .or_default()
                .push_back(stage);
        }
        let pending = self
            .tracker
            .snapshot()
            .into_iter()
            .map(|(mut p, started)| {
                p.stage = if !started {
                    Stage::WaitingForData
                } else {
                    let k = match p.kind {
                        Waiting::Send => Some(Kind::Send),
                        Waiting::Recv => Some(Kind::Recv),
                        _ => None,
                    };
                    // The engine's state of the oldest matching request (same key:
                    // requests of one key are matched in order); past those, the
                    // submissions waiting for room.
                    k.and_then(|k| {
                        let key = (k, p.comm, p.peer, p.tag);
                        if let Some(q) = engines.get_mut(&key).and_then(VecDeque::pop_front) {
                            return Some(q);
                        }
                        let n = queued.get_mut(&key).filter(|n| **n > 0)?;
                        *n -= 1;
                        Some(Stage::Queued)
                    })
                    .unwrap_or(Stage::Posted)
                };
                p
            })
            .collect();
        RankReport {
            rank: self.rank,
            size: self.size,
            pending,
            orphans,
        }
    }

    /// Gives up: fails every pending request of the rank with
    /// [`CommError::Stalled`]`(explanation)`, and every later one once its data is ready.
    /// Blocking calls waiting on them return; the rank is failing from then on. Returns
    /// how many requests failed now.
    pub fn abandon(&self, explanation: &str) -> usize {
        self.tracker.abandon(explanation)
    }

    /// The explanation the rank gave up with ([`Probe::abandon`]), if it did.
    pub fn abandoned(&self) -> Option<String> {
        self.tracker.abandoned().map(|s| s.to_string())
    }
}

// ----- the watchdog ----------------------------------------------------------------------

/// A thread that watches ranks and calls a function when nothing has progressed on any
/// of them for a while, while requests are pending. A running task counts as progress.
#[derive(Debug)]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Watches `probes`; `extra` is any other activity counter to watch (e.g. messages in
    /// flight). When nothing changed for `timeout` while a rank has pending requests,
    /// calls `on_stall(probes, idle)` on the watchdog's thread, then watches again.
    ///
    /// # Panics
    /// When the thread cannot be spawned.
    pub fn start(
        probes: Vec<Probe>,
        timeout: Duration,
        extra: impl Fn() -> u64 + Send + 'static,
        mut on_stall: impl FnMut(&[Probe], Duration) + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let step = (timeout / 10).clamp(Duration::from_millis(5), Duration::from_millis(200));
        let thread = std::thread::Builder::new()
            .name("starling-watchdog".into())
            .spawn(move || {
                // Each look gives the ranks' trackers its time, which the requests
                // posted until the next look take as theirs (`Table::now`).
                let tick = |at: Option<Instant>| probes.iter().for_each(|p| p.tracker.tick(at));
                let mut last = None;
                let mut since = Instant::now();
                tick(Some(since));
                while !stopped.load(Ordering::SeqCst) {
                    std::thread::sleep(step);
                    let at = Instant::now();
                    tick(Some(at));
                    let now: Vec<Activity> = probes.iter().map(Probe::activity).collect();
                    let sample = (now.clone(), extra());
                    let busy = now.iter().any(|a| a.busy > 0);
                    if busy || last.as_ref() != Some(&sample) {
                        last = Some(sample);
                        since = at;
                        continue;
                    }
                    let idle = at.saturating_duration_since(since);
                    if idle >= timeout && now.iter().any(|a| a.pending > 0) {
                        on_stall(&probes, idle);
                        last = None;
                        since = Instant::now();
                        tick(Some(since));
                    }
                }
                // Unwatched, the trackers read the clock again.
                tick(None);
            })
            .expect("spawning the watchdog thread");
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the watchdog and waits for its thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_item_posted_while_a_watchdog_watches_takes_its_last_look_as_its_time() {
        let tracker = Arc::new(Tracker::new());
        let ago = Duration::from_secs(5);
        let look = Instant::now()
            .checked_sub(ago)
            .expect("the clock is older than 5 s");
        tracker.tick(Some(look));
        let _watched = tracker.begin(Waiting::Recv, Rank(1), CommId::WORLD, Tag(3), None);
        // Unwatched again: the clock.
        tracker.tick(None);
        let _unwatched = tracker.begin(Waiting::Send, Rank(1), CommId::WORLD, Tag(4), None);
        let ages: Vec<(Tag, Duration)> = tracker
            .snapshot()
            .into_iter()
            .map(|(p, _)| (p.tag, p.age))
            .collect();
        assert_eq!(ages.len(), 2);
        assert_eq!(ages[0].0, Tag(3));
        assert!(
            ages[0].1 >= ago,
            "the watchdog's look, not the clock: {ages:?}"
        );
        assert!(ages[1].1 < ago, "the clock once unwatched: {ages:?}");
    }
}
