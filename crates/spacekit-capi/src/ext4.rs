//! ext4 images (feature `ext4`): open, verify, free space, and files.

use std::ffi::{c_char, CStr};
use std::path::Path;

use spacekit_core::ext4::{Ext4Error, Image, OpenMode};

use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{drop_box, guard, handle, handle_mut, need, put, put_box, slice_mut};

pub(crate) fn ext4_err(e: Ext4Error) -> spacekit_status {
    match e {
        Ext4Error::Io { .. } => SPACEKIT_ERROR_IO,
        Ext4Error::Corrupt { .. } => SPACEKIT_ERROR_CORRUPT,
        Ext4Error::Unsupported { .. } | Ext4Error::UnknownFeatures { .. } => {
            SPACEKIT_ERROR_UNSUPPORTED
        }
        Ext4Error::PendingRedoLog { .. } | Ext4Error::RedoLogMismatch { .. } => {
            SPACEKIT_ERROR_REDO_LOG
        }
        Ext4Error::ReadOnly => SPACEKIT_ERROR_READ_ONLY,
        Ext4Error::Busy { .. } => SPACEKIT_ERROR_BUSY,
        Ext4Error::BadChecksum { .. } => SPACEKIT_ERROR_BAD_CHECKSUM,
        Ext4Error::InvalidArgument { .. } => SPACEKIT_ERROR_INVALID_ARGUMENT,
        Ext4Error::NotAbsolute { .. } => SPACEKIT_ERROR_NOT_ABSOLUTE,
        Ext4Error::NotFound { .. } | Ext4Error::NoXattr { .. } => SPACEKIT_ERROR_NO_ENTRY,
        Ext4Error::NotADirectory { .. } => SPACEKIT_ERROR_NOT_A_DIRECTORY,
        Ext4Error::NameTooLong { .. } => SPACEKIT_ERROR_NAME_TOO_LONG,
        Ext4Error::NotARegularFile { .. } => SPACEKIT_ERROR_NOT_A_REGULAR_FILE,
        Ext4Error::Exists { .. } => SPACEKIT_ERROR_EXISTS,
        Ext4Error::FileTooBig { .. } => SPACEKIT_ERROR_FILE_TOO_BIG,
        Ext4Error::NoSpace { .. } | Ext4Error::XattrNoSpace { .. } => SPACEKIT_ERROR_NO_SPACE,
        Ext4Error::IsRoot | Ext4Error::DotName { .. } => SPACEKIT_ERROR_INVALID_ARGUMENT,
        // Short of inodes and not of blocks: NO_FREE_INODES, as a create
        // says; else NO_SPACE (the block count is about: extent and xattr
        // blocks are not in it, so a populate may run out below it).
        Ext4Error::PopulateNoSpace {
            blocks_needed,
            blocks_free,
            inodes_needed,
            inodes_free,
        } if inodes_needed > inodes_free && blocks_needed <= blocks_free => {
            SPACEKIT_ERROR_NO_FREE_INODES
        }
        Ext4Error::PopulateNoSpace { .. } => SPACEKIT_ERROR_NO_SPACE,
        Ext4Error::BadSource { .. } => SPACEKIT_ERROR_CORRUPT,
        Ext4Error::NoFreeInodes => SPACEKIT_ERROR_NO_FREE_INODES,
        Ext4Error::BlockAlreadyFree { .. } | Ext4Error::InodeAlreadyFree { .. } => {
            SPACEKIT_ERROR_ALREADY_FREE
        }
        Ext4Error::MetadataBlock { .. } => SPACEKIT_ERROR_METADATA_BLOCK,
        Ext4Error::Bitmap(e) => crate::bitmap::bitmap_err(e),
        Ext4Error::At { source, .. } => ext4_err(*source),
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// The host file system path of an image: on Unix any bytes, as the
/// kernel takes them (`open(2)` does not care for UTF-8); elsewhere UTF-8.
///
/// # Safety
/// `p` NULL or a NUL-terminated string valid for reads.
pub(crate) unsafe fn host_path<'a>(p: *const c_char) -> Result<&'a Path, spacekit_status> {
    if p.is_null() {
        return Err(SPACEKIT_ERROR_NULL_POINTER);
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let s = unsafe { CStr::from_ptr(p) };
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(Path::new(std::ffi::OsStr::from_bytes(s.to_bytes())))
    }
    #[cfg(not(unix))]
    {
        s.to_str()
            .map(Path::new)
            .map_err(|_| SPACEKIT_ERROR_INVALID_UTF8)
    }
}

/// A path inside an image (a NUL-terminated C string) as UTF-8, which the
/// library's path walk takes.
///
/// # Safety
/// `p` NULL or a NUL-terminated string valid for reads.
pub(crate) unsafe fn path<'a>(p: *const c_char) -> Result<&'a str, spacekit_status> {
    if p.is_null() {
        return Err(SPACEKIT_ERROR_NULL_POINTER);
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| SPACEKIT_ERROR_INVALID_UTF8)
}

/// An ext4 image file opened read-only or read-write. Changes stay in
/// memory until [`spacekit_ext4_flush`], which writes them crash-safely
/// through a redo log beside the image (`<image>.spacekit-redo`).
///
/// Ownership: made by [`spacekit_ext4_open`], released by
/// [`spacekit_ext4_close`] (which does not flush: unflushed changes are
/// dropped). Not thread-safe (even lookups fill caches): one thread at a
/// time.
pub struct spacekit_ext4 {
    pub(crate) img: Image,
}

/// Geometry and counts of an open image.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct spacekit_ext4_geometry {
    /// Block size in bytes (1024 to 65536).
    pub block_size: u32,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// Number of block groups.
    pub group_count: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_blocks_count`.
    pub blocks_count: u64,
    /// `s_free_blocks_count`, as it stands (changes not yet flushed
    /// included).
    pub free_blocks: u64,
    /// `s_inodes_count`.
    pub inodes_count: u32,
    /// `s_free_inodes_count`, as it stands.
    pub free_inodes: u32,
}

/// An inclusive range of blocks `[first, last]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_block_range {
    /// First block.
    pub first: u64,
    /// Last block (inclusive).
    pub last: u64,
}

/// One extent of a file: logical blocks `[logical, logical + len)` at
/// physical blocks `[physical, physical + len)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_extent {
    /// First physical block.
    pub physical: u64,
    /// First logical (file) block.
    pub logical: u32,
    /// Blocks mapped.
    pub len: u16,
    /// Allocated but not written (reads return zeros).
    pub unwritten: bool,
}

/// What [`spacekit_ext4_stat`] reports about an inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_inode_stat {
    /// `i_size` in bytes.
    pub size: u64,
    /// `i_blocks` in 512-byte units.
    pub blocks: u64,
    /// The inode number.
    pub ino: u32,
    /// `i_flags`.
    pub flags: u32,
    /// `i_mode` (type and permissions).
    pub mode: u16,
    /// `i_links_count`.
    pub links: u16,
    /// The extent tree's depth.
    pub depth: u16,
    /// Number of leaf extents (all of them, whatever the array's size).
    pub extent_count: usize,
}

