//! ext4 directory blocks as pure functions over a block buffer: linear
//! entries, the metadata_csum checksum tail, adding and removing entries with
//! the checksum kept by [`crate::crc32c::splice`], and htree (dx) indexes
//! with the directory hashes.
//!
//! Every function here takes the block as `&[u8]` / `&mut [u8]` of exactly
//! one file-system block (1 KiB to 64 KiB, a power of two), so callers that
//! own the image (its block cache and redo log) decide where blocks come from
//! and go to. Nothing here reads or writes a file.
//!
//! # Linear blocks
//!
//! A directory block is a chain of records `inode u32, rec_len u16,
//! name_len u8, file_type u8, name` (the kernel's `struct
//! ext4_dir_entry_2`), each padded to 4 bytes, whose `rec_len`s tile the
//! block exactly; with metadata_csum the chain ends 12 bytes early, at the
//! checksum tail (`struct ext4_dir_entry_tail`: inode 0, rec_len 12,
//! name_len 0, file_type 0xDE, then the raw CRC-32C of the block before it,
//! seeded with the directory inode's seed, [`raw::inode_seed`](super::raw::inode_seed)). [`records`],
//! [`entries`] and [`find`] parse and check a block as the kernel's
//! `__ext4_check_dir_entry` does; [`add_entry`] and [`remove_entry`] edit it
//! as `ext4_add_entry` / `ext4_delete_entry` do.
//!
//! # Htree directories
//!
//! A directory with `INDEX_FL` ([`INDEX_FL`]) keeps a hash index in its
//! block 0 (the dx root, after `.` and `..`) and, for big directories, in
//! interior dx node blocks; the leaves are ordinary linear blocks.
//! [`parse_dx_root`], [`parse_dx_node`], [`verify_dx`] and [`leaf_for`] read
//! the index; [`DxHash`] computes the names' hashes (legacy, half-MD4 and TEA
//! in their signed and unsigned forms, as e2fsprogs' `ext2fs_dirhash`).
//!
//! # Example
//!
//! ```
//! use spacekit::ext4::dir;
//!
//! // A new leaf block of a directory with metadata_csum.
//! let seed = spacekit::ext4::raw::inode_seed(0x1234_5678, 12, 7);
//! let mut block = dir::init_block(4096, Some(seed))?;
//! assert!(dir::add_entry(&mut block, b"hello", 13, dir::FT_REG_FILE, true)?);
//! assert!(dir::add_entry(&mut block, b"world", 14, dir::FT_DIR, true)?);
//! assert_eq!(dir::remove_entry(&mut block, b"hello", true)?, Some(13));
//! let names: Vec<_> = dir::entries(&block, true)?.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, [b"world".to_vec()]);
//! // The tail was kept by splices; it equals a full recompute.
//! dir::verify_tail(seed, &block)?;
//! # Ok::<(), spacekit::ext4::Ext4Error>(())
//! ```

use std::vec;
use std::vec::Vec;

use crate::crc32c;

use super::error::{corrupt, invalid, Ext4Error};
use super::layout::{le16, le32, put16, put32};

/// `EXT4_INDEX_FL` (`i_flags`): the directory has a hash index (htree).
pub const INDEX_FL: u32 = 0x1000;
/// Bytes of the metadata_csum tail at the end of a linear block.
pub const TAIL_LEN: usize = 12;
/// `file_type` of the checksum tail (`EXT4_FT_DIR_CSUM`).
pub const FT_DIR_CSUM: u8 = 0xDE;
/// `file_type` of an unknown kind of file (`EXT4_FT_UNKNOWN`).
pub const FT_UNKNOWN: u8 = 0;
/// `file_type` of a regular file (`EXT4_FT_REG_FILE`).
pub const FT_REG_FILE: u8 = 1;
/// `file_type` of a directory (`EXT4_FT_DIR`).
#[cfg(any(test, feature = "testing"))]
pub const FT_DIR: u8 = 2;
/// `file_type` of a symbolic link (`EXT4_FT_SYMLINK`).
#[cfg(any(test, feature = "testing"))]
pub const FT_SYMLINK: u8 = 7;
/// The longest name a directory entry holds (`EXT4_NAME_LEN`).
pub const MAX_NAME_LEN: usize = 255;
/// `s_flags` bit: directory hashes treat name bytes as signed chars.
#[cfg(any(test, feature = "testing"))]
pub const FLAGS_SIGNED_HASH: u32 = 0x1;
/// `s_flags` bit: directory hashes treat name bytes as unsigned chars.
pub const FLAGS_UNSIGNED_HASH: u32 = 0x2;

/// The largest on-disk `rec_len` (`EXT4_MAX_REC_LEN`), which stands for a
/// whole 64 KiB block.
const MAX_REC_LEN: u16 = 0xFFFF;
/// Bytes of a record's fixed header (inode, rec_len, name_len, file_type).
const HEADER_LEN: usize = 8;
/// The smallest `rec_len` of any record (`EXT4_DIR_REC_LEN(1)`).
const MIN_REC_LEN: usize = 12;
/// The bits of a dx entry's `block` that hold the block number.
const DX_BLOCK_MASK: u32 = 0x0FFF_FFFF;
/// Bytes of a dx entry (hash, block) and of the dx tail.
const DX_ENTRY_LEN: usize = 8;
/// Offset of `dx_countlimit` in a dx root: after `.` (12 bytes), `..`
/// (12 bytes, name padded) and `dx_root_info` (8 bytes).
const DX_ROOT_COUNT_OFFSET: usize = 32;
/// Offset of `dx_countlimit` in a dx node: after its empty 8-byte record.
const DX_NODE_COUNT_OFFSET: usize = 8;
/// `dx_root_info.info_length`.
const DX_INFO_LEN: u8 = 8;
/// Deepest index: the dx root plus two levels of nodes (largedir).
const DX_MAX_INDIRECT: u8 = 2;

/// One live directory entry (a record whose inode is not 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirEntry {
    /// The inode it names.
    pub inode: u32,
    /// The name's bytes (1 to 255, not NUL-terminated).
    pub name: Vec<u8>,
    /// `file_type` ([`FT_REG_FILE`], [`FT_DIR`], ...).
    pub file_type: u8,
}

/// One record of a linear block, live or not, where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its byte offset in the block.
    pub offset: usize,
    /// Its decoded `rec_len` ([`rec_len_from_disk`]).
    pub rec_len: usize,
    /// `inode`; 0 for an unused record.
    pub inode: u32,
    /// `name_len`.
    pub name_len: u8,
    /// `file_type`.
    pub file_type: u8,
}

impl Record {
    /// The bytes the record needs for its name ([`entry_size`] of
    /// `name_len`), or 0 for an unused record: `rec_len` minus this is the
    /// room it can give a new entry.
    pub fn used(&self) -> usize {
        if self.inode == 0 {
            0
        } else {
            entry_size(usize::from(self.name_len))
        }
    }

    /// The record's name in `block`.
    pub fn name<'a>(&self, block: &'a [u8]) -> &'a [u8] {
        let start = self.offset + HEADER_LEN;
        block
            .get(start..start + usize::from(self.name_len))
            .unwrap_or(&[])
    }
}

/// The size of a record holding a name of `name_len` bytes: 8 + `name_len`
/// rounded up to 4 (the kernel's `EXT4_DIR_REC_LEN`, without the hash that
/// casefolded encrypted directories add).
pub fn entry_size(name_len: usize) -> usize {
    (HEADER_LEN + name_len + 3) & !3
}

/// Decodes an on-disk `rec_len` (e2fsprogs' `ext2fs_get_rec_len`, the
/// kernel's `ext4_rec_len_from_disk`).
///
/// Below 64 KiB blocks the value is the length. With 64 KiB blocks a length
/// of 65536 does not fit in 16 bits: 65535 and 0 both mean the whole block,
/// and other lengths keep bits 16 and 17 in the low two bits (lengths are
/// multiples of 4). Unlike the kernel, whose encoding depends on its page
/// size, this depends only on the block size, as in e2fsprogs.
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    let len = usize::from(raw);
    if block_size < 65536 {
        len
    } else if raw == MAX_REC_LEN || raw == 0 {
        block_size
    } else {
        (len & 0xFFFC) | ((len & 3) << 16)
    }
}

