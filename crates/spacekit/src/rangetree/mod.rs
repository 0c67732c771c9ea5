//! A B-tree of non-overlapping ranges of `u64` with O(log n) free-gap search
//! and a structure copy at memcpy speed: Linux's maple tree, as used for a
//! process's VMAs, in userspace.
//!
//! [`RangeTree<V>`] maps inclusive ranges `[first, last]` (the whole
//! `0..=u64::MAX` space fits) to values. It answers what the kernel asks of
//! the maple tree:
//!
//! | spacekit | Linux |
//! |---|---|
//! | [`get`](RangeTree::get), [`get_range`](RangeTree::get_range) | `mtree_load` |
//! | [`insert_range`](RangeTree::insert_range) | `mtree_insert_range` (EEXIST → [`RangeTreeError::Occupied`]) |
//! | [`store_range`](RangeTree::store_range) | `mtree_store_range` |
//! | [`erase`](RangeTree::erase) | `mtree_erase` |
//! | [`range`](RangeTree::range) | `mt_find` / `mas_for_each` |
//! | [`find_gap`](RangeTree::find_gap), [`find_gap_rev`](RangeTree::find_gap_rev) | `mas_empty_area`, `mas_empty_area_rev` |
//! | [`alloc_range`](RangeTree::alloc_range) | `mtree_alloc_range` |
//! | [`dup_map`](RangeTree::dup_map) | `__mt_dup` + fork's per-VMA copy in `dup_mmap` |
//!
//! # Layout
//!
//! Leaves hold up to [`LEAF_SLOTS`] (16) entries as pivots (`first`, `last`)
//! and slots (indices into one dense vector of values); internal nodes hold
//! up to [`INNER_SLOTS`] (10)
//! children and, for each child, its first and last index in use and the
//! largest free gap strictly inside it. The gap between two neighbouring
//! children follows from their bounds, so the largest gap below any node is
//! known without visiting it, and [`find_gap`](RangeTree::find_gap) descends
//! only where a request fits.
//!
//! Unlike the maple tree, a leaf stores only entries: a gap is implicit
//! between two entries instead of being a NULL slot. A NULL slot can sit at
//! the end of one node and the start of the next, and the maple tree needs a
//! "spanning store" to keep such a gap whole; with implicit gaps a gap is
//! never split, every slot holds an entry, and a leaf's 16 slots hold 16
//! entries whether or not they touch.
//!
//! Nodes live in two arenas (`Vec`s of plain-data nodes) and refer to each
//! other by `u32` index; values live in a third, dense `Vec`. The structure
//! has no pointers to rewrite, so [`dup`](RangeTree::dup) and
//! [`dup_map`](RangeTree::dup_map) copy both node arrays with one `memcpy`
//! each and map the value vector in one sequential pass, with no
//! rebalancing and no per-entry insert. That is `__mt_dup`'s idea (seed
//! 002) taken one step further: the kernel walks the source tree node by
//! node, rewriting every parent and child pointer, and fork then copies each
//! VMA it points to. An erase keeps the values dense by moving the last
//! value into the hole (each value records its leaf, so the move costs one
//! leaf update).
//!
//! Non-root leaves keep at least 6 entries and non-root internal nodes at
//! least 4 children. A full node first passes entries to a sibling with
//! room (B*-tree style) and splits only when both neighbours are full, and
//! then unevenly when the insert is at either end, so trees built in address
//! order (as `mmap` and fork build them) end up nearly full: a million
//! ranges inserted in order make a tree of height 6.
//!
//! # Example
//!
//! ```
//! use spacekit::rangetree::RangeTree;
//!
//! let mut vmas = RangeTree::new();
//! vmas.insert_range(0x1000, 0x1fff, "text")?;
//! vmas.insert_range(0x4000, 0x7fff, "heap")?;
//! assert_eq!(vmas.get(0x4abc), Some(&"heap"));
//!
//! // The lowest free gap of 0x2000 at or above 0x1000, and the highest
//! // below 0x10000 aligned to 0x4000 (mmap's top-down search).
//! assert_eq!(vmas.find_gap(0x2000, 0x1000..=u64::MAX)?, Some(0x2000));
//! assert_eq!(vmas.find_gap_rev_aligned(0x2000, 0x4000, 0..=0xffff)?, Some(0xc000));
//!
//! // fork(): copy the structure, copying each value.
//! let child = vmas.dup_map(|name| name.to_uppercase());
//! assert_eq!(child.get_range(0x1800), Some((0x1000, 0x1fff, &"TEXT".to_string())));
//! # Ok::<(), spacekit::rangetree::RangeTreeError>(())
//! ```

