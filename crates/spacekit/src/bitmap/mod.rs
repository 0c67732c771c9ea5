//! Word-level bit search over `u64` words.
//!
//! Bit `i` of a bitmap is bit `i % 64` of word `i / 64` — the Linux bitmap
//! layout, and (on the little-endian byte view) the ext4 on-disk layout where
//! bit `i` is bit `i % 8` of byte `i / 8`.
//!
//! Three types hold bits:
//!
//! * [`Bitmap`] owns its words and a length in bits; bits past the length are
//!   always clear.
//! * [`BitView`] / [`BitViewMut`] borrow a caller's `&[u64]` / `&mut [u64]`
//!   with a length in bits (whatever sits in the words past it is ignored and
//!   never written).
//! * `[u64]` itself, as a bitmap of `64 * len` bits.
//!
//! All of them implement [`Bits`] (queries) and, where mutable, [`BitsMut`]
//! (updates). Bring the traits into scope with `use spacekit::bitmap::{Bits, BitsMut}`.
//!
//! ```
//! use spacekit::bitmap::{Bitmap, Bits, BitsMut};
//!
//! let mut map = Bitmap::new(1000);
//! map.set_range(0..100)?;
//! map.set(130)?;
//! assert_eq!(map.find_next_clear(0), Some(100));
//! // 40 clear bits, starting on a multiple of 32:
//! assert_eq!(map.find_clear_area(0, 40, 32, 0)?, Some(160));
//! let runs: Vec<_> = map.set_runs(0).collect();
//! assert_eq!(runs, [0..100, 130..131]);
//! # Ok::<(), spacekit::bitmap::BitmapError>(())
//! ```
//!
//! # Alignment
//!
//! Searches that align their answer follow the convention every module of
//! the crate uses (`freespace::FreeSpaceIndex::first_fit`,
//! `rangetree::RangeTree::find_gap_aligned`, `ext4::AllocRequest`): `align`
//! is a power-of-two count of bits (1 = no alignment) and `offset` shifts the
//! grid, so a position `p` is acceptable when `(p + offset) % align == 0`.
//! Pass the absolute number of bit 0 as `offset` to align absolute numbers
//! (block numbers of a block group, say). Any other `align`, 0 included, is a
//! [`BitmapError::InvalidAlignment`]. The kernel's mask form
//! (`align_mask = align - 1`) stays available as
//! [`Bits::find_clear_area_mask`], a drop-in for
//! `bitmap_find_next_zero_area_off`.
//!
//! # Speed
//!
//! Long scans skip whole words with AVX2 when the CPU has it, with a portable
//! fallback: each bitmap keeps the [`crate::arch::Level`] that
//! [`crate::arch`] detected when it was built, and each search matches it
//! once. The clear-area search reads the bitmap once instead of restarting
//! per collision; its module documentation in the source (`area.rs`)
//! describes the algorithm.

mod arch;
mod area;
mod bytes;
mod error;
mod find;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod hooks;
mod iter;
mod le_words;
mod summary;
mod word;

pub use bytes::{load_le_bytes, store_le_bytes};
pub use error::BitmapError;
pub(crate) use find::skip_fwd as skip_words;
pub use iter::{ClearRuns, Ones, SetRuns, Zeros};
pub use le_words::le_words;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{Bound, RangeBounds};

use crate::arch::Level;
use area::AreaStats;
use find::RangeOp;
use word::{last_word_mask, words_for, Align};

/// Converts `range` to `(start, end)`, end exclusive, checking that it fits in
/// `len` bits — the rule every range-taking call here applies. Useful for
/// wrappers that need the bounds before they call into a bitmap.
///
/// ```
/// use spacekit::bitmap::check_range;
///
/// assert_eq!(check_range(3..=5, 10), Ok((3, 6)));
/// assert!(check_range(8..11, 10).is_err());
/// ```
///
/// # Errors
/// [`BitmapError::RangeOutOfBounds`] if the range ends past `len`, starts
/// after it ends, or overflows.
pub fn check_range(
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize), BitmapError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        (s, e) => Err(BitmapError::RangeOutOfBounds {
            start: s.unwrap_or(usize::MAX),
            end: e.unwrap_or(usize::MAX),
            len,
        }),
    }
}

