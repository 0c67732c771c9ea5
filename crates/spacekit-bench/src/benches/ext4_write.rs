//! `bench ext4-write`: putting files into an ext4 image and getting them
//! back, spacekit against debugfs (its peer tool) and the host's own copy
//! of the same bytes (`limit`), in one run.
//!
//! * `large`: one file of pseudo-random bytes (1 GiB; 8 MiB with `--quick`)
//!   is written into a fresh image (4 KiB blocks, no journal, twice the
//!   file's size, made by mkfs.ext4 before every repetition, untimed) and
//!   read back to a host file. Every variant is a whole process, timed from
//!   spawn to exit:
//!   - `spacekit`: `spacekit ext4 write IMG /big --from SRC` and
//!     `spacekit ext4 get IMG /big OUT` (the running `spacekit` binary; run
//!     from another binary, such as the test harness, the same library
//!     calls run in-process and the rows say `"run": "in-process"`);
//!   - `debugfs`: `debugfs -w -R "write SRC big" IMG` and
//!     `debugfs -R "dump /big OUT" IMG`;
//!   - `limit`: the host copying the same bytes on the same file system:
//!     `cp SRC DST` then `sync DST` for the write (spacekit's flush and
//!     debugfs's close both fsync the image, so the copy is fsynced too)
//!     and `cp SRC DST` alone for the read (neither `get` nor `dump`
//!     fsyncs its output).
//!
//!   Rows `large-write` and `large-read`. Each reader reads the image the
//!   other tool wrote: the pairs the verification checks.
//! * `small`: 10,000 files (200 with `--quick`) of 1 to 16 KiB (random
//!   sizes and bytes from the run's seed) in 100 directories two levels
//!   deep (`/t/aI/bJ/fK`), put into a fresh image (4 KiB blocks, 1 GiB,
//!   `-N 20000`):
//!   - `spacekit`: the CLI's batch command, one process, as a user runs
//!     it: `spacekit ext4 populate IMG --from SRC -q`, `SRC` holding only
//!     the host tree `t` (the host's modes and times come along; one
//!     transaction, one flush; in-process when not run from the spacekit
//!     binary, and then the row says so);
//!   - `spacekit-api`: the file calls an image tool makes, in-process: one
//!     `Image::open`, a `mkdir` per directory, `create` and `write` per
//!     file (its bytes read from the host file), one `flush`;
//!   - `debugfs`: one `debugfs -w -f SCRIPT IMG` process whose script makes
//!     the same directories (`mkdir`) and files (`cd` and `write HOST
//!     NAME`), in the same order;
//!   - `limit`: the host's own copy of the same bytes to one file on the
//!     same file system, made durable as both tools make their image:
//!     `cat` of every file in order (2,000 per process) into one file,
//!     then `sync FILE`. It is what any tool pays to put these bytes on
//!     this disk, before a single inode or directory entry is made.
//!
//!   The host files are written once, untimed.
//!
//! Before anything is timed, every image must pass `e2fsck -fn`, and what
//! the other tool reads back must equal the source: `debugfs dump` (large)
//! and `debugfs rdump` (small, every file and no other entry) of
//! spacekit's images, `spacekit ext4 get` (large) and `Image::read` (small,
//! every file, and the directory tree holds nothing else) of debugfs's.
//!
//! Timing: [`REPS`] rounds (5 with `--full`), each running every variant
//! once in turn (debugfs, spacekit, spacekit-api for `small`, limit) after
//! an untimed setup (a fresh
//! image or an empty destination, then `sync -f` so no write-back of an
//! earlier variant lands in the next one's time); the median is reported.
//! Page caches are not dropped: the sources are warm for every variant.
//!
//! JSON rows: cases `large-write`, `large-read` and `small`, variants
//! `debugfs`, `spacekit` and `limit` (and `spacekit-api` for `small`), with `bytes` (the data copied),
//! `files`, `dirs`, `block_size` (4096), `run` (`process` or `in-process`),
//! `reps`, `median_ns` and, for the large cases, `gbps`.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::ext4::dir::FT_DIR;
use spacekit::ext4::{Ext4Error, Image, OpenMode};

