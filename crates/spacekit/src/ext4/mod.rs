//! ext4 block groups on real images: read and check the superblock and group
//! descriptors, verify every checksum as e2fsprogs computes it, list free
//! space, and allocate and free blocks and inodes with full accounting,
//! written back crash-safely through a redo log.
//!
//! (Feature `ext4`, needs `std`.)
//!
//! # What is supported
//!
//! Block sizes from 1 KiB to 64 KiB; 32- and 64-byte (or larger) group
//! descriptors (`64bit`); `flex_bg`; `sparse_super` and `sparse_super2`;
//! `metadata_csum` with or without `metadata_csum_seed`; `gdt_csum`
//! (`uninit_bg`) without `metadata_csum`, whose descriptor checksum is
//! e2fsprogs' CRC-16; file systems with no checksums at all (the `*_UNINIT`
//! flags are then ignored, as e2fsprogs does); `BLOCK_UNINIT` and
//! `INODE_UNINIT` groups; a journal that needs no recovery.
//!
//! Refused with [`Ext4Error::Unsupported`]: `bigalloc`, `meta_bg`,
//! `needs_recovery` (a journal to replay first: run e2fsck or mount the file
//! system), `journal_dev`, `compression`; for read-write opens also `mmp`,
//! the `read-only` feature, `snapshot` and `quota` (the quota files' usage
//! is not kept up to date, so writes are refused before any change). Unknown `incompat` bits are
//! refused in both modes and unknown `ro_compat` bits when writing
//! ([`Ext4Error::UnknownFeatures`]). A corrupt superblock or descriptor gives
//! [`Ext4Error::Corrupt`] naming the field. An image that gives an error when
//! opened is never written.
//!
//! # Layers
//!
//! Each layer is a folder and can be tested alone:
//!
//! * `device/`: where the bytes live: the [`Device`] trait, [`FileDevice`]
//!   (positioned reads and writes, the redo log beside the image,
//!   `copy_file_range` and write-back hints) and [`MemDevice`]; tests put a
//!   fault-injecting device (read and write errors at the Nth step or at a
//!   given block, torn writes) in between;
//! * `tx/`: the transaction: the block cache, the undo of a failed
//!   operation, the redo log and the flush (all changes since the last
//!   flush commit together, with three syncs);
//! * `alloc/`: one allocator for data and metadata blocks and inodes, on
//!   each group's free-space index, from ext4's goals;
//! * `inode/`: the inode table, file contents and copies, extent trees,
//!   xattrs, a file's space (fallocate, truncate);
//! * `namespace/`: path lookup, directories (linear records, checksum tail,
//!   htree index, name hashes), entries, links, every kind of inode.
//!
//! Below them: the on-disk layout (`layout.rs`, `raw.rs`), groups and
//! bitmaps (`group.rs`), checks (`verify.rs`).
//!
//! # Files
//!
//! spacekit is an offline file-system library whose results e2fsck
//! accepts: [`Image::lookup`], [`Image::read_dir`], [`Image::stat`],
//! [`Image::create`], [`Image::fallocate`] (unwritten extents from the goal
//! ext4 uses), [`Image::truncate`] and [`Image::unlink`], over extent trees
//! and linear or htree directory blocks it reads and writes record by
//! record; file contents with [`Image::write`], [`Image::read`] and
//! [`File`] (see `inode/data.rs` for where the bytes go and why that is
//! crash-safe); every kind of inode with [`Image::mkdir`],
//! [`Image::rmdir`], [`Image::symlink`], [`Image::link`],
//! [`Image::rename`], [`Image::mknod`], [`Image::chmod`],
//! [`Image::chown`] and [`Image::set_times`]. Blocks taken
//! with [`Image::alloc_blocks`] directly belong to no file: e2fsck reports
//! them as a leak. [`Image::export_tree`] copies a tree out to the host
//! as debugfs's `rdump` does, with every kind of inode, owners, modes,
//! nanosecond times, extended attributes and hard links, and
//! [`Image::list`] gives what `ls -l` shows of a directory.
//!
//! # Extended attributes
//!
//! [`Image::xattrs`], [`Image::get_xattr`], [`Image::set_xattr`] and
//! [`Image::remove_xattr`] read and write them in the inode (after
//! `i_extra_isize`) and in the external xattr block (`i_file_acl`), as the
//! kernel and e2fsprogs lay them out; POSIX ACLs are taken and given in the
//! form `getxattr(2)` uses. [`Image::unlink`] releases a file's xattr
//! block.
//!
//! # Devices
//!
//! An image lives on a [`Device`]: [`Image::open`] opens a file
//! ([`FileDevice`]: positioned reads and writes, the redo log beside it);
//! [`Image::open_on`] takes any device, such as a [`MemDevice`] (an image
//! in memory) or one of the caller's. Tests inject I/O faults with a device
//! of their own; the image itself has no fault-injection state.
//!
//! # Reading
//!
//! [`Image::open`] reads the superblock and the whole descriptor table and
//! checks them. Bitmaps are loaded **lazily**: a group's block or inode
//! bitmap is read (or, for an uninitialised group, computed) the first time
//! a call needs it, and then cached for the life of the [`Image`]; calls that
//! look at every group ([`Image::verify`], [`Image::free_histogram`]) load all
//! of them. Nothing is written except by [`Image::flush`] (and by
//! [`Image::open`] replaying a redo log).
//!
//! # Allocation
//!
//! A block allocation is a first fit from the goal (the group and bit of the
//! goal block, wrapping once through the groups), aligned on absolute block
//! numbers, inside one group. Each group's search goes through a
//! [`crate::freespace::FreeSpaceIndex`] over the group's blocks, built on
//! the group's first search and owned by its block bitmap's
//! [`crate::checked_bitmap::CheckedBitmap`], which keeps it in step with
//! every change, so a search costs O(log n) instead of a scan of the bitmap
//! (seed 001's per-group free-space tree).
//!
//! Every block of a file (its data, its extent-tree blocks, a directory's
//! blocks, the xattr block) comes from one policy, through the same
//! indexes: the free run at or after the file's goal, as ext4 extends a
//! file (the goal: just past the file's last block, else the first group
//! of the inode's flex group, as e2fsprogs' `ext2fs_find_inode_goal`); a
//! new inode comes from its parent directory's group.
//!
//! # Checksums
//!
//! * superblock: raw CRC-32C from `!0` over its first 0x3FC bytes;
//! * descriptor: low 16 bits of raw CRC-32C from the checksum seed over the
//!   little-endian group number and the descriptor with `bg_checksum` zeroed;
//! * block bitmap: raw CRC-32C from the seed over `s_clusters_per_group / 8`
//!   bytes, stored as 32 bits with 64-byte descriptors and as its low 16 bits
//!   with 32-byte ones; inode bitmap likewise over `s_inodes_per_group / 8`.
//!
//! The bitmap checksums are kept current by
//! [`crate::checked_bitmap::CheckedBitmap`] in O(log n) per change, and
//! the superblock's by [`crate::crc32c::splice`] over the changed counts.
//! Uninitialised groups store bitmap checksum 0, which [`Image::verify`] does
//! not report.
//!
//! # Crash safety
//!
//! [`Image::flush`] writes only the metadata blocks that changed (the
//! superblock, the descriptor-table blocks holding changed descriptors, the
//! changed bitmaps), and first records them in a redo log beside the image,
//! `<image>.spacekit-redo` (see [`Image::redo_log_path`]): it writes and
//! fdatasyncs the log and fsyncs its directory, writes the blocks in place,
//! fdatasyncs the image and removes the log (three syncs; the removal is
//! not synced). A read-write [`Image::open`] replays a complete log before
//! reading anything and discards an incomplete one (the image was not
//! touched under it) and a stale one: a finished flush's log that a power
//! failure brought back after another tool changed one of its blocks (the
//! log keeps a CRC of every sector as it was before the flush, and is
//! replayed only while each sector holds its old or its new bytes). A
//! read-only open refuses an image with a complete, current log pending
//! ([`Ext4Error::PendingRedoLog`]) and ignores the others. Backup
//! superblocks and descriptor tables are not rewritten (neither the kernel nor
//! debugfs does so for an allocation).
//!
//! # Example
//!
//! ```no_run
//! use spacekit::ext4::{AllocRequest, Image, OpenMode};
//!
//! let mut img = Image::open("fs.img", OpenMode::ReadWrite)?;
//! assert!(img.verify()?.is_clean());
//! // 64 blocks in a row, starting on a multiple of 16, near block 5000.
//! let first = img.alloc_blocks(AllocRequest { goal: Some(5000), len: 64, align: 16 })?;
//! assert_eq!(first % 16, 0);
//! let ino = img.alloc_inode(None, false)?;
//! img.flush()?;
//! img.free_blocks(first, 64)?;
//! img.free_inode(ino, false)?;
//! img.flush()?;
//! # Ok::<(), spacekit::ext4::Ext4Error>(())
//! ```