/// The alignment rule, if `align` is a power of two.
#[inline(always)]
fn check_align(align: usize, offset: usize) -> Result<Align, BitmapError> {
    if !align.is_power_of_two() {
        return Err(BitmapError::InvalidAlignment { align });
    }
    Ok(Align::new(align - 1, offset))
}

/// The alignment rule, if `mask` is of the form `2^k - 1`.
#[inline(always)]
fn check_align_mask(mask: usize, offset: usize) -> Result<Align, BitmapError> {
    if mask & mask.wrapping_add(1) != 0 {
        return Err(BitmapError::InvalidAlignMask { mask });
    }
    Ok(Align::new(mask, offset))
}

fn check_index(index: usize, len: usize) -> Result<(), BitmapError> {
    if index < len {
        Ok(())
    } else {
        Err(BitmapError::IndexOutOfBounds { index, len })
    }
}

fn check_capacity(words: usize, len: usize) -> Result<(), BitmapError> {
    let capacity = words.saturating_mul(64);
    if len <= capacity {
        Ok(())
    } else {
        Err(BitmapError::LengthTooLarge { len, capacity })
    }
}

/// The part of [`Bits`] and [`BitsMut`] only this crate can call: each
/// method takes an [`Internal`](sealed::Internal), which code outside the
/// crate cannot build, so the SIMD level a bitmap carries and its raw
/// mutable words stay inside (outside code gets `Bitmap::as_words_mut` and
/// the like where that is sound).
mod sealed {
    use crate::arch::Level;

    /// Proof that a call comes from inside this module tree.
    #[derive(Clone, Copy, Debug)]
    pub struct Internal(pub(in crate::bitmap) ());

    pub trait Sealed {
        /// The SIMD level searches run at.
        fn level(&self, _: Internal) -> Level {
            Level::detect()
        }
    }

    pub trait SealedMut {
        /// The words holding the bits, mutably.
        fn words_mut(&mut self, _: Internal) -> &mut [u64];
    }
}

/// The token for [`sealed`]'s methods.
const IN: sealed::Internal = sealed::Internal(());

/// Read-only bit queries, shared by every bitmap type in this module.
///
/// Searches that start "from" an index return `None` when the index is at or
/// past the length; functions that take a range return
/// [`BitmapError::RangeOutOfBounds`] when it does not fit.
pub trait Bits: sealed::Sealed {
    /// The words holding the bits (only the first `bit_len().div_ceil(64)`
    /// matter).
    fn words(&self) -> &[u64];

    /// Length in bits.
    fn bit_len(&self) -> usize;

    /// Value of bit `index`, or `None` past the end (test_bit).
    fn get(&self, index: usize) -> Option<bool> {
        (index < self.bit_len()).then(|| self.words()[index / 64] >> (index % 64) & 1 == 1)
    }

    /// First set bit at or after `from` (find_next_bit; the kernel returns
    /// `size` where this returns `None`).
    fn find_next_set(&self, from: usize) -> Option<usize> {
        find::next_in::<false>(self.words(), from, self.bit_len(), self.level(IN))
    }

    /// First clear bit at or after `from` (find_next_zero_bit).
    fn find_next_clear(&self, from: usize) -> Option<usize> {
        find::next_in::<true>(self.words(), from, self.bit_len(), self.level(IN))
    }

    /// Last set bit at or before `at`; `None` if there is none or `at` is past
    /// the end. (No direct kernel equivalent; see [`Bits::find_last_set_in`].)
    fn find_prev_set(&self, at: usize) -> Option<usize> {
        if at >= self.bit_len() {
            return None;
        }
        find::prev_in::<false>(self.words(), 0, at + 1, self.level(IN))
    }

    /// Last clear bit at or before `at`; `None` if there is none or `at` is
    /// past the end.
    fn find_prev_clear(&self, at: usize) -> Option<usize> {
        if at >= self.bit_len() {
            return None;
        }
        find::prev_in::<true>(self.words(), 0, at + 1, self.level(IN))
    }

    /// First set bit (find_first_bit).
    fn first_set(&self) -> Option<usize> {
        self.find_next_set(0)
    }

    /// First clear bit (find_first_zero_bit).
    fn first_clear(&self) -> Option<usize> {
        self.find_next_clear(0)
    }

    /// Last set bit (find_last_bit).
    fn last_set(&self) -> Option<usize> {
        find::prev_in::<false>(self.words(), 0, self.bit_len(), self.level(IN))
    }

