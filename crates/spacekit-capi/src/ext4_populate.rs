//! Building a tree into an image (feature `ext4`): the library's
//! `ext4::Populate` from a host directory or a tar archive, as one
//! transaction with one flush.

use std::ffi::c_char;

use spacekit_core::ext4::{Populate, PopulateOptions, PopulateReport};

use crate::ext4::{ext4_err, host_path, path, spacekit_ext4};
use crate::ffi::spacekit_status;
use crate::ffi::{guard, handle_mut, put_opt};

/// How a populate rewrites what the source says (see
/// `spacekit_ext4_populate_dir`). All zeros: owners and times as the
/// source has them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_populate_options {
    /// Every inode owned by `uid`:`gid` instead of the source's owners
    /// (`uid` = `gid` = 0 builds a root-owned image without root).
    pub set_owner: bool,
    /// The owner when `set_owner`.
    pub uid: u32,
    /// The group when `set_owner`.
    pub gid: u32,
    /// Clamp times at `clamp` (`SOURCE_DATE_EPOCH`, for a reproducible
    /// image): mtimes after it become it; atime, ctime and crtime equal the
    /// clamped mtime.
    pub set_clamp: bool,
    /// Seconds since the epoch, when `set_clamp`.
    pub clamp: i64,
}

/// What a populate made.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_ext4_populate_report {
    /// Regular files created.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symbolic links created.
    pub symlinks: u64,
    /// Devices, FIFOs and sockets created.
    pub nodes: u64,
    /// Names added as hard links.
    pub hard_links: u64,
    /// Extended attributes (ACLs included) set.
    pub xattrs: u64,
    /// Bytes of file contents (holes included).
    pub bytes: u64,
    /// Entries that replaced an earlier entry of the same path in the same
    /// populate (a tar member appended again: the later one wins, as tar
    /// extracts); each is counted above too.
    pub replaced: u64,
}

impl From<PopulateReport> for spacekit_ext4_populate_report {
    fn from(r: PopulateReport) -> Self {
        spacekit_ext4_populate_report {
            files: r.files,
            dirs: r.dirs,
            symlinks: r.symlinks,
            nodes: r.nodes,
            hard_links: r.hard_links,
            xattrs: r.xattrs,
            bytes: r.bytes,
            replaced: r.replaced,
        }
    }
}

/// Where a populate's entries come from.
enum Source<'a> {
    Dir(&'a std::path::Path),
    Tar(&'a std::path::Path),
}

/// Runs one populate of `src` under `at` and flushes it.
///
/// # Safety
/// `img` a live handle; `at` a NUL-terminated string; `opts` NULL or valid
/// for a read; `report` NULL or valid for a write.
unsafe fn populate(
    img: *mut spacekit_ext4,
    at: *const c_char,
    src: Source<'_>,
    opts: *const spacekit_ext4_populate_options,
    report: *mut spacekit_ext4_populate_report,
) -> Result<(), spacekit_status> {
    // SAFETY: the caller's contract on the pointers.
    let (i, at) = unsafe { (handle_mut(img)?, path(at)?) };
    // SAFETY: NULL or valid for a read (the caller's contract).
    let o = unsafe { opts.as_ref() }.copied().unwrap_or_default();
    let opts = PopulateOptions {
        owner: o.set_owner.then_some((o.uid, o.gid)),
        clamp: o.set_clamp.then_some(o.clamp),
    };
    let mut pop = Populate::new(&mut i.img, at, opts).map_err(ext4_err)?;
    match src {
        Source::Dir(d) => pop.add_dir(d),
        Source::Tar(t) => std::fs::File::open(t)
            .map_err(|source| spacekit_core::ext4::Ext4Error::Io {
                context: format!("open {}", t.display()).into(),
                source,
            })
            .and_then(|f| pop.add_tar(std::io::BufReader::new(f))),
    }
    .map_err(ext4_err)?;
    let r = pop.finish().map_err(ext4_err)?;
    // SAFETY: NULL or valid for a write (the caller's contract).
    unsafe { put_opt(report, r.into()) };
    Ok(())
}

/// Builds everything under host directory `dir` into directory `at` of the
/// image (`"/"` for the root; it must exist), as `mke2fs -d` does: every
/// kind of inode (regular files sparse, directories, symlinks, devices,
/// FIFOs, sockets), permission bits with setuid/setgid/sticky, owners,
/// times to the nanosecond, hard links (one inode) and extended attributes
/// with ACLs. `dir`'s own mode, owner, times and xattrs go to `at`. Names
/// go in byte order, so the same tree gives the same image. `opts` (may be
/// NULL) rewrites owners and clamps times. One transaction: the image is
/// flushed once at the end, and on any error nothing is added (changes
/// not yet flushed before the call stay pending). `*report` (may be NULL)
/// gets the counts. On Unix `dir` is any byte string.
///
/// Errors: as `spacekit_ext4_lookup` for `at`; `SPACEKIT_ERROR_EXISTS` for
/// a name already in the image (a directory onto a directory merges);
/// `SPACEKIT_ERROR_NO_SPACE` / `SPACEKIT_ERROR_NO_FREE_INODES` when the
/// image is too small; `SPACEKIT_ERROR_IO` from the host;
/// `SPACEKIT_ERROR_UNSUPPORTED` for a directory spacekit does not write
/// (casefolded, encrypted); `SPACEKIT_ERROR_READ_ONLY`.
///
/// # Safety
/// `img` a live handle; `at` and `dir` NUL-terminated strings; `opts` NULL
/// or valid for a read; `report` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_populate_dir(
    img: *mut spacekit_ext4,
    at: *const c_char,
    dir: *const c_char,
    opts: *const spacekit_ext4_populate_options,
    report: *mut spacekit_ext4_populate_report,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        unsafe { populate(img, at, Source::Dir(host_path(dir)?), opts, report) }
    })
}

/// As `spacekit_ext4_populate_dir`, from the tar archive at host path
/// `tar` (plain, gzip or zstd; GNU and PAX headers, long names, hard
/// links, symlinks, devices, FIFOs, sparse entries, PAX xattrs and ACLs).
///
/// Errors: as `spacekit_ext4_populate_dir`; `SPACEKIT_ERROR_CORRUPT` for a
/// damaged or truncated archive or an entry that cannot be made (a `..`
/// in a name).
///
/// # Safety
/// As `spacekit_ext4_populate_dir`, `tar` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn spacekit_ext4_populate_tar(
    img: *mut spacekit_ext4,
    at: *const c_char,
    tar: *const c_char,
    opts: *const spacekit_ext4_populate_options,
    report: *mut spacekit_ext4_populate_report,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on the pointers.
        unsafe { populate(img, at, Source::Tar(host_path(tar)?), opts, report) }
    })
}
