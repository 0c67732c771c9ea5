//! `Image::export_tree` (debugfs's `rdump`) and `Image::list` (`ls -l`):
//! a host tree with every kind of inode, put in images by `mke2fs -d`
//! and exported by spacekit, equals its source (bytes, holes, types,
//! modes, owners, symlink targets, device numbers, times to the
//! nanosecond, xattrs and ACLs, hard links sharing an inode) and what
//! `debugfs -R "rdump / OUT"` keeps of it; an image spacekit wrote exports
//! as the kernel reads it (a read-only loop mount); an existing host entry,
//! a damaged name and a directory loop are refused.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use spacekit::ext4::{
    ExportOptions, ExportReport, Ext4Error, FileTimes, Image, NodeKind, Skip, Timestamp,
};

use crate::fixtures::*;
use crate::oracles::*;

/// 1, 4 and 64 KiB blocks; 128-byte inodes; with and without
/// metadata_csum.
fn configs() -> Vec<Config> {
    let mut out = vec![K1, K1_NOCSUM, K1_I128, K64];
    out.extend(CONFIGS.iter().filter(|c| c.name == "4k-seed").copied());
    out
}

/// Whether the tests run as root (`/proc/self` belongs to the effective
/// user).
fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn sh(cmd: &str, args: &[&OsStr]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sets `p`'s atime and mtime (`SECONDS.NANOS`), not following a symlink.
fn set_times(p: &Path, atime: &str, mtime: &str) {
    let p = p.as_os_str();
    sh(
        "touch",
        &[
            "-h".as_ref(),
            "-a".as_ref(),
            "-d".as_ref(),
            format!("@{atime}").as_ref(),
            p,
        ],
    );
    sh(
        "touch",
        &[
            "-h".as_ref(),
            "-m".as_ref(),
            "-d".as_ref(),
            format!("@{mtime}").as_ref(),
            p,
        ],
    );
}

const LONG: &str = "x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/x/end";

/// The source tree under `dir`: every kind of inode (the devices, the odd
/// owners and the `trusted.`/`security.` attributes only as root).
fn source_tree(dir: &TempDir, root: bool) -> PathBuf {
    let src = dir.path("src");
    let p = |s: &str| src.join(s);
    fs::create_dir_all(p("d/e")).unwrap();
    fs::create_dir_all(p("many")).unwrap();
    for i in 0..100 {
        fs::write(p(&format!("many/file-{i:03}")), format!("file {i}\n")).unwrap();
    }
    fs::write(p("d/e/f"), b"contents of f\n").unwrap();
    fs::hard_link(p("d/e/f"), p("d/hl")).unwrap();
    fs::write(p("empty"), b"").unwrap();
    // Holes before, between and after two runs of data.
    let f = fs::File::create(p("sparse")).unwrap();
    f.set_len(5 << 20).unwrap();
    f.write_all_at(&random_bytes(8192, 1), 1 << 20).unwrap();
    f.write_all_at(&random_bytes(4096, 2), 3 << 20).unwrap();
    drop(f);
    std::os::unix::fs::symlink("d/e/f", p("short")).unwrap();
    std::os::unix::fs::symlink(LONG, p("long")).unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"odd-\xff-target"), p("odd")).unwrap();
    sh("mkfifo", &[p("fifo").as_os_str()]);
    drop(std::os::unix::net::UnixListener::bind(p("sock")).unwrap());
    let xattr = |name: &str, value: &str, f: &str| {
        sh(
            "setfattr",
            &[
                "-h".as_ref(),
                "-n".as_ref(),
                name.as_ref(),
                "-v".as_ref(),
                value.as_ref(),
                p(f).as_os_str(),
            ],
        );
    };
    if root {
        for (name, kind, major, minor) in [
            ("null", "c", "1", "3"),
            ("sda", "b", "8", "0"),
            ("big", "c", "300", "70000"),
        ] {
            sh(
                "mknod",
                &[
                    p(name).as_os_str(),
                    kind.as_ref(),
                    major.as_ref(),
                    minor.as_ref(),
                ],
            );
        }
        for (owner, f) in [
            ("100000:70000", "d/e/f"),
            ("1234:5678", "d/e"),
            ("42:43", "short"),
            ("65534:65534", "fifo"),
            ("7:4000000", "sda"),
        ] {
            sh("chown", &["-h".as_ref(), owner.as_ref(), p(f).as_os_str()]);
        }
        xattr("trusted.t", "trusted value", "d/e/f");
        xattr("security.s", "security value", "d/e/f");
        xattr("trusted.dir", "on a directory", "d");
        xattr("trusted.link", "on a symlink", "long");
    }
    xattr("user.a", "1", "d/e/f");
    xattr("user.big", &"v".repeat(300), "sparse");
    sh(
        "setfacl",
        &["-m".as_ref(), "u:1234:r-x".as_ref(), p("d/e/f").as_os_str()],
    );
    sh(
        "setfacl",
        &[
            "-d".as_ref(),
            "-m".as_ref(),
            "u:1234:rwx".as_ref(),
            p("d/e").as_os_str(),
        ],
    );
    for (mode, f) in [
        ("4755", "d/e/f"),
        ("2640", "empty"),
        ("1777", "d"),
        ("750", "d/e"),
        ("600", "sparse"),
        ("555", "many"),
        ("640", "fifo"),
        ("700", "sock"),
    ] {
        sh("chmod", &[mode.as_ref(), p(f).as_os_str()]);
    }
    // Times last, children before their directory.
    let mut all = Vec::new();
    walk(&src, &mut all);
    for (i, (f, _)) in all.iter().rev().enumerate() {
        let ns = 100_000_007 * (i as u64 + 1) % 1_000_000_000;
        set_times(
            f,
            &format!("1500000000.{ns:09}"),
            &format!("{}.{ns:09}", 1_600_000_000 + i),
        );
    }
    // Past 2038: the epoch bits of `mtime_extra`.
    set_times(&p("empty"), "1500000000", "4000000000.25");
    src
}

