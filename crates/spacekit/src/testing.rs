//! Test-only hooks, gathered in one place (`spacekit::testing`, feature
//! `testing`): nothing here is part of the stable API, and a build without
//! the feature contains none of it.
//! Tests, benchmarks and fuzzers use them to force a SIMD level, to look
//! inside a search, to check a structure's invariants after every operation
//! (like roaring's `internal_validate` or the maple tree's `mt_validate`).
//! `ext4::Image` implements [`Validate`] too (feature `ext4`); failures are
//! injected by a [`Device`](crate::ext4::Device) of the tests' own.
//!
//! Each area keeps its hooks in its own module and re-exports them here.

/// Checks every invariant of a structure; `Err` names the first one broken.
/// Used by tests and fuzzers after every operation.
pub trait Validate {
    /// `Ok(())` when every invariant holds.
    fn validate(&self) -> Result<(), alloc::string::String>;
}

/// The dirty scanner's hooks: force a backend or small parallel blocks.
pub use crate::dirty::hooks::{harvest_or_with, ranges_or_with, ranges_with, scan_with, ScanOpts};

/// The free-space index's check against the bitmap it indexes.
pub use crate::freespace::hooks::validate_index;

/// The bitmap engine's hooks: run queries at a chosen SIMD level, count a
/// clear-area search's restarts.
pub use crate::bitmap::hooks::{find_clear_area_stats, level_of, AreaStats, AtLevel};

/// ext4's on-disk directory and extent-tree formats, record by record
/// (feature `ext4`): the tests check them against e2fsprogs' images and
/// the benchmarks build trees with them; an image tool uses
/// [`Image`](crate::ext4::Image)'s operations instead.
#[cfg(feature = "ext4")]
pub mod ext4 {
    pub use crate::ext4::{dir, extent};
}
