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

use std::collections::BTreeMap;
#[cfg(any(test, feature = "testing"))]
use std::format;
use std::ops::Range;
#[cfg(any(test, feature = "testing"))]
use std::string::String;
use std::vec;
use std::vec::Vec;

use super::error::{corrupt, invalid, Ext4Error};
use super::layout::{le16, le32, put16, put32};
use crate::crc32c;

/// `eh_magic`: 0xF30A.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Size of the in-inode root (`i_block`): a header and 4 entries.
pub const ROOT_SIZE: usize = 60;
/// The deepest tree ext4 allows (`EXT4_MAX_EXTENT_DEPTH`).
pub const MAX_DEPTH: u16 = 5;
/// The most blocks an initialised extent holds (`EXT_INIT_MAX_LEN`).
pub const MAX_INIT_LEN: u16 = 32768;
/// The most blocks an unwritten extent holds (`EXT_UNWRITTEN_MAX_LEN`).
pub const MAX_UNWRITTEN_LEN: u16 = 32767;

/// Size of a header and of an entry.
const HDR: usize = 12;
const ENTRY: usize = 12;
/// Entries in the in-inode root.
const ROOT_MAX: u16 = 4;

/// One mapping of a leaf: `len` file blocks from `logical` on are stored at
/// `physical` on (`struct ext4_extent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First logical (file) block, `ee_block`.
    pub logical: u32,
    /// First physical block, 48 bits (`ee_start_hi:ee_start_lo`).
    pub physical: u64,
    /// Blocks, 1 to 32,768 (to 32,767 if unwritten).
    pub len: u16,
    /// Allocated but not written (reads return zeros): `ee_len > 32768` on
    /// disk.
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn end(&self) -> u64 {
        u64::from(self.logical) + u64::from(self.len)
    }

    /// One past the last physical block.
    pub fn physical_end(&self) -> u64 {
        self.physical + u64::from(self.len)
    }

    /// The longest extent of this kind: 32,767 blocks if unwritten, else
    /// 32,768.
    pub fn max_len(unwritten: bool) -> u16 {
        if unwritten {
            MAX_UNWRITTEN_LEN
        } else {
            MAX_INIT_LEN
        }
    }

    /// Whether `next` continues `self` (the kernel's
    /// `ext4_can_extents_be_merged`): logically and physically adjacent, the
    /// same kind (written or unwritten), and the sum no longer than
    /// [`Extent::max_len`].
    pub fn can_merge(&self, next: &Extent) -> bool {
        self.end() == u64::from(next.logical)
            && self.physical_end() == next.physical
            && self.unwritten == next.unwritten
            && u32::from(self.len) + u32::from(next.len)
                <= u32::from(Extent::max_len(self.unwritten))
    }

    /// The 12 on-disk bytes.
    pub fn to_bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        let len = if self.unwritten {
            self.len.wrapping_add(MAX_INIT_LEN)
        } else {
            self.len
        };
        put32(&mut b, 0, self.logical);
        put16(&mut b, 4, len);
        put16(&mut b, 6, (self.physical >> 32) as u16);
        put32(&mut b, 8, self.physical as u32);
        b
    }

    /// Parses and checks a leaf entry.
    ///
    /// # Errors
    /// [`Ext4Error::Corrupt`] for `ee_len` 0, `ee_start` 0, or a logical
    /// range past block 2^32.
    pub fn from_bytes(b: &[u8; 12]) -> Result<Extent, Ext4Error> {
        let logical = le32(b, 0);
        let raw_len = le16(b, 4);
        let physical = (u64::from(le16(b, 6)) << 32) | u64::from(le32(b, 8));
        let (len, unwritten) = if raw_len > MAX_INIT_LEN {
            (raw_len - MAX_INIT_LEN, true)
        } else {
            (raw_len, false)
        };
        if len == 0 {
            return Err(corrupt("ee_len", None, raw_len.into(), "an empty extent"));
        }
        if physical == 0 {
            return Err(corrupt("ee_start", None, 0, "an extent at block 0"));
        }
        let e = Extent {
            logical,
            physical,
            len,
            unwritten,
        };
        if e.end() > 1 << 32 {
            return Err(corrupt(
                "ee_block",
                None,
                logical.into(),
                "the extent runs past logical block 2^32",
            ));
        }
        if e.physical_end() > 1 << 48 {
            return Err(corrupt(
                "ee_start",
                None,
                physical,
                "the extent runs past physical block 2^48",
            ));
        }
        Ok(e)
    }
}

