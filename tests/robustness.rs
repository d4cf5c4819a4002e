//! Bad input and faults at the level of a running rank (the table of
//! `docs/robustness.md`): a hostile peer that sends malformed, truncated and mismatched
//! messages; data registered twice or never; requests on a rank the world does not have.
//! Nothing panics, nothing is lost: each fault is an error value or a dropped message,
//! and the rank goes on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use starling::core::envelope::{Envelope, Kind};
use starling::core::{AccessMode, CommId, MsgId, Owner, PhysTag, Rank, ReqId, Tag};
use starling::interfaces::Variable;
use starling::transport::Completion;
use starling::{
    ClusterConfig, Codelet, CommError, DataError, InsertError, RankConfig, RankRunner,
    RuntimeConfig, Transport, run_local_with,
};

// ----- a hostile peer ----------------------------------------------------------------------

/// Rank 0 of a 2-rank world whose only peer is a script: what "rank 1" sends is whatever
/// the test queued, delivered as the transport's completions.
struct Hostile {
    script: Arc<Mutex<VecDeque<Completion>>>,
    own: VecDeque<Completion>,
    /// Payload receives the engine posted: (token, size), answered by the script.
    posted: Arc<Mutex<Vec<(ReqId, usize)>>>,
}

impl Transport for Hostile {
    type Wire = ();

    fn rank(&self) -> Rank {
        Rank(0)
    }
    fn size(&self) -> u32 {
        2
    }
    fn tag_ub(&self) -> i32 {
        32767
    }
    fn set_envelope_tag(&mut self, _: PhysTag) {}
    fn send(&mut self, _: Rank, _: CommId, _: PhysTag, _: Vec<u8>, token: Option<ReqId>) {
        if let Some(t) = token {
            self.own.push_back(Completion::Sent(t));
        }
    }
    fn recv(&mut self, _: Rank, _: CommId, _: PhysTag, size: usize, token: ReqId) {
        self.posted.lock().unwrap().push((token, size));
    }
    fn barrier(&mut self, token: u64) {
        self.own.push_back(Completion::Barrier(token));
    }
    fn accept(&mut self, (): ()) {}
    fn poll(&mut self) -> Option<Completion> {
        self.own
            .pop_front()
            .or_else(|| self.script.lock().unwrap().pop_front())
    }
    fn needs_polling(&self) -> bool {
        true
    }
}

fn envelope(kind: Kind, comm: u16, tag: i64, size: u64, msg: u32) -> Vec<u8> {
    Envelope {
        kind,
        comm: CommId(comm),
        tag: Tag(tag),
        size,
        msg: MsgId(msg),
    }
    .encode()
    .to_vec()
}

fn from(source: u32, bytes: Vec<u8>) -> Completion {
    Completion::Envelope {
        source: Rank(source),
        comm: CommId::WORLD,
        bytes,
    }
}

#[test]
fn a_hostile_peer_cannot_make_a_rank_panic_or_lose_a_message() {
    let script = Arc::new(Mutex::new(VecDeque::new()));
    let posted = Arc::new(Mutex::new(Vec::new()));
    let (s, p) = (Arc::clone(&script), Arc::clone(&posted));
    let make = move || {
        Ok::<_, String>(Hostile {
            script: s,
            own: VecDeque::new(),
            posted: p,
        })
    };
    let config = RankConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        ..RankConfig::default()
    };
    let runner = RankRunner::start(make, &config).expect("the rank starts");
    let ctx = runner.context();
    let good = ctx.register(Variable::new(0u32));
    let small = ctx.register(Variable::new(0u32));
    let short = ctx.register(Variable::new(0u32));
    let r_good = ctx.recv(&good, Rank(1), Tag(5)).start().unwrap();
    let r_small = ctx.recv(&small, Rank(1), Tag(6)).start().unwrap();
    let r_short = ctx.recv(&short, Rank(1), Tag(7)).start().unwrap();

    let mut eager_inline_cut = envelope(Kind::Eager, 0, 5, 4, 1);
    eager_inline_cut.extend_from_slice(&[1, 2]); // declares 4 inline bytes, carries 2
    let mut bad_version = envelope(Kind::Eager, 0, 5, 0, 1);
    bad_version[0] = 99;
    let mut bad_kind = envelope(Kind::Eager, 0, 5, 0, 1);
    bad_kind[1] = 200;
    let mut trailing = envelope(Kind::Data, 0, 5, 4, 1);
    trailing.push(0); // a data envelope carries no inline bytes
    let mut too_big = envelope(Kind::Eager, 0, 6, 8, 2);
    too_big.extend_from_slice(&[0; 8]); // 8 bytes for a 4-byte receive
    let mut value = envelope(Kind::Eager, 0, 5, 4, 3);
    value.extend_from_slice(&42u32.to_le_bytes());
    script.lock().unwrap().extend([
        from(1, Vec::new()),                        // empty: truncated
        from(1, vec![1; 10]),                       // shorter than a header
        from(1, bad_version),                       // another wire version
        from(1, bad_kind),                          // an unknown kind
        from(1, eager_inline_cut),                  // inline payload cut short
        from(1, trailing),                          // bytes after a data header
        from(7, envelope(Kind::Eager, 0, 5, 0, 1)), // a source outside the world
        Completion::Envelope {
            source: Rank(1),
            comm: CommId::WORLD,
            bytes: envelope(Kind::Eager, 3, 5, 0, 1), // names another communicator
        },
        from(1, envelope(Kind::SyncReady, 0, 5, 0, 9)), // acknowledges no send of ours
        from(1, too_big),                               // larger than its receive
        from(1, envelope(Kind::Data, 0, 7, 4, 4)),      // payload to follow...
        from(1, value),                                 // finally, a good message
    ]);
    // ...the payload of tag 7 arrives 2 bytes short of what its envelope announced.
    let deadline = std::time::Instant::now() + core::time::Duration::from_secs(10);
    loop {
        let token = posted.lock().unwrap().pop();
        if let Some((token, size)) = token {
            assert_eq!(size, 4, "the receive is posted for the announced size");
            script
                .lock()
                .unwrap()
                .push_back(Completion::Received(token, vec![9, 9]));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the payload receive was never posted"
        );
        std::thread::sleep(core::time::Duration::from_millis(1));
    }

    assert_eq!(r_good.wait(), Ok(()));
    assert_eq!(ctx.acquire(&good, AccessMode::R).get().get(), 42);
    assert_eq!(
        r_small.wait(),
        Err(CommError::Data(DataError::SizeMismatch {
            expected: 4,
            got: 8
        }))
    );
    assert!(
        matches!(r_short.wait(), Err(CommError::Request(_))),
        "a payload shorter than announced fails its receive"
    );
    assert_eq!(
        ctx.acquire(&small, AccessMode::R).get().get(),
        0,
        "nothing copied"
    );
    ctx.wait_for_all();
    assert_eq!(
        runner.leftovers(),
        Vec::<starling::Leftover>::new(),
        "nothing lost or left"
    );
    runner.stop();
}

