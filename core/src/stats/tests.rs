use std::string::{String, ToString};
use std::vec::Vec;

use super::*;

fn enabled<const P: usize>() -> Stats<P> {
    let mut s = Stats::new();
    s.enable();
    s
}

#[test]
fn new_table_is_disabled_and_records_nothing() {
    let mut s = Stats::<4>::new();
    assert!(!s.is_enabled());
    assert_eq!(s.record_send(Rank(1), 10), Ok(()));
    assert_eq!(s.record_recv(Rank(1), 10), Ok(()));
    assert_eq!(s.total(), PeerStats::ZERO);
    assert_eq!(s.peers().count(), 0);
}

#[test]
fn send_and_recv_are_counted_per_peer_and_in_total() {
    let mut s = enabled::<4>();
    s.record_send(Rank(2), 100).unwrap();
    s.record_send(Rank(2), 300).unwrap();
    s.record_send(Rank(1), 50).unwrap();
    s.record_recv(Rank(1), 7).unwrap();
    s.record_recv(Rank(3), 0).unwrap();
    assert_eq!(s.sent_to(Rank(2)), 400);
    assert_eq!(s.sent_to(Rank(1)), 50);
    assert_eq!(s.received_from(Rank(1)), 7);
    assert_eq!(
        s.peer(Rank(2)),
        PeerStats {
            bytes_sent: 400,
            msgs_sent: 2,
            bytes_received: 0,
            msgs_received: 0,
            max_sent: 300
        }
    );
    assert_eq!(
        s.peer(Rank(3)),
        PeerStats {
            msgs_received: 1,
            ..PeerStats::ZERO
        }
    );
    assert_eq!(
        s.total(),
        PeerStats {
            bytes_sent: 450,
            msgs_sent: 3,
            bytes_received: 7,
            msgs_received: 2,
            max_sent: 300
        }
    );
}

#[test]
fn unknown_peer_reads_as_zero() {
    let s = enabled::<4>();
    assert_eq!(s.sent_to(Rank(9)), 0);
    assert_eq!(s.received_from(Rank(9)), 0);
    assert_eq!(s.peer(Rank(9)), PeerStats::ZERO);
}

#[test]
fn peers_iterate_in_rank_order() {
    let mut s = enabled::<8>();
    for r in [5, 1, 3, 0, 7] {
        s.record_send(Rank(r), u64::from(r)).unwrap();
    }
    let ranks: Vec<u32> = s.peers().map(|(r, _)| r.0).collect();
    assert_eq!(ranks, [0, 1, 3, 5, 7]);
}

#[test]
fn new_peer_beyond_capacity_is_full_but_totals_still_count() {
    let mut s = enabled::<2>();
    s.record_send(Rank(0), 1).unwrap();
    s.record_send(Rank(1), 2).unwrap();
    assert_eq!(
        s.record_send(Rank(2), 4),
        Err(Full::new(Table::Stats, Rank(2)))
    );
    assert_eq!(
        s.record_recv(Rank(3), 8),
        Err(Full::new(Table::Stats, Rank(3)))
    );
    // Known peers still fit.
    s.record_send(Rank(1), 16).unwrap();
    assert_eq!(s.total().bytes_sent, 1 + 2 + 4 + 16);
    assert_eq!(s.total().msgs_sent, 4);
    assert_eq!(s.total().max_sent, 16);
    assert_eq!(s.total().bytes_received, 8);
    assert_eq!(s.sent_to(Rank(2)), 0);
    assert_eq!(s.peers().count(), 2);
}

#[test]
fn disable_stops_counting_and_keeps_counts() {
    let mut s = enabled::<4>();
    s.record_send(Rank(1), 10).unwrap();
    s.disable();
    assert!(!s.is_enabled());
    s.record_send(Rank(1), 10).unwrap();
    s.record_recv(Rank(1), 10).unwrap();
    assert_eq!(s.sent_to(Rank(1)), 10);
    assert_eq!(s.total().msgs_received, 0);
    s.enable();
    s.record_send(Rank(1), 5).unwrap();
    assert_eq!(s.sent_to(Rank(1)), 15);
}

#[test]
fn was_enabled_tells_a_never_enabled_table_from_one_enabled_then_disabled() {
    let mut s = Stats::<4>::new();
    assert!(!s.was_enabled());
    s.enable();
    s.record_send(Rank(1), 8).unwrap();
    s.disable();
    assert!(!s.is_enabled());
    assert!(
        s.was_enabled(),
        "disabling keeps the counts, and says they are counts"
    );
    s.reset();
    assert!(s.was_enabled());
    assert_eq!(s.sent_to(Rank(1)), 0);
}

#[test]
fn counters_saturate_instead_of_wrapping() {
    let mut s = enabled::<2>();
    s.record_send(Rank(0), u64::MAX).unwrap();
    s.record_send(Rank(0), 1).unwrap();
    s.record_recv(Rank(0), u64::MAX).unwrap();
    s.record_recv(Rank(0), u64::MAX).unwrap();
    assert_eq!(s.sent_to(Rank(0)), u64::MAX);
    assert_eq!(s.total().bytes_received, u64::MAX);
    assert_eq!(s.total().max_sent, u64::MAX);
}

