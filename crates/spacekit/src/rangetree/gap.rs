//! Free-gap search (the maple tree's `mas_empty_area` / `mas_empty_area_rev`).
//!
//! Every internal node records, per child, the child's first and last index
//! in use and the largest gap strictly inside it; the gap between two
//! neighbouring children is the difference of their bounds. A search walks
//! children in order and descends only into a child whose recorded gap can
//! hold the request, so an unaligned search inside the window visits one
//! path (plus the children cut by the window's two ends): O(log n).

use super::error::RangeTreeError;
use super::ops::Node;
use super::tree::RangeTree;

/// A validated gap request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Query {
    pub size: u64,
    /// `align - 1` (align is a power of two).
    pub mask: u64,
    pub lo: u64,
    pub hi: u64,
}

impl Query {
    /// Checks the arguments in the documented order.
    pub fn new(size: u64, align: u64, lo: u64, hi: u64) -> Result<Query, RangeTreeError> {
        if lo > hi {
            return Err(RangeTreeError::InvalidRange {
                first: lo,
                last: hi,
            });
        }
        if size == 0 {
            return Err(RangeTreeError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(RangeTreeError::BadAlignment { align });
        }
        if hi - lo < size - 1 {
            return Err(RangeTreeError::WindowTooSmall {
                size,
                first: lo,
                last: hi,
            });
        }
        Ok(Query {
            size,
            mask: align - 1,
            lo,
            hi,
        })
    }

    /// Lowest aligned start of `size` free indices in free run `[g0, g1]`
    /// clipped to the window.
    #[inline]
    fn fit_low(&self, g0: u64, g1: u64) -> Option<u64> {
        let a = g0.max(self.lo);
        let b = g1.min(self.hi);
        if a > b {
            return None;
        }
        let s = a.checked_add(self.mask)? & !self.mask;
        (s <= b && b - s >= self.size - 1).then_some(s)
    }

    /// Highest aligned start of `size` free indices in free run `[g0, g1]`
    /// clipped to the window.
    #[inline]
    fn fit_high(&self, g0: u64, g1: u64) -> Option<u64> {
        let a = g0.max(self.lo);
        let b = g1.min(self.hi);
        if a > b || b - a < self.size - 1 {
            return None;
        }
        let s = (b - (self.size - 1)) & !self.mask;
        (s >= a).then_some(s)
    }
}

impl<V> RangeTree<V> {
    /// The lowest fit for `q`, or `None`.
    pub(super) fn gap_low(&self, q: &Query) -> Option<u64> {
        if self.len == 0 {
            return q.fit_low(0, u64::MAX);
        }
        let root = self.root_node();
        let s = self.summary(root);
        if s.lo > 0 {
            if let Some(x) = q.fit_low(0, s.lo - 1) {
                return Some(x);
            }
        }
        if s.gap >= q.size && s.hi >= q.lo && s.lo <= q.hi {
            if let Some(x) = self.low_in(root, q) {
                return Some(x);
            }
        }
        if s.hi < u64::MAX {
            return q.fit_low(s.hi + 1, u64::MAX);
        }
        None
    }

    /// The highest fit for `q`, or `None`.
    pub(super) fn gap_high(&self, q: &Query) -> Option<u64> {
        if self.len == 0 {
            return q.fit_high(0, u64::MAX);
        }
        let root = self.root_node();
        let s = self.summary(root);
        if s.hi < u64::MAX {
            if let Some(x) = q.fit_high(s.hi + 1, u64::MAX) {
                return Some(x);
            }
        }
        if s.gap >= q.size && s.hi >= q.lo && s.lo <= q.hi {
            if let Some(x) = self.high_in(root, q) {
                return Some(x);
            }
        }
        if s.lo > 0 {
            return q.fit_high(0, s.lo - 1);
        }
        None
    }

    /// Lowest fit strictly inside node `n`'s span.
    fn low_in(&self, n: Node, q: &Query) -> Option<u64> {
        match n {
            Node::Leaf(i) => {
                let l = &self.leaves[i as usize];
                for j in 1..l.len() {
                    let (g0, g1) = (l.last[j - 1] + 1, l.first[j] - 1);
                    if g0 > q.hi {
                        break;
                    }
                    if g0 <= g1 && g1 >= q.lo {
                        if let Some(x) = q.fit_low(g0, g1) {
                            return Some(x);
                        }
                    }
                }
                None
            }
            Node::Inner(i) => {
                let node = &self.inners[i as usize];
                let len = node.len();
                for c in 0..len {
                    if node.lo[c] > q.hi {
                        break;
                    }
                    if node.hi[c] >= q.lo && node.gap[c] >= q.size {
                        if let Some(x) = self.low_in(self.kid(i, c), q) {
                            return Some(x);
                        }
                    }
                    if c + 1 < len {
                        let (g0, g1) = (node.hi[c] + 1, node.lo[c + 1] - 1);
                        if g0 <= g1 && g1 >= q.lo {
                            if let Some(x) = q.fit_low(g0, g1) {
                                return Some(x);
                            }
                        }
                    }
                }
                None
            }
        }
    }

    /// Highest fit strictly inside node `n`'s span.
    fn high_in(&self, n: Node, q: &Query) -> Option<u64> {
        match n {
            Node::Leaf(i) => {
                let l = &self.leaves[i as usize];
                for j in (1..l.len()).rev() {
                    let (g0, g1) = (l.last[j - 1] + 1, l.first[j] - 1);
                    if g1 < q.lo {
                        break;
                    }
                    if g0 <= g1 && g0 <= q.hi {
                        if let Some(x) = q.fit_high(g0, g1) {
                            return Some(x);
                        }
                    }
                }
                None
            }
            Node::Inner(i) => {
                let node = &self.inners[i as usize];
                for c in (0..node.len()).rev() {
                    if node.hi[c] < q.lo {
                        break;
                    }
                    if node.lo[c] <= q.hi && node.gap[c] >= q.size {
                        if let Some(x) = self.high_in(self.kid(i, c), q) {
                            return Some(x);
                        }
                    }
                    if c > 0 {
                        let (g0, g1) = (node.hi[c - 1] + 1, node.lo[c] - 1);
                        if g0 <= g1 && g0 <= q.hi {
                            if let Some(x) = q.fit_high(g0, g1) {
                                return Some(x);
                            }
                        }
                    }
                }
                None
            }
        }
    }
}