/// Encodes a record length for disk (e2fsprogs' `ext2fs_set_rec_len`, the
/// kernel's `ext4_rec_len_to_disk`); the inverse of [`rec_len_from_disk`].
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"rec_len"`) if `len` is not a multiple
/// of 4, exceeds the block, or does not fit the block size's encoding.
pub fn rec_len_to_disk(len: usize, block_size: usize) -> Result<u16, Ext4Error> {
    if len > block_size || !len.is_multiple_of(4) || block_size > 1 << 18 {
        return Err(invalid(
            "rec_len",
            len as u64,
            "not a multiple of 4 within the block",
        ));
    }
    if len < 65536 {
        return Ok(len as u16);
    }
    if len == block_size {
        return Ok(if block_size == 65536 { MAX_REC_LEN } else { 0 });
    }
    Ok(((len & 0xFFFC) | ((len >> 16) & 3)) as u16)
}

/// Checks that `len` is a block size ext4 allows.
fn check_block_size(len: usize) -> Result<(), Ext4Error> {
    if (1024..=65536).contains(&len) && len.is_power_of_two() {
        Ok(())
    } else {
        Err(invalid(
            "block_size",
            len as u64,
            "a directory block is 1 KiB to 64 KiB, a power of two",
        ))
    }
}

/// An iterator over the records of a linear block, checking each; see
/// [`iter_records`].
#[derive(Clone, Debug)]
pub struct Records<'a> {
    block: &'a [u8],
    /// The next record's offset.
    offset: usize,
    /// Where the chain must end (the tail, or the block's end).
    end: usize,
    /// Nothing more to yield (after the end or an error).
    done: bool,
}

/// Iterates over the records of a linear directory block, checking each one
/// as the kernel's `__ext4_check_dir_entry` does and, at the end, that the
/// chain tiles the block exactly up to the checksum tail (`csum`: the file
/// system has metadata_csum) or the block's end.
///
/// The iterator yields the records in order and stops after the first
/// error. A dx root or dx node block is not a linear block: with `csum` it
/// fails the tiling check; without, a dx node reads as one empty record and
/// a dx root as `.` and a `..` spanning the block.
///
/// # Errors (as items)
/// [`Ext4Error::InvalidArgument`] (`"block_size"`) for a buffer that is not
/// a block; [`Ext4Error::Corrupt`] naming `rec_len`, `name_len` or
/// `det_*` (the tail's fields) for a bad record or tail.
pub fn iter_records(block: &[u8], csum: bool) -> Records<'_> {
    let end = if csum {
        block.len().saturating_sub(TAIL_LEN)
    } else {
        block.len()
    };
    Records {
        block,
        offset: 0,
        end,
        done: false,
    }
}

impl Records<'_> {
    fn next_record(&mut self) -> Result<Option<Record>, Ext4Error> {
        let block = self.block;
        if self.offset == 0 {
            check_block_size(block.len())?;
        }
        let off = self.offset;
        if off == self.end {
            if self.end != block.len() {
                check_tail(block)?;
            }
            return Ok(None);
        }
        let left = self.end - off;
        if left < MIN_REC_LEN {
            return Err(corrupt(
                "rec_len",
                None,
                left as u64,
                "the records do not reach the end of the directory block",
            ));
        }
        let rec_len = rec_len_from_disk(le16(block, off + 4), block.len());
        let name_len = block[off + 6];
        let r = Record {
            offset: off,
            rec_len,
            inode: le32(block, off),
            name_len,
            file_type: block[off + 7],
        };
        if rec_len < MIN_REC_LEN {
            return Err(corrupt(
                "rec_len",
                None,
                rec_len as u64,
                "smaller than the smallest directory record (12)",
            ));
        }
        if !rec_len.is_multiple_of(4) {
            return Err(corrupt(
                "rec_len",
                None,
                rec_len as u64,
                "not a multiple of 4",
            ));
        }
        if rec_len < entry_size(usize::from(name_len)) {
            return Err(corrupt(
                "rec_len",
                None,
                rec_len as u64,
                "too small for the record's name_len",
            ));
        }
        if rec_len > left {
            return Err(corrupt(
                "rec_len",
                None,
                rec_len as u64,
                "runs past the end of the directory block (or into its checksum tail)",
            ));
        }
        if r.inode != 0 && name_len == 0 {
            return Err(corrupt(
                "name_len",
                None,
                0,
                "a directory entry in use has an empty name",
            ));
        }
        self.offset = off + rec_len;
        Ok(Some(r))
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record, Ext4Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Every record of a linear directory block, live or not, checked; see
/// [`iter_records`].
///
/// # Errors
/// As [`iter_records`].
#[cfg(any(test, feature = "testing"))]
pub fn records(block: &[u8], csum: bool) -> Result<Vec<Record>, Ext4Error> {
    iter_records(block, csum).collect()
}

/// The live entries (inode not 0) of a linear directory block, in block
/// order, checked as [`iter_records`] does.
///
/// # Errors
/// As [`iter_records`].
pub fn entries(block: &[u8], csum: bool) -> Result<Vec<DirEntry>, Ext4Error> {
    let mut out = Vec::new();
    for r in iter_records(block, csum) {
        let r = r?;
        if r.inode != 0 {
            out.push(DirEntry {
                inode: r.inode,
                name: r.name(block).to_vec(),
                file_type: r.file_type,
            });
        }
    }
    Ok(out)
}

/// The live entry named `name` in a linear directory block (the kernel's
/// `ext4_search_dir`), checking the records up to it.
///
/// # Errors
/// As [`iter_records`], for the records before and at the match (the whole
/// block when the name is absent).
pub fn find(block: &[u8], csum: bool, name: &[u8]) -> Result<Option<DirEntry>, Ext4Error> {
    for r in iter_records(block, csum) {
        let r = r?;
        if r.inode != 0 && r.name(block) == name {
            return Ok(Some(DirEntry {
                inode: r.inode,
                name: name.to_vec(),
                file_type: r.file_type,
            }));
        }
    }
    Ok(None)
}

/// Whether the last 12 bytes of `block` hold a checksum tail
/// (`ext4_dir_entry_tail`: inode 0, rec_len 12, name_len 0, file_type
/// 0xDE), as the kernel's `get_dirent_tail` checks.
#[cfg(any(test, feature = "testing"))]
pub fn has_tail(block: &[u8]) -> bool {
    check_tail(block).is_ok()
}

/// Checks the 12-byte tail's fixed fields.
fn check_tail(block: &[u8]) -> Result<(), Ext4Error> {
    check_block_size(block.len())?;
    let t = block.len() - TAIL_LEN;
    let bad = |field, value: u64| {
        Err(corrupt(
            field,
            None,
            value,
            "the directory block's checksum tail is missing or damaged",
        ))
    };
    if le32(block, t) != 0 {
        return bad("det_reserved_zero1", u64::from(le32(block, t)));
    }
    if le16(block, t + 4) != TAIL_LEN as u16 {
        return bad("det_rec_len", u64::from(le16(block, t + 4)));
    }
    if block[t + 6] != 0 {
        return bad("det_reserved_zero2", u64::from(block[t + 6]));
    }
    if block[t + 7] != FT_DIR_CSUM {
        return bad("det_reserved_ft", u64::from(block[t + 7]));
    }
    Ok(())
}

/// The checksum a linear block's tail should hold (the kernel's
/// `ext4_dirblock_csum`): raw CRC-32C from the directory's [`raw::inode_seed`](super::raw::inode_seed)
/// over the block before the 12-byte tail. A full pass over the block; the
/// edits here keep the tail by [`crate::crc32c::splice`] instead.
pub fn tail_checksum(seed: u32, block: &[u8]) -> u32 {
    crc32c::raw(seed, &block[..block.len().saturating_sub(TAIL_LEN)])
}

/// The checksum stored in a linear block's tail (`det_checksum`).
///
/// # Errors
/// [`Ext4Error::Corrupt`] naming the tail's field if the block has no tail.
pub fn stored_tail_checksum(block: &[u8]) -> Result<u32, Ext4Error> {
    check_tail(block)?;
    Ok(le32(block, block.len() - 4))
}

/// Checks a linear block's tail checksum against a full recompute (the
/// kernel's `ext4_dirblock_csum_verify`).
///
/// # Errors
/// [`Ext4Error::Corrupt`] if the block has no tail;
/// [`Ext4Error::BadChecksum`] (`"directory block"`) if it does not match.
pub fn verify_tail(seed: u32, block: &[u8]) -> Result<(), Ext4Error> {
    if stored_tail_checksum(block)? == tail_checksum(seed, block) {
        Ok(())
    } else {
        Err(Ext4Error::BadChecksum {
            what: "directory block",
            group: None,
        })
    }
}

/// Writes the checksum tail's fixed fields and a fully recomputed checksum
/// (the kernel's `ext4_initialize_dirent_tail` then
/// `ext4_dirblock_csum_set`), for a block built from scratch.
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"block_size"`) for a buffer that is not
/// a block.
pub fn sign_tail(seed: u32, block: &mut [u8]) -> Result<(), Ext4Error> {
    check_block_size(block.len())?;
    let t = block.len() - TAIL_LEN;
    put32(block, t, 0);
    put16(block, t + 4, TAIL_LEN as u16);
    block[t + 6] = 0;
    block[t + 7] = FT_DIR_CSUM;
    let c = tail_checksum(seed, block);
    put32(block, t + 8, c);
    Ok(())
}

