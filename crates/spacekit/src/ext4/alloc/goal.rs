//! Where a file's blocks go: the goal of a file (just past its last block,
//! else the first group of the inode's flex group, as e2fsprogs'
//! `ext2fs_find_inode_goal`), which every block of the file is allocated
//! from (see `alloc/mod.rs`).

use crate::ext4::error::Ext4Error;
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, ROOT_SIZE};

use crate::ext4::flags::*;
use crate::ext4::inode::file::ReadStore;

impl Image {
    /// The allocation goal for inode `ino`'s next block: just past its last
    /// physical block, else the first block of its group (with flex_bg,
    /// of the first group of its flex group).
    pub(crate) fn file_goal(
        &mut self,
        ino: u32,
        root: &[u8; ROOT_SIZE],
        seed: Option<u32>,
    ) -> Result<u64, Ext4Error> {
        let g = extent::goal(root, &mut ReadStore(self), seed)?;
        let (mut ig, _) = self.info.group_of_inode(ino).unwrap_or_default();
        if self.info.flex_bg {
            // The first group of the inode's flex group, as
            // `ext2fs_find_inode_goal` (the kernel's delalloc goal takes
            // the group after it for regular files).
            let log = u32::from(self.sb[SB_LOG_GROUPS_PER_FLEX]).min(31);
            ig &= !((1u32 << log) - 1);
        }
        Ok(match g {
            Some(b) if b < self.info.blocks_count => b,
            _ => self.info.group_first_block(ig),
        })
    }
}
