//! Bitmaps over caller-owned `uint64_t` words, and the free-space index.
//!
//! A bitmap is `words` plus a length in bits `nbits`: bit `i` is bit
//! `i % 64` of `words[i / 64]` (Linux's layout, and ext4's on-disk layout
//! read as little-endian words), and `words` holds `(nbits + 63) / 64`
//! words. Bits of the last word past `nbits` are never read as part of the
//! bitmap and never written.

use spacekit_core::bitmap::{BitView, BitViewMut, BitmapError, Bits, BitsMut};
use spacekit_core::freespace::{FreeSpaceError, FreeSpaceIndex};

use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{drop_box, guard, handle, handle_mut, need, put, put_box, slice, slice_mut, Res};

pub(crate) fn bitmap_err(e: BitmapError) -> spacekit_status {
    match e {
        BitmapError::IndexOutOfBounds { .. } | BitmapError::RangeOutOfBounds { .. } => {
            SPACEKIT_ERROR_OUT_OF_RANGE
        }
        BitmapError::InvalidAlignment { .. } | BitmapError::InvalidAlignMask { .. } => {
            SPACEKIT_ERROR_BAD_ALIGNMENT
        }
        BitmapError::LengthTooLarge { .. } | BitmapError::LengthMismatch { .. } => {
            SPACEKIT_ERROR_LENGTH_MISMATCH
        }
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

pub(crate) fn freespace_err(e: FreeSpaceError) -> spacekit_status {
    match e {
        FreeSpaceError::LengthMismatch { .. } => SPACEKIT_ERROR_LENGTH_MISMATCH,
        FreeSpaceError::OutOfRange { .. } => SPACEKIT_ERROR_OUT_OF_RANGE,
        FreeSpaceError::ZeroLength => SPACEKIT_ERROR_ZERO_LENGTH,
        FreeSpaceError::BadAlignment { .. } => SPACEKIT_ERROR_BAD_ALIGNMENT,
        FreeSpaceError::TooLarge { .. } => SPACEKIT_ERROR_TOO_LARGE,
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// A read-only view of `nbits` bits of `words`.
///
/// # Safety
/// `words` must be NULL (only with `nbits == 0`) or valid for reads of
/// `(nbits + 63) / 64` words.
#[inline(always)]
unsafe fn view<'a>(words: *const u64, nbits: usize) -> Result<BitView<'a>, spacekit_status> {
    // SAFETY: forwarded from the caller.
    let w = unsafe { slice(words, nbits.div_ceil(64)) }?;
    BitView::new(w, nbits).map_err(bitmap_err)
}

/// A mutable view of `nbits` bits of `words`.
///
/// # Safety
/// As [`view`], for reads and writes.
#[inline(always)]
unsafe fn view_mut<'a>(words: *mut u64, nbits: usize) -> Result<BitViewMut<'a>, spacekit_status> {
    // SAFETY: forwarded from the caller.
    let w = unsafe { slice_mut(words, nbits.div_ceil(64)) }?;
    BitViewMut::new(w, nbits).map_err(bitmap_err)
}

/// `[start, start + len)` as a Rust range, refusing overflow.
fn span(start: usize, len: usize) -> Result<core::ops::Range<usize>, spacekit_status> {
    let end = start.checked_add(len).ok_or(SPACEKIT_ERROR_OUT_OF_RANGE)?;
    Ok(start..end)
}

/// Stores a search result: `SPACEKIT_OK` with `*out` set, or
/// `SPACEKIT_NOT_FOUND`.
///
/// # Safety
/// `out` must be valid for a write (checked non-null by the caller).
#[inline(always)]
unsafe fn found<T>(out: *mut T, v: Option<T>) -> Res {
    match v {
        // SAFETY: forwarded from the caller.
        Some(v) => unsafe { put(out, v) },
        None => Err(SPACEKIT_NOT_FOUND),
    }
}

/// The number of `uint64_t` words a bitmap of `nbits` bits needs:
/// `(nbits + 63) / 64`.
///
/// # Safety
/// `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_words(nbits: usize, out: *mut usize) -> spacekit_status {
    // SAFETY: `out` is valid for a write (the caller's contract).
    guard(|| unsafe { put(out, nbits.div_ceil(64)) })
}

/// Whether bit `index` is set (`test_bit`).
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if `index >= nbits`;
/// `SPACEKIT_ERROR_NULL_POINTER`.
///
/// # Safety
/// `words` must be valid for reads of `(nbits + 63) / 64` words (or NULL
/// when `nbits` is 0); `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_test(
    words: *const u64,
    nbits: usize,
    index: usize,
    out: *mut bool,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        let v = unsafe { view(words, nbits) }?;
        let bit = v.get(index).ok_or(SPACEKIT_ERROR_OUT_OF_RANGE)?;
        // SAFETY: as above.
        unsafe { put(out, bit) }
    })
}