/// A new, empty linear directory block: one unused record (inode 0)
/// spanning it and, with `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](super::raw::inode_seed)), the signed checksum tail (as the kernel's
/// `ext4_append` + `ext4_init_dirblock`).
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"block_size"`) unless `block_size` is a
/// power of two from 1024 to 65536.
pub fn init_block(block_size: usize, seed: Option<u32>) -> Result<Vec<u8>, Ext4Error> {
    check_block_size(block_size)?;
    let mut block = vec![0u8; block_size];
    let end = if seed.is_some() {
        block_size - TAIL_LEN
    } else {
        block_size
    };
    put16(&mut block, 4, rec_len_to_disk(end, block_size)?);
    if let Some(seed) = seed {
        sign_tail(seed, &mut block)?;
    }
    Ok(block)
}

/// Checks a name given to [`add_entry`] or [`remove_entry`].
fn check_name(name: &[u8]) -> Result<(), Ext4Error> {
    let n = name.len() as u64;
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(invalid("name", n, "a name is 1 to 255 bytes"));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(invalid("name", n, "a name holds no '/' and no NUL"));
    }
    if name == b"." || name == b".." {
        return Err(invalid(
            "name",
            n,
            "'.' and '..' are made with the directory, never added or removed",
        ));
    }
    Ok(())
}

/// The largest region one edit changes: a record for a 255-byte name.
const MAX_EDIT: usize = HEADER_LEN + MAX_NAME_LEN + 1;

/// Edits `block` through `edit`, which changes only the bytes of the
/// `(offset, len)` regions (disjoint, at most [`MAX_EDIT`] bytes each,
/// inside the checksummed part), and, with `csum`, moves the tail's
/// checksum along by one [`crate::crc32c::splice`] per region.
fn edit_spliced<const N: usize>(
    block: &mut [u8],
    csum: bool,
    regions: [(usize, usize); N],
    edit: impl FnOnce(&mut [u8]),
) -> Result<(), Ext4Error> {
    if !csum {
        edit(block);
        return Ok(());
    }
    let covered = block.len() - TAIL_LEN;
    if regions
        .iter()
        .any(|&(off, len)| len > MAX_EDIT || off + len > covered)
    {
        return Err(corrupt(
            "rec_len",
            None,
            0,
            "an edit would cross the checksum tail",
        ));
    }
    let mut old = [[0u8; MAX_EDIT]; N];
    for (o, &(off, len)) in old.iter_mut().zip(&regions) {
        o[..len].copy_from_slice(&block[off..off + len]);
    }
    edit(block);
    let mut c = le32(block, covered + 8);
    for (o, &(off, len)) in old.iter().zip(&regions) {
        c = crc32c::splice(
            c,
            covered as u64,
            off as u64,
            &o[..len],
            &block[off..off + len],
        )
        .map_err(|_| corrupt("rec_len", None, 0, "an edit would cross the checksum tail"))?;
    }
    put32(block, covered + 8, c);
    Ok(())
}

/// Writes a live record's inode, name_len, file_type and name at `off`,
/// zeroing its padding (rec_len untouched).
fn write_entry(block: &mut [u8], off: usize, name: &[u8], inode: u32, file_type: u8) {
    put32(block, off, inode);
    block[off + 6] = name.len() as u8;
    block[off + 7] = file_type;
    let start = off + HEADER_LEN;
    block[start..start + name.len()].copy_from_slice(name);
    block[start + name.len()..off + entry_size(name.len())].fill(0);
}

/// Adds the entry `name` → `inode` to a linear directory block (the
/// kernel's `ext4_find_dest_de` + `ext4_insert_dentry`): the first record
/// whose room (`rec_len` minus [`Record::used`]) fits [`entry_size`] of the
/// name is split (a live record keeps its own size and the new entry takes
/// the rest) or, if unused, reused whole.
///
/// With `csum` (metadata_csum) the tail's checksum is moved along by
/// [`crate::crc32c::splice`] over just the bytes that changed (the split
/// record's `rec_len` and the new entry), so no seed is needed and a block
/// whose stored checksum was wrong stays exactly as wrong: verify blocks
/// with [`verify_tail`] when reading them. Never pass a dx root or dx node
/// block (see [`iter_records`]).
///
/// Returns `Ok(false)`, with the block unchanged, when no record has room:
/// the caller appends a new block ([`init_block`]).
///
/// # Errors
/// [`Ext4Error::InvalidArgument`]: `"name"` for an empty name, one over 255
/// bytes, holding `/` or NUL, `.` or `..`, or already in the block; `"ino"`
/// for inode 0. As [`iter_records`] for a bad block. On error the block is
/// unchanged.
pub fn add_entry(
    block: &mut [u8],
    name: &[u8],
    inode: u32,
    file_type: u8,
    csum: bool,
) -> Result<bool, Ext4Error> {
    check_name(name)?;
    if inode == 0 {
        return Err(invalid(
            "ino",
            0,
            "a directory entry names inode 1 or above",
        ));
    }
    let need = entry_size(name.len());
    let mut slot = None;
    for r in iter_records(block, csum) {
        let r = r?;
        if r.inode != 0 && r.name(block) == name {
            return Err(invalid(
                "name",
                name.len() as u64,
                "the name is already in the directory block",
            ));
        }
        if slot.is_none() && r.rec_len - r.used() >= need {
            slot = Some(r);
        }
    }
    let Some(r) = slot else {
        return Ok(false);
    };
    let bs = block.len();
    if r.inode == 0 {
        edit_spliced(block, csum, [(r.offset, need)], |b| {
            write_entry(b, r.offset, name, inode, file_type);
        })?;
    } else {
        let used = r.used();
        let new = r.offset + used;
        let kept = rec_len_to_disk(used, bs)?;
        let rest = rec_len_to_disk(r.rec_len - used, bs)?;
        edit_spliced(block, csum, [(r.offset + 4, 2), (new, need)], |b| {
            put16(b, r.offset + 4, kept);
            put16(b, new + 4, rest);
            write_entry(b, new, name, inode, file_type);
        })?;
    }
    Ok(true)
}

/// Removes the live entry `name` from a linear directory block (the
/// kernel's `ext4_generic_delete_entry`): its record is merged into the
/// previous record's `rec_len`, or, if it is the block's first record,
/// marked unused (inode 0). The removed entry's own bytes are zeroed (the
/// kernel zeroes the whole record; its slack is left as it was here, so the
/// change stays small), and with `csum` the tail's checksum moves along by
/// [`crate::crc32c::splice`] over those bytes and the previous record's
/// `rec_len`, as in [`add_entry`].
///
/// Returns the inode the entry named, or `None` (block unchanged) if the
/// name is not in the block.
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"name"`) for a name [`add_entry`] would
/// refuse (`.` and `..` included); as [`iter_records`] for a bad block.
pub fn remove_entry(block: &mut [u8], name: &[u8], csum: bool) -> Result<Option<u32>, Ext4Error> {
    check_name(name)?;
    let mut prev: Option<Record> = None;
    let mut hit = None;
    for r in iter_records(block, csum) {
        let r = r?;
        if hit.is_none() {
            if r.inode != 0 && r.name(block) == name {
                hit = Some((prev, r));
            } else {
                prev = Some(r);
            }
        }
    }
    let Some((prev, r)) = hit else {
        return Ok(None);
    };
    let bs = block.len();
    let used = r.used();
    match prev {
        Some(p) => {
            let merged = rec_len_to_disk(p.rec_len + r.rec_len, bs)?;
            edit_spliced(block, csum, [(p.offset + 4, 2), (r.offset, used)], |b| {
                put16(b, p.offset + 4, merged);
                b[r.offset..r.offset + used].fill(0);
            })?;
        }
        None => {
            edit_spliced(block, csum, [(r.offset, used)], |b| {
                put32(b, r.offset, 0);
                b[r.offset + 6..r.offset + used].fill(0);
            })?;
        }
    }
    Ok(Some(r.inode))
}

// ---------------------------------------------------------------------------
// Htree (dx) indexes.

/// One index entry (`struct dx_entry`): names hashing to at least `hash`
/// (up to the next entry's) live under `block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DxEntry {
    /// The lowest hash under this entry; 0 for the first entry, whose hash
    /// field holds the count and limit. An odd hash marks a collision run
    /// that continues from the previous leaf.
    pub hash: u32,
    /// The directory's logical block (leaf or lower node), with the reserved
    /// top four bits cleared.
    pub block: u32,
}

/// A parsed dx root (block 0 of an htree directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxRoot {
    /// The inode of `.` (the directory itself).
    pub dot: u32,
    /// The inode of `..`.
    pub dotdot: u32,
    /// `dx_root_info.hash_version`: 0 legacy, 1 half-MD4, 2 TEA (the
    /// unsigned variants come from `s_flags`; see [`DxHash::for_dir`]).
    pub hash_version: u8,
    /// `dx_root_info.indirect_levels`: levels of dx nodes below the root
    /// (0 to 2).
    pub indirect_levels: u8,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries, in hash order.
    pub entries: Vec<DxEntry>,
}

