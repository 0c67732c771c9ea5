//! Integration tests for `spacekit::ext4` against e2fsprogs.
//!
//! Every image is made at test time by `mkfs.ext4` (fixed UUID, hash seed and
//! `E2FSPROGS_FAKE_TIME`, so runs are reproducible) in a temporary directory
//! that is removed afterwards. The oracles: `dumpe2fs` (checksums, free
//! counts, "Free blocks:" lists), `e2freefrag` (the free-extent histogram),
//! `debugfs -w` (an allocation with full accounting, compared byte for byte)
//! and `e2fsck -fn` (clean after allocate-then-free; "Block bitmap
//! differences" after an allocation no inode references). Without
//! `mkfs.ext4` each test prints a notice and passes; CI installs e2fsprogs.

#![cfg(feature = "ext4")]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::ext4::{
    AllocRequest, Check, ChecksumKind, Ext4Error, Image, OpenMode, BG_BLOCK_UNINIT, BG_INODE_UNINIT,
};

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

const UUID: &str = "01234567-89ab-cdef-0123-456789abcdef";
const OTHER_UUID: &str = "fedcba98-7654-3210-fedc-ba9876543210";
const FAKE_TIME: &str = "1700000000";

const TOOLS: [&str; 5] = ["mkfs.ext4", "dumpe2fs", "debugfs", "e2fsck", "e2freefrag"];

/// The program to run for an e2fsprogs tool: its name if it is on PATH, else
/// its path in /usr/sbin or /sbin (often not on a non-root PATH).
fn tool(name: &str) -> PathBuf {
    if Command::new(name).arg("-V").output().is_ok() {
        return PathBuf::from(name);
    }
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn have_e2fsprogs() -> bool {
    let ok = TOOLS
        .iter()
        .all(|t| Command::new(tool(t)).arg("-V").output().is_ok());
    // CI installs e2fsprogs (.ci/run): there a missing tool is a failure,
    // not a skip.
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "CI is set but e2fsprogs ({TOOLS:?}) is missing"
    );
    ok
}

macro_rules! require_e2fsprogs {
    () => {
        if !have_e2fsprogs() {
            eprintln!("skipping: e2fsprogs ({TOOLS:?}) not found");
            return;
        }
    };
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "spacekit-ext4-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            name
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One kind of image: mkfs.ext4 arguments and size.
#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    size: &'static str,
    args: &'static [&'static str],
}

/// 1 KiB blocks, 64bit, flex_bg, metadata_csum, 8 groups (the last one
/// partial), BLOCK_UNINIT groups with and without backups.
const K1: Config = Config {
    name: "1k",
    size: "8M",
    args: &[
        "-b",
        "1024",
        "-g",
        "1024",
        "-N",
        "256",
        "-O",
        "^has_journal",
    ],
};

