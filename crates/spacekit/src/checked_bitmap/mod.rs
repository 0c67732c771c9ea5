//! A bitmap whose CRC-32C, and optionally whose free-space index, every
//! update keeps current.
//!
//! ext4 stores, for each block group, a block bitmap and an inode bitmap and a
//! raw CRC-32C of each (seeded with the filesystem's checksum seed) over only
//! the bytes that hold real bits: `clusters_per_group / 8` bytes of the block
//! bitmap, `inodes_per_group / 8` of the inode bitmap. Recomputing it after
//! each allocation costs O(block size); [`CheckedBitmap`] updates it in
//! O(log n) instead (like the `ext4_block_bitmap_csum_set_range()` proposed
//! for Linux in 2026):
//!
//! * when every bit of an updated range changes (allocating free blocks,
//!   freeing used ones, any flip) — [`crate::crc32c::flip_range`];
//! * when only some do — a splice over the range's words: the CRC of the old
//!   words XOR the CRC of the new ones, shifted past the rest of the buffer;
//! * bits at or past `8 * csum_len` change no checksum.
//!
//! A block allocator also needs to *find* free space. With a
//! [`FreeSpaceIndex`] built over the bitmap (or over its first bits: an ext4
//! group's blocks, without the padding past them) by
//! [`CheckedBitmap::build_index`], every set, clear and flip also brings the
//! index in step ([`FreeSpaceIndex::update`] over the changed range,
//! O(log n + words changed)), and the queries
//! [`first_fit`](CheckedBitmap::first_fit),
//! [`best_fit`](CheckedBitmap::best_fit) and
//! [`largest_free`](CheckedBitmap::largest_free) go through it in O(log n)
//! (seed 001's per-group free-space tree). Bitmap, checksum and index can
//! only change together, so no caller can let one fall behind the others.

mod fit;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod hooks;

use alloc::vec::Vec;
use core::ops::RangeBounds;

use crate::bitmap::{check_range, Bitmap, BitmapError, Bits, BitsMut};
use crate::crc32c::{CrcError, Engine};
use crate::freespace::FreeSpaceIndex;

/// A bitmap plus the raw CRC-32C, under a seed, of its first `csum_len` bytes
/// in the on-disk little-endian layout (bit `i` = bit `i % 8` of byte
/// `i / 8`), plus (optionally) a free-space index over its first bits.
///
/// Bits can only change through this type's methods, each of which keeps the
/// checksum and the index current; [`CheckedBitmap::verify`] recomputes the
/// checksum from scratch.
///
/// ```
/// use spacekit::checked_bitmap::CheckedBitmap;
///
/// // A 4 KiB ext4 block bitmap of a group with 32768 blocks (all bytes count).
/// let block = vec![0u8; 4096];
/// let mut map = CheckedBitmap::from_bytes(&block, 0xDEAD_BEEF, 4096)?;
/// map.set_range(100..140)?;          // every bit flips: O(log n)
/// map.set_range(120..200)?;          // some already set: splice
/// map.clear(130)?;
/// assert!(map.verify());
/// assert_eq!(map.checksum(), spacekit::crc32c::raw(0xDEAD_BEEF, &map.to_bytes()));
///
/// // With a free-space index over the group's blocks, searches take
/// // O(log n) and every change keeps the index in step.
/// map.build_index(32768)?;
/// // 64 blocks aligned to 64 (the group's bit 0 is block 32769), from block 0.
/// let s = map.first_fit(64, 64, 32769 % 64, 0)?.expect("room");
/// assert_eq!((s + 32769) % 64, 0);
/// map.set_range(s..s + 64)?;
/// assert_eq!(map.largest_free(), Some((s + 64, 32768 - s - 64)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct CheckedBitmap {
    bits: Bitmap,
    seed: u32,
    csum_len: usize,
    crc: u32,
    engine: Engine,
    /// Over the first `index.len()` bits, if built.
    index: Option<FreeSpaceIndex>,
}

