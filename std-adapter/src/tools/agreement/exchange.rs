//! The agreement check's exchange: the ranks all-gather their rings of digests (on the
//! in-process cluster's [`Board`], or point to point on reserved tags as under MPI) and
//! compare them, at a barrier, at `mpi_wait_for_all` or on demand
//! ([`Context::check_agreement`]). The digests, the rings and their comparison are the
//! parent module's, which reads nothing of the runtime above it.

use core::time::Duration;
use std::sync::mpsc;

use starling_core::{CommId, Rank, Tag};

use super::*;
use crate::api::context::{Context, RecvOpts, SendOpts};

impl Board {
    fn all_gather(
        &self,
        ctx: &Context,
        round: u64,
        mine: Vec<u8>,
    ) -> Result<Vec<Vec<u8>>, CommError> {
        let me = ctx.rank.index();
        // Tracked, so that the watchdog names a rank that never comes and can free us.
        let ticket = ctx
            .tracker
            .begin(Waiting::Check, ctx.rank, CommId::WORLD, Tag(0), None);
        let done = match ticket.start(crate::io::progress::Done::new(|_| {})) {
            Ok(done) => done,
            Err((_, e)) => return Err(e),
        };
        let mut rounds = lock(&self.rounds);
        {
            let slot = rounds
                .entry(round)
                .or_insert_with(|| (vec![None; self.size], 0));
            slot.0[me] = Some(Arc::new(mine));
        }
        self.cv.notify_all();
        let all = loop {
            if let Some((slots, _)) = rounds.get(&round) {
                if slots.iter().all(Option::is_some) {
                    break slots
                        .iter()
                        .flatten()
                        .map(|b| (**b).clone())
                        .collect::<Vec<_>>();
                }
            }
            if let Some(why) = ctx.tracker.abandoned() {
                drop(rounds);
                done.call(Err(stalled(&why)));
                return Err(stalled(&why));
            }
            rounds = self
                .cv
                .wait_timeout(rounds, Duration::from_millis(50))
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        };
        if let Some(slot) = rounds.get_mut(&round) {
            slot.1 += 1;
            if slot.1 == self.size {
                rounds.remove(&round);
            }
        }
        drop(rounds);
        done.call(Ok(()));
        Ok(all)
    }
}

/// Posts a request and returns a receiver of its outcome.
fn outcome() -> (
    crate::io::progress::Done,
    mpsc::Receiver<Result<(), CommError>>,
) {
    let (tx, rx) = mpsc::channel();
    (
        crate::io::progress::Done::new(move |r| {
            let _ = tx.send(r);
        }),
        rx,
    )
}

fn wait(rx: &mpsc::Receiver<Result<(), CommError>>) -> Result<(), CommError> {
    rx.recv()
        .unwrap_or_else(|_| Err(stalled("the rank stopped")))
}

fn sync_opts() -> SendOpts {
    SendOpts {
        sync: true,
        priority: i32::MAX,
        ..SendOpts::default()
    }
}

fn malformed(from: Rank) -> CommError {
    let _ = from; // the framing names no sender: the error is the same for all
    CommError::Data(DataError::Malformed("a malformed agreement-check message"))
}

