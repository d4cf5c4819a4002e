//! Partitioning: a registered handle cut into children that are handles of their own (the
//! reference's `starpu_data_partition` / `starpu_data_unpartition` with filters).
//!
//! [`Context::partition`] cuts a handle with a [`Filter`] — a vector in blocks
//! ([`VectorBlock`]) or by given sizes ([`VectorList`]), a matrix in blocks of rows
//! ([`MatrixBlock`]) or of columns ([`MatrixVerticalBlock`]), or a filter of your own —
//! and returns the children: ordinary [`Handle`]s, usable in tasks, in the insert flow
//! (give each its tag — or [`TagChoice::Auto`](crate::TagChoice::Auto) — and owner with
//! [`Context::mpi_register`], as a reference program calls `starpu_mpi_data_register` on
//! each sub-handle), in sends and receives.
//! [`Context::unpartition`] gathers the children's values back into the parent.
//!
//! # Rules
//!
//! - **Implicit dependencies, both ways.** Both calls return at once and take effect in
//!   submission order, like a task: the children are filled once the accesses submitted
//!   before on the parent are done (a task writing the parent before the partition is
//!   seen by the children's tasks), and the parent is gathered once the accesses
//!   submitted on the children are done (a task on the parent after the unpartition sees
//!   the children's writes). Neither blocks, except that `partition` reads the parent's
//!   shape: it waits for a task or a transfer writing the parent *right now* to finish.
//! - **The parent is unusable while partitioned**, and a child once its partition is
//!   undone ([`PartitionError::Partitioned`], [`PartitionError::Retired`]): inserts
//!   ([`InsertError::Partition`](crate::InsertError::Partition)) and transfers
//!   ([`CommError::Partition`](crate::CommError::Partition)) refuse them with nothing
//!   submitted (the transfers the runtime makes itself, such as a master-slave master
//!   bringing a value home, go on); a task ([`TaskBuilder::access`](crate::TaskBuilder::access)) or an
//!   acquisition on them panics, as on any caller bug without an error to return.
//!   Unregister neither a partitioned handle nor a child: unpartition the parent (the
//!   children are then freed).
//! - **Copies, not views.** A handle owns its storage here (the crate has no `unsafe`),
//!   so each child holds a copy of its piece: filled from the parent when the partition
//!   takes effect, copied back at the unpartition. The parent's storage is kept while
//!   partitioned (a [`Matrix`]'s padding survives the round trip). Each rank cuts its own
//!   copy of the parent: register each child's owner as a rank that holds the parent's
//!   current value (its owner), and before unpartitioning bring the children's values to
//!   the parent's owner (own them there, or use [`Context::get_data_on_node`]): the
//!   unpartition counts as a write of the parent on every rank, so the insert flow's
//!   cache forgets what it sent and received of it, and its next readers fetch it from
//!   its owner again.
//! - **Every rank partitions and unpartitions at the same point of the flow**, as it
//!   registers; children are registered in piece order.
//! - **A failed transfer poisons the children** as it would a task's outputs: a parent
//!   whose value depends on one fills no child, and its children's tasks do not run;
//!   likewise a gathered parent. A child whose value was replaced by one of another shape
//!   (a kernel assigning a new `Vector`) is not gathered, and the run reports it at
//!   shutdown.
//!
//! ```
//! use starling_core::AccessMode;
//! use starling_std::interfaces::Vector;
//! use starling_std::partition::VectorBlock;
//! use starling_std::{Codelet, run_local};
//!
//! let out = run_local(1, |ctx| {
//!     let v = ctx.register(Vector::from_vec((0..10_u32).collect()));
//!     // 10 elements in 3 blocks: 4, 3 and 3 (the first 10 % 3 blocks get one more).
//!     let parts = ctx.partition(&v, &VectorBlock { parts: 3 }).unwrap();
//!     let plus = Codelet::new("plus", |b| {
//!         let k = b.r::<Vector<u32>>(1).as_slice()[0];
//!         for x in b.w::<Vector<u32>>(0).as_mut_slice() {
//!             *x += k;
//!         }
//!     });
//!     let k = ctx.register(Vector::from_vec(vec![100_u32]));
//!     for p in &parts {
//!         ctx.task(&plus).rw(p).r(&k).submit();
//!     }
//!     let lens: Vec<usize> = parts.iter().map(|p| ctx.acquire(p, AccessMode::R).get().len()).collect();
//!     ctx.unpartition(&v).unwrap();
//!     let v = ctx.acquire(&v, AccessMode::R).get().as_slice().to_vec();
//!     (lens, v)
//! })
//! .unwrap();
//! assert_eq!(out[0].0, vec![4, 3, 3]);
//! assert_eq!(out[0].1, (100..110).collect::<Vec<u32>>());
//! ```

