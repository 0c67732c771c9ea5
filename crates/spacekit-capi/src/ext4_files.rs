//! ext4 file contents, every kind of inode and extended attributes
//! (feature `ext4`): the library's `Image::write`, `read`, `mkdir`,
//! `rmdir`, `symlink`, `read_link`, `link`, `rename`, `mknod`, `chmod`,
//! `chown` and the xattr calls. Each change stays in memory until
//! `spacekit_ext4_flush`; on an error nothing changes. And a tree copied
//! out to the host (`Image::export_tree`, debugfs's `rdump`).

use std::ffi::c_char;

use spacekit_core::ext4::{ExportOptions, NodeKind};

use crate::ext4::{ext4_err, host_path, path, spacekit_ext4};
use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{guard, handle, handle_mut, need, put, put_opt, slice, slice_mut};

/// Writes `len` bytes at byte `offset` of regular file `ino`, as
/// `pwrite(2)`: the file grows past its end, holes stay holes, a write into
/// an unwritten extent initialises the part written.
///
/// Errors: `SPACEKIT_ERROR_NOT_A_REGULAR_FILE`,
/// `SPACEKIT_ERROR_FILE_TOO_BIG`, `SPACEKIT_ERROR_NO_SPACE` (checked first),
/// `SPACEKIT_ERROR_UNSUPPORTED` (inline-data, encrypted, fs-verity files),
/// `SPACEKIT_ERROR_READ_ONLY`, `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `data` valid for reads of `len` bytes (NULL only
/// with `len == 0`).
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_write(
    img: *mut spacekit_ext4,
    ino: u32,
    offset: u64,
    data: *const u8,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let (i, d) = unsafe { (handle_mut(img)?, slice(data, len)?) };
        i.img.write(ino, offset, d).map_err(ext4_err)
    })
}

/// Reads up to `len` bytes at byte `offset` of regular file `ino` into
/// `buf`, as `pread(2)`; `*read` gets the count (0 at or past the end).
/// Holes and unwritten extents read as zeros.
///
/// Errors: `SPACEKIT_ERROR_NOT_A_REGULAR_FILE`, `SPACEKIT_ERROR_UNSUPPORTED`,
/// `SPACEKIT_ERROR_CORRUPT`, `SPACEKIT_ERROR_BAD_CHECKSUM`,
/// `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `buf` valid for writes of `len` bytes; `read`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_read(
    img: *const spacekit_ext4,
    ino: u32,
    offset: u64,
    buf: *mut u8,
    len: usize,
    read: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(read)?;
        // SAFETY: the caller's contract on the pointers.
        let (i, b) = unsafe { (handle(img)?, slice_mut(buf, len)?) };
        let n = i.img.read(ino, offset, b).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put(read, n) }
    })
}

/// Makes directory `path` with permission bits `mode`; `*ino` (may be
/// NULL) gets its inode.
///
/// Errors: as `spacekit_ext4_create`.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string; `ino` NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_mkdir(
    img: *mut spacekit_ext4,
    path: *const c_char,
    mode: u16,
    ino: *mut u32,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, p) = unsafe { (handle_mut(img)?, self::path(path)?) };
        let n = i.img.mkdir(p, mode).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put_opt(ino, n) };
        Ok(())
    })
}

/// Removes the empty directory `path`.
///
/// Errors: `SPACEKIT_ERROR_NOT_A_DIRECTORY`; `SPACEKIT_ERROR_INVALID_ARGUMENT`
/// when it is not empty; as `spacekit_ext4_unlink`.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_rmdir(
    img: *mut spacekit_ext4,
    path: *const c_char,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, p) = unsafe { (handle_mut(img)?, self::path(path)?) };
        i.img.rmdir(p).map_err(ext4_err)
    })
}

/// Makes symlink `path` to `target` (a NUL-terminated string of 1 byte up
/// to a block less one); `*ino` (may be NULL) gets its inode.
///
/// Errors: as `spacekit_ext4_create`; `SPACEKIT_ERROR_INVALID_ARGUMENT` for
/// an empty or too long target.
///
/// # Safety
/// `img` a live handle; `path` and `target` NUL-terminated strings; `ino`
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_symlink(
    img: *mut spacekit_ext4,
    path: *const c_char,
    target: *const c_char,
    ino: *mut u32,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, p, t) = unsafe { (handle_mut(img)?, self::path(path)?, self::path(target)?) };
        let n = i.img.symlink(p, t.as_bytes()).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put_opt(ino, n) };
        Ok(())
    })
}

/// Copies the target of symlink `ino` into `buf` (not NUL-terminated);
/// `*len` gets its full length (which may exceed `cap`: call again with a
/// larger buffer).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` for an inode that is not a
/// symlink; `SPACEKIT_ERROR_IO`.
///
/// # Safety
/// `img` a live handle; `buf` valid for writes of `cap` bytes; `len` valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_read_link(
    img: *const spacekit_ext4,
    ino: u32,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(len)?;
        // SAFETY: the caller's contract on the pointers.
        let (i, b) = unsafe { (handle(img)?, slice_mut(buf, cap)?) };
        let t = i.img.read_link(ino).map_err(ext4_err)?;
        // SAFETY: `len` checked non-null, valid by the caller's contract.
        unsafe { copy_out(&t, b, len) }
    })
}

