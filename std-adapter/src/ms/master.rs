//! The master: runs the application's flow on a one-rank context whose tasks it hands to
//! the slaves, and one event loop — the master thread — that decides where each task
//! runs and what data moves, with the core's coherence state machine.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Instant;

use starling_core::coherence::{Fetch, MemNode, NodeSet, Replicas};
use starling_core::{AccessMode, Rank, Tag};

use super::wire::{Bundle, Op, Reply, WireAccess};
use super::{CMD, FIRST_DATA_TAG, Kind, MsConfig, MsError, REPLY, Registry};
use crate::api::context::{Context, RecvOpts, SendOpts};
use crate::error::{CommError, ShutdownError};
use crate::runtime::data::AnyCell;
use crate::runtime::task::{Access, Codelet, Finish, KernelTime, Offload};
use crate::sync::Arc;

mod memory;

/// What the master thread is told.
enum Event {
    /// A task of the application is ready.
    Task(Pending),
    /// The application accesses a datum in the master's memory.
    ToHost {
        cell: Arc<dyn AnyCell>,
        mode: AccessMode,
        then: Box<dyn FnOnce() + Send>,
    },
    /// The application unregistered a datum.
    Forget { uid: u64 },
    /// A slave's message (or the failure of its receive).
    Reply {
        slave: usize,
        bytes: Result<Vec<u8>, CommError>,
    },
    /// A copy into the master's memory ended.
    Fetched {
        uid: u64,
        fetch: Fetch,
        result: Result<(), CommError>,
    },
    /// A send of the master's failed.
    SendFailed(String),
    /// The application's flow returned and its tasks are done.
    AppDone,
}

/// A ready task, not yet on a slave.
struct Pending {
    codelet: Codelet,
    accesses: Vec<Access>,
    priority: i32,
    finish: Finish,
}

/// The application context's way to the master thread.
struct Link {
    tx: Sender<Event>,
}

impl Offload for Link {
    fn start(&self, codelet: &Codelet, accesses: Vec<Access>, priority: i32, finish: Finish) {
        let task = Pending {
            codelet: codelet.clone(),
            accesses,
            priority,
            finish,
        };
        if let Err(mpsc::SendError(Event::Task(p))) = self.tx.send(Event::Task(task)) {
            (p.finish)(
                Err("the master-slave session is over".into()),
                KernelTime::Wall,
            );
        }
    }

    fn to_host(&self, cell: Arc<dyn AnyCell>, mode: AccessMode, then: Box<dyn FnOnce() + Send>) {
        if let Err(mpsc::SendError(Event::ToHost { then, .. })) =
            self.tx.send(Event::ToHost { cell, mode, then })
        {
            then();
        }
    }

    fn forget(&self, cell: &Arc<dyn AnyCell>) {
        let _ = self.tx.send(Event::Forget { uid: cell.uid() });
    }
}

/// What the master knows of one slave.
struct Slave {
    rank: Rank,
    node: MemNode,
    hello: bool,
    threads: usize,
    budget: u64,
    in_flight: usize,
    /// Copies into the master's memory this slave is asked to send.
    sending_home: usize,
    /// Data it holds a buffer for, and their bytes.
    resident: HashMap<u64, u64>,
    resident_bytes: u64,
    last_heard: Instant,
    dead: bool,
    bye: bool,
    seq: u64,
    ops: Vec<Op>,
    stats: SlaveStats,
}

/// What one slave did, for the report (`STARLING_MS_STATS=1`).
#[derive(Clone, Copy, Default)]
struct SlaveStats {
    tasks: u64,
    /// Bytes sent to it (by the master or another slave).
    bytes_in: u64,
    /// Bytes it sent the master.
    bytes_home: u64,
    /// Copies it freed to make room.
    evictions: u64,
    /// Of those, copies written back to the master first.
    write_backs: u64,
}

/// One datum of the application that has been to a slave.
struct Datum {
    cell: Arc<dyn AnyCell>,
    kind: Arc<Kind>,
    replicas: Replicas<64>,
    bytes: u64,
    last_use: u64,
}

/// A task on a slave.
struct Running {
    slave: usize,
    name: String,
    modes: Vec<(u64, AccessMode)>,
    fetches: Vec<(u64, Fetch)>,
    finish: Finish,
}