/// A parsed dx node (an interior index block of an htree directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxNode {
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries, in hash order.
    pub entries: Vec<DxEntry>,
}

/// The number of dx entries a root (`root`) or node block holds: what the
/// kernel's `dx_root_limit` / `dx_node_limit` compute, less one entry for
/// the dx tail with metadata_csum (`csum`).
pub fn dx_limit(block_size: usize, root: bool, csum: bool) -> usize {
    let off = if root {
        DX_ROOT_COUNT_OFFSET
    } else {
        DX_NODE_COUNT_OFFSET
    };
    (block_size.saturating_sub(off) / DX_ENTRY_LEN).saturating_sub(usize::from(csum))
}

/// Reads and checks the `dx_countlimit` at `off` and the entries after it.
fn parse_dx_entries(
    block: &[u8],
    off: usize,
    root: bool,
    csum: bool,
) -> Result<(u16, Vec<DxEntry>), Ext4Error> {
    let limit = le16(block, off);
    let count = le16(block, off + 2);
    if usize::from(limit) != dx_limit(block.len(), root, csum) {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            u64::from(limit),
            "not the limit this block size and metadata_csum give",
        ));
    }
    if count == 0 || count > limit {
        return Err(corrupt(
            "dx_countlimit.count",
            None,
            u64::from(count),
            "zero or above the limit",
        ));
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for i in 0..usize::from(count) {
        let at = off + i * DX_ENTRY_LEN;
        let hash = if i == 0 { 0 } else { le32(block, at) };
        if let Some(prev) = entries.last().map(|e: &DxEntry| e.hash) {
            if hash < prev {
                return Err(corrupt(
                    "dx_entry.hash",
                    None,
                    u64::from(hash),
                    "the index's hashes are out of order",
                ));
            }
        }
        entries.push(DxEntry {
            hash,
            block: le32(block, at + 4) & DX_BLOCK_MASK,
        });
    }
    Ok((limit, entries))
}

/// Parses and checks a dx root (block 0 of a directory with [`INDEX_FL`]):
/// `.` and `..` (whose record spans the rest of the block), `dx_root_info`
/// and the index entries, as the kernel's `dx_probe` checks them. `csum`:
/// the file system has metadata_csum (the limit leaves room for the dx
/// tail). The checksum itself is checked by [`verify_dx`].
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"block_size"`) for a buffer that is not
/// a block; [`Ext4Error::Corrupt`] naming the field (`rec_len`,
/// `dx_root_info.*`, `dx_countlimit.*`, `dx_entry.hash`).
pub fn parse_dx_root(block: &[u8], csum: bool) -> Result<DxRoot, Ext4Error> {
    check_block_size(block.len())?;
    let bs = block.len();
    let dot_len = rec_len_from_disk(le16(block, 4), bs);
    if dot_len != 12 || block[6] != 1 || block[8] != b'.' {
        return Err(corrupt(
            "rec_len",
            None,
            dot_len as u64,
            "a dx root starts with a 12-byte '.' record",
        ));
    }
    let dotdot_len = rec_len_from_disk(le16(block, 16), bs);
    if dotdot_len != bs - 12 || block[18] != 2 || &block[20..22] != b".." {
        return Err(corrupt(
            "rec_len",
            None,
            dotdot_len as u64,
            "a dx root's '..' record spans the rest of the block",
        ));
    }
    let info = 24;
    if le32(block, info) != 0 {
        return Err(corrupt(
            "dx_root_info.reserved_zero",
            None,
            u64::from(le32(block, info)),
            "not zero",
        ));
    }
    let hash_version = block[info + 4];
    if hash_version > 2 && hash_version != 6 {
        return Err(corrupt(
            "dx_root_info.hash_version",
            None,
            u64::from(hash_version),
            "not legacy (0), half_md4 (1), tea (2) or siphash (6)",
        ));
    }
    if block[info + 5] != DX_INFO_LEN {
        return Err(corrupt(
            "dx_root_info.info_length",
            None,
            u64::from(block[info + 5]),
            "not 8",
        ));
    }
    let indirect_levels = block[info + 6];
    if indirect_levels > DX_MAX_INDIRECT {
        return Err(corrupt(
            "dx_root_info.indirect_levels",
            None,
            u64::from(indirect_levels),
            "above 2",
        ));
    }
    if block[info + 7] & 1 != 0 {
        return Err(corrupt(
            "dx_root_info.unused_flags",
            None,
            u64::from(block[info + 7]),
            "an unimplemented flag is set",
        ));
    }
    let (limit, entries) = parse_dx_entries(block, DX_ROOT_COUNT_OFFSET, true, csum)?;
    Ok(DxRoot {
        dot: le32(block, 0),
        dotdot: le32(block, 12),
        hash_version,
        indirect_levels,
        limit,
        entries,
    })
}

/// Parses and checks a dx node (an interior index block): an empty record
/// spanning the block, then the index entries. `csum` as in
/// [`parse_dx_root`].
///
/// # Errors
/// As [`parse_dx_root`].
pub fn parse_dx_node(block: &[u8], csum: bool) -> Result<DxNode, Ext4Error> {
    check_block_size(block.len())?;
    let rec_len = rec_len_from_disk(le16(block, 4), block.len());
    if le32(block, 0) != 0 || rec_len != block.len() || block[6] != 0 {
        return Err(corrupt(
            "rec_len",
            None,
            rec_len as u64,
            "a dx node starts with an empty record spanning the block",
        ));
    }
    let (limit, entries) = parse_dx_entries(block, DX_NODE_COUNT_OFFSET, false, csum)?;
    Ok(DxNode { limit, entries })
}

/// Where a dx block's `dx_countlimit` lies, told apart as the kernel's
/// `get_dx_countlimit` does: a node's first record spans the block; a
/// root's `.` is 12 bytes and its `..` spans the rest.
fn dx_count_offset(block: &[u8]) -> Result<usize, Ext4Error> {
    check_block_size(block.len())?;
    let bs = block.len();
    let first = rec_len_from_disk(le16(block, 4), bs);
    if first == bs {
        return Ok(DX_NODE_COUNT_OFFSET);
    }
    if first == 12
        && rec_len_from_disk(le16(block, 16), bs) == bs - 12
        && block[24 + 5] == DX_INFO_LEN
    {
        return Ok(DX_ROOT_COUNT_OFFSET);
    }
    Err(corrupt(
        "rec_len",
        None,
        first as u64,
        "neither a dx root nor a dx node",
    ))
}

/// The checksum a dx root or node's `dx_tail` should hold (the kernel's
/// `ext4_dx_csum`): raw CRC-32C from the directory's [`raw::inode_seed`](super::raw::inode_seed) over the
/// block up to the end of its `count` entries (stale entries between
/// `count` and `limit` are not covered), continued over the whole 8-byte
/// tail with its checksum field taken as zero (`dt_reserved`, then four
/// zero bytes). The tail lies right after the `limit` entries.
///
/// Confirmed against dx roots and dx nodes of images made by mkfs.ext4 and
/// indexed by `e2fsck -D` (the crate's `ext4_dir` tests); leaving out the
/// four zero bytes gives a different value.
///
/// # Errors
/// [`Ext4Error::Corrupt`] if the block is neither a dx root nor a dx node,
/// its count exceeds its limit, or no 8-byte tail fits after the limit.
pub fn dx_checksum(seed: u32, block: &[u8]) -> Result<u32, Ext4Error> {
    let (tail, count_end) = dx_tail_at(block)?;
    let c = crc32c::raw(seed, &block[..count_end]);
    let c = crc32c::raw(c, &block[tail..tail + 4]);
    Ok(crc32c::raw(c, &[0; 4]))
}

/// The dx tail's offset and the end of the counted entries.
fn dx_tail_at(block: &[u8]) -> Result<(usize, usize), Ext4Error> {
    let off = dx_count_offset(block)?;
    let limit = usize::from(le16(block, off));
    let count = usize::from(le16(block, off + 2));
    if count > limit {
        return Err(corrupt(
            "dx_countlimit.count",
            None,
            count as u64,
            "above the limit",
        ));
    }
    let tail = off + limit * DX_ENTRY_LEN;
    if tail + DX_ENTRY_LEN > block.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "no room for the dx tail (no metadata_csum?)",
        ));
    }
    Ok((tail, off + count * DX_ENTRY_LEN))
}

/// Stores [`dx_checksum`] in a dx root or node's `dx_tail`.
fn sign_dx(seed: u32, block: &mut [u8]) -> Result<(), Ext4Error> {
    let (tail, _) = dx_tail_at(block)?;
    let c = dx_checksum(seed, block)?;
    put32(block, tail + 4, c);
    Ok(())
}

/// The checksum stored in a dx root or node's `dx_tail` (`dt_checksum`).
///
/// # Errors
/// As [`dx_checksum`].
pub fn stored_dx_checksum(block: &[u8]) -> Result<u32, Ext4Error> {
    let (tail, _) = dx_tail_at(block)?;
    Ok(le32(block, tail + 4))
}

/// Checks a dx root or node's `dx_tail` checksum (the kernel's
/// `ext4_dx_csum_verify`).
///
/// # Errors
/// As [`dx_checksum`]; [`Ext4Error::BadChecksum`] (`"dx block"`) if it does
/// not match.
pub fn verify_dx(seed: u32, block: &[u8]) -> Result<(), Ext4Error> {
    if stored_dx_checksum(block)? == dx_checksum(seed, block)? {
        Ok(())
    } else {
        Err(Ext4Error::BadChecksum {
            what: "dx block",
            group: None,
        })
    }
}

/// A directory hash function (`DX_HASH_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashAlg {
    /// The original ext3 hash (`dx_hack_hash`).
    Legacy,
    /// Half-MD4 over 32-byte pieces of the name (the default).
    HalfMd4,
    /// TEA over 16-byte pieces of the name.
    Tea,
}