// ----- registration and arguments -------------------------------------------------------

fn config() -> ClusterConfig {
    ClusterConfig {
        runtime: RuntimeConfig {
            workers: 1,
            disable_kernels: false,
            ..RuntimeConfig::default()
        },
        ..ClusterConfig::default()
    }
}

#[test]
fn registering_two_handles_with_one_tag_is_refused_and_the_first_kept() {
    let out = run_local_with(2, config(), |ctx| {
        let a = ctx
            .register_owned(Tag(1), Owner::Rank(Rank(0)), || Variable::new(1u32))
            .unwrap();
        let b = ctx.register(Variable::new(2u32));
        let twice = ctx.mpi_register(&b, Tag(1), Owner::Rank(Rank(1)));
        // The same handle again, same tag and owner: a no-op.
        let again = ctx.mpi_register(&a, Tag(1), Owner::Rank(Rank(0)));
        (twice, again, ctx.data_tag(&a), ctx.data_owner(&b))
    })
    .expect("a clean shutdown");
    for o in out {
        assert_eq!(
            o,
            (
                Err(InsertError::Comm(CommError::TagInUse { tag: Tag(1) })),
                Ok(()),
                Some(Tag(1)),
                None
            )
        );
    }
}

#[test]
fn inserting_data_never_registered_is_an_error_that_submits_nothing() {
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        let cl = Codelet::new("w", |b| b.w::<Variable<u32>>(0).set(9));
        let r = ctx.insert(&cl).rw(&h).submit().map(|_| ());
        ctx.wait_for_all();
        (r, ctx.acquire(&h, AccessMode::R).get().get())
    })
    .expect("a clean shutdown: nothing was posted");
    for (r, v) in out {
        assert!(matches!(r, Err(InsertError::NotRegistered(_))), "{r:?}");
        assert_eq!(v, 1);
    }
}

#[test]
fn owners_and_executors_outside_the_world_are_refused() {
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        let owner = ctx.mpi_register(&h, Tag(1), Owner::Rank(Rank(2)));
        ctx.mpi_register(&h, Tag(1), Owner::Rank(Rank(0))).unwrap();
        let cl = Codelet::empty("t");
        let exec = ctx.insert(&cl).rw(&h).on_node(Rank(9)).submit().map(|_| ());
        (owner, exec)
    })
    .expect("a clean shutdown");
    for (owner, exec) in out {
        assert_eq!(
            owner,
            Err(InsertError::Comm(CommError::RankOutOfRange {
                rank: Rank(2),
                size: 2
            }))
        );
        assert!(matches!(exec, Err(InsertError::Plan(_))), "{exec:?}");
    }
}

#[test]
fn tags_the_runtime_keeps_for_itself_are_refused_at_the_call() {
    let out = run_local_with(2, config(), |ctx| {
        let h = ctx.register(Variable::new(1u32));
        let peer = Rank(1 - ctx.rank().0);
        let reserved = Tag(i64::MIN + 1); // the agreement check's
        (
            ctx.send(&h, peer, reserved).start().map(drop),
            ctx.recv(&h, peer, Tag(i64::MIN)).detach(|_| {}),
            ctx.mpi_register(&h, Tag(i64::MIN + 15), Owner::Rank(Rank(0))),
            // The first tag below them is the application's.
            ctx.mpi_register(&h, Tag(i64::MIN + 16), Owner::Rank(Rank(0))),
        )
    })
    .expect("a clean shutdown: nothing was posted");
    for (send, recv, reg, ok) in out {
        assert_eq!(
            send,
            Err(CommError::ReservedTag {
                tag: Tag(i64::MIN + 1)
            })
        );
        assert_eq!(recv, Err(CommError::ReservedTag { tag: Tag(i64::MIN) }));
        assert_eq!(
            reg,
            Err(InsertError::Comm(CommError::ReservedTag {
                tag: Tag(i64::MIN + 15)
            }))
        );
        assert_eq!(ok, Ok(()));
    }
}
