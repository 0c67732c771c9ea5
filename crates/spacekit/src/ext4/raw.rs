//! ext4's on-disk records as plain functions over bytes: little-endian
//! field access, the field offsets of the superblock, group descriptor and
//! inode, and every checksum e2fsprogs keeps over them. No I/O and no state:
//! the library, the benchmarks' image model, the fuzz checks and the tests
//! all read and sign records through this one module.
//!
//! Accessors never panic: a read past the end of the slice reads zeros, a
//! write past it is dropped (the callers size their buffers from the
//! superblock, which [`super::Image::open`] checks).
//!
//! ```
//! use spacekit::ext4::raw;
//!
//! let mut sb = vec![0u8; 1024];
//! raw::put16(&mut sb, raw::sb::MAGIC, 0xEF53);
//! assert_eq!(raw::le16(&sb, raw::sb::MAGIC), 0xEF53);
//! let c = raw::superblock_checksum(&sb);
//! raw::put32(&mut sb, raw::sb::CHECKSUM, c);
//! assert_eq!(raw::superblock_checksum(&sb), c); // the checksum field is not covered
//! ```

#![allow(missing_docs)] // field offsets are named as in the kernel's structs

use crate::crc32c;

/// Superblock field offsets (`struct ext4_super_block`).
pub mod sb {
    pub const INODES_COUNT: usize = 0x00;
    pub const BLOCKS_COUNT_LO: usize = 0x04;
    pub const FREE_BLOCKS_LO: usize = 0x0C;
    pub const FREE_INODES: usize = 0x10;
    pub const FIRST_DATA_BLOCK: usize = 0x14;
    pub const LOG_BLOCK_SIZE: usize = 0x18;
    pub const LOG_CLUSTER_SIZE: usize = 0x1C;
    pub const BLOCKS_PER_GROUP: usize = 0x20;
    pub const CLUSTERS_PER_GROUP: usize = 0x24;
    pub const INODES_PER_GROUP: usize = 0x28;
    pub const MAGIC: usize = 0x38;
    pub const REV_LEVEL: usize = 0x4C;
    pub const FIRST_INO: usize = 0x54;
    pub const INODE_SIZE: usize = 0x58;
    pub const COMPAT: usize = 0x5C;
    pub const INCOMPAT: usize = 0x60;
    pub const RO_COMPAT: usize = 0x64;
    pub const UUID: usize = 0x68;
    pub const RESERVED_GDT: usize = 0xCE;
    pub const DESC_SIZE: usize = 0xFE;
    pub const BLOCKS_COUNT_HI: usize = 0x150;
    pub const FREE_BLOCKS_HI: usize = 0x158;
    pub const CHECKSUM_TYPE: usize = 0x175;
    pub const BACKUP_BGS: usize = 0x24C;
    pub const CHECKSUM_SEED: usize = 0x270;
    pub const CHECKSUM: usize = 0x3FC;
}

/// Group descriptor field offsets (`struct ext4_group_desc`).
pub mod bg {
    pub const BLOCK_BITMAP_LO: usize = 0x00;
    pub const INODE_BITMAP_LO: usize = 0x04;
    pub const INODE_TABLE_LO: usize = 0x08;
    pub const FREE_BLOCKS_LO: usize = 0x0C;
    pub const FREE_INODES_LO: usize = 0x0E;
    pub const USED_DIRS_LO: usize = 0x10;
    pub const FLAGS: usize = 0x12;
    pub const BLOCK_BITMAP_CSUM_LO: usize = 0x18;
    pub const INODE_BITMAP_CSUM_LO: usize = 0x1A;
    pub const ITABLE_UNUSED_LO: usize = 0x1C;
    pub const CHECKSUM: usize = 0x1E;
    pub const BLOCK_BITMAP_HI: usize = 0x20;
    pub const INODE_BITMAP_HI: usize = 0x24;
    pub const INODE_TABLE_HI: usize = 0x28;
    pub const FREE_BLOCKS_HI: usize = 0x2C;
    pub const FREE_INODES_HI: usize = 0x2E;
    pub const USED_DIRS_HI: usize = 0x30;
    pub const ITABLE_UNUSED_HI: usize = 0x32;
    pub const BLOCK_BITMAP_CSUM_HI: usize = 0x38;
    pub const INODE_BITMAP_CSUM_HI: usize = 0x3A;
}

