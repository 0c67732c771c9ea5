//! Entries appended to a directory being filled in order: a populate adds
//! a directory's names one after another, so where the last one went is
//! kept ([`AppendAt`]) and the next goes in right after it, without the
//! directory's inode, extents and earlier records being read again and
//! its block copied and checked once per name (a quarter of a 10,000-file
//! populate's work went there).
//!
//! The kept place is a hint, checked before use: the block must still be
//! pending in the block cache (so its bytes are the ones last written
//! here), and the record must still be the block's last and reach its
//! end ([`dir::append_after`]). Anything else that writes the block,
//! discards it, puts or removes an entry of the directory, frees the
//! directory's inode or rolls an operation back drops it. A directory
//! that is not linear (an htree, whose leaves are chosen by the name's
//! hash, or an inline one) never gets that place; instead each pending
//! leaf (any directory block an entry went into) keeps its last record
//! ([`Image::append_to_leaf`]), checked and dropped the same way, so a
//! name put into a leaf that fills from its end is not compared with the
//! leaf's every record (populate's htree directories spent 10% of its
//! instructions there).

use crate::ext4::error::Ext4Error;
use crate::ext4::flags::INLINE_DATA_FL;
use crate::ext4::image::{AppendAt, Image};
use crate::ext4::namespace::dir;

impl Image {
    /// Puts entry `name` → `ino` (type `ft`) into directory `parent`
    /// right after its last one, when the kept place is `parent`'s and
    /// still good; returns whether it did (if not, nothing changed). For a
    /// caller that knows the name is not in the directory.
    ///
    /// # Errors
    /// As [`dir::append_after`] for a bad name or inode.
    pub(crate) fn append_entry(
        &mut self,
        parent: u32,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<bool, Ext4Error> {
        let Some(AppendAt {
            dir,
            at: Some((block, last)),
        }) = self.append_at
        else {
            return Ok(false);
        };
        if dir != parent {
            return Ok(false);
        }
        Ok(match self.append_in(block, last, name, ino, ft)? {
            Appended::At(new) => {
                self.append_at = Some(AppendAt {
                    dir,
                    at: Some((block, new)),
                });
                true
            }
            Appended::NoRoom => false,
            Appended::Gone => {
                self.append_at = None;
                false
            }
        })
    }

    /// Puts entry `name` → `ino` after the record at `last` of pending
    /// block `block`, when [`dir::can_append`] says it fits. The block is
    /// looked at first, so one that cannot take it is left alone (not kept
    /// for the undo, not marked as being filled).
    fn append_in(
        &mut self,
        block: u64,
        last: usize,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<Appended, Ext4Error> {
        let csum = self.csum();
        match self.pending_blocks.get(&block) {
            Some(b) if dir::can_append(b, last, name.len(), csum) => {}
            Some(_) => return Ok(Appended::NoRoom),
            None => return Ok(Appended::Gone),
        }
        let Some(b) = self.pending_block_mut(block) else {
            return Ok(Appended::Gone);
        };
        Ok(match dir::append_after(b, last, name, ino, ft, csum)? {
            Some(new) => Appended::At(new),
            None => Appended::NoRoom,
        })
    }

    /// After an entry went into directory `parent` the ordinary way:
    /// keeps where the next one goes (its last block's last record, when
    /// that block is pending), or that it goes the ordinary way too (an
    /// htree or inline directory).
    pub(crate) fn note_append_place(&mut self, parent: u32) {
        if self.append_at
            == Some(AppendAt {
                dir: parent,
                at: None,
            })
        {
            return;
        }
        self.append_at = None;
        let Ok(inode) = self.inode(parent) else {
            return;
        };
        if !inode.is_dir() {
            return;
        }
        if inode.flags & (dir::INDEX_FL | INLINE_DATA_FL) != 0 {
            self.append_at = Some(AppendAt {
                dir: parent,
                at: None,
            });
            return;
        }
        let Ok((blocks, _)) = self.dir_blocks(parent) else {
            return;
        };
        let Some(&(_, p)) = blocks.iter().max_by_key(|(l, _)| *l) else {
            return;
        };
        let Some(b) = self.pending_blocks.get(&p) else {
            return;
        };
        let mut last = None;
        for r in dir::iter_records(b, self.csum()) {
            match r {
                Ok(r) => last = Some(r.offset),
                Err(_) => return,
            }
        }
        self.append_at = last.map(|l| AppendAt {
            dir: parent,
            at: Some((p, l)),
        });
    }

    /// Drops the kept place if it is in directory `dir` (an entry of it
    /// is put or removed another way, or its inode is freed).
    pub(crate) fn forget_append_dir(&mut self, dir: u32) {
        if self.append_at.is_some_and(|a| a.dir == dir) {
            self.append_at = None;
        }
    }

    /// Drops the kept places in block `block` (the block is written
    /// another way, or discarded).
    pub(crate) fn forget_append_block(&mut self, block: u64) {
        if self
            .append_at
            .is_some_and(|a| a.at.is_some_and(|(b, _)| b == block))
        {
            self.append_at = None;
        }
        self.leaf_last.remove(&block);
    }

    /// Puts entry `name` → `ino` (type `ft`) into pending directory block
    /// `block` right after its last record, when a place was kept there
    /// ([`Image::keep_leaf_place`]) and is still good; returns whether it
    /// did (if not, nothing changed). For a caller that knows the name is
    /// not in the directory: an htree leaf, whose entries arrive in hash
    /// order, not in the order of its records, still fills from its end.
    ///
    /// # Errors
    /// As [`dir::append_after`] for a bad name or inode.
    pub(crate) fn append_to_leaf(
        &mut self,
        block: u64,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<bool, Ext4Error> {
        let Some(&last) = self.leaf_last.get(&block) else {
            return Ok(false);
        };
        Ok(match self.append_in(block, last, name, ino, ft)? {
            Appended::At(new) => {
                self.leaf_last.insert(block, new);
                true
            }
            Appended::NoRoom => false,
            Appended::Gone => {
                self.leaf_last.remove(&block);
                false
            }
        })
    }

    /// After an entry went into pending block `block` at byte `at`: keeps
    /// it as the block's last record when it is (and has room after it).
    pub(crate) fn keep_leaf_place(&mut self, block: u64, at: usize) {
        let csum = self.csum();
        if let Some(b) = self.pending_blocks.get(&block) {
            if dir::can_append(b, at, 1, csum) {
                self.leaf_last.insert(block, at);
            }
        }
    }
}

/// What [`Image::append_in`] did.
enum Appended {
    /// The entry went in at this offset (the block's last record now).
    At(usize),
    /// The block could not take it; it is unchanged.
    NoRoom,
    /// The block is no longer pending (or may not be changed as data): the
    /// kept place is gone.
    Gone,
}
