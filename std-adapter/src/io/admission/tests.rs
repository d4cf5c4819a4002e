use starling_core::Tag;

use super::*;

/// An engine stand-in: an envelope is `[tag, payload tag or 0]` (`[tag, 0, 1]`: a ready
/// acknowledgement); it refuses the tags
/// in `full` (for `table`) and records what went in; a submission is a number, refused
/// while `room` is 0.
#[derive(Default)]
struct Fake {
    full: Vec<u8>,
    table: Option<Table>,
    went_in: Vec<u8>,
    room: usize,
    submitted: Vec<u32>,
    /// Free receive slots (`None`: no budget).
    slots: Option<usize>,
    /// Keys with early data in the engine.
    early: Vec<Key>,
    /// Tables with no room ([`Admit::has_room`]).
    no_room: Vec<Table>,
    /// Whether the fast path runs ([`Admit::fast_path`]).
    fast: bool,
    /// Keys whose message waits on a fast tag in the transport.
    fast_here: Vec<Key>,
    /// How many times [`Admit::fast_message_here`] was asked.
    fast_asked: core::cell::Cell<usize>,
    /// Whether [`Admit::can_submit`] says whether there is room (`false`: the trait's
    /// default, always `true`: try).
    gate: bool,
    /// Submissions refused so far.
    refused: usize,
    /// Keys whose receive would wait inside the engine for match keys
    /// ([`Admit::recv_would_wait`]), unless their message is here.
    no_key_room: Vec<Key>,
    /// The engine's reading of its match-key room ([`Admit::recv_room`]).
    recv_room: Option<RecvRoom>,
    /// How many times [`Admit::recv_would_wait`] was asked.
    wait_asked: core::cell::Cell<usize>,
    /// The engine's count of messages kept waiting ([`Admit::waiting_arrivals`]), which
    /// only grows: bumped whenever `early` is seen changed (`early_seen`), since the
    /// tests set `early` directly.
    arrivals: core::cell::Cell<u64>,
    early_seen: core::cell::RefCell<Vec<Key>>,
    /// Whether an envelope that went in is kept as early data of its key (no receive of
    /// it is posted in this stand-in).
    keep_early: bool,
    /// How many times the early data's keys were looked through ([`Admit::early_keys`]).
    early_scans: core::cell::Cell<usize>,
}

impl Admit for Fake {
    type Cmd = u32;

    fn submit(&mut self, c: u32) -> Result<Option<Key>, u32> {
        if self.room == 0 {
            self.refused += 1;
            return Err(c);
        }
        self.room -= 1;
        self.submitted.push(c);
        // Odd numbers are receives of tag `c`.
        Ok((c % 2 == 1).then(|| Key::new(CommId::WORLD, Rank(0), Tag(i64::from(c)))))
    }

    fn hand_in(&mut self, _: Rank, _: CommId, bytes: Vec<u8>) -> Result<(), (Vec<u8>, Table)> {
        if self.full.contains(&bytes[0]) {
            return Err((bytes, self.table.unwrap_or(Table::Requests)));
        }
        self.went_in.push(bytes[0]);
        if self.keep_early {
            self.early.push(key(u32::from(bytes[0])));
        }
        Ok(())
    }

    fn has_room(&self, table: Table) -> bool {
        !self.no_room.contains(&table)
    }

    fn refusal_order(&self, source: Rank, comm: CommId, b: &[u8]) -> Option<RefusalOrder> {
        let payload = (b[1] != 0).then_some(PhysTag(i32::from(b[1])));
        let reply = b.get(2) == Some(&1);
        Some(RefusalOrder {
            key: Key::new(comm, source, Tag(i64::from(b[0]))),
            payload,
            reply,
            // (as the engine decides it, every key having a fast tag while `fast`)
            receive_lets_in: payload.is_none() && !reply && !self.fast,
        })
    }

    fn can_submit(&self, _: Direction) -> bool {
        !self.gate || self.room > 0
    }

    fn recv_key(&self, c: &u32) -> Option<Key> {
        (c % 2 == 1).then(|| Key::new(CommId::WORLD, Rank(0), Tag(i64::from(*c))))
    }

    fn free_recv_slots(&self) -> Option<usize> {
        self.slots
    }

