//! The built-in data interfaces, and a user-defined one as an example.
//!
//! Each type here implements [`Interface`]: it says how big its packed form is, how to
//! pack it and unpack it, and — the fast path, the counterpart of the reference's
//! `starpu_mpi_datatype_register` — whether that packed form is already one contiguous
//! run of its storage, so that a transfer copies straight from (or into) it.
//!
//! | interface | shape | packed form | fast path |
//! | --- | --- | --- | --- |
//! | [`Variable<T>`] | one `T` | its bytes | always |
//! | [`Vector<T>`] | `len` elements | their bytes | always |
//! | [`Matrix<T>`] | `nx × ny`, column-major, leading dimension `ld` | the `nx*ny` elements, column by column | when [dense](Matrix::is_dense) |
//! | [`Block<T>`] | `nx × ny × nz`, strides `ldy`, `ldz` | the `nx*ny*nz` elements, `x` fastest, then `y`, then `z` | when [dense](Block::is_dense) |
//! | [`Ndim<T>`] | `nn[0] × nn[1] × …`, a stride `ldn[k]` per dimension | the elements, dimension 0 fastest | when [dense](Ndim::is_dense) |
//! | [`Csr<T>`] | `nrow × ncol` sparse, `nnz` entries in compressed rows | a header, the row pointers, the column indices, the values | never |
//! | [`Bcsr<T>`] | the same by dense `r × c` blocks | as [`Csr`] | never |
//! | [`Complex`] | two `Vec<f64>` of one length | `u64` LE count, the reals, the imaginaries (all LE) | never |
//!
//! # Rules every built-in follows
//!
//! - **Byte order.** The built-ins' packed form is the elements' bytes as they lie in
//!   memory (native byte order), as in the reference: ranks are assumed to share one
//!   architecture. [`Complex`] shows an explicitly little-endian form; the sparse
//!   matrices' header and indices are little-endian too, their values native.
//! - **Same shape on both sides.** As in the reference, a receive goes into a handle
//!   registered with the sender's shape. [`Interface::unpack`] of a built-in accepts
//!   exactly its own [`Interface::packed_size`] bytes; anything else is
//!   [`DataError::SizeMismatch`] `{ expected: packed_size, got }` and the data is left
//!   unchanged (no partial copy, no resize).
//! - **Padding is never touched.** The gaps of a strided [`Matrix`] (`ld − nx` elements
//!   after each column), [`Block`] (after each row and each plane) or [`Ndim`] (after
//!   each run along a dimension), and any storage past the last element, are never read
//!   into the packed form and never written by `unpack`. They may hold anything,
//!   including another datum's elements.
//! - **The fast path is the packed form.** When [`Interface::as_bytes`] is `Some`, it is
//!   byte for byte what [`Interface::pack`] appends, and [`Interface::as_bytes_mut`] is
//!   the same run, writable.
//!
//! # Shape errors
//!
//! The constructors that take a shape ([`Matrix::new`], [`Block::new`], [`Ndim::new`],
//! [`Csr::new`], [`Bcsr::new`], [`Complex::new`]) check it and return
//! [`DataError::Malformed`] with a message naming the rule broken; they never panic.
//! Element accessors (`get`, `set`) panic on an index out of range, like slice indexing.
//!
//! The sparse matrices ([`Csr`], [`Bcsr`]) carry their pattern in their packed form: a
//! receive replaces the receiver's pattern by the sender's, and checks it first. Bytes
//! of the right size whose pattern is not valid are [`DataError::InvalidPayload`] (see
//! [Sparse matrices](#sparse-matrices) below).
//!
//! # Sparse matrices
//!
//! Their packed form is six little-endian `u64`s — `nrow`, `ncol`, `nnz`, `firstentry`,
//! `r`, `c` (1 and 1 for a [`Csr`]) — then the `nrow + 1` row pointers and the `nnz`
//! column indices as little-endian `u32`s, then the values in native byte order. A
//! receive goes into a matrix of the sender's `nrow`, `ncol`, `nnz`, `r` and `c`; it
//! takes the sender's pattern, values and `firstentry`, after checking that the row
//! pointers start at `firstentry`, never decrease and end at `firstentry + nnz`, and that
//! every column index is below `ncol`.

