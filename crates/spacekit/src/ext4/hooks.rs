//! Test hooks for ext4 images, re-exported as `spacekit::__testing::ext4`
//! (and [`Validate`] for [`Image`]): fault injection for
//! [`Image::flush`] and the invariants of the in-memory state.

use std::string::String;

use crate::__testing::Validate;

use super::Image;

/// Fault injection: the flush after this call performs `n` I/O steps and
/// makes step `n` (counting from 0) fail with an I/O error; a failing write
/// first writes half of its bytes, like a torn write. The steps, in order:
/// the log's contents, the log's trailer, fsync of the log, fsync of the
/// directory, one write per metadata block, fsync of the image, removal of
/// the log, fsync of the directory. One flush consumes the setting whether
/// or not it reached step `n`.
pub fn fail_write_after(img: &mut Image, n: usize) {
    img.fail_write_after(n);
}

/// Fault injection: from now on, reading block `block` of the image (a
/// bitmap, or any block read through the block cache: inode tables,
/// extent and directory blocks) fails with an I/O error; `None` ends it.
/// Blocks already cached are not read again.
pub fn fail_read_of(img: &mut Image, block: Option<u64>) {
    img.fail_read_of(block);
}

/// Every cached bitmap's kept checksum equals a fresh computation and its
/// free-space index (if built) one rebuilt from its bits; every changed
/// group's stored bitmap checksums and descriptor checksum are current; a
/// changed superblock's checksum is current.
impl Validate for Image {
    fn validate(&self) -> Result<(), String> {
        Image::validate(self)
    }
}
