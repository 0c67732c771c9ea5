//! Block and inode allocation with full accounting.

mod goal;

use crate::bitmap::Bits;
use crate::crc32c;
use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::group::meta_in;
use crate::ext4::layout::{self, sb, ChecksumKind};
use crate::ext4::{AllocRequest, Image, BG_BLOCK_UNINIT, BG_INODE_UNINIT};

impl Image {
    /// Allocates `req.len` contiguous blocks inside one group and returns the
    /// first: first fit from the goal's group and block (wrapping once inside
    /// that group), then the following groups in order, wrapping once
    /// through all of them. The first block is a multiple of `req.align`.
    ///
    /// Updates, in memory until [`Image::flush`]: the block bitmap (and its
    /// checksum, incrementally), the group's free block count, its
    /// descriptor checksum, the superblock's free block count and checksum.
    /// A BLOCK_UNINIT group is materialised: its effective bitmap becomes
    /// real, the flag is cleared and both checksums are written. This is the
    /// accounting of e2fsprogs' `ext2fs_block_alloc_stats_range` and of the
    /// kernel's `ext4_mb_mark_context`; the search is simpler than mballoc's
    /// (no preallocation, no buddy cache): one pass, first fit.
    ///
    /// Groups are skipped when their descriptor counts fewer than `len` free
    /// blocks.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::BadChecksum`] if the
    /// superblock or any group descriptor fails its checksum (the image is
    /// never written then), or a block bitmap the search reaches does; [`Ext4Error::InvalidArgument`] for a
    /// zero `len`, a `len` above `s_blocks_per_group`, an `align` that is not
    /// a power of two, a goal outside the file system;
    /// [`Ext4Error::NoSpace`]; [`Ext4Error::Corrupt`] if a free count would
    /// go negative; [`Ext4Error::Io`] reading a bitmap.
    pub fn alloc_blocks(&mut self, req: AllocRequest) -> Result<u64, Ext4Error> {
        self.check_writable()?;
        let AllocRequest { goal, len, align } = req;
        if len == 0 || len > self.info.blocks_per_group {
            return Err(invalid(
                "len",
                len.into(),
                "must be from 1 to s_blocks_per_group",
            ));
        }
        if !align.is_power_of_two() {
            return Err(invalid("align", align.into(), "must be a power of two"));
        }
        let (g0, bit0) = self.goal_position(goal)?;
        let groups = self.info.group_count;
        for i in 0..groups {
            let g = (g0 + i) % groups;
            if self.desc(g).free_blocks() < len {
                continue;
            }
            let n = self.info.blocks_in_group(g);
            let first = self.info.group_first_block(g);
            let offset = (first & u64::from(align - 1)) as u32;
            let goal_bit = if i == 0 { bit0 } else { 0 };
            self.check_block_bitmap(g)?;
            let found = self.with_block_bitmap(g, |l| l.search(n, goal_bit, len, align, offset))?;
            if let Some(bit) = found {
                self.mark_blocks(g, bit, len, true)?;
                return Ok(first + u64::from(bit));
            }
        }
        Err(Ext4Error::NoSpace { len, align })
    }

