//! The dirty module's test hooks, re-exported from `spacekit::__testing`
//! (hidden, not part of the stable API): tests and benchmarks use them to
//! force each CPU level the machine runs, and small parallel blocks so that
//! runs cross many block edges.

use alloc::vec::Vec;

use crate::arch::Level;

use super::scan::{One, Or};
use super::{DirtyError, DirtyRanges, DirtyRangesOr, Geometry, RangeIter, Scan};

/// How a scan runs: which CPU level, and (for the parallel table build) how
/// many words each parallel block holds.
#[derive(Clone, Copy, Debug)]
pub struct ScanOpts {
    /// The CPU level the scan is compiled for.
    pub backend: Level,
    /// Words per block of the parallel scan.
    pub block_words: usize,
}

impl Default for ScanOpts {
    fn default() -> Self {
        ScanOpts {
            backend: Level::detect(),
            block_words: 16 * 1024,
        }
    }
}

impl ScanOpts {
    /// One `ScanOpts` per CPU level this machine runs ([`Level::available`]:
    /// scalar first, the detected level last), each with `block_words` words
    /// per parallel block: a test loops over them to run every path.
    pub fn each_backend(block_words: usize) -> Vec<ScanOpts> {
        Level::available()
            .map(|backend| ScanOpts {
                backend,
                block_words,
            })
            .collect()
    }
}

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
