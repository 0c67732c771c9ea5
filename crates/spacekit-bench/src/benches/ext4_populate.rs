//! `bench ext4-populate`: building a host tree into an ext4 image, as a
//! user builds a root file system: `mkfs.ext4` then
//! `spacekit ext4 populate`, against `mke2fs -d`, `genext2fs` and the
//! host copying the same tree to memory (`limit`), in one run.
//!
//! The trees:
//! * `small-files` (every mode): a generated tree shaped like
//!   `/usr/share` (measured on our machines: 699 MB, 44,904 files, 3,366
//!   directories, 3,936 symlinks): about 13 files per directory, most
//!   directories holding a few entries and a few holding thousands (20%,
//!   5% and 3% of the files), up to 8 levels deep; file sizes log-normal
//!   around 1.4 KB (from empty to a few MiB, 90% under about 16 KB), a few
//!   executables, one symlink per 11 files (relative, sibling or absolute
//!   targets, some over 60 bytes), one hard link per 1,000 files, and
//!   nanosecond mtimes. 10,000 files (400 with `--quick`); every name,
//!   size, byte and time comes from the run's seed.
//! * `usr-share` (`--full`): `/usr/share` itself when it is there,
//!   otherwise `generated-100k`, the same generator at 100,000 files.
//!
//! Each tree goes into an image of one size for every variant (4 KiB
//! blocks; one and a half times the blocks its files, directories and
//! long symlinks take, plus 64 MiB) with room for one and a half times
//! its inodes. The variants, each a chain of whole processes timed from
//! the first spawn to the last exit, the image in the scratch directory
//! (the temporary directory: where a user's image would be):
//! * `spacekit`: `mkfs.ext4 -q -F -b 4096 -N INODES IMG BLOCKS`, then
//!   `spacekit ext4 populate IMG --from TREE -q` (the running `spacekit`
//!   binary; run from another binary, such as the test harness, the same
//!   library calls run in-process and the rows say `"run": "in-process"`).
//!   Populate is one transaction with one flush (it fsyncs the image);
//! * `mke2fs-d`: `mkfs.ext4 -q -F -b 4096 -N INODES -d TREE IMG BLOCKS`,
//!   the same mkfs options (mke2fs fsyncs the image when it closes it);
//! * `genext2fs`: `genext2fs -B 4096 -b BLOCKS -N INODES -d TREE IMG`, as
//!   its documentation builds a tree (ext2, no journal; it keeps the
//!   source's owners, and does not fsync);
//! * `limit`: `cp -a TREE DIR` with DIR on a tmpfs (`/dev/shm`): the
//!   tree's bytes copied with no file system to build, removed after.
//!
//! Correctness before time: each variant's result is built once and must
//! pass `e2fsck -fn` (every image, genext2fs's ext2 included) and the
//! extraction compare: the image is loop-mounted read-only
//! (`mount -o loop,ro`) and compared with the source by
//! `spacekit_testkit::tree::diff` (type, permission bits, owner, link
//! count, size, contents, mtime, symlink target, device numbers, xattrs).
//! spacekit's image and the copy must match to the nanosecond, the top
//! directory's own attributes included; `mke2fs -d` and genext2fs keep
//! whole seconds and give the top directory mkfs's defaults, so theirs are
//! compared in seconds and below the top. Where mounting is not allowed the
//! image is read back with `debugfs -R "rdump / DIR"` instead (no owners,
//! setuid bits, device nodes or nanoseconds). A variant that fails either
//! check fails the benchmark (no JSON).
//!
//! Timing: [`REPS`] rounds (5 on the small-file tree with `--full`), each
//! running every variant once in turn (spacekit, mke2fs-d, genext2fs,
//! limit) after an untimed setup (the last image or copy removed, then
//! `sync -f`); the median is reported. Page caches are not dropped: the
//! source tree is warm for every variant. The peak memory (`ru_maxrss` of
//! `wait4`) of every process is kept; spacekit's is its populate process's
//! own, which it reports (`peak_rss_bytes` of `--json`, `VmHWM`).
//! Linux counts the spawning process's own peak in a child's `ru_maxrss`,
//! so a figure at or below the benchmark process's own peak is only an
//! upper bound (`peak_rss_exact: false`, `<=` in the table).
//!
//! JSON rows: cases `small-files` and (`--full`) `usr-share` or
//! `generated-100k`; variants `spacekit`, `mke2fs-d`, `genext2fs`, `limit`;
//! fields `source` (`generated` or the directory), `files`, `dirs`,
//! `symlinks`, `hard_links`, `bytes` (the files' bytes, each inode once),
//! `image_bytes`, `inodes`, `block_size` (4096), `run` (`process` or
//! `in-process`), `reps`, `median_ns`, `gbps` (`bytes` per second) and
//! `peak_rss_bytes` (the largest process of the variant; `null` for
//! spacekit in-process) and `peak_rss_exact`.
//!
//! Bars: on the small-file tree, spacekit at least 5x faster than
//! `mke2fs -d` and 3x faster than genext2fs; on `/usr/share` at least 2x
//! faster than `mke2fs -d`; within 3x of the `cp -a` limit; spacekit's
//! peak memory below 10% of the tree's bytes.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit_testkit::tree::{diff, Compare};

use super::procs::{
    e2fsck, io_err, need, populate_in_process, random_bytes, run_cmd, run_peak, settle, skipped,
    time_rounds, Ext4Tools, Job, Peak, Scratch,
};
use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{fmt_ns, median, progress, verify, Bars, Report, Row, Table};

const NAME: &str = "ext4-populate";

/// Timed rounds of every variant.
const REPS: usize = 3;

/// The images' block size.
const BLOCK: u64 = 4096;

/// `/usr/share` as measured on our machines: files and directories
/// (directories per file) and symlinks per file.
const FILES_PER_DIR: f64 = 44_904.0 / 3_366.0;
const SYMLINKS_PER_FILE: f64 = 3_936.0 / 44_904.0;