/// A directory hash with its parameters: which function, whether name bytes
/// are unsigned chars, and the seed (`s_hash_seed`).
///
/// Written from the ext4 on-disk format documentation's description of the
/// hashes (e2fsprogs' `ext2fs_dirhash`); checked against `debugfs dx_hash`.
/// Casefolded directories hash a normalised name and SipHash (version 6)
/// directories are not handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DxHash {
    /// The function.
    pub alg: HashAlg,
    /// Name bytes are taken as unsigned chars (the `*_unsigned` versions,
    /// 3 to 5); else as signed chars (as x86 `char`).
    pub unsigned: bool,
    /// The seed as four little-endian words of `s_hash_seed`; all zero means
    /// the default seed (the MD4 initial state).
    pub seed: [u32; 4],
}

impl DxHash {
    /// The hash with version number `version` (`DX_HASH_*`: 0 legacy, 1
    /// half_md4, 2 tea, 3 to 5 their unsigned forms) and the 16 bytes of
    /// `s_hash_seed` (offset 0xEC of the superblock, as `dumpe2fs` prints
    /// the UUID "Directory Hash Seed").
    ///
    /// # Errors
    /// [`Ext4Error::Unsupported`] (`"siphash"`) for version 6;
    /// [`Ext4Error::InvalidArgument`] (`"hash_version"`) above 6.
    pub fn new(version: u8, seed: [u8; 16]) -> Result<DxHash, Ext4Error> {
        let alg = match version % 3 {
            0 => HashAlg::Legacy,
            1 => HashAlg::HalfMd4,
            _ => HashAlg::Tea,
        };
        if version == 6 {
            return Err(Ext4Error::Unsupported { feature: "siphash" });
        }
        if version > 6 {
            return Err(invalid(
                "hash_version",
                u64::from(version),
                "not a directory hash version",
            ));
        }
        let mut words = [0u32; 4];
        for (w, b) in words.iter_mut().zip(seed.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(DxHash {
            alg,
            unsigned: version >= 3,
            seed: words,
        })
    }

    /// The hash a directory's index uses: the dx root's `hash_version`,
    /// made unsigned when `s_flags` (superblock offset 0x160) has
    /// [`FLAGS_UNSIGNED_HASH`], as the kernel's `s_hash_unsigned` does
    /// (neither flag set counts as signed).
    ///
    /// # Errors
    /// As [`DxHash::new`].
    pub fn for_dir(
        root_hash_version: u8,
        s_flags: u32,
        seed: [u8; 16],
    ) -> Result<DxHash, Ext4Error> {
        let mut v = root_hash_version;
        if v <= 2 && s_flags & FLAGS_UNSIGNED_HASH != 0 {
            v += 3;
        }
        DxHash::new(v, seed)
    }

    /// The `(hash, minor_hash)` of `name`: `hash` has its low bit clear
    /// (the index keeps that bit for collision runs). Legacy has no minor
    /// hash (0).
    pub fn hash(&self, name: &[u8]) -> (u32, u32) {
        let mut buf = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476];
        if self.seed != [0; 4] {
            buf = self.seed;
        }
        let (hash, minor) = match self.alg {
            HashAlg::Legacy => (legacy_hash(name, self.unsigned), 0),
            HashAlg::HalfMd4 => {
                for (i, piece) in name.chunks(32).enumerate() {
                    let input: [u32; 8] = words_of(piece, name.len() - 32 * i, self.unsigned);
                    half_md4(&mut buf, &input);
                }
                (buf[1], buf[2])
            }
            HashAlg::Tea => {
                for (i, piece) in name.chunks(16).enumerate() {
                    let input: [u32; 4] = words_of(piece, name.len() - 16 * i, self.unsigned);
                    tea(&mut buf, &input);
                }
                (buf[0], buf[1])
            }
        };
        (hash & !1, minor)
    }
}

/// A name byte as the C `char` the hashes read: sign-extended unless
/// `unsigned`.
fn char_of(b: u8, unsigned: bool) -> u32 {
    if unsigned {
        u32::from(b)
    } else {
        i32::from(b as i8) as u32
    }
}

/// Packs the bytes of a piece of the name into `N` words (e2fsprogs'
/// `str2hashbuf`): big-endian-ish accumulation of the bytes, four to a word,
/// with the remaining length (`left`, bytes from the piece's start to the
/// name's end) as padding.
fn words_of<const N: usize>(piece: &[u8], left: usize, unsigned: bool) -> [u32; N] {
    let mut pad = (left as u32) | ((left as u32) << 8);
    pad |= pad << 16;
    let mut out = [pad; N];
    let mut val = pad;
    let mut i = 0;
    for (k, &b) in piece.iter().take(N * 4).enumerate() {
        val = char_of(b, unsigned).wrapping_add(val << 8);
        if k % 4 == 3 {
            out[i] = val;
            i += 1;
            val = pad;
        }
    }
    if i < N && !piece.len().is_multiple_of(4) {
        out[i] = val;
    }
    out
}

