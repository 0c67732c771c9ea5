//! Iteration over entries (following the leaf chain) and over free gaps.

use core::iter::FusedIterator;

use super::node::NIL;
use super::tree::RangeTree;

/// A position: leaf index and slot.
type Pos = (u32, usize);

/// Entries of a [`RangeTree`] in ascending order, as `(first, last, &value)`;
/// double-ended. Made by [`RangeTree::iter`] and [`RangeTree::range`].
pub struct Iter<'a, V> {
    tree: &'a RangeTree<V>,
    front: Pos,
    back: Pos,
    /// Entries not yet yielded from either end, when known exactly.
    left: Option<usize>,
    done: bool,
}

impl<V> Clone for Iter<'_, V> {
    fn clone(&self) -> Self {
        Iter { ..*self }
    }
}

impl<'a, V> Iter<'a, V> {
    pub(super) fn empty(tree: &'a RangeTree<V>) -> Self {
        Iter {
            tree,
            front: (NIL, 0),
            back: (NIL, 0),
            left: Some(0),
            done: true,
        }
    }

    pub(super) fn new(tree: &'a RangeTree<V>, front: Pos, back: Pos, left: Option<usize>) -> Self {
        Iter {
            tree,
            front,
            back,
            left,
            done: false,
        }
    }

    fn at(&self, p: Pos) -> (u64, u64, &'a V) {
        let l = &self.tree.leaves[p.0 as usize];
        // Every slot below a leaf's length names a value (validate()).
        (
            l.first[p.1],
            l.last[p.1],
            &self.tree.vals[l.val[p.1] as usize],
        )
    }

    fn took_one(&mut self) {
        if self.front == self.back {
            self.done = true;
        }
        if let Some(n) = &mut self.left {
            *n -= 1;
        }
    }
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (u64, u64, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.at(self.front);
        self.took_one();
        if !self.done {
            let l = &self.tree.leaves[self.front.0 as usize];
            self.front = if self.front.1 + 1 < l.len() {
                (self.front.0, self.front.1 + 1)
            } else {
                (l.next, 0)
            };
        }
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match (self.done, self.left) {
            (true, _) => (0, Some(0)),
            (false, Some(n)) => (n, Some(n)),
            (false, None) => (1, Some(self.tree.len)),
        }
    }
}

impl<V> DoubleEndedIterator for Iter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.at(self.back);
        self.took_one();
        if !self.done {
            self.back = if self.back.1 > 0 {
                (self.back.0, self.back.1 - 1)
            } else {
                let prev = self.tree.leaves[self.back.0 as usize].prev;
                (prev, self.tree.leaves[prev as usize].len() - 1)
            };
        }
        Some(item)
    }
}

impl<V> FusedIterator for Iter<'_, V> {}

/// Free runs of a [`RangeTree`] inside a window, ascending, as inclusive
/// `(first, last)`. Made by [`RangeTree::gaps`].
pub struct Gaps<'a, V> {
    pub(super) entries: Iter<'a, V>,
    /// First index not yet accounted for; `None` once past the window.
    pub(super) next: Option<u64>,
    pub(super) end: u64,
}

impl<V> Iterator for Gaps<'_, V> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        loop {
            let from = self.next?;
            match self.entries.next() {
                Some((first, last, _)) => {
                    self.next = if last >= self.end {
                        None
                    } else {
                        Some(last + 1)
                    };
                    if first > from {
                        return Some((from, first - 1));
                    }
                }
                None => {
                    self.next = None;
                    return Some((from, self.end));
                }
            }
        }
    }
}

impl<V> FusedIterator for Gaps<'_, V> {}
