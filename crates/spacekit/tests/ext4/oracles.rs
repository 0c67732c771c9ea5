//! e2fsprogs as oracles: `e2fsck -fn` and its "Block bitmap differences",
//! `debugfs -w` scripts, `dumpe2fs` parsed field by field (and compared with
//! what spacekit reads), `e2freefrag`'s histogram, `mke2fs -d` images and
//! the kernel's own read of an image (a read-only loop mount).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use spacekit::ext4::{ChecksumKind, Image, BG_BLOCK_UNINIT, BG_INODE_UNINIT};

use crate::fixtures::{e2fs, TempDir, UUID};

/// `e2fsck -fn`: exit code and output.
pub fn e2fsck(path: &Path) -> (i32, String) {
    let out = e2fs("e2fsck").arg("-fn").arg(path).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

pub fn assert_fsck_clean(path: &Path, what: &str) {
    let (code, text) = e2fsck(path);
    assert_eq!(code, 0, "{what}: e2fsck -fn:\n{text}");
}

/// The blocks e2fsck lists after "Block bitmap differences:" with a minus
/// sign (marked in use, used by nothing).
pub fn fsck_leaked_blocks(text: &str) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("Block bitmap differences:") else {
            continue;
        };
        for tok in rest.split_whitespace() {
            let tok = tok
                .strip_prefix('-')
                .unwrap_or_else(|| panic!("not a leak: {tok}"));
            let tok = tok.trim_start_matches('(').trim_end_matches(')');
            match tok.split_once("--") {
                Some((a, b)) => out.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap()),
                None => {
                    out.insert(tok.parse::<u64>().unwrap());
                }
            }
        }
    }
    out
}

pub fn debugfs_w(path: &Path, dir: &TempDir, cmds: &str) {
    let cmdfile = dir.path("debugfs.cmd");
    fs::write(&cmdfile, cmds).unwrap();
    let out = e2fs("debugfs")
        .arg("-w")
        .arg("-f")
        .arg(&cmdfile)
        .arg(path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "debugfs: {err}");
    // debugfs reports command errors on stderr but exits 0.
    for line in err.lines() {
        assert!(
            line.starts_with("debugfs ") || line.trim().is_empty(),
            "debugfs complained: {line}\n{err}"
        );
    }
}