use core::mem::size_of;
use core::ops::Range;

use bytemuck::Pod;

use crate::runtime::data::{DataError, InPlace, Interface};

mod ndim;
mod sparse;

pub use ndim::Ndim;
pub use sparse::{Bcsr, Csr};

/// The refusal of a packed form of `got` bytes by data whose packed form is `expected`.
fn size_mismatch(expected: usize, got: usize) -> Result<(), DataError> {
    if expected == got {
        Ok(())
    } else {
        Err(DataError::SizeMismatch { expected, got })
    }
}

/// Appends the bytes of the runs `runs` of `data` to `out`, in order: how a strided layout
/// (a matrix's columns, a block's rows, an N-dimensional array's innermost runs) packs.
pub(crate) fn pack_runs<T: Pod>(
    data: &[T],
    runs: impl Iterator<Item = Range<usize>>,
    out: &mut Vec<u8>,
) {
    for run in runs {
        out.extend_from_slice(bytemuck::cast_slice(&data[run]));
    }
}

/// Fills the runs `runs` of `data` from `bytes`, in order, leaving the rest of `data`
/// (padding) untouched: [`pack_runs`] undone. `bytes` holds exactly the runs' bytes (the
/// caller checked its length).
pub(crate) fn unpack_runs<T: Pod>(
    data: &mut [T],
    runs: impl Iterator<Item = Range<usize>>,
    bytes: &[u8],
) {
    let mut at = 0;
    for run in runs {
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut data[run]);
        dst.copy_from_slice(&bytes[at..at + dst.len()]);
        at += dst.len();
    }
}

// ----- Variable ------------------------------------------------------------------------

/// One value of a plain-old-data type `T`: the reference's variable interface.
///
/// Its packed form is the value's bytes, and it always has the fast path.
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Variable;
///
/// let mut x = Variable::new(1.5_f64);
/// x.set(x.get() * 2.0);
/// assert_eq!(x.as_bytes(), Some(&3.0_f64.to_ne_bytes()[..]));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Variable<T> {
    value: T,
}

impl<T: Pod + Send + Sync> Variable<T> {
    /// A variable holding `value`.
    pub fn new(value: T) -> Self {
        Self { value }
    }

    /// A copy of the value.
    pub fn get(&self) -> T {
        self.value
    }

    /// Replaces the value.
    pub fn set(&mut self, value: T) {
        self.value = value;
    }

    /// The value, borrowed.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value, mutably borrowed.
    pub fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Pod + Send + Sync> Interface for Variable<T> {
    fn in_place(&self) -> Option<InPlace> {
        Some(InPlace::of::<Self>())
    }

    fn packed_size(&self) -> usize {
        size_of::<T>()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(bytemuck::bytes_of(&self.value));
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        bytemuck::bytes_of_mut(&mut self.value).copy_from_slice(bytes);
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        Some(bytemuck::bytes_of(&self.value))
    }

    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        Some(bytemuck::bytes_of_mut(&mut self.value))
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        Some(Box::new(|| Self::new(T::zeroed())))
    }
}

// ----- Vector --------------------------------------------------------------------------

/// A contiguous array of `len` elements: the reference's vector interface.
///
/// Its packed form is the elements' bytes, and it always has the fast path. Its length
/// is fixed once built (a receive never resizes it).
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Vector;
///
/// let v = Vector::from_vec(vec![1_u32, 2, 3]);
/// let mut w = Vector::<u32>::zeros(3);
/// w.unpack(v.as_bytes().unwrap()).unwrap();
/// assert_eq!(w.as_slice(), &[1, 2, 3]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vector<T> {
    data: Vec<T>,
}

impl<T: Pod + Send + Sync> Vector<T> {
    /// A vector holding `data`.
    pub fn from_vec(data: Vec<T>) -> Self {
        Self { data }
    }

