//! Dirty-page logs: the atomic dirty bitmap, and dirty bitmaps to memory
//! ranges (Cloud Hypervisor's `{gpa, length}` table).

use spacekit_core::dirty::{DirtyBitmap, DirtyError, Geometry, MemoryRangeTable, Scan};

use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{
    drop_box, guard, handle, handle_mut, need, put, put_box, put_opt, slice, slice_mut,
};

fn dirty_err(e: DirtyError) -> spacekit_status {
    match e {
        DirtyError::InvalidPageSize { .. } => SPACEKIT_ERROR_BAD_PAGE_SIZE,
        DirtyError::OutOfRange { .. } | DirtyError::RangeOverflow { .. } => {
            SPACEKIT_ERROR_OUT_OF_RANGE
        }
        DirtyError::LengthMismatch { .. } | DirtyError::BadWireLength { .. } => {
            SPACEKIT_ERROR_LENGTH_MISMATCH
        }
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// A guest-physical memory range, laid out as Cloud Hypervisor's
/// `MemoryRange` (`{ u64 gpa; u64 length; }`, 16 bytes): the element of
/// its migration table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct spacekit_memory_range {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub length: u64,
}

/// An atomic dirty bitmap over a guest memory region: one bit per page,
/// marked with one masked atomic OR per 64-page word and harvested by
/// swapping words to zero.
///
/// Ownership: made by [`spacekit_dirty_bitmap_new`], released by
/// [`spacekit_dirty_bitmap_free`]. Thread-safety: `mark`, `reset_range`,
/// `is_dirty` and `harvest` may run concurrently from any threads (no page
/// marked before a harvest starts is lost); `free` must not overlap any
/// other call.
pub struct spacekit_dirty_bitmap {
    log: DirtyBitmap,
}

/// A dirty log of `len` bytes of guest memory from address `base`, in pages
/// of `page_size` bytes (a power of two), all clean; stores a new handle in
/// `*out`.
///
/// Errors: `SPACEKIT_ERROR_BAD_PAGE_SIZE`; `SPACEKIT_ERROR_OUT_OF_RANGE`
/// if `base + len` overflows; `SPACEKIT_ERROR_NO_MEMORY`.
///
/// # Safety
/// `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_new(
    base: u64,
    page_size: u64,
    len: u64,
    out: *mut *mut spacekit_dirty_bitmap,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        let g = Geometry::new(base, page_size).map_err(dirty_err)?;
        let pages = len.div_ceil(page_size);
        let bytes = usize::try_from(pages.div_ceil(64).saturating_mul(8))
            .map_err(|_| SPACEKIT_ERROR_NO_MEMORY)?;
        crate::ffi::probe_alloc(bytes)?;
        let log = DirtyBitmap::new(g, len).map_err(dirty_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put_box(out, spacekit_dirty_bitmap { log }) }
    })
}

/// Releases a dirty log; NULL is a no-op.
///
/// # Safety
/// `log` NULL or a handle from [`spacekit_dirty_bitmap_new`] not freed
/// before, with no call on it running.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_free(
    log: *mut spacekit_dirty_bitmap,
) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(log) })
}

/// The number of `uint64_t` words of the log (the size of a harvest
/// buffer) in `*words`, and the pages tracked in `*pages`; either may be
/// NULL.
///
/// # Safety
/// `log` a live handle; `words` and `pages` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_size(
    log: *const spacekit_dirty_bitmap,
    words: *mut usize,
    pages: *mut u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on all pointers.
        let l = unsafe { handle(log) }?;
        // SAFETY: as above.
        unsafe {
            put_opt(words, l.log.words());
            put_opt(pages, l.log.pages());
        }
        Ok(())
    })
}

/// Marks every page that `[addr, addr + len)` touches dirty (Release
/// ordering); `len == 0` marks nothing.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` if the range leaves the region;
/// nothing is marked then.
///
/// # Safety
/// `log` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_mark(
    log: *const spacekit_dirty_bitmap,
    addr: u64,
    len: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `log`.
        let l = unsafe { handle(log) }?;
        l.log.mark(addr, len).map_err(dirty_err)
    })
}

/// Clears every page that `[addr, addr + len)` touches. Errors as
/// [`spacekit_dirty_bitmap_mark`].
///
/// # Safety
/// `log` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_reset_range(
    log: *const spacekit_dirty_bitmap,
    addr: u64,
    len: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `log`.
        let l = unsafe { handle(log) }?;
        l.log.reset_range(addr, len).map_err(dirty_err)
    })
}