    /// Allocates the free run at or after `goal`, as ext4 extends a file
    /// (and places a file's tree blocks, directory blocks and xattr blocks:
    /// every block of a file comes from here, through each group's
    /// free-space index, from the goal of `Image::file_goal`):
    /// the first free block at or after the goal (in the goal's group from
    /// the goal's block, then each following group from its first block,
    /// wrapping through all of them, and last the goal's group before the
    /// goal) and the free blocks that follow it, up to `max` blocks; a run
    /// that reaches the end of its group goes on into the next group's
    /// first free blocks (a physical run may cross group boundaries, as
    /// with `ext2fs_new_range`). Returns the first block and the length.
    ///
    /// Unlike [`Image::alloc_blocks`] no group is skipped for holding a
    /// shorter free run than asked, so successive calls with the goal just
    /// past the previous run fill the groups in order. Groups without free
    /// blocks are skipped; a block bitmap that fails its checksum is
    /// refused. Accounting as [`Image::alloc_blocks`].
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for a zero `max` or a goal outside
    /// the file system; [`Ext4Error::NoSpace`] when no block is free; as
    /// [`Image::alloc_blocks`] otherwise.
    pub(crate) fn alloc_run_from(
        &mut self,
        goal: Option<u64>,
        max: u32,
    ) -> Result<(u64, u32), Ext4Error> {
        self.check_writable()?;
        if max == 0 {
            return Err(invalid("len", 0, "must be at least 1"));
        }
        let (g0, bit0) = self.goal_position(goal)?;
        let groups = self.info.group_count;
        for i in 0..=groups {
            let g = (g0 + i) % groups;
            let n = self.info.blocks_in_group(g);
            // The goal's group from the goal first, before it last.
            let (from, to) = match i {
                0 => (bit0, n),
                _ if i == groups => (0, bit0),
                _ => (0, n),
            };
            if from >= to || self.desc(g).free_blocks() == 0 {
                continue;
            }
            self.check_block_bitmap(g)?;
            // The run's first block through the group's free-space index
            // (its search wraps: a block before `from` means none after).
            let found = self.with_block_bitmap(g, |l| l.search(n, from, 1, 1, 0))?;
            let Some(start) = found.filter(|&s| s >= from && s < to).map(|s| s as usize) else {
                continue;
            };
            let l = self.block_bitmap(g)?;
            let end = l
                .view(n as usize)?
                .find_next_set(start)
                .unwrap_or(n as usize)
                .min(n as usize)
                .min(start + max as usize);
            let (start, len) = (start as u32, (end - start) as u32);
            self.mark_blocks(g, start, len, true)?;
            let first = self.info.group_first_block(g) + u64::from(start);
            let mut total = len;
            if end == n as usize && i < groups {
                total += self.extend_run_into(g + 1, max - len)?;
            }
            return Ok((first, total));
        }
        Err(Ext4Error::NoSpace { len: max, align: 1 })
    }

    /// The group and bit of an allocation's goal block (group 0, bit 0
    /// without one).
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for a goal outside the file system.
    fn goal_position(&self, goal: Option<u64>) -> Result<(u32, u32), Ext4Error> {
        match goal {
            None => Ok((0, 0)),
            Some(b) => {
                self.info
                    .group_of_block(b)
                    .ok_or(invalid("goal", b, "outside the file system"))
            }
        }
    }

    /// Continues a run that reached the end of the group before `g`: takes
    /// the free blocks at the start of group `g` and of the groups after it
    /// (while a run fills a group to its end), up to `max` blocks in all, as
    /// e2fsprogs' `ext2fs_new_range` lets a run cross group boundaries.
    /// Returns the blocks taken (0 when group `g` starts with a used block
    /// or does not exist); a bitmap that fails its checksum is refused.
    fn extend_run_into(&mut self, mut g: u32, mut max: u32) -> Result<u32, Ext4Error> {
        let mut taken = 0;
        while max > 0 && g < self.info.group_count {
            if self.desc(g).free_blocks() == 0 {
                break;
            }
            let n = self.info.blocks_in_group(g);
            self.check_block_bitmap(g)?;
            let l = self.block_bitmap(g)?;
            let end = l
                .view(n as usize)?
                .find_next_set(0)
                .unwrap_or(n as usize)
                .min(n as usize);
            let len = (end as u32).min(max);
            if len == 0 {
                break;
            }
            self.mark_blocks(g, 0, len, true)?;
            taken += len;
            max -= len;
            if len < n {
                break;
            }
            g += 1;
        }
        Ok(taken)
    }

