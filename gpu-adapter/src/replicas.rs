//! Memory nodes and the replicas of one datum: a host copy (node 0, main memory) and one
//! buffer per device (node `d + 1` for device `d`), kept coherent by the core's
//! [`coherence::Replicas`](starling_core::coherence::Replicas) state machine.
//!
//! [`Replicated`] holds the device buffers and the state; the host copy stays where the
//! datum lives (a handle's contiguous data) and is passed in by each call that may read
//! or write it. Every decision — fetch or not, from which node, which copies became
//! stale — is the core's; this layer only performs the copies through a [`Backend`]:
//! [`Devices`] for CUDA, or any other implementation (the tests use one in host memory,
//! so the layer is tested without a GPU).

use core::marker::PhantomData;

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use starling_core::AccessMode;
use starling_core::coherence::{BeforeSend, Fetch, MemNode, Replicas};

use crate::device::check_len;
use crate::{Device, GpuError};

/// The most memory nodes a datum can have: main memory and 16 devices.
pub const MAX_NODES: usize = 17;

/// Performs copies between memory nodes for [`Replicated`].
pub trait Backend<T> {
    /// A buffer on a device node.
    type Buffer;

    /// Memory nodes, main memory included (at most [`MAX_NODES`]).
    fn nodes(&self) -> usize;

    /// A new buffer of `len` elements on device node `node` (never main memory).
    ///
    /// # Errors
    /// The backend's failure (out of memory, a bad node).
    fn alloc(&self, node: MemNode, len: usize) -> Result<Self::Buffer, GpuError>;

    /// Copies `host` into `dst` (same length).
    ///
    /// # Errors
    /// The backend's failure.
    fn upload(&self, host: &[T], dst: &mut Self::Buffer) -> Result<(), GpuError>;

    /// Copies `src` into `host` (same length); done when it returns.
    ///
    /// # Errors
    /// The backend's failure.
    fn download(&self, src: &Self::Buffer, host: &mut [T]) -> Result<(), GpuError>;

    /// Copies `src` into `dst` (same length), possibly between devices.
    ///
    /// # Errors
    /// The backend's failure.
    fn copy(&self, src: &Self::Buffer, dst: &mut Self::Buffer) -> Result<(), GpuError>;
}

/// The CUDA devices of a process as memory nodes 1, 2, ... ([`Backend`] over `cudarc`).
#[derive(Clone, Debug)]
pub struct Devices(pub Vec<Device>);

impl Devices {
    /// The memory node of device `d` (its position in the list).
    pub fn node(d: usize) -> MemNode {
        MemNode(u8::try_from(d + 1).unwrap_or(u8::MAX))
    }

    fn device(&self, node: MemNode) -> Result<&Device, GpuError> {
        node.index()
            .checked_sub(1)
            .and_then(|d| self.0.get(d))
            .ok_or_else(|| GpuError::DeviceOutOfRange {
                device: node.index().wrapping_sub(1),
                count: self.0.len(),
            })
    }
}

impl<T: DeviceRepr + ValidAsZeroBits> Backend<T> for Devices {
    type Buffer = CudaSlice<T>;

    fn nodes(&self) -> usize {
        (self.0.len() + 1).min(MAX_NODES)
    }

    fn alloc(&self, node: MemNode, len: usize) -> Result<CudaSlice<T>, GpuError> {
        self.device(node)?.alloc_zeros(len)
    }

    fn upload(&self, host: &[T], dst: &mut CudaSlice<T>) -> Result<(), GpuError> {
        check_len(dst.len(), host.len())?;
        let stream = dst.stream().clone();
        stream.memcpy_htod(host, dst)?;
        Ok(())
    }

    fn download(&self, src: &CudaSlice<T>, host: &mut [T]) -> Result<(), GpuError> {
        check_len(host.len(), src.len())?;
        let stream = src.stream().clone();
        stream.memcpy_dtoh(src, host)?;
        stream.synchronize()?;
        Ok(())
    }

    fn copy(&self, src: &CudaSlice<T>, dst: &mut CudaSlice<T>) -> Result<(), GpuError> {
        check_len(dst.len(), src.len())?;
        let stream = dst.stream().clone();
        stream.memcpy_dtod(src, dst)?;
        Ok(())
    }
}

