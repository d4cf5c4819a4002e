//! The protocol over a byte stream, end to end: boards (the core's embedded link in
//! threads), a rank of the runtime talking to a board, and two ranks, each pair joined by
//! a socket pair — `examples/serial_ring.rs` run on small rings.

#[path = "../examples/serial_ring.rs"]
#[allow(
    dead_code,
    reason = "the example's `main` is not called from the tests"
)]
mod serial_ring;

fn check(mode: &str, loops: u32) -> serial_ring::Outcome {
    let o = serial_ring::run(mode, loops).unwrap();
    assert_eq!(o.tokens, [2 * loops - 1, 2 * loops], "{mode}: {o:?}");
    for line in &o.lines {
        assert_eq!(line.crc_failures, 0, "{mode}: {o:?}");
        assert!(line.frames >= u64::from(loops), "{mode}: {o:?}");
    }
    o
}

#[test]
fn two_boards_pass_the_token_over_a_socket_pair() {
    let o = check("boards", 30);
    for line in &o.lines {
        assert_eq!(
            (line.failures(), line.garbage_bytes, line.resyncs),
            (0, 0, 0)
        );
    }
}

#[test]
fn boards_resynchronise_after_line_noise_between_frames() {
    let o = check("noisy", 20);
    for line in &o.lines {
        assert!(line.resyncs >= 19, "{o:?}");
        assert!(line.garbage_bytes > 0);
    }
}

#[test]
fn a_rank_of_the_runtime_and_a_board_share_the_ring() {
    check("rank", 30);
}

#[test]
fn two_ranks_of_the_runtime_share_the_ring_over_a_socket_pair() {
    check("ranks", 30);
}

#[test]
fn an_unknown_mode_is_refused() {
    assert!(serial_ring::run("smoke-signals", 1).is_err());
}