    /// Last clear bit.
    fn last_clear(&self) -> Option<usize> {
        find::prev_in::<true>(self.words(), 0, self.bit_len(), self.level(IN))
    }

    /// First set bit inside `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn find_first_set_in(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<Option<usize>, BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        Ok(find::next_in::<false>(self.words(), s, e, self.level(IN)))
    }

    /// First clear bit inside `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn find_first_clear_in(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<Option<usize>, BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        Ok(find::next_in::<true>(self.words(), s, e, self.level(IN)))
    }

    /// Last set bit inside `range`: seed 000's `find_last_bit_range(addr, end,
    /// start)`, which returns `end` where this returns `None`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn find_last_set_in(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<Option<usize>, BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        Ok(find::prev_in::<false>(self.words(), s, e, self.level(IN)))
    }

    /// Last clear bit inside `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn find_last_clear_in(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<Option<usize>, BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        Ok(find::prev_in::<true>(self.words(), s, e, self.level(IN)))
    }

    /// Position of the `n`-th set bit, counting from 0 (find_nth_bit, which
    /// returns a value `>= size` where this returns `None`).
    fn nth_set(&self, n: usize) -> Option<usize> {
        find::nth_set(self.words(), self.bit_len(), n, self.level(IN))
    }

    /// Number of set bits (bitmap_weight).
    fn count_ones(&self) -> usize {
        find::count_ones_in(self.words(), 0, self.bit_len(), self.level(IN))
    }

    /// Number of set bits in `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn count_ones_in(&self, range: impl RangeBounds<usize>) -> Result<usize, BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        Ok(find::count_ones_in(self.words(), s, e, self.level(IN)))
    }

    /// Whether every bit in `range` is set (true for an empty range).
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn all_set_in(&self, range: impl RangeBounds<usize>) -> Result<bool, BitmapError> {
        Ok(self.find_first_clear_in(range)?.is_none())
    }

    /// Whether every bit in `range` is clear (true for an empty range).
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit.
    fn all_clear_in(&self, range: impl RangeBounds<usize>) -> Result<bool, BitmapError> {
        Ok(self.find_first_set_in(range)?.is_none())
    }

    /// Positions of the set bits at or after `from` (for_each_set_bit_from).
    fn iter_ones(&self, from: usize) -> Ones<'_> {
        Ones::new(self.words(), self.bit_len(), from, self.level(IN))
    }

    /// Positions of the clear bits at or after `from` (for_each_clear_bit_from).
    fn iter_zeros(&self, from: usize) -> Zeros<'_> {
        Zeros::new(self.words(), self.bit_len(), from, self.level(IN))
    }

    /// Maximal runs of set bits at or after `from`, as half-open ranges
    /// (for_each_set_bitrange_from). A run that started before `from` is
    /// reported from `from`.
    fn set_runs(&self, from: usize) -> SetRuns<'_> {
        SetRuns::new(self.words(), self.bit_len(), from, self.level(IN))
    }

    /// Maximal runs of clear bits at or after `from` (for_each_clear_bitrange_from).
    fn clear_runs(&self, from: usize) -> ClearRuns<'_> {
        ClearRuns::new(self.words(), self.bit_len(), from, self.level(IN))
    }

    /// Lowest `p >= start` such that bits `[p, p + nr)` are all clear and
    /// `(p + offset) % align == 0`: the first fit of `nr` bits from
    /// `start`, aligned as the module's "Alignment" section describes
    /// (Linux's bitmap_find_next_zero_area_off with
    /// `align_mask = align - 1`; the kernel returns a value `>= size` where
    /// this returns `None`).
    ///
    /// `align` must be a power of two (1 for no alignment). `nr == 0` returns
    /// the aligned first clear bit at or after `start`, if it is below the
    /// length, as the kernel does. `start` past the end gives `Ok(None)`.
    ///
    /// Unlike the kernel it does not reread the bitmap once per collision; see
    /// the algorithm in the source of `bitmap/area.rs`.
    ///
    /// ```
    /// use spacekit::bitmap::{Bitmap, Bits, BitsMut};
    ///
    /// let mut map = Bitmap::new(256);
    /// map.set_range(0..70)?;
    /// assert_eq!(map.find_clear_area(0, 10, 1, 0)?, Some(70));
    /// assert_eq!(map.find_clear_area(0, 10, 16, 0)?, Some(80));
    /// // Aligned on absolute numbers: bit 0 is block 1000, 1000 % 16 == 8.
    /// assert_eq!(map.find_clear_area(0, 10, 16, 1000)?, Some(72));
    /// assert!(map.find_clear_area(0, 10, 12, 0).is_err());
    /// # Ok::<(), spacekit::bitmap::BitmapError>(())
    /// ```
    ///
    /// # Errors
    /// [`BitmapError::InvalidAlignment`] unless `align` is a power of two.
    fn find_clear_area(
        &self,
        start: usize,
        nr: usize,
        align: usize,
        offset: usize,
    ) -> Result<Option<usize>, BitmapError> {
        // Calls the search directly (not through the stats hook) so the
        // unused counters vanish from the inlined fast path.
        Ok(area::find_clear_area(
            self.words(),
            self.bit_len(),
            start,
            nr,
            check_align(align, offset)?,
            self.level(IN),
            &mut AreaStats::default(),
        ))
    }

    /// [`Bits::find_clear_area`] in the kernel's mask form: the lowest
    /// `p >= start` with bits `[p, p + nr)` clear and
    /// `(p + align_offset) & align_mask == 0`. A drop-in for Linux's
    /// `bitmap_find_next_zero_area_off(map, size, start, nr, align_mask,
    /// align_offset)` (which returns a value `>= size` where this returns
    /// `None`); ports of kernel code keep their arguments as they are.
    ///
    /// `align_mask` must be `2^k - 1` (0 for no alignment); `usize::MAX`
    /// (alignment 2^64) is accepted too.
    ///
    /// ```
    /// use spacekit::bitmap::{Bitmap, Bits};
    ///
    /// let map = Bitmap::new(64);
    /// assert_eq!(map.find_clear_area_mask(1, 8, 7, 0)?, Some(8));
    /// assert_eq!(map.find_clear_area(1, 8, 8, 0)?, Some(8));
    /// # Ok::<(), spacekit::bitmap::BitmapError>(())
    /// ```
    ///
    /// # Errors
    /// [`BitmapError::InvalidAlignMask`] if `align_mask + 1` is not a power of
    /// two.
    fn find_clear_area_mask(
        &self,
        start: usize,
        nr: usize,
        align_mask: usize,
        align_offset: usize,
    ) -> Result<Option<usize>, BitmapError> {
        Ok(area::find_clear_area(
            self.words(),
            self.bit_len(),
            start,
            nr,
            check_align_mask(align_mask, align_offset)?,
            self.level(IN),
            &mut AreaStats::default(),
        ))
    }
}

