//! Data handles: registered data, typed by their interface.
//!
//! A [`Handle<I>`] names one piece of registered data of interface `I` on one rank. The
//! runtime orders every access to it — tasks, sends, receives, acquisitions — by the
//! handle's implicit dependencies (reads run together, writes one at a time, in
//! submission order), so the lock inside a handle is never contended by a correct flow;
//! it only makes the sharing sound.
//!
//! An [`Interface`] says how the data travels: its packed size, how to pack it into bytes
//! and unpack it back, and — the fast path, the counterpart of the reference's
//! `starpu_mpi_datatype_register` — whether it is one contiguous run of bytes that can be
//! sent as is. The built-in interfaces are in [`crate::interfaces`].

use core::any::Any;
use core::fmt;
use core::ops::{Deref, DerefMut};

use starling_core::DataId;

#[cfg(not(loom))]
use crate::buffer::LentData;
use crate::buffer::{RecvBuffer, SendBuffer};

use crate::sync::{
    Arc, DataLock, DataReadGuard, DataWriteGuard, Mutex, data_lock, data_read, data_write,
};
#[cfg(not(loom))]
use crate::sync::{OwnedReadGuard, OwnedWriteGuard, try_read_owned, try_write_owned};

pub use crate::error::{DataError, FilterError, PartitionError};

/// How a kind of data is laid out and moved between ranks.
///
/// Implement it for user-defined data (the reference's "complex" example); the built-in
/// interfaces are in [`crate::interfaces`]. `pack` then `unpack` must reproduce the data.
pub trait Interface: Send + Sync + 'static {
    /// Bytes of the packed form.
    fn packed_size(&self) -> usize;

    /// Appends the packed form (exactly [`Interface::packed_size`] bytes) to `out`.
    fn pack(&self, out: &mut Vec<u8>);

    /// Replaces the data with the packed form `bytes`.
    ///
    /// # Errors
    /// [`DataError::SizeMismatch`] when `bytes` is not the size this data accepts (the
    /// built-in interfaces accept exactly their own packed size);
    /// [`DataError::Malformed`] when a user-defined form cannot be parsed;
    /// [`DataError::InvalidPayload`] when bytes of the right size are not a valid packed
    /// form (a sparse matrix of another shape or with an invalid pattern). On error the
    /// data must be left unchanged.
    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError>;

    /// The fast path: the data as one contiguous run of bytes that is its packed form,
    /// when it is one (a vector, a variable, a matrix without padding). Transfers then
    /// copy straight from it, with no packing step.
    fn as_bytes(&self) -> Option<&[u8]> {
        None
    }

    /// The fast path for receiving: the data as one contiguous, writable run of bytes of
    /// exactly [`Interface::packed_size`] bytes.
    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        None
    }

    /// Whether transfers may read and write this data in place — the bytes of
    /// [`Interface::as_bytes`] handed to MPI for the whole of a non-blocking transfer,
    /// under the handle's lock — instead of copying them. Only the built-in interfaces
    /// can say yes (an [`InPlace`] names the type that made it, and only this crate
    /// makes one): in-place transfers rely on `as_bytes` returning the same memory, owned
    /// by the data, for as long as it is borrowed.
    fn in_place(&self) -> Option<InPlace> {
        None
    }

    /// How to allocate this data again, zeroed, with the same shape. It lets the runtime
    /// free a received copy it may need again later (a cache flush, an eviction): the
    /// copy is dropped and reallocated on its next use. `None` (the default) keeps the
    /// copy's memory.
    fn shape(&self) -> Option<Box<dyn FnOnce() -> Self + Send>>
    where
        Self: Sized,
    {
        None
    }
}

/// A built-in interface's word that its bytes may be transferred in place
/// ([`Interface::in_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlace(core::any::TypeId);

impl InPlace {
    /// The word of the built-in interface `I`.
    pub(crate) fn of<I: 'static>() -> Self {
        Self(core::any::TypeId::of::<I>())
    }
}

/// One registered datum of interface `I` on one rank. Cloning a handle clones the name,
/// not the data.
pub struct Handle<I: Interface> {
    pub(crate) cell: Arc<Cell<I>>,
}

impl<I: Interface> Clone for Handle<I> {
    fn clone(&self) -> Self {
        Self {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<I: Interface> fmt::Debug for Handle<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.cell.id)
            .finish_non_exhaustive()
    }
}

