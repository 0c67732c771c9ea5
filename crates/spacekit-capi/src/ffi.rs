//! The boundary's shared parts: [`spacekit_status`] and
//! [`spacekit_strerror`], the panic guard, and the checks every pointer and
//! length goes through before the library sees it.

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every `spacekit_` call: 0 for success, a positive code
/// otherwise. `spacekit_strerror` gives each a static description.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum spacekit_status {
    /// Success.
    SPACEKIT_OK = 0,
    /// A search found nothing (no such bit, gap, entry or fit). Not an
    /// error: the out-pointers are left untouched.
    SPACEKIT_NOT_FOUND = 1,
    /// A required pointer argument was NULL.
    SPACEKIT_ERROR_NULL_POINTER = 2,
    /// An argument out of its documented domain (a value with no more
    /// specific code).
    SPACEKIT_ERROR_INVALID_ARGUMENT = 3,
    /// An index or range outside the bitmap, buffer, allocator or image.
    SPACEKIT_ERROR_OUT_OF_RANGE = 4,
    /// Two lengths that must agree do not (two bitmaps, a buffer and a
    /// handle, old and new contents of a splice).
    SPACEKIT_ERROR_LENGTH_MISMATCH = 5,
    /// An alignment that is not a power of two, or a mask that is not
    /// `2^k - 1`.
    SPACEKIT_ERROR_BAD_ALIGNMENT = 6,
    /// A request for zero bits, pages or bytes where at least one is needed.
    SPACEKIT_ERROR_ZERO_LENGTH = 7,
    /// A size beyond what the structure can represent.
    SPACEKIT_ERROR_TOO_LARGE = 8,
    /// A caller-owned output array is too small; the count needed was
    /// stored and nothing else is meaningful.
    SPACEKIT_ERROR_BUFFER_TOO_SMALL = 9,
    /// Memory could not be allocated.
    SPACEKIT_ERROR_NO_MEMORY = 10,
    /// No free space for the request (range tree, buddy allocator, ext4).
    SPACEKIT_ERROR_NO_SPACE = 11,
    /// A range tree insert overlaps an existing entry (EEXIST).
    SPACEKIT_ERROR_OCCUPIED = 12,
    /// A page size that is not a power of two.
    SPACEKIT_ERROR_BAD_PAGE_SIZE = 13,
    /// Buddy allocator: an order above the allocator's largest order.
    SPACEKIT_ERROR_BAD_ORDER = 14,
    /// Buddy allocator: a block's first page not aligned to its order.
    SPACEKIT_ERROR_MISALIGNED = 15,
    /// Buddy allocator: a configuration it cannot represent.
    SPACEKIT_ERROR_BAD_CONFIG = 16,
    /// Buddy allocator: the page is already free (double free); ext4: the
    /// block or inode is already free.
    SPACEKIT_ERROR_ALREADY_FREE = 17,
    /// Buddy allocator: a refcounted free of a page with no reference.
    SPACEKIT_ERROR_NOT_REFERENCED = 18,
    /// Buddy allocator: a frozen free of a page that still has references.
    SPACEKIT_ERROR_REFERENCED = 19,
    /// Buddy allocator: a reference count would pass its 24-bit limit.
    SPACEKIT_ERROR_REFCOUNT_OVERFLOW = 20,
    /// Buddy allocator: `alloc_contig_range` met a page that is not free.
    /// ext4: another program has the image open (for writing, or for
    /// reading when this open is read-write), or a loop device is attached
    /// to it (read-write opens).
    SPACEKIT_ERROR_BUSY = 21,
    /// ext4: a path inside the image that is not valid UTF-8 (and, outside
    /// Unix, an image file name that is not).
    SPACEKIT_ERROR_INVALID_UTF8 = 22,
    /// ext4: an operating-system I/O error.
    SPACEKIT_ERROR_IO = 23,
    /// ext4: the image is not a valid ext4 file system.
    SPACEKIT_ERROR_CORRUPT = 24,
    /// ext4: a feature spacekit does not handle (or unknown feature bits).
    SPACEKIT_ERROR_UNSUPPORTED = 25,
    /// ext4: a change asked of an image opened read-only.
    SPACEKIT_ERROR_READ_ONLY = 26,
    /// ext4: metadata the change would rewrite fails its checksum.
    SPACEKIT_ERROR_BAD_CHECKSUM = 27,
    /// ext4: a complete redo log is pending (open read-write to replay it),
    /// or a redo log that belongs to another file system.
    SPACEKIT_ERROR_REDO_LOG = 28,
    /// ext4: a path that does not start with `/`.
    SPACEKIT_ERROR_NOT_ABSOLUTE = 29,
    /// ext4: a path component that does not exist (ENOENT).
    SPACEKIT_ERROR_NO_ENTRY = 30,
    /// ext4: a path component, other than the last, that is not a directory.
    SPACEKIT_ERROR_NOT_A_DIRECTORY = 31,
    /// ext4: a path component longer than 255 bytes.
    SPACEKIT_ERROR_NAME_TOO_LONG = 32,
    /// ext4: a file operation on something other than a regular file.
    SPACEKIT_ERROR_NOT_A_REGULAR_FILE = 33,
    /// ext4: a create whose name already exists.
    SPACEKIT_ERROR_EXISTS = 34,
    /// ext4: a size past the largest file size.
    SPACEKIT_ERROR_FILE_TOO_BIG = 35,
    /// ext4: no group has a free inode.
    SPACEKIT_ERROR_NO_FREE_INODES = 36,
    /// ext4: freeing a block that holds file-system metadata.
    SPACEKIT_ERROR_METADATA_BLOCK = 37,
    /// A bug inside spacekit (a caught panic); the handle involved should
    /// not be used again except to free it.
    SPACEKIT_ERROR_INTERNAL = 38,
}

