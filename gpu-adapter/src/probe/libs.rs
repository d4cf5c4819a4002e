//! Which CUDA libraries load, under which name, from which file, at which version.
//!
//! `cudarc` opens each library under the first of a fixed list of names that loads (its
//! `get_lib_name_candidates`, which depends on the API level it was built for). This
//! module tries the same names in the same order, so the name it reports is the one
//! `cudarc` will open, and then the versioned names `libX.so.13`, `.so.12` and `.so.11`
//! that the list may lack (the CUDA 12 list never has `.so.13`), so that a library present
//! only under a name this build does not try is diagnosed as such
//! ([`GpuError::UntriedLibrary`]) instead of being "missing".
//!
//! The name logic ([`LibraryReport::lookup`]) takes the loader as a closure, so it is
//! tested without any CUDA library.

use core::fmt;
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::os::raw::c_int;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::GpuError;

/// A CUDA library that this crate loads, or that one of them needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Lib {
    /// The driver, `libcuda` (installed with the NVIDIA driver, not with the toolkit).
    Driver,
    /// The run-time compiler, `libnvrtc`: compiles the stencil kernels (without it the
    /// shipped PTX is loaded instead).
    Nvrtc,
    /// `libcublas`: GEMM, SYRK and TRSM on tiles.
    Cublas,
    /// `libcublasLt`, which `libcublas` links to (the loader opens it with cuBLAS, under
    /// the name cuBLAS was linked with; this crate never opens it itself).
    CublasLt,
    /// `libcusolver`: POTRF on tiles. Its major version is 12 in CUDA 12 **and** in
    /// CUDA 13.
    Cusolver,
}

impl Lib {
    /// Every library, in the order [`report`](super::report()) lists them.
    pub const ALL: [Self; 5] = [
        Self::Driver,
        Self::Nvrtc,
        Self::Cublas,
        Self::CublasLt,
        Self::Cusolver,
    ];

    /// The names `cudarc` builds the file names from (`"cublas"` gives `libcublas.so`,
    /// `libcublas.so.12`, ...); the driver's second one, `nvcuda`, is its Windows name.
    pub fn stems(self) -> &'static [&'static str] {
        match self {
            Self::Driver => &["cuda", "nvcuda"],
            Self::Nvrtc => &["nvrtc"],
            Self::Cublas => &["cublas"],
            Self::CublasLt => &["cublasLt"],
            Self::Cusolver => &["cusolver"],
        }
    }

    /// The product's name: "CUDA driver", "NVRTC", "cuBLAS", "cuBLASLt", "cuSOLVER".
    pub fn product(self) -> &'static str {
        match self {
            Self::Driver => "CUDA driver",
            Self::Nvrtc => "NVRTC",
            Self::Cublas => "cuBLAS",
            Self::CublasLt => "cuBLASLt",
            Self::Cusolver => "cuSOLVER",
        }
    }

    /// The versioned names this module tries besides `cudarc`'s: `libX.so.13`,
    /// `libX.so.12`, `libX.so.11` (on Linux), whether or not `cudarc` tries them.
    pub fn versioned_names(self) -> Vec<String> {
        let stem = self.stems()[0];
        VERSIONED_MAJORS
            .iter()
            .map(|m| format!("{DLL_PREFIX}{stem}{DLL_SUFFIX}.{m}"))
            .collect()
    }
}

/// The majors of [`Lib::versioned_names`], newest first.
const VERSIONED_MAJORS: [u32; 3] = [13, 12, 11];

impl fmt::Display for Lib {
    /// The library's file name without suffix: `libcublas`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DLL_PREFIX}{}", self.stems()[0])
    }
}

/// The CUDA API level this crate is built for: `cudarc`'s version feature, chosen by the
/// feature `cuda-12` (the default) or `cuda-13` of `starling-gpu` (`cuda` or `cuda-13` of
/// `starling`). It fixes the names `cudarc` loads and the oldest driver that works.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ApiLevel {
    /// CUDA 12.6 (`cudarc`'s `cuda-12060`): a driver of CUDA 12.6 or newer; loads
    /// `libX.so`, `libX.so.12`, `libX.so.11`, ... and never `libX.so.13`.
    Cuda12,
    /// CUDA 13.0 (`cudarc`'s `cuda-13000`): a driver of CUDA 13.0 or newer; loads
    /// `libX.so`, `libX.so.13`, `libX.so.12`, ...
    Cuda13,
}