const CONFIGS: &[Config] = &[
    K1,
    // 32-byte descriptors: 16-bit bitmap checksums.
    Config {
        name: "1k-32bit",
        size: "8M",
        args: &[
            "-b",
            "1024",
            "-g",
            "1024",
            "-N",
            "256",
            "-O",
            "^has_journal,^64bit",
        ],
    },
    // Bitmaps and inode tables inside their own groups.
    Config {
        name: "1k-noflex",
        size: "8M",
        args: &[
            "-b",
            "1024",
            "-g",
            "1024",
            "-N",
            "256",
            "-O",
            "^has_journal,^flex_bg",
        ],
    },
    // 32 groups: a second flex group whose first group holds the others'
    // bitmaps and inode tables.
    Config {
        name: "1k-32groups",
        size: "16M",
        args: &["-b", "1024", "-g", "512", "-N", "256", "-O", "^has_journal"],
    },
    // gdt_csum (uninit_bg) without metadata_csum: CRC-16 descriptors.
    Config {
        name: "1k-uninit_bg",
        size: "8M",
        args: &[
            "-b",
            "1024",
            "-g",
            "1024",
            "-N",
            "256",
            "-O",
            "^has_journal,^metadata_csum,uninit_bg",
        ],
    },
    // No checksums at all.
    Config {
        name: "1k-nocsum",
        size: "8M",
        args: &[
            "-b",
            "1024",
            "-g",
            "1024",
            "-N",
            "256",
            "-O",
            "^has_journal,^metadata_csum",
        ],
    },
    // 4 KiB, metadata_csum_seed, partial last group.
    Config {
        name: "4k-seed",
        size: "22M",
        args: &[
            "-b",
            "4096",
            "-g",
            "1024",
            "-N",
            "512",
            "-O",
            "^has_journal,metadata_csum_seed",
        ],
    },
    // 4 KiB, 32-byte descriptors, no flex_bg.
    Config {
        name: "4k-32bit-noflex",
        size: "22M",
        args: &[
            "-b",
            "4096",
            "-g",
            "1024",
            "-N",
            "512",
            "-O",
            "^has_journal,^64bit,^flex_bg",
        ],
    },
    // 4 KiB with a journal.
    Config {
        name: "4k-journal",
        size: "32M",
        args: &["-b", "4096", "-g", "1024", "-N", "512"],
    },
    // 64 KiB blocks.
    Config {
        name: "64k",
        size: "64M",
        args: &[
            "-b",
            "65536",
            "-g",
            "256",
            "-N",
            "512",
            "-O",
            "^has_journal",
        ],
    },
    Config {
        name: "64k-32bit-noflex",
        size: "64M",
        args: &[
            "-b",
            "65536",
            "-g",
            "256",
            "-N",
            "512",
            "-O",
            "^has_journal,^64bit,^flex_bg",
        ],
    },
];

fn e2fs(name: &str) -> Command {
    let mut c = Command::new(tool(name));
    c.env("E2FSPROGS_FAKE_TIME", FAKE_TIME);
    c
}