/// Opens the ext4 image at `path` (read-write if `writable`), checking its
/// superblock and descriptor table (a read-write open first replays a
/// pending redo log); stores a new handle in `*out`. On Unix `path` is any
/// byte string, as `open(2)` takes it (UTF-8 or not). One writer at a
/// time: the open locks the file (a POSIX record lock, exclusive for
/// writing, shared for reading), so another process's open beside a writer
/// is `SPACEKIT_ERROR_BUSY`. In one process, two read-write handles on one
/// image must not be open together (each flush writes its own view of the
/// metadata), and closing one releases the process's lock.
///
/// Errors: `SPACEKIT_ERROR_INVALID_UTF8` (only where file names are not
/// byte strings: not on Unix); `SPACEKIT_ERROR_IO`;
/// `SPACEKIT_ERROR_CORRUPT`; `SPACEKIT_ERROR_UNSUPPORTED`;
/// `SPACEKIT_ERROR_BUSY` (another process has the image open, or a loop
/// device is attached to it, for a read-write open);
/// `SPACEKIT_ERROR_REDO_LOG` (a read-only open with a complete log
/// pending, or a log of another file system).
///
/// # Safety
/// `path` a NUL-terminated string; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_open(
    path: *const c_char,
    writable: bool,
    out: *mut *mut spacekit_ext4,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `path`.
        let p = unsafe { host_path(path) }?;
        let mode = if writable {
            OpenMode::ReadWrite
        } else {
            OpenMode::ReadOnly
        };
        let img = Image::open(p, mode).map_err(ext4_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put_box(out, spacekit_ext4 { img }) }
    })
}

