//! A file's inode as the operations see it: its extent root and tree
//! store over the block cache ([`ImageStore`], [`ReadStore`]), the fields
//! they change (`i_size`, `i_blocks`, times), the checksum seeds and the
//! size limits.

use std::time::{SystemTime, UNIX_EPOCH};
use std::vec;
use std::vec::Vec;

use crate::ext4::error::{invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, Extent, ExtentHeader, ExtentStore, ROOT_SIZE};
use crate::ext4::inode::off;
use crate::ext4::layout::{self, le16, le32, ChecksumKind};
use crate::ext4::stat::{Stat, TreeEntry, EXTENTS_FL};

use crate::ext4::flags::*;

/// An [`ExtentStore`] over an image's block cache and allocator, counting
/// the tree blocks it allocates and frees (for `i_blocks`).
pub(crate) struct ImageStore<'a> {
    img: &'a mut Image,
    /// Tree blocks allocated (freed again on an aborted operation).
    pub(crate) allocated: u64,
    /// Tree blocks freed.
    pub(crate) freed: u64,
}

impl<'a> ImageStore<'a> {
    pub(crate) fn new(img: &'a mut Image) -> Self {
        ImageStore {
            img,
            allocated: 0,
            freed: 0,
        }
    }
}

impl ExtentStore for ImageStore<'_> {
    fn block_size(&self) -> usize {
        self.img.info.block_size as usize
    }
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error> {
        Ok(self.img.read_block(block)?.into_owned())
    }
    fn write(&mut self, block: u64, data: Vec<u8>) -> Result<(), Ext4Error> {
        self.img.write_block(block, data)
    }
    fn alloc_tree_block(&mut self, goal: u64) -> Result<u64, Ext4Error> {
        let goal = (goal < self.img.info.blocks_count).then_some(goal);
        let (b, _) = self.img.alloc_run_from(goal, 1)?;
        self.allocated += 1;
        Ok(b)
    }
    fn free_tree_block(&mut self, block: u64) -> Result<(), Ext4Error> {
        self.img.free_blocks(block, 1)?;
        self.img.discard_block(block);
        self.freed += 1;
        Ok(())
    }
}

/// A read-only [`ExtentStore`] for walking trees (writes and allocations
/// refused).
pub(crate) struct ReadStore<'a>(pub(crate) &'a Image);

impl ExtentStore for ReadStore<'_> {
    fn block_size(&self) -> usize {
        self.0.info.block_size as usize
    }
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error> {
        Ok(self.0.read_block(block)?.into_owned())
    }
    fn write(&mut self, _: u64, _: Vec<u8>) -> Result<(), Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
    fn alloc_tree_block(&mut self, _: u64) -> Result<u64, Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
    fn free_tree_block(&mut self, _: u64) -> Result<(), Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
}