/// Inode field offsets (`struct ext4_inode`).
pub mod inode {
    pub const MODE: usize = 0x00;
    pub const UID: usize = 0x02;
    pub const SIZE_LO: usize = 0x04;
    pub const ATIME: usize = 0x08;
    pub const CTIME: usize = 0x0C;
    pub const MTIME: usize = 0x10;
    pub const DTIME: usize = 0x14;
    pub const GID: usize = 0x18;
    pub const LINKS_COUNT: usize = 0x1A;
    pub const BLOCKS_LO: usize = 0x1C;
    pub const FLAGS: usize = 0x20;
    pub const BLOCK: usize = 0x28;
    pub const GENERATION: usize = 0x64;
    pub const FILE_ACL_LO: usize = 0x68;
    pub const SIZE_HIGH: usize = 0x6C;
    pub const BLOCKS_HIGH: usize = 0x74;
    pub const FILE_ACL_HIGH: usize = 0x76;
    pub const UID_HIGH: usize = 0x78;
    pub const GID_HIGH: usize = 0x7A;
    pub const CHECKSUM_LO: usize = 0x7C;
    pub const EXTRA_ISIZE: usize = 0x80;
    pub const CHECKSUM_HI: usize = 0x82;
    pub const CTIME_EXTRA: usize = 0x84;
    pub const MTIME_EXTRA: usize = 0x88;
    pub const ATIME_EXTRA: usize = 0x8C;
    pub const CRTIME: usize = 0x90;
    pub const CRTIME_EXTRA: usize = 0x94;
}