/// Who waits for a copy into the master's memory.
enum HostWait {
    /// The application: release the master's acquisition of `mode`, then call `then`.
    Acquire {
        mode: AccessMode,
        then: Box<dyn FnOnce() + Send>,
    },
    /// A write-back before freeing slave `slave`'s copy.
    Evict { slave: usize },
    /// An access by the application that came while the datum was on its way home for a
    /// write-back: taken up again once it landed.
    Retry {
        cell: Arc<dyn AnyCell>,
        mode: AccessMode,
        then: Box<dyn FnOnce() + Send>,
    },
}

struct Master<'a> {
    ctx: &'a Context,
    config: &'a MsConfig,
    registry: &'a Registry,
    tx: Sender<Event>,
    slaves: Vec<Slave>,
    data: HashMap<u64, Datum>,
    queue: VecDeque<Pending>,
    running: HashMap<u64, Running>,
    host_waits: HashMap<u64, Vec<HostWait>>,
    /// Copies into the master's memory in flight, by datum.
    homeward: HashMap<u64, Fetch>,
    next_task: u64,
    next_tag: i64,
    clock: u64,
    errors: Vec<MsError>,
}

/// The access mode the coherence state machine sees for a task's accesses of one datum.
fn coherence_mode(mode: AccessMode) -> AccessMode {
    let rw = mode & AccessMode::RW;
    if mode.intersects(AccessMode::REDUX | AccessMode::COMMUTE) {
        AccessMode::RW
    } else if rw.is_empty() && mode.contains(AccessMode::SCRATCH) {
        AccessMode::SCRATCH
    } else {
        rw
    }
}

