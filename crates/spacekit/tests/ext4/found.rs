//! Defects found by users trying spacekit on images the other tests do not
//! make (populated by `mke2fs -d`, casefolded directories, damaged
//! descriptors), each checked with e2fsprogs (and, for file contents, with
//! the kernel where a loop mount is allowed):
//!
//! * a file truncated into the middle of a block, then grown (by truncate
//!   or fallocate), reads zeros past the cut: `debugfs dump` compared byte
//!   for byte;
//! * writes into casefolded directories are refused before any change,
//!   lookups there match ASCII names case-insensitively;
//! * an image whose group descriptor fails its checksum is never written,
//!   by any write path;
//! * an inline-data directory is refused naming inline data.

use std::fs;
use std::path::{Path, PathBuf};

use spacekit::ext4::{AllocRequest, Ext4Error, Image, InodeTimes};

use crate::fixtures::*;
use crate::oracles::*;

/// The block-size configurations of these tests (`mke2fs -d` sizes them).
const SIZES: [(&str, &[&str], &str); 4] = [
    ("1k", &["-b", "1024", "-O", "^has_journal"], "16M"),
    (
        "1k-nocsum",
        &["-b", "1024", "-O", "^has_journal,^metadata_csum"],
        "16M",
    ),
    ("4k", &["-b", "4096", "-O", "^has_journal"], "32M"),
    ("64k", &["-b", "65536", "-O", "^has_journal"], "64M"),
];

#[test]
fn truncate_then_grow_reads_zeros_past_the_cut() {
    require_e2fsprogs!();
    for (name, args, size) in SIZES {
        let dir = TempDir::new("found-tail");
        let bs: usize = args[1].parse().unwrap();
        let src = dir.path("src");
        fs::create_dir_all(&src).unwrap();
        let big = random_bytes(40 * bs + 1234, 1);
        let small = random_bytes(3 * bs, 2);
        let tail = random_bytes(2 * bs + 10, 3);
        let past = random_bytes(2 * bs, 5);
        fs::write(src.join("big"), &big).unwrap();
        fs::write(src.join("small"), &small).unwrap();
        fs::write(src.join("tail"), &tail).unwrap();
        fs::write(src.join("ftail"), &tail).unwrap();
        fs::write(src.join("past"), &past).unwrap();
        let path = mkfs_d(&dir, &format!("{name}.img"), args, &src, size);
        // Another writer's bytes past the end: in the last block of "tail"
        // and "ftail" (grown by truncate and by fallocate), and a whole
        // written block past the end of "past" (its size set to one block;
        // e2fsck allows one such block), which the kernel would never show.
        let out = e2fs("debugfs")
            .args(["-w", "-R"])
            .arg(format!("sif /past size {bs}"))
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        let mut img = open_rw(&path);
        let mut lasts = Vec::new();
        for f in ["/tail", "/ftail"] {
            let ino = img.lookup(f).unwrap();
            let st = img.stat(ino).unwrap();
            let last = st.extents.last().unwrap();
            lasts.push((last.physical + u64::from(last.len) - 1) as usize);
        }
        drop(img);
        let mut bytes = fs::read(&path).unwrap();
        for p in lasts {
            bytes[p * bs + 10..(p + 1) * bs].fill(0xA5);
        }
        fs::write(&path, &bytes).unwrap();
        assert_fsck_clean(&path, name);

        let mut img = open_rw(&path);
        let b = img.lookup("/big").unwrap();
        let s = img.lookup("/small").unwrap();
        let t = img.lookup("/tail").unwrap();
        let ft = img.lookup("/ftail").unwrap();
        let pa = img.lookup("/past").unwrap();
        let (cut, grown) = (12 * bs + 345, 20 * bs + 17);
        img.truncate(b, cut as u64).unwrap();
        img.truncate(s, 100).unwrap();
        img.flush().unwrap();
        // The kernel zeroes the block's tail at the cut: nothing of it is
        // left in the image, whatever reads it later.
        drop(img);
        let bytes = fs::read(&path).unwrap();
        let mut img = open_rw(&path);
        let bst = img.stat(b).unwrap();
        let e = bst
            .extents
            .iter()
            .find(|e| e.logical <= 12 && 12 < u64::from(e.logical) + u64::from(e.len))
            .unwrap();
        let at = (e.physical + u64::from(12 - e.logical)) as usize * bs;
        assert!(
            bytes[at + 345..at + bs].iter().all(|&x| x == 0),
            "{name}: the cut block keeps old bytes"
        );
        img.truncate(b, grown as u64).unwrap();
        img.fallocate(s, 0, 9000, false).unwrap();
        img.truncate(t, 3 * bs as u64).unwrap();
        img.fallocate(ft, 0, 3 * bs as u64, false).unwrap();
        img.truncate(pa, 2 * bs as u64).unwrap();
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, name);

        let mut want_big = big[..cut].to_vec();
        want_big.resize(grown, 0);
        let mut want_small = small[..100].to_vec();
        want_small.resize(9000, 0);
        let mut want_tail = tail.clone();
        want_tail.resize(3 * bs, 0);
        let mut want_past = past[..bs].to_vec();
        want_past.resize(2 * bs, 0);
        let want = [
            want_big,
            want_small,
            want_tail.clone(),
            want_tail,
            want_past,
        ];
        let files = ["/big", "/small", "/tail", "/ftail", "/past"];
        for (f, w) in files.iter().zip(&want) {
            let got = debugfs_dump(&path, &dir, f);
            assert_eq!(got.len(), w.len(), "{name}: {f}: size");
            if let Some(i) = (0..w.len()).find(|&i| got[i] != w[i]) {
                let stale = (i..w.len()).filter(|&j| got[j] != w[j]).count();
                panic!("{name}: {f}: {stale} bytes differ from byte {i} on");
            }
        }
        if bs <= 4096 {
            if let Some(got) = kernel_read(&path, &dir, &files) {
                assert!(got == want, "{name}: the kernel reads other bytes");
            }
        }
    }
}