/// Now, in seconds; `SOURCE_DATE_EPOCH` when set (reproducible images,
/// as e2fsprogs' `E2FSPROGS_FAKE_TIME`).
pub(crate) fn now() -> u32 {
    if let Some(t) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
    {
        // What 32 bits of seconds hold (the epoch bits are not written
        // here): a value past them is clamped, never ignored.
        return t.clamp(0, i64::from(u32::MAX)) as u32;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

impl Image {
    /// Sets inode `ino`'s ctime (and its mtime when `content`) to now, as
    /// the kernel does for a changed inode (`inode_set_ctime_current`) and
    /// changed contents: a directory that gained or lost an entry, a file
    /// whose size changed.
    pub(crate) fn touch(&mut self, ino: u32, content: bool) -> Result<(), Ext4Error> {
        let t = now();
        self.set_inode_times(
            ino,
            crate::ext4::InodeTimes {
                atime: None,
                ctime: Some(t),
                mtime: content.then_some(t),
            },
        )
    }

    pub(crate) fn csum(&self) -> bool {
        self.info.checksums == ChecksumKind::MetadataCsum
    }

    /// The seed of inode `ino`'s extent and directory block checksums, with
    /// metadata_csum.
    pub(crate) fn seed_of(&self, ino: u32, generation: u32) -> Option<u32> {
        self.csum().then(|| self.inode_seed(ino, generation))
    }

    /// `offset + len`, refused with [`Ext4Error::FileTooBig`] past
    /// [`Image::max_file_size`] (or on overflow).
    pub(crate) fn range_end(&self, offset: u64, len: u64) -> Result<u64, Ext4Error> {
        let max = self.max_file_size();
        offset
            .checked_add(len)
            .filter(|&e| e <= max)
            .ok_or(Ext4Error::FileTooBig {
                size: offset.saturating_add(len),
                max,
            })
    }

    /// The largest file size, as Linux's `ext4_max_size` sets it for
    /// extent files: `(2^32 - 1)` blocks, and without `huge_file` (where
    /// `i_blocks` counts 512-byte sectors in 32 bits) no more blocks than
    /// 2^32 - 1 sectors hold: 2 TiB less one block at 4 KiB blocks, which
    /// the kernel refuses to read past (`bad i_size value`).
    pub fn max_file_size(&self) -> u64 {
        let bs = u64::from(self.info.block_size);
        let extents = ((1u64 << 32) - 1).saturating_mul(bs);
        if le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0 {
            return extents;
        }
        let sectors_per_block = bs / 512;
        extents.min(((1u64 << 32) - 1) / sectors_per_block * bs)
    }

    /// The inode's extent root, refusing inodes without `EXTENTS_FL`.
    pub(crate) fn root_of(
        &self,
        ino: u32,
    ) -> Result<([u8; ROOT_SIZE], crate::ext4::Inode), Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.flags & INLINE_DATA_FL != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "inline data",
            });
        }
        if inode.flags & EXTENTS_FL == 0 {
            return Err(Ext4Error::Unsupported {
                feature: "block-mapped (non-extent) files",
            });
        }
        let mut root = [0u8; ROOT_SIZE];
        root.copy_from_slice(&inode.block);
        Ok((root, inode))
    }

    /// The extents of inode `ino` (checked: headers and tail checksums).
    pub(crate) fn extents_of(&mut self, ino: u32) -> Result<Vec<Extent>, Ext4Error> {
        let (root, inode) = self.root_of(ino)?;
        let seed = self.seed_of(ino, inode.generation);
        extent::extents(&root, &mut ReadStore(self), seed)
    }

    /// Writes inode `ino`'s size, `i_blocks` (512-byte units) and extent
    /// root (the times are the caller's: [`Image::touch`]).
    pub(crate) fn write_file_fields(
        &mut self,
        ino: u32,
        size: u64,
        blocks512: u64,
        root: &[u8; ROOT_SIZE],
    ) -> Result<(), Ext4Error> {
        let size_lo = (size as u32).to_le_bytes();
        let size_hi = ((size >> 32) as u32).to_le_bytes();
        let huge = self.check_blocks(size, blocks512)?;
        let blo = (blocks512 as u32).to_le_bytes();
        let bhi = ((blocks512 >> 32) as u16).to_le_bytes();
        let mut changes: Vec<(usize, &[u8])> = vec![
            (off::SIZE_LO, &size_lo),
            (off::SIZE_HIGH, &size_hi),
            (off::BLOCKS_LO, &blo),
            (off::BLOCK, root),
        ];
        if huge {
            changes.push((off::BLOCKS_HIGH, &bhi));
        }
        self.write_inode_fields(ino, &changes)
    }

    /// Whether `i_blocks` has its high 16 bits (`huge_file`), after
    /// checking that `blocks512` fits.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] (`what: "size"`, `size` given) when
    /// it does not.
    pub(crate) fn check_blocks(&self, size: u64, blocks512: u64) -> Result<bool, Ext4Error> {
        let huge = le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0;
        if blocks512 >> 32 != 0 && (!huge || blocks512 >> 48 != 0) {
            return Err(invalid(
                "size",
                size,
                "i_blocks would overflow (needs huge_file)",
            ));
        }
        Ok(huge)
    }

    /// Sets ro_compat `large_file` when a file grows past 2 GiB (as the
    /// kernel does), keeping the superblock checksum.
    pub(crate) fn note_large_file(&mut self, size: u64) {
        if size < 1 << 31 {
            return;
        }
        let ro = le32(&self.sb, layout::sb::RO_COMPAT);
        if ro & RO_COMPAT_LARGE_FILE == 0 {
            layout::put32(
                &mut self.sb,
                layout::sb::RO_COMPAT,
                ro | RO_COMPAT_LARGE_FILE,
            );
            if self.csum() {
                let c = layout::superblock_checksum(&self.sb);
                layout::put32(&mut self.sb, layout::sb::CHECKSUM, c);
            }
            self.dirty_sb = true;
        }
    }

    /// The extent root of a regular file.
    pub(crate) fn root_of_file(
        &self,
        ino: u32,
    ) -> Result<([u8; ROOT_SIZE], crate::ext4::Inode), Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.mode & S_IFMT != S_IFREG {
            return Err(Ext4Error::NotARegularFile { ino });
        }
        if ino < self.info.first_ino {
            // The journal and the resize inode are regular files to the
            // format, not files of the user.
            return Err(invalid(
                "ino",
                ino.into(),
                "reserved inode (below s_first_ino)",
            ));
        }
        if inode.flags & HUGE_FILE_FL != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "HUGE_FILE_FL (i_blocks in file-system blocks)",
            });
        }
        if inode.flags & VERITY_FL != 0 {
            // The kernel refuses to change an fs-verity file (EPERM).
            return Err(Ext4Error::Unsupported {
                feature: "changing an fs-verity file",
            });
        }
        self.root_of(ino)
    }
}