    fn has_early(&self, key: Key) -> bool {
        self.early.contains(&key)
    }

    fn early_keys(&self, f: &mut dyn FnMut(Key)) {
        self.early_scans.set(self.early_scans.get() + 1);
        for k in &self.early {
            f(*k);
        }
    }

    fn any_early(&self) -> bool {
        !self.early.is_empty()
    }

    fn waiting_arrivals(&self) -> u64 {
        if *self.early_seen.borrow() != self.early {
            self.early_seen.borrow_mut().clone_from(&self.early);
            self.arrivals.set(self.arrivals.get() + 1);
        }
        self.arrivals.get()
    }

    fn fast_message_here(&self, key: Key) -> bool {
        self.fast_asked.set(self.fast_asked.get() + 1);
        self.fast && self.fast_here.contains(&key)
    }

    fn fast_path(&self) -> bool {
        self.fast
    }

    fn recv_would_wait(&self, key: Key) -> bool {
        self.wait_asked.set(self.wait_asked.get() + 1);
        self.no_key_room.contains(&key) && !self.early.contains(&key)
    }

    fn recv_room(&self) -> Option<RecvRoom> {
        self.recv_room
    }
}

fn arrive(a: &mut Admission<u32>, f: &mut Fake, tag: u8, payload: u8) -> bool {
    a.on_envelope(f, Rank(0), CommId::WORLD, vec![tag, payload])
}

#[test]
fn a_refused_envelope_holds_back_its_key_and_payload_tag_only() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![1];
    f.table = Some(Table::MatchKeys);
    assert!(!arrive(&mut a, &mut f, 1, 9)); // refused
    f.full.clear();
    assert!(!arrive(&mut a, &mut f, 1, 0), "same key: behind it");
    assert!(!arrive(&mut a, &mut f, 2, 9), "same payload tag: behind it");
    assert!(
        arrive(&mut a, &mut f, 3, 8),
        "another key and payload tag go by"
    );
    assert_eq!(f.went_in, [3]);
    assert_eq!(a.refusals(), 1);
    // Retried in arrival order, each behind what it must stay behind.
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [3, 1, 1, 2]);
    assert!(a.is_empty());
}

/// A ready acknowledgement (the answer to a synchronous send of this rank) on `tag`.
fn ack(a: &mut Admission<u32>, f: &mut Fake, tag: u8) -> bool {
    a.on_envelope(f, Rank(0), CommId::WORLD, vec![tag, 0, 1])
}

#[test]
fn a_ready_acknowledgement_goes_by_the_refused_envelopes_of_its_key() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![1];
    f.table = Some(Table::MatchKeys);
    assert!(!arrive(&mut a, &mut f, 1, 0)); // a message of key 1: refused
    f.full.clear();
    assert!(
        !arrive(&mut a, &mut f, 1, 0),
        "a message of its key: behind it"
    );
    // Held behind them, the synchronous send it answers could wait for a receive that
    // waits for that send's own receive to complete.
    assert!(ack(&mut a, &mut f, 1), "an answer on the same key goes by");
    assert_eq!(f.went_in, [1]);
    // Refused itself (for a full output queue), it waits apart and goes first.
    f.full = vec![1];
    f.table = Some(Table::Transmits);
    assert!(!ack(&mut a, &mut f, 1));
    f.full.clear();
    f.no_room = vec![Table::MatchKeys]; // the messages' table stays full
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [1, 1], "the answer only");
    assert!(!a.is_empty(), "the two messages still wait");
}

#[test]
fn a_pass_tries_only_the_envelopes_whose_table_may_have_room() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![1, 2, 3];
    f.table = Some(Table::MatchKeys);
    // (data envelopes, each on its own payload tag: retried after progress, since
    // another key's envelope may wait behind one on its payload tag)
    for tag in 1..=3 {
        assert!(!arrive(&mut a, &mut f, tag, 10 + tag));
    }
    assert_eq!(a.refusals(), 3);
    // Their table is full: a pass hands none of them in (not even to be refused).
    f.no_room = vec![Table::MatchKeys];
    for _ in 0..10 {
        assert!(!a.retry_refused(&mut f));
    }
    assert_eq!(a.refusals(), 3);
    // Room frees: they are tried, oldest first.
    f.no_room.clear();
    f.full = vec![2, 3];
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [1]);
    f.full.clear();
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [1, 2, 3]);
    assert!(a.is_empty());
}