/// Bit updates. Every function leaves bits outside the named index or range
/// untouched, including any bits the words hold past the length.
pub trait BitsMut: Bits + sealed::SealedMut {
    /// Sets bit `index` and returns its previous value (test_and_set_bit).
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end.
    fn set(&mut self, index: usize) -> Result<bool, BitmapError> {
        check_index(index, self.bit_len())?;
        let w = &mut self.words_mut(IN)[index / 64];
        let m = 1u64 << (index % 64);
        let old = *w & m != 0;
        *w |= m;
        Ok(old)
    }

    /// Clears bit `index` and returns its previous value (test_and_clear_bit).
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end.
    fn clear(&mut self, index: usize) -> Result<bool, BitmapError> {
        check_index(index, self.bit_len())?;
        let w = &mut self.words_mut(IN)[index / 64];
        let m = 1u64 << (index % 64);
        let old = *w & m != 0;
        *w &= !m;
        Ok(old)
    }

    /// Flips bit `index` and returns its previous value (test_and_change_bit).
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end.
    fn flip(&mut self, index: usize) -> Result<bool, BitmapError> {
        check_index(index, self.bit_len())?;
        let w = &mut self.words_mut(IN)[index / 64];
        let m = 1u64 << (index % 64);
        let old = *w & m != 0;
        *w ^= m;
        Ok(old)
    }

