use super::*;

fn recv(peer: u32, tag: i64, data: u32, stage: Stage) -> Pending {
    Pending {
        kind: Waiting::Recv,
        peer: Rank(peer),
        comm: CommId::WORLD,
        tag: Tag(tag),
        data: Some(DataId(data)),
        stage,
        age: Duration::from_millis(1500),
    }
}

fn send(peer: u32, tag: i64, data: u32, stage: Stage) -> Pending {
    Pending {
        kind: Waiting::Send,
        ..recv(peer, tag, data, stage)
    }
}

fn report(rank: u32, size: u32, pending: Vec<Pending>, orphans: Vec<Orphan>) -> RankReport {
    RankReport {
        rank: Rank(rank),
        size,
        pending,
        orphans,
    }
}

const AWAITING: Stage = Stage::Engine(State::AwaitingEnvelope);

#[test]
fn a_receive_whose_sender_never_sent_is_named() {
    let reports = [
        report(0, 2, vec![], vec![]),
        report(1, 2, vec![recv(0, 17, 3, AWAITING)], vec![]),
    ];
    let why = explain(2, &reports);
    assert_eq!(
        why,
        vec![
            "rank 1 waits for tag 17 from rank 0 (into data 3, for 1.5 s); rank 0 never sent \
             it and waits for nothing: its flow has no such send"
                .to_owned()
        ]
    );
}

#[test]
fn two_ranks_waiting_for_each_other_are_a_deadlock() {
    let reports = [
        report(0, 2, vec![recv(1, 17, 0, AWAITING)], vec![]),
        report(1, 2, vec![recv(0, 5, 0, AWAITING)], vec![]),
    ];
    let why = explain(2, &reports);
    assert_eq!(
        why[0],
        "deadlock: rank 0 waits for rank 1, which waits for rank 0"
    );
    assert!(
        why[1].starts_with("rank 0 waits for tag 17 from rank 1")
            && why[1].ends_with("rank 1 never sent it: it is itself waiting for tag 5 from rank 0"),
        "{why:?}"
    );
}

#[test]
fn a_three_rank_cycle_is_found_once() {
    let reports = [
        report(0, 3, vec![recv(2, 1, 0, AWAITING)], vec![]),
        report(1, 3, vec![recv(0, 1, 0, AWAITING)], vec![]),
        report(2, 3, vec![recv(1, 1, 0, AWAITING)], vec![]),
    ];
    let why = explain(3, &reports);
    let cycles: Vec<_> = why.iter().filter(|l| l.starts_with("deadlock")).collect();
    assert_eq!(
        cycles,
        ["deadlock: rank 0 waits for rank 2, which waits for rank 1, which waits for rank 0"]
    );
}

#[test]
fn a_message_sent_with_another_tag_is_pointed_at() {
    let orphan = Orphan {
        source: Rank(0),
        comm: CommId::WORLD,
        tag: Tag(18),
        size: 8,
        refused: false,
    };
    let reports = [
        report(0, 2, vec![], vec![]),
        report(1, 2, vec![recv(0, 17, 3, AWAITING)], vec![orphan]),
    ];
    let why = explain(2, &reports);
    assert!(
        why[0].ends_with(
            "rank 0 never sent it; it sent tag 18 (8 bytes) instead, which rank 1 never received"
        ),
        "{why:?}"
    );
    assert_eq!(
        why.len(),
        1,
        "the orphan is explained with the receive: {why:?}"
    );
}

#[test]
fn a_send_waiting_for_its_data_names_the_receive_that_feeds_it() {
    // Rank 1 forwards data 4: it receives it from rank 2 (never sent) and then sends it
    // to rank 0, which waits.
    let reports = [
        report(0, 3, vec![recv(1, 7, 0, AWAITING)], vec![]),
        report(
            1,
            3,
            vec![
                recv(2, 9, 4, AWAITING),
                send(0, 7, 4, Stage::WaitingForData),
            ],
            vec![],
        ),
        report(2, 3, vec![], vec![]),
    ];
    let why = explain(3, &reports);
    assert!(
        why.iter().any(|l| l.ends_with(
            "rank 1's send of it waits for its data (data 4): the receive into it of tag 9 from rank 2"
        )),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|l| l.starts_with("rank 1 waits for tag 9 from rank 2")),
        "{why:?}"
    );
    assert!(!why.iter().any(|l| l.starts_with("deadlock")), "{why:?}");
}

#[test]
fn ranks_missing_from_a_barrier_are_named_with_what_they_wait_for() {
    let barrier = Pending {
        kind: Waiting::Barrier,
        peer: Rank(0),
        comm: CommId::WORLD,
        tag: Tag(0),
        data: None,
        stage: Stage::Posted,
        age: Duration::from_secs(2),
    };
    let reports = [
        report(0, 3, vec![barrier.clone()], vec![]),
        report(1, 3, vec![recv(2, 3, 0, AWAITING)], vec![]),
        report(
            2,
            3,
            vec![Pending {
                peer: Rank(2),
                ..barrier
            }],
            vec![],
        ),
    ];
    let why = explain(3, &reports);
    assert!(
        why.contains(&"ranks 0, 2 wait in a barrier; rank 1 never entered it (rank 1 waits for tag 3 from rank 2)".to_owned()),
        "{why:?}"
    );
    assert_eq!(
        why[0],
        "deadlock: rank 1 waits for rank 2, which waits for rank 1"
    );
}

