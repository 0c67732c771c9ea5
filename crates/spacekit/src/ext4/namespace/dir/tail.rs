//! The metadata_csum checksum tail of a linear directory block
//! (`struct ext4_dir_entry_tail`): checking it, computing and signing it,
//! and keeping it current through an edit by [`crate::crc32c::splice`].

use crate::crc32c;
use crate::ext4::error::{corrupt, Ext4Error};
use crate::ext4::layout::{le16, le32, put16, put32};

use super::format::{check_block_size, FT_DIR_CSUM, HEADER_LEN, MAX_NAME_LEN, TAIL_LEN};

/// Whether the last 12 bytes of `block` hold a checksum tail
/// (`ext4_dir_entry_tail`: inode 0, rec_len 12, name_len 0, file_type
/// 0xDE), as the kernel's `get_dirent_tail` checks.
#[cfg(any(test, feature = "testing"))]
pub fn has_tail(block: &[u8]) -> bool {
    check_tail(block).is_ok()
}

/// Checks the 12-byte tail's fixed fields.
pub(super) fn check_tail(block: &[u8]) -> Result<(), Ext4Error> {
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
/// `ext4_dirblock_csum`): raw CRC-32C from the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed) over the block before the
/// 12-byte tail. A full pass over the block; the edits here keep the tail by
/// [`crate::crc32c::splice`] instead.
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

/// The largest region one edit changes: a record for a 255-byte name.
const MAX_EDIT: usize = HEADER_LEN + MAX_NAME_LEN + 1;

/// Edits `block` through `edit`, which changes only the bytes of the
/// `(offset, len)` regions (disjoint, at most [`MAX_EDIT`] bytes each,
/// inside the checksummed part), and, with `csum`, moves the tail's
/// checksum along by one [`crate::crc32c::splice`] per region.
pub(super) fn edit_spliced<const N: usize>(
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