/// Makes everything under a directory writable again when dropped (before
/// the [`TempDir`] declared ahead of it removes it): a user cannot empty
/// the `0555` directories of the tree otherwise.
struct Writable(PathBuf);

impl Drop for Writable {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+w")
            .arg(&self.0)
            .status();
    }
}

/// Every path under `dir` (not `dir`) with its metadata, parents before
/// children. Each entry is looked at before its directory is read (which
/// moves the directory's atime).
fn walk(dir: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let found: Vec<_> = names
        .into_iter()
        .map(|p| {
            let m = fs::symlink_metadata(&p).unwrap();
            (p, m)
        })
        .collect();
    for (p, m) in found {
        let is_dir = m.is_dir();
        out.push((p.clone(), m));
        if is_dir {
            walk(&p, out);
        }
    }
}

/// What is compared of one host entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    ino: u64,
    /// Regular files and symlinks.
    size: u64,
    /// 512-byte blocks of a regular file.
    blocks: u64,
    rdev: u64,
    atime: (i64, i64),
    mtime: (i64, i64),
    target: Option<Vec<u8>>,
    bytes: Option<Vec<u8>>,
    xattrs: BTreeMap<String, String>,
}

fn kind_of(m: &fs::Metadata) -> char {
    let t = m.file_type();
    match () {
        _ if t.is_dir() => 'd',
        _ if t.is_file() => '-',
        _ if t.is_symlink() => 'l',
        _ if t.is_char_device() => 'c',
        _ if t.is_block_device() => 'b',
        _ if t.is_fifo() => 'p',
        _ if t.is_socket() => 's',
        _ => '?',
    }
}

/// Every entry under `root` by its path relative to `root`: the metadata
/// first (reading the files moves their atime), then bytes, targets and
/// extended attributes (`getfattr -R`, not following symlinks).
fn scan(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut paths = Vec::new();
    walk(root, &mut paths);
    let mut out = BTreeMap::new();
    for (p, m) in &paths {
        let kind = kind_of(m);
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            Entry {
                kind,
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                nlink: m.nlink(),
                ino: m.ino(),
                size: if matches!(kind, '-' | 'l') {
                    m.size()
                } else {
                    0
                },
                blocks: if kind == '-' { m.blocks() } else { 0 },
                rdev: m.rdev(),
                atime: (m.atime(), m.atime_nsec()),
                mtime: (m.mtime(), m.mtime_nsec()),
                target: None,
                bytes: None,
                xattrs: BTreeMap::new(),
            },
        );
    }
    for (rel, e) in out.iter_mut() {
        let p = root.join(rel);
        match e.kind {
            '-' => e.bytes = Some(fs::read(&p).unwrap()),
            'l' => {
                e.target = Some(
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            }
            _ => {}
        }
    }
    let got = Command::new("getfattr")
        .args([
            "-R",
            "-P",
            "-h",
            "-d",
            "-m",
            "-",
            "-e",
            "hex",
            "--absolute-names",
        ])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        got.status.success(),
        "getfattr: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    let mut at: Option<PathBuf> = None;
    for l in String::from_utf8(got.stdout).unwrap().lines() {
        if let Some(f) = l.strip_prefix("# file: ") {
            at = Path::new(f).strip_prefix(root).ok().map(Path::to_path_buf);
        } else if let (Some((name, value)), Some(rel)) = (l.split_once('='), &at) {
            if let Some(e) = out.get_mut(rel) {
                e.xattrs.insert(name.to_string(), value.to_string());
            }
        }
    }
    out
}

/// `true` for a path under `lost+found` (which mke2fs adds).
fn in_lost_found(p: &Path) -> bool {
    p.starts_with("lost+found")
}