/// The large directories' shares of the files.
const BIG_DIRS: [f64; 3] = [0.20, 0.05, 0.03];

/// Deepest directory level below the top.
const MAX_DEPTH: usize = 8;

/// The largest generated file.
const MAX_FILE: u64 = 8 << 20;

/// The case of the generated small-file tree.
const SMALL: &str = "small-files";

/// One entry of a generated tree besides its directories.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A regular file of `len` pseudo-random bytes (none zero).
    File { len: u64, exec: bool },
    /// A symlink to this target.
    Symlink(String),
    /// Another name for entry `i` (a file).
    HardLink(usize),
}

/// A directory of a generated tree (index 0 is the top).
#[derive(Clone, Debug, PartialEq, Eq)]
struct DirSpec {
    parent: usize,
    name: String,
    /// mtime: seconds, nanoseconds.
    mtime: (i64, i64),
}

/// A file, symlink or hard link of a generated tree.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EntrySpec {
    dir: usize,
    name: String,
    mtime: (i64, i64),
    kind: Kind,
}

/// A generated tree: what [`TreeSpec::write`] makes, all from one seed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TreeSpec {
    seed: u64,
    dirs: Vec<DirSpec>,
    entries: Vec<EntrySpec>,
}

/// A standard normal deviate (Box-Muller).
fn normal(rng: &mut SmallRng) -> f64 {
    let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let v: f64 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A file-name-like name, unique by its serial number.
fn gen_name(rng: &mut SmallRng, serial: usize, ext: bool) -> String {
    const PARTS: [&str; 24] = [
        "lib", "doc", "man", "icon", "font", "data", "gtk", "utf", "share", "locale", "ka", "li",
        "mo", "nu", "pe", "ra", "si", "to", "vu", "xe", "zo", "base", "theme", "x11",
    ];
    const SEPS: [&str; 3] = ["", "-", "_"];
    const EXTS: [&str; 12] = [
        ".txt", ".gz", ".html", ".png", ".svg", ".mo", ".py", ".xml", ".json", ".conf", ".h", "",
    ];
    let mut s = String::new();
    for i in 0..rng.random_range(1..=3) {
        if i > 0 {
            s.push_str(SEPS[rng.random_range(0..SEPS.len())]);
        }
        s.push_str(PARTS[rng.random_range(0..PARTS.len())]);
    }
    s.push_str(&format!("{serial:x}"));
    if ext {
        s.push_str(EXTS[rng.random_range(0..EXTS.len())]);
    }
    s
}

/// A time in the last few years, to the nanosecond.
fn gen_time(rng: &mut SmallRng) -> (i64, i64) {
    (
        1_600_000_000 + rng.random_range(0..100_000_000),
        rng.random_range(0..1_000_000_000),
    )
}

/// Picks an index by weight (`cum` holds the running sums).
fn pick(rng: &mut SmallRng, cum: &[f64]) -> usize {
    let total = cum.last().copied().unwrap_or(0.0);
    let x = rng.random_range(0.0..total.max(f64::MIN_POSITIVE));
    cum.partition_point(|&c| c <= x).min(cum.len() - 1)
}

impl TreeSpec {
    /// A tree of about `files` files shaped like `/usr/share`, all from
    /// `seed`.
    fn generate(seed: u64, files: usize) -> TreeSpec {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x7EE5_0000);
        let mut serial = 0usize;
        let mut next = |rng: &mut SmallRng, ext: bool| {
            serial += 1;
            gen_name(rng, serial, ext)
        };
        let ndirs = ((files as f64 / FILES_PER_DIR).round() as usize).max(BIG_DIRS.len() + 2);
        let mut dirs = vec![DirSpec {
            parent: 0,
            name: String::new(),
            mtime: gen_time(&mut rng),
        }];
        let mut depth = vec![0usize];
        for i in 1..ndirs {
            // A random earlier directory, moved up now and then: most
            // directories sit a few levels down.
            let mut p = rng.random_range(0..i);
            while depth[p] >= MAX_DEPTH || (p != 0 && rng.random_bool(0.35)) {
                p = dirs[p].parent;
            }
            depth.push(depth[p] + 1);
            let name = next(&mut rng, false);
            dirs.push(DirSpec {
                parent: p,
                name,
                mtime: gen_time(&mut rng),
            });
        }
        // Directory weights: log-normal, so most hold a few entries; the
        // big ones take fixed shares of the files.
        let mut big = Vec::new();
        while big.len() < BIG_DIRS.len() {
            let d = rng.random_range(1..ndirs);
            if !big.contains(&d) {
                big.push(d);
            }
        }
        let mut cum = Vec::with_capacity(ndirs);
        let mut sum = 0.0;
        for d in 0..ndirs {
            if !big.contains(&d) {
                sum += (1.4 * normal(&mut rng)).exp();
            }
            cum.push(sum);
        }
        let nbig: Vec<usize> = BIG_DIRS
            .iter()
            .map(|s| (s * files as f64).round() as usize)
            .collect();
        let mut entries = Vec::with_capacity(files + files / 8);
        let mut file_ix = Vec::with_capacity(files);
        for i in 0..files {
            let mut dir = pick(&mut rng, &cum);
            let mut start = 0;
            for (b, n) in big.iter().zip(&nbig) {
                if (start..start + n).contains(&i) {
                    dir = *b;
                }
                start += n;
            }
            // Sizes: log-normal around 1.4 KB, one in 1,000 empty and one
            // in 2,000 a large file of 1 to 8 MiB.
            let len = if rng.random_bool(0.001) {
                0
            } else if rng.random_bool(0.0005) {
                rng.random_range(1 << 20..=MAX_FILE)
            } else {
                ((7.25 + 1.9 * normal(&mut rng)).exp() as u64).clamp(1, MAX_FILE)
            };
            let exec = rng.random_bool(0.004);
            let name = next(&mut rng, true);
            file_ix.push(entries.len());
            entries.push(EntrySpec {
                dir,
                name,
                mtime: gen_time(&mut rng),
                kind: Kind::File { len, exec },
            });
        }
        let spec = TreeSpec {
            seed,
            dirs,
            entries,
        };
        let nlinks = (files as f64 * SYMLINKS_PER_FILE).round() as usize;
        let mut links = Vec::with_capacity(nlinks);
        for _ in 0..nlinks {
            let dir = pick(&mut rng, &cum);
            let to = &spec.entries[file_ix[rng.random_range(0..file_ix.len())]];
            let target = match rng.random_range(0..20) {
                // An absolute path, as if the tree were /usr/share.
                0..=2 => format!("/usr/share/{}", spec.path_of(to)),
                // A sibling's name (dangling unless it is one).
                3..=7 => next(&mut rng, true),
                _ => spec.relative(dir, to),
            };
            let name = next(&mut rng, false);
            links.push(EntrySpec {
                dir,
                name,
                mtime: gen_time(&mut rng),
                kind: Kind::Symlink(target),
            });
        }
        let mut spec = spec;
        spec.entries.extend(links);
        for _ in 0..files / 1000 + usize::from(files >= 100) {
            let of = file_ix[rng.random_range(0..file_ix.len())];
            let dir = pick(&mut rng, &cum);
            let name = next(&mut rng, true);
            spec.entries.push(EntrySpec {
                dir,
                name,
                mtime: (0, 0),
                kind: Kind::HardLink(of),
            });
        }
        spec
    }

    /// The path of directory `d` below the top (`""` for the top).
    fn dir_path(&self, d: usize) -> String {
        let mut parts = Vec::new();
        let mut at = d;
        while at != 0 {
            parts.push(self.dirs[at].name.as_str());
            at = self.dirs[at].parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// The path of `e` below the top.
    fn path_of(&self, e: &EntrySpec) -> String {
        let d = self.dir_path(e.dir);
        if d.is_empty() {
            e.name.clone()
        } else {
            format!("{d}/{}", e.name)
        }
    }

    /// The directories from the top down to `d` (the top first).
    fn chain(&self, d: usize) -> Vec<usize> {
        let mut c = vec![d];
        while let Some(&last) = c.last().filter(|&&x| x != 0) {
            c.push(self.dirs[last].parent);
        }
        c.reverse();
        c
    }

    /// The relative path from directory `from` to `to`.
    fn relative(&self, from: usize, to: &EntrySpec) -> String {
        let (a, b) = (self.chain(from), self.chain(to.dir));
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let mut parts: Vec<&str> = vec![".."; a.len() - common];
        parts.extend(b[common..].iter().map(|&d| self.dirs[d].name.as_str()));
        parts.push(&to.name);
        parts.join("/")
    }

    /// Makes the tree under `root` (which must not exist): directories,
    /// files, symlinks, hard links, then every time, directories last.
    fn write(&self, root: &Path) -> Result<(), BenchError> {
        let paths: Vec<PathBuf> = (0..self.dirs.len())
            .map(|d| root.join(self.dir_path(d)))
            .collect();
        for p in &paths {
            fs::create_dir(p).map_err(io_err(p))?;
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).map_err(io_err(p))?;
        }
        let mut buf = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let p = paths[e.dir].join(&e.name);
            match &e.kind {
                Kind::File { len, exec } => {
                    let mut rng = SmallRng::seed_from_u64(
                        self.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    buf.resize(*len as usize, 0);
                    random_bytes(&mut rng, &mut buf);
                    fs::write(&p, &buf).map_err(io_err(&p))?;
                    let mode = if *exec { 0o755 } else { 0o644 };
                    fs::set_permissions(&p, fs::Permissions::from_mode(mode))
                        .map_err(io_err(&p))?;
                }
                Kind::Symlink(t) => std::os::unix::fs::symlink(t, &p).map_err(io_err(&p))?,
                Kind::HardLink(of) => {
                    let src = paths[self.entries[*of].dir].join(&self.entries[*of].name);
                    fs::hard_link(&src, &p).map_err(io_err(&p))?;
                }
            }
        }
        for e in &self.entries {
            if !matches!(e.kind, Kind::HardLink(_)) {
                set_time(&paths[e.dir].join(&e.name), e.mtime)?;
            }
        }
        for (d, p) in self.dirs.iter().zip(&paths).rev() {
            set_time(p, d.mtime)?;
        }
        Ok(())
    }
}

/// Sets the atime and mtime of `p` (not following a symlink).
fn set_time(p: &Path, (sec, nsec): (i64, i64)) -> Result<(), BenchError> {
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|e| BenchError(format!("{}: {e}", p.display())))?;
    let t = libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    let times = [t, t];
    // SAFETY: `c` is a NUL-terminated path and `times` two valid
    // timespecs, both live for the call.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io_err(p)(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// What a host tree holds, as the image sizes and the rows need it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stats {
    files: u64,
    /// Directories, the top included.
    dirs: u64,
    symlinks: u64,
    /// Names of a file beyond its first.
    hard_links: u64,
    /// Devices, FIFOs and sockets.
    nodes: u64,
    /// The files' bytes, each inode once.
    bytes: u64,
    /// Blocks the tree needs: each file's rounded up, a block per
    /// directory and per symlink too long to sit in its inode.
    blocks: u64,
}

