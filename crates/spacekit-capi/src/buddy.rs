//! The buddy page allocator, with batched contiguous frees.

use spacekit_core::buddy::{BuddyAllocator, BuddyConfig, BuddyError, FreeSummary};

use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{drop_box, guard, handle, handle_mut, need, put, put_box, put_opt};

fn buddy_err(e: BuddyError) -> spacekit_status {
    match e {
        BuddyError::BadConfig { .. } => SPACEKIT_ERROR_BAD_CONFIG,
        BuddyError::OutOfRange { .. } => SPACEKIT_ERROR_OUT_OF_RANGE,
        BuddyError::BadOrder { .. } => SPACEKIT_ERROR_BAD_ORDER,
        BuddyError::Misaligned { .. } => SPACEKIT_ERROR_MISALIGNED,
        BuddyError::BadAlignment { .. } => SPACEKIT_ERROR_BAD_ALIGNMENT,
        BuddyError::ZeroPages => SPACEKIT_ERROR_ZERO_LENGTH,
        BuddyError::AlreadyFree { .. } => SPACEKIT_ERROR_ALREADY_FREE,
        BuddyError::NotReferenced { .. } => SPACEKIT_ERROR_NOT_REFERENCED,
        BuddyError::Referenced { .. } => SPACEKIT_ERROR_REFERENCED,
        BuddyError::RefcountOverflow { .. } => SPACEKIT_ERROR_REFCOUNT_OVERFLOW,
        BuddyError::Busy { .. } => SPACEKIT_ERROR_BUSY,
        BuddyError::NoMemory { .. } | BuddyError::NoSpace { .. } => SPACEKIT_ERROR_NO_SPACE,
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// The largest `max_order` a configuration may ask for.
pub const SPACEKIT_BUDDY_MAX_ORDER_LIMIT: u32 = 30;

/// The shape of a buddy allocator.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct spacekit_buddy_config {
    /// Largest block order (the kernel's `MAX_PAGE_ORDER`; default 10), at
    /// most `SPACEKIT_BUDDY_MAX_ORDER_LIMIT`.
    pub max_order: u32,
    /// Pages per memory section (a power of two, default 32768); a
    /// contiguous free never batches across a section edge.
    pub section_pages: u64,
}

/// What a contiguous free (or `add_range`) did with the range's pages.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_buddy_free_summary {
    /// Pages returned to the free lists.
    pub freed: u64,
    /// Pages that kept a reference (refcounted free only).
    pub still_referenced: u64,
    /// Poisoned pages held back (never freed).
    pub poisoned: u64,
}

impl From<FreeSummary> for spacekit_buddy_free_summary {
    fn from(s: FreeSummary) -> Self {
        spacekit_buddy_free_summary {
            freed: s.freed,
            still_referenced: s.still_referenced,
            poisoned: s.poisoned,
        }
    }
}

/// An allocator's statistics (`/proc/buddyinfo` and more).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct spacekit_buddy_statistics {
    /// First pfn of the span.
    pub base: u64,
    /// Pages in the span.
    pub pages: u64,
    /// Pages on the free lists.
    pub free_pages: u64,
    /// Largest block order.
    pub max_order: u32,
    /// The largest order with a free block, or -1 if nothing is free.
    pub largest_free_order: i32,
    /// Free blocks of each order `0..=max_order` (entries past `max_order`
    /// are 0).
    pub free_blocks: [u64; 31],
}

/// One page's state.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct spacekit_buddy_page {
    /// In a free block.
    pub free: bool,
    /// Marked bad: never handed out or freed.
    pub poisoned: bool,
    /// The order of the free block this page heads, or -1.
    pub head_of: i32,
    /// Reference count (0 for free pages).
    pub refcount: u32,
}

/// A buddy allocator over page frame numbers `[base, base + pages)`: one
/// 32-bit word of metadata per page, free blocks as bits in per-order
/// bitmaps (nothing allocates after creation).
///
/// Ownership: made by [`spacekit_buddy_new`], released by
/// [`spacekit_buddy_free`]. Not thread-safe: callers serialise calls (a
/// mutex around the handle, as the kernel's zone lock).
pub struct spacekit_buddy {
    zone: BuddyAllocator,
}

/// The default configuration (max order 10, 32768-page sections) in
/// `*out`.
///
/// # Safety
/// `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_config_default(
    out: *mut spacekit_buddy_config,
) -> spacekit_status {
    let d = BuddyConfig::default();
    let c = spacekit_buddy_config {
        max_order: d.max_order,
        section_pages: d.section_pages,
    };
    // SAFETY: the caller's contract on `out`.
    guard(|| unsafe { put(out, c) })
}