    /// Sets every bit in `range` (bitmap_set).
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    fn set_range(&mut self, range: impl RangeBounds<usize>) -> Result<(), BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        find::update_range(self.words_mut(IN), s, e, RangeOp::Set);
        Ok(())
    }

    /// Clears every bit in `range` (bitmap_clear).
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    fn clear_range(&mut self, range: impl RangeBounds<usize>) -> Result<(), BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        find::update_range(self.words_mut(IN), s, e, RangeOp::Clear);
        Ok(())
    }

    /// Flips every bit in `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`] if the range does not fit; nothing
    /// changes then.
    fn flip_range(&mut self, range: impl RangeBounds<usize>) -> Result<(), BitmapError> {
        let (s, e) = check_range(range, self.bit_len())?;
        find::update_range(self.words_mut(IN), s, e, RangeOp::Flip);
        Ok(())
    }

    /// Sets (`true`) or clears every bit (bitmap_fill / bitmap_zero).
    fn fill(&mut self, value: bool) {
        let len = self.bit_len();
        let op = if value { RangeOp::Set } else { RangeOp::Clear };
        find::update_range(self.words_mut(IN), 0, len, op);
    }
}

/// An owned bitmap: `len` bits in `len.div_ceil(64)` words, bits past `len`
/// always clear.
///
/// ```
/// use spacekit::bitmap::{Bitmap, Bits, BitsMut};
///
/// let mut map = Bitmap::new(200);
/// map.set_range(10..=20)?;
/// assert_eq!(map.count_ones(), 11);
/// assert_eq!(map.find_next_set(21), None);
/// assert_eq!(map.find_clear_area(0, 16, 1, 0)?, Some(21));
/// # Ok::<(), spacekit::bitmap::BitmapError>(())
/// ```
#[derive(Clone, Default)]
pub struct Bitmap {
    words: Vec<u64>,
    len: usize,
    /// Chosen once at construction so hot searches skip the detection load.
    level: Level,
}

impl PartialEq for Bitmap {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.words == other.words
    }
}

impl Eq for Bitmap {}

impl core::hash::Hash for Bitmap {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        self.words.hash(state);
    }
}

impl fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bitmap")
            .field("len", &self.len)
            .field("set_runs", &DebugRuns(self))
            .finish()
    }
}

struct DebugRuns<'a>(&'a Bitmap);

impl fmt::Debug for DebugRuns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.set_runs(0).take(32)).finish()
    }
}

impl Bitmap {
    /// `len` clear bits.
    pub fn new(len: usize) -> Bitmap {
        Bitmap {
            words: vec![0; words_for(len)],
            len,
            level: Level::detect(),
        }
    }

    /// `len` set bits.
    pub fn new_set(len: usize) -> Bitmap {
        let mut b = Bitmap {
            words: vec![!0; words_for(len)],
            len,
            level: Level::detect(),
        };
        b.clear_tail();
        b
    }

    /// Takes `words` as the bitmap's storage. Bits past `len` are cleared.
    ///
    /// # Errors
    /// [`BitmapError::LengthMismatch`] (counted in words) unless
    /// `words.len() == len.div_ceil(64)`.
    pub fn from_words(words: Vec<u64>, len: usize) -> Result<Bitmap, BitmapError> {
        if words.len() != words_for(len) {
            return Err(BitmapError::LengthMismatch {
                expected: words_for(len),
                found: words.len(),
            });
        }
        let mut b = Bitmap {
            words,
            len,
            level: Level::detect(),
        };
        b.clear_tail();
        Ok(b)
    }

    /// Reads an on-disk little-endian bitmap (bit `i` = bit `i % 8` of byte
    /// `i / 8`, as ext4 stores block and inode bitmaps). Bits of the last byte
    /// past `len` are ignored.
    ///
    /// # Errors
    /// [`BitmapError::LengthMismatch`] (counted in bytes) unless
    /// `bytes.len() == len.div_ceil(8)`.
    pub fn from_le_bytes(bytes: &[u8], len: usize) -> Result<Bitmap, BitmapError> {
        let mut b = Bitmap::new(len);
        b.load_le_bytes(bytes)?;
        Ok(b)
    }

    /// Replaces the contents with an on-disk little-endian bitmap of the same
    /// length (see [`Bitmap::from_le_bytes`]).
    ///
    /// # Errors
    /// [`BitmapError::LengthMismatch`] unless `bytes.len() == len.div_ceil(8)`;
    /// nothing changes then.
    pub fn load_le_bytes(&mut self, bytes: &[u8]) -> Result<(), BitmapError> {
        load_le_bytes(bytes, self.len, &mut self.words)?;
        self.clear_tail();
        Ok(())
    }

