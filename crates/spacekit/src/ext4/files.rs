//! Files on an ext4 image: paths, directories, `stat`, and the operations
//! that make spacekit an offline allocator whose results e2fsck accepts —
//! [`Image::create`], [`Image::fallocate`], [`Image::truncate`] and
//! [`Image::unlink`].
//!
//! Everything is built on the block cache ([`Image::flush`] writes it
//! through the redo log), the extent trees of [`super::inode::extent`] (through an
//! [`ExtentStore`] over the image), the directory blocks of [`super::dir`],
//! the inode patches of `inode.rs` (checksums by splice) and the block and
//! inode allocators (bitmaps, counts and their checksums).
//!
//! # Errors
//!
//! Path and argument problems have their own variants, so callers can
//! match on them: [`Ext4Error::NotAbsolute`], [`Ext4Error::NotFound`],
//! [`Ext4Error::NotADirectory`], [`Ext4Error::NameTooLong`],
//! [`Ext4Error::NotARegularFile`], [`Ext4Error::Exists`],
//! [`Ext4Error::FileTooBig`]. Other bad arguments (a zero length, a mode
//! of another file type) are [`Ext4Error::InvalidArgument`]. No space is
//! [`Ext4Error::NoSpace`], checked before anything changes.
//!
//! # Htree directories
//!
//! Names are looked up by scanning every leaf block (the dx root and dx
//! node blocks are skipped). A new entry goes into the leaf the name's hash
//! selects ([`dir::dx_path`]), as the kernel's `ext4_dx_add_entry` puts it.
//! When that leaf is full it splits ([`dir::split_leaf`]): its entries are
//! sorted by hash, the upper half moves to a new leaf appended to the
//! directory (mapped in its extent tree, `i_size` and `i_blocks` grown), and
//! the new leaf's index entry goes in after the old one's
//! ([`dir::dx_insert`]). When that index block is full too: a dx root over
//! the leaves moves down a level (its entries to a new dx node, the root
//! over it, `indirect_levels` 1), and a full dx node splits in two, its
//! parent getting the new node's entry. When the parent is full as well
//! (a third level, which needs `largedir`), the create fails with
//! [`Ext4Error::Unsupported`] (`"htree index split"`) before anything
//! changes. Every leaf and index block written is re-signed.
//!
//! A linear directory becomes an htree as the kernel makes one (its
//! `make_indexed_dir`): on a file system with `dir_index`, when a new name
//! does not fit in a directory exactly one block long, block 0 becomes the
//! dx root (hash version `s_def_hash_version`) and its entries move, split
//! by hash, to two new leaves ([`dir::make_indexed`]); the inode gets
//! [`dir::INDEX_FL`], and the name goes into the leaf its hash selects. A
//! linear directory already longer than one block stays linear and grows a
//! block at a time.

use std::string::String;
use std::time::{SystemTime, UNIX_EPOCH};
use std::vec;
use std::vec::Vec;

use super::dir::{self, DirEntry};
use super::error::{corrupt, invalid, Ext4Error};
use super::image::Image;
use super::inode::extent::{self, Extent, ExtentHeader, ExtentStore, ROOT_SIZE};
use super::inode::off;
use super::layout::{self, le16, le32, ChecksumKind};
use super::stat::{Stat, TreeEntry, CASEFOLD_FL, EXTENTS_FL, ROOT_INO};

/// `S_IFMT` and the types.
const S_IFMT: u16 = 0xF000;
const S_IFREG: u16 = 0x8000;
/// incompat `filetype`: directory entries carry the file type.
const INCOMPAT_FILETYPE: u32 = 0x2;
/// incompat `dirdata`: directory entries may carry data after the name.
const INCOMPAT_DIRDATA: u32 = 0x1000;
/// `EXT4_ENCRYPT_FL`: the directory's names are encrypted.
pub(super) const ENCRYPT_FL: u32 = 0x800;
/// `EXT4_INLINE_DATA_FL`: the contents live in the inode.
pub(super) const INLINE_DATA_FL: u32 = 0x1000_0000;
/// `EXT4_VERITY_FL`: an fs-verity file (read-only to the kernel).
const VERITY_FL: u32 = 0x10_0000;
/// incompat `ea_inode`: xattr values may live in inodes of their own.
const INCOMPAT_EA_INODE: u32 = 0x400;
/// ro_compat `huge_file`.
const RO_COMPAT_HUGE_FILE: u32 = 0x8;
/// `i_flags`: `i_blocks` counts file-system blocks.
const HUGE_FILE_FL: u32 = 0x4_0000;
/// ro_compat `large_file`.
const RO_COMPAT_LARGE_FILE: u32 = 0x2;
/// Superblock `s_hash_seed`, `s_def_hash_version` and `s_flags`.
const SB_HASH_SEED: usize = 0xEC;
const SB_DEF_HASH_VERSION: usize = 0xFC;
const SB_FLAGS: usize = 0x160;
/// Superblock `s_log_groups_per_flex`.
const SB_LOG_GROUPS_PER_FLEX: usize = 0x174;

