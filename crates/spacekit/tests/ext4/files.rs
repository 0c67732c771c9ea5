//! Files: `lookup`, `read_dir`, `stat`, `create`, `fallocate`, `truncate`
//! and `unlink` on real images, with e2fsprogs as the oracle: after every
//! flush `e2fsck -fn` is clean, `debugfs stat` / `ex` / `ls -l` agree with
//! spacekit, a debugfs fallocate allocates as many blocks, crashes at every
//! flush step land on the before or after state, bad input changes nothing.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use spacekit::ext4::Stat;
use spacekit::ext4::{AllocRequest, Ext4Error, Image};
use spacekit::testing::Validate;

use crate::fixtures::*;
use crate::oracles::*;

/// The configurations of the file tests.
const FILE_CONFIGS: &[Config] = &[
    K1,
    Config {
        name: "4k",
        size: "64M",
        args: &[
            "-b",
            "4096",
            "-g",
            "2048",
            "-N",
            "512",
            "-O",
            "^has_journal,metadata_csum_seed",
        ],
    },
    Config {
        name: "2k-noflex",
        size: "16M",
        args: &[
            "-b",
            "2048",
            "-g",
            "1024",
            "-N",
            "256",
            "-O",
            "^has_journal,^flex_bg",
        ],
    },
    K64,
    K1_NOCSUM,
];

/// Many small groups: 128 groups of 256 blocks, flex_bg packing their
/// metadata, so a file crosses group boundaries every few requests (a
/// small resize limit keeps mkfs from choosing meta_bg, which spacekit
/// does not handle).
const MANY_GROUPS: Config = Config {
    name: "1k-many-groups",
    size: "32M",
    args: &[
        "-b",
        "1024",
        "-g",
        "256",
        "-N",
        "2048",
        "-E",
        "resize=40000",
        "-O",
        "^has_journal",
    ],
};

/// Every configuration the ext4 tests use (fixtures' and the file tests'
/// own), and many small groups.
fn every_config() -> Vec<Config> {
    let mut all: Vec<Config> = CONFIGS.to_vec();
    for c in FILE_CONFIGS.iter().chain([&MANY_GROUPS]) {
        if !all.iter().any(|a| a.name == c.name) {
            all.push(*c);
        }
    }
    all
}

use spacekit_testkit::rng::Rng;

pub fn debugfs(path: &Path, cmd: &str) -> String {
    let out = e2fs("debugfs")
        .args(["-R", cmd])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(text: &str, key: &str) -> u64 {
    let i = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    text[i + key.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `debugfs ex`'s leaf lines: (logical, physical, len, uninit).
fn debugfs_extents(path: &Path, file: &str) -> Vec<(u32, u64, u16, bool)> {
    let text = debugfs(path, &format!("ex {file}"));
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        // " 0/ 0   1/  4     0 -     0    80 -    80      1 Uninit"
        let spaced = line.replace('/', " / ");
        let t: Vec<&str> = spaced.split_whitespace().collect();
        if t.len() < 13 || t[1] != "/" {
            continue;
        }
        if t[0] != t[2] {
            continue; // an index line
        }
        let n = |i: usize| -> u64 { t[i].parse().unwrap() };
        out.push((n(6) as u32, n(9), n(12) as u16, line.contains("Uninit")));
    }
    out
}

/// debugfs agrees with `stat` on size, block count and extents.
pub fn check_file(path: &Path, file: &str, st: &Stat) {
    let text = debugfs(path, &format!("stat {file}"));
    assert_eq!(field(&text, "Size: "), st.size, "{file}: size: {text}");
    assert_eq!(
        field(&text, "Blockcount: "),
        st.blocks,
        "{file}: blockcount"
    );
    let ours: Vec<_> = st
        .extents
        .iter()
        .map(|e| (e.logical, e.physical, e.len, e.unwritten))
        .collect();
    assert_eq!(debugfs_extents(path, file), ours, "{file}: extents");
    // The whole listing, index entries included, as debugfs prints it.
    let norm = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let theirs: Vec<String> = debugfs(path, &format!("ex {file}"))
        .lines()
        .skip(1)
        .map(norm)
        .filter(|l| !l.is_empty())
        .collect();
    let ours: Vec<String> = st.tree.iter().map(|e| norm(&e.to_string())).collect();
    assert_eq!(theirs, ours, "{file}: ex listing");
}

/// e2fsck clean, every file's stat as debugfs sees it, `ls -l /` lists
/// exactly the model's names (plus what mkfs made).
fn check_all(path: &Path, model: &BTreeMap<String, u32>, what: &str) {
    assert_fsck_clean(path, what);
    let mut img = open_ro(path);
    assert_verify_clean(&img, what);
    let ls = debugfs(path, "ls -l /");
    for (name, &ino) in model {
        let p = format!("/{name}");
        assert_eq!(img.lookup(&p).unwrap(), ino, "{what}: lookup {p}");
        let st = img.stat(ino).unwrap();
        check_file(path, &p, &st);
        assert!(
            ls.lines()
                .any(|l| l.split_whitespace().next() == Some(&ino.to_string())
                    && l.trim_end().ends_with(&format!(" {name}"))),
            "{what}: ls -l / lacks {name}: {ls}"
        );
    }
    let names: Vec<String> = img
        .read_dir(2)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != ".." && n != "lost+found")
        .collect();
    let mut want: Vec<String> = model.keys().cloned().collect();
    let mut got = names;
    want.sort();
    got.sort();
    assert_eq!(got, want, "{what}: read_dir");
}

/// What `debugfs dump` and [`Image::read`] read of every file equals the
/// model's bytes.
fn check_contents(path: &Path, dir: &TempDir, contents: &BTreeMap<String, Vec<u8>>, what: &str) {
    let mut img = open_ro(path);
    for (name, want) in contents {
        let ino = img.lookup(&format!("/{name}")).unwrap();
        let mut ours = vec![0xAA; want.len() + 7];
        let n = img.read(ino, 0, &mut ours).unwrap();
        assert_eq!(n, want.len(), "{what}: /{name}: read's length");
        if let Some(i) = (0..want.len()).find(|&i| ours[i] != want[i]) {
            panic!("{what}: /{name}: Image::read differs from byte {i} on");
        }
        let got = debugfs_dump(path, dir, &format!("/{name}"));
        assert_eq!(got.len(), want.len(), "{what}: /{name}: size");
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!("{what}: /{name}: bytes differ from byte {i} on");
        }
    }
}

