//! The block cache: whole blocks changed in memory (inode-table blocks, and
//! the extent and directory blocks of files) waiting for [`Image::flush`].
//!
//! It is a write-back cache of pending writes only: [`Image::read_block`]
//! returns the pending version of a block when there is one and otherwise
//! reads the file, so every reader sees the image as it will be after the
//! flush. The pending blocks become records of the flush after the
//! superblock, descriptor and bitmap records, so they go through the redo log
//! like them (crash safety and the fault injection cover them), count in
//! [`Image::is_dirty`], and are dropped after a successful flush.
//!
//! A block can only be written here if it is not the superblock, a
//! descriptor-table block (or reserved GDT block) or a bitmap: those are
//! written from their own in-memory copies, and two records for one block
//! would fight. [`Image::write_block`] (file data and tree blocks) refuses
//! every metadata block; [`Image::inode_table_block_mut`] only accepts
//! inode-table blocks; [`Image::pending_block_mut`] (a pending data block
//! changed in place) checks as `write_block` does. `validate` checks that
//! no pending block overlaps another record of the flush.

use std::borrow::Cow;
#[cfg(any(test, feature = "testing"))]
use std::format;
#[cfg(any(test, feature = "testing"))]
use std::string::String;
use std::vec;
use std::vec::Vec;

use crate::ext4::error::{invalid, io, Ext4Error};
use crate::ext4::group::meta_in;
use crate::ext4::image::Image;

/// The descriptor field naming an inode table in the metadata map.
const INODE_TABLE: &str = "bg_inode_table";

/// What a caller says a block written through the cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    /// A block of file data or of a file's tree (extent or directory
    /// blocks): it must not hold any file-system metadata.
    Data,
    /// A block of some group's inode table.
    InodeTable,
}