impl<I: Interface> Handle<I> {
    /// The handle's id on this rank.
    pub fn id(&self) -> DataId {
        self.cell.id
    }

    /// The type-erased handle the runtime schedules.
    pub(crate) fn erased(&self) -> Arc<dyn AnyCell> {
        self.cell.clone()
    }

    /// Panics when the application may not use the handle now (see
    /// [`PartitionError::Partitioned`] and [`PartitionError::Retired`]): the misuse of
    /// calls that have no error to return (a task, an acquisition).
    pub(crate) fn expect_usable(&self) {
        if let Err(e) = self.cell.usable() {
            panic!("{e}");
        }
    }
}

type Init<I> = Box<dyn FnOnce() -> I + Send>;

/// What a handle's lock guards: the data, or how to allocate it on its next use.
///
/// Both sit under the one lock, so an access and a [`Cell::release`] never see half of a
/// change: whoever takes the lock first goes first. A read that finds the data freed
/// takes the lock for writing and allocates it again (zeroed), then reads that.
pub(crate) struct Slot<I> {
    value: Option<I>,
    /// For lazy registration, and after a release: how to allocate the data on its next
    /// use. Only touched under the write lock (through `Mutex::get_mut`, which takes no
    /// lock): the `Mutex` only makes the slot `Sync`, which the shared lock requires
    /// (the allocator is `Send` but not `Sync`).
    init: Mutex<Option<Init<I>>>,
}

impl<I> Slot<I> {
    /// Allocates the data if it is missing and can be allocated; exclusive access only.
    fn allocate(&mut self) {
        if self.value.is_none() {
            let init = self
                .init
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(f) = init.take() {
                self.value = Some(f());
            }
        }
    }

    /// Whether the data is missing but can be allocated (lazy, or released).
    fn pending(&mut self) -> bool {
        self.value.is_none()
            && self
                .init
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some()
    }
}

/// [`Cell::state`]: the handle is partitioned (only its children may be used).
pub(crate) const PARTITIONED: u8 = 1;
/// [`Cell::state`]: the handle was a child of an undone partition (never usable again).
pub(crate) const RETIRED: u8 = 2;
/// [`Cell::state`]: the handle is a child of a partition (it may not be unregistered:
/// unpartitioning its parent retires it).
pub(crate) const CHILD: u8 = 4;

/// A partition's children and pieces, type-erased ([`crate::partition`] knows the type).
pub(crate) type Parts = Box<dyn Any + Send + Sync>;

/// The storage behind a handle.
pub(crate) struct Cell<I> {
    pub(crate) id: DataId,
    data: DataLock<Slot<I>>,
    /// Partitioning flags ([`PARTITIONED`], [`RETIRED`], [`CHILD`]), read by every
    /// submission without a lock; changed only under [`Cell::parts`]'s lock.
    // A plain atomic, not the `sync` shim: submission-time bookkeeping of one rank's flow,
    // no structure the loom models check.
    state: core::sync::atomic::AtomicU8,
    /// The children while partitioned ([`crate::partition`]).
    pub(crate) parts: Mutex<Option<Parts>>,
    /// Unique in the process, never reused (see [`Buffers::uid`](crate::runtime::task::Buffers::uid)).
    uid: u64,
    /// Changes to a fresh number whenever write access is granted (see
    /// [`Buffers::version`](crate::runtime::task::Buffers::version)).
    version: core::sync::atomic::AtomicU64,
    /// [`AnyCell::size_hint`].
    size: core::sync::atomic::AtomicUsize,
    /// Blocking transfers of this handle in flight without a task-graph node
    /// ([`AnyCell::direct`]).
    direct: core::sync::atomic::AtomicU32,
}

/// Handle uids and versions: one process-wide sequence, so a number is never reused.
// A plain atomic, not the `sync` shim: a static needs a `const` constructor, and this
// counter is no structure the loom models check.
static STAMPS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
}

impl<I: Interface> Cell<I> {
    pub(crate) fn new(id: DataId, data: I) -> Self {
        Self {
            size: core::sync::atomic::AtomicUsize::new(data.packed_size()),
            id,
            data: data_lock(Slot {
                value: Some(data),
                init: Mutex::new(None),
            }),
            uid: next_stamp(),
            version: core::sync::atomic::AtomicU64::new(next_stamp()),
            state: core::sync::atomic::AtomicU8::new(0),
            parts: Mutex::new(None),
            direct: core::sync::atomic::AtomicU32::new(0),
        }
    }