use spacekit_status::*;

/// The status type the Rust side works with: `Ok(())` or a code.
pub(crate) type Res = Result<(), spacekit_status>;

/// Runs `f`, catching a panic (a bug) as `SPACEKIT_ERROR_INTERNAL` so that
/// nothing unwinds into C.
#[inline(always)]
pub(crate) fn guard(f: impl FnOnce() -> Res) -> spacekit_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SPACEKIT_OK,
        Ok(Err(e)) => e,
        Err(_) => SPACEKIT_ERROR_INTERNAL,
    }
}

/// A shared slice from a C pointer and element count; NULL is accepted
/// only for an empty slice.
///
/// # Safety
/// `ptr` must be NULL or valid for reads of `len` elements for `'a`, and
/// not written through another pointer meanwhile.
#[inline(always)]
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], spacekit_status> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(SPACEKIT_ERROR_NULL_POINTER);
    }
    if !ptr.is_aligned() {
        return Err(SPACEKIT_ERROR_INVALID_ARGUMENT);
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(SPACEKIT_ERROR_TOO_LARGE);
    }
    // SAFETY: non-null, aligned, the byte size fits in isize (checked
    // above); validity for `len` reads is the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A mutable slice from a C pointer and element count; NULL is accepted
/// only for an empty slice.
///
/// # Safety
/// `ptr` must be NULL or valid for reads and writes of `len` elements for
/// `'a`, and not accessed through another pointer meanwhile.
#[inline(always)]
pub(crate) unsafe fn slice_mut<'a, T>(
    ptr: *mut T,
    len: usize,
) -> Result<&'a mut [T], spacekit_status> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(SPACEKIT_ERROR_NULL_POINTER);
    }
    if !ptr.is_aligned() {
        return Err(SPACEKIT_ERROR_INVALID_ARGUMENT);
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(SPACEKIT_ERROR_TOO_LARGE);
    }
    // SAFETY: non-null, aligned, the byte size fits in isize (checked
    // above); validity and exclusivity are the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The handle behind a C pointer, shared.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `T` from this library, not