    /// Writes the bits as little-endian bytes into `out`. Bits of the last
    /// byte past the length keep the values `out` had (so on-disk padding
    /// survives a round trip).
    ///
    /// # Errors
    /// [`BitmapError::LengthMismatch`] unless `out.len() == len.div_ceil(8)`;
    /// nothing is written then.
    pub fn store_le_bytes(&self, out: &mut [u8]) -> Result<(), BitmapError> {
        store_le_bytes(&self.words, self.len, out)
    }

    /// The bits as `len.div_ceil(8)` little-endian bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len.div_ceil(8)];
        // The size is right by construction, so this cannot fail.
        let _ = store_le_bytes(&self.words, self.len, &mut out);
        out
    }

    /// Length in bits.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the bitmap has no bits at all (not whether none is set).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The words, `len.div_ceil(64)` of them; bits past the length are clear.
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }

    /// The storage, for callers that own it again.
    pub fn into_words(self) -> Vec<u64> {
        self.words
    }

    /// A read-only view of the same bits.
    pub fn view(&self) -> BitView<'_> {
        BitView {
            words: &self.words,
            len: self.len,
            level: self.level,
        }
    }

    fn clear_tail(&mut self) {
        if let Some(last) = self.words.last_mut() {
            *last &= last_word_mask(self.len);
        }
    }
}

impl sealed::Sealed for Bitmap {
    fn level(&self, _: sealed::Internal) -> Level {
        self.level
    }
}
impl Bits for Bitmap {
    fn words(&self) -> &[u64] {
        &self.words
    }
    fn bit_len(&self) -> usize {
        self.len
    }
}
impl sealed::SealedMut for Bitmap {
    fn words_mut(&mut self, _: sealed::Internal) -> &mut [u64] {
        &mut self.words
    }
}
impl BitsMut for Bitmap {}

/// A [`Bitmap`] with summary levels that find its first clear bit in
/// O(log n) word loads: bit `j` of level 1 says word `j` has a clear bit,
/// each level above summarises the one below, up to one word (5 levels for
/// 2^28 bits). Meant for page, block and inode allocators over large,
/// mostly full bitmaps, where the first free bit is the hot question (rcore's
/// `bitmap-allocator` answers it with a 16-way cascade).
///
/// Every update goes through its own methods ([`SummaryBitmap::set`],
/// [`SummaryBitmap::clear`], the range forms and [`SummaryBitmap::fill`]),
/// which keep the levels in step: O(1) per word changed, plus one word per
/// level when a word becomes full or stops being full. There is no
/// [`BitsMut`] (whose updates would bypass the levels); every read-only
/// query of [`Bits`] is there, and [`SummaryBitmap::find_next_clear`] and
/// [`SummaryBitmap::find_clear_area`] use the levels.
///
/// ```
/// use spacekit::bitmap::SummaryBitmap;
///
/// let mut map = SummaryBitmap::new(1 << 20);
/// map.set_range(0..700_000)?;
/// map.clear(12_345)?;
/// assert_eq!(map.alloc(1, 1)?, Some(12_345));       // found and set
/// assert_eq!(map.find_next_clear(0), Some(700_000));
/// assert_eq!(map.find_clear_area(0, 64, 64, 0)?, Some(700_032));
/// # Ok::<(), spacekit::bitmap::BitmapError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryBitmap {
    map: Bitmap,
    sum: summary::Summary,
}

impl SummaryBitmap {
    /// `len` clear bits.
    pub fn new(len: usize) -> SummaryBitmap {
        SummaryBitmap::from_bitmap(Bitmap::new(len))
    }

    /// Summarises `map`: O(n).
    pub fn from_bitmap(map: Bitmap) -> SummaryBitmap {
        let sum = summary::Summary::build(&map.words, map.len);
        SummaryBitmap { map, sum }
    }

    /// The bitmap, for reading.
    pub fn as_bitmap(&self) -> &Bitmap {
        &self.map
    }

    /// The bitmap, dropping the levels.
    pub fn into_bitmap(self) -> Bitmap {
        self.map
    }

