//! Every kind of inode and the names that lead to them: [`Image::mkdir`],
//! [`Image::rmdir`], [`Image::symlink`] (and [`Image::read_link`]),
//! [`Image::link`], [`Image::mknod`]; and an inode's attributes:
//! [`Image::chmod`], [`Image::chown`], [`Image::set_times`].
//!
//! New inodes are laid out as the kernel lays them out: a directory gets
//! one block holding `.` and `..` (re-signed with metadata_csum), the
//! parent's link count grows by one and the group's `bg_used_dirs_count`
//! too; a symlink target of up to 59 bytes lives in `i_block` (a fast
//! symlink, no extents), a longer one in a data block; a device stores its
//! number in `i_block` in the old encoding when major and minor fit in a
//! byte, else in the new one (`new_encode_dev`). New inodes are allocated
//! from the parent's group on, as libext2fs' `ext2fs_new_inode` searches.
//! Every operation is one undo unit: on an error nothing changes.

pub(super) mod append;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod dir;
#[cfg(not(any(test, feature = "testing")))]
pub(super) mod dir;
pub(super) mod entries;
pub(super) mod lookup;
mod owner;

use std::vec::Vec;

use crate::ext4::error::{invalid, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, Extent, ROOT_SIZE};
use crate::ext4::inode::file::{now, ImageStore};
use crate::ext4::inode::off;
use crate::ext4::layout::{self, le16, le32};
use crate::ext4::namespace::entries::Place;
use crate::ext4::stat::EXTENTS_FL;
use lookup::dir_if_slashed;

const S_IFMT: u16 = 0xF000;
const S_IFDIR: u16 = 0x4000;
const S_IFLNK: u16 = 0xA000;
const S_IFCHR: u16 = 0x2000;
const S_IFBLK: u16 = 0x6000;
const S_IFIFO: u16 = 0x1000;
const S_IFSOCK: u16 = 0xC000;
/// The most links an inode may have (the kernel's `EXT4_LINK_MAX`).
const LINK_MAX: u16 = 65000;
/// ro_compat `dir_nlink`: a directory with too many subdirectories keeps
/// `i_links_count` 1.
const RO_COMPAT_DIR_NLINK: u32 = 0x20;

/// A special file for [`Image::mknod`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A character device.
    Char {
        /// Major number (12 bits).
        major: u32,
        /// Minor number (20 bits).
        minor: u32,
    },
    /// A block device.
    Block {
        /// Major number (12 bits).
        major: u32,
        /// Minor number (20 bits).
        minor: u32,
    },
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

/// A point in time with nanoseconds, as `struct timespec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timestamp {
    /// Seconds since the epoch (ext4 stores -2^31 to 2^34 - 2^31 - 1,
    /// 2446-05-10, with large inodes, 32 signed bits without).
    pub secs: i64,
    /// Nanoseconds, below 10^9 (kept only with large inodes).
    pub nanos: u32,
}

impl Timestamp {
    /// Decimal seconds with an optional fraction, maybe negative, as PAX
    /// records and `touch -d @SECONDS` write them: a time before the epoch
    /// counts its fraction back too (`-1.25` is seconds -2 and 750,000,000
    /// nanoseconds); digits past the ninth of the fraction are dropped.
    /// `None` for anything else, or seconds past 64 bits.
    pub fn parse_decimal(v: &[u8]) -> Option<Timestamp> {
        let (neg, v) = match v.strip_prefix(b"-") {
            Some(rest) => (true, rest),
            None => (false, v),
        };
        let (int, frac) = match v.iter().position(|&b| b == b'.') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &v[..0]),
        };
        if int.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
            return None;
        }
        let mut secs = 0i64;
        for &d in int {
            secs = secs
                .checked_mul(10)
                .and_then(|s| s.checked_add(i64::from(d - b'0')))?;
        }
        let mut nanos = 0u32;
        for i in 0..9 {
            nanos = nanos * 10 + frac.get(i).map_or(0, |d| u32::from(d - b'0'));
        }
        Some(match (neg, nanos) {
            (false, _) => Timestamp { secs, nanos },
            (true, 0) => Timestamp { secs: -secs, nanos },
            (true, _) => Timestamp {
                secs: -secs - 1,
                nanos: 1_000_000_000 - nanos,
            },
        })
    }
}

