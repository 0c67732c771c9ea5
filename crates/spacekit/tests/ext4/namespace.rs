//! Every kind of inode: directories, symlinks (fast and in a block), hard
//! links, devices (both encodings), FIFOs and sockets, with modes, 32-bit
//! owners and nanosecond times — made by spacekit and read by e2fsck,
//! debugfs and the kernel; made by `mke2fs -d` and read by spacekit.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use spacekit::ext4::{Ext4Error, FileTimes, Image, NodeKind, Timestamp};

use crate::files::debugfs;
use crate::fixtures::*;
use crate::oracles::*;

fn configs() -> Vec<Config> {
    let mut out = vec![K1, K1_NOCSUM, K64];
    out.extend(CONFIGS.iter().filter(|c| c.name == "4k-seed").copied());
    out
}

/// `debugfs stat`'s "Type: T    Mode:  0MMMM" and "User: U   Group: G".
fn debugfs_type_mode_owner(img: &Path, path: &str) -> (String, u32, u64, u64, u64) {
    let t = debugfs(img, &format!("stat {path}"));
    let word = |key: &str| -> String {
        let i = t.find(key).unwrap_or_else(|| panic!("no {key} in {t}"));
        t[i + key.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    (
        word("Type: "),
        u32::from_str_radix(&word("Mode: "), 8).unwrap(),
        word("User: ").parse().unwrap(),
        word("Group: ").parse().unwrap(),
        word("Links: ").parse().unwrap(),
    )
}

/// The kernel's view (a read-only loop mount) of each path: the metadata
/// and, for symlinks, the target. `None` when the mount is not allowed.
fn kernel_meta(
    img: &Path,
    dir: &TempDir,
    paths: &[&str],
) -> Option<Vec<(fs::Metadata, Option<Vec<u8>>)>> {
    let mnt = dir.path("mnt-ns");
    fs::create_dir_all(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(img)
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipping the kernel's read: mount -o loop,ro failed");
        return None;
    }
    let got = paths
        .iter()
        .map(|p| {
            let full = mnt.join(p.trim_start_matches('/'));
            let m = fs::symlink_metadata(&full).unwrap_or_else(|e| panic!("{p}: {e}"));
            let target = m.file_type().is_symlink().then(|| {
                fs::read_link(&full)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            });
            (m, target)
        })
        .collect();
    let um = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(um.success());
    Some(got)
}

#[test]
fn every_kind_of_inode_agrees_with_e2fsck_debugfs_and_the_kernel() {
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("ns-kinds");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let d = img.mkdir("/d", 0o750).unwrap();
        let e = img.mkdir("/d/e", 0o700).unwrap();
        let f = img.create("/d/e/f", 0o640).unwrap();
        img.write(f, 0, b"contents of f\n").unwrap();
        img.link("/d/e/f", "/d/f-link").unwrap();
        let long = "x/".repeat(70) + "end";
        img.symlink("/short", b"d/e/f").unwrap();
        img.symlink("/long", long.as_bytes()).unwrap();
        img.mknod("/null", NodeKind::Char { major: 1, minor: 3 }, 0o666)
            .unwrap();
        img.mknod("/sda", NodeKind::Block { major: 8, minor: 0 }, 0o660)
            .unwrap();
        img.mknod(
            "/big",
            NodeKind::Char {
                major: 300,
                minor: 70000,
            },
            0o600,
        )
        .unwrap();
        img.mknod("/fifo", NodeKind::Fifo, 0o644).unwrap();
        img.mknod("/sock", NodeKind::Socket, 0o755).unwrap();
        img.chown(f, 100_000, 70_000).unwrap();
        img.chmod(d, 0o1777).unwrap();
        let t = |secs, nanos| Some(Timestamp { secs, nanos });
        img.set_times(
            f,
            FileTimes {
                atime: t(1_600_000_000, 5),
                mtime: t(1_700_000_000, 123_456_789),
                ctime: None,
                crtime: None,
            },
        )
        .unwrap();
        // The last second an inode holds (2446-05-10 with `*_extra`
        // fields, 2038-01-19 without) is taken; the next is refused, not
        // wrapped into the past.
        let max = if img.info().inode_size > 128 {
            (1i64 << 31) - 1 + (3 << 32)
        } else {
            i64::from(i32::MAX)
        };
        let tmp = img.create("/t", 0o644).unwrap();
        let at = |secs| FileTimes {
            atime: None,
            mtime: t(secs, 0),
            ctime: None,
            crtime: None,
        };
        assert!(matches!(
            img.set_times(tmp, at(max + 1)),
            Err(Ext4Error::InvalidArgument { what: "secs", .. })
        ));
        // Before the earliest time: named as a distance before 1970, not
        // as a wrapped-around number.
        match img.set_times(tmp, at(-(1 << 31) - 1)) {
            Err(Ext4Error::InvalidArgument { what, value, .. }) => {
                assert_eq!((what, value), ("secs before 1970", (1 << 31) + 1))
            }
            other => panic!("{other:?}"),
        }
        for (kind, what) in [
            (
                NodeKind::Char {
                    major: 4096,
                    minor: 1,
                },
                "major",
            ),
            (
                NodeKind::Block {
                    major: 1,
                    minor: 1 << 20,
                },
                "minor",
            ),
        ] {
            match img.mknod("/dev-too-big", kind, 0o600) {
                Err(Ext4Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{other:?}"),
            }
        }
        img.set_times(tmp, at(max)).unwrap();
        assert_eq!(img.inode(tmp).unwrap().times().mtime.unwrap().secs, max);
        img.unlink("/t").unwrap();
        let gone = img.mkdir("/gone", 0o755).unwrap();
        assert!(gone > 0);
        img.rmdir("/gone").unwrap();
        // Refused without a change.
        assert!(matches!(img.rmdir("/d"), Err(Ext4Error::NotEmpty { .. })));
        assert!(matches!(
            img.rmdir("/d/e/f"),
            Err(Ext4Error::NotADirectory { .. })
        ));
        assert!(matches!(
            img.link("/d", "/d2"),
            Err(Ext4Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            img.mkdir("/short", 0o755),
            Err(Ext4Error::Exists { .. })
        ));
        img.flush().unwrap();
        // spacekit's own reading.
        let (short, long_i, big) = (
            img.lookup("/short").unwrap(),
            img.lookup("/long").unwrap(),
            img.lookup("/big").unwrap(),
        );
        assert_eq!(img.read_link(short).unwrap(), b"d/e/f");
        assert_eq!(img.read_link(long_i).unwrap(), long.as_bytes());
        assert_eq!(img.device_number(big).unwrap(), (300, 70000));
        assert_eq!(img.inode(e).unwrap().links_count, 2);
        assert_eq!(img.inode(d).unwrap().links_count, 3);
        assert_eq!(img.inode(f).unwrap().links_count, 2);
        assert!(matches!(
            img.lookup("/gone"),
            Err(Ext4Error::NotFound { .. })
        ));
        drop(img);
        assert_fsck_clean(&path, what);
        // debugfs.
        let want = [
            ("/d", "directory", 0o1777, 0, 0, 3),
            ("/d/e", "directory", 0o700, 0, 0, 2),
            ("/d/e/f", "regular", 0o640, 100_000, 70_000, 2),
            ("/short", "symlink", 0o777, 0, 0, 1),
            ("/long", "symlink", 0o777, 0, 0, 1),
            ("/null", "character", 0o666, 0, 0, 1),
            ("/sda", "block", 0o660, 0, 0, 1),
            ("/fifo", "FIFO", 0o644, 0, 0, 1),
            ("/sock", "socket", 0o755, 0, 0, 1),
        ];
        for (p, ty, mode, uid, gid, links) in want {
            let got = debugfs_type_mode_owner(&path, p);
            assert_eq!(
                got,
                (ty.to_string(), mode, uid, gid, links),
                "{what}: debugfs stat {p}"
            );
        }
        let st = debugfs(&path, "stat /short");
        assert!(st.contains("Fast link dest: \"d/e/f\""), "{what}: {st}");
        let st = debugfs(&path, "stat /null");
        assert!(
            st.contains("Device major/minor number: 01:03"),
            "{what}: {st}"
        );
        let st = debugfs(&path, "stat /d/e/f");
        assert!(st.contains("mtime: 0x6553f100:1d6f3454"), "{what}: {st}");
        assert_eq!(debugfs_dump(&path, &dir, "/d/f-link"), b"contents of f\n");
        // The kernel.
        let paths = [
            "/d",
            "/d/e/f",
            "/short",
            "/long",
            "/null",
            "/sda",
            "/big",
            "/fifo",
            "/sock",
            "/d/f-link",
        ];
        if let Some(m) = kernel_meta(&path, &dir, &paths) {
            let dev = |m: &fs::Metadata| {
                let r = m.rdev();
                (
                    ((r >> 8) & 0xFFF) as u32,
                    ((r & 0xFF) | ((r >> 12) & 0xFFF00)) as u32,
                )
            };
            assert!(m[0].0.is_dir() && m[0].0.mode() & 0o7777 == 0o1777 && m[0].0.nlink() == 3);
            assert_eq!(
                (m[1].0.uid(), m[1].0.gid(), m[1].0.nlink()),
                (100_000, 70_000, 2),
                "{what}"
            );
            assert_eq!(
                (m[1].0.mtime(), m[1].0.mtime_nsec(), m[1].0.atime_nsec()),
                (1_700_000_000, 123_456_789, 5),
                "{what}"
            );
            assert_eq!(m[2].1.as_deref(), Some(&b"d/e/f"[..]));
            assert_eq!(m[3].1.as_deref(), Some(long.as_bytes()));
            assert!(m[4].0.file_type().is_char_device() && dev(&m[4].0) == (1, 3));
            assert!(m[5].0.file_type().is_block_device() && dev(&m[5].0) == (8, 0));
            assert_eq!(dev(&m[6].0), (300, 70000), "{what}: the new encoding");
            assert!(m[7].0.file_type().is_fifo() && m[8].0.file_type().is_socket());
            assert_eq!(
                m[9].0.ino(),
                m[1].0.ino(),
                "{what}: a hard link is one inode"
            );
        }
    }
}

/// `mke2fs -d` copies a tree with every kind of inode; spacekit reads the
/// same symlink targets, device numbers, modes, owners and link counts the
/// host has.
#[test]
fn spacekit_reads_every_kind_mke2fs_made() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-mke2fs");
    let src = dir.path("src");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    fs::write(src.join("sub/file"), b"data").unwrap();
    fs::hard_link(src.join("sub/file"), src.join("hard")).unwrap();
    std::os::unix::fs::symlink("sub/file", src.join("short")).unwrap();
    std::os::unix::fs::symlink("y".repeat(300), src.join("long")).unwrap();
    let nodes = Command::new("mknod")
        .arg(src.join("tty"))
        .args(["c", "4", "64"])
        .status();
    let made_nodes = nodes.is_ok_and(|s| s.success());
    if made_nodes {
        assert!(Command::new("mkfifo")
            .arg(src.join("pipe"))
            .status()
            .unwrap()
            .success());
    } else {
        println!("skipping devices in the source tree: mknod needs root");
    }
    for cfg in configs() {
        let size = if cfg.name == "64k" { "64M" } else { "16M" };
        let img_path = mkfs_d(&dir, &format!("{}.img", cfg.name), cfg.args, &src, size);
        let mut img = open_ro(&img_path);
        let short = img.lookup("/short").unwrap();
        assert_eq!(img.read_link(short).unwrap(), b"sub/file");
        let long = img.lookup("/long").unwrap();
        assert_eq!(img.read_link(long).unwrap(), "y".repeat(300).as_bytes());
        let f = img.lookup("/sub/file").unwrap();
        assert_eq!(img.lookup("/hard").unwrap(), f);
        assert_eq!(img.inode(f).unwrap().links_count, 2);
        let sub = img.lookup("/sub").unwrap();
        assert_eq!(img.inode(sub).unwrap().links_count, 3);
        let host = fs::metadata(src.join("sub/file")).unwrap();
        let i = img.inode(f).unwrap();
        assert_eq!(
            (u32::from(i.mode) & 0o7777, i.uid, i.gid),
            (host.mode() & 0o7777, host.uid(), host.gid())
        );
        if made_nodes {
            let tty = img.lookup("/tty").unwrap();
            assert_eq!(img.device_number(tty).unwrap(), (4, 64), "{}", cfg.name);
            let pipe = img.lookup("/pipe").unwrap();
            assert_eq!(img.inode(pipe).unwrap().mode & 0xF000, 0x1000);
        }
    }
}

/// An operation that fails in the middle (no block for the new
/// directory) leaves the inode counts, the parent and the names as they
/// were.
#[test]
fn a_failed_mkdir_changes_nothing() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-full");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    // Fill the data blocks.
    let f = img.create("/fill", 0o644).unwrap();
    for step in [64 * 1024, 1024] {
        loop {
            let size = img.stat(f).unwrap().size;
            if img.fallocate(f, size, step, false).is_err() {
                break;
            }
        }
    }
    // The last few blocks the fallocates' tree margin left.
    let mut taken = Vec::new();
    while let Ok(b) = img.alloc_blocks(spacekit::ext4::AllocRequest {
        goal: None,
        len: 1,
        align: 1,
    }) {
        taken.push(b);
    }
    img.flush().unwrap();
    let before = (
        img.free_inodes_count(),
        img.free_blocks_count(),
        img.inode(2).unwrap(),
    );
    let e = img.mkdir("/newdir", 0o755).unwrap_err();
    assert!(matches!(e, Ext4Error::NoSpace { .. }), "{e:?}");
    assert_eq!(
        (
            img.free_inodes_count(),
            img.free_blocks_count(),
            img.inode(2).unwrap()
        ),
        before
    );
    assert!(matches!(
        img.lookup("/newdir"),
        Err(Ext4Error::NotFound { .. })
    ));
    assert!(!img.is_dirty(), "a failed mkdir left changes to flush");
    for b in taken {
        img.free_blocks(b, 1).unwrap();
    }
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "full");
    let _ = Image::open(&path, spacekit::ext4::OpenMode::ReadOnly).unwrap();
}

