use std::collections::BTreeMap;
use std::string::ToString;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

// ---- TagSpace ----

#[test]
fn minimal_mpi_bound_gives_reference_base_and_split_halves() {
    let t = TagSpace::new(MIN_TAG_UB).unwrap();
    assert_eq!(t.envelope(), PhysTag(42));
    assert_eq!(t.tag_ub(), MIN_TAG_UB);
    // 32767 - 42 = 32725 tags after the base: two classes of 16362, the top tag unused.
    assert_eq!(t.class_len(), 16362);
    assert_eq!(t.data_tags(), PhysTag(43)..=PhysTag(16404));
    assert_eq!(t.sync_tags(), PhysTag(16405)..=PhysTag(32766));
    assert_eq!(t.classify(PhysTag(32767)), None);
    assert_eq!(t.data(MsgId(0)), PhysTag(43));
    assert_eq!(t.sync(MsgId(0)), PhysTag(16405));
}

#[test]
fn message_ids_wrap_around_their_class() {
    let t = TagSpace::new(MIN_TAG_UB).unwrap();
    let n = t.class_len();
    assert_eq!(t.data(MsgId(n)), t.data(MsgId(0)));
    assert_eq!(t.data(MsgId(n - 1)), PhysTag(16404));
    assert_eq!(t.sync(MsgId(n + 5)), t.sync(MsgId(5)));
    assert_eq!(t.data(MsgId(u32::MAX)), t.data(MsgId(u32::MAX % n)));
}

#[test]
fn largest_bound_reaches_i32_max_without_overflow() {
    // tag_ub - base even: the sync class ends exactly on i32::MAX.
    let t = TagSpace::with_base(41, i32::MAX).unwrap();
    assert_eq!(*t.sync_tags().end(), PhysTag(i32::MAX));
    assert_eq!(t.classify(PhysTag(i32::MAX)), Some(TagClass::Sync));
    assert_eq!(t.sync(MsgId(t.class_len() - 1)), PhysTag(i32::MAX));
    // tag_ub - base odd: i32::MAX is the spare tag.
    let t = TagSpace::new(i32::MAX).unwrap();
    assert_eq!(*t.sync_tags().end(), PhysTag(i32::MAX - 1));
    assert_eq!(t.classify(PhysTag(i32::MAX)), None);
}

#[test]
fn smallest_bound_gives_one_tag_per_class() {
    let t = TagSpace::new(DEFAULT_BASE + 2).unwrap();
    assert_eq!(t.class_len(), 1);
    for m in [0, 1, 7, u32::MAX] {
        assert_eq!(t.data(MsgId(m)), PhysTag(43));
        assert_eq!(t.sync(MsgId(m)), PhysTag(44));
    }
    let zero = TagSpace::with_base(0, 2).unwrap();
    assert_eq!(zero.envelope(), PhysTag(0));
    assert_eq!(zero.data(MsgId(9)), PhysTag(1));
    assert_eq!(zero.sync(MsgId(9)), PhysTag(2));
}

#[test]
fn bound_too_small_is_an_error() {
    assert_eq!(
        TagSpace::new(DEFAULT_BASE + 1),
        Err(TagError::BoundTooSmall {
            tag_ub: 43,
            needed: 44
        })
    );
    assert_eq!(
        TagSpace::new(-1),
        Err(TagError::BoundTooSmall {
            tag_ub: -1,
            needed: 44
        })
    );
    // A base near i32::MAX: the needed bound does not fit i32 and is still reported.
    assert_eq!(
        TagSpace::with_base(i32::MAX, i32::MAX),
        Err(TagError::BoundTooSmall {
            tag_ub: i32::MAX,
            needed: i32::MAX as i64 + 2
        })
    );
    assert_eq!(
        TagError::BoundTooSmall {
            tag_ub: 43,
            needed: 44
        }
        .to_string(),
        "the transport's tag bound 43 is too small: the tag layout needs at least 44"
    );
}

#[test]
fn negative_base_is_an_error() {
    assert_eq!(
        TagSpace::with_base(-1, MIN_TAG_UB),
        Err(TagError::NegativeBase { base: -1 })
    );
}

#[test]
fn classify_rejects_unused_tags() {
    let t = TagSpace::with_base(100, 1000).unwrap();
    for tag in [i32::MIN, -1, 0, 99, 1001, i32::MAX] {
        assert_eq!(t.classify(PhysTag(tag)), None, "tag {tag}");
    }
    assert_eq!(t.classify(PhysTag(100)), Some(TagClass::Envelope));
    assert_eq!(t.classify(PhysTag(101)), Some(TagClass::Data));
    assert_eq!(t.classify(PhysTag(550)), Some(TagClass::Data));
    assert_eq!(t.classify(PhysTag(551)), Some(TagClass::Sync));
    assert_eq!(t.classify(PhysTag(1000)), Some(TagClass::Sync));
}

