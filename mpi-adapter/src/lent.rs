//! Byte buffers lent to MPI for the lifetime of non-blocking requests.
//!
//! rsmpi ties a request to the buffer it reads or writes with a lifetime; a request that
//! outlives a stack frame (ours live in the transport until `MPI_Test` says they are
//! done) must borrow its buffer for `'static` ([`mpi::request::StaticScope`]). A [`Lent`]
//! buffer takes an owned `Vec<u8>` apart, lends its bytes as `&'static mut [u8]`, and
//! gives the `Vec` back once every request that borrowed them has completed.

use core::mem::ManuallyDrop;

use starling_std::transport::{RecvBuffer, SendBuffer};

/// An owned byte buffer whose bytes are lent out as `'static` slices.
///
/// Dropping a `Lent` without [`Lent::take`] leaks the bytes on purpose: MPI may still
/// read or write them (a request abandoned at an abnormal shutdown).
pub(crate) enum Lent {
    /// A `Vec<u8>` taken apart.
    Bytes {
        ptr: *mut u8,
        len: usize,
        cap: usize,
    },
    /// A handle's data lent in place for a send (it holds the handle's read lock).
    Send(ManuallyDrop<Box<dyn SendBuffer>>),
    /// A handle's data lent in place for a receive (it holds the handle's write lock).
    Recv(ManuallyDrop<Box<dyn RecvBuffer>>),
}

impl Lent {
    /// Lends a handle's data for a send: the returned slice stays valid until
    /// [`Lent::take`].
    pub(crate) fn send(buffer: Box<dyn SendBuffer>) -> (Self, &'static [u8]) {
        let buffer = ManuallyDrop::new(buffer);
        let bytes = buffer.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: `SendBuffer` is sealed: Starling's own buffers return the same bytes
        // every time, valid and unchanged while the buffer lives (a handle's data under
        // its read lock, which the buffer holds), wherever the box moves. The box is
        // dropped only by `take`, whose contract requires that this slice is no longer
        // used.
        let slice = unsafe { core::slice::from_raw_parts(ptr, len) };
        (Self::Send(buffer), slice)
    }

    /// Lends a handle's data for a receive: the returned slice stays valid until
    /// [`Lent::take`].
    pub(crate) fn recv(buffer: Box<dyn RecvBuffer>) -> (Self, &'static mut [u8]) {
        let mut buffer = ManuallyDrop::new(buffer);
        let bytes = buffer.bytes_mut();
        let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
        // SAFETY: `RecvBuffer` is sealed: Starling's own buffers return the same bytes
        // every time, valid and touched by nobody else while the buffer lives (a handle's
        // data under its write lock, which the buffer holds), wherever the box moves; the
        // borrow above has ended. The box is dropped only by `take`, whose contract
        // requires that this slice is no longer used.
        let slice = unsafe { core::slice::from_raw_parts_mut(ptr, len) };
        (Self::Recv(buffer), slice)
    }

    /// Takes `bytes` apart and lends them: the returned slice stays valid until
    /// [`Lent::take`].
    pub(crate) fn new(bytes: Vec<u8>) -> (Self, &'static mut [u8]) {
        let mut v = ManuallyDrop::new(bytes);
        let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
        // SAFETY: `ptr` points to `len` initialised bytes of an allocation that nothing
        // else owns any more (the `Vec` was disarmed by `ManuallyDrop`); the allocation is
        // freed only by `take`, whose contract requires that this slice is no longer used.
        let slice = unsafe { core::slice::from_raw_parts_mut(ptr, len) };
        (Self::Bytes { ptr, len, cap }, slice)
    }

    /// Gives the bytes back as the `Vec` they came from; a lent handle's data is
    /// released instead (its lock guard drops) and the `Vec` is empty.
    ///
    /// # Safety
    /// Every request that borrowed the slice from [`Lent::new`], [`Lent::send`] or
    /// [`Lent::recv`] (or a part of it) must have completed, and the slice must not be
    /// used any more.
    pub(crate) unsafe fn take(self) -> Vec<u8> {
        match self {
            // SAFETY: `ptr`, `len` and `cap` are exactly the parts of the `Vec` taken
            // apart in `new`, and the caller guarantees that no borrow of its bytes is
            // alive.
            Self::Bytes { ptr, len, cap } => unsafe { Vec::from_raw_parts(ptr, len, cap) },
            Self::Send(b) => {
                drop(ManuallyDrop::into_inner(b));
                Vec::new()
            }
            Self::Recv(b) => {
                drop(ManuallyDrop::into_inner(b));
                Vec::new()
            }
        }
    }
}

/// Splits a message's bytes into the chunks it travels in: at most `max` bytes each (MPI
/// counts are `i32`), and one empty chunk for an empty message. Sender and receiver
/// split a message of one size alike, so its chunks match one to one, in order (MPI's
/// non-overtaking rule).
pub(crate) fn split(bytes: &[u8], max: usize) -> Vec<&[u8]> {
    if bytes.is_empty() {
        return vec![bytes];
    }
    bytes.chunks(max.max(1)).collect()
}

/// [`split`] for a receive buffer.
pub(crate) fn split_mut(bytes: &mut [u8], max: usize) -> Vec<&mut [u8]> {
    if bytes.is_empty() {
        return vec![bytes];
    }
    bytes.chunks_mut(max.max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_comes_back_with_what_was_written() {
        let (lent, slice) = Lent::new(vec![0u8; 5]);
        slice[2] = 7;
        // SAFETY: no request borrowed the slice; it is not used after this.
        let v = unsafe { lent.take() };
        assert_eq!(v, vec![0, 0, 7, 0, 0]);
    }

    #[test]
    fn an_empty_or_spare_capacity_buffer_comes_back_whole() {
        let (lent, slice) = Lent::new(Vec::new());
        assert!(slice.is_empty());
        // SAFETY: no request borrowed the slice; it is not used after this.
        assert!(unsafe { lent.take() }.is_empty());
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[1u8, 2, 3]);
        let (lent, slice) = Lent::new(v);
        assert_eq!(slice, &[1, 2, 3]);
        // SAFETY: as above.
        let v = unsafe { lent.take() };
        assert_eq!((v.as_slice(), v.capacity() >= 64), (&[1u8, 2, 3][..], true));
    }

    #[test]
    fn chunks_of_a_lent_buffer_written_apart_come_back_in_order() {
        // As the transport does for a long receive: the lent bytes split into chunks,
        // each written by its own request, then the buffer taken back.
        let (lent, slice) = Lent::new(vec![0u8; 10]);
        for (i, chunk) in split_mut(slice, 4).into_iter().enumerate() {
            chunk.fill(i as u8 + 1);
        }
        // SAFETY: the chunks (the only borrows of the slice) are gone.
        let v = unsafe { lent.take() };
        assert_eq!(v, [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
    }

    #[test]
    fn messages_split_into_bounded_chunks_and_empty_ones_into_one() {
        let lens = |v: Vec<&[u8]>| v.iter().map(|c| c.len()).collect::<Vec<_>>();
        assert_eq!(lens(split(&[], 4)), vec![0]);
        assert_eq!(lens(split(&[1; 4], 4)), vec![4]);
        assert_eq!(lens(split(&[1; 9], 4)), vec![4, 4, 1]);
        let mut buf = [0u8; 9];
        let sizes: Vec<usize> = split_mut(&mut buf, 4).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, vec![4, 4, 1]);
        assert_eq!(split_mut(&mut [], 4).len(), 1);
    }
}
