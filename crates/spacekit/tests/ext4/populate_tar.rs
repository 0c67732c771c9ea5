//! `Populate::add_tar` against GNU tar, e2fsck and the kernel: a source
//! tree with every kind of entry tar carries (a sparse file, hard links,
//! long and UTF-8 names, setuid, owners, `user.*` xattrs, an ACL) archived
//! by GNU tar in GNU and PAX format, plain, gzip and zstd, populated into
//! fresh images that `e2fsck -fn` finds clean and that a read-only loop
//! mount shows equal to the source; a tar populate and a directory
//! populate with the same clamp read the same; a `..` name and a cut
//! archive are refused with the image as it was.

#![cfg(feature = "tar")]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image, OpenMode, Populate, PopulateOptions};
use spacekit_testkit::tree::{self, Compare};

use crate::fixtures::{mkfs, open_rw, Mount, TempDir, K1};
use crate::oracles::assert_fsck_clean;

/// The source's mtime, with nanoseconds (after the clamp below).
const STAMP: &str = "2023-11-14 22:13:20.123456789 UTC";
/// A clamp before [`STAMP`]: every mtime becomes it.
const CLAMP: i64 = 1_600_000_000;

/// Runs `cmd`, asserting success.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `cmd` runs and succeeds.
fn try_run(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

/// Makes the source tree under `src`; whether it has xattrs and an ACL.
fn make_source(src: &Path) -> bool {
    let d = src.join("dir");
    let long_dir = d.join("d".repeat(90)).join("e".repeat(90));
    fs::create_dir_all(&long_dir).unwrap();
    fs::write(d.join("file"), b"hello, tar\n").unwrap();
    fs::hard_link(d.join("file"), d.join("hard")).unwrap();
    fs::hard_link(d.join("file"), src.join("hard-at-top")).unwrap();
    std::os::unix::fs::symlink("file", d.join("link")).unwrap();
    std::os::unix::fs::symlink("t".repeat(200), d.join("long-link")).unwrap();
    fs::write(long_dir.join("f".repeat(200)), b"a long path\n").unwrap();
    fs::write(d.join("ünïcødé-名前"), "UTF-8 name\n".repeat(300)).unwrap();
    // 2 MiB with 5000 bytes of data at 1 MiB: a sparse file.
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(2 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &vec![0xA5; 5000], 1 << 20).unwrap();
    drop(sparse);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(src.join("big"), big).unwrap();
    run(Command::new("mkfifo").arg(src.join("fifo")));
    // Devices need root: without it the tree has none.
    let _ = try_run(
        Command::new("mknod")
            .arg(src.join("null"))
            .args(["c", "1", "3"]),
    );
    let _ = try_run(
        Command::new("mknod")
            .arg(src.join("loop9"))
            .args(["b", "7", "9"]),
    );
    run(Command::new("chmod").arg("4755").arg(d.join("file")));
    run(Command::new("chmod").arg("1777").arg(src.join("big")));
    let _ = try_run(Command::new("chown").args(["-h", "1000:1001"]).arg(&d));
    let _ = try_run(
        Command::new("chown")
            .args(["-h", "1234:5678"])
            .arg(d.join("link")),
    );
    let attrs = try_run(
        Command::new("setfattr")
            .args(["-n", "user.origin", "-v", "tar-test"])
            .arg(d.join("file")),
    ) && try_run(
        Command::new("setfattr")
            .args(["-n", "user.empty", "-v", "\"\""])
            .arg(src.join("big")),
    ) && try_run(
        Command::new("setfacl")
            .args(["-m", "u:1234:r,g:55:rw"])
            .arg(d.join("ünïcødé-名前")),
    ) && try_run(
        Command::new("setfacl")
            .args(["-d", "-m", "u:1234:rx"])
            .arg(&long_dir),
    );
    if !attrs {
        println!("skipping xattrs and ACLs: setfattr/setfacl failed (no attr/acl tools, or no support here)");
    }
    run(Command::new("find")
        .arg(src)
        .args(["-exec", "touch", "-h", "-d", STAMP, "{}", "+"]));
    attrs
}

/// Populates a fresh image from archive `tar`; the image's path.
fn populate_tar(dir: &TempDir, name: &str, tar: &Path, opts: PopulateOptions) -> PathBuf {
    let fresh = mkfs(dir, &K1);
    let img_path = dir.path(&format!("{name}.img"));
    fs::rename(&fresh, &img_path).unwrap();
    let mut img = open_rw(&img_path);
    let mut pop = Populate::new(&mut img, "/", opts).unwrap();
    let f = fs::File::open(tar).unwrap();
    pop.add_tar(std::io::BufReader::new(f))
        .unwrap_or_else(|e| panic!("{name}: add_tar: {e}"));
    let r = pop.finish().unwrap();
    assert!(r.files >= 5 && r.hard_links >= 2, "{name}: {r:?}");
    drop(img);
    assert_fsck_clean(&img_path, name);
    img_path
}

/// Every tar format GNU tar writes, populated, checked by e2fsck and read
/// back through the kernel equal to the source.
#[test]
fn gnu_tar_archives_read_back_equal_to_the_source() {
    require_e2fsprogs!();
    let dir = TempDir::new("populate-tar");
    let src = dir.path("src");
    fs::create_dir(&src).unwrap();
    let attrs = make_source(&src);
    let have_zstd = try_run(Command::new("zstd").arg("--version"));
    let cases: &[(&str, &[&str], bool)] = &[
        ("gnu", &["--format=gnu"], false),
        ("pax", &["--format=pax", "--xattrs", "--acls"], true),
        (
            "pax-gzip",
            &["--format=pax", "--xattrs", "--acls", "--gzip"],
            true,
        ),
        (
            "pax-zstd",
            &["--format=pax", "--xattrs", "--acls", "--zstd"],
            true,
        ),
    ];
    for &(name, args, pax) in cases {
        if name.ends_with("zstd") && !have_zstd {
            println!("skipping {name}: no zstd program");
            continue;
        }
        let tar = dir.path(&format!("{name}.tar"));
        run(Command::new("tar")
            .args(args)
            .args(["--sparse", "--numeric-owner", "-cf"])
            .arg(&tar)
            .arg("-C")
            .arg(&src)
            .arg("."));
        let img = populate_tar(&dir, name, &tar, PopulateOptions::default());
        let mnt = dir.path(&format!("mnt-{name}"));
        let Some(_m) = Mount::new(&img, &mnt) else {
            continue;
        };
        let c = Compare {
            // GNU format keeps whole seconds and no xattrs.
            nanos: pax,
            xattrs: pax && attrs,
            ..Compare::default()
        };
        let diff = tree::diff(&src, &mnt, c).unwrap();
        assert!(
            diff.is_empty(),
            "{name}: the kernel reads:\n{}",
            diff.join("\n")
        );
        // The sparse file stayed sparse: 5000 bytes need at most 5 KiB
        // plus an extent block, not 2 MiB.
        let st = fs::metadata(mnt.join("sparse")).unwrap();
        assert!(
            st.blocks() * 512 <= 8 << 10,
            "{name}: sparse uses {} sectors",
            st.blocks()
        );
    }
}

/// A tar populate and a directory populate of the same tree, both with
/// the same clamp, read the same through the kernel.
#[test]
fn tar_and_directory_populates_with_a_clamp_read_the_same() {
    require_e2fsprogs!();
    let dir = TempDir::new("populate-tar-clamp");
    let src = dir.path("src");
    fs::create_dir(&src).unwrap();
    make_source(&src);
    let tar = dir.path("src.tar");
    run(Command::new("tar")
        .args(["--format=pax", "--xattrs", "--acls", "--sparse", "-cf"])
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("."));
    let opts = PopulateOptions {
        clamp: Some(CLAMP),
        ..PopulateOptions::default()
    };
    let from_tar = populate_tar(&dir, "from-tar", &tar, opts);
    let from_dir = {
        let fresh = mkfs(&dir, &K1);
        let p = dir.path("from-dir.img");
        fs::rename(&fresh, &p).unwrap();
        let mut img = open_rw(&p);
        let mut pop = Populate::new(&mut img, "/", opts).unwrap();
        pop.add_dir(&src).unwrap();
        pop.finish().unwrap();
        drop(img);
        assert_fsck_clean(&p, "from-dir");
        p
    };
    let (ma, mb) = (dir.path("mnt-a"), dir.path("mnt-b"));
    let Some(_a) = Mount::new(&from_tar, &ma) else {
        return;
    };
    let Some(_b) = Mount::new(&from_dir, &mb) else {
        return;
    };
    let diff = tree::diff(&ma, &mb, Compare::default()).unwrap();
    assert!(diff.is_empty(), "tar vs directory:\n{}", diff.join("\n"));
    let st = fs::symlink_metadata(ma.join("dir/file")).unwrap();
    assert_eq!((st.mtime(), st.mtime_nsec()), (CLAMP, 0), "the clamp");
    assert_eq!((st.ctime(), st.atime()), (CLAMP, CLAMP), "the clamp");
}

/// A ustar header for `name` (type `kind`, `size` bytes), checksummed.
fn ustar(name: &str, kind: u8, size: usize) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"14533274460\0");
    h[156] = kind;
    h[257..265].copy_from_slice(b"ustar\x0000");
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// Populates `img_path` from `archive`, expecting a refusal; the error.
fn refused(img_path: &Path, archive: &[u8]) -> Ext4Error {
    let mut img = Image::open(img_path, OpenMode::ReadWrite).unwrap();
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
    let e = pop.add_tar(archive).expect_err("a refusal");
    assert!(pop.failed(), "{e}: the populate is not marked failed");
    assert!(pop.finish().is_err(), "{e}: finish after a failure");
    e
}

