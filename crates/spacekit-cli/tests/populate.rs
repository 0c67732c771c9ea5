//! `spacekit ext4 populate` end to end: a generated tree with every kind
//! of entry goes in, `--json` counts it, `--squash-owner` / `--owner` own
//! every inode, `--mtime` (and `SOURCE_DATE_EPOCH`) clamp the times and
//! make two runs byte-identical, and errors (a missing source, a taken
//! name, no space, a bad `--at`) exit non-zero with one message and leave
//! the image as it was.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use spacekit::ext4::{Image, OpenMode, ROOT_INO};
use spacekit_testkit::gen_tree::{generate, Spec};

fn spacekit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spacekit"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spacekit-pop-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh 32 MiB image with 1 KiB blocks (`size` else), made alike every
/// time, or `None` without mkfs.ext4.
fn image(dir: &Path, name: &str, size: &str, inodes: &str) -> Option<PathBuf> {
    let path = dir.join(name);
    let uuid = "01234567-89ab-cdef-0123-456789abcdef";
    let out = Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-F", "-q", "-b", "1024", "-N", inodes, "-O", "^has_journal"])
        .args(["-U", uuid, "-E", &format!("hash_seed={uuid}")])
        .arg(&path)
        .arg(size)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(path),
        _ => {
            eprintln!("mkfs.ext4 not available: skipping");
            None
        }
    }
}

fn populate(img: &Path, args: &[&str]) -> Output {
    spacekit()
        .args(["ext4", "populate"])
        .arg(img)
        .args(args)
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .unwrap()
}

fn ok_json(img: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = populate(img, &all);
    assert!(
        out.status.success(),
        "populate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A path, its owner and group, and its atime, mtime and ctime.
type Row = (String, u32, u32, [(i64, u32); 3]);

/// Every inode under the root: (owner, group, atime, mtime, ctime) with
/// nanoseconds, through the library.
fn inodes(img: &Path) -> Vec<Row> {
    let mut image = Image::open(img, OpenMode::ReadOnly).unwrap();
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), ROOT_INO)];
    while let Some((p, ino)) = stack.pop() {
        let inode = image.inode(ino).unwrap();
        let t = inode.times();
        let ts = [t.atime, t.mtime, t.ctime].map(|x| {
            let x = x.unwrap();
            (x.secs, x.nanos)
        });
        out.push((p.clone(), inode.uid, inode.gid, ts));
        if inode.is_dir() && p != "/lost+found" {
            for e in image.read_dir(ino).unwrap() {
                if e.name != b"." && e.name != b".." {
                    let name = String::from_utf8_lossy(&e.name);
                    stack.push((format!("{p}/{name}"), e.inode));
                }
            }
        }
    }
    out
}

