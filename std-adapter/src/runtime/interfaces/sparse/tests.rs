use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::runtime::interfaces::tests::{assert_wrong_sizes_refused, packed, transfer};

/// [ 1 0 2 ]
/// [ 0 0 0 ]
/// [ 0 3 0 ]
fn small() -> Csr<f64> {
    Csr::new(3, vec![1.0, 2.0, 3.0], vec![0, 2, 1], vec![0, 2, 2, 3], 0).unwrap()
}

/// Two 2 × 3 blocks on the diagonal of a 2 × 2 block matrix, Fortran-style pointers.
fn small_blocks() -> Bcsr<i32> {
    Bcsr::new(2, 3, 2, (1..=12).collect(), vec![0, 1], vec![1, 2, 3], 1).unwrap()
}

/// Byte offsets in a packed form: the header field `k`, and the start of the indices.
fn header_field(k: usize) -> Range<usize> {
    8 * k..8 * (k + 1)
}

/// Writes the little-endian `u32` `x` as index `k` (row pointers, then column indices).
fn put_index(bytes: &mut [u8], k: usize, x: u32) {
    let at = HEADER_BYTES + INDEX_BYTES * k;
    bytes[at..at + INDEX_BYTES].copy_from_slice(&x.to_le_bytes());
}

/// `unpack` of `bytes` is refused as an invalid payload and leaves `dst` unchanged.
fn assert_invalid<I: Interface + Clone + PartialEq + core::fmt::Debug>(dst: &I, bytes: &[u8]) {
    let mut copy = dst.clone();
    assert!(
        matches!(copy.unpack(bytes), Err(DataError::InvalidPayload(_))),
        "accepted or refused otherwise"
    );
    assert_eq!(&copy, dst);
}

#[test]
fn csr_new_refuses_invalid_patterns() {
    let refused = |ncol, nzval: Vec<f32>, colind: Vec<u32>, rowptr: Vec<u32>, first| {
        matches!(
            Csr::new(ncol, nzval, colind, rowptr, first),
            Err(DataError::Malformed(_))
        )
    };
    assert!(refused(3, vec![], vec![], vec![], 0), "no row pointer");
    assert!(
        refused(3, vec![1.0], vec![0], vec![1, 1], 0),
        "rowptr[0] != firstentry"
    );
    assert!(
        refused(3, vec![1.0, 2.0], vec![0, 1], vec![0, 2, 1, 2], 0),
        "decreasing"
    );
    assert!(
        refused(3, vec![1.0], vec![0], vec![0, 2], 0),
        "last != firstentry + nnz"
    );
    assert!(
        refused(3, vec![1.0], vec![3], vec![0, 1], 0),
        "column out of range"
    );
    assert!(
        refused(3, vec![1.0, 2.0], vec![0], vec![0, 1], 0),
        "nzval longer than colind"
    );
    assert!(Csr::new(3, vec![1.0_f32], vec![2], vec![1, 1, 2], 1).is_ok());
    assert!(Csr::<f32>::new(0, vec![], vec![], vec![5], 5).is_ok());
}

#[test]
fn csr_accessors_follow_the_pattern() {
    let mut a = small();
    assert_eq!((a.nrow(), a.ncol(), a.nnz(), a.firstentry()), (3, 3, 3, 0));
    assert_eq!(
        (a.rowptr(), a.colind()),
        (&[0, 2, 2, 3][..], &[0, 2, 1][..])
    );
    assert_eq!(a.row(0), (&[0, 2][..], &[1.0, 2.0][..]));
    assert_eq!(a.row(1), (&[][..], &[][..]));
    assert_eq!(a.get(2, 1), Some(3.0));
    assert_eq!(a.get(2, 2), None);
    a.nzval_mut()[2] = 4.0;
    assert_eq!(a.nzval(), &[1.0, 2.0, 4.0]);
    let (nzval, colind, rowptr) = a.into_parts();
    assert_eq!((nzval.len(), colind.len(), rowptr.len()), (3, 3, 4));
}

#[test]
fn csr_with_fortran_style_pointers_finds_its_entries() {
    let a = Csr::new(4, vec![5_u8, 6], vec![3, 0], vec![1, 2, 2, 3], 1).unwrap();
    assert_eq!(a.get(0, 3), Some(5));
    assert_eq!(a.get(2, 0), Some(6));
    assert_eq!(a.row(1).0.len(), 0);
}

#[test]
#[should_panic(expected = "out of range")]
fn csr_row_past_the_last_panics() {
    let _ = small().row(3);
}