/// The source entry with what the image keeps of it: 32-bit signed
/// seconds and no nanoseconds with 128-byte inodes (with larger ones
/// `with_nanos` puts the source's in); the owner compared only as root.
fn as_stored(e: &Entry, small_inodes: bool, root: bool) -> Entry {
    let mut e = e.clone();
    if small_inodes {
        e.mtime = (e.mtime.0 as i32 as i64, 0);
    }
    if !root {
        (e.uid, e.gid) = (0, 0);
    }
    e
}

/// mke2fs -d (1.47) stores whole seconds: debugfs puts each source
/// entry's nanoseconds (and the epoch bits of seconds past 2038) in its
/// `mtime_extra`.
fn with_nanos(img: &Path, dir: &TempDir, src: &BTreeMap<PathBuf, Entry>) {
    let mut cmds = String::new();
    for (p, e) in src {
        let (secs, nanos) = e.mtime;
        let epoch = ((secs - i64::from(secs as i32)) >> 32) as u32 & 3;
        let extra = ((nanos as u32) << 2) | epoch;
        cmds.push_str(&format!("sif /{} mtime_extra {extra}\n", p.display()));
    }
    debugfs_w(img, dir, &cmds);
}

/// `out` (a spacekit export of `src`) holds `src`'s entries, field by
/// field; its links share an inode where the source's do; `lost+found`
/// may be extra.
fn compare_with_source(
    src: &BTreeMap<PathBuf, Entry>,
    out: &BTreeMap<PathBuf, Entry>,
    small_inodes: bool,
    root: bool,
    what: &str,
) {
    for p in out.keys() {
        assert!(
            src.contains_key(p) || in_lost_found(p),
            "{what}: {} is extra",
            p.display()
        );
    }
    let mut links: BTreeMap<u64, Vec<&PathBuf>> = BTreeMap::new();
    for (p, s) in src {
        let o = out
            .get(p)
            .unwrap_or_else(|| panic!("{what}: {} is missing", p.display()));
        let w = as_stored(s, small_inodes, root);
        let ctx = format!("{what}: {}", p.display());
        assert_eq!(o.kind, w.kind, "{ctx}: type");
        assert_eq!(o.mode, w.mode, "{ctx}: mode {:o} for {:o}", o.mode, w.mode);
        if root {
            assert_eq!((o.uid, o.gid), (w.uid, w.gid), "{ctx}: owner");
        }
        assert_eq!(o.size, w.size, "{ctx}: size");
        assert_eq!(o.blocks, w.blocks, "{ctx}: 512-byte blocks (holes)");
        assert_eq!(o.rdev, w.rdev, "{ctx}: device number");
        assert_eq!(o.mtime, w.mtime, "{ctx}: mtime");
        assert!(o.target == w.target, "{ctx}: symlink target {:?}", o.target);
        assert!(o.bytes == w.bytes, "{ctx}: bytes");
        assert_eq!(o.xattrs, w.xattrs, "{ctx}: xattrs");
        if w.kind != 'd' {
            // As many links as names of the inode in what was exported.
            let names = src.values().filter(|e| e.ino == s.ino).count() as u64;
            assert_eq!(o.nlink, names, "{ctx}: links");
            links.entry(s.ino).or_default().push(p);
        }
    }
    for group in links.values() {
        let inos: Vec<u64> = group.iter().map(|p| out[*p].ino).collect();
        assert!(
            inos.windows(2).all(|w| w[0] == w[1]),
            "{what}: {group:?} do not share an inode"
        );
    }
    let distinct: std::collections::BTreeSet<u64> = links.values().map(|g| out[g[0]].ino).collect();
    assert_eq!(
        distinct.len(),
        links.len(),
        "{what}: files that should not share an inode do"
    );
}

/// Every exported entry's atime equals the image's (the source's moved
/// when mke2fs read it).
fn check_atimes(img: &mut Image, out: &BTreeMap<PathBuf, Entry>, what: &str) {
    for (p, e) in out {
        let ino = img.lookup(&format!("/{}", p.display())).unwrap();
        let t = img.inode(ino).unwrap().times().atime.unwrap();
        assert_eq!(
            e.atime,
            (t.secs, i64::from(t.nanos)),
            "{what}: {}: atime",
            p.display()
        );
    }
}

