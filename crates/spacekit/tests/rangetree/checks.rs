//! Checks on a range tree against the model: `validate()`, entries both ways
//! round, height bounds, iterators drained from both ends, and every gap
//! search on one window.

use crate::model::{inclusive, Model, E};
use spacekit::rangetree::{RangeTree, INNER_SLOTS, LEAF_SLOTS};
use spacekit::testing::Validate;
use std::fmt::Debug;
use std::ops::RangeBounds;

fn entries<V: Clone>(t: &RangeTree<V>) -> Vec<(u64, u64, V)> {
    t.iter().map(|(f, l, v)| (f, l, v.clone())).collect()
}

fn collect<'a, V: Clone + 'a>(it: impl Iterator<Item = (u64, u64, &'a V)>) -> Vec<(u64, u64, V)> {
    it.map(|(f, l, v)| (f, l, v.clone())).collect()
}

/// Drains a double-ended iterator taking from the front or the back as the
/// bits of `pattern` say; returns the items in ascending order. Once either
/// end is exhausted, neither end yields anything more.
pub fn mixed<'a, V: Clone + 'a>(
    mut it: impl DoubleEndedIterator<Item = (u64, u64, &'a V)>,
    pattern: u64,
) -> Vec<(u64, u64, V)> {
    let mut front = Vec::new();
    let mut back = Vec::new();
    let mut p = pattern;
    loop {
        let from_back = p & 1 == 1;
        p = p.rotate_right(1);
        let item = if from_back { it.next_back() } else { it.next() };
        let Some((f, l, v)) = item else { break };
        if from_back {
            back.push((f, l, v.clone()));
        } else {
            front.push((f, l, v.clone()));
        }
    }
    assert!(it.next().is_none(), "next() after the ends met");
    assert!(it.next_back().is_none(), "next_back() after the ends met");
    back.reverse();
    front.extend(back);
    front
}

/// Height bounds any valid tree of `len` entries meets: the empty tree is
/// one leaf; `h` levels hold at most `LEAF_SLOTS * INNER_SLOTS^(h-1)`
/// entries; an internal root has at least two children and a non-root node
/// at least one entry (leaf) or two children (internal), so `len >= 2^(h-1)`.
fn check_height(h: usize, len: usize, what: &str) {
    assert!(h >= 1, "{what}: height {h}");
    if len == 0 {
        assert_eq!(h, 1, "{what}: the empty tree is a single leaf");
    }
    let cap = (INNER_SLOTS as u128)
        .checked_pow(h as u32 - 1)
        .and_then(|p| p.checked_mul(LEAF_SLOTS as u128));
    if let Some(cap) = cap {
        assert!(
            cap >= len as u128,
            "{what}: {len} entries do not fit in height {h}"
        );
    }
    if h > 1 {
        assert!(
            h - 1 < 64 && len as u64 >= 1u64 << (h - 1),
            "{what}: height {h} is too tall for {len} entries"
        );
    }
}

/// The full check: `validate()`, the entries both ways round, `len`,
/// `is_empty` and the height bounds.
pub fn check<V: Clone + PartialEq + Debug>(t: &RangeTree<V>, m: &Model<V>, what: &str) {
    if let Err(e) = t.validate() {
        panic!("{what}: validate: {e}");
    }
    let want = m.entries();
    assert_eq!(entries(t), want, "{what}: entries");
    let mut back = collect(t.iter().rev());
    back.reverse();
    assert_eq!(back, want, "{what}: entries walked backward");
    assert_eq!(t.len(), want.len(), "{what}: len");
    assert_eq!(t.is_empty(), want.is_empty(), "{what}: is_empty");
    check_height(t.height(), want.len(), what);
}

pub fn validate<V>(t: &RangeTree<V>, what: &str) {
    if let Err(e) = t.validate() {
        panic!("{what}: validate: {e}");
    }
}

pub fn tree_find<V>(
    t: &RangeTree<V>,
    size: u64,
    align: Option<u64>,
    lo: u64,
    hi: u64,
    rev: bool,
) -> Result<Option<u64>, E> {
    match (align, rev) {
        (None, false) => t.find_gap(size, lo..=hi),
        (None, true) => t.find_gap_rev(size, lo..=hi),
        (Some(a), false) => t.find_gap_aligned(size, a, lo..=hi),
        (Some(a), true) => t.find_gap_rev_aligned(size, a, lo..=hi),
    }
}

pub fn tree_alloc<V>(
    t: &mut RangeTree<V>,
    size: u64,
    lo: u64,
    hi: u64,
    rev: bool,
    v: V,
) -> Result<u64, E> {
    if rev {
        t.alloc_range_rev(size, lo..=hi, v)
    } else {
        t.alloc_range(size, lo..=hi, v)
    }
}

/// Every gap search (both directions, plain and aligned) and `gaps` on one
/// window against the model.
pub fn check_search<V: Clone>(
    t: &RangeTree<V>,
    m: &Model<V>,
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
) {
    for rev in [false, true] {
        assert_eq!(
            tree_find(t, size, None, lo, hi, rev),
            m.find(size, 1, lo, hi, rev),
            "find_gap size {size} window [{lo}, {hi}] rev {rev}"
        );
        assert_eq!(
            tree_find(t, size, Some(align), lo, hi, rev),
            m.find(size, align, lo, hi, rev),
            "find_gap_aligned size {size} align {align} window [{lo}, {hi}] rev {rev}"
        );
    }
    if lo <= hi {
        assert_eq!(
            t.gaps(lo..=hi).collect::<Vec<_>>(),
            m.gaps(lo, hi),
            "gaps [{lo}, {hi}]"
        );
    }
}

/// `range(r)` against the model, forward, backward and mixed.
pub fn check_range<V, R>(t: &RangeTree<V>, m: &Model<V>, r: R, pattern: u64)
where
    V: Clone + PartialEq + Debug,
    R: RangeBounds<u64> + Clone + Debug,
{
    let want = inclusive(r.start_bound().cloned(), r.end_bound().cloned())
        .map_or_else(Vec::new, |(lo, hi)| m.overlapping(lo, hi));
    assert_eq!(collect(t.range(r.clone())), want, "range {r:?}");
    let mut back = collect(t.range(r.clone()).rev());
    back.reverse();
    assert_eq!(back, want, "range {r:?} backward");
    assert_eq!(
        mixed(t.range(r.clone()), pattern),
        want,
        "range {r:?} mixed {pattern:#x}"
    );
}
