//! Changes to an extent tree: a copy-on-write set of nodes, each changed
//! in place (entries inserted and removed, nodes split, the root grown or
//! collapsed) and written back, with spliced tail checksums, only when the
//! whole operation has succeeded.

use std::collections::BTreeMap;
use std::ops::Range;
use std::vec;
use std::vec::Vec;

use crate::crc32c;
use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::{le16, le32, put32};

use super::record::{
    block_checksum, entry_bytes, idx_child, node_capacity, stored_checksum, Extent, ExtentHeader,
    ENTRY, HDR, ROOT_SIZE,
};
use super::store::ExtentStore;
use super::walk::{check_root, child_header, index_entries, internal, leaf_entries, read_node};

mod split;

/// A node: the root or a tree block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Id {
    Root,
    Block(u64),
}

/// A node's bytes as changed so far.
struct Buf {
    data: Vec<u8>,
    /// The bytes as read (with a checksum that was verified), or `None` for
    /// a new block.
    orig: Option<Vec<u8>>,
    /// Byte ranges changed since the read.
    dirty: Vec<Range<usize>>,
}

impl Buf {
    fn mark(&mut self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        self.dirty.push(r);
    }

    /// The changed ranges, sorted and merged.
    fn merged_dirty(&self) -> Vec<Range<usize>> {
        let mut v = self.dirty.clone();
        v.sort_by_key(|r| r.start);
        let mut out: Vec<Range<usize>> = Vec::new();
        for r in v {
            match out.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        out
    }
}

/// A path from the root: each level's node and the position taken in it
/// (the child's index, or in the leaf an extent's index or insertion point).
pub(super) type Path = Vec<(Id, usize)>;

pub(super) struct Tree<'a, S: ExtentStore + ?Sized> {
    store: &'a mut S,
    seed: Option<u32>,
    bs: usize,
    nodes: BTreeMap<Id, Buf>,
    /// Blocks allocated by this operation.
    pub(super) allocated: Vec<u64>,
    /// Blocks to free at commit.
    freed: Vec<u64>,
    /// The first extent's goal for new tree blocks.
    goal: u64,
}

impl<'a, S: ExtentStore + ?Sized> Tree<'a, S> {
    pub(super) fn new(
        root: &[u8; ROOT_SIZE],
        store: &'a mut S,
        seed: Option<u32>,
    ) -> Result<Self, Ext4Error> {
        let h = ExtentHeader::parse(root)?;
        check_root(&h)?;
        if h.depth == 0 {
            leaf_entries(root, &h)?;
        } else {
            index_entries(root, &h, (0, 1 << 32))?;
        }
        let mut nodes = BTreeMap::new();
        nodes.insert(
            Id::Root,
            Buf {
                data: root.to_vec(),
                orig: Some(root.to_vec()),
                dirty: Vec::new(),
            },
        );
        let bs = store.block_size();
        Ok(Tree {
            store,
            seed,
            bs,
            nodes,
            allocated: Vec::new(),
            freed: Vec::new(),
            goal: 0,
        })
    }

    fn buf(&self, id: Id) -> Result<&Buf, Ext4Error> {
        self.nodes.get(&id).ok_or_else(internal)
    }

    fn buf_mut(&mut self, id: Id) -> Result<&mut Buf, Ext4Error> {
        self.nodes.get_mut(&id).ok_or_else(internal)
    }

    /// The header of a loaded node (checked when it was loaded).
    fn hdr(&self, id: Id) -> Result<ExtentHeader, Ext4Error> {
        let d = &self.buf(id)?.data;
        Ok(ExtentHeader {
            entries: le16(d, 2),
            max: le16(d, 4),
            depth: le16(d, 6),
            generation: le32(d, 8),
        })
    }

    fn set_hdr(&mut self, id: Id, h: ExtentHeader) -> Result<(), Ext4Error> {
        let b = self.buf_mut(id)?;
        h.write(&mut b.data);
        b.mark(0..HDR);
        Ok(())
    }

    fn entry(&self, id: Id, i: usize) -> Result<[u8; 12], Ext4Error> {
        Ok(entry_bytes(&self.buf(id)?.data, i))
    }