    pub(crate) fn lazy(id: DataId, init: impl FnOnce() -> I + Send + 'static) -> Self {
        Self {
            size: core::sync::atomic::AtomicUsize::new(0),
            id,
            data: data_lock(Slot {
                value: None,
                init: Mutex::new(Some(Box::new(init))),
            }),
            uid: next_stamp(),
            version: core::sync::atomic::AtomicU64::new(next_stamp()),
            state: core::sync::atomic::AtomicU8::new(0),
            parts: Mutex::new(None),
            direct: core::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The partitioning flags ([`PARTITIONED`], [`RETIRED`], [`CHILD`]).
    pub(crate) fn state(&self) -> u8 {
        self.state.load(core::sync::atomic::Ordering::Acquire)
    }

    /// Replaces the partitioning flags; only under [`Cell::parts`]'s lock (of this cell,
    /// or of the parent for a child).
    pub(crate) fn set_state(&self, state: u8) {
        self.state
            .store(state, core::sync::atomic::Ordering::Release);
    }

    /// Allocates the data if it was registered lazily or released and is not allocated
    /// now (checked under the read lock, allocated under the write lock).
    #[cfg(not(loom))]
    fn allocate(&self) {
        if data_read(&self.data).value.is_none() {
            let mut slot = self.write_lock();
            slot.allocate();
        }
    }

    /// The data locked for reading, allocated first if it was registered lazily or
    /// released. The fast path, on allocated data, takes the read lock alone.
    fn read_lock(&self) -> DataReadGuard<'_, Slot<I>> {
        loop {
            let guard = data_read(&self.data);
            if guard.value.is_some() {
                return guard;
            }
            drop(guard);
            // Freed (lazy, released or taken): allocate under the write lock, then read
            // again. A release may free it again in between; then the loop allocates again.
            let mut slot = self.write_lock();
            if !slot.pending() {
                // Taken out (unregistered): nothing to allocate; the access fails on use.
                drop(slot);
                return data_read(&self.data);
            }
            slot.allocate();
        }
    }

    fn write_lock(&self) -> DataWriteGuard<'_, Slot<I>> {
        let guard = data_write(&self.data);
        self.bump_version();
        guard
    }

    /// The data may change: a fresh version number.
    fn bump_version(&self) {
        self.version
            .store(next_stamp(), core::sync::atomic::Ordering::Release);
    }

    /// Reads the data, allocating it first if it was registered lazily or released.
    pub(crate) fn read(&self) -> DataRef<'_, I> {
        DataRef(self.read_lock())
    }

    /// Writes the data, allocating it first if it was registered lazily or released.
    pub(crate) fn write(&self) -> DataMut<'_, I> {
        let mut slot = self.write_lock();
        slot.allocate();
        DataMut(slot)
    }

    /// Frees the data if its interface can reallocate it later with the same shape;
    /// returns whether memory was freed.
    ///
    /// Safe against a concurrent access (`loom_a_read_racing_a_release_…`,
    /// `loom_a_write_racing_a_release_…`): the data and its allocator share one lock, so
    /// an access that takes it first sees the data as it was (and a write to it is freed
    /// with it), and one that takes it after finds it freed and allocates it again,
    /// zeroed. The runtime only releases from a write-mode hook, exclusive with every
    /// other access of a correct flow (`distributed::release_after_pending`).
    pub(crate) fn release(&self) -> bool {
        let mut slot = self.write_lock();
        let Some(factory) = slot.value.as_ref().and_then(Interface::shape) else {
            return false;
        };
        *slot
            .init
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(factory);
        slot.value = None;
        true
    }

    /// Takes the data out (unregistration).
    pub(crate) fn take(&self) -> Option<I> {
        let mut slot = self.write_lock();
        slot.allocate();
        slot.value.take()
    }
}

/// Read access to a handle's data (inside a task, or while acquired).
pub struct DataRef<'a, I>(DataReadGuard<'a, Slot<I>>);

impl<I> Deref for DataRef<'_, I> {
    type Target = I;
    fn deref(&self) -> &I {
        // A cell's data is `None` under an access only after unregistration (after which
        // no access is scheduled): `read` and `write` allocate it first otherwise.
        self.0
            .value
            .as_ref()
            .expect("handle data accessed after unregistration")
    }
}

/// Write access to a handle's data (inside a task, or while acquired for writing).
pub struct DataMut<'a, I>(DataWriteGuard<'a, Slot<I>>);

