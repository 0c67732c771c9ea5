//! Block allocation and freeing: byte-identical to debugfs's, e2fsck sees
//! allocations as leaks and allocate-then-free as clean, frees spanning
//! groups, and random sequences checked against dumpe2fs (BLOCK_UNINIT
//! groups materialised on the way).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::ext4::{AllocRequest, Ext4Error, Image, BG_BLOCK_UNINIT};
use spacekit::testing::Validate;

use crate::fixtures::*;
use crate::oracles::*;

/// Allocates `len` blocks at `goal` with spacekit on one copy and with the
/// debugfs recipe on another; the two images must be byte-identical.
fn alloc_vs_debugfs(base: &Path, dir: &TempDir, what: &str, goal: u64, len: u32) {
    let ours = copy(base, dir, "spacekit.img");
    let theirs = copy(base, dir, "debugfs.img");
    let mut img = open_rw(&ours);
    let (g, _) = img.info().clone().group_of_block(goal).unwrap();
    let before = img.group(g).unwrap();
    let sb_free = img.free_blocks_count();
    let got = img
        .alloc_blocks(AllocRequest {
            goal: Some(goal),
            len,
            align: 1,
        })
        .unwrap();
    assert_eq!(got, goal, "{what}: the goal was free");
    img.validate().unwrap();
    let after = img.group(g).unwrap();
    assert_eq!(after.flags, before.flags & !BG_BLOCK_UNINIT, "{what}");
    img.flush().unwrap();
    drop(img);

    let mut cmds = String::new();
    if before.flags & BG_BLOCK_UNINIT != 0 {
        cmds += &format!("set_bg {g} flags {}\n", before.flags & !BG_BLOCK_UNINIT);
    }
    cmds += &format!("setb {goal} {len}\n");
    cmds += &format!(
        "set_bg {g} free_blocks_count {}\n",
        before.free_blocks - len
    );
    cmds += &format!("ssv free_blocks_count {}\n", sb_free - u64::from(len));
    debugfs_w(&theirs, dir, &cmds);

    let (a, b) = (fs::read(&ours).unwrap(), fs::read(&theirs).unwrap());
    assert_eq!(a.len(), b.len());
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        panic!(
            "{what}: spacekit and debugfs differ first at byte {i} (block {}): {:#x} vs {:#x}",
            i / open_ro(&ours).info().block_size as usize,
            a[i],
            b[i]
        );
    }
    assert_ne!(a, fs::read(base).unwrap(), "{what}: the image changed");
    // e2fsck sees exactly the allocation as a leak.
    let (code, text) = e2fsck(&ours);
    assert_eq!(code, 4, "{what}:\n{text}");
    let want: BTreeSet<u64> = (goal..goal + u64::from(len)).collect();
    assert_eq!(fsck_leaked_blocks(&text), want, "{what}:\n{text}");
    let img = open_ro(&ours);
    assert_verify_clean(&img, what);
    check_against_dumpe2fs(&img, &ours, what);
}

#[test]
fn allocation_is_byte_identical_to_debugfs() {
    require_e2fsprogs!();
    let dir = TempDir::new("debugfs");
    for cfg in CONFIGS {
        let base = mkfs(&dir, cfg);
        let img = open_ro(&base);
        // An initialised group (group 0)...
        let (s, e) = img.free_extents(0).unwrap()[0];
        let goal0 = if e >= s + 12 { s + 3 } else { s };
        let len = (e - goal0 + 1).min(10) as u32;
        // ... and a BLOCK_UNINIT one (with a superblock backup if there is
        // one, so the effective bitmap has its layout in it).
        let ug = (0..img.info().group_count)
            .find(|&g| {
                let gi = img.group(g).unwrap();
                gi.flags & BG_BLOCK_UNINIT != 0 && gi.has_super
            })
            .or_else(|| block_uninit_group(&img))
            .unwrap_or(2);
        let (us, _) = img.free_extents(ug).unwrap()[0];
        drop(img);
        alloc_vs_debugfs(&base, &dir, &format!("{}: group 0", cfg.name), goal0, len);
        alloc_vs_debugfs(
            &base,
            &dir,
            &format!("{}: uninit group {ug}", cfg.name),
            us + 5,
            7,
        );
        fs::remove_file(&base).unwrap();
    }
}

