//! [`generate`]: a host directory tree made at test time from a seed, with
//! every kind of entry a populate must carry into an image: directories
//! (deep, wide, setgid, sticky), regular files (empty, small, larger than
//! the populate's in-memory limit, sparse with holes at the start, middle
//! and end, zeros written out), fast and long symlinks, hard links across
//! directories (of files and of a symlink), character and block devices,
//! FIFOs and a socket, setuid/setgid/sticky bits, varied owners,
//! nanosecond times (one past 2038, one before 1970), `user.*` xattrs (in
//! the inode and large enough for an xattr block), `security.*` and
//! `trusted.*` xattrs, POSIX ACLs (through `setfacl`), 255-byte and UTF-8
//! names.
//!
//! The same [`Spec`] gives the same tree (names, contents, modes, owners,
//! mtimes, xattrs) whatever the order of creation: [`Spec::reverse`]
//! creates the entries the other way round, so the host gives them other
//! inode numbers and (in a linear directory) another `readdir` order.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::rng::Rng;

/// What to generate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The seed of names, sizes, contents and times.
    pub seed: u64,
    /// Devices, owners other than the caller's, `security.*` and
    /// `trusted.*` xattrs (they need root).
    pub root: bool,
    /// POSIX ACLs (with `setfacl`, skipped when it is missing).
    pub acls: bool,
    /// Regular files of random sizes (up to 64 KiB) spread over the
    /// directories.
    pub files: usize,
    /// Entries of the one wide directory `wide/` (0: none).
    pub wide: usize,
    /// Levels of `deep/l01/l02/...` (0: none).
    pub depth: usize,
    /// Files larger than 1 MiB (dense and sparse).
    pub big_files: bool,
    /// Create the entries in reverse order.
    pub reverse: bool,
    /// Whole-second mtimes (what `mke2fs -d` 1.47.0 keeps).
    pub whole_seconds: bool,
}

impl Spec {
    /// Every kind, with `files` files, no wide or deep directory, no big
    /// files.
    pub fn small(seed: u64, files: usize) -> Spec {
        Spec {
            seed,
            root: is_root(),
            acls: true,
            files,
            wide: 0,
            depth: 3,
            big_files: false,
            reverse: false,
            whole_seconds: false,
        }
    }

