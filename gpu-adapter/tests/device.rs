//! The GPU adapter's tests. The first group runs everywhere: probing never panics and
//! turns a missing driver or device into a typed error. The kernel-source group runs
//! where NVRTC can be loaded (no GPU needed). The device group runs where a CUDA device
//! exists and prints "skipped: no CUDA device (<reason>)" elsewhere.

use starling_core::AccessMode;
use starling_core::coherence::{BeforeSend, MemNode};
use starling_gpu::blas::Blas;
use starling_gpu::kernels::{self, STENCIL5_PTX, STENCIL5_SRC, Stencil, stencil5_grid_cpu};
use starling_gpu::probe::{Lib, device_count, libraries, require};
use starling_gpu::replicas::{Devices, Replicated};
use starling_gpu::{Device, GpuError, probe};

/// The device to test on, or `None` after printing why the test is skipped.
fn device() -> Option<Device> {
    match Device::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

// ----- everywhere ---------------------------------------------------------------------

#[test]
fn probe_returns_a_typed_error_instead_of_panicking_when_there_is_no_device() {
    let libs = libraries();
    match probe() {
        Ok(info) => {
            assert!(libs.driver, "devices found without a driver library");
            assert!(info.count() > 0);
            assert!(info.driver_version > 0);
            println!("probe: {info:?}");
        }
        Err(e) if !libs.driver => assert_eq!(e, GpuError::NoDriver),
        Err(e) => assert!(
            matches!(e, GpuError::NoDevice | GpuError::Driver(_)),
            "unexpected probe error {e:?}"
        ),
    }
}

#[test]
fn opening_a_device_fails_like_the_probe_when_there_is_none() {
    match (probe(), Device::open(0)) {
        (Ok(_), Ok(_)) => {}
        (Err(p), Err(o)) => assert_eq!(p, o),
        (p, o) => panic!("probe {p:?} but open {o:?}"),
    }
}

#[test]
fn a_device_past_the_last_is_out_of_range() {
    match device_count() {
        Ok(n) => assert_eq!(
            Device::open(n).unwrap_err(),
            GpuError::DeviceOutOfRange {
                device: n,
                count: n
            }
        ),
        Err(e) => assert_eq!(Device::open(7).unwrap_err(), e),
    }
}

#[test]
fn errors_say_what_is_missing_and_what_to_do() {
    let msg = |e: GpuError| e.to_string();
    assert!(msg(GpuError::NoDriver).starts_with("no CUDA driver: libcuda could not be loaded"));
    assert_eq!(
        msg(GpuError::NoDevice),
        "no CUDA device: the CUDA driver is loaded but reports no GPU"
    );
    assert!(msg(GpuError::NoNvrtc).contains("LD_LIBRARY_PATH"));
    assert!(msg(GpuError::NoCublas).starts_with("no cuBLAS"));
    assert!(msg(GpuError::NoCusolver).starts_with("no cuSOLVER"));
    assert_eq!(
        msg(GpuError::DeviceOutOfRange {
            device: 3,
            count: 1
        }),
        "CUDA device 3 does not exist: the driver reports 1 device(s)"
    );
    assert_eq!(
        msg(GpuError::NotPositiveDefinite(4)),
        "potrf: the leading minor of order 4 is not positive definite"
    );
}

#[test]
fn blas_without_a_device_is_a_typed_error() {
    // `Blas::new` needs a device; without one the error comes from opening it, and a
    // missing library is reported before any call into it.
    let Some(dev) = device() else {
        return;
    };
    let libs = libraries();
    match Blas::new(&dev) {
        Ok(_) => assert!(libs.cublas && libs.cusolver),
        Err(e) if !libs.cublas => {
            assert_eq!(Err(e.clone()), require(&[Lib::Cublas]));
            assert_eq!(e.missing_library(), Some(Lib::Cublas));
        }
        Err(e) if !libs.cusolver => {
            assert_eq!(Err(e.clone()), require(&[Lib::Cusolver]));
            assert_eq!(e.missing_library(), Some(Lib::Cusolver));
        }
        Err(e) => panic!("Blas::new: {e}"),
    }
}

// ----- where NVRTC loads (no GPU needed) ----------------------------------------------

fn nvrtc() -> bool {
    if libraries().nvrtc {
        true
    } else {
        let why = require(&[Lib::Nvrtc]).err().map(|e| e.to_string());
        println!("skipped: no NVRTC ({})", why.unwrap_or_default());
        false
    }
}

#[test]
fn the_kernel_sources_compile_with_nvrtc() {
    match kernels::compile("stencil5", STENCIL5_SRC) {
        Ok(ptx) => {
            let src = ptx.to_src();
            assert!(src.contains(".entry stencil5_cell"));
            assert!(src.contains(".entry stencil5_grid"));
        }
        Err(e) if e.missing_library() == Some(Lib::Nvrtc) => {
            assert!(!nvrtc());
            assert!(e.to_string().contains("libnvrtc.so"), "{e}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_bad_source_is_a_compile_error_with_the_log() {
    if !nvrtc() {
        return;
    }
    let err = kernels::compile("broken", "extern \"C\" __global__ void f() { nope; }").unwrap_err();
    let GpuError::Compile { module, log } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*module, "broken");
    assert!(log.contains("nope"), "{log}");
}

#[test]
fn shipped_ptx_is_the_compiled_source() {
    if nvrtc() && std::env::var_os("STARLING_WRITE_PTX").is_some() {
        let fresh = kernels::compile("stencil5", STENCIL5_SRC).unwrap().to_src();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/stencil5.ptx");
        std::fs::write(path, fresh.trim_end_matches('\0')).unwrap();
        return;
    }
    assert!(STENCIL5_PTX.contains(".entry stencil5_cell"));
    assert!(STENCIL5_PTX.contains(".entry stencil5_grid"));
    if !nvrtc() {
        return;
    }
    let fresh = kernels::compile("stencil5", STENCIL5_SRC).unwrap().to_src();
    // The PTX names the compiler's release: compare only with the same release.
    let release = |p: &str| p.lines().find(|l| l.contains("release")).map(str::to_owned);
    if release(&fresh) != release(STENCIL5_PTX) {
        println!(
            "skipped: NVRTC {:?}, not the shipped PTX's {:?}",
            release(&fresh),
            release(STENCIL5_PTX)
        );
        return;
    }
    assert_eq!(
        fresh.trim_end_matches('\0'),
        STENCIL5_PTX,
        "kernels/stencil5.ptx is stale: rerun this test with STARLING_WRITE_PTX=1"
    );
}

// ----- on a device ----------------------------------------------------------------------

#[test]
fn upload_then_download_gives_the_data_back() {
    let Some(dev) = device() else {
        return;
    };
    let host: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5).collect();
    let buf = dev.upload(&host).unwrap();
    assert_eq!(dev.download(&buf).unwrap(), host);
    let mut back = vec![0.0; 1000];
    dev.download_into(&buf, &mut back).unwrap();
    assert_eq!(back, host);
    let mut short = vec![0.0; 10];
    assert_eq!(
        dev.download_into(&buf, &mut short),
        Err(GpuError::LengthMismatch {
            expected: 10,
            got: 1000
        })
    );
}

#[test]
fn the_stencil_kernels_match_the_cpu_bit_for_bit() {
    let Some(dev) = device() else {
        return;
    };
    let st = Stencil::load(&dev).unwrap();
    println!("stencil kernels from NVRTC: {}", st.from_nvrtc());
    let (nx, ny) = (37, 53);
    let grid: Vec<f64> = (0..nx * ny)
        .map(|i| ((i * 7919) % 1000) as f64 / 7.0)
        .collect();
    let input = dev.upload(&grid).unwrap();
    let mut output = dev.alloc_zeros::<f64>(nx * ny).unwrap();
    st.grid(&input, &mut output, nx, ny).unwrap();
    assert_eq!(
        dev.download(&output).unwrap(),
        stencil5_grid_cpu(&grid, nx, ny)
    );

    let cells = [0.1, 0.2, 0.3, 0.4, 0.5];
    let mut c = dev.upload(&cells[..1]).unwrap();
    let n: Vec<_> = cells[1..]
        .iter()
        .map(|v| dev.upload(&[*v]).unwrap())
        .collect();
    st.cell(&mut c, [&n[0], &n[1], &n[2], &n[3]]).unwrap();
    assert_eq!(
        dev.download(&c).unwrap(),
        [(0.1 + 0.2 + 0.3 + 0.4 + 0.5) / 5.0]
    );
}

/// A symmetric positive definite `n × n` matrix, column-major.
fn spd(n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = 1.0 / (1.0 + i.abs_diff(j) as f64) + if i == j { n as f64 } else { 0.0 };
        }
    }
    a
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x - y).abs() <= 1e-9 * (1.0 + y.abs()))
}