/// The legacy hash (`dx_hack_hash`).
fn legacy_hash(name: &[u8], unsigned: bool) -> u32 {
    let (mut h0, mut h1) = (0x12A3_FE2Du32, 0x37AB_E8F9u32);
    for &b in name {
        let c = char_of(b, unsigned);
        let mut h = h1.wrapping_add(h0 ^ c.wrapping_mul(7_152_373));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7FFF_FFFF);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

/// One TEA transform of `buf` by 16 bytes of input (16 rounds).
fn tea(buf: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(
            (b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b),
        );
        b1 = b1.wrapping_add(
            (b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

/// The half-MD4 transform of `buf` by 32 bytes of input: MD4's three rounds
/// over eight words, each round with its own shifts and constant.
fn half_md4(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0x5A82_7999;
    const K3: u32 = 0x6ED9_EBA1;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let [mut a, mut b, mut c, mut d] = *buf;
    // Each step: a = (a + fun(b, c, d) + word + k) <<< s, with the four
    // registers rotating roles.
    macro_rules! step {
        ($fun:expr, $a:ident, $b:ident, $c:ident, $d:ident, $w:expr, $k:expr, $s:expr) => {
            $a = $a
                .wrapping_add($fun($b, $c, $d))
                .wrapping_add($w.wrapping_add($k))
                .rotate_left($s);
        };
    }
    for &i in &[0usize, 4] {
        step!(f, a, b, c, d, x[i], 0u32, 3);
        step!(f, d, a, b, c, x[i + 1], 0u32, 7);
        step!(f, c, d, a, b, x[i + 2], 0u32, 11);
        step!(f, b, c, d, a, x[i + 3], 0u32, 19);
    }
    for &i in &[1usize, 0] {
        step!(g, a, b, c, d, x[i], K2, 3);
        step!(g, d, a, b, c, x[i + 2], K2, 5);
        step!(g, c, d, a, b, x[i + 4], K2, 9);
        step!(g, b, c, d, a, x[i + 6], K2, 13);
    }
    for &(i0, i1, i2, i3) in &[(3usize, 7usize, 2usize, 6usize), (1, 5, 0, 4)] {
        step!(h, a, b, c, d, x[i0], K3, 3);
        step!(h, d, a, b, c, x[i1], K3, 9);
        step!(h, c, d, a, b, x[i2], K3, 11);
        step!(h, b, c, d, a, x[i3], K3, 15);
    }
    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}

/// The position of the index entry a hash falls under: the last whose hash
/// is at most `hash` (the first entry stands for hash 0), as the kernel's
/// `dx_probe` binary search.
fn dx_pick(entries: &[DxEntry], hash: u32) -> usize {
    entries
        .get(1..)
        .map_or(0, |rest| rest.partition_point(|e| e.hash <= hash))
}

/// Where a name goes in an htree directory: what [`dx_path`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxPath {
    /// The directory's hash function.
    pub hasher: DxHash,
    /// The name's hash (low bit clear).
    pub hash: u32,
    /// The logical block of the leaf the name hashes to.
    pub leaf: u32,
    /// Each index block from the root down: its logical block (0 for the
    /// root), its entries, its limit, and the position of the entry
    /// followed. The last one points at the leaf.
    pub levels: Vec<DxLevel>,
}

/// One index block on a [`DxPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxLevel {
    /// Its logical block in the directory (0: the dx root).
    pub block: u32,
    /// Its entries.
    pub entries: Vec<DxEntry>,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The position of the entry followed.
    pub at: usize,
}

/// The logical block of the leaf that `name` hashes to in an htree
/// directory (the kernel's `dx_probe`): [`dx_path`]'s leaf.
///
/// # Errors
/// As [`dx_path`].
#[cfg(any(test, feature = "testing"))]
pub fn leaf_for<F>(
    name: &[u8],
    root_block: &[u8],
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    read: F,
) -> Result<u32, Ext4Error>
where
    F: FnMut(u32) -> Result<Vec<u8>, Ext4Error>,
{
    Ok(dx_path(name, root_block, s_flags, hash_seed, seed, read)?.leaf)
}

/// The path from the dx root to the leaf that `name` hashes to (the
/// kernel's `dx_probe`): hashes the name with the root's hash version
/// ([`DxHash::for_dir`] with `s_flags` and `s_hash_seed`) and walks from
/// the dx root in `root_block` down through `indirect_levels` dx nodes,
/// each read by `read(logical_block)`.
///
/// With `seed` (metadata_csum: the directory's [`raw::inode_seed`](super::raw::inode_seed)) every dx
/// block's tail checksum is verified on the way. The name, if present, is
/// in the returned leaf, except when a run of names with the same hash
/// spans leaves: the kernel then also searches the following leaves while
/// their index hash (low bit cleared) equals the name's (its
/// `ext4_htree_next_block`).
///
/// # Errors
/// As [`parse_dx_root`], [`parse_dx_node`], [`verify_dx`] and
/// [`DxHash::for_dir`]; whatever `read` returns.
pub fn dx_path<F>(
    name: &[u8],
    root_block: &[u8],
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    mut read: F,
) -> Result<DxPath, Ext4Error>
where
    F: FnMut(u32) -> Result<Vec<u8>, Ext4Error>,
{
    let csum = seed.is_some();
    let root = parse_dx_root(root_block, csum)?;
    if let Some(s) = seed {
        verify_dx(s, root_block)?;
    }
    let hasher = DxHash::for_dir(root.hash_version, s_flags, hash_seed)?;
    let (hash, _) = hasher.hash(name);
    let mut level = DxLevel {
        block: 0,
        at: dx_pick(&root.entries, hash),
        entries: root.entries,
        limit: root.limit,
    };
    let mut levels = Vec::new();
    for _ in 0..root.indirect_levels {
        let child = level.entries[level.at].block;
        let block = read(child)?;
        if let Some(s) = seed {
            verify_dx(s, &block)?;
        }
        if block.len() != root_block.len() {
            return Err(invalid(
                "block_size",
                block.len() as u64,
                "read returned a block of another size than the root's",
            ));
        }
        let node = parse_dx_node(&block, csum)?;
        levels.push(level);
        level = DxLevel {
            block: child,
            at: dx_pick(&node.entries, hash),
            entries: node.entries,
            limit: node.limit,
        };
    }
    let leaf = level.entries[level.at].block;
    levels.push(level);
    Ok(DxPath {
        hasher,
        hash,
        leaf,
        levels,
    })
}

/// A leaf split in two by [`split_leaf`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSplit {
    /// The old leaf's new contents: the names hashing below [`LeafSplit::hash`].
    pub lower: Vec<u8>,
    /// The new leaf: the names from the split hash up.
    pub upper: Vec<u8>,
    /// The index hash of the new leaf: the lowest hash in `upper`, plus 1
    /// when names with that hash remain in `lower` too (a collision run
    /// continued across the two leaves).
    pub hash: u32,
}

/// Splits a full htree leaf (the kernel's `do_split`): its live entries are
/// sorted by `(hash, minor_hash)` and the top ones, up to half the block's
/// room, move to a new block; both blocks are written packed (each record
/// its [`entry_size`], the last one taking the rest) and, with `seed`
/// (metadata_csum: the directory's [`raw::inode_seed`](super::raw::inode_seed)), signed. Names keep
/// their inode and file type.
///
/// # Errors
/// As [`entries`] for a bad block; [`Ext4Error::InvalidArgument`]
/// (`"entries"`) for a leaf with fewer than two entries (nothing to split).
pub fn split_leaf(leaf: &[u8], hasher: &DxHash, seed: Option<u32>) -> Result<LeafSplit, Ext4Error> {
    let csum = seed.is_some();
    let mut map: Vec<((u32, u32), DirEntry)> = entries(leaf, csum)?
        .into_iter()
        .map(|e| (hasher.hash(&e.name), e))
        .collect();
    if map.len() < 2 {
        return Err(invalid(
            "entries",
            map.len() as u64,
            "a leaf needs two entries to split",
        ));
    }
    map.sort_by_key(|(h, _)| *h);
    let room = leaf.len() - if csum { TAIL_LEN } else { 0 };
    // Move entries from the top while they fill at most half the room.
    let mut split = map.len();
    let mut moved = 0;
    while split > 1 {
        let size = entry_size(map[split - 1].1.name.len());
        if moved + size > room / 2 {
            break;
        }
        moved += size;
        split -= 1;
    }
    split = split.min(map.len() - 1);
    let hash2 = map[split].0 .0;
    let continued = u32::from(map[split - 1].0 .0 == hash2);
    let pack = |part: &[((u32, u32), DirEntry)]| -> Result<Vec<u8>, Ext4Error> {
        let mut b = vec![0u8; leaf.len()];
        let mut off = 0;
        for (i, (_, e)) in part.iter().enumerate() {
            let len = if i + 1 == part.len() {
                room - off
            } else {
                entry_size(e.name.len())
            };
            put16(&mut b, off + 4, rec_len_to_disk(len, leaf.len())?);
            write_entry(&mut b, off, &e.name, e.inode, e.file_type);
            off += len;
        }
        if let Some(s) = seed {
            sign_tail(s, &mut b)?;
        }
        Ok(b)
    };
    Ok(LeafSplit {
        lower: pack(&map[..split])?,
        upper: pack(&map[split..])?,
        hash: hash2 + continued,
    })
}

/// Rewrites the index entries of a dx root or node: `count` becomes
/// `entries.len()` and the entries are written in order (the first entry's
/// hash is the count/limit pair, so only its block is written); the slots
/// after them are zeroed, and with `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](super::raw::inode_seed)) the dx tail is re-signed. For an index that splits or
/// moves down a level (the kernel's `ext4_dx_add_entry`).
///
/// # Errors
/// As [`dx_checksum`] for a block that is neither a dx root nor a dx node;
/// [`Ext4Error::InvalidArgument`] (`"entries"`) for none, or more than the
/// limit.
pub fn dx_rewrite(
    index: &mut [u8],
    entries: &[DxEntry],
    seed: Option<u32>,
) -> Result<(), Ext4Error> {
    let off = dx_count_offset(index)?;
    let limit = usize::from(le16(index, off));
    if entries.is_empty() || entries.len() > limit {
        return Err(invalid(
            "entries",
            entries.len() as u64,
            "an index holds 1 to limit entries",
        ));
    }
    let end = off + limit * DX_ENTRY_LEN;
    if end > index.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "larger than the block",
        ));
    }
    put16(index, off + 2, entries.len() as u16);
    for (i, e) in entries.iter().enumerate() {
        let at = off + i * DX_ENTRY_LEN;
        if i > 0 {
            put32(index, at, e.hash);
        }
        put32(index, at + 4, e.block);
    }
    index[off + entries.len() * DX_ENTRY_LEN..end].fill(0);
    if let Some(s) = seed {
        sign_dx(s, index)?;
    }
    Ok(())
}

/// A new dx node block holding `entries` (an empty record spanning the
/// block, then the count/limit pair with the node limit for this block
/// size and metadata_csum, the entries and, with `seed`, the signed dx
/// tail).
///
/// # Errors
/// As [`dx_rewrite`]; [`Ext4Error::InvalidArgument`] (`"block_size"`) for
/// a block size that is not a power of two from 1024 to 65536.
pub fn dx_node(
    block_size: usize,
    entries: &[DxEntry],
    seed: Option<u32>,
) -> Result<Vec<u8>, Ext4Error> {
    check_block_size(block_size)?;
    let mut b = vec![0u8; block_size];
    put16(&mut b, 4, rec_len_to_disk(block_size, block_size)?);
    let limit = dx_limit(block_size, false, seed.is_some());
    put16(&mut b, DX_NODE_COUNT_OFFSET, limit as u16);
    dx_rewrite(&mut b, entries, seed)?;
    Ok(b)
}

