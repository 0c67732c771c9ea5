//! `Populate`: a host tree made at test time (`spacekit_testkit::gen_tree`:
//! every kind of inode, sparse files, owners, nanosecond times, hard
//! links, xattrs and ACLs, 255-byte and UTF-8 names, a 5,000-entry
//! directory, 40 levels) built into images of 1, 4 and 64 KiB blocks and
//! read back by the kernel (a read-only loop mount, compared with the
//! source by `tree::diff`) or, for 64 KiB blocks, by debugfs (`rdump`,
//! `stat`, `ea_list`); e2fsck-clean. Reproducible images; the same tree as
//! `mke2fs -d` makes it; `--at` into an existing image; a refused
//! populate (a name taken, no space, no inodes) leaves the image as it
//! was; write and read faults at every step leave it as before or as
//! after.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image, OpenMode, Populate, PopulateOptions, PopulateReport};
use spacekit_testkit::gen_tree::{self, generate, image_walk, Made, Spec};
use spacekit_testkit::tree::{self, Compare};

use crate::fixtures::*;
use crate::oracles::*;

/// 1 KiB blocks (flex_bg, 64bit, metadata_csum, no journal), room for
/// the 5,000-entry directory.
const P1K: Config = Config {
    name: "pop-1k",
    size: "64M",
    args: &["-b", "1024", "-N", "8192", "-O", "^has_journal"],
};
const P1K_NOCSUM: Config = Config {
    name: "pop-1k-nocsum",
    size: "64M",
    args: &[
        "-b",
        "1024",
        "-N",
        "8192",
        "-O",
        "^has_journal,^metadata_csum",
    ],
};
const P4K_JOURNAL: Config = Config {
    name: "pop-4k-journal",
    size: "64M",
    args: &["-b", "4096", "-N", "8192"],
};
const P4K_NOFLEX: Config = Config {
    name: "pop-4k-noflex-32bit",
    size: "64M",
    args: &[
        "-b",
        "4096",
        "-N",
        "8192",
        "-O",
        "^has_journal,^flex_bg,^64bit",
    ],
};
const P64K: Config = Config {
    name: "pop-64k",
    size: "256M",
    args: &["-b", "65536", "-N", "8192", "-O", "^has_journal"],
};

/// The clamp of the reproducible tests: about half the generated mtimes
/// are after it.
const CLAMP: i64 = 1_550_000_000;

/// Populates directory `at` of the image at `img` from host directory
/// `src` and flushes.
fn populate(
    img: &Path,
    at: &str,
    src: &Path,
    opts: PopulateOptions,
) -> Result<PopulateReport, Ext4Error> {
    let mut image = open_rw(img);
    let r = (|| {
        let mut pop = Populate::new(&mut image, at, opts)?;
        pop.add_dir(src)?;
        pop.finish()
    })();
    if r.is_err() {
        // A refused populate was rolled back: the image's next flush (a
        // program goes on) writes nothing of it.
        image.flush().unwrap();
    }
    r
}

/// The report counts what the generator made.
fn check_report(r: &PopulateReport, m: &Made, what: &str) {
    assert_eq!(
        (r.files, r.dirs, r.symlinks, r.nodes, r.hard_links, r.bytes),
        (m.files, m.dirs, m.symlinks, m.nodes, m.hard_links, m.bytes),
        "{what}: report {r:?} vs made {m:?}"
    );
    assert!(r.xattrs >= 5, "{what}: {r:?}");
}

/// `tree::diff(src, mount of img)`, or `None` when mounting is not
/// allowed.
fn kernel_diff(img: &Path, mnt: &Path, src: &Path, c: Compare) -> Option<Vec<String>> {
    let _m = Mount::new(img, mnt)?;
    Some(tree::diff(src, mnt, c).unwrap())
}