/// A path that ends in `.` or `..` names no entry to remove or move, and
/// one that ends in `/` names a directory, as `rmdir(2)` and `rename(2)`
/// take them; every refusal leaves the image e2fsck-clean and as it was.
#[test]
fn paths_ending_in_dot_or_slash_follow_the_system_calls() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-dot-slash");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    img.create("/f", 0o644).unwrap();
    // `.`/`..` last and a trailing `/` follow rmdir(2) and rename(2): a
    // path ending in `.` names no entry to remove or move, and one
    // ending in `/` names a directory.
    img.mkdir("/dd", 0o755).unwrap();
    img.mkdir("/dd/e", 0o755).unwrap();
    for e in [
        img.rmdir("/dd/e/.").unwrap_err(),
        img.rmdir("/dd/e/..").unwrap_err(),
        img.rename("/dd/e/.", "/moved").unwrap_err(),
        img.rename("/dd/e", "/dd/..").unwrap_err(),
        img.unlink("/dd/.").unwrap_err(),
    ] {
        assert!(matches!(e, Ext4Error::DotName { .. }), "{e:?}");
    }
    for e in [
        img.create("/newdir/", 0o644).unwrap_err(),
        img.lookup("/f/").unwrap_err(),
        img.lookup("/f/.").unwrap_err(),
        img.unlink("/f/").unwrap_err(),
        img.rename("/f/", "/g").unwrap_err(),
        img.rename("/f", "/g/").unwrap_err(),
        img.link("/f", "/l/").unwrap_err(),
        img.symlink("/sl/", b"x").unwrap_err(),
    ] {
        assert!(matches!(e, Ext4Error::NotADirectory { .. }), "{e:?}");
    }
    assert!(
        img.lookup("/newdir").is_err(),
        "a refused create made a file"
    );
    assert!(
        img.lookup("/dd/e").is_ok(),
        "a refused rmdir removed the directory"
    );
    // A directory with a trailing `/` is still fine everywhere.
    img.mkdir("/dd/x/", 0o755).unwrap();
    img.rename("/dd/x/", "/dd/y/").unwrap();
    assert_eq!(
        img.lookup("/dd/y/").unwrap(),
        img.lookup("/dd/y/.").unwrap()
    );
    img.rmdir("/dd/y/").unwrap();
    img.rmdir("/dd/e").unwrap();
    img.rmdir("/dd").unwrap();
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "after the path refusals");
}

