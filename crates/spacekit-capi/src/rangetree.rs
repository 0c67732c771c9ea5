//! The range tree (Linux's maple tree in userspace) with `uint64_t` values.

use std::ffi::c_void;

use spacekit_core::rangetree::{RangeTree, RangeTreeError};

use crate::ffi::spacekit_status::{self, *};
use crate::ffi::{drop_box, guard, handle, handle_mut, need, put, put_box, put_opt};

fn tree_err(e: RangeTreeError) -> spacekit_status {
    match e {
        RangeTreeError::InvalidRange { .. } | RangeTreeError::WindowTooSmall { .. } => {
            SPACEKIT_ERROR_INVALID_ARGUMENT
        }
        RangeTreeError::ZeroSize => SPACEKIT_ERROR_ZERO_LENGTH,
        RangeTreeError::BadAlignment { .. } => SPACEKIT_ERROR_BAD_ALIGNMENT,
        RangeTreeError::Occupied { .. } => SPACEKIT_ERROR_OCCUPIED,
        RangeTreeError::NoSpace { .. } => SPACEKIT_ERROR_NO_SPACE,
        _ => SPACEKIT_ERROR_INVALID_ARGUMENT,
    }
}

/// Non-overlapping inclusive ranges `[first, last]` of `uint64_t` (0 and
/// `UINT64_MAX` included) mapped to `uint64_t` values (an index, or a
/// pointer cast to `uintptr_t`), with O(log n) lookup and free-gap search.
///
/// Ownership: made by [`spacekit_rangetree_new`] or
/// [`spacekit_rangetree_dup`], released by [`spacekit_rangetree_free`].
/// The tree stores values as plain numbers: it never frees what they point
/// to. Not thread-safe: one thread at a time.
pub struct spacekit_rangetree {
    tree: RangeTree<u64>,
}

/// A position in a walk over a tree's entries (`mt_for_each`): the next
/// index to look from and the last index of the window. Caller-owned, set
/// up by [`spacekit_rangetree_cursor_init`]; it holds no pointer into the
/// tree, so the tree may change between steps (each step finds the first
/// entry at or after the cursor, in O(log n)).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct spacekit_rangetree_cursor {
    /// The next index to look from.
    pub next: u64,
    /// The last index of the window.
    pub last: u64,
    /// Set once the walk has passed `last` (or `UINT64_MAX`).
    pub done: bool,
}

/// A callback of [`spacekit_rangetree_for_each`]: gets `ctx` and one entry;
/// returns 0 to go on, anything else to stop. It must not change or free
/// the tree (reading it is fine), nor leave the call other than by
/// returning (no `longjmp`, no C++ exception).
pub type spacekit_rangetree_visit =
    Option<unsafe extern "C" fn(ctx: *mut c_void, first: u64, last: u64, value: u64) -> i32>;

/// An empty tree; stores a new handle in `*out`.
///
/// # Safety
/// `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_new(
    out: *mut *mut spacekit_rangetree,
) -> spacekit_status {
    // SAFETY: the caller's contract on `out`.
    guard(|| unsafe {
        put_box(
            out,
            spacekit_rangetree {
                tree: RangeTree::new(),
            },
        )
    })
}

/// Releases a tree; NULL is a no-op.
///
/// # Safety
/// `tree` NULL or a handle from this module not freed before.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_free(tree: *mut spacekit_rangetree) -> spacekit_status {
    // SAFETY: the caller's contract.
    guard(|| unsafe { drop_box(tree) })
}

/// The number of entries in `*out`.
///
/// # Safety
/// `tree` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_len(
    tree: *const spacekit_rangetree,
    out: *mut usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `tree` and `out`.
        let t = unsafe { handle(tree) }?;
        // SAFETY: as above.
        unsafe { put(out, t.tree.len()) }
    })
}

/// Inserts `[first, last] -> value` if no index in it is in use
/// (`mtree_insert_range`).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` if `first > last`;
/// `SPACEKIT_ERROR_OCCUPIED` (EEXIST) if an entry overlaps. The tree is
/// unchanged on an error.
///
/// # Safety
/// `tree` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_insert(
    tree: *mut spacekit_rangetree,
    first: u64,
    last: u64,
    value: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `tree`.
        let t = unsafe { handle_mut(tree) }?;
        t.tree.insert_range(first, last, value).map_err(tree_err)
    })
}

