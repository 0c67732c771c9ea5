//! Compares two host trees entry by entry, as a user checks an image
//! against its source: type, permission bits (setuid, setgid, sticky),
//! owner, link count, size and contents, mtime, symlink target, device
//! number and extended attributes (POSIX ACLs included). Used on a
//! kernel mount of an image (`mount -o loop,ro`) or a `debugfs rdump`
//! against the source tree it was built from.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What to compare.
#[derive(Clone, Copy, Debug)]
pub struct Compare {
    /// Compare mtimes to the nanosecond (else whole seconds: `mke2fs -d`
    /// keeps seconds).
    pub nanos: bool,
    /// Compare owners.
    pub owners: bool,
    /// Compare extended attributes.
    pub xattrs: bool,
    /// Compare the top directories' own attributes too.
    pub top: bool,
    /// Compare device numbers, setuid/setgid bits and special files
    /// (`debugfs rdump` drops setuid bits and device nodes).
    pub special: bool,
}

impl Default for Compare {
    fn default() -> Self {
        Compare {
            nanos: true,
            owners: true,
            xattrs: true,
            top: true,
            special: true,
        }
    }
}

/// One entry's comparable facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// `st_mode` (type and bits).
    pub mode: u32,
    /// Owner and group.
    pub owner: (u32, u32),
    /// Link count (not for directories, whose counts depend on
    /// `lost+found`).
    pub nlink: u64,
    /// mtime: seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Size (regular files).
    pub size: u64,
    /// FNV-1a of the contents (regular files) or the target (symlinks).
    pub hash: u64,
    /// Device number (devices).
    pub rdev: u64,
    /// Extended attributes, sorted.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Every entry under `root` (relative paths; `""` for the top), without
/// `lost+found` at the top.
///
/// # Errors
/// The first host error.
pub fn snapshot(root: &Path, c: Compare) -> std::io::Result<BTreeMap<PathBuf, Node>> {
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), c, &mut out)?;
    Ok(out)
}

fn walk(
    root: &Path,
    rel: &Path,
    c: Compare,
    out: &mut BTreeMap<PathBuf, Node>,
) -> std::io::Result<()> {
    let p = root.join(rel);
    let st = fs::symlink_metadata(&p)?;
    out.insert(rel.to_path_buf(), node(&p, &st, c)?);
    if st.is_dir() {
        for e in fs::read_dir(&p)? {
            let name = e?.file_name();
            if rel.as_os_str().is_empty() && name == "lost+found" {
                continue;
            }
            walk(root, &rel.join(name), c, out)?;
        }
    }
    Ok(())
}

fn node(p: &Path, st: &fs::Metadata, c: Compare) -> std::io::Result<Node> {
    let ft = st.file_type();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut feed = |b: &[u8]| {
        for &x in b {
            hash = (hash ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    };
    if ft.is_file() {
        let mut f = fs::File::open(p)?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            feed(&buf[..n]);
        }
    } else if ft.is_symlink() {
        feed(fs::read_link(p)?.as_os_str().as_bytes());
    }
    let dev = ft.is_char_device() || ft.is_block_device();
    let mut mode = st.mode();
    if !c.special {
        mode &= !0o6000;
    }
    Ok(Node {
        mode,
        owner: if c.owners {
            (st.uid(), st.gid())
        } else {
            (0, 0)
        },
        nlink: if ft.is_dir() { 0 } else { st.nlink() },
        mtime: (st.mtime(), if c.nanos { st.mtime_nsec() } else { 0 }),
        size: if ft.is_file() { st.len() } else { 0 },
        hash,
        rdev: if dev && c.special { st.rdev() } else { 0 },
        xattrs: if c.xattrs { xattrs(p)? } else { Vec::new() },
    })
}

/// The extended attributes of `p` (not following a symlink), sorted.
///
/// # Errors
/// A host error other than "not supported".
pub fn xattrs(p: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let cp = CString::new(p.as_os_str().as_bytes())?;
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: `cp` is NUL-terminated; `names` is writable for its length.
    let n = unsafe { libc::llistxattr(cp.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOTSUP) {
            Ok(Vec::new())
        } else {
            Err(e)
        };
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let cn = CString::new(name)?;
        let mut val = vec![0u8; 64 << 10];
        // SAFETY: both strings are NUL-terminated; `val` is writable for
        // its length.
        let r = unsafe {
            libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len())
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        val.truncate(r as usize);
        out.push((name.to_vec(), val));
    }
    out.sort();
    Ok(out)
}

/// The differences between trees `a` and `b`, one line each (empty when
/// they read the same).
///
/// # Errors
/// The first host error.
pub fn diff(a: &Path, b: &Path, c: Compare) -> std::io::Result<Vec<String>> {
    let (sa, sb) = (snapshot(a, c)?, snapshot(b, c)?);
    let mut out = Vec::new();
    for k in sa.keys().chain(sb.keys().filter(|k| !sa.contains_key(*k))) {
        if k.as_os_str().is_empty() && !c.top {
            continue;
        }
        match (sa.get(k), sb.get(k)) {
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) => out.push(format!("{}: {x:?} vs {y:?}", k.display())),
            (Some(_), None) => out.push(format!("{}: only in {}", k.display(), a.display())),
            (None, _) => out.push(format!("{}: only in {}", k.display(), b.display())),
        }
    }
    Ok(out)
}
