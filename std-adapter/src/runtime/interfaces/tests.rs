use proptest::collection::vec;
use proptest::prelude::*;
use starling_core::DataId;

use super::*;
use crate::runtime::data::{AnyCell, Cell};

/// Packs `data`, checking the length against `packed_size` and the fast path (when
/// present) against the packed form.
pub(super) fn packed<I: Interface>(data: &I) -> Vec<u8> {
    let mut out = Vec::new();
    data.pack(&mut out);
    assert_eq!(out.len(), data.packed_size());
    if let Some(fast) = data.as_bytes() {
        assert_eq!(fast, &out[..], "the fast path differs from the packed form");
    }
    out
}

/// `unpack` of one byte too many and (when possible) one too few is refused as a size
/// mismatch, through the interface and through the runtime's cell, and changes nothing.
pub(super) fn assert_wrong_sizes_refused<I: Interface + Clone + PartialEq + core::fmt::Debug>(
    data: I,
) {
    let good = packed(&data);
    let expected = data.packed_size();
    let mut sizes = vec![good.len() + 1];
    if let Some(shorter) = good.len().checked_sub(1) {
        sizes.push(shorter);
    }
    for len in sizes {
        let mut bytes = good.clone();
        bytes.resize(len, 0xAB);
        let mut copy = data.clone();
        assert_eq!(
            copy.unpack(&bytes),
            Err(DataError::SizeMismatch { expected, got: len })
        );
        assert_eq!(copy, data);
        let cell = Cell::new(DataId(0), data.clone());
        assert_eq!(
            cell.unpack(&bytes),
            Err(DataError::SizeMismatch { expected, got: len })
        );
        assert_eq!(cell.take().as_ref(), Some(&data));
    }
}

/// Moves `src` into `dst` through the runtime's cell (fast path where present) and
/// returns `dst`.
pub(super) fn transfer<I: Interface>(src: I, dst: I) -> I {
    let from = Cell::new(DataId(1), src);
    let to = Cell::new(DataId(2), dst);
    let mut bytes = Vec::new();
    from.pack_into(&mut bytes);
    to.unpack(&bytes).expect("same shape");
    to.take().expect("registered")
}

// ----- Variable -------------------------------------------------------------------------

#[test]
fn variable_accessors_read_and_replace_the_value() {
    let mut v = Variable::new(3_i64);
    assert_eq!(v.get(), 3);
    v.set(4);
    assert_eq!(*v.value(), 4);
    *v.value_mut() += 1;
    assert_eq!(v.get(), 5);
}

#[test]
fn variable_fast_path_is_its_bytes() {
    let mut v = Variable::new(0x0102_0304_u32);
    assert_eq!(v.as_bytes(), Some(&0x0102_0304_u32.to_ne_bytes()[..]));
    v.as_bytes_mut()
        .unwrap()
        .copy_from_slice(&7_u32.to_ne_bytes());
    assert_eq!(v.get(), 7);
}

#[test]
fn variable_unpack_of_wrong_size_is_refused_and_keeps_the_value() {
    assert_wrong_sizes_refused(Variable::new([1.5_f32, -2.0, 3.25]));
}

#[test]
fn variable_of_zero_sized_type_packs_to_nothing() {
    let mut v = Variable::new(());
    assert!(packed(&v).is_empty());
    assert_eq!(v.unpack(&[]), Ok(()));
    assert_wrong_sizes_refused(v);
}

// ----- Vector ---------------------------------------------------------------------------

#[test]
fn vector_zeros_is_all_zero_and_accessors_agree() {
    let v = Vector::<f64>::zeros(4);
    assert_eq!(v.len(), 4);
    assert!(!v.is_empty());
    assert_eq!(v.as_slice(), &[0.0; 4]);
    assert!(Vector::<u8>::zeros(0).is_empty());
    let mut w = Vector::from(vec![1_u16, 2]);
    w.as_mut_slice()[1] = 9;
    assert_eq!(w.into_vec(), vec![1, 9]);
}