/// Closes an image without flushing (unflushed changes are dropped; the
/// file on disk stays consistent); NULL is a no-op.
///
/// # Safety
/// `img` NULL or a handle from [`spacekit_ext4_open`] not closed before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_close(img: *mut spacekit_ext4) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(img) })
}

/// Geometry and free counts in `*out`.
///
/// # Safety
/// `img` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_info(
    img: *const spacekit_ext4,
    out: *mut spacekit_ext4_geometry,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on both pointers.
        let i = unsafe { handle(img) }?;
        let f = i.img.info();
        let v = spacekit_ext4_geometry {
            block_size: f.block_size,
            blocks_per_group: f.blocks_per_group,
            group_count: f.group_count,
            inodes_per_group: f.inodes_per_group,
            blocks_count: f.blocks_count,
            free_blocks: i.img.free_blocks_count(),
            inodes_count: f.inodes_count,
            free_inodes: i.img.free_inodes_count(),
        };
        // SAFETY: as above.
        unsafe { put(out, v) }
    })
}

/// Recomputes every checksum (superblock, descriptors, bitmaps) and free
/// count as e2fsprogs does; `*mismatches` gets the number that disagree
/// (0: consistent).
///
/// Errors: `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `mismatches` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_verify(
    img: *const spacekit_ext4,
    mismatches: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(mismatches)?;
        // SAFETY: the caller's contract on both pointers.
        let i = unsafe { handle(img) }?;
        let r = i.img.verify().map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put(mismatches, r.mismatches.len()) }
    })
}

/// The free blocks of group `group` as inclusive ranges, in order
/// (dumpe2fs's "Free blocks:"), into `out` (`cap` entries). `*count` gets
/// the number of ranges; if it is more than `cap`, the first `cap` are
/// written and `SPACEKIT_ERROR_BUFFER_TOO_SMALL` is returned.
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` past the last group;
/// `SPACEKIT_ERROR_IO`; `SPACEKIT_ERROR_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `img` a live handle; `out` valid for writes of `cap` entries (NULL only
/// when `cap` is 0); `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_free_extents(
    img: *const spacekit_ext4,
    group: u32,
    out: *mut spacekit_ext4_block_range,
    cap: usize,
    count: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(count)?;
        // SAFETY: the caller's contract on all pointers.
        let i = unsafe { handle(img) }?;
        // SAFETY: as above.
        let o = unsafe { slice_mut(out, cap) }?;
        let ext = i.img.free_extents(group).map_err(ext4_err)?;
        for (d, &(first, last)) in o.iter_mut().zip(&ext) {
            *d = spacekit_ext4_block_range { first, last };
        }
        // SAFETY: as above.
        unsafe { put(count, ext.len()) }?;
        if ext.len() > cap {
            return Err(SPACEKIT_ERROR_BUFFER_TOO_SMALL);
        }
        Ok(())
    })
}

/// The inode an absolute path names, in `*ino`.
///
/// Errors: `SPACEKIT_ERROR_INVALID_UTF8`, `SPACEKIT_ERROR_NOT_ABSOLUTE`,
/// `SPACEKIT_ERROR_NAME_TOO_LONG`, `SPACEKIT_ERROR_NO_ENTRY`,
/// `SPACEKIT_ERROR_NOT_A_DIRECTORY`, `SPACEKIT_ERROR_BAD_CHECKSUM`,
/// `SPACEKIT_ERROR_CORRUPT`, `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string; `ino` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_lookup(
    img: *mut spacekit_ext4,
    path: *const c_char,
    ino: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(ino)?;
        // SAFETY: the caller's contract on all pointers.
        let i = unsafe { handle_mut(img) }?;
        // SAFETY: as above.
        let p = unsafe { self::path(path) }?;
        let n = i.img.lookup(p).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put(ino, n) }
    })
}