/// `dbg` (debugfs's rdump) against `out` (spacekit's): debugfs makes no
/// devices, FIFOs or sockets, keeps only permission bits, seconds of the
/// mtime of files and directories, no attributes, and copies hard links.
fn compare_with_debugfs(
    dbg: &BTreeMap<PathBuf, Entry>,
    out: &BTreeMap<PathBuf, Entry>,
    what: &str,
) {
    for (p, o) in out {
        let ctx = format!("{what}: debugfs: {}", p.display());
        let Some(d) = dbg.get(p) else {
            assert!(
                matches!(o.kind, 'c' | 'b' | 'p' | 's'),
                "{ctx}: missing from debugfs's"
            );
            continue;
        };
        assert_eq!(d.kind, o.kind, "{ctx}: type");
        assert_eq!(d.mode & 0o777, o.mode & 0o777, "{ctx}: permissions");
        assert!(d.bytes == o.bytes, "{ctx}: bytes");
        assert!(d.target == o.target, "{ctx}: symlink target");
        if o.kind != 'l' {
            assert_eq!((d.uid, d.gid), (o.uid, o.gid), "{ctx}: owner");
            // Their low 32 bits: debugfs 1.47.0 reads a 128-byte inode's
            // seconds unsigned (past 2038), the kernel and spacekit signed
            // (before 1970).
            assert_eq!(d.mtime.0 as u32, o.mtime.0 as u32, "{ctx}: mtime seconds");
        }
    }
    for p in dbg.keys() {
        assert!(
            out.contains_key(p),
            "{what}: {} only in debugfs's",
            p.display()
        );
    }
}

/// The kernel's view of `img` (a read-only loop mount) scanned, or `None`
/// (with a notice) when the mount is not allowed.
fn kernel_scan(img: &Path, mnt: &Path) -> Option<BTreeMap<PathBuf, Entry>> {
    let _m = Mount::new(img, mnt)?;
    Some(scan(mnt))
}

/// `out` equals the kernel's view of the image in every field but the
/// inode numbers and allocated blocks (which are the host's).
fn compare_with_kernel(
    kernel: &BTreeMap<PathBuf, Entry>,
    out: &BTreeMap<PathBuf, Entry>,
    what: &str,
) {
    let plain = |m: &BTreeMap<PathBuf, Entry>| -> BTreeMap<PathBuf, Entry> {
        m.iter()
            .map(|(p, e)| {
                (
                    p.clone(),
                    Entry {
                        ino: 0,
                        blocks: 0,
                        ..e.clone()
                    },
                )
            })
            .collect()
    };
    let (k, o) = (plain(kernel), plain(out));
    assert_eq!(
        k.keys().collect::<Vec<_>>(),
        o.keys().collect::<Vec<_>>(),
        "{what}: kernel: names"
    );
    for (p, ke) in &k {
        assert_eq!(&o[p], ke, "{what}: kernel: {}", p.display());
    }
}

fn debugfs_rdump(img: &Path, src: &str, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    let out = e2fs("debugfs")
        .arg("-R")
        .arg(format!("rdump {src} {}", dest.display()))
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs rdump");
}

#[test]
fn an_export_of_every_kind_of_inode_equals_its_source_and_debugfs_rdump() {
    require_e2fsprogs!();
    let root = is_root();
    if !root {
        println!("not root: skipping devices, owners and trusted./security. attributes");
    }
    let dir = TempDir::new("export-src");
    let _writable = Writable(dir.path(""));
    let src_dir = source_tree(&dir, root);
    let src = scan(&src_dir);
    for cfg in configs() {
        let what = cfg.name;
        let small_inodes = cfg.args.contains(&"128");
        let img_path = mkfs_d(&dir, &format!("{what}.img"), cfg.args, &src_dir, cfg.size);
        if !small_inodes {
            with_nanos(&img_path, &dir, &src);
        }
        let mut img = open_ro(&img_path);
        let out_dir = dir.path(&format!("{what}-out"));
        fs::create_dir(&out_dir).unwrap();
        let mut calls = 0;
        let report = img
            .export_tree_with(
                "/",
                &out_dir,
                ExportOptions::default(),
                &mut |r: &ExportReport, p: &Path| {
                    calls += 1;
                    let left_out = r.skipped.iter().filter(|s| s.what == Skip::Node).count();
                    let handled = r.entries() + left_out as u64;
                    assert_eq!(calls, handled, "{what}: progress at {}", p.display());
                },
            )
            .unwrap();
        let out = scan(&out_dir);
        compare_with_source(&src, &out, small_inodes, root, what);
        check_atimes(&mut img, &out, what);
        // The report counts what was made.
        let count = |k: char| out.values().filter(|e| e.kind == k).count() as u64;
        assert_eq!(report.dirs, count('d'), "{what}");
        assert_eq!(report.files + report.hard_links, count('-'), "{what}");
        assert_eq!(
            (report.files, report.hard_links),
            (count('-') - 1, 1),
            "{what}"
        );
        assert_eq!(report.symlinks, count('l'), "{what}");
        assert_eq!((report.fifos, report.sockets), (1, 1), "{what}");
        assert_eq!(report.devices, if root { 3 } else { 0 }, "{what}");
        assert_eq!(report.owners_set, root, "{what}");
        assert!(report.skipped.is_empty(), "{what}: {:?}", report.skipped);
        if let Some(k) = kernel_scan(&img_path, &dir.path(&format!("{what}-mnt"))) {
            compare_with_kernel(&k, &out, what);
        }
        // debugfs's rdump of the same image.
        let dbg_dir = dir.path(&format!("{what}-debugfs"));
        debugfs_rdump(&img_path, "/", &dbg_dir);
        compare_with_debugfs(&scan(&dbg_dir), &out, what);
        // A subtree: DEST/<its name>.
        let sub_dir = dir.path(&format!("{what}-sub"));
        fs::create_dir(&sub_dir).unwrap();
        let r = img
            .export_tree("/d/e", &sub_dir, ExportOptions::default())
            .unwrap();
        assert_eq!((r.dirs, r.files), (1, 1), "{what}: /d/e");
        let sub = scan(&sub_dir);
        let want: BTreeMap<PathBuf, Entry> = src
            .iter()
            .filter_map(|(p, e)| Some((p.strip_prefix("d").ok()?.to_path_buf(), e.clone())))
            .filter(|(p, _)| p.starts_with("e"))
            .collect();
        compare_with_source(&want, &sub, small_inodes, root, &format!("{what}: /d/e"));
        // A single file: DEST/<its name>.
        let one = dir.path(&format!("{what}-one"));
        fs::create_dir(&one).unwrap();
        img.export_tree("/sparse", &one, ExportOptions::default())
            .unwrap();
        assert!(
            fs::read(one.join("sparse")).unwrap()
                == *src[Path::new("sparse")].bytes.as_ref().unwrap()
        );
        assert_fsck_clean(&img_path, what);
    }
}

