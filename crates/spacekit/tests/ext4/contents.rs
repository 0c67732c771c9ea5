//! File contents: bytes spacekit writes read back identically through
//! `debugfs dump`, `Image::read` and the kernel (a read-only loop mount),
//! with the extents debugfs lists; bytes `mke2fs -d` and the kernel wrote
//! read identically through spacekit; the `File` handle streams and seeks;
//! a failed write changes no metadata; a write never lands on blocks freed
//! since the last flush.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image, OpenMode};

use crate::files::check_file;
use crate::fixtures::*;
use crate::oracles::*;

/// One block size of each kind, with and without metadata_csum.
fn configs() -> Vec<Config> {
    let mut out = vec![K1, K1_NOCSUM, K64];
    out.extend(CONFIGS.iter().filter(|c| c.name == "4k-seed").copied());
    assert_eq!(out.len(), 4, "a 4 KiB configuration is missing");
    out
}

/// The model's bytes against debugfs, `Image::read`, the kernel, and each
/// file's extents against debugfs's.
fn check_against_everyone(
    path: &Path,
    dir: &TempDir,
    model: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    assert_fsck_clean(path, what);
    let mut img = open_ro(path);
    for (name, want) in model {
        let ino = img.lookup(name).unwrap();
        let mut ours = vec![0x5A; want.len() + 100];
        let n = img.read(ino, 0, &mut ours).unwrap();
        assert!(
            n == want.len() && ours[..n] == want[..],
            "{what}: {name}: Image::read"
        );
        let theirs = debugfs_dump(path, dir, name);
        assert!(theirs == *want, "{what}: {name}: debugfs dump differs");
        check_file(path, name, &img.stat(ino).unwrap());
    }
    drop(img);
    let names: Vec<&str> = model.keys().map(String::as_str).collect();
    if let Some(got) = kernel_read(path, dir, &names) {
        for (name, g) in names.iter().zip(got) {
            assert!(
                g == model[*name],
                "{what}: {name}: the kernel reads other bytes"
            );
        }
    }
}