mod alloc;
mod device;
mod error;
mod export;
mod flags;
mod group;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod hooks;
mod image;
mod inode;
mod layout;
mod mode;
mod namespace;
mod populate;
pub mod raw;
mod stat;
mod tx;
mod verify;

use std::boxed::Box;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
#[cfg(any(test, feature = "testing"))]
use std::format;
use std::path::{Path, PathBuf};
#[cfg(any(test, feature = "testing"))]
use std::string::String;
use std::vec;
use std::vec::Vec;

use crate::bitmap::Bits;
use crate::checked_bitmap::CheckedBitmap;

pub use device::{Busy, Device, FileDevice, MemDevice};
pub use error::Ext4Error;
pub use export::{ExportOptions, ExportReport, ListEntry, Skip, Skipped};
pub use extent::Extent;
pub use image::Image;
pub use inode::copy::{COPY_CHUNK, KERNEL_CHUNK, READ_PIECE};
pub use inode::data::File;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub use inode::extent;
#[cfg(not(any(test, feature = "testing")))]
use inode::extent;
pub use inode::{Inode, InodeMismatch, InodeTimes};
pub use layout::{ChecksumKind, FsInfo, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
pub use mode::OpenMode;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub use namespace::dir;
pub use namespace::{FileTimes, NodeKind, Timestamp};
pub use populate::{Contents, Entry, EntryKind, Meta, Populate, PopulateOptions, PopulateReport};
pub use stat::{Stat, TreeEntry, CASEFOLD_FL, EXTENTS_FL, ROOT_INO};
pub use tx::behind::CACHE_BUDGET;
pub use verify::{Check, FreeHistogram, GroupChecksums, HistogramBucket, Mismatch, VerifyReport};

use error::{corrupt, invalid, io};
use group::{desc_at, Loaded};
use image::GroupCache;
use layout::{Desc, DescMut, SB_OFFSET, SB_SIZE};

/// A block allocation request for [`Image::alloc_blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    /// Where to start looking: the search begins in this block's group at
    /// this block. `None` starts at the first block of group 0.
    pub goal: Option<u64>,
    /// How many blocks, all in one group (1 to `s_blocks_per_group`).
    pub len: u32,
    /// The first block number must be a multiple of this (a power of two; 1
    /// for none). Alignment is on absolute block numbers, not offsets in the
    /// group.
    pub align: u32,
}