fn assert_no_diff(d: &[String], what: &str) {
    assert!(
        d.is_empty(),
        "{what}: {} differences:\n{}",
        d.len(),
        d.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// The differences between trees `a` and `b` (as `tree::diff`, without
/// the tops) after `norm` rewrote each side's entries (given the entry's
/// host type); an entry for which it returns false is left out.
fn diff_norm(
    a: &Path,
    b: &Path,
    c: Compare,
    norm: impl Fn(fs::FileType, &mut tree::Node) -> bool,
) -> Vec<String> {
    let side = |root: &Path| {
        tree::snapshot(root, c)
            .unwrap()
            .into_iter()
            .filter(|(p, _)| !p.as_os_str().is_empty())
            .filter_map(|(p, mut n)| {
                let ft = fs::symlink_metadata(root.join(&p)).unwrap().file_type();
                norm(ft, &mut n).then_some((p, n))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let (x, y) = (side(a), side(b));
    x.keys()
        .chain(y.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| x.get(*k) != y.get(*k))
        .map(|k| format!("{}: {:?} vs {:?}", k.display(), x.get(k), y.get(k)))
        .collect()
}

/// What `mke2fs -d` 1.47.0 keeps otherwise than the source says, made
/// alike on both sides: it makes each name of a hard-linked symlink its own
/// symlink (only other kinds share an inode), and it stores no epoch bits,
/// so an mtime past 2038 reads back 2^32 seconds early (compared in its
/// low 32 bits).
fn as_mke2fs_d_keeps(ft: fs::FileType, n: &mut tree::Node) -> bool {
    if ft.is_symlink() {
        n.nlink = 0;
    }
    n.mtime.0 = i64::from(n.mtime.0 as u32);
    true
}

/// `debugfs -R CMD img`'s standard output.
fn debugfs(img: &Path, cmd: &str) -> String {
    let out = e2fs("debugfs")
        .arg("-R")
        .arg(cmd)
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs {cmd}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// debugfs's `stat`: (the mode's permission bits with setuid, setgid and
/// sticky; the device number; the mtime's extra field's nanoseconds).
fn debugfs_stat(img: &Path, path: &str) -> (u32, Option<(u32, u32)>, Option<u32>) {
    let text = debugfs(img, &format!("stat \"{path}\""));
    let mode = text
        .split_once("Mode:")
        .unwrap_or_else(|| panic!("debugfs stat {path}: {text}"))
        .1
        .split_whitespace()
        .next()
        .unwrap();
    let mode = u32::from_str_radix(mode, 8).unwrap();
    let dev = text.split_once("Device major/minor number:").map(|(_, r)| {
        let (a, b) = r
            .split_whitespace()
            .next()
            .unwrap()
            .split_once(':')
            .unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    });
    let nanos = text.lines().find_map(|l| {
        let (secs_extra, _) = l.trim().strip_prefix("mtime: ")?.split_once(" --")?;
        let extra = secs_extra.split_once(':')?.1;
        Some(hex(extra) >> 2)
    });
    (mode, dev, nanos)
}

/// The 64 KiB image against its source through debugfs: `rdump` (which
/// keeps permission bits without setuid/setgid, owners and whole seconds
/// of files and directories, no xattrs, no devices/FIFOs/sockets, and
/// copies each hard link as its own file) compared entry by entry, then
/// `stat` for what rdump drops: the full mode, device numbers and the
/// mtime's nanoseconds; `ea_list` for xattrs.
fn compare_through_debugfs(img: &Path, src: &Path, dir: &TempDir, what: &str) {
    let out = dir.path(&format!("{what}-rdump"));
    fs::create_dir_all(&out).unwrap();
    debugfs(img, &format!("rdump / {}", out.display()));
    let c = Compare {
        nanos: false,
        xattrs: false,
        top: false,
        special: false,
        ..Compare::default()
    };
    // rdump makes no devices, FIFOs or sockets, copies each hard link as
    // a file of its own, leaves a symlink's owner and times, drops the
    // sticky bit, and debugfs 1.47.0 reads seconds unsigned (before 1970
    // reads past 2106): compared in their low 32 bits.
    let diffs = diff_norm(src, &out, c, |ft, n| {
        if ft.is_fifo() || ft.is_socket() || ft.is_char_device() || ft.is_block_device() {
            return false;
        }
        n.nlink = 0;
        n.mode &= !0o1000;
        n.mtime.0 = i64::from(n.mtime.0 as u32);
        if ft.is_symlink() {
            n.owner = (0, 0);
            n.mtime = (0, 0);
        }
        true
    });
    assert_no_diff(&diffs, &format!("{what}: rdump"));
    // What rdump leaves out, entry by entry through `stat`: every
    // special file and mode, a sample of the rest.
    for (i, rel) in gen_tree::paths(src).iter().enumerate() {
        let st = fs::symlink_metadata(src.join(rel)).unwrap();
        let ft = st.file_type();
        let special = ft.is_char_device()
            || ft.is_block_device()
            || ft.is_fifo()
            || ft.is_socket()
            || st.mode() & 0o7000 != 0;
        if !special && i % 97 != 0 {
            continue;
        }
        let p = format!("/{}", rel.display());
        let (mode, dev, nanos) = debugfs_stat(img, &p);
        let ctx = format!("{what}: debugfs stat {p}");
        assert_eq!(mode, st.mode() & 0o7777, "{ctx}: mode");
        if ft.is_char_device() || ft.is_block_device() {
            let want = (libc::major(st.rdev()), libc::minor(st.rdev()));
            assert_eq!(dev, Some(want), "{ctx}: device");
        }
        assert_eq!(
            nanos,
            Some(st.mtime_nsec() as u32),
            "{ctx}: mtime nanoseconds"
        );
        let want: Vec<String> = tree::xattrs(&src.join(rel))
            .unwrap()
            .iter()
            .filter(|(k, _)| !k.starts_with(b"system.posix_acl"))
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect();
        let listed = debugfs(img, &format!("ea_list \"{p}\""));
        for k in want {
            assert!(listed.contains(&k), "{ctx}: ea_list lacks {k}: {listed}");
        }
    }
}

/// Every kind of entry, in every block size: e2fsck-clean, and read back
/// equal to the source by the kernel (1 and 4 KiB) or debugfs (64 KiB).
#[test]
fn every_kind_of_entry_reads_back_as_its_source() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-kinds");
    let src = dir.path("src");
    let made = generate(&src, &Spec::full(11));
    if !gen_tree::is_root() {
        println!("not root: no devices, other owners or security.* xattrs in the source");
    }
    for cfg in [P1K, P1K_NOCSUM, P4K_JOURNAL, P4K_NOFLEX, P64K] {
        let what = cfg.name;
        let img = mkfs(&dir, &cfg);
        let r = populate(&img, "/", &src, PopulateOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        check_report(&r, &made, what);
        assert_fsck_clean(&img, what);
        assert_verify_clean(&open_ro(&img), what);
        if cfg.name == "pop-64k" {
            compare_through_debugfs(&img, &src, &dir, what);
        } else if let Some(d) = kernel_diff(
            &img,
            &dir.path(&format!("{what}-mnt")),
            &src,
            Compare::default(),
        ) {
            assert_no_diff(&d, what);
        }
        fs::remove_file(&img).unwrap();
    }
}

/// The top directory's own attributes go to the populate's directory:
/// permission bits, owner, times and xattrs (`Populate::add_dir`'s doc).
#[test]
fn the_top_directorys_xattrs_go_to_the_target_directory() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-top");
    let src = dir.path("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    gen_tree::set_xattr(&src, "user.top", b"on the top");
    let img = mkfs(&dir, &K1);
    populate(&img, "/", &src, PopulateOptions::default()).unwrap();
    let mut image = open_ro(&img);
    let xattrs = image.xattrs(spacekit::ext4::ROOT_INO).unwrap();
    assert!(
        xattrs
            .iter()
            .any(|(k, v)| k == "user.top" && v == b"on the top"),
        "the root's xattrs: {xattrs:?}"
    );
    let _ = image.lookup("/f").unwrap();
}

/// In-memory contents, owned (`Contents::Bytes`) and lent
/// (`Contents::Borrowed`, also with xattrs, which take the other path): a
/// block of zeros, a partial last block, an empty file; debugfs dumps the
/// same bytes and lists the xattr, and e2fsck is clean.
#[test]
fn bytes_owned_and_lent_read_back_through_debugfs() {
    use spacekit::ext4::{Contents, Entry, EntryKind, Meta};
    require_e2fsprogs!();
    let dir = TempDir::new("pop-bytes");
    let img = mkfs(&dir, &K1);
    let mut owned = random_bytes(3 * 4096 + 100, 1);
    owned[4096..8192].fill(0);
    let lent = random_bytes(5000, 2);
    {
        let mut image = open_rw(&img);
        let mut pop = Populate::new(&mut image, "/", PopulateOptions::default()).unwrap();
        let meta = Meta {
            perm: 0o644,
            ..Meta::default()
        };
        fn file<'a>(path: &[u8], c: Contents<'a>, meta: &Meta) -> Entry<'a> {
            Entry {
                path: path.to_vec(),
                kind: EntryKind::File(c),
                meta: meta.clone(),
            }
        }
        pop.add(file(b"owned", Contents::Bytes(owned.clone()), &meta))
            .unwrap();
        let mut buf = lent.clone();
        pop.add(file(b"lent", Contents::Borrowed(&buf), &meta))
            .unwrap();
        // The caller's buffer is its own again.
        buf.fill(0xEE);
        pop.add(file(b"empty", Contents::Borrowed(&[]), &meta))
            .unwrap();
        let tagged = Meta {
            xattrs: vec![("user.tag".into(), b"lent".to_vec())],
            ..meta.clone()
        };
        pop.add(file(b"tagged", Contents::Borrowed(&lent), &tagged))
            .unwrap();
        pop.finish().unwrap();
    }
    assert_fsck_clean(&img, "in-memory contents");
    assert_eq!(debugfs_dump(&img, &dir, "/owned"), owned);
    assert_eq!(debugfs_dump(&img, &dir, "/lent"), lent);
    assert!(debugfs_dump(&img, &dir, "/empty").is_empty());
    assert_eq!(debugfs_dump(&img, &dir, "/tagged"), lent);
    let ea = debugfs(&img, "ea_list /tagged");
    assert!(ea.contains("user.tag") && ea.contains("lent"), "{ea}");
}

/// A new file's partial blocks over free blocks that hold old bytes: on
/// disk, the rest of the block around the file's bytes is zeros (a last
/// block written whole by a populate, a write at an offset into a hole
/// through the path API).
#[test]
fn partial_blocks_over_stale_free_blocks_hold_zeros_around_the_bytes() {
    use spacekit::ext4::{Contents, Entry, EntryKind, Meta};
    use std::os::unix::fs::FileExt;
    require_e2fsprogs!();
    let dir = TempDir::new("pop-stale");
    let img = mkfs(&dir, &K1);
    let bs = {
        let image = open_ro(&img);
        let bs = u64::from(image.info().block_size);
        let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
        for g in 0..image.info().group_count {
            for (s, e) in image.free_extents(g).unwrap() {
                let stale = vec![0xA5u8; ((e - s + 1) * bs) as usize];
                f.write_all_at(&stale, s * bs).unwrap();
            }
        }
        bs
    };
    let data = random_bytes(4 * bs as usize + 100, 3);
    let (tail, hole) = {
        let mut image = open_rw(&img);
        let mut pop = Populate::new(&mut image, "/", PopulateOptions::default()).unwrap();
        pop.add(Entry {
            path: b"f".to_vec(),
            kind: EntryKind::File(Contents::Borrowed(&data)),
            meta: Meta::default(),
        })
        .unwrap();
        pop.finish().unwrap();
        let ino = image.create("/h", 0o644).unwrap();
        image.write(ino, 2 * bs + 300, &[7u8; 100]).unwrap();
        image.flush().unwrap();
        let f = image.lookup("/f").unwrap();
        let phys = |image: &mut Image, ino: u32, logical: u32| {
            let st = image.stat(ino).unwrap();
            let e = st
                .extents
                .iter()
                .find(|e| e.logical <= logical && logical < e.logical + u32::from(e.len))
                .unwrap();
            e.physical + u64::from(logical - e.logical)
        };
        (phys(&mut image, f, 4), phys(&mut image, ino, 2))
    };
    assert_fsck_clean(&img, "over stale blocks");
    let raw = fs::File::open(&img).unwrap();
    let mut b = vec![0u8; bs as usize];
    raw.read_exact_at(&mut b, tail * bs).unwrap();
    assert_eq!(&b[..100], &data[4 * bs as usize..]);
    assert!(b[100..].iter().all(|&x| x == 0), "the last block's tail");
    raw.read_exact_at(&mut b, hole * bs).unwrap();
    assert!(b[..300].iter().all(|&x| x == 0), "before the bytes");
    assert_eq!(&b[300..400], &[7u8; 100]);
    assert!(b[400..].iter().all(|&x| x == 0), "after the bytes");
}

/// Two populates of the same tree into two images made alike give the same
/// bytes, with the clamp; also when the tree is made again the other way
/// round (other host inode numbers and `readdir` order, other ctimes).
#[test]
fn populates_are_reproducible() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-repro");
    let spec = Spec {
        wide: 600,
        ..Spec::full(23)
    };
    let src = dir.path("src");
    generate(&src, &spec);
    let again = dir.path("src-again");
    generate(
        &again,
        &Spec {
            reverse: true,
            ..spec.clone()
        },
    );
    // The re-made tree is the same tree with other host inodes.
    let c = Compare {
        top: true,
        ..Compare::default()
    };
    assert_no_diff(&tree::diff(&src, &again, c).unwrap(), "re-made source");
    let ino = |p: &Path| fs::symlink_metadata(p.join("a/hl")).unwrap().ino();
    assert_ne!(ino(&src), ino(&again));
    let opts = PopulateOptions {
        owner: None,
        clamp: Some(CLAMP),
    };
    for cfg in [P1K, P4K_JOURNAL] {
        let what = cfg.name;
        let one = mkfs(&dir, &Config { name: "one", ..cfg });
        let two = mkfs(&dir, &Config { name: "two", ..cfg });
        let three = mkfs(
            &dir,
            &Config {
                name: "three",
                ..cfg
            },
        );
        assert_eq!(
            fs::read(&one).unwrap(),
            fs::read(&two).unwrap(),
            "{what}: mkfs"
        );
        populate(&one, "/", &src, opts).unwrap();
        populate(&two, "/", &src, opts).unwrap();
        populate(&three, "/", &again, opts).unwrap();
        let (a, b, c3) = (
            fs::read(&one).unwrap(),
            fs::read(&two).unwrap(),
            fs::read(&three).unwrap(),
        );
        assert!(a == b, "{what}: two populates of one tree differ");
        assert!(a == c3, "{what}: the re-made tree's image differs");
        assert_fsck_clean(&one, what);
        // The clamp: mtimes after it are it, atime = ctime = mtime.
        let mut image = open_ro(&one);
        // (Not a hard link: each name sets its inode's times.)
        for path in ["/sgid", "/zeros", "/b/c"] {
            let ino = image.lookup(path).unwrap();
            let t = image.inode(ino).unwrap().times();
            let m = t.mtime.unwrap();
            for other in [t.atime, t.ctime, t.crtime] {
                assert_eq!(other, Some(m), "{what}: {path}: {t:?}");
            }
            let ((secs, nanos), _) = gen_tree::times_of(&path[1..], false);
            if secs >= CLAMP {
                assert_eq!((m.secs, m.nanos), (CLAMP, 0), "{what}: {path}");
            } else {
                assert_eq!(
                    (m.secs, i64::from(m.nanos)),
                    (secs, nanos),
                    "{what}: {path}"
                );
            }
        }
        for p in [one, two, three] {
            fs::remove_file(p).unwrap();
        }
    }
}

/// The kernel reads spacekit's populate of a tree as it reads `mke2fs -d`'s
/// of the same tree. What `mke2fs -d` 1.47.0 does otherwise, and so is
/// left out of the comparison: it keeps whole seconds (no nanoseconds), so
/// mtimes are compared in seconds; and it leaves the image's root
/// directory as mkfs made it (mode 0755, owner root, mkfs's time) where
/// the populate gives the root the source directory's mode, owner and
/// times: the tops are compared apart (the populate's root against the
/// source, `mke2fs -d`'s against what mkfs makes).
#[test]
fn reads_as_mke2fs_d_reads() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-mke2fs-d");
    let src = dir.path("src");
    generate(
        &src,
        &Spec {
            wide: 1500,
            ..Spec::full(31)
        },
    );
    for cfg in [P1K, P4K_NOFLEX] {
        let what = cfg.name;
        let theirs = mkfs_d(&dir, &format!("{what}-d.img"), cfg.args, &src, cfg.size);
        let ours = mkfs(&dir, &cfg);
        populate(&ours, "/", &src, PopulateOptions::default()).unwrap();
        assert_fsck_clean(&theirs, what);
        assert_fsck_clean(&ours, what);
        let (mt, mo) = (dir.path("mnt-theirs"), dir.path("mnt-ours"));
        let Some(_t) = Mount::new(&theirs, &mt) else {
            return;
        };
        let Some(_o) = Mount::new(&ours, &mo) else {
            return;
        };
        let c = Compare {
            nanos: false,
            top: false,
            ..Compare::default()
        };
        assert_no_diff(&diff_norm(&mt, &mo, c, as_mke2fs_d_keeps), what);
        // The tops: ours is the source's, theirs is mkfs's.
        let top = |p: &Path| {
            let st = fs::metadata(p).unwrap();
            (st.mode(), st.uid(), st.gid(), st.mtime(), st.mtime_nsec())
        };
        assert_eq!(top(&mo), top(&src), "{what}: the populate's root");
        let (mode, ..) = top(&mt);
        assert_eq!(mode, 0o40755, "{what}: mke2fs -d's root");
        assert_ne!(top(&mt), top(&src), "{what}: mke2fs -d copied the root");
        drop((_t, _o));
        fs::remove_file(&theirs).unwrap();
        fs::remove_file(&ours).unwrap();
    }
}

/// Reads the file's bytes.
fn bytes(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap()
}

/// The image at `img` is as it was before a refused populate: no redo
/// log, e2fsck-clean, everything the library reads equal to `walk`
/// (`image_walk` before), and its bytes equal to `before` but, unless
/// `strict`, in blocks free before and after: a populate writes file data
/// straight to free blocks as it comes (`Populate`'s doc), so one refused
/// after some files were written leaves their bytes in free blocks.
fn assert_unchanged(img: &Path, before: &[u8], walk: &Walk, strict: bool, what: &str) {
    assert!(
        !Image::redo_log_path(img).exists(),
        "{what}: a redo log was left"
    );
    assert_fsck_clean(img, what);
    let mut image = open_rw(img);
    assert!(
        &image_walk(&mut image).unwrap() == walk,
        "{what}: the image reads otherwise"
    );
    let now = bytes(img);
    if now == before {
        return;
    }
    let bs = image.info().block_size as usize;
    let changed: Vec<usize> = (0..before.len() / bs)
        .filter(|&b| now[b * bs..(b + 1) * bs] != before[b * bs..(b + 1) * bs])
        .collect();
    let in_use: Vec<usize> = changed
        .iter()
        .copied()
        .filter(|&b| image.block_in_use(b as u64).unwrap())
        .collect();
    assert!(
        !strict && in_use.is_empty(),
        "{what}: the image changed in {} blocks, {} of them in use: {:?}",
        changed.len(),
        in_use.len(),
        &in_use[..in_use.len().min(20)]
    );
}

type Walk = BTreeMap<Vec<u8>, String>;

/// What the image at `img` reads (`image_walk`).
fn walk(img: &Path) -> Walk {
    image_walk(&mut open_rw(img)).unwrap()
}

/// `cp -a FROM/. TO/`: the expected result of a merge.
fn cp_a(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    let out = Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cp -a: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Populating `--at` a directory of an image `mke2fs -d` made merges into
/// it (a directory onto a directory takes the source's mode, owner and
/// times, what is in it stays), as `cp -a` merges on the host. A name
/// that is taken fails with `Exists` and leaves the image as it was.
#[test]
fn populate_at_merges_into_an_existing_directory() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-at");
    let src1 = dir.path("src1");
    generate(
        &src1,
        &Spec {
            whole_seconds: true,
            ..Spec::small(41, 40)
        },
    );
    // The second tree goes to /b, which holds c/ (0700) and c/d/: c gets
    // the source's mode and times and a new file, d a new file, and new
    // directories and files come beside them.
    let src2 = dir.path("src2");
    fs::create_dir_all(src2.join("c/d")).unwrap();
    fs::create_dir_all(src2.join("new-dir/sub")).unwrap();
    fs::write(src2.join("c/new-in-c"), b"new in c\n").unwrap();
    fs::write(src2.join("c/d/new-in-d"), vec![7u8; 5000]).unwrap();
    fs::write(src2.join("new-dir/sub/x"), b"x").unwrap();
    fs::write(src2.join("newfile"), b"new file\n").unwrap();
    fs::hard_link(src2.join("newfile"), src2.join("new-dir/newfile-link")).unwrap();
    std::os::unix::fs::symlink("../c", src2.join("new-dir/to-c")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(src2.join("c"), fs::Permissions::from_mode(0o2755)).unwrap();
    fs::set_permissions(&src2, fs::Permissions::from_mode(0o711)).unwrap();
    for p in gen_tree::paths(&src2).iter().rev().chain([&PathBuf::new()]) {
        let t = filetime(1_600_000_000 + p.as_os_str().len() as i64, 123_456_789);
        set_mtime(&src2.join(p), t);
    }
    for cfg in [P1K, P4K_JOURNAL] {
        let what = cfg.name;
        let img = mkfs_d(&dir, &format!("{what}-at.img"), cfg.args, &src1, cfg.size);
        let before = bytes(&img);
        populate(&img, "/b", &src2, PopulateOptions::default()).unwrap();
        assert_fsck_clean(&img, what);
        let expected = dir.path(&format!("{what}-expected"));
        cp_a(&src1, &expected);
        cp_a(&src2, &expected.join("b"));
        let c = Compare {
            top: false,
            ..Compare::default()
        };
        if let Some(_m) = Mount::new(&img, &dir.path("mnt")) {
            let d = diff_norm(&expected, &dir.path("mnt"), c, as_mke2fs_d_keeps);
            assert_no_diff(&d, &format!("{what}: merged"));
        }

        // Taken names, the image as it was: a file where a directory is
        // (the first entry), and a file where a file is after other
        // entries were made (a directory and a file with data).
        let clash1 = dir.path("clash1");
        fs::create_dir_all(&clash1).unwrap();
        fs::write(clash1.join("a"), b"not a directory").unwrap();
        let clash2 = dir.path("clash2");
        fs::create_dir_all(clash2.join("aaa-dir")).unwrap();
        fs::write(clash2.join("aaa-dir/data"), vec![0x5a; 100 << 10]).unwrap();
        fs::write(clash2.join("aaa-file"), b"small").unwrap();
        fs::write(clash2.join("suid"), b"taken").unwrap();
        for (src, at, taken) in [
            (&clash1, "/", "/a"),
            (&clash2, "/", "/suid"),
            (&src2, "/b", "/b/c/d/new-in-d"),
        ] {
            let ctx = format!("{what}: {} at {at}", src.display());
            let (before, w) = (bytes(&img), walk(&img));
            match populate(&img, at, src, PopulateOptions::default()) {
                Err(Ext4Error::Exists { path }) => assert_eq!(path, taken, "{ctx}"),
                other => panic!("{ctx}: {other:?}"),
            }
            // Refused at its first entry, nothing was written at all.
            assert_unchanged(&img, &before, &w, taken == "/a", &ctx);
        }
        let _ = before;
        fs::remove_file(&img).unwrap();
        fs::remove_dir_all(&expected).unwrap();
        fs::remove_dir_all(&clash1).unwrap();
        fs::remove_dir_all(&clash2).unwrap();
    }
}

fn filetime(secs: i64, nanos: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: secs,
        tv_nsec: nanos,
    }
}

/// Sets `p`'s atime and mtime to `t` (not following a symlink).
fn set_mtime(p: &Path, t: libc::timespec) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = [t, t];
    // SAFETY: `c` is NUL-terminated; `ts` holds two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0);
}

/// A source bigger than the image, or with more entries than it has
/// inodes: `PopulateNoSpace` with what the whole source needs (above what
/// is free), the image as it was.
#[test]
fn no_space_and_no_inodes_change_nothing() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-nospace");
    // Blocks: every kind, then a 12 MiB file into an 8 MiB image (the
    // walk goes on counting past the failure: more files after it).
    let big = dir.path("big");
    generate(&big, &Spec::small(61, 20));
    fs::write(
        big.join("m-big"),
        spacekit_testkit::rng::Rng(5).bytes(12 << 20),
    )
    .unwrap();
    for i in 0..10 {
        fs::write(big.join(format!("z{i}")), vec![1u8; 100 << 10]).unwrap();
    }
    // Inodes: 400 empty files, 256 inodes.
    let many = dir.path("many");
    fs::create_dir_all(many.join("d")).unwrap();
    for i in 0..400 {
        fs::write(many.join(format!("d/e{i:03}")), b"").unwrap();
    }
    for (src, blocks) in [(&big, true), (&many, false)] {
        let img = mkfs(&dir, &K1);
        let (before, w) = (bytes(&img), walk(&img));
        let (bf, inf) = {
            let i = open_ro(&img);
            (i.free_blocks_count(), u64::from(i.free_inodes_count()))
        };
        let what = format!("{}", src.display());
        match populate(&img, "/", src, PopulateOptions::default()) {
            Err(Ext4Error::PopulateNoSpace {
                blocks_needed,
                blocks_free,
                inodes_needed,
                inodes_free,
            }) => {
                assert_eq!((blocks_free, inodes_free), (bf, inf), "{what}");
                if blocks {
                    assert!(
                        blocks_needed > blocks_free && blocks_needed >= 12 * 1024 + 1000,
                        "{what}: {blocks_needed} blocks needed"
                    );
                } else {
                    assert!(inodes_needed > inodes_free, "{what}");
                    assert!(inodes_needed >= 401, "{what}: {inodes_needed}");
                    // The names' records in their directory count: 400
                    // of 12 bytes fill blocks of their own.
                    assert!(
                        blocks_needed > 400 * 12 / 1024,
                        "{what}: {blocks_needed} blocks needed"
                    );
                }
            }
            other => panic!("{what}: {other:?}"),
        }
        // (Empty files write no data: byte for byte as before.)
        assert_unchanged(&img, &before, &w, !blocks, &what);
        fs::remove_file(&img).unwrap();
    }
    // 100 directories of 20 empty files each: each directory's names fit
    // in its first block, so the estimate is its 100 blocks and the
    // root's growth (100 records of 12 bytes: 2 blocks of 1 KiB), not a
    // block per directory again for its names (133).
    let dirs = dir.path("dirs");
    for d in 0..100 {
        for f in 0..20 {
            let p = dirs.join(format!("d{d:03}"));
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join(format!("e{f:02}")), b"").unwrap();
        }
    }
    let img = mkfs(&dir, &K1);
    match populate(&img, "/", &dirs, PopulateOptions::default()) {
        Err(Ext4Error::PopulateNoSpace {
            blocks_needed,
            inodes_needed,
            ..
        }) => assert_eq!((blocks_needed, inodes_needed), (102, 2100)),
        other => panic!("dirs: {other:?}"),
    }
}