/// Inode `ino`'s mode, size, block count, flags, links and extent tree
/// depth in `*out`, and its leaf extents in logical order into `extents`:
/// the first `min(cap, out->extent_count)` are written (`extents` may be
/// NULL when `cap` is 0).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` for an inode number outside
/// the file system; `SPACEKIT_ERROR_CORRUPT`, `SPACEKIT_ERROR_BAD_CHECKSUM`
/// for a bad extent tree; `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `out` valid for a write; `extents` valid for writes
/// of `cap` entries.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_stat(
    img: *mut spacekit_ext4,
    ino: u32,
    out: *mut spacekit_ext4_inode_stat,
    extents: *mut spacekit_ext4_extent,
    cap: usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on all pointers.
        let i = unsafe { handle_mut(img) }?;
        // SAFETY: as above.
        let o = unsafe { slice_mut(extents, cap) }?;
        let st = i.img.stat(ino).map_err(ext4_err)?;
        for (d, e) in o.iter_mut().zip(&st.extents) {
            *d = spacekit_ext4_extent {
                physical: e.physical,
                logical: e.logical,
                len: e.len,
                unwritten: e.unwritten,
            };
        }
        let v = spacekit_ext4_inode_stat {
            size: st.size,
            blocks: st.blocks,
            ino: st.ino,
            flags: st.flags,
            mode: st.mode,
            links: st.links,
            depth: st.depth,
            extent_count: st.extents.len(),
        };
        // SAFETY: as above.
        unsafe { put(out, v) }
    })
}

/// Creates an empty regular file at `path` with permission bits `mode`
/// (`0644`; a file type other than regular is refused) and stores its
/// inode in `*ino`.
///
/// Errors: as [`spacekit_ext4_lookup`] for the parent;
/// `SPACEKIT_ERROR_EXISTS`; `SPACEKIT_ERROR_INVALID_ARGUMENT` for a mode
/// with another type, for `/` and for a path that ends in `.` or `..`;
/// `SPACEKIT_ERROR_NOT_A_DIRECTORY` for a path that ends in `/` (it names
/// a directory); `SPACEKIT_ERROR_READ_ONLY`;
/// `SPACEKIT_ERROR_UNSUPPORTED` when the htree directory would need a
/// third index level, or the parent is casefolded or encrypted (or the
/// file system has dirdata); `SPACEKIT_ERROR_BAD_CHECKSUM` when the
/// superblock or a group descriptor (the image is then never written), a
/// bitmap or an inode the change needs fails its checksum;
/// `SPACEKIT_ERROR_NO_FREE_INODES`, `SPACEKIT_ERROR_NO_SPACE`. Nothing
/// changes on an error.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string; `ino` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_create(
    img: *mut spacekit_ext4,
    path: *const c_char,
    mode: u16,
    ino: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(ino)?;
        // SAFETY: the caller's contract on all pointers.
        let i = unsafe { handle_mut(img) }?;
        // SAFETY: as above.
        let p = unsafe { self::path(path) }?;
        let n = i.img.create(p, mode).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put(ino, n) }
    })
}

/// Allocates unwritten blocks for bytes `[offset, offset + len)` of
/// regular file `ino` (`fallocate(2)`, mode 0 or `FALLOC_FL_KEEP_SIZE`
/// with `keep_size`), from the goal ext4 uses; `*blocks` (may be NULL) gets
/// the data blocks allocated.
///
/// Errors: `SPACEKIT_ERROR_NOT_A_REGULAR_FILE`,
/// `SPACEKIT_ERROR_FILE_TOO_BIG`, `SPACEKIT_ERROR_INVALID_ARGUMENT` for
/// `len == 0`, `SPACEKIT_ERROR_NO_SPACE` (checked before any change),
/// `SPACEKIT_ERROR_READ_ONLY`.
///
/// # Safety
/// `img` a live handle; `blocks` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_fallocate(
    img: *mut spacekit_ext4,
    ino: u32,
    offset: u64,
    len: u64,
    keep_size: bool,
    blocks: *mut u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let i = unsafe { handle_mut(img) }?;
        let n = i
            .img
            .fallocate(ino, offset, len, keep_size)
            .map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { crate::ffi::put_opt(blocks, n) };
        Ok(())
    })
}

