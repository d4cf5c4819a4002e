//! A slave: carries out the master's ops in order, runs its tasks on this rank's
//! workers, and answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};

use starling_core::Rank;

use super::wire::{Bundle, Op, Reply};
use super::{CMD, MsConfig, MsError, REPLY, Registry};
use crate::api::context::{Context, RecvOpts, SendOpts};
use crate::error::CommError;
use crate::runtime::data::AnyCell;
use crate::runtime::task::{Access, Codelet};
use crate::sync::{Arc, Mutex, lock};

/// What the slave's loop is told.
enum Event {
    /// The master's next message.
    Command(Result<Vec<u8>, CommError>),
    /// A task ended.
    Done { task: u64, error: Option<String> },
    /// Something failed outside a task.
    Failed(String),
}

struct Slave<'a> {
    ctx: &'a Context,
    registry: &'a Registry,
    master: Rank,
    budget: Option<u64>,
    tx: Sender<Event>,
    cells: HashMap<u64, Arc<dyn AnyCell>>,
    held_bytes: u64,
    next_seq: u64,
    early: BTreeMap<u64, Bundle>,
    running: usize,
    ran: u64,
    stopping: bool,
}

/// Master-slave mode on a slave: see [`super::serve`].
pub(super) fn run(ctx: &Context, config: &MsConfig, registry: &Registry) -> Result<(), MsError> {
    let (tx, rx) = mpsc::channel();
    let mut s = Slave {
        ctx,
        registry,
        master: config.master,
        budget: config.slave_memory,
        tx,
        cells: HashMap::new(),
        held_bytes: 0,
        next_seq: 0,
        early: BTreeMap::new(),
        running: 0,
        ran: 0,
        stopping: false,
    };
    let threads = u32::try_from(ctx.runtime.threads().max(1)).unwrap_or(u32::MAX);
    s.reply(&Reply::Hello {
        threads,
        budget: config.slave_memory.unwrap_or(u64::MAX),
    })?;
    s.post_command()?;
    let beat = (config.timeout / 4).clamp(
        core::time::Duration::from_millis(10),
        core::time::Duration::from_secs(1),
    );
    let exit_after = config
        .exit_after
        .filter(|(rank, _)| *rank == ctx.rank())
        .map(|(_, n)| n);
    loop {
        match rx.recv_timeout(beat) {
            Ok(Event::Command(Ok(bytes))) => {
                let bundle = Bundle::decode(&bytes).map_err(|e| {
                    let _ = s.reply(&Reply::Failed {
                        message: e.to_string(),
                    });
                    MsError::Protocol(e.to_string())
                })?;
                if bundle.seq < s.next_seq || s.early.contains_key(&bundle.seq) {
                    return Err(MsError::Protocol(format!(
                        "message {} from the master came twice",
                        bundle.seq
                    )));
                }
                s.early.insert(bundle.seq, bundle);
                while let Some(b) = s.early.remove(&s.next_seq) {
                    s.next_seq += 1;
                    for op in b.ops {
                        s.op(op)?;
                    }
                }
                if s.stopping && s.early.is_empty() {
                    s.reply(&Reply::Bye)?;
                    return Ok(());
                }
                s.post_command()?;
            }
            Ok(Event::Command(Err(e))) => return Err(e.into()),
            Ok(Event::Done { task, error }) => {
                s.running -= 1;
                s.ran += 1;
                if exit_after.is_some_and(|n| s.ran >= n) {
                    // Fault injection: this slave dies without a word.
                    return Ok(());
                }
                s.reply(&Reply::Done { task, error })?;
            }
            Ok(Event::Failed(message)) => s.reply(&Reply::Failed { message })?,
            Err(RecvTimeoutError::Timeout) => {
                if s.running > 0 {
                    s.reply(&Reply::Alive)?;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

impl Slave<'_> {
    fn reply(&self, reply: &Reply) -> Result<(), MsError> {
        let tx = self.tx.clone();
        super::send_bytes(
            self.ctx,
            reply.encode(),
            self.master,
            REPLY,
            crate::io::progress::Done::new(move |r| {
                if let Err(e) = r {
                    let _ = tx.send(Event::Failed(format!("a reply to the master: {e}")));
                }
            }),
        )?;
        Ok(())
    }

    fn post_command(&self) -> Result<(), MsError> {
        let tx = self.tx.clone();
        super::recv_bytes(self.ctx, self.master, CMD, move |bytes| {
            let _ = tx.send(Event::Command(bytes));
        })?;
        Ok(())
    }

    /// A completion that reports a failed transfer of datum `uid`.
    fn report(&self, what: String) -> crate::io::progress::Done {
        let tx = self.tx.clone();
        crate::io::progress::Done::new(move |r| {
            if let Err(e) = r {
                let _ = tx.send(Event::Failed(format!("{what}: {e}")));
            }
        })
    }

    fn cell(&self, uid: u64) -> Result<Arc<dyn AnyCell>, String> {
        self.cells
            .get(&uid)
            .cloned()
            .ok_or_else(|| format!("datum {uid} has no buffer on this slave"))
    }

    fn op(&mut self, op: Op) -> Result<(), MsError> {
        match op {
            Op::Alloc { uid, kind, shape } => {
                if self.cells.contains_key(&uid) {
                    return Ok(());
                }
                let made = self
                    .registry
                    .by_name
                    .get(kind.as_str())
                    .ok_or_else(|| format!("interface `{kind}` is not registered on this slave"))
                    .and_then(|k| (k.make)(&shape).map_err(|e| e.to_string()));
                match made {
                    Ok(cell) => {
                        let bytes = cell.packed_size() as u64;
                        if self.budget.is_some_and(|b| self.held_bytes + bytes > b) {
                            let _ = self.tx.send(Event::Failed(format!(
                                "datum {uid} ({bytes} bytes) exceeds this slave's memory budget"
                            )));
                        }
                        self.held_bytes += bytes;
                        self.cells.insert(uid, cell);
                    }
                    Err(e) => {
                        let _ = self.tx.send(Event::Failed(format!("datum {uid}: {e}")));
                    }
                }
            }
            Op::Recv { uid, from, tag } => match self.cell(uid) {
                Ok(cell) => {
                    let done = self.report(format!("receiving datum {uid} from rank {from}"));
                    self.ctx
                        .post_recv(cell, from, tag, RecvOpts::default(), move |r| done.call(r))?;
                }
                Err(e) => {
                    let _ = self.tx.send(Event::Failed(e));
                }
            },
            Op::SendTo { uid, dest, tag } => match self.cell(uid) {
                Ok(cell) => {
                    let done = self.report(format!("sending datum {uid} to rank {dest}"));
                    self.ctx
                        .post_send(cell, dest, tag, SendOpts::default(), move |r| done.call(r))?;
                }
                Err(e) => {
                    let _ = self.tx.send(Event::Failed(e));
                }
            },
            Op::Exec {
                task,
                name,
                priority,
                accesses,
            } => self.exec(task, &name, priority, &accesses),
            Op::Drop { uid } => {
                if let Some(cell) = self.cells.remove(&uid) {
                    self.held_bytes = self.held_bytes.saturating_sub(cell.packed_size() as u64);
                }
            }
            Op::Stop => self.stopping = true,
        }
        Ok(())
    }

    fn exec(&mut self, task: u64, name: &str, priority: i32, accesses: &[super::wire::WireAccess]) {
        self.running += 1;
        let fail = |tx: &Sender<Event>, error: String| {
            let _ = tx.send(Event::Done {
                task,
                error: Some(error),
            });
        };
        let Some(entry) = self.registry.codelets.get(name) else {
            return fail(
                &self.tx,
                format!("no codelet `{name}` is registered on this slave"),
            );
        };
        let mut cells = Vec::with_capacity(accesses.len());
        for a in accesses {
            match self.cell(a.uid) {
                Ok(cell) => cells.push(Access { cell, mode: a.mode }),
                Err(e) => return fail(&self.tx, e),
            }
        }
        // The kernel's outcome, read by the callback, which runs even when kernels are
        // disabled.
        let outcome: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let inner = Arc::clone(&entry.slave);
        let seen = Arc::clone(&outcome);
        let kernel = move |b: &mut crate::Buffers<'_>| {
            let ran = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| inner(b)));
            if let Err(p) = ran {
                let text = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic".to_owned());
                *lock(&seen) = Some(format!("panicked: {text}"));
            }
        };
        let tx = self.tx.clone();
        let callback = Box::new(move || {
            let error = lock(&outcome).take();
            let _ = tx.send(Event::Done { task, error });
        });
        let codelet = Codelet::from_kernel(name, Arc::new(kernel));
        self.ctx
            .runtime
            .submit_task(codelet, cells, priority, Some(callback), None);
    }
}
