//! Each kind of inode made under a parent directory given by inode (no
//! path walk; the populate's operations, and the path API's after its
//! checks), without touching the parent's
//! times (the entries' own times are set by [`Image::stamp`]), inside the
//! populate's one undo.

use std::io::Read;
use std::string::String;
use std::vec::Vec;

use crate::ext4::error::{invalid, io as io_err, Ext4Error};
use crate::ext4::flags::S_IFMT;
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, ROOT_SIZE};
use crate::ext4::inode::off;
use crate::ext4::layout::{self, le16};
use crate::ext4::namespace::{
    node_block, time_fields, NodeKind, Timestamp, EXTRA_TIME_MAX, EXTRA_TIME_MIN,
};
use crate::ext4::populate::{Contents, Meta};
use crate::ext4::stat::EXTENTS_FL;

const S_IFDIR: u16 = 0x4000;
const S_IFLNK: u16 = 0xA000;
/// Bytes read from a stream at a time.
const PIECE: usize = 1 << 20;

impl Image {
    /// A new inode of type and bits `mode` named `name` in directory
    /// `parent`: `links`, `flags`, `i_block` as given; the entry placed by
    /// [`Image::place_entry`] (as [`Image::create`] places it, or right
    /// after the last entry put there). The caller checked the name is
    /// free.
    fn pop_new(
        &mut self,
        parent: u32,
        name: &[u8],
        mode: u16,
        links: u16,
        flags: u32,
        block: &[u8; ROOT_SIZE],
    ) -> Result<u32, Ext4Error> {
        // The entry is placed last, in one pass (`place_entry`): a refusal
        // after the inode is taken is undone by the caller (a populate
        // rolls back whole, the path operations through `atomically`).
        let ft = self.file_type_of(mode);
        let (pg, _) = self.info.group_of_inode(parent).unwrap_or_default();
        let ino = self.alloc_inode(Some(pg), mode & S_IFMT == S_IFDIR)?;
        self.init_inode(ino, mode, links, flags, block)?;
        if mode & S_IFMT == S_IFDIR {
            let generation = self.inode(ino)?.generation;
            let seed = self.seed_of(ino, generation);
            let b = self.first_dir_block(ino, parent, seed)?;
            let mut root = *block;
            self.put_data_block(ino, &mut root, seed, b)?;
            self.add_links(parent, 1)?;
        }
        self.place_entry(parent, name, ino, ft)?;
        Ok(ino)
    }

    /// A new directory (`.` and `..`, the parent's links + 1) or empty
    /// regular file, by type and bits `mode`.
    pub(crate) fn pop_extents(
        &mut self,
        parent: u32,
        name: &[u8],
        mode: u16,
    ) -> Result<u32, Ext4Error> {
        let mut root = [0u8; ROOT_SIZE];
        extent::init_root(&mut root);
        let links = if mode & S_IFMT == S_IFDIR { 2 } else { 1 };
        self.pop_new(parent, name, mode, links, EXTENTS_FL, &root)
    }

    /// A new symlink: in `i_block` up to 59 bytes, else one data block.
    pub(crate) fn pop_symlink(
        &mut self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        perm: u16,
    ) -> Result<u32, Ext4Error> {
        let bs = self.info.block_size as usize;
        if target.is_empty() || target.len() >= bs.min(4096) || target.contains(&0) {
            return Err(invalid("target", target.len() as u64, symlink_limit(bs)));
        }
        let mode = S_IFLNK | (perm & 0o7777);
        let mut root = [0u8; ROOT_SIZE];
        if target.len() < ROOT_SIZE {
            root[..target.len()].copy_from_slice(target);
            let ino = self.pop_new(parent, name, mode, 1, 0, &root)?;
            self.write_file_fields(ino, target.len() as u64, 0, &root)?;
            return Ok(ino);
        }
        extent::init_root(&mut root);
        let ino = self.pop_new(parent, name, mode, 1, EXTENTS_FL, &root)?;
        let generation = self.inode(ino)?.generation;
        let seed = self.seed_of(ino, generation);
        let mut b = std::vec![0u8; bs];
        b[..target.len()].copy_from_slice(target);
        self.put_data_block(ino, &mut root, seed, b)?;
        let blocks = self.inode(ino)?.blocks;
        self.write_file_fields(ino, target.len() as u64, blocks, &root)?;
        Ok(ino)
    }

    /// A new device, FIFO or socket.
    pub(crate) fn pop_mknod(
        &mut self,
        parent: u32,
        name: &[u8],
        kind: NodeKind,
        perm: u16,
    ) -> Result<u32, Ext4Error> {
        let (ifmt, block) = node_block(kind)?;
        self.pop_new(parent, name, ifmt | (perm & 0o7777), 1, 0, &block)
    }

