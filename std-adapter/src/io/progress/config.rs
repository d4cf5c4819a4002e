//! What configures a rank's progression thread: the sizes of its engine's tables and
//! the driver mode. A leaf: the rank runner ([`crate::rank`]) re-exports both.

/// The sizes of a rank's protocol-engine tables, at most the engine's capacities (4096
/// requests, 1024 match keys — half the matcher's tables, which stay fast only while at
/// most half full; larger values mean those). Smaller tables change no
/// result, only how much waits outside the engine: tests run with
/// [`Tables::TINY`] to overflow them at every step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Live requests (sends, receives, early-message buffers), shared out by the core's
    /// `engine::Budget` (at least 4; at most 4064: the slab's last 32 slots are kept for
    /// discard buffers, which drain a payload too long for its receive outside the
    /// budget).
    pub requests: usize,
    /// Distinct (communicator, source, tag) keys in each of the matcher's tables (at
    /// least 1).
    pub match_keys: usize,
}

impl Tables {
    /// The engine's full capacities: 4096 requests, 1024 match keys.
    pub const DEFAULT: Self = Self {
        requests: 4096,
        match_keys: 1024,
    };

    /// The smallest tables: 4 requests, 2 match keys.
    pub const TINY: Self = Self {
        requests: 4,
        match_keys: 2,
    };

    /// Reads `requests,match_keys` (`STARLING_ENGINE_TABLES`); `None` when malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let (r, k) = text.split_once(',')?;
        Some(Self {
            requests: r.trim().parse().ok()?,
            match_keys: k.trim().parse().ok()?,
        })
    }
}

impl Default for Tables {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Driver mode (the reference's `STARPU_MPI_DRIVER_CALL_FREQUENCY` and
/// `STARPU_MPI_DRIVER_TASK_FREQUENCY`): the progression thread runs tasks between its
/// polls and the rank starts one worker thread fewer (none with one worker), so no core
/// is spent on a thread that only polls.
///
/// Every `call_frequency` polls that moved nothing, the thread runs up to
/// `task_frequency` ready tasks. Unlike the reference it also runs them whenever the
/// transport is idle, rather than sleeping while tasks wait (the reference's thread
/// sleeps when no request is pending, which deadlocks the token ring with one CPU), and a
/// `task_frequency` of 0 counts as 1 (the reference's default 0 runs no task at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverMode {
    /// Idle polls between two task runs (at least 1).
    pub call_frequency: u32,
    /// The most tasks run each time (at least 1).
    pub task_frequency: u32,
}

impl DriverMode {
    /// Driver mode from `STARLING_MPI_DRIVER_CALL_FREQUENCY` (on when > 0) and
    /// `STARLING_MPI_DRIVER_TASK_FREQUENCY` (default 1); `None` when off.
    pub fn from_env() -> Option<Self> {
        let number = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
        };
        let call_frequency = number("STARLING_MPI_DRIVER_CALL_FREQUENCY").filter(|&n| n > 0)?;
        Some(Self {
            call_frequency,
            task_frequency: number("STARLING_MPI_DRIVER_TASK_FREQUENCY")
                .unwrap_or(1)
                .max(1),
        })
    }
}
