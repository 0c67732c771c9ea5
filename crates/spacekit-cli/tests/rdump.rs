//! `spacekit ext4 rdump` and `spacekit ext4 ls -l` end to end: a tree made
//! with the CLI's own verbs (every kind of inode, modes, owners, times with
//! nanoseconds, attributes) lists with each type's letter and copies out
//! whole; an existing host entry fails with one line; as a user the
//! devices and `trusted.` attributes are left out and listed (or, with
//! `--strict`, fail).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn spacekit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spacekit"))
}

/// A fresh directory for one test, world-readable (a user runs the
/// binary on the image in it).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spacekit-rdump-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A 16 MiB ext4 image with 1 KiB blocks, or `None` without mkfs.ext4.
fn image(dir: &Path) -> Option<PathBuf> {
    let path = dir.join("fs.img");
    let out = Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-F", "-q", "-b", "1024", "-O", "^has_journal"])
        .arg(&path)
        .arg("16M")
        .output();
    match out {
        Ok(o) if o.status.success() => Some(path),
        _ => {
            eprintln!("mkfs.ext4 not available: skipping");
            None
        }
    }
}

fn ext4(img: &Path, cmd: &str, args: &[&str]) -> Output {
    spacekit()
        .args(["ext4", cmd])
        .arg(img)
        .args(args)
        .output()
        .unwrap()
}