#[test]
fn allocate_then_free_is_fsck_clean_and_leaks_show() {
    require_e2fsprogs!();
    let dir = TempDir::new("roundtrip");
    for cfg in CONFIGS {
        let path = mkfs(&dir, cfg);
        let pristine = fs::read(&path).unwrap();
        let mut img = open_rw(&path);
        let info = img.info().clone();
        let ug = block_uninit_group_without_backup(&img).or_else(|| block_uninit_group(&img));
        let mut reqs = vec![
            AllocRequest {
                goal: None,
                len: 1,
                align: 1,
            },
            AllocRequest {
                goal: None,
                len: 17,
                align: 16,
            },
            AllocRequest {
                goal: Some(info.blocks_count / 2),
                len: 64,
                align: 64,
            },
            AllocRequest {
                goal: Some(info.blocks_count - 1),
                len: 5,
                align: 1,
            },
        ];
        if let Some(g) = ug {
            let first = img.group(g).unwrap().first_block;
            reqs.push(AllocRequest {
                goal: Some(first + 1),
                len: 8,
                align: 8,
            });
        }
        let mut got = Vec::new();
        let mut want = BTreeSet::new();
        for r in &reqs {
            let b = img.alloc_blocks(*r).unwrap();
            img.validate().unwrap();
            assert_eq!(b % u64::from(r.align), 0, "{}: {r:?}", cfg.name);
            let (g, bit) = info.group_of_block(b).unwrap();
            assert!(
                bit + r.len <= info.blocks_in_group(g),
                "{}: one group",
                cfg.name
            );
            if let (Some(u), Some(goal)) = (ug, r.goal) {
                if r.len == 8 {
                    assert_eq!(g, u, "{}: {r:?}", cfg.name);
                    assert!(b >= goal, "{}: {r:?}", cfg.name);
                }
            }
            for x in b..b + u64::from(r.len) {
                assert!(img.block_in_use(x).unwrap());
                assert!(want.insert(x), "{}: block {x} allocated twice", cfg.name);
            }
            got.push((b, r.len));
        }
        if let Some(g) = ug {
            assert_eq!(
                img.group(g).unwrap().flags & BG_BLOCK_UNINIT,
                0,
                "{}",
                cfg.name
            );
        }
        assert_verify_clean(&img, cfg.name);
        img.flush().unwrap();
        assert!(!Image::redo_log_path(&path).exists());
        drop(img);

        let (code, text) = e2fsck(&path);
        assert_eq!(code, 4, "{}:\n{text}", cfg.name);
        assert_eq!(fsck_leaked_blocks(&text), want, "{}:\n{text}", cfg.name);
        check_against_dumpe2fs(&open_ro(&path), &path, cfg.name);

        let mut img = open_rw(&path);
        assert_verify_clean(&img, cfg.name);
        for &(b, len) in got.iter().rev() {
            img.free_blocks(b, len.into()).unwrap();
            img.validate().unwrap();
        }
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, cfg.name);
        let img = open_ro(&path);
        assert_verify_clean(&img, cfg.name);
        check_against_dumpe2fs(&img, &path, cfg.name);
        // Only the materialised group's flag and bitmap may differ.
        let now = fs::read(&path).unwrap();
        if ug.is_none() {
            assert_eq!(now, pristine, "{}", cfg.name);
        }
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn free_blocks_spanning_groups() {
    require_e2fsprogs!();
    let dir = TempDir::new("span");
    let path = mkfs(&dir, &CONFIGS[3]); // 1k, 32 groups of 512
    let mut img = open_rw(&path);
    let info = img.info().clone();
    // Groups 10 and 11 hold no backup and (flex_bg) no metadata: allocate
    // the last 20 blocks of group 10 and the first 30 of group 11, then free
    // the 50 blocks with one call.
    let (ga, gb) = (img.group(10).unwrap(), img.group(11).unwrap());
    assert!(!ga.has_super && !gb.has_super);
    assert_eq!((ga.free_blocks, gb.free_blocks), (512, 512));
    let end = ga.last_block;
    let req = |goal, len| AllocRequest {
        goal: Some(goal),
        len,
        align: 1,
    };
    let a = img.alloc_blocks(req(end - 19, 20)).unwrap();
    assert_eq!(a, end - 19);
    let b = img.alloc_blocks(req(end + 1, 30)).unwrap();
    assert_eq!(b, end + 1);
    img.flush().unwrap();
    // Freeing one more block than allocated fails and changes nothing.
    let err = img.free_blocks(a, 51).unwrap_err();
    assert!(
        matches!(err, Ext4Error::BlockAlreadyFree { block } if block == end + 31),
        "{err}"
    );
    assert!(!img.is_dirty());
    img.free_blocks(a, 50).unwrap();
    assert_eq!(img.group(10).unwrap().free_blocks, info.blocks_per_group);
    assert_eq!(img.group(11).unwrap().free_blocks, info.blocks_per_group);
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "span");
    assert_verify_clean(&open_ro(&path), "span");
}

