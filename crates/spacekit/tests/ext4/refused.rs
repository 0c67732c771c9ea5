//! Corrupt and unsupported images: typed errors naming the field or
//! feature, and never a write.

use std::fs;
use std::path::PathBuf;

use spacekit::ext4::{AllocRequest, Ext4Error, Image, OpenMode};

use crate::fixtures::*;

#[test]
fn corrupt_and_unsupported_images_are_refused_without_writing() {
    require_e2fsprogs!();
    let dir = TempDir::new("corrupt");
    let base = mkfs(&dir, &K1);
    let info = open_ro(&base).info().clone();
    let bs = info.block_size as usize;
    let sb = 1024usize;
    let gdt = (info.first_data_block as usize + 1) * bs;
    let desc = info.desc_size as usize;

    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let corrupt: Vec<(&str, Option<u32>, Edit)> = vec![
        ("s_magic", None, Box::new(move |b| b[sb + 0x38] = 0x54)),
        (
            "s_log_block_size",
            None,
            Box::new(move |b| put_u32(b, sb + 0x18, 7)),
        ),
        (
            "s_blocks_per_group",
            None,
            Box::new(move |b| put_u32(b, sb + 0x20, 0)),
        ),
        (
            "s_blocks_per_group",
            None,
            Box::new(move |b| put_u32(b, sb + 0x20, 8 * 1024 + 8)),
        ),
        (
            "s_blocks_per_group",
            None,
            Box::new(move |b| put_u32(b, sb + 0x20, 1020)),
        ),
        (
            "s_clusters_per_group",
            None,
            Box::new(move |b| put_u32(b, sb + 0x24, 2048)),
        ),
        (
            "s_inodes_per_group",
            None,
            Box::new(move |b| put_u32(b, sb + 0x28, 0)),
        ),
        (
            "s_inodes_count",
            None,
            Box::new(move |b| put_u32(b, sb, 300)),
        ),
        (
            "s_first_data_block",
            None,
            Box::new(move |b| put_u32(b, sb + 0x14, 0)),
        ),
        (
            "s_free_blocks_count",
            None,
            Box::new(move |b| put_u32(b, sb + 0x0C, 9000)),
        ),
        ("s_inode_size", None, Box::new(move |b| b[sb + 0x58] = 100)),
        ("s_desc_size", None, Box::new(move |b| b[sb + 0xFE] = 48)),
        (
            "s_reserved_gdt_blocks",
            None,
            Box::new(move |b| b[sb + 0xCF] = 0x10),
        ),
        // Descriptors pointing outside the file system or onto other
        // metadata.
        (
            "bg_block_bitmap",
            Some(2),
            Box::new(move |b| put_u32(b, gdt + 2 * desc, 9000)),
        ),
        (
            "bg_inode_bitmap",
            Some(3),
            Box::new(move |b| put_u32(b, gdt + 3 * desc + 4, 0)),
        ),
        (
            "bg_inode_table",
            Some(1),
            Box::new(move |b| {
                let it0 = get_u32(b, gdt + 8);
                put_u32(b, gdt + desc + 8, it0 + 1)
            }),
        ),
        (
            "bg_inode_table",
            Some(7),
            Box::new(move |b| put_u32(b, gdt + 7 * desc + 8, 8190)),
        ),
        (
            "bg_free_blocks_count",
            Some(4),
            Box::new(move |b| b[gdt + 4 * desc + 0x0D] = 0x7F),
        ),
        (
            "bg_free_inodes_count",
            Some(4),
            Box::new(move |b| b[gdt + 4 * desc + 0x0E] = 33),
        ),
        // Truncated files.
        (
            "s_blocks_count",
            None,
            Box::new(|b| b.truncate(b.len() / 2)),
        ),
        (
            "s_blocks_count",
            None,
            Box::new(|b| b.truncate(b.len() - 1)),
        ),
        ("s_magic", None, Box::new(|b| b.truncate(1500))),
    ];
    for (i, (field, group, f)) in corrupt.iter().enumerate() {
        let p = copy(&base, &dir, &format!("corrupt{i}.img"));
        let mut b = fs::read(&p).unwrap();
        f(&mut b);
        fs::write(&p, &b).unwrap();
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
            let e = open_err(&p, mode);
            assert_eq!(corrupt_field(&e), (*field, *group), "case {i}: {e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    // Unsupported features, set by hand (features are checked before any
    // checksum) and from mkfs.
    let feat = |off: usize, bit: u32| -> PathBuf {
        let p = copy(&base, &dir, &format!("feat{off:x}-{bit:x}.img"));
        let mut b = fs::read(&p).unwrap();
        let v = get_u32(&b, sb + off) | bit;
        put_u32(&mut b, sb + off, v);
        fs::write(&p, &b).unwrap();
        p
    };
    let unsupported = |e: Ext4Error| match e {
        Ext4Error::Unsupported { feature } => feature,
        other => panic!("expected Unsupported, got {other:?}"),
    };
    for (off, bit, name) in [
        (0x60, 0x4, "needs_recovery"),
        (0x60, 0x10, "meta_bg"),
        (0x64, 0x200, "bigalloc"),
    ] {
        let p = feat(off, bit);
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
            assert_eq!(unsupported(open_err(&p, mode)), name);
        }
        // A journal to replay is named as such, with what to do.
        let m = open_err(&p, OpenMode::ReadOnly).to_string();
        assert_eq!(
            m.contains("mounted") && m.contains("e2fsck -fy"),
            name == "needs_recovery",
            "{m}"
        );
    }
    // Write-only refusals: mmp and an unknown ro_compat bit open read-only.
    let p = feat(0x60, 0x100);
    assert_eq!(unsupported(open_err(&p, OpenMode::ReadWrite)), "mmp");
    open_ro(&p);
    let p = feat(0x64, 0x4000_0000);
    assert!(matches!(
        open_err(&p, OpenMode::ReadWrite),
        Ext4Error::UnknownFeatures {
            kind: "ro_compat",
            bits: 0x4000_0000
        }
    ));
    open_ro(&p);
    let p = feat(0x60, 0x1000_0000);
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        assert!(matches!(
            open_err(&p, mode),
            Ext4Error::UnknownFeatures {
                kind: "incompat",
                bits: 0x1000_0000
            }
        ));
    }
    const BIGALLOC: &[&str] = &["-b", "1024", "-g", "1024", "-O", "^has_journal,bigalloc"];
    const META_BG: &[&str] = &[
        "-b",
        "1024",
        "-g",
        "1024",
        "-O",
        "^has_journal,meta_bg,^resize_inode",
    ];
    for (name, args) in [("bigalloc", BIGALLOC), ("meta_bg", META_BG)] {
        let cfg = Config {
            name,
            size: "8M",
            args,
        };
        let p = mkfs(&dir, &cfg);
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
            assert_eq!(unsupported(open_err(&p, mode)), name);
        }
    }
    // quota: its usage files would fall behind every write (e2fsck:
    // "Usage inconsistent"), so writes are refused; reading works. The
    // CLI's write verbs leave such an image byte-identical
    // (`spacekit-cli/tests/cli.rs`).
    const QUOTA: &[&str] = &["-b", "4096", "-O", "quota,project", "-I", "256"];
    let cfg = Config {
        name: "quota",
        size: "16M",
        args: QUOTA,
    };
    let p = mkfs(&dir, &cfg);
    assert_eq!(unsupported(open_err(&p, OpenMode::ReadWrite)), "quota");
    let mut img = open_ro(&p);
    let root = img.lookup("/").unwrap();
    let names: Vec<Vec<u8>> = img
        .read_dir(root)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.iter().any(|n| n == b"lost+found"), "{names:?}");
    drop(img);
    // Not an image at all.
    let p = dir.path("zeros.img");
    fs::write(&p, vec![0u8; 1 << 20]).unwrap();
    assert_eq!(
        corrupt_field(&open_err(&p, OpenMode::ReadWrite)).0,
        "s_magic"
    );
    assert!(matches!(
        Image::open(dir.path("missing.img"), OpenMode::ReadOnly),
        Err(Ext4Error::Io { .. })
    ));

    // A read-only image refuses every change and a flush writes nothing.
    let mtime = fs::metadata(&base).unwrap().modified().unwrap();
    let mut img = open_ro(&base);
    assert!(matches!(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 1
        }),
        Err(Ext4Error::ReadOnly)
    ));
    assert!(matches!(
        img.alloc_inode(None, false),
        Err(Ext4Error::ReadOnly)
    ));
    assert!(matches!(img.free_blocks(500, 1), Err(Ext4Error::ReadOnly)));
    assert!(matches!(img.free_inode(2, true), Err(Ext4Error::ReadOnly)));
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::metadata(&base).unwrap().modified().unwrap(), mtime);
}

/// A read-write open of an image whose directory cannot take the redo
/// log is refused at the open, naming the log, not at the first flush
/// after all the work. The directory is made immutable (`chattr +i`),
/// which stops root too; without chattr the test is skipped.
#[test]
fn an_image_whose_directory_cannot_take_the_redo_log_is_refused_at_open() {
    require_e2fsprogs!();
    let dir = TempDir::new("redo-dir");
    let img = mkfs(&dir, &K1);
    let sub = dir.path("ro");
    fs::create_dir_all(&sub).unwrap();
    let moved = sub.join("fs.img");
    fs::rename(&img, &moved).unwrap();
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(&sub)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        println!("skipping: chattr +i does not work here");
        return;
    }
    let rw = Image::open(&moved, OpenMode::ReadWrite);
    let ro = Image::open(&moved, OpenMode::ReadOnly);
    assert!(chattr("-i"), "chattr -i");
    match rw {
        Err(Ext4Error::Io { source, .. }) => {
            let m = source.to_string();
            assert!(m.contains("fs.img.spacekit-redo"), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened read-write"),
    }
    assert!(ro.is_ok(), "a read-only open needs no log");
}