/// Stores `[first, last] -> value`, overwriting whatever was there
/// (`mtree_store_range`): entries partly covered are truncated, an entry
/// covering the range on both sides is split (both parts keep its value).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` if `first > last`.
///
/// # Safety
/// `tree` a live handle.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_store(
    tree: *mut spacekit_rangetree,
    first: u64,
    last: u64,
    value: u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `tree`.
        let t = unsafe { handle_mut(tree) }?;
        t.tree.store_range(first, last, value).map_err(tree_err)
    })
}

/// Removes the entry containing `index` (`mtree_erase`); its value goes to
/// `*value` (may be NULL). `SPACEKIT_NOT_FOUND`, and no change, if `index`
/// is free.
///
/// # Safety
/// `tree` a live handle; `value` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_erase(
    tree: *mut spacekit_rangetree,
    index: u64,
    value: *mut u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `tree` and `value`.
        let t = unsafe { handle_mut(tree) }?;
        let v = t.tree.erase(index).ok_or(SPACEKIT_NOT_FOUND)?;
        // SAFETY: as above.
        unsafe { put_opt(value, v) };
        Ok(())
    })
}

/// The entry containing `index` (`mtree_load`): its value in `*value` and
/// its bounds in `*first`, `*last` (each may be NULL);
/// `SPACEKIT_NOT_FOUND` if `index` is free.
///
/// # Safety
/// `tree` a live handle; the out-pointers NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_get(
    tree: *const spacekit_rangetree,
    index: u64,
    first: *mut u64,
    last: *mut u64,
    value: *mut u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on all pointers.
        let t = unsafe { handle(tree) }?;
        let (f, l, v) = t.tree.get_range(index).ok_or(SPACEKIT_NOT_FOUND)?;
        // SAFETY: as above.
        unsafe {
            put_opt(first, f);
            put_opt(last, l);
            put_opt(value, *v);
        }
        Ok(())
    })
}

/// The lowest (`reverse` false, `mas_empty_area`) or highest (`reverse`
/// true, `mas_empty_area_rev`: a top-down `mmap`) start `s`, a multiple of
/// `align` (a power of two; 1: none), such that `[s, s + size - 1]` lies in
/// the window `[lo, hi]` and touches no entry; `SPACEKIT_NOT_FOUND` (the
/// kernel's EBUSY) if none, in O(log n).
///
/// Errors: `SPACEKIT_ERROR_INVALID_ARGUMENT` if `lo > hi` or the window
/// holds fewer than `size` indices; `SPACEKIT_ERROR_ZERO_LENGTH`;
/// `SPACEKIT_ERROR_BAD_ALIGNMENT`.
///
/// # Safety
/// `tree` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_find_gap(
    tree: *const spacekit_rangetree,
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
    reverse: bool,
    out: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `tree` and `out`.
        let t = unsafe { handle(tree) }?;
        let r = if reverse {
            t.tree.find_gap_rev_aligned(size, align, lo..=hi)
        } else {
            t.tree.find_gap_aligned(size, align, lo..=hi)
        }
        .map_err(tree_err)?;
        // SAFETY: as above.
        unsafe { put(out, r.ok_or(SPACEKIT_NOT_FOUND)?) }
    })
}

/// Finds a gap as [`spacekit_rangetree_find_gap`] and stores
/// `[s, s + size - 1] -> value` there (`mtree_alloc_range` /
/// `mtree_alloc_rrange`, with an alignment); `*out` gets `s`.
///
/// Errors: as [`spacekit_rangetree_find_gap`], and
/// `SPACEKIT_ERROR_NO_SPACE` if no gap fits.
///
/// # Safety
/// `tree` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_alloc(
    tree: *mut spacekit_rangetree,
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
    reverse: bool,
    value: u64,
    out: *mut u64,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `tree` and `out`.
        let t = unsafe { handle_mut(tree) }?;
        let r = if reverse {
            t.tree.find_gap_rev_aligned(size, align, lo..=hi)
        } else {
            t.tree.find_gap_aligned(size, align, lo..=hi)
        }
        .map_err(tree_err)?;
        let s = r.ok_or(SPACEKIT_ERROR_NO_SPACE)?;
        t.tree
            .insert_range(s, s + (size - 1), value)
            .map_err(tree_err)?;
        // SAFETY: as above.
        unsafe { put(out, s) }
    })
}