impl ApiLevel {
    /// The level this build uses.
    #[cfg(not(feature = "cuda-13"))]
    pub const BUILT: Self = Self::Cuda12;
    /// The level this build uses.
    #[cfg(feature = "cuda-13")]
    pub const BUILT: Self = Self::Cuda13;

    /// The CUDA version `cudarc` is built against: (12, 6) or (13, 0).
    pub fn cuda_version(self) -> (u32, u32) {
        match self {
            Self::Cuda12 => (12, 6),
            Self::Cuda13 => (13, 0),
        }
    }

    /// The `starling-gpu` feature that selects it: `cuda-12` or `cuda-13`.
    pub fn gpu_feature(self) -> &'static str {
        match self {
            Self::Cuda12 => "cuda-12",
            Self::Cuda13 => "cuda-13",
        }
    }

    /// The `starling` feature that selects it: `cuda` or `cuda-13`.
    pub fn starling_feature(self) -> &'static str {
        match self {
            Self::Cuda12 => "cuda",
            Self::Cuda13 => "cuda-13",
        }
    }

    /// How to build for this level, in words: "the feature `cuda-13` (of starling, or of
    /// starling-gpu with `--no-default-features`)".
    pub fn how_to_build(self) -> &'static str {
        match self {
            Self::Cuda12 => "starling's feature `cuda` (starling-gpu's default, `cuda-12`)",
            Self::Cuda13 => {
                "the feature `cuda-13` (of starling, or of starling-gpu with `--no-default-features`)"
            }
        }
    }

    /// The level whose names include `libX.so.<major>` first: 13 gives
    /// [`Cuda13`](Self::Cuda13), 12 and older [`Cuda12`](Self::Cuda12).
    pub fn for_major(major: u32) -> Self {
        if major >= 13 {
            Self::Cuda13
        } else {
            Self::Cuda12
        }
    }

    /// The names `cudarc` (0.19) built at this level tries for `lib`, in its order,
    /// without repeats: the same list as its `get_lib_name_candidates` (a test checks it
    /// for the built level).
    pub fn candidates(self, lib: Lib) -> Vec<String> {
        let (major, minor) = self.cuda_version();
        let w = if cfg!(target_pointer_width = "32") {
            "32"
        } else {
            "64"
        };
        let (p, s) = (DLL_PREFIX, DLL_SUFFIX);
        let mut names: Vec<String> = Vec::new();
        for stem in lib.stems() {
            for name in [
                format!("{p}{stem}{s}"),
                format!("{p}{stem}{w}{s}"),
                format!("{p}{stem}{w}_{major}{s}"),
                format!("{p}{stem}{w}_{major}{minor}{s}"),
                format!("{p}{stem}{w}_{major}{minor}_0{s}"),
                format!("{p}{stem}{w}_{major}0_{minor}{s}"),
                format!("{p}{stem}{w}_10{s}"),
                format!("{p}{stem}{w}_11{s}"),
                format!("{p}{stem}{w}_12{s}"),
                format!("{p}{stem}{w}_{major}0_0{s}"),
                format!("{p}{stem}{w}_9{s}"),
                format!("{p}{stem}{s}.{major}"),
                format!("{p}{stem}{s}.12"),
                format!("{p}{stem}{s}.11"),
                format!("{p}{stem}{s}.10"),
                format!("{p}{stem}{s}.9"),
                format!("{p}{stem}{s}.1"),
            ] {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

impl fmt::Display for ApiLevel {
    /// `CUDA 12.6 API`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.cuda_version();
        write!(f, "CUDA {major}.{minor} API")
    }
}

/// A library's version, as the library reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version {
    /// Major version (13 for CUDA 13's cuBLAS; 12 for CUDA 13's cuSOLVER).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level, where the library reports one.
    pub patch: Option<u32>,
}

impl Version {
    /// A version in the driver's encoding, `1000 · major + 10 · minor` (13000 is 13.0);
    /// `None` for a negative number.
    pub fn from_cuda(v: i32) -> Option<Self> {
        let v = u32::try_from(v).ok()?;
        Some(Self {
            major: v / 1000,
            minor: v % 1000 / 10,
            patch: None,
        })
    }
}

impl fmt::Display for Version {
    /// `13.0` or `13.0.2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        match self.patch {
            Some(p) => write!(f, ".{p}"),
            None => Ok(()),
        }
    }
}

