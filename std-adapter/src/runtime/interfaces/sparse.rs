//! The sparse matrices: [`Csr`] (compressed sparse rows) and [`Bcsr`] (the same by
//! blocks). A [`Csr`] is a [`Bcsr`] of 1 × 1 blocks: both keep a pattern (row pointers
//! and column indices, `u32`s as in the reference) and the values of its entries, and
//! both pack alike (the packed form and the checks on receive are in
//! [the module's docs](super#sparse-matrices)).

use core::mem::size_of;
use core::ops::Range;

use bytemuck::Pod;

use super::size_mismatch;
use crate::runtime::data::{DataError, Interface};

/// Bytes of the packed header: six `u64`s.
const HEADER_BYTES: usize = 6 * size_of::<u64>();
/// Bytes of one row pointer or column index.
const INDEX_BYTES: usize = size_of::<u32>();

/// A sparse matrix of `r × c` blocks, the common part of [`Csr`] and [`Bcsr`].
#[derive(Clone, Debug, PartialEq)]
struct Sparse<T> {
    /// Block columns: every column index is below it.
    ncol: u32,
    /// The row pointer of the first entry (0, or 1 for Fortran-style indices).
    firstentry: u32,
    /// Block rows + 1: row `i`'s entries are `rowptr[i] − firstentry ..
    /// rowptr[i + 1] − firstentry`.
    rowptr: Vec<u32>,
    /// The block column of each entry.
    colind: Vec<u32>,
    /// The values, `r * c` per entry, row-major within a block.
    nzval: Vec<T>,
    r: usize,
    c: usize,
}

/// Checks a pattern: the rules of [`Csr::new`]; the message names the rule broken.
fn check_pattern(
    ncol: u32,
    firstentry: u32,
    rowptr: &[u32],
    colind: &[u32],
) -> Result<(), &'static str> {
    let (&first, _) = rowptr
        .split_first()
        .ok_or("sparse matrix: no row pointer (nrow + 1 are needed)")?;
    if first != firstentry {
        return Err("sparse matrix: the first row pointer is not firstentry");
    }
    if rowptr.windows(2).any(|w| w[0] > w[1]) {
        return Err("sparse matrix: the row pointers decrease");
    }
    let last = u64::from(rowptr[rowptr.len() - 1]);
    if last - u64::from(firstentry) != colind.len() as u64 {
        return Err("sparse matrix: the last row pointer is not firstentry + nnz");
    }
    if colind.iter().any(|&j| j >= ncol) {
        return Err("sparse matrix: a column index is out of range (>= ncol)");
    }
    Ok(())
}

/// The pattern of an `nnz`-entry matrix of `nrow` rows with every entry in row 0 and
/// column 0 (what `zeros` builds: a valid pattern to receive into).
fn placeholder_pattern(
    nrow: usize,
    ncol: u32,
    nnz: usize,
) -> Result<(Vec<u32>, Vec<u32>), &'static str> {
    let end = u32::try_from(nnz).map_err(|_| "sparse matrix: nnz does not fit a u32")?;
    if nnz > 0 && (nrow == 0 || ncol == 0) {
        return Err("sparse matrix: entries without a row or a column to hold them");
    }
    let mut rowptr = vec![end; nrow.checked_add(1).ok_or("sparse matrix: nrow overflows")?];
    rowptr[0] = 0;
    Ok((rowptr, vec![0; nnz]))
}

/// Reads the little-endian `u64` at the start of `chunk` (8 bytes or more).
fn u64_le(chunk: &[u8]) -> u64 {
    let mut raw = [0; 8];
    raw.copy_from_slice(&chunk[..8]);
    u64::from_le_bytes(raw)
}