fn spaces() -> impl Strategy<Value = TagSpace> {
    prop_oneof![
        Just(TagSpace::new(MIN_TAG_UB).unwrap()),
        Just(TagSpace::new(i32::MAX).unwrap()),
        Just(TagSpace::with_base(41, i32::MAX).unwrap()),
        (0i32..1000, 2i32..100_000)
            .prop_map(|(b, extra)| TagSpace::with_base(b, b + extra).unwrap()),
        Just(TagSpace::new(MIN_TAG_UB).unwrap().with_fast()),
        Just(TagSpace::new(i32::MAX).unwrap().with_fast()),
        (0i32..1000, 2i32..100_000)
            .prop_map(|(b, extra)| TagSpace::with_base(b, b + extra).unwrap().with_fast()),
    ]
}

#[test]
fn a_fast_class_takes_the_upper_half_and_leaves_one_tag_per_payload_class() {
    let t = TagSpace::with_base(100, 1000).unwrap().with_fast();
    // 900 tags above the base: 450 fast, 225 per payload class.
    assert_eq!((t.fast_len(), t.class_len()), (450, 225));
    assert_eq!(t.fast(Tag(0)), Some(PhysTag(551)));
    assert_eq!(t.fast(Tag(449)), Some(PhysTag(1000)));
    assert_eq!(t.fast(Tag(450)), None);
    assert_eq!(t.fast(Tag(-1)), None);
    assert_eq!(t.classify(PhysTag(550)), Some(TagClass::Sync));
    assert_eq!(t.classify(PhysTag(551)), Some(TagClass::Fast));
    // The smallest bound with a fast class: one tag for each class.
    let small = TagSpace::with_base(100, 103).unwrap().with_fast();
    assert_eq!((small.fast_len(), small.class_len()), (1, 1));
    assert_eq!(small.fast(Tag(0)), Some(PhysTag(103)));
    // Too small for one: unchanged, no user tag is fast.
    assert_eq!(t.fast_user_tag(PhysTag(1000)), Some(Tag(449)));
    assert_eq!(t.fast_user_tag(PhysTag(550)), None);
    let tiny = TagSpace::with_base(100, 102).unwrap();
    assert_eq!(tiny.with_fast(), tiny);
    assert_eq!(tiny.fast(Tag(0)), None);
    assert_eq!(TagSpace::new(MIN_TAG_UB).unwrap().fast_len(), 0);
}

proptest! {
    #[test]
    fn every_tag_is_in_bounds_and_classified_back(space in spaces(), msg in any::<u32>()) {
        let msg = MsgId(msg);
        let (env, data, sync) = (space.envelope(), space.data(msg), space.sync(msg));
        for tag in [env, data, sync] {
            prop_assert!((0..=space.tag_ub()).contains(&tag.0), "{tag:?} out of bounds");
        }
        prop_assert_eq!(space.classify(env), Some(TagClass::Envelope));
        prop_assert_eq!(space.classify(data), Some(TagClass::Data));
        prop_assert_eq!(space.classify(sync), Some(TagClass::Sync));
        prop_assert!(space.data_tags().contains(&data));
        prop_assert!(space.sync_tags().contains(&sync));
        prop_assert_eq!(data.0 - space.data_tags().start().0, (msg.0 % space.class_len()) as i32);
        prop_assert_eq!(sync.0 - data.0, space.class_len() as i32);
    }

    #[test]
    fn every_fast_tag_is_in_bounds_and_classified_back(space in spaces(), tag in any::<i64>()) {
        match space.fast(Tag(tag)) {
            Some(t) => {
                prop_assert!((0..space.fast_len() as i64).contains(&tag));
                prop_assert!((0..=space.tag_ub()).contains(&t.0), "{t:?} out of bounds");
                prop_assert_eq!(space.classify(t), Some(TagClass::Fast));
                prop_assert_eq!(t.0 as i64 - tag, space.sync_tags().end().0 as i64 + 1);
                prop_assert_eq!(space.fast_user_tag(t), Some(Tag(tag)));
            }
            None => prop_assert!(tag < 0 || tag >= space.fast_len() as i64),
        }
    }

    #[test]
    fn classes_are_disjoint_and_cover_the_layout(space in spaces(), tag in any::<i32>()) {
        let t = PhysTag(tag);
        let in_data = space.data_tags().contains(&t);
        let in_sync = space.sync_tags().contains(&t);
        let is_env = t == space.envelope();
        let fast_start = space.sync_tags().end().0 as i64 + 1;
        let in_fast = (fast_start..fast_start + space.fast_len() as i64).contains(&(tag as i64));
        prop_assert!(
            u8::from(in_data) + u8::from(in_sync) + u8::from(is_env) + u8::from(in_fast) <= 1
        );
        let expected = if in_fast {
            Some(TagClass::Fast)
        } else if is_env {
            Some(TagClass::Envelope)
        } else if in_data {
            Some(TagClass::Data)
        } else if in_sync {
            Some(TagClass::Sync)
        } else {
            None
        };
        prop_assert_eq!(space.classify(t), expected);
    }
}

