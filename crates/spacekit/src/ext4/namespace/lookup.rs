//! Path lookup and directory reading: [`Image::lookup`] (absolute paths,
//! component by component), [`Image::read_dir`], and the directory block
//! walks the namespace operations share.

use std::string::String;
use std::vec::Vec;

use crate::ext4::error::Ext4Error;
use crate::ext4::image::Image;
use crate::ext4::layout::{self, le32};
use crate::ext4::namespace::dir::{self, DirEntry};
use crate::ext4::stat::{CASEFOLD_FL, ROOT_INO};

use crate::ext4::flags::*;

/// Where a directory entry lies: the directory's logical block and the
/// physical block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) physical: u64,
}

/// The bytes of an inline directory held in `i_block`: the parent's inode
/// number, then 56 bytes of records (the kernel's
/// `EXT4_MIN_INLINE_DATA_SIZE`).
const INLINE_DIR_MIN: usize = 60;

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

/// Whether `path` ends in `/` after a name (`/d/`; not `/` itself):
/// then it names a directory, as in `rename(2)` and `rmdir(2)`.
pub(crate) fn trailing_slash(path: &str) -> bool {
    path.ends_with('/') && !path.trim_end_matches('/').is_empty()
}

/// `path`'s last component as written (trailing slashes aside): `.`
/// and `..` are dropped or walked by [`components`], so callers that
/// make, remove or move the last name look at it here.
fn last_written(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

/// [`Ext4Error::NotADirectory`] when `path` must name a directory (see
/// [`trailing_slash`]) and the inode there is not one.
pub(crate) fn dir_if_slashed(path: &str, is_dir: bool) -> Result<(), Ext4Error> {
    if trailing_slash(path) && !is_dir {
        return Err(Ext4Error::NotADirectory { path: path.into() });
    }
    Ok(())
}

impl Slot {
    /// Where the entries of a directory stored inline lie: no block. No
    /// write reaches one ([`Image::check_dir_writable`] refuses inline
    /// directories first), and a read of it fails.
    const INLINE: Slot = Slot { physical: u64::MAX };
}

impl Image {
    /// The entries of directory `ino` if it is stored inline (the
    /// `inline_data` feature), `.` and `..` first, else `None`. Such a
    /// directory keeps its parent's inode number in the first 4 bytes of
    /// `i_block` (its `.` is implied), records in the other 56, and more
    /// records in its `system.data` attribute once those are full.
    fn inline_dir(&self, ino: u32) -> Result<Option<Vec<DirEntry>>, Ext4Error> {
        let inode = self.inode(ino)?;
        if !inode.is_dir() || inode.flags & INLINE_DATA_FL == 0 {
            return Ok(None);
        }
        let bytes = self.inline_bytes(&inode)?;
        if bytes.len() < INLINE_DIR_MIN {
            return Err(crate::ext4::error::corrupt(
                "i_size",
                None,
                inode.size,
                "an inline directory smaller than its i_block",
            ));
        }
        let dot = |inode, name: &[u8]| DirEntry {
            inode,
            name: name.to_vec(),
            file_type: dir::FT_DIR,
        };
        let mut out = std::vec![dot(ino, b"."), dot(le32(&bytes, 0), b"..")];
        out.extend(dir::inline_entries(&bytes[4..INLINE_DIR_MIN])?);
        if bytes.len() > INLINE_DIR_MIN {
            out.extend(dir::inline_entries(&bytes[INLINE_DIR_MIN..])?);
        }
        Ok(Some(out))
    }

    /// The directory's blocks as `(logical, physical)`, leaf blocks only
    /// (the dx root and dx nodes of an htree directory left out), and
    /// whether it is an htree directory.
    pub(crate) fn dir_blocks(&mut self, ino: u32) -> Result<(Vec<(u32, u64)>, bool), Ext4Error> {
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
    pub(crate) fn dir_block(
        &self,
        dir_ino: u32,
        generation: u32,
        p: u64,
    ) -> Result<Vec<u8>, Ext4Error> {
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
    pub(crate) fn find_entry(
        &mut self,
        dir_ino: u32,
        name: &[u8],
    ) -> Result<Option<(DirEntry, Slot)>, Ext4Error> {
        let dir = self.inode(dir_ino)?;
        let fold = dir.flags & CASEFOLD_FL != 0 && name.is_ascii();
        let matches = |e: &DirEntry| {
            if fold {
                e.name.is_ascii() && e.name.eq_ignore_ascii_case(name)
            } else {
                e.name == name
            }
        };
        if let Some(all) = self.inline_dir(dir_ino)? {
            return Ok(all.into_iter().find(matches).map(|e| (e, Slot::INLINE)));
        }
        let (blocks, _) = self.dir_blocks(dir_ino)?;
        let csum = self.csum();
        for (_, p) in blocks {
            let b = self.dir_block(dir_ino, dir.generation, p)?;
            let found = if fold {
                dir::entries(&b, csum)?.into_iter().find(matches)
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
    /// system; or stored inline (`inline_data`: spacekit reads those, but
    /// does not move one to a block when it outgrows its inode, as the
    /// kernel does). Checked before any change.
    pub(crate) fn check_dir_writable(&self, dir_ino: u32) -> Result<(), Ext4Error> {
        let flags = self.inode(dir_ino)?.flags;
        let feature = if flags & INLINE_DATA_FL != 0 {
            "inline data"
        } else if flags & CASEFOLD_FL != 0 {
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
        let ino = self.walk(&components(path)?)?;
        // `/f/` and `/f/.` name a directory: not a file `f`.
        if (trailing_slash(path) || matches!(last_written(path), "." | ".."))
            && !self.inode(ino)?.is_dir()
        {
            return Err(Ext4Error::NotADirectory { path: path.into() });
        }
        Ok(ino)
    }

    /// The inode the components name, from the root directory.
    pub(crate) fn walk(&mut self, comps: &[&[u8]]) -> Result<u32, Ext4Error> {
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

    /// The parent directory's inode and the last component of `path`
    /// ([`Ext4Error::IsRoot`] for `/`, which has neither;
    /// [`Ext4Error::DotName`] when the path ends in `.` or `..`).
    pub(crate) fn parent_of<'p>(&mut self, path: &'p str) -> Result<(u32, &'p [u8]), Ext4Error> {
        let comps = components(path)?;
        if matches!(last_written(path), "." | "..") && !comps.is_empty() {
            // `rmdir d/.`, `rename d/. x`: refused, as `rmdir(2)` and
            // `rename(2)` refuse them, not taken as `d`.
            return Err(Ext4Error::DotName { path: path.into() });
        }
        let Some((&name, parents)) = comps.split_last() else {
            return Err(Ext4Error::IsRoot);
        };
        // The parent's path, for the one-entry cache (never with `..`,
        // which a rename of a directory elsewhere could redirect).
        let key = (!parents.contains(&&b".."[..])).then(|| {
            let mut k = Vec::new();
            for c in parents {
                k.push(b'/');
                k.extend_from_slice(c);
            }
            k
        });
        if let (Some(k), Some((last, ino))) = (&key, &self.last_dir) {
            if k == last {
                return Ok((*ino, name));
            }
        }
        let ino = self.walk(parents)?;
        if !self.inode(ino)?.is_dir() {
            let mut at = String::new();
            for c in parents {
                at.push('/');
                at.push_str(&String::from_utf8_lossy(c));
            }
            return Err(Ext4Error::NotADirectory { path: at });
        }
        if let Some(k) = key {
            self.last_dir = Some((k, ino));
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
        if let Some(all) = self.inline_dir(ino)? {
            return Ok(all);
        }
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
}