#[test]
fn random_alloc_free_sequences_stay_consistent() {
    require_e2fsprogs!();
    let dir = TempDir::new("random");
    let mut rng = SmallRng::seed_from_u64(42);
    for name in ["1k-32groups", "4k-32bit-noflex", "1k-uninit_bg"] {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let path = mkfs(&dir, cfg);
        let mut img = open_rw(&path);
        let info = img.info().clone();
        let free0 = img.free_blocks_count();
        let ifree0 = img.free_inodes_count();
        let mut live: Vec<(u64, u32)> = Vec::new();
        let mut inodes: Vec<(u32, bool)> = Vec::new();
        for step in 0..300 {
            match rng.random_range(0..10) {
                0..=4 => {
                    let req = AllocRequest {
                        goal: rng
                            .random_bool(0.7)
                            .then(|| rng.random_range(1..info.blocks_count)),
                        len: rng.random_range(1..100),
                        align: 1 << rng.random_range(0..6),
                    };
                    match img.alloc_blocks(req) {
                        Ok(b) => {
                            assert_eq!(b % u64::from(req.align), 0);
                            live.push((b, req.len));
                        }
                        Err(Ext4Error::NoSpace { .. }) => {}
                        Err(e) => panic!("{name} step {step}: {e}"),
                    }
                }
                5..=6 if !live.is_empty() => {
                    let (b, len) = live.swap_remove(rng.random_range(0..live.len()));
                    img.free_blocks(b, len.into()).unwrap();
                }
                7 => {
                    let dirf = rng.random_bool(0.3);
                    let goal = rng.random_range(0..info.group_count);
                    inodes.push((img.alloc_inode(Some(goal), dirf).unwrap(), dirf));
                }
                8 if !inodes.is_empty() => {
                    let (ino, dirf) = inodes.swap_remove(rng.random_range(0..inodes.len()));
                    img.free_inode(ino, dirf).unwrap();
                }
                _ => img.flush().unwrap(),
            }
            img.validate()
                .unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
            let used: u64 = live.iter().map(|&(_, l)| u64::from(l)).sum();
            assert_eq!(img.free_blocks_count(), free0 - used, "{name} step {step}");
            assert_eq!(img.free_inodes_count(), ifree0 - inodes.len() as u32);
        }
        assert_verify_clean(&img, name);
        for (b, len) in live.drain(..) {
            img.free_blocks(b, len.into()).unwrap();
        }
        for (ino, dirf) in inodes.drain(..) {
            img.free_inode(ino, dirf).unwrap();
        }
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, name);
        let img = open_ro(&path);
        assert_verify_clean(&img, name);
        check_against_dumpe2fs(&img, &path, name);
        assert_eq!(img.free_blocks_count(), free0);
    }
}
