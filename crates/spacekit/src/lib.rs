//! spacekit: the fast paths memory and storage managers are built from.
//!
//! * [`bitmap`] — word-level bit search over `u64` words: next/previous set or
//!   clear bit, counts, runs, and the aligned search for `nr` consecutive clear
//!   bits (Linux's `bitmap_find_next_zero_area_off`) that reads the bitmap once
//!   instead of restarting per collision. AVX2 with a scalar fallback.
//! * [`crc32c`] — raw and standard CRC-32C, and updates in O(log n): `shift`,
//!   `combine`, `flip_range` (a run of bits flipped) and `splice` (a region
//!   rewritten). PCLMULQDQ with a portable fallback; bulk CRC from `crc-fast`.
//! * [`dirty`] — dirty-page logs: an atomic dirty bitmap marked a word at a
//!   time, and dirty bitmap → `MemoryRangeTable` (Cloud Hypervisor's wire
//!   format) without a step per dirty page.
//! * [`rangetree`] — Linux's maple tree in userspace: non-overlapping `u64`
//!   ranges with O(log n) lookup and free-gap search (`mas_empty_area`), and
//!   a `dup` that copies the node arrays instead of re-inserting entries
//!   (fork's `__mt_dup`, seed 002).
//! * [`buddy`] — a buddy page allocator whose contiguous frees (CMA's
//!   `free_contig_range`, seed 003) prepare every page in one vectorised pass
//!   and free the range in its largest aligned chunks.
//! * [`freespace`] — a free-space index kept in step with a bitmap:
//!   first fit from a goal, size-class best fit and largest free run, with
//!   alignment on absolute numbers, in O(log n) (seed 001's per-group
//!   free-space tree).
//! * [`checked_bitmap`] — a bitmap whose CRC-32C (ext4's bitmap checksum) every
//!   update keeps current.
//!
//! The crate is `#![no_std]` with `alloc`. Default features: `std` (runtime CPU
//! feature detection) and `crc-fast` (bulk CRC-32C from the `crc-fast` crate;
//! without it a portable slicing-by-8 path is used).
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod arch;
pub mod bitmap;
pub mod buddy;
pub mod checked_bitmap;
pub mod crc32c;
pub mod dirty;
#[cfg(feature = "ext4")]
pub mod ext4;
pub mod freespace;
pub mod rangetree;
#[cfg(test)]
mod test_rng;

#[doc(hidden)]
#[path = "testing.rs"]
pub mod __testing;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
