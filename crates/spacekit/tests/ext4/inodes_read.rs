//! Reading inodes (`Image::inode`) against `debugfs stat`, the inode
//! checksum (`Image::verify_inodes`), and inode changes through the block
//! cache (`Image::set_inode_times`): e2fsck-clean, visible to debugfs,
//! refused when they must be, crash-safe.

use std::fs;
use std::path::{Path, PathBuf};

use spacekit::ext4::{AllocRequest, ChecksumKind, Ext4Error, Image, InodeTimes, OpenMode};
use spacekit::testing::Validate;

use crate::fixtures::*;
use crate::oracles::*;

/// 1024-byte inodes.
const I1024: Config = Config {
    name: "4k-i1024",
    size: "22M",
    args: &[
        "-b",
        "4096",
        "-g",
        "1024",
        "-N",
        "512",
        "-I",
        "1024",
        "-O",
        "^has_journal",
    ],
};

/// Configurations for `mkfs.ext4 -d`: 1 KiB blocks with 128- and 256-byte
/// inodes, 4 KiB, 64 KiB, and one without checksums.
const POPULATED: &[Config] = &[
    Config {
        name: "pop-1k",
        size: "16M",
        args: &["-b", "1024", "-N", "256", "-O", "^has_journal"],
    },
    Config {
        name: "pop-1k-i128",
        size: "16M",
        args: &["-b", "1024", "-N", "256", "-I", "128", "-O", "^has_journal"],
    },
    Config {
        name: "pop-4k",
        size: "32M",
        args: &["-b", "4096", "-N", "512"],
    },
    Config {
        name: "pop-64k",
        size: "64M",
        args: &["-b", "65536", "-N", "512", "-O", "^has_journal"],
    },
    Config {
        name: "pop-4k-nocsum",
        size: "32M",
        args: &["-b", "4096", "-N", "512", "-O", "^metadata_csum"],
    },
];

/// A source tree: directories (one empty), empty and small files, a 3 MB
/// file, a hard link, a fast and a slow symlink.
fn source_tree(dir: &TempDir) -> PathBuf {
    let src = dir.path("src");
    fs::create_dir_all(src.join("d1/d2")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    fs::write(src.join("hello.txt"), b"hello\n").unwrap();
    fs::write(src.join("d1/zero"), b"").unwrap();
    fs::write(src.join("d1/d2/small"), vec![7u8; 5000]).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) as u8)
        .collect();
    fs::write(src.join("big"), big).unwrap();
    fs::hard_link(src.join("hello.txt"), src.join("d1/hardlink")).unwrap();
    std::os::unix::fs::symlink("hello.txt", src.join("fast-link")).unwrap();
    std::os::unix::fs::symlink("d1/".repeat(30), src.join("slow-link")).unwrap();
    src
}

fn mkfs_populated(dir: &TempDir, cfg: &Config, src: &Path) -> PathBuf {
    let path = dir.path(&format!("{}.img", cfg.name));
    let out = e2fs("mkfs.ext4")
        .args(["-F", "-q", "-U", UUID, "-E"])
        .arg(format!("hash_seed={UUID}"))
        .args(cfg.args)
        .arg("-d")
        .arg(src)
        .arg(&path)
        .arg(cfg.size)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.ext4 -d {:?}: {}",
        cfg.args,
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// What `debugfs -R "stat <n>"` prints, parsed.
#[derive(Debug)]
struct Stat {
    kind: String,
    perm: u16,
    flags: u32,
    generation: u32,
    size: u64,
    links: u16,
    blockcount: u64,
    mtime: u32,
    checksum: Option<u32>,
}

/// The token after the first `key` in `text`.
fn token<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"));
    text[at + key.len()..].split_whitespace().next().unwrap()
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn debugfs_stat(path: &Path, ino: u32) -> Stat {
    let out = e2fs("debugfs")
        .arg("-R")
        .arg(format!("stat <{ino}>"))
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let kind_at = text.find("Type: ").unwrap() + 6;
    let kind_end = text[kind_at..].find("Mode:").unwrap() + kind_at;
    let mtime = token(&text, "mtime: ");
    Stat {
        kind: text[kind_at..kind_end].trim().to_string(),
        perm: u16::from_str_radix(token(&text, "Mode: "), 8).unwrap(),
        flags: hex(token(&text, "Flags: ")),
        generation: token(&text, "Generation: ").parse().unwrap(),
        size: token(&text, "Size: ").parse().unwrap(),
        links: token(&text, "Links: ").parse().unwrap(),
        blockcount: token(&text, "Blockcount: ").parse().unwrap(),
        mtime: hex(mtime.split(':').next().unwrap()),
        checksum: text
            .contains("Inode checksum: ")
            .then(|| hex(token(&text, "Inode checksum: "))),
    }
}

fn kind_name(mode: u16) -> &'static str {
    match mode & 0xF000 {
        0x8000 => "regular",
        0x4000 => "directory",
        0xA000 => "symlink",
        0x2000 => "character special",
        0x6000 => "block special",
        0x1000 => "FIFO",
        0xC000 => "socket",
        _ => "bad type",
    }
}

