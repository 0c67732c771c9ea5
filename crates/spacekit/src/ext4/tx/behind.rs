//! Write-behind: the block cache sends out early the pending blocks that
//! the committed image cannot see, so a long transaction (a populate of
//! thousands of files) holds a bounded amount of metadata in memory.
//!
//! A pending block normally waits for [`Image::flush`], which logs it
//! before it writes it in place. Two kinds of block need no log, because
//! the image as last committed gives them no meaning:
//!
//! * a data-kind block (a directory, extent-tree or xattr block) that is
//!   free in the committed block bitmap, the block bitmap on the device
//!   (rewritten only by a flush). Like file data (see `inode/data.rs`), it
//!   is written to free space, and the flush syncs it before the log
//!   commits the metadata that points at it.
//! * an inode-table block whose every slot lies past its group's
//!   committed `bg_itable_unused` watermark (or in an `INODE_UNINIT`
//!   group), with a descriptor checksum (`metadata_csum` or
//!   `uninit_bg`). Neither e2fsck nor the kernel reads those slots: e2fsck
//!   stops its inode scan at the watermark, mke2fs's `lazy_itable_init`
//!   leaves them unwritten, and the kernel and libext2fs write a new inode
//!   in full, as spacekit's allocator zeroes a slot it takes from there.
//!
//! A crash before the flush leaves these writes where the committed image
//! does not look, so it is as before, e2fsck-clean. The device's
//! descriptors and bitmaps are that committed image only while no redo
//! log is waiting: after a flush that failed between writing its log and
//! removing it, part of its records may be in place and the next open
//! replays the log only if the blocks it covers still hold its bytes or
//! the old ones. So nothing is written behind until a flush completes.
//!
//! An operation's undo puts back the block cache as it was (see
//! `undo.rs`), not the device. So inside an open undo, blocks go out only
//! when the undo began with nothing pending (`Undo::clean_start`): the
//! committed image is then also the image the undo goes back to, so every
//! block sent out is free again (or past the watermark again) after a
//! roll-back, and what the device holds there does not matter.

use std::collections::btree_map::Entry;
use std::vec::Vec;

use crate::ext4::error::{io, Ext4Error};
use crate::ext4::group::{desc_at, meta_in, uninit_block_bitmap};
use crate::ext4::image::{Committed, Image};
use crate::ext4::layout::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::ext4::mode::OpenMode;

/// Bytes of pending blocks a transaction keeps before write-behind sends
/// out the ones the committed image cannot see (the default of
/// [`Image::set_cache_budget`]).
pub const CACHE_BUDGET: usize = 512 << 10;

impl Image {
    /// Sets how many bytes of pending metadata blocks a transaction may
    /// hold before the blocks the committed image cannot see (new
    /// directory, extent and xattr blocks in free space, and inode-table
    /// blocks past every group's used inodes) are written out early;
    /// `None` keeps every pending block in memory until
    /// [`Image::flush`]; the last 16 blocks changed always stay (the
    /// blocks being filled, which would otherwise be read back by the next
    /// change). The default is [`CACHE_BUDGET`] (512 KiB). Crash
    /// safety is the same either way (see the module notes), and after the
    /// flush every block in use is byte-identical (a block written early
    /// and freed again before the flush keeps its bytes in free space).
    pub fn set_cache_budget(&mut self, bytes: Option<usize>) {
        self.cache_budget = bytes;
        self.behind_next = self.budget_blocks();
    }

    /// The budget in blocks (`usize::MAX` for none).
    pub(super) fn budget_blocks(&self) -> usize {
        match self.cache_budget {
            Some(b) => (b / self.info.block_size as usize).max(1),
            None => usize::MAX,
        }
    }

    /// Writes out early the pending blocks the committed image cannot
    /// see, once the cache holds more than its budget, except the last
    /// few changed (`Recent`), which are still being filled. Best effort: on an
    /// I/O error the blocks stay pending (the flush writes them, or
    /// reports the error), so an operation that succeeded stays done.
    pub(crate) fn write_behind(&mut self) {
        if self.pending_blocks.len() < self.behind_next {
            return;
        }
        // A failure leaves every block not yet written pending.
        let _ = self.write_behind_now();
        // Blocks that must wait for the log stay: look again only after
        // another budget's worth.
        self.behind_next = self
            .pending_blocks
            .len()
            .saturating_add(self.budget_blocks());
    }

