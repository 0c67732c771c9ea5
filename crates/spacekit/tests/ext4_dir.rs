#![cfg(feature = "ext4")]
//! `spacekit::ext4::dir` against real images: mkfs.ext4 -d with a small and
//! a big directory (indexed by `e2fsck -fyD`, as mkfs -d leaves directories
//! linear), then
//!
//! * every directory block parses, and the entries are exactly what
//!   `debugfs ls -p` lists; every leaf's tail and every dx block's dx_tail
//!   checksum verifies;
//! * the hashes equal `debugfs dx_hash` for each algorithm, signed and
//!   unsigned;
//! * `leaf_for` finds the leaf that holds each name of the big directory;
//! * random add/remove sequences on blocks (empty ones and real leaves)
//!   agree with a `BTreeMap` model, and the spliced tail checksum equals a
//!   full recompute after every operation;
//! * a block edited by remove + add of the same entry, written back, passes
//!   `e2fsck -fn` (and the remove alone does not).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::crc32c;
use spacekit::ext4::raw::{self, le32};
use spacekit::ext4::Ext4Error;
use spacekit::testing::ext4::dir::{self, DxHash};

use e2fs::{have_e2fsprogs, tool, TempDir};
use spacekit_testkit::e2fs;

// ---------------------------------------------------------------------------
// Tools and fixtures.

const TOOLS: [&str; 4] = ["mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck"];

macro_rules! require_e2fsprogs {
    () => {
        if !have_e2fsprogs(&TOOLS) {
            return;
        }
    };
}