#[test]
fn a_message_refused_for_room_to_wait_goes_in_with_its_receive_and_costs_no_retry_pass() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![1, 3, 5];
    f.table = Some(Table::EarlyData);
    for tag in [1, 3, 5] {
        assert!(!arrive(&mut a, &mut f, tag, 0));
    }
    assert_eq!(a.refusals(), 3);
    // Room frees: a pass hands none in (each would only wait in the engine for its
    // receive, taking room), so none is refused again either.
    f.full.clear();
    for _ in 0..10 {
        assert!(!a.retry_refused(&mut f));
    }
    assert_eq!(a.refusals(), 3);
    assert!(f.went_in.is_empty());
    // Kept all the same: what the hang explainer and the leftovers see.
    assert_eq!(a.refused().count(), 3);
    // A receive of key 3 goes in, and its message with it (no other).
    f.room = 1;
    a.offer(&mut f, Direction::Recv, 3);
    assert_eq!(f.submitted, [3]);
    assert_eq!(f.went_in, [3]);
    assert_eq!(a.refused().count(), 2);
    // Refused for a full output queue instead, a message is retried after progress.
    f.full = vec![7];
    f.table = Some(Table::Transmits);
    assert!(!arrive(&mut a, &mut f, 7, 0));
    f.full.clear();
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [3, 7]);
    // So is one on a fast tag (protocol §19): its receive takes it only once marked.
    f.fast = true;
    f.full = vec![9];
    f.table = Some(Table::EarlyData);
    assert!(!arrive(&mut a, &mut f, 9, 0));
    f.full.clear();
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [3, 7, 9]);
    assert_eq!(a.refused().count(), 2);
}

#[test]
fn an_envelope_freed_by_the_one_before_it_is_tried_whatever_refused_that_one() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    // Key 1 (payload tag 9) is refused for the key table; key 2 on the same payload
    // tag waits behind it.
    f.full = vec![1];
    f.table = Some(Table::MatchKeys);
    assert!(!arrive(&mut a, &mut f, 1, 9));
    assert!(!arrive(&mut a, &mut f, 2, 9));
    // The key table stays full, but a receive of key 1 takes its envelope ...
    f.full.clear();
    f.no_room = vec![Table::MatchKeys];
    f.room = 1;
    a.offer(&mut f, Direction::Recv, 1);
    assert_eq!(f.went_in, [1]);
    // ... and key 2's envelope, free now, is tried by the next pass (its receive may
    // be posted: it may need no room).
    assert!(a.retry_refused(&mut f));
    assert_eq!(f.went_in, [1, 2]);
    assert!(a.is_empty());
}

#[test]
fn a_posted_receive_lets_its_refused_envelopes_in_and_a_full_slab_stops_a_pass() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![5, 7];
    assert!(!arrive(&mut a, &mut f, 5, 0));
    assert!(!arrive(&mut a, &mut f, 7, 0));
    f.full = vec![5];
    // A pass stops at the first envelope refused for want of a slot (the next would
    // need one too) ...
    assert!(!a.retry_refused(&mut f));
    assert!(f.went_in.is_empty());
    // ... but a receive of key 7, once in, takes its envelope at once.
    f.room = 1;
    a.offer(&mut f, Direction::Recv, 7);
    assert_eq!(
        (f.submitted.as_slice(), f.went_in.as_slice()),
        (&[7][..], &[7][..])
    );
    // A receive that waits for room takes its envelope when it goes in.
    a.offer(&mut f, Direction::Recv, 5);
    assert_eq!(f.submitted, [7], "no room: it waits");
    f.full.clear();
    f.room = 1;
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.went_in, [7, 5]);
    assert!(a.is_empty());
}

fn key(tag: u32) -> Key {
    Key::new(CommId::WORLD, Rank(0), Tag(i64::from(tag)))
}