    /// `len` elements, all zero (every [`Pod`] type is [`Zeroable`](bytemuck::Zeroable)).
    pub fn zeros(len: usize) -> Self {
        Self {
            data: vec![T::zeroed(); len],
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// The elements, writable (the length stays fixed).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// The elements, taken back out.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }
}

impl<T: Pod + Send + Sync> From<Vec<T>> for Vector<T> {
    fn from(data: Vec<T>) -> Self {
        Self::from_vec(data)
    }
}

impl<T: Pod + Send + Sync> Interface for Vector<T> {
    fn in_place(&self) -> Option<InPlace> {
        Some(InPlace::of::<Self>())
    }

    fn packed_size(&self) -> usize {
        size_of::<T>() * self.data.len()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(bytemuck::cast_slice(&self.data));
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        bytemuck::cast_slice_mut(&mut self.data).copy_from_slice(bytes);
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        Some(bytemuck::cast_slice(&self.data))
    }

    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        Some(bytemuck::cast_slice_mut(&mut self.data))
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let len = self.data.len();
        Some(Box::new(move || Self::zeros(len)))
    }
}

// ----- Matrix --------------------------------------------------------------------------

/// A 2-D array with a leading dimension: the reference's matrix interface.
///
/// Column-major, as in the reference: element `(i, j)` — row `i < nx`, column `j < ny` —
/// lies at `i + j * ld` in the storage. The `nx` elements of a column are contiguous;
/// `ld ≥ nx` elements separate the starts of two columns, so `ld − nx` elements of
/// padding follow each column. The storage holds at least `ld * (ny − 1) + nx` elements
/// (none when the matrix is empty) and may hold more.
///
/// Its packed form is the `nx * ny` elements, column by column; the padding is never
/// read into it nor written by [`Interface::unpack`]. It has the fast path exactly when it
/// is [dense](Self::is_dense).
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Matrix;
///
/// // 2 rows, 2 columns, leading dimension 3: one element of padding (9) per column.
/// let m = Matrix::new(2, 2, 3, vec![1, 2, 9, 3, 4]).unwrap();
/// assert_eq!(m.get(1, 1), 4);
/// assert!(m.as_bytes().is_none());
///
/// let mut dense = Matrix::<i32>::zeros(2, 2);
/// let mut packed = Vec::new();
/// m.pack(&mut packed);
/// dense.unpack(&packed).unwrap();
/// assert_eq!(dense.as_slice(), &[1, 2, 3, 4]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matrix<T> {
    nx: usize,
    ny: usize,
    ld: usize,
    data: Vec<T>,
}

/// Elements a strided matrix spans, from its first to its last element.
fn matrix_span(nx: usize, ny: usize, ld: usize) -> Option<usize> {
    if nx == 0 || ny == 0 {
        return Some(0);
    }
    ld.checked_mul(ny - 1)?.checked_add(nx)
}

impl<T: Pod + Send + Sync> Matrix<T> {
    /// A matrix of `nx` rows and `ny` columns, with `ld` elements between the starts of
    /// two columns, over the storage `data` (column-major; see [`Matrix`]).
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `ld < nx`, or when `data` holds fewer than
    /// `ld * (ny − 1) + nx` elements (the matrix is not empty), or when that count
    /// overflows `usize`.
    pub fn new(nx: usize, ny: usize, ld: usize, data: Vec<T>) -> Result<Self, DataError> {
        if ld < nx {
            return Err(DataError::Malformed("matrix: leading dimension ld < nx"));
        }
        let span = matrix_span(nx, ny, ld)
            .ok_or(DataError::Malformed("matrix: ld * (ny - 1) + nx overflows"))?;
        if data.len() < span {
            return Err(DataError::Malformed(
                "matrix: storage shorter than ld * (ny - 1) + nx elements",
            ));
        }
        Ok(Self { nx, ny, ld, data })
    }

