//! ext4 extent trees as pure functions over tree blocks: read every mapping,
//! insert an extent (merging with its neighbours, splitting full nodes,
//! growing the root), truncate, and keep each extent block's tail checksum
//! current by [`crate::crc32c::splice`] over the bytes that changed.
//!
//! The tree's root is the inode's 60-byte `i_block` array (a 12-byte header
//! and 4 entries); deeper nodes are whole file-system blocks that the caller
//! reads, writes, allocates and frees through an [`ExtentStore`] (on a real
//! image: its block cache and redo log; in tests: a map of blocks). Nothing
//! here knows about the image file, the inode's other fields or its checksum.
//!
//! # On-disk format
//!
//! * header (12 bytes): `eh_magic` 0xF30A, `eh_entries`, `eh_max`,
//!   `eh_depth` (0 for a leaf), `eh_generation`;
//! * leaf entry (`struct ext4_extent`, 12 bytes): `ee_block` (first logical
//!   block), `ee_len` (above 32768 an unwritten extent of `ee_len - 32768`
//!   blocks), `ee_start_hi` (u16), `ee_start_lo` (u32);
//! * index entry (`struct ext4_extent_idx`): `ei_block` (the lowest logical
//!   block of the subtree), `ei_leaf_lo` (u32), `ei_leaf_hi` (u16), unused;
//! * with `metadata_csum`, a block's tail (`struct ext4_extent_tail`) right
//!   after its `eh_max` entries holds raw CRC-32C(`seed_i`,
//!   `block[0 .. 12 + 12 * eh_max]`), where `seed_i` is the inode's seed
//!   (raw CRC-32C of the file system seed over `le32(inode number)` then
//!   `le32(i_generation)`). The root in the inode has no tail: the inode
//!   checksum covers it.
//! * index keys: spacekit keeps each `ei_block` equal to the first logical
//!   block below it (as the kernel's `ext4_ext_correct_indexes` does), and
//!   reads trees whose keys are lower.
//!
//! # Atomicity
//!
//! Every operation works on copies of the nodes it reads and writes nothing
//! (no [`ExtentStore::write`], no [`ExtentStore::free_tree_block`], no change
//! to the root) until it has succeeded; an operation that fails frees the
//! blocks it allocated and leaves the tree as it was. A block whose header is
//! invalid ([`Ext4Error::Corrupt`] naming the field) or whose tail checksum is
//! wrong ([`Ext4Error::BadChecksum`], `what = "extent block"`) stops the
//! operation before anything is written.
//!
//! # Example
//!
//! ```
//! use std::collections::HashMap;
//! use spacekit::ext4::Ext4Error;
//! use spacekit::ext4::extent::{self, Extent, ExtentStore};
//!
//! struct Mem { blocks: HashMap<u64, Vec<u8>>, next: u64 }
//! impl ExtentStore for Mem {
//!     fn block_size(&self) -> usize { 1024 }
//!     fn read(&mut self, b: u64) -> Result<Vec<u8>, Ext4Error> { Ok(self.blocks[&b].clone()) }
//!     fn write(&mut self, b: u64, d: Vec<u8>) -> Result<(), Ext4Error> {
//!         self.blocks.insert(b, d);
//!         Ok(())
//!     }
//!     fn alloc_tree_block(&mut self, _goal: u64) -> Result<u64, Ext4Error> {
//!         self.next += 1;
//!         Ok(self.next)
//!     }
//!     fn free_tree_block(&mut self, b: u64) -> Result<(), Ext4Error> {
//!         self.blocks.remove(&b);
//!         Ok(())
//!     }
//! }
//!
//! let mut store = Mem { blocks: HashMap::new(), next: 100 };
//! let mut root = [0u8; 60];
//! extent::init_root(&mut root);
//! let seed = Some(0x1234_5678);
//! // Six one-block extents with gaps between them: the root's four slots
//! // overflow, so the tree grows a leaf block.
//! for i in 0..6u32 {
//!     let e = Extent { logical: 10 * i, physical: 5000 + 10 * u64::from(i), len: 1, unwritten: false };
//!     extent::insert(&mut root, &mut store, seed, e)?;
//! }
//! assert_eq!(extent::depth(&root)?, 1);
//! assert_eq!(extent::extents(&root, &mut store, seed)?.len(), 6);
//! // Block 11 follows block 10 both logically and physically: merged.
//! let out = extent::insert(&mut root, &mut store, seed,
//!     Extent { logical: 11, physical: 5011, len: 4, unwritten: false })?;
//! assert!(out.merged);
//! assert_eq!(extent::find(&root, &mut store, seed, 13)?.map(|e| e.len), Some(5));
//! // Free everything from logical block 12 on.
//! let freed = extent::truncate(&mut root, &mut store, seed, 12)?;
//! assert_eq!(freed[0], (5012, 3));
//! assert_eq!(extent::goal(&root, &mut store, seed)?, Some(5012));
//! # Ok::<(), Ext4Error>(())
//! ```

