//! Little-endian byte views: the on-disk bitmap layout (ext4 block and inode
//! bitmaps store bit `i` as bit `i % 8` of byte `i / 8`), which is exactly the
//! word layout read byte by byte on a little-endian machine.

use super::error::BitmapError;
use super::word::{last_word_mask, words_for};

/// Loads `nbits` bits from `bytes` (exactly `nbits.div_ceil(8)` of them) into
/// `words` (exactly `nbits.div_ceil(64)` of them). Bits of the last word past
/// `nbits` are cleared.
///
/// # Errors
/// [`BitmapError::LengthMismatch`] if either size is wrong (bytes are checked
/// first); nothing is written then.
pub fn load_le_bytes(bytes: &[u8], nbits: usize, words: &mut [u64]) -> Result<(), BitmapError> {
    check_sizes(bytes.len(), words.len(), nbits)?;
    let mut chunks = bytes.chunks_exact(8);
    for (w, c) in words.iter_mut().zip(&mut chunks) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        *w = u64::from_le_bytes(b);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut b = [0u8; 8];
        b[..rem.len()].copy_from_slice(rem);
        words[words.len() - 1] = u64::from_le_bytes(b);
    }
    if let Some(last) = words.last_mut() {
        *last &= last_word_mask(nbits);
    }
    Ok(())
}

/// Stores `nbits` bits of `words` as `nbits.div_ceil(8)` little-endian bytes.
/// Bits of the last byte past `nbits` keep the values `out` had.
///
/// # Errors
/// [`BitmapError::LengthMismatch`] if `out` is not exactly
/// `nbits.div_ceil(8)` bytes or `words` is shorter than `nbits.div_ceil(64)`;
/// nothing is written then.
pub fn store_le_bytes(words: &[u64], nbits: usize, out: &mut [u8]) -> Result<(), BitmapError> {
    if words.len() < words_for(nbits) {
        return Err(BitmapError::LengthMismatch {
            expected: words_for(nbits),
            found: words.len(),
        });
    }
    if out.len() != nbits.div_ceil(8) {
        return Err(BitmapError::LengthMismatch {
            expected: nbits.div_ceil(8),
            found: out.len(),
        });
    }
    let keep_last = out.last().copied();
    let mut chunks = out.chunks_exact_mut(8);
    for (c, w) in (&mut chunks).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    let rem = chunks.into_remainder();
    if !rem.is_empty() {
        let n = rem.len();
        rem.copy_from_slice(&words[nbits / 64].to_le_bytes()[..n]);
    }
    if let (Some(old), 1..=7) = (keep_last, nbits % 8) {
        let mask = (1u8 << (nbits % 8)) - 1;
        if let Some(last) = out.last_mut() {
            *last = (*last & mask) | (old & !mask);
        }
    }
    Ok(())
}

fn check_sizes(bytes: usize, words: usize, nbits: usize) -> Result<(), BitmapError> {
    if bytes != nbits.div_ceil(8) {
        return Err(BitmapError::LengthMismatch {
            expected: nbits.div_ceil(8),
            found: bytes,
        });
    }
    if words != words_for(nbits) {
        return Err(BitmapError::LengthMismatch {
            expected: words_for(nbits),
            found: words,
        });
    }
    Ok(())
}