/// The first set bit at or after `from` (`find_next_bit`): `SPACEKIT_OK`
/// with `*out` set, or `SPACEKIT_NOT_FOUND` (the kernel returns `nbits`)
/// when there is none or `from >= nbits`.
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_find_next_set(
    words: *const u64,
    nbits: usize,
    from: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        unsafe { found(out, view(words, nbits)?.find_next_set(from)) }
    })
}

/// The first clear bit at or after `from` (`find_next_zero_bit`), or
/// `SPACEKIT_NOT_FOUND`.
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_find_next_clear(
    words: *const u64,
    nbits: usize,
    from: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        unsafe { found(out, view(words, nbits)?.find_next_clear(from)) }
    })
}

/// The last set bit at or before `at`, or `SPACEKIT_NOT_FOUND` when there
/// is none or `at >= nbits`.
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_find_prev_set(
    words: *const u64,
    nbits: usize,
    at: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        unsafe { found(out, view(words, nbits)?.find_prev_set(at)) }
    })
}

/// The last clear bit at or before `at`, or `SPACEKIT_NOT_FOUND`.
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_find_prev_clear(
    words: *const u64,
    nbits: usize,
    at: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        unsafe { found(out, view(words, nbits)?.find_prev_clear(at)) }
    })
}

/// The lowest `p >= start` such that bits `[p, p + nr)` are all clear and
/// `(p + align_offset) & align_mask == 0`: a drop-in for Linux's
/// `bitmap_find_next_zero_area_off(map, size, start, nr, align_mask,
/// align_offset)`, which returns a value `>= size` where this returns
/// `SPACEKIT_NOT_FOUND`. `align_mask` is `2^k - 1` (0: no alignment).
///
/// Errors: `SPACEKIT_ERROR_BAD_ALIGNMENT` unless `align_mask + 1` is a
/// power of two (or `align_mask` is `SIZE_MAX`).
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_find_clear_area(
    words: *const u64,
    nbits: usize,
    start: usize,
    nr: usize,
    align_mask: usize,
    align_offset: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        let v = unsafe { view(words, nbits) }?;
        let r = v
            .find_clear_area_mask(start, nr, align_mask, align_offset)
            .map_err(bitmap_err)?;
        // SAFETY: as above.
        unsafe { found(out, r) }
    })
}

/// Sets bits `[start, start + len)` (`bitmap_set`).
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if the range passes `nbits` (or
/// overflows); nothing changes then.
///
/// # Safety
/// `words` must be valid for reads and writes of `(nbits + 63) / 64` words
/// (or NULL when `nbits` is 0).
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_set_range(
    words: *mut u64,
    nbits: usize,
    start: usize,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `words`.
        let mut v = unsafe { view_mut(words, nbits) }?;
        v.set_range(span(start, len)?).map_err(bitmap_err)
    })
}