/// Writes `bytes` at `at` of file `name` (created if missing) and into the
/// model.
fn put(
    img: &mut Image,
    model: &mut BTreeMap<String, Vec<u8>>,
    name: &str,
    at: usize,
    bytes: &[u8],
) {
    let ino = match img.lookup(name) {
        Ok(i) => i,
        Err(_) => img.create(name, 0o644).unwrap(),
    };
    img.write(ino, at as u64, bytes).unwrap();
    let m = model.entry(name.into()).or_default();
    if m.len() < at + bytes.len() {
        m.resize(at + bytes.len(), 0);
    }
    m[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Writes into new files, holes, unwritten extents (split in three),
/// past the end, across block boundaries and over a file debugfs wrote.
#[test]
fn written_bytes_read_back_through_debugfs_and_the_kernel() {
    require_e2fsprogs!();
    for cfg in configs() {
        let dir = TempDir::new("contents-write");
        let path = mkfs(&dir, &cfg);
        let bs = open_ro(&path).info().block_size as usize;
        let host = dir.path("host.src");
        let theirs = random_bytes(7 * bs + 3, 5);
        fs::write(&host, &theirs).unwrap();
        debugfs_w(&path, &dir, &format!("write {} dfs\n", host.display()));
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        model.insert("/dfs".into(), theirs);
        let mut img = open_rw(&path);
        let m = &mut model;
        put(&mut img, m, "/small", 0, b"hello, ext4\n");
        put(&mut img, m, "/multi", 0, &random_bytes(5 * bs + bs / 2, 6));
        // Holes before, between and after.
        put(&mut img, m, "/sparse", 3 * bs + 7, b"0123456789");
        put(
            &mut img,
            m,
            "/sparse",
            20 * bs - 100,
            &random_bytes(2 * bs, 7),
        );
        // Into the middle of an unwritten extent: split in three.
        let ino = img.create("/prealloc", 0o600).unwrap();
        img.fallocate(ino, 0, 8 * bs as u64, false).unwrap();
        m.insert("/prealloc".into(), vec![0; 8 * bs]);
        put(
            &mut img,
            m,
            "/prealloc",
            bs / 2,
            &random_bytes(bs + bs / 2, 8),
        );
        // Preallocated past the end (keep_size), then written there.
        let ino = img.create("/past", 0o600).unwrap();
        img.fallocate(ino, 0, 10 * bs as u64, true).unwrap();
        put(&mut img, m, "/past", 2 * bs + 1, &random_bytes(3 * bs, 9));
        // Over debugfs's bytes, and past their end.
        put(&mut img, m, "/dfs", bs - 3, &random_bytes(bs + 6, 10));
        put(&mut img, m, "/dfs", 7 * bs + 1, &random_bytes(2 * bs, 11));
        // Appends of odd sizes: one extent grows.
        for i in 0..9 {
            let at = m.get("/append").map_or(0, Vec::len);
            put(
                &mut img,
                m,
                "/append",
                at,
                &random_bytes(bs / 3 + i, 12 + i as u64),
            );
        }
        img.flush().unwrap();
        drop(img);
        check_against_everyone(&path, &dir, &model, cfg.name);
        let ext = open_ro(&path)
            .stat(open_ro(&path).lookup("/prealloc").unwrap())
            .unwrap()
            .extents;
        assert_eq!(
            ext.iter().map(|e| (e.len, e.unwritten)).collect::<Vec<_>>(),
            [(2, false), (6, true)],
            "{}: the written blocks of /prealloc are initialised, the rest not",
            cfg.name
        );
    }
}

/// What `mke2fs -d` and the kernel wrote (sparse files, fallocated ranges,
/// block-boundary tails), read by spacekit byte for byte.
#[test]
fn spacekit_reads_what_mke2fs_and_the_kernel_wrote() {
    require_e2fsprogs!();
    for cfg in configs() {
        let dir = TempDir::new("contents-read");
        let bs = cfg.args[1].parse::<usize>().unwrap();
        let src = dir.path("src");
        fs::create_dir_all(&src).unwrap();
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (i, len) in [0, 1, bs - 1, bs, bs + 1, 13 * bs + 17]
            .into_iter()
            .enumerate()
        {
            let b = random_bytes(len, 20 + i as u64);
            fs::write(src.join(format!("f{i}")), &b).unwrap();
            model.insert(format!("/f{i}"), b);
        }
        // A sparse file: data, a hole, data, a hole at the end.
        let mut sparse = vec![0u8; 40 * bs];
        sparse[..100].copy_from_slice(&random_bytes(100, 30));
        sparse[25 * bs..26 * bs].copy_from_slice(&random_bytes(bs, 31));
        let mut f = fs::File::create(src.join("sparse")).unwrap();
        f.write_all(&sparse[..100]).unwrap();
        f.seek(SeekFrom::Start(25 * bs as u64)).unwrap();
        f.write_all(&sparse[25 * bs..26 * bs]).unwrap();
        f.set_len(40 * bs as u64).unwrap();
        drop(f);
        model.insert("/sparse".into(), sparse);
        let size = if bs == 65536 { "64M" } else { "16M" };
        let path = mkfs_d(&dir, &format!("{}.img", cfg.name), cfg.args, &src, size);
        // The kernel writes more, where a loop mount is allowed.
        let mnt = dir.path("mnt-rw");
        fs::create_dir_all(&mnt).unwrap();
        let mounted = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&path)
            .arg(&mnt)
            .output()
            .is_ok_and(|o| o.status.success());
        if mounted {
            let k = random_bytes(3 * bs + 5, 40);
            fs::write(mnt.join("kernel"), &k).unwrap();
            model.insert("/kernel".into(), k);
            // fallocate(2) beyond the bytes: unwritten extents read as zeros.
            let mut pre = random_bytes(bs / 2, 41);
            fs::write(mnt.join("prealloc"), &pre).unwrap();
            let st = Command::new("fallocate")
                .args(["-o", "0", "-l", &(9 * bs).to_string()])
                .arg(mnt.join("prealloc"))
                .status()
                .unwrap();
            assert!(st.success(), "fallocate(1)");
            pre.resize(9 * bs, 0);
            model.insert("/prealloc".into(), pre);
            let um = Command::new("umount").arg(&mnt).status().unwrap();
            assert!(um.success(), "umount");
        } else {
            println!("skipping the kernel's writes: mount -o loop failed");
        }
        assert_fsck_clean(&path, cfg.name);
        let mut img = open_ro(&path);
        for (name, want) in &model {
            let ino = img.lookup(name).unwrap();
            let mut got = vec![0xEE; want.len() + 1];
            let n = img.read(ino, 0, &mut got).unwrap();
            assert_eq!(n, want.len(), "{}: {name}: length", cfg.name);
            assert!(got[..n] == want[..], "{}: {name}: bytes", cfg.name);
            // And from an odd offset, in odd pieces.
            let mut file = img.file(ino).unwrap();
            file.seek(SeekFrom::Start(want.len() as u64 / 3)).unwrap();
            let mut rest = Vec::new();
            let mut piece = vec![0; bs / 2 + 3];
            loop {
                let k = file.read(&mut piece).unwrap();
                if k == 0 {
                    break;
                }
                rest.extend_from_slice(&piece[..k]);
            }
            assert!(
                rest == want[want.len() / 3..],
                "{}: {name}: streamed",
                cfg.name
            );
        }
    }
}

/// `std::io::copy` in and out through `File`, and `Seek` from every base.
#[test]
fn the_file_handle_streams_and_seeks() {
    require_e2fsprogs!();
    let dir = TempDir::new("contents-handle");
    let cfg = configs()[3];
    let path = mkfs(&dir, &cfg);
    let bytes = random_bytes(3 * 1024 * 1024 + 123, 50);
    let mut img = open_rw(&path);
    let ino = img.create("/big", 0o644).unwrap();
    let mut f = img.file(ino).unwrap();
    assert_eq!(f.ino(), ino);
    let n = std::io::copy(&mut &bytes[..], &mut f).unwrap();
    assert_eq!(n, bytes.len() as u64);
    assert_eq!(f.seek(SeekFrom::End(-23)).unwrap(), bytes.len() as u64 - 23);
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, bytes[bytes.len() - 23..]);
    assert_eq!(
        f.seek(SeekFrom::Current(-100)).unwrap(),
        bytes.len() as u64 - 100
    );
    assert!(f.seek(SeekFrom::Current(-(bytes.len() as i64))).is_err());
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    std::io::copy(&mut f, &mut back).unwrap();
    assert!(back == bytes, "copied back out");
    f.flush().unwrap();
    drop(img);
    let mut model = BTreeMap::new();
    model.insert("/big".to_string(), bytes);
    check_against_everyone(&path, &dir, &model, "handle");
}