/// Adds the name `new_path` for the (non-directory) inode at `existing`.
///
/// Errors: as `spacekit_ext4_lookup` and `spacekit_ext4_create`;
/// `SPACEKIT_ERROR_INVALID_ARGUMENT` for a directory.
///
/// # Safety
/// `img` a live handle; both paths NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_link(
    img: *mut spacekit_ext4,
    existing: *const c_char,
    new_path: *const c_char,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, a, b) = unsafe { (handle_mut(img)?, path(existing)?, path(new_path)?) };
        i.img.link(a, b).map_err(ext4_err)
    })
}

/// Renames `from` to `to` with `rename(2)`'s rules.
///
/// Errors: as `spacekit_ext4_lookup`; `SPACEKIT_ERROR_NOT_A_DIRECTORY`;
/// `SPACEKIT_ERROR_INVALID_ARGUMENT` (a file over a directory, a directory
/// under itself or over one that is not empty).
///
/// # Safety
/// `img` a live handle; both paths NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_rename(
    img: *mut spacekit_ext4,
    from: *const c_char,
    to: *const c_char,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, a, b) = unsafe { (handle_mut(img)?, path(from)?, path(to)?) };
        i.img.rename(a, b).map_err(ext4_err)
    })
}

/// Makes a special file at `path`: `kind` `'c'` or `'b'` (a device
/// `major:minor`), `'p'` (FIFO) or `'s'` (socket); `*ino` (may be NULL)
/// gets its inode.
///
/// Errors: as `spacekit_ext4_create`; `SPACEKIT_ERROR_INVALID_ARGUMENT` for
/// another kind or a device number out of range.
///
/// # Safety
/// `img` a live handle; `path` a NUL-terminated string; `ino` NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_mknod(
    img: *mut spacekit_ext4,
    path: *const c_char,
    kind: c_char,
    major: u32,
    minor: u32,
    mode: u16,
    ino: *mut u32,
) -> spacekit_status {
    guard(|| {
        let kind = match kind as u8 {
            b'c' => NodeKind::Char { major, minor },
            b'b' => NodeKind::Block { major, minor },
            b'p' => NodeKind::Fifo,
            b's' => NodeKind::Socket,
            _ => return Err(SPACEKIT_ERROR_INVALID_ARGUMENT),
        };
        // SAFETY: the caller's contract on the pointers.
        let (i, p) = unsafe { (handle_mut(img)?, self::path(path)?) };
        let n = i.img.mknod(p, kind, mode).map_err(ext4_err)?;
        // SAFETY: as above.
        unsafe { put_opt(ino, n) };
        Ok(())
    })
}

/// Sets inode `ino`'s permission bits (`mode & 07777`).
///
/// # Safety
/// `img` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_chmod(
    img: *mut spacekit_ext4,
    ino: u32,
    mode: u16,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `img`.
        let i = unsafe { handle_mut(img) }?;
        i.img.chmod(ino, mode).map_err(ext4_err)
    })
}

/// Sets inode `ino`'s owner and group (32-bit ids).
///
/// # Safety
/// `img` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_chown(
    img: *mut spacekit_ext4,
    ino: u32,
    uid: u32,
    gid: u32,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `img`.
        let i = unsafe { handle_mut(img) }?;
        i.img.chown(ino, uid, gid).map_err(ext4_err)
    })
}

/// Sets extended attribute `name` (`user.…`, `security.…`, …) of inode
/// `ino` to `len` bytes at `value` (POSIX ACLs in `getxattr(2)`'s format;
/// as the kernel sets one, an access ACL sets the mode's permission bits,
/// and one of the three base entries alone is not kept).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` (a bad name or ACL),
/// `SPACEKIT_ERROR_NAME_TOO_LONG`, `SPACEKIT_ERROR_NO_SPACE`,
/// `SPACEKIT_ERROR_UNSUPPORTED`, `SPACEKIT_ERROR_READ_ONLY`.
///
/// # Safety
/// `img` a live handle; `name` a NUL-terminated string; `value` valid for
/// reads of `len` bytes (NULL only with `len == 0`).
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_set_xattr(
    img: *mut spacekit_ext4,
    ino: u32,
    name: *const c_char,
    value: *const u8,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, n, v) = unsafe { (handle_mut(img)?, path(name)?, slice(value, len)?) };
        i.img.set_xattr(ino, n, v).map_err(ext4_err)
    })
}