/// Every in-use inode agrees with debugfs and verifies; returns how many
/// were compared.
fn check_all_inodes(path: &Path, what: &str) -> usize {
    let img = open_ro(path);
    let csum = img.info().checksums == ChecksumKind::MetadataCsum;
    let mut n = 0;
    for ino in 1..=img.info().inodes_count {
        if !img.inode_in_use(ino).unwrap() {
            continue;
        }
        n += 1;
        let i = img.inode(ino).unwrap();
        let s = debugfs_stat(path, ino);
        let w = format!("{what}: inode {ino}: {s:?} vs {i:?}");
        assert_eq!(i.number, ino);
        assert_eq!(kind_name(i.mode), s.kind, "{w}");
        assert_eq!(i.mode & 0o7777, s.perm, "{w}");
        assert_eq!(i.flags, s.flags, "{w}");
        assert_eq!(i.generation, s.generation, "{w}");
        assert_eq!(i.size, s.size, "{w}");
        assert_eq!(i.links_count, s.links, "{w}");
        assert_eq!(i.blocks, s.blockcount, "{w}");
        assert_eq!(i.mtime, s.mtime, "{w}");
        assert_eq!(i.raw().len(), img.info().inode_size as usize);
        assert!(i.checksum_ok, "{w}");
        if csum {
            // debugfs prints the stored checksum; ours is computed over
            // all s_inode_size bytes and matches it.
            assert_eq!(i.stored_checksum, s.checksum, "{w}");
            assert_eq!(i.computed_checksum, i.stored_checksum, "{w}");
        } else {
            assert_eq!(i.stored_checksum, None, "{w}");
        }
    }
    assert!(img.verify_inodes().unwrap().is_empty(), "{what}");
    assert!(n >= 11, "{what}: {n} inodes in use");
    n
}

#[test]
fn every_inode_agrees_with_debugfs() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-read");
    for cfg in CONFIGS.iter().chain([&K1_I128, &I1024]) {
        let path = mkfs(&dir, cfg);
        check_all_inodes(&path, cfg.name);
        fs::remove_file(&path).unwrap();
    }
    let src = source_tree(&dir);
    for cfg in POPULATED {
        let path = mkfs_populated(&dir, cfg, &src);
        let n = check_all_inodes(&path, cfg.name);
        assert_eq!(n, 11 + 9, "{}: {n}", cfg.name);
        // Nonzero generations (mkfs writes 0), re-checksummed by debugfs.
        let img = open_ro(&path);
        let first = img.info().first_ino;
        let cmds: String = (first..first + 10)
            .map(|ino| format!("sif <{ino}> generation {}\n", 0x1234_5678 + ino))
            .collect();
        drop(img);
        debugfs_w(&path, &dir, &cmds);
        check_all_inodes(&path, &format!("{}: generations", cfg.name));
        let img = open_ro(&path);
        assert_eq!(img.inode(first).unwrap().generation, 0x1234_5678 + first);
        // The 3 MB file, found by size.
        let big = (first..first + 12)
            .map(|i| img.inode(i).unwrap())
            .find(|i| i.size == 3_000_000)
            .expect("the big file");
        assert!(big.is_file() && big.has_extents());
        assert!(big.blocks >= 3_000_000 / 512, "{}: {big:?}", cfg.name);
        fs::remove_file(&path).unwrap();
    }
}

