//! Test hooks for [`FreeSpaceIndex`] (re-exported in `spacekit::testing`).

use alloc::string::String;

use super::FreeSpaceIndex;

/// Checks that every summary of `index` equals one recomputed from `words`
/// (the bitmap it indexes); `Err` names the first leaf or node that differs.
/// O(n). The index does not own its bitmap, so this is a function over both
/// rather than a [`Validate`](crate::testing::Validate) impl.
pub fn validate_index(index: &FreeSpaceIndex, words: &[u64]) -> Result<(), String> {
    index.validate(words)
}