/// Master-slave mode on the master: see [`super::serve`].
pub(super) fn run<R, F>(
    ctx: &Context,
    config: &MsConfig,
    registry: &Registry,
    flow: F,
) -> Result<R, MsError>
where
    R: Send,
    F: FnOnce(&Context) -> R + Send,
{
    let (tx, rx) = mpsc::channel();
    let slaves = (0..ctx.size())
        .filter(|r| *r != config.master.0)
        .enumerate()
        .map(|(i, r)| Slave {
            rank: Rank(r),
            node: MemNode(u8::try_from(i + 1).unwrap_or(u8::MAX)),
            hello: false,
            threads: 1,
            budget: u64::MAX,
            in_flight: 0,
            sending_home: 0,
            resident: HashMap::new(),
            resident_bytes: 0,
            last_heard: Instant::now(),
            dead: false,
            bye: false,
            seq: 0,
            ops: Vec::new(),
            stats: SlaveStats::default(),
        })
        .collect();
    let mut m = Master {
        ctx,
        config,
        registry,
        tx: tx.clone(),
        slaves,
        data: HashMap::new(),
        queue: VecDeque::new(),
        running: HashMap::new(),
        host_waits: HashMap::new(),
        homeward: HashMap::new(),
        next_task: 0,
        next_tag: FIRST_DATA_TAG,
        clock: 0,
        errors: Vec::new(),
    };
    for s in 0..m.slaves.len() {
        m.post_reply(s);
    }
    let tick = (config.timeout / 4).clamp(
        core::time::Duration::from_millis(10),
        core::time::Duration::from_secs(1),
    );
    // Every slave says hello (its threads and budget) before the flow starts.
    let started = Instant::now();
    while m.slaves.iter().any(|s| !s.hello && !s.dead) {
        match rx.recv_timeout(tick) {
            Ok(ev) => m.handle(ev),
            Err(_) if started.elapsed() > config.timeout => {
                for s in 0..m.slaves.len() {
                    if !m.slaves[s].hello {
                        m.declare_dead(s);
                    }
                }
            }
            Err(_) => {}
        }
        m.flush();
    }

    // The application's context: a world of one rank, one worker (the tasks run on the
    // slaves; the worker only hands them over).
    let mut app_config = crate::ClusterConfig::from_env();
    app_config.runtime.workers = 1;
    app_config.trace_file = None;
    app_config.watchdog = None;
    let app = crate::launch::cluster::solo(&app_config);
    app.context()
        .runtime
        .set_offload(Arc::new(Link { tx: tx.clone() }));

    let value = std::thread::scope(|scope| {
        let app_ctx = app.context();
        let done = tx.clone();
        let worker = std::thread::Builder::new()
            .name("starling-ms-flow".into())
            .spawn_scoped(scope, move || {
                // Tell the master thread even when the flow panics.
                struct Notify(Sender<Event>);
                impl Drop for Notify {
                    fn drop(&mut self) {
                        let _ = self.0.send(Event::AppDone);
                    }
                }
                let _notify = Notify(done);
                let v = flow(app_ctx);
                app_ctx.wait_for_all();
                v
            })
            .expect("spawning the master-slave flow thread");
        loop {
            match rx.recv_timeout(tick) {
                Ok(Event::AppDone) => break,
                Ok(ev) => m.handle(ev),
                Err(RecvTimeoutError::Timeout) => m.check_liveness(),
                Err(RecvTimeoutError::Disconnected) => break,
            }
            m.flush();
        }
        worker.join()
    });
    let leftovers = app.leftovers();
    app.stop();

    // Stop the slaves and wait for their goodbyes.
    for s in &mut m.slaves {
        if !s.dead {
            s.ops.push(Op::Stop);
        }
    }
    m.flush();
    let mut waited = Instant::now();
    while m.slaves.iter().any(|s| !s.dead && !s.bye) {
        match rx.recv_timeout(tick) {
            Ok(ev) => {
                m.handle(ev);
                waited = Instant::now();
            }
            Err(_) if waited.elapsed() > config.timeout => {
                for s in 0..m.slaves.len() {
                    if !m.slaves[s].bye {
                        m.declare_dead(s);
                    }
                }
            }
            Err(_) => {}
        }
        m.flush();
    }

    if config.stats {
        m.report();
    }
    let value = match value {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    if let Some(e) = m.errors.into_iter().next() {
        return Err(e);
    }
    if !leftovers.is_empty() {
        return Err(MsError::Shutdown(ShutdownError::new(leftovers)));
    }
    Ok(value)
}

impl Master<'_> {
    /// Writes what each slave did to stderr.
    fn report(&self) {
        for s in &self.slaves {
            let st = s.stats;
            eprintln!(
                "[starling ms] slave {}: {} worker(s), {} task(s), {} bytes in, {} bytes back to the master, {} eviction(s) ({} written back){}",
                s.rank.0,
                s.threads,
                st.tasks,
                st.bytes_in,
                st.bytes_home,
                st.evictions,
                st.write_backs,
                if s.dead { ", dead" } else { "" }
            );
        }
    }

    fn master_rank(&self) -> Rank {
        self.config.master
    }

    /// Posts the receive of slave `s`'s next message.
    fn post_reply(&mut self, s: usize) {
        let tx = self.tx.clone();
        let posted = super::recv_bytes(self.ctx, self.slaves[s].rank, REPLY, move |bytes| {
            let _ = tx.send(Event::Reply { slave: s, bytes });
        });
        if let Err(e) = posted {
            self.errors.push(e.into());
        }
    }

    /// A fresh tag for one data transfer.
    fn tag(&mut self) -> Tag {
        let t = Tag(self.next_tag);
        self.next_tag += 1;
        t
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Task(p) => self.task(p),
            Event::ToHost { cell, mode, then } => self.bring_home(&cell, mode, then),
            Event::Forget { uid } => self.forget(uid),
            Event::Reply { slave, bytes } => self.reply(slave, bytes),
            Event::Fetched { uid, fetch, result } => self.fetched(uid, fetch, result),
            Event::SendFailed(what) => self.errors.push(MsError::Protocol(what)),
            Event::AppDone => {}
        }
    }

    /// Sends every slave the ops decided since the last flush, in one message each.
    fn flush(&mut self) {
        for s in 0..self.slaves.len() {
            let slave = &mut self.slaves[s];
            if slave.ops.is_empty() || slave.dead {
                slave.ops.clear();
                continue;
            }
            let bundle = Bundle {
                seq: slave.seq,
                ops: core::mem::take(&mut slave.ops),
            };
            slave.seq += 1;
            let rank = slave.rank;
            let tx = self.tx.clone();
            let sent = super::send_bytes(
                self.ctx,
                bundle.encode(),
                rank,
                CMD,
                crate::io::progress::Done::new(move |r| {
                    if let Err(e) = r {
                        let _ =
                            tx.send(Event::SendFailed(format!("a message to slave {rank}: {e}")));
                    }
                }),
            );
            if let Err(e) = sent {
                self.errors.push(e.into());
            }
        }
    }

    /// Fails a task that never reached a slave.
    fn fail(&mut self, p: Pending, e: MsError) {
        let text = e.to_string();
        self.errors.push(e);
        (p.finish)(Err(text), KernelTime::Wall);
    }

    fn task(&mut self, p: Pending) {
        let name = p.codelet.name().to_owned();
        if !self.registry.contains(&name) {
            return self.fail(p, MsError::UnknownCodelet { name });
        }
        let mut bytes = 0u64;
        for a in &p.accesses {
            let Some(kind) = self.registry.kind_of(&*a.cell) else {
                let interface = a.cell.interface_name().to_owned();
                return self.fail(
                    p,
                    MsError::UnknownInterface {
                        codelet: name,
                        interface,
                    },
                );
            };
            let uid = a.cell.uid();
            self.data.entry(uid).or_insert_with(|| Datum {
                cell: Arc::clone(&a.cell),
                kind: Arc::clone(kind),
                replicas: Replicas::new(),
                bytes: a.cell.packed_size() as u64,
                last_use: 0,
            });
        }
        for (uid, _) in distinct(&p.accesses) {
            bytes += self.data[&uid].bytes;
        }
        let live = self.slaves.iter().filter(|s| !s.dead);
        let Some(budget) = live.map(|s| s.budget).max() else {
            let ranks = self.ctx.size();
            return self.fail(
                p,
                MsError::NoSlave {
                    codelet: name,
                    ranks,
                },
            );
        };
        if bytes > budget {
            return self.fail(
                p,
                MsError::TooLarge {
                    codelet: name,
                    bytes,
                    budget,
                },
            );
        }
        for (uid, mode) in distinct(&p.accesses) {
            if mode.contains(AccessMode::R) && self.data[&uid].replicas.valid().is_empty() {
                return self.fail(p, MsError::DataLost { codelet: name });
            }
        }
        self.queue.push_back(p);
        self.dispatch_ready();
    }

    /// Hands queued tasks to slaves while some slave can take the first one.
    fn dispatch_ready(&mut self) {
        while let Some(p) = self.queue.front() {
            if self.slaves.iter().all(|s| s.dead) {
                let p = self.queue.pop_front().expect("the front exists");
                let (codelet, ranks) = (p.codelet.name().to_owned(), self.ctx.size());
                self.fail(p, MsError::NoSlave { codelet, ranks });
                continue;
            }
            // A datum on its way back to the master (a write-back, an acquisition) is
            // held there until it lands: the task waits for it.
            if distinct(&p.accesses)
                .iter()
                .any(|(uid, _)| self.homeward.contains_key(uid))
            {
                return;
            }
            let Some(s) = self.choose(p) else {
                return;
            };
            let p = self.queue.pop_front().expect("the front exists");
            let need = self.missing_bytes(&p, s);
            if !self.make_room(&p, s, need) {
                // Copies are being written back to make room: retry when they landed.
                self.queue.push_front(p);
                return;
            }
            self.dispatch(p, s);
        }
    }

    fn dispatch(&mut self, p: Pending, s: usize) {
        self.clock += 1;
        let node = self.slaves[s].node;
        let name = p.codelet.name().to_owned();
        let modes = distinct(&p.accesses);
        let mut fetches = Vec::new();
        for &(uid, mode) in &modes {
            let d = self.data.get_mut(&uid).expect("registered at submission");
            d.last_use = self.clock;
            let acq = match d.replicas.acquire(node, mode) {
                Ok(acq) => acq,
                Err(e) => {
                    // The master's runtime orders conflicting tasks: a bug if it happens.
                    self.errors.push(MsError::Protocol(format!(
                        "coherence refused {mode:?} of a datum of task `{name}` on slave {}: {e}",
                        self.slaves[s].rank
                    )));
                    continue;
                }
            };
            let (bytes, cell, kind) = (d.bytes, Arc::clone(&d.cell), Arc::clone(&d.kind));
            if !self.slaves[s].resident.contains_key(&uid) {
                let shape = (kind.shape)(cell.as_any()).unwrap_or_default();
                let slave = &mut self.slaves[s];
                slave.resident.insert(uid, bytes);
                slave.resident_bytes += bytes;
                slave.ops.push(Op::Alloc {
                    uid,
                    kind: kind.name.to_owned(),
                    shape,
                });
            }
            if let Some(fetch) = acq.fetch {
                let tag = self.tag();
                let from = if fetch.from.is_main_ram() {
                    let tx = self.tx.clone();
                    let dest = self.slaves[s].rank;
                    let posted = self.ctx.post_send(
                        cell,
                        dest,
                        tag,
                        SendOpts::default(),
                        Box::new(move |r| {
                            if let Err(e) = r {
                                let _ = tx
                                    .send(Event::SendFailed(format!("data to slave {dest}: {e}")));
                            }
                        }),
                    );
                    if let Err(e) = posted {
                        self.errors.push(e.into());
                    }
                    self.master_rank()
                } else {
                    let src = self.slave_of(fetch.from).expect("a slave's node");
                    let dest = self.slaves[s].rank;
                    self.slaves[src].ops.push(Op::SendTo { uid, dest, tag });
                    self.slaves[src].rank
                };
                self.slaves[s].ops.push(Op::Recv { uid, from, tag });
                self.slaves[s].stats.bytes_in += bytes;
                fetches.push((uid, fetch));
            }
            self.drop_copies(uid, acq.invalidate);
        }
        let task = self.next_task;
        self.next_task += 1;
        let accesses = p
            .accesses
            .iter()
            .map(|a| WireAccess {
                uid: a.cell.uid(),
                mode: a.mode,
            })
            .collect();
        let slave = &mut self.slaves[s];
        slave.ops.push(Op::Exec {
            task,
            name: name.clone(),
            priority: p.priority,
            accesses,
        });
        slave.in_flight += 1;
        slave.stats.tasks += 1;
        self.running.insert(
            task,
            Running {
                slave: s,
                name,
                modes,
                fetches,
                finish: p.finish,
            },
        );
    }

    fn reply(&mut self, s: usize, bytes: Result<Vec<u8>, CommError>) {
        let reply = match bytes {
            Ok(b) => Reply::decode(&b).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                let rank = self.slaves[s].rank;
                self.errors
                    .push(MsError::Protocol(format!("from slave {rank}: {e}")));
                self.declare_dead(s);
                return;
            }
        };
        self.slaves[s].last_heard = Instant::now();
        if !matches!(reply, Reply::Bye) {
            self.post_reply(s);
        }
        match reply {
            Reply::Hello { threads, budget } => {
                let slave = &mut self.slaves[s];
                slave.hello = true;
                slave.threads = (threads as usize).max(1);
                slave.budget = budget;
            }
            Reply::Done { task, error } => self.done(task, error),
            Reply::Alive => {}
            Reply::Failed { message } => {
                let rank = self.slaves[s].rank;
                self.errors
                    .push(MsError::Protocol(format!("slave {rank}: {message}")));
            }
            Reply::Bye => self.slaves[s].bye = true,
        }
        self.dispatch_ready();
    }

    /// Task `task` ended on its slave.
    fn done(&mut self, task: u64, error: Option<String>) {
        let Some(r) = self.running.remove(&task) else {
            return; // failed already (its slave was taken for dead)
        };
        let slave = &mut self.slaves[r.slave];
        slave.in_flight -= 1;
        let (node, rank) = (slave.node, slave.rank);
        for (uid, fetch) in &r.fetches {
            if let Some(d) = self.data.get_mut(uid) {
                if let Ok(stale) = d.replicas.handle_transfer_done(*fetch) {
                    let stale = NodeSet(stale.0 & !NodeSet::single(node).0);
                    self.drop_copies(*uid, stale);
                }
            }
        }
        for (uid, mode) in &r.modes {
            if let Some(d) = self.data.get_mut(uid) {
                let _ = d.replicas.release(node, *mode);
            }
        }
        match error {
            None => (r.finish)(Ok(()), KernelTime::Wall),
            Some(message) => {
                let e = MsError::TaskFailed {
                    codelet: r.name,
                    slave: rank,
                    message,
                };
                let text = e.to_string();
                self.errors.push(e);
                (r.finish)(Err(text), KernelTime::Wall);
            }
        }
    }

    fn forget(&mut self, uid: u64) {
        if self.data.remove(&uid).is_some() {
            for s in 0..self.slaves.len() {
                self.forget_copy(s, uid);
            }
        }
    }

    /// Takes the slaves that have work and said nothing for the timeout for dead.
    fn check_liveness(&mut self) {
        for s in 0..self.slaves.len() {
            let slave = &self.slaves[s];
            let busy = slave.in_flight > 0 || slave.sending_home > 0;
            if !slave.dead && busy && slave.last_heard.elapsed() > self.config.timeout {
                self.declare_dead(s);
            }
        }
        self.dispatch_ready();
    }

    /// Slave `s` is gone: its tasks fail, its copies are lost.
    fn declare_dead(&mut self, s: usize) {
        if self.slaves[s].dead {
            return;
        }
        let (node, rank) = (self.slaves[s].node, self.slaves[s].rank);
        self.slaves[s].dead = true;
        self.slaves[s].ops.clear();
        let silent_ms =
            u64::try_from(self.slaves[s].last_heard.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Its tasks, and the tasks waiting for a copy from it, fail.
        let doomed: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.slave == s || r.fetches.iter().any(|(_, f)| f.from == node))
            .map(|(t, _)| *t)
            .collect();
        let first = doomed
            .first()
            .and_then(|t| self.running.get(t))
            .map_or_else(String::new, |r| r.name.clone());
        let tasks = doomed.len();
        let died = MsError::SlaveDied {
            slave: rank,
            silent_ms,
            tasks,
            first,
        };
        let text = died.to_string();
        self.errors.push(died);
        for t in doomed {
            let Some(r) = self.running.remove(&t) else {
                continue;
            };
            let rnode = self.slaves[r.slave].node;
            if r.slave != s {
                self.slaves[r.slave].in_flight -= 1;
            }
            for (uid, fetch) in &r.fetches {
                if let Some(d) = self.data.get_mut(uid) {
                    let _ = d.replicas.handle_transfer_failed(*fetch);
                }
            }
            for (uid, mode) in &r.modes {
                if let Some(d) = self.data.get_mut(uid) {
                    let _ = d.replicas.release(rnode, *mode);
                }
            }
            (r.finish)(Err(text.clone()), KernelTime::Wall);
        }
        self.slaves[s].in_flight = 0;
        // Copies into the master's memory from it will never land.
        let homeward: Vec<(u64, Fetch)> = self
            .homeward
            .iter()
            .filter(|(_, f)| f.from == node)
            .map(|(u, f)| (*u, *f))
            .collect();
        for (uid, fetch) in homeward {
            let explanation = format!("slave {rank} died before sending a datum back");
            self.fetched(uid, fetch, Err(CommError::Stalled { explanation }));
        }
        // Its copies are gone: the data it alone held are lost.
        for d in self.data.values_mut() {
            if d.replicas.valid().contains(node) {
                if d.replicas.valid().len() == 1 {
                    let _ = d.replicas.invalidate_all();
                } else {
                    let _ = d.replicas.evict(node);
                }
            }
        }
        let slave = &mut self.slaves[s];
        slave.resident.clear();
        slave.resident_bytes = 0;
    }
}

/// A task's data, each once, with the mode the coherence state machine sees (the union
/// of the task's accesses of it).
fn distinct(accesses: &[Access]) -> Vec<(u64, AccessMode)> {
    let mut out: Vec<(u64, AccessMode)> = Vec::with_capacity(accesses.len());
    for a in accesses {
        let uid = a.cell.uid();
        match out.iter_mut().find(|(u, _)| *u == uid) {
            Some((_, m)) => *m = coherence_mode(*m | a.mode),
            None => out.push((uid, coherence_mode(a.mode))),
        }
    }
    out
}