fn mkfs_with_uuid(dir: &TempDir, cfg: &Config, uuid: &str) -> PathBuf {
    let path = dir.path(&format!("{}.img", cfg.name));
    let out = e2fs("mkfs.ext4")
        .args(["-F", "-q", "-U", uuid, "-E"])
        .arg(format!("hash_seed={uuid}"))
        .args(cfg.args)
        .arg(&path)
        .arg(cfg.size)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.ext4 {:?}: {}",
        cfg.args,
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn mkfs(dir: &TempDir, cfg: &Config) -> PathBuf {
    mkfs_with_uuid(dir, cfg, UUID)
}

fn copy(from: &Path, dir: &TempDir, name: &str) -> PathBuf {
    let to = dir.path(name);
    fs::copy(from, &to).unwrap();
    to
}

/// `e2fsck -fn`: exit code and output.
fn e2fsck(path: &Path) -> (i32, String) {
    let out = e2fs("e2fsck").arg("-fn").arg(path).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn assert_fsck_clean(path: &Path, what: &str) {
    let (code, text) = e2fsck(path);
    assert_eq!(code, 0, "{what}: e2fsck -fn:\n{text}");
}

/// The blocks e2fsck lists after "Block bitmap differences:" with a minus
/// sign (marked in use, used by nothing).
fn fsck_leaked_blocks(text: &str) -> BTreeSet<u64> {
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

fn debugfs_w(path: &Path, dir: &TempDir, cmds: &str) {
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
struct DumpGroup {
    first: u64,
    last: u64,
    csum: Option<u16>,
    flags: Vec<String>,
    block_bitmap: u64,
    block_bitmap_csum: Option<u32>,
    inode_bitmap: u64,
    inode_bitmap_csum: Option<u32>,
    free_blocks: u32,
    free_inodes: u32,
    dirs: u32,
    free_ranges: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Dump {
    sb_checksum: Option<u32>,
    free_blocks: u64,
    free_inodes: u32,
    groups: Vec<DumpGroup>,
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// The "csum 0x..." after a bitmap line, if any.
fn trailing_csum(line: &str) -> Option<u32> {
    line.split_once(", csum ").map(|(_, c)| hex(c))
}

fn dumpe2fs(path: &Path) -> Dump {
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

fn open_rw(path: &Path) -> Image {
    Image::open(path, OpenMode::ReadWrite).unwrap()
}

fn open_ro(path: &Path) -> Image {
    Image::open(path, OpenMode::ReadOnly).unwrap()
}

fn assert_verify_clean(img: &Image, what: &str) {
    let r = img.verify().unwrap();
    assert!(r.is_clean(), "{what}: verify: {:#?}", r.mismatches);
    img.validate().unwrap();
}

/// First group with BLOCK_UNINIT set, if any.
fn block_uninit_group(img: &Image) -> Option<u32> {
    (0..img.info().group_count).find(|&g| img.group(g).unwrap().flags & BG_BLOCK_UNINIT != 0)
}

/// A group with BLOCK_UNINIT set and no superblock backup (all of it free
/// but any other group's metadata).
fn block_uninit_group_without_backup(img: &Image) -> Option<u32> {
    (0..img.info().group_count).find(|&g| {
        let gi = img.group(g).unwrap();
        gi.flags & BG_BLOCK_UNINIT != 0 && !gi.has_super
    })
}

// ---------------------------------------------------------------------------
// Reading: checksums, counts and free extents equal dumpe2fs's
// ---------------------------------------------------------------------------

fn check_against_dumpe2fs(img: &Image, path: &Path, what: &str) {
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

#[test]
fn checksums_counts_and_free_extents_match_dumpe2fs() {
    require_e2fsprogs!();
    let dir = TempDir::new("dumpe2fs");
    for cfg in CONFIGS {
        let path = mkfs(&dir, cfg);
        let img = open_ro(&path);
        let info = img.info().clone();
        assert!(
            info.group_count >= 4,
            "{}: {} groups",
            cfg.name,
            info.group_count
        );
        // Without gdt_csum or metadata_csum mkfs sets no UNINIT flags.
        let has_uninit = info.checksums != ChecksumKind::None;
        assert_eq!(
            block_uninit_group(&img).is_some(),
            has_uninit,
            "{}",
            cfg.name
        );
        assert_verify_clean(&img, cfg.name);
        check_against_dumpe2fs(&img, &path, cfg.name);
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn image_kinds_are_what_the_configs_say() {
    require_e2fsprogs!();
    let dir = TempDir::new("kinds");
    let want = [
        ("1k", 1024, 64, true, ChecksumKind::MetadataCsum),
        ("1k-32bit", 1024, 32, true, ChecksumKind::MetadataCsum),
        ("1k-noflex", 1024, 64, false, ChecksumKind::MetadataCsum),
        ("1k-uninit_bg", 1024, 64, true, ChecksumKind::GdtCsum),
        ("1k-nocsum", 1024, 64, true, ChecksumKind::None),
        (
            "4k-32bit-noflex",
            4096,
            32,
            false,
            ChecksumKind::MetadataCsum,
        ),
        ("64k", 65536, 64, true, ChecksumKind::MetadataCsum),
    ];
    for (name, bs, desc, flex, csum) in want {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let path = mkfs(&dir, cfg);
        let img = open_ro(&path);
        let i = img.info();
        assert_eq!(
            (i.block_size, i.desc_size, i.flex_bg, i.checksums),
            (bs, desc, flex, csum),
            "{name}"
        );
    }
    // metadata_csum_seed: the seed comes from s_checksum_seed (equal to the
    // UUID's CRC when set by mkfs, so check the field is used by changing
    // the UUID behind the seed's back: checksums must stay valid).
    let cfg = CONFIGS.iter().find(|c| c.name == "4k-seed").unwrap();
    let path = mkfs(&dir, cfg);
    let mut bytes = fs::read(&path).unwrap();
    bytes[1024 + 0x68] ^= 0xFF; // s_uuid
    let sb = &mut bytes[1024..2048];
    let c = spacekit::crc32c::raw(!0, &sb[..0x3FC]);
    sb[0x3FC..0x400].copy_from_slice(&c.to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    let img = open_ro(&path);
    assert_verify_clean(&img, "4k-seed with a new UUID");
    assert_fsck_clean(&path, "4k-seed with a new UUID");
}

// ---------------------------------------------------------------------------
// The free-extent histogram equals e2freefrag's
// ---------------------------------------------------------------------------

/// e2freefrag's extent count, longest extent in KiB and histogram rows
/// (lower bound in bytes, extents, blocks).
fn e2freefrag(path: &Path) -> (u64, u64, Vec<(u64, u64, u64)>) {
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

#[test]
fn free_histogram_matches_e2freefrag() {
    require_e2fsprogs!();
    let dir = TempDir::new("freefrag");
    let mut rng = SmallRng::seed_from_u64(7);
    for name in ["1k", "1k-32groups", "4k-journal", "64k"] {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let path = mkfs(&dir, cfg);
        // Fragment the free space a little first.
        let mut img = open_rw(&path);
        let blocks = img.info().blocks_count;
        for _ in 0..12 {
            let goal = rng.random_range(0..blocks);
            let len = rng.random_range(1..40);
            img.alloc_blocks(AllocRequest {
                goal: Some(goal.max(1)),
                len,
                align: 1,
            })
            .unwrap();
        }
        img.flush().unwrap();
        let h = img.free_histogram().unwrap();
        let (n, max_kb, rows) = e2freefrag(&path);
        let bs = u64::from(h.block_size);
        assert_eq!(h.extents, n, "{name}");
        assert_eq!(h.max_extent * bs / 1024, max_kb, "{name}");
        assert_eq!(h.free_blocks, img.free_blocks_count(), "{name}");
        let ours: Vec<(u64, u64, u64)> = h
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.extents > 0)
            .map(|(k, b)| ((1u64 << k) * bs, b.extents, b.blocks))
            .collect();
        assert_eq!(ours, rows, "{name}");
    }
}

// ---------------------------------------------------------------------------
// Allocation: byte-identical to debugfs's, and e2fsck sees it
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Inodes
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Damage behind spacekit's back is reported
// ---------------------------------------------------------------------------

fn checks(img: &Image) -> Vec<(Check, Option<u32>)> {
    img.verify()
        .unwrap()
        .mismatches
        .iter()
        .map(|m| (m.what, m.group))
        .collect()
}

#[test]
fn damage_is_reported_by_verify() {
    require_e2fsprogs!();
    let dir = TempDir::new("damage");
    for name in ["1k", "1k-32bit", "64k", "1k-uninit_bg"] {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let base = mkfs(&dir, cfg);
        let img = open_ro(&base);
        let info = img.info().clone();
        let bs = info.block_size as usize;
        let g0 = img.group(0).unwrap();
        let last = info.group_count - 1;
        let gl = img.group(last).unwrap();
        let (free0, _) = img.free_extents(0).unwrap()[0];
        drop(img);
        let metadata_csum = info.checksums == ChecksumKind::MetadataCsum;
        let edit = |f: &dyn Fn(&mut Vec<u8>)| -> PathBuf {
            let p = copy(&base, &dir, "damaged.img");
            let mut b = fs::read(&p).unwrap();
            f(&mut b);
            fs::write(&p, &b).unwrap();
            p
        };

        // A free block marked in use in group 0's bitmap.
        let bit = (free0 - g0.first_block) as usize;
        let at = g0.block_bitmap as usize * bs + bit / 8;
        let p = edit(&|b| b[at] ^= 1 << (bit % 8));
        let mut img = open_rw(&p);
        let mut want = vec![(Check::GroupFreeBlocks, Some(0))];
        if metadata_csum {
            want.insert(0, (Check::BlockBitmapChecksum, Some(0)));
        }
        assert_eq!(checks(&img), want, "{name}: flipped block bit");
        if metadata_csum {
            // The group is skipped for allocation and refuses frees.
            let got = img
                .alloc_blocks(AllocRequest {
                    goal: Some(free0 + 1),
                    len: 1,
                    align: 1,
                })
                .unwrap();
            assert!(got > g0.last_block, "{name}: allocated in a corrupt group");
            let err = img.free_blocks(free0, 1).unwrap_err();
            assert!(
                matches!(
                    err,
                    Ext4Error::BadChecksum {
                        what: "block bitmap",
                        group: Some(0)
                    }
                ),
                "{err}"
            );
            // e2fsck agrees the bitmap is damaged.
            drop(img);
            let (code, text) = e2fsck(&p);
            assert_ne!(code, 0, "{name}:\n{text}");
        }

        // An inode bit.
        let at = g0.inode_bitmap as usize * bs + 20 / 8;
        let p = edit(&|b| b[at] ^= 1 << (20 % 8));
        let mut want = vec![(Check::GroupFreeInodes, Some(0))];
        if metadata_csum {
            want.insert(0, (Check::InodeBitmapChecksum, Some(0)));
        }
        assert_eq!(checks(&open_ro(&p)), want, "{name}: flipped inode bit");

        // A padding bit of the last group: past its last block (inside the
        // checksummed bytes when the group is partial) and past
        // blocks_per_group.
        let n = info.blocks_in_group(last) as usize;
        let bits: BTreeSet<usize> = [n, info.blocks_per_group as usize, bs * 8 - 1]
            .into_iter()
            .filter(|&b| b >= n && b < bs * 8)
            .collect();
        for bit in bits {
            let at = gl.block_bitmap as usize * bs + bit / 8;
            let p = edit(&|b| b[at] ^= 1 << (bit % 8));
            let mut want = Vec::new();
            if metadata_csum && bit < info.blocks_per_group as usize {
                want.push((Check::BlockBitmapChecksum, Some(last)));
            }
            want.push((Check::BlockBitmapPadding, Some(last)));
            assert_eq!(checks(&open_ro(&p)), want, "{name}: padding bit {bit}");
        }

        // A descriptor byte (group 1's free inode count).
        let desc = info.desc_size as usize;
        let at = (info.first_data_block as usize + 1) * bs + desc + 0x0E;
        let p = edit(&|b| {
            let v = u16::from_le_bytes([b[at], b[at + 1]]) - 1;
            b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        });
        let got = checks(&open_ro(&p));
        if info.checksums != ChecksumKind::None {
            assert!(
                got.contains(&(Check::DescriptorChecksum, Some(1))),
                "{name}: {got:?}"
            );
        }
        assert!(
            got.contains(&(Check::GroupFreeInodes, Some(1))),
            "{name}: {got:?}"
        );
        assert!(
            got.contains(&(Check::FreeInodesCount, None)),
            "{name}: {got:?}"
        );
        if info.checksums != ChecksumKind::None {
            // Changes in that group are refused.
            let mut img = open_rw(&p);
            let ino = img.alloc_inode(Some(1), false).unwrap();
            assert_ne!(
                (ino - 1) / info.inodes_per_group,
                1,
                "{name}: used a corrupt group"
            );
        }

        // A superblock byte (free inodes count).
        let p = edit(&|b| b[1024 + 0x10] ^= 1);
        let got = checks(&open_ro(&p));
        if metadata_csum {
            assert_eq!(got[0], (Check::SuperblockChecksum, None), "{name}");
            let mut img = open_rw(&p);
            let err = img
                .alloc_blocks(AllocRequest {
                    goal: None,
                    len: 1,
                    align: 1,
                })
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Ext4Error::BadChecksum {
                        what: "superblock",
                        ..
                    }
                ),
                "{err}"
            );
        }
        assert!(
            got.contains(&(Check::FreeInodesCount, None)),
            "{name}: {got:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Corrupt and unsupported images: typed errors, never a write
// ---------------------------------------------------------------------------

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// Opens `path` in `mode`, expecting an error; the file's bytes and mtime
/// must not change.
fn open_err(path: &Path, mode: OpenMode) -> Ext4Error {
    let bytes = fs::read(path).unwrap();
    let mtime = fs::metadata(path).unwrap().modified().unwrap();
    let log = fs::read(Image::redo_log_path(path)).ok();
    let err = match Image::open(path, mode) {
        Ok(_) => panic!("{}: opened in {mode:?}", path.display()),
        Err(e) => e,
    };
    assert_eq!(
        fs::read(path).unwrap(),
        bytes,
        "{mode:?}: the image was written"
    );
    assert_eq!(fs::metadata(path).unwrap().modified().unwrap(), mtime);
    assert_eq!(fs::read(Image::redo_log_path(path)).ok(), log);
    err
}

fn corrupt_field(e: &Ext4Error) -> (&'static str, Option<u32>) {
    match e {
        Ext4Error::Corrupt { field, group, .. } => (field, *group),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

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

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    require_e2fsprogs!();
    let dir = TempDir::new("args");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let info = img.info().clone();
    let bad = |r: Result<u64, Ext4Error>, what: &str| match r {
        Err(Ext4Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what),
        other => panic!("expected InvalidArgument {what}, got {other:?}"),
    };
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 0,
            align: 1,
        }),
        "len",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1025,
            align: 1,
        }),
        "len",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 3,
        }),
        "align",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 0,
        }),
        "align",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: Some(0),
            len: 1,
            align: 1,
        }),
        "goal",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: Some(8192),
            len: 1,
            align: 1,
        }),
        "goal",
    );
    // A whole group: only groups without a backup or metadata have one.
    let g = block_uninit_group_without_backup(&img).unwrap();
    let first = img.group(g).unwrap().first_block;
    let whole = AllocRequest {
        goal: Some(first),
        len: 1024,
        align: 1,
    };
    assert_eq!(img.alloc_blocks(whole).unwrap(), first);
    img.free_blocks(first, 1024).unwrap();
    // Nothing has 1024 blocks aligned to 2048 (absolute block numbers: the
    // groups start at 1 + 1024 k).
    assert!(matches!(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1024,
            align: 2048
        }),
        Err(Ext4Error::NoSpace {
            len: 1024,
            align: 2048
        })
    ));
    img.flush().unwrap();
    assert!(!img.is_dirty());
    let snapshot = fs::read(&path).unwrap();

    let gi = img.group(0).unwrap();
    for (start, len) in [
        (1, 1),
        (gi.block_bitmap, 1),
        (gi.inode_table + 2, 3),
        (info.blocks_count - 10, 1),
    ] {
        let r = img.free_blocks(start, len);
        match r {
            Err(Ext4Error::MetadataBlock { .. }) if start != info.blocks_count - 10 => {}
            Err(Ext4Error::BlockAlreadyFree { block }) if block == start => {}
            other => panic!("free_blocks({start}, {len}): {other:?}"),
        }
    }
    assert!(matches!(
        img.free_blocks(0, 1),
        Err(Ext4Error::InvalidArgument { what: "block", .. })
    ));
    assert!(matches!(
        img.free_blocks(8000, 500),
        Err(Ext4Error::InvalidArgument { what: "len", .. })
    ));
    assert!(matches!(
        img.free_blocks(8000, 0),
        Err(Ext4Error::InvalidArgument { what: "len", .. })
    ));
    assert!(matches!(
        img.free_inode(2, true),
        Err(Ext4Error::InvalidArgument { what: "ino", .. })
    ));
    assert!(matches!(
        img.free_inode(257, false),
        Err(Ext4Error::InvalidArgument { what: "ino", .. })
    ));
    assert!(matches!(
        img.free_inode(100, false),
        Err(Ext4Error::InodeAlreadyFree { ino: 100 })
    ));
    assert!(matches!(
        img.alloc_inode(Some(8), false),
        Err(Ext4Error::InvalidArgument { what: "group", .. })
    ));
    assert!(matches!(
        img.free_extents(8),
        Err(Ext4Error::InvalidArgument { what: "group", .. })
    ));
    assert!(!img.is_dirty());
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), snapshot);

    // Running out: every inode, then NoFreeInodes.
    let mut img = open_rw(&path);
    let n = img.free_inodes_count();
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        assert!(seen.insert(img.alloc_inode(Some(5), false).unwrap()));
    }
    assert!(matches!(
        img.alloc_inode(None, true),
        Err(Ext4Error::NoFreeInodes)
    ));
    assert_eq!(img.free_inodes_count(), 0);
    assert_verify_clean(&img, "all inodes");
}