/// An extent node's header (`struct ext4_extent_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentHeader {
    /// `eh_entries`: entries in use.
    pub entries: u16,
    /// `eh_max`: room for entries.
    pub max: u16,
    /// `eh_depth`: 0 for a leaf, else the levels below.
    pub depth: u16,
    /// `eh_generation` (unused by ext4; kept as found).
    pub generation: u32,
}

impl ExtentHeader {
    /// Parses and checks the header at the start of `node`, a root
    /// (`node.len() == 60`) or a tree block (`node.len()` the block size).
    ///
    /// Checks (as e2fsprogs' `ext2fs_extent_header_verify`): the magic,
    /// `eh_max` no more than the entries that fit (4 in the root,
    /// (block size - 12) / 12 in a block) and at most 2 fewer, `eh_entries <=
    /// eh_max`, `eh_depth <= 5`.
    ///
    /// # Errors
    /// [`Ext4Error::Corrupt`] naming the field.
    pub fn parse(node: &[u8]) -> Result<ExtentHeader, Ext4Error> {
        if node.len() < HDR + ENTRY {
            return Err(corrupt(
                "eh_max",
                None,
                node.len() as u64,
                "no room for an extent node",
            ));
        }
        let magic = le16(node, 0);
        if magic != EXTENT_MAGIC {
            return Err(corrupt("eh_magic", None, magic.into(), "not 0xF30A"));
        }
        let h = ExtentHeader {
            entries: le16(node, 2),
            max: le16(node, 4),
            depth: le16(node, 6),
            generation: le32(node, 8),
        };
        let space = node_capacity(node.len());
        if h.max > space || h.max < space.saturating_sub(2) || h.max == 0 {
            return Err(corrupt(
                "eh_max",
                None,
                h.max.into(),
                "does not match the room in the node",
            ));
        }
        if h.entries > h.max {
            return Err(corrupt(
                "eh_entries",
                None,
                h.entries.into(),
                "more entries than eh_max",
            ));
        }
        if h.depth > MAX_DEPTH {
            return Err(corrupt("eh_depth", None, h.depth.into(), "deeper than 5"));
        }
        Ok(h)
    }

    fn write(&self, node: &mut [u8]) {
        put16(node, 0, EXTENT_MAGIC);
        put16(node, 2, self.entries);
        put16(node, 4, self.max);
        put16(node, 6, self.depth);
        put32(node, 8, self.generation);
    }
}