/// A write whose data cannot be written (an I/O error) leaves the inode,
/// the free counts and what a flush would write as they were, and a read
/// that fails says so.
#[test]
fn a_failed_write_changes_no_metadata() {
    require_e2fsprogs!();
    let dir = TempDir::new("contents-fault");
    let path = mkfs(&dir, &configs()[0]);
    let bs = open_ro(&path).info().block_size as usize;
    let (mut img, faults) = open_faulty(&path);
    let ino = img.create("/f", 0o644).unwrap();
    img.write(ino, 0, &random_bytes(2 * bs, 60)).unwrap();
    img.flush().unwrap();
    let before = (
        img.stat(ino).unwrap(),
        img.free_blocks_count(),
        img.is_dirty(),
    );
    // Past the end (new blocks) and over the old bytes (in place).
    for at in [5 * bs as u64, 10] {
        faults.fail_write_after(0);
        let e = img.write(ino, at, &random_bytes(3 * bs, 61)).unwrap_err();
        assert!(matches!(e, Ext4Error::Io { .. }), "{e:?}");
        let after = (
            img.stat(ino).unwrap(),
            img.free_blocks_count(),
            img.is_dirty(),
        );
        assert_eq!(after, before, "a failed write at {at} changed metadata");
    }
    faults.fail_read_at(Some(img.stat(ino).unwrap().extents[0].physical * bs as u64));
    let mut buf = vec![0; bs];
    assert!(matches!(
        img.read(ino, 0, &mut buf),
        Err(Ext4Error::Io { .. })
    ));
    faults.fail_read_at(None);
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "after failed writes");
}

/// Blocks freed since the last flush still belong to their old file on
/// disk: a write after the free commits it first, so a crash before the
/// next flush cannot leave the old file pointing at new bytes. The new
/// file takes the old one's blocks, and the bytes of its partial blocks it
/// did not write read as zeros, not as the old file's.
#[test]
fn a_write_after_frees_commits_them_first() {
    require_e2fsprogs!();
    let dir = TempDir::new("contents-reuse");
    let path = mkfs(&dir, &configs()[0]);
    let bs = open_ro(&path).info().block_size as usize;
    let mut img = open_rw(&path);
    let old = img.create("/old", 0o644).unwrap();
    img.write(old, 0, &random_bytes(8 * bs, 70)).unwrap();
    img.flush().unwrap();
    img.unlink("/old").unwrap();
    let new = img.create("/new", 0o644).unwrap();
    let bytes = random_bytes(8 * bs - 9, 71);
    img.write(new, 5, &bytes).unwrap();
    let mut want = vec![0; 5];
    want.extend_from_slice(&bytes);
    // The unlink is on disk before the new bytes are.
    let mut disk = Image::open(&path, OpenMode::ReadOnly).unwrap();
    assert!(
        matches!(disk.lookup("/old"), Err(Ext4Error::NotFound { .. })),
        "the unlink was not committed before the write"
    );
    drop(disk);
    img.flush().unwrap();
    drop(img);
    let mut model = BTreeMap::new();
    model.insert("/new".to_string(), want);
    check_against_everyone(&path, &dir, &model, "reuse");
}

