#![cfg(all(feature = "std", unix))]
//! Crash soak of the snapshot writers: a child process writes full
//! snapshots, diffs and merges over the same three paths, again and again,
//! and is killed with SIGKILL at a random moment.
//!
//! ```text
//! SPACEKIT_SOAK_KILLS=500 cargo test -p spacekit --release --test snapshot_soak -- --nocapture
//! ```
//!
//! `SPACEKIT_SOAK_KILLS` (default 20) kills in all; `SPACEKIT_SOAK_SEED`
//! replays a run's kill times (the seed is printed first and in every
//! failure); `SPACEKIT_SOAK_MAX_DELAY_MS` (default 1000) bounds the time
//! from the child's first line to the kill.
//!
//! The child is this test binary re-executed (`--exact snapshot_crash_soak
//! --nocapture`) with `SPACEKIT_SNAP_SOAK_DIR` set. Over two 2 MiB
//! memories `A` and `B` (half their pages zero) it loops: `write_full` of
//! `A` or `B` to `full`, `write_diff` of that memory after a fixed set of
//! changes (`A'` or `B'`: pages rewritten, pages zeroed) against it to
//! `diff`, `merge(full, [diff])` to `merged`, alternating `A` and `B`.
//!
//! After each kill the parent checks each path: absent (before the first
//! rename), or a whole snapshot that opens, verifies (every CRC) and holds
//! what one of the writes wrote: `full` is `A` or `B`, `diff` applies to
//! `A` or `B`, `merged` is `A'` or `B'`. Never a half-written file. The
//! child's temporary files may be left beside them; nothing reads them.
//!
//! `soak_catches_a_torn_write` (a few seconds) shows the soak fails: a
//! child that writes `full` in place, in two halves, is caught.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::snapshot::{self, Kind, Snapshot, SnapshotId};
use spacekit_testkit::e2fs::TempDir;
use spacekit_testkit::rng::Rng;

const TEST_NAME: &str = "snapshot_crash_soak";
const SELF_TEST: &str = "soak_catches_a_torn_write";
/// Set in the child: the directory of the three paths.
const CHILD_DIR: &str = "SPACEKIT_SNAP_SOAK_DIR";
/// Set in the child by the self-test: write `full` in place.
const CHILD_SABOTAGE: &str = "SPACEKIT_SNAP_SOAK_SABOTAGE";
/// Starts the message of a failed check after a kill (not of a child
/// that failed to start).
const CAUGHT: &str = "after a kill:";
const PAGE: u64 = 4096;
const PAGES: u64 = 512;

/// Memory `A` (`which` 0) or `B` (1): every other page random, the rest
/// zero.
fn memory(which: u64) -> Vec<u8> {
    let mut rng = Rng(0x50A4 + which);
    let mut m = vec![0u8; (PAGES * PAGE) as usize];
    for p in (0..PAGES as usize).step_by(2) {
        rng.fill(&mut m[p * PAGE as usize..][..PAGE as usize]);
        m[p * PAGE as usize] |= 1;
    }
    m
}