// ---- TagAllocator ----

#[test]
fn allocate_returns_lowest_free_start() {
    let mut a = TagAllocator::<8>::new();
    assert_eq!(a.allocate(10), Ok(Tag(0)));
    assert_eq!(a.allocate(10), Ok(Tag(10)));
    assert_eq!(a.allocate(10), Ok(Tag(20)));
    a.free(Tag(10)).unwrap();
    // Too big for the hole 10..20: goes after the last range.
    assert_eq!(a.allocate(11), Ok(Tag(30)));
    // Fits the hole.
    assert_eq!(a.allocate(4), Ok(Tag(10)));
    assert_eq!(a.allocate(6), Ok(Tag(14)));
    assert_eq!(a.allocate(1), Ok(Tag(41)));
    let ranges: Vec<_> = a.ranges().collect();
    assert_eq!(
        ranges,
        [
            (Tag(0), 10),
            (Tag(10), 4),
            (Tag(14), 6),
            (Tag(20), 10),
            (Tag(30), 11),
            (Tag(41), 1)
        ]
    );
    assert_eq!(a.len(), 6);
}

#[test]
fn zero_tags_is_an_error() {
    let mut a = TagAllocator::<2>::new();
    assert_eq!(a.allocate(0), Err(TagAllocError::Zero));
    assert!(a.is_empty());
}

#[test]
fn full_when_capacity_ranges_are_allocated() {
    let mut a = TagAllocator::<2>::new();
    a.allocate(1).unwrap();
    a.allocate(1).unwrap();
    assert_eq!(a.allocate(1), Err(TagAllocError::Full { capacity: 2 }));
    assert_eq!(a.capacity(), 2);
    a.free(Tag(0)).unwrap();
    assert_eq!(a.allocate(1), Ok(Tag(0)));
}

#[test]
fn exhausted_when_no_gap_is_large_enough() {
    let mut a = TagAllocator::<8>::with_max(Tag(99));
    assert_eq!(a.allocate(40), Ok(Tag(0)));
    assert_eq!(a.allocate(40), Ok(Tag(40)));
    a.free(Tag(0)).unwrap();
    assert_eq!(
        a.allocate(41),
        Err(TagAllocError::Exhausted {
            requested: 41,
            largest_free: 40
        })
    );
    assert_eq!(a.allocate(20), Ok(Tag(0)));
    assert_eq!(a.allocate(20), Ok(Tag(20)));
    assert_eq!(a.allocate(20), Ok(Tag(80)));
    assert!(a.is_allocated(Tag(99)));
    assert_eq!(
        a.allocate(1),
        Err(TagAllocError::Exhausted {
            requested: 1,
            largest_free: 0
        })
    );
}

#[test]
fn whole_non_negative_range_is_allocatable() {
    let mut a = TagAllocator::<4>::new();
    assert_eq!(a.allocate(1 << 63), Ok(Tag(0)));
    assert!(a.is_allocated(Tag(i64::MAX)));
    assert!(!a.is_allocated(Tag(-1)));
    assert!(matches!(
        a.allocate(1),
        Err(TagAllocError::Exhausted { requested: 1, .. })
    ));
    a.free(Tag(0)).unwrap();
    assert_eq!(
        a.allocate(u64::MAX),
        Err(TagAllocError::Exhausted {
            requested: u64::MAX,
            largest_free: 1 << 63
        })
    );
    assert_eq!(a.allocate(i64::MAX as u64), Ok(Tag(0)));
    assert_eq!(a.allocate(1), Ok(Tag(i64::MAX)));
}

#[test]
fn negative_max_gives_an_empty_allocator() {
    let mut a = TagAllocator::<4>::with_max(Tag(-5));
    assert_eq!(
        a.allocate(1),
        Err(TagAllocError::Exhausted {
            requested: 1,
            largest_free: 0
        })
    );
}