/// A directory of the source onto a directory of the image takes the
/// source's xattrs and ACLs too, as `cp -a` (and tar) do: `Meta`'s xattrs
/// are part of the metadata a directory onto a directory sets. Kept
/// instead, an access ACL of the old directory disagrees with the new
/// mode's group bits (the ACL's mask).
#[test]
fn a_merged_directory_takes_the_sources_xattrs_and_acls() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-merge-xattr");
    let src1 = dir.path("src1");
    fs::create_dir_all(src1.join("d")).unwrap();
    let acl = Command::new("setfacl")
        .args(["-m", "u:1234:rwx"])
        .arg(src1.join("d"))
        .status();
    if !acl.is_ok_and(|s| s.success()) {
        println!("skipping: no setfacl");
        return;
    }
    let img = mkfs_d(&dir, "merge.img", P1K.args, &src1, P1K.size);
    let src2 = dir.path("src2");
    fs::create_dir_all(src2.join("d")).unwrap();
    gen_tree::set_xattr(&src2.join("d"), "user.merged", b"from src2");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(src2.join("d"), fs::Permissions::from_mode(0o750)).unwrap();
    populate(&img, "/", &src2, PopulateOptions::default()).unwrap();
    let expected = dir.path("expected");
    cp_a(&src1, &expected);
    cp_a(&src2, &expected);
    let c = Compare {
        top: false,
        ..Compare::default()
    };
    if let Some(d) = kernel_diff(&img, &dir.path("mnt"), &expected, c) {
        assert_no_diff(&d, "merged onto /d");
    }
}

