//! Extended attributes: [`Image::xattrs`], [`Image::get_xattr`],
//! [`Image::set_xattr`] and [`Image::remove_xattr`], read and written where
//! the kernel and e2fsprogs keep them.
//!
//! # Where they live
//!
//! An inode larger than 128 bytes keeps attributes after its extra fields
//! (from `128 + i_extra_isize` to the end of the inode); every inode may
//! also name one external block (`i_file_acl`), which several inodes can
//! share (`h_refcount`). The byte layouts, hashes and the block checksum
//! are in `format.rs`.
//!
//! A set puts the attribute in the inode when it fits there (in its old
//! place when it was there, else after the others), otherwise in the block
//! (sorted, as the kernel keeps a block), and removes it from the other
//! home — the kernel's `ext4_xattr_set_handle`. The block is allocated on
//! first use (goal: the first block of the inode's group, as the kernel's
//! `ext4_xattr_block_set`) and counted in `i_blocks`; a block shared with
//! other inodes is copied before it changes (the copy gets reference count
//! 1, the shared one loses a reference); a block left empty is released
//! (freed, or one reference fewer) and `i_file_acl` cleared. Setting a
//! value an attribute already has changes nothing, as in the kernel. Any
//! change sets the inode's ctime to now and the `ext_attr` feature.
//!
//! # Names and values
//!
//! Names are full names with their namespace prefix: `user.`, `trusted.`,
//! `security.`, `system.posix_acl_access`, `system.posix_acl_default` are
//! read and written; `system.` (inline data's `system.data`),
//! `system.richacl` and `gnu.` are read, and the first two refused for
//! writing ([`Ext4Error::Unsupported`]). Attributes with a name index ext4
//! has no prefix for are kept as they are and not listed (the kernel's
//! `listxattr` skips them too). The POSIX ACLs are given and taken in the
//! form `getxattr(2)` uses (see `acl.rs`) and stored in ext4's shorter
//! form; setting an access ACL sets the mode's permission bits from it,
//! as the kernel's `setxattr` does (see [`Image::set_xattr`]).
//!
//! Not supported: writing values in inodes of their own (`ea_inode`: they
//! are read; a change to such an inode's attributes is
//! [`Ext4Error::Unsupported`]), values that fit neither in the
//! inode nor in one block ([`Ext4Error::XattrNoSpace`]), in-inode
//! attributes in an inode whose `i_extra_isize` is 0 (the block is used
//! instead), and sharing identical blocks between inodes (the kernel's
//! mbcache): every block spacekit writes has one owner.

mod acl;
mod format;

#[cfg(feature = "tar")]
pub(crate) use acl::access_mode;

use std::borrow::Cow;
use std::string::String;
use std::vec;
use std::vec::Vec;

use format::{Attr, Block, INDEX_ACL_ACCESS, INDEX_ACL_DEFAULT, INDEX_RICHACL, INDEX_SYSTEM};

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::inode::{off, Inode};
use crate::ext4::layout::{self, le32, ChecksumKind};

/// compat `ext_attr`: the file system has extended attributes.
const COMPAT_EXT_ATTR: u32 = 0x8;
/// ro_compat `huge_file`: `l_i_blocks_high` counts.
const RO_COMPAT_HUGE_FILE: u32 = 0x8;
/// `i_flags`: `i_blocks` counts file-system blocks.
const HUGE_FILE_FL: u32 = 0x4_0000;
/// `i_flags`: the inode holds an xattr value (`ea_inode`).
const EA_INODE_FL: u32 = 0x20_0000;
/// The longest value `setxattr(2)` takes (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65536;
/// The longest full name (`XATTR_NAME_MAX`).
const XATTR_NAME_MAX: usize = 255;

/// An inode's attributes as found.
struct Found {
    inode: Inode,
    ibody: Vec<Attr>,
    /// The xattr block's number and contents.
    block: Option<(u64, Block)>,
}

impl Found {
    /// Every attribute: the inode's, then the block's.
    fn all(&self) -> impl Iterator<Item = &Attr> {
        let in_block = self.block.iter().flat_map(|(_, b)| b.attrs.iter());
        self.ibody.iter().chain(in_block)
    }