/// Clears bits `[start, start + len)` (`bitmap_clear`). Errors as
/// [`spacekit_bitmap_set_range`].
///
/// # Safety
/// As [`spacekit_bitmap_set_range`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_clear_range(
    words: *mut u64,
    nbits: usize,
    start: usize,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `words`.
        let mut v = unsafe { view_mut(words, nbits) }?;
        v.clear_range(span(start, len)?).map_err(bitmap_err)
    })
}

/// Flips bits `[start, start + len)`. Errors as
/// [`spacekit_bitmap_set_range`].
///
/// # Safety
/// As [`spacekit_bitmap_set_range`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_flip_range(
    words: *mut u64,
    nbits: usize,
    start: usize,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `words`.
        let mut v = unsafe { view_mut(words, nbits) }?;
        v.flip_range(span(start, len)?).map_err(bitmap_err)
    })
}

/// The number of set bits in `[start, start + len)`; `start = 0, len =
/// nbits` is `bitmap_weight`. The clear bits are `len - *out`.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if the range passes `nbits`.
///
/// # Safety
/// As [`spacekit_bitmap_test`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_bitmap_count_set(
    words: *const u64,
    nbits: usize,
    start: usize,
    len: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `words` and `out`.
        let v = unsafe { view(words, nbits) }?;
        let n = v.count_ones_in(span(start, len)?).map_err(bitmap_err)?;
        // SAFETY: as above.
        unsafe { put(out, n) }
    })
}

/// A free-space index over a caller-owned bitmap (bit set = in use):
/// first fit from a goal, best fit by size class and the largest free run,
/// in O(log n). The index does not keep a pointer to the bitmap: every call
/// takes the words, which must be the ones the index was built over, kept
/// in step with [`spacekit_freespace_update`] after every change.
///
/// Ownership: made by [`spacekit_freespace_new`], released by
/// [`spacekit_freespace_free`]. Not thread-safe: one thread at a time.
pub struct spacekit_freespace {
    index: FreeSpaceIndex,
}

/// Builds a free-space index over the first `nbits` bits of `words`
/// (at most 2^32 - 1) and stores a new handle in `*out`.
///
/// Errors: `SPACEKIT_ERROR_TOO_LARGE` past 2^32 - 1 bits;
/// `SPACEKIT_ERROR_NO_MEMORY`.
///
/// # Safety
/// `words` must be valid for reads of `(nbits + 63) / 64` words (or NULL
/// when `nbits` is 0); `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_new(
    words: *const u64,
    nbits: u64,
    out: *mut *mut spacekit_freespace,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        if nbits > u64::from(u32::MAX) {
            return Err(SPACEKIT_ERROR_TOO_LARGE);
        }
        // SAFETY: the caller's contract on `words`.
        let w = unsafe { slice(words, (nbits as usize).div_ceil(64)) }?;
        crate::ffi::probe_alloc(w.len())?;
        let index = FreeSpaceIndex::new(w, nbits).map_err(freespace_err)?;
        // SAFETY: `out` is valid for a write (the caller's contract).
        unsafe { put_box(out, spacekit_freespace { index }) }
    })
}

/// Releases an index; NULL is a no-op.
///
/// # Safety
/// `index` must be NULL or a handle from [`spacekit_freespace_new`] not
/// freed before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_free(
    index: *mut spacekit_freespace,
) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(index) })
}

/// Brings the index in step after bits `[start, start + len)` of `words`
/// changed.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` for a range outside the index;
/// `SPACEKIT_ERROR_LENGTH_MISMATCH` if `nbits` is less than the index's
/// bits.
///
/// # Safety
/// `index` a live handle; `words` valid for reads of `(nbits + 63) / 64`
/// words.
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_update(
    index: *mut spacekit_freespace,
    words: *const u64,
    nbits: u64,
    start: u64,
    len: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `index` and `words`.
        let ix = unsafe { handle_mut(index) }?;
        // SAFETY: as above.
        let w = unsafe { freespace_words(ix, words, nbits) }?;
        let end = start.checked_add(len).ok_or(SPACEKIT_ERROR_OUT_OF_RANGE)?;
        ix.index.update(w, start..end).map_err(freespace_err)
    })
}