use super::procs::{
    e2fsck, fresh_image, io_err, populate_in_process, random_bytes, run_cmd, run_debugfs, settle,
    skipped, time_rounds, Ext4Tools as Tools, Job, Scratch,
};
use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{fmt_ns, progress, verify, Bars, Report, Row, Table};

const NAME: &str = "ext4-write";

/// Rounds of every variant (default and quick modes).
const REPS: usize = 3;

/// The images' block size.
const BLOCK: u64 = 4096;

const UUID: &str = "6a5e1c3e-2b7a-4d4f-9c1e-0123456789ab";

/// How much work a mode does.
struct Sizes {
    /// The large file's bytes.
    big: u64,
    /// Top-level directories of the small tree.
    outer: usize,
    /// Directories in each of those.
    inner: usize,
    /// Files in each inner directory.
    per_dir: usize,
    /// The small tree's image bytes.
    small_image: u64,
    /// Its inodes (`mkfs.ext4 -N`).
    inodes: u64,
    /// Timed rounds.
    reps: usize,
}

impl Sizes {
    fn of(mode: Mode) -> Sizes {
        match mode {
            Mode::Quick => Sizes {
                big: 8 << 20,
                outer: 2,
                inner: 2,
                per_dir: 50,
                small_image: 64 << 20,
                inodes: 2048,
                reps: REPS,
            },
            Mode::Default | Mode::Full => Sizes {
                big: 1 << 30,
                outer: 10,
                inner: 10,
                per_dir: 100,
                small_image: 1 << 30,
                inodes: 20000,
                reps: if mode == Mode::Full { 5 } else { REPS },
            },
        }
    }

    fn files(&self) -> usize {
        self.outer * self.inner * self.per_dir
    }
}

fn ext4_err(path: &Path) -> impl Fn(Ext4Error) -> BenchError + '_ {
    move |e| BenchError(format!("{}: {e}", path.display()))
}

/// A fresh image at `path`: `bytes` long, 4 KiB blocks, no journal, a
/// fixed UUID and time, `inodes` inodes if given.
fn make_image(t: &Tools, path: &Path, bytes: u64, inodes: Option<u64>) -> Result<(), BenchError> {
    let mut args = vec![
        "-b".to_string(),
        BLOCK.to_string(),
        "-O".into(),
        "^has_journal".into(),
        "-E".into(),
        format!("lazy_itable_init=1,hash_seed={UUID}"),
    ];
    if let Some(n) = inodes {
        args.extend(["-N".to_string(), n.to_string()]);
    }
    fresh_image(&t.mkfs, path, bytes, UUID, args)
}

/// Where host file `b` first differs from `a` (`None`: equal bytes).
fn first_difference(a: &Path, b: &Path) -> Result<Option<u64>, BenchError> {
    let mut ra = BufReader::new(File::open(a).map_err(io_err(a))?);
    let mut rb = BufReader::new(File::open(b).map_err(io_err(b))?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut at = 0u64;
    loop {
        let na = read_full(&mut ra, &mut ba).map_err(io_err(a))?;
        let nb = read_full(&mut rb, &mut bb).map_err(io_err(b))?;
        let n = na.min(nb);
        if let Some(i) = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y) {
            return Ok(Some(at + i as u64));
        }
        if na != nb {
            return Ok(Some(at + n as u64));
        }
        if na == 0 {
            return Ok(None);
        }
        at += n as u64;
    }
}