use bytemuck::Pod;
use core::fmt;
use core::ops::Range;
use starling_core::AccessMode;

use crate::api::context::Context;
use crate::runtime::data::{AnyCell, CHILD, DataError, Handle, Interface, PARTITIONED, RETIRED};
pub use crate::runtime::data::{FilterError, PartitionError};
use crate::runtime::interfaces::{Matrix, Vector};
use crate::runtime::task::{Access, Offload};
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};

/// Data whose pieces can become children of its own interface.
///
/// Implemented by [`Vector`] (pieces: index ranges) and [`Matrix`] (pieces:
/// [`MatrixPiece`]); implement it for your own interface to partition it, then write a
/// [`Filter`] that cuts it.
pub trait Partitionable: Interface + Sized {
    /// Where one child lies in its parent.
    type Piece: Clone + fmt::Debug + Send + Sync + 'static;

    /// A new child for `piece` of `self`, zeroed (the partition fills it later, in flow
    /// order).
    ///
    /// # Errors
    /// What is wrong with `piece`, when it does not lie inside `self`.
    fn part(&self, piece: &Self::Piece) -> Result<Self, &'static str>;

    /// Copies `piece` of `self` into `child`.
    ///
    /// # Errors
    /// [`DataError::SizeMismatch`] when `child` or `self` no longer has the shape the
    /// partition was made for (a task replaced the value with another shape); nothing is
    /// copied then.
    fn copy_out(&self, piece: &Self::Piece, child: &mut Self) -> Result<(), DataError>;

    /// Copies `child` back into `piece` of `self`.
    ///
    /// # Errors
    /// As for [`Partitionable::copy_out`].
    fn copy_in(&mut self, piece: &Self::Piece, child: &Self) -> Result<(), DataError>;
}

/// How to cut data of interface `I` into pieces (the reference's `struct
/// starpu_data_filter`: its `filter_func` and `nchildren`, or `filter_arg_ptr`).
///
/// A closure `Fn(&I) -> Result<Vec<I::Piece>, FilterError>` is a filter.
pub trait Filter<I: Partitionable> {
    /// The pieces of `parent`, in child order.
    ///
    /// # Errors
    /// A [`FilterError`] when `parent`'s shape cannot be cut as asked.
    fn pieces(&self, parent: &I) -> Result<Vec<I::Piece>, FilterError>;
}

impl<I, F> Filter<I> for F
where
    I: Partitionable,
    F: Fn(&I) -> Result<Vec<I::Piece>, FilterError>,
{
    fn pieces(&self, parent: &I) -> Result<Vec<I::Piece>, FilterError> {
        self(parent)
    }
}

