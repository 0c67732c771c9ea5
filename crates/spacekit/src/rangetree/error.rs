//! [`RangeTreeError`]: what a range tree call can refuse.

use core::fmt;

/// What a [`RangeTree`] call can refuse. The tree is unchanged whenever one
/// is returned.
///
/// [`RangeTree`]: super::tree::RangeTree
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeTreeError {
    /// A range or window with `first > last`.
    InvalidRange {
        /// Its first index.
        first: u64,
        /// Its last index.
        last: u64,
    },
    /// A gap of size 0 was asked for (EINVAL in the kernel).
    ZeroSize,
    /// An alignment that is not a power of two.
    BadAlignment {
        /// The alignment given.
        align: u64,
    },
    /// The window `[first, last]` holds fewer than `size` indices (EINVAL).
    WindowTooSmall {
        /// The size asked for.
        size: u64,
        /// The window's first index.
        first: u64,
        /// The window's last index.
        last: u64,
    },
    /// An insert overlaps the existing entry `[first, last]` (the lowest one
    /// it overlaps; EEXIST).
    Occupied {
        /// First index of the entry in the way.
        first: u64,
        /// Last index of the entry in the way.
        last: u64,
    },
    /// No free gap of `size` in the window (EBUSY).
    NoSpace {
        /// The size asked for.
        size: u64,
    },
    /// A bulk load's entry `[first, last]` does not start after the
    /// previous entry ends.
    Unsorted {
        /// Its first index.
        first: u64,
        /// Its last index.
        last: u64,
    },
}

impl fmt::Display for RangeTreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeTreeError::InvalidRange { first, last } => {
                write!(f, "invalid range [{first:#x}, {last:#x}]: first > last")
            }
            RangeTreeError::ZeroSize => f.write_str("a gap of size 0 was asked for"),
            RangeTreeError::BadAlignment { align } => {
                write!(f, "alignment {align:#x} is not a power of two")
            }
            RangeTreeError::WindowTooSmall { size, first, last } => {
                write!(
                    f,
                    "window [{first:#x}, {last:#x}] is smaller than {size:#x}"
                )
            }
            RangeTreeError::Occupied { first, last } => {
                write!(f, "range overlaps the entry [{first:#x}, {last:#x}]")
            }
            RangeTreeError::NoSpace { size } => write!(f, "no free gap of {size:#x} in the window"),
            RangeTreeError::Unsorted { first, last } => write!(
                f,
                "entry [{first:#x}, {last:#x}] does not start after the previous entry"
            ),
        }
    }
}

impl core::error::Error for RangeTreeError {}