#[test]
fn a_missing_report_is_named() {
    let reports = [report(1, 2, vec![recv(0, 1, 0, AWAITING)], vec![])];
    let why = explain(2, &reports);
    assert!(why[0].ends_with("rank 0 sent no report"), "{why:?}");
    assert_eq!(
        why.last().unwrap(),
        "no report from rank 0 (it may have died, or be stuck outside Starling)"
    );
}

#[test]
fn nothing_pending_explains_nothing() {
    assert!(
        explain(
            2,
            &[report(0, 2, vec![], vec![]), report(1, 2, vec![], vec![])]
        )
        .is_empty()
    );
}

#[test]
fn a_report_reads_back_from_its_text() {
    let r = report(
        3,
        4,
        vec![
            recv(1, -5, 2, AWAITING),
            Pending {
                data: None,
                ..send(0, i64::MAX, 0, Stage::WaitingForData)
            },
            Pending {
                kind: Waiting::Check,
                ..recv(3, 0, 0, Stage::Posted)
            },
            recv(1, 4, 2, Stage::Queued),
            Pending {
                kind: Waiting::Shutdown,
                ..recv(2, 0, 0, Stage::Posted)
            },
        ],
        vec![Orphan {
            source: Rank(2),
            comm: CommId(4),
            tag: Tag(9),
            size: 1 << 40,
            refused: true,
        }],
    );
    let text = r.to_text();
    assert_eq!(RankReport::parse(&text), Ok(r));
}