/// The blocks the image uses, as bytes: `bytes` with every block free in
/// `img` zeroed (a failed populate may have written file data there; they
/// stay free).
fn used_blocks(img: &Path, mut bytes: Vec<u8>) -> Vec<u8> {
    let img = Image::open(img, OpenMode::ReadOnly).unwrap();
    let bs = img.info().block_size as usize;
    for g in 0..img.info().group_count {
        for (a, b) in img.free_extents(g).unwrap() {
            bytes[a as usize * bs..(b as usize + 1) * bs].fill(0);
        }
    }
    bytes
}

/// A `..` name and archives cut short are refused, the image as it was.
#[test]
fn bad_archives_are_refused_and_change_nothing() {
    require_e2fsprogs!();
    let dir = TempDir::new("populate-tar-refused");
    let img_path = mkfs(&dir, &K1);
    let before = fs::read(&img_path).unwrap();

    // `..` first: refused before anything is made, not a byte written.
    let mut dotdot = ustar("a/../../escape", b'0', 0);
    dotdot.resize(dotdot.len() + 1024, 0);
    let check = |e: Ext4Error| match e {
        Ext4Error::BadSource { entry, reason } => {
            assert_eq!(entry, "a/../../escape");
            assert!(reason.contains(".."), "{reason}");
        }
        e => panic!("`..`: {e:?}"),
    };
    check(refused(&img_path, &dotdot));
    assert!(
        fs::read(&img_path).unwrap() == before,
        "`..`: the image changed"
    );

    // `..` after a file: the file's data went to free blocks, which stay
    // free; no block the image uses changed.
    let mut archive = ustar("ok", b'0', 3);
    archive.extend_from_slice(&[b'x'; 3]);
    archive.resize(1024, 0);
    archive.extend(dotdot);
    check(refused(&img_path, &archive));
    let after = fs::read(&img_path).unwrap();
    assert!(
        used_blocks(&img_path, after) == used_blocks(&img_path, before.clone()),
        "`..` after a file: a block the image uses changed"
    );

    // Cut inside a header, after a directory and a file.
    let mut archive = ustar("d/", b'5', 0);
    archive.extend(ustar("d/f", b'0', 5000));
    archive.extend((0..5000u32).map(|i| (i % 200 + 1) as u8));
    archive.resize(512 * 2 + 5120, 0);
    archive.extend(ustar("d/g", b'0', 0));
    let cut = &archive[..archive.len() - 100];
    match refused(&img_path, cut) {
        Ext4Error::BadSource { reason, .. } => assert!(reason.contains("header"), "{reason}"),
        e => panic!("cut in a header: {e:?}"),
    }
    let after = fs::read(&img_path).unwrap();
    assert!(
        used_blocks(&img_path, after) == used_blocks(&img_path, before.clone()),
        "cut in a header: a block the image uses changed"
    );

    // Cut inside a file's contents.
    let cut = &archive[..512 * 2 + 3000];
    match refused(&img_path, cut) {
        Ext4Error::BadSource { entry, .. } => assert_eq!(entry, "d/f"),
        e => panic!("cut in contents: {e:?}"),
    }
    let after = fs::read(&img_path).unwrap();
    assert!(
        used_blocks(&img_path, after) == used_blocks(&img_path, before.clone()),
        "cut in contents: a block the image uses changed"
    );
    assert_fsck_clean(&img_path, "after the refusals");
    let mut img = Image::open(&img_path, OpenMode::ReadOnly).unwrap();
    assert!(img.lookup("/d").is_err(), "a refused populate left /d");
    assert!(img.lookup("/ok").is_err(), "a refused populate left /ok");
    drop(img);

    // Compressed, whole (with its end-of-archive blocks), then with a byte
    // of the compressed data flipped and cut before its last bytes: the
    // stream's own check (gzip's CRC and length, zstd's checksum) comes
    // after the tar's end, and a damaged stream must not go in with
    // wrong bytes.
    archive.truncate(512 * 2 + 5120);
    archive.resize(archive.len() + 1024, 0);
    let plain = dir.path("whole.tar");
    fs::write(&plain, &archive).unwrap();
    let mut tools = vec![("gzip", "-c -n -9")];
    if try_run(Command::new("zstd").arg("--version")) {
        tools.push(("zstd", "-c -q --check"));
    }
    for (tool, args) in tools {
        let out = Command::new(tool)
            .args(args.split(' '))
            .arg(&plain)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool}");
        let good = out.stdout;
        let mut flipped = good.clone();
        flipped[good.len() / 2] ^= 0x10;
        let cut = &good[..good.len() - 4];
        for (what, bytes) in [("a flipped byte", &flipped[..]), ("cut short", cut)] {
            match refused(&img_path, bytes) {
                Ext4Error::BadSource { .. } => {}
                e => panic!("{tool}, {what}: {e:?}"),
            }
            let after = fs::read(&img_path).unwrap();
            assert!(
                used_blocks(&img_path, after) == used_blocks(&img_path, before.clone()),
                "{tool}, {what}: a block the image uses changed"
            );
        }
        // The whole stream goes in; for gzip also padded with zeros to a
        // block, as tape-blocked output is (as `gzip -d` takes it), but
        // not followed by other bytes.
        let mut padded = good.clone();
        padded.resize(good.len().next_multiple_of(10240), 0);
        if tool == "gzip" {
            let mut junk = padded.clone();
            junk.extend_from_slice(b"junk");
            match refused(&img_path, &junk) {
                Ext4Error::BadSource { .. } => {}
                e => panic!("gzip, bytes after the zeros: {e:?}"),
            }
            // Nor a member after the zeros, wherever the reads' buffers
            // end (as `gzip -d` calls it trailing garbage). The walk reads
            // the first 4 bytes, then 8 KiB buffers: zeros that end at
            // 4 + 8192k end a buffer, and the member starts the next.
            let edge = 4 + 8192 * ((good.len() - 4) / 8192 + 1) - good.len();
            for pad in [1, edge, edge + 8192, edge + 1] {
                let mut more = good.clone();
                more.resize(good.len() + pad, 0);
                more.extend_from_slice(&good);
                match refused(&img_path, &more) {
                    Ext4Error::BadSource { .. } => {}
                    e => panic!("gzip, a member after {pad} zeros: {e:?}"),
                }
            }
        }
        let mut inputs = vec![good.clone()];
        if tool == "gzip" {
            // And as two members, each half of the archive.
            let half = |part: &[u8]| {
                let p = dir.path("half");
                fs::write(&p, part).unwrap();
                let o = Command::new("gzip")
                    .args(["-c", "-n"])
                    .arg(&p)
                    .output()
                    .unwrap();
                assert!(o.status.success());
                o.stdout
            };
            let mid = archive.len() / 2;
            let two = [half(&archive[..mid]), half(&archive[mid..])].concat();
            inputs.extend([padded, two]);
        }
        for (k, input) in inputs.iter().enumerate() {
            let copy = crate::fixtures::copy(&img_path, &dir, &format!("{tool}{k}.img"));
            let mut img = Image::open(&copy, OpenMode::ReadWrite).unwrap();
            let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
            pop.add_tar(&input[..]).unwrap();
            pop.finish().unwrap();
            let f = img.lookup("/d/f").unwrap();
            let mut got = vec![0u8; 5000];
            assert_eq!(img.read(f, 0, &mut got).unwrap(), 5000);
            assert!(got == archive[1024..6024], "{tool} {k}: /d/f");
            drop(img);
            assert_fsck_clean(&copy, tool);
        }
    }
}