/// used mutably elsewhere meanwhile.
#[inline(always)]
pub(crate) unsafe fn handle<'a, T>(ptr: *const T) -> Result<&'a T, spacekit_status> {
    // SAFETY: a non-null pointer is a live handle (the caller's contract).
    unsafe { ptr.as_ref() }.ok_or(SPACEKIT_ERROR_NULL_POINTER)
}

/// The handle behind a C pointer, exclusive.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `T` from this library, not
/// used elsewhere meanwhile.
#[inline(always)]
pub(crate) unsafe fn handle_mut<'a, T>(ptr: *mut T) -> Result<&'a mut T, spacekit_status> {
    // SAFETY: a non-null pointer is a live handle used only here (the
    // caller's contract).
    unsafe { ptr.as_mut() }.ok_or(SPACEKIT_ERROR_NULL_POINTER)
}

/// Checks that an out-pointer is not NULL (before any change is made).
#[inline(always)]
pub(crate) fn need<T>(ptr: *mut T) -> Res {
    if ptr.is_null() {
        Err(SPACEKIT_ERROR_NULL_POINTER)
    } else {
        Ok(())
    }
}

/// Stores `value` through an out-pointer.
///
/// # Safety
/// `ptr` must be NULL or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn put<T>(ptr: *mut T, value: T) -> Res {
    need(ptr)?;
    // SAFETY: non-null, and valid for a write (the caller's contract).
    unsafe { ptr.write(value) };
    Ok(())
}

/// Stores `value` through an optional out-pointer (NULL: not wanted).
///
/// # Safety
/// `ptr` must be NULL or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn put_opt<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: non-null, and valid for a write (the caller's contract).
        unsafe { ptr.write(value) };
    }
}

/// Moves `value` to the heap and stores the pointer through `out`.
///
/// # Safety
/// `out` must be valid for a write of a pointer (checked non-null first).
pub(crate) unsafe fn put_box<T>(out: *mut *mut T, value: T) -> Res {
    need(out)?;
    let b = try_box(value)?;
    // SAFETY: `out` is non-null and valid for a write (the caller's
    // contract).
    unsafe { out.write(Box::into_raw(b)) };
    Ok(())
}

/// `Box::new`, with allocation failure as `SPACEKIT_ERROR_NO_MEMORY`
/// instead of an abort.
fn try_box<T>(value: T) -> Result<Box<T>, spacekit_status> {
    let layout = std::alloc::Layout::new::<T>();
    if layout.size() == 0 {
        return Ok(Box::new(value));
    }
    // SAFETY: the layout has a nonzero size.
    let p = unsafe { std::alloc::alloc(layout) } as *mut T;
    if p.is_null() {
        return Err(SPACEKIT_ERROR_NO_MEMORY);
    }
    // SAFETY: `p` is a fresh allocation with `T`'s layout; writing the
    // value initialises it, and Box::from_raw takes it over with the same
    // global allocator and layout.
    unsafe {
        p.write(value);
        Ok(Box::from_raw(p))
    }
}

/// Checks that `bytes` could be allocated now (a probe before a library
/// call that allocates that much and would abort on failure).
pub(crate) fn probe_alloc(bytes: usize) -> Res {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes)
        .map_err(|_| SPACEKIT_ERROR_NO_MEMORY)
}

/// Drops a handle made by [`put_box`]; NULL is a no-op.
///
/// # Safety
/// `ptr` must be NULL or a handle from [`put_box`] not freed before.
pub(crate) unsafe fn drop_box<T>(ptr: *mut T) -> Res {
    if !ptr.is_null() {
        // SAFETY: a live handle from Box::into_raw, freed once (the
        // caller's contract).
        drop(unsafe { Box::from_raw(ptr) });
    }
    Ok(())
}