#[test]
fn a_damaged_report_is_an_error_never_a_panic() {
    let text = report(1, 2, vec![recv(0, 1, 0, AWAITING)], vec![]).to_text();
    // Truncated at every byte (but the final newline, which a reader may lose).
    for n in 0..text.len() - 1 {
        if text.is_char_boundary(n) {
            assert!(
                RankReport::parse(&text[..n]).is_err(),
                "{n}: {:?}",
                &text[..n]
            );
        }
    }
    for bad in [
        "",
        "hello",
        "starling hang report v1\nrank x size 2\nend\n",
        "starling hang report v1\nrank 1 size 2\npending fly peer=0\nend\n",
        "starling hang report v1\nrank 1 size 2\npending recv peer=0 comm=0 tag=1 data=- stage=bored age_ms=1\nend\n",
        "starling hang report v1\nrank 1 size 2\npending recv peer=99999999999 comm=0 tag=1 data=- stage=posted age_ms=1\nend\n",
        "starling hang report v1\nrank 1 size 2\norphan source=0\nend\n",
    ] {
        assert!(RankReport::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_findings_do_not_depend_on_the_order_of_the_reports() {
    let reports = [
        report(0, 3, vec![recv(1, 17, 0, AWAITING)], vec![]),
        report(1, 3, vec![recv(2, 5, 0, AWAITING)], vec![]),
        report(2, 3, vec![recv(0, 9, 0, AWAITING)], vec![]),
    ];
    let mut reversed = reports.clone();
    reversed.reverse();
    let why = explain(3, &reports);
    assert_eq!(why, explain(3, &reversed));
    assert!(why[1].starts_with("rank 0 waits"), "{why:?}");
}

// ----- refused and queued items, shutdown, summaries ---------------------------------------

/// A message from `source` with `tag` that arrived and waits on its receiver.
fn held(source: u32, tag: i64, refused: bool) -> Orphan {
    Orphan {
        source: Rank(source),
        comm: CommId::WORLD,
        tag: Tag(tag),
        size: 8,
        refused,
    }
}

#[test]
fn a_message_sent_but_refused_at_its_receiver_is_not_blamed_on_its_sender() {
    // Rank 1's receive of tag 5 waits for room in its engine; the message it waits for
    // arrived and was refused for a full table. Rank 0 waits for tag 9 from rank 1, sent
    // after rank 1's receive: once one wait for each other, now only rank 0 waits on rank
    // 1 (the message rank 1 waits for is on rank 1 already).
    let reports = [
        report(0, 2, vec![recv(1, 9, 0, AWAITING)], vec![]),
        report(
            1,
            2,
            vec![recv(0, 5, 1, Stage::Queued)],
            vec![held(0, 5, true)],
        ),
    ];
    let why = explain(2, &reports);
    let text = why.join("\n");
    assert!(!text.contains("deadlock"), "{text}");
    assert!(!text.contains("rank 0 never sent"), "{text}");
    assert!(
        text.contains(
            "rank 1 waits for tag 5 from rank 0 (into data 1, for 1.5 s); rank 0 sent it and \
             it arrived: rank 1 holds it (refused by its engine for a full table and kept, in \
             order, until it fits); the receive is waiting for room in the engine's tables"
        ),
        "{text}"
    );
    // Early data is named as such, and only as many receives as messages held are said
    // to have theirs.
    let reports = [
        report(0, 2, vec![], vec![]),
        report(
            1,
            2,
            vec![recv(0, 5, 1, AWAITING), recv(0, 5, 2, AWAITING)],
            vec![held(0, 5, false)],
        ),
    ];
    let why = explain(2, &reports);
    assert!(why[0].ends_with("rank 1 holds it (as early data in its engine); the receive is no matching message arrived"), "{why:?}");
    assert!(
        why[1].ends_with("rank 0 never sent it and waits for nothing: its flow has no such send"),
        "{why:?}"
    );
}

#[test]
fn ranks_at_shutdown_wait_for_no_one() {
    // Rank 0 finished and waits in the closing barrier; rank 1 waits for a message from
    // rank 0 and rank 2 for one from rank 1. A barrier would make rank 0 wait for rank 1
    // (a cycle); shutdown does not: rank 0 will never send it.
    let at_shutdown = Pending {
        kind: Waiting::Shutdown,
        data: None,
        ..recv(0, 0, 0, Stage::Posted)
    };
    let reports = [
        report(0, 3, vec![at_shutdown.clone()], vec![]),
        report(1, 3, vec![recv(0, 3, 1, AWAITING)], vec![]),
        report(2, 3, vec![at_shutdown], vec![]),
    ];
    let why = explain(3, &reports);
    let text = why.join("\n");
    assert!(!text.contains("deadlock"), "{text}");
    assert!(
        text.contains("rank 0 finished its work without sending it (it waits at shutdown)"),
        "{text}"
    );
    assert!(
        text.contains(
            "ranks 0, 2 wait in the closing barrier of shutdown (their work is done); rank 1 \
             never entered it (rank 1 waits for tag 3 from rank 0)"
        ),
        "{text}"
    );
    // The same with a barrier of the application is a deadlock.
    let barrier = |r| {
        report(
            r,
            3,
            vec![Pending {
                kind: Waiting::Barrier,
                data: None,
                ..recv(r, 0, 0, Stage::Posted)
            }],
            vec![],
        )
    };
    let reports = [
        barrier(0),
        report(1, 3, vec![recv(0, 3, 1, AWAITING)], vec![]),
        barrier(2),
    ];
    assert!(explain(3, &reports)[0].starts_with("deadlock: rank 0 waits for rank 1"));
}

#[test]
fn thousands_of_like_findings_are_summarised_with_their_count_first_and_last() {
    const N: i64 = 5_000;
    // Rank 1 waits for 5 000 messages rank 0 never sent, and holds 5 000 refused ones of
    // other tags from rank 2.
    let reports = [
        report(0, 3, vec![], vec![]),
        report(
            1,
            3,
            (0..N).map(|t| recv(0, t, t as u32, AWAITING)).collect(),
            (0..N).map(|t| held(2, N + t, true)).collect(),
        ),
        report(2, 3, vec![], vec![]),
    ];
    let e = explain_all(3, &reports);
    assert_eq!(e.findings.len(), 2 * N as usize);
    assert!(e.is_summarised());
    assert_eq!(explain(3, &reports), e.summary);
    let text = e.summary.join("\n");
    assert!(e.summary.len() < 10, "{text}");
    assert!(
        e.summary[0].starts_with(
            "10000 findings in 2 groups (5000 pending requests; 5000 messages arrived and not \
             taken, 5000 of them refused for a full table)"
        ),
        "{text}"
    );
    assert!(
        text.contains("5000 like this; the first: rank 1 waits for tag 0 from rank 0")
            && text.contains("  … the last: rank 1 waits for tag 4999 from rank 0")
            && text.contains(
                "5000 like this; the first: rank 1 holds a message from rank 2 with tag 5000"
            )
            && text.contains("  … the last: rank 1 holds a message from rank 2 with tag 9999"),
        "{text}"
    );
    // Kept: every finding in a file the last line names.
    let dir = std::env::temp_dir().join(format!("starling-hang-test-{}", std::process::id()));
    let lines = explain_and_keep(3, &reports, &dir);
    assert_eq!(lines.len(), e.summary.len() + 1);
    let last = lines.last().expect("a path line");
    let path = last
        .strip_prefix("the full list (10000 findings): ")
        .unwrap_or_else(|| panic!("{last}"));
    let kept = std::fs::read_to_string(path).expect("the full list");
    assert_eq!(kept.lines().count(), 2 * N as usize);
    assert!(kept.contains("rank 1 waits for tag 2500 from rank 0"));
    let _ = std::fs::remove_dir_all(&dir);
    // A few findings alike are listed, not summarised, and nothing is written.
    let few = [
        report(0, 2, vec![], vec![]),
        report(
            1,
            2,
            (0..3).map(|t| recv(0, t, 0, AWAITING)).collect(),
            vec![],
        ),
    ];
    let e = explain_all(2, &few);
    assert!(!e.is_summarised());
    assert_eq!(explain_and_keep(2, &few, &dir).len(), 3);
    assert!(!dir.exists());
}