/// Whether the page holding `addr` is dirty.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` outside the region.
///
/// # Safety
/// `log` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_is_dirty(
    log: *const spacekit_dirty_bitmap,
    addr: u64,
    out: *mut bool,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `log` and `out`.
        let l = unsafe { handle(log) }?;
        let d = l.log.is_dirty(addr).map_err(dirty_err)?;
        // SAFETY: as above.
        unsafe { put(out, d) }
    })
}

/// Moves the log into `out` (`nwords` words, exactly the log's size),
/// leaving it clean: clean words are skipped with a plain load, dirty ones
/// swapped to zero (Acquire). `*dirty_words` (may be NULL) gets how many
/// words were dirty.
///
/// Errors: `SPACEKIT_ERROR_LENGTH_MISMATCH` unless `nwords` is the log's
/// word count; nothing is harvested then.
///
/// # Safety
/// `log` a live handle; `out` valid for writes of `nwords` words;
/// `dirty_words` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_bitmap_harvest(
    log: *const spacekit_dirty_bitmap,
    out: *mut u64,
    nwords: usize,
    dirty_words: *mut usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on all pointers.
        let l = unsafe { handle(log) }?;
        if nwords != l.log.words() {
            return Err(SPACEKIT_ERROR_LENGTH_MISMATCH);
        }
        // SAFETY: as above.
        let o = unsafe { slice_mut(out, nwords) }?;
        let n = l.log.harvest_into(o).map_err(dirty_err)?;
        // SAFETY: as above.
        unsafe { put_opt(dirty_words, n) };
        Ok(())
    })
}

/// The two logs of a range call, checked: `a`, and `b` if not NULL.
///
/// # Safety
/// `a` (and `b` if not NULL) valid for reads of `nwords` words.
unsafe fn logs<'a>(
    a: *const u64,
    b: *const u64,
    nwords: usize,
) -> Result<(&'a [u64], Option<&'a [u64]>), spacekit_status> {
    // SAFETY: forwarded from the caller.
    let a = unsafe { slice(a, nwords) }?;
    let b = if b.is_null() {
        None
    } else {
        // SAFETY: forwarded from the caller.
        Some(unsafe { slice(b, nwords) }?)
    };
    Ok((a, b))
}

/// The dirty ranges of the bitmap `a` (or of `a | b` when `b` is not NULL,
/// without building the OR: a hypervisor's log and the VMM's own), bit `i`
/// standing for the page at `base + i * page_size`, into the caller's
/// array `out` of `cap` ranges. Ranges are maximal runs of dirty pages in
/// ascending order, and runs at most `merge_gap` clean pages apart are
/// joined (0: only adjacent pages join). Serial, allocation-free.
///
/// `*count` gets the number of ranges. If it is more than `cap`, the first
/// `cap` are written and `SPACEKIT_ERROR_BUFFER_TOO_SMALL` is returned:
/// call again with `cap >= *count`.
///
/// Errors: `SPACEKIT_ERROR_BAD_PAGE_SIZE`; `SPACEKIT_ERROR_OUT_OF_RANGE`
/// if the bitmap's last page (dirty or not) would end at or past 2^64
/// (addresses are 64-bit, so a range cannot end at 2^64);
/// `SPACEKIT_ERROR_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `a` (and `b` unless NULL) valid for reads of `nwords` words (NULL `a`
/// only when `nwords` is 0; `b` may be `a`); `out` valid for writes of
/// `cap` ranges (NULL only when `cap` is 0) and overlapping neither `a` nor
/// `b`; `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_dirty_ranges(
    a: *const u64,
    b: *const u64,
    nwords: usize,
    base: u64,
    page_size: u64,
    merge_gap: u64,
    out: *mut spacekit_memory_range,
    cap: usize,
    count: *mut usize,
) -> spacekit_status {
    guard(|| {
        need(count)?;
        // SAFETY: the caller's contract on all pointers.
        let (a, b) = unsafe { logs(a, b, nwords) }?;
        // SAFETY: as above.
        let out = unsafe { slice_mut(out, cap) }?;
        let g = Geometry::new(base, page_size).map_err(dirty_err)?;
        let gap = merge_gap.saturating_mul(page_size);
        let mut n = 0usize;
        let mut cur: Option<spacekit_memory_range> = None;
        let mut emit = |r: spacekit_memory_range| {
            if let Some(slot) = out.get_mut(n) {
                *slot = r;
            }
            n += 1;
        };
        let mut push = |gpa: u64, length: u64| match &mut cur {
            Some(c) if gpa - (c.gpa + c.length) <= gap => c.length = gpa + length - c.gpa,
            _ => {
                if let Some(c) = cur.replace(spacekit_memory_range { gpa, length }) {
                    emit(c);
                }
            }
        };
        match b {
            None => g
                .ranges(a)
                .map_err(dirty_err)?
                .for_each(|r| push(r.gpa, r.length)),
            Some(b) => g
                .ranges_or(a, b)
                .map_err(dirty_err)?
                .for_each(|r| push(r.gpa, r.length)),
        }
        if let Some(c) = cur {
            emit(c);
        }
        // SAFETY: as above.
        unsafe { put(count, n) }?;
        if n > cap {
            return Err(SPACEKIT_ERROR_BUFFER_TOO_SMALL);
        }
        Ok(())
    })
}