/// A file system with casefold whose `/cfs` (one mixed-case name) and
/// `/cf` (`n` names, an htree after `e2fsck -D`) are casefolded.
fn casefold_image(dir: &TempDir, name: &str, args: &[&str], size: &str, n: usize) -> PathBuf {
    let src = dir.path("src");
    fs::create_dir_all(src.join("cfs")).unwrap();
    fs::create_dir_all(src.join("cf")).unwrap();
    fs::write(src.join("cfs/MixedCase.txt"), b"mixed").unwrap();
    for i in 0..n {
        fs::write(src.join(format!("cf/Entry-{i}")), b"").unwrap();
    }
    let mut a = args.to_vec();
    a.extend(["-O", "casefold", "-N", "8192"]);
    let path = mkfs_d(dir, name, &a, &src, size);
    for d in ["/cfs", "/cf"] {
        // EXT4_CASEFOLD_FL | EXT4_EXTENTS_FL; e2fsck -D then rebuilds the
        // directories with casefolded hashes.
        let o = e2fs("debugfs")
            .arg("-w")
            .arg("-R")
            .arg(format!("set_inode_field {d} flags 0x40080000"))
            .arg(&path)
            .output()
            .unwrap();
        assert!(o.status.success());
    }
    let o = e2fs("e2fsck").arg("-fyD").arg(&path).output().unwrap();
    assert!(o.status.code().unwrap_or(8) <= 1, "{name}: e2fsck -fyD");
    assert_fsck_clean(&path, name);
    path
}

/// `e2fsck -fyD` on a copy finds no duplicate names and no bad index.
fn assert_no_duplicates(path: &Path, dir: &TempDir, what: &str) {
    let copy = copy(path, dir, "dup-check.img");
    let o = e2fs("e2fsck").arg("-fyD").arg(&copy).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.code().unwrap_or(8) <= 1
            && !text.contains("Duplicate")
            && !text.contains("non-unique"),
        "{what}: e2fsck -fyD:\n{text}"
    );
}