/// `len` elements cut in `parts` consecutive ranges as the reference cuts them
/// (`starpu_filter_nparts_compute_chunk_size_and_offset`): each has `len / parts`
/// elements, and the first `len % parts` one more.
///
/// ```
/// use starling_std::partition::block_ranges;
///
/// assert_eq!(block_ranges(10, 4).unwrap(), vec![0..3, 3..6, 6..8, 8..10]);
/// ```
///
/// # Errors
/// [`FilterError::NoParts`] for `parts == 0`; [`FilterError::TooManyParts`] for
/// `parts > len`.
pub fn block_ranges(len: usize, parts: usize) -> Result<Vec<Range<usize>>, FilterError> {
    if parts == 0 {
        return Err(FilterError::NoParts);
    }
    if parts > len {
        return Err(FilterError::TooManyParts { parts, len });
    }
    let (chunk, remainder) = (len / parts, len % parts);
    Ok((0..parts)
        .map(|id| {
            let start = id * chunk + id.min(remainder);
            start..start + chunk + usize::from(id < remainder)
        })
        .collect())
}

// ----- Vector --------------------------------------------------------------------------

/// A vector in `parts` blocks (`starpu_vector_filter_block`): the first `len % parts`
/// children have one element more than the others ([`block_ranges`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorBlock {
    /// How many children (at least 1, at most the vector's length).
    pub parts: usize,
}

/// A vector cut by the given sizes, in order (`starpu_vector_filter_list`); they must add
/// up to the vector's length. A size may be 0 (an empty child).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorList {
    /// The children's lengths.
    pub sizes: Vec<usize>,
}

impl<T: Pod + Send + Sync> Filter<Vector<T>> for VectorBlock {
    fn pieces(&self, parent: &Vector<T>) -> Result<Vec<Range<usize>>, FilterError> {
        block_ranges(parent.len(), self.parts)
    }
}

impl<T: Pod + Send + Sync> Filter<Vector<T>> for VectorList {
    fn pieces(&self, parent: &Vector<T>) -> Result<Vec<Range<usize>>, FilterError> {
        if self.sizes.is_empty() {
            return Err(FilterError::NoParts);
        }
        let sum = self
            .sizes
            .iter()
            .try_fold(0_usize, |acc, &s| acc.checked_add(s));
        if sum != Some(parent.len()) {
            return Err(FilterError::SizesMismatch {
                sum,
                len: parent.len(),
            });
        }
        let mut start = 0;
        Ok(self
            .sizes
            .iter()
            .map(|&s| {
                let r = start..start + s;
                start += s;
                r
            })
            .collect())
    }
}

/// `got` elements where `expected` were due, as a size mismatch in bytes of `T`.
fn mismatch<T>(expected: usize, got: usize) -> Result<(), DataError> {
    if expected == got {
        Ok(())
    } else {
        let size = size_of::<T>();
        Err(DataError::SizeMismatch {
            expected: expected.saturating_mul(size),
            got: got.saturating_mul(size),
        })
    }
}

/// Whether `r` is a range inside `0..len`.
fn inside(r: &Range<usize>, len: usize) -> bool {
    r.start <= r.end && r.end <= len
}

impl<T: Pod + Send + Sync> Partitionable for Vector<T> {
    /// The indices of the child's elements in the parent.
    type Piece = Range<usize>;

    fn part(&self, piece: &Range<usize>) -> Result<Self, &'static str> {
        if !inside(piece, self.len()) {
            return Err("range outside the vector");
        }
        Ok(Self::zeros(piece.len()))
    }

    fn copy_out(&self, piece: &Range<usize>, child: &mut Self) -> Result<(), DataError> {
        if !inside(piece, self.len()) {
            return mismatch::<T>(piece.end, self.len());
        }
        mismatch::<T>(piece.len(), child.len())?;
        child
            .as_mut_slice()
            .copy_from_slice(&self.as_slice()[piece.clone()]);
        Ok(())
    }

    fn copy_in(&mut self, piece: &Range<usize>, child: &Self) -> Result<(), DataError> {
        if !inside(piece, self.len()) {
            return mismatch::<T>(piece.end, self.len());
        }
        mismatch::<T>(piece.len(), child.len())?;
        self.as_mut_slice()[piece.clone()].copy_from_slice(child.as_slice());
        Ok(())
    }
}