/// One datum's device buffers and their coherence with the host copy.
///
/// Pair each `acquire_*` with a [`release`](Self::release) of the same node and mode.
/// The host copy is passed to every call that may copy to or from it; it must always be
/// the same data, of [`len`](Self::len) elements.
#[derive(Debug)]
pub struct Replicated<T, Buf> {
    state: Replicas<MAX_NODES>,
    /// Index = memory node; entry 0 (main memory) is never used.
    buffers: Vec<Option<Buf>>,
    len: usize,
    _elements: PhantomData<fn(T) -> T>,
}

impl<T, Buf> Replicated<T, Buf> {
    /// A datum of `len` elements whose only valid copy is the host copy.
    pub fn new(len: usize) -> Self {
        Self {
            state: Replicas::new(),
            buffers: Vec::new(),
            len,
            _elements: PhantomData,
        }
    }

    /// Elements of the datum.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the datum has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The coherence state (which nodes are valid, held, fetching).
    pub fn state(&self) -> &Replicas<MAX_NODES> {
        &self.state
    }

    /// The buffer on device node `node`, if one is allocated (valid or not).
    pub fn buffer(&self, node: MemNode) -> Option<&Buf> {
        self.buffers.get(node.index()).and_then(Option::as_ref)
    }

    /// Bytes of device memory this datum holds, for `size_of::<T>()`-byte elements.
    pub fn device_bytes(&self) -> usize {
        self.buffers.iter().flatten().count() * self.len * size_of::<T>()
    }

