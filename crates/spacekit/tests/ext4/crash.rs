//! Crash safety: a write failure injected at every step of a flush
//! (`Faults::fail_write_after` of a `FaultyDevice`) leaves an image that the redo log
//! brings to the old or the new state, e2fsck-clean; pending, incomplete and
//! foreign logs; a retried flush.

use std::fs;
use std::path::Path;

use spacekit::ext4::{AllocRequest, Ext4Error, Image, OpenMode};

use crate::fixtures::*;
use crate::oracles::*;

/// Applies a transaction to an open image.
type Txn = fn(&mut Image);

/// Allocations in an initialised group, in a BLOCK_UNINIT group and an inode
/// in an INODE_UNINIT group: several bitmaps, descriptors and the
/// superblock change.
fn txn_alloc(img: &mut Image) {
    let g = block_uninit_group_without_backup(img).unwrap();
    let first = img.group(g).unwrap().first_block;
    img.alloc_blocks(AllocRequest {
        goal: None,
        len: 20,
        align: 1,
    })
    .unwrap();
    img.alloc_blocks(AllocRequest {
        goal: Some(first + 3),
        len: 9,
        align: 1,
    })
    .unwrap();
    img.alloc_inode(Some(g + 1), false).unwrap();
}

/// Allocate and free again in uninitialised groups: the net change is the
/// materialised bitmaps, and the image is e2fsck-clean whichever way a crash
/// goes.
fn txn_materialise(img: &mut Image) {
    let g = block_uninit_group_without_backup(img).unwrap();
    let first = img.group(g).unwrap().first_block;
    let b = img
        .alloc_blocks(AllocRequest {
            goal: Some(first + 100),
            len: 50,
            align: 1,
        })
        .unwrap();
    img.free_blocks(b, 50).unwrap();
    let ino = img.alloc_inode(Some(g), true).unwrap();
    img.free_inode(ino, true).unwrap();
}

/// `txn_alloc` on a copy of `base`, flushed whole: the image's bytes after
/// it, and the flush's write steps (as `Faults::steps` counts them).
fn alloc_flushed(base: &Path, dir: &TempDir) -> (Vec<u8>, usize) {
    let p = copy(base, dir, "flushed.img");
    let (mut img, faults) = open_faulty(&p);
    txn_alloc(&mut img);
    let from = faults.steps();
    img.flush().unwrap();
    let steps = faults.steps() - from;
    drop(img);
    (fs::read(&p).unwrap(), steps)
}

fn crash_at_every_step(base: &Path, dir: &TempDir, txn: Txn, what: &str) -> usize {
    let before = fs::read(base).unwrap();
    let reference = copy(base, dir, "reference.img");
    let mut img = open_rw(&reference);
    txn(&mut img);
    img.flush().unwrap();
    drop(img);
    let after = fs::read(&reference).unwrap();
    assert_ne!(before, after, "{what}");
    let after_clean = e2fsck(&reference).0 == 0;

    let (mut saw_before, mut saw_after) = (false, false);
    let mut n = 0;
    loop {
        let p = copy(base, dir, "crash.img");
        let log = Image::redo_log_path(&p);
        let (mut img, faults) = open_faulty(&p);
        txn(&mut img);
        faults.fail_write_after(n);
        let res = img.flush();
        drop(img); // the crash: no further writes
        if res.is_ok() {
            assert_eq!(fs::read(&p).unwrap(), after, "{what}");
            if !log.exists() {
                break;
            }
            // The removal of the log failed: the change is complete, and the
            // next open replays the log harmlessly and removes it.
            drop(open_rw(&p));
            assert!(!log.exists(), "{what} step {n}");
            assert_eq!(fs::read(&p).unwrap(), after, "{what} step {n}");
            n += 1;
            continue;
        }
        let err = res.unwrap_err();
        assert!(
            matches!(&err, Ext4Error::Io { .. }),
            "{what} step {n}: {err}"
        );
        // Re-opening replays (or discards) the log.
        let img = open_rw(&p);
        assert!(!log.exists(), "{what} step {n}: log left after open");
        assert_verify_clean(&img, &format!("{what} step {n}"));
        drop(img);
        let now = fs::read(&p).unwrap();
        let (code, text) = e2fsck(&p);
        if now == before {
            saw_before = true;
            assert_eq!(code, 0, "{what} step {n}: rolled back:\n{text}");
        } else if now == after {
            saw_after = true;
            if after_clean {
                assert_eq!(code, 0, "{what} step {n}:\n{text}");
            } else {
                // Only the allocation itself shows, as a leak.
                assert_eq!(code, 4, "{what} step {n}:\n{text}");
                assert!(!text.contains("checksum"), "{what} step {n}:\n{text}");
            }
        } else {
            panic!("{what}: after a failure at step {n} the image is neither before nor after");
        }
        n += 1;
    }
    assert!(saw_before && saw_after, "{what}: {n} steps");
    n
}

