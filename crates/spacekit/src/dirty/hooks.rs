//! The dirty module's test hooks, re-exported from `spacekit::testing`
//! (feature `testing`, not part of the stable API): tests and benchmarks use them to
//! force each CPU level the machine runs, and small parallel blocks so that
//! runs cross many block edges.

pub use super::opts::ScanOpts;

use super::builder::Scan;
use super::error::DirtyError;
use super::geometry::Geometry;
use super::iter::{DirtyRanges, DirtyRangesOr, RangeIter};
use super::scan::{One, Or};

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