// ----- Matrix --------------------------------------------------------------------------

/// Where a child matrix lies in its parent: rows `rows` of columns `cols` (element
/// `(i, j)` of the child is `(rows.start + i, cols.start + j)` of the parent), stored
/// with leading dimension `ld` (at least `rows.len()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixPiece {
    /// The parent's rows (`x`, the contiguous dimension) the child holds.
    pub rows: Range<usize>,
    /// The parent's columns (`y`) the child holds.
    pub cols: Range<usize>,
    /// The child's leading dimension.
    pub ld: usize,
}

/// A matrix in `parts` blocks of rows — along `x`, the contiguous dimension
/// (`starpu_matrix_filter_block`): each child has all the columns and `nx / parts` rows,
/// the first `nx % parts` children one more ([`block_ranges`]).
///
/// In the reference a child shares the parent's storage and keeps its `ld`; here a child
/// is a copy, stored dense (`ld` = its rows): keeping the parent's `ld` would give every
/// child a column stride as long as the parent's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixBlock {
    /// How many children (at least 1, at most `nx`).
    pub parts: usize,
}

/// A matrix in `parts` blocks of columns — along `y` (`starpu_matrix_filter_vertical_block`):
/// each child has all the rows and `ny / parts` columns, the first `ny % parts` children
/// one more ([`block_ranges`]). A child keeps the parent's leading dimension, as in the
/// reference (it is dense exactly when the parent is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixVerticalBlock {
    /// How many children (at least 1, at most `ny`).
    pub parts: usize,
}

impl<T: Pod + Send + Sync> Filter<Matrix<T>> for MatrixBlock {
    fn pieces(&self, parent: &Matrix<T>) -> Result<Vec<MatrixPiece>, FilterError> {
        Ok(block_ranges(parent.nx(), self.parts)?
            .into_iter()
            .map(|rows| MatrixPiece {
                ld: rows.len(),
                rows,
                cols: 0..parent.ny(),
            })
            .collect())
    }
}

impl<T: Pod + Send + Sync> Filter<Matrix<T>> for MatrixVerticalBlock {
    fn pieces(&self, parent: &Matrix<T>) -> Result<Vec<MatrixPiece>, FilterError> {
        Ok(block_ranges(parent.ny(), self.parts)?
            .into_iter()
            .map(|cols| MatrixPiece {
                rows: 0..parent.nx(),
                cols,
                ld: parent.ld(),
            })
            .collect())
    }
}

/// Whether `piece` lies inside `m`.
fn piece_inside<T: Pod + Send + Sync>(m: &Matrix<T>, piece: &MatrixPiece) -> bool {
    inside(&piece.rows, m.nx()) && inside(&piece.cols, m.ny())
}

/// Copies the columns of `piece` between the parent's storage and the child's: `f` gets
/// each pair of element ranges (parent, child), `rows` elements long.
fn for_each_column(
    piece: &MatrixPiece,
    parent_ld: usize,
    child_ld: usize,
    mut f: impl FnMut(Range<usize>, Range<usize>),
) {
    let rows = piece.rows.len();
    if rows == 0 {
        return;
    }
    for (c, j) in piece.cols.clone().enumerate() {
        let p = piece.rows.start + j * parent_ld;
        let k = c * child_ld;
        f(p..p + rows, k..k + rows);
    }
}

/// Checks that `child` has `piece`'s shape and `parent` holds `piece`.
fn matrix_fits<T: Pod + Send + Sync>(
    parent: &Matrix<T>,
    piece: &MatrixPiece,
    child: &Matrix<T>,
) -> Result<(), DataError> {
    if !piece_inside(parent, piece) {
        return mismatch::<T>(
            piece.rows.end.saturating_mul(piece.cols.end),
            parent.nx().saturating_mul(parent.ny()),
        );
    }
    mismatch::<T>(
        piece.rows.len() * piece.cols.len(),
        child.nx().saturating_mul(child.ny()),
    )?;
    if child.nx() != piece.rows.len() {
        return Err(DataError::Malformed(
            "partition: the child matrix no longer has its piece's rows",
        ));
    }
    Ok(())
}

