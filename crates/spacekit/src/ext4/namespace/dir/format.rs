//! The on-disk constants the directory formats share, and the block size
//! check every block function starts with.

use crate::ext4::error::{invalid, Ext4Error};

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
pub(super) const MAX_REC_LEN: u16 = 0xFFFF;
/// Bytes of a record's fixed header (inode, rec_len, name_len, file_type).
pub(super) const HEADER_LEN: usize = 8;
/// The smallest `rec_len` of any record (`EXT4_DIR_REC_LEN(1)`).
pub(super) const MIN_REC_LEN: usize = 12;

/// Checks that `len` is a block size ext4 allows.
pub(super) fn check_block_size(len: usize) -> Result<(), Ext4Error> {
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
