//! Recycled transfer buffers.
//!
//! A large transfer used to cost a fresh allocation on each side: the sender packed into
//! a new `Vec`, the receiver received into a new zeroed one. Fresh memory of that size
//! comes from the kernel page by page (a 16 MiB buffer is 4096 page faults, each zeroing
//! its page), which costs as much as a copy. The pool keeps a few large buffers of
//! finished transfers and hands them out again:
//!
//! * [`BufferPool::take_empty`] for packing: an empty buffer with room for the bytes;
//! * [`BufferPool::take_filled`] for receiving: a buffer of exactly `len` initialised
//!   bytes (old contents; only a part that must grow is zeroed), which the transport
//!   overwrites;
//! * [`BufferPool::give`] returns a buffer whose transfer is over.
//!
//! Small buffers are not kept (the allocator serves them well), nor more than
//! [`MAX_BUFFERS`] or [`MAX_BYTES`] in all.

use crate::sync::{Mutex, lock};

/// Buffers smaller than this are not kept.
pub(crate) const MIN_LEN: usize = 64 << 10;
/// The most buffers kept.
pub(crate) const MAX_BUFFERS: usize = 8;
/// The most bytes kept, all buffers together.
pub(crate) const MAX_BYTES: usize = 256 << 20;

/// A rank's recycled transfer buffers (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    buffers: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// An empty pool.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The kept buffer with the least capacity of at least `len`, if any.
    fn best_fit(&self, len: usize) -> Option<Vec<u8>> {
        if len < MIN_LEN {
            return None;
        }
        let mut buffers = lock(&self.buffers);
        let i = buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        Some(buffers.swap_remove(i))
    }

    /// An empty buffer with room for `len` bytes, to pack into.
    pub(crate) fn take_empty(&self, len: usize) -> Vec<u8> {
        match self.best_fit(len) {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Vec::with_capacity(len),
        }
    }

    /// An empty buffer with room for `len` bytes and, below the sizes the pool keeps,
    /// `headroom` more (a message header to move in before them without growing it); at
    /// the pool's sizes exactly `len`, so that a kept buffer of that size still fits.
    pub(crate) fn take_empty_with_headroom(&self, len: usize, headroom: usize) -> Vec<u8> {
        let with = len + headroom;
        self.take_empty(if with < MIN_LEN { with } else { len })
    }

    /// A buffer of exactly `len` initialised bytes, to receive into (its contents are
    /// whatever it held).
    pub(crate) fn take_filled(&self, len: usize) -> Vec<u8> {
        match self.best_fit(len) {
            Some(mut b) => {
                // Shrinking keeps the old bytes; only a part that grows is zeroed.
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// Keeps `buffer` for a later transfer, if it is large enough and there is room;
    /// when the pool is full, it keeps the larger buffers.
    pub(crate) fn give(&self, buffer: Vec<u8>) {
        if buffer.capacity() < MIN_LEN || buffer.capacity() > MAX_BYTES {
            return;
        }
        let mut buffers = lock(&self.buffers);
        buffers.push(buffer);
        buffers.sort_unstable_by_key(|b| core::cmp::Reverse(b.capacity()));
        let mut total = 0;
        let keep = buffers
            .iter()
            .take(MAX_BUFFERS)
            .take_while(|b| {
                total += b.capacity();
                total <= MAX_BYTES
            })
            .count();
        buffers.truncate(keep);
    }

    /// How many buffers are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.buffers).len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_handed_out_again_without_a_new_allocation() {
        let pool = BufferPool::new();
        let b = pool.take_filled(1 << 20);
        let ptr = b.as_ptr();
        pool.give(b);
        let again = pool.take_empty(1 << 19);
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty());
        assert!(again.capacity() >= 1 << 20);
    }

    #[test]
    fn a_filled_buffer_has_exactly_the_length_asked_for() {
        let pool = BufferPool::new();
        pool.give(vec![7; 1 << 20]);
        let b = pool.take_filled(100 << 10);
        assert_eq!(b.len(), 100 << 10);
        pool.give(b);
        // Growing past the kept length zeroes only the new part.
        let mut small = Vec::with_capacity(1 << 20);
        small.extend_from_slice(&[1; MIN_LEN]);
        let pool = BufferPool::new();
        pool.give(small);
        let grown = pool.take_filled(MIN_LEN + 10);
        assert_eq!(grown.len(), MIN_LEN + 10);
        assert_eq!(&grown[MIN_LEN..], &[0; 10]);
    }

    #[test]
    fn small_buffers_are_not_kept_and_the_pool_is_bounded() {
        let pool = BufferPool::new();
        pool.give(vec![0; 100]);
        assert_eq!(pool.len(), 0);
        for _ in 0..MAX_BUFFERS + 3 {
            pool.give(Vec::with_capacity(MIN_LEN));
        }
        assert_eq!(pool.len(), MAX_BUFFERS);
        // A larger one displaces a smaller one.
        pool.give(Vec::with_capacity(4 * MIN_LEN));
        assert_eq!(pool.len(), MAX_BUFFERS);
        assert!(pool.take_empty(4 * MIN_LEN).capacity() >= 4 * MIN_LEN);
    }

    #[test]
    fn headroom_is_added_below_the_kept_sizes_only() {
        let pool = BufferPool::new();
        assert!(pool.take_empty_with_headroom(8, 24).capacity() >= 32);
        // At the pool's sizes a kept buffer of exactly the length still serves.
        pool.give(Vec::with_capacity(MIN_LEN));
        let ptr = {
            let b = pool.take_empty(MIN_LEN);
            let p = b.as_ptr();
            pool.give(b);
            p
        };
        let again = pool.take_empty_with_headroom(MIN_LEN, 24);
        assert_eq!(again.as_ptr(), ptr);
    }

    #[test]
    fn a_request_larger_than_every_kept_buffer_allocates() {
        let pool = BufferPool::new();
        pool.give(Vec::with_capacity(MIN_LEN));
        let b = pool.take_empty(2 * MIN_LEN);
        assert!(b.capacity() >= 2 * MIN_LEN);
        assert_eq!(pool.len(), 1);
    }
}