    /// Length in bits.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Whether the length is 0.
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// First clear bit at or after `from` ([`Bits::find_next_clear`]), in
    /// O(log n) through the levels.
    #[inline]
    pub fn find_next_clear(&self, from: usize) -> Option<usize> {
        if from >= self.map.len {
            return None;
        }
        let words = &self.map.words;
        let j = from / 64;
        let tail = if j + 1 == words.len() {
            last_word_mask(self.map.len)
        } else {
            !0
        };
        let here = !words[j] & tail & (!0u64 << (from % 64));
        if here != 0 {
            return Some(j * 64 + here.trailing_zeros() as usize);
        }
        let k = self.sum.next_free_word(j + 1)?;
        let tail = if k + 1 == words.len() {
            last_word_mask(self.map.len)
        } else {
            !0
        };
        Some(k * 64 + (!words[k] & tail).trailing_zeros() as usize)
    }

    /// [`Bits::find_clear_area`] (same arguments, answer and errors), from
    /// the first clear bit at or after `start` found through the levels: a
    /// single bit without alignment is that bit; anything else is searched
    /// from there.
    ///
    /// # Errors
    /// As [`Bits::find_clear_area`].
    #[inline]
    pub fn find_clear_area(
        &self,
        start: usize,
        nr: usize,
        align: usize,
        offset: usize,
    ) -> Result<Option<usize>, BitmapError> {
        check_align(align, offset)?;
        // Any fit starts at a clear bit; an empty request is answered by
        // the plain search (the aligned start, as the kernel does).
        let from = if nr == 0 {
            start
        } else {
            match self.find_next_clear(start) {
                None => return Ok(None),
                Some(s) if nr == 1 && align == 1 => return Ok(Some(s)),
                Some(s) => s,
            }
        };
        self.map.find_clear_area(from, nr, align, offset)
    }

    /// Allocates: the lowest `nr` clear bits starting on a multiple of
    /// `align` ([`SummaryBitmap::find_clear_area`] from 0) are set and their
    /// start returned; `None` (nothing changed) if there is no room.
    ///
    /// # Errors
    /// [`BitmapError::InvalidAlignment`] unless `align` is a power of two.
    pub fn alloc(&mut self, nr: usize, align: usize) -> Result<Option<usize>, BitmapError> {
        let Some(p) = self.find_clear_area(0, nr, align, 0)? else {
            return Ok(None);
        };
        if nr == 1 {
            self.set(p)?;
        } else {
            self.set_range(p..p + nr)?;
        }
        Ok(Some(p))
    }

    /// Sets bit `index` and returns its previous value.
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end.
    #[inline]
    pub fn set(&mut self, index: usize) -> Result<bool, BitmapError> {
        self.put(index, true)
    }

    /// Clears bit `index` and returns its previous value.
    ///
    /// # Errors
    /// [`BitmapError::IndexOutOfBounds`] past the end.
    #[inline]
    pub fn clear(&mut self, index: usize) -> Result<bool, BitmapError> {
        self.put(index, false)
    }

    /// Bit `index` becomes `value`; the levels hear of its word only if the
    /// bit changed. Returns the previous value.
    #[inline(always)]
    fn put(&mut self, index: usize, value: bool) -> Result<bool, BitmapError> {
        check_index(index, self.map.len)?;
        let j = index / 64;
        let m = 1u64 << (index % 64);
        let w = self.map.words[j];
        let old = w & m != 0;
        if old != value {
            let w = w ^ m;
            self.map.words[j] = w;
            self.sum.note(j, w);
        }
        Ok(old)
    }

    /// Sets every bit in `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`]; nothing changes then.
    pub fn set_range(&mut self, range: impl RangeBounds<usize>) -> Result<(), BitmapError> {
        let (s, e) = check_range(range, self.map.len)?;
        self.update(s, e, RangeOp::Set);
        Ok(())
    }

    /// Clears every bit in `range`.
    ///
    /// # Errors
    /// [`BitmapError::RangeOutOfBounds`]; nothing changes then.
    pub fn clear_range(&mut self, range: impl RangeBounds<usize>) -> Result<(), BitmapError> {
        let (s, e) = check_range(range, self.map.len)?;
        self.update(s, e, RangeOp::Clear);
        Ok(())
    }

    /// Sets (`true`) or clears every bit.
    pub fn fill(&mut self, value: bool) {
        let op = if value { RangeOp::Set } else { RangeOp::Clear };
        self.update(0, self.map.len, op);
    }