#[test]
fn crash_at_every_flush_step_recovers() {
    require_e2fsprogs!();
    let dir = TempDir::new("crash");
    for cfg in [K1, CONFIGS[1], CONFIGS[9]] {
        let base = mkfs(&dir, &cfg);
        let steps = crash_at_every_step(&base, &dir, txn_alloc, &format!("{}: alloc", cfg.name));
        // log contents + trailer + its sync, >= 5 metadata blocks, sync,
        // removal of the log.
        assert!(steps >= 3 + 5 + 2, "{}: {steps} steps", cfg.name);
        crash_at_every_step(
            &base,
            &dir,
            txn_materialise,
            &format!("{}: materialise", cfg.name),
        );
    }
}

#[test]
fn redo_log_pending_incomplete_foreign_and_retry() {
    require_e2fsprogs!();
    let dir = TempDir::new("redo");
    let base = mkfs(&dir, &K1);
    let before = fs::read(&base).unwrap();
    let (after, _) = alloc_flushed(&base, &dir);

    // Failing at the first image write leaves a complete log: a read-only
    // open refuses, a read-write one replays.
    let p = copy(&base, &dir, "pending.img");
    let log = Image::redo_log_path(&p);
    let (mut img, faults) = open_faulty(&p);
    txn_alloc(&mut img);
    faults.fail_write_after(3);
    let e = img.flush().unwrap_err().to_string();
    assert!(e.contains("committed in the redo log"), "{e}");
    drop(img);
    assert!(log.exists());
    let saved_log = fs::read(&log).unwrap();
    assert_ne!(fs::read(&p).unwrap(), before, "half a block was written");
    assert!(matches!(
        open_err(&p, OpenMode::ReadOnly),
        Ext4Error::PendingRedoLog { .. }
    ));
    assert_eq!(fs::read(&log).unwrap(), saved_log);
    drop(open_rw(&p));
    assert!(!log.exists());
    assert_eq!(fs::read(&p).unwrap(), after);

    // The same log beside another file system is refused, nothing written.
    let other = mkfs_with_uuid(
        &dir,
        &Config {
            name: "other",
            ..K1
        },
        OTHER_UUID,
    );
    let other_log = Image::redo_log_path(&other);
    fs::write(&other_log, &saved_log).unwrap();
    let other_bytes = fs::read(&other).unwrap();
    assert!(matches!(
        Image::open(&other, OpenMode::ReadWrite),
        Err(Ext4Error::RedoLogMismatch { .. })
    ));
    assert_eq!(fs::read(&other).unwrap(), other_bytes);
    fs::remove_file(&other_log).unwrap();

    // A torn log (failure writing its trailer): the flush removes it; the
    // image was never touched.
    let p = copy(&base, &dir, "torn.img");
    let log = Image::redo_log_path(&p);
    let (mut img, faults) = open_faulty(&p);
    txn_alloc(&mut img);
    faults.fail_write_after(1);
    assert!(img.flush().is_err());
    drop(img);
    assert!(!log.exists(), "a log that failed is removed");
    assert_eq!(fs::read(&p).unwrap(), before);
    // One left by a crash instead: read-only ignores it, read-write
    // discards it.
    fs::write(&log, &saved_log[..saved_log.len() - 3]).unwrap();
    assert_verify_clean(&open_ro(&p), "torn log, read-only");
    assert!(log.exists());
    drop(open_rw(&p));
    assert!(!log.exists());
    assert_eq!(fs::read(&p).unwrap(), before);

    // A failure syncing the log (its bytes may all be on disk): the flush
    // removes it, so the next open does not commit what failed.
    for step in [2, 3] {
        let p = copy(&base, &dir, "synclog.img");
        let (mut img, faults) = open_faulty(&p);
        txn_alloc(&mut img);
        faults.fail_write_after(step);
        let e = img.flush().unwrap_err().to_string();
        drop(img);
        if e.contains("redo log") && !e.contains("committed") {
            assert!(!Image::redo_log_path(&p).exists(), "step {step}: {e}");
            drop(open_rw(&p));
            assert_eq!(fs::read(&p).unwrap(), before, "step {step}: {e}");
        } else {
            // Past the log: committed, and the message says so.
            assert!(e.contains("committed"), "step {step}: {e}");
            drop(open_rw(&p));
            assert_eq!(fs::read(&p).unwrap(), after, "step {step}: {e}");
        }
    }

    // A flush that failed half-way can be retried on the same image.
    for n in [1, 3, 6] {
        let p = copy(&base, &dir, "retry.img");
        let (mut img, faults) = open_faulty(&p);
        txn_alloc(&mut img);
        faults.fail_write_after(n);
        assert!(img.flush().is_err());
        assert!(img.is_dirty());
        img.flush().unwrap();
        assert!(!img.is_dirty());
        drop(img);
        assert!(!Image::redo_log_path(&p).exists());
        assert_eq!(fs::read(&p).unwrap(), after, "retry after step {n}");
    }
}