#[test]
fn the_last_receive_slot_is_kept_for_a_receive_whose_message_is_here() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.full = vec![5];
    assert!(!arrive(&mut a, &mut f, 5, 0)); // refused: 5's message is here
    f.full.clear();
    f.room = 5;
    f.slots = Some(1);
    // 3's message is not here: it may not take the last slot, and waits.
    a.offer(&mut f, Direction::Recv, 3);
    assert!(f.submitted.is_empty());
    // 5's message is here (refused): it goes by 3, and takes its envelope.
    a.offer(&mut f, Direction::Recv, 5);
    assert_eq!((&f.submitted[..], &f.went_in[..]), (&[5][..], &[5][..]));
    // So does 7, whose message waits in the engine as early data.
    f.early = vec![key(7)];
    a.offer(&mut f, Direction::Recv, 7);
    assert_eq!(f.submitted, [5, 7]);
    // 9's is not here: behind 3; nothing goes in while the last slot is all there is.
    f.early.clear();
    a.offer(&mut f, Direction::Recv, 9);
    assert!(!a.admit_waiting(&mut f));
    // 9's message arrives (early data): it goes ahead of 3.
    f.early = vec![key(9)];
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [5, 7, 9]);
    // 3 goes in once the slot it would take is not the last.
    f.early.clear();
    f.slots = Some(2);
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [5, 7, 9, 3]);
    assert!(a.is_empty());
}

#[test]
fn a_receive_whose_message_is_here_stays_behind_a_waiting_one_of_its_key() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.slots = Some(1);
    f.room = 5;
    a.offer(&mut f, Direction::Recv, 3); // not here: waits
    f.early = vec![key(3)];
    a.offer(&mut f, Direction::Recv, 3); // here, but behind the first of its key
    assert!(f.submitted.is_empty());
    // The first of key 3 is now the one whose message is here: it goes, then the
    // second (its message still counts as here in this stand-in).
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [3, 3]);
}

#[test]
fn submissions_wait_in_order_per_direction() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    a.offer(&mut f, Direction::Send, 2);
    f.room = 5;
    a.offer(&mut f, Direction::Send, 4); // behind 2, though there is room
    a.offer(&mut f, Direction::Recv, 1);
    assert_eq!(f.submitted, [1]);
    assert_eq!(
        a.waiting(Direction::Send).copied().collect::<Vec<_>>(),
        [2, 4]
    );
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [1, 2, 4]);
    assert_eq!(a.queued(), 2);
    assert!(a.is_empty());
}

#[test]
fn without_the_fast_path_an_idle_pass_asks_nothing_of_each_waiting_key() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.slots = Some(1);
    f.room = 5_000;
    // 1 000 receives whose messages are not here wait for the last slot.
    for tag in (1..2_000).step_by(2) {
        a.offer(&mut f, Direction::Recv, tag);
    }
    assert!(f.submitted.is_empty());
    // Idle passes (a transport that polls without pause makes one per poll) ask about
    // the oldest waiting receive only, not about every waiting key: that search made
    // the passes quadratic in the waiting receives over MPI.
    f.fast_asked.set(0);
    for _ in 0..100 {
        assert!(!a.admit_waiting(&mut f));
    }
    assert!(f.fast_asked.get() <= 100, "{} asked", f.fast_asked.get());
    // With the fast path, a message waiting on a fast tag is found among them, and its
    // receive goes ahead of the older ones.
    f.fast = true;
    f.fast_here = vec![key(1_001)];
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [1_001]);
    assert!(f.fast_asked.get() > 0);
}

#[test]
fn a_pass_takes_nothing_out_of_its_queue_while_the_engine_has_no_room() {
    for gate in [false, true] {
        let (mut a, mut f) = (Admission::default(), Fake::default());
        f.gate = gate;
        // Sends (even numbers) and receives (odd) wait: the engine has no room.
        for c in [2, 1, 4, 3, 6, 5] {
            let dir = if c % 2 == 0 {
                Direction::Send
            } else {
                Direction::Recv
            };
            a.offer(&mut f, dir, c);
        }
        let offered = f.refused;
        for _ in 0..10 {
            assert!(!a.admit_waiting(&mut f));
        }
        // Asked first, a pass is refused nothing; tried blind, it is refused a send and
        // a receive on every pass (each taken out of its queue and put back).
        let passes = f.refused - offered;
        assert_eq!(passes, if gate { 0 } else { 20 }, "gate {gate}");
        assert_eq!(offered, if gate { 0 } else { 2 }, "gate {gate}");
        // Room frees: they go in, in order per direction, sends first.
        f.room = 6;
        assert!(a.admit_waiting(&mut f));
        assert_eq!(f.submitted, [2, 4, 6, 1, 3, 5]);
        assert!(a.is_empty());
    }
}