/// A POSIX ACL in the form `getxattr(2)` gives: (tag, permissions, id).
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// 4 KiB pieces of `bytes` that are not all zeros, in 512-byte units: the
/// blocks a sparse copy on the host takes.
fn data_sectors(bytes: &[u8]) -> u64 {
    bytes
        .chunks(4096)
        .filter(|c| c.iter().any(|&b| b != 0))
        .count() as u64
        * 8
}

/// Every kind of inode and attribute, written by spacekit; each entry's
/// expected mtime.
fn spacekit_tree(img: &mut Image) -> BTreeMap<&'static str, (i64, u32)> {
    let bs = u64::from(img.info().block_size);
    let d = img.mkdir("/d", 0o2775).unwrap();
    let f = img.create("/d/f", 0o4750).unwrap();
    img.write(f, 0, b"head").unwrap();
    // Holes before, between and after (no attributes: their block would
    // count in st_blocks).
    let s = img.create("/d/sparse", 0o600).unwrap();
    img.write(s, 3 * bs + 5, &random_bytes(2 * bs as usize, 3))
        .unwrap();
    img.write(s, 9 * bs, b"tail").unwrap();
    img.truncate(s, 20 * bs).unwrap();
    img.create("/d/empty", 0o600).unwrap();
    img.link("/d/f", "/f-link").unwrap();
    img.symlink("/d/short", b"f").unwrap();
    img.symlink("/long", LONG.as_bytes()).unwrap();
    img.symlink("/odd", b"odd-\xff-target").unwrap();
    img.mknod("/null", NodeKind::Char { major: 1, minor: 3 }, 0o666)
        .unwrap();
    img.mknod("/sda", NodeKind::Block { major: 8, minor: 0 }, 0o660)
        .unwrap();
    let big = NodeKind::Char {
        major: 300,
        minor: 70000,
    };
    img.mknod("/big", big, 0o600).unwrap();
    img.mknod("/fifo", NodeKind::Fifo, 0o620).unwrap();
    img.mknod("/sock", NodeKind::Socket, 0o755).unwrap();
    // Every special bit with and without the execute bit under it.
    img.mkdir("/tmp", 0o1777).unwrap();
    img.mkdir("/sticky", 0o1770).unwrap();
    img.create("/d/caps", 0o6644).unwrap();
    img.chown(f, 100_000, 70_000).unwrap();
    img.chown(d, 1234, 5678).unwrap();
    let sda = img.lookup("/sda").unwrap();
    img.chown(sda, 0, 6).unwrap();
    img.set_xattr(f, "user.note", b"hello").unwrap();
    img.set_xattr(f, "trusted.t", b"trusted value").unwrap();
    img.set_xattr(f, "security.s", b"security value").unwrap();
    // u::rwx,u:1234:r-x,g::r-x,m::r-x,o::--- (mode 4750).
    let access = acl(&[
        (1, 7, u32::MAX),
        (2, 5, 1234),
        (4, 5, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 0, u32::MAX),
    ]);
    img.set_xattr(f, "system.posix_acl_access", &access)
        .unwrap();
    let default = acl(&[(1, 7, u32::MAX), (4, 5, u32::MAX), (0x20, 5, u32::MAX)]);
    img.set_xattr(d, "system.posix_acl_default", &default)
        .unwrap();
    img.set_xattr(d, "trusted.dir", b"on a directory").unwrap();
    let mut times = BTreeMap::new();
    for (i, p) in ["/d/f", "/d", "/d/short", "/null", "/fifo", "/d/empty"]
        .into_iter()
        .enumerate()
    {
        let ino = img.lookup(p).unwrap();
        let t = |secs, nanos| Some(Timestamp { secs, nanos });
        let mtime = (1_700_000_000 + i as i64, 123_456_789 + i as u32);
        img.set_times(
            ino,
            FileTimes {
                atime: t(1_600_000_000, 5 + i as u32),
                mtime: t(mtime.0, mtime.1),
                ..FileTimes::default()
            },
        )
        .unwrap();
        times.insert(p, mtime);
    }
    // Past 2038 (the epoch bits), where the inode holds it.
    if img.inode(f).unwrap().extra_isize > 0 {
        let e = img.lookup("/d/empty").unwrap();
        let mtime = Some(Timestamp {
            secs: 5_000_000_000,
            nanos: 7,
        });
        img.set_times(
            e,
            FileTimes {
                mtime,
                ..FileTimes::default()
            },
        )
        .unwrap();
        times.insert("/d/empty", (5_000_000_000, 7));
    }
    times
}

