//! A `std` stream as an `embedded-hal-nb` serial port, and a sleeping delay: what the
//! core's embedded link needs to run in a thread (feature `embedded-hal`).

use core::time::Duration;
use std::io::{self, Read, Write};

use embedded_hal::delay::DelayNs;
use embedded_hal_nb::nb;
use embedded_hal_nb::serial::{self, ErrorKind, ErrorType};

/// A byte stream seen as an `embedded-hal-nb` serial port.
///
/// Put the stream in non-blocking mode first (`set_nonblocking(true)` on a socket), so
/// that `read` answers `WouldBlock` when nothing came and the link paces its polls with
/// its delay; a blocking stream works too, with `read` waiting for the next byte.
/// Reads are buffered; writes are buffered until `flush`, which the link calls after each
/// frame, so a frame reaches the stream in one write. The end of the stream reads as
/// [`ErrorKind::Other`], which the link counts and treats as silence.
#[derive(Debug)]
pub struct NbStream<S> {
    stream: S,
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    tx: Vec<u8>,
}

impl<S> NbStream<S> {
    /// The port over `stream`.
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            rx: vec![0; 4096].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            tx: Vec::new(),
        }
    }

    /// The stream back (bytes read and not taken, or written and not flushed, are lost).
    pub fn into_inner(self) -> S {
        self.stream
    }
}

fn other(e: &io::Error) -> nb::Error<ErrorKind> {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    ) {
        nb::Error::WouldBlock
    } else {
        nb::Error::Other(ErrorKind::Other)
    }
}

impl<S> ErrorType for NbStream<S> {
    type Error = ErrorKind;
}

impl<S: Read> serial::Read<u8> for NbStream<S> {
    fn read(&mut self) -> nb::Result<u8, ErrorKind> {
        if self.rx_start == self.rx_end {
            match self.stream.read(&mut self.rx) {
                Ok(0) => return Err(nb::Error::Other(ErrorKind::Other)),
                Ok(n) => {
                    self.rx_start = 0;
                    self.rx_end = n;
                }
                Err(e) => return Err(other(&e)),
            }
        }
        let b = self.rx[self.rx_start];
        self.rx_start += 1;
        Ok(b)
    }
}

impl<S: Write> serial::Write<u8> for NbStream<S> {
    fn write(&mut self, word: u8) -> nb::Result<(), ErrorKind> {
        self.tx.push(word);
        Ok(())
    }

    fn flush(&mut self) -> nb::Result<(), ErrorKind> {
        while !self.tx.is_empty() {
            match self.stream.write(&self.tx) {
                Ok(0) => return Err(nb::Error::Other(ErrorKind::Other)),
                Ok(n) => {
                    self.tx.drain(..n);
                }
                Err(e) => return Err(other(&e)),
            }
        }
        self.stream.flush().map_err(|e| other(&e))
    }
}

/// An `embedded-hal` delay that sleeps the thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdDelay;

impl DelayNs for StdDelay {
    fn delay_ns(&mut self, ns: u32) {
        std::thread::sleep(Duration::from_nanos(u64::from(ns)));
    }
}