    fn set_entry(&mut self, id: Id, i: usize, e: [u8; 12]) -> Result<(), Ext4Error> {
        let b = self.buf_mut(id)?;
        let off = HDR + ENTRY * i;
        let s = b.data.get_mut(off..off + ENTRY).ok_or_else(internal)?;
        s.copy_from_slice(&e);
        b.mark(off..off + ENTRY);
        Ok(())
    }

    pub(super) fn extent(&self, id: Id, i: usize) -> Result<Extent, Ext4Error> {
        Extent::from_bytes(&self.entry(id, i)?)
    }

    fn key(&self, id: Id, i: usize) -> Result<u32, Ext4Error> {
        Ok(le32(&self.entry(id, i)?, 0))
    }

    /// The first key of a node: its first extent's or index entry's block.
    fn first_key(&self, id: Id) -> Result<u32, Ext4Error> {
        self.key(id, 0)
    }

    /// Loads child `i` of index node `id`, checking it, and returns its id.
    fn child(&mut self, id: Id, i: usize) -> Result<Id, Ext4Error> {
        let ph = self.hdr(id)?;
        let b = idx_child(&self.entry(id, i)?)?;
        let cid = Id::Block(b);
        if self.nodes.contains_key(&cid) {
            return Ok(cid);
        }
        let data = read_node(self.store, b, self.seed)?;
        let h = child_header(&data, &ph)?;
        // Entries in order, and within the parent's key range.
        let lo = u64::from(self.key(id, i)?);
        let hi = if i + 1 < usize::from(ph.entries) {
            u64::from(self.key(id, i + 1)?)
        } else {
            1 << 32
        };
        if h.depth == 0 {
            let ext = leaf_entries(&data, &h)?;
            if let (Some(f), Some(l)) = (ext.first(), ext.last()) {
                if u64::from(f.logical) < lo || l.end() > hi {
                    return Err(corrupt(
                        "ee_block",
                        None,
                        f.logical.into(),
                        "extents outside their index range",
                    ));
                }
            }
        } else {
            index_entries(&data, &h, (lo, hi))?;
        }
        self.nodes.insert(
            cid,
            Buf {
                orig: Some(data.clone()),
                data,
                dirty: Vec::new(),
            },
        );
        Ok(cid)
    }