    /// Everything: a 5,000-entry directory, 40 levels, big files.
    pub fn full(seed: u64) -> Spec {
        Spec {
            files: 200,
            wide: 5000,
            depth: 40,
            big_files: true,
            ..Spec::small(seed, 0)
        }
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What [`generate`] made, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Made {
    /// Directories (not the top).
    pub dirs: u64,
    /// Regular files (first names).
    pub files: u64,
    /// Symbolic links (first names).
    pub symlinks: u64,
    /// Devices, FIFOs and sockets.
    pub nodes: u64,
    /// Names beyond an inode's first.
    pub hard_links: u64,
    /// Bytes of file contents (sizes, holes included).
    pub bytes: u64,
}

/// One entry to make.
enum Item {
    Dir(u32),
    File(u32, Vec<u8>),
    /// Size, then the pieces of data written at their offsets.
    Sparse(u32, u64, Vec<(u64, Vec<u8>)>),
    Symlink(Vec<u8>),
    Fifo(u32),
    Socket,
    Dev(bool, u32, u32),
    /// Another name for the entry at this path.
    Link(String),
}

/// A made name with its metadata to set afterwards.
struct Entry {
    path: String,
    item: Item,
    owner: Option<(u32, u32)>,
    xattrs: Vec<(String, Vec<u8>)>,
}

fn entry(path: impl Into<String>, item: Item) -> Entry {
    Entry {
        path: path.into(),
        item,
        owner: None,
        xattrs: Vec::new(),
    }
}

/// Makes the tree of `spec` at `top` (which must not exist) and returns
/// what it holds.
///
/// # Panics
/// On any host error (a test helper).
pub fn generate(top: &Path, spec: &Spec) -> Made {
    let mut rng = Rng(spec.seed.max(1) ^ 0x5DEE_CE66_D1CE_5EED);
    let mut items = Vec::new();
    let dirs: Vec<(&str, u32)> = vec![
        ("a", 0o755),
        ("b", 0o750),
        ("b/c", 0o700),
        ("b/c/d", 0o755),
        ("sticky", 0o1777),
        ("setgid", 0o2775),
        ("ünïcødé-日本語-😀", 0o755),
        ("empty-dir", 0o511),
    ];
    for (d, m) in &dirs {
        items.push(entry(*d, Item::Dir(*m)));
    }
    let homes: Vec<&str> = std::iter::once("")
        .chain(dirs.iter().map(|d| d.0))
        .filter(|d| *d != "empty-dir")
        .collect();
    let join = |d: &str, n: &str| {
        if d.is_empty() {
            n.to_string()
        } else {
            format!("{d}/{n}")
        }
    };
    // Regular files: sizes around block boundaries and beyond, some with
    // zero blocks written out in the middle.
    for i in 0..spec.files {
        let home = homes[rng.below(homes.len() as u64) as usize];
        let size = match rng.below(8) {
            0 => 0,
            1 => 1 + rng.below(100),
            2 | 3 => 100 + rng.below(5000),
            4 => [1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537][rng.below(9) as usize],
            _ => 5000 + rng.below(60_000),
        } as usize;
        let mut b = rng.bytes(size);
        if size > 20_000 && rng.below(2) == 0 {
            let at = 4096 + rng.below(4096) as usize;
            b[at..at + 9000].fill(0);
        }
        let mode = [0o644, 0o600, 0o755, 0o444, 0o640][rng.below(5) as usize];
        let mut e = entry(join(home, &format!("f{i:04}")), Item::File(mode, b));
        if rng.below(4) == 0 {
            e.xattrs
                .push(("user.i".into(), format!("{i}").into_bytes()));
        }
        items.push(e);
    }
    // Special modes and owners.
    items.push(entry("suid", Item::File(0o4755, b"#!/bin/true\n".to_vec())));
    items.push(entry("sgid", Item::File(0o2711, rng.bytes(3000))));
    items.push(entry("suid-sgid", Item::File(0o6755, b"x".to_vec())));
    items.push(entry("a/none", Item::File(0o000, b"no bits\n".to_vec())));
    items.push(entry("empty", Item::File(0o644, Vec::new())));
    items.push(entry("a/empty2", Item::File(0o600, Vec::new())));
    // Zeros written out (a hole in the image) and small sparse files.
    items.push(entry("zeros", Item::File(0o644, vec![0; 200 << 10])));
    items.push(entry(
        "sparse-small",
        Item::Sparse(0o644, 300 << 10, vec![(128 << 10, rng.bytes(10))]),
    ));
    items.push(entry(
        "b/sparse-unaligned",
        Item::Sparse(0o644, 150_001, vec![(70_000, rng.bytes(5000))]),
    ));
    if spec.big_files {
        items.push(entry("big-dense", Item::File(0o644, rng.bytes(1536 << 10))));
        items.push(entry(
            "sparse-head",
            Item::Sparse(
                0o644,
                3 << 20,
                vec![((3 << 20) - (100 << 10), rng.bytes(100 << 10))],
            ),
        ));
        items.push(entry(
            "sparse-mid",
            Item::Sparse(
                0o640,
                (2 << 20) + (700 << 10),
                vec![
                    (0, rng.bytes(200 << 10)),
                    ((2 << 20) + (512 << 10), rng.bytes(100 << 10)),
                ],
            ),
        ));
        items.push(entry(
            "a/sparse-tail",
            Item::Sparse(0o600, 2 << 20, vec![(0, rng.bytes(100 << 10))]),
        ));
    }
    // Symlinks: fast (up to 59 bytes), at the boundary, in a block.
    let long = |n: usize, rng: &mut Rng| -> Vec<u8> {
        (0..n)
            .map(|i| {
                if i % 10 == 9 {
                    b'/'
                } else {
                    b'a' + rng.below(26) as u8
                }
            })
            .collect()
    };
    items.push(entry("a/fast", Item::Symlink(b"../b/c".to_vec())));
    items.push(entry("dangling", Item::Symlink(b"nowhere/at/all".to_vec())));
    items.push(entry("link59", Item::Symlink(long(59, &mut rng))));
    items.push(entry("link60", Item::Symlink(long(60, &mut rng))));
    items.push(entry("b/long", Item::Symlink(long(300, &mut rng))));
    items.push(entry("b/c/longer", Item::Symlink(long(1000, &mut rng))));
    items.push(entry(
        "utf8-link",
        Item::Symlink("ünïcødé-日本語-😀/../a".as_bytes().to_vec()),
    ));
    // Long names: 255 bytes of ASCII, and of two-byte UTF-8 (+ 1).
    let name255 = "n".repeat(255);
    let utf255 = format!("{}x", "é".repeat(127));
    items.push(entry(
        join("a", &name255),
        Item::File(0o644, b"255\n".to_vec()),
    ));
    items.push(entry(utf255.clone(), Item::Dir(0o755)));
    items.push(entry(
        join(&utf255, &name255),
        Item::Symlink(name255.as_bytes().to_vec()),
    ));
    // Hard links across directories: a file with four names, an empty file
    // with two, a symlink with two.
    items.push(entry(
        "a/hl",
        Item::File(0o644, b"linked contents\n".to_vec()),
    ));
    items.push(entry("b/c/hl-2", Item::Link("a/hl".into())));
    items.push(entry("hl-3", Item::Link("a/hl".into())));
    items.push(entry("sticky/hl-4", Item::Link("a/hl".into())));
    items.push(entry("b/empty-link", Item::Link("empty".into())));
    items.push(entry("setgid/fast-link", Item::Link("a/fast".into())));
    // FIFOs, a socket, devices.
    items.push(entry("fifo", Item::Fifo(0o644)));
    items.push(entry("b/fifo2", Item::Fifo(0o600)));
    items.push(entry("sock", Item::Socket));
    if spec.root {
        items.push(entry("dev", Item::Dir(0o755)));
        items.push(entry("dev/null", Item::Dev(false, 1, 3)));
        items.push(entry("dev/sda", Item::Dev(true, 8, 0)));
        items.push(entry("dev/big", Item::Dev(false, 300, 70000)));
        items.push(entry("dev/blk-big", Item::Dev(true, 4000, 1 << 19)));
    }
    // The wide directory: mostly empty files, some small ones, fast
    // symlinks and hard links.
    if spec.wide > 0 {
        items.push(entry("wide", Item::Dir(0o755)));
        for i in 0..spec.wide {
            let p = format!("wide/entry-{i:05}-{}", "w".repeat(i % 23));
            let it = if i % 97 == 5 {
                Item::Link("a/hl".into())
            } else if i % 11 == 3 {
                Item::File(0o644, rng.bytes(1 + i % 50))
            } else if i % 7 == 1 {
                Item::Symlink(format!("target-{i}").into_bytes())
            } else {
                Item::File(0o644, Vec::new())
            };
            items.push(entry(p, it));
        }
    }
    if spec.depth > 0 {
        let mut p = String::from("deep");
        items.push(entry(p.clone(), Item::Dir(0o755)));
        for l in 1..=spec.depth {
            p = format!("{p}/l{l:02}");
            items.push(entry(p.clone(), Item::Dir(0o755)));
        }
        items.push(entry(
            format!("{p}/leaf"),
            Item::File(0o644, b"at the bottom\n".to_vec()),
        ));
    }
    // Xattrs: small (in the inode), medium (an xattr block on 1 KiB
    // blocks), binary; on files and directories (`user.*` only there).
    let find = |items: &mut Vec<Entry>, p: &str| -> usize {
        items.iter().position(|e| e.path == p).unwrap()
    };
    let i = find(&mut items, "a/hl");
    items[i].xattrs.push(("user.small".into(), b"v".to_vec()));
    items[i]
        .xattrs
        .push(("user.medium".into(), long(500, &mut rng)));
    let i = find(&mut items, "b");
    items[i]
        .xattrs
        .push(("user.dir".into(), b"on a directory".to_vec()));
    let i = find(&mut items, "zeros");
    items[i]
        .xattrs
        .push(("user.binary".into(), vec![0, 1, 2, 0, 255]));
    let i = find(&mut items, "empty");
    items[i]
        .xattrs
        .push(("user.empty-value".into(), Vec::new()));
    if spec.root {
        let i = find(&mut items, "suid");
        items[i]
            .xattrs
            .push(("security.s".into(), b"security value".to_vec()));
        items[i]
            .xattrs
            .push(("trusted.t".into(), b"trusted value".to_vec()));
        let i = find(&mut items, "b/long");
        items[i]
            .xattrs
            .push(("security.link".into(), b"on a symlink".to_vec()));
        for (owner, p) in [
            ((100_000, 70_000), "a/hl"),
            ((1234, 5678), "b"),
            ((42, 43), "a/fast"),
            ((65534, 65534), "fifo"),
            ((7, 4_000_000), "dev/sda"),
            ((4_000_000_000, 1), "b/c/longer"),
            ((1000, 1000), "suid"),
        ] {
            let i = find(&mut items, p);
            items[i].owner = Some(owner);
        }
    }
    // Create: directories before what they hold (also reversed).
    let mut made = Made::default();
    fs::create_dir(top).unwrap();
    let order: Vec<usize> = if spec.reverse {
        (0..items.len()).rev().collect()
    } else {
        (0..items.len()).collect()
    };
    // Links after their targets: the first pass skips them.
    for pass in 0..2 {
        for &k in &order {
            let e = &items[k];
            if matches!(e.item, Item::Link(_)) != (pass == 1) {
                continue;
            }
            let p = top.join(&e.path);
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).unwrap();
            }
            match &e.item {
                Item::Dir(_) => {
                    fs::create_dir_all(&p).unwrap();
                    made.dirs += 1;
                }
                Item::File(_, b) => {
                    fs::write(&p, b).unwrap();
                    made.files += 1;
                    made.bytes += b.len() as u64;
                }
                Item::Sparse(_, size, pieces) => {
                    let f = fs::File::create(&p).unwrap();
                    f.set_len(*size).unwrap();
                    for (at, b) in pieces {
                        f.write_all_at(b, *at).unwrap();
                    }
                    made.files += 1;
                    made.bytes += size;
                }
                Item::Symlink(t) => {
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), &p).unwrap();
                    made.symlinks += 1;
                }
                Item::Fifo(m) => {
                    let c = cpath(&p);
                    // SAFETY: `c` is a NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), *m) }, 0, "mkfifo");
                    made.nodes += 1;
                }
                Item::Socket => {
                    drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
                    made.nodes += 1;
                }
                Item::Dev(block, major, minor) => {
                    let c = cpath(&p);
                    let kind = if *block { libc::S_IFBLK } else { libc::S_IFCHR };
                    let dev = libc::makedev(*major, *minor);
                    // SAFETY: `c` is a NUL-terminated path.
                    let r = unsafe { libc::mknod(c.as_ptr(), kind | 0o640, dev) };
                    assert_eq!(r, 0, "mknod {}", p.display());
                    made.nodes += 1;
                }
                Item::Link(to) => {
                    fs::hard_link(top.join(to), &p).unwrap();
                    made.hard_links += 1;
                }
            }
        }
    }
    // Owners, then modes (a chown clears setuid), xattrs, ACLs.
    for e in &items {
        let p = top.join(&e.path);
        if let Some((u, g)) = e.owner {
            std::os::unix::fs::lchown(&p, Some(u), Some(g)).unwrap();
        }
        let mode = match e.item {
            Item::Dir(m) | Item::File(m, _) | Item::Sparse(m, ..) | Item::Fifo(m) => Some(m),
            _ => None,
        };
        if let Some(m) = mode {
            fs::set_permissions(&p, fs::Permissions::from_mode(m)).unwrap();
        }
        for (k, v) in &e.xattrs {
            set_xattr(&p, k, v);
        }
    }
    if spec.acls && Command::new("setfacl").arg("--version").output().is_ok() {
        for args in [
            &["-m", "u:1234:r-x,g:99:rw-", "a/hl"][..],
            &["-m", "u:1234:rwx", "setgid"],
            &["-d", "-m", "u:1234:rwx,o::-", "setgid"],
        ] {
            let (file, opts) = args.split_last().unwrap();
            let out = Command::new("setfacl")
                .args(opts)
                .arg(top.join(file))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "setfacl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // The top's own mode (the populate's directory takes it).
    fs::set_permissions(top, fs::Permissions::from_mode(0o751)).unwrap();
    // Times last, children before their directory, a function of the
    // path (so of the spec, not of the creation order).
    set_times_below(top, "", spec.whole_seconds);
    made
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Sets xattr `k` of `p` (not following a symlink).
pub fn set_xattr(p: &Path, k: &str, v: &[u8]) {
    let (c, n) = (cpath(p), CString::new(k).unwrap());
    // SAFETY: both strings are NUL-terminated; `v` is readable for its
    // length.
    let r = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(
        r,
        0,
        "lsetxattr {} {k}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// FNV-1a of `s`.
fn fnv(s: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in s {
        h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The (mtime, atime) of relative path `rel`: seconds in 2017..2020 with
/// nanoseconds, one past 2038 (`empty`) and one before 1970 (`a/empty2`).
pub fn times_of(rel: &str, whole_seconds: bool) -> ((i64, i64), (i64, i64)) {
    let h = fnv(rel.as_bytes());
    let ns = if whole_seconds {
        0
    } else {
        (h % 1_000_000_000) as i64
    };
    let secs = match rel {
        "empty" => 4_000_000_000,
        "a/empty2" => -86_400 * 400,
        _ => 1_500_000_000 + (h >> 32) as i64 % 100_000_000,
    };
    ((secs, ns), (1_400_000_000 + (h >> 40) as i64, ns / 3))
}

/// Sets the times of everything under `top/rel` (children first), then of
/// `top/rel` itself.
fn set_times_below(top: &Path, rel: &str, whole_seconds: bool) {
    let p = if rel.is_empty() {
        top.to_path_buf()
    } else {
        top.join(rel)
    };
    let st = fs::symlink_metadata(&p).unwrap();
    if st.is_dir() {
        let mut names: Vec<_> = fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let n = n.to_str().unwrap();
            let r = if rel.is_empty() {
                n.to_string()
            } else {
                format!("{rel}/{n}")
            };
            set_times_below(top, &r, whole_seconds);
        }
    }
    let ((ms, mn), (as_, an)) = times_of(rel, whole_seconds);
    let ts = [
        libc::timespec {
            tv_sec: as_,
            tv_nsec: an,
        },
        libc::timespec {
            tv_sec: ms,
            tv_nsec: mn,
        },
    ];
    let c = cpath(&p);
    // SAFETY: `c` is NUL-terminated and `ts` holds the two timespecs
    // utimensat reads.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", p.display());
}

/// Every path under `top` (relative, not `top`), sorted.
pub fn paths(top: &Path) -> Vec<PathBuf> {
    fn walk(top: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(top.join(rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            out.push(r.clone());
            if e.file_type().unwrap().is_dir() {
                walk(top, &r, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(top, Path::new(""), &mut out);
    out.sort();
    out
}

/// What an image holds, read through the library: for every path under
/// the root (`lost+found` included), its inode number, the inode's raw
/// bytes (every field: mode, owner, times with nanoseconds, links, size,
/// extent root, checksum), its extended attributes, symlink target and the
/// FNV-1a of its contents; and the free block and inode counts. Two images
/// with equal walks hold the same tree, inode for inode.
///
/// # Errors
/// The first error reading the image.
#[cfg(feature = "ext4")]
pub fn image_walk(
    img: &mut spacekit::ext4::Image,
) -> Result<std::collections::BTreeMap<Vec<u8>, String>, spacekit::ext4::Ext4Error> {
    use spacekit::ext4::ROOT_INO;
    let mut out = std::collections::BTreeMap::new();
    out.insert(
        b"#free".to_vec(),
        format!("{} {}", img.free_blocks_count(), img.free_inodes_count()),
    );
    let mut stack = vec![(Vec::new(), ROOT_INO)];
    while let Some((path, ino)) = stack.pop() {
        let inode = img.inode(ino)?;
        let mut line = format!("ino {ino} raw {:02x?}", inode.raw());
        line += &format!(" xattrs {:?}", img.xattrs(ino)?);
        if inode.mode & 0xF000 == 0xA000 {
            line += &format!(" target {:?}", img.read_link(ino)?);
        } else if inode.is_file() {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut buf = vec![0u8; 1 << 16];
            let mut at = 0;
            while at < inode.size {
                let n = img.read(ino, at, &mut buf)?;
                if n == 0 {
                    break;
                }
                for &x in &buf[..n] {
                    h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
                }
                at += n as u64;
            }
            line += &format!(" data {h:016x} read {at}");
        } else if inode.is_dir() {
            for e in img.read_dir(ino)? {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let mut p = path.clone();
                p.push(b'/');
                p.extend_from_slice(&e.name);
                out.insert(
                    [p.as_slice(), b" (entry)"].concat(),
                    format!("{} {}", e.inode, e.file_type),
                );
                stack.push((p, e.inode));
            }
        }
        out.insert(path, line);
    }
    Ok(out)
}
