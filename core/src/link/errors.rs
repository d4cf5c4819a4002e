//! The link's errors: the port's, the wait's, the caller's and the engine's.

use core::fmt;

use embedded_hal_nb::serial::ErrorKind;

use crate::engine::{RequestError, SubmitError, UsageError};

#[cfg(doc)]
use super::{Link, LinkConfig, LinkStats};

/// A serial port error, as [`embedded_hal_nb::serial::ErrorKind`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SerialError {
    /// The receiver lost bytes: they came faster than they were read.
    Overrun,
    /// A received word had no valid stop bit.
    FrameFormat,
    /// A received word failed its parity check.
    Parity,
    /// Noise was detected on the line.
    Noise,
    /// Any other error of the port.
    Other,
}

impl From<ErrorKind> for SerialError {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Overrun => Self::Overrun,
            ErrorKind::FrameFormat => Self::FrameFormat,
            ErrorKind::Parity => Self::Parity,
            ErrorKind::Noise => Self::Noise,
            _ => Self::Other,
        }
    }
}

/// Why a blocking call of a [`Link`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LinkError {
    /// Writing to the port failed; the frame being written is cut short (the peer drops
    /// it). Check the port.
    Serial(SerialError),
    /// Nothing arrived for [`LinkConfig::timeout_polls`] polls in a row (or the port took
    /// no byte for as long): the peer is gone, or the message was damaged on the line
    /// and dropped ([`LinkStats::decoder`] says so).
    Timeout {
        /// The configured limit.
        polls: u32,
    },
    /// The message is longer than one frame carries ([`Link::max_message`]). Nothing was
    /// sent.
    TooLong {
        /// Bytes given.
        len: usize,
        /// The most a message may have.
        max: usize,
    },
    /// The request failed: the message did not fit the receive buffer, or its payload
    /// was not the announced length.
    Request(RequestError),
    /// The engine refused the request (a full table). Nothing was sent.
    Submit(SubmitError),
    /// The engine refused an input the link gave it (a bug of the link, or a table too
    /// small for the traffic).
    Usage(UsageError),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Serial(e) => write!(f, "the serial port failed ({e:?})"),
            Self::Timeout { polls } => write!(f, "nothing arrived for {polls} polls"),
            Self::TooLong { len, max } => write!(
                f,
                "a {len}-byte message exceeds the link's {max}-byte frame limit"
            ),
            Self::Request(e) => write!(f, "the request failed: {e}"),
            Self::Submit(e) => write!(f, "the request was refused: {e}"),
            Self::Usage(e) => write!(f, "the engine refused the link's input: {e}"),
        }
    }
}

impl core::error::Error for LinkError {}