#[test]
fn casefolded_directories_are_read_and_never_miswritten() {
    require_e2fsprogs!();
    for (name, args, size) in [SIZES[0], SIZES[2], SIZES[3]] {
        let dir = TempDir::new("found-casefold");
        // Enough names for more than one block: an htree.
        let n = if name == "64k" { 4000 } else { 600 };
        let path = casefold_image(&dir, &format!("{name}.img"), args, size, n);
        let before = fs::read(&path).unwrap();
        let mut img = open_rw(&path);
        let cf = img.lookup("/cf").unwrap();
        assert!(
            img.inode(cf).unwrap().flags & 0x1000 != 0,
            "{name}: /cf htree"
        );

        // Reads: exact names, and ASCII names in any case, as the kernel
        // matches them.
        let f = img.lookup("/cfs/MixedCase.txt").unwrap();
        assert_eq!(img.lookup("/cfs/MIXEDCASE.TXT").unwrap(), f, "{name}");
        assert_eq!(img.lookup("/cfs/mixedcase.txt").unwrap(), f, "{name}");
        let e = img.lookup("/cf/Entry-377").unwrap();
        assert_eq!(img.lookup("/cf/ENTRY-377").unwrap(), e, "{name}");
        assert_eq!(img.read_dir(cf).unwrap().len(), n + 2, "{name}");
        assert!(matches!(
            img.lookup("/cfs/Other.txt"),
            Err(Ext4Error::NotFound { .. })
        ));

        // Writes into them are refused before any change.
        let casefold = |r: Result<(), Ext4Error>, what: &str| match r {
            Err(Ext4Error::Unsupported { feature }) if feature.contains("casefold") => {}
            other => panic!("{name}: {what}: {other:?}"),
        };
        casefold(img.create("/cfs/MIXEDCASE.TXT", 0o644).map(drop), "create");
        casefold(img.create("/cf/Added-1", 0o644).map(drop), "create");
        casefold(img.unlink("/cf/Entry-5"), "unlink");
        casefold(img.unlink("/cfs/mixedcase.txt"), "unlink");
        assert!(!img.is_dirty(), "{name}: a refused write left changes");
        // The file's own contents are no directory write.
        img.fallocate(f, 0, 10, false).unwrap();
        img.flush().unwrap();
        drop(img);
        assert_ne!(fs::read(&path).unwrap(), before);
        assert_fsck_clean(&path, name);
        assert_no_duplicates(&path, &dir, name);
        // Other directories stay writable.
        let mut img = open_rw(&path);
        img.create("/plain", 0o644).unwrap();
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, name);
    }
}

/// Group 0's descriptor checksum flipped.
fn flip_desc_checksum(path: &Path) {
    let img = open_ro(path);
    let bs = img.info().block_size as usize;
    let gdt = (img.info().first_data_block as usize + 1) * bs;
    drop(img);
    let mut b = fs::read(path).unwrap();
    b[gdt + 0x1E] ^= 0xFF;
    fs::write(path, &b).unwrap();
}

#[test]
fn a_bad_descriptor_checksum_stops_every_write() {
    require_e2fsprogs!();
    let dir = TempDir::new("found-desc");
    let src = dir.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("file"), random_bytes(5000, 4)).unwrap();
    let configs: [(&str, &[&str], &str); 5] = [
        ("1k", &["-b", "1024", "-N", "512"], "32M"),
        (
            "1k-uninit_bg",
            &["-b", "1024", "-N", "512", "-O", "^metadata_csum,uninit_bg"],
            "32M",
        ),
        ("4k", &["-b", "4096", "-O", "^has_journal"], "32M"),
        ("64k", &["-b", "65536", "-O", "^has_journal"], "64M"),
        (
            "64k-uninit_bg",
            &["-b", "65536", "-O", "^has_journal,^metadata_csum,uninit_bg"],
            "64M",
        ),
    ];
    for (name, args, size) in configs {
        let path = mkfs_d(&dir, &format!("{name}.img"), args, &src, size);
        flip_desc_checksum(&path);
        let before = fs::read(&path).unwrap();
        let mut img = open_rw(&path);
        assert!(!img.verify().unwrap().is_clean(), "{name}");
        let file = img.lookup("/file").unwrap();
        let refused = |r: Result<(), Ext4Error>, what: &str| match r {
            Err(Ext4Error::BadChecksum {
                what: "group descriptor",
                group: Some(0),
            }) => {}
            other => panic!("{name}: {what}: {other:?}"),
        };
        refused(
            img.fallocate(file, 0, 1 << 20, false).map(drop),
            "fallocate",
        );
        refused(img.truncate(file, 10), "truncate");
        refused(img.unlink("/file"), "unlink");
        refused(img.create("/new", 0o644).map(drop), "create");
        let req = AllocRequest {
            goal: None,
            len: 1,
            align: 1,
        };
        refused(img.alloc_blocks(req).map(drop), "alloc_blocks");
        let st = img.stat(file).unwrap();
        refused(img.free_blocks(st.extents[0].physical, 1), "free_blocks");
        refused(img.alloc_inode(None, false).map(drop), "alloc_inode");
        refused(img.free_inode(file, false), "free_inode");
        let t = InodeTimes {
            atime: Some(1),
            ..InodeTimes::default()
        };
        refused(img.set_inode_times(file, t), "set_inode_times");
        assert!(!img.is_dirty(), "{name}");
        img.flush().unwrap();
        drop(img);
        assert!(fs::read(&path).unwrap() == before, "{name}: image written");
        assert!(!Image::redo_log_path(&path).exists(), "{name}: a redo log");
    }
}