/// `mke2fs -O inline_data -d`: files of up to 60 bytes live in `i_block`,
/// larger ones also in the `system.data` attribute, larger still in
/// blocks; spacekit reads every one byte for byte, and refuses to write an
/// inline file (typed, nothing changed).
#[test]
fn inline_data_files_read_and_writes_are_refused() {
    require_e2fsprogs!();
    let dir = TempDir::new("contents-inline");
    let src = dir.path("src");
    fs::create_dir_all(&src).unwrap();
    let mut model = BTreeMap::new();
    for (i, len) in [0usize, 1, 59, 60, 61, 100, 150, 4000]
        .into_iter()
        .enumerate()
    {
        let b = random_bytes(len, 80 + i as u64);
        fs::write(src.join(format!("f{i}")), &b).unwrap();
        model.insert(format!("/f{i}"), b);
    }
    std::os::unix::fs::symlink("t".repeat(90), src.join("longlink")).unwrap();
    let path = mkfs_d(
        &dir,
        "inline.img",
        &["-b", "4096", "-I", "256", "-O", "^has_journal,inline_data"],
        &src,
        "16M",
    );
    assert_fsck_clean(&path, "inline");
    let mut img = open_ro(&path);
    let mut inline = 0;
    for (name, want) in &model {
        let ino = img.lookup(name).unwrap();
        inline += usize::from(img.inode(ino).unwrap().flags & 0x1000_0000 != 0);
        let mut got = vec![0; want.len() + 10];
        let n = img.read(ino, 0, &mut got).unwrap();
        assert!(
            n == want.len() && got[..n] == want[..],
            "{name}: inline bytes"
        );
        let mut tail = vec![0; 10];
        let k = img
            .read(ino, want.len().saturating_sub(5) as u64, &mut tail)
            .unwrap();
        assert_eq!(
            &tail[..k],
            &want[want.len().saturating_sub(5)..],
            "{name}: from an offset"
        );
    }
    assert!(inline >= 5, "mke2fs made only {inline} inline files");
    let l = img.lookup("/longlink").unwrap();
    assert_eq!(img.read_link(l).unwrap(), "t".repeat(90).as_bytes());
    drop(img);
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let ino = img.lookup("/f5").unwrap();
    let e = img.write(ino, 0, b"x").unwrap_err();
    assert!(matches!(e, Ext4Error::Unsupported { .. }), "{e:?}");
    assert!(!img.is_dirty());
    drop(img);
    assert!(
        fs::read(&path).unwrap() == before,
        "a refused write changed the image"
    );
}

/// `copy_out` copies written extents in the kernel on an image file and
/// reads and writes them on any other device: both give the file's bytes,
/// holes and unwritten extents left as holes, and a file cut inside a
/// block ends where the file ends.
#[test]
fn copy_out_in_the_kernel_and_through_user_space_agree() {
    require_e2fsprogs!();
    use std::os::unix::fs::MetadataExt;
    for cfg in [K1, CONFIGS[1], K64] {
        let dir = TempDir::new("copy-out");
        let path = mkfs(&dir, &cfg);
        let bs = open_ro(&path).info().block_size as usize;
        let mut img = open_rw(&path);
        let mut model = BTreeMap::new();
        let m = &mut model;
        // Data, a hole of 64 blocks, data across a block boundary, then an
        // unwritten stretch, then data ending inside a block.
        put(&mut img, m, "/f", 0, &random_bytes(3 * bs + 17, 1));
        put(&mut img, m, "/f", 67 * bs + bs / 2, &random_bytes(bs, 2));
        let ino = img.lookup("/f").unwrap();
        img.fallocate(ino, (80 * bs) as u64, (5 * bs) as u64, true)
            .unwrap();
        put(&mut img, m, "/f", 90 * bs, &random_bytes(bs / 3, 3));
        img.flush().unwrap();
        drop(img);
        let want = &model["/f"];

        let img = open_ro(&path);
        let out = dir.path("kernel.out");
        let size = img.copy_out(ino, &fs::File::create(&out).unwrap()).unwrap();
        assert_eq!(size, want.len() as u64, "{}", cfg.name);
        assert!(
            fs::read(&out).unwrap() == *want,
            "{}: in the kernel",
            cfg.name
        );
        let blocks = fs::metadata(&out).unwrap().blocks() * 512;
        assert!(
            blocks < want.len() as u64 / 2,
            "{}: holes not kept: {blocks} bytes allocated",
            cfg.name
        );
        drop(img);

        let dev = spacekit::ext4::MemDevice::new(fs::read(&path).unwrap());
        let img = Image::open_on(Box::new(dev), OpenMode::ReadOnly).unwrap();
        let out = dir.path("user.out");
        img.copy_out(ino, &fs::File::create(&out).unwrap()).unwrap();
        assert!(
            fs::read(&out).unwrap() == *want,
            "{}: through user space",
            cfg.name
        );
        assert_eq!(
            debugfs_dump(&path, &dir, "/f"),
            *want,
            "{}: debugfs",
            cfg.name
        );
    }
}