    fn update(&mut self, s: usize, e: usize, op: RangeOp) {
        if s >= e {
            return;
        }
        find::update_range(&mut self.map.words, s, e, op);
        for j in s / 64..=(e - 1) / 64 {
            self.sum.note(j, self.map.words[j]);
        }
    }

    /// The levels equal ones rebuilt from the bits (for `Validate`).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn validate(&self) -> Result<(), alloc::string::String> {
        self.sum.validate(&self.map.words, self.map.len)
    }
}

/// The summary levels equal ones rebuilt from the bits.
#[cfg(any(test, feature = "testing"))]
impl crate::testing::Validate for SummaryBitmap {
    fn validate(&self) -> Result<(), alloc::string::String> {
        SummaryBitmap::validate(self)
    }
}

impl sealed::Sealed for SummaryBitmap {
    fn level(&self, _: sealed::Internal) -> Level {
        self.map.level
    }
}
impl Bits for SummaryBitmap {
    fn words(&self) -> &[u64] {
        &self.map.words
    }
    fn bit_len(&self) -> usize {
        self.map.len
    }
}

/// A borrowed, read-only bitmap over a caller's words.
///
/// ```
/// use spacekit::bitmap::{BitView, Bits};
///
/// let words = [0u64, 1 << 5];
/// let v = BitView::new(&words, 100)?;
/// assert_eq!(v.first_set(), Some(69));
/// # Ok::<(), spacekit::bitmap::BitmapError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct BitView<'a> {
    words: &'a [u64],
    len: usize,
    level: Level,
}

impl<'a> BitView<'a> {
    /// Views the first `len` bits of `words`.
    ///
    /// # Errors
    /// [`BitmapError::LengthTooLarge`] if `len > 64 * words.len()`.
    pub fn new(words: &'a [u64], len: usize) -> Result<Self, BitmapError> {
        check_capacity(words.len(), len)?;
        Ok(BitView {
            words,
            len,
            level: Level::detect(),
        })
    }
}

impl sealed::Sealed for BitView<'_> {
    fn level(&self, _: sealed::Internal) -> Level {
        self.level
    }
}
impl Bits for BitView<'_> {
    fn words(&self) -> &[u64] {
        self.words
    }
    fn bit_len(&self) -> usize {
        self.len
    }
}

/// A borrowed, mutable bitmap over a caller's words. Bits past `len` are never
/// read as part of the bitmap and never written.
#[derive(Debug)]
pub struct BitViewMut<'a> {
    words: &'a mut [u64],
    len: usize,
    level: Level,
}

impl<'a> BitViewMut<'a> {
    /// Views the first `len` bits of `words`.
    ///
    /// # Errors
    /// [`BitmapError::LengthTooLarge`] if `len > 64 * words.len()`.
    pub fn new(words: &'a mut [u64], len: usize) -> Result<Self, BitmapError> {
        check_capacity(words.len(), len)?;
        Ok(BitViewMut {
            words,
            len,
            level: Level::detect(),
        })
    }
}

impl sealed::Sealed for BitViewMut<'_> {
    fn level(&self, _: sealed::Internal) -> Level {
        self.level
    }
}
impl Bits for BitViewMut<'_> {
    fn words(&self) -> &[u64] {
        self.words
    }
    fn bit_len(&self) -> usize {
        self.len
    }
}
impl sealed::SealedMut for BitViewMut<'_> {
    fn words_mut(&mut self, _: sealed::Internal) -> &mut [u64] {
        self.words
    }
}
impl BitsMut for BitViewMut<'_> {}

impl sealed::Sealed for [u64] {}
impl Bits for [u64] {
    fn words(&self) -> &[u64] {
        self
    }
    fn bit_len(&self) -> usize {
        self.len().saturating_mul(64)
    }
}
impl sealed::SealedMut for [u64] {
    fn words_mut(&mut self, _: sealed::Internal) -> &mut [u64] {
        self
    }
}
impl BitsMut for [u64] {}

impl<B: Bits + ?Sized> sealed::Sealed for &B {
    fn level(&self, i: sealed::Internal) -> Level {
        (**self).level(i)
    }
}
impl<B: Bits + ?Sized> Bits for &B {
    fn words(&self) -> &[u64] {
        (**self).words()
    }
    fn bit_len(&self) -> usize {
        (**self).bit_len()
    }
}