/// Equal bits, seed, checksummed length and checksum (the engine that keeps
/// the checksum and the index, which follows from the bits, are not part of
/// the value).
impl PartialEq for CheckedBitmap {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
            && self.seed == other.seed
            && self.csum_len == other.csum_len
            && self.crc == other.crc
    }
}

impl Eq for CheckedBitmap {}

impl CheckedBitmap {
    /// Reads `bytes` (all of them become bits) and computes the raw CRC-32C of
    /// the first `csum_len` bytes from `seed`. No index yet (see
    /// [`CheckedBitmap::build_index`]).
    ///
    /// # Errors
    /// [`CrcError::ChecksumLenTooLong`] if `csum_len > bytes.len()`.
    pub fn from_bytes(bytes: &[u8], seed: u32, csum_len: usize) -> Result<Self, CrcError> {
        Self::from_bytes_with(Engine::detect(), bytes, seed, csum_len)
    }

    /// [`CheckedBitmap::from_bytes`] with a chosen [`Engine`] (tests use
    /// [`Engine::portable`] to run the fallbacks).
    ///
    /// # Errors
    /// As [`CheckedBitmap::from_bytes`].
    pub fn from_bytes_with(
        engine: Engine,
        bytes: &[u8],
        seed: u32,
        csum_len: usize,
    ) -> Result<Self, CrcError> {
        if csum_len > bytes.len() {
            return Err(CrcError::ChecksumLenTooLong {
                csum_len,
                len: bytes.len(),
            });
        }
        let bits = bytes
            .len()
            .checked_mul(8)
            .and_then(|n| Bitmap::from_le_bytes(bytes, n).ok())
            .ok_or(CrcError::BufferTooLarge {
                buf_len: bytes.len() as u64,
            })?;
        let crc = engine.raw(seed, &bytes[..csum_len]);
        Ok(CheckedBitmap {
            bits,
            seed,
            csum_len,
            crc,
            engine,
            index: None,
        })
    }

    /// The current raw CRC-32C of the first `csum_len` bytes under the seed —
    /// the value ext4 stores (its low 16 bits for 32-byte group descriptors).
    pub fn checksum(&self) -> u32 {
        self.crc
    }

    /// The seed the checksum starts from.
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// How many leading bytes the checksum covers.
    pub fn csum_len(&self) -> usize {
        self.csum_len
    }

    /// The bits, read-only.
    pub fn bitmap(&self) -> &Bitmap {
        &self.bits
    }

    /// Length in bits (8 per byte given at construction).
    pub fn len(&self) -> usize {
        self.bits.len()
    }

