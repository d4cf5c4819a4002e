use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::runtime::interfaces::Block;
use crate::runtime::interfaces::tests::{assert_wrong_sizes_refused, contiguous, packed, transfer};

/// Every index of an array of the sizes `nn`, dimension 0 fastest (packed order).
fn indices(nn: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for &n in nn {
        out = (0..n)
            .flat_map(|i| {
                out.iter().map(move |prefix| {
                    let mut index = prefix.clone();
                    index.push(i);
                    index
                })
            })
            .collect();
    }
    // Each new dimension is the outer loop: dimension 0 ends up fastest.
    out
}

/// Strides that leave `pads[k]` elements of padding after each run of dimension `k`.
fn padded_strides(nn: &[usize], pads: &[usize]) -> Vec<usize> {
    let mut ldn = Vec::with_capacity(nn.len());
    let mut below = 1;
    for (k, &n) in nn.iter().enumerate() {
        let ld = if k == 0 { 1 } else { below + pads[k] };
        ldn.push(ld);
        below = ld * n;
    }
    ldn
}

#[test]
fn ndim_new_refuses_strides_inconsistent_with_sizes() {
    let refused = |nn: Vec<usize>, ldn: Vec<usize>, len: usize| {
        matches!(
            Ndim::new(nn, ldn, vec![0_u8; len]),
            Err(DataError::Malformed(_))
        )
    };
    assert!(refused(vec![2, 2], vec![1], 4), "one stride missing");
    assert!(
        refused(vec![2, 2], vec![2, 4], 8),
        "dimension 0 not contiguous"
    );
    assert!(
        refused(vec![3, 2], vec![1, 2], 8),
        "dimension 1 overlaps dimension 0"
    );
    assert!(
        refused(vec![2, 2, 2], vec![1, 2, 3], 8),
        "dimension 2 overlaps 1"
    );
    assert!(
        refused(vec![2, 2, 2], vec![1, 3, 6], 10),
        "storage short of the span (11)"
    );
    assert!(Ndim::new(vec![2, 2, 2], vec![1, 3, 6], vec![0_u8; 11]).is_ok());
    assert!(Ndim::new(vec![2, 2, 2], vec![1, 3, 6], vec![0_u8; 30]).is_ok());
}

