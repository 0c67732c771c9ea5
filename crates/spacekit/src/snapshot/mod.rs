//! Firecracker-style memory snapshots: a guest's whole memory to a sparse
//! file ([`write_full`]), the ranges dirtied since then to a diff that
//! carries its own range table ([`write_diff`]), and a full snapshot and
//! its diffs merged back into one ([`merge`]), each file checked by CRC-32C
//! and each diff tied to the snapshot it applies to.
//!
//! Memory is any [`MemorySource`](crate::migration::MemorySource) (a VMM's
//! guest mapping, a `Vec<u8>`); the dirty ranges are a
//! [`MemoryRangeTable`](crate::dirty::MemoryRangeTable), as the dirty-log
//! scan builds it each round.
//!
//! # Files
//!
//! Every integer is little-endian. Both kinds share one 128-byte header:
//!
//! | offset | bytes | field | full | diff |
//! |---|---|---|---|---|
//! | 0 | 8 | `magic` | `"SKSNAP\x1a\n"` ([`MAGIC`]) | same |
//! | 8 | 2 | `version` | 1 ([`VERSION`]) | 1 |
//! | 10 | 2 | `kind` | 1 | 2 |
//! | 12 | 4 | `page_size` | power of two, 512 B to 2 MiB | same |
//! | 16 | 8 | `memory_size` | a multiple of `page_size` | same |
//! | 24 | 16 | `base_id` | zero | the [`SnapshotId`] it applies to |
//! | 40 | 8 | `range_count` | 0 | ranges in the table |
//! | 48 | 8 | `data_offset` | 0 | `128 + 16 * range_count`, rounded up to a page |
//! | 56 | 8 | `data_bytes` | `memory_size` | the ranges' total length |
//! | 64 | 4 | `data_crc` | CRC-32C of all memory | CRC-32C of the data region |
//! | 68 | 4 | `flags` | 0 | 0 |
//! | 72 | 52 | reserved | zero | zero |
//! | 124 | 4 | `header_crc` | CRC-32C of the trailer block without this field | CRC-32C of bytes `0..data_offset` without this field |
//!
//! (CRC-32C is the standard one, [`crate::crc32c::checksum`].)
//!
//! **A full snapshot** is the memory itself, at guest-physical offsets:
//! file bytes `0..memory_size` are guest memory `0..memory_size`, as
//! Firecracker's full snapshot memory file is, so a VMM maps it with one
//! `mmap` of `memory_size` bytes at offset 0. Every all-zero page is a
//! hole: the file is sized first and zero pages are never written, so it
//! occupies on disk only its non-zero pages (`du`, `st_blocks`). After the
//! memory comes a 4 KiB **trailer**: the header, then zeros (the file is
//! `memory_size + 4096` bytes). The metadata is in the same file (one
//! rename makes a snapshot appear whole) and out of the way of the memory's
//! offsets; cutting the file to `memory_size` gives a plain image. A file
//! without the trailer (another tool's memory image, a multiple of 4 KiB)
//! is still read as a full snapshot of its length with 4 KiB pages, its
//! CRC computed by reading it.
//!
//! **A diff** starts with the header, then its **range table** — packed
//! `{gpa: u64, length: u64}` entries, Cloud Hypervisor's migration wire
//! form of a [`MemoryRangeTable`](crate::dirty::MemoryRangeTable) — each
//! range non-empty, page-aligned, inside memory, in ascending order and
//! not touching the one before; then zeros up to `data_offset`, a page
//! boundary. The **data** follows: each range's bytes in table order, so
//! each range starts on a page boundary; its zero pages are holes. The
//! file is exactly `data_offset + data_bytes` bytes. Zero pages need no
//! flag: the table says which pages the diff carries, and a hole reads as
//! zeros, so a merge writes a zero page where the diff has one. (In
//! Firecracker's diff memory file, which has no table, a dirty page that
//! became zero and a page that was not dirty are the same hole.)
//!
//! **Ids** ([`SnapshotId`], 16 bytes): a full snapshot's is derived from
//! its size and memory CRC alone, so it is the same however the file was
//! made (written, merged, or another tool's image); a diff's from its
//! header CRC, which covers its base's id, its table and its data CRC. A
//! diff names the snapshot it was taken against in `base_id`: the full
//! snapshot for the first diff, the diff before it for the next. [`merge`]
//! refuses a diff whose base is not the snapshot before it in the chain.
//!
//! # Crash safety
//!
//! [`write_full`], [`write_diff`] and [`merge`] write a temporary file
//! beside the destination (`.NAME.sk-tmp.PID.N`), sync it, rename it over
//! the destination and sync the directory: at any moment the destination
//! is the old file (or absent) or the whole new snapshot. A process
//! killed while writing leaves its temporary file behind; nothing reads
//! it.
//!
//! # Checking
//!
//! Opening a file ([`Snapshot::open`]) checks the header, its CRC, the
//! length and (a diff) the whole table; [`Snapshot::verify`] reads the data
//! and checks its CRC; [`merge`] checks the CRC of everything it reads.
//! [`Snapshot::hash_pages`] gives a full snapshot's page hashes in the
//! form of [`crate::migration::hash_pages`], to compare with the guest's
//! memory through [`crate::migration::diff_pages`].
//!
//! # Zero pages
//!
//! A page is tested a chunk at a time through the bitmap engine's
//! word-skipping search ([`crate::bitmap::Bits::first_set`] on the page's
//! words: AVX2 or AVX-512 where the CPU has it), and a zero page's CRC is
//! advanced by [`crate::crc32c::shift`] without reading it again.
//!
//! Copying holes of the base uses plain reads (which the kernel answers
//! with zeros without touching the disk), not `SEEK_DATA` or
//! `copy_file_range`: the library reaches files through `std` only in
//! this module, and the merge must read every byte of the base anyway to
//! check its CRC.

mod error;
mod file;
mod format;
mod id;
mod io;
mod merge;
mod write;

pub use error::SnapshotError;
pub use file::{info, Snapshot};
pub use format::{
    SnapshotInfo, DEFAULT_PAGE_SIZE, HEADER_BYTES, MAGIC, MAX_PAGE_SIZE, MIN_PAGE_SIZE,
    RANGE_BYTES, TRAILER_BYTES, VERSION,
};
pub use id::{Kind, SnapshotId};
pub use io::remove_temporaries;
pub use merge::{merge, merge_with_progress};
pub use write::{write_diff, write_full};