/// A library-owned table of memory ranges, reused across rounds so that a
/// VMM's migration loop allocates only when the table grows.
///
/// Ownership: made by [`spacekit_range_table_new`], released by
/// [`spacekit_range_table_free`]; the array [`spacekit_range_table_ranges`]
/// returns belongs to the table and stays valid until the next `fill` or
/// `free`. Not thread-safe: one thread at a time (the fill itself may use
/// all threads, see `parallel`).
pub struct spacekit_range_table {
    table: MemoryRangeTable,
}

/// An empty range table; stores a new handle in `*out`.
///
/// # Safety
/// `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_range_table_new(
    out: *mut *mut spacekit_range_table,
) -> spacekit_status {
    guard(|| {
        let table = MemoryRangeTable::new();
        // SAFETY: the caller's contract on `out`.
        unsafe { put_box(out, spacekit_range_table { table }) }
    })
}

/// Releases a range table (and its array); NULL is a no-op.
///
/// # Safety
/// `table` NULL or a handle from [`spacekit_range_table_new`] not freed
/// before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_range_table_free(
    table: *mut spacekit_range_table,
) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(table) })
}

/// Replaces the table's ranges with those of `a` (or `a | b` when `b` is
/// not NULL), as [`spacekit_dirty_ranges`] computes them, reusing the
/// table's allocation. With `parallel`, large bitmaps are scanned on all
/// threads (rayon's global pool, whose threads then stay alive for the
/// life of the process) with the same result.
///
/// Errors: as [`spacekit_dirty_ranges`] (no buffer limit); the table is
/// unchanged on an error.
///
/// # Safety
/// `table` a live handle; `a` (and `b` unless NULL) valid for reads of
/// `nwords` words.
#[no_mangle]
pub unsafe extern "C" fn spacekit_range_table_fill(
    table: *mut spacekit_range_table,
    a: *const u64,
    b: *const u64,
    nwords: usize,
    base: u64,
    page_size: u64,
    merge_gap: u64,
    parallel: bool,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on all pointers.
        let t = unsafe { handle_mut(table) }?;
        // SAFETY: as above.
        let (a, b) = unsafe { logs(a, b, nwords) }?;
        let g = Geometry::new(base, page_size).map_err(dirty_err)?;
        let mut scan = Scan::new(a, g).map_err(dirty_err)?;
        if let Some(b) = b {
            scan = scan.or(b).map_err(dirty_err)?;
        }
        t.table.clear();
        t.table
            .extend_from(scan.merge_gap(merge_gap).parallel(parallel));
        Ok(())
    })
}

/// The table's ranges: `*ranges` points at `*count` ranges owned by the
/// table (NULL when there are none), valid until the next
/// [`spacekit_range_table_fill`] or [`spacekit_range_table_free`].
/// `*total_bytes` (may be NULL) gets the bytes they cover.
///
/// # Safety
/// `table` a live handle; `ranges` and `count` valid for writes;
/// `total_bytes` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_range_table_ranges(
    table: *const spacekit_range_table,
    ranges: *mut *const spacekit_memory_range,
    count: *mut usize,
    total_bytes: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(ranges)?;
        need(count)?;
        // SAFETY: the caller's contract on all pointers.
        let t = unsafe { handle(table) }?;
        let r = t.table.ranges();
        // `MemoryRange` is `#[repr(C)] { u64 gpa; u64 length; }`, the same
        // layout as `spacekit_memory_range`.
        let p = if r.is_empty() {
            std::ptr::null()
        } else {
            r.as_ptr().cast::<spacekit_memory_range>()
        };
        // SAFETY: as above.
        unsafe {
            put(ranges, p)?;
            put(count, r.len())?;
            put_opt(total_bytes, t.table.total_bytes());
        }
        Ok(())
    })
}

const _: () = {
    use spacekit_core::dirty::MemoryRange;
    assert!(std::mem::size_of::<MemoryRange>() == std::mem::size_of::<spacekit_memory_range>());
    assert!(std::mem::align_of::<MemoryRange>() == std::mem::align_of::<spacekit_memory_range>());
    assert!(
        std::mem::offset_of!(MemoryRange, gpa) == std::mem::offset_of!(spacekit_memory_range, gpa)
    );
    assert!(
        std::mem::offset_of!(MemoryRange, length)
            == std::mem::offset_of!(spacekit_memory_range, length)
    );
};