// ---------------------------------------------------------------------------
// Crash safety
// ---------------------------------------------------------------------------

/// Applies a transaction to an open image.
type Txn = fn(&mut Image);

/// Allocations in an initialised group, in a BLOCK_UNINIT group and an inode
/// in an INODE_UNINIT group: several bitmaps, descriptors and the
/// superblock change.
fn txn_alloc(img: &mut Image) {
    let g = block_uninit_group_without_backup(img).unwrap();
    let first = img.group(g).unwrap().first_block;
    img.alloc_blocks(AllocRequest {
        goal: None,
        len: 20,
        align: 1,
    })
    .unwrap();
    img.alloc_blocks(AllocRequest {
        goal: Some(first + 3),
        len: 9,
        align: 1,
    })
    .unwrap();
    img.alloc_inode(Some(g + 1), false).unwrap();
}

/// Allocate and free again in uninitialised groups: the net change is the
/// materialised bitmaps, and the image is e2fsck-clean whichever way a crash
/// goes.
fn txn_materialise(img: &mut Image) {
    let g = block_uninit_group_without_backup(img).unwrap();
    let first = img.group(g).unwrap().first_block;
    let b = img
        .alloc_blocks(AllocRequest {
            goal: Some(first + 100),
            len: 50,
            align: 1,
        })
        .unwrap();
    img.free_blocks(b, 50).unwrap();
    let ino = img.alloc_inode(Some(g), true).unwrap();
    img.free_inode(ino, true).unwrap();
}

