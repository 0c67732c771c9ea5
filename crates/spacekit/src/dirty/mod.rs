//! Dirty-page logs: an atomic dirty bitmap, and the conversion of a dirty
//! bitmap into a table of guest memory ranges (Cloud Hypervisor's
//! `MemoryRangeTable`).
//!
//! A [`Geometry`] says where a log's pages are: bit `i` of a dirty bitmap
//! stands for the page at `base + i * page_size`. It is validated once, when
//! it is built (the page size is a power of two, kept as a `NonZeroU64` like
//! vm-memory keeps its `NonZeroUsize`), and every call below takes it as it
//! is:
//!
//! * [`Geometry::ranges`] yields one [`MemoryRange`] per maximal run of dirty
//!   pages, coalesced across word boundaries; [`Geometry::ranges_or`] does the
//!   same for the OR of two logs (a hypervisor's and a VMM's) without
//!   building it;
//! * [`Scan`] is the one table builder: a bitmap and its geometry, with
//!   options [`Scan::or`] (a second log), [`Scan::merge_gap`] (join ranges a
//!   few clean pages apart) and [`Scan::parallel`] (all threads, feature
//!   `rayon`); [`MemoryRangeTable::extend_from`] runs it into a table,
//!   reusing the table's allocation;
//! * [`MemoryRangeTable`] speaks Cloud Hypervisor's wire format;
//! * [`DirtyBitmap`] is the atomic log itself, and documents its memory
//!   orderings.
//!
//! ```
//! use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
//!
//! let geometry = Geometry::new(0x1_0000_0000, 4096)?;
//! let kvm = [0b0011u64, 0];
//! let vmm = [0b1_0000u64, 1 << 63];
//! let mut table = MemoryRangeTable::new();
//! table.extend_from(Scan::new(&kvm, geometry)?.or(&vmm)?.merge_gap(2).parallel(true));
//! assert_eq!(table.ranges(), [
//!     MemoryRange { gpa: 0x1_0000_0000, length: 5 * 4096 },
//!     MemoryRange { gpa: 0x1_0000_0000 + 127 * 4096, length: 4096 },
//! ]);
//! # Ok::<(), spacekit::dirty::DirtyError>(())
//! ```
//!
//! Every path runs the same two-stage edge scanner (`scan.rs`): AVX2 marks the
//! words of a 64-word batch whose bits change, then each marked word writes
//! its change positions without a per-word branch. Clean stretches and
//! stretches inside a long dirty run are skipped by the bitmap engine's SIMD
//! search, so neither sparse nor dense bitmaps cost a step per dirty page.

mod arch;
mod atomic;
pub(crate) mod hooks;
mod scan;
mod table;

pub use atomic::DirtyBitmap;
pub use table::{MemoryRangeTable, WIRE_RANGE_BYTES};

use core::fmt;
use core::num::NonZeroU64;

use alloc::vec::Vec;

use hooks::ScanOpts;
use scan::{One, Or, Scanner, Words};

/// A guest-physical memory range, laid out as Cloud Hypervisor's
/// `vm_migration::protocol::MemoryRange` (`#[repr(C)] { gpa: u64, length: u64 }`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryRange {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub length: u64,
}

impl MemoryRange {
    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.gpa.saturating_add(self.length)
    }
}

/// What went wrong with a dirty-log call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirtyError {
    /// A page size that is not a power of two.
    InvalidPageSize {
        /// The page size given.
        page_size: u64,
    },
    /// An address range outside the tracked region, or one that overflows.
    OutOfRange {
        /// Start of the range.
        addr: u64,
        /// Length of the range.
        len: u64,
    },
    /// Two bitmaps (or a bitmap and an output buffer) of different lengths.
    LengthMismatch {
        /// Words expected.
        expected: usize,
        /// Words given.
        found: usize,
    },
    /// A wire-format buffer whose length is not a multiple of 16 bytes.
    BadWireLength {
        /// The buffer's length in bytes.
        len: usize,
    },
    /// A wire-format range whose end overflows the address space.
    RangeOverflow {
        /// Index of the offending range.
        index: usize,
    },
}

impl fmt::Display for DirtyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DirtyError::InvalidPageSize { page_size } => {
                write!(f, "page size {page_size} is not a power of two")
            }
            DirtyError::OutOfRange { addr, len } => write!(
                f,
                "range {addr:#x}+{len:#x} is outside the tracked memory or overflows"
            ),
            DirtyError::LengthMismatch { expected, found } => write!(
                f,
                "bitmap of {found} words where {expected} words were expected"
            ),
            DirtyError::BadWireLength { len } => write!(
                f,
                "{len} bytes is not a whole number of 16-byte memory ranges"
            ),
            DirtyError::RangeOverflow { index } => {
                write!(f, "memory range {index} ends past the 64-bit address space")
            }
        }
    }
}

