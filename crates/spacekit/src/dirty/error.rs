//! [`DirtyError`]: what went wrong with a dirty-log call.

use core::fmt;

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