/// The flush removes its log without fsyncing the directory, so after a
/// power failure a finished flush's log can come back. It is replayed
/// (harmlessly: the same bytes) while the image still holds what the log
/// writes, and discarded, not replayed over another tool's work, once that
/// tool changed one of the log's blocks.
#[test]
fn a_finished_flushs_log_that_comes_back() {
    require_e2fsprogs!();
    let dir = TempDir::new("stale");
    let base = mkfs(&dir, &K1);
    // The steps of a whole flush, to fail at the last one: the log's
    // removal. The image is then complete and the log still there, as a
    // power failure before the removal reached the disk leaves them.
    let (after, steps) = alloc_flushed(&base, &dir);

    let p = copy(&base, &dir, "back.img");
    let log = Image::redo_log_path(&p);
    let (mut img, faults) = open_faulty(&p);
    txn_alloc(&mut img);
    faults.fail_write_after(steps - 1);
    // The change is complete when the removal fails: no error.
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&p).unwrap(), after, "the flush wrote everything");
    let saved = fs::read(&log).unwrap();

    // Current: a read-only open sees it pending, a read-write one replays
    // it; nothing changes.
    assert!(matches!(
        open_err(&p, OpenMode::ReadOnly),
        Ext4Error::PendingRedoLog { .. }
    ));
    drop(open_rw(&p));
    assert!(!log.exists());
    assert_eq!(fs::read(&p).unwrap(), after);

    // debugfs makes a directory: group 0's descriptor block, one of the
    // log's blocks, now holds neither the log's bytes nor the old ones.
    debugfs_w(&p, &dir, "mkdir theirs");
    let theirs = fs::read(&p).unwrap();
    assert_ne!(theirs, after);
    fs::write(&log, &saved).unwrap();
    // Stale: a read-only open ignores it, a read-write one removes it and
    // keeps debugfs's change.
    assert!(open_ro(&p).lookup("/theirs").is_ok());
    assert!(log.exists());
    let mut img = open_rw(&p);
    assert!(!log.exists(), "a stale log is removed");
    assert!(img.lookup("/theirs").is_ok(), "debugfs's change kept");
    drop(img);
    assert_eq!(fs::read(&p).unwrap(), theirs, "nothing replayed");
    assert_verify_clean(&open_ro(&p), "after a stale log");
}