/// Reads until `buf` is full or the input ends.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// `8 MiB`, `1 GiB`.
fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let tools = match Tools::find() {
        Ok(t) => t,
        Err(missing) => return Ok(skipped(NAME, missing)),
    };
    let mut report = Report::default();
    let s = Sizes::of(ctx.mode);
    let scratch = Scratch::new(NAME, ctx.seed)?;
    let mut bars = Bars::new(NAME);
    large(ctx, &tools, &s, &scratch.0, &mut report, &mut bars)?;
    small(ctx, &tools, &s, &scratch.0, &mut report, &mut bars)?;
    report.bars(bars);
    report.note(format!(
        "whole-process times (spawn to exit), median of {} rounds, debugfs, spacekit and limit in turn; spacekit is {} (ext4 write and get for the large file, ext4 populate for the small files; spacekit-api, the per-file calls, in-process; debugfs's start-up, a few ms, is in its time); the large write's limit is cp + sync (both tools fsync the image), the large read's cp, the small case's every file's bytes into one host file (cat) + sync",
        s.reps,
        if tools.spacekit.is_some() { "the spacekit binary run as a process" } else { "in-process (not run from the spacekit binary)" },
    ));
    let chart = Chart::new(
        "ext4-write: time per case (whole process)",
        "case",
        "median time (ns, log)",
        XAxis::Categories(vec![
            "large-write".into(),
            "large-read".into(),
            "small".into(),
        ]),
        true,
    )
    .from_rows(&report.rows, "case", "median_ns");
    report.chart(chart);
    Ok(report)
}

/// spacekit writes host file `src` into `img` as `/big`.
fn spacekit_write(t: &Tools, img: &Path, src: &Path) -> Result<(), BenchError> {
    if let Some(bin) = &t.spacekit {
        let mut cmd = Command::new(bin);
        cmd.args(["ext4", "write"])
            .arg(img)
            .arg("/big")
            .arg("--from")
            .arg(src);
        return run_cmd(&mut cmd, "spacekit ext4 write").map(drop);
    }
    // What `spacekit ext4 write` does.
    let err = ext4_err(img);
    let mut im = Image::open(img, OpenMode::ReadWrite).map_err(&err)?;
    let ino = im.create("/big", 0o644).map_err(&err)?;
    let f = File::open(src).map_err(io_err(src))?;
    im.copy_in(ino, &f).map_err(&err)?;
    im.flush().map_err(&err)
}

/// spacekit copies `/big` of `img` out to host file `out`.
fn spacekit_get(t: &Tools, img: &Path, out: &Path) -> Result<(), BenchError> {
    if let Some(bin) = &t.spacekit {
        let mut cmd = Command::new(bin);
        cmd.args(["ext4", "get"]).arg(img).arg("/big").arg(out);
        return run_cmd(&mut cmd, "spacekit ext4 get").map(drop);
    }
    // What `spacekit ext4 get` does.
    let err = ext4_err(img);
    let mut im = Image::open(img, OpenMode::ReadOnly).map_err(&err)?;
    let ino = im.lookup("/big").map_err(&err)?;
    let dst = File::create(out).map_err(io_err(out))?;
    im.copy_out(ino, &dst).map(drop).map_err(&err)
}

fn debugfs_write(t: &Tools, img: &Path, src: &Path) -> Result<(), BenchError> {
    let mut cmd = Command::new(&t.debugfs);
    cmd.arg("-w")
        .arg("-R")
        .arg(format!("write {} big", src.display()))
        .arg(img);
    run_debugfs(&mut cmd, "debugfs write")
}

fn debugfs_dump(t: &Tools, img: &Path, out: &Path) -> Result<(), BenchError> {
    let mut cmd = Command::new(&t.debugfs);
    cmd.arg("-R")
        .arg(format!("dump /big {}", out.display()))
        .arg(img);
    run_debugfs(&mut cmd, "debugfs dump")
}

/// `cp SRC DST`, then `sync DST` if `fsync`.
fn host_copy(t: &Tools, src: &Path, dst: &Path, fsync: bool) -> Result<(), BenchError> {
    run_cmd(Command::new(&t.cp).arg(src).arg(dst), "cp")?;
    if fsync {
        run_cmd(Command::new(&t.sync).arg(dst), "sync")?;
    }
    Ok(())
}

/// What one tool's image holds, as the other tool reads it back.
#[derive(Debug, PartialEq)]
struct LargeCheck {
    bytes: u64,
    /// The first byte that differs from the source.
    differs_at: Option<u64>,
    e2fsck_exit: i32,
}

