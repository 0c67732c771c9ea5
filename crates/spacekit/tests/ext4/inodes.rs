//! Inode allocation and freeing (INODE_UNINIT groups materialised,
//! `bg_itable_unused` and directory counts), e2fsck-clean.

use std::fs;

use spacekit::ext4::{ChecksumKind, BG_BLOCK_UNINIT, BG_INODE_UNINIT};

use crate::fixtures::*;
use crate::oracles::*;

#[test]
fn inode_round_trip_is_fsck_clean() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes");
    for cfg in CONFIGS {
        let path = mkfs(&dir, cfg);
        let mut img = open_rw(&path);
        let ipg = img.info().inodes_per_group;
        let first_ino = img.info().first_ino;
        // From group 0: the first inode after the reserved ones and
        // lost+found (in group 1 when a group has fewer inodes than that).
        let ga = first_ino / ipg;
        let before_a = img.group(ga).unwrap();
        let a = img.alloc_inode(None, false).unwrap();
        assert!(a >= first_ino && (a - 1) / ipg == ga, "{}: {a}", cfg.name);
        assert!(img.inode_in_use(a).unwrap());
        // A directory in an INODE_UNINIT (and BLOCK_UNINIT) group (group 2
        // without checksums: no UNINIT flags then).
        let has_uninit = img.info().checksums != ChecksumKind::None;
        let ug = (1..img.info().group_count)
            .find(|&g| {
                let f = img.group(g).unwrap().flags;
                f & BG_INODE_UNINIT != 0 && f & BG_BLOCK_UNINIT != 0
            })
            .unwrap_or(2);
        assert!(has_uninit || img.group(ug).unwrap().flags == 0);
        let d = img.alloc_inode(Some(ug), true).unwrap();
        assert_eq!(d, ug * ipg + 1, "{}", cfg.name);
        let gi = img.group(ug).unwrap();
        assert_eq!(
            gi.flags & (BG_INODE_UNINIT | BG_BLOCK_UNINIT),
            0,
            "{}",
            cfg.name
        );
        assert_eq!(gi.used_dirs, 1);
        assert_eq!(gi.free_inodes, ipg - 1);
        if img.info().checksums != ChecksumKind::None {
            assert_eq!(gi.itable_unused, ipg - 1);
        }
        assert_eq!(img.group(ga).unwrap().free_inodes, before_a.free_inodes - 1);
        assert_verify_clean(&img, cfg.name);
        img.flush().unwrap();
        drop(img);
        let (code, text) = e2fsck(&path);
        assert_eq!(code, 4, "{}:\n{text}", cfg.name);
        assert!(
            text.contains("Inode bitmap differences:  -"),
            "{}:\n{text}",
            cfg.name
        );
        check_against_dumpe2fs(&open_ro(&path), &path, cfg.name);

        let mut img = open_rw(&path);
        img.free_inode(d, true).unwrap();
        img.free_inode(a, false).unwrap();
        assert!(!img.inode_in_use(a).unwrap());
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, cfg.name);
        let img = open_ro(&path);
        assert_verify_clean(&img, cfg.name);
        check_against_dumpe2fs(&img, &path, cfg.name);
        fs::remove_file(&path).unwrap();
    }
}

/// An inode taken from an inode-table block that lies wholly past its
/// group's used inodes (here an INODE_UNINIT group's first block, filled
/// with garbage as a reused device would hold it) starts that block from
/// zeros instead of reading it: after the flush the block's other slots
/// are zero, and e2fsck is clean once the inode is freed again. (Without
/// descriptor checksums there is no such watermark: e2fsck reads every
/// slot, so the block is read and kept, and garbage there is damage.)
#[test]
fn a_block_past_the_used_inodes_starts_from_zeros() {
    require_e2fsprogs!();
    let dir = TempDir::new("inodes-fresh");
    for cfg in CONFIGS {
        let path = mkfs(&dir, cfg);
        let img = open_ro(&path);
        let info = img.info().clone();
        if info.checksums == ChecksumKind::None {
            continue;
        }
        let ug = (1..info.group_count)
            .find(|&g| {
                let gi = img.group(g).unwrap();
                gi.flags & BG_INODE_UNINIT != 0 || gi.itable_unused == info.inodes_per_group
            })
            .unwrap_or_else(|| panic!("{}: no group with unused inodes", cfg.name));
        let table = img.group(ug).unwrap().inode_table;
        drop(img);
        let bs = u64::from(info.block_size);
        let garbage = vec![0xA5u8; bs as usize];
        {
            use std::os::unix::fs::FileExt;
            let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(&garbage, table * bs).unwrap();
        }
        let mut img = open_rw(&path);
        let ino = img.alloc_inode(Some(ug), false).unwrap();
        assert_eq!(ino, ug * info.inodes_per_group + 1, "{}", cfg.name);
        img.free_inode(ino, false).unwrap();
        img.flush().unwrap();
        drop(img);
        let mut block = vec![0u8; bs as usize];
        {
            use std::os::unix::fs::FileExt;
            let f = fs::File::open(&path).unwrap();
            f.read_exact_at(&mut block, table * bs).unwrap();
        }
        assert!(
            block.iter().all(|&b| b == 0),
            "{}: the block past the used inodes was read, not started from zeros",
            cfg.name
        );
        assert_fsck_clean(&path, cfg.name);
        fs::remove_file(&path).unwrap();
    }
}
