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

use std::vec;
use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, Extent, ROOT_SIZE};
use crate::ext4::inode::off;
use crate::ext4::layout::{self, le32};
use crate::ext4::namespace::dir::{self, DirEntry};
use crate::ext4::stat::EXTENTS_FL;

use crate::ext4::flags::*;
use crate::ext4::inode::file::{now, ImageStore, ReadStore};
use crate::ext4::namespace::lookup::{dir_if_slashed, Slot};

/// Where a new directory entry goes ([`Image::plan_entry`]).
pub(crate) enum Place {
    /// Into this directory block, which has room.
    Block(u64),
    /// Already in its block ([`Image::place_entry`] put it there while it
    /// looked for room).
    Done,
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

impl Image {
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
    pub(crate) fn create_op(&mut self, path: &str, mode: u16) -> Result<u32, Ext4Error> {
        self.check_writable()?;
        if mode & S_IFMT != 0 && mode & S_IFMT != S_IFREG {
            return Err(invalid(
                "mode",
                mode.into(),
                "only regular files can be created",
            ));
        }
        let (parent, name) = self.parent_of(path)?;
        // `/f/` names a directory: no file is made there.
        dir_if_slashed(path, false)?;
        self.check_dir_writable(parent)?;
        if name.contains(&0) {
            return Err(invalid("name", name.len() as u64, "a name holds no NUL"));
        }
        if self.find_entry(parent, name)?.is_some() {
            return Err(Ext4Error::Exists { path: path.into() });
        }
        // From the inode on, an error is undone by `atomically`.
        let (ft, place, ino) = self.new_file_slot(parent, name)?;
        let mut root = [0u8; ROOT_SIZE];
        extent::init_root(&mut root);
        self.init_inode(ino, S_IFREG | (mode & 0o7777), 1, EXTENTS_FL, &root)?;
        self.put_entry(parent, name, ino, ft, place)?;
        self.inherit_setgid(parent, ino)?;
        self.touch(parent, true)?;
        Ok(ino)
    }

    /// A new regular file's entry type, the place of its entry `name` in
    /// `parent` ([`Image::plan_entry`]) and its inode, allocated in the
    /// parent's group.
    pub(crate) fn new_file_slot(
        &mut self,
        parent: u32,
        name: &[u8],
    ) -> Result<(u8, Place, u32), Ext4Error> {
        let place = self.plan_entry(parent, name, self.file_type_of(S_IFREG))?;
        let (ft, ino) = self.new_file_inode(parent)?;
        Ok((ft, place, ino))
    }

    /// A new regular file's entry type and its inode, allocated in the
    /// parent's group.
    pub(crate) fn new_file_inode(&mut self, parent: u32) -> Result<(u8, u32), Ext4Error> {
        let (pg, _) = self.info.group_of_inode(parent).unwrap_or_default();
        let ino = self.alloc_inode(Some(pg), false)?;
        Ok((self.file_type_of(S_IFREG), ino))
    }

    /// The directory-entry file type of inode type `ifmt` (`S_IFREG`, …),
    /// or unknown without the `filetype` feature: 1 regular, 2 directory,
    /// 3 character device, 4 block device, 5 FIFO, 6 socket, 7 symlink.
    pub(crate) fn file_type_of(&self, ifmt: u16) -> u8 {
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
    pub(crate) fn plan_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ft: u8,
    ) -> Result<Place, Ext4Error> {
        self.find_place(parent, name, ft, None)
    }

    /// Puts entry `name` → `ino` into directory `parent` where
    /// [`Image::plan_entry`] would place it, in one pass: a block with room
    /// is read, checked and given the entry once (planning and then
    /// putting reads and edits it twice). For a caller that has nothing
    /// left to refuse before the entry: its inode is already allocated,
    /// and the name is not in the directory. A directory filled in order
    /// gets each entry right after the last one put here, when that block
    /// has room (see `append.rs`).
    pub(crate) fn place_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<(), Ext4Error> {
        if self.append_entry(parent, name, ino, ft)? {
            return Ok(());
        }
        match self.find_place(parent, name, ft, Some(ino))? {
            Place::Done => {}
            place => self.put_entry(parent, name, ino, ft, place)?,
        }
        self.note_append_place(parent);
        Ok(())
    }