/// One group's descriptor as it stands (including changes not yet flushed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group number.
    pub group: u32,
    /// Its first block.
    pub first_block: u64,
    /// Its last block (inclusive).
    pub last_block: u64,
    /// Whether it holds a superblock copy and descriptor table.
    pub has_super: bool,
    /// `bg_block_bitmap`.
    pub block_bitmap: u64,
    /// `bg_inode_bitmap`.
    pub inode_bitmap: u64,
    /// `bg_inode_table`.
    pub inode_table: u64,
    /// `bg_free_blocks_count`.
    pub free_blocks: u32,
    /// `bg_free_inodes_count`.
    pub free_inodes: u32,
    /// `bg_used_dirs_count`.
    pub used_dirs: u32,
    /// `bg_itable_unused`.
    pub itable_unused: u32,
    /// `bg_flags` ([`BG_INODE_UNINIT`], [`BG_BLOCK_UNINIT`],
    /// [`BG_INODE_ZEROED`]).
    pub flags: u16,
    /// The stored block bitmap checksum (16 bits with 32-byte descriptors).
    pub block_bitmap_csum: u32,
    /// The stored inode bitmap checksum.
    pub inode_bitmap_csum: u32,
    /// The stored descriptor checksum.
    pub checksum: u16,
}

/// Which of a group's two bitmaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Block,
    Inode,
}

