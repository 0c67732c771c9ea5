//! A zero-copy view of little-endian bytes (a bitmap file, an mmap, a
//! buffer from a socket) as `u64` words.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use super::error::BitmapError;

/// The words of `bytes`, read as little-endian `u64`s (byte `8 * i + j` is
/// bits `8 * j..8 * j + 8` of word `i`: KVM's `KVM_GET_DIRTY_LOG` layout, and
/// ext4's bitmap layout).
///
/// Borrowed, without a copy, when the target is little-endian and `bytes`
/// starts on an 8-byte boundary (a memory mapping always does); otherwise
/// the words are decoded into a new vector, with the same result
/// (`matches!(words, Cow::Borrowed(_))` tells the two apart).
///
/// ```
/// use std::borrow::Cow;
/// use spacekit::bitmap::le_words;
///
/// let bytes = [0x01, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0, 0, 0, 0, 0, 0, 0];
/// assert_eq!(&*le_words(&bytes)?, [0x8000_0000_0000_0001, 0xff]);
/// // Misaligned by one byte: still the right words, copied.
/// let mut shifted = [0u8; 17];
/// shifted[1..].copy_from_slice(&bytes);
/// let words = le_words(&shifted[1..])?;
/// assert_eq!(&*words, [0x8000_0000_0000_0001, 0xff]);
/// // A partial word is an error, never silently dropped or padded.
/// assert!(le_words(&bytes[..15]).is_err());
/// # Ok::<(), spacekit::bitmap::BitmapError>(())
/// ```
///
/// # Errors
/// [`BitmapError::LengthMismatch`] (counted in bytes; `expected` is the
/// length rounded up to a whole word) unless `bytes.len()` is a multiple of
/// 8.
pub fn le_words(bytes: &[u8]) -> Result<Cow<'_, [u64]>, BitmapError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(BitmapError::LengthMismatch {
            expected: bytes.len().next_multiple_of(8),
            found: bytes.len(),
        });
    }
    #[cfg(target_endian = "little")]
    {
        // SAFETY: `u64` has no padding and every bit pattern is a valid
        // `u64`, so any 8 initialised bytes are one; `align_to` hands out as
        // the middle part only a correctly aligned run of whole `u64`s inside
        // `bytes`, borrowed for `bytes`'s lifetime (shared, so the bytes
        // cannot change under it). On a little-endian target that memory
        // order is exactly the little-endian decoding below.
        let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
        if head.is_empty() && tail.is_empty() {
            return Ok(Cow::Borrowed(words));
        }
    }
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    Ok(Cow::Owned(words))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_slices_are_borrowed_and_others_copied() {
        let words: Vec<u64> = (0..9u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Every offset 0..8 into a byte buffer: same words, borrowed only
        // where the start is aligned (and the target little-endian).
        let mut buf = alloc::vec![0u8; bytes.len() + 16];
        for off in 0..8 {
            buf[off..off + bytes.len()].copy_from_slice(&bytes);
            let slice = &buf[off..off + bytes.len()];
            let got = le_words(slice).unwrap();
            assert_eq!(&*got, &words[..], "offset {off}");
            let aligned_start = (slice.as_ptr() as usize).is_multiple_of(8);
            assert_eq!(
                matches!(got, Cow::Borrowed(_)),
                aligned_start && cfg!(target_endian = "little"),
                "offset {off}"
            );
        }
        assert!(le_words(&[]).unwrap().is_empty());
        for len in [1, 7, 9, 15] {
            assert_eq!(
                le_words(&bytes[..len]),
                Err(BitmapError::LengthMismatch {
                    expected: len.next_multiple_of(8),
                    found: len
                })
            );
        }
    }
}
