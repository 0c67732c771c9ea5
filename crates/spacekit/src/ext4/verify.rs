//! Checking an image: checksums, bitmap padding, free counts; and the free
//! space histogram.

use std::fmt;
use std::vec;
use std::vec::Vec;

use crate::bitmap::Bits;

use super::error::Ext4Error;
use super::image::Image;
use super::layout::{self, ChecksumKind};

/// What one [`Mismatch`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Check {
    /// `s_checksum` (metadata_csum).
    SuperblockChecksum,
    /// `bg_checksum` (metadata_csum or gdt_csum).
    DescriptorChecksum,
    /// `bg_block_bitmap_csum` (metadata_csum; not checked for BLOCK_UNINIT
    /// groups, which store 0).
    BlockBitmapChecksum,
    /// `bg_inode_bitmap_csum` (metadata_csum; not checked for INODE_UNINIT
    /// groups).
    InodeBitmapChecksum,
    /// The bits of the block bitmap past the group's last block (up to 8 ×
    /// block size) must all be 1. `stored` counts those set, `computed` how
    /// many there are.
    BlockBitmapPadding,
    /// The bits of the inode bitmap past `s_inodes_per_group` must all be 1.
    InodeBitmapPadding,
    /// `bg_free_blocks_count` against the clear bits of the (effective)
    /// block bitmap.
    GroupFreeBlocks,
    /// `bg_free_inodes_count` against the clear bits of the (effective)
    /// inode bitmap.
    GroupFreeInodes,
    /// `s_free_blocks_count` against the sum of the groups' counts.
    FreeBlocksCount,
    /// `s_free_inodes_count` against the sum of the groups' counts.
    FreeInodesCount,
}

/// One disagreement found by [`Image::verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// What was checked.
    pub what: Check,
    /// The group, for per-group checks.
    pub group: Option<u32>,
    /// The value on disk (or in memory, for changes not yet flushed).
    pub stored: u64,
    /// The value computed from the data it describes.
    pub computed: u64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(g) = self.group {
            write!(f, "group {g}: ")?;
        }
        write!(
            f,
            "{:?}: stored {:#x}, computed {:#x}",
            self.what, self.stored, self.computed
        )
    }
}

/// The result of [`Image::verify`]: every mismatch found, in group order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The mismatches; empty for a consistent image.
    pub mismatches: Vec<Mismatch>,
}

impl VerifyReport {
    /// Whether nothing disagreed.
    pub fn is_clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// The checksums of one group computed from its data, in the width the
/// descriptor stores them ([`Image::group_checksums`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupChecksums {
    /// The descriptor checksum (`None` without metadata_csum or gdt_csum).
    pub descriptor: Option<u16>,
    /// The block bitmap checksum (`None` without metadata_csum or for a
    /// BLOCK_UNINIT group, which stores 0).
    pub block_bitmap: Option<u32>,
    /// The inode bitmap checksum (`None` without metadata_csum or for an
    /// INODE_UNINIT group).
    pub inode_bitmap: Option<u32>,
}

/// Free extents by power-of-two length ([`Image::free_histogram`]), like
/// e2freefrag's "HISTOGRAM OF FREE EXTENT SIZES".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeHistogram {
    /// Block size in bytes (e2freefrag prints lengths in bytes).
    pub block_size: u32,
    /// Free blocks counted in the bitmaps.
    pub free_blocks: u64,
    /// Number of free extents.
    pub extents: u64,
    /// Shortest free extent in blocks (0 if none).
    pub min_extent: u64,
    /// Longest free extent in blocks.
    pub max_extent: u64,
    /// Bucket `k` holds the extents of `2^k` to `2^(k+1) - 1` blocks.
    pub buckets: Vec<HistogramBucket>,
}

/// The summary line and one line per non-empty bucket: length from, the
/// extents and their blocks.
impl std::fmt::Display for FreeHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} free blocks in {} extents (shortest {}, longest {}); extent lengths:",
            self.free_blocks, self.extents, self.min_extent, self.max_extent
        )?;
        for (k, b) in self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.extents > 0)
        {
            let from = 1u64 << k;
            writeln!(
                f,
                "  {from:>10}+ blocks: {:>8} extents, {:>12} blocks",
                b.extents, b.blocks
            )?;
        }
        Ok(())
    }
}

/// One bucket of a [`FreeHistogram`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramBucket {
    /// Extents whose length falls in the bucket.
    pub extents: u64,
    /// Their total length in blocks.
    pub blocks: u64,
}