impl Image {
    /// Opens the ext4 image at `path`, checks its superblock and descriptor
    /// table, and (read-write) first replays a pending redo log (nothing
    /// else is written). One writer at a time: the open locks the file (see
    /// [`FileDevice::open`]; in one process, keep one read-write handle).
    ///
    /// # Errors
    /// [`Ext4Error::Io`] if the file cannot be opened or read;
    /// [`Ext4Error::Corrupt`] naming the field for a bad magic, a block size
    /// above 64 KiB, counts out of range, a descriptor pointing outside the
    /// file system (or its group, without flex_bg) or overlapping other
    /// metadata, an image file shorter than the file system;
    /// [`Ext4Error::Unsupported`] / [`Ext4Error::UnknownFeatures`] (see the
    /// module documentation); [`Ext4Error::Busy`] if another program holds
    /// it; [`Ext4Error::PendingRedoLog`] for a read-only open with a complete
    /// log pending; [`Ext4Error::RedoLogMismatch`] for another's log.
    pub fn open(path: impl AsRef<Path>, mode: OpenMode) -> Result<Image, Ext4Error> {
        let (p, w) = (path.as_ref(), mode == OpenMode::ReadWrite);
        let dev = FileDevice::open(p, w).map_err(|e| error::opening(p, e))?;
        Image::open_on(Box::new(dev), mode)
    }

    /// Opens the ext4 image on `dev` (an in-memory image, or a device of
    /// the caller's), as [`Image::open`] does a file: a pending redo log on
    /// the device is replayed (read-write) or refused (read-only).
    ///
    /// ```
    /// use spacekit::ext4::{Image, MemDevice, OpenMode};
    ///
    /// // Not an ext4 image: refused, with the field that is wrong.
    /// let e = Image::open_on(Box::new(MemDevice::new(vec![0; 8192])), OpenMode::ReadOnly)
    ///     .unwrap_err();
    /// assert!(e.to_string().contains("s_magic"), "{e}");
    /// ```
    ///
    /// # Errors
    /// As [`Image::open`]; [`Ext4Error::InvalidArgument`] for a read-write
    /// open of a device that refuses writes.
    pub fn open_on(mut dev: Box<dyn Device>, mode: OpenMode) -> Result<Image, Ext4Error> {
        if mode == OpenMode::ReadWrite && !dev.writable() {
            return Err(invalid(
                "mode",
                1,
                "a read-write open of a read-only device",
            ));
        }
        match mode {
            OpenMode::ReadWrite => tx::redo::replay(&mut *dev)?,
            OpenMode::ReadOnly => {
                if tx::redo::pending(&*dev)? {
                    return Err(Ext4Error::PendingRedoLog {
                        path: dev.log_name(),
                    });
                }
            }
        }
        let image_len = dev.len().map_err(io("size image"))?;
        if image_len < SB_OFFSET + SB_SIZE as u64 {
            return Err(corrupt(
                "s_magic",
                None,
                image_len,
                "the image file ends before the superblock",
            ));
        }
        let mut sb = vec![0u8; SB_SIZE];
        dev.read_at(SB_OFFSET, &mut sb)
            .map_err(io("read superblock"))?;
        let info = layout::parse_superblock(&sb, image_len, mode)?;
        let bs = u64::from(info.block_size);
        let mut gdt = vec![0u8; info.desc_blocks as usize * info.block_size as usize];
        dev.read_at(info.gdt_start() * bs, &mut gdt)
            .map_err(io("read group descriptors"))?;
        let meta = group::build_metadata(&info, &gdt)?;
        let sb_csum_ok = info.checksums != ChecksumKind::MetadataCsum
            || layout::superblock_checksum(&sb) == layout::le32(&sb, layout::sb::CHECKSUM);
        let bad_desc = (0..info.group_count).find(|&g| {
            let d = desc_at(&info, &gdt, g);
            info.checksums != ChecksumKind::None
                && layout::desc_checksum(&info, g, d.raw) != d.checksum()
        });
        let groups = (0..info.group_count)
            .map(|_| GroupCache::default())
            .collect();
        let mut img = Image {
            dev,
            mode,
            info,
            sb,
            gdt,
            sb_csum_ok,
            bad_desc,
            groups,
            meta,
            dirty_sb: false,
            dirty_gdt: BTreeSet::new(),
            dirty_block: BTreeSet::new(),
            dirty_inode: BTreeSet::new(),
            pending_blocks: BTreeMap::new(),
            freed_since_flush: false,
            flushes: 0,
            data_unsynced: false,
            data_since_writeback: 0,
            undo: None,
            last_dir: None,
            append_at: None,
            leaf_last: BTreeMap::new(),
            cache_budget: None,
            behind_next: usize::MAX,
            recent: Default::default(),
            log_waiting: false,
            committed: None,
        };
        img.set_cache_budget(Some(tx::behind::CACHE_BUDGET));
        Ok(img)
    }

