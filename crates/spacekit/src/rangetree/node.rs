//! Node layout and the arena the nodes live in.
//!
//! Nodes are addressed by `u32` index into two vectors, one of leaves and one
//! of internal nodes, so a whole tree's structure is two flat arrays: `dup`
//! copies the internal nodes with one `memcpy` and the leaves with one pass.

/// Entries per leaf node (the maple tree's 16 slots per range node).
pub const LEAF_SLOTS: usize = 16;
/// Children per internal node (the maple tree's 10 slots per "alloc range"
/// node).
pub const INNER_SLOTS: usize = 10;

/// "No node": the parent of the root, the neighbour of an end leaf.
pub(super) const NIL: u32 = u32::MAX;
/// Fewest entries a non-root leaf may hold (the maple tree's minimum for
/// range nodes).
pub(super) const LEAF_MIN: usize = 6;
/// Fewest children a non-root internal node may hold.
pub(super) const INNER_MIN: usize = 4;

/// What a parent records about a child: its first and last index in use and
/// the largest free gap strictly between two of its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Summary {
    pub lo: u64,
    pub hi: u64,
    pub gap: u64,
}

/// A leaf: up to [`LEAF_SLOTS`] entries `[first[i], last[i]]`, sorted and
/// disjoint, whose values are `vals[val[i]]` in the tree's value slab. Slots
/// at and past `len` have `first == u64::MAX` and `val == NIL`, so a
/// fixed-length count finds a key's slot without a branch. Plain data: the
/// leaf arena is copied with one `memcpy`.
#[derive(Clone, Copy)]
pub(super) struct Leaf {
    pub first: [u64; LEAF_SLOTS],
    pub last: [u64; LEAF_SLOTS],
    pub val: [u32; LEAF_SLOTS],
    pub len: u8,
    pub parent: u32,
    pub prev: u32,
    pub next: u32,
}

impl Leaf {
    pub const EMPTY: Leaf = Leaf {
        first: [u64::MAX; LEAF_SLOTS],
        last: [u64::MAX; LEAF_SLOTS],
        val: [NIL; LEAF_SLOTS],
        len: 0,
        parent: NIL,
        prev: NIL,
        next: NIL,
    };

    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Number of entries whose `first <= key`: the entry that may contain
    /// `key` is the one before that.
    #[inline]
    pub fn upper(&self, key: u64) -> usize {
        let mut n = 0;
        for f in &self.first {
            n += (*f <= key) as usize;
        }
        n.min(self.len())
    }

    pub fn summary(&self) -> Summary {
        let n = self.len();
        let mut gap = 0;
        for j in 1..n {
            gap = gap.max(self.first[j] - self.last[j - 1] - 1);
        }
        Summary {
            lo: self.first[0],
            hi: self.last[n.saturating_sub(1)],
            gap,
        }
    }

    /// Inserts an entry at `pos`, shifting later ones up (needs room).
    pub fn insert_at(&mut self, pos: usize, first: u64, last: u64, val: u32) {
        let n = self.len();
        debug_assert!(n < LEAF_SLOTS && pos <= n);
        self.first.copy_within(pos..n, pos + 1);
        self.last.copy_within(pos..n, pos + 1);
        self.val.copy_within(pos..n, pos + 1);
        self.first[pos] = first;
        self.last[pos] = last;
        self.val[pos] = val;
        self.len += 1;
    }

    /// Removes the entry at `pos`, shifting later ones down.
    pub fn remove_at(&mut self, pos: usize) -> (u64, u64, u32) {
        let n = self.len();
        debug_assert!(pos < n);
        let out = (self.first[pos], self.last[pos], self.val[pos]);
        self.first.copy_within(pos + 1..n, pos);
        self.last.copy_within(pos + 1..n, pos);
        self.val.copy_within(pos + 1..n, pos);
        self.clear_slot(n - 1);
        self.len -= 1;
        out
    }

    fn clear_slot(&mut self, j: usize) {
        self.first[j] = u64::MAX;
        self.last[j] = u64::MAX;
        self.val[j] = NIL;
    }

    /// Moves entries `k..` to the (empty) leaf `right`.
    pub fn split_off(&mut self, k: usize, right: &mut Leaf) {
        let n = self.len();
        for j in k..n {
            right.first[j - k] = self.first[j];
            right.last[j - k] = self.last[j];
            right.val[j - k] = self.val[j];
            self.clear_slot(j);
        }
        right.len = (n - k) as u8;
        self.len = k as u8;
    }