/// Runs a tool; returns its exit code and stdout (stderr appended).
fn run(name: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(tool(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text += &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn debugfs(img: &Path, cmd: &str) -> String {
    let (code, text) = run("debugfs", &["-R", cmd, img.to_str().unwrap()]);
    assert_eq!(code, 0, "debugfs -R {cmd}: {text}");
    text
}

fn big_names() -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(0xD1D1);
    let alphabet: Vec<char> =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-éß日"
            .chars()
            .collect();
    (0..3000)
        .map(|i| {
            let mut s = format!("{i}_");
            let len = match i % 4 {
                0 => rng.random_range(0..8),
                1 => rng.random_range(0..40),
                _ => rng.random_range(60..190),
            };
            for _ in 0..len {
                s.push(alphabet[rng.random_range(0..alphabet.len())]);
            }
            s
        })
        .collect()
}

/// An image with /small (5 files) and /big (3000 files, htree).
struct Fixture {
    dir: TempDir,
    img: PathBuf,
    bs: usize,
    names: Vec<String>,
}

fn fixture(bs: usize) -> Fixture {
    let dir = TempDir::new(&format!("ext4dir-b{bs}"));
    let src = dir.path("src");
    fs::create_dir_all(src.join("small")).unwrap();
    fs::create_dir_all(src.join("big")).unwrap();
    for i in 1..=5 {
        fs::write(src.join("small").join(format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let names = big_names();
    for n in &names {
        fs::write(src.join("big").join(n), b"").unwrap();
    }
    let img = dir.path("fs.img");
    let size = if bs == 1024 { "16M" } else { "64M" };
    let (code, text) = run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-O",
            "metadata_csum",
            "-b",
            &bs.to_string(),
            "-d",
            src.to_str().unwrap(),
            img.to_str().unwrap(),
            size,
        ],
    );
    assert_eq!(code, 0, "mkfs.ext4: {text}");
    // mkfs -d writes linear directories; e2fsck -D indexes the big one.
    let (code, text) = run("e2fsck", &["-fyD", img.to_str().unwrap()]);
    assert!(code <= 1, "e2fsck -fyD: {code}: {text}");
    let (code, text) = run("e2fsck", &["-fn", img.to_str().unwrap()]);
    assert_eq!(code, 0, "e2fsck -fn on the fresh image: {text}");
    Fixture {
        dir,
        img,
        bs,
        names,
    }
}

/// What the superblock says about directories.
struct Super {
    fs_seed: u32,
    hash_seed: [u8; 16],
    def_hash_version: u8,
    s_flags: u32,
}

fn read_super(img: &Path) -> Super {
    let raw = fs::read(img).unwrap();
    let sb = &raw[1024..2048];
    let incompat = le32(sb, 0x60);
    let fs_seed = if incompat & 0x2000 != 0 {
        le32(sb, 0x270)
    } else {
        crc32c::raw(!0, &sb[0x68..0x78])
    };
    Super {
        fs_seed,
        hash_seed: sb[0xEC..0xFC].try_into().unwrap(),
        def_hash_version: sb[0xFC],
        s_flags: le32(sb, 0x160),
    }
}

/// The UUID text dumpe2fs prints as bytes.
fn uuid_bytes(s: &str) -> [u8; 16] {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// A directory of the image: inode, generation, flags, physical blocks in
/// logical order.
struct Dir {
    ino: u32,
    generation: u32,
    flags: u32,
    blocks: Vec<u64>,
}

fn field<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("{key} not in {text}"));
    text[at + key.len()..].split_whitespace().next().unwrap()
}

fn dir_of(img: &Path, path: &str) -> Dir {
    let stat = debugfs(img, &format!("stat {path}"));
    let flags = field(&stat, "Flags:");
    let blocks = debugfs(img, &format!("blocks {path}"));
    Dir {
        ino: field(&stat, "Inode:").parse().unwrap(),
        generation: field(&stat, "Generation:").parse().unwrap(),
        flags: u32::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap(),
        blocks: blocks
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect(),
    }
}

fn read_block(img: &Path, bs: usize, block: u64) -> Vec<u8> {
    let raw = fs::read(img).unwrap();
    let at = block as usize * bs;
    raw[at..at + bs].to_vec()
}

fn write_block(img: &Path, bs: usize, block: u64, data: &[u8]) {
    let mut raw = fs::read(img).unwrap();
    let at = block as usize * bs;
    raw[at..at + bs].copy_from_slice(data);
    fs::write(img, raw).unwrap();
}

/// `debugfs ls -p`: (inode, name) of every live entry.
fn ls(img: &Path, path: &str) -> BTreeSet<(u32, Vec<u8>)> {
    let out = Command::new(tool("debugfs"))
        .args(["-R", &format!("ls -p {path}"), img.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"/"))
        .map(|l| {
            // /inode/mode/uid/gid/name/size/
            let f: Vec<&[u8]> = l.split(|&b| b == b'/').collect();
            let ino = std::str::from_utf8(f[1]).unwrap().parse().unwrap();
            (ino, f[5].to_vec())
        })
        // debugfs also prints a block's unused first record (inode 0).
        .filter(|(ino, _)| *ino != 0)
        .collect()
}

/// Everything parsed from a directory's blocks.
struct Parsed {
    entries: BTreeSet<(u32, Vec<u8>)>,
    /// Logical numbers of the leaf blocks.
    leaves: Vec<u32>,
    /// The dx root, for an htree directory.
    root: Option<dir::DxRoot>,
}

fn parse_dir(img: &Path, bs: usize, d: &Dir, fs_seed: u32) -> Parsed {
    let seed = raw::inode_seed(fs_seed, d.ino, d.generation);
    let blocks: Vec<Vec<u8>> = d.blocks.iter().map(|&b| read_block(img, bs, b)).collect();
    let mut entries = BTreeSet::new();
    let mut index_blocks = BTreeSet::new();
    let mut root = None;
    if d.flags & dir::INDEX_FL != 0 {
        let r = dir::parse_dx_root(&blocks[0], true).unwrap();
        dir::verify_dx(seed, &blocks[0]).unwrap();
        assert_eq!(r.dot, d.ino);
        entries.insert((r.dot, b".".to_vec()));
        entries.insert((r.dotdot, b"..".to_vec()));
        index_blocks.insert(0u32);
        let mut level = r.entries.clone();
        for _ in 0..r.indirect_levels {
            let mut next = Vec::new();
            for e in &level {
                let b = &blocks[e.block as usize];
                let node = dir::parse_dx_node(b, true).unwrap();
                dir::verify_dx(seed, b).unwrap();
                assert_eq!(
                    dir::stored_dx_checksum(b).unwrap(),
                    dir::dx_checksum(seed, b).unwrap()
                );
                index_blocks.insert(e.block);
                next.extend(node.entries);
            }
            level = next;
        }
        // Every leaf is named by the lowest level exactly once.
        let named: BTreeSet<u32> = level.iter().map(|e| e.block).collect();
        assert_eq!(named.len(), level.len());
        assert_eq!(named.len() + index_blocks.len(), blocks.len());
        root = Some(r);
    }
    let mut leaves = Vec::new();
    for (l, b) in blocks.iter().enumerate() {
        if index_blocks.contains(&(l as u32)) {
            continue;
        }
        leaves.push(l as u32);
        dir::verify_tail(seed, b).unwrap();
        assert_eq!(
            dir::stored_tail_checksum(b).unwrap(),
            dir::tail_checksum(seed, b)
        );
        for e in dir::entries(b, true).unwrap() {
            assert!(
                entries.insert((e.inode, e.name.clone())),
                "{:?} twice",
                e.name
            );
        }
    }
    Parsed {
        entries,
        leaves,
        root,
    }
}

// ---------------------------------------------------------------------------
// Tests.

const BLOCK_SIZES: [usize; 2] = [1024, 4096];

#[test]
fn blocks_parse_to_what_debugfs_lists_and_checksums_verify() {
    require_e2fsprogs!();
    for bs in BLOCK_SIZES {
        let fx = fixture(bs);
        let sb = read_super(&fx.img);
        let small = dir_of(&fx.img, "/small");
        assert_eq!(small.flags & dir::INDEX_FL, 0);
        let p = parse_dir(&fx.img, bs, &small, sb.fs_seed);
        assert_eq!(p.entries, ls(&fx.img, "/small"), "bs {bs}");
        assert_eq!(p.entries.len(), 7);

        let big = dir_of(&fx.img, "/big");
        assert_ne!(big.flags & dir::INDEX_FL, 0, "bs {bs}: /big is not indexed");
        let p = parse_dir(&fx.img, bs, &big, sb.fs_seed);
        let listed = ls(&fx.img, "/big");
        assert_eq!(listed.len(), 3002);
        assert_eq!(p.entries, listed, "bs {bs}");
        let root = p.root.unwrap();
        assert_eq!(root.hash_version, sb.def_hash_version);
        // 1 KiB blocks and long names: the index has a level of dx nodes.
        if bs == 1024 {
            assert_eq!(root.indirect_levels, 1);
        }
        // A wrong seed fails every checksum.
        let wrong = raw::inode_seed(sb.fs_seed, big.ino, big.generation + 1);
        let b0 = read_block(&fx.img, bs, big.blocks[0]);
        assert!(matches!(
            dir::verify_dx(wrong, &b0),
            Err(Ext4Error::BadChecksum { .. })
        ));
        let leaf = read_block(&fx.img, bs, big.blocks[p.leaves[0] as usize]);
        assert!(matches!(
            dir::verify_tail(wrong, &leaf),
            Err(Ext4Error::BadChecksum { .. })
        ));
        // A flipped byte in a leaf or in the counted index fails too.
        let mut bad = leaf.clone();
        bad[20] ^= 1;
        let seed = raw::inode_seed(sb.fs_seed, big.ino, big.generation);
        assert!(dir::verify_tail(seed, &bad).is_err());
        let mut bad = b0.clone();
        bad[44] ^= 1;
        assert!(dir::verify_dx(seed, &bad).is_err());
        drop(fx.dir);
    }
}

#[test]
fn hashes_match_debugfs_dx_hash() {
    require_e2fsprogs!();
    let fx = fixture(4096);
    let (code, text) = run("dumpe2fs", &["-h", fx.img.to_str().unwrap()]);
    assert_eq!(code, 0);
    let seed_text = field(&text, "Directory Hash Seed:");
    let sb = read_super(&fx.img);
    assert_eq!(uuid_bytes(seed_text), sb.hash_seed);
    // Every 7th name of the big directory plus names of every length, ASCII
    // and with high bytes, under the image's seed and under a zero seed (the
    // default seed).
    let mut names: Vec<String> = fx.names.iter().step_by(7).cloned().collect();
    for len in 1..=255 {
        names.push(
            (0..len)
                .map(|i| (b'a' + (i * 7 % 26) as u8) as char)
                .collect(),
        );
    }
    for len in 1..=120 {
        names.push("é日".repeat(len / 5 + 1).chars().take(len).collect());
    }
    // debugfs takes the version number (its names for the unsigned
    // variants are not parsed: `-h legacy_unsigned` falls back to version
    // 0).
    let algs = [("0", 0u8), ("1", 1), ("2", 2), ("3", 3), ("4", 4), ("5", 5)];
    let seeds = [
        (seed_text.to_string(), sb.hash_seed),
        ("00000000-0000-0000-0000-000000000000".to_string(), [0; 16]),
    ];
    let mut cmds = String::new();
    let mut want = Vec::new();
    for (alg, v) in algs {
        for (stext, sbytes) in &seeds {
            let h = DxHash::new(v, *sbytes).unwrap();
            for n in &names {
                cmds += &format!("dx_hash -h {alg} -s {stext} {n}\n");
                want.push((alg, n.clone(), h.hash(n.as_bytes())));
            }
        }
    }
    let cmdfile = fx.dir.path("cmds");
    fs::write(&cmdfile, cmds).unwrap();
    let (code, out) = run("debugfs", &["-f", cmdfile.to_str().unwrap()]);
    assert_eq!(code, 0);
    let got: Vec<(u32, u32)> = out
        .split("Hash of ")
        .skip(1)
        .map(|s| {
            let rest = &s[s.rfind(" is 0x").unwrap() + 6..];
            let hash = u32::from_str_radix(&rest[..rest.find(' ').unwrap()], 16).unwrap();
            let m = &rest[rest.find("(minor 0x").unwrap() + 9..];
            let minor = u32::from_str_radix(&m[..m.find(')').unwrap()], 16).unwrap();
            (hash, minor)
        })
        .collect();
    assert_eq!(got.len(), want.len());
    let mut signed_differs = 0;
    for ((alg, name, ours), theirs) in want.iter().zip(&got) {
        assert_eq!(ours, theirs, "{alg} of {name}");
        if *alg == "2" && !name.is_ascii() {
            let u = DxHash::new(5, sb.hash_seed).unwrap().hash(name.as_bytes());
            signed_differs += usize::from(u != *ours);
        }
    }
    // The signed and unsigned variants do differ on high bytes.
    assert!(signed_differs > 0);
    // The image's own flags choose the variant.
    let h = DxHash::for_dir(1, sb.s_flags, sb.hash_seed).unwrap();
    assert_eq!(h.unsigned, sb.s_flags & dir::FLAGS_UNSIGNED_HASH != 0);
    assert!(matches!(
        DxHash::new(6, [0; 16]),
        Err(Ext4Error::Unsupported { .. })
    ));
}

#[test]
fn leaf_for_finds_the_block_holding_every_name() {
    require_e2fsprogs!();
    for bs in BLOCK_SIZES {
        let fx = fixture(bs);
        let sb = read_super(&fx.img);
        let big = dir_of(&fx.img, "/big");
        let seed = raw::inode_seed(sb.fs_seed, big.ino, big.generation);
        let blocks: Vec<Vec<u8>> = big
            .blocks
            .iter()
            .map(|&b| read_block(&fx.img, bs, b))
            .collect();
        let mut reads = 0usize;
        for n in &fx.names {
            let leaf = dir::leaf_for(
                n.as_bytes(),
                &blocks[0],
                sb.s_flags,
                sb.hash_seed,
                Some(seed),
                |l| {
                    reads += 1;
                    blocks
                        .get(l as usize)
                        .cloned()
                        .ok_or(Ext4Error::InvalidArgument {
                            what: "block",
                            value: u64::from(l),
                            reason: "past the directory",
                        })
                },
            )
            .unwrap();
            let found = dir::find(&blocks[leaf as usize], true, n.as_bytes()).unwrap();
            assert!(found.is_some(), "bs {bs}: {n} not in leaf {leaf}");
        }
        let root = dir::parse_dx_root(&blocks[0], true).unwrap();
        assert_eq!(reads, fx.names.len() * usize::from(root.indirect_levels));
        // A corrupted dx node is refused on the way down.
        if root.indirect_levels > 0 {
            let node = root.entries[0].block as usize;
            let mut bad = blocks.clone();
            bad[node][40] ^= 0x80;
            let mut refused = 0;
            for n in &fx.names {
                let r = dir::leaf_for(
                    n.as_bytes(),
                    &bad[0],
                    sb.s_flags,
                    sb.hash_seed,
                    Some(seed),
                    |l| Ok(bad[l as usize].clone()),
                );
                refused += usize::from(matches!(r, Err(Ext4Error::BadChecksum { .. })));
            }
            assert!(refused > 0);
        }
    }
}

/// A random name: 1 to 255 bytes, no '/' or NUL, not "." or "..", from a
/// small set half the time (so adds collide and removes hit).
fn random_name(rng: &mut SmallRng) -> Vec<u8> {
    if rng.random_bool(0.5) {
        return format!("n{}", rng.random_range(0..40)).into_bytes();
    }
    let len = match rng.random_range(0..3) {
        0 => rng.random_range(1..=4),
        1 => rng.random_range(1..=40),
        _ => rng.random_range(1..=255),
    };
    let mut n: Vec<u8> = (0..len)
        .map(|_| loop {
            let b: u8 = rng.random();
            if b != b'/' && b != 0 {
                break b;
            }
        })
        .collect();
    if n == b"." || n == b".." {
        n.push(b'x');
    }
    n
}

/// Random adds and removes on `block`, checked against a model after each.
fn random_ops(
    block: &mut [u8],
    seed: Option<u32>,
    model: &mut BTreeMap<Vec<u8>, u32>,
    ops: usize,
    rng_seed: u64,
) {
    let csum = seed.is_some();
    let mut rng = SmallRng::seed_from_u64(rng_seed);
    let mut full = 0;
    for op in 0..ops {
        let name = if !model.is_empty() && rng.random_bool(0.3) {
            model
                .keys()
                .nth(rng.random_range(0..model.len()))
                .unwrap()
                .clone()
        } else {
            random_name(&mut rng)
        };
        let before = block.to_vec();
        if rng.random_bool(0.55) {
            let ino = rng.random_range(11..100_000);
            let ft = rng.random_range(1..=7);
            match dir::add_entry(block, &name, ino, ft, csum) {
                Ok(true) => {
                    assert!(model.insert(name.clone(), ino).is_none(), "op {op}");
                    let e = dir::find(block, csum, &name).unwrap().unwrap();
                    assert_eq!((e.inode, e.file_type), (ino, ft));
                }
                Ok(false) => {
                    full += 1;
                    assert!(!model.contains_key(&name));
                    assert_eq!(block, &before[..], "op {op}: no room changed the block");
                    let need = dir::entry_size(name.len());
                    for r in dir::records(block, csum).unwrap() {
                        assert!(r.rec_len - r.used() < need, "op {op}: room at {}", r.offset);
                    }
                }
                Err(Ext4Error::InvalidArgument { what: "name", .. }) => {
                    assert!(model.contains_key(&name), "op {op}: {name:?} refused");
                    assert_eq!(block, &before[..]);
                }
                Err(e) => panic!("op {op}: {e}"),
            }
        } else {
            let got = dir::remove_entry(block, &name, csum).unwrap();
            assert_eq!(got, model.remove(&name), "op {op}");
            if got.is_none() {
                assert_eq!(block, &before[..]);
            }
        }
        let listed: BTreeMap<Vec<u8>, u32> = dir::entries(block, csum)
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.inode))
            .collect();
        assert_eq!(&listed, model, "op {op}");
        if let Some(s) = seed {
            assert_eq!(
                dir::stored_tail_checksum(block).unwrap(),
                dir::tail_checksum(s, block),
                "op {op}: the spliced checksum differs from a full recompute"
            );
        }
    }
    assert!(full > 0 || block.len() > 4096, "the block never filled up");
}