    /// The redo log path for the image at `image` (symlinks followed).
    pub fn redo_log_path(image: impl AsRef<Path>) -> PathBuf {
        device::log_path(image.as_ref())
    }

    /// The geometry and features read from the superblock.
    pub fn info(&self) -> &FsInfo {
        &self.info
    }

    /// The mode the image was opened in.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    /// `s_free_blocks_count`, as it stands.
    pub fn free_blocks_count(&self) -> u64 {
        let mut v = u64::from(layout::le32(&self.sb, layout::sb::FREE_BLOCKS_LO));
        if self.info.has_64bit {
            v |= u64::from(layout::le32(&self.sb, layout::sb::FREE_BLOCKS_HI)) << 32;
        }
        v
    }

    /// `s_free_inodes_count`, as it stands.
    pub fn free_inodes_count(&self) -> u32 {
        layout::le32(&self.sb, layout::sb::FREE_INODES)
    }

    /// The 1024 bytes of the primary superblock, as they stand.
    pub fn superblock_bytes(&self) -> &[u8] {
        &self.sb
    }

    /// Group `group`'s descriptor, as it stands.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] past the last group.
    pub fn group(&self, group: u32) -> Result<GroupInfo, Ext4Error> {
        self.check_group(group)?;
        let d = self.desc(group);
        let first = self.info.group_first_block(group);
        Ok(GroupInfo {
            group,
            first_block: first,
            last_block: first + u64::from(self.info.blocks_in_group(group)) - 1,
            has_super: self.info.has_super(group),
            block_bitmap: d.block_bitmap(),
            inode_bitmap: d.inode_bitmap(),
            inode_table: d.inode_table(),
            free_blocks: d.free_blocks(),
            free_inodes: d.free_inodes(),
            used_dirs: d.used_dirs(),
            itable_unused: d.itable_unused(),
            flags: d.flags(),
            block_bitmap_csum: d.block_bitmap_csum(),
            inode_bitmap_csum: d.inode_bitmap_csum(),
            checksum: d.checksum(),
        })
    }

