//! Finding out, without panicking, whether this machine can run CUDA.
//!
//! `cudarc` loads its libraries on first use and **panics** when one is missing. Every
//! entry point of this crate therefore checks with [`libraries`] (which only tries to
//! `dlopen` each library) before the first call into a library, and turns a missing one
//! into a typed [`GpuError`].

use std::os::raw::c_int;

use cudarc::driver::result;

use crate::GpuError;

/// Which CUDA libraries this process can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Libraries {
    /// The driver, `libcuda.so` (installed with the NVIDIA driver).
    pub driver: bool,
    /// The run-time compiler, `libnvrtc.so` (CUDA toolkit).
    pub nvrtc: bool,
    /// `libcublas.so` (CUDA toolkit).
    pub cublas: bool,
    /// `libcusolver.so` (CUDA toolkit).
    pub cusolver: bool,
}

/// Tries to load each CUDA library (nothing else: no driver call is made).
pub fn libraries() -> Libraries {
    // SAFETY: each `is_culib_present` only `dlopen`s candidate library names and drops
    // the handle; loading a library runs its initialisers, which the CUDA libraries
    // allow at any time.
    unsafe {
        Libraries {
            driver: cudarc::driver::sys::is_culib_present(),
            nvrtc: cudarc::nvrtc::sys::is_culib_present(),
            cublas: cudarc::cublas::sys::is_culib_present(),
            cusolver: cudarc::cusolver::sys::is_culib_present(),
        }
    }
}

/// One CUDA device, as the driver describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// The device's number (its CUDA ordinal).
    pub ordinal: usize,
    /// The product name ("NVIDIA H200", ...).
    pub name: String,
    /// The compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Global memory, in bytes.
    pub total_mem: usize,
}

/// What [`probe`] found: the devices and the libraries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Every device, by ordinal (never empty).
    pub devices: Vec<DeviceProps>,
    /// The driver's CUDA version (`cuDriverGetVersion`: 12060 is CUDA 12.6).
    pub driver_version: i32,
    /// Which libraries can be loaded.
    pub libraries: Libraries,
}

impl DeviceInfo {
    /// How many devices there are.
    pub fn count(&self) -> usize {
        self.devices.len()
    }
}

/// The number of CUDA devices, with every way of having none as a typed error.
///
/// # Errors
/// [`GpuError::NoDriver`] when `libcuda` cannot be loaded; [`GpuError::NoDevice`] when
/// the driver reports none; [`GpuError::Driver`] when the driver fails to initialise.
pub fn device_count() -> Result<usize, GpuError> {
    // SAFETY: see `libraries`.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    // The library is present: from here on `cudarc` returns errors instead of panicking.
    result::init()?;
    let count = result::device::get_count()?;
    match usize::try_from(count) {
        Ok(0) | Err(_) => Err(GpuError::NoDevice),
        Ok(n) => Ok(n),
    }
}

/// Looks for CUDA devices and libraries; never panics.
///
/// # Errors
/// [`GpuError::NoDriver`], [`GpuError::NoDevice`] (see [`device_count`]), or
/// [`GpuError::Driver`] when a device cannot be queried.
pub fn probe() -> Result<DeviceInfo, GpuError> {
    let count = device_count()?;
    let mut devices = Vec::with_capacity(count);
    for ordinal in 0..count {
        let dev = result::device::get(ordinal as c_int)?;
        let name = result::device::get_name(dev)?;
        // SAFETY: `dev` is a device handle the driver just returned.
        let (total_mem, major, minor) = unsafe {
            use cudarc::driver::sys::CUdevice_attribute as A;
            (
                result::device::total_mem(dev)?,
                result::device::get_attribute(
                    dev,
                    A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                )?,
                result::device::get_attribute(
                    dev,
                    A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                )?,
            )
        };
        devices.push(DeviceProps {
            ordinal,
            name,
            compute_capability: (major, minor),
            total_mem,
        });
    }
    let mut driver_version: c_int = 0;
    // SAFETY: the driver library is loaded (checked by `device_count`); the call writes
    // one int through a valid pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }.result()?;
    Ok(DeviceInfo {
        devices,
        driver_version,
        libraries: libraries(),
    })
}