pub fn le16(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(off..off + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

pub fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

pub fn put16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = b.get_mut(off..off + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

pub fn put32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | u64::from(le32(b, off + 4)) << 32
}

pub fn put64(b: &mut [u8], off: usize, v: u64) {
    put32(b, off, v as u32);
    put32(b, off + 4, (v >> 32) as u32);
}

/// e2fsprogs' `ext2fs_crc16`: CRC-16/ARC (reflected polynomial 0xA001), no
/// final inversion.
pub fn crc16(crc: u16, bytes: &[u8]) -> u16 {
    let mut crc = crc;
    for &b in bytes {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xA001
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// The superblock checksum: raw CRC-32C from `!0` over the first 0x3FC bytes.
pub fn superblock_checksum(raw: &[u8]) -> u32 {
    crc32c::raw(!0, raw.get(..sb::CHECKSUM).unwrap_or(raw))
}

/// The seed of every metadata_csum checksum of the file system whose
/// superblock is `sb`: `s_checksum_seed` with `metadata_csum_seed`
/// (incompat 0x2000), else raw CRC-32C of `s_uuid` from `!0`.
pub fn checksum_seed(sb: &[u8]) -> u32 {
    if le32(sb, self::sb::INCOMPAT) & 0x2000 != 0 {
        le32(sb, self::sb::CHECKSUM_SEED)
    } else {
        crc32c::raw(
            !0,
            sb.get(self::sb::UUID..self::sb::UUID + 16).unwrap_or(&[]),
        )
    }
}

/// The metadata_csum descriptor checksum (e2fsprogs'
/// `ext2fs_group_desc_csum`): low 16 bits of raw CRC-32C from `seed` over
/// `le32(group)` and the descriptor `desc` with `bg_checksum` read as zero.
pub fn desc_checksum_crc32c(seed: u32, group: u32, desc: &[u8]) -> u16 {
    let crc = crc32c::raw(seed, &group.to_le_bytes());
    let head = desc.get(..bg::CHECKSUM).unwrap_or(desc);
    let crc = crc32c::raw(crc, head);
    let crc = crc32c::raw(crc, &[0, 0]);
    let crc = crc32c::raw(crc, desc.get(bg::CHECKSUM + 2..).unwrap_or(&[]));
    (crc & 0xFFFF) as u16
}

/// The gdt_csum (`uninit_bg`) descriptor checksum: CRC-16 over `uuid`,
/// `le32(group)` and the descriptor without `bg_checksum`.
pub fn desc_checksum_crc16(uuid: &[u8], group: u32, desc: &[u8]) -> u16 {
    let crc = crc16(!0, uuid);
    let crc = crc16(crc, &group.to_le_bytes());
    let crc = crc16(crc, desc.get(..bg::CHECKSUM).unwrap_or(desc));
    crc16(crc, desc.get(bg::CHECKSUM + 2..).unwrap_or(&[]))
}

/// The seed of inode `ino`'s checksums (inode, extent blocks, directory
/// blocks): raw CRC-32C of `le32(ino)` then `le32(generation)` from the file
/// system's seed — the kernel's `ei->i_csum_seed`.
pub fn inode_seed(fs_seed: u32, ino: u32, generation: u32) -> u32 {
    let crc = crc32c::raw(fs_seed, &ino.to_le_bytes());
    crc32c::raw(crc, &generation.to_le_bytes())
}

/// Whether the inode has `i_checksum_hi`: larger than 128 bytes with
/// `i_extra_isize` covering 0x82..0x84 (e2fsprogs'
/// `EXT4_INODE_CSUM_HI_EXTRA_END` = 4).
pub fn has_checksum_hi(raw: &[u8]) -> bool {
    raw.len() > 128 && le16(raw, inode::EXTRA_ISIZE) >= 4
}

/// The byte ranges the checksum reads as zero.
pub(crate) fn zeroed_ranges(raw: &[u8]) -> [Option<(usize, usize)>; 2] {
    [
        Some((inode::CHECKSUM_LO, inode::CHECKSUM_LO + 2)),
        has_checksum_hi(raw).then_some((inode::CHECKSUM_HI, inode::CHECKSUM_HI + 2)),
    ]
}

/// The mask of the stored checksum bits.
pub fn checksum_mask(raw: &[u8]) -> u32 {
    if has_checksum_hi(raw) {
        !0
    } else {
        0xFFFF
    }
}

/// The full 32-bit raw CRC-32C of the inode from `seed_i`, with the checksum
/// fields read as zero (see the module documentation).
pub fn inode_crc(seed_i: u32, raw: &[u8]) -> u32 {
    let mut crc = seed_i;
    let mut at = 0;
    for (s, e) in zeroed_ranges(raw).into_iter().flatten() {
        let e = e.min(raw.len());
        if s >= e {
            continue;
        }
        crc = crc32c::raw(crc, raw.get(at..s).unwrap_or(&[]));
        crc = crc32c::raw(crc, &[0u8; 2][..e - s]);
        at = e;
    }
    crc32c::raw(crc, raw.get(at..).unwrap_or(&[]))
}

/// The checksum as stored: low 16 bits, and high 16 if `i_checksum_hi`
/// exists.
pub fn stored_checksum(raw: &[u8]) -> u32 {
    let mut v = u32::from(le16(raw, inode::CHECKSUM_LO));
    if has_checksum_hi(raw) {
        v |= u32::from(le16(raw, inode::CHECKSUM_HI)) << 16;
    }
    v
}

pub fn store_checksum(raw: &mut [u8], crc: u32) {
    put16(raw, inode::CHECKSUM_LO, crc as u16);
    if has_checksum_hi(raw) {
        put16(raw, inode::CHECKSUM_HI, (crc >> 16) as u16);
    }
}
