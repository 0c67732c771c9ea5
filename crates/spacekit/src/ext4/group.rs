//! Per-group state: the metadata map, effective bitmaps of uninitialised
//! groups, and the free-run search inside one group.

use crate::bitmap::{BitView, Bitmap, BitmapError, Bits, BitsMut};
use crate::checked_bitmap::CheckedBitmap;
#[cfg(any(test, feature = "testing"))]
use crate::testing::Validate;
#[cfg(any(test, feature = "testing"))]
use std::string::String;
use std::vec::Vec;

use super::error::{corrupt, Ext4Error};
use super::layout::{Desc, FsInfo};

/// One metadata extent: a superblock copy with its descriptor table and
/// reserved GDT blocks, a bitmap, or an inode table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) group: u32,
    pub(crate) field: &'static str,
}

impl Meta {
    pub(crate) fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// Every metadata extent of the file system, sorted and checked: each group's
/// bitmaps and inode table inside the file system (inside the group without
/// flex_bg), no two extents overlapping (as `ext2fs_check_desc`), and the
/// descriptor's counts no larger than the group.
pub(crate) fn build_metadata(info: &FsInfo, gdt: &[u8]) -> Result<Vec<Meta>, Ext4Error> {
    let mut out = Vec::with_capacity(info.group_count as usize * 4);
    let fdb = u64::from(info.first_data_block);
    for g in 0..info.group_count {
        let d = desc_at(info, gdt, g);
        let (lo, hi) = if info.flex_bg {
            (fdb, info.blocks_count)
        } else {
            let first = info.group_first_block(g);
            (first, first + u64::from(info.blocks_in_group(g)))
        };
        let reason = if info.flex_bg {
            "outside the file system"
        } else {
            "outside its group (no flex_bg)"
        };
        let mut check = |field: &'static str, start: u64, len: u64| -> Result<(), Ext4Error> {
            match start.checked_add(len) {
                Some(end) if start >= lo && end <= hi => {
                    out.push(Meta {
                        start,
                        len,
                        group: g,
                        field,
                    });
                    Ok(())
                }
                _ => Err(corrupt(field, Some(g), start, reason)),
            }
        };
        check("bg_block_bitmap", d.block_bitmap(), 1)?;
        check("bg_inode_bitmap", d.inode_bitmap(), 1)?;
        check(
            "bg_inode_table",
            d.inode_table(),
            u64::from(info.inode_blocks_per_group),
        )?;
        if let Some((start, len)) = info.super_and_gdt(g) {
            out.push(Meta {
                start,
                len,
                group: g,
                field: "superblock and group descriptors",
            });
        }
        let n = info.blocks_in_group(g);
        let counts = [
            ("bg_free_blocks_count", d.free_blocks(), n),
            (
                "bg_free_inodes_count",
                d.free_inodes(),
                info.inodes_per_group,
            ),
            ("bg_used_dirs_count", d.used_dirs(), info.inodes_per_group),
            ("bg_itable_unused", d.itable_unused(), info.inodes_per_group),
        ];
        for (field, v, max) in counts {
            if v > max {
                return Err(corrupt(field, Some(g), v.into(), "larger than the group"));
            }
        }
    }
    out.sort_by_key(|m| (m.start, m.len));
    for w in out.windows(2) {
        if w[0].end() > w[1].start {
            // Name the descriptor field, not the superblock copy.
            let m = if w[1].field.starts_with("bg_") {
                w[1]
            } else {
                w[0]
            };
            return Err(corrupt(
                m.field,
                Some(m.group),
                m.start,
                "overlaps other metadata",
            ));
        }
    }
    Ok(out)
}

/// The descriptor of group `g` in the raw table.
pub(crate) fn desc_at<'a>(info: &FsInfo, gdt: &'a [u8], g: u32) -> Desc<'a> {
    let size = info.desc_size as usize;
    let off = g as usize * size;
    Desc {
        raw: gdt.get(off..off + size).unwrap_or(&[]),
        wide: size >= 64,
    }
}

/// The metadata extents overlapping blocks `[start, end)`.
pub(crate) fn meta_in(meta: &[Meta], start: u64, end: u64) -> impl Iterator<Item = &Meta> {
    let i = meta.partition_point(|m| m.end() <= start);
    meta[i..].iter().take_while(move |m| m.start < end)
}