/// Random create, fallocate (large, spanning groups; small, keeping the
/// size), truncate (down, or up past the end) and unlink, on spacekit's
/// files and on two files of random bytes that debugfs wrote: after every
/// flush e2fsck is clean, debugfs agrees on every file's extents, and
/// every file's contents are the model's (what was kept, zeros past an old
/// end).
#[test]
fn random_sequences_are_e2fsck_clean_and_match_debugfs() {
    require_e2fsprogs!();
    for cfg in &every_config() {
        let dir = TempDir::new("files-random");
        let path = mkfs(&dir, cfg);
        let bs = u64::from(open_ro(&path).info().block_size);
        let total = open_ro(&path).info().blocks_count;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bs ^ cfg.name.len() as u64);
        let mut model: BTreeMap<String, u32> = BTreeMap::new();
        let mut contents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut script = String::new();
        for (i, seed) in [11u64, 12].into_iter().enumerate() {
            let len = (bs / 2 + rng.below(6 * bs)) as usize;
            let bytes = random_bytes(len, seed ^ bs);
            let local = dir.path(&format!("data{i}.src"));
            fs::write(&local, &bytes).unwrap();
            script.push_str(&format!("write {} data{i}\n", local.display()));
            contents.insert(format!("data{i}"), bytes);
        }
        debugfs_w(&path, &dir, &script);
        let mut img = open_ro(&path);
        for name in contents.keys() {
            model.insert(name.clone(), img.lookup(&format!("/{name}")).unwrap());
        }
        drop(img);
        check_contents(&path, &dir, &contents, cfg.name);
        for step in 0..12 {
            let mut img = open_rw(&path);
            let op = rng.below(8);
            let what = format!("{}: step {step} op {op}", cfg.name);
            if model.is_empty() || op == 0 {
                let name = format!("f{step}");
                let ino = img.create(&format!("/{name}"), 0o644).unwrap();
                let len = (1 + rng.below(40)) * bs;
                let off = rng.below(4) * bs;
                let keep = rng.below(2) == 0;
                img.fallocate(ino, off, len, keep).unwrap();
                model.insert(name.clone(), ino);
                contents.insert(name, vec![0; if keep { 0 } else { (off + len) as usize }]);
            } else {
                let keys: Vec<String> = model.keys().cloned().collect();
                let name = keys[rng.below(keys.len() as u64) as usize].clone();
                let ino = model[&name];
                let data = contents.get_mut(&name).unwrap();
                let grow = |data: &mut Vec<u8>, end: u64| {
                    if end as usize > data.len() {
                        data.resize(end as usize, 0);
                    }
                };
                match op {
                    1 => {
                        // Large: spanning groups.
                        let free = img.free_blocks_count();
                        let n = (free / 3).min(total / 4).max(1);
                        let off = rng.below(100) * bs;
                        img.fallocate(ino, off, n * bs, false).unwrap();
                        grow(data, off + n * bs);
                    }
                    2 => {
                        // Down into a block, or up past the end.
                        let size = img.stat(ino).unwrap().size;
                        let to = if rng.below(3) == 0 {
                            size + rng.below(8 * bs)
                        } else {
                            rng.below(size + 1)
                        };
                        img.truncate(ino, to).unwrap();
                        data.resize(to as usize, 0);
                    }
                    3 => {
                        img.unlink(&format!("/{name}")).unwrap();
                        model.remove(&name);
                        contents.remove(&name);
                    }
                    4 | 5 => {
                        let off = rng.below(200) * bs + rng.below(bs);
                        let len = 1 + rng.below(20 * bs);
                        let keep = rng.below(2) == 0;
                        img.fallocate(ino, off, len, keep).unwrap();
                        if !keep {
                            grow(data, off + len);
                        }
                    }
                    _ => {
                        // Bytes at a random place: inside the file (over
                        // written or unwritten blocks), or past its end.
                        let size = data.len() as u64;
                        let off = match rng.below(3) {
                            0 => rng.below(size + 1),
                            1 => size + rng.below(3 * bs),
                            _ => rng.below(200) * bs + rng.below(bs),
                        };
                        let len = 1 + rng.below(6 * bs);
                        let bytes = random_bytes(len as usize, rng.next());
                        img.write(ino, off, &bytes).unwrap();
                        grow(data, off + len);
                        data[off as usize..(off + len) as usize].copy_from_slice(&bytes);
                    }
                }
            }
            img.flush().unwrap();
            drop(img);
            check_all(&path, &model, &what);
            check_contents(&path, &dir, &contents, &what);
        }
    }
}

/// Every other block, many small fallocates with gaps: the tree grows to
/// depth 2; then truncate and unlink bring it back.
#[test]
fn gapped_fallocates_grow_a_depth_two_tree() {
    require_e2fsprogs!();
    for cfg in [FILE_CONFIGS[0], FILE_CONFIGS[4]] {
        let dir = TempDir::new("files-depth");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let bs = u64::from(img.info().block_size);
        let ino = img.create("/deep", 0o600).unwrap();
        let mut model = BTreeMap::new();
        model.insert("deep".to_string(), ino);
        // A 1 KiB leaf holds 84 extents, an index block 84 entries: more
        // than 4 * 84 extents force depth 2.
        let n = 4 * 84 + 20;
        for i in 0..n {
            img.fallocate(ino, 2 * i * bs, bs, false).unwrap();
        }
        let st = img.stat(ino).unwrap();
        assert_eq!(st.extents.len() as u64, n);
        assert_eq!(st.depth, 2, "{}", cfg.name);
        img.flush().unwrap();
        drop(img);
        check_all(&path, &model, "depth 2");
        let mut img = open_rw(&path);
        img.truncate(ino, 300 * bs + 5).unwrap();
        img.flush().unwrap();
        drop(img);
        check_all(&path, &model, "truncated");
        let mut img = open_rw(&path);
        img.unlink("/deep").unwrap();
        img.flush().unwrap();
        drop(img);
        model.clear();
        check_all(&path, &model, "unlinked");
    }
}