/// The times [`Image::set_times`] sets; `None` keeps one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileTimes {
    /// Last access.
    pub atime: Option<Timestamp>,
    /// Last change of the contents.
    pub mtime: Option<Timestamp>,
    /// Last change of the inode (when not given, becomes now).
    pub ctime: Option<Timestamp>,
    /// Creation (`i_crtime`; needs a large inode).
    pub crtime: Option<Timestamp>,
}

impl Image {
    /// Makes directory `path` with permission bits `mode & 0o7777`: one
    /// block with `.` and `..`, `links_count` 2, the parent's links + 1.
    /// Returns the inode.
    ///
    /// # Errors
    /// As [`Image::create`]; [`Ext4Error::InvalidArgument`] (`what:
    /// "links"`) when the parent would pass 65,000 links without
    /// `dir_nlink`.
    pub fn mkdir(&mut self, path: &str, mode: u16) -> Result<u32, Ext4Error> {
        self.atomically(|img| {
            let (parent, name, _, _) = img.plan_new(path, S_IFDIR)?;
            let ino = img.pop_extents(parent, name, S_IFDIR | (mode & 0o7777))?;
            img.inherit_setgid(parent, ino)?;
            img.touch(parent, true)?;
            Ok(ino)
        })
    }

    /// Removes the empty directory `path` (only `.` and `..` left): its
    /// entry, its blocks and inode; the parent's links - 1.
    ///
    /// # Errors
    /// As [`Image::lookup`]; [`Ext4Error::NotADirectory`];
    /// [`Ext4Error::NotEmpty`]; [`Ext4Error::DotName`] for a path that
    /// ends in `.` or `..`; [`Ext4Error::IsRoot`] for `/`.
    pub fn rmdir(&mut self, path: &str) -> Result<(), Ext4Error> {
        self.atomically(|img| {
            let (parent, entry, slot) = img.entry_to_remove(path)?;
            let (ino, name) = (entry.inode, &entry.name[..]);
            let inode = img.inode(ino)?;
            if !inode.is_dir() {
                return Err(Ext4Error::NotADirectory { path: path.into() });
            }
            let live = img
                .read_dir(ino)?
                .into_iter()
                .filter(|e| e.inode != 0 && e.name != b"." && e.name != b"..")
                .count();
            if live > 0 {
                return Err(Ext4Error::NotEmpty { path: path.into() });
            }
            img.remove_entry_at(parent, name, slot.physical)?;
            img.add_links(parent, -1)?;
            img.touch(parent, true)?;
            img.release_inode(ino, &inode)
        })
    }

    /// Makes symlink `path` pointing at `target` (1 byte up to a block
    /// less one): a fast symlink in `i_block` up to 59 bytes, else one
    /// data block. Returns the inode.
    ///
    /// # Errors
    /// As [`Image::create`]; [`Ext4Error::InvalidArgument`] (`what:
    /// "target"`) for an empty or too long target or one holding a NUL.
    pub fn symlink(&mut self, path: &str, target: &[u8]) -> Result<u32, Ext4Error> {
        self.atomically(|img| {
            let (parent, name, _, _) = img.plan_new(path, S_IFLNK)?;
            let ino = img.pop_symlink(parent, name, target, 0o777)?;
            img.inherit_setgid(parent, ino)?;
            img.touch(parent, true)?;
            Ok(ino)
        })
    }