/// What dumpe2fs says about one group.
#[derive(Debug, Default)]
pub struct DumpGroup {
    pub first: u64,
    pub last: u64,
    pub csum: Option<u16>,
    pub flags: Vec<String>,
    pub block_bitmap: u64,
    pub block_bitmap_csum: Option<u32>,
    pub inode_bitmap: u64,
    pub inode_bitmap_csum: Option<u32>,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub dirs: u32,
    pub free_ranges: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
pub struct Dump {
    pub sb_checksum: Option<u32>,
    pub free_blocks: u64,
    pub free_inodes: u32,
    pub groups: Vec<DumpGroup>,
}

pub fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// The "csum 0x..." after a bitmap line, if any.
pub fn trailing_csum(line: &str) -> Option<u32> {
    line.split_once(", csum ").map(|(_, c)| hex(c))
}

pub fn dumpe2fs(path: &Path) -> Dump {
    let out = e2fs("dumpe2fs").arg(path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut d = Dump::default();
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Checksum:") {
            d.sb_checksum = Some(hex(v));
        } else if let Some(v) = t.strip_prefix("Free blocks:") {
            if let Some(g) = d.groups.last_mut().filter(|_| line.starts_with("  ")) {
                for r in v.split(',').map(str::trim).filter(|r| !r.is_empty()) {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    g.free_ranges.push((a.parse().unwrap(), b.parse().unwrap()));
                }
            } else {
                d.free_blocks = v.trim().parse().unwrap();
            }
        } else if let Some(v) = t.strip_prefix("Free inodes:") {
            if !line.starts_with("  ") {
                d.free_inodes = v.trim().parse().unwrap();
            }
        } else if let Some(rest) = t.strip_prefix("Group ") {
            if !rest.starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            let mut g = DumpGroup::default();
            let blocks = rest
                .split_once("(Blocks ")
                .unwrap()
                .1
                .split_once(')')
                .unwrap()
                .0;
            let (a, b) = blocks.split_once('-').unwrap();
            g.first = a.parse().unwrap();
            g.last = b.parse().unwrap();
            if let Some((_, c)) = rest.split_once("csum ") {
                g.csum = Some(hex(c.split_whitespace().next().unwrap()) as u16);
            }
            if let Some((_, f)) = rest.split_once('[') {
                g.flags = f
                    .trim_end_matches(']')
                    .split(", ")
                    .map(str::to_string)
                    .collect();
            }
            d.groups.push(g);
        } else if let Some(v) = t.strip_prefix("Block bitmap at ") {
            let g = d.groups.last_mut().unwrap();
            g.block_bitmap = v.split_whitespace().next().unwrap().parse().unwrap();
            g.block_bitmap_csum = trailing_csum(v);
        } else if let Some(v) = t.strip_prefix("Inode bitmap at ") {
            let g = d.groups.last_mut().unwrap();
            g.inode_bitmap = v.split_whitespace().next().unwrap().parse().unwrap();
            g.inode_bitmap_csum = trailing_csum(v);
        } else if t.contains(" free blocks, ") && t.contains(" free inodes, ") {
            let g = d.groups.last_mut().unwrap();
            let nums: Vec<u32> = t
                .split(", ")
                .map(|p| p.split_whitespace().next().unwrap().parse().unwrap())
                .collect();
            g.free_blocks = nums[0];
            g.free_inodes = nums[1];
            g.dirs = nums[2];
        }
    }
    d
}

pub fn check_against_dumpe2fs(img: &Image, path: &Path, what: &str) {
    let d = dumpe2fs(path);
    let info = img.info();
    assert_eq!(d.groups.len() as u32, info.group_count, "{what}");
    match info.checksums {
        ChecksumKind::MetadataCsum => {
            assert_eq!(Some(img.superblock_checksum()), d.sb_checksum, "{what}: sb")
        }
        _ => assert_eq!(d.sb_checksum, None, "{what}"),
    }
    assert_eq!(img.free_blocks_count(), d.free_blocks, "{what}");
    assert_eq!(img.free_inodes_count(), d.free_inodes, "{what}");
    for (g, dg) in d.groups.iter().enumerate() {
        let g = g as u32;
        let gi = img.group(g).unwrap();
        let sums = img.group_checksums(g).unwrap();
        let ctx = format!("{what}: group {g}");
        assert_eq!(
            (gi.first_block, gi.last_block),
            (dg.first, dg.last),
            "{ctx}"
        );
        assert_eq!(sums.descriptor, dg.csum, "{ctx}: descriptor checksum");
        assert_eq!(gi.block_bitmap, dg.block_bitmap, "{ctx}");
        assert_eq!(gi.inode_bitmap, dg.inode_bitmap, "{ctx}");
        assert_eq!(gi.free_blocks, dg.free_blocks, "{ctx}");
        assert_eq!(gi.free_inodes, dg.free_inodes, "{ctx}");
        assert_eq!(gi.used_dirs, dg.dirs, "{ctx}");
        let uninit_b = dg.flags.iter().any(|f| f == "BLOCK_UNINIT");
        let uninit_i = dg.flags.iter().any(|f| f == "INODE_UNINIT");
        assert_eq!(uninit_b, gi.flags & BG_BLOCK_UNINIT != 0, "{ctx}");
        assert_eq!(uninit_i, gi.flags & BG_INODE_UNINIT != 0, "{ctx}");
        if info.checksums == ChecksumKind::MetadataCsum {
            // Initialised bitmaps: computed = what dumpe2fs prints;
            // uninitialised ones store 0 and spacekit keeps none.
            let want_b = dg.block_bitmap_csum.unwrap();
            let want_i = dg.inode_bitmap_csum.unwrap();
            match sums.block_bitmap {
                Some(c) => assert_eq!(c, want_b, "{ctx}: block bitmap checksum"),
                None => assert!(uninit_b && want_b == 0, "{ctx}"),
            }
            match sums.inode_bitmap {
                Some(c) => assert_eq!(c, want_i, "{ctx}: inode bitmap checksum"),
                None => assert!(uninit_i && want_i == 0, "{ctx}"),
            }
        } else {
            assert_eq!(sums.block_bitmap, None, "{ctx}");
            assert_eq!(dg.block_bitmap_csum, None, "{ctx}");
        }
        assert_eq!(
            img.free_extents(g).unwrap(),
            dg.free_ranges,
            "{ctx}: free extents"
        );
    }
}