#[test]
fn random_add_remove_agrees_with_a_model() {
    for bs in [1024, 4096, 65536] {
        for seed in [None, Some(0x5EED_0000 ^ bs as u32)] {
            let mut block = dir::init_block(bs, seed).unwrap();
            let mut model = BTreeMap::new();
            let ops = if bs == 65536 { 3000 } else { 1500 };
            random_ops(
                &mut block,
                seed,
                &mut model,
                ops,
                bs as u64 + u64::from(seed.is_some()),
            );
        }
    }
}

#[test]
fn random_add_remove_on_real_leaves() {
    require_e2fsprogs!();
    let fx = fixture(1024);
    let sb = read_super(&fx.img);
    for path in ["/small", "/big"] {
        let d = dir_of(&fx.img, path);
        let seed = raw::inode_seed(sb.fs_seed, d.ino, d.generation);
        let p = parse_dir(&fx.img, fx.bs, &d, sb.fs_seed);
        for &l in p.leaves.iter().take(4) {
            let mut block = read_block(&fx.img, fx.bs, d.blocks[l as usize]);
            let mut model: BTreeMap<Vec<u8>, u32> = dir::entries(&block, true)
                .unwrap()
                .into_iter()
                .map(|e| (e.name, e.inode))
                .collect();
            // Block 0 of a linear directory holds "." and "..", which the
            // model keeps but the random names never touch.
            random_ops(&mut block, Some(seed), &mut model, 400, u64::from(l));
            dir::verify_tail(seed, &block).unwrap();
        }
    }
}