    /// The target of symlink `ino`.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] (`what: "ino"`) for an inode that is
    /// not a symlink; [`Ext4Error::Unsupported`] for inline data; as
    /// [`Image::read`] for the block.
    pub fn read_link(&self, ino: u32) -> Result<Vec<u8>, Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.mode & S_IFMT != S_IFLNK {
            return Err(invalid("ino", ino.into(), "not a symlink"));
        }
        let size = inode.size as usize;
        if inode.flags & crate::ext4::flags::INLINE_DATA_FL != 0 {
            return self.inline_bytes(&inode);
        }
        if inode.flags & EXTENTS_FL == 0 && size < ROOT_SIZE {
            return Ok(inode.block[..size].to_vec());
        }
        let (root, _) = self.root_of(ino)?;
        let seed = self.seed_of(ino, inode.generation);
        let exts = extent::extents(&root, &mut crate::ext4::inode::file::ReadStore(self), seed)?;
        let e = exts
            .iter()
            .find(|e| e.logical == 0 && !e.unwritten)
            .ok_or_else(|| invalid("ino", ino.into(), "a symlink without its block"))?;
        let b = self.read_block(e.physical)?;
        Ok(b[..size.min(b.len())].to_vec())
    }

    /// Adds the name `new` for the inode at `existing` (a hard link; not
    /// for directories): its `links_count` + 1, its ctime now.
    ///
    /// # Errors
    /// As [`Image::lookup`] and [`Image::create`];
    /// [`Ext4Error::InvalidArgument`] for a directory (`what: "ino"`) or an
    /// inode at 65,000 links (`what: "i_links_count"`).
    pub fn link(&mut self, existing: &str, new: &str) -> Result<(), Ext4Error> {
        self.atomically(|img| {
            let ino = img.lookup(existing)?;
            let inode = img.inode(ino)?;
            if inode.is_dir() {
                return Err(invalid(
                    "ino",
                    ino.into(),
                    "a directory: hard links to directories are not allowed",
                ));
            }
            if inode.links_count >= LINK_MAX {
                return Err(invalid(
                    "i_links_count",
                    inode.links_count.into(),
                    "the inode has as many links as it can",
                ));
            }
            let (parent, name, ft, place) = img.plan_new(new, inode.mode)?;
            let l = (inode.links_count + 1).to_le_bytes();
            img.write_inode_fields(ino, &[(off::LINKS_COUNT, &l)])?;
            img.put_entry(parent, name, ino, ft, place)?;
            img.touch(ino, false)?;
            img.touch(parent, true)
        })
    }

    /// Renames `from` to `to` with `rename(2)`'s rules: a file replaces a
    /// file (or symlink, device…) at `to`, a directory replaces an empty
    /// directory; a directory moved to another parent gets its `..`
    /// rewritten and the two parents' link counts follow; a directory
    /// cannot move under itself. The same inode at both names changes
    /// nothing. The inode's ctime and both parents' mtime and ctime become
    /// now.
    ///
    /// # Errors
    /// As [`Image::lookup`]; [`Ext4Error::NotADirectory`] (a directory over
    /// a file); [`Ext4Error::NotEmpty`] (a directory over one that is not
    /// empty); [`Ext4Error::InvalidArgument`] (`what: "ino"`) for a file
    /// over a directory or a directory into its own subtree, (`what:
    /// "to"`) for a name with a NUL; [`Ext4Error::DotName`] for a path
    /// that ends in `.` or `..`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), Ext4Error> {
        self.atomically(|img| img.rename_op(from, to))
    }

    /// [`Image::rename`], inside its undo.
    fn rename_op(&mut self, from: &str, to: &str) -> Result<(), Ext4Error> {
        self.check_writable()?;
        // A directory may move: no cached path survives.
        self.last_dir = None;
        let (op, oname) = self.parent_of(from)?;
        let (np, nname) = self.parent_of(to)?;
        self.check_dir_writable(op)?;
        self.check_dir_writable(np)?;
        // (`.` and `..` as the last name are refused by `parent_of`.)
        for n in [oname, nname] {
            if n.contains(&0) {
                return Err(invalid("to", n.len() as u64, "a name holds no NUL"));
            }
        }
        let Some((entry, slot)) = self.find_entry(op, oname)? else {
            return Err(Ext4Error::NotFound { path: from.into() });
        };
        let ino = entry.inode;
        let inode = self.inode(ino)?;
        // `a/` or `b/` on either side: only a directory moves.
        dir_if_slashed(from, inode.is_dir())?;
        dir_if_slashed(to, inode.is_dir())?;
        let target = self.find_entry(np, nname)?;
        if target.as_ref().is_some_and(|(t, _)| t.inode == ino) {
            return Ok(());
        }
        if inode.is_dir() {
            // `np` must not be `ino` or below it.
            let mut x = np;
            while x != crate::ext4::stat::ROOT_INO {
                if x == ino {
                    return Err(invalid(
                        "ino",
                        ino.into(),
                        "a directory cannot move under itself",
                    ));
                }
                x = match self.find_entry(x, b"..")? {
                    Some((e, _)) if e.inode != x => e.inode,
                    _ => break,
                };
            }
        }
        if let Some((t, tslot)) = &target {
            let tinode = self.inode(t.inode)?;
            match (inode.is_dir(), tinode.is_dir()) {
                (false, true) => {
                    return Err(invalid(
                        "ino",
                        t.inode.into(),
                        "the inode at the new name is a directory, which a file cannot replace",
                    ))
                }
                (true, false) => return Err(Ext4Error::NotADirectory { path: to.into() }),
                (true, true) => {
                    let live = self
                        .read_dir(t.inode)?
                        .into_iter()
                        .filter(|e| e.inode != 0 && e.name != b"." && e.name != b"..")
                        .count();
                    if live > 0 {
                        return Err(Ext4Error::NotEmpty { path: to.into() });
                    }
                }
                (false, false) => {}
            }
            self.remove_entry_at(np, nname, tslot.physical)?;
            if tinode.is_dir() {
                self.add_links(np, -1)?;
                self.release_inode(t.inode, &tinode)?;
            } else if tinode.links_count > 1 {
                self.add_links(t.inode, -1)?;
                self.touch(t.inode, false)?;
            } else {
                self.release_inode(t.inode, &tinode)?;
            }
        }
        // Out of the old directory first: an htree split while adding may
        // move the old entry to another block.
        self.remove_entry_at(op, oname, slot.physical)?;
        let ft = self.file_type_of(inode.mode);
        let place = self.plan_entry(np, nname, ft)?;
        self.put_entry(np, nname, ino, ft, place)?;
        if inode.is_dir() && op != np {
            self.set_dotdot(ino, np)?;
            self.add_links(op, -1)?;
            self.add_links(np, 1)?;
        }
        self.touch(ino, false)?;
        self.touch(op, true)?;
        if np != op {
            self.touch(np, true)?;
        }
        Ok(())
    }

    /// Adds `d` (±1) to inode `ino`'s link count, as the kernel does for
    /// directories: a directory at 1 (`dir_nlink`, too many to count) stays
    /// there; one that would pass 65,000 goes to 1 with `dir_nlink` (and
    /// is refused without it), so 65,000 itself is kept, as the kernel's
    /// `ext4_inc_count` keeps it.
    pub(crate) fn add_links(&mut self, ino: u32, d: i32) -> Result<(), Ext4Error> {
        let inode = self.inode(ino)?;
        let dir_nlink = le32(&self.sb, layout::sb::RO_COMPAT) & RO_COMPAT_DIR_NLINK != 0;
        let l = i32::from(inode.links_count);
        let new = match l + d {
            _ if inode.is_dir() && l == 1 => 1,
            n if n > i32::from(LINK_MAX) && inode.is_dir() && dir_nlink => 1,
            n if n > i32::from(LINK_MAX) => {
                return Err(invalid(
                    "links",
                    n as u64,
                    "too many links (needs dir_nlink)",
                ))
            }
            n => n.max(0),
        } as u16;
        self.write_inode_fields(ino, &[(off::LINKS_COUNT, &new.to_le_bytes())])
    }

    /// Points directory `ino`'s `..` at `parent`: the second record of its
    /// block 0 (a linear block, re-signed; or an htree's dx root, whose
    /// index is re-signed), or the first 4 bytes of `i_block` of a
    /// directory stored inline.
    fn set_dotdot(&mut self, ino: u32, parent: u32) -> Result<(), Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.flags & crate::ext4::flags::INLINE_DATA_FL != 0 {
            // Stored inline: `..` is the first 4 bytes of `i_block`.
            return self.write_inode_fields(ino, &[(off::BLOCK, &parent.to_le_bytes())]);
        }
        let seed = self.seed_of(ino, inode.generation);
        let (root, _) = self.root_of(ino)?;
        let exts = extent::extents(&root, &mut crate::ext4::inode::file::ReadStore(self), seed)?;
        let p0 = exts
            .iter()
            .find(|e| e.logical == 0)
            .map(|e| e.physical)
            .ok_or_else(|| invalid("ino", ino.into(), "a directory without block 0"))?;
        let mut b = self.read_block(p0)?.into_owned();
        let first = usize::from(le16(&b, 4));
        if first != 12 || &b[first + 8..first + 10] != b".." {
            return Err(crate::ext4::error::corrupt(
                "dir block 0",
                None,
                ino.into(),
                "no .. entry after .",
            ));
        }
        layout::put32(&mut b, first, parent);
        if inode.flags & crate::ext4::namespace::dir::INDEX_FL != 0 {
            let r = crate::ext4::namespace::dir::parse_dx_root(&b, self.csum())?;
            crate::ext4::namespace::dir::dx_rewrite(&mut b, &r.entries, seed)?;
        } else if let Some(seed) = seed {
            crate::ext4::namespace::dir::sign_tail(seed, &mut b)?;
        }
        self.write_block(p0, b)
    }

    /// Makes the special file `path` (a device, FIFO or socket) with
    /// permission bits `mode & 0o7777`. Returns the inode.
    ///
    /// # Errors
    /// As [`Image::create`]; [`Ext4Error::InvalidArgument`] for a major
    /// past 4095 or a minor past 2^20 - 1.
    pub fn mknod(&mut self, path: &str, kind: NodeKind, mode: u16) -> Result<u32, Ext4Error> {
        let (ifmt, _) = node_block(kind)?;
        self.atomically(|img| {
            let (parent, name, _, _) = img.plan_new(path, ifmt)?;
            let ino = img.pop_mknod(parent, name, kind, mode)?;
            img.inherit_setgid(parent, ino)?;
            img.touch(parent, true)?;
            Ok(ino)
        })
    }

    /// The device number of a character or block device inode, as
    /// `(major, minor)` (either encoding).
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for an inode that is not a device.
    pub fn device_number(&self, ino: u32) -> Result<(u32, u32), Ext4Error> {
        let inode = self.inode(ino)?;
        if !matches!(inode.mode & S_IFMT, S_IFCHR | S_IFBLK) {
            return Err(invalid("ino", ino.into(), "not a device"));
        }
        let old = le32(&inode.block, 0);
        if old != 0 {
            return Ok(((old >> 8) & 0xFF, old & 0xFF));
        }
        let new = le32(&inode.block, 4);
        Ok((
            (new & 0xF_FF00) >> 8,
            (new & 0xFF) | ((new >> 12) & 0xF_FF00),
        ))
    }

    /// Sets inode `ino`'s permission bits to `mode & 0o7777` (the type
    /// stays); ctime now. An access ACL's owner, mask (or group) and other
    /// entries take the new bits, as the kernel's chmod rewrites them.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; as [`Image::inode`].
    pub fn chmod(&mut self, ino: u32, mode: u16) -> Result<(), Ext4Error> {
        self.atomically(|img| {
            img.check_writable()?;
            let old = img.inode(ino)?.mode;
            let m = ((old & S_IFMT) | (mode & 0o7777)).to_le_bytes();
            img.write_inode_fields(ino, &[(off::MODE, &m)])?;
            img.acl_follow_mode(ino, mode & 0o777)?;
            img.touch(ino, false)
        })
    }

    /// Sets inode `ino`'s owner and group (32 bits each: the low halves in
    /// `i_uid`/`i_gid`, the high ones in `l_i_uid_high`/`l_i_gid_high`);
    /// ctime now.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`]; as [`Image::inode`];
    /// [`Ext4Error::InvalidArgument`] for a uid or gid of `u32::MAX`
    /// (`(uid_t)-1`, which `chown(2)` takes for "leave as it is" and the
    /// kernel never stores).
    pub fn chown(&mut self, ino: u32, uid: u32, gid: u32) -> Result<(), Ext4Error> {
        if uid == u32::MAX || gid == u32::MAX {
            let what = if uid == u32::MAX { "uid" } else { "gid" };
            return Err(invalid(what, u64::from(u32::MAX), "(uid_t)-1 is no owner"));
        }
        self.atomically(|img| {
            img.check_writable()?;
            img.inode(ino)?;
            let (ul, uh) = (
                (uid as u16).to_le_bytes(),
                ((uid >> 16) as u16).to_le_bytes(),
            );
            let (gl, gh) = (
                (gid as u16).to_le_bytes(),
                ((gid >> 16) as u16).to_le_bytes(),
            );
            img.write_inode_fields(
                ino,
                &[
                    (off::UID, &ul),
                    (off::UID_HIGH, &uh),
                    (off::GID, &gl),
                    (off::GID_HIGH, &gh),
                ],
            )?;
            img.touch(ino, false)
        })
    }

    /// Sets inode `ino`'s times with nanoseconds (`utimensat(2)`, plus
    /// crtime): the seconds' low 32 bits in `i_*time`, and with a large
    /// inode the `*_extra` field (nanoseconds << 2 | the epoch bits of the
    /// seconds above 32 signed bits). ctime becomes now unless given.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] for nanoseconds past 999,999,999, or
    /// seconds or a crtime the inode cannot hold; as [`Image::chmod`].
    pub fn set_times(&mut self, ino: u32, times: FileTimes) -> Result<(), Ext4Error> {
        self.atomically(|img| {
            img.check_writable()?;
            let raw = img.inode_raw(ino)?;
            let extra = if raw.len() > 128 {
                128 + usize::from(le16(&raw, off::EXTRA_ISIZE))
            } else {
                128
            };
            let now = Timestamp {
                secs: i64::from(now()),
                nanos: 0,
            };
            // (the time, its seconds field, its `*_extra` field); crtime
            // lives only in a large inode's extra space.
            let fields = [
                (times.atime, off::ATIME, off::ATIME_EXTRA),
                (times.mtime, off::MTIME, off::MTIME_EXTRA),
                (times.ctime.or(Some(now)), off::CTIME, off::CTIME_EXTRA),
                (times.crtime, off::CRTIME, off::CRTIME_EXTRA),
            ];
            let bytes = time_fields(extra, &fields)?;
            let changes: Vec<(usize, &[u8])> = bytes.iter().map(|(o, b)| (*o, &b[..])).collect();
            img.write_inode_fields(ino, &changes)
        })
    }

    /// The checks of a new name `path` for an inode of type `ifmt`:
    /// writable, the parent a directory spacekit may change, the name free;
    /// returns the parent, the name, its entry type and where it goes.
    fn plan_new<'p>(
        &mut self,
        path: &'p str,
        ifmt: u16,
    ) -> Result<(u32, &'p [u8], u8, Place), Ext4Error> {
        self.check_writable()?;
        let (parent, name) = self.parent_of(path)?;
        dir_if_slashed(path, ifmt == S_IFDIR)?;
        self.check_dir_writable(parent)?;
        if name.contains(&0) {
            return Err(invalid("name", name.len() as u64, "a name holds no NUL"));
        }
        if self.find_entry(parent, name)?.is_some() {
            return Err(Ext4Error::Exists { path: path.into() });
        }
        let ft = self.file_type_of(ifmt);
        let place = self.plan_entry(parent, name, ft)?;
        Ok((parent, name, ft, place))
    }

    /// Writes a fresh inode into slot `ino`: `mode` (type and bits),
    /// `links`, `flags`, `i_block`, times now, `i_extra_isize` 32 in large
    /// inodes (crtime now), the slot's generation kept.
    pub(crate) fn init_inode(
        &mut self,
        ino: u32,
        mode: u16,
        links: u16,
        flags: u32,
        block: &[u8; ROOT_SIZE],
    ) -> Result<(), Ext4Error> {
        let raw = self.fresh_inode(ino, mode, links, flags, block, now())?;
        self.write_inode_fields(ino, &[(0, &raw)])
    }

    /// The bytes [`Image::init_inode`] writes into slot `ino`, with times
    /// `t` (a caller that sets every time itself need not read the clock).
    ///
    /// # Errors
    /// [`Ext4Error::Corrupt`] when the slot still has links (a damaged
    /// inode bitmap); as [`Image::inode_raw`].
    pub(crate) fn fresh_inode(
        &self,
        ino: u32,
        mode: u16,
        links: u16,
        flags: u32,
        block: &[u8; ROOT_SIZE],
        t: u32,
    ) -> Result<Vec<u8>, Ext4Error> {
        let old = self.inode_raw(ino)?;
        // A free bit over a live inode (links left) is a damaged bitmap:
        // never write over a file or directory.
        if le16(&old, off::LINKS_COUNT) != 0 {
            return Err(crate::ext4::error::corrupt(
                "inode bitmap",
                self.info.group_of_inode(ino).map(|(g, _)| g),
                ino.into(),
                "the inode is marked free but still has links",
            ));
        }
        let isz = old.len();
        let mut raw = std::vec![0u8; isz];
        layout::put16(&mut raw, off::MODE, mode);
        layout::put16(&mut raw, off::LINKS_COUNT, links);
        layout::put32(&mut raw, off::FLAGS, flags);
        for f in [off::ATIME, off::CTIME, off::MTIME] {
            layout::put32(&mut raw, f, t);
        }
        layout::put32(&mut raw, off::GENERATION, le32(&old, off::GENERATION));
        raw[off::BLOCK..off::BLOCK + ROOT_SIZE].copy_from_slice(block);
        if isz > 128 {
            let extra = 32.min(isz - 128) as u16;
            layout::put16(&mut raw, off::EXTRA_ISIZE, extra);
            if isz >= off::CRTIME + 4 && extra >= 24 {
                layout::put32(&mut raw, off::CRTIME, t);
            }
        }
        Ok(raw)
    }

    /// The first block of new directory `ino` under `parent`: `.` (12
    /// bytes) and `..` spanning the rest, then the checksum tail (signed
    /// with `seed`) with metadata_csum.
    pub(crate) fn first_dir_block(
        &self,
        ino: u32,
        parent: u32,
        seed: Option<u32>,
    ) -> Result<Vec<u8>, Ext4Error> {
        let bs = self.info.block_size as usize;
        let mut b = crate::ext4::namespace::dir::init_block(bs, seed)?;
        let end = if seed.is_some() {
            bs - crate::ext4::namespace::dir::TAIL_LEN
        } else {
            bs
        };
        let ft = self.file_type_of(S_IFDIR);
        for (at, len, who, name) in [(0, 12, ino, &b"."[..]), (12, end - 12, parent, b"..")] {
            layout::put32(&mut b, at, who);
            let rec = crate::ext4::namespace::dir::rec_len_to_disk(len, bs)?;
            layout::put16(&mut b, at + 4, rec);
            b[at + 6] = name.len() as u8;
            b[at + 7] = ft;
            b[at + 8..at + 8 + name.len()].copy_from_slice(name);
        }
        if let Some(seed) = seed {
            crate::ext4::namespace::dir::sign_tail(seed, &mut b)?;
        }
        Ok(b)
    }

    /// Allocates one block for logical block 0 of new inode `ino` (near its
    /// goal), maps it in `root`, writes `data` there through the block
    /// cache and sets size (one block) and `i_blocks`.
    pub(crate) fn put_data_block(
        &mut self,
        ino: u32,
        root: &mut [u8; ROOT_SIZE],
        seed: Option<u32>,
        data: Vec<u8>,
    ) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let goal = self.file_goal(ino, root, seed)?;
        let (p, _) = self.alloc_run_from(Some(goal).filter(|&g| g < self.info.blocks_count), 1)?;
        let mut store = ImageStore::new(self);
        let out = extent::insert(
            root,
            &mut store,
            seed,
            Extent {
                logical: 0,
                physical: p,
                len: 1,
                unwritten: false,
            },
        )?;
        self.write_block(p, data)?;
        let blocks = (1 + u64::from(out.tree_blocks_added)) * (bs / 512);
        self.write_file_fields(ino, bs, blocks, root)
    }
}

