//! Inodes: finding one in its group's inode table, reading its fields,
//! checking its checksum, and patching byte ranges of it with the checksum
//! kept current by [`crc32c::splice`] over the changed bytes only.
//!
//! # The inode checksum (metadata_csum)
//!
//! `seed_i = raw(raw(fs_seed, le32(ino)), le32(i_generation))`, then the raw
//! CRC-32C from `seed_i` over **all `s_inode_size` bytes** of the inode with
//! `l_i_checksum_lo` (0x7C) read as zero and, when the inode is larger than
//! 128 bytes and `i_extra_isize >= 4` (so the field at 0x82..0x84 lies
//! inside the extra fields), `i_checksum_hi` (0x82) read as zero too. The low
//! 16 bits are stored at 0x7C, the high 16 at 0x82 when that field exists;
//! otherwise the checksum is 16 bits. This is what e2fsprogs 1.47 writes
//! (`ext2fs_inode_csum`), checked against every in-use inode of the test
//! images (128-, 256- and 1024-byte inodes, and an inode whose
//! `i_extra_isize` was set to 0 by debugfs).
//!
//! As e2fsprogs does, an inode whose bytes are all zero (never used) counts
//! as having a good checksum.

pub(super) mod copy;
pub(super) mod data;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod extent;
#[cfg(not(any(test, feature = "testing")))]
pub(super) mod extent;
pub(super) mod file;
pub(super) mod space;
pub(super) mod xattr;

use std::vec;
use std::vec::Vec;

use crate::bitmap::Bits;
use crate::crc32c;

use crate::ext4::error::{invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::layout::{self, le16, le32, ChecksumKind};
pub(crate) use crate::ext4::raw::inode as off;
use crate::ext4::raw::zeroed_ranges;
pub(crate) use crate::ext4::raw::{
    checksum_mask, has_checksum_hi, inode_crc, store_checksum, stored_checksum,
};

/// The size of the original (revision 0) inode; the extra fields follow.
const GOOD_OLD_INODE_SIZE: usize = 128;
/// Bytes of `i_block`: the extent root or the block map.
pub const I_BLOCK_LEN: usize = 60;
/// `i_flags`: `i_blocks` counts file-system blocks, not 512-byte sectors.
const HUGE_FILE_FL: u32 = 0x4_0000;
/// `i_flags`: the inode uses extents.
const EXTENTS_FL: u32 = 0x8_0000;
/// ro_compat `huge_file`: `l_i_blocks_high` and `HUGE_FILE_FL` mean
/// something.
const RO_COMPAT_HUGE_FILE: u32 = 0x8;

/// One inode as read by [`Image::inode`] (changes not yet flushed included).
///
/// Field names follow `struct ext4_inode`; split fields (`_lo` / `_high`)
/// are joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// The inode number.
    pub number: u32,
    /// `i_mode`: file type (`mode & 0xF000`) and permission bits.
    pub mode: u16,
    /// `i_uid` with `l_i_uid_high`.
    pub uid: u32,
    /// `i_gid` with `l_i_gid_high`.
    pub gid: u32,
    /// `i_size_lo` with `i_size_high`, in bytes.
    pub size: u64,
    /// `i_links_count`.
    pub links_count: u16,
    /// `i_blocks_lo` with `l_i_blocks_high` (with the `huge_file` feature),
    /// always in 512-byte units as debugfs's "Blockcount": an inode with
    /// `HUGE_FILE_FL` counts file-system blocks on disk, converted here.
    pub blocks: u64,
    /// `i_flags` (`EXTENTS_FL` 0x80000, `INDEX_FL` 0x1000, ...).
    pub flags: u32,
    /// `i_generation`.
    pub generation: u32,
    /// `i_block`: the extent tree root (with `EXTENTS_FL`) or block map.
    pub block: [u8; I_BLOCK_LEN],
    /// `i_file_acl_lo` with `l_i_file_acl_high`: the extended-attribute
    /// block, 0 for none.
    pub file_acl: u64,
    /// `i_extra_isize` (0 for 128-byte inodes).
    pub extra_isize: u16,
    /// `i_atime` (seconds, low 32 bits).
    pub atime: u32,
    /// `i_ctime` (seconds, low 32 bits).
    pub ctime: u32,
    /// `i_mtime` (seconds, low 32 bits).
    pub mtime: u32,
    /// `i_dtime`.
    pub dtime: u32,
    /// The stored checksum (16 bits when `i_checksum_hi` does not exist);
    /// `None` without metadata_csum.
    pub stored_checksum: Option<u32>,
    /// The checksum computed from the inode's bytes, in the stored width;
    /// `None` without metadata_csum.
    pub computed_checksum: Option<u32>,
    /// Whether the checksum verifies: true without metadata_csum and for an
    /// all-zero (never used) inode. A bad checksum is reported here rather
    /// than as an error, so a damaged inode can still be looked at (as
    /// debugfs does); [`Image::verify_inodes`] lists them.
    pub checksum_ok: bool,
    raw: Vec<u8>,
}