impl<I> Deref for DataMut<'_, I> {
    type Target = I;
    fn deref(&self) -> &I {
        self.0
            .value
            .as_ref()
            .expect("handle data accessed after unregistration")
    }
}

impl<I> DerefMut for DataMut<'_, I> {
    fn deref_mut(&mut self) -> &mut I {
        self.0
            .value
            .as_mut()
            .expect("handle data accessed after unregistration")
    }
}

/// A handle with its interface erased: what the scheduler and the transfers see.
pub(crate) trait AnyCell: Send + Sync {
    /// The handle's id.
    fn id(&self) -> DataId;
    /// Bytes of the packed form (reads the data).
    fn packed_size(&self) -> usize;
    /// Bytes of the packed form as last seen (at registration or the last
    /// [`AnyCell::packed_size`]), without reading the data; 0 when never seen (a lazy
    /// handle). For the performance models' footprints.
    fn size_hint(&self) -> usize;
    /// Appends the packed form to `out` (a recycled buffer: no new allocation when it has
    /// room).
    fn pack_into(&self, out: &mut Vec<u8>);
    /// Replaces the data with `bytes`.
    fn unpack(&self, bytes: &[u8]) -> Result<(), DataError>;
    /// For typed access from codelets.
    fn as_any(&self) -> &dyn Any;
    /// The interface's type name (for errors).
    fn interface_name(&self) -> &'static str;
    /// Unique in the process, never reused.
    fn uid(&self) -> u64;
    /// Changes whenever write access to the data is granted.
    fn version(&self) -> u64;
    /// Frees the data's memory until its next use, when the interface allows it.
    fn release(&self) -> bool;
    /// The data's bytes to send in place, locked for reading until the buffer drops:
    /// `Some` when the interface allows it ([`Interface::in_place`]), is contiguous and
    /// nobody writes it now.
    fn lend_read(&self) -> Option<Box<dyn SendBuffer>>;
    /// The data's bytes to receive into in place, locked for writing until the buffer
    /// drops: `Some` when the interface allows it, is contiguous and nobody uses it now.
    fn lend_write(&self) -> Option<Box<dyn RecvBuffer>>;
    /// A new, temporary handle of the same shape (allocated on first use), when the
    /// interface can make one ([`Interface::shape`]).
    fn same_shape(&self) -> Option<Arc<dyn AnyCell>>;
    /// Whether the application may use the handle now: not while it is partitioned, nor
    /// once it was a child of an undone partition.
    fn usable(&self) -> Result<(), PartitionError>;
    /// The count of blocking transfers of this handle in flight without a task-graph
    /// node (`Context::wait_send`, `wait_recv`): the graph does not see them, so
    /// unregistration waits for this count to fall to 0 before it takes the data. `None`
    /// (the default) for a handle no such transfer uses.
    fn direct(&self) -> Option<&core::sync::atomic::AtomicU32> {
        None
    }
}

/// [`AnyCell::usable`] from a cell's id and flags.
fn usable(id: DataId, state: u8) -> Result<(), PartitionError> {
    if state & RETIRED != 0 {
        Err(PartitionError::Retired(id))
    } else if state & PARTITIONED != 0 {
        Err(PartitionError::Partitioned(id))
    } else {
        Ok(())
    }
}

/// Bytes of any length up to a bound: the runtime's own messages (the agreement check's
/// exchanges, master-slave mode's commands). While it waits for a message, its packed
/// size is the bound, which the engine takes for the receive's capacity.
pub(crate) struct Blob {
    pub(crate) bytes: Vec<u8>,
    pub(crate) capacity: usize,
}

impl Interface for Blob {
    fn packed_size(&self) -> usize {
        self.bytes.len().max(self.capacity)
    }

    fn pack(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
    }