#[test]
fn ndim_new_refuses_strides_that_overflow() {
    assert!(matches!(
        Ndim::new(vec![1, 3], vec![1, usize::MAX], vec![(); 4]),
        Err(DataError::Malformed(_))
    ));
    assert!(matches!(
        Ndim::new(
            vec![2, 2, 2],
            vec![1, usize::MAX / 2, usize::MAX],
            vec![(); 4]
        ),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn ndim_without_elements_needs_no_storage_whatever_its_strides() {
    for (nn, ldn) in [
        (vec![0, 5], vec![1, 0]),
        (vec![3, 0, 2], vec![1, 4, 4]),
        (vec![4, 4, 0], vec![1, 5, 100]),
    ] {
        let mut a = Ndim::<u16>::new(nn, ldn, Vec::new()).unwrap();
        assert!(a.is_empty());
        assert!(packed(&a).is_empty());
        assert_eq!(a.unpack(&[]), Ok(()));
        assert!(a.as_bytes_mut().is_some_and(|b| b.is_empty()));
    }
}

#[test]
fn ndim_of_no_dimension_is_one_element() {
    let mut a = Ndim::new(Vec::new(), Vec::new(), vec![7_i32]).unwrap();
    assert_eq!((a.ndim(), a.len()), (0, 1));
    assert_eq!(a.get(&[]), 7);
    assert_eq!(packed(&a), 7_i32.to_ne_bytes());
    a.unpack(&9_i32.to_ne_bytes()).unwrap();
    assert_eq!(a.as_slice(), &[9]);
    assert!(matches!(
        Ndim::<i32>::new(Vec::new(), Vec::new(), Vec::new()),
        Err(DataError::Malformed(_))
    ));
}

#[test]
fn ndim_elements_follow_the_strides() {
    let mut a = Ndim::new(vec![2, 3, 2], vec![1, 3, 10], (0..20_i32).collect()).unwrap();
    assert_eq!(
        (a.ndim(), a.nn(), a.ldn(), a.len()),
        (3, &[2, 3, 2][..], &[1, 3, 10][..], 12)
    );
    assert_eq!(a.get(&[1, 0, 0]), 1);
    assert_eq!(a.get(&[0, 2, 0]), 6);
    assert_eq!(a.get(&[1, 2, 1]), 17);
    a.set(&[0, 1, 1], -1);
    assert_eq!(a.as_slice()[13], -1);
    a.as_mut_slice()[4] = -2;
    assert_eq!(a.get(&[1, 1, 0]), -2);
    assert_eq!(a.into_vec().len(), 20);
}

#[test]
#[should_panic(expected = "out of range")]
fn ndim_get_past_a_size_panics_even_inside_the_padding() {
    let a = Ndim::new(vec![2, 2], vec![1, 3], vec![0_u8; 5]).unwrap();
    let _ = a.get(&[2, 0]);
}

#[test]
#[should_panic(expected = "out of range")]
fn ndim_get_with_too_few_coordinates_panics() {
    let a = Ndim::<u8>::zeros(&[2, 2]);
    let _ = a.get(&[1]);
}

#[test]
fn ndim_zeros_is_dense_with_prefix_product_strides() {
    let a = Ndim::<f32>::zeros(&[3, 4, 2, 5]);
    assert_eq!(a.ldn(), &[1, 3, 12, 24]);
    assert_eq!(a.as_slice().len(), 120);
    assert!(a.is_dense());
    assert_eq!(a.as_bytes().map(<[u8]>::len), Some(480));
}

#[test]
fn ndim_packs_dimension_0_fastest_and_skips_padding() {
    // 2 × 2 × 2, rows 3 apart, planes 7 apart: padding (-1) after each row and plane.
    let storage = vec![1, 2, -1, 3, 4, -1, -1, 5, 6, -1, 7, 8];
    let a = Ndim::new(vec![2, 2, 2], vec![1, 3, 7], storage).unwrap();
    assert!(!a.is_dense());
    assert!(a.as_bytes().is_none());
    assert_eq!(
        packed(&a),
        bytemuck::cast_slice::<i32, u8>(&[1, 2, 3, 4, 5, 6, 7, 8])
    );
}

#[test]
fn ndim_unpack_leaves_padding_untouched() {
    let src = Ndim::new(vec![2, 2, 2], vec![1, 2, 4], (1..=8_i32).collect()).unwrap();
    assert!(src.is_dense());
    let mut dst = Ndim::new(vec![2, 2, 2], vec![1, 3, 7], vec![-7_i32; 14]).unwrap();
    dst.unpack(&packed(&src)).unwrap();
    assert_eq!(
        dst.as_slice(),
        &[1, 2, -7, 3, 4, -7, -7, 5, 6, -7, 7, 8, -7, -7]
    );
}

#[test]
fn ndim_dimensions_of_one_element_do_not_break_the_fast_path() {
    // The stride of a dimension of size 1 is never used: the elements stay contiguous.
    let a = Ndim::new(vec![3, 2, 1], vec![1, 3, 50], vec![0_u8; 6]).unwrap();
    assert!(a.is_dense());
    assert_eq!(a.as_bytes().map(<[u8]>::len), Some(6));
    let b = Ndim::new(vec![3, 2, 1], vec![1, 4, 9], vec![0_u8; 7]).unwrap();
    assert!(!b.is_dense());
}

#[test]
fn ndim_unpack_of_wrong_size_is_refused_and_keeps_the_data() {
    assert_wrong_sizes_refused(Ndim::new(vec![2, 2], vec![1, 3], vec![1_u64, 2, 9, 3, 4]).unwrap());
    assert_wrong_sizes_refused(Ndim::<u64>::zeros(&[2, 3, 2]));
    assert_wrong_sizes_refused(Ndim::<u64>::zeros(&[2, 0]));
}

#[test]
fn ndim_shape_reallocates_zeroed_with_the_same_strides() {
    let a = Ndim::new(vec![2, 2], vec![1, 3], vec![5_i16; 6]).unwrap();
    let b = a.shape().expect("built-ins have a shape")();
    assert_eq!((b.nn(), b.ldn()), (a.nn(), a.ldn()));
    assert_eq!(b.as_slice(), &[0; 6]);
}

#[test]
fn ndim_of_three_dimensions_packs_as_a_block() {
    let storage: Vec<i32> = (0..40).collect();
    let a = Ndim::new(vec![3, 2, 2], vec![1, 4, 12], storage.clone()).unwrap();
    let b = Block::new(3, 2, 2, 4, 12, storage).unwrap();
    assert_eq!(packed(&a), packed(&b));
}

/// An array of random dimensions, sizes and padding over storage that may run past its
/// span; elements are non-negative so that -1 marks padding in the targets.
fn any_ndim() -> impl Strategy<Value = Ndim<i32>> {
    (vec(0..4_usize, 0..5), vec(0..3_usize, 5), 0..2_usize).prop_flat_map(|(nn, pads, tail)| {
        let ldn = padded_strides(&nn, &pads);
        let span = ndim_span(&nn, &ldn).unwrap();
        vec(0..i32::MAX, span + tail)
            .prop_map(move |data| Ndim::new(nn.clone(), ldn.clone(), data).expect("valid shape"))
    })
}

proptest! {
    #[test]
    fn ndim_round_trips_over_random_shapes(src in any_ndim(), pads in vec(0..3_usize, 5)) {
        let nn = src.nn().to_vec();
        let all = indices(&nn);
        let model: Vec<i32> = all.iter().map(|index| src.get(index)).collect();
        let bytes = packed(&src);
        prop_assert_eq!(&bytes[..], bytemuck::cast_slice::<i32, u8>(&model));
        let offset = |ldn: &[usize], index: &[usize]| -> usize {
            index.iter().zip(ldn).map(|(i, ld)| i * ld).sum()
        };
        let offsets: Vec<usize> = all.iter().map(|index| offset(src.ldn(), index)).collect();
        prop_assert_eq!(src.as_bytes().is_some(), contiguous(&offsets));
        prop_assert_eq!(src.is_dense(), contiguous(&offsets));

        // Into other strides, through the interface and through a cell.
        let ldn = padded_strides(&nn, &pads);
        let span = ndim_span(&nn, &ldn).unwrap();
        let blank = Ndim::new(nn, ldn.clone(), vec![-1; span + 1]).unwrap();
        let mut dst = blank.clone();
        dst.unpack(&bytes).unwrap();
        let via_cell = transfer(src, blank);
        let mut expected = vec![-1; span + 1];
        for (index, &x) in all.iter().zip(&model) {
            expected[offset(&ldn, index)] = x;
        }
        for a in [dst, via_cell] {
            prop_assert_eq!(a.as_slice(), &expected[..]);
        }
    }
}
