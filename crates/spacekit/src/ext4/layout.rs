//! On-disk layout: superblock fields, feature checks, geometry, group
//! descriptor fields and the checksums e2fsprogs computes over them.

use super::error::{corrupt, Ext4Error};
use super::mode::OpenMode;
use crate::crc32c;

pub(crate) use super::raw::{bg, le16, le32, put16, put32, sb, superblock_checksum};

/// Byte offset of the primary superblock in the image.
pub(crate) const SB_OFFSET: u64 = 1024;
/// Size of the superblock.
pub(crate) const SB_SIZE: usize = 1024;

/// `bg_flags`: the inode bitmap and inode table are not initialised.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// `bg_flags`: the block bitmap is not initialised (its effective contents
/// are computed from the layout).
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// `bg_flags`: the inode table has been zeroed.
pub const BG_INODE_ZEROED: u16 = 0x4;

const COMPAT_HAS_JOURNAL: u32 = 0x4;
const COMPAT_SPARSE_SUPER2: u32 = 0x200;

const INCOMPAT_COMPRESSION: u32 = 0x1;
const INCOMPAT_RECOVER: u32 = 0x4;
const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
const INCOMPAT_META_BG: u32 = 0x10;
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_MMP: u32 = 0x100;
const INCOMPAT_FLEX_BG: u32 = 0x200;
const INCOMPAT_CSUM_SEED: u32 = 0x2000;
/// Incompat features that do not change how groups, bitmaps and descriptors
/// are laid out: filetype, extent, 64bit, mmp, flex_bg, ea_inode, dirdata,
/// metadata_csum_seed, large_dir, inline_data, encrypt, casefold.
const INCOMPAT_KNOWN: u32 = 0x2
    | 0x40
    | INCOMPAT_64BIT
    | INCOMPAT_MMP
    | INCOMPAT_FLEX_BG
    | 0x400
    | 0x1000
    | INCOMPAT_CSUM_SEED
    | 0x4000
    | 0x8000
    | 0x1_0000
    | 0x2_0000;

const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
const RO_COMPAT_GDT_CSUM: u32 = 0x10;
const RO_COMPAT_HAS_SNAPSHOT: u32 = 0x80;
/// `quota`: usage kept in hidden quota inodes, which every allocation and
/// free would have to update.
const RO_COMPAT_QUOTA: u32 = 0x100;
const RO_COMPAT_BIGALLOC: u32 = 0x200;
const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
const RO_COMPAT_READONLY: u32 = 0x1000;
/// Every ro_compat feature of Linux 6.x / e2fsprogs 1.47 (through
/// orphan_present).
const RO_COMPAT_KNOWN: u32 = 0x1_FFFF;

const EXT4_MAGIC: u16 = 0xEF53;
/// 64 KiB: the largest block size ext4 allows.
const MAX_LOG_BLOCK_SIZE: u32 = 6;

/// Which checksums protect the group descriptors (and, with metadata_csum,
/// the superblock and bitmaps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumKind {
    /// Neither `metadata_csum` nor `gdt_csum` (`uninit_bg`): no checksums, and
    /// the `*_UNINIT` group flags are ignored, as e2fsprogs does.
    None,
    /// `gdt_csum` (`uninit_bg`) without `metadata_csum`: a CRC-16 over the
    /// UUID, group number and descriptor; bitmaps and superblock unchecked.
    GdtCsum,
    /// `metadata_csum`: CRC-32C of the superblock, of each bitmap (32 or 16
    /// bits kept) and of each descriptor (16 bits kept).
    MetadataCsum,
}