/// A hard link is refused once the inode has 65,000 links, as the kernel
/// refuses it (`EXT4_LINK_MAX`), and not before: at 64,999 it gets its
/// 65,000th. The count is set with debugfs (`sif`), so e2fsck is not
/// asked; the refusal must leave the image's bytes as they were.
#[test]
fn a_hard_link_is_refused_at_the_kernels_limit_only() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-link-max");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let f = img.create("/f", 0o644).unwrap();
    img.flush().unwrap();
    drop(img);
    debugfs_w(&path, &dir, "sif /f links_count 64999\n");
    let mut img = open_rw(&path);
    img.link("/f", "/l1").unwrap();
    img.flush().unwrap();
    assert_eq!(img.inode(f).unwrap().links_count, 65000);
    drop(img);
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let e = img.link("/f", "/l2").unwrap_err();
    assert!(
        matches!(
            e,
            Ext4Error::InvalidArgument {
                what: "i_links_count",
                value: 65000,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!img.is_dirty(), "a refused link left changes to flush");
    drop(img);
    assert!(fs::read(&path).unwrap() == before, "a refused link wrote");
}

/// Creating file after file in one directory reuses its path lookup; a
/// rename, an rmdir or a rolled-back populate in between must send the
/// next create to the directory the path names now.
#[test]
fn creates_follow_the_path_after_renames_and_removals() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-lastdir");
    let path = mkfs(&dir, &CONFIGS[1]);
    let mut img = open_rw(&path);
    let a = img.mkdir("/a", 0o755).unwrap();
    img.create("/a/f1", 0o644).unwrap();
    // Moved away: `/a` is a new directory now.
    img.rename("/a", "/b").unwrap();
    let a2 = img.mkdir("/a", 0o755).unwrap();
    assert_ne!(a, a2);
    img.create("/a/f2", 0o644).unwrap();
    // One directory after another, same path length.
    img.create("/b/f3", 0o644).unwrap();
    let names = |img: &mut Image, d: &str| -> Vec<String> {
        let ino = img.lookup(d).unwrap();
        let mut v: Vec<String> = img
            .read_dir(ino)
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .filter(|n| n != "." && n != "..")
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&mut img, "/a"), ["f2"]);
    assert_eq!(names(&mut img, "/b"), ["f1", "f3"]);
    // Removed: a create under it fails rather than reviving it.
    img.create("/c", 0o644).unwrap();
    img.mkdir("/d", 0o755).unwrap();
    img.create("/d/x", 0o644).unwrap();
    img.unlink("/d/x").unwrap();
    img.rmdir("/d").unwrap();
    assert!(matches!(
        img.create("/d/y", 0o644),
        Err(Ext4Error::NotFound { .. })
    ));
    // A populate that made `/p` and failed takes `/p` back with it.
    {
        let mut pop = spacekit::ext4::Populate::new(&mut img, "/", Default::default()).unwrap();
        let meta = spacekit::ext4::Meta::default();
        pop.add(spacekit::ext4::Entry {
            path: b"p".to_vec(),
            kind: spacekit::ext4::EntryKind::Dir,
            meta: meta.clone(),
        })
        .unwrap();
        assert!(pop
            .add(spacekit::ext4::Entry {
                path: b"p/../../q".to_vec(),
                kind: spacekit::ext4::EntryKind::Dir,
                meta,
            })
            .is_err());
    }
    assert!(matches!(
        img.create("/p/z", 0o644),
        Err(Ext4Error::NotFound { .. })
    ));
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "last dir");
}