/// The clamp makes atimes and ctimes the mtimes: reading the source (a
/// populate does) moves its atimes, and the images are compared whole.
const CLAMPED: PopulateOptions = PopulateOptions {
    owner: None,
    clamp: Some(CLAMP),
};

/// Runs a populate of `src` into a copy of `base` on a faulty device,
/// `arm` setting the fault after the open; returns the populate's result.
fn faulty_populate(
    base: &Path,
    dir: &TempDir,
    src: &Path,
    arm: impl FnOnce(&spacekit_testkit::faults::Faults),
) -> (PathBuf, Result<PopulateReport, Ext4Error>) {
    let p = copy(base, dir, "faulty.img");
    let (mut img, faults) = open_faulty(&p);
    arm(&faults);
    let mut added = false;
    let r = (|| {
        let mut pop = Populate::new(&mut img, "/", CLAMPED)?;
        pop.add_dir(src)?;
        added = true;
        pop.finish()
    })();
    if r.is_err() && !added {
        // Refused before its flush, the populate is rolled back: the
        // image's next flush (a program goes on) writes nothing of it.
        faults.fail_write_after(usize::MAX);
        faults.fail_read_at(None);
        img.flush().unwrap();
    }
    drop(img); // the crash: nothing more is written
    (p, r)
}