fn crash_at_every_step(base: &Path, dir: &TempDir, txn: Txn, what: &str) -> usize {
    let before = fs::read(base).unwrap();
    let reference = copy(base, dir, "reference.img");
    let mut img = open_rw(&reference);
    txn(&mut img);
    img.flush().unwrap();
    drop(img);
    let after = fs::read(&reference).unwrap();
    assert_ne!(before, after, "{what}");
    let after_clean = e2fsck(&reference).0 == 0;

    let (mut saw_before, mut saw_after) = (false, false);
    let mut n = 0;
    loop {
        let p = copy(base, dir, "crash.img");
        let log = Image::redo_log_path(&p);
        let mut img = open_rw(&p);
        txn(&mut img);
        img.fail_write_after(n);
        let res = img.flush();
        drop(img); // the crash: no further writes
        if res.is_ok() {
            assert!(!log.exists());
            assert_eq!(fs::read(&p).unwrap(), after, "{what}");
            break;
        }
        let err = res.unwrap_err();
        assert!(
            matches!(&err, Ext4Error::Io { .. }),
            "{what} step {n}: {err}"
        );
        // Re-opening replays (or discards) the log.
        let img = open_rw(&p);
        assert!(!log.exists(), "{what} step {n}: log left after open");
        assert_verify_clean(&img, &format!("{what} step {n}"));
        drop(img);
        let now = fs::read(&p).unwrap();
        let (code, text) = e2fsck(&p);
        if now == before {
            saw_before = true;
            assert_eq!(code, 0, "{what} step {n}: rolled back:\n{text}");
        } else if now == after {
            saw_after = true;
            if after_clean {
                assert_eq!(code, 0, "{what} step {n}:\n{text}");
            } else {
                // Only the allocation itself shows, as a leak.
                assert_eq!(code, 4, "{what} step {n}:\n{text}");
                assert!(!text.contains("checksum"), "{what} step {n}:\n{text}");
            }
        } else {
            panic!("{what}: after a failure at step {n} the image is neither before nor after");
        }
        n += 1;
    }
    assert!(saw_before && saw_after, "{what}: {n} steps");
    n
}