#[test]
fn json_counts_owner_and_clamp() {
    let dir = scratch("json");
    let Some(img) = image(&dir, "a.img", "32M", "2048") else {
        return;
    };
    let src = dir.join("src");
    let made = generate(&src, &Spec::small(3, 40));
    let from = src.to_str().unwrap();
    let v = ok_json(
        &img,
        &["--from", from, "--squash-owner", "--mtime", "1550000000"],
    );
    assert_eq!(v["image"], img.to_str().unwrap());
    assert_eq!(v["at"], "/");
    assert_eq!(v["from"], from);
    for (k, n) in [
        ("files", made.files),
        ("dirs", made.dirs),
        ("symlinks", made.symlinks),
        ("nodes", made.nodes),
        ("hard_links", made.hard_links),
        ("bytes", made.bytes),
    ] {
        assert_eq!(v[k].as_u64(), Some(n), "{k}: {v}");
    }
    let entries = made.files + made.dirs + made.symlinks + made.nodes + made.hard_links;
    assert_eq!(v["entries"].as_u64(), Some(entries), "{v}");
    assert!(v["xattrs"].as_u64().unwrap() >= 5, "{v}");
    assert!(v["seconds"].as_f64().is_some(), "{v}");
    // Every inode the populate made is root's, every time clamped; the
    // source's owners were not all root (when run as root).
    let all = inodes(&img);
    assert!(
        all.len() as u64 > entries - made.hard_links,
        "{}",
        all.len()
    );
    for (p, uid, gid, [a, m, c]) in &all {
        if p.starts_with("/lost+found") {
            continue;
        }
        assert_eq!((*uid, *gid), (0, 0), "{p}");
        assert!(m.0 <= 1_550_000_000, "{p}: {m:?}");
        assert_eq!((a, c), (m, m), "{p}");
    }
    assert!(
        all.iter()
            .any(|(_, _, _, [_, m, _])| *m == (1_550_000_000, 0)),
        "nothing was clamped"
    );
    assert!(
        all.iter().any(|(_, _, _, [_, m, _])| m.1 != 0),
        "no nanoseconds kept below the clamp"
    );

    // --owner, and SOURCE_DATE_EPOCH as the clamp: the same bytes as
    // --mtime gives.
    let (Some(b), Some(c)) = (
        image(&dir, "b.img", "32M", "2048"),
        image(&dir, "c.img", "32M", "2048"),
    ) else {
        return;
    };
    ok_json(
        &b,
        &[
            "--from",
            from,
            "--owner",
            "1000:1001",
            "--mtime",
            "1550000000",
        ],
    );
    let out = spacekit()
        .args(["ext4", "populate"])
        .arg(&c)
        .args(["--from", from, "--owner", "1000:1001", "--quiet"])
        .env("SOURCE_DATE_EPOCH", "1550000000")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        fs::read(&b).unwrap() == fs::read(&c).unwrap(),
        "SOURCE_DATE_EPOCH"
    );
    for (p, uid, gid, _) in inodes(&b) {
        if !p.starts_with("/lost+found") {
            assert_eq!((uid, gid), (1000, 1001), "{p}");
        }
    }
    // Without an owner option the source's owners stay.
    let Some(d) = image(&dir, "d.img", "32M", "2048") else {
        return;
    };
    ok_json(&d, &["--from", from]);
    if spacekit_testkit::gen_tree::is_root() {
        assert!(inodes(&d)
            .iter()
            .any(|(_, u, g, _)| (*u, *g) == (100_000, 70_000)));
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_exit_non_zero_and_change_nothing() {
    let dir = scratch("errors");
    let Some(img) = image(&dir, "e.img", "4M", "64") else {
        return;
    };
    let src = dir.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"f").unwrap();
    let big = dir.join("big");
    fs::create_dir_all(&big).unwrap();
    fs::write(big.join("huge"), vec![1u8; 8 << 20]).unwrap();
    let many = dir.join("many");
    fs::create_dir_all(&many).unwrap();
    for i in 0..100 {
        fs::write(many.join(format!("e{i}")), b"").unwrap();
    }
    let clash = dir.join("clash");
    fs::create_dir_all(&clash).unwrap();
    fs::write(clash.join("lost+found"), b"taken").unwrap();
    // A symlink longer than a 1 KiB block allows: the message names it
    // (a name the error's own words contain too).
    let long = dir.join("long");
    fs::create_dir_all(long.join("sub")).unwrap();
    std::os::unix::fs::symlink("t".repeat(1500), long.join("sub/link")).unwrap();
    let long2 = dir.join("long2");
    fs::create_dir_all(&long2).unwrap();
    std::os::unix::fs::symlink("t".repeat(1500), long2.join("target")).unwrap();
    let missing = dir.join("missing");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for (args, says) in [
        (vec!["--from".to_string(), s(&missing)], "missing"),
        (vec!["--from".into(), s(&clash)], "already exists"),
        (vec!["--from".into(), s(&big)], "needs about"),
        (vec!["--from".into(), s(&many)], "inodes"),
        (
            vec!["--from".into(), s(&long)],
            "at sub/link: ext4: invalid target (1500 bytes): a symlink target is 1 to 1023 bytes on this image's 1 KiB blocks",
        ),
        (
            vec!["--from".into(), s(&long2)],
            "at target: ext4: invalid target (1500 bytes)",
        ),
        (
            vec!["--from".into(), s(&src), "--at".into(), "/nowhere".into()],
            "nowhere",
        ),
        (
            vec!["--from".into(), s(&src), "--owner".into(), "12".into()],
            "UID:GID",
        ),
        (
            vec![
                "--from".into(),
                s(&src),
                "--owner".into(),
                "1:2".into(),
                "--squash-owner".into(),
            ],
            "cannot be used with",
        ),
    ] {
        let before = fs::read(&img).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = populate(&img, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: printed {:?}", out.stdout);
        assert!(!Image::redo_log_path(&img).exists(), "{args:?}");
        // A refusal after data was written leaves it in free blocks only
        // (the library's test checks that); these sources fail before any
        // file data or are metadata-only, except the huge one.
        if says != "needs about" {
            assert!(
                fs::read(&img).unwrap() == before,
                "{args:?}: the image changed"
            );
        }
        let fsck = Command::new("e2fsck")
            .arg("-fn")
            .arg(&img)
            .output()
            .unwrap();
        assert!(fsck.status.success(), "{args:?}: e2fsck");
    }
    // A taken name is named once, by its image path, with no `at NAME`.
    let out = populate(&img, &["--from", &s(&clash)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "from {}: ext4: /lost+found: already exists",
            s(&clash)
        )),
        "{err}"
    );
    // And it still works.
    ok_json(
        &img,
        &["--from", src.to_str().unwrap(), "--at", "/lost+found"],
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// What a user meets at the edges of `--from`: a symlink to the tree is
/// followed (as `mke2fs -d` follows it); a tree that holds the image is
/// refused, naming it; a `SOURCE_DATE_EPOCH` that is not a number is an
/// error, not quietly no clamp. Refusals exit 1, one line, the image as
/// it was.
#[test]
fn a_symlinked_tree_an_image_inside_its_tree_and_a_bad_epoch() {
    let dir = scratch("edges");
    let Some(img) = image(&dir, "a.img", "32M", "2048") else {
        return;
    };
    let src = dir.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/f"), b"through the link").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&src, &link).unwrap();
    let refused = |out: Output, says: &str, before: &[u8], img: &Path| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            fs::read(img).unwrap() == before,
            "{says}: the image changed"
        );
    };

    // A bad epoch, before anything is read.
    let before = fs::read(&img).unwrap();
    let out = spacekit()
        .args(["ext4", "populate"])
        .arg(&img)
        .args(["--from", link.to_str().unwrap()])
        .env("SOURCE_DATE_EPOCH", "yesterday")
        .output()
        .unwrap();
    refused(
        out,
        "SOURCE_DATE_EPOCH=yesterday: not a whole number",
        &before,
        &img,
    );

    // Through the link.
    ok_json(&img, &["--from", link.to_str().unwrap()]);
    let mut i = Image::open(&img, OpenMode::ReadOnly).unwrap();
    let ino = i.lookup("/sub/f").unwrap();
    let mut buf = vec![0u8; 16];
    i.read(ino, 0, &mut buf).unwrap();
    assert_eq!(buf, b"through the link");
    drop(i);

    // The image inside the tree it is populated from.
    // (Named to come first in the walk: nothing is written before it.)
    let inside = src.join("sub/0.img");
    fs::copy(image(&dir, "b.img", "32M", "2048").unwrap(), &inside).unwrap();
    let before = fs::read(&inside).unwrap();
    let out = populate(&inside, &["--from", src.to_str().unwrap()]);
    refused(
        out,
        "0.img: it is the image being populated",
        &before,
        &inside,
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// A name from an archive is quoted in an error with its control
/// characters escaped: an escape sequence in a member's name neither
/// reaches the terminal nor splits the one line.
#[test]
fn control_characters_in_names_are_escaped_in_errors() {
    let dir = scratch("escape");
    let Some(img) = image(&dir, "x.img", "4M", "64") else {
        return;
    };
    let mut h = vec![0u8; 512];
    let name = b"a/../\x1b[31mred\nline";
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(b"00000000000\0");
    h[136..148].copy_from_slice(b"14533274460\0");
    h[156] = b'0';
    h[257..265].copy_from_slice(b"ustar\x0000");
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h.resize(512 * 3, 0);
    let tar = dir.join("evil.tar");
    fs::write(&tar, &h).unwrap();
    let out = populate(&img, &["--tar", tar.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(!err.contains(&0x1b), "{:?}", String::from_utf8_lossy(err));
    let text = String::from_utf8_lossy(err);
    assert!(text.contains("\\u{1b}[31mred\\nline"), "{text}");
    assert_eq!(text.trim_end().lines().count(), 1, "{text}");
    fs::remove_dir_all(&dir).unwrap();
}

/// A tree 200 directories deep and 64 files too large to be read ahead
/// (over 256 KiB: they wait open) populate with 40 file descriptors: the
/// walk keeps two directories open, not one per level, and at most a few
/// large files wait open at once. The image is e2fsck-clean and holds the
/// deepest file and every large file byte for byte.
#[test]
fn a_deep_tree_and_many_large_files_need_few_descriptors() {
    let dir = scratch("fds");
    let Some(img) = image(&dir, "img", "64M", "2048") else {
        return;
    };
    let src = dir.join("src");
    let mut deep = src.clone();
    for _ in 0..200 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("bottom"), b"the deepest file").unwrap();
    let big = src.join("big");
    fs::create_dir_all(&big).unwrap();
    let mut want = Vec::new();
    for i in 0..64u32 {
        let bytes: Vec<u8> = (0..300u32 << 10)
            .map(|j| (j.wrapping_mul(2_654_435_761).wrapping_add(i) >> 13) as u8)
            .collect();
        fs::write(big.join(format!("f{i:02}")), &bytes).unwrap();
        want.push(bytes);
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 40 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_spacekit"))
        .args(["ext4", "populate"])
        .arg(&img)
        .arg("--from")
        .arg(&src)
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "populate with 40 descriptors: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fsck = Command::new("e2fsck")
        .arg("-fn")
        .arg(&img)
        .output()
        .unwrap();
    assert!(fsck.status.success(), "e2fsck after the populate");
    let mut image = Image::open(&img, OpenMode::ReadOnly).unwrap();
    let bottom = format!("{}/bottom", "/d".repeat(200));
    let ino = image.lookup(&bottom).unwrap();
    let mut buf = vec![0u8; 64];
    let n = image.read(ino, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"the deepest file");
    for (i, bytes) in want.iter().enumerate() {
        let ino = image.lookup(&format!("/big/f{i:02}")).unwrap();
        let mut got = vec![0u8; bytes.len() + 1];
        let n = image.read(ino, 0, &mut got).unwrap();
        assert!(n == bytes.len() && got[..n] == bytes[..], "/big/f{i:02}");
    }
    fs::remove_dir_all(&dir).unwrap();
}
