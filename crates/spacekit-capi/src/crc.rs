//! CRC-32C (raw and standard), its O(log n) updates, and the checksummed
//! bitmap.

use spacekit_core::bitmap::Bits;
use spacekit_core::checked_bitmap::CheckedBitmap;
use spacekit_core::crc32c::{self, CrcError};

use crate::bitmap::{bitmap_err, freespace_err};
use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{
    drop_box, guard, handle, handle_mut, need, put, put_box, put_opt, slice, slice_mut,
};

fn crc_err(e: CrcError) -> spacekit_status {
    match e {
        CrcError::BitRangeOutOfBounds { .. } | CrcError::ByteRangeOutOfBounds { .. } => {
            SPACEKIT_ERROR_OUT_OF_RANGE
        }
        CrcError::LengthMismatch { .. } | CrcError::ChecksumLenTooLong { .. } => {
            SPACEKIT_ERROR_LENGTH_MISMATCH
        }
        CrcError::BufferTooLarge { .. } => SPACEKIT_ERROR_TOO_LARGE,
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// Raw CRC-32C of `len` bytes at `buf`, continuing from `crc`: the
/// kernel's `crc32c(crc, buf, len)`, no inversion in or out (what ext4
/// stores, from its checksum seed).
///
/// # Safety
/// `buf` must be valid for reads of `len` bytes (or NULL when `len` is 0);
/// `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c_raw(
    crc: u32,
    buf: *const u8,
    len: usize,
    out: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `buf` and `out`.
        let b = unsafe { slice(buf, len) }?;
        // SAFETY: as above.
        unsafe { put(out, crc32c::raw(crc, b)) }
    })
}

/// Standard CRC-32C (iSCSI, RFC 3720: initial value and result inverted) of
/// `len` bytes; `"123456789"` gives `0xE3069283`. Equal to
/// `~raw(~0, buf)`.
///
/// # Safety
/// As [`spacekit_crc32c_raw`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c(
    buf: *const u8,
    len: usize,
    out: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `buf` and `out`.
        let b = unsafe { slice(buf, len) }?;
        // SAFETY: as above.
        unsafe { put(out, crc32c::checksum(b)) }
    })
}

/// The raw CRC of a message followed by `nbytes` zero bytes, given the raw
/// CRC `crc` of the message, in O(log nbytes).
///
/// # Safety
/// `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c_shift(
    crc: u32,
    nbytes: u64,
    out: *mut u32,
) -> spacekit_status {
    // SAFETY: the caller's contract on `out`.
    guard(|| unsafe { put(out, crc32c::shift(crc, nbytes)) })
}

/// The CRC of `A || B` from the CRCs of `A` and `B` and the length of `B`
/// (zlib's `crc32_combine`). Standard CRCs combine as they are; for raw
/// CRCs, `crc_b` must be the raw CRC of `B` from 0.
///
/// # Safety
/// `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c_combine(
    crc_a: u32,
    crc_b: u32,
    len_b: u64,
    out: *mut u32,
) -> spacekit_status {
    // SAFETY: the caller's contract on `out`.
    guard(|| unsafe { put(out, crc32c::combine(crc_a, crc_b, len_b)) })
}

/// The new CRC of a `buf_len`-byte buffer after exactly the bits
/// `[first_bit, first_bit + nbits)` flipped (bit `i` = bit `i % 8` of byte
/// `i / 8`), in a few table lookups and carry-less multiplies whatever the
/// sizes. Valid only when every bit of the range changed (allocating free
/// blocks, freeing used ones); for partial changes use
/// [`spacekit_crc32c_splice`]. Works for raw CRCs under any seed and for
/// standard CRC-32C values alike. `nbits == 0` returns `crc`.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if the range passes the buffer;
/// `SPACEKIT_ERROR_TOO_LARGE` if `8 * buf_len` overflows.
///
/// # Safety
/// `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c_flip_range(
    crc: u32,
    buf_len: u64,
    first_bit: u64,
    nbits: u64,
    out: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        let c = crc32c::flip_range(crc, buf_len, first_bit, nbits).map_err(crc_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put(out, c) }
    })
}

/// The new CRC of a `buf_len`-byte buffer after the `len` bytes at `offset`
/// changed from `old_bytes` to `new_bytes`: reads only the region.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if the region passes the buffer.
///
/// # Safety
/// `old_bytes` and `new_bytes` valid for reads of `len` bytes (or NULL when
/// `len` is 0); `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_crc32c_splice(
    crc: u32,
    buf_len: u64,
    offset: u64,
    old_bytes: *const u8,
    new_bytes: *const u8,
    len: usize,
    out: *mut u32,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on the buffers.
        let (o, n) = unsafe { (slice(old_bytes, len)?, slice(new_bytes, len)?) };
        let c = crc32c::splice(crc, buf_len, offset, o, n).map_err(crc_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put(out, c) }
    })
}