/// A flush cut short half-way in place, then another program (debugfs)
/// writes the image: the log is neither replayed over that program's work
/// nor dropped, which would make the half-done flush permanent. Every open
/// is refused, saying why, and nothing is written, until the log is
/// removed.
#[test]
fn a_cut_short_flush_written_over_by_another_program_is_refused() {
    require_e2fsprogs!();
    let dir = TempDir::new("conflict");
    let base = mkfs(&dir, &K1);
    // The last step before the image's sync: some in-place writes done,
    // some not (a torn one included).
    let (_, steps) = alloc_flushed(&base, &dir);
    let mut refused = 0;
    for n in 4..steps - 2 {
        let p = copy(&base, &dir, "cut.img");
        let log = Image::redo_log_path(&p);
        let (mut img, faults) = open_faulty(&p);
        txn_alloc(&mut img);
        faults.fail_write_after(n);
        assert!(img.flush().is_err());
        drop(img);
        assert!(log.exists());
        // `-n`: debugfs writes even where a checksum fails (the flush left
        // some blocks new, some old).
        let o = e2fs("debugfs")
            .args(["-w", "-n", "-R", "mkdir theirs"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(o.status.success());
        let saved = (fs::read(&p).unwrap(), fs::read(&log).unwrap());
        match Image::open(&p, OpenMode::ReadWrite) {
            Err(Ext4Error::RedoLogMismatch { reason, .. }) => {
                assert!(reason.contains("cut short"), "{reason}");
                assert!(matches!(
                    open_err(&p, OpenMode::ReadOnly),
                    Ext4Error::RedoLogMismatch { .. }
                ));
                assert_eq!(
                    (fs::read(&p).unwrap(), fs::read(&log).unwrap()),
                    saved,
                    "step {n}: a refused open wrote"
                );
                refused += 1;
            }
            // debugfs's writes may miss every sector the flush had left
            // old: then the log is current (replayed) or stale (dropped).
            Ok(img) => drop(img),
            Err(e) => panic!("step {n}: {e}"),
        }
    }
    assert!(refused > 0, "no step left a conflict ({steps} steps)");
}

/// The log goes beside the image file itself: a flush cut short through a
/// symlink leaves a log that an open by the real path finds (and replays),
/// instead of that open reading and writing a half-updated image.
#[test]
fn a_crash_through_a_symlink_is_found_by_the_real_path() {
    require_e2fsprogs!();
    let dir = TempDir::new("symlinked");
    let base = mkfs(&dir, &K1);
    let (after, _) = alloc_flushed(&base, &dir);

    let real = copy(&base, &dir, "real.img");
    fs::create_dir_all(dir.path("cfg")).unwrap();
    let link = dir.path("cfg/disk.img");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(Image::redo_log_path(&link), Image::redo_log_path(&real));
    let (mut img, faults) = open_faulty(&link);
    txn_alloc(&mut img);
    faults.fail_write_after(4); // in place, after the log's sync
    assert!(img.flush().is_err());
    drop(img);
    assert!(Image::redo_log_path(&real).exists());
    assert!(!dir.path("cfg/disk.img.spacekit-redo").exists());
    assert!(matches!(
        open_err(&real, OpenMode::ReadOnly),
        Ext4Error::PendingRedoLog { .. }
    ));
    drop(open_rw(&real));
    assert!(
        fs::read(&real).unwrap() == after,
        "replayed by the real path"
    );

    // A log an older version left beside the link (the path it was given)
    // is still found through the link, and replayed.
    let real = copy(&base, &dir, "real.img");
    let (mut img, faults) = open_faulty(&link);
    txn_alloc(&mut img);
    faults.fail_write_after(4);
    assert!(img.flush().is_err());
    drop(img);
    fs::rename(
        Image::redo_log_path(&real),
        dir.path("cfg/disk.img.spacekit-redo"),
    )
    .unwrap();
    drop(open_rw(&link));
    assert!(fs::read(&real).unwrap() == after, "the old log replayed");
    assert!(!dir.path("cfg/disk.img.spacekit-redo").exists());
}

/// A flush that fails after its log is synced (committed, partly in
/// place), then a retry on the same image that fails at any step: the
/// committed change is never lost. The retry first completes the earlier
/// flush from its log; its own log never replaces that one before then.
/// After the next open the image is the committed state, whatever step
/// the retry failed at.
#[test]
fn a_retry_after_a_committed_failure_keeps_the_commit() {
    require_e2fsprogs!();
    let dir = TempDir::new("retry-commit");
    let base = mkfs(&dir, &K1);
    let (after, _) = alloc_flushed(&base, &dir);
    for n in 0..24 {
        let p = copy(&base, &dir, "retry.img");
        let (mut img, faults) = open_faulty(&p);
        txn_alloc(&mut img);
        faults.fail_write_after(4); // in place, after the log's sync
        let e = img.flush().unwrap_err().to_string();
        assert!(e.contains("committed"), "{e}");
        faults.fail_write_after(n);
        let retry = img.flush();
        drop(img);
        drop(open_rw(&p));
        assert!(
            fs::read(&p).unwrap() == after,
            "retry failing at step {n} ({retry:?}): the committed change was lost"
        );
    }
}