use alloc::vec::Vec;
use core::fmt;
use core::ops::{Bound, RangeBounds, RangeInclusive};

mod error;
mod gap;
mod iter;
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod maps;
mod node;
mod ops;
mod tree;
#[cfg(any(test, feature = "testing"))]
mod validate;

pub use error::RangeTreeError;
pub use iter::{Gaps, Iter};
pub use node::{INNER_SLOTS, LEAF_SLOTS};
pub use tree::RangeTree;

use gap::Query;
use node::{Leaf, NIL};
use ops::Node;

impl<V> Default for RangeTree<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> Clone for RangeTree<V> {
    /// Same as [`dup`](RangeTree::dup).
    fn clone(&self) -> Self {
        self.dup()
    }
}

impl<V: fmt::Debug> fmt::Debug for RangeTree<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(a, b, v)| (a..=b, v)))
            .finish()
    }
}

impl<V: PartialEq> PartialEq for RangeTree<V> {
    /// Equal when both hold the same entries (whatever their node layout).
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V: Eq> Eq for RangeTree<V> {}

impl<'a, V> IntoIterator for &'a RangeTree<V> {
    type Item = (u64, u64, &'a V);
    type IntoIter = Iter<'a, V>;
    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

/// `[a, b]` of a `RangeBounds`, or `None` when it is empty.
fn bounds(r: &impl RangeBounds<u64>) -> Option<(u64, u64)> {
    let a = match r.start_bound() {
        Bound::Included(&x) => x,
        Bound::Excluded(&x) => x.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let b = match r.end_bound() {
        Bound::Included(&x) => x,
        Bound::Excluded(&x) => x.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (a <= b).then_some((a, b))
}

impl<V> RangeTree<V> {
    /// An empty tree (allocates nothing).
    pub const fn new() -> Self {
        RangeTree {
            leaves: Vec::new(),
            inners: Vec::new(),
            vals: Vec::new(),
            owner: Vec::new(),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: NIL,
            height: 0,
            len: 0,
        }
    }

    /// Number of entries (ranges, not indices).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every entry and frees every node.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Levels of nodes from the root to the leaves: 1 for a tree that is a
    /// single leaf (up to 16 entries, and the empty tree).
    pub fn height(&self) -> usize {
        self.height.max(1) as usize
    }

    fn root_node(&self) -> Node {
        if self.height <= 1 {
            Node::Leaf(self.root)
        } else {
            Node::Inner(self.root)
        }
    }

    /// Leaf and slot of the entry containing `index`.
    #[inline]
    fn locate(&self, index: u64) -> Option<(u32, usize)> {
        if self.len == 0 {
            return None;
        }
        let leaf = self.find_leaf(index);
        let l = &self.leaves[leaf as usize];
        let u = l.upper(index);
        (u > 0 && l.last[u - 1] >= index).then(|| (leaf, u - 1))
    }

    /// Leaf and slot of the lowest entry ending at or after `index`.
    fn first_from(&self, index: u64) -> Option<(u32, usize)> {
        if self.len == 0 {
            return None;
        }
        let leaf = self.find_leaf(index);
        let l = &self.leaves[leaf as usize];
        let u = l.upper(index);
        if u > 0 && l.last[u - 1] >= index {
            Some((leaf, u - 1))
        } else if u < l.len() {
            Some((leaf, u))
        } else if l.next != NIL {
            Some((l.next, 0))
        } else {
            None
        }
    }

    /// Leaf and slot of the highest entry starting at or before `index`.
    fn last_upto(&self, index: u64) -> Option<(u32, usize)> {
        if self.len == 0 {
            return None;
        }
        let leaf = self.find_leaf(index);
        let u = self.leaves[leaf as usize].upper(index);
        (u > 0).then(|| (leaf, u - 1))
    }

    /// The value of the entry containing `index` (`mtree_load`).
    ///
    /// ```
    /// let mut t = spacekit::rangetree::RangeTree::new();
    /// t.insert_range(10, 19, 'a').unwrap();
    /// assert_eq!((t.get(9), t.get(10), t.get(19), t.get(20)), (None, Some(&'a'), Some(&'a'), None));
    /// ```
    #[inline]
    pub fn get(&self, index: u64) -> Option<&V> {
        let (leaf, pos) = self.locate(index)?;
        self.vals.get(self.leaves[leaf as usize].val[pos] as usize)
    }

    /// The value of the entry containing `index`, mutably (fork's "replace
    /// each entry with its copy").
    pub fn get_mut(&mut self, index: u64) -> Option<&mut V> {
        let (leaf, pos) = self.locate(index)?;
        let v = self.leaves[leaf as usize].val[pos];
        self.vals.get_mut(v as usize)
    }

    /// The entry containing `index` as `(first, last, &value)`.
    pub fn get_range(&self, index: u64) -> Option<(u64, u64, &V)> {
        let (leaf, pos) = self.locate(index)?;
        let l = &self.leaves[leaf as usize];
        Some((
            l.first[pos],
            l.last[pos],
            self.vals.get(l.val[pos] as usize)?,
        ))
    }

    /// Inserts `[first, last] -> value` if nothing there is in use
    /// (`mtree_insert_range`).
    ///
    /// # Errors
    /// [`InvalidRange`](RangeTreeError::InvalidRange) if `first > last`;
    /// [`Occupied`](RangeTreeError::Occupied) naming the lowest entry in the
    /// way. Either way the tree is unchanged.
    pub fn insert_range(&mut self, first: u64, last: u64, value: V) -> Result<(), RangeTreeError> {
        if first > last {
            return Err(RangeTreeError::InvalidRange { first, last });
        }
        if self.root == NIL {
            self.root = self.alloc_leaf();
            self.height = 1;
        }
        let leaf = self.find_leaf(first);
        let l = &self.leaves[leaf as usize];
        let u = l.upper(first);
        if u > 0 && l.last[u - 1] >= first {
            return Err(RangeTreeError::Occupied {
                first: l.first[u - 1],
                last: l.last[u - 1],
            });
        }
        let next = if u < l.len() {
            Some((l.first[u], l.last[u]))
        } else if l.next != NIL {
            let n = &self.leaves[l.next as usize];
            Some((n.first[0], n.last[0]))
        } else {
            None
        };
        if let Some((f, l)) = next {
            if f <= last {
                return Err(RangeTreeError::Occupied { first: f, last: l });
            }
        }
        self.leaf_insert(leaf, u, first, last, value);
        self.len += 1;
        Ok(())
    }

    /// Stores `[first, last] -> value`, overwriting whatever was there
    /// (`mtree_store_range`): entries partly covered are truncated, and an
    /// entry covering the range with room on both sides is split in two,
    /// the upper part holding a clone of its value. Costs O(log n) per entry
    /// overwritten.
    ///
    /// # Errors
    /// [`InvalidRange`](RangeTreeError::InvalidRange) if `first > last`
    /// (nothing changes).
    pub fn store_range(&mut self, first: u64, last: u64, value: V) -> Result<(), RangeTreeError>
    where
        V: Clone,
    {
        self.remove_range(first, last)?;
        self.insert_range(first, last, value)
    }

    /// Frees `[first, last]`: what `store_range` with NULL does in the
    /// kernel. Entries inside are removed, entries partly covered truncated,
    /// and an entry covering the range with room on both sides split (its
    /// upper part holds a clone of the value). Returns how many entries
    /// overlapped the range.
    ///
    /// # Errors
    /// [`InvalidRange`](RangeTreeError::InvalidRange) if `first > last`
    /// (nothing changes).
    pub fn remove_range(&mut self, first: u64, last: u64) -> Result<usize, RangeTreeError>
    where
        V: Clone,
    {
        if first > last {
            return Err(RangeTreeError::InvalidRange { first, last });
        }
        let mut hit = 0;
        while let Some((leaf, pos)) = self.first_from(first) {
            let l = &self.leaves[leaf as usize];
            let (f, e, vi) = (l.first[pos], l.last[pos], l.val[pos]);
            if f > last {
                break;
            }
            hit += 1;
            if f < first && e > last {
                // Split: keep [f, first - 1], re-insert [last + 1, e].
                let upper = self.vals.get(vi as usize).cloned();
                self.leaves[leaf as usize].last[pos] = first - 1;
                self.refresh_up(Node::Leaf(leaf));
                if let Some(v) = upper {
                    self.insert_range(last + 1, e, v)?;
                }
                break;
            } else if f < first {
                self.leaves[leaf as usize].last[pos] = first - 1;
                self.refresh_up(Node::Leaf(leaf));
            } else if e > last {
                self.leaves[leaf as usize].first[pos] = last + 1;
                self.refresh_up(Node::Leaf(leaf));
                break;
            } else {
                self.take_entry(leaf, pos);
            }
        }
        Ok(hit)
    }

    /// Removes the entry containing `index` and returns its value
    /// (`mtree_erase`); `None`, and no change, if `index` is free.
    pub fn erase(&mut self, index: u64) -> Option<V> {
        let (leaf, pos) = self.locate(index)?;
        self.take_entry(leaf, pos)
    }

    /// Every entry in ascending order as `(first, last, &value)`.
    pub fn iter(&self) -> Iter<'_, V> {
        if self.len == 0 {
            return Iter::empty(self);
        }
        let mut first = self.root_node();
        let mut last = first;
        while let Node::Inner(i) = first {
            first = self.kid(i, 0);
        }
        while let Node::Inner(i) = last {
            last = self.kid(i, self.inners[i as usize].len() - 1);
        }
        let (Node::Leaf(a), Node::Leaf(b)) = (first, last) else {
            return Iter::empty(self);
        };
        let back = (b, self.leaves[b as usize].len() - 1);
        Iter::new(self, (a, 0), back, Some(self.len))
    }

    /// The entries that intersect `range` (including one that starts before
    /// it), ascending (`mt_find`). An empty range yields nothing.
    pub fn range<R: RangeBounds<u64>>(&self, range: R) -> Iter<'_, V> {
        let Some((a, b)) = bounds(&range) else {
            return Iter::empty(self);
        };
        match (self.first_from(a), self.last_upto(b)) {
            (Some(front), Some(back)) => {
                let f = self.leaves[front.0 as usize].first[front.1];
                let g = self.leaves[back.0 as usize].first[back.1];
                if f > b || g < f {
                    Iter::empty(self)
                } else {
                    Iter::new(self, front, back, None)
                }
            }
            _ => Iter::empty(self),
        }
    }

    /// The free runs inside `within`, ascending, as inclusive
    /// `(first, last)`; each is clipped to the window.
    pub fn gaps(&self, within: RangeInclusive<u64>) -> Gaps<'_, V> {
        let (a, b) = (*within.start(), *within.end());
        Gaps {
            entries: self.range(a..=b),
            next: (a <= b).then_some(a),
            end: b,
        }
    }

    /// The lowest `s` such that `[s, s + size - 1]` lies inside `within` and
    /// touches no entry (`mas_empty_area`), in O(log n).
    ///
    /// # Errors
    /// Checked in this order: [`InvalidRange`](RangeTreeError::InvalidRange)
    /// if the window's start is above its end,
    /// [`ZeroSize`](RangeTreeError::ZeroSize), and
    /// [`WindowTooSmall`](RangeTreeError::WindowTooSmall) if the window holds
    /// fewer than `size` indices. No fit is `Ok(None)` (the kernel's EBUSY).
    pub fn find_gap(
        &self,
        size: u64,
        within: RangeInclusive<u64>,
    ) -> Result<Option<u64>, RangeTreeError> {
        self.find_gap_aligned(size, 1, within)
    }

    /// The highest `s` such that `[s, s + size - 1]` lies inside `within`
    /// and touches no entry (`mas_empty_area_rev`, what a top-down `mmap`
    /// uses), in O(log n). Errors as [`find_gap`](Self::find_gap).
    pub fn find_gap_rev(
        &self,
        size: u64,
        within: RangeInclusive<u64>,
    ) -> Result<Option<u64>, RangeTreeError> {
        self.find_gap_rev_aligned(size, 1, within)
    }

    /// [`find_gap`](Self::find_gap) with `s` a multiple of `align` (a power
    /// of two). The search descends into subtrees whose largest gap holds
    /// `size`; a gap shorter than `size + align - 1` may still miss the
    /// alignment, so a tree full of such near misses costs more than
    /// O(log n) (like the kernel, which searches for `size + align - 1`).
    ///
    /// # Errors
    /// As [`find_gap`](Self::find_gap), plus
    /// [`BadAlignment`](RangeTreeError::BadAlignment) (checked after
    /// `ZeroSize`) if `align` is 0 or not a power of two.
    pub fn find_gap_aligned(
        &self,
        size: u64,
        align: u64,
        within: RangeInclusive<u64>,
    ) -> Result<Option<u64>, RangeTreeError> {
        let q = Query::new(size, align, *within.start(), *within.end())?;
        Ok(self.gap_low(&q))
    }

    /// [`find_gap_rev`](Self::find_gap_rev) with `s` a multiple of `align`;
    /// see [`find_gap_aligned`](Self::find_gap_aligned).
    pub fn find_gap_rev_aligned(
        &self,
        size: u64,
        align: u64,
        within: RangeInclusive<u64>,
    ) -> Result<Option<u64>, RangeTreeError> {
        let q = Query::new(size, align, *within.start(), *within.end())?;
        Ok(self.gap_high(&q))
    }

    /// Finds the lowest free gap of `size` in `within` and stores `value`
    /// there (`mtree_alloc_range`); returns its first index.
    ///
    /// # Errors
    /// As [`find_gap`](Self::find_gap), and
    /// [`NoSpace`](RangeTreeError::NoSpace) if no gap fits.
    pub fn alloc_range(
        &mut self,
        size: u64,
        within: RangeInclusive<u64>,
        value: V,
    ) -> Result<u64, RangeTreeError> {
        let s = self
            .find_gap(size, within)?
            .ok_or(RangeTreeError::NoSpace { size })?;
        self.insert_range(s, s + (size - 1), value)?;
        Ok(s)
    }

    /// Like [`alloc_range`](Self::alloc_range) with the highest gap
    /// (`mtree_alloc_rrange`).
    ///
    /// # Errors
    /// As [`alloc_range`](Self::alloc_range).
    pub fn alloc_range_rev(
        &mut self,
        size: u64,
        within: RangeInclusive<u64>,
        value: V,
    ) -> Result<u64, RangeTreeError> {
        let s = self
            .find_gap_rev(size, within)?
            .ok_or(RangeTreeError::NoSpace { size })?;
        self.insert_range(s, s + (size - 1), value)?;
        Ok(s)
    }

    /// A copy of the tree: the node arrays are copied as they are, with no
    /// rebalancing and no per-entry insert (`__mt_dup`). Also [`Clone`].
    pub fn dup(&self) -> Self
    where
        V: Clone,
    {
        self.dup_map(V::clone)
    }

    /// A copy of the tree's structure with every value replaced by
    /// `f(&value)`: fork's `dup_mmap`, which duplicates the VMA tree and
    /// then copies each VMA. The node arrays are copied with one `memcpy`
    /// each and `f` is called once per entry, in one pass over the dense
    /// value vector: in storage order, not key order (do not rely on the
    /// order of the calls).
    ///
    /// ```
    /// # use spacekit::rangetree::RangeTree;
    /// let t: RangeTree<u32> = (0..1000u64).map(|i| (i * 10, i * 10 + 5, i as u32)).collect();
    /// let doubled = t.dup_map(|v| u64::from(*v) * 2);
    /// assert_eq!(doubled.get_range(9_993), Some((9_990, 9_995, &1998)));
    /// ```
    pub fn dup_map<W>(&self, f: impl FnMut(&V) -> W) -> RangeTree<W> {
        RangeTree {
            leaves: self.leaves.clone(),
            inners: self.inners.clone(),
            vals: self.vals.iter().map(f).collect(),
            owner: self.owner.clone(),
            free_leaves: self.free_leaves.clone(),
            free_inners: self.free_inners.clone(),
            root: self.root,
            height: self.height,
            len: self.len,
        }
    }

    /// Like [`dup_map`](Self::dup_map), dropping the entries for which `f`
    /// returns `None` (fork skipping `VM_DONTCOPY` VMAs). The survivors are
    /// bulk-loaded into a fresh tree: O(n), slower than `dup_map`.
    pub fn dup_filter_map<W>(&self, mut f: impl FnMut(&V) -> Option<W>) -> RangeTree<W> {
        RangeTree::build(self.iter().filter_map(|(a, b, v)| Some((a, b, f(v)?))))
    }

    /// Builds a tree from entries in ascending order, packing the nodes
    /// bottom-up in O(n).
    ///
    /// # Errors
    /// [`InvalidRange`](RangeTreeError::InvalidRange) for an entry with
    /// `first > last`; [`Unsorted`](RangeTreeError::Unsorted) for one that
    /// does not start after the previous one ends.
    pub fn from_sorted<I: IntoIterator<Item = (u64, u64, V)>>(
        entries: I,
    ) -> Result<Self, RangeTreeError> {
        let mut v: Vec<(u64, u64, V)> = Vec::new();
        for (first, last, value) in entries {
            if first > last {
                return Err(RangeTreeError::InvalidRange { first, last });
            }
            if let Some(&(_, prev, _)) = v.last() {
                if first <= prev {
                    return Err(RangeTreeError::Unsorted { first, last });
                }
            }
            v.push((first, last, value));
        }
        Ok(Self::build(v))
    }

    /// Bulk load from sorted, disjoint entries: leaves and internal nodes
    /// filled evenly (each at least half full), bottom-up.
    fn build(entries: impl IntoIterator<Item = (u64, u64, V)>) -> Self {
        let mut t = RangeTree::new();
        let mut it = entries.into_iter().peekable();
        if it.peek().is_none() {
            return t;
        }
        // Leaves: fill to capacity, then even out the last two so both keep
        // the minimum fill.
        let mut level: Vec<u32> = Vec::new();
        for (first, last, value) in it {
            let need_new = match level.last() {
                None => true,
                Some(&l) => t.leaves[l as usize].len() == LEAF_SLOTS,
            };
            if need_new {
                let l = t.alloc_leaf();
                if let Some(&p) = level.last() {
                    t.leaves[p as usize].next = l;
                    t.leaves[l as usize].prev = p;
                }
                level.push(l);
            }
            let Some(&l) = level.last() else { break };
            let vi = t.put_val(value, l);
            let leaf = &mut t.leaves[l as usize];
            let n = leaf.len();
            leaf.insert_at(n, first, last, vi);
            t.len += 1;
        }
        if let [.., a, b] = level[..] {
            let (na, nb) = (t.leaves[a as usize].len(), t.leaves[b as usize].len());
            if nb < node::LEAF_MIN {
                let mut tail = Leaf::EMPTY;
                let keep = (na + nb).div_ceil(2);
                t.leaves[a as usize].split_off(keep, &mut tail);
                let moved = tail.len();
                let bl = &mut t.leaves[b as usize];
                tail.append(bl);
                *bl = tail;
                bl.prev = a;
                bl.next = NIL;
                debug_assert_eq!(bl.len(), moved + nb);
                t.set_owner(b);
            }
        }
        t.height = 1;
        // Internal levels.
        let mut leaf_kids = true;
        while level.len() > 1 {
            let mut up: Vec<u32> = Vec::new();
            let groups = level.len().div_ceil(INNER_SLOTS);
            let (base, extra) = (level.len() / groups, level.len() % groups);
            let mut at = 0;
            for g in 0..groups {
                let take = base + usize::from(g < extra);
                let p = t.alloc_inner(leaf_kids);
                for (k, &c) in level[at..at + take].iter().enumerate() {
                    let kid = if leaf_kids {
                        Node::Leaf(c)
                    } else {
                        Node::Inner(c)
                    };
                    let s = t.summary(kid);
                    t.inners[p as usize].insert_at(k, c, s);
                    t.set_parent(kid, p);
                }
                at += take;
                up.push(p);
            }
            level = up;
            leaf_kids = false;
            t.height += 1;
        }
        t.root = level[0];
        t
    }
}

impl<V: Clone> FromIterator<(u64, u64, V)> for RangeTree<V> {
    /// Stores each entry in turn with [`store_range`](RangeTree::store_range)
    /// (later entries overwrite earlier ones where they overlap); entries
    /// with `first > last` are skipped. For sorted input,
    /// [`from_sorted`](RangeTree::from_sorted) is O(n).
    fn from_iter<I: IntoIterator<Item = (u64, u64, V)>>(iter: I) -> Self {
        let mut t = RangeTree::new();
        for (a, b, v) in iter {
            // Only InvalidRange can fail, and such entries are skipped.
            let _ = t.store_range(a, b, v);
        }
        t
    }
}

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "testing"))]
impl<V> crate::testing::Validate for RangeTree<V> {
    /// Checks every structural invariant: pivots sorted and inside the
    /// bounds the parent records, minimum fill of non-root nodes, every
    /// recorded gap exact (so each parent holds its children's maximum),
    /// no empty slot in use, parent and child links and the leaf chain
    /// consistent, the entry count, and the free lists. For tests and
    /// fuzzers; O(n).
    fn validate(&self) -> Result<(), alloc::string::String> {
        self.check()
    }
}