/// Where a new directory entry goes ([`Image::plan_entry`]).
pub(super) enum Place {
    /// Into this directory block, which has room.
    Block(u64),
    /// Into a new block appended to a linear directory.
    Append,
    /// Into a linear directory of one full block, made an htree first
    /// ([`dir::make_indexed`]): its block and the new index's hash version.
    Index { block: u64, version: u8 },
    /// Into an htree leaf that is full: split it (a new leaf appended, a
    /// new index entry in the index block above).
    Split {
        leaf: u64,
        /// The physical blocks of the path's index blocks.
        index: Vec<u64>,
        path: dir::DxPath,
    },
}

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

/// The components of an absolute path (empty for `/`).
fn components(path: &str) -> Result<Vec<&[u8]>, Ext4Error> {
    if !path.starts_with('/') {
        return Err(Ext4Error::NotAbsolute { path: path.into() });
    }
    let mut out = Vec::new();
    for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c.len() > dir::MAX_NAME_LEN {
            return Err(Ext4Error::NameTooLong { len: c.len() });
        }
        out.push(c.as_bytes());
    }
    Ok(out)
}

/// Now, in seconds; `SOURCE_DATE_EPOCH` when set (reproducible images,
/// as e2fsprogs' `E2FSPROGS_FAKE_TIME`).
pub(super) fn now() -> u32 {
    if let Some(t) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return t;
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
    pub(super) fn touch(&mut self, ino: u32, content: bool) -> Result<(), Ext4Error> {
        let t = now();
        self.set_inode_times(
            ino,
            super::InodeTimes {
                atime: None,
                ctime: Some(t),
                mtime: content.then_some(t),
            },
        )
    }
}

/// Where a directory entry lies: the directory's logical block and the
/// physical block.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub(super) physical: u64,
}

impl Image {
    pub(super) fn csum(&self) -> bool {
        self.info.checksums == ChecksumKind::MetadataCsum
    }

    /// The seed of inode `ino`'s extent and directory block checksums, with
    /// metadata_csum.
    pub(super) fn seed_of(&self, ino: u32, generation: u32) -> Option<u32> {
        self.csum().then(|| self.inode_seed(ino, generation))
    }

    /// `offset + len`, refused with [`Ext4Error::FileTooBig`] past
    /// [`Image::max_file_size`] (or on overflow).
    pub(super) fn range_end(&self, offset: u64, len: u64) -> Result<u64, Ext4Error> {
        let max = self.max_file_size();
        offset
            .checked_add(len)
            .filter(|&e| e <= max)
            .ok_or(Ext4Error::FileTooBig {
                size: offset.saturating_add(len),
                max,
            })
    }

    /// The largest file size: `(2^32 - 1)` blocks (extent files), capped
    /// at 2^63 - 1.
    pub fn max_file_size(&self) -> u64 {
        ((1u64 << 32) - 1).saturating_mul(u64::from(self.info.block_size))
    }

    /// The inode's extent root, refusing inodes without `EXTENTS_FL`.
    pub(super) fn root_of(&self, ino: u32) -> Result<([u8; ROOT_SIZE], super::Inode), Ext4Error> {
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
    fn extents_of(&mut self, ino: u32) -> Result<Vec<Extent>, Ext4Error> {
        let (root, inode) = self.root_of(ino)?;
        let seed = self.seed_of(ino, inode.generation);
        extent::extents(&root, &mut ReadStore(self), seed)
    }

    /// The directory's blocks as `(logical, physical)`, leaf blocks only
    /// (the dx root and dx nodes of an htree directory left out), and
    /// whether it is an htree directory.
    fn dir_blocks(&mut self, ino: u32) -> Result<(Vec<(u32, u64)>, bool), Ext4Error> {
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(Ext4Error::NotADirectory {
                path: std::format!("inode {ino}"),
            });
        }
        let exts = self.extents_of(ino)?;
        let bs = u64::from(self.info.block_size);
        let nblocks = inode.size.div_ceil(bs);
        let mut blocks = Vec::new();
        for e in &exts {
            for i in 0..u64::from(e.len) {
                let l = u64::from(e.logical) + i;
                if l < nblocks {
                    blocks.push((l as u32, e.physical + i));
                }
            }
        }
        let htree = inode.flags & dir::INDEX_FL != 0;
        if htree {
            let csum = self.csum();
            let at: std::collections::BTreeMap<u32, u64> = blocks.iter().copied().collect();
            let mut dx = std::collections::BTreeSet::from([0u32]);
            if let Some(&p0) = at.get(&0) {
                let root = self.read_block(p0)?.into_owned();
                let r = dir::parse_dx_root(&root, csum)?;
                let mut level: Vec<u32> = r.entries.iter().map(|e| e.block).collect();
                for _ in 0..r.indirect_levels {
                    let mut next = Vec::new();
                    for l in level {
                        dx.insert(l);
                        if let Some(&p) = at.get(&l) {
                            let node = self.read_block(p)?.into_owned();
                            let n = dir::parse_dx_node(&node, csum)?;
                            next.extend(n.entries.iter().map(|e| e.block));
                        }
                    }
                    level = next;
                }
            }
            blocks.retain(|b| !dx.contains(&b.0));
        }
        Ok((blocks, htree))
    }

