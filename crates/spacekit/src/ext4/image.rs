//! [`Image`]: an ext4 image file and the metadata it holds in memory.

use std::boxed::Box;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::vec::Vec;

use super::device::Device;
use super::group::{Loaded, Meta};
use super::layout::FsInfo;
use super::mode::OpenMode;
use super::tx::undo::Undo;

/// Cached bitmaps of one group.
#[derive(Debug, Default)]
pub(super) struct GroupCache {
    pub(super) block: OnceCell<Loaded>,
    pub(super) inode: OnceCell<Loaded>,
}

/// An ext4 image, opened read-only or read-write on a [`Device`] (an image
/// file by default).
///
/// Changes ([`Image::alloc_blocks`], [`Image::free_blocks`],
/// [`Image::alloc_inode`], [`Image::free_inode`],
/// [`Image::set_inode_times`]) update the in-memory
/// metadata at once, checksums included, and reach the file only in
/// [`Image::flush`]. Dropping an image with unflushed changes discards them.
///
/// ```no_run
/// use spacekit::ext4::{Image, OpenMode};
///
/// let img = Image::open("fs.img", OpenMode::ReadOnly)?;
/// for g in 0..img.info().group_count {
///     println!("group {g}: free {:?}", img.free_extents(g)?);
/// }
/// let report = img.verify()?;
/// for m in &report.mismatches {
///     println!("{m}");
/// }
/// # Ok::<(), spacekit::ext4::Ext4Error>(())
/// ```
pub struct Image {
    pub(super) dev: Box<dyn Device>,
    pub(super) mode: OpenMode,
    pub(super) info: FsInfo,
    /// The primary superblock, 1024 bytes, kept byte-exact.
    pub(super) sb: Vec<u8>,
    /// The primary descriptor table, `desc_blocks` blocks.
    pub(super) gdt: Vec<u8>,
    /// Whether the superblock checksum matched at open (always true without
    /// metadata_csum).
    pub(super) sb_csum_ok: bool,
    /// The first group whose descriptor failed its checksum at open: every
    /// write is then refused (see `check_writable`).
    pub(super) bad_desc: Option<u32>,
    pub(super) groups: Vec<GroupCache>,
    /// Every metadata extent, sorted.
    pub(super) meta: Vec<Meta>,
    pub(super) dirty_sb: bool,
    /// Indexes of changed descriptor-table blocks.
    pub(super) dirty_gdt: BTreeSet<u32>,
    pub(super) dirty_block: BTreeSet<u32>,
    pub(super) dirty_inode: BTreeSet<u32>,
    /// The block cache's pending writes: whole blocks (inode-table blocks,
    /// and the extent and directory blocks of files) by block number,
    /// written by [`Image::flush`] after the bitmaps (see `blocks.rs`).
    pub(super) pending_blocks: BTreeMap<u64, Vec<u8>>,
    /// Blocks were freed since the last flush: the image on disk still
    /// gives them to their old owners, so file data must not be written to
    /// them before the flush (see `inode/data.rs`).
    pub(super) freed_since_flush: bool,
    /// Flushes that committed since the image was opened: a populate that
    /// sees none since it began knows every block it allocated is free in
    /// the committed image.
    pub(crate) flushes: u64,
    /// File data was written to the device since the last flush: the flush
    /// syncs it before the redo log commits the metadata pointing at it.
    pub(super) data_unsynced: bool,
    /// Bytes of file data written since the device was last asked to start
    /// writing them back (see `Image::note_data`).
    pub(super) data_since_writeback: u64,
    /// While an operation runs: what it changed, as it was before (see
    /// `undo.rs`).
    pub(super) undo: Option<std::boxed::Box<Undo>>,
    /// The last parent directory a path resolved to (`/a/b` and its inode),
    /// so creating file after file in one directory walks its path once.
    /// Dropped by anything that removes or moves an entry, or rolls back
    /// (see `namespace/lookup.rs`).
    pub(super) last_dir: Option<(Vec<u8>, u32)>,
    /// Where the next entry of the directory being filled goes (see
    /// `namespace/append.rs`).
    pub(super) append_at: Option<AppendAt>,
    /// The last record of pending directory blocks (htree leaves, mostly)
    /// an entry was last put into, by block; dropped with [`AppendAt`]'s
    /// place and when the block stops being pending (see
    /// `namespace/append.rs`).
    pub(super) leaf_last: BTreeMap<u64, usize>,
    /// Bytes of pending blocks before write-behind (`None`: never; see
    /// `tx/behind.rs`).
    pub(super) cache_budget: Option<usize>,
    /// The number of pending blocks at which write-behind looks next.
    pub(super) behind_next: usize,
    /// The pending blocks changed last, which write-behind keeps.
    pub(super) recent: Recent,
    /// A flush wrote its redo log and has not removed it (it failed after):
    /// the device may hold part of its records, so it is no committed image
    /// write-behind may reason about until a flush completes.
    pub(super) log_waiting: bool,
    /// The committed image's descriptors and block bitmaps as read from
    /// the device, kept until the next flush writes them (see
    /// `tx/behind.rs`).
    pub(super) committed: Option<Box<Committed>>,
}

/// The committed image's descriptor table and the block bitmaps looked at
/// so far, as the device holds them: they change only when a flush writes
/// them, which drops this (see `tx/behind.rs`).
#[derive(Debug, Default)]
pub(crate) struct Committed {
    pub(super) gdt: Vec<u8>,
    pub(super) maps: BTreeMap<u32, Vec<u8>>,
}

/// The geometry, mode and what is waiting to be flushed (not the cached
/// bitmaps).
impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("device", &self.dev)
            .field("mode", &self.mode)
            .field("info", &self.info)
            .field("dirty_superblock", &self.dirty_sb)
            .field("dirty_gdt_blocks", &self.dirty_gdt)
            .field("dirty_block_bitmaps", &self.dirty_block)
            .field("dirty_inode_bitmaps", &self.dirty_inode)
            .field(
                "pending_blocks",
                &self.pending_blocks.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The last [`Recent::LEN`] distinct blocks the block cache changed.
/// Write-behind keeps these pending: they are the blocks still being
/// filled (the inode-table block of the inodes being made, a directory's
/// last block and its inode), which would otherwise go out and be read
/// back by the next change (a 10,000-file populate read some such blocks
/// over 100 times each).
#[derive(Clone, Copy, Debug)]
pub(super) struct Recent {
    blocks: [u64; Recent::LEN],
    next: usize,
}

impl Recent {
    /// Blocks remembered.
    pub(super) const LEN: usize = 16;

    /// Notes a change to `block`.
    #[inline]
    pub(super) fn touch(&mut self, block: u64) {
        if !self.contains(block) {
            self.blocks[self.next] = block;
            self.next = (self.next + 1) % Recent::LEN;
        }
    }

    /// Whether `block` is among the last blocks changed.
    #[inline]
    pub(super) fn contains(&self, block: u64) -> bool {
        self.blocks.contains(&block)
    }
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            blocks: [u64::MAX; Recent::LEN],
            next: 0,
        }
    }
}

/// Where the next entry of directory `dir` goes, when it is being filled
/// in order (see `namespace/append.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AppendAt {
    /// The directory's inode.
    pub(crate) dir: u32,
    /// Its last block and that block's last record; `None` for a directory
    /// whose entries go elsewhere (an htree): the next entry goes the
    /// ordinary way without looking for a place again.
    pub(crate) at: Option<(u64, usize)>,
}