/// After a failed populate: a read-write open replays or drops the redo
/// log; the image is e2fsck-clean and reads as before or as after.
/// Returns whether it is after.
fn before_or_after(p: &Path, before: &Walk, after: &Walk, what: &str) -> bool {
    let mut img = open_rw(p);
    assert!(!Image::redo_log_path(p).exists(), "{what}: log left");
    assert_verify_clean(&img, what);
    let now = image_walk(&mut img).unwrap();
    drop(img);
    assert_fsck_clean(p, what);
    if &now == before {
        false
    } else if &now == after {
        true
    } else {
        let d: Vec<_> = now
            .iter()
            .filter(|(k, v)| after.get(*k) != Some(v))
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .take(10)
            .collect();
        let k = d[0].as_bytes();
        panic!(
            "{what}: neither before nor after; differs from after at {d:?}\nfirst:\n  now {:?}\nafter {:?}\nbefore {:?}",
            now.get(k),
            after.get(k),
            before.get(k)
        );
    }
}

/// A write failing at every step of a populate (its data writes, then the
/// flush: the redo log, its sync, each metadata block, the image's sync,
/// the log's removal), and reads failing on every block the populate
/// touches: afterwards the image is as before or wholly populated.
#[test]
fn faults_at_every_step_leave_the_image_before_or_after() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-faults");
    let src = dir.path("src");
    generate(&src, &Spec::small(71, 30));
    let base = mkfs(&dir, &K1);
    let before = walk(&base);
    let reference = copy(&base, &dir, "reference.img");
    populate(&reference, "/", &src, CLAMPED).unwrap();
    let after = walk(&reference);
    let after_bytes = bytes(&reference);
    // Write faults: every step.
    let (mut n, mut seen) = (0, [0usize; 2]);
    loop {
        let (p, r) = faulty_populate(&base, &dir, &src, |f| f.fail_write_after(n));
        let what = format!("write fault at step {n}");
        if r.is_ok() {
            assert!(
                bytes(&p) == after_bytes,
                "{what}: no fault hit, other bytes"
            );
            if !Image::redo_log_path(&p).exists() {
                break;
            }
            // The log's removal failed: the populate is complete (no error),
            // and the next open replays the log harmlessly.
            drop(Image::open(&p, OpenMode::ReadWrite).unwrap());
            assert!(!Image::redo_log_path(&p).exists(), "{what}");
            assert!(bytes(&p) == after_bytes, "{what}: the replay changed bytes");
            n += 1;
            continue;
        }
        assert!(matches!(r, Err(Ext4Error::Io { .. })), "{what}: {r:?}");
        let is_after = before_or_after(&p, &before, &after, &what);
        if is_after {
            assert!(bytes(&p) == after_bytes, "{what}: replayed to other bytes");
        }
        seen[usize::from(is_after)] += 1;
        n += 1;
    }
    println!(
        "populate write faults: {n} steps, {} before, {} after",
        seen[0], seen[1]
    );
    assert!(seen[0] > 10 && seen[1] > 0, "{seen:?}");
    // Read faults: each block in use before that the populate changed
    // (bitmaps, descriptors, inode tables, the root's directory block),
    // failing from the open on.
    let bs = 1024;
    let base_bytes = bytes(&base);
    let base_img = open_ro(&base);
    let touched: Vec<u64> = (0..base_bytes.len() / bs)
        .filter(|&b| base_bytes[b * bs..(b + 1) * bs] != after_bytes[b * bs..(b + 1) * bs])
        .map(|b| b as u64)
        .filter(|&b| base_img.block_in_use(b).unwrap())
        .collect();
    drop(base_img);
    let step = (touched.len() / 40).max(1);
    let mut failed = 0;
    for &b in touched.iter().step_by(step) {
        let (p, r) = faulty_populate(&base, &dir, &src, |f| f.fail_read_at(Some(b * bs as u64)));
        let what = format!("read fault at block {b}");
        let is_after = before_or_after(&p, &before, &after, &what);
        assert_eq!(is_after, r.is_ok(), "{what}: {r:?}");
        failed += usize::from(r.is_err());
    }
    println!(
        "populate read faults: {} of {} blocks read and failed",
        failed,
        touched.len().div_ceil(step)
    );
    assert!(failed > 0);
}

