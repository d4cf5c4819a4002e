//! One CUDA device: its context, its stream, and copies between host and device memory.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};

use crate::{GpuError, probe};

/// A CUDA device opened for work: its primary context and one stream, on which every
/// copy and kernel of this crate is ordered.
///
/// Copies are synchronous for the caller: [`Device::download_into`] returns once the
/// data is in host memory, [`Device::upload_into`] once the host buffer may be reused.
#[derive(Clone, Debug)]
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl Device {
    /// Opens device `ordinal` (its primary context and a new stream).
    ///
    /// # Errors
    /// [`GpuError::NoDriver`] or [`GpuError::NoDevice`] when there is no CUDA device (see
    /// [`probe::device_count`]), [`GpuError::DeviceOutOfRange`], or
    /// [`GpuError::Driver`].
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        let count = probe::device_count()?;
        if ordinal >= count {
            return Err(GpuError::DeviceOutOfRange {
                device: ordinal,
                count,
            });
        }
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        Ok(Self { ctx, stream })
    }

    /// The same device with a new stream of its own (another compute or copy stream).
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn with_new_stream(&self) -> Result<Self, GpuError> {
        Ok(Self {
            ctx: Arc::clone(&self.ctx),
            stream: self.ctx.new_stream()?,
        })
    }

    /// The device's number.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's product name.
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn name(&self) -> Result<String, GpuError> {
        Ok(self.ctx.name()?)
    }

    /// The `cudarc` context, for work beyond this crate's helpers.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's stream: everything this crate does on the device is ordered on it.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits until everything queued on the stream is done.
    ///
    /// # Errors
    /// [`GpuError::Driver`] (an earlier asynchronous failure is reported here).
    pub fn synchronize(&self) -> Result<(), GpuError> {
        Ok(self.stream.synchronize()?)
    }

    /// A zeroed device buffer of `len` elements.
    ///
    /// # Errors
    /// [`GpuError::Driver`] (out of memory).
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.alloc_zeros(len)?)
    }

    /// A new device buffer holding a copy of `host`.
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// Copies `host` into `dst`, of the same length.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when the lengths differ (nothing is copied);
    /// [`GpuError::Driver`].
    pub fn upload_into<T: DeviceRepr>(
        &self,
        host: &[T],
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        check_len(dst.len(), host.len())?;
        self.stream.memcpy_htod(host, dst)?;
        Ok(())
    }

    /// A host copy of `src`.
    ///
    /// # Errors
    /// [`GpuError::Driver`].
    pub fn download<T: DeviceRepr>(&self, src: &CudaSlice<T>) -> Result<Vec<T>, GpuError> {
        let v = self.stream.clone_dtoh(src)?;
        self.stream.synchronize()?;
        Ok(v)
    }

    /// Copies `src` into `host`, of the same length, and waits for the copy.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`] when the lengths differ (nothing is copied);
    /// [`GpuError::Driver`].
    pub fn download_into<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        host: &mut [T],
    ) -> Result<(), GpuError> {
        check_len(host.len(), src.len())?;
        self.stream.memcpy_dtoh(src, host)?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Copies device buffer `src` (possibly of another device) into `dst`, of the same
    /// length, on this device's stream.
    ///
    /// # Errors
    /// [`GpuError::LengthMismatch`]; [`GpuError::Driver`].
    pub fn copy<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        check_len(dst.len(), src.len())?;
        self.stream.memcpy_dtod(src, dst)?;
        Ok(())
    }
}

/// `cudarc` asserts (panics) on a length mismatch: check first.
pub(crate) fn check_len(expected: usize, got: usize) -> Result<(), GpuError> {
    if expected == got {
        Ok(())
    } else {
        Err(GpuError::LengthMismatch { expected, got })
    }
}