/// A static, NUL-terminated description of a status code. Unknown codes
/// give `"unknown spacekit status code"`. Never NULL; the string must not
/// be freed.
#[no_mangle]
pub extern "C" fn spacekit_strerror(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        0 => b"success\0",
        1 => b"not found\0",
        2 => b"a required pointer argument is NULL\0",
        3 => b"invalid argument\0",
        4 => b"index or range out of range\0",
        5 => b"lengths do not match\0",
        6 => b"alignment is not a power of two (or mask not 2^k - 1)\0",
        7 => b"zero length\0",
        8 => b"size too large\0",
        9 => b"output buffer too small\0",
        10 => b"out of memory\0",
        11 => b"no free space\0",
        12 => b"range is occupied\0",
        13 => b"page size is not a power of two\0",
        14 => b"order above the largest order\0",
        15 => b"block not aligned to its order\0",
        16 => b"bad allocator configuration\0",
        17 => b"already free\0",
        18 => b"page has no reference\0",
        19 => b"page still has references\0",
        20 => b"reference count overflow\0",
        21 => b"page is not free\0",
        22 => b"path is not valid UTF-8\0",
        23 => b"I/O error\0",
        24 => b"corrupt ext4 image\0",
        25 => b"unsupported feature\0",
        26 => b"image is open read-only\0",
        27 => b"metadata checksum mismatch\0",
        28 => b"redo log pending or mismatched\0",
        29 => b"path is not absolute\0",
        30 => b"no such file or directory\0",
        31 => b"not a directory\0",
        32 => b"name too long\0",
        33 => b"not a regular file\0",
        34 => b"file exists\0",
        35 => b"file too big\0",
        36 => b"no free inodes\0",
        37 => b"block holds file-system metadata\0",
        38 => b"internal error (a bug in spacekit)\0",
        _ => b"unknown spacekit status code\0",
    };
    s.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_code_has_its_own_message() {
        let mut seen = std::collections::HashSet::new();
        for code in 0..=SPACEKIT_ERROR_INTERNAL as i32 {
            // SAFETY: spacekit_strerror returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(spacekit_strerror(code)) };
            assert!(seen.insert(s.to_owned()), "code {code} repeats {s:?}");
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(spacekit_strerror(-1)) };
        assert_eq!(unknown.to_str(), Ok("unknown spacekit status code"));
    }

    #[test]
    fn slices_are_checked_before_they_are_made() {
        let words = [1u64, 2, 3];
        let odd = words.as_ptr().cast::<u8>().wrapping_add(4).cast::<u64>();
        // SAFETY: every call below is refused before the pointer is read,
        // or asks for no element.
        unsafe {
            assert_eq!(slice::<u64>(std::ptr::null(), 0), Ok(&[][..]));
            assert_eq!(slice(odd, 0), Ok(&[][..]));
            assert_eq!(
                slice::<u64>(std::ptr::null(), 1),
                Err(SPACEKIT_ERROR_NULL_POINTER)
            );
            assert_eq!(slice(odd, 2), Err(SPACEKIT_ERROR_INVALID_ARGUMENT));
            assert_eq!(
                slice(words.as_ptr(), usize::MAX / 8 + 1),
                Err(SPACEKIT_ERROR_TOO_LARGE)
            );
            assert_eq!(
                slice_mut::<u64>(std::ptr::null_mut(), 1),
                Err(SPACEKIT_ERROR_NULL_POINTER)
            );
            assert_eq!(
                slice_mut(odd.cast_mut(), 1),
                Err(SPACEKIT_ERROR_INVALID_ARGUMENT)
            );
        }
        // SAFETY: `words` holds 3 elements.
        assert_eq!(unsafe { slice(words.as_ptr(), 3) }, Ok(&words[..]));
    }

    #[test]
    fn a_panic_becomes_a_code() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let st = guard(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(st, SPACEKIT_ERROR_INTERNAL);
    }
}