#[test]
fn vector_fast_path_is_its_contiguous_bytes() {
    let v = Vector::from_vec(vec![1_u16, 2, 3]);
    assert_eq!(
        v.as_bytes(),
        Some(bytemuck::cast_slice::<u16, u8>(&[1, 2, 3]))
    );
    assert!(
        Vector::<u16>::zeros(0)
            .as_bytes()
            .is_some_and(<[u8]>::is_empty)
    );
}

#[test]
fn vector_unpack_of_wrong_size_is_refused_and_keeps_the_data() {
    assert_wrong_sizes_refused(Vector::from_vec(vec![1_u64, 2, 3]));
    assert_wrong_sizes_refused(Vector::<u64>::zeros(0));
}

// ----- Matrix ---------------------------------------------------------------------------

#[test]
fn matrix_new_refuses_ld_smaller_than_nx() {
    assert!(matches!(
        Matrix::new(3, 2, 2, vec![0_u8; 10]),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn matrix_new_refuses_storage_shorter_than_its_span() {
    // ld * (ny - 1) + nx = 4 * 2 + 3 = 11 elements needed.
    assert!(matches!(
        Matrix::new(3, 3, 4, vec![0_u8; 10]),
        Err(DataError::Malformed(_))
    ));
    assert!(Matrix::new(3, 3, 4, vec![0_u8; 11]).is_ok());
    assert!(Matrix::new(3, 3, 4, vec![0_u8; 20]).is_ok());
}

#[test]
fn matrix_new_refuses_a_span_that_overflows() {
    assert!(matches!(
        Matrix::new(1, 3, usize::MAX, vec![(); 4]),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn matrix_without_elements_needs_no_storage_whatever_its_ld() {
    for (nx, ny, ld) in [(0, 5, 0), (0, 2, 1), (0, 3, 4), (4, 0, 4)] {
        let mut m = Matrix::<u8>::new(nx, ny, ld, Vec::new()).unwrap();
        assert!(packed(&m).is_empty());
        assert_eq!(m.unpack(&[]), Ok(()));
        assert!(m.as_bytes_mut().is_some_and(|b| b.is_empty()));
    }
}

#[test]
fn matrix_elements_are_column_major_with_leading_dimension() {
    let mut m = Matrix::new(2, 3, 4, (0..10_i32).collect()).unwrap();
    assert_eq!((m.nx(), m.ny(), m.ld()), (2, 3, 4));
    assert_eq!(m.get(1, 0), 1);
    assert_eq!(m.get(0, 1), 4);
    assert_eq!(m.get(1, 2), 9);
    m.set(0, 2, -1);
    assert_eq!(m.as_slice()[8], -1);
    m.as_mut_slice()[5] = -2;
    assert_eq!(m.get(1, 1), -2);
    assert_eq!(m.into_vec().len(), 10);
}

#[test]
#[should_panic(expected = "out of range")]
fn matrix_get_past_the_rows_panics_even_inside_the_padding() {
    let m = Matrix::new(2, 2, 3, vec![0_u8; 5]).unwrap();
    let _ = m.get(2, 0);
}

#[test]
fn matrix_packs_columns_and_skips_padding() {
    let m = Matrix::new(2, 2, 3, vec![1_i32, 2, 99, 3, 4]).unwrap();
    assert_eq!(packed(&m), bytemuck::cast_slice::<i32, u8>(&[1, 2, 3, 4]));
}

#[test]
fn matrix_unpack_leaves_padding_untouched() {
    let src = Matrix::new(2, 2, 2, vec![1_i32, 2, 3, 4]).unwrap();
    let mut dst = Matrix::new(2, 2, 4, vec![-7_i32; 8]).unwrap();
    dst.unpack(&packed(&src)).unwrap();
    assert_eq!(dst.as_slice(), &[1, 2, -7, -7, 3, 4, -7, -7]);
}

#[test]
fn matrix_unpack_of_wrong_size_is_refused_and_keeps_the_data() {
    assert_wrong_sizes_refused(Matrix::new(2, 3, 3, (0..9_u32).collect()).unwrap());
    assert_wrong_sizes_refused(Matrix::<u32>::zeros(3, 2));
}

#[test]
fn matrix_fast_path_only_when_dense() {
    let strided = Matrix::new(2, 2, 3, vec![0_u8; 5]).unwrap();
    assert!(!strided.is_dense());
    assert!(strided.as_bytes().is_none());
    let mut dense = Matrix::<u8>::zeros(2, 2);
    assert!(dense.is_dense());
    assert_eq!(dense.as_bytes_mut().map(|b| b.len()), Some(4));
    // One column is contiguous whatever the leading dimension.
    let column = Matrix::new(2, 1, 5, vec![1_u8, 2, 0, 0, 0]).unwrap();
    assert_eq!(column.as_bytes(), Some(&[1_u8, 2][..]));
    // Storage past the last element is not part of the fast path.
    let long = Matrix::new(1, 2, 1, vec![1_u8, 2, 3]).unwrap();
    assert_eq!(long.as_bytes(), Some(&[1_u8, 2][..]));
}

// ----- Block ----------------------------------------------------------------------------

#[test]
fn block_new_refuses_bad_strides_and_short_storage() {
    let bad = |r: Result<Block<u8>, DataError>| matches!(r, Err(DataError::Malformed(_)));
    assert!(bad(Block::new(3, 2, 2, 2, 6, vec![0; 12])), "ldy < nx");
    assert!(
        bad(Block::new(3, 2, 2, 3, 5, vec![0; 12])),
        "ldz < ldy * ny"
    );
    // ldz * (nz - 1) + ldy * (ny - 1) + nx = 9 + 4 + 3 = 16 elements needed.
    assert!(bad(Block::new(3, 2, 2, 4, 9, vec![0; 15])), "short storage");
    assert!(Block::new(3, 2, 2, 4, 9, vec![0_u8; 16]).is_ok());
    assert!(
        bad(Block::new(1, 2, 1, usize::MAX, usize::MAX, vec![0; 4])),
        "overflow"
    );
    assert!(Block::<u8>::new(2, 3, 0, 2, 6, Vec::new()).is_ok(), "empty");
}

#[test]
fn block_without_elements_needs_no_storage_whatever_its_strides() {
    for (nx, ny, nz, ldy, ldz) in [
        (0, 1, 2, 1, 2),
        (0, 3, 3, 2, 7),
        (2, 0, 3, 2, 1),
        (2, 2, 0, 3, 6),
    ] {
        let mut b = Block::<u8>::new(nx, ny, nz, ldy, ldz, Vec::new()).unwrap();
        assert!(packed(&b).is_empty());
        assert_eq!(b.unpack(&[]), Ok(()));
        assert!(b.as_bytes_mut().is_some_and(|b| b.is_empty()));
    }
}

#[test]
fn block_elements_follow_the_strides() {
    let mut b = Block::new(2, 2, 2, 3, 7, (0..14_i32).collect()).unwrap();
    assert_eq!((b.nx(), b.ny(), b.nz(), b.ldy(), b.ldz()), (2, 2, 2, 3, 7));
    assert_eq!(b.get(1, 0, 0), 1);
    assert_eq!(b.get(0, 1, 0), 3);
    assert_eq!(b.get(1, 1, 1), 11);
    b.set(0, 1, 1, -1);
    assert_eq!(b.as_slice()[10], -1);
    b.as_mut_slice()[7] = -2;
    assert_eq!(b.get(0, 0, 1), -2);
    assert_eq!(b.into_vec().len(), 14);
}

#[test]
#[should_panic(expected = "out of range")]
fn block_get_past_a_row_panics_even_inside_the_padding() {
    let b = Block::new(2, 2, 1, 3, 6, vec![0_u8; 6]).unwrap();
    let _ = b.get(2, 0, 0);
}

#[test]
fn block_packs_x_fastest_and_skips_padding() {
    let b = Block::new(2, 2, 2, 3, 7, (0..14_i32).collect()).unwrap();
    let expected: [i32; 8] = [0, 1, 3, 4, 7, 8, 10, 11];
    assert_eq!(packed(&b), bytemuck::cast_slice::<i32, u8>(&expected));
}

#[test]
fn block_unpack_leaves_padding_untouched() {
    let src = Block::new(2, 2, 2, 2, 4, (1..=8_i32).collect()).unwrap();
    let mut dst = Block::new(2, 2, 2, 3, 7, vec![-7_i32; 14]).unwrap();
    dst.unpack(&packed(&src)).unwrap();
    let x = -7;
    assert_eq!(dst.as_slice(), &[1, 2, x, 3, 4, x, x, 5, 6, x, 7, 8, x, x]);
}

#[test]
fn block_unpack_of_wrong_size_is_refused_and_keeps_the_data() {
    assert_wrong_sizes_refused(Block::new(2, 2, 2, 3, 7, (0..14_u16).collect()).unwrap());
    assert_wrong_sizes_refused(Block::<u16>::zeros(2, 3, 2));
}

#[test]
fn block_fast_path_only_when_dense() {
    let dense = Block::<u8>::zeros(2, 3, 4);
    assert!(dense.is_dense());
    assert_eq!(dense.as_bytes().map(<[u8]>::len), Some(24));
    let row_padding = Block::new(2, 2, 1, 3, 6, vec![0_u8; 6]).unwrap();
    assert!(row_padding.as_bytes().is_none());
    let plane_padding = Block::new(2, 2, 2, 2, 5, vec![0_u8; 9]).unwrap();
    assert!(plane_padding.as_bytes().is_none());
    // One row per plane, one plane: contiguous whatever the strides.
    let mut row = Block::new(3, 1, 1, 8, 9, vec![5_u8; 3]).unwrap();
    assert!(row.is_dense());
    assert_eq!(row.as_bytes_mut().map(|b| b.len()), Some(3));
}

// ----- Complex --------------------------------------------------------------------------

fn complex_bytes(count: u64, parts: &[f64]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    for x in parts {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

#[test]
fn complex_new_refuses_parts_of_different_lengths() {
    assert!(matches!(
        Complex::new(vec![1.0], vec![]),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn complex_accessors_keep_parts_together() {
    let mut z = Complex::new(vec![1.0, 2.0], vec![3.0, 4.0]).unwrap();
    assert_eq!((z.len(), z.is_empty()), (2, false));
    let (re, im) = z.parts_mut();
    re[0] = -1.0;
    im[1] = -4.0;
    assert_eq!((z.real(), z.imag()), (&[-1.0, 2.0][..], &[3.0, -4.0][..]));
    assert_eq!(z.into_parts(), (vec![-1.0, 2.0], vec![3.0, -4.0]));
    assert!(Complex::zeros(0).is_empty());
}

#[test]
fn complex_packs_le_count_then_reals_then_imaginaries() {
    let z = Complex::new(vec![1.0, 2.0], vec![-1.0, 0.5]).unwrap();
    assert_eq!(packed(&z), complex_bytes(2, &[1.0, 2.0, -1.0, 0.5]));
}

#[test]
fn complex_has_no_fast_path() {
    let mut z = Complex::zeros(3);
    assert!(z.as_bytes().is_none());
    assert!(z.as_bytes_mut().is_none());
}

#[test]
fn complex_unpack_refuses_malformed_bytes_and_keeps_the_data() {
    let z = Complex::new(vec![1.0, 2.0], vec![3.0, 4.0]).unwrap();
    let cases: [(&str, Vec<u8>); 6] = [
        ("empty", Vec::new()),
        ("short count", vec![2, 0, 0]),
        ("count too big", complex_bytes(3, &[0.0; 4])),
        ("count overflows", complex_bytes(u64::MAX, &[0.0; 4])),
        (
            "body not whole numbers",
            complex_bytes(2, &[0.0; 4])[..30].to_vec(),
        ),
        (
            "trailing bytes",
            [complex_bytes(2, &[0.0; 4]), vec![0]].concat(),
        ),
    ];
    for (what, bytes) in cases {
        let mut copy = z.clone();
        assert!(
            matches!(copy.unpack(&bytes), Err(DataError::Malformed(_))),
            "{what}"
        );
        assert_eq!(copy, z, "{what}");
    }
}

#[test]
fn complex_unpack_of_another_count_is_size_mismatch() {
    let mut z = Complex::zeros(2);
    let other = complex_bytes(1, &[5.0, 6.0]);
    assert_eq!(
        z.unpack(&other),
        Err(DataError::SizeMismatch {
            expected: 40,
            got: 24
        })
    );
    assert_eq!(z, Complex::zeros(2));
}

// ----- Properties -----------------------------------------------------------------------

/// A matrix of random shape and leading dimension over storage that may run past its
/// span; elements are non-negative so that -1 marks padding in the targets.
fn any_matrix() -> impl Strategy<Value = Matrix<i32>> {
    (0..6_usize, 0..6_usize, 0..3_usize, 0..3_usize).prop_flat_map(|(nx, ny, pad, tail)| {
        let ld = nx + pad;
        let span = if nx == 0 || ny == 0 {
            0
        } else {
            ld * (ny - 1) + nx
        };
        vec(0..i32::MAX, span + tail)
            .prop_map(move |data| Matrix::new(nx, ny, ld, data).expect("valid shape"))
    })
}

/// A block of random shape and strides, as [`any_matrix`].
fn any_block() -> impl Strategy<Value = Block<i32>> {
    (
        0..5_usize,
        0..5_usize,
        0..5_usize,
        0..3_usize,
        0..3_usize,
        0..2_usize,
    )
        .prop_flat_map(|(nx, ny, nz, pady, padz, tail)| {
            let ldy = nx + pady;
            let ldz = ldy * ny + padz;
            let span = if nx * ny * nz == 0 {
                0
            } else {
                ldz * (nz - 1) + ldy * (ny - 1) + nx
            };
            vec(0..i32::MAX, span + tail)
                .prop_map(move |data| Block::new(nx, ny, nz, ldy, ldz, data).expect("valid shape"))
        })
}

/// Whether storage offsets, listed in packed order, are exactly `0, 1, 2, …`.
pub(super) fn contiguous(offsets: &[usize]) -> bool {
    offsets.iter().enumerate().all(|(k, &at)| k == at)
}

proptest! {
    #[test]
    fn variable_round_trips(x: [u64; 2], y: f32) {
        let mut a = Variable::new([0_u64; 2]);
        a.unpack(&packed(&Variable::new(x))).unwrap();
        prop_assert_eq!(a.get(), x);
        let b = transfer(Variable::new(y), Variable::new(0.0_f32));
        prop_assert_eq!(b.get().to_bits(), y.to_bits());
    }

    #[test]
    fn vector_round_trips(data in vec(any::<i64>(), 0..64)) {
        let src = Vector::from_vec(data.clone());
        let mut dst = Vector::<i64>::zeros(data.len());
        dst.unpack(&packed(&src)).unwrap();
        prop_assert_eq!(dst.as_slice(), &data[..]);
        let via_cell = transfer(src, Vector::zeros(data.len()));
        prop_assert_eq!(via_cell.into_vec(), data);
    }

    #[test]
    fn matrix_round_trips_over_random_shapes(
        src in any_matrix(),
        pad in 0..3_usize,
        tail in 0..3_usize,
    ) {
        let (nx, ny, sld) = (src.nx(), src.ny(), src.ld());
        // The model: the elements column by column, as `get` sees them.
        let model: Vec<i32> = (0..ny).flat_map(|j| (0..nx).map(move |i| (i, j)))
            .map(|(i, j)| src.get(i, j))
            .collect();
        let bytes = packed(&src);
        prop_assert_eq!(&bytes[..], bytemuck::cast_slice::<i32, u8>(&model));
        let offsets: Vec<usize> = (0..ny)
            .flat_map(|j| (0..nx).map(move |i| i + j * sld))
            .collect();
        prop_assert_eq!(src.as_bytes().is_some(), contiguous(&offsets));
        prop_assert_eq!(src.is_dense(), contiguous(&offsets));

        // Into another leading dimension, through the interface and through a cell.
        let ld = nx + pad;
        let span = if nx == 0 || ny == 0 { 0 } else { ld * (ny - 1) + nx };
        let blank = Matrix::new(nx, ny, ld, vec![-1; span + tail]).unwrap();
        let mut dst = blank.clone();
        dst.unpack(&bytes).unwrap();
        let via_cell = transfer(src, blank);
        for m in [dst, via_cell] {
            for (k, &x) in m.as_slice().iter().enumerate() {
                let (j, i) = (k / ld.max(1), k % ld.max(1));
                if i < nx && j < ny {
                    prop_assert_eq!(x, model[i + j * nx]);
                } else {
                    prop_assert_eq!(x, -1, "padding at {} written", k);
                }
            }
        }
    }

    #[test]
    fn block_round_trips_over_random_shapes(
        src in any_block(),
        pady in 0..3_usize,
        padz in 0..3_usize,
    ) {
        let (nx, ny, nz) = (src.nx(), src.ny(), src.nz());
        let (sy, sz) = (src.ldy(), src.ldz());
        let coords: Vec<(usize, usize, usize)> = (0..nz)
            .flat_map(|z| (0..ny).flat_map(move |y| (0..nx).map(move |x| (x, y, z))))
            .collect();
        let model: Vec<i32> = coords.iter().map(|&(x, y, z)| src.get(x, y, z)).collect();
        let bytes = packed(&src);
        prop_assert_eq!(&bytes[..], bytemuck::cast_slice::<i32, u8>(&model));
        let offsets: Vec<usize> = coords.iter().map(|&(x, y, z)| x + y * sy + z * sz).collect();
        prop_assert_eq!(src.as_bytes().is_some(), contiguous(&offsets));
        prop_assert_eq!(src.is_dense(), contiguous(&offsets));

        let (ldy, ldz) = (nx + pady, (nx + pady) * ny + padz);
        let span = if model.is_empty() { 0 } else { ldz * (nz - 1) + ldy * (ny - 1) + nx };
        let blank = Block::new(nx, ny, nz, ldy, ldz, vec![-1; span + 1]).unwrap();
        let mut dst = blank.clone();
        dst.unpack(&bytes).unwrap();
        let via_cell = transfer(src, blank);
        let element_at: Vec<Option<i32>> = {
            let mut at = vec![None; span + 1];
            for (k, &(x, y, z)) in coords.iter().enumerate() {
                at[x + y * ldy + z * ldz] = Some(model[k]);
            }
            at
        };
        for b in [dst, via_cell] {
            for (k, &x) in b.as_slice().iter().enumerate() {
                prop_assert_eq!(x, element_at[k].unwrap_or(-1), "storage {}", k);
            }
        }
    }

    #[test]
    fn complex_round_trips(pairs in vec(any::<(f64, f64)>(), 0..32)) {
        let (re, im): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        let src = Complex::new(re, im).unwrap();
        let mut dst = Complex::zeros(src.len());
        dst.unpack(&packed(&src)).unwrap();
        let bits = |z: &Complex| -> Vec<u64> {
            z.real().iter().chain(z.imag()).map(|x| x.to_bits()).collect()
        };
        prop_assert_eq!(bits(&dst), bits(&src));
    }

    #[test]
    fn complex_unpack_of_arbitrary_bytes_never_panics(
        len in 0..4_usize,
        count in prop_oneof![0..5_u64, any::<u64>()],
        // Bodies of whole numbers too, so that some frames are well formed.
        body in prop_oneof![
            vec(any::<u8>(), 0..80),
            (0..5_usize).prop_flat_map(|n| vec(any::<u8>(), 16 * n)),
        ],
        raw in vec(any::<u8>(), 0..12),
    ) {
        let z = Complex::new(vec![1.0; len], vec![2.0; len]).unwrap();
        let framed = [count.to_le_bytes().to_vec(), body].concat();
        for bytes in [framed, raw] {
            let mut copy = z.clone();
            match copy.unpack(&bytes) {
                Ok(()) => {
                    prop_assert_eq!(bytes.len(), z.packed_size());
                    prop_assert_eq!(&bytes[..8], &(len as u64).to_le_bytes()[..]);
                    prop_assert_eq!(packed(&copy), bytes);
                }
                Err(_) => prop_assert_eq!(&copy, &z),
            }
        }
    }
}