/// An allocator over `[base, base + pages)` shaped by `*config` (NULL: the
/// default). Every page starts reserved (not free): hand memory over with
/// [`spacekit_buddy_add_range`]. Stores a new handle in `*out`.
///
/// Errors: `SPACEKIT_ERROR_BAD_CONFIG` for 2^32 - 1 pages or more,
/// `base + pages` past 2^64, `max_order` above 30, a section size that is
/// not a power of two or smaller than a max-order block;
/// `SPACEKIT_ERROR_NO_MEMORY`.
///
/// # Safety
/// `config` NULL or valid for a read; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_new(
    base: u64,
    pages: u64,
    config: *const spacekit_buddy_config,
    out: *mut *mut spacekit_buddy,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `config`.
        let cfg = match unsafe { config.as_ref() } {
            Some(c) => BuddyConfig {
                max_order: c.max_order,
                section_pages: c.section_pages,
            },
            None => BuddyConfig::default(),
        };
        if pages < u64::from(u32::MAX) {
            // Metadata (4 bytes a page) plus about two bits a page of free
            // bitmaps: refuse what cannot be allocated rather than abort.
            // Checked: on a 32-bit target `pages * 5` passes `usize`.
            let bytes = usize::try_from(pages)
                .ok()
                .and_then(|p| p.checked_mul(5))
                .ok_or(SPACEKIT_ERROR_NO_MEMORY)?;
            crate::ffi::probe_alloc(bytes)?;
        }
        let zone = BuddyAllocator::with_config(base, pages, cfg).map_err(buddy_err)?;
        // SAFETY: the caller's contract on `out`.
        unsafe { put_box(out, spacekit_buddy { zone }) }
    })
}

/// Releases an allocator; NULL is a no-op.
///
/// # Safety
/// `zone` NULL or a handle from [`spacekit_buddy_new`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_free(zone: *mut spacekit_buddy) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(zone) })
}

/// Hands `[pfn, pfn + n)` to the allocator as free memory, merging with
/// free neighbours (boot's `memblock_free_all`); poisoned pages are held
/// back. `*summary` may be NULL.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`, `SPACEKIT_ERROR_ALREADY_FREE`.
///
/// # Safety
/// `zone` a live handle; `summary` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_add_range(
    zone: *mut spacekit_buddy,
    pfn: u64,
    n: u64,
    summary: *mut spacekit_buddy_free_summary,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let s = z.zone.add_range(pfn, n).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(summary, s.into()) };
        Ok(())
    })
}

/// Allocates a block of `2^order` pages aligned to its size (the kernel's
/// `alloc_pages`); `*pfn` gets its first page, which holds one reference.
///
/// Errors: `SPACEKIT_ERROR_BAD_ORDER`, `SPACEKIT_ERROR_NO_SPACE`.
///
/// # Safety
/// `zone` a live handle; `pfn` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_alloc_pages(
    zone: *mut spacekit_buddy,
    order: u32,
    pfn: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(pfn)?;
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let p = z.zone.alloc_pages(order).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put(pfn, p) }
    })
}

/// Drops the reference on block `[pfn, pfn + 2^order)` and, if none is
/// left, frees it with buddy merging (`__free_pages`). `*freed` (may be
/// NULL) tells whether it went back to the free lists.
///
/// Errors: `SPACEKIT_ERROR_BAD_ORDER`, `SPACEKIT_ERROR_MISALIGNED`,
/// `SPACEKIT_ERROR_OUT_OF_RANGE`, `SPACEKIT_ERROR_ALREADY_FREE` (double
/// free), `SPACEKIT_ERROR_NOT_REFERENCED`. Nothing changes on an error.
///
/// # Safety
/// `zone` a live handle; `freed` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_free_pages(
    zone: *mut spacekit_buddy,
    pfn: u64,
    order: u32,
    freed: *mut bool,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let f = z.zone.free_pages(pfn, order).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(freed, f) };
        Ok(())
    })
}

/// Takes exactly the pages `[start, end)` (each then holds one reference),
/// splitting the free blocks that cover them (`alloc_contig_range`, without
/// migration).
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE` (also for `start > end`),
/// `SPACEKIT_ERROR_BUSY` if a page is not free. Nothing changes on an
/// error.
///
/// # Safety
/// `zone` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_alloc_contig_range(
    zone: *mut spacekit_buddy,
    start: u64,
    end: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `zone`.
        let z = unsafe { handle_mut(zone) }?;
        z.zone.alloc_contig_range(start, end).map_err(buddy_err)
    })
}

/// Finds the lowest free run of `pages` pages starting on a multiple of
/// `align` (a power of two) and takes it as
/// [`spacekit_buddy_alloc_contig_range`] does (`alloc_contig_pages`, what
/// CMA does); `*pfn` gets its first page.
///
/// Errors: `SPACEKIT_ERROR_ZERO_LENGTH`, `SPACEKIT_ERROR_BAD_ALIGNMENT`,
/// `SPACEKIT_ERROR_NO_SPACE`.
///
/// # Safety
/// `zone` a live handle; `pfn` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_alloc_contig_pages(
    zone: *mut spacekit_buddy,
    pages: u64,
    align: u64,
    pfn: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(pfn)?;
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let p = z.zone.alloc_contig_pages(pages, align).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put(pfn, p) }
    })
}

/// Frees `[pfn, pfn + n)` of refcounted pages (`free_contig_range`): every
/// page drops one reference, and those that reach zero and are not
/// poisoned are freed in batches of the largest aligned chunks.
/// `*summary` (may be NULL) says what happened.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`, `SPACEKIT_ERROR_ALREADY_FREE`,
/// `SPACEKIT_ERROR_NOT_REFERENCED`. Nothing changes on an error.
///
/// # Safety
/// `zone` a live handle; `summary` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_free_contig_range(
    zone: *mut spacekit_buddy,
    pfn: u64,
    n: u64,
    summary: *mut spacekit_buddy_free_summary,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let s = z.zone.free_contig_range(pfn, n).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(summary, s.into()) };
        Ok(())
    })
}