/// The image file gathers consecutive writes before it sends them: a copy
/// out in the kernel before any flush still sees every byte written, and
/// so does a copy in that lands right after them.
#[test]
fn kernel_copies_see_writes_not_yet_sent() {
    require_e2fsprogs!();
    let cfg = CONFIGS[1];
    let dir = TempDir::new("copy-waiting");
    let path = mkfs(&dir, &cfg);
    let mut img = open_rw(&path);
    let mut model = BTreeMap::new();
    let small = random_bytes(20_000, 7);
    put(&mut img, &mut model, "/small", 0, &small);
    let ino = img.lookup("/small").unwrap();
    let out = dir.path("small.out");
    img.copy_out(ino, &fs::File::create(&out).unwrap()).unwrap();
    assert!(
        fs::read(&out).unwrap() == small,
        "copy out before the flush"
    );
    // A copy in through the kernel (2 MiB) after the small file's blocks.
    let big = random_bytes(2 << 20, 8);
    let src = dir.path("big.src");
    fs::write(&src, &big).unwrap();
    let b = img.create("/big", 0o644).unwrap();
    img.copy_in(b, &fs::File::open(&src).unwrap()).unwrap();
    model.insert("/big".into(), big);
    img.flush().unwrap();
    drop(img);
    check_against_everyone(&path, &dir, &model, cfg.name);
}

/// `copy_in` of a sparse host file: in the kernel on an image file (data
/// ranges of 1 MiB and more), through memory on any other device; both
/// give the host's bytes, its holes kept, e2fsck-clean, as debugfs reads.
#[test]
fn copy_in_in_the_kernel_and_through_user_space_agree() {
    require_e2fsprogs!();
    use std::os::unix::fs::FileExt;
    for cfg in [K1, CONFIGS[1]] {
        let dir = TempDir::new("copy-in");
        let path = mkfs(&dir, &cfg);
        let host = dir.path("sparse.src");
        let mut want = vec![0u8; (12 << 20) + 7];
        let a = random_bytes((3 << 20) + 100, 8);
        let b = random_bytes((2 << 20) + 7, 9);
        want[1 << 20..(1 << 20) + a.len()].copy_from_slice(&a);
        want[10 << 20..].copy_from_slice(&b);
        let f = fs::File::create(&host).unwrap();
        f.write_all_at(&a, 1 << 20).unwrap();
        f.write_all_at(&b, 10 << 20).unwrap();
        drop(f);
        let data_blocks = |img: &mut Image, ino| img.stat(ino).unwrap().blocks * 512;

        let mem = fs::read(&path).unwrap();
        let mut img = open_rw(&path);
        let ino = img.create("/s", 0o644).unwrap();
        let n = img.copy_in(ino, &fs::File::open(&host).unwrap()).unwrap();
        assert!(n >= (a.len() + b.len()) as u64, "{}: {n} bytes", cfg.name);
        let kernel_blocks = data_blocks(&mut img, ino);
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, cfg.name);
        assert!(
            debugfs_dump(&path, &dir, "/s") == want,
            "{}: in the kernel",
            cfg.name
        );
        let mut got = vec![0u8; want.len()];
        open_ro(&path).read(ino, 0, &mut got).unwrap();
        assert!(got == want, "{}: Image::read", cfg.name);

        let dev = spacekit::ext4::MemDevice::new(mem);
        let mut img = Image::open_on(Box::new(dev), OpenMode::ReadWrite).unwrap();
        let ino = img.create("/s", 0o644).unwrap();
        img.copy_in(ino, &fs::File::open(&host).unwrap()).unwrap();
        img.read(ino, 0, &mut got).unwrap();
        assert!(got == want, "{}: through memory", cfg.name);
        // The same blocks, but for the zeros of each range's last host
        // page past the data: blocks of them are holes through memory,
        // and the kernel copies whole pages.
        let mem_blocks = data_blocks(&mut img, ino);
        assert!(
            mem_blocks <= kernel_blocks && kernel_blocks - mem_blocks < 2 * 4096,
            "{}: {mem_blocks} bytes of blocks through memory, {kernel_blocks} in the kernel",
            cfg.name
        );
        assert!(
            kernel_blocks < want.len() as u64 * 6 / 10,
            "{}: holes not kept: {kernel_blocks}",
            cfg.name
        );
    }
}