/// `rename(2)`'s cases, each flushed and checked by e2fsck, with the
/// names debugfs lists and (where mounts work) the kernel's view of `..`.
#[test]
fn rename_follows_rename2() {
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("ns-rename");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let a = img.mkdir("/a", 0o755).unwrap();
        let b = img.mkdir("/b", 0o755).unwrap();
        let sub = img.mkdir("/a/sub", 0o755).unwrap();
        let f = img.create("/a/f", 0o644).unwrap();
        img.write(f, 0, b"f's bytes").unwrap();
        let g = img.create("/b/g", 0o644).unwrap();
        img.create("/a/sub/inner", 0o644).unwrap();
        img.mkdir("/b/empty", 0o755).unwrap();
        // Within a directory, then over another file (which goes).
        img.rename("/a/f", "/a/f2").unwrap();
        img.rename("/a/f2", "/b/g").unwrap();
        assert_eq!(img.lookup("/b/g").unwrap(), f);
        assert!(
            !img.inode_in_use(g).unwrap(),
            "{what}: the replaced file's inode was not freed"
        );
        // A directory to another parent, over an empty directory.
        img.rename("/a/sub", "/b/empty").unwrap();
        assert!(img.lookup("/b/empty/inner").is_ok());
        assert_eq!(img.inode(a).unwrap().links_count, 2);
        assert_eq!(img.inode(b).unwrap().links_count, 3);
        // Refused, nothing changed.
        assert!(
            img.rename("/b", "/b/empty/x").is_err(),
            "{what}: a directory under itself"
        );
        assert!(
            matches!(
                img.rename("/b/g", "/b/empty"),
                Err(Ext4Error::InvalidArgument { what: "ino", .. })
            ),
            "{what}: a file over a directory"
        );
        assert!(
            img.rename("/a", "/b/g").is_err(),
            "{what}: a directory over a file"
        );
        img.mkdir("/full", 0o755).unwrap();
        img.create("/full/x", 0o644).unwrap();
        assert!(
            matches!(
                img.rename("/a", "/full"),
                Err(Ext4Error::NotEmpty { ref path }) if path == "/full"
            ),
            "{what}: over a directory that is not empty"
        );
        img.rename("/b/g", "/b/g").unwrap();
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, what);
        let ls = debugfs(&path, "ls -l /b/empty");
        let dotdot = ls
            .lines()
            .find(|l| l.trim_end().ends_with(" .."))
            .unwrap_or_else(|| panic!("{ls}"));
        assert_eq!(
            dotdot.split_whitespace().next(),
            Some(b.to_string().as_str()),
            "{what}: .. of the moved directory: {ls}"
        );
        assert_eq!(debugfs_dump(&path, &dir, "/b/g"), b"f's bytes");
        assert!(sub > 0);
        if let Some(m) = kernel_meta(&path, &dir, &["/b", "/b/empty/inner", "/a"]) {
            assert_eq!((m[0].0.nlink(), m[2].0.nlink()), (3, 2), "{what}");
        }
    }
}