mod record;
mod store;
mod tree;
mod walk;

#[cfg(any(test, feature = "testing"))]
use std::format;
#[cfg(any(test, feature = "testing"))]
use std::string::String;
use std::vec::Vec;

use crate::ext4::error::{invalid, Ext4Error};

use record::ROOT_MAX;
use tree::Tree;
use walk::{internal, walk, Node};

// The module's interface, kept in the files below by concern. Without
// `testing` the module is private and the crate uses only some of it.
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use record::{
    block_checksum, node_capacity, stored_checksum, verify_block, Extent, ExtentHeader,
    EXTENT_MAGIC, MAX_DEPTH, MAX_INIT_LEN, MAX_UNWRITTEN_LEN, ROOT_SIZE,
};
pub use store::ExtentStore;

/// What [`insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// Tree blocks allocated (by splits and root growth), to add to
    /// `i_blocks`.
    pub tree_blocks_added: u32,
    /// Whether the extent was merged into a neighbour instead of taking an
    /// entry of its own.
    pub merged: bool,
    /// The tree's depth afterwards.
    pub depth: u16,
}

/// Writes a fresh empty root into `root`: magic, no entries, `eh_max` 4,
/// depth 0, generation 0 (the kernel's `ext4_ext_tree_init`).
pub fn init_root(root: &mut [u8; ROOT_SIZE]) {
    root.fill(0);
    ExtentHeader {
        entries: 0,
        max: ROOT_MAX,
        depth: 0,
        generation: 0,
    }
    .write(root);
}

/// The tree's depth (0: the extents are in the inode).
///
/// # Errors
/// [`Ext4Error::Corrupt`] for a bad root header.
pub fn depth(root: &[u8; ROOT_SIZE]) -> Result<u16, Ext4Error> {
    Ok(ExtentHeader::parse(root)?.depth)
}

/// Every extent of the tree, in logical order (what `debugfs -R "ex"` lists
/// at the leaf level).
///
/// Checks every node on the way: headers, tail checksums (with a seed),
/// each node at its parent's depth minus one, index keys increasing, each
/// child's keys from its index key up to (not including) the next one,
/// extents sorted and not overlapping.
///
/// # Errors
/// [`Ext4Error::Corrupt`] naming the field; [`Ext4Error::BadChecksum`];
/// the store's errors.
pub fn extents<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
) -> Result<Vec<Extent>, Ext4Error> {
    let mut out = Vec::new();
    walk(root, store, seed, &mut |_, node| {
        if let Node::Leaf(e) = node {
            out.extend_from_slice(e);
        }
    })?;
    Ok(out)
}

/// The tree's index and leaf blocks (not the root), parents before children,
/// for `i_blocks` accounting and for freeing them on unlink.
///
/// # Errors
/// As [`extents`].
#[cfg(any(test, feature = "testing"))]
pub fn tree_blocks<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
) -> Result<Vec<u64>, Ext4Error> {
    let mut out = Vec::new();
    walk(root, store, seed, &mut |block, _| {
        if let Some(b) = block {
            out.push(b);
        }
    })?;
    Ok(out)
}