/// The 1 GiB case: verify, then time the reads and the writes.
fn large(
    ctx: &Ctx,
    t: &Tools,
    s: &Sizes,
    dir: &Path,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let label = size_label(s.big);
    let image_bytes = 2 * s.big.max(32 << 20);
    progress(NAME, &format!("large: writing the {label} source file"));
    let src = dir.join("big.src");
    {
        let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xB16);
        let mut w = BufWriter::new(File::create(&src).map_err(io_err(&src))?);
        let mut buf = vec![0u8; 1 << 20];
        let mut left = s.big;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            random_bytes(&mut rng, &mut buf[..n]);
            w.write_all(&buf[..n]).map_err(io_err(&src))?;
            left -= n as u64;
        }
        w.flush().map_err(io_err(&src))?;
    }
    let img_sk = dir.join("big-spacekit.img");
    let img_dfs = dir.join("big-debugfs.img");
    let out_sk = dir.join("big-spacekit.out");
    let out_dfs = dir.join("big-debugfs.out");
    let out_cp = dir.join("big-cp.out");

    // Correctness first: each tool reads back what the other wrote.
    progress(
        NAME,
        "large: verifying (write, read back by the other tool, e2fsck)",
    );
    make_image(t, &img_sk, image_bytes, None)?;
    spacekit_write(t, &img_sk, &src)?;
    make_image(t, &img_dfs, image_bytes, None)?;
    debugfs_write(t, &img_dfs, &src)?;
    debugfs_dump(t, &img_sk, &out_dfs)?;
    spacekit_get(t, &img_dfs, &out_sk)?;
    let check = |img: &Path, out: &Path| -> Result<LargeCheck, BenchError> {
        Ok(LargeCheck {
            bytes: fs::metadata(out).map_err(io_err(out))?.len(),
            differs_at: first_difference(&src, out)?,
            e2fsck_exit: e2fsck(&t.e2fsck, img)?,
        })
    };
    verify(
        &format!("the {label} file written and read back (e2fsck -fn, then byte compare)"),
        &[
            (
                "expected",
                LargeCheck {
                    bytes: s.big,
                    differs_at: None,
                    e2fsck_exit: 0,
                },
            ),
            ("spacekit (read by debugfs dump)", check(&img_sk, &out_dfs)?),
            (
                "debugfs (read by spacekit ext4 get)",
                check(&img_dfs, &out_sk)?,
            ),
        ],
    )?;

    // Reads first, on the images just verified.
    let read = time_rounds(
        NAME,
        s.reps,
        &format!("large-read ({label})"),
        &mut [
            Job::new(
                "debugfs",
                || {
                    let _ = fs::remove_file(&out_dfs);
                    settle(&t.sync, dir)
                },
                || debugfs_dump(t, &img_sk, &out_dfs),
            ),
            Job::new(
                "spacekit",
                || {
                    let _ = fs::remove_file(&out_sk);
                    settle(&t.sync, dir)
                },
                || spacekit_get(t, &img_dfs, &out_sk),
            ),
            Job::new(
                "limit",
                || {
                    let _ = fs::remove_file(&out_cp);
                    settle(&t.sync, dir)
                },
                || host_copy(t, &src, &out_cp, false),
            ),
        ],
    )?;
    for p in [&out_sk, &out_dfs, &out_cp] {
        let _ = fs::remove_file(p);
    }
    let write = time_rounds(
        NAME,
        s.reps,
        &format!("large-write ({label})"),
        &mut [
            Job::new(
                "debugfs",
                || {
                    make_image(t, &img_dfs, image_bytes, None)?;
                    settle(&t.sync, dir)
                },
                || debugfs_write(t, &img_dfs, &src),
            ),
            Job::new(
                "spacekit",
                || {
                    make_image(t, &img_sk, image_bytes, None)?;
                    settle(&t.sync, dir)
                },
                || spacekit_write(t, &img_sk, &src),
            ),
            Job::new(
                "limit",
                || {
                    let _ = fs::remove_file(&out_cp);
                    settle(&t.sync, dir)
                },
                || host_copy(t, &src, &out_cp, true),
            ),
        ],
    )?;
    for p in [&img_sk, &img_dfs, &out_cp, &src] {
        let _ = fs::remove_file(p);
    }

    let mut table = Table::new(
        &format!("one {label} file of random bytes into a fresh ext4 image (4 KiB blocks, no journal) and back out to a host file; whole-process medians of {} rounds", s.reps),
        &["case", "bytes", "debugfs", "spacekit", "limit", "debugfs/spacekit", "spacekit/limit", "spacekit GB/s"],
    );
    for (case, m) in [("large-write", &write), ("large-read", &read)] {
        let run_kind = |v: &str| {
            if v == "spacekit" {
                t.run_kind()
            } else {
                "process"
            }
        };
        m.rows_with(report, |v, ns| {
            Row::new(case, v)
                .field("bytes", s.big)
                .field("files", 1u64)
                .field("dirs", 0u64)
                .field("block_size", BLOCK)
                .field("run", run_kind(v))
                .field("reps", s.reps as u64)
                .field("gbps", if ns > 0.0 { s.big as f64 / ns } else { 0.0 })
        });
        table.row(vec![
            case.into(),
            s.big.to_string(),
            m.cell("debugfs"),
            m.cell("spacekit"),
            m.cell("limit"),
            m.ratio_cell("debugfs", "spacekit"),
            format!("{:.2}x", m.ratio("spacekit", "limit")),
            format!("{:.2}", s.big as f64 / m.ns("spacekit")),
        ]);
    }
    report.table(table);
    for (what, m, limit) in [("write", &write, "cp + sync"), ("read", &read, "cp")] {
        let r = m.ratio("spacekit", "limit");
        bars.check(
            r <= 1.5,
            format!(
                "{label} {what}: spacekit {} vs the host copy ({limit}) {}, {r:.2}x; debugfs {} (bar: within 1.5x of the host copy)",
                fmt_ns(m.ns("spacekit")),
                fmt_ns(m.ns("limit")),
                fmt_ns(m.ns("debugfs")),
            ),
        );
    }
    Ok(())
}