/// Reads little-endian `u32`s.
fn u32s_le(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(INDEX_BYTES)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl<T: Pod + Send + Sync> Sparse<T> {
    /// Checks the shape and the pattern (the rules of [`Bcsr::new`]).
    fn new(
        r: usize,
        c: usize,
        ncol: u32,
        nzval: Vec<T>,
        colind: Vec<u32>,
        rowptr: Vec<u32>,
        firstentry: u32,
    ) -> Result<Self, DataError> {
        if r == 0 || c == 0 {
            return Err(DataError::Malformed("bcsr: a block of no row or no column"));
        }
        check_pattern(ncol, firstentry, &rowptr, &colind).map_err(DataError::Malformed)?;
        let values = colind
            .len()
            .checked_mul(r)
            .and_then(|n| n.checked_mul(c))
            .ok_or(DataError::Malformed("sparse matrix: nnz * r * c overflows"))?;
        if nzval.len() != values {
            return Err(DataError::Malformed(
                "sparse matrix: not nnz * r * c values (nnz = colind.len())",
            ));
        }
        Ok(Self {
            ncol,
            firstentry,
            rowptr,
            colind,
            nzval,
            r,
            c,
        })
    }

    fn zeros(nrow: usize, ncol: u32, nnz: usize, r: usize, c: usize) -> Result<Self, DataError> {
        let (rowptr, colind) =
            placeholder_pattern(nrow, ncol, nnz).map_err(DataError::Malformed)?;
        let values = nnz
            .checked_mul(r)
            .and_then(|n| n.checked_mul(c))
            .filter(|n| {
                n.checked_mul(size_of::<T>())
                    .is_some_and(|b| isize::try_from(b).is_ok())
            })
            .ok_or(DataError::Malformed("sparse matrix: nnz * r * c overflows"))?;
        Self::new(r, c, ncol, vec![T::zeroed(); values], colind, rowptr, 0)
    }

    fn nrow(&self) -> usize {
        self.rowptr.len() - 1
    }

    fn nnz(&self) -> usize {
        self.colind.len()
    }

    /// The entries of row `i`, as indices into `colind`.
    ///
    /// # Panics
    /// When `i ≥ nrow`.
    fn entries(&self, i: usize) -> Range<usize> {
        assert!(
            i < self.nrow(),
            "sparse row {i} out of range for {} rows",
            self.nrow()
        );
        // The pattern is valid: `firstentry ≤ rowptr[i] ≤ rowptr[i + 1]`.
        let at = |p: u32| (p - self.firstentry) as usize;
        at(self.rowptr[i])..at(self.rowptr[i + 1])
    }

    /// The entry of row `i` in column `j`, if it is in the pattern.
    fn find(&self, i: usize, j: usize) -> Option<usize> {
        self.entries(i)
            .find(|&k| usize::try_from(self.colind[k]).is_ok_and(|col| col == j))
    }

    fn header(&self) -> [u64; 6] {
        // A `usize` always fits in a `u64` on the targets Rust supports.
        [
            self.nrow() as u64,
            u64::from(self.ncol),
            self.nnz() as u64,
            u64::from(self.firstentry),
            self.r as u64,
            self.c as u64,
        ]
    }

    fn packed_size(&self) -> usize {
        HEADER_BYTES
            + INDEX_BYTES * (self.rowptr.len() + self.colind.len())
            + size_of::<T>() * self.nzval.len()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.reserve(self.packed_size());
        for x in self.header() {
            out.extend_from_slice(&x.to_le_bytes());
        }
        for x in self.rowptr.iter().chain(&self.colind) {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(bytemuck::cast_slice(&self.nzval));
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        // The size is ours, so every part below is where our shape puts it.
        let (header, body) = bytes.split_at(HEADER_BYTES);
        let mut theirs = [0_u64; 6];
        for (x, chunk) in theirs.iter_mut().zip(header.chunks_exact(8)) {
            *x = u64_le(chunk);
        }
        let ours = self.header();
        let same_shape = [0, 1, 2, 4, 5].iter().all(|&k| theirs[k] == ours[k]);
        if !same_shape {
            return Err(DataError::InvalidPayload(
                "sparse matrix: the sender's shape (nrow, ncol, nnz, r, c) is not the receiver's",
            ));
        }
        let firstentry = u32::try_from(theirs[3])
            .map_err(|_| DataError::InvalidPayload("sparse matrix: firstentry is not a u32"))?;
        let (rowptr, rest) = body.split_at(INDEX_BYTES * self.rowptr.len());
        let (colind, nzval) = rest.split_at(INDEX_BYTES * self.colind.len());
        let (rowptr, colind) = (u32s_le(rowptr), u32s_le(colind));
        check_pattern(self.ncol, firstentry, &rowptr, &colind)
            .map_err(DataError::InvalidPayload)?;
        self.firstentry = firstentry;
        self.rowptr = rowptr;
        self.colind = colind;
        bytemuck::cast_slice_mut(&mut self.nzval).copy_from_slice(nzval);
        Ok(())
    }

    /// A zeroed matrix of this one's pattern and shape.
    fn zeroed(&self) -> Self {
        Self {
            ncol: self.ncol,
            firstentry: self.firstentry,
            rowptr: self.rowptr.clone(),
            colind: self.colind.clone(),
            nzval: vec![T::zeroed(); self.nzval.len()],
            r: self.r,
            c: self.c,
        }
    }
}

// ----- Csr -----------------------------------------------------------------------------

/// A sparse matrix in compressed sparse rows: the reference's CSR interface
/// (`starpu_csr_data_register`).
///
/// `nrow` rows and `ncol` columns; `nnz` entries (the pattern) with their values. Row
/// `i`'s entries are `k` in `rowptr[i] − firstentry .. rowptr[i + 1] − firstentry`: entry
/// `k` is in column `colind[k]` and holds `nzval[k]`. `firstentry` is the row pointer of
/// the first entry (0, or 1 for Fortran-style indices). Indices are `u32`s, as in the
/// reference. The pattern is fixed once built, but for a receive, which replaces it by
/// the sender's after checking it (see [Sparse matrices](super#sparse-matrices)); the
/// values are writable.
///
/// Unlike the reference, the matrix knows its number of columns, so that a column index
/// from a peer can be checked.
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Csr;
///
/// // [ 1 0 2 ]
/// // [ 0 0 0 ]
/// // [ 0 3 0 ]
/// let a = Csr::new(3, vec![1.0, 2.0, 3.0], vec![0, 2, 1], vec![0, 2, 2, 3], 0).unwrap();
/// assert_eq!((a.nrow(), a.ncol(), a.nnz()), (3, 3, 3));
/// assert_eq!(a.get(0, 2), Some(2.0));
/// assert_eq!(a.get(1, 1), None);
///
/// // A receiver of the same shape takes the sender's pattern and values.
/// let mut b = Csr::<f64>::zeros(3, 3, 3).unwrap();
/// let mut packed = Vec::new();
/// a.pack(&mut packed);
/// b.unpack(&packed).unwrap();
/// assert_eq!(b, a);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Csr<T>(Sparse<T>);

impl<T: Pod + Send + Sync> Csr<T> {
    /// A matrix of `ncol` columns and `rowptr.len() − 1` rows, whose entries are in the
    /// columns `colind` and hold the values `nzval` (see [`Csr`]).
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `rowptr` is empty, when `rowptr[0] ≠ firstentry`,
    /// when the row pointers decrease, when the last is not `firstentry + nnz` (`nnz =
    /// colind.len()`), when a column index is `≥ ncol`, or when `nzval` does not hold
    /// `nnz` values.
    pub fn new(
        ncol: u32,
        nzval: Vec<T>,
        colind: Vec<u32>,
        rowptr: Vec<u32>,
        firstentry: u32,
    ) -> Result<Self, DataError> {
        Sparse::new(1, 1, ncol, nzval, colind, rowptr, firstentry).map(Self)
    }

    /// A matrix of `nrow` rows, `ncol` columns and `nnz` entries, all zero, with a
    /// placeholder pattern (every entry in row 0, column 0; `firstentry = 0`): a matrix
    /// to receive into, whose pattern the sender's replaces.
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `nnz` does not fit a `u32`, or when there are
    /// entries but no row or no column.
    pub fn zeros(nrow: usize, ncol: u32, nnz: usize) -> Result<Self, DataError> {
        Sparse::zeros(nrow, ncol, nnz, 1, 1).map(Self)
    }

    /// Rows.
    pub fn nrow(&self) -> usize {
        self.0.nrow()
    }

    /// Columns: every column index is below it.
    pub fn ncol(&self) -> u32 {
        self.0.ncol
    }

    /// Entries of the pattern (non-zeros).
    pub fn nnz(&self) -> usize {
        self.0.nnz()
    }

    /// The row pointer of the first entry.
    pub fn firstentry(&self) -> u32 {
        self.0.firstentry
    }

    /// The `nrow + 1` row pointers.
    pub fn rowptr(&self) -> &[u32] {
        &self.0.rowptr
    }

    /// The column of each entry.
    pub fn colind(&self) -> &[u32] {
        &self.0.colind
    }

    /// The value of each entry.
    pub fn nzval(&self) -> &[T] {
        &self.0.nzval
    }

    /// The value of each entry, writable (the pattern stays fixed).
    pub fn nzval_mut(&mut self) -> &mut [T] {
        &mut self.0.nzval
    }

    /// Row `i`: the columns of its entries and their values.
    ///
    /// # Panics
    /// When `i ≥ nrow`.
    pub fn row(&self, i: usize) -> (&[u32], &[T]) {
        let k = self.0.entries(i);
        (&self.0.colind[k.clone()], &self.0.nzval[k])
    }

    /// The value of the first entry in row `i` and column `j`; `None` when the pattern
    /// has no such entry (the element is zero).
    ///
    /// # Panics
    /// When `i ≥ nrow`.
    pub fn get(&self, i: usize, j: usize) -> Option<T> {
        self.0.find(i, j).map(|k| self.0.nzval[k])
    }

    /// The values, the column indices and the row pointers, taken back out.
    pub fn into_parts(self) -> (Vec<T>, Vec<u32>, Vec<u32>) {
        (self.0.nzval, self.0.colind, self.0.rowptr)
    }
}

impl<T: Pod + Send + Sync> Interface for Csr<T> {
    fn packed_size(&self) -> usize {
        self.0.packed_size()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        self.0.unpack(bytes)
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let zeroed = self.0.zeroed();
        Some(Box::new(move || Self(zeroed)))
    }
}

// ----- Bcsr ----------------------------------------------------------------------------

/// A sparse matrix of dense `r × c` blocks in compressed sparse rows: the reference's
/// BCSR interface (`starpu_bcsr_data_register`).
///
/// `nrow` block rows (`nrow * r` rows) and `ncol` block columns (`ncol * c` columns);
/// `nnz` blocks in the pattern. Block row `i`'s blocks are `k` in `rowptr[i] − firstentry
/// .. rowptr[i + 1] − firstentry`: block `k` is in block column `colind[k]` and holds the
/// `r * c` values `nzval[k * r * c ..][.. r * c]`, row-major (element `(a, b)` of the
/// block at `a * c + b`). Otherwise as [`Csr`], which is a `Bcsr` of 1 × 1 blocks.
///
/// ```
/// use starling_std::interfaces::Bcsr;
///
/// // 2 × 2 blocks: [ B0 0 ] with B0 = [1 2], B1 = [5 6]
/// //               [ 0 B1 ]           [3 4]       [7 8]
/// let a = Bcsr::new(2, 2, 2, (1..=8).collect::<Vec<i32>>(), vec![0, 1], vec![0, 1, 2], 0)
///     .unwrap();
/// assert_eq!(a.block(1), &[5, 6, 7, 8]);
/// assert_eq!(a.get(3, 2), Some(7));
/// assert_eq!(a.get(0, 3), None);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Bcsr<T>(Sparse<T>);

impl<T: Pod + Send + Sync> Bcsr<T> {
    /// A matrix of `r × c` blocks, `ncol` block columns and `rowptr.len() − 1` block
    /// rows, whose blocks are in the block columns `colind` and hold the values `nzval`
    /// (see [`Bcsr`]).
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `r` or `c` is 0, when `nzval` does not hold
    /// `nnz * r * c` values (`nnz = colind.len()`), or when the pattern breaks a rule of
    /// [`Csr::new`].
    pub fn new(
        r: usize,
        c: usize,
        ncol: u32,
        nzval: Vec<T>,
        colind: Vec<u32>,
        rowptr: Vec<u32>,
        firstentry: u32,
    ) -> Result<Self, DataError> {
        Sparse::new(r, c, ncol, nzval, colind, rowptr, firstentry).map(Self)
    }

    /// A matrix of `nrow` block rows, `ncol` block columns and `nnz` blocks of `r × c`,
    /// all zero, with a placeholder pattern (every block in block row 0, block column 0;
    /// `firstentry = 0`): a matrix to receive into.
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `r` or `c` is 0, when `nnz` does not fit a `u32`,
    /// when there are blocks but no block row or column, or when `nnz * r * c` values
    /// would not fit in memory.
    pub fn zeros(
        nrow: usize,
        ncol: u32,
        nnz: usize,
        r: usize,
        c: usize,
    ) -> Result<Self, DataError> {
        Sparse::zeros(nrow, ncol, nnz, r, c).map(Self)
    }

    /// Block rows.
    pub fn nrow(&self) -> usize {
        self.0.nrow()
    }

    /// Block columns: every block column index is below it.
    pub fn ncol(&self) -> u32 {
        self.0.ncol
    }

    /// Blocks of the pattern.
    pub fn nnz(&self) -> usize {
        self.0.nnz()
    }

    /// Rows of a block.
    pub fn r(&self) -> usize {
        self.0.r
    }

    /// Columns of a block.
    pub fn c(&self) -> usize {
        self.0.c
    }

    /// The row pointer of the first block.
    pub fn firstentry(&self) -> u32 {
        self.0.firstentry
    }

    /// The `nrow + 1` block-row pointers.
    pub fn rowptr(&self) -> &[u32] {
        &self.0.rowptr
    }

    /// The block column of each block.
    pub fn colind(&self) -> &[u32] {
        &self.0.colind
    }

    /// The values, `r * c` per block, row-major within a block.
    pub fn nzval(&self) -> &[T] {
        &self.0.nzval
    }

    /// The values, writable (the pattern stays fixed).
    pub fn nzval_mut(&mut self) -> &mut [T] {
        &mut self.0.nzval
    }

    fn block_range(&self, k: usize) -> Range<usize> {
        assert!(
            k < self.nnz(),
            "bcsr block {k} out of range for {} blocks",
            self.nnz()
        );
        let size = self.0.r * self.0.c;
        k * size..(k + 1) * size
    }

    /// The `r * c` values of block `k` (the `k`-th of the pattern), row-major.
    ///
    /// # Panics
    /// When `k ≥ nnz`.
    pub fn block(&self, k: usize) -> &[T] {
        &self.0.nzval[self.block_range(k)]
    }

    /// The values of block `k`, writable.
    ///
    /// # Panics
    /// When `k ≥ nnz`.
    pub fn block_mut(&mut self, k: usize) -> &mut [T] {
        let range = self.block_range(k);
        &mut self.0.nzval[range]
    }

    /// The element in (scalar) row `i` and column `j`; `None` when no block of the
    /// pattern holds it (the element is zero).
    ///
    /// # Panics
    /// When `i ≥ nrow * r`.
    pub fn get(&self, i: usize, j: usize) -> Option<T> {
        let (r, c) = (self.0.r, self.0.c);
        let k = self.0.find(i / r, j / c)?;
        Some(self.0.nzval[k * r * c + (i % r) * c + j % c])
    }

    /// The values, the block column indices and the block-row pointers, taken back out.
    pub fn into_parts(self) -> (Vec<T>, Vec<u32>, Vec<u32>) {
        (self.0.nzval, self.0.colind, self.0.rowptr)
    }
}

impl<T: Pod + Send + Sync> Interface for Bcsr<T> {
    fn packed_size(&self) -> usize {
        self.0.packed_size()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        self.0.unpack(bytes)
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let zeroed = self.0.zeroed();
        Some(Box::new(move || Self(zeroed)))
    }
}

#[cfg(test)]
mod tests;