#[test]
fn crash_at_every_flush_step_recovers() {
    require_e2fsprogs!();
    let dir = TempDir::new("crash");
    for cfg in [K1, CONFIGS[1], CONFIGS[9]] {
        let base = mkfs(&dir, &cfg);
        let steps = crash_at_every_step(&base, &dir, txn_alloc, &format!("{}: alloc", cfg.name));
        // log contents + trailer + 2 fsyncs, >= 5 metadata blocks, fsync,
        // remove, fsync.
        assert!(steps >= 4 + 5 + 3, "{}: {steps} steps", cfg.name);
        crash_at_every_step(
            &base,
            &dir,
            txn_materialise,
            &format!("{}: materialise", cfg.name),
        );
    }
}

#[test]
fn redo_log_pending_incomplete_foreign_and_retry() {
    require_e2fsprogs!();
    let dir = TempDir::new("redo");
    let base = mkfs(&dir, &K1);
    let before = fs::read(&base).unwrap();
    let reference = copy(&base, &dir, "reference.img");
    let mut img = open_rw(&reference);
    txn_alloc(&mut img);
    img.flush().unwrap();
    drop(img);
    let after = fs::read(&reference).unwrap();

    // Failing at the first image write leaves a complete log: a read-only
    // open refuses, a read-write one replays.
    let p = copy(&base, &dir, "pending.img");
    let log = Image::redo_log_path(&p);
    let mut img = open_rw(&p);
    txn_alloc(&mut img);
    img.fail_write_after(4);
    assert!(img.flush().is_err());
    drop(img);
    assert!(log.exists());
    let saved_log = fs::read(&log).unwrap();
    assert_ne!(fs::read(&p).unwrap(), before, "half a block was written");
    assert!(matches!(
        open_err(&p, OpenMode::ReadOnly),
        Ext4Error::PendingRedoLog { .. }
    ));
    assert_eq!(fs::read(&log).unwrap(), saved_log);
    drop(open_rw(&p));
    assert!(!log.exists());
    assert_eq!(fs::read(&p).unwrap(), after);

    // The same log beside another file system is refused, nothing written.
    let other = mkfs_with_uuid(
        &dir,
        &Config {
            name: "other",
            ..K1
        },
        OTHER_UUID,
    );
    let other_log = Image::redo_log_path(&other);
    fs::write(&other_log, &saved_log).unwrap();
    let other_bytes = fs::read(&other).unwrap();
    assert!(matches!(
        Image::open(&other, OpenMode::ReadWrite),
        Err(Ext4Error::RedoLogMismatch { .. })
    ));
    assert_eq!(fs::read(&other).unwrap(), other_bytes);
    fs::remove_file(&other_log).unwrap();

    // A torn log (failure writing its trailer): read-only ignores it,
    // read-write discards it; the image was never touched.
    let p = copy(&base, &dir, "torn.img");
    let log = Image::redo_log_path(&p);
    let mut img = open_rw(&p);
    txn_alloc(&mut img);
    img.fail_write_after(1);
    assert!(img.flush().is_err());
    drop(img);
    assert!(log.exists());
    assert_eq!(fs::read(&p).unwrap(), before);
    assert_verify_clean(&open_ro(&p), "torn log, read-only");
    assert!(log.exists());
    drop(open_rw(&p));
    assert!(!log.exists());
    assert_eq!(fs::read(&p).unwrap(), before);

    // A flush that failed half-way can be retried on the same image.
    for n in [1, 4, 6] {
        let p = copy(&base, &dir, "retry.img");
        let mut img = open_rw(&p);
        txn_alloc(&mut img);
        img.fail_write_after(n);
        assert!(img.flush().is_err());
        assert!(img.is_dirty());
        img.flush().unwrap();
        assert!(!img.is_dirty());
        drop(img);
        assert!(!Image::redo_log_path(&p).exists());
        assert_eq!(fs::read(&p).unwrap(), after, "retry after step {n}");
    }
}