#[test]
fn the_tile_kernels_match_the_cpu_definitions() {
    let Some(dev) = device() else {
        return;
    };
    let mut blas = match Blas::new(&dev) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    let n = 48;
    let a: Vec<f64> = (0..n * n).map(|i| (i % 13) as f64 / 13.0).collect();
    let b: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64 / 7.0).collect();
    let c = spd(n);
    let at = |m: &[f64], i: usize, j: usize| m[i + j * n];

    // GEMM: c - a bᵀ.
    let mut want = c.clone();
    for j in 0..n {
        for i in 0..n {
            want[i + j * n] -= (0..n).map(|k| at(&a, i, k) * at(&b, j, k)).sum::<f64>();
        }
    }
    let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
    let mut dc = dev.upload(&c).unwrap();
    blas.gemm(n, &da, &db, &mut dc).unwrap();
    assert!(close(&dev.download(&dc).unwrap(), &want), "gemm");

    // SYRK: lower triangle of c - a aᵀ; the upper triangle untouched.
    let mut dc = dev.upload(&c).unwrap();
    blas.syrk(n, &da, &mut dc).unwrap();
    let got = dev.download(&dc).unwrap();
    for j in 0..n {
        for i in 0..n {
            let w = if i >= j {
                at(&c, i, j) - (0..n).map(|k| at(&a, i, k) * at(&a, j, k)).sum::<f64>()
            } else {
                at(&c, i, j)
            };
            assert!(close(&[got[i + j * n]], &[w]), "syrk ({i}, {j})");
        }
    }

    // POTRF, then TRSM: b L⁻ᵀ times Lᵀ gives b back.
    let mut dl = dev.upload(&c).unwrap();
    blas.potrf(n, &mut dl).unwrap();
    let l = dev.download(&dl).unwrap();
    for j in 0..n {
        for i in j..n {
            let llt: f64 = (0..=j).map(|k| at(&l, i, k) * at(&l, j, k)).sum();
            assert!(close(&[llt], &[at(&c, i, j)]), "potrf ({i}, {j})");
        }
    }
    let mut dx = dev.upload(&b).unwrap();
    blas.trsm(n, &dl, &mut dx).unwrap();
    let x = dev.download(&dx).unwrap();
    for j in 0..n {
        for i in 0..n {
            let xlt: f64 = (0..=j).map(|k| at(&x, i, k) * at(&l, j, k)).sum();
            assert!(close(&[xlt], &[at(&b, i, j)]), "trsm ({i}, {j})");
        }
    }

    // Not positive definite: a typed error.
    let mut bad = dev.upload(&vec![-1.0; n * n]).unwrap();
    assert_eq!(
        blas.potrf(n, &mut bad),
        Err(GpuError::NotPositiveDefinite(1))
    );
    // Wrong sizes: a typed error, not a panic.
    assert!(matches!(
        blas.gemm(n + 1, &da, &db, &mut dc),
        Err(GpuError::LengthMismatch { .. })
    ));
}

#[test]
fn replicas_on_a_device_are_staged_back_for_a_send() {
    let Some(dev) = device() else {
        return;
    };
    let devices = Devices(vec![dev.clone()]);
    let gpu = Devices::node(0);
    let mut host = vec![1.0f64; 256];
    let mut r = Replicated::new(256);
    let buf = r
        .acquire_device(&devices, gpu, AccessMode::RW, &host)
        .unwrap();
    assert_eq!(dev.download(buf).unwrap(), host);
    dev.upload_into(&[2.0; 256], buf).unwrap();
    r.release(gpu, AccessMode::RW).unwrap();
    assert_eq!(
        r.before_send(&devices, &mut host),
        Ok(BeforeSend::StageFrom(gpu))
    );
    assert_eq!(host, vec![2.0; 256]);
    assert_eq!(r.state().valid().len(), 2);
    assert!(r.evict(gpu).unwrap().is_some());
    assert_eq!(r.state().owner(), Some(MemNode::MAIN_RAM));
}