/// The blocks of every group's inode table in the image at `img`.
fn inode_table_blocks(img: &Path) -> Vec<std::ops::Range<u64>> {
    let image = open_ro(img);
    let info = image.info();
    let len = u64::from(info.inode_blocks_per_group);
    (0..info.group_count)
        .map(|g| {
            let t = image.group(g).unwrap().inode_table;
            t..t + len
        })
        .collect()
}

/// Write-behind (`Image::set_cache_budget`) with a budget of one block
/// sends every block the committed image cannot see to the device as soon
/// as an entry is done. A populate that is then dropped unfinished (as a
/// crash before its flush leaves the file) changed only blocks the image
/// does not look at: it reads as before, e2fsck-clean, and the changed
/// blocks in use are inode-table blocks (past the used inodes, with a
/// descriptor checksum; none without). A finished populate over that
/// same image (its new inodes land on the slots the dropped one wrote)
/// gives the bytes a populate that kept every block until the flush gives.
#[test]
fn write_behind_changes_neither_the_result_nor_what_the_committed_image_sees() {
    require_e2fsprogs!();
    let dir = TempDir::new("pop-behind");
    let src = dir.path("src");
    generate(&src, &Spec::small(29, 300));
    let opts = PopulateOptions {
        owner: None,
        clamp: Some(CLAMP),
    };
    for (cfg, csum) in [(P1K, true), (P1K_NOCSUM, false), (P4K_NOFLEX, true)] {
        let what = cfg.name;
        let kept = mkfs(
            &dir,
            &Config {
                name: "kept",
                ..cfg
            },
        );
        let behind = mkfs(
            &dir,
            &Config {
                name: "behind",
                ..cfg
            },
        );
        let (before, w) = (bytes(&behind), walk(&behind));
        {
            let mut image = open_rw(&behind);
            image.set_cache_budget(Some(1));
            let mut pop = Populate::new(&mut image, "/", opts).unwrap();
            pop.add_dir(&src).unwrap();
            // Dropped unfinished: rolled back, never flushed.
        }
        assert!(
            !Image::redo_log_path(&behind).exists(),
            "{what}: a redo log was left"
        );
        assert_fsck_clean(&behind, what);
        assert!(walk(&behind) == w, "{what}: the image reads otherwise");
        // The kernel sees the empty image mkfs made: only lost+found.
        let mnt = dir.path(&format!("mnt-{what}"));
        if let Some(_m) = Mount::new(&behind, &mnt) {
            let names: Vec<_> = fs::read_dir(&mnt)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["lost+found"], "{what}: the kernel reads");
        }
        let now = bytes(&behind);
        let image = open_ro(&behind);
        let bs = image.info().block_size as usize;
        let tables = inode_table_blocks(&behind);
        let (mut free, mut table) = (0, 0);
        for b in 0..before.len() / bs {
            if now[b * bs..(b + 1) * bs] == before[b * bs..(b + 1) * bs] {
                continue;
            }
            if tables.iter().any(|t| t.contains(&(b as u64))) {
                table += 1;
            } else {
                assert!(
                    !image.block_in_use(b as u64).unwrap(),
                    "{what}: block {b}, in use, was written"
                );
                free += 1;
            }
        }
        drop(image);
        // Directory blocks and file data went to free space; inode-table
        // blocks only where a descriptor checksum guards the watermark.
        assert!(free > 300, "{what}: {free} free blocks written");
        assert_eq!(
            table > 0,
            csum,
            "{what}: {table} inode-table blocks written"
        );
        {
            let mut image = open_rw(&behind);
            image.set_cache_budget(Some(1));
            let mut pop = Populate::new(&mut image, "/", opts).unwrap();
            pop.add_dir(&src).unwrap();
            pop.finish().unwrap();
        }
        {
            let mut image = open_rw(&kept);
            image.set_cache_budget(None);
            let mut pop = Populate::new(&mut image, "/", opts).unwrap();
            pop.add_dir(&src).unwrap();
            pop.finish().unwrap();
        }
        assert_fsck_clean(&behind, what);
        assert!(
            bytes(&kept) == bytes(&behind),
            "{what}: write-behind changed the image"
        );
        fs::remove_file(&kept).unwrap();
        fs::remove_file(&behind).unwrap();
    }
}