impl<T: Pod + Send + Sync> Partitionable for Matrix<T> {
    type Piece = MatrixPiece;

    fn part(&self, piece: &MatrixPiece) -> Result<Self, &'static str> {
        if !piece_inside(self, piece) {
            return Err("rows or columns outside the matrix");
        }
        let (nx, ny) = (piece.rows.len(), piece.cols.len());
        if piece.ld < nx {
            return Err("leading dimension shorter than the piece's rows");
        }
        let span = if nx == 0 || ny == 0 {
            Some(0)
        } else {
            piece.ld.checked_mul(ny - 1).and_then(|s| s.checked_add(nx))
        };
        let span = span.ok_or("ld * (columns - 1) + rows overflows")?;
        Self::new(nx, ny, piece.ld, vec![T::zeroed(); span])
            .map_err(|_| "the piece is not a valid matrix shape")
    }

    fn copy_out(&self, piece: &MatrixPiece, child: &mut Self) -> Result<(), DataError> {
        matrix_fits(self, piece, child)?;
        let (pld, cld) = (self.ld(), child.ld());
        let src = self.as_slice();
        let dst = child.as_mut_slice();
        for_each_column(piece, pld, cld, |p, c| dst[c].copy_from_slice(&src[p]));
        Ok(())
    }

    fn copy_in(&mut self, piece: &MatrixPiece, child: &Self) -> Result<(), DataError> {
        matrix_fits(self, piece, child)?;
        let (pld, cld) = (self.ld(), child.ld());
        let src = child.as_slice();
        let dst = self.as_mut_slice();
        for_each_column(piece, pld, cld, |p, c| dst[p].copy_from_slice(&src[c]));
        Ok(())
    }
}

// ----- the partition itself ------------------------------------------------------------

/// A partitioned handle's children and their pieces (kept in the parent's cell).
struct Parts<I: Partitionable> {
    children: Vec<Handle<I>>,
    pieces: Vec<I::Piece>,
}

impl<I: Interface> Handle<I> {
    /// Whether the handle is partitioned now ([`Context::partition`]).
    pub fn is_partitioned(&self) -> bool {
        self.cell.state() & PARTITIONED != 0
    }
}

impl<I: Partitionable> Handle<I> {
    /// How many children the handle has: 0 when it is not partitioned
    /// (`starpu_data_get_nb_children`).
    pub fn nb_children(&self) -> usize {
        self.with_parts(|p| p.children.len()).unwrap_or(0)
    }

    /// Child `i` of the partitioned handle (`starpu_data_get_sub_data`); `None` when it is
    /// not partitioned or has fewer children (the reference asserts).
    pub fn sub_data(&self, i: usize) -> Option<Self> {
        self.with_parts(|p| p.children.get(i).cloned()).flatten()
    }

    /// The children of the partitioned handle, in piece order; empty when it is not
    /// partitioned.
    pub fn children(&self) -> Vec<Self> {
        self.with_parts(|p| p.children.clone()).unwrap_or_default()
    }

    fn with_parts<R>(&self, f: impl FnOnce(&Parts<I>) -> R) -> Option<R> {
        let slot = lock(&self.cell.parts);
        slot.as_ref()
            .and_then(|b| b.downcast_ref::<Parts<I>>())
            .map(f)
    }
}

