//! Making images and opening them: temporary directories, the e2fsprogs
//! tools (skipped with a notice when missing, required under CI), the
//! mkfs.ext4 configurations every test runs over, and small helpers for
//! editing images behind spacekit's back.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image, OpenMode, BG_BLOCK_UNINIT};
use spacekit::testing::Validate;
use spacekit_testkit::faults::{Faults, FaultyDevice};

pub const UUID: &str = "01234567-89ab-cdef-0123-456789abcdef";
pub const OTHER_UUID: &str = "fedcba98-7654-3210-fedc-ba9876543210";
pub const FAKE_TIME: &str = "1700000000";

pub const TOOLS: [&str; 5] = ["mkfs.ext4", "dumpe2fs", "debugfs", "e2fsck", "e2freefrag"];

pub use spacekit_testkit::e2fs::{tool, TempDir};

/// Returns from the test, with a notice, when e2fsprogs is missing.
macro_rules! require_e2fsprogs {
    () => {
        if !spacekit_testkit::e2fs::have_e2fsprogs(&$crate::fixtures::TOOLS) {
            return;
        }
    };
}

/// One kind of image: mkfs.ext4 arguments and size.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub name: &'static str,
    pub size: &'static str,
    pub args: &'static [&'static str],
}

/// 1 KiB blocks, 64bit, flex_bg, metadata_csum, 8 groups (the last one
/// partial), BLOCK_UNINIT groups with and without backups.
pub const K1: Config = Config {
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

/// 64 KiB blocks (the largest ext4 block size).
pub const K64: Config = Config {
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
};

/// 1 KiB blocks without metadata_csum.
/// 1 KiB blocks, 128-byte inodes: no `i_extra_isize` space (16-bit inode
/// checksums, no in-inode xattrs).
pub const K1_I128: Config = Config {
    name: "1k-i128",
    size: "8M",
    args: &[
        "-b",
        "1024",
        "-g",
        "1024",
        "-N",
        "256",
        "-I",
        "128",
        "-O",
        "^has_journal",
    ],
};

pub const K1_NOCSUM: Config = Config {
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
};

pub const CONFIGS: &[Config] = &[
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
    K1_NOCSUM,
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
    K64,
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

pub fn e2fs(name: &str) -> Command {
    let mut c = Command::new(tool(name));
    c.env("E2FSPROGS_FAKE_TIME", FAKE_TIME);
    c
}

pub fn mkfs_with_uuid(dir: &TempDir, cfg: &Config, uuid: &str) -> PathBuf {
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

pub fn mkfs(dir: &TempDir, cfg: &Config) -> PathBuf {
    mkfs_with_uuid(dir, cfg, UUID)
}

pub fn copy(from: &Path, dir: &TempDir, name: &str) -> PathBuf {
    let to = dir.path(name);
    fs::copy(from, &to).unwrap();
    to
}

pub fn open_rw(path: &Path) -> Image {
    Image::open(path, OpenMode::ReadWrite).unwrap()
}

/// Opens read-write on a [`FaultyDevice`]; the handle injects the faults.
pub fn open_faulty(path: &Path) -> (Image, Faults) {
    FaultyDevice::open_image(path, OpenMode::ReadWrite)
}

pub fn open_ro(path: &Path) -> Image {
    Image::open(path, OpenMode::ReadOnly).unwrap()
}

pub fn assert_verify_clean(img: &Image, what: &str) {
    let r = img.verify().unwrap();
    assert!(r.is_clean(), "{what}: verify: {:#?}", r.mismatches);
    img.validate().unwrap();
}

/// First group with BLOCK_UNINIT set, if any.
pub fn block_uninit_group(img: &Image) -> Option<u32> {
    (0..img.info().group_count).find(|&g| img.group(g).unwrap().flags & BG_BLOCK_UNINIT != 0)
}

/// A group with BLOCK_UNINIT set and no superblock backup (all of it free
/// but any other group's metadata).
pub fn block_uninit_group_without_backup(img: &Image) -> Option<u32> {
    (0..img.info().group_count).find(|&g| {
        let gi = img.group(g).unwrap();
        gi.flags & BG_BLOCK_UNINIT != 0 && !gi.has_super
    })
}

/// Little-endian fields, through the library's one raw on-disk module.
pub use spacekit::ext4::raw::{le32 as get_u32, put32 as put_u32};

/// Opens `path` in `mode`, expecting an error; the file's bytes and mtime
/// must not change.
pub fn open_err(path: &Path, mode: OpenMode) -> Ext4Error {
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

pub fn corrupt_field(e: &Ext4Error) -> (&'static str, Option<u32>) {
    match e {
        Ext4Error::Corrupt { field, group, .. } => (field, *group),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// Bytes from a small deterministic generator.
pub fn random_bytes(n: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A read-only loop mount of an image (`mount -o loop,ro`), unmounted on
/// drop: the kernel's read of what spacekit wrote.
pub(crate) struct Mount(PathBuf);

impl Mount {
    /// Mounts `img` on `mnt` (made if missing), or prints one line saying
    /// why not (not root, no loop device) and gives `None`.
    pub(crate) fn new(img: &Path, mnt: &Path) -> Option<Mount> {
        fs::create_dir_all(mnt).unwrap();
        let m = Command::new("mount")
            .args(["-o", "loop,ro"])
            .arg(img)
            .arg(mnt)
            .output();
        match m {
            Ok(o) if o.status.success() => Some(Mount(mnt.to_path_buf())),
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                println!(
                    "skipping the kernel's read of {}: mount: {}",
                    img.display(),
                    err.trim()
                );
                None
            }
            Err(e) => {
                println!("skipping the kernel's read: no mount: {e}");
                None
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A mount can be busy for a moment after its last reader (udev's
        // probe of the loop device); try again before calling it a failure.
        let mut um = Command::new("umount").arg(&self.0).status();
        for _ in 0..20 {
            if um.as_ref().is_ok_and(|s| s.success()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            um = Command::new("umount").arg(&self.0).status();
        }
        if !std::thread::panicking() {
            assert!(um.is_ok_and(|s| s.success()), "umount {}", self.0.display());
        }
    }
}
