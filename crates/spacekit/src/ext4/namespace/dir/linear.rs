//! Linear directory blocks: the records and entries of a block, checked as
//! the kernel's `__ext4_check_dir_entry` does, the `rec_len` encoding, and
//! adding and removing entries.

use std::vec;
use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::{le16, le32, put16, put32};

use super::format::{
    check_block_size, HEADER_LEN, MAX_NAME_LEN, MAX_REC_LEN, MIN_REC_LEN, TAIL_LEN,
};
use super::tail::{check_tail, edit_spliced, sign_tail};

/// One live directory entry (a record whose inode is not 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirEntry {
    /// The inode it names.
    pub inode: u32,
    /// The name's bytes (1 to 255, not NUL-terminated).
    pub name: Vec<u8>,
    /// `file_type` ([`FT_REG_FILE`](super::FT_REG_FILE), [`FT_DIR`](super::FT_DIR), ...).
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
    /// A region of an inline directory, not a block: any length.
    region: bool,
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
        region: false,
    }
}

/// The live entries of a region of an inline directory (the kernel's
/// `inline_data` feature): the 56 bytes of `i_block` after the parent's
/// inode number, or the value of the inode's `system.data` attribute.
/// Records are checked as in a block, and must tile the region exactly; a
/// region has no checksum tail.
///
/// # Errors
/// As [`iter_records`] for a bad record.
pub(crate) fn inline_entries(region: &[u8]) -> Result<Vec<DirEntry>, Ext4Error> {
    live(Records {
        block: region,
        offset: 0,
        end: region.len(),
        done: false,
        region: true,
    })
}