    /// A dense `nx × ny` matrix (`ld = nx`), all zero.
    ///
    /// # Panics
    /// When `nx * ny` overflows `usize` (no such allocation could succeed anyway).
    pub fn zeros(nx: usize, ny: usize) -> Self {
        let len = nx.checked_mul(ny).expect("matrix: nx * ny overflows usize");
        Self {
            nx,
            ny,
            ld: nx,
            data: vec![T::zeroed(); len],
        }
    }

    /// Rows: the elements of a column.
    pub fn nx(&self) -> usize {
        self.nx
    }

    /// Columns.
    pub fn ny(&self) -> usize {
        self.ny
    }

    /// The leading dimension: elements between the starts of two columns.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// Whether the `nx * ny` elements are one contiguous run at the start of the storage
    /// (`ld == nx`, or at most one column, or no element), so that the fast path applies.
    pub fn is_dense(&self) -> bool {
        self.ld == self.nx || self.ny <= 1 || self.nx == 0
    }

    fn index(&self, i: usize, j: usize) -> usize {
        assert!(
            i < self.nx && j < self.ny,
            "matrix index ({i}, {j}) out of range for {} x {}",
            self.nx,
            self.ny
        );
        i + j * self.ld
    }

    /// The element in row `i`, column `j`.
    ///
    /// # Panics
    /// When `i ≥ nx` or `j ≥ ny`.
    pub fn get(&self, i: usize, j: usize) -> T {
        self.data[self.index(i, j)]
    }

    /// Replaces the element in row `i`, column `j`.
    ///
    /// # Panics
    /// When `i ≥ nx` or `j ≥ ny`.
    pub fn set(&mut self, i: usize, j: usize, value: T) {
        let k = self.index(i, j);
        self.data[k] = value;
    }

    /// The whole storage, padding included: element `(i, j)` is at `i + j * ld`.
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

    /// The storage ranges of the columns, in packed order; none when there is no element
    /// (an empty matrix owns no storage, whatever its `ny` and `ld`).
    fn columns(&self) -> impl Iterator<Item = Range<usize>> + use<T> {
        let (nx, ld) = (self.nx, self.ld);
        let ny = if nx == 0 { 0 } else { self.ny };
        (0..ny).map(move |j| j * ld..j * ld + nx)
    }
}

impl<T: Pod + Send + Sync> Interface for Matrix<T> {
    fn in_place(&self) -> Option<InPlace> {
        Some(InPlace::of::<Self>())
    }

    fn packed_size(&self) -> usize {
        size_of::<T>() * self.nx * self.ny
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.reserve(self.packed_size());
        pack_runs(&self.data, self.columns(), out);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        let runs = self.columns();
        unpack_runs(&mut self.data, runs, bytes);
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        self.is_dense()
            .then(|| bytemuck::cast_slice(&self.data[..self.nx * self.ny]))
    }

    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let len = self.nx * self.ny;
        self.is_dense()
            .then(|| bytemuck::cast_slice_mut(&mut self.data[..len]))
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let (nx, ny, ld, len) = (self.nx, self.ny, self.ld, self.data.len());
        Some(Box::new(move || Self {
            nx,
            ny,
            ld,
            data: vec![T::zeroed(); len],
        }))
    }
}

// ----- Block ---------------------------------------------------------------------------

/// A 3-D array with strides: the reference's block interface.
///
/// Element `(x, y, z)` — `x < nx`, `y < ny`, `z < nz` — lies at `x + y * ldy + z * ldz`
/// in the storage. A row's `nx` elements are contiguous; `ldy ≥ nx` elements separate the
/// starts of two rows of a plane, and `ldz ≥ ldy * ny` the starts of two planes. The
/// storage holds at least `ldz * (nz − 1) + ldy * (ny − 1) + nx` elements (none when the
/// block is empty) and may hold more.
///
/// Its packed form is the `nx * ny * nz` elements, `x` fastest, then `y`, then `z`; the
/// padding is never read into it nor written by [`Interface::unpack`]. It has the fast
/// path exactly when it is [dense](Self::is_dense).
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Block;
///
/// // 2 × 1 × 2, rows 3 apart, planes 4 apart: padding (9) after each row.
/// let b = Block::new(2, 1, 2, 3, 4, vec![1, 2, 9, 9, 3, 4]).unwrap();
/// assert_eq!(b.get(1, 0, 1), 4);
/// let mut packed = Vec::new();
/// b.pack(&mut packed);
/// assert_eq!(packed, bytemuck::cast_slice::<i32, u8>(&[1, 2, 3, 4]));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block<T> {
    nx: usize,
    ny: usize,
    nz: usize,
    ldy: usize,
    ldz: usize,
    data: Vec<T>,
}