#[test]
fn reset_clears_counters_and_keeps_enabled_bit() {
    let mut s = enabled::<2>();
    s.record_send(Rank(0), 3).unwrap();
    s.record_send(Rank(1), 3).unwrap();
    s.reset();
    assert!(s.is_enabled());
    assert_eq!(s.total(), PeerStats::ZERO);
    assert_eq!(s.peers().count(), 0);
    // The rows are free again.
    s.record_send(Rank(5), 1).unwrap();
    s.record_send(Rank(6), 1).unwrap();
    assert_eq!(s.sent_to(Rank(5)), 1);
}

#[test]
fn retrieve_indexes_sent_bytes_by_rank_and_zeroes_the_rest() {
    let mut s = enabled::<4>();
    s.record_send(Rank(1), 10).unwrap();
    s.record_send(Rank(3), 30).unwrap();
    s.record_send(Rank(9), 90).unwrap();
    s.record_recv(Rank(2), 20).unwrap();
    let mut out = [u64::MAX; 4];
    s.retrieve(&mut out);
    // Rank 9 is beyond the buffer; received bytes are not in it.
    assert_eq!(out, [0, 10, 0, 30]);
    let mut empty: [u64; 0] = [];
    s.retrieve(&mut empty);
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(String::from).collect()
}

#[test]
fn report_uses_reference_line_format_with_correct_units() {
    let mut s = enabled::<4>();
    s.record_send(Rank(2), 3 << 20).unwrap(); // 3 MiB
    s.record_send(Rank(1), 1 << 20).unwrap(); // 1 MiB
    s.record_recv(Rank(2), 512).unwrap();
    // 4 MiB in 2 s: 2 MiB/s, i.e. 2097152 B/s (the reference would print B/µs).
    let text = s.report(Rank(0), 2_000_000).to_string();
    assert_eq!(
        lines(&text),
        [
            "[starling_comm_stats][0] TOTAL:\t4194304 B\t4.000 MiB\t2097152 B/s\t2.000 MiB/s",
            "[starling_comm_stats][0] nb_sends:\t2",
            "[starling_comm_stats][0] max_sent_size:\t3145728 B",
            "[starling_comm_stats][0] average_sent_size:\t2097152.0 B",
            "[starling_comm_stats][0:1]\t1048576 B\t1.000 MiB\t524288 B/s\t0.500 MiB/s",
            "[starling_comm_stats][0:2]\t3145728 B\t3.000 MiB\t1572864 B/s\t1.500 MiB/s",
            "[starling_comm_stats_recv][0] TOTAL:\t512 B\t0.000 MiB\t256 B/s\t0.000 MiB/s",
            "[starling_comm_stats_recv][0] nb_recvs:\t1",
            "[starling_comm_stats_recv][0:2]\t512 B\t0.000 MiB\t256 B/s\t0.000 MiB/s",
        ]
    );
    assert!(text.ends_with('\n'));
}

#[test]
fn report_total_mib_uses_1024_not_1204() {
    let mut s = enabled::<2>();
    s.record_send(Rank(1), 1024 * 1024 * 10).unwrap();
    let text = s.report(Rank(3), 1_000_000).to_string();
    assert!(
        text.starts_with(
            "[starling_comm_stats][3] TOTAL:\t10485760 B\t10.000 MiB\t10485760 B/s\t10.000 MiB/s\n"
        ),
        "{text}"
    );
}

#[test]
fn report_leaves_rates_out_when_no_time_elapsed() {
    let mut s = enabled::<2>();
    s.record_send(Rank(1), 2048).unwrap();
    let text = s.report(Rank(0), 0).to_string();
    assert!(!text.contains("/s"), "{text}");
    assert!(text.contains("[starling_comm_stats][0:1]\t2048 B\t0.002 MiB\n"));
}

#[test]
fn report_of_empty_stats_has_totals_only() {
    let s = Stats::<2>::new();
    assert_eq!(
        lines(&s.report(Rank(1), 10).to_string()),
        [
            "[starling_comm_stats][1] TOTAL:\t0 B\t0.000 MiB\t0 B/s\t0.000 MiB/s",
            "[starling_comm_stats][1] nb_sends:\t0",
            "[starling_comm_stats][1] max_sent_size:\t0 B",
            "[starling_comm_stats_recv][1] TOTAL:\t0 B\t0.000 MiB\t0 B/s\t0.000 MiB/s",
            "[starling_comm_stats_recv][1] nb_recvs:\t0",
        ]
    );
}

#[test]
fn report_skips_peers_without_traffic_in_that_direction() {
    let mut s = enabled::<4>();
    s.record_send(Rank(1), 8).unwrap();
    s.record_recv(Rank(2), 8).unwrap();
    let text = s.report(Rank(0), 0).to_string();
    assert!(text.contains("[starling_comm_stats][0:1]"));
    assert!(!text.contains("[starling_comm_stats][0:2]"));
    assert!(text.contains("[starling_comm_stats_recv][0:2]"));
    assert!(!text.contains("[starling_comm_stats_recv][0:1]"));
}