    /// The attribute `(index, name)`, if any.
    fn find(&self, index: u8, name: &[u8]) -> Option<&Attr> {
        self.all().find(|a| a.is(index, name))
    }

    /// The stored value of `(index, name)`, if any (empty for a value in
    /// an inode of its own, which no change reaches: see
    /// `find_xattrs_for_change`).
    fn value(&self, index: u8, name: &[u8]) -> Option<&[u8]> {
        self.find(index, name).map(|a| a.value.as_slice())
    }
}

/// A full name as its index and stored suffix.
fn parse_name(name: &str) -> Result<(u8, &[u8]), Ext4Error> {
    if name.len() > XATTR_NAME_MAX {
        return Err(Ext4Error::NameTooLong { len: name.len() });
    }
    if name.contains('\0') {
        return Err(invalid(
            "name",
            name.len() as u64,
            "an xattr name holds no NUL",
        ));
    }
    format::split_name(name).ok_or(invalid(
        "name",
        name.len() as u64,
        "not a name ext4 stores (user., trusted., security., system. and a suffix)",
    ))
}

/// Refuses writing the namespaces spacekit only reads.
fn check_name_writable(index: u8) -> Result<(), Ext4Error> {
    match index {
        INDEX_SYSTEM => Err(Ext4Error::Unsupported {
            feature: "writing system. attributes other than the POSIX ACLs",
        }),
        INDEX_RICHACL => Err(Ext4Error::Unsupported {
            feature: "writing rich ACLs (system.richacl)",
        }),
        _ => Ok(()),
    }
}

/// A stored value as the caller sees it: an ACL in the xattr form.
fn shown(index: u8, value: &[u8]) -> Result<Vec<u8>, Ext4Error> {
    match index {
        INDEX_ACL_ACCESS | INDEX_ACL_DEFAULT => acl::from_disk(value),
        _ => Ok(value.to_vec()),
    }
}

impl Image {
    /// Every extended attribute of inode `ino` as `(full name, value)`:
    /// those in the inode in their stored order, then those in its xattr
    /// block in the block's order — the order `debugfs ea_list` prints.
    /// POSIX ACLs come in the form `getxattr(2)` gives. Attributes with a
    /// name index ext4 has no prefix for are left out.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for an inode number out of range or
    /// not in use; [`Ext4Error::BadChecksum`] (`what: "xattr block"`) for
    /// a block failing its checksum; [`Ext4Error::Corrupt`] for a damaged
    /// entry table, block header or stored ACL, or an `i_file_acl` outside
    /// the file system or a value inode that is none; [`Ext4Error::Io`]. A
    /// value in an inode of its own (`ea_inode`) is read from it.
    pub fn xattrs(&self, ino: u32) -> Result<Vec<(String, Vec<u8>)>, Ext4Error> {
        let found = self.find_xattrs(ino)?;
        let mut out = Vec::new();
        for a in found.all() {
            if let Some(name) = format::full_name(a.index, &a.name) {
                out.push((name, shown(a.index, &self.stored_value(a)?)?));
            }
        }
        Ok(out)
    }