/// The small-file tree: directories (image paths, parents first) and
/// files (image directory, name, host path, length).
struct Tree {
    dirs: Vec<String>,
    files: Vec<(String, String, PathBuf, usize)>,
    /// The host directory holding it (image `/t`).
    host: PathBuf,
}

/// Writes the small files on the host (`dir/small-src/t/aI/bJ/fK`, as
/// `/t/...` in the images: `small-src` holds nothing else, so a populate
/// from it makes exactly `/t`).
fn make_tree(ctx: &Ctx, s: &Sizes, dir: &Path) -> Result<Tree, BenchError> {
    let host = dir.join("small-src").join("t");
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0x5A11);
    let mut tree = Tree {
        dirs: vec!["/t".into()],
        files: Vec::with_capacity(s.files()),
        host: host.clone(),
    };
    let mut buf = vec![0u8; 16 << 10];
    for i in 0..s.outer {
        tree.dirs.push(format!("/t/a{i}"));
        for j in 0..s.inner {
            let rel = format!("a{i}/b{j}");
            let d = host.join(&rel);
            fs::create_dir_all(&d).map_err(io_err(&d))?;
            tree.dirs.push(format!("/t/{rel}"));
            for k in 0..s.per_dir {
                let len = rng.random_range(1usize << 10..=16 << 10);
                random_bytes(&mut rng, &mut buf[..len]);
                let name = format!("f{k:03}");
                let p = d.join(&name);
                fs::write(&p, &buf[..len]).map_err(io_err(&p))?;
                tree.files.push((format!("/t/{rel}"), name, p, len));
            }
        }
    }
    Ok(tree)
}

/// `spacekit`: the CLI's batch command, one process (`spacekit ext4
/// populate IMG --from SRC -q`, `SRC` holding `t`), or the same library
/// calls in-process when not run from the spacekit binary.
fn spacekit_populate(t: &Tools, img: &Path, tree: &Tree) -> Result<(), BenchError> {
    let src = tree.host.parent().unwrap_or(&tree.host);
    if let Some(bin) = &t.spacekit {
        let mut cmd = Command::new(bin);
        cmd.args(["ext4", "populate"])
            .arg(img)
            .arg("--from")
            .arg(src)
            .arg("-q");
        return run_cmd(&mut cmd, "spacekit ext4 populate").map(drop);
    }
    populate_in_process(img, src)
}

