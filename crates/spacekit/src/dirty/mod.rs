//! Dirty-page logs: an atomic dirty bitmap, and the conversion of a dirty
//! bitmap into a table of guest memory ranges (Cloud Hypervisor's
//! `MemoryRangeTable`).
//!
//! Bit `i` of a dirty bitmap stands for the page at `base + i * page_size`.
//! [`ranges`] walks the set runs of a `&[u64]` bitmap and yields one
//! [`MemoryRange`] per run of dirty pages, coalesced across word boundaries:
//! clean words are skipped with the bitmap engine's SIMD scan, and a run is
//! extracted from each word with trailing-zero/trailing-one counts, so neither
//! sparse nor dense bitmaps cost a step per dirty page.

mod atomic;
mod table;

pub use atomic::DirtyBitmap;
pub use table::{MemoryRangeTable, WIRE_RANGE_BYTES};

use core::fmt;

use crate::bitmap::{Bits, SetRuns};

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

/// The dirty ranges of `bitmap` (bit `i` = page `base + i * page_size`), in
/// ascending address order, each a maximal run of dirty pages.
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
/// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two.
pub fn ranges(bitmap: &[u64], page_size: u64, base: u64) -> Result<DirtyRanges<'_>, DirtyError> {
    let shift = page_shift(page_size)?;
    Ok(DirtyRanges {
        runs: bitmap.set_runs(0),
        shift,
        base,
    })
}

/// Iterator of [`ranges`].
#[derive(Clone, Debug)]
pub struct DirtyRanges<'a> {
    runs: SetRuns<'a>,
    shift: u32,
    base: u64,
}

impl Iterator for DirtyRanges<'_> {
    type Item = MemoryRange;

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        let r = self.runs.next()?;
        Some(MemoryRange {
            gpa: self.base.wrapping_add((r.start as u64) << self.shift),
            length: ((r.end - r.start) as u64) << self.shift,
        })
    }
}

impl core::iter::FusedIterator for DirtyRanges<'_> {}
