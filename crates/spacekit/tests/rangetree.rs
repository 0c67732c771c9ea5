//! Range tree: operation sequences against a `BTreeMap` model on a tiny and a
//! full-width key space (with dups applied and modified independently), the
//! maple tree's dup and fork scenarios, bad input, 100K-entry trees, and the
//! gap search (forward, reverse, aligned) and allocation against a brute-force
//! search over the model's free intervals.

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::{RangeTree, RangeTreeError, INNER_SLOTS, LEAF_SLOTS};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hint::black_box;
use std::ops::{Bound, RangeBounds};
use std::rc::Rc;

type E = RangeTreeError;
const MAX: u64 = u64::MAX;

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// The naive model: `first -> (last, value)`, one map entry per range.
#[derive(Clone, Debug, PartialEq)]
struct Model<V> {
    m: BTreeMap<u64, (u64, V)>,
}

impl<V: Clone> Model<V> {
    fn new() -> Self {
        Self { m: BTreeMap::new() }
    }

    fn from_entries(entries: &[(u64, u64, V)]) -> Self {
        let mut m = Self::new();
        for (f, l, v) in entries {
            m.insert(*f, *l, v.clone()).unwrap();
        }
        m
    }

    fn len(&self) -> usize {
        self.m.len()
    }

    fn entries(&self) -> Vec<(u64, u64, V)> {
        self.m
            .iter()
            .map(|(&f, (l, v))| (f, *l, v.clone()))
            .collect()
    }

    /// `(first, last)` of the entries intersecting `[lo, hi]`, ascending.
    fn overlapping_bounds(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        if lo > hi {
            return Vec::new();
        }
        // Entries starting at or below `hi`, walked down: their lasts fall
        // too, so the ones reaching `lo` are a prefix of the walk.
        let mut out: Vec<_> = self
            .m
            .range(..=hi)
            .rev()
            .take_while(|(_, (l, _))| *l >= lo)
            .map(|(&f, (l, _))| (f, *l))
            .collect();
        out.reverse();
        out
    }

    /// The entries intersecting `[lo, hi]`, ascending.
    fn overlapping(&self, lo: u64, hi: u64) -> Vec<(u64, u64, V)> {
        self.overlapping_bounds(lo, hi)
            .into_iter()
            .map(|(f, l)| (f, l, self.m[&f].1.clone()))
            .collect()
    }

    fn get_range(&self, index: u64) -> Option<(u64, u64, V)> {
        self.m
            .range(..=index)
            .next_back()
            .filter(|(_, (l, _))| *l >= index)
            .map(|(&f, (l, v))| (f, *l, v.clone()))
    }

    fn insert(&mut self, first: u64, last: u64, v: V) -> Result<(), E> {
        if first > last {
            return Err(E::InvalidRange { first, last });
        }
        if let Some(&(f, l)) = self.overlapping_bounds(first, last).first() {
            return Err(E::Occupied { first: f, last: l });
        }
        self.m.insert(first, (last, v));
        Ok(())
    }

    /// Punches the hole `[first, last]`: entries inside go, entries partly
    /// inside are truncated, an entry around it is split (both halves keep
    /// its value). Returns how many entries were touched.
    fn punch(&mut self, first: u64, last: u64) -> usize {
        let hit = self.overlapping(first, last);
        for (f, l, v) in &hit {
            self.m.remove(f);
            if *f < first {
                self.m.insert(*f, (first - 1, v.clone()));
            }
            if *l > last {
                self.m.insert(last + 1, (*l, v.clone()));
            }
        }
        hit.len()
    }

    fn store(&mut self, first: u64, last: u64, v: V) -> Result<(), E> {
        if first > last {
            return Err(E::InvalidRange { first, last });
        }
        self.punch(first, last);
        self.m.insert(first, (last, v));
        Ok(())
    }

    fn remove(&mut self, first: u64, last: u64) -> Result<usize, E> {
        if first > last {
            return Err(E::InvalidRange { first, last });
        }
        Ok(self.punch(first, last))
    }

    fn erase(&mut self, index: u64) -> Option<V> {
        let (f, _, _) = self.get_range(index)?;
        self.m.remove(&f).map(|(_, v)| v)
    }

    fn get_mut(&mut self, index: u64) -> Option<&mut V> {
        let (f, _, _) = self.get_range(index)?;
        self.m.get_mut(&f).map(|(_, v)| v)
    }

    fn filter_map<W: Clone>(&self, mut f: impl FnMut(&V) -> Option<W>) -> Model<W> {
        Model {
            m: self
                .m
                .iter()
                .filter_map(|(&k, (l, v))| f(v).map(|w| (k, (*l, w))))
                .collect(),
        }
    }

    /// The maximal free intervals intersected with `[lo, hi]`, ascending.
    fn gaps(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if lo > hi {
            return out;
        }
        let mut next = u128::from(lo);
        for (f, l) in self.overlapping_bounds(lo, hi) {
            if u128::from(f) > next {
                out.push((next as u64, f - 1));
            }
            next = u128::from(l) + 1;
        }
        if next <= u128::from(hi) {
            out.push((next as u64, hi));
        }
        out
    }

    /// Lowest (or highest, `rev`) `s`, a multiple of `align`, with
    /// `[s, s + size - 1]` free and inside `[lo, hi]`: each free interval of
    /// the window is tried in turn, in u128 so nothing overflows.
    fn find(&self, size: u64, align: u64, lo: u64, hi: u64, rev: bool) -> Result<Option<u64>, E> {
        gap_args(size, align, lo, hi)?;
        let (size, align) = (u128::from(size), u128::from(align));
        let fit = |&(a, b): &(u64, u64)| -> Option<u64> {
            let (a, b) = (u128::from(a), u128::from(b));
            if rev {
                let top = (b + 1).checked_sub(size)?;
                let s = top / align * align;
                (s >= a).then_some(s as u64)
            } else {
                let s = a.div_ceil(align) * align;
                (s + size - 1 <= b).then_some(s as u64)
            }
        };
        let gaps = self.gaps(lo, hi);
        Ok(if rev {
            gaps.iter().rev().find_map(fit)
        } else {
            gaps.iter().find_map(fit)
        })
    }