#[test]
fn csr_zeros_is_a_valid_pattern_to_receive_into() {
    let z = Csr::<f64>::zeros(3, 3, 3).unwrap();
    assert_eq!(
        (z.rowptr(), z.colind(), z.nzval()),
        (&[0, 3, 3, 3][..], &[0, 0, 0][..], &[0.0; 3][..])
    );
    assert!(Csr::<f64>::zeros(0, 0, 0).is_ok());
    assert!(matches!(
        Csr::<f64>::zeros(0, 3, 1),
        Err(DataError::Malformed(_))
    ));
    assert!(matches!(
        Csr::<f64>::zeros(2, 0, 1),
        Err(DataError::Malformed(_))
    ));
    assert!(matches!(
        Csr::<u8>::zeros(1, 1, u32::MAX as usize + 1),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn csr_packs_header_pattern_then_values() {
    let a = small();
    let bytes = packed(&a);
    let mut expected = Vec::new();
    for x in [3_u64, 3, 3, 0, 1, 1] {
        expected.extend_from_slice(&x.to_le_bytes());
    }
    for x in [0_u32, 2, 2, 3, 0, 2, 1] {
        expected.extend_from_slice(&x.to_le_bytes());
    }
    expected.extend_from_slice(bytemuck::cast_slice(&[1.0_f64, 2.0, 3.0]));
    assert_eq!(bytes, expected);
    assert!(a.as_bytes().is_none());
    assert!(a.in_place().is_none());
}

#[test]
fn csr_receive_takes_the_senders_pattern_and_firstentry() {
    let src = Csr::new(4, vec![5_u8, 6], vec![3, 0], vec![1, 2, 2, 3], 1).unwrap();
    let dst = transfer(src.clone(), Csr::zeros(3, 4, 2).unwrap());
    assert_eq!(dst, src);
    let mut direct = Csr::zeros(3, 4, 2).unwrap();
    direct.unpack(&packed(&src)).unwrap();
    assert_eq!(direct, src);
}

#[test]
fn csr_unpack_of_wrong_size_is_refused_and_keeps_the_data() {
    assert_wrong_sizes_refused(small());
    assert_wrong_sizes_refused(Csr::<u16>::zeros(0, 0, 0).unwrap());
}

#[test]
fn csr_unpack_refuses_an_invalid_pattern_and_keeps_the_data() {
    let dst = Csr::<f64>::zeros(3, 3, 3).unwrap();
    let good = packed(&small());
    // Row pointers 0, 2, 2, 3 are indices 0..4; column indices 0, 2, 1 are 4..7.
    let tamper = |k: usize, x: u32| {
        let mut bytes = good.clone();
        put_index(&mut bytes, k, x);
        bytes
    };
    assert_invalid(&dst, &tamper(0, 1)); // does not start at firstentry
    assert_invalid(&dst, &tamper(1, 3)); // 3 then 2: decreasing
    assert_invalid(&dst, &tamper(3, 2)); // ends short of firstentry + nnz
    assert_invalid(&dst, &tamper(3, 4)); // ends past it
    assert_invalid(&dst, &tamper(5, 3)); // column 3 of 3
    assert_invalid(&dst, &tamper(6, u32::MAX));
    let mut bytes = good.clone();
    bytes[header_field(3)].copy_from_slice(&(u64::from(u32::MAX) + 1).to_le_bytes());
    assert_invalid(&dst, &bytes); // firstentry is not a u32
    // A consistent change of firstentry is accepted.
    let mut shifted = good.clone();
    shifted[header_field(3)].copy_from_slice(&2_u64.to_le_bytes());
    for (k, x) in [2_u32, 4, 4, 5].into_iter().enumerate() {
        put_index(&mut shifted, k, x);
    }
    let mut ok = dst;
    ok.unpack(&shifted).unwrap();
    assert_eq!((ok.firstentry(), ok.get(0, 2)), (2, Some(2.0)));
}

#[test]
fn csr_unpack_refuses_another_shape_of_the_same_size() {
    // 4 (nrow + 1) + 4 nnz + 4 nnz: nrow 4 with nnz 1 and nrow 2 with nnz 2 both give 36.
    let src = Csr::new(2, vec![7_u32], vec![1], vec![0, 0, 1, 1, 1], 0).unwrap();
    let dst = Csr::<u32>::zeros(2, 2, 2).unwrap();
    assert_eq!(src.packed_size(), dst.packed_size());
    assert_invalid(&dst, &packed(&src));
    // Another ncol alone is refused too.
    let wide = Csr::<u32>::zeros(4, 3, 1).unwrap();
    assert_invalid(&wide, &packed(&src));
}

#[test]
fn csr_shape_reallocates_zeroed_with_the_same_pattern() {
    let a = small();
    let z = a.shape().expect("built-ins have a shape")();
    assert_eq!((z.rowptr(), z.colind()), (a.rowptr(), a.colind()));
    assert_eq!(z.nzval(), &[0.0; 3]);
}

#[test]
fn bcsr_new_refuses_empty_blocks_and_wrong_value_counts() {
    let refused = |r, c, nzval: Vec<u8>| {
        matches!(
            Bcsr::new(r, c, 2, nzval, vec![1], vec![0, 1], 0),
            Err(DataError::Malformed(_))
        )
    };
    assert!(refused(0, 2, vec![]), "no row in a block");
    assert!(refused(2, 0, vec![]), "no column in a block");
    assert!(refused(2, 2, vec![0; 3]), "one value short");
    assert!(refused(2, 2, vec![0; 5]), "one value too many");
    assert!(!refused(2, 2, vec![0; 4]));
    assert!(matches!(
        Bcsr::new(1, 1, 2, vec![0_u8], vec![2], vec![0, 1], 0),
        Err(DataError::Malformed(_))
    ));
    assert!(matches!(
        Bcsr::<u8>::zeros(1, 1, 1, usize::MAX, 2),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn bcsr_accessors_address_blocks_and_elements() {
    let mut a = small_blocks();
    assert_eq!((a.nrow(), a.ncol(), a.nnz(), a.r(), a.c()), (2, 2, 2, 2, 3));
    assert_eq!(
        (a.firstentry(), a.rowptr(), a.colind()),
        (1, &[1, 2, 3][..], &[0, 1][..])
    );
    assert_eq!(a.block(0), &[1, 2, 3, 4, 5, 6]);
    // Row 3 is row 1 of block row 1; column 4 is column 1 of block column 1.
    assert_eq!(a.get(3, 4), Some(11));
    assert_eq!(a.get(1, 2), Some(6));
    assert_eq!(a.get(0, 3), None);
    a.block_mut(1)[0] = -7;
    assert_eq!(a.get(2, 3), Some(-7));
    a.nzval_mut()[1] = -2;
    assert_eq!(a.nzval()[..2], [1, -2]);
    assert_eq!(a.into_parts().0.len(), 12);
}

#[test]
#[should_panic(expected = "out of range")]
fn bcsr_block_past_the_last_panics() {
    let _ = small_blocks().block(2);
}

#[test]
fn bcsr_round_trips_and_refuses_other_block_sizes() {
    let src = small_blocks();
    let dst = transfer(src.clone(), Bcsr::zeros(2, 2, 2, 2, 3).unwrap());
    assert_eq!(dst, src);
    assert_wrong_sizes_refused(src.clone());
    // 3 × 2 blocks: the same number of values, another shape.
    let other = Bcsr::<i32>::zeros(2, 2, 2, 3, 2).unwrap();
    assert_eq!(other.packed_size(), src.packed_size());
    assert_invalid(&other, &packed(&src));
    // A block column out of range.
    let mut bytes = packed(&src);
    put_index(&mut bytes, 4, 2);
    assert_invalid(&Bcsr::<i32>::zeros(2, 2, 2, 2, 3).unwrap(), &bytes);
}

/// A valid CSR matrix of random shape and pattern.
fn any_csr() -> impl Strategy<Value = Csr<i64>> {
    (0..5_usize, 1..5_u32, 0..2_u32).prop_flat_map(|(nrow, ncol, first)| {
        vec(vec((0..ncol, any::<i64>()), 0..4), nrow).prop_map(move |rows| {
            let mut rowptr = vec![first];
            let (mut colind, mut nzval) = (Vec::new(), Vec::new());
            for row in rows {
                for (j, x) in row {
                    colind.push(j);
                    nzval.push(x);
                }
                rowptr.push(first + colind.len() as u32);
            }
            Csr::new(ncol, nzval, colind, rowptr, first).expect("valid pattern")
        })
    })
}

proptest! {
    #[test]
    fn csr_round_trips_over_random_patterns(src in any_csr()) {
        let blank = Csr::zeros(src.nrow(), src.ncol(), src.nnz()).unwrap();
        let mut dst = blank.clone();
        dst.unpack(&packed(&src)).unwrap();
        prop_assert_eq!(&dst, &src);
        prop_assert_eq!(transfer(src.clone(), blank), src);
    }

    #[test]
    fn csr_unpack_of_mutated_bytes_never_panics(
        src in any_csr(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        raw in vec(any::<u8>(), 0..120),
    ) {
        let good = packed(&src);
        let mut mutated = good.clone();
        for (at, byte) in edits {
            let k = at.index(mutated.len());
            mutated[k] = byte;
        }
        let truncated = good[..cut.index(good.len())].to_vec();
        let dst = Csr::<i64>::zeros(src.nrow(), src.ncol(), src.nnz()).unwrap();
        for bytes in [mutated, truncated, raw] {
            let mut copy = dst.clone();
            match copy.unpack(&bytes) {
                Ok(()) => {
                    // Whatever was accepted is a valid matrix that packs back to it.
                    prop_assert_eq!(packed(&copy), bytes);
                    let (nzval, colind, rowptr) = copy.clone().into_parts();
                    prop_assert!(
                        Csr::new(copy.ncol(), nzval, colind, rowptr, copy.firstentry()).is_ok()
                    );
                }
                Err(DataError::SizeMismatch { expected, got }) => {
                    prop_assert_eq!((expected, got), (dst.packed_size(), bytes.len()));
                    prop_assert_eq!(&copy, &dst);
                }
                Err(DataError::InvalidPayload(_)) => prop_assert_eq!(&copy, &dst),
                Err(e) => prop_assert!(false, "unexpected error {e:?}"),
            }
        }
    }
}