/// With `i_extra_isize` below 4 there is no `i_checksum_hi`: the checksum
/// is 16 bits and bytes 0x82..0x84 are checksummed as data (what debugfs
/// writes after `sif extra_isize 0`).
#[test]
fn checksum_without_hi_field() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-extra");
    let src = source_tree(&dir);
    let path = mkfs_populated(&dir, &POPULATED[0], &src);
    let ino = open_ro(&path).info().first_ino + 1;
    debugfs_w(&path, &dir, &format!("sif <{ino}> extra_isize 0\n"));
    let img = open_ro(&path);
    let i = img.inode(ino).unwrap();
    assert_eq!(i.extra_isize, 0);
    assert!(i.checksum_ok, "{i:?}");
    assert!(i.stored_checksum.unwrap() <= 0xFFFF);
    assert_eq!(i.stored_checksum, debugfs_stat(&path, ino).checksum);
    assert!(img.verify_inodes().unwrap().is_empty());
    drop(img);
    // A change spliced into the 16-bit checksum.
    let mut img = open_rw(&path);
    img.set_inode_times(
        ino,
        InodeTimes {
            mtime: Some(1_111_111_111),
            ..InodeTimes::default()
        },
    )
    .unwrap();
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "extra_isize 0");
    assert_eq!(debugfs_stat(&path, ino).mtime, 1_111_111_111);
    assert!(open_ro(&path).verify_inodes().unwrap().is_empty());
}

#[test]
fn patched_inode_is_fsck_clean_and_seen_by_debugfs() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-patch");
    let src = source_tree(&dir);
    for cfg in POPULATED {
        let path = mkfs_populated(&dir, cfg, &src);
        let mut img = open_rw(&path);
        let root_before = img.inode(2).unwrap();
        let ino = img.info().first_ino + 2;
        let before = img.inode(ino).unwrap();
        let times = InodeTimes {
            atime: Some(0x8000_0001),
            ctime: None,
            mtime: Some(1_234_567_890),
        };
        img.set_inode_times(ino, times).unwrap();
        img.set_inode_times(
            2,
            InodeTimes {
                ctime: Some(1_500_000_000),
                ..InodeTimes::default()
            },
        )
        .unwrap();
        assert!(img.is_dirty());
        img.validate().unwrap();
        // Read back through the block cache before the flush.
        let after = img.inode(ino).unwrap();
        assert_eq!(after.mtime, 1_234_567_890);
        assert_eq!(after.atime, 0x8000_0001);
        assert_eq!(after.ctime, before.ctime);
        assert_eq!(after.size, before.size);
        assert!(after.checksum_ok, "{}: {after:?}", cfg.name);
        assert_eq!(img.inode(2).unwrap().ctime, 1_500_000_000);
        assert_eq!(img.inode(2).unwrap().mtime, root_before.mtime);
        // Nothing on disk yet.
        assert_eq!(debugfs_stat(&path, ino).mtime, before.mtime);
        img.flush().unwrap();
        assert!(!img.is_dirty());
        drop(img);
        assert_fsck_clean(&path, cfg.name);
        assert_eq!(debugfs_stat(&path, ino).mtime, 1_234_567_890);
        check_all_inodes(&path, &format!("{}: patched", cfg.name));
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn corrupt_inode_checksum_is_reported() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-corrupt");
    let src = source_tree(&dir);
    for cfg in [&POPULATED[0], &POPULATED[1], &POPULATED[2]] {
        let base = mkfs_populated(&dir, cfg, &src);
        let img = open_ro(&base);
        let ino = img.info().first_ino + 1;
        let (bs, isz, ipg) = (
            img.info().block_size as u64,
            img.info().inode_size as u64,
            img.info().inodes_per_group,
        );
        let table = img.group((ino - 1) / ipg).unwrap().inode_table;
        let at = table * bs + u64::from((ino - 1) % ipg) * isz;
        drop(img);
        let p = copy(&base, &dir, "corrupt.img");
        let mut b = fs::read(&p).unwrap();
        b[at as usize + 0x10] ^= 0x40; // a bit of i_mtime
        fs::write(&p, &b).unwrap();
        let mut img = open_rw(&p);
        let i = img.inode(ino).unwrap();
        assert!(!i.checksum_ok, "{}", cfg.name);
        assert_ne!(i.stored_checksum, i.computed_checksum);
        let bad = img.verify_inodes().unwrap();
        assert_eq!(bad.len(), 1, "{}: {bad:?}", cfg.name);
        assert_eq!(bad[0].ino, ino);
        assert!(img.inode(ino - 1).unwrap().checksum_ok);
        // A change to the damaged inode is refused (never re-signed).
        let err = img
            .set_inode_times(
                ino,
                InodeTimes {
                    atime: Some(5),
                    ..InodeTimes::default()
                },
            )
            .unwrap_err();
        assert!(
            matches!(err, Ext4Error::BadChecksum { what: "inode", .. }),
            "{}: {err}",
            cfg.name
        );
        assert!(!img.is_dirty(), "{}", cfg.name);
        img.flush().unwrap();
        drop(img);
        assert_eq!(open_ro(&p).verify_inodes().unwrap()[0].ino, ino);
        let (code, text) = e2fsck(&p);
        assert_ne!(code, 0, "{}:\n{text}", cfg.name);
        assert!(text.contains("checksum"), "{}:\n{text}", cfg.name);
    }
}

