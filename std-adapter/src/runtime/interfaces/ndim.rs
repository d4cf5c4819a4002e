//! The N-dimensional array with strides: [`Ndim`].

use core::mem::size_of;
use core::ops::Range;

use bytemuck::Pod;

use super::{pack_runs, size_mismatch, unpack_runs};
use crate::runtime::data::{DataError, InPlace, Interface};

/// An N-dimensional array with a stride per dimension: the reference's ndim interface
/// (`starpu_ndim_data_register`).
///
/// Dimension `k < ndim` has `nn[k]` elements, `ldn[k]` elements apart in the storage: the
/// element at index `[i0, i1, …]` lies at `i0 * ldn[0] + i1 * ldn[1] + …`. As in the
/// reference, dimension 0 is contiguous (`ldn[0] = 1`), and each stride leaves room for
/// the dimensions below it: `ldn[k] ≥ ldn[k − 1] * nn[k − 1]` (what is left over is
/// padding). The storage holds at least `ldn[1] * (nn[1] − 1) + … + nn[0]` elements — the
/// span from the first element to the last — (none when some `nn[k]` is 0) and may hold
/// more. Three dimensions are a [`Block`](super::Block) (`ldn = [1, ldy, ldz]`), two a
/// [`Matrix`](super::Matrix) (`ldn = [1, ld]`); no dimension at all is one element.
///
/// Its packed form is the elements in index order, dimension 0 fastest, then 1, and so
/// on; the padding is never read into it nor written by [`Interface::unpack`], which
/// keeps it on receive. It has the fast path (the counterpart of the reference's
/// datatype) exactly when it is [dense](Self::is_dense); otherwise it is packed, run by
/// contiguous run (the dense leading dimensions travel as one run).
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Ndim;
///
/// // 2 × 2 × 1 × 2, rows 3 apart (one element of padding, 9, after each row).
/// let storage = vec![1, 2, 9, 3, 4, 9, 5, 6, 9, 7, 8];
/// let a = Ndim::new(vec![2, 2, 1, 2], vec![1, 3, 6, 6], storage).unwrap();
/// assert_eq!(a.get(&[1, 1, 0, 1]), 8);
/// assert!(!a.is_dense());
///
/// let mut dense = Ndim::<i32>::zeros(&[2, 2, 1, 2]);
/// let mut packed = Vec::new();
/// a.pack(&mut packed);
/// dense.unpack(&packed).unwrap();
/// assert_eq!(dense.as_slice(), &[1, 2, 3, 4, 5, 6, 7, 8]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Ndim<T> {
    nn: Vec<usize>,
    ldn: Vec<usize>,
    data: Vec<T>,
}

/// Elements a strided array spans, from its first to its last element; `None` when that
/// count overflows `usize`.
fn ndim_span(nn: &[usize], ldn: &[usize]) -> Option<usize> {
    if nn.contains(&0) {
        return Some(0);
    }
    nn.iter().zip(ldn).try_fold(1_usize, |acc, (&n, &ld)| {
        acc.checked_add(ld.checked_mul(n - 1)?)
    })
}

/// Checks the strides of an `nn`-shaped array against the rules of [`Ndim`].
fn check_strides(nn: &[usize], ldn: &[usize]) -> Result<(), DataError> {
    if nn.len() != ldn.len() {
        return Err(DataError::Malformed(
            "ndim: not one stride per dimension (nn and ldn differ in length)",
        ));
    }
    if ldn.first().is_some_and(|&ld| ld != 1) {
        return Err(DataError::Malformed(
            "ndim: dimension 0 is not contiguous (ldn[0] != 1)",
        ));
    }
    for k in 1..nn.len() {
        let below = ldn[k - 1]
            .checked_mul(nn[k - 1])
            .ok_or(DataError::Malformed(
                "ndim: ldn[k - 1] * nn[k - 1] overflows",
            ))?;
        if ldn[k] < below {
            return Err(DataError::Malformed(
                "ndim: a stride overlaps the dimension below (ldn[k] < ldn[k - 1] * nn[k - 1])",
            ));
        }
    }
    Ok(())
}

impl<T: Pod + Send + Sync> Ndim<T> {
    /// An array of `nn[k]` elements along dimension `k`, `ldn[k]` elements apart, over
    /// the storage `data` (see [`Ndim`]).
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `nn` and `ldn` differ in length, when `ldn[0] ≠ 1`,
    /// when some `ldn[k] < ldn[k − 1] * nn[k − 1]`, when `data` holds fewer elements than
    /// the array spans (it is not empty), or when one of those products overflows
    /// `usize`.
    pub fn new(nn: Vec<usize>, ldn: Vec<usize>, data: Vec<T>) -> Result<Self, DataError> {
        check_strides(&nn, &ldn)?;
        let span = ndim_span(&nn, &ldn).ok_or(DataError::Malformed(
            "ndim: the span of the strides overflows",
        ))?;
        if data.len() < span {
            return Err(DataError::Malformed(
                "ndim: storage shorter than the span of the strides",
            ));
        }
        Ok(Self { nn, ldn, data })
    }