/// Frees `[pfn, pfn + n)` of frozen pages (reference counts already zero;
/// `free_contig_frozen_range`); poisoned pages are held back.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`, `SPACEKIT_ERROR_ALREADY_FREE`,
/// `SPACEKIT_ERROR_REFERENCED`. Nothing changes on an error.
///
/// # Safety
/// `zone` a live handle; `summary` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_free_contig_frozen_range(
    zone: *mut spacekit_buddy,
    pfn: u64,
    n: u64,
    summary: *mut spacekit_buddy_free_summary,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let s = z.zone.free_contig_frozen_range(pfn, n).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(summary, s.into()) };
        Ok(())
    })
}

/// Drops one reference on page `pfn` (`put_page`) without freeing it, so a
/// range can be handed to [`spacekit_buddy_free_contig_frozen_range`];
/// `*left` (may be NULL) gets the references left.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`, `SPACEKIT_ERROR_ALREADY_FREE`,
/// `SPACEKIT_ERROR_NOT_REFERENCED`.
///
/// # Safety
/// `zone` a live handle; `left` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_put_ref(
    zone: *mut spacekit_buddy,
    pfn: u64,
    left: *mut u32,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let n = z.zone.put_ref(pfn).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(left, n) };
        Ok(())
    })
}

/// Marks page `pfn` bad (hardware poison): a free page is taken off the
/// free lists; an allocated one keeps its references but is never freed.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`.
///
/// # Safety
/// `zone` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_poison(
    zone: *mut spacekit_buddy,
    pfn: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `zone`.
        let z = unsafe { handle_mut(zone) }?;
        z.zone.mark_poisoned(pfn).map_err(buddy_err)
    })
}

/// Clears page `pfn`'s poison mark (`unpoison_memory`); `*was` (may be
/// NULL) tells whether it was poisoned. A page held back has no reference
/// left: give it back with `spacekit_buddy_free_contig_frozen_range(zone,
/// pfn, 1, NULL)`.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`.
///
/// # Safety
/// `zone` a live handle; `was` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_unpoison(
    zone: *mut spacekit_buddy,
    pfn: u64,
    was: *mut bool,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle_mut(zone) }?;
        let w = z.zone.clear_poisoned(pfn).map_err(buddy_err)?;
        // SAFETY: as above.
        unsafe { put_opt(was, w) };
        Ok(())
    })
}

/// Page `pfn`'s state in `*out`.
///
/// Errors: `SPACEKIT_ERROR_OUT_OF_RANGE`.
///
/// # Safety
/// `zone` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_page_state(
    zone: *const spacekit_buddy,
    pfn: u64,
    out: *mut spacekit_buddy_page,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle(zone) }?;
        let p = z.zone.page(pfn).map_err(buddy_err)?;
        let s = spacekit_buddy_page {
            free: p.free,
            poisoned: p.poisoned,
            head_of: p.head_of.map_or(-1, |o| o as i32),
            refcount: p.refcount,
        };
        // SAFETY: as above.
        unsafe { put(out, s) }
    })
}

/// The allocator's statistics in `*out`.
///
/// # Safety
/// `zone` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_buddy_stats(
    zone: *const spacekit_buddy,
    out: *mut spacekit_buddy_statistics,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on both pointers.
        let z = unsafe { handle(zone) }?;
        let mut free_blocks = [0u64; 31];
        for (d, s) in free_blocks.iter_mut().zip(z.zone.free_blocks_per_order()) {
            *d = *s;
        }
        let s = spacekit_buddy_statistics {
            base: z.zone.base(),
            pages: z.zone.pages(),
            free_pages: z.zone.free_page_count(),
            max_order: z.zone.max_order(),
            largest_free_order: z.zone.largest_free_order().map_or(-1, |o| o as i32),
            free_blocks,
        };
        // SAFETY: as above.
        unsafe { put(out, s) }
    })
}

const _: () = assert!(spacekit_core::buddy::MAX_ORDER_LIMIT == SPACEKIT_BUDDY_MAX_ORDER_LIMIT);