/// What the random namespace test expects at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    /// A file: its id in the model's contents (hard links share one).
    File(usize),
    Symlink(Vec<u8>),
    Fifo,
}

/// Random mkdir, create + write, link, symlink, mknod, unlink, rmdir and
/// rename (some refused, as `rename(2)` refuses them) against a model of
/// the tree and of each file's bytes: after every flush e2fsck is clean and
/// every path reads back as the model says, with the link counts the model
/// implies; at the end the kernel lists the same tree.
#[test]
fn random_namespace_sequences_match_a_model() {
    use spacekit_testkit::rng::Rng;
    use std::collections::BTreeMap;
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("ns-random");
        let path = mkfs(&dir, &cfg);
        let bs = open_ro(&path).info().block_size as u64;
        let mut rng = Rng(0xA5A5_1234 ^ bs);
        let mut tree: BTreeMap<String, Node> = BTreeMap::new();
        let mut contents: Vec<Vec<u8>> = Vec::new();
        let mut img = open_rw(&path);
        for step in 0..60 {
            let dirs: Vec<String> = std::iter::once(String::new())
                .chain(
                    tree.iter()
                        .filter(|(_, n)| **n == Node::Dir)
                        .map(|(p, _)| p.clone()),
                )
                .collect();
            let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
            let new = format!("{parent}/n{step}");
            let pick = |rng: &mut Rng, tree: &BTreeMap<String, Node>| {
                let keys: Vec<&String> = tree.keys().collect();
                (!keys.is_empty()).then(|| keys[rng.below(keys.len() as u64) as usize].clone())
            };
            match rng.below(9) {
                0 | 1 => {
                    img.mkdir(&new, 0o755).unwrap();
                    tree.insert(new, Node::Dir);
                }
                2 | 3 => {
                    let ino = img.create(&new, 0o644).unwrap();
                    let bytes = random_bytes(rng.below(3 * bs) as usize, rng.next());
                    img.write(ino, 0, &bytes).unwrap();
                    contents.push(bytes);
                    tree.insert(new, Node::File(contents.len() - 1));
                }
                4 => {
                    let target = if rng.below(2) == 0 {
                        b"short".to_vec()
                    } else {
                        vec![b'L'; 100]
                    };
                    img.symlink(&new, &target).unwrap();
                    tree.insert(new, Node::Symlink(target));
                }
                5 => {
                    img.mknod(&new, NodeKind::Fifo, 0o600).unwrap();
                    tree.insert(new, Node::Fifo);
                }
                6 => {
                    let Some(p) = pick(&mut rng, &tree) else {
                        continue;
                    };
                    match tree[&p].clone() {
                        Node::File(id) => {
                            img.link(&p, &new).unwrap();
                            tree.insert(new, Node::File(id));
                        }
                        Node::Dir => {
                            let empty = !tree.keys().any(|k| k.starts_with(&format!("{p}/")));
                            let r = img.rmdir(&p);
                            assert_eq!(r.is_ok(), empty, "{what}: rmdir {p}: {r:?}");
                            if empty {
                                tree.remove(&p);
                            }
                        }
                        _ => {
                            img.unlink(&p).unwrap();
                            tree.remove(&p);
                        }
                    }
                }
                7 => {
                    let Some(p) = pick(&mut rng, &tree) else {
                        continue;
                    };
                    if tree[&p] == Node::Dir {
                        continue;
                    }
                    img.unlink(&p).unwrap();
                    tree.remove(&p);
                }
                _ => {
                    let Some(p) = pick(&mut rng, &tree) else {
                        continue;
                    };
                    let under = new.starts_with(&format!("{p}/"));
                    let r = img.rename(&p, &new);
                    assert_eq!(r.is_ok(), !under, "{what}: rename {p} {new}: {r:?}");
                    if r.is_ok() {
                        let moved: Vec<(String, Node)> = tree
                            .iter()
                            .filter(|(k, _)| **k == p || k.starts_with(&format!("{p}/")))
                            .map(|(k, n)| (k.clone(), n.clone()))
                            .collect();
                        for (k, n) in moved {
                            tree.remove(&k);
                            tree.insert(format!("{new}{}", &k[p.len()..]), n);
                        }
                    }
                }
            }
            if step % 6 == 5 {
                img.flush().unwrap();
                assert_fsck_clean(&path, &format!("{what}: step {step}"));
                check_model(&mut img, &tree, &contents, &format!("{what}: step {step}"));
            }
        }
        img.flush().unwrap();
        drop(img);
        let paths: Vec<&str> = tree.keys().map(String::as_str).collect();
        if let Some(m) = kernel_meta(&path, &dir, &paths) {
            for ((p, n), (meta, target)) in tree.iter().zip(m) {
                let kind_ok = match n {
                    Node::Dir => meta.is_dir(),
                    Node::File(_) => meta.is_file(),
                    Node::Symlink(t) => target.as_deref() == Some(&t[..]),
                    Node::Fifo => meta.file_type().is_fifo(),
                };
                assert!(kind_ok, "{what}: the kernel sees {p} as {meta:?}");
            }
        }
    }
}