/// A new file in a full linear directory appends a block; in an htree
/// directory the leaf the hash picks takes it; names in both are found.
#[test]
fn mkfs_d_linear_and_htree_directories() {
    require_e2fsprogs!();
    let dir = TempDir::new("files-mkfsd");
    let src = dir.path("src");
    fs::create_dir_all(src.join("small")).unwrap();
    fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..10 {
        fs::write(src.join("small").join(format!("s{i}")), b"x").unwrap();
    }
    for i in 0..600 {
        fs::write(src.join("big").join(format!("entry-{i:05}")), b"").unwrap();
    }
    let img_path = dir.path("d.img");
    let out = e2fs("mkfs.ext4")
        .args([
            "-F",
            "-q",
            "-b",
            "1024",
            "-N",
            "1024",
            "-O",
            "^has_journal",
            "-U",
            UUID,
            "-E",
        ])
        .arg(format!("hash_seed={UUID}"))
        .arg("-d")
        .arg(&src)
        .arg(&img_path)
        .arg("16M")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Make "big" an htree directory.
    let fsck = e2fs("e2fsck")
        .args(["-fyD"])
        .arg(&img_path)
        .output()
        .unwrap();
    assert!(fsck.status.code().unwrap_or(8) <= 1);
    assert_fsck_clean(&img_path, "mkfs -d");
    let mut img = open_rw(&img_path);
    let big = img.lookup("/big").unwrap();
    assert!(
        img.inode(big).unwrap().flags & 0x1000 != 0,
        "big is not htree"
    );
    assert_eq!(img.read_dir(big).unwrap().len(), 602);
    let e = img.lookup("/big/entry-00377").unwrap();
    assert!(img.inode(e).unwrap().is_file());
    let small = img.lookup("/small").unwrap();
    assert_eq!(img.read_dir(small).unwrap().len(), 12);
    assert!(
        img.inode(small).unwrap().flags & 0x1000 == 0,
        "small is htree"
    );
    let small_size = img.inode(small).unwrap().size;
    // Linear: enough names to need a new block.
    let mut made = Vec::new();
    for i in 0..40 {
        let p = format!("/small/new-name-that-is-quite-long-{i:04}");
        let ino = img.create(&p, 0o644).unwrap();
        img.fallocate(ino, 0, 3 * 1024, false).unwrap();
        made.push((p, ino));
    }
    assert!(img.inode(small).unwrap().size > small_size);
    // Htree: a few names into the leaves the hash picks.
    let mut in_big = 0;
    for i in 0..5 {
        let p = format!("/big/added-{i}");
        match img.create(&p, 0o644) {
            Ok(ino) => {
                made.push((p, ino));
                in_big += 1;
            }
            Err(Ext4Error::Unsupported { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(in_big > 0, "no htree leaf had room");
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&img_path, "after creates");
    let mut img = open_ro(&img_path);
    for (p, ino) in &made {
        assert_eq!(img.lookup(p).unwrap(), *ino, "{p}");
        let st = img.stat(*ino).unwrap();
        check_file(&img_path, p, &st);
    }
    assert_eq!(img.read_dir(big).unwrap().len(), 602 + in_big);
    let ls = debugfs(&img_path, "ls -l /small");
    for (p, _) in made.iter().filter(|(p, _)| p.starts_with("/small/")) {
        assert!(ls.contains(p.trim_start_matches("/small/")), "{p}");
    }
    drop(img);
    // And remove them all again.
    let mut img = open_rw(&img_path);
    for (p, _) in &made {
        img.unlink(p).unwrap();
    }
    img.unlink("/big/entry-00377").unwrap();
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&img_path, "after unlinks");
    let mut img = open_ro(&img_path);
    assert!(img.lookup("/big/entry-00377").is_err());
    assert_eq!(img.read_dir(big).unwrap().len(), 601);
}

/// The same fallocate by spacekit and by debugfs (small, and three
/// quarters of the free space, so runs cross group boundaries): both
/// clean, the same extents (logical, physical, length, unwritten) and the
/// same block count.
#[test]
fn same_extents_as_debugfs_fallocate() {
    require_e2fsprogs!();
    for cfg in &every_config() {
        for part in [0, 3] {
            let dir = TempDir::new("files-vs-debugfs");
            let base = mkfs(&dir, cfg);
            debugfs_w(&base, &dir, "write /dev/null f");
            let ours = copy(&base, &dir, "ours.img");
            let theirs = copy(&base, &dir, "theirs.img");
            let mut img = open_rw(&ours);
            let bs = u64::from(img.info().block_size);
            let free = img.free_blocks_count();
            let n = if part == 0 {
                (free / 2).min(5000)
            } else {
                free * part / 4
            };
            let what = format!("{}, {n} blocks", cfg.name);
            let ino = img.lookup("/f").unwrap();
            img.fallocate(ino, 0, n * bs, true).unwrap();
            img.flush().unwrap();
            let used_ours = free - img.free_blocks_count();
            drop(img);
            debugfs_w(&theirs, &dir, &format!("fallocate /f 0 {}", n - 1));
            let used_theirs = free - open_ro(&theirs).free_blocks_count();
            assert_fsck_clean(&ours, "spacekit fallocate");
            assert_fsck_clean(&theirs, "debugfs fallocate");
            let a = open_rw(&ours).stat(ino).unwrap();
            let b = open_rw(&theirs).stat(ino).unwrap();
            assert_eq!(a.extents, b.extents, "{what}: extents");
            let data = a.extents.iter().map(|e| u64::from(e.len)).sum::<u64>();
            assert_eq!(data, n, "{what}: data blocks");
            assert_eq!(a.blocks, b.blocks, "{what}: i_blocks");
            assert_eq!(used_ours, used_theirs, "{what}: blocks used");
            check_file(&ours, "/f", &a);
        }
    }
}

/// Extent trees with several leaves are the trees debugfs builds, block
/// for block: the same leaves holding the same extents and the same index
/// entries (`debugfs ex` prints identical text) after one large fallocate
/// whose leaves split at the end of the file: 6 GiB on 1 KiB blocks (209
/// extents, 84 to a leaf: three leaves), 12 GiB on 2 KiB blocks (an odd
/// 169 to a leaf: two), and 560 MiB on 1 KiB blocks in 1,024-block groups
/// (seven leaves under a grown root). libext2fs moves the last entry of a
/// full rightmost leaf into the new one on an append, puts the new node at
/// the first free block from the split node's first block on, and makes
/// room from the top down.
#[test]
fn leaf_splits_at_the_end_give_debugfs_s_tree() {
    require_e2fsprogs!();
    let cases = [
        (
            Config {
                name: "1k-8g",
                size: "8G",
                args: &["-b", "1024"],
            },
            6u64 << 30,
        ),
        (
            Config {
                name: "2k-16g",
                size: "16G",
                args: &["-b", "2048"],
            },
            12 << 30,
        ),
        // 600 groups of 1,024 blocks without flex_bg: an extent a group,
        // seven leaves, so the root grows to depth 2 while a leaf splits
        // (libext2fs takes the new index block first, then the leaf's).
        (
            Config {
                name: "1k-600-groups",
                size: "600M",
                args: &["-b", "1024", "-g", "1024", "-O", "^flex_bg,^has_journal"],
            },
            560 << 20,
        ),
    ];
    for (cfg, bytes) in &cases {
        let (d1, d2) = (TempDir::new("split-ours"), TempDir::new("split-theirs"));
        let ours = mkfs(&d1, cfg);
        let theirs = mkfs(&d2, cfg);
        let mut img = open_rw(&ours);
        let bs = u64::from(img.info().block_size);
        let ino = img.create("/f", 0o644).unwrap();
        img.fallocate(ino, 0, *bytes, true).unwrap();
        img.flush().unwrap();
        drop(img);
        let last = bytes / bs - 1;
        debugfs_w(
            &theirs,
            &d2,
            &format!("write /dev/null f\nfallocate /f 0 {last}\n"),
        );
        assert_fsck_clean(&ours, cfg.name);
        assert_fsck_clean(&theirs, cfg.name);
        let (a, b) = (debugfs(&ours, "ex /f"), debugfs(&theirs, "ex /f"));
        // Index entries just above the leaves ("LEVEL/ DEPTH" with LEVEL
        // one less than DEPTH): one per leaf.
        let leaves = a
            .lines()
            .filter_map(|l| {
                let (lv, rest) = l.split_once('/')?;
                let depth: u32 = rest.split_whitespace().next()?.parse().ok()?;
                (lv.trim().parse::<u32>().ok()? + 1 == depth).then_some(())
            })
            .count();
        assert!(leaves >= 2, "{}: {leaves} leaves\n{a}", cfg.name);
        assert_eq!(a, b, "{}: debugfs ex", cfg.name);
    }
}

/// A large fallocate on a fresh 1 GiB image (4 KiB blocks, journal,
/// flex_bg, backup superblocks in groups 1, 3, 5, 7) fills the free space
/// in order, as ext4 does: from its first to its last physical block no
/// free block is left behind (only blocks in use, the metadata, are stepped
/// over), the extents go up in physical order, and it takes about as few
/// extents and exactly as many blocks as debugfs's fallocate.
#[test]
fn large_fallocate_fills_the_free_space_in_order() {
    require_e2fsprogs!();
    let cfg = Config {
        name: "1g",
        size: "1G",
        args: &["-b", "4096", "-N", "8192"],
    };
    let dir = TempDir::new("files-in-order");
    let base = mkfs(&dir, &cfg);
    debugfs_w(&base, &dir, "write /dev/null f");
    let ours = copy(&base, &dir, "ours.img");
    let theirs = copy(&base, &dir, "theirs.img");
    let mut img = open_rw(&ours);
    let bs = u64::from(img.info().block_size);
    let n = (300u64 << 20) / bs;
    let free = img.free_blocks_count();
    let ino = img.lookup("/f").unwrap();
    assert_eq!(img.fallocate(ino, 0, n * bs, false).unwrap(), n);
    img.flush().unwrap();
    let used_ours = free - img.free_blocks_count();
    let a = img.stat(ino).unwrap();
    let lo = a.extents.iter().map(|e| e.physical).min().unwrap();
    let hi = a
        .extents
        .iter()
        .map(|e| e.physical + u64::from(e.len))
        .max()
        .unwrap();
    for w in a.extents.windows(2) {
        assert!(
            w[1].physical >= w[0].physical + u64::from(w[0].len),
            "extents out of physical order: {:?}",
            a.extents
        );
    }
    for g in 0..img.info().group_count {
        for (s, e) in img.free_extents(g).unwrap() {
            assert!(
                e < lo || s >= hi,
                "free blocks {s}-{e} skipped inside {lo}..{hi}: {:?}",
                a.extents
            );
        }
    }
    // Over two groups: the run goes through group 1 (with a backup
    // superblock) and on, not around it.
    let bpg = u64::from(img.info().blocks_per_group);
    assert!(lo < bpg && hi > 2 * bpg, "{lo}..{hi}: {:?}", a.extents);
    drop(img);
    debugfs_w(&theirs, &dir, &format!("fallocate /f 0 {}", n - 1));
    let used_theirs = free - open_ro(&theirs).free_blocks_count();
    assert_fsck_clean(&ours, "spacekit fallocate");
    assert_fsck_clean(&theirs, "debugfs fallocate");
    let b = open_rw(&theirs).stat(ino).unwrap();
    let data = |s: &Stat| s.extents.iter().map(|e| u64::from(e.len)).sum::<u64>();
    assert_eq!(data(&a), n);
    assert_eq!(data(&b), n);
    assert!(
        a.extents.len() <= b.extents.len() + 1,
        "{} extents vs debugfs's {}: {:?}",
        a.extents.len(),
        b.extents.len(),
        a.extents
    );
    assert!(
        used_ours.abs_diff(used_theirs) <= 1,
        "blocks used {used_ours} vs {used_theirs}"
    );
    check_file(&ours, "/f", &a);
}

/// Free space in single blocks (every other block in use): a fallocate
/// that would need more tree blocks than are left over is refused before
/// any change, one that fits takes every hole in order.
#[test]
fn fragmented_free_space_is_counted_before_any_change() {
    require_e2fsprogs!();
    let dir = TempDir::new("files-fragmented");
    let path = mkfs(&dir, &K1);
    {
        let mut img = open_rw(&path);
        let mut taken = Vec::new();
        while let Ok(b) = img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 1,
        }) {
            taken.push(b);
        }
        for b in taken.iter().step_by(2) {
            img.free_blocks(*b, 1).unwrap();
        }
        img.create("/f", 0o644).unwrap();
        img.flush().unwrap();
    }
    let bytes = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let ino = img.lookup("/f").unwrap();
    let bs = u64::from(img.info().block_size);
    let free = img.free_blocks_count();
    let e = img.fallocate(ino, 0, (free - 8) * bs, false).unwrap_err();
    assert!(matches!(e, Ext4Error::NoSpace { .. }), "{e:?}");
    assert!(!img.is_dirty(), "a refused fallocate changed something");
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), bytes);
    let mut img = open_rw(&path);
    let n = free / 2;
    assert_eq!(img.fallocate(ino, 0, n * bs, false).unwrap(), n);
    let st = img.stat(ino).unwrap();
    assert!(
        st.extents.len() as u64 > n / 2,
        "{} extents",
        st.extents.len()
    );
    for w in st.extents.windows(2) {
        assert!(w[1].physical > w[0].physical, "out of order");
    }
    img.flush().unwrap();
    assert_verify_clean(&img, "fragmented fallocate");
}

