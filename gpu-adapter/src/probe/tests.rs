//! The library-name logic, with the loader replaced by a list of names that "load": no
//! CUDA library is needed.

use std::path::{Path, PathBuf};

use super::libs::mapped_file;
use super::{ApiLevel, Lib, LibraryReport, Report, Version};
use crate::GpuError;

/// A loader that loads exactly `present`, recording every name asked.
fn loader<'a>(present: &'a [&'a str], asked: &'a mut Vec<String>) -> impl FnMut(&str) -> bool {
    move |name| {
        asked.push(name.to_owned());
        present.contains(&name)
    }
}

#[test]
fn the_candidates_are_cudarcs_for_the_built_level() {
    for lib in Lib::ALL {
        let mut want: Vec<String> = Vec::new();
        for stem in lib.stems() {
            for n in cudarc::get_lib_name_candidates(stem) {
                if !want.contains(&n) {
                    want.push(n);
                }
            }
        }
        assert_eq!(ApiLevel::BUILT.candidates(lib), want, "{lib}");
    }
}

#[test]
fn cuda_12_never_tries_so_13_and_cuda_13_tries_it_before_so_12() {
    let c12 = ApiLevel::Cuda12.candidates(Lib::Cublas);
    assert_eq!(c12[0], "libcublas.so");
    assert!(!c12.iter().any(|n| n == "libcublas.so.13"));
    assert!(c12.iter().any(|n| n == "libcublas.so.12"));
    let c13 = ApiLevel::Cuda13.candidates(Lib::Cublas);
    let at = |n: &str| c13.iter().position(|c| c == n).unwrap();
    assert!(at("libcublas.so") < at("libcublas.so.13"));
    assert!(at("libcublas.so.13") < at("libcublas.so.12"));
    assert!(at("libcublas.so.12") < at("libcublas.so.11"));
    // No name twice (cudarc's own list has `.so.12` twice at the CUDA 12 level).
    for c in [&c12, &c13] {
        let mut sorted = c.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), c.len());
    }
    // The driver's soname `.so.1` is tried at both levels.
    for api in [ApiLevel::Cuda12, ApiLevel::Cuda13] {
        assert!(
            api.candidates(Lib::Driver)
                .contains(&"libcuda.so.1".to_owned())
        );
    }
}

#[test]
fn the_first_candidate_that_loads_wins_and_later_ones_are_not_asked() {
    let present = ["libcublas.so.12", "libcublas.so"];
    let mut asked = Vec::new();
    let r = LibraryReport::lookup(Lib::Cublas, ApiLevel::Cuda12, loader(&present, &mut asked));
    assert_eq!(r.loaded.as_deref(), Some("libcublas.so"));
    assert_eq!(r.check(), Ok("libcublas.so"));
    assert!(r.untried.is_empty());
    // Only the first candidate, then the one versioned name outside the list (.so.13).
    assert_eq!(asked, ["libcublas.so", "libcublas.so.13"]);
}

#[test]
fn a_versioned_name_wins_when_there_is_no_unversioned_link() {
    let present = ["libnvrtc.so.12"];
    let mut asked = Vec::new();
    let r = LibraryReport::lookup(Lib::Nvrtc, ApiLevel::Cuda12, loader(&present, &mut asked));
    assert_eq!(r.check(), Ok("libnvrtc.so.12"));
    let present = ["libnvrtc.so.13", "libnvrtc.so.12"];
    let mut asked = Vec::new();
    let r = LibraryReport::lookup(Lib::Nvrtc, ApiLevel::Cuda13, loader(&present, &mut asked));
    assert_eq!(r.check(), Ok("libnvrtc.so.13"));
    assert!(r.untried.is_empty(), "CUDA 13 tries every versioned name");
}