/// An inline directory reads; a new name in it is refused naming inline
/// data (contents.rs checks the rest against the kernel).
#[test]
fn inline_data_directories_read_and_refuse_names_as_such() {
    require_e2fsprogs!();
    let dir = TempDir::new("found-inline");
    let src = dir.path("src");
    fs::create_dir_all(src.join("small")).unwrap();
    fs::write(src.join("small/a"), b"a").unwrap();
    let path = mkfs_d(
        &dir,
        "inline.img",
        &["-b", "4096", "-O", "^has_journal,inline_data"],
        &src,
        "16M",
    );
    let mut img = open_ro(&path);
    let small = img.lookup("/small");
    // The root directory is not inline (lost+found made it bigger), so
    // the walk gets to /small, which is.
    let small = small.unwrap();
    assert_eq!(img.inode(small).unwrap().flags & 0x1000_0000, 0x1000_0000);
    let names: Vec<Vec<u8>> = img
        .read_dir(small)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, [&b"."[..], b"..", b"a"]);
    drop(img);
    let mut img = open_rw(&path);
    match img.create("/small/b", 0o644) {
        Err(Ext4Error::Unsupported { feature }) => assert_eq!(feature, "inline data"),
        other => panic!("{other:?}"),
    }
    assert!(!img.is_dirty());
}

#[test]
fn unlinking_a_file_with_an_xattr_block_frees_the_block() {
    require_e2fsprogs!();
    let dir = TempDir::new("found-xattr");
    let path = mkfs(&dir, &K1);
    let big = dir.path("big.txt");
    fs::write(&big, "x".repeat(600)).unwrap();
    let one = dir.path("one.txt");
    fs::write(&one, "hi").unwrap();
    debugfs_w(
        &path,
        &dir,
        &format!(
            "write {} f\nea_set -f {} /f user.big\n",
            one.display(),
            big.display()
        ),
    );
    let mut img = open_rw(&path);
    let f = img.lookup("/f").unwrap();
    let x = img.inode(f).unwrap().file_acl;
    assert_ne!(x, 0, "the xattr is in a block");
    let free = img.free_blocks_count();
    img.unlink("/f").unwrap();
    // The data block and the xattr block.
    assert_eq!(img.free_blocks_count(), free + 2);
    assert!(!img.block_in_use(x).unwrap());
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "after the unlink");
}

/// `debugfs -w -R CMD` on `path`, which must succeed.
fn debugfs_w1(path: &Path, cmd: &str) {
    let o = e2fs("debugfs")
        .args(["-w", "-R", cmd])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "debugfs {cmd}");
}