type Txn = fn(&mut Image);

fn txn_create(img: &mut Image) {
    let ino = img.create("/new", 0o644).unwrap();
    let bs = u64::from(img.info().block_size);
    for i in 0..8 {
        img.fallocate(ino, 3 * i * bs, 2 * bs, false).unwrap();
    }
}

fn txn_rm(img: &mut Image) {
    img.unlink("/old").unwrap();
}

fn crash_every_step(base: &Path, dir: &TempDir, txn: Txn, what: &str) {
    let before = fs::read(base).unwrap();
    let reference = copy(base, dir, "reference.img");
    let mut img = open_rw(&reference);
    txn(&mut img);
    img.flush().unwrap();
    drop(img);
    let after = fs::read(&reference).unwrap();
    assert_ne!(before, after);
    assert_fsck_clean(&reference, what);
    let mut step = 0;
    loop {
        let p = copy(base, dir, &format!("crash{step}.img"));
        let (mut img, faults) = open_faulty(&p);
        txn(&mut img);
        faults.fail_write_after(step);
        let failed = img.flush().is_err();
        drop(img);
        drop(open_rw(&p)); // replays or discards the log
        let now = fs::read(&p).unwrap();
        assert!(
            now == before || now == after || !failed && now.len() == after.len(),
            "{what}: step {step}: neither before nor after"
        );
        if failed {
            // Timestamps differ between runs: compare all but inode tables
            // through e2fsck and the allocation state.
            assert_fsck_clean(&p, &format!("{what}: step {step}"));
        }
        fs::remove_file(&p).unwrap();
        if !failed {
            break;
        }
        step += 1;
    }
    assert!(step > 4, "{what}: only {step} steps");
}