    /// An attribute's stored value: its bytes, or those of its value
    /// inode (`ea_inode`: a regular inode flagged `EA_INODE_FL` whose size
    /// is the value's length).
    fn stored_value<'a>(&self, a: &'a Attr) -> Result<Cow<'a, [u8]>, Ext4Error> {
        let Some((inum, len)) = a.in_inode else {
            return Ok(Cow::Borrowed(&a.value));
        };
        let inode = self.inode(inum)?;
        // No value is longer than setxattr(2) takes: a larger size is
        // damage, not an allocation to make.
        if len as usize > XATTR_SIZE_MAX {
            return Err(corrupt(
                "e_value_size",
                None,
                len.into(),
                "an xattr value longer than 65,536 bytes",
            ));
        }
        if inode.flags & EA_INODE_FL == 0 || inode.size != u64::from(len) {
            return Err(corrupt(
                "e_value_inum",
                None,
                inum.into(),
                "not the value inode of an xattr (EA_INODE_FL, i_size)",
            ));
        }
        let mut v = vec![0u8; len as usize];
        let n = self.read(inum, 0, &mut v)?;
        v.truncate(n);
        Ok(Cow::Owned(v))
    }

    /// The value of extended attribute `name` (a full name, such as
    /// `user.comment` or `system.posix_acl_access`) of inode `ino`, or
    /// `None` when it has none.
    ///
    /// # Errors
    /// As [`Image::xattrs`]; [`Ext4Error::InvalidArgument`] for a name in
    /// no namespace ext4 stores; [`Ext4Error::NameTooLong`] past 255
    /// bytes.
    pub fn get_xattr(&self, ino: u32, name: &str) -> Result<Option<Vec<u8>>, Ext4Error> {
        let (index, suffix) = parse_name(name)?;
        let found = self.find_xattrs(ino)?;
        found
            .find(index, suffix)
            .map(|a| shown(index, &self.stored_value(a)?))
            .transpose()
    }

    /// Sets extended attribute `name` of inode `ino` to `value`, creating
    /// or replacing it: in the inode when it fits there, else in the
    /// inode's xattr block (allocated when the inode has none, copied when
    /// other inodes share it); see the module documentation. A POSIX ACL
    /// (`system.posix_acl_access`, `system.posix_acl_default`) is given in
    /// the form `setxattr(2)` takes, and, as the kernel sets one, an access
    /// ACL sets the permission bits of the mode (the group's from its
    /// mask), and one that says no more than the mode is not kept (an
    /// access ACL stored before is removed). The inode's ctime becomes now
    /// (unless nothing changed).
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; as [`Image::get_xattr`];
    /// [`Ext4Error::Unsupported`] for `system.` names other than the ACLs
    /// and for an inode with `HUGE_FILE_FL`; [`Ext4Error::InvalidArgument`]
    /// for a value longer than 65,536 bytes, a malformed ACL, a default ACL
    /// on something other than a directory, a `user.` attribute on
    /// something other than a regular file or directory;
    /// [`Ext4Error::XattrNoSpace`] when the value fits neither in the inode
    /// nor in the block; [`Ext4Error::NoSpace`] when no block is free;
    /// [`Ext4Error::BadChecksum`] for an inode or block that fails its
    /// checksum (never patched). Nothing changes on an error.
    pub fn set_xattr(&mut self, ino: u32, name: &str, value: &[u8]) -> Result<(), Ext4Error> {
        self.atomically(|img| img.set_xattr_op(ino, name, value))
    }

    /// Removes extended attribute `name` of inode `ino`; an xattr block
    /// left empty is released (freed, or one reference fewer when shared)
    /// and `i_file_acl` cleared. The inode's ctime becomes now.
    ///
    /// # Errors
    /// [`Ext4Error::NoXattr`] when the inode has no such attribute; as
    /// [`Image::set_xattr`]. Nothing changes on an error.
    pub fn remove_xattr(&mut self, ino: u32, name: &str) -> Result<(), Ext4Error> {
        self.atomically(|img| img.remove_xattr_op(ino, name))
    }

    /// [`Image::set_xattr`], inside its undo.
    fn set_xattr_op(&mut self, ino: u32, name: &str, value: &[u8]) -> Result<(), Ext4Error> {
        self.check_writable()?;
        let (index, suffix) = parse_name(name)?;
        check_name_writable(index)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(invalid(
                "value",
                value.len() as u64,
                "longer than XATTR_SIZE_MAX (65536 bytes)",
            ));
        }
        let found = self.find_xattrs_for_change(ino)?;
        let stored = match index {
            INDEX_ACL_ACCESS | INDEX_ACL_DEFAULT => acl::to_disk(value)?,
            _ => value.to_vec(),
        };
        if index == INDEX_ACL_DEFAULT && !found.inode.is_dir() {
            return Err(invalid(
                "ino",
                ino.into(),
                "a default ACL belongs to a directory",
            ));
        }
        if index == 1 && !found.inode.is_dir() && !found.inode.is_file() {
            // The kernel's `xattr_permission`: EPERM.
            return Err(invalid(
                "ino",
                ino.into(),
                "user. attributes belong to regular files and directories",
            ));
        }
        if matches!(index, INDEX_ACL_ACCESS | INDEX_ACL_DEFAULT)
            && found.inode.file_type() == 0xA000
        {
            // The kernel: EOPNOTSUPP (symlinks have no ACL operations).
            return Err(invalid("ino", ino.into(), "a symlink has no ACL"));
        }
        let mut mode_changed = false;
        if index == INDEX_ACL_ACCESS {
            // As the kernel sets an access ACL: the mode's permission bits
            // follow it, and one that says no more than them is not kept.
            if let Some((perm, equivalent)) = acl::access_mode(value) {
                let old = found.inode.mode;
                let mode = (old & !0o777) | perm;
                if mode != old {
                    self.write_inode_fields(ino, &[(off::MODE, &mode.to_le_bytes())])?;
                    mode_changed = true;
                }
                if equivalent {
                    if found.value(index, suffix).is_some() {
                        return self.remove_xattr_op(ino, name);
                    }
                    return if mode_changed {
                        self.touch(ino, false)
                    } else {
                        Ok(())
                    };
                }
            }
        }
        if found.value(index, suffix) == Some(&stored[..]) {
            return if mode_changed {
                self.touch(ino, false)
            } else {
                Ok(())
            };
        }
        let mut ibody = found.ibody.clone();
        let at = ibody.iter().position(|a| a.is(index, suffix));
        if let Some(at) = at {
            ibody.remove(at);
        }
        let mut block: Vec<Attr> = found
            .block
            .iter()
            .flat_map(|(_, b)| b.attrs.clone())
            .collect();
        block.retain(|a| !a.is(index, suffix));
        let new = Attr {
            index,
            name: suffix.to_vec(),
            value: stored,
            in_inode: None,
        };
        let mut with = ibody.clone();
        with.insert(at.unwrap_or(with.len()), new.clone());
        if format::build_ibody(found.inode.raw(), &with).is_some() {
            ibody = with;
        } else {
            block.push(new);
            format::sort_for_block(&mut block);
            let room = self.info.block_size as usize - format::HEADER_LEN;
            if format::space_needed(&block) > room {
                return Err(Ext4Error::XattrNoSpace {
                    name: name.into(),
                    len: value.len(),
                });
            }
        }
        self.store_xattrs(ino, &found, &ibody, block)?;
        self.note_ext_attr();
        self.touch(ino, false)
    }

    /// After a chmod to permission bits `perm`: an access ACL's base
    /// entries take them, as the kernel's `posix_acl_chmod` rewrites them
    /// (the named users and groups keep theirs). Nothing without an ACL.
    pub(crate) fn acl_follow_mode(&mut self, ino: u32, perm: u16) -> Result<(), Ext4Error> {
        const NAME: &str = "system.posix_acl_access";
        let Some(old) = self.get_xattr(ino, NAME)? else {
            return Ok(());
        };
        let new = acl::with_mode(&old, perm);
        if new != old {
            self.set_xattr_op(ino, NAME, &new)?;
        }
        Ok(())
    }

    /// [`Image::remove_xattr`], inside its undo.
    fn remove_xattr_op(&mut self, ino: u32, name: &str) -> Result<(), Ext4Error> {
        self.check_writable()?;
        let (index, suffix) = parse_name(name)?;
        check_name_writable(index)?;
        let found = self.find_xattrs_for_change(ino)?;
        if found.value(index, suffix).is_none() {
            return Err(Ext4Error::NoXattr { name: name.into() });
        }
        let mut ibody = found.ibody.clone();
        ibody.retain(|a| !a.is(index, suffix));
        let mut block: Vec<Attr> = found
            .block
            .iter()
            .flat_map(|(_, b)| b.attrs.clone())
            .collect();
        block.retain(|a| !a.is(index, suffix));
        self.store_xattrs(ino, &found, &ibody, block)?;
        self.touch(ino, false)
    }

    /// Releases the xattr block of inode `ino` (about to be freed by
    /// [`Image::unlink`]): freed when the inode was its only user, else one
    /// reference fewer; `i_file_acl` cleared and `i_blocks` reduced. The
    /// kernel's `ext4_xattr_delete_inode`. Nothing to do without a block.
    ///
    /// # Errors
    /// As [`Image::remove_xattr`] for a damaged block.
    pub(crate) fn release_xattr_block(&mut self, ino: u32) -> Result<(), Ext4Error> {
        let found = self.find_xattrs_for_change(ino)?;
        if found.block.is_some() {
            let ibody = found.ibody.clone();
            self.store_xattrs(ino, &found, &ibody, Vec::new())?;
        }
        Ok(())
    }

    /// The attributes of in-use inode `ino`, its block checked.
    fn find_xattrs(&self, ino: u32) -> Result<Found, Ext4Error> {
        if !self.inode_in_use(ino)? {
            return Err(invalid("ino", ino.into(), "the inode is not in use"));
        }
        let inode = self.inode(ino)?;
        let ibody = format::parse_ibody(inode.raw())?;
        let block = match inode.file_acl {
            0 => None,
            b => Some((b, self.read_xattr_block(b)?)),
        };
        Ok(Found {
            inode,
            ibody,
            block,
        })
    }

    /// [`Image::find_xattrs`] before a change: the block must also be
    /// marked in use (a block the bitmap calls free may belong to anything
    /// by now), and the inode's `i_blocks` in 512-byte units.
    fn find_xattrs_for_change(&self, ino: u32) -> Result<Found, Ext4Error> {
        let found = self.find_xattrs(ino)?;
        if found.all().any(|a| a.in_inode.is_some()) {
            return Err(Ext4Error::Unsupported {
                feature:
                    "changing the xattrs of an inode with a value in an inode of its own (ea_inode)",
            });
        }
        if found.inode.flags & HUGE_FILE_FL != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "HUGE_FILE_FL (i_blocks in file-system blocks)",
            });
        }
        if let Some((b, _)) = &found.block {
            if !self.block_in_use(*b)? {
                return Err(corrupt(
                    "i_file_acl",
                    self.info.group_of_inode(ino).map(|(g, _)| g),
                    *b,
                    "the xattr block is marked free in the bitmap",
                ));
            }
        }
        Ok(found)
    }

    /// Xattr block `block`, its checksum checked (metadata_csum).
    fn read_xattr_block(&self, block: u64) -> Result<Block, Ext4Error> {
        if block < u64::from(self.info.first_data_block) || block >= self.info.blocks_count {
            return Err(corrupt(
                "i_file_acl",
                None,
                block,
                "the xattr block lies outside the file system",
            ));
        }
        let data = self.read_block(block)?;
        if self.info.checksums == ChecksumKind::MetadataCsum
            && format::stored_block_checksum(&data)
                != format::block_checksum(self.info.checksum_seed, block, &data)
        {
            return Err(Ext4Error::BadChecksum {
                what: "xattr block",
                group: self.info.group_of_block(block).map(|(g, _)| g),
            });
        }
        format::parse_block(&data)
    }

    /// The checksum seed of xattr blocks, with metadata_csum.
    fn xattr_seed(&self) -> Option<u32> {
        (self.info.checksums == ChecksumKind::MetadataCsum).then_some(self.info.checksum_seed)
    }

    /// Writes inode `ino`'s attributes as `ibody` (which fits) and `block`
    /// (which fits a block, sorted): the in-inode home first, then the
    /// block (rewritten in place when the inode owns it alone, else a new
    /// one; released when empty), then `i_file_acl` and `i_blocks`.
    fn store_xattrs(
        &mut self,
        ino: u32,
        found: &Found,
        ibody: &[Attr],
        block: Vec<Attr>,
    ) -> Result<(), Ext4Error> {
        let raw = found.inode.raw();
        match (format::ibody_start(raw), format::build_ibody(raw, ibody)) {
            (Some(start), Some(home)) if raw.get(start..) != Some(&home[..]) => {
                self.write_inode_fields(ino, &[(start, &home)])?;
            }
            (_, None) if !ibody.is_empty() => {
                return Err(invalid(
                    "ino",
                    ino.into(),
                    "the attributes do not fit the inode",
                ));
            }
            _ => {}
        }
        let bs = self.info.block_size as usize;
        let per_block = u64::from(self.info.block_size / 512);
        let seed = self.xattr_seed();
        let mut file_acl = found.inode.file_acl;
        let mut blocks = found.inode.blocks;
        let too_big = || Ext4Error::XattrNoSpace {
            name: String::new(),
            len: 0,
        };
        match &found.block {
            None if block.is_empty() => {}
            Some((_, old)) if old.attrs == block => {}
            Some((b, old)) if block.is_empty() => {
                self.drop_xattr_block(*b, old.refcount)?;
                file_acl = 0;
                blocks = blocks.saturating_sub(per_block);
            }
            Some((b, old)) if old.refcount <= 1 => {
                let data = format::build_block(bs, &block, 1, *b, seed).ok_or_else(too_big)?;
                self.write_block(*b, data)?;
            }
            old => {
                let (g, _) = self.info.group_of_inode(ino).unwrap_or_default();
                let goal = self.info.group_first_block(g);
                let (nb, _) = self.alloc_run_from(Some(goal), 1)?;
                let data = format::build_block(bs, &block, 1, nb, seed).ok_or_else(too_big)?;
                self.write_block(nb, data)?;
                match old {
                    Some((b, shared)) => self.drop_xattr_block(*b, shared.refcount)?,
                    None => blocks += per_block,
                }
                file_acl = nb;
            }
        }
        let mut changes: Vec<(usize, Vec<u8>)> = Vec::new();
        if file_acl != found.inode.file_acl {
            changes.push((off::FILE_ACL_LO, (file_acl as u32).to_le_bytes().to_vec()));
            changes.push((
                off::FILE_ACL_HIGH,
                ((file_acl >> 32) as u16).to_le_bytes().to_vec(),
            ));
        }
        if blocks != found.inode.blocks {
            let huge = le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_HUGE_FILE != 0;
            if blocks >> 32 != 0 && (!huge || blocks >> 48 != 0) {
                return Err(invalid(
                    "ino",
                    ino.into(),
                    "i_blocks would overflow (needs huge_file)",
                ));
            }
            changes.push((off::BLOCKS_LO, (blocks as u32).to_le_bytes().to_vec()));
            if huge {
                changes.push((
                    off::BLOCKS_HIGH,
                    ((blocks >> 32) as u16).to_le_bytes().to_vec(),
                ));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let changes: Vec<(usize, &[u8])> = changes.iter().map(|(o, b)| (*o, &b[..])).collect();
        self.write_inode_fields(ino, &changes)
    }

    /// One reference fewer to xattr block `block` (reference count
    /// `refcount`): the block is freed when it was the last.
    fn drop_xattr_block(&mut self, block: u64, refcount: u32) -> Result<(), Ext4Error> {
        if refcount > 1 {
            let mut data = self.read_block(block)?.into_owned();
            format::set_refcount(&mut data, refcount - 1, block, self.xattr_seed());
            return self.write_block(block, data);
        }
        self.free_blocks(block, 1)?;
        self.discard_block(block);
        Ok(())
    }

    /// Sets compat `ext_attr` (as the kernel's
    /// `ext4_xattr_update_super_block`), keeping the superblock checksum.
    fn note_ext_attr(&mut self) {
        let compat = le32(&self.sb, layout::sb::COMPAT);
        if compat & COMPAT_EXT_ATTR != 0 {
            return;
        }
        layout::put32(&mut self.sb, layout::sb::COMPAT, compat | COMPAT_EXT_ATTR);
        if self.info.checksums == ChecksumKind::MetadataCsum {
            let c = layout::superblock_checksum(&self.sb);
            layout::put32(&mut self.sb, layout::sb::CHECKSUM, c);
        }
        self.dirty_sb = true;
    }
}
