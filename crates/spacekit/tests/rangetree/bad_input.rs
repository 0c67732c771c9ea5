//! Range tree bad input: typed errors that change nothing (inverted and
//! overlapping ranges, unsorted bulk loads, gap-search and allocation
//! arguments, empty and reversed ranges), and `range` with every kind of
//! bound.

use crate::checks::{check, check_range, tree_alloc, tree_find, validate};
use crate::model::{Model, E, MAX};
use spacekit::rangetree::RangeTree;
use std::hint::black_box;
use std::ops::Bound;

/// Four entries with gaps, the last touching u64::MAX.
const SMALL_BASE: [(u64, u64, u64); 4] = [(10, 19, 1), (20, 29, 2), (40, 49, 3), (MAX - 9, MAX, 4)];

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let base = SMALL_BASE;
    let m = Model::from_entries(&base);
    let mut t = RangeTree::from_sorted(base).unwrap();
    check(&t, &m, "base");

    // first > last.
    assert_eq!(
        t.insert_range(5, 4, 9),
        Err(E::InvalidRange { first: 5, last: 4 })
    );
    check(&t, &m, "insert first > last");
    assert_eq!(
        t.insert_range(MAX, 0, 9),
        Err(E::InvalidRange {
            first: MAX,
            last: 0
        })
    );
    check(&t, &m, "insert MAX..0");
    assert_eq!(
        t.store_range(25, 15, 9),
        Err(E::InvalidRange {
            first: 25,
            last: 15
        })
    );
    check(&t, &m, "store first > last");
    assert_eq!(
        t.store_range(MAX, 0, 9),
        Err(E::InvalidRange {
            first: MAX,
            last: 0
        })
    );
    check(&t, &m, "store MAX..0");
    assert_eq!(
        t.remove_range(49, 40),
        Err(E::InvalidRange {
            first: 49,
            last: 40
        })
    );
    check(&t, &m, "remove first > last");
    assert_eq!(
        t.remove_range(1, 0),
        Err(E::InvalidRange { first: 1, last: 0 })
    );
    check(&t, &m, "remove 1..0");

    // Overlapping inserts name the lowest overlapping entry.
    for (f, l, want) in [
        (15, 45, (10, 19)),
        (0, MAX, (10, 19)),
        (0, 10, (10, 19)),
        (19, 20, (10, 19)),
        (25, 100, (20, 29)),
        (29, 29, (20, 29)),
        (30, 40, (40, 49)),
        (49, MAX - 9, (40, 49)),
        (50, MAX, (MAX - 9, MAX)),
        (MAX, MAX, (MAX - 9, MAX)),
    ] {
        let got = t.insert_range(f, l, 9);
        assert_eq!(
            got,
            Err(E::Occupied {
                first: want.0,
                last: want.1
            }),
            "insert [{f}, {l}]"
        );
        assert_eq!(got, m.clone().insert(f, l, 9), "model agrees on [{f}, {l}]");
        check(&t, &m, &format!("after the refused insert [{f}, {l}]"));
    }
    // The free slots in between still take entries.
    t.insert_range(30, 39, 5).unwrap();
    t.insert_range(0, 9, 6).unwrap();
    validate(&t, "fill");
    assert_eq!(t.erase(35), Some(5));
    assert_eq!(t.erase(0), Some(6));
    check(&t, &m, "filled and erased again");

    // Bulk loads.
    let bad = |entries: Vec<(u64, u64, u64)>| RangeTree::from_sorted(entries).err();
    assert_eq!(
        bad(vec![(5, 4, 0)]),
        Some(E::InvalidRange { first: 5, last: 4 })
    );
    assert_eq!(
        bad(vec![(0, 9, 0), (9, 12, 1)]),
        Some(E::Unsorted { first: 9, last: 12 })
    );
    assert_eq!(
        bad(vec![(10, 20, 0), (0, 5, 1)]),
        Some(E::Unsorted { first: 0, last: 5 })
    );
    assert_eq!(
        bad(vec![(0, 0, 0), (0, 0, 1)]),
        Some(E::Unsorted { first: 0, last: 0 })
    );
    assert_eq!(
        bad(vec![(0, MAX, 0), (MAX, MAX, 1)]),
        Some(E::Unsorted {
            first: MAX,
            last: MAX
        })
    );
    let prefix: Vec<_> = (0..100u64).map(|i| (i * 4, i * 4 + 1, i)).collect();
    let mut late = prefix.clone();
    late.push((50, 60, 100));
    late.push((1000, 1001, 101));
    assert_eq!(
        bad(late),
        Some(E::Unsorted {
            first: 50,
            last: 60
        })
    );
    let mut late = prefix.clone();
    late.push((1000, 999, 100));
    assert_eq!(
        bad(late),
        Some(E::InvalidRange {
            first: 1000,
            last: 999
        })
    );
    let mut late = prefix.clone();
    late.push((397, 400, 100)); // the prefix ends at 397
    assert_eq!(
        bad(late),
        Some(E::Unsorted {
            first: 397,
            last: 400
        })
    );
    // Adjacent entries are sorted.
    let ok = vec![(0, 9, 0u64), (10, 12, 1), (13, MAX, 2)];
    let t2 = RangeTree::from_sorted(ok.clone()).unwrap();
    check(&t2, &Model::from_entries(&ok), "adjacent bulk load");
    let empty = RangeTree::<u64>::from_sorted(Vec::new()).unwrap();
    check(&empty, &Model::new(), "empty bulk load");

    // Gap-search arguments, checked in order: window, size, alignment,
    // window size (alignment not considered).
    for rev in [false, true] {
        for align in [None, Some(1), Some(8)] {
            let f = |size: u64, lo: u64, hi: u64| tree_find(&t, size, align, lo, hi, rev);
            let what = format!("rev {rev} align {align:?}");
            assert_eq!(
                f(1, 9, 8),
                Err(E::InvalidRange { first: 9, last: 8 }),
                "{what}"
            );
            assert_eq!(
                f(0, 9, 8),
                Err(E::InvalidRange { first: 9, last: 8 }),
                "{what}"
            );
            assert_eq!(
                f(0, MAX, 0),
                Err(E::InvalidRange {
                    first: MAX,
                    last: 0
                }),
                "{what}"
            );
            assert_eq!(f(0, 0, MAX), Err(E::ZeroSize), "{what}");
            assert_eq!(f(0, 5, 5), Err(E::ZeroSize), "{what}");
            assert_eq!(
                f(11, 0, 9),
                Err(E::WindowTooSmall {
                    size: 11,
                    first: 0,
                    last: 9
                }),
                "{what}"
            );
            assert_eq!(
                f(2, MAX, MAX),
                Err(E::WindowTooSmall {
                    size: 2,
                    first: MAX,
                    last: MAX
                }),
                "{what}"
            );
            assert_eq!(
                f(MAX, 1, MAX),
                Ok(None),
                "{what}: MAX indices fit in the window"
            );
            assert_eq!(f(MAX, 0, MAX), Ok(None), "{what}");
            assert_eq!(f(10, 0, 9), Ok(Some(0)), "{what}: [0, 9] is free");
            assert_eq!(f(1, 10, 29), Ok(None), "{what}: [10, 29] is full");
        }
        for align in [0u64, 3, 6, 12, (1 << 63) + 1, MAX] {
            let f = |size: u64, lo: u64, hi: u64| {
                if rev {
                    t.find_gap_rev_aligned(size, align, lo..=hi)
                } else {
                    t.find_gap_aligned(size, align, lo..=hi)
                }
            };
            assert_eq!(f(1, 0, MAX), Err(E::BadAlignment { align }));
            assert_eq!(f(1, 9, 8), Err(E::InvalidRange { first: 9, last: 8 }));
            assert_eq!(f(0, 0, MAX), Err(E::ZeroSize));
            assert_eq!(f(100, 0, 9), Err(E::BadAlignment { align }));
        }
        // The window holds exactly `size` indices but no aligned start:
        // no fit, not WindowTooSmall.
        let (f, g) = if rev {
            (
                t.find_gap_rev_aligned(10, 8, 51..=60),
                t.find_gap_rev(10, 51..=60),
            )
        } else {
            (t.find_gap_aligned(10, 8, 51..=60), t.find_gap(10, 51..=60))
        };
        assert_eq!(f, Ok(None));
        assert_eq!(g, Ok(Some(51)));
    }
    check(&t, &m, "after the searches");

    // Allocation: the same argument errors, then NoSpace; nothing changes.
    for rev in [false, true] {
        let mut a = |size: u64, lo: u64, hi: u64| tree_alloc(&mut t, size, lo, hi, rev, 9);
        assert_eq!(a(1, 9, 8), Err(E::InvalidRange { first: 9, last: 8 }));
        assert_eq!(a(0, 9, 8), Err(E::InvalidRange { first: 9, last: 8 }));
        assert_eq!(a(0, 0, MAX), Err(E::ZeroSize));
        assert_eq!(
            a(11, 0, 9),
            Err(E::WindowTooSmall {
                size: 11,
                first: 0,
                last: 9
            })
        );
        assert_eq!(a(11, 0, 19), Err(E::NoSpace { size: 11 }));
        assert_eq!(a(1, 10, 29), Err(E::NoSpace { size: 1 }));
        assert_eq!(a(MAX, 0, MAX), Err(E::NoSpace { size: MAX }));
        assert_eq!(a(1, MAX - 9, MAX), Err(E::NoSpace { size: 1 }));
        check(&t, &m, &format!("after the refused allocations rev {rev}"));
    }

    // Empty and reversed ranges yield nothing and do not panic.
    let (a, b) = black_box((25u64, 15u64));
    assert_eq!(t.range(a..b).count(), 0);
    assert_eq!(t.range(a..=b).count(), 0);
    assert_eq!(
        t.range(a..a).count(),
        0,
        "25..25 is empty though 25 is in [20, 29]"
    );
    assert_eq!(t.range(a..a).next_back(), None);
    assert_eq!(
        t.range(b..=a).count(),
        2,
        "15..=25 meets [10, 19] and [20, 29]"
    );
    assert_eq!(t.range((Bound::Excluded(MAX), Bound::Unbounded)).count(), 0);
    assert_eq!(
        t.range((Bound::Excluded(MAX), Bound::Included(MAX)))
            .count(),
        0
    );
    assert_eq!(t.range((Bound::Unbounded, Bound::Excluded(0))).count(), 0);
    assert_eq!(
        t.range((Bound::Excluded(20), Bound::Excluded(21))).count(),
        0
    );
    assert_eq!(
        t.range((Bound::Excluded(21), Bound::Included(20)))
            .rev()
            .count(),
        0
    );
    check(&t, &m, "at the end");
}

