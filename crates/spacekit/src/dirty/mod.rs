//! Dirty-page logs: an atomic dirty bitmap, and the conversion of a dirty
//! bitmap into a table of guest memory ranges (Cloud Hypervisor's
//! `MemoryRangeTable`).
//!
//! Bit `i` of a dirty bitmap stands for the page at `base + i * page_size`.
//! [`ranges`] yields one [`MemoryRange`] per maximal run of dirty pages,
//! coalesced across word boundaries; [`ranges_or`] does the same for the OR of
//! two logs (a hypervisor's and a VMM's) without building it;
//! [`MemoryRangeTable`] collects them, serially or on all threads
//! ([`MemoryRangeTable::par_extend_from_bitmap`], feature `rayon`), with
//! optional merging of small gaps, and speaks Cloud Hypervisor's wire format.
//!
//! Every path runs the same two-stage edge scanner (`scan.rs`): AVX2 marks the
//! words of a 64-word batch whose bits change, then each marked word writes
//! its change positions without a per-word branch. Clean stretches and
//! stretches inside a long dirty run are skipped by the bitmap engine's SIMD
//! search, so neither sparse nor dense bitmaps cost a step per dirty page.
//! [`DirtyBitmap`] documents the memory orderings of the atomic log.

mod atomic;
mod scan;
mod table;

pub use atomic::DirtyBitmap;
pub use table::{MemoryRangeTable, WIRE_RANGE_BYTES};

use core::fmt;

use alloc::vec::Vec;

use crate::bitmap::Backend;
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

/// `log2(page_size)`, checking it is a power of two.
pub(crate) fn page_shift(page_size: u64) -> Result<u32, DirtyError> {
    if page_size.is_power_of_two() {
        Ok(page_size.trailing_zeros())
    } else {
        Err(DirtyError::InvalidPageSize { page_size })
    }
}

/// Checks that every page of a `words`-word bitmap at `base` has an address:
/// `base + 64 * words * page_size` must not pass 2^64.
pub(crate) fn check_span(words: usize, shift: u32, base: u64) -> Result<(), DirtyError> {
    let bytes = (words as u64)
        .checked_mul(64)
        .and_then(|bits| bits.checked_mul(1u64 << shift));
    match bytes.and_then(|b| base.checked_add(b)) {
        Some(_) => Ok(()),
        None => Err(DirtyError::OutOfRange {
            addr: base,
            len: bytes.unwrap_or(u64::MAX),
        }),
    }
}

/// How a scan runs: which word-skipping backend, and (for the parallel
/// table builders) how many words each parallel block holds. Tests and
/// benchmarks use it to force the scalar path or small blocks.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct ScanOpts {
    /// Word-skipping implementation.
    pub backend: Backend,
    /// Words per block of the parallel scan.
    pub block_words: usize,
}

impl Default for ScanOpts {
    fn default() -> Self {
        ScanOpts {
            backend: Backend::detect(),
            block_words: 16 * 1024,
        }
    }
}

/// The dirty ranges of `bitmap` (bit `i` = page `base + i * page_size`), in
/// ascending address order, each a maximal run of dirty pages, coalesced
/// across word boundaries.
///
/// ```
/// use spacekit::dirty::{ranges, MemoryRange};
///
/// let bitmap = [0b0110u64, 1 << 63, 1];
/// let got: Vec<_> = ranges(&bitmap, 4096, 0x1_0000)?.collect();
/// assert_eq!(got, [
///     MemoryRange { gpa: 0x1_0000 + 4096, length: 2 * 4096 },
///     MemoryRange { gpa: 0x1_0000 + 127 * 4096, length: 2 * 4096 },
/// ]);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// # Errors
/// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two;
/// [`DirtyError::OutOfRange`] if the bitmap's last page would end past 2^64.
pub fn ranges(bitmap: &[u64], page_size: u64, base: u64) -> Result<DirtyRanges<'_>, DirtyError> {
    ranges_with(bitmap, page_size, base, ScanOpts::default())
}

/// [`ranges`] with explicit [`ScanOpts`].
#[doc(hidden)]
pub fn ranges_with(
    bitmap: &[u64],
    page_size: u64,
    base: u64,
    opts: ScanOpts,
) -> Result<DirtyRanges<'_>, DirtyError> {
    Ok(DirtyRanges(RangeIter::new(
        One(bitmap),
        page_size,
        base,
        opts.backend,
    )?))
}

/// The dirty ranges of `a | b` (a hypervisor's log and a VMM's own), as
/// [`ranges`] would give for the OR of the two, without building it.
///
/// ```
/// use spacekit::dirty::{ranges_or, MemoryRange};
///
/// let kvm = [0b0011u64];
/// let vmm = [0b1100u64];
/// let got: Vec<_> = ranges_or(&kvm, &vmm, 4096, 0)?.collect();
/// assert_eq!(got, [MemoryRange { gpa: 0, length: 4 * 4096 }]);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// # Errors
/// [`DirtyError::LengthMismatch`] if the bitmaps differ in length (never a
/// silent truncation); otherwise as [`ranges`].
pub fn ranges_or<'a>(
    a: &'a [u64],
    b: &'a [u64],
    page_size: u64,
    base: u64,
) -> Result<DirtyRangesOr<'a>, DirtyError> {
    ranges_or_with(a, b, page_size, base, ScanOpts::default())
}

/// [`ranges_or`] with explicit [`ScanOpts`].
#[doc(hidden)]
pub fn ranges_or_with<'a>(
    a: &'a [u64],
    b: &'a [u64],
    page_size: u64,
    base: u64,
    opts: ScanOpts,
) -> Result<DirtyRangesOr<'a>, DirtyError> {
    Ok(DirtyRangesOr(RangeIter::new(
        Or::new(a, b)?,
        page_size,
        base,
        opts.backend,
    )?))
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
    fn new(src: W, page_size: u64, base: u64, be: Backend) -> Result<Self, DirtyError> {
        let shift = page_shift(page_size)?;
        check_span(src.len(), shift, base)?;
        Ok(RangeIter {
            scan: Scanner::new(src, 0, src.len(), be, true),
            buf: alloc::vec![0; scan::BUF],
            pos: 0,
            len: 0,
            shift,
            base,
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

/// Iterator of [`ranges`].
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

/// Iterator of [`ranges_or`].
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