    fn unpack(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        if bytes.len() > self.capacity {
            return Err(DataError::SizeMismatch {
                expected: self.capacity,
                got: bytes.len(),
            });
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
}

/// A temporary handle holding `bytes` (to send: capacity 0) or waiting for at most
/// `capacity` bytes (to receive into).
pub(crate) fn blob(bytes: Vec<u8>, capacity: usize) -> Arc<Cell<Blob>> {
    Arc::new(Cell::new(temporary_id(), Blob { bytes, capacity }))
}

/// Ids of temporary handles the runtime makes (reduction buffers): a range of their own,
/// above every id a context hands out.
// A plain atomic, not the `sync` shim: a static needs a `const` constructor, and this
// counter is no structure the loom models check.
static TEMPORARY_IDS: core::sync::atomic::AtomicU32 =
    core::sync::atomic::AtomicU32::new(TEMPORARY_BASE);

/// The first id of the temporary range ([`temporary_id`]).
pub(crate) const TEMPORARY_BASE: u32 = 0x8000_0000;

/// Whether `id` is a temporary handle's ([`temporary_id`]), not one a context handed out.
pub(crate) const fn is_temporary(id: DataId) -> bool {
    id.0 >= TEMPORARY_BASE
}

/// A new id for a handle the runtime makes for itself, in the temporary range.
pub(crate) fn temporary_id() -> DataId {
    DataId(TEMPORARY_IDS.fetch_add(1, core::sync::atomic::Ordering::SeqCst))
}

impl<I: Interface> AnyCell for Cell<I> {
    fn id(&self) -> DataId {
        self.id
    }

    fn packed_size(&self) -> usize {
        let size = self.read().packed_size();
        self.size.store(size, core::sync::atomic::Ordering::Relaxed);
        size
    }

    fn size_hint(&self) -> usize {
        self.size.load(core::sync::atomic::Ordering::Relaxed)
    }

    fn pack_into(&self, out: &mut Vec<u8>) {
        let data = self.read();
        if let Some(bytes) = data.as_bytes() {
            out.extend_from_slice(bytes);
            return;
        }
        out.reserve(data.packed_size());
        data.pack(out);
    }

    fn unpack(&self, bytes: &[u8]) -> Result<(), DataError> {
        let mut data = self.write();
        let expected = data.packed_size();
        if let Some(dst) = data.as_bytes_mut() {
            if dst.len() != bytes.len() {
                return Err(DataError::SizeMismatch {
                    expected,
                    got: bytes.len(),
                });
            }
            dst.copy_from_slice(bytes);
            return Ok(());
        }
        data.unpack(bytes)
    }

    #[cfg(not(loom))]
    fn lend_read(&self) -> Option<Box<dyn SendBuffer>> {
        self.allocate();
        // Freed again since (a racing release): `None`, and the transfer copies instead.
        let guard = try_read_owned(&self.data)?;
        let data = guard.value.as_ref()?;
        if data.in_place() != Some(InPlace::of::<I>()) || data.as_bytes().is_none() {
            return None;
        }
        Some(Box::new(LentData(guard)))
    }

    #[cfg(not(loom))]
    fn lend_write(&self) -> Option<Box<dyn RecvBuffer>> {
        let mut guard = try_write_owned(&self.data)?;
        self.bump_version();
        guard.allocate();
        let data = guard.value.as_mut()?;
        if data.in_place() != Some(InPlace::of::<I>()) || data.as_bytes_mut().is_none() {
            return None;
        }
        Some(Box::new(LentData(guard)))
    }

    #[cfg(loom)]
    fn lend_read(&self) -> Option<Box<dyn SendBuffer>> {
        None
    }

    #[cfg(loom)]
    fn lend_write(&self) -> Option<Box<dyn RecvBuffer>> {
        None
    }

    fn interface_name(&self) -> &'static str {
        core::any::type_name::<I>()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn uid(&self) -> u64 {
        self.uid
    }

    fn version(&self) -> u64 {
        self.version.load(core::sync::atomic::Ordering::Acquire)
    }

    fn release(&self) -> bool {
        Self::release(self)
    }

    fn same_shape(&self) -> Option<Arc<dyn AnyCell>> {
        let factory = self.read().shape()?;
        Some(Arc::new(Self::lazy(temporary_id(), factory)))
    }

    fn usable(&self) -> Result<(), PartitionError> {
        usable(self.id, self.state())
    }

    fn direct(&self) -> Option<&core::sync::atomic::AtomicU32> {
        Some(&self.direct)
    }
}

#[cfg(not(loom))]
impl<I: Interface> SendBuffer for LentData<OwnedReadGuard<Slot<I>>> {
    fn bytes(&self) -> &[u8] {
        // Checked contiguous when lent; the guard keeps writers out meanwhile.
        self.0
            .value
            .as_ref()
            .and_then(Interface::as_bytes)
            .unwrap_or_default()
    }
}

#[cfg(not(loom))]
impl<I: Interface> RecvBuffer for LentData<OwnedWriteGuard<Slot<I>>> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.0
            .value
            .as_mut()
            .and_then(Interface::as_bytes_mut)
            .unwrap_or_default()
    }
}
