//! Test hooks for ext4 images: [`Validate`] for [`Image`], the invariants
//! of its in-memory state. (Fault injection is a [`Device`](super::Device)
//! of the tests', not a hook.)

use std::string::String;

use crate::testing::Validate;

use super::Image;

/// Every cached bitmap's kept checksum equals a fresh computation and its
/// free-space index (if built) one rebuilt from its bits; every changed
/// group's stored bitmap checksums and descriptor checksum are current; a
/// changed superblock's checksum is current.
impl Validate for Image {
    fn validate(&self) -> Result<(), String> {
        Image::validate(self)
    }
}
