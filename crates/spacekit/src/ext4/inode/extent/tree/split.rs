//! Node splits and root growth, made as libext2fs makes them
//! (`extent_node_split` in e2fsprogs' lib/ext2fs/extent.c), so that a file
//! spacekit writes gets the tree blocks debugfs would give it: room is
//! made from the top down (a full parent split, or the full root grown,
//! before its child), an append at the end of the file moves one entry
//! into the new node and any other insert half of them, and a new node
//! goes to the first free block from just before the split node's first
//! block.

use crate::ext4::error::{invalid, Ext4Error};
use crate::ext4::layout::le32;

use super::super::record::{idx_child, index_bytes, ExtentHeader, HDR, MAX_DEPTH, ROOT_SIZE};
use super::super::store::ExtentStore;
use super::{Id, Path, Tree};
use core::ops::Range;

impl<S: ExtentStore + ?Sized> Tree<'_, S> {
    /// Inserts raw entry `e` in the leaf at the end of `path`, at its
    /// position there, splitting nodes and growing the root as needed.
    pub(super) fn insert_entry(&mut self, mut path: Path, e: [u8; 12]) -> Result<(), Ext4Error> {
        let path = &mut path;
        let level = path.len() - 1;
        let (id, pos) = path[level];
        let h = self.hdr(id)?;
        if h.entries < h.max {
            return self.insert_raw(id, pos, e);
        }
        let level = self.make_room(path, level, pos == usize::from(h.entries))?;
        let (node, p) = path[level];
        self.insert_raw(node, p, e)?;
        if p == 0 {
            // First in a node split off (or in the root's new child): the
            // keys above follow.
            self.set_keys_above(path, level, le32(&e, 0))?;
        }
        Ok(())
    }

    /// Makes room for one entry at `path[level]`'s position in its full
    /// node, as libext2fs does (`extent_node_split`): room in the parent
    /// first (splitting it, or growing the root: blocks are taken from the
    /// top down), then this node split in two, `path` following the
    /// position. `last`: the position is past this node's last entry (a
    /// leaf) or on it (an index node). Returns the node's level now (one
    /// deeper after the root grew).
    fn make_room(&mut self, path: &mut Path, level: usize, last: bool) -> Result<usize, Ext4Error> {
        if level == 0 {
            self.grow_root(path)?;
            return Ok(1);
        }
        let mut level = level;
        let (pid, ppos) = path[level - 1];
        let ph = self.hdr(pid)?;
        if ph.entries >= ph.max {
            let plast = ppos + 1 == usize::from(ph.entries);
            level = self.make_room(path, level - 1, plast)? + 1;
        }
        // An append at the end of the file (the last entry on every level)
        // moves only the last entry to the new node; otherwise the upper
        // half, n / 2 entries, moves.
        let mut at_eof = last;
        for &(pid, pi) in &path[..level] {
            at_eof &= pi + 1 == usize::from(self.hdr(pid)?.entries);
        }
        let (id, cur) = path[level];
        let h = self.hdr(id)?;
        let n = usize::from(h.entries);
        let mid = if at_eof { n - 1 } else { n - n / 2 };
        let goal = self.node_goal(id)?;
        let b = self.new_block(h.depth, goal)?;
        let m = Id::Block(b);
        self.move_entries(id, mid..n, m)?;
        self.keep_first(id, mid)?;
        let key = self.first_key(m)?;
        let (pid, ppos) = path[level - 1];
        self.insert_raw(pid, ppos + 1, index_bytes(key, b))?;
        if cur >= mid {
            path[level] = (m, cur - mid);
            path[level - 1].1 = ppos + 1;
        }
        Ok(level)
    }

    /// Copies entries `r` of `from` to the start of the empty node `to`
    /// and sets its count (`from` is left as it is).
    fn move_entries(&mut self, from: Id, r: Range<usize>, to: Id) -> Result<(), Ext4Error> {
        let mut th = self.hdr(to)?;
        th.entries = r.len() as u16;
        for (i, k) in r.enumerate() {
            let x = self.entry(from, k)?;
            self.set_entry(to, i, x)?;
        }
        self.set_hdr(to, th)
    }

    /// Grows the full root: its entries move to a new block, and the root
    /// becomes one index entry a level deeper; `path` gains that level.
    fn grow_root(&mut self, path: &mut Path) -> Result<(), Ext4Error> {
        let (id, old) = path[0];
        let h = self.hdr(id)?;
        if h.depth >= MAX_DEPTH {
            return Err(invalid(
                "depth",
                u64::from(h.depth),
                "the extent tree is full at depth 5",
            ));
        }
        let n = usize::from(h.entries);
        let goal = self.node_goal(id)?;
        let b = self.new_block(h.depth, goal)?;
        let child = Id::Block(b);
        self.move_entries(id, 0..n, child)?;
        let key = self.first_key(child)?;
        let rb = self.buf_mut(id)?;
        rb.data[HDR..].fill(0);
        rb.mark(HDR..ROOT_SIZE);
        self.set_entry(id, 0, index_bytes(key, b))?;
        self.set_hdr(
            id,
            ExtentHeader {
                entries: 1,
                max: h.max,
                depth: h.depth + 1,
                generation: h.generation,
            },
        )?;
        path[0].1 = 0;
        path.insert(1, (child, old));
        Ok(())
    }

    /// Where libext2fs looks for a block for a node split off `id` (or the
    /// root's entries moved out): just before the first block the node
    /// points at (its first extent's, or its first child's), so the new
    /// node lands in the first free block at or after it; the new
    /// extent's end when the node is empty.
    fn node_goal(&self, id: Id) -> Result<u64, Ext4Error> {
        let h = self.hdr(id)?;
        if h.entries == 0 {
            return Ok(self.goal);
        }
        let first = if h.depth == 0 {
            self.extent(id, 0)?.physical
        } else {
            idx_child(&self.entry(id, 0)?)?
        };
        Ok(match first.saturating_sub(1) {
            0 => self.goal,
            g => g,
        })
    }
}