/// A bitmap (owned by the library, copied from the caller's bytes) plus
/// the raw CRC-32C, under a seed, of its first `csum_len` bytes, kept
/// current by every change in O(log n) (ext4's block and inode bitmap
/// checksums); optionally with a free-space index over its first bits,
/// also kept in step.
///
/// Ownership: made by [`spacekit_checked_bitmap_new`], released by
/// [`spacekit_checked_bitmap_free`]. Not thread-safe: one thread at a time.
pub struct spacekit_checked_bitmap {
    map: CheckedBitmap,
}

/// Copies `len` bytes (all of them become bits, `8 * len`) and computes
/// the raw CRC-32C of the first `csum_len` from `seed`; stores a new handle
/// in `*out`.
///
/// Errors: `SPACEKIT_ERROR_LENGTH_MISMATCH` if `csum_len > len`;
/// `SPACEKIT_ERROR_NO_MEMORY`.
///
/// # Safety
/// `bytes` valid for reads of `len` bytes (or NULL when `len` is 0); `out`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_new(
    bytes: *const u8,
    len: usize,
    seed: u32,
    csum_len: usize,
    out: *mut *mut spacekit_checked_bitmap,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `bytes`.
        let b = unsafe { slice(bytes, len) }?;
        crate::ffi::probe_alloc(len)?;
        let map = CheckedBitmap::from_bytes(b, seed, csum_len).map_err(crc_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put_box(out, spacekit_checked_bitmap { map }) }
    })
}

/// Releases a checked bitmap; NULL is a no-op.
///
/// # Safety
/// `map` NULL or a handle from [`spacekit_checked_bitmap_new`] not freed
/// before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_free(
    map: *mut spacekit_checked_bitmap,
) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(map) })
}

/// The kept checksum (`*crc`) and the length in bits (`*nbits`, 8 per byte
/// given); either pointer may be NULL if not wanted.
///
/// # Safety
/// `map` a live handle; `crc` and `nbits` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_checksum(
    map: *const spacekit_checked_bitmap,
    crc: *mut u32,
    nbits: *mut usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `map`, `crc` and `nbits`.
        let m = unsafe { handle(map) }?;
        // SAFETY: as above.
        unsafe {
            put_opt(crc, m.map.checksum());
            put_opt(nbits, m.map.len());
        }
        Ok(())
    })
}

/// Whether the kept checksum equals one computed from scratch.
///
/// # Safety
/// `map` a live handle; `ok` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_verify(
    map: *const spacekit_checked_bitmap,
    ok: *mut bool,
) -> spacekit_status {
    guard(|| {
        need(ok)?;
        // SAFETY: the caller's contract on `map` and `ok`.
        let m = unsafe { handle(map) }?;
        // SAFETY: as above.
        unsafe { put(ok, m.map.verify()) }
    })
}

/// Whether bit `index` is set. Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`.
///
/// # Safety
/// `map` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_test(
    map: *const spacekit_checked_bitmap,
    index: usize,
    out: *mut bool,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `map` and `out`.
        let m = unsafe { handle(map) }?;
        let b = m
            .map
            .bitmap()
            .get(index)
            .ok_or(SPACEKIT_ERROR_OUT_OF_RANGE)?;
        // SAFETY: as above.
        unsafe { put(out, b) }
    })
}

/// What a range update of a checked bitmap does.
#[derive(Clone, Copy)]
enum Op {
    Set,
    Clear,
    Flip,
}

/// Applies `op` to `[start, start + len)`, storing the bits changed.
///
/// # Safety
/// `map` a live handle; `changed` NULL or valid for a write.
unsafe fn update(
    map: *mut spacekit_checked_bitmap,
    start: usize,
    len: usize,
    changed: *mut usize,
    op: Op,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `map`.
        let m = unsafe { handle_mut(map) }?;
        let end = start.checked_add(len).ok_or(SPACEKIT_ERROR_OUT_OF_RANGE)?;
        let n = match op {
            Op::Set => m.map.set_range(start..end),
            Op::Clear => m.map.clear_range(start..end),
            Op::Flip => m.map.flip_range(start..end),
        }
        .map_err(bitmap_err)?;
        // SAFETY: the caller's contract on `changed`.
        unsafe { put_opt(changed, n) };
        Ok(())
    })
}

/// Sets bits `[start, start + len)`, updating the checksum (by
/// `flip_range` when every bit was clear, else a splice over the range's
/// words) and the index, if any. `*changed` (may be NULL) gets the number
/// of bits that changed.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`; nothing changes then.
///
/// # Safety
/// `map` a live handle; `changed` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_set_range(
    map: *mut spacekit_checked_bitmap,
    start: usize,
    len: usize,
    changed: *mut usize,
) -> spacekit_status {
    // SAFETY: forwarded from the caller.
    unsafe { update(map, start, len, changed, Op::Set) }
}