    fn alloc(&mut self, size: u64, lo: u64, hi: u64, rev: bool, v: V) -> Result<u64, E> {
        match self.find(size, 1, lo, hi, rev)? {
            None => Err(E::NoSpace { size }),
            Some(s) => {
                self.insert(s, s + (size - 1), v).unwrap();
                Ok(s)
            }
        }
    }
}

/// The gap-search argument checks, in the documented order.
fn gap_args(size: u64, align: u64, lo: u64, hi: u64) -> Result<(), E> {
    if lo > hi {
        return Err(E::InvalidRange {
            first: lo,
            last: hi,
        });
    }
    if size == 0 {
        return Err(E::ZeroSize);
    }
    if !align.is_power_of_two() {
        return Err(E::BadAlignment { align });
    }
    if u128::from(hi - lo) + 1 < u128::from(size) {
        return Err(E::WindowTooSmall {
            size,
            first: lo,
            last: hi,
        });
    }
    Ok(())
}

/// Index by index: the model's own check on small windows.
fn brute_find<V: Clone>(
    m: &Model<V>,
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
    rev: bool,
) -> Option<u64> {
    let fits = |s: u64| {
        s.is_multiple_of(align)
            && s.checked_add(size - 1).is_some_and(|e| e <= hi)
            && (s..=s + (size - 1)).all(|i| m.get_range(i).is_none())
    };
    if rev {
        (lo..=hi).rev().find(|&s| fits(s))
    } else {
        (lo..=hi).find(|&s| fits(s))
    }
}

