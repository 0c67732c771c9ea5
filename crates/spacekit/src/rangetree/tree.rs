//! The [`RangeTree`] struct: its node arenas, value slab and root.

use alloc::vec::Vec;

use super::node::{Inner, Leaf};

/// A map from non-overlapping inclusive `u64` ranges to values, with
/// O(log n) lookup, update and free-gap search, and a structure-copying
/// [`dup`](RangeTree::dup). See the [module docs](super).
pub struct RangeTree<V> {
    pub(super) leaves: Vec<Leaf>,
    pub(super) inners: Vec<Inner>,
    /// The values, densely packed and addressed by the leaves' `val` slots:
    /// `dup_map` maps this vector in one pass, like cloning a `Vec`. An
    /// erase moves the last value into the hole.
    pub(super) vals: Vec<V>,
    /// The leaf holding the entry of each value (to repoint the value
    /// moved by an erase).
    pub(super) owner: Vec<u32>,
    pub(super) free_leaves: Vec<u32>,
    pub(super) free_inners: Vec<u32>,
    /// A leaf when `height == 1`, else an internal node; `NIL` when no node
    /// has been allocated yet.
    pub(super) root: u32,
    /// Levels of nodes, leaves included (0 with no root).
    pub(super) height: u32,
    pub(super) len: usize,
}