    /// A directory leaf block, its tail checksum checked (metadata_csum).
    fn dir_block(&self, dir_ino: u32, generation: u32, p: u64) -> Result<Vec<u8>, Ext4Error> {
        let b = self.read_block(p)?.into_owned();
        if let Some(seed) = self.seed_of(dir_ino, generation) {
            dir::verify_tail(seed, &b)?;
        }
        Ok(b)
    }

    /// Finds `name` in directory `dir_ino`: the entry and the block holding
    /// it. Every leaf block is searched (an htree's index is not needed to
    /// find a name, only to place one). In a casefolded directory an ASCII
    /// name also matches an ASCII entry that differs only in case (what
    /// the kernel's Unicode casefolding gives for ASCII names); names with
    /// other characters match only byte for byte.
    pub(super) fn find_entry(
        &mut self,
        dir_ino: u32,
        name: &[u8],
    ) -> Result<Option<(DirEntry, Slot)>, Ext4Error> {
        let (blocks, _) = self.dir_blocks(dir_ino)?;
        let dir = self.inode(dir_ino)?;
        let fold = dir.flags & CASEFOLD_FL != 0 && name.is_ascii();
        let csum = self.csum();
        for (_, p) in blocks {
            let b = self.dir_block(dir_ino, dir.generation, p)?;
            let found = if fold {
                dir::entries(&b, csum)?
                    .into_iter()
                    .find(|e| e.name.is_ascii() && e.name.eq_ignore_ascii_case(name))
            } else {
                dir::find(&b, csum, name)?
            };
            if let Some(e) = found {
                return Ok(Some((e, Slot { physical: p })));
            }
        }
        Ok(None)
    }

    /// Refuses to add or remove entries in directory `dir_ino` when its
    /// names hash or compare in a way spacekit does not write: casefolded
    /// (Unicode NFD + casefold, hashed folded), encrypted (names stored
    /// encrypted, hashed over the ciphertext), or on a `dirdata` file
    /// system. Checked before any change.
    pub(super) fn check_dir_writable(&self, dir_ino: u32) -> Result<(), Ext4Error> {
        let flags = self.inode(dir_ino)?.flags;
        let feature = if flags & CASEFOLD_FL != 0 {
            "casefolded directory (casefold)"
        } else if flags & ENCRYPT_FL != 0 {
            "encrypted directory (encrypt)"
        } else if le32(&self.sb, layout::sb::INCOMPAT) & INCOMPAT_DIRDATA != 0 {
            "dirdata"
        } else {
            return Ok(());
        };
        Err(Ext4Error::Unsupported { feature })
    }

    /// The inode an absolute path names (from the root directory, inode
    /// 2), in linear and htree directories.
    ///
    /// # Errors
    /// [`Ext4Error::NotAbsolute`], [`Ext4Error::NameTooLong`],
    /// [`Ext4Error::NotFound`], [`Ext4Error::NotADirectory`] (each naming
    /// the path up to the component at fault); [`Ext4Error::BadChecksum`] /
    /// [`Ext4Error::Corrupt`] for a directory or extent block that fails its
    /// checks; [`Ext4Error::Io`].
    pub fn lookup(&mut self, path: &str) -> Result<u32, Ext4Error> {
        self.walk(&components(path)?)
    }

    /// The inode the components name, from the root directory.
    fn walk(&mut self, comps: &[&[u8]]) -> Result<u32, Ext4Error> {
        let mut ino = ROOT_INO;
        let mut at = String::new();
        for c in comps {
            if !self.inode(ino)?.is_dir() {
                return Err(Ext4Error::NotADirectory { path: at });
            }
            at.push('/');
            at.push_str(&String::from_utf8_lossy(c));
            ino = match self.find_entry(ino, c)? {
                Some((e, _)) => e.inode,
                None => return Err(Ext4Error::NotFound { path: at }),
            };
        }
        Ok(ino)
    }