impl Stats {
    /// Walks `root` (not following symlinks).
    fn of(root: &Path) -> Result<Stats, BenchError> {
        let mut s = Stats::default();
        let mut seen = HashSet::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(p) = stack.pop() {
            let st = fs::symlink_metadata(&p).map_err(io_err(&p))?;
            let ft = st.file_type();
            if ft.is_dir() {
                s.dirs += 1;
                s.blocks += 1;
                for e in fs::read_dir(&p).map_err(io_err(&p))? {
                    stack.push(e.map_err(io_err(&p))?.path());
                }
            } else if ft.is_symlink() {
                s.symlinks += 1;
                s.blocks += u64::from(st.len() >= 60);
            } else if ft.is_file() {
                if st.nlink() > 1 && !seen.insert((st.dev(), st.ino())) {
                    s.hard_links += 1;
                    continue;
                }
                s.files += 1;
                s.bytes += st.len();
                s.blocks += st.len().div_ceil(BLOCK);
            } else {
                s.nodes += 1;
            }
        }
        Ok(s)
    }

    /// Inodes the tree takes.
    fn inodes_used(&self) -> u64 {
        self.files + self.dirs + self.symlinks + self.nodes
    }

    /// The image for it: (blocks of [`BLOCK`], inodes), the same for every
    /// variant.
    fn geometry(&self) -> (u64, u64) {
        let blocks = (self.blocks * 3 / 2 + (64 << 20) / BLOCK).next_multiple_of(1024);
        let inodes = (self.inodes_used() * 3 / 2 + 1024).next_multiple_of(1024);
        (blocks, inodes)
    }
}

