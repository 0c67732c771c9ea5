//! spacekit: the fast paths memory and storage managers are built from.
//!
//! * [`bitmap`] — word-level bit search over `u64` words: next/previous set or
//!   clear bit, counts, runs, and the aligned search for `nr` consecutive clear
//!   bits (Linux's `bitmap_find_next_zero_area_off`) that reads the bitmap once
//!   instead of restarting per collision. AVX2 with a scalar fallback.
//! * [`arch`] — the CPU-dispatch layer: features detected once and cached,
//!   and the [`arch::Level`] token (scalar, AVX2, room for AVX-512) that
//!   `bitmap`, `crc32c` and `dirty` take to choose their code paths.
//! * [`crc32c`] — raw and standard CRC-32C, and updates in O(log n): `shift`,
//!   `combine`, `flip_range` (a run of bits flipped) and `splice` (a region
//!   rewritten). PCLMULQDQ with a portable fallback; bulk CRC in three `crc32` streams
//!   (SSE4.2), from `crc-fast`'s 512-bit folds from 512 bytes on CPUs with
//!   AVX-512 and VPCLMULQDQ, else from `crc-fast`.
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
//! * [`checked_bitmap`] — a bitmap, its CRC-32C (ext4's bitmap checksum) and
//!   optionally its free-space index, every update keeping all three in step.
//! * `kvm` (feature `kvm`, Linux x86_64) — a real KVM guest that dirties
//!   memory on purpose, its dirty log, cleared log and dirty ring harvested
//!   with the VMM's own log into one table, and a pre-copy live migration.
//! * [`migration`] — Cloud Hypervisor's live-migration stream: sender,
//!   validating receiver, and spacekit's page-hash check.
//! * [`snapshot`] — Firecracker-style memory snapshots: a full snapshot as
//!   a sparse file at guest-physical offsets (zero pages are holes), diffs
//!   of the dirty ranges with their own table, and merging, CRC-checked
//!   and tied to their base.
//! * `ext4` (feature `ext4`) — ext4 images on disk: superblock and group
//!   descriptors, every checksum as e2fsprogs computes it, free extents, and
//!   crash-safe block and inode allocation through a redo log.
//!
//! # Conventions
//!
//! * **Alignment** is a power-of-two count of units (1 = none) with an
//!   optional offset: a start `s` is aligned when `(s + offset) % align == 0`
//!   ([`bitmap::Bits::find_clear_area`], [`freespace::FreeSpaceIndex`],
//!   [`rangetree::RangeTree::find_gap_aligned`], ext4's allocation requests).
//!   Any other alignment, 0 included, is a typed error. The kernel's mask
//!   form (`align_mask = align - 1`) stays available as
//!   [`bitmap::Bits::find_clear_area_mask`], the drop-in for
//!   `bitmap_find_next_zero_area_off`.
//! * **Errors** are typed, `#[non_exhaustive]` and implement
//!   [`core::error::Error`]; a refused call changes nothing.
//!
//! # Features
//!
//! The crate is `#![no_std]` with `alloc`. Default features:
//!
//! * `std` — runtime CPU feature detection (without it, the SIMD level is
//!   fixed at compile time by `target_feature`), `LockedBuddyAllocator`;
//! * `crc-fast` — bulk CRC-32C from the `crc-fast` crate where the CPU
//!   lacks SSE4.2 or PCLMULQDQ, for inputs from 16 MiB, and from 512 bytes
//!   on CPUs with AVX-512 and VPCLMULQDQ (implies `std`;
//!   without it a portable slicing-by-8 path is used there, and the
//!   `crc32` streams at every size);
//! * `rayon` — the parallel dirty-bitmap scan
//!   ([`dirty::Scan::parallel`]) on rayon's thread pool (implies `std`).
//!
//! Off by default: `ext4` (implies `std`) — the `ext4` module;
//! `vm-memory` (implies `std`) — `dirty::VmmBitmap`, vm-memory's bitmap
//! traits over the dirty bitmap; `kvm` (implies `vm-memory`; Linux x86_64)
//! — the `kvm` module, on kvm-ioctls and kvm-bindings; `testing` — the
//! `testing` module of hooks for tests, benchmarks and fuzzers (forcing a
//! SIMD level, checking a structure's invariants), outside the stable API and
//! absent from a default build.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
#[cfg_attr(docsrs, doc(cfg(feature = "ext4")))]
pub mod ext4;
pub mod freespace;
#[cfg(all(feature = "kvm", target_os = "linux", target_arch = "x86_64"))]
#[cfg_attr(docsrs, doc(cfg(feature = "kvm")))]
pub mod kvm;
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod migration;
pub mod rangetree;
#[cfg(all(feature = "std", unix))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "std", unix))))]
pub mod snapshot;
#[cfg(test)]
mod test_rng;

#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