impl Image {
    /// Checks everything that can be checked without reading inodes: the
    /// superblock, descriptor and bitmap checksums exactly as e2fsprogs
    /// computes them, the padding bits of every bitmap, and every free count
    /// against the bitmaps. Loads every group's bitmaps.
    ///
    /// Checks the state in memory, so after changes it describes what a
    /// [`Image::flush`] would write.
    ///
    /// # Errors
    /// [`Ext4Error::Io`] if a bitmap cannot be read.
    pub fn verify(&self) -> Result<VerifyReport, Ext4Error> {
        let info = &self.info;
        let mut out = Vec::new();
        let mut push = |what, group, stored: u64, computed: u64| {
            if stored != computed {
                out.push(Mismatch {
                    what,
                    group,
                    stored,
                    computed,
                });
            }
        };
        if info.checksums == ChecksumKind::MetadataCsum {
            push(
                Check::SuperblockChecksum,
                None,
                layout::le32(&self.sb, layout::sb::CHECKSUM).into(),
                self.superblock_checksum().into(),
            );
        }
        let bits = info.block_size as usize * 8;
        let ipg = info.inodes_per_group as usize;
        let (mut free_blocks, mut free_inodes) = (0u64, 0u64);
        for g in 0..info.group_count {
            let sums = self.group_checksums(g)?;
            let d = self.desc(g);
            let grp = Some(g);
            if let Some(c) = sums.descriptor {
                push(
                    Check::DescriptorChecksum,
                    grp,
                    d.checksum().into(),
                    c.into(),
                );
            }
            if let Some(c) = sums.block_bitmap {
                push(
                    Check::BlockBitmapChecksum,
                    grp,
                    d.block_bitmap_csum().into(),
                    c.into(),
                );
            }
            if let Some(c) = sums.inode_bitmap {
                push(
                    Check::InodeBitmapChecksum,
                    grp,
                    d.inode_bitmap_csum().into(),
                    c.into(),
                );
            }
            let n = info.blocks_in_group(g) as usize;
            let bmap = self.block_bitmap(g)?.bits();
            push(
                Check::BlockBitmapPadding,
                grp,
                bmap.count_ones_in(n..bits)? as u64,
                (bits - n) as u64,
            );
            let used = bmap.count_ones_in(0..n)?;
            push(
                Check::GroupFreeBlocks,
                grp,
                d.free_blocks().into(),
                (n - used) as u64,
            );
            let imap = self.inode_bitmap(g)?.bits();
            push(
                Check::InodeBitmapPadding,
                grp,
                imap.count_ones_in(ipg..bits)? as u64,
                (bits - ipg) as u64,
            );
            let used = imap.count_ones_in(0..ipg)?;
            push(
                Check::GroupFreeInodes,
                grp,
                d.free_inodes().into(),
                (ipg - used) as u64,
            );
            free_blocks += u64::from(d.free_blocks());
            free_inodes += u64::from(d.free_inodes());
        }
        push(
            Check::FreeBlocksCount,
            None,
            self.free_blocks_count(),
            free_blocks,
        );
        push(
            Check::FreeInodesCount,
            None,
            self.free_inodes_count().into(),
            free_inodes,
        );
        Ok(VerifyReport { mismatches: out })
    }

    /// The superblock checksum computed from its bytes (raw CRC-32C from `!0`
    /// over the first 0x3FC bytes) — what dumpe2fs prints as "Checksum" for a
    /// consistent image.
    pub fn superblock_checksum(&self) -> u32 {
        layout::superblock_checksum(&self.sb)
    }

    /// Group `group`'s checksums computed from its data, in the width the
    /// descriptor keeps (what dumpe2fs prints for a consistent image). Loads
    /// the group's bitmaps.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] past the last group; [`Ext4Error::Io`]
    /// if a bitmap cannot be read.
    pub fn group_checksums(&self, group: u32) -> Result<GroupChecksums, Ext4Error> {
        self.check_group(group)?;
        let info = &self.info;
        let descriptor = (info.checksums != ChecksumKind::None)
            .then(|| layout::desc_checksum(info, group, self.desc(group).raw));
        let csum = info.checksums == ChecksumKind::MetadataCsum;
        let mask = self.csum_mask();
        let block_bitmap = if csum && !self.block_uninit(group) {
            Some(self.block_bitmap(group)?.checksum() & mask)
        } else {
            None
        };
        let inode_bitmap = if csum && !self.inode_uninit(group) {
            Some(self.inode_bitmap(group)?.checksum() & mask)
        } else {
            None
        };
        Ok(GroupChecksums {
            descriptor,
            block_bitmap,
            inode_bitmap,
        })
    }

    /// Free extents of the whole file system by power-of-two length, as
    /// e2freefrag counts them: an extent that runs across a group boundary is
    /// one extent. Loads every group's block bitmap.
    ///
    /// # Errors
    /// [`Ext4Error::Io`] if a bitmap cannot be read.
    pub fn free_histogram(&self) -> Result<FreeHistogram, Ext4Error> {
        let mut h = FreeHistogram {
            block_size: self.info.block_size,
            free_blocks: 0,
            extents: 0,
            min_extent: 0,
            max_extent: 0,
            buckets: vec![HistogramBucket::default(); 64],
        };
        let mut add = |len: u64| {
            if len == 0 {
                return;
            }
            h.free_blocks += len;
            h.extents += 1;
            h.min_extent = if h.extents == 1 {
                len
            } else {
                h.min_extent.min(len)
            };
            h.max_extent = h.max_extent.max(len);
            let b = &mut h.buckets[len.ilog2() as usize];
            b.extents += 1;
            b.blocks += len;
        };
        // The free run still open at the end of the previous group.
        let mut open: Option<(u64, u64)> = None;
        for g in 0..self.info.group_count {
            let first = self.info.group_first_block(g);
            let n = self.info.blocks_in_group(g) as usize;
            let l = self.block_bitmap(g)?;
            let view = l.view(n)?;
            for r in view.clear_runs(0) {
                let (s, e) = (first + r.start as u64, first + r.end as u64);
                open = match open {
                    Some((os, oe)) if oe == s => Some((os, e)),
                    Some((os, oe)) => {
                        add(oe - os);
                        Some((s, e))
                    }
                    None => Some((s, e)),
                };
            }
        }
        if let Some((s, e)) = open {
            add(e - s);
        }
        while h.buckets.len() > 1 && h.buckets.last().is_some_and(|b| b.extents == 0) {
            h.buckets.pop();
        }
        Ok(h)
    }
}