/// `copy_in` through memory leaves every block of zeros a hole, wherever
/// the zeros start in its pieces (a host file written whole, no holes of
/// its own), as `mke2fs -d` does; a block that is partly data is written.
#[test]
fn copy_in_leaves_blocks_of_zeros_as_holes() {
    require_e2fsprogs!();
    for cfg in configs() {
        let dir = TempDir::new("copy-in-zeros");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let bs = u64::from(img.info().block_size);
        let mut model = BTreeMap::new();
        // 128 KiB of data, 128 KiB of zeros, 4 KiB of data: under the
        // kernel's 1 MiB, so read through memory in 256 KiB pieces, the
        // first of them half data, half zeros. Then zeros from the middle
        // of a block to the middle of another, a block's width apart.
        let mut want = random_bytes(260 << 10, 21);
        want[128 << 10..256 << 10].fill(0);
        let (z0, z1) = (300_000u64, 300_000 + 3 * bs);
        let off = (260 << 10) as u64;
        let mut tail = random_bytes((z1 + bs - off) as usize, 22);
        tail[(z0 - off) as usize..(z1 - off) as usize].fill(0);
        want.extend_from_slice(&tail);
        let host = dir.path("zeros.src");
        fs::write(&host, &want).unwrap();
        let ino = img.create("/z", 0o644).unwrap();
        img.copy_in(ino, &fs::File::open(&host).unwrap()).unwrap();
        let blocks = img.stat(ino).unwrap().blocks * 512;
        img.flush().unwrap();
        drop(img);
        model.insert("/z".to_string(), want.clone());
        check_against_everyone(&path, &dir, &model, cfg.name);
        // Data blocks: every block with a non-zero byte, and no other.
        let data = want
            .chunks(bs as usize)
            .filter(|c| c.iter().any(|&b| b != 0))
            .count() as u64;
        assert!(
            blocks / bs - data <= 1,
            "{}: {blocks} bytes of blocks for {data} data blocks of {bs} (an extent block at most besides)",
            cfg.name
        );
    }
}

/// `copy_in` from what has no length to copy up to: a pipe (more bytes
/// than one read gives), and a `/proc` file, whose length is given as 0
/// though it has bytes. Each is read to its end, as `cat` reads it.
#[test]
fn copy_in_reads_pipes_and_proc_files_to_their_end() {
    require_e2fsprogs!();
    let cfg = CONFIGS[1];
    let dir = TempDir::new("copy-in-stream");
    let path = mkfs(&dir, &cfg);
    let mut img = open_rw(&path);
    let mut model = BTreeMap::new();

    let want = random_bytes((3 << 20) + 5, 31);
    let (r, mut w) = std::io::pipe().unwrap();
    let bytes = want.clone();
    let writer = std::thread::spawn(move || w.write_all(&bytes).unwrap());
    let pipe = fs::File::from(std::os::fd::OwnedFd::from(r));
    let ino = img.create("/pipe", 0o644).unwrap();
    assert_eq!(img.copy_in(ino, &pipe).unwrap(), want.len() as u64);
    writer.join().unwrap();
    model.insert("/pipe".to_string(), want);

    let proc_file = fs::File::open("/proc/version").unwrap();
    assert_eq!(
        proc_file.metadata().unwrap().len(),
        0,
        "/proc gives no length"
    );
    let version = fs::read("/proc/version").unwrap();
    assert!(!version.is_empty());
    let ino = img.create("/version", 0o644).unwrap();
    assert_eq!(img.copy_in(ino, &proc_file).unwrap(), version.len() as u64);
    model.insert("/version".to_string(), version);

    let empty = dir.path("empty.src");
    fs::write(&empty, b"").unwrap();
    let ino = img.create("/empty", 0o644).unwrap();
    assert_eq!(
        img.copy_in(ino, &fs::File::open(&empty).unwrap()).unwrap(),
        0
    );
    model.insert("/empty".to_string(), Vec::new());

    img.flush().unwrap();
    drop(img);
    check_against_everyone(&path, &dir, &model, cfg.name);
}

