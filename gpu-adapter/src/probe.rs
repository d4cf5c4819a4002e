//! Finding out, without panicking, whether this machine can run CUDA.
//!
//! `cudarc` loads its libraries on first use and **panics** when one is missing. Every
//! entry point of this crate therefore checks before the first call into a library, and
//! turns a missing one into a typed [`GpuError`]: [`libraries`] only says which load;
//! [`require`] says, for the libraries a program needs, which are missing, under which
//! names they were looked for, and which are present only under a name this build does
//! not load (a CUDA 13 `libcublas.so.13` with the CUDA 12 build: [`GpuError::UntriedLibrary`]
//! names the feature to build with).
//!
//! [`report()`] is the whole picture, printed as a small table by the examples'
//! `--probe`: for each of `libcuda`, `libnvrtc`, `libcublas`, `libcublasLt` and
//! `libcusolver`, the name `cudarc` will open, its file and its version; then the devices.
//!
//! ```no_run
//! use starling_gpu::probe::{self, Lib};
//!
//! let report = probe::report();
//! println!("{report}");
//! if let Err(e) = report.require(&[Lib::Cublas, Lib::Cusolver]) {
//!     eprintln!("{e}"); // names the library, the names tried, or the feature to build with
//! }
//! ```

use core::fmt;
use std::os::raw::c_int;

use cudarc::driver::result;

use crate::GpuError;

mod libs;
#[cfg(test)]
mod tests;

pub use libs::{ApiLevel, Lib, LibraryReport, Version, find};

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

/// Tries to load each CUDA library (nothing else: no driver call is made), under the names
/// `cudarc` tries. [`require`] says more about a missing one.
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

impl fmt::Display for DeviceInfo {
    /// One line per device: `device 0: NVIDIA H200, compute 9.0, 143771 MiB`, after the
    /// driver's version.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let driver = Version::from_cuda(self.driver_version)
            .map_or_else(|| self.driver_version.to_string(), |v| v.to_string());
        write!(f, "driver API {driver}, {} device(s)", self.count())?;
        for d in &self.devices {
            let (major, minor) = d.compute_capability;
            write!(
                f,
                "\n  device {}: {}, compute {major}.{minor}, {} MiB",
                d.ordinal,
                d.name,
                d.total_mem >> 20
            )?;
        }
        Ok(())
    }
}

/// Every CUDA library and device this process can use, as [`report()`] found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The API level of this build (which names `cudarc` tries).
    pub api: ApiLevel,
    /// One entry per library of [`Lib::ALL`], in that order.
    pub libraries: Vec<LibraryReport>,
    /// The devices ([`probe`]), or why there are none.
    pub devices: Result<DeviceInfo, GpuError>,
}

impl Report {
    /// What was found for `lib`.
    pub fn get(&self, lib: Lib) -> Option<&LibraryReport> {
        self.libraries.iter().find(|r| r.lib == lib)
    }

    /// Checks that every library of `libs` loads under a name `cudarc` tries.
    ///
    /// # Errors
    /// The first library that does not: [`GpuError::MissingLibrary`] or
    /// [`GpuError::UntriedLibrary`] (see [`LibraryReport::check`]).
    pub fn require(&self, libs: &[Lib]) -> Result<(), GpuError> {
        for &lib in libs {
            match self.get(lib) {
                Some(r) => r.check().map(drop)?,
                None => find(lib).check().map(drop)?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    /// A small table: one line per library (the name `cudarc` opens, the version, the
    /// file, or why it is missing), then the devices. No trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "starling-gpu built for the {} (feature `{}`)",
            self.api,
            self.api.gpu_feature()
        )?;
        let name_w = self
            .libraries
            .iter()
            .filter_map(|r| r.loaded.as_ref().map(String::len))
            .max()
            .unwrap_or(0)
            .max("not loaded".len());
        writeln!(
            f,
            "  {:<12} {:<name_w$}  {:<9} file",
            "library", "loaded as", "version"
        )?;
        for r in &self.libraries {
            let lib = r.lib.to_string();
            match (&r.loaded, r.check()) {
                (Some(name), _) => {
                    let version = r.version.map_or_else(|| "?".into(), |v| v.to_string());
                    let path = r
                        .path
                        .as_ref()
                        .map_or_else(|| "?".into(), |p| p.display().to_string());
                    write!(f, "  {lib:<12} {name:<name_w$}  {version:<9} {path}")?;
                    let (major, minor) = self.api.cuda_version();
                    let too_old = r.lib == Lib::Driver
                        && r.version
                            .is_some_and(|v| (v.major, v.minor) < (major, minor));
                    if too_old {
                        write!(f, " (too old: this build needs CUDA {major}.{minor})")?;
                    }
                    if !r.untried.is_empty() {
                        write!(f, " (also here: {}, not loaded)", r.untried.join(", "))?;
                    }
                }
                (None, Err(GpuError::UntriedLibrary { found, needs, .. })) => write!(
                    f,
                    "  {lib:<12} {:<name_w$}  {:<9} only {found}, a name this build does not load: build for the {needs} with {}",
                    "not loaded",
                    "-",
                    needs.how_to_build()
                )?,
                (None, _) => write!(
                    f,
                    "  {lib:<12} {:<name_w$}  {:<9} not found ({} names tried)",
                    "not loaded",
                    "-",
                    r.tried().len()
                )?,
            }
            writeln!(f)?;
        }
        match &self.devices {
            Ok(info) => write!(f, "  {info}"),
            Err(e) => write!(f, "  no device: {e}"),
        }
    }
}

/// Looks for every library of [`Lib::ALL`] ([`find`]) and every device ([`probe`]); never
/// panics, never fails: what is missing is in the report.
pub fn report() -> Report {
    Report {
        api: ApiLevel::BUILT,
        libraries: Lib::ALL.into_iter().map(find).collect(),
        devices: probe(),
    }
}

/// Checks that every library of `libs` loads under a name this build's `cudarc` tries,
/// without reading versions; for a program to call before it relies on them (the
/// examples' `--gpu` asks for cuBLAS and cuSOLVER).
///
/// # Errors
/// [`GpuError::MissingLibrary`] naming the first missing library and every name tried;
/// [`GpuError::UntriedLibrary`] when it is only present under a name this build does not
/// load, with the feature to build with instead.
pub fn require(libs: &[Lib]) -> Result<(), GpuError> {
    for &lib in libs {
        LibraryReport::lookup(lib, ApiLevel::BUILT, libs::can_load)
            .check()
            .map(drop)?;
    }
    Ok(())
}