/// Copies extended attribute `name` of inode `ino` into `buf`; `*len` gets
/// its full length (which may exceed `cap`).
///
/// Errors: `SPACEKIT_ERROR_NO_ENTRY` when the inode has no such attribute;
/// `SPACEKIT_ERROR_INVALID_ARGUMENT` for a bad name.
///
/// # Safety
/// `img` a live handle; `name` a NUL-terminated string; `buf` valid for
/// writes of `cap` bytes; `len` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_get_xattr(
    img: *const spacekit_ext4,
    ino: u32,
    name: *const c_char,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(len)?;
        // SAFETY: the caller's contract on the pointers.
        let (i, n, b) = unsafe { (handle(img)?, path(name)?, slice_mut(buf, cap)?) };
        let v = i.img.get_xattr(ino, n).map_err(ext4_err)?;
        let v = v.ok_or(SPACEKIT_ERROR_NO_ENTRY)?;
        // SAFETY: `len` checked non-null, valid by the caller's contract.
        unsafe { copy_out(&v, b, len) }
    })
}

/// Removes extended attribute `name` of inode `ino`.
///
/// Errors: `SPACEKIT_ERROR_NO_ENTRY` when the inode has no such attribute.
///
/// # Safety
/// `img` a live handle; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_remove_xattr(
    img: *mut spacekit_ext4,
    ino: u32,
    name: *const c_char,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, n) = unsafe { (handle_mut(img)?, path(name)?) };
        i.img.remove_xattr(ino, n).map_err(ext4_err)
    })
}

/// What [`spacekit_ext4_export_tree`] made.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_export_report {
    /// Directories made.
    pub dirs: u64,
    /// Regular files written.
    pub files: u64,
    /// Bytes of the regular files (their sizes, holes included).
    pub bytes: u64,
    /// Symlinks made.
    pub symlinks: u64,
    /// Character and block devices made.
    pub devices: u64,
    /// FIFOs made.
    pub fifos: u64,
    /// Sockets made.
    pub sockets: u64,
    /// Names made as hard links to an inode's first copy.
    pub hard_links: u64,
    /// Extended attributes (ACLs included) set.
    pub xattrs: u64,
    /// What the host refused and was left out (device nodes, owners,
    /// attributes); always 0 with `strict`.
    pub skipped: u64,
    /// Whether owners were set (the process runs as root).
    pub owners_set: bool,
}

/// Copies `path` and everything under it into the existing host directory
/// `dest`, as debugfs's `rdump`: `dest/<name of path>`, or for `"/"` the
/// root's entries into `dest` itself. Every kind of inode is made (regular
/// files sparse, directories, symlinks, devices, FIFOs, sockets) with its
/// mode, owner (as root), atime and mtime to the nanosecond and (with
/// `xattrs`) extended attributes and ACLs; a file with several names is
/// copied once and linked. An existing host entry is never replaced. What
/// the host refuses for lack of privilege or support (a device node as a
/// user, a `trusted.` attribute) is left out and counted in
/// `report->skipped`, or with `strict` fails. `*report` (may be NULL) gets
/// the counts. The image is only read. On Unix `dest` is any byte string.
///
/// Errors: as `spacekit_ext4_lookup` for `path`; `SPACEKIT_ERROR_EXISTS`
/// for a host entry that exists; `SPACEKIT_ERROR_IO` from the host (`dest`
/// missing or not a directory, a full disk, and with `strict` what it
/// refuses); `SPACEKIT_ERROR_CORRUPT` for a damaged name or a directory
/// loop. Entries made before an error stay.
///
/// # Safety
/// `img` a live handle; `path` and `dest` NUL-terminated strings; `report`
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_export_tree(
    img: *mut spacekit_ext4,
    path: *const c_char,
    dest: *const c_char,
    strict: bool,
    xattrs: bool,
    report: *mut spacekit_ext4_export_report,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        let (i, p, d) = unsafe { (handle_mut(img)?, self::path(path)?, host_path(dest)?) };
        let opts = ExportOptions { strict, xattrs };
        let r = i.img.export_tree(p, d, opts).map_err(ext4_err)?;
        let out = spacekit_ext4_export_report {
            dirs: r.dirs,
            files: r.files,
            bytes: r.bytes,
            symlinks: r.symlinks,
            devices: r.devices,
            fifos: r.fifos,
            sockets: r.sockets,
            hard_links: r.hard_links,
            xattrs: r.xattrs,
            skipped: r.skipped.len() as u64,
            owners_set: r.owners_set,
        };
        // SAFETY: as above.
        unsafe { put_opt(report, out) };
        Ok(())
    })
}

/// Copies what fits of `v` into `b` and its full length to `*len`.
///
/// # Safety
/// `len` valid for a write.
unsafe fn copy_out(v: &[u8], b: &mut [u8], len: *mut usize) -> Result<(), spacekit_status> {
    let k = v.len().min(b.len());
    b[..k].copy_from_slice(&v[..k]);
    // SAFETY: the caller's contract.
    unsafe { put(len, v.len()) }
}