    /// Another name for `ino` (not a directory): its links + 1.
    pub(super) fn pop_link(&mut self, parent: u32, name: &[u8], ino: u32) -> Result<(), Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(invalid(
                "link",
                ino.into(),
                "hard links to directories are not allowed",
            ));
        }
        let ft = self.file_type_of(inode.mode);
        let place = self.plan_entry(parent, name, ft)?;
        self.add_links(ino, 1)?;
        self.put_entry(parent, name, ino, ft, place)
    }

    /// Writes `c` into new regular file `ino`; returns its size in bytes.
    pub(super) fn pop_contents(&mut self, ino: u32, c: Contents<'_>) -> Result<u64, Ext4Error> {
        match c {
            Contents::Bytes(b) => self.pop_bytes(ino, &b),
            Contents::Borrowed(b) => self.pop_bytes(ino, b),
            Contents::Host(f) => {
                let len = f.metadata().map_err(io_err("stat source file"))?.len();
                self.copy_in(ino, &f)?;
                Ok(len)
            }
            Contents::Reader { reader, size } => self.pop_pieces(ino, reader, &[(0, size)], size),
            Contents::Pieces {
                reader,
                pieces,
                size,
            } => self.pop_pieces(ino, reader, &pieces, size),
        }
    }

    /// Writes the `pieces` `(offset, length)` of new regular file `ino`,
    /// read back to back from `reader`, and makes it `size` bytes long;
    /// the rest is holes, and so are blocks of zeros in a piece. The list
    /// and the size are checked before a byte is read.
    fn pop_pieces(
        &mut self,
        ino: u32,
        reader: &mut dyn Read,
        pieces: &[(u64, u64)],
        size: u64,
    ) -> Result<u64, Ext4Error> {
        let mut end = 0u64;
        for &(off, len) in pieces {
            match off.checked_add(len) {
                Some(stop) if off >= end && stop <= size => end = stop,
                _ => {
                    return Err(invalid(
                        "pieces",
                        off,
                        "pieces in order, not overlapping, within the size",
                    ))
                }
            }
        }
        self.range_end(0, size)?;
        let longest = pieces.iter().map(|p| p.1).max().unwrap_or(0);
        let mut buf = std::vec![0u8; (longest.min(PIECE as u64)) as usize];
        for &(off, len) in pieces {
            let stop = off + len;
            let mut at = off;
            while at < stop {
                let n = (stop - at).min(PIECE as u64) as usize;
                read_exactly(reader, &mut buf[..n])?;
                // Blocks of zeros are skipped: a fresh file's unwritten
                // bytes read as zeros.
                self.write_nonzero(ino, at, &buf[..n])?;
                at += n as u64;
            }
        }
        self.grow_to(ino, size)?;
        Ok(size)
    }

    /// Writes `b` into new regular file `ino` (blocks of zeros left as
    /// holes, as `mke2fs -d` leaves them); returns its size in bytes.
    fn pop_bytes(&mut self, ino: u32, b: &[u8]) -> Result<u64, Ext4Error> {
        self.write_nonzero(ino, 0, b)?;
        self.grow_to(ino, b.len() as u64)?;
        Ok(b.len() as u64)
    }

    /// Makes file `ino` `size` bytes long when it is shorter (a trailing
    /// hole).
    fn grow_to(&mut self, ino: u32, size: u64) -> Result<(), Ext4Error> {
        if self.inode(ino)?.size < size {
            self.truncate(ino, size)?;
        }
        Ok(())
    }

    /// Sets inode `ino`'s permission bits, owner and times (crtime = ctime,
    /// with a large inode) to `meta`'s, in one change.
    pub(super) fn stamp(&mut self, ino: u32, meta: &Meta) -> Result<(), Ext4Error> {
        let raw = self.inode_raw(ino)?;
        let fields = meta_fields(&raw, meta)?;
        let changes: Vec<(usize, &[u8])> = fields.iter().map(|(o, b, n)| (*o, &b[..*n])).collect();
        self.write_inode_fields(ino, &changes)
    }

    /// A new regular file `name` in directory `parent` holding `data` (its
    /// blocks of zeros left as holes) with `meta`'s permission bits, owner
    /// and times: what [`Image::pop_extents`], [`Image::pop_contents`] and
    /// [`Image::stamp`] do, with the inode written once, whole (its
    /// extents, size, block count, owner and times), instead of patched
    /// four times.
    pub(crate) fn pop_file(
        &mut self,
        parent: u32,
        name: &[u8],
        data: &[u8],
        meta: &Meta,
    ) -> Result<u32, Ext4Error> {
        const S_IFREG: u16 = 0x8000;
        // As `pop_new`: the inode first, the entry last in one pass.
        let (ft, ino) = self.new_file_inode(parent)?;
        let mut root = [0u8; ROOT_SIZE];
        extent::init_root(&mut root);
        let mode = S_IFREG | (meta.perm & 0o7777);
        // The fresh inode first: its generation signs the extent tree. Its
        // times are `meta`'s (below), so the clock is not read.
        let t = meta.ctime.secs as u32;
        let mut raw = self.fresh_inode(ino, mode, 1, EXTENTS_FL, &root, t)?;
        let seed = self.seed_of(ino, layout::le32(&raw, off::GENERATION));
        let blocks = self.write_new(ino, &mut root, seed, data)?;
        raw[off::BLOCK..off::BLOCK + ROOT_SIZE].copy_from_slice(&root);
        let huge = self.check_blocks(data.len() as u64, blocks)?;
        let size = data.len() as u64;
        layout::put32(&mut raw, off::SIZE_LO, size as u32);
        layout::put32(&mut raw, off::SIZE_HIGH, (size >> 32) as u32);
        layout::put32(&mut raw, off::BLOCKS_LO, blocks as u32);
        if huge {
            layout::put16(&mut raw, off::BLOCKS_HIGH, (blocks >> 32) as u16);
        }
        for (at, b, n) in meta_fields(&raw, meta)? {
            raw[at..at + n].copy_from_slice(&b[..n]);
        }
        self.write_inode_fields(ino, &[(0, &raw)])?;
        self.note_large_file(size);
        self.place_entry(parent, name, ino, ft)?;
        Ok(ino)
    }
}