/// `spacekit-api`: the file calls an image tool makes, in-process: one
/// open, a `mkdir` per directory, `create` and `write` per file (its bytes
/// read from the host file), one flush.
fn spacekit_tree(img: &Path, tree: &Tree) -> Result<(), BenchError> {
    let err = ext4_err(img);
    let mut im = Image::open(img, OpenMode::ReadWrite).map_err(&err)?;
    for d in &tree.dirs {
        im.mkdir(d, 0o755).map_err(&err)?;
    }
    for (d, name, host, _) in &tree.files {
        let data = fs::read(host).map_err(io_err(host))?;
        let ino = im.create(&format!("{d}/{name}"), 0o644).map_err(&err)?;
        im.write(ino, 0, &data).map_err(&err)?;
    }
    im.flush().map_err(&err)
}

/// The small case's limit: every file's bytes, in the tree's order, into
/// one host file (`cat`, 2,000 files per process), then `sync` of it.
fn host_concat(t: &Tools, tree: &Tree, out: &Path) -> Result<(), BenchError> {
    let f = File::create(out).map_err(io_err(out))?;
    for chunk in tree.files.chunks(2000) {
        let mut cmd = Command::new(&t.cat);
        cmd.args(chunk.iter().map(|f| &f.2))
            .stdout(f.try_clone().map_err(io_err(out))?);
        run_cmd(&mut cmd, "cat")?;
    }
    run_cmd(Command::new(&t.sync).arg(out), "sync").map(drop)
}

/// debugfs's script for the tree: the same directories, then each
/// directory's files.
fn debugfs_script(tree: &Tree) -> String {
    let mut s = String::new();
    for d in &tree.dirs {
        s.push_str(&format!("mkdir {d}\n"));
    }
    let mut cwd = "";
    for (d, name, host, _) in &tree.files {
        if d != cwd {
            s.push_str(&format!("cd {d}\n"));
            cwd = d;
        }
        s.push_str(&format!("write {} {name}\n", host.display()));
    }
    s
}

/// What one tool's small-file image holds, as the other tool reads it.
#[derive(Debug, PartialEq)]
struct SmallCheck {
    /// Files whose bytes equal the host file's.
    files_equal: usize,
    /// Directories and files found under `/t` (itself included).
    entries: usize,
    /// The first file that differs or is missing.
    first_bad: Option<String>,
    e2fsck_exit: i32,
}

/// Entries under `dir` on the host (itself included).
fn host_entries(dir: &Path) -> Result<usize, BenchError> {
    let mut n = 1;
    for e in fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        n += if p.is_dir() { host_entries(&p)? } else { 1 };
    }
    Ok(n)
}

/// Entries under directory `ino` of `im` (itself included).
fn image_entries(im: &mut Image, ino: u32) -> Result<usize, Ext4Error> {
    let mut n = 1;
    for e in im.read_dir(ino)? {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        n += if e.file_type == FT_DIR {
            image_entries(im, e.inode)?
        } else {
            1
        };
    }
    Ok(n)
}

/// spacekit's image as `debugfs rdump` reads it back.
fn check_spacekit_tree(
    t: &Tools,
    img: &Path,
    tree: &Tree,
    dir: &Path,
) -> Result<SmallCheck, BenchError> {
    let out = dir.join("rdump");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(io_err(&out))?;
    let mut cmd = Command::new(&t.debugfs);
    cmd.arg("-R")
        .arg(format!("rdump /t {}", out.display()))
        .arg(img);
    run_debugfs(&mut cmd, "debugfs rdump")?;
    let mut check = SmallCheck {
        files_equal: 0,
        entries: host_entries(&out.join("t"))?,
        first_bad: None,
        e2fsck_exit: e2fsck(&t.e2fsck, img)?,
    };
    for (d, name, host, _) in &tree.files {
        let got = out.join(&d[1..]).join(name);
        let same = got.is_file() && first_difference(host, &got)?.is_none();
        if same {
            check.files_equal += 1;
        } else if check.first_bad.is_none() {
            check.first_bad = Some(format!("{d}/{name}"));
        }
    }
    let _ = fs::remove_dir_all(&out);
    Ok(check)
}

