//! Block groups read from real images made by mkfs.ext4, for
//! `bench ext4-fallocate`: for each block size, a sparse two-group image
//! with the most blocks per group e2fsprogs allows (block size x 8, at most
//! 65,528), made with a fixed UUID and time, opened with `spacekit::ext4`;
//! group 1's block bitmap (backup superblock and descriptors in use) is the
//! starting state. Without mkfs.ext4 the rows are skipped with a notice.

use std::path::{Path, PathBuf};

use spacekit::bitmap::{Bitmap, BitsMut};
use spacekit::ext4::{Image, OpenMode};

use super::procs::{fresh_image, tool};
use crate::context::{BenchError, Ctx};
use crate::harness::progress;

/// One block group's starting state.
pub struct Group {
    /// Block size in bytes.
    pub block_size: u64,
    /// Blocks (bits) in the group.
    pub blocks: usize,
    /// The block bitmap (bit set = in use), `blocks` bits.
    pub bitmap: Bitmap,
    /// `image` or `memory`.
    pub source: &'static str,
}

const UUID: &str = "6a5e1c3e-2b7a-4d4f-9c1e-0123456789ab";

/// mkfs.ext4, if installed.
fn mkfs() -> Option<PathBuf> {
    tool("mkfs.ext4")
}

/// Makes a two-group image of `block_size` at `path`; returns its blocks
/// per group.
fn make_image(mkfs: &Path, path: &Path, block_size: u64) -> Result<u64, BenchError> {
    let bpg = (block_size * 8).min(65528);
    let args = [
        "-b".to_string(),
        block_size.to_string(),
        "-g".into(),
        bpg.to_string(),
        "-O".into(),
        "^has_journal".into(),
        "-E".into(),
        format!("lazy_itable_init=1,hash_seed={UUID}"),
    ];
    fresh_image(mkfs, path, block_size * bpg * 2, UUID, args)?;
    Ok(bpg)
}

/// Group 1 of an image as a block bitmap (bit set = in use).
fn group_of(path: &Path, block_size: u64) -> Result<Group, BenchError> {
    let err = |e: spacekit::ext4::Ext4Error| BenchError(format!("{}: {e}", path.display()));
    let img = Image::open(path, OpenMode::ReadOnly).map_err(err)?;
    let g = img.group(1).map_err(err)?;
    let blocks = (g.last_block - g.first_block + 1) as usize;
    let mut bitmap = Bitmap::new_set(blocks);
    for (a, b) in img.free_extents(1).map_err(err)? {
        bitmap
            .clear_range((a - g.first_block) as usize..=(b - g.first_block) as usize)
            .map_err(|e| BenchError(format!("free extent {a}-{b}: {e}")))?;
    }
    Ok(Group {
        block_size,
        blocks,
        bitmap,
        source: "image",
    })
}

/// Groups of images made by mkfs.ext4 for the given block sizes (none when
/// mkfs.ext4 is not installed).
pub fn groups(ctx: &Ctx, sizes: &[u64]) -> Result<Vec<Group>, BenchError> {
    let Some(mkfs) = mkfs() else {
        progress(
            "ext4-fallocate",
            "mkfs.ext4 not found: skipping the rows from real images",
        );
        return Ok(Vec::new());
    };
    let dir = std::env::temp_dir().join(format!(
        "spacekit-bench-ext4-{}-{}",
        std::process::id(),
        ctx.seed
    ));
    std::fs::create_dir_all(&dir).map_err(|e| BenchError(format!("{}: {e}", dir.display())))?;
    let mut out = Vec::new();
    let mut result = Ok(());
    for &bs in sizes {
        let path = dir.join(format!("{bs}.img"));
        let g = make_image(&mkfs, &path, bs).and_then(|_| group_of(&path, bs));
        let _ = std::fs::remove_file(&path);
        match g {
            Ok(g) => out.push(g),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|()| out)
}
