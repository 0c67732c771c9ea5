//! Block groups read from real images made by mkfs.ext4, for
//! `bench ext4-fallocate` (filled in once the ext4 module reads images).

use super::ext4_fallocate::Group;
use super::{BenchError, Ctx};

/// Groups of images made by mkfs.ext4 for the given block sizes (none when
/// mkfs.ext4 is not installed).
pub fn groups(_ctx: &Ctx, _sizes: &[u64]) -> Result<Vec<Group>, BenchError> {
    Ok(Vec::new())
}