    /// Adds entry `name` → `ino` to block `p` of directory `parent`
    /// (generation `pgen`) if it has room; returns whether it had. A block
    /// the cache holds is changed where it is (its bytes were checked when
    /// they were read, or made here); another is read, checked and
    /// written back.
    fn add_to_block(
        &mut self,
        parent: u32,
        pgen: u32,
        p: u64,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<bool, Ext4Error> {
        let csum = self.csum();
        if self.append_to_leaf(p, name, ino, ft)? {
            return Ok(true);
        }
        if let Some(b) = self.pending_blocks.get(&p) {
            // The slot is found on the block as it is, so a full block is
            // left alone (not kept for the undo, not marked as being
            // filled), and the records are read once.
            dir::check_new_entry(name, ino)?;
            let Some(slot) = dir::find_slot(b, name, csum)? else {
                return Ok(false);
            };
            if let Some(b) = self.pending_block_mut(p) {
                let at = dir::put_at_slot(b, slot, name, ino, ft, csum)?;
                self.forget_append_block(p);
                self.keep_leaf_place(p, at);
                return Ok(true);
            }
        }
        let mut b = self.dir_block(parent, pgen, p)?;
        if !dir::add_entry(&mut b, name, ino, ft, csum)? {
            return Ok(false);
        }
        self.write_block(p, b)?;
        Ok(true)
    }

    /// [`Image::plan_entry`]; with `put`, an entry that fits a block is
    /// written there as inode `put`'s ([`Place::Done`]).
    fn find_place(
        &mut self,
        parent: u32,
        name: &[u8],
        ft: u8,
        put: Option<u32>,
    ) -> Result<Place, Ext4Error> {
        let pinode = self.inode(parent)?;
        let csum = self.csum();
        let pseed = self.seed_of(parent, pinode.generation);
        // Where the entry goes, decided before any change. An htree
        // directory's leaf comes from its index, so only a linear one's
        // blocks are listed (the index nodes off the leaf's path are not
        // read here; a lookup's listing reads and checks them all).
        let htree = pinode.is_dir() && pinode.flags & dir::INDEX_FL != 0;
        let blocks = if htree {
            Vec::new()
        } else {
            self.dir_blocks(parent)?.0
        };
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
            let room = match put {
                Some(ino) => {
                    if self.add_to_block(parent, pinode.generation, p, name, ino, ft)? {
                        return Ok(Place::Done);
                    }
                    false
                }
                None => {
                    let mut b = self.dir_block(parent, pinode.generation, p)?;
                    dir::add_entry(&mut b, name, 1, ft, csum)?
                }
            };
            place = if room {
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
                if let Some(ino) = put {
                    if self.add_to_block(parent, pinode.generation, p, name, ino, ft)? {
                        return Ok(Place::Done);
                    }
                    continue;
                }
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
        // Space for an appended directory block and its tree blocks, when
        // planning before any change. Placing (`put`) comes after the
        // inode and its data took their blocks: a block the entry cannot
        // get fails its allocation, and the caller rolls back.
        if put.is_none() && !matches!(place, Place::Block(_)) && self.free_blocks_count() < 8 {
            return Err(Ext4Error::NoSpace { len: 1, align: 1 });
        }
        Ok(place)
    }

    /// Puts entry `name` → `ino` into directory `parent` where
    /// [`Image::plan_entry`] said (no change to the parent's times).
    pub(crate) fn put_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ino: u32,
        ft: u8,
        place: Place,
    ) -> Result<(), Ext4Error> {
        self.forget_append_dir(parent);
        let pinode = self.inode(parent)?;
        let csum = self.csum();
        let pseed = self.seed_of(parent, pinode.generation);
        match place {
            Place::Done => {}
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
                let mut sp = dir::split_leaf_for(&old, &path.hasher, pseed, name)?;
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
                let mut ix = dir::make_indexed_for(&old, version, s_flags, seed16, pseed, name)?;
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
    pub(crate) fn hash_params(&self) -> (u32, [u8; 16]) {
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
    pub(crate) fn dx_add_leaf(
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
    pub(crate) fn append_dir_block(
        &mut self,
        parent: u32,
        block: Vec<u8>,
    ) -> Result<u32, Ext4Error> {
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
    pub(crate) fn unlink_op(&mut self, path: &str) -> Result<(), Ext4Error> {
        let (parent, entry, slot) = self.entry_to_remove(path)?;
        self.unlink_found(parent, entry, slot, None)
    }

    /// [`Image::unlink`] of `name` in directory `parent` (which the caller
    /// checked is one spacekit may change), inside the caller's undo, for
    /// a populate replacing an entry it made. The directory's times stay,
    /// and a freed inode's `dtime` and ctime are `time` (a populate's
    /// times come from its source, never the clock).
    ///
    /// `uncommitted`: the caller knows that the inode and every block it
    /// holds were allocated since the undo began and since the last
    /// flush. Then the blocks freed are free in the committed image and in
    /// the one a roll-back returns to, so file data may go there before
    /// the flush, and the next data write does not flush first (a flush
    /// inside a populate would commit half of it; a crash soak that added
    /// a tree twice caught one). Otherwise the next data write flushes, as
    /// after any free.
    pub(crate) fn unlink_in(
        &mut self,
        parent: u32,
        name: &[u8],
        time: u32,
        uncommitted: bool,
    ) -> Result<(), Ext4Error> {
        let freed = self.freed_since_flush;
        let r = match self.find_entry(parent, name)? {
            Some((entry, slot)) => self.unlink_found(parent, entry, slot, Some(time)),
            None => Err(Ext4Error::NotFound {
                path: std::string::String::from_utf8_lossy(name).into_owned(),
            }),
        };
        if uncommitted {
            self.freed_since_flush = freed;
        }
        r
    }

    /// Removes `entry`, found at `slot` of directory `parent`, and frees
    /// its inode at its last link. `time` `None`: the directory's mtime
    /// and ctime become now, and a freed inode's `dtime` and ctime too;
    /// `Some(t)`: the directory's times stay, the freed inode's are `t`.
    fn unlink_found(
        &mut self,
        parent: u32,
        entry: DirEntry,
        slot: Slot,
        time: Option<u32>,
    ) -> Result<(), Ext4Error> {
        let ino = entry.inode;
        let inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Ext4Error::NotARegularFile { ino });
        }
        let seed = self.seed_of(ino, inode.generation);
        let mut root = [0u8; ROOT_SIZE];
        root.copy_from_slice(&inode.block);
        let has_extents = inode.flags & EXTENTS_FL != 0;
        // The 512-byte sectors of the xattr block, counted in i_blocks.
        let xattr_sectors = if inode.file_acl != 0 {
            u64::from(self.info.block_size / 512)
        } else {
            0
        };
        if has_extents {
            // Check the whole tree before changing anything.
            extent::extents(&root, &mut ReadStore(self), seed)?;
        } else if inode.flags & INLINE_DATA_FL == 0 && inode.blocks > xattr_sectors {
            // Data in blocks mapped the old way (an inline file's bytes
            // are in the inode and its `system.data` attribute: nothing
            // to free but the xattr block).
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
        if time.is_none() {
            self.touch(parent, true)?;
        }
        if inode.links_count > 1 {
            let l = (inode.links_count - 1).to_le_bytes();
            return self.write_inode_fields(ino, &[(off::LINKS_COUNT, &l)]);
        }
        self.release_inode_at(ino, &inode, time.unwrap_or_else(now))
    }

    /// The checks before an entry is removed (`unlink`, `rmdir`): writable,
    /// its directory one spacekit may change, the entry there. Returns the
    /// directory, the entry and where it lies.
    pub(crate) fn entry_to_remove(
        &mut self,
        path: &str,
    ) -> Result<(u32, DirEntry, Slot), Ext4Error> {
        self.check_writable()?;
        let (parent, name) = self.parent_of(path)?;
        self.check_dir_writable(parent)?;
        match self.find_entry(parent, name)? {
            Some((entry, slot)) => {
                dir_if_slashed(path, self.inode(entry.inode)?.is_dir())?;
                Ok((parent, entry, slot))
            }
            None => Err(Ext4Error::NotFound { path: path.into() }),
        }
    }

    /// Removes entry `name` from the block `physical` of directory
    /// `parent` (re-signed).
    pub(crate) fn remove_entry_at(
        &mut self,
        parent: u32,
        name: &[u8],
        physical: u64,
    ) -> Result<(), Ext4Error> {
        // A path through this entry may now lead elsewhere.
        self.last_dir = None;
        self.forget_append_dir(parent);
        let pgen = self.inode(parent)?.generation;
        let mut b = self.dir_block(parent, pgen, physical)?;
        dir::remove_entry(&mut b, name, self.csum())?;
        self.write_block(physical, b)
    }

    /// Frees inode `ino` (whose last link is gone): every data and tree
    /// block of an extent-mapped inode, then `links_count` 0, `dtime` and
    /// ctime now, size and `i_blocks` 0, and the inode's bitmap bit (a
    /// directory also leaves `bg_used_dirs_count`).
    pub(crate) fn release_inode(
        &mut self,
        ino: u32,
        inode: &crate::ext4::Inode,
    ) -> Result<(), Ext4Error> {
        self.release_inode_at(ino, inode, now())
    }

    /// [`Image::release_inode`] with `dtime` and ctime `time` (at least 1:
    /// e2fsck takes a zero `dtime` on a freed inode for damage).
    fn release_inode_at(
        &mut self,
        ino: u32,
        inode: &crate::ext4::Inode,
        time: u32,
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
        let t = time.max(1).to_le_bytes();
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