#[test]
fn remove_and_add_back_passes_e2fsck() {
    require_e2fsprogs!();
    for bs in BLOCK_SIZES {
        let fx = fixture(bs);
        let sb = read_super(&fx.img);
        for (path, pick) in [("/small", 2usize), ("/big", 100)] {
            let d = dir_of(&fx.img, path);
            let seed = raw::inode_seed(sb.fs_seed, d.ino, d.generation);
            let p = parse_dir(&fx.img, bs, &d, sb.fs_seed);
            let l = p.leaves[p.leaves.len() / 2];
            let phys = d.blocks[l as usize];
            let block = read_block(&fx.img, bs, phys);
            let ents: Vec<_> = dir::entries(&block, true)
                .unwrap()
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .collect();
            let victim = &ents[pick % ents.len()];

            // Removed only: e2fsck must complain (the file is unattached).
            let removed_img = fx.dir.path("removed.img");
            fs::copy(&fx.img, &removed_img).unwrap();
            let mut removed = block.clone();
            let got = dir::remove_entry(&mut removed, &victim.name, true).unwrap();
            assert_eq!(got, Some(victim.inode));
            dir::verify_tail(seed, &removed).unwrap();
            write_block(&removed_img, bs, phys, &removed);
            let (code, text) = run("e2fsck", &["-fn", removed_img.to_str().unwrap()]);
            assert_ne!(
                code, 0,
                "bs {bs} {path}: e2fsck missed a removed entry:\n{text}"
            );

            // Removed and added back under the same name and inode: clean.
            let back_img = fx.dir.path("back.img");
            fs::copy(&fx.img, &back_img).unwrap();
            let mut back = removed.clone();
            assert!(dir::add_entry(
                &mut back,
                &victim.name,
                victim.inode,
                victim.file_type,
                true
            )
            .unwrap());
            dir::verify_tail(seed, &back).unwrap();
            write_block(&back_img, bs, phys, &back);
            let (code, text) = run("e2fsck", &["-fn", back_img.to_str().unwrap()]);
            assert_eq!(code, 0, "bs {bs} {path}:\n{text}");
            assert_eq!(ls(&back_img, path), ls(&fx.img, path));

            // A stale checksum is caught by e2fsck too (the test can fail).
            let stale_img = fx.dir.path("stale.img");
            fs::copy(&back_img, &stale_img).unwrap();
            let mut stale = back.clone();
            let t = bs - 4;
            stale[t] ^= 1;
            write_block(&stale_img, bs, phys, &stale);
            let (code, _) = run("e2fsck", &["-fn", stale_img.to_str().unwrap()]);
            assert_ne!(code, 0, "bs {bs} {path}: e2fsck missed a bad checksum");
        }
    }
}