impl Inode {
    /// The `s_inode_size` bytes of the inode, as they stand.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The file type bits of `i_mode` (`S_IFREG` 0x8000, `S_IFDIR` 0x4000,
    /// `S_IFLNK` 0xA000, ...).
    pub fn file_type(&self) -> u16 {
        self.mode & 0xF000
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == 0x4000
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == 0x8000
    }

    /// `EXTENTS_FL`: `i_block` holds an extent tree root.
    pub fn has_extents(&self) -> bool {
        self.flags & EXTENTS_FL != 0
    }
}

/// An in-use inode whose checksum does not verify, from
/// [`Image::verify_inodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeMismatch {
    /// The inode number.
    pub ino: u32,
    /// The stored checksum (16 or 32 bits).
    pub stored: u32,
    /// The checksum computed from the inode's bytes, in the same width.
    pub computed: u32,
}

impl std::fmt::Display for InodeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "inode {}: checksum stored {:#x}, computed {:#x}",
            self.ino, self.stored, self.computed
        )
    }
}

/// New timestamps for [`Image::set_inode_times`]: `None` keeps a field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodeTimes {
    /// `i_atime`, seconds since the epoch.
    pub atime: Option<u32>,
    /// `i_ctime`, seconds since the epoch.
    pub ctime: Option<u32>,
    /// `i_mtime`, seconds since the epoch.
    pub mtime: Option<u32>,
}

/// `bytes` with the parts inside the checksum fields of `raw` (as laid out
/// in `raw`) read as zero; `bytes` sits at `offset`.
fn zero_checksum_fields(raw: &[u8], offset: usize, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let end = offset + bytes.len();
    for (s, e) in zeroed_ranges(raw).into_iter().flatten() {
        let (s, e) = (s.max(offset), e.min(end));
        if s < e {
            out[s - offset..e - offset].fill(0);
        }
    }
    out
}

/// Why [`patch_inode`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchError {
    /// A change ends past the inode.
    OutOfRange { offset: usize, len: usize },
    /// The change moves `i_checksum_hi` in or out of existence on an inode
    /// whose checksum does not verify, so it cannot be carried over.
    BadChecksum,
}