/// Directories stored inline (`mke2fs -O inline_data -d`): names in
/// `i_block` and, past 56 bytes, in `system.data`. spacekit lists them and
/// finds through them (`..` included), `rdump` copies them; a name added
/// to one is refused (typed, nothing changed), while moving one (its `..`
/// in `i_block`), removing an empty one and removing an inline file with
/// an xattr block work: e2fsck-clean, and the kernel agrees.
#[test]
fn inline_directories_read_move_and_refuse_new_names() {
    require_e2fsprogs!();
    let dir = TempDir::new("contents-inline-dir");
    let src = dir.path("src");
    // mke2fs -d makes a directory a block once its names pass i_block's
    // 56 bytes; the kernel moves them into `system.data` first (d2, made
    // below through a mount).
    let d2: &[&str] = &["name-000001", "name-000002", "name-000003", "name-000004"];
    let all: [(&str, &[&str]); 5] = [
        ("d1", &["a", "b"]),
        ("d2", d2),
        ("d3/sub", &["x"]),
        ("empty", &[]),
        ("empty2", &[]),
    ];
    for (d, files) in all.iter().filter(|(d, _)| *d != "d2") {
        fs::create_dir_all(src.join(d)).unwrap();
        for f in files.iter() {
            fs::write(src.join(d).join(f), format!("{d}/{f}")).unwrap();
        }
    }
    // Blocks, not inline: big, and d3 (sub's parent, which a move
    // changes).
    fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..200 {
        fs::write(src.join(format!("big/f{i:03}")), b"b").unwrap();
        if i < 10 {
            fs::write(src.join(format!("d3/a-longer-name-{i:03}")), b"d").unwrap();
        }
    }
    let path = mkfs_d(
        &dir,
        "inline-dir.img",
        &["-b", "4096", "-I", "256", "-O", "^has_journal,inline_data"],
        &src,
        "16M",
    );
    let mnt = dir.path("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let rw = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&path)
        .arg(&mnt)
        .output();
    let kernel = rw.is_ok_and(|o| o.status.success());
    if kernel {
        fs::create_dir(mnt.join("d2")).unwrap();
        for f in d2 {
            fs::write(mnt.join("d2").join(f), format!("d2/{f}")).unwrap();
        }
        // An inline file with its xattrs in a block of their own.
        fs::write(mnt.join("big/withblk"), b"inline").unwrap();
        spacekit_testkit::gen_tree::set_xattr(&mnt.join("big/withblk"), "user.big", &[7u8; 700]);
        assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    } else {
        println!("skipping the kernel's part: mount -o loop failed (root and loop devices needed)");
    }
    let names: Vec<(&str, &[&str])> = all
        .into_iter()
        .filter(|(d, _)| kernel || *d != "d2")
        .collect();
    assert_fsck_clean(&path, "inline dirs");
    let mut img = open_ro(&path);
    if kernel {
        let d2_ino = img.lookup("/d2").unwrap();
        let d2_inode = img.inode(d2_ino).unwrap();
        assert!(
            d2_inode.flags & 0x1000_0000 != 0 && d2_inode.size > 60,
            "the kernel kept /d2 in i_block alone or made it a block: {} bytes",
            d2_inode.size
        );
    }
    let root = img.lookup("/").unwrap();
    let mut inline = 0;
    for &(d, files) in &names {
        let ino = img.lookup(&format!("/{d}")).unwrap();
        inline += usize::from(img.inode(ino).unwrap().flags & 0x1000_0000 != 0);
        let mut got: Vec<Vec<u8>> = img
            .read_dir(ino)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        got.sort();
        let mut want: Vec<Vec<u8>> = [".", ".."]
            .iter()
            .chain(files)
            .map(|n| n.as_bytes().to_vec())
            .collect();
        want.sort();
        assert_eq!(got, want, "/{d}");
        for f in files {
            let p = format!("/{d}/{f}");
            let f_ino = img.lookup(&p).unwrap();
            let mut buf = vec![0u8; 64];
            let n = img.read(f_ino, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], &p.as_bytes()[1..], "{p}");
        }
        let parent = if d == "d3/sub" {
            img.lookup("/d3").unwrap()
        } else {
            root
        };
        assert_eq!(img.lookup(&format!("/{d}/..")).unwrap(), parent, "/{d}/..");
    }
    assert_eq!(inline, names.len(), "inline directories");
    let out = dir.path("out");
    fs::create_dir_all(&out).unwrap();
    img.export_tree("/", &out, spacekit::ext4::ExportOptions::default())
        .unwrap();
    for &(d, files) in &names {
        for f in files {
            assert_eq!(
                fs::read(out.join(d).join(f)).unwrap(),
                format!("{d}/{f}").as_bytes()
            );
        }
    }
    drop(img);

    // A new name in an inline directory: refused, nothing changed.
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    for (i, r) in [
        img.mkdir("/d1/new", 0o755).map(drop),
        img.create("/d2/new", 0o644).map(drop),
        img.rename("/big/f000", "/d1/f000"),
        img.unlink("/d1/a"),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(
            matches!(
                r,
                Err(Ext4Error::Unsupported {
                    feature: "inline data"
                })
            ),
            "{i}: {r:?}"
        );
    }
    assert!(!img.is_dirty());
    drop(img);
    assert!(
        fs::read(&path).unwrap() == before,
        "a refusal changed the image"
    );

    // Moving an inline directory over an empty inline one, then into
    // another directory; removing an empty one.
    let mut img = open_rw(&path);
    img.rename("/d3/sub", "/empty").unwrap();
    assert_eq!(img.lookup("/empty/..").unwrap(), root);
    img.rename("/empty", "/big/sub").unwrap();
    img.rmdir("/empty2").unwrap();
    if kernel {
        let w = img.lookup("/big/withblk").unwrap();
        let wi = img.inode(w).unwrap();
        assert!(wi.flags & 0x1000_0000 != 0 && wi.file_acl != 0, "{wi:?}");
        img.unlink("/big/withblk").unwrap();
    }
    let big = img.lookup("/big").unwrap();
    assert_eq!(img.lookup("/big/sub/..").unwrap(), big);
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "inline dirs after changes");
    if let Some(_m) = Mount::new(&path, &mnt) {
        let m = &mnt;
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            fs::metadata(m.join("big/sub/..")).unwrap().ino(),
            u64::from(big)
        );
        assert_eq!(fs::read(m.join("big/sub/x")).unwrap(), b"d3/sub/x");
        assert!(!m.join("empty").exists() && !m.join("empty2").exists());
        assert!(!m.join("d3/sub").exists());
        assert!(!m.join("big/withblk").exists());
        assert_eq!(
            fs::read(m.join("d2/name-000004")).unwrap(),
            b"d2/name-000004"
        );
    }
}

