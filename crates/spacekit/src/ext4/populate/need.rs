//! What a populate that ran out of room needs ([`Need`]), counted over
//! the whole source for [`Ext4Error::PopulateNoSpace`].

use std::collections::HashMap;
use std::vec::Vec;

#[cfg(doc)]
use crate::ext4::error::Ext4Error;

/// How much a populate that ran out of room needs, counted over the whole
/// source (see [`Ext4Error::PopulateNoSpace`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Need {
    /// Blocks the whole source needs, about (data, directories, symlinks).
    pub(crate) blocks: u64,
    /// Inodes the whole source needs.
    pub(crate) inodes: u64,
    /// Bytes of directory records in each directory the source adds names
    /// to, by its path (empty: the directory the populate goes under).
    dirents: HashMap<Vec<u8>, u64>,
}

/// What a directory's records are counted as when it is first met: a new
/// one holds `.` and `..` (12 bytes each) in the block its entry counted;
/// one that was there before is taken as full, so its first name starts
/// a block.
const FRESH_DIR: u64 = 24;

impl Need {
    /// Adds what the entry at `path` needs: `blocks` and `inodes` of its
    /// own, and its name's record in its directory (`dir`: the entry is a
    /// directory, whose first block then holds its first names).
    pub(crate) fn add(&mut self, bs: u64, path: &[u8], blocks: u64, inodes: u64, dir: bool) {
        if path.is_empty() {
            return;
        }
        // The name's record in its directory: 8 bytes and the name,
        // rounded to 4.
        let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&[][..], path),
        };
        let dirent = (8 + name.len() as u64 + 3) & !3;
        self.blocks = self.blocks.saturating_add(blocks);
        self.inodes = self.inodes.saturating_add(inodes);
        self.add_name(parent, dirent, bs);
        if dir {
            self.new_dir(path);
        }
    }

    /// Directory blocks are counted three quarters full (an htree split
    /// leaves leaves half full; a linear directory fills its blocks).
    fn per_block(bs: u64) -> u64 {
        (bs / 4).saturating_mul(3).max(1)
    }

    /// A new directory at `path`: its first block is counted with its
    /// entry, and holds its first names (a path met again keeps its
    /// count).
    fn new_dir(&mut self, path: &[u8]) {
        if !self.dirents.contains_key(path) {
            self.dirents.insert(path.to_vec(), FRESH_DIR);
        }
    }

    /// A record of `len` bytes in directory `dir`: a block more each time
    /// the directory's records pass a block's worth.
    fn add_name(&mut self, dir: &[u8], len: u64, bs: u64) {
        let per = Self::per_block(bs);
        let have = match self.dirents.get_mut(dir) {
            Some(h) => h,
            None => self.dirents.entry(dir.to_vec()).or_insert(per),
        };
        let before = have.div_ceil(per);
        *have = have.saturating_add(len);
        self.blocks = self
            .blocks
            .saturating_add(have.div_ceil(per).saturating_sub(before));
    }
}