/// A loaded bitmap (its checksum kept current, and for a block bitmap the
/// group's free-space index kept in step, by [`CheckedBitmap`]), and whether
/// its stored checksum matched when read (true for computed bitmaps of
/// uninitialised groups and without metadata_csum).
///
/// Bits change only through [`Loaded::mark_range`] and [`Loaded::mark`], so
/// the bitmap, its checksum and its index cannot fall out of step.
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    map: CheckedBitmap,
    csum_ok: bool,
}

impl Loaded {
    pub(crate) fn new(map: CheckedBitmap, csum_ok: bool) -> Loaded {
        Loaded { map, csum_ok }
    }

    /// Whether the stored checksum matched when the bitmap was read.
    pub(crate) fn csum_ok(&self) -> bool {
        self.csum_ok
    }

    /// The bits, read-only.
    pub(crate) fn bits(&self) -> &Bitmap {
        self.map.bitmap()
    }

    /// The first `n` bits (a group's blocks or inodes, without the padding).
    pub(crate) fn view(&self, n: usize) -> Result<BitView<'_>, BitmapError> {
        BitView::new(self.map.bitmap().as_words(), n)
    }

    /// The kept raw CRC-32C of the bitmap's checksummed bytes.
    pub(crate) fn checksum(&self) -> u32 {
        self.map.checksum()
    }

    /// The bytes to write back.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.map.to_bytes()
    }

    /// Sets (`used`) or clears bits `[start, start + n)`; returns how many
    /// changed. Checksum and index follow.
    pub(crate) fn mark_range(
        &mut self,
        start: u32,
        n: u32,
        used: bool,
    ) -> Result<usize, BitmapError> {
        let range = start as usize..start as usize + n as usize;
        if used {
            self.map.set_range(range)
        } else {
            self.map.clear_range(range)
        }
    }

    /// Sets (`used`) or clears bit `bit`; returns whether it changed.
    pub(crate) fn mark(&mut self, bit: u32, used: bool) -> Result<bool, BitmapError> {
        let old = if used {
            self.map.set(bit as usize)?
        } else {
            self.map.clear(bit as usize)?
        };
        Ok(old != used)
    }

    /// First fit of `nr` free blocks among the group's first `blocks` bits
    /// (see [`find_free_run`]), through the group's free-space index, built
    /// over those bits on the first search (if it cannot be built, the
    /// search scans).
    pub(crate) fn search(
        &mut self,
        blocks: u32,
        goal_bit: u32,
        nr: u32,
        align: u32,
        offset: u32,
    ) -> Option<u32> {
        let indexed = self.map.index().map(|ix| ix.len());
        if indexed != Some(u64::from(blocks)) {
            // Not built yet (or over other bits: rebuild).
            let _ = self.map.build_index(blocks as usize);
        }
        if self.map.index().is_some() {
            return self
                .map
                .first_fit(
                    nr as usize,
                    align as usize,
                    offset as usize,
                    goal_bit as usize,
                )
                .ok()
                .flatten()
                .and_then(|b| u32::try_from(b).ok());
        }
        let view = self.view(blocks as usize).ok()?;
        find_free_run(&view, goal_bit, nr, align, offset)
    }

    /// The kept checksum equals a fresh computation and the index (if
    /// built) equals one rebuilt from the bits.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn validate(&self) -> Result<(), String> {
        Validate::validate(&self.map)
    }
}

/// The effective block bitmap of a BLOCK_UNINIT group (`bits` = 8 × block
/// size): its superblock copy, descriptor table and reserved GDT blocks, any
/// group's bitmaps and inode table that lie inside it, and the padding past
/// its last block set to 1 — what e2fsprogs' `mark_uninit_bg_group_blocks`
/// and the kernel's `ext4_init_block_bitmap` produce.
pub(crate) fn uninit_block_bitmap(
    info: &FsInfo,
    meta: &[Meta],
    g: u32,
) -> Result<Bitmap, Ext4Error> {
    let bits = info.block_size as usize * 8;
    let mut map = Bitmap::new(bits);
    let first = info.group_first_block(g);
    let n = info.blocks_in_group(g) as usize;
    let end = first + n as u64;
    for m in meta_in(meta, first, end) {
        let s = m.start.max(first) - first;
        let e = m.end().min(end) - first;
        map.set_range(s as usize..e as usize)?;
    }
    map.set_range(n..bits)?;
    Ok(map)
}