    /// Frees blocks `[start, start + len)`, which may span groups: clears
    /// their bits and adds them back to the group and superblock counts, with
    /// every checksum updated (e2fsprogs' `ext2fs_block_alloc_stats_range`
    /// with `inuse = -1`). All-or-nothing: every block is checked first.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::InvalidArgument`] for `len == 0`
    /// or a range outside the file system; [`Ext4Error::MetadataBlock`] if a
    /// block holds metadata; [`Ext4Error::BlockAlreadyFree`] if a block is
    /// free; [`Ext4Error::BadChecksum`] if a group's descriptor or bitmap, or
    /// the superblock, fails its checksum; [`Ext4Error::Corrupt`] if a count
    /// would exceed its maximum; [`Ext4Error::Io`] reading a bitmap.
    pub fn free_blocks(&mut self, start: u64, len: u64) -> Result<(), Ext4Error> {
        self.check_writable()?;
        if len == 0 {
            return Err(invalid("len", 0, "must be at least 1"));
        }
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.info.blocks_count)
            .ok_or(invalid("len", len, "the range ends past the file system"))?;
        if self.info.group_of_block(start).is_none() {
            return Err(invalid("block", start, "outside the file system"));
        }
        if let Some(m) = meta_in(&self.meta, start, end).next() {
            return Err(Ext4Error::MetadataBlock {
                block: m.start.max(start),
            });
        }
        // Split by group and check every piece before changing anything.
        let mut pieces = Vec::new();
        let mut b = start;
        let mut total_free = self.free_blocks_count();
        while b < end {
            let (g, bit) = self.info.group_of_block(b).ok_or(invalid(
                "block",
                b,
                "outside the file system",
            ))?;
            let n = (u64::from(self.info.blocks_in_group(g)) - u64::from(bit)).min(end - b) as u32;
            self.check_block_bitmap(g)?;
            let l = self.block_bitmap(g)?;
            let range = bit as usize..(bit + n) as usize;
            if let Some(c) = l.bits().find_first_clear_in(range)? {
                return Err(Ext4Error::BlockAlreadyFree {
                    block: self.info.group_first_block(g) + c as u64,
                });
            }
            let free = self.desc(g).free_blocks();
            if u64::from(free) + u64::from(n) > u64::from(self.info.blocks_in_group(g)) {
                return Err(corrupt(
                    "bg_free_blocks_count",
                    Some(g),
                    free.into(),
                    "would exceed the blocks in the group",
                ));
            }
            total_free += u64::from(n);
            pieces.push((g, bit, n));
            b += u64::from(n);
        }
        if total_free > self.info.blocks_count {
            return Err(corrupt(
                "s_free_blocks_count",
                None,
                self.free_blocks_count(),
                "would exceed s_blocks_count",
            ));
        }
        self.freed_since_flush = true;
        for (g, bit, n) in pieces {
            self.mark_blocks(g, bit, n, false)?;
        }
        Ok(())
    }

    /// Allocates an inode and returns its number: the first free inode at or
    /// after `s_first_ino`, searching from `goal_group` (group 0 if `None`)
    /// through the following groups, wrapping once. `directory` also counts
    /// it in `bg_used_dirs_count`.
    ///
    /// Accounting as e2fsprogs' `ext2fs_inode_alloc_stats2`: bitmap bit and
    /// checksum, group free inode count, used directories, `bg_itable_unused`
    /// lowered if the inode lies in the unused tail, INODE_UNINIT cleared
    /// (materialising the inode bitmap), descriptor checksum, superblock free
    /// inode count and checksum. Like `check_inode_uninit` and the kernel's
    /// `__ext4_new_inode`, allocating in a group that is also BLOCK_UNINIT
    /// materialises its block bitmap too.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::InvalidArgument`] for a goal
    /// group past the last; [`Ext4Error::NoFreeInodes`];
    /// [`Ext4Error::BadChecksum`] if the superblock or a group descriptor
    /// fails its checksum, or an inode bitmap the search reaches does;
    /// [`Ext4Error::Corrupt`] if a count would go out of range;
    /// [`Ext4Error::Io`] reading a bitmap.
    pub fn alloc_inode(
        &mut self,
        goal_group: Option<u32>,
        directory: bool,
    ) -> Result<u32, Ext4Error> {
        self.check_writable()?;
        let g0 = goal_group.unwrap_or(0);
        self.check_group(g0)?;
        let ipg = self.info.inodes_per_group;
        let groups = self.info.group_count;
        for i in 0..groups {
            let g = (g0 + i) % groups;
            if self.desc(g).free_inodes() == 0 {
                continue;
            }
            let l = self.inode_bitmap(g)?;
            if !l.csum_ok() {
                return Err(Ext4Error::BadChecksum {
                    what: "inode bitmap",
                    group: Some(g),
                });
            }
            let view = l.view(ipg as usize)?;
            let first_ino_bit =
                u64::from(self.info.first_ino - 1).saturating_sub(u64::from(g) * u64::from(ipg));
            let Some(bit) = view.find_next_clear(first_ino_bit.min(u64::from(ipg)) as usize) else {
                continue;
            };
            let bit = bit as u32;
            let ino = g * ipg + bit + 1;
            // A slot past the group's used inodes holds nothing defined
            // (mke2fs's lazy_itable_init leaves it unwritten; write-behind
            // may have put an inode there that a roll-back or a crash
            // dropped): zero it, as the kernel and libext2fs write a new
            // inode in full.
            // When every slot of its inode-table block lies there too, the
            // block holds nothing anyone reads: it starts from zeros instead
            // of being read (a populate's new inodes fill fresh blocks, and
            // a lazily initialised table is a hole in a sparse image).
            let unused = self.desc(g).itable_unused();
            let watermark = if self.inode_uninit(g) {
                0
            } else {
                ipg.saturating_sub(unused)
            };
            if self.info.uninit_flags() && bit >= watermark {
                let (block, at) = self.inode_location(ino)?;
                let size = self.info.inode_size as usize;
                let per_block = (self.info.block_size / self.info.inode_size).max(1);
                let slot = if bit - bit % per_block >= watermark {
                    self.unused_inode_table_block_mut(block)?
                } else {
                    self.inode_table_block_mut(block)?
                };
                if let Some(s) = slot.get_mut(at..at + size) {
                    s.fill(0);
                }
            }
            self.mark_inode(g, bit, directory, true)?;
            return Ok(ino);
        }
        Err(Ext4Error::NoFreeInodes)
    }

    /// Frees inode `ino`: clears its bit and adds it back to the group and
    /// superblock free counts (and takes it out of `bg_used_dirs_count` if
    /// `directory`), with every checksum updated. The inode itself is not
    /// touched.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::InvalidArgument`] for a reserved
    /// inode (below `s_first_ino`) or one past `s_inodes_count`;
    /// [`Ext4Error::InodeAlreadyFree`]; [`Ext4Error::BadChecksum`];
    /// [`Ext4Error::Corrupt`] if a count would go out of range (a directory
    /// count already 0); [`Ext4Error::Io`] reading a bitmap.
    pub fn free_inode(&mut self, ino: u32, directory: bool) -> Result<(), Ext4Error> {
        self.check_writable()?;
        self.forget_append_dir(ino);
        if ino < self.info.first_ino {
            return Err(invalid(
                "ino",
                ino.into(),
                "reserved inode (below s_first_ino)",
            ));
        }
        let (g, bit) = self.info.group_of_inode(ino).ok_or(invalid(
            "ino",
            ino.into(),
            "past s_inodes_count",
        ))?;
        let l = self.inode_bitmap(g)?;
        if !l.csum_ok() {
            return Err(Ext4Error::BadChecksum {
                what: "inode bitmap",
                group: Some(g),
            });
        }
        if l.bits().get(bit as usize) != Some(true) {
            return Err(Ext4Error::InodeAlreadyFree { ino });
        }
        self.mark_inode(g, bit, directory, false)
    }

    /// Sets (`alloc`) or clears `n` bits from `bit` in group `g`'s block
    /// bitmap, all of which must currently have the other value, and does the
    /// accounting. Every check happens before the first change.
    fn mark_blocks(&mut self, g: u32, bit: u32, n: u32, alloc: bool) -> Result<(), Ext4Error> {
        let old_free = self.desc(g).free_blocks();
        let new_free = if alloc {
            old_free.checked_sub(n)
        } else {
            old_free.checked_add(n)
        }
        .ok_or(corrupt(
            "bg_free_blocks_count",
            Some(g),
            old_free.into(),
            "would go out of range",
        ))?;
        let sb_free = self.free_blocks_count();
        let new_sb_free = if alloc {
            sb_free.checked_sub(n.into())
        } else {
            sb_free.checked_add(n.into())
        }
        .ok_or(corrupt(
            "s_free_blocks_count",
            None,
            sb_free,
            "would go out of range",
        ))?;
        let changed = self.with_block_bitmap(g, |l| l.mark_range(bit, n, alloc))??;
        debug_assert_eq!(changed, n as usize);
        let csum = self.block_bitmap(g)?.checksum();
        let metadata_csum = self.info.checksums == ChecksumKind::MetadataCsum;
        let mut d = self.desc_mut(g);
        d.set_free_blocks(new_free);
        if metadata_csum {
            d.set_block_bitmap_csum(csum);
        }
        self.clear_flags(g, BG_BLOCK_UNINIT);
        self.resign_desc(g);
        self.dirty_block.insert(g);
        self.set_sb_free_blocks(new_sb_free);
        Ok(())
    }

    /// Sets (`alloc`) or clears inode bit `bit` of group `g` with the
    /// accounting of `ext2fs_inode_alloc_stats2`.
    fn mark_inode(&mut self, g: u32, bit: u32, dir: bool, alloc: bool) -> Result<(), Ext4Error> {
        let ipg = self.info.inodes_per_group;
        let d = self.desc(g);
        let (free, dirs, unused) = (d.free_inodes(), d.used_dirs(), d.itable_unused());
        let new_free = if alloc {
            free.checked_sub(1)
        } else {
            free.checked_add(1).filter(|&f| f <= ipg)
        }
        .ok_or(corrupt(
            "bg_free_inodes_count",
            Some(g),
            free.into(),
            "would go out of range",
        ))?;
        let new_dirs = match (dir, alloc) {
            (false, _) => Some(dirs),
            (true, true) => dirs.checked_add(1).filter(|&d| d <= ipg),
            (true, false) => dirs.checked_sub(1),
        }
        .ok_or(corrupt(
            "bg_used_dirs_count",
            Some(g),
            dirs.into(),
            "would go out of range",
        ))?;
        let sb_free = self.free_inodes_count();
        let new_sb_free = if alloc {
            sb_free.checked_sub(1)
        } else {
            sb_free
                .checked_add(1)
                .filter(|&f| f <= self.info.inodes_count)
        }
        .ok_or(corrupt(
            "s_free_inodes_count",
            None,
            sb_free.into(),
            "would go out of range",
        ))?;
        // Materialise the block bitmap of a BLOCK_UNINIT group first (it is
        // computed, so loading cannot fail past this point).
        let materialise_blocks = alloc && self.block_uninit(g);
        if materialise_blocks {
            self.block_bitmap(g)?;
        }
        let changed = self.with_inode_bitmap(g, |l| l.mark(bit, alloc))??;
        debug_assert!(changed);
        let icsum = self.inode_bitmap(g)?.checksum();
        let bcsum = self.block_bitmap(g)?.checksum();
        let metadata_csum = self.info.checksums == ChecksumKind::MetadataCsum;
        let has_desc_csum = self.info.uninit_flags();
        let mut d = self.desc_mut(g);
        d.set_free_inodes(new_free);
        d.set_used_dirs(new_dirs);
        if alloc && has_desc_csum {
            // e2fsprogs: the first unused inode (1-based within the group)
            // is ipg - itable_unused + 1; an inode at or past it shrinks the
            // unused tail to what lies after it.
            let first_unused_bit = ipg.saturating_sub(unused);
            if bit >= first_unused_bit {
                d.set_itable_unused(ipg - bit - 1);
            }
        }
        if metadata_csum {
            d.set_inode_bitmap_csum(icsum);
            if materialise_blocks {
                d.set_block_bitmap_csum(bcsum);
            }
        }
        let mut clear = BG_INODE_UNINIT;
        if materialise_blocks {
            clear |= BG_BLOCK_UNINIT;
            self.dirty_block.insert(g);
        }
        self.clear_flags(g, clear);
        self.resign_desc(g);
        self.dirty_inode.insert(g);
        self.set_sb_u32(sb::FREE_INODES, new_sb_free);
        Ok(())
    }

    /// Clears `flags` in group `g`'s descriptor (only meaningful with a
    /// descriptor checksum; harmless otherwise).
    fn clear_flags(&mut self, g: u32, flags: u16) {
        if !self.info.uninit_flags() {
            return;
        }
        let old = self.desc(g).flags();
        self.desc_mut(g).set_flags(old & !flags);
    }

    /// Recomputes group `g`'s descriptor checksum and marks its block dirty.
    fn resign_desc(&mut self, g: u32) {
        let sum = layout::desc_checksum(&self.info, g, self.desc(g).raw);
        if self.info.checksums != ChecksumKind::None {
            self.desc_mut(g).set_checksum(sum);
        }
        let b = self.gdt_block_of(g);
        self.dirty_gdt.insert(b);
    }

    fn set_sb_free_blocks(&mut self, v: u64) {
        self.set_sb_u32(sb::FREE_BLOCKS_LO, v as u32);
        if self.info.has_64bit {
            self.set_sb_u32(sb::FREE_BLOCKS_HI, (v >> 32) as u32);
        }
    }

    /// Writes a superblock field, updating the checksum by splicing the
    /// changed bytes.
    fn set_sb_u32(&mut self, off: usize, v: u32) {
        let old = layout::le32(&self.sb, off);
        if old == v {
            return;
        }
        layout::put32(&mut self.sb, off, v);
        if self.info.checksums == ChecksumKind::MetadataCsum {
            let crc = layout::le32(&self.sb, sb::CHECKSUM);
            let new = crc32c::splice(
                crc,
                sb::CHECKSUM as u64,
                off as u64,
                &old.to_le_bytes(),
                &v.to_le_bytes(),
            );
            // off + 4 <= 0x3FC for every field written here.
            let new = new.unwrap_or_else(|_| layout::superblock_checksum(&self.sb));
            layout::put32(&mut self.sb, sb::CHECKSUM, new);
        }
        self.dirty_sb = true;
    }
}
