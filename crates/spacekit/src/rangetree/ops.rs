//! Structural changes: insertion with splits, removal with borrowing and
//! merging, and keeping every parent's per-child summary (first, last,
//! largest gap) exact on the way up.

use super::node::{Inner, Leaf, Summary, INNER_MIN, INNER_SLOTS, LEAF_MIN, LEAF_SLOTS, NIL};
use super::tree::RangeTree;

/// A node of either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Leaf(u32),
    Inner(u32),
}

/// Two distinct elements of a slice, both mutable.
fn two_mut<T>(v: &mut [T], a: u32, b: u32) -> (&mut T, &mut T) {
    let (a, b) = (a as usize, b as usize);
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

/// Where to split a full node of `cap` slots that receives a new slot at
/// `pos`: the number of old slots that stay on the left. Appends at either
/// end split unevenly (each side keeps at least `min` after the insert), so
/// ascending or descending insertion leaves nodes well filled; anything
/// else splits in half.
fn split_point(cap: usize, min: usize, pos: usize) -> usize {
    if pos == cap {
        cap + 1 - min
    } else if pos == 0 {
        min - 1
    } else {
        cap / 2
    }
}

/// Index of a fresh node in an arena, reusing a freed one if there is one.
fn alloc_in<T>(arena: &mut alloc::vec::Vec<T>, free: &mut alloc::vec::Vec<u32>, node: T) -> u32 {
    if let Some(i) = free.pop() {
        arena[i as usize] = node;
        i
    } else {
        let i = arena.len();
        // Node indices are u32 with u32::MAX reserved: 2^32 leaves would be
        // terabytes, so running out is a capacity overflow like Vec's.
        assert!(i < NIL as usize, "range tree node arena overflow");
        arena.push(node);
        i as u32
    }
}

impl<V> RangeTree<V> {
    pub(super) fn alloc_leaf(&mut self) -> u32 {
        alloc_in(&mut self.leaves, &mut self.free_leaves, Leaf::EMPTY)
    }

    pub(super) fn alloc_inner(&mut self, leaf_kids: bool) -> u32 {
        alloc_in(
            &mut self.inners,
            &mut self.free_inners,
            Inner::empty(leaf_kids),
        )
    }

    fn free_leaf(&mut self, i: u32) {
        self.leaves[i as usize] = Leaf::EMPTY;
        self.free_leaves.push(i);
    }

    fn free_inner(&mut self, i: u32) {
        self.inners[i as usize] = Inner::empty(false);
        self.free_inners.push(i);
    }

    pub(super) fn parent(&self, n: Node) -> u32 {
        match n {
            Node::Leaf(i) => self.leaves[i as usize].parent,
            Node::Inner(i) => self.inners[i as usize].parent,
        }
    }

    pub(super) fn set_parent(&mut self, n: Node, p: u32) {
        match n {
            Node::Leaf(i) => self.leaves[i as usize].parent = p,
            Node::Inner(i) => self.inners[i as usize].parent = p,
        }
    }

    pub(super) fn summary(&self, n: Node) -> Summary {
        match n {
            Node::Leaf(i) => self.leaves[i as usize].summary(),
            Node::Inner(i) => self.inners[i as usize].summary(),
        }
    }

    /// The child at `pos` of internal node `p`.
    pub(super) fn kid(&self, p: u32, pos: usize) -> Node {
        let n = &self.inners[p as usize];
        if n.leaf_kids {
            Node::Leaf(n.child[pos])
        } else {
            Node::Inner(n.child[pos])
        }
    }

    fn index(n: Node) -> u32 {
        match n {
            Node::Leaf(i) | Node::Inner(i) => i,
        }
    }

    /// Rewrites `n`'s summary in its parent.
    fn fix_slot(&mut self, n: Node) {
        let p = self.parent(n);
        if p != NIL {
            let s = self.summary(n);
            let node = &mut self.inners[p as usize];
            let pos = node.slot_of(Self::index(n));
            node.set(pos, s);
        }
    }

    /// Rewrites the summaries on the path from `n` to the root, stopping
    /// where a parent's record is already right (nothing above it changed).
    pub(super) fn refresh_up(&mut self, mut n: Node) {
        loop {
            let p = self.parent(n);
            if p == NIL {
                return;
            }
            let s = self.summary(n);
            let node = &mut self.inners[p as usize];
            let pos = node.slot_of(Self::index(n));
            if node.get(pos) == s {
                return;
            }
            node.set(pos, s);
            n = Node::Inner(p);
        }
    }

    /// Like [`refresh_up`](Self::refresh_up) but all the way to the root,
    /// for paths whose nodes changed shape.
    fn refresh_all_up(&mut self, mut n: Node) {
        while self.parent(n) != NIL {
            self.fix_slot(n);
            n = Node::Inner(self.parent(n));
        }
    }

    /// The leaf whose key range would hold `key`: the one with the last
    /// entry starting at or before `key`, or the leftmost leaf.
    #[inline]
    pub(super) fn find_leaf(&self, key: u64) -> u32 {
        let mut node = self.root;
        for _ in 1..self.height {
            let n = &self.inners[node as usize];
            node = n.child[n.child_pos(key)];
        }
        node
    }

    /// Inserts an entry at slot `pos` of `leaf` (overlap already ruled out).
    pub(super) fn leaf_insert(&mut self, leaf: u32, pos: usize, first: u64, last: u64, value: V) {
        let value = self.put_val(value, leaf);
        if self.leaves[leaf as usize].len() < LEAF_SLOTS {
            self.leaves[leaf as usize].insert_at(pos, first, last, value);
            self.refresh_up(Node::Leaf(leaf));
            return;
        }
        if let Some(pos) = self.leaf_shift(leaf, pos) {
            self.leaves[leaf as usize].insert_at(pos, first, last, value);
            self.owner[value as usize] = leaf;
            self.refresh_up(Node::Leaf(leaf));
            return;
        }
        let k = split_point(LEAF_SLOTS, LEAF_MIN, pos);
        let right = self.alloc_leaf();
        let next = {
            let (a, b) = two_mut(&mut self.leaves, leaf, right);
            a.split_off(k, b);
            b.prev = leaf;
            b.next = a.next;
            a.next = right;
            b.next
        };
        if next != NIL {
            self.leaves[next as usize].prev = right;
        }
        if pos <= k {
            self.leaves[leaf as usize].insert_at(pos, first, last, value);
        } else {
            self.leaves[right as usize].insert_at(pos - k, first, last, value);
        }
        self.set_owner(right);
        // The parent must record the left half's new bounds before the
        // right half goes in beside it.
        self.fix_slot(Node::Leaf(leaf));
        self.insert_sibling(Node::Leaf(leaf), Node::Leaf(right));
        self.refresh_all_up(Node::Leaf(leaf));
        self.refresh_all_up(Node::Leaf(right));
    }

    /// Makes room in full `leaf` for an insert at `pos` by moving the
    /// entries before `pos` into the left sibling, or those from `pos` on
    /// into the right sibling, as far as the sibling has room (B*-tree
    /// style). Returns the insert position afterwards, or `None` if neither
    /// sibling under the same parent has room. Ascending or descending
    /// insertion thus fills nodes instead of leaving them two-thirds full.
    fn leaf_shift(&mut self, leaf: u32, pos: usize) -> Option<usize> {
        let p = self.leaves[leaf as usize].parent;
        if p == NIL {
            return None;
        }
        let node = &self.inners[p as usize];
        let at = node.slot_of(leaf);
        let len = self.leaves[leaf as usize].len();
        if pos > 0 && at > 0 {
            let left = node.child[at - 1];
            let t = (LEAF_SLOTS - self.leaves[left as usize].len()).min(pos);
            if t > 0 {
                for _ in 0..t {
                    let (f, l, v) = self.leaves[leaf as usize].remove_at(0);
                    let n = self.leaves[left as usize].len();
                    self.leaves[left as usize].insert_at(n, f, l, v);
                    self.owner[v as usize] = left;
                }
                self.fix_slot(Node::Leaf(left));
                return Some(pos - t);
            }
        }
        if pos < len && at + 1 < node.len() {
            let right = node.child[at + 1];
            let t = (LEAF_SLOTS - self.leaves[right as usize].len()).min(len - pos);
            if t > 0 {
                for _ in 0..t {
                    let n = self.leaves[leaf as usize].len();
                    let (f, l, v) = self.leaves[leaf as usize].remove_at(n - 1);
                    self.leaves[right as usize].insert_at(0, f, l, v);
                    self.owner[v as usize] = right;
                }
                self.fix_slot(Node::Leaf(right));
                return Some(pos);
            }
        }
        None
    }

    /// [`leaf_shift`](Self::leaf_shift) for a full internal node `p` about
    /// to receive a child at `pos`.
    fn inner_shift(&mut self, p: u32, pos: usize) -> Option<(u32, usize)> {
        let g = self.inners[p as usize].parent;
        if g == NIL {
            return None;
        }
        let at = self.inners[g as usize].slot_of(p);
        let glen = self.inners[g as usize].len();
        let len = self.inners[p as usize].len();
        if pos > 0 && at > 0 {
            let left = self.inners[g as usize].child[at - 1];
            let t = (INNER_SLOTS - self.inners[left as usize].len()).min(pos);
            if t > 0 {
                for _ in 0..t {
                    let (c, s) = self.inners[p as usize].remove_at(0);
                    let n = self.inners[left as usize].len();
                    self.inners[left as usize].insert_at(n, c, s);
                    let kid = self.kid(left, n);
                    self.set_parent(kid, left);
                }
                self.fix_slot(Node::Inner(left));
                return Some((p, pos - t));
            }
        }
        if pos < len && at + 1 < glen {
            let right = self.inners[g as usize].child[at + 1];
            let t = (INNER_SLOTS - self.inners[right as usize].len()).min(len - pos);
            if t > 0 {
                for _ in 0..t {
                    let n = self.inners[p as usize].len();
                    let (c, s) = self.inners[p as usize].remove_at(n - 1);
                    self.inners[right as usize].insert_at(0, c, s);
                    let kid = self.kid(right, 0);
                    self.set_parent(kid, right);
                }
                self.fix_slot(Node::Inner(right));
                return Some((p, pos));
            }
        }
        None
    }

    /// Puts `right` (new) directly after `left` in `left`'s parent,
    /// splitting parents as needed and growing a new root if `left` was it.
    fn insert_sibling(&mut self, left: Node, right: Node) {
        let p = self.parent(left);
        let rs = self.summary(right);
        if p == NIL {
            let root = self.alloc_inner(matches!(left, Node::Leaf(_)));
            let ls = self.summary(left);
            let r = &mut self.inners[root as usize];
            r.insert_at(0, Self::index(left), ls);
            r.insert_at(1, Self::index(right), rs);
            self.set_parent(left, root);
            self.set_parent(right, root);
            self.root = root;
            self.height += 1;
            return;
        }
        let pos = self.inners[p as usize].slot_of(Self::index(left)) + 1;
        if self.inners[p as usize].len() < INNER_SLOTS {
            self.inners[p as usize].insert_at(pos, Self::index(right), rs);
            self.set_parent(right, p);
            return;
        }
        if let Some((p, pos)) = self.inner_shift(p, pos) {
            self.inners[p as usize].insert_at(pos, Self::index(right), rs);
            self.set_parent(right, p);
            self.fix_slot(Node::Inner(p));
            return;
        }
        let k = split_point(INNER_SLOTS, INNER_MIN, pos);
        let q = self.alloc_inner(self.inners[p as usize].leaf_kids);
        self.inner_move_tail(p, k, q);
        if pos <= k {
            self.inners[p as usize].insert_at(pos, Self::index(right), rs);
            self.set_parent(right, p);
        } else {
            self.inners[q as usize].insert_at(pos - k, Self::index(right), rs);
            self.set_parent(right, q);
        }
        self.fix_slot(Node::Inner(p));
        self.insert_sibling(Node::Inner(p), Node::Inner(q));
        self.fix_slot(Node::Inner(p));
    }

    /// Moves the children of internal node `p` from slot `k` on to the end
    /// of internal node `q`, re-parenting them.
    fn inner_move_tail(&mut self, p: u32, k: usize, q: u32) {
        let n = self.inners[p as usize].len();
        for _ in k..n {
            let (c, s) = self.inners[p as usize].remove_at(k);
            let at = self.inners[q as usize].len();
            self.inners[q as usize].insert_at(at, c, s);
            let kid = self.kid(q, at);
            self.set_parent(kid, q);
        }
    }

    /// Removes the entry at slot `pos` of `leaf` and rebalances.
    pub(super) fn take_entry(&mut self, leaf: u32, pos: usize) -> Option<V> {
        let (_, _, v) = self.leaves[leaf as usize].remove_at(pos);
        self.len -= 1;
        self.after_leaf_shrink(leaf);
        Some(self.drop_val(v))
    }

    /// Appends `value` to the value vector, for an entry in `leaf`.
    pub(super) fn put_val(&mut self, value: V, leaf: u32) -> u32 {
        let i = self.vals.len();
        // Value indices are u32 with u32::MAX reserved (see alloc_in).
        assert!(i < NIL as usize, "range tree value index overflow");
        self.vals.push(value);
        self.owner.push(leaf);
        i as u32
    }

    /// Removes value `v`, moving the last value into its place and
    /// repointing that value's entry.
    fn drop_val(&mut self, v: u32) -> V {
        let last = (self.vals.len() - 1) as u32;
        if v != last {
            let l = &mut self.leaves[self.owner[last as usize] as usize];
            let n = l.len();
            if let Some(slot) = l.val[..n].iter_mut().find(|x| **x == last) {
                *slot = v;
            }
        }
        self.owner.swap_remove(v as usize);
        self.vals.swap_remove(v as usize)
    }

    /// Records `leaf` as the owner of each of its values.
    pub(super) fn set_owner(&mut self, leaf: u32) {
        let l = &self.leaves[leaf as usize];
        for &v in &l.val[..l.len()] {
            self.owner[v as usize] = leaf;
        }
    }

    fn after_leaf_shrink(&mut self, leaf: u32) {
        if self.height == 1 || self.leaves[leaf as usize].len() >= LEAF_MIN {
            self.refresh_up(Node::Leaf(leaf));
            return;
        }
        let p = self.leaves[leaf as usize].parent;
        let pos = self.inners[p as usize].slot_of(leaf);
        let (left, right) = if pos > 0 {
            (self.inners[p as usize].child[pos - 1], leaf)
        } else {
            (leaf, self.inners[p as usize].child[1])
        };
        let sibling = if left == leaf { right } else { left };
        if self.leaves[sibling as usize].len() > LEAF_MIN {
            if sibling == left {
                let n = self.leaves[left as usize].len();
                let (f, l, v) = self.leaves[left as usize].remove_at(n - 1);
                self.leaves[leaf as usize].insert_at(0, f, l, v);
                self.owner[v as usize] = leaf;
            } else {
                let (f, l, v) = self.leaves[right as usize].remove_at(0);
                let n = self.leaves[leaf as usize].len();
                self.leaves[leaf as usize].insert_at(n, f, l, v);
                self.owner[v as usize] = leaf;
            }
            self.fix_slot(Node::Leaf(left));
            self.fix_slot(Node::Leaf(right));
            self.refresh_all_up(Node::Inner(p));
            return;
        }
        let next = {
            let (a, b) = two_mut(&mut self.leaves, left, right);
            a.append(b);
            a.next = b.next;
            b.next
        };
        if next != NIL {
            self.leaves[next as usize].prev = left;
        }
        self.set_owner(left);
        self.free_leaf(right);
        let rpos = self.inners[p as usize].slot_of(right);
        self.inners[p as usize].remove_at(rpos);
        self.fix_slot(Node::Leaf(left));
        self.after_inner_shrink(p);
    }

    fn after_inner_shrink(&mut self, n: u32) {
        if n == self.root {
            if self.inners[n as usize].len() == 1 {
                let kid = self.kid(n, 0);
                self.set_parent(kid, NIL);
                self.root = Self::index(kid);
                self.height -= 1;
                self.free_inner(n);
            }
            return;
        }
        if self.inners[n as usize].len() >= INNER_MIN {
            self.refresh_all_up(Node::Inner(n));
            return;
        }
        let p = self.inners[n as usize].parent;
        let pos = self.inners[p as usize].slot_of(n);
        let (left, right) = if pos > 0 {
            (self.inners[p as usize].child[pos - 1], n)
        } else {
            (n, self.inners[p as usize].child[1])
        };
        let sibling = if left == n { right } else { left };
        if self.inners[sibling as usize].len() > INNER_MIN {
            if sibling == left {
                let m = self.inners[left as usize].len();
                let (c, s) = self.inners[left as usize].remove_at(m - 1);
                self.inners[n as usize].insert_at(0, c, s);
                let kid = self.kid(n, 0);
                self.set_parent(kid, n);
            } else {
                let (c, s) = self.inners[right as usize].remove_at(0);
                let m = self.inners[n as usize].len();
                self.inners[n as usize].insert_at(m, c, s);
                let kid = self.kid(n, m);
                self.set_parent(kid, n);
            }
            self.fix_slot(Node::Inner(left));
            self.fix_slot(Node::Inner(right));
            self.refresh_all_up(Node::Inner(p));
            return;
        }
        self.inner_move_tail(right, 0, left);
        self.free_inner(right);
        let rpos = self.inners[p as usize].slot_of(right);
        self.inners[p as usize].remove_at(rpos);
        self.fix_slot(Node::Inner(left));
        self.after_inner_shrink(p);
    }
}