/// Every path of the model reads back as it says, with its link count.
fn check_model(
    img: &mut Image,
    tree: &std::collections::BTreeMap<String, Node>,
    contents: &[Vec<u8>],
    what: &str,
) {
    for (p, n) in tree {
        let ino = img.lookup(p).unwrap_or_else(|e| panic!("{what}: {p}: {e}"));
        let inode = img.inode(ino).unwrap();
        match n {
            Node::Dir => {
                let subdirs = tree
                    .iter()
                    .filter(|(k, v)| {
                        **v == Node::Dir && k.rsplit_once('/').map(|x| x.0) == Some(p.as_str())
                    })
                    .count();
                assert!(inode.is_dir(), "{what}: {p}");
                assert_eq!(
                    usize::from(inode.links_count),
                    2 + subdirs,
                    "{what}: {p}: links"
                );
            }
            Node::File(id) => {
                let mut buf = vec![0; contents[*id].len() + 1];
                let k = img.read(ino, 0, &mut buf).unwrap();
                assert!(buf[..k] == contents[*id][..], "{what}: {p}: bytes");
                let links = tree.values().filter(|v| **v == Node::File(*id)).count();
                assert_eq!(usize::from(inode.links_count), links, "{what}: {p}: links");
            }
            Node::Symlink(t) => assert_eq!(&img.read_link(ino).unwrap(), t, "{what}: {p}"),
            Node::Fifo => assert_eq!(inode.mode & 0xF000, 0x1000, "{what}: {p}"),
        }
    }
}