impl Image {
    /// Block `block` as it stands: the pending version if the block cache
    /// holds one, else the file's bytes. Always `block_size` bytes.
    ///
    /// Like the kernel's `sb_bread` / e2fsprogs' `io_channel_read_blk64`,
    /// reading through the buffer cache (here: only the dirty buffers are
    /// kept).
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for a block at or past
    /// `s_blocks_count`; [`Ext4Error::Io`] if the file cannot be read.
    pub(crate) fn read_block(&self, block: u64) -> Result<Cow<'_, [u8]>, Ext4Error> {
        if block >= self.info.blocks_count {
            return Err(invalid("block", block, "past the end of the file system"));
        }
        if let Some(data) = self.pending_blocks.get(&block) {
            return Ok(Cow::Borrowed(data));
        }
        let bs = self.info.block_size as usize;
        let mut data = vec![0u8; bs];
        self.dev
            .read_at(block * bs as u64, &mut data)
            .map_err(io("read block"))?;
        Ok(Cow::Owned(data))
    }

    /// Records `data` as the new contents of data block `block` (a file's
    /// data, extent-tree or directory block), written by the next
    /// [`Image::flush`]; replaces any pending version.
    ///
    /// Like marking a buffer dirty (`mark_buffer_dirty`) inside a journal
    /// handle: nothing reaches the file before the flush, which logs it first.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::BadChecksum`] if the superblock
    /// fails its checksum (as every change); [`Ext4Error::InvalidArgument`]
    /// if `data` is not one block long, the block is outside the groups, or
    /// it holds metadata (a superblock copy, descriptors, reserved GDT
    /// blocks, a bitmap or an inode table).
    pub(crate) fn write_block(
        &mut self,
        block: u64,
        data: impl Into<Vec<u8>>,
    ) -> Result<(), Ext4Error> {
        self.write_block_as(block, data.into(), BlockKind::Data)
    }

    /// Inode-table block `block`, to change in place: its pending version
    /// (kept first for the open undo, if any), or the file's bytes made
    /// pending. One copy of the block per transaction, not one per change.
    ///
    /// # Errors
    /// As [`Image::write_block`], with [`Ext4Error::InvalidArgument`] for a
    /// block that is not in an inode table; [`Ext4Error::Io`] reading it.
    pub(crate) fn inode_table_block_mut(&mut self, block: u64) -> Result<&mut [u8], Ext4Error> {
        self.check_writable()?;
        if self.pending_blocks.contains_key(&block) {
            self.check_block_kind(block, BlockKind::InodeTable)?;
            self.keep_for_undo(block);
            self.recent.touch(block);
        } else {
            let data = self.read_block(block)?.into_owned();
            self.write_block_as(block, data, BlockKind::InodeTable)?;
        }
        self.pending_blocks
            .get_mut(&block)
            .map(|b| &mut b[..])
            .ok_or_else(|| invalid("block", block, "not in the block cache"))
    }

    /// [`Image::inode_table_block_mut`] for a block whose every slot lies
    /// past its group's used inodes (`bg_itable_unused`, or an
    /// `INODE_UNINIT` group), which nothing reads: when not pending, it
    /// starts as zeros, without reading the device.
    ///
    /// # Errors
    /// As [`Image::inode_table_block_mut`].
    pub(crate) fn unused_inode_table_block_mut(
        &mut self,
        block: u64,
    ) -> Result<&mut [u8], Ext4Error> {
        if !self.pending_blocks.contains_key(&block) {
            let bs = self.info.block_size as usize;
            self.write_block_as(block, vec![0u8; bs], BlockKind::InodeTable)?;
        }
        self.inode_table_block_mut(block)
    }

    /// The pending version of data block `block` (a directory, extent or
    /// xattr block), to change in place (kept first for the open undo, if
    /// any); `None` when no version is pending or the block may not be
    /// written as data (the caller's ordinary path then refuses it).
    pub(crate) fn pending_block_mut(&mut self, block: u64) -> Option<&mut [u8]> {
        if !self.pending_blocks.contains_key(&block)
            || self.check_block_kind(block, BlockKind::Data).is_err()
        {
            return None;
        }
        self.keep_for_undo(block);
        self.recent.touch(block);
        self.pending_blocks.get_mut(&block).map(|b| &mut b[..])
    }

    /// Drops the pending version of `block`, if any (for a block freed
    /// before the flush, whose contents no longer matter); returns whether
    /// there was one.
    pub(crate) fn discard_block(&mut self, block: u64) -> bool {
        self.forget_append_block(block);
        self.keep_for_undo(block);
        self.pending_blocks.remove(&block).is_some()
    }

    fn write_block_as(
        &mut self,
        block: u64,
        data: Vec<u8>,
        kind: BlockKind,
    ) -> Result<(), Ext4Error> {
        self.check_writable()?;
        if data.len() != self.info.block_size as usize {
            return Err(invalid(
                "len",
                data.len() as u64,
                "a block write must be exactly one block",
            ));
        }
        self.check_block_kind(block, kind)?;
        self.forget_append_block(block);
        self.keep_for_undo(block);
        self.recent.touch(block);
        self.pending_blocks.insert(block, data);
        Ok(())
    }

    /// Inside an operation, keeps `block`'s pending version (or that it
    /// had none) for its undo.
    fn keep_for_undo(&mut self, block: u64) {
        if let Some(u) = self.undo.as_mut() {
            u.keep_block(block, self.pending_blocks.get(&block));
        }
    }

    /// Whether `block` may be written as `kind`.
    fn check_block_kind(&self, block: u64, kind: BlockKind) -> Result<(), Ext4Error> {
        if self.info.group_of_block(block).is_none() {
            return Err(invalid("block", block, "outside the file system's groups"));
        }
        let mut hits = meta_in(&self.meta, block, block + 1);
        match (kind, hits.next()) {
            (BlockKind::Data, None) => Ok(()),
            (BlockKind::Data, Some(_)) => Err(invalid(
                "block",
                block,
                "holds file-system metadata, not file data",
            )),
            (BlockKind::InodeTable, Some(m)) if m.field == INODE_TABLE => Ok(()),
            (BlockKind::InodeTable, _) => {
                Err(invalid("block", block, "not a block of an inode table"))
            }
        }
    }

    /// Every pending block is one block long, may be written as data or
    /// inode table, and overlaps none of the flush's other records (the
    /// superblock, descriptor-table blocks, bitmaps).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn validate_pending_blocks(&self) -> Result<(), String> {
        let bs = u64::from(self.info.block_size);
        for (&b, data) in &self.pending_blocks {
            if data.len() as u64 != bs {
                return Err(format!(
                    "pending block {b}: {} bytes, not one block",
                    data.len()
                ));
            }
            self.check_block_kind(b, BlockKind::Data)
                .or_else(|_| self.check_block_kind(b, BlockKind::InodeTable))
                .map_err(|e| format!("pending block {b}: {e}"))?;
        }
        if self.pending_blocks.is_empty() {
            return Ok(());
        }
        for r in self.metadata_records() {
            let end = r.offset + r.data.len() as u64;
            let first = r.offset / bs;
            let last = end.div_ceil(bs);
            if let Some((&b, _)) = self.pending_blocks.range(first..last).next() {
                return Err(format!(
                    "pending block {b} overlaps the flush record at byte {} ({} bytes)",
                    r.offset,
                    r.data.len()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ext4::OpenMode;
    use std::path::PathBuf;
    use std::process::Command;

    /// A fresh 1 KiB-block image made by mkfs.ext4, or `None` (with a
    /// notice) without e2fsprogs; the integration tests require it in CI.
    pub(crate) fn image(name: &str) -> Option<(PathBuf, PathBuf)> {
        let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())?;
        let dir =
            std::env::temp_dir().join(format!("spacekit-blocks-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let path = dir.join("fs.img");
        let ok = Command::new(mkfs)
            .args(["-F", "-q", "-b", "1024", "-N", "256", "-O", "^has_journal"])
            .arg(&path)
            .arg("8M")
            .status()
            .ok()?
            .success();
        ok.then_some((dir, path))
    }

    #[test]
    fn writes_are_bounded_cached_and_flushed() {
        let Some((dir, path)) = image("cache") else {
            std::eprintln!("skipping: mkfs.ext4 not found");
            return;
        };
        let mut img = Image::open(&path, OpenMode::ReadWrite).unwrap();
        let bs = img.info.block_size as usize;
        let last = img.info.blocks_count - 1;
        let g0 = img.group(0).unwrap();
        let data = img.free_extents(0).unwrap()[0].0;
        let refused = |img: &mut Image, b: u64| {
            matches!(
                img.write_block(b, vec![1u8; bs]),
                Err(Ext4Error::InvalidArgument { what: "block", .. })
            )
        };
        // Past the end, the boot block, the superblock, the descriptors,
        // the bitmaps and the inode table are not data blocks.
        for b in [
            last + 1,
            u64::MAX,
            0,
            1,
            2,
            g0.block_bitmap,
            g0.inode_bitmap,
            g0.inode_table,
        ] {
            assert!(refused(&mut img, b), "block {b}");
        }
        assert!(img.read_block(last + 1).is_err());
        assert!(matches!(
            img.write_block(data, vec![0u8; bs - 1]),
            Err(Ext4Error::InvalidArgument { what: "len", .. })
        ));
        assert!(img.inode_table_block_mut(g0.block_bitmap).is_err());
        assert!(img.inode_table_block_mut(data).is_err());
        assert!(!img.is_dirty());
        // A data block: the pending version is read back, then flushed.
        let before = img.read_block(data).unwrap().into_owned();
        let new = vec![0xA5u8; bs];
        img.write_block(data, &new[..]).unwrap();
        assert!(img.is_dirty());
        assert_eq!(&*img.read_block(data).unwrap(), &new[..]);
        img.validate().unwrap();
        // Discarded, then written again.
        assert!(img.discard_block(data));
        assert!(!img.is_dirty());
        assert_eq!(img.read_block(data).unwrap().into_owned(), before);
        img.write_block(data, new.clone()).unwrap();
        img.flush().unwrap();
        assert!(!img.is_dirty());
        drop(img);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[data as usize * bs..][..bs], &new[..]);
        // Read-only images refuse.
        let mut ro = Image::open(&path, OpenMode::ReadOnly).unwrap();
        assert!(matches!(
            ro.write_block(data, vec![0u8; bs]),
            Err(Ext4Error::ReadOnly)
        ));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Write-behind sends out the blocks the committed image cannot see,
    /// except the last [`Recent::LEN`](crate::ext4::image::Recent::LEN)
    /// changed, which stay pending (they are still being filled).
    #[test]
    fn write_behind_keeps_the_blocks_changed_last() {
        let Some((dir, path)) = image("behind-recent") else {
            std::eprintln!("skipping: mkfs.ext4 not found");
            return;
        };
        let mut img = Image::open(&path, OpenMode::ReadWrite).unwrap();
        let bs = img.info.block_size as usize;
        let (start, _) = img
            .free_extents(0)
            .unwrap()
            .into_iter()
            .find(|&(a, b)| b + 1 - a >= 64)
            .expect("64 free blocks in a row");
        let keep = crate::ext4::image::Recent::LEN as u64;
        let write = |img: &mut Image, blocks: core::ops::Range<u64>| {
            for b in blocks {
                img.write_block(start + b, vec![b as u8; bs]).unwrap();
            }
        };
        let pending = |img: &Image| {
            img.pending_blocks
                .keys()
                .map(|b| b - start)
                .collect::<Vec<_>>()
        };
        write(&mut img, 0..40);
        assert_eq!(img.write_behind_now().unwrap(), 40 - keep as usize);
        assert_eq!(pending(&img), (40 - keep..40).collect::<Vec<_>>());
        // A kept block changed again stays; the others go once newer
        // blocks take their places.
        write(&mut img, 39..40);
        write(&mut img, 40..40 + keep - 1);
        assert_eq!(img.write_behind_now().unwrap(), keep as usize - 1);
        assert_eq!(pending(&img), (39..40 + keep - 1).collect::<Vec<_>>());
        img.flush().unwrap();
        drop(img);
        let bytes = std::fs::read(&path).unwrap();
        for b in 0..40 + keep - 1 {
            let at = (start + b) as usize * bs;
            assert!(
                bytes[at..at + bs].iter().all(|&x| x == b as u8),
                "block {b}"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