    /// Whether there are no bits at all.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// The bytes to write back to disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.bits.to_le_bytes()
    }

    /// Writes the bytes into `out` (same length as at construction).
    ///
    /// # Errors
    /// [`BitmapError::LengthMismatch`] if `out` has another length.
    pub fn store_bytes(&self, out: &mut [u8]) -> Result<(), BitmapError> {
        self.bits.store_le_bytes(out)
    }

    /// The checksum computed from scratch over the current bits.
    pub fn recompute(&self) -> u32 {
        self.engine
            .raw_words(self.seed, self.bits.as_words(), self.csum_len)
    }

    /// Whether the kept checksum equals a fresh computation.
    pub fn verify(&self) -> bool {
        self.recompute() == self.crc
    }

    /// Takes the bitmap and its checksum apart (the index, if any, is
    /// dropped).
    pub fn into_parts(self) -> (Bitmap, u32) {
        (self.bits, self.crc)
    }

    /// Sets bit `index`; returns its previous value.
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end; nothing changes then.
    pub fn set(&mut self, index: usize) -> Result<bool, BitmapError> {
        let old = self.bits.set(index)?;
        if !old {
            self.flip_crc(index, index + 1);
            self.sync_index(index, index + 1);
        }
        Ok(old)
    }

    /// Clears bit `index`; returns its previous value.
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end; nothing changes then.
    pub fn clear(&mut self, index: usize) -> Result<bool, BitmapError> {
        let old = self.bits.clear(index)?;
        if old {
            self.flip_crc(index, index + 1);
            self.sync_index(index, index + 1);
        }
        Ok(old)
    }

    /// Flips bit `index`; returns its previous value.
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end; nothing changes then.
    pub fn flip(&mut self, index: usize) -> Result<bool, BitmapError> {
        let old = self.bits.flip(index)?;
        self.flip_crc(index, index + 1);
        self.sync_index(index, index + 1);
        Ok(old)
    }

    /// Sets every bit in `range`; returns how many changed.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    pub fn set_range(&mut self, range: impl RangeBounds<usize>) -> Result<usize, BitmapError> {
        self.update(range, Op::Set)
    }

    /// Clears every bit in `range`; returns how many changed.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    pub fn clear_range(&mut self, range: impl RangeBounds<usize>) -> Result<usize, BitmapError> {
        self.update(range, Op::Clear)
    }

    /// Flips every bit in `range`; returns how many changed (all of them).
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    pub fn flip_range(&mut self, range: impl RangeBounds<usize>) -> Result<usize, BitmapError> {
        self.update(range, Op::Flip)
    }

    /// The bits `[start, end)` all flipped: update the checksum for the part
    /// inside `csum_len`.
    fn flip_crc(&mut self, start: usize, end: usize) {
        let cb = self.csum_len * 8;
        let (s, e) = (start.min(cb), end.min(cb));
        if s < e {
            let c =
                self.engine
                    .flip_range(self.crc, self.csum_len as u64, s as u64, (e - s) as u64);
            // The range lies inside csum_len bytes, so flip_range cannot
            // reject it.
            debug_assert!(c.is_ok());
            if let Ok(c) = c {
                self.crc = c;
            }
        }
    }

    fn update(&mut self, range: impl RangeBounds<usize>, op: Op) -> Result<usize, BitmapError> {
        let (s, e) = check_range(range, self.bits.len())?;
        let cb = self.csum_len * 8;
        let (cs, ce) = (s.min(cb), e.min(cb));
        // How many bits of [lo, hi) the op changes.
        let changing = |bits: &Bitmap, lo: usize, hi: usize| -> usize {
            if lo >= hi {
                return 0;
            }
            let ones = || bits.count_ones_in(lo..hi).unwrap_or(0);
            match op {
                Op::Flip => hi - lo,
                Op::Set => (hi - lo) - ones(),
                Op::Clear => ones(),
            }
        };
        let inside = changing(&self.bits, cs, ce);
        let outside = if e > cb {
            changing(&self.bits, s.max(cb), e)
        } else {
            0
        };
        // Some but not all bits inside change: splice the range's words. The
        // span is whole words, clipped to csum_len bytes.
        let span = (inside > 0 && inside < ce - cs).then(|| {
            let first = cs / 64 * 8;
            let end = ((ce - 1) / 64 * 8 + 8).min(self.csum_len);
            (first, end)
        });
        let old_span = span.map(|(a, b)| self.span_crc(a, b));
        match op {
            Op::Set => self.bits.set_range(s..e)?,
            Op::Clear => self.bits.clear_range(s..e)?,
            Op::Flip => self.bits.flip_range(s..e)?,
        }
        match (span, old_span) {
            (Some((a, b)), Some(old)) => {
                let delta = old ^ self.span_crc(a, b);
                self.crc ^= self.engine.shift(delta, (self.csum_len - b) as u64);
            }
            _ if inside > 0 => self.flip_crc(cs, ce),
            _ => {}
        }
        if inside + outside > 0 {
            self.sync_index(s, e);
        }
        Ok(inside + outside)
    }

    /// Raw CRC (from 0) of bytes `[a, b)`, `a` a multiple of 8.
    fn span_crc(&self, a: usize, b: usize) -> u32 {
        self.engine
            .raw_words(0, &self.bits.as_words()[a / 8..], b - a)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Set,
    Clear,
    Flip,
}