#[test]
fn an_image_spacekit_wrote_exports_as_the_kernel_reads_it() {
    require_e2fsprogs!();
    let root = is_root();
    if !root {
        println!("not root: skipping the devices, owners and trusted./security. attributes");
    }
    for cfg in configs() {
        let what = cfg.name;
        let small_inodes = cfg.args.contains(&"128");
        let dir = TempDir::new("export-sk");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let times = spacekit_tree(&mut img);
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, what);
        let mut img = open_ro(&path);
        let out_dir = dir.path("out");
        fs::create_dir(&out_dir).unwrap();
        let report = img
            .export_tree("/", &out_dir, ExportOptions::default())
            .unwrap();
        let out = scan(&out_dir);
        // What spacekit wrote, as asked.
        let f = &out[Path::new("d/f")];
        let bs = u64::from(img.info().block_size);
        assert_eq!((f.size, f.mode & 0o7777), (4, 0o4750), "{what}");
        let sparse = &out[Path::new("d/sparse")];
        assert_eq!(sparse.size, 20 * bs, "{what}");
        assert_eq!(
            sparse.blocks,
            data_sectors(sparse.bytes.as_ref().unwrap()),
            "{what}: holes"
        );
        assert_eq!(
            (f.nlink, f.ino),
            (2, out[Path::new("f-link")].ino),
            "{what}: hard link"
        );
        assert_eq!(
            out[Path::new("odd")].target.as_deref(),
            Some(&b"odd-\xff-target"[..])
        );
        assert_eq!(
            out[Path::new("long")].target.as_deref(),
            Some(LONG.as_bytes())
        );
        assert_eq!(
            f.xattrs.get("user.note").map(String::as_str),
            Some("0x68656c6c6f"),
            "{what}"
        );
        for (p, (secs, nanos)) in &times {
            let Some(e) = out.get(Path::new(p.trim_start_matches('/'))) else {
                assert!(!root && *p == "/null", "{what}: {p} is missing");
                continue; // a device, left out for a user
            };
            let want = if small_inodes {
                (*secs as i32 as i64, 0)
            } else {
                (*secs, i64::from(*nanos))
            };
            assert_eq!(e.mtime, want, "{what}: {p}: mtime");
        }
        check_atimes(&mut img, &out, what);
        if root {
            assert!(report.skipped.is_empty(), "{what}: {:?}", report.skipped);
            assert_eq!((f.uid, f.gid), (100_000, 70_000), "{what}");
            let big = &out[Path::new("big")];
            assert_eq!(
                (big.kind, big.rdev),
                ('c', (300 << 8) | (70000 & 0xff) | ((70000 & !0xff) << 12))
            );
        } else {
            let mut left: Vec<String> = report.skipped.iter().map(|s| s.to_string()).collect();
            left.sort();
            assert_eq!(left.len(), 6, "{what}: {left:?}");
            for s in &report.skipped {
                let ok = match &s.what {
                    Skip::Node => ["big", "null", "sda"].iter().any(|n| s.path.ends_with(n)),
                    Skip::Xattr(n) => n.starts_with("trusted.") || n.starts_with("security."),
                    Skip::Owner => false,
                };
                assert!(ok, "{what}: {s}");
            }
        }
        if let Some(k) = kernel_scan(&path, &dir.path("mnt")) {
            compare_with_kernel(&k, &out, what);
        }
    }
}

