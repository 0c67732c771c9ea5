//! What an extent tree needs from the file system around it.

use std::vec::Vec;

use crate::ext4::error::Ext4Error;

/// What an extent tree needs from the file system around it. On a real
/// image the calls go to the block cache and redo log and the block
/// allocator; [`ExtentStore::alloc_tree_block`] and
/// [`ExtentStore::free_tree_block`] must also account the block in the
/// inode's `i_blocks` if the caller does not do so from the returned counts.
pub trait ExtentStore {
    /// The file system's block size in bytes (1024 to 65536).
    fn block_size(&self) -> usize;
    /// Reads extent-tree block `block` (exactly [`ExtentStore::block_size`]
    /// bytes).
    ///
    /// # Errors
    /// Whatever the store fails with; the operation stops and writes nothing.
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error>;
    /// Writes a changed or new tree block (its tail checksum already set).
    ///
    /// # Errors
    /// Whatever the store fails with; the tree may then be half written
    /// (the caller's redo log covers that).
    fn write(&mut self, block: u64, data: Vec<u8>) -> Result<(), Ext4Error>;
    /// Allocates a block for a new index or leaf node, near `goal` (the
    /// kernel's `ext4_ext_new_meta_block`).
    ///
    /// # Errors
    /// No space, typically [`Ext4Error::NoSpace`]; the operation frees what
    /// it already allocated and changes nothing.
    fn alloc_tree_block(&mut self, goal: u64) -> Result<u64, Ext4Error>;
    /// Frees a tree block that is no longer part of the tree.
    ///
    /// # Errors
    /// Whatever the store fails with.
    fn free_tree_block(&mut self, block: u64) -> Result<(), Ext4Error>;
}
