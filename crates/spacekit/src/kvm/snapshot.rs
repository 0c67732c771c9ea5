//! Snapshots of a running guest's memory to files: one full snapshot, then
//! diffs of the pages dirtied since the snapshot before, the way
//! Firecracker's full and diff snapshots use the dirty log.
//!
//! Each snapshot is taken with the vCPUs (and the caller's device writers)
//! paused, as Firecracker pauses the VM: the full snapshot empties the logs
//! at the pause, so the first diff holds exactly what changed after it;
//! each diff harvests the logs at its own pause. The files are
//! [`crate::snapshot`]'s: a sparse full snapshot at guest-physical offsets,
//! diffs with their own range table, tied into a chain that
//! [`crate::snapshot::merge`] checks.

use std::path::{Path, PathBuf};
use std::string::ToString;

use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestAddress};

use super::error::KvmError;
use super::guest::{Guest, GuestConfig, GuestMem};
use super::layout::PAGE;
use super::migrate::GuestSource;
use super::tracker::DirtyTracker;
use crate::dirty::MemoryRangeTable;
use crate::migration::{diff_pages, hash_pages};
use crate::snapshot::{info, merge, write_diff, write_full, Snapshot, SnapshotError, SnapshotInfo};

/// One snapshot's numbers.
#[derive(Clone, Debug)]
pub struct SnapshotReport {
    /// What was written.
    pub info: SnapshotInfo,
    /// Dirty pages a diff holds (all pages for a full snapshot).
    pub pages: u64,
    /// Ranges in a diff's table (0 for a full snapshot).
    pub ranges: u64,
    /// From the pause to the resume (the harvest and the file written and
    /// synced).
    pub paused: Duration,
}

/// A guest's snapshot chain: [`Snapshotter::full`] first, then
/// [`Snapshotter::diff`] as often as wanted.
pub struct Snapshotter {
    tracker: DirtyTracker,
    table: MemoryRangeTable,
    last: SnapshotInfo,
}

impl Snapshotter {
    /// Pauses `guest`, empties its dirty logs, writes its whole memory to
    /// `path` (zero pages as holes) and resumes it unless `stay_paused`.
    ///
    /// # Errors
    /// [`KvmError::Snapshot`] for the file; [`KvmError`]s of the harvest.
    /// The guest is resumed either way.
    pub fn full(
        guest: &Guest,
        path: &Path,
        stay_paused: bool,
    ) -> Result<(Snapshotter, SnapshotReport), KvmError> {
        let mut tracker = DirtyTracker::new(guest);
        let t = Instant::now();
        guest.pause();
        let r = tracker
            .reset(guest)
            .and_then(|()| write_full(&GuestSource::new(guest), PAGE, path).map_err(snap_err));
        if !stay_paused || r.is_err() {
            guest.resume();
        }
        let info = r?;
        let report = SnapshotReport {
            pages: info.memory_size / PAGE,
            ranges: 0,
            paused: t.elapsed(),
            info: info.clone(),
        };
        Ok((
            Snapshotter {
                tracker,
                table: MemoryRangeTable::new(),
                last: info,
            },
            report,
        ))
    }

    /// Pauses `guest`, harvests the pages dirtied since the last snapshot,
    /// writes them to `path` as a diff against it, and resumes the guest
    /// unless `stay_paused` (so its memory can be compared with the chain).
    ///
    /// # Errors
    /// As [`Snapshotter::full`]. After an error the chain cannot go on (the
    /// harvested pages are in no file): start again with a full snapshot.
    pub fn diff(
        &mut self,
        guest: &Guest,
        path: &Path,
        stay_paused: bool,
    ) -> Result<SnapshotReport, KvmError> {
        let t = Instant::now();
        guest.pause();
        let r = self.write_diff(guest, path);
        if !stay_paused || r.is_err() {
            guest.resume();
        }
        let info = r?;
        self.last = info.clone();
        Ok(SnapshotReport {
            pages: self.table.total_bytes() / PAGE,
            ranges: self.table.len() as u64,
            paused: t.elapsed(),
            info,
        })
    }

