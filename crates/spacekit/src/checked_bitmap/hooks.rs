//! Test hooks for [`CheckedBitmap`] (see `spacekit::testing`).

use alloc::format;
use alloc::string::String;

use crate::testing::Validate;

use super::CheckedBitmap;

/// The kept checksum equals a fresh computation, and the index (if any)
/// covers no more than the bitmap and equals one rebuilt from its bits.
impl Validate for CheckedBitmap {
    fn validate(&self) -> Result<(), String> {
        if !self.verify() {
            return Err(format!(
                "kept checksum {:#010x}, the bits say {:#010x}",
                self.crc,
                self.recompute()
            ));
        }
        if let Some(ix) = &self.index {
            if ix.len() > self.bits.len() as u64 {
                return Err(format!(
                    "the index covers {} bits, the bitmap has {}",
                    ix.len(),
                    self.bits.len()
                ));
            }
            ix.validate(self.bits.as_words())
                .map_err(|e| format!("free-space index: {e}"))?;
        }
        Ok(())
    }
}
