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

use std::path::Path;
use std::time::{Duration, Instant};

use super::error::KvmError;
use super::guest::Guest;
use super::layout::PAGE;
use super::migrate::GuestSource;
use super::tracker::DirtyTracker;
use crate::dirty::MemoryRangeTable;
use crate::migration::{diff_pages, hash_pages};
use crate::snapshot::{write_diff, write_full, SnapshotError, SnapshotInfo};

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
    /// `path` (zero pages as holes) and resumes it.
    ///
    /// # Errors
    /// [`KvmError::Snapshot`] for the file; [`KvmError`]s of the harvest.
    /// The guest is resumed either way.
    pub fn full(guest: &Guest, path: &Path) -> Result<(Snapshotter, SnapshotReport), KvmError> {
        let mut tracker = DirtyTracker::new(guest);
        let t = Instant::now();
        guest.pause();
        let r = tracker
            .reset(guest)
            .and_then(|()| write_full(&GuestSource::new(guest), PAGE, path).map_err(snap_err));
        guest.resume();
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
        self.tracker.harvest(guest)?;
        self.tracker.build(&mut self.table)?;
        write_diff(&GuestSource::new(guest), &self.table, &self.last, path).map_err(snap_err)
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

fn snap_err(e: SnapshotError) -> KvmError {
    KvmError::Snapshot(e)
}