    /// Moves every entry of `right` to the end of this leaf (needs room).
    pub fn append(&mut self, right: &mut Leaf) {
        let n = self.len();
        let m = right.len();
        debug_assert!(n + m <= LEAF_SLOTS);
        for j in 0..m {
            self.first[n + j] = right.first[j];
            self.last[n + j] = right.last[j];
            self.val[n + j] = right.val[j];
            right.clear_slot(j);
        }
        self.len = (n + m) as u8;
        right.len = 0;
    }
}

/// An internal node: up to [`INNER_SLOTS`] children with, for each, the
/// child's [`Summary`] (`lo`, `hi`, `gap`). The gap between two neighbouring
/// children is `lo[i + 1] - hi[i] - 1`. Slots past `len` have
/// `lo == u64::MAX` and `child == NIL`.
#[derive(Clone, Copy)]
pub(super) struct Inner {
    pub lo: [u64; INNER_SLOTS],
    pub hi: [u64; INNER_SLOTS],
    pub gap: [u64; INNER_SLOTS],
    pub child: [u32; INNER_SLOTS],
    pub len: u8,
    /// Whether the children are leaves (all leaves are at one depth).
    pub leaf_kids: bool,
    pub parent: u32,
}

impl Inner {
    pub fn empty(leaf_kids: bool) -> Self {
        Inner {
            lo: [u64::MAX; INNER_SLOTS],
            hi: [u64::MAX; INNER_SLOTS],
            gap: [0; INNER_SLOTS],
            child: [NIL; INNER_SLOTS],
            len: 0,
            leaf_kids,
            parent: NIL,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// The child whose subtree holds the last entry with `first <= key`
    /// (child 0 when there is none).
    #[inline]
    pub fn child_pos(&self, key: u64) -> usize {
        let mut n = 0;
        for lo in &self.lo[1..] {
            n += (*lo <= key) as usize;
        }
        n.min(self.len() - 1)
    }

    /// Where `child` sits in this node.
    #[inline]
    pub fn slot_of(&self, child: u32) -> usize {
        let n = self.len();
        self.child[..n]
            .iter()
            .position(|&c| c == child)
            .unwrap_or(n)
    }

    pub fn summary(&self) -> Summary {
        let n = self.len();
        let mut gap = 0;
        for i in 0..n {
            gap = gap.max(self.gap[i]);
            if i + 1 < n {
                gap = gap.max(self.lo[i + 1] - self.hi[i] - 1);
            }
        }
        Summary {
            lo: self.lo[0],
            hi: self.hi[n.saturating_sub(1)],
            gap,
        }
    }

    pub fn set(&mut self, pos: usize, s: Summary) {
        self.lo[pos] = s.lo;
        self.hi[pos] = s.hi;
        self.gap[pos] = s.gap;
    }

    pub fn get(&self, pos: usize) -> Summary {
        Summary {
            lo: self.lo[pos],
            hi: self.hi[pos],
            gap: self.gap[pos],
        }
    }

    /// Inserts a child at `pos` (needs room).
    pub fn insert_at(&mut self, pos: usize, child: u32, s: Summary) {
        let n = self.len();
        debug_assert!(n < INNER_SLOTS && pos <= n);
        self.lo.copy_within(pos..n, pos + 1);
        self.hi.copy_within(pos..n, pos + 1);
        self.gap.copy_within(pos..n, pos + 1);
        self.child.copy_within(pos..n, pos + 1);
        self.child[pos] = child;
        self.set(pos, s);
        self.len += 1;
    }

    /// Removes the child at `pos`, returning it and its summary.
    pub fn remove_at(&mut self, pos: usize) -> (u32, Summary) {
        let n = self.len();
        debug_assert!(pos < n);
        let out = (self.child[pos], self.get(pos));
        self.lo.copy_within(pos + 1..n, pos);
        self.hi.copy_within(pos + 1..n, pos);
        self.gap.copy_within(pos + 1..n, pos);
        self.child.copy_within(pos + 1..n, pos);
        self.clear_slot(n - 1);
        self.len -= 1;
        out
    }

    fn clear_slot(&mut self, j: usize) {
        self.lo[j] = u64::MAX;
        self.hi[j] = u64::MAX;
        self.gap[j] = 0;
        self.child[j] = NIL;
    }
}