/// The programs the benchmark runs.
struct Tools {
    /// e2fsprogs, `cp`, `sync`, `spacekit`.
    ext4: Ext4Tools,
    genext2fs: PathBuf,
    mount: PathBuf,
    umount: PathBuf,
}

impl Tools {
    /// The tools, or the name of the first one missing.
    fn find() -> Result<Tools, &'static str> {
        Ok(Tools {
            ext4: Ext4Tools::find()?,
            genext2fs: need("genext2fs")?,
            mount: need("mount")?,
            umount: need("umount")?,
        })
    }

    /// `mkfs.ext4` with the options both ext4 variants use.
    fn mkfs_cmd(&self, img: &Path, (blocks, inodes): (u64, u64), from: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.ext4.mkfs);
        cmd.args([
            "-q",
            "-F",
            "-b",
            &BLOCK.to_string(),
            "-N",
            &inodes.to_string(),
        ]);
        if let Some(d) = from {
            cmd.arg("-d").arg(d);
        }
        cmd.arg(img).arg(blocks.to_string());
        cmd
    }

    /// The `spacekit` variant: mkfs, then populate. Returns the populate's
    /// time and peak memory (`None` in-process).
    fn spacekit(
        &self,
        img: &Path,
        geo: (u64, u64),
        tree: &Path,
    ) -> Result<(f64, Option<Peak>), BenchError> {
        run_cmd(&mut self.mkfs_cmd(img, geo, None), "mkfs.ext4")?;
        let t = Instant::now();
        let peak = match &self.ext4.spacekit {
            Some(bin) => {
                // Its own peak, as it reports it (`VmHWM`): `wait4`'s
                // would count this process's peak in (see `Peak`).
                let mut cmd = Command::new(bin);
                cmd.args(["ext4", "populate"])
                    .arg(img)
                    .arg("--from")
                    .arg(tree)
                    .args(["-q", "--json"]);
                let out = run_cmd(&mut cmd, "spacekit ext4 populate")?;
                let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .map_err(|e| BenchError(format!("spacekit ext4 populate --json: {e}")))?;
                let peak = v["peak_rss_bytes"].as_u64().ok_or_else(|| {
                    BenchError("spacekit ext4 populate --json: no peak_rss_bytes".into())
                })?;
                Some(Peak {
                    bytes: peak,
                    exact: true,
                })
            }
            None => {
                populate_in_process(img, tree)?;
                None
            }
        };
        Ok((t.elapsed().as_nanos() as f64, peak))
    }

    fn mke2fs_d(&self, img: &Path, geo: (u64, u64), tree: &Path) -> Result<Peak, BenchError> {
        run_peak(&mut self.mkfs_cmd(img, geo, Some(tree)), "mkfs.ext4 -d")
    }

    fn genext2fs(
        &self,
        img: &Path,
        (blocks, inodes): (u64, u64),
        tree: &Path,
    ) -> Result<Peak, BenchError> {
        let mut cmd = Command::new(&self.genext2fs);
        cmd.args(["-B", &BLOCK.to_string(), "-b", &blocks.to_string()])
            .args(["-N", &inodes.to_string(), "-d"])
            .arg(tree)
            .arg(img);
        run_peak(&mut cmd, "genext2fs")
    }

    fn copy(&self, tree: &Path, dst: &Path) -> Result<Peak, BenchError> {
        run_peak(
            Command::new(&self.ext4.cp).arg("-a").arg(tree).arg(dst),
            "cp -a",
        )
    }
}

/// What one variant built, as the checks read it back.
#[derive(Debug, PartialEq)]
struct Check {
    /// `e2fsck -fn`'s exit code (0 for the copy, which is no image).
    e2fsck_exit: i32,
    /// How the tree was read back (`mount` or `rdump`).
    read_by: &'static str,
    /// Entries that differ from the source.
    differences: usize,
    /// The first few of them.
    first: Vec<String>,
}

/// How images are read back: a read-only loop mount, or (where mounting is
/// not allowed) `debugfs rdump`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extract {
    Mount,
    Rdump,
}

/// A loop mount, unmounted when dropped.
struct Mounted<'a>(&'a Tools, &'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = Command::new(&self.0.umount).arg(self.1).output();
    }
}

/// Compares `got` with the source `tree`.
fn compare(tree: &Path, got: &Path, c: Compare) -> Result<(usize, Vec<String>), BenchError> {
    let d = diff(tree, got, c).map_err(|e| {
        BenchError(format!(
            "comparing {} with {}: {e}",
            got.display(),
            tree.display()
        ))
    })?;
    Ok((d.len(), d.into_iter().take(3).collect()))
}