/// Makes main memory's copy of each `(cell, mode)` valid for the host (master-slave
/// mode: a valid copy may be on a slave), then runs `then`; at once without offload.
fn on_host(
    offload: Option<Arc<dyn Offload>>,
    cells: Vec<(Arc<dyn AnyCell>, AccessMode)>,
    then: impl FnOnce() + Send + 'static,
) {
    let Some(offload) = offload.filter(|_| !cells.is_empty()) else {
        then();
        return;
    };
    let remaining = Arc::new(AtomicUsize::new(cells.len()));
    let then = Arc::new(Mutex::new(Some(then)));
    for (cell, mode) in cells {
        let (remaining, then) = (Arc::clone(&remaining), Arc::clone(&then));
        offload.to_host(
            cell,
            mode,
            Box::new(move || {
                if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    if let Some(f) = lock(&then).take() {
                        f();
                    }
                }
            }),
        );
    }
}

impl Context {
    /// Partitions `parent` with `filter` (`starpu_data_partition`, or
    /// `starpu_data_partition_plan` + `starpu_data_partition_submit`): registers one child
    /// per piece, in piece order, and returns them. The children are filled from the
    /// parent once the accesses submitted before on it are done; from now until
    /// [`Context::unpartition`], only the children may be used. See the
    /// [module docs](crate::partition).
    ///
    /// # Errors
    /// [`PartitionError::Partitioned`] when `parent` is partitioned already (partition a
    /// child instead, for a hierarchy); [`PartitionError::Retired`] for a child of an
    /// undone partition; [`PartitionError::Filter`] when the filter refuses the parent's
    /// shape or makes a piece that does not fit it. Nothing was registered then.
    pub fn partition<I: Partitionable>(
        &self,
        parent: &Handle<I>,
        filter: &(impl Filter<I> + ?Sized),
    ) -> Result<Vec<Handle<I>>, PartitionError> {
        parent.cell.usable()?;
        let refused = |cause| PartitionError::Filter {
            data: parent.id(),
            cause,
        };
        // The shape is read now; the values are copied in flow order, by the hook below.
        // (Not under the partition lock: a kernel running on the parent may ask for its
        // children while this waits for it.)
        let (pieces, values) = {
            let data = parent.cell.read();
            let pieces = filter.pieces(&data).map_err(refused)?;
            if pieces.is_empty() {
                return Err(refused(FilterError::NoParts));
            }
            let values = pieces
                .iter()
                .enumerate()
                .map(|(index, piece)| {
                    data.part(piece)
                        .map_err(|what| refused(FilterError::BadPiece { index, what }))
                })
                .collect::<Result<Vec<I>, _>>()?;
            (pieces, values)
        };
        let mut slot = lock(&parent.cell.parts);
        // (Another thread of this rank may have partitioned it meanwhile.)
        parent.cell.usable()?;
        let children: Vec<Handle<I>> = values.into_iter().map(|v| self.register(v)).collect();
        for c in &children {
            c.cell.set_state(CHILD);
        }
        let mut accesses = Vec::with_capacity(children.len() + 1);
        accesses.push(Access {
            cell: parent.erased(),
            mode: AccessMode::R,
        });
        accesses.extend(children.iter().map(|c| Access {
            cell: c.erased(),
            mode: AccessMode::W,
        }));
        let host = accesses.iter().map(|a| (a.cell.clone(), a.mode)).collect();
        let rt = self.runtime.clone();
        let (src, kids, cuts) = (parent.clone(), children.clone(), pieces.clone());
        self.runtime.submit_hook(accesses, 0, move |node| {
            let offload = rt.offload().cloned();
            on_host(offload, host, move || {
                // A parent whose value depends on a failed transfer fills nothing: the
                // children inherit the poison as they would from a task.
                if rt.poison_of(node).is_none() {
                    let data = src.cell.read();
                    for (k, (child, piece)) in kids.iter().zip(&cuts).enumerate() {
                        if let Err(e) = data.copy_out(piece, &mut child.cell.write()) {
                            rt.record_device_failure(format!(
                                "partitioning {}: child {k} ({}) was not filled: {e}",
                                src.id(),
                                child.id()
                            ));
                        }
                    }
                }
                rt.complete(node);
            });
        });
        parent.cell.set_state(parent.cell.state() | PARTITIONED);
        *slot = Some(Box::new(Parts {
            children: children.clone(),
            pieces,
        }));
        Ok(children)
    }

