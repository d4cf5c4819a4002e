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
        ],
        vec![Orphan {
            source: Rank(2),
            comm: CommId(4),
            tag: Tag(9),
            size: 1 << 40,
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