/// A `ls -l` row for each entry: what the kernel (a loop mount) says of
/// it, the permission string as GNU `ls -l` writes it, the time as
/// `date -u` writes it.
#[test]
fn list_shows_what_ls_l_shows() {
    require_e2fsprogs!();
    let dir = TempDir::new("export-ls");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    spacekit_tree(&mut img);
    img.flush().unwrap();
    let null = img.lookup("/null").unwrap();
    let rows = img.list(2).unwrap();
    let row = |name: &str| rows.iter().find(|r| r.name == name.as_bytes()).unwrap();
    assert_eq!(row("null").ino, null);
    assert_eq!(
        row("null").to_string(),
        format!(
            "crw-rw-rw-   1     0     0    1,    3 {} null",
            img.inode(null).unwrap().times().mtime.unwrap()
        )
    );
    assert!(row("long")
        .to_string()
        .ends_with(&format!(" long -> {LONG}")));
    assert_eq!(row("sock").mode_string(), "srwxr-xr-x");
    assert_eq!(row("fifo").mode_string(), "prw--w----");
    assert_eq!(row("d").mode_string(), "drwxrwsr-x");
    assert_eq!(row("tmp").mode_string(), "drwxrwxrwt");
    assert_eq!(row("sticky").mode_string(), "drwxrwx--T");
    let d = img.lookup("/d").unwrap();
    let sub = img.list(d).unwrap();
    let f = sub.iter().find(|r| r.name == b"f").unwrap();
    assert_eq!(f.mode_string(), "-rwsr-x---");
    let caps = sub.iter().find(|r| r.name == b"caps").unwrap();
    assert_eq!(caps.mode_string(), "-rwSr-Sr--");
    assert_eq!((f.uid, f.gid, f.links), (100_000, 70_000, 2));
    assert_eq!(f.mtime.to_string(), "2023-11-14 22:13:20.123456789");
    drop(img);
    // Times as text, against date(1).
    for secs in [
        0i64,
        -1,
        951_782_400,
        1_700_000_000,
        4_102_444_800,
        -2_208_988_800,
        17_179_869_183,
    ] {
        let out = Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%d %H:%M:%S"])
            .output()
            .unwrap();
        let want = String::from_utf8(out.stdout).unwrap();
        let ours = Timestamp { secs, nanos: 42 }.to_string();
        assert_eq!(ours, format!("{}.000000042", want.trim()), "{secs}");
    }
    // The kernel's view and GNU ls.
    let mnt = dir.path("mnt");
    let Some(_mounted) = Mount::new(&path, &mnt) else {
        return;
    };
    let mut img = open_ro(&path);
    for d in ["/", "/d"] {
        let ino = img.lookup(d).unwrap();
        for r in img.list(ino).unwrap() {
            if d == "/" && r.name == b".." {
                continue; // the mount point's parent is the host's
            }
            let host = mnt
                .join(d.trim_start_matches('/'))
                .join(OsStr::from_bytes(&r.name));
            let m = fs::symlink_metadata(&host).unwrap();
            let ctx = host.display().to_string();
            assert_eq!(u32::from(r.mode), m.mode(), "{ctx}");
            assert_eq!(
                (u64::from(r.links), r.uid, r.gid),
                (m.nlink(), m.uid(), m.gid()),
                "{ctx}"
            );
            assert_eq!(
                (r.mtime.secs, i64::from(r.mtime.nanos)),
                (m.mtime(), m.mtime_nsec()),
                "{ctx}"
            );
            if let Some((major, minor)) = r.device {
                let rdev = m.rdev();
                let (kmajor, kminor) =
                    ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & !0xff));
                assert_eq!(
                    (u64::from(major), u64::from(minor)),
                    (kmajor, kminor),
                    "{ctx}"
                );
            } else if !m.is_dir() {
                assert_eq!(r.size, m.size(), "{ctx}");
            }
            if let Some(t) = &r.target {
                assert_eq!(
                    t,
                    &fs::read_link(&host)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                );
            }
            let ls = Command::new("ls").arg("-ld").arg(&host).output().unwrap();
            let text = String::from_utf8_lossy(&ls.stdout);
            let perms = text
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(['+', '.']);
            assert_eq!(r.mode_string(), perms, "{ctx}: {text}");
        }
    }
}