    /// Undoes the partition of `parent` (`starpu_data_unpartition`, or
    /// `starpu_data_unpartition_submit` + `starpu_data_partition_clean`): the children's
    /// values are copied back into the parent once the accesses submitted on the children
    /// are done, then the children are freed. The parent may be used again at once (its
    /// next accesses come after the gathering); the children may not
    /// ([`PartitionError::Retired`]), and their tags and insert-flow registrations are
    /// forgotten (they may be given to other handles). In the insert flow the parent
    /// counts as written on every rank (see the [module docs](crate::partition)).
    ///
    /// # Errors
    /// [`PartitionError::NotPartitioned`]; [`PartitionError::ChildPartitioned`] when a
    /// child is partitioned itself (unpartition it first). Nothing changed then.
    pub fn unpartition<I: Partitionable>(&self, parent: &Handle<I>) -> Result<(), PartitionError> {
        let mut slot = lock(&parent.cell.parts);
        let state = parent.cell.state();
        let not_partitioned = PartitionError::NotPartitioned(parent.id());
        if state & PARTITIONED == 0 {
            return Err(not_partitioned);
        }
        let parts = match slot.take().map(|b| b.downcast::<Parts<I>>()) {
            Some(Ok(parts)) => parts,
            // (another type is impossible: the handle is typed; leave the slot as it was)
            Some(Err(other)) => {
                *slot = Some(other);
                return Err(not_partitioned);
            }
            None => return Err(not_partitioned),
        };
        // Hold every child's partition lock while checking and retiring them (parent
        // before child, the order `partition` of a child takes too).
        let guards: Vec<_> = parts.children.iter().map(|c| lock(&c.cell.parts)).collect();
        if let Some(child) = parts
            .children
            .iter()
            .find(|c| c.cell.state() & PARTITIONED != 0)
            .map(Handle::id)
        {
            drop(guards);
            *slot = Some(parts);
            return Err(PartitionError::ChildPartitioned {
                parent: parent.id(),
                child,
            });
        }
        for c in &parts.children {
            c.cell.set_state(CHILD | RETIRED);
            self.forget_tag(c.id());
            crate::flow::distributed::forget(&mut lock(&self.dist), c.id());
        }
        drop(guards);
        let Parts { children, pieces } = *parts;
        crate::flow::distributed::invalidate(self, parent.id());
        let mut accesses = Vec::with_capacity(children.len() + 1);
        accesses.push(Access {
            cell: parent.erased(),
            mode: AccessMode::RW,
        });
        // Read-write, not read: the children are freed after, so every earlier access to
        // them (a send lending its bytes included) must be over.
        accesses.extend(children.iter().map(|c| Access {
            cell: c.erased(),
            mode: AccessMode::RW,
        }));
        let host = accesses.iter().map(|a| (a.cell.clone(), a.mode)).collect();
        let rt = self.runtime.clone();
        let dst = parent.clone();
        self.runtime.submit_hook(accesses, 0, move |node| {
            let offload = rt.offload().cloned();
            let slaves = offload.clone();
            on_host(offload, host, move || {
                if rt.poison_of(node).is_none() {
                    let mut data = dst.cell.write();
                    for (k, (child, piece)) in children.iter().zip(&pieces).enumerate() {
                        if let Err(e) = data.copy_in(piece, &child.cell.read()) {
                            rt.record_device_failure(format!(
                                "unpartitioning {}: child {k} ({}) was not gathered: {e}",
                                dst.id(),
                                child.id()
                            ));
                        }
                    }
                }
                for child in &children {
                    let cell = child.erased();
                    rt.layers().forget(cell.uid());
                    if let Some(s) = &slaves {
                        s.forget(&cell);
                    }
                    drop(child.cell.take());
                }
                rt.complete(node);
            });
        });
        parent.cell.set_state(state & !PARTITIONED);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