    /// Free blocks of group `group` as inclusive `(first, last)` block
    /// ranges, in order — dumpe2fs's "Free blocks:" list. For a BLOCK_UNINIT
    /// group they come from its effective bitmap, as dumpe2fs's do.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] past the last group; [`Ext4Error::Io`]
    /// if the bitmap cannot be read.
    pub fn free_extents(&self, group: u32) -> Result<Vec<(u64, u64)>, Ext4Error> {
        self.check_group(group)?;
        let l = self.block_bitmap(group)?;
        let first = self.info.group_first_block(group);
        let n = self.info.blocks_in_group(group) as usize;
        let view = l.view(n)?;
        Ok(view
            .clear_runs(0)
            .map(|r| (first + r.start as u64, first + r.end as u64 - 1))
            .collect())
    }

    /// Whether `block` is marked in use in its group's (effective) bitmap.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for a block outside the groups;
    /// [`Ext4Error::Io`] if the bitmap cannot be read.
    pub fn block_in_use(&self, block: u64) -> Result<bool, Ext4Error> {
        let (g, bit) = self.info.group_of_block(block).ok_or(invalid(
            "block",
            block,
            "outside the file system",
        ))?;
        let l = self.block_bitmap(g)?;
        Ok(l.bits().get(bit as usize).unwrap_or(true))
    }

    /// Whether inode `ino` is marked in use in its group's (effective)
    /// inode bitmap.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for 0 or past `s_inodes_count`;
    /// [`Ext4Error::Io`] if the bitmap cannot be read.
    pub fn inode_in_use(&self, ino: u32) -> Result<bool, Ext4Error> {
        let (g, bit) = self.info.group_of_inode(ino).ok_or(invalid(
            "ino",
            ino.into(),
            "outside the file system",
        ))?;
        let l = self.inode_bitmap(g)?;
        Ok(l.bits().get(bit as usize).unwrap_or(true))
    }

    /// The device under the image.
    pub fn device(&self) -> &dyn Device {
        &*self.dev
    }

    /// Closes the image and returns its device. Unflushed changes are
    /// discarded, as on drop.
    pub fn into_device(self) -> Box<dyn Device> {
        self.dev
    }

    /// Checks the invariants of the in-memory state: every cached bitmap's
    /// kept checksum equals a fresh computation, and its free-space index
    /// (if built) one rebuilt from its bits; every changed group's stored
    /// bitmap checksums and descriptor checksum are current; a changed
    /// superblock's checksum is current; every pending block of the block
    /// cache is one block long, inside the file system, and overlaps no
    /// other record of the flush nor any metadata but an inode table. For
    /// tests, through `spacekit::testing::Validate`.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.validate_pending_blocks()?;
        let csum = self.info.checksums == ChecksumKind::MetadataCsum;
        if self.dirty_sb
            && csum
            && layout::superblock_checksum(&self.sb) != layout::le32(&self.sb, layout::sb::CHECKSUM)
        {
            return Err("superblock checksum is stale".into());
        }
        for (g, cache) in self.groups.iter().enumerate() {
            let g = g as u32;
            for (what, l) in [("block", cache.block.get()), ("inode", cache.inode.get())] {
                if let Some(l) = l {
                    l.validate()
                        .map_err(|e| format!("group {g}: {what} bitmap: {e}"))?;
                }
            }
            let d = self.desc(g);
            let block_gdt = self.gdt_block_of(g);
            // An image with a descriptor that failed its checksum at open
            // is never changed (`check_writable` refuses every write).
            if !self.dirty_gdt.contains(&block_gdt) {
                continue;
            }
            if self.info.checksums != ChecksumKind::None
                && layout::desc_checksum(&self.info, g, d.raw) != d.checksum()
            {
                return Err(format!("group {g}: descriptor checksum is stale"));
            }
            if csum {
                let mask = self.csum_mask();
                if let Some(l) = cache.block.get() {
                    if d.flags() & BG_BLOCK_UNINIT == 0
                        && l.csum_ok()
                        && d.block_bitmap_csum() != l.checksum() & mask
                    {
                        return Err(format!("group {g}: stored block bitmap checksum is stale"));
                    }
                }
                if let Some(l) = cache.inode.get() {
                    if d.flags() & BG_INODE_UNINIT == 0
                        && l.csum_ok()
                        && d.inode_bitmap_csum() != l.checksum() & mask
                    {
                        return Err(format!("group {g}: stored inode bitmap checksum is stale"));
                    }
                }
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------
    // Internals
    // ---------------------------------------------------------------------

    fn check_group(&self, group: u32) -> Result<(), Ext4Error> {
        if group < self.info.group_count {
            Ok(())
        } else {
            Err(invalid("group", group.into(), "past the last group"))
        }
    }

    fn desc(&self, g: u32) -> Desc<'_> {
        desc_at(&self.info, &self.gdt, g)
    }

    fn desc_mut(&mut self, g: u32) -> DescMut<'_> {
        let size = self.info.desc_size as usize;
        let off = g as usize * size;
        if let (Some(u), Some(raw)) = (self.undo.as_mut(), self.gdt.get(off..off + size)) {
            u.keep_desc(g, raw);
        }
        DescMut {
            raw: self.gdt.get_mut(off..off + size).unwrap_or(&mut []),
            wide: size >= 64,
        }
    }