/// The words of a bitmap handed to an index call, checked to cover it.
///
/// # Safety
/// `words` valid for reads of `(nbits + 63) / 64` words.
unsafe fn freespace_words<'a>(
    ix: &spacekit_freespace,
    words: *const u64,
    nbits: u64,
) -> Result<&'a [u64], spacekit_status> {
    if nbits < ix.index.len() {
        return Err(SPACEKIT_ERROR_LENGTH_MISMATCH);
    }
    let n = usize::try_from(nbits.div_ceil(64)).map_err(|_| SPACEKIT_ERROR_TOO_LARGE)?;
    // SAFETY: forwarded from the caller.
    unsafe { slice(words, n) }
}

/// The lowest `s >= goal` with bits `[s, s + nr)` clear and
/// `(s + offset) % align == 0`, else the lowest such `s < goal` (the search
/// wraps once, like ext4's allocator); `SPACEKIT_NOT_FOUND` if none.
/// `align` is a power of two (1: none).
///
/// Errors: `SPACEKIT_ERROR_ZERO_LENGTH`, `SPACEKIT_ERROR_BAD_ALIGNMENT`,
/// `SPACEKIT_ERROR_OUT_OF_RANGE` for a goal past the end,
/// `SPACEKIT_ERROR_LENGTH_MISMATCH`.
///
/// # Safety
/// As [`spacekit_freespace_update`], and `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_first_fit(
    index: *const spacekit_freespace,
    words: *const u64,
    nbits: u64,
    nr: u64,
    align: u64,
    offset: u64,
    goal: u64,
    out: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `index`, `words` and `out`.
        let ix = unsafe { handle(index) }?;
        // SAFETY: as above.
        let w = unsafe { freespace_words(ix, words, nbits) }?;
        let r = ix
            .index
            .first_fit(w, nr, align, offset, goal)
            .map_err(freespace_err)?;
        // SAFETY: as above.
        unsafe { found(out, r) }
    })
}

/// A best fit by size class: among the free runs that hold `nr` bits
/// aligned as in [`spacekit_freespace_first_fit`], the lowest of the
/// smallest power-of-two size class; `SPACEKIT_NOT_FOUND` if none.
///
/// Errors: as [`spacekit_freespace_first_fit`] (no goal).
///
/// # Safety
/// As [`spacekit_freespace_first_fit`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_best_fit(
    index: *const spacekit_freespace,
    words: *const u64,
    nbits: u64,
    nr: u64,
    align: u64,
    offset: u64,
    out: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `index`, `words` and `out`.
        let ix = unsafe { handle(index) }?;
        // SAFETY: as above.
        let w = unsafe { freespace_words(ix, words, nbits) }?;
        let r = ix
            .index
            .best_fit(w, nr, align, offset)
            .map_err(freespace_err)?;
        // SAFETY: as above.
        unsafe { found(out, r) }
    })
}

/// The longest free run (the lowest of equals) as `*start`, `*len`;
/// `SPACEKIT_NOT_FOUND` if no bit is clear.
///
/// # Safety
/// As [`spacekit_freespace_update`]; `start` and `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_freespace_largest_free(
    index: *const spacekit_freespace,
    words: *const u64,
    nbits: u64,
    start: *mut u64,
    len: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(start)?;
        need(len)?;
        // SAFETY: the caller's contract on `index`, `words`, `start`, `len`.
        let ix = unsafe { handle(index) }?;
        // SAFETY: as above.
        let w = unsafe { freespace_words(ix, words, nbits) }?;
        let (s, n) = ix
            .index
            .largest_free(w)
            .map_err(freespace_err)?
            .ok_or(SPACEKIT_NOT_FOUND)?;
        // SAFETY: as above.
        unsafe {
            put(start, s)?;
            put(len, n)
        }
    })
}
