//! [`BitmapError`]: what went wrong with a bitmap call.

use core::fmt;

/// What went wrong with a bitmap call. Every fallible function says which
/// variants it returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BitmapError {
    /// A single bit index at or past the bitmap's length.
    IndexOutOfBounds {
        /// The index asked for.
        index: usize,
        /// The bitmap's length in bits.
        len: usize,
    },
    /// A range that ends past the bitmap, starts after it ends, or overflows.
    RangeOutOfBounds {
        /// Inclusive start of the range as given.
        start: usize,
        /// Exclusive end of the range as given (saturated on overflow).
        end: usize,
        /// The bitmap's length in bits.
        len: usize,
    },
    /// An alignment that is not a power of two (0 included); see the
    /// module's "Alignment" section.
    InvalidAlignment {
        /// The alignment given.
        align: usize,
    },
    /// A kernel-style alignment mask ([`Bits::find_clear_area_mask`]) that
    /// is not of the form `2^k - 1`.
    ///
    /// [`Bits::find_clear_area_mask`]: super::Bits::find_clear_area_mask
    InvalidAlignMask {
        /// The mask given.
        mask: usize,
    },
    /// A length in bits larger than the words provided can hold.
    LengthTooLarge {
        /// The length asked for.
        len: usize,
        /// How many bits the storage holds.
        capacity: usize,
    },
    /// A buffer whose size disagrees with the bitmap's length.
    LengthMismatch {
        /// The size the bitmap needs (bytes or words, as the call documents).
        expected: usize,
        /// The size given.
        found: usize,
    },
}

impl fmt::Display for BitmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BitmapError::IndexOutOfBounds { index, len } => {
                write!(
                    f,
                    "bit index {index} is out of bounds for a bitmap of {len} bits"
                )
            }
            BitmapError::RangeOutOfBounds { start, end, len } => write!(
                f,
                "bit range {start}..{end} is invalid for a bitmap of {len} bits"
            ),
            BitmapError::InvalidAlignment { align } => {
                write!(f, "alignment {align} is not a power of two")
            }
            BitmapError::InvalidAlignMask { mask } => {
                write!(f, "alignment mask {mask:#x} is not of the form 2^k - 1")
            }
            BitmapError::LengthTooLarge { len, capacity } => write!(
                f,
                "length of {len} bits exceeds the {capacity} bits the storage holds"
            ),
            BitmapError::LengthMismatch { expected, found } => {
                write!(
                    f,
                    "buffer size {found} does not match the expected {expected}"
                )
            }
        }
    }
}

impl core::error::Error for BitmapError {}
