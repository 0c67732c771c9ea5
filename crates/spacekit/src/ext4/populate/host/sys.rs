//! The host system calls of a walk ([`super`]): directory listings with
//! `getdents64`, entries' status and descriptors, symlink targets, whole
//! small files, and extended attributes through a descriptor or a path.

use std::ffi::{CStr, CString};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec::Vec;

use crate::ext4::error::{host_io, Ext4Error};
use crate::ext4::namespace::Timestamp;
use crate::ext4::populate::Meta;

/// Appends the first `size` bytes of `f` (fewer if it ends sooner) to
/// `into`, read straight into its spare room (no zeroing), one `read` for
/// a file that has them all; returns where they are in `into`. On an error
/// `into` is as it was.
pub(super) fn read_whole(
    f: &fs::File,
    size: usize,
    into: &mut Vec<u8>,
) -> std::io::Result<core::ops::Range<usize>> {
    let start = into.len();
    into.reserve(size);
    let end = start + size;
    while into.len() < end {
        let want = end - into.len();
        let spare = &mut into.spare_capacity_mut()[..want];
        // SAFETY: `f` is an open file; the kernel writes at most
        // `spare.len()` bytes into the vector's spare room.
        let r = unsafe { libc::read(f.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            into.truncate(start);
            return Err(e);
        }
        if r == 0 {
            break;
        }
        // SAFETY: `read` initialised the `r` bytes after the length, all
        // within the capacity (`r <= spare.len()`).
        unsafe { into.set_len(into.len() + r as usize) };
    }
    Ok(start..into.len())
}

/// One name of a host directory, and its type as the directory listing
/// gives it (`DT_UNKNOWN` where the file system does not say).
pub(super) struct Name {
    pub(super) name: CString,
    pub(super) dtype: u8,
}

/// Bytes of directory records asked for per `getdents64`.
const DIRENTS: usize = 32 << 10;

/// The names of directory `fd` (`.` and `..` left out), in byte order.
/// Read with `getdents64` on `fd` itself (its offset, which nothing else
/// uses, moves to the end) into `buf`, which the caller keeps for the
/// next directory: a `DIR` stream would cost a duplicate descriptor and
/// four more system calls per directory.
pub(super) fn names_of(
    fd: &OwnedFd,
    dir: &Path,
    buf: &mut Vec<u8>,
) -> Result<Vec<Name>, Ext4Error> {
    let err = |e: std::io::Error| host_io("readdir", dir)(e);
    let bad = || {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "malformed directory record",
        ))
    };
    if buf.len() < DIRENTS {
        buf.resize(DIRENTS, 0);
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: `fd` is an open descriptor; the kernel writes at most
        // `buf.len()` bytes of records into `buf` and returns how many.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err(e));
        }
        if n == 0 {
            break;
        }
        // Records of `struct linux_dirent64`: inode (8 bytes), offset (8),
        // record length (2), type (1), then the NUL-terminated name, padded
        // to a multiple of 8 bytes (24 at least).
        let mut rec = &buf[..n as usize];
        while !rec.is_empty() {
            if rec.len() < 24 {
                return Err(bad());
            }
            let len = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
            if len < 24 || len > rec.len() {
                return Err(bad());
            }
            let name = CStr::from_bytes_until_nul(&rec[19..len]).map_err(|_| bad())?;
            if name.is_empty() {
                return Err(bad());
            }
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                out.push(Name {
                    name: CString::from(name),
                    dtype: rec[18],
                });
            }
            rec = &rec[len..];
        }
    }
    out.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(out)
}

/// The status of entry `name` of directory `dirfd`, not following a
/// symlink; a regular file or a directory (as the listing says) is opened
/// first and its descriptor returned too. `path` names it in errors.
pub(super) fn stat_entry(
    dirfd: &OwnedFd,
    name: &Name,
    path: &dyn Fn() -> PathBuf,
) -> Result<(libc::stat64, Option<OwnedFd>), Ext4Error> {
    let flags = match name.dtype {
        libc::DT_REG => libc::O_RDONLY | libc::O_NONBLOCK,
        libc::DT_DIR => libc::O_RDONLY | libc::O_DIRECTORY,
        _ => 0,
    };
    if flags != 0 {
        match open_at(dirfd, &name.name, flags) {
            Ok(fd) => {
                let st = fstat(&fd).map_err(|e| host_io("fstat", &path())(e))?;
                return Ok((st, Some(fd)));
            }
            // Replaced by a symlink, a socket or something else since the
            // listing, or a file under a lease that a non-blocking open
            // does not wait for: its status as it is now, below (a regular
            // file is then opened blocking, as `kind_of` does).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ENOTDIR | libc::ENXIO | libc::EWOULDBLOCK)
                ) => {}
            Err(e) => return Err(host_io("open", &path())(e)),
        }
    }
    let st = lstat_at(dirfd, &name.name).map_err(|e| host_io("lstat", &path())(e))?;
    // A listing without types: open what is to be walked.
    let opened = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Some(
            open_at(dirfd, &name.name, libc::O_RDONLY | libc::O_DIRECTORY)
                .map_err(|e| host_io("open", &path())(e))?,
        ),
        _ => None,
    };
    Ok((st, opened))
}

