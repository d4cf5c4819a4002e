//! The replica layer over a backend in host memory: no GPU needed.

use core::cell::Cell;

use proptest::prelude::*;
use starling_core::coherence::{CoherenceError, NodeSet};

use super::*;

/// A backend whose "devices" are host vectors; counts the copies.
#[derive(Debug, Default)]
struct Fake {
    nodes: usize,
    uploads: Cell<usize>,
    downloads: Cell<usize>,
    copies: Cell<usize>,
    /// Fail the next copy.
    fail: Cell<bool>,
}

impl Fake {
    fn new(devices: usize) -> Self {
        Self {
            nodes: devices + 1,
            ..Self::default()
        }
    }

    fn moves(&self) -> usize {
        self.uploads.get() + self.downloads.get() + self.copies.get()
    }

    fn check_fail(&self) -> Result<(), GpuError> {
        if self.fail.replace(false) {
            Err(GpuError::Driver("injected failure".into()))
        } else {
            Ok(())
        }
    }
}

impl Backend<f64> for Fake {
    type Buffer = Vec<f64>;

    fn nodes(&self) -> usize {
        self.nodes
    }

    fn alloc(&self, _node: MemNode, len: usize) -> Result<Vec<f64>, GpuError> {
        Ok(vec![f64::NAN; len])
    }

    fn upload(&self, host: &[f64], dst: &mut Vec<f64>) -> Result<(), GpuError> {
        self.check_fail()?;
        self.uploads.set(self.uploads.get() + 1);
        dst.copy_from_slice(host);
        Ok(())
    }

    fn download(&self, src: &Vec<f64>, host: &mut [f64]) -> Result<(), GpuError> {
        self.check_fail()?;
        self.downloads.set(self.downloads.get() + 1);
        host.copy_from_slice(src);
        Ok(())
    }

    fn copy(&self, src: &Vec<f64>, dst: &mut Vec<f64>) -> Result<(), GpuError> {
        self.check_fail()?;
        self.copies.set(self.copies.get() + 1);
        dst.copy_from_slice(src);
        Ok(())
    }
}

const GPU1: MemNode = MemNode(1);
const GPU2: MemNode = MemNode(2);

#[test]
fn a_device_read_uploads_once_and_a_device_write_is_staged_back_for_a_send() {
    let fake = Fake::new(2);
    let mut host = vec![1.0; 4];
    let mut r = Replicated::<f64, Vec<f64>>::new(4);
    let buf = r.acquire_device(&fake, GPU1, AccessMode::R, &host).unwrap();
    assert_eq!(buf, &[1.0; 4]);
    r.release(GPU1, AccessMode::R).unwrap();
    let _ = r.acquire_device(&fake, GPU1, AccessMode::R, &host).unwrap();
    r.release(GPU1, AccessMode::R).unwrap();
    assert_eq!(
        fake.uploads.get(),
        1,
        "a valid replica is not fetched again"
    );

    let buf = r
        .acquire_device(&fake, GPU1, AccessMode::RW, &host)
        .unwrap();
    buf.fill(7.0);
    r.release(GPU1, AccessMode::RW).unwrap();
    assert_eq!(r.state().owner(), Some(GPU1));
    assert_eq!(
        r.before_send(&fake, &mut host),
        Ok(BeforeSend::StageFrom(GPU1))
    );
    assert_eq!(host, [7.0; 4]);
    assert_eq!(fake.downloads.get(), 1);
    assert_eq!(r.before_send(&fake, &mut host), Ok(BeforeSend::MainRam));
    assert_eq!(fake.downloads.get(), 1);
}

#[test]
fn a_device_to_device_read_copies_between_devices_when_main_memory_is_stale() {
    let fake = Fake::new(2);
    let host = vec![0.0; 3];
    let mut r = Replicated::<f64, Vec<f64>>::new(3);
    r.acquire_device(&fake, GPU2, AccessMode::W, &host)
        .unwrap()
        .fill(3.0);
    r.release(GPU2, AccessMode::W).unwrap();
    let buf = r.acquire_device(&fake, GPU1, AccessMode::R, &host).unwrap();
    assert_eq!(buf, &[3.0; 3]);
    assert_eq!((fake.uploads.get(), fake.copies.get()), (0, 1));
}

#[test]
fn a_host_write_makes_the_device_copies_stale() {
    let fake = Fake::new(1);
    let mut host = vec![1.0; 2];
    let mut r = Replicated::<f64, Vec<f64>>::new(2);
    let _ = r.acquire_device(&fake, GPU1, AccessMode::R, &host).unwrap();
    r.release(GPU1, AccessMode::R).unwrap();
    host.fill(2.0);
    r.host_written().unwrap();
    assert_eq!(
        r.acquire_device(&fake, GPU1, AccessMode::R, &host).unwrap(),
        &[2.0; 2]
    );
    assert_eq!(fake.uploads.get(), 2);
}

#[test]
fn a_failed_copy_releases_the_acquisition_and_changes_no_copy() {
    let fake = Fake::new(1);
    let host = vec![1.0; 2];
    let mut r = Replicated::<f64, Vec<f64>>::new(2);
    fake.fail.set(true);
    assert!(matches!(
        r.acquire_device(&fake, GPU1, AccessMode::RW, &host),
        Err(GpuError::Driver(_))
    ));
    assert_eq!(r.state().held(GPU1), 0);
    assert_eq!(r.state().writer(), None);
    assert_eq!(r.state().valid(), NodeSet::single(MemNode::MAIN_RAM));
    // A retry works.
    assert_eq!(
        r.acquire_device(&fake, GPU1, AccessMode::RW, &host)
            .unwrap(),
        &[1.0; 2]
    );
}