/// Sets a dx root's `indirect_levels` and re-signs it (with `seed`).
///
/// # Errors
/// As [`parse_dx_root`] for a block that is not a dx root;
/// [`Ext4Error::InvalidArgument`] (`"indirect_levels"`) above 2.
pub fn dx_set_levels(root: &mut [u8], levels: u8, seed: Option<u32>) -> Result<(), Ext4Error> {
    parse_dx_root(root, seed.is_some())?;
    if levels > DX_MAX_INDIRECT {
        return Err(invalid("indirect_levels", levels.into(), "at most 2"));
    }
    root[24 + 6] = levels;
    if let Some(s) = seed {
        sign_dx(s, root)?;
    }
    Ok(())
}

/// Inserts the index entry `(hash, block)` into a dx root or node right
/// after the entry at position `after` (the kernel's `dx_insert_block`),
/// and with `seed` (metadata_csum: the directory's [`raw::inode_seed`](super::raw::inode_seed)) re-signs
/// its dx tail (computed afresh: the entries after the new one move).
///
/// Returns `Ok(false)`, with the block unchanged, when the block is full
/// (`count == limit`): the index itself would have to split.
///
/// # Errors
/// As [`dx_checksum`] for a block that is neither a dx root nor a dx node;
/// [`Ext4Error::InvalidArgument`] (`"after"`) for a position past the
/// entries, or a hash that would break their order.
pub fn dx_insert(
    index: &mut [u8],
    after: usize,
    hash: u32,
    block: u32,
    seed: Option<u32>,
) -> Result<bool, Ext4Error> {
    let off = dx_count_offset(index)?;
    let limit = usize::from(le16(index, off));
    let count = usize::from(le16(index, off + 2));
    if after >= count {
        return Err(invalid("after", after as u64, "past the index's entries"));
    }
    let hash_at = |i: usize| {
        if i == 0 {
            0
        } else {
            le32(index, off + i * DX_ENTRY_LEN)
        }
    };
    if hash < hash_at(after) || (after + 1 < count && hash > hash_at(after + 1)) {
        return Err(invalid("after", after as u64, "the hash does not go there"));
    }
    if count >= limit {
        return Ok(false);
    }
    let at = off + (after + 1) * DX_ENTRY_LEN;
    let end = off + count * DX_ENTRY_LEN;
    if end + DX_ENTRY_LEN > index.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "larger than the block",
        ));
    }
    index.copy_within(at..end, at + DX_ENTRY_LEN);
    put32(index, at, hash);
    put32(index, at + 4, block);
    put16(index, off + 2, (count + 1) as u16);
    if let Some(s) = seed {
        sign_dx(s, index)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full leaf splits into two signed blocks holding the same names,
    /// the lower ones below the split hash and the upper ones from it, and
    /// the new index entry goes in order with a fresh dx tail.
    #[test]
    fn split_leaf_and_dx_insert() {
        let hasher = DxHash::new(1, [7; 16]).unwrap();
        for (bs, seed) in [(1024, Some(0x1234_5678)), (4096, None), (1024, None)] {
            let mut leaf = init_block(bs, seed).unwrap();
            let mut names = Vec::new();
            for i in 0.. {
                let name = std::format!("name-{i:04}-{}", "x".repeat(i % 37));
                if !add_entry(
                    &mut leaf,
                    name.as_bytes(),
                    100 + i as u32,
                    FT_REG_FILE,
                    seed.is_some(),
                )
                .unwrap()
                {
                    break;
                }
                names.push(name.into_bytes());
            }
            let sp = split_leaf(&leaf, &hasher, seed).unwrap();
            let csum = seed.is_some();
            if let Some(s) = seed {
                verify_tail(s, &sp.lower).unwrap();
                verify_tail(s, &sp.upper).unwrap();
            }
            let lower = entries(&sp.lower, csum).unwrap();
            let upper = entries(&sp.upper, csum).unwrap();
            assert_eq!(lower.len() + upper.len(), names.len());
            assert!(!lower.is_empty() && !upper.is_empty());
            let split = sp.hash & !1;
            for e in &lower {
                let h = hasher.hash(&e.name).0;
                assert!(h < split || (h == split && sp.hash & 1 == 1));
            }
            for e in &upper {
                assert!(hasher.hash(&e.name).0 >= split);
                assert_eq!(
                    u64::from(e.inode),
                    100 + names.iter().position(|n| *n == e.name).unwrap() as u64
                );
            }
            // Each half has room again.
            assert!(add_entry(&mut sp.lower.clone(), b"one-more-name", 9, 1, csum).unwrap());
            assert!(add_entry(&mut sp.upper.clone(), b"one-more-name", 9, 1, csum).unwrap());

            // A dx node with three entries; insert after the second.
            let mut node = vec![0u8; bs];
            put16(&mut node, 4, rec_len_to_disk(bs, bs).unwrap());
            let limit = dx_limit(bs, false, csum);
            put16(&mut node, 8, limit as u16);
            put16(&mut node, 10, 3);
            for (i, (h, b)) in [(0, 1), (split / 2, 2), (split.saturating_add(8) | 0x100, 3)]
                .iter()
                .enumerate()
            {
                if i > 0 {
                    put32(&mut node, 8 + i * 8, *h);
                }
                put32(&mut node, 12 + i * 8, *b);
            }
            if let Some(s) = seed {
                let (tail, _) = dx_tail_at(&node).unwrap();
                let c = dx_checksum(s, &node).unwrap();
                put32(&mut node, tail + 4, c);
            }
            let bad = dx_insert(&mut node.clone(), 0, sp.hash, 9, seed);
            assert!(bad.is_err(), "out of order");
            assert!(dx_insert(&mut node, 1, sp.hash, 9, seed).unwrap());
            let parsed = parse_dx_node(&node, csum).unwrap();
            let blocks: Vec<u32> = parsed.entries.iter().map(|e| e.block).collect();
            assert_eq!(blocks, [1, 2, 9, 3]);
            assert_eq!(parsed.entries[2].hash, sp.hash);
            if let Some(s) = seed {
                verify_dx(s, &node).unwrap();
            }
            // Full: refused, unchanged.
            put16(&mut node, 8, 4);
            let before = node.clone();
            assert!(!dx_insert(&mut node, 1, sp.hash, 10, seed).unwrap());
            assert_eq!(node, before);
        }
    }

    #[test]
    fn rec_len_round_trips_for_every_block_size() {
        for shift in 10..=16 {
            let bs = 1usize << shift;
            for len in (12..=bs).step_by(4) {
                let raw = rec_len_to_disk(len, bs).unwrap();
                assert_eq!(rec_len_from_disk(raw, bs), len, "bs {bs} len {len}");
            }
            assert!(rec_len_to_disk(bs + 4, bs).is_err());
            assert!(rec_len_to_disk(14, bs).is_err());
        }
        assert_eq!(rec_len_to_disk(65536, 65536).unwrap(), 0xFFFF);
        assert_eq!(rec_len_from_disk(0, 65536), 65536);
        assert_eq!(rec_len_from_disk(0xFFFF, 65536), 65536);
        // Below 64 KiB the value is taken as it is.
        assert_eq!(rec_len_from_disk(0, 4096), 0);
    }

    #[test]
    fn init_block_parses_empty() {
        for bs in [1024, 4096, 65536] {
            for seed in [None, Some(0xDEAD_BEEF)] {
                let b = init_block(bs, seed).unwrap();
                let recs = records(&b, seed.is_some()).unwrap();
                assert_eq!(recs.len(), 1);
                assert_eq!(recs[0].rec_len, bs - if seed.is_some() { 12 } else { 0 });
                assert!(entries(&b, seed.is_some()).unwrap().is_empty());
                if let Some(s) = seed {
                    verify_tail(s, &b).unwrap();
                    assert!(verify_tail(s ^ 1, &b).is_err());
                }
            }
        }
        assert!(init_block(2000, None).is_err());
        assert!(init_block(512, None).is_err());
    }

    #[test]
    fn bad_records_are_corrupt() {
        let good = init_block(1024, Some(1)).unwrap();
        let mut b = good.clone();
        assert!(add_entry(&mut b, b"abc", 11, FT_REG_FILE, true).unwrap());
        assert!(add_entry(&mut b, b"defgh", 12, FT_REG_FILE, true).unwrap());
        records(&b, true).unwrap();
        let bad = |b: &[u8], field: &str, why: &str| match records(b, true) {
            Err(Ext4Error::Corrupt {
                field: f, reason, ..
            }) => {
                assert_eq!(f, field);
                assert!(reason.contains(why), "{reason}");
            }
            other => panic!("expected Corrupt {field}, got {other:?}"),
        };
        // rec_len not a multiple of 4.
        let mut x = b.clone();
        put16(&mut x, 4, 14);
        bad(&x, "rec_len", "multiple of 4");
        // rec_len too small for the name.
        let mut x = b.clone();
        x[6] = 9;
        bad(&x, "rec_len", "name_len");
        // rec_len runs into the tail.
        let mut x = good.clone();
        put16(&mut x, 4, 1024);
        bad(&x, "rec_len", "past the end");
        // Live entry with an empty name.
        let mut x = b.clone();
        x[12 + 6] = 0;
        bad(&x, "name_len", "empty name");
        // Damaged tail.
        let mut x = b.clone();
        x[1024 - 5] = 0;
        bad(&x, "det_reserved_ft", "tail");
        // A record shorter than 12 bytes.
        let mut x = b.clone();
        put16(&mut x, 12 + 4, 8);
        bad(&x, "rec_len", "smallest");
        // The chain stops short of the tail: the last record 4 bytes short
        // leaves a gap no record fits.
        let mut x = b.clone();
        let last = records(&b, true).unwrap()[1];
        put16(&mut x, last.offset + 4, (last.rec_len - 4) as u16);
        bad(&x, "rec_len", "do not reach");
        // Bad buffers.
        assert!(matches!(
            records(&[0u8; 1000], false),
            Err(Ext4Error::InvalidArgument {
                what: "block_size",
                ..
            })
        ));
    }

    #[test]
    fn names_are_checked() {
        let mut b = init_block(1024, None).unwrap();
        for name in [&b""[..], b".", b"..", b"a/b", b"a\0b", &[b'x'; 256]] {
            match add_entry(&mut b, name, 12, 1, false) {
                Err(Ext4Error::InvalidArgument { what: "name", .. }) => {}
                other => panic!("{name:?}: {other:?}"),
            }
        }
        assert!(add_entry(&mut b, &[b'x'; 255], 12, 1, false).unwrap());
        assert!(matches!(
            add_entry(&mut b, &[b'x'; 255], 13, 1, false),
            Err(Ext4Error::InvalidArgument { what: "name", .. })
        ));
        assert!(matches!(
            add_entry(&mut b, b"y", 0, 1, false),
            Err(Ext4Error::InvalidArgument { what: "ino", .. })
        ));
    }

    #[test]
    fn full_block_says_no_room() {
        let mut b = init_block(1024, Some(5)).unwrap();
        let mut n = 0;
        while add_entry(&mut b, format!("f{n:03}").as_bytes(), 20 + n, 1, true).unwrap() {
            n += 1;
        }
        // 1012 bytes / 12-byte records.
        assert_eq!(n, 84);
        let before = b.clone();
        assert!(!add_entry(&mut b, b"more", 9, 1, true).unwrap());
        assert_eq!(b, before);
        verify_tail(5, &b).unwrap();
    }

    /// A dx root for 1 KiB blocks with metadata_csum and the given
    /// entries (hash of the first ignored), signed with `seed`.
    fn dx_root(entries: &[(u32, u32)], seed: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        put32(&mut b, 0, 12);
        put16(&mut b, 4, 12);
        b[6] = 1;
        b[7] = FT_DIR;
        b[8] = b'.';
        put32(&mut b, 12, 2);
        put16(&mut b, 16, 1012);
        b[18] = 2;
        b[19] = FT_DIR;
        b[20..22].copy_from_slice(b"..");
        b[24 + 4] = 1;
        b[24 + 5] = 8;
        put16(&mut b, 32, dx_limit(1024, true, true) as u16);
        put16(&mut b, 34, entries.len() as u16);
        for (i, &(h, blk)) in entries.iter().enumerate() {
            if i > 0 {
                put32(&mut b, 32 + 8 * i, h);
            }
            put32(&mut b, 36 + 8 * i, blk);
        }
        let c = dx_checksum(seed, &b).unwrap();
        put32(&mut b, 1020, c);
        b
    }

    #[test]
    fn dx_root_parse_checks_and_lookup() {
        let seed = 77;
        let b = dx_root(&[(0, 1), (0x4000_0000, 2), (0x8000_0001, 3)], seed);
        let r = parse_dx_root(&b, true).unwrap();
        assert_eq!((r.dot, r.dotdot, r.hash_version, r.limit), (12, 2, 1, 123));
        assert_eq!(
            r.entries[2],
            DxEntry {
                hash: 0x8000_0001,
                block: 3
            }
        );
        verify_dx(seed, &b).unwrap();
        assert_eq!(
            stored_dx_checksum(&b).unwrap(),
            dx_checksum(seed, &b).unwrap()
        );
        assert!(matches!(
            verify_dx(seed + 1, &b),
            Err(Ext4Error::BadChecksum { .. })
        ));
        // Without metadata_csum the limit is one more.
        assert!(parse_dx_root(&b, false).is_err());
        // Not a linear block under csum.
        assert!(records(&b, true).is_err());
        // The lookup picks the last entry whose hash is at most the name's.
        let h = DxHash::for_dir(1, FLAGS_SIGNED_HASH, [0; 16]).unwrap();
        for name in [&b"a"[..], b"bb", b"some-longer-name", b"x"] {
            let (hash, _) = h.hash(name);
            let want = if hash >= 0x8000_0001 {
                3
            } else if hash >= 0x4000_0000 {
                2
            } else {
                1
            };
            let got = leaf_for(name, &b, FLAGS_SIGNED_HASH, [0; 16], Some(seed), |_| {
                panic!("no nodes to read")
            })
            .unwrap();
            assert_eq!(got, want, "{name:?} hash {hash:#x}");
        }
        // Damage, field by field.
        let field = |b: &[u8]| match parse_dx_root(b, true) {
            Err(Ext4Error::Corrupt { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut x = b.clone();
        put16(&mut x, 34, 124);
        assert_eq!(field(&x), "dx_countlimit.count");
        put16(&mut x, 34, 0);
        assert_eq!(field(&x), "dx_countlimit.count");
        let mut x = b.clone();
        put16(&mut x, 32, 122);
        assert_eq!(field(&x), "dx_countlimit.limit");
        let x = dx_root(&[(0, 1), (0x8000_0000, 2), (0x4000_0000, 3)], seed);
        assert_eq!(field(&x), "dx_entry.hash");
        let mut x = b.clone();
        x[24 + 5] = 12;
        assert_eq!(field(&x), "dx_root_info.info_length");
        let mut x = b.clone();
        x[24 + 6] = 3;
        assert_eq!(field(&x), "dx_root_info.indirect_levels");
        let mut x = b.clone();
        x[24 + 4] = 4;
        assert_eq!(field(&x), "dx_root_info.hash_version");
        let mut x = b.clone();
        put16(&mut x, 16, 12);
        assert_eq!(field(&x), "rec_len");
        // The top four bits of a dx block number are not part of it.
        let x = dx_root(&[(0, 0xF000_0001)], seed);
        assert_eq!(parse_dx_root(&x, true).unwrap().entries[0].block, 1);
    }

    #[test]
    fn hash_variants_differ_only_on_high_bytes() {
        for v in 0..3u8 {
            let s = DxHash::new(v, [0; 16]).unwrap();
            let u = DxHash::new(v + 3, [0; 16]).unwrap();
            assert!(u.unsigned && !s.unsigned);
            assert_eq!(s.hash(b"plain-ascii"), u.hash(b"plain-ascii"));
            assert_ne!(
                s.hash("caf\u{e9}".as_bytes()),
                u.hash("caf\u{e9}".as_bytes())
            );
            assert_eq!(s.hash(b"x").0 & 1, 0);
        }
        assert!(
            DxHash::for_dir(2, FLAGS_UNSIGNED_HASH, [0; 16])
                .unwrap()
                .unsigned
        );
        assert!(matches!(
            DxHash::new(7, [0; 16]),
            Err(Ext4Error::InvalidArgument {
                what: "hash_version",
                ..
            })
        ));
    }

    #[test]
    fn hash_known_values() {
        // debugfs 1.47: `dx_hash -h half_md4 -s 333f066d-57d0-4783-a949-d95b2f797695 n5_xx`
        let seed = [
            0x33, 0x3f, 0x06, 0x6d, 0x57, 0xd0, 0x47, 0x83, 0xa9, 0x49, 0xd9, 0x5b, 0x2f, 0x79,
            0x76, 0x95,
        ];
        let h = DxHash::new(1, seed).unwrap();
        assert_eq!(h.hash(b"n5_xx"), (0x466e_c0b2, 0x8764_9ae1));
    }
}
