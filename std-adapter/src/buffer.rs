//! The buffers a transport reads and writes in place: a leaf that the data handles (which
//! lend their storage) and the transports (which borrow it) both read.

mod sealed {
    #![allow(
        unnameable_types,
        reason = "the sealed-trait pattern: public, never named"
    )]
    /// Only this crate's buffers may be lent to a transport: a transport relies on their
    /// bytes staying where they are while it holds them.
    pub trait Sealed {}
}

/// Bytes a send reads in place — a handle's data, locked for reading for as long as the
/// buffer lives — or an owned `Vec<u8>`.
///
/// [`SendBuffer::bytes`] returns the same memory every time, which stays valid and
/// unchanged while the buffer lives, wherever the box moves: a transport may hand it to a
/// non-blocking send and drop the buffer once the send completed. Sealed: only Starling's
/// runtime makes them.
pub trait SendBuffer: sealed::Sealed + Send + 'static {
    /// The bytes to send.
    fn bytes(&self) -> &[u8];
}

/// Bytes a receive writes in place — a handle's data, locked for writing for as long as
/// the buffer lives — or an owned `Vec<u8>`.
///
/// [`RecvBuffer::bytes_mut`] returns the same memory every time, which stays valid and
/// is touched by nobody else while the buffer lives, wherever the box moves. Sealed: only
/// Starling's runtime makes them.
pub trait RecvBuffer: sealed::Sealed + Send + 'static {
    /// Where to receive.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl sealed::Sealed for Vec<u8> {}

impl SendBuffer for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl RecvBuffer for Vec<u8> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// A handle's data lent in place, behind its owned lock guard.
#[cfg(not(loom))]
pub(crate) struct LentData<G>(pub(crate) G);

#[cfg(not(loom))]
impl<G> sealed::Sealed for LentData<G> {}
