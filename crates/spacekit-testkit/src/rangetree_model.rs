//! The naive range-tree model: a `BTreeMap` from first index to
//! `(last, value)`, with the gap search and allocation done over its free
//! intervals (and index by index in `brute_find`). Used by the `rangetree` test target.

use spacekit::rangetree::RangeTreeError;
use std::collections::BTreeMap;
use std::ops::Bound;

pub type E = RangeTreeError;
pub const MAX: u64 = u64::MAX;

/// The naive model: `first -> (last, value)`, one map entry per range.
#[derive(Clone, Debug, PartialEq)]
pub struct Model<V> {
    pub m: BTreeMap<u64, (u64, V)>,
}

impl<V: Clone> Default for Model<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> Model<V> {
    pub fn new() -> Self {
        Self { m: BTreeMap::new() }
    }

    pub fn from_entries(entries: &[(u64, u64, V)]) -> Self {
        let mut m = Self::new();
        for (f, l, v) in entries {
            m.insert(*f, *l, v.clone()).unwrap();
        }
        m
    }

    pub fn len(&self) -> usize {
        self.m.len()
    }

    pub fn is_empty(&self) -> bool {
        self.m.is_empty()
    }

    pub fn entries(&self) -> Vec<(u64, u64, V)> {
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
    pub fn overlapping(&self, lo: u64, hi: u64) -> Vec<(u64, u64, V)> {
        self.overlapping_bounds(lo, hi)
            .into_iter()
            .map(|(f, l)| (f, l, self.m[&f].1.clone()))
            .collect()
    }

    pub fn get_range(&self, index: u64) -> Option<(u64, u64, V)> {
        self.m
            .range(..=index)
            .next_back()
            .filter(|(_, (l, _))| *l >= index)
            .map(|(&f, (l, v))| (f, *l, v.clone()))
    }

    pub fn insert(&mut self, first: u64, last: u64, v: V) -> Result<(), E> {
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

    pub fn store(&mut self, first: u64, last: u64, v: V) -> Result<(), E> {
        if first > last {
            return Err(E::InvalidRange { first, last });
        }
        self.punch(first, last);
        self.m.insert(first, (last, v));
        Ok(())
    }

    pub fn remove(&mut self, first: u64, last: u64) -> Result<usize, E> {
        if first > last {
            return Err(E::InvalidRange { first, last });
        }
        Ok(self.punch(first, last))
    }

    pub fn erase(&mut self, index: u64) -> Option<V> {
        let (f, _, _) = self.get_range(index)?;
        self.m.remove(&f).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, index: u64) -> Option<&mut V> {
        let (f, _, _) = self.get_range(index)?;
        self.m.get_mut(&f).map(|(_, v)| v)
    }

    pub fn filter_map<W: Clone>(&self, mut f: impl FnMut(&V) -> Option<W>) -> Model<W> {
        Model {
            m: self
                .m
                .iter()
                .filter_map(|(&k, (l, v))| f(v).map(|w| (k, (*l, w))))
                .collect(),
        }
    }

    /// The maximal free intervals intersected with `[lo, hi]`, ascending.
    pub fn gaps(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
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
    pub fn find(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        rev: bool,
    ) -> Result<Option<u64>, E> {
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

    pub fn alloc(&mut self, size: u64, lo: u64, hi: u64, rev: bool, v: V) -> Result<u64, E> {
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
pub fn brute_find<V: Clone>(
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
pub fn inclusive(start: Bound<u64>, end: Bound<u64>) -> Option<(u64, u64)> {
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