    /// Index in the descriptor table of the block holding group `g`'s
    /// descriptor.
    fn gdt_block_of(&self, g: u32) -> u32 {
        (u64::from(g) * u64::from(self.info.desc_size) / u64::from(self.info.block_size)) as u32
    }

    /// Which bits of a bitmap checksum the descriptor keeps.
    fn csum_mask(&self) -> u32 {
        if self.info.desc_size >= 64 {
            !0
        } else {
            0xFFFF
        }
    }

    fn block_uninit(&self, g: u32) -> bool {
        self.info.uninit_flags() && self.desc(g).flags() & BG_BLOCK_UNINIT != 0
    }

    fn inode_uninit(&self, g: u32) -> bool {
        self.info.uninit_flags() && self.desc(g).flags() & BG_INODE_UNINIT != 0
    }

    /// Group `g`'s block bitmap, loaded on first use.
    fn block_bitmap(&self, g: u32) -> Result<&Loaded, Ext4Error> {
        let cell = &self.groups[g as usize].block;
        if let Some(l) = cell.get() {
            return Ok(l);
        }
        let l = self.load_block_bitmap(g)?;
        Ok(cell.get_or_init(|| l))
    }

    /// Group `g`'s inode bitmap, loaded on first use.
    fn inode_bitmap(&self, g: u32) -> Result<&Loaded, Ext4Error> {
        let cell = &self.groups[g as usize].inode;
        if let Some(l) = cell.get() {
            return Ok(l);
        }
        let l = self.load_inode_bitmap(g)?;
        Ok(cell.get_or_init(|| l))
    }

    fn load_block_bitmap(&self, g: u32) -> Result<Loaded, Ext4Error> {
        let csum_len = self.info.block_csum_len();
        let seed = self.info.checksum_seed;
        if self.block_uninit(g) {
            let bytes = group::uninit_block_bitmap(&self.info, &self.meta, g)?.to_le_bytes();
            let map = CheckedBitmap::from_bytes(&bytes, seed, csum_len)
                .map_err(|_| corrupt("s_blocks_per_group", None, 0, "bitmap too large"))?;
            return Ok(Loaded::new(map, true));
        }
        let stored = self.desc(g).block_bitmap_csum();
        self.read_bitmap(
            self.desc(g).block_bitmap(),
            csum_len,
            stored,
            "read block bitmap",
        )
    }

    fn load_inode_bitmap(&self, g: u32) -> Result<Loaded, Ext4Error> {
        let csum_len = self.info.inode_csum_len();
        let seed = self.info.checksum_seed;
        if self.inode_uninit(g) {
            let bytes = group::uninit_inode_bitmap(&self.info)?.to_le_bytes();
            let map = CheckedBitmap::from_bytes(&bytes, seed, csum_len)
                .map_err(|_| corrupt("s_inodes_per_group", None, 0, "bitmap too large"))?;
            return Ok(Loaded::new(map, true));
        }
        let stored = self.desc(g).inode_bitmap_csum();
        self.read_bitmap(
            self.desc(g).inode_bitmap(),
            csum_len,
            stored,
            "read inode bitmap",
        )
    }