/// The extent holding logical block `logical`, if mapped (the kernel's
/// `ext4_ext_find_extent` followed by the range check of
/// `ext4_ext_map_blocks`).
///
/// # Errors
/// As [`extents`], for the nodes on the path.
pub fn find<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
    logical: u32,
) -> Result<Option<Extent>, Ext4Error> {
    let mut t = Tree::new(root, store, seed)?;
    let path = t.descend(logical)?;
    let &(leaf, p) = path.last().ok_or_else(internal)?;
    if p == 0 {
        return Ok(None);
    }
    let e = t.extent(leaf, p - 1)?;
    Ok((e.end() > u64::from(logical)).then_some(e))
}

/// The allocation goal for the file's next data block: the physical block
/// just past its last extent (as the kernel's `ext4_ext_find_goal` for an
/// append), or `None` for an empty tree.
///
/// # Errors
/// As [`extents`], for the nodes on the rightmost path.
pub fn goal<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
) -> Result<Option<u64>, Ext4Error> {
    let mut t = Tree::new(root, store, seed)?;
    let path = t.descend(u32::MAX)?;
    let &(leaf, p) = path.last().ok_or_else(internal)?;
    if p == 0 {
        return Ok(None);
    }
    Ok(Some(t.extent(leaf, p - 1)?.physical_end()))
}