impl core::error::Error for DirtyError {}

/// Where a dirty log's pages are: bit `i` of the log stands for the page at
/// `base + i * page_size`.
///
/// Validated once, by [`Geometry::new`]: the page size is a power of two
/// (any, not only 4096, which Cloud Hypervisor hard-codes), held as a
/// [`NonZeroU64`] like vm-memory's `NonZeroUsize` page size. Whether a given
/// bitmap's pages all have addresses (its last page must end at or below
/// 2^64) depends on the bitmap's length, so that is checked where a bitmap
/// is applied: [`Geometry::ranges`], [`Scan::new`], [`DirtyBitmap::new`].
///
/// ```
/// use spacekit::dirty::{DirtyError, Geometry};
///
/// let g = Geometry::new(0x1_0000_0000, 2 << 20)?;     // 2 MiB pages at 4 GiB
/// assert_eq!((g.base(), g.page_size().get(), g.page_shift()), (1 << 32, 2 << 20, 21));
/// assert_eq!(g.page_addr(3), Some((1 << 32) + (6 << 20)));
/// assert_eq!(Geometry::new(0, 3000), Err(DirtyError::InvalidPageSize { page_size: 3000 }));
/// # Ok::<(), DirtyError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    base: u64,
    page_size: NonZeroU64,
}

impl Geometry {
    /// Pages of `page_size` bytes from guest address `base`.
    ///
    /// # Errors
    /// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two
    /// (0 is not).
    pub const fn new(base: u64, page_size: u64) -> Result<Geometry, DirtyError> {
        match NonZeroU64::new(page_size) {
            Some(p) if p.is_power_of_two() => Ok(Geometry { base, page_size: p }),
            _ => Err(DirtyError::InvalidPageSize { page_size }),
        }
    }

    /// Guest address of page 0 (bit 0 of the log).
    #[inline]
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// Bytes per page: a power of two.
    #[inline]
    pub const fn page_size(&self) -> NonZeroU64 {
        self.page_size
    }

    /// `log2(page_size)`.
    #[inline]
    pub const fn page_shift(&self) -> u32 {
        self.page_size.trailing_zeros()
    }

    /// The same page size from another base: the geometry of a slice of a
    /// log that starts later (see [`Geometry::page_addr`]).
    #[inline]
    pub const fn with_base(self, base: u64) -> Geometry {
        Geometry { base, ..self }
    }

    /// Guest address of page `page`, `base + page * page_size`; `None` past
    /// 2^64.
    #[inline]
    pub const fn page_addr(&self, page: u64) -> Option<u64> {
        match page.checked_mul(self.page_size.get()) {
            Some(off) => self.base.checked_add(off),
            None => None,
        }
    }

    /// Checks that every page of a `words`-word bitmap has an address:
    /// `base + 64 * words * page_size` must not pass 2^64.
    pub(crate) fn check_span(&self, words: usize) -> Result<(), DirtyError> {
        let bytes = (words as u64)
            .checked_mul(64)
            .and_then(|bits| bits.checked_mul(self.page_size.get()));
        match bytes.and_then(|b| self.base.checked_add(b)) {
            Some(_) => Ok(()),
            None => Err(DirtyError::OutOfRange {
                addr: self.base,
                len: bytes.unwrap_or(u64::MAX),
            }),
        }
    }