#[test]
fn existing_host_entries_bad_names_and_loops_are_refused() {
    require_e2fsprogs!();
    let dir = TempDir::new("export-refused");
    let path = mkfs(&dir, &K1_NOCSUM);
    let mut img = open_rw(&path);
    img.mkdir("/a", 0o755).unwrap();
    img.mkdir("/a/b", 0o755).unwrap();
    let f = img.create("/f", 0o644).unwrap();
    img.write(f, 0, b"image bytes").unwrap();
    img.create("/abc", 0o644).unwrap();
    img.flush().unwrap();
    drop(img);
    let mut img = open_ro(&path);
    let opts = ExportOptions::default();
    let dest = dir.path("dest");
    fs::create_dir(&dest).unwrap();
    // An existing file, and a symlink pointing elsewhere: refused, nothing
    // written through them.
    fs::write(dest.join("a"), b"keep").unwrap();
    let files = dir.path("files");
    fs::create_dir(&files).unwrap();
    fs::write(files.join("f"), b"keep").unwrap();
    match img.export_tree("/f", &files, opts) {
        Err(Ext4Error::Exists { path }) => assert!(path.ends_with("/f"), "{path}"),
        other => panic!("/f over a file: {other:?}"),
    }
    assert_eq!(fs::read(files.join("f")).unwrap(), b"keep");
    let victim = dir.path("victim");
    fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, dest.join("f")).unwrap();
    for p in ["/a", "/f"] {
        match img.export_tree(p, &dest, opts) {
            Err(Ext4Error::Exists { path }) => assert!(path.ends_with(&p[1..]), "{path}"),
            other => panic!("{p}: {other:?}"),
        }
    }
    assert_eq!(fs::read(dest.join("a")).unwrap(), b"keep");
    assert_eq!(fs::read(&victim).unwrap(), b"keep");
    // `/` into a directory holding one of its names: stops there.
    assert!(matches!(
        img.export_tree("/", &dest, opts),
        Err(Ext4Error::Exists { .. })
    ));
    assert_eq!(fs::read(dest.join("a")).unwrap(), b"keep");
    // No destination, or a file as one: the host error names it.
    for bad in [dir.path("missing"), victim.clone()] {
        match img.export_tree("/a", &bad, opts) {
            Err(e @ Ext4Error::Io { .. }) => {
                assert!(e.to_string().contains(&*bad.to_string_lossy()), "{e}")
            }
            other => panic!("{}: {other:?}", bad.display()),
        }
    }
    assert!(matches!(
        img.export_tree("/a/b/..", &dest, opts),
        Err(Ext4Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        img.export_tree("/nope", &dest, opts),
        Err(Ext4Error::NotFound { .. })
    ));
    drop(img);
    // A name holding '/' (patched in the root's block; no checksums to
    // fix): refused before anything of the root's entries is made.
    let mut img = open_ro(&path);
    let root_block = img.stat(2).unwrap().extents[0].physical;
    let bs = u64::from(img.info().block_size);
    drop(img);
    let image = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut block = vec![0u8; bs as usize];
    image.read_exact_at(&mut block, root_block * bs).unwrap();
    let at = block.windows(3).position(|w| w == b"abc").unwrap();
    image
        .write_all_at(b"a/c", root_block * bs + at as u64)
        .unwrap();
    drop(image);
    let mut img = open_ro(&path);
    let empty = dir.path("empty");
    fs::create_dir(&empty).unwrap();
    // The error names the directory whose entry is bad.
    match img.export_tree("/", &empty, opts) {
        Err(e @ Ext4Error::At { .. }) => {
            assert!(
                matches!(e.cause(), Ext4Error::Corrupt { field: "name", .. }),
                "{e:?}"
            );
            assert!(
                matches!(&e, Ext4Error::At { path, .. } if path == "/"),
                "{e:?}"
            );
        }
        other => panic!("a name with '/': {other:?}"),
    }
    assert_eq!(
        fs::read_dir(&empty).unwrap().count(),
        0,
        "something was made"
    );
    drop(img);
    // A directory linked under itself (debugfs `ln` links a directory):
    // refused, not followed around the loop.
    debugfs_w(&path, &dir, "ln /a /a/b/loop\n");
    let mut img = open_ro(&path);
    let loop_dest = dir.path("loop");
    fs::create_dir(&loop_dest).unwrap();
    // The error names the entry that closes the loop, in the image.
    match img.export_tree("/a", &loop_dest, opts) {
        Err(e @ Ext4Error::At { .. }) => {
            assert!(
                matches!(e.cause(), Ext4Error::Corrupt { field: "inode", .. }),
                "{e:?}"
            );
            assert!(
                matches!(&e, Ext4Error::At { path, .. } if path == "/a/b/loop"),
                "{e:?}"
            );
            assert!(
                e.to_string().starts_with("ext4: /a/b/loop: corrupt image"),
                "{e}"
            );
        }
        other => panic!("a loop: {other:?}"),
    }
    // From below: `/a/b` first, then `/a` through the link, then `/a/b`
    // again, named by the path the walk took.
    let loop_dest = dir.path("loop2");
    fs::create_dir(&loop_dest).unwrap();
    match img.export_tree("/a/b", &loop_dest, opts) {
        Err(e @ Ext4Error::At { .. }) => assert!(
            matches!(&e, Ext4Error::At { path, .. } if path == "/a/b/loop/b"),
            "{e:?}"
        ),
        other => panic!("a loop from /a/b: {other:?}"),
    }
    drop(img);
    // A file whose extent tree is damaged: the error names the file, in
    // the image (the export names it from its parent's path).
    debugfs_w(&path, &dir, "sif /f block[0] 0\n");
    let mut img = open_ro(&path);
    let d = dir.path("file");
    fs::create_dir(&d).unwrap();
    match img.export_tree("/f", &d, opts) {
        Err(e @ Ext4Error::At { .. }) => {
            assert!(
                matches!(&e, Ext4Error::At { path, .. } if path == "/f"),
                "{e:?}"
            );
            assert!(matches!(e.cause(), Ext4Error::Corrupt { .. }), "{e:?}");
        }
        other => panic!("a damaged extent tree: {other:?}"),
    }
}