#[test]
fn a_library_only_under_so_13_in_a_cuda_12_build_names_the_feature_to_build_with() {
    let present = ["libcublas.so.13"];
    let mut asked = Vec::new();
    let r = LibraryReport::lookup(Lib::Cublas, ApiLevel::Cuda12, loader(&present, &mut asked));
    assert_eq!(r.loaded, None);
    assert_eq!(r.untried, ["libcublas.so.13"]);
    let e = r.check().unwrap_err();
    assert_eq!(
        e,
        GpuError::UntriedLibrary {
            lib: Lib::Cublas,
            found: "libcublas.so.13".into(),
            built: ApiLevel::Cuda12,
            needs: ApiLevel::Cuda13,
        }
    );
    assert_eq!(e.missing_library(), Some(Lib::Cublas));
    let msg = e.to_string();
    assert!(
        msg.starts_with("cuBLAS (libcublas) is only present as libcublas.so.13"),
        "{msg}"
    );
    assert!(msg.contains("CUDA 12.6 API"), "{msg}");
    assert!(msg.contains("feature `cuda-13`"), "{msg}");
    // The same files with the CUDA 13 build: found, nothing to say.
    let r = LibraryReport::lookup(Lib::Cublas, ApiLevel::Cuda13, |n| present.contains(&n));
    assert_eq!(r.check(), Ok("libcublas.so.13"));
}

#[test]
fn a_loaded_library_also_lists_the_names_its_build_leaves_out() {
    // The H200 machine: unversioned links (to the CUDA 13 files) and the .so.13 files.
    let present = ["libcublas.so", "libcublas.so.13"];
    let r = LibraryReport::lookup(Lib::Cublas, ApiLevel::Cuda12, |n| present.contains(&n));
    assert_eq!(r.check(), Ok("libcublas.so"));
    assert_eq!(r.untried, ["libcublas.so.13"]);
}

#[test]
fn a_library_under_no_name_is_missing_with_every_name_tried() {
    let mut asked = Vec::new();
    let r = LibraryReport::lookup(Lib::Cusolver, ApiLevel::Cuda12, loader(&[], &mut asked));
    let tried = r.tried();
    assert_eq!(
        asked, tried,
        "every name is asked once, in the order reported"
    );
    assert_eq!(tried.last().map(String::as_str), Some("libcusolver.so.13"));
    let e = r.check().unwrap_err();
    assert_eq!(
        e,
        GpuError::MissingLibrary {
            lib: Lib::Cusolver,
            tried
        }
    );
    let msg = e.to_string();
    assert!(msg.starts_with("cuSOLVER (libcusolver) not found: none of libcusolver.so, "));
    assert!(
        msg.contains("libcusolver.so.12, libcusolver.so.11"),
        "{msg}"
    );
    assert!(msg.contains("LD_LIBRARY_PATH"), "{msg}");
    // At the CUDA 13 level every versioned name is a candidate: nothing is added.
    let r = LibraryReport::lookup(Lib::Cusolver, ApiLevel::Cuda13, |_| false);
    assert_eq!(r.tried(), ApiLevel::Cuda13.candidates(Lib::Cusolver));
}

#[test]
fn cusolver_12_is_found_by_both_levels() {
    // CUDA 13 ships cuSOLVER as libcusolver.so.12.
    let present = ["libcusolver.so.12"];
    for api in [ApiLevel::Cuda12, ApiLevel::Cuda13] {
        let r = LibraryReport::lookup(Lib::Cusolver, api, |n| present.contains(&n));
        assert_eq!(r.check(), Ok("libcusolver.so.12"), "{api}");
    }
}

#[test]
fn versions_print_as_the_libraries_number_them() {
    assert_eq!(Version::from_cuda(13000).unwrap().to_string(), "13.0");
    assert_eq!(Version::from_cuda(12060).unwrap().to_string(), "12.6");
    assert_eq!(Version::from_cuda(-1), None);
    let v = Version {
        major: 13,
        minor: 0,
        patch: Some(2),
    };
    assert_eq!(v.to_string(), "13.0.2");
}