/// What was found for one library: the name `cudarc` will open, names it will not try,
/// the file and the version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryReport {
    /// Which library.
    pub lib: Lib,
    /// The API level whose names were tried.
    pub api: ApiLevel,
    /// The first of `api`'s [candidates](ApiLevel::candidates) that loads: the name
    /// `cudarc` opens. `None`: `cudarc` cannot load the library.
    pub loaded: Option<String>,
    /// Versioned names ([`Lib::versioned_names`]) that load but are not among `api`'s
    /// candidates: `libcublas.so.13` in a CUDA 12 build.
    pub untried: Vec<String>,
    /// The file behind [`loaded`](Self::loaded), links resolved, where it could be found.
    pub path: Option<PathBuf>,
    /// The library's version, where it loaded and reports one.
    pub version: Option<Version>,
}

impl LibraryReport {
    /// Which names of `lib` load at level `api`, `can_load` answering for each name: the
    /// first candidate that loads (the others are not asked), and every versioned name
    /// outside the candidates that loads. No path or version (see [`find`]).
    pub fn lookup(lib: Lib, api: ApiLevel, mut can_load: impl FnMut(&str) -> bool) -> Self {
        let candidates = api.candidates(lib);
        let loaded = candidates.iter().find(|n| can_load(n)).cloned();
        let untried = lib
            .versioned_names()
            .into_iter()
            .filter(|n| !candidates.contains(n) && can_load(n))
            .collect();
        Self {
            lib,
            api,
            loaded,
            untried,
            path: None,
            version: None,
        }
    }