/// A pair of bounds as an inclusive interval, `None` if it holds nothing.
fn inclusive(start: Bound<u64>, end: Bound<u64>) -> Option<(u64, u64)> {
    let lo = match start {
        Bound::Included(a) => a,
        Bound::Excluded(a) => a.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let hi = match end {
        Bound::Included(b) => b,
        Bound::Excluded(b) => b.checked_sub(1)?,
        Bound::Unbounded => MAX,
    };
    (lo <= hi).then_some((lo, hi))
}

// ---------------------------------------------------------------------------
// Checks on the tree
// ---------------------------------------------------------------------------

fn entries<V: Clone>(t: &RangeTree<V>) -> Vec<(u64, u64, V)> {
    t.iter().map(|(f, l, v)| (f, l, v.clone())).collect()
}

fn collect<'a, V: Clone + 'a>(it: impl Iterator<Item = (u64, u64, &'a V)>) -> Vec<(u64, u64, V)> {
    it.map(|(f, l, v)| (f, l, v.clone())).collect()
}

/// Drains a double-ended iterator taking from the front or the back as the
/// bits of `pattern` say; returns the items in ascending order. Once either
/// end is exhausted, neither end yields anything more.
fn mixed<'a, V: Clone + 'a>(
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
fn check<V: Clone + PartialEq + Debug>(t: &RangeTree<V>, m: &Model<V>, what: &str) {
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

fn validate<V>(t: &RangeTree<V>, what: &str) {
    if let Err(e) = t.validate() {
        panic!("{what}: validate: {e}");
    }
}

fn tree_find<V>(
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

fn tree_alloc<V>(
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
fn check_search<V: Clone>(t: &RangeTree<V>, m: &Model<V>, size: u64, align: u64, lo: u64, hi: u64) {
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
fn check_range<V, R>(t: &RangeTree<V>, m: &Model<V>, r: R, pattern: u64)
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

// ---------------------------------------------------------------------------
// 1. Operation sequences against the model
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum DupKind {
    Dup,
    Clone,
    Map,
    /// `dup_filter_map` keeping values not divisible by the modulus (1 drops
    /// everything).
    FilterMap(u64),
    FromSorted,
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        t: usize,
        first: u64,
        last: u64,
    },
    Store {
        t: usize,
        first: u64,
        last: u64,
    },
    Remove {
        t: usize,
        first: u64,
        last: u64,
    },
    Erase {
        t: usize,
        index: u64,
    },
    Get {
        t: usize,
        index: u64,
    },
    GetMut {
        t: usize,
        index: u64,
    },
    Find {
        t: usize,
        size: u64,
        align: Option<u64>,
        window: (u64, u64),
        rev: bool,
    },
    Alloc {
        t: usize,
        size: u64,
        window: (u64, u64),
        rev: bool,
    },
    Gaps {
        t: usize,
        window: (u64, u64),
    },
    Range {
        t: usize,
        start: Bound<u64>,
        end: Bound<u64>,
        pattern: u64,
    },
    Iter {
        t: usize,
        pattern: u64,
    },
    Dup {
        src: usize,
        dst: usize,
        kind: DupKind,
    },
    Clear {
        t: usize,
    },
    /// `count` ranges of `len` indices every `stride` from `base`, inserted
    /// or stored one by one: enough entries for three levels.
    Fill {
        t: usize,
        base: u64,
        count: u64,
        stride: u64,
        len: u64,
        store: bool,
    },
}

/// At most this many trees live at once: the first, and copies made by dups.
const POOL: usize = 3;

fn map_value(v: u64) -> u64 {
    v.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

fn run_ops(ops: &[Op]) {
    let mut pool: Vec<(RangeTree<u64>, Model<u64>)> = vec![(RangeTree::new(), Model::new())];
    check(&pool[0].0, &pool[0].1, "new");
    let mut next = 1u64;
    for (k, op) in ops.iter().enumerate() {
        let what = format!("op {k} {op:?}");
        let n = pool.len();
        match *op {
            Op::Insert { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.insert_range(first, last, next),
                    m.insert(first, last, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Store { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.store_range(first, last, next),
                    m.store(first, last, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Remove { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.remove_range(first, last),
                    m.remove(first, last),
                    "{what}"
                );
            }
            Op::Erase { t, index } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(tr.erase(index), m.erase(index), "{what}");
            }
            Op::Get { t, index } => {
                let (tr, m) = &pool[t % n];
                let want = m.get_range(index);
                assert_eq!(tr.get(index).copied(), want.map(|e| e.2), "{what}: get");
                assert_eq!(
                    tr.get_range(index).map(|(f, l, v)| (f, l, *v)),
                    want,
                    "{what}: get_range"
                );
            }
            Op::GetMut { t, index } => {
                let (tr, m) = &mut pool[t % n];
                let got = tr.get_mut(index);
                assert_eq!(got.is_some(), m.get_range(index).is_some(), "{what}");
                if let Some(v) = got {
                    assert_eq!(Some(*v), m.get_range(index).map(|e| e.2), "{what}");
                    *v = next;
                    *m.get_mut(index).unwrap() = next;
                }
                next += 1;
            }
            Op::Find {
                t,
                size,
                align,
                window: (lo, hi),
                rev,
            } => {
                let (tr, m) = &pool[t % n];
                let want = m.find(size, align.unwrap_or(1), lo, hi, rev);
                if let (Ok(w), true) = (want, hi < 256) {
                    let brute = brute_find(m, size, align.unwrap_or(1), lo, hi, rev);
                    assert_eq!(w, brute, "{what}: the model's interval search");
                }
                assert_eq!(tree_find(tr, size, align, lo, hi, rev), want, "{what}");
            }
            Op::Alloc {
                t,
                size,
                window: (lo, hi),
                rev,
            } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tree_alloc(tr, size, lo, hi, rev, next),
                    m.alloc(size, lo, hi, rev, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Gaps {
                t,
                window: (lo, hi),
            } => {
                let (tr, m) = &pool[t % n];
                assert_eq!(
                    tr.gaps(lo..=hi).collect::<Vec<_>>(),
                    m.gaps(lo, hi),
                    "{what}"
                );
            }
            Op::Range {
                t,
                start,
                end,
                pattern,
            } => {
                let (tr, m) = &pool[t % n];
                check_range(tr, m, (start, end), pattern);
            }
            Op::Iter { t, pattern } => {
                let (tr, m) = &pool[t % n];
                assert_eq!(mixed(tr.iter(), pattern), m.entries(), "{what}");
            }
            Op::Dup { src, dst, kind } => {
                let (s, sm) = &pool[src % n];
                let copy = match kind {
                    DupKind::Dup => {
                        let c = s.dup();
                        assert_eq!(c.height(), s.height(), "{what}: dup height");
                        (c, sm.clone())
                    }
                    DupKind::Clone => {
                        let c = s.clone();
                        assert_eq!(c.height(), s.height(), "{what}: clone height");
                        (c, sm.clone())
                    }
                    DupKind::Map => (
                        s.dup_map(|v| map_value(*v)),
                        sm.filter_map(|v| Some(map_value(*v))),
                    ),
                    DupKind::FilterMap(md) => {
                        let f = |v: &u64| (!v.is_multiple_of(md)).then(|| map_value(*v));
                        (s.dup_filter_map(f), sm.filter_map(f))
                    }
                    DupKind::FromSorted => (
                        RangeTree::from_sorted(s.iter().map(|(f, l, v)| (f, l, *v))).unwrap(),
                        sm.clone(),
                    ),
                };
                if n < POOL {
                    pool.push(copy);
                } else {
                    pool[dst % n] = copy;
                }
            }
            Op::Clear { t } => {
                let (tr, m) = &mut pool[t % n];
                tr.clear();
                m.m.clear();
            }
            Op::Fill {
                t,
                base,
                count,
                stride,
                len,
                store,
            } => {
                let (tr, m) = &mut pool[t % n];
                for i in 0..count {
                    let Some(first) = i.checked_mul(stride).and_then(|d| base.checked_add(d))
                    else {
                        break;
                    };
                    let last = first.saturating_add(len - 1);
                    if store {
                        assert_eq!(
                            tr.store_range(first, last, next),
                            m.store(first, last, next),
                            "{what}: [{first}, {last}]"
                        );
                    } else {
                        assert_eq!(
                            tr.insert_range(first, last, next),
                            m.insert(first, last, next),
                            "{what}: [{first}, {last}]"
                        );
                    }
                    next += 1;
                    validate(tr, &format!("{what}: [{first}, {last}]"));
                }
            }
        }
        // Every tree, not only the one operated on: a copy and its source
        // must not see each other's changes.
        for (i, (tr, m)) in pool.iter().enumerate() {
            check(tr, m, &format!("{what}: tree {i}"));
        }
        for i in 0..pool.len() {
            for j in i + 1..pool.len() {
                assert_eq!(
                    pool[i].0 == pool[j].0,
                    pool[i].1 == pool[j].1,
                    "{what}: PartialEq of trees {i} and {j}"
                );
            }
        }
    }
}

fn sorted((a, b): (u64, u64)) -> (u64, u64) {
    (a.min(b), a.max(b))
}

/// Op sequences over the given key, range, size, alignment and window
/// strategies.
fn arb_ops(
    key: BoxedStrategy<u64>,
    pair: BoxedStrategy<(u64, u64)>,
    size: BoxedStrategy<u64>,
    align: BoxedStrategy<u64>,
    window: BoxedStrategy<(u64, u64)>,
    max_fill: u64,
) -> impl Strategy<Value = Vec<Op>> {
    let t = || 0usize..POOL;
    let bound = prop_oneof![
        2 => key.clone().prop_map(Bound::Included),
        2 => key.clone().prop_map(Bound::Excluded),
        1 => Just(Bound::Unbounded),
    ];
    let kind = prop_oneof![
        Just(DupKind::Dup),
        Just(DupKind::Clone),
        Just(DupKind::Map),
        (1u64..=4).prop_map(DupKind::FilterMap),
        Just(DupKind::FromSorted),
    ];
    let op = prop_oneof![
        8 => (t(), pair.clone()).prop_map(|(t, (first, last))| Op::Insert { t, first, last }),
        5 => (t(), pair.clone()).prop_map(|(t, (first, last))| Op::Store { t, first, last }),
        4 => (t(), pair).prop_map(|(t, (first, last))| Op::Remove { t, first, last }),
        3 => (t(), key.clone()).prop_map(|(t, index)| Op::Erase { t, index }),
        2 => (t(), key.clone()).prop_map(|(t, index)| Op::Get { t, index }),
        1 => (t(), key.clone()).prop_map(|(t, index)| Op::GetMut { t, index }),
        5 => (t(), size.clone(), prop::option::of(align), window.clone(), any::<bool>())
            .prop_map(|(t, size, align, window, rev)| Op::Find { t, size, align, window, rev }),
        4 => (t(), size, window.clone(), any::<bool>())
            .prop_map(|(t, size, window, rev)| Op::Alloc { t, size, window, rev }),
        1 => (t(), window.prop_map(sorted)).prop_map(|(t, window)| Op::Gaps { t, window }),
        2 => (t(), bound.clone(), bound, any::<u64>())
            .prop_map(|(t, start, end, pattern)| Op::Range { t, start, end, pattern }),
        1 => (t(), any::<u64>()).prop_map(|(t, pattern)| Op::Iter { t, pattern }),
        2 => (t(), t(), kind).prop_map(|(src, dst, kind)| Op::Dup { src, dst, kind }),
        1 => t().prop_map(|t| Op::Clear { t }),
        2 => (t(), key, 0..=max_fill, 1u64..=4, 1u64..=4, any::<bool>()).prop_map(
            |(t, base, count, stride, len, store)| Op::Fill { t, base, count, stride, len, store }
        ),
    ];
    prop::collection::vec(op, 1..60)
}

/// Keys in 0..64: collisions, adjacency and full coverage are common.
/// Windows mostly inside 0..72, some reaching u64::MAX.
fn tiny_ops() -> impl Strategy<Value = Vec<Op>> {
    let key = (0u64..64).boxed();
    let pair = prop_oneof![
        9 => (0u64..64, 0u64..64).prop_map(sorted),
        1 => (0u64..64, 0u64..64),
    ]
    .boxed();
    let size = prop_oneof![
        8 => 1u64..=8,
        2 => 9u64..=70,
        1 => Just(0u64),
        1 => Just(MAX),
    ]
    .boxed();
    let align = prop::sample::select(vec![1u64, 2, 4, 8, 16, 32, 64, 0, 3, 1 << 63]).boxed();
    let window = prop_oneof![
        6 => (0u64..72, 0u64..72).prop_map(sorted),
        1 => (0u64..72, 0u64..72),
        1 => Just((0u64, MAX)),
        1 => (0u64..72).prop_map(|a| (a, MAX)),
    ]
    .boxed();
    arb_ops(key, pair, size, align, window, 64)
}

/// Keys anywhere in u64, biased to near 0, near u64::MAX and the middle;
/// entries touching 0 and u64::MAX, windows up to the whole space.
fn large_ops() -> impl Strategy<Value = Vec<Op>> {
    let key = prop_oneof![
        3 => 0u64..48,
        3 => (MAX - 47)..=MAX,
        1 => Just(0u64),
        1 => Just(MAX),
        2 => any::<u64>(),
        1 => ((1u64 << 63) - 24)..((1u64 << 63) + 24),
    ]
    .boxed();
    let pair = prop_oneof![
        4 => (key.clone(), 0u64..8).prop_map(|(a, l)| (a, a.saturating_add(l))),
        2 => (key.clone(), key.clone()).prop_map(sorted),
        1 => (key.clone(), key.clone()),
        1 => key.clone().prop_map(|a| (a, MAX)),
        1 => key.clone().prop_map(|b| (0, b)),
    ]
    .boxed();
    let size = prop_oneof![
        4 => 1u64..=16,
        1 => Just(0u64),
        2 => any::<u64>(),
        2 => (0u64..=16).prop_map(|k| MAX - k),
        2 => (1u32..64).prop_map(|s| 1u64 << s),
        1 => (1u32..64).prop_map(|s| (1u64 << s) + 1),
    ]
    .boxed();
    let align = prop_oneof![
        3 => Just(1u64),
        4 => (0u32..64).prop_map(|s| 1u64 << s),
        1 => 0u64..=12,
        1 => any::<u64>(),
    ]
    .boxed();
    let window = prop_oneof![
        2 => Just((0u64, MAX)),
        3 => (key.clone(), key.clone()).prop_map(sorted),
        1 => (key.clone(), key.clone()),
        2 => key.clone().prop_map(|a| (a, MAX)),
        1 => key.clone().prop_map(|b| (0, b)),
        2 => (key.clone(), 0u64..64).prop_map(|(a, l)| (a, a.saturating_add(l))),
    ]
    .boxed();
    arb_ops(key, pair, size, align, window, 400)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ops_match_the_model_tiny_keys(ops in tiny_ops()) {
        run_ops(&ops);
    }

    #[test]
    fn ops_match_the_model_full_width_keys(ops in large_ops()) {
        run_ops(&ops);
    }
}

// ---------------------------------------------------------------------------
// Random trees (SmallRng) shared by the scenario, large and gap tests
// ---------------------------------------------------------------------------

/// A sorted layout of up to `n` entries, value = position: mostly short
/// entries and short gaps (many adjacent), some long gaps and entries, a few
/// huge ones; sometimes starting at 0, sometimes ending at u64::MAX.
fn random_layout(rng: &mut SmallRng, n: usize) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut pos: u128 = match rng.random_range(0..3) {
        0 => 0,
        1 => u128::from(rng.random_range(0..100u64)),
        _ => u128::from(rng.random::<u64>() >> rng.random_range(1..40)),
    };
    for i in 0..n {
        let gap: u128 = match rng.random_range(0..20) {
            0..=7 => 0,
            8..=15 => u128::from(rng.random_range(1..=8u64)),
            16..=18 => u128::from(rng.random_range(9..=5000u64)),
            _ => u128::from(rng.random::<u64>() >> rng.random_range(8..40)),
        };
        let len: u128 = match rng.random_range(0..10) {
            0..=7 => u128::from(rng.random_range(1..=8u64)),
            8 => u128::from(rng.random_range(9..=1000u64)),
            _ => u128::from(rng.random::<u64>() >> rng.random_range(10..40)),
        };
        let first = pos + gap;
        let last = first + len - 1;
        if last > u128::from(MAX) {
            break;
        }
        out.push((first as u64, last as u64, i as u64));
        pos = last + 1;
    }
    if rng.random_bool(0.3) {
        if let Some(&(_, l, v)) = out.last() {
            if l < MAX {
                let first = if rng.random_bool(0.5) {
                    l + 1
                } else {
                    MAX - (MAX - l) / 2
                };
                out.push((first, MAX, v + 1));
            }
        }
    }
    out
}

/// Builds a tree from a sorted layout, by bulk load or by inserts in
/// shuffled, ascending or descending order.
fn build(rng: &mut SmallRng, layout: &[(u64, u64, u64)], how: usize) -> RangeTree<u64> {
    let t = match how % 4 {
        0 => RangeTree::from_sorted(layout.iter().copied()).unwrap(),
        1 => {
            let mut order = layout.to_vec();
            order.shuffle(rng);
            let mut t = RangeTree::new();
            for (f, l, v) in order {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
        2 => {
            let mut t = RangeTree::new();
            for &(f, l, v) in layout {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
        _ => {
            let mut t = RangeTree::new();
            for &(f, l, v) in layout.iter().rev() {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
    };
    validate(&t, "build");
    t
}

/// A point near an entry's bounds (or anywhere, now and then).
fn point(rng: &mut SmallRng, ents: &[(u64, u64, u64)]) -> u64 {
    if ents.is_empty() || rng.random_bool(0.1) {
        return match rng.random_range(0..3) {
            0 => rng.random(),
            1 => rng.random_range(0..64),
            _ => MAX - rng.random_range(0..64),
        };
    }
    let (f, l, _) = ents[rng.random_range(0..ents.len())];
    let base = match rng.random_range(0..3) {
        0 => f,
        1 => l,
        _ => rng.random_range(f..=l),
    };
    let d = rng.random_range(0..4u64);
    if rng.random_bool(0.5) {
        base.saturating_add(d)
    } else {
        base.saturating_sub(d)
    }
}

fn random_window(rng: &mut SmallRng, ents: &[(u64, u64, u64)]) -> (u64, u64) {
    match rng.random_range(0..8) {
        0 => (0, MAX),
        1 => (point(rng, ents), MAX),
        2 => (0, point(rng, ents)),
        3 | 4 => {
            let a = point(rng, ents);
            (a, a.saturating_add(rng.random_range(0..200)))
        }
        _ => sorted((point(rng, ents), point(rng, ents))),
    }
}

fn random_size(rng: &mut SmallRng, gaps: &[(u64, u64)]) -> u64 {
    match rng.random_range(0..10) {
        0..=3 => rng.random_range(1..=4),
        4..=6 if !gaps.is_empty() => {
            let (a, b) = gaps[rng.random_range(0..gaps.len())];
            let len = (b - a).saturating_add(1);
            match rng.random_range(0..3) {
                0 => len,
                1 => len.saturating_add(1),
                _ => (len - 1).max(1),
            }
        }
        7 => rng.random::<u64>() >> rng.random_range(0..64),
        8 => MAX - rng.random_range(0..3),
        _ => 1 << rng.random_range(0..64),
    }
}

fn random_align(rng: &mut SmallRng) -> u64 {
    match rng.random_range(0..10) {
        0..=3 => 1,
        4..=7 => 1 << rng.random_range(1..12),
        8 => 1 << rng.random_range(12..64),
        _ => 1 << 63,
    }
}

/// One random mutation (insert, store, remove, erase, get_mut or alloc)
/// near the points of `ents`, applied to the tree and the model, results
/// compared.
fn mutate(
    rng: &mut SmallRng,
    t: &mut RangeTree<u64>,
    m: &mut Model<u64>,
    ents: &[(u64, u64, u64)],
    next: &mut u64,
) {
    let a = point(rng, ents);
    let len = match rng.random_range(0..10) {
        0..=6 => rng.random_range(0..8),
        7 | 8 => rng.random_range(8..2000),
        _ => rng.random(),
    };
    let b = a.saturating_add(len);
    let v = *next;
    *next += 1;
    let what = format!("mutation at [{a}, {b}]");
    match rng.random_range(0..7) {
        0 | 1 => assert_eq!(t.insert_range(a, b, v), m.insert(a, b, v), "insert {what}"),
        2 => assert_eq!(t.store_range(a, b, v), m.store(a, b, v), "store {what}"),
        3 => assert_eq!(t.remove_range(a, b), m.remove(a, b), "remove {what}"),
        4 => assert_eq!(t.erase(a), m.erase(a), "erase {what}"),
        5 => {
            let got = t.get_mut(a).map(|x| {
                let old = *x;
                *x = v;
                old
            });
            let want = m.get_mut(a).map(|x| std::mem::replace(x, v));
            assert_eq!(got, want, "get_mut {what}");
        }
        _ => {
            let size = rng.random_range(1..=16);
            let rev = rng.random_bool(0.5);
            assert_eq!(
                tree_alloc(t, size, a, b, rev, v),
                m.alloc(size, a, b, rev, v),
                "alloc size {size} rev {rev} {what}"
            );
        }
    }
    validate(t, &what);
}

// ---------------------------------------------------------------------------
// 2. Maple tree scenarios
// ---------------------------------------------------------------------------

/// check_forking: 135 ranges, dup, every entry of the copy replaced through
/// get_mut; the source keeps the old values.
#[test]
fn forking_replaces_values_in_the_copy_only() {
    let mut src = RangeTree::new();
    let mut m = Model::new();
    for i in 0..135u64 {
        src.insert_range(i * 10, i * 10 + 5, i).unwrap();
        m.insert(i * 10, i * 10 + 5, i).unwrap();
        check(&src, &m, "build");
    }
    let mut copy = src.dup();
    check(&copy, &m, "dup");
    assert_eq!(copy.height(), src.height());
    assert!(copy == src);
    for i in 0..135u64 {
        // Through an index inside the entry, not only its first.
        let v = copy.get_mut(i * 10 + i % 6).expect("entry in the copy");
        assert_eq!(*v, i);
        *v = i + 1000;
        validate(&copy, "after get_mut");
    }
    let new = m.filter_map(|v| Some(v + 1000));
    check(&copy, &new, "copy after replacing every value");
    check(&src, &m, "source after the copy changed");
    assert!(copy != src);
    for i in 0..135u64 {
        assert_eq!(src.get(i * 10 + 5), Some(&i));
        assert_eq!(copy.get(i * 10 + 5), Some(&(i + 1000)));
        assert_eq!(copy.get(i * 10 + 6), None);
    }
}

#[test]
fn single_entries_dup() {
    for (f, l) in [(0u64, 0u64), (MAX, MAX), (0, MAX), (7, 7)] {
        let mut t = RangeTree::new();
        t.insert_range(f, l, format!("[{f}, {l}]")).unwrap();
        let m = Model::from_entries(&[(f, l, format!("[{f}, {l}]"))]);
        check(&t, &m, "single");
        assert_eq!(t.height(), 1);
        let mut d = t.dup();
        check(&d, &m, "single dup");
        assert_eq!(d.height(), 1);
        assert!(d == t);
        assert_eq!(d.erase(l), Some(format!("[{f}, {l}]")));
        check(&d, &Model::new(), "dup emptied");
        check(&t, &m, "source after the dup was emptied");
    }
}

/// Full trees of height 1..=4 by bulk load (exactly
/// `LEAF_SLOTS * INNER_SLOTS^(h-1)` entries, so exactly `h` levels), one
/// entry more (at least one level more), and the same entries by inserts;
/// each dup'd and compared entry by entry and by height.
#[test]
fn full_trees_of_each_height_dup() {
    let mut rng = SmallRng::seed_from_u64(0x0f_0011);
    for h in 1..=4usize {
        let n = LEAF_SLOTS * INNER_SLOTS.pow(h as u32 - 1);
        let ents: Vec<(u64, u64, u64)> = (0..n as u64 + 1).map(|i| (i * 3, i * 3 + 1, i)).collect();
        let (full, more) = (&ents[..n], &ents[..]);
        let m = Model::from_entries(full);

        let bulk = RangeTree::from_sorted(full.iter().copied()).unwrap();
        check(&bulk, &m, &format!("bulk h={h}"));
        assert_eq!(
            bulk.height(),
            h,
            "{n} entries loaded in bulk fill exactly {h} levels"
        );
        let d = bulk.dup();
        check(&d, &m, &format!("bulk dup h={h}"));
        assert_eq!(d.height(), h);
        assert!(d == bulk);

        let over = RangeTree::from_sorted(more.iter().copied()).unwrap();
        check(
            &over,
            &Model::from_entries(more),
            &format!("bulk h={h} plus one"),
        );
        assert!(
            over.height() > h,
            "{} entries cannot fit in {h} levels",
            n + 1
        );
        assert!(over != bulk);

        for how in 1..4 {
            let t = build(&mut rng, full, how);
            check(&t, &m, &format!("built h={h} how={how}"));
            let d = t.dup();
            check(&d, &m, &format!("built dup h={h} how={how}"));
            assert_eq!(d.height(), t.height());
            assert!(d == t);
            assert!(d == bulk, "equal entries, different shapes");
        }
    }
}

/// check_dup: every size 0..1000 built by inserts (one insert more per step,
/// ascending and scattered), dup'd and compared; the copy then loses an
/// entry and the source must not.
#[test]
fn dup_every_size_below_1000() {
    for scattered in [false, true] {
        let mut t = RangeTree::new();
        let mut m = Model::new();
        for n in 0..=1000u64 {
            let what = format!("n={n} scattered={scattered}");
            let mut d = t.dup();
            check(&d, &m, &what);
            assert_eq!(d.height(), t.height(), "{what}");
            if let Some((&f, &(_, v))) = m.m.iter().next() {
                assert_eq!(d.erase(f), Some(v), "{what}");
                validate(&d, &what);
                assert_eq!(d.len() + 1, t.len(), "{what}");
            }
            if n == 1000 {
                check(&t, &m, &what);
                break;
            }
            let i = if scattered { n * 7919 % 1000 } else { n };
            t.insert_range(i * 10, i * 10 + 5, i).unwrap();
            m.insert(i * 10, i * 10 + 5, i).unwrap();
            check(&t, &m, &what);
        }
    }
}

/// A dup'd tree compared entry by entry, then the copy modified (the
/// source must not change), then a fresh dup and the source modified (the
/// copy must not change).
#[test]
fn dup_is_modified_independently_both_ways() {
    let mut rng = SmallRng::seed_from_u64(0xd0b_0001);
    let mut next = 1 << 32;
    for round in 0..4 {
        let layout = random_layout(&mut rng, 2500);
        let m = Model::from_entries(&layout);
        let mut src = build(&mut rng, &layout, round);
        check(&src, &m, "source");

        let mut copy = src.dup();
        check(&copy, &m, "copy");
        assert_eq!(copy.height(), src.height());
        let mut cm = m.clone();
        for k in 0..400 {
            mutate(&mut rng, &mut copy, &mut cm, &layout, &mut next);
            if k % 50 == 0 {
                check(&copy, &cm, "copy after mutations");
                check(&src, &m, "source while the copy changes");
            }
        }
        check(&copy, &cm, "copy after mutations");
        check(&src, &m, "source while the copy changes");

        let copy2 = src.dup();
        let mut sm = m.clone();
        for k in 0..400 {
            mutate(&mut rng, &mut src, &mut sm, &layout, &mut next);
            if k % 50 == 0 {
                check(&src, &sm, "source after mutations");
                check(&copy2, &m, "copy while the source changes");
            }
        }
        check(&src, &sm, "source after mutations");
        check(&copy2, &m, "copy while the source changes");
        check(&copy, &cm, "the first copy, untouched since");
        drop(src);
        check(&copy2, &m, "copy after the source is dropped");
    }
}

#[test]
fn dup_map_and_filter_map_change_the_value_type() {
    let mut rng = SmallRng::seed_from_u64(0xd0b_0002);
    for n in [0usize, 1, 16, 17, 300, 3000] {
        let layout = random_layout(&mut rng, n);
        let m = Model::from_entries(&layout);
        let t = build(&mut rng, &layout, n);
        let s = t.dup_map(|v| format!("v{v}"));
        check(
            &s,
            &m.filter_map(|v| Some(format!("v{v}"))),
            "dup_map to String",
        );
        let odd = t.dup_filter_map(|v| (v % 2 == 1).then(|| format!("o{v}")));
        check(
            &odd,
            &m.filter_map(|v| (v % 2 == 1).then(|| format!("o{v}"))),
            "dup_filter_map odd",
        );
        let none: RangeTree<u8> = t.dup_filter_map(|_| None);
        check(&none, &Model::new(), "dup_filter_map dropping everything");
        let all = t.dup_filter_map(|v| Some(*v));
        check(&all, &m, "dup_filter_map keeping everything");
        assert!(all == t);
        check(&t, &m, "source after the maps");
    }
}

// ---------------------------------------------------------------------------
// 3. Bad input
// ---------------------------------------------------------------------------

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

/// Every entry holds exactly one reference to its value: splits clone,
/// truncation does not, removal, erase, overwrite, clear and drop release.
#[test]
fn values_are_released_exactly_once() {
    let token = Rc::new(());
    let mut rng = SmallRng::seed_from_u64(0x0d20_0001);
    let mut t: RangeTree<Rc<()>> = RangeTree::new();
    let mut m: Model<Rc<()>> = Model::new();
    let count = |t: &RangeTree<Rc<()>>, m: &Model<Rc<()>>| 1 + t.len() + m.len();
    for k in 0..3000 {
        let a = rng.random_range(0..600u64);
        let b = a + rng.random_range(0..30);
        let what = format!("step {k} [{a}, {b}]");
        match k % 6 {
            0 | 1 => assert_eq!(
                t.insert_range(a, b, token.clone()),
                m.insert(a, b, token.clone()),
                "{what}"
            ),
            2 => assert_eq!(
                t.store_range(a, b, token.clone()),
                m.store(a, b, token.clone()),
                "{what}"
            ),
            3 => assert_eq!(t.remove_range(a, b), m.remove(a, b), "{what}"),
            4 => assert_eq!(t.erase(a).is_some(), m.erase(a).is_some(), "{what}"),
            _ => {
                let size = rng.random_range(1..8);
                let got = t.alloc_range(size, a..=b, token.clone());
                assert_eq!(got, m.alloc(size, a, b, false, token.clone()), "{what}");
            }
        }
        if k % 10 == 0 {
            check(&t, &m, &what);
        } else {
            validate(&t, &what);
        }
        assert_eq!(Rc::strong_count(&token), count(&t, &m), "{what}");
    }
    let d = t.dup();
    assert_eq!(Rc::strong_count(&token), count(&t, &m) + d.len());
    let mut k = 0;
    let half = t.dup_filter_map(|v| {
        k += 1;
        (k % 2 == 0).then(|| v.clone())
    });
    assert_eq!(half.len(), t.len() / 2);
    assert_eq!(
        Rc::strong_count(&token),
        count(&t, &m) + d.len() + half.len()
    );
    drop(d);
    drop(half);
    assert_eq!(Rc::strong_count(&token), count(&t, &m));
    let mapped = t.dup_map(|_| 0u8);
    assert_eq!(Rc::strong_count(&token), count(&t, &m));
    drop(mapped);
    let n = t.len();
    t.clear();
    assert_eq!(Rc::strong_count(&token), 1 + m.len());
    check(&t, &Model::new(), "cleared");
    let t2 = RangeTree::from_sorted(m.entries()).unwrap();
    assert_eq!(t2.len(), n);
    assert_eq!(Rc::strong_count(&token), 1 + 2 * n);
    drop(t2);
    m.m.clear();
    assert_eq!(Rc::strong_count(&token), 1);
}

// ---------------------------------------------------------------------------
// 4. Large trees
// ---------------------------------------------------------------------------

/// 100K entries inserted in random, ascending and descending order, checked
/// against a model (gets, gaps, gap searches), then erased in random order
/// down to the empty single leaf.
#[test]
fn large_trees_insert_and_erase_100k() {
    const N: u64 = 100_000;
    let mut rng = SmallRng::seed_from_u64(0x100_000);
    let stride = MAX / N;
    // Spread over the whole space, the last touching u64::MAX; adjacent
    // (no gaps at all); every other index free.
    let spread: Vec<_> = (0..N)
        .map(|i| {
            let f = i * stride;
            let l = if i == N - 1 { MAX } else { f + stride / 2 };
            (f, l, i)
        })
        .collect();
    let dense: Vec<_> = (0..N).map(|i| (i * 3, i * 3 + 2, i)).collect();
    let gappy: Vec<_> = (0..N).map(|i| (i * 4 + 1, i * 4 + 2, i)).collect();
    for (name, layout) in [
        ("random", &spread),
        ("ascending", &dense),
        ("descending", &gappy),
    ] {
        let mut order = layout.clone();
        match name {
            "random" => order.shuffle(&mut rng),
            "descending" => order.reverse(),
            _ => {}
        }
        let mut t = RangeTree::new();
        for (k, &(f, l, v)) in order.iter().enumerate() {
            t.insert_range(f, l, v).unwrap();
            if (k + 1) % 1000 == 0 {
                validate(&t, &format!("{name}: insert {k}"));
                assert_eq!(t.len(), k + 1, "{name}");
            }
        }
        let m = Model::from_entries(layout);
        check(&t, &m, name);

        // Lookups, gaps and searches against the model.
        for _ in 0..2000 {
            let x = point(&mut rng, layout);
            assert_eq!(
                t.get_range(x).map(|(f, l, v)| (f, l, *v)),
                m.get_range(x),
                "{name}: get_range({x})"
            );
        }
        assert_eq!(
            t.gaps(0..=MAX).collect::<Vec<_>>(),
            m.gaps(0, MAX),
            "{name}: gaps"
        );
        let gaps = m.gaps(0, MAX);
        for _ in 0..60 {
            let (lo, hi) = random_window(&mut rng, layout);
            let size = random_size(&mut rng, &gaps);
            let align = random_align(&mut rng);
            check_search(&t, &m, size, align, lo, hi);
        }
        let d = t.dup();
        assert!(d == t);
        assert_eq!(d.height(), t.height());
        drop(d);

        // Erase everything in random order through an index inside each.
        let mut idx: Vec<usize> = (0..layout.len()).collect();
        idx.shuffle(&mut rng);
        for (k, &i) in idx.iter().enumerate() {
            let (f, l, v) = layout[i];
            let at = rng.random_range(f..=l);
            assert_eq!(t.erase(at), Some(v), "{name}: erase({at})");
            if k % 7 == 0 {
                assert_eq!(t.erase(at), None, "{name}: erase({at}) again");
                assert_eq!(t.get(f), None);
            }
            if (k + 1) % 1000 == 0 {
                validate(&t, &format!("{name}: erase {k}"));
                assert_eq!(t.len(), layout.len() - k - 1, "{name}");
            }
        }
        check(&t, &Model::new(), &format!("{name}: all erased"));
        assert!(t.is_empty());
        assert_eq!(t.height(), 1, "{name}: the empty tree is a single leaf");
        assert_eq!(t.gaps(0..=MAX).collect::<Vec<_>>(), [(0, MAX)]);

        // Reuse after clear.
        let mut t = RangeTree::from_sorted(layout.iter().copied()).unwrap();
        check(&t, &m, &format!("{name}: bulk"));
        t.clear();
        check(&t, &Model::new(), &format!("{name}: cleared"));
        t.insert_range(5, 6, 7).unwrap();
        check(
            &t,
            &Model::from_entries(&[(5, 6, 7)]),
            &format!("{name}: reused"),
        );
    }
}

// ---------------------------------------------------------------------------
// 5. Gap search and allocation
// ---------------------------------------------------------------------------

/// Random trees (bulk loaded or inserted in any order), mutated between
/// rounds so the recorded gaps change everywhere; random windows, sizes and
/// alignments (1 up to 2^63) in both directions.
#[test]
fn gap_search_matches_the_model_on_random_trees() {
    let mut rng = SmallRng::seed_from_u64(0x9a9_0001);
    let mut next = 1 << 40;
    let sizes = [0usize, 1, 15, 16, 17, 161, 1000, 2000, 2000, 2000, 600, 300];
    for (tree_no, &n) in sizes.iter().enumerate() {
        let layout = random_layout(&mut rng, n);
        let mut m = Model::from_entries(&layout);
        let mut t = build(&mut rng, &layout, tree_no);
        check(&t, &m, "built");
        for round in 0..8 {
            let ents = m.entries();
            for _ in 0..40 {
                mutate(&mut rng, &mut t, &mut m, &ents, &mut next);
            }
            check(&t, &m, &format!("tree {tree_no} round {round}"));
            let ents = m.entries();
            let gaps = m.gaps(0, MAX);
            for _ in 0..40 {
                let (lo, hi) = random_window(&mut rng, &ents);
                let size = random_size(&mut rng, &gaps);
                let align = random_align(&mut rng);
                check_search(&t, &m, size, align, lo, hi);
            }
        }
    }
}

/// Allocate random sizes in both directions in a small window until it is
/// full; every allocation lands where the model says, then every size is
/// NoSpace.
#[test]
fn alloc_until_no_space() {
    let mut rng = SmallRng::seed_from_u64(0xa110_c001);
    let mut next = 1u64;
    for round in 0..40u64 {
        let (lo, hi) = match round % 4 {
            0 => (100, 400),
            1 => (MAX - 300, MAX),
            2 => (0, 300),
            _ => (1000, 1000 + rng.random_range(0..300)),
        };
        let mut t = RangeTree::new();
        let mut m = Model::new();
        for _ in 0..rng.random_range(0..40) {
            let a = rng.random_range(lo.saturating_sub(50)..=hi.saturating_add(50).min(MAX - 10));
            let b = a + rng.random_range(0..10);
            assert_eq!(t.insert_range(a, b, 0), m.insert(a, b, 0));
        }
        check(&t, &m, "setup");
        let mode = round % 3; // forward, reverse, mixed
        let mut steps = 0;
        while !m.gaps(lo, hi).is_empty() {
            steps += 1;
            assert!(steps < 5000, "the window never filled");
            let size = rng.random_range(1..=6);
            let rev = match mode {
                0 => false,
                1 => true,
                _ => rng.random_bool(0.5),
            };
            let got = tree_alloc(&mut t, size, lo, hi, rev, next);
            let want = m.alloc(size, lo, hi, rev, next);
            next += 1;
            assert_eq!(
                got, want,
                "round {round}: alloc size {size} rev {rev} in [{lo}, {hi}]"
            );
            check(&t, &m, &format!("round {round} after alloc"));
        }
        for size in 1..=3 {
            for rev in [false, true] {
                assert_eq!(
                    tree_alloc(&mut t, size, lo, hi, rev, 0),
                    Err(E::NoSpace { size })
                );
                assert_eq!(tree_find(&t, size, None, lo, hi, rev), Ok(None));
            }
        }
        check(&t, &m, "full window");
        assert_eq!(t.gaps(lo..=hi).count(), 0);
    }
}
