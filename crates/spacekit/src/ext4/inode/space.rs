//! A file's space: [`Image::fallocate`] (unwritten extents from the goal),
//! [`Image::truncate`] (blocks past the new end freed, the last block's
//! tail zeroed), and the room checks before either changes anything.

use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, Extent, ROOT_SIZE};
use crate::ext4::layout::{self, le32};

use crate::ext4::flags::*;
use crate::ext4::inode::file::{ImageStore, ReadStore};

impl Image {
    /// Allocates unwritten blocks for bytes `[offset, offset + len)` of
    /// regular file `ino` (`fallocate(2)` without `FALLOC_FL_ZERO_RANGE`):
    /// logical blocks `offset / bs` up to `ceil((offset + len) / bs)`,
    /// skipping those already mapped. Blocks come from the goal ext4 uses
    /// (just past the file's last physical block, else the first block of
    /// the inode's group, or with flex_bg of its flex group's first group,
    /// as e2fsprogs' `ext2fs_find_inode_goal`), as ext4 extends a file: each step takes the
    /// free run at or after the goal (the first free block from the goal
    /// on, wrapping through the groups, and the free blocks after it), at
    /// most 32,767 blocks (an unwritten extent) and the rest of its group,
    /// and the next goal is just past it. So the data fills the free space
    /// in order from the goal, skipping only blocks in use (metadata), and
    /// a request may take several extents and span groups. `i_blocks`
    /// grows by the data and tree blocks added; the size becomes
    /// `max(size, offset + len)` unless `keep_size` (a grown file's block
    /// holding the old end is zeroed past it, as [`Image::truncate`]
    /// does); the ctime becomes now
    /// when anything changed, the mtime too when the size did. Returns the
    /// data blocks allocated.
    ///
    /// # Errors
    /// [`Ext4Error::NotARegularFile`]; [`Ext4Error::FileTooBig`] for an
    /// end past [`Image::max_file_size`];
    /// [`Ext4Error::NoSpace`] when the free blocks cannot cover the request
    /// and its tree blocks (checked first); an error in the middle (I/O
    /// reading a bitmap or a tree block, a corrupt tree block) undoes
    /// every change the call made. On any error nothing changes.
    pub fn fallocate(
        &mut self,
        ino: u32,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<u64, Ext4Error> {
        self.atomically(|img| img.fallocate_op(ino, offset, len, keep_size))
    }

    /// [`Image::fallocate`], inside its undo.
    pub(crate) fn fallocate_op(
        &mut self,
        ino: u32,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<u64, Ext4Error> {
        self.check_writable()?;
        let (mut root, inode) = self.root_of_file(ino)?;
        let end = self.range_end(offset, len)?;
        if len == 0 {
            return Err(invalid("len", 0, "must be at least 1"));
        }
        let bs = u64::from(self.info.block_size);
        let first = offset / bs;
        let last = end.div_ceil(bs);
        let seed = self.seed_of(ino, inode.generation);
        let exts = extent::extents(&root, &mut ReadStore(self), seed)?;
        let holes = holes(&exts, first, last);
        let need: u64 = holes.iter().map(|(a, b)| b - a).sum();
        let est_extents = holes.len() as u64 + need / u64::from(extent::MAX_UNWRITTEN_LEN) + 1;
        self.check_room(&root, &inode, need, est_extents, len)?;
        if !keep_size && end > inode.size {
            // The bytes between the old end and the new one read as zeros.
            self.zero_block_tail(&inode, &root, seed, inode.size, true)?;
        }
        let mut goal = self.file_goal(ino, &root, seed)?;
        let mut data = 0u64;
        let mut tree = 0u64;
        for (mut a, b) in holes {
            while a < b {
                let max = (b - a).min(u64::from(extent::MAX_UNWRITTEN_LEN)) as u32;
                let g = (goal < self.info.blocks_count).then_some(goal);
                let (p, want) = self.alloc_run_from(g, max)?;
                let mut store = ImageStore::new(self);
                let out = extent::insert(
                    &mut root,
                    &mut store,
                    seed,
                    Extent {
                        logical: a as u32,
                        physical: p,
                        len: want as u16,
                        unwritten: true,
                    },
                )?;
                tree += u64::from(out.tree_blocks_added);
                data += u64::from(want);
                a += u64::from(want);
                goal = p + u64::from(want);
            }
        }
        let size = if keep_size {
            inode.size
        } else {
            inode.size.max(end)
        };
        if data + tree > 0 || size != inode.size {
            let blocks = inode.blocks + (data + tree) * (bs / 512);
            self.write_file_fields(ino, size, blocks, &root)?;
            self.note_large_file(size);
            self.touch(ino, size != inode.size)?;
        }
        Ok(data)
    }

    /// Checks, before anything changes, that `need` new data blocks and
    /// the tree blocks of about `est_extents` new extents fit in the free
    /// space and in the file's `i_blocks`.
    ///
    /// Tree blocks: one more leaf per leaf's worth of entries, and a new
    /// path per level. Near full, the extents are also bounded by the free
    /// runs the data can come from (counted only then).
    ///
    /// # Errors
    /// [`Ext4Error::NoSpace`]; [`Ext4Error::InvalidArgument`] (`len`) when
    /// `i_blocks` would overflow.
    pub(crate) fn check_room(
        &mut self,
        root: &[u8; ROOT_SIZE],
        inode: &crate::ext4::Inode,
        need: u64,
        est_extents: u64,
        len: u64,
    ) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let per_leaf = u64::from(extent::node_capacity(bs as usize)).max(1);
        let depth = u64::from(extent::depth(root)?);
        let margin_for = |extents: u64| (extents / per_leaf + 1) * (depth + 2) + depth + 2;
        let free = self.free_blocks_count();
        let mut margin = margin_for(est_extents);
        if need > 0 && free < need + margin_for(est_extents + need) {
            let mut runs = 0u64;
            for g in 0..self.info.group_count {
                runs += self.free_extents(g)?.len() as u64;
            }
            margin = margin_for(est_extents + runs.min(need));
        }
        if need > 0 && free < need + margin {
            // The tree's blocks counted too, so the number is what must
            // be free, not fewer blocks than are free.
            return Err(Ext4Error::NoSpace {
                len: (need + margin).min(u64::from(u32::MAX)) as u32,
                align: 1,
            });
        }
        // i_blocks must hold the result (48 bits with huge_file, else 32).
        let huge = le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0;
        let blocks_after = inode.blocks + (need + margin) * (bs / 512);
        if blocks_after >> if huge { 48 } else { 32 } != 0 {
            return Err(invalid(
                "len",
                len,
                "i_blocks would overflow (needs huge_file)",
            ));
        }
        Ok(())
    }

    /// Sets regular file `ino`'s size to `size`, freeing every whole block
    /// past the new end (`ceil(size / bs)` on; an extent across it is
    /// split) and the tree blocks left empty; `i_blocks` follows. The block
    /// that ends the file is zeroed past the end (past the new end when it
    /// shrinks, as the kernel does; past the old end when it grows), so
    /// bytes cut off never come back and a grown file reads zeros after
    /// its old end. A larger size otherwise only changes `i_size` (a
    /// sparse tail). The file's mtime and ctime become now.
    ///
    /// # Errors
    /// [`Ext4Error::NotARegularFile`]; [`Ext4Error::FileTooBig`];
    /// [`Ext4Error::Corrupt`] for a bad extent tree. Nothing changes on an
    /// error.
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<(), Ext4Error> {
        self.atomically(|img| img.truncate_op(ino, size))
    }

    /// [`Image::truncate`], inside its undo.
    pub(crate) fn truncate_op(&mut self, ino: u32, size: u64) -> Result<(), Ext4Error> {
        self.check_writable()?;
        let (mut root, inode) = self.root_of_file(ino)?;
        let max = self.max_file_size();
        if size > max {
            return Err(Ext4Error::FileTooBig { size, max });
        }
        let bs = u64::from(self.info.block_size);
        let seed = self.seed_of(ino, inode.generation);
        // The block that keeps the end of the file holds no byte past it:
        // zeroed from the new end when the file shrinks (the kernel's
        // `ext4_block_truncate_page`), and from the old end when it grows,
        // so the grown part reads as zeros even over stale bytes left past
        // the end by another writer.
        self.zero_block_tail(&inode, &root, seed, size.min(inode.size), size > inode.size)?;
        let first = size.div_ceil(bs) as u32;
        let (freed, tree_freed) = self.truncate_tree(&mut root, seed, first)?;
        let blocks = inode
            .blocks
            .saturating_sub((freed + tree_freed) * (bs / 512));
        self.write_file_fields(ino, size, blocks, &root)?;
        self.note_large_file(size);
        self.touch(ino, true)?;
        Ok(())
    }

    /// Zeroes the bytes of file `inode` from byte `at` (the end of the
    /// file) to the end of the block holding it, when that block is mapped
    /// by a written extent (an unwritten one reads as zeros already, a hole
    /// has no bytes). When `at` starts a block, nothing of it is the
    /// file's; but when the file is about to `grow`, a written block there
    /// (e2fsck allows one past the end) would show its bytes, so it is
    /// zeroed whole. Nothing is written when the bytes are zero already.
    ///
    /// # Errors
    /// [`Ext4Error::Unsupported`] for an encrypted file (its blocks hold
    /// ciphertext: zeros written there would decrypt to garbage);
    /// [`Ext4Error::Corrupt`] when the extent maps a block the bitmap calls
    /// free (it could belong to anything); as [`extent::find`].
    pub(crate) fn zero_block_tail(
        &mut self,
        inode: &crate::ext4::Inode,
        root: &[u8; ROOT_SIZE],
        seed: Option<u32>,
        at: u64,
        grow: bool,
    ) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let within = (at % bs) as usize;
        let Ok(logical) = u32::try_from(at / bs) else {
            return Ok(());
        };
        if within == 0 && !grow {
            return Ok(());
        }
        let Some(e) = extent::find(root, &mut ReadStore(self), seed, logical)? else {
            return Ok(());
        };
        if e.unwritten {
            return Ok(());
        }
        if inode.flags & ENCRYPT_FL != 0 {
            // The block holds ciphertext: the kernel decrypts it, zeroes the
            // plain bytes and encrypts it again (`ext4_block_truncate_page`).
            // Without the key, refuse rather than corrupt the kept bytes.
            return Err(Ext4Error::Unsupported {
                feature: "cutting or growing an encrypted file inside a block",
            });
        }
        let p = e.physical + u64::from(logical - e.logical);
        let mut b = self.read_block(p)?.into_owned();
        let tail = b.get_mut(within..).unwrap_or_default();
        if tail.iter().all(|&x| x == 0) {
            return Ok(());
        }
        if !self.block_in_use(p)? {
            return Err(corrupt(
                "i_block",
                self.info.group_of_inode(inode.number).map(|(g, _)| g),
                p,
                "a file's extent maps a block the bitmap calls free",
            ));
        }
        tail.fill(0);
        self.write_block(p, b)
    }

    /// [`extent::truncate`] from `first`, freeing the data blocks; returns
    /// the data and tree blocks freed.
    pub(crate) fn truncate_tree(
        &mut self,
        root: &mut [u8; ROOT_SIZE],
        seed: Option<u32>,
        first: u32,
    ) -> Result<(u64, u64), Ext4Error> {
        let mut store = ImageStore::new(self);
        let ranges = extent::truncate(root, &mut store, seed, first)?;
        let tree = store.freed;
        let mut data = 0;
        for (p, l) in ranges {
            self.free_blocks(p, l)?;
            for b in p..p + l {
                self.discard_block(b);
            }
            data += l;
        }
        Ok((data, tree))
    }
}

/// The unmapped logical block ranges `[a, b)` of `[first, last)`, given the
/// file's extents in logical order.
pub(crate) fn holes(exts: &[Extent], first: u64, last: u64) -> Vec<(u64, u64)> {
    let mut holes = Vec::new();
    let mut at = first;
    for e in exts {
        let (s, t) = (u64::from(e.logical), e.end());
        if t <= at || s >= last {
            continue;
        }
        if s > at {
            holes.push((at, s));
        }
        at = at.max(t);
    }
    if at < last {
        holes.push((at, last));
    }
    holes
}