/// A flush that fails after writing its redo log leaves the log for the
/// next open, and the device may hold part of its records: write-behind
/// must not take the device's bitmaps and descriptors for the committed
/// image then. Here a flush fails at each of its write steps in turn, the
/// program goes on with a one-block cache budget (one more file in the
/// same directory: the same directory and inode-table blocks), and
/// crashes; the next open replays or drops the log, and the image is
/// e2fsck-clean and reads as before the first flush or as after it.
#[test]
fn write_behind_waits_for_a_flush_that_completes() {
    require_e2fsprogs!();
    let dir = TempDir::new("behind-log");
    let base = mkfs(&dir, &P1K);
    let made = |img: &mut Image| {
        img.mkdir("/d", 0o755).unwrap();
        for i in 0..40 {
            img.create(&format!("/d/f{i:02}"), 0o644).unwrap();
        }
    };
    // (The operations stamp the clock's time: names are compared, not
    // `image_walk`s.)
    let names: Vec<Vec<u8>> = (0..40).map(|i| format!("f{i:02}").into_bytes()).collect();
    let (mut failed_with_log, mut n) = (0, 0);
    loop {
        let p = copy(&base, &dir, "faulty.img");
        let (mut img, faults) = open_faulty(&p);
        img.set_cache_budget(None);
        made(&mut img);
        faults.fail_write_after(n);
        if img.flush().is_ok() {
            break;
        }
        if Image::redo_log_path(&p).exists() {
            failed_with_log += 1;
        }
        img.set_cache_budget(Some(1));
        img.create("/d/late", 0o644).unwrap();
        drop(img);
        let what = format!("flush failing at step {n}");
        let mut img = open_rw(&p);
        assert!(!Image::redo_log_path(&p).exists(), "{what}: log left");
        assert_verify_clean(&img, &what);
        match img.lookup("/d") {
            Err(Ext4Error::NotFound { .. }) => {}
            Ok(d) => {
                let mut got: Vec<Vec<u8>> = img
                    .read_dir(d)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.name)
                    .filter(|n| n != b"." && n != b"..")
                    .collect();
                got.sort();
                assert_eq!(got, names, "{what}");
            }
            Err(e) => panic!("{what}: {e}"),
        }
        drop(img);
        assert_fsck_clean(&p, &what);
        n += 1;
    }
    assert!(
        failed_with_log >= 3,
        "{failed_with_log} flushes failed with a log left"
    );
}

