//! Read-only traversal of an extent tree, and the checks every node read
//! goes through.

use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::le32;

use super::record::{entry_bytes, idx_child, verify_block, Extent, ExtentHeader, ROOT_SIZE};
use super::store::ExtentStore;

/// A node's entries, for [`walk`].
pub(super) enum Node<'a> {
    Leaf(&'a [Extent]),
    /// Read only by [`validate`](super::validate) (feature `testing`).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    Index(&'a [(u32, u64)]),
}

/// Visits every node in order (parents before children, children left to
/// right), checking it; `visit` gets the block number (`None` for the root).
pub(super) fn walk<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
    visit: &mut dyn FnMut(Option<u64>, Node<'_>),
) -> Result<(), Ext4Error> {
    let h = ExtentHeader::parse(root)?;
    check_root(&h)?;
    let mut last_end = 0u64;
    walk_node(
        root,
        None,
        h,
        (0, 1 << 32),
        store,
        seed,
        visit,
        &mut last_end,
    )
}

#[allow(clippy::too_many_arguments)]
fn walk_node<S: ExtentStore + ?Sized>(
    buf: &[u8],
    block: Option<u64>,
    h: ExtentHeader,
    range: (u64, u64),
    store: &mut S,
    seed: Option<u32>,
    visit: &mut dyn FnMut(Option<u64>, Node<'_>),
    last_end: &mut u64,
) -> Result<(), Ext4Error> {
    if h.depth == 0 {
        let ext = leaf_entries(buf, &h)?;
        for e in &ext {
            if u64::from(e.logical) < range.0.max(*last_end) || e.end() > range.1 {
                return Err(corrupt(
                    "ee_block",
                    None,
                    e.logical.into(),
                    "extents out of order or outside their index range",
                ));
            }
            *last_end = e.end();
        }
        visit(block, Node::Leaf(&ext));
        return Ok(());
    }
    let idx = index_entries(buf, &h, range)?;
    visit(block, Node::Index(&idx));
    for (i, &(key, child)) in idx.iter().enumerate() {
        let hi = idx.get(i + 1).map_or(range.1, |n| u64::from(n.0));
        let cbuf = read_node(store, child, seed)?;
        let ch = child_header(&cbuf, &h)?;
        walk_node(
            &cbuf,
            Some(child),
            ch,
            (u64::from(key), hi),
            store,
            seed,
            visit,
            last_end,
        )?;
    }
    Ok(())
}

pub(super) fn check_root(h: &ExtentHeader) -> Result<(), Ext4Error> {
    if h.depth > 0 && h.entries == 0 {
        return Err(corrupt(
            "eh_entries",
            None,
            0,
            "an index root with no entries",
        ));
    }
    Ok(())
}

pub(super) fn leaf_entries(buf: &[u8], h: &ExtentHeader) -> Result<Vec<Extent>, Ext4Error> {
    let mut out: Vec<Extent> = Vec::with_capacity(h.entries.into());
    for i in 0..usize::from(h.entries) {
        let e = Extent::from_bytes(&entry_bytes(buf, i))?;
        if let Some(prev) = out.last() {
            if u64::from(e.logical) < prev.end() {
                return Err(corrupt(
                    "ee_block",
                    None,
                    e.logical.into(),
                    "extents out of order or overlapping",
                ));
            }
        }
        out.push(e);
    }
    Ok(out)
}

pub(super) fn index_entries(
    buf: &[u8],
    h: &ExtentHeader,
    range: (u64, u64),
) -> Result<Vec<(u32, u64)>, Ext4Error> {
    if h.entries == 0 {
        return Err(corrupt(
            "eh_entries",
            None,
            0,
            "an index node with no entries",
        ));
    }
    let mut out: Vec<(u32, u64)> = Vec::with_capacity(h.entries.into());
    for i in 0..usize::from(h.entries) {
        let b = entry_bytes(buf, i);
        let key = le32(&b, 0);
        let child = idx_child(&b)?;
        let in_range = u64::from(key) >= range.0 && u64::from(key) < range.1;
        let sorted = out.last().is_none_or(|p| p.0 < key);
        if !in_range || !sorted {
            return Err(corrupt(
                "ei_block",
                None,
                key.into(),
                "index keys out of order or outside their parent's range",
            ));
        }
        out.push((key, child));
    }
    Ok(out)
}

/// Reads a tree block and checks its header and tail checksum.
pub(super) fn read_node<S: ExtentStore + ?Sized>(
    store: &mut S,
    block: u64,
    seed: Option<u32>,
) -> Result<Vec<u8>, Ext4Error> {
    let bs = store.block_size();
    let buf = store.read(block)?;
    if buf.len() != bs {
        return Err(invalid(
            "block",
            block,
            "the store returned a buffer not one block long",
        ));
    }
    verify_block(&buf, seed)?;
    Ok(buf)
}

/// Parses a child's header and checks its depth against its parent's.
pub(super) fn child_header(buf: &[u8], parent: &ExtentHeader) -> Result<ExtentHeader, Ext4Error> {
    let h = ExtentHeader::parse(buf)?;
    if h.depth + 1 != parent.depth {
        return Err(corrupt(
            "eh_depth",
            None,
            h.depth.into(),
            "not one less than the parent's",
        ));
    }
    Ok(h)
}

pub(super) fn internal() -> Ext4Error {
    corrupt("eh_depth", None, 0, "internal: empty path")
}