/// A copy of the tree (`__mt_dup`: the node arrays are copied as they are,
/// no per-entry insert); stores a new handle in `*out`, to be freed with
/// [`spacekit_rangetree_free`].
///
/// # Safety
/// `tree` a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_dup(
    tree: *const spacekit_rangetree,
    out: *mut *mut spacekit_rangetree,
) -> spacekit_status {
    guard(|| {
        need(out)?;
        // SAFETY: the caller's contract on `tree` and `out`.
        let t = unsafe { handle(tree) }?;
        let copy = t.tree.dup();
        // SAFETY: as above.
        unsafe { put_box(out, spacekit_rangetree { tree: copy }) }
    })
}

/// Calls `visit(ctx, first, last, value)` for every entry that intersects
/// `[lo, hi]`, in ascending order, until it returns nonzero. `*visited`
/// (may be NULL) gets the number of calls made.
///
/// Errors: `SPACEKIT_ERROR_NULL_POINTER` for a NULL `visit`.
///
/// # Safety
/// `tree` a live handle; `visit` a function that neither changes nor
/// frees the tree and leaves each call only by returning (no `longjmp`, no
/// C++ exception); `visited` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_for_each(
    tree: *const spacekit_rangetree,
    lo: u64,
    hi: u64,
    visit: spacekit_rangetree_visit,
    ctx: *mut c_void,
    visited: *mut usize,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on `tree`.
        let t = unsafe { handle(tree) }?;
        let f = visit.ok_or(SPACEKIT_ERROR_NULL_POINTER)?;
        let mut n = 0usize;
        for (a, b, v) in t.tree.range(lo..=hi) {
            n += 1;
            // SAFETY: `f` is a C function with this signature that leaves
            // the tree alone (the caller's contract).
            if unsafe { f(ctx, a, b, *v) } != 0 {
                break;
            }
        }
        // SAFETY: the caller's contract on `visited`.
        unsafe { put_opt(visited, n) };
        Ok(())
    })
}

/// Sets `*cursor` up for a walk over the entries that intersect
/// `[lo, hi]`. A window with `lo > hi` gives an empty walk.
///
/// # Safety
/// `cursor` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_cursor_init(
    cursor: *mut spacekit_rangetree_cursor,
    lo: u64,
    hi: u64,
) -> spacekit_status {
    guard(|| {
        let c = spacekit_rangetree_cursor {
            next: lo,
            last: hi,
            done: lo > hi,
        };
        // SAFETY: the caller's contract on `cursor`.
        unsafe { put(cursor, c) }
    })
}

/// The next entry of a walk (the first entry at or after the cursor that
/// intersects its window): bounds in `*first`, `*last` and value in
/// `*value` (each may be NULL), and the cursor moves past it.
/// `SPACEKIT_NOT_FOUND` once no entry is left (the cursor is then marked
/// done; the other out-pointers are untouched).
///
/// # Safety
/// `tree` a live handle; `cursor` valid for reads and writes and set up by
/// [`spacekit_rangetree_cursor_init`] (its `done` is a `bool`: 0 or 1,
/// never garbage from uninitialised memory); the other out-pointers NULL
/// or valid for writes, none of them inside `*cursor`.
#[no_mangle]
pub unsafe extern "C" fn spacekit_rangetree_cursor_next(
    tree: *const spacekit_rangetree,
    cursor: *mut spacekit_rangetree_cursor,
    first: *mut u64,
    last: *mut u64,
    value: *mut u64,
) -> spacekit_status {
    guard(|| {
        // SAFETY: the caller's contract on all pointers.
        let t = unsafe { handle(tree) }?;
        // SAFETY: as above.
        let c = unsafe { crate::ffi::handle_mut(cursor) }?;
        if c.done || c.next > c.last {
            c.done = true;
            return Err(SPACEKIT_NOT_FOUND);
        }
        let Some((a, b, v)) = t.tree.range(c.next..=c.last).next() else {
            c.done = true;
            return Err(SPACEKIT_NOT_FOUND);
        };
        match b.checked_add(1) {
            Some(n) => c.next = n,
            None => c.done = true,
        }
        // SAFETY: as above.
        unsafe {
            put_opt(first, a);
            put_opt(last, b);
            put_opt(value, *v);
        }
        Ok(())
    })
}