#[test]
fn the_file_of_an_address_comes_from_the_maps_line_that_holds_it() {
    let maps = "\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234     /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f0000001000-7f0000005000 r-xp 00001000 08:01 1234     /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f0000005000-7f0000006000 rw-p 00000000 00:00 0 
7f0000006000-7f0000007000 r-xp 00000000 08:01 99       /opt/my cuda/libnvrtc.so.13.0.88 (deleted)
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0        [stack]
";
    let file = |a: usize| mapped_file(maps, a);
    assert_eq!(
        file(0x7f00_0000_2000).as_deref(),
        Some(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"))
    );
    assert_eq!(
        file(0x7f00_0000_6010).as_deref(),
        Some(Path::new("/opt/my cuda/libnvrtc.so.13.0.88"))
    );
    assert_eq!(file(0x7f00_0000_5000), None, "anonymous mapping");
    assert_eq!(file(0x7ffd_0000_0000), None, "[stack] is not a file");
    assert_eq!(file(0x1000), None, "no mapping");
}

#[test]
fn the_report_never_panics_and_lists_every_library() {
    let report = super::report();
    assert_eq!(report.api, ApiLevel::BUILT);
    assert_eq!(report.libraries.len(), Lib::ALL.len());
    let text = report.to_string();
    for lib in Lib::ALL {
        let r = report.get(lib).unwrap();
        assert!(text.contains(&lib.to_string()), "{text}");
        // `require` agrees with the report and with `libraries`.
        assert_eq!(super::require(&[lib]).is_ok(), r.loaded.is_some(), "{lib}");
    }
    let libs = super::libraries();
    assert_eq!(
        libs.cublas,
        report.get(Lib::Cublas).unwrap().loaded.is_some()
    );
    assert_eq!(libs.nvrtc, report.get(Lib::Nvrtc).unwrap().loaded.is_some());
    println!("{report}");
}

#[test]
fn the_table_has_a_line_per_library_saying_what_loaded_or_why_not() {
    // A CUDA 12 build on a 12.4 driver with CUDA 13's versioned files only.
    let present = ["libcuda.so.1", "libcublas.so.13", "libcusolver.so.12"];
    let mut libraries: Vec<LibraryReport> = Lib::ALL
        .into_iter()
        .map(|lib| LibraryReport::lookup(lib, ApiLevel::Cuda12, |n| present.contains(&n)))
        .collect();
    libraries[0].version = Version::from_cuda(12040);
    libraries[0].path = Some(PathBuf::from("/usr/lib/libcuda.so.550.1"));
    libraries[4].version = Some(Version {
        major: 12,
        minor: 0,
        patch: Some(4),
    });
    let report = Report {
        api: ApiLevel::Cuda12,
        libraries,
        devices: Err(GpuError::NoDevice),
    };
    let text = report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    assert!(lines[0].contains("CUDA 12.6 API"), "{text}");
    let line = |lib: &str| {
        *lines
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{lib} ")))
            .unwrap()
    };
    let cuda = line("libcuda");
    assert!(
        cuda.contains("libcuda.so.1") && cuda.contains("12.4"),
        "{cuda}"
    );
    assert!(cuda.contains("/usr/lib/libcuda.so.550.1"), "{cuda}");
    assert!(
        cuda.contains("too old: this build needs CUDA 12.6"),
        "{cuda}"
    );
    let cublas = line("libcublas");
    assert!(cublas.contains("only libcublas.so.13"), "{cublas}");
    assert!(cublas.contains("feature `cuda-13`"), "{cublas}");
    assert!(
        line("libnvrtc").contains("not found (16 names tried)"),
        "{text}"
    );
    let cusolver = line("libcusolver");
    assert!(cusolver.contains("libcusolver.so.12") && cusolver.contains("12.0.4"));
    assert!(lines[7].contains("no device: no CUDA device"), "{text}");
}