#[test]
fn eviction_frees_a_shared_copy_but_not_the_last_one() {
    let fake = Fake::new(1);
    let mut host = vec![1.0; 2];
    let mut r = Replicated::<f64, Vec<f64>>::new(2);
    let _ = r
        .acquire_device(&fake, GPU1, AccessMode::RW, &host)
        .unwrap();
    r.release(GPU1, AccessMode::RW).unwrap();
    assert_eq!(
        r.evict(GPU1),
        Err(GpuError::Coherence(CoherenceError::LastCopy(GPU1)))
    );
    r.acquire_host(&fake, AccessMode::R, &mut host).unwrap();
    r.release(MemNode::MAIN_RAM, AccessMode::R).unwrap();
    assert_eq!(r.device_bytes(), 16);
    assert!(r.evict(GPU1).unwrap().is_some());
    assert_eq!(r.device_bytes(), 0);
}

#[test]
fn main_memory_and_missing_devices_are_not_device_nodes() {
    let fake = Fake::new(1);
    let host = vec![1.0; 2];
    let mut r = Replicated::<f64, Vec<f64>>::new(2);
    assert!(matches!(
        r.acquire_device(&fake, MemNode::MAIN_RAM, AccessMode::R, &host),
        Err(GpuError::DeviceOutOfRange { .. })
    ));
    assert!(matches!(
        r.acquire_device(&fake, GPU2, AccessMode::R, &host),
        Err(GpuError::DeviceOutOfRange { .. })
    ));
    assert_eq!(r.state().held(GPU2), 0);
}

#[derive(Clone, Debug)]
enum Op {
    /// A task on node n (0 = a CPU task) reads the datum.
    Read(u8),
    /// A task on node n writes the datum (W when `pure`, else RW).
    Write(u8, bool),
    /// An MPI receive overwrites the host copy.
    Receive,
    /// An MPI send reads the host copy.
    Send,
    Evict(u8),
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3u8).prop_map(Op::Read),
        3 => (0..3u8, any::<bool>()).prop_map(|(n, p)| Op::Write(n, p)),
        1 => Just(Op::Receive),
        1 => Just(Op::Send),
        1 => (1..3u8).prop_map(Op::Evict),
    ]
}

proptest! {
    /// Whatever the sequence of tasks on the host and two devices, receives, sends and
    /// evictions, every read sees the last value written, and a read on a node that
    /// already holds the value moves nothing.
    #[test]
    fn every_read_sees_the_last_write(ops in prop::collection::vec(any_op(), 0..60)) {
        let fake = Fake::new(2);
        let mut host = vec![0.0; 3];
        let mut r = Replicated::<f64, Vec<f64>>::new(3);
        let mut latest = 0.0;
        for (step, op) in ops.into_iter().enumerate() {
            let value = step as f64 + 1.0;
            match op {
                Op::Read(0) => {
                    r.acquire_host(&fake, AccessMode::R, &mut host).unwrap();
                    prop_assert_eq!(&host, &vec![latest; 3]);
                    r.release(MemNode::MAIN_RAM, AccessMode::R).unwrap();
                }
                Op::Read(n) => {
                    let was_valid = r.state().valid().contains(MemNode(n));
                    let before = fake.moves();
                    let buf = r.acquire_device(&fake, MemNode(n), AccessMode::R, &host).unwrap();
                    prop_assert_eq!(&*buf, &vec![latest; 3]);
                    r.release(MemNode(n), AccessMode::R).unwrap();
                    prop_assert_eq!(fake.moves() == before, was_valid);
                }
                Op::Write(0, pure) => {
                    let mode = if pure { AccessMode::W } else { AccessMode::RW };
                    r.acquire_host(&fake, mode, &mut host).unwrap();
                    if !pure {
                        prop_assert_eq!(&host, &vec![latest; 3]);
                    }
                    host.fill(value);
                    r.release(MemNode::MAIN_RAM, mode).unwrap();
                    latest = value;
                }
                Op::Write(n, pure) => {
                    let mode = if pure { AccessMode::W } else { AccessMode::RW };
                    let buf = r.acquire_device(&fake, MemNode(n), mode, &host).unwrap();
                    if !pure {
                        prop_assert_eq!(&*buf, &vec![latest; 3]);
                    }
                    buf.fill(value);
                    r.release(MemNode(n), mode).unwrap();
                    prop_assert_eq!(r.state().owner(), Some(MemNode(n)));
                    latest = value;
                }
                Op::Receive => {
                    host.fill(value);
                    r.host_written().unwrap();
                    latest = value;
                }
                Op::Send => {
                    r.before_send(&fake, &mut host).unwrap();
                    prop_assert_eq!(&host, &vec![latest; 3]);
                }
                Op::Evict(n) => {
                    let last = r.state().owner() == Some(MemNode(n));
                    let got = r.evict(MemNode(n));
                    prop_assert_eq!(got.is_err(), last);
                }
            }
            prop_assert!(!r.state().valid().is_empty());
        }
    }
}