/// The earliest time (seconds) an inode with `*_extra` time fields holds:
/// 32 signed bits, epoch bits 0.
pub(crate) const EXTRA_TIME_MIN: i64 = -(1 << 31);
/// The latest: 32 signed bits plus 3 << 32 from the two epoch bits
/// (2446-05-10 22:38:55 UTC).
pub(crate) const EXTRA_TIME_MAX: i64 = (1 << 31) - 1 + (3 << 32);

/// The inode bytes of `fields` (a time, its seconds field, its `*_extra`
/// field; `None` skipped) in an inode whose fields end at byte `extra`
/// (128 + `i_extra_isize`): the seconds' low 32 bits, and where the extra
/// field fits, nanoseconds << 2 | the epoch bits of the seconds above 32
/// signed bits.
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] for nanoseconds past 999,999,999, or
/// seconds or a crtime the inode cannot hold.
pub(crate) fn time_fields(
    extra: usize,
    fields: &[(Option<Timestamp>, usize, usize)],
) -> Result<Vec<(usize, [u8; 4])>, Ext4Error> {
    let mut bytes = Vec::with_capacity(2 * fields.len());
    for &(t, lo, hi) in fields {
        let Some(t) = t else { continue };
        if t.nanos >= 1_000_000_000 {
            return Err(invalid("nanos", t.nanos.into(), "at most 999,999,999"));
        }
        let has_extra = hi + 4 <= extra;
        let fits = if has_extra {
            (EXTRA_TIME_MIN..=EXTRA_TIME_MAX).contains(&t.secs)
        } else {
            i32::try_from(t.secs).is_ok()
        };
        if !fits || (lo == off::CRTIME && !has_extra) {
            // (A time before 1970 shows as its distance from it.)
            let (what, value) = if t.secs < 0 {
                ("secs before 1970", t.secs.unsigned_abs())
            } else {
                ("secs", t.secs as u64)
            };
            return Err(invalid(what, value, "outside what the inode holds"));
        }
        bytes.push((lo, (t.secs as u32).to_le_bytes()));
        if has_extra {
            let epoch = ((t.secs - i64::from(t.secs as i32)) >> 32) as u32 & 3;
            bytes.push((hi, ((t.nanos << 2) | epoch).to_le_bytes()));
        }
    }
    Ok(bytes)
}