/// The inode fields `meta` sets in inode `raw`, as (offset, bytes,
/// length): permission bits (the type kept), owner, and the times
/// (crtime = ctime, where the inode has room for it).
fn meta_fields(raw: &[u8], meta: &Meta) -> Result<Vec<(usize, [u8; 4], usize)>, Ext4Error> {
    let extra = if raw.len() > 128 {
        128 + usize::from(le16(raw, off::EXTRA_ISIZE))
    } else {
        128
    };
    // A time the field cannot hold becomes the nearest it can, as the
    // kernel clamps timestamps (and tar extracting gets): 1901-12-13 to
    // 2446-05-10 with the `*_extra` field, to 2038-01-19 without.
    let clamp = |t: Timestamp, hi: usize| {
        let (lo_s, hi_s) = if hi + 4 <= extra {
            (EXTRA_TIME_MIN, EXTRA_TIME_MAX)
        } else {
            (i64::from(i32::MIN), i64::from(i32::MAX))
        };
        if (lo_s..=hi_s).contains(&t.secs) {
            t
        } else {
            Timestamp {
                secs: t.secs.clamp(lo_s, hi_s),
                nanos: 0,
            }
        }
    };
    let crtime = (off::CRTIME + 4 <= extra).then_some(meta.ctime);
    let fields = [
        (Some(meta.atime), off::ATIME, off::ATIME_EXTRA),
        (Some(meta.mtime), off::MTIME, off::MTIME_EXTRA),
        (Some(meta.ctime), off::CTIME, off::CTIME_EXTRA),
        (crtime, off::CRTIME, off::CRTIME_EXTRA),
    ]
    .map(|(t, lo, hi)| (t.map(|t| clamp(t, hi)), lo, hi));
    // Eight time fields at most and five of mode and owner.
    let mut out: Vec<(usize, [u8; 4], usize)> = Vec::with_capacity(13);
    out.extend(
        time_fields(extra, &fields)?
            .into_iter()
            .map(|(o, b)| (o, b, 4)),
    );
    let mode = (le16(raw, off::MODE) & S_IFMT) | (meta.perm & 0o7777);
    for (at, v) in [
        (off::MODE, mode),
        (off::UID, meta.uid as u16),
        (off::UID_HIGH, (meta.uid >> 16) as u16),
        (off::GID, meta.gid as u16),
        (off::GID_HIGH, (meta.gid >> 16) as u16),
    ] {
        let mut b = [0u8; 4];
        layout::put16(&mut b, 0, v);
        out.push((at, b, 2));
    }
    Ok(out)
}

/// Fills `buf` from `r`, or fails: a stream that ends early is an
/// [`Ext4Error::BadSource`].
fn read_exactly(r: &mut dyn Read, buf: &mut [u8]) -> Result<(), Ext4Error> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => {
                return Err(Ext4Error::BadSource {
                    entry: String::new(),
                    reason: "the contents end before the size said".into(),
                })
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("read source")(e)),
        }
    }
    Ok(())
}

/// Why a symlink target is refused on blocks of `bs` bytes: its length is
/// 1 up to the block size less one (the kernel's limit is 4095 whatever
/// the block size).
fn symlink_limit(bs: usize) -> &'static str {
    match bs {
        1024 => "a symlink target is 1 to 1023 bytes on this image's 1 KiB blocks (the block size less one), without NUL",
        2048 => "a symlink target is 1 to 2047 bytes on this image's 2 KiB blocks (the block size less one), without NUL",
        _ => "a symlink target is 1 to 4095 bytes, without NUL",
    }
}