/// e2freefrag's extent count, longest extent in KiB and histogram rows
/// (lower bound in bytes, extents, blocks).
pub fn e2freefrag(path: &Path) -> (u64, u64, Vec<(u64, u64, u64)>) {
    let out = e2fs("e2freefrag").arg(path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| -> u64 {
        let l = text.lines().find(|l| l.starts_with(name)).unwrap();
        l[name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (n, max_kb) = (field("Num. free extent:"), field("Max. free extent:"));
    let mut rows = Vec::new();
    for l in text
        .lines()
        .filter(|l| l.contains("...") && l.contains(':'))
    {
        let lo = l.split("...").next().unwrap().trim();
        let (num, unit) = lo.split_at(lo.len() - 1);
        let mult: u64 = match unit {
            "K" => 1 << 10,
            "M" => 1 << 20,
            "G" => 1 << 30,
            "T" => 1 << 40,
            _ => panic!("unit {unit} in {l}"),
        };
        let cols: Vec<u64> = l
            .split_once(':')
            .unwrap()
            .1
            .split_whitespace()
            .take(2)
            .map(|c| c.parse().unwrap())
            .collect();
        rows.push((num.parse::<u64>().unwrap() * mult, cols[0], cols[1]));
    }
    (n, max_kb, rows)
}

/// The file at `path` inside the image, as `debugfs dump` writes it.
pub fn debugfs_dump(img: &Path, dir: &TempDir, path: &str) -> Vec<u8> {
    let out = dir.path("dumped");
    let _ = fs::remove_file(&out);
    let st = e2fs("debugfs")
        .arg("-R")
        .arg(format!("dump {path} {}", out.display()))
        .arg(img)
        .output()
        .unwrap();
    assert!(st.status.success(), "debugfs dump {path}");
    fs::read(&out).unwrap_or_else(|e| panic!("debugfs dump {path}: {e}"))
}

/// `mkfs.ext4 -d src` with `args`, on a fresh image of `size`.
pub fn mkfs_d(dir: &TempDir, name: &str, args: &[&str], src: &Path, size: &str) -> PathBuf {
    let path = dir.path(name);
    let out = e2fs("mkfs.ext4")
        .args(["-F", "-q", "-U", UUID, "-E"])
        .arg(format!("hash_seed={UUID}"))
        .args(args)
        .arg("-d")
        .arg(src)
        .arg(&path)
        .arg(size)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.ext4 -d {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Reads `files` through the kernel (a read-only loop mount), or says why
/// it cannot and returns `None`.
pub fn kernel_read(img: &Path, dir: &TempDir, files: &[&str]) -> Option<Vec<Vec<u8>>> {
    let mnt = dir.path("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(img)
        .arg(&mnt)
        .output();
    match m {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "skipping the kernel's read: mount -o loop,ro failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            println!("skipping the kernel's read: no mount: {e}");
            return None;
        }
    }
    let got = files
        .iter()
        .map(|f| fs::read(mnt.join(f.trim_start_matches('/'))))
        .collect::<Result<Vec<_>, _>>();
    let um = Command::new("umount").arg(&mnt).status();
    assert!(um.is_ok_and(|s| s.success()), "umount {}", mnt.display());
    Some(got.unwrap())
}
