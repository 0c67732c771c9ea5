//! C ABI for spacekit: `libspacekit.so` / `libspacekit.a` and
//! `include/spacekit.h` (generated from this crate by cbindgen).
//!
//! Conventions every function here follows:
//!
//! * the name starts with `spacekit_`;
//! * the return value is a [`spacekit_status`]: `SPACEKIT_OK` (0) on success,
//!   `SPACEKIT_NOT_FOUND` when a search found nothing (not an error: the
//!   outputs are left untouched), a `SPACEKIT_ERROR_*` code otherwise;
//!   [`spacekit_strerror`] names each code;
//! * results come back through out-pointers, which must not be NULL unless
//!   the function says so;
//! * pointers point to objects of their type, aligned for it (a misaligned
//!   array of words or ranges is `SPACEKIT_ERROR_INVALID_ARGUMENT`); caller
//!   memory is borrowed for the call only, and two arguments may overlap
//!   only when the call reads both;
//! * a refused call changes nothing;
//! * nothing unwinds into C: null pointers, lengths that disagree,
//!   out-of-range values and non-UTF-8 paths inside an ext4 image are
//!   error codes, and a panic
//!   (a bug) is caught and reported as `SPACEKIT_ERROR_INTERNAL`.
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

mod bitmap;
mod buddy;
mod crc;
mod dirty;
#[cfg(feature = "ext4")]
mod ext4;
#[cfg(feature = "ext4")]
mod ext4_files;
#[cfg(feature = "ext4")]
mod ext4_populate;
mod ffi;
mod rangetree;

pub use ffi::{spacekit_status, spacekit_strerror};

// The thread rules the header states hold in Rust's terms: a handle that
// C calls from one thread at a time, under a mutex, may be called from
// different threads (it is `Send`); the dirty log, called from several
// threads at once through a shared pointer, is `Sync` too.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<bitmap::spacekit_freespace>();
    send::<buddy::spacekit_buddy>();
    send::<crc::spacekit_checked_bitmap>();
    send::<dirty::spacekit_range_table>();
    send::<rangetree::spacekit_rangetree>();
    #[cfg(feature = "ext4")]
    send::<ext4::spacekit_ext4>();
    send_sync::<dirty::spacekit_dirty_bitmap>();
};