    fn read_bitmap(
        &self,
        block: u64,
        csum_len: usize,
        stored: u32,
        context: &'static str,
    ) -> Result<Loaded, Ext4Error> {
        let bs = self.info.block_size as usize;
        let mut bytes = vec![0u8; bs];
        self.dev
            .read_at(block * bs as u64, &mut bytes)
            .map_err(io(context))?;
        let map = CheckedBitmap::from_bytes(&bytes, self.info.checksum_seed, csum_len)
            .map_err(|_| corrupt("s_blocks_per_group", None, 0, "bitmap too large"))?;
        let csum_ok = self.info.checksums != ChecksumKind::MetadataCsum
            || map.checksum() & self.csum_mask() == stored;
        Ok(Loaded::new(map, csum_ok))
    }

    /// Runs `f` on group `g`'s block or inode bitmap (loading it first);
    /// the bitmap goes back into the cache whatever `f` does.
    fn with_bitmap<R>(
        &mut self,
        g: u32,
        which: Which,
        f: impl FnOnce(&mut Loaded) -> R,
    ) -> Result<R, Ext4Error> {
        let cache = &mut self.groups[g as usize];
        let cell = match which {
            Which::Block => &mut cache.block,
            Which::Inode => &mut cache.inode,
        };
        if let Some(u) = self.undo.as_mut() {
            u.keep_bitmap(g, which == Which::Inode, cell.get());
        }
        let mut l = match cell.take() {
            Some(l) => l,
            None => match which {
                Which::Block => self.load_block_bitmap(g)?,
                Which::Inode => self.load_inode_bitmap(g)?,
            },
        };
        let r = f(&mut l);
        let cache = &mut self.groups[g as usize];
        match which {
            Which::Block => cache.block = OnceCell::from(l),
            Which::Inode => cache.inode = OnceCell::from(l),
        }
        Ok(r)
    }

    /// [`Image::with_bitmap`] on the block bitmap.
    fn with_block_bitmap<R>(
        &mut self,
        g: u32,
        f: impl FnOnce(&mut Loaded) -> R,
    ) -> Result<R, Ext4Error> {
        self.with_bitmap(g, Which::Block, f)
    }

    /// [`Image::with_bitmap`] on the inode bitmap.
    fn with_inode_bitmap<R>(
        &mut self,
        g: u32,
        f: impl FnOnce(&mut Loaded) -> R,
    ) -> Result<R, Ext4Error> {
        self.with_bitmap(g, Which::Inode, f)
    }

    /// Refuses changes to a read-only image, or one whose superblock or any
    /// group descriptor fails its checksum.
    fn check_writable(&self) -> Result<(), Ext4Error> {
        if self.mode == OpenMode::ReadOnly {
            return Err(Ext4Error::ReadOnly);
        }
        if !self.sb_csum_ok {
            return Err(Ext4Error::BadChecksum {
                what: "superblock",
                group: None,
            });
        }
        // A damaged descriptor means the image needs e2fsck: spacekit
        // writes nothing to it. (The kernel marks such a group corrupt and
        // goes on; debugfs and tune2fs write and re-sign the descriptor,
        // hiding the damage from the next e2fsck.)
        if let Some(g) = self.bad_desc {
            return Err(Ext4Error::BadChecksum {
                what: "group descriptor",
                group: Some(g),
            });
        }
        Ok(())
    }

    /// Refuses a change that reads group `g`'s block bitmap when that
    /// bitmap fails its checksum: a damaged bitmap is never trusted for an
    /// allocation or a free (the kernel would mark the group corrupt; an
    /// offline tool leaves the image to e2fsck).
    fn check_block_bitmap(&self, g: u32) -> Result<(), Ext4Error> {
        if self.block_bitmap(g)?.csum_ok() {
            Ok(())
        } else {
            Err(Ext4Error::BadChecksum {
                what: "block bitmap",
                group: Some(g),
            })
        }
    }
}
