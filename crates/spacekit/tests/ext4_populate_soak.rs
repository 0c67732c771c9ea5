#![cfg(all(feature = "ext4", unix))]
//! Crash soak of `Populate`: a child process populates a generated tree
//! (a few hundred files with every kind of entry: `gen_tree::Spec` with
//! big sparse files, devices as root, hard links, xattrs, ACLs, 8 levels)
//! into a fresh image and is killed with SIGKILL at a random moment, again
//! and again.
//!
//! ```text
//! SPACEKIT_SOAK_KILLS=1000 cargo test -p spacekit --features ext4 --release \
//!     --test ext4_populate_soak -- --ignored --nocapture
//! ```
//!
//! `SPACEKIT_SOAK_KILLS` (default 200, what CI runs) kills in all,
//! alternating between two configurations (1 KiB blocks without a
//! journal, 4 KiB with one), and in each between the default block cache
//! and a 4 KiB one (write-behind from the first entries on: the children
//! write new directory blocks and inode-table blocks early);
//! `SPACEKIT_SOAK_SEED` replays a run's kill
//! times (the seed is printed first and in every failure).
//!
//! The child is this test binary re-executed with
//! `SPACEKIT_POP_SOAK_IMAGE` set: it prints `ready`, opens the image
//! read-write, populates the tree twice in one populate
//! (`Populate::add_dir`; the second pass replaces every entry but the
//! directories by a new copy), prints
//! `finishing` before `Populate::finish` (the one flush, through the redo
//! log) and `done` after it, then waits to be killed. The kill comes
//! uniformly within 1.3 times the time a whole populate took (measured by
//! a first child), so kills land before, inside and after the flush.
//!
//! After each kill the parent notes whether a redo log was left and
//! whether it was complete (a read-only open refuses a complete one),
//! opens the image read-write (replaying or dropping the log), checks
//! `verify()`, `e2fsck -fn` (exit 0) and reads the whole image through the
//! library (`gen_tree::image_walk`: every path's raw inode, xattrs, target
//! and contents, and the free counts). It must read exactly as the empty
//! image did (before `finishing`: always) or exactly as a reference image
//! populated in-process (after `done`: always); a kill inside `finish` may
//! give either. The reference itself is checked against the source
//! through the kernel (a read-only loop mount and `tree::diff`) where
//! mounting is allowed. The clamp is `i64::MAX` (no mtime moves; atime
//! and ctime become the mtime), so reading the source, which moves its
//! atimes, does not change what the image should hold.
//!
//! `populate_soak_catches_a_split_populate` (not ignored, a few seconds)
//! shows the soak fails: a child that makes one directory of the tree and
//! flushes it before the populate is caught.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::ext4::{Ext4Error, Image, OpenMode, Populate, PopulateOptions};
use spacekit::testing::Validate;
use spacekit_testkit::e2fs::{have_e2fsprogs, tool, TempDir};
use spacekit_testkit::gen_tree::{generate, image_walk, Spec};
use spacekit_testkit::tree::{self, Compare};

const TEST_NAME: &str = "populate_crash_soak";
/// Set in the child: the image to populate.
const CHILD_IMAGE: &str = "SPACEKIT_POP_SOAK_IMAGE";
/// Set in the child: the source tree.
const CHILD_SRC: &str = "SPACEKIT_POP_SOAK_SRC";
/// Set in the child by the self-test: flush part of the tree first.
const CHILD_SPLIT: &str = "SPACEKIT_POP_SOAK_SPLIT";
/// Set in the child for every other kill of each configuration: a block
/// cache budget of 4 KiB, so write-behind sends the blocks the committed
/// image cannot see out as the populate goes (`Image::set_cache_budget`).
const CHILD_BEHIND: &str = "SPACEKIT_POP_SOAK_BEHIND";
const TAG: &str = "POPSOAK ";
const UUID: &str = "01234567-89ab-cdef-0123-456789abcdef";

/// No mtime moves; atime, ctime and crtime become the mtime.
const OPTS: PopulateOptions = PopulateOptions {
    owner: None,
    clamp: Some(i64::MAX),
};

struct Config {
    name: &'static str,
    size: &'static str,
    args: &'static [&'static str],
}

const CONFIGS: &[Config] = &[
    Config {
        name: "1k",
        size: "24M",
        args: &["-b", "1024", "-N", "2048", "-O", "^has_journal"],
    },
    Config {
        name: "4k-journal",
        size: "48M",
        args: &["-b", "4096", "-N", "2048"],
    },
];