/// A populate that began with a free not yet flushed flushes before its
/// first file's data (the freed blocks may still be the committed
/// image's). A later replacement then frees blocks that flush committed:
/// the next data write must flush first again, not reuse them at once.
/// The image on disk shows that flush: the replaced symlink is gone there
/// before `finish`.
#[test]
fn a_replacement_after_a_flush_inside_the_populate_flushes_before_its_data() {
    use spacekit::ext4::{Contents, Entry, EntryKind, Meta};
    require_e2fsprogs!();
    let dir = TempDir::new("pop-replace-flushed");
    let img = mkfs(&dir, &K1);
    let mut image = open_rw(&img);
    let old = image.create("/old", 0o644).unwrap();
    image.write(old, 0, &[7u8; 5000]).unwrap();
    image.flush().unwrap();
    image.unlink("/old").unwrap();
    let meta = Meta {
        perm: 0o644,
        ..Meta::default()
    };
    let entry = |path: &[u8], kind: EntryKind<'static>| Entry {
        path: path.to_vec(),
        kind,
        meta: meta.clone(),
    };
    let mut pop = Populate::new(&mut image, "/", PopulateOptions::default()).unwrap();
    // A symlink in a block of its own, then a file with data (the flush
    // for the unlink before the populate commits both).
    pop.add(entry(b"s", EntryKind::Symlink(vec![b't'; 100])))
        .unwrap();
    pop.add(entry(b"f", EntryKind::File(Contents::Bytes(vec![1; 3000]))))
        .unwrap();
    // Whether the image on disk has /s as a symlink.
    let link_on_disk = || {
        let mut c = Image::open(&img, spacekit::ext4::OpenMode::ReadOnly).unwrap();
        c.lookup("/s")
            .ok()
            .is_some_and(|ino| c.read_link(ino).is_ok())
    };
    assert!(link_on_disk(), "the symlink is committed");
    pop.add(entry(b"s", EntryKind::File(Contents::Bytes(vec![2; 3000]))))
        .unwrap();
    // The flush before the new data committed the unlink (the new entry
    // is placed after its data).
    assert!(
        !link_on_disk(),
        "the new /s's data was written without a flush first"
    );
    let r = pop.finish().unwrap();
    assert_eq!(r.replaced, 1);
    drop(image);
    assert_fsck_clean(&img, "a replacement after a flush");
    assert_eq!(debugfs_dump(&img, &dir, "/s"), vec![2; 3000]);
}