/// Checks image `img` against `tree`: e2fsck, then the extraction compare
/// (`exact`: to the nanosecond, the top directory included).
fn check_image(
    t: &Tools,
    img: &Path,
    tree: &Path,
    scratch: &Path,
    how: Extract,
    exact: bool,
) -> Result<Check, BenchError> {
    let e2fsck_exit = e2fsck(&t.ext4.e2fsck, img)?;
    let out = scratch.join("extract");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(io_err(&out))?;
    let (differences, first) = match how {
        Extract::Mount => {
            run_cmd(
                Command::new(&t.mount)
                    .args(["-o", "loop,ro"])
                    .arg(img)
                    .arg(&out),
                "mount -o loop,ro",
            )?;
            let _m = Mounted(t, &out);
            compare(
                tree,
                &out,
                Compare {
                    nanos: exact,
                    top: exact,
                    ..Compare::default()
                },
            )?
        }
        Extract::Rdump => {
            let mut cmd = Command::new(&t.ext4.debugfs);
            cmd.arg("-R")
                .arg(format!("rdump / {}", out.display()))
                .arg(img);
            run_cmd(&mut cmd, "debugfs rdump")?;
            compare(
                tree,
                &out,
                Compare {
                    nanos: false,
                    owners: false,
                    top: false,
                    special: false,
                    ..Compare::default()
                },
            )?
        }
    };
    let _ = fs::remove_dir_all(&out);
    Ok(Check {
        e2fsck_exit,
        read_by: match how {
            Extract::Mount => "mount",
            Extract::Rdump => "rdump",
        },
        differences,
        first,
    })
}

/// Whether images can be loop-mounted here: tries it on `img`.
fn can_mount(t: &Tools, img: &Path, scratch: &Path) -> bool {
    let dir = scratch.join("probe");
    let _ = fs::create_dir_all(&dir);
    let ok = Command::new(&t.mount)
        .args(["-o", "loop,ro"])
        .arg(img)
        .arg(&dir)
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        drop(Mounted(t, &dir));
    }
    let _ = fs::remove_dir(&dir);
    ok
}

/// One tree to run: its case name, where it is, and whether it was
/// generated (and is removed after).
struct Case {
    name: &'static str,
    source: String,
    tree: PathBuf,
    reps: usize,
}

/// How much work a mode does: the generated small-file tree's files and
/// the rounds, and the large case (`--full`).
fn small_files(mode: Mode) -> usize {
    match mode {
        Mode::Quick => 400,
        Mode::Default | Mode::Full => 10_000,
    }
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let tools = match Tools::find() {
        Ok(t) => t,
        Err(missing) => return Ok(skipped(NAME, missing)),
    };
    let mut report = Report::default();
    let scratch = Scratch::new(NAME, ctx.seed)?;
    // The limit's copies go to a tmpfs: memory, no file system to build.
    let shm = Path::new("/dev/shm");
    let copy_root = if shm.is_dir() {
        Scratch(shm.join(format!(
            "spacekit-bench-{NAME}-{}-{}",
            std::process::id(),
            ctx.seed
        )))
    } else {
        Scratch(scratch.0.join("copies"))
    };
    fs::create_dir_all(&copy_root.0).map_err(io_err(&copy_root.0))?;

    let mut cases = vec![Case {
        name: SMALL,
        source: "generated".into(),
        tree: scratch.0.join("small-files"),
        reps: if ctx.mode == Mode::Full { 5 } else { REPS },
    }];
    let n = small_files(ctx.mode);
    progress(NAME, &format!("{SMALL}: generating a {n}-file tree"));
    TreeSpec::generate(ctx.seed, n).write(&cases[0].tree)?;
    if ctx.mode == Mode::Full {
        let usr = Path::new("/usr/share");
        if usr.is_dir() {
            cases.push(Case {
                name: "usr-share",
                source: usr.display().to_string(),
                tree: usr.to_path_buf(),
                reps: REPS,
            });
        } else {
            let tree = scratch.0.join("generated-100k");
            progress(NAME, "no /usr/share: generating a 100,000-file tree");
            TreeSpec::generate(ctx.seed, 100_000).write(&tree)?;
            cases.push(Case {
                name: "generated-100k",
                source: "generated".into(),
                tree,
                reps: REPS,
            });
        }
    }

    let mut bars = Bars::new(NAME);
    let mut table = Table::new(
        "a host tree into a fresh 4 KiB-block image (or a tmpfs copy): whole-process medians; spacekit = mkfs.ext4 + spacekit ext4 populate",
        &["case", "files", "bytes", "spacekit", "(populate)", "mke2fs-d", "genext2fs", "limit", "mke2fs-d/sk", "genext2fs/sk", "sk/limit", "sk peak MB"],
    );
    let mut extract = None;
    for case in &cases {
        one_case(
            &tools,
            case,
            &scratch.0,
            &copy_root.0,
            &mut extract,
            &mut report,
            &mut table,
            &mut bars,
        )?;
    }
    report.table(table);
    report.bars(bars);
    if !cases.iter().any(|c| c.name == "usr-share") {
        report.note(
            "the /usr/share bar (2x mke2fs -d) is checked with --full on a machine with /usr/share"
                .into(),
        );
    }
    report.note(format!(
        "whole-process times (spawn to exit), spacekit, mke2fs-d, genext2fs and limit in turn after an untimed sync -f; images in {}, the limit's copy on {}; mkfs.ext4 defaults (journal included) for both ext4 variants; genext2fs writes ext2 and does not fsync; spacekit {}; images read back by {}",
        std::env::temp_dir().display(),
        copy_root.0.parent().unwrap_or(&copy_root.0).display(),
        if tools.ext4.spacekit.is_some() { "is the spacekit binary run as a process" } else { "runs in-process (not run from the spacekit binary)" },
        match extract {
            Some(Extract::Rdump) => "debugfs rdump (mounting is not allowed here)",
            _ => "a read-only loop mount",
        },
    ));
    let chart = Chart::new(
        "ext4-populate: time per tree (whole processes)",
        "case",
        "median time (ns, log)",
        XAxis::Categories(cases.iter().map(|c| c.name.to_string()).collect()),
        true,
    )
    .from_rows(&report.rows, "case", "median_ns");
    report.chart(chart);
    Ok(report)
}