    /// Every name tried: `api`'s candidates, then the versioned names outside them.
    pub fn tried(&self) -> Vec<String> {
        let mut names = self.api.candidates(self.lib);
        for n in self.lib.versioned_names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    /// The name `cudarc` will open.
    ///
    /// # Errors
    /// [`GpuError::UntriedLibrary`] when the library loads only under a name this level
    /// does not try; [`GpuError::MissingLibrary`] when it loads under no name.
    pub fn check(&self) -> Result<&str, GpuError> {
        if let Some(name) = &self.loaded {
            return Ok(name);
        }
        match self.untried.first() {
            Some(found) => Err(GpuError::UntriedLibrary {
                lib: self.lib,
                found: found.clone(),
                built: self.api,
                needs: major_of(found).map_or(self.api, ApiLevel::for_major),
            }),
            None => Err(GpuError::MissingLibrary {
                lib: self.lib,
                tried: self.tried(),
            }),
        }
    }
}

/// The major version at the end of a versioned name (`libcublas.so.13` gives 13).
fn major_of(name: &str) -> Option<u32> {
    name.rsplit_once(&format!("{DLL_SUFFIX}."))?.1.parse().ok()
}

/// Whether `name` loads (it is unloaded again, unless something else holds it).
pub(super) fn can_load(name: &str) -> bool {
    open(name).is_some()
}

fn open(name: &str) -> Option<Library> {
    // SAFETY: loading a CUDA library runs its initialisers, which the CUDA libraries allow
    // at any time; `cudarc` loads them the same way.
    unsafe { Library::new(name) }.ok()
}

/// Looks `lib` up on this machine for this build ([`ApiLevel::BUILT`]), and, where it
/// loads, reads its version and finds its file. Never panics.
pub fn find(lib: Lib) -> LibraryReport {
    let mut report = LibraryReport::lookup(lib, ApiLevel::BUILT, can_load);
    if let Some(handle) = report.loaded.as_deref().and_then(open) {
        let (version, addr) = version_of(lib, &handle);
        report.version = version;
        report.path = addr.and_then(file_at);
    }
    report
}

/// The version `lib` reports through `handle`, and the address of the function that said
/// so (to find the file it lives in).
fn version_of(lib: Lib, handle: &Library) -> (Option<Version>, Option<usize>) {
    type Int = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Pair = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
    type Property = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    type Size = unsafe extern "C" fn() -> usize;
    let get = |v: c_int| u32::try_from(v).ok();
    // SAFETY (every block below): each symbol is looked up under its C name with the
    // signature of the library's header (`cuDriverGetVersion(int*)`,
    // `nvrtcVersion(int*, int*)`, `cublasGetProperty(libraryPropertyType, int*)`,
    // `cusolverGetProperty(libraryPropertyType, int*)`, `size_t cublasLtGetVersion()`);
    // none needs initialisation, each writes only through the valid pointers given, and
    // the handle outlives the calls.
    match lib {
        Lib::Driver => {
            let Ok(f) = (unsafe { handle.get::<Int>(b"cuDriverGetVersion\0") }) else {
                return (None, None);
            };
            let mut v: c_int = 0;
            let ok = unsafe { f(&mut v) } == 0;
            (
                ok.then(|| Version::from_cuda(v)).flatten(),
                Some(*f as usize),
            )
        }
        Lib::Nvrtc => {
            let Ok(f) = (unsafe { handle.get::<Pair>(b"nvrtcVersion\0") }) else {
                return (None, None);
            };
            let (mut major, mut minor): (c_int, c_int) = (0, 0);
            let ok = unsafe { f(&mut major, &mut minor) } == 0;
            let v = match (ok, get(major), get(minor)) {
                (true, Some(major), Some(minor)) => Some(Version {
                    major,
                    minor,
                    patch: None,
                }),
                _ => None,
            };
            (v, Some(*f as usize))
        }
        Lib::Cublas | Lib::Cusolver => {
            let symbol: &[u8] = if lib == Lib::Cublas {
                b"cublasGetProperty\0"
            } else {
                b"cusolverGetProperty\0"
            };
            let Ok(f) = (unsafe { handle.get::<Property>(symbol) }) else {
                return (None, None);
            };
            // libraryPropertyType: MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2.
            let property = |p: c_int| {
                let mut v: c_int = 0;
                (unsafe { f(p, &mut v) } == 0).then_some(v).and_then(get)
            };
            let v = match (property(0), property(1)) {
                (Some(major), Some(minor)) => Some(Version {
                    major,
                    minor,
                    patch: property(2),
                }),
                _ => None,
            };
            (v, Some(*f as usize))
        }
        Lib::CublasLt => {
            let Ok(f) = (unsafe { handle.get::<Size>(b"cublasLtGetVersion\0") }) else {
                return (None, None);
            };
            // CUBLASLT_VERSION: 10000 · major + 100 · minor + patch.
            let v = u32::try_from(unsafe { f() }).ok().map(|v| Version {
                major: v / 10000,
                minor: v % 10000 / 100,
                patch: Some(v % 100),
            });
            (v, Some(*f as usize))
        }
    }
}

/// The file mapped at `addr` in this process, from `/proc/self/maps` (Linux only).
fn file_at(addr: usize) -> Option<PathBuf> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    mapped_file(&maps, addr)
}

/// The file of the mapping that holds `addr`, in the text of a `/proc/<pid>/maps`
/// (`start-end perms offset dev inode path`, one mapping a line).
pub(super) fn mapped_file(maps: &str, addr: usize) -> Option<PathBuf> {
    maps.lines().find_map(|line| {
        let (range, mut rest) = line.split_once(' ')?;
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        if !(lo..hi).contains(&addr) {
            return None;
        }
        // Skip perms, offset, dev and inode; the path is the rest of the line.
        for _ in 0..4 {
            rest = rest.trim_start().split_once(' ')?.1;
        }
        let path = rest.trim();
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        path.starts_with('/').then(|| Path::new(path).to_path_buf())
    })
}