impl Image {
    /// Mode, size, block count, flags, links and the extent tree of inode
    /// `ino`.
    ///
    /// # Errors
    /// As [`Image::inode`]; [`Ext4Error::Corrupt`] /
    /// [`Ext4Error::BadChecksum`] for a bad extent tree.
    pub fn stat(&mut self, ino: u32) -> Result<Stat, Ext4Error> {
        let inode = self.inode(ino)?;
        let mut st = Stat {
            ino,
            mode: inode.mode,
            size: inode.size,
            blocks: inode.blocks,
            flags: inode.flags,
            links: inode.links_count,
            depth: 0,
            tree: Vec::new(),
            extents: Vec::new(),
        };
        if inode.flags & EXTENTS_FL != 0 {
            let mut root = [0u8; ROOT_SIZE];
            root.copy_from_slice(&inode.block);
            let seed = self.seed_of(ino, inode.generation);
            st.extents = extent::extents(&root, &mut ReadStore(self), seed)?;
            st.depth = extent::depth(&root)?;
            let end = inode.size.div_ceil(u64::from(self.info.block_size));
            self.tree_entries(&root, 0, st.depth, end, &mut st.tree)?;
        }
        Ok(st)
    }

    /// `debugfs ex`'s lines for the node `node` at `level` (checked by
    /// [`extent::extents`] before).
    pub(crate) fn tree_entries(
        &self,
        node: &[u8],
        level: u16,
        depth: u16,
        end: u64,
        out: &mut Vec<TreeEntry>,
    ) -> Result<(), Ext4Error> {
        let h = ExtentHeader::parse(node)?;
        for i in 0..h.entries {
            let at = 12 + 12 * usize::from(i);
            let logical = le32(node, at);
            if h.depth == 0 {
                let mut b = [0u8; 12];
                b.copy_from_slice(&node[at..at + 12]);
                let e = Extent::from_bytes(&b)?;
                out.push(TreeEntry {
                    level,
                    depth,
                    index: i,
                    entries: h.entries,
                    logical,
                    logical_end: e.end() - 1,
                    physical: e.physical,
                    len: e.len.into(),
                    unwritten: e.unwritten,
                    is_index: false,
                });
            } else {
                let child = u64::from(le32(node, at + 4)) | u64::from(le16(node, at + 8)) << 32;
                // As libext2fs's ext2fs_extent_get: the entry reaches the
                // next entry's key, or the parent's end (for the root:
                // i_size in blocks), its length taken mod 2^32.
                let next_end = if i + 1 < h.entries {
                    u64::from(le32(node, at + 12))
                } else {
                    end
                };
                let len = next_end.wrapping_sub(u64::from(logical)) as u32;
                out.push(TreeEntry {
                    level,
                    depth,
                    index: i,
                    entries: h.entries,
                    logical,
                    logical_end: u64::from(logical) + u64::from(len.wrapping_sub(1)),
                    physical: child,
                    len,
                    unwritten: false,
                    is_index: true,
                });
                let b = self.read_block(child)?.into_owned();
                self.tree_entries(&b, level + 1, depth, next_end, out)?;
            }
        }
        Ok(())
    }
}

/// One line as `debugfs -R "ex PATH"` prints it: level/depth, entry/count,
/// logical range, physical range (an index entry: the child block and the
/// range's length), length and `Uninit`.
impl core::fmt::Display for TreeEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:>2}/{:>2} {:>3}/{:>3} {:>5} - {:>5} ",
            self.level,
            self.depth,
            self.index + 1,
            self.entries,
            self.logical,
            self.logical_end
        )?;
        if self.is_index {
            write!(f, "{:>5}{:>15}", self.physical, self.len)
        } else {
            let last = (self.physical + u64::from(self.len)).saturating_sub(1);
            write!(f, "{:>5} - {:>5} {:>6}", self.physical, last, self.len)?;
            if self.unwritten {
                f.write_str(" Uninit")?;
            }
            Ok(())
        }
    }
}
