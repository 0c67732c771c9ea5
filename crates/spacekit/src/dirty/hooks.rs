//! The dirty module's test hooks, re-exported from `spacekit::testing`
//! (feature `testing`, not part of the stable API): tests and benchmarks use them to
//! force each CPU level the machine runs, and small parallel blocks so that
//! runs cross many block edges.

pub use super::opts::ScanOpts;

use alloc::vec::Vec;

use super::atomic::DirtyBitmap;
use super::builder::Scan;
use super::error::DirtyError;
use super::geometry::Geometry;
use super::harvest::HarvestCounts;
use super::iter::{DirtyRanges, DirtyRangesOr, RangeIter};
use super::scan::{One, Or};
use super::table::MemoryRangeTable;

/// `scan` run with explicit [`ScanOpts`] (the table it fills is the same).
pub fn scan_with(scan: Scan<'_>, opts: ScanOpts) -> Scan<'_> {
    Scan { opts, ..scan }
}

/// [`Geometry::ranges`] with explicit [`ScanOpts`].
///
/// # Errors
/// As [`Geometry::ranges`].
pub fn ranges_with(
    geometry: Geometry,
    bitmap: &[u64],
    opts: ScanOpts,
) -> Result<DirtyRanges<'_>, DirtyError> {
    Ok(DirtyRanges(RangeIter::new(One(bitmap), geometry, opts)?))
}

/// [`Geometry::ranges_or`] with explicit [`ScanOpts`].
///
/// # Errors
/// As [`Geometry::ranges_or`].
pub fn ranges_or_with<'a>(
    geometry: Geometry,
    a: &'a [u64],
    b: &'a [u64],
    opts: ScanOpts,
) -> Result<DirtyRangesOr<'a>, DirtyError> {
    Ok(DirtyRangesOr(RangeIter::new(
        Or::new(a, b)?,
        geometry,
        opts,
    )?))
}

/// [`DirtyBitmap::harvest_or_into_table`] at the level of `opts`.
///
/// # Errors
/// As [`DirtyBitmap::harvest_or_into_table`].
pub fn harvest_or_with(
    log: &DirtyBitmap,
    other: &[u64],
    geometry: Geometry,
    table: &mut MemoryRangeTable,
    taken: Option<&mut Vec<(usize, u64)>>,
    opts: ScanOpts,
) -> Result<HarvestCounts, DirtyError> {
    log.harvest_or_at(other, geometry, table, taken, opts.level())
}