    /// The dirty ranges of `bitmap`, in ascending address order, each a
    /// maximal run of dirty pages, coalesced across word boundaries: a
    /// streaming iterator with a fixed 8 KiB buffer (for a table, see
    /// [`Scan`]).
    ///
    /// ```
    /// use spacekit::dirty::{Geometry, MemoryRange};
    ///
    /// let bitmap = [0b0110u64, 1 << 63, 1];
    /// let got: Vec<_> = Geometry::new(0x1_0000, 4096)?.ranges(&bitmap)?.collect();
    /// assert_eq!(got, [
    ///     MemoryRange { gpa: 0x1_0000 + 4096, length: 2 * 4096 },
    ///     MemoryRange { gpa: 0x1_0000 + 127 * 4096, length: 2 * 4096 },
    /// ]);
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the bitmap's last page would end past
    /// 2^64.
    pub fn ranges<'a>(&self, bitmap: &'a [u64]) -> Result<DirtyRanges<'a>, DirtyError> {
        hooks::ranges_with(*self, bitmap, ScanOpts::default())
    }

    /// The dirty ranges of `a | b` (a hypervisor's log and a VMM's own), as
    /// [`Geometry::ranges`] would give for the OR of the two, without
    /// building it.
    ///
    /// ```
    /// use spacekit::dirty::{Geometry, MemoryRange};
    ///
    /// let kvm = [0b0011u64];
    /// let vmm = [0b1100u64];
    /// let got: Vec<_> = Geometry::new(0, 4096)?.ranges_or(&kvm, &vmm)?.collect();
    /// assert_eq!(got, [MemoryRange { gpa: 0, length: 4 * 4096 }]);
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] if the bitmaps differ in length (never a
    /// silent truncation, unlike a `zip`); otherwise as [`Geometry::ranges`].
    pub fn ranges_or<'a>(
        &self,
        a: &'a [u64],
        b: &'a [u64],
    ) -> Result<DirtyRangesOr<'a>, DirtyError> {
        hooks::ranges_or_with(*self, a, b, ScanOpts::default())
    }
}

/// The words a [`Scan`] reads: one log, or the OR of two.
#[derive(Clone, Copy, Debug)]
enum Source<'a> {
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
#[derive(Clone, Copy, Debug)]
#[must_use = "a Scan does nothing until a table is extended from it"]
pub struct Scan<'a> {
    bitmap: &'a [u64],
    src: Source<'a>,
    geometry: Geometry,
    merge_gap: u64,
    parallel: bool,
    opts: ScanOpts,
}

impl<'a> Scan<'a> {
    /// A scan of `bitmap` (bit `i` = the page at `geometry.page_addr(i)`):
    /// serial, no second log, no gap merging.
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the bitmap's last page would end past
    /// 2^64.
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

    /// Scans on all threads of rayon's pool when `on` (default: off). The
    /// bitmap is cut into blocks, each block's edges are counted in parallel,
    /// and each block then writes its own ranges straight into the table at
    /// the offset the counts give; a run crossing block edges is written whole
    /// by the block it starts in. The result is identical to the serial
    /// scan's. Small bitmaps are scanned serially.
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

/// The range between edge positions `s` and `e` (in pages).
#[inline(always)]
pub(crate) fn range_of(s: u64, e: u64, shift: u32, base: u64) -> MemoryRange {
    MemoryRange {
        gpa: base + (s << shift),
        length: (e - s) << shift,
    }
}

/// Ranges from a buffered edge scan.
#[derive(Clone, Debug)]
struct RangeIter<W> {
    scan: Scanner<W>,
    buf: Vec<u64>,
    pos: usize,
    len: usize,
    shift: u32,
    base: u64,
}

impl<W: Words> RangeIter<W> {
    fn new(src: W, geometry: Geometry, opts: ScanOpts) -> Result<Self, DirtyError> {
        geometry.check_span(src.len())?;
        Ok(RangeIter {
            scan: Scanner::new(src, 0, src.len(), opts.backend, true),
            buf: alloc::vec![0; scan::BUF],
            pos: 0,
            len: 0,
            shift: geometry.page_shift(),
            base: geometry.base(),
        })
    }

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        loop {
            if self.pos + 2 <= self.len {
                let (s, e) = (self.buf[self.pos], self.buf[self.pos + 1]);
                self.pos += 2;
                return Some(range_of(s, e, self.shift, self.base));
            }
            if self.scan.done() {
                return None;
            }
            // At most one edge (an open run's start) is left over.
            let rest = self.len - self.pos;
            if rest == 1 {
                self.buf[0] = self.buf[self.pos];
            }
            self.len = scan::fill(&mut self.scan, &mut self.buf, rest);
            self.pos = 0;
        }
    }
}

/// Iterator of [`Geometry::ranges`].
#[derive(Clone, Debug)]
pub struct DirtyRanges<'a>(RangeIter<One<'a>>);

impl Iterator for DirtyRanges<'_> {
    type Item = MemoryRange;

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        self.0.next()
    }
}

impl core::iter::FusedIterator for DirtyRanges<'_> {}

/// Iterator of [`Geometry::ranges_or`].
#[derive(Clone, Debug)]
pub struct DirtyRangesOr<'a>(RangeIter<Or<'a>>);

impl Iterator for DirtyRangesOr<'_> {
    type Item = MemoryRange;

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        self.0.next()
    }
}

impl core::iter::FusedIterator for DirtyRangesOr<'_> {}