/// `openat(dirfd, name, flags)`, never following a symlink, close-on-exec.
pub(super) fn open_at(
    dirfd: &OwnedFd,
    name: &CStr,
    flags: libc::c_int,
) -> std::io::Result<OwnedFd> {
    // SAFETY: `dirfd` is an open descriptor and `name` NUL-terminated.
    let fd = unsafe {
        libc::openat(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `openat` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens host directory `dir` for a walk (a symlink to one is followed).
pub(super) fn open_dir(dir: &Path) -> Result<OwnedFd, Ext4Error> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| host_io("open", dir)(std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(host_io("open", dir)(std::io::Error::last_os_error()));
    }
    // SAFETY: `open` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat` of an open descriptor.
pub(super) fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat64> {
    let mut st = core::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `fd` is open; `st` is writable for one `stat64`.
    if unsafe { libc::fstat64(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fstat64` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(dirfd, name)` not following a symlink.
pub(super) fn lstat_at(dirfd: &OwnedFd, name: &CStr) -> std::io::Result<libc::stat64> {
    let mut st = core::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `dirfd` is open, `name` NUL-terminated, `st` writable for one
    // `stat64`.
    let r = unsafe {
        libc::fstatat64(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fstatat64` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The target of symlink `name` in directory `dirfd`.
pub(super) fn read_link_at(dirfd: &OwnedFd, name: &CStr) -> std::io::Result<Vec<u8>> {
    let mut buf = std::vec![0u8; 256];
    loop {
        // SAFETY: `dirfd` is open, `name` NUL-terminated, `buf` writable
        // for its length.
        let n = unsafe {
            libc::readlinkat(
                dirfd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if (n as usize) < buf.len() {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        // Perhaps cut short: again with more room.
        buf.resize(buf.len() * 4, 0);
    }
}

/// Permission bits, owner and times of status `st`, with `xattrs`.
pub(super) fn meta_of(st: &libc::stat64, xattrs: Vec<(String, Vec<u8>)>) -> Meta {
    let t = |secs: i64, nanos: i64| Timestamp {
        secs,
        nanos: nanos as u32,
    };
    Meta {
        perm: (st.st_mode & 0o7777) as u16,
        uid: st.st_uid,
        gid: st.st_gid,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        xattrs,
    }
}

/// Where extended attributes are read from: an open descriptor, or a path
/// (not following a symlink).
pub(super) enum Target {
    Fd(RawFd),
    Path(CString),
}

impl Target {
    /// The target for host path `p`.
    pub(super) fn path(p: &Path) -> Result<Target, Ext4Error> {
        CString::new(p.as_os_str().as_bytes())
            .map(Target::Path)
            .map_err(|_| host_io("llistxattr", p)(std::io::ErrorKind::InvalidInput.into()))
    }

    /// `flistxattr` or `llistxattr` into `buf`: the list's length, or -1.
    fn list(&self, buf: &mut [u8]) -> isize {
        match self {
            // SAFETY: `fd` is an open descriptor and `buf` is writable for
            // the length passed; the kernel writes at most that many bytes.
            Target::Fd(fd) => unsafe { libc::flistxattr(*fd, buf.as_mut_ptr().cast(), buf.len()) },
            // SAFETY: as above, for a NUL-terminated path.
            Target::Path(c) => unsafe {
                libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            },
        }
    }

    /// `fgetxattr` or `lgetxattr` of `name` into `buf`: the value's
    /// length, or -1.
    fn get(&self, name: &CStr, buf: &mut [u8]) -> isize {
        match self {
            // SAFETY: `fd` is open, `name` NUL-terminated and `buf`
            // writable for the length passed.
            Target::Fd(fd) => unsafe {
                libc::fgetxattr(*fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            },
            // SAFETY: as above, for a NUL-terminated path.
            Target::Path(c) => unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            },
        }
    }

    /// The names of the list and get calls, for errors.
    fn calls(&self) -> (&'static str, &'static str) {
        match self {
            Target::Fd(_) => ("flistxattr", "fgetxattr"),
            Target::Path(_) => ("llistxattr", "lgetxattr"),
        }
    }
}

/// The extended attributes of `target`, sorted by name; none where the
/// host file system has none. `path` names it in errors.
pub(super) fn xattrs_of(
    target: &Target,
    path: &dyn Fn() -> PathBuf,
) -> Result<Vec<(String, Vec<u8>)>, Ext4Error> {
    let (list_call, get_call) = target.calls();
    // Most files have none: a small list on the stack first.
    let mut small = [0u8; 256];
    let mut big = Vec::new();
    let mut n = target.list(&mut small);
    while n < 0 {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => {
                big.resize((big.len() * 4).max(4096), 0);
                n = target.list(&mut big);
            }
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(host_io(list_call, &path())(e)),
        }
    }
    let names = if big.is_empty() { &small[..] } else { &big[..] };
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let Ok(key) = std::str::from_utf8(name) else {
            continue;
        };
        let cname = CString::new(name).unwrap_or_default();
        let mut val = std::vec![0u8; 256];
        let len = loop {
            let r = target.get(&cname, &mut val);
            if r >= 0 {
                break Some(r as usize);
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => val.resize(val.len() * 4, 0),
                // Gone since the listing, or not readable: skipped.
                Some(libc::ENODATA) => break None,
                _ => return Err(host_io(get_call, &path())(e)),
            }
        };
        if let Some(len) = len {
            val.truncate(len);
            out.push((key.to_string(), val));
        }
    }
    out.sort();
    Ok(out)
}