/// The live entries (inode not 0) `records` yields, in order.
fn live(records: Records<'_>) -> Result<Vec<DirEntry>, Ext4Error> {
    let block = records.block;
    let mut out = Vec::new();
    for r in records {
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

impl Records<'_> {
    fn next_record(&mut self) -> Result<Option<Record>, Ext4Error> {
        let block = self.block;
        if self.offset == 0 && !self.region {
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
    live(iter_records(block, csum))
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

/// A new, empty linear directory block: one unused record (inode 0)
/// spanning it and, with `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)), the signed checksum tail (as the kernel's
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

/// Writes a live record's inode, name_len, file_type and name at `off`,
/// zeroing its padding (rec_len untouched).
pub(super) fn write_entry(block: &mut [u8], off: usize, name: &[u8], inode: u32, file_type: u8) {
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
/// with [`verify_tail`](super::verify_tail) when reading them. Never pass a dx root or dx node
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
    check_new_entry(name, inode)?;
    let Some(r) = find_slot(block, name, csum)? else {
        return Ok(false);
    };
    put_at_slot(block, r, name, inode, file_type, csum).map(|_| true)
}

/// The record [`add_entry`] would give `name` (the first with room; `None`
/// if none has), in one read of the records, refusing a name already in
/// the block and a bad block as [`add_entry`] does.
pub(crate) fn find_slot(
    block: &[u8],
    name: &[u8],
    csum: bool,
) -> Result<Option<Record>, Ext4Error> {
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
    Ok(slot)
}

/// [`add_entry`]'s change at record `r`, which [`find_slot`] gave for
/// `name` (checked by [`check_new_entry`]) in this block as it is now.
/// Returns the new entry's offset.
pub(crate) fn put_at_slot(
    block: &mut [u8],
    r: Record,
    name: &[u8],
    inode: u32,
    file_type: u8,
    csum: bool,
) -> Result<usize, Ext4Error> {
    let at = (r.offset, entry_size(name.len()));
    if r.inode == 0 {
        let put = |b: &mut [u8]| write_entry(b, at.0, name, inode, file_type);
        return edit_spliced(block, csum, [at], put).map(|()| at.0);
    }
    let room = (r.rec_len, r.used());
    split_record(block, at.0, room, name, inode, file_type, csum)
}

/// Refuses a name [`add_entry`] would refuse, and inode 0.
pub(crate) fn check_new_entry(name: &[u8], inode: u32) -> Result<(), Ext4Error> {
    check_name(name)?;
    if inode == 0 {
        return Err(invalid(
            "ino",
            0,
            "a directory entry names inode 1 or above",
        ));
    }
    Ok(())
}

/// Splits the live record at `at` (`(rec_len, used)`: its length and the
/// bytes of it its own): it keeps `used` bytes and the new entry takes the
/// rest, the tail's checksum moved along with `csum`. Returns the new
/// entry's offset.
fn split_record(
    block: &mut [u8],
    at: usize,
    (rec_len, used): (usize, usize),
    name: &[u8],
    inode: u32,
    file_type: u8,
    csum: bool,
) -> Result<usize, Ext4Error> {
    let bs = block.len();
    let new = at + used;
    let kept = rec_len_to_disk(used, bs)?;
    let rest = rec_len_to_disk(rec_len - used, bs)?;
    edit_spliced(
        block,
        csum,
        [(at + 4, 2), (new, entry_size(name.len()))],
        |b| {
            put16(b, at + 4, kept);
            put16(b, new + 4, rest);
            write_entry(b, new, name, inode, file_type);
        },
    )?;
    Ok(new)
}

/// Adds the entry `name` → `inode` after the record at byte `last`, which
/// must be the block's last record (live, its `rec_len` reaching the
/// checksum tail or the block's end): the split of [`add_entry`], for a
/// directory filled in order, without reading the records before `last`.
/// The name is not compared with the block's other names: the caller
/// knows it is new. Returns the new entry's offset (the block's last
/// record now), or `None`, the block unchanged, when the record at `last`
/// is not such a record or has no room.
///
/// # Errors
/// As [`add_entry`] for the name and the inode.
pub(crate) fn append_after(
    block: &mut [u8],
    last: usize,
    name: &[u8],
    inode: u32,
    file_type: u8,
    csum: bool,
) -> Result<Option<usize>, Ext4Error> {
    check_new_entry(name, inode)?;
    let Some(room) = append_slot(block, last, entry_size(name.len()), csum) else {
        return Ok(None);
    };
    split_record(block, last, room, name, inode, file_type, csum).map(Some)
}

/// Whether [`append_after`] would put a name of `name_len` bytes after the
/// record at `last` (without changing the block).
pub(crate) fn can_append(block: &[u8], last: usize, name_len: usize, csum: bool) -> bool {
    append_slot(block, last, entry_size(name_len), csum).is_some()
}

/// The `rec_len` and used size of the record at `last` when it is the
/// block's last live record, reaching the checksum tail or the block's
/// end, with `need` bytes of room after its own.
fn append_slot(block: &[u8], last: usize, need: usize, csum: bool) -> Option<(usize, usize)> {
    let bs = block.len();
    let end = if csum { bs.checked_sub(TAIL_LEN)? } else { bs };
    if last + HEADER_LEN > end || le32(block, last) == 0 {
        return None;
    }
    let rec_len = rec_len_from_disk(le16(block, last + 4), bs);
    let used = entry_size(usize::from(block[last + 6]));
    (last + rec_len == end && rec_len >= used + need).then_some((rec_len, used))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::namespace::dir::{verify_tail, FT_REG_FILE};

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
    fn append_after_puts_entries_where_add_entry_puts_them_in_order() {
        for bs in [1024, 4096, 65536] {
            for seed in [None, Some(0x1234_5678)] {
                let csum = seed.is_some();
                let mut a = init_block(bs, seed).unwrap();
                add_entry(&mut a, b"first", 11, FT_REG_FILE, csum).unwrap();
                let mut b = a.clone();
                let mut last = 0;
                let mut n = 0u32;
                loop {
                    let pad = "x".repeat((n as usize * 37) % 200);
                    let name = std::format!("name-{n:04}-{pad}");
                    let ino = 12 + n;
                    let room = find_slot(&a, name.as_bytes(), csum).unwrap().is_some();
                    let fits = can_append(&b, last, name.len(), csum);
                    let added = add_entry(&mut a, name.as_bytes(), ino, FT_REG_FILE, csum).unwrap();
                    assert_eq!(
                        (room, fits),
                        (added, added),
                        "bs {bs} csum {csum} entry {n}"
                    );
                    let put = append_after(&mut b, last, name.as_bytes(), ino, FT_REG_FILE, csum)
                        .unwrap();
                    assert_eq!(added, put.is_some(), "bs {bs} csum {csum} entry {n}");
                    assert_eq!(a, b, "bs {bs} csum {csum} entry {n}");
                    let Some(at) = put else { break };
                    last = at;
                    n += 1;
                }
                assert!(n >= 4, "bs {bs}: {n} entries fitted");
                assert_eq!(entries(&b, csum).unwrap().len(), n as usize + 1);
                if let Some(s) = seed {
                    verify_tail(s, &b).unwrap();
                }
            }
        }
    }

    #[test]
    fn append_after_needs_the_last_live_record() {
        for seed in [None, Some(7)] {
            let csum = seed.is_some();
            let mut b = init_block(1024, seed).unwrap();
            let before = b.clone();
            // The block's only record is unused: nothing to append after.
            assert_eq!(append_after(&mut b, 0, b"a", 12, 1, csum).unwrap(), None);
            add_entry(&mut b, b"a", 12, 1, csum).unwrap();
            let at = append_after(&mut b, 0, b"b", 13, 1, csum).unwrap().unwrap();
            assert_eq!(at, 12);
            let kept = b.clone();
            // Not the last record, past the records, inside a record.
            for off in [0, 1020, 4] {
                assert_eq!(append_after(&mut b, off, b"c", 14, 1, csum).unwrap(), None);
                assert_eq!(b, kept);
            }
            assert!(append_after(&mut b, at, b"a/b", 14, 1, csum).is_err());
            assert!(append_after(&mut b, at, b"c", 0, 1, csum).is_err());
            assert_eq!(b, kept);
            assert_ne!(b, before);
        }
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
}
