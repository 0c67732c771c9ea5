//! What [`Image::stat`](super::Image::stat) reports about an inode, and the
//! inode numbers and flags a caller names.

use std::vec::Vec;

use super::inode::extent::Extent;

/// `EXT4_EXTENTS_FL`.
pub const EXTENTS_FL: u32 = 0x8_0000;
/// `EXT4_CASEFOLD_FL`: the directory's names compare and hash casefolded.
pub const CASEFOLD_FL: u32 = 0x4000_0000;
/// The root directory.
pub const ROOT_INO: u32 = 2;

/// What [`Image::stat`](super::Image::stat) reports about an inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The inode number.
    pub ino: u32,
    /// `i_mode` (type and permissions).
    pub mode: u16,
    /// `i_size`.
    pub size: u64,
    /// `i_blocks` in 512-byte units (debugfs's "Blockcount").
    pub blocks: u64,
    /// `i_flags`.
    pub flags: u32,
    /// `i_links_count`.
    pub links: u16,
    /// The extent tree's depth (0 without extents).
    pub depth: u16,
    /// Every node entry of the extent tree, as `debugfs -R "ex"` lists
    /// them (index entries and leaves, depth first).
    pub tree: Vec<TreeEntry>,
    /// The leaf extents in logical order.
    pub extents: Vec<Extent>,
}

/// One line of `debugfs`'s `ex` listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeEntry {
    /// The node's level (0: the root) and the tree's depth.
    pub level: u16,
    /// The tree's depth.
    pub depth: u16,
    /// The entry's index in its node (from 0) and the node's entry count.
    pub index: u16,
    /// The node's entries.
    pub entries: u16,
    /// First logical block.
    pub logical: u32,
    /// Last logical block (inclusive). For an index entry as libext2fs
    /// (and so `debugfs ex`) reports it: up to the next entry's key minus
    /// one, or the parent's end (for the root, `i_size` in blocks), the
    /// length taken mod 2^32.
    pub logical_end: u64,
    /// The child block (index) or first physical block (leaf).
    pub physical: u64,
    /// Blocks mapped (leaf), or the index entry's length as libext2fs
    /// reports it (mod 2^32).
    pub len: u32,
    /// Leaf entry, unwritten.
    pub unwritten: bool,
    /// Whether this is an index entry.
    pub is_index: bool,
}