    fn write_diff(&mut self, guest: &Guest, path: &Path) -> Result<SnapshotInfo, KvmError> {
        self.tracker.harvest_build(guest, &mut self.table)?;
        write_diff(&GuestSource::new(guest), &self.table, &self.last, path).map_err(snap_err)
    }

    /// A chain that goes on from `base`, for a guest restored from it
    /// ([`restore`]) whose logs have run since it started: the first diff
    /// holds every page dirtied since.
    pub fn continue_from(guest: &Guest, base: SnapshotInfo) -> Snapshotter {
        Snapshotter {
            tracker: DirtyTracker::new(guest),
            table: MemoryRangeTable::new(),
            last: base,
        }
    }

    /// The last snapshot written (the base of the next diff).
    pub fn last(&self) -> &SnapshotInfo {
        &self.last
    }
}

/// The pages (indices) where the snapshot at `path` (a full one, or one
/// merged from a chain) differs from `guest`'s memory, by CRC-32C; empty
/// when they are equal. Call it with the guest paused.
///
/// # Errors
/// [`KvmError::Snapshot`] for the file; [`KvmError::Migration`] when the
/// sizes differ.
pub fn differing_pages(guest: &Guest, path: &Path) -> Result<std::vec::Vec<u64>, KvmError> {
    let snap = crate::snapshot::Snapshot::open(path).map_err(snap_err)?;
    let file = snap.hash_pages(PAGE).map_err(snap_err)?;
    let mem = hash_pages(&GuestSource::new(guest), PAGE)?;
    Ok(diff_pages(&mem, &file)?)
}

/// Starts a guest on the memory of a snapshot chain: `files` is a full
/// snapshot and then its diffs in order (merged first, into a temporary
/// file beside the last, removed after). Returns the guest and the last
/// file's info, the base of the next diff ([`Snapshotter::continue_from`]).
///
/// # Errors
/// [`KvmError::Snapshot`] for the files (a broken chain, a bad file);
/// [`KvmError::BadConfig`] when the snapshot's memory size is not
/// `config`'s or `files` is empty; what [`Guest::restore`] returns.
pub fn restore(config: GuestConfig, files: &[PathBuf]) -> Result<(Guest, SnapshotInfo), KvmError> {
    let Some(last) = files.last() else {
        return Err(KvmError::BadConfig {
            reason: "no snapshot to restore from".into(),
        });
    };
    let last_info = info(last).map_err(snap_err)?;
    let merged;
    let full = if files.len() == 1 {
        last.clone()
    } else {
        let name = last.file_name().map(|n| n.to_string_lossy().into_owned());
        merged = TempPath(last.with_file_name(std::format!(
            ".{}.restore.{}",
            name.unwrap_or_default(),
            std::process::id()
        )));
        merge(&files[0], &files[1..], &merged.0).map_err(snap_err)?;
        merged.0.clone()
    };
    let snap = Snapshot::open(&full).map_err(snap_err)?;
    let size = snap.info().memory_size;
    if size != config.mem_size {
        return Err(KvmError::BadConfig {
            reason: std::format!(
                "the snapshot holds {size} bytes of memory, the guest has {}",
                config.mem_size
            ),
        });
    }
    let mut fill = |memory: &GuestMem| -> Result<(), KvmError> {
        let mut buf = std::vec![0u8; 1 << 20];
        let mut gpa = 0;
        while gpa < size {
            let n = (size - gpa).min(buf.len() as u64) as usize;
            snap.read_memory(gpa, &mut buf[..n]).map_err(snap_err)?;
            memory
                .write_slice(&buf[..n], GuestAddress(gpa))
                .map_err(|e| KvmError::Map {
                    size,
                    reason: e.to_string(),
                })?;
            gpa += n as u64;
        }
        Ok(())
    };
    let guest = Guest::restore(config, &mut fill)?;
    Ok((guest, last_info))
}

/// A file removed when dropped.
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn snap_err(e: SnapshotError) -> KvmError {
    KvmError::Snapshot(e)
}