    /// [`Image::write_behind`] without the budget check; returns how many
    /// blocks went out.
    pub(crate) fn write_behind_now(&mut self) -> Result<usize, Ext4Error> {
        if self.mode == OpenMode::ReadOnly
            || self.log_waiting
            || self.undo.as_ref().is_some_and(|u| !u.clean_start)
        {
            return Ok(0);
        }
        let out = self.unseen_pending()?;
        let bs = u64::from(self.info.block_size);
        for &b in &out {
            if let Some(data) = self.pending_blocks.get(&b) {
                self.dev
                    .write_at(b * bs, data)
                    .map_err(io("write block ahead of the flush"))?;
            }
            self.pending_blocks.remove(&b);
            self.forget_append_block(b);
            self.data_unsynced = true;
        }
        Ok(out.len())
    }

    /// The pending blocks the committed image cannot see, in block order.
    fn unseen_pending(&mut self) -> Result<Vec<u64>, Ext4Error> {
        let pending: Vec<u64> = self
            .pending_blocks
            .keys()
            .copied()
            .filter(|&b| !self.recent.contains(b))
            .collect();
        let mut out = Vec::new();
        for b in pending {
            if self.unseen(b)? {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Whether block `b` means nothing to the committed image: a block
    /// outside the file system's metadata that the committed block bitmap
    /// has free, or (with descriptor checksums) an inode-table block whose
    /// every slot lies past its group's committed watermark. The committed
    /// descriptors and bitmaps are read from the device once per flush
    /// interval ([`Committed`]).
    pub(crate) fn unseen(&mut self, b: u64) -> Result<bool, Ext4Error> {
        let mut c = self.committed.take().unwrap_or_default();
        let r = self.unseen_in(&mut c, b);
        self.committed = Some(c);
        r
    }

    fn unseen_in(&self, c: &mut Committed, b: u64) -> Result<bool, Ext4Error> {
        let bs = self.info.block_size as usize;
        let csum = self.info.uninit_flags();
        if c.gdt.is_empty() {
            // The flush rewrites the table, so the device holds the
            // committed one until then.
            let mut gdt = std::vec![0u8; self.info.desc_blocks as usize * bs];
            self.dev
                .read_at(self.info.gdt_start() * bs as u64, &mut gdt)
                .map_err(io("read the committed descriptors"))?;
            c.gdt = gdt;
        }
        Ok(match meta_in(&self.meta, b, b + 1).next() {
            None => {
                let Some((g, bit)) = self.info.group_of_block(b) else {
                    return Ok(false);
                };
                let map = match c.maps.entry(g) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        let d = desc_at(&self.info, &c.gdt, g);
                        e.insert(if csum && d.flags() & BG_BLOCK_UNINIT != 0 {
                            uninit_block_bitmap(&self.info, &self.meta, g)?.to_le_bytes()
                        } else {
                            let mut m = std::vec![0u8; bs];
                            self.dev
                                .read_at(d.block_bitmap() * bs as u64, &mut m)
                                .map_err(io("read a committed block bitmap"))?;
                            m
                        })
                    }
                };
                map.get(bit as usize / 8)
                    .is_some_and(|&byte| byte & (1 << (bit % 8)) == 0)
            }
            Some(m) if csum && m.field == "bg_inode_table" => {
                let d = desc_at(&self.info, &c.gdt, m.group);
                let watermark = if d.flags() & BG_INODE_UNINIT != 0 {
                    0
                } else {
                    u64::from(self.info.inodes_per_group.saturating_sub(d.itable_unused()))
                };
                let per_block = (bs / self.info.inode_size as usize) as u64;
                (b - m.start) * per_block >= watermark
            }
            Some(_) => false,
        })
    }
}