/// Entries put one after another into a directory go in right after the
/// last one (see `namespace/append.rs`); removing, renaming, linking and
/// creating in the same directory, and the directory becoming an htree,
/// all within one transaction, must leave every name where lookups and
/// e2fsck find it.
#[test]
fn entries_appended_in_order_survive_the_other_operations() {
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("ns-append");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let mut names: Vec<String> = Vec::new();
        img.mkdir("/d", 0o755).unwrap();
        for i in 0..12 {
            let p = format!("/d/m{i:03}");
            img.mkdir(&p, 0o755).unwrap();
            names.push(p);
        }
        // Out of order: the removed names' room is reused or skipped, the
        // moved one's new name goes in by the ordinary path.
        img.rmdir("/d/m003").unwrap();
        img.symlink("/d/s1", b"target").unwrap();
        img.rename("/d/m005", "/d/r005").unwrap();
        img.mknod("/d/f1", NodeKind::Fifo, 0o600).unwrap();
        let f = img.create("/d/c1", 0o644).unwrap();
        img.write(f, 0, b"c1").unwrap();
        img.link("/d/c1", "/d/l1").unwrap();
        img.mkdir("/d/m012", 0o755).unwrap();
        img.rmdir("/d/m011").unwrap();
        names.retain(|n| !["/d/m003", "/d/m005", "/d/m011"].contains(&n.as_str()));
        names.extend(["/d/s1", "/d/r005", "/d/f1", "/d/c1", "/d/l1", "/d/m012"].map(String::from));
        // Long names until the directory holds several blocks (an htree
        // with `dir_index`), still in the same transaction.
        for i in 0..120 {
            let p = format!("/d/{}{i:03}", "long-name-".repeat(6));
            if i % 2 == 0 {
                img.mkdir(&p, 0o700).unwrap();
            } else {
                img.symlink(&p, b"t").unwrap();
            }
            names.push(p);
        }
        // The htree's leaves keep where their last entry went: names
        // removed from them, moved within and added again in hash order
        // must each land once, in a leaf that still reads right.
        let long = |i: usize| format!("/d/{}{i:03}", "long-name-".repeat(6));
        for i in (0..120).step_by(7) {
            if i % 2 == 0 {
                img.rmdir(&long(i)).unwrap();
            } else {
                img.unlink(&long(i)).unwrap();
            }
            names.retain(|n| *n != long(i));
        }
        for i in (1..120).step_by(11).filter(|i| i % 7 != 0) {
            let to = format!("/d/moved-{i:03}");
            img.rename(&long(i), &to).unwrap();
            names.retain(|n| *n != long(i));
            names.push(to);
        }
        for i in 0..80 {
            let p = format!("/d/again-{}{i:03}", "x".repeat(i % 40));
            img.symlink(&p, b"t").unwrap();
            names.push(p);
        }
        img.flush().unwrap();
        assert_fsck_clean(&path, &format!("{what}: appended entries"));
        let d = img.lookup("/d").unwrap();
        let listed: std::collections::BTreeSet<String> = img
            .read_dir(d)
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .filter(|n| n != "." && n != "..")
            .map(|n| format!("/d/{n}"))
            .collect();
        let want: std::collections::BTreeSet<String> = names.iter().cloned().collect();
        assert_eq!(listed, want, "{what}: the directory's names");
        for n in &names {
            img.lookup(n)
                .unwrap_or_else(|e| panic!("{what}: lookup {n}: {e}"));
        }
    }
}