/// One tree: verify every variant, then time them.
#[allow(clippy::too_many_arguments)]
fn one_case(
    t: &Tools,
    case: &Case,
    dir: &Path,
    copies: &Path,
    extract: &mut Option<Extract>,
    report: &mut Report,
    table: &mut Table,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let tree = &case.tree;
    let stats = Stats::of(tree)?;
    let geo = stats.geometry();
    let image_bytes = geo.0 * BLOCK;
    let img_sk = dir.join(format!("{}-spacekit.img", case.name));
    let img_mk = dir.join(format!("{}-mke2fs-d.img", case.name));
    let img_ge = dir.join(format!("{}-genext2fs.img", case.name));
    let copy = copies.join(case.name);
    let what = format!(
        "{}: {} files, {} directories, {} symlinks, {} hard links, {} bytes",
        case.name, stats.files, stats.dirs, stats.symlinks, stats.hard_links, stats.bytes
    );
    progress(
        NAME,
        &format!(
            "{what}; image {} MiB, {} inodes; verifying",
            image_bytes >> 20,
            geo.1
        ),
    );

    // Correctness first: each variant once, checked.
    let peaks = RefCell::new(vec![Peak::default(); 4]);
    let keep = |i: usize, p: Peak| {
        let mut v = peaks.borrow_mut();
        v[i] = v[i].max(p);
    };
    let pop_ns = RefCell::new(Vec::new());
    let (_, sk_peak) = t.spacekit(&img_sk, geo, tree)?;
    keep(0, sk_peak.unwrap_or_default());
    keep(1, t.mke2fs_d(&img_mk, geo, tree)?);
    keep(2, t.genext2fs(&img_ge, geo, tree)?);
    keep(3, t.copy(tree, &copy)?);
    let how = *extract.get_or_insert_with(|| {
        if can_mount(t, &img_sk, dir) {
            Extract::Mount
        } else {
            progress(
                NAME,
                "mount -o loop is not allowed here: reading images back with debugfs rdump",
            );
            Extract::Rdump
        }
    });
    let expected = |read_by| Check {
        e2fsck_exit: 0,
        read_by,
        differences: 0,
        first: Vec::new(),
    };
    let read_by = if how == Extract::Mount {
        "mount"
    } else {
        "rdump"
    };
    let (diffs, first) = compare(tree, &copy, Compare::default())?;
    verify(
        &format!("{what}: each variant's result read back and compared with the source (e2fsck -fn, then every entry)"),
        &[
            ("expected", expected(read_by)),
            ("spacekit", check_image(t, &img_sk, tree, dir, how, how == Extract::Mount)?),
            ("mke2fs-d", check_image(t, &img_mk, tree, dir, how, false)?),
            ("genext2fs", check_image(t, &img_ge, tree, dir, how, false)?),
            (
                "limit (cp -a)",
                Check {
                    e2fsck_exit: 0,
                    read_by,
                    differences: diffs,
                    first,
                },
            ),
        ],
    )?;

    let settle_dir = || settle(&t.ext4.sync, dir);
    let m = time_rounds(
        NAME,
        case.reps,
        case.name,
        &mut [
            Job::new(
                "spacekit",
                || {
                    let _ = fs::remove_file(&img_sk);
                    settle_dir()
                },
                || {
                    let (ns, p) = t.spacekit(&img_sk, geo, tree)?;
                    pop_ns.borrow_mut().push(ns);
                    keep(0, p.unwrap_or_default());
                    Ok(())
                },
            ),
            Job::new(
                "mke2fs-d",
                || {
                    let _ = fs::remove_file(&img_mk);
                    settle_dir()
                },
                || t.mke2fs_d(&img_mk, geo, tree).map(|p| keep(1, p)),
            ),
            Job::new(
                "genext2fs",
                || {
                    let _ = fs::remove_file(&img_ge);
                    settle_dir()
                },
                || t.genext2fs(&img_ge, geo, tree).map(|p| keep(2, p)),
            ),
            Job::new(
                "limit",
                || {
                    let _ = fs::remove_dir_all(&copy);
                    settle_dir()
                },
                || t.copy(tree, &copy).map(|p| keep(3, p)),
            ),
        ],
    )?;
    for p in [&img_sk, &img_mk, &img_ge] {
        let _ = fs::remove_file(p);
    }
    let _ = fs::remove_dir_all(&copy);
    if case.source == "generated" {
        let _ = fs::remove_dir_all(tree);
    }

    let peaks = peaks.into_inner();
    let populate = median(&mut pop_ns.into_inner());
    let variants = ["spacekit", "mke2fs-d", "genext2fs", "limit"];
    m.rows_with(report, |v, ns| {
        let i = variants.iter().position(|x| *x == v).unwrap_or(0);
        let in_process = v == "spacekit" && t.ext4.spacekit.is_none();
        let (peak, exact) = if in_process {
            (serde_json::Value::Null, serde_json::Value::Null)
        } else {
            (peaks[i].bytes.into(), peaks[i].exact.into())
        };
        Row::new(case.name, v)
            .field("source", case.source.as_str())
            .field("files", stats.files)
            .field("dirs", stats.dirs)
            .field("symlinks", stats.symlinks)
            .field("hard_links", stats.hard_links)
            .field("bytes", stats.bytes)
            .field("image_bytes", image_bytes)
            .field("inodes", geo.1)
            .field("block_size", BLOCK)
            .field(
                "run",
                if v == "spacekit" {
                    t.ext4.run_kind()
                } else {
                    "process"
                },
            )
            .field("reps", case.reps as u64)
            .field(
                "gbps",
                if ns > 0.0 {
                    stats.bytes as f64 / ns
                } else {
                    0.0
                },
            )
            .field("peak_rss_bytes", peak)
            .field("peak_rss_exact", exact)
    });
    let sk_peak = t.ext4.spacekit.is_some().then_some(peaks[0]);
    table.row(vec![
        case.name.into(),
        stats.files.to_string(),
        stats.bytes.to_string(),
        m.cell("spacekit"),
        fmt_ns(populate),
        m.cell("mke2fs-d"),
        m.cell("genext2fs"),
        m.cell("limit"),
        m.ratio_cell("mke2fs-d", "spacekit"),
        m.ratio_cell("genext2fs", "spacekit"),
        format!("{:.2}x", m.ratio("spacekit", "limit")),
        sk_peak.map_or("-".into(), |p| {
            format!(
                "{}{:.1}",
                if p.exact { "" } else { "<=" },
                p.bytes as f64 / 1e6
            )
        }),
    ]);

    let label = format!(
        "{} ({} files, {:.0} MB)",
        case.name,
        stats.files,
        stats.bytes as f64 / 1e6
    );
    let sk = m.cell("spacekit");
    let vs = |peer: &str, want: f64| {
        let r = m.ratio(peer, "spacekit");
        (
            r >= want,
            format!(
                "{label}: spacekit {sk} vs {peer} {}, {r:.1}x faster (bar: at least {want}x faster than {peer})",
                m.cell(peer)
            ),
        )
    };
    if case.name == SMALL {
        let (met, text) = vs("mke2fs-d", 5.0);
        bars.check(met, text);
        let (met, text) = vs("genext2fs", 3.0);
        bars.check(met, text);
    } else if case.name == "usr-share" {
        let (met, text) = vs("mke2fs-d", 2.0);
        bars.check(met, text);
    }
    let r = m.ratio("spacekit", "limit");
    bars.check(
        r <= 3.0,
        format!(
            "{label}: spacekit {sk} vs the cp -a limit {}, {r:.2}x (bar: within 3x of the limit)",
            m.cell("limit")
        ),
    );
    match sk_peak {
        Some(p) => bars.check(
            (p.bytes as f64) < 0.1 * stats.bytes as f64,
            format!(
                "{label}: spacekit populate's peak memory {}{:.1} MB, {:.1}% of the tree's {:.0} MB (bar: below 10%)",
                if p.exact { "" } else { "at most (the bench's own peak) " },
                p.bytes as f64 / 1e6,
                100.0 * p.bytes as f64 / stats.bytes.max(1) as f64,
                stats.bytes as f64 / 1e6
            ),
        ),
        None => report.note(format!(
            "{label}: spacekit ran in-process: its peak memory is not measured"
        )),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    impl TreeSpec {
        /// The files' bytes (each inode once).
        fn bytes(&self) -> u64 {
            self.entries
                .iter()
                .map(|e| match e.kind {
                    Kind::File { len, .. } => len,
                    _ => 0,
                })
                .sum()
        }
    }

    /// Entries per directory (files, symlinks, hard links and
    /// subdirectories), sorted.
    fn dir_sizes(t: &TreeSpec) -> Vec<usize> {
        let mut n = vec![0usize; t.dirs.len()];
        for d in &t.dirs[1..] {
            n[d.parent] += 1;
        }
        for e in &t.entries {
            n[e.dir] += 1;
        }
        n.sort_unstable();
        n
    }

    fn file_sizes(t: &TreeSpec) -> Vec<u64> {
        let mut v: Vec<u64> = t
            .entries
            .iter()
            .filter_map(|e| match e.kind {
                Kind::File { len, .. } => Some(len),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    fn count(t: &TreeSpec, f: impl Fn(&Kind) -> bool) -> usize {
        t.entries.iter().filter(|e| f(&e.kind)).count()
    }

    #[test]
    fn the_tree_is_the_same_for_a_seed_and_differs_for_another() {
        let a = TreeSpec::generate(1, 2000);
        assert_eq!(a, TreeSpec::generate(1, 2000));
        assert_ne!(a, TreeSpec::generate(2, 2000));
    }

    #[test]
    fn the_tree_is_shaped_like_usr_share() {
        let t = TreeSpec::generate(0x5EED, 10_000);
        // Counts: 10,000 files, /usr/share's ratios of directories and
        // symlinks, a few hard links.
        assert_eq!(count(&t, |k| matches!(k, Kind::File { .. })), 10_000);
        assert_eq!(t.dirs.len(), 750);
        assert_eq!(count(&t, |k| matches!(k, Kind::Symlink(_))), 877);
        assert_eq!(count(&t, |k| matches!(k, Kind::HardLink(_))), 11);
        // Directories: most small, a few of thousands of entries.
        let d = dir_sizes(&t);
        let at = |q: f64| d[((d.len() - 1) as f64 * q) as usize];
        assert!(at(0.5) <= 8, "median directory {}", at(0.5));
        assert!(at(0.9) <= 40, "p90 directory {}", at(0.9));
        assert!(
            d[d.len() - 1] >= 2000,
            "largest directory {}",
            d[d.len() - 1]
        );
        assert!(d[d.len() - 3] >= 300, "third largest {}", d[d.len() - 3]);
        // Depth: mostly a few levels, never past MAX_DEPTH.
        let depths: Vec<usize> = (0..t.dirs.len()).map(|i| t.chain(i).len() - 1).collect();
        assert!(depths.iter().all(|&x| x <= MAX_DEPTH));
        let mean = depths.iter().sum::<usize>() as f64 / depths.len() as f64;
        assert!((2.0..=5.0).contains(&mean), "mean depth {mean}");
        // Sizes: from empty to MiBs, most small.
        let s = file_sizes(&t);
        let q = |x: f64| s[((s.len() - 1) as f64 * x) as usize];
        assert_eq!(s[0], 0);
        assert!((700..=3000).contains(&q(0.5)), "median file {}", q(0.5));
        assert!((5_000..=40_000).contains(&q(0.9)), "p90 file {}", q(0.9));
        assert!(q(0.99) >= 100 << 10, "p99 file {}", q(0.99));
        assert!(s[s.len() - 1] <= MAX_FILE);
        let bytes = t.bytes();
        assert!((60e6..200e6).contains(&(bytes as f64)), "{bytes} bytes");
        // Symlinks: relative, absolute and sibling targets, some too long
        // for the inode.
        let targets: Vec<&str> = t
            .entries
            .iter()
            .filter_map(|e| match &e.kind {
                Kind::Symlink(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert!(targets.iter().any(|s| s.starts_with("../")));
        assert!(targets.iter().any(|s| s.starts_with('/')));
        assert!(targets.iter().any(|s| !s.contains('/')));
        assert!(targets.iter().any(|s| s.len() >= 60));
    }

    #[test]
    fn names_are_unique_in_each_directory() {
        let t = TreeSpec::generate(3, 3000);
        let mut seen = HashSet::new();
        for d in &t.dirs[1..] {
            assert!(seen.insert((d.parent, d.name.clone())), "{}", d.name);
        }
        for e in &t.entries {
            assert!(seen.insert((e.dir, e.name.clone())), "{}", e.name);
        }
    }

    #[test]
    fn relative_targets_lead_to_the_file() {
        let t = TreeSpec::generate(4, 500);
        let file = t.entries.iter().find(|e| t.chain(e.dir).len() > 2).unwrap();
        for from in 0..t.dirs.len() {
            let rel = t.relative(from, file);
            let mut at: Vec<String> = t
                .dir_path(from)
                .split('/')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            for part in rel.split('/') {
                if part == ".." {
                    at.pop().unwrap();
                } else {
                    at.push(part.into());
                }
            }
            assert_eq!(at.join("/"), t.path_of(file), "from {}", t.dir_path(from));
        }
    }

    #[test]
    fn the_written_tree_has_what_the_spec_says_and_the_same_bytes_again() {
        let root =
            std::env::temp_dir().join(format!("spacekit-ext4-populate-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let t = TreeSpec::generate(5, 300);
        let (a, b) = (root.join("a"), root.join("b"));
        t.write(&a).unwrap();
        t.write(&b).unwrap();
        let s = Stats::of(&a).unwrap();
        assert_eq!(s.files, 300);
        assert_eq!(s.dirs as usize, t.dirs.len());
        assert_eq!(
            s.symlinks as usize,
            count(&t, |k| matches!(k, Kind::Symlink(_)))
        );
        assert_eq!(s.hard_links, 1);
        assert_eq!(s.bytes, t.bytes());
        // Two writes of one spec read the same, times to the nanosecond.
        assert_eq!(
            diff(&a, &b, Compare::default()).unwrap(),
            Vec::<String>::new()
        );
        let (blocks, inodes) = s.geometry();
        assert!(blocks * BLOCK >= 64 << 20 && inodes >= s.inodes_used() * 3 / 2);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_check_sees_one_changed_byte() {
        // The limit's compare (a copy of the tree): equal, then one byte
        // of one file changed, then one mtime.
        let Ok(cp) = need("cp") else { return };
        let root =
            std::env::temp_dir().join(format!("spacekit-ext4-populate-chk-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let t = TreeSpec::generate(6, 200);
        let (src, dst) = (root.join("src"), root.join("dst"));
        t.write(&src).unwrap();
        run_cmd(Command::new(&cp).arg("-a").arg(&src).arg(&dst), "cp -a").unwrap();
        assert_eq!(compare(&src, &dst, Compare::default()).unwrap().0, 0);
        let f = t
            .entries
            .iter()
            .find(|e| matches!(e.kind, Kind::File { len, .. } if len > 10))
            .unwrap();
        let p = dst.join(t.path_of(f));
        let mut bytes = fs::read(&p).unwrap();
        bytes[5] ^= 1;
        fs::write(&p, bytes).unwrap();
        set_time(&p, f.mtime).unwrap();
        let (n, first) = compare(&src, &dst, Compare::default()).unwrap();
        assert_eq!(n, 1, "{first:?}");
        assert!(first[0].starts_with(&t.path_of(f)), "{first:?}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_image_check_sees_one_corrupted_byte() {
        // spacekit's image (mkfs.ext4, then Populate in-process) passes;
        // one byte of a file's data flipped in the image file fails the
        // compare (e2fsck cannot see it: it reads no file data).
        let Ok(t) = Tools::find() else {
            println!("skipped: e2fsprogs, genext2fs or mount missing");
            return;
        };
        let root =
            std::env::temp_dir().join(format!("spacekit-ext4-populate-img-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let spec = TreeSpec::generate(7, 100);
        let (tree, img) = (root.join("tree"), root.join("img"));
        spec.write(&tree).unwrap();
        let geo = Stats::of(&tree).unwrap().geometry();
        t.spacekit(&img, geo, &tree).unwrap();
        if !can_mount(&t, &img, &root) {
            println!("skipped: mount -o loop is not allowed here");
            fs::remove_dir_all(&root).unwrap();
            return;
        }
        let ok = check_image(&t, &img, &tree, &root, Extract::Mount, true).unwrap();
        assert_eq!((ok.e2fsck_exit, ok.differences), (0, 0), "{ok:?}");
        // The first 64 bytes of a file, at the start of one of the image's blocks.
        let f = spec
            .entries
            .iter()
            .find(|e| matches!(e.kind, Kind::File { len, .. } if len >= 64))
            .unwrap();
        let want = fs::read(tree.join(spec.path_of(f))).unwrap();
        let mut bytes = fs::read(&img).unwrap();
        let at = (0..bytes.len() / BLOCK as usize)
            .map(|b| b * BLOCK as usize)
            .find(|&o| bytes[o..o + 64] == want[..64])
            .expect("the file's first block in the image");
        bytes[at + 10] ^= 0x40;
        fs::write(&img, &bytes).unwrap();
        let bad = check_image(&t, &img, &tree, &root, Extract::Mount, true).unwrap();
        assert_eq!((bad.e2fsck_exit, bad.differences), (0, 1), "{bad:?}");
        assert!(bad.first[0].starts_with(&spec.path_of(f)), "{bad:?}");
        fs::remove_dir_all(&root).unwrap();
    }
}
