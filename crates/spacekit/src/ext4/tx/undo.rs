//! Undo for one file operation ([`super::Image::create`],
//! [`super::Image::fallocate`], [`super::Image::truncate`],
//! [`super::Image::unlink`]): the in-memory state as it was before the
//! operation's first change to each piece, so a failure in the middle (an
//! I/O error reading the next group's bitmap, a corrupt block found late)
//! puts everything back and the operation changes nothing, like a journal
//! handle that is never committed.
//!
//! The superblock (1 KiB) and the sets of dirty metadata are copied when
//! the operation starts; descriptors, bitmaps and cached blocks are copied
//! on their first change only (copy on write), so an operation pays for
//! what it touches, not for the size of the file system.

use std::collections::{BTreeMap, BTreeSet};
use std::vec::Vec;

use crate::ext4::group::Loaded;

/// What one operation changed, as it was before.
#[derive(Debug, Default)]
pub(crate) struct Undo {
    /// The superblock.
    pub(crate) sb: Vec<u8>,
    pub(crate) dirty_sb: bool,
    pub(crate) dirty_gdt: BTreeSet<u32>,
    pub(crate) dirty_block: BTreeSet<u32>,
    pub(crate) dirty_inode: BTreeSet<u32>,
    /// Nothing was pending when the operation began: the committed image
    /// is the one a roll-back returns to (see `behind.rs`).
    pub(crate) clean_start: bool,
    /// Descriptor bytes by group.
    pub(crate) descs: BTreeMap<u32, Vec<u8>>,
    /// Bitmaps by (group, inode bitmap?): `None` when it was not loaded.
    pub(crate) bitmaps: BTreeMap<(u32, bool), Option<Loaded>>,
    /// The block cache by block: `None` when no version was pending.
    pub(crate) blocks: BTreeMap<u64, Option<Vec<u8>>>,
}

impl Undo {
    /// Keeps descriptor `g`'s bytes unless already kept.
    pub(crate) fn keep_desc(&mut self, g: u32, raw: &[u8]) {
        self.descs.entry(g).or_insert_with(|| raw.to_vec());
    }

    /// Keeps a bitmap's state unless already kept.
    pub(crate) fn keep_bitmap(&mut self, g: u32, inode: bool, l: Option<&Loaded>) {
        self.bitmaps.entry((g, inode)).or_insert_with(|| l.cloned());
    }

    /// Keeps a cached block's pending version unless already kept.
    pub(crate) fn keep_block(&mut self, block: u64, pending: Option<&Vec<u8>>) {
        self.blocks.entry(block).or_insert_with(|| pending.cloned());
    }
}