/// debugfs's image as `Image::read` reads it back.
fn check_debugfs_tree(t: &Tools, img: &Path, tree: &Tree) -> Result<SmallCheck, BenchError> {
    let err = ext4_err(img);
    let mut im = Image::open(img, OpenMode::ReadOnly).map_err(&err)?;
    let top = im.lookup("/t").map_err(&err)?;
    let mut check = SmallCheck {
        files_equal: 0,
        entries: image_entries(&mut im, top).map_err(&err)?,
        first_bad: None,
        e2fsck_exit: e2fsck(&t.e2fsck, img)?,
    };
    let mut buf = vec![0u8; (16 << 10) + 1];
    for (d, name, host, len) in &tree.files {
        let path = format!("{d}/{name}");
        let want = fs::read(host).map_err(io_err(host))?;
        let same = match im.lookup(&path) {
            Ok(ino) => {
                let n = im.read(ino, 0, &mut buf).map_err(&err)?;
                n == *len && buf[..n] == want[..]
            }
            Err(_) => false,
        };
        if same {
            check.files_equal += 1;
        } else if check.first_bad.is_none() {
            check.first_bad = Some(path);
        }
    }
    Ok(check)
}

/// The 10,000-file case: verify, then time.
fn small(
    ctx: &Ctx,
    t: &Tools,
    s: &Sizes,
    dir: &Path,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let files = s.files();
    progress(NAME, &format!("small: writing {files} host files"));
    let tree = make_tree(ctx, s, dir)?;
    let bytes: u64 = tree.files.iter().map(|f| f.3 as u64).sum();
    let script = dir.join("small.debugfs");
    fs::write(&script, debugfs_script(&tree)).map_err(io_err(&script))?;
    let img_sk = dir.join("small-spacekit.img");
    let img_api = dir.join("small-spacekit-api.img");
    let img_dfs = dir.join("small-debugfs.img");
    let copy = dir.join("t-bytes");
    let inodes = Some(s.inodes);
    let debugfs_tree = |img: &Path| {
        let mut cmd = Command::new(&t.debugfs);
        cmd.arg("-w").arg("-f").arg(&script).arg(img);
        run_debugfs(&mut cmd, "debugfs -f (small files)")
    };

    progress(NAME, "small: verifying (rdump, Image::read, e2fsck)");
    make_image(t, &img_sk, s.small_image, inodes)?;
    spacekit_populate(t, &img_sk, &tree)?;
    make_image(t, &img_api, s.small_image, inodes)?;
    spacekit_tree(&img_api, &tree)?;
    make_image(t, &img_dfs, s.small_image, inodes)?;
    debugfs_tree(&img_dfs)?;
    verify(
        &format!("{files} small files written and read back (e2fsck -fn, every file compared)"),
        &[
            (
                "expected",
                SmallCheck {
                    files_equal: files,
                    entries: tree.dirs.len() + files,
                    first_bad: None,
                    e2fsck_exit: 0,
                },
            ),
            (
                "spacekit (read by debugfs rdump)",
                check_spacekit_tree(t, &img_sk, &tree, dir)?,
            ),
            (
                "spacekit-api (read by debugfs rdump)",
                check_spacekit_tree(t, &img_api, &tree, dir)?,
            ),
            (
                "debugfs (read by spacekit Image::read)",
                check_debugfs_tree(t, &img_dfs, &tree)?,
            ),
        ],
    )?;

    let m = time_rounds(
        NAME,
        s.reps,
        &format!("small ({files} files)"),
        &mut [
            Job::new(
                "debugfs",
                || {
                    make_image(t, &img_dfs, s.small_image, inodes)?;
                    settle(&t.sync, dir)
                },
                || debugfs_tree(&img_dfs),
            ),
            Job::new(
                "spacekit",
                || {
                    make_image(t, &img_sk, s.small_image, inodes)?;
                    settle(&t.sync, dir)
                },
                || spacekit_populate(t, &img_sk, &tree),
            ),
            Job::new(
                "spacekit-api",
                || {
                    make_image(t, &img_api, s.small_image, inodes)?;
                    settle(&t.sync, dir)
                },
                || spacekit_tree(&img_api, &tree),
            ),
            Job::new(
                "limit",
                || {
                    let _ = fs::remove_file(&copy);
                    settle(&t.sync, dir)
                },
                || host_concat(t, &tree, &copy),
            ),
        ],
    )?;
    let _ = fs::remove_file(&copy);
    let _ = fs::remove_dir_all(tree.host.parent().unwrap_or(&tree.host));
    for p in [&img_sk, &img_api, &img_dfs, &script] {
        let _ = fs::remove_file(p);
    }

    let dirs = tree.dirs.len() as u64;
    m.rows(report, |v| {
        Row::new("small", v)
            .field("bytes", bytes)
            .field("files", files as u64)
            .field("dirs", dirs)
            .field("block_size", BLOCK)
            .field(
                "run",
                match v {
                    "spacekit" => t.run_kind(),
                    "spacekit-api" => "in-process",
                    _ => "process",
                },
            )
            .field("reps", s.reps as u64)
    });
    let mut table = Table::new(
        &format!("{files} files of 1 to 16 KiB in {dirs} directories into a fresh ext4 image (4 KiB blocks); spacekit = spacekit ext4 populate ({}), spacekit-api = create + write per file in-process, debugfs one process with a script, limit the same bytes into one host file (cat, then sync); medians of {} rounds", if t.spacekit.is_some() { "one process" } else { "in-process" }, s.reps),
        &["case", "files", "dirs", "bytes", "debugfs", "spacekit", "spacekit-api", "limit", "debugfs/spacekit", "debugfs/api", "spacekit/limit"],
    );
    table.row(vec![
        "small".into(),
        files.to_string(),
        dirs.to_string(),
        bytes.to_string(),
        m.cell("debugfs"),
        m.cell("spacekit"),
        m.cell("spacekit-api"),
        m.cell("limit"),
        m.ratio_cell("debugfs", "spacekit"),
        m.ratio_cell("debugfs", "spacekit-api"),
        format!("{:.2}x", m.ratio("spacekit", "limit")),
    ]);
    report.table(table);
    let r = m.ratio("debugfs", "spacekit");
    bars.check(
        r >= 5.0,
        format!(
            "{files} small files: spacekit (ext4 populate) {} vs debugfs {}, {r:.1}x faster (create + write per file in-process {}; the bytes alone to one file + sync: {}) (bar: at least 5x faster than debugfs)",
            m.cell("spacekit"),
            m.cell("debugfs"),
            m.cell("spacekit-api"),
            m.cell("limit"),
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_mode() {
        let d = Sizes::of(Mode::Default);
        assert_eq!((d.big, d.files()), (1 << 30, 10_000));
        assert_eq!(d.outer * d.inner, 100);
        let q = Sizes::of(Mode::Quick);
        assert_eq!((q.big, q.files()), (8 << 20, 200));
        assert_eq!(size_label(d.big), "1 GiB");
        assert_eq!(size_label(q.big), "8 MiB");
    }

    #[test]
    fn the_script_makes_parents_first_and_writes_from_each_directory() {
        let tree = Tree {
            dirs: vec!["/t".into(), "/t/a0".into(), "/t/a0/b0".into()],
            files: vec![
                ("/t/a0/b0".into(), "f000".into(), "/h/f000".into(), 1),
                ("/t/a0/b0".into(), "f001".into(), "/h/f001".into(), 1),
            ],
            host: "/h".into(),
        };
        assert_eq!(
            debugfs_script(&tree),
            "mkdir /t\nmkdir /t/a0\nmkdir /t/a0/b0\ncd /t/a0/b0\nwrite /h/f000 f000\nwrite /h/f001 f001\n"
        );
    }

    #[test]
    fn first_difference_finds_the_byte() {
        let dir = std::env::temp_dir().join(format!("spacekit-ext4-write-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        fs::write(&a, [1, 2, 3]).unwrap();
        fs::write(&b, [1, 2, 3]).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), None);
        fs::write(&b, [1, 9, 3]).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), Some(1));
        fs::write(&b, [1, 2]).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), Some(2));
        fs::remove_dir_all(&dir).ok();
    }
}