/// Whether the kept keys of the waiting receives are those a fresh pass would build.
fn index_agrees(a: &Admission<u32>, f: &Fake) -> bool {
    if !a.indexed {
        return a.recv_keys.is_empty();
    }
    let mut fresh: IdMap<Key, Vec<u64>> = IdMap::default();
    for (seq, c) in a.recvs.iter() {
        if let Some(k) = f.recv_key(c) {
            fresh.entry(k).or_default().push(seq);
        }
    }
    fresh.len() == a.recv_keys.len()
        && fresh.iter().all(|(k, seqs)| {
            a.recv_keys.get(k).is_some_and(|q| {
                core::iter::once(q.head)
                    .chain(q.rest.iter().copied())
                    .eq(seqs.iter().copied())
            })
        })
}

#[test]
fn the_waiting_receives_keys_are_kept_only_while_a_question_needs_them() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.slots = Some(1);
    f.room = 5_000;
    // 100 receives whose messages are not here wait for the last slot: nothing asks
    // which keys wait, so none are kept (with 100 000 waiting, keeping them was two
    // probes of a cold table per receive).
    for tag in (1..200).step_by(2) {
        a.offer(&mut f, Direction::Recv, tag);
    }
    for _ in 0..10 {
        assert!(!a.admit_waiting(&mut f));
    }
    assert!(!a.indexed);
    // 101's message arrives as early data: the search for it builds the keys, and 101
    // goes ahead of the older ones.
    f.early = vec![key(101)];
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [101]);
    assert!(a.indexed && index_agrees(&a, &f));
    // Kept from then on as receives wait and go: a second receive of 51 waits behind
    // the first of its key, then 51's message is here and both go, in order.
    f.early.clear();
    a.offer(&mut f, Direction::Recv, 51);
    assert!(index_agrees(&a, &f));
    f.early = vec![key(51)];
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [101, 51, 51]);
    assert!(index_agrees(&a, &f));
    // Once nothing waits, nothing is kept.
    f.early.clear();
    f.slots = Some(1_000);
    assert!(a.admit_waiting(&mut f));
    assert!(a.is_empty() && !a.indexed && index_agrees(&a, &f));
    // A refused envelope of a waiting key builds them again: its receive is noted as
    // having its message here, and goes ahead of the one before it.
    f.slots = Some(1);
    a.offer(&mut f, Direction::Recv, 1); // not here: waits
    a.offer(&mut f, Direction::Recv, 3); // not here yet: waits behind 1
    assert!(!a.indexed);
    f.full = vec![3];
    assert!(!arrive(&mut a, &mut f, 3, 0)); // refused: 3's message is here
    f.full.clear();
    assert!(a.admit_waiting(&mut f));
    assert!(a.indexed && index_agrees(&a, &f));
    assert_eq!(f.submitted.last(), Some(&3));
    assert_eq!(f.went_in, [3]);
    assert_eq!(a.waiting(Direction::Recv).copied().collect::<Vec<_>>(), [1]);
}

/// A stand-in with room for submissions and one free receive slot, which keeps every
/// envelope handed in as early data of its key.
fn keeping_early_data() -> Fake {
    Fake {
        slots: Some(1),
        room: 5_000,
        keep_early: true,
        ..Fake::default()
    }
}