#[test]
fn files_the_kernel_would_not_change_are_refused() {
    require_e2fsprogs!();
    let dir = TempDir::new("found-refused");
    let src = dir.path("src");
    fs::create_dir_all(&src).unwrap();
    for f in ["enc", "verity", "plain"] {
        fs::write(src.join(f), random_bytes(3000, 6)).unwrap();
    }
    let path = mkfs_d(
        &dir,
        "r.img",
        &["-b", "1024", "-O", "^has_journal,encrypt", "-N", "256"],
        &src,
        "8M",
    );
    // EXTENTS_FL with ENCRYPT_FL, and with VERITY_FL.
    debugfs_w1(&path, "sif /enc flags 0x80800");
    debugfs_w1(&path, "sif /verity flags 0x180000");
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let enc = img.lookup("/enc").unwrap();
    let verity = img.lookup("/verity").unwrap();
    let unsupported = |r: Result<(), Ext4Error>, what: &str, want: &str| match r {
        Err(Ext4Error::Unsupported { feature }) if feature.contains(want) => {}
        other => panic!("{what}: {other:?}"),
    };
    // Cutting ciphertext inside a block, or growing past a partial block,
    // would need the key.
    unsupported(img.truncate(enc, 1500), "truncate enc", "encrypted");
    unsupported(
        img.fallocate(enc, 0, 9000, false).map(drop),
        "fallocate enc",
        "encrypted",
    );
    unsupported(img.truncate(verity, 10), "truncate verity", "fs-verity");
    unsupported(
        img.fallocate(verity, 0, 1, true).map(drop),
        "fallocate verity",
        "fs-verity",
    );
    // The resize inode (7, a regular file to the format) is not a user's
    // file; other reserved inodes are not regular files at all.
    assert!(
        matches!(
            img.truncate(7, 0),
            Err(Ext4Error::InvalidArgument { what: "ino", .. })
        ),
        "truncate of the resize inode"
    );
    for ino in [1, 2, 5, 8] {
        assert!(
            matches!(
                img.truncate(ino, 0),
                Err(Ext4Error::NotARegularFile { .. } | Ext4Error::InvalidArgument { .. })
            ),
            "truncate of reserved inode {ino}"
        );
    }
    assert!(!img.is_dirty());
    // Whole blocks of an encrypted file can go: nothing to re-encrypt.
    img.truncate(enc, 2048).unwrap();
    img.flush().unwrap();
    drop(img);
    assert_ne!(fs::read(&path).unwrap(), before);

    // A file whose last block the bitmap calls free (a damaged image):
    // zeroing its tail could write into anything, so it is refused.
    let mut img = open_ro(&path);
    let plain = img.lookup("/plain").unwrap();
    let last = *img.stat(plain).unwrap().extents.last().unwrap();
    drop(img);
    let p = last.physical + u64::from(last.len) - 1;
    debugfs_w1(&path, &format!("freeb {p}"));
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    match img.truncate(plain, 2500) {
        Err(Ext4Error::Corrupt { .. }) => {}
        other => panic!("truncate over a free block: {other:?}"),
    }
    assert!(!img.is_dirty());
    drop(img);
    assert!(fs::read(&path).unwrap() == before);
}

#[test]
fn unlinking_a_file_with_an_xattr_value_inode_is_refused() {
    require_e2fsprogs!();
    let dir = TempDir::new("found-ea-inode");
    let src = dir.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"hi").unwrap();
    fs::write(src.join("g"), b"hi").unwrap();
    let path = mkfs_d(
        &dir,
        "ea.img",
        &["-b", "4096", "-I", "256", "-O", "^has_journal,ea_inode"],
        &src,
        "16M",
    );
    let big = dir.path("big.txt");
    fs::write(&big, "v".repeat(6000)).unwrap();
    debugfs_w1(&path, &format!("ea_set -f {} /f user.big", big.display()));
    debugfs_w1(&path, "ea_set /g user.small tiny");
    // debugfs leaves the value inode's reference count to e2fsck.
    let o = e2fs("e2fsck").arg("-fy").arg(&path).output().unwrap();
    assert!(o.status.code().unwrap_or(8) <= 1);
    assert_fsck_clean(&path, "ea_inode");
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let f = img.lookup("/f").unwrap();
    assert_eq!(
        img.inode(f).unwrap().file_acl,
        0,
        "the value is not in a block"
    );
    match img.unlink("/f") {
        Err(Ext4Error::Unsupported { feature }) => assert!(feature.contains("ea_inode")),
        other => panic!("{other:?}"),
    }
    assert!(!img.is_dirty());
    img.flush().unwrap();
    drop(img);
    assert!(fs::read(&path).unwrap() == before, "image written");
    // A small in-inode xattr is no value inode: that file goes.
    let mut img = open_rw(&path);
    img.unlink("/g").unwrap();
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "after unlinking /g");
}