fn ok(img: &Path, cmd: &str, args: &[&str]) -> Output {
    let out = ext4(img, cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(img: &Path, cmd: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_slice(&ok(img, cmd, &all).stdout).unwrap()
}

/// Every kind of inode, made through the CLI.
fn populate(dir: &Path, img: &Path) {
    let sparse = dir.join("sparse.src");
    let f = fs::File::create(&sparse).unwrap();
    f.set_len(1 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"data in the middle", 512 << 10).unwrap();
    drop(f);
    let from = sparse.to_str().unwrap();
    ok(img, "mkdir", &["/d", "--mode", "1777"]);
    ok(
        img,
        "write",
        &["/d/sparse", "--from", from, "--mode", "4755"],
    );
    ok(img, "ln", &["/d/sparse", "/hard"]);
    ok(img, "ln", &["-s", "d/sparse", "/link"]);
    ok(img, "mknod", &["/null", "c", "1", "3", "--mode", "660"]);
    ok(img, "mknod", &["/sda", "b", "8", "0", "--mode", "660"]);
    ok(img, "mknod", &["/fifo", "p", "--mode", "644"]);
    ok(img, "mknod", &["/sock", "s", "--mode", "700"]);
    ok(img, "chown", &["/d/sparse", "1000:2000"]);
    ok(img, "chmod", &["/d/sparse", "4755"]);
    ok(img, "xattr", &["/d/sparse", "set", "user.comment", "hello"]);
    ok(
        img,
        "xattr",
        &["/d/sparse", "set", "trusted.t", "root only"],
    );
    ok(
        img,
        "touch",
        &["/d/sparse", "--time", "1700000000.123456789"],
    );
}

#[test]
fn ls_l_shows_every_type_and_rdump_copies_the_tree() {
    let dir = scratch("tree");
    let Some(img) = image(&dir) else {
        return;
    };
    populate(&dir, &img);
    // ls -l: the type letters, a device's numbers, a symlink's target.
    let text = String::from_utf8(ok(&img, "ls", &["-l", "/"]).stdout).unwrap();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!(" {name}")) || l.contains(&format!(" {name} -> ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .to_string()
    };
    assert!(line("d").starts_with("drwxrwxrwt "), "{text}");
    assert!(line("null").starts_with("crw-rw---- "), "{text}");
    assert!(line("null").contains("    1,    3 "), "{text}");
    assert!(line("sda").starts_with("brw-rw---- "), "{text}");
    assert!(line("fifo").starts_with("prw-r--r-- "), "{text}");
    assert!(line("sock").starts_with("srwx------ "), "{text}");
    assert!(line("link").starts_with("lrwxrwxrwx "), "{text}");
    assert!(line("link").ends_with(" link -> d/sparse"), "{text}");
    let sub = String::from_utf8(ok(&img, "ls", &["-l", "/d"]).stdout).unwrap();
    let f = sub.lines().find(|l| l.ends_with(" sparse")).unwrap();
    assert!(
        f.starts_with("-rwsr-xr-x   2  1000  2000    1048576 2023-11-14 22:13:20.123456789 "),
        "{f}"
    );
    // The same fields in JSON.
    let l = json(&img, "ls", &["-l", "/"]);
    let entry = |name: &str| {
        l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {l}"))
            .clone()
    };
    assert_eq!(entry("null")["mode_string"], "crw-rw----");
    assert_eq!(
        entry("null")["device"],
        serde_json::json!({"major": 1, "minor": 3})
    );
    assert_eq!(entry("link")["target"], "d/sparse");
    assert_eq!(entry("hard")["links"], 2);
    assert_eq!(entry("hard")["uid"], 1000);
    assert_eq!(entry("hard")["mtime_nanos"], 123_456_789);
    assert_eq!(entry("hard")["mtime"], "2023-11-14 22:13:20.123456789");
    assert_eq!(entry("fifo")["device"], Value::Null);
    // Plain ls is as it was: inode, type and octal mode, links, size, name.
    let plain = String::from_utf8(ok(&img, "ls", &["/"]).stdout).unwrap();
    assert!(
        plain
            .lines()
            .any(|l| l.contains(" c0660 ") && l.ends_with(" null")),
        "{plain}"
    );
    // rdump of `/` (as root: everything) into an empty directory.
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    let r = json(&img, "rdump", &["/", out.to_str().unwrap()]);
    let root = is_root();
    assert_eq!(
        (
            r["dirs"].as_u64(),
            r["files"].as_u64(),
            r["hard_links"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(
        (
            r["fifos"].as_u64(),
            r["sockets"].as_u64(),
            r["symlinks"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(r["owners_set"], root, "{r}");
    let m = |p: &str| fs::symlink_metadata(out.join(p)).unwrap();
    let s = m("d/sparse");
    assert_eq!(s.mode() & 0o7777, 0o4755);
    assert_eq!(
        (s.size(), s.mtime(), s.mtime_nsec()),
        (1 << 20, 1_700_000_000, 123_456_789)
    );
    assert!(s.blocks() <= 16, "holes kept: {} blocks", s.blocks());
    assert_eq!(
        (s.nlink(), s.ino()),
        (2, m("hard").ino()),
        "one inode, two names"
    );
    assert_eq!(
        fs::read_link(out.join("link")).unwrap(),
        Path::new("d/sparse")
    );
    assert!(m("fifo").file_type().is_fifo() && m("sock").file_type().is_socket());
    assert_eq!(m("d").mode() & 0o7777, 0o1777);
    if root {
        assert!(m("null").file_type().is_char_device() && m("sda").file_type().is_block_device());
        assert_eq!((m("null").rdev(), m("sda").rdev()), ((1 << 8) | 3, 8 << 8));
        assert_eq!((s.uid(), s.gid()), (1000, 2000));
        assert_eq!(r["devices"], 2, "{r}");
    }
    if let Ok(g) = Command::new("getfattr")
        .args(["-n", "user.comment", "--only-values"])
        .arg(out.join("d/sparse"))
        .output()
    {
        assert_eq!(g.stdout, b"hello", "the attribute");
    }
    // A subtree, as text: DEST/<name>, the counts on stderr.
    let out2 = dir.join("out2");
    fs::create_dir(&out2).unwrap();
    let o = ok(&img, "rdump", &["/d", out2.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("rdump /d to") && err.contains("1 directory, 1 file (1048576 bytes)"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    assert_eq!(
        fs::read(out2.join("d/sparse")).unwrap(),
        fs::read(dir.join("sparse.src")).unwrap()
    );
    // Again into the same place: refused, one line, exit 1.
    let o = ext4(&img, "rdump", &["/d", out2.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("already exists"), "{err}");
    // --no-xattrs: none set.
    let out3 = dir.join("out3");
    fs::create_dir(&out3).unwrap();
    let r = json(
        &img,
        "rdump",
        &["/d", out3.to_str().unwrap(), "--no-xattrs"],
    );
    assert_eq!(r["xattrs"], 0, "{r}");
    if let Ok(g) = Command::new("getfattr")
        .args(["-d", "-m", "-", "--absolute-names"])
        .arg(out3.join("d/sparse"))
        .output()
    {
        assert!(
            g.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&g.stdout)
        );
    }
    // No such path, no such destination: exit 1.
    for args in [
        ["/nope", out2.to_str().unwrap()],
        ["/d", "/nonexistent/dest"],
    ] {
        let o = ext4(&img, "rdump", &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
    }
    // A file whose extent tree debugfs damaged: the one line names the
    // file in the image, not only the path asked for.
    let o = Command::new("debugfs")
        .args(["-w", "-R", "sif /d/sparse block[0] 0"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out4 = dir.join("out4");
    fs::create_dir(&out4).unwrap();
    let o = ext4(&img, "rdump", &["/", out4.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(": /: ext4: /d/sparse: corrupt image"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// As a user (as root: `nobody`, 65534), devices and `trusted.`
/// attributes are left out and listed, the copies belong to the user;
/// `--strict` fails on the first of them.
#[test]
fn as_a_user_devices_are_left_out_or_with_strict_fail() {
    let dir = scratch("user");
    let Some(img) = image(&dir) else {
        return;
    };
    populate(&dir, &img);
    let user = |out: &Path, extra: &[&str]| {
        let mut c = spacekit();
        c.args(["ext4", "rdump"])
            .arg(&img)
            .arg("/")
            .arg(out)
            .args(extra);
        if is_root() {
            std::os::unix::fs::chown(out, Some(65534), Some(65534)).unwrap();
            c.uid(65534).gid(65534);
        }
        c.output().unwrap()
    };
    let out = dir.join("user-out");
    fs::create_dir(&out).unwrap();
    let o = user(&out, &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["owners_set"], false, "{r}");
    assert_eq!(r["devices"], 0, "{r}");
    let skipped = r["skipped"].as_array().unwrap();
    let mut left: Vec<&str> = skipped
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            out.join("d/sparse").to_str().unwrap(),
            out.join("null").to_str().unwrap(),
            out.join("sda").to_str().unwrap()
        ],
        "{r}"
    );
    for s in skipped {
        let want = if s["path"].as_str().unwrap().ends_with("sparse") {
            "xattr trusted.t"
        } else {
            "device node"
        };
        assert_eq!(s["what"], want, "{r}");
        assert!(
            s["reason"].as_str().unwrap().contains("not permitted"),
            "{r}"
        );
    }
    assert!(!out.join("null").exists() && out.join("fifo").exists());
    let me = fs::metadata(&out).unwrap().uid();
    assert_eq!(fs::metadata(out.join("d/sparse")).unwrap().uid(), me);
    assert_eq!(
        fs::metadata(out.join("d/sparse")).unwrap().mode() & 0o7777,
        0o4755
    );
    // Text: what was left out, on stderr.
    let out = dir.join("user-text");
    fs::create_dir(&out).unwrap();
    let o = user(&out, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("owners kept (not root); 3 left out"), "{err}");
    assert!(
        err.contains("null: device node left out: Operation not permitted"),
        "{err}"
    );
    // --strict: exit 1, the host error named.
    let out = dir.join("user-strict");
    fs::create_dir(&out).unwrap();
    let o = user(&out, &["--strict"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("lsetxattr ") && err.contains("Operation not permitted"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn rdump_help_explains_it() {
    let o = spacekit()
        .args(["ext4", "rdump", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    for word in [
        "rdump",
        "DEST",
        "--strict",
        "--no-xattrs",
        "sparse",
        "hard",
        "nanosecond",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
    let o = spacekit().args(["ext4", "ls", "--help"]).output().unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    assert!(help.contains("-l") && help.contains("ls -l"), "{help}");
}