#[test]
fn an_envelope_kept_as_early_data_notes_its_receive_and_spares_a_search_of_the_early_data() {
    let (mut a, mut f) = (Admission::default(), keeping_early_data());
    // 100 receives whose messages are not here wait for the last slot.
    for tag in (1..200).step_by(2) {
        a.offer(&mut f, Direction::Recv, tag);
    }
    assert!(!a.admit_waiting(&mut f));
    // The messages of 151, then of 51, arrive and are kept as early data: each arrival
    // notes its key's oldest waiting receive, and both go ahead of the older ones, the
    // older of the two first, with no look through the engine's early data (with
    // receives waiting out of flow order, that look on every arrival was a pass over up
    // to a thousand keys a message).
    assert!(arrive(&mut a, &mut f, 151, 0));
    assert!(arrive(&mut a, &mut f, 51, 0));
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [51, 151]);
    assert_eq!(f.early_scans.get(), 0, "the early data was looked through");
    // A message the engine kept without this admission handing it in (its count moved
    // alone): one look finds it.
    f.early.push(key(99));
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [51, 151, 99]);
    assert_eq!(f.early_scans.get(), 1);
    assert!(!a.admit_waiting(&mut f));
    assert_eq!(
        f.early_scans.get(),
        1,
        "nothing arrived since: no second look"
    );
}

#[test]
fn two_early_messages_of_a_key_take_its_two_waiting_receives_without_a_search() {
    let (mut a, mut f) = (Admission::default(), keeping_early_data());
    a.offer(&mut f, Direction::Recv, 1); // its message never comes
    a.offer(&mut f, Direction::Recv, 51);
    a.offer(&mut f, Direction::Recv, 51);
    assert!(!a.admit_waiting(&mut f));
    assert!(arrive(&mut a, &mut f, 51, 0));
    assert!(arrive(&mut a, &mut f, 51, 0));
    // The first receive of 51 goes in; the second is then the oldest of its key, and
    // the message left for it is noted as the first goes in.
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [51, 51]);
    assert_eq!(f.early_scans.get(), 0, "the early data was looked through");
    assert_eq!(a.waiting(Direction::Recv).copied().collect::<Vec<_>>(), [1]);
}

fn room(keys: usize) -> RecvRoom {
    RecvRoom {
        keys,
        fast_keys: 0,
        arrivals: 0,
        deferred: 0,
    }
}

#[test]
fn a_receive_that_would_wait_inside_the_engine_for_a_key_waits_here_until_its_message_comes() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.room = 10;
    f.slots = Some(10);
    let key = |c: u32| Key::new(CommId::WORLD, Rank(0), Tag(i64::from(c)));
    // Receive 1 would wait inside the engine (every match key taken): it waits here,
    // and receive 3 behind it, whatever its own key.
    f.no_key_room = vec![key(1)];
    a.offer(&mut f, Direction::Recv, 1);
    a.offer(&mut f, Direction::Recv, 3);
    assert!(f.submitted.is_empty());
    assert!(!a.admit_waiting(&mut f));
    assert!(f.submitted.is_empty());
    // Its message came (early data in the engine): it is matched at once, so it goes in.
    f.early = vec![key(1)];
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [1, 3]);
    // A key freed: a receive goes in at once.
    f.early.clear();
    f.no_key_room.clear();
    a.offer(&mut f, Direction::Recv, 5);
    assert_eq!(f.submitted, [1, 3, 5]);
}

#[test]
fn the_oldest_receive_found_not_to_go_in_is_asked_about_again_only_once_the_engine_changed() {
    let (mut a, mut f) = (Admission::default(), Fake::default());
    f.room = 10;
    f.slots = Some(10);
    f.recv_room = Some(room(1024));
    let key = Key::new(CommId::WORLD, Rank(0), Tag(1));
    f.no_key_room = vec![key];
    a.offer(&mut f, Direction::Recv, 1);
    let asked = f.wait_asked.get();
    // Idle polls: nothing changed, nothing asked.
    for _ in 0..5 {
        assert!(!a.admit_waiting(&mut f));
    }
    assert!(f.wait_asked.get() <= asked + 1, "asked on every idle poll");
    let asked = f.wait_asked.get();
    // A key freed: the reading changed, so it is asked again and goes in.
    f.no_key_room.clear();
    f.recv_room = Some(room(1023));
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [1]);
    assert!(f.wait_asked.get() > asked);
    // A free slot more changes the answer too: a receive that may not take the last
    // slot waits, and goes in once another slot freed, the reading unchanged.
    f.slots = Some(1);
    a.offer(&mut f, Direction::Recv, 3);
    assert!(!a.admit_waiting(&mut f));
    f.slots = Some(2);
    assert!(a.admit_waiting(&mut f));
    assert_eq!(f.submitted, [1, 3]);
}