#[test]
fn refused_writes_and_bad_inode_numbers() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-refused");
    let path = mkfs(&dir, &K1);
    let bytes = fs::read(&path).unwrap();
    let count = open_ro(&path).info().inodes_count;
    let t = InodeTimes {
        mtime: Some(1),
        ..InodeTimes::default()
    };
    let mut ro = Image::open(&path, OpenMode::ReadOnly).unwrap();
    assert!(matches!(ro.set_inode_times(2, t), Err(Ext4Error::ReadOnly)));
    assert!(!ro.is_dirty());
    drop(ro);
    let mut img = open_rw(&path);
    for ino in [0, count + 1, u32::MAX] {
        assert!(
            matches!(
                img.inode(ino),
                Err(Ext4Error::InvalidArgument { what: "ino", .. })
            ),
            "{ino}"
        );
        assert!(
            matches!(
                img.set_inode_times(ino, t),
                Err(Ext4Error::InvalidArgument { what: "ino", .. })
            ),
            "{ino}"
        );
    }
    assert_eq!(img.inode(count).unwrap().number, count);
    // An inode of an INODE_UNINIT group must be allocated first.
    let ipg = img.info().inodes_per_group;
    let g = (1..img.info().group_count)
        .find(|&g| img.group(g).unwrap().flags & spacekit::ext4::BG_INODE_UNINIT != 0)
        .unwrap();
    assert!(matches!(
        img.set_inode_times(g * ipg + 1, t),
        Err(Ext4Error::InvalidArgument { what: "ino", .. })
    ));
    assert!(!img.is_dirty());
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), bytes);
}

/// A failure injected at every step of a flush carrying an inode change,
/// a block allocation and an inode allocation: after reopening, the image
/// is exactly the before or the after state.
#[test]
fn crash_during_inode_flush_is_before_or_after() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-crash");
    let src = source_tree(&dir);
    for cfg in [&POPULATED[0], &POPULATED[1]] {
        let base = mkfs_populated(&dir, cfg, &src);
        let ino = open_ro(&base).info().first_ino + 2;
        let txn = |img: &mut Image| {
            img.set_inode_times(
                ino,
                InodeTimes {
                    mtime: Some(1_234_567_890),
                    ctime: Some(1_234_567_891),
                    ..InodeTimes::default()
                },
            )
            .unwrap();
            img.set_inode_times(
                2,
                InodeTimes {
                    atime: Some(7),
                    ..InodeTimes::default()
                },
            )
            .unwrap();
            let b = img
                .alloc_blocks(AllocRequest {
                    goal: None,
                    len: 3,
                    align: 1,
                })
                .unwrap();
            img.free_blocks(b, 3).unwrap();
        };
        let before = fs::read(&base).unwrap();
        let reference = copy(&base, &dir, "reference.img");
        let mut img = open_rw(&reference);
        txn(&mut img);
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&reference, cfg.name);
        let after = fs::read(&reference).unwrap();
        assert_ne!(before, after);

        let (mut saw_before, mut saw_after) = (false, false);
        for n in 0.. {
            let p = copy(&base, &dir, "crash.img");
            let (mut img, faults) = open_faulty(&p);
            txn(&mut img);
            faults.fail_write_after(n);
            let res = img.flush();
            drop(img);
            if res.is_ok() {
                assert_eq!(fs::read(&p).unwrap(), after, "{}", cfg.name);
                break;
            }
            let img = open_rw(&p);
            assert!(
                img.verify_inodes().unwrap().is_empty(),
                "{} step {n}",
                cfg.name
            );
            drop(img);
            let now = fs::read(&p).unwrap();
            if now == before {
                saw_before = true;
            } else if now == after {
                saw_after = true;
            } else {
                panic!("{}: step {n}: neither before nor after", cfg.name);
            }
            assert_fsck_clean(&p, &format!("{} step {n}", cfg.name));
        }
        assert!(saw_before && saw_after, "{}", cfg.name);
    }
}