/// Elements a strided block spans, from its first to its last element.
fn block_span(nx: usize, ny: usize, nz: usize, ldy: usize, ldz: usize) -> Option<usize> {
    if nx == 0 || ny == 0 || nz == 0 {
        return Some(0);
    }
    ldz.checked_mul(nz - 1)?
        .checked_add(ldy.checked_mul(ny - 1)?)?
        .checked_add(nx)
}

impl<T: Pod + Send + Sync> Block<T> {
    /// A block of `nx × ny × nz` elements, rows `ldy` elements apart and planes `ldz`
    /// elements apart, over the storage `data` (see [`Block`]).
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `ldy < nx`, when `ldz < ldy * ny`, when `data` holds
    /// fewer than `ldz * (nz − 1) + ldy * (ny − 1) + nx` elements (the block is not
    /// empty), or when one of those products overflows `usize`.
    pub fn new(
        nx: usize,
        ny: usize,
        nz: usize,
        ldy: usize,
        ldz: usize,
        data: Vec<T>,
    ) -> Result<Self, DataError> {
        if ldy < nx {
            return Err(DataError::Malformed("block: row stride ldy < nx"));
        }
        let plane = ldy
            .checked_mul(ny)
            .ok_or(DataError::Malformed("block: ldy * ny overflows"))?;
        if ldz < plane {
            return Err(DataError::Malformed("block: plane stride ldz < ldy * ny"));
        }
        let span = block_span(nx, ny, nz, ldy, ldz).ok_or(DataError::Malformed(
            "block: ldz * (nz - 1) + ldy * (ny - 1) + nx overflows",
        ))?;
        if data.len() < span {
            return Err(DataError::Malformed(
                "block: storage shorter than ldz * (nz - 1) + ldy * (ny - 1) + nx elements",
            ));
        }
        Ok(Self {
            nx,
            ny,
            nz,
            ldy,
            ldz,
            data,
        })
    }

    /// A dense `nx × ny × nz` block (`ldy = nx`, `ldz = nx * ny`), all zero.
    ///
    /// # Panics
    /// When `nx * ny` or `nx * ny * nz` overflows `usize`.
    pub fn zeros(nx: usize, ny: usize, nz: usize) -> Self {
        let plane = nx.checked_mul(ny).expect("block: nx * ny overflows usize");
        let len = plane
            .checked_mul(nz)
            .expect("block: nx * ny * nz overflows usize");
        Self {
            nx,
            ny,
            nz,
            ldy: nx,
            ldz: plane,
            data: vec![T::zeroed(); len],
        }
    }

    /// Elements of a row (the `x` extent).
    pub fn nx(&self) -> usize {
        self.nx
    }

    /// Rows of a plane (the `y` extent).
    pub fn ny(&self) -> usize {
        self.ny
    }

    /// Planes (the `z` extent).
    pub fn nz(&self) -> usize {
        self.nz
    }

    /// Elements between the starts of two rows of a plane.
    pub fn ldy(&self) -> usize {
        self.ldy
    }

    /// Elements between the starts of two planes.
    pub fn ldz(&self) -> usize {
        self.ldz
    }

    fn len(&self) -> usize {
        self.nx * self.ny * self.nz
    }