/// Sets regular file `ino`'s size to `size`, freeing every whole block
/// past the new end. The block that ends the file is zeroed past the end
/// (the new end when it shrinks, the old end when it grows), so cut bytes
/// never come back and grown bytes read as zeros.
///
/// Errors: `SPACEKIT_ERROR_NOT_A_REGULAR_FILE`,
/// `SPACEKIT_ERROR_FILE_TOO_BIG`, `SPACEKIT_ERROR_READ_ONLY`;
/// `SPACEKIT_ERROR_INVALID_ARGUMENT` for a reserved inode;
/// `SPACEKIT_ERROR_UNSUPPORTED` for an fs-verity file, inline data, or a
/// cut inside a block of an encrypted file; `SPACEKIT_ERROR_BAD_CHECKSUM`
/// as [`spacekit_ext4_create`]. Nothing changes on an error.
///
/// # Safety
/// `img` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_truncate(
    img: *mut spacekit_ext4,
    ino: u32,
    size: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `img`.
        let i = unsafe { handle_mut(img) }?;
        i.img.truncate(ino, size).map_err(ext4_err)
    })
}

/// Removes the entry at `path`: anything but a directory (a regular
/// file, a symlink, a device, FIFO or socket; see
/// [`spacekit_ext4_rmdir`]). On its last link its blocks, its
/// extended-attribute block (or its reference to a shared one) and its
/// inode are freed.
///
/// Errors: as [`spacekit_ext4_lookup`]; `SPACEKIT_ERROR_NOT_A_REGULAR_FILE`
/// for a directory; `SPACEKIT_ERROR_NOT_A_DIRECTORY` for a path that ends
/// in `/`; `SPACEKIT_ERROR_INVALID_ARGUMENT` for `/` or a path that ends
/// in `.` or `..`; `SPACEKIT_ERROR_READ_ONLY`; `SPACEKIT_ERROR_UNSUPPORTED`
/// in a casefolded or encrypted directory, or for a file whose
/// attribute values live in inodes of their own (`ea_inode`);
/// `SPACEKIT_ERROR_BAD_CHECKSUM` as [`spacekit_ext4_create`]. Nothing
/// changes on an error.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_unlink(
    img: *mut spacekit_ext4,
    path: *const c_char,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let i = unsafe { handle_mut(img) }?;
        // SAFETY: as above.
        let p = unsafe { self::path(path) }?;
        i.img.unlink(p).map_err(ext4_err)
    })
}

/// Sets how many bytes of changed metadata blocks the handle keeps before
/// it writes out early the ones the image as last flushed cannot see (new
/// directory, extent and xattr blocks in free space, inode-table blocks
/// past every group's used inodes); `SIZE_MAX` keeps every block until
/// the flush. The default is 512 KiB. What the image holds after the
/// flush (every block in use), and what a crash before it leaves, are the
/// same either way.
///
/// Errors: `SPACEKIT_ERROR_NULL_POINTER`.
///
/// # Safety
/// `img` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_set_cache_budget(
    img: *mut spacekit_ext4,
    bytes: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `img`.
        let i = unsafe { handle_mut(img) }?;
        i.img
            .set_cache_budget((bytes != usize::MAX).then_some(bytes));
        Ok(())
    })
}

/// Writes every changed metadata block crash-safely (redo log, fsync,
/// in place, fsync, log removed); does nothing if nothing changed. On an
/// error the changes stay in memory and a later flush retries them.
///
/// Errors: `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_flush(img: *mut spacekit_ext4) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `img`.
        let i = unsafe { handle_mut(img) }?;
        i.img.flush().map_err(ext4_err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A populate short of inodes alone says so, as a create does; short
    /// of blocks (alone or too), it says that.
    #[test]
    fn a_populate_short_of_inodes_alone_gives_no_free_inodes() {
        let short = |blocks_needed, inodes_needed| {
            ext4_err(Ext4Error::PopulateNoSpace {
                blocks_needed,
                blocks_free: 100,
                inodes_needed,
                inodes_free: 10,
            })
        };
        assert_eq!(short(50, 20), SPACEKIT_ERROR_NO_FREE_INODES);
        assert_eq!(short(150, 5), SPACEKIT_ERROR_NO_SPACE);
        assert_eq!(short(150, 20), SPACEKIT_ERROR_NO_SPACE);
        // Neither count short: blocks the estimate leaves out ran out.
        assert_eq!(short(98, 5), SPACEKIT_ERROR_NO_SPACE);
        // An attribute that fits nowhere is short of space, as its doc says.
        let e = Ext4Error::XattrNoSpace {
            name: "user.big".into(),
            len: 70_000,
        };
        assert_eq!(ext4_err(e), SPACEKIT_ERROR_NO_SPACE);
    }
}