/// Entries that fit in a node of `len` bytes: 4 for the 60-byte root,
/// (block size - 12) / 12 for a block (the kernel's `ext4_ext_space_block`;
/// the 4-byte tail always fits after them).
pub fn node_capacity(len: usize) -> u16 {
    let n = len.saturating_sub(HDR) / ENTRY;
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The tail checksum of an extent block as it should be: raw CRC-32C from
/// `seed` (the inode's `seed_i`) over `block[0 .. 12 + 12 * eh_max]`
/// (the kernel's `ext4_extent_block_csum`). Uses the `eh_max` found in the
/// block; `None` if the block is too short for it and its tail.
pub fn block_checksum(seed: u32, block: &[u8]) -> Option<u32> {
    let end = HDR + ENTRY * usize::from(le16(block, 4));
    if end + 4 > block.len() {
        return None;
    }
    Some(crc32c::raw(seed, &block[..end]))
}

/// The tail checksum stored in an extent block, if the block has room for
/// one after its `eh_max` entries.
pub fn stored_checksum(block: &[u8]) -> Option<u32> {
    let end = HDR + ENTRY * usize::from(le16(block, 4));
    if end + 4 > block.len() {
        return None;
    }
    Some(le32(block, end))
}

/// Parses `block` as an extent tree block: checks the header
/// ([`ExtentHeader::parse`]) and, with a seed, the tail checksum.
///
/// # Errors
/// [`Ext4Error::Corrupt`] for a bad header; [`Ext4Error::BadChecksum`]
/// (`"extent block"`) for a wrong tail checksum.
pub fn verify_block(block: &[u8], seed: Option<u32>) -> Result<ExtentHeader, Ext4Error> {
    let h = ExtentHeader::parse(block)?;
    if let Some(seed) = seed {
        if block_checksum(seed, block) != stored_checksum(block) {
            return Err(Ext4Error::BadChecksum {
                what: "extent block",
                group: None,
            });
        }
    }
    Ok(h)
}

/// What an extent tree needs from the file system around it. On a real
/// image the calls go to the block cache and redo log and the block
/// allocator; [`ExtentStore::alloc_tree_block`] and
/// [`ExtentStore::free_tree_block`] must also account the block in the
/// inode's `i_blocks` if the caller does not do so from the returned counts.
pub trait ExtentStore {
    /// The file system's block size in bytes (1024 to 65536).
    fn block_size(&self) -> usize;
    /// Reads extent-tree block `block` (exactly [`ExtentStore::block_size`]
    /// bytes).
    ///
    /// # Errors
    /// Whatever the store fails with; the operation stops and writes nothing.
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error>;
    /// Writes a changed or new tree block (its tail checksum already set).
    ///
    /// # Errors
    /// Whatever the store fails with; the tree may then be half written
    /// (the caller's redo log covers that).
    fn write(&mut self, block: u64, data: Vec<u8>) -> Result<(), Ext4Error>;
    /// Allocates a block for a new index or leaf node, near `goal` (the
    /// kernel's `ext4_ext_new_meta_block`).
    ///
    /// # Errors
    /// No space, typically [`Ext4Error::NoSpace`]; the operation frees what
    /// it already allocated and changes nothing.
    fn alloc_tree_block(&mut self, goal: u64) -> Result<u64, Ext4Error>;
    /// Frees a tree block that is no longer part of the tree.
    ///
    /// # Errors
    /// Whatever the store fails with.
    fn free_tree_block(&mut self, block: u64) -> Result<(), Ext4Error>;
}

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
/// [`crc32c::splice`] over the header and entry range that changed (new
/// blocks by a full computation).
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

// -------------------------------------------------------------------------
// Read-only traversal
// -------------------------------------------------------------------------

/// A node's entries, for [`walk`].
enum Node<'a> {
    Leaf(&'a [Extent]),
    /// Read only by [`validate`] (feature `testing`).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    Index(&'a [(u32, u64)]),
}

/// Visits every node in order (parents before children, children left to
/// right), checking it; `visit` gets the block number (`None` for the root).
fn walk<S: ExtentStore + ?Sized>(
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

fn check_root(h: &ExtentHeader) -> Result<(), Ext4Error> {
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

fn leaf_entries(buf: &[u8], h: &ExtentHeader) -> Result<Vec<Extent>, Ext4Error> {
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

fn index_entries(
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

fn idx_child(b: &[u8; 12]) -> Result<u64, Ext4Error> {
    let child = (u64::from(le16(b, 8)) << 32) | u64::from(le32(b, 4));
    if child == 0 {
        return Err(corrupt("ei_leaf", None, 0, "an index pointing at block 0"));
    }
    Ok(child)
}

fn entry_bytes(buf: &[u8], i: usize) -> [u8; 12] {
    let mut b = [0u8; 12];
    let off = HDR + ENTRY * i;
    if let Some(s) = buf.get(off..off + ENTRY) {
        b.copy_from_slice(s);
    }
    b
}

fn index_bytes(key: u32, child: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    put32(&mut b, 0, key);
    put32(&mut b, 4, child as u32);
    put16(&mut b, 8, (child >> 32) as u16);
    b
}

/// Reads a tree block and checks its header and tail checksum.
fn read_node<S: ExtentStore + ?Sized>(
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
fn child_header(buf: &[u8], parent: &ExtentHeader) -> Result<ExtentHeader, Ext4Error> {
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

fn internal() -> Ext4Error {
    corrupt("eh_depth", None, 0, "internal: empty path")
}

// -------------------------------------------------------------------------
// Changes: a copy-on-write set of nodes, committed at the end
// -------------------------------------------------------------------------

/// A node: the root or a tree block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Id {
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
type Path = Vec<(Id, usize)>;

struct Tree<'a, S: ExtentStore + ?Sized> {
    store: &'a mut S,
    seed: Option<u32>,
    bs: usize,
    nodes: BTreeMap<Id, Buf>,
    /// Blocks allocated by this operation.
    allocated: Vec<u64>,
    /// Blocks to free at commit.
    freed: Vec<u64>,
    /// The first extent's goal for new tree blocks.
    goal: u64,
}

impl<'a, S: ExtentStore + ?Sized> Tree<'a, S> {
    fn new(root: &[u8; ROOT_SIZE], store: &'a mut S, seed: Option<u32>) -> Result<Self, Ext4Error> {
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

    fn extent(&self, id: Id, i: usize) -> Result<Extent, Ext4Error> {
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
    fn descend(&mut self, logical: u32) -> Result<Path, Ext4Error> {
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

    fn insert(&mut self, new: Extent) -> Result<bool, Ext4Error> {
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
                let mut path = path;
                let level = path.len() - 1;
                self.insert_entry(&mut path, level, p, new.to_bytes())?;
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

    /// Inserts raw entry `e` at position `pos` of the node at `path[level]`,
    /// splitting nodes and growing the root as needed.
    fn insert_entry(
        &mut self,
        path: &mut Path,
        level: usize,
        pos: usize,
        e: [u8; 12],
    ) -> Result<(), Ext4Error> {
        let (id, _) = path[level];
        let h = self.hdr(id)?;
        let n = usize::from(h.entries);
        if h.entries < h.max {
            return self.insert_raw(id, pos, e);
        }
        if level == 0 {
            // Grow: the root's entries move to a new block, and the root
            // becomes an index one level deeper.
            if h.depth >= MAX_DEPTH {
                return Err(invalid(
                    "logical",
                    u64::from(le32(&e, 0)),
                    "the extent tree is full at depth 5",
                ));
            }
            let b = self.new_block(h.depth)?;
            let child = Id::Block(b);
            let mut entries = Vec::with_capacity(n);
            for i in 0..n {
                entries.push(self.entry(id, i)?);
            }
            for (i, x) in entries.iter().enumerate() {
                self.set_entry(child, i, *x)?;
            }
            let mut ch = self.hdr(child)?;
            ch.entries = h.entries;
            self.set_hdr(child, ch)?;
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
            let old = path[0].1;
            path[0].1 = 0;
            path.insert(1, (child, old));
            self.insert_entry(path, 1, pos, e)?;
            // An entry put first in the child lowers its first key: the
            // root's one key follows (the child, a whole block, never
            // splits here, so it is still the root's first entry).
            let key = self.first_key(child)?;
            return self.set_entry(id, 0, index_bytes(key, b));
        }
        // Split: an append starts a new node with just `e`; otherwise the
        // upper half of the entries moves.
        let mid = if pos == n { n } else { (n / 2).max(1) };
        let b = self.new_block(h.depth)?;
        let m = Id::Block(b);
        let mut moved = Vec::with_capacity(n - mid);
        for i in mid..n {
            moved.push(self.entry(id, i)?);
        }
        for (i, x) in moved.iter().enumerate() {
            self.set_entry(m, i, *x)?;
        }
        let mut mh = self.hdr(m)?;
        mh.entries = (n - mid) as u16;
        self.set_hdr(m, mh)?;
        {
            let nb = self.buf_mut(id)?;
            let start = HDR + ENTRY * mid;
            let end = HDR + ENTRY * n;
            nb.data[start..end].fill(0);
            nb.mark(start..end);
        }
        let mut nh = h;
        nh.entries = mid as u16;
        self.set_hdr(id, nh)?;
        if pos < mid {
            self.insert_raw(id, pos, e)?;
        } else {
            self.insert_raw(m, pos - mid, e)?;
        }
        let key = self.first_key(m)?;
        let (_, ppos) = path[level - 1];
        self.insert_entry(path, level - 1, ppos + 1, index_bytes(key, b))
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

    /// Allocates and sets up an empty node of depth `depth`.
    fn new_block(&mut self, depth: u16) -> Result<u64, Ext4Error> {
        let b = self.store.alloc_tree_block(self.goal)?;
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

    fn truncate(&mut self, first: u32, freed: &mut Vec<(u64, u64)>) -> Result<(), Ext4Error> {
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
        let mut h = self.hdr(id)?;
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
            let b = self.buf_mut(id)?;
            let start = HDR + ENTRY * keep;
            let end = HDR + ENTRY * n;
            b.data[start..end].fill(0);
            b.mark(start..end);
            h.entries = keep as u16;
            self.set_hdr(id, h)?;
        }
        Ok(())
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
    fn commit(self, root: &mut [u8; ROOT_SIZE]) -> Result<(), Ext4Error> {
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
    fn abort(self) {
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
    fn encoding_round_trips() {
        for e in [
            ext(0, 1, 1),
            ext(7, 0xABCD_1234_5678, 32768),
            Extent {
                logical: 9,
                physical: 3,
                len: 32767,
                unwritten: true,
            },
        ] {
            assert_eq!(Extent::from_bytes(&e.to_bytes()).unwrap(), e);
        }
        let b = ext(0, 1, 1).to_bytes();
        let mut z = b;
        put16(&mut z, 4, 0);
        assert!(matches!(
            Extent::from_bytes(&z),
            Err(Ext4Error::Corrupt {
                field: "ee_len",
                ..
            })
        ));
    }

    #[test]
    fn headers_are_checked() {
        let mut root = [0u8; 60];
        init_root(&mut root);
        assert_eq!(depth(&root).unwrap(), 0);
        let mut bad = root;
        bad[0] = 0;
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_magic",
                ..
            })
        ));
        let mut bad = root;
        put16(&mut bad, 4, 5);
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_max",
                ..
            })
        ));
        let mut bad = root;
        put16(&mut bad, 2, 5);
        assert!(ExtentHeader::parse(&bad).is_err());
        let mut bad = root;
        put16(&mut bad, 6, 6);
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_depth",
                ..
            })
        ));
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