/// In a set-group-ID directory, a new file, directory, symlink or device
/// takes the directory's group, and a new directory the set-group-ID bit
/// too, as the kernel makes them (`inode_init_owner`); elsewhere the group
/// stays 0 and no bit is added. The kernel's mount reads what was written.
#[test]
fn a_setgid_directory_gives_its_group() {
    require_e2fsprogs!();
    let dir = TempDir::new("ns-setgid");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let sg = img.mkdir("/sg", 0o2775).unwrap();
    img.chown(sg, 0, 100).unwrap();
    let sub = img.mkdir("/sg/sub", 0o755).unwrap();
    let f = img.create("/sg/f", 0o644).unwrap();
    let l = img.symlink("/sg/l", b"f").unwrap();
    let n = img.mknod("/sg/p", NodeKind::Fifo, 0o600).unwrap();
    let plain = img.mkdir("/plain", 0o755).unwrap();
    let deeper = img.mkdir("/sg/sub/deeper", 0o700).unwrap();
    img.flush().unwrap();
    for (ino, want_mode) in [
        (sub, 0o2755),
        (f, 0o644),
        (l, 0o777),
        (n, 0o600),
        (deeper, 0o2700),
    ] {
        let i = img.inode(ino).unwrap();
        assert_eq!(i.gid, 100, "inode {ino}");
        assert_eq!(i.mode & 0o7777, want_mode, "inode {ino}");
    }
    let i = img.inode(plain).unwrap();
    assert_eq!((i.gid, i.mode & 0o7777), (0, 0o755));
    drop(img);
    assert_fsck_clean(&path, "setgid");
    let mnt = dir.path("mnt");
    if let Some(_m) = Mount::new(&path, &mnt) {
        for (p, want) in [
            ("sg/sub", 0o2755),
            ("sg/f", 0o644),
            ("sg/sub/deeper", 0o2700),
        ] {
            let md = fs::metadata(mnt.join(p)).unwrap();
            assert_eq!((md.gid(), md.mode() & 0o7777), (100, want), "{p}");
        }
        assert_eq!(fs::symlink_metadata(mnt.join("sg/l")).unwrap().gid(), 100);
    }
}