    /// Whether the `nx * ny * nz` elements are one contiguous run at the start of the
    /// storage (rows adjacent or a single row, planes adjacent or a single plane, or no
    /// element), so that the fast path applies.
    pub fn is_dense(&self) -> bool {
        let rows = self.ldy == self.nx || self.ny <= 1;
        let planes = self.ldz == self.nx * self.ny || self.nz <= 1;
        (rows && planes) || self.len() == 0
    }

    fn index(&self, x: usize, y: usize, z: usize) -> usize {
        assert!(
            x < self.nx && y < self.ny && z < self.nz,
            "block index ({x}, {y}, {z}) out of range for {} x {} x {}",
            self.nx,
            self.ny,
            self.nz
        );
        x + y * self.ldy + z * self.ldz
    }

    /// The element at `(x, y, z)`.
    ///
    /// # Panics
    /// When `x ≥ nx`, `y ≥ ny` or `z ≥ nz`.
    pub fn get(&self, x: usize, y: usize, z: usize) -> T {
        self.data[self.index(x, y, z)]
    }

    /// Replaces the element at `(x, y, z)`.
    ///
    /// # Panics
    /// When `x ≥ nx`, `y ≥ ny` or `z ≥ nz`.
    pub fn set(&mut self, x: usize, y: usize, z: usize, value: T) {
        let k = self.index(x, y, z);
        self.data[k] = value;
    }

    /// The whole storage, padding included: `(x, y, z)` is at `x + y * ldy + z * ldz`.
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

    /// The storage ranges of the rows, in packed order (`y` fastest, then `z`); none when
    /// there is no element (an empty block owns no storage, whatever its other extents).
    fn rows(&self) -> impl Iterator<Item = Range<usize>> + use<T> {
        let (nx, ldy, ldz) = (self.nx, self.ldy, self.ldz);
        let (ny, nz) = if nx == 0 { (0, 0) } else { (self.ny, self.nz) };
        (0..nz).flat_map(move |z| {
            (0..ny).map(move |y| {
                let start = y * ldy + z * ldz;
                start..start + nx
            })
        })
    }
}

impl<T: Pod + Send + Sync> Interface for Block<T> {
    fn in_place(&self) -> Option<InPlace> {
        Some(InPlace::of::<Self>())
    }

    fn packed_size(&self) -> usize {
        size_of::<T>() * self.len()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.reserve(self.packed_size());
        pack_runs(&self.data, self.rows(), out);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        size_mismatch(self.packed_size(), bytes.len())?;
        let runs = self.rows();
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
        let (nx, ny, nz, ldy, ldz, len) = (
            self.nx,
            self.ny,
            self.nz,
            self.ldy,
            self.ldz,
            self.data.len(),
        );
        Some(Box::new(move || Self {
            nx,
            ny,
            nz,
            ldy,
            ldz,
            data: vec![T::zeroed(); len],
        }))
    }
}

// ----- Complex: a user-defined interface -----------------------------------------------

/// A user-defined interface that packs: the reference's "complex" example.
///
/// `n` complex numbers kept as two arrays of one length — the real parts and the
/// imaginary parts. The data is not one contiguous run, so there is no fast path; it
/// travels through [`Interface::pack`] and [`Interface::unpack`]. Read it as a template
/// for your own interface: compute the size, write a self-describing form, and parse it
/// back without trusting it.
///
/// # Packed form
///
/// `8 + 16 n` bytes: the count `n` as a little-endian `u64`, then the `n` real parts,
/// then the `n` imaginary parts, each a little-endian `f64` (so the form is portable
/// across byte orders, unlike the built-ins').
///
/// # Unpacking
///
/// [`Interface::unpack`] checks the bytes before touching the data, and leaves it
/// unchanged on error:
/// - [`DataError::Malformed`] when the bytes are not a packed form at all: shorter than
///   the 8-byte count, or a body that is not exactly `16 n` bytes for the count `n` they
///   announce (a count too big for the bytes, or trailing bytes).
/// - [`DataError::SizeMismatch`] `{ expected: packed_size, got: bytes.len() }` when they
///   are a well-formed packed form of another count. As in the reference, a receive goes
///   into a handle registered with the sender's shape; the data is not resized.
///
/// ```
/// use starling_std::data::Interface;
/// use starling_std::interfaces::Complex;
///
/// let z = Complex::new(vec![1.0, 2.0], vec![-1.0, 0.5]).unwrap();
/// let mut packed = Vec::new();
/// z.pack(&mut packed);
/// assert_eq!(packed.len(), z.packed_size());
/// assert_eq!(&packed[..8], &2_u64.to_le_bytes());
///
/// let mut w = Complex::zeros(2);
/// w.unpack(&packed).unwrap();
/// assert_eq!(w, z);
/// assert!(w.as_bytes().is_none());
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Complex {
    real: Vec<f64>,
    imag: Vec<f64>,
}