    /// A dense array of the sizes `nn` (`ldn[k] = nn[0] * … * nn[k − 1]`), all zero.
    ///
    /// # Panics
    /// When the number of elements overflows `usize`.
    pub fn zeros(nn: &[usize]) -> Self {
        let mut ldn = Vec::with_capacity(nn.len());
        let mut len = 1_usize;
        for &n in nn {
            ldn.push(len);
            len = len
                .checked_mul(n)
                .expect("ndim: the element count overflows usize");
        }
        Self {
            nn: nn.to_vec(),
            ldn,
            data: vec![T::zeroed(); len],
        }
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.nn.len()
    }

    /// The sizes: `nn()[k]` elements along dimension `k`.
    pub fn nn(&self) -> &[usize] {
        &self.nn
    }

    /// The strides: `ldn()[k]` elements between two neighbours along dimension `k`.
    pub fn ldn(&self) -> &[usize] {
        &self.ldn
    }

    /// The number of elements (the product of the sizes; 1 with no dimension).
    pub fn len(&self) -> usize {
        if self.nn.contains(&0) {
            return 0;
        }
        // No overflow: the span, checked at construction, is at least the product.
        self.nn.iter().product()
    }

    /// Whether the array has no element (some size is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many leading dimensions lie contiguous, and the elements of one contiguous
    /// run of them (a dimension of size 1 never breaks a run).
    fn dense_prefix(&self) -> (usize, usize) {
        let mut run = 1;
        let mut m = 0;
        while m < self.nn.len() && (self.nn[m] == 1 || self.ldn[m] == run) {
            run *= self.nn[m];
            m += 1;
        }
        (m, run)
    }

    /// Whether the elements are one contiguous run at the start of the storage (every
    /// dimension of more than one element has `ldn[k] = nn[0] * … * nn[k − 1]`, or there
    /// is no element), so that the fast path applies.
    pub fn is_dense(&self) -> bool {
        self.is_empty() || self.dense_prefix().0 == self.nn.len()
    }

    fn offset(&self, index: &[usize]) -> usize {
        assert!(
            index.len() == self.nn.len() && index.iter().zip(&self.nn).all(|(i, n)| i < n),
            "ndim index {index:?} out of range for sizes {:?}",
            self.nn
        );
        index.iter().zip(&self.ldn).map(|(i, ld)| i * ld).sum()
    }

    /// The element at `index` (one coordinate per dimension).
    ///
    /// # Panics
    /// When `index` does not have [`ndim`](Self::ndim) coordinates or one is past its
    /// dimension's size.
    pub fn get(&self, index: &[usize]) -> T {
        self.data[self.offset(index)]
    }

    /// Replaces the element at `index`.
    ///
    /// # Panics
    /// As [`get`](Self::get).
    pub fn set(&mut self, index: &[usize], value: T) {
        let k = self.offset(index);
        self.data[k] = value;
    }

    /// The whole storage, padding included: `[i0, i1, …]` is at `i0 + i1 * ldn[1] + …`.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// The whole storage, writable, padding included (its length stays fixed).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// The storage, taken back out.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }

    /// The storage ranges of the contiguous runs, in packed order; none when there is no
    /// element.
    fn runs(&self) -> Runs {
        let (m, run) = self.dense_prefix();
        Runs {
            run,
            nn: self.nn[m..].to_vec(),
            ldn: self.ldn[m..].to_vec(),
            index: vec![0; self.nn.len() - m],
            start: 0,
            done: self.is_empty(),
        }
    }
}

/// The contiguous runs of an [`Ndim`], in packed order: an odometer over the dimensions
/// past the dense leading ones.
struct Runs {
    /// Elements of one run.
    run: usize,
    /// Sizes and strides of the outer dimensions.
    nn: Vec<usize>,
    ldn: Vec<usize>,
    /// The current index along the outer dimensions, and its storage offset.
    index: Vec<usize>,
    start: usize,
    done: bool,
}

impl Iterator for Runs {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.done {
            return None;
        }
        let here = self.start..self.start + self.run;
        self.done = true;
        for k in 0..self.nn.len() {
            self.index[k] += 1;
            // Wrapping: the sums are offsets of elements (or one stride past them) once
            // the carry is taken back, and those fit.
            self.start = self.start.wrapping_add(self.ldn[k]);
            if self.index[k] < self.nn[k] {
                self.done = false;
                break;
            }
            self.start = self
                .start
                .wrapping_sub(self.ldn[k].wrapping_mul(self.nn[k]));
            self.index[k] = 0;
        }
        Some(here)
    }
}

impl<T: Pod + Send + Sync> Interface for Ndim<T> {
    fn in_place(&self) -> Option<InPlace> {
        Some(InPlace::of::<Self>())
    }

    fn packed_size(&self) -> usize {
        size_of::<T>() * self.len()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.reserve(self.packed_size());
        pack_runs(&self.data, self.runs(), out);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        let runs = self.runs();
        unpack_runs(&mut self.data, runs, bytes);
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        self.is_dense()
            .then(|| bytemuck::cast_slice(&self.data[..self.len()]))
    }

    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let len = self.len();
        self.is_dense()
            .then(|| bytemuck::cast_slice_mut(&mut self.data[..len]))
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let (nn, ldn, len) = (self.nn.clone(), self.ldn.clone(), self.data.len());
        Some(Box::new(move || Self {
            nn,
            ldn,
            data: vec![T::zeroed(); len],
        }))
    }
}

#[cfg(test)]
mod tests;