/// Maps `new` into the tree (the kernel's `ext4_ext_insert_extent`). The
/// caller guarantees that its logical range is unmapped (an overlap with a
/// neighbour is refused anyway).
///
/// `new` is merged into its left neighbour, its right neighbour or both when
/// [`Extent::can_merge`] allows (the right one also across a leaf boundary),
/// so a tree written by spacekit never holds two neighbours that could be
/// one. Otherwise it takes an entry:
/// a full leaf is split (an append at the end of a leaf starts a new leaf
/// holding just `new`, as the kernel does, so sequential writes fill their
/// leaves; otherwise half the entries move), the new node's index entry goes
/// into the parent, which may split in turn, and a full root moves its
/// entries into a new block and becomes an index one level deeper. New
/// blocks come from [`ExtentStore::alloc_tree_block`] with the goal just
/// past `new`'s physical blocks. Changed blocks get their tail checksum by
/// [`crc32c::splice`](crate::crc32c::splice) over the header and entry
/// range that changed (new blocks by a full computation).
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] for a zero or too long `len`, a range past
/// logical block 2^32 or physical block 2^48, physical block 0, an overlap
/// with a mapped extent, or a tree already 5 deep with every node on the
/// path full; the errors of [`extents`] for the nodes read; the store's.
pub fn insert<S: ExtentStore + ?Sized>(
    root: &mut [u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
    new: Extent,
) -> Result<InsertOutcome, Ext4Error> {
    if new.len == 0 || new.len > Extent::max_len(new.unwritten) {
        return Err(invalid(
            "len",
            new.len.into(),
            "an extent holds 1 to 32768 blocks (32767 unwritten)",
        ));
    }
    if new.end() > 1 << 32 {
        return Err(invalid(
            "logical",
            new.logical.into(),
            "the extent runs past logical block 2^32",
        ));
    }
    if new.physical == 0 || new.physical_end() > 1 << 48 {
        return Err(invalid(
            "physical",
            new.physical,
            "outside physical blocks 1 to 2^48",
        ));
    }
    let mut t = Tree::new(root, store, seed)?;
    match t.insert(new) {
        Ok(merged) => {
            let added = t.allocated.len() as u32;
            t.commit(root)?;
            Ok(InsertOutcome {
                tree_blocks_added: added,
                merged,
                depth: ExtentHeader::parse(root)?.depth,
            })
        }
        Err(e) => {
            t.abort();
            Err(e)
        }
    }
}

/// Unmaps every logical block from `first` on (the kernel's
/// `ext4_ext_remove_space` from `first` to the end), splitting an extent
/// that straddles `first`, and returns the freed data blocks as
/// `(physical, len)` ranges in logical order (unwritten extents included).
/// `truncate(.., 0)` empties the tree, as unlink needs.
///
/// Tree blocks left empty are freed through [`ExtentStore::free_tree_block`]
/// (count those calls for `i_blocks`); an empty tree goes back to an empty
/// root of depth 0, and a root left with one child whose entries fit in the
/// root takes them in, freeing the child (repeatedly).
///
/// # Errors
/// As [`extents`], for the nodes read; the store's.
pub fn truncate<S: ExtentStore + ?Sized>(
    root: &mut [u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
    first: u32,
) -> Result<Vec<(u64, u64)>, Ext4Error> {
    let mut t = Tree::new(root, store, seed)?;
    let mut freed = Vec::new();
    match t.truncate(first, &mut freed) {
        Ok(()) => {
            t.commit(root)?;
            freed.reverse();
            Ok(freed)
        }
        Err(e) => {
            t.abort();
            Err(e)
        }
    }
}

/// Checks every invariant of the tree: headers, tail checksums recomputed in
/// full, depths, key order, each child's keys within its index range, no
/// node other than the root empty, no block reached twice. For tests.
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub fn validate<S: ExtentStore + ?Sized>(
    root: &[u8; ROOT_SIZE],
    store: &mut S,
    seed: Option<u32>,
) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut err = None;
    walk(root, store, seed, &mut |block, node| {
        if let Some(b) = block {
            if !seen.insert(b) {
                err.get_or_insert(format!("block {b} reached twice"));
            }
            let empty = match node {
                Node::Leaf(e) => e.is_empty(),
                Node::Index(i) => i.is_empty(),
            };
            if empty {
                err.get_or_insert(format!("block {b} is an empty node"));
            }
        }
    })
    .map_err(|e| format!("{e}"))?;
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    struct Mem {
        bs: usize,
        blocks: HashMap<u64, Vec<u8>>,
        next: u64,
        writes: usize,
        fail_alloc: bool,
    }

    impl Mem {
        fn new(bs: usize) -> Mem {
            Mem {
                bs,
                blocks: HashMap::new(),
                next: 10,
                writes: 0,
                fail_alloc: false,
            }
        }
    }

    impl ExtentStore for Mem {
        fn block_size(&self) -> usize {
            self.bs
        }
        fn read(&mut self, b: u64) -> Result<Vec<u8>, Ext4Error> {
            self.blocks
                .get(&b)
                .cloned()
                .ok_or(invalid("block", b, "not allocated"))
        }
        fn write(&mut self, b: u64, d: Vec<u8>) -> Result<(), Ext4Error> {
            self.writes += 1;
            self.blocks.insert(b, d);
            Ok(())
        }
        fn alloc_tree_block(&mut self, _goal: u64) -> Result<u64, Ext4Error> {
            if self.fail_alloc {
                return Err(Ext4Error::NoSpace { len: 1, align: 1 });
            }
            self.next += 1;
            self.blocks.insert(self.next, vec![0; self.bs]);
            Ok(self.next)
        }
        fn free_tree_block(&mut self, b: u64) -> Result<(), Ext4Error> {
            assert!(self.blocks.remove(&b).is_some(), "double free {b}");
            Ok(())
        }
    }

    fn ext(logical: u32, physical: u64, len: u16) -> Extent {
        Extent {
            logical,
            physical,
            len,
            unwritten: false,
        }
    }

    #[test]
    fn grow_split_truncate_with_checksums() {
        let seed = Some(0xDEAD_BEEF);
        let mut s = Mem::new(1024);
        let mut root = [0u8; 60];
        init_root(&mut root);
        let mut want = Vec::new();
        for i in 0..400u32 {
            let e = ext(i * 3, 1000 + u64::from(i) * 5, 2);
            let out = insert(&mut root, &mut s, seed, e).unwrap();
            assert!(!out.merged);
            want.push(e);
            assert_eq!(extents(&root, &mut s, seed).unwrap(), want);
            validate(&root, &mut s, seed).unwrap();
        }
        assert_eq!(depth(&root).unwrap(), 2);
        let blocks: BTreeSet<u64> = tree_blocks(&root, &mut s, seed)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(blocks, s.blocks.keys().copied().collect());
        let freed = truncate(&mut root, &mut s, seed, 301).unwrap();
        assert_eq!(freed[0], (1000 + 100 * 5 + 1, 1));
        want.truncate(101);
        want[100].len = 1;
        assert_eq!(extents(&root, &mut s, seed).unwrap(), want);
        validate(&root, &mut s, seed).unwrap();
        truncate(&mut root, &mut s, seed, 0).unwrap();
        assert!(s.blocks.is_empty());
        let mut empty = [0u8; 60];
        init_root(&mut empty);
        assert_eq!(root, empty);
    }

    /// Extents inserted in front of the others, and in a scattered order,
    /// through every growth of the root and every split: the index keys
    /// always equal their child's first extent (found by the crash soak:
    /// an insert in front of a full in-inode root left the new root's key
    /// at the old first extent).
    #[test]
    fn inserts_in_front_keep_index_keys_exact() {
        let seed = Some(0x5EED);
        let orders: [Vec<u32>; 3] = [
            (1..=700).rev().map(|i| i * 3).collect(),
            (0..700).map(|i| (i * 379) % 701 * 3).collect(),
            // The soak's case: four extents fill the root, then one in front.
            std::vec![1000, 1100, 1200, 1300, 10],
        ];
        for (o, order) in orders.iter().enumerate() {
            let mut s = Mem::new(1024);
            let mut root = [0u8; 60];
            init_root(&mut root);
            let mut want = Vec::new();
            for (i, &l) in order.iter().enumerate() {
                let e = ext(l, 5000 + u64::from(l) * 2, 2);
                insert(&mut root, &mut s, seed, e).unwrap();
                want.push(e);
                want.sort_by_key(|e| e.logical);
                assert_eq!(
                    extents(&root, &mut s, seed).unwrap(),
                    want,
                    "order {o} step {i}"
                );
                validate(&root, &mut s, seed).unwrap_or_else(|m| panic!("order {o} step {i}: {m}"));
            }
        }
    }

    #[test]
    fn bad_checksum_is_refused_and_nothing_written() {
        let seed = Some(7);
        let mut s = Mem::new(1024);
        let mut root = [0u8; 60];
        init_root(&mut root);
        for i in 0..5u32 {
            insert(
                &mut root,
                &mut s,
                seed,
                ext(i * 2, 100 + u64::from(i) * 2, 1),
            )
            .unwrap();
        }
        let b = tree_blocks(&root, &mut s, seed).unwrap()[0];
        s.blocks.get_mut(&b).unwrap()[20] ^= 1;
        let before = root;
        let writes = s.writes;
        assert!(matches!(
            extents(&root, &mut s, seed),
            Err(Ext4Error::BadChecksum { .. })
        ));
        assert!(matches!(
            insert(&mut root, &mut s, seed, ext(100, 500, 1)),
            Err(Ext4Error::BadChecksum { .. })
        ));
        assert!(truncate(&mut root, &mut s, seed, 0).is_err());
        assert_eq!(root, before);
        assert_eq!(s.writes, writes);
        // Without metadata_csum the same block reads fine.
        assert_eq!(extents(&root, &mut s, None).unwrap().len(), 5);
    }

    #[test]
    fn failed_alloc_changes_nothing() {
        let mut s = Mem::new(1024);
        let mut root = [0u8; 60];
        init_root(&mut root);
        for i in 0..4u32 {
            insert(
                &mut root,
                &mut s,
                None,
                ext(i * 2, 100 + u64::from(i) * 2, 1),
            )
            .unwrap();
        }
        let before = root;
        s.fail_alloc = true;
        assert!(matches!(
            insert(&mut root, &mut s, None, ext(100, 500, 1)),
            Err(Ext4Error::NoSpace { .. })
        ));
        assert_eq!(root, before);
        assert!(s.blocks.is_empty());
    }

    #[test]
    fn overlap_and_bad_arguments_are_refused() {
        let mut s = Mem::new(1024);
        let mut root = [0u8; 60];
        init_root(&mut root);
        insert(&mut root, &mut s, None, ext(10, 100, 5)).unwrap();
        for bad in [
            ext(12, 500, 1),
            ext(8, 500, 3),
            ext(0, 500, 0),
            ext(0, 0, 1),
            ext(u32::MAX, 500, 2),
        ] {
            assert!(
                matches!(
                    insert(&mut root, &mut s, None, bad),
                    Err(Ext4Error::InvalidArgument { .. })
                ),
                "{bad:?}"
            );
        }
        let e = Extent {
            logical: 20,
            physical: 500,
            len: 32768,
            unwritten: true,
        };
        assert!(insert(&mut root, &mut s, None, e).is_err());
    }
}