/// The type bits and `i_block` of special file `kind`: a device's number
/// in the old encoding when major and minor fit in a byte, else in the new
/// one (`new_encode_dev`).
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] for a major past 4095 or a minor past
/// 2^20 - 1.
pub(crate) fn node_block(kind: NodeKind) -> Result<(u16, [u8; ROOT_SIZE]), Ext4Error> {
    let mut block = [0u8; ROOT_SIZE];
    let ifmt = match kind {
        NodeKind::Char { major, minor } | NodeKind::Block { major, minor } => {
            if major > 0xFFF {
                return Err(invalid("major", major.into(), "at most 4095"));
            }
            if minor > 0xF_FFFF {
                return Err(invalid("minor", minor.into(), "at most 1048575 (2^20 - 1)"));
            }
            if major < 256 && minor < 256 {
                layout::put32(&mut block, 0, (major << 8) | minor);
            } else {
                let dev = (minor & 0xFF) | (major << 8) | ((minor & !0xFF) << 12);
                layout::put32(&mut block, 4, dev);
            }
            if matches!(kind, NodeKind::Char { .. }) {
                S_IFCHR
            } else {
                S_IFBLK
            }
        }
        NodeKind::Fifo => S_IFIFO,
        NodeKind::Socket => S_IFSOCK,
    };
    Ok((ifmt, block))
}