#[test]
fn crash_at_every_flush_step() {
    require_e2fsprogs!();
    // The same timestamps in the reference run and the crashed ones.
    std::env::set_var("SOURCE_DATE_EPOCH", FAKE_TIME);
    for cfg in [FILE_CONFIGS[0], FILE_CONFIGS[1]] {
        let dir = TempDir::new("files-crash");
        let base = mkfs(&dir, &cfg);
        crash_every_step(&base, &dir, txn_create, "create+fallocate");
        let mut img = open_rw(&base);
        let ino = img.create("/old", 0o644).unwrap();
        let bs = u64::from(img.info().block_size);
        for i in 0..10 {
            img.fallocate(ino, 2 * i * bs, bs, false).unwrap();
        }
        img.flush().unwrap();
        drop(img);
        crash_every_step(&base, &dir, txn_rm, "rm");
    }
}

#[test]
fn bad_input_is_refused_and_nothing_written() {
    require_e2fsprogs!();
    let dir = TempDir::new("files-bad");
    let path = mkfs(&dir, &K1);
    {
        let mut img = open_rw(&path);
        let ino = img.create("/f", 0o644).unwrap();
        img.fallocate(ino, 0, 4096, false).unwrap();
        img.flush().unwrap();
    }
    let bytes = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let f = img.lookup("/f").unwrap();
    let not_found = |e: Ext4Error, want: &str| match e {
        Ext4Error::NotFound { ref path } if path == want => {}
        other => panic!("expected NotFound {{ {want} }}, got {other:?}"),
    };
    not_found(img.lookup("/nope").unwrap_err(), "/nope");
    not_found(
        img.lookup("/lost+found/nope/x").unwrap_err(),
        "/lost+found/nope",
    );
    match img.lookup("/f/x").unwrap_err() {
        Ext4Error::NotADirectory { path } => assert_eq!(path, "/f"),
        other => panic!("expected NotADirectory, got {other:?}"),
    }
    match img.lookup("f").unwrap_err() {
        Ext4Error::NotAbsolute { path } => assert_eq!(path, "f"),
        other => panic!("expected NotAbsolute, got {other:?}"),
    }
    let long = format!("/{}", "a".repeat(256));
    for e in [
        img.lookup(&long).unwrap_err(),
        img.create(&long, 0o644).unwrap_err(),
    ] {
        assert!(matches!(e, Ext4Error::NameTooLong { len: 256 }), "{e:?}");
    }
    not_found(img.create("/nope/x", 0o644).unwrap_err(), "/nope");
    match img.create("/f", 0o644).unwrap_err() {
        Ext4Error::Exists { path } => assert_eq!(path, "/f"),
        other => panic!("expected Exists, got {other:?}"),
    }
    assert!(matches!(
        img.create("/f/x", 0o644).unwrap_err(),
        Ext4Error::NotADirectory { .. }
    ));
    assert!(matches!(
        img.create("/d", 0o040755).unwrap_err(),
        Ext4Error::InvalidArgument { what: "mode", .. }
    ));
    let lf = img.lookup("/lost+found").unwrap();
    for e in [
        img.fallocate(lf, 0, 1024, false).unwrap_err(),
        img.truncate(lf, 0).unwrap_err(),
        img.unlink("/lost+found").unwrap_err(),
    ] {
        match e {
            Ext4Error::NotARegularFile { ino } => assert_eq!(ino, lf),
            other => panic!("expected NotARegularFile, got {other:?}"),
        }
    }
    assert!(matches!(img.unlink("/").unwrap_err(), Ext4Error::IsRoot));
    for e in [
        img.mkdir("/", 0o755).unwrap_err(),
        img.rmdir("/").unwrap_err(),
        img.rename("/", "/moved").unwrap_err(),
        img.rename("/lost+found", "/").unwrap_err(),
        img.link("/f", "/").unwrap_err(),
    ] {
        assert!(matches!(e, Ext4Error::IsRoot), "{e:?}");
    }
    assert!(matches!(
        img.read_dir(f).unwrap_err(),
        Ext4Error::NotADirectory { .. }
    ));
    not_found(img.unlink("/nope").unwrap_err(), "/nope");
    let max = img.max_file_size();
    match img.fallocate(f, max, 1, false).unwrap_err() {
        Ext4Error::FileTooBig { size, max: m } => assert_eq!((size, m), (max + 1, max)),
        other => panic!("expected FileTooBig, got {other:?}"),
    }
    match img.truncate(f, max + 1).unwrap_err() {
        e @ Ext4Error::FileTooBig { .. } => {
            let text = e.to_string();
            assert!(text.contains("largest file size"), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
        other => panic!("expected FileTooBig, got {other:?}"),
    }
    let free = img.free_blocks_count();
    let bs = u64::from(img.info().block_size);
    assert!(matches!(
        img.fallocate(f, 0, (free + 1) * bs, false).unwrap_err(),
        Ext4Error::NoSpace { .. }
    ));
    assert!(!img.is_dirty(), "a refused call changed something");
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_fsck_clean(&path, "after refusals");
}

/// A fallocate larger than a group takes several extents in several
/// groups; one that nearly fills the file system works; one past the free
/// space is refused with nothing changed.
#[test]
fn large_fallocates_span_groups_and_fill_the_file_system() {
    require_e2fsprogs!();
    for cfg in [FILE_CONFIGS[0], FILE_CONFIGS[2], FILE_CONFIGS[3]] {
        let dir = TempDir::new("files-large");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let bs = u64::from(img.info().block_size);
        let bpg = u64::from(img.info().blocks_per_group);
        let ino = img.create("/big", 0o644).unwrap();
        let n = 2 * bpg + bpg / 2;
        assert_eq!(img.fallocate(ino, 0, n * bs, false).unwrap(), n);
        let st = img.stat(ino).unwrap();
        // The groups the extents' blocks lie in (an extent may run on
        // across a group boundary: runs in adjacent groups merge).
        let groups: std::collections::BTreeSet<u64> = st
            .extents
            .iter()
            .flat_map(|e| (e.physical / bpg)..=((e.physical + u64::from(e.len) - 1) / bpg))
            .collect();
        assert!(groups.len() >= 3, "{}: {:?}", cfg.name, st.extents);
        assert_eq!(st.size, n * bs);
        img.flush().unwrap();
        drop(img);
        let mut model = BTreeMap::new();
        model.insert("big".to_string(), ino);
        check_all(&path, &model, cfg.name);
        // Nearly everything that is left, to a second file.
        let mut img = open_rw(&path);
        let f2 = img.create("/rest", 0o600).unwrap();
        let free = img.free_blocks_count();
        let want = free - 16;
        assert_eq!(img.fallocate(f2, 0, want * bs, true).unwrap(), want);
        img.flush().unwrap();
        model.insert("rest".to_string(), f2);
        // More than is left: refused, nothing changed.
        let free = img.free_blocks_count();
        let end = img.stat(f2).unwrap().extents.last().unwrap().end();
        let e = img
            .fallocate(f2, end * bs, (free + 1) * bs, false)
            .unwrap_err();
        assert!(matches!(e, Ext4Error::NoSpace { .. }), "{e:?}");
        assert!(!img.is_dirty());
        drop(img);
        check_all(&path, &model, "nearly full");
        // And free it all again.
        let mut img = open_rw(&path);
        img.unlink("/rest").unwrap();
        img.truncate(ino, 0).unwrap();
        assert_eq!(img.stat(ino).unwrap().blocks, 0);
        img.flush().unwrap();
        drop(img);
        model.remove("rest");
        check_all(&path, &model, "emptied");
    }
}

/// create and unlink set the parent directory's mtime and ctime to now;
/// truncate sets the file's; fallocate sets the ctime, and the mtime only
/// when the size changes.
#[test]
fn operations_set_the_times_the_kernel_sets() {
    use spacekit::ext4::InodeTimes;
    require_e2fsprogs!();
    let dir = TempDir::new("files-times");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let bs = u64::from(img.info().block_size);
    let old = InodeTimes {
        atime: Some(1000),
        ctime: Some(1000),
        mtime: Some(1000),
    };
    // "Now" may be SOURCE_DATE_EPOCH (another test sets it): any time but
    // the old one counts as set.
    let times = |img: &Image, ino: u32| {
        let i = img.inode(ino).unwrap();
        (i.atime, i.ctime != 1000, i.mtime != 1000)
    };
    img.set_inode_times(2, old).unwrap();
    let f = img.create("/f", 0o644).unwrap();
    assert_eq!(times(&img, 2), (1000, true, true), "create");
    img.set_inode_times(f, old).unwrap();
    img.fallocate(f, 0, 4 * bs, true).unwrap();
    assert_eq!(times(&img, f), (1000, true, false), "fallocate, same size");
    img.set_inode_times(f, old).unwrap();
    img.fallocate(f, 0, 8 * bs, false).unwrap();
    assert_eq!(times(&img, f), (1000, true, true), "fallocate, new size");
    img.set_inode_times(f, old).unwrap();
    img.truncate(f, bs).unwrap();
    assert_eq!(times(&img, f), (1000, true, true), "truncate");
    img.set_inode_times(2, old).unwrap();
    img.unlink("/f").unwrap();
    assert_eq!(times(&img, 2), (1000, true, true), "unlink");
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "times");
}

/// A damaged inode bitmap that offers a live inode (its bit clear, its
/// links not) makes create fail with `Corrupt` and change nothing: the
/// file that owns the inode stays (found by the ext4 fuzzer, where the
/// inode was a directory on the new file's own path).
#[test]
fn create_never_reuses_a_live_inode() {
    require_e2fsprogs!();
    let dir = TempDir::new("files-live-inode");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let f = img.create("/f", 0o644).unwrap();
    img.flush().unwrap();
    // The damage: /f's bit cleared, its inode untouched.
    img.free_inode(f, false).unwrap();
    img.flush().unwrap();
    let e = img.create("/g", 0o644).unwrap_err();
    assert!(matches!(e, Ext4Error::Corrupt { .. }), "{e:?}");
    assert!(!img.is_dirty(), "a refused create changed something");
    assert_eq!(img.lookup("/f").unwrap(), f);
    assert!(img.lookup("/g").is_err());
}

/// An I/O error in the middle of an operation (reading the block bitmap of
/// a group it reaches late) undoes everything that operation changed in
/// memory: earlier unflushed operations stay, the flush writes an
/// e2fsck-clean image, and the same operation succeeds once the fault is
/// gone. Checked for fallocate (blocks taken in groups 0-2 before group 3
/// fails) and unlink (the entry removed and blocks freed before it fails).
#[test]
fn an_io_error_in_the_middle_undoes_the_operation() {
    require_e2fsprogs!();
    for cfg in [FILE_CONFIGS[0], FILE_CONFIGS[2]] {
        let dir = TempDir::new("files-undo");
        let path = mkfs(&dir, &cfg);
        let bad = dumpe2fs(&path).groups[3].block_bitmap;
        // Warm up: a fallocate through group 4 and back, so groups 0-4 are
        // no longer BLOCK_UNINIT and their bitmaps are read from the image.
        let mut img = open_rw(&path);
        let bs = u64::from(img.info().block_size);
        let n = 4 * u64::from(img.info().blocks_per_group);
        let ino = img.create("/big", 0o644).unwrap();
        img.fallocate(ino, 0, (n + 64) * bs, false).unwrap();
        img.truncate(ino, 0).unwrap();
        img.flush().unwrap();
        drop(img);
        let mut model = BTreeMap::new();
        model.insert("big".to_string(), ino);

        let (mut img, faults) = open_faulty(&path);
        // An earlier operation, not yet flushed: it must survive the undo.
        let keep = img.create("/keep", 0o644).unwrap();
        img.fallocate(keep, 0, 4 * bs, false).unwrap();
        model.insert("keep".to_string(), keep);
        let free = img.free_blocks_count();
        let st = img.stat(ino).unwrap();
        faults.fail_read_at(Some(bad * bs));
        let e = img.fallocate(ino, 0, n * bs, false).unwrap_err();
        assert!(matches!(e, Ext4Error::Io { .. }), "{}: {e:?}", cfg.name);
        assert_eq!(img.free_blocks_count(), free, "{}", cfg.name);
        assert_eq!(img.stat(ino).unwrap(), st, "{}", cfg.name);
        img.validate().unwrap();
        img.flush().unwrap();
        drop(img);
        check_all(&path, &model, "an undone fallocate");

        let mut img = open_rw(&path);
        assert_eq!(img.fallocate(ino, 0, n * bs, false).unwrap(), n);
        img.flush().unwrap();
        drop(img);
        check_all(&path, &model, "the fallocate again");

        let before = fs::read(&path).unwrap();
        let (mut img, faults) = open_faulty(&path);
        faults.fail_read_at(Some(bad * bs));
        let e = img.unlink("/big").unwrap_err();
        assert!(matches!(e, Ext4Error::Io { .. }), "{}: {e:?}", cfg.name);
        assert!(
            !img.is_dirty(),
            "{}: an undone unlink left changes",
            cfg.name
        );
        assert_eq!(img.lookup("/big").unwrap(), ino);
        img.validate().unwrap();
        img.flush().unwrap();
        assert_eq!(fs::read(&path).unwrap(), before, "{}", cfg.name);
        faults.fail_read_at(None);
        img.unlink("/big").unwrap();
        img.flush().unwrap();
        drop(img);
        model.remove("big");
        check_all(&path, &model, "the unlink again");
    }
}

/// Names go into htree directories (1 KiB blocks, metadata_csum), as the
/// kernel's `ext4_dx_add_entry` puts them: a full leaf splits (a new leaf
/// appended, its index entry inserted after the old one's); when the dx
/// root over the leaves is full it moves down a level (a new dx node, the
/// root over it, `indirect_levels` 1); a full dx node splits and its parent
/// gets the new node's entry. e2fsck-clean at every check, every name
/// found by spacekit and by debugfs (through the index).
#[test]
fn htree_leaves_and_index_nodes_split() {
    require_e2fsprogs!();
    let dir = TempDir::new("files-htree-split");
    let src = dir.path("src");
    fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..400 {
        fs::write(src.join("big").join(format!("entry-{i:05}")), b"").unwrap();
    }
    // Enough names for a dx root over dx nodes (indirect_levels 1).
    fs::create_dir_all(src.join("deep")).unwrap();
    for i in 0..7000 {
        fs::write(src.join("deep").join(format!("entry-{i:05}")), b"").unwrap();
    }
    let img_path = dir.path("h.img");
    let out = e2fs("mkfs.ext4")
        .args([
            "-F",
            "-q",
            "-b",
            "1024",
            "-N",
            "16384",
            "-O",
            "^has_journal",
            "-U",
            UUID,
        ])
        .arg("-d")
        .arg(&src)
        .arg(&img_path)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let fsck = e2fs("e2fsck")
        .args(["-fyD"])
        .arg(&img_path)
        .output()
        .unwrap();
    assert!(fsck.status.code().unwrap_or(8) <= 1);
    let dx_root = |path: &Path, ino: u32| {
        let st = open_ro(path).stat(ino).unwrap();
        let bytes = fs::read(path).unwrap();
        let p0 = st.extents[0].physical as usize * 1024;
        spacekit::testing::ext4::dir::parse_dx_root(&bytes[p0..p0 + 1024], true).unwrap()
    };
    let mut img = open_rw(&img_path);
    let big = img.lookup("/big").unwrap();
    assert!(img.inode(big).unwrap().flags & 0x1000 != 0);
    assert_eq!(dx_root(&img_path, big).indirect_levels, 0);
    let size0 = img.inode(big).unwrap().size;
    let mut made = Vec::new();
    for i in 0..2400 {
        let p = format!("/big/a-much-longer-name-to-fill-leaves-{i:05}");
        made.push((p.clone(), img.create(&p, 0o644).unwrap()));
        if i % 800 == 799 {
            img.flush().unwrap();
            assert_fsck_clean(&img_path, &format!("after {} htree creates", i + 1));
        }
    }
    img.flush().unwrap();
    let leaves = (img.inode(big).unwrap().size - size0) / 1024;
    assert!(leaves > 150, "only {leaves} blocks added");
    drop(img);
    // The root moved down a level and the node under it split.
    let root = dx_root(&img_path, big);
    assert_eq!(root.indirect_levels, 1);
    assert!(root.entries.len() >= 2, "{root:?}");
    assert_fsck_clean(&img_path, "htree creates");
    let mut img = open_ro(&img_path);
    for (p, ino) in &made {
        assert_eq!(img.lookup(p).unwrap(), *ino, "{p}");
    }
    assert_eq!(img.read_dir(big).unwrap().len(), 402 + made.len());
    // debugfs finds names through the index (its `ncheck` would scan).
    for (p, ino) in made.iter().step_by(97) {
        let out = debugfs(&img_path, &format!("stat {p}"));
        assert!(out.contains(&format!("Inode: {ino} ")), "{p}: {out}");
    }

    // e2fsck -D packs /deep's dx nodes full: splits go into full nodes.
    let mut img = open_rw(&img_path);
    let deep = img.lookup("/deep").unwrap();
    let st = img.stat(deep).unwrap();
    let root = dx_root(&img_path, deep);
    assert_eq!(root.indirect_levels, 1, "/deep is not a two-level htree");
    let mut made = Vec::new();
    for i in 0..600 {
        let p = format!("/deep/a-much-longer-name-to-fill-leaves-{i:05}");
        made.push((img.create(&p, 0o644).unwrap(), p));
    }
    img.flush().unwrap();
    let grown = img.inode(deep).unwrap().size / 1024 - st.size / 1024;
    assert!(grown > 10, "only {grown} leaves added to /deep");
    drop(img);
    assert!(dx_root(&img_path, deep).entries.len() > root.entries.len());
    assert_fsck_clean(&img_path, "two-level htree creates");
    let mut img = open_ro(&img_path);
    for (ino, p) in &made {
        assert_eq!(img.lookup(p).unwrap(), *ino, "{p}");
    }
}

/// A damaged extent block (bad checksum, bad header) is refused by every
/// operation that would read it, and nothing is written.
#[test]
fn corrupt_extent_blocks_are_refused() {
    require_e2fsprogs!();
    for (damage, what) in [(12 + 12 * 84, "checksum"), (0, "magic")] {
        let dir = TempDir::new("files-corrupt");
        let path = mkfs(&dir, &K1);
        let mut img = open_rw(&path);
        let bs = u64::from(img.info().block_size);
        let ino = img.create("/f", 0o644).unwrap();
        for i in 0..10 {
            img.fallocate(ino, 2 * i * bs, bs, false).unwrap();
        }
        let st = img.stat(ino).unwrap();
        assert_eq!(st.depth, 1);
        let leaf = st.tree[0].physical;
        img.flush().unwrap();
        drop(img);
        let mut bytes = fs::read(&path).unwrap();
        bytes[(leaf * bs) as usize + damage] ^= 0x55;
        fs::write(&path, &bytes).unwrap();
        let mut img = open_rw(&path);
        assert!(img.stat(ino).is_err(), "{what}: stat");
        assert!(img.fallocate(ino, 100 * bs, bs, false).is_err(), "{what}");
        assert!(img.truncate(ino, bs).is_err(), "{what}");
        assert!(img.unlink("/f").is_err(), "{what}");
        assert!(!img.is_dirty(), "{what}: something changed");
        img.flush().unwrap();
        drop(img);
        assert_eq!(fs::read(&path).unwrap(), bytes, "{what}: written");
    }
}

/// Without `huge_file`, `i_blocks` counts 512-byte sectors in 32 bits, and
/// the kernel refuses an inode whose size passes what that holds (`bad
/// i_size value`): the largest size is the kernel's, and the kernel reads
/// a file of that size; one byte more is refused. With `huge_file`, the
/// extent limit.
#[test]
fn the_largest_file_size_is_the_kernels() {
    require_e2fsprogs!();
    const NO_HUGE: Config = Config {
        name: "nohuge",
        size: "64M",
        args: &["-b", "4096", "-O", "^huge_file,^has_journal"],
    };
    let dir = TempDir::new("files-largest");
    for (cfg, want) in [
        (&NO_HUGE, ((1u64 << 32) - 1) / 8 * 4096),
        (&K1, ((1u64 << 32) - 1) * 1024),
    ] {
        let path = mkfs(&dir, cfg);
        let mut img = open_rw(&path);
        assert_eq!(img.max_file_size(), want, "{}", cfg.name);
        let f = img.create("/big", 0o644).unwrap();
        assert!(matches!(
            img.truncate(f, want + 1).unwrap_err(),
            Ext4Error::FileTooBig { .. }
        ));
        img.truncate(f, want).unwrap();
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, cfg.name);
        let mnt = dir.path(&format!("{}-mnt", cfg.name));
        if let Some(_m) = Mount::new(&path, &mnt) {
            let md = fs::metadata(mnt.join("big")).expect("the kernel reads the file");
            assert_eq!(md.len(), want);
        }
    }
}