/// Clears bits `[start, start + len)`; as
/// [`spacekit_checked_bitmap_set_range`].
///
/// # Safety
/// As [`spacekit_checked_bitmap_set_range`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_clear_range(
    map: *mut spacekit_checked_bitmap,
    start: usize,
    len: usize,
    changed: *mut usize,
) -> spacekit_status {
    // SAFETY: forwarded from the caller.
    unsafe { update(map, start, len, changed, Op::Clear) }
}

/// Flips bits `[start, start + len)`; as
/// [`spacekit_checked_bitmap_set_range`].
///
/// # Safety
/// As [`spacekit_checked_bitmap_set_range`].
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_flip_range(
    map: *mut spacekit_checked_bitmap,
    start: usize,
    len: usize,
    changed: *mut usize,
) -> spacekit_status {
    // SAFETY: forwarded from the caller.
    unsafe { update(map, start, len, changed, Op::Flip) }
}

/// Copies the bits out as `len` bytes (the on-disk layout), which must be
/// the byte length the bitmap was made from.
///
/// Errors: `SPACEKIT_ERROR_LENGTH_MISMATCH`.
///
/// # Safety
/// `map` a live handle; `out` valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_store_bytes(
    map: *const spacekit_checked_bitmap,
    out: *mut u8,
    len: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `map` and `out`.
        let m = unsafe { handle(map) }?;
        if len != m.map.len() / 8 {
            return Err(SPACEKIT_ERROR_LENGTH_MISMATCH);
        }
        // SAFETY: as above.
        let o = unsafe { slice_mut(out, len) }?;
        m.map.store_bytes(o).map_err(bitmap_err)
    })
}

/// Builds a free-space index over the first `nbits` bits (an ext4 group's
/// blocks, without the padding past them); from then on every change keeps
/// it in step and the fit searches take O(log n).
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if `nbits` is more than the
/// bitmap's bits; `SPACEKIT_ERROR_TOO_LARGE` past 2^32 - 1.
///
/// # Safety
/// `map` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_build_index(
    map: *mut spacekit_checked_bitmap,
    nbits: usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `map`.
        let m = unsafe { handle_mut(map) }?;
        m.map.build_index(nbits).map_err(freespace_err)
    })
}

/// First fit from `goal`, wrapping once, of `nr` clear bits with
/// `(s + offset) % align == 0`, over the indexed bits (the whole bitmap
/// without an index); `SPACEKIT_NOT_FOUND` if none.
///
/// Errors: `SPACEKIT_ERROR_ZERO_LENGTH`, `SPACEKIT_ERROR_BAD_ALIGNMENT`,
/// `SPACEKIT_ERROR_OUT_OF_RANGE` for a goal past the bits searched.
///
/// # Safety
/// `map` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_first_fit(
    map: *const spacekit_checked_bitmap,
    nr: usize,
    align: usize,
    offset: usize,
    goal: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `map` and `out`.
        let m = unsafe { handle(map) }?;
        let r = m
            .map
            .first_fit(nr, align, offset, goal)
            .map_err(freespace_err)?;
        // SAFETY: as above.
        unsafe { put(out, r.ok_or(SPACEKIT_NOT_FOUND)?) }
    })
}

/// Best fit by size class (see [`spacekit_freespace_best_fit`]);
/// `SPACEKIT_NOT_FOUND` if none.
///
/// Errors: `SPACEKIT_ERROR_ZERO_LENGTH`, `SPACEKIT_ERROR_BAD_ALIGNMENT`.
///
/// [`spacekit_freespace_best_fit`]: crate::bitmap::spacekit_freespace_best_fit
///
/// # Safety
/// `map` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_best_fit(
    map: *const spacekit_checked_bitmap,
    nr: usize,
    align: usize,
    offset: usize,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `map` and `out`.
        let m = unsafe { handle(map) }?;
        let r = m.map.best_fit(nr, align, offset).map_err(freespace_err)?;
        // SAFETY: as above.
        unsafe { put(out, r.ok_or(SPACEKIT_NOT_FOUND)?) }
    })
}

/// The longest free run as `*start`, `*len`; `SPACEKIT_NOT_FOUND` if no
/// bit is clear.
///
/// # Safety
/// `map` a live handle; `start` and `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_checked_bitmap_largest_free(
    map: *const spacekit_checked_bitmap,
    start: *mut usize,
    len: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(start)?;
        need(len)?;
        // SAFETY: the caller's contract on all three pointers.
        let m = unsafe { handle(map) }?;
        let (s, n) = m.map.largest_free().ok_or(SPACEKIT_NOT_FOUND)?;
        // SAFETY: as above.
        unsafe {
            put(start, s)?;
            put(len, n)
        }
    })
}
