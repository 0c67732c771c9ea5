//! Range tree at the edges of the key space: sizes up to u64::MAX and windows
//! touching u64::MAX, the whole space allocated, stored over and split.

use crate::checks::{check, check_search};
use crate::model::{Model, E, MAX};
use spacekit::rangetree::RangeTree;

/// Sizes up to u64::MAX and windows touching u64::MAX, against the model and
/// the values the spec gives.
#[test]
fn extreme_sizes_and_windows_do_not_overflow() {
    let mut t: RangeTree<u64> = RangeTree::new();
    let mut m = Model::new();
    check(&t, &m, "new");
    assert_eq!(t.find_gap(MAX, 0..=MAX), Ok(Some(0)));
    assert_eq!(t.find_gap_rev(MAX, 0..=MAX), Ok(Some(1)));
    assert_eq!(t.gaps(0..=MAX).collect::<Vec<_>>(), [(0, MAX)]);
    for size in [1, 2, MAX - 1, MAX, 1 << 63, (1 << 63) + 1] {
        for align in [1, 2, 1 << 32, 1 << 62, 1 << 63] {
            for (lo, hi) in [
                (0, MAX),
                (1, MAX),
                (0, MAX - 1),
                (MAX - 5, MAX),
                (1 << 63, MAX),
            ] {
                check_search(&t, &m, size, align, lo, hi);
            }
        }
    }
    assert_eq!(t.find_gap(1, MAX..=MAX), Ok(Some(MAX)));
    assert_eq!(t.find_gap_rev(1, MAX..=MAX), Ok(Some(MAX)));
    assert_eq!(
        t.find_gap_aligned(1, 1 << 63, (1 << 63) + 1..=MAX),
        Ok(None)
    );

    // The whole space in two allocations.
    assert_eq!(t.alloc_range_rev(MAX, 0..=MAX, 1), Ok(1));
    m.insert(1, MAX, 1).unwrap();
    check(&t, &m, "top allocation");
    assert_eq!(t.find_gap(1, 0..=MAX), Ok(Some(0)));
    assert_eq!(t.find_gap_rev(1, 0..=MAX), Ok(Some(0)));
    assert_eq!(t.alloc_range(1, 0..=MAX, 2), Ok(0));
    m.insert(0, 0, 2).unwrap();
    check(&t, &m, "full");
    assert_eq!(t.alloc_range(1, 0..=MAX, 3), Err(E::NoSpace { size: 1 }));
    assert_eq!(
        t.alloc_range_rev(1, 0..=MAX, 3),
        Err(E::NoSpace { size: 1 })
    );
    assert_eq!(t.gaps(0..=MAX).count(), 0);
    check(&t, &m, "full, refused");
    assert_eq!(t.erase(MAX), Some(1));
    assert_eq!(m.erase(MAX), Some(1));
    check(&t, &m, "erase the top");
    assert_eq!(t.alloc_range(MAX, 0..=MAX, 4), Ok(1));
    m.insert(1, MAX, 4).unwrap();
    check(&t, &m, "lowest fit of MAX is 1");

    // Store over everything, split the whole space, punch the ends.
    for i in 0..200u64 {
        assert_eq!(
            t.store_range(i * 5, i * 5 + 2, i),
            m.store(i * 5, i * 5 + 2, i)
        );
    }
    check(&t, &m, "many");
    assert_eq!(t.store_range(0, MAX, 7), m.store(0, MAX, 7));
    check(&t, &m, "stored over everything");
    assert_eq!(t.len(), 1);
    assert_eq!(t.remove_range(5, 5), Ok(1));
    m.remove(5, 5).unwrap();
    check(&t, &m, "split [0, MAX] at 5");
    assert_eq!(t.get_range(6), Some((6, MAX, &7)));
    assert_eq!(t.remove_range(MAX, MAX), m.remove(MAX, MAX));
    assert_eq!(t.remove_range(0, 0), m.remove(0, 0));
    check(&t, &m, "ends punched");
    assert_eq!(t.store_range(MAX, MAX, 8), m.store(MAX, MAX, 8));
    assert_eq!(t.store_range(0, 0, 9), m.store(0, 0, 9));
    check(&t, &m, "ends stored");
    assert_eq!(t.get(MAX), Some(&8));
    assert_eq!(t.get(0), Some(&9));
    assert_eq!(t.remove_range(0, MAX), Ok(4));
    m.m.clear();
    check(&t, &m, "everything removed");
    assert_eq!(t.remove_range(0, MAX), Ok(0));
    check(&t, &m, "removing from the empty tree");
}