/// A ustar header like [`ustar`] with its mode and its raw 12-byte mtime
/// field (octal or GNU base-256), checksummed.
fn header(name: &str, kind: u8, size: usize, mode: u32, mtime: [u8; 12]) -> Vec<u8> {
    let mut h = ustar(name, kind, size);
    h[100..108].copy_from_slice(format!("{mode:07o}\0").as_bytes());
    h[136..148].copy_from_slice(&mtime);
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// An octal mtime field.
fn octal(t: i64) -> [u8; 12] {
    format!("{t:011o}\0").as_bytes().try_into().unwrap()
}

/// A GNU base-256 mtime field (two's complement, 0x80 or 0xff first).
fn base256(t: i64) -> [u8; 12] {
    let mut f = [if t < 0 { 0xff } else { 0 }; 12];
    f[4..].copy_from_slice(&t.to_be_bytes());
    if t >= 0 {
        f[0] = 0x80;
    }
    f
}

/// A member: `header` and `data` padded to 512 bytes.
fn member(name: &str, kind: u8, data: &[u8], mode: u32, mtime: [u8; 12]) -> Vec<u8> {
    let mut m = header(name, kind, data.len(), mode, mtime);
    m.extend_from_slice(data);
    m.resize(m.len().div_ceil(512) * 512, 0);
    m
}

/// A PAX extended (`x`) or global (`g`) header member with `records`.
fn pax(kind: u8, records: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in records {
        let rest = format!(" {k}={v}\n");
        let mut len = rest.len() + 1;
        while format!("{len}{rest}").len() != len {
            len += 1;
        }
        body.extend_from_slice(format!("{len}{rest}").as_bytes());
    }
    member("pax", kind, &body, 0o644, octal(0))
}

/// What tar extracting on Linux makes of an archive, a populate makes too:
/// negative GNU base-256 times, an access ACL that sets the permission
/// bits, symlinks 0777, times past what an inode holds clamped to its
/// last second, a PAX global header's owner and times for the entries
/// after it; a sparse entry of 2 TiB with 4 KiB of data is its data's work
/// (only its piece is read and written), one past the largest file size
/// is refused before any byte is read, and an empty stream is no archive.
#[test]
fn tar_entries_read_as_linux_tar_extracts_them() {
    require_e2fsprogs!();
    let dir = TempDir::new("populate-tar-details");
    let img_path = mkfs(&dir, &K1);
    let mtime = octal(1_700_000_000);
    let mut a = Vec::new();
    a.extend(member("old", b'0', b"old", 0o644, base256(-1)));
    a.extend(member("older", b'0', b"", 0o644, base256(-315_360_000)));
    a.extend(member("new", b'0', b"", 0o644, base256(1_800_000_000)));
    a.extend(pax(
        b'x',
        &[(
            "SCHILY.acl.access",
            "user::rw-,group::r--,other::---,user:1000:rwx,mask::rwx",
        )],
    ));
    a.extend(member("acl", b'0', b"", 0o4644, mtime));
    a.extend(with_link(header("link", b'2', 0, 0o755, mtime), "target"));
    a.extend(pax(b'x', &[("mtime", "16000000000.5")]));
    a.extend(member("future", b'0', b"", 0o644, mtime));
    // A PAX 1.0 sparse file: 2 TiB, its last 4 KiB data.
    let real: u64 = 2 << 40;
    let mut data = format!("1\n{}\n4096\n", real - 4096).into_bytes();
    data.resize(512, 0);
    data.extend(std::iter::repeat_n(0x5a, 4096));
    a.extend(pax(
        b'x',
        &[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.name", "sparse"),
            ("GNU.sparse.realsize", &real.to_string()),
        ],
    ));
    a.extend(member("GNUSparseFile.0/sparse", b'0', &data, 0o644, mtime));
    // Global records: for every entry after them, under its own.
    a.extend(pax(b'g', &[("uid", "77"), ("mtime", "1234567890.5")]));
    a.extend(member("g1", b'0', b"g", 0o644, mtime));
    a.extend(pax(b'x', &[("uid", "5")]));
    a.extend(member("g2", b'0', b"", 0o644, mtime));
    // An empty value unsets the global one: the header's time.
    a.extend(pax(b'x', &[("mtime", "")]));
    a.extend(member("g3", b'0', b"", 0o644, mtime));
    a.resize(a.len() + 1024, 0);

    let mut img = open_rw(&img_path);
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
    pop.add_tar(&a[..]).unwrap();
    pop.finish().unwrap();
    let node = |img: &mut Image, p: &str| {
        let ino = img.lookup(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        img.inode(ino).unwrap()
    };
    let secs = |img: &mut Image, p: &str| {
        let t = node(img, p).times().mtime.unwrap();
        (t.secs, t.nanos)
    };
    assert_eq!(secs(&mut img, "/old"), (-1, 0));
    assert_eq!(secs(&mut img, "/older"), (-315_360_000, 0));
    assert_eq!(secs(&mut img, "/new"), (1_800_000_000, 0));
    // Owner from user::, group from mask::, others from other::; setuid kept.
    assert_eq!(node(&mut img, "/acl").mode & 0o7777, 0o4670);
    assert_eq!(node(&mut img, "/link").mode & 0o7777, 0o777);
    // 2446-05-10 22:38:55, the last second a 256-byte inode holds.
    assert_eq!(secs(&mut img, "/future"), (15_032_385_535, 0));
    let sparse = node(&mut img, "/sparse");
    assert_eq!(sparse.size, real);
    assert!(sparse.blocks <= 16, "{} sectors", sparse.blocks);
    let mut tail = vec![0u8; 8192];
    let ino = img.lookup("/sparse").unwrap();
    img.read(ino, real - 8192, &mut tail).unwrap();
    assert!(tail[..4096].iter().all(|&b| b == 0) && tail[4096..].iter().all(|&b| b == 0x5a));
    assert_eq!(node(&mut img, "/g1").uid, 77);
    assert_eq!(secs(&mut img, "/g1"), (1_234_567_890, 500_000_000));
    assert_eq!(node(&mut img, "/g2").uid, 5);
    assert_eq!(secs(&mut img, "/g2"), (1_234_567_890, 500_000_000));
    assert_eq!(secs(&mut img, "/g3"), (1_700_000_000, 0));
    assert_eq!(node(&mut img, "/g3").uid, 77);
    assert_eq!(node(&mut img, "/old").uid, 0);
    drop(img);
    assert_fsck_clean(&img_path, "tar details");
    let mnt = dir.path("mnt");
    if let Some(_m) = Mount::new(&img_path, &mnt) {
        let st = fs::symlink_metadata(mnt.join("old")).unwrap();
        assert_eq!(st.mtime(), -1);
        let st = fs::symlink_metadata(mnt.join("acl")).unwrap();
        assert_eq!(st.mode() & 0o7777, 0o4670);
        let st = fs::symlink_metadata(mnt.join("future")).unwrap();
        assert_eq!(st.mtime(), 15_032_385_535);
        assert_eq!(fs::metadata(mnt.join("sparse")).unwrap().len(), real);
    }

    // Past the largest file size (4 TiB with 1 KiB blocks): refused
    // before a byte of it is read, the image as it was.
    let img2 = mkfs(&dir, &K1);
    let before = fs::read(&img2).unwrap();
    let mut big = pax(
        b'x',
        &[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.name", "huge"),
            ("GNU.sparse.realsize", "1000000000000000000"),
        ],
    );
    let mut data = b"1\n999999999999995904\n4096\n".to_vec();
    data.resize(512, 0);
    data.extend(std::iter::repeat_n(1, 4096));
    big.extend(member("GNUSparseFile.0/huge", b'0', &data, 0o644, mtime));
    big.resize(big.len() + 1024, 0);
    assert!(matches!(
        refused(&img2, &big),
        Ext4Error::FileTooBig {
            size: 1_000_000_000_000_000_000,
            ..
        }
    ));
    match refused(&img2, &[]) {
        Ext4Error::BadSource { reason, .. } => assert!(reason.contains("empty"), "{reason}"),
        e => panic!("an empty stream: {e:?}"),
    }
    // Sizes at the edge of 64 bits: an error, not an overflow (tests run
    // with overflow checks).
    let mut edge = pax(b'x', &[("size", "18446744073709551615")]);
    edge.extend(header("label", b'V', 0, 0o644, mtime));
    match refused(&img2, &edge) {
        Ext4Error::BadSource { reason, .. } => assert!(reason.contains("size"), "{reason}"),
        e => panic!("a 2^64 - 1 label: {e:?}"),
    }
    let max = u64::MAX.to_string();
    let mut edge = pax(
        b'x',
        &[
            ("GNU.sparse.major", "0"),
            ("GNU.sparse.minor", "1"),
            ("GNU.sparse.name", "edge"),
            ("GNU.sparse.size", &max),
            ("GNU.sparse.map", &format!("0,{max}")),
            ("size", &max),
        ],
    );
    edge.extend(header("GNUSparseFile.0/edge", b'0', 0, 0o644, mtime));
    assert!(matches!(
        refused(&img2, &edge),
        Ext4Error::FileTooBig { .. } | Ext4Error::BadSource { .. }
    ));
    assert!(
        fs::read(&img2).unwrap() == before,
        "the refusals changed the image"
    );
}

/// A sparse file's pieces out of order, overlapping or past its size are
/// refused before a byte is read from its stream, and so is a size past
/// the largest file.
#[test]
fn bad_pieces_are_refused_before_any_read() {
    use spacekit::ext4::{Contents, Entry, EntryKind, Meta, Timestamp};
    require_e2fsprogs!();
    let dir = TempDir::new("populate-pieces");
    let img_path = mkfs(&dir, &K1);
    /// A stream that counts the bytes read from it.
    struct Counting(u64);
    impl std::io::Read for Counting {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(7);
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
    }
    let t = Timestamp {
        secs: 1_700_000_000,
        nanos: 0,
    };
    let meta = Meta {
        perm: 0o644,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        xattrs: Vec::new(),
    };
    for (pieces, size) in [
        (vec![(8192, 10), (0, 10)], 1 << 20),
        (vec![(0, 4096), (4000, 10)], 1 << 20),
        (vec![(0, 10), ((1 << 20) - 5, 10)], 1 << 20),
        (vec![(0, 10), (u64::MAX - 5, 10)], u64::MAX),
        (vec![(0, 10)], u64::MAX),
    ] {
        let mut img = open_rw(&img_path);
        let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
        let mut r = Counting(0);
        let e = pop
            .add(Entry {
                path: b"p".to_vec(),
                kind: EntryKind::File(Contents::Pieces {
                    reader: &mut r,
                    pieces: pieces.clone(),
                    size,
                }),
                meta: meta.clone(),
            })
            .expect_err("bad pieces");
        assert!(
            matches!(
                e,
                Ext4Error::InvalidArgument { what: "pieces", .. } | Ext4Error::FileTooBig { .. }
            ),
            "{pieces:?}: {e}"
        );
        assert_eq!(r.0, 0, "{pieces:?}: read before the refusal");
    }
    // And good ones, sharing a block, read back.
    let mut img = open_rw(&img_path);
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
    let mut r = Counting(0);
    pop.add(Entry {
        path: b"p".to_vec(),
        kind: EntryKind::File(Contents::Pieces {
            reader: &mut r,
            pieces: vec![(100, 50), (600, 3000), (1 << 20, 1)],
            size: (1 << 20) + 10,
        }),
        meta,
    })
    .unwrap();
    pop.finish().unwrap();
    assert_eq!(r.0, 3051);
    let ino = img.lookup("/p").unwrap();
    let mut got = vec![0u8; (1 << 20) + 10];
    img.read(ino, 0, &mut got).unwrap();
    for (i, &b) in got.iter().enumerate() {
        let data = (100..150).contains(&i) || (600..3600).contains(&i) || i == 1 << 20;
        assert_eq!(b, if data { 7 } else { 0 }, "byte {i}");
    }
    drop(img);
    assert_fsck_clean(&img_path, "pieces");
}

/// Header `h` (a hard link or symlink) naming `target`, its checksum
/// made again.
fn with_link(mut h: Vec<u8>, target: &str) -> Vec<u8> {
    h[157..157 + target.len()].copy_from_slice(target.as_bytes());
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// A path archived twice (`tar -r` appends newer copies): the later member
/// wins, as GNU tar extracts it. A file rewritten, a file whose old inode
/// another name still holds, a symlink become a file, a directory's files
/// again, and hard links whose target was replaced; e2fsck clean, and the
/// kernel reads what `tar -x` makes. A name that was a directory is not
/// replaced by a file.
#[test]
fn a_path_archived_again_takes_the_later_member_as_tar_extracts_it() {
    require_e2fsprogs!();
    let dir = TempDir::new("populate-tar-again");
    let src = dir.path("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("a"), b"one").unwrap();
    fs::write(src.join("b"), b"bee").unwrap();
    fs::hard_link(src.join("b"), src.join("c")).unwrap();
    fs::write(src.join("h"), b"h").unwrap();
    fs::hard_link(src.join("h"), src.join("h2")).unwrap();
    std::os::unix::fs::symlink("a", src.join("s")).unwrap();
    fs::write(src.join("d/x"), b"x").unwrap();
    let tar = dir.path("again.tar");
    let gnu = ["--format=gnu", "--numeric-owner"];
    run(Command::new("tar")
        .args(gnu)
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("."));
    fs::write(src.join("a"), b"two!").unwrap();
    fs::remove_file(src.join("b")).unwrap();
    fs::write(src.join("b"), b"new b").unwrap();
    fs::remove_file(src.join("s")).unwrap();
    fs::write(src.join("s"), b"file s").unwrap();
    fs::write(src.join("d/x"), b"x again").unwrap();
    fs::write(src.join("d/y"), b"y").unwrap();
    fs::remove_file(src.join("h")).unwrap();
    fs::write(src.join("h"), b"new h").unwrap();
    fs::remove_file(src.join("h2")).unwrap();
    fs::hard_link(src.join("h"), src.join("h2")).unwrap();
    run(Command::new("tar")
        .args(gnu)
        .arg("-rf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .args(["./a", "./b", "./s", "./d", "./h", "./h2"]));

    let img_path = mkfs(&dir, &K1);
    let mut img = open_rw(&img_path);
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
    pop.add_tar(std::io::BufReader::new(fs::File::open(&tar).unwrap()))
        .unwrap();
    // Still one transaction: the replacements freed blocks, and no flush
    // came before the next file's data (the image on disk is still empty).
    let committed = Image::open(&img_path, OpenMode::ReadOnly).unwrap();
    assert_eq!(
        committed.free_inodes_count(),
        committed.info().inodes_count - 11,
        "a flush inside the populate"
    );
    drop(committed);
    let r = pop.finish().unwrap();
    // a, b, s, d/x, h, and h2 (linked anew to the new h).
    assert_eq!(r.replaced, 6, "{r:?}");
    let read = |img: &mut Image, p: &str| {
        let ino = img.lookup(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        let n = img.inode(ino).unwrap().size as usize;
        let mut buf = vec![0u8; n];
        img.read(ino, 0, &mut buf).unwrap();
        (ino, buf)
    };
    for (p, want) in [
        ("/a", &b"two!"[..]),
        ("/b", b"new b"),
        ("/c", b"bee"),
        ("/s", b"file s"),
        ("/d/x", b"x again"),
        ("/d/y", b"y"),
        ("/h", b"new h"),
    ] {
        assert_eq!(read(&mut img, p).1, want, "{p}");
    }
    let (h, h2) = (read(&mut img, "/h").0, read(&mut img, "/h2").0);
    assert_eq!(h, h2, "h2 names the new h");
    assert_eq!(img.inode(h).unwrap().links_count, 2);
    let (b, c) = (read(&mut img, "/b").0, read(&mut img, "/c").0);
    assert_ne!(b, c, "c keeps the old b");
    assert_eq!(img.inode(c).unwrap().links_count, 1);
    drop(img);
    assert_fsck_clean(&img_path, "a path archived again");
    let ext = dir.path("extracted");
    fs::create_dir(&ext).unwrap();
    run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&ext));
    if let Some(_m) = Mount::new(&img_path, &dir.path("mnt")) {
        let c = Compare {
            nanos: false,
            ..Compare::default()
        };
        let diff = tree::diff(&ext, &dir.path("mnt"), c).unwrap();
        assert!(diff.is_empty(), "the kernel reads:\n{}", diff.join("\n"));
    }

    // A hard link to the inode the name already names: nothing to do.
    // A file where a directory is: refused, as before.
    let mut again = Vec::new();
    again.extend(ustar("f", b'0', 0));
    again.extend(with_link(ustar("g", b'1', 0), "f"));
    again.extend(with_link(ustar("g", b'1', 0), "f"));
    again.resize(again.len() + 1024, 0);
    let img2 = mkfs(&dir, &K1);
    let mut img = open_rw(&img2);
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).unwrap();
    pop.add_tar(&again[..]).unwrap();
    let r = pop.finish().unwrap();
    assert_eq!((r.replaced, r.hard_links), (0, 1), "{r:?}");
    let f = img.lookup("/f").unwrap();
    assert_eq!(img.lookup("/g").unwrap(), f);
    assert_eq!(img.inode(f).unwrap().links_count, 2);
    drop(img);
    assert_fsck_clean(&img2, "a hard link archived twice");
    let mut dir_then_file = ustar("e/", b'5', 0);
    dir_then_file.extend(ustar("e", b'0', 0));
    dir_then_file.resize(dir_then_file.len() + 1024, 0);
    match refused(&img2, &dir_then_file) {
        Ext4Error::Exists { path } => assert_eq!(path, "/e"),
        e => panic!("a file over a directory: {e:?}"),
    }
}