/// The effective inode bitmap of an INODE_UNINIT group: no inode in use, the
/// padding past `inodes_per_group` set.
pub(crate) fn uninit_inode_bitmap(info: &FsInfo) -> Result<Bitmap, Ext4Error> {
    let bits = info.block_size as usize * 8;
    let mut map = Bitmap::new(bits);
    map.set_range(info.inodes_per_group as usize..bits)?;
    Ok(map)
}

/// First fit of `nr` clear bits inside one group's bitmap: the lowest
/// position at or after `goal_bit` with `(p + offset) % align == 0`, else
/// (wrapping once) the lowest such position before it. `bitmap` is limited
/// to the group's blocks; `align` is a power of two.
///
/// The scan behind [`Loaded::search`] when no free-space index can be
/// built: the bitmap engine's `find_clear_area` (Linux's
/// `bitmap_find_next_zero_area_off`); also the index's test oracle.
pub(crate) fn find_free_run(
    bitmap: &impl Bits,
    goal_bit: u32,
    nr: u32,
    align: u32,
    offset: u32,
) -> Option<u32> {
    let (align, offset) = (align as usize, offset as usize);
    let (goal, nr) = (goal_bit as usize, nr as usize);
    let found = bitmap
        .find_clear_area(goal, nr, align, offset)
        .ok()
        .flatten()
        .or_else(|| {
            if goal == 0 {
                return None;
            }
            // Runs starting before the goal: only those can be new.
            bitmap
                .find_clear_area(0, nr, align, offset)
                .ok()
                .flatten()
                .filter(|&p| p < goal)
        })?;
    u32::try_from(found).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitmap::Bitmap;

    #[test]
    fn find_free_run_wraps_once_and_aligns() {
        let mut m = Bitmap::new(256);
        m.set_range(0..256).unwrap();
        m.clear_range(10..30).unwrap();
        m.clear_range(200..210).unwrap();
        // From the goal onwards first.
        assert_eq!(find_free_run(&m, 100, 5, 1, 0), Some(200));
        // Wraps to the start when nothing fits after the goal.
        assert_eq!(find_free_run(&m, 205, 8, 1, 0), Some(10));
        // Aligned on absolute numbers: group starting at block 3 → bit p is
        // block p + 3, so an 8-aligned run starts at bit 13 or 21.
        assert_eq!(find_free_run(&m, 0, 8, 8, 3), Some(13));
        assert_eq!(find_free_run(&m, 14, 8, 8, 3), Some(21));
        assert_eq!(find_free_run(&m, 22, 8, 8, 3), Some(13));
        assert_eq!(find_free_run(&m, 0, 21, 1, 0), None);
    }

    /// The kernel's largest group (64 KiB blocks, 524288 blocks per group,
    /// which stock mke2fs cannot make): a fragmented bitmap, aligned first
    /// fit, and the checksum kept current through the allocations.
    #[test]
    fn largest_group_in_memory() {
        let bits = 524_288usize;
        let mut bytes = std::vec![0u8; bits / 8];
        // Every 4096-block stretch starts with 100 used blocks.
        for chunk in bytes.chunks_mut(512) {
            chunk[..12].fill(0xFF);
            chunk[12] = 0x0F;
        }
        let mut m = CheckedBitmap::from_bytes(&bytes, 0x1234_5678, bits / 8)
            .unwrap()
            .with_index(bits)
            .unwrap();
        let goal = 300_000u32;
        let mut got = std::vec::Vec::new();
        for _ in 0..70 {
            let p = find_free_run(m.bitmap(), goal, 2000, 1024, 0).unwrap();
            assert_eq!(p % 1024, 0);
            // The index kept in step by every change finds the same run.
            assert_eq!(
                m.first_fit(2000, 1024, 0, goal as usize),
                Ok(Some(p as usize))
            );
            m.set_range(p as usize..p as usize + 2000).unwrap();
            got.push(p);
        }
        // From the goal up: 1024-aligned starts past each used head, then
        // wrapping to the start of the group.
        assert_eq!(got[0], 300_032);
        assert!(got.iter().any(|&p| p < goal));
        assert!(m.verify());
        assert_eq!(m.checksum(), crate::crc32c::raw(0x1234_5678, &m.to_bytes()));
        Validate::validate(&m).unwrap();
    }
}