#[test]
fn range_takes_every_kind_of_bound() {
    let base = SMALL_BASE;
    let m = Model::from_entries(&base);
    let t = RangeTree::from_sorted(base).unwrap();
    let p = 0b1011_0010u64;
    check_range(&t, &m, .., p);
    check_range(&t, &m, 15.., p);
    check_range(&t, &m, ..15, p);
    check_range(&t, &m, ..=20, p);
    check_range(&t, &m, ..20, p);
    check_range(&t, &m, 21..41, p);
    check_range(&t, &m, 30..=39, p);
    check_range(&t, &m, 30..40, p);
    check_range(&t, &m, 30..=40, p);
    check_range(&t, &m, 45..=45, p);
    check_range(&t, &m, 19..=20, p);
    check_range(&t, &m, MAX.., p);
    check_range(&t, &m, ..=MAX, p);
    check_range(&t, &m, 0..MAX, p);
    check_range(&t, &m, 50..MAX - 9, p);
    check_range(&t, &m, (Bound::Excluded(19), Bound::Excluded(40)), p);
    check_range(&t, &m, (Bound::Excluded(9), Bound::Unbounded), p);
    // The entry starting before the start of the range is included.
    assert_eq!(t.range(25..).next(), Some((20, 29, &2)));
    assert_eq!(t.range(..=41).next_back(), Some((40, 49, &3)));
    assert!(!format!("{t:?}").is_empty());
    assert!(!format!("{:?}", RangeTree::<u64>::new()).is_empty());
}