#[test]
#[ignore = "crash soak: run with --ignored (SPACEKIT_SOAK_KILLS, SPACEKIT_SOAK_SEED)"]
fn populate_crash_soak() {
    if let Some(image) = std::env::var_os(CHILD_IMAGE) {
        child(Path::new(&image));
        return;
    }
    if !have_e2fsprogs(&["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let kills = env_u64("SPACEKIT_SOAK_KILLS").unwrap_or(200);
    let seed = env_u64("SPACEKIT_SOAK_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    println!("populate crash soak: seed {seed} (SPACEKIT_SOAK_SEED={seed}), {kills} kills");
    let stats = soak(seed, kills, false).unwrap_or_else(|e| panic!("{e}"));
    println!("populate crash soak: {stats:#?}");
    if kills >= 20 {
        assert!(
            stats.in_finish_before + stats.in_finish_after > 0,
            "seed {seed}: no kill landed inside finish: {stats:?}"
        );
        assert!(stats.before_finish > 0 && stats.after_done > 0, "{stats:?}");
    }
}

/// A child that flushes one directory of the tree before populating is
/// caught: the image is then neither the empty one nor the reference.
#[test]
fn populate_soak_catches_a_split_populate() {
    if std::env::var_os(CHILD_IMAGE).is_some() || !have_e2fsprogs(&["mkfs.ext4", "e2fsck"]) {
        return;
    }
    match soak(7, 6, true) {
        Ok(stats) => panic!("a split populate passed: {stats:?}"),
        Err(e) => {
            assert!(
                e.contains("neither before nor after"),
                "failed otherwise: {e}"
            );
            println!("split populate caught: {}", e.lines().next().unwrap_or(""));
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?}: {e}")),
    )
}

fn say(line: &str) {
    println!("{TAG}{line}");
}

/// The tree added twice in one populate: the second pass merges every
/// directory and replaces every other entry by a new copy (the later
/// entry wins, as for a path a tar archive holds twice), hard links
/// joined again to their file's new inode.
fn populate_twice(pop: &mut Populate<'_>, src: &Path) {
    pop.add_dir(src).unwrap();
    pop.add_dir(src).unwrap();
    assert!(pop.report().replaced > 0, "{:?}", pop.report());
}

/// The child: populate, flush, then wait for the kill.
fn child(image: &Path) {
    let src = PathBuf::from(std::env::var_os(CHILD_SRC).unwrap());
    say("ready");
    let mut img = Image::open(image, OpenMode::ReadWrite).unwrap();
    if std::env::var_os(CHILD_BEHIND).is_some() {
        img.set_cache_budget(Some(4096));
    }
    if std::env::var_os(CHILD_SPLIT).is_some() {
        img.mkdir("/a", 0o755).unwrap();
        img.flush().unwrap();
        say("split");
        thread::sleep(Duration::from_millis(20));
    }
    let mut pop = Populate::new(&mut img, "/", OPTS).unwrap();
    populate_twice(&mut pop, &src);
    say("finishing");
    pop.finish().unwrap();
    say("done");
    thread::sleep(Duration::from_secs(120));
}

type Walk = std::collections::BTreeMap<Vec<u8>, String>;

/// One configuration: the empty image, what it reads before and after
/// the populate.
struct Case {
    cfg: &'static Config,
    base: Vec<u8>,
    before: Walk,
    after: Walk,
    after_bytes: Vec<u8>,
    work: PathBuf,
}

#[derive(Debug, Default)]
struct Stats {
    kills: u64,
    /// Killed before `finishing`: as before (always).
    before_finish: u64,
    /// Killed inside `finish`: as before / as after.
    in_finish_before: u64,
    in_finish_after: u64,
    /// Killed after `done`: as after (always).
    after_done: u64,
    /// Redo logs left: complete (replayed), incomplete (dropped).
    redo_complete: u64,
    redo_incomplete: u64,
    /// As after and byte-identical to the reference.
    after_same_bytes: u64,
    /// A whole populate in the child, as measured.
    populate: Duration,
    elapsed: Duration,
}

fn mkfs(path: &Path, cfg: &Config) {
    let out = Command::new(tool("mkfs.ext4"))
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-F", "-q", "-U", UUID, "-E", &format!("hash_seed={UUID}")])
        .args(cfg.args)
        .arg(path)
        .arg(cfg.size)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4 {:?}", cfg.args);
}

fn fsck(path: &Path) -> Result<(), String> {
    let out = Command::new(tool("e2fsck"))
        .arg("-fn")
        .arg(path)
        .output()
        .map_err(|e| format!("e2fsck: {e}"))?;
    if out.status.code() == Some(0) {
        return Ok(());
    }
    Err(format!(
        "e2fsck -fn exits {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The reference populate of `src` into `path`, checked against the source
/// through the kernel where a loop mount is allowed.
fn reference(path: &Path, src: &Path, dir: &TempDir, name: &str) {
    let mut img = Image::open(path, OpenMode::ReadWrite).unwrap();
    let mut pop = Populate::new(&mut img, "/", OPTS).unwrap();
    populate_twice(&mut pop, src);
    pop.finish().unwrap();
    drop(img);
    fsck(path).unwrap();
    let mnt = dir.path(&format!("mnt-{name}"));
    std::fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(path)
        .arg(&mnt)
        .output();
    match m {
        Ok(o) if o.status.success() => {
            let d = tree::diff(src, &mnt, Compare::default());
            let um = Command::new("umount").arg(&mnt).status();
            assert!(um.is_ok_and(|s| s.success()));
            let d = d.unwrap();
            assert!(
                d.is_empty(),
                "{name}: the reference differs from its source: {d:#?}"
            );
        }
        _ => println!("populate soak: no loop mount: the reference is not checked by the kernel"),
    }
}

/// Runs `kills` kills (`split`: the broken child); the first error.
fn soak(seed: u64, kills: u64, split: bool) -> Result<Stats, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = TempDir::new("pop-soak");
    let src = dir.path("src");
    generate(
        &src,
        &Spec {
            big_files: true,
            depth: 8,
            ..Spec::small(seed | 1, 300)
        },
    );
    let mut cases: Vec<Case> = CONFIGS
        .iter()
        .map(|cfg| {
            let base = dir.path(&format!("{}.img", cfg.name));
            mkfs(&base, cfg);
            let before = image_walk(&mut Image::open(&base, OpenMode::ReadOnly).unwrap()).unwrap();
            let r = dir.path(&format!("{}-ref.img", cfg.name));
            std::fs::copy(&base, &r).unwrap();
            reference(&r, &src, &dir, cfg.name);
            let after = image_walk(&mut Image::open(&r, OpenMode::ReadOnly).unwrap()).unwrap();
            Case {
                cfg,
                base: std::fs::read(&base).unwrap(),
                before,
                after,
                after_bytes: std::fs::read(&r).unwrap(),
                work: dir.path(&format!("{}-work.img", cfg.name)),
            }
        })
        .collect();
    let mut stats = Stats::default();
    // How long a child's populate takes: one run to its end.
    let probe = &cases[0];
    std::fs::write(&probe.work, &probe.base).unwrap();
    let (lines, took) = run_child(&probe.work, &src, None, split, false)?;
    if !split && !lines.iter().any(|l| l == "done") {
        return Err(format!("the probe child did not finish: {lines:?}"));
    }
    stats.populate = took;
    let max_delay = took.mul_f64(1.3).max(Duration::from_millis(5));
    let start = Instant::now();
    for kill in 0..kills {
        let n = cases.len();
        let case = &mut cases[kill as usize % n];
        let delay = Duration::from_micros(rng.random_range(0..=max_delay.as_micros() as u64));
        std::fs::write(&case.work, &case.base).unwrap();
        let _ = std::fs::remove_file(Image::redo_log_path(&case.work));
        let behind = (kill / n as u64) % 2 == 1;
        let (lines, _) = run_child(&case.work, &src, Some(delay), split, behind)?;
        check(case, &lines, &mut stats).map_err(|e| {
            let mut msg = format!(
                "populate soak failed: seed {seed} (SPACEKIT_SOAK_SEED={seed}), kill {kill} \
                 after {delay:?}, config {}: {e}\nthe child's lines: {lines:?}",
                case.cfg.name,
            );
            // (The self-test's broken child leaves nothing behind.)
            if !split {
                let keep =
                    std::env::temp_dir().join(format!("spacekit-pop-soak-failed-{seed}-{kill}"));
                let _ = std::fs::create_dir_all(&keep);
                let _ = std::fs::copy(&case.work, keep.join("image"));
                msg += &format!("\nimage kept in {}", keep.display());
            }
            msg
        })?;
        stats.kills += 1;
        if (kill + 1) % 100 == 0 {
            println!("  {} kills, {:.0?}", kill + 1, start.elapsed());
        }
    }
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// Runs a child on `image` and kills it `delay` after its `ready` (or lets
/// it finish, with `None`); returns its lines and the time from `ready` to
/// `done` (or to the kill).
fn run_child(
    image: &Path,
    src: &Path,
    delay: Option<Duration>,
    split: bool,
    behind: bool,
) -> Result<(Vec<String>, Duration), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", TEST_NAME, "--ignored", "--nocapture"])
        .env(CHILD_IMAGE, image)
        .env(CHILD_SRC, src)
        .env_remove(CHILD_SPLIT)
        .env_remove(CHILD_BEHIND);
    if split {
        cmd.env(CHILD_SPLIT, "1");
    }
    if behind {
        cmd.env(CHILD_BEHIND, "1");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn the child: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(l) = line.find(TAG).map(|i| &line[i + TAG.len()..]) {
                let _ = tx.send((l.to_owned(), Instant::now()));
                lines.push(l.to_owned());
            }
        }
        lines
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let ready = rx.recv_timeout(Duration::from_secs(60));
    let mut took = Duration::ZERO;
    if let Ok((_, t0)) = &ready {
        match delay {
            Some(d) => thread::sleep(d),
            None => loop {
                match rx.recv_timeout(Duration::from_secs(120)) {
                    Ok((l, t)) if l == "done" => {
                        took = t - *t0;
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            },
        }
        if took.is_zero() {
            took = t0.elapsed();
        }
    }
    let _ = child.kill(); // SIGKILL
    let status = child.wait().map_err(|e| e.to_string())?;
    let lines = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    if ready.is_err() || status.signal() != Some(9) {
        return Err(format!(
            "the child {} ({status}); its lines: {lines:?}\nstderr:\n{stderr}",
            if ready.is_ok() {
                "died before the kill"
            } else {
                "never got ready"
            }
        ));
    }
    Ok((lines, took))
}

/// The image after a kill: replayed, clean, and as before or as after.
fn check(case: &Case, lines: &[String], stats: &mut Stats) -> Result<(), String> {
    let finishing = lines.iter().any(|l| l == "finishing");
    let done = lines.iter().any(|l| l == "done");
    let p = &case.work;
    let log = Image::redo_log_path(p);
    let mut redo = "no redo log";
    if log.exists() {
        match Image::open(p, OpenMode::ReadOnly) {
            Err(Ext4Error::PendingRedoLog { .. }) => {
                stats.redo_complete += 1;
                redo = "a complete redo log";
            }
            Ok(_) => {
                stats.redo_incomplete += 1;
                redo = "an incomplete redo log";
            }
            Err(e) => return Err(format!("read-only open with a redo log: {e}")),
        }
    }
    let mut img = Image::open(p, OpenMode::ReadWrite)
        .map_err(|e| format!("read-write open ({redo}): {e}"))?;
    if log.exists() {
        return Err(format!("{redo} still there after a read-write open"));
    }
    let report = img.verify().map_err(|e| format!("verify: {e}"))?;
    if !report.is_clean() {
        return Err(format!("verify ({redo}): {:#?}", report.mismatches));
    }
    img.validate().map_err(|e| format!("validate: {e:?}"))?;
    let now = image_walk(&mut img).map_err(|e| format!("walk ({redo}): {e}"))?;
    drop(img);
    fsck(p).map_err(|e| format!("{e} ({redo})"))?;
    let (is_before, is_after) = (now == case.before, now == case.after);
    let when = if done {
        "after done"
    } else if finishing {
        "inside finish"
    } else {
        "before finish"
    };
    match (is_before, is_after) {
        (true, _) if !done => {
            if finishing {
                stats.in_finish_before += 1;
            } else {
                stats.before_finish += 1;
            }
        }
        (_, true) if finishing => {
            if done {
                stats.after_done += 1;
            } else {
                stats.in_finish_after += 1;
            }
            if std::fs::read(p).map_err(|e| e.to_string())? == case.after_bytes {
                stats.after_same_bytes += 1;
            }
        }
        (true, _) | (_, true) => {
            return Err(format!(
                "killed {when} ({redo}): the image reads as {}",
                if is_before { "before" } else { "after" }
            ))
        }
        (false, false) => {
            let first = now
                .iter()
                .find(|(k, v)| case.after.get(*k) != Some(v) && case.before.get(*k) != Some(v))
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned());
            return Err(format!(
                "killed {when} ({redo}): the image reads neither before nor after \
                 (first path off both: {first:?})"
            ));
        }
    }
    Ok(())
}
