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
//! seeded with the directory inode's seed, [`raw::inode_seed`](crate::ext4::raw::inode_seed)). [`records`],
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
//! [`split_leaf`], [`dx_insert`] and the other edits grow an index, and
//! [`make_indexed`] makes one: a linear directory of one full block becomes
//! an htree as the kernel's `make_indexed_dir` makes it (block 0 the dx
//! root, its entries split by hash into two new leaves).
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

mod format;
mod grow;
mod hash;
mod htree;
mod index;
mod linear;
mod tail;

// The module's interface, kept in the files below by concern. Without
// `testing` the module is private and the crate uses only some of it.
#[cfg(any(test, feature = "testing"))]
pub use format::{FLAGS_SIGNED_HASH, FT_SYMLINK};
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use format::{
    FLAGS_UNSIGNED_HASH, FT_DIR, FT_DIR_CSUM, FT_REG_FILE, FT_UNKNOWN, INDEX_FL, MAX_NAME_LEN,
    TAIL_LEN,
};
#[cfg(any(test, feature = "testing"))]
pub use grow::split_leaf;
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use grow::{dx_insert, dx_node, dx_rewrite, dx_set_levels, split_leaf_for, LeafSplit};
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use hash::{DxHash, HashAlg};
#[cfg(any(test, feature = "testing"))]
pub use htree::leaf_for;
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use htree::{
    dx_checksum, dx_limit, dx_path, parse_dx_node, parse_dx_root, stored_dx_checksum, verify_dx,
    DxEntry, DxLevel, DxNode, DxPath, DxRoot,
};
#[cfg(any(test, feature = "testing"))]
pub use index::make_indexed;
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use index::{make_indexed_for, new_index_version, Indexed, COMPAT_DIR_INDEX};
#[cfg(any(test, feature = "testing"))]
pub use linear::records;
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use linear::{
    add_entry, entries, entry_size, find, init_block, iter_records, rec_len_from_disk,
    rec_len_to_disk, remove_entry, DirEntry, Record, Records,
};
pub(crate) use linear::{
    append_after, can_append, check_new_entry, find_slot, inline_entries, put_at_slot,
};
#[cfg(any(test, feature = "testing"))]
pub use tail::has_tail;
#[cfg_attr(not(any(test, feature = "testing")), allow(unused_imports))]
pub use tail::{sign_tail, stored_tail_checksum, tail_checksum, verify_tail};