/// Bytes of [`Complex`]'s count header.
const COUNT_BYTES: usize = size_of::<u64>();
/// Bytes of one part of one complex number.
const PART_BYTES: usize = size_of::<f64>();

/// Reads an `f64` from the 8 little-endian bytes `chunk`.
fn f64_le(chunk: &[u8]) -> f64 {
    let mut raw = [0; PART_BYTES];
    raw.copy_from_slice(chunk);
    f64::from_le_bytes(raw)
}

impl Complex {
    /// The complex numbers `real[k] + i·imag[k]`.
    ///
    /// # Errors
    /// [`DataError::Malformed`] when `real` and `imag` differ in length.
    pub fn new(real: Vec<f64>, imag: Vec<f64>) -> Result<Self, DataError> {
        if real.len() != imag.len() {
            return Err(DataError::Malformed(
                "complex: real and imaginary parts differ in length",
            ));
        }
        Ok(Self { real, imag })
    }

    /// `len` complex numbers, all zero.
    pub fn zeros(len: usize) -> Self {
        Self {
            real: vec![0.0; len],
            imag: vec![0.0; len],
        }
    }

    /// The number of complex numbers.
    pub fn len(&self) -> usize {
        self.real.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.real.is_empty()
    }

    /// The real parts.
    pub fn real(&self) -> &[f64] {
        &self.real
    }

    /// The imaginary parts.
    pub fn imag(&self) -> &[f64] {
        &self.imag
    }

    /// The real and the imaginary parts, both writable (their length stays fixed).
    pub fn parts_mut(&mut self) -> (&mut [f64], &mut [f64]) {
        (&mut self.real, &mut self.imag)
    }

    /// The real and the imaginary parts, taken back out.
    pub fn into_parts(self) -> (Vec<f64>, Vec<f64>) {
        (self.real, self.imag)
    }
}

impl Interface for Complex {
    fn packed_size(&self) -> usize {
        COUNT_BYTES + 2 * PART_BYTES * self.len()
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.reserve(self.packed_size());
        // A `usize` always fits in a `u64` on the targets Rust supports.
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        for x in self.real.iter().chain(&self.imag) {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        let (count, body) = bytes
            .split_first_chunk::<COUNT_BYTES>()
            .ok_or(DataError::Malformed("complex: shorter than its count"))?;
        let count = u64::from_le_bytes(*count);
        let fits = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(2 * PART_BYTES))
            .is_some_and(|len| len == body.len());
        if !fits {
            return Err(DataError::Malformed(
                "complex: body is not 16 bytes per announced number",
            ));
        }
        size_mismatch(self.packed_size(), bytes.len())?;
        let (real, imag) = body.split_at(PART_BYTES * self.len());
        for (dst, src) in self.real.iter_mut().zip(real.chunks_exact(PART_BYTES)) {
            *dst = f64_le(src);
        }
        for (dst, src) in self.imag.iter_mut().zip(imag.chunks_exact(PART_BYTES)) {
            *dst = f64_le(src);
        }
        Ok(())
    }

    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>> {
        let len = self.len();
        Some(Box::new(move || Self::zeros(len)))
    }
}

#[cfg(test)]
mod tests;