    fn slot<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        node: MemNode,
    ) -> Result<&mut Buf, GpuError> {
        let i = node.index();
        if i == 0 || i >= backend.nodes() {
            return Err(GpuError::DeviceOutOfRange {
                device: i.wrapping_sub(1),
                count: backend.nodes().saturating_sub(1),
            });
        }
        if self.buffers.len() <= i {
            self.buffers.resize_with(i + 1, || None);
        }
        if self.buffers[i].is_none() {
            self.buffers[i] = Some(backend.alloc(node, self.len)?);
        }
        self.buffers[i]
            .as_mut()
            .ok_or_else(|| GpuError::Driver("a buffer vanished".into()))
    }

    /// Performs `fetch` and reports its end (or its failure) to the state machine.
    fn perform<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        fetch: Fetch,
        host: HostCopy<'_, T>,
    ) -> Result<(), GpuError> {
        let done = self.copy(backend, fetch, host);
        match done {
            Ok(()) => {
                // The stale copies keep their buffers (reused by the next fetch); only
                // `evict` frees device memory.
                let _stale = self.state.handle_transfer_done(fetch)?;
                Ok(())
            }
            Err(e) => {
                self.state.handle_transfer_failed(fetch)?;
                Err(e)
            }
        }
    }

    fn copy<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        fetch: Fetch,
        host: HostCopy<'_, T>,
    ) -> Result<(), GpuError> {
        let (from, to) = (fetch.from, fetch.to);
        if let Some(h) = host.len() {
            check_len(self.len, h)?;
        }
        match (from.is_main_ram(), to.is_main_ram(), host) {
            (true, false, HostCopy::Read(h)) => backend.upload(h, self.slot(backend, to)?),
            (true, false, HostCopy::Write(h)) => backend.upload(h, self.slot(backend, to)?),
            (false, true, HostCopy::Write(h)) => {
                let src = self
                    .buffer(from)
                    .ok_or_else(|| GpuError::Driver(format!("no buffer on valid {from}")))?;
                backend.download(src, h)
            }
            (false, false, _) => {
                self.slot(backend, to)?;
                let (lo, hi) = self.buffers.split_at_mut(from.index().max(to.index()));
                let (src, dst) = if from < to {
                    (lo[from.index()].as_ref(), hi[0].as_mut())
                } else {
                    (hi[0].as_ref(), lo[to.index()].as_mut())
                };
                match (src, dst) {
                    (Some(s), Some(d)) => backend.copy(s, d),
                    _ => Err(GpuError::Driver(format!("no buffer for the {fetch}"))),
                }
            }
            _ => Err(GpuError::Driver(format!(
                "the {fetch} needs the host copy writable"
            ))),
        }
    }

    /// Acquires the replica on device node `node` for `mode`, fetching the value (from the
    /// host copy `host` or another device) when the node is not valid; returns the
    /// device buffer.
    ///
    /// # Errors
    /// [`GpuError::Coherence`] when the state machine refuses (a conflicting acquisition,
    /// a read with no valid copy); [`GpuError::DeviceOutOfRange`] for main memory or a
    /// node the backend does not have; the backend's error when a copy fails (the
    /// acquisition is then released).
    pub fn acquire_device<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        node: MemNode,
        mode: AccessMode,
        host: &[T],
    ) -> Result<&mut Buf, GpuError> {
        self.slot(backend, node)?;
        let a = self.state.acquire(node, mode)?;
        if let Some(fetch) = a.fetch {
            if let Err(e) = self.perform(backend, fetch, HostCopy::Read(host)) {
                let _ = self.state.release(node, mode);
                return Err(e);
            }
        }
        // A `wait` cannot happen here: this layer completes every copy before returning.
        self.slot(backend, node)
    }

    /// Acquires the host copy for `mode`: when it is not valid, the value is copied into
    /// `host` from a device first.
    ///
    /// # Errors
    /// As [`acquire_device`](Self::acquire_device).
    pub fn acquire_host<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        mode: AccessMode,
        host: &mut [T],
    ) -> Result<(), GpuError> {
        let a = self.state.acquire(MemNode::MAIN_RAM, mode)?;
        if let Some(fetch) = a.fetch {
            if let Err(e) = self.perform(backend, fetch, HostCopy::Write(host)) {
                let _ = self.state.release(MemNode::MAIN_RAM, mode);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Releases an acquisition made by `acquire_device` or `acquire_host`.
    ///
    /// # Errors
    /// [`GpuError::Coherence`] when no such acquisition is held.
    pub fn release(&mut self, node: MemNode, mode: AccessMode) -> Result<(), GpuError> {
        Ok(self.state.release(node, mode)?)
    }

    /// Before an MPI send: makes the host copy valid (staging it from a device when it is
    /// not) so that `host` can be sent.
    ///
    /// # Errors
    /// As [`acquire_host`](Self::acquire_host).
    pub fn before_send<B: Backend<T, Buffer = Buf>>(
        &mut self,
        backend: &B,
        host: &mut [T],
    ) -> Result<BeforeSend, GpuError> {
        let where_from = self.state.before_send()?;
        self.acquire_host(backend, AccessMode::R, host)?;
        self.release(MemNode::MAIN_RAM, AccessMode::R)?;
        Ok(where_from)
    }

    /// The host copy was overwritten outside this layer (an MPI receive, a CPU task): it
    /// becomes the only valid copy.
    ///
    /// # Errors
    /// [`GpuError::Coherence`] while an acquisition is held.
    pub fn host_written(&mut self) -> Result<(), GpuError> {
        let _stale = self.state.after_receive()?;
        Ok(())
    }

    /// Lends the buffer of device node `node` out (to a kernel that needs several
    /// buffers at once); [`give_back`](Self::give_back) must return it before the node is
    /// released. `None` when the node has no buffer.
    pub fn lend(&mut self, node: MemNode) -> Option<Buf> {
        self.buffers.get_mut(node.index()).and_then(Option::take)
    }

    /// Returns a buffer [`lend`](Self::lend) took out.
    pub fn give_back(&mut self, node: MemNode, buf: Buf) {
        let i = node.index();
        if self.buffers.len() <= i {
            self.buffers.resize_with(i + 1, || None);
        }
        self.buffers[i] = Some(buf);
    }

    /// Frees the buffer on device node `node`; returns it (for reuse) when there was one.
    ///
    /// # Errors
    /// [`GpuError::Coherence`] when the node holds the only valid copy (acquire the host
    /// copy first) or is in use.
    pub fn evict(&mut self, node: MemNode) -> Result<Option<Buf>, GpuError> {
        self.state.evict(node)?;
        Ok(self.buffers.get_mut(node.index()).and_then(Option::take))
    }
}

/// The host copy as a copy may use it.
#[derive(Debug)]
enum HostCopy<'a, T> {
    Read(&'a [T]),
    Write(&'a mut [T]),
}

impl<T> HostCopy<'_, T> {
    fn len(&self) -> Option<usize> {
        match self {
            Self::Read(h) => Some(h.len()),
            Self::Write(h) => Some(h.len()),
        }
    }
}

#[cfg(test)]
mod tests;