/// The memory after the changes a diff carries, and their table.
fn changed(mut m: Vec<u8>) -> (Vec<u8>, MemoryRangeTable) {
    let mut t = MemoryRangeTable::new();
    for p in (0..PAGES).step_by(37) {
        let at = (p * PAGE) as usize;
        if p.is_multiple_of(2) {
            m[at..at + PAGE as usize].fill(0);
        } else {
            m[at..at + PAGE as usize].fill(p as u8 | 1);
        }
        t.push(MemoryRange {
            gpa: p * PAGE,
            length: PAGE,
        });
    }
    (m, t)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The child: writes the three files forever.
fn child(dir: &Path) {
    let mems = [memory(0), memory(1)];
    let next: Vec<_> = mems.iter().map(|m| changed(m.clone())).collect();
    println!("ready");
    for i in 0.. {
        let k = i % 2;
        let full = if std::env::var_os(CHILD_SABOTAGE).is_some() {
            torn_write(&mems[k], dir)
        } else {
            snapshot::write_full(&mems[k], PAGE, dir.join("full")).unwrap()
        };
        let (m2, t) = &next[k];
        snapshot::write_diff(m2, t, &full, dir.join("diff")).unwrap();
        snapshot::merge(dir.join("full"), &[dir.join("diff")], dir.join("merged")).unwrap();
        println!("round {i}");
    }
}

/// The self-test's broken writer: the snapshot's bytes written over
/// `full` in place, in two halves.
fn torn_write(mem: &[u8], dir: &Path) -> snapshot::SnapshotInfo {
    use std::io::Write;
    let info = snapshot::write_full(mem, PAGE, dir.join("side")).unwrap();
    let bytes = std::fs::read(dir.join("side")).unwrap();
    let mut f = std::fs::File::create(dir.join("full")).unwrap();
    f.write_all(&bytes[..bytes.len() / 2]).unwrap();
    thread::sleep(Duration::from_millis(30));
    f.write_all(&bytes[bytes.len() / 2..]).unwrap();
    info
}

/// What every path may hold.
struct Expect {
    full_ids: [SnapshotId; 2],
    merged_ids: [SnapshotId; 2],
}

impl Expect {
    fn new() -> Expect {
        let id = |m: &[u8]| SnapshotId::full(m.len() as u64, spacekit::crc32c::checksum(m));
        let (a, b) = (memory(0), memory(1));
        Expect {
            full_ids: [id(&a), id(&b)],
            merged_ids: [id(&changed(a).0), id(&changed(b).0)],
        }
    }

    /// Checks the three paths after a kill.
    fn check(&self, dir: &Path) -> Result<(), String> {
        for (name, kind) in [
            ("full", Kind::Full),
            ("diff", Kind::Diff),
            ("merged", Kind::Full),
        ] {
            let p = dir.join(name);
            if !p.exists() {
                continue;
            }
            let snap = Snapshot::open(&p).map_err(|e| format!("{name}: {e}"))?;
            let info = snap.info();
            snap.verify(&mut |_, _| {})
                .map_err(|e| format!("{name}: {e}"))?;
            let ok = match name {
                "full" => self.full_ids.contains(&info.id),
                "merged" => self.merged_ids.contains(&info.id),
                _ => info.base_id.is_some_and(|b| self.full_ids.contains(&b)),
            };
            if info.kind != kind || info.raw || !ok {
                return Err(format!("{name}: not what was written: {info:?}"));
            }
        }
        Ok(())
    }
}

/// Runs `kills` children in `dir`, each killed after a random delay;
/// checks after each kill. The first failure, with the seed and kill.
fn soak(dir: &Path, kills: u64, seed: u64, sabotage: bool) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let max_delay = env_u64("SPACEKIT_SOAK_MAX_DELAY_MS").unwrap_or(1000);
    let expect = Expect::new();
    let mut rng = Rng(seed | 1);
    let mut rounds = 0u64;
    for kill in 0..kills {
        let test = if sabotage { SELF_TEST } else { TEST_NAME };
        let mut cmd = Command::new(&exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if sabotage {
            cmd.env(CHILD_SABOTAGE, "1");
        }
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        let reader = thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        // The harness prints `test NAME ... ` before the child's first line.
        let started = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) if l.ends_with("ready") => break,
                Ok(_) if started.elapsed() < Duration::from_secs(60) => continue,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("seed {seed} kill {kill}: the child did not start"));
                }
            }
        }
        let delay = Duration::from_millis(rng.below(max_delay + 1));
        let t = Instant::now();
        thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().map_err(|e| e.to_string())?;
        let _ = reader.join();
        rounds += rx.try_iter().filter(|l| l.starts_with("round")).count() as u64;
        if status.signal() != Some(9) {
            return Err(format!(
                "seed {seed} kill {kill}: the child ended by itself ({status})"
            ));
        }
        expect.check(dir).map_err(|e| {
            format!(
                "{CAUGHT} seed {seed} kill {kill} after {:?}: {e}",
                t.elapsed()
            )
        })?;
    }
    println!("{kills} kills, {rounds} whole rounds written between them");
    Ok(())
}

fn seed() -> u64 {
    env_u64("SPACEKIT_SOAK_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

#[test]
fn snapshot_crash_soak() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(&PathBuf::from(dir));
        return;
    }
    let seed = seed();
    let kills = env_u64("SPACEKIT_SOAK_KILLS").unwrap_or(20);
    println!("snapshot soak: seed {seed}, {kills} kills");
    let dir = TempDir::new("snap-soak");
    if let Err(e) = soak(&dir.path("."), kills, seed, false) {
        panic!("{e}");
    }
}

#[test]
fn soak_catches_a_torn_write() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(&PathBuf::from(dir));
        return;
    }
    let dir = TempDir::new("snap-soak-torn");
    // Kills land inside the 30 ms between the halves now and then; 40
    // tries make missing it every time very unlikely.
    let caught = (0..40).any(|i| match soak(&dir.path("."), 1, 1000 + i, true) {
        Ok(()) => false,
        Err(e) if e.starts_with(CAUGHT) => true,
        Err(e) => panic!("{e}"),
    });
    assert!(caught, "a torn in-place write of `full` was never caught");
}