/// Applies `changes` (`(offset, bytes)`, in order) to the inode `raw` and,
/// with `seed_i` (metadata_csum), updates its stored checksum:
///
/// * by a full computation when the old checksum verifies (the common
///   case: one CRC of the old inode and one of the new, cheaper than the
///   splices, and the same result), when the changes cover the whole
///   inode, or when the old inode was all zero (never used: its stored 0
///   is no checksum);
/// * else by [`crc32c::splice`] from the stored checksum over each changed
///   range (with the checksum fields read as zero in both the old and the
///   new bytes): a checksum that was wrong stays wrong by the same amount,
///   so a damaged inode is never silently re-signed. With a 16-bit
///   checksum the splice from the 16 stored bits gives the right 16 bits,
///   since a splice only XORs a delta into the CRC. A change that adds or
///   removes `i_checksum_hi` is refused there.
///
/// Nothing changes on an error.
pub(crate) fn patch_inode(
    raw: &mut [u8],
    seed_i: Option<u32>,
    changes: &[(usize, &[u8])],
) -> Result<(), PatchError> {
    let n = raw.len();
    for &(offset, bytes) in changes {
        if offset.checked_add(bytes.len()).is_none_or(|e| e > n) {
            return Err(PatchError::OutOfRange {
                offset,
                len: bytes.len(),
            });
        }
    }
    let Some(seed_i) = seed_i else {
        for &(offset, bytes) in changes {
            raw[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        return Ok(());
    };
    let mut new = raw.to_vec();
    for &(offset, bytes) in changes {
        new[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    let covered = || {
        let mut covered = vec![false; n];
        for &(offset, bytes) in changes {
            covered[offset..offset + bytes.len()].fill(true);
        }
        covered.iter().all(|&c| c)
    };
    let full = inode_crc(seed_i, raw) & checksum_mask(raw) == stored_checksum(raw)
        || raw.iter().all(|&b| b == 0)
        || covered()
        || if has_checksum_hi(raw) != has_checksum_hi(&new) {
            return Err(PatchError::BadChecksum);
        } else {
            false
        };
    let crc = if full {
        inode_crc(seed_i, &new)
    } else {
        // The hi field's existence does not change, so the zeroed ranges
        // are the same before and after every step.
        let mut crc = stored_checksum(raw);
        let mut cur = raw.to_vec();
        for &(offset, bytes) in changes {
            let old_z = zero_checksum_fields(&cur, offset, &cur[offset..offset + bytes.len()]);
            let new_z = zero_checksum_fields(&cur, offset, bytes);
            cur[offset..offset + bytes.len()].copy_from_slice(bytes);
            // Lengths agree and the range is inside the inode (checked
            // above), so the splice cannot fail.
            crc = crc32c::splice(crc, n as u64, offset as u64, &old_z, &new_z).unwrap_or(crc);
        }
        crc
    };
    store_checksum(&mut new, crc);
    raw.copy_from_slice(&new);
    Ok(())
}

/// The epoch bits of a `*_extra` time field for `secs` (the kernel's
/// `ext4_encode_extra_time` with 0 ns): 1 when the seconds do not fit a
/// signed 32-bit `i_*time`.
fn extra_time(secs: u32) -> u32 {
    u32::from(secs > i32::MAX as u32)
}

impl Image {
    /// The seed of inode `ino`'s checksums (inode, extent blocks, directory
    /// blocks): raw CRC-32C of `le32(ino)` then `le32(generation)` from the
    /// file system's checksum seed — the kernel's `ei->i_csum_seed`.
    pub(crate) fn inode_seed(&self, ino: u32, generation: u32) -> u32 {
        crate::ext4::raw::inode_seed(self.info.checksum_seed, ino, generation)
    }

    /// Where inode `ino` lives: its inode-table block and byte offset in it.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for 0 or past `s_inodes_count`.
    pub(crate) fn inode_location(&self, ino: u32) -> Result<(u64, usize), Ext4Error> {
        let (g, index) = self.info.group_of_inode(ino).ok_or(invalid(
            "ino",
            ino.into(),
            "must be from 1 to s_inodes_count",
        ))?;
        let bs = u64::from(self.info.block_size);
        let byte = u64::from(index) * u64::from(self.info.inode_size);
        let block = self.desc(g).inode_table() + byte / bs;
        Ok((block, (byte % bs) as usize))
    }

    /// The `s_inode_size` bytes of inode `ino`, as they stand.
    pub(crate) fn inode_raw(&self, ino: u32) -> Result<Vec<u8>, Ext4Error> {
        let (block, at) = self.inode_location(ino)?;
        let data = self.read_block(block)?;
        let size = self.info.inode_size as usize;
        Ok(data.get(at..at + size).unwrap_or(&[]).to_vec())
    }

    /// The checksum state of an inode's bytes: `(stored, computed, ok)`.
    fn inode_checksum_state(&self, ino: u32, raw: &[u8]) -> (Option<u32>, Option<u32>, bool) {
        if self.info.checksums != ChecksumKind::MetadataCsum {
            return (None, None, true);
        }
        let seed_i = self.inode_seed(ino, le32(raw, off::GENERATION));
        let stored = stored_checksum(raw);
        let computed = inode_crc(seed_i, raw) & checksum_mask(raw);
        let ok = stored == computed || raw.iter().all(|&b| b == 0);
        (Some(stored), Some(computed), ok)
    }

    /// Reads inode `ino` (including changes not yet flushed): group
    /// `(ino - 1) / s_inodes_per_group`, index `(ino - 1) %
    /// s_inodes_per_group` of that group's inode table. The kernel's
    /// `__ext4_get_inode_loc` + `ext4_iget`, e2fsprogs'
    /// `ext2fs_read_inode_full`; unlike them a bad checksum is not an error
    /// but [`Inode::checksum_ok`] false. The inode is read whether or not
    /// it is in use, as it is on disk (an `INODE_UNINIT` group's table may
    /// hold anything).
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for 0 or past `s_inodes_count`;
    /// [`Ext4Error::Io`] if the inode table cannot be read.
    pub fn inode(&self, ino: u32) -> Result<Inode, Ext4Error> {
        let raw = self.inode_raw(ino)?;
        let (stored_checksum, computed_checksum, checksum_ok) =
            self.inode_checksum_state(ino, &raw);
        let big = raw.len() > GOOD_OLD_INODE_SIZE;
        let ro_compat = le32(&self.sb, layout::sb::RO_COMPAT);
        let huge = ro_compat & RO_COMPAT_HUGE_FILE != 0;
        let flags = le32(&raw, off::FLAGS);
        let mut blocks = u64::from(le32(&raw, off::BLOCKS_LO));
        if huge {
            blocks |= u64::from(le16(&raw, off::BLOCKS_HIGH)) << 32;
            if flags & HUGE_FILE_FL != 0 {
                blocks = blocks.saturating_mul(u64::from(self.info.block_size / 512));
            }
        }
        let mut block = [0u8; I_BLOCK_LEN];
        if let Some(s) = raw.get(off::BLOCK..off::BLOCK + I_BLOCK_LEN) {
            block.copy_from_slice(s);
        }
        Ok(Inode {
            number: ino,
            mode: le16(&raw, off::MODE),
            uid: u32::from(le16(&raw, off::UID)) | u32::from(le16(&raw, off::UID_HIGH)) << 16,
            gid: u32::from(le16(&raw, off::GID)) | u32::from(le16(&raw, off::GID_HIGH)) << 16,
            size: u64::from(le32(&raw, off::SIZE_LO)) | u64::from(le32(&raw, off::SIZE_HIGH)) << 32,
            links_count: le16(&raw, off::LINKS_COUNT),
            blocks,
            flags,
            generation: le32(&raw, off::GENERATION),
            block,
            file_acl: u64::from(le32(&raw, off::FILE_ACL_LO))
                | u64::from(le16(&raw, off::FILE_ACL_HIGH)) << 32,
            extra_isize: if big { le16(&raw, off::EXTRA_ISIZE) } else { 0 },
            atime: le32(&raw, off::ATIME),
            ctime: le32(&raw, off::CTIME),
            mtime: le32(&raw, off::MTIME),
            dtime: le32(&raw, off::DTIME),
            stored_checksum,
            computed_checksum,
            checksum_ok,
            raw,
        })
    }

    /// Patches byte ranges of inode `ino` (`(offset in the inode, bytes)`,
    /// applied in order) and keeps its checksum current by
    /// [`crc32c::splice`] over the changed bytes (see [`patch_inode`]); the
    /// inode-table block goes to the block cache, written by
    /// [`Image::flush`]. Bytes given for the checksum fields are
    /// overwritten by the checksum (with metadata_csum). The kernel's
    /// `ext4_mark_inode_dirty` → `ext4_do_update_inode`, which recomputes the
    /// whole checksum instead.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::BadChecksum`] if the superblock
    /// or a group descriptor fails its checksum, or (`what: "inode"`) if
    /// the inode's checksum fails (unless the change rewrites all of it);
    /// [`Ext4Error::InvalidArgument`] for a bad `ino`, an inode in an
    /// `INODE_UNINIT` group (allocate it first), or a range past
    /// `s_inode_size`; [`Ext4Error::Io`] reading the inode table.
    pub(crate) fn write_inode_fields(
        &mut self,
        ino: u32,
        changes: &[(usize, &[u8])],
    ) -> Result<(), Ext4Error> {
        self.check_writable()?;
        let (block, at) = self.inode_location(ino)?;
        let (g, _) = self.info.group_of_inode(ino).unwrap_or_default();
        if self.inode_uninit(g) {
            return Err(invalid(
                "ino",
                ino.into(),
                "in an INODE_UNINIT group: allocate it first",
            ));
        }
        let size = self.info.inode_size as usize;
        if let [(0, whole)] = changes {
            if whole.len() == size {
                // A fresh inode written whole (a new file in a free slot)
                // owes nothing to the old bytes: no copy of them, its
                // checksum computed in full, straight into its slot.
                let crc = (self.info.checksums == ChecksumKind::MetadataCsum)
                    .then(|| inode_crc(self.inode_seed(ino, le32(whole, off::GENERATION)), whole));
                let slot = &mut self.inode_table_block_mut(block)?[at..at + size];
                slot.copy_from_slice(whole);
                if let Some(crc) = crc {
                    store_checksum(slot, crc);
                }
                return Ok(());
            }
        }
        // The inode's bytes only: the block is patched in place below.
        let raw = self
            .read_block(block)?
            .get(at..at + size)
            .ok_or(invalid("ino", ino.into(), "inode outside its table block"))?
            .to_vec();
        let raw = &raw[..];
        let mut new = raw.to_vec();
        patch_inode(&mut new, None, changes).map_err(|e| patch_error(e, g))?;
        if self.info.checksums == ChecksumKind::MetadataCsum {
            let old_gen = le32(raw, off::GENERATION);
            let new_gen = le32(&new, off::GENERATION);
            if !self.inode_checksum_state(ino, raw).2 {
                // A damaged inode is refused, never patched: the kernel's
                // `ext4_iget` fails on it too (EFSBADCRC), and a splice
                // would only carry the damage along.
                return Err(Ext4Error::BadChecksum {
                    what: "inode",
                    group: Some(g),
                });
            }
            if old_gen == new_gen {
                new.copy_from_slice(raw);
                let seed = self.inode_seed(ino, old_gen);
                patch_inode(&mut new, Some(seed), changes).map_err(|e| patch_error(e, g))?;
            } else {
                let crc = inode_crc(self.inode_seed(ino, new_gen), &new);
                store_checksum(&mut new, crc);
            }
        }
        self.inode_table_block_mut(block)?[at..at + size].copy_from_slice(&new);
        Ok(())
    }

    /// Sets inode `ino`'s timestamps (seconds; `None` keeps one): the low
    /// 32 bits, and with large inodes the `*_extra` field (epoch bits, 0
    /// ns). Kept in memory until [`Image::flush`]. Like `utimensat` /
    /// the kernel's `ext4_setattr` with `ATTR_ATIME | ATTR_MTIME`, but also
    /// for ctime and without touching anything else.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::InvalidArgument`] for a bad
    /// `ino` or one in an `INODE_UNINIT` group; [`Ext4Error::BadChecksum`] if
    /// the superblock fails its checksum; [`Ext4Error::Io`] reading the
    /// inode table; [`Ext4Error::BadChecksum`] (`what: "inode"`) for an
    /// inode that fails its checksum (it is never patched).
    pub fn set_inode_times(&mut self, ino: u32, times: InodeTimes) -> Result<(), Ext4Error> {
        self.check_writable()?;
        let raw = self.inode_raw(ino)?;
        let extra = if raw.len() > GOOD_OLD_INODE_SIZE {
            usize::from(le16(&raw, off::EXTRA_ISIZE))
        } else {
            0
        };
        let fields = [
            (times.atime, off::ATIME, off::ATIME_EXTRA),
            (times.ctime, off::CTIME, off::CTIME_EXTRA),
            (times.mtime, off::MTIME, off::MTIME_EXTRA),
        ];
        let mut bytes = Vec::new();
        for (t, lo, hi) in fields {
            if let Some(t) = t {
                bytes.push((lo, t.to_le_bytes()));
                if hi + 4 <= GOOD_OLD_INODE_SIZE + extra && hi + 4 <= raw.len() {
                    // No nanoseconds; the epoch bits for `t`.
                    bytes.push((hi, extra_time(t).to_le_bytes()));
                }
            }
        }
        let changes: Vec<(usize, &[u8])> = bytes.iter().map(|(o, b)| (*o, &b[..])).collect();
        self.write_inode_fields(ino, &changes)
    }

    /// Checks the checksum of every in-use inode (per the inode bitmaps;
    /// `INODE_UNINIT` groups have none) and returns those that fail, in
    /// inode order. Empty without metadata_csum. The inode part of
    /// `e2fsck`'s pass 1 checksum checks (which [`Image::verify`] leaves
    /// out).
    ///
    /// # Errors
    /// [`Ext4Error::Io`] reading a bitmap or an inode table.
    pub fn verify_inodes(&self) -> Result<Vec<InodeMismatch>, Ext4Error> {
        let mut out = Vec::new();
        if self.info.checksums != ChecksumKind::MetadataCsum {
            return Ok(out);
        }
        let ipg = self.info.inodes_per_group;
        let size = self.info.inode_size as usize;
        let bs = self.info.block_size as usize;
        for g in 0..self.info.group_count {
            if self.inode_uninit(g) {
                continue;
            }
            let used: Vec<usize> = {
                let l = self.inode_bitmap(g)?;
                let view = l.view(ipg as usize)?;
                view.set_runs(0).flat_map(|r| r.start..r.end).collect()
            };
            let table = self.desc(g).inode_table();
            let mut cached: Option<(u64, Vec<u8>)> = None;
            for i in used {
                let ino = g * ipg + i as u32 + 1;
                let byte = i * size;
                let block = table + (byte / bs) as u64;
                if cached.as_ref().is_none_or(|(b, _)| *b != block) {
                    cached = Some((block, self.read_block(block)?.into_owned()));
                }
                let Some((_, data)) = cached.as_ref() else {
                    continue;
                };
                let at = byte % bs;
                let raw = data.get(at..at + size).unwrap_or(&[]);
                if let (Some(stored), Some(computed), false) = self.inode_checksum_state(ino, raw) {
                    out.push(InodeMismatch {
                        ino,
                        stored,
                        computed,
                    });
                }
            }
        }
        Ok(out)
    }
}

fn patch_error(e: PatchError, group: u32) -> Ext4Error {
    match e {
        PatchError::OutOfRange { offset, .. } => {
            invalid("offset", offset as u64, "the change ends past s_inode_size")
        }
        PatchError::BadChecksum => Ext4Error::BadChecksum {
            what: "inode",
            group: Some(group),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::raw::put16;
    use crate::test_rng::Rng;

    /// A random inode of `size` bytes with `i_extra_isize = extra` and a
    /// correct checksum under `seed`.
    fn random_inode(rng: &mut Rng, size: usize, extra: u16, seed: u32) -> Vec<u8> {
        let mut raw: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        if size > GOOD_OLD_INODE_SIZE {
            put16(&mut raw, off::EXTRA_ISIZE, extra);
        }
        let crc = inode_crc(seed, &raw);
        store_checksum(&mut raw, crc);
        raw
    }

    /// The byte-at-a-time reference: zero the fields in a copy, one CRC.
    fn reference_crc(seed: u32, raw: &[u8]) -> u32 {
        let mut z = raw.to_vec();
        z[0x7C..0x7E].fill(0);
        if raw.len() > 128 && le16(raw, 0x80) >= 4 {
            z[0x82..0x84].fill(0);
        }
        z.iter().fold(seed, |c, &b| crc32c::raw(c, &[b]))
    }

    #[test]
    fn checksum_matches_reference_in_every_shape() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for (size, extra) in [
            (128, 0),
            (256, 0),
            (256, 2),
            (256, 4),
            (256, 32),
            (1024, 32),
        ] {
            let raw = random_inode(&mut rng, size, extra, 0xDEAD_BEEF);
            assert_eq!(
                inode_crc(0xDEAD_BEEF, &raw),
                reference_crc(0xDEAD_BEEF, &raw)
            );
            let mask = if size > 128 && extra >= 4 { !0 } else { 0xFFFF };
            assert_eq!(stored_checksum(&raw), inode_crc(0xDEAD_BEEF, &raw) & mask);
            if mask == 0xFFFF && size > 128 {
                // Without the hi field, bytes 0x82..0x84 are data.
                let mut r2 = raw.clone();
                r2[0x82] ^= 1;
                assert_ne!(inode_crc(0xDEAD_BEEF, &r2), inode_crc(0xDEAD_BEEF, &raw));
            }
        }
    }

    /// Random patches, overlapping each other and the checksum fields:
    /// the new checksum equals a full recomputation, for 16- and 32-bit
    /// checksums; on an inode whose stored checksum is wrong (half the
    /// cases, which take the splices) it stays wrong by the same bits.
    #[test]
    fn splice_equals_full_recompute() {
        let mut rng = Rng(0x0bad_cafe_f00d_0001);
        let seed = 0x5EED_0001;
        for (size, extra) in [(128, 0), (256, 0), (256, 2), (256, 4), (256, 32), (512, 28)] {
            for _ in 0..300 {
                let mut raw = random_inode(&mut rng, size, extra, seed);
                let n = 1 + rng.below(4) as usize;
                let mut owned = Vec::new();
                for _ in 0..n {
                    // Often right around the checksum fields.
                    let offset = if rng.below(2) == 0 {
                        (0x78 + rng.below(16) as usize).min(size - 1)
                    } else {
                        rng.below(size as u64) as usize
                    };
                    let len = 1 + rng.below((size - offset).min(24) as u64) as usize;
                    let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    // Keep i_extra_isize (the hi field's existence).
                    for (i, b) in bytes.iter_mut().enumerate() {
                        let at = offset + i;
                        if size > 128 && (at == 0x80 || at == 0x81) {
                            *b = raw[at];
                        }
                    }
                    owned.push((offset, bytes));
                }
                let changes: Vec<(usize, &[u8])> =
                    owned.iter().map(|(o, b)| (*o, &b[..])).collect();
                let mut want = raw.clone();
                for (o, b) in &owned {
                    want[*o..o + b.len()].copy_from_slice(b);
                }
                let mask = checksum_mask(&raw);
                let wrong = if rng.below(2) == 0 {
                    0
                } else {
                    (1 + rng.below(0xFFFF) as u32) & mask
                };
                let damaged = stored_checksum(&raw) ^ wrong;
                store_checksum(&mut raw, damaged);
                patch_inode(&mut raw, Some(seed), &changes).unwrap();
                assert_eq!(
                    stored_checksum(&raw),
                    (reference_crc(seed, &raw) & mask) ^ wrong
                );
                // Every other byte is as the changes left it.
                for at in 0..size {
                    let in_csum =
                        (0x7C..0x7E).contains(&at) || (mask == !0 && (0x82..0x84).contains(&at));
                    if !in_csum {
                        assert_eq!(raw[at], want[at], "byte {at:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_checksum_stays_bad_and_zero_inode_is_signed() {
        let mut rng = Rng(77);
        let seed = 42;
        let mut raw = random_inode(&mut rng, 256, 32, seed);
        raw[0x7C] ^= 0x55;
        let wrong = stored_checksum(&raw) ^ inode_crc(seed, &raw);
        patch_inode(&mut raw, Some(seed), &[(0x10, &[1, 2, 3, 4])]).unwrap();
        assert_eq!(stored_checksum(&raw) ^ inode_crc(seed, &raw), wrong);
        // Changing the hi field's existence needs a good checksum.
        assert_eq!(
            patch_inode(&mut raw, Some(seed), &[(0x80, &[0, 0])]),
            Err(PatchError::BadChecksum)
        );
        // An all-zero inode gets a real checksum.
        let mut zero = vec![0u8; 256];
        patch_inode(
            &mut zero,
            Some(seed),
            &[(0, &[0xA4, 0x81]), (0x80, &[32, 0])],
        )
        .unwrap();
        assert_eq!(stored_checksum(&zero), inode_crc(seed, &zero));
        // Out of range.
        assert_eq!(
            patch_inode(&mut zero, Some(seed), &[(250, &[0; 7])]),
            Err(PatchError::OutOfRange {
                offset: 250,
                len: 7
            })
        );
    }

    #[test]
    fn extra_time_epoch_bits() {
        assert_eq!(extra_time(0), 0);
        assert_eq!(extra_time(0x7FFF_FFFF), 0);
        assert_eq!(extra_time(0x8000_0000), 1);
    }
}