#[test]
fn free_of_unallocated_start_is_an_error() {
    let mut a = TagAllocator::<4>::new();
    a.allocate(10).unwrap();
    for bad in [Tag(1), Tag(10), Tag(-1), Tag(i64::MIN)] {
        assert_eq!(a.free(bad), Err(TagAllocError::NotAllocated { start: bad }));
    }
    a.free(Tag(0)).unwrap();
    assert_eq!(
        a.free(Tag(0)),
        Err(TagAllocError::NotAllocated { start: Tag(0) })
    );
    assert_eq!(
        TagAllocError::NotAllocated { start: Tag(7) }.to_string(),
        "no allocated tag range starts at tag 7"
    );
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc(u64),
    /// Frees the i-th allocated range (modulo their number), or a random tag if none.
    Free(usize, i64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..30).prop_map(Op::Alloc),
            2 => (any::<usize>(), -2i64..120).prop_map(|(i, t)| Op::Free(i, t)),
        ],
        0..if cfg!(miri) { 12 } else { 60 },
    )
}

/// The reference model: a map start -> end, searched the obvious way.
#[derive(Default)]
struct Model {
    ranges: BTreeMap<u64, u64>,
}

impl Model {
    fn allocate(&mut self, n: u64, limit: u64, cap: usize) -> Result<Tag, TagAllocError> {
        if n == 0 {
            return Err(TagAllocError::Zero);
        }
        if self.ranges.len() == cap {
            return Err(TagAllocError::Full { capacity: cap });
        }
        // Try every candidate start: 0 and every range end, lowest first.
        let candidates = core::iter::once(0).chain(self.ranges.values().copied());
        let mut best = None;
        for start in candidates {
            let end = start + n;
            let overlaps = self.ranges.iter().any(|(&lo, &hi)| lo < end && start < hi);
            if end <= limit && !overlaps {
                best = Some(best.map_or(start, |b: u64| b.min(start)));
            }
        }
        match best {
            Some(start) => {
                self.ranges.insert(start, start + n);
                Ok(Tag(start as i64))
            }
            None => {
                let mut free = Vec::new();
                let mut lo = 0;
                for (&s, &e) in &self.ranges {
                    free.push(s - lo);
                    lo = e;
                }
                free.push(limit - lo);
                Err(TagAllocError::Exhausted {
                    requested: n,
                    largest_free: free.into_iter().max().unwrap_or(0),
                })
            }
        }
    }

    fn free(&mut self, start: Tag) -> Result<(), TagAllocError> {
        let removed = u64::try_from(start.0)
            .ok()
            .and_then(|s| self.ranges.remove(&s));
        removed
            .map(|_| ())
            .ok_or(TagAllocError::NotAllocated { start })
    }
}

proptest! {
    #[test]
    fn allocator_matches_btreemap_model(ops in ops()) {
        const MAX: i64 = 99;
        let mut a = TagAllocator::<6>::with_max(Tag(MAX));
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Alloc(n) => {
                    prop_assert_eq!(a.allocate(n), m.allocate(n, MAX as u64 + 1, 6), "allocate({})", n);
                }
                Op::Free(i, t) => {
                    // Mostly an allocated start; sometimes a tag that may not start a range.
                    let start = if m.ranges.is_empty() || t % 4 == 0 {
                        Tag(t)
                    } else {
                        let k = i % m.ranges.len();
                        Tag(*m.ranges.keys().nth(k).unwrap() as i64)
                    };
                    prop_assert_eq!(a.free(start), m.free(start), "free({:?})", start);
                }
            }
            let ours: Vec<_> = a.ranges().map(|(t, n)| (t.0 as u64, t.0 as u64 + n)).collect();
            let model: Vec<_> = m.ranges.iter().map(|(&s, &e)| (s, e)).collect();
            prop_assert_eq!(ours, model);
            for t in [-1i64, 0, 50, MAX, MAX + 1] {
                let inside = m.ranges.iter().any(|(&s, &e)| t >= 0 && s <= t as u64 && (t as u64) < e);
                prop_assert_eq!(a.is_allocated(Tag(t)), inside);
            }
        }
    }

    #[test]
    fn ranks_calling_in_the_same_order_get_the_same_tags(ops in ops()) {
        // Four "ranks", each with its own allocator, replaying the same calls.
        let mut ranks: Vec<TagAllocator<6>> = (0..4).map(|_| TagAllocator::with_max(Tag(99))).collect();
        let mut allocated: Vec<Tag> = Vec::new();
        for op in ops {
            let results: Vec<_> = match op {
                Op::Alloc(n) => ranks.iter_mut().map(|r| r.allocate(n).map(Some)).collect(),
                Op::Free(i, t) => {
                    let start = if allocated.is_empty() { Tag(t) } else { allocated.remove(i % allocated.len()) };
                    ranks.iter_mut().map(|r| r.free(start).map(|()| None)).collect()
                }
            };
            for r in &results[1..] {
                prop_assert_eq!(r, &results[0]);
            }
            if let Ok(Some(tag)) = results[0] {
                allocated.push(tag);
            }
        }
    }
}