/// The point-to-point all-gather: every rank sends to rank 0, which answers everyone
/// with all the parts.
fn p2p_all_gather(ctx: &Context, mine: Vec<u8>) -> Result<Vec<Vec<u8>>, CommError> {
    let me = ctx.rank;
    let opts = RecvOpts::default();
    if me.0 != 0 {
        let answer = blob(Vec::new(), MESSAGE_MAX * ctx.size as usize + 4096);
        let (done_r, rx_r) = outcome();
        ctx.post_recv(answer.clone(), Rank(0), BCAST_TAG, opts, move |r| {
            done_r.call(r)
        })?;
        let (done_s, rx_s) = outcome();
        ctx.post_send(blob(mine, 0), Rank(0), GATHER_TAG, sync_opts(), move |r| {
            done_s.call(r)
        })?;
        wait(&rx_s)?;
        wait(&rx_r)?;
        let bytes = answer.read().bytes.clone();
        let parts = unframe(&bytes).ok_or_else(|| malformed(Rank(0)))?;
        if parts.len() != ctx.size as usize {
            return Err(malformed(Rank(0)));
        }
        return Ok(parts);
    }
    let mut cells = Vec::new();
    for r in 1..ctx.size {
        let cell = blob(Vec::new(), MESSAGE_MAX);
        let (done, rx) = outcome();
        ctx.post_recv(cell.clone(), Rank(r), GATHER_TAG, opts, move |r| {
            done.call(r)
        })?;
        cells.push((cell, rx));
    }
    let mut parts = vec![mine];
    let mut failure = None;
    for (cell, rx) in &cells {
        match wait(rx) {
            Ok(()) => parts.push(cell.read().bytes.clone()),
            Err(e) => {
                failure.get_or_insert(e);
                parts.push(Vec::new());
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let all = frame(&parts);
    let mut sends = Vec::new();
    for r in 1..ctx.size {
        let (done, rx) = outcome();
        ctx.post_send(
            blob(all.clone(), 0),
            Rank(r),
            BCAST_TAG,
            sync_opts(),
            move |r| done.call(r),
        )?;
        sends.push(rx);
    }
    for rx in &sends {
        wait(rx)?;
    }
    Ok(parts)
}

impl Context {
    fn all_gather(
        &self,
        board: Option<&Arc<Board>>,
        round: u64,
        mine: Vec<u8>,
    ) -> Result<Vec<Vec<u8>>, CommError> {
        match board {
            Some(b) => b.all_gather(self, round, mine),
            None => p2p_all_gather(self, mine),
        }
    }

    /// Compares this rank's task flow with every other rank's (the graph-agreement
    /// check): every rank must call it at the same point of the flow. It runs by itself at
    /// [`Context::mpi_wait_for_all`] and [`Context::barrier`] while the check is on
    /// ([`crate::RankConfig::check_agreement`]); called by hand it checks even when off
    /// (only inserts made while it was on are recorded).
    ///
    /// # Errors
    /// [`InsertError::Diverged`](crate::InsertError::Diverged) on every rank when the
    /// ranks' flows differ, naming the first insert where they do and what each rank
    /// saw there (and for every later insert and check);
    /// [`InsertError::Comm`](crate::InsertError::Comm) when the exchange failed (a
    /// rank never came, and the watchdog gave up: [`CommError::Stalled`]).
    pub fn check_agreement(&self) -> Result<(), crate::InsertError> {
        self.agreement_check("check_agreement")
    }

    /// Switches the graph-agreement check on or off from here on
    /// ([`crate::RankConfig::check_agreement`] sets it at start). Every rank must switch
    /// at the same point of the flow: the inserts made while it is off are not recorded.
    pub fn set_check_agreement(&self, on: bool) {
        lock(&self.dist).agreement.enabled = on;
    }

    /// Whether the graph-agreement check is on.
    pub fn check_agreement_enabled(&self) -> bool {
        lock(&self.dist).agreement.enabled
    }

    /// The check at `at`; does nothing on one rank or in a fake world.
    pub(crate) fn agreement_check(&self, at: &str) -> Result<(), crate::InsertError> {
        if self.size < 2 || self.fake.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (summary, board, round, known) = {
            let mut dist = lock(&self.dist);
            let a = &mut dist.agreement;
            if let Some(d) = &a.diverged {
                return Err(crate::InsertError::Diverged(d.clone()));
            }
            let mut s = Vec::with_capacity(24);
            put(&mut s, a.count);
            put(&mut s, a.running);
            put(&mut s, a.agreed);
            a.round += 2;
            (s, a.board.clone(), a.round - 2, a.count)
        };
        let all = self.all_gather(board.as_ref(), round, summary)?;
        let mut summaries = Vec::with_capacity(all.len());
        for (r, b) in all.iter().enumerate() {
            let s = RankRing::parse(b).ok_or_else(|| malformed(Rank(r as u32)))?;
            summaries.push((s.count, s.running));
        }
        if summaries.iter().all(|s| *s == summaries[0]) {
            lock(&self.dist).agreement.agreed = known;
            return Ok(());
        }
        let mine = lock(&self.dist).agreement.ring_bytes();
        let all = self.all_gather(board.as_ref(), round + 1, mine)?;
        let mut rings = Vec::with_capacity(all.len());
        for (r, b) in all.iter().enumerate() {
            rings.push(RankRing::parse(b).ok_or_else(|| malformed(Rank(r as u32)))?);
        }
        let d = Box::new(compare(at, &rings));
        lock(&self.dist).agreement.diverged = Some(d.clone());
        Err(crate::InsertError::Diverged(d))
    }

    /// The check a barrier makes while the check is on: a divergence is reported at
    /// shutdown and makes every later insert fail (a barrier returns nothing).
    pub(crate) fn agreement_at_barrier(&self) {
        let known = {
            let dist = lock(&self.dist);
            if !dist.agreement.enabled {
                return;
            }
            dist.agreement.diverged.is_some()
        };
        // A failed exchange (the watchdog gave up) is reported by the watchdog.
        if let Err(e @ crate::InsertError::Diverged(_)) = self.agreement_check("barrier") {
            if !known {
                eprintln!("[starling][{}] {e}", self.rank.0);
                lock(&self.reports).push(crate::error::Noted::Other(e.to_string()));
            }
        }
    }
}