    /// The path to where `logical` belongs: in each index node the last
    /// entry whose key is at most `logical` (the first if none), in the
    /// leaf the number of extents starting at or before `logical`.
    pub(super) fn descend(&mut self, logical: u32) -> Result<Path, Ext4Error> {
        let mut path = Vec::new();
        let mut id = Id::Root;
        loop {
            let h = self.hdr(id)?;
            let n = usize::from(h.entries);
            // The number of entries with key <= logical.
            let mut lo = 0;
            let mut hi = n;
            while lo < hi {
                let mid = (lo + hi) / 2;
                if self.key(id, mid)? <= logical {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if h.depth == 0 {
                path.push((id, lo));
                return Ok(path);
            }
            let i = lo.saturating_sub(1);
            path.push((id, i));
            id = self.child(id, i)?;
        }
    }

    /// Completes `path` (down to `level`) to the leftmost or rightmost leaf
    /// below; the leaf position is 0 or the entry count.
    fn descend_edge(&mut self, path: &mut Path, rightmost: bool) -> Result<(), Ext4Error> {
        loop {
            let &(id, i) = path.last().ok_or_else(internal)?;
            let h = self.hdr(id)?;
            if h.depth == 0 {
                if let Some(last) = path.last_mut() {
                    last.1 = if rightmost { usize::from(h.entries) } else { 0 };
                }
                return Ok(());
            }
            let child = self.child(id, i)?;
            let ch = self.hdr(child)?;
            let ci = if rightmost && ch.depth > 0 {
                usize::from(ch.entries).saturating_sub(1)
            } else {
                0
            };
            path.push((child, ci));
        }
    }

    /// The first extent of the leaf after `path`'s leaf, with its path.
    fn next_extent(&mut self, path: &Path) -> Result<Option<(Path, Extent)>, Ext4Error> {
        for l in (0..path.len().saturating_sub(1)).rev() {
            let (id, i) = path[l];
            if i + 1 < usize::from(self.hdr(id)?.entries) {
                let mut p: Path = path[..=l].to_vec();
                p[l].1 += 1;
                self.descend_edge(&mut p, false)?;
                let &(leaf, _) = p.last().ok_or_else(internal)?;
                if self.hdr(leaf)?.entries == 0 {
                    return Ok(None);
                }
                let e = self.extent(leaf, 0)?;
                return Ok(Some((p, e)));
            }
        }
        Ok(None)
    }

    /// Sets the index keys above the node at `path[level]` to `key`, its
    /// new first key: the key pointing at it, and above that as long as
    /// the node is its parent's first child (the kernel's
    /// `ext4_ext_correct_indexes`). spacekit keeps every index key equal to
    /// the first key below it.
    fn set_keys_above(&mut self, path: &Path, level: usize, key: u32) -> Result<(), Ext4Error> {
        for l in (0..level).rev() {
            let (id, i) = path[l];
            let mut e = self.entry(id, i)?;
            if le32(&e, 0) != key {
                put32(&mut e, 0, key);
                self.set_entry(id, i, e)?;
            }
            if i != 0 {
                break;
            }
        }
        Ok(())
    }

    pub(super) fn insert(&mut self, new: Extent) -> Result<bool, Ext4Error> {
        self.goal = new.physical_end();
        let path = self.descend(new.logical)?;
        let &(leaf, p) = path.last().ok_or_else(internal)?;
        let n = usize::from(self.hdr(leaf)?.entries);
        // With exact index keys the left neighbour is in this leaf (the
        // descent took the last leaf starting at or before `new`); with a
        // key below its leaf's first extent (not written by spacekit) a
        // neighbour in the previous leaf is left unmerged rather than
        // stretched past the key.
        let left = if p > 0 {
            let mut lp = path.clone();
            if let Some(l) = lp.last_mut() {
                l.1 = p - 1;
            }
            Some((lp, self.extent(leaf, p - 1)?))
        } else {
            None
        };
        let right = if p < n {
            Some((path.clone(), self.extent(leaf, p)?))
        } else {
            self.next_extent(&path)?
        };
        if let Some((_, l)) = &left {
            if l.end() > u64::from(new.logical) {
                return Err(invalid(
                    "logical",
                    new.logical.into(),
                    "overlaps a mapped extent",
                ));
            }
        }
        if let Some((_, r)) = &right {
            if u64::from(r.logical) < new.end() {
                return Err(invalid(
                    "logical",
                    new.logical.into(),
                    "overlaps a mapped extent",
                ));
            }
        }
        let left = left.filter(|(_, l)| l.can_merge(&new));
        let right = right.filter(|(_, r)| new.can_merge(r));
        match (left, right) {
            (Some((lp, l)), right) => {
                let mut m = l;
                m.len += new.len;
                match right {
                    Some((rp, r)) if m.can_merge(&r) => {
                        m.len += r.len;
                        self.set_leaf_extent(&lp, m)?;
                        self.remove_extent(rp)?;
                    }
                    _ => self.set_leaf_extent(&lp, m)?,
                }
                Ok(true)
            }
            (None, Some((rp, r))) => {
                let m = Extent {
                    logical: new.logical,
                    physical: new.physical,
                    len: new.len + r.len,
                    unwritten: new.unwritten,
                };
                self.set_leaf_extent(&rp, m)?;
                if rp.last().is_some_and(|l| l.1 == 0) {
                    self.set_keys_above(&rp, rp.len() - 1, new.logical)?;
                }
                Ok(true)
            }
            (None, None) => {
                if p == 0 {
                    self.set_keys_above(&path, path.len() - 1, new.logical)?;
                }
                self.insert_entry(path, new.to_bytes())?;
                Ok(false)
            }
        }
    }

    fn set_leaf_extent(&mut self, path: &Path, e: Extent) -> Result<(), Ext4Error> {
        let &(leaf, i) = path.last().ok_or_else(internal)?;
        self.set_entry(leaf, i, e.to_bytes())
    }

    /// Removes entry `i` of node `id`, shifting the rest down and zeroing
    /// the freed slot.
    fn remove_entry(&mut self, id: Id, i: usize) -> Result<(), Ext4Error> {
        let mut h = self.hdr(id)?;
        let n = usize::from(h.entries);
        let b = self.buf_mut(id)?;
        let start = HDR + ENTRY * i;
        let end = HDR + ENTRY * n;
        b.data.copy_within(start + ENTRY..end, start);
        b.data[end - ENTRY..end].fill(0);
        b.mark(start..end);
        h.entries -= 1;
        self.set_hdr(id, h)
    }

    /// Removes the extent at `path` and every node left empty above it.
    fn remove_extent(&mut self, path: Path) -> Result<(), Ext4Error> {
        let mut level = path.len() - 1;
        loop {
            let (id, i) = path[level];
            self.remove_entry(id, i)?;
            if self.hdr(id)?.entries > 0 {
                if i == 0 {
                    let k = self.first_key(id)?;
                    self.set_keys_above(&path, level, k)?;
                }
                return Ok(());
            }
            match id {
                Id::Root => {
                    // An empty tree: back to an empty leaf root.
                    let mut h = self.hdr(id)?;
                    h.depth = 0;
                    return self.set_hdr(id, h);
                }
                Id::Block(b) => {
                    self.free(b);
                    level -= 1;
                }
            }
        }
    }

    fn free(&mut self, b: u64) {
        self.nodes.remove(&Id::Block(b));
        self.freed.push(b);
    }

    /// Inserts raw entry `e` at position `pos` of node `id`, which has room.
    fn insert_raw(&mut self, id: Id, pos: usize, e: [u8; 12]) -> Result<(), Ext4Error> {
        let mut h = self.hdr(id)?;
        if h.entries >= h.max || pos > usize::from(h.entries) {
            return Err(internal());
        }
        let n = usize::from(h.entries);
        let b = self.buf_mut(id)?;
        let start = HDR + ENTRY * pos;
        let end = HDR + ENTRY * n;
        b.data.copy_within(start..end, start + ENTRY);
        b.data[start..start + ENTRY].copy_from_slice(&e);
        b.mark(start..end + ENTRY);
        h.entries += 1;
        self.set_hdr(id, h)
    }

    /// Allocates (from `goal` on) and sets up an empty node of depth
    /// `depth`.
    fn new_block(&mut self, depth: u16, goal: u64) -> Result<u64, Ext4Error> {
        let b = self.store.alloc_tree_block(goal)?;
        self.allocated.push(b);
        if b == 0 || self.nodes.contains_key(&Id::Block(b)) {
            return Err(invalid(
                "block",
                b,
                "alloc_tree_block returned a block in use",
            ));
        }
        let mut data = vec![0u8; self.bs];
        ExtentHeader {
            entries: 0,
            max: node_capacity(self.bs),
            depth,
            generation: 0,
        }
        .write(&mut data);
        self.nodes.insert(
            Id::Block(b),
            Buf {
                data,
                orig: None,
                dirty: Vec::new(),
            },
        );
        Ok(b)
    }

    pub(super) fn truncate(
        &mut self,
        first: u32,
        freed: &mut Vec<(u64, u64)>,
    ) -> Result<(), Ext4Error> {
        self.trunc_node(Id::Root, first, freed)?;
        let mut h = self.hdr(Id::Root)?;
        if h.entries == 0 {
            if h.depth != 0 {
                h.depth = 0;
                self.set_hdr(Id::Root, h)?;
            }
            return Ok(());
        }
        // Collapse: a root with one child that fits takes its entries.
        while h.depth > 0 && h.entries == 1 {
            let child = self.child(Id::Root, 0)?;
            let ch = self.hdr(child)?;
            if ch.entries > h.max {
                break;
            }
            let mut entries = Vec::new();
            for i in 0..usize::from(ch.entries) {
                entries.push(self.entry(child, i)?);
            }
            for (i, x) in entries.iter().enumerate() {
                self.set_entry(Id::Root, i, *x)?;
            }
            h.entries = ch.entries;
            h.depth = ch.depth;
            self.set_hdr(Id::Root, h)?;
            if let Id::Block(b) = child {
                self.free(b);
            }
        }
        Ok(())
    }

    /// Truncates the subtree at `id`; pushes freed data in descending
    /// logical order.
    fn trunc_node(
        &mut self,
        id: Id,
        first: u32,
        freed: &mut Vec<(u64, u64)>,
    ) -> Result<(), Ext4Error> {
        let h = self.hdr(id)?;
        let n = usize::from(h.entries);
        let mut keep = n;
        if h.depth == 0 {
            for i in (0..n).rev() {
                let e = self.extent(id, i)?;
                if e.logical >= first {
                    freed.push((e.physical, e.len.into()));
                    keep = i;
                } else {
                    if e.end() > u64::from(first) {
                        let k = (first - e.logical) as u16;
                        freed.push((e.physical + u64::from(k), (e.len - k).into()));
                        let mut s = e;
                        s.len = k;
                        self.set_entry(id, i, s.to_bytes())?;
                    }
                    break;
                }
            }
        } else {
            for i in (0..n).rev() {
                let key = self.key(id, i)?;
                let child = self.child(id, i)?;
                if key >= first {
                    self.free_subtree(child, freed)?;
                    keep = i;
                } else {
                    self.trunc_node(child, first, freed)?;
                    if self.hdr(child)?.entries == 0 {
                        if let Id::Block(b) = child {
                            self.free(b);
                        }
                        keep = i;
                    }
                    break;
                }
            }
        }
        if keep < n {
            self.keep_first(id, keep)?;
        }
        Ok(())
    }

    /// Cuts node `id` to its first `keep` entries (the rest zeroed).
    fn keep_first(&mut self, id: Id, keep: usize) -> Result<(), Ext4Error> {
        let mut h = self.hdr(id)?;
        let b = self.buf_mut(id)?;
        let start = HDR + ENTRY * keep;
        let end = HDR + ENTRY * usize::from(h.entries);
        b.data[start..end].fill(0);
        b.mark(start..end);
        h.entries = keep as u16;
        self.set_hdr(id, h)
    }

    /// Frees a whole subtree: its data (pushed in descending logical order)
    /// and its blocks.
    fn free_subtree(&mut self, id: Id, freed: &mut Vec<(u64, u64)>) -> Result<(), Ext4Error> {
        let h = self.hdr(id)?;
        for i in (0..usize::from(h.entries)).rev() {
            if h.depth == 0 {
                let e = self.extent(id, i)?;
                freed.push((e.physical, e.len.into()));
            } else {
                let c = self.child(id, i)?;
                self.free_subtree(c, freed)?;
            }
        }
        if let Id::Block(b) = id {
            self.free(b);
        }
        Ok(())
    }

    /// Writes every changed block (tail checksums spliced, or computed in
    /// full for new blocks), frees the freed ones, and copies the root out.
    pub(super) fn commit(self, root: &mut [u8; ROOT_SIZE]) -> Result<(), Ext4Error> {
        let Tree {
            store,
            seed,
            nodes,
            freed,
            ..
        } = self;
        for (id, mut buf) in nodes {
            let dirty = buf.merged_dirty();
            match id {
                Id::Root => {
                    if !dirty.is_empty() {
                        root.copy_from_slice(&buf.data);
                    }
                }
                Id::Block(b) => {
                    if dirty.is_empty() && buf.orig.is_some() {
                        continue;
                    }
                    if let Some(seed) = seed {
                        let csum = tail_checksum(seed, &buf, &dirty)?;
                        let end = HDR + ENTRY * usize::from(le16(&buf.data, 4));
                        put32(&mut buf.data, end, csum);
                    }
                    store.write(b, buf.data)?;
                }
            }
        }
        for b in freed {
            store.free_tree_block(b)?;
        }
        Ok(())
    }

    /// Gives back the blocks allocated by a failed operation (best effort).
    pub(super) fn abort(self) {
        for b in self.allocated {
            let _ = self.store.free_tree_block(b);
        }
    }
}

/// The new tail checksum of a changed block: spliced over each changed
/// range from the verified old one, or computed in full for a new block.
fn tail_checksum(seed: u32, buf: &Buf, dirty: &[Range<usize>]) -> Result<u32, Ext4Error> {
    let full = || block_checksum(seed, &buf.data).ok_or_else(internal);
    let Some(orig) = &buf.orig else {
        return full();
    };
    let len = HDR + ENTRY * usize::from(le16(orig, 4));
    let mut crc = stored_checksum(orig).ok_or_else(internal)?;
    for r in dirty {
        let (mut s, mut e) = (r.start.min(len), r.end.min(len));
        // Only the bytes that really differ.
        while s < e && orig[s] == buf.data[s] {
            s += 1;
        }
        while e > s && orig[e - 1] == buf.data[e - 1] {
            e -= 1;
        }
        if s == e {
            continue;
        }
        crc = match crc32c::splice(crc, len as u64, s as u64, &orig[s..e], &buf.data[s..e]) {
            Ok(c) => c,
            Err(_) => return full(),
        };
    }
    debug_assert_eq!(Some(crc), block_checksum(seed, &buf.data));
    Ok(crc)
}