/// What spacekit read from the superblock: the geometry and the features
/// that matter to block groups. Counts that change (free blocks and inodes)
/// are read through [`super::Image`] instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsInfo {
    /// Block size in bytes (1024 to 65536).
    pub block_size: u32,
    /// `s_blocks_count` (lo and, with 64bit, hi).
    pub blocks_count: u64,
    /// `s_first_data_block`: 1 for 1 KiB blocks, else 0.
    pub first_data_block: u32,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_inodes_count` (= groups × inodes per group).
    pub inodes_count: u32,
    /// Number of block groups.
    pub group_count: u32,
    /// Bytes per group descriptor: 32, or `s_desc_size` with 64bit.
    pub desc_size: u32,
    /// Blocks the group descriptor table takes.
    pub desc_blocks: u32,
    /// `s_reserved_gdt_blocks`.
    pub reserved_gdt_blocks: u32,
    /// `s_inode_size` (128 for revision 0).
    pub inode_size: u32,
    /// Blocks of each group's inode table.
    pub inode_blocks_per_group: u32,
    /// `s_first_ino`: the first inode that is not reserved.
    pub first_ino: u32,
    /// Which checksums the file system keeps.
    pub checksums: ChecksumKind,
    /// The seed of the metadata_csum checksums: `s_checksum_seed` with
    /// metadata_csum_seed, else raw CRC-32C of the UUID from `!0`.
    pub checksum_seed: u32,
    /// `s_uuid`.
    pub uuid: [u8; 16],
    /// The 64bit feature.
    pub has_64bit: bool,
    /// The flex_bg feature: a group's bitmaps and inode table may live in
    /// another group.
    pub flex_bg: bool,
    /// The sparse_super feature: backups only in groups 0, 1 and powers of 3,
    /// 5 and 7.
    pub sparse_super: bool,
    /// With sparse_super2, the two groups holding backups (`s_backup_bgs`).
    pub sparse_super2: Option<[u32; 2]>,
    /// The has_journal feature.
    pub has_journal: bool,
}

impl FsInfo {
    /// First block of group `g`.
    pub fn group_first_block(&self, g: u32) -> u64 {
        u64::from(self.first_data_block) + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Number of blocks in group `g` (smaller for a partial last group).
    pub fn blocks_in_group(&self, g: u32) -> u32 {
        let first = self.group_first_block(g);
        let left = self.blocks_count.saturating_sub(first);
        left.min(u64::from(self.blocks_per_group)) as u32
    }

    /// The group holding `block` and its index in the group, if the block
    /// belongs to a group.
    pub fn group_of_block(&self, block: u64) -> Option<(u32, u32)> {
        if block < u64::from(self.first_data_block) || block >= self.blocks_count {
            return None;
        }
        let rel = block - u64::from(self.first_data_block);
        let bpg = u64::from(self.blocks_per_group);
        Some(((rel / bpg) as u32, (rel % bpg) as u32))
    }

    /// Whether group `g` holds a superblock (primary or backup) and a copy of
    /// the descriptor table: e2fsprogs' `ext2fs_bg_has_super`.
    pub fn has_super(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        if let Some(bgs) = self.sparse_super2 {
            return g == bgs[0] || g == bgs[1];
        }
        if g <= 1 || !self.sparse_super {
            return true;
        }
        if g.is_multiple_of(2) {
            return false;
        }
        is_power_of(g, 3) || is_power_of(g, 5) || is_power_of(g, 7)
    }

    /// The superblock, descriptor table and reserved GDT blocks of group `g`
    /// as `(first block, count)` (clipped to the file system), if it holds a
    /// copy: what `ext2fs_reserve_super_and_bgd` marks.
    pub fn super_and_gdt(&self, g: u32) -> Option<(u64, u64)> {
        if !self.has_super(g) {
            return None;
        }
        let start = self.group_first_block(g);
        let n = 1 + u64::from(self.desc_blocks) + u64::from(self.reserved_gdt_blocks);
        Some((start, n.min(self.blocks_count.saturating_sub(start))))
    }

    /// Block number of the primary descriptor table's first block.
    pub(crate) fn gdt_start(&self) -> u64 {
        u64::from(self.first_data_block) + 1
    }

    /// The group holding inode `ino` and its index in the group's inode
    /// bitmap, for `1 <= ino <= inodes_count`.
    pub fn group_of_inode(&self, ino: u32) -> Option<(u32, u32)> {
        if ino == 0 || ino > self.inodes_count {
            return None;
        }
        let i = ino - 1;
        Some((i / self.inodes_per_group, i % self.inodes_per_group))
    }

    /// Bytes of a block bitmap the checksum covers.
    pub(crate) fn block_csum_len(&self) -> usize {
        (self.blocks_per_group / 8) as usize
    }

    /// Bytes of an inode bitmap the checksum covers.
    pub(crate) fn inode_csum_len(&self) -> usize {
        (self.inodes_per_group / 8) as usize
    }

    /// Whether the `*_UNINIT` flags mean anything (`ext2fs_has_group_desc_csum`).
    pub(crate) fn uninit_flags(&self) -> bool {
        self.checksums != ChecksumKind::None
    }
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n > 1 && n.is_multiple_of(base) {
        n /= base;
    }
    n == 1
}

/// Parses and checks the superblock: magic, features, then geometry, in that
/// order, so an unsupported feature is named before any field it changes the
/// meaning of.
pub(crate) fn parse_superblock(
    raw: &[u8],
    image_len: u64,
    mode: OpenMode,
) -> Result<FsInfo, Ext4Error> {
    let magic = le16(raw, sb::MAGIC);
    if magic != EXT4_MAGIC {
        return Err(corrupt(
            "s_magic",
            None,
            magic.into(),
            "not an ext2/3/4 file system (expected 61267, 0xEF53)",
        ));
    }
    let rev = le32(raw, sb::REV_LEVEL);
    let (compat, incompat, ro_compat) = if rev == 0 {
        (0, 0, 0)
    } else {
        (
            le32(raw, sb::COMPAT),
            le32(raw, sb::INCOMPAT),
            le32(raw, sb::RO_COMPAT),
        )
    };
    check_features(incompat, ro_compat, mode)?;

    let log_bs = le32(raw, sb::LOG_BLOCK_SIZE);
    if log_bs > MAX_LOG_BLOCK_SIZE {
        return Err(corrupt(
            "s_log_block_size",
            None,
            log_bs.into(),
            "block size above 64 KiB",
        ));
    }
    let block_size = 1024u32 << log_bs;
    let log_cs = le32(raw, sb::LOG_CLUSTER_SIZE);
    if log_cs != log_bs {
        return Err(corrupt(
            "s_log_cluster_size",
            None,
            log_cs.into(),
            "differs from the block size without bigalloc",
        ));
    }
    let has_64bit = incompat & INCOMPAT_64BIT != 0;
    let mut blocks_count = u64::from(le32(raw, sb::BLOCKS_COUNT_LO));
    if has_64bit {
        blocks_count |= u64::from(le32(raw, sb::BLOCKS_COUNT_HI)) << 32;
    }
    let first_data_block = le32(raw, sb::FIRST_DATA_BLOCK);
    let want_fdb = u32::from(block_size == 1024);
    if first_data_block != want_fdb {
        return Err(corrupt(
            "s_first_data_block",
            None,
            first_data_block.into(),
            "must be 1 for 1 KiB blocks and 0 otherwise",
        ));
    }
    if blocks_count <= u64::from(first_data_block) {
        return Err(corrupt(
            "s_blocks_count",
            None,
            blocks_count,
            "no block past the first data block",
        ));
    }
    let bits_per_block = block_size * 8;
    let bpg = le32(raw, sb::BLOCKS_PER_GROUP);
    if bpg == 0 || bpg > bits_per_block || !bpg.is_multiple_of(8) {
        return Err(corrupt(
            "s_blocks_per_group",
            None,
            bpg.into(),
            "must be a nonzero multiple of 8 no larger than 8 × block size",
        ));
    }
    let cpg = le32(raw, sb::CLUSTERS_PER_GROUP);
    if cpg != bpg {
        return Err(corrupt(
            "s_clusters_per_group",
            None,
            cpg.into(),
            "differs from s_blocks_per_group without bigalloc",
        ));
    }
    let ipg = le32(raw, sb::INODES_PER_GROUP);
    if ipg == 0 || ipg > bits_per_block || !ipg.is_multiple_of(8) {
        return Err(corrupt(
            "s_inodes_per_group",
            None,
            ipg.into(),
            "must be a nonzero multiple of 8 no larger than 8 × block size",
        ));
    }
    let groups64 = (blocks_count - u64::from(first_data_block)).div_ceil(u64::from(bpg));
    let group_count = u32::try_from(groups64)
        .map_err(|_| corrupt("s_blocks_count", None, blocks_count, "too many groups"))?;
    let inodes_count = le32(raw, sb::INODES_COUNT);
    if u64::from(inodes_count) != groups64 * u64::from(ipg) {
        return Err(corrupt(
            "s_inodes_count",
            None,
            inodes_count.into(),
            "differs from groups × s_inodes_per_group",
        ));
    }
    let (inode_size, first_ino) = if rev == 0 {
        (128, 11)
    } else {
        (
            u32::from(le16(raw, sb::INODE_SIZE)),
            le32(raw, sb::FIRST_INO),
        )
    };
    if inode_size < 128 || !inode_size.is_power_of_two() || inode_size > block_size {
        return Err(corrupt(
            "s_inode_size",
            None,
            inode_size.into(),
            "must be a power of two from 128 to the block size",
        ));
    }
    if first_ino < 11 || first_ino > inodes_count {
        return Err(corrupt(
            "s_first_ino",
            None,
            first_ino.into(),
            "must be at least 11 and at most s_inodes_count",
        ));
    }
    let inode_blocks_per_group =
        (u64::from(ipg) * u64::from(inode_size)).div_ceil(u64::from(block_size)) as u32;
    let desc_size = if has_64bit {
        let d = u32::from(le16(raw, sb::DESC_SIZE));
        if !(64..=1024).contains(&d) || !d.is_power_of_two() {
            return Err(corrupt(
                "s_desc_size",
                None,
                d.into(),
                "must be a power of two from 64 to 1024 with 64bit",
            ));
        }
        d
    } else {
        32
    };
    let desc_blocks = (groups64 * u64::from(desc_size)).div_ceil(u64::from(block_size)) as u32;
    let reserved_gdt_blocks = u32::from(le16(raw, sb::RESERVED_GDT));
    if reserved_gdt_blocks > block_size / 4 {
        return Err(corrupt(
            "s_reserved_gdt_blocks",
            None,
            reserved_gdt_blocks.into(),
            "more than one indirect block of entries",
        ));
    }
    // Group 0 must hold the superblock, the descriptor table and the reserved
    // GDT blocks.
    let head = 1 + u64::from(desc_blocks) + u64::from(reserved_gdt_blocks);
    let group0 = (blocks_count - u64::from(first_data_block)).min(u64::from(bpg));
    if head > group0 {
        return Err(corrupt(
            "s_blocks_per_group",
            None,
            bpg.into(),
            "the group descriptor table does not fit in group 0",
        ));
    }
    let needed = blocks_count
        .checked_mul(u64::from(block_size))
        .ok_or(corrupt("s_blocks_count", None, blocks_count, "overflows"))?;
    if image_len < needed {
        return Err(corrupt(
            "s_blocks_count",
            None,
            blocks_count,
            "the image file is shorter than the file system",
        ));
    }
    let mut free_blocks = u64::from(le32(raw, sb::FREE_BLOCKS_LO));
    if has_64bit {
        free_blocks |= u64::from(le32(raw, sb::FREE_BLOCKS_HI)) << 32;
    }
    if free_blocks > blocks_count {
        return Err(corrupt(
            "s_free_blocks_count",
            None,
            free_blocks,
            "larger than s_blocks_count",
        ));
    }
    let free_inodes = le32(raw, sb::FREE_INODES);
    if free_inodes > inodes_count {
        return Err(corrupt(
            "s_free_inodes_count",
            None,
            free_inodes.into(),
            "larger than s_inodes_count",
        ));
    }

    let checksums = if ro_compat & RO_COMPAT_METADATA_CSUM != 0 {
        ChecksumKind::MetadataCsum
    } else if ro_compat & RO_COMPAT_GDT_CSUM != 0 {
        ChecksumKind::GdtCsum
    } else {
        ChecksumKind::None
    };
    let mut uuid = [0u8; 16];
    if let Some(s) = raw.get(sb::UUID..sb::UUID + 16) {
        uuid.copy_from_slice(s);
    }
    let checksum_seed = if checksums == ChecksumKind::MetadataCsum {
        let ty = raw.get(sb::CHECKSUM_TYPE).copied().unwrap_or(0);
        if ty != 1 {
            return Err(corrupt(
                "s_checksum_type",
                None,
                ty.into(),
                "metadata_csum needs checksum type 1 (crc32c)",
            ));
        }
        if incompat & INCOMPAT_CSUM_SEED != 0 {
            le32(raw, sb::CHECKSUM_SEED)
        } else {
            crc32c::raw(!0, &uuid)
        }
    } else {
        0
    };
    let sparse_super2 = (compat & COMPAT_SPARSE_SUPER2 != 0)
        .then(|| [le32(raw, sb::BACKUP_BGS), le32(raw, sb::BACKUP_BGS + 4)]);
    Ok(FsInfo {
        block_size,
        blocks_count,
        first_data_block,
        blocks_per_group: bpg,
        inodes_per_group: ipg,
        inodes_count,
        group_count,
        desc_size,
        desc_blocks,
        reserved_gdt_blocks,
        inode_size,
        inode_blocks_per_group,
        first_ino,
        checksums,
        checksum_seed,
        uuid,
        has_64bit,
        flex_bg: incompat & INCOMPAT_FLEX_BG != 0,
        sparse_super: ro_compat & RO_COMPAT_SPARSE_SUPER != 0,
        sparse_super2,
        has_journal: compat & COMPAT_HAS_JOURNAL != 0,
    })
}

fn check_features(incompat: u32, ro_compat: u32, mode: OpenMode) -> Result<(), Ext4Error> {
    let named = [
        (incompat & INCOMPAT_RECOVER, "needs_recovery"),
        (incompat & INCOMPAT_META_BG, "meta_bg"),
        (incompat & INCOMPAT_JOURNAL_DEV, "journal_dev"),
        (incompat & INCOMPAT_COMPRESSION, "compression"),
        (ro_compat & RO_COMPAT_BIGALLOC, "bigalloc"),
    ];
    if let Some(&(_, feature)) = named.iter().find(|(bit, _)| *bit != 0) {
        return Err(Ext4Error::Unsupported { feature });
    }
    let unknown = incompat & !(INCOMPAT_KNOWN | INCOMPAT_RECOVER | INCOMPAT_META_BG);
    if unknown != 0 {
        return Err(Ext4Error::UnknownFeatures {
            kind: "incompat",
            bits: unknown,
        });
    }
    if mode == OpenMode::ReadWrite {
        let write_only = [
            (incompat & INCOMPAT_MMP, "mmp"),
            (ro_compat & RO_COMPAT_READONLY, "read-only"),
            (ro_compat & RO_COMPAT_HAS_SNAPSHOT, "snapshot"),
            // Writes would leave the quota files' usage behind (e2fsck:
            // "Usage inconsistent"); reading needs nothing of them.
            (ro_compat & RO_COMPAT_QUOTA, "quota"),
        ];
        if let Some(&(_, feature)) = write_only.iter().find(|(bit, _)| *bit != 0) {
            return Err(Ext4Error::Unsupported { feature });
        }
        let unknown = ro_compat & !RO_COMPAT_KNOWN;
        if unknown != 0 {
            return Err(Ext4Error::UnknownFeatures {
                kind: "ro_compat",
                bits: unknown,
            });
        }
    }
    Ok(())
}

/// The descriptor checksum e2fsprogs computes (`ext2fs_group_desc_csum`):
/// metadata_csum: low 16 bits of raw CRC-32C over the group number and the
/// descriptor with `bg_checksum` zeroed; gdt_csum: CRC-16 over the UUID, the
/// group number and the descriptor without `bg_checksum`.
pub(crate) fn desc_checksum(info: &FsInfo, group: u32, desc: &[u8]) -> u16 {
    let size = (info.desc_size as usize).min(desc.len());
    let desc = &desc[..size];
    match info.checksums {
        ChecksumKind::None => 0,
        ChecksumKind::MetadataCsum => {
            super::raw::desc_checksum_crc32c(info.checksum_seed, group, desc)
        }
        ChecksumKind::GdtCsum => super::raw::desc_checksum_crc16(&info.uuid, group, desc),
    }
}

/// Read-only view of one group descriptor's fields.
#[derive(Clone, Copy)]
pub(crate) struct Desc<'a> {
    pub(crate) raw: &'a [u8],
    pub(crate) wide: bool,
}

impl Desc<'_> {
    fn lo_hi32(&self, lo: usize, hi: usize) -> u64 {
        let mut v = u64::from(le32(self.raw, lo));
        if self.wide {
            v |= u64::from(le32(self.raw, hi)) << 32;
        }
        v
    }
    fn lo_hi16(&self, lo: usize, hi: usize) -> u32 {
        let mut v = u32::from(le16(self.raw, lo));
        if self.wide {
            v |= u32::from(le16(self.raw, hi)) << 16;
        }
        v
    }
    pub(crate) fn block_bitmap(&self) -> u64 {
        self.lo_hi32(bg::BLOCK_BITMAP_LO, bg::BLOCK_BITMAP_HI)
    }
    pub(crate) fn inode_bitmap(&self) -> u64 {
        self.lo_hi32(bg::INODE_BITMAP_LO, bg::INODE_BITMAP_HI)
    }
    pub(crate) fn inode_table(&self) -> u64 {
        self.lo_hi32(bg::INODE_TABLE_LO, bg::INODE_TABLE_HI)
    }
    pub(crate) fn free_blocks(&self) -> u32 {
        self.lo_hi16(bg::FREE_BLOCKS_LO, bg::FREE_BLOCKS_HI)
    }
    pub(crate) fn free_inodes(&self) -> u32 {
        self.lo_hi16(bg::FREE_INODES_LO, bg::FREE_INODES_HI)
    }
    pub(crate) fn used_dirs(&self) -> u32 {
        self.lo_hi16(bg::USED_DIRS_LO, bg::USED_DIRS_HI)
    }
    pub(crate) fn itable_unused(&self) -> u32 {
        self.lo_hi16(bg::ITABLE_UNUSED_LO, bg::ITABLE_UNUSED_HI)
    }
    pub(crate) fn flags(&self) -> u16 {
        le16(self.raw, bg::FLAGS)
    }
    pub(crate) fn block_bitmap_csum(&self) -> u32 {
        self.lo_hi16(bg::BLOCK_BITMAP_CSUM_LO, bg::BLOCK_BITMAP_CSUM_HI)
    }
    pub(crate) fn inode_bitmap_csum(&self) -> u32 {
        self.lo_hi16(bg::INODE_BITMAP_CSUM_LO, bg::INODE_BITMAP_CSUM_HI)
    }
    pub(crate) fn checksum(&self) -> u16 {
        le16(self.raw, bg::CHECKSUM)
    }
}

/// Writable view of one group descriptor.
pub(crate) struct DescMut<'a> {
    pub(crate) raw: &'a mut [u8],
    pub(crate) wide: bool,
}

impl DescMut<'_> {
    fn put_lo_hi16(&mut self, lo: usize, hi: usize, v: u32) {
        put16(self.raw, lo, v as u16);
        if self.wide {
            put16(self.raw, hi, (v >> 16) as u16);
        }
    }
    pub(crate) fn set_free_blocks(&mut self, v: u32) {
        self.put_lo_hi16(bg::FREE_BLOCKS_LO, bg::FREE_BLOCKS_HI, v);
    }
    pub(crate) fn set_free_inodes(&mut self, v: u32) {
        self.put_lo_hi16(bg::FREE_INODES_LO, bg::FREE_INODES_HI, v);
    }
    pub(crate) fn set_used_dirs(&mut self, v: u32) {
        self.put_lo_hi16(bg::USED_DIRS_LO, bg::USED_DIRS_HI, v);
    }
    pub(crate) fn set_itable_unused(&mut self, v: u32) {
        self.put_lo_hi16(bg::ITABLE_UNUSED_LO, bg::ITABLE_UNUSED_HI, v);
    }
    pub(crate) fn set_flags(&mut self, v: u16) {
        put16(self.raw, bg::FLAGS, v);
    }
    pub(crate) fn set_block_bitmap_csum(&mut self, v: u32) {
        self.put_lo_hi16(bg::BLOCK_BITMAP_CSUM_LO, bg::BLOCK_BITMAP_CSUM_HI, v);
    }
    pub(crate) fn set_inode_bitmap_csum(&mut self, v: u32) {
        self.put_lo_hi16(bg::INODE_BITMAP_CSUM_LO, bg::INODE_BITMAP_CSUM_HI, v);
    }
    pub(crate) fn set_checksum(&mut self, v: u16) {
        put16(self.raw, bg::CHECKSUM, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_arc_check_value() {
        // CRC-16/ARC of "123456789" from 0 is 0xBB3D.
        assert_eq!(crate::ext4::raw::crc16(0, b"123456789"), 0xBB3D);
    }

    #[test]
    fn power_of_tests() {
        let backups: Vec<u32> = (2..400)
            .filter(|&g| {
                g % 2 == 1 && (is_power_of(g, 3) || is_power_of(g, 5) || is_power_of(g, 7))
            })
            .collect();
        assert_eq!(backups, [3, 5, 7, 9, 25, 27, 49, 81, 125, 243, 343]);
    }
}