/// A host file whose data cannot fit is refused before any of it is
/// written: the image file is byte for byte as it was (most of such a
/// file went into free blocks before the allocator ran out).
#[test]
fn a_host_file_that_cannot_fit_writes_nothing() {
    require_e2fsprogs!();
    // More free space than one of the kernel's copy chunks (64 MiB), so
    // a first chunk would fit.
    const BIG: Config = Config {
        name: "100m",
        size: "100M",
        args: &["-b", "4096", "-O", "^has_journal"],
    };
    let dir = TempDir::new("copy-nospace");
    let path = mkfs(&dir, &BIG);
    let src = dir.path("big");
    let img = open_rw(&path);
    let free = img.free_blocks_count() * u64::from(img.info().block_size);
    fs::write(&src, random_bytes((free + (2 << 20)) as usize, 5)).unwrap();
    drop(img);
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    let f = img.create("/big", 0o644).unwrap();
    let host = fs::File::open(&src).unwrap();
    assert!(matches!(
        img.copy_in(f, &host).unwrap_err(),
        Ext4Error::NoSpace { .. }
    ));
    drop(img);
    // Not assert_eq: a failure would print 100 MB.
    assert!(
        fs::read(&path).unwrap() == before,
        "data went into free blocks"
    );
    // Preallocated on the host (fallocate) but mostly unwritten: only its
    // data counts, and it goes in.
    let pre = dir.path("pre");
    let made = Command::new("fallocate")
        .args(["-l", &(free * 2).to_string()])
        .arg(&pre)
        .status();
    if made.is_ok_and(|s| s.success()) {
        let bytes = random_bytes(3 << 20, 6);
        let w = fs::OpenOptions::new().write(true).open(&pre).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&w, &bytes, 0).unwrap();
        let mut img = open_rw(&path);
        let f = img.create("/pre", 0o644).unwrap();
        img.copy_in(f, &fs::File::open(&pre).unwrap()).unwrap();
        let mut back = vec![0u8; bytes.len()];
        img.read(f, 0, &mut back).unwrap();
        assert!(back == bytes);
        img.flush().unwrap();
    }
}