    /// The parent directory's inode and the last component of `path`.
    pub(super) fn parent_of<'p>(&mut self, path: &'p str) -> Result<(u32, &'p [u8]), Ext4Error> {
        let comps = components(path)?;
        let Some((&name, parents)) = comps.split_last() else {
            return Err(Ext4Error::NotARegularFile { ino: ROOT_INO });
        };
        let ino = self.walk(parents)?;
        if !self.inode(ino)?.is_dir() {
            let mut at = String::new();
            for c in parents {
                at.push('/');
                at.push_str(&String::from_utf8_lossy(c));
            }
            return Err(Ext4Error::NotADirectory { path: at });
        }
        Ok((ino, name))
    }

    /// Every entry of directory `ino` (`.` and `..` included), block by
    /// block in logical order.
    ///
    /// # Errors
    /// [`Ext4Error::NotADirectory`] (`path: "inode N"`); as
    /// [`Image::lookup`] for bad blocks.
    pub fn read_dir(&mut self, ino: u32) -> Result<Vec<DirEntry>, Ext4Error> {
        let (blocks, htree) = self.dir_blocks(ino)?;
        let generation = self.inode(ino)?.generation;
        let csum = self.csum();
        let mut out = Vec::new();
        if htree {
            let exts = self.extents_of(ino)?;
            if let Some(e) = exts.iter().find(|e| e.logical == 0) {
                let root = self.read_block(e.physical)?.into_owned();
                let r = dir::parse_dx_root(&root, csum)?;
                out.push(DirEntry {
                    inode: r.dot,
                    name: b".".to_vec(),
                    file_type: root[7],
                });
                out.push(DirEntry {
                    inode: r.dotdot,
                    name: b"..".to_vec(),
                    file_type: root[12 + 7],
                });
            }
        }
        for (_, p) in blocks {
            let b = self.dir_block(ino, generation, p)?;
            out.extend(dir::entries(&b, csum)?);
        }
        Ok(out)
    }

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
    fn tree_entries(
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

    /// Writes inode `ino`'s size, `i_blocks` (512-byte units) and extent
    /// root (the times are the caller's: [`Image::touch`]).
    pub(super) fn write_file_fields(
        &mut self,
        ino: u32,
        size: u64,
        blocks512: u64,
        root: &[u8; ROOT_SIZE],
    ) -> Result<(), Ext4Error> {
        let size_lo = (size as u32).to_le_bytes();
        let size_hi = ((size >> 32) as u32).to_le_bytes();
        let huge = le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0;
        if blocks512 >> 32 != 0 && (!huge || blocks512 >> 48 != 0) {
            return Err(invalid(
                "size",
                size,
                "i_blocks would overflow (needs huge_file)",
            ));
        }
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

    /// Sets ro_compat `large_file` when a file grows past 2 GiB (as the
    /// kernel does), keeping the superblock checksum.
    pub(super) fn note_large_file(&mut self, size: u64) {
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

    /// Creates an empty regular file at `path` with permission bits `mode`
    /// (`mode & 0o7777`; a type other than regular is refused) and returns
    /// its inode: allocated in the parent's group (or the next with a free
    /// inode), with `links_count` 1, `EXTENTS_FL` and an empty extent root,
    /// size 0, timestamps now, `i_extra_isize` 32 in large inodes, its
    /// checksum; the entry goes into the parent: in a linear directory the
    /// first block with room, else (one full block, `dir_index`) the
    /// directory becomes an htree, else a new block is appended to it; in
    /// an htree directory the leaf the name's hash selects. The parent's mtime and
    /// ctime become now.
    ///
    /// # Errors
    /// As [`Image::lookup`] for the parent; [`Ext4Error::Exists`];
    /// [`Ext4Error::InvalidArgument`] (`what: "mode"`) for a mode with
    /// another type; [`Ext4Error::Unsupported`] (`"htree index split"`) when
    /// an htree directory's index would need a third level; [`Ext4Error::NoFreeInodes`],
    /// [`Ext4Error::NoSpace`]; [`Ext4Error::Io`]; [`Ext4Error::Corrupt`]
    /// when the inode the bitmap offers still has links (a damaged
    /// bitmap). Nothing changes on an error (checked before the first
    /// change, or undone).
    pub fn create(&mut self, path: &str, mode: u16) -> Result<u32, Ext4Error> {
        self.atomically(|img| img.create_op(path, mode))
    }

    /// [`Image::create`], inside its undo.
    fn create_op(&mut self, path: &str, mode: u16) -> Result<u32, Ext4Error> {
        self.check_writable()?;
        if mode & S_IFMT != 0 && mode & S_IFMT != S_IFREG {
            return Err(invalid(
                "mode",
                mode.into(),
                "only regular files can be created",
            ));
        }
        let (parent, name) = self.parent_of(path)?;
        self.check_dir_writable(parent)?;
        if name.contains(&0) {
            return Err(invalid("name", name.len() as u64, "a name holds no NUL"));
        }
        if self.find_entry(parent, name)?.is_some() {
            return Err(Ext4Error::Exists { path: path.into() });
        }
        let ft = self.file_type_of(S_IFREG);
        let place = self.plan_entry(parent, name, ft)?;
        let (pg, _) = self.info.group_of_inode(parent).unwrap_or_default();
        // From here an error is undone by `atomically`.
        let ino = self.alloc_inode(Some(pg), false)?;
        let mut root = [0u8; ROOT_SIZE];
        extent::init_root(&mut root);
        self.init_inode(ino, S_IFREG | (mode & 0o7777), 1, EXTENTS_FL, &root)?;
        self.put_entry(parent, name, ino, ft, place)?;
        self.touch(parent, true)?;
        Ok(ino)
    }

    /// The directory-entry file type of inode type `ifmt` (`S_IFREG`, …),
    /// or unknown without the `filetype` feature: 1 regular, 2 directory,
    /// 3 character device, 4 block device, 5 FIFO, 6 socket, 7 symlink.
    pub(super) fn file_type_of(&self, ifmt: u16) -> u8 {
        if le32(&self.sb, layout::sb::INCOMPAT) & INCOMPAT_FILETYPE == 0 {
            return dir::FT_UNKNOWN;
        }
        match ifmt & S_IFMT {
            0x8000 => dir::FT_REG_FILE,
            0x4000 => 2,
            0x2000 => 3,
            0x6000 => 4,
            0x1000 => 5,
            0xC000 => 6,
            0xA000 => 7,
            _ => dir::FT_UNKNOWN,
        }
    }

    /// Where a new entry `name` (file type `ft`) goes in directory
    /// `parent`, decided before any change: a leaf or linear block with
    /// room, a new block appended, a one-block directory to index, or an
    /// htree leaf to split (refused with
    /// [`Ext4Error::Unsupported`] when its index would need a third level).
    /// Also checks that an appended block and its tree blocks would fit.
    pub(super) fn plan_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ft: u8,
    ) -> Result<Place, Ext4Error> {
        let pinode = self.inode(parent)?;
        let csum = self.csum();
        let pseed = self.seed_of(parent, pinode.generation);
        // Where the entry goes, decided before any change.
        let (blocks, htree) = self.dir_blocks(parent)?;
        let mut place = Place::Append;
        if htree {
            let exts = self.extents_of(parent)?;
            let phys = |l: u32| {
                exts.iter()
                    .find(|e| e.logical <= l && u64::from(l) < e.end())
                    .map(|e| e.physical + u64::from(l - e.logical))
                    .ok_or_else(|| corrupt("i_block", None, l.into(), "directory block not mapped"))
            };
            let root = self.read_block(phys(0)?)?.into_owned();
            let (s_flags, seed16) = self.hash_params();
            let path = dir::dx_path(name, &root, s_flags, seed16, pseed, |l| {
                Ok(self.read_block(phys(l)?)?.into_owned())
            })?;
            let p = phys(path.leaf)?;
            let mut b = self.dir_block(parent, pinode.generation, p)?;
            place = if dir::add_entry(&mut b, name, 1, ft, csum)? {
                Place::Block(p)
            } else {
                // The index blocks above the leaf: the bottom one gets the
                // new leaf's entry; when it is full, the root moves down a
                // level (a root over the leaves) or the node splits (its
                // parent must have room). Deeper changes are refused.
                let full = |l: &dir::DxLevel| l.entries.len() >= usize::from(l.limit);
                let n = path.levels.len();
                if n >= 2 && full(&path.levels[n - 1]) && full(&path.levels[n - 2]) {
                    return Err(Ext4Error::Unsupported {
                        feature: "htree index split",
                    });
                }
                let index = path
                    .levels
                    .iter()
                    .map(|l| phys(l.block))
                    .collect::<Result<Vec<u64>, Ext4Error>>()?;
                Place::Split {
                    leaf: p,
                    index,
                    path,
                }
            };
        } else {
            for &(_, p) in &blocks {
                let mut b = self.dir_block(parent, pinode.generation, p)?;
                if dir::add_entry(&mut b, name, 1, ft, csum)? {
                    place = Place::Block(p);
                    break;
                }
            }
            // One full block: it becomes an htree, as the kernel's
            // `ext4_add_entry` makes it (a longer linear directory stays so).
            let compat = le32(&self.sb, layout::sb::COMPAT);
            let version = dir::new_index_version(compat, self.sb[SB_DEF_HASH_VERSION]);
            if let (Place::Append, [(0, block)], Some(version)) = (&place, &blocks[..], version) {
                if pinode.size == u64::from(self.info.block_size) {
                    place = Place::Index {
                        block: *block,
                        version,
                    };
                }
            }
        }
        // Space for an appended directory block and its tree blocks.
        if !matches!(place, Place::Block(_)) && self.free_blocks_count() < 8 {
            return Err(Ext4Error::NoSpace { len: 1, align: 1 });
        }
        Ok(place)
    }

    /// Puts entry `name` → `ino` into directory `parent` where
    /// [`Image::plan_entry`] said (no change to the parent's times).
    pub(super) fn put_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ino: u32,
        ft: u8,
        place: Place,
    ) -> Result<(), Ext4Error> {
        let pinode = self.inode(parent)?;
        let csum = self.csum();
        let pseed = self.seed_of(parent, pinode.generation);
        match place {
            Place::Block(p) => {
                let mut b = self.dir_block(parent, pinode.generation, p)?;
                dir::add_entry(&mut b, name, ino, ft, csum)?;
                self.write_block(p, b)?;
            }
            Place::Append => {
                let mut b = dir::init_block(self.info.block_size as usize, pseed)?;
                dir::add_entry(&mut b, name, ino, ft, csum)?;
                self.append_dir_block(parent, b)?;
            }
            Place::Split { leaf, index, path } => {
                let old = self.dir_block(parent, pinode.generation, leaf)?;
                let mut sp = dir::split_leaf(&old, &path.hasher, pseed)?;
                let half = if path.hash >= sp.hash & !1 {
                    &mut sp.upper
                } else {
                    &mut sp.lower
                };
                if !dir::add_entry(half, name, ino, ft, csum)? {
                    return Err(Ext4Error::Unsupported {
                        feature: "htree leaf split (the name fits neither half)",
                    });
                }
                let new_leaf = self.append_dir_block(parent, sp.upper)?;
                self.write_block(leaf, sp.lower)?;
                self.dx_add_leaf(parent, &path, &index, sp.hash, new_leaf, pseed)?;
            }
            Place::Index { block, version } => {
                let old = self.dir_block(parent, pinode.generation, block)?;
                let (s_flags, seed16) = self.hash_params();
                let mut ix = dir::make_indexed(&old, version, s_flags, seed16, pseed)?;
                if !ix.add_entry(name, ino, ft)? {
                    return Err(Ext4Error::Unsupported {
                        feature: "htree leaf split (the name fits neither half)",
                    });
                }
                // Logical blocks 1 and 2, where the root's entries point.
                for (want, leaf) in [(1, ix.lower), (2, ix.upper)] {
                    let got = self.append_dir_block(parent, leaf)?;
                    if got != want {
                        let why = "a directory being indexed was not one block long";
                        return Err(corrupt("i_size", None, got.into(), why));
                    }
                }
                self.write_block(block, ix.root)?;
                let flags = (self.inode(parent)?.flags | dir::INDEX_FL).to_le_bytes();
                self.write_inode_fields(parent, &[(off::FLAGS, &flags)])?;
            }
        }
        Ok(())
    }

    /// The superblock's `s_flags` and `s_hash_seed`, which with a dx root's
    /// hash version make a directory's hash ([`dir::DxHash::for_dir`]).
    fn hash_params(&self) -> (u32, [u8; 16]) {
        let mut seed16 = [0u8; 16];
        seed16.copy_from_slice(&self.sb[SB_HASH_SEED..SB_HASH_SEED + 16]);
        (le32(&self.sb, SB_FLAGS), seed16)
    }

    /// Adds the index entry `(hash, leaf)` for a new leaf to the bottom
    /// index block of `path` (physical blocks `index`), after the entry
    /// that was followed (the kernel's `ext4_dx_add_entry`): in place when
    /// it has room; else, when it is the dx root, the root's entries move
    /// to a new dx node under a root of one entry (`indirect_levels` + 1);
    /// else the node splits in two halves, the upper half to a new dx node
    /// whose first hash goes into the parent (which the caller checked has
    /// room). Every index block written is re-signed.
    fn dx_add_leaf(
        &mut self,
        parent: u32,
        path: &dir::DxPath,
        index: &[u64],
        hash: u32,
        leaf: u32,
        seed: Option<u32>,
    ) -> Result<(), Ext4Error> {
        let n = path.levels.len();
        let (Some(bottom), Some(&bottom_p)) = (path.levels.last(), index.last()) else {
            return Err(corrupt(
                "dx_root",
                None,
                0,
                "an htree path without an index",
            ));
        };
        let mut idx = self.read_block(bottom_p)?.into_owned();
        if dir::dx_insert(&mut idx, bottom.at, hash, leaf, seed)? {
            return self.write_block(bottom_p, idx);
        }
        let bs = self.info.block_size as usize;
        let mut entries = bottom.entries.clone();
        entries.insert(bottom.at + 1, dir::DxEntry { hash, block: leaf });
        if n == 1 {
            let node = dir::dx_node(bs, &entries, seed)?;
            let node_l = self.append_dir_block(parent, node)?;
            let only = [dir::DxEntry {
                hash: 0,
                block: node_l,
            }];
            dir::dx_rewrite(&mut idx, &only, seed)?;
            dir::dx_set_levels(&mut idx, 1, seed)?;
            return self.write_block(bottom_p, idx);
        }
        let half = entries.len() / 2;
        let hash2 = entries[half].hash;
        let upper = dir::dx_node(bs, &entries[half..], seed)?;
        dir::dx_rewrite(&mut idx, &entries[..half], seed)?;
        let node_l = self.append_dir_block(parent, upper)?;
        self.write_block(bottom_p, idx)?;
        let up = &path.levels[n - 2];
        let mut pidx = self.read_block(index[n - 2])?.into_owned();
        if !dir::dx_insert(&mut pidx, up.at, hash2, node_l, seed)? {
            return Err(Ext4Error::Unsupported {
                feature: "htree index split",
            });
        }
        self.write_block(index[n - 2], pidx)
    }

    /// Appends `block` (a directory block, signed) to directory `parent` as
    /// its next logical block: allocated near the directory's last block,
    /// mapped in its extent tree, `i_size` and `i_blocks` grown. Returns
    /// the logical block.
    fn append_dir_block(&mut self, parent: u32, block: Vec<u8>) -> Result<u32, Ext4Error> {
        let (mut root, pinode) = self.root_of(parent)?;
        let seed = self.seed_of(parent, pinode.generation);
        let bs = u64::from(self.info.block_size);
        let logical = pinode.size.div_ceil(bs);
        if logical >= u64::from(u32::MAX) {
            return Err(Ext4Error::FileTooBig {
                size: pinode.size + bs,
                max: self.max_file_size(),
            });
        }
        let goal = self.file_goal(parent, &root, seed)?;
        let (p, _) = self.alloc_run_from(Some(goal).filter(|&g| g < self.info.blocks_count), 1)?;
        let mut store = ImageStore::new(self);
        let out = extent::insert(
            &mut root,
            &mut store,
            seed,
            Extent {
                logical: logical as u32,
                physical: p,
                len: 1,
                unwritten: false,
            },
        )?;
        self.write_block(p, block)?;
        let blocks = pinode.blocks + (1 + u64::from(out.tree_blocks_added)) * (bs / 512);
        self.write_file_fields(parent, (logical + 1) * bs, blocks, &root)?;
        Ok(logical as u32)
    }

    /// The allocation goal for inode `ino`'s next block: just past its last
    /// physical block, else the first block of its group (with flex_bg,
    /// of the first group of its flex group).
    pub(super) fn file_goal(
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
    fn fallocate_op(
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
    pub(super) fn check_room(
        &mut self,
        root: &[u8; ROOT_SIZE],
        inode: &super::Inode,
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
            return Err(Ext4Error::NoSpace {
                len: need.min(u64::from(u32::MAX)) as u32,
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

    /// The extent root of a regular file.
    pub(super) fn root_of_file(
        &self,
        ino: u32,
    ) -> Result<([u8; ROOT_SIZE], super::Inode), Ext4Error> {
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
    fn truncate_op(&mut self, ino: u32, size: u64) -> Result<(), Ext4Error> {
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
    pub(super) fn zero_block_tail(
        &mut self,
        inode: &super::Inode,
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
    fn truncate_tree(
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

    /// Removes the entry `path` (anything but a directory: a regular file,
    /// a symlink, a device, FIFO or socket) from its directory and,
    /// when that was its last link, frees every data and tree block and
    /// the inode (`links_count` 0, `dtime` set, size and `i_blocks` 0).
    /// The parent's mtime and ctime become now.
    ///
    /// # Errors
    /// As [`Image::lookup`]; [`Ext4Error::NotARegularFile`] for a directory
    /// (see [`Image::rmdir`]); [`Ext4Error::Corrupt`] for a bad extent tree;
    /// [`Ext4Error::Io`]. Nothing changes
    /// on an error (checked before the first change, or undone).
    pub fn unlink(&mut self, path: &str) -> Result<(), Ext4Error> {
        self.atomically(|img| img.unlink_op(path))
    }

    /// [`Image::unlink`], inside its undo.
    fn unlink_op(&mut self, path: &str) -> Result<(), Ext4Error> {
        let (parent, entry, slot) = self.entry_to_remove(path)?;
        let ino = entry.inode;
        let inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Ext4Error::NotARegularFile { ino });
        }
        let seed = self.seed_of(ino, inode.generation);
        let mut root = [0u8; ROOT_SIZE];
        root.copy_from_slice(&inode.block);
        let has_extents = inode.flags & EXTENTS_FL != 0;
        if has_extents {
            // Check the whole tree before changing anything.
            extent::extents(&root, &mut ReadStore(self), seed)?;
        } else if inode.blocks != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "block-mapped (non-extent) files",
            });
        }
        if inode.links_count <= 1
            && le32(&self.sb, layout::sb::INCOMPAT) & INCOMPAT_EA_INODE != 0
            && xattr_value_inodes(inode.raw())
        {
            // Likewise for a value in an inode of its own (`ea_inode`).
            return Err(Ext4Error::Unsupported {
                feature: "removing a file with an xattr value inode (ea_inode)",
            });
        }
        self.remove_entry_at(parent, &entry.name, slot.physical)?;
        self.touch(parent, true)?;
        if inode.links_count > 1 {
            let l = (inode.links_count - 1).to_le_bytes();
            return self.write_inode_fields(ino, &[(off::LINKS_COUNT, &l)]);
        }
        self.release_inode(ino, &inode)
    }

    /// The checks before an entry is removed (`unlink`, `rmdir`): writable,
    /// its directory one spacekit may change, the entry there. Returns the
    /// directory, the entry and where it lies.
    pub(super) fn entry_to_remove(
        &mut self,
        path: &str,
    ) -> Result<(u32, DirEntry, Slot), Ext4Error> {
        self.check_writable()?;
        let (parent, name) = self.parent_of(path)?;
        self.check_dir_writable(parent)?;
        match self.find_entry(parent, name)? {
            Some((entry, slot)) => Ok((parent, entry, slot)),
            None => Err(Ext4Error::NotFound { path: path.into() }),
        }
    }

    /// Removes entry `name` from the block `physical` of directory
    /// `parent` (re-signed).
    pub(super) fn remove_entry_at(
        &mut self,
        parent: u32,
        name: &[u8],
        physical: u64,
    ) -> Result<(), Ext4Error> {
        let pgen = self.inode(parent)?.generation;
        let mut b = self.dir_block(parent, pgen, physical)?;
        dir::remove_entry(&mut b, name, self.csum())?;
        self.write_block(physical, b)
    }

    /// Frees inode `ino` (whose last link is gone): every data and tree
    /// block of an extent-mapped inode, then `links_count` 0, `dtime` and
    /// ctime now, size and `i_blocks` 0, and the inode's bitmap bit (a
    /// directory also leaves `bg_used_dirs_count`).
    pub(super) fn release_inode(
        &mut self,
        ino: u32,
        inode: &super::Inode,
    ) -> Result<(), Ext4Error> {
        let has_extents = inode.flags & EXTENTS_FL != 0;
        let mut root = [0u8; ROOT_SIZE];
        root.copy_from_slice(&inode.block);
        if has_extents {
            let seed = self.seed_of(ino, inode.generation);
            self.truncate_tree(&mut root, seed, 0)?;
        }
        // Its xattr block: freed, or one reference fewer when shared.
        self.release_xattr_block(ino)?;
        let t = now().to_le_bytes();
        let zero4 = [0u8; 4];
        let zero2 = [0u8; 2];
        let mut changes: Vec<(usize, &[u8])> = vec![
            (off::LINKS_COUNT, &zero2),
            (off::DTIME, &t),
            (off::CTIME, &t),
            (off::SIZE_LO, &zero4),
            (off::SIZE_HIGH, &zero4),
            (off::BLOCKS_LO, &zero4),
        ];
        if has_extents {
            changes.push((off::BLOCK, &root));
        }
        if le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0 {
            changes.push((off::BLOCKS_HIGH, &zero2));
        }
        self.write_inode_fields(ino, &changes)?;
        self.free_inode(ino, inode.is_dir())
    }
}

/// Whether the in-inode extended attributes of inode bytes `raw` name a
/// value inode (`e_value_inum` != 0, the `ea_inode` feature). The entries
/// follow the 4-byte magic `0xEA020000` after `128 + i_extra_isize`; each
/// is 16 bytes and its name, padded to 4, until four zero bytes. A damaged
/// table counts as naming one (refusing is the safe answer).
fn xattr_value_inodes(raw: &[u8]) -> bool {
    const MAGIC: u32 = 0xEA02_0000;
    if raw.len() <= 128 {
        return false;
    }
    let start = 128 + usize::from(layout::le16(raw, 128));
    if layout::le32(raw, start) != MAGIC || start + 4 > raw.len() {
        return false;
    }
    let mut at = start + 4;
    while at + 4 <= raw.len() {
        if layout::le32(raw, at) == 0 {
            return false;
        }
        if at + 16 > raw.len() {
            return true;
        }
        if layout::le32(raw, at + 4) != 0 {
            return true;
        }
        let name_len = usize::from(raw[at]);
        at += (16 + name_len).div_ceil(4) * 4;
    }
    false
}

/// The unmapped logical block ranges `[a, b)` of `[first, last)`, given the
/// file's extents in logical order.
pub(super) fn holes(exts: &[Extent], first: u64, last: u64) -> Vec<(u64, u64)> {
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

/// A read-only [`ExtentStore`] for walking trees (writes and allocations
/// refused).
pub(super) struct ReadStore<'a>(pub(super) &'a Image);

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
