//! [`Scan`]: the table builder (a bitmap, its geometry and options).

use super::error::DirtyError;
use super::geometry::Geometry;
use super::opts::ScanOpts;
use super::scan::{One, Or};

/// The words a [`Scan`] reads: one log, or the OR of two.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source<'a> {
    One(One<'a>),
    Or(Or<'a>),
}

/// The table builder: a dirty bitmap and its [`Geometry`], with options,
/// run into a table by [`MemoryRangeTable::extend_from`] (or
/// [`MemoryRangeTable::from_scan`]).
///
/// * [`Scan::or`]: the OR of the bitmap and a second log of the same length
///   (a hypervisor's and a VMM's), never built;
/// * [`Scan::merge_gap`]: join ranges separated by at most that many clean
///   pages (fewer, larger copies);
/// * [`Scan::parallel`]: scan on all threads of rayon's pool (feature
///   `rayon`; without it the scan is serial, with the same result).
///
/// Every check happens while the scan is built (the bitmap's span in
/// [`Scan::new`], the second log's length in [`Scan::or`]), so running it
/// cannot fail. The options are resolved once per run, and the run calls
/// the same word scanner whichever options are set: a `Scan` costs nothing
/// per word. A `Scan` is `Copy`; one value can fill many tables.
///
/// ```
/// use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
///
/// let g = Geometry::new(0, 4096)?;
/// // Pages 0-1 and 4 dirty; merging gaps of up to 2 clean pages joins them.
/// let table = MemoryRangeTable::from_scan(Scan::new(&[0b1_0011], g)?.merge_gap(2));
/// assert_eq!(table.ranges(), [MemoryRange { gpa: 0, length: 5 * 4096 }]);
///
/// // Logs of different lengths are an error, not a truncation.
/// assert!(Scan::new(&[0; 4], g)?.or(&[0; 3]).is_err());
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// [`MemoryRangeTable::extend_from`]: super::table::MemoryRangeTable::extend_from
/// [`MemoryRangeTable::from_scan`]: super::table::MemoryRangeTable::from_scan
#[derive(Clone, Copy, Debug)]
#[must_use = "a Scan does nothing until a table is extended from it"]
pub struct Scan<'a> {
    pub(super) bitmap: &'a [u64],
    pub(super) src: Source<'a>,
    pub(super) geometry: Geometry,
    pub(super) merge_gap: u64,
    pub(super) parallel: bool,
    pub(super) opts: ScanOpts,
}

impl<'a> Scan<'a> {
    /// A scan of `bitmap` (bit `i` = the page at `geometry.page_addr(i)`):
    /// serial, no second log, no gap merging.
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the bitmap's last page would end at or
    /// past 2^64.
    pub fn new(bitmap: &'a [u64], geometry: Geometry) -> Result<Scan<'a>, DirtyError> {
        geometry.check_span(bitmap.len())?;
        Ok(Scan {
            bitmap,
            src: Source::One(One(bitmap)),
            geometry,
            merge_gap: 0,
            parallel: false,
            opts: ScanOpts::default(),
        })
    }

    /// Scans `bitmap | other` instead, without building the OR (Cloud
    /// Hypervisor ORs KVM's log with the VMM's `get_and_reset()` through a
    /// `zip`). A second call replaces the earlier `other`.
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] (`expected`: the bitmap's words,
    /// `found`: `other`'s) unless the two have the same length.
    pub fn or(self, other: &'a [u64]) -> Result<Scan<'a>, DirtyError> {
        Ok(Scan {
            src: Source::Or(Or::new(self.bitmap, other)?),
            ..self
        })
    }

    /// Joins ranges separated by at most `pages` clean pages (0, the
    /// default: only adjacent pages join, as they always do). Gaps are
    /// measured in pages of the scan's geometry; a gap too large to count
    /// in bytes joins everything.
    pub fn merge_gap(self, pages: u64) -> Scan<'a> {
        Scan {
            merge_gap: pages,
            ..self
        }
    }

    /// Scans on all threads of rayon's pool when `on` (default: off), where
    /// a sample of the bitmap says a second thread pays; the result is
    /// identical to the serial scan's. A sparse bitmap (or a clean or fully
    /// dirty one) of at least 16 MiB is cut into chunks: the calling thread
    /// scans chunks from the front straight into the table, and offers the
    /// rest to the pool, whose threads scan chunks from the back into
    /// buffers appended after; the call never waits for a pool thread to
    /// start (one that has not by the time the caller is done is not
    /// waited for, and the caller has scanned everything). A dense bitmap
    /// is cut into blocks whose edges are counted in parallel, then each
    /// block writes its own ranges straight into the table at the offset
    /// the counts give (a run crossing block edges is written whole by the
    /// block it starts in). Small bitmaps, and densities where the sample
    /// says a second thread would not pay, are scanned serially.
    ///
    /// Without the `rayon` feature this is a no-op: the scan is serial.
    pub fn parallel(self, on: bool) -> Scan<'a> {
        Scan {
            parallel: on,
            ..self
        }
    }

    /// The geometry the scan places its ranges with.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Number of words scanned (of each log, when ORing two).
    pub fn words(&self) -> usize {
        self.bitmap.len()
    }
}
